"""
Unit tests of the group coordinator: the classic group state machine on a
L{Clock}, offsets batched into an in-memory ZooKeeper, and the group APIs
through L{KafkaApis}.  No sockets, no sleeps.
"""

from __future__ import annotations

import json

from twisted.internet.task import Clock
from twisted.internet.testing import EventLoggingObserver
from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial import unittest

from kafkatw.broker.group_coordinator import (
    VALID_PREVIOUS_STATES,
    Group,
    GroupCoordinator,
    GroupState,
    OffsetStore,
    coordinator_for,
)
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import CommittedOffset, decode_committed_offset

from .test_broker import BrokerHarness

SESSION_MS = 10000
REBALANCE_MS = 30000
DELAY_MS = 3000
PROTOCOLS = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]


class Harness:
    """A GroupCoordinator of broker 0 over a fake ZooKeeper and a Clock."""

    def __init__(self, testcase: unittest.TestCase, **overrides: object) -> None:
        self.testcase = testcase
        self.clock = Clock()
        self.config = BrokerConfig({"group.initial.rebalance.delay.ms": DELAY_MS, **overrides})
        self.zookeeper = FakeZooKeeperClient()
        testcase.successResultOf(self.zookeeper.start())
        self.registry = Registry(self.zookeeper)
        self.live = [0]
        self.offsets = OffsetStore(self.registry, self.clock, batch_interval_ms=10, timeout_ms=5000,
                                   now_ms=lambda: int(self.clock.seconds() * 1000))
        self.coordinator = GroupCoordinator(0, self.config, self.clock, lambda: list(self.live), self.offsets)

    def join(self, group: str = "g", member_id: str = "", instance: str | None = None, require_known: bool = False,
             protocols: list | None = None, session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS,
             protocol_type: str = "consumer"):
        return self.coordinator.join_group(group, member_id, instance, require_known, "client", "/127.0.0.1",
                                           rebalance_ms, session_ms, protocol_type,
                                           protocols if protocols is not None else PROTOCOLS)

    def sync(self, member_id: str, generation: int, assignments: dict | None = None, group: str = "g",
             instance: str | None = None):
        return self.coordinator.sync_group(group, generation, member_id, instance, None, None, assignments or {})

    def heartbeat(self, member_id: str, generation: int, group: str = "g", instance: str | None = None):
        return self.testcase.successResultOf(self.coordinator.heartbeat(group, member_id, instance, generation))

    def advance_joins(self, ds: list) -> None:
        """Advance the clock by initial delays until every JoinGroup is answered (each new member extends it)."""
        for _ in range(10):
            if all(d.called for d in ds):
                return
            self.clock.advance(DELAY_MS / 1000)

    def group(self, group: str = "g") -> Group:
        return self.coordinator.groups[group]

    def stable_group(self, count: int, group: str = "g", instances: list | None = None) -> list:
        """Members joined and synced, each assigned its own id as bytes: [(member_id, generation)]."""
        ds = [self.join(group, instance=(instances[i] if instances else None)) for i in range(count)]
        self.advance_joins(ds)
        results = [self.testcase.successResultOf(d) for d in ds]
        leader = results[0].leader_id
        self.testcase.assertEqual(self.group(group).state, GroupState.COMPLETING_REBALANCE)
        syncs = [self.sync(r.member_id, r.generation_id,
                           {x.member_id: x.member_id.encode() for x in results} if r.member_id == leader else {},
                           group=group, instance=(instances[i] if instances else None))
                 for i, r in enumerate(results)]
        for r, d in zip(results, syncs):
            self.testcase.assertEqual(self.testcase.successResultOf(d).assignment, r.member_id.encode())
        self.testcase.assertEqual(self.group(group).state, GroupState.STABLE)
        return [(r.member_id, r.generation_id) for r in results]


class TransitionTableTests(unittest.TestCase):
    def test_table_is_kafkas(self) -> None:
        S = GroupState
        self.assertEqual(VALID_PREVIOUS_STATES, {
            S.EMPTY: {S.PREPARING_REBALANCE},
            S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
            S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
            S.STABLE: {S.COMPLETING_REBALANCE},
            S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
        })

    def test_invalid_transition_is_refused(self) -> None:
        group = Group("g")
        with self.assertRaises(AssertionError):
            group.transition_to(GroupState.STABLE)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        group.transition_to(GroupState.STABLE)


