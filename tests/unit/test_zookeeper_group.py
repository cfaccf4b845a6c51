"""
Tests for L{kafkatw.client.zookeeper_group}: the paper's rebalance (Algorithm 1)
against L{FakeZooKeeper} (several L{FakeZooKeeperClient}s = several consumers),
a fake Kafka consumer and a L{Clock}.  The invariants are checked after every
step: no consumer fetches a partition whose owner node it does not hold; once
stable, every partition is owned by exactly one live consumer, as the range
assignor says, and each consumer fetches exactly what it owns.
"""

import json
import random
from typing import Any, NamedTuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import succeed
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.zookeeper_group import (
    TRANSITIONS,
    CommitFailedError,
    ConsumerRebalanceFailedError,
    GroupState,
    Subscription,
    ZookeeperConsumerGroup,
    decode_subscription,
    encode_subscription,
    range_assignment,
    transition_table_markdown,
)
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import decode_committed_offset, decode_topic, encode_broker, encode_topic

GROUP = "G"


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    key: Any
    value: Any
    headers: Any


class FakeConsumer:
    """The parts of L{kafkatw.client.consumer.Consumer} the group uses, over in-memory logs."""

    def __init__(self, clock, logs):
        self.clock = clock
        self.logs = logs  # (topic, partition) -> list of values; offset = index
        self.assigned = []
        self.positions = {}
        self.calls = []
        self.closed = False

    def assign(self, partitions):
        self.calls.append(("assign", sorted(partitions)))
        self.assigned = sorted(partitions)
        self.positions = {tp: o for tp, o in self.positions.items() if tp in self.assigned}

    def assignment(self):
        return set(self.assigned)

    def seek(self, tp, offset):
        assert tp in self.assigned, (tp, self.assigned)
        self.calls.append(("seek", tp, offset))
        self.positions[tp] = offset

    def seek_to_beginning(self, *tps):
        for tp in tps:
            self.positions[tp] = 0
        return succeed(None)

    def seek_to_end(self, *tps):
        for tp in tps:
            self.positions[tp] = len(self.logs.get(tp, []))
        return succeed(None)

    def position(self, tp):
        return succeed(self.positions[tp])

    def _take(self, max_records):
        out = []
        for tp in self.assigned:
            log = self.logs.get(tp, [])
            pos = self.positions.get(tp, 0)
            while pos < len(log) and (max_records is None or len(out) < max_records):
                out.append(Record(tp[0], tp[1], pos, 0, 0, None, log[pos], []))
                pos += 1
            self.positions[tp] = pos
        return out

    def poll(self, timeout_ms=0, max_records=None):
        records = self._take(max_records)
        if records or timeout_ms == 0:
            return succeed(records)
        return deferLater(self.clock, timeout_ms / 1000.0, lambda: self._take(max_records))

    def close(self):
        self.closed = True
        return succeed(None)


