"""
Unit tests of L{kafkatw.client.consumer_coordinator}: real
L{kafkatw.client.consumer.Consumer}s subscribed to a group, each on its own
real L{kafkatw.client.KafkaClient}, against L{kafkatw.testing.FakeCluster}
(one broker's real L{KafkaApis}: its group coordinator, logs and offsets) in
memory on a L{MemoryReactorClock}: requests are encoded, handled and decoded
as on the wire, without sockets or sleeps.  Errors the broker would give
only in a race (C{NOT_COORDINATOR}, C{ILLEGAL_GENERATION}, …) are injected
into the next response of an API, which is why the tests wrap the broker's
request handling (L{RecordingCluster}) rather than use the fake cluster as
it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.trial import unittest

from kafkatw.client import CommitFailedError, Producer
from kafkatw.client.consumer import Consumer
from kafkatw.client.consumer_coordinator import ConsumerRebalanceListener
from kafkatw.client.transaction_manager import GroupMetadata
from kafkatw.errors import ErrorCode, KafkaError
from kafkatw.protocol.messages import decode_request, decode_response, encode_response
from kafkatw.testing import FakeCluster

_NAMES = {8: "OffsetCommit", 9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
          13: "LeaveGroup", 14: "SyncGroup"}
SESSION_S = 10.0
HEARTBEAT_S = 1.0


class RecordingCluster(FakeCluster):
    """
    The fake cluster, logging the group requests of each member (its client
    id) and rewriting the error codes of responses as C{inject} says
    (api key -> the codes of its next responses).
    """

    def __init__(self, testcase: unittest.TestCase, topics: dict[str, int]) -> None:
        super().__init__(MemoryReactorClock(), topics=topics)
        testcase.addCleanup(self.close)
        self.clock = self.reactor
        self.log: list[tuple[str, str, dict]] = []
        self.inject: dict[int, list[int]] = {}
        self._handle = self.apis.handle
        self.apis.handle = self._handle_recorded  # type: ignore[method-assign]
        self._producer = Producer(self.clock, client=self.client(client_id="seed"))

    def group(self) -> str:
        return "g"

    def produce(self, topic: str, partition: int, count: int) -> None:
        for i in range(count):
            self.result(self._producer.send(topic, b"v%d" % i, partition=partition, timestamp_ms=1000 + i))

    def _handle_recorded(self, header: Any, frame: bytes, *args: Any, **kwargs: Any) -> Any:
        api_key = header.api_key
        if api_key in _NAMES:
            self.log.append((header.client_id, _NAMES[api_key], dataclasses.asdict(decode_request(frame, header))))
        result = self._handle(header, frame, *args, **kwargs)
        codes = self.inject.get(api_key)
        if not codes:
            return result

        def rewrite(raw: bytes) -> bytes:
            code = codes.pop(0)
            correlation_id, response = decode_response(api_key, header.api_version, raw)
            if api_key == 8:  # OffsetCommit: the partitions' codes
                topics = tuple(dataclasses.replace(t, partitions=tuple(
                    dataclasses.replace(p, error_code=code) for p in t.partitions)) for t in response.topics)
                response = dataclasses.replace(response, topics=topics)
            else:
                response = dataclasses.replace(response, error_code=code)
            return encode_response(api_key, header.api_version, correlation_id, response)

        if isinstance(result, defer.Deferred):
            return result.addCallback(rewrite)
        return rewrite(result)

    def names(self, who: str | None = None) -> list[str]:
        return [name for w, name, _ in self.log if who is None or w == who]


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, list]] = []

    def on_partitions_revoked(self, revoked: set) -> None:
        self.calls.append(("revoked", sorted(revoked)))

    def on_partitions_assigned(self, assigned: set) -> None:
        self.calls.append(("assigned", sorted(assigned)))

    def on_partitions_lost(self, lost: set) -> None:
        self.calls.append(("lost", sorted(lost)))


class CoordinatorTestCase(unittest.TestCase):
    topics = {"t": 4}

    def setUp(self) -> None:
        self.cluster = RecordingCluster(self, self.topics)
        self.clock = self.cluster.clock
        self.group = self.cluster.group()

    def member(self, name: str, **options: Any) -> Consumer:
        options.setdefault("session_timeout_ms", int(SESSION_S * 1000))
        options.setdefault("heartbeat_interval_ms", int(HEARTBEAT_S * 1000))
        options.setdefault("auto_offset_reset", "earliest")
        options.setdefault("fetch_max_wait_ms", 100)
        consumer = Consumer(self.clock, client=self.cluster.client(client_id=name), group_id=self.group, **options)
        self.addCleanup(lambda: self.settle(consumer.close(), 2))
        return consumer

    def settle(self, d: defer.Deferred | None = None, seconds: float = 0.0) -> Any:
        """Turn the clock (in small steps, up to C{seconds}) and return C{d}'s result."""
        self.clock.advance(0)
        steps = int(seconds / 0.05)
        for _ in range(steps):
            if d is not None and d.called:
                break
            self.clock.advance(0.05)
        self.clock.advance(0)
        if d is not None:
            return self.successResultOf(d)
        return None

    def stable(self, *consumers: Consumer) -> list[set]:
        """Poll and turn the clock until every consumer is in a stable generation; their partitions."""
        for _ in range(200):
            for consumer in consumers:
                consumer.poll(timeout_ms=0)  # members (re)join in poll
            self.clock.advance(0.05)
            if all(c.coordinator._joining is None and not c.coordinator._rejoin_needed
                   and c.coordinator.generation_id >= 0 for c in consumers):
                break
        return [c.assignment() for c in consumers]

    def ranges(self, *consumers: Consumer) -> list[set]:
        """What the range assignor gives C{consumers} (sorted by member id) of 4 partitions of t."""
        order = sorted(consumers, key=lambda c: c.coordinator.member_id)
        share = 4 // len(consumers)
        by = {id(c): {("t", p) for p in range(i * share, (i + 1) * share)} for i, c in enumerate(order)}
        return [by[id(c)] for c in consumers]


