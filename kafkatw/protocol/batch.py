"""
RecordBatch v2 (magic 2) header handling, sans-IO.

The broker moves batches, never records (docs/design.md: On disk as on the wire; Batches, never records): on produce it reads
only each batch's 61-byte header, checks the CRC-32C, and patches the base
offset and partition leader epoch, which lie outside the CRC.  Layout, all
integers big-endian (Kafka protocol guide, "Record Batch")::

    offset  size  field
    ------  ----  ----------------------------------------------------------
         0     8  baseOffset            int64   patched by the broker
         8     4  batchLength           int32   bytes after this field
        12     4  partitionLeaderEpoch  int32   patched by the broker
        16     1  magic                 int8    always 2
        17     4  crc                   uint32  CRC-32C of bytes 21 .. end
        21     2  attributes            int16   bits 0-2 compression,
                                                bit 3 timestamp type (1 = LogAppendTime),
                                                bit 4 transactional, bit 5 control
        23     4  lastOffsetDelta       int32
        27     8  baseTimestamp         int64   ms
        35     8  maxTimestamp          int64   ms
        43     8  producerId            int64   -1: none
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordCount           int32
        61     .  records ...                   (possibly compressed)

    |<- LOG_OVERHEAD (12) ->|<------------- batchLength ------------->|
    [baseOffset][batchLength][epoch][magic][crc][attributes ... records]
                                                ^-- CRC covers from here

A batch occupies C{12 + batchLength} bytes, both on the wire and on disk.

LogAppendTime and a topic's own C{compression.type} change C{attributes},
C{maxTimestamp} or the records region, which are inside the CRC: such batches
are rebuilt with a new CRC by L{kafkatw.protocol.records.rewrite_batches}, off
the no-copy path, and only for those topics (see L{kafkatw.storage.log}).

L{build_batch} is a small, correct, uncompressed batch builder for tests;
the fast full codec belongs in C{protocol/records.py}.
"""

from __future__ import annotations

import struct
import time
from typing import NamedTuple, Sequence

from crc32c import crc32c

from kafkatw.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from kafkatw.protocol.records import encode_varint

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "parse_batch_headers",
    "scan_valid_prefix",
    "patch_batch",
    "build_batch",
    "HEADER_STRUCT",
]

#: Bytes of a RecordBatch v2 header, records excluded.
BATCH_HEADER_SIZE = 61
#: baseOffset (8) + batchLength (4): the bytes not counted by batchLength.
LOG_OVERHEAD = 12
#: Smallest legal batchLength: a header without records.
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
#: Offset of the first byte covered by the CRC.
CRC_START = 21

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert HEADER_STRUCT.size == BATCH_HEADER_SIZE

_unpack_header = HEADER_STRUCT.unpack_from
_tuple_new = tuple.__new__
_pack_q = struct.Struct(">q").pack_into
_pack_i = struct.Struct(">i").pack_into


