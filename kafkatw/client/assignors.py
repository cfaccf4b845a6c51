"""
Kafka's partition assignors for the classic consumer-group protocol, by the
names members announce in JoinGroup (so a kafkatw member shares a group with
Java, librdkafka and kafka-python members): pure functions from the members'
subscriptions and the topics' partition counts to each member's partitions.
The group's leader runs the one the coordinator chose (L{ASSIGNORS}).

  - C{range} (Kafka's C{RangeAssignor}): per topic, the members subscribed to
    it sorted by member id; member I{j} of I{C} takes C{P // C + (j < P % C)}
    consecutive partitions from C{j * (P // C) + min(j, P % C)}
    (L{range_assignment}, which the paper's ZooKeeper group,
    L{kafkatw.client.zookeeper_group}, uses too).
  - C{roundrobin} (C{RoundRobinAssignor}): every subscribed partition sorted
    by (topic, partition) is dealt to the members sorted by id, in turn,
    skipping a member not subscribed to the partition's topic.
  - C{sticky} (KIP-54, C{StickyAssignor}): balanced like C{roundrobin} but
    moving as few partitions as it can: every member keeps the partitions it
    owned (the subscription's C{owned_partitions}, else the assignor's user
    data of the eager protocol, L{kafkatw.protocol.consumer_protocol.decode_sticky_user_data})
    that still exist and that it still subscribes to; unowned partitions go
    to the least-loaded subscribed member; then partitions move one at a time
    from a member to a subscribed member with at least two fewer until none
    can.  With equal subscriptions every member ends within one partition of
    every other; a partition claimed by two members goes to the claim of the
    higher generation, and is unowned when the claims tie.
  - C{cooperative-sticky} (KIP-429, C{CooperativeStickyAssignor}): C{sticky},
    then every partition it would move from a member still in the group to
    another is left unassigned for this round: its owner revokes it (its new
    assignment lacks it) and rejoins, and the next round, where nobody owns
    it, gives it to its new member.  No partition is ever assigned while
    another member still owns it.

Every function takes C{subscriptions} (member id ->
L{kafkatw.protocol.consumer_protocol.MemberSubscription}) and
C{partition_counts} (topic -> partition count; a topic missing there has no
partitions) and returns member id -> its sorted C{(topic, partition)}s, every
member present.

Source: the Kafka protocol guide; KIP-54 (sticky assignor); KIP-429
(incremental cooperative rebalancing); Kafka's C{RangeAssignor},
C{RoundRobinAssignor}, C{AbstractStickyAssignor} and C{CooperativeStickyAssignor}.
"""

from __future__ import annotations

from typing import Callable

from ..protocol.consumer_protocol import MemberSubscription, decode_sticky_user_data

__all__ = ["range_assignment", "range_assign", "roundrobin_assign", "sticky_assign", "cooperative_sticky_assign",
           "ASSIGNORS", "COOPERATIVE", "MemberSubscription"]

TopicPartition = tuple[str, int]
Assignor = Callable[[dict[str, MemberSubscription], dict[str, int]], dict[str, list[TopicPartition]]]


def range_assignment(
    partitions: dict[str, list[int]], consumers: dict[str, list[str]]
) -> dict[str, set[TopicPartition]]:
    """
    Kafka's range assignor, per topic, as Kafka 0.8's C{RangeAssignor}.

    @param partitions: topic -> its partition ids.
    @param consumers: topic -> ids of the consumers subscribed to it.
    @return: consumer id -> the partitions it owns (every consumer named in
        C{consumers} appears, possibly with nothing).
    """
    result: dict[str, set[TopicPartition]] = {c: set() for cs in consumers.values() for c in cs}
    for topic, members in consumers.items():
        ps = sorted(partitions.get(topic, ()))
        cs = sorted(set(members))
        if not ps or not cs:
            continue
        n, extra = divmod(len(ps), len(cs))
        for j, consumer in enumerate(cs):
            start = j * n + min(j, extra)
            count = n + (1 if j < extra else 0)
            result[consumer].update((topic, p) for p in ps[start : start + count])
    return result


def _subscribed(subscriptions: dict[str, MemberSubscription], partition_counts: dict[str, int]) -> list[TopicPartition]:
    """Every partition of every topic some member subscribes to, sorted."""
    topics = {t for s in subscriptions.values() for t in s.topics}
    return sorted((t, p) for t in topics for p in range(max(partition_counts.get(t, 0), 0)))


