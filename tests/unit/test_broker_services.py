"""The broker as a tree of services: L{kafkatw.broker.server.BrokerPart} and the parts' order."""

from __future__ import annotations

from twisted.application import service
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker.server import BrokerPart, KafkaServer
from kafkatw.config import BrokerConfig


class BrokerPartTests(SynchronousTestCase):
    def test_start_and_stop_run_the_coroutines(self):
        events = []
        gate: defer.Deferred = defer.Deferred()

        async def start():
            events.append("starting")
            await gate
            events.append("started")

        async def stop():
            events.append("stopped")

        part = BrokerPart("p", start, stop)
        parent = service.MultiService()
        parent.startService()
        part.setServiceParent(parent)
        self.assertTrue(part.running)
        self.assertNoResult(part.started)
        gate.callback(None)
        self.successResultOf(part.started)
        self.successResultOf(part.stopService())
        self.assertEqual(events, ["starting", "started", "stopped"])
        self.assertFalse(part.running)

    def test_stop_while_starting_cancels_the_start(self):
        async def start():
            await defer.Deferred()  # never fires

        async def stop():
            pass

        part = BrokerPart("p", start, stop)
        part.startService()
        self.successResultOf(part.stopService())
        self.failureResultOf(part.started, defer.CancelledError)

    def test_failed_start_fails_started(self):
        async def start():
            raise ValueError("no")

        async def stop():
            pass

        part = BrokerPart("p", start, stop)
        part.startService()
        self.failureResultOf(part.started, ValueError)


class PartsTests(SynchronousTestCase):
    def server(self, connect: str) -> KafkaServer:
        config = BrokerConfig({"broker.id": 1, "log.dirs": "/nonexistent", "zookeeper.connect": connect})
        return KafkaServer(config, MemoryReactorClock())

    def test_order(self):
        names = [p.name for p in self.server("127.0.0.1:2181")._parts(["/nonexistent"])]
        self.assertEqual(names, ["listeners", "zookeeper-session", "logs", "replica-fetchers", "controller",
                                 "requests"])

    def test_embedded_zookeeper_part(self):
        names = [p.name for p in self.server("embedded:2999")._parts(["/nonexistent"])]
        self.assertEqual(names[:3], ["listeners", "embedded-zookeeper", "zookeeper-session"])

    def test_stop_goes_in_reverse_one_at_a_time(self):
        server = self.server("127.0.0.1:2181")
        server.startService = lambda: service.Service.startService(server)  # no real start
        server.startService()
        events = []
        gates = {}

        def part(name):
            async def start():
                pass

            async def stop():
                events.append(f"stop {name}")
                gates[name] = defer.Deferred()
                await gates[name]
                events.append(f"stopped {name}")

            return BrokerPart(name, start, stop)

        for name in ["a", "b", "c"]:
            part(name).setServiceParent(server)
        d = server.stopService()
        self.assertEqual(events, ["stop c"])
        gates["c"].callback(None)
        self.assertEqual(events, ["stop c", "stopped c", "stop b"])
        gates["b"].callback(None)
        gates["a"].callback(None)
        self.successResultOf(d)
        self.assertEqual(events[-1], "stopped a")
        self.assertEqual(list(server), [])
