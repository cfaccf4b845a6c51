"""
Tests of L{kafkatw.testing.FakeCluster}, written as a user tests code built
on kafkatw: the real L{Producer}, L{Consumer} (assigned, and in a consumer
group through the broker's coordinator) and L{AdminClient} against one
broker in memory on a L{Clock}: a round trip, two members splitting a
topic, a commit read back by the next member, partitions added to a
subscribed topic (the group rebalances once the metadata is older than
C{metadata_max_age_ms}), and the same run twice giving the same trace.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.client import AdminClient, Consumer, NewPartitions, NewTopic, Producer
from kafkatw.testing import FakeCluster


def _cluster(testcase: unittest.TestCase, topics: dict[str, int]) -> tuple[Clock, FakeCluster]:
    clock = Clock()
    cluster = FakeCluster(clock, topics=topics)
    testcase.addCleanup(cluster.close)
    return clock, cluster


def _member(cluster: FakeCluster, group: str, **options: Any) -> Consumer:
    """A consumer in C{group} subscribed to C{"t"}, with short timeouts for the clock's sake."""
    consumer = Consumer(cluster.reactor, client=cluster.client(metadata_max_age_ms=5000), group_id=group,
                        auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=1000,
                        fetch_max_wait_ms=100, **options)
    consumer.subscribe(["t"])
    return consumer


def _poll_all(cluster: FakeCluster, consumers: list[Consumer], want: int, seconds: float = 30.0) -> list[list]:
    """Poll every consumer (turning the clock) until C{want} records came in all; each one's (partition, value)s."""
    got: list[list] = [[] for _ in consumers]
    for _ in range(int(seconds / 0.05)):
        for i, consumer in enumerate(consumers):
            got[i] += [(r.partition, r.value) for r in cluster.result(consumer.poll(timeout_ms=0))]
        if sum(map(len, got)) >= want:
            break
        cluster.advance(0.05)
    return got


def _stable(cluster: FakeCluster, consumers: list[Consumer], seconds: float = 10.0) -> None:
    """Poll every consumer (turning the clock) until each is in a stable generation of its group."""
    for _ in range(int(seconds / 0.05)):
        for consumer in consumers:
            cluster.result(consumer.poll(timeout_ms=0))
        if all(consumer.wait_for_assignment().called for consumer in consumers):
            return
        cluster.advance(0.05)
    raise AssertionError(f"no stable group after {seconds} s")


class RoundTripTests(unittest.TestCase):
    def test_produce_then_consume(self) -> None:
        """
        What a producer sends is what an assigned consumer reads, with the
        offsets the broker gave; an admin client sees the topic.
        """
        clock, cluster = _cluster(self, {"orders": 2})
        producer = Producer(clock, client=cluster.client())
        sent = [cluster.result(producer.send("orders", b"v%d" % i, key=b"k", partition=i % 2)) for i in range(4)]
        self.assertEqual([(m.partition, m.offset) for m in sent], [(0, 0), (1, 0), (0, 1), (1, 1)])
        consumer = Consumer(clock, client=cluster.client(), auto_offset_reset="earliest")
        consumer.assign([("orders", 0), ("orders", 1)])
        records = []
        for _ in range(100):
            records += cluster.result(consumer.poll(timeout_ms=100))
            if len(records) == 4:
                break
        self.assertEqual(sorted((r.partition, r.offset, r.key, r.value) for r in records),
                         [(0, 0, b"k", b"v0"), (0, 1, b"k", b"v2"), (1, 0, b"k", b"v1"), (1, 1, b"k", b"v3")])
        admin = AdminClient(clock, client=cluster.client())
        self.assertIn("orders", cluster.result(admin.list_topics()))
        cluster.result(producer.close())
        cluster.result(consumer.close())

    def test_admin_creates_a_topic(self) -> None:
        """CreateTopics through the real admin client makes a topic producers can write to."""
        clock, cluster = _cluster(self, {})
        admin = AdminClient(clock, client=cluster.client())
        cluster.result(admin.create_topics([NewTopic("made", 3, 1)]))
        self.assertEqual(sorted(cluster.metadata.topics["made"].partitions), [0, 1, 2])
        producer = Producer(clock, client=cluster.client())
        self.assertEqual(cluster.result(producer.send("made", b"x", partition=2)).offset, 0)

    def test_unknown_address_is_refused(self) -> None:
        """A client bootstrapped elsewhere cannot reach the fake broker."""
        from twisted.internet.error import ConnectionRefusedError

        clock, cluster = _cluster(self, {})
        d = cluster.endpoint("elsewhere", 9092).connect(None)
        self.failureResultOf(d, ConnectionRefusedError)

    def test_result_times_out(self) -> None:
        """L{FakeCluster.result} gives up after its timeout of the clock's time."""
        from twisted.internet.defer import Deferred

        clock, cluster = _cluster(self, {})
        self.assertRaises(TimeoutError, cluster.result, Deferred(), timeout_s=1.0)
        self.assertAlmostEqual(clock.seconds(), 1.0)