def range_assign(subscriptions: dict[str, MemberSubscription],
                 partition_counts: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """C{range}: see the module docstring."""
    consumers: dict[str, list[str]] = {}
    for member, subscription in subscriptions.items():
        for topic in subscription.topics:
            consumers.setdefault(topic, []).append(member)
    owned = range_assignment({t: list(range(max(partition_counts.get(t, 0), 0))) for t in consumers}, consumers)
    return {member: sorted(owned.get(member, ())) for member in subscriptions}


def roundrobin_assign(subscriptions: dict[str, MemberSubscription],
                      partition_counts: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """C{roundrobin}: see the module docstring."""
    members = sorted(subscriptions)
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not members:
        return result
    turn = 0
    for tp in _subscribed(subscriptions, partition_counts):
        for step in range(len(members)):
            member = members[(turn + step) % len(members)]
            if tp[0] in subscriptions[member].topics:
                result[member].append(tp)
                turn = (turn + step + 1) % len(members)
                break
    return result


def _owners(subscriptions: dict[str, MemberSubscription],
            partitions: set[TopicPartition]) -> dict[TopicPartition, str]:
    """
    Who validly owns each partition: the member that claims it in its
    subscription (or, without owned partitions, its sticky user data), still
    subscribes to its topic, and claims it in the highest generation; a tie
    between members leaves it unowned.
    """
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member, subscription in subscriptions.items():
        owned = list(subscription.owned_partitions)
        generation = subscription.generation_id
        if not owned:
            owned, user_generation = decode_sticky_user_data(subscription.user_data)
            if generation < 0:
                generation = user_generation
        for tp in set(owned):
            if tp in partitions and tp[0] in subscription.topics:
                claims.setdefault(tp, []).append((generation, member))
    owners = {}
    for tp, found in claims.items():
        found.sort(reverse=True)
        if len(found) == 1 or found[0][0] > found[1][0]:
            owners[tp] = found[0][1]
    return owners


def sticky_assign(subscriptions: dict[str, MemberSubscription],
                  partition_counts: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """C{sticky}: see the module docstring."""
    members = sorted(subscriptions)
    all_partitions = _subscribed(subscriptions, partition_counts)
    owners = _owners(subscriptions, set(all_partitions))
    assigned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp, member in owners.items():
        assigned[member].add(tp)
    eligible: dict[str, list[str]] = {}
    for member in members:
        for topic in subscriptions[member].topics:
            eligible.setdefault(topic, []).append(member)
    for tp in all_partitions:
        if tp not in owners:
            candidates = eligible.get(tp[0], [])
            if candidates:
                best = min(candidates, key=lambda m: (len(assigned[m]), m))
                assigned[best].add(tp)
    # move one partition at a time from a member to a subscribed member with two fewer:
    # the sum of squared counts falls with every move, so this ends
    moved = True
    while moved:
        moved = False
        for source in sorted(members, key=lambda m: (-len(assigned[m]), m)):
            for tp in sorted(assigned[source], reverse=True):
                target = min(eligible[tp[0]], key=lambda m: (len(assigned[m]), m))
                if len(assigned[target]) < len(assigned[source]) - 1:
                    assigned[source].discard(tp)
                    assigned[target].add(tp)
                    moved = True
                    break
            if moved:
                break
    return {m: sorted(assigned[m]) for m in members}


def cooperative_sticky_assign(subscriptions: dict[str, MemberSubscription],
                              partition_counts: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """C{cooperative-sticky}: see the module docstring."""
    target = sticky_assign(subscriptions, partition_counts)
    owners = _owners(subscriptions, {tp for tps in target.values() for tp in tps})
    claimed: dict[TopicPartition, set[str]] = {}
    for member, subscription in subscriptions.items():
        for tp in subscription.owned_partitions:
            claimed.setdefault(tp, set()).add(member)
    result = {}
    for member, tps in target.items():
        # leave out what another member still owns (validly or in a contested claim)
        result[member] = [tp for tp in tps
                          if owners.get(tp, member) == member and not (claimed.get(tp, set()) - {member})]
    return result


#: The assignors by their Kafka names.
ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": cooperative_sticky_assign,
}

#: The assignors of the cooperative rebalance protocol (KIP-429): a member
#: keeps its partitions through a rebalance and revokes only those it loses.
COOPERATIVE = frozenset({"cooperative-sticky"})
