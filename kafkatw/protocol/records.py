"""
RecordBatch v2 (magic 2) codec: records in, bytes out, and back.  Sans-IO.

The batch header layout is drawn in L{kafkatw.protocol.batch}; this module adds
the records that follow it.  Each record is (Kafka protocol guide, "Record")::

    length            varint    bytes after this field
    attributes        int8      unused, 0
    timestampDelta    varlong   ms, relative to the batch's baseTimestamp
    offsetDelta       varint    relative to the batch's baseOffset
    keyLength         varint    -1: null key
    key               byte[]
    valueLength       varint    -1: null value
    value             byte[]
    headersCount      varint
    headers           [headerKeyLength varint, headerKey utf-8,
                       headerValueLength varint (-1: null), headerValue]

Varints are zig-zag encoded base-128, least significant group first, as in
protocol buffers.  When the batch is compressed (attributes bits 0-2), the
records region after C{recordCount} is one compressed stream:

    ====  ======  ==========================================================
    code  name    framing
    ====  ======  ==========================================================
    1     gzip    RFC 1952 gzip member
    2     snappy  a raw snappy block (librdkafka, Java's SnappyOutputStream
                  reads both); older Java clients write the xerial framing
                  C{b"\\x82SNAPPY\\x00"} + 8 version bytes, then 4-byte
                  big-endian length-prefixed raw blocks: accepted on decode
    3     lz4     the LZ4 frame format (KIP-57)
    4     zstd    a zstd frame (KIP-110)
    ====  ======  ==========================================================

Speed: encoding and decoding are one pass each over the records, with varints
read inline and small varints served from a precomputed table.  When the
optional compiled accelerator C{kafkatw.protocol._speedups} was built (at
install time, when a C compiler is there) the per-record loops of
L{encode_batch}, L{decode_batches} and L{decode_fetched} (and the latter's
batch loop), and the whole of L{encode_value_batch} without compression, run in
C, with the same results; L{SPEEDUPS} says whether it is in use, and C{KAFKATW_PURE_PYTHON=1}
in the environment makes this module ignore it.  The pure-Python versions stay
importable (L{encode_batch_py}, L{encode_value_batch_py}, L{decode_batches_py},
L{decode_fetched_py}): the tests check the two against each other
(docs/design.md, "Compiled accelerator").
"""

from __future__ import annotations

import os
import re
import struct
import time
from itertools import repeat
from operator import itemgetter
from typing import Iterable, Iterator, NamedTuple, Sequence

import cramjam
from crc32c import crc32c

from kafkatw.errors import CorruptRecordError, InvalidRecordError

__all__ = [
    "COMPRESSION_NONE",
    "COMPRESSION_GZIP",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD",
    "COMPRESSION_CODECS",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "Record",
    "DecodedBatch",
    "SPEEDUPS",
    "encode_batch",
    "encode_batch_py",
    "encode_value_batch",
    "encode_value_batch_py",
    "decode_batches",
    "decode_batches_py",
    "decode_fetched",
    "decode_fetched_py",
    "scan_next_offset",
    "encode_varint",
    "encode_uvarint",
    "decode_varint",
    "decode_uvarint",
    "compress",
    "decompress",
    "COMPRESSION_TYPE_CODECS",
    "rewrite_batches",
]

_speedups = None
if os.environ.get("KAFKATW_PURE_PYTHON", "") in ("", "0"):
    try:
        from kafkatw.protocol import _speedups
    except ImportError:  # not built (no C compiler at install time): the Python loops
        _speedups = None

#: Whether the compiled record loops (C{kafkatw.protocol._speedups}) are in use.
SPEEDUPS: bool = _speedups is not None

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

#: codec name (as in Kafka's C{compression.type}) -> attribute code
COMPRESSION_CODECS: dict[str, int] = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

_ATTR_COMPRESSION_MASK = 0x07
_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_PRE_CRC = struct.Struct(">qiibI")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId,
# producerEpoch, baseSequence, recordCount
_POST_CRC = struct.Struct(">hiqqqhii")
_HEADER = struct.Struct(">qiibIhiqqqhii")
_BATCH_PREFIX = struct.Struct(">qi")
_HEADER_SIZE = 61
_LOG_OVERHEAD = 12
_CRC_START = 21
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_UINT32 = struct.Struct(">I")


class Record(NamedTuple):
    """One decoded record; C{offset} is absolute, C{timestamp_ms} in ms since the epoch."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class DecodedBatch:
    """
    One decoded record batch: the header fields and its L{Record}s.

    Control batches (transaction markers) have C{is_control} set; consumers skip
    them.  C{size} is the number of bytes the batch occupied (12 + batchLength).
    """

    __slots__ = (
        "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
        "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
        "producer_id", "producer_epoch", "base_sequence", "record_count",
        "compression", "timestamp_type", "is_transactional", "is_control",
        "records", "size",
    )

    def __init__(self, header: tuple, records: list[Record]) -> None:
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic,
         self.crc, self.attributes, self.last_offset_delta, self.base_timestamp,
         self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
         self.record_count) = header
        attributes = self.attributes
        self.compression = attributes & _ATTR_COMPRESSION_MASK
        self.timestamp_type = 1 if attributes & _ATTR_TIMESTAMP_TYPE else 0
        self.is_transactional = bool(attributes & _ATTR_TRANSACTIONAL)
        self.is_control = bool(attributes & _ATTR_CONTROL)
        self.records = records
        self.size = _LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    def __repr__(self) -> str:
        return (f"DecodedBatch(base_offset={self.base_offset}, records={len(self.records)},"
                f" compression={self.compression}, is_control={self.is_control})")


# --- varints --------------------------------------------------------------------------


def encode_uvarint(value: int) -> bytes:
    """An unsigned varint (compact lengths and counts of flexible versions; zigzagged record fields)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_varint_slow(n: int) -> bytes:
    return encode_uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


