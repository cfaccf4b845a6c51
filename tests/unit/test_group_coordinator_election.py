"""
The fenced group coordinator (issue 27): which broker coordinates a group is
an election in ZooKeeper per C{__consumer_offsets} partition, and every write
of a coordinator checks the epoch of its claim, so that at most one broker
acts as a group's coordinator at a time and a deposed one writes nothing.

Brokers here are a L{GroupCoordinator} with its L{GroupCoordinatorElection}
and L{OffsetStore}, each with a session of one L{FakeZooKeeper}, on one
L{Clock}.  Zombies are sessions that expired unnoticed
(L{FakeZooKeeperClient.expire_session_unnoticed}); stale views are held
watches (L{FakeZooKeeperClient.hold_watches}).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from twisted.internet.defer import fail
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.group_coordinator import GroupCoordinator, OffsetStore, coordinator_for
from kafkatw.broker.group_coordinator_election import GroupCoordinatorElection
from kafkatw.broker.transaction_coordinator import offsets_partition_for
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.bridge import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetOp,
    ZooKeeperUnavailableError,
)
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import CommittedOffset, consumer_offset_path, group_coordinator_epoch_path

PROTOCOLS = [("range", b"meta")]
SESSION_MS = 10000
REBALANCE_MS = 1000


class Broker:
    """One broker's group coordinator, elected in the shared fake ZooKeeper."""

    def __init__(self, zookeeper: FakeZooKeeper, clock: Clock, broker_id: int, partitions: int = 50,
                 live: list[int] | None = None) -> None:
        self.broker_id = broker_id
        self.clock = clock
        self.client = FakeZooKeeperClient(zookeeper)
        self.client.start()
        self.registry = Registry(self.client)
        self.offsets = OffsetStore(self.registry, clock, batch_interval_ms=10, timeout_ms=5000,
                                   now_ms=lambda: int(clock.seconds() * 1000))
        #: this broker's view of /brokers/ids, which no longer decides anything
        self.live = live if live is not None else [0, 1]
        config = BrokerConfig({"broker.id": broker_id, "group.initial.rebalance.delay.ms": 0})
        self.coordinator = GroupCoordinator(broker_id, config, clock, lambda: list(self.live), self.offsets)
        self.election = GroupCoordinatorElection(broker_id, self.registry, partitions)
        self.coordinator.use_election(self.election)
        self.multis: list[list] = []
        multi = self.client.multi

        def counting(ops: list) -> Any:
            self.multis.append(list(ops))
            return multi(ops)

        self.client.multi = counting  # type: ignore[method-assign]

    def start(self) -> Any:
        return self.election.start()

    def commit(self, group: str, offset: int, partition: int = 0) -> Any:
        return self.coordinator.commit_offsets(group, -1, "", None, {("t", partition): CommittedOffset(offset)})

    def join(self, group: str, member_id: str = "") -> Any:
        return self.coordinator.join_group(group, member_id, None, False, "client", "/127.0.0.1", REBALANCE_MS,
                                           SESSION_MS, "consumer", PROTOCOLS)

    def sync(self, group: str, generation: int, member_id: str) -> Any:
        return self.coordinator.sync_group(group, generation, member_id, None, None, None,
                                           {member_id: member_id.encode()})


