"""
The log cleaner: compaction of logs whose C{cleanup.policy} holds C{compact}
(Kafka's C{LogCleaner}, C{Cleaner}, C{LogCleanerManager}; the Kafka
documentation's "Log Compaction" section; KIP-58 for
C{min.compaction.lag.ms}, KIP-354 for C{max.compaction.lag.ms}).

A compacted log keeps at least the last record of every key.  The cleaner
looks only below the active segment and below the segment holding the last
stable offset (the LSO, at or below the high watermark: no batch of an open or
undecided transaction is ever cleaned, Kafka's C{LogCleanerManager})::

    log start                first dirty offset            first uncleanable offset    LEO
    |  clean (cleaned before)  |  dirty (never cleaned)        |  LSO's segment, ...       |
    [seg 0][seg 1]             [seg 2][seg 3][seg 4]           [seg 5: appends go here]

One pass over a log:

  1. The dirty range is read and a map C{key -> last offset} built from its
     records, those of aborted transactions left out (Kafka's
     C{OffsetMap}, whole keys in a dict; at most C{log.cleaner.dedupe.buffer.size}
     / 160 bytes entries, shared by the threads; a pass that fills it stops at
     a segment boundary and the next pass continues from there).
  2. Every segment from the log start to the end of that range is rewritten,
     in groups of consecutive segments whose sizes add up to at most
     C{segment.bytes}, keeping a record when no later record of its key is in
     the map, and dropping a tombstone (a record with a null value) only when
     its segment was last modified more than C{delete.retention.ms} before the
     newest clean segment (Kafka's delete horizon, before KIP-534).
  3. Offsets never change: a batch keeps its base offset and last offset delta
     even when records are removed from it (so that producer sequence numbers
     stay valid); a batch left empty is dropped, except the last batch of an
     active idempotent producer and the last batch of each group, which stay
     as a 61-byte header without records (Kafka's C{RETAIN_EMPTY}; the second
     keeps a rewritten segment's offset range, which crash recovery relies on).
     Batches whose records are all kept are copied byte for byte; a rewritten
     batch keeps its codec, attributes, producer fields and base timestamp.
  4. Transactions (Kafka's C{Cleaner.cleanInto} and
     C{CleanedTransactionMetadata}, before KIP-534; the aborted transactions
     come from the C{.txnindex} files, L{PartitionLog.collect_aborted_transactions}):
     every record of an aborted transaction is removed (read-committed
     consumers never see it; its batches go as in 3).  A transaction's COMMIT
     or ABORT marker stays while a batch of the transaction (even an empty
     header) was met in the pass; once none is, the marker is removed like a
     tombstone, when its segment is older than the delete horizon.  An ABORT
     marker that stays keeps its entry in the cleaned segment's C{.txnindex};
     the entries of the others go.
  5. Each group is written to C{<base>.log.cleaned} (with C{.index.cleaned}
     and C{.timeindex.cleaned}, rebuilt, and C{.txnindex.cleaned} when an
     aborted transaction's marker stays), fsynced, and handed to the reactor
     thread, which swaps it in (L{PartitionLog.replace_segments}:
     C{.cleaned} -> C{.swap} -> live, old files C{.deleted}).
  6. The end of the range is written to the log directory's
     C{cleaner-offset-checkpoint} (Kafka's format, the same as
     C{recovery-point-offset-checkpoint})::

        0                  <- format version
        1                  <- number of entries
        users 0 81234      <- topic partition first-dirty-offset

A log needs cleaning when its dirty bytes make at least
C{min.cleanable.dirty.ratio} of its clean plus dirty bytes, or when a dirty
record is older than C{max.compaction.lag.ms}; segments whose newest record is
younger than C{min.compaction.lag.ms} are not cleanable.  Among the logs that
need it, the cleaner takes first those past their maximum lag, then the
dirtiest.

Threads: the broker's L{kafkatw.broker.log_cleaner.LogCleaner} runs
C{log.cleaner.threads} passes at a time on a thread pool of its own; the
reading, deduplicating and writing happen there, on descriptors duplicated
for the pass, while the reactor keeps serving produce and fetch.  Only the
swap of each group and the checkpoint run on the reactor thread, each as one
step.  All threads together read and write at most
C{log.cleaner.io.max.bytes.per.second} (L{Throttler}).

Records without a key cannot be appended to a compacted log
(L{kafkatw.storage.log.PartitionLog.append}); any found in one (appended
before the policy changed) are removed by cleaning, as Kafka does.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, NamedTuple

from crc32c import crc32c
from twisted.logger import Logger

from kafkatw.errors import InvalidRecordError, KafkaStorageError
from kafkatw.protocol.batch import BATCH_HEADER_SIZE, CRC_START, HEADER_STRUCT, LOG_OVERHEAD, BatchHeader, \
    scan_valid_prefix
from kafkatw.protocol.control import read_marker
from kafkatw.protocol.records import compress, decode_varint, decompress
from kafkatw.storage.index import OffsetIndex, TimeIndex
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_manager import read_checkpoint, write_checkpoint
from kafkatw.storage.segment import CLEANED_SUFFIX, LogSegment, segment_file_name
from kafkatw.storage.transaction_index import AbortedTxn, TransactionIndex

__all__ = ["CLEANER_CHECKPOINT_FILE", "LogCleanerManager", "Cleaner", "CleanerStats", "LogToClean", "OffsetMap",
           "Throttler", "cleanable_range", "DedupeBufferTooSmallError", "CleanedTransactions"]

_log = Logger()

#: Kafka's C{LogCleanerManager.offsetCheckpointFile}.
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
#: Memory of one offset-map entry: the key as a C{bytes} object (33 bytes of
#: header and the key), the offset as an C{int} (32) and the dict slot (about
#: 50), for keys of a few tens of bytes.  Kafka's C{SkimpyOffsetMap} takes 24
#: (a 16-byte MD5 of the key and an 8-byte offset), so the same
#: C{log.cleaner.dedupe.buffer.size} holds about 7 times fewer keys here, but
#: no two keys ever collide.
OFFSET_MAP_ENTRY_BYTES = 160
#: Kafka's C{log.cleaner.io.buffer.load.factor}.
OFFSET_MAP_LOAD_FACTOR = 0.9
_READ_CHUNK_BYTES = 1024 * 1024
_INT32_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_CHECK_INTERVAL_S = 0.3
_ATTR_KEEP_EMPTY = 0x08 | 0x10 | 0x20  # timestamp type, transactional, control
_sleep = time.sleep


class DedupeBufferTooSmallError(KafkaStorageError):
    """The offset map cannot hold the keys of one segment (raise C{log.cleaner.dedupe.buffer.size})."""


class CleanerAbortedError(Exception):
    """The pass was stopped (broker shutdown) or its log changed under it."""


class Throttler:
    """
    Kafka's C{kafka.utils.Throttler}: callers report bytes done; when the
    rate over the last check interval (0.3 s) is above C{rate_bytes_per_s},
    the calling thread sleeps until it is back at that rate.  Shared by the
    cleaner threads (a lock guards it).

    @param monotonic: clock (s); @param sleep: sleeps the calling thread (s).
    """

    def __init__(self, rate_bytes_per_s: float, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = monotonic()
        self._observed = 0.0
        #: seconds slept in all (for tests and stats)
        self.slept_s = 0.0

    def maybe_throttle(self, observed_bytes: float) -> None:
        with self._lock:
            self._observed += observed_bytes
            now = self._monotonic()
            elapsed = now - self._period_start
            if elapsed <= _CHECK_INTERVAL_S or self._observed <= 0:
                return
            sleep_s = 0.0
            if self._observed / elapsed > self.rate_bytes_per_s:
                sleep_s = self._observed / self.rate_bytes_per_s - elapsed
            self._observed = 0.0
            if sleep_s > 0:
                self.slept_s += sleep_s
                self._sleep(sleep_s)
            self._period_start = self._monotonic()


class OffsetMap:
    """
    Key -> offset of its last record in the dirty range (Kafka's C{OffsetMap};
    full keys, not hashes, so no two keys collide), with a capacity in entries.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.offsets: dict[bytes, int] = {}
        #: the last offset put, -1 when empty
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def full(self) -> bool:
        return len(self.offsets) >= self.capacity

    def get(self, key: bytes) -> int:
        return self.offsets.get(key, -1)


