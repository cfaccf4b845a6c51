"""
librdkafka (confluent-kafka 2.16) consumers with C{group.protocol=consumer}
(KIP-848) in a kafkatw group, against a real ZooKeeper and broker:

  - three members read a topic: every record is counted exactly once (a
    member counts a batch only once its commit, OffsetCommit v9 at its
    member epoch, succeeded, and seeks back to it otherwise);
  - a member joining and a member closing rebalance incrementally: the
    members that stay keep consuming the partitions they keep.  The longest
    pause of such a member while records flow to every partition is measured
    and printed, beside the same measure for a C{group.protocol=classic}
    group (librdkafka's default eager C{range,roundrobin}) in the same run;
    the other members take L{SLOW_S} over each batch, as an application
    does, so a rebalance that waits for every member to poll shows it;
  - AdminClient.describe_consumer_groups (ConsumerGroupDescribe) shows the
    group as C{CONSUMER}, Stable, with every partition assigned once; a
    classic group is still described as C{CLASSIC}; C{kafkatw consumer-groups
    --describe --members} lists the members of either kind, and C{--state}
    the consumer group's assignor and state;
  - a group of librdkafka members and a kafkatw member (C{group_protocol=
    "consumer"}) counts every record once while members come and go;
  - a regular-expression subscription (C{^logs-.*}) resolved by the broker;
  - a static member's successor takes its partitions; a duplicate instance
    id is refused C{UNRELEASED_INSTANCE_ID};
  - group configs through incremental_alter_configs / describe_configs;
  - the coordinator is killed: the members rejoin the broker that takes
    the group over (kafkatw keeps the membership in memory) and every record
    is still counted once.

One ZooKeeper and one broker serve the tests of the first class, two brokers
the failover test; C{group.consumer.heartbeat.interval.ms} is 500 so that a
rebalance's steps (each a heartbeat) take well under a second.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from click.testing import CliRunner
from twisted.trial import unittest

from kafkatw.cli.main import main as cli_main
from kafkatw.testing import ClassFixture, running_cluster
from tests.interop.group_fixtures import ConfluentMember, TwistedMember, wait_for

PARTITIONS = 6
RECORDS = 600
#: bound of each wait (s)
WAIT_S = 60.0
#: records flow to every partition every this many seconds while pauses are measured
PRODUCE_INTERVAL_S = 0.01
#: the processing time of a batch of the members whose pause is not measured (s)
SLOW_S = 1.5


class Member(ConfluentMember):
    """
    A librdkafka member with C{group.protocol} C{protocol} (C{classic}:
    librdkafka's default eager C{range,roundrobin}, at the broker's KIP-848
    heartbeat cadence) that counts a batch once its commit succeeded
    (L{ConfluentMember}).
    """

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, protocol: str,
                 processing_s: float = 0.0) -> None:
        config: dict[str, Any] = {"group.protocol": protocol, "fetch.wait.max.ms": 50}
        if protocol == "classic":
            config.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})  # the broker's KIP-848 cadence
        super().__init__(name, bootstrap, group, topic, config, processing_s=processing_s)


def kafkatw_member(name: str, bootstrap: str, group: str, topic: str) -> TwistedMember:
    """kafkatw's Twisted consumer with C{group_protocol="consumer"}, counting as L{Member} does."""
    return TwistedMember(name, bootstrap, group, topic, poll_ms=100, group_protocol="consumer", fetch_max_wait_ms=50)


