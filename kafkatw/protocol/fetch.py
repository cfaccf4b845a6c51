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

from .messages import encode_array_length, encode_string, encode_uvarint

__all__ = ["FETCH_MIN_VERSION", "FETCH_MAX_VERSION", "FetchRequestBody", "PartitionFetchData", "encode_fetch_response"]

FETCH_MIN_VERSION = 4
FETCH_MAX_VERSION = 12

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, LSO, log start
_PARTITION_V4 = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")  # producer id, first offset
_REQUEST_HEAD = struct.Struct(">iiiib")  # replica id, max wait, min bytes, max bytes, isolation level
_SESSION = struct.Struct(">ii")  # session id, session epoch
_FETCH_PARTITION_V4 = struct.Struct(">iqi")  # partition, fetch offset, partition max bytes
_FETCH_PARTITION_V5 = struct.Struct(">iqqi")  # ... log start offset before the max bytes
_FETCH_PARTITION_V9 = struct.Struct(">iiqqi")  # partition, current leader epoch, fetch offset, log start, max
_FETCH_PARTITION_V12 = struct.Struct(">iiqiqi")  # ... last fetched epoch after the fetch offset


class FetchRequestBody(dict):
    """
    A FetchRequest body (v4–v12) as plain values — the field names of kio's
    C{FetchRequest}: C{replica_id}, C{max_wait} (ms), C{min_bytes},
    C{max_bytes}, C{isolation_level}, C{session_id}, C{session_epoch},
    C{topics} (C{topic}, C{partitions}: C{partition}, C{fetch_offset},
    C{partition_max_bytes}, C{current_leader_epoch}, C{last_fetched_epoch},
    C{log_start_offset}), C{forgotten_topics_data} (C{topic}, C{partitions})
    and C{rack_id} — that encodes itself (C{encode_body}, used by
    L{kafkatw.protocol.messages.encode_request}): a consumer sends one per
    round trip, and kio's schema walk cost more than the rest of the
    consumer's turn for a small fetch.  The bytes are kio's
    (tests/unit/test_fetch_request.py).
    """

    __slots__ = ()

    def encode_body(self, version: int, flexible: bool) -> bytes:
        """
        The body of FetchRequest C{version}.

        @raise ValueError: a version outside 4–12.
        """
        if not FETCH_MIN_VERSION <= version <= FETCH_MAX_VERSION:
            raise ValueError(f"kafkatw encodes Fetch v{FETCH_MIN_VERSION} to v{FETCH_MAX_VERSION}, not v{version}")
        get = self.get
        out = bytearray(_REQUEST_HEAD.pack(get("replica_id", -1), self["max_wait"], self["min_bytes"],
                                           get("max_bytes", 0x7FFFFFFF), get("isolation_level", 0)))
        if version >= 7:
            out += _SESSION.pack(get("session_id", 0), get("session_epoch", -1))
        topics = self["topics"]
        out += encode_array_length(len(topics), flexible)
        for topic in topics:
            out += encode_string(topic["topic"], flexible)
            partitions = topic["partitions"]
            out += encode_array_length(len(partitions), flexible)
            for p in partitions:
                pget = p.get
                if version >= 12:
                    out += _FETCH_PARTITION_V12.pack(p["partition"], pget("current_leader_epoch", -1), p["fetch_offset"],
                                                     pget("last_fetched_epoch", -1), pget("log_start_offset", -1),
                                                     p["partition_max_bytes"])
                    out += b"\x00"
                elif version >= 9:
                    out += _FETCH_PARTITION_V9.pack(p["partition"], pget("current_leader_epoch", -1), p["fetch_offset"],
                                                    pget("log_start_offset", -1), p["partition_max_bytes"])
                elif version >= 5:
                    out += _FETCH_PARTITION_V5.pack(p["partition"], p["fetch_offset"], pget("log_start_offset", -1),
                                                    p["partition_max_bytes"])
                else:
                    out += _FETCH_PARTITION_V4.pack(p["partition"], p["fetch_offset"], p["partition_max_bytes"])
            if flexible:
                out += b"\x00"
        if version >= 7:
            forgotten = get("forgotten_topics_data") or ()
            out += encode_array_length(len(forgotten), flexible)
            for topic in forgotten:
                out += encode_string(topic["topic"], flexible)
                indexes = topic.get("partitions") or ()
                out += encode_array_length(len(indexes), flexible)
                for index in indexes:
                    out += _I32.pack(index)
                if flexible:
                    out += b"\x00"
        if version >= 11:
            out += encode_string(get("rack_id") or "", flexible)
        if flexible:
            out += b"\x00"
        return bytes(out)


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
    head += encode_array_length(len(topics), flexible)
    chunks: list[Any] = []
    total = 0
    pending = head
    no_aborted = b"\x00" if flexible else _I32.pack(-1)  # a null array: compact length 0, else -1
    for name, partitions in topics:
        pending += encode_string(name, flexible)
        pending += encode_array_length(len(partitions), flexible)
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
                pending += encode_array_length(len(aborted), flexible)
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