class Harness:
    """One fake ZooKeeper with a broker and topics; members join it."""

    def __init__(self, topics=None, clocked=True):
        self.clock = Clock()
        self.server = FakeZooKeeper(self.clock if clocked else None)
        self.admin = FakeZooKeeperClient(self.server)
        self.admin.start()
        self.registry = Registry(self.admin)
        self.admin.create("/brokers/ids/0", encode_broker("127.0.0.1", 9092), ephemeral=True, makepath=True)
        self.logs = {}
        self.topics = {}
        for topic, n in (topics or {"t": 6}).items():
            self.create_topic(topic, n)
        self.members = []
        self.random = random.Random(7)

    def create_topic(self, topic, n):
        self.topics[topic] = n
        self.registry.create_topic(topic, {p: [0] for p in range(n)})
        for p in range(n):
            self.logs.setdefault((topic, p), [])

    def grow_topic(self, topic, n):
        data, _ = self.admin.get(f"/brokers/topics/{topic}").result
        assignment = decode_topic(topic, data)
        self.admin.set(f"/brokers/topics/{topic}",
                       encode_topic(assignment.topic_id, {p: [0] for p in range(n)}))
        self.topics[topic] = n
        for p in range(n):
            self.logs.setdefault((topic, p), [])

    def produce(self, topic, partition, *values):
        self.logs.setdefault((topic, partition), []).extend(values)

    def member(self, consumer_id, topics=("t",), start=True, **kwargs):
        zk = FakeZooKeeperClient(self.server)
        zk.start()
        consumer = FakeConsumer(self.clock, self.logs)
        kwargs.setdefault("rebalance_backoff_ms", 100)
        kwargs.setdefault("enable_auto_commit", False)
        kwargs.setdefault("auto_offset_reset", "smallest")
        kwargs.setdefault("random_source", random.Random(consumer_id))
        if "pattern" not in kwargs:
            kwargs["topics"] = list(topics)
        group = ZookeeperConsumerGroup(self.clock, GROUP, zookeeper=zk, consumer=consumer,
                                       consumer_id=consumer_id, **kwargs)
        self.members.append(group)
        if start:
            group.started = group.start()
            group.started.addErrback(self._start_failed, group)
        return group

    def _start_failed(self, failure, group):
        group.start_failure = failure  # tests look at it; no "unhandled error" noise
        return None

    def live(self):
        return [g for g in self.members if g.state not in (GroupState.CLOSED, GroupState.CLOSING)
                and g.zookeeper.connected and g.state is not GroupState.FAILED]

    def node(self, path):
        return self.server._lookup("/kafkatw" + path)

    def owners(self):
        """(topic, partition) -> (owner value, ephemeral owner session)."""
        result = {}
        base = self.node(f"/consumers/{GROUP}/owners")
        if base is None:
            return result
        for topic, tnode in base.children.items():
            for p, pnode in tnode.children.items():
                result[(topic, int(p))] = (pnode.data.decode(), pnode.ephemeral_owner)
        return result

    def committed(self, topic, partition):
        node = self.node(f"/consumers/{GROUP}/offsets/{topic}/{partition}")
        return None if node is None else decode_committed_offset(node.data).offset

    def settle(self, steps=200, step_s=0.05):
        """Advance the clock (bounded) until every live member is stable and nothing is pending."""
        for _ in range(steps):
            self.clock.advance(0)
            due = any(c.getTime() <= self.clock.seconds() for c in self.clock.calls)
            if not due and all(g.state is GroupState.STABLE and not g._pending for g in self.live()):
                return
            self.clock.advance(step_s)
        raise AssertionError("group did not settle: " + ", ".join(f"{g.consumer_id}={g.state.value}" for g in self.live()))

    # invariants

    def check_safety(self):
        """No consumer fetches a partition whose owner node it does not hold (so never two)."""
        owners = self.owners()
        fetching = {}
        for g in self.members:
            if not g._fetching:
                continue
            for tp in g.consumer.assigned:
                assert tp not in fetching, f"{tp} fetched by {fetching[tp]} and {g.consumer_id}"
                fetching[tp] = g.consumer_id
                value, session = owners.get(tp, (None, None))
                assert value == g.consumer_id and session == g.zookeeper.session_id, (
                    f"{g.consumer_id} fetches {tp} owned by {value} (session {session})")

    def check_stable(self):
        self.check_safety()
        live = self.live()
        owners = self.owners()
        all_partitions = {(t, p) for t, n in self.topics.items() for p in range(n)}
        consumers = {t: sorted(g.consumer_id for g in live if g.subscription.matches(t)) for t in self.topics}
        expected = range_assignment({t: list(range(n)) for t, n in self.topics.items()}, consumers)
        sessions = {g.zookeeper.session_id: g.consumer_id for g in live}
        subscribed = {tp for tp in all_partitions if consumers[tp[0]]}
        assert set(owners) == subscribed, (sorted(owners), sorted(subscribed))
        for tp, (value, session) in owners.items():
            assert sessions.get(session) == value, f"{tp} owned by {value}, not a live session"
        for g in live:
            assert g.state is GroupState.STABLE, g.state
            mine = {tp for tp, (value, _) in owners.items() if value == g.consumer_id}
            assert g.assignment() == mine == expected.get(g.consumer_id, set()), (
                g.consumer_id, g.assignment(), mine, expected.get(g.consumer_id))
            assert set(g.consumer.assigned) == mine
            ids = self.node(f"/consumers/{GROUP}/ids/{g.consumer_id}")
            assert ids is not None and ids.ephemeral_owner == g.zookeeper.session_id


