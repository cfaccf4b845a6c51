"""
The consumer protocol's bytes: what members of a C{consumer} group put in
JoinGroup's protocol metadata and SyncGroup's assignments (Kafka's
C{ConsumerProtocolSubscription} and C{ConsumerProtocolAssignment}; a
subscription is encoded as version 0, or version 1 when it carries owned
partitions; assignments as version 0; both decoded in any version)::

    subscription v0: int16 version, [string topic], bytes user_data
                 v1: ... then owned_partitions [string topic, [int32 partition]]  (KIP-429)
                 v2: ... then int32 generation_id                                 (KIP-792)
                 v3: ... then nullable string rack_id                             (KIP-881)
    assignment:      int16 version, [string topic, [int32 partition]], bytes user_data

The topics come first in every version, so a decoder reads them and ignores
the rest (L{decode_subscription}); L{decode_member_subscription} reads every
field it knows.  Strings are int16-length-prefixed UTF-8; arrays int32-counted;
bytes int32-length-prefixed (-1: null).

The C{sticky} assignor of the eager protocol keeps its previous assignment in
C{user_data} (Kafka's C{StickyAssignor} user data, version 1:
C{[string topic, [int32 partition]]} then C{int32 generation}):
L{encode_sticky_user_data} and L{decode_sticky_user_data}.

Source: the Kafka protocol guide; Kafka's C{ConsumerProtocol},
C{ConsumerProtocolSubscription.json} and C{ConsumerProtocolAssignment.json}.
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple

__all__ = ["encode_subscription", "decode_subscription", "encode_assignment", "decode_assignment",
           "MemberSubscription", "decode_member_subscription", "encode_sticky_user_data",
           "decode_sticky_user_data"]

TopicPartition = tuple[str, int]


class MemberSubscription(NamedTuple):
    """
    One member's C{ConsumerProtocolSubscription}, every version's fields.

    @ivar topics: the subscribed topics, sorted.
    @ivar user_data: the assignor's bytes (C{None}: null).
    @ivar owned_partitions: v1+: the partitions the member owns now (KIP-429), sorted.
    @ivar generation_id: v2+: the generation those were assigned in (-1: unknown).
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, pos)
    pos += 2
    if length < 0 or pos + length > len(data):
        raise ValueError("a topic name past the end")
    return bytes(data[pos:pos + length]).decode("utf-8"), pos + length


def _bytes(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def _partitions(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts = [struct.pack(">i", len(by_topic))]
    for topic, ps in by_topic.items():
        parts.append(_string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    return b"".join(parts)


def _read_partitions(data: bytes, pos: int) -> tuple[list[TopicPartition], int]:
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    result = []
    for _ in range(max(count, 0)):
        topic, pos = _read_string(data, pos)
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        partitions = struct.unpack_from(f">{max(n, 0)}i", data, pos)
        pos += 4 * max(n, 0)
        result.extend((topic, p) for p in partitions)
    return result, pos


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None,
                        owned_partitions: Iterable[TopicPartition] | None = None) -> bytes:
    """
    A C{ConsumerProtocolSubscription} of C{topics}, sorted and unique:
    version 0, or version 1 when C{owned_partitions} is given (even empty: a
    cooperative member always tells what it owns).
    """
    names = sorted(set(topics))
    head = struct.pack(">hi", 0 if owned_partitions is None else 1, len(names))
    body = head + b"".join(_string(t) for t in names) + _bytes(user_data)
    if owned_partitions is not None:
        body += _partitions(owned_partitions)
    return body


def decode_member_subscription(data: bytes) -> MemberSubscription | None:
    """
    Every field of a C{ConsumerProtocolSubscription} of any version (later
    versions' unknown tail ignored).

    @return: a L{MemberSubscription}, or C{None} when C{data} does not parse.
    """
    try:
        (version, count) = struct.unpack_from(">hi", data, 0)
        pos = 6
        topics = []
        for _ in range(max(count, 0)):
            topic, pos = _read_string(data, pos)
            topics.append(topic)
        user_data = None
        owned: list[TopicPartition] = []
        generation = -1
        if pos < len(data):
            (length,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if length >= 0:
                if pos + length > len(data):
                    raise ValueError("user data past the end")
                user_data = bytes(data[pos:pos + length])
                pos += length
        if version >= 1 and pos < len(data):
            owned, pos = _read_partitions(data, pos)
        if version >= 2 and pos + 4 <= len(data):
            (generation,) = struct.unpack_from(">i", data, pos)
        return MemberSubscription(tuple(sorted(set(topics))), user_data, tuple(sorted(set(owned))), generation)
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """Kafka's C{StickyAssignor} user data v1: the member's previous assignment and its generation."""
    return _partitions(partitions) + struct.pack(">i", generation)


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int]:
    """
    Inverse of L{encode_sticky_user_data}; a v0 user data (no generation)
    gives generation -1.

    @return: C{(partitions, generation)}; C{([], -1)} when C{data} is null or does not parse.
    """
    if not data:
        return [], -1
    try:
        partitions, pos = _read_partitions(data, 0)
        generation = struct.unpack_from(">i", data, pos)[0] if pos + 4 <= len(data) else -1
        return partitions, generation
    except (struct.error, UnicodeDecodeError, ValueError):
        return [], -1


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
    return struct.pack(">h", 0) + _partitions(partitions) + _bytes(None)


def decode_assignment(data: bytes) -> list[TopicPartition] | None:
    """
    The partitions of a C{ConsumerProtocolAssignment} of any version, in
    their order on the wire.

    @return: (topic, partition) pairs, or C{None} when C{data} does not parse.
    """
    try:
        return _read_partitions(data, 2)[0]
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
