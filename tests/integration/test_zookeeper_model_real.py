"""
The scenario suite of C{tests/_zookeeper_scenarios.py} against the kazoo
bridge (L{kafkatw.zookeeper.bridge.ZooKeeperClient}) and Debian's real
ZooKeeper: what C{tests/unit/test_zookeeper_model.py} runs on the model.

C{test_random_operations} also makes seeded random operations on the
model and on the real server and compares them outcome by outcome.

One server for the class (tickTime 500 ms), a chroot per scenario, and
each client behind a TCP proxy of its own on 127.0.0.1 through which a
scenario cuts it off (L{_Proxy.partition}: bytes and closes are held, in
order, until L{_Proxy.heal}; or only what ZooKeeper sends) or drops its connection (L{_Proxy.drop}).
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

from twisted.internet import defer, reactor, task
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.protocols import portforward
from twisted.trial.unittest import TestCase

from kafkatw.testing import ClassFixture, FakeZooKeeper, FakeZooKeeperClient, ZooKeeperFixture
from kafkatw.zookeeper.bridge import ZooKeeperClient
from tests._zookeeper_scenarios import SCENARIOS, random_operations, run_operations

TICK_TIME_MS = 500
SESSION_TIMEOUT_MS = 4000


class _Gate:
    """Runs actions now, or, while partitioned, holds them (in order) until healed."""

    def __init__(self) -> None:
        self.cut = False
        self.held: list[Callable[[], object]] = []

    def __call__(self, action: Callable[[], object]) -> None:
        if self.cut:
            self.held.append(action)
        else:
            action()

    def heal(self) -> None:
        self.cut = False
        held, self.held = self.held, []
        for action in held:
            action()


class _ProxyClient(portforward.ProxyClient):
    """The proxy's connection to ZooKeeper: what ZooKeeper sends goes through the gate."""

    def dataReceived(self, data: bytes) -> None:
        peer = self.peer
        self.factory.down(lambda: peer.transport.write(data))

    def connectionLost(self, reason: Any) -> None:
        peer, self.peer = self.peer, None
        if peer is not None:
            self.factory.down(peer.transport.loseConnection)


class _ProxyClientFactory(portforward.ProxyClientFactory):
    protocol = _ProxyClient

    def buildProtocol(self, *args: Any, **kw: Any) -> Any:
        protocol = super().buildProtocol(*args, **kw)
        protocol.factory = self
        return protocol


class _ProxyServer(portforward.ProxyServer):
    """The client's connection to the proxy: what the client sends goes through the gate."""

    clientProtocolFactory = _ProxyClientFactory

    def connectionMade(self) -> None:
        self.factory.connections.add(self)
        self.transport.pauseProducing()
        client = self.clientProtocolFactory()
        client.setServer(self)
        client.down = self.factory.down
        reactor.connectTCP(self.factory.host, self.factory.port, client)

    def dataReceived(self, data: bytes) -> None:
        peer = self.peer
        self.factory.up(lambda: peer.transport.write(data))

    def connectionLost(self, reason: Any) -> None:
        self.factory.connections.discard(self)
        peer, self.peer = self.peer, None
        if peer is not None:
            self.factory.up(peer.transport.loseConnection)


class _Proxy(Factory):
    """A TCP proxy to ZooKeeper for one client."""

    protocol = _ProxyServer

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.up = _Gate()  # what the client sends
        self.down = _Gate()  # what ZooKeeper sends
        self.connections: set[_ProxyServer] = set()
        self.listening = reactor.listenTCP(0, self, interface="127.0.0.1")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listening.getHost().port}"

    def partition(self, replies_only: bool = False) -> None:
        self.down.cut = True
        self.up.cut = not replies_only

    def heal(self) -> None:
        self.up.heal()
        self.down.heal()

    def drop(self) -> None:
        """Close every proxied connection now (both ends), as a reset would."""
        for connection in list(self.connections):
            if connection.peer is not None:
                connection.peer.transport.abortConnection()
            connection.transport.abortConnection()

    def close(self) -> Deferred:
        self.heal()
        self.drop()
        return defer.maybeDeferred(self.listening.stopListening)


