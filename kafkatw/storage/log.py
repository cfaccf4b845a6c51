"""
The log of one partition: a directory of segments (docs/design.md: On disk as on the wire).

    <log dir>/<topic>-<partition>/
        00000000000000000000.log  .index  .timeindex    oldest segment
        00000000000000368769.log  .index  .timeindex
        00000000000000737337.log  .index  .timeindex    active segment (appends go here)

Offsets are logical and consecutive (D2).  The log start offset is the first
offset still stored; the log end offset (LEO) is the next offset to assign; the
high watermark (HWM) bounds what consumers may read.  Appends copy the request's
records once into a C{bytearray}, patch each batch's base offset and leader epoch
(outside the CRC), and write them with one C{os.write}; reads return
L{FileRegion}s, never data (D4).

Timestamps: with C{message.timestamp.type=LogAppendTime} the append time is
answered and used for the time index and retention of the appended batches,
but the batches themselves are not rewritten (their C{attributes} and
C{maxTimestamp} lie inside the CRC); after a rebuild from the log the indexes
hold the producers' timestamps again.
"""

from __future__ import annotations

import os
import shutil
import struct
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

from twisted.logger import Logger

from kafkatw.errors import KafkaStorageError, OffsetOutOfRangeError
from kafkatw.protocol.batch import LOG_OVERHEAD, parse_batch_headers
from kafkatw.storage.producer_state import ProducerStateManager
from kafkatw.storage.segment import FileRegion, LogSegment

__all__ = ["FileRegion", "LogConfig", "AppendResult", "PartitionLog", "FILE_DELETE_DELAY_MS"]

_log = Logger()

_LONG_MAX = 2**63 - 1
#: baseOffset int64, batchLength int32, partitionLeaderEpoch int32: the batch prefix the broker rewrites.
_PATCH = struct.Struct(">qii")
_SNAPSHOT_SUFFIX = ".snapshot"
#: Kafka's C{file.delete.delay.ms}: descriptors of deleted segments stay open
#: this long so that regions being sent remain valid.
FILE_DELETE_DELAY_MS = 60000


