"""
A model-based test of the broker's Fetch handler (issue 26):
L{kafkatw.broker.apis.KafkaApis.handle_fetch} over several partitions of
real logs, its answer compared exactly with what a model of Kafka's Fetch
says it must be.

Each example builds one broker (L{BrokerHarness}: real
L{kafkatw.storage.log.PartitionLog}s in a temporary directory, a
C{MemoryReactorClock}) whose partitions hold generated logs: batches of
generated sizes, plain and transactional, COMMIT and ABORT markers, open
transactions, a segment roll before any batch, a high watermark at any batch
boundary (the follower has fetched up to it), a log start offset anywhere
below it (DeleteRecords), a leader epoch, and sometimes a leader that moved to
the other broker.  It sends one generated FetchRequest: several topics and
partitions in any order, fetch offsets anywhere in and around C{[log start,
LEO]}, C{partition_max_bytes} and C{max_bytes} drawn around the sizes of the
batches they could return, C{min_bytes}, C{max_wait_ms}, either isolation
level, a consumer's or a follower's C{replica_id}, a current leader epoch
unknown (-1), current, stale or newer, Fetch v4 to v12.  When the answer
waits, an append (made visible to consumers by the follower's next fetch),
a leader change or the clock completes it.

The model (L{Model}) holds per partition the batches as (base offset, last
offset, size), the high watermark, the log start offset and the
transactions; it answers as Kafka does:

  - per partition, the error in the order of Kafka's C{Partition.getLocalLog}:
    UNKNOWN_TOPIC_OR_PARTITION; FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for
    a current leader epoch older / newer than the partition's (KIP-320);
    NOT_LEADER_OR_FOLLOWER when this broker no longer leads it;
    OFFSET_OUT_OF_RANGE for a fetch offset outside C{[log start, LEO]};
  - else the longest run of consecutive whole batches from the one holding
    the fetch offset (which may start before it) that fits in
    C{min(partition_max_bytes, bytes left of max_bytes)}, never past the
    high watermark (consumer), the last stable offset (read_committed) or the
    log end offset (follower); the first partition to return data returns
    its first batch even when it is larger (KIP-74: Kafka's
    C{ReplicaManager.readFromLog} keeps C{minOneMessage} until a partition
    returned bytes), zero limits included; never a later batch after one that
    did not fit, in the same segment or the next (the segment skip of issue 26);
  - a follower's fetch offset, when the read succeeds, is what the follower
    holds: the high watermark moves up to it (Kafka's
    C{ReplicaManager.updateFollowerFetchState}, skipped for a read in error);
  - read_committed: the aborted transactions whose ABORT marker is at or after
    the fetch offset and that start below the LSO, in log order (an empty
    list when no data is returned, null in error and for read_uncommitted).
    Kafka lists those starting below the end of the data returned, a subset:
    the extra ones are harmless to a consumer, and this is kafkatw's rule;
  - the answer is immediate on an error, when C{min_bytes} are there, when
    C{max_wait_ms} is 0, or when the bytes returned fill C{max_bytes};
    else it waits until a follower's fetch sees appended bytes reach
    C{min_bytes}, a consumer's sees the high watermark move on one of its
    partitions (for read_committed: the LSO; kafkatw's rule: Kafka's
    C{DelayedFetch} counts the bytes below it against C{min_bytes}), the
    leadership of one of its partitions changes, or C{max_wait_ms} passes,
    and then answers as a fresh read would.

The answer is decoded with kio and compared field by field; the expected
records are the batches' bytes as they lie in the segment files.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.control import encode_marker_batch

from .test_broker import BrokerHarness

TXN = 0x10
FOLLOWER = 1
TOPICS = ("t", "u")
LEADER_EPOCHS = (0, 3)


@dataclass
class Batch:
    base: int
    last: int
    size: int


@dataclass
class Txn:
    producer_id: int
    first: int
    #: the offset of its COMMIT/ABORT marker, None while it is open
    marker: int | None = None
    aborted: bool = False


@dataclass
class PartitionModel:
    topic: str
    partition: int
    leader_epoch: int
    batches: list[Batch] = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    high_watermark: int = 0
    log_start: int = 0
    moved: bool = False
    #: whether the follower is in the ISR: a fetch of its below the high watermark takes it out (its log
    #: lost records), and the leader alone then holds the high watermark at its log end
    follower_in_sync: bool = True
    #: base offsets of the batches that begin a segment (for the statistics only)
    segment_starts: set[int] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def log_end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else 0

    def add(self, count: int, size: int) -> Batch:
        batch = Batch(self.log_end, self.log_end + count - 1, size)
        self.batches.append(batch)
        return batch

    @property
    def last_stable(self) -> int:
        """Kafka's C{UnifiedLog.lastStableOffset}: before the first open or not yet replicated transaction."""
        hw = self.high_watermark
        unstable = [t.first for t in self.txns if t.marker is None or t.marker >= hw]
        first = min(unstable, default=None)
        return hw if first is None or first >= hw else max(first, self.log_start)

    def read(self, offset: int, max_bytes: int, upper: int, min_one: bool, notes: set[str]) -> list[Batch]:
        """Consecutive whole batches from the one holding C{offset}, below C{upper}, in C{max_bytes}."""
        if offset >= upper:
            return []
        candidates = [b for b in self.batches if b.last >= offset and b.base < upper]
        out: list[Batch] = []
        left = max_bytes
        for i, b in enumerate(candidates):
            if b.size > left:
                if b.base in self.segment_starts:
                    notes.add("stops at a segment's first batch")
                if any(later.size <= left for later in candidates[i + 1:]):
                    notes.add("stops before a batch that does not fit where a later one would")
                if (i == 0 and not min_one or i > 0 and b.base in self.segment_starts) and any(
                        later.size <= left and later.base in self.segment_starts for later in candidates[i + 1:]):
                    # the first batch read in its segment does not fit, the first of a later segment would
                    notes.add("stops where a later segment's first batch would fit (issue 26's skip)")
                break
            out.append(b)
            left -= b.size
        if not out and min_one and candidates:
            notes.add("KIP-74: a first batch larger than the limits")
            out = candidates[:1]
        if out and out[0].base < offset:
            notes.add("the first batch starts before the fetch offset")
        return out

    def aborted(self, offset: int, upper: int) -> list[tuple[int, int]]:
        return [(t.producer_id, t.first) for t in sorted(self.txns, key=lambda t: t.marker or 0)
                if t.aborted and t.marker >= offset and t.first < upper]