class Cluster:
    def __init__(self, testcase: unittest.TestCase, count: int = 2, partitions: int = 50) -> None:
        self.testcase = testcase
        self.zookeeper = FakeZooKeeper()
        self.clock = Clock()
        self.observer = FakeZooKeeperClient(self.zookeeper)
        self.observer.start()
        self.brokers = [Broker(self.zookeeper, self.clock, i, partitions) for i in range(count)]
        for b in self.brokers:
            testcase.successResultOf(b.start())

    def settle(self) -> None:
        for _ in range(5):
            self.clock.advance(0.01)

    def groups_preferring(self, broker_id: int, ids: list[int] | None = None, count: int = 2) -> list[str]:
        """Groups whose partition's preferred holder among C{ids} (default: the brokers) is C{broker_id}."""
        ids = ids if ids is not None else [b.broker_id for b in self.brokers]
        found = (g for g in (f"g{i}" for i in range(1000))
                 if coordinator_for(f"__consumer_offsets-{offsets_partition_for(g)[1]}", ids) == broker_id)
        return [next(found) for _ in range(count)]

    def group_preferring(self, broker_id: int) -> str:
        return self.groups_preferring(broker_id, count=1)[0]

    def committed(self, group: str, partition: int = 0) -> int | None:
        try:
            data, _ = self.testcase.successResultOf(self.observer.get(consumer_offset_path(group, "t", partition)))
        except Exception:
            return None
        return json.loads(data)["offset"]

    def epoch(self, group: str) -> int:
        _, stat = self.testcase.successResultOf(
            self.observer.get(group_coordinator_epoch_path(offsets_partition_for(group)[1])))
        return stat.version

    def stable_members(self, broker: Broker, group: str, count: int) -> list[tuple[str, int]]:
        """C{count} members joined and synced through C{broker}: C{[(member id, generation)]}."""
        ds = [broker.join(group) for _ in range(count)]
        self.settle()
        joined = [self.testcase.successResultOf(d) for d in ds]
        self.testcase.assertEqual({j.error for j in joined}, {ErrorCode.none})
        ds = [broker.sync(group, j.generation_id, j.member_id) for j in joined]
        self.settle()
        self.testcase.assertEqual({self.testcase.successResultOf(d).error for d in ds}, {ErrorCode.none})
        return [(j.member_id, j.generation_id) for j in joined]

    def stable_member(self, broker: Broker, group: str) -> tuple[str, int]:
        return self.stable_members(broker, group, 1)[0]


class FakeMultiTests(unittest.TestCase):
    """The fake's multi is ZooKeeper's: all or nothing, checked in order, the failing op named."""

    def setUp(self) -> None:
        self.zookeeper = FakeZooKeeper()
        self.client = FakeZooKeeperClient(self.zookeeper)
        self.successResultOf(self.client.start())
        self.successResultOf(self.client.create("/a", b"1"))
        self.events: list = []
        self.successResultOf(self.client.watch_data("/a", self.events.append))
        self.events.clear()

    def test_all_applied_in_order(self) -> None:
        results = self.successResultOf(self.client.multi([
            CheckOp("/a", 0), SetOp("/a", b"2", 0), CreateOp("/a2", b"x"), SetOp("/a2", b"y", 0),
            CreateOp("/e", b"", ephemeral=True), DeleteOp("/a2", 1)]))
        self.assertEqual([type(r).__name__ for r in results], ["bool", "ZnodeStat", "str", "ZnodeStat", "str", "bool"])
        self.assertEqual(results[2], "/a2")
        self.assertEqual(self.successResultOf(self.client.get("/a"))[1].version, 1)
        self.assertIsNone(self.successResultOf(self.client.exists("/a2")))
        self.assertEqual(self.successResultOf(self.client.exists("/e")).ephemeralOwner, self.client.session_id)
        self.assertEqual(self.events, [b"2"])

    def test_a_failing_op_changes_nothing(self) -> None:
        cases = [
            ([SetOp("/a", b"2"), CheckOp("/a", 0)], BadVersionError, 1),  # sees the set before it
            ([CreateOp("/b"), CreateOp("/b")], NodeExistsError, 1),
            ([SetOp("/a", b"2"), CreateOp("/missing/child")], NoNodeError, 1),
            ([CreateOp("/b"), CreateOp("/b/c"), DeleteOp("/b")], NotEmptyError, 2),
            ([CheckOp("/nope", 0), SetOp("/a", b"2")], NoNodeError, 0),
            ([DeleteOp("/a", 3)], BadVersionError, 0),
        ]
        for ops, error, index in cases:
            failure = self.failureResultOf(self.client.multi(ops), error)
            self.assertEqual(failure.value.op_index, index, ops)
        self.assertEqual(self.successResultOf(self.client.get("/a")), (b"1", self.successResultOf(self.client.get("/a"))[1]))
        self.assertEqual(self.successResultOf(self.client.get("/a"))[1].version, 0)
        self.assertIsNone(self.successResultOf(self.client.exists("/b")))
        self.assertEqual(self.events, [])  # nothing changed, no watch fired

    def test_create_then_delete_within_one_multi(self) -> None:
        self.successResultOf(self.client.multi([CreateOp("/b"), CreateOp("/b/c"), DeleteOp("/b/c"), DeleteOp("/b")]))
        self.assertIsNone(self.successResultOf(self.client.exists("/b")))

    def test_not_connected(self) -> None:
        self.client.disconnect()
        self.failureResultOf(self.client.multi([CheckOp("/a", 0)]))


