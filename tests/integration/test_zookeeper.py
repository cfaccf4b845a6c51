"""
Integration tests against a real ZooKeeper server (Debian's zookeeper 3.8).

These are trial TestCases returning Deferreds (or C{async def}): trial runs the
real reactor; pytest runs them too through trial's own C{TestCase.run}.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from twisted.internet import defer, reactor, task
from twisted.internet.defer import DeferredList
from twisted.trial.unittest import SynchronousTestCase, TestCase

from kafkatw.testing import ZooKeeperFixture, find_free_port
from kafkatw.zookeeper.bridge import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    ZooKeeperClient,
    ZooKeeperUnavailableError,
)
from kafkatw.zookeeper.embedded import EmbeddedZooKeeperService, ruok, serving
from kafkatw.zookeeper.registry import BrokerIdInUseError, ControllerMovedError, PartitionStateWrite, Registry

TIMEOUT_S = 20.0


async def eventually(predicate, timeout_s=TIMEOUT_S, interval_s=0.02):
    """Poll C{predicate()} on the reactor until true (bounded)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await task.deferLater(reactor, interval_s, lambda: None)


class ZooKeeperTestCase(TestCase):
    timeout = 60

    def setUp(self):
        # not self.mktemp(): under pytest it creates directories in the working tree
        self.zookeeper = ZooKeeperFixture(None, tick_time_ms=500)
        self.connect = self.zookeeper.start()
        self.addCleanup(self.zookeeper.stop)

    async def client(self, chroot="/kafkatw", **kwargs):
        client = ZooKeeperClient(self.connect, reactor, chroot=chroot, session_timeout_ms=4000, **kwargs)
        await client.start()
        self.addCleanup(lambda: client.stop() if client._started and not client._stopping else None)
        return client


class BridgeTests(ZooKeeperTestCase):
    async def test_crud_in_reactor_thread(self):
        client = await self.client()
        main = threading.current_thread()
        threads = []

        def record(value):
            threads.append(threading.current_thread())
            return value

        self.assertEqual(await client.create("/a", b"1").addCallback(record), "/a")
        data, stat = await client.get("/a").addCallback(record)
        self.assertEqual((data, stat.version), (b"1", 0))
        stat = await client.set("/a", b"2", version=0).addCallback(record)
        self.assertEqual(stat.version, 1)
        with self.assertRaises(BadVersionError):
            await client.set("/a", b"3", version=0)
        with self.assertRaises(NodeExistsError):
            await client.create("/a")
        with self.assertRaises(NoNodeError):
            await client.get("/missing")
        with self.assertRaises(NoNodeError):
            await client.create("/x/y")
        await client.create("/x/y/z", makepath=True)
        self.assertEqual(await client.get_children("/x").addCallback(record), ["y"])
        self.assertIsNone(await client.exists("/nope"))
        await client.delete("/x", recursive=True)
        self.assertIsNone(await client.exists("/x"))
        self.assertEqual(set(threads), {main})

        # the chroot was created and is honoured
        root = await self.client(chroot="/")
        self.assertEqual(await root.get_children("/kafkatw"), ["a"])

    async def test_chroot_from_connect_string(self):
        client = ZooKeeperClient(self.connect + "/other/root", reactor, session_timeout_ms=4000)
        await client.start()
        try:
            await client.create("/n")
            root = await self.client(chroot="/")
            self.assertIsNotNone(await root.exists("/other/root/n"))
        finally:
            await client.stop()

    async def test_watches_fire_in_reactor_thread(self):
        client = await self.client()
        other = await self.client()
        main = threading.current_thread()
        children, data, threads = [], [], []

        def on_children(value):
            threads.append(threading.current_thread())
            children.append(value)

        def on_data(value):
            threads.append(threading.current_thread())
            data.append(value)

        await client.watch_children("/w", on_children)
        await client.watch_data("/w/n", on_data)
        self.assertEqual((children, data), ([[]], [None]))

        await other.create("/w/n", b"v1", makepath=True)
        await eventually(lambda: children[-1] == ["n"] and data[-1] == b"v1")
        await other.set("/w/n", b"v2")
        await eventually(lambda: data[-1] == b"v2")
        await other.create("/w/m")
        await eventually(lambda: children[-1] == ["m", "n"])
        await other.delete("/w/n")
        await eventually(lambda: children[-1] == ["m"] and data[-1] is None)
        self.assertEqual(set(threads), {main})

    async def test_ephemeral_vanishes_after_stop(self):
        owner = await self.client()
        watcher = await self.client()
        await owner.create("/e", b"", ephemeral=True)
        stat = await watcher.exists("/e")
        self.assertEqual(stat.ephemeralOwner, owner.session_id)
        await owner.stop()
        self.assertIsNone(await watcher.exists("/e"))

    async def test_session_expiry_and_new_session(self):
        client = await self.client()
        watcher = await self.client()
        states, new_sessions = [], []
        client.add_state_listener(states.append)
        client.on_new_session(lambda: new_sessions.append(client.session_id))
        registry = Registry(client)
        await registry.register_broker(7, "localhost", 9092)
        first_session = client.session_id
        seen = []
        await Registry(watcher).watch_brokers(seen.append)
        await client.expire_session_for_testing()
        await eventually(lambda: new_sessions)
        self.assertIn("LOST", states)
        self.assertEqual(states[-1], "CONNECTED")
        self.assertNotEqual(new_sessions[0], first_session)
        # the broker re-registered in the new session
        await eventually(lambda: seen[-1] == {7: ("localhost", 9092, None)} and {} in seen)
        stat = await watcher.exists("/brokers/ids/7")
        await eventually(lambda: client.session_id == stat.ephemeralOwner)

    async def test_unreachable(self):
        client = ZooKeeperClient(
            f"127.0.0.1:{find_free_port()}", reactor, session_timeout_ms=2000, connection_timeout_ms=500
        )
        started = time.monotonic()
        with self.assertRaises(ZooKeeperUnavailableError) as raised:
            await client.start()
        self.assertLess(time.monotonic() - started, 5)
        self.assertIn("did not answer", str(raised.exception))


