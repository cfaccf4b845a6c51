"""
Property tests of the KIP-848 server-side assignors
(L{kafkatw.broker.consumer_group_assignors}): over generated members,
subscriptions (homogeneous and not), topics and previous assignments,

  - every partition of a topic someone subscribes to is assigned to exactly
    one member, and only to a member subscribed to its topic;
  - C{uniform}: no partition could move to another member subscribed to its
    topic and leave the two closer than they are (balance within one; with
    one subscription for all, every member's count is within one of the
    others');
  - C{uniform} is sticky: given its own balanced result back, it changes
    nothing; when a member joins a homogeneous group, every member keeps at
    least min(what it had, floor(partitions / members)) of its partitions;
  - C{range}: per topic, contiguous ranges in member-id order, sizes within one.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker.consumer_group_assignors import AssignmentMember, RangeAssignor, UniformAssignor

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> tuple[dict[str, AssignmentMember], dict]:
    counts = {t: draw(st.integers(0, 12)) for t in draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4,
                                                                  unique=True))}
    names = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=7, unique=True))
    same = draw(st.booleans()) if homogeneous is None else homogeneous
    common = frozenset(draw(st.lists(st.sampled_from(list(counts)), min_size=1, unique=True)))
    members = {}
    for name in names:
        subscribed = common if same else frozenset(draw(st.lists(st.sampled_from(list(counts)), unique=True)))
        current = {}
        for t in subscribed:  # a previous assignment, possibly stale (partitions gone, taken twice)
            current[t] = frozenset(draw(st.lists(st.integers(0, 14), max_size=4)))
        members[name] = AssignmentMember(subscribed, current)
    return members, counts


def owners(assignment: dict) -> dict[tuple[uuid.UUID, int], list[str]]:
    found: dict[tuple[uuid.UUID, int], list[str]] = {}
    for member, topics in assignment.items():
        for t, ps in topics.items():
            for p in ps:
                found.setdefault((t, p), []).append(member)
    return found


class AssignorPropertyTests(SynchronousTestCase):
    def check_complete(self, members: dict, counts: dict, assignment: dict) -> None:
        self.assertEqual(set(assignment), set(members))
        subscribed = {t for m in members.values() for t in m.subscribed}
        wanted = {(t, p) for t in subscribed for p in range(counts[t])}
        found = owners(assignment)
        self.assertEqual(set(found), wanted)
        for (t, p), holders in found.items():
            self.assertEqual(len(holders), 1, f"{t}-{p} assigned to {holders}")
            self.assertIn(t, members[holders[0]].subscribed)

    @settings(max_examples=300, deadline=None)
    @given(groups())
    def test_uniform_assigns_every_partition_once_balanced(self, group: tuple) -> None:
        members, counts = group
        assignment = UniformAssignor().assign(members, counts)
        self.check_complete(members, counts, assignment)
        sizes = {m: sum(len(ps) for ps in topics.values()) for m, topics in assignment.items()}
        for member, topics in assignment.items():
            for t in topics:
                for other, m in members.items():
                    if t in m.subscribed:
                        self.assertLessEqual(sizes[member] - sizes[other], 1,
                                             f"{member} could give a partition of {t} to {other}")
        if len({m.subscribed for m in members.values()}) == 1:
            self.assertLessEqual(max(sizes.values()) - min(sizes.values()), 1)

    @settings(max_examples=200, deadline=None)
    @given(groups())
    def test_uniform_is_stable_on_its_own_result(self, group: tuple) -> None:
        members, counts = group
        first = UniformAssignor().assign(members, counts)
        again = {m: AssignmentMember(members[m].subscribed, first[m]) for m in members}
        self.assertEqual(UniformAssignor().assign(again, counts), first)

    @settings(max_examples=200, deadline=None)
    @given(groups(homogeneous=True), st.text("xyz", min_size=1, max_size=3))
    def test_uniform_moves_only_what_a_new_member_needs(self, group: tuple, newcomer: str) -> None:
        members, counts = group
        first = UniformAssignor().assign(members, counts)
        subscribed = next(iter(members.values())).subscribed
        grown = {m: AssignmentMember(members[m].subscribed, first[m]) for m in members}
        grown[newcomer] = AssignmentMember(subscribed, {})
        second = UniformAssignor().assign(grown, counts)
        self.check_complete(grown, counts, second)
        total = sum(counts[t] for t in subscribed)
        floor = total // len(grown)
        for m in members:
            had = {(t, p) for t, ps in first[m].items() for p in ps}
            kept = {(t, p) for t, ps in second[m].items() for p in ps} & had
            self.assertGreaterEqual(len(kept), min(len(had), floor))

    @settings(max_examples=200, deadline=None)
    @given(groups())
    def test_range_gives_contiguous_ranges(self, group: tuple) -> None:
        members, counts = group
        assignment = RangeAssignor().assign(members, counts)
        self.check_complete(members, counts, assignment)
        for t, count in counts.items():
            subscribed = sorted(m for m in members if t in members[m].subscribed)
            ranges = [sorted(assignment[m].get(t, ())) for m in subscribed]
            self.assertEqual([p for r in ranges for p in r], list(range(count)) if subscribed else [])
            if subscribed:
                self.assertLessEqual(max(map(len, ranges)) - min(map(len, ranges)), 1)

    def test_uniform_example(self) -> None:
        """Two members, six partitions of one topic: three each; a third member takes one from each."""
        t = TOPICS[0]
        two = UniformAssignor().assign({"a": AssignmentMember(frozenset({t})), "b": AssignmentMember(frozenset({t}))},
                                       {t: 6})
        self.assertEqual(two, {"a": {t: frozenset({0, 2, 4})}, "b": {t: frozenset({1, 3, 5})}})
        three = UniformAssignor().assign({"a": AssignmentMember(frozenset({t}), two["a"]),
                                          "b": AssignmentMember(frozenset({t}), two["b"]),
                                          "c": AssignmentMember(frozenset({t}))}, {t: 6})
        self.assertEqual(len(three["c"][t]), 2)
        self.assertEqual(len(three["a"][t] & two["a"][t]), 2)
        self.assertEqual(len(three["b"][t] & two["b"][t]), 2)
