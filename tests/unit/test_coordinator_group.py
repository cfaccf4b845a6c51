"""
The consumer-protocol bytes (L{kafkatw.protocol.consumer_protocol}) and the
range assignment of L{kafkatw.cli.coordinator_group} (the broker-coordinated
console consumer).
"""

from __future__ import annotations

import struct
import unittest

from kafkatw.cli.coordinator_group import range_assign
from kafkatw.protocol.consumer_protocol import decode_assignment, decode_subscription, encode_assignment, \
    encode_subscription


class ConsumerProtocolTests(unittest.TestCase):
    def test_subscription_round_trip(self):
        data = encode_subscription(["b", "a", "a"])
        self.assertEqual(data[:2], b"\x00\x00")  # version 0
        self.assertEqual(data[-4:], struct.pack(">i", -1))  # null user data
        self.assertEqual(decode_subscription(data), ["a", "b"])

    def test_subscription_of_a_later_version(self):
        # v1 adds owned partitions after the user data: the topics still come first
        data = struct.pack(">hi", 1, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", -1) + struct.pack(">i", 0)
        self.assertEqual(decode_subscription(data), ["t"])

    def test_unreadable_subscription(self):
        self.assertIsNone(decode_subscription(b"\x00"))
        self.assertIsNone(decode_subscription(struct.pack(">hih", 0, 1, 50) + b"short"))
        self.assertIsNone(decode_subscription(struct.pack(">hih", 0, 1, -2) + b"ab"))

    def test_assignment_round_trip(self):
        tps = [("t", 2), ("a", 0), ("t", 0)]
        self.assertEqual(decode_assignment(encode_assignment(tps)), [("a", 0), ("t", 0), ("t", 2)])
        self.assertEqual(decode_assignment(encode_assignment([])), [])

    def test_unreadable_assignment(self):
        self.assertIsNone(decode_assignment(b"\x00"))
        self.assertIsNone(decode_assignment(struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", 2) + b"\x00"))


class RangeAssignTests(unittest.TestCase):
    def test_kafka_range_example(self):
        # Kafka's RangeAssignor javadoc: C0, C1 on t0, t1 with 3 partitions each
        result = range_assign({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3})
        self.assertEqual(result, {"C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
                                  "C1": [("t0", 2), ("t1", 2)]})

    def test_per_topic_members(self):
        result = range_assign({"m1": ["a"], "m2": ["a", "b"], "m3": ["b"]}, {"a": 4, "b": 1})
        self.assertEqual(result, {"m1": [("a", 0), ("a", 1)], "m2": [("a", 2), ("a", 3), ("b", 0)], "m3": []})

    def test_unknown_topic_and_more_members_than_partitions(self):
        result = range_assign({"x": ["gone"], "y": ["t"], "z": ["t"]}, {"t": 1})
        self.assertEqual(result, {"x": [], "y": [("t", 0)], "z": []})


if __name__ == "__main__":
    unittest.main()
