"""
Unit tests of L{kafkatw.broker.pauses}: garbage-collection pauses by
generation and the event loop's lag, and their Prometheus families on the
broker's registry.
"""

from __future__ import annotations

import gc
from types import SimpleNamespace

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.trial import unittest

from kafkatw.broker.server import KafkaServer
from kafkatw.config import BrokerConfig

from kafkatw.broker.metrics import metrics_registry
from kafkatw.broker.pauses import PAUSE_BUCKETS_S, EventLoopLag, GcPauses, PauseHistogram


class Ticks:
    """A clock read in turn from a list of values (s)."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0)


def registry_with(**pauses: object):
    apis = SimpleNamespace(messages_in=0, bytes_in=0, bytes_out=0, failed_produce_requests=0,
                           failed_fetch_requests=0, request_counts={}, connections=set())
    return metrics_registry(SimpleNamespace(apis=apis, log_manager=None, **pauses))


class PauseHistogramTests(unittest.TestCase):
    def test_buckets_are_cumulative_and_inclusive(self) -> None:
        histogram = PauseHistogram()
        for seconds in (0.00005, 0.001, 0.001, 0.003, 20.0):
            histogram.observe(seconds)
        buckets = dict(histogram.buckets())
        self.assertEqual(buckets["0.0001"], 1)
        self.assertEqual(buckets["0.001"], 3)  # le is inclusive: both 1 ms pauses
        self.assertEqual(buckets["0.0025"], 3)
        self.assertEqual(buckets["0.005"], 4)
        self.assertEqual(buckets["10.0"], 4)
        self.assertEqual(buckets["+Inf"], 5)
        self.assertEqual(len(buckets), len(PAUSE_BUCKETS_S) + 1)
        self.assertAlmostEqual(histogram.sum_s, 20.00505)
        self.assertEqual(histogram.max_s, 20.0)


class GcPausesTests(unittest.TestCase):
    def test_callback_times_each_collection_by_generation(self) -> None:
        pauses = GcPauses(clock=Ticks(10.0, 10.002, 11.0, 11.0003))
        pauses.callback("start", {"generation": 2})
        pauses.callback("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
        pauses.callback("start", {"generation": 0})
        pauses.callback("stop", {"generation": 0, "collected": 5, "uncollectable": 0})
        registry = registry_with(gc_pauses=pauses)
        value = registry.get_sample_value
        self.assertEqual(value("kafkatw_gc_pause_seconds_count", {"generation": "2"}), 1)
        self.assertEqual(value("kafkatw_gc_pause_seconds_bucket", {"generation": "2", "le": "0.001"}), 0)
        self.assertEqual(value("kafkatw_gc_pause_seconds_bucket", {"generation": "2", "le": "0.0025"}), 1)
        self.assertEqual(value("kafkatw_gc_pause_seconds_bucket", {"generation": "0", "le": "0.0005"}), 1)
        self.assertEqual(value("kafkatw_gc_pause_seconds_count", {"generation": "1"}), 0)
        self.assertAlmostEqual(value("kafkatw_gc_pause_max_seconds", {"generation": "2"}), 0.002)
        self.assertAlmostEqual(value("kafkatw_gc_pause_max_seconds", {"generation": "0"}), 0.0003)

    def test_installed_callback_sees_a_forced_collection(self) -> None:
        if gc.isenabled():  # no automatic collection between the two counts
            gc.disable()
            self.addCleanup(gc.enable)
        pauses = GcPauses()
        pauses.install()
        pauses.install()  # once only
        self.addCleanup(pauses.uninstall)
        self.assertEqual(gc.callbacks.count(pauses.callback), 1)
        gc.collect(1)
        self.assertEqual(sum(pauses.generations[1].counts), 1)
        self.assertGreater(pauses.generations[1].max_s, 0)
        pauses.uninstall()
        gc.collect(1)
        self.assertEqual(sum(pauses.generations[1].counts), 1)
        self.assertNotIn(pauses.callback, gc.callbacks)


class EventLoopLagTests(unittest.TestCase):
    def test_lag_is_how_late_the_timer_runs(self) -> None:
        clock = Clock()
        lag = EventLoopLag(clock, interval_s=0.01)
        lag.start()
        clock.advance(0.01)  # on time
        clock.advance(0.013)  # a 13 ms turn: due at 20 ms, run at 23 ms
        clock.advance(0.01)  # on time again, counted from the late firing
        self.assertEqual(lag.lag.counts[0], 2)
        self.assertAlmostEqual(lag.lag.max_s, 0.003)
        registry = registry_with(event_loop_lag=lag)
        value = registry.get_sample_value
        self.assertEqual(value("kafkatw_event_loop_lag_seconds_count"), 3)
        self.assertEqual(value("kafkatw_event_loop_lag_seconds_bucket", {"le": "0.0025"}), 2)
        self.assertEqual(value("kafkatw_event_loop_lag_seconds_bucket", {"le": "0.005"}), 3)
        self.assertAlmostEqual(value("kafkatw_event_loop_lag_max_seconds"), 0.003)

    def test_a_long_pause_shows_as_its_length_less_at_most_the_interval(self) -> None:
        clock = Clock()
        lag = EventLoopLag(clock, interval_s=0.01)
        lag.start()
        clock.advance(0.004)
        clock.advance(0.1)  # a 100 ms pause that began 4 ms after the timer was set
        self.assertAlmostEqual(lag.lag.max_s, 0.094)

    def test_stop_cancels_the_timer(self) -> None:
        clock = Clock()
        lag = EventLoopLag(clock)
        lag.start()
        lag.start()  # one timer only
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        lag.stop()
        self.assertEqual(clock.getDelayedCalls(), [])
        lag.stop()


class BrokerWiringTests(unittest.SynchronousTestCase):
    """The broker measures its pauses while its metrics port is open (C{metrics.port})."""

    def start(self, **config: str) -> tuple:
        reactor = MemoryReactorClock()
        server = KafkaServer(BrokerConfig({"metrics.port": "0", **config}), reactor)
        self.successResultOf(defer.Deferred.fromCoroutine(server._start_metrics(0)))
        return server, reactor

    def test_installed_with_the_metrics_port_and_removed_with_it(self) -> None:
        server, reactor = self.start()
        self.assertIn(server.gc_pauses.callback, gc.callbacks)
        self.assertEqual(server.event_loop_lag.interval_s, 0.01)
        reactor.advance(0.01)
        self.assertEqual(sum(server.event_loop_lag.lag.counts), 1)
        server._listening_ports.clear()  # MemoryReactor's ports have no awaitable stopListening
        self.successResultOf(defer.Deferred.fromCoroutine(server._unbind()))
        self.assertNotIn(server.gc_pauses.callback, gc.callbacks)
        self.assertEqual(reactor.getDelayedCalls(), [])

    def test_interval_from_the_config_and_zero_turns_the_timer_off(self) -> None:
        server, reactor = self.start(**{"metrics.event.loop.lag.interval.ms": "50"})
        self.addCleanup(server.gc_pauses.uninstall)
        self.assertEqual(server.event_loop_lag.interval_s, 0.05)
        server, reactor = self.start(**{"metrics.event.loop.lag.interval.ms": "0"})
        self.addCleanup(server.gc_pauses.uninstall)
        self.assertIsNone(server.event_loop_lag)
        self.assertEqual(reactor.getDelayedCalls(), [])
