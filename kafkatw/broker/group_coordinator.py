"""
The group coordinator of Kafka's classic consumer-group protocol (KIP-62 era,
with static membership, KIP-345), after Kafka's C{GroupCoordinator.scala},
C{GroupMetadata.scala} and C{ClassicGroupState}.

The broker only runs the membership protocol: it collects members
(JoinGroup), picks a protocol all of them support and a leader, hands the
leader everyone's subscription, and relays the leader's assignment bytes to
each member (SyncGroup).  The assignors (range, roundrobin,
cooperative-sticky) run in the clients.

This module is pure logic over an injected clock (C{IReactorTime}): every wait
is a C{clock.callLater}, so unit tests drive it with
L{twisted.internet.task.Clock}.  Delayed answers (a JoinGroup held until the
rebalance completes, a follower's SyncGroup held until the leader's) are
Deferreds.  Committed offsets live in ZooKeeper (L{OffsetStore}).

Group states and their valid previous states — the one table of this machine
(L{VALID_PREVIOUS_STATES}), as Kafka's C{ClassicGroupState}::

    state                 valid previous states
    Empty                 PreparingRebalance
    PreparingRebalance    Stable, CompletingRebalance, Empty
    CompletingRebalance   PreparingRebalance
    Stable                CompletingRebalance
    Dead                  Stable, PreparingRebalance, CompletingRebalance, Empty, Dead

  - Empty: no members (a group may exist only for its committed offsets).
  - PreparingRebalance: waiting for members to (re)join, up to the largest
    rebalance timeout of the members (or, for a new group, in steps of
    C{group.initial.rebalance.delay.ms}: Kafka's C{InitialDelayedJoin}).
  - CompletingRebalance: the JoinGroup responses are out; waiting for the
    leader's SyncGroup with the assignment.
  - Stable: assignment handed out; members heartbeat.
  - Dead: the group was deleted or moved to another coordinator.

Which broker coordinates a group is a placement: in a broker, the ZooKeeper
election of L{kafkatw.broker.group_coordinator_election} -- the group's
C{__consumer_offsets} partition has one holder at a time, with a coordinator
epoch that every write checks (a L{Fence}), so a deposed coordinator writes
nothing and answers NOT_COORDINATOR; its preferred holder is L{coordinator_for}
(rendezvous hashing over the candidate brokers).  Without ZooKeeper (unit
tests of the state machine), L{StaticPlacement} computes it from a view of the
live brokers, unfenced.  docs/consumer-groups.md, "Which broker coordinates a
group".

A JoinGroup or SyncGroup is answered with success, and an OffsetCommit
acknowledged, only once ZooKeeper has confirmed, after the answer was decided,
that this broker still held the group's coordinator epoch: the commit's own
fenced multi, or a check batched with the commits (L{OffsetStore.confirm}).
Heartbeats and LeaveGroup are answered from memory, as Kafka does.

Source: Apache Kafka 3.x C{kafka.coordinator.group}; the protocol guide; KIP-345,
KIP-394 (MEMBER_ID_REQUIRED).
"""

from __future__ import annotations

import enum
import hashlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode
from ..zookeeper.bridge import ZooKeeperError, unless_disconnected
from ..zookeeper.registry import FencedError
from ..zookeeper.zk_data import CommittedOffset

__all__ = [
    "GroupState",
    "VALID_PREVIOUS_STATES",
    "Member",
    "Group",
    "JoinResult",
    "SyncResult",
    "GroupCoordinator",
    "OffsetStore",
    "Fence",
    "UNFENCED",
    "StaticPlacement",
    "check_coordinator",
    "unload_moved_groups",
    "coordinator_for",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
]

_log = Logger()

#: A new member that joined but never completed a rebalance is dropped after
#: this long (Kafka's C{GroupCoordinator.NewMemberJoinTimeoutMs}).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

UNKNOWN_MEMBER_ID = ""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState

#: state -> the states it may be entered from (Kafka's C{ClassicGroupState.validPreviousStates}).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
}


def _rejected_join(group_id: str, member_id: str, error: ErrorCode, reason: str) -> JoinResult:
    """Every JoinGroup answered with an error goes through here, and is logged with its reason."""
    _log.info("rejected JoinGroup of member {member!r} to group {group!r} with {error} ({code}): {reason}",
              member=member_id, group=group_id, error=error.name.upper(), code=int(error), reason=reason)
    return JoinResult(error, member_id)


def coordinator_for(group_id: str, broker_ids: Iterable[int]) -> int | None:
    """
    The broker coordinating C{group_id}: rendezvous (highest-random-weight)
    hashing over the live broker ids, so that every broker computes the same
    answer from ``/brokers/ids``, and a broker's death moves only its own
    groups (each to the broker with the next highest weight).

    @return: a broker id, or C{None} when no broker is alive.
    """
    best, best_weight = None, b""
    for broker_id in broker_ids:
        weight = hashlib.blake2b(f"{group_id}\0{broker_id}".encode("utf-8"), digest_size=8).digest()
        if best is None or weight > best_weight or (weight == best_weight and broker_id < best):
            best, best_weight = broker_id, weight
    return best


class Fence(NamedTuple):
    """
    What a coordinator's writes for a group check: the znode of the group's
    coordinator epoch and the version this broker's claim gave it
    (L{kafkatw.zookeeper.registry.Registry.set_committed_offsets}).

    @ivar path: C{/group_coordinator/epochs/<partition>}, or C{None} for an
        unfenced placement (L{StaticPlacement}).
    @ivar version: the coordinator epoch (that znode's version).
    """

    path: str | None
    version: int


#: The fence of L{StaticPlacement}: writes check nothing.
UNFENCED = Fence(None, 0)


class StaticPlacement:
    """
    The coordinator of a group computed from one view of the live brokers
    (L{coordinator_for}), with nothing fenced: two brokers whose views differ
    would both coordinate.  For a group coordinator standing alone (unit
    tests, tools); a broker uses L{kafkatw.broker.group_coordinator_election.GroupCoordinatorElection}.

    @param live_brokers: returns the ids of the live brokers.
    """

    def __init__(self, broker_id: int, live_brokers: Callable[[], Iterable[int]]) -> None:
        self.broker_id = broker_id
        self.live_brokers = live_brokers

    def coordinator(self, group_id: str) -> int | None:
        return coordinator_for(group_id, self.live_brokers())

    def fence(self, group_id: str) -> Fence | None:
        """The fence of this broker's coordination of C{group_id}, or C{None} when another broker coordinates it."""
        return UNFENCED if self.coordinator(group_id) == self.broker_id else None

    acting = fence