@dataclass
class Expected:
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    batches: list[Batch] = field(default_factory=list)
    aborted: list[tuple[int, int]] | None = None


class Model:
    def __init__(self, partitions: list[PartitionModel]) -> None:
        self.partitions = {p.key: p for p in partitions}
        #: what the answers met (hypothesis' statistics: --hypothesis-show-statistics)
        self.notes: set[str] = set()

    def fetch(self, request: dict, version: int) -> tuple[list[tuple[str, list[tuple[int, Expected]]]], int, bool]:
        """The answer to C{request}: per topic the partitions' expected answers; the bytes; any error."""
        replica = request["replica_id"] >= 0
        read_committed = not replica and request["isolation_level"] == 1
        remaining = request["max_bytes"]
        total = 0
        any_error = False
        out = []
        for topic in request["topics"]:
            answers = []
            for p in topic["partitions"]:
                expected = self._partition(topic["topic"], p, version, replica, read_committed, remaining, total)
                if expected.error_code:
                    any_error = True
                size = sum(b.size for b in expected.batches)
                remaining = max(0, remaining - size)
                total += size
                answers.append((p["partition"], expected))
            out.append((topic["topic"], answers))
        return out, total, any_error

    def _partition(self, topic: str, p: dict, version: int, replica: bool, read_committed: bool, remaining: int,
                   total: int) -> Expected:
        expected = self._answer(topic, p, version, replica, read_committed, remaining, total)
        self.notes.add(f"partition answer: {ErrorCode(expected.error_code).name}")
        return expected

    def _answer(self, topic: str, p: dict, version: int, replica: bool, read_committed: bool, remaining: int,
                total: int) -> Expected:
        m = self.partitions.get((topic, p["partition"]))
        if m is None:
            return Expected(ErrorCode.unknown_topic_or_partition)
        current = p["current_leader_epoch"] if version >= 9 else -1
        epoch = m.leader_epoch + 1 if m.moved else m.leader_epoch
        if 0 <= current < epoch:
            return Expected(ErrorCode.fenced_leader_epoch)
        if current > epoch:
            return Expected(ErrorCode.unknown_leader_epoch)
        if m.moved:
            return Expected(ErrorCode.not_leader_or_follower)
        offset = p["fetch_offset"]
        if not m.log_start <= offset <= m.log_end:
            if replica and offset > m.log_end > m.high_watermark:
                self.notes.add("a follower's fetch offset past the log end, the high watermark behind")
            return Expected(ErrorCode.offset_out_of_range)
        if replica:
            if offset < m.high_watermark and m.follower_in_sync:
                m.follower_in_sync = False  # Partition.update_follower: its log lost records it held
                m.high_watermark = m.log_end
                self.notes.add("a follower below the high watermark leaves the ISR")
            elif not m.follower_in_sync and offset >= m.high_watermark:
                m.follower_in_sync = True
            m.high_watermark = max(m.high_watermark, offset)
        upper = m.log_end if replica else m.last_stable if read_committed else m.high_watermark
        batches = m.read(offset, min(p["partition_max_bytes"], remaining), upper, total == 0, self.notes)
        aborted = None
        if read_committed:
            aborted = m.aborted(offset, upper) if batches else []
            if aborted:
                self.notes.add("aborted transactions")
        return Expected(ErrorCode.none, m.high_watermark, m.last_stable, m.log_start, batches, aborted)


