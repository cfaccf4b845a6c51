"""
Unit tests of the kafkatw Spark source's record-batch conversion
to one Arrow record batch in the schema PySpark expects; no Spark session:
from records as the consumer returns them (L{kafkatw.spark._source._to_arrow},
by L{_source._python_columns}), and from the fetched bytes
(L{kafkatw.spark._source._fetched_to_arrow}), through the compiled
accelerator's C{_speedups.fetched_columns} when it is built, checked against
the pure-Python path.

Skipped when pyspark and pyarrow (the C{spark} extra) are not installed.
"""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from twisted.trial import unittest

try:
    import pyarrow as pa

    from kafkatw.spark import _source
except ImportError:  # pragma: no cover - the spark extra is not installed
    pa = None

from kafkatw.client.consumer import ConsumerRecord
from kafkatw.errors import CorruptRecordError
from kafkatw.protocol import records as R

from .test_records import compiled_speedups
from .test_records_speedups import batch_of, encode_batches, raw_record


def records(first: int, count: int) -> list[ConsumerRecord]:
    out = []
    for offset in range(first, first + count):
        headers = (("host", b"h"), ("path", b"/var/log/a")) if offset % 3 else ()
        if offset % 5 == 0:
            headers += (("none", None),)
        out.append(ConsumerRecord("logs", 2, offset, 1_795_320_060_000 + offset, offset % 2,
                                  None if offset % 4 == 0 else b"k%d" % offset,
                                  None if offset % 7 == 0 else b"line %d" % offset, headers))
    return out


# --- any records ------------------------------------------------------------------------

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
header_st = st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=20)))
record_st = st.tuples(
    st.integers(min_value=0, max_value=2**40),  # offset gap after the previous record
    int64,  # timestamp_ms: Arrow's multiply by 1000 (to microseconds) wraps
    st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]),
    st.one_of(st.none(), st.binary(max_size=30)),
    st.one_of(st.none(), st.binary(max_size=300), st.text(max_size=40).map(str.encode)),
    st.lists(header_st, max_size=4).map(tuple),
)


def consumer_records(specs: list, topic: str = "t\u00e9", partition: int = 3, first: int = 0) -> list:
    """ConsumerRecords, offsets rising, from L{record_st} tuples."""
    out = []
    offset = first
    for gap, timestamp, timestamp_type, key, value, headers in specs:
        offset += gap
        out.append(ConsumerRecord(topic, partition, offset, timestamp, timestamp_type, key, value, headers))
        offset += 1
    return out