class JoinTests(unittest.TestCase):
    def test_first_join_waits_for_the_initial_delay(self) -> None:
        h = Harness(self)
        d = h.join()
        self.assertEqual(h.group().state, GroupState.PREPARING_REBALANCE)
        h.clock.advance(DELAY_MS / 1000 - 0.1)
        self.assertNoResult(d)
        h.clock.advance(0.1)
        result = self.successResultOf(d)
        self.assertEqual(result.error, ErrorCode.none)
        self.assertEqual(result.generation_id, 1)
        self.assertEqual(result.leader_id, result.member_id)
        self.assertEqual(result.protocol_name, "range")
        self.assertEqual([m["metadata"] for m in result.members], [b"range-meta"])
        self.assertEqual(h.group().state, GroupState.COMPLETING_REBALANCE)
        sync = self.successResultOf(h.sync(result.member_id, 1, {result.member_id: b"A"}))
        self.assertEqual((sync.error, sync.assignment, sync.protocol_name), (ErrorCode.none, b"A", "range"))
        self.assertEqual(h.group().state, GroupState.STABLE)

    def test_new_members_extend_the_initial_delay_up_to_the_rebalance_timeout(self) -> None:
        h = Harness(self)
        first = h.join(rebalance_ms=7000)
        h.clock.advance(2.0)
        second = h.join(rebalance_ms=7000)
        h.clock.advance(1.0)  # first delay over, a member was added: wait min(3000, 4000 left)
        self.assertNoResult(first)
        h.clock.advance(2.9)
        self.assertNoResult(first)
        h.clock.advance(0.1)
        r1, r2 = self.successResultOf(first), self.successResultOf(second)
        self.assertEqual((r1.generation_id, r2.generation_id), (1, 1))
        self.assertEqual((len(r1.members), r2.members), (2, ()))

    def test_member_id_required_first_round(self) -> None:
        """KIP-394: a JoinGroup v4+ without member id gets one with MEMBER_ID_REQUIRED."""
        h = Harness(self)
        first = self.successResultOf(h.join(require_known=True))
        self.assertEqual(first.error, ErrorCode.member_id_required)
        self.assertTrue(first.member_id.startswith("client-"))
        d = h.join(member_id=first.member_id, require_known=True)
        h.clock.advance(DELAY_MS / 1000)
        self.assertEqual(self.successResultOf(d).member_id, first.member_id)

    def test_pending_member_expires(self) -> None:
        h = Harness(self)
        first = self.successResultOf(h.join(require_known=True))
        h.clock.advance(SESSION_MS / 1000)
        self.assertEqual(self.successResultOf(h.join(member_id=first.member_id)).error, ErrorCode.unknown_member_id)

    def test_join_while_stable_rebalances_and_completes_when_all_rejoined(self) -> None:
        h = Harness(self)
        [(a, generation)] = h.stable_group(1)
        b = h.join()
        self.assertEqual(h.group().state, GroupState.PREPARING_REBALANCE)
        self.assertEqual(h.heartbeat(a, generation), ErrorCode.rebalance_in_progress)
        self.assertEqual(self.successResultOf(h.sync(a, generation)).error, ErrorCode.rebalance_in_progress)
        self.assertNoResult(b)
        a_join = h.join(member_id=a)
        ra, rb = self.successResultOf(a_join), self.successResultOf(b)  # no wait: everyone rejoined
        self.assertEqual((ra.generation_id, rb.generation_id), (2, 2))
        self.assertEqual(ra.leader_id, a)
        self.assertEqual(len(ra.members), 2)
        self.assertEqual(h.heartbeat(a, 1), ErrorCode.illegal_generation)

    def test_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout(self) -> None:
        h = Harness(self)
        (a, _), (b, generation) = h.stable_group(2)
        d = h.join(member_id=b)  # b is not the leader but changes nothing... force via new protocols
        self.assertEqual(self.successResultOf(d).generation_id, generation)  # follower: current generation
        d = h.join(member_id=b, protocols=[("roundrobin", b"x")])
        self.assertEqual(h.group().state, GroupState.PREPARING_REBALANCE)
        for _ in range(int(REBALANCE_MS / 1000) - 1):
            h.clock.advance(1)
            h.heartbeat(a, generation)
        self.assertNoResult(d)
        h.clock.advance(1)
        result = self.successResultOf(d)
        self.assertEqual(result.generation_id, generation + 1)
        self.assertEqual(result.leader_id, b)  # the leader did not rejoin: another member leads
        self.assertEqual(list(h.group().members), [b])
        self.assertEqual(h.heartbeat(a, generation + 1), ErrorCode.unknown_member_id)

    def test_protocol_chosen_by_votes_among_common_protocols(self) -> None:
        h = Harness(self)
        ds = [h.join(protocols=[("roundrobin", b""), ("range", b"")]),
              h.join(protocols=[("range", b""), ("roundrobin", b"")]),
              h.join(protocols=[("roundrobin", b""), ("range", b""), ("sticky", b"")])]
        self.assertEqual(self.successResultOf(h.join(protocols=[("sticky", b"")])).error,
                         ErrorCode.inconsistent_group_protocol)
        h.advance_joins(ds)
        self.assertEqual({self.successResultOf(d).protocol_name for d in ds}, {"roundrobin"})

    def test_protocol_type_must_match(self) -> None:
        h = Harness(self)
        h.join()
        self.assertEqual(self.successResultOf(h.join(protocol_type="connect")).error,
                         ErrorCode.inconsistent_group_protocol)

    def test_session_timeout_bounds(self) -> None:
        h = Harness(self)
        self.assertEqual(self.successResultOf(h.join(session_ms=5999)).error, ErrorCode.invalid_session_timeout)
        self.assertEqual(self.successResultOf(h.join(session_ms=1800001)).error, ErrorCode.invalid_session_timeout)

    def test_unknown_member_rejoining_unknown_group(self) -> None:
        h = Harness(self)
        self.assertEqual(self.successResultOf(h.join(member_id="nobody")).error, ErrorCode.unknown_member_id)


