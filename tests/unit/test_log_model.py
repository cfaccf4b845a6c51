"""
Model-based tests of L{kafkatw.storage.log.PartitionLog} (issue 26): hypothesis
state machines drive a real log, in a temporary directory, through random
sequences of operations, and compare it after every step with a plain
in-memory model.

L{PartitionLogMachine}, a C{cleanup.policy=delete} log, against L{LogModel}: a
list of segments, each a list of the batches the log must hold (their bytes as
stored: the producer's, with the base offset and partition leader epoch
patched), with the log start offset, the high watermark and the producer
state's transactions.  Operations: appends of one to three batches (one
record to C{max.message.bytes} and just past it, every codec, plain and
transactional), COMMIT and ABORT markers, rolls (explicit, by size, by
time), clock ticks, the high watermark moving up, reads, retention by time
and by bytes, DeleteRecords, truncation, close and reopen (clean and
unclean), and a crash (the directory as a killed process leaves it) that may
tear the last write.  After every step the log's offsets, segments, indexes,
aborted-transaction indexes and last stable offset must be the model's.

A read, L{PartitionLog.read}C{(offset, max_bytes, max_offset, min_one_batch)},
must return exactly the model's answer (docs/storage.md, "What a read
returns"; KIP-74): the candidates are the batches from the one holding
C{offset} (the first one after it in a compacted log) that end below
C{min(max_offset, LEO)}; the answer is their longest prefix whose size is at
most C{max_bytes}, or, when that prefix is empty and C{min_one_batch} is set,
the first candidate alone.  C{max_bytes} is drawn around the model's batch
boundaries (the bytes up to a batch, give or take two; room for the batch
after the next one but not the next one), so that reads end at every segment
boundary: the old read skipped a segment whose first batch did not fit in
the bytes left (issue 26).

L{CompactedLogMachine}, a C{cleanup.policy=compact} log cleaned by the log
cleaner, checks what compaction must keep: batches in increasing,
non-overlapping offset ranges, every record one that was appended at that
offset, the latest record of every key (and, below the end of a pass, only
that one), what no pass rewrote as it was written; reads obey the same rule
over the batches found in the segment files.

Both run with the repository's hypothesis profile (tests/__init__.py: the
default 100 examples, derandomized) and at most 40 steps each, after a
prefill of up to ten batches; the logs live in /dev/shm when it is there,
since every close fsyncs.  With the read of commit 3193a12 (the bug of issue
26) the first machine fails at its third example (derandomized; between the
third and the thirteenth with seeds 1 to 5), shrunk to a few appends and
one read.  L{ReadRuleTests} pins what the machines found besides.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import struct
import tempfile
import unittest

from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.errors import OffsetOutOfRangeError, RecordTooLargeError
from kafkatw.protocol.batch import BatchHeader, parse_batch_headers, unpack_header
from kafkatw.protocol.control import encode_marker_batch
from kafkatw.protocol.records import decode_batches, encode_batch
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import LogConfig
from kafkatw.storage.log_cleaner import LogCleanerManager
from kafkatw.storage.transaction_index import AbortedTxn

#: the clock's start (ms); record timestamps lie a little before the clock
START_MS = 1_700_000_000_000
#: small enough that batches near the limit are cheap, large next to segment.bytes
MAX_MESSAGE_BYTES = 2048
LEADER_EPOCH = 3
#: producer ids that write transactional batches only (a plain batch of a producer
#: with an open transaction is INVALID_TXN_STATE)
TXN_PRODUCERS = (7, 8)
CODECS = (0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd
_PATCH_BASE = struct.Struct(">q")
_PATCH_EPOCH = struct.Struct(">i")

#: where the logs live: a memory file system when there is one (a log's close fsyncs every file)
TMP_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
#: both machines: at most this many steps per example, the default number of examples; no explain
#: phase (it replays a failing sequence under a tracer for minutes, to list lines no passing one ran)
MACHINE_SETTINGS = settings(stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                            phases=[phase for phase in Phase if phase is not Phase.explain])


class Clock:
    """The log's C{now_ms}."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now = now_ms

    def __call__(self) -> int:
        return self.now


def region_bytes(regions) -> bytes:
    """The bytes of a read's file regions."""
    return b"".join(os.pread(r.fileno, r.length, r.position) for r in regions)


# -- batches ------------------------------------------------------------------------------


@st.composite
def batch_specs(draw, producers=(None,) + TXN_PRODUCERS):
    """
    What one batch holds: C{(producer, codec, records, target size in bytes,
    seed, compressible, how far its timestamps lie before the clock)}.
    Sizes reach C{max.message.bytes} and just past it.
    """
    producer = draw(st.sampled_from(producers))
    codec = draw(st.sampled_from(CODECS))
    count = draw(st.integers(1, 4) | st.integers(5, 30))
    size = draw(st.integers(0, 200) | st.integers(200, MAX_MESSAGE_BYTES - 60)
                | st.integers(MAX_MESSAGE_BYTES - 60, MAX_MESSAGE_BYTES + 4))
    seed = draw(st.integers(0, 2**16))
    compressible = draw(st.booleans())
    back_ms = draw(st.integers(0, 50) | st.integers(0, 5000))
    return producer, codec, count, size, seed, compressible, back_ms


