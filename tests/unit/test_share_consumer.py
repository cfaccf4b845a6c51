"""
Unit tests of L{kafkatw.client.ShareConsumer} (KIP-932) against the real
broker in memory (L{kafkatw.testing.FakeCluster}: L{KafkaApis}, real logs, on a
L{MemoryReactorClock}): membership, records shared between members, accept,
release, reject, lock expiry, implicit and explicit acknowledgement, close.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.trial import unittest

from kafkatw.client import AcknowledgeType, Producer, ShareConsumer, ShareRecord
from kafkatw.errors import ErrorCode
from kafkatw.testing import FakeCluster

LOCK_MS = 5000


class ShareConsumerTests(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.cluster = FakeCluster(self.clock, topics={"t": 1, "u": 2}, config={
            "group.share.auto.offset.reset": "earliest", "group.share.record.lock.duration.ms": LOCK_MS,
            "group.share.delivery.count.limit": 3, "group.share.heartbeat.interval.ms": 1000})
        self.addCleanup(self.cluster.close)
        self.producer = Producer(self.clock, client=self.cluster.client())
        self.addCleanup(lambda: self.cluster.result(self.producer.close()))

    def produce(self, count: int, partition: int = 0, start: int = 0, topic: str = "t") -> None:
        for i in range(start, start + count):
            self.cluster.result(self.producer.send(topic, b"v%d" % i, partition=partition))
        self.cluster.result(self.producer.flush())

    def consumer(self, topic: str = "t", **options: Any) -> ShareConsumer:
        consumer = ShareConsumer(self.clock, "sg", client=self.cluster.client(), fetch_max_wait_ms=100, **options)
        consumer.subscribe([topic])
        self.addCleanup(lambda: self.cluster.result(consumer.close()))
        return consumer

    def poll(self, consumer: ShareConsumer, timeout_ms: int = 500) -> list[ShareRecord]:
        return self.cluster.result(consumer.poll(timeout_ms))

    def poll_until(self, consumer: ShareConsumer, count: int, polls: int = 20) -> list[ShareRecord]:
        got: list[ShareRecord] = []
        for _ in range(polls):
            got += self.poll(consumer)
            if len(got) >= count:
                break
        return got

    def test_poll_accept_and_no_redelivery(self) -> None:
        self.produce(4)
        consumer = self.consumer()
        records = self.poll_until(consumer, 4)
        self.assertEqual([(r.offset, r.value, r.delivery_count) for r in records],
                         [(i, b"v%d" % i, 1) for i in range(4)])
        for r in records:
            consumer.acknowledge(r, AcknowledgeType.ACCEPT)
        self.assertEqual(self.cluster.result(consumer.commit()),
                         {("t", 0): ErrorCode.none})
        self.cluster.advance(LOCK_MS / 1000 + 1)
        self.assertEqual(self.poll(consumer), [])
        share = next(iter(self.cluster.apis.share_partition_manager.partitions.values())).share
        self.assertEqual(share.start_offset, 4)

    def test_release_and_reject(self) -> None:
        self.produce(2)
        consumer = self.consumer()
        records = self.poll_until(consumer, 2)
        consumer.acknowledge(records[0], AcknowledgeType.RELEASE)
        consumer.acknowledge(records[1], AcknowledgeType.REJECT)
        again = self.poll_until(consumer, 1)  # the acknowledgements ride on this poll's ShareFetch
        self.assertEqual([(r.offset, r.delivery_count) for r in again], [(0, 2)])
        self.assertRaises(ValueError, consumer.acknowledge, records[1])  # rejected: not delivered again

    def test_implicit_mode_accepts_at_the_next_poll(self) -> None:
        self.produce(3)
        consumer = self.consumer()
        self.assertEqual(len(self.poll_until(consumer, 3)), 3)
        self.assertEqual(self.poll(consumer), [])
        share = next(iter(self.cluster.apis.share_partition_manager.partitions.values())).share
        self.assertEqual(share.start_offset, 3)

    def test_explicit_mode_requires_acknowledgements(self) -> None:
        self.produce(1)
        consumer = self.consumer(acknowledgement_mode="explicit")
        records = self.poll_until(consumer, 1)
        d = consumer.poll(100)
        self.failureResultOf(d, ValueError)
        consumer.acknowledge(records[0])
        self.assertEqual(self.poll(consumer), [])

    def test_two_members_share_one_partition(self) -> None:
        self.produce(6)
        a, b = self.consumer(max_poll_records=2), self.consumer(max_poll_records=2)
        seen: list[tuple[str, int]] = []
        for _ in range(10):
            for name, c in (("a", a), ("b", b)):
                seen += [(name, r.offset) for r in self.poll(c, 200)]
        self.assertEqual(sorted(o for _, o in seen), list(range(6)))  # each delivered once: implicitly accepted
        self.assertEqual({n for n, _ in seen}, {"a", "b"})
        self.assertEqual((a.assignment, b.assignment), ({("t", 0)}, {("t", 0)}))

    def test_members_split_partitions(self) -> None:
        self.produce(2, partition=0, topic="u")
        self.produce(2, partition=1, topic="u")
        a, b = self.consumer("u"), self.consumer("u")
        self.cluster.advance(2)  # both heartbeat with the group's epoch
        self.assertEqual(sorted(a.assignment | b.assignment), [("u", 0), ("u", 1)])
        self.assertEqual(len(a.assignment), 1)
        got = self.poll_until(a, 2) + self.poll_until(b, 2)
        self.assertEqual(sorted((r.partition, r.offset) for r in got), [(0, 0), (0, 1), (1, 0), (1, 1)])

    def test_lock_expiry_redelivers_to_another_member(self) -> None:
        self.produce(2)
        a = self.consumer()
        records = self.poll_until(a, 2)
        self.assertEqual(len(records), 2)
        b = self.consumer()
        self.cluster.advance(2)  # b joins; a keeps its records, unacknowledged
        self.assertEqual(self.poll(b), [])
        self.cluster.advance(LOCK_MS / 1000)
        again = self.poll_until(b, 2)
        self.assertEqual([(r.offset, r.delivery_count) for r in again], [(0, 2), (1, 2)])
        # a's acknowledgement of the records it lost fails
        for r in records:
            a.acknowledge(r, AcknowledgeType.ACCEPT)
        self.assertEqual(self.cluster.result(a.commit()),
                         {("t", 0): ErrorCode.invalid_record_state})

    def test_close_releases_and_leaves(self) -> None:
        self.produce(2)
        a = self.consumer(acknowledgement_mode="explicit")
        records = self.poll_until(a, 2)
        a.acknowledge(records[0])
        self.cluster.result(a.close())  # accepts offset 0, releases offset 1 at once
        b = self.consumer()
        self.assertEqual([(r.offset, r.delivery_count) for r in self.poll_until(b, 1)], [(1, 2)])
        group = self.cluster.apis.share_group_coordinator.groups["sg"]
        self.assertEqual(list(group.members), [b.member_id])

    def test_acknowledgements_of_a_failed_share_fetch_are_reported(self) -> None:
        self.produce(2)
        consumer = self.consumer(acknowledgement_mode="explicit")
        records = self.poll_until(consumer, 2)
        for r in records:
            consumer.acknowledge(r, AcknowledgeType.ACCEPT)
        # the broker lost the share session: the ShareFetch carrying the acknowledgements fails
        self.cluster.apis.share_partition_manager.sessions.clear()
        self.poll(consumer)
        self.assertEqual(consumer.acknowledgement_errors, {("t", 0): ErrorCode.share_session_not_found})