class GroupTests(unittest.TestCase):
    def test_two_members_split_the_partitions(self) -> None:
        """
        Two members of a group get disjoint halves of a topic's partitions
        (range assignor) and each reads only its own partitions' records.
        """
        clock, cluster = _cluster(self, {"t": 4})
        a, b = _member(cluster, "g"), _member(cluster, "g")
        _stable(cluster, [a, b])
        producer = Producer(clock, client=cluster.client())
        for p in range(4):
            cluster.result(producer.send("t", b"p%d" % p, partition=p))
        got = _poll_all(cluster, [a, b], 4)
        self.assertEqual(len(a.assignment()), 2)
        self.assertEqual(a.assignment() | b.assignment(), {("t", p) for p in range(4)})
        self.assertEqual(a.assignment() & b.assignment(), set())
        for consumer, records in zip((a, b), got):
            self.assertEqual(sorted(records), [(p, b"p%d" % p) for _, p in sorted(consumer.assignment())])
        cluster.result(a.close())
        cluster.result(b.close())

    def test_commit_then_the_next_member_resumes(self) -> None:
        """
        A member commits after two of three records; the next member of the
        group starts at the committed offset, and L{Consumer.committed} reads it.
        """
        clock, cluster = _cluster(self, {"t": 1})
        producer = Producer(clock, client=cluster.client())
        for i in range(3):
            cluster.result(producer.send("t", b"r%d" % i, partition=0))
        first = _member(cluster, "g", enable_auto_commit=False, max_poll_records=2)
        self.assertEqual(_poll_all(cluster, [first], 2), [[(0, b"r0"), (0, b"r1")]])
        self.assertEqual(cluster.result(first.commit()), {("t", 0): 2})
        cluster.result(first.close())
        second = _member(cluster, "g", enable_auto_commit=False)
        self.assertEqual(_poll_all(cluster, [second], 1), [[(0, b"r2")]])
        self.assertEqual(cluster.result(second.committed([("t", 0)])), {("t", 0): 2})
        cluster.result(second.close())

    def test_added_partitions_rebalance_the_group(self) -> None:
        """
        Partitions added to a subscribed topic (CreatePartitions) are
        assigned once the leader's metadata is older than
        C{metadata_max_age_ms} (5 s here) and the group rejoined; their
        records are consumed.
        """
        clock, cluster = _cluster(self, {"t": 2})
        a, b = _member(cluster, "g"), _member(cluster, "g")
        _stable(cluster, [a, b])
        self.assertEqual(a.assignment() | b.assignment(), {("t", 0), ("t", 1)})
        generation = a.group_metadata().generation_id
        admin = AdminClient(clock, client=cluster.client())
        cluster.result(admin.create_partitions({"t": NewPartitions(4)}))
        producer = Producer(clock, client=cluster.client())
        for p in range(4):
            cluster.result(producer.send("t", b"p%d" % p, partition=p))
        got = _poll_all(cluster, [a, b], 4, seconds=20.0)
        _stable(cluster, [a, b])
        self.assertEqual(a.assignment() | b.assignment(), {("t", p) for p in range(4)})
        self.assertEqual((len(a.assignment()), len(b.assignment())), (2, 2))
        self.assertGreater(a.group_metadata().generation_id, generation)
        self.assertEqual(sorted(got[0] + got[1]), [(p, b"p%d" % p) for p in range(4)])
        cluster.result(a.close())
        cluster.result(b.close())


class DeterminismTests(unittest.TestCase):
    def run_once(self) -> list:
        """A group of two reading ten records; what each got and when (clock seconds)."""
        clock, cluster = _cluster(self, {"t": 3})
        producer = Producer(clock, client=cluster.client())
        a, b = _member(cluster, "g"), _member(cluster, "g")
        _stable(cluster, [a, b])
        for i in range(10):
            cluster.result(producer.send("t", b"%d" % i, key=b"%d" % i))
        got = _poll_all(cluster, [a, b], 10)
        # which member is which depends on the member ids the coordinator draws (UUIDs)
        trace = [sorted([(sorted(a.assignment()), got[0]), (sorted(b.assignment()), got[1])]), clock.seconds()]
        cluster.result(a.close())
        cluster.result(b.close())
        return trace

    def test_same_run_same_trace(self) -> None:
        """The same calls on a fresh cluster give the same assignments, records and times."""
        first, second = self.run_once(), self.run_once()
        self.assertEqual(sum(len(records) for _, records in first[0]), 10)
        self.assertEqual(first, second)