class JoinTests(CoordinatorTestCase):
    def test_join_sync_heartbeat(self) -> None:
        consumer = self.member("a")
        consumer.subscribe(["t"])
        assigned = self.settle(consumer.wait_for_assignment(), 2)
        self.assertEqual(assigned, {("t", p) for p in range(4)})
        self.assertEqual(consumer.assignment(), assigned)
        # KIP-394: the first join is refused with a member id, the second one joins with it
        self.assertEqual(self.cluster.names("a")[:4], ["FindCoordinator", "JoinGroup", "JoinGroup", "SyncGroup"])
        joins = [body for _, name, body in self.cluster.log if name == "JoinGroup"]
        self.assertEqual(joins[0]["member_id"], "")
        self.assertEqual(joins[1]["member_id"], consumer.coordinator.member_id)
        self.assertEqual([p["name"] for p in joins[1]["protocols"]], ["range", "cooperative-sticky"])
        # heartbeats on their own timer, every heartbeat interval, without polls
        before = self.cluster.names("a").count("Heartbeat")
        for _ in range(5):
            self.clock.advance(HEARTBEAT_S)
        self.clock.advance(0.01)
        self.assertEqual(self.cluster.names("a").count("Heartbeat") - before, 5)
        meta = consumer.group_metadata()
        self.assertEqual(meta, GroupMetadata(self.group, 1, consumer.coordinator.member_id, None))

    def test_records_from_the_committed_offsets(self) -> None:
        for p in range(4):
            self.cluster.produce("t", p, 3)
        first = self.member("a", enable_auto_commit=False)
        first.subscribe(["t"])
        self.settle(first.wait_for_assignment(), 2)
        records = self.settle(first.poll(timeout_ms=1000), 1)
        self.assertEqual(len(records), 12)
        self.assertEqual(self.settle(first.commit({("t", 0): 2}), 1), {("t", 0): 2})
        commit = [body for _, name, body in self.cluster.log if name == "OffsetCommit"][-1]
        self.assertEqual((commit["generation_id_or_member_epoch"], commit["member_id"]),
                         (first.coordinator.generation_id, first.coordinator.member_id))
        self.assertEqual(self.settle(first.committed([("t", 0), ("t", 1)]), 1), {("t", 0): 2, ("t", 1): -1})
        self.settle(first.close(), 1)
        self.assertIn("LeaveGroup", self.cluster.names("a"))
        # the next member starts partition 0 at its committed offset, the others at the beginning
        second = self.member("b")
        second.subscribe(["t"])
        self.settle(second.wait_for_assignment(), 2)
        records = self.settle(second.poll(timeout_ms=1000), 1)
        self.assertEqual(sorted((r.partition, r.offset) for r in records),
                         [(0, 2)] + [(p, o) for p in (1, 2, 3) for o in range(3)])

    def test_auto_commit_commits_what_earlier_polls_returned(self) -> None:
        self.cluster.produce("t", 0, 5)
        consumer = self.member("a", auto_commit_interval_ms=1000)
        consumer.subscribe(["t"])
        self.settle(consumer.wait_for_assignment(), 2)
        records = self.settle(consumer.poll(timeout_ms=1000), 1)
        self.assertEqual(len(records), 5)
        self.settle(None, 1.1)
        # not yet: the records of the last poll are being processed until the next poll
        self.assertEqual(self.settle(consumer.committed([("t", 0)]), 1), {("t", 0): 0})
        consumer.poll(timeout_ms=0)
        self.settle(None, 1.1)
        self.assertEqual(self.settle(consumer.committed([("t", 0)]), 1), {("t", 0): 5})

    def test_two_members_rebalance_through_rebalance_in_progress(self) -> None:
        a = self.member("a", partition_assignment_strategy=["range"])
        listener_a = Recorder()
        a.subscribe(["t"], listener_a)
        self.settle(a.wait_for_assignment(), 2)
        b = self.member("b", partition_assignment_strategy=["range"])
        b.subscribe(["t"])
        assignments = self.stable(a, b)
        self.assertEqual(assignments, self.ranges(a, b))
        # a heard of the rebalance in a heartbeat (REBALANCE_IN_PROGRESS) and rejoined: eager
        self.assertEqual(listener_a.calls, [("assigned", [("t", p) for p in range(4)]),
                                            ("revoked", [("t", p) for p in range(4)]),
                                            ("assigned", sorted(assignments[0]))])
        self.assertEqual(a.coordinator.generation_id, b.coordinator.generation_id)
        self.assertEqual(a.coordinator.protocol, "range")

    def test_rebalance_waits_for_the_next_poll(self) -> None:
        """
        A rebalance learnt in a heartbeat moves nothing until the application
        polls (Kafka's consumer rebalances inside poll); heartbeats go on.
        """
        a = self.member("a", partition_assignment_strategy=["range"])
        listener = Recorder()
        a.subscribe(["t"], listener)
        self.settle(a.wait_for_assignment(), 2)
        b = self.member("b", partition_assignment_strategy=["range"])
        b.subscribe(["t"])
        b.poll(timeout_ms=0)
        joins = self.cluster.names("a").count("JoinGroup")
        beats = self.cluster.names("a").count("Heartbeat")
        # each heartbeat's answer may wait behind a Fetch (fetch_max_wait_ms) on the one connection
        self.settle(None, HEARTBEAT_S * 3 + 0.5)
        self.assertEqual(self.cluster.names("a").count("JoinGroup"), joins)
        self.assertGreaterEqual(self.cluster.names("a").count("Heartbeat") - beats, 3)
        self.assertEqual(listener.calls, [("assigned", [("t", p) for p in range(4)])])
        self.assertEqual(a.assignment(), {("t", p) for p in range(4)})
        self.assertEqual(self.stable(a, b), self.ranges(a, b))
        self.assertEqual([name for name, _ in listener.calls], ["assigned", "revoked", "assigned"])

    def test_protocol_chosen_among_members(self) -> None:
        a = self.member("a", partition_assignment_strategy=["roundrobin", "range"])
        a.subscribe(["t"])
        self.settle(a.wait_for_assignment(), 2)
        b = self.member("b", partition_assignment_strategy=["range"])
        b.subscribe(["t"])
        self.assertEqual(self.stable(a, b), self.ranges(a, b))
        self.assertEqual(a.coordinator.protocol, "range")

    def test_heartbeat_fenced_rejoins_and_loses_partitions(self) -> None:
        for code, member_kept in ((ErrorCode.illegal_generation, True), (ErrorCode.unknown_member_id, False)):
            consumer = self.member(f"a{code}")
            listener = Recorder()
            consumer.subscribe(["t"], listener)
            self.settle(consumer.wait_for_assignment(), 2)
            member_id = consumer.coordinator.member_id
            self.cluster.inject[12] = [code]
            self.settle(None, HEARTBEAT_S + 0.1)
            self.stable(consumer)
            self.assertEqual(listener.calls, [("assigned", [("t", p) for p in range(4)]),
                                              ("lost", [("t", p) for p in range(4)]),
                                              ("assigned", [("t", p) for p in range(4)])])
            joins = [body for who, name, body in self.cluster.log if name == "JoinGroup" and who == f"a{code}"]
            self.assertEqual(joins[-1]["member_id"] == member_id, member_kept)
            self.settle(consumer.close(), 1)

    def test_coordinator_moved_is_found_again(self) -> None:
        consumer = self.member("a")
        consumer.subscribe(["t"])
        self.settle(consumer.wait_for_assignment(), 2)
        self.assertEqual(self.cluster.names("a").count("FindCoordinator"), 1)
        self.cluster.inject[12] = [ErrorCode.not_coordinator]
        self.settle(None, HEARTBEAT_S + 0.5)
        self.assertEqual(self.cluster.names("a").count("FindCoordinator"), 2)
        self.assertEqual(self.cluster.names("a")[-2:], ["FindCoordinator", "Heartbeat"])
        self.assertEqual(consumer.assignment(), {("t", p) for p in range(4)})  # no rebalance
        # a moved coordinator during a commit: the synchronous commit finds it and retries
        self.cluster.inject[8] = [ErrorCode.coordinator_not_available]
        self.assertEqual(self.settle(consumer.commit({("t", 1): 0}), 2), {("t", 1): 0})
        self.assertEqual(self.cluster.names("a").count("FindCoordinator"), 3)

    def test_commit_of_a_fenced_generation_fails(self) -> None:
        consumer = self.member("a", enable_auto_commit=False)
        listener = Recorder()
        consumer.subscribe(["t"], listener)
        self.settle(consumer.wait_for_assignment(), 2)
        self.cluster.inject[8] = [ErrorCode.illegal_generation]
        d = consumer.commit({("t", 0): 1})
        self.settle(None, 0.1)
        self.failureResultOf(d, CommitFailedError)
        self.stable(consumer)
        self.assertEqual(listener.calls[-2:], [("lost", [("t", p) for p in range(4)]),
                                               ("assigned", [("t", p) for p in range(4)])])
        self.assertEqual(self.settle(consumer.commit({("t", 0): 1}), 1), {("t", 0): 1})
        # commit_async: one attempt, the error to the callback
        results = []
        self.cluster.inject[8] = [ErrorCode.group_authorization_failed]
        self.settle(consumer.commit_async({("t", 0): 2}, lambda offsets, e: results.append((offsets, e))), 0.5)
        [(offsets, error)] = results
        self.assertEqual(offsets, {("t", 0): 2})
        self.assertEqual(ErrorCode(error.error_code), ErrorCode.group_authorization_failed)

    def test_fatal_join_error_fails_polls(self) -> None:
        consumer = self.member("a")
        self.cluster.inject[11] = [ErrorCode.member_id_required, ErrorCode.group_authorization_failed]
        consumer.subscribe(["t"])
        waiting = consumer.poll(timeout_ms=None)
        self.clock.advance(0)
        failure = self.failureResultOf(waiting, KafkaError)
        self.assertEqual(ErrorCode(failure.value.error_code), ErrorCode.group_authorization_failed)
        self.failureResultOf(consumer.poll(timeout_ms=0), KafkaError)

    def test_assigned_partitions_commit_to_the_group(self) -> None:
        """Partitions assigned by hand use the group's offsets too, without a generation (Kafka's too)."""
        self.cluster.produce("t", 1, 5)
        consumer = self.member("a")
        consumer.assign([("t", 1)])
        self.assertEqual(self.settle(consumer.commit({("t", 1): 3}), 1), {("t", 1): 3})
        commit = [body for _, name, body in self.cluster.log if name == "OffsetCommit"][-1]
        self.assertEqual((commit["generation_id_or_member_epoch"], commit["member_id"]), (-1, ""))
        other = self.member("b")
        other.assign([("t", 1)])
        records = self.settle(other.poll(timeout_ms=1000), 1)
        self.assertEqual([r.offset for r in records], [3, 4])
        self.assertNotIn("JoinGroup", self.cluster.names())

    def test_assign_and_subscribe_exclude_each_other(self) -> None:
        consumer = self.member("a")
        consumer.subscribe(["t"])
        self.assertRaises(RuntimeError, consumer.assign, [("t", 0)])
        plain = Consumer(self.clock, client=self.cluster.client(client_id="p"))
        self.addCleanup(plain.close)
        self.assertRaises(ValueError, plain.subscribe, ["t"])
        self.assertRaises(ValueError, plain.commit)


