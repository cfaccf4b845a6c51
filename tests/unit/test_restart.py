"""
Fast, safe restarts (issue 27).

A broker restarted after a crash ends the ZooKeeper session that its dead
predecessor recorded under the log dirs' lock, and registers at once.  Another
live broker with the same id (other log dirs, a copy of the log dirs, or a
registration made after the predecessor's session expired) is still waited
for.  While a broker starts, its listener leaves connections waiting and
answers them once it serves.

Whole brokers run in this process: a L{KafkaServer} over a L{FakeZooKeeper}
and a L{LoopbackReactor}, a C{MemoryReactorClock} whose TCP listeners are real
loopback ports, so that a client's connection and the listen backlog are real.
L{LoopbackReactor.pump} performs the reactor's I/O one pass at a time: no
threads and no sleeps.
"""

from __future__ import annotations

import gc
import json
import os
import select
import shutil
import socket
import stat
import struct
import tempfile
import unittest
from unittest import mock

from twisted.internet import tcp
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import EventLoggingObserver, MemoryReactorClock
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker import server as server_module
from kafkatw.broker.server import KafkaServer
from kafkatw.config import BrokerConfig
from kafkatw.protocol.messages import decode_response, encode_request
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient


class LoopbackReactor(MemoryReactorClock):
    """A C{MemoryReactorClock} whose TCP listeners are real ports on 127.0.0.1, served only by L{pump}."""

    def listenTCP(self, port, factory, backlog=50, interface=""):  # noqa: N802 (Twisted's name)
        listening = tcp.Port(port, factory, backlog, interface, self)
        listening.startListening()
        self.tcpServers.append((port, factory, backlog, interface))
        return listening

    def pump(self) -> None:
        """Do what a reactor does with the ready sockets (accept, read, write, close) until none is ready."""
        for _ in range(1000):
            readable, writable, _ = select.select(self.getReaders(), self.getWriters(), [], 0)
            if not readable and not writable:
                return
            for selectable, read in [(r, True) for r in readable] + [(w, False) for w in writable]:
                if selectable not in (self.readers if read else self.writers):
                    continue  # dropped earlier in this pass
                why = selectable.doRead() if read else selectable.doWrite()
                if why is not None:
                    self.removeReader(selectable)
                    self.removeWriter(selectable)
                    selectable.connectionLost(Failure(why))
        raise AssertionError("the sockets never settled")


def api_versions_request(correlation_id: int) -> bytes:
    frame = encode_request(18, 3, correlation_id, "restart-test",
                           {"client_software_name": "t", "client_software_version": "1"})
    return struct.pack(">i", len(frame)) + frame


