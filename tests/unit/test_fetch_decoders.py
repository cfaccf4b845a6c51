"""
The clients' decoders of Fetch data that ends in a partial batch (issue 26).

A partition's records in a Fetch response may end in a partial batch: Kafka
slices the log by bytes (C{LogSegment.read} returns C{log.slice(position,
size)}), so a size-limited answer cuts its last batch anywhere (only an
answer with no whole batch is replaced by an empty one: C{ReplicaManager}
for Fetch v3+).  kafkatw's broker answers whole batches, but its clients
talk to Kafka too.  A decoder must return exactly the records of the whole
batches from the fetch offset on (the first batch may start before it, a
batch may even lie wholly before it), drop the partial tail without an
error, and fetch next from the offset after the last whole batch.

Checked here with generated batches (record counts, sizes, codecs, control
batches) cut at every kind of point — at a batch boundary, inside the next
batch's offset-and-length prefix, inside its header, inside its records —
with the compiled accelerator (C{kafkatw.protocol._speedups}) and with the
pure-Python loops, which must agree:

  - L{kafkatw.protocol.records.decode_fetched} and C{scan_fetched} /
    C{scan_next_offset}, and the Spark source's
    L{kafkatw.spark._source._fetched_to_arrow} on the same data;
  - L{kafkatw.client.consumer.Consumer} over a fake broker that answers each
    Fetch from the batch holding the fetch offset, with fewer batches than
    there are, nothing, or a cut tail: every record comes out once, in order,
    and each Fetch asks for the offset after the last whole batch received;
  - the Spark source's L{kafkatw.spark._source._read_range} over the same
    broker: exactly the rows of its offset range C{[start, end)}.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from hypothesis import event, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.trial.unittest import SkipTest

from kafkatw.client.consumer import Consumer, ConsumerRecord
from kafkatw.protocol import records as R

from .test_consumer import FakeClient, fetch_response
from .test_records import compiled_speedups

try:
    import pyarrow  # noqa: F401

    from kafkatw.spark import _source
    from kafkatw.spark._options import parse_options
except ImportError:  # pragma: no cover - the spark extra is not installed
    _source = None

T = "t"
HEADER_SIZE = 61  # a v2 batch's header: offset, length (the 12-byte prefix), epoch, magic, CRC ... record count
CONTROL_KEY = b"\x00\x00\x00\x01"  # version 0, COMMIT

record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=200), st.integers(0, 400).map(lambda n: b"x" * n)),
    st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=2),
)
#: one batch: its records, codec, and whether it is a control batch (a transaction marker)
batch_st = st.tuples(st.lists(record_st, min_size=1, max_size=12), st.sampled_from([0, 0, 1, 2, 3, 4]),
                     st.sampled_from([False, False, False, False, True]))


class Log:
    """Batches from L{batch_st} specs at consecutive offsets from C{first}: bytes, offsets, records."""

    def __init__(self, specs: list, first: int = 0, partition: int = 0) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # (base offset, last offset, bytes)
        self.records: list[ConsumerRecord] = []  # of the data batches, in offset order
        offset = first
        for records, codec, control in specs:
            if control:
                records = [(CONTROL_KEY, b"\x00\x00\x00\x00\x00\x00", [], 1000)]
                data = R.encode_batch_py(records, base_offset=offset, is_control=True, is_transactional=True,
                                         producer_id=7, producer_epoch=0)
            else:
                records = [(k, v, h, 1_700_000_000_000 + i) for i, (k, v, h) in enumerate(records)]
                data = R.encode_batch_py(records, base_offset=offset, compression=codec)
                self.records.extend(ConsumerRecord(T, partition, offset + i, ts, 0, k, v, tuple(h))
                                    for i, (k, v, h, ts) in enumerate(records))
            self.batches.append((offset, offset + len(records) - 1, data))
            offset += len(records)
        self.end = offset

    def from_offset(self, fetch_offset: int, earlier: int = 0) -> list[tuple[int, int, bytes]]:
        """
        The batches a broker reads from C{fetch_offset}: from the one holding
        it, and C{earlier} batches before that (wholly before the offset).
        """
        first = next((i for i, b in enumerate(self.batches) if b[1] >= fetch_offset), len(self.batches))
        return self.batches[max(0, first - earlier):]


def draw_cut(data: st.DataObject, batches: list[tuple[int, int, bytes]], min_whole: int = 0) -> tuple[bytes, int]:
    """
    C{batches}' bytes cut at a drawn point: after C{k} whole batches (at
    least C{min_whole} when there are that many), then nothing or a part of
    the next one ending inside its prefix, its header or its records.

    @return: (the bytes, how many whole batches they hold).
    """
    k = data.draw(st.integers(min(min_whole, len(batches)), len(batches)), label="whole batches")
    whole = b"".join(b[2] for b in batches[:k])
    if k == len(batches):
        event("cut: all the batches")
        return whole, k
    size = len(batches[k][2])
    where = data.draw(st.sampled_from(["records", "header", "prefix", "boundary"]), label="cut")
    event(f"cut: {where} ({'after whole batches' if k else 'no whole batch'})")
    low, high = {"boundary": (0, 0), "prefix": (1, 11), "header": (12, HEADER_SIZE - 1),
                 "records": (HEADER_SIZE, size - 1)}[where]
    into = data.draw(st.integers(low, high), label="bytes of it")
    return whole + batches[k][2][:into], k


def expected(log: Log, batches: list[tuple[int, int, bytes]], fetch_offset: int) -> tuple[list, int]:
    """The records of C{batches} (whole ones) from C{fetch_offset} on, and the offset after them."""
    if not batches:
        return [], fetch_offset
    base, last = batches[0][0], batches[-1][1]
    return [r for r in log.records if max(base, fetch_offset) <= r.offset <= last], max(fetch_offset, last + 1)


class _Decoders:
    """The record loops to run each check with: the pure-Python ones, and the compiled ones when built."""

    def setUp(self) -> None:
        self.implementations: dict[str, Any] = {"python": None}
        try:
            self.implementations["compiled"] = compiled_speedups()
        except SkipTest:
            pass  # not built (and not required): the Python loops only

    @contextmanager
    def using(self, sp: Any) -> Iterator[None]:
        saved = R._speedups
        R._speedups = sp
        try:
            yield
        finally:
            R._speedups = saved


def cut_points(batches: list[tuple[int, int, bytes]], data: st.DataObject) -> list[tuple[str, int, int]]:
    """
    Where to cut C{batches}' bytes: for each batch, at its start, inside its
    prefix (first and last byte), inside its header (first and last byte, and
    one drawn), inside its records (first and last byte, and one drawn); and
    at the end.

    @return: C{(kind, position, whole batches before it)}.
    """
    out = []
    pos = 0
    for k, (_base, _last, raw) in enumerate(batches):
        size = len(raw)
        inside = {"boundary": [0], "prefix": [1, 11], "header": [12, HEADER_SIZE - 1, data.draw(st.integers(13, 59))],
                  "records": [HEADER_SIZE, size - 1, data.draw(st.integers(HEADER_SIZE, size - 1))]}
        out.extend((kind, pos + into, k) for kind, intos in inside.items() for into in intos)
        pos += size
    out.append(("end", pos, len(batches)))
    return out


class DecodeFetchedTests(_Decoders, unittest.SynchronousTestCase):
    @settings(max_examples=100)
    @given(specs=st.lists(batch_st, min_size=1, max_size=5), first=st.sampled_from([0, 5, 2**40]), data=st.data())
    def test_a_partial_tail_is_dropped(self, specs: list, first: int, data: st.DataObject) -> None:
        """
        C{decode_fetched}, C{scan_fetched} and the Spark source's
        C{_fetched_to_arrow} of the batches from the one holding the fetch
        offset, cut at every kind of point after every batch: the whole
        batches' records from the fetch offset, the offset after them, the
        same with either record loop.
        """
        log = Log(specs, first)
        fetch_offset = data.draw(st.integers(first, log.end), label="fetch offset")
        batches = log.from_offset(fetch_offset, data.draw(st.sampled_from([0, 0, 1]), label="earlier batches"))
        start = data.draw(st.integers(first, log.end + 1), label="range start")
        end = data.draw(st.integers(start, log.end + 2), label="range end")
        whole = b"".join(b[2] for b in batches)
        for kind, position, k in cut_points(batches, data):
            cut = whole[:position]
            where = f"{kind} cut at byte {position} after {k} whole batches"
            records, next_offset = expected(log, batches[:k], fetch_offset)
            self.assertEqual(R.scan_fetched(cut, fetch_offset)[0], next_offset, where)
            self.assertEqual(R.scan_next_offset(cut, fetch_offset), next_offset, where)
            for name, sp in self.implementations.items():
                with self.using(sp):
                    self.assertEqual(R.decode_fetched(cut, T, 0, fetch_offset, ConsumerRecord),
                                     (records, next_offset), f"{name}: {where}")
                    if _source is not None:
                        piece = _source._undecoded(cut, T, 0, fetch_offset, ConsumerRecord, True, None)[0][0]
                        self.assertEqual(piece.next_offset, next_offset, where)
                        self.assertEqual(rows(_source._fetched_to_arrow(piece, start, end, True)),
                                         [arrow_row(r) for r in records if start <= r.offset < end],
                                         f"{name}: {where}")


def rows(batch: Any) -> list[tuple]:
    if batch is None:
        return []
    return [(r["offset"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
            for r in batch.to_pylist()]


def arrow_row(r: ConsumerRecord) -> tuple:
    return r.offset, r.key, r.value, list(r.headers)


class FakeBroker:
    """
    Answers the consumer's Fetches from L{Log}s: from the batch holding the
    fetch offset, the drawn number of whole batches and a cut tail (the first
    partition of a request gets at least one whole batch, as KIP-74 has it),
    or sometimes nothing.  It checks that each Fetch asks for the offset after
    the last whole batch it sent for that partition.
    """

    def __init__(self, test: unittest.SynchronousTestCase, client: FakeClient, logs: dict[tuple[str, int], Log],
                 starts: dict[tuple[str, int], int], data: st.DataObject) -> None:
        self.test = test
        self.client = client
        self.logs = logs
        self.data = data
        #: per partition: the offset the next Fetch must ask for
        self.next_offsets = dict(starts)
        self.answered = 0

    def answer(self) -> bool:
        """Answer the pending Fetches; whether there were any."""
        pending = self.client.pending(1)
        for _node, _key, body, d in pending:
            partitions = {}
            first = True
            for topic in body["topics"]:
                for p in topic["partitions"]:
                    tp = (topic["topic"], p["partition"])
                    fetch_offset = p["fetch_offset"]
                    self.test.assertEqual(fetch_offset, self.next_offsets[tp], tp)
                    log = self.logs[tp]
                    earlier = self.data.draw(st.sampled_from([0, 0, 0, 1]), label="earlier batches")
                    batches = log.from_offset(fetch_offset, earlier)
                    ahead = sum(1 for b in batches if b[1] < fetch_offset)  # batches wholly before the offset
                    if ahead:
                        event("a batch wholly before the fetch offset")
                    elif batches and fetch_offset > batches[0][0]:
                        event("a fetch offset inside a batch")
                    if len(batches) > ahead and self.data.draw(st.sampled_from([True, True, True, False]),
                                                               label="answered"):
                        records, k = draw_cut(self.data, batches, ahead + 1 if first else 0)
                        if k:
                            self.next_offsets[tp] = max(fetch_offset, batches[k - 1][1] + 1)
                    else:
                        records = b""
                    first = first and not records
                    partitions[tp] = {"records": records, "high_watermark": log.end}
            self.answered += 1
            d.callback(fetch_response(partitions))
        return bool(pending)


class ConsumerTests(_Decoders, unittest.SynchronousTestCase):
    @settings(max_examples=150)
    @given(specs=st.lists(st.lists(batch_st, max_size=5), min_size=1, max_size=2),
           max_poll_records=st.sampled_from([500, 1, 3]), data=st.data())
    def test_every_record_once_in_order(self, specs: list, max_poll_records: int, data: st.DataObject) -> None:
        """
        Responses with fewer batches than there are, none, or a cut tail; a
        start inside a batch: the consumer returns each record from its start
        once, in order, and every Fetch asks for the first offset not received.
        """
        logs = {(T, p): Log(s, partition=p) for p, s in enumerate(specs)}
        starts = {tp: data.draw(st.integers(0, log.end), label=f"start of {tp}") for tp, log in logs.items()}
        for name, sp in self.implementations.items():
            with self.using(sp):
                clock = Clock()
                client = FakeClient(clock, {tp: 1 for tp in logs})
                consumer = Consumer(clock, client=client, max_poll_records=max_poll_records, auto_offset_reset="none")
                broker = FakeBroker(self, client, logs, starts, data)
                consumer.assign(list(logs))
                for tp, start in starts.items():
                    consumer.seek(tp, start)
                clock.advance(0)
                got: dict[tuple[str, int], list] = {tp: [] for tp in logs}
                for _ in range(200):
                    if all(self.successResultOf(consumer.position(tp)) == log.end for tp, log in logs.items()):
                        break
                    broker.answer()
                    for r in self.successResultOf(consumer.poll()):
                        got[(r.topic, r.partition)].append(r)
                self.assertEqual(got, {tp: [r for r in log.records if r.offset >= starts[tp]]
                                       for tp, log in logs.items()}, name)
                self.successResultOf(consumer.close())


class FakeBlockingConsumer:
    """
    What the Spark source's L{_source._read_range} uses of
    L{kafkatw.client.blocking.BlockingConsumer}, over a L{Consumer} on a
    L{Clock} whose Fetches a L{FakeBroker} answers as its C{poll} waits.
    """

    made: list["FakeBlockingConsumer"] = []
    broker_for: Any = None  # (test, client, starts) -> FakeBroker

    def __init__(self, bootstrap_servers: str, **options: Any) -> None:
        options.pop("client_id", None)
        options.pop("security", None)
        self.clock = Clock()
        self.client = FakeClient(self.clock, {(T, 0): 1})
        self.consumer = Consumer(self.clock, client=self.client, **options)
        self.broker: FakeBroker | None = None
        self.closed = False
        self.made.append(self)

    def assign(self, tps: list) -> None:
        self.consumer.assign(tps)

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        self.broker = self.broker_for(self.client, {tp: offset})
        self.consumer.seek(tp, offset)
        self.clock.advance(0)

    def poll(self, timeout_ms: int) -> list:
        d = self.consumer.poll(timeout_ms=timeout_ms)
        for _ in range(5):
            if d.called:
                break
            self.broker.answer()
        if not d.called:
            self.clock.advance(timeout_ms / 1000)
        return self.broker.test.successResultOf(d)

    def position(self, tp: tuple[str, int]) -> int:
        return self.broker.test.successResultOf(self.consumer.position(tp))

    def end_offsets(self, tps: list) -> dict:
        return {tp: self.broker.logs[tp].end for tp in tps}

    def beginning_offsets(self, tps: list) -> dict:
        return {tp: 0 for tp in tps}

    def close(self) -> None:
        self.closed = True
        self.consumer.close()


class SparkReadRangeTests(_Decoders, unittest.SynchronousTestCase):
    def setUp(self) -> None:
        if _source is None:
            raise SkipTest("pyspark/pyarrow are not installed")
        super().setUp()
        import kafkatw.client.blocking

        self.patch(kafkatw.client.blocking, "BlockingConsumer", FakeBlockingConsumer)
        self.patch(_source, "_freeze_worker_objects", lambda: None)  # not this test process's objects

    @settings(max_examples=200)
    @given(specs=st.lists(batch_st, min_size=1, max_size=6), headers=st.booleans(), data=st.data())
    def test_exactly_the_range(self, specs: list, headers: bool, data: st.DataObject) -> None:
        """
        C{_read_range} of C{[start, end)} (either end inside a batch), over
        answers with fewer batches than there are, none, or a cut tail: the
        rows of exactly the records in the range, in order, once.
        """
        log = Log(specs)
        start = data.draw(st.integers(0, log.end), label="start")
        end = data.draw(st.integers(start, log.end), label="end")
        options = parse_options({"kafka.bootstrap.servers": "broker:9092", "assign": '{"t": [0]}',
                                 "includeHeaders": str(headers).lower()}, streaming=False)
        want = [arrow_row(r) for r in log.records if start <= r.offset < end]
        for name, sp in self.implementations.items():
            with self.using(sp):
                FakeBlockingConsumer.broker_for = staticmethod(
                    lambda client, starts: FakeBroker(self, client, {(T, 0): log}, starts, data))
                FakeBlockingConsumer.made = []
                batches = list(_source._read_range(options, _source.KafkaInputPartition(T, 0, start, end)))
                got = [row for batch in batches for row in rows(batch)] if headers else [
                    (r["offset"], r["key"], r["value"]) for batch in batches for r in batch.to_pylist()]
                self.assertEqual(got, want if headers else [w[:3] for w in want], name)
                self.assertTrue(all(c.closed for c in FakeBlockingConsumer.made))


class SplitRangesTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        if _source is None:
            raise SkipTest("pyspark/pyarrow are not installed")

    @settings(max_examples=200)
    @given(ranges=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.integers(0, 2**40),
                                     st.integers(-3, 500)), max_size=6, unique_by=lambda r: r[:2]),
           max_records=st.integers(1, 200), min_partitions=st.one_of(st.none(), st.integers(1, 40)))
    def test_the_input_partitions_tile_the_ranges(self, ranges: list, max_records: int,
                                                  min_partitions: int | None) -> None:
        """
        The Spark source's input partitions (C{split_ranges}) cover each
        offset range exactly, in order, with no gap and no overlap, none
        longer than C{maxRecordsPerPartition}.
        """
        from kafkatw.spark._options import split_ranges

        ranges = [(t, p, start, start + length) for t, p, start, length in ranges]
        pieces = split_ranges(ranges, max_records, min_partitions)
        for topic, partition, start, end in ranges:
            mine = [(a, b) for t, p, a, b in pieces if (t, p) == (topic, partition)]
            if end <= start:
                self.assertEqual(mine, [])
                continue
            self.assertEqual([a for a, _ in mine], [start] + [b for _, b in mine[:-1]])
            self.assertEqual(mine[-1][1], end)
            self.assertTrue(all(0 < b - a <= max_records for a, b in mine))