class StickyTests(CoordinatorTestCase):
    topics = {"t": 6}

    def test_eager_sticky_keeps_partitions_through_its_user_data(self) -> None:
        """Eager members revoke everything before joining; the sticky user data still keeps them."""
        sticky = {"partition_assignment_strategy": ["sticky"]}
        a, b = self.member("a", **sticky), self.member("b", **sticky)
        a.subscribe(["t"])
        self.settle(a.wait_for_assignment(), 2)
        b.subscribe(["t"])
        before_a, before_b = self.stable(a, b)
        self.assertEqual(len(before_a), 3)
        c = self.member("c", **sticky)
        c.subscribe(["t"])
        after_a, after_b, after_c = self.stable(a, b, c)
        self.assertEqual([len(after_a), len(after_b), len(after_c)], [2, 2, 2])
        self.assertTrue(after_a <= before_a and after_b <= before_b)  # only moves to the newcomer
        joins = [body for who, name, body in self.cluster.log if name == "JoinGroup" and who == "a"]
        self.assertEqual(joins[-1]["protocols"][0]["name"], "sticky")


class StaticMembershipTests(CoordinatorTestCase):
    def test_static_member_rejoins_without_a_rebalance(self) -> None:
        a = self.member("a", group_instance_id="inst-a", partition_assignment_strategy=["range"])
        a.subscribe(["t"])
        self.settle(a.wait_for_assignment(), 2)
        b = self.member("b", partition_assignment_strategy=["range"])
        b.subscribe(["t"])
        before = self.stable(a, b)
        generation = b.coordinator.generation_id
        self.assertEqual(a.group_metadata().group_instance_id, "inst-a")
        self.settle(a.close(), 1)
        self.assertNotIn("LeaveGroup", self.cluster.names("a"))  # a static member does not leave
        again = self.member("a2", group_instance_id="inst-a", partition_assignment_strategy=["range"])
        again.subscribe(["t"])
        self.settle(again.wait_for_assignment(), 2)
        self.settle(None, HEARTBEAT_S * 3)
        self.assertEqual(again.assignment(), before[0])
        self.assertEqual(b.assignment(), before[1])
        self.assertEqual(b.coordinator.generation_id, generation)  # b never rejoined
        self.assertEqual(self.cluster.names("a2")[1:3], ["JoinGroup", "SyncGroup"])  # no member-id round


