"""
The server-side partition assignors of KIP-848 consumer groups: C{uniform}
(the default) and C{range}, after Kafka's C{UniformAssignor} and
C{RangeAssignor} (C{org.apache.kafka.coordinator.group.assignor}).

The group coordinator runs them whenever the group epoch moves past the
assignment epoch (a member joined, left, or changed its subscription; a
subscribed topic gained partitions) and reconciles each member towards the
result (L{kafkatw.broker.current_assignment_builder}).

An assignment is C{{member id: {topic id: frozenset of partitions}}}; the
input is each member's subscribed topic ids and current target partitions
(L{AssignmentMember}) and the partition count of every subscribed topic.

  - C{uniform}: every subscribed partition goes to exactly one member
    subscribed to its topic; the partition counts of members sharing a topic
    differ by at most one where a move could even them; a member keeps its
    previous partitions where balance allows (sticky), so a member joining
    or leaving moves only the partitions it must.
  - C{range}: per topic, the members subscribed to it in member-id order get
    contiguous ranges of partitions, the first C{partitions % members} one
    more (Kafka's classic C{RangeAssignor} rule, co-partitioning topics of the
    same size); not sticky.

Source: KIP-848 ("Assignors"); Kafka 4.0's C{UniformAssignor},
C{UniformHomogeneousAssignmentBuilder}, C{RangeAssignor}.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["AssignmentMember", "Assignment", "UniformAssignor", "RangeAssignor", "ASSIGNORS", "DEFAULT_ASSIGNOR"]

#: member id -> topic id -> partitions.
Assignment = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True)
class AssignmentMember:
    """
    One member as an assignor sees it.

    @ivar subscribed: the topic ids it subscribes to (existing topics only).
    @ivar current: its current target partitions, topic id -> partitions.
    @ivar rack_id: its rack (unused: no rack-aware placement).
    """

    subscribed: frozenset[uuid.UUID]
    current: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    rack_id: str | None = None


def _freeze(assignment: dict[str, dict[uuid.UUID, set[int]]]) -> Assignment:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in assignment.items()}


class UniformAssignor:
    """
    Kafka's C{uniform} assignor: balanced and sticky, for homogeneous and
    heterogeneous subscriptions alike.

    Algorithm: (1) every member keeps the partitions of its current target
    that still exist, that it still subscribes to and that no earlier member
    (in member-id order) kept; (2) each remaining partition goes to the
    subscribed member with the fewest partitions; (3) while a partition's
    holder has at least two more partitions than another member subscribed
    to its topic, it moves there (the holder with the most first).
    """

    name = "uniform"

    def assign(self, members: Mapping[str, AssignmentMember], partition_counts: Mapping[uuid.UUID, int]
               ) -> Assignment:
        """
        @param members: member id -> L{AssignmentMember}.
        @param partition_counts: topic id -> its number of partitions (every subscribed topic).
        @return: member id -> topic id -> partitions (every member present, possibly empty).
        """
        result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        counts = {m: 0 for m in members}
        owner: dict[tuple[uuid.UUID, int], str] = {}
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member_id in sorted(members):
            for topic_id in members[member_id].subscribed:
                if topic_id in partition_counts:
                    subscribers.setdefault(topic_id, []).append(member_id)
        for member_id in sorted(members):
            member = members[member_id]
            for topic_id, partitions in member.current.items():
                if topic_id not in member.subscribed or topic_id not in partition_counts:
                    continue
                for p in sorted(partitions):
                    if p < partition_counts[topic_id] and (topic_id, p) not in owner:
                        owner[(topic_id, p)] = member_id
                        result[member_id].setdefault(topic_id, set()).add(p)
                        counts[member_id] += 1
        for topic_id in sorted(subscribers, key=str):
            candidates = subscribers[topic_id]
            for p in range(partition_counts[topic_id]):
                if (topic_id, p) in owner:
                    continue
                member_id = min(candidates, key=lambda m: (counts[m], m))
                owner[(topic_id, p)] = member_id
                result[member_id].setdefault(topic_id, set()).add(p)
                counts[member_id] += 1
        self._balance(result, counts, subscribers)
        return _freeze(result)

    @staticmethod
    def _balance(result: dict[str, dict[uuid.UUID, set[int]]], counts: dict[str, int],
                 subscribers: dict[uuid.UUID, list[str]]) -> None:
        """One partition at a time, from the fullest member that can give one to a member two or more below it."""
        while True:
            for donor in sorted(counts, key=lambda m: (-counts[m], m)):
                move = None
                for topic_id in sorted(result[donor], key=str):
                    if not result[donor][topic_id]:
                        continue
                    receiver = min(subscribers[topic_id], key=lambda m: (counts[m], m))
                    if counts[donor] - counts[receiver] >= 2 and (move is None or counts[receiver] < counts[move[1]]):
                        move = (topic_id, receiver)
                if move is not None:
                    topic_id, receiver = move
                    p = max(result[donor][topic_id])
                    result[donor][topic_id].discard(p)
                    result[receiver].setdefault(topic_id, set()).add(p)
                    counts[donor] -= 1
                    counts[receiver] += 1
                    break
            else:
                return


class RangeAssignor:
    """Kafka's C{range} assignor: per topic, contiguous ranges over the subscribed members in member-id order."""

    name = "range"

    def assign(self, members: Mapping[str, AssignmentMember], partition_counts: Mapping[uuid.UUID, int]
               ) -> Assignment:
        """Same contract as L{UniformAssignor.assign}."""
        result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        for topic_id, count in partition_counts.items():
            subscribed = sorted(m for m, member in members.items() if topic_id in member.subscribed)
            if not subscribed:
                continue
            quota, extra = divmod(count, len(subscribed))
            start = 0
            for i, member_id in enumerate(subscribed):
                n = quota + (1 if i < extra else 0)
                if n:
                    result[member_id][topic_id] = set(range(start, start + n))
                start += n
        return _freeze(result)


#: name -> assignor, in the order of C{group.consumer.assignors} (the first is the default).
ASSIGNORS: dict[str, UniformAssignor | RangeAssignor] = {"uniform": UniformAssignor(), "range": RangeAssignor()}
DEFAULT_ASSIGNOR = "uniform"