class BatchHeader(NamedTuple):
    """
    The header of one record batch.

    @ivar position: byte position of the batch within the buffer (or file) it
        was parsed from.
    @ivar size: total bytes of the batch including the 12-byte log overhead.
    """

    position: int
    size: int
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def compression(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & 7

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return (self.attributes >> 3) & 1

    @property
    def end_position(self) -> int:
        return self.position + self.size


def unpack_header(data: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """
    Unpack the 61-byte header at C{position} without any validation.

    @raise struct.error: fewer than 61 bytes available.
    """
    f = _unpack_header(data, position)
    return BatchHeader(position, f[1] + LOG_OVERHEAD, f[0], *f[2:])


def parse_batch_headers(
    data: bytes | bytearray | memoryview,
    verify_crc: bool = True,
    max_batch_bytes: int | None = None,
    allow_partial_tail: bool = False,
    allow_compacted: bool = False,
) -> list[BatchHeader]:
    """
    Parse the headers of the consecutive record batches making up C{data}, as
    sent in a Produce request.  One C{struct.unpack_from} per batch; records
    are never looked at (the CRC is computed by C{crc32c} in C).

    Validation follows Kafka's C{LogValidator}: a batch must be magic 2, whole,
    and its CRC must match; its count must be positive and agree with
    C{lastOffsetDelta}.

    @param max_batch_bytes: largest allowed batch size, log overhead included
        (Kafka's C{max.message.bytes}); C{None}: no limit.
    @param allow_partial_tail: stop, instead of raising, at a last batch that
        is cut short (its header or body runs past the end of C{data}), and
        accept empty input: a Fetch response may end in the middle of a batch
        (the protocol guide, "Fetch API"), and a follower ignores that tail.
    @param allow_compacted: accept batches the log cleaner rewrote, whose
        C{recordCount} is below C{lastOffsetDelta + 1} (records removed, the
        last offset kept), down to 0 (an empty batch kept for a producer's
        last sequence); a follower fetching a compacted log gets them.
    @return: one L{BatchHeader} per batch, in order; never empty unless
        C{allow_partial_tail}.
    @raise CorruptRecordError: empty input, truncated header or body,
        C{batchLength < 49}, magic other than 2, CRC mismatch.
    @raise RecordTooLargeError: a batch bigger than C{max_batch_bytes}.
    @raise InvalidRecordError: C{recordCount <= 0}, C{lastOffsetDelta < 0},
        or C{recordCount != lastOffsetDelta + 1}.
    """
    view = data if isinstance(data, memoryview) else memoryview(data)
    total = len(view)
    if total >= BATCH_HEADER_SIZE and not allow_compacted:
        # One whole, valid batch (a Produce request's usual partition data): the checks of the loop
        # below in one go; anything else takes the loop, which says what is wrong.
        f = _unpack_header(view, 0)
        last_delta, count = f[6], f[12]
        if (f[1] + LOG_OVERHEAD == total and f[3] == 2 and f[1] >= MIN_BATCH_LENGTH
                and (max_batch_bytes is None or total <= max_batch_bytes)
                and count > 0 and count == last_delta + 1
                and (not verify_crc or crc32c(view[CRC_START:]) == f[4])):
            return [_tuple_new(BatchHeader, (0, total, f[0], *f[2:]))]
    return _parse_batches(view, verify_crc, max_batch_bytes, allow_partial_tail, allow_compacted)


def _parse_batches(view: memoryview, verify_crc: bool, max_batch_bytes: int | None, allow_partial_tail: bool,
                   allow_compacted: bool) -> list[BatchHeader]:
    """L{parse_batch_headers}, batch by batch (the reference its one-batch fast path is tested against)."""
    total = len(view)
    if total == 0 and not allow_partial_tail:
        raise CorruptRecordError("no record batch in the records")
    headers: list[BatchHeader] = []
    append = headers.append
    pos = 0
    while pos < total:
        if total - pos < BATCH_HEADER_SIZE:
            if allow_partial_tail:
                break
            raise CorruptRecordError(f"truncated record batch header at byte {pos}")
        (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         producer_id, producer_epoch, base_sequence, count) = _unpack_header(view, pos)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch length {length} at byte {pos} is below {MIN_BATCH_LENGTH}")
        size = length + LOG_OVERHEAD
        end = pos + size
        if magic != 2:
            raise CorruptRecordError(f"record batch at byte {pos} has magic {magic}, only 2 is supported")
        if end > total:
            if allow_partial_tail:
                break
            raise CorruptRecordError(f"truncated record batch at byte {pos}: {size} bytes declared, {total - pos} present")
        if max_batch_bytes is not None and size > max_batch_bytes:
            raise RecordTooLargeError(f"record batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}")
        if verify_crc and crc32c(view[pos + CRC_START:end]) != crc:
            raise CorruptRecordError(f"record batch at byte {pos} fails its CRC-32C check")
        if last_delta < 0 or (count > last_delta + 1 or count < 0 if allow_compacted
                               else count <= 0 or count != last_delta + 1):
            raise InvalidRecordError(
                f"record batch at byte {pos}: record count {count} inconsistent with last offset delta {last_delta}")
        append(BatchHeader(pos, size, base_offset, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
                           producer_id, producer_epoch, base_sequence, count))
        pos = end
    return headers


def scan_valid_prefix(
    buf: bytes | bytearray | memoryview, start: int = 0, verify_crc: bool = True
) -> tuple[list[BatchHeader], int]:
    """
    Walk batches from C{start} and stop at the first invalid one, for log
    recovery (the paper's rule: truncate at the first batch failing its CRC).
    A batch is invalid when it is short (torn write), its length is below 49,
    its magic is not 2, its CRC does not match, or its offsets are inconsistent
    (C{lastOffsetDelta < 0}).  Never raises.

    @return: C{(headers, valid_end)}: the valid batches (positions within
        C{buf}) and the position just after the last valid one.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    total = len(view)
    headers: list[BatchHeader] = []
    append = headers.append
    pos = start
    while total - pos >= BATCH_HEADER_SIZE:
        (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         producer_id, producer_epoch, base_sequence, count) = _unpack_header(view, pos)
        if length < MIN_BATCH_LENGTH or magic != 2 or last_delta < 0:
            break
        end = pos + length + LOG_OVERHEAD
        if end > total:
            break
        if verify_crc and crc32c(view[pos + CRC_START:end]) != crc:
            break
        append(BatchHeader(pos, end - pos, base_offset, epoch, magic, crc, attributes, last_delta, base_ts,
                           max_ts, producer_id, producer_epoch, base_sequence, count))
        pos = end
    return headers, pos


def patch_batch(buf: bytearray | memoryview, position: int, base_offset: int, partition_leader_epoch: int) -> None:
    """
    Write the base offset (bytes 0-7) and partition leader epoch (bytes 12-15)
    of the batch at C{position} in place.  Both are outside the CRC, so the
    batch stays valid.
    """
    _pack_q(buf, position, base_offset)
    _pack_i(buf, position + 12, partition_leader_epoch)


# -- test helper: a minimal, correct, uncompressed batch builder -------------

def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int | None = None,
    attributes: int = 0,
    partition_leader_epoch: int = -1,
    timestamps_ms: Sequence[int] | None = None,
) -> bytes:
    """
    Build one valid, uncompressed RecordBatch v2 (Kafka protocol guide,
    "Record Batch" and "Record"): each record is
    C{length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value, headerCount varint (0)},
    varints zigzag-encoded; a null key or value has length -1.

    For tests; the fast codec is C{protocol/records.py}.

    @param records: C{(key, value)} pairs; at least one.
    @param timestamp_ms: every record's timestamp (ms); default now.
    @param timestamps_ms: per-record timestamps (ms), overriding C{timestamp_ms}.
    @param attributes: batch attributes; compression bits must be 0.
    """
    if not records:
        raise ValueError("a record batch holds at least one record")
    if attributes & 7:
        raise ValueError("build_batch builds uncompressed batches only")
    if timestamps_ms is None:
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        timestamps_ms = [ts] * len(records)
    base_ts = timestamps_ms[0]
    body = bytearray()
    rec = bytearray()
    for delta, ((key, value), ts) in enumerate(zip(records, timestamps_ms)):
        rec.clear()
        rec.append(0)  # record attributes
        rec += encode_varint(ts - base_ts)
        rec += encode_varint(delta)
        if key is None:
            rec += encode_varint(-1)
        else:
            rec += encode_varint(len(key))
            rec += key
        if value is None:
            rec += encode_varint(-1)
        else:
            rec += encode_varint(len(value))
            rec += value
        rec += encode_varint(0)  # headers
        body += encode_varint(len(rec))
        body += rec
    buf = bytearray(BATCH_HEADER_SIZE) + body
    HEADER_STRUCT.pack_into(
        buf, 0, base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
        len(records) - 1, base_ts, max(timestamps_ms), producer_id, producer_epoch, base_sequence, len(records))
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)