def read_frame(client: socket.socket) -> bytes:
    """A size-prefixed frame from a blocking socket (with a timeout); EOF is an error."""
    def exactly(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = client.recv(count - len(data))
            if not chunk:
                raise AssertionError(f"the broker closed the connection after {len(data)} of {count} bytes")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


class InProcessBrokers(SynchronousTestCase):
    """Start, crash and restart whole brokers of one fake ZooKeeper ensemble."""

    def setUp(self) -> None:
        self.zookeeper = FakeZooKeeper()
        self.observer = FakeZooKeeperClient(self.zookeeper)
        self.successResultOf(self.observer.start())
        for target, name, value in [(server_module, "ZooKeeperClient", self._client),
                                    # the broker freezes what its start built; not this test process's
                                    (gc, "freeze", lambda: None)]:
            patcher = mock.patch.object(target, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        self.events = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)

    def _client(self, connect: str, reactor: object, **kwargs: object) -> FakeZooKeeperClient:
        return FakeZooKeeperClient(self.zookeeper, reactor=reactor)

    def log_dir(self) -> str:
        path = tempfile.mkdtemp(prefix="kafkatw-restart-")
        self.addCleanup(shutil.rmtree, path, True)
        return path

    def start(self, log_dir: str, broker_id: int = 0) -> KafkaServer:
        server = KafkaServer(BrokerConfig({
            "broker.id": broker_id, "log.dirs": log_dir, "listeners": "PLAINTEXT://127.0.0.1:0",
            "zookeeper.connect": "fake:2181", "log.cleaner.enable": "false",
        }), LoopbackReactor())
        server.startService()
        self.addCleanup(self._dispose, server)
        return server

    def crash(self, server: KafkaServer) -> None:
        """
        SIGKILL as the rest of the world sees it: the process's files are
        closed (the log dirs' lock goes with them) and its connections drop;
        its ZooKeeper session lives on until it expires.
        """
        lock = getattr(server, "log_dir_lock", None)
        if lock is not None:
            lock.release()
        server.zookeeper.disconnect()
        for port in server.bound.values():
            port.connectionLost(Failure(ConnectionDone()))

    def _dispose(self, server: KafkaServer) -> None:
        """Release what the end of the broker's process would: sockets, files, its ZooKeeper session."""
        for selectable in set(server.reactor.removeAll()) | set(server.bound.values()):
            if getattr(selectable, "connected", False):
                selectable.connectionLost(Failure(ConnectionDone()))
        lock = getattr(server, "log_dir_lock", None)
        if lock is not None:
            lock.release()
        if server.log_manager is not None:
            server.log_manager.close()
        if server.zookeeper is not None and server.zookeeper.connected:
            server.zookeeper.stop()

    def owner(self, path: str) -> int | None:
        """The session owning the ephemeral C{path}, C{None} when it does not exist."""
        found = self.successResultOf(self.observer.exists(path))
        return None if found is None else found.ephemeralOwner

    def registered_endpoint(self, broker_id: int = 0) -> str:
        data, _ = self.successResultOf(self.observer.get(f"/brokers/ids/{broker_id}"))
        return json.loads(data)["endpoints"][0]

    def logged(self, level: LogLevel | None = None) -> list[str]:
        return [formatEvent(e) for e in self.events if level is None or e["log_level"] == level]


class FastRestartTests(InProcessBrokers):
    def test_a_broker_restarted_after_a_crash_registers_at_once(self) -> None:
        log_dir = self.log_dir()
        first = self.start(log_dir)
        self.successResultOf(first.ready)
        crashed = first.zookeeper.session_id
        self.assertEqual((self.owner("/brokers/ids/0"), self.owner("/controller")), (crashed, crashed))
        self.crash(first)
        self.assertEqual(self.owner("/brokers/ids/0"), crashed)  # the session outlives the process

        second = self.start(log_dir)
        # no time passed: nothing waited for the crashed process's session to expire
        self.successResultOf(second.ready)
        self.assertEqual(second.reactor.seconds(), 0)
        session = second.zookeeper.session_id
        self.assertEqual(self.owner("/brokers/ids/0"), session)
        self.assertEqual(self.registered_endpoint(), f"PLAINTEXT://127.0.0.1:{second.port}")
        # the crashed process was the controller: its /controller went with its session, and the new one took over
        self.assertEqual(self.owner("/controller"), session)
        self.assertIn(f"ended ZooKeeper session {crashed:#x} of broker 0's previous process, which held these log"
                      " dirs and is gone: its registration and other ephemeral nodes are deleted now, not at the"
                      " session timeout", self.logged(LogLevel.info))
        self.assertEqual(self.logged(LogLevel.warn), [])

    def test_the_session_after_an_expiry_is_the_one_recorded(self) -> None:
        log_dir = self.log_dir()
        first = self.start(log_dir)
        self.successResultOf(first.ready)
        first.zookeeper.expire_session()  # LOST, then a new session, in which it registers again
        renewed = first.zookeeper.session_id
        self.assertEqual(self.owner("/brokers/ids/0"), renewed)
        self.crash(first)

        second = self.start(log_dir)
        self.successResultOf(second.ready)
        self.assertEqual(self.owner("/brokers/ids/0"), second.zookeeper.session_id)
        self.assertIn(f"ended ZooKeeper session {renewed:#x} of broker 0's previous process, which held these log"
                      " dirs and is gone: its registration and other ephemeral nodes are deleted now, not at the"
                      " session timeout", self.logged(LogLevel.info))

    def test_a_second_broker_on_the_same_log_dirs_fails_to_start(self) -> None:
        log_dir = self.log_dir()
        first = self.start(log_dir)
        self.successResultOf(first.ready)
        second = self.start(log_dir)
        self.failureResultOf(second.ready)
        self.assertEqual(second.start_error, (
            f"broker 0 failed to start: Failed to acquire lock on file .lock in {os.path.realpath(log_dir)}."
            " A kafkatw broker in another process (or another broker of this process) is using this directory;"
            " stop it, or give this broker other log.dirs (--log-dirs)"))
        self.assertEqual(self.owner("/brokers/ids/0"), first.zookeeper.session_id)
        self.assertTrue(first.zookeeper.connected)

    def test_another_live_broker_with_the_id_is_still_waited_for(self) -> None:
        first = self.start(self.log_dir())
        self.successResultOf(first.ready)
        holder = first.zookeeper.session_id
        second = self.start(self.log_dir())  # the same broker.id, other log dirs
        for _ in range(4):
            self.assertNoResult(second.ready)
            second.reactor.advance(0.5)
        self.assertNoResult(second.ready)
        self.assertEqual(self.owner("/brokers/ids/0"), holder)
        self.assertTrue(first.zookeeper.connected)
        # one line saying which broker holds the id, not one per retry
        [line] = self.logged(LogLevel.warn)
        self.assertRegex(line, (
            rf"^broker\.id 0 is registered by another live broker \(ZooKeeper session {holder:#x}, endpoints"
            rf" PLAINTEXT://127\.0\.0\.1:{first.port}, registered \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\) at"
            r" /brokers/ids/0; it is not this broker's previous process \(sessions recorded in its log dirs:"
            r" none\): waiting up to 23 s for that session to expire$"))

    def test_a_registration_made_after_the_predecessor_expired_is_not_touched(self) -> None:
        log_dir = self.log_dir()
        first = self.start(log_dir)
        self.successResultOf(first.ready)
        crashed = first.zookeeper.session_id
        self.crash(first)
        self.zookeeper.expire(crashed)  # its session times out before the restart ...
        other = self.start(self.log_dir())  # ... and another broker with the id registers
        self.successResultOf(other.ready)

        second = self.start(log_dir)
        self.assertNoResult(second.ready)
        self.assertEqual(self.owner("/brokers/ids/0"), other.zookeeper.session_id)
        self.assertTrue(other.zookeeper.connected)
        self.assertIn(f"ZooKeeper session {crashed:#x} of broker 0's previous process had ended already",
                      self.logged(LogLevel.info))
        self.assertIn(f"it is not this broker's previous process (sessions recorded in its log dirs: {crashed:#x})",
                      self.logged(LogLevel.warn)[0])

    def test_a_copy_of_the_log_dirs_does_not_end_the_original_brokers_session(self) -> None:
        original = self.log_dir()
        first = self.start(original)
        self.successResultOf(first.ready)
        copy = os.path.join(self.log_dir(), "copy")
        shutil.copytree(original, copy)  # the lock file and the recorded session with it

        second = self.start(copy)
        self.assertNoResult(second.ready)
        self.assertEqual(self.owner("/brokers/ids/0"), first.zookeeper.session_id)
        self.assertTrue(first.zookeeper.connected)
        record = os.path.join(os.path.realpath(copy), ".zookeeper_session")
        self.assertIn(f"ignoring {record}: written on host {socket.gethostname()} for {os.path.realpath(original)}"
                      f" (a copy of another log directory?), not on {socket.gethostname()} for"
                      f" {os.path.realpath(copy)}", self.logged(LogLevel.info))


class StartingListenerTests(InProcessBrokers):
    def test_a_connection_made_while_starting_waits_and_is_answered(self) -> None:
        holder = self.start(self.log_dir())
        self.successResultOf(holder.ready)
        starting = self.start(self.log_dir())  # waits: the holder has broker.id 0
        self.assertNoResult(starting.ready)
        port = starting.bound["PLAINTEXT"]

        client = socket.create_connection(("127.0.0.1", starting.port), timeout=5)
        self.addCleanup(client.close)
        client.sendall(api_versions_request(7))  # sent early: to be answered once the broker serves
        self.assertEqual(select.select([port], [], [], 5)[0], [port], "the connection never reached the listener")
        starting.reactor.pump()
        # Nothing accepted the connection (so nothing closed it): it still waits in the listen backlog.
        self.assertEqual(select.select([port], [], [], 0)[0], [port], "the starting broker accepted the connection")
        client.setblocking(False)
        with self.assertRaises(BlockingIOError):
            client.recv(1)  # neither an answer nor EOF

        self.successResultOf(holder.zookeeper.stop())  # the holder's session ends, and its registration
        starting.reactor.advance(0.5)  # the next try registers
        self.successResultOf(starting.ready)
        starting.reactor.pump()
        client.setblocking(True)
        client.settimeout(5)
        correlation_id, response = decode_response(18, 3, read_frame(client))
        self.assertEqual((correlation_id, response.error_code), (7, 0))
        self.assertIn(0, [key.api_key for key in response.api_keys])  # Produce


class LogDirLockTests(unittest.TestCase):
    def setUp(self) -> None:
        from kafkatw.broker.log_dir_lock import LogDirLock

        self.dirs = [tempfile.mkdtemp(prefix="kafkatw-lock-") for _ in range(2)]
        for d in self.dirs:
            self.addCleanup(shutil.rmtree, d, True)
        self.lock = LogDirLock(self.dirs, host="host-a")
        self.addCleanup(self.lock.release)

    def test_all_or_none_and_released_by_closing(self) -> None:
        from kafkatw.broker.log_dir_lock import LogDirLock, LogDirLockedError

        taken = LogDirLock(self.dirs[1:])
        taken.acquire()
        with self.assertRaises(LogDirLockedError):
            self.lock.acquire()
        self.assertFalse(self.lock.held)
        other = LogDirLock(self.dirs[:1])
        other.acquire()  # the first directory was given back when the second failed
        other.release()
        taken.release()
        self.lock.acquire()
        self.assertTrue(self.lock.held)
        self.assertTrue(all(os.path.exists(os.path.join(d, ".lock")) for d in self.dirs))

    def test_recorded_session_counts_on_its_host_and_directory_only(self) -> None:
        from kafkatw.broker.log_dir_lock import LogDirLock, RecordedSession

        self.lock.acquire()
        password = bytes(range(16))
        self.lock.record_session(0x1000abc, password)
        path = os.path.join(os.path.realpath(self.dirs[0]), ".zookeeper_session")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)  # the password opens the session
        with open(path) as f:
            self.assertEqual(RecordedSession.from_text(f.read()),
                             RecordedSession(0x1000abc, password, "host-a", os.path.realpath(self.dirs[0])))
        self.assertEqual(self.lock.recorded_sessions(),
                         [RecordedSession(0x1000abc, password, "host-a", os.path.realpath(self.dirs[0]))])
        self.lock.release()
        elsewhere = LogDirLock(self.dirs, host="host-b")  # the directories moved to another machine
        elsewhere.acquire()
        self.addCleanup(elsewhere.release)
        self.assertEqual(elsewhere.recorded_sessions(), [])
        with open(path, "w") as f:
            f.write("session.id=zz\n")
        elsewhere.release()
        self.lock.acquire()
        # the malformed one is skipped; the other directory's still counts
        self.assertEqual([s.session_id for s in self.lock.recorded_sessions()], [0x1000abc])
        self.lock.forget_session()
        self.assertEqual(self.lock.recorded_sessions(), [])
