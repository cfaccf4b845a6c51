"""
Unit tests of L{kafkatw.client.consumer_membership}: real
L{kafkatw.client.consumer.Consumer}s with C{group_protocol="consumer"}
(KIP-848) against L{kafkatw.testing.FakeCluster} (one broker's real
L{KafkaApis} with its consumer-group coordinator) on a
L{MemoryReactorClock}: joining, an incremental rebalance in which the
members keep consuming what they keep, the rebalance listener's calls,
commits at the member epoch, leaving on close, fencing.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.trial import unittest

from kafkatw.client import Producer
from kafkatw.client.consumer import Consumer
from kafkatw.testing import FakeCluster

from .test_consumer_coordinator import Recorder

ALL = {("t", p) for p in range(4)}


class MembershipTests(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.cluster = FakeCluster(self.clock, topics={"t": 4},
                                   config={"group.consumer.heartbeat.interval.ms": 500})
        self.addCleanup(self.cluster.close)
        self.producer = Producer(self.clock, client=self.cluster.client(client_id="seed"))

    def member(self, name: str, **options: Any) -> Consumer:
        options.setdefault("auto_offset_reset", "earliest")
        options.setdefault("fetch_max_wait_ms", 100)
        consumer = Consumer(self.clock, client=self.cluster.client(client_id=name), group_id="g",
                            group_protocol="consumer", **options)
        self.addCleanup(lambda: self.cluster.result(consumer.close()))
        return consumer

    def produce(self, partition: int, count: int) -> None:
        for i in range(count):
            self.cluster.result(self.producer.send("t", b"v%d" % i, partition=partition))

    def poll_all(self, *consumers: Consumer, seconds: float = 3.0) -> dict[str, list]:
        """Poll every consumer (rebalances happen in poll) while the clock turns; the records each got."""
        got: dict[str, list] = {c.client.client_id: [] for c in consumers}
        for _ in range(int(seconds / 0.1)):
            for c in consumers:
                d = c.poll(timeout_ms=0)
                got[c.client.client_id].extend(self.successResultOf(d) if d.called else [])
            self.cluster.advance(0.1)
        return got

    def group(self) -> Any:
        return self.cluster.apis.consumer_group_coordinator.groups["g"]

    def test_join_consume_commit_and_leave(self) -> None:
        for p in range(4):
            self.produce(p, 3)
        consumer = self.member("a", enable_auto_commit=False)
        listener = Recorder()
        consumer.subscribe(["t"], listener)
        self.assertEqual(self.cluster.result(consumer.wait_for_assignment()), ALL)
        self.assertEqual(listener.calls, [("assigned", sorted(ALL))])
        self.assertEqual(consumer.coordinator.generation_id, 1)
        records = self.poll_all(consumer, seconds=1)["a"]
        self.assertEqual(len(records), 12)
        # the commit carries the member epoch (OffsetCommit v9)
        self.assertEqual(self.cluster.result(consumer.commit({("t", 0): 3})), {("t", 0): 3})
        self.assertEqual(self.cluster.result(consumer.committed([("t", 0)])), {("t", 0): 3})
        self.assertEqual(consumer.group_metadata().generation_id, 1)
        self.cluster.result(consumer.close())
        self.assertEqual(listener.calls[-1], ("revoked", sorted(ALL)))
        self.assertEqual(self.group().members, {})  # left with epoch -1

    def test_incremental_rebalance_keeps_what_stays(self) -> None:
        """A second member joins: the first revokes only what moves, and keeps reading the rest."""
        a_listener, b_listener = Recorder(), Recorder()
        a = self.member("a")
        a.subscribe(["t"], a_listener)
        self.assertEqual(self.cluster.result(a.wait_for_assignment()), ALL)
        b = self.member("b")
        b.subscribe(["t"], b_listener)
        self.poll_all(a, b)
        self.assertEqual(len(a.assignment()), 2)
        self.assertEqual(a.assignment() | b.assignment(), ALL)
        self.assertFalse(a.assignment() & b.assignment())
        moved = sorted(ALL - a.assignment())
        self.assertEqual(a_listener.calls, [("assigned", sorted(ALL)), ("revoked", moved)])
        self.assertEqual(b_listener.calls, [("assigned", moved)])
        self.assertEqual(self.group().state.value, "Stable")
        # records of every partition reach their owner
        for p in range(4):
            self.produce(p, 2)
        got = self.poll_all(a, b, seconds=1)
        self.assertEqual({(r.topic, r.partition) for r in got["a"]}, a.assignment())
        self.assertEqual({(r.topic, r.partition) for r in got["b"]}, b.assignment())
        # b closes: a gets its partitions back, revoking nothing
        self.cluster.result(b.close())
        self.poll_all(a)
        self.assertEqual(a.assignment(), ALL)
        self.assertEqual(a_listener.calls[-1], ("assigned", moved))

    def test_fenced_member_loses_its_partitions_and_rejoins(self) -> None:
        listener = Recorder()
        a = self.member("a")
        a.subscribe(["t"], listener)
        self.cluster.result(a.wait_for_assignment())
        # the coordinator forgets the group (as after a coordinator move: kafkatw keeps it in memory)
        self.cluster.apis.consumer_group_coordinator.unload("g")
        self.poll_all(a)
        self.assertEqual(listener.calls, [("assigned", sorted(ALL)), ("lost", sorted(ALL)),
                                          ("assigned", sorted(ALL))])
        self.assertEqual(a.assignment(), ALL)

    def test_a_fatal_error_fails_polls(self) -> None:
        a = self.member("a", group_remote_assignor="sticky")  # not a server-side assignor
        a.subscribe(["t"])
        waiting = a.wait_for_assignment()
        self.cluster.advance(0.5)
        failure = self.failureResultOf(waiting)
        self.assertIn("UNSUPPORTED_ASSIGNOR", str(failure.value).upper())
        self.failureResultOf(a.poll(timeout_ms=0))

    def test_group_protocol_is_checked(self) -> None:
        self.assertRaises(ValueError, Consumer, self.clock, client=self.cluster.client(), group_id="g",
                          group_protocol="eager")