class RangeAssignmentTests(SynchronousTestCase):
    def test_kafka_range(self):
        # 10 partitions, 3 consumers: 4, 3, 3 (Kafka's RangeAssignor javadoc example shape)
        result = range_assignment({"t": list(range(10))}, {"t": ["c", "a", "b"]})
        self.assertEqual(sorted(p for _, p in result["a"]), [0, 1, 2, 3])
        self.assertEqual(sorted(p for _, p in result["b"]), [4, 5, 6])
        self.assertEqual(sorted(p for _, p in result["c"]), [7, 8, 9])

    def test_more_consumers_than_partitions(self):
        result = range_assignment({"t": [0, 1]}, {"t": ["a", "b", "c"]})
        self.assertEqual(result, {"a": {("t", 0)}, "b": {("t", 1)}, "c": set()})

    def test_per_topic(self):
        result = range_assignment({"t": [0, 1], "u": [0, 1, 2]}, {"t": ["a", "b"], "u": ["b"]})
        self.assertEqual(result, {"a": {("t", 0)}, "b": {("t", 1), ("u", 0), ("u", 1), ("u", 2)}})

    @given(st.integers(0, 40), st.integers(1, 12))
    def test_partition_of_partitions(self, partitions, consumers):
        names = [f"c{i}" for i in range(consumers)]
        result = range_assignment({"t": list(range(partitions))}, {"t": names})
        owned = [tp for s in result.values() for tp in s]
        self.assertEqual(sorted(owned), [("t", p) for p in range(partitions)])
        sizes = [len(result[n]) for n in sorted(names)]
        self.assertLessEqual(max(sizes) - min(sizes), 1)
        self.assertEqual(sizes, sorted(sizes, reverse=True))


class SubscriptionTests(SynchronousTestCase):
    def test_kafka_08_json(self):
        data = encode_subscription(Subscription("static", ("t",)), 1700000000000)
        self.assertEqual(json.loads(data), {"version": 1, "subscription": {"t": 1}, "pattern": "static",
                                            "timestamp": "1700000000000"})
        self.assertEqual(decode_subscription(data), Subscription("static", ("t",)))

    def test_white_list_matches_whole_name(self):
        s = decode_subscription(encode_subscription(Subscription("white_list", ("logs-.*",)), 0))
        self.assertTrue(s.matches("logs-a"))
        self.assertFalse(s.matches("xlogs-a"))

    def test_table_is_documented(self):
        table = transition_table_markdown()
        self.assertIn("| STABLE | watch_fired | REBALANCING | begin_rebalance |", table)
        # every state but CLOSED can be left by close
        for state in GroupState:
            self.assertIn((state, "close"), TRANSITIONS)