_CACHE_SPAN = 1 << 14
# _SMALL[n + _CACHE_SPAN] is the zig-zag varint of n for -_CACHE_SPAN <= n < _CACHE_SPAN
_SMALL: list[bytes] = [_encode_varint_slow(n) for n in range(-_CACHE_SPAN, _CACHE_SPAN)]


def encode_varint(n: int) -> bytes:
    """
    The zig-zag varint of C{n} (signed, up to 64 bits), as Kafka's
    C{ByteUtils.writeVarlong}.
    """
    if -_CACHE_SPAN <= n < _CACHE_SPAN:
        return _SMALL[n + _CACHE_SPAN]
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(f"{n} does not fit a varlong")
    return _encode_varint_slow(n)


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """
    Read a zig-zag varint (up to 64 bits) at C{pos}.

    @return: (value, position after it)
    @raise CorruptRecordError: truncated or longer than 10 bytes.
    """
    value, pos = decode_uvarint(data, pos)
    return (value >> 1) ^ -(value & 1), pos


def decode_uvarint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """
    Read an unsigned varint (up to 64 bits) at C{pos}: the compact lengths,
    counts and tags of flexible versions (Kafka's
    C{ByteUtils.readUnsignedVarint}).  The one reader of the project, with
    L{decode_varint} for the signed ones; the hot loops of the record
    decoders inline theirs.

    @return: (value, position after it)
    @raise CorruptRecordError: truncated or longer than 10 bytes.
    """
    result = 0
    shift = 0
    try:
        while True:
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
            if shift > 63:
                raise CorruptRecordError("varint longer than 10 bytes")
    except IndexError:
        raise CorruptRecordError("truncated varint") from None


# --- compression ----------------------------------------------------------------------


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """
    Compress a records region with Kafka's framing for C{codec} (see module doc).

    @param level: the codec's compression level (KIP-390's
        C{compression.gzip.level}, C{lz4.level}, C{zstd.level}); C{None}: the
        library's default.  Snappy has none.
    """
    if codec == 0:
        return data
    if codec == 1:
        return bytes(cramjam.gzip.compress(data) if level is None else cramjam.gzip.compress(data, level=level))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data) if level is None else cramjam.lz4.compress(data, level=level))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data) if level is None else cramjam.zstd.compress(data, level=level))
    raise ValueError(f"unknown compression codec {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if data[:8] == _XERIAL_MAGIC:
        # xerial snappy-java framing: magic(8) version(4) compatible(4), then blocks
        pos = 16
        end = len(data)
        chunks = []
        while pos + 4 <= end:
            (size,) = _UINT32.unpack_from(data, pos)
            pos += 4
            chunks.append(bytes(cramjam.snappy.decompress_raw(data[pos:pos + size])))
            pos += size
        return b"".join(chunks)
    return bytes(cramjam.snappy.decompress_raw(data))


def decompress(codec: int, data: bytes) -> bytes:
    """
    Decompress a records region.

    @raise CorruptRecordError: the data does not decompress.
    @raise InvalidRecordError: unknown codec.
    """
    try:
        if codec == 0:
            return data
        if codec == 1:
            return bytes(cramjam.gzip.decompress(data))
        if codec == 2:
            return _snappy_decompress(data)
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(data))
    except Exception as e:  # cramjam raises DecompressionError (and others)
        raise CorruptRecordError(f"cannot decompress records (codec {codec}): {e}") from e
    raise InvalidRecordError(f"unknown compression codec {codec}")


# --- broker-side rewriting -------------------------------------------------------------