def check_coordinator(placement: Any, groups: Mapping[str, Any], group_id: str | None,
                      unload: Callable[[str], Any]) -> ErrorCode:
    """
    Whether this broker acts as C{group_id}'s coordinator under C{placement}
    (a L{StaticPlacement} or a
    L{kafkatw.broker.group_coordinator_election.GroupCoordinatorElection}),
    checked before each group request by the classic groups' coordinator and
    the KIP-848 consumer groups' (each with its own C{groups}, by id).  A
    group of C{groups} loaded under another fence (an older coordinator
    epoch) is unloaded with C{unload(group_id)}.

    @return: C{INVALID_GROUP_ID} (an empty id), C{NOT_COORDINATOR} or C{NONE}.
    """
    if not group_id:
        return ErrorCode.invalid_group_id
    fence = placement.acting(group_id)
    if fence is None:
        return ErrorCode.not_coordinator
    group = groups.get(group_id)
    if group is not None and group.fence != fence:
        unload(group_id)
    return ErrorCode.none


def unload_moved_groups(placement: Any, groups: Mapping[str, Any], unload: Callable[[str], Any]) -> None:
    """
    Unload with C{unload(group_id)} each group of C{groups} whose fence is no
    longer this broker's under C{placement} (the group moved away, or its
    coordinator epoch changed), as L{check_coordinator} does for one group.
    """
    for group_id in list(groups):
        if placement.fence(group_id) != groups[group_id].fence:
            unload(group_id)


