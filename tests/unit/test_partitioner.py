"""Tests for L{kafkatw.client.partitioner}: Kafka's murmur2 key partitioner."""

from __future__ import annotations

from types import ModuleType
from unittest import SkipTest

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.partitioner import murmur2, partition_for_key, to_positive

# Apache Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2
VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


def kafka_python_partitioner() -> ModuleType:
    """
    kafka-python's partitioner module (its murmur2 is the unsigned 32-bit value).

    @raise SkipTest: kafka-python (a test extra) is not installed.
    """
    try:
        from kafka.partitioner import default
    except ImportError as e:
        raise SkipTest(f"kafka-python is not installed ({e})")
    return default


class Murmur2Tests(SynchronousTestCase):
    """L{murmur2} and L{partition_for_key} give what Kafka's Java client and kafka-python give."""

    def test_kafka_vectors(self) -> None:
        for data, expected in VECTORS:
            with self.subTest(data=data):
                self.assertEqual(murmur2(data), expected, data)

    def test_empty_key(self) -> None:
        kp = kafka_python_partitioner()
        self.assertEqual(murmur2(b"") & 0xFFFFFFFF, kp.murmur2(b""))

    @given(st.binary(max_size=200))
    def test_matches_kafka_python(self, data: bytes) -> None:
        kp = kafka_python_partitioner()
        # kafka-python returns the unsigned 32-bit value
        self.assertEqual(murmur2(data) & 0xFFFFFFFF, kp.murmur2(data))

    @given(st.binary(max_size=64), st.integers(1, 1000))
    def test_partition_in_range_and_like_kafka_python(self, key: bytes, n: int) -> None:
        kp = kafka_python_partitioner()
        p = partition_for_key(key, n)
        self.assertTrue(0 <= p < n, p)
        self.assertEqual(p, (kp.murmur2(key) & 0x7FFFFFFF) % n)

    def test_to_positive_is_not_abs(self) -> None:
        self.assertEqual(to_positive(-1), 0x7FFFFFFF)
        self.assertEqual(to_positive(-(2**31)), 0)
        self.assertEqual(to_positive(5), 5)
