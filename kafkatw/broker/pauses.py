"""
The broker's pauses, as Prometheus histograms: how long each garbage
collection took, and how late the event loop ran a timer.

A broker answers nothing while Python's cyclic garbage collector runs, nor
while one handler's turn of the event loop lasts, nor while the kernel runs
other processes instead of it: each adds to the latency of every request
waiting meanwhile.  Two measures tell these apart:

  - L{GcPauses}: the time of each collection, from the start and stop
    calls of C{gc.callbacks} (the Python library reference, "gc"), by
    generation;
  - L{EventLoopLag}: how late a timer that falls due every C{interval_s}
    (C{metrics.event.loop.lag.interval.ms}) runs, as Node.js's C{perf_hooks.monitorEventLoopDelay} measures it.  A
    long turn of any handler, a collection, or the process waiting for a
    core delays it; a pause shorter than the interval is seen only when the
    timer falls due during it, and a pause of C{L} seconds shows as a lag
    between C{L - interval_s} and C{L}.  The lag includes the timer's own
    granularity (C{epoll_wait} counts whole milliseconds).

Both are served on the broker's metrics port (C{metrics.port}) by
L{kafkatw.broker.metrics.BrokerCollector}; docs/operations.md lists them.
"""

from __future__ import annotations

import gc
import time
from bisect import bisect_left
from typing import Any, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from .metrics import cumulative_buckets

__all__ = ["EventLoopLag", "GcPauses", "PAUSE_BUCKETS_S", "PauseHistogram"]

#: Upper bounds of the pause buckets (s): 0.1 ms to 10 s.
PAUSE_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0)


class PauseHistogram:
    """
    Counts of pauses by bucket of L{PAUSE_BUCKETS_S}, their sum and the
    longest (all in seconds).  Recording is one bisect and three additions.
    """

    __slots__ = ("counts", "sum_s", "max_s")

    def __init__(self) -> None:
        #: per bucket of L{PAUSE_BUCKETS_S}, then above the last (+Inf); not cumulative
        self.counts = [0] * (len(PAUSE_BUCKETS_S) + 1)
        self.sum_s = 0.0
        #: the longest pause recorded (s); 0 before any
        self.max_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(PAUSE_BUCKETS_S, seconds)] += 1
        self.sum_s += seconds
        if seconds > self.max_s:
            self.max_s = seconds

    def buckets(self) -> list[tuple[str, float]]:
        """Prometheus's cumulative C{(le, count)} pairs, C{+Inf} last."""
        return cumulative_buckets(PAUSE_BUCKETS_S, self.counts)


class GcPauses:
    """
    The duration of every collection of Python's cyclic garbage collector,
    by generation (0, 1, 2), measured by a C{gc.callbacks} callback between
    L{install} and L{uninstall}.

    The callback costs about 0.4 µs per collection (two calls of C{clock}
    and one L{PauseHistogram.observe}; docs/operations.md).

    @param clock: returns seconds (C{time.perf_counter}).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        #: generation -> its collections
        self.generations = [PauseHistogram() for _ in range(3)]
        self._started = 0.0

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        """The C{gc.callbacks} entry: C{phase} is C{"start"} or C{"stop"}, C{info["generation"]} 0–2."""
        if phase == "start":
            self._started = self.clock()
        else:
            self.generations[info["generation"]].observe(self.clock() - self._started)

    def install(self) -> None:
        if self.callback not in gc.callbacks:
            gc.callbacks.append(self.callback)

    def uninstall(self) -> None:
        if self.callback in gc.callbacks:
            gc.callbacks.remove(self.callback)

    def families(self) -> Iterator[Any]:
        pauses = HistogramMetricFamily("kafkatw_gc_pause_seconds",
                                       "Collections of Python's garbage collector by generation (s).",
                                       labels=["generation"])
        longest = GaugeMetricFamily("kafkatw_gc_pause_max_seconds",
                                    "The longest collection since the broker started, by generation (s).",
                                    labels=["generation"])
        for generation, histogram in enumerate(self.generations):
            pauses.add_metric([str(generation)], histogram.buckets(), histogram.sum_s)
            longest.add_metric([str(generation)], histogram.max_s)
        yield from (pauses, longest)


class EventLoopLag:
    """
    How late the event loop runs a timer due every C{interval_s}: each
    firing records C{now - due} (0 when on time) and schedules the next one
    C{interval_s} after it.

    @param reactor: an C{IReactorTime} (a C{Clock} in tests).
    @param interval_s: the timer's period (s); each firing costs about
        0.1 ms of CPU when the loop was idle (its wake-up), less when busy.
    """

    def __init__(self, reactor: Any, interval_s: float = 0.01) -> None:
        self.reactor = reactor
        self.interval_s = interval_s
        self.lag = PauseHistogram()
        self._call: Any = None
        self._due = 0.0

    def start(self) -> None:
        if self._call is None:
            self._schedule()

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _schedule(self) -> None:
        self._due = self.reactor.seconds() + self.interval_s
        self._call = self.reactor.callLater(self.interval_s, self._fire)

    def _fire(self) -> None:
        self.lag.observe(max(0.0, self.reactor.seconds() - self._due))
        self._schedule()

    def families(self) -> Iterator[Any]:
        lag = HistogramMetricFamily("kafkatw_event_loop_lag_seconds",
                                    f"How late the event loop ran a timer due every {self.interval_s * 1000:g} ms"
                                    " (s).")
        lag.add_metric([], self.lag.buckets(), self.lag.sum_s)
        yield lag
        yield GaugeMetricFamily("kafkatw_event_loop_lag_max_seconds",
                                "The largest event loop lag since the broker started (s).", value=self.lag.max_s)
