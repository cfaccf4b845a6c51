"""
The private parts of libraries that kafkatw's hot paths rely on (listed in
docs/design.md, "Private APIs", and pinned in setup.cfg): these tests fail
loudly when a new version of the library changes them.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import textwrap

from twisted.internet import abstract, defer
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.producer import RecordMetadata


class DeferredInternalsTests(SynchronousTestCase):
    """
    L{kafkatw.client.producer.Producer} fires a Deferred without callbacks by
    setting C{called}, C{_canceller} and C{result}, and tells it apart by
    C{_callbacks} (C{kafkatw.client.producer._fire_record}).
    """

    def test_fresh_deferred(self) -> None:
        d: defer.Deferred = defer.Deferred()
        self.assertEqual(d._callbacks, [])
        self.assertFalse(d.called)
        self.assertIsNone(d._canceller)
        d.addCallback(lambda r: r)
        self.assertTrue(d._callbacks)

    def test_fired_by_hand_is_fired(self) -> None:
        """A Deferred fired the producer's way behaves as one fired with callback()."""
        metadata = RecordMetadata("t", 0, 7, 1)
        d: defer.Deferred = defer.Deferred(lambda _d: None)
        d.called = True
        d._canceller = None
        d.result = metadata
        seen = []
        d.addCallback(seen.append)
        self.assertEqual(seen, [metadata])
        d.cancel()  # a no-op on a fired Deferred
        self.assertTrue(d.called)
        with self.assertRaises(defer.AlreadyCalledError):
            d.callback(None)

    def test_chained_and_paused_are_seen(self) -> None:
        """The producer calls callback() when C{called} is already set (cancelled by its owner)."""
        d: defer.Deferred = defer.Deferred()
        d.cancel()
        self.assertTrue(d.called)
        self.failureResultOf(d, defer.CancelledError)
        d.callback("late")  # ignored after a cancel, as the producer expects


class RecordDeferredTests(SynchronousTestCase):
    """
    L{kafkatw.client.producer._RecordDeferred} is made without
    C{Deferred.__init__}: the class attributes C{_canceller} (None) and a lazy
    C{_callbacks} stand in for what C{__init__} sets; every other attribute
    C{__init__} sets must have a class default.
    """

    def test_init_sets_only_callbacks_and_canceller(self) -> None:
        source = inspect.getsource(defer.Deferred.__init__)
        assigned = set(re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?=", source))
        self.assertEqual(assigned - {"_debugInfo"}, {"_callbacks", "_canceller"})

    def test_lazy_deferred_behaves(self) -> None:
        from kafkatw.client.producer import _RecordDeferred

        d = object.__new__(_RecordDeferred)
        self.assertFalse(d.called)
        seen: list = []
        d.addCallback(seen.append)
        d.callback(5)
        self.assertEqual(seen, [5])
        cancelled = object.__new__(_RecordDeferred)
        cancelled.cancel()
        self.failureResultOf(cancelled, defer.CancelledError)

        async def wait() -> object:
            return await awaited

        awaited = object.__new__(_RecordDeferred)
        result = defer.Deferred.fromCoroutine(wait())
        awaited.callback(7)
        self.assertEqual(self.successResultOf(result), 7)


class TransportBufferTests(SynchronousTestCase):
    """
    L{kafkatw.client.connection.SocketWriter} (the clients' requests, the
    broker's responses) reads C{_tempDataLen}, C{dataBuffer} and C{offset} of
    Twisted's file descriptors to know whether the transport's buffer is
    empty before it sends to the socket itself (or C{os.sendfile}s).
    """

    def test_fields(self) -> None:
        fd = abstract.FileDescriptor()
        self.assertEqual(fd._tempDataLen, 0)
        self.assertEqual(len(fd.dataBuffer), 0)
        self.assertEqual(fd.offset, 0)

    def test_a_write_shows_in_them(self) -> None:
        """Bytes written and not yet sent show in those fields (tests/unit/test_socket_writer.py sends them)."""
        fd = abstract.FileDescriptor()
        fd.connected = 1
        fd.startWriting = lambda: None  # type: ignore[method-assign]  (no reactor)
        fd.write(b"abc")
        self.assertEqual(fd._tempDataLen + len(fd.dataBuffer) - fd.offset, 3)


class CrochetTests(SynchronousTestCase):
    """
    L{kafkatw.client.blocking} builds crochet's C{EventLoop} itself (a
    private reactor per process) with its positional arguments.
    """

    def test_event_loop_signature(self) -> None:
        import crochet

        names = list(inspect.signature(crochet.EventLoop.__init__).parameters)[1:6]
        self.assertEqual(names, ["reactorFactory", "atexit_register", "startLoggingWithObserver", "watchdog_thread",
                                 "reapAllProcesses"])

    def test_eventual_result_result(self) -> None:
        """
        L{kafkatw.client.blocking._ReactorThread.call} waits with
        C{EventualResult._result(timeout)}: the value, or the L{Failure}
        unraised, or C{crochet.TimeoutError}; and, unlike C{wait()}, no check
        of Twisted's global I/O thread (see L{BlockingThreadTests}).
        """
        import crochet
        from twisted.python import threadable
        from twisted.python.failure import Failure

        self.assertEqual(crochet.EventualResult(defer.succeed(5), None)._result(0), 5)
        failed = crochet.EventualResult(defer.fail(ValueError("no")), None)._result(0)
        self.assertIsInstance(failed, Failure)
        self.assertTrue(failed.check(ValueError))
        self.assertRaises(crochet.TimeoutError, crochet.EventualResult(defer.Deferred(), None)._result, 0)
        # the caller's thread taken for Twisted's I/O thread: wait() refuses, _result() does not
        self.patch(threadable, "ioThread", threadable.getThreadID())
        self.assertRaises(RuntimeError, crochet.EventualResult(defer.succeed(6), None).wait, 0)
        self.assertEqual(crochet.EventualResult(defer.succeed(6), None)._result(0), 6)


class RegisterAsIOThreadTests(SynchronousTestCase):
    """
    L{kafkatw.client.blocking._new_reactor} sets a reactor's
    C{_registerAsIOThread} to False, so that its thread does not replace
    Twisted's global I/O thread (C{twisted.python.threadable}) when it starts
    (L{BlockingThreadTests} checks the reactor it makes).
    """

    def test_flag_and_its_use(self) -> None:
        from twisted.internet.base import ReactorBase

        self.assertIs(ReactorBase._registerAsIOThread, True)
        source = inspect.getsource(ReactorBase.startRunning)
        self.assertRegex(source, r"if self\._registerAsIOThread:\s*\n\s*threadable\.registerAsIOThread\(\)")


class BlockingThreadTests(SynchronousTestCase):
    """
    What the two private parts above give, in a fresh interpreter with a real
    reactor thread: the global I/O thread is left as it was, and a blocking
    call works from a thread Twisted takes for its I/O thread (as a child
    forked from its parent's reactor thread does).
    """

    def test_io_thread_left_alone_and_calls_work_from_it(self) -> None:
        code = textwrap.dedent("""
            import threading
            from twisted.python import threadable
            from kafkatw.client.blocking import reactor_thread

            threadable.registerAsIOThread()
            main = threadable.getThreadID()
            thread = reactor_thread()
            in_reactor = thread.call(30, threadable.getThreadID)
            print(thread.reactor._registerAsIOThread, in_reactor != main, threadable.ioThread == main,
                  threadable.isInIOThread())
        """)
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout.strip()), (0, "False True True True"), result.stderr)


