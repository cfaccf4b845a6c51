"""
Unit tests of the kafkatw Spark source's record-batch conversion
(L{kafkatw.spark._source._to_arrow}): records as the consumer returns them to
one Arrow record batch in the schema PySpark expects; no Spark session.

Skipped when pyspark and pyarrow (the C{spark} extra) are not installed.
"""

from __future__ import annotations

from twisted.trial import unittest

try:
    import pyarrow as pa

    from kafkatw.spark import _source
except ImportError:  # pragma: no cover - the spark extra is not installed
    pa = None

from kafkatw.client.consumer import ConsumerRecord


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
