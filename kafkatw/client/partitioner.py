"""
The Java client's default key partitioner: murmur2 of the key bytes.

A keyed record goes to C{toPositive(murmur2(key)) % numPartitions}, exactly as
Apache Kafka's C{BuiltInPartitioner.partitionForKey} (C{Utils.murmur2},
C{Utils.toPositive}), so keys land on the same partitions whichever client
produced them.
"""

from __future__ import annotations

__all__ = ["murmur2", "to_positive", "partition_for_key"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """
    Kafka's C{Utils.murmur2}: 32-bit MurmurHash2 with seed 0x9747b28c.

    @return: the hash as a signed 32-bit int, as Java returns it.
    """
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    m = _M
    mask = _MASK
    length4 = length & ~3
    for i in range(0, length4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[length4 + 2] << 16
    if extra >= 2:
        h ^= data[length4 + 1] << 8
    if extra >= 1:
        h ^= data[length4]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's C{Utils.toPositive}: clear the sign bit (not abs)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for C{key}."""
    return to_positive(murmur2(key)) % num_partitions