class LogToClean(NamedTuple):
    """
    What a pass over a log would clean (Kafka's C{LogToClean}).

    @ivar first_dirty_offset: start of the dirty range.
    @ivar first_uncleanable_offset: its end, a segment base offset.
    @ivar clean_bytes: bytes of the segments below the dirty range.
    @ivar cleanable_bytes: bytes of the segments in the dirty range.
    @ivar max_compaction_delay_ms: how far past C{max.compaction.lag.ms} its
        oldest dirty record is (0 when not).
    """

    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_cleaning(self) -> bool:
        return self.cleanable_bytes > 0 and (
            self.max_compaction_delay_ms > 0 or self.dirty_ratio >= self.log.config.min_cleanable_dirty_ratio)


def cleanable_range(log: PartitionLog, checkpoint_offset: int | None, now_ms: int) -> LogToClean:
    """
    The dirty range of C{log} (Kafka's C{LogCleanerManager.cleanableOffsets}
    and C{maxCompactionDelay}): from the checkpointed offset (the log start
    offset when there is none or it is out of the log) to the first of the
    active segment, the segment holding the last stable offset (never beyond
    the first unstable offset, nor the high watermark, which bounds it), and
    the first segment whose newest record is younger than
    C{min.compaction.lag.ms}.
    Runs on the reactor thread.

    @param checkpoint_offset: the log's C{cleaner-offset-checkpoint} entry.
    """
    config = log.config
    segments = log.segments
    first_dirty = checkpoint_offset
    if first_dirty is None or first_dirty < log.log_start_offset or first_dirty > log.log_end_offset:
        first_dirty = log.log_start_offset
    uncleanable = segments[-1].base_offset
    stable = log.last_stable_offset  # <= the high watermark
    for segment in segments[:-1]:
        if segment.next_offset > stable:
            uncleanable = min(uncleanable, segment.base_offset)
            break
    min_lag = config.min_compaction_lag_ms
    if min_lag > 0:
        for segment in segments[:-1]:
            if segment.base_offset >= first_dirty and segment.largest_timestamp_ms > now_ms - min_lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    uncleanable = max(uncleanable, first_dirty)
    clean_bytes = sum(s.size_bytes for s in segments if s.base_offset < first_dirty)
    dirty = [s for s in segments if first_dirty <= s.base_offset < uncleanable]
    cleanable_bytes = sum(s.size_bytes for s in dirty)
    delay = 0
    if config.max_compaction_lag_ms < _LONG_MAX and dirty:
        first = dirty[0].read_header(0)
        if first is not None and first.max_timestamp > 0:
            delay = max(0, now_ms - config.max_compaction_lag_ms - first.max_timestamp)
    return LogToClean(log, first_dirty, uncleanable, clean_bytes, cleanable_bytes, delay)


