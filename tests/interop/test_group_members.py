"""
kafkatw's Twisted consumer (L{kafkatw.client.consumer.Consumer} with a
C{group_id}) in one broker-coordinated group with librdkafka
(confluent-kafka) and kafka-python members, against a real broker.

  - A mixed group (the assignor every member offers: C{range}) reads a topic
    in three phases: all members; after the kafka-python member is killed
    (SIGKILL, no LeaveGroup: the group notices at its session timeout); after
    a second kafkatw member joins.  Each member counts a batch only once its
    commit (in its generation) succeeded, and seeks back to it when the
    commit is refused (the group rebalanced), so every record must be counted
    exactly once across members.
    The member is killed while the topic is drained (between phases), so no
    commit of it is in flight.
  - A group of kafkatw, librdkafka and KafkaJS members (KafkaJS 2.2.4 in
    tests/interop/node, installed by scripts/setup.sh; the assignor they share
    is C{roundrobin}) reads a topic in three phases: all members; after the
    KafkaJS member is killed; after a new KafkaJS member joins.  Every record
    is counted exactly once.
  - A C{cooperative-sticky} group of a kafkatw member and a librdkafka member:
    when a second kafkatw member joins, the old members revoke only the
    partitions that move to it (KIP-429), never those they keep.

One ZooKeeper and one broker serve the whole module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from twisted.trial import unittest

from kafkatw.client.consumer_coordinator import ConsumerRebalanceListener
from kafkatw.testing import ClassFixture, running_cluster
from tests.interop import group_fixtures
from tests.interop.group_fixtures import ConfluentMember, Counted, wait_for

PARTITIONS = 6
PER_PHASE = 300
#: A phase's bound (s): a killed member's session timeout plus rebalances fit in it.
PHASE_S = 60.0
SESSION_MS = 6000

KAFKA_PYTHON_MEMBER = r"""
import json, sys
from kafka import KafkaConsumer, TopicPartition, OffsetAndMetadata
from kafka.errors import CommitFailedError, KafkaError
bootstrap, group, topic = sys.argv[1:4]
consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=%d, heartbeat_interval_ms=1000,
                         fetch_max_wait_ms=100)
print(json.dumps({"ready": True}), flush=True)
while True:
    batches = consumer.poll(timeout_ms=200)
    records = [r for rs in batches.values() for r in rs]
    if not records:
        continue
    offsets = {}
    for r in records:
        offsets[TopicPartition(r.topic, r.partition)] = OffsetAndMetadata(r.offset + 1, "", -1)
    try:
        consumer.commit(offsets)
    except (CommitFailedError, KafkaError):
        continue
    print(json.dumps({"records": [[r.partition, r.offset] for r in records]}), flush=True)
