"""
ShareFetch response encoding that leaves the records where they are, as
L{kafkatw.protocol.fetch} does for Fetch: C{bytes} around the records, the
records as the log's file regions.

ShareFetchResponse v1–v2 (flexible; Kafka protocol guide, KIP-932)::

    correlation_id int32, [tagged fields]
    throttle_time_ms int32, error_code int16, error_message compact nullable string,
    acquisition_lock_timeout_ms int32
    responses [
      topic_id uuid
      partitions [
        partition_index int32, error_code int16, error_message compact nullable string,
        acknowledge_error_code int16, acknowledge_error_message compact nullable string,
        current_leader {leader_id int32, leader_epoch int32, [tagged fields]}
        records compact nullable bytes (uvarint length + 1)
        acquired_records [first_offset int64, last_offset int64, delivery_count int16, [tagged fields]]
        [tagged fields]
      ] [tagged fields]
    ]
    node_endpoints [node_id int32, host compact string, port int32, rack compact nullable string, [tagged fields]]
    [tagged fields]
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple, Sequence

from .messages import encode_array_length, encode_nullable_string, encode_string, encode_uvarint

__all__ = ["SharePartitionData", "encode_share_fetch_response"]

_HEAD = struct.Struct(">ih")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_LEADER = struct.Struct(">iib")  # leader id, leader epoch, no tagged fields
_ACQUIRED = struct.Struct(">qqhb")  # first, last, delivery count, no tagged fields


class SharePartitionData(NamedTuple):
    """One partition of a ShareFetch response; C{regions} are file regions (C{length} bytes each)."""

    partition_index: int
    error_code: int
    error_message: str | None
    acknowledge_error_code: int
    acknowledge_error_message: str | None
    leader_id: int
    leader_epoch: int
    regions: Sequence[Any]
    acquired_records: Sequence[tuple[int, int, int]]

    @property
    def records_bytes(self) -> int:
        return sum(r.length for r in self.regions)


def encode_share_fetch_response(
    correlation_id: int,
    topics: Sequence[tuple[uuid.UUID, Sequence[SharePartitionData]]],
    acquisition_lock_timeout_ms: int,
    error_code: int = 0,
    error_message: str | None = None,
    node_endpoints: Sequence[tuple[int, str, int, str | None]] = (),
    throttle_time_ms: int = 0,
) -> tuple[list[Any], int]:
    """
    Encode a ShareFetchResponse (v1 and v2 are the same on the wire).

    @return: (chunks, total length in bytes) without the frame's size prefix:
        C{bytes} and the partitions' regions in wire order.
    """
    pending = bytearray(_I32.pack(correlation_id))
    pending += b"\x00"
    pending += _I32.pack(throttle_time_ms) + _I16.pack(error_code)
    pending += encode_nullable_string(error_message, True)
    pending += _I32.pack(acquisition_lock_timeout_ms)
    pending += encode_array_length(len(topics), True)
    chunks: list[Any] = []
    total = 0
    for topic_id, partitions in topics:
        pending += topic_id.bytes
        pending += encode_array_length(len(partitions), True)
        for p in partitions:
            pending += _HEAD.pack(p.partition_index, p.error_code)
            pending += encode_nullable_string(p.error_message, True)
            pending += _I16.pack(p.acknowledge_error_code)
            pending += encode_nullable_string(p.acknowledge_error_message, True)
            pending += _LEADER.pack(p.leader_id, p.leader_epoch, 0)
            size = p.records_bytes
            pending += encode_uvarint(size + 1)
            if size:
                chunks.append(bytes(pending))
                total += len(pending)
                pending = bytearray()
                chunks.extend(p.regions)
                total += size
            pending += encode_array_length(len(p.acquired_records), True)
            for first, last, count in p.acquired_records:
                pending += _ACQUIRED.pack(first, last, count, 0)
            pending += b"\x00"
        pending += b"\x00"
    pending += encode_array_length(len(node_endpoints), True)
    for node_id, host, port, rack in node_endpoints:
        pending += _I32.pack(node_id) + encode_string(host, True) + _I32.pack(port)
        pending += encode_nullable_string(rack, True) + b"\x00"
    pending += b"\x00"
    chunks.append(bytes(pending))
    total += len(pending)
    return chunks, total
