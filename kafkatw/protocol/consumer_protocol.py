"""
The consumer protocol's bytes: what members of a C{consumer} group put in
JoinGroup's protocol metadata and SyncGroup's assignments (Kafka's
C{ConsumerProtocolSubscription} and C{ConsumerProtocolAssignment}, encoded
here as version 0, decoded in any version)::

    subscription: int16 version, [string topic], bytes user_data  (v1+: owned partitions, ...)
    assignment:   int16 version, [string topic, [int32 partition]], bytes user_data

The topics come first in every version, so a decoder reads them and ignores
the rest.  Strings are int16-length-prefixed UTF-8; arrays int32-counted.

Source: the Kafka protocol guide; Kafka's C{ConsumerProtocol},
C{ConsumerProtocolSubscription.json} and C{ConsumerProtocolAssignment.json}.
"""

from __future__ import annotations

import struct
from typing import Iterable

__all__ = ["encode_subscription", "decode_subscription", "encode_assignment", "decode_assignment"]

TopicPartition = tuple[str, int]


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, pos)
    pos += 2
    if length < 0 or pos + length > len(data):
        raise ValueError("a topic name past the end")
    return bytes(data[pos:pos + length]).decode("utf-8"), pos + length


def encode_subscription(topics: Iterable[str]) -> bytes:
    """A version 0 C{ConsumerProtocolSubscription} of C{topics}, sorted and unique (no user data)."""
    names = sorted(set(topics))
    return struct.pack(">hi", 0, len(names)) + b"".join(_string(t) for t in names) + struct.pack(">i", -1)


def decode_subscription(data: bytes) -> list[str] | None:
    """
    The topics of a C{ConsumerProtocolSubscription} of any version, in their
    order on the wire.

    @return: the topic names, or C{None} when C{data} does not parse.
    """
    try:
        (count,) = struct.unpack_from(">i", data, 2)
        pos = 6
        topics = []
        for _ in range(max(count, 0)):
            topic, pos = _read_string(data, pos)
            topics.append(topic)
        return topics
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    """A version 0 C{ConsumerProtocolAssignment} of C{partitions} (no user data)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts = [struct.pack(">hi", 0, len(by_topic))]
    for topic, ps in by_topic.items():
        parts.append(_string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    parts.append(struct.pack(">i", -1))
    return b"".join(parts)


def decode_assignment(data: bytes) -> list[TopicPartition] | None:
    """
    The partitions of a C{ConsumerProtocolAssignment} of any version, in
    their order on the wire.

    @return: (topic, partition) pairs, or C{None} when C{data} does not parse.
    """
    try:
        (count,) = struct.unpack_from(">i", data, 2)
        pos = 6
        result = []
        for _ in range(max(count, 0)):
            topic, pos = _read_string(data, pos)
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            partitions = struct.unpack_from(f">{max(n, 0)}i", data, pos)
            pos += 4 * max(n, 0)
            result.extend((topic, p) for p in partitions)
        return result
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