# --- the generated logs and requests --------------------------------------------------


#: one partition's log: (roll before it, kind, producer, record count, value bytes) per batch;
#: kind: "plain", "txn" (a transactional batch of the producer), "commit" or "abort" (its marker)
batch_op = st.tuples(st.booleans(), st.sampled_from(["plain", "plain", "txn", "txn", "commit", "abort"]),
                     st.sampled_from([0, 1]), st.integers(1, 3), st.sampled_from([0, 7, 40, 150, 400]))
partition_spec = st.fixed_dictionaries({
    "ops": st.lists(batch_op, min_size=1, max_size=9),
    "leader_epoch": st.sampled_from(LEADER_EPOCHS),
    # where the high watermark is among the batch boundaries, and the log start below it (fractions)
    "hw_at": st.sampled_from([1.0, 1.0, 0.9, 0.6, 0.3, 0.0]),
    "log_start_at": st.sampled_from([0.0, 0.0, 0.0, 0.2, 0.5, 0.8, 1.0]),
    "moved": st.sampled_from([False] * 14 + [True]),
    "close": st.sampled_from(["abort", "commit", None]),  # the marker of the transactions still open at the end
})
#: logs of plain batches of any size, segments of one to a few batches: where the segment skip of issue 26 lived
plain_partition_spec = st.fixed_dictionaries({
    "ops": st.lists(st.tuples(st.booleans(), st.just("plain"), st.just(0), st.integers(1, 3),
                              st.sampled_from([0, 7, 40, 150, 400])), min_size=2, max_size=10),
    "leader_epoch": st.just(0),
    "hw_at": st.sampled_from([1.0, 1.0, 0.6]),
    "log_start_at": st.sampled_from([0.0, 0.0, 0.5]),
    "moved": st.just(False),
    "close": st.just(None),
})