class JoinLeaveTests(SynchronousTestCase):
    def test_single_member_takes_all_and_registers(self):
        h = Harness()
        g = h.member("c1")
        h.settle()
        self.successResultOf(g.started)
        h.check_stable()
        self.assertEqual(g.assignment(), {("t", p) for p in range(6)})
        reg = json.loads(h.node(f"/consumers/{GROUP}/ids/c1").data)
        self.assertEqual((reg["version"], reg["subscription"], reg["pattern"]), (1, {"t": 1}, "static"))
        # a new group starts at auto_offset_reset and anchors it at once
        self.assertEqual([h.committed("t", p) for p in range(6)], [0] * 6)

    def test_group_metadata_for_transactions(self):
        h = Harness()
        g = h.member("c1")
        h.settle()
        metadata = g.group_metadata()
        self.assertEqual((metadata.group_id, metadata.member_id, metadata.group_instance_id), (GROUP, "c1", None))
        self.assertEqual(metadata.generation_id, g._generation)

    def test_three_members_split_six_partitions(self):
        h = Harness()
        for cid in ("c1", "c2", "c3"):
            h.member(cid)
            h.check_safety()
        h.settle()
        h.check_stable()
        self.assertEqual([len(g.assignment()) for g in h.members], [2, 2, 2])
        self.assertEqual(h.members[0].assignment(), {("t", 0), ("t", 1)})

    def test_fourth_joins_then_one_leaves(self):
        h = Harness()
        for cid in ("c1", "c2", "c3"):
            h.member(cid)
        h.settle()
        h.member("c4")
        h.check_safety()
        h.settle()
        h.check_stable()
        self.assertEqual(sorted(len(g.assignment()) for g in h.members), [1, 1, 2, 2])
        d = h.members[1].close()
        h.check_safety()
        h.settle()
        self.successResultOf(d)
        self.assertEqual(h.members[1].state, GroupState.CLOSED)
        self.assertIsNone(h.node(f"/consumers/{GROUP}/ids/c2"))
        h.check_stable()
        self.assertEqual(sorted(len(g.assignment()) for g in h.live()), [2, 2, 2])

    def test_unaffected_member_keeps_fetching(self):
        # c1 owns 0-2 with one or two members... a broker change moves nothing: no refetch.
        h = Harness()
        g = h.member("c1")
        h.settle()
        calls = len(g.consumer.calls)
        h.admin.create("/brokers/ids/1", encode_broker("127.0.0.1", 9093), ephemeral=True)
        h.settle()
        h.check_stable()
        self.assertEqual(len(g.consumer.calls), calls)  # no assign([]), no re-seek

    def test_watch_during_rebalance_triggers_another(self):
        h = Harness(clocked=False)  # watches fire synchronously inside the other's operations
        g1 = h.member("c1")
        g2 = h.member("c2")
        h.settle()
        h.check_stable()
        self.assertTrue(any(ev == "rebalanced_stale" for _, ev, _ in g1.history + g2.history)
                        or all(g.state is GroupState.STABLE for g in h.members))


class SessionTests(SynchronousTestCase):
    def test_expiry_stops_fetching_at_once_then_rejoins(self):
        h = Harness()
        g1, g2 = h.member("c1"), h.member("c2")
        h.settle()
        seen = []
        g1.zookeeper.add_state_listener(lambda s: seen.append((s, g1._fetching, list(g1.consumer.assigned),
                                                                 g1.state)))
        g1.zookeeper.expire_session()
        self.assertEqual(seen[0], ("LOST", False, [], GroupState.EXPIRED))
        h.check_safety()
        h.settle()
        h.check_stable()
        self.assertEqual(len(g1.assignment()), 3)
        self.assertIn((GroupState.EXPIRED, "zk_new_session", GroupState.REBALANCING), g1.history)

    def test_suspension_stops_fetching_and_resumes_in_place(self):
        h = Harness()
        g = h.member("c1")
        h.settle()
        h.produce("t", 0, b"a", b"b", b"c")
        self.assertEqual(len(self.successResultOf(g.poll(0))), 3)
        czxid = h.node(f"/consumers/{GROUP}/owners/t/0").stat.czxid
        g.zookeeper.disconnect()
        self.assertEqual(g.state, GroupState.SUSPENDED)
        self.assertFalse(g._fetching)
        self.assertEqual(g.consumer.assigned, [])
        self.assertEqual(self.successResultOf(g.poll(0)), [])
        g.zookeeper.reconnect()
        h.settle()
        h.check_stable()
        self.assertEqual(h.node(f"/consumers/{GROUP}/owners/t/0").stat.czxid, czxid)  # never released
        h.produce("t", 0, b"d")
        self.assertEqual([r.value for r in self.successResultOf(g.poll(0))], [b"d"])  # no redelivery

    def test_crashed_member_partitions_go_to_the_others(self):
        h = Harness()
        g1, g2, g3 = h.member("c1"), h.member("c2"), h.member("c3")
        h.settle()
        g2.zookeeper.stop()  # the process died: its session (and ephemeral nodes) end
        h.members.remove(g2)
        h.settle()
        h.check_stable()
        self.assertEqual(sorted(len(g.assignment()) for g in (g1, g3)), [3, 3])


