"""
Unit tests of the kafkatw Spark source's record-batch conversion
(L{kafkatw.spark._source._to_arrow}): records as the consumer returns them to
one Arrow record batch in the schema PySpark expects; no Spark session.
The columns come from the compiled accelerator when it is built
(C{_speedups.arrow_columns}) and from L{_source._python_columns} otherwise:
both are checked, and against each other.

Skipped when pyspark and pyarrow (the C{spark} extra) are not installed.
"""

from __future__ import annotations

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
from kafkatw.protocol import records as R

from .test_records import compiled_speedups


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


class ToArrowTests(unittest.SynchronousTestCase):
    """L{_source._to_arrow} as it runs here: compiled columns when the accelerator is built."""

    def setUp(self) -> None:
        if pa is None:
            raise unittest.SkipTest("pyspark/pyarrow are not installed")

    def check(self, recs: list, start: int, end: int, headers: bool) -> None:
        batch, done = _source._to_arrow(recs, start, end, headers)
        chosen = [r for r in recs if start <= r.offset < end]
        self.assertEqual(done, bool(recs) and recs[-1].offset >= end - 1)
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
        """Records before C{start} or at and after C{end} are left out; C{done} once C{end - 1} was seen."""
        recs = records(100, 20)
        for start, end in [(105, 110), (100, 101), (119, 120), (90, 105), (110, 200), (120, 130), (50, 60)]:
            self.check(recs, start, end, True)

    def test_empty(self) -> None:
        self.assertEqual(_source._to_arrow([], 0, 10, True), (None, False))


class PythonColumnsTests(ToArrowTests):
    """The same tests with the pure-Python columns (no accelerator, or C{KAFKATW_PURE_PYTHON=1})."""

    def setUp(self) -> None:
        super().setUp()
        self.patch(R, "_speedups", None)


# --- the compiled columns against the Python ones ------------------------------------------

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
header_st = st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=20)))
record_st = st.tuples(
    st.integers(min_value=0, max_value=2**40),  # offset gap after the previous record
    int64,  # timestamp_ms: Arrow's multiply by 1000 wraps, so must the compiled one
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


class CompiledColumnsTests(unittest.SynchronousTestCase):
    """C{_speedups.arrow_columns} gives the columns of L{_source._python_columns}, or declines."""

    def setUp(self) -> None:
        if pa is None:
            raise unittest.SkipTest("pyspark/pyarrow are not installed")
        self.sp = compiled_speedups()
        self.patch(R, "_speedups", self.sp)

    def both(self, recs: list, lo: int, hi: int, headers: bool) -> tuple[Any, Any]:
        schema = _source._arrow_schema(headers)
        compiled = _source._compiled_columns(recs, lo, hi, headers, schema)
        python = _source._python_columns(recs[lo:hi], headers, schema)
        return compiled, python

    def assertSameColumns(self, compiled: list, python: list, headers: bool) -> None:
        schema = _source._arrow_schema(headers)
        self.assertIsNotNone(compiled)
        a = pa.RecordBatch.from_arrays(compiled, schema=schema)
        b = pa.RecordBatch.from_arrays(python, schema=schema)
        a.validate(full=True)
        self.assertEqual(a.schema, b.schema)
        for name, x, y in zip(schema.names, a.columns, b.columns):
            self.assertTrue(x.equals(y), name)
            self.assertEqual(x.null_count, y.null_count, name)
            self.assertEqual(plain(x), plain(y), name)
        self.assertTrue(a.equals(b))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(record_st, min_size=1, max_size=30), st.data(), st.booleans())
    @example(specs=[(0, -1, 0, None, None, ())], data=None, headers=True)
    @example(specs=[(0, 2**62, 1, b"", b"", (("\u00e9\u4e2d", None), ("", b"")))], data=None, headers=True)
    def test_same_columns(self, specs: list, data: Any, headers: bool) -> None:
        """Keys, values, header values null or not, non-ASCII, any timestamp, any cut of the list."""
        recs = consumer_records(specs)
        lo, hi = 0, len(recs)
        if data is not None:
            lo = data.draw(st.integers(0, len(recs) - 1))
            hi = data.draw(st.integers(lo + 1, len(recs)))
        compiled, python = self.both(recs, lo, hi, headers)
        self.assertSameColumns(compiled, python, headers)

    @settings(max_examples=100, deadline=None)
    @given(st.lists(record_st, min_size=1, max_size=20), st.integers(-5, 60), st.integers(0, 60))
    def test_to_arrow_ranges(self, specs: list, start: int, length: int) -> None:
        """L{_source._to_arrow} cuts at both ends as the Python path does."""
        recs = consumer_records([(spec[0] % 3,) + spec[1:] for spec in specs], first=10)
        end = start + length
        compiled = _source._to_arrow(recs, start, end, True)
        self.patch(R, "_speedups", None)
        python = _source._to_arrow(recs, start, end, True)
        self.assertEqual(compiled[1], python[1])
        if python[0] is None:
            self.assertIsNone(compiled[0])
        else:
            self.assertTrue(compiled[0].equals(python[0]))
            self.assertEqual([plain(c) for c in compiled[0].columns], [plain(c) for c in python[0].columns])

    def test_declines(self) -> None:
        """
        Records the Python columns treat otherwise are left to them: another
        record type, a key or value that is not bytes or None, ints out of
        range, headers that are not a tuple of (str, bytes or None) pairs.
        """
        good = consumer_records([(0, 5, 0, b"k", b"v", (("h", b"x"),))] * 3)
        self.assertIsNotNone(self.both(good, 0, 3, True)[0])
        bad = [
            good[0]._replace(key="k"),
            good[0]._replace(value=bytearray(b"v")),
            good[0]._replace(offset=2**63),
            good[0]._replace(timestamp_ms=-(2**63) - 1),
            good[0]._replace(timestamp_type=2**31),
            good[0]._replace(offset=True),
            good[0]._replace(headers=[("h", b"x")]),
            good[0]._replace(headers=(("h", b"x", b"y"),)),
            good[0]._replace(headers=((b"h", b"x"),)),
            good[0]._replace(headers=(("h", "x"),)),
            good[0]._replace(headers=(("\ud800", b"x"),)),
            tuple(good[0]),
        ]
        for record in bad:
            recs = good[:1] + [record] + good[1:]
            self.assertIs(self.sp.arrow_columns(recs, 0, 3, ConsumerRecord, True), NotImplemented, record)
        # headers are not looked at without includeHeaders
        recs = [good[0]._replace(headers=[("h", "x")])]
        self.assertIsNotNone(self.sp.arrow_columns(recs, 0, 1, ConsumerRecord, False))

    def test_declined_records_take_the_python_path(self) -> None:
        """A declined list still converts, through the Python columns."""
        recs = consumer_records([(0, 5, 0, b"k", b"v", ())] * 2)
        recs[1] = recs[1]._replace(key=bytearray(b"k2"))
        batch, done = _source._to_arrow(recs, 0, 2, True)
        self.assertTrue(done)
        self.assertEqual(batch.column(0).to_pylist(), [b"k", b"k2"])

    def test_only_the_slice(self) -> None:
        """Records outside C{[lo, hi)} are not looked at (they may even be of another type)."""
        recs = consumer_records([(0, 5, 0, b"k", b"v", ())] * 3)
        recs[0] = "not a record"
        recs[2] = None
        compiled = self.sp.arrow_columns(recs, 1, 2, ConsumerRecord, True)
        self.assertIsNot(compiled, NotImplemented)
        self.assertEqual(compiled[2], (1).to_bytes(8, "little"))