class ExpiryAndLeaveTests(unittest.TestCase):
    def test_member_without_heartbeats_is_expired(self) -> None:
        h = Harness(self)
        (a, generation), (b, _) = h.stable_group(2)
        for _ in range(int(SESSION_MS / 1000) - 1):
            h.clock.advance(1)
            self.assertEqual(h.heartbeat(b, generation), ErrorCode.none)
        self.assertEqual(h.group().state, GroupState.STABLE)
        h.clock.advance(1)  # a's session is over
        self.assertEqual(h.group().state, GroupState.PREPARING_REBALANCE)
        self.assertNotIn(a, h.group().members)
        self.assertEqual(h.heartbeat(b, generation), ErrorCode.rebalance_in_progress)
        result = self.successResultOf(h.join(member_id=b))
        self.assertEqual((result.generation_id, result.leader_id), (generation + 1, b))

    def test_last_member_expiring_empties_the_group(self) -> None:
        h = Harness(self)
        [(a, generation)] = h.stable_group(1)
        h.clock.advance(SESSION_MS / 1000)
        self.assertEqual(h.group().state, GroupState.EMPTY)
        self.assertEqual(h.group().generation_id, generation + 1)
        self.assertEqual(h.heartbeat(a, generation), ErrorCode.unknown_member_id)

    def test_leave(self) -> None:
        h = Harness(self)
        (a, generation), (b, _) = h.stable_group(2)
        top, codes = self.successResultOf(h.coordinator.leave_group("g", [(b, None), ("ghost", None)]))
        self.assertEqual((top, codes), (ErrorCode.none, [ErrorCode.none, ErrorCode.unknown_member_id]))
        self.assertEqual(h.group().state, GroupState.PREPARING_REBALANCE)
        result = self.successResultOf(h.join(member_id=a))
        self.assertEqual(result.generation_id, generation + 1)
        self.assertEqual(list(h.group().members), [a])
        self.successResultOf(h.coordinator.leave_group("g", [(a, None)]))
        # The last member left: the rebalance completes at once (Kafka's
        # tryCompleteElseWatch), not on a later reactor turn.
        self.assertEqual(h.group().state, GroupState.EMPTY)
        self.assertEqual(h.group().generation_id, generation + 2)
        self.assertEqual(h.clock.getDelayedCalls(), [])

    def test_leave_of_the_only_member_during_completing_rebalance(self) -> None:
        h = Harness(self)
        d = h.join()
        h.clock.advance(DELAY_MS / 1000)
        a = self.successResultOf(d).member_id
        self.successResultOf(h.coordinator.leave_group("g", [(a, None)]))
        self.assertEqual(h.group().state, GroupState.EMPTY)
        self.assertEqual(h.group().generation_id, 2)
        self.assertEqual(self.successResultOf(h.sync(a, 1)).error, ErrorCode.unknown_member_id)

    def test_join_pipelined_after_the_last_members_leave(self) -> None:
        """
        A LeaveGroup of the last member and a JoinGroup handled right after it,
        before the reactor turns (aiokafka sends both back to back on one
        connection): the join meets an Empty group and is accepted -- any
        protocols, even ones the old member did not have.
        """
        for require_known in (False, True):
            for protocols in (PROTOCOLS, [("cooperative-sticky", b"cs")]):
                h = Harness(self)
                [(a, generation)] = h.stable_group(1)
                top, codes = self.successResultOf(h.coordinator.leave_group("g", [(a, None)]))
                self.assertEqual((top, codes), (ErrorCode.none, [ErrorCode.none]))
                d = h.join(require_known=require_known, protocols=protocols)
                if require_known:
                    first = self.successResultOf(d)
                    self.assertEqual(first.error, ErrorCode.member_id_required)
                    d = h.join(member_id=first.member_id, require_known=True, protocols=protocols)
                self.assertEqual(h.group().state, GroupState.PREPARING_REBALANCE)
                h.clock.advance(DELAY_MS / 1000)
                result = self.successResultOf(d)
                self.assertEqual((result.error, result.generation_id, result.protocol_name, result.leader_id),
                                 (ErrorCode.none, generation + 2, protocols[0][0], result.member_id))

    def test_leave_and_rejoin_of_every_member_pipelined(self) -> None:
        """Two members leave in one LeaveGroup (v3+) and both rejoin at once: a new generation with both."""
        h = Harness(self)
        (a, generation), (b, _) = h.stable_group(2)
        self.successResultOf(h.coordinator.leave_group("g", [(a, None), (b, None)]))
        self.assertEqual(h.group().state, GroupState.EMPTY)
        ds = [h.join(), h.join()]
        h.advance_joins(ds)
        results = [self.successResultOf(d) for d in ds]
        self.assertEqual({(r.error, r.generation_id) for r in results}, {(ErrorCode.none, generation + 2)})

    def test_rejected_joins_are_logged_with_their_reason(self) -> None:
        observer = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        h = Harness(self)
        h.join()
        self.assertEqual(self.successResultOf(h.join(protocols=[("sticky", b"")])).error,
                         ErrorCode.inconsistent_group_protocol)
        self.assertEqual(self.successResultOf(h.join(member_id="nobody", group="other")).error,
                         ErrorCode.unknown_member_id)
        self.assertEqual(self.successResultOf(h.join(session_ms=1)).error, ErrorCode.invalid_session_timeout)
        rejected = [formatEvent(e) for e in observer if "rejected JoinGroup" in e.get("log_format", "")]
        self.assertEqual(len(rejected), 3, rejected)
        self.assertIn("INCONSISTENT_GROUP_PROTOCOL (23)", rejected[0])
        self.assertIn("none of the protocols [sticky] is supported by all 1 members", rejected[0])
        self.assertIn("UNKNOWN_MEMBER_ID (25)", rejected[1])
        self.assertIn("'other'", rejected[1])
        self.assertIn("INVALID_SESSION_TIMEOUT (26)", rejected[2])
        self.assertIn("group.min.session.timeout.ms", rejected[2])

    def test_member_that_never_syncs_is_removed(self) -> None:
        h = Harness(self)
        ds = [h.join(), h.join()]
        h.advance_joins(ds)
        a, b = (self.successResultOf(d) for d in ds)
        leader, follower = (a, b) if a.leader_id == a.member_id else (b, a)
        self.successResultOf(h.sync(leader.member_id, 1, {a.member_id: b"A", b.member_id: b"B"}))
        self.assertEqual(h.group().state, GroupState.STABLE)
        for _ in range(int(REBALANCE_MS / 1000)):
            self.assertEqual(h.group().state, GroupState.STABLE)
            h.clock.advance(1)
            h.heartbeat(leader.member_id, 1)
            h.heartbeat(follower.member_id, 1)  # alive, but never sends SyncGroup
        self.assertNotIn(follower.member_id, h.group().members)
        self.assertEqual(h.group().state, GroupState.PREPARING_REBALANCE)


