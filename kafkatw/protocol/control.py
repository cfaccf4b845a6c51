"""
Control records: the transaction markers a partition leader appends for
WriteTxnMarkers (Kafka's C{EndTransactionMarker} and C{ControlRecordType}).

A marker is a RecordBatch v2 with the transactional and control attributes,
the producer id and epoch, base sequence -1, and one control record::

    key:    version int16 (0), type int16 (0: ABORT, 1: COMMIT; L{CONTROL_ABORT}, L{CONTROL_COMMIT})
    value:  version int16 (0), coordinator_epoch int32

L{encode_marker_batch} writes one; L{read_marker} reads one where it lies
(the log's append and load, the cleaner), without decoding the batch.  The
consumer's read_committed filter only needs the type:
L{kafkatw.protocol.records.control_type}, next to the record decoder it runs in.

Source: KIP-98; Kafka's C{EndTransactionMarker}, C{ControlRecordType} and
C{MemoryRecords.withEndTransactionMarker}.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kafkatw.errors import CorruptRecordError, InvalidRecordError
from kafkatw.protocol.batch import BATCH_HEADER_SIZE
from kafkatw.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, decode_varint, encode_batch

__all__ = ["CONTROL_ABORT", "CONTROL_COMMIT", "EndTransactionMarker", "encode_marker_batch", "read_marker"]

_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class EndTransactionMarker(NamedTuple):
    """A transaction marker: COMMIT or ABORT, and the coordinator epoch that wrote it."""

    committed: bool
    coordinator_epoch: int


def encode_marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                        timestamp_ms: int) -> bytes:
    """
    The control batch a partition leader appends for a WriteTxnMarkers entry
    (Kafka's C{MemoryRecords.withEndTransactionMarker}); the log assigns its
    offset and leader epoch.
    """
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if committed else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return encode_batch([(key, value, (), timestamp_ms)], producer_id=producer_id, producer_epoch=producer_epoch,
                        is_transactional=True, is_control=True)


def read_marker(batch: bytes | bytearray | memoryview, position: int = 0) -> EndTransactionMarker:
    """
    The marker of the control batch at C{position} (uncompressed, one control
    record), read in place; a value shorter than 6 bytes gives coordinator
    epoch -1.

    @raise InvalidRecordError: not a COMMIT or ABORT control record, or truncated.
    """
    try:
        pos = position + BATCH_HEADER_SIZE
        _length, pos = decode_varint(batch, pos)
        pos += 1  # attributes
        _ts, pos = decode_varint(batch, pos)
        _delta, pos = decode_varint(batch, pos)
        key_length, pos = decode_varint(batch, pos)
        if key_length < 4:
            raise InvalidRecordError("a control record key shorter than 4 bytes")
        _version, kind = _CONTROL_KEY.unpack_from(batch, pos)
        pos += key_length
        value_length, pos = decode_varint(batch, pos)
        if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
            raise InvalidRecordError(f"control record type {kind} is not a transaction marker")
        coordinator_epoch = _MARKER_VALUE.unpack_from(batch, pos)[1] if value_length >= 6 else -1
    except (IndexError, struct.error, CorruptRecordError) as e:
        raise InvalidRecordError(f"a truncated control record: {e}") from e
    return EndTransactionMarker(kind == CONTROL_COMMIT, coordinator_epoch)
