"""
Fetch response encoding that leaves the records where they are.

kio encodes a response into one byte string; a Fetch response would then hold a
copy of every record batch it returns.  Here the response is encoded as a list of
chunks — C{bytes} for everything Kafka puts around the records, and opaque
region objects (a segment file, a position, a length) for the records
themselves — so the broker can send the batches from the page cache
(docs/design.md: Batches, never records).

FetchResponse v4–v12 (Kafka protocol guide)::

    correlation_id int32, [tagged fields: v12]
    throttle_time_ms int32
    error_code int16, session_id int32                       (v7+)
    responses [
      topic string                                          (compact in v12)
      partitions [
        partition_index int32, error_code int16, high_watermark int64,
        last_stable_offset int64, log_start_offset int64 (v5+),
        aborted_transactions [producer_id int64, first_offset int64] (nullable),
        preferred_read_replica int32                        (v11+)
        records  nullable bytes: int32 length, or uvarint length+1 in v12
        [tagged fields: v12]
      ] [tagged fields: v12]
    ] [tagged fields: v12]
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple, Sequence

from .messages import encode_uvarint

__all__ = ["FETCH_MIN_VERSION", "FETCH_MAX_VERSION", "PartitionFetchData", "encode_fetch_response"]

FETCH_MIN_VERSION = 4
FETCH_MAX_VERSION = 12

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, LSO, log start
_PARTITION_V4 = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")  # producer id, first offset


class PartitionFetchData(NamedTuple):
    """
    One partition of a Fetch response.

    @ivar regions: record data as a sequence of chunks (region objects with a
        C{length} attribute, or C{bytes}); empty for no records.
    @ivar records_bytes: the total length of C{regions} in bytes.
    @ivar aborted_transactions: C{(producer_id, first_offset)} pairs for a
        read-committed fetch, C{None} (a null array) otherwise.
    """

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    regions: Sequence[Any]
    records_bytes: int
    aborted_transactions: Sequence[tuple[int, int]] | None = None


def _string(value: str, flexible: bool) -> bytes:
    data = value.encode("utf-8")
    if flexible:
        return encode_uvarint(len(data) + 1) + data
    return _I16.pack(len(data)) + data


def _array_length(count: int, flexible: bool) -> bytes:
    return encode_uvarint(count + 1) if flexible else _I32.pack(count)


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str, Sequence[PartitionFetchData]]],
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> tuple[list[Any], int]:
    """
    Encode a FetchResponse of C{version} (4–12).

    @return: (chunks, total length in bytes); the chunks are C{bytes} and the
        region objects of the partitions, in wire order, without the 4-byte size
        prefix of the frame.
    """
    flexible = version >= 12
    head = bytearray(_I32.pack(correlation_id))
    if flexible:
        head += b"\x00"
    head += _I32.pack(throttle_time_ms)
    if version >= 7:
        head += _I16.pack(error_code) + _I32.pack(session_id)
    head += _array_length(len(topics), flexible)
    chunks: list[Any] = []
    total = 0
    pending = head
    no_aborted = encode_uvarint(1) if flexible else _I32.pack(-1)
    for name, partitions in topics:
        pending += _string(name, flexible)
        pending += _array_length(len(partitions), flexible)
        for p in partitions:
            if version >= 5:
                pending += _PARTITION.pack(
                    p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset
                )
            else:
                pending += _PARTITION_V4.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                pending += no_aborted
            else:
                pending += _array_length(len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    pending += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        pending += b"\x00"
            if version >= 11:
                pending += _I32.pack(-1)
            size = p.records_bytes
            if flexible:
                pending += encode_uvarint(size + 1)
            else:
                pending += _I32.pack(size)
            if size:
                chunks.append(bytes(pending))
                total += len(pending)
                pending = bytearray()
                for region in p.regions:
                    chunks.append(region)
                total += size
            if flexible:
                pending += b"\x00"
        if flexible:
            pending += b"\x00"
    if flexible:
        pending += b"\x00"
    if pending:
        chunks.append(bytes(pending))
        total += len(pending)
    return chunks, total