class ConflictTests(SynchronousTestCase):
    def ghost_owner(self, h, partition):
        ghost = FakeZooKeeperClient(h.server)
        ghost.start()
        ghost.create(f"/consumers/{GROUP}/owners/t/{partition}", b"ghost", ephemeral=True, makepath=True)
        return ghost

    def test_conflict_backs_off_and_retries(self):
        h = Harness()
        ghost = self.ghost_owner(h, 2)
        g = h.member("c1", rebalance_backoff_ms=1000)
        h.clock.advance(0)
        self.assertEqual(g.state, GroupState.BACKING_OFF)
        self.assertEqual(h.owners(), {("t", 2): ("ghost", ghost.session_id)})  # released all it had claimed
        self.assertNoResult(g.started)
        h.clock.advance(0.9)
        self.assertEqual(g.state, GroupState.BACKING_OFF)  # back-off is at least rebalance_backoff_ms
        ghost.stop()
        h.clock.advance(0.7)  # at most 1.5 x back-off
        h.settle()
        self.successResultOf(g.started)
        h.check_stable()

    def test_max_retries_then_clear_error(self):
        h = Harness()
        self.ghost_owner(h, 4)
        g = h.member("c1", rebalance_backoff_ms=100, rebalance_max_retries=2)
        for _ in range(10):
            h.clock.advance(0.2)
        self.assertEqual(g.state, GroupState.FAILED)
        self.assertTrue(g.start_failure.check(ConsumerRebalanceFailedError))
        error = g.start_failure.value
        self.assertIn("after 3 attempts", str(error))
        self.assertIn("owned by ghost", str(error))
        self.assertIsNone(h.node(f"/consumers/{GROUP}/ids/c1"))  # deregistered: others stop counting it
        self.assertEqual(set(h.owners()), {("t", 4)})
        self.failureResultOf(g.poll(0), ConsumerRebalanceFailedError)
        self.assertEqual([ev for _, ev, _ in g.history].count("claim_conflict"), 2)
        self.successResultOf(g.close())


class TopicTests(SynchronousTestCase):
    def test_partitions_added(self):
        h = Harness()
        h.member("c1"), h.member("c2")
        h.settle()
        h.grow_topic("t", 9)
        h.settle()
        h.check_stable()
        self.assertEqual(sorted(len(g.assignment()) for g in h.members), [4, 5])

    def test_pattern_picks_up_new_topics(self):
        h = Harness({"logs-a": 2, "other": 2})
        g = h.member("c1", pattern="logs-.*")
        h.settle()
        self.assertEqual(g.assignment(), {("logs-a", 0), ("logs-a", 1)})
        reg = json.loads(h.node(f"/consumers/{GROUP}/ids/c1").data)
        self.assertEqual((reg["pattern"], reg["subscription"]), ("white_list", {"logs-.*": 1}))
        h.create_topic("logs-b", 3)
        h.settle()
        self.assertEqual(len(g.assignment()), 5)
        h.grow_topic("logs-b", 4)
        h.settle()
        self.assertEqual(len(g.assignment()), 6)
        h.topics.pop("other")  # nobody subscribes to it: check_stable ignores it
        h.check_stable()

    def test_mixed_subscriptions(self):
        h = Harness({"t": 4, "u": 2})
        h.member("a", topics=("t",))
        h.member("b", topics=("t", "u"))
        h.settle()
        h.check_stable()
        self.assertEqual(h.members[1].assignment(), {("t", 2), ("t", 3), ("u", 0), ("u", 1)})


