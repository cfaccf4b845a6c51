"""
Integration tests of the start-up path (issue 9): a broker that cannot start
exits non-zero with one clear line and touches nothing in its log directory;
ZooKeeper is "ready" only when our own child serves.  Restarts (issue 27): a
broker killed and started again serves at once, and a client connecting while
a broker starts is answered once it serves.

Each failure case starts from a copy of a log directory that a real broker of
cluster A filled (a topic with records, meta.properties, checkpoints, the
clean-shutdown marker) and snapshots it (sizes, mtimes, contents) before and
after the failed start.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.internet import reactor
from twisted.trial.unittest import TestCase as ReactorTestCase

from kafkatw.protocol.messages import decode_response, encode_request
from kafkatw.testing import BrokerProcess, ClassFixture, ZooKeeperFixture, find_free_port, snapshot_tree, wait_for
from kafkatw.zookeeper.bridge import ZooKeeperClient
from kafkatw.zookeeper.embedded import ZooKeeperPortInUseError, start_blocking, stop_blocking, wait_ready

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child that must import this checkout's kafkatw."""
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def zookeeper_children(connect: str, path: str) -> list[str]:
    """Blocking: the children of C{path} (C{[]} when it does not exist)."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []
    finally:
        client.stop()
        client.close()


class StartupFailureTests(ClassFixture, unittest.TestCase):
    """
    Every expected failure to start: exit status, one line on stderr (the
    log file gets it too), and the log directory unchanged.
    """

    @classmethod
    def setUpClass(cls) -> None:
        cls.base = tempfile.mkdtemp(prefix="kafkatw-startup-")
        cls.zookeeper = ZooKeeperFixture(os.path.join(cls.base, "zookeeper-a"))
        try:
            cls.connect = cls.zookeeper.start() + "/kafkatw"
            broker = BrokerProcess(0, cls.connect, cls.base).start()
            try:
                admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                admin.create_topics([NewTopic("orders", 2, 1)], operation_timeout=10)["orders"].result(15)
                producer = Producer({"bootstrap.servers": broker.bootstrap})
                for i in range(100):
                    producer.produce("orders", value=b"order-%d" % i, partition=i % 2)
                assert producer.flush(15) == 0
            finally:
                broker.stop()
            cls.filled = broker.data_dir
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.zookeeper.stop()
        shutil.rmtree(cls.base, ignore_errors=True)

    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="kafkatw-startup-case-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def broker(self, broker_id: int = 0, connect: str | None = None, **kwargs: object) -> BrokerProcess:
        """A broker whose log dir is a copy of cluster A's broker 0's."""
        process = BrokerProcess(broker_id, connect or self.connect, self.tmp, **kwargs)  # type: ignore[arg-type]
        shutil.copytree(self.filled, process.data_dir)
        return process

    def assertFailsUntouched(self, process: BrokerProcess, status: int = 1, timeout_s: float = 60.0) -> str:
        """Run C{process} to its exit; check status, one stderr line, the log dir unchanged; return the line."""
        before = snapshot_tree(process.data_dir)
        self.assertIn(os.path.join(".", "meta.properties"), before)
        result = process.run_to_exit(timeout_s)
        self.assertEqual(result.returncode, status, result.stderr)
        self.assertEqual(snapshot_tree(process.data_dir), before, "the log dir changed")
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        if status == 1:
            log = process.log_text()
            self.assertIn(lines[0], log)
            self.assertNotIn("Traceback", log)
            self.assertNotIn(f"broker {process.broker_id} started", log)
        return lines[0]

    def test_log_dir_of_another_cluster(self) -> None:
        with ZooKeeperFixture() as other:
            line = self.assertFailsUntouched(self.broker(0, other + "/kafkatw"))
            self.assertIn("doesn't match stored clusterId", line)
            self.assertIn("The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong.",
                          line)
            self.assertEqual(zookeeper_children(other, "/kafkatw/brokers/ids"), [])
            self.assertEqual(zookeeper_children(other, "/kafkatw/brokers/topics"), [])

    def test_log_dir_of_another_broker_id(self) -> None:
        line = self.assertFailsUntouched(self.broker(1))
        self.assertIn("Configured broker.id 1 doesn't match stored broker.id 0 in meta.properties", line)

    def test_listener_port_taken_by_another_broker(self) -> None:
        other = BrokerProcess(5, self.connect, self.tmp).start()
        try:
            line = self.assertFailsUntouched(self.broker(0, port=other.port))
            self.assertIn(f"cannot listen on tcp:{other.port}:interface=127.0.0.1: Address already in use", line)
            self.assertIn("--listeners", line)
            self.assertIsNone(other.popen.poll())
            self.assertEqual(zookeeper_children(self.zookeeper.connect_string, "/kafkatw/brokers/ids"), ["5"])
        finally:
            other.stop()

    def test_listener_port_taken_fails_before_the_embedded_zookeeper_starts(self) -> None:
        # as the before-stop check runs it: twistd -n ... --zookeeper embedded, the port held by a plain socket
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            process = self.broker(0, "embedded", port=port,
                                  env={"KAFKATW_EMBEDDED_ZOOKEEPER_PORT": str(find_free_port())})
            started = time.monotonic()
            line = self.assertFailsUntouched(process)
        self.assertLess(time.monotonic() - started, 20)
        self.assertIn(f"cannot listen on tcp:{port}:interface=127.0.0.1", line)
        self.assertNotIn("starting ZooKeeper", process.log_text())

    def test_embedded_zookeeper_port_taken_by_another_zookeeper(self) -> None:
        port = self.zookeeper.port
        process = self.broker(0, "embedded", env={"KAFKATW_EMBEDDED_ZOOKEEPER_PORT": str(port)})
        line = self.assertFailsUntouched(process)
        self.assertIn(f"ZooKeeper cannot listen on 127.0.0.1:{port}: the port is already in use", line)
        self.assertIn("embedded:PORT", line)
        self.assertIn("KAFKATW_EMBEDDED_ZOOKEEPER_PORT", line)
        self.assertNotIn("embedded ZooKeeper ready", process.log_text())
        self.assertEqual(zookeeper_children(self.zookeeper.connect_string, "/kafkatw/brokers/ids"), [])

    def test_unreachable_zookeeper(self) -> None:
        connect = f"127.0.0.1:{find_free_port()}"
        process = self.broker(0, connect, overrides={"zookeeper.connection.timeout.ms": "2000"})
        started = time.monotonic()
        line = self.assertFailsUntouched(process)
        self.assertLess(time.monotonic() - started, 30)
        self.assertIn(f"ZooKeeper at {connect} did not answer within 2000 ms", line)
        self.assertIn("zookeeper.connection.timeout.ms", line)

    def test_config_the_broker_cannot_honour(self) -> None:
        process = self.broker(0, overrides={"log.cleanup.policy": "shred"})
        before = snapshot_tree(process.data_dir)
        result = process.run_to_exit()
        self.assertEqual(result.returncode, 2)
        self.assertEqual(snapshot_tree(process.data_dir), before)
        first, pointer = result.stderr.splitlines()
        self.assertEqual(first, "twistd kafkatw: bad value for log.cleanup.policy: 'shred'"
                                " (must be delete, compact or compact,delete)")
        self.assertIn("--help", pointer)

    def test_kafkatw_broker_exits_non_zero_too(self) -> None:
        # `kafkatw broker ARGS` execs `twistd -n --pidfile= kafkatw ARGS`: the log goes to stdout (and the line with it)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            process = self.broker(0, port=port)
            before = snapshot_tree(process.data_dir)
            args = process.command()
            result = subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "broker", *args[args.index("kafkatw") + 1:]],
                                    capture_output=True, text=True, timeout=60, env=child_env(), cwd=self.tmp)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        failures = [line for line in result.stdout.splitlines() if "failed to start" in line]
        self.assertEqual(len(failures), 1, result.stdout)
        self.assertIn(f"cannot listen on tcp:{port}:interface=127.0.0.1: Address already in use", failures[0])
        self.assertNotIn("Traceback", result.stdout + result.stderr)
        self.assertEqual(snapshot_tree(process.data_dir), before)


class EmbeddedZooKeeperTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="kafkatw-startup-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_first_start_writes_meta_properties_and_a_clean_stop_is_quiet(self) -> None:
        process = BrokerProcess(0, f"embedded:{find_free_port()}", self.tmp).start()
        try:
            with open(os.path.join(process.data_dir, "meta.properties")) as f:
                lines = f.read().splitlines()
        finally:
            status = process.stop()
        self.assertEqual(lines[0], "#")
        self.assertTrue(lines[1].startswith("#"))
        self.assertEqual(lines[2:4], ["version=0", "broker.id=0"])
        self.assertRegex(lines[4], r"^cluster\.id=[A-Za-z0-9_-]{22}$")
        # twistd re-raises the signal it stopped on
        self.assertEqual(status, -signal.SIGTERM)
        log = process.log_text()
        shutdown = log[log.index("broker 0 shutting down"):]
        self.assertIn("ZooKeeper on port", shutdown)
        for alarming in ("exit code", "#error", "#critical", "#warn", "Traceback", "probable error"):
            self.assertNotIn(alarming, shutdown)
        self.assertIn("broker 0 stopped", shutdown)

    def test_child_losing_the_port_race_is_a_start_failure_with_the_bind_error(self) -> None:
        """
        The port was free when checked, then taken before the child bound it:
        the other server answers on the port, but it is not ours, and our
        child's exit is the failure, with the bind error from its log.
        """
        with ZooKeeperFixture() as other:
            port = int(other.rsplit(":", 1)[1])
            from kafkatw.zookeeper import embedded

            original = embedded.port_in_use
            embedded.port_in_use = lambda *args, **kwargs: False  # the check saw a free port
            try:
                popen = start_blocking(os.path.join(self.tmp, "zookeeper"), port, 500, port_setting="--port")
            finally:
                embedded.port_in_use = original
            try:
                with self.assertRaises(ZooKeeperPortInUseError) as raised:
                    wait_ready(port, 30, popen)
            finally:
                stop_blocking(popen)
        self.assertIn("java.net.BindException: Address already in use", str(raised.exception))
        self.assertIn(f"127.0.0.1:{port}", str(raised.exception))


class StandaloneZooKeeperTests(unittest.TestCase):
    def test_taken_port_is_an_error_and_never_ready(self) -> None:
        data_dir = tempfile.mkdtemp(prefix="kafkatw-startup-")
        self.addCleanup(shutil.rmtree, data_dir, True)
        with ZooKeeperFixture() as other:
            port = int(other.rsplit(":", 1)[1])
            result = subprocess.run(
                [sys.executable, "-m", "kafkatw.cli.main", "zookeeper", "--port", str(port), "--data-dir", data_dir],
                capture_output=True, text=True, timeout=60, env=child_env(),
            )
        self.assertNotEqual(result.returncode, 0)
        self.assertNotIn("ZooKeeper ready", result.stderr + result.stdout)
        self.assertEqual(result.stderr.splitlines(), [
            f"Error: ZooKeeper cannot listen on 127.0.0.1:{port}: the port is already in use;"
            " stop what holds it or choose another port with --port"
        ])


class RestartTests(unittest.TestCase):
    """
    Restarts (issue 27) under ZooKeeper's default session timeout of 18 s (a
    tickTime of 1 s lets ZooKeeper grant it): a broker killed with SIGKILL and
    started again on its log dirs serves within seconds, not after its dead
    process's session expired; a client that connects while a broker starts
    is answered once it serves, not dropped.
    """

    SESSION_TIMEOUT_S = 18

    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="kafkatw-restart-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.zookeeper = ZooKeeperFixture(os.path.join(self.tmp, "zookeeper"), tick_time_ms=1000)
        self.connect = self.zookeeper.start() + "/kafkatw"
        self.addCleanup(self.zookeeper.stop)

    def broker(self, name: str) -> BrokerProcess:
        """Broker 0 with log dirs of its own (under C{name}), the default session timeout; stopped at the end."""
        base = os.path.join(self.tmp, name)
        os.makedirs(base)
        process = BrokerProcess(0, self.connect, base,
                                overrides={"zookeeper.session.timeout.ms": str(self.SESSION_TIMEOUT_S * 1000)})
        self.addCleanup(process.stop)
        return process

    def test_a_broker_killed_and_restarted_serves_within_seconds(self) -> None:
        broker = self.broker("a").start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("orders", 1, 1)], operation_timeout=10)["orders"].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        producer.produce("orders", b"before")
        self.assertEqual(producer.flush(15), 0)
        broker.kill()

        killed = time.monotonic()
        broker.start(timeout_s=self.SESSION_TIMEOUT_S - 6)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": 10000})
        delivered: list[object] = []
        producer.produce("orders", b"after", on_delivery=lambda err, message: delivered.append(err))
        self.assertEqual(producer.flush(10), 0)
        self.assertEqual(delivered, [None])  # acknowledged
        serving_s = time.monotonic() - killed
        self.assertLess(serving_s, self.SESSION_TIMEOUT_S / 2)
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5)
        self.assertEqual(sorted(metadata.brokers), [0])
        self.assertEqual(metadata.topics["orders"].partitions[0].leader, 0)
        log = broker.log_text()
        self.assertIn("of broker 0's previous process, which held these log dirs and is gone", log)
        self.assertNotIn("waiting", log[log.rindex("ended ZooKeeper session"):])

    def test_a_second_process_on_the_same_log_dirs_fails_at_once(self) -> None:
        running = self.broker("a").start()
        second = BrokerProcess(0, self.connect, os.path.join(self.tmp, "a"),  # the same log dirs, another port
                               overrides={"zookeeper.session.timeout.ms": str(self.SESSION_TIMEOUT_S * 1000)})
        started = time.monotonic()
        result = second.run_to_exit(60)
        self.assertLess(time.monotonic() - started, self.SESSION_TIMEOUT_S / 2)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(result.stderr.splitlines(), [
            f"broker 0 failed to start: Failed to acquire lock on file .lock in {os.path.realpath(running.data_dir)}."
            " A kafkatw broker in another process (or another broker of this process) is using this directory;"
            " stop it, or give this broker other log.dirs (--log-dirs)"])
        self.assertIsNone(running.popen.poll())
        self.assertEqual(AdminClient({"bootstrap.servers": running.bootstrap}).list_topics(timeout=5).brokers[0].port,
                         running.port)  # still registered, still serving

    def test_a_client_connecting_while_the_broker_starts_is_answered(self) -> None:
        holder = self.broker("a").start()
        starting = self.broker("b")  # broker.id 0 too, other log dirs: it waits for the holder's session
        starting.popen = subprocess.Popen(starting.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.STDOUT)
        wait_for(lambda: os.path.exists(starting.log_path)
                 and "is registered by another live broker" in starting.log_text(), timeout_s=30,
                 what="the second broker 0 to wait for the first one's registration")

        client = socket.create_connection(("127.0.0.1", starting.port), timeout=5)
        self.addCleanup(client.close)
        request = encode_request(18, 3, 7, "restart-test", {"client_software_name": "t",
                                                            "client_software_version": "1"})
        client.sendall(struct.pack(">i", len(request)) + request)
        # While it starts, the connection gets nothing, not even its end (a closed one would be readable).
        self.assertEqual(select.select([client], [], [], 1.0)[0], [], "the starting broker answered or closed")
        self.assertIsNone(starting.popen.poll())

        holder.stop()  # its session ends, and its registration with it: the starting broker registers and serves
        client.settimeout(30)
        received = b""
        while len(received) < 4 or len(received) < 4 + struct.unpack(">i", received[:4])[0]:
            chunk = client.recv(65536)
            self.assertNotEqual(chunk, b"", "the broker closed the connection instead of answering it")
            received += chunk
        correlation_id, response = decode_response(18, 3, received[4:])
        self.assertEqual((correlation_id, response.error_code), (7, 0))
        self.assertIn("broker 0 started", starting.log_text())


#: A process that opens a ZooKeeper session, creates an ephemeral node, prints
#: its session id and password, and waits to be killed.
_SESSION_HOLDER = """
import sys, time
from kazoo.client import KazooClient
client = KazooClient(hosts=sys.argv[1], timeout=18)
client.start(15)
client.create(sys.argv[2], b"", ephemeral=True, makepath=True)
session, password = client.client_id
print(session, password.hex(), flush=True)
time.sleep(600)
"""


class EndSessionTests(ReactorTestCase):
    """
    L{ZooKeeperClient.end_session} against a real ZooKeeper: the session of a
    killed process (its ephemeral node still there) is ended at once, and
    nothing of another session is touched.
    """

    timeout = 120

    def setUp(self) -> None:
        self.zookeeper = ZooKeeperFixture(tick_time_ms=1000)
        self.connect = self.zookeeper.start()
        self.addCleanup(self.zookeeper.stop)

    def killed_holder(self, path: str) -> tuple[int, bytes]:
        """A process's session holding the ephemeral C{path}, the process killed (SIGKILL): the session lives on."""
        child = subprocess.Popen([sys.executable, "-c", _SESSION_HOLDER, self.connect, path],
                                 stdout=subprocess.PIPE, text=True)
        try:
            session, password = child.stdout.readline().split()
        finally:
            child.kill()
            child.wait(10)
            child.stdout.close()
        return int(session), bytes.fromhex(password)

    async def test_the_session_given_is_ended_and_no_other(self) -> None:
        dead_session, dead_password = self.killed_holder("/kafkatw/dead")
        live_session, live_password = self.killed_holder("/kafkatw/other")
        client = ZooKeeperClient(self.connect, reactor, session_timeout_ms=18000)
        await client.start()
        self.addCleanup(client.stop)
        self.assertEqual((await client.exists("/dead")).ephemeralOwner, dead_session)

        self.assertTrue(await client.end_session(dead_session, dead_password))
        self.assertIsNone(await client.exists("/dead"))  # at once, not at the session timeout
        self.assertEqual((await client.exists("/other")).ephemeralOwner, live_session)
        self.assertFalse(await client.end_session(dead_session, dead_password))  # ended already
        self.assertFalse(await client.end_session(live_session, bytes(16)))  # not its password
        self.assertEqual((await client.exists("/other")).ephemeralOwner, live_session)
        self.assertTrue(await client.end_session(live_session, live_password))
