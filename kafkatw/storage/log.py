"""
The log of one partition: a directory of segments (docs/design.md: On disk as on the wire).

    <log dir>/<topic>-<partition>/
        00000000000000000000.log  .index  .timeindex    oldest segment
        00000000000000368769.log  .index  .timeindex
        00000000000000737337.log  .index  .timeindex    active segment (appends go here)
        (and a .txnindex beside a segment holding ABORT markers: see
        L{kafkatw.storage.transaction_index})

        leader-epoch-checkpoint                                  see L{kafkatw.storage.leader_epoch}

Offsets are logical and consecutive (D2).  The log start offset is the first
offset still stored; the log end offset (LEO) is the next offset to assign; the
high watermark (HWM) bounds what consumers may read.  The broker's partition
moves the high watermark (L{PartitionLog.update_high_watermark}); appends
never do.

Two ways in:

  - L{PartitionLog.append}, the leader's: the batches of a Produce request,
    validated, with each batch's base offset and leader epoch patched
    (outside the CRC) and written with one C{os.writev}.
  - L{PartitionLog.append_as_follower}, a follower's: whole batches fetched
    from the leader, written byte for byte with one C{os.write} at the
    offsets the leader gave them.

Both keep the leader epoch cache (C{leader-epoch-checkpoint}, KIP-101): an
epoch newer than the cache's latest is assigned its first offset before the
batches are written, as Kafka does, so that the checkpoint never misses an
epoch present in the log.  Reads return L{FileRegion}s, never data (D4).

Compaction (C{cleanup.policy=compact}): L{kafkatw.storage.log_cleaner}
rewrites segments below the active one and below the last stable offset
beside the old ones (with their C{.txnindex} when they keep aborted
transactions) and swaps them in with L{PartitionLog.replace_segments}; loading
completes or undoes a swap that a crash cut short (C{.cleaned}, C{.swap},
C{.deleted} files, docs/storage.md).

Opening a log loads it (L{kafkatw.storage.log_loader.LogLoader}: recovery of
the segments after an unclean shutdown, the producer state, the leader epoch
cache); the leader's appends are validated first
(L{kafkatw.storage.log_validator.LogValidator}).

Timestamps and codecs: with C{message.timestamp.type=LogAppendTime} the
leader stamps each batch (the timestamp-type attribute bit and the append time
as C{maxTimestamp}, with a new CRC), and with a C{compression.type} other than
C{producer} it recompresses batches of another codec
(L{kafkatw.protocol.records.rewrite_batches}); such batches are copied, the
others keep the no-copy path.  Followers write the leader's bytes as they are.
CreateTime batches outside C{message.timestamp.before.max.ms} /
C{after.max.ms} are refused with C{INVALID_TIMESTAMP}.
"""

from __future__ import annotations

import os
import shutil
import struct
from bisect import bisect_right
from typing import Any, Callable, NamedTuple

from crc32c import crc32c
from twisted.logger import Logger

from kafkatw.errors import InvalidRecordError, KafkaError, KafkaStorageError, OffsetOutOfRangeError
from kafkatw.protocol import records as _records
from kafkatw.protocol.batch import (BATCH_HEADER_SIZE, CRC_START, HEADER_STRUCT, LOG_OVERHEAD, MIN_BATCH_LENGTH,
                                    BatchHeader, parse_batch_headers)
from kafkatw.protocol.control import encode_marker_batch, read_marker
from kafkatw.protocol.records import decode_batches
from kafkatw.storage.files import sync_directory, write_atomically
from kafkatw.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from kafkatw.storage.log_config import LogConfig
from kafkatw.storage.log_dir_failure import OS_FILES, LogDirFiles
from kafkatw.storage.log_loader import LogLoader, aborted_txn, rebuild_producer_state
from kafkatw.storage.log_validator import LogValidator
from kafkatw.storage.producer_state import ProducerStateManager
from kafkatw.storage.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, PRODUCER_SNAPSHOT_SUFFIX, SWAP_SUFFIX, FileRegion,
                                     LogSegment)
from kafkatw.storage.transaction_index import AbortedTxn

__all__ = ["FileRegion", "AppendResult", "PartitionLog", "UnexpectedAppendOffsetError"]

_log = Logger()

_LONG_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
_tuple_new = tuple.__new__
#: baseOffset int64, batchLength int32, partitionLeaderEpoch int32: the batch prefix the broker rewrites.
_PATCH = struct.Struct(">qii")
#: Batches up to this size are copied into one buffer by L{PartitionLog.append_many} (larger ones are views).
_COPY_MAX = 16384
#: L{PartitionLog.append_many}'s loop over plain one-batch items, compiled (C{append_simple_batches}
#: of kafkatw/protocol/_speedups.c), or C{None}: the Python loop does it all.
_simple_batches = getattr(_records._speedups, "append_simple_batches", None)


class UnexpectedAppendOffsetError(OffsetOutOfRangeError):
    """
    A follower append whose batches do not start at the log end offset, or
    leave a gap between them (Kafka's C{UnexpectedAppendOffsetException}):
    nothing was written.  Carries the error code C{OFFSET_OUT_OF_RANGE}.

    @ivar first_offset: base offset of the first batch of the append.
    @ivar log_end_offset: the log end offset it had to start at.
    """

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class AppendResult(NamedTuple):
    """
    @ivar log_append_time_ms: the append time (ms) for LogAppendTime topics, -1 for CreateTime.
    @ivar duplicate: a retried idempotent batch: nothing was written and the
        offsets are the original ones.
    @ivar batch_count: batches written.
    @ivar size_bytes: bytes written.
    """

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False
    batch_count: int = 0
    size_bytes: int = 0