@dataclass
class CleanerStats:
    """
    Counts of one pass (Kafka's C{CleanerStats}): C{map_bytes_read} is the
    dirty range read to build the offset map, C{bytes_read} the log read to
    rewrite it ("MB of log processed"), C{elapsed_s} the whole pass.
    """

    map_bytes_read: int = 0
    map_elapsed_s: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    #: records of aborted transactions removed, transaction markers removed
    aborted_records_removed: int = 0
    markers_removed: int = 0
    groups: int = 0
    end_offset: int = 0
    elapsed_s: float = 0.0


@dataclass
class _SegmentView:
    """A segment as the pass sees it: a duplicated descriptor and its size at the start."""

    segment: LogSegment
    fd: int
    base_offset: int
    next_offset: int
    size_bytes: int
    mtime_ns: int
    index_entries: int


@dataclass
class CleanTask:
    """One pass over one log, prepared on the reactor thread (L{Cleaner.prepare})."""

    log: PartitionLog
    to_clean: LogToClean
    views: list[_SegmentView]
    now_ms: int
    active_producer_last_offsets: dict[int, int]
    config: Any
    aborted: threading.Event = field(default_factory=threading.Event)
    #: the aborted transactions overlapping the segments read, from their C{.txnindex} files
    aborted_txns: list[AbortedTxn] = field(default_factory=list)

    def close(self) -> None:
        for view in self.views:
            if view.fd >= 0:
                os.close(view.fd)
                view.fd = -1


