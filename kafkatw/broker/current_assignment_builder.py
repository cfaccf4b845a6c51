"""
Per-member reconciliation of a KIP-848 consumer group: how a member's current
assignment moves towards its target assignment, one heartbeat at a time,
after Kafka's C{CurrentAssignmentBuilder} and C{MemberState}.

A partition is handed to its new owner only once its previous owner has
revoked it: the previous owner is asked to revoke it first (its heartbeat
answer's assignment leaves it out), and the coordinator counts it as revoked
only when that member's heartbeat no longer lists it among its owned
partitions.  Until then the partition is "unreleased" for its new owner.
So no partition is ever owned by two members at once as the heartbeats tell
it.

Member states and what a heartbeat does in each — the one table of this
machine (every state may follow every other: which one C{next_assignment}
picks depends on the target and the other members)::

    state                   on a heartbeat, goes to
    STABLE                  itself (epoch = target epoch), or next_assignment
    UNREVOKED_PARTITIONS    itself while it still owns a partition to revoke,
                            else next_assignment (epoch + 1)
    UNRELEASED_PARTITIONS   next_assignment

    next_assignment:
      partitions to revoke still owned  -> UNREVOKED_PARTITIONS (epoch kept)
      partitions assignable now         -> STABLE or UNRELEASED_PARTITIONS
                                           (epoch = target epoch; assigned += them)
      only unreleased partitions        -> UNRELEASED_PARTITIONS (epoch = target)
      nothing to do                     -> STABLE (epoch = target)

Source: KIP-848 ("Reconciliation"); Kafka 4.0's
C{modern.consumer.CurrentAssignmentBuilder}.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

__all__ = ["MemberState", "MemberAssignment", "reconcile", "Partitions"]

#: topic id -> partitions.
Partitions = Mapping[uuid.UUID, frozenset[int]]


class MemberState(enum.Enum):
    STABLE = "STABLE"
    UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
    UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"


@dataclass(frozen=True)
class MemberAssignment:
    """
    A member's reconciliation state (the assignment part of Kafka's
    C{ConsumerGroupMember}).

    @ivar epoch: the member epoch.
    @ivar previous_epoch: the member epoch before the last bump (a heartbeat
        carrying it is accepted: the answer with the bump may have been lost).
    @ivar assigned: the partitions it may consume (sent in the heartbeat answer).
    @ivar pending_revocation: partitions it must give up and still owns.
    """

    epoch: int = 0
    previous_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)


def _owns_any(owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None, partitions: Partitions) -> bool:
    """Kafka's C{ownsRevokedPartitions}: C{owned=None} (not reported) counts as still owning them."""
    if owned is None:
        return True
    return any(p in partitions.get(topic_id, ()) for topic_id, ps in owned for p in ps)


def _with_epoch(current: MemberAssignment, epoch: int, **changes: object) -> MemberAssignment:
    previous = current.epoch if epoch != current.epoch else current.previous_epoch
    return replace(current, epoch=epoch, previous_epoch=previous, **changes)


def reconcile(current: MemberAssignment, target_epoch: int, target: Partitions,
              owner_epoch: Callable[[uuid.UUID, int], int],
              owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None) -> MemberAssignment:
    """
    One heartbeat's step of Kafka's C{CurrentAssignmentBuilder.build}.

    @param current: the member's state before the heartbeat.
    @param target_epoch: the group's assignment epoch.
    @param target: the member's target partitions.
    @param owner_epoch: C{(topic id, partition) ->} the epoch of the member
        owning it (assigned or pending revocation), or -1 when none does.
    @param owned: the partitions the heartbeat reports owned, as
        C{(topic id, partitions)} pairs, or C{None} when it did not report them.
    @return: the member's new state (C{current} itself when unchanged).
    """
    owned = None if owned is None else [(t, list(ps)) for t, ps in owned]
    if current.state is MemberState.STABLE:
        if current.epoch == target_epoch:
            return current
        return _next_assignment(current, current.epoch, target_epoch, target, owner_epoch, owned)
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, current.pending_revocation):
            return current
        return _next_assignment(current, current.epoch + 1, target_epoch, target, owner_epoch, owned)
    return _next_assignment(current, current.epoch, target_epoch, target, owner_epoch, owned)


def _next_assignment(current: MemberAssignment, member_epoch: int, target_epoch: int, target: Partitions,
                     owner_epoch: Callable[[uuid.UUID, int], int],
                     owned: list[tuple[uuid.UUID, list[int]]] | None) -> MemberAssignment:
    """Kafka's C{computeNextAssignment}."""
    unreleased = False
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    pending: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id in {*target, *current.assigned}:
        wanted = target.get(topic_id, frozenset())
        had = current.assigned.get(topic_id, frozenset())
        kept = had & wanted
        to_revoke = had - kept
        new = wanted - kept
        free = frozenset(p for p in new if owner_epoch(topic_id, p) == -1)
        unreleased = unreleased or free != new
        if kept:
            assigned[topic_id] = kept
        if to_revoke:
            revoke[topic_id] = to_revoke
        if free:
            pending[topic_id] = free
    if revoke and _owns_any(owned, revoke):
        return _with_epoch(current, member_epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                           pending_revocation=revoke)
    # nothing (left) to revoke: the member reaches the target epoch with what it may own now
    for topic_id, ps in pending.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(current, target_epoch, state=state, assigned=assigned, pending_revocation={})
