"""
L{kafkatw.cli.perf}'s statistics: latencies recorded through C{on_delivery},
Kafka's window and final lines computed over them.
"""

from __future__ import annotations

import re
import time

from twisted.trial.unittest import SynchronousTestCase

from kafkatw.cli import perf
from kafkatw.errors import KafkaError


class StatsTests(SynchronousTestCase):
    def test_records_latencies_and_errors(self) -> None:
        stats = perf._Stats(num_records=3, record_size=200)
        now = time.monotonic()
        stats.record(now - 0.010, object(), None)
        stats.record(now - 0.002, object(), None)
        error = KafkaError("boom")
        stats.record(now, None, error)
        self.assertEqual(stats.count, 2)
        self.assertEqual(stats.errors, [error])
        self.assertGreaterEqual(stats.latencies[0], 10.0)
        line = stats.final_line()
        self.assertRegex(line, r"^2 records sent, [0-9.]+ records/sec \([0-9.]+ MB/sec\), [0-9.]+ ms avg latency,"
                               r" [0-9.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.$")
        self.assertGreaterEqual(float(re.search(r", ([0-9.]+) ms max latency", line).group(1)), 10.0)

    def test_window_line(self) -> None:
        stats = perf._Stats(num_records=10, record_size=100, report_every_s=0.0)
        printed: list[str] = []
        self.patch(perf.click, "echo", lambda text, **kw: printed.append(text))
        stats.record(time.monotonic() - 0.004, object(), None)
        stats.maybe_print_window()
        stats.maybe_print_window()
        self.assertEqual(len(printed), 2)
        self.assertRegex(printed[0], r"^1 records sent, [0-9.]+ records/sec \([0-9.]+ MB/sec\), [0-9.]+ ms avg"
                                     r" latency, [0-9.]+ ms max latency\.$")
        self.assertTrue(printed[1].startswith("0 records sent"))


class SampledStatsTests(SynchronousTestCase):
    def test_a_sample_stands_for_its_chunk(self) -> None:
        """One latency sample per chunk, weighted by the chunk's records in counts and averages."""
        stats = perf._Stats(num_records=110, record_size=100)
        now = time.monotonic()
        stats.record(now - 0.010, object(), None, records=100)
        stats.record(now - 0.001, object(), None, records=10)
        stats.check(object(), None)
        self.assertEqual(stats.count, 110)
        self.assertEqual(len(stats.latencies), 2)
        line = stats.final_line()
        self.assertTrue(line.startswith("110 records sent"))
        avg = float(re.search(r", ([0-9.]+) ms avg latency", line).group(1))
        self.assertGreaterEqual(avg, (100 * 10 + 10 * 1) / 110 - 0.01)
        self.assertLess(avg, 10.0)
        error = KafkaError("boom")
        stats.check(None, error)
        self.assertEqual(stats.errors, [error])