class StaticMembershipTests(unittest.TestCase):
    def test_static_member_rejoining_keeps_its_assignment_without_rebalance(self) -> None:
        h = Harness(self)
        (a, generation), (b, _) = h.stable_group(2, instances=["ia", "ib"])
        result = self.successResultOf(h.join(instance="ib"))  # restarted: no member id
        self.assertEqual(result.error, ErrorCode.none)
        self.assertNotEqual(result.member_id, b)
        self.assertEqual(result.generation_id, generation)
        self.assertEqual(result.leader_id, a)
        self.assertEqual(h.group().state, GroupState.STABLE)
        sync = self.successResultOf(h.sync(result.member_id, generation, instance="ib"))
        self.assertEqual(sync.assignment, b.encode())
        # The old incarnation is fenced.
        self.assertEqual(h.heartbeat(b, generation, instance="ib"), ErrorCode.fenced_instance_id)
        self.assertEqual(self.successResultOf(h.join(member_id=b, instance="ib")).error,
                         ErrorCode.fenced_instance_id)
        codes = self.successResultOf(h.coordinator.commit_offsets("g", generation, b, "ib",
                                                                  {("t", 0): CommittedOffset(1)}))
        self.assertEqual(codes, {("t", 0): ErrorCode.fenced_instance_id})

    def test_static_leader_rejoining_is_not_told_it_leads(self) -> None:
        h = Harness(self)
        (a, generation), _ = h.stable_group(2, instances=["ia", "ib"])
        result = self.successResultOf(h.join(instance="ia"))
        self.assertEqual(result.leader_id, a)  # the old id: the new incarnation does not assign
        self.assertEqual(result.members, ())
        self.assertEqual(h.group().leader_id, result.member_id)

    def test_static_member_is_not_removed_for_missing_a_rebalance(self) -> None:
        h = Harness(self)
        (a, generation), (b, _) = h.stable_group(2, instances=["ia", "ib"])
        d = h.join(member_id=a, instance="ia")  # the leader forces a rebalance
        for _ in range(int(REBALANCE_MS / 1000)):
            h.clock.advance(1)
            h.heartbeat(b, generation, instance="ib")  # alive, but does not rejoin
        result = self.successResultOf(d)
        self.assertEqual(result.generation_id, generation + 1)
        self.assertIn(b, h.group().members)

    def test_static_member_removed_by_instance_id(self) -> None:
        h = Harness(self)
        (a, _), (b, _) = h.stable_group(2, instances=["ia", "ib"])
        top, codes = self.successResultOf(h.coordinator.leave_group("g", [("", "ib"), ("", "nope")]))
        self.assertEqual(codes, [ErrorCode.none, ErrorCode.unknown_member_id])
        self.assertNotIn(b, h.group().members)


