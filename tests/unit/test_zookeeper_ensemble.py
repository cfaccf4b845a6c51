"""
ZooKeeper ensembles and the embedded server's death (issue 27): the
C{server.N} lines and C{myid} of C{kafkatw zookeeper}, the zoo.cfg written for
a member, the reason read from ZooKeeper's output when it exits (also when
its log cannot be written: a full disk), the broker stopping on it
(L{kafkatw.tap}), and the ZooKeeper client's reconnect policy.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile

from click.testing import CliRunner
from twisted.internet.error import ProcessTerminated
from twisted.internet.testing import EventLoggingObserver, MemoryReactorClock
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial import unittest

from kafkatw import tap
from kafkatw.cli.main import main
from kafkatw.zookeeper import standalone
from kafkatw.zookeeper.bridge import RECONNECT_RETRY, ZooKeeperClient
from kafkatw.zookeeper.embedded import (
    ZooKeeperStartError,
    QuorumServer,
    _ZooKeeperProcess,
    check_ensemble,
    check_myid,
    srvr_mode,
    start_error_from_text,
    write_config,
)

SERVERS = [QuorumServer(1, "zk1.example", 2888, 3888), QuorumServer(2, "zk2.example", 2888, 3888),
           QuorumServer(3, "zk3.example", 2888, 3888)]


def temp_dir(case: unittest.SynchronousTestCase) -> str:
    path = tempfile.mkdtemp(prefix="kafkatw-test-")
    case.addCleanup(shutil.rmtree, path, True)
    return path


class QuorumServerTests(unittest.SynchronousTestCase):
    def test_parse_both_forms(self) -> None:
        self.assertEqual(QuorumServer.parse("1=zk1.example:2888:3888"), SERVERS[0])
        self.assertEqual(QuorumServer.parse("server.2=zk2.example:2888:3888"), SERVERS[1])
        self.assertEqual(QuorumServer.parse(" 3 = zk3.example:2888:3888 "), SERVERS[2])
        self.assertEqual(QuorumServer.parse("255=[::1]:1:65535"), QuorumServer(255, "::1", 1, 65535))

    def test_config_line(self) -> None:
        self.assertEqual(SERVERS[0].config_line, "server.1=zk1.example:2888:3888")
        self.assertEqual(QuorumServer(4, "::1", 2888, 3888).config_line, "server.4=[::1]:2888:3888")
        for server in SERVERS:
            self.assertEqual(QuorumServer.parse(server.config_line), server)

    def test_refused(self) -> None:
        for text in ["zk1:2888:3888", "1=zk1:2888", "1=zk1:2888:3888:participant", "x=zk1:2888:3888",
                     "1=:2888:3888", "1=zk1:2888:x", "server.1", "0=zk1:2888:3888", "256=zk1:2888:3888",
                     "1=zk1:0:3888", "1=zk1:2888:65536", "1=zk1:2888:3888;2181"]:
            with self.assertRaises(ValueError, msg=text):
                QuorumServer.parse(text)

    def test_check_ensemble(self) -> None:
        check_ensemble([], None)  # standalone
        check_ensemble(SERVERS, 2)
        cases = [
            ([], 1, "--myid needs the ensemble's --server"),
            (SERVERS, None, "needs --myid"),
            (SERVERS, 4, "--myid 4 is none of the servers (server.1, server.2, server.3)"),
            (SERVERS + [QuorumServer(2, "zk4.example", 2888, 3888)], 2, "server.2 is named twice"),
            ([QuorumServer(1, "h", 2888, 3888), QuorumServer(2, "h", 3888, 4888)], 1,
             "h:3888 is named twice among the servers' ports"),
        ]
        for servers, myid, message in cases:
            with self.assertRaises(ValueError) as raised:
                check_ensemble(servers, myid)
            self.assertIn(message, str(raised.exception))


class WriteConfigTests(unittest.SynchronousTestCase):
    def test_standalone_config_is_unchanged(self) -> None:
        data_dir = temp_dir(self)
        path = write_config(data_dir, 2181, 500)
        with open(path) as f:
            self.assertEqual(f.read(), (
                f"tickTime=500\ndataDir={data_dir}\nclientPort=2181\nclientPortAddress=127.0.0.1\n"
                "admin.enableServer=false\n4lw.commands.whitelist=ruok,conf,srvr,stat,mntr\nmaxClientCnxns=0\n"))
        self.assertFalse(os.path.exists(os.path.join(data_dir, "myid")))

    def test_member_config_and_myid(self) -> None:
        data_dir = temp_dir(self)
        path = write_config(data_dir, 2181, 2000, bind_address="0.0.0.0", servers=list(reversed(SERVERS)), myid=2,
                            init_limit=7, sync_limit=3)
        with open(path) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines, [
            "tickTime=2000", f"dataDir={data_dir}", "clientPort=2181", "clientPortAddress=0.0.0.0",
            "admin.enableServer=false", "4lw.commands.whitelist=ruok,conf,srvr,stat,mntr", "maxClientCnxns=0",
            "initLimit=7", "syncLimit=3",
            "server.1=zk1.example:2888:3888", "server.2=zk2.example:2888:3888", "server.3=zk3.example:2888:3888",
        ])
        with open(os.path.join(data_dir, "myid")) as f:
            self.assertEqual(f.read(), "2\n")

    def test_a_data_dir_of_another_member_is_refused(self) -> None:
        data_dir = temp_dir(self)
        check_myid(data_dir, 1)  # no myid yet: any member may take it
        write_config(data_dir, 2181, servers=SERVERS, myid=1)
        check_myid(data_dir, 1)
        with self.assertRaises(ZooKeeperStartError) as raised:
            check_myid(data_dir, 3)
        self.assertIn("says this data is member 1's, not member 3's: use --myid 1 or another --data-dir",
                      str(raised.exception))


class ServerOutputTests(unittest.SynchronousTestCase):
    def test_srvr_mode(self) -> None:
        self.assertEqual(srvr_mode(b"Zookeeper version: 3.8.0\nZxid: 0x100000000\nMode: leader\nNode count: 5\n"),
                         "leader")
        self.assertEqual(srvr_mode(b"Mode: follower\n"), "follower")
        self.assertIsNone(srvr_mode(b"This ZooKeeper instance is not currently serving requests\n"))
        self.assertIsNone(srvr_mode(b""))

    def test_the_exit_reason_is_the_exception_after_an_error_line(self) -> None:
        # a member whose peers are down logs WARN exceptions long before what made it exit
        text = (
            "[QuorumConnectionThread-[myid=1]-1] WARN QuorumCnxManager - Cannot open channel to 3 at election address\n"
            "java.net.ConnectException: Connection refused\n"
            "[SyncThread:0] ERROR org.apache.zookeeper.server.ZooKeeperCriticalThread - Severe unrecoverable error\n"
            "java.io.IOException: No space left on device\n"
            "\tat java.base/sun.nio.ch.FileDispatcherImpl.write0(Native Method)\n"
            "[main] ERROR org.apache.zookeeper.util.ServiceUtils - Exiting JVM with code 1\n"
        )
        self.assertEqual(start_error_from_text(text), "java.io.IOException: No space left on device")
        # a WARN's exception is never the reason; the JVM's own error is; else the last ERROR line
        self.assertEqual(start_error_from_text(text.split("[SyncThread")[0]), "")
        jvm = 'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space'
        self.assertEqual(start_error_from_text(text.split("[SyncThread")[0] + jvm + "\n"), jvm)
        self.assertEqual(start_error_from_text("[main] ERROR a - one\n[main] ERROR b - two\n"), "[main] ERROR b - two")
        self.assertEqual(start_error_from_text("[main] INFO fine\n"), "")


_ENOSPC_OUTPUT = (
    b"[main] INFO org.apache.zookeeper.server.ZooKeeperServer - serving\n"
    b"[SyncThread:0] ERROR org.apache.zookeeper.server.ZooKeeperCriticalThread - Severe unrecoverable error,"
    b" from thread : SyncThread:0\n"
    b"java.io.IOException: No space left on device\n"
    b"[main] ERROR org.apache.zookeeper.util.ServiceUtils - Exiting JVM with code 1\n"
)


class UnexpectedExitTests(unittest.SynchronousTestCase):
    """The embedded server's exit after it was ready: one line with the reason, for the broker to stop on."""

    def process(self, log_path: str) -> tuple[_ZooKeeperProcess, list[str]]:
        reasons: list[str] = []
        process = _ZooKeeperProcess(2181, log_path, on_unexpected_exit=reasons.append)
        process.ready = True
        return process, reasons

    def test_reason_from_the_output(self) -> None:
        log_path = os.path.join(temp_dir(self), "zookeeper.log")
        process, reasons = self.process(log_path)
        process.errReceived(_ENOSPC_OUTPUT[:100])  # output arrives in pieces, lines split anywhere
        process.errReceived(_ENOSPC_OUTPUT[100:])
        process.processEnded(Failure(ProcessTerminated(exitCode=1)))
        self.assertEqual(reasons, [f"ZooKeeper on port 2181 exited with status 1: java.io.IOException:"
                                   f" No space left on device (log: {log_path})"])
        with open(log_path, "rb") as f:
            self.assertEqual(f.read(), _ENOSPC_OUTPUT)

    def test_reason_when_the_log_cannot_be_written(self) -> None:
        # the log shares the full disk: every write fails with ENOSPC, as /dev/full's do
        if not os.path.exists("/dev/full"):
            raise unittest.SkipTest("needs /dev/full")
        events = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        process, reasons = self.process("/dev/full")
        for line in _ENOSPC_OUTPUT.splitlines(keepends=True):
            process.outReceived(line)
        process.processEnded(Failure(ProcessTerminated(exitCode=1)))
        self.assertEqual(reasons, ["ZooKeeper on port 2181 exited with status 1: java.io.IOException:"
                                   " No space left on device (log: /dev/full)"])
        warnings = [e for e in events if e["log_level"] == LogLevel.warn]
        self.assertEqual(len(warnings), 1)  # once, not once a line
        self.assertIn("cannot write ZooKeeper's output to /dev/full: [Errno 28] No space left on device",
                      formatEvent(warnings[0]))

    def test_killed(self) -> None:
        # killed from outside: the errors in its output are not why
        log_path = os.path.join(temp_dir(self), "zookeeper.log")
        process, reasons = self.process(log_path)
        process.errReceived(_ENOSPC_OUTPUT)
        process.processEnded(Failure(ProcessTerminated(signal=9)))
        self.assertEqual(reasons, [f"ZooKeeper on port 2181 was killed by signal 9 (log: {log_path})"])

    def test_a_requested_stop_or_a_failed_start_is_no_unexpected_exit(self) -> None:
        process, reasons = self.process(os.path.join(temp_dir(self), "zookeeper.log"))
        process.stopping = True
        process.processEnded(Failure(ProcessTerminated(exitCode=143)))
        starting, more = self.process(os.path.join(temp_dir(self), "zookeeper.log"))
        starting.ready = False  # whenReady reports a failed start, with the same reason
        starting.errReceived(b"[main] ERROR x - Unexpected exception\njava.net.BindException: Address already in use\n")
        starting.processEnded(Failure(ProcessTerminated(exitCode=1)))
        self.assertEqual((reasons, more), ([], []))
        self.assertEqual(starting.error_line(), "java.net.BindException: Address already in use")

    def test_the_output_kept_in_memory_is_bounded(self) -> None:
        process, _ = self.process("/dev/null")
        for _ in range(200):
            process.outReceived(b"[main] INFO " + b"x" * 1000 + b"\n")
        process.outReceived(_ENOSPC_OUTPUT)
        self.assertLessEqual(len(process._tail), _ZooKeeperProcess.TAIL_BYTES)
        self.assertEqual(process.error_line(), "java.io.IOException: No space left on device")