#: Kafka's topic C{compression.type} -> codec (C{producer}: keep the producer's).
COMPRESSION_TYPE_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def rewrite_batches(data: bytes | bytearray | memoryview, headers: Sequence, codec: int | None,
                    log_append_time_ms: int | None, level: int | None = None) -> bytes:
    """
    The batches of C{data} as the broker writes them for a topic whose
    C{compression.type} is not C{producer} or whose C{message.timestamp.type}
    is C{LogAppendTime} (Kafka's C{LogValidator}).

    A batch whose codec differs from C{codec} has its records region
    decompressed and compressed again with C{codec} (0: left uncompressed);
    the records themselves are not parsed (the region is the same bytes
    under any codec).  Control batches keep their codec.  With
    C{log_append_time_ms}, every batch gets the LogAppendTime attribute bit
    and that time as its maxTimestamp, which Kafka's consumers give every
    record of the batch.  Every rewritten batch gets a new length and
    CRC-32C; producer id, epoch, sequence, base timestamp and offsets are
    kept.

    @param headers: the batches' L{kafkatw.protocol.batch.BatchHeader}s,
        validated (CRC checked) by the caller.
    @param codec: the target codec (L{COMPRESSION_TYPE_CODECS}), or C{None}
        to keep each batch's.
    @param level: the target codec's compression level (see L{compress}).
    @return: the rewritten batches, concatenated (a copy: these topics leave
        the no-copy append path).
    @raise CorruptRecordError: a records region does not decompress.
    """
    view = memoryview(data)
    out: list[bytes] = []
    for h in headers:
        attributes = h.attributes
        region: bytes | memoryview = view[h.position + _HEADER_SIZE:h.position + h.size]
        current = attributes & _ATTR_COMPRESSION_MASK
        if codec is not None and codec != current and not attributes & _ATTR_CONTROL:
            region = compress(codec, decompress(current, bytes(region)), level)
            attributes = (attributes & ~_ATTR_COMPRESSION_MASK) | codec
        max_timestamp = h.max_timestamp
        if log_append_time_ms is not None:
            attributes |= _ATTR_TIMESTAMP_TYPE
            max_timestamp = log_append_time_ms
        post = _POST_CRC.pack(attributes, h.last_offset_delta, h.base_timestamp, max_timestamp, h.producer_id,
                              h.producer_epoch, h.base_sequence, h.record_count) + bytes(region)
        out.append(_PRE_CRC.pack(h.base_offset, len(post) + 9, h.partition_leader_epoch, 2, crc32c(post)))
        out.append(post)
    return b"".join(out)


# --- encoding -------------------------------------------------------------------------


def encode_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Iterable[tuple[str, bytes | None]], int | None]],
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = 0,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """
    Encode one RecordBatch v2.

    @param records: C{(key, value, headers, timestamp_ms)} tuples; key and value
        are bytes or None, headers a list of C{(str, bytes | None)}, timestamp in
        ms since the epoch (None: now).  Offset deltas are the list positions.
    @param compression: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    @return: the batch, 12 + batchLength bytes, CRC-32C filled in (the same
        bytes with and without the compiled accelerator).
    @raise ValueError: no records, or an unknown codec.
    """
    return _encode_batch(_speedups, records, base_offset, compression, producer_id, producer_epoch, base_sequence,
                         timestamp_type, partition_leader_epoch, is_transactional, is_control)


def encode_batch_py(*args: object, **kwargs: object) -> bytes:
    """
    L{encode_batch} (same parameters, same bytes) with the pure-Python record
    loop, whether or not the compiled accelerator is there: the reference the
    tests compare it with.
    """
    return _encode_batch(None, *args, **kwargs)  # type: ignore[arg-type]


def _encode_batch(sp: object, records: Sequence, base_offset: int = 0, compression: int = 0, producer_id: int = -1,
                  producer_epoch: int = -1, base_sequence: int = -1, timestamp_type: int = 0,
                  partition_leader_epoch: int = -1, is_transactional: bool = False,
                  is_control: bool = False) -> bytes:
    """L{encode_batch} with the record loop of C{sp} (the accelerator module; C{None}: Python's)."""
    n = len(records)
    if n == 0:
        raise ValueError("a record batch holds at least one record")
    base_ts = records[0][3]
    if base_ts is None:
        base_ts = int(time.time() * 1000)
    encoded = sp.encode_records(records, base_ts) if sp is not None else NotImplemented  # type: ignore[attr-defined]
    if encoded is NotImplemented:  # input the C loop leaves to Python's (see _speedups.c)
        encoded = _encode_records(records, base_ts)
    body, max_ts = encoded
    if compression:
        body = compress(compression, body)
    attributes = compression & _ATTR_COMPRESSION_MASK
    if timestamp_type:
        attributes |= _ATTR_TIMESTAMP_TYPE
    if is_transactional:
        attributes |= _ATTR_TRANSACTIONAL
    if is_control:
        attributes |= _ATTR_CONTROL
    post = _POST_CRC.pack(attributes, n - 1, base_ts, max_ts, producer_id, producer_epoch,
                          base_sequence, n) + body
    return _PRE_CRC.pack(base_offset, len(post) + 9, partition_leader_epoch, 2, crc32c(post)) + post