class OffsetTests(SynchronousTestCase):
    def test_largest_starts_at_log_end(self):
        h = Harness({"t": 1})
        h.produce("t", 0, b"old1", b"old2")
        g = h.member("c1", auto_offset_reset="largest")
        h.settle()
        self.assertEqual(h.committed("t", 0), 2)
        h.produce("t", 0, b"new")
        self.assertEqual([r.value for r in self.successResultOf(g.poll(0))], [b"new"])

    def test_reads_kafka_08_decimal_offsets_and_writes_the_shared_json(self):
        h = Harness({"t": 1})
        h.produce("t", 0, *[b"%d" % i for i in range(10)])
        h.admin.create(f"/consumers/{GROUP}/offsets/t/0", b"7", makepath=True)
        g = h.member("c1")
        h.settle()
        self.assertEqual([r.offset for r in self.successResultOf(g.poll(0))], [7, 8, 9])
        self.successResultOf(g.commit())
        body = json.loads(h.node(f"/consumers/{GROUP}/offsets/t/0").data)
        self.assertEqual((body["version"], body["offset"]), (1, 10))

    def test_auto_commit_commits_what_was_processed(self):
        """At least once: records count as processed once poll is called again."""
        h = Harness({"t": 1})
        g = h.member("c1", enable_auto_commit=True, auto_commit_interval_ms=1000)
        h.settle()
        h.produce("t", 0, b"a", b"b")
        self.assertEqual(len(self.successResultOf(g.poll(0))), 2)
        h.clock.advance(1.0)
        self.assertEqual(h.committed("t", 0), 0)  # a and b may still be in processing
        h.produce("t", 0, b"c")
        self.assertEqual(len(self.successResultOf(g.poll(0))), 1)  # a, b processed now
        h.clock.advance(1.0)
        self.assertEqual(h.committed("t", 0), 2)

    def test_at_most_once_commit_before_processing(self):
        h = Harness({"t": 1})
        g = h.member("c1")
        h.settle()
        h.produce("t", 0, b"a", b"b")
        self.assertEqual(len(self.successResultOf(g.poll(0))), 2)
        self.assertEqual(self.successResultOf(g.commit()), {("t", 0): 2})
        self.assertEqual(h.committed("t", 0), 2)

    def test_commit_explicit_offsets_only_of_owned_partitions(self):
        h = Harness({"t": 2})
        g1 = h.member("c1")
        h.member("c2")
        h.settle()
        self.successResultOf(g1.commit({("t", 0): 5}))
        self.assertEqual(h.committed("t", 0), 5)
        self.failureResultOf(g1.commit({("t", 0): 6, ("t", 1): 1}), CommitFailedError)
        self.assertEqual(h.committed("t", 0), 5)

    def test_crash_redelivers_after_last_commit_only(self):
        """At least once: a crash redelivers what was processed after the last commit."""
        h = Harness({"t": 1})
        g1 = h.member("c1", enable_auto_commit=True, auto_commit_interval_ms=1000)
        h.settle()
        h.produce("t", 0, *[b"%d" % i for i in range(5)])
        self.assertEqual(len(self.successResultOf(g1.poll(0))), 5)
        self.successResultOf(g1.poll(0))  # 0-4 processed
        h.clock.advance(1.0)  # auto commit: 5
        h.produce("t", 0, *[b"%d" % i for i in range(5, 8)])
        self.assertEqual(len(self.successResultOf(g1.poll(0))), 3)
        self.successResultOf(g1.poll(0))  # 5-7 processed, not yet committed
        g2 = h.member("c2")
        g1.zookeeper.stop()  # crash before the next auto commit
        h.members.remove(g1)
        h.settle()
        self.assertEqual([r.offset for r in self.successResultOf(g2.poll(0))], [5, 6, 7])  # the duplicates

    def test_rebalance_commits_processed_offsets_before_release(self):
        h = Harness({"t": 2})
        g1 = h.member("c1")
        h.settle()
        h.produce("t", 1, b"a", b"b", b"c")
        self.assertEqual(len(self.successResultOf(g1.poll(0))), 3)
        self.successResultOf(g1.poll(0))  # processed
        g2 = h.member("c2")
        h.settle()
        self.assertEqual(g2.assignment(), {("t", 1)})
        self.assertEqual(h.committed("t", 1), 3)
        self.assertEqual(self.successResultOf(g2.poll(0)), [])  # nothing twice

    def test_poll_during_rebalance_waits(self):
        h = Harness({"t": 1})
        ghost = FakeZooKeeperClient(h.server)
        ghost.start()
        ghost.create(f"/consumers/{GROUP}/owners/t/0", b"ghost", ephemeral=True, makepath=True)
        g = h.member("c1")
        h.clock.advance(0)
        self.assertEqual(g.state, GroupState.BACKING_OFF)
        d = g.poll(5000)
        self.assertNoResult(d)
        h.produce("t", 0, b"x")
        ghost.stop()
        h.settle()
        self.assertEqual([r.value for r in self.successResultOf(d)], [b"x"])

    def test_poll_waiting_across_a_rebalance_loses_nothing(self):
        h = Harness({"t": 2})
        g1, g2 = h.member("c1"), h.member("c2")
        h.settle()
        waiting = g1.poll(5000)  # waits in the consumer: partition 0 is empty
        h.produce("t", 1, b"a", b"b")
        self.successResultOf(g2.close())
        h.settle()
        h.clock.advance(5)
        got = self.successResultOf(waiting) + self.successResultOf(g1.poll(0))
        self.assertEqual([(r.partition, r.value) for r in got], [(1, b"a"), (1, b"b")])

    def test_async_iteration(self):
        h = Harness({"t": 1})
        g = h.member("c1", enable_auto_commit=True)
        h.settle()
        h.produce("t", 0, b"a", b"b")
        it = g.__aiter__()
        from twisted.internet.defer import Deferred

        first = self.successResultOf(Deferred.fromCoroutine(it.__anext__()))
        second = self.successResultOf(Deferred.fromCoroutine(it.__anext__()))
        self.assertEqual((first.value, second.value), (b"a", b"b"))
        self.assertEqual(g._processed[("t", 0)], 1)  # asking for b marked a processed
        self.successResultOf(g.close())
        self.assertEqual(h.committed("t", 0), 2)

    def test_close_commits_releases_and_deregisters(self):
        h = Harness({"t": 2})
        g = h.member("c1", enable_auto_commit=True)
        h.settle()
        h.produce("t", 0, b"a")
        self.successResultOf(g.poll(0))
        self.successResultOf(g.close())
        self.assertEqual(h.committed("t", 0), 1)
        self.assertEqual(h.owners(), {})
        self.assertIsNone(h.node(f"/consumers/{GROUP}/ids/c1"))
        self.assertEqual(g.state, GroupState.CLOSED)
        self.assertEqual(self.successResultOf(g.poll(0)), [])

    def test_close_with_manual_commits_commits_nothing(self):
        """As Kafka's consumers: with enable_auto_commit off, only commit() commits."""
        h = Harness({"t": 1})
        g = h.member("c1")
        h.settle()
        start = h.committed("t", 0)
        h.produce("t", 0, b"a", b"b")
        self.assertEqual(len(self.successResultOf(g.poll(0))), 2)
        self.successResultOf(g.close())
        self.assertEqual(h.committed("t", 0), start)
        self.assertEqual(h.owners(), {})