class ElectionTests(unittest.TestCase):
    def test_one_broker_claims_every_partition(self) -> None:
        c = Cluster(self, count=1)
        b = c.brokers[0]
        self.assertEqual(b.election.claims, {p: 1 for p in range(50)})
        self.assertEqual(b.coordinator.coordinator("any"), 0)
        self.assertTrue(b.coordinator.owns("any"))
        holder = json.loads(self.successResultOf(c.observer.get("/group_coordinator/holders/7"))[0])
        self.assertEqual((holder["version"], holder["brokerid"], holder["coordinator_epoch"]), (1, 0, 1))

    def test_partitions_spread_by_preference_and_every_broker_answers_the_same(self) -> None:
        c = Cluster(self, count=3)
        claims = {p: b.broker_id for b in c.brokers for p in b.election.claims}
        self.assertEqual(sorted(claims), list(range(50)))
        self.assertEqual(set(claims.values()), {0, 1, 2})
        for p, holder in claims.items():
            self.assertEqual(holder, coordinator_for(f"__consumer_offsets-{p}", [0, 1, 2]))
        for group in (f"group-{i}" for i in range(100)):
            answers = {b.coordinator.coordinator(group) for b in c.brokers}
            self.assertEqual(len(answers), 1, group)
            self.assertEqual([b.broker_id for b in c.brokers if b.coordinator.owns(group)], list(answers))

    def test_divergent_live_broker_views_do_not_make_two_coordinators(self) -> None:
        """The old placement hashed over each broker's own view: broker 1 seeing only itself took every group."""
        c = Cluster(self)
        b0, b1 = c.brokers
        group = c.group_preferring(0)
        b0.live, b1.live = [0, 1], [1]  # broker 1 believes broker 0 is gone (a watch that has not fired yet)
        b1.coordinator.brokers_changed()
        b0.coordinator.brokers_changed()
        self.assertEqual((b0.coordinator.coordinator(group), b1.coordinator.coordinator(group)), (0, 0))
        member, generation = c.stable_member(b0, group)
        join = b1.join(group)
        c.settle()
        self.assertEqual(self.successResultOf(join).error, ErrorCode.not_coordinator)
        sync = b1.sync(group, generation, member)
        self.assertEqual(self.successResultOf(sync).error, ErrorCode.not_coordinator)
        self.assertEqual(self.successResultOf(b1.coordinator.heartbeat(group, member, None, generation)),
                         ErrorCode.not_coordinator)
        commit = b1.coordinator.commit_offsets(group, generation, member, None, {("t", 0): CommittedOffset(5)})
        self.assertEqual(self.successResultOf(commit), {("t", 0): ErrorCode.not_coordinator})
        commit = b0.coordinator.commit_offsets(group, generation, member, None, {("t", 0): CommittedOffset(10)})
        c.settle()
        self.assertEqual(self.successResultOf(commit), {("t", 0): ErrorCode.none})
        self.assertEqual(c.committed(group), 10)

    def test_a_zombies_commit_after_the_claim_moved_fails(self) -> None:
        """
        Broker 0's session expires unnoticed (a long pause); broker 1 claims the
        partition and a commit through it lands; the zombie's commits -- one it
        accepted before, one after -- are answered NOT_COORDINATOR and never
        written: the offset does not go back.
        """
        c = Cluster(self)
        b0, b1 = c.brokers
        group = c.group_preferring(0)
        epoch = c.epoch(group)
        d = b0.commit(group, 5)
        c.settle()
        self.assertEqual(self.successResultOf(d), {("t", 0): ErrorCode.none})
        accepted = b0.commit(group, 6)  # accepted, waiting for its batch
        b0.client.expire_session_unnoticed()
        self.assertTrue(b0.coordinator.owns(group))  # it does not know yet
        self.assertEqual(b1.coordinator.coordinator(group), 1)  # broker 1 took over at once
        self.assertEqual(c.epoch(group), epoch + 1)
        d = b1.commit(group, 10)
        c.settle()
        self.assertEqual(self.successResultOf(d), {("t", 0): ErrorCode.none})
        self.assertEqual(self.successResultOf(accepted), {("t", 0): ErrorCode.not_coordinator})
        self.assertFalse(b0.coordinator.owns(group))  # the fenced write told it
        late = b0.commit(group, 7)
        c.settle()
        self.assertEqual(self.successResultOf(late), {("t", 0): ErrorCode.not_coordinator})
        self.assertEqual(c.committed(group), 10)
        b0.client.notice_session()  # a candidate again, and the preferred one: broker 1 hands it back
        c.settle()
        self.assertEqual((b0.coordinator.coordinator(group), b1.coordinator.coordinator(group)), (0, 0))
        self.assertEqual(c.epoch(group), epoch + 2)
        d = b0.commit(group, 11)
        c.settle()
        self.assertEqual(self.successResultOf(d), {("t", 0): ErrorCode.none})
        self.assertEqual(c.committed(group), 11)

    def test_a_zombies_rebalance_is_not_answered(self) -> None:
        """JoinGroup and SyncGroup answers wait for ZooKeeper to confirm the claim: a zombie's are refused."""
        c = Cluster(self)
        b0, b1 = c.brokers
        group = c.group_preferring(0)
        member, generation = c.stable_member(b0, group)
        b0.client.expire_session_unnoticed()
        rejoin = b0.join(group, member)  # the leader's JoinGroup starts a rebalance at the zombie
        c.settle()
        self.assertEqual(self.successResultOf(rejoin).error, ErrorCode.not_coordinator)
        self.assertNotIn(group, b0.coordinator.groups)  # unloaded once fenced
        joined = b1.join(group)
        c.settle()
        self.assertEqual(self.successResultOf(joined).error, ErrorCode.none)  # the member finds broker 1

    def test_handover_when_the_holder_dies(self) -> None:
        c = Cluster(self)
        b0, b1 = c.brokers
        group = c.group_preferring(0)
        member, generation = c.stable_member(b0, group)
        d = b0.coordinator.commit_offsets(group, generation, member, None, {("t", 0): CommittedOffset(42)})
        c.settle()
        self.successResultOf(d)
        epoch = c.epoch(group)
        b0.client.stop()  # the process dies: its session (and claims) end
        self.assertEqual(b1.coordinator.coordinator(group), 1)
        self.assertEqual(c.epoch(group), epoch + 1)
        _, found = self.successResultOf(b1.coordinator.fetch_offsets(group, None))
        self.assertEqual(found[("t", 0)].offset, 42)
        heartbeat = b1.coordinator.heartbeat(group, member, None, generation)
        self.assertEqual(self.successResultOf(heartbeat), ErrorCode.unknown_member_id)  # rejoin at broker 1
        c.stable_member(b1, group)

    def test_handover_at_controlled_shutdown(self) -> None:
        """
        The holder withdraws its candidacy, answers its waiting members
        NOT_COORDINATOR, writes the commits it accepted, and releases:
        broker 1 coordinates at once, without waiting for a session to expire.
        """
        c = Cluster(self)
        b0, b1 = c.brokers
        group, solo = c.groups_preferring(0)
        (a, generation), _ = c.stable_members(b0, group, 2)
        waiting = b0.join(group, a)  # waits for the other member to rejoin
        accepted = b0.commit(solo, 3)  # waits for its batch
        done = b0.coordinator.shutdown()
        c.settle()
        self.successResultOf(done)
        self.assertEqual(self.successResultOf(waiting).error, ErrorCode.not_coordinator)
        self.assertEqual(self.successResultOf(accepted), {("t", 0): ErrorCode.none})  # written before releasing
        self.assertEqual(c.committed(solo), 3)
        self.assertEqual(b0.election.claims, {})
        self.assertEqual(len(b1.election.claims), 50)
        self.assertEqual((b0.coordinator.coordinator(group), b1.coordinator.coordinator(group)), (1, 1))
        self.assertIsNone(self.successResultOf(c.observer.exists("/group_coordinator/candidates/0")))
        d = b1.commit(solo, 4)
        c.settle()
        self.assertEqual(self.successResultOf(d), {("t", 0): ErrorCode.none})
        self.assertEqual(c.committed(solo), 4)
        c.stable_member(b1, group)

    def test_shutdown_without_zookeeper_does_not_wait(self) -> None:
        """
        ZooKeeper is gone when broker 0 shuts down (the connection cut and
        noticed: C{SUSPENDED}; requests wait in the client, as kazoo's do,
        and the coordinator accepts nothing meanwhile): the shutdown ends at
        once instead of after its 10 s, which a user stopping ZooKeeper and
        the broker together waited through.  The releases fail when the
        broker closes its session; broker 1 coordinates the groups once the
        session has expired, as after a crash.
        """
        c = Cluster(self)
        c.zookeeper.clock = c.clock
        b0, b1 = c.brokers
        group = c.group_preferring(0)
        c.stable_member(b0, group)
        b0.client.partition()
        c.clock.advance(13)  # past the read timeout, two thirds of the session's 18 s: noticed
        self.assertFalse(b0.client.connected)
        done = b0.coordinator.shutdown()
        c.settle()
        self.successResultOf(done)
        self.assertEqual(b0.election.claims, {})
        releases = b0.election.settled()
        self.assertNoResult(releases)  # waiting in the client
        self.successResultOf(b0.client.stop())  # what the broker's shutdown does next: what waited fails
        self.successResultOf(releases)
        self.assertEqual(b1.coordinator.coordinator(group), 0)  # the claims live until the session expires
        c.clock.advance(10)  # the server expires the session (18 s after the cut)
        c.settle()
        self.assertEqual(b1.coordinator.coordinator(group), 1)
        self.assertEqual(len(b1.election.claims), 50)

    def test_a_new_candidate_gets_its_partitions_back(self) -> None:
        c = Cluster(self, count=1)
        b0 = c.brokers[0]
        b1 = Broker(c.zookeeper, c.clock, 1)
        group = c.groups_preferring(1, ids=[0, 1], count=1)[0]
        (a, _), _ = c.stable_members(b0, group, 2)
        waiting = b0.join(group, a)  # waiting in a rebalance when the partition moves
        self.successResultOf(b1.start())
        c.settle()
        self.assertEqual(self.successResultOf(waiting).error, ErrorCode.not_coordinator)
        self.assertEqual((b0.coordinator.coordinator(group), b1.coordinator.coordinator(group)), (1, 1))
        self.assertEqual(sorted([*b0.election.claims, *b1.election.claims]), list(range(50)))
        self.assertEqual(set(b1.election.claims.values()), {2})  # claimed after broker 0 released epoch 1
        self.assertNotIn(group, b0.coordinator.groups)
        c.stable_member(b1, group)

    def test_suspended_coordinator_stops_answering_and_resumes(self) -> None:
        c = Cluster(self)
        b0, _ = c.brokers
        group = c.group_preferring(0)
        member, generation = c.stable_member(b0, group)
        b0.client.disconnect()
        self.assertEqual(self.successResultOf(b0.coordinator.heartbeat(group, member, None, generation)),
                         ErrorCode.not_coordinator)
        self.assertEqual(b0.coordinator.coordinator(group), 0)  # still the holder: its session lives
        b0.client.reconnect()
        self.assertEqual(self.successResultOf(b0.coordinator.heartbeat(group, member, None, generation)),
                         ErrorCode.none)

    def test_session_lost_unloads_the_groups(self) -> None:
        c = Cluster(self)
        b0, b1 = c.brokers
        group = c.group_preferring(0)
        c.stable_member(b0, group)
        b0.client.expire_session()  # noticed: LOST, then a new session that claims again
        self.assertNotIn(group, b0.coordinator.groups)
        self.assertEqual(b0.coordinator.coordinator(group), 0)

    def test_a_candidacy_whose_write_lost_the_connection_is_made_again_once_connected(self) -> None:
        """
        In a new session, the candidacy's write (C{_new_session}, or the
        candidates watch that re-reads first) fails with C{ConnectionLoss}:
        the connection dropped, the session lives on.  Once connected again
        the candidates watch re-reads, finds this broker missing and writes
        the candidacy again (no retry of its own is needed: Kafka's
        C{registerBroker} retries so, and C{Registry._reregister} too, seed
        428 of the simulation); its partitions come back to it.
        """
        c = Cluster(self)
        b0, b1 = c.brokers
        group = c.group_preferring(0)
        create = b0.client.create
        lost: list[str] = []

        def dropping(path: str, *args: Any, **kw: Any) -> Any:
            if path == "/group_coordinator/candidates/0" and not lost:
                lost.append(path)
                b0.client.disconnect()  # SUSPENDED; the session lives on
                return fail(ZooKeeperUnavailableError("ConnectionLoss (test)"))
            return create(path, *args, **kw)

        b0.client.create = dropping  # type: ignore[method-assign]
        b0.client.expire_session()  # LOST, a new session: the candidacy is written again, and lost
        self.assertEqual(lost, ["/group_coordinator/candidates/0"])
        c.settle()
        self.assertEqual(b1.election.candidates, frozenset({1}))
        self.assertEqual(b1.coordinator.coordinator(group), 1)  # taken over meanwhile
        b0.client.reconnect()  # the same session: watches re-read
        c.settle()
        self.assertEqual(b0.election.candidates, frozenset({0, 1}))
        self.assertEqual(self.successResultOf(c.observer.exists("/group_coordinator/candidates/0")).ephemeralOwner,
                         b0.client.session_id)
        self.assertEqual(b0.coordinator.coordinator(group), 0)
        self.assertEqual(b1.coordinator.coordinator(group), 0)

    def test_one_multi_per_batch(self) -> None:
        """A commit of 100 partitions is one multi (after the znodes exist), however many groups share the batch."""
        c = Cluster(self, count=1)
        b = c.brokers[0]
        first = {("t", p): CommittedOffset(1) for p in range(100)}
        d = b.coordinator.commit_offsets("g", -1, "", None, first)
        c.settle()
        self.successResultOf(d)
        b.multis.clear()
        ds = [b.coordinator.commit_offsets(g, -1, "", None, {("t", p): CommittedOffset(2) for p in range(100)})
              for g in ("g",)]
        c.settle()
        for d in ds:
            self.assertEqual(set(self.successResultOf(d).values()), {ErrorCode.none})
        self.assertEqual(len(b.multis), 1)
        self.assertEqual(len(b.multis[0]), 101)  # the fence check and 100 sets
        self.assertIsInstance(b.multis[0][0], CheckOp)

    def test_a_huge_batch_is_split(self) -> None:
        c = Cluster(self, count=1)
        b = c.brokers[0]
        b.multis.clear()
        d = b.coordinator.commit_offsets("g", -1, "", None,
                                         {("t", p): CommittedOffset(1, -1, "m" * 4000) for p in range(300)})
        c.settle()
        self.assertEqual(set(self.successResultOf(d).values()), {ErrorCode.none})
        big = [ops for ops in b.multis if len(ops) > 1]
        self.assertGreater(len(big), 1)
        self.assertTrue(all(isinstance(ops[0], CheckOp) for ops in big))


