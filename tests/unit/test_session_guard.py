"""
The session guard (kafkatw/broker/session_guard.py, issue 27 item 4): it ends
a broker's recorded ZooKeeper session once the broker's process has released
its log dirs' lock -- and only then.

The lock holder is a real child process (the lock is the kernel's, dropped
when the process dies); each step waits on the child (a line it prints, its
exit), never on a clock.  ZooKeeper is the in-memory L{FakeZooKeeper}.  The
broker's side (kafkatw/broker/server.py, L{session_guard.GuardProcess}) runs
in this process over a reactor that records the guard's spawn.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from unittest import mock

from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.testing import EventLoggingObserver
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker import session_guard
from kafkatw.broker.log_dir_lock import LogDirLock, RecordedSession
from kafkatw.broker.server import KafkaServer
from kafkatw.config import BrokerConfig
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient

from .test_restart import InProcessBrokers, LoopbackReactor

# A broker's use of its log dirs' lock, as kafkatw/broker/server.py does it:
# lock, record the session, say so, then on a line "stop" a clean stop
# (forget the record, release) or, on EOF or SIGKILL, nothing (a crash).
_HOLDER = """
import sys
from kafkatw.broker.log_dir_lock import LogDirLock
lock = LogDirLock(sys.argv[2:])
lock.acquire()
lock.record_session(int(sys.argv[1], 16), bytes(range(16)))
print("locked", flush=True)
if sys.stdin.readline().strip() == "stop":
    lock.forget_session()
    lock.release()
    print("stopped", flush=True)