def plain(column: Any) -> list:
    """A column's values (timestamps as their int64 microseconds: some are beyond Python's datetime)."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    return column.to_pylist()


class ToArrowTests(unittest.SynchronousTestCase):
    """L{_source._to_arrow}: the records in C{[start, end)} as the rows of one batch, by the Python columns."""

    def setUp(self) -> None:
        if pa is None:
            raise unittest.SkipTest("pyspark/pyarrow are not installed")

    def check(self, recs: list, start: int, end: int, headers: bool) -> None:
        batch = _source._to_arrow(recs, start, end, headers)
        chosen = [r for r in recs if start <= r.offset < end]
        if not chosen:
            self.assertIsNone(batch)
            return
        self.assertEqual(batch.schema, _source._arrow_schema(headers))
        rows = batch.to_pylist()
        self.assertEqual([(r["key"], r["value"], r["topic"], r["partition"], r["offset"],
                           int(r["timestamp"].timestamp() * 1000), r["timestampType"]) for r in rows],
                         [(r.key, r.value, r.topic, r.partition, r.offset, r.timestamp_ms, r.timestamp_type)
                          for r in chosen])
        if headers:
            self.assertEqual([[(h["key"], h["value"]) for h in r["headers"]] for r in rows],
                             [list(r.headers) for r in chosen])

    def test_every_column(self) -> None:
        for headers in (False, True):
            self.check(records(100, 20), 0, 1000, headers)

    def test_only_the_range(self) -> None:
        """Records before C{start} or at and after C{end} are left out."""
        recs = records(100, 20)
        for start, end in [(105, 110), (100, 101), (119, 120), (90, 105), (110, 200), (120, 130), (50, 60)]:
            self.check(recs, start, end, True)

    def test_empty(self) -> None:
        self.assertIsNone(_source._to_arrow([], 0, 10, True))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(record_st, max_size=20), st.integers(-5, 60), st.integers(0, 60), st.booleans())
    @example(specs=[(0, -1, 0, None, None, ())], start=10, length=1, headers=True)
    @example(specs=[(0, 2**62, 1, b"", b"", (("\u00e9\u4e2d", None), ("", b"")))], start=10, length=1, headers=True)
    def test_any_records(self, specs: list, start: int, length: int, headers: bool) -> None:
        """
        Keys, values and header values null or not, non-ASCII, any timestamp
        (microseconds wrapping as Arrow's multiply does), cut anywhere: the
        expected rows, column by column.
        """
        recs = consumer_records([(spec[0] % 3,) + spec[1:] for spec in specs], first=10)
        end = start + length
        batch = _source._to_arrow(recs, start, end, headers)
        chosen = [r for r in recs if start <= r.offset < end]
        if not chosen:
            self.assertIsNone(batch)
            return
        batch.validate(full=True)
        self.assertEqual(batch.schema, _source._arrow_schema(headers))
        expected = [[r.key for r in chosen], [r.value for r in chosen], [r.topic for r in chosen],
                    [r.partition for r in chosen], [r.offset for r in chosen],
                    [(r.timestamp_ms * 1000 + 2**63) % 2**64 - 2**63 for r in chosen],
                    [r.timestamp_type for r in chosen]]
        if headers:
            expected.append([[{"key": k, "value": v} for k, v in r.headers] for r in chosen])
        self.assertEqual([plain(c) for c in batch.columns], expected)
        self.assertEqual([c.null_count for c in batch.columns[:2]],
                         [sum(r.key is None for r in chosen), sum(r.value is None for r in chosen)])


# --- fetched data straight to columns ------------------------------------------------------


def fetched(data: bytes, fetch_offset: int, aborted: Any = None, verify_crc: bool = True) -> Any:
    """What the source's consumer returns for C{data} fetched at C{fetch_offset}."""
    [piece], next_offset = _source._undecoded(data, "t\u00e9", 7, fetch_offset, ConsumerRecord, verify_crc, aborted)
    assert piece.next_offset == next_offset
    return piece


class FetchedToArrowTests(unittest.SynchronousTestCase):
    """
    L{_source._fetched_to_arrow} with the compiled C{fetched_columns} gives what
    the pure-Python path gives (L{R.decode_fetched_py}'s records through the
    Python columns, cut to C{[start, end)}): the same batch, or the same error.
    """

    def setUp(self) -> None:
        if pa is None:
            raise unittest.SkipTest("pyspark/pyarrow are not installed")
        self.sp = compiled_speedups()

    def outcomes(self, piece: Any, start: int, end: int, headers: bool) -> tuple[tuple, tuple]:
        def run(sp: Any) -> tuple:
            self.patch(R, "_speedups", sp)
            try:
                batch = _source._fetched_to_arrow(piece, start, end, headers)
            except Exception as e:  # the comparison is the point
                return ("raised", type(e))
            if batch is None:
                return ("ok", None)
            batch.validate(full=True)
            self.assertEqual(batch.schema, _source._arrow_schema(headers))
            return ("ok", [plain(c) for c in batch.columns], [c.null_count for c in batch.columns])

        return run(self.sp), run(None)

    def check(self, piece: Any, start: int, end: int, headers: bool) -> tuple:
        compiled, python = self.outcomes(piece, start, end, headers)
        self.assertEqual(compiled, python)
        return compiled

    def compiled_takes(self, piece: Any, start: int, end: int, headers: bool) -> bool:
        """Whether C{fetched_columns} decodes C{piece} itself (not declined)."""
        return self.sp.fetched_columns(piece.data, piece.fetch_offset, start, end, headers, piece.verify_crc,
                                       R.crc32c, R.decompress) is not NotImplemented

    @settings(max_examples=200, deadline=None)
    @given(batches=st.lists(st.tuples(st.lists(record_st, min_size=1, max_size=15),
                                      st.sampled_from([0, 0, 1, 2, 3, 4]), st.sampled_from([0, 1]), st.booleans()),
                            min_size=1, max_size=4),
           data=st.data(), headers=st.booleans())
    def test_random_batches(self, batches: list, data: Any, headers: bool) -> None:
        """Batches of any records, compressed or not, LogAppendTime, control batches, cut anywhere."""
        first = data.draw(st.integers(min_value=0, max_value=2**40))
        batches = [([(key, value, list(hs), ts % 2**42) for _, ts, _, key, value, hs in specs], *rest)
                   for specs, *rest in batches]
        blob, offset = encode_batches(batches, first, data)
        fetch_offset = data.draw(st.integers(min_value=first, max_value=offset))
        start = data.draw(st.integers(min_value=first - 2, max_value=offset + 2))
        end = data.draw(st.integers(min_value=start, max_value=offset + 3))
        piece = fetched(blob, fetch_offset)
        self.assertEqual(self.check(piece, start, end, headers)[0], "ok")
        self.assertTrue(self.compiled_takes(piece, start, end, headers))

    @settings(max_examples=300, deadline=None)
    @given(records=st.lists(raw_record(), min_size=0, max_size=6), count_change=st.sampled_from([0, 0, 0, -1, 1]),
           attributes=st.sampled_from([0, 0, 8, 2]), base_offset=st.sampled_from([0, 2**40, 2**63 - 3]),
           base_ts=st.sampled_from([1_700_000_000_000, 2**63 - 1, -(2**63)]), headers=st.booleans())
    def test_wire_records(self, records: list, count_change: int, attributes: int, base_offset: int,
                          base_ts: int, headers: bool) -> None:
        """Hand-made records: big and wide varints, negative lengths, bad header counts, invalid UTF-8."""
        blob = batch_of(b"".join(records), len(records) + count_change, base_offset=base_offset,
                        attributes=attributes, base_ts=base_ts, last_offset_delta=0)
        self.check(fetched(blob, base_offset), base_offset, 2**63 - 1, headers)

    def test_batch_errors(self) -> None:
        """A corrupt batch, a CRC mismatch, a bad magic or codec: the Python path's error, with its message."""
        good = R.encode_batch_py([(b"k", b"v" * 20, [("h", b"x")], 5)] * 3, base_offset=40)

        def patched(at: int, raw: bytes) -> bytes:
            return good[:at] + raw + good[at + len(raw):]

        cases = [patched(8, struct.pack(">i", 10)), patched(16, b"\x01"), patched(64, b"\xff"),
                 good + patched(16, b"\x07"), batch_of(b"garbage!", 1, attributes=3),
                 batch_of(b"\x0a\x00\x00\x00\x01\x01\x03\x01\x00\x01", 1)]
        for data in cases:
            for verify_crc in (True, False):
                compiled, python = self.outcomes(fetched(data, 40, verify_crc=verify_crc), 0, 100, True)
                self.assertEqual(compiled, python, data[:30])
        self.patch(R, "_speedups", self.sp)
        with self.assertRaises(CorruptRecordError) as raised:
            _source._fetched_to_arrow(fetched(patched(64, b"\xff"), 40), 0, 100, True)
        self.assertEqual(str(raised.exception), "CRC mismatch in batch at offset 40 of t\u00e9-7")

    def test_declined(self) -> None:
        """What C{fetched_columns} leaves to the Python path, which still converts it."""
        utf8 = R.encode_batch_py([(b"k", b"v", [(b"\xff\xfe", b"x")], 5)], base_offset=3)
        self.assertFalse(self.compiled_takes(fetched(utf8, 3), 0, 10, True))
        self.assertTrue(self.compiled_takes(fetched(utf8, 3), 0, 10, False))
        self.assertEqual(self.check(fetched(utf8, 3), 0, 10, True)[1][7], [[{"key": "\ufffd\ufffd", "value": b"x"}]])
        # offsets going down inside a batch
        region = b"".join(R.encode_varint(7) + b"\x00\x00" + R.encode_varint(delta) + b"\x01\x01\x00"
                          for delta in (1, 0))
        down = batch_of(region, 2)
        self.assertFalse(self.compiled_takes(fetched(down, 0), 0, 10, True))
        self.check(fetched(down, 0), 0, 10, True)
        self.check(fetched(down, 1), 0, 10, True)

    def test_empty_items(self) -> None:
        """
        Empty keys, values, header keys and header values (not null), first
        in their columns too: nothing is copied into a data buffer not yet
        allocated (UBSan flagged the memcpy to NULL of an empty first item).
        """
        data = R.encode_batch_py([(b"", b"", [("", b""), ("h", None)], 5), (b"", None, [("", b"")], 6),
                                  (b"k", b"v", [("h", b"x")], 7)], base_offset=3)
        piece = fetched(data, 3)
        self.assertTrue(self.compiled_takes(piece, 0, 10, True))
        compiled = self.check(piece, 0, 10, True)
        self.assertEqual(compiled[1][0], [b"", b"", b"k"])
        self.assertEqual(compiled[1][1], [b"", None, b"v"])
        self.assertEqual(compiled[1][7], [[{"key": "", "value": b""}, {"key": "h", "value": None}],
                                          [{"key": "", "value": b""}], [{"key": "h", "value": b"x"}]])

    def test_interrupted_decompression(self) -> None:
        """
        A failed decompression is declined (the Python path raises its
        error), but a C{KeyboardInterrupt} (or C{SystemExit}) while
        decompressing is raised, not swallowed.
        """
        data = R.encode_batch_py([(b"k", b"v", [], 5)], base_offset=3, compression=R.COMPRESSION_GZIP)

        def failing(error: BaseException) -> Any:
            def decompress(codec: int, region: bytes) -> bytes:
                raise error
            return decompress

        self.assertIs(self.sp.fetched_columns(data, 3, 0, 10, True, True, R.crc32c, failing(ValueError("x"))),
                      NotImplemented)
        for error in (KeyboardInterrupt(), SystemExit(3)):
            self.assertRaises(type(error), self.sp.fetched_columns, data, 3, 0, 10, True, True, R.crc32c,
                              failing(error))

    def test_aborted_transactions(self) -> None:
        """read_committed pieces with aborted transactions take the Python path (decode_fetched's rules)."""
        data = R.encode_batch_py([(b"k", b"v", [], 5)] * 3, base_offset=0, producer_id=9, producer_epoch=0,
                                 is_transactional=True)
        compiled, python = self.outcomes(fetched(data, 0, aborted=[(9, 0)]), 0, 10, True)
        self.assertEqual(compiled, python)
        self.assertEqual(compiled, ("ok", None))

    def test_shipper_records(self) -> None:
        """Records as C{kafkatw ship} sends them (key, three headers), one batch after another."""
        records = [(b"web1:/var/log/a.log", b'10.0.0.1 - - "GET / HTTP/1.1" 200 %d' % i,
                    [("host", b"web1"), ("path", b"/var/log/a.log"), ("line_no", b"%d" % i)], 1_795_000_000_000 + i)
                   for i in range(1000)]
        data = b"".join(R.encode_batch(records[i:i + 100], base_offset=i) for i in range(0, 1000, 100))
        for start, end in [(0, 1000), (150, 151), (99, 901), (0, 5000)]:
            compiled = self.check(fetched(data, 0), start, end, True)
            self.assertEqual(compiled[1][4], list(range(start, min(end, 1000))))
        self.assertTrue(self.compiled_takes(fetched(data, 0), 0, 1000, True))
        self.assertEqual(fetched(data, 0).next_offset, 1000)


class PythonFetchedTests(unittest.SynchronousTestCase):
    """L{_source._fetched_to_arrow} without the accelerator: L{R.decode_fetched}'s records, cut, as columns."""

    def setUp(self) -> None:
        if pa is None:
            raise unittest.SkipTest("pyspark/pyarrow are not installed")
        self.patch(R, "_speedups", None)

    def test_same_as_the_records(self) -> None:
        specs = [(0, 1_795_000_000_000 + i, 0, b"k" if i % 3 else None, b"v%d" % i if i % 5 else None,
                  (("h\u00e9", b"x"),) if i % 2 else ()) for i in range(50)]
        data = b"".join(R.encode_batch([(k, v, list(h), ts) for _, ts, _, k, v, h in specs[i:i + 10]],
                                       base_offset=i) for i in range(0, 50, 10))
        records, _ = R.decode_fetched(data, "t\u00e9", 7, 5, ConsumerRecord)
        schema = _source._arrow_schema(True)
        for start, end in [(0, 50), (12, 31), (49, 60)]:
            batch = _source._fetched_to_arrow(fetched(data, 5), start, end, True)
            chosen = [r for r in records if start <= r.offset < end]
            expected = pa.RecordBatch.from_arrays(_source._python_columns(chosen, True, schema), schema=schema)
            self.assertTrue(batch.equals(expected))
        self.assertIsNone(_source._fetched_to_arrow(fetched(data, 5), 50, 60, True))

    def test_offsets_past_64_bits(self) -> None:
        """Offsets that do not fit 64 bits are the Python path's."""
        sp = compiled_speedups()
        data = R.encode_batch_py([(b"k", b"v", [], 5)], base_offset=3)
        for args in [(2**63, 0, 10), (3, -(2**63) - 1, 10), (3, 0, 2**64)]:
            self.assertIs(sp.fetched_columns(data, *args, True, True, R.crc32c, R.decompress), NotImplemented)
        batch = _source._fetched_to_arrow(fetched(data, 3), 0, 2**64, True)
        self.assertEqual(batch.column(4).to_pylist(), [3])


class FreezeWorkerObjectsTests(unittest.SynchronousTestCase):
    """L{_source._freeze_worker_objects}: the worker's objects frozen once, before its first read."""

    def setUp(self) -> None:
        if pa is None:
            raise unittest.SkipTest("the spark extra is not installed")

    def test_freezes_once(self) -> None:
        """
        The calls are counted, not the frozen objects: in a full test run
        another thread (a reactor of an earlier test) may freeze too.
        """
        import gc

        frozen_before = gc.get_freeze_count()
        gc.unfreeze()  # a worker before its first read
        self.addCleanup(lambda: gc.freeze() if frozen_before else gc.unfreeze())
        real_freeze = gc.freeze
        calls: list[int] = []

        def freeze() -> None:
            calls.append(1)
            real_freeze()

        self.patch(gc, "freeze", freeze)
        _source._freeze_worker_objects()
        self.assertEqual(len(calls), 1)
        self.assertGreater(gc.get_freeze_count(), 0)
        _source._freeze_worker_objects()  # a second read freezes nothing more
        self.assertEqual(len(calls), 1)