class CoordinatorPlacementTests(unittest.TestCase):
    def test_placement_is_deterministic_and_moves_only_the_dead_brokers_groups(self) -> None:
        groups = [f"group-{i}" for i in range(200)]
        before = {g: coordinator_for(g, [0, 1, 2]) for g in groups}
        self.assertEqual(before, {g: coordinator_for(g, [2, 1, 0]) for g in groups})
        self.assertEqual(set(before.values()), {0, 1, 2})
        after = {g: coordinator_for(g, [0, 2]) for g in groups}
        for g in groups:
            if before[g] != 1:
                self.assertEqual(after[g], before[g])
        self.assertIsNone(coordinator_for("g", []))

    def test_group_moving_away_answers_waiters_not_coordinator(self) -> None:
        h = Harness(self)
        h.live = [0, 1]
        group = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [0, 1]) == 0)
        [(a, generation)] = h.stable_group(1, group=group)
        waiting = h.join(group)  # a new member waits in PreparingRebalance
        h.live = [1]  # broker 0 is no longer the coordinator (say, it lost its registration)
        h.coordinator.brokers_changed()
        self.assertEqual(self.successResultOf(waiting).error, ErrorCode.not_coordinator)
        self.assertNotIn(group, h.coordinator.groups)
        self.assertEqual(h.heartbeat(a, generation, group=group), ErrorCode.not_coordinator)
        codes = self.successResultOf(h.coordinator.commit_offsets(group, -1, "", None, {("t", 0): CommittedOffset(5)}))
        self.assertEqual(codes, {("t", 0): ErrorCode.not_coordinator})
        h.clock.advance(SESSION_MS)  # no timers left behind
        self.assertEqual(h.clock.getDelayedCalls(), [])