def _encode_records(records: Sequence, base_ts: int) -> tuple[bytes, int]:
    """
    The records region of L{encode_batch} and its maxTimestamp, in Python.

    @param base_ts: the batch's baseTimestamp (the first record's, ms).
    """
    small = _SMALL
    span = _CACHE_SPAN
    enc = _encode_varint_slow
    parts: list[bytes] = []
    append = parts.append
    max_ts = base_ts
    offset_delta = 0
    for key, value, headers, ts in records:
        if ts is None:
            ts = base_ts
        elif ts > max_ts:
            max_ts = ts
        d = ts - base_ts
        ts_v = small[d + span] if -span <= d < span else enc(d)
        off_v = small[offset_delta + span] if offset_delta < span else enc(offset_delta)
        if key is None:
            key_v = b"\x01"
            key = b""
            size = 2
        else:
            k = len(key)
            key_v = small[k + span] if k < span else enc(k)
            size = 1 + k + len(key_v)
        if value is None:
            value_v = b"\x01"
            value = b""
            size += 1
        else:
            v = len(value)
            value_v = small[v + span] if v < span else enc(v)
            size += v + len(value_v)
        if headers:
            hparts = [small[len(headers) + span]]
            for hk, hv in headers:
                hkb = hk.encode("utf-8") if isinstance(hk, str) else hk
                hparts.append(encode_varint(len(hkb)))
                hparts.append(hkb)
                if hv is None:
                    hparts.append(b"\x01")
                else:
                    hparts.append(encode_varint(len(hv)))
                    hparts.append(hv)
            hbytes = b"".join(hparts)
        else:
            hbytes = b"\x00"
        size += len(ts_v) + len(off_v) + len(hbytes)
        append(small[size + span] if size < span else enc(size))
        append(b"\x00")
        append(ts_v)
        append(off_v)
        append(key_v)
        append(key)
        append(value_v)
        append(value)
        append(hbytes)
        offset_delta += 1
    return b"".join(parts), max_ts


# Record prefixes (length, attributes, timestampDelta 0, offsetDelta, null key,
# valueLength) by value length, then by offset delta; the first record's has no
# leading byte, the others start with the previous record's headersCount (0).
_VALUE_PREFIXES: dict[int, list[bytes]] = {}
_VALUE_PREFIXES_MAX_LENGTHS = 256
_VALUE_PREFIXES_MAX_RECORDS = 1 << 14


def _value_prefixes(length: int, n: int) -> list[bytes]:
    prefixes = _VALUE_PREFIXES.get(length)
    if prefixes is None:
        if len(_VALUE_PREFIXES) >= _VALUE_PREFIXES_MAX_LENGTHS:
            _VALUE_PREFIXES.clear()
        prefixes = _VALUE_PREFIXES[length] = []
    have = len(prefixes)
    if have < n:
        value_v = encode_varint(length)
        for i in range(have, n):
            off_v = encode_varint(i)
            size = 4 + len(off_v) + len(value_v) + length
            prefix = encode_varint(size) + b"\x00\x00" + off_v + b"\x01" + value_v
            prefixes.append(b"\x00" + prefix if i else prefix)
        if n > _VALUE_PREFIXES_MAX_RECORDS:
            # use them once, keep only the first ones
            result = prefixes[:n]
            del prefixes[_VALUE_PREFIXES_MAX_RECORDS:]
            return result
    return prefixes


def encode_value_batch(values: Sequence[bytes], timestamp_ms: int, compression: int = 0, producer_id: int = -1,
                       producer_epoch: int = -1, base_sequence: int = -1, is_transactional: bool = False) -> bytes:
    """
    Encode one RecordBatch v2 of records with a value, no key, no headers and
    one timestamp: the producer's common case, byte for byte what
    L{encode_batch} makes of C{[(None, v, None, timestamp_ms) for v in values]},
    without a Python loop per record when the values share a length, and in
    one pass in C (a list of values, no compression) when the compiled
    accelerator is there.

    @param values: the records' values (C{bytes}, not None).
    @param timestamp_ms: every record's create time (ms since the epoch).
    @param is_transactional: set the transactional attribute bit (KIP-98).
    @return: the batch, CRC-32C filled in.
    @raise ValueError: no values, or an unknown codec.
    """
    if _speedups is not None and not compression and values.__class__ is list:
        encoded = _speedups.encode_value_batch(values, timestamp_ms, _ATTR_TRANSACTIONAL if is_transactional else 0,
                                               producer_id, producer_epoch, base_sequence, crc32c)
        if encoded is not NotImplemented:
            return encoded
    return encode_value_batch_py(values, timestamp_ms, compression, producer_id, producer_epoch, base_sequence,
                                 is_transactional)


def encode_value_batch_py(values: Sequence[bytes], timestamp_ms: int, compression: int = 0, producer_id: int = -1,
                          producer_epoch: int = -1, base_sequence: int = -1, is_transactional: bool = False) -> bytes:
    """
    L{encode_value_batch} (same parameters, same bytes) in Python, whether
    or not the compiled accelerator is there: the reference the tests
    compare it with.
    """
    n = len(values)
    if n == 0:
        raise ValueError("a record batch holds at least one record")
    first = len(values[0])
    lengths = set(map(len, values))
    parts: list = [b""] * (2 * n)
    if len(lengths) == 1:
        prefixes = _value_prefixes(first, n)
        parts[0::2] = prefixes[:n] if len(prefixes) != n else prefixes
    else:
        by_length = {length: _value_prefixes(length, n) for length in lengths}
        parts[0::2] = [by_length[length][i] for i, length in enumerate(map(len, values))]
    parts[1::2] = values
    parts.append(b"\x00")
    body = b"".join(parts)
    if compression:
        body = compress(compression, body)
    attributes = compression & _ATTR_COMPRESSION_MASK
    if is_transactional:
        attributes |= _ATTR_TRANSACTIONAL
    post = _POST_CRC.pack(attributes, n - 1, timestamp_ms, timestamp_ms, producer_id,
                          producer_epoch, base_sequence, n) + body
    return _PRE_CRC.pack(0, len(post) + 9, -1, 2, crc32c(post)) + post


