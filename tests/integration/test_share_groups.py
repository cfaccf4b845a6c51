"""
Share groups (KIP-932) with real processes: a real ZooKeeper, kafkatw brokers,
kafkatw's L{kafkatw.client.ShareConsumer} (on the blocking clients' reactor
thread) and confluent-kafka 2.16's C{ShareConsumer} (librdkafka):

  - several consumers on fewer partitions than members share the records,
    each delivered once when all are accepted;
  - a consumer killed (SIGKILL) with records in flight: they are delivered
    again, to another member, once their acquisition lock expired;
  - a rejected record is archived at once, a released one after the
    delivery count limit: neither comes again;
  - a confluent ShareConsumer and a kafkatw one share a group's records;
  - RF=3: the leader of the partition is SIGKILLed while a member works;
    nothing acknowledged before is delivered again by the new leader
    (``__share_group_state`` at RF=3, min ISR 2).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Producer
from twisted.trial import unittest

from kafkatw.client import AcknowledgeType, ShareConsumer, ShareRecord
from kafkatw.client.blocking import reactor_thread
from kafkatw.testing import running_cluster

from .test_replication import create_topic, partition_info

LOCK_MS = 3000
#: loop bounds (s)
TIMEOUT_S = 60.0
_SHARE = {"group.share.auto.offset.reset": "earliest", "group.share.record.lock.duration.ms": str(LOCK_MS),
          "group.share.delivery.count.limit": "3", "group.share.heartbeat.interval.ms": "500",
          "share.coordinator.state.topic.num.partitions": "3"}


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1, batch_records: int | None = None) -> None:
    """C{count} records round-robin over C{partitions}; C{batch_records}: at most that many per batch."""
    settings = {"bootstrap.servers": bootstrap, "acks": "all"}
    if batch_records is not None:
        settings["batch.num.messages"] = batch_records
    producer = Producer(settings)
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


class Member:
    """A kafkatw ShareConsumer driven from this thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, **options: Any) -> None:
        self.thread = reactor_thread()
        self.consumer: ShareConsumer = self.thread.call(30, lambda: ShareConsumer(
            self.thread.reactor, group, bootstrap_servers=bootstrap, fetch_max_wait_ms=200, **options))
        self.thread.call(30, self.consumer.subscribe, [topic])

    def poll(self, timeout_ms: int = 300) -> list[ShareRecord]:
        return self.thread.call(60, self.consumer.poll, timeout_ms)

    def assigned(self) -> set:
        """The partitions the group gave this member (after its last heartbeat)."""
        return self.thread.call(30, lambda: set(self.consumer.assignment))

    def acknowledge(self, record: ShareRecord, kind: AcknowledgeType) -> None:
        self.thread.call(30, self.consumer.acknowledge, record, kind)

    def commit(self) -> dict:
        return self.thread.call(60, self.consumer.commit)

    def close(self) -> None:
        self.thread.call(60, self.consumer.close)


class ShareGroupTestCase(unittest.TestCase):
    brokers = 1
    overrides: dict[str, str] = {}

    def setUp(self) -> None:
        self._cluster = running_cluster(self.brokers, {**_SHARE, **self.overrides})
        self.cluster = self._cluster.__enter__()
        self.addCleanup(self._cluster.__exit__, None, None, None)
        self.bootstrap = ",".join(p.bootstrap for p in self.cluster)

    def member(self, group: str, topic: str, **options: Any) -> Member:
        member = Member(self.bootstrap, group, topic, **options)
        self.addCleanup(member.close)
        return member