# --- interleavings -----------------------------------------------------------------------

GROUP = "solo"  # standalone commits (generation -1)
MEMBERS = "m"  # a group with members


class CoordinatorInterleavings(RuleBasedStateMachine):
    """
    Two brokers, one partition of claims (every group in it), and any
    interleaving of commits and joins by either broker, stale views, session
    expiries (noticed or not), disconnections and controlled shutdowns.

    Invariants: every successful JoinGroup, SyncGroup or OffsetCommit answer
    was confirmed by ZooKeeper while the answering broker's claim made the
    current coordinator epoch (one acting coordinator at a time); the
    committed offset only moves forward (commits are issued with growing
    offsets, so a stale write would move it back) and never below an
    acknowledged commit.
    """

    def __init__(self) -> None:
        super().__init__()
        self.zookeeper = FakeZooKeeper()
        self.clocks = {0: Clock(), 1: Clock()}  # one per broker: a paused broker's time stands still
        self.observer = FakeZooKeeperClient(self.zookeeper)
        self.observer.start()
        self.claimed_by: dict[int, int] = {}  # coordinator epoch -> the broker whose claim made it
        self.brokers: dict[int, Broker] = {}
        self.stopped: set[int] = set()
        self.violations: list[str] = []
        self.next_offset = 1
        self.acked = 0
        self.stored = 0
        self.members: list[tuple[int, str, int]] = []  # (broker, member id, generation) of successful joins
        for broker_id in (0, 1):
            self._start(broker_id)

    def _start(self, broker_id: int) -> None:
        broker = Broker(self.zookeeper, self.clocks[broker_id], broker_id, partitions=1)
        claim = broker.registry.claim_group_coordinator

        def recording(partition: int, claimant: int) -> Any:
            d = claim(partition, claimant)
            d.addCallback(lambda epoch: self.claimed_by.__setitem__(epoch, claimant) or epoch)
            return d

        broker.registry.claim_group_coordinator = recording  # type: ignore[method-assign]
        self.brokers[broker_id] = broker
        self.stopped.discard(broker_id)
        broker.start()

    def zk_epoch(self) -> int:
        node = self.zookeeper._lookup("/kafkatw" + group_coordinator_epoch_path(0))
        return -1 if node is None else node.stat.version

    def success(self, broker_id: int, what: str) -> None:
        epoch = self.zk_epoch()
        if self.claimed_by.get(epoch) != broker_id:
            self.violations.append(f"{what} answered by broker {broker_id} at coordinator epoch {epoch}, "
                                   f"claimed by {self.claimed_by.get(epoch)}")

    def running(self) -> list[int]:
        return [b for b in self.brokers if b not in self.stopped]

    # rules

    @rule(broker=st.sampled_from([0, 1]))
    @precondition(lambda self: self.running())
    def commit(self, broker: int) -> None:
        if broker in self.stopped:
            return
        offset, self.next_offset = self.next_offset, self.next_offset + 1

        def answered(codes: dict) -> None:
            if codes[("t", 0)] == ErrorCode.none:
                self.success(broker, f"commit of {offset}")
                self.acked = max(self.acked, offset)

        self.brokers[broker].commit(GROUP, offset).addCallback(answered)

    @rule(broker=st.sampled_from([0, 1]), rejoin=st.booleans())
    def join(self, broker: int, rejoin: bool) -> None:
        if broker in self.stopped:
            return
        known = [m for b, m, _ in self.members if b == broker]
        member = known[-1] if rejoin and known else ""

        def answered(result: Any) -> None:
            if result.error == ErrorCode.none:
                self.success(broker, f"JoinGroup of {result.member_id}")
                self.members.append((broker, result.member_id, result.generation_id))

        self.brokers[broker].join(MEMBERS, member).addCallback(answered)

    @rule(data=st.data())
    @precondition(lambda self: self.members)
    def sync(self, data: Any) -> None:
        broker, member, generation = data.draw(st.sampled_from(self.members))
        if broker in self.stopped:
            return

        def answered(result: Any) -> None:
            if result.error == ErrorCode.none:
                self.success(broker, f"SyncGroup of {member}")

        self.brokers[broker].sync(MEMBERS, generation, member).addCallback(answered)

    @rule(broker=st.sampled_from([0, 1, None]), seconds=st.sampled_from([0, 0.01, 0.01, 1.0, 11.0]))
    def advance(self, broker: int | None, seconds: float) -> None:
        """Time passes for one broker (the other is paused, or slow), or for both."""
        for b, clock in self.clocks.items():
            if broker in (None, b):
                clock.advance(seconds)

    def advance_all(self, seconds: float) -> None:
        self.advance(None, seconds)

    @rule(broker=st.sampled_from([0, 1]), fault=st.sampled_from([
        "hold_watches", "release_watches", "expire_unnoticed", "notice", "expire", "disconnect", "reconnect",
        "shutdown", "crash", "restart"]))
    def fault(self, broker: int, fault: str) -> None:
        """A fault of one broker, or its end: stale views, session expiries, outages, stops."""
        getattr(self, fault)(broker)

    def hold_watches(self, broker: int) -> None:
        self.brokers[broker].client.hold_watches()

    def release_watches(self, broker: int) -> None:
        if not self.brokers[broker].client._unnoticed:
            self.brokers[broker].client.release_watches()

    def expire_unnoticed(self, broker: int) -> None:
        client = self.brokers[broker].client
        if broker not in self.stopped and client.connected and not client._unnoticed:
            client.expire_session_unnoticed()

    def notice(self, broker: int) -> None:
        self.brokers[broker].client.notice_session()

    def expire(self, broker: int) -> None:
        client = self.brokers[broker].client
        if broker not in self.stopped and client.connected and not client._unnoticed:
            client.expire_session()

    def disconnect(self, broker: int) -> None:
        client = self.brokers[broker].client
        if broker not in self.stopped and client.connected and not client._unnoticed:
            client.disconnect()

    def reconnect(self, broker: int) -> None:
        client = self.brokers[broker].client
        if broker not in self.stopped and not client.connected:
            client.reconnect()

    def shutdown(self, broker: int) -> None:
        b = self.brokers[broker]
        if broker in self.stopped or b.client._unnoticed or not b.client.connected:
            return
        b.coordinator.shutdown()
        self.clocks[broker].advance(0.01)
        b.client.stop()
        self.stopped.add(broker)

    def crash(self, broker: int) -> None:
        if broker in self.stopped:
            return
        b = self.brokers[broker]
        b.election.running = False  # the process is gone: it answers nothing more
        session = b.client.session_id
        b.client.stop()
        if session is not None:
            self.zookeeper.expire(session)  # its session times out (also when it was disconnected)
        self.stopped.add(broker)

    def restart(self, broker: int) -> None:
        if broker in self.stopped:
            self._start(broker)

    # invariants

    @invariant()
    def answers_came_from_the_current_claim(self) -> None:
        assert not self.violations, self.violations

    @invariant()
    def committed_offset_only_moves_forward(self) -> None:
        node = self.zookeeper._lookup("/kafkatw" + consumer_offset_path(GROUP, "t", 0))
        stored = json.loads(node.data)["offset"] if node is not None else 0
        assert stored >= self.stored, f"the committed offset went back from {self.stored} to {stored}"
        assert stored >= self.acked, f"acknowledged commit of {self.acked} lost: {stored}"
        self.stored = stored

    @invariant()
    def one_holder_at_a_time(self) -> None:
        acting = [b for b, broker in self.brokers.items() if b not in self.stopped
                  and broker.election.claims.get(0) == self.zk_epoch() and broker.election.running]
        assert len(acting) <= 1, acting

    def teardown(self) -> None:
        """Once every fault heals, the running brokers agree on one coordinator, and it serves."""
        for b in self.running():
            client = self.brokers[b].client
            client.notice_session()
            client.release_watches()
            if not client.connected:
                client.reconnect()
        self.advance_all(0.01)
        running = self.running()
        if not running:
            return
        answers = {self.brokers[b].coordinator.coordinator(GROUP) for b in running}
        assert len(answers) == 1 and answers <= set(running), answers
        (holder,) = answers
        offset = self.next_offset
        d = self.brokers[holder].commit(GROUP, offset)
        self.advance_all(0.01)
        assert d.result == {("t", 0): ErrorCode.none}, d.result
        self.committed_offset_only_moves_forward()
        assert self.stored == offset


class InterleavingTests(unittest.SynchronousTestCase):
    def test_interleavings_keep_one_acting_coordinator(self) -> None:
        """L{CoordinatorInterleavings}: its invariants hold after every step of every interleaving tried."""
        run_state_machine_as_test(CoordinatorInterleavings, settings=settings(
            max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]))

    # as hypothesis marks its own state machine TestCase.runTest: pytest's hypothesis plugin then
    # reports the run (--hypothesis-show-statistics)
    test_interleavings_keep_one_acting_coordinator.is_hypothesis_test = True  # type: ignore[attr-defined]