class _Example:
    """What L{BrokerHarness} needs of a test case, with cleanups run after each example."""

    def __init__(self, case: unittest.TestCase) -> None:
        self.case = case
        self.cleanups: list[tuple[Any, tuple]] = []

    def addCleanup(self, f: Any, *args: Any) -> None:
        self.cleanups.append((f, args))

    def successResultOf(self, d: defer.Deferred) -> Any:
        return self.case.successResultOf(d)

    def close(self) -> None:
        while self.cleanups:
            f, args = self.cleanups.pop()
            f(*args)


def raw_batches(log: Any) -> dict[int, bytes]:
    """The batches of a log as they lie in its segment files, by base offset."""
    log.write_pending()
    out = {}
    for segment in log.segments:
        with open(segment.path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            base = int.from_bytes(data[pos:pos + 8], "big")
            end = pos + 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
            out[base] = data[pos:end]
            pos = end
    return out


class FetchModelTests(unittest.TestCase):
    def setUp(self) -> None:
        # durability is not the point here: no fsync, and the logs in memory where there is a tmpfs
        self.patch(os, "fsync", lambda fd: None)
        if os.access("/dev/shm", os.W_OK):
            self.patch(tempfile, "tempdir", "/dev/shm")

    def build(self, example: _Example, specs: list[dict], index_interval: int) -> tuple[BrokerHarness, Model]:
        h = BrokerHarness(example, **{"log.index.interval.bytes": index_interval})
        count = {"t": len(specs) - 1, "u": 1}
        for topic in TOPICS:
            h.create_topic(topic, count[topic], replicas=[0, FOLLOWER])
        models = []
        for i, spec in enumerate(specs):
            topic, index = ("u", 0) if i == len(specs) - 1 else ("t", i)
            m = PartitionModel(topic, index, spec["leader_epoch"])
            if m.leader_epoch:
                h.write_state(topic, index, 0, m.leader_epoch, [0, FOLLOWER])
            partition = h.replica_manager.partitions[(topic, index)]
            log = partition.log
            sequence = [0, 0]
            open_txn: dict[int, Txn] = {}
            for roll, kind, producer, n, value_bytes in spec["ops"]:
                if roll or not m.batches:
                    if m.batches:
                        log.roll()
                    m.segment_starts.add(m.log_end)
                pid = 1000 + producer
                if kind in ("commit", "abort") and pid in open_txn:
                    data = encode_marker_batch(pid, 0, 0, kind == "commit", 1000)
                    log.append_marker(pid, 0, 0, kind == "commit", m.leader_epoch, 1000)
                    txn = open_txn.pop(pid)
                    txn.marker, txn.aborted = m.log_end, kind == "abort"
                    m.add(1, len(data))
                    continue
                records = [(b"k", b"v" * value_bytes)] * n
                if kind == "txn":
                    data = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=sequence[producer],
                                       timestamp_ms=1000, attributes=TXN)
                    sequence[producer] += n
                    if pid not in open_txn:
                        open_txn[pid] = Txn(pid, m.log_end)
                        m.txns.append(open_txn[pid])
                else:
                    data = build_batch(records, timestamp_ms=1000)
                log.append(data, m.leader_epoch)
                m.add(n, len(data))
            for pid, txn in sorted(open_txn.items()) if spec["close"] else ():
                log.append_marker(pid, 0, 0, spec["close"] == "commit", m.leader_epoch, 1000)
                txn.marker, txn.aborted = m.log_end, spec["close"] == "abort"
                m.add(1, len(encode_marker_batch(pid, 0, 0, spec["close"] == "commit", 1000)))
            boundaries = [0] + [b.last + 1 for b in m.batches]
            m.high_watermark = boundaries[int(spec["hw_at"] * (len(boundaries) - 1))]
            partition.update_follower(FOLLOWER, m.high_watermark)  # the follower holds that much
            self.assertEqual(log.high_watermark, m.high_watermark)
            m.log_start = int(spec["log_start_at"] * m.high_watermark)
            log.maybe_increment_log_start_offset(m.log_start)
            if spec["moved"]:
                h.write_state(topic, index, FOLLOWER, m.leader_epoch + 1, [0, FOLLOWER])
                m.moved = True
            self.assertEqual((log.log_end_offset, log.last_stable_offset), (m.log_end, m.last_stable))
            models.append(m)
        return h, Model(models)

    def draw_request(self, data: st.DataObject, model: Model, mode: str) -> tuple[dict, int]:
        """
        A FetchRequest for C{model}'s partitions, and its version.

        @param mode: C{"any"}: a third of them may name unknown partitions,
            offsets out of range and leader epochs not current (in the others,
            errors come only from a partition whose leader moved);
            C{max_wait_ms} 0 or 500, C{min_bytes} 0 or 1.  C{"long poll"}: no
            such faults, C{max_wait_ms} 500 and C{min_bytes} up to more than
            there is.  C{"reads"}: no faults, read_uncommitted, no wait.
        """
        long_poll = mode == "long poll"
        faults = mode == "any" and data.draw(st.sampled_from([False, False, True]))
        keys = list(model.partitions)
        chosen = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=len(keys), unique=True)
                           .flatmap(st.permutations))
        if faults and data.draw(st.booleans()):
            chosen.insert(data.draw(st.integers(0, len(chosen))), data.draw(st.sampled_from([("t", 9), ("nope", 0)])))
        replica_id = data.draw(st.sampled_from([-1, -1, FOLLOWER]))
        isolation_level = data.draw(st.sampled_from([1, 0])) if mode != "reads" else 0
        version = data.draw(st.sampled_from([4, 5, 9, 11, 12, 12, 12]))
        topics: dict[str, list[dict]] = {}
        sizes_of_first: list[tuple[int, bool]] = []
        for key in chosen:
            m = model.partitions.get(key)
            if m is None:
                offset, epoch, sizes = 0, -1, []
            else:
                offsets = {b.base for b in m.batches} | {b.base + 1 for b in m.batches if b.last > b.base} | {
                    m.log_start, m.high_watermark, m.log_end}
                if faults and data.draw(st.booleans()):
                    offset = data.draw(st.sampled_from([m.log_end + 1, m.log_start - 1]))
                else:
                    offset = data.draw(st.sampled_from(sorted(o for o in offsets if m.log_start <= o <= m.log_end)))
                epochs = [-1, m.leader_epoch] + ([m.leader_epoch - 1, m.leader_epoch + 1] if faults else [])
                epoch = data.draw(st.sampled_from(epochs))
                upper = m.log_end if replica_id >= 0 else m.last_stable if isolation_level else m.high_watermark
                sizes = [(b.size, b.base in m.segment_starts) for b in m.batches
                         if b.last >= offset and b.base < upper]
            partition_max_bytes = data.draw(around(sizes))
            if not sizes_of_first:
                sizes_of_first = sizes
            topics.setdefault(key[0], []).append({
                "partition": key[1], "fetch_offset": offset, "partition_max_bytes": partition_max_bytes,
                "current_leader_epoch": epoch, "log_start_offset": -1})
        max_wait = 500 if long_poll else 0 if mode == "reads" else data.draw(st.sampled_from([0, 500]))
        request = {"replica_id": replica_id, "max_wait": max_wait,
                   "min_bytes": data.draw(st.sampled_from([5000, 1, 300, 600] if long_poll else [0, 1])),
                   "max_bytes": data.draw(st.one_of(st.just(1 << 20), around(sizes_of_first),
                                                    *[st.just(1 << 20)] * (mode == "reads"))),
                   "isolation_level": isolation_level,
                   "session_id": 0, "session_epoch": -1,
                   "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                   "forgotten_topics_data": [], "rack_id": ""}
        return request, version

    def check(self, h: BrokerHarness, model: Model, request: dict, version: int, result: Any) -> None:
        expected, _, _ = model.fetch(request, version)
        response = h.decode(1, version, result)
        raws = {key: raw_batches(h.log_manager.get(*key)) for key in model.partitions}
        # the partitions' state after it: a follower's fetch offset in error moved nothing
        self.assertEqual({key: (log.high_watermark, log.last_stable_offset)
                          for key, log in ((key, h.log_manager.get(*key)) for key in model.partitions)},
                         {key: (m.high_watermark, m.last_stable) for key, m in model.partitions.items()})
        got = [(t.topic, [p.partition_index for p in t.partitions]) for t in response.responses]
        self.assertEqual(got, [(t, [index for index, _ in ps]) for t, ps in expected])
        for topic, (name, answers) in zip(response.responses, expected):
            for p, (index, e) in zip(topic.partitions, answers):
                where = f"{name}-{index}"
                self.assertEqual(ErrorCode(p.error_code), ErrorCode(e.error_code), where)
                self.assertEqual((p.high_watermark, p.last_stable_offset), (e.high_watermark, e.last_stable_offset),
                                 where)
                if version >= 5:
                    self.assertEqual(p.log_start_offset, e.log_start_offset, where)
                records = bytes(p.records or b"")
                want = [(b.base, b.last) for b in e.batches]
                if records != b"".join(raws[(name, index)][b.base] for b in e.batches):
                    self.fail(f"{where}: batches {batch_offsets(records)} returned, {want} expected")
                aborted = p.aborted_transactions
                if aborted is not None:
                    aborted = [(a.producer_id, a.first_offset) for a in aborted]
                self.assertEqual(aborted, e.aborted, where)

    @settings(max_examples=250)
    @given(specs=st.lists(partition_spec, min_size=2, max_size=4), index_interval=st.sampled_from([1, 4096]),
           data=st.data())
    def test_fetch(self, specs: list[dict], index_interval: int, data: st.DataObject) -> None:
        """Any request: mostly answered at once (C{--hypothesis-show-statistics} shows what the answers met)."""
        example = _Example(self)
        try:
            self.run_example(example, specs, index_interval, data, "any")
        finally:
            example.close()

    @settings(max_examples=120)
    @given(specs=st.lists(partition_spec, min_size=2, max_size=4), data=st.data())
    def test_long_poll(self, specs: list[dict], data: st.DataObject) -> None:
        """Requests that may wait for C{min_bytes}: completed by an append, a leader change or the clock."""
        example = _Example(self)
        try:
            self.run_example(example, specs, 4096, data, "long poll")
        finally:
            example.close()

    @settings(max_examples=150)
    @given(specs=st.lists(plain_partition_spec, min_size=2, max_size=4), index_interval=st.sampled_from([1, 4096]),
           data=st.data())
    def test_segment_boundaries(self, specs: list[dict], index_interval: int, data: st.DataObject) -> None:
        """
        Plain batches in short segments, limits around their sizes: the reads
        stop at the first batch that does not fit, whichever segment it is in.
        """
        example = _Example(self)
        try:
            self.run_example(example, specs, index_interval, data, "reads")
        finally:
            example.close()

    def run_example(self, example: _Example, specs: list[dict], index_interval: int, data: st.DataObject,
                    mode: str) -> None:
        h, model = self.build(example, specs, index_interval)
        request, version = self.draw_request(data, model, mode)
        try:
            self.fetch(h, model, request, version, data)
        finally:
            for note in sorted(model.notes):
                event(note)

    def fetch(self, h: BrokerHarness, model: Model, request: dict, version: int, data: st.DataObject) -> None:
        """Send C{request}; when it waits, make something happen (or not); check the answer."""
        replica = request["replica_id"] >= 0
        result = h.request(1, version, request)
        _, total, any_error = model.fetch(request, version)
        if any_error or total >= request["min_bytes"] or request["max_wait"] <= 0 \
                or 0 < request["max_bytes"] <= total:
            self.assertNotIsInstance(result, defer.Deferred)
            self.check(h, model, request, version, result)
            return
        self.assertIsInstance(result, defer.Deferred)
        self.assertNoResult(result)
        first = {key: (m.high_watermark, m.last_stable) for key, m in model.partitions.items()}
        watched = [(t["topic"], p["partition"]) for t in request["topics"] for p in t["partitions"]]
        what = data.draw(st.sampled_from(["append", "timeout", "append", "move"]))
        woken = False
        if what == "append":
            key = data.draw(st.sampled_from([k for k, m in model.partitions.items() if not m.moved]))
            m = model.partitions[key]
            records = build_batch([(b"k", b"v" * data.draw(st.sampled_from([0, 40, 400])))], timestamp_ms=1000)
            h.replica_manager.append(*key, records)
            m.add(1, len(records))
            if not m.follower_in_sync:
                m.high_watermark = m.log_end  # the leader alone in the ISR
            if replica:  # woken by the appended bytes
                woken = key in watched and total + len(records) >= request["min_bytes"]
            else:  # woken by the high watermark, once the follower has the batch
                h.replica_manager.partitions[key].update_follower(FOLLOWER, m.log_end)
                m.high_watermark = m.log_end
                read_committed = request["isolation_level"] == 1
                woken = key in watched and (m.last_stable > first[key][1] if read_committed
                                            else m.high_watermark > first[key][0])
        elif what == "move":
            key = data.draw(st.sampled_from(watched))
            m = model.partitions[key]
            h.write_state(*key, FOLLOWER, m.leader_epoch + 1, [0, FOLLOWER])
            m.moved = True
            woken = True
        model.notes.add(f"waited; {what}, {'woken' if woken else 'timed out'}")
        if not woken:
            h.clock.advance(request["max_wait"] / 1000 - 0.001)
            self.assertNoResult(result)
            h.clock.advance(0.002)
        self.check(h, model, request, version, self.successResultOf(result))
        self.assertEqual(h.replica_manager.fetch_purgatory_size, 0)


def around(batches: list[tuple[int, bool]]) -> st.SearchStrategy[int]:
    """
    Byte limits for C{batches}, C{(size, first of its segment)} in log order:
    at and next to the sum of the first ones; that sum and the size of a
    later, smaller one, so that the next batch does not fit where the later
    one would (the segment skip of issue 26 when the next is the first read
    in its segment and the later one the first of a later segment: those
    pairs first); 0, 1 and plenty.
    """
    sizes = [size for size, _ in batches]
    sums = [0]
    for size in sizes:
        sums.append(sums[-1] + size)
    near = st.sampled_from(sums).flatmap(lambda s: st.sampled_from([max(0, s - 1), s, s + 1]))
    pairs = [(j, k) for j in range(len(sizes)) for k in range(j + 1, len(sizes)) if sizes[k] < sizes[j]]
    later = [sums[j] + sizes[k] for j, k in pairs if (j == 0 or batches[j][1]) and batches[k][1]] or [
        sums[j] + sizes[k] for j, k in pairs]
    choices = [near, st.sampled_from([0, 1, 1 << 20])]
    if later:
        choices += [st.sampled_from(later)] * 2
    return st.one_of(*choices)


def batch_offsets(records: bytes) -> list[tuple[int, int]]:
    out = []
    pos = 0
    while pos + 27 <= len(records):
        base = int.from_bytes(records[pos:pos + 8], "big")
        out.append((base, base + int.from_bytes(records[pos + 23:pos + 27], "big")))
        pos += 12 + int.from_bytes(records[pos + 8:pos + 12], "big")
    return out


class FetchRulesTests(unittest.TestCase):
    """The rules the model found broken (3193a12), one example each."""

    def setUp(self) -> None:
        self.h = BrokerHarness(self)
        self.h.create_topic("t", 2, replicas=[0, FOLLOWER])
        self.partition = self.h.replica_manager.partitions[("t", 0)]

    def alone(self, *partitions: int) -> None:
        """The follower leaves the ISR of C{partitions}: their high watermark is their log end offset."""
        for partition in partitions:
            self.h.write_state("t", partition, 0, 1, [0])

    def append(self, partition: int = 0, count: int = 1, value_bytes: int = 100) -> None:
        self.h.replica_manager.append("t", partition, build_batch([(b"k", b"v" * value_bytes)] * count,
                                                                  timestamp_ms=1000))

    def test_the_leader_epoch_is_checked_before_the_leadership(self) -> None:
        """Kafka's C{Partition.getLocalLog}: a stale epoch is fenced even where the leader moved away."""
        self.h.write_state("t", 0, FOLLOWER, 1, [0, FOLLOWER])
        for current, error in [(0, ErrorCode.fenced_leader_epoch), (2, ErrorCode.unknown_leader_epoch),
                               (1, ErrorCode.not_leader_or_follower), (-1, ErrorCode.not_leader_or_follower)]:
            self.assertEqual(self.h.fetch("t", 0, 0, current_leader_epoch=current).error_code, error, current)

    def test_a_follower_fetch_out_of_range_moves_nothing(self) -> None:
        """
        A follower's fetch offset past the log end is an error, not what it
        holds: the high watermark stays, the ISR does not take it back
        (Kafka's C{updateFollowerFetchState} skips a read in error).
        """
        self.append(count=3)
        self.h.fetch("t", 0, 0, replica_id=FOLLOWER)
        self.assertEqual(self.partition.log.high_watermark, 0)
        p = self.h.fetch("t", 0, 10, replica_id=FOLLOWER)
        self.assertEqual(p.error_code, ErrorCode.offset_out_of_range)
        self.assertEqual(self.partition.log.high_watermark, 0)
        self.h.write_state("t", 0, 0, 1, [0])  # the follower fell out of the ISR
        self.h.fetch("t", 0, 10, replica_id=FOLLOWER)
        self.assertEqual(self.partition.isr, [0])

    def test_zero_limits_still_return_the_first_batch(self) -> None:
        """KIP-74: C{partition_max_bytes} or C{max_bytes} 0 still lets the first partition return a batch."""
        self.alone(0, 1)
        self.append(0)
        self.append(1)
        for partition_max_bytes, max_bytes in [(0, 1 << 20), (1 << 20, 0), (0, 0)]:
            request = self.h.fetch_request("t", 0, 0, max_bytes=max_bytes)
            first = request["topics"][0]["partitions"][0]
            first["partition_max_bytes"] = partition_max_bytes
            request["topics"][0]["partitions"].append(dict(first, partition=1))
            answer = self.h.call(1, 12, request).responses[0].partitions
            self.assertEqual([len(p.records) > 100 for p in answer], [True, False], (partition_max_bytes, max_bytes))

    def test_zero_max_bytes_long_polls(self) -> None:
        """C{max_bytes} 0 and nothing to read: the fetch waits for data as any other (not answered at once)."""
        self.alone(1)
        waiting = self.h.request(1, 12, self.h.fetch_request("t", 1, 0, max_bytes=0, max_wait_ms=500))
        self.assertNoResult(waiting)
        self.append(1)
        p = self.h.decode(1, 12, self.successResultOf(waiting)).responses[0].partitions[0]
        self.assertGreater(len(p.records), 100)

    def test_no_aborted_transactions_is_a_null_array(self) -> None:
        """v12 (compact arrays): a read_uncommitted answer's aborted transactions are null (0), not empty (1)."""
        self.assertIsNone(self.h.fetch("t", 0, 0).aborted_transactions)
        request = self.h.fetch_request("t", 0, 0)
        request["isolation_level"] = 1
        self.assertEqual(self.h.call(1, 12, request).responses[0].partitions[0].aborted_transactions, ())
        request["topics"][0]["partitions"][0]["fetch_offset"] = 5
        p = self.h.call(1, 12, request).responses[0].partitions[0]
        self.assertEqual((p.error_code, p.aborted_transactions), (ErrorCode.offset_out_of_range, None))