class RegistryTests(ZooKeeperTestCase):
    async def test_producer_id_blocks_two_clients(self):
        r1 = Registry(await self.client())
        r2 = Registry(await self.client())
        results = await DeferredList(
            [r.allocate_producer_id_block(b, 100) for _ in range(10) for b, r in ((1, r1), (2, r2))],
            fireOnOneErrback=True,
        )
        blocks = sorted(block for _, block in results)
        self.assertEqual(blocks, [(i * 100, i * 100 + 99) for i in range(20)])

    async def test_broker_id_taken(self):
        r1 = Registry(await self.client())
        r2 = Registry(await self.client())
        await r1.register_broker(1, "h", 1)
        with self.assertRaises(BrokerIdInUseError):
            await r2.register_broker(1, "h", 2)
        data, _ = await r1.client.get("/brokers/ids/1")
        self.assertEqual(json.loads(data)["port"], 1)

    async def test_topics_and_controller(self):
        r1 = Registry(await self.client())
        r2 = Registry(await self.client())
        names = []
        await r2.watch_topics(names.append)
        created = await r1.create_topic("t", {0: [1], 1: [1]}, {"segment.bytes": "1024"})
        self.assertEqual(await r2.get_topic("t"), created)
        await eventually(lambda: names[-1] == ["t"])
        self.assertTrue(await r1.elect_controller(1))
        self.assertFalse(await r2.elect_controller(2))
        await r1.client.stop()
        self.assertTrue(await r2.elect_controller(2))
        self.assertEqual(await r2.get_controller_epoch(), 2)

    async def test_partition_state_fenced_by_controller_epoch(self):
        """A deposed controller's partition-state writes fail (a real ZooKeeper multi)."""
        r1 = Registry(await self.client())
        r2 = Registry(await self.client())
        seen = []
        await r2.watch_partition_state("t", 0, seen.append)
        self.assertEqual(seen, [None])
        self.assertTrue(await r1.elect_controller(1))
        epoch, fence = r1.controller_epoch
        version = await r1.set_partition_state("t", 0, 1, 0, [1, 2], epoch)
        await eventually(lambda: seen[-1] is not None)
        self.assertEqual((seen[-1].leader, seen[-1].isr, seen[-1].zk_version), (1, [1, 2], version))
        [written] = await r1.set_partition_states([PartitionStateWrite("t", 0, 2, 1, [2], version)], epoch, fence)
        version = written.version
        await eventually(lambda: seen[-1].leader == 2)
        self.assertEqual((seen[-1].zk_version, seen[-1].mzxid), written)
        with self.assertRaises(BadVersionError):  # stale zkVersion
            await r1.set_partition_states([PartitionStateWrite("t", 0, 1, 2, [1], version - 1)], epoch, fence)
        await r1.client.stop()
        self.assertTrue(await r2.elect_controller(2))
        with self.assertRaises(ControllerMovedError) as caught:  # the old controller's fence
            await r2.set_partition_states([PartitionStateWrite("t", 0, 1, 2, [1], version)], epoch, fence)
        self.assertIn("/controller_epoch", str(caught.exception))
        self.assertEqual((await r2.get_partition_state("t", 0)).leader, 2)

    async def test_partition_states_batch_all_or_nothing(self):
        """Issue 32: a batch of fenced, conditional state writes is one real multi: all of it or nothing."""
        r1 = Registry(await self.client())
        r2 = Registry(await self.client())
        versions = [await r1.set_partition_state("t", p, 1, 0, [1, 2]) for p in range(4)]
        self.assertTrue(await r1.elect_controller(1))
        epoch, fence = r1.controller_epoch

        def writes(leader):
            return [PartitionStateWrite("t", p, leader, 1, [leader], v) for p, v in enumerate(versions)]

        async def leaders(count=4):
            return [(await r2.get_partition_state("t", p)).leader for p in range(count)]

        # partition 2 changed since it was read: nothing is written, the failure names it
        versions[2] = await r2.set_partition_state("t", 2, 1, 0, [1], expected_version=versions[2]) - 1
        with self.assertRaises(BadVersionError) as caught:
            await r1.set_partition_states(writes(2), epoch, fence)
        self.assertEqual(caught.exception.op_index, 2)
        self.assertNotIn("/controller_epoch", str(caught.exception))
        self.assertEqual(await leaders(), [1, 1, 1, 1])
        versions[2] += 1
        # a deleted state: nothing is written, nothing brought back
        await r2.client.delete("/brokers/topics/t/partitions/3/state")
        with self.assertRaises(BadVersionError) as caught:
            await r1.set_partition_states(writes(2), epoch, fence)
        self.assertEqual(caught.exception.op_index, 3)
        self.assertIsNone(await r2.get_partition_state("t", 3))
        self.assertEqual(await leaders(3), [1, 1, 1])
        versions.pop()
        self.assertEqual([w.version for w in await r1.set_partition_states(writes(2), epoch, fence)],
                         [v + 1 for v in versions])
        self.assertEqual(await leaders(3), [2, 2, 2])
        # a deposed controller writes nothing
        await r1.client.stop()
        self.assertTrue(await r2.elect_controller(2))
        versions = [v + 1 for v in versions]
        with self.assertRaises(BadVersionError) as caught:
            await r2.set_partition_states(writes(1), epoch, fence)
        self.assertIn("/controller_epoch", str(caught.exception))
        self.assertEqual(await leaders(3), [2, 2, 2])


