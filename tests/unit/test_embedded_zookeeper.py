"""The embedded ZooKeeper: readiness probe (a four-letter word), our-server check, taken ports, quiet stops."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

from twisted.internet.error import ConnectionDone, ProcessTerminated
from twisted.internet.task import Clock
from twisted.internet.testing import EventLoggingObserver, StringTransport
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial import unittest

from kafkatw.zookeeper import embedded
from kafkatw.zookeeper.embedded import (
    EmbeddedZooKeeperService,
    ZooKeeperPortInUseError,
    _FourLetterWord,
    _ZooKeeperProcess,
    find_free_port,
    is_ours,
    port_in_use,
    start_error_from_log,
)


class FourLetterWordProbeTests(unittest.SynchronousTestCase):
    def connect(self) -> tuple[Clock, StringTransport, _FourLetterWord]:
        clock, transport = Clock(), StringTransport()
        probe = _FourLetterWord(clock, b"srvr", timeout_s=1.0)
        probe.makeConnection(transport)
        return clock, transport, probe

    def test_answer_collected_until_the_server_closes(self) -> None:
        clock, transport, probe = self.connect()
        self.assertEqual(transport.value(), b"srvr")
        probe.dataReceived(b"Zookeeper version: 3.8.0\n")
        probe.dataReceived(b"Mode: standalone\n")
        probe.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.successResultOf(probe.done), b"Zookeeper version: 3.8.0\nMode: standalone\n")
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_a_silent_peer_is_aborted_after_the_timeout(self) -> None:
        # e.g. a TCP self-connection while nothing listens yet: the word comes back, nothing closes
        clock, transport, probe = self.connect()
        probe.dataReceived(b"srvr")
        clock.advance(0.99)
        self.assertFalse(transport.disconnecting)
        self.assertNoResult(probe.done)
        clock.advance(0.01)
        self.assertTrue(transport.disconnected)
        probe.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.successResultOf(probe.done), b"srvr")


def temp_path(case: unittest.SynchronousTestCase, name: str) -> str:
    """A path in a fresh temporary directory removed after the test (not mktemp: under pytest it writes into the tree)."""
    base = tempfile.mkdtemp(prefix="kafkatw-test-")
    case.addCleanup(shutil.rmtree, base, True)
    return os.path.join(base, name)


class ReadinessIsOurServerTests(unittest.SynchronousTestCase):
    """Only our child counts as ready: its C{conf} names our dataDir (kafkatw.zookeeper.embedded)."""

    CONF = (b"clientPort=2181\nsecureClientPort=-1\ndataDir=/var/lib/kafkatw/zookeeper/version-2\n"
            b"dataDirSize=457\ntickTime=2000\nserverId=0\n")

    def test_conf_naming_our_data_dir(self) -> None:
        self.assertTrue(is_ours(self.CONF, "/var/lib/kafkatw/zookeeper"))
        self.assertTrue(is_ours(self.CONF, "/var/lib/kafkatw/zookeeper/"))

    def test_another_server_or_no_answer_is_not_ours(self) -> None:
        self.assertFalse(is_ours(self.CONF, "/var/lib/kafkatw/zk"))
        self.assertFalse(is_ours(self.CONF, "/var/lib/kafkatw"))
        self.assertFalse(is_ours(b"This ZooKeeper instance is not currently serving requests\n", "/x"))
        self.assertFalse(is_ours(b"conf is not executed because it is not in the whitelist.\n", "/x"))
        self.assertFalse(is_ours(b"", "/x"))

    def test_the_bind_error_is_found_in_the_log(self) -> None:
        path = temp_path(self, "zookeeper.log")
        with open(path, "w") as f:
            f.write("old run\n[main] ERROR old - something\n")
            offset = f.tell()
            f.write("[main] INFO binding to port 0.0.0.0/0.0.0.0:2181\n"
                    "[main] ERROR org.apache.zookeeper.server.ZooKeeperServerMain - Unexpected exception\n"
                    "java.net.BindException: Address already in use\n"
                    "\tat java.base/sun.nio.ch.Net.bind0(Native Method)\n"
                    "[main] ERROR org.apache.zookeeper.util.ServiceUtils - Exiting JVM with code 1\n")
        self.assertEqual(start_error_from_log(path, offset), "java.net.BindException: Address already in use")
        self.assertEqual(start_error_from_log(path, 0), "java.net.BindException: Address already in use")
        self.assertEqual(start_error_from_log(path + ".missing"), "")

    def test_port_in_use(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            self.assertTrue(port_in_use(s.getsockname()[1]))
        self.assertFalse(port_in_use(find_free_port()))

    def test_a_free_port_is_not_handed_out_twice_in_a_row(self) -> None:
        """The kernel may give the same free port to two binds to port 0 in a row: the second caller gets another."""
        given = iter([47423, 47423, 51000])

        class Socket:
            def __init__(self, *args: object) -> None:
                self.port = next(given)

            def __enter__(self) -> "Socket":
                return self

            def __exit__(self, *args: object) -> None:
                pass

            def bind(self, address: object) -> None:
                pass

            def getsockname(self) -> tuple[str, int]:
                return ("127.0.0.1", self.port)

        self.patch(embedded.socket, "socket", Socket)
        self.assertEqual([find_free_port(), find_free_port()], [47423, 51000])

    def test_port_in_use_error_names_port_and_setting(self) -> None:
        error = ZooKeeperPortInUseError(2181, "--port", "java.net.BindException: Address already in use")
        self.assertEqual(str(error), "ZooKeeper cannot listen on 127.0.0.1:2181: the port is already in use"
                                     " (java.net.BindException: Address already in use);"
                                     " stop what holds it or choose another port with --port")


class _SpawnRecorder(Clock):
    def __init__(self) -> None:
        super().__init__()
        self.spawned: list = []

    def spawnProcess(self, *args: object, **kwargs: object) -> object:
        self.spawned.append(args)
        return object()


class ServiceTests(unittest.SynchronousTestCase):
    def test_a_taken_port_fails_before_anything_is_written_or_spawned(self) -> None:
        data_dir = temp_path(self, "zookeeper")
        reactor = _SpawnRecorder()
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            service = EmbeddedZooKeeperService(data_dir, port, reactor, port_setting="zookeeper.connect=embedded:PORT")
            service.startService()
        self.assertEqual(reactor.spawned, [])
        self.assertFalse(os.path.exists(data_dir))
        error = self.failureResultOf(service.whenReady(), ZooKeeperPortInUseError).value
        self.assertIn(f"127.0.0.1:{port}", str(error))
        self.assertIn("zookeeper.connect=embedded:PORT", str(error))
        self.successResultOf(service.stopService())

    def test_a_clean_stop_logs_nothing_alarming(self) -> None:
        events = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        process = _ZooKeeperProcess(2181, temp_path(self, "zookeeper.log"))
        process.ready = True
        process.stopping = True
        process.errReceived(b"[Thread] ERROR something while shutting down\n")
        process.processEnded(Failure(ProcessTerminated(exitCode=143)))
        self.assertEqual([formatEvent(e) for e in events], ["ZooKeeper on port 2181 stopped"])
        self.assertEqual([e["log_level"] for e in events], [LogLevel.info])

    def test_an_unexpected_exit_is_an_error(self) -> None:
        events = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        process = _ZooKeeperProcess(2181, temp_path(self, "zookeeper.log"))
        process.ready = True
        process.processEnded(Failure(ProcessTerminated(exitCode=1)))
        self.assertEqual([e["log_level"] for e in events], [LogLevel.error])
        self.assertIn("exited unexpectedly (status 1", formatEvent(events[0]))