class PropertyTests(SynchronousTestCase):
    @settings(max_examples=int(__import__("os").environ.get("ZKG_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.sampled_from(["join", "leave", "expire", "crash", "suspend", "grow", "tick"]),
                              st.integers(0, 7)), min_size=1, max_size=14),
           st.booleans())
    def test_random_membership_changes(self, steps, clocked):
        h = Harness({"t": 5}, clocked=clocked)
        counter = 0
        partitions = 5
        for op, arg in steps:
            live = h.live()
            if op == "join" or not live:
                counter += 1
                h.member(f"c{counter:02d}", rebalance_max_retries=20)
            elif op == "leave":
                live[arg % len(live)].close()
            elif op == "expire":
                live[arg % len(live)].zookeeper.expire_session()
            elif op == "crash":
                g = live[arg % len(live)]
                g.zookeeper.stop()
                h.members.remove(g)
            elif op == "suspend":
                g = live[arg % len(live)]
                g.zookeeper.disconnect()
                h.check_safety()
                h.clock.advance(0.01)
                g.zookeeper.reconnect()
            elif op == "grow":
                partitions = min(partitions + 1 + arg % 3, 12)
                h.grow_topic("t", partitions)
            else:
                h.clock.advance(0.05 * (arg + 1))
            h.check_safety()
            h.clock.advance(0)
            h.check_safety()
        if not h.live():
            h.member("last")
        h.settle(steps=400)
        h.check_stable()