class OffsetTests(unittest.TestCase):
    def read_znode(self, h: Harness, path: str) -> dict:
        data, _ = self.successResultOf(h.zookeeper.get(path))
        return json.loads(data)

    def test_commit_is_answered_when_its_batch_is_written(self) -> None:
        h = Harness(self)
        d1 = h.coordinator.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(5, 3, "m1")})
        d2 = h.coordinator.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(7, 3, "m2"),
                                                              ("t", 1): CommittedOffset(1)})
        self.assertNoResult(d1)
        self.assertEqual(h.offsets.writes, 0)
        h.clock.advance(0.01)
        self.assertEqual(self.successResultOf(d1), {("t", 0): ErrorCode.none})
        self.assertEqual(self.successResultOf(d2), {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none})
        self.assertEqual((h.offsets.writes, h.offsets.batches), (2, 1))  # t-0 coalesced
        body = self.read_znode(h, "/consumers/g/offsets/t/0")
        self.assertEqual({k: body[k] for k in ("version", "offset", "leader_epoch", "metadata")},
                         {"version": 1, "offset": 7, "leader_epoch": 3, "metadata": "m2"})
        error, found = self.successResultOf(h.coordinator.fetch_offsets("g", None))
        self.assertEqual(error, ErrorCode.none)
        self.assertEqual({tp: c.offset for tp, c in found.items()}, {("t", 0): 7, ("t", 1): 1})
        # A repeated commit is written again: the node may have been reset meanwhile.
        self.successResultOf(h.zookeeper.set("/consumers/g/offsets/t/0", b"0"))  # consumer-groups --reset-offsets
        d3 = h.coordinator.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(7, 3, "m2")})
        self.assertNoResult(d3)
        h.clock.advance(0.01)
        self.assertEqual(self.successResultOf(d3), {("t", 0): ErrorCode.none})
        self.assertEqual(h.offsets.writes, 3)
        self.assertEqual(self.read_znode(h, "/consumers/g/offsets/t/0")["offset"], 7)

    def test_paper_style_decimal_values_are_read(self) -> None:
        h = Harness(self)
        self.successResultOf(h.zookeeper.create("/consumers/old/offsets/t/0", b"42", makepath=True))
        _, found = self.successResultOf(h.coordinator.fetch_offsets("old", [("t", 0), ("t", 1)]))
        self.assertEqual(found, {("t", 0): CommittedOffset(42)})
        self.assertIsNone(decode_committed_offset(b""))

    def test_group_ids_are_one_path_component(self) -> None:
        h = Harness(self)
        d = h.coordinator.commit_offsets("a/b", -1, "", None, {("t", 0): CommittedOffset(1)})
        h.clock.advance(0.01)
        self.successResultOf(d)
        self.assertEqual(self.successResultOf(h.zookeeper.get_children("/consumers")), ["a%2Fb"])
        self.assertEqual(self.successResultOf(h.registry.list_consumer_groups()), ["a/b"])

    def test_member_commits(self) -> None:
        h = Harness(self)
        [(a, generation)] = h.stable_group(1)
        offsets = {("t", 0): CommittedOffset(3)}
        self.assertEqual(self.successResultOf(h.coordinator.commit_offsets("g", generation + 1, a, None, offsets)),
                         {("t", 0): ErrorCode.illegal_generation})
        self.assertEqual(self.successResultOf(h.coordinator.commit_offsets("g", generation, "x", None, offsets)),
                         {("t", 0): ErrorCode.unknown_member_id})
        self.assertEqual(self.successResultOf(h.coordinator.commit_offsets("g", -1, "", None, offsets)),
                         {("t", 0): ErrorCode.unknown_member_id})  # not while the group has members
        self.assertEqual(self.successResultOf(h.coordinator.commit_offsets("unknown", 3, "x", None, offsets)),
                         {("t", 0): ErrorCode.illegal_generation})
        d = h.coordinator.commit_offsets("g", generation, a, None, {**offsets, ("t", 1): CommittedOffset(1, -1, "x" * 5000)})
        h.clock.advance(0.01)
        self.assertEqual(self.successResultOf(d), {("t", 0): ErrorCode.none,
                                                   ("t", 1): ErrorCode.offset_metadata_too_large})

    def test_commit_during_completing_rebalance(self) -> None:
        h = Harness(self)
        d = h.join()
        h.clock.advance(DELAY_MS / 1000)
        r = self.successResultOf(d)
        codes = self.successResultOf(h.coordinator.commit_offsets("g", r.generation_id, r.member_id, None,
                                                                  {("t", 0): CommittedOffset(1)}))
        self.assertEqual(codes, {("t", 0): ErrorCode.rebalance_in_progress})

    def test_zookeeper_failure_is_coordinator_not_available(self) -> None:
        h = Harness(self)
        d = h.coordinator.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(1)})
        h.zookeeper.disconnect()
        h.clock.advance(0.01)
        self.assertEqual(self.successResultOf(d), {("t", 0): ErrorCode.coordinator_not_available})
        self.assertEqual(self.successResultOf(h.coordinator.fetch_offsets("g", None))[0],
                         ErrorCode.coordinator_not_available)
        # named partitions are read at once (one read each): the first failure is the answer
        self.assertEqual(self.successResultOf(h.coordinator.fetch_offsets("g", [("t", 0), ("t", 1)]))[0],
                         ErrorCode.coordinator_not_available)

    def test_delete_group(self) -> None:
        h = Harness(self)
        [(a, _)] = h.stable_group(1)
        self.assertEqual(self.successResultOf(h.coordinator.delete_group("g")), ErrorCode.non_empty_group)
        d = h.coordinator.commit_offsets("idle", -1, "", None, {("t", 0): CommittedOffset(1)})
        h.clock.advance(0.01)
        self.successResultOf(d)
        self.assertEqual(self.successResultOf(h.coordinator.delete_group("idle")), ErrorCode.none)
        self.assertIsNone(self.successResultOf(h.zookeeper.exists("/consumers/idle")))
        self.assertEqual(self.successResultOf(h.coordinator.delete_group("idle")), ErrorCode.group_id_not_found)