class RealHarness:
    """The scenarios' harness over the bridge and a real ZooKeeper."""

    session_timeout_ms = SESSION_TIMEOUT_MS
    tick_time_ms = TICK_TIME_MS

    def __init__(self, case: TestCase, zookeeper_port: int, chroot: str) -> None:
        self.case = case
        self.zookeeper_port = zookeeper_port
        self.chroot = chroot
        self.proxies: dict[ZooKeeperClient, _Proxy] = {}

    async def client(self, chroot: str | None = None) -> ZooKeeperClient:
        proxy = _Proxy("127.0.0.1", self.zookeeper_port)
        self.case.addCleanup(proxy.close)
        client = ZooKeeperClient(proxy.address, reactor, chroot=chroot or self.chroot,
                                 session_timeout_ms=SESSION_TIMEOUT_MS, connection_timeout_ms=10000)
        self.case.addCleanup(lambda: client.stop() if client._started and not client._stopping else None)
        self.case.addCleanup(proxy.heal)  # first: a client cut off could not close its session
        self.proxies[client] = proxy
        await client.start()
        return client

    async def eventually(self, predicate: Callable[[], Any], what: str = "condition", timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout_s} s")
            await task.deferLater(reactor, 0.01, lambda: None)

    async def sleep(self, seconds: float) -> None:
        await task.deferLater(reactor, seconds, lambda: None)

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    async def partition(self, client: ZooKeeperClient, replies_only: bool = False) -> None:
        self.proxies[client].partition(replies_only)

    async def heal(self, client: ZooKeeperClient) -> None:
        self.proxies[client].heal()

    async def drop_connection(self, client: ZooKeeperClient) -> None:
        self.proxies[client].drop()

    def run(self, coroutine: Any) -> Deferred:
        return Deferred.fromCoroutine(coroutine)


class RealScenarioTests(ClassFixture, TestCase):
    """Every scenario of the shared suite, on the bridge and a real ZooKeeper."""

    timeout = 30

    @classmethod
    def setUpClass(cls) -> None:
        cls.zookeeper = ZooKeeperFixture(None, tick_time_ms=TICK_TIME_MS)
        cls.zookeeper.start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.zookeeper.stop()

    async def test_random_operations(self) -> None:
        """
        Seeded random operations (C{random_operations}) made on the model and
        on the real server, outcome by outcome: the same results, errors (with
        the failing op of a multi), versions, children counts and trees.
        """
        for seed in range(1, 7):
            calls = random_operations(random.Random(seed), 250)
            model = FakeZooKeeperClient(FakeZooKeeper(Clock(), tick_time_ms=TICK_TIME_MS), chroot="/random",
                                        session_timeout_ms=SESSION_TIMEOUT_MS)
            await model.start()
            real = ZooKeeperClient(f"127.0.0.1:{self.zookeeper.port}", reactor, chroot=f"/random-{seed}",
                                   session_timeout_ms=SESSION_TIMEOUT_MS)
            await real.start()
            try:
                expected, got = await run_operations(model, calls), await run_operations(real, calls)
            finally:
                await real.stop()
            for index, (call, want, have) in enumerate(zip(calls + [None] * len(got), expected, got)):
                self.assertEqual(want, have, f"seed {seed}, call {index}: {call}")
            self.assertEqual(len(expected), len(got), f"seed {seed}")


def _scenario_test(name: str, scenario: Callable[[Any, Any], Any]) -> Callable[[RealScenarioTests], Any]:
    async def test(self: RealScenarioTests) -> None:
        harness = RealHarness(self, self.zookeeper.port, f"/scenario-{name}")
        await scenario(harness, self)

    test.__doc__ = scenario.__doc__
    return test


for _name, _scenario in SCENARIOS.items():
    setattr(RealScenarioTests, f"test_{_name}", _scenario_test(_name, _scenario))

