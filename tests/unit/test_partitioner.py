"""Tests for L{kafkatw.client.partitioner}: Kafka's murmur2 key partitioner."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.mark.parametrize("data,expected", VECTORS)
def test_kafka_vectors(data, expected):
    assert murmur2(data) == expected


def test_empty_key():
    kp = pytest.importorskip("kafka.partitioner.default")
    assert murmur2(b"") & 0xFFFFFFFF == kp.murmur2(b"")


@given(st.binary(max_size=200))
def test_matches_kafka_python(data):
    kp = pytest.importorskip("kafka.partitioner.default")
    # kafka-python returns the unsigned 32-bit value
    assert murmur2(data) & 0xFFFFFFFF == kp.murmur2(data)


@given(st.binary(max_size=64), st.integers(1, 1000))
def test_partition_in_range_and_like_kafka_python(key, n):
    kp = pytest.importorskip("kafka.partitioner.default")
    p = partition_for_key(key, n)
    assert 0 <= p < n
    assert p == (kp.murmur2(key) & 0x7FFFFFFF) % n


def test_to_positive_is_not_abs():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5
