"""
Kafka's assignors (L{kafkatw.client.assignors}): the examples of Kafka's
javadocs, and properties over random groups (hypothesis): every partition of
a subscribed topic assigned exactly once to a member subscribed to it,
balance, stickiness, and that C{cooperative-sticky} never hands out a
partition another member still owns.  Also the consumer-protocol bytes
(L{kafkatw.protocol.consumer_protocol}).
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial import unittest

from kafkatw.client.assignors import (
    ASSIGNORS,
    cooperative_sticky_assign,
    range_assign,
    roundrobin_assign,
    sticky_assign,
)
from kafkatw.protocol.consumer_protocol import (
    MemberSubscription,
    decode_assignment,
    decode_member_subscription,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
)


def subs(**members: list[str]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(tuple(sorted(ts))) for m, ts in members.items()}


class ConsumerProtocolTests(unittest.TestCase):
    def test_subscription_round_trip(self) -> None:
        data = encode_subscription(["b", "a", "a"])
        self.assertEqual(data[:2], b"\x00\x00")  # version 0
        self.assertEqual(data[-4:], struct.pack(">i", -1))  # null user data
        self.assertEqual(decode_subscription(data), ["a", "b"])
        self.assertEqual(decode_member_subscription(data), MemberSubscription(("a", "b")))

    def test_subscription_with_owned_partitions_is_version_1(self) -> None:
        data = encode_subscription(["t"], b"ud", [("t", 2), ("t", 0)])
        self.assertEqual(data[:2], b"\x00\x01")
        self.assertEqual(decode_subscription(data), ["t"])
        self.assertEqual(decode_member_subscription(data), MemberSubscription(("t",), b"ud", (("t", 0), ("t", 2))))
        # an empty owned list is still version 1 (a cooperative member says it owns nothing)
        self.assertEqual(encode_subscription(["t"], owned_partitions=[])[:2], b"\x00\x01")

    def test_subscription_of_a_later_version(self) -> None:
        # v2 adds the generation after the owned partitions, v3 the rack
        data = (struct.pack(">hi", 3, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", -1)
                + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">ii", 1, 4) + struct.pack(">i", 7)
                + struct.pack(">h", -1))
        self.assertEqual(decode_subscription(data), ["t"])
        self.assertEqual(decode_member_subscription(data), MemberSubscription(("t",), None, (("t", 4),), 7))

    def test_unreadable_subscription(self) -> None:
        self.assertIsNone(decode_subscription(b"\x00"))
        self.assertIsNone(decode_subscription(struct.pack(">hih", 0, 1, 50) + b"short"))
        self.assertIsNone(decode_subscription(struct.pack(">hih", 0, 1, -2) + b"ab"))
        self.assertIsNone(decode_member_subscription(struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", 9)))

    def test_assignment_round_trip(self) -> None:
        tps = [("t", 2), ("a", 0), ("t", 0)]
        self.assertEqual(decode_assignment(encode_assignment(tps)), [("a", 0), ("t", 0), ("t", 2)])
        self.assertEqual(decode_assignment(encode_assignment([])), [])

    def test_unreadable_assignment(self) -> None:
        self.assertIsNone(decode_assignment(b"\x00"))
        self.assertIsNone(decode_assignment(struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", 2) + b"\x00"))

    def test_sticky_user_data(self) -> None:
        data = encode_sticky_user_data([("b", 1), ("a", 0)], 5)
        self.assertEqual(decode_sticky_user_data(data), ([("a", 0), ("b", 1)], 5))
        self.assertEqual(decode_sticky_user_data(data[:-4]), ([("a", 0), ("b", 1)], -1))  # v0: no generation
        self.assertEqual(decode_sticky_user_data(None), ([], -1))
        self.assertEqual(decode_sticky_user_data(b"\x00\x00\x00\x05"), ([], -1))


class ExampleTests(unittest.TestCase):
    def test_range_kafka_example(self) -> None:
        # Kafka's RangeAssignor javadoc: C0, C1 on t0, t1 with 3 partitions each
        result = range_assign(subs(C0=["t0", "t1"], C1=["t0", "t1"]), {"t0": 3, "t1": 3})
        self.assertEqual(result, {"C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
                                  "C1": [("t0", 2), ("t1", 2)]})

    def test_range_per_topic_members(self) -> None:
        result = range_assign(subs(m1=["a"], m2=["a", "b"], m3=["b"]), {"a": 4, "b": 1})
        self.assertEqual(result, {"m1": [("a", 0), ("a", 1)], "m2": [("a", 2), ("a", 3), ("b", 0)], "m3": []})

    def test_range_unknown_topic_and_more_members_than_partitions(self) -> None:
        result = range_assign(subs(x=["gone"], y=["t"], z=["t"]), {"t": 1})
        self.assertEqual(result, {"x": [], "y": [("t", 0)], "z": []})

    def test_roundrobin_kafka_examples(self) -> None:
        # RoundRobinAssignor javadoc: C0, C1 on t0, t1 with 3 partitions each
        result = roundrobin_assign(subs(C0=["t0", "t1"], C1=["t0", "t1"]), {"t0": 3, "t1": 3})
        self.assertEqual(result, {"C0": [("t0", 0), ("t0", 2), ("t1", 1)], "C1": [("t0", 1), ("t1", 0), ("t1", 2)]})
        # different subscriptions: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2 (1, 2, 3 partitions)
        result = roundrobin_assign(subs(C0=["t0"], C1=["t0", "t1"], C2=["t0", "t1", "t2"]),
                                   {"t0": 1, "t1": 2, "t2": 3})
        self.assertEqual(result, {"C0": [("t0", 0)], "C1": [("t1", 0)],
                                  "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]})

    def test_sticky_kafka_example(self) -> None:
        # StickyAssignor javadoc: C0..C2 on t0..t3 (2 partitions each); C1 leaves
        counts = {t: 2 for t in ("t0", "t1", "t2", "t3")}
        first = sticky_assign(subs(C0=list(counts), C1=list(counts), C2=list(counts)), counts)
        self.assertEqual(sorted(len(v) for v in first.values()), [2, 3, 3])
        after = {m: MemberSubscription(tuple(counts), owned_partitions=tuple(first[m])) for m in ("C0", "C2")}
        second = sticky_assign(after, counts)
        self.assertEqual(sorted(len(v) for v in second.values()), [4, 4])
        for m in ("C0", "C2"):
            self.assertTrue(set(first[m]) <= set(second[m]))  # nothing moved between the stayers

    def test_sticky_reads_the_eager_user_data(self) -> None:
        counts = {"t": 4}
        user_data = {"a": encode_sticky_user_data([("t", 3), ("t", 2)], 1),
                     "b": encode_sticky_user_data([("t", 0), ("t", 1)], 1)}
        result = sticky_assign({m: MemberSubscription(("t",), user_data[m]) for m in "ab"}, counts)
        self.assertEqual(result, {"a": [("t", 2), ("t", 3)], "b": [("t", 0), ("t", 1)]})  # not range's a: 0, 1

    def test_cooperative_two_phases(self) -> None:
        counts = {"t": 4}
        owned = {"a": (("t", 0), ("t", 1)), "b": (("t", 2), ("t", 3))}
        group = {m: MemberSubscription(("t",), owned_partitions=owned[m]) for m in "ab"}
        group["c"] = MemberSubscription(("t",), owned_partitions=())
        first = cooperative_sticky_assign(group, counts)
        # c gets nothing yet: what it will get is still owned by a or b
        self.assertEqual(first["c"], [])
        self.assertEqual(sum(len(v) for v in first.values()), 3)
        # a and b rejoin owning what they kept; the revoked partition goes to c
        second = cooperative_sticky_assign(
            {m: MemberSubscription(("t",), owned_partitions=tuple(first[m])) for m in "abc"}, counts)
        self.assertEqual(sorted(tp for v in second.values() for tp in v), [("t", p) for p in range(4)])
        self.assertEqual(sorted(len(v) for v in second.values()), [1, 1, 2])
        for m in "ab":
            self.assertTrue(set(first[m]) <= set(second[m]))


# --- properties --------------------------------------------------------------------------------

TOPICS = ["a", "b", "c"]


@st.composite
def groups(draw: st.DrawFn, same_topics: bool = False) -> tuple[dict[str, MemberSubscription], dict[str, int]]:
    counts = {t: draw(st.integers(0, 9)) for t in TOPICS}
    members = draw(st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8, unique=True))
    if same_topics:
        topics = tuple(sorted(draw(st.sets(st.sampled_from(TOPICS), min_size=1))))
        return {m: MemberSubscription(topics) for m in members}, counts
    return {m: MemberSubscription(tuple(sorted(draw(st.sets(st.sampled_from(TOPICS), min_size=1)))))
            for m in members}, counts


def owning(subscriptions: dict[str, MemberSubscription], result: dict[str, list]) -> dict[str, MemberSubscription]:
    return {m: s._replace(owned_partitions=tuple(result.get(m, ()))) for m, s in subscriptions.items()}


class PropertyTests(unittest.TestCase):
    def check_complete(self, subscriptions: dict, counts: dict, result: dict) -> None:
        """Every partition of a subscribed topic once, to a member subscribed to its topic."""
        self.assertEqual(set(result), set(subscriptions))
        flat = [tp for tps in result.values() for tp in tps]
        self.assertEqual(len(flat), len(set(flat)))
        wanted = {(t, p) for s in subscriptions.values() for t in s.topics for p in range(counts[t])}
        self.assertEqual(set(flat), wanted)
        for member, tps in result.items():
            for topic, _ in tps:
                self.assertIn(topic, subscriptions[member].topics)

    @settings(max_examples=150, deadline=None)
    @given(groups(), st.sampled_from(["range", "roundrobin", "sticky"]))
    def test_every_partition_exactly_once(self, group: tuple, name: str) -> None:
        subscriptions, counts = group
        self.check_complete(subscriptions, counts, ASSIGNORS[name](subscriptions, counts))

    @settings(max_examples=150, deadline=None)
    @given(groups(same_topics=True), st.sampled_from(["roundrobin", "sticky", "cooperative-sticky"]))
    def test_balanced_within_one_with_equal_subscriptions(self, group: tuple, name: str) -> None:
        subscriptions, counts = group
        result = ASSIGNORS[name](subscriptions, counts)
        sizes = [len(v) for v in result.values()]
        self.assertLessEqual(max(sizes) - min(sizes), 1)

    @settings(max_examples=150, deadline=None)
    @given(groups(), st.sampled_from(["sticky", "cooperative-sticky"]))
    def test_sticky_locally_balanced(self, group: tuple, name: str) -> None:
        """No partition could move to a subscribed member with two fewer partitions."""
        subscriptions, counts = group
        result = ASSIGNORS["sticky"](subscriptions, counts)
        for member, tps in result.items():
            for topic, _ in tps:
                for other, s in subscriptions.items():
                    if topic in s.topics:
                        self.assertGreaterEqual(len(result[other]), len(tps) - 1)

    @settings(max_examples=150, deadline=None)
    @given(groups(), st.sampled_from(["sticky", "cooperative-sticky"]))
    def test_same_members_keep_everything(self, group: tuple, name: str) -> None:
        subscriptions, counts = group
        first = sticky_assign(subscriptions, counts)
        self.assertEqual(ASSIGNORS[name](owning(subscriptions, first), counts), first)

    @settings(max_examples=150, deadline=None)
    @given(groups(same_topics=True), st.data())
    def test_members_that_stay_keep_their_share(self, group: tuple, data: st.DataObject) -> None:
        """After members join or leave, a stayer keeps min(what it had, its fair share) partitions."""
        subscriptions, counts = group
        first = sticky_assign(subscriptions, counts)
        stay = data.draw(st.sets(st.sampled_from(sorted(subscriptions)), min_size=1))
        joiners = data.draw(st.sets(st.sampled_from([f"n{i}" for i in range(4)])))
        topics = next(iter(subscriptions.values())).topics
        after = {m: MemberSubscription(topics, owned_partitions=tuple(first[m])) for m in stay}
        after.update({m: MemberSubscription(topics) for m in joiners})
        second = sticky_assign(after, counts)
        self.check_complete(after, counts, second)
        fair = sum(counts[t] for t in topics) // len(after)
        for m in stay:
            self.assertGreaterEqual(len(set(first[m]) & set(second[m])), min(len(first[m]), fair))

    @settings(max_examples=150, deadline=None)
    @given(groups(), st.data())
    def test_cooperative_never_assigns_what_another_owns(self, group: tuple, data: st.DataObject) -> None:
        subscriptions, counts = group
        # arbitrary (possibly stale, overlapping) ownerships
        everything = sorted((t, p) for t in TOPICS for p in range(counts[t]))
        claimed = {m: s._replace(owned_partitions=tuple(sorted(data.draw(st.sets(st.sampled_from(everything))))
                                                        if everything else ()))
                   for m, s in subscriptions.items()}
        # rounds, each member owning what the last gave it (having revoked the rest), until nothing moves
        for _ in range(5):
            result = cooperative_sticky_assign(claimed, counts)
            flat = [tp for tps in result.values() for tp in tps]
            self.assertEqual(len(flat), len(set(flat)))
            for member, tps in result.items():
                for tp in tps:
                    self.assertIn(tp[0], claimed[member].topics)
                    for other, s in claimed.items():
                        if other != member:
                            self.assertNotIn(tp, s.owned_partitions)
            if all(set(tps) == set(claimed[m].owned_partitions) for m, tps in result.items()):
                break
            claimed = owning(subscriptions, result)
        self.check_complete(subscriptions, counts, result)