def _iter_batches(fd: int, size: int) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The batches of a segment file up to C{size}: headers (absolute positions) and their bytes."""
    position = 0
    while position + BATCH_HEADER_SIZE <= size:
        buf = os.pread(fd, min(_READ_CHUNK_BYTES, size - position), position)
        headers, end = scan_valid_prefix(buf, 0, verify_crc=False)
        if not headers:
            (length,) = struct.unpack_from(">i", buf, 8)
            need = length + LOG_OVERHEAD
            if need <= len(buf) or position + need > size:
                raise KafkaStorageError(f"unreadable batch at byte {position} of a segment being cleaned")
            buf = os.pread(fd, need, position)
            headers, end = scan_valid_prefix(buf, 0, verify_crc=False)
            if not headers:
                raise KafkaStorageError(f"unreadable batch at byte {position} of a segment being cleaned")
        view = memoryview(buf)
        for h in headers:
            yield h._replace(position=position + h.position), view[h.position:h.end_position]
        position += end


def _with_last(batches: Iterator[tuple[BatchHeader, memoryview]]) -> Iterator[tuple[BatchHeader, memoryview, bool]]:
    """The batches with a flag set on the last one, reading one ahead (a segment is never held whole)."""
    previous = None
    for item in batches:
        if previous is not None:
            yield previous[0], previous[1], False
        previous = item
    if previous is not None:
        yield previous[0], previous[1], True


class _RawRecord(NamedTuple):
    start: int
    end: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    has_value: bool


def _parse_records(data: bytes, count: int) -> list[_RawRecord]:
    """
    The records of a (decompressed) records section, each with its byte span,
    so that kept records are copied as they are (Kafka protocol guide,
    "Record": length, attributes, timestampDelta, offsetDelta, key, value,
    headers).  One-byte varints (the common case) are decoded inline.
    """
    out: list[_RawRecord] = []
    append = out.append
    slow = decode_varint
    new = tuple.__new__
    pos = 0
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            body, length = pos + 1, (b >> 1) ^ -(b & 1)
        else:
            length, body = slow(data, pos)
        end = body + length
        p = body + 1  # attributes
        b = data[p]
        if b < 0x80:
            ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            ts_delta, p = slow(data, p)
        b = data[p]
        if b < 0x80:
            offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            offset_delta, p = slow(data, p)
        b = data[p]
        if b < 0x80:
            key_len, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            key_len, p = slow(data, p)
        key = None
        if key_len >= 0:
            key = data[p:p + key_len]
            p += key_len
        append(new(_RawRecord, (pos, end, offset_delta, ts_delta, key, data[p] != 1)))  # zigzag(-1) == 1: null
        pos = end
    return out


def _map_keys(data: bytes, count: int, base_offset: int, offsets: dict[bytes, int]) -> None:
    """
    Put each keyed record of a records section in C{offsets} (key -> its
    offset): L{_parse_records} without building the records, for the offset map.
    """
    slow = decode_varint
    pos = 0
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            body, length = pos + 1, (b >> 1) ^ -(b & 1)
        else:
            length, body = slow(data, pos)
        p = body + 1  # attributes
        b = data[p]
        p = p + 1 if b < 0x80 else slow(data, p)[1]  # timestampDelta
        b = data[p]
        if b < 0x80:
            offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            offset_delta, p = slow(data, p)
        b = data[p]
        if b < 0x80:
            key_len, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            key_len, p = slow(data, p)
        if key_len >= 0:
            offsets[data[p:p + key_len]] = base_offset + offset_delta
        pos = body + length


def _records_of(batch: memoryview, h: BatchHeader) -> bytes:
    body = bytes(batch[BATCH_HEADER_SIZE:])
    return decompress(h.compression, body) if h.compression else body


def _build_batch(h: BatchHeader, body: bytes, count: int, max_timestamp: int, base_timestamp: int,
                 attributes: int) -> bytes:
    buf = bytearray(BATCH_HEADER_SIZE) + body
    HEADER_STRUCT.pack_into(buf, 0, h.base_offset, len(buf) - LOG_OVERHEAD, h.partition_leader_epoch, 2, 0,
                            attributes, h.last_offset_delta, base_timestamp, max_timestamp, h.producer_id,
                            h.producer_epoch, h.base_sequence, count)
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)


def _empty_batch(h: BatchHeader) -> bytes:
    """Kafka's C{DefaultRecordBatch.writeEmptyHeader}: the header alone, offsets and producer fields kept."""
    return _build_batch(h, b"", 0, h.max_timestamp, h.max_timestamp, h.attributes & _ATTR_KEEP_EMPTY)