class GroupApiTests(unittest.TestCase):
    """The group APIs through KafkaApis (encode, handle, decode), one version of each."""

    def test_round_trip(self) -> None:
        h = BrokerHarness(self, **{"group.initial.rebalance.delay.ms": 0})
        h.create_topic("t", 2)
        g = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [0, 1]) == 0)
        join = {"group_id": g, "session_timeout": 10000, "rebalance_timeout": 30000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"meta"}], "reason": None}
        first = h.call(11, 5, join)
        self.assertEqual(first.error_code, ErrorCode.member_id_required)
        member = first.member_id
        pending = h.request(11, 8, {**join, "member_id": member})
        h.clock.advance(0)
        response = h.decode(11, 8, self.successResultOf(pending))
        self.assertEqual((response.error_code, response.generation_id, response.leader, response.protocol_name,
                          response.protocol_type), (ErrorCode.none, 1, member, "range", "consumer"))
        self.assertEqual([(m.member_id, m.metadata) for m in response.members], [(member, b"meta")])
        sync = h.call(14, 5, {"group_id": g, "generation_id": 1, "member_id": member, "group_instance_id": None,
                              "protocol_type": "consumer", "protocol_name": "range",
                              "assignments": [{"member_id": member, "assignment": b"assigned"}]})
        self.assertEqual((sync.error_code, sync.assignment), (ErrorCode.none, b"assigned"))
        for version in (0, 4):
            beat = h.call(12, version, {"group_id": g, "generation_id": 1, "member_id": member,
                                        "group_instance_id": None})
            self.assertEqual(beat.error_code, ErrorCode.none)
        commit = h.request(8, 8, {"group_id": g, "generation_id_or_member_epoch": 1, "member_id": member,
                                  "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                                      {"partition_index": 0, "committed_offset": 12, "committed_leader_epoch": 0,
                                       "committed_metadata": "hi"},
                                      {"partition_index": 9, "committed_offset": 1, "committed_leader_epoch": 0,
                                       "committed_metadata": ""}]}]})
        self.assertNoResult(commit)
        h.clock.advance(0.01)
        commit = h.decode(8, 8, self.successResultOf(commit))
        self.assertEqual([(p.partition_index, p.error_code) for p in commit.topics[0].partitions],
                         [(0, ErrorCode.none), (9, ErrorCode.unknown_topic_or_partition)])
        for version, topics in [(1, [{"name": "t", "partition_indexes": [0, 1]}]), (7, None)]:
            fetched = h.call(9, version, {"group_id": g, "topics": topics, "require_stable": False})
            partitions = {p.partition_index: (p.committed_offset, p.metadata) for p in fetched.topics[0].partitions}
            expected = {0: (12, "hi"), 1: (-1, "")} if topics else {0: (12, "hi")}
            self.assertEqual(partitions, expected)
        nope = next(x for x in (f"nope{i}" for i in range(100)) if coordinator_for(x, [0, 1]) == 0)
        described = h.call(15, 5, {"groups": [g, nope], "include_authorized_operations": False}).groups
        self.assertEqual([(g.group_state, g.protocol_type, g.protocol_data) for g in described],
                         [("Stable", "consumer", "range"), ("Dead", "", "")])
        self.assertEqual(described[0].members[0].member_assignment, b"assigned")
        listed = h.call(16, 4, {"states_filter": ["stable"]}).groups
        self.assertEqual([(g.group_id, g.group_state) for g in listed], [(g, "Stable")])
        self.assertEqual(h.call(42, 2, {"groups_names": [g]}).results[0].error_code, ErrorCode.non_empty_group)
        left = h.call(13, 3, {"group_id": g, "members": [{"member_id": member, "group_instance_id": None}]})
        self.assertEqual((left.error_code, left.members[0].error_code), (ErrorCode.none, ErrorCode.none))
        self.assertEqual(h.call(13, 0, {"group_id": g, "member_id": member}).error_code,
                         ErrorCode.unknown_member_id)
        h.clock.advance(30)
        deleted = h.call(42, 2, {"groups_names": [g]})
        self.assertEqual(deleted.results[0].error_code, ErrorCode.none)

    def test_join_pipelined_after_leave_on_one_connection(self) -> None:
        """
        The reported bug, as raw requests: LeaveGroup v3 of the only member and
        a JoinGroup served right after it (no reactor turn in between) answer
        0 and MEMBER_ID_REQUIRED (v5) or 0 after the initial delay (v3), never
        INCONSISTENT_GROUP_PROTOCOL.
        """
        h = BrokerHarness(self, **{"group.initial.rebalance.delay.ms": 0})
        g = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [0, 1]) == 0)
        join = {"group_id": g, "session_timeout": 10000, "rebalance_timeout": 30000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"meta"}], "reason": None}
        member = h.call(11, 5, join).member_id
        pending = h.request(11, 5, {**join, "member_id": member})
        h.clock.advance(0)
        self.assertEqual(h.decode(11, 5, self.successResultOf(pending)).error_code, ErrorCode.none)
        for version in (5, 3):
            left = h.request(13, 3, {"group_id": g, "members": [{"member_id": member, "group_instance_id": None}]})
            rejoin = h.request(11, version, join)
            left = h.decode(13, 3, self.successResultOf(left))
            self.assertEqual((left.error_code, left.members[0].error_code), (ErrorCode.none, ErrorCode.none))
            if version >= 4:
                response = h.decode(11, version, self.successResultOf(rejoin))
                self.assertEqual(response.error_code, ErrorCode.member_id_required)
                rejoin = h.request(11, version, {**join, "member_id": response.member_id})
            h.clock.advance(0)
            response = h.decode(11, version, self.successResultOf(rejoin))
            self.assertEqual(response.error_code, ErrorCode.none)
            member = response.member_id

    def test_group_owned_elsewhere_is_not_coordinator(self) -> None:
        h = BrokerHarness(self)
        group = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [0, 1]) == 1)
        beat = h.call(12, 4, {"group_id": group, "generation_id": 1, "member_id": "m", "group_instance_id": None})
        self.assertEqual(beat.error_code, ErrorCode.not_coordinator)
        fetched = h.call(9, 7, {"group_id": group, "topics": None, "require_stable": False})
        self.assertEqual(fetched.error_code, ErrorCode.not_coordinator)
        join = h.call(11, 0, {"group_id": "", "session_timeout": 10000, "member_id": "", "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}]})
        self.assertEqual(join.error_code, ErrorCode.invalid_group_id)