def encode_spec(spec, now_ms: int, base_sequence: int = -1, keys: list[bytes] | None = None,
                tombstones: frozenset[int] = frozenset()) -> bytes:
    """
    The batch of a L{batch_specs} spec, its size brought near the target (the
    value length adjusted by what the first encoding missed by, twice).
    """
    producer, codec, count, size, seed, compressible, back_ms = spec
    rng = random.Random(seed)
    keys = keys or [b"k%d" % i for i in range(count)]
    per_record = max(0, (size - 61) // count - 12)
    data = b""
    for _ in range(3):
        if compressible:
            values = [(b"v%d-" % i * (per_record // 3 + 1))[:per_record] for i in range(count)]
        else:
            values = [rng.randbytes(per_record) for _ in range(count)]
        records = [(keys[i], None if i in tombstones else values[i], [], now_ms - back_ms + i % 3)
                   for i in range(count)]
        data = encode_batch(records, compression=codec, producer_id=-1 if producer is None else producer,
                            producer_epoch=-1 if producer is None else 0, base_sequence=base_sequence,
                            is_transactional=producer is not None)
        miss = size - len(data)
        if abs(miss) < 4 or compressible and codec:
            break
        per_record = max(0, per_record + miss // count)
    return data


def stored(raw: bytes, base_offset: int) -> bytes:
    """A batch as the leader writes it: base offset and partition leader epoch patched (outside the CRC)."""
    buf = bytearray(raw)
    _PATCH_BASE.pack_into(buf, 0, base_offset)
    _PATCH_EPOCH.pack_into(buf, 12, LEADER_EPOCH)
    return bytes(buf)


@dataclasses.dataclass
class Batch:
    """One batch of the model: its stored bytes and, for an ABORT marker, its C{.txnindex} entry."""

    data: bytes
    header: BatchHeader
    committed: bool | None = None  # a marker's kind
    aborted: AbortedTxn | None = None

    @property
    def base(self) -> int:
        return self.header.base_offset

    @property
    def last(self) -> int:
        return self.header.last_offset

    @property
    def next(self) -> int:
        return self.header.last_offset + 1

    @property
    def size(self) -> int:
        return len(self.data)


def batch_of(data: bytes, committed: bool | None = None) -> Batch:
    """A L{Batch} of stored bytes (C{committed}: a marker's kind)."""
    return Batch(data, unpack_header(data, 0), committed)


# -- the read rule ------------------------------------------------------------------------


def read_candidates(batches: list, offset: int, upper: int) -> list:
    """
    The batches a read from C{offset} may return: from the one holding
    C{offset} (or the first one after it), those ending below C{upper}.
    """
    out = []
    for b in batches:
        if b.last < offset:
            continue
        if b.last + 1 > upper:
            break
        out.append(b)
    return out


def expected_read(batches: list, offset: int, max_bytes: int, upper: int, min_one_batch: bool) -> list:
    """The longest prefix of the candidates within C{max_bytes}; KIP-74: the first candidate when that is empty."""
    candidates = read_candidates(batches, offset, upper)
    out, total = [], 0
    for b in candidates:
        if total + b.size > max_bytes:
            break
        out.append(b)
        total += b.size
    if not out and min_one_batch and candidates:
        out = candidates[:1]
    return out


def draw_read(data, batches: list, log_start: int, leo: int, upper_choices: list[int], segment_starts: set[int]):
    """
    Draw C{(offset, max_offset, max_bytes, min_one_batch)}: offsets at batch
    and segment boundaries and anywhere near the log, and C{max_bytes} around
    the candidates' cumulative sizes: up to a batch, and then room for a
    later batch (the one after the next, the first one of a later segment).
    """
    points = sorted({log_start, leo} | {b.base for b in batches} | {b.last for b in batches})
    offset = data.draw(st.sampled_from(points) | st.integers(log_start - 2, leo + 2), label="offset")
    max_offset = data.draw(st.none() | st.sampled_from(upper_choices + [b.next for b in batches] or [leo])
                           | st.integers(log_start - 1, leo + 2), label="max_offset")
    upper = leo if max_offset is None else min(max_offset, leo)
    sizes = [b.size for b in read_candidates(batches, offset, upper)]
    cumulative = [0]
    for size in sizes:
        cumulative.append(cumulative[-1] + size)
    k = st.integers(0, len(sizes))
    delta = st.integers(-2, 2)
    choices = [
        # a read that ends at batch k, or a byte or two either side of it
        st.tuples(k, delta).map(lambda t: cumulative[t[0]] + t[1]),
        # room for some bytes past batch k
        st.tuples(k, st.integers(0, MAX_MESSAGE_BYTES + 100)).map(lambda t: cumulative[t[0]] + t[1]),
        st.integers(0, cumulative[-1] + MAX_MESSAGE_BYTES),
        st.sampled_from([0, 1, 1 << 30]),
    ]
    if len(sizes) >= 2:
        # room for the batch after the next one, but not for the next one (when that one is larger)
        choices.append(st.tuples(st.integers(0, len(sizes) - 2), delta).map(
            lambda t: cumulative[t[0]] + sizes[t[0] + 1] + t[1]))
    starts = [b.size for b in read_candidates(batches, offset, upper) if b.base in segment_starts]
    if starts:
        # room for the first batch of some segment after batch k
        choices.append(st.tuples(k, st.sampled_from(starts), delta).map(lambda t: cumulative[t[0]] + t[1] + t[2]))
    max_bytes = data.draw(st.one_of(choices).map(lambda n: max(0, n)), label="max_bytes")
    min_one_batch = data.draw(st.booleans(), label="min_one_batch")
    return offset, max_offset, max_bytes, min_one_batch


# -- index checks -------------------------------------------------------------------------


def offset_index_entries(segment) -> list[tuple[int, int]]:
    """Every entry of the segment's offset index, oldest first, through its public lookups."""
    index = segment.offset_index
    entries = []
    if len(index):
        entry = index.last_entry
        while True:
            entries.append(entry)
            if len(entries) == len(index):
                break
            entry = index.lookup(entry[0] - 1)
    return entries[::-1]


def time_index_entries(segment) -> list[tuple[int, int]]:
    """Every entry C{(timestamp, offset)} of the segment's time index, through its public lookups."""
    index = segment.time_index
    entries = []
    timestamp = -(2**63)
    while len(entries) < len(index) + 1:
        found = index.lookup_at_or_after(timestamp)
        if found is None:
            break
        offset, ts = found
        entries.append((ts, offset))
        timestamp = ts + 1
    return entries


def check_indexes(test, segment, batches: list) -> None:
    """
    The segment's indexes agree with its batches (C{(position, Batch)} in file
    order): each offset-index entry is a batch's base offset and position,
    each time-index entry a batch's base offset and the largest timestamp of
    the segment up to that batch, both strictly increasing.
    """
    at = {b.base: position for position, b in batches}
    offsets = offset_index_entries(segment)
    test.assertEqual(len(offsets), len(segment.offset_index), segment)
    for (o1, p1), (o2, p2) in zip(offsets, offsets[1:]):
        test.assertTrue(o1 < o2 and p1 < p2, (segment, offsets))
    for offset, position in offsets:
        test.assertEqual(at.get(offset), position, (segment, "offset index entry", offset, position))
    running = {}
    largest = -1
    for _, b in batches:
        largest = max(largest, b.header.max_timestamp)
        running[b.base] = (largest, b.header.max_timestamp)
    times = time_index_entries(segment)
    test.assertEqual(len(times), len(segment.time_index), segment)
    for (t1, o1), (t2, o2) in zip(times, times[1:]):
        test.assertTrue(t1 < t2 and o1 < o2, (segment, times))
    for timestamp, offset in times:
        test.assertIn(offset, running, (segment, "time index entry", timestamp, offset))
        test.assertEqual(running[offset], (timestamp, timestamp), (segment, "time index entry", timestamp, offset))
    test.assertEqual(segment.largest_timestamp_ms, largest, segment)


def check_read(test, log, batches: list, log_start: int, leo: int, offset: int, max_bytes: int,
               max_offset: int | None, min_one_batch: bool, segment_starts: set[int] | None = None) -> None:
    """C{log.read(...)} is the model's answer, byte for byte, in non-empty regions."""
    if offset < log_start or offset > leo:
        with test.assertRaises(OffsetOutOfRangeError):
            log.read(offset, max_bytes, max_offset, min_one_batch=min_one_batch)
        return
    regions = log.read(offset, max_bytes, max_offset, min_one_batch=min_one_batch)
    upper = leo if max_offset is None else min(max_offset, leo)
    want = expected_read(batches, offset, max_bytes, upper, min_one_batch)
    got = region_bytes(regions)
    if got != b"".join(b.data for b in want):
        try:
            got_offsets = [(h.base_offset, h.size) for h in parse_batch_headers(got, False, allow_compacted=True)] \
                if got else []
        except Exception as e:  # not whole batches
            got_offsets = f"{len(got)} bytes that are not whole batches ({e})"
        test.fail(f"read({offset}, max_bytes={max_bytes}, max_offset={max_offset}, min_one_batch={min_one_batch}) "
                  f"returned batches {got_offsets}, the model {[(b.base, b.size) for b in want]}; candidates "
                  f"{[(b.base, b.size) for b in read_candidates(batches, offset, upper)]}")
    test.assertTrue(all(r.length > 0 for r in regions), regions)
    candidates = read_candidates(batches, offset, upper)
    if len(want) < len(candidates) and segment_starts is not None and candidates[len(want)].base in segment_starts:
        event("read: stopped before the first batch of a segment")
    if len(want) == 1 and want[0].size > max_bytes:
        event("read: KIP-74 first batch larger than max_bytes")


def _asserts() -> unittest.TestCase:
    """unittest's assertions, for the machines (which are not test cases)."""
    case = unittest.TestCase()
    case.maxDiff = None
    return case


# -- the model of a delete-policy log -----------------------------------------------------


@dataclasses.dataclass
class Segment:
    """A segment of the model: its base offset, creation time (for C{segment.ms}) and batches."""

    base: int
    created_ms: int
    batches: list = dataclasses.field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(b.size for b in self.batches)

    @property
    def next_offset(self) -> int:
        return self.batches[-1].next if self.batches else self.base

    @property
    def largest_timestamp_ms(self) -> int:
        return max((b.header.max_timestamp for b in self.batches), default=-1)

    def positioned(self) -> list[tuple[int, Batch]]:
        out, position = [], 0
        for b in self.batches:
            out.append((position, b))
            position += b.size
        return out


class LogModel:
    """
    What a delete-policy L{PartitionLog} must hold, and its transactions as
    its producer state sees them (Kafka's C{ProducerStateManager}: the open
    transactions, and the completed ones with their marker; the last stable
    offset is computed from them, not remembered).
    """

    def __init__(self, config: LogConfig, base: int, now_ms: int) -> None:
        self.config = config
        self.segments = [Segment(base, now_ms)]
        self.log_start = base
        self.high_watermark = base
        self.open_txns: dict[int, int] = {}  # producer id -> first offset
        self.completed: list[tuple[int, int, int]] = []  # (producer id, first offset, marker offset)

    # -- views

    @property
    def leo(self) -> int:
        return self.segments[-1].next_offset

    def batches(self) -> list[Batch]:
        return [b for s in self.segments for b in s.batches]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def last_stable_offset(self) -> int:
        hw = self.high_watermark
        firsts = list(self.open_txns.values()) + [first for _, first, marker in self.completed if marker >= hw]
        first = min(firsts, default=None)
        return hw if first is None or first >= hw else max(first, self.log_start)

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping C{[fetch_offset, upper)}, in marker order."""
        if upper <= fetch_offset:
            return []
        return [b.aborted for b in self.batches() if b.aborted is not None
                and b.aborted.last_offset >= fetch_offset and b.aborted.first_offset < upper]

    # -- changes

    def _load(self, b: Batch) -> AbortedTxn | None:
        """The producer state's view of one batch; the C{.txnindex} entry of an ABORT that closed a transaction."""
        pid = b.header.producer_id
        if pid < 0:
            return None
        if b.header.is_control:
            first = self.open_txns.pop(pid, None)
            if first is None:
                return None
            self.completed.append((pid, first, b.base))
            if b.committed:
                return None
            lso = min(self.open_txns.values()) if self.open_txns else b.base + 1
            return AbortedTxn(pid, first, b.base, lso)
        if b.header.is_transactional and pid not in self.open_txns:
            self.open_txns[pid] = b.base
        return None

    def rebuild_producer_state(self, txn_index: bool) -> None:
        """As the log rebuilds its producer state from its batches (and, on recovery, the C{.txnindex} files)."""
        self.open_txns, self.completed = {}, []
        for b in self.batches():
            entry = self._load(b)
            if txn_index:
                b.aborted = entry

    def roll(self, now_ms: int) -> None:
        if self.segments[-1].batches:
            self.segments.append(Segment(self.leo, now_ms))

    def append(self, raws: list[bytes], now_ms: int, committed: bool | None = None) -> None:
        active = self.segments[-1]
        if active.batches:
            if active.size + sum(len(r) for r in raws) > self.config.segment_bytes:
                event("append: roll by size")
                self.roll(now_ms)
            elif now_ms - active.created_ms > self.config.segment_ms:
                event("append: roll by time")
                self.roll(now_ms)
        for raw in raws:
            b = batch_of(stored(raw, self.leo), committed)
            self.segments[-1].batches.append(b)
            b.aborted = self._load(b)

    def retention(self, now_ms: int) -> int:
        config = self.config
        candidates = self.segments[:-1]
        deletable = 0
        if config.retention_ms >= 0:
            for s in candidates:
                ts = s.largest_timestamp_ms if s.largest_timestamp_ms >= 0 else s.created_ms
                if now_ms - ts > config.retention_ms:
                    deletable += 1
                else:
                    break
            if deletable and self.segments[1].base <= self.high_watermark:
                event("retention: by time")
        if config.retention_bytes >= 0:
            excess = self.size - config.retention_bytes
            count = 0
            for s in candidates:
                if excess - s.size < 0:
                    break
                excess -= s.size
                count += 1
            deletable = max(deletable, count)
        # never a segment holding offsets at or past the high watermark (Kafka's deletableSegments)
        below = 0
        while below < len(candidates) and self.segments[below + 1].base <= self.high_watermark:
            below += 1
        deletable = min(deletable, below)
        if deletable:
            del self.segments[:deletable]
            self.log_start = max(self.log_start, self.segments[0].base)
            self.high_watermark = max(self.high_watermark, self.log_start)
        return deletable

    def delete_records(self, offset: int) -> bool:
        if offset <= self.log_start:
            return False
        self.log_start = offset
        while len(self.segments) > 1 and self.segments[1].base <= offset:
            del self.segments[0]
        return True

    def truncate(self, offset: int, now_ms: int) -> None:
        if offset >= self.leo:
            return
        if offset <= self.segments[0].base:
            self.segments = [Segment(offset, now_ms)]
            self.log_start = self.high_watermark = offset
            self.open_txns, self.completed = {}, []
            return
        while self.segments[-1].base >= offset:
            self.segments.pop()
        last = self.segments[-1]
        last.batches = [b for b in last.batches if b.last < offset]
        leo = self.leo
        self.log_start = min(self.log_start, leo)
        self.high_watermark = min(self.high_watermark, leo)
        self.rebuild_producer_state(txn_index=False)

    def reopen(self, now_ms: int, clean: bool) -> None:
        """A load: segments take their first batch's time as creation time; the high watermark is the LEO."""
        for s in self.segments:
            first_ts = s.batches[0].header.max_timestamp if s.batches else -1
            s.created_ms = first_ts if first_ts > 0 else now_ms
        self.log_start = self.segments[0].base
        self.high_watermark = self.leo
        if not clean:
            self.rebuild_producer_state(txn_index=True)


# -- the machine for a delete-policy log --------------------------------------------------


class PartitionLogMachine(RuleBasedStateMachine):
    """A L{PartitionLog} with C{cleanup.policy=delete} against L{LogModel}."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="kafkatw-log-model-", dir=TMP_ROOT)
        self.clock = Clock()
        self.generation = 0
        self.log: PartitionLog | None = None
        self.test = _asserts()

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
        shutil.rmtree(self.root, ignore_errors=True)

    def _directory(self) -> str:
        self.generation += 1
        return os.path.join(self.root, f"topic-0.{self.generation}")

    def _open(self, directory: str, clean: bool, recovery_point: int) -> None:
        self.directory = directory
        self.log = PartitionLog(directory, "topic", 0, self.config, recovery_point=recovery_point,
                                clean_shutdown=clean, now_ms=self.clock)

    @initialize(segment_bytes=st.sampled_from([200, 700, 1500, 4000]) | st.integers(150, 5000),
                index_interval_bytes=st.sampled_from([1, 100, 1000, 4096]),
                segment_ms=st.sampled_from([1000, 60000]),
                prefill=st.lists(st.tuples(batch_specs(producers=(None,)), st.booleans(),
                                           st.sampled_from([0, 0, 10, 1500, 70000])), max_size=10))
    def open_log(self, segment_bytes: int, index_interval_bytes: int, segment_ms: int, prefill: list) -> None:
        """
        A new log, with a few plain batches already (each followed by a roll
        or not, and some time): several segments from the start.
        """
        self.config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes,
                                segment_ms=segment_ms, max_message_bytes=MAX_MESSAGE_BYTES)
        self._open(self._directory(), False, 0)
        self.model = LogModel(self.config, 0, self.clock.now)
        for spec, then_roll, then_ms in prefill:
            self.append([spec])
            if then_roll:
                self.roll()
            self.clock.now += then_ms

    # -- rules: writes

    @rule(specs=st.lists(batch_specs(), min_size=1, max_size=3))
    def append(self, specs) -> None:
        """A Produce request's batches (plain or transactional)."""
        sequences = {}
        raws = []
        for spec in specs:
            producer = spec[0]
            sequence = -1
            if producer is not None:
                if producer not in sequences:
                    entry = self.log.producer_state.get(producer)
                    last = entry.last_seq if entry is not None else None
                    sequences[producer] = 0 if last is None else last + 1
                sequence = sequences[producer]
                sequences[producer] += spec[2]
            raws.append(encode_spec(spec, self.clock.now, sequence))
        if any(len(raw) > MAX_MESSAGE_BYTES for raw in raws):
            with self.test.assertRaises(RecordTooLargeError):
                self.log.append(b"".join(raws), LEADER_EPOCH)
            return
        result = self.log.append(b"".join(raws), LEADER_EPOCH)
        leo = self.model.leo
        self.model.append(raws, self.clock.now)
        self.test.assertEqual((result.base_offset, result.last_offset), (leo, self.model.leo - 1))

    @rule(data=st.data(), committed=st.booleans())
    def end_transaction(self, data, committed: bool) -> None:
        """A COMMIT or ABORT marker (WriteTxnMarkers): mostly of an open transaction, or of none."""
        producer = data.draw(st.sampled_from(sorted(self.model.open_txns) or TXN_PRODUCERS)
                             | st.sampled_from(TXN_PRODUCERS), label="producer")
        result = self.log.append_marker(producer, 0, 0, committed, LEADER_EPOCH, self.clock.now)
        self.test.assertEqual(result.base_offset, self.model.leo)
        self.model.append([encode_marker_batch(producer, 0, 0, committed, self.clock.now)], self.clock.now,
                          committed)

    @rule()
    def roll(self) -> None:
        self.log.roll()
        self.model.roll(self.clock.now)

    @rule(ms=st.integers(1, 100) | st.integers(100, 70000))
    def tick(self, ms: int) -> None:
        self.clock.now += ms

    @rule(data=st.data())
    def move_high_watermark(self, data) -> None:
        m = self.model
        offset = data.draw(st.just(m.leo) | st.integers(m.high_watermark, m.leo)
                           | st.sampled_from([b.next for b in m.batches() if b.next > m.high_watermark] or [m.leo]),
                           label="high_watermark")
        self.log.update_high_watermark(offset)
        m.high_watermark = offset

    # -- rules: reads

    @rule(data=st.data())
    def read(self, data) -> None:
        """One to three reads (a consumer's, a follower's, a read-committed consumer's: max_offset)."""
        m = self.model
        batches = m.batches()
        starts = {s.batches[0].base for s in m.segments if s.batches}
        for _ in range(data.draw(st.integers(1, 3), label="reads")):
            offset, max_offset, max_bytes, min_one_batch = draw_read(
                data, batches, m.log_start, m.leo, [m.high_watermark, m.last_stable_offset(), m.leo], starts)
            check_read(self.test, self.log, batches, m.log_start, m.leo, offset, max_bytes, max_offset,
                       min_one_batch, starts)

    @precondition(lambda self: sum(1 for s in self.model.segments if s.batches) >= 2)
    @rule(data=st.data())
    def read_across_a_segment_boundary(self, data) -> None:
        """
        Reads that stop at a batch V at the start of what a segment gives
        them (the read's first batch, or the first batch of a segment the
        read reached) with fewer bytes left than V: as many as the first
        batch of the next segment (what the old read returned instead of
        nothing more, issue 26), any number below V's size, or about as many
        as one of the next few batches.
        """
        m = self.model
        batches = m.batches()
        readable = next(i for i, b in enumerate(batches) if b.last >= m.log_start)
        segment_of, firsts = [], []
        for number, s in enumerate(m.segments):
            if s.batches:
                firsts.append(len(segment_of))
            segment_of += [number] * len(s.batches)
        victims = [v for v in range(readable, len(batches)) if segment_of[v] < segment_of[-1]]
        if not victims:
            return  # the log start is in the last segment with batches
        for _ in range(data.draw(st.integers(1, 4), label="reads")):
            v = data.draw(st.sampled_from(victims), label="victim")
            victim = batches[v]
            start = data.draw(st.integers(max(readable, v - 8), v), label="read_from") if v in firsts else v
            following = batches[next(i for i in firsts if segment_of[i] > segment_of[v])]
            later = [b.size for b in batches[v + 1:v + 4]]
            extra = data.draw(st.integers(min(following.size, victim.size - 1), victim.size - 1)
                              | st.integers(0, victim.size + 100)
                              | st.sampled_from(later).flatmap(lambda n: st.integers(n - 2, n + 2)), label="extra")
            offset = max(batches[start].base, m.log_start)
            max_bytes = max(0, sum(b.size for b in batches[start:v]) + extra)
            min_one_batch = data.draw(st.booleans(), label="min_one_batch")
            check_read(self.test, self.log, batches, m.log_start, m.leo, offset, max_bytes, None, min_one_batch,
                       {batches[i].base for i in firsts})

    # -- rules: deletion

    @rule(data=st.data())
    def retention(self, data) -> None:
        """
        Retention with C{retention.ms} and C{retention.bytes} off, anywhere,
        or about the age or the size of the log up to some segment.
        """
        m, now = self.model, self.clock.now
        ages = [now - max(s.largest_timestamp_ms, 0) + d for s in m.segments for d in (-1, 0)]
        sizes = [sum(s.size for s in m.segments[i:]) + d for i in range(len(m.segments)) for d in (-1, 0)]
        retention_ms = data.draw(st.just(-1) | st.integers(0, 100000) | st.sampled_from(ages), label="retention_ms")
        retention_bytes = data.draw(st.just(-1) | st.integers(0, 10000) | st.sampled_from(sizes),
                                    label="retention_bytes")
        self.config = m.config = dataclasses.replace(self.config, retention_ms=max(-1, retention_ms),
                                                     retention_bytes=max(-1, retention_bytes))
        self.log.config = self.config
        deleted = m.retention(now)
        self.test.assertEqual(self.log.apply_retention(now), deleted)
        if deleted:
            event("retention: segments deleted")

    @rule(data=st.data())
    def delete_records(self, data) -> None:
        m = self.model
        offset = data.draw(st.integers(m.log_start - 1, m.high_watermark + 1), label="delete_records_offset")
        if offset > m.high_watermark:
            with self.test.assertRaises(OffsetOutOfRangeError):
                self.log.maybe_increment_log_start_offset(offset)
            return
        moved = m.delete_records(offset)
        self.test.assertEqual(self.log.maybe_increment_log_start_offset(offset), moved)
        if moved and m.log_start > m.segments[0].base:
            event("DeleteRecords: log start inside a segment")

    @rule(data=st.data())
    def truncate(self, data) -> None:
        m = self.model
        first = m.segments[0].base
        offset = data.draw(st.sampled_from([b.base for b in m.batches()] or [m.leo])
                           | st.integers(max(0, first - 2), m.leo + 1), label="truncate_offset")
        self.log.truncate_to(offset)
        m.truncate(offset, self.clock.now)

    # -- rules: restarts

    @rule(clean=st.booleans(), full_recovery=st.booleans())
    def close_and_reopen(self, clean: bool, full_recovery: bool) -> None:
        """A shutdown, then a start with or without the clean-shutdown marker."""
        self.log.close()
        recovery_point = 0 if full_recovery else self.log.recovery_point
        self.log = None
        self._open(self.directory, clean, recovery_point)
        self.model.reopen(self.clock.now, clean)

    @rule(data=st.data())
    def crash(self, data) -> None:
        """
        The broker killed: the directory as it is (what was written, not the
        index entries still in memory), the last batch written since the last
        flush possibly cut anywhere inside; then an unclean start.
        """
        m = self.model
        image = self._directory()
        shutil.copytree(self.directory, image)
        recovery_point = self.log.recovery_point
        self.log.close()
        self.log = None
        shutil.rmtree(self.directory)
        nonempty = [s for s in m.segments if s.batches]
        if nonempty and nonempty[-1].batches[-1].base >= recovery_point and data.draw(st.booleans(), label="tear"):
            segment = nonempty[-1]
            position, last = segment.positioned()[-1]
            # in a segment rolled since, a cut inside the batch: at its start nothing tells recovery that
            # a batch is missing before the next segment, which it keeps (as Kafka's LogLoader does)
            inside = segment is not m.segments[-1]
            cut = data.draw(st.integers(position + inside, position + last.size - 1), label="cut_at")
            os.truncate(os.path.join(image, f"{segment.base:020d}.log"), cut)
            segment.batches.pop()
            del m.segments[m.segments.index(segment) + 1:]  # the empty active segment after it goes
            event("crash: last batch torn")
        if data.draw(st.booleans(), label="full_recovery"):
            recovery_point = 0
        self._open(image, False, recovery_point)
        m.reopen(self.clock.now, clean=False)

    # -- invariants

    @invariant()
    def agrees_with_the_model(self) -> None:
        if self.log is None:
            return
        log, m, test = self.log, self.model, self.test
        test.assertEqual((log.log_start_offset, log.log_end_offset, log.high_watermark),
                         (m.log_start, m.leo, m.high_watermark))
        lso = log.last_stable_offset
        test.assertEqual(lso, m.last_stable_offset())
        if lso < log.high_watermark:
            event("last stable offset below the high watermark")
        test.assertTrue(m.log_start <= lso <= log.high_watermark <= log.log_end_offset)
        segments = log.segments
        test.assertEqual([(s.base_offset, s.next_offset, s.size_bytes, s.created_ms) for s in segments],
                         [(s.base, s.next_offset, s.size, s.created_ms) for s in m.segments])
        for segment, model_segment in zip(segments, m.segments):
            check_indexes(test, segment, model_segment.positioned())
            test.assertEqual(segment.txn_index.entries,
                             [b.aborted for b in model_segment.batches if b.aborted is not None])
        # the aborted transactions of a read-committed fetch, from the log start, each segment and each marker
        batches = m.batches()
        fetch_offsets = {m.log_start} | {s.base for s in m.segments if s.base >= m.log_start}
        fetch_offsets |= {b.base for b in batches if b.header.is_control and b.base >= m.log_start}
        for fetch_offset in sorted(fetch_offsets):
            for upper in {lso, m.high_watermark, m.leo}:
                aborted = m.aborted_transactions(fetch_offset, upper)
                test.assertEqual(log.collect_aborted_transactions(fetch_offset, upper), aborted,
                                 (fetch_offset, upper))
                if aborted:
                    event("aborted transactions in a read-committed range")
        # everything from the log start, dense offsets
        got = region_bytes(log.read(m.log_start, 1 << 30))
        test.assertEqual(got, b"".join(b.data for b in batches if b.last >= m.log_start))
        for previous, b in zip(batches, batches[1:]):
            test.assertEqual(b.base, previous.next)


class PartitionLogModelTests(SynchronousTestCase):
    def test_a_partition_log_agrees_with_its_model(self) -> None:
        """L{PartitionLogMachine}: a delete-policy log, step by step as its model."""
        run_state_machine_as_test(PartitionLogMachine, settings=MACHINE_SETTINGS)

    # as hypothesis marks its own state machine TestCase.runTest: pytest's hypothesis plugin then
    # reports the run (--hypothesis-show-statistics)
    test_a_partition_log_agrees_with_its_model.is_hypothesis_test = True  # type: ignore[attr-defined]


# -- the machine for a compacted log ------------------------------------------------------


class _OneLog:
    """The part of the log manager the log cleaner uses."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    def all_logs(self) -> list[PartitionLog]:
        return [self.log]

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.log if (topic, partition) == (self.log.topic, self.log.partition) else None


CLEANER_CONFIG = {
    "log.cleaner.threads": 1,
    "log.cleaner.backoff.ms": 15000,
    "log.cleaner.dedupe.buffer.size": 1 << 20,
    "log.cleaner.io.max.bytes.per.second": 1.7976931348623157e308,
}
KEYS = [b"key-%d" % i for i in range(6)]
#: a batch of records whose keys are drawn (from a seed) among the first C{n} keys, a few of them tombstones
KEYED_BATCHES = st.tuples(batch_specs(producers=(None,)), st.integers(1, len(KEYS)), st.integers(0, 2**16),
                          st.sets(st.integers(0, 29), max_size=3))


class CompactedLogMachine(RuleBasedStateMachine):
    """
    A L{PartitionLog} with C{cleanup.policy=compact}, cleaned by the log
    cleaner, against the records appended to it (offset -> key, value).
    """

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="kafkatw-compacted-model-", dir=TMP_ROOT)
        self.clock = Clock()
        self.generation = 0
        self.log: PartitionLog | None = None
        self.test = _asserts()
        self.records: dict[int, tuple[bytes, bytes | None]] = {}
        #: no pass of the cleaner rewrote a batch at or past this offset
        self.cleaned_below = 0

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
        shutil.rmtree(self.root, ignore_errors=True)

    def _open(self, directory: str, clean: bool, recovery_point: int = 0) -> None:
        self.directory = directory
        self.log = PartitionLog(directory, "compacted", 0, self.config, recovery_point=recovery_point,
                                clean_shutdown=clean, now_ms=self.clock)
        self.cleaner = LogCleanerManager(_OneLog(self.log), CLEANER_CONFIG, self.clock)

    def _directory(self) -> str:
        self.generation += 1
        return os.path.join(self.root, f"compacted-0.{self.generation}")

    @initialize(segment_bytes=st.sampled_from([300, 800, 2000]) | st.integers(200, 3000),
                index_interval_bytes=st.sampled_from([1, 100, 4096]),
                prefill=st.lists(st.tuples(KEYED_BATCHES, st.booleans()), max_size=10))
    def open_log(self, segment_bytes: int, index_interval_bytes: int, prefill: list) -> None:
        """A new log with a few keyed batches already (each followed by a roll or not), all below the high watermark."""
        # tombstones and markers stay (the delete horizon depends on files' modification times)
        self.config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes,
                                max_message_bytes=MAX_MESSAGE_BYTES, cleanup_policy="compact",
                                delete_retention_ms=2**62, min_cleanable_dirty_ratio=0.0)
        self._open(self._directory(), False)
        for spec, then_roll in prefill:
            self.append([spec])
            if then_roll:
                self.log.roll()
        self.log.update_high_watermark(self.log.log_end_offset)

    # -- the log as its files hold it

    def scan(self) -> list[tuple[object, list[tuple[int, Batch]]]]:
        """Each segment with its batches (position, L{Batch}), read from its file (CRCs checked)."""
        out = []
        for segment in self.log.segments:
            data = os.pread(segment.fileno, segment.size_bytes, 0)
            test_batches = []
            for h in parse_batch_headers(data, True, allow_compacted=True) if data else []:
                test_batches.append((h.position, batch_of(data[h.position:h.position + h.size])))
            out.append((segment, test_batches))
        return out

    # -- rules

    @rule(specs=st.lists(KEYED_BATCHES, min_size=1, max_size=2))
    def append(self, specs) -> None:
        """Batches of records whose keys are drawn from the first C{n} keys; a few of them tombstones."""
        raws = []
        for spec, key_count, key_seed, tombstones in specs:
            rng = random.Random(key_seed)
            keys = [KEYS[rng.randrange(key_count)] for _ in range(spec[2])]
            raws.append(encode_spec(spec, self.clock.now, keys=keys, tombstones=frozenset(tombstones)))
        if any(len(raw) > MAX_MESSAGE_BYTES for raw in raws):
            with self.test.assertRaises(RecordTooLargeError):
                self.log.append(b"".join(raws), LEADER_EPOCH)
            return
        leo = self.log.log_end_offset
        result = self.log.append(b"".join(raws), LEADER_EPOCH)
        self.test.assertEqual(result.base_offset, leo)
        base = leo
        for raw in raws:
            [batch] = decode_batches(raw)
            for record in batch.records:
                self.records[base + record.offset] = (record.key, record.value)
            base += len(batch.records)
        self.test.assertEqual(self.log.log_end_offset, base)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(ms=st.integers(1, 100000))
    def tick(self, ms: int) -> None:
        self.clock.now += ms

    @rule(data=st.data())
    def move_high_watermark(self, data) -> None:
        log = self.log
        self.log.update_high_watermark(data.draw(
            st.just(log.log_end_offset) | st.integers(log.high_watermark, log.log_end_offset), label="high_watermark"))

    @rule()
    def clean(self) -> None:
        leo, start = self.log.log_end_offset, self.log.log_start_offset
        stats = self.cleaner.clean_log(self.log, force=True)
        self.test.assertEqual((self.log.log_end_offset, self.log.log_start_offset), (leo, start))
        if stats is not None:
            self.cleaned_below = max(self.cleaned_below, stats.end_offset)
            if stats.records_kept < stats.records_read:
                event("clean: records removed")
            # below the end of the pass, one record per key: the latest one written below that end
            batches = [b for _, found in self.scan() for _, b in found if b.base < stats.end_offset]
            kept = [(r.offset, r.key) for b in decode_batches(b"".join(b.data for b in batches)) for r in b.records
                    if r.offset < stats.end_offset]
            latest = {}
            for offset in sorted(o for o in self.records if o < stats.end_offset):
                latest[self.records[offset][0]] = offset
            self.test.assertEqual(sorted(kept), sorted((o, k) for k, o in latest.items() if o >= start))

    @rule(data=st.data())
    def read(self, data) -> None:
        log = self.log
        scanned = self.scan()
        batches = [b for _, found in scanned for _, b in found]
        starts = {found[0][1].base for _, found in scanned if found}
        offset, max_offset, max_bytes, min_one_batch = draw_read(
            data, batches, log.log_start_offset, log.log_end_offset, [log.high_watermark, log.log_end_offset], starts)
        check_read(self.test, log, batches, log.log_start_offset, log.log_end_offset, offset, max_bytes,
                   max_offset, min_one_batch, starts)

    @rule(data=st.data())
    def truncate(self, data) -> None:
        """Follower truncation, never below the high watermark (nothing cleaned is lost)."""
        log = self.log
        offset = data.draw(st.integers(log.high_watermark, log.log_end_offset), label="truncate_offset")
        if offset >= log.log_end_offset:
            leo = log.log_end_offset
        elif offset <= log.segments[0].base_offset:
            leo = offset
        else:
            # the batches ending at or past the offset go, whole; the segments starting at or past it too
            kept = [(segment, [b for _, b in found if b.last < offset])
                    for segment, found in self.scan() if segment.base_offset < offset]
            segment, batches = kept[-1]
            leo = batches[-1].next if batches else segment.base_offset
        log.truncate_to(offset)
        self.test.assertEqual(log.log_end_offset, leo)
        self.records = {o: r for o, r in self.records.items() if o < leo}

    @rule(clean=st.booleans(), crash=st.booleans())
    def reopen(self, clean: bool, crash: bool) -> None:
        """A clean restart, an unclean one, or a crash (the files as they are, then an unclean start)."""
        if crash:
            image = self._directory()
            shutil.copytree(self.directory, image)
            recovery_point = self.log.recovery_point
            self.log.close()
            shutil.rmtree(self.directory)
            self._open(image, False, recovery_point)
            return
        self.log.close()
        self._open(self.directory, clean, self.log.recovery_point if clean else 0)

    # -- invariants

    @invariant()
    def compacted_as_it_should_be(self) -> None:
        if self.log is None:
            return
        log, test = self.log, self.test
        scanned = self.scan()
        batches = [b for _, found in scanned for _, b in found]
        previous_next = log.log_start_offset
        for segment, found in scanned:
            test.assertTrue(not found or found[0][1].base >= segment.base_offset, segment)
            test.assertEqual(segment.next_offset, found[-1][1].next if found else segment.base_offset)
            check_indexes(test, segment, found)
        # batches in increasing, non-overlapping offset ranges; records at increasing offsets within them
        for b in batches:
            test.assertGreaterEqual(b.base, previous_next, b.header)
            previous_next = b.next
        test.assertEqual(log.log_end_offset, batches[-1].next if batches else log.segments[-1].base_offset)
        present = {}
        for b in decode_batches(b"".join(b.data for b in batches)):
            for record in b.records:
                test.assertTrue(b.base_offset <= record.offset <= b.last_offset)
                test.assertNotIn(record.offset, present)
                present[record.offset] = (record.key, record.value)
        for offset, record in present.items():
            test.assertEqual(self.records.get(offset), record, offset)
        # the latest record of every key stays, and what was never cleaned is as written
        latest = {}
        for offset in sorted(self.records):
            latest[self.records[offset][0]] = offset
        for key, offset in latest.items():
            test.assertIn(offset, present, (key, offset))
        dirty = self.cleaned_below
        test.assertEqual(sorted(o for o in present if o >= dirty), sorted(o for o in self.records if o >= dirty))
        # everything from the log start
        got = region_bytes(log.read(log.log_start_offset, 1 << 30))
        test.assertEqual(got, b"".join(b.data for b in batches if b.last >= log.log_start_offset))


class CompactedLogModelTests(SynchronousTestCase):
    def test_a_compacted_log_keeps_what_compaction_must_keep(self) -> None:
        """L{CompactedLogMachine}: a compacted log, cleaned, reopened, truncated above its high watermark."""
        run_state_machine_as_test(CompactedLogMachine, settings=MACHINE_SETTINGS)

    test_a_compacted_log_keeps_what_compaction_must_keep.is_hypothesis_test = True  # type: ignore[attr-defined]


class ReadRuleTests(SynchronousTestCase):
    """What the machines found, pinned."""

    def test_min_one_batch_returns_the_first_batch_even_with_max_bytes_0(self) -> None:
        """
        KIP-74: with C{min_one_batch} the first batch comes whole whatever
        C{max_bytes}, 0 included (Kafka's C{LogSegment.read} takes
        C{max(maxSize, first batch size)} before looking at 0; docs/storage.md:
        "When nothing fits and min_one_batch is set, the first batch is
        returned whole").
        """
        directory = tempfile.mkdtemp(prefix="kafkatw-read-rule-", dir=TMP_ROOT)
        self.addCleanup(shutil.rmtree, directory, True)
        log = PartitionLog(os.path.join(directory, "topic-0"), "topic", 0, LogConfig(), now_ms=Clock())
        self.addCleanup(log.close)
        first, second = (encode_batch([(b"k", b"v%d" % i, [], START_MS)]) for i in range(2))
        log.append(first + second, LEADER_EPOCH)
        self.assertEqual(region_bytes(log.read(0, 0)), stored(first, 0))
        self.assertEqual(region_bytes(log.read(1, 0, min_one_batch=True)), stored(second, 1))
        self.assertEqual(log.read(0, 0, min_one_batch=False), [])
        self.assertEqual(region_bytes(log.read(0, 1)), stored(first, 0))