class CooperativeTests(CoordinatorTestCase):
    def test_two_phase_rebalance_keeps_unaffected_partitions(self) -> None:
        a = self.member("a", partition_assignment_strategy=["cooperative-sticky"])
        listener_a = Recorder()
        a.subscribe(["t"], listener_a)
        self.settle(a.wait_for_assignment(), 2)
        self.assertEqual(a.assignment(), {("t", p) for p in range(4)})
        a.pause(("t", 0), ("t", 3))
        b = self.member("b", partition_assignment_strategy=["cooperative-sticky"])
        listener_b = Recorder()
        b.subscribe(["t"], listener_b)
        kept_a, got_b = self.stable(a, b)
        self.assertEqual(len(kept_a), 2)
        self.assertEqual(len(got_b), 2)
        self.assertEqual(kept_a | got_b, {("t", p) for p in range(4)})
        # a revoked only what moved to b, never the others; b got them in a second round
        self.assertEqual(listener_a.calls[:3], [("assigned", [("t", p) for p in range(4)]),
                                                ("revoked", sorted(got_b)),
                                                ("assigned", [])])
        self.assertTrue(all(call == ("assigned", []) for call in listener_a.calls[3:]), listener_a.calls)
        self.assertEqual(listener_b.calls[-1], ("assigned", sorted(got_b)))
        self.assertEqual(listener_b.calls[0], ("assigned", []))
        self.assertGreaterEqual(a.coordinator.rebalances, 3)  # the second round
        # pause survives for the partitions a kept
        self.assertEqual(a.paused(), {("t", 0), ("t", 3)} & kept_a)

    def test_pause_survives_an_eager_rebalance_for_kept_partitions(self) -> None:
        a = self.member("a", partition_assignment_strategy=["range"])
        a.subscribe(["t"])
        self.settle(a.wait_for_assignment(), 2)
        a.pause(("t", 0), ("t", 3))
        b = self.member("b", partition_assignment_strategy=["range"])
        b.subscribe(["t"])
        kept = self.stable(a, b)[0]
        self.assertEqual(kept, self.ranges(a, b)[0])
        self.assertEqual(a.paused(), {("t", 0), ("t", 3)} & kept)
        self.assertEqual(len(a.paused()), 1)


