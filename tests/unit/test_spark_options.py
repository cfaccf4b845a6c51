"""
Tests of the kafkatw Spark source's option parsing and offset arithmetic
(kafkatw/spark/_options.py): pure functions, no Spark session, no sockets.
"""

from __future__ import annotations

from twisted.trial import unittest

try:
    from kafkatw.spark._options import EARLIEST, parse_options, rate_limit, split_ranges
except ImportError:  # pragma: no cover - pyspark (the spark extra) is not installed
    parse_options = None

B = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


class OptionsTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        if parse_options is None:
            raise unittest.SkipTest("pyspark is not installed")

    def test_defaults(self) -> None:
        batch = parse_options({**B, "subscribe": "a, b"}, streaming=False)
        self.assertEqual(batch.subscribe, ("a", "b"))
        self.assertEqual((batch.starting.kind, batch.ending.kind), ("earliest", "latest"))
        self.assertTrue(batch.fail_on_data_loss)
        self.assertFalse(batch.include_headers)
        stream = parse_options({**B, "SubscribePattern": "lo.*", "FAILONDATALOSS": "false"}, streaming=True)
        self.assertEqual((stream.subscribe_pattern, stream.starting.kind), ("lo.*", "latest"))
        self.assertFalse(stream.fail_on_data_loss)

    def test_isolation_level(self) -> None:
        self.assertEqual(parse_options({**B, "subscribe": "t"}, streaming=False).isolation_level, "read_uncommitted")
        o = parse_options({**B, "subscribe": "t", "kafka.isolation.level": "READ_COMMITTED"}, streaming=True)
        self.assertEqual(o.isolation_level, "read_committed")
        with self.assertRaises(ValueError) as raised:
            parse_options({**B, "subscribe": "t", "kafka.isolation.level": "serializable"}, streaming=False)
        self.assertIn("kafka.isolation.level", str(raised.exception))

    def test_json(self) -> None:
        o = parse_options({**B, "assign": '{"t":[0,1]}', "startingOffsets": '{"t":{"0":23,"1":-2}}',
                           "endingOffsets": '{"t":{"0":50,"1":-1}}'}, streaming=False)
        self.assertEqual(o.assign, (("t", 0), ("t", 1)))
        self.assertEqual(o.starting.offsets, {("t", 0): 23, ("t", 1): EARLIEST})
        self.assertEqual(o.ending.offsets, {("t", 0): 50, ("t", 1): -1})

    def test_timestamps(self) -> None:
        o = parse_options({**B, "subscribe": "t", "startingTimestamp": "1000",
                           "startingOffsetsByTimestamp": '{"t":{"0":5}}'}, streaming=True)
        self.assertEqual((o.starting.kind, o.starting.timestamp_ms), ("timestamp", 1000))
        o = parse_options({**B, "subscribe": "t", "startingOffsetsByTimestamp": '{"t":{"0":5}}'}, streaming=True)
        self.assertEqual(o.starting.timestamps, {("t", 0): 5})

    def test_errors(self) -> None:
        cases = [
            ({"subscribe": "t"}, "kafka.bootstrap.servers"),
            ({**B}, "exactly one of"),
            ({**B, "subscribe": "t", "subscribePattern": "x"}, "exactly one of"),
            ({**B, "assign": "[0]"}, "'assign' must be JSON"),
            ({**B, "subscribePattern": "("}, "not a valid regular expression"),
            ({**B, "subscribe": "t", "startingOffsets": "latest"}, "batch"),
            ({**B, "subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, "latest (-1)"),
            ({**B, "subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, "earliest (-2)"),
            ({**B, "subscribe": "t", "startingOffsets": "yesterday"}, "startingOffsets"),
            ({**B, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
            ({**B, "subscribe": "t", "includeHeaders": "yes"}, "includeHeaders"),
            ({**B, "subscribe": "t", "kafka.group.id": "g"}, "kafka.group.id"),
        ]
        for options, message in cases:
            with self.assertRaises(ValueError) as caught:
                parse_options(options, streaming=False)
            self.assertIn(message, str(caught.exception), options)
        with self.assertRaises(ValueError) as caught:
            parse_options({**B, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)
        self.assertIn("batch queries only", str(caught.exception))


class OffsetArithmeticTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        if parse_options is None:
            raise unittest.SkipTest("pyspark is not installed")

    def test_rate_limit_proportional(self) -> None:
        """Spark's rateLimit: shares in proportion to the backlog, floor; tiny shares rounded up."""
        start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
        latest = {("t", 0): 900, ("t", 1): 190, ("t", 2): 6}
        self.assertEqual(rate_limit(100, start, latest), {("t", 0): 90, ("t", 1): 109, ("t", 2): 6})
        # under the limit: everything
        self.assertEqual(rate_limit(10_000, start, latest), latest)
        # nothing new
        self.assertEqual(rate_limit(10, latest, latest), latest)

    def test_split_ranges(self) -> None:
        self.assertEqual(split_ranges([("t", 0, 0, 10), ("t", 1, 5, 5)], 4),
                         [("t", 0, 0, 3), ("t", 0, 3, 6), ("t", 0, 6, 10)])
        pieces = split_ranges([("t", 0, 0, 100), ("t", 1, 0, 10)], 1000, min_partitions=4)
        self.assertGreaterEqual(len(pieces), 4)
        covered = sorted((p, o) for _, p, a, b in pieces for o in range(a, b))
        self.assertEqual(covered, [(0, o) for o in range(100)] + [(1, o) for o in range(10)])