class PartitionLog:
    """
    The segmented log of one partition.

    @ivar high_watermark: offset below which records are readable by
        consumers, within C{[log_start_offset, log_end_offset]}; the LEO when
        the log is opened, moved by L{update_high_watermark} (the broker's
        partition) and lowered by truncation; appends leave it alone.
    @ivar leader_epoch_cache: the partition's L{LeaderEpochCache}.
    @ivar recovered_segments: segments re-scanned with CRC checks when the log
        was opened (0 after a clean shutdown).
    @param files: the file operations of its log directory
        (L{kafkatw.storage.log_dir_failure.LogDirFiles}), which its segments use.
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
        files: LogDirFiles = OS_FILES,
    ) -> None:
        self.directory = directory
        self.files = files
        self.topic = topic
        self.partition = partition
        self.config = config
        self.now_ms = now_ms
        self.producer_state = ProducerStateManager()
        self._graveyard: list[tuple[int, LogSegment]] = []
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms()
        #: the lowest offset the log was truncated to since the log cleaner
        #: last looked (it lowers its checkpoint to it), C{None} when not truncated
        self.truncated_to: int | None = None
        #: a write of pending batches (L{append} with C{write=False}) that failed
        #: inside an append (a roll, a flush), reported by L{write_pending}
        self._failed_write: KafkaStorageError | None = None
        self._validator = LogValidator(f"{topic}-{partition}", now_ms)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise KafkaStorageError(f"cannot create {directory}: {e}") from e
        loader = LogLoader(directory, f"{topic}-{partition}", config, recovery_point, clean_shutdown,
                           self.producer_state, self._new_segment)
        self._segments: list[LogSegment] = loader.load()
        self._bases: list[int] = [s.base_offset for s in self._segments]
        self.recovered_segments = loader.recovered_segments
        #: where the producer state came from: C{"snapshot"} (a clean start) or C{"scan"}
        self.producer_state_source = loader.producer_state_source
        #: C{(file name, bytes)} of the producer snapshot known to be the only one in the
        #: directory (restored at a clean start, or written since): a close that would write
        #: the same bytes writes nothing
        self._snapshot_on_disk: tuple[str, bytes] | None = loader.snapshot_on_disk
        # everything below the LEO is now trusted (clean) or re-validated (recovered)
        self.recovery_point = self.log_end_offset
        self.log_start_offset = self._segments[0].base_offset
        self.high_watermark = self.log_end_offset
        self.leader_epoch_cache = LeaderEpochCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT_FILE))
        loader.load_leader_epochs(self.leader_epoch_cache)

    def __repr__(self) -> str:
        return f"<PartitionLog {self.topic}-{self.partition} [{self.log_start_offset}, {self.log_end_offset})>"

    # -- segments, producer state ----------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, self.config.index_interval_bytes,
                          self.config.segment_index_bytes, created_ms=self.now_ms(), files=self.files)

    def _load_transactional(self, headers: list, data: Any, segment: LogSegment) -> None:
        """
        Load appended batches into the producer state; the ABORT markers among
        them go to C{segment}'s aborted-transaction index.
        """
        load_batch = self.producer_state.load_batch
        for h in headers:
            if h.producer_id < 0:
                continue
            if not h.is_control:
                load_batch(h)
                continue
            try:
                marker = read_marker(data, h.position)
            except InvalidRecordError:
                marker = None
            completed = load_batch(h, marker)
            if completed is not None and completed.aborted:
                segment.txn_index.append(aborted_txn(self.producer_state, completed))

    def _write_producer_snapshot(self) -> None:
        """
        Write the idempotent-producer state for the next clean start
        (atomically), and remove every other snapshot of the log; nothing
        when the one snapshot on disk holds these bytes already.  A log
        without a byte gets no snapshot: its start scans nothing.
        """
        leo = self.log_end_offset
        name = f"{leo:020d}{PRODUCER_SNAPSHOT_SUFFIX}"
        data = self.producer_state.snapshot(leo)
        if self._snapshot_on_disk == (name, data):
            return
        empty = all(segment.size_bytes == 0 for segment in self._segments)
        self._snapshot_on_disk = None
        for other in os.listdir(self.directory):
            if other.endswith(PRODUCER_SNAPSHOT_SUFFIX) and (other != name or empty):
                os.unlink(os.path.join(self.directory, other))
        if empty:
            return
        write_atomically(os.path.join(self.directory, name), data, sync_directory=False)
        self._snapshot_on_disk = (name, data)

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

    # -- high watermark and leader epochs -------------------------------------------

    def update_high_watermark(self, offset: int) -> bool:
        """
        Set the high watermark to C{offset} clamped to C{[log start offset,
        log end offset]} (Kafka's C{UnifiedLog.updateHighWatermark}); it may
        move down (a follower learning a lower value, a log loaded from a
        checkpoint).

        @return: whether it moved.
        """
        offset = max(self.log_start_offset, min(offset, self.log_end_offset))
        if offset == self.high_watermark:
            return False
        self.high_watermark = offset
        return True

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in the log's epoch cache, -1 when none."""
        return self.leader_epoch_cache.latest_epoch

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> bool:
        """
        Record that C{leader_epoch} starts at C{start_offset}, normally the
        LEO when this broker becomes leader (Kafka's C{Partition.makeLeader}),
        so that the epoch's start is known before its first batch.

        @return: whether the cache changed (see L{LeaderEpochCache.assign}).
        """
        return self.leader_epoch_cache.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """
        The answer to OffsetForLeaderEpoch for C{leader_epoch}:
        L{LeaderEpochCache.end_offset_for} with this log's LEO.

        @return: C{(epoch, end_offset)}; C{(-1, -1)} when unknown.
        """
        return self.leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch that wrote C{offset}, -1 when unknown."""
        return self.leader_epoch_cache.epoch_for_offset(offset)

    # -- transactions --------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """
        The last stable offset (LSO): C{min(first unstable offset, high
        watermark)} (Kafka's C{UnifiedLog.lastStableOffset}); read-committed
        consumers read below it.
        """
        hw = self.high_watermark
        producer_state = self.producer_state
        if not producer_state.ongoing and not producer_state.unreplicated:
            return hw  # no transaction open or waiting for replication (asked of every partition a fetch)
        first = producer_state.first_unstable_offset(hw)
        return hw if first is None or first >= hw else max(first, self.log_start_offset)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """
        The aborted transactions a read-committed fetch of
        C{[fetch_offset, upper_bound_offset)} must be told about, from the
        C{.txnindex} of the segment holding C{fetch_offset} and of the
        segments after it (Kafka's C{UnifiedLog.collectAbortedTransactions}).
        """
        if upper_bound_offset <= fetch_offset:
            return []
        found: list[AbortedTxn] = []
        segments = self._segments
        i = max(bisect_right(self._bases, fetch_offset) - 1, 0)
        for segment in segments[i:]:
            if not segment.txn_index.entries:
                continue
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found.extend(entries)
            if complete:
                break
        return found

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      leader_epoch: int, timestamp_ms: int) -> AppendResult:
        """
        Append a COMMIT or ABORT marker for a producer's transaction, as the
        partition's leader (WriteTxnMarkers; Kafka's
        C{UnifiedLog.appendAsLeader} with C{AppendOrigin.COORDINATOR}).

        @raise InvalidProducerEpochError: an older producer epoch.
        @raise KafkaError: C{TRANSACTION_COORDINATOR_FENCED}.
        @raise KafkaStorageError: the write failed.
        """
        self.producer_state.validate_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = encode_marker_batch(producer_id, producer_epoch, coordinator_epoch, committed, timestamp_ms)
        return self.append(batch, leader_epoch, allow_control=True)

    # -- append ------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, leader_epoch: int,
               allow_control: bool = False, write: bool = True) -> AppendResult:
        """
        Append the record batches of a Produce request (leader path).

        The batches get consecutive offsets from the LEO and C{leader_epoch};
        when C{leader_epoch} is newer than the epoch cache's latest it is
        assigned the first offset (before the write, as Kafka).  The high
        watermark does not move: the broker's partition moves it
        (L{update_high_watermark}).

        @param records: one or more whole RecordBatch v2.
        @param leader_epoch: written into each batch's partitionLeaderEpoch;
            a negative epoch is written but never assigned in the cache.
        @raise CorruptRecordError: see L{parse_batch_headers}; nothing is written.
        @raise RecordTooLargeError: a batch above C{max.message.bytes}.
        @raise InvalidRecordError: inconsistent batch counts; on a compacted
            log, a record without a key (Kafka's C{LogValidator}: "Compacted
            topic cannot accept message without key").
        @raise InvalidProducerEpochError, OutOfOrderSequenceError: idempotence
            checks; nothing is written.
        @raise KafkaStorageError: the write failed.
        @param allow_control: the batches may be control batches (the broker's
            transaction markers, L{append_marker}); a client's are refused
            (C{INVALID_RECORD}).
        @param write: C{False}: everything is done but the write, which waits
            for L{write_pending} so that the appends of several Produce
            requests read together go to the file in one C{os.writev}
            (the offsets, indexes, producer state and epoch cache are already
            updated; the caller must call L{write_pending} before the high
            watermark moves or anything reads the log).  A segment roll or a
            C{flush.messages} flush writes what is pending first.
        """
        if not write and self._failed_write is not None:
            # A pending write failed earlier in this run: nothing more until write_pending() reports it.
            raise KafkaStorageError(str(self._failed_write))
        config = self.config
        validator = self._validator
        headers, producers = validator.validate_batches(records, config, allow_control)
        if producers:  # idempotence and transactions: batches without a producer id have nothing to check
            duplicate = self.producer_state.validate(headers)
            if duplicate is not None:
                return AppendResult(duplicate.base_offset, duplicate.last_offset, -1, self.log_start_offset,
                                    duplicate.last_offset - duplicate.base_offset + 1, True)
        if (config.message_timestamp_type == "LogAppendTime" or config.compression_type != "producer"
                or config.message_timestamp_before_max_ms != _LONG_MAX
                or config.message_timestamp_after_max_ms != _LONG_MAX
                or config.message_timestamp_difference_max_ms != _LONG_MAX):
            # LogValidator's step 3, only for a topic setting one of its configs (the test of
            # append_many): timestamp bounds, LogAppendTime and recompression (a rewrite, a copy)
            records, headers, append_time = validator.assign_timestamps_and_compression(records, headers, config)
        else:
            append_time = -1
        # The batches go to disk as sent, but for the 16 bytes that carry the
        # base offset, the length and the partition leader epoch, which the
        # CRC does not cover: one small patched prefix per batch, the rest a
        # view of the request (no copy), written with one writev.
        view = memoryview(records)
        first_offset = next_offset = self._segments[-1].next_offset
        chunks: list = []
        add_chunk = chunks.append
        patched = []
        add = patched.append
        pack = _PATCH.pack
        patch_size = _PATCH.size
        for h in headers:
            (position, size, _, _, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch,
             base_sequence, count) = h
            add_chunk(pack(next_offset, size - LOG_OVERHEAD, leader_epoch))
            add_chunk(view[position + patch_size:position + size])
            add(_tuple_new(BatchHeader, (position, size, next_offset, leader_epoch, magic, crc, attributes, last_delta,
                                         base_ts, max_ts, producer_id, producer_epoch, base_sequence, count)))
            next_offset += last_delta + 1
        total = headers[-1].position + headers[-1].size - headers[0].position
        segment = self._maybe_roll(total, next_offset - 1)
        cache = self.leader_epoch_cache
        new_epoch = leader_epoch >= 0 and leader_epoch > cache.latest_epoch
        if new_epoch:
            cache.assign(leader_epoch, first_offset)
        try:
            segment.append(chunks, patched, total, write)
        except KafkaStorageError:
            if new_epoch:
                cache.truncate_from_end(first_offset)
            raise
        record_count = next_offset - first_offset
        if producers:
            self._load_transactional(patched, view, segment)
        self._unflushed_messages += record_count
        if self._unflushed_messages >= config.flush_messages:
            self.flush()
        # (tuple.__new__: the named tuple's own __new__ is a Python function, a microsecond per request)
        return _tuple_new(AppendResult, (first_offset, next_offset - 1, append_time, self.log_start_offset,
                                         record_count, False, len(headers), total))

    def append_many(self, records_list: list, leader_epoch: int) -> list:
        """
        L{append} with C{write=False} of several Produce requests' record
        batches to this partition, in order (the requests of a Produce run):
        the same offsets, bytes, indexes, epoch cache and results as one
        L{append} per item, with one roll check, one epoch check and one
        segment append for the items that need nothing else (CreateTime
        batches without producer ids on a delete-policy topic without
        timestamp bounds or broker-side compression, all fitting in the
        active segment); anything else takes L{append}, in turn.

        @param records_list: each request's records, as for L{append}.
        @return: one entry per item: its C{AppendResult}, or the
            C{KafkaError} L{append} raises for it.
        """
        config = self.config
        if (self._failed_write is not None or config.cleanup_policy != "delete" or config.compact
                or config.message_timestamp_type == "LogAppendTime" or config.compression_type != "producer"
                or config.message_timestamp_before_max_ms != _LONG_MAX
                or config.message_timestamp_after_max_ms != _LONG_MAX
                or config.message_timestamp_difference_max_ms != _LONG_MAX):
            return [self._append_or_error(records, leader_epoch) for records in records_list]
        out: list = []
        max_bytes = config.max_message_bytes
        unpack = HEADER_STRUCT.unpack_from
        pack = _PATCH.pack
        patch_size = _PATCH.size
        # The group being built: the items appended together, (index in out, records, end offset,
        # end position in the group's bytes, batches), their bytes and their patched headers.
        group: list = []
        chunks: list = []
        data = bytearray()  # small batches are copied together: one buffer for the segment's pending bytes
        patched: list = []
        add = patched.append
        next_offset = self._segments[-1].next_offset
        base = 0
        # The compiled loop (kafkatw/protocol/_speedups.c) appends the plain one-batch items as the
        # first branch below does, and stops at any other item, which the loop below takes.
        # (a negative max.message.bytes refuses every batch: the Python loop says so; -1 is the C loop's "none")
        scan = _simple_batches if records_list.__class__ is list and (max_bytes is None or max_bytes >= 0) else None
        limit = -1 if max_bytes is None else max_bytes
        i, count_items = 0, len(records_list)
        while i < count_items:
            if scan is not None:
                i, next_offset, base = scan(records_list, i, next_offset, leader_epoch, limit, _COPY_MAX, data, patched,
                                            group, out, base, BatchHeader, crc32c)
                if i == count_items:
                    break
            records = records_list[i]
            i += 1
            view = records if isinstance(records, memoryview) else memoryview(records)
            total = len(view)
            if total >= BATCH_HEADER_SIZE:
                # One whole, valid batch without producer id and not a control batch (what a
                # producer without idempotence sends): parse_batch_headers' one-batch checks, inline.
                f = unpack(view, 0)
                last_delta, count = f[6], f[12]
                if (f[1] + LOG_OVERHEAD == total and f[3] == 2 and f[1] >= MIN_BATCH_LENGTH
                        and (max_bytes is None or total <= max_bytes) and count > 0 and count == last_delta + 1
                        and f[9] < 0 and not f[5] & 0x20 and crc32c(view[CRC_START:]) == f[4]):
                    if total <= _COPY_MAX:
                        data += pack(next_offset, f[1], leader_epoch)
                        data += view[patch_size:]
                    else:
                        if data:
                            chunks.append(data)
                            data = bytearray()
                        chunks.append(pack(next_offset, f[1], leader_epoch))
                        chunks.append(view[patch_size:])
                    add(_tuple_new(BatchHeader, (base, total, next_offset, leader_epoch, 2, f[4], f[5], last_delta,
                                                 f[7], f[8], f[9], f[10], f[11], count)))
                    next_offset += count
                    base += total
                    group.append((len(out), records, next_offset, base, 1))
                    out.append(None)
                    continue
            try:
                headers = parse_batch_headers(view, True, max_bytes)
            except KafkaError as e:
                out.append(e)  # nothing to append: the items after it are unaffected
                continue
            if any(h.attributes & 0x20 or h.producer_id >= 0 for h in headers):
                if group:
                    if data:
                        chunks.append(data)
                    self._append_group(group, chunks, patched, base, out, leader_epoch)
                    group, chunks, data, patched = [], [], bytearray(), []
                    add = patched.append
                    base = 0
                out.append(self._append_or_error(records, leader_epoch))
                next_offset = self._segments[-1].next_offset
                continue
            for h in headers:
                (position, size, _, _, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id,
                 producer_epoch, base_sequence, count) = h
                if size <= _COPY_MAX:
                    data += pack(next_offset, size - LOG_OVERHEAD, leader_epoch)
                    data += view[position + patch_size:position + size]
                else:
                    if data:
                        chunks.append(data)
                        data = bytearray()
                    chunks.append(pack(next_offset, size - LOG_OVERHEAD, leader_epoch))
                    chunks.append(view[position + patch_size:position + size])
                add(_tuple_new(BatchHeader, (base + position, size, next_offset, leader_epoch, magic, crc, attributes,
                                             last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                                             count)))
                next_offset += last_delta + 1
            base += headers[-1].position + headers[-1].size - headers[0].position
            group.append((len(out), records, next_offset, base, len(headers)))
            out.append(None)
        if group:
            if data:
                chunks.append(data)
            self._append_group(group, chunks, patched, base, out, leader_epoch)
        return out

    def _append_or_error(self, records: Any, leader_epoch: int) -> Any:
        try:
            return self.append(records, leader_epoch, False, False)
        except KafkaError as e:
            return e

    def _append_group(self, group: list, chunks: list, patched: list, total: int, out: list,
                      leader_epoch: int) -> None:
        """
        Append L{append_many}'s simple items C{group} (C{(index in out,
        records, end offset, end position, batches)}; C{chunks}: their
        patched bytes, C{total} long; C{patched}: their headers) together, or
        one by one with L{append} when a roll or a C{flush.messages} flush
        could happen among them.
        """
        segment = self._segments[-1]
        first_offset = segment.next_offset
        next_offset = group[-1][2]
        batches = len(patched)
        record_count = next_offset - first_offset
        config = self.config
        if (self._unflushed_messages + record_count >= config.flush_messages
                or self._would_roll(segment, total, next_offset - 1)
                or len(segment.offset_index) + batches >= segment.offset_index.max_entries
                or len(segment.time_index) + batches >= segment.time_index.max_entries):
            for i, records, _, _, _ in group:
                out[i] = self._append_or_error(records, leader_epoch)
            return
        cache = self.leader_epoch_cache
        if leader_epoch >= 0 and leader_epoch > cache.latest_epoch:
            cache.assign(leader_epoch, first_offset)
        segment.append(chunks, patched, total, False)
        self._unflushed_messages += record_count
        log_start = self.log_start_offset
        start = first_offset
        previous_end = 0
        for i, _, end_offset, end, batch_count in group:
            out[i] = _tuple_new(AppendResult, (start, end_offset - 1, -1, log_start, end_offset - start, False,
                                               batch_count, end - previous_end))
            start, previous_end = end_offset, end

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendResult:
        """
        Append record batches fetched from the leader (Kafka's
        C{UnifiedLog.appendAsFollower}): written byte for byte, base offsets
        and leader epochs as the leader assigned them, with one C{os.write}.

        Each whole batch's CRC is checked; a last batch cut short (a Fetch
        response may end inside a batch) is ignored and not counted.  No
        idempotence check (the leader made it) and no C{max.message.bytes}
        limit (the leader accepted the batch): the producer state is loaded
        from the headers, and each batch whose C{partitionLeaderEpoch} is
        newer than the epoch cache's latest is assigned its base offset.
        Segments roll and C{flush.messages} applies as on the leader; the
        high watermark does not move.

        @param records: whole RecordBatch v2, possibly followed by a partial one.
        @return: the offsets, records, batches and bytes written; with nothing
            whole to append, C{record_count == 0} and
            C{base_offset == log_end_offset}.
        @raise UnexpectedAppendOffsetError: the first batch does not start at
            the log end offset, or a batch does not start where the previous
            one ended; on a compacted log (C{cleanup.policy} with C{compact})
            batches may start past the expected offset (the leader's cleaner
            removed the offsets between), never before it.  Nothing is written.
            One exception, Kafka's: a log whose end is its start offset
            (restarted at the leader's log start offset, which DeleteRecords
            may put inside a batch) takes a first batch holding that offset,
            and restarts at its base offset.
        @raise CorruptRecordError: a whole batch fails its CRC-32C check or is
            not magic 2; nothing is written.
        @raise InvalidRecordError: inconsistent batch counts; nothing is written.
        @raise KafkaStorageError: the write failed.
        """
        compacted = self.config.compact
        headers = parse_batch_headers(records, True, None, allow_partial_tail=True, allow_compacted=compacted)
        leo = self.log_end_offset
        if not headers:
            return AppendResult(leo, leo - 1, -1, self.log_start_offset, 0, False, 0, 0)
        first = headers[0]
        if first.base_offset < leo <= first.last_offset and leo == self.log_start_offset:
            # An empty log started at the leader's log start offset, which lies inside a batch
            # (DeleteRecords): the log restarts at that batch's base offset (Kafka's
            # Partition.appendRecordsToFollowerOrFutureReplica)
            _log.info("{partition}: the first batch fetched starts at {base}, below the log start offset {leo}:"
                      " the log restarts there", partition=f"{self.topic}-{self.partition}",
                      base=first.base_offset, leo=leo)
            self.truncate_fully_and_start_at(first.base_offset)
            leo = first.base_offset
        cache = self.leader_epoch_cache
        latest = cache.latest_epoch
        new_epochs = []
        expected = leo
        for h in headers:
            if h.base_offset != expected and not (compacted and h.base_offset > expected):
                what = "first batch" if expected == leo else f"batch at byte {h.position}"
                raise UnexpectedAppendOffsetError(
                    f"follower append to {self.topic}-{self.partition}: {what} starts at offset {h.base_offset},"
                    f" expected {expected} (log end offset {leo})", headers[0].base_offset, leo)
            expected = h.base_offset + h.last_offset_delta + 1
            if h.partition_leader_epoch > latest:
                latest = h.partition_leader_epoch
                new_epochs.append((latest, h.base_offset))
        total = headers[-1].position + headers[-1].size
        segment = self._maybe_roll(total, expected - 1)
        if new_epochs:
            cache.assign_all(new_epochs)
        try:
            segment.append(memoryview(records)[:total], headers, total)
        except KafkaStorageError:
            if new_epochs:
                cache.truncate_from_end(leo)
            raise
        self._load_transactional(headers, records, segment)
        record_count = expected - leo if not compacted else sum(h.record_count for h in headers)
        self._unflushed_messages += record_count
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(leo, expected - 1, -1, self.log_start_offset, record_count, False, len(headers), total)

    @property
    def has_pending(self) -> bool:
        """Whether batches appended with C{write=False} wait for L{write_pending}."""
        return self._segments[-1].has_pending or self._failed_write is not None

    def write_pending(self) -> None:
        """
        Write the batches appended with C{append(..., write=False)} since the
        last call, in one C{os.writev}.  When that write (or one made earlier
        by a roll or a flush among those appends) failed, the batches not
        written are removed from the log as L{truncate_to} does (the offsets
        handed out for them are free again and the producer state and epoch
        cache forget them), and the error is raised: the appends whose offsets
        are at or past the log end offset then were not written.

        @raise KafkaStorageError: the write failed.
        """
        segment = self._segments[-1]
        if segment.has_pending:
            try:
                self._write_segment_pending(segment)
            except KafkaStorageError:
                self._failed_write = None  # reported now
                raise
        failed = self._failed_write
        if failed is not None:
            self._failed_write = None
            raise failed

    def _write_segment_pending(self, segment: LogSegment) -> None:
        first = segment.pending_first_offset
        try:
            segment.write_pending()
        except KafkaStorageError as e:
            _log.error("{error}: truncating {partition} to offset {offset}", error=str(e),
                       partition=f"{self.topic}-{self.partition}", offset=first)
            self.truncate_to(first)
            if self._failed_write is None:
                self._failed_write = e
            raise

    def _maybe_roll(self, size_bytes: int, last_offset: int) -> LogSegment:
        segment = self._segments[-1]
        if not segment.size_bytes:
            return segment
        if self._would_roll(segment, size_bytes, last_offset):
            return self.roll()
        return segment

    def _would_roll(self, segment: LogSegment, size_bytes: int, last_offset: int) -> bool:
        """Whether appending C{size_bytes} ending at C{last_offset} to a non-empty C{segment} rolls it."""
        config = self.config
        return (segment.size_bytes + size_bytes > config.segment_bytes
                or last_offset - segment.base_offset > _INT32_MAX
                or segment.offset_index.is_full or segment.time_index.is_full
                or self.now_ms() - segment.created_ms > (
                    config.segment_ms if config.cleanup_policy == "delete" else config.max_segment_ms) - (
                    self._roll_jitter(segment) if config.segment_jitter_ms > 0 else 0))

    def _roll_jitter(self, segment: LogSegment) -> int:
        """C{segment.jitter.ms}: a per-segment amount in [0, jitter], fixed by the base offset (Kafka draws it)."""
        jitter = self.config.segment_jitter_ms
        return (segment.base_offset * 2654435761 + self.partition * 40503) % (jitter + 1) if jitter > 0 else 0

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (flushing the old one's indexes)."""
        old = self._segments[-1]
        if old.is_empty:
            return old
        if old.has_pending:
            self._write_segment_pending(old)
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

        The regions hold consecutive batches: the batch containing C{offset}
        (or the first one after it, where compaction removed it), then each
        next batch in log order, across segment boundaries, for as long as
        the next batch fits in what is left of C{max_bytes} and starts below
        C{max_offset}.  The read stops at the first batch that does not fit,
        whichever segment it is in: it never skips a batch to return a later
        one (docs/storage.md, "What a read returns").

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
        while i < len(segments) and (remaining > 0 or min_one_batch and not regions):
            segment = segments[i]
            if segment.base_offset >= upper:
                break
            max_position = segment.position_of(upper) if upper < segment.next_offset else None
            region = segment.read(offset, remaining, max_position, min_one_batch=min_one_batch and not regions)
            if region is not None:
                if not region.length:
                    break  # the next batch does not fit: stop there, never skip it
                regions.append(region)
                remaining -= region.length
                if region.position + region.length < (segment.size_bytes if max_position is None else max_position):
                    break  # stopped by max_bytes
            offset = segment.next_offset
            i += 1
        return regions

    def offset_for_timestamp(self, timestamp_ms: int, upper_offset: int | None = None) -> tuple[int, int] | None:
        """
        The earliest record at or after the log start offset whose timestamp
        is C{>= timestamp_ms} (ListOffsets; Kafka's
        C{UnifiedLog.fetchOffsetByTimestamp}): the segments are looked at in
        order, from the one holding the log start offset, skipping those
        whose largest timestamp is below C{timestamp_ms}; a segment whose
        matching records all lie below the log start offset passes the
        search on to the next one.

        @param upper_offset: when given, a record found at or past it is not
            an answer (Kafka answers ListOffsets below the high watermark, or
            the last stable offset for read-committed).
        @return: C{(offset, timestamp_ms)} or C{None}.
        """
        start = self.log_start_offset
        for segment in self._segments:
            if upper_offset is not None and segment.base_offset >= upper_offset:
                break
            if segment.next_offset <= start or segment.largest_timestamp_ms < timestamp_ms:
                continue
            found = segment.find_offset_by_timestamp(timestamp_ms, start)
            if found is not None:
                return None if upper_offset is not None and found[0] >= upper_offset else found
        return None

    def max_timestamp_and_offset(self, upper_offset: int | None = None) -> tuple[int, int] | None:
        """
        The record with the largest timestamp in C{[log start offset,
        upper_offset)} (default: up to the high watermark), the first one
        when several share it: ListOffsets v7's C{MAX_TIMESTAMP} (KIP-734).
        Batch headers locate the batch; only that batch is decoded, for the
        record's own offset, and so are the batches straddling either end,
        whose largest timestamp may belong to a record outside the range.
        Control batches and (compacted) batches without records are left out.

        @return: C{(offset, timestamp_ms)}, or C{None} when the range holds no record.
        """
        upper = self.high_watermark if upper_offset is None else upper_offset
        start = self.log_start_offset
        # (timestamp, segment, header, the record's offset when already known)
        best: tuple[int, Any, Any, int | None] | None = None
        for segment in self._segments:
            if segment.base_offset >= upper:
                break
            if segment.next_offset <= start or best is not None and segment.largest_timestamp_ms <= best[0]:
                continue
            for header in segment.iter_headers():
                if header.base_offset >= upper:
                    break
                if header.next_offset <= start or header.is_control or header.record_count == 0:
                    continue
                if best is not None and header.max_timestamp <= best[0]:
                    continue
                if header.base_offset < start or header.next_offset > upper:
                    found = self._max_timestamp_record(segment, header, start, upper)
                    if found is not None and (best is None or found[1] > best[0]):
                        best = (found[1], segment, header, found[0])
                else:
                    best = (header.max_timestamp, segment, header, None)
        if best is None:
            return None
        timestamp, segment, header, offset = best
        if offset is not None:
            return offset, timestamp
        if header.timestamp_type == 1:  # LogAppendTime: every record carries the batch's time
            return header.base_offset, timestamp
        found = self._max_timestamp_record(segment, header, start, upper)
        return (found[0], timestamp) if found is not None else (header.base_offset, timestamp)

    @staticmethod
    def _max_timestamp_record(segment: LogSegment, header: BatchHeader, start: int,
                              upper: int) -> tuple[int, int] | None:
        """The first record of largest timestamp among the batch's records in C{[start, upper)}."""
        data = os.pread(segment.fileno, header.size, header.position)
        best = None
        for batch in decode_batches(data, verify_crc=False):
            for record in batch.records:
                time = header.max_timestamp if header.timestamp_type == 1 else record.timestamp_ms
                if start <= record.offset < upper and (best is None or time > best[1]):
                    best = (record.offset, time)
        return best

    # -- flush, retention, truncation ---------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """
        C{fsync} the segments holding offsets below C{up_to} (default: the LEO)
        that are past the recovery point, then advance the recovery point.
        The leader epoch checkpoint is synced first: an assignment must be
        durable before the recovery point passes the batches it covers (the
        next unclean start completes the cache only from batches past it).
        """
        self.leader_epoch_cache.sync()
        if self._segments[-1].has_pending:
            self._write_segment_pending(self._segments[-1])
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
        """
        Flush the segments rolled since the last flush (Kafka flushes a rolled
        segment at once, in the background: a crash must not lose the tail of
        a segment that a later one follows), and everything when unflushed
        data is older than C{flush.ms}.

        @return: whether it flushed.
        """
        if self._unflushed_messages and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        active_base = self._segments[-1].base_offset
        if self.recovery_point < active_base:
            self.flush(active_base)
            return True
        return False

    def apply_retention(self, now_ms: int) -> int:
        """
        Delete old segments by C{retention.ms} (segment's largest timestamp)
        and C{retention.bytes} (total size); never the active segment, nor
        one holding offsets at or past the high watermark (Kafka's
        C{UnifiedLog.deletableSegments}).  Only when C{cleanup.policy} holds
        C{delete} (C{delete} or C{compact,delete}).  Advances the log start
        offset.

        @return: the number of segments deleted.
        """
        self._close_graveyard(now_ms)
        config = self.config
        if not config.delete:
            return 0  # cleanup.policy=compact: the log cleaner's job
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
        # Kafka's deletableSegments: only a segment wholly below the high watermark (the next
        # segment starts at or below it); the log start offset never passes records not yet
        # replicated, and the high watermark never jumps over them
        segments = self._segments
        deletable = min(deletable, next((i for i in range(len(candidates))
                                         if segments[i + 1].base_offset > self.high_watermark), len(candidates)))
        if not deletable:
            return 0
        self._delete_oldest_segments(deletable, now_ms)
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        _log.info("retention deleted {count} segments of {partition}, log start offset {offset}",
                  count=deletable, partition=f"{self.topic}-{self.partition}", offset=self.log_start_offset)
        return deletable

    def maybe_increment_log_start_offset(self, offset: int, now_ms: int | None = None) -> bool:
        """
        Move the log start offset up to C{offset}, inside a segment if need be
        (Kafka's C{UnifiedLog.maybeIncrementLogStartOffset}: DeleteRecords on
        the leader, the leader's log start offset on a follower).  Offsets
        below it are no longer readable (OFFSET_OUT_OF_RANGE); segments lying
        wholly below it are deleted now, never the active one (Kafka's
        C{deleteLogStartOffsetBreachedSegments}).  The new start is kept
        across restarts by the log manager's C{log-start-offset-checkpoint}.

        @param offset: the new log start offset; at most the high watermark.
        @raise OffsetOutOfRangeError: C{offset} above the high watermark.
        @return: whether the log start offset moved.
        """
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.topic}-{self.partition} below {offset}: "
                f"above the high watermark {self.high_watermark}")
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        when = self.now_ms() if now_ms is None else now_ms
        deletable = 0
        for i in range(len(self._segments) - 1):
            if self._segments[i + 1].base_offset <= offset:
                deletable += 1
            else:
                break
        self._delete_oldest_segments(deletable, when)
        self.leader_epoch_cache.truncate_from_start(offset)
        _log.info("log start offset of {partition} moved to {offset} ({count} segments deleted)",
                  partition=f"{self.topic}-{self.partition}", offset=offset, count=deletable)
        return True

    def replace_segments(self, old: list[LogSegment], base_offset: int,
                         crash_after: Callable[[str], None] | None = None) -> LogSegment:
        """
        Put the log cleaner's C{<base_offset>.log.cleaned} (and its
        C{.index.cleaned}, C{.timeindex.cleaned}, and C{.txnindex.cleaned}
        when the cleaned segment keeps aborted transactions) in place of the
        consecutive segments C{old}, in one step on the reactor thread
        (Kafka's C{UnifiedLog.replaceSegments}):

          1. the cleaned files are renamed C{.swap} (indexes first, the log last);
          2. each old segment's indexes (C{.txnindex} included) are removed
             and its C{.log} renamed C{.deleted}; its descriptor stays open
             (in the graveyard) for L{kafkatw.storage.log_config.FILE_DELETE_DELAY_MS} so that regions
             already handed to fetches still read the old bytes, then the
             file is removed;
          3. the C{.swap} files are renamed into place (the log first) and the
             new segment, its aborted-transaction index loaded, replaces
             C{old} in the segment list.

        A crash at any point is completed or undone by the next load
        (L{kafkatw.storage.log_loader.LogLoader}).

        @param crash_after: test hook, called with C{"swap"}, C{"delete"} and
            C{"live"} after each step (it raises to simulate a crash).
        @return: the new segment.
        @raise ValueError: C{old} is not a run of the log's segments below the
            active one (the log changed while it was being cleaned); no file
            was touched.
        """
        segments = self._segments
        try:
            first = next(i for i, seg in enumerate(segments) if seg is old[0])
        except StopIteration:
            raise ValueError("the segments to replace are no longer in the log") from None
        if segments[first:first + len(old)] != old or first + len(old) >= len(segments) \
                or old[0].base_offset != base_offset:
            raise ValueError("the segments to replace are no longer in the log")
        directory = self.directory
        names = [f"{base_offset:020d}{suffix}" for suffix in (".index", ".timeindex", ".txnindex", ".log")]
        if not os.path.exists(os.path.join(directory, names[2] + CLEANED_SUFFIX)):
            del names[2]  # no aborted transaction kept: no .txnindex
        for name in names:
            os.replace(os.path.join(directory, name + CLEANED_SUFFIX), os.path.join(directory, name + SWAP_SUFFIX))
        sync_directory(directory)
        if crash_after is not None:
            crash_after("swap")
        now_ms = self.now_ms()
        for segment in old:
            segment.offset_index.delete()
            segment.time_index.delete()
            segment.txn_index.delete()
            deleted = segment.path + DELETED_SUFFIX
            os.replace(segment.path, deleted)
            segment.path = deleted
            self._graveyard.append((now_ms, segment))
        if crash_after is not None:
            crash_after("delete")
        for name in reversed(names):
            os.replace(os.path.join(directory, name + SWAP_SUFFIX), os.path.join(directory, name))
        sync_directory(directory)
        if crash_after is not None:
            crash_after("live")
        segment = LogSegment(directory, base_offset, self.config.index_interval_bytes,
                             self.config.segment_index_bytes, files=self.files)
        segment.load()
        segment.txn_index.load()
        segments[first:first + len(old)] = [segment]
        self._bases = [s.base_offset for s in segments]
        return segment

    def _delete_oldest_segments(self, count: int, now_ms: int) -> None:
        """
        Drop the C{count} oldest segments from the log and delete their files;
        their log files are closed C{file.delete.delay.ms} after C{now_ms}
        (L{_close_graveyard}).
        """
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        for segment in doomed:
            segment.delete(close_log=False)
            self._graveyard.append((now_ms, segment))

    def _close_graveyard(self, now_ms: int | None) -> None:
        keep = []
        for deleted_ms, segment in self._graveyard:
            if now_ms is None or now_ms - deleted_ms >= self.config.file_delete_delay_ms:
                segment.close_log()
                if segment.path.endswith(DELETED_SUFFIX):  # replaced by the log cleaner
                    try:
                        os.unlink(segment.path)
                    except FileNotFoundError:
                        pass
            else:
                keep.append((deleted_ms, segment))
        self._graveyard = keep

    def _note_truncation(self, offset: int) -> None:
        self.truncated_to = offset if self.truncated_to is None else min(self.truncated_to, offset)

    def truncate_to(self, offset: int) -> None:
        """
        Remove every batch whose last offset is C{>= offset} (follower
        truncation; Kafka's C{UnifiedLog.truncateTo}).  At or below the first
        segment's base offset the log is emptied and restarts at C{offset}
        (L{truncate_fully_and_start_at}).  The epoch cache loses the entries
        starting at or after the new log end offset, even when no batch is
        removed (an epoch assigned at the LEO by a leader that wrote nothing).
        The high watermark, recovery point and log start offset are lowered
        to the new LEO when above it (the LEO may be below C{offset}: a batch
        holding C{offset} goes whole).
        """
        if offset >= self.log_end_offset:
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return
        self._note_truncation(offset)
        if offset <= self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while self._segments[-1].base_offset >= offset:
            self._segments.pop().delete()
        self._segments[-1].truncate_to(offset)
        self._bases = [s.base_offset for s in self._segments]
        leo = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(leo)
        # Kafka's truncateTo lowers the log start offset too: it never stays past the log end
        self.log_start_offset = min(self.log_start_offset, leo)
        self.high_watermark = min(self.high_watermark, leo)
        self.recovery_point = min(self.recovery_point, leo)
        rebuild_producer_state(self.producer_state, self._segments, rebuild_txn_index=False)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """
        Delete every segment and restart the log, empty, at C{offset} (Kafka's
        C{truncateFullyAndStartAt}: a follower whose fetch offset is below its
        leader's log start offset).  The log start offset, LEO, high
        watermark and recovery point all become C{offset}; the epoch cache
        and the producer state are emptied.
        """
        self._note_truncation(offset)
        for segment in self._segments:
            segment.delete()
        self._segments = [self._new_segment(offset)]
        self._bases = [offset]
        self.log_start_offset = offset
        self.high_watermark = offset
        self.recovery_point = offset
        self._unflushed_messages = 0
        self.leader_epoch_cache.clear()
        self.producer_state.clear()

    def close(self) -> None:
        """Flush, write the producer-state snapshot, and close every file."""
        self.flush()
        self._write_producer_snapshot()
        for segment in self._segments:
            segment.close()
        self._close_graveyard(None)

    def close_handlers(self) -> None:
        """
        Close every file without writing anything (its log directory failed:
        Kafka's C{UnifiedLog.closeHandlers}); the log is not used again in
        this process, and the next start recovers it from what is on disk.
        """
        self._failed_write = None
        for segment in self._segments:
            segment.close_handlers()
        for _, segment in self._graveyard:
            segment.close_handlers()
        self._graveyard = []

    def delete(self) -> None:
        """Close and remove the partition's directory."""
        for segment in self._segments:
            segment.close()
        self._close_graveyard(None)
        shutil.rmtree(self.directory, ignore_errors=True)