# --- decoding -------------------------------------------------------------------------


def decode_batches(data: bytes | bytearray | memoryview, verify_crc: bool = True) -> list[DecodedBatch]:
    """
    Decode every complete record batch in C{data}.

    A trailing partial batch (Fetch responses may end with one) is skipped.
    Records of LogAppendTime batches carry the batch's maxTimestamp, as in Kafka.

    @param verify_crc: check each batch's CRC-32C.
    @return: the batches in order, control batches included (flagged C{is_control}).
    @raise CorruptRecordError: a CRC mismatch, or records that do not parse.
    @raise InvalidRecordError: a batch whose magic is not 2.
    """
    return _decode_batches(_speedups, data, verify_crc)


def decode_batches_py(data: bytes | bytearray | memoryview, verify_crc: bool = True) -> list[DecodedBatch]:
    """L{decode_batches} with the pure-Python record loop (the reference for the compiled one)."""
    return _decode_batches(None, data, verify_crc)


def _decode_batches(sp: object, data: bytes | bytearray | memoryview, verify_crc: bool) -> list[DecodedBatch]:
    if not isinstance(data, bytes):
        data = bytes(data)
    view = memoryview(data)
    new = _tuple_new
    batches = []
    for pos, batch_end, header in _complete_batches(data):
        if verify_crc:
            _verify_crc(view, pos, batch_end, header, "")
        records: list = []
        if sp is not None:
            d, start, stop = _records_region(data, pos, batch_end, header)
            if sp.decode_records(d, start, stop, header, records, "", 0, Record, True):  # type: ignore[attr-defined]
                batches.append(DecodedBatch(header, records))
                continue
        flat: list = []
        _decode_batch(None, data, pos, batch_end, header, flat, "", 0, tuple)
        batches.append(DecodedBatch(header, [new(Record, (r[2], r[3], r[5], r[6], list(r[7]))) for r in flat]))
    return batches


_tuple_new = tuple.__new__


def _complete_batches(data: bytes) -> Iterator[tuple[int, int, tuple]]:
    """
    C{(position, end, header)} of each complete v2 batch in C{data}, in order;
    a trailing partial batch ends the walk.

    @raise CorruptRecordError: a batch length shorter than a batch header.
    @raise InvalidRecordError: a batch whose magic is not 2.
    """
    end = len(data)
    pos = 0
    unpack_prefix = _BATCH_PREFIX.unpack_from
    unpack_header = _HEADER.unpack_from
    while pos + _LOG_OVERHEAD <= end:
        base_offset, batch_length = unpack_prefix(data, pos)
        batch_end = pos + _LOG_OVERHEAD + batch_length
        if batch_end > end:
            return  # partial trailing batch
        if batch_length < _HEADER_SIZE - _LOG_OVERHEAD:
            raise CorruptRecordError(f"batch at offset {base_offset} has length {batch_length}")
        magic = data[pos + 16]
        if magic != 2:
            raise InvalidRecordError(f"batch at offset {base_offset} has magic {magic}; only v2 is supported")
        yield pos, batch_end, unpack_header(data, pos)
        pos = batch_end


def _verify_crc(view: memoryview, pos: int, batch_end: int, header: tuple, where: str) -> None:
    """@raise CorruptRecordError: the batch's CRC-32C does not match its bytes."""
    if crc32c(view[pos + _CRC_START:batch_end]) != header[4]:
        raise CorruptRecordError(f"CRC mismatch in batch at offset {header[0]}{where}")


def _records_region(data: bytes, pos: int, batch_end: int, header: tuple) -> tuple[bytes, int, int]:
    """The records of the batch at C{data[pos:batch_end]}, decompressed: C{(bytes, start, end)}."""
    codec = header[5] & _ATTR_COMPRESSION_MASK
    if codec:
        region = decompress(codec, data[pos + _HEADER_SIZE:batch_end])
        return region, 0, len(region)
    return data, pos + _HEADER_SIZE, batch_end


def _decode_batch(sp: object, data: bytes, pos: int, batch_end: int, header: tuple, out: list, topic: str,
                  partition: int, record_class: type) -> None:
    """
    Append the records of the batch at C{data[pos:batch_end]} to C{out}, decompressing first if needed,
    with the record loop of C{sp} (the accelerator module; C{None} or when it declines: Python's).
    """
    d, start, stop = _records_region(data, pos, batch_end, header)
    if sp is None or not sp.decode_records(d, start, stop, header, out, topic, partition,  # type: ignore[attr-defined]
                                           record_class):
        _decode_consumer_records(d, start, stop, header, out, topic, partition, record_class)


# --- decoding for consumers -----------------------------------------------------------


_EMPTY_HEADERS: tuple = ()


