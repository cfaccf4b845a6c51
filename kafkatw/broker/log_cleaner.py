"""
The broker's log cleaner service (Kafka's C{LogCleaner}): every
C{log.cleaner.backoff.ms} each of C{log.cleaner.threads} slots takes the log
most in need of cleaning (L{kafkatw.storage.log_cleaner.cleanable_range}) and
cleans it on a thread of the cleaner's own pool; the swaps and the checkpoint
run on the reactor thread.  What a pass does is
L{kafkatw.storage.log_cleaner}'s; this module adds the reactor and the threads,
which the storage does not use (docs/design.md, "Components and dependencies").
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from twisted.internet import defer, threads
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from ..storage.log_cleaner import Cleaner, CleanerAbortedError, CleanerStats, LogCleanerManager
from ..storage.segment import LogSegment

__all__ = ["LogCleaner"]

_log = Logger()


class LogCleaner(LogCleanerManager):
    """
    L{LogCleanerManager} run as a service on the reactor.

    @param log_manager: the broker's L{kafkatw.storage.log_manager.LogManager}.
    @param config: broker config values (C{log.cleaner.*}).
    @param reactor: provides C{callLater}, C{callFromThread}, system event triggers.
    @param now_ms: wall clock (ms).
    @param in_thread: runs a function on a cleaner thread (a Deferred of its
        result); tests pass a synchronous one.
    @param from_thread: from there, runs a function on the reactor thread
        (its result); tests pass a synchronous one.
    """

    def __init__(self, log_manager: Any, config: Mapping[str, Any], reactor: Any, now_ms: Callable[[], int],
                 in_thread: Callable[..., Any] | None = None, from_thread: Callable[..., Any] | None = None) -> None:
        super().__init__(log_manager, config, now_ms)
        self._in_thread = in_thread or self._in_pool
        self._from_thread = from_thread or (lambda f, *a: threads.blockingCallFromThread(self.reactor, f, *a))
        self.reactor = reactor
        self._pool: ThreadPool | None = None
        self._timers: list[Any] = []
        self._running: list[Any] = []
        self._stopping = False
        self._trigger: Any = None

    def start(self) -> None:
        """Start one slot per C{log.cleaner.threads} (the thread pool starts with the first pass)."""
        self._trigger = self.reactor.addSystemEventTrigger("before", "shutdown", self._shutdown)
        for _ in range(self.thread_count):
            self._schedule(0)

    def _shutdown(self) -> defer.Deferred:
        self._trigger = None  # fired: not to be removed
        return defer.Deferred.fromCoroutine(self.stop())

    def _in_pool(self, function: Callable[..., Any], *args: Any) -> defer.Deferred:
        if self._pool is None:
            self._pool = ThreadPool(0, self.thread_count, name="log-cleaner")
            self._pool.start()
        return threads.deferToThreadPool(self.reactor, self._pool, function, *args)

    def _schedule(self, delay_ms: int) -> None:
        if self._stopping:
            return
        timer = self.reactor.callLater(delay_ms / 1000.0, self._run_slot)
        self._timers = [t for t in self._timers if t.active()] + [timer]

    def _run_slot(self) -> None:
        if self._stopping:
            return
        try:
            to_clean = self.grab_filthiest_log()
            if to_clean is None:
                self._schedule(self.backoff_ms)
                return
            task = Cleaner.prepare(to_clean, self.now_ms())
        except Exception:
            _log.failure("the log cleaner could not choose a log")
            self._schedule(self.backoff_ms)
            return
        log = task.log
        tp = (log.topic, log.partition)
        self._in_progress[tp] = task

        def swap(old: list[LogSegment], base: int) -> None:
            self._from_thread(self._swap, task, old, base)

        d = self._in_thread(self.cleaner.clean, task, swap)

        def done(stats: CleanerStats) -> None:
            self._finish(task, stats)
            self._schedule(0)

        def failed(f: Any) -> None:
            if f.check(CleanerAbortedError):
                _log.info("cleaning of {partition} stopped: {why}", partition=f"{tp[0]}-{tp[1]}",
                          why=f.getErrorMessage())
            elif f.check(OSError) and hasattr(self.log_manager, "log_failed"):
                # an I/O error of the log's dir: the dir goes offline (KIP-112; Kafka's cleaner does so too)
                self.log_manager.log_failed(tp[0], tp[1], f.value)
            else:
                self.uncleanable[tp] = log
                _log.failure("cleaning of {partition} failed; it is not cleaned again until the broker restarts",
                             f, partition=f"{tp[0]}-{tp[1]}")
            self._schedule(self.backoff_ms)

        def always(result: Any) -> Any:
            task.close()
            self._in_progress.pop(tp, None)
            self._running.remove(d)
            return result

        self._running.append(d)
        d.addBoth(always)
        d.addCallbacks(done, failed)

    async def stop(self) -> None:
        """Abort the passes under way (at their next group), wait for them, stop the pool."""
        self._stopping = True
        if self._trigger is not None:
            self.reactor.removeSystemEventTrigger(self._trigger)
            self._trigger = None
        for timer in self._timers:
            if timer.active():
                timer.cancel()
        self._timers = []
        for task in self._in_progress.values():
            task.aborted.set()
        if self._running:
            await defer.DeferredList(list(self._running), consumeErrors=True)
        if self._pool is not None:
            self._pool.stop()
            self._pool = None