class EmbeddedServiceTests(TestCase):
    timeout = 120

    def tempdir(self):
        path = tempfile.mkdtemp(prefix="kafkatw-test-")
        self.addCleanup(shutil.rmtree, path, True)
        return path

    async def test_start_and_stop(self):
        port = find_free_port()
        service = EmbeddedZooKeeperService(self.tempdir(), port, reactor, tick_time_ms=500)

        async def step(what, d, timeout_s=20):
            # each step bounded on its own, so a hang names itself and shows the server's log
            try:
                return await d.addTimeout(timeout_s, reactor)
            except defer.TimeoutError:
                with open(os.path.join(service.data_dir, "zookeeper.log"), "rb") as log:
                    tail = log.read()[-3000:].decode("utf-8", "replace")
                self.fail(f"{what} did not finish within {timeout_s} s; zookeeper.log ends:\n{tail}")

        service.startService()
        try:
            started = time.monotonic()
            self.assertEqual(await step("whenReady", service.whenReady(), 35), f"127.0.0.1:{port}")
            self.assertLess(time.monotonic() - started, 30)
            self.assertTrue(serving(port))
            client = ZooKeeperClient(service.connect_string, reactor, session_timeout_ms=4000)
            await step("client start", client.start())
            await step("create", client.create("/hello", b"world"))
            await step("client stop", client.stop())
        finally:
            await step("stopService", service.stopService())
        self.assertFalse(ruok(port))
        self.assertTrue(os.path.exists(os.path.join(service.data_dir, "zoo.cfg")))

    async def test_another_server_on_the_port_is_never_our_ready(self):
        # The port looked free, then another ZooKeeper took it before our child bound it: that server
        # answers every probe, but whenReady fails with our child's bind error instead of joining it.
        from kafkatw.zookeeper import embedded

        other = ZooKeeperFixture(None, tick_time_ms=500)
        other.start()
        self.addCleanup(other.stop)
        self.patch(embedded, "port_in_use", lambda *args, **kwargs: False)
        service = EmbeddedZooKeeperService(self.tempdir(), other.port, reactor, tick_time_ms=500,
                                           port_setting="zookeeper.connect=embedded:PORT")
        service.startService()
        try:
            with self.assertRaises(embedded.ZooKeeperPortInUseError) as raised:
                await service.whenReady().addTimeout(35, reactor)
        finally:
            await service.stopService()
        self.assertIn("java.net.BindException: Address already in use", str(raised.exception))
        self.assertIn("zookeeper.connect=embedded:PORT", str(raised.exception))
        self.assertTrue(serving(other.port))

    async def test_not_ready_error_names_command(self):
        port = find_free_port()
        service = EmbeddedZooKeeperService(self.tempdir(), port, reactor, tick_time_ms=500, ready_timeout_s=0.0)
        # a server that never starts: no process at all
        service.command = ["java", "-cp", "x", "Main"]
        with self.assertRaises(Exception) as raised:
            await service.whenReady()
        self.assertIn("java", str(raised.exception))