def scan_next_offset(data: bytes | memoryview, fetch_offset: int) -> int:
    """
    The offset after the last complete batch in C{data} (Fetch data of one
    partition), reading only batch headers: no CRC check, no decompression.

    @return: C{fetch_offset} when C{data} holds no complete batch.
    """
    return scan_fetched(data, fetch_offset)[0]


def scan_fetched(data: bytes | memoryview, fetch_offset: int) -> tuple[int, int]:
    """
    As L{scan_next_offset}, and the partition leader epoch of the last
    complete batch (what a KIP-320 consumer validates its position with).

    @return: C{(next_offset, last_epoch)}; C{(fetch_offset, -1)} when C{data}
        holds no complete batch.
    """
    end = len(data)
    pos = 0
    last_batch = -1
    next_offset = fetch_offset
    unpack_prefix = _BATCH_PREFIX.unpack_from
    unpack_int32 = _INT32.unpack_from
    while pos + _HEADER_SIZE <= end:
        base_offset, batch_length = unpack_prefix(data, pos)
        batch_end = pos + _LOG_OVERHEAD + batch_length
        if batch_end > end or batch_length < _HEADER_SIZE - _LOG_OVERHEAD:
            break
        last = base_offset + unpack_int32(data, pos + 23)[0]  # lastOffsetDelta
        if last >= next_offset:
            next_offset = last + 1
        last_batch = pos
        pos = batch_end
    epoch = unpack_int32(data, last_batch + 12)[0] if last_batch >= 0 else -1  # partitionLeaderEpoch
    return next_offset, epoch


_INT32 = struct.Struct(">i")


def decode_fetched(data: bytes | bytearray | memoryview, topic: str, partition: int, fetch_offset: int,
                   record_class: type, verify_crc: bool = True,
                   aborted: Sequence[tuple[int, int]] | None = None) -> tuple[list, int]:
    """
    Decode one partition's Fetch data for a consumer, in one pass.

    Records come out as tuples of C{record_class} (a C{NamedTuple} with the
    fields C{topic, partition, offset, timestamp_ms, timestamp_type, key,
    value, headers}), built directly: no intermediate L{Record}s.  Records
    before C{fetch_offset} are dropped (a batch starts at its base offset,
    which may precede the offset asked for), control batches (transaction
    markers) are skipped, compressed batches are decompressed, and a trailing
    partial batch is ignored.  Headers are a tuple of C{(str, bytes | None)}.

    @param fetch_offset: the offset the Fetch asked for.
    @param aborted: for a read-committed consumer, the Fetch response's
        C{aborted_transactions} of this partition as C{(producer_id,
        first_offset)} pairs: the transactional batches of an aborted
        transaction are dropped too, as Kafka's consumer does
        (C{CompletedFetch}): a producer's aborted range starts at its
        C{first_offset} and ends at that producer's next ABORT marker.
    @return: (records, next offset): the offset after the last complete batch,
        C{fetch_offset} when there is none.
    @raise CorruptRecordError: a CRC mismatch, or records that do not parse.
    @raise InvalidRecordError: a batch whose magic is not 2.
    """
    return _decode_fetched(_speedups, data, topic, partition, fetch_offset, record_class, verify_crc, aborted)


def decode_fetched_py(data: bytes | bytearray | memoryview, topic: str, partition: int, fetch_offset: int,
                      record_class: type, verify_crc: bool = True,
                      aborted: Sequence[tuple[int, int]] | None = None) -> tuple[list, int]:
    """L{decode_fetched} with the pure-Python record loop (the reference for the compiled one)."""
    return _decode_fetched(None, data, topic, partition, fetch_offset, record_class, verify_crc, aborted)


def _decode_fetched(sp: object, data: bytes | bytearray | memoryview, topic: str, partition: int,
                    fetch_offset: int, record_class: type, verify_crc: bool,
                    aborted: Sequence[tuple[int, int]] | None) -> tuple[list, int]:
    if not isinstance(data, bytes):
        data = bytes(data)
    if sp is not None and not aborted:
        # the batch loop too in C (see _speedups.c); NotImplemented: offsets past 64 bits
        result = sp.decode_fetched(data, topic, partition, fetch_offset, record_class,  # type: ignore[attr-defined]
                                   verify_crc, crc32c, decompress, _decode_consumer_records)
        if result is not NotImplemented:
            return result
    view = memoryview(data)
    out: list = []
    next_offset = fetch_offset
    if aborted:
        # (first_offset, producer_id), smallest first: Kafka's priority queue
        starts = sorted((first, pid) for pid, first in aborted)
        next_start = 0
        aborting: set[int] = set()
    for pos, batch_end, header in _complete_batches(data):
        base_offset = header[0]
        last = base_offset + header[6]
        if aborted and header[9] >= 0:
            while next_start < len(starts) and starts[next_start][0] <= last:
                aborting.add(starts[next_start][1])
                next_start += 1
            attributes = header[5]
            if attributes & _ATTR_CONTROL:
                if control_type(data, pos, batch_end) == CONTROL_ABORT:
                    aborting.discard(header[9])  # the aborted range of this producer ends here
            elif attributes & _ATTR_TRANSACTIONAL and header[9] in aborting:
                if last >= next_offset:
                    next_offset = last + 1
                continue
        if last < next_offset or header[5] & _ATTR_CONTROL:
            if last >= next_offset:
                next_offset = last + 1
            continue
        if verify_crc:
            _verify_crc(view, pos, batch_end, header, f" of {topic}-{partition}")
        first = len(out)
        _decode_batch(sp, data, pos, batch_end, header, out, topic, partition, record_class)
        if base_offset < next_offset:
            # drop the records before the offset asked for (offsets rise within a batch)
            cut = first
            n = len(out)
            while cut < n and out[cut][2] < next_offset:
                cut += 1
            del out[first:cut]
        next_offset = last + 1
    return out, next_offset


