"""
C{kafkatw dump-log}: print the contents of log segment files as Kafka's
C{kafka-dump-log.sh} (C{DumpLogSegments}) does, reading the files directly
(no broker).  Handles C{.log} (batches; with C{--deep-iteration} or
C{--print-data-log} every record), C{.index} and C{.timeindex} (entries,
checked against the segment's C{.log}; C{--index-sanity-check},
C{--verify-index-only}) and C{.txnindex} (aborted transactions)::

    Dumping 00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 \
partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 \
CreateTime: 1700000000000 size: 82 magic: 2 compresscodec: none crc: 1234567 isvalid: true
    | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] key: a payload: 1

Keys and values print as UTF-8 text (Kafka's default C{StringDecoder});
C{--offsets-decoder} prints the records of Kafka's C{__consumer_offsets}
(offset commits and group keys) as Kafka's JSON.  Mismatches between an
index and its log, and offsets that are not consecutive, go to stderr as
Kafka prints them.

Source: Apache Kafka C{kafka.tools.DumpLogSegments}, C{OffsetIndex.sanityCheck},
C{TimeIndex.sanityCheck}, C{DefaultRecordBatch}.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any, Callable

import click
from crc32c import crc32c

from kafkatw.errors import KafkaError
from kafkatw.protocol.batch import BATCH_HEADER_SIZE, BatchHeader, unpack_header
from kafkatw.protocol.records import decode_batches

from ._common import fail

__all__ = ["dump_log", "dump_log_file", "dump_offset_index", "dump_time_index", "dump_txn_index",
           "format_batch", "format_record", "decode_offsets_record"]

_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
#: the batch attribute of a batch whose tombstones have a delete horizon (KIP-534)
_DELETE_HORIZON_FLAG = 0x40
#: the CRC-32C covers the batch from its attributes (byte 21) to its end
_CRC_START = 21
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}

Echo = Callable[..., None]


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _sequence(base_sequence: int, delta: int) -> int:
    """Kafka's C{DefaultRecordBatch.incrementSequence}: wraps at 2^31 - 1; -1 stays -1."""
    if base_sequence < 0:
        return -1
    return (base_sequence + delta) % 0x80000000


def format_batch(header: BatchHeader, position: int, valid: bool) -> str:
    """One batch line of C{DumpLogSegments.printBatchLevel} (magic 2)."""
    horizon = f"OptionalLong[{header.base_timestamp}]" if header.attributes & _DELETE_HORIZON_FLAG \
        else "OptionalLong.empty"
    return (f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.record_count}"
            f" baseSequence: {header.base_sequence}"
            f" lastSequence: {_sequence(header.base_sequence, header.last_offset_delta)}"
            f" producerId: {header.producer_id} producerEpoch: {header.producer_epoch}"
            f" partitionLeaderEpoch: {header.partition_leader_epoch}"
            f" isTransactional: {_bool(header.is_transactional)} isControl: {_bool(header.is_control)}"
            f" deleteHorizonMs: {horizon} position: {position}"
            f" {_TIMESTAMP_TYPES[header.timestamp_type]}: {header.max_timestamp} size: {header.size}"
            f" magic: {header.magic} compresscodec: {_CODECS.get(header.compression, 'unknown')}"
            f" crc: {header.crc} isvalid: {_bool(valid)}")


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def format_record(header: BatchHeader, record: Any, print_data: bool,
                  parser: Callable[[Any], tuple[str | None, str | None]] | None = None,
                  skip_metadata: bool = False) -> str:
    """One record line of C{DumpLogSegments.dumpLog} (C{| offset: ...})."""
    out = []
    prefix = "| "
    if not skip_metadata:
        out.append(f"{prefix}offset: {record.offset} {_TIMESTAMP_TYPES[header.timestamp_type]}: "
                   f"{record.timestamp_ms} keySize: {-1 if record.key is None else len(record.key)} "
                   f"valueSize: {-1 if record.value is None else len(record.value)}")
        prefix = " "
        out.append(f" sequence: {_sequence(header.base_sequence, record.offset - header.base_offset)}"
                   f" headerKeys: [{','.join(k for k, _ in record.headers)}]")
        if header.is_control:
            key = record.key or b""
            control = struct.unpack_from(">h", key, 2)[0] if len(key) >= 4 else -1
            if control in _CONTROL_TYPES and record.value is not None and len(record.value) >= 6:
                epoch = struct.unpack_from(">i", record.value, 2)[0]
                out.append(f" endTxnMarker: {_CONTROL_TYPES[control]} coordinatorEpoch: {epoch}")
            else:
                out.append(f" controlType: UNKNOWN({control})")
    if print_data and not header.is_control:
        if parser is not None:
            key, payload = parser(record)
        else:
            key = None if record.key is None else _text(record.key)
            payload = None if record.value is None else _text(record.value)
        if key is not None:
            out.append(f"{prefix}key: {key}")
        if payload is not None:
            out.append(f" payload: {payload}")
    return "".join(out)