class Flow:
    """A producer thread writing one record to every partition each L{PRODUCE_INTERVAL_S}, until stopped."""

    def __init__(self, bootstrap: str, topic: str, limit_s: float = 90.0) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.topic = topic
        self.limit_s = limit_s
        self.stopped = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + self.limit_s
        while not self.stopped.is_set() and time.monotonic() < deadline:
            for p in range(PARTITIONS):
                self.producer.produce(self.topic, b"x", partition=p)
            self.sent += PARTITIONS
            self.producer.poll(0)
            time.sleep(PRODUCE_INTERVAL_S)

    def stop(self) -> None:
        """Stop producing; every record sent is written once this returns."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        self.thread.join(30)
        if self.producer.flush(30):
            raise AssertionError("records not delivered")


class ConsumerGroupProtocolInteropTests(ClassFixture, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1, overrides={"group.initial.rebalance.delay.ms": "0",
                                                             "group.consumer.heartbeat.interval.ms": "500",
                                                             # test_group_configs sets a 1 s group heartbeat
                                                             "group.consumer.min.heartbeat.interval.ms": "500"})
        cls.broker = cls._cluster.__enter__()[0]
        cls.bootstrap = cls.broker.bootstrap
        from confluent_kafka.admin import AdminClient, NewTopic

        cls.admin = AdminClient({"bootstrap.servers": cls.bootstrap})
        for future in cls.admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in
                                               ("once", "pause-consumer", "pause-classic", "described", "mixed",
                                                                "logs-a", "logs-b", "other-c")]).values():
            future.result(30)

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def members(self, group: str, topic: str, count: int, protocol: str = "consumer",
                processing_s: float = 0.0) -> list[Member]:
        members = []
        for i in range(count):
            member = Member(f"{group}-{i}", self.bootstrap, group, topic, protocol, processing_s)
            self.addCleanup(member.close)
            members.append(member)
        return members

    def test_every_record_once(self) -> None:
        """Three members share the topic; a fourth joins half-way: each record is counted by exactly one member."""
        from confluent_kafka import Producer

        members = self.members("once-group", "once", 3)
        wait_for(lambda: sorted(p for m in members for p in m.owned()) == list(range(PARTITIONS))
                 and all(len(m.owned()) == 2 for m in members), WAIT_S, "the partitions split among three members")
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for i in range(RECORDS // 2):
            producer.produce("once", b"%d" % i, partition=i % PARTITIONS)
        producer.flush(30)
        late = Member("once-group-3", self.bootstrap, "once-group", "once", "consumer")
        self.addCleanup(late.close)
        members.append(late)
        for i in range(RECORDS // 2, RECORDS):
            producer.produce("once", b"%d" % i, partition=i % PARTITIONS)
        producer.flush(30)

        def counted() -> list[tuple[int, int]]:
            return sorted(r for m in members for r in m.counted)

        wait_for(lambda: len(counted()) >= RECORDS, WAIT_S, "every record counted")
        time.sleep(1.0)  # nothing more arrives
        self.assertEqual(counted(), sorted((i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS)))
        wait_for(lambda: late.owned(), WAIT_S, "the fourth member's partitions")

    def measure(self, protocol: str) -> tuple[float, float]:
        """
        Two members consume a steady flow; a third joins, then one of the
        first two closes.

        @return: the longest pause (s) of the member that stays throughout
            while the third joins, and while the other closes.
        """
        group, topic = f"pause-{protocol}-group", f"pause-{protocol}"
        stays = self.members(group, topic, 1, protocol)[0]
        # the other members take SLOW_S over each batch: a rebalance that waits for every member waits for them
        leaves = Member(f"{group}-slow", self.bootstrap, group, topic, protocol, SLOW_S)
        self.addCleanup(leaves.close)
        wait_for(lambda: len(stays.owned()) + len(leaves.owned()) == PARTITIONS and stays.owned() and leaves.owned(),
                 WAIT_S, f"{protocol}: two members own the partitions")
        flow = Flow(self.bootstrap, topic)
        self.addCleanup(flow.stop)
        wait_for(lambda: len(stays.arrivals) > 50, WAIT_S, f"{protocol}: records flowing")
        time.sleep(2.0)
        start = time.monotonic()
        joining = Member(f"{group}-2", self.bootstrap, group, topic, protocol, SLOW_S)
        self.addCleanup(joining.close)
        wait_for(lambda: len(joining.owned()) == PARTITIONS // 3 and len(stays.owned()) == PARTITIONS // 3,
                 WAIT_S, f"{protocol}: the third member's share")
        time.sleep(3.0)
        joined = time.monotonic()
        join_pause = stays.longest_pause_s(start, joined)
        leaves.close()
        wait_for(lambda: len(stays.owned()) + len(joining.owned()) == PARTITIONS, WAIT_S,
                 f"{protocol}: the closed member's partitions taken over")
        time.sleep(3.0)
        leave_pause = stays.longest_pause_s(joined, time.monotonic())
        flow.stop()
        return join_pause, leave_pause

    def test_incremental_rebalance_pause(self) -> None:
        """
        A member that keeps its partitions is not stopped while another joins or leaves
        (KIP-848); the classic eager protocol stops every member.  Both are measured and printed.
        """
        consumer_join, consumer_leave = self.measure("consumer")
        classic_join, classic_leave = self.measure("classic")
        print(f"\nlongest pause of a staying member: group.protocol=consumer join {consumer_join * 1000:.0f} ms, "
              f"leave {consumer_leave * 1000:.0f} ms; group.protocol=classic join {classic_join * 1000:.0f} ms, "
              f"leave {classic_leave * 1000:.0f} ms")
        self.assertLess(max(consumer_join, consumer_leave), 2.0)

    def test_describe_consumer_groups(self) -> None:
        """describe_consumer_groups (ConsumerGroupDescribe) shows the KIP-848 group's type, state and assignment."""
        from confluent_kafka import ConsumerGroupState, ConsumerGroupType

        members = self.members("described-group", "described", 2)
        classic = self.members("described-classic", "described", 1, protocol="classic")[0]
        wait_for(lambda: sum(len(m.owned()) for m in members) == PARTITIONS and all(m.owned() for m in members)
                 and classic.owned(), WAIT_S, "both groups assigned")

        def described(group: str) -> Any:
            return self.admin.describe_consumer_groups([group])[group].result(30)

        wait_for(lambda: described("described-group").state == ConsumerGroupState.STABLE, WAIT_S, "a Stable group")
        group = described("described-group")
        self.assertEqual(group.type, ConsumerGroupType.CONSUMER)
        self.assertEqual(len(group.members), 2)
        assigned = sorted(tp.partition for m in group.members for tp in m.assignment.topic_partitions)
        self.assertEqual(assigned, list(range(PARTITIONS)))
        self.assertEqual({tp.partition for m in group.members for tp in m.assignment.topic_partitions
                          if m.client_id == "described-group-0"}, members[0].owned())
        self.assertEqual(described("described-classic").type, ConsumerGroupType.CLASSIC)

        # kafkatw consumer-groups --describe shows either kind with the same columns
        for name, count in (("described-group", 2), ("described-classic", 1)):
            result = CliRunner().invoke(cli_main, ["consumer-groups", "--bootstrap-server", self.bootstrap,
                                                   "--describe", "--group", name, "--members"])
            self.assertEqual(result.exit_code, 0, result.output)
            rows = [line.split() for line in result.output.splitlines() if line.startswith(name)]
            self.assertEqual(len(rows), count, result.output)
            self.assertEqual(sum(int(r[-1]) for r in rows), PARTITIONS, result.output)
        result = CliRunner().invoke(cli_main, ["consumer-groups", "--bootstrap-server", self.bootstrap,
                                               "--describe", "--group", "described-group", "--state"])
        self.assertEqual(result.exit_code, 0, result.output)
        row = next(line for line in result.output.splitlines() if line.startswith("described-group")).split()
        self.assertEqual(row[-3:], ["uniform", "Stable", "2"], result.output)

    def test_librdkafka_and_kafkatw_members(self) -> None:
        """
        A group of two librdkafka members and one kafkatw member: every record
        is counted once; the kafkatw member keeps consuming while a librdkafka
        member joins and one closes (its longest pause printed).
        """
        ours = kafkatw_member("mixed-kafkatw", self.bootstrap, "mixed-group", "mixed")
        self.addCleanup(ours.close)
        first = self.members("mixed-group", "mixed", 1)[0]
        wait_for(lambda: len(ours.owned()) == 3 and len(first.owned()) == 3, WAIT_S, "a two-member group")
        flow = Flow(self.bootstrap, "mixed", limit_s=60.0)
        self.addCleanup(flow.stop)
        wait_for(lambda: len(ours.arrivals) > 20, WAIT_S, "records flowing to the kafkatw member")
        start = time.monotonic()
        joining = Member("mixed-group-late", self.bootstrap, "mixed-group", "mixed", "consumer")
        self.addCleanup(joining.close)
        wait_for(lambda: len(joining.owned()) == 2 and len(ours.owned()) == 2, WAIT_S, "three members")
        time.sleep(2.0)
        first.close()
        wait_for(lambda: len(joining.owned()) + len(ours.owned()) == PARTITIONS, WAIT_S, "two members again")
        time.sleep(2.0)
        pause = ours.longest_pause_s(start, time.monotonic())
        flow.stop()
        members = [ours, first, joining]

        def counted() -> list[tuple[int, int]]:
            return sorted(r for m in members for r in m.counted)

        wait_for(lambda: len(counted()) >= flow.sent, WAIT_S, "every record counted")
        time.sleep(1.0)
        self.assertEqual(counted(), sorted((p, o) for p in range(PARTITIONS) for o in range(flow.sent // PARTITIONS)))
        print(f"\nlongest pause of the kafkatw member (KIP-848) while a librdkafka member joins and another "
              f"leaves: {pause * 1000:.0f} ms")
        self.assertLess(pause, 2.0)

    def test_regex_subscription(self) -> None:
        """A librdkafka member subscribed to ^logs-.* gets the partitions of the matching topics only."""
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "regex-group",
                             "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        self.addCleanup(consumer.close)
        consumer.subscribe(["^logs-.*"])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and len(consumer.assignment()) < 2 * PARTITIONS:
            consumer.poll(0.1)
        self.assertEqual(sorted({(tp.topic, tp.partition) for tp in consumer.assignment()}),
                         [(t, p) for t in ("logs-a", "logs-b") for p in range(PARTITIONS)])

    def test_group_configs(self) -> None:
        """confluent-kafka's incremental_alter_configs and describe_configs on a GROUP resource."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        resource = ConfigResource(ResourceType.GROUP, "configured-group", incremental_configs=[
            ConfigEntry("consumer.heartbeat.interval.ms", "1000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("share.delivery.count.limit", "4", incremental_operation=AlterConfigOpType.SET)])
        for future in self.admin.incremental_alter_configs([resource]).values():
            future.result(30)
        [future] = self.admin.describe_configs([ConfigResource(ResourceType.GROUP, "configured-group")]).values()
        described = {name: entry.value for name, entry in future.result(30).items()}
        self.assertEqual((described["consumer.heartbeat.interval.ms"], described["share.delivery.count.limit"],
                          described["consumer.session.timeout.ms"]), ("1000", "4", "45000"))
        bad = ConfigResource(ResourceType.GROUP, "configured-group", incremental_configs=[
            ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)])
        with self.assertRaises(Exception) as raised:
            for future in self.admin.incremental_alter_configs([bad]).values():
                future.result(30)
        self.assertIn("Unknown group config name", str(raised.exception))

    def test_static_member(self) -> None:
        """
        A static member (group.instance.id) closing leaves for now (epoch -2); its successor takes its
        partitions over at once; a third process with the instance id is refused UNRELEASED_INSTANCE_ID.
        """
        from confluent_kafka import Consumer

        def member() -> Any:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "static-group",
                                 "group.protocol": "consumer", "group.instance.id": "instance-1"})
            consumer.subscribe(["described"])
            return consumer

        def poll_until_assigned(consumer: Any) -> None:
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and len(consumer.assignment()) < PARTITIONS:
                consumer.poll(0.1)

        first = member()
        poll_until_assigned(first)
        first.close()
        [left] = self.admin.describe_consumer_groups(["static-group"])["static-group"].result(30).members
        self.assertEqual(left.group_instance_id, "instance-1")  # kept, with its partitions, until its session ends
        second = member()
        self.addCleanup(second.close)
        poll_until_assigned(second)
        self.assertEqual(len(second.assignment()), PARTITIONS)
        third = member()
        self.addCleanup(third.close)
        deadline, error = time.monotonic() + WAIT_S, None
        while time.monotonic() < deadline and error is None:
            message = third.poll(0.1)
            if message is not None and message.error():
                error = message.error()
        self.assertIn("instance ID is still used", str(error))


class CoordinatorFailoverInteropTests(ClassFixture, unittest.TestCase):
    """
    kafkatw keeps a KIP-848 group's membership in its coordinator's memory:
    when the coordinator is killed (SIGKILL), the broker that takes the
    group's C{__consumer_offsets} partition over does not know the group, and
    answers the members' heartbeats C{UNKNOWN_MEMBER_ID}; librdkafka's
    members rejoin there at epoch 0 and go on from the committed offsets,
    every record counted once.
    """

    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=2, overrides={"group.initial.rebalance.delay.ms": "0",
                                                             "group.consumer.heartbeat.interval.ms": "500"})
        cls.brokers = cls._cluster.__enter__()
        cls.bootstrap = ",".join(b.bootstrap for b in cls.brokers)

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def test_members_rejoin_after_the_coordinator_dies(self) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic("moved", PARTITIONS, 2)]).values():
            future.result(30)
        members = [Member(f"moved-{i}", self.bootstrap, "moved-group", "moved", "consumer") for i in range(2)]
        for member in members:
            self.addCleanup(member.close)
        wait_for(lambda: sum(len(m.owned()) for m in members) == PARTITIONS and all(m.owned() for m in members),
                 WAIT_S, "two members assigned")
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all"})

        def produce(start: int, end: int) -> None:
            for i in range(start, end):
                producer.produce("moved", b"x", partition=i % PARTITIONS)
            self.assertEqual(producer.flush(60), 0)

        def counted() -> list[tuple[int, int]]:
            return sorted(r for m in members for r in m.counted)

        produce(0, RECORDS // 2)
        wait_for(lambda: len(counted()) >= RECORDS // 2, WAIT_S, "the first half counted")
        coordinator = admin.describe_consumer_groups(["moved-group"])["moved-group"].result(30).coordinator.id
        self.brokers[coordinator].kill()
        produce(RECORDS // 2, RECORDS)
        wait_for(lambda: len(counted()) >= RECORDS, 2 * WAIT_S, "the second half counted after the move")
        time.sleep(1.0)
        self.assertEqual(counted(), sorted((i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS)))
        group = admin.describe_consumer_groups(["moved-group"])["moved-group"].result(30)
        self.assertNotEqual(group.coordinator.id, coordinator)
        self.assertEqual(len(group.members), 2)