#: Control record types (the key of a control batch's record: int16 version, int16 type).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def control_type(data: bytes, pos: int, batch_end: int) -> int:
    """
    The type of the control batch at C{pos} (L{CONTROL_ABORT}, L{CONTROL_COMMIT}, …; -1: unreadable):
    its first record's key, after the record's length, attributes, timestamp
    delta, offset delta and key length (varints, attributes one byte).
    """
    p = pos + _HEADER_SIZE
    try:
        for field in range(5):  # length, attributes (int8), timestampDelta, offsetDelta, keyLength
            if field == 1:
                p += 1
                continue
            while data[p] & 0x80:
                p += 1
            p += 1
        if p + 4 > batch_end:
            return -1
        return struct.unpack_from(">h", data, p + 2)[0]
    except IndexError:
        return -1


_ZIGZAG: list[int] = [(i >> 1) ^ -(i & 1) for i in range(1 << 14)]  # 1- and 2-byte varints, decoded


# Batches whose records all have attributes 0, a null key, no headers and
# values of one length (what most producers send): one regular expression
# (C code) splits the records, and the consumer records are built with
# map/zip, without a Python loop per record.  A record is then
#   length (1-2 byte varint), 0x00, timestampDelta (1-2 bytes),
#   offsetDelta (1-2 bytes), 0x01 (null key), valueLength, value, 0x00.
# The matches must tile the records region exactly (their lengths add up to
# it, so there is no gap), which makes them the records' one parse; else the
# loop below decodes the batch.
_UNIFORM_MIN_RECORDS = 8
_VARINT12 = rb"([\x00-\x7f]|[\x80-\xff][\x00-\x7f])"
_UNIFORM_PATTERNS: dict[int, tuple[re.Pattern, int, bool]] = {}
# every 1- and 2-byte varint (canonical or not) -> its zig-zag decoded value
_VARINT12_VALUES: dict[bytes, int] = {bytes([b]): (b >> 1) ^ -(b & 1) for b in range(0x80)}
_VARINT12_VALUES.update({bytes([b, c]): (((b & 0x7F) | (c << 7)) >> 1) ^ -(((b & 0x7F) | (c << 7)) & 1)
                         for b in range(0x80, 0x100) for c in range(0x80)})


def _uniform_pattern(length: int) -> tuple[re.Pattern, int, bool]:
    """
    The pattern of a record with a value of C{length} bytes, the bytes of a
    record besides its timestamp and offset deltas (and besides its length
    varint when that is captured), and whether it is captured: it is not when
    its size is the same whatever the deltas' sizes.
    """
    found = _UNIFORM_PATTERNS.get(length)
    if found is None:
        if len(_UNIFORM_PATTERNS) >= 64:
            _UNIFORM_PATTERNS.clear()
        value_length = encode_varint(length)
        fixed = 3 + len(value_length) + length
        smallest, largest = fixed + 3, fixed + 5  # attributes, deltas, headers count: the record's length
        sizes = {len(encode_varint(smallest)), len(encode_varint(largest))}
        if len(sizes) == 1 and largest < (1 << 13):
            length_part = rb"[\x00-\x7f]" if sizes == {1} else rb"[\x80-\xff][\x00-\x7f]"
            fixed += sizes.pop()
            captured = False
        else:
            length_part = _VARINT12
            captured = True
        pattern = re.compile(rb"(?s)" + length_part + rb"\x00" + _VARINT12 + _VARINT12 + rb"\x01"
                             + re.escape(value_length) + rb"(.{%d})\x00" % length)
        found = _UNIFORM_PATTERNS[length] = (pattern, fixed, captured)
    return found


# offset deltas 0, 1, 2, ... as varints: what nearly every batch has
_OFFSET_DELTAS: list[bytes] = [encode_varint(i) for i in range(1 << 13)]