def dump_log_file(path: str, echo: Echo, deep: bool = False, print_data: bool = False,
                  parser: Callable[[Any], tuple[str | None, str | None]] | None = None,
                  skip_metadata: bool = False, max_bytes: int = 0x7FFFFFFF) -> list[tuple[int, int]]:
    """
    Print a C{.log} file's batches (and records when C{deep} or C{print_data}).

    @return: the pairs of non-consecutive record offsets found (deep iteration).
    """
    name = os.path.basename(path)
    echo(f"Log starting offset: {int(name.split('.')[0])}")
    with open(path, "rb") as f:
        data = f.read(max_bytes)
    view = memoryview(data)
    position = 0
    last_offset = -1
    gaps: list[tuple[int, int]] = []
    deep = deep or print_data
    while position + BATCH_HEADER_SIZE <= len(data):
        header = unpack_header(data, position)._replace(position=position)
        if header.size < BATCH_HEADER_SIZE or position + header.size > len(data) or header.magic != 2:
            break
        end = position + header.size
        valid = crc32c(view[position + _CRC_START:end]) == header.crc
        echo(format_batch(header, position, valid))
        if deep:
            for batch in decode_batches(view[position:end], verify_crc=False):
                for record in batch.records:
                    if last_offset != -1 and record.offset != last_offset + 1:
                        gaps.append((last_offset, record.offset))
                    last_offset = record.offset
                    echo(format_record(header, record, print_data, parser, skip_metadata))
        position = end
    trailing = len(data) - position
    if trailing > 0 and max_bytes == 0x7FFFFFFF:
        echo(f"Found {trailing} invalid bytes at the end of {name}")
    return gaps


def _segment_log(path: str) -> str:
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, name.split(".")[0] + ".log")