class MonotonicReactorClockTests(SynchronousTestCase):
    """
    L{kafkatw.tap.use_monotonic_clock} sets C{seconds} on the broker's
    reactor instance to C{time.monotonic}.  Twisted's C{ReactorBase.callLater}
    reads C{self.seconds()} for a call's time and hands C{self.seconds} to its
    C{DelayedCall}; C{timeout()} and C{runUntilCurrent()} compare with
    C{self.seconds()}.  In a fresh interpreter whose C{time.time} (what
    C{ReactorBase.seconds} is) steps back an hour just after a C{callLater(0.05)},
    the call runs on time with the monotonic clock, and stalls without it
    (the bug it fixes: a broker whose clock stepped back stalled its timers).
    """

    CODE = textwrap.dedent("""
        import sys, threading, time

        offset = [0.0]
        wall = time.time
        time.time = lambda: wall() - offset[0]  # before Twisted binds it: ReactorBase.seconds is this one

        from twisted.internet import epollreactor

        epollreactor.install()
        from twisted.internet import reactor
        from kafkatw.tap import use_monotonic_clock

        if sys.argv[1] == "monotonic":
            use_monotonic_clock(reactor)
        ran = []

        def schedule_then_step_back():
            started = time.monotonic()
            reactor.callLater(0.05, lambda: (ran.append(time.monotonic() - started), reactor.stop()))
            offset[0] = 3600.0  # the machine's clock is set back an hour

        reactor.callWhenRunning(schedule_then_step_back)
        safety = threading.Timer(3.0, lambda: reactor.callFromThread(reactor.stop))
        safety.daemon = True
        safety.start()
        reactor.run()
        print("on time" if ran and ran[0] < 1.5 else "stalled")
    """)

    def run_reactor(self, clock: str) -> str:
        result = subprocess.run([sys.executable, "-c", self.CODE, clock], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.strip()

    def test_a_step_back_stalls_the_wall_clock_reactor_only(self) -> None:
        self.assertEqual((self.run_reactor("monotonic"), self.run_reactor("wall")), ("on time", "stalled"))

    def test_the_blocking_clients_reactor_runs_on_it(self) -> None:
        """
        The private reactor of L{kafkatw.client.blocking} (the blocking
        clients, the CLI tools) runs its timers on the monotonic clock too:
        the clients' timeouts, lingers and heartbeats (issue 28).
        """
        import time

        from kafkatw.client import blocking

        reactor = blocking._new_reactor()
        self.addCleanup(reactor.disconnectAll)
        self.assertIs(reactor.seconds, time.monotonic)

    def test_only_before_anything_is_scheduled(self) -> None:
        from twisted.internet.testing import MemoryReactorClock

        from kafkatw.tap import use_monotonic_clock

        reactor = MemoryReactorClock()
        reactor.callLater(1.0, lambda: None)
        self.assertRaises(RuntimeError, use_monotonic_clock, reactor)