class StandaloneTests(SynchronousTestCase):
    """C{kafkatw.zookeeper.standalone.run}: foreground server, SIGTERM stops it cleanly."""

    def start(self) -> tuple[subprocess.Popen, int, str]:
        """C{run} in a child process on a free port: C{(child, port, data dir)}, once it says it is ready."""
        data_dir = tempfile.mkdtemp(prefix="kafkatw-test-")
        self.addCleanup(shutil.rmtree, data_dir, True)
        port = find_free_port()
        code = (
            "import sys; from kafkatw.zookeeper.standalone import run;"
            f" sys.exit(run({port}, {data_dir!r}, tick_time_ms=500))"
        )
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        child = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
        # the child prints its "ready" line (or exits: EOF) once ZooKeeper serves
        line = child.stderr.readline()
        if b"ZooKeeper ready on 127.0.0.1" not in line:
            child.kill()
            child.wait()
            self.fail(f"not ready: {line!r}")
        self.assertTrue(serving(port))
        return child, port, data_dir

    def test_a_killed_command_takes_its_server_down(self):
        """Issue 27: SIGKILL of C{kafkatw zookeeper} left its JVM serving with nobody to stop it."""
        child, port, data_dir = self.start()
        try:
            child.kill()
            child.wait(TIMEOUT_S)
            deadline = time.monotonic() + TIMEOUT_S
            while serving(port) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertFalse(serving(port), "ZooKeeper still serves after its command was killed")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            # a server left behind (the test failed): find it by its data dir and stop it
            subprocess.run(["pkill", "-KILL", "-f", f"{data_dir}/"], check=False)

    def test_run_and_sigterm(self):
        child, port, _ = self.start()
        try:
            child.send_signal(signal.SIGTERM)
            self.assertEqual(child.wait(TIMEOUT_S), 0)
            self.assertFalse(ruok(port))
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