class SingleBrokerShareGroupTests(ShareGroupTestCase):
    overrides = {"share.coordinator.state.topic.replication.factor": "1",
                 "share.coordinator.state.topic.min.isr": "1"}

    def test_members_share_fewer_partitions(self) -> None:
        create_topic(self.bootstrap, "sq", partitions=2, rf=1)
        members = [self.member("g-share", "sq", max_poll_records=5) for _ in range(3)]
        # every member in the group before the records come (else the first to join takes them all)
        deadline = time.monotonic() + TIMEOUT_S
        while not all(m.assigned() for m in members) and time.monotonic() < deadline:
            for m in members:
                self.assertEqual(m.poll(100), [])
        self.assertTrue(all(m.assigned() for m in members), "not every member was assigned a partition")
        produce(self.bootstrap, "sq", 60, partitions=2, batch_records=1)  # batches of one: acquired one by one
        seen: dict[int, list[tuple[int, int]]] = {i: [] for i in range(3)}
        deadline = time.monotonic() + TIMEOUT_S
        while sum(len(s) for s in seen.values()) < 60 and time.monotonic() < deadline:
            for i, m in enumerate(members):
                seen[i] += [(r.partition, r.offset) for r in m.poll(200)]
        everything = sorted(x for s in seen.values() for x in s)
        self.assertEqual(everything, sorted((p, o) for p in range(2) for o in range(30)))  # each once
        self.assertGreaterEqual(sum(1 for s in seen.values() if s), 2)
        for m in members:  # implicit mode: nothing is delivered again
            self.assertEqual(m.poll(500), [])

    def test_killed_consumer_records_are_delivered_again(self) -> None:
        create_topic(self.bootstrap, "sk", partitions=1, rf=1)
        produce(self.bootstrap, "sk", 5)
        script = (
            "import sys\n"
            "from kafkatw.client import ShareConsumer\n"
            "from kafkatw.client.blocking import reactor_thread\n"
            "t = reactor_thread()\n"
            f"c = t.call(30, lambda: ShareConsumer(t.reactor, 'g-kill', bootstrap_servers={self.bootstrap!r}))\n"
            "t.call(30, c.subscribe, ['sk'])\n"
            "got = []\n"
            "while len(got) < 5:\n"
            "    got += t.call(60, c.poll, 500)\n"
            "print(' '.join(str(r.offset) for r in got), flush=True)\n"
            "sys.stdin.read()\n")
        child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
        try:
            line = child.stdout.readline()
            self.assertEqual(line.split(), ["0", "1", "2", "3", "4"])
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait(30)
        killed_at = time.monotonic()
        other = self.member("g-kill", "sk")
        got: list[ShareRecord] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 5 and time.monotonic() < deadline:
            got += other.poll(300)
        self.assertGreaterEqual(time.monotonic() - killed_at, LOCK_MS / 1000 - 1.0)
        self.assertEqual([(r.offset, r.delivery_count) for r in got], [(o, 2) for o in range(5)])

    def test_rejected_and_released_records_are_archived(self) -> None:
        create_topic(self.bootstrap, "sr", partitions=1, rf=1)
        produce(self.bootstrap, "sr", 3)
        member = self.member("g-reject", "sr", acknowledgement_mode="explicit")
        deliveries: list[tuple[int, int]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            records = member.poll(300)
            deliveries += [(r.offset, r.delivery_count) for r in records]
            for r in records:
                member.acknowledge(r, {0: AcknowledgeType.REJECT, 1: AcknowledgeType.RELEASE}.get(
                    r.offset, AcknowledgeType.ACCEPT))
            if not records and deliveries and max(c for o, c in deliveries if o == 1) >= 3:
                break
        # offset 0 rejected: once; offset 1 released: up to the delivery count limit of 3; offset 2 accepted
        self.assertEqual(sorted(deliveries), [(0, 1), (1, 1), (1, 2), (1, 3), (2, 1)])
        self.assertEqual(member.poll(1000), [])


class ShareGroupsToolTests(ShareGroupTestCase):
    overrides = SingleBrokerShareGroupTests.overrides

    def tool(self, *args: str) -> list[str]:
        result = subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "share-groups", "--bootstrap-server",
                                 self.bootstrap, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        return [line.split() for line in result.stdout.splitlines()]

    def test_list_describe_reset_delete(self) -> None:
        create_topic(self.bootstrap, "st", partitions=1, rf=1)
        produce(self.bootstrap, "st", 5)
        member = Member(self.bootstrap, "g-tool", "st")
        got: list[ShareRecord] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 5 and time.monotonic() < deadline:
            got += member.poll(300)
        member.poll(300)  # carries the implicit acceptance
        self.assertEqual(self.tool("--list"), [["g-tool"]])
        self.assertEqual(self.tool("--describe", "--group", "g-tool"),
                         [["GROUP", "TOPIC", "PARTITION", "START-OFFSET"], ["g-tool", "st", "0", "5"]])
        self.assertEqual(self.tool("--describe", "--group", "g-tool", "--state")[1], ["g-tool", "(0)", "Stable", "1"])
        members = self.tool("--describe", "--group", "g-tool", "--members")
        self.assertEqual((members[1][1], members[1][-1]), (member.consumer.member_id, "st:0"))
        member.close()
        self.assertEqual(self.tool("--reset-offsets", "--group", "g-tool", "--topic", "st", "--to-earliest",
                                   "--execute"), [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                                  ["g-tool", "st", "0", "0"]])
        again = self.member("g-tool", "st")
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 5 and time.monotonic() < deadline:
            got += again.poll(300)
        self.assertEqual([(r.offset, r.delivery_count) for r in got], [(o, 1) for o in range(5)])
        again.close()
        self.assertEqual(self.tool("--delete", "--group", "g-tool"),
                         [["Deletion", "of", "requested", "share", "groups", "('g-tool')", "was", "successful."]])
        self.assertEqual(self.tool("--list"), [])


class MixedClientShareGroupTests(ShareGroupTestCase):
    #: few records acquired at a time: whoever fetches first cannot take them all
    overrides = {**SingleBrokerShareGroupTests.overrides, "group.share.partition.max.record.locks": "5"}

    def test_confluent_share_consumer_shares_with_kafkatw(self) -> None:
        from confluent_kafka import ShareConsumer as ConfluentShareConsumer

        create_topic(self.bootstrap, "sc", partitions=1, rf=1)
        confluent = ConfluentShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": "g-mixed"})
        self.addCleanup(confluent.close)
        confluent.subscribe(["sc"])
        ours = self.member("g-mixed", "sc", max_poll_records=5)
        for _ in range(5):  # both join before there are records
            confluent.poll(0.2)
            ours.poll(200)
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        for i in range(40):
            producer.produce("sc", b"v%d" % i)
            producer.flush(10)  # one batch per record
        theirs: list[int] = []
        mine: list[int] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(theirs) + len(mine) < 40 and time.monotonic() < deadline:
            for message in confluent.poll(0.2) or []:
                if message.error() is None:
                    theirs.append(message.offset())
            mine += [r.offset for r in ours.poll(200)]
        self.assertEqual(sorted(theirs + mine), list(range(40)))
        self.assertTrue(theirs and mine, (theirs, mine))


class ReplicatedShareStateTests(ShareGroupTestCase):
    brokers = 3
    overrides = {"share.coordinator.state.topic.replication.factor": "3",
                 "share.coordinator.state.topic.min.isr": "2", "zookeeper.session.timeout.ms": "3000",
                 "replica.lag.time.max.ms": "4000"}

    def test_nothing_acknowledged_is_delivered_again_after_sigkill(self) -> None:
        create_topic(self.bootstrap, "sf", partitions=1, rf=3, config={"min.insync.replicas": "2"})
        produce(self.bootstrap, "sf", 40)
        member = self.member("g-failover", "sf", max_poll_records=10, acknowledgement_mode="explicit")
        accepted: list[int] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(accepted) < 20 and time.monotonic() < deadline:
            for r in member.poll(300):
                member.acknowledge(r, AcknowledgeType.ACCEPT)
                accepted.append(r.offset)
            member.commit()  # answered once __share_group_state's in-sync replicas have it
        self.assertGreaterEqual(len(accepted), 20)
        leader = partition_info(self.bootstrap, "sf")[0]
        self.cluster[leader].kill()  # the share partition's leader; a follower takes over with the state
        after: list[ShareRecord] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(set(accepted) | {r.offset for r in after}) < 40 and time.monotonic() < deadline:
            for r in member.poll(300):
                member.acknowledge(r, AcknowledgeType.ACCEPT)
                after.append(r)
            member.commit()
        self.assertEqual(set(accepted) & {r.offset for r in after}, set())
        self.assertEqual(set(accepted) | {r.offset for r in after}, set(range(40)))