@dataclass
class Member:
    """
    One member of a group (Kafka's C{MemberMetadata}).

    @ivar protocols: C{(name, metadata bytes)} in the member's order of preference.
    @ivar join_waiter: the Deferred of its JoinGroup held in PreparingRebalance.
    @ivar sync_waiter: the Deferred of its SyncGroup held in CompletingRebalance.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: defer.Deferred | None = None
    sync_waiter: defer.Deferred | None = None
    heartbeat_timer: Any = None
    is_new: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")


@dataclass
class Group:
    """
    One group's membership state (Kafka's C{GroupMetadata}).

    @ivar members: member id -> L{Member}, in join order (the first is the
        leader when a leader must be chosen).
    @ivar static_members: group instance id -> current member id.
    @ivar pending_members: member ids handed out with MEMBER_ID_REQUIRED that
        have not joined yet -> their expiry timer.
    """

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, Any] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    join_timer: Any = None
    sync_timer: Any = None
    initial_join: bool = False
    new_member_added: bool = False
    initial_remaining_ms: int = 0
    #: the coordinator epoch this broker held when it loaded the group (L{Fence})
    fence: Fence | None = None

    def transition_to(self, state: GroupState) -> None:
        """Move to C{state}; anything the table does not allow is a bug."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} -> {state.value} is not a valid transition")
        _log.debug("group {group} {old} -> {new}", group=self.group_id, old=self.state.value, new=state.value)
        self.state = state

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = {name for name, _ in members[0].protocols}
        for m in members[1:]:
            common &= {name for name, _ in m.protocols}
        return common

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """
        Kafka's C{supportsProtocols}: an Empty group takes any protocol type
        and non-empty protocol list; otherwise the type must be the group's and
        one of the protocols supported by every current member (vacuously true
        when there are none: Kafka counts each protocol's supporters and
        compares with the member count).
        """
        names = {name for name, _ in protocols}
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type or not names:
            return False
        return not self.members or bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """The protocol supported by all members with the most first-choice votes (Kafka's C{selectProtocol})."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes.items(), key=lambda item: (item[1], item[0]))[0]

    def static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_waiter is not None for m in self.members.values())

    def current_member_metadata(self) -> list[dict]:
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(self.protocol_name)} for m in self.members.values()]


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple = ()


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class OffsetStore:
    """
    Committed offsets in ZooKeeper, written in batches.

    A commit is added to the pending batch, replacing any pending value of the
    same group and partition (coalescing); the batch is written at most every
    C{batch_interval_ms} and each commit's Deferred fires once the write of its
    partition's latest value has succeeded — so an acknowledged commit is in
    ZooKeeper, as Kafka acknowledges a commit once it is in
    C{__consumer_offsets}.  Every commit is written, even one repeating the
    last value: the same node may have been changed since by a paper-style
    consumer or by C{consumer-groups --reset-offsets}, and an acknowledged
    commit must be what ZooKeeper holds.

    A batch is one ZooKeeper multi per L{Fence} (per coordinator epoch of a
    group's partition; L{kafkatw.zookeeper.registry.Registry.set_committed_offsets}):
    the multi checks the fence, so the commits a deposed coordinator accepted
    are answered C{NOT_COORDINATOR} and never written.  L{confirm} rides on the
    same multis.

    @param registry: a L{kafkatw.zookeeper.registry.Registry}.
    @param clock: an C{IReactorTime}.
    @ivar fenced: called with the L{Fence} of a write that found it moved
        (the group coordinator election drops that claim).
    """

    def __init__(self, registry: Any, clock: Any, batch_interval_ms: int = 10, timeout_ms: int = 5000,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.registry = registry
        self.clock = clock
        self.batch_interval_ms = batch_interval_ms
        self.timeout_ms = timeout_ms
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._pending: dict[Fence, dict[tuple[str, str, int], tuple[CommittedOffset, list[defer.Deferred]]]] = {}
        self._confirms: dict[Fence, list[defer.Deferred]] = {}
        self._timer: Any = None
        self.fenced: Callable[[Fence], object] | None = None
        self.writes = 0  # offsets written to ZooKeeper (for tests and metrics)
        self.batches = 0
        self.multis = 0  # ZooKeeper multis sent

    def commit(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset],
               fence: Fence = UNFENCED) -> defer.Deferred:
        """
        @param fence: the coordinator epoch the commits were accepted under.
        @return: a Deferred firing with C{{(topic, partition): ErrorCode}}.
        """
        waiting: list[defer.Deferred] = []
        keys: list[tuple[str, int]] = []
        pending = self._pending.setdefault(fence, {})
        for (topic, partition), committed in offsets.items():
            key = (group_id, topic, partition)
            d: defer.Deferred = defer.Deferred()
            previous = pending.get(key)
            pending[key] = (committed, (previous[1] if previous else []) + [d])
            waiting.append(d)
            keys.append((topic, partition))
        self._schedule()
        gathered = defer.gatherResults(waiting)
        gathered.addCallback(lambda codes: dict(zip(keys, codes)))
        return gathered

    def confirm(self, fence: Fence | None) -> defer.Deferred:
        """
        Have ZooKeeper confirm that C{fence} still holds, in the next batch
        (a check in that fence's multi).

        @return: a Deferred firing with C{ErrorCode.none}, C{NOT_COORDINATOR}
            (the fence moved) or C{COORDINATOR_NOT_AVAILABLE} (ZooKeeper failed
            or timed out).
        """
        if fence is None:
            return _succeed(ErrorCode.not_coordinator)
        if fence.path is None:
            return _succeed(ErrorCode.none)
        d: defer.Deferred = defer.Deferred()
        self._confirms.setdefault(fence, []).append(d)
        self._schedule()
        d.addCallback(lambda code: ErrorCode.coordinator_not_available
                      if code == ErrorCode.request_timed_out else code)
        return d

    def _schedule(self) -> None:
        if (self._pending or self._confirms) and self._timer is None:
            self._timer = self.clock.callLater(self.batch_interval_ms / 1000.0, self._flush)

    def _flush(self) -> defer.Deferred:
        self._timer = None
        batch, self._pending = self._pending, {}
        confirms, self._confirms = self._confirms, {}
        self.batches += 1
        written = []
        for fence in [*batch, *(f for f in confirms if f not in batch)]:
            entries = batch.get(fence, {})
            waiters = confirms.get(fence, [])
            if not entries and not waiters:
                continue
            self.multis += 1
            self.writes += len(entries)
            d = self.registry.set_committed_offsets({key: committed for key, (committed, _) in entries.items()},
                                                    fence.path, fence.version)
            d.addTimeout(self.timeout_ms / 1000.0, self.clock)
            d.addCallbacks(lambda _: ErrorCode.none, self._write_failed, errbackArgs=(fence, list(entries)))
            d.addCallback(self._answer, [w for _, ws in entries.values() for w in ws] + waiters)
            written.append(d)
        return defer.gatherResults(written)

    def _write_failed(self, failure: Any, fence: Fence, keys: list[tuple[str, str, int]]) -> ErrorCode:
        what = f"the offsets of {keys[0]}{f' and {len(keys) - 1} more' if len(keys) > 1 else ''}" if keys else \
            "a fence check"
        if failure.check(FencedError):
            _log.info("not writing {what}: this broker no longer holds coordinator epoch {epoch} ({path})",
                      what=what, epoch=fence.version, path=fence.path)
            if self.fenced is not None:
                self.fenced(fence)
            return ErrorCode.not_coordinator
        if failure.check(defer.TimeoutError):
            _log.warn("writing {what} to ZooKeeper timed out", what=what)
            return ErrorCode.request_timed_out
        if failure.check(ZooKeeperError):
            _log.warn("writing {what} to ZooKeeper failed: {error}", what=what, error=failure.value)
        else:
            _log.failure("writing {what} failed", failure, what=what)
        return ErrorCode.coordinator_not_available

    @staticmethod
    def _answer(code: ErrorCode, waiters: list[defer.Deferred]) -> None:
        for d in waiters:
            d.callback(code)

    def fetch(self, group_id: str, partitions: list[tuple[str, int]] | None) -> defer.Deferred:
        """@return: a Deferred firing with C{{(topic, partition): CommittedOffset}} read from ZooKeeper."""
        return self.registry.get_committed_offsets(group_id, partitions)

    def flush_now(self) -> defer.Deferred:
        """Write the pending batch at once (shutdown); @return: a Deferred firing once it is written (or failed)."""
        if self._timer is not None:
            self._timer.cancel()
            return self._flush()
        return _succeed(None)


def _succeed(value: Any) -> defer.Deferred:
    return defer.succeed(value)


class GroupCoordinator:
    """
    Serves the classic group protocol for the groups this broker coordinates.

    Every public method returns a Deferred (already fired unless the answer
    must wait for a rebalance or for ZooKeeper).

    @param broker_id: this broker's id.
    @param config: the L{kafkatw.config.BrokerConfig} (group.* and offsets.* keys).
    @param clock: C{IReactorTime}.
    @param live_brokers: returns the ids of the live brokers (``/brokers/ids``),
        for the L{StaticPlacement} used until L{use_election}.
    @param offsets: the L{OffsetStore}.
    @param topic_exists: whether a topic is known (OffsetCommit answers
        UNKNOWN_TOPIC_OR_PARTITION otherwise); C{None}: every topic exists.
    """

    def __init__(self, broker_id: int, config: Any, clock: Any, live_brokers: Callable[[], Iterable[int]],
                 offsets: OffsetStore, topic_exists: Callable[[str, int], bool] | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.broker_id = broker_id
        self.clock = clock
        self.live_brokers = live_brokers
        self.offsets = offsets
        self.topic_exists = topic_exists
        self.now_ms = now_ms or (lambda: int(clock.seconds() * 1000))
        self.initial_rebalance_delay_ms = config["group.initial.rebalance.delay.ms"]
        self.min_session_timeout_ms = config["group.min.session.timeout.ms"]
        self.max_session_timeout_ms = config["group.max.session.timeout.ms"]
        self.max_group_size = config["group.max.size"]
        self.offset_metadata_max_bytes = config["offset.metadata.max.bytes"]
        self.groups: dict[str, Group] = {}
        self.placement: Any = StaticPlacement(broker_id, live_brokers)
        self.election: Any = None
        #: The KIP-848 consumer groups beside the classic ones
        #: (L{kafkatw.broker.consumer_group.ConsumerGroupCoordinator}, which sets
        #: itself here), or C{None}.
        self.consumer_groups: Any = None
        #: Called after the placement changed, to unload other kinds of groups
        #: that moved away (the share groups' coordinator's C{unload_moved}).
        self.placement_listeners: list[Callable[[], Any]] = []

    # --- placement -------------------------------------------------------------

    def use_election(self, election: Any) -> None:
        """
        Coordinate the groups whose C{__consumer_offsets} partition this broker
        holds in C{election} (a
        L{kafkatw.broker.group_coordinator_election.GroupCoordinatorElection}),
        fenced by its coordinator epochs, instead of the L{StaticPlacement}.
        """
        self.placement = self.election = election
        election.listeners.append(self.placement_changed)
        election.before_release = self._before_release
        self.offsets.fenced = election.fenced
        self.placement_changed()

    def coordinator(self, group_id: str) -> int | None:
        """The broker coordinating C{group_id} (FindCoordinator's answer), or C{None} when none does."""
        return self.placement.coordinator(group_id)

    def owns(self, group_id: str) -> bool:
        """Whether this broker acts as C{group_id}'s coordinator now."""
        return self.placement.acting(group_id) is not None

    def brokers_changed(self) -> None:
        """Unload the groups that moved to another broker (call on every ``/brokers/ids`` change)."""
        self.placement_changed()

    def placement_changed(self) -> None:
        """Unload the groups loaded under a coordinator epoch this broker no longer holds."""
        unload_moved_groups(self.placement, self.groups, self._unload)
        if self.consumer_groups is not None:
            self.consumer_groups.placement_changed()
        for listener in list(self.placement_listeners):
            listener()

    def _before_release(self, fence: Fence) -> defer.Deferred:
        """The election gives up C{fence}: its groups are unloaded already; write what was accepted under it."""
        self.placement_changed()
        return self.offsets.flush_now()

    def _confirmed(self, group: Group, d: defer.Deferred, ok: Callable[[Any], bool],
                   refused: Callable[[Any, ErrorCode], Any]) -> defer.Deferred:
        """
        C{d}'s successful result (C{ok}) is delivered only once ZooKeeper has
        confirmed that this broker still holds C{group}'s coordinator epoch
        (L{OffsetStore.confirm}); otherwise C{refused(result, error)}.
        """
        fence = group.fence
        if fence is None or fence.path is None:
            return d

        def gate(result: Any) -> Any:
            if not ok(result):
                return result
            confirmed = self.offsets.confirm(fence)
            confirmed.addCallback(lambda code: result if code == ErrorCode.none else refused(result, code))
            return confirmed

        return d.addCallback(gate)

    def _unload(self, group_id: str, shutting_down: bool = False) -> None:
        """Kafka's C{onGroupUnloaded}: waiting members are told NOT_COORDINATOR and will find the new one."""
        group = self.groups.pop(group_id)
        if not shutting_down:
            _log.info("unloading group {group} (now coordinated by broker {other})", group=group_id,
                      other=self.coordinator(group_id))
        group.transition_to(GroupState.DEAD)
        self._cancel_timers(group)
        for member in group.members.values():
            if member.join_waiter is not None:
                self._answer_join(member, _rejected_join(group_id, member.member_id, ErrorCode.not_coordinator,
                                                         "the group moved away from this broker"))
            self._answer_sync(member, SyncResult(ErrorCode.not_coordinator))

    def shutdown(self, timeout_ms: int = 10000) -> defer.Deferred:
        """
        Answer every waiting member NOT_COORDINATOR, write pending offsets,
        and give up the coordinator claims (the other brokers take them over
        at once: L{kafkatw.broker.group_coordinator_election.GroupCoordinatorElection.stop}).

        Without a ZooKeeper connection it does not wait (the broker's
        shutdown would otherwise wait C{timeout_ms} for a stopped ZooKeeper):
        the writes wait in the client and fail when it closes the session,
        which answers the commits waiting on them with an error (the clients
        retry at the next coordinator: nothing acknowledged is lost), and the
        claims end with the session.

        @return: a Deferred firing once done, after C{timeout_ms}, or once the
            ZooKeeper client is not connected.
        """
        for group_id in list(self.groups):
            self._unload(group_id, shutting_down=True)
        if self.consumer_groups is not None:
            self.consumer_groups.shutdown()

        async def go() -> None:
            if self.election is not None:
                await self.election.stop()
            await self.offsets.flush_now()

        d = defer.Deferred.fromCoroutine(go())
        d.addTimeout(timeout_ms / 1000.0, self.clock)
        d.addErrback(lambda f: _log.failure("giving up the group coordinator claims failed", f))
        if self.election is None:
            return d
        return unless_disconnected(d, self.election.client)

    def _check(self, group_id: str | None) -> ErrorCode:
        """Whether this broker acts as C{group_id}'s coordinator; a group loaded under an older epoch is unloaded."""
        return check_coordinator(self.placement, self.groups, group_id, self._unload)

    def drop_empty_group(self, group_id: str) -> None:
        """
        Forget C{group_id}'s classic group if it has no members: a KIP-848
        consumer group takes the id over (Kafka 4 converts an empty group
        whatever its C{group.consumer.migration.policy}).
        """
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            self._unload(group_id, shutting_down=True)

    def _new_group(self, group_id: str) -> Group:
        group = self.groups[group_id] = Group(group_id, fence=self.placement.acting(group_id))
        return group

    # --- timers ------------------------------------------------------------------

    def _cancel_timers(self, group: Group) -> None:
        for timer in [group.join_timer, group.sync_timer, *group.pending_members.values(),
                      *(m.heartbeat_timer for m in group.members.values())]:
            if timer is not None and timer.active():
                timer.cancel()
        group.join_timer = group.sync_timer = None

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """Kafka's C{completeAndScheduleNextHeartbeatExpiration}."""
        if member.heartbeat_timer is not None and member.heartbeat_timer.active():
            member.heartbeat_timer.cancel()
        delay_ms = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self.clock.callLater(delay_ms / 1000.0, self._heartbeat_expired, group,
                                                      member.member_id)

    def _heartbeat_expired(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if group.is_(GroupState.DEAD) or member is None:
            return
        member.heartbeat_timer = None
        # Kafka's shouldKeepAlive: a member waiting in a rebalance is not expired
        # (unless it is new and never completed one).
        if member.sync_waiter is not None or (member.join_waiter is not None and not member.is_new):
            return
        _log.info("member {member} of group {group} expired (no heartbeat within {timeout} ms)",
                  member=member_id, group=group.group_id, timeout=member.session_timeout_ms)
        self._remove_member_and_update_group(group, member)

    # --- JoinGroup -------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, require_known_member_id: bool,
                   client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                   protocol_type: str, protocols: list[tuple[str, bytes]]) -> defer.Deferred:
        """
        Kafka's C{handleJoinGroup}.

        @param require_known_member_id: JoinGroup v4+: a new member first gets
            MEMBER_ID_REQUIRED with its member id (KIP-394).
        @return: a Deferred firing with a L{JoinResult} (when the rebalance completes).
        """
        def reject(error: ErrorCode, reason: str) -> defer.Deferred:
            return _succeed(_rejected_join(group_id, member_id, error, reason))

        error = self._check(group_id)
        if error:
            return reject(error, "no group id" if not group_id else "this broker does not coordinate the group")
        if self.consumer_groups is not None and group_id in self.consumer_groups.groups:
            if self.consumer_groups.active(group_id):
                return reject(ErrorCode.inconsistent_group_protocol,
                              "the group is a KIP-848 consumer group with members")
            self.consumer_groups.unload(group_id)  # an empty consumer group becomes a classic one (Kafka 4)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return reject(ErrorCode.invalid_session_timeout,
                          f"session timeout {session_timeout_ms} ms outside group.min.session.timeout.ms "
                          f"{self.min_session_timeout_ms} .. group.max.session.timeout.ms {self.max_session_timeout_ms}")
        unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not unknown:
                return reject(ErrorCode.unknown_member_id, "the group does not exist")
            group = self._new_group(group_id)
        if group.is_(GroupState.DEAD):
            return reject(ErrorCode.coordinator_not_available, "the group is Dead")
        if not group.supports_protocols(protocol_type, protocols):
            offered = ",".join(name for name, _ in protocols)
            if group.protocol_type != protocol_type and not group.is_(GroupState.EMPTY):
                reason = f"protocol type {protocol_type!r} is not the group's {group.protocol_type!r}"
            else:
                reason = (f"none of the protocols [{offered}] is supported by all {len(group.members)} members "
                          f"(group {group.state.value}, common: [{','.join(sorted(group.candidate_protocols()))}])")
            return reject(ErrorCode.inconsistent_group_protocol, reason)
        if unknown and len(group.members) + len(group.pending_members) >= self.max_group_size:
            return reject(ErrorCode.group_max_size_reached, f"group.max.size {self.max_group_size} reached")
        d: defer.Deferred = defer.Deferred()
        args = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        if unknown:
            new_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
            if group_instance_id is not None:
                old_id = group.static_members.get(group_instance_id)
                if old_id is not None:
                    self._update_static_member_and_rebalance(group, old_id, new_id, group_instance_id, protocols,
                                                             rebalance_timeout_ms, session_timeout_ms, d)
                else:
                    self._add_member_and_rebalance(group, new_id, group_instance_id, *args, d)
            elif require_known_member_id:
                group.pending_members[new_id] = self.clock.callLater(
                    session_timeout_ms / 1000.0, self._pending_member_expired, group, new_id)
                d.callback(JoinResult(ErrorCode.member_id_required, new_id))
            else:
                self._add_member_and_rebalance(group, new_id, None, *args, d)
        else:
            self._current_member_join(group, member_id, group_instance_id, args, d)
        return self._confirmed(
            group, d, lambda result: result.error == ErrorCode.none,
            lambda result, code: _rejected_join(group_id, result.member_id, code,
                                                "ZooKeeper did not confirm this broker as the group's coordinator"))

    def _pending_member_expired(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            self._try_complete_join(group)

    def _current_member_join(self, group: Group, member_id: str, group_instance_id: str | None, args: tuple,
                             d: defer.Deferred) -> None:
        client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols = args
        if member_id in group.pending_members:
            timer = group.pending_members.pop(member_id)
            if timer.active():
                timer.cancel()
            self._add_member_and_rebalance(group, member_id, group_instance_id, *args, d)
            return
        if group.static_member_fenced(group_instance_id, member_id):
            d.callback(_rejected_join(group.group_id, member_id, ErrorCode.fenced_instance_id,
                                      f"instance {group_instance_id} now belongs to another member id"))
            return
        if member_id not in group.members:
            d.callback(_rejected_join(group.group_id, member_id, ErrorCode.unknown_member_id,
                                      "not a member of the group"))
            return
        if group_instance_id is not None and group_instance_id not in group.static_members:
            d.callback(_rejected_join(group.group_id, member_id, ErrorCode.unknown_member_id,
                                      f"instance {group_instance_id} is not a static member of the group"))
            return
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms, d)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # It missed its JoinGroup response: answer again for this generation.
                d.callback(self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, d)
        elif state is GroupState.STABLE:
            if group.leader_id == member_id or not member.matches(protocols):
                # The leader's JoinGroup forces a rebalance (it may have seen a metadata change).
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, d)
            else:
                d.callback(self._join_result(group, member))
        else:  # Empty or Dead: let it reset its generation and rejoin
            d.callback(_rejected_join(group.group_id, member_id, ErrorCode.unknown_member_id,
                                      f"the group is {state.value}"))

    def _join_result(self, group: Group, member: Member, leader_id: str | None = None) -> JoinResult:
        leader = group.leader_id if leader_id is None else leader_id
        return JoinResult(
            ErrorCode.none, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
            leader or "",
            tuple(group.current_member_metadata()) if member.member_id == leader else (),
        )

    def _add_member_and_rebalance(self, group: Group, member_id: str, group_instance_id: str | None, client_id: str,
                                  client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                                  protocol_type: str, protocols: list[tuple[str, bytes]], d: defer.Deferred) -> None:
        member = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, list(protocols), is_new=True, join_waiter=d)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.initial_join:
            group.new_member_added = True
        group.add(member)
        # New members cannot heartbeat yet; they are dropped if the rebalance never completes.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")
        self._try_complete_join(group)

    def _update_member_and_rebalance(self, group: Group, member: Member, protocols: list[tuple[str, bytes]],
                                     rebalance_timeout_ms: int, session_timeout_ms: int, d: defer.Deferred) -> None:
        member.protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.join_waiter is not None and member.join_waiter is not d:
            # A second JoinGroup from the same member replaces the first.  Kafka
            # drops the first silently; here it is answered, because a held
            # response would stall every later response on its connection.
            old, member.join_waiter = member.join_waiter, None
            old.callback(_rejected_join(group.group_id, member.member_id, ErrorCode.rebalance_in_progress,
                                        "replaced by a newer JoinGroup of the same member"))
        member.join_waiter = d
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}")
        self._try_complete_join(group)

    def _update_static_member_and_rebalance(self, group: Group, old_id: str, new_id: str, instance_id: str,
                                            protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                                            session_timeout_ms: int, d: defer.Deferred) -> None:
        """
        A static member rejoined with a new member id (KIP-345): it takes the old
        id's place and assignment; whoever still uses the old id is fenced.
        """
        old_leader = group.leader_id
        old = group.members.pop(old_id)
        if old.heartbeat_timer is not None and old.heartbeat_timer.active():
            old.heartbeat_timer.cancel()
        if old.join_waiter is not None:
            self._answer_join(old, _rejected_join(group.group_id, old_id, ErrorCode.fenced_instance_id,
                                                  f"instance {instance_id} rejoined as {new_id}"))
        self._answer_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        new = Member(new_id, instance_id, old.client_id, old.client_host, rebalance_timeout_ms, session_timeout_ms,
                     old.protocol_type, old.protocols, assignment=old.assignment)
        group.members[new_id] = new
        group.static_members[instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        state = group.state
        if state is GroupState.STABLE:
            self._schedule_heartbeat(group, new)
            current_protocol = group.protocol_name
            new.protocols = list(protocols)
            if group.select_protocol() == current_protocol:
                # No rebalance: answer with the current generation and the old leader
                # id, so that this member does not assign as a leader (KIP-345).
                d.callback(self._join_result(group, new, leader_id=old_leader or ""))
            else:
                new.join_waiter = d
                self._maybe_prepare_rebalance(group, f"static member {instance_id} changed protocols")
        elif state is GroupState.COMPLETING_REBALANCE:
            new.protocols = list(protocols)
            new.join_waiter = d
            self._prepare_rebalance(group, f"static member {instance_id} rejoined while completing a rebalance")
        else:  # PreparingRebalance
            new.protocols = list(protocols)
            new.join_waiter = d
            self._schedule_heartbeat(group, new)
            self._try_complete_join(group)

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        """Kafka's C{prepareRebalance}: start a join window."""
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        if group.sync_timer is not None and group.sync_timer.active():
            group.sync_timer.cancel()
        group.sync_timer = None
        if group.join_timer is not None and group.join_timer.active():
            group.join_timer.cancel()
        if group.is_(GroupState.EMPTY):
            # Kafka's InitialDelayedJoin: wait for more members of a new group.
            delay = self.initial_rebalance_delay_ms
            group.initial_join = True
            group.new_member_added = False
            group.initial_remaining_ms = max(group.rebalance_timeout_ms - delay, 0)
            group.join_timer = self.clock.callLater(delay / 1000.0, self._initial_join_expired, group)
        else:
            group.initial_join = False
            group.join_timer = self.clock.callLater(group.rebalance_timeout_ms / 1000.0, self._complete_join, group)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        _log.info("preparing to rebalance group {group} (generation {generation}): {reason}", group=group.group_id,
                  generation=group.generation_id, reason=reason)
        # Kafka's rebalancePurgatory.tryCompleteElseWatch: the join completes at
        # once when every member has already joined -- in particular when the
        # last member just left, so that the group is Empty before the next
        # request is handled (a JoinGroup pipelined after that LeaveGroup must
        # meet an Empty group, not a PreparingRebalance group without members).
        self._try_complete_join(group)

    def _initial_join_expired(self, group: Group) -> None:
        group.join_timer = None
        if group.new_member_added and group.initial_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
            group.join_timer = self.clock.callLater(delay / 1000.0, self._initial_join_expired, group)
        else:
            self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        """Kafka's C{DelayedJoin.tryComplete}: done as soon as every member has rejoined."""
        if group.is_(GroupState.PREPARING_REBALANCE) and not group.initial_join and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Kafka's C{onCompleteJoin}."""
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.join_timer is not None and group.join_timer.active():
            group.join_timer.cancel()
        group.join_timer = None
        group.initial_join = False
        for member in [m for m in group.members.values() if m.join_waiter is None and m.group_instance_id is None]:
            _log.info("member {member} of group {group} did not rejoin in time; removing it",
                      member=member.member_id, group=group.group_id)
            group.remove(member.member_id)
            if member.heartbeat_timer is not None and member.heartbeat_timer.active():
                member.heartbeat_timer.cancel()
        if group.members and not self._elect_joined_leader(group):
            # Only static members that have not rejoined remain: wait again.
            group.join_timer = self.clock.callLater(group.rebalance_timeout_ms / 1000.0, self._complete_join, group)
            return
        group.generation_id += 1
        group.pending_sync = set(group.members)
        if not group.members:
            group.protocol_name = None
            group.transition_to(GroupState.EMPTY)
            _log.info("group {group} is empty at generation {generation}", group=group.group_id,
                      generation=group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        _log.info("group {group} stabilized at generation {generation} with {count} members, protocol {protocol}",
                  group=group.group_id, generation=group.generation_id, count=len(group.members),
                  protocol=group.protocol_name)
        for member in list(group.members.values()):
            self._answer_join(member, self._join_result(group, member))
            self._schedule_heartbeat(group, member)
            member.is_new = False
        group.sync_timer = self.clock.callLater(group.rebalance_timeout_ms / 1000.0, self._sync_expired, group,
                                                group.generation_id)

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.join_waiter is not None:
            return True
        for m in group.members.values():
            if m.join_waiter is not None:
                group.leader_id = m.member_id
                return True
        return False

    def _sync_expired(self, group: Group, generation_id: int) -> None:
        """Kafka's pending-sync expiry: members that never sent SyncGroup are removed."""
        group.sync_timer = None
        if group.generation_id != generation_id or group.state not in (GroupState.COMPLETING_REBALANCE,
                                                                      GroupState.STABLE):
            return
        missing = [group.members[m] for m in group.pending_sync if m in group.members]
        if not missing:
            return
        for member in missing:
            _log.info("member {member} of group {group} did not sync in time; removing it",
                      member=member.member_id, group=group.group_id)
            group.remove(member.member_id)
            if member.heartbeat_timer is not None and member.heartbeat_timer.active():
                member.heartbeat_timer.cancel()
        self._after_removal(group, "members failed to sync")

    @staticmethod
    def _answer_join(member: Member, result: JoinResult) -> None:
        d, member.join_waiter = member.join_waiter, None
        if d is not None:
            d.callback(result)

    @staticmethod
    def _answer_sync(member: Member, result: SyncResult) -> None:
        d, member.sync_waiter = member.sync_waiter, None
        if d is not None:
            d.callback(result)

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._answer_sync(member, SyncResult(error))

    def _remove_member_and_update_group(self, group: Group, member: Member) -> None:
        """Kafka's C{removeMemberAndUpdateGroup}."""
        if member.join_waiter is not None:
            self._answer_join(member, _rejected_join(group.group_id, member.member_id, ErrorCode.unknown_member_id,
                                                     "removed from the group while waiting to join"))
        if member.heartbeat_timer is not None and member.heartbeat_timer.active():
            member.heartbeat_timer.cancel()
        group.remove(member.member_id)
        self._after_removal(group, f"removing member {member.member_id}")

    def _after_removal(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # --- SyncGroup ---------------------------------------------------------------------

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> defer.Deferred:
        """Kafka's C{handleSyncGroup}.  @return: a Deferred firing with a L{SyncResult}."""
        d = self._sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
                             assignments)
        group = self.groups.get(group_id)
        if group is None:
            return d
        return self._confirmed(group, d, lambda result: result.error == ErrorCode.none,
                               lambda result, code: SyncResult(code))

    def _sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                    protocol_type: str | None, protocol_name: str | None,
                    assignments: dict[str, bytes]) -> defer.Deferred:
        error = self._check(group_id)
        if error:
            return _succeed(SyncResult(error))
        group = self.groups.get(group_id)
        if group is None:
            return _succeed(SyncResult(ErrorCode.unknown_member_id))
        if group.is_(GroupState.DEAD):
            return _succeed(SyncResult(ErrorCode.coordinator_not_available))
        if group.static_member_fenced(group_instance_id, member_id):
            return _succeed(SyncResult(ErrorCode.fenced_instance_id))
        member = group.members.get(member_id)
        if member is None:
            return _succeed(SyncResult(ErrorCode.unknown_member_id))
        if generation_id != group.generation_id:
            return _succeed(SyncResult(ErrorCode.illegal_generation))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name):
            return _succeed(SyncResult(ErrorCode.inconsistent_group_protocol))
        state = group.state
        if state is GroupState.EMPTY:
            return _succeed(SyncResult(ErrorCode.unknown_member_id))
        if state is GroupState.PREPARING_REBALANCE:
            return _succeed(SyncResult(ErrorCode.rebalance_in_progress))
        group.pending_sync.discard(member_id)
        if state is GroupState.STABLE:
            self._schedule_heartbeat(group, member)
            return _succeed(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
        # CompletingRebalance
        d: defer.Deferred = defer.Deferred()
        if member.sync_waiter is not None:
            self._answer_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_waiter = d
        if group.leader_id == member_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            if group.sync_timer is not None and group.sync_timer.active() and not group.pending_sync:
                group.sync_timer.cancel()
                group.sync_timer = None
            group.transition_to(GroupState.STABLE)
            for m in group.members.values():
                self._answer_sync(m, SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                                                m.assignment))
                self._schedule_heartbeat(group, m)
        return d

    # --- Heartbeat ---------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> defer.Deferred:
        """Kafka's C{handleHeartbeat}.  @return: a Deferred firing with an L{ErrorCode}."""
        error = self._check(group_id)
        if error:
            return _succeed(error)
        group = self.groups.get(group_id)
        if group is None:
            return _succeed(ErrorCode.unknown_member_id)
        if group.is_(GroupState.DEAD):
            return _succeed(ErrorCode.coordinator_not_available)
        if group.static_member_fenced(group_instance_id, member_id):
            return _succeed(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return _succeed(ErrorCode.unknown_member_id)
        if generation_id != group.generation_id:
            return _succeed(ErrorCode.illegal_generation)
        if group.is_(GroupState.EMPTY):
            return _succeed(ErrorCode.unknown_member_id)
        self._schedule_heartbeat(group, member)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return _succeed(ErrorCode.rebalance_in_progress)
        return _succeed(ErrorCode.none)

    # --- LeaveGroup --------------------------------------------------------------------

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]) -> defer.Deferred:
        """
        Kafka's C{handleLeaveGroup} (v3+ batches members; KIP-345 lets an admin
        remove a static member by instance id alone).

        @param leaving: C{(member_id, group_instance_id)} pairs.
        @return: a Deferred firing with C{(top-level ErrorCode, [per-member ErrorCode])}.
        """
        error = self._check(group_id)
        if error:
            return _succeed((error, [error] * len(leaving)))
        group = self.groups.get(group_id)
        if group is None:
            return _succeed((ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)))
        if group.is_(GroupState.DEAD):
            return _succeed((ErrorCode.coordinator_not_available, [ErrorCode.coordinator_not_available] * len(leaving)))
        codes = []
        for member_id, instance_id in leaving:
            if member_id == UNKNOWN_MEMBER_ID:
                current = group.static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    codes.append(ErrorCode.unknown_member_id)
                else:
                    self._remove_member_and_update_group(group, group.members[current])
                    codes.append(ErrorCode.none)
            elif member_id in group.pending_members:
                timer = group.pending_members.pop(member_id)
                if timer.active():
                    timer.cancel()
                self._try_complete_join(group)
                codes.append(ErrorCode.none)
            elif group.static_member_fenced(instance_id, member_id):
                codes.append(ErrorCode.fenced_instance_id)
            elif member_id not in group.members or (instance_id is not None and instance_id not in group.static_members):
                codes.append(ErrorCode.unknown_member_id)
            else:
                _log.info("member {member} left group {group}", member=member_id, group=group_id)
                self._remove_member_and_update_group(group, group.members[member_id])
                codes.append(ErrorCode.none)
        return _succeed((ErrorCode.none, codes))

    # --- offsets -----------------------------------------------------------------------

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       offsets: dict[tuple[str, int], CommittedOffset], version: int = 9) -> defer.Deferred:
        """
        Kafka's C{handleCommitOffsets}: a group member's commit (valid member
        and generation, not while CompletingRebalance), or a standalone commit
        (generation -1) to a group without members.  C{version}: the
        OffsetCommit request's (a KIP-848 member must use v9+).

        @return: a Deferred firing with C{{(topic, partition): ErrorCode}} once
            the offsets are in ZooKeeper.
        """
        error = self._check(group_id)
        if not error and self.consumer_groups is not None and group_id in self.consumer_groups.groups:
            error = self.consumer_groups.commit_error(group_id, member_id, generation_id, version)
            if error:
                return _succeed({tp: error for tp in offsets})
            return self._write_offsets(group_id, offsets, self.placement.acting(group_id))
        if not error:
            group = self.groups.get(group_id)
            if group is None:
                if generation_id < 0:
                    group = self._new_group(group_id)
                    error = ErrorCode.none
                else:
                    error = ErrorCode.illegal_generation
            if group is not None:
                error = self._commit_error(group, generation_id, member_id, group_instance_id)
        if error:
            return _succeed({tp: error for tp in offsets})
        return self._write_offsets(group_id, offsets, self.groups[group_id].fence)

    def _write_offsets(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset],
                       fence: Fence | None) -> defer.Deferred:
        """Check each offset's metadata size and partition, and commit the valid ones under C{fence}."""
        now = self.now_ms()
        codes: dict[tuple[str, int], ErrorCode] = {}
        valid: dict[tuple[str, int], CommittedOffset] = {}
        for (topic, partition), committed in offsets.items():
            if len(committed.metadata.encode("utf-8")) > self.offset_metadata_max_bytes:
                codes[(topic, partition)] = ErrorCode.offset_metadata_too_large
            elif self.topic_exists is not None and not self.topic_exists(topic, partition):
                codes[(topic, partition)] = ErrorCode.unknown_topic_or_partition
            else:
                valid[(topic, partition)] = CommittedOffset(committed.offset, committed.leader_epoch,
                                                            committed.metadata, now)
        if not valid:
            return _succeed(codes)
        if fence is None:
            return _succeed({**codes, **{tp: ErrorCode.not_coordinator for tp in valid}})
        d = self.offsets.commit(group_id, valid, fence)
        d.addCallback(lambda written: {**codes, **written})
        return d

    def _commit_error(self, group: Group, generation_id: int, member_id: str,
                      group_instance_id: str | None) -> ErrorCode:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return ErrorCode.none  # the group only stores offsets
        if group.static_member_fenced(group_instance_id, member_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._schedule_heartbeat(group, member)
            return ErrorCode.none
        return ErrorCode.unknown_member_id

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> defer.Deferred:
        """
        Kafka's C{handleFetchOffsets}, read from ZooKeeper.

        @param partitions: C{(topic, partition)} pairs, or C{None} for all.
        @return: a Deferred firing with C{(ErrorCode, {(topic, partition): CommittedOffset})}.
        """
        error = self._check(group_id)
        if error:
            return _succeed((error, {}))
        d = self.offsets.fetch(group_id, partitions)
        d.addCallbacks(lambda found: (ErrorCode.none, found), self._zookeeper_failed)
        return d

    @staticmethod
    def _zookeeper_failed(failure: Any) -> tuple[ErrorCode, dict]:
        failure.trap(ZooKeeperError)
        _log.warn("reading committed offsets from ZooKeeper failed: {error}", error=failure.value)
        return ErrorCode.coordinator_not_available, {}

    # --- ListGroups / DescribeGroups / DeleteGroups -------------------------------------

    def list_groups(self) -> defer.Deferred:
        """
        The groups this broker coordinates: those in memory and those with only
        committed offsets in ZooKeeper (shown Empty, as Kafka shows a group
        loaded from its offsets).

        @return: a Deferred firing with C{[(group_id, protocol_type, state name)]}.
        """
        d = self.offsets.registry.list_consumer_groups()

        def combine(stored: list[str]) -> list[tuple[str, str, str]]:
            listed = {g.group_id: (g.group_id, g.protocol_type or "", g.state.value) for g in self.groups.values()}
            if self.consumer_groups is not None:
                listed.update((g[0], g) for g in self.consumer_groups.list_groups())
            for group_id in stored:
                if group_id not in listed and self.owns(group_id):
                    listed[group_id] = (group_id, "", GroupState.EMPTY.value)
            return [listed[k] for k in sorted(listed)]

        d.addCallback(combine)
        return d

    def describe_group(self, group_id: str) -> defer.Deferred:
        """
        Kafka's C{handleDescribeGroup}: members with metadata and assignment
        only when Stable.

        @return: a Deferred firing with a dict for DescribeGroups' C{DescribedGroup}.
        """
        error = self._check(group_id)
        if error:
            return _succeed({"error_code": int(error), "group_id": group_id, "group_state": "", "protocol_type": "",
                             "protocol_data": "", "members": []})
        if self.consumer_groups is not None and group_id in self.consumer_groups.groups:
            # Kafka's describeGroups: a KIP-848 consumer group is not a classic group (ConsumerGroupDescribe it).
            return _succeed({"error_code": 0, "group_id": group_id, "group_state": GroupState.DEAD.value,
                             "protocol_type": "", "protocol_data": "", "members": []})
        group = self.groups.get(group_id)
        if group is not None:
            stable = group.is_(GroupState.STABLE)
            members = [{
                "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            } for m in group.members.values()]
            return _succeed({"error_code": 0, "group_id": group_id, "group_state": group.state.value,
                             "protocol_type": group.protocol_type or "",
                             "protocol_data": (group.protocol_name or "") if stable else "", "members": members})
        d = self.offsets.registry.has_committed_offsets(group_id)

        def answer(has_offsets: bool) -> dict:
            state = GroupState.EMPTY if has_offsets else GroupState.DEAD
            return {"error_code": 0, "group_id": group_id, "group_state": state.value, "protocol_type": "",
                    "protocol_data": "", "members": []}

        def failed(failure: Any) -> dict:
            failure.trap(ZooKeeperError)
            return {"error_code": int(ErrorCode.coordinator_not_available), "group_id": group_id, "group_state": "",
                    "protocol_type": "", "protocol_data": "", "members": []}

        d.addCallbacks(answer, failed)
        return d

    def delete_group(self, group_id: str) -> defer.Deferred:
        """
        Kafka's C{handleDeleteGroups}: only a group without members
        (Empty or unknown) may be deleted; its committed offsets go too.

        @return: a Deferred firing with an L{ErrorCode}.
        """
        error = self._check(group_id)
        if error:
            return _succeed(error)
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return _succeed(ErrorCode.non_empty_group)
        consumer_group = self.consumer_groups is not None and group_id in self.consumer_groups.groups
        if consumer_group:
            if self.consumer_groups.active(group_id):
                return _succeed(ErrorCode.non_empty_group)
            self.consumer_groups.unload(group_id)

        fence = self.placement.acting(group_id)

        async def go() -> ErrorCode:
            if group is None and not consumer_group and \
                    not await self.offsets.registry.has_committed_offsets(group_id):
                return ErrorCode.group_id_not_found
            confirmed = await self.offsets.confirm(fence)  # still the coordinator: delete
            if confirmed:
                return confirmed
            current = self.groups.get(group_id)
            if current is not None:
                if current.members:
                    return ErrorCode.non_empty_group
                current.transition_to(GroupState.DEAD)
                self._cancel_timers(current)
                del self.groups[group_id]
            await self.offsets.flush_now()
            try:
                await self.offsets.registry.delete_committed_offsets(group_id, None, fence.path, fence.version)
            except FencedError:  # deposed since the confirmation: nothing was deleted
                return ErrorCode.not_coordinator
            _log.info("deleted group {group}", group=group_id)
            return ErrorCode.none

        d = defer.Deferred.fromCoroutine(go())

        def failed(failure: Any) -> ErrorCode:
            failure.trap(ZooKeeperError)
            return ErrorCode.coordinator_not_available

        d.addErrback(failed)
        return d