""" % SESSION_MS


NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")


class SubprocessMember:
    """
    A member in another process that prints one JSON line per event:
    C{{"records": [[partition, offset], ...]}} for each batch whose commit
    succeeded, C{{"assigned": [...]}} after a join.
    """

    def __init__(self, argv: list[str], cwd: str | None = None) -> None:
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=cwd)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        self.reader.start()

    def events(self) -> list[dict]:
        return [json.loads(line) for line in list(self.lines) if line.strip()]

    def counted(self) -> list[tuple[int, int]]:
        return [tuple(r) for event in self.events() for r in event.get("records", [])]

    def assigned(self) -> list[int] | None:
        """The partitions of its last join, or None before its first."""
        joins = [event["assigned"] for event in self.events() if "assigned" in event]
        return joins[-1] if joins else None

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, the group notices at the session timeout."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.reader.join(10)


def kafkajs_member(bootstrap: str, group: str, topic: str) -> SubprocessMember:
    script = os.path.join(NODE_DIR, "kafkajs_member.js")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "kafkajs")):
        raise AssertionError("KafkaJS is not installed: run scripts/setup.sh (npm ci --prefix tests/interop/node)")
    return SubprocessMember(["node", script, bootstrap, group, topic, str(SESSION_MS)], cwd=NODE_DIR)


class TwistedMember(group_fixtures.TwistedMember):
    """
    A kafkatw member (L{group_fixtures.TwistedMember}) recording what its
    rebalance listener is told: C{revoked} and C{assigned}, the sets of each
    call, and C{revocations}, the revocations and losses.
    """

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, counted: Counted | None,
                 **options: Any) -> None:
        self.revoked: list[set] = []
        self.assigned: list[set] = []
        self.revocations = 0  # revoked or lost
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: set) -> None:
                member.revocations += 1
                member.revoked.append(set(revoked))

            def on_partitions_assigned(self, assigned: set) -> None:
                member.assigned.append(set(assigned))

            def on_partitions_lost(self, lost: set) -> None:
                member.revocations += 1

        super().__init__(name, bootstrap, group, topic, counted, Listener(), poll_ms=200, fetch_max_wait_ms=100,
                         session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000, **options)


def confluent_member(name: str, bootstrap: str, group: str, topic: str, counted: Counted | None,
                     strategy: str = "range,roundrobin") -> ConfluentMember:
    """A librdkafka member of the classic protocol; C{counted} C{None}: it only consumes (no commits)."""
    return ConfluentMember(name, bootstrap, group, topic, {
        "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 1000, "partition.assignment.strategy": strategy,
        "fetch.wait.max.ms": 100}, counted=counted, commit=counted is not None, max_records=500, poll_s=0.2)


def produce(bootstrap: str, topic: str, phase: int) -> None:
    from kafkatw.client.blocking import BlockingProducer

    with BlockingProducer(bootstrap, linger_ms=5) as producer:
        for i in range(PER_PHASE):
            producer.send(topic, b"%d-%d" % (phase, i), partition=i % PARTITIONS)
        producer.flush()


class GroupMemberInteropTests(ClassFixture, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1, overrides={"group.initial.rebalance.delay.ms": "0"})
        cls.broker = cls._cluster.__enter__()[0]
        cls.bootstrap = cls.broker.bootstrap
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=cls.bootstrap)
        try:
            admin.create_topics([NewTopic("mixed", PARTITIONS, 1), NewTopic("coop", PARTITIONS, 1),
                                 NewTopic("mixed-js", PARTITIONS, 1)])
        finally:
            admin.close()

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def test_mixed_group_counts_every_record_once(self) -> None:
        counted = Counted()
        group, topic = "mixed-group", "mixed"
        twisted_member = TwistedMember("kafkatw-1", self.bootstrap, group, topic, counted)
        self.addCleanup(twisted_member.close)
        rd_member = confluent_member("librdkafka-1", self.bootstrap, group, topic, counted)
        self.addCleanup(rd_member.close)
        python = SubprocessMember([sys.executable, "-c", KAFKA_PYTHON_MEMBER, self.bootstrap, group, topic])
        self.addCleanup(python.kill)

        def total() -> list[tuple[int, int]]:
            return sorted(counted.everything() + python.counted())

        # every member owns partitions before the first records arrive
        wait_for(lambda: len(twisted_member.assignment()) == PARTITIONS // 3, PHASE_S, "a three-member group")
        produce(self.bootstrap, topic, 0)
        wait_for(lambda: len(total()) >= PER_PHASE, PHASE_S, "phase 0 consumed")
        self.assertTrue(python.counted(), "the kafka-python member consumed nothing")
        # the topic is drained: kill the kafka-python member (no LeaveGroup)
        time.sleep(0.5)
        python.kill()
        produce(self.bootstrap, topic, 1)
        wait_for(lambda: len(total()) >= 2 * PER_PHASE, PHASE_S, "phase 1 consumed after the kill")
        self.assertEqual(len(twisted_member.assignment()), PARTITIONS // 2)
        # a member is added
        added = TwistedMember("kafkatw-2", self.bootstrap, group, topic, counted)
        self.addCleanup(added.close)
        wait_for(lambda: len(added.assignment()) == PARTITIONS // 3, PHASE_S, "the added member's partitions")
        produce(self.bootstrap, topic, 2)
        wait_for(lambda: len(total()) >= 3 * PER_PHASE, PHASE_S, "phase 2 consumed")
        time.sleep(1.0)  # a duplicate would show up now
        expected = sorted((p, o) for p in range(PARTITIONS) for o in range(3 * PER_PHASE // PARTITIONS))
        self.assertEqual(total(), expected)
        self.assertTrue(counted.by_member.get("kafkatw-2"), "the added member consumed nothing")
        self.assertEqual(twisted_member.consumer.coordinator.protocol, "range")  # the one every member offers
        self.assertTrue(counted.by_member.get("librdkafka-1"), "the librdkafka member consumed nothing")

    def test_kafkajs_member_in_mixed_group(self) -> None:
        counted = Counted()
        group, topic = "mixed-js-group", "mixed-js"
        strategy = {"partition_assignment_strategy": ["range", "roundrobin"]}
        twisted_member = TwistedMember("js-kafkatw-1", self.bootstrap, group, topic, counted, **strategy)
        self.addCleanup(twisted_member.close)
        rd_member = confluent_member("js-librdkafka-1", self.bootstrap, group, topic, counted)
        self.addCleanup(rd_member.close)
        js = kafkajs_member(self.bootstrap, group, topic)
        self.addCleanup(js.kill)
        members = [js]

        def total() -> list[tuple[int, int]]:
            return sorted(counted.everything() + [r for m in members for r in m.counted()])

        wait_for(lambda: len(twisted_member.assignment()) == PARTITIONS // 3 and js.assigned() is not None
                 and len(js.assigned()) == PARTITIONS // 3, PHASE_S, "a three-member group with KafkaJS")
        self.assertEqual(twisted_member.consumer.coordinator.protocol, "roundrobin")  # the one all three offer
        produce(self.bootstrap, topic, 0)
        wait_for(lambda: len(total()) >= PER_PHASE, PHASE_S, "phase 0 consumed")
        self.assertTrue(js.counted(), "the KafkaJS member consumed nothing")
        time.sleep(0.5)
        js.kill()
        produce(self.bootstrap, topic, 1)
        wait_for(lambda: len(total()) >= 2 * PER_PHASE, PHASE_S, "phase 1 consumed after the kill")
        self.assertEqual(len(twisted_member.assignment()), PARTITIONS // 2)
        added = kafkajs_member(self.bootstrap, group, topic)
        self.addCleanup(added.kill)
        members.append(added)
        wait_for(lambda: added.assigned() is not None and len(added.assigned()) == PARTITIONS // 3
                 and len(twisted_member.assignment()) == PARTITIONS // 3, PHASE_S, "the added KafkaJS member")
        produce(self.bootstrap, topic, 2)
        wait_for(lambda: len(total()) >= 3 * PER_PHASE, PHASE_S, "phase 2 consumed")
        time.sleep(1.0)  # a duplicate would show up now
        expected = sorted((p, o) for p in range(PARTITIONS) for o in range(3 * PER_PHASE // PARTITIONS))
        self.assertEqual(total(), expected)
        self.assertTrue(added.counted(), "the added KafkaJS member consumed nothing")
        self.assertTrue(counted.by_member.get("js-librdkafka-1"), "the librdkafka member consumed nothing")

    def test_cooperative_sticky_keeps_unaffected_partitions(self) -> None:
        group, topic = "coop-group", "coop"
        strategy = {"partition_assignment_strategy": ["cooperative-sticky"]}
        first = TwistedMember("coop-kafkatw-1", self.bootstrap, group, topic, None, **strategy)
        self.addCleanup(first.close)
        rd_member = confluent_member("coop-librdkafka", self.bootstrap, group, topic, None,
                                     strategy="cooperative-sticky")
        self.addCleanup(rd_member.close)
        wait_for(lambda: len(first.assignment()) == PARTITIONS // 2, PHASE_S, "a two-member cooperative group")
        wait_for(lambda: rd_member.assigned and sum(len(a) for a in rd_member.assigned)
                 - sum(len(r) for r in rd_member.revoked) == PARTITIONS // 2, PHASE_S, "librdkafka's half")
        before_first = first.assignment()
        before_rd = set().union(*rd_member.assigned) - set().union(set(), *rd_member.revoked)
        revoked_first, revoked_rd = len(first.revoked), len(rd_member.revoked)
        added = TwistedMember("coop-kafkatw-2", self.bootstrap, group, topic, None, **strategy)
        self.addCleanup(added.close)
        wait_for(lambda: len(added.assignment()) == PARTITIONS // 3, PHASE_S, "the added member's partitions")
        wait_for(lambda: len(first.assignment()) == PARTITIONS // 3, PHASE_S, "the first member's rebalance")
        time.sleep(2.0)
        after_first = first.assignment()
        gained = added.assignment()
        # each old member revoked exactly what it lost, all of it now the new member's
        moved_first = set().union(set(), *first.revoked[revoked_first:])
        moved_rd = set().union(set(), *rd_member.revoked[revoked_rd:])
        self.assertEqual(moved_first, before_first - after_first)
        self.assertTrue(after_first <= before_first)
        self.assertEqual(len(moved_first), 1)
        self.assertEqual(len(moved_rd), 1)
        self.assertTrue(moved_rd <= before_rd)
        self.assertEqual(gained, moved_first | moved_rd)
        self.assertEqual(first.revocations, len(first.revoked))  # nothing lost
        self.assertEqual(first.consumer.coordinator.protocol, "cooperative-sticky")
        self.assertFalse(first.consumer.coordinator.cooperative is False)