class StopOnErrorTests(unittest.SynchronousTestCase):
    """C{twistd kafkatw}: a running broker that must stop ends the process with its line and status 1."""

    def setUp(self) -> None:
        self.log_dir = temp_dir(self)
        self.registered: list = []
        self.exits: list = []
        self.exit_status = tap._ExitStatus(register=self.registered.append, exit=self.exits.append)
        self.patch(tap, "_exit_status", self.exit_status)
        self.stderr = io.StringIO()
        self.patch(sys, "__stderr__", self.stderr)
        options = tap.Options()
        options.parseOptions(["--log-dirs", self.log_dir])
        options.parent = {"syslog": False, "logfile": "broker.log", "nodaemon": True}
        self.reactor = MemoryReactorClock()
        self.reactor.running = True
        self.stops: list = []
        self.reactor.stop = lambda: self.stops.append(True)
        self.server = tap.makeService(options, self.reactor)

    def test_stop_on_error_stops_the_reactor_and_exits_1(self) -> None:
        events = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        line = "broker 0 stops: its embedded ZooKeeper on port 2181 exited with status 1: java.io.IOException: ..."
        self.server.stop_on_error(line)
        self.assertEqual(self.stops, [True])
        self.assertEqual(self.stderr.getvalue(), line + "\n")
        self.assertEqual([(e["log_level"], formatEvent(e)) for e in events], [(LogLevel.critical, line)])
        self.exit_status.exit()
        self.assertEqual(self.exits, [1])

    def test_once_stopping_it_is_only_logged(self) -> None:
        self.server.stop_on_error("first")
        self.server.stop_on_error("second")
        self.assertEqual(self.stops, [True])
        self.assertEqual(self.stderr.getvalue(), "first\n")
        stopping = tap.makeService(self._options(), self.reactor)
        stopping._stopping = True
        stopping.stop_on_error("during the shutdown")
        self.assertEqual(self.stops, [True])

    def _options(self) -> tap.Options:
        options = tap.Options()
        options.parseOptions(["--log-dirs", self.log_dir])
        options.parent = {"syslog": False, "logfile": "broker.log", "nodaemon": True}
        return options


