"""
A broker's start survives a passing loss of its ZooKeeper connection (issue 28).

Each ZooKeeper step of start-up (reading C{/cluster/id}, the dynamic configs,
the watches, the registration in C{/brokers/ids}, the group coordinator
elections) is made again once the client is connected again, as Kafka's
C{KafkaZkClient.retryRequestsUntilConnected}; a connection that stays away
for C{zookeeper.connection.timeout.ms} fails the start with one line.  Before,
one C{ConnectionLoss} failed the start, and only a restart of the process
brought the broker back (the cluster simulation's C{drop-zk} fault).

Whole brokers over a L{FakeZooKeeper} (L{InProcessBrokers}), on a
C{MemoryReactorClock}: the connection drops at one chosen request.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.logger import LogLevel

from kafkatw.broker.server import BrokerStartupError, KafkaServer
from kafkatw.config import BrokerConfig
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.bridge import ZooKeeperUnavailableError
from tests.unit.test_restart import InProcessBrokers, LoopbackReactor


class DroppingClient(FakeZooKeeperClient):
    """
    A fake client whose connection drops at its first request of C{drop_at}
    (C{(method, path)}): that request fails with C{ConnectionLoss},
    C{SUSPENDED}, later requests wait; it connects again in the same session
    C{reconnect_s} later on its reactor's clock (never, when C{None}).
    """

    def __init__(self, *args: Any, drop_at: tuple[str, str], reconnect_s: float | None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.drop_at: tuple[str, str] | None = drop_at
        self.reconnect_s = reconnect_s
        self.dropped = False

    def _drop(self, method: str, path: str) -> Deferred | None:
        if self.drop_at != (method, path) or not self.connected:
            return None
        self.drop_at = None
        self.dropped = True
        self._connection_lost()  # SUSPENDED: later requests wait for the reconnection
        if self.reconnect_s is not None:
            self._reactor.callLater(self.reconnect_s, self._reconnect)
        return fail(ZooKeeperUnavailableError("ConnectionLoss (test)"))

    def create(self, path: str, *args: Any, **kw: Any) -> Deferred:
        return self._drop("create", path) or super().create(path, *args, **kw)

    def get(self, path: str) -> Deferred:
        return self._drop("get", path) or super().get(path)

    def get_children(self, path: str) -> Deferred:
        return self._drop("get_children", path) or super().get_children(path)

    def ensure_path(self, path: str) -> Deferred:
        return self._drop("ensure_path", path) or super().ensure_path(path)

    def _watch(self, path: str, kind: str, callback: Any) -> Deferred:
        return self._drop("watch", path) or super()._watch(path, kind, callback)


#: a request of each ZooKeeper step of start-up
STEPS = [
    ("create", "/cluster/id"),
    ("get", "/config/brokers/<default>"),
    ("get_children", "/config/groups"),
    ("watch", "/brokers/ids"),
    ("watch", "/admin/controlled_shutdown"),
    ("watch", "/brokers/topics"),
    ("create", "/brokers/ids/0"),
    ("watch", "/controller"),
    ("get_children", "/config/users"),
    ("watch", "/config/changes"),
    ("ensure_path", "/group_coordinator/candidates"),
    ("get_children", "/group_coordinator/candidates"),
]


class StartConnectionLossTests(InProcessBrokers):
    def setUp(self) -> None:
        super().setUp()
        self.drop_at: tuple[str, str] = ("", "")
        self.reconnect_s: float | None = 1.0
        self.clients: list[DroppingClient] = []

    def _client(self, connect: str, reactor: object, **kwargs: object) -> FakeZooKeeperClient:
        client = DroppingClient(self.zookeeper, reactor=reactor, drop_at=self.drop_at, reconnect_s=self.reconnect_s)
        self.clients.append(client)
        return client

    def test_a_connection_lost_at_any_step_of_the_start_is_waited_for(self) -> None:
        """
        The connection drops at one request of a step: the start waits while
        disconnected, makes the step again once connected (the same session),
        and the broker starts, registered and a group coordinator candidate.
        """
        for step in STEPS:
            with self.subTest(step=step):
                self.drop_at = step
                server = self.start(self.log_dir())
                [client] = self.clients[-1:]
                self.assertTrue(client.dropped, f"the start made no {step}")
                self.assertNoResult(server.ready)
                server.reactor.advance(1.0)  # connected again
                self.successResultOf(server.ready)
                self.assertEqual(self.owner("/brokers/ids/0"), client.session_id)
                self.assertEqual(self.owner("/group_coordinator/candidates/0"), client.session_id)
                self.assertTrue(any("lost its ZooKeeper connection (ConnectionLoss (test)); again once connected"
                                    in line for line in self.logged(LogLevel.info)))
                server.zookeeper.stop()  # its session ends: the next start's broker 0 registers at once

    def test_a_connection_that_does_not_come_back_fails_the_start_with_one_line(self) -> None:
        """
        Not connected again within C{zookeeper.connection.timeout.ms}: the
        start fails, one line saying which step and which setting, as the
        first connection's timeout does.
        """
        self.drop_at, self.reconnect_s = ("create", "/brokers/ids/0"), None
        server = KafkaServer(BrokerConfig({
            "broker.id": 0, "log.dirs": self.log_dir(), "listeners": "PLAINTEXT://127.0.0.1:0",
            "zookeeper.connect": "fake:2181", "log.cleaner.enable": "false",
            "zookeeper.connection.timeout.ms": 4000,  # before the first checkpoint (5 s; no thread pool here)
        }), LoopbackReactor())
        server.startService()
        self.addCleanup(self._dispose, server)
        server.reactor.advance(3.9)
        self.assertNoResult(server.ready)
        server.reactor.advance(0.1)
        self.failureResultOf(server.ready, BrokerStartupError)
        self.assertEqual(server.start_error, (
            "broker 0 failed to start: registering in /brokers/ids: lost the connection to ZooKeeper at fake:2181"
            " and it did not come back within 4000 ms; check ZooKeeper or raise zookeeper.connection.timeout.ms"))