def _decode_uniform(d: bytes, pos: int, end: int, header: tuple, out: list, topic: str, partition: int,
                    cls: type) -> bool:
    """Decode the batch's records as uniform ones (see above); False, with nothing added, if they are not."""
    # the first record: its value length (null key, no headers assumed; checked by the match)
    if pos >= end:
        return False  # no records: the loop reports it
    b = d[pos]
    p = pos + (1 if b < 0x80 else 2)
    if p + 4 > end or d[p] != 0:
        return False
    p += 1
    for _ in range(2):  # timestampDelta, offsetDelta
        p += 1 if d[p] < 0x80 else 2
    if p + 2 > end or d[p] != 1:
        return False
    b = d[p + 1]
    if b < 0x80:
        length = _ZIGZAG[b]
    elif p + 2 < end and d[p + 2] < 0x80:
        length = _ZIGZAG[b - 128 + (d[p + 2] << 7)]
    else:
        return False
    if length < 0:
        return False
    pattern, fixed, captured = _uniform_pattern(length)
    matches = pattern.findall(d, pos, end)
    count = header[12]
    if len(matches) != count or count > len(_OFFSET_DELTAS):
        return False
    first = 1 if captured else 0
    deltas = list(map(itemgetter(first), matches))
    offsets = list(map(itemgetter(first + 1), matches))
    size = sum(map(len, map(itemgetter(0), matches))) if captured else 0
    if size + sum(map(len, deltas)) + sum(map(len, offsets)) + count * fixed != end - pos:
        return False
    values = map(itemgetter(first + 2), matches)
    value_of = _VARINT12_VALUES.__getitem__
    base_offset = header[0]
    if offsets == _OFFSET_DELTAS[:count]:
        absolute: Iterable[int] = range(base_offset, base_offset + count)
    else:
        absolute = map(base_offset.__add__, map(value_of, offsets))
    if header[5] & _ATTR_TIMESTAMP_TYPE:
        timestamps: Iterable[int] = repeat(header[8])
        ts_type = 1
    else:
        timestamps = map(header[7].__add__, map(value_of, deltas))
        ts_type = 0
    out.extend(map(_tuple_new, repeat(cls), zip(
        repeat(topic), repeat(partition), absolute, timestamps, repeat(ts_type), repeat(None), values,
        repeat(_EMPTY_HEADERS))))
    return True


def _decode_consumer_records(d: bytes, pos: int, end: int, header: tuple, out: list, topic: str,
                             partition: int, cls: type) -> None:
    # The consumer's hot loop.  Varints of one and two bytes (all but the rare
    # ones) are decoded inline through a table; a 2-byte varint's index is
    # (b & 0x7F) | (c << 7) == b - 128 + (c << 7).  The record length is
    # skipped, not checked per record: the batch CRC vouches for the layout
    # and the batch must still end exactly where its last record ends.
    base_offset = header[0]
    base_ts = header[7]
    log_append = header[5] & _ATTR_TIMESTAMP_TYPE
    ts_type = 1 if log_append else 0
    max_ts = header[8]
    count = header[12]
    append = out.append
    new = _tuple_new
    slow = decode_varint
    empty = _EMPTY_HEADERS
    z = _ZIGZAG
    if count >= _UNIFORM_MIN_RECORDS and _decode_uniform(d, pos, end, header, out, topic, partition, cls):
        return
    try:
        for _ in range(count):
            # length, then the attributes byte
            if d[pos] < 0x80:
                pos += 2
            elif d[pos + 1] < 0x80:
                pos += 3
            else:
                pos = slow(d, pos)[1] + 1
            # timestamp delta
            b = d[pos]
            if b < 0x80:
                ts = base_ts + z[b]
                pos += 1
            else:
                c = d[pos + 1]
                if c < 0x80:
                    ts = base_ts + z[b - 128 + (c << 7)]
                    pos += 2
                else:
                    v, pos = slow(d, pos)
                    ts = base_ts + v
            # offset delta
            b = d[pos]
            if b < 0x80:
                off = base_offset + z[b]
                pos += 1
            else:
                c = d[pos + 1]
                if c < 0x80:
                    off = base_offset + z[b - 128 + (c << 7)]
                    pos += 2
                else:
                    v, pos = slow(d, pos)
                    off = base_offset + v
            # key
            b = d[pos]
            if b < 0x80:
                v = z[b]
                pos += 1
            else:
                v, pos = slow(d, pos)
            if v < 0:
                key = None
            else:
                key = d[pos:pos + v]
                pos += v
            # value
            b = d[pos]
            if b < 0x80:
                v = z[b]
                pos += 1
            else:
                c = d[pos + 1]
                if c < 0x80:
                    v = z[b - 128 + (c << 7)]
                    pos += 2
                else:
                    v, pos = slow(d, pos)
            if v < 0:
                value = None
            else:
                value = d[pos:pos + v]
                pos += v
            # headers
            if d[pos] == 0:
                headers = empty
                pos += 1
            else:
                nh, pos = slow(d, pos)
                if nh < 0:
                    raise CorruptRecordError(f"invalid number of record headers {nh}")
                hs = []
                for _h in range(nh):
                    v, pos = slow(d, pos)
                    if v < 0:
                        raise CorruptRecordError("null header key")
                    hk = d[pos:pos + v].decode("utf-8", "replace")
                    pos += v
                    v, pos = slow(d, pos)
                    if v < 0:
                        hv = None
                    else:
                        hv = d[pos:pos + v]
                        pos += v
                    hs.append((hk, hv))
                headers = tuple(hs)
            append(new(cls, (topic, partition, off, max_ts if log_append else ts, ts_type, key, value, headers)))
    except IndexError:
        raise CorruptRecordError("records truncated") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after {count} records")