class CoordinatorConnectionTests(CoordinatorTestCase):
    """
    The member talks to its coordinator on a connection of its own, as
    Kafka's C{AbstractCoordinator} does (node id C{Integer.MAX_VALUE - id}):
    a broker answers each connection's requests in order, so on a shared
    connection a commit, a heartbeat or a JoinGroup would wait behind a
    Fetch the broker holds for up to C{fetch_max_wait_ms}.
    """

    def test_commit_does_not_wait_behind_a_parked_fetch(self) -> None:
        consumer = self.member("m", fetch_max_wait_ms=10000, enable_auto_commit=False)
        consumer.subscribe(["t"])
        self.assertEqual(self.stable(consumer), [{("t", p) for p in range(4)}])
        self.settle(None, 0.5)  # the topic is empty: a Fetch is held at the broker for 10 s
        committed = consumer.commit({("t", 0): 0})
        self.settle(None, 0.2)
        self.assertEqual(self.successResultOf(committed), {("t", 0): 0})

    def test_heartbeats_go_on_while_a_fetch_is_parked(self) -> None:
        consumer = self.member("m", fetch_max_wait_ms=10000)
        consumer.subscribe(["t"])
        self.stable(consumer)
        before = len([r for r in self.cluster.log if r[1] == "Heartbeat"])
        self.settle(None, 3 * HEARTBEAT_S + 0.2)
        after = len([r for r in self.cluster.log if r[1] == "Heartbeat"])
        self.assertGreaterEqual(after - before, 3)