class CleanedTransactions:
    """
    What a pass knows of the transactions of the batches it reads, in log
    order (Kafka's C{CleanedTransactionMetadata}).

    An aborted transaction (from the C{.txnindex} files) becomes I{ongoing}
    when the pass reaches its first offset; the producer's transactional
    batches until its ABORT marker are then aborted.  The other transactional
    batches are committed (the cleaned range is below the last stable
    offset, so every transaction in it is decided).  A marker can be
    discarded when the pass met no batch of its transaction: the
    transaction's data is gone from the log.

    @ivar cleaned_index: the C{.txnindex} of the segment being written: an
        ABORT marker that stays adds its transaction to it.
    """

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        #: producer id -> [its aborted transaction, whether a batch of it was met]
        self._ongoing_aborted: dict[int, list[Any]] = {}
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: TransactionIndex | None = None

    def _consume_up_to(self, offset: int) -> None:
        aborted = self._aborted
        while self._next < len(aborted) and aborted[self._next].first_offset <= offset:
            txn = aborted[self._next]
            self._next += 1
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch read: C{True} when it belongs to an aborted transaction (its records go)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(h.producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_control_batch(self, h: BatchHeader, batch: memoryview | bytes) -> bool:
        """
        A control batch read: C{True} when it may be discarded (no batch of
        its transaction was met; an empty control batch, already cleaned; not
        a marker of a transaction it closed).  An ABORT marker that must stay
        adds its transaction to L{cleaned_index}.
        """
        self._consume_up_to(h.last_offset)
        if h.record_count == 0:
            return True
        try:
            marker = read_marker(batch)
        except InvalidRecordError:
            return False  # not a COMMIT or ABORT marker: kept (Kafka)
        if marker.committed:
            if h.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(h.producer_id)
                return False
            return True
        ongoing = self._ongoing_aborted.pop(h.producer_id, None)
        if ongoing is not None and ongoing[1]:
            if self.cleaned_index is not None:
                self.cleaned_index.append(ongoing[0])
            return False
        if h.producer_id in self._ongoing_committed:
            # a batch of this transaction was met but no .txnindex entry names it (an index
            # lost or damaged): the marker stays, or a reload would take the batch's
            # transaction for an open one (a safeguard Kafka's cleaner does not have)
            self._ongoing_committed.discard(h.producer_id)
            return False
        return True


class Cleaner:
    """
    One pass over one log (Kafka's C{Cleaner}).  L{prepare} and the swap run
    on the reactor thread, L{clean} on a cleaner thread (or directly, in tests).

    @param map_capacity: offset-map entries of this cleaner thread.
    @param throttler: the shared I/O L{Throttler}, or C{None} for no limit.
    """

    def __init__(self, map_capacity: int, throttler: Throttler | None = None) -> None:
        self.map_capacity = map_capacity
        self.throttler = throttler

    @staticmethod
    def prepare(to_clean: LogToClean, now_ms: int) -> CleanTask:
        """
        Snapshot what the pass reads: the segments from the log start to the
        end of the dirty range, each with a duplicated descriptor (so that a
        segment deleted meanwhile by retention stays readable), its size and
        modification time; the last offset of each active producer; the
        aborted transactions overlapping the segments (from the C{.txnindex}
        files, L{PartitionLog.collect_aborted_transactions}).
        """
        log = to_clean.log
        views = []
        try:
            for segment in log.segments:
                if segment.base_offset >= to_clean.first_uncleanable_offset:
                    break
                fd = os.dup(segment.fileno)
                views.append(_SegmentView(segment, fd, segment.base_offset, segment.next_offset,
                                          segment.size_bytes, os.fstat(fd).st_mtime_ns,
                                          len(segment.offset_index)))
        except OSError:
            for view in views:
                os.close(view.fd)
            raise
        producers = {pid: entry.batches[-1].last_offset
                     for pid, entry in log.producer_state.producers.items() if entry.batches}
        aborted_txns = log.collect_aborted_transactions(log.log_start_offset, to_clean.first_uncleanable_offset)
        return CleanTask(log, to_clean, views, now_ms, producers, log.config, aborted_txns=aborted_txns)

    def clean(self, task: CleanTask, swap: Callable[[list[LogSegment], int], Any]) -> CleanerStats:
        """
        Build the offset map over the dirty range, then rewrite and swap in
        each group of segments up to its end.

        @param swap: called with C{(old segments, base offset)} for each
            group whose C{.cleaned} files are written: on the reactor thread
            (the service passes a C{blockingCallFromThread} of
            L{PartitionLog.replace_segments}); it raises to abort the pass.
        @return: the pass's L{CleanerStats}; C{end_offset} is the new first
            dirty offset, to checkpoint.
        @raise DedupeBufferTooSmallError: the map cannot hold one segment's keys.
        @raise CleanerAbortedError: L{CleanTask.aborted} was set.
        """
        started = time.monotonic()
        stats = CleanerStats()
        config = task.config
        first_dirty = task.to_clean.first_dirty_offset
        offset_map = OffsetMap(self.map_capacity)
        end_offset = self._build_offset_map(task, offset_map, stats)
        stats.map_elapsed_s = time.monotonic() - started
        stats.end_offset = end_offset
        views = [v for v in task.views if v.base_offset < end_offset]
        clean_views = [v for v in task.views if v.base_offset < first_dirty]
        # Kafka's delete horizon: tombstones in segments last modified before it go
        delete_horizon_ms = (clean_views[-1].mtime_ns // 1_000_000 - config.delete_retention_ms) if clean_views else 0
        txns = CleanedTransactions(task.aborted_txns)  # one for the pass: a transaction may span groups
        for group in self._group(views, config):
            if task.aborted.is_set():
                raise CleanerAbortedError("stopped")
            self._clean_group(task, group, offset_map, delete_horizon_ms, txns, stats)
            swap([v.segment for v in group], group[0].base_offset)
            stats.groups += 1
        stats.elapsed_s = time.monotonic() - started
        return stats

    def _throttle(self, n: int) -> None:
        """
        After each batch: the I/O throttle, and a zero sleep that hands the
        GIL to the reactor thread if it waits for it.  Without it a reactor
        thread back from a system call waits up to the interpreter's switch
        interval (5 ms) behind this CPU-bound thread, every time, and produce
        and fetch throughput halve while a pass runs.
        """
        if self.throttler is not None:
            self.throttler.maybe_throttle(n)
        _sleep(0)

    def _build_offset_map(self, task: CleanTask, offset_map: OffsetMap, stats: CleanerStats) -> int:
        """Map the keys of the dirty range; @return: where the map stops (a segment base offset)."""
        start = task.to_clean.first_dirty_offset
        end = task.to_clean.first_uncleanable_offset
        offsets = offset_map.offsets
        # records of aborted transactions do not go in the map (they must not
        # remove the committed records of their keys); the transactions whose
        # marker is below the dirty range are not met again
        txns = CleanedTransactions([t for t in task.aborted_txns if t.last_offset >= start])
        for view in task.views:
            if view.base_offset < start or view.base_offset >= end:
                continue
            if task.aborted.is_set():
                raise CleanerAbortedError("stopped")
            for h, batch in _iter_batches(view.fd, view.size_bytes):
                if task.aborted.is_set():
                    raise CleanerAbortedError("stopped")
                self._throttle(h.size)
                stats.map_bytes_read += h.size
                if h.is_control:
                    txns.on_control_batch(h, batch)
                    continue
                if txns.on_batch(h) or h.record_count == 0:
                    continue
                _map_keys(_records_of(batch, h), h.record_count, h.base_offset, offsets)
                stats.map_records += h.record_count
                if len(offsets) > offset_map.capacity:
                    if view.base_offset == start:
                        raise DedupeBufferTooSmallError(
                            f"the offset map ({offset_map.capacity} entries) cannot hold the keys of segment"
                            f" {view.base_offset} of {task.log.topic}-{task.log.partition}:"
                            f" raise log.cleaner.dedupe.buffer.size")
                    # The keys mapped from this segment stay: their records are past
                    # the end and stay in the log, so older records of them can go.
                    return view.base_offset
            offset_map.latest_offset = view.next_offset - 1
        return end

    @staticmethod
    def _group(views: list[_SegmentView], config: Any) -> list[list[_SegmentView]]:
        """Kafka's C{groupSegmentsBySize}: runs whose sizes, index sizes and offset spans fit one segment."""
        groups = []
        i = 0
        while i < len(views):
            group = [views[i]]
            size = views[i].size_bytes
            index_bytes = views[i].index_entries * 8
            i += 1
            while i < len(views):
                v = views[i]
                if (size + v.size_bytes > config.segment_bytes
                        or index_bytes + v.index_entries * 8 > config.segment_index_bytes
                        or v.next_offset - 1 - group[0].base_offset > _INT32_MAX):
                    break
                group.append(v)
                size += v.size_bytes
                index_bytes += v.index_entries * 8
                i += 1
            groups.append(group)
        return groups

    def _clean_group(self, task: CleanTask, group: list[_SegmentView], offset_map: OffsetMap,
                     delete_horizon_ms: int, txns: "CleanedTransactions", stats: CleanerStats) -> None:
        """
        Write the kept batches of C{group} to C{<base>.log.cleaned} with
        rebuilt indexes, and the aborted transactions whose marker stays to
        C{<base>.txnindex.cleaned} (no file when none does).
        """
        config = task.config
        directory = task.log.directory
        base = group[0].base_offset
        paths = [os.path.join(directory, segment_file_name(base, suffix) + CLEANED_SUFFIX)
                 for suffix in (".log", ".index", ".timeindex", ".txnindex")]
        for path in paths:
            if os.path.exists(path):
                os.unlink(path)
        fd = os.open(paths[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        offset_index = OffsetIndex(paths[1], base, config.segment_index_bytes)
        time_index = TimeIndex(paths[2], base, config.segment_index_bytes)
        txns.cleaned_index = txn_index = TransactionIndex(paths[3])
        try:
            position = 0
            since_index = 0
            largest = -1
            pending: list[bytes] = []
            pending_bytes = 0
            last_view = group[-1]
            for view in group:
                if task.aborted.is_set():
                    raise CleanerAbortedError("stopped")
                retain_deletes = view.mtime_ns // 1_000_000 > delete_horizon_ms
                for h, batch, last_in_segment in _with_last(_iter_batches(view.fd, view.size_bytes)):
                    if task.aborted.is_set():
                        raise CleanerAbortedError("stopped")
                    self._throttle(h.size)
                    stats.bytes_read += h.size
                    is_last = view is last_view and last_in_segment
                    out = self._filter_batch(task, h, batch, offset_map, retain_deletes, is_last, txns, stats)
                    if out is None:
                        continue
                    if since_index >= config.index_interval_bytes:
                        offset_index.append(h.base_offset, position)
                        since_index = 0
                    since_index += len(out)
                    ts = h.max_timestamp if len(out) == h.size else HEADER_STRUCT.unpack_from(out)[8]
                    if ts > largest:
                        largest = ts
                        time_index.maybe_append(ts, h.base_offset)
                    position += len(out)
                    pending.append(out)
                    pending_bytes += len(out)
                    if pending_bytes >= _READ_CHUNK_BYTES:
                        self._write(fd, pending)
                        self._throttle(pending_bytes)
                        stats.bytes_written += pending_bytes
                        pending, pending_bytes = [], 0
            self._write(fd, pending)
            self._throttle(pending_bytes)
            stats.bytes_written += pending_bytes
            os.fsync(fd)
            offset_index.flush()
            time_index.flush()
            txn_index.flush()
        except BaseException:
            os.close(fd)
            offset_index.close()
            time_index.close()
            txn_index.close()
            for path in paths:
                if os.path.exists(path):
                    os.unlink(path)
            raise
        finally:
            txns.cleaned_index = None
        os.close(fd)
        offset_index.close()
        time_index.close()
        txn_index.close()
        # Kafka: the cleaned segment takes the last modification time of the group's last segment
        os.utime(paths[0], ns=(last_view.mtime_ns, last_view.mtime_ns))

    @staticmethod
    def _write(fd: int, chunks: list[bytes]) -> None:
        if not chunks:
            return
        data = memoryview(b"".join(chunks))
        while data:
            data = data[os.write(fd, data):]

    @staticmethod
    def _filter_batch(task: CleanTask, h: BatchHeader, batch: memoryview, offset_map: OffsetMap,
                      retain_deletes: bool, is_last: bool, txns: "CleanedTransactions",
                      stats: CleanerStats) -> bytes | None:
        """
        The batch as kept: its own bytes, rewritten with fewer records, an
        empty header, or C{None} (Kafka's C{cleanInto} record filter).
        C{retain_deletes}: the batch's segment is newer than the delete
        horizon (its tombstones and its discardable markers stay).
        """
        if h.is_control:
            if not txns.on_control_batch(h, batch) or retain_deletes:
                return bytes(batch)
            stats.markers_removed += 1
            return _empty_batch(h) if is_last else None
        if txns.on_batch(h):  # a batch of an aborted transaction: none of its records stays
            stats.records_read += h.record_count
            stats.aborted_records_removed += h.record_count
            records = []
        else:
            records = _parse_records(_records_of(batch, h), h.record_count) if h.record_count else []
            stats.records_read += len(records)
        get = offset_map.offsets.get
        kept = [r for r in records
                if r.key is not None
                and get(r.key, -1) <= h.base_offset + r.offset_delta
                and (r.has_value or retain_deletes)]
        stats.records_kept += len(kept)
        if kept and len(kept) == len(records):
            return bytes(batch)
        if kept:
            data = _records_of(batch, h)
            body = b"".join(data[r.start:r.end] for r in kept)
            if h.compression:
                body = compress(h.compression, body)
            if h.timestamp_type == 1:  # LogAppendTime: the batch's time is every record's
                max_ts = h.max_timestamp
            else:
                max_ts = max(h.base_timestamp + r.timestamp_delta for r in kept)
            return _build_batch(h, body, len(kept), max_ts, h.base_timestamp, h.attributes)
        active = h.producer_id >= 0 and task.active_producer_last_offsets.get(h.producer_id) == h.last_offset
        if active or is_last:
            return _empty_batch(h)
        return None


class LogCleanerManager:
    """
    The cleaner's state over a broker's logs (Kafka's C{LogCleanerManager}):
    the C{cleaner-offset-checkpoint} files, the log most in need of cleaning
    (L{grab_filthiest_log}), the logs being cleaned and those that failed, and
    one pass on the calling thread (L{clean_log}).  The service that runs
    passes on threads is the broker's L{kafkatw.broker.log_cleaner.LogCleaner}.

    @param log_manager: the broker's L{kafkatw.storage.log_manager.LogManager}.
    @param config: broker config values (C{log.cleaner.*}).
    @param now_ms: wall clock (ms).
    """

    def __init__(self, log_manager: Any, config: Mapping[str, Any], now_ms: Callable[[], int]) -> None:
        self.log_manager = log_manager
        self.now_ms = now_ms
        self.thread_count = max(1, int(config["log.cleaner.threads"]))
        self.backoff_ms = int(config["log.cleaner.backoff.ms"])
        entries = int(config["log.cleaner.dedupe.buffer.size"] * OFFSET_MAP_LOAD_FACTOR
                      / OFFSET_MAP_ENTRY_BYTES / self.thread_count)
        self.throttler = Throttler(float(config["log.cleaner.io.max.bytes.per.second"]))
        self.cleaner = Cleaner(entries, self.throttler)
        self._in_progress: dict[tuple[str, int], CleanTask] = {}
        self._checkpoints: dict[str, dict[tuple[str, int], int]] = {}
        self._log_of: dict[tuple[str, int], PartitionLog] = {}
        #: logs whose pass failed (not stopped): skipped until the broker
        #: restarts or the log is recreated, so that they do not starve the
        #: others (Kafka's C{uncleanablePartitions})
        self.uncleanable: dict[tuple[str, int], PartitionLog] = {}
        #: passes completed, and their stats (the last 100), for tests and metrics
        self.passes = 0
        self.last_stats: CleanerStats | None = None

    # -- checkpoints --------------------------------------------------------

    def _checkpoint_path(self, log: PartitionLog) -> str:
        return os.path.join(os.path.dirname(log.directory), CLEANER_CHECKPOINT_FILE)

    def checkpoint_offset(self, log: PartitionLog) -> int | None:
        """
        The log's C{cleaner-offset-checkpoint} entry, C{None} when it has
        none.  An entry of a log deleted and created again since (another
        L{PartitionLog} under the same name) is dropped.
        """
        path = self._checkpoint_path(log)
        if path not in self._checkpoints:
            self._checkpoints[path] = read_checkpoint(path)
        tp = (log.topic, log.partition)
        if self._log_of.setdefault(tp, log) is not log:
            self._log_of[tp] = log
            self._checkpoints[path].pop(tp, None)
        offset = self._checkpoints[path].get(tp)
        if log.truncated_to is not None and (log.topic, log.partition) not in self._in_progress:
            # a truncated log's new records past the truncation point are dirty
            # (Kafka's LogCleanerManager.maybeTruncateCheckpoint)
            if offset is not None and offset > log.truncated_to:
                offset = log.truncated_to
                self._checkpoints[path][tp] = offset
            log.truncated_to = None
        return offset

    def _update_checkpoint(self, log: PartitionLog, offset: int) -> None:
        path = self._checkpoint_path(log)
        self.checkpoint_offset(log)
        live = {(lg.topic, lg.partition) for lg in self.log_manager.all_logs()
                if self._checkpoint_path(lg) == path}
        offsets = {tp: o for tp, o in self._checkpoints[path].items() if tp in live}
        offsets[(log.topic, log.partition)] = offset
        write_checkpoint(path, offsets)
        self._checkpoints[path] = offsets

    # -- choosing a log -----------------------------------------------------

    def grab_filthiest_log(self) -> LogToClean | None:
        """
        The compacted log that most needs cleaning and is not being cleaned:
        those past C{max.compaction.lag.ms} first, then the highest dirty ratio
        (Kafka's C{grabFilthiestCompactedLog}).
        """
        now = self.now_ms()
        best = None
        for log in self.log_manager.all_logs():
            tp = (log.topic, log.partition)
            if not log.config.compact or tp in self._in_progress or self.uncleanable.get(tp) is log:
                continue
            candidate = cleanable_range(log, self.checkpoint_offset(log), now)
            if not candidate.needs_cleaning:
                continue
            key = (candidate.max_compaction_delay_ms > 0, candidate.max_compaction_delay_ms, candidate.dirty_ratio)
            if best is None or key > best[0]:
                best = (key, candidate)
        return None if best is None else best[1]

    # -- one pass, synchronously (tests, tools) -----------------------------

    def clean_log(self, log: PartitionLog, force: bool = False,
                  swap: Callable[[list[LogSegment], int], Any] | None = None) -> CleanerStats | None:
        """
        Clean C{log} now, on the calling thread (tests; the broker's service
        uses threads).  Without C{force} only when it needs cleaning.

        @return: the pass's stats, or C{None} when nothing was cleanable.
        """
        to_clean = cleanable_range(log, self.checkpoint_offset(log), self.now_ms())
        if to_clean.cleanable_bytes == 0 or not (force or to_clean.needs_cleaning):
            return None
        task = Cleaner.prepare(to_clean, self.now_ms())
        try:
            stats = self.cleaner.clean(task, swap or (lambda old, base: self._swap(task, old, base)))
        finally:
            task.close()
        self._finish(task, stats)
        return stats

    def _swap(self, task: CleanTask, old: list[LogSegment], base_offset: int) -> None:
        """On the reactor thread: swap one cleaned group in, unless the log was deleted or changed."""
        log = task.log
        if task.aborted.is_set() or self.log_manager.get(log.topic, log.partition) is not log:
            self._remove_cleaned(log, base_offset)
            raise CleanerAbortedError("the log was deleted or the broker is stopping")
        views = {id(v.segment): v for v in task.views}
        for segment in old:
            v = views[id(segment)]
            if segment.size_bytes != v.size_bytes or segment.fileno < 0:
                self._remove_cleaned(log, base_offset)
                raise CleanerAbortedError("the log was truncated while it was being cleaned")
        try:
            log.replace_segments(old, base_offset)
        except ValueError as e:
            self._remove_cleaned(log, base_offset)
            raise CleanerAbortedError(str(e)) from None

    @staticmethod
    def _remove_cleaned(log: PartitionLog, base_offset: int) -> None:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            path = os.path.join(log.directory, segment_file_name(base_offset, suffix) + CLEANED_SUFFIX)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def _finish(self, task: CleanTask, stats: CleanerStats) -> None:
        log = task.log
        if self.log_manager.get(log.topic, log.partition) is log:
            end = stats.end_offset
            if log.truncated_to is not None:
                end = min(end, log.truncated_to)
            self._update_checkpoint(log, end)
        self.passes += 1
        self.last_stats = stats
        mb = stats.bytes_read / 1e6
        _log.info("cleaned {partition} (dirty section [{first_dirty}, {offset})): {mb:.1f} MB of log processed"
                  " in {seconds:.3f} s ({rate:.1f} MB/s); indexed {map_mb:.1f} MB in {map_seconds:.3f} s;"
                  " {kept}/{records} records kept, {written} bytes written, {groups} groups",
                  partition=f"{log.topic}-{log.partition}", first_dirty=task.to_clean.first_dirty_offset,
                  offset=stats.end_offset, mb=mb, seconds=stats.elapsed_s,
                  rate=mb / stats.elapsed_s if stats.elapsed_s else 0.0, map_mb=stats.map_bytes_read / 1e6,
                  map_seconds=stats.map_elapsed_s, kept=stats.records_kept, records=stats.records_read,
                  written=stats.bytes_written, groups=stats.groups)
