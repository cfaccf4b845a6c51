"""
Integration tests of the start-up path (issue 9): a broker that cannot start
exits non-zero with one clear line and touches nothing in its log directory;
ZooKeeper is "ready" only when our own child serves.

Each failure case starts from a copy of a log directory that a real broker of
cluster A filled (a topic with records, meta.properties, checkpoints, the
clean-shutdown marker) and snapshots it (sizes, mtimes, contents) before and
after the failed start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.testing import BrokerProcess, ClassFixture, ZooKeeperFixture, find_free_port, snapshot_tree
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
        # `kafkatw broker ARGS` execs `twistd -n kafkatw ARGS`: the log goes to stdout (and the line with it)
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