"""

SESSION = 0x1000ABC


class Holder:
    """A child process holding C{log_dirs}' lock, with session C{session} recorded."""

    def __init__(self, log_dirs: list[str], session: int = SESSION) -> None:
        self.popen = subprocess.Popen([sys.executable, "-c", _HOLDER, f"{session:#x}", *log_dirs],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.popen.stdout.readline().strip() == "locked"

    def kill(self) -> None:
        self.popen.kill()
        self.popen.wait(30)
        self.popen.stdin.close()
        self.popen.stdout.close()

    def stop_cleanly(self) -> None:
        self.popen.stdin.write("stop\n")
        self.popen.stdin.flush()
        assert self.popen.stdout.readline().strip() == "stopped"
        self.kill()


class DeadSessionsTests(unittest.TestCase):
    def setUp(self) -> None:
        self.base = tempfile.mkdtemp(prefix="kafkatw-guard-")
        self.dirs = [os.path.join(self.base, "a"), os.path.join(self.base, "b")]
        for d in self.dirs:
            os.makedirs(d)
        self.addCleanup(shutil.rmtree, self.base, True)

    def test_nothing_while_the_holder_lives(self):
        """A live broker's session is never handed out: its lock is held."""
        holder = Holder(self.dirs)
        self.addCleanup(holder.kill)
        self.assertEqual(session_guard.dead_sessions(self.dirs), [])

    def test_the_recorded_session_once_the_holder_died(self):
        holder = Holder(self.dirs)
        holder.kill()
        sessions = session_guard.dead_sessions(self.dirs)
        self.assertEqual([(s.session_id, s.password) for s in sessions], [(SESSION, bytes(range(16)))])
        # and the guard left the directories free for a broker starting again
        lock = LogDirLock(self.dirs)
        lock.acquire()
        lock.release()

    def test_nothing_after_a_clean_stop(self):
        """A clean stop closed its session and removed the record: nothing to end."""
        Holder(self.dirs).stop_cleanly()
        self.assertEqual(session_guard.dead_sessions(self.dirs), [])

    def test_nothing_when_a_new_holder_took_the_lock(self):
        """A broker started again holds the lock: it ends the dead session itself."""
        Holder(self.dirs, 0x111).kill()
        successor = Holder(self.dirs, 0x222)
        self.addCleanup(successor.kill)
        self.assertEqual(session_guard.dead_sessions(self.dirs), [])

    def test_a_record_of_another_host_is_not_ended(self):
        Holder(self.dirs).kill()
        self.assertEqual(session_guard.dead_sessions(self.dirs, host="another-host"), [])

    def test_wait_until_unlocked_returns_when_the_holder_dies(self):
        holder = Holder(self.dirs)
        returned: list[bool] = []
        waiter = threading.Thread(target=lambda: returned.append(session_guard.wait_until_unlocked(self.dirs[0])))
        waiter.start()
        waiter.join(0.2)
        self.assertEqual(returned, [], "returned while the lock was held")
        holder.kill()
        waiter.join(30)
        self.assertEqual(returned, [True])
        # it dropped the lock again
        self.assertEqual(len(session_guard.dead_sessions(self.dirs)), 1)

    def test_wait_until_unlocked_without_a_lock_file(self):
        self.assertFalse(session_guard.wait_until_unlocked(self.dirs[0]))


class EndSessionsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.server = FakeZooKeeper()
        self.broker = FakeZooKeeperClient(self.server)
        self.successResultOf(self.broker.start())
        self.successResultOf(self.broker.create("/brokers/ids/0", b"{}", ephemeral=True, makepath=True))
        self.other = FakeZooKeeperClient(self.server)
        self.successResultOf(self.other.start())
        self.successResultOf(self.other.create("/brokers/ids/1", b"{}", ephemeral=True, makepath=True))
        self.guard = FakeZooKeeperClient(self.server)  # (the real client needs no start() to end a session)
        self.successResultOf(self.guard.start())
        self.log = EventLoggingObserver()
        globalLogPublisher.addObserver(self.log)
        self.addCleanup(globalLogPublisher.removeObserver, self.log)

    def recorded(self, client: FakeZooKeeperClient) -> RecordedSession:
        return RecordedSession(client.session_id, client.session_password, "here", "/data")

    def test_ends_the_session_and_only_it(self):
        from twisted.internet.defer import Deferred

        result = self.successResultOf(Deferred.fromCoroutine(
            session_guard.end_sessions(self.guard, [self.recorded(self.broker)], 0)))
        self.assertEqual(result, [True])
        self.assertIsNone(self.successResultOf(self.other.exists("/brokers/ids/0")))
        self.assertIsNotNone(self.successResultOf(self.other.exists("/brokers/ids/1")))
        self.assertIn("ended its ZooKeeper session", " ".join(str(e.get("log_format")) for e in self.log))

    def test_a_session_that_ended_already(self):
        from twisted.internet.defer import Deferred

        dead = self.recorded(self.broker)
        self.successResultOf(self.broker.stop())
        result = self.successResultOf(Deferred.fromCoroutine(session_guard.end_sessions(self.guard, [dead], 0)))
        self.assertEqual(result, [False])
        self.assertIsNotNone(self.successResultOf(self.other.exists("/brokers/ids/1")))

    def test_zookeeper_unreachable(self):
        from twisted.internet.defer import Deferred

        from kafkatw.zookeeper.bridge import ZooKeeperUnavailableError

        with mock.patch.object(self.guard, "end_session", side_effect=ZooKeeperUnavailableError("down")):
            result = self.successResultOf(Deferred.fromCoroutine(
                session_guard.end_sessions(self.guard, [self.recorded(self.broker)], 0)))
        self.assertEqual(result, [None])
        self.assertIsNotNone(self.successResultOf(self.other.exists("/brokers/ids/0")))


class ProcessReactor(LoopbackReactor):
    """A L{LoopbackReactor} that records C{spawnProcess} calls instead of starting processes."""

    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[tuple] = []
        self.spawn_error: OSError | None = None
        self.on_spawn = lambda: None

    def spawnProcess(self, processProtocol, executable, args=(), env=None, path=None, uid=None, gid=None,  # noqa: N802,N803
                     usePTY=False, childFDs=None):
        self.on_spawn()
        if self.spawn_error is not None:
            raise self.spawn_error
        transport = mock.Mock(pid=4242)
        processProtocol.makeConnection(transport)
        self.spawned.append((processProtocol, executable, list(args), env, childFDs))
        return transport


def ended(protocol: session_guard.GuardProcess, reason: Exception) -> None:
    protocol.processEnded(Failure(reason))


class SpawnTests(unittest.TestCase):
    def test_the_command_environment_and_descriptors(self):
        reactor = ProcessReactor()
        guard = session_guard.GuardProcess(3)
        session_guard.spawn(reactor, guard, ["/data/a", "/data/b"], "zk1:2181,zk2:2181", 6000, 3)
        [(protocol, executable, command, env, child_fds)] = reactor.spawned
        self.assertIs(protocol, guard)
        self.assertEqual((executable, command[0]), (sys.executable, sys.executable))
        self.assertEqual(command[1:], ["-m", "kafkatw.broker.session_guard", "--zookeeper", "zk1:2181,zk2:2181",
                                       "--session-timeout-ms", "6000", "--broker-id", "3", "--", "/data/a", "/data/b"])
        self.assertEqual(env, dict(os.environ))  # (Twisted's default is an empty environment)
        # stdout and stderr only: never the broker's lock (Twisted closes every other descriptor in the child)
        self.assertEqual(child_fds, {1: 1, 2: 2})
        self.assertEqual(guard.pid, 4242)


class GuardProcessProtocolTests(SynchronousTestCase):
    """The broker's end of the guard: an exit while the broker runs is logged once; at a stop it is expected."""

    def setUp(self) -> None:
        self.log = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        self.guard = session_guard.GuardProcess(2)
        self.guard.makeConnection(mock.Mock(pid=77))

    def warnings(self) -> list[str]:
        return [formatEvent(e) for e in self.log if e["log_level"] == LogLevel.warn]

    def test_killed_while_the_broker_runs(self):
        ended(self.guard, ProcessTerminated(signal=9))
        self.assertEqual(self.warnings(), [
            "broker 2's session guard (pid 77) exited while the broker runs: A process has ended with a probable"
            " error condition: process ended by signal 9.; if this broker's process dies now, its ZooKeeper session"
            " lasts until zookeeper.session.timeout.ms"])
        self.assertIsInstance(self.successResultOf(self.guard.ended), ProcessTerminated)

    def test_exit_after_the_broker_began_stopping(self):
        self.guard.broker_stopping()
        ended(self.guard, ProcessDone(0))
        self.assertEqual(self.warnings(), [])
        self.assertIsInstance(self.successResultOf(self.guard.ended), ProcessDone)


class BrokerWiringTests(InProcessBrokers):
    """A whole broker (kafkatw/broker/server.py) with C{zookeeper.session.guard.enable}."""

    def start_broker(self, log_dir: str, guard: bool = True) -> tuple[KafkaServer, ProcessReactor]:
        reactor = ProcessReactor()
        server = KafkaServer(BrokerConfig({
            "broker.id": 0, "log.dirs": log_dir, "listeners": "PLAINTEXT://127.0.0.1:0",
            "zookeeper.connect": "fake:2181/chroot", "log.cleaner.enable": "false",
            "zookeeper.session.timeout.ms": "6000", "zookeeper.session.guard.enable": str(guard).lower(),
        }), reactor)
        reactor.on_spawn = lambda: self.assertTrue(server.log_dir_lock is not None and server.log_dir_lock.held,
                                                   "spawned before the lock was held")
        server.startService()
        self.addCleanup(self._dispose, server)
        return server, reactor

    def test_spawned_once_the_lock_is_held(self):
        log_dir = self.log_dir()
        server, reactor = self.start_broker(log_dir)
        self.successResultOf(server.ready)
        [(guard, _, command, _, _)] = reactor.spawned
        self.assertIs(server.session_guard, guard)
        self.assertEqual(command[-6:], ["--session-timeout-ms", "6000", "--broker-id", "0", "--",
                                        os.path.realpath(log_dir)])
        self.assertEqual(command[command.index("--zookeeper") + 1], "fake:2181")  # hosts, without the chroot
        self.assertIn("session guard started (pid 4242): if this process dies, its ZooKeeper session is ended at once",
                      self.logged(LogLevel.info))

    def test_off_by_default(self):
        server, reactor = self.start_broker(self.log_dir(), guard=False)
        self.successResultOf(server.ready)
        self.assertEqual(reactor.spawned, [])
        self.assertIsNone(server.session_guard)

    def test_the_guard_killed_while_the_broker_runs_is_logged(self):
        server, reactor = self.start_broker(self.log_dir())
        self.successResultOf(server.ready)
        ended(server.session_guard, ProcessTerminated(signal=9))
        [line] = self.logged(LogLevel.warn)
        self.assertTrue(line.startswith("broker 0's session guard (pid 4242) exited while the broker runs"), line)

    def test_its_exit_after_a_clean_stop_is_expected(self):
        server, reactor = self.start_broker(self.log_dir())
        self.successResultOf(server.ready)
        stopped = server.stopService()
        for _ in range(200):  # the controlled shutdown's and the listeners' steps
            if stopped.called:
                break
            reactor.advance(0.1)
            reactor.pump()
        self.successResultOf(stopped)
        self.assertFalse(server.log_dir_lock.held)  # what the guard waits for
        ended(server.session_guard, ProcessDone(0))
        self.assertEqual(self.logged(LogLevel.warn), [])

    def test_a_guard_that_cannot_start_is_logged_and_the_broker_serves(self):
        log_dir = self.log_dir()
        server = KafkaServer(BrokerConfig({
            "broker.id": 0, "log.dirs": log_dir, "listeners": "PLAINTEXT://127.0.0.1:0",
            "zookeeper.connect": "fake:2181", "log.cleaner.enable": "false", "zookeeper.session.guard.enable": "true",
        }), ProcessReactor())
        server.reactor.spawn_error = PermissionError(13, "Permission denied")
        server.startService()
        self.addCleanup(self._dispose, server)
        self.successResultOf(server.ready)
        self.assertIsNone(server.session_guard)
        self.assertEqual(self.logged(LogLevel.warn), [
            "could not start the session guard: [Errno 13] Permission denied; after a crash this broker's ZooKeeper"
            " session expires at the session timeout"])


class GuardProcessTests(unittest.TestCase):
    """The guard's C{main} as a process: it exits without touching ZooKeeper when nothing is left to end."""

    def setUp(self) -> None:
        self.base = tempfile.mkdtemp(prefix="kafkatw-guard-")
        self.addCleanup(shutil.rmtree, self.base, True)

    def run_guard(self, *dirs: str) -> subprocess.CompletedProcess:
        # port 1 on 127.0.0.1: nothing listens; the guard must not need it
        return subprocess.run([sys.executable, "-m", "kafkatw.broker.session_guard", "--zookeeper", "127.0.0.1:1",
                               "--session-timeout-ms", "4000", "--", *dirs], capture_output=True, text=True,
                              timeout=60)

    def test_after_a_clean_stop(self):
        Holder([self.base]).stop_cleanly()
        done = self.run_guard(self.base)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stderr, "")

    def test_no_lock_file(self):
        done = self.run_guard(self.base)
        self.assertEqual(done.returncode, 0, done.stderr)