def _log_batches(log_path: str) -> list[BatchHeader]:
    headers = []
    try:
        with open(log_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return headers
    position = 0
    while position + BATCH_HEADER_SIZE <= len(data):
        header = unpack_header(data, position)._replace(position=position)
        if header.size < BATCH_HEADER_SIZE or position + header.size > len(data):
            break
        headers.append(header)
        position += header.size
    return headers


def _read_entries(path: str, entry: struct.Struct) -> tuple[list[tuple[int, int]], int]:
    with open(path, "rb") as f:
        data = f.read()
    usable = len(data) - len(data) % entry.size
    return [entry.unpack_from(data, i) for i in range(0, usable, entry.size)], len(data)


class IndexCorrupt(Exception):
    """Kafka's C{CorruptIndexException}."""


def _base_offset(path: str) -> int:
    """The base offset of a segment file, from its name (C{00000000000000000042.index}: 42)."""
    return int(os.path.basename(path).split(".")[0])


def _check_entry_size(kind: str, path: str, length: int, entry: struct.Struct) -> None:
    """
    The size check of Kafka's C{OffsetIndex} and C{TimeIndex} C{sanityCheck}.

    @param kind: C{"Index"} or C{"Time index"}, as Kafka's message starts.
    @param length: the file's size in bytes.
    @raise IndexCorrupt: C{length} is not a multiple of C{entry}'s size.
    """
    if length % entry.size:
        raise IndexCorrupt(f"{kind} file {os.path.abspath(path)} is corrupt, found {length} bytes which is "
                           f"neither positive nor a multiple of {entry.size}.")


def dump_offset_index(path: str, echo: Echo, sanity_only: bool = False, verify_only: bool = False
                      ) -> list[tuple[int, int]]:
    """
    Print an C{.index} file's entries (C{offset: N position: M}), or only
    check it (C{sanity_only}: Kafka's C{OffsetIndex.sanityCheck}).

    An entry matches when the batch at its position holds its offset:
    Kafka indexes a batch by its last offset, kafkatw by its base offset
    (L{kafkatw.storage.segment}); both pass.

    @return: C{(index offset, log offset)} mismatches: an entry whose
        position does not hold a batch containing its offset (the log offset
        is that batch's last offset, -1 when no batch starts there).
    @raise IndexCorrupt: the sanity check failed.
    """
    base = _base_offset(path)
    raw, length = _read_entries(path, _OFFSET_ENTRY)
    if not raw:
        echo(f"{path} is empty.")
        return []
    if sanity_only:
        last_offset = base + raw[-1][0]
        if last_offset < base:
            raise IndexCorrupt(f"Corrupt index found, index file ({os.path.abspath(path)}) has non-zero size but "
                               f"the last offset is {last_offset} which is less than the base offset {base}.")
        _check_entry_size("Index", path, length, _OFFSET_ENTRY)
        echo(f"{path} passed sanity check.")
        return []
    by_position = {h.position: h for h in _log_batches(_segment_log(path))}
    mismatches = []
    for i, (relative, position) in enumerate(raw):
        offset = base + relative
        if offset == base and i > 0:
            break  # the zero-filled tail of a preallocated index
        batch = by_position.get(position)
        batch_last = batch.last_offset if batch is not None else -1
        if batch is None or not batch.base_offset <= offset <= batch_last:
            mismatches.append((offset, batch_last))
        if not verify_only:
            echo(f"offset: {offset} position: {position}")
    return mismatches


def dump_time_index(path: str, echo: Echo, sanity_only: bool = False, verify_only: bool = False
                    ) -> dict[str, list[tuple[int, int]]]:
    """
    Print a C{.timeindex} file's entries (C{timestamp: T offset: O}), or only
    check it (C{sanity_only}: Kafka's C{TimeIndex.sanityCheck}).

    @return: Kafka's three kinds of errors: C{"mismatch"} (index timestamp,
        log timestamp), C{"out_of_order"} (timestamp, previous timestamp),
        C{"not_found"} (indexed offset, log offset found).
    @raise IndexCorrupt: the sanity check failed.
    """
    base = _base_offset(path)
    raw, length = _read_entries(path, _TIME_ENTRY)
    errors: dict[str, list[tuple[int, int]]] = {"mismatch": [], "out_of_order": [], "not_found": []}
    if sanity_only:
        full = os.path.abspath(path)
        if raw and raw[-1][0] < raw[0][0]:
            raise IndexCorrupt(f"Corrupt time index found, time index file ({full}) has non-zero size but the last "
                               f"timestamp is {raw[-1][0]} which is less than the first timestamp {raw[0][0]}")
        if raw and base + raw[-1][1] < base:
            raise IndexCorrupt(f"Corrupt time index found, time index file ({full}) has non-zero size but the last "
                               f"offset is {base + raw[-1][1]} which is less than the first offset {base}")
        _check_entry_size("Time index", path, length, _TIME_ENTRY)
        echo(f"{path} passed sanity check.")
        return errors
    batches = _log_batches(_segment_log(path))
    previous = -1
    for i, (timestamp, relative) in enumerate(raw):
        offset = base + relative
        if offset == base and i > 0:
            break
        found = next((h for h in batches if h.last_offset >= offset), None)
        if found is None:
            errors["not_found"].append((offset, -1))
        elif found.base_offset > offset:
            errors["not_found"].append((offset, found.last_offset))
        else:
            if found.max_timestamp != timestamp:
                errors["mismatch"].append((timestamp, found.max_timestamp))
            if previous >= timestamp:
                errors["out_of_order"].append((timestamp, previous))
        if not verify_only:
            echo(f"timestamp: {timestamp} offset: {offset}")
        previous = timestamp
    return errors


def dump_txn_index(path: str, echo: Echo) -> None:
    """Print a C{.txnindex} file's aborted transactions as Kafka's C{dumpTxnIndex}."""
    raw, _ = _read_entries(path, _TXN_ENTRY)
    for version, producer_id, first, last, lso in raw:
        echo(f"version: {version} producerId: {producer_id} firstOffset: {first} lastOffset: {last} "
             f"lastStableOffset: {lso}")


# --- __consumer_offsets records (Kafka's OffsetsMessageParser) -------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.position)[0]
        self.position += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.unpack(">h")
        value = self.data[self.position:self.position + length].decode("utf-8")
        self.position += length
        return value


def decode_offsets_record(record: Any) -> tuple[str | None, str | None]:
    """
    Kafka's C{OffsetsMessageParser}: the key and value of a
    C{__consumer_offsets} record as JSON text.  Offset commits (key versions
    0 and 1, values 0 to 3) are decoded; a group metadata key (version 2)
    prints its group, its value C{<GROUP_METADATA>} (not decoded here); a
    record without a value prints C{<DELETE>}.
    """
    if record.key is None:
        raise ValueError(f"Failed to decode message at offset {record.offset} using offset topic decoder "
                         "(message had a missing key)")
    try:
        key = _Reader(record.key)
        version = key.unpack(">h")
        if version in (0, 1):
            key_json = {"type": str(version), "data": {"group": key.string(), "topic": key.string(),
                                                       "partition": key.unpack(">i")}}
        elif version == 2:
            key_json = {"type": str(version), "data": {"group": key.string()}}
        else:
            return f"Unknown record type {version} at offset {record.offset}, skipping.", None
        if record.value is None:
            return json.dumps(key_json, separators=(",", ":")), "<DELETE>"
        if version == 2:
            return json.dumps(key_json, separators=(",", ":")), "<GROUP_METADATA>"
        value = _Reader(record.value)
        value_version = value.unpack(">h")
        data: dict[str, Any] = {"offset": value.unpack(">q")}
        if value_version >= 3:
            data["leaderEpoch"] = value.unpack(">i")
        data["metadata"] = value.string()
        data["commitTimestamp"] = value.unpack(">q")
        if value_version == 1:
            data["expireTimestamp"] = value.unpack(">q")
        return (json.dumps(key_json, separators=(",", ":")),
                json.dumps({"version": str(value_version), "data": data}, separators=(",", ":")))
    except (struct.error, UnicodeDecodeError) as e:
        return f"Error at offset {record.offset}, skipping. {e}", None


@click.command("dump-log", short_help="Print log segment and index files (kafka-dump-log.sh).")
@click.option("--files", required=True, metavar="FILE[,FILE]",
              help="Comma-separated .log, .index, .timeindex or .txnindex files to dump.")
@click.option("--print-data-log", is_flag=True, help="Print the records' keys and values (implies --deep-iteration).")
@click.option("--deep-iteration", is_flag=True, help="Print every record, not only the batches.")
@click.option("--verify-index-only", is_flag=True, help="Only check the index against the log; print mismatches.")
@click.option("--index-sanity-check", is_flag=True,
              help="Only run the index sanity check the broker runs at startup.")
@click.option("--offsets-decoder", is_flag=True, help="Decode the records as __consumer_offsets records.")
@click.option("--skip-record-metadata", is_flag=True, help="Print only the keys and values of records.")
@click.option("--max-bytes", type=click.IntRange(min=0), default=0x7FFFFFFF, show_default=True,
              help="Read at most this many bytes of a .log file.")
def dump_log(files: str, print_data_log: bool, deep_iteration: bool, verify_index_only: bool,
             index_sanity_check: bool, offsets_decoder: bool, skip_record_metadata: bool, max_bytes: int) -> None:
    """Parse log segment files and print their contents (kafka-dump-log.sh).

    Reads the files directly; a running broker is not needed.
    """
    if offsets_decoder:
        print_data_log = True
    parser = decode_offsets_record if offsets_decoder else None
    err = lambda line: click.echo(line, err=True)  # noqa: E731
    index_mismatches: dict[str, list[tuple[int, int]]] = {}
    time_errors: dict[str, dict[str, list[tuple[int, int]]]] = {}
    gaps: dict[str, list[tuple[int, int]]] = {}
    for path in [f for f in files.split(",") if f]:
        click.echo(f"Dumping {path}")
        suffix = os.path.splitext(path)[1]
        try:
            if suffix == ".log":
                found = dump_log_file(path, click.echo, deep_iteration, print_data_log, parser,
                                      skip_record_metadata, max_bytes)
                if found:
                    gaps[os.path.abspath(path)] = found
            elif suffix == ".index":
                found = dump_offset_index(path, click.echo, index_sanity_check, verify_index_only)
                if found:
                    index_mismatches[os.path.abspath(path)] = found
            elif suffix == ".timeindex":
                time_errors[os.path.abspath(path)] = dump_time_index(path, click.echo, index_sanity_check,
                                                                     verify_index_only)
            elif suffix == ".txnindex":
                dump_txn_index(path, click.echo)
            else:
                err(f"Ignoring unknown file {path}")
        except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Kafka's tool does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except (OSError, IndexCorrupt, KafkaError, ValueError) as e:
            fail(f"Error: {path}: {getattr(e, 'strerror', None) or e}")
    for name, pairs in index_mismatches.items():
        err(f"Mismatches in :{name}")
        for index_offset, log_offset in pairs:
            err(f"  Index offset: {index_offset}, log offset: {log_offset}")
    for name, errors in time_errors.items():
        if errors["mismatch"]:
            err(f"Found timestamp mismatch in :{name}")
            for index_ts, log_ts in errors["mismatch"]:
                err(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}")
    for name, errors in time_errors.items():
        if errors["out_of_order"]:
            err(f"Found out of order timestamp in :{name}")
            for index_ts, previous in errors["out_of_order"]:
                err(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}")
    for errors in time_errors.values():
        if errors["not_found"]:
            err("The following indexed offsets are not found in the log.")
            for indexed, found in errors["not_found"]:
                err(f"Indexed offset: {indexed}, found log offset: {found}")
    for name, pairs in gaps.items():
        err(f"Non-consecutive offsets in {name}")
        for first, second in pairs:
            err(f"  {first} is followed by {second}")