class ZooKeeperCommandTests(unittest.SynchronousTestCase):
    """C{kafkatw zookeeper}'s ensemble flags (the server itself runs in tests/integration)."""

    def setUp(self) -> None:
        self.runs: list = []

        def run(*args: object, **kwargs: object) -> int:
            self.runs.append((args, kwargs))
            return 0

        self.patch(standalone, "run", run)

    def invoke(self, *args: str):
        return CliRunner().invoke(main, ["zookeeper", *args])

    def test_member_flags_reach_the_server(self) -> None:
        result = self.invoke("--data-dir", "zk", "--port", "2182", "--bind-address", "0.0.0.0", "--myid", "2",
                             "--server", "1=zk1.example:2888:3888", "--server", "server.2=zk2.example:2888:3888",
                             "--server", "3=zk3.example:2888:3888", "--init-limit", "7", "--sync-limit", "3",
                             "--tick-time-ms", "500")
        self.assertEqual(result.exit_code, 0, result.output)
        (args, kwargs), = self.runs
        self.assertEqual(args, (2182, "zk", 500))
        self.assertEqual(kwargs, {"port_setting": "--port", "bind_address": "0.0.0.0", "servers": tuple(SERVERS),
                                  "myid": 2, "init_limit": 7, "sync_limit": 3})

    def test_standalone_defaults_are_unchanged(self) -> None:
        result = self.invoke("--data-dir", "zk")
        self.assertEqual(result.exit_code, 0, result.output)
        (args, kwargs), = self.runs
        self.assertEqual(args, (2181, "zk", 2000))
        self.assertEqual((kwargs["bind_address"], kwargs["servers"], kwargs["myid"]), ("127.0.0.1", (), None))

    def test_usage_errors(self) -> None:
        cases = [
            (["--myid", "1"], "--myid needs the ensemble's --server"),
            (["--server", "1=a:1:2", "--server", "2=b:1:2"], "a member of an ensemble needs --myid"),
            (["--server", "1=a:1:2", "--myid", "2"], "--myid 2 is none of the servers (server.1)"),
            (["--server", "1=a:1"], "is not N=HOST:PEER_PORT:ELECTION_PORT"),
            (["--myid", "256", "--server", "1=a:1:2"], "--myid"),
        ]
        for extra, message in cases:
            result = self.invoke("--data-dir", "zk", *extra)
            self.assertEqual(result.exit_code, 2, (extra, result.output))
            self.assertIn(message, result.output)
        self.assertEqual(self.runs, [])


class ReconnectPolicyTests(unittest.SynchronousTestCase):
    def test_reconnects_are_at_most_about_a_second_apart(self) -> None:
        # kazoo's default doubles the wait up to 3600 s: after a quorum outage a session
        # came back long after the quorum did, and expired (tests/integration/test_zookeeper_ensemble.py)
        client = ZooKeeperClient("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/kafkatw", MemoryReactorClock())
        retry = client._kazoo._conn_retry
        self.assertEqual((retry.max_tries, retry.delay, retry.max_delay), (-1, 0.1, 1.0))
        self.assertEqual(RECONNECT_RETRY["max_delay"], 1.0)
        self.assertEqual(len(client._kazoo.hosts), 3)