@dataclass
class LogConfig:
    """
    The log settings of one topic, under Kafka's topic-config names
    (L{kafkatw.config.TOPIC_CONFIG_KEYS}).
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    flush_messages: int = _LONG_MAX
    flush_ms: int = _LONG_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"

    _KEYS = {
        "segment.bytes": "segment_bytes",
        "segment.ms": "segment_ms",
        "index.interval.bytes": "index_interval_bytes",
        "segment.index.bytes": "segment_index_bytes",
        "flush.messages": "flush_messages",
        "flush.ms": "flush_ms",
        "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes",
        "max.message.bytes": "max_message_bytes",
        "message.timestamp.type": "message_timestamp_type",
    }

    @classmethod
    def from_topic_config(cls, config: Mapping[str, Any]) -> "LogConfig":
        """
        Build from a topic config dict (as L{kafkatw.config.topic_log_config}
        returns); missing keys take Kafka's defaults, unknown keys
        (C{cleanup.policy} ...) are ignored, string values are parsed.
        """
        values: dict[str, Any] = {}
        for key, attr in cls._KEYS.items():
            if key in config:
                value = config[key]
                values[attr] = str(value) if attr == "message_timestamp_type" else int(value)
        return cls(**values)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"



class AppendResult(NamedTuple):
    """
    @ivar log_append_time_ms: the append time (ms) for LogAppendTime topics, -1 for CreateTime.
    @ivar duplicate: a retried idempotent batch: nothing was written and the
        offsets are the original ones.
    """

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False


class PartitionLog:
    """
    The segmented log of one partition.

    @ivar high_watermark: offset below which records are readable by
        consumers; L{append} sets it to the LEO (single replica), the broker
        may manage it instead.
    @ivar recovered_segments: segments re-scanned with CRC checks when the log
        was opened (0 after a clean shutdown).
    """

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        now_ms: Callable[[], int] = lambda: 0,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.now_ms = now_ms
        self.producer_state = ProducerStateManager()
        self.recovered_segments = 0
        self.producer_state_source = "none"
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._graveyard: list[tuple[int, LogSegment]] = []
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms()
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise KafkaStorageError(f"cannot create {directory}: {e}") from e
        self._load(recovery_point, clean_shutdown)
        # everything below the LEO is now trusted (clean) or re-validated (recovered)
        self.recovery_point = self.log_end_offset
        self.log_start_offset = self._segments[0].base_offset
        self.high_watermark = self.log_end_offset

    def __repr__(self) -> str:
        return f"<PartitionLog {self.topic}-{self.partition} [{self.log_start_offset}, {self.log_end_offset})>"

    # -- loading and recovery ------------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, self.config.index_interval_bytes,
                          self.config.segment_index_bytes, created_ms=self.now_ms())

    def _load(self, recovery_point: int, clean_shutdown: bool) -> None:
        bases = []
        for name in os.listdir(self.directory):
            if name.endswith(".log") and name[:-4].isdigit():
                bases.append(int(name[:-4]))
            elif name.endswith((".index", ".timeindex")):
                stem = name.rsplit(".", 1)[0]
                if stem.isdigit() and not os.path.exists(os.path.join(self.directory, stem + ".log")):
                    os.unlink(os.path.join(self.directory, name))  # orphan index
        bases.sort()
        truncated_at = None
        for base in bases:
            segment = self._new_segment(base)
            if truncated_at is not None:
                # a segment after one that was truncated by recovery is not part of the log
                segment.delete()
                continue
            if clean_shutdown or segment.base_offset < recovery_point and not self._crosses(bases, base, recovery_point):
                segment.load()
            else:
                self.recovered_segments += 1
                if segment.recover():
                    truncated_at = segment.next_offset
            self._segments.append(segment)
        if not self._segments:
            self._segments.append(self._new_segment(0))
        self._bases = [s.base_offset for s in self._segments]
        snapshots = sorted(name for name in os.listdir(self.directory) if name.endswith(_SNAPSHOT_SUFFIX))
        loaded = False
        if clean_shutdown and snapshots:
            path = os.path.join(self.directory, snapshots[-1])
            with open(path, "rb") as f:
                loaded = self.producer_state.restore(f.read(), self.log_end_offset)
        for name in snapshots:
            os.unlink(os.path.join(self.directory, name))
        if loaded:
            self.producer_state_source = "snapshot"
            return
        self.producer_state_source = "scan"
        for segment in self._segments:
            for h in segment.iter_headers(0):
                self.producer_state.load_batch(h)

    def _write_producer_snapshot(self) -> None:
        """Write the idempotent-producer state for the next clean start (atomically)."""
        leo = self.log_end_offset
        path = os.path.join(self.directory, f"{leo:020d}{_SNAPSHOT_SUFFIX}")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self.producer_state.snapshot(leo))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @staticmethod
    def _crosses(bases: list[int], base: int, recovery_point: int) -> bool:
        """Whether the segment of C{base} holds offsets at or past C{recovery_point}."""
        i = bases.index(base)
        return i + 1 >= len(bases) or bases[i + 1] > recovery_point

    # -- properties ------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    # -- append ------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> AppendResult:
        """
        Append the record batches of a Produce request (leader path).

        @param records: one or more whole RecordBatch v2.
        @param leader_epoch: written into each batch's partitionLeaderEpoch.
        @raise CorruptRecordError: see L{parse_batch_headers}; nothing is written.
        @raise RecordTooLargeError: a batch above C{max.message.bytes}.
        @raise InvalidRecordError: inconsistent batch counts.
        @raise InvalidProducerEpochError, OutOfOrderSequenceError: idempotence
            checks; nothing is written.
        @raise KafkaStorageError: the write failed.
        """
        config = self.config
        headers = parse_batch_headers(records, True, config.max_message_bytes)
        duplicate = self.producer_state.validate(headers)
        if duplicate is not None:
            return AppendResult(duplicate.base_offset, duplicate.last_offset, -1, self.log_start_offset,
                                duplicate.last_offset - duplicate.base_offset + 1, True)
        # The batches go to disk as sent, but for the 16 bytes that carry the
        # base offset, the length and the partition leader epoch, which the
        # CRC does not cover: one small patched prefix per batch, the rest a
        # view of the request (no copy), written with one writev.
        view = memoryview(records)
        first_offset = next_offset = self.log_end_offset
        append_time = -1
        if config.log_append_time:
            append_time = self.now_ms()
        chunks: list = []
        add_chunk = chunks.append
        patched = []
        add = patched.append
        pack = _PATCH.pack
        for h in headers:
            position, size = h.position, h.size
            add_chunk(pack(next_offset, size - LOG_OVERHEAD, leader_epoch))
            add_chunk(view[position + _PATCH.size:position + size])
            h = h._replace(base_offset=next_offset, partition_leader_epoch=leader_epoch)
            if append_time >= 0:
                h = h._replace(max_timestamp=append_time)
            add(h)
            next_offset += h.last_offset_delta + 1
        total = headers[-1].position + headers[-1].size - headers[0].position
        segment = self._maybe_roll(total, next_offset - 1)
        segment.append(chunks, patched, total)
        record_count = next_offset - first_offset
        load_batch = self.producer_state.load_batch
        for h in patched:
            if h.producer_id >= 0:
                load_batch(h)
        self.high_watermark = next_offset
        self._unflushed_messages += record_count
        if self._unflushed_messages >= config.flush_messages:
            self.flush()
        return AppendResult(first_offset, next_offset - 1, append_time, self.log_start_offset, record_count, False)

    def _maybe_roll(self, size_bytes: int, last_offset: int) -> LogSegment:
        segment = self._segments[-1]
        if segment.is_empty:
            return segment
        config = self.config
        if (segment.size_bytes + size_bytes > config.segment_bytes
                or self.now_ms() - segment.created_ms > config.segment_ms
                or segment.index_full
                or not segment.relative_offset_fits(last_offset)):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (flushing the old one's indexes)."""
        old = self._segments[-1]
        if old.is_empty:
            return old
        old.offset_index.flush(fsync=False)
        old.time_index.flush(fsync=False)
        segment = self._new_segment(old.next_offset)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        _log.debug("rolled {partition} at offset {offset}", partition=f"{self.topic}-{self.partition}",
                   offset=segment.base_offset)
        return segment

    # -- read --------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> list[FileRegion]:
        """
        File regions of whole batches from the batch containing C{offset}.

        With C{min_one_batch}, at least one whole batch is returned when there
        is one, even if larger than C{max_bytes} (KIP-74: so that a consumer
        always makes progress); a fetch sets it for the first partition only.

        @param max_offset: exclusive upper bound (normally the high watermark).
        @raise OffsetOutOfRangeError: C{offset} below the log start offset or
            above the log end offset.
        @return: regions in log order; C{[]} at the end of the log.
        """
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self.log_start_offset}, {leo}] of {self.topic}-{self.partition}")
        upper = leo if max_offset is None else min(max_offset, leo)
        if offset >= upper:
            return []
        segments = self._segments
        i = bisect_right(self._bases, offset) - 1
        regions: list[FileRegion] = []
        remaining = max_bytes
        while i < len(segments) and remaining > 0:
            segment = segments[i]
            if segment.base_offset >= upper:
                break
            max_position = segment.position_of(upper) if upper < segment.next_offset else None
            region = segment.read(offset, remaining, max_position, min_one_batch=min_one_batch and not regions)
            if region is not None:
                regions.append(region)
                remaining -= region.length
                if region.position + region.length < (segment.size_bytes if max_position is None else max_position):
                    break  # stopped by max_bytes
            offset = segment.next_offset
            i += 1
        return regions

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """
        The earliest record whose timestamp is C{>= timestamp_ms} (ListOffsets).

        @return: C{(offset, timestamp_ms)} or C{None}.
        """
        for segment in self._segments:
            if segment.largest_timestamp_ms >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms)
                if found is not None:
                    return max(found[0], self.log_start_offset), found[1]
        return None

    # -- flush, retention, truncation ---------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """
        C{fsync} the segments holding offsets below C{up_to} (default: the LEO)
        that are past the recovery point, then advance the recovery point.
        """
        up_to = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        if up_to <= self.recovery_point:
            return
        for segment in self._segments:
            if segment.next_offset > self.recovery_point and segment.base_offset < up_to:
                segment.flush()
        self.recovery_point = max(self.recovery_point, up_to)
        if up_to >= self.log_end_offset:
            self._unflushed_messages = 0
        self._last_flush_ms = self.now_ms()

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when unflushed data is older than C{flush.ms}. @return: whether it did."""
        if self._unflushed_messages and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    def apply_retention(self, now_ms: int) -> int:
        """
        Delete old segments by C{retention.ms} (segment's largest timestamp)
        and C{retention.bytes} (total size); never the active segment.
        Advances the log start offset.

        @return: the number of segments deleted.
        """
        self._close_graveyard(now_ms)
        config = self.config
        deletable = 0
        candidates = self._segments[:-1]
        if config.retention_ms >= 0:
            for segment in candidates:
                ts = segment.largest_timestamp_ms if segment.largest_timestamp_ms >= 0 else segment.created_ms
                if now_ms - ts > config.retention_ms:
                    deletable += 1
                else:
                    break
        if config.retention_bytes >= 0:
            excess = self.size_bytes - config.retention_bytes
            count = 0
            for segment in candidates:
                if excess - segment.size_bytes < 0:
                    break
                excess -= segment.size_bytes
                count += 1
            deletable = max(deletable, count)
        if not deletable:
            return 0
        doomed = self._segments[:deletable]
        del self._segments[:deletable]
        del self._bases[:deletable]
        for segment in doomed:
            segment.delete(close_log=False)
            self._graveyard.append((now_ms, segment))
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        _log.info("retention deleted {count} segments of {partition}, log start offset {offset}",
                  count=deletable, partition=f"{self.topic}-{self.partition}", offset=self.log_start_offset)
        return deletable

    def _close_graveyard(self, now_ms: int | None) -> None:
        keep = []
        for deleted_ms, segment in self._graveyard:
            if now_ms is None or now_ms - deleted_ms >= FILE_DELETE_DELAY_MS:
                segment.close_log()
            else:
                keep.append((deleted_ms, segment))
        self._graveyard = keep

    def truncate_to(self, offset: int) -> None:
        """
        Remove every batch whose last offset is C{>= offset} (follower
        truncation).  Below the log start offset the log is emptied and restarts
        at C{offset}.
        """
        if offset >= self.log_end_offset:
            return
        if offset <= self._segments[0].base_offset:
            for segment in self._segments:
                segment.delete()
            self._segments = [self._new_segment(offset)]
            self.log_start_offset = offset
        else:
            while self._segments[-1].base_offset >= offset:
                self._segments.pop().delete()
            self._segments[-1].truncate_to(offset)
        self._bases = [s.base_offset for s in self._segments]
        leo = self.log_end_offset
        self.high_watermark = min(self.high_watermark, leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.producer_state.clear()
        for segment in self._segments:
            for h in segment.iter_headers(0):
                self.producer_state.load_batch(h)

    def close(self) -> None:
        """Flush, write the producer-state snapshot, and close every file."""
        self.flush()
        self._write_producer_snapshot()
        for segment in self._segments:
            segment.close()
        self._close_graveyard(None)

    def delete(self) -> None:
        """Close and remove the partition's directory."""
        for segment in self._segments:
            segment.close()
        self._close_graveyard(None)
        shutil.rmtree(self.directory, ignore_errors=True)
