"""
Unit tests of L{kafkatw.web}: the readiness reasons, the consumer lag
computation (on the fake ZooKeeper and a L{Clock}), the lag and request
latency metrics, and the console's JSON answers (rendered with Twisted Web's
request helper over a fake broker with real logs).
"""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace
from typing import Any

from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.broker.metrics import RequestMetrics, metrics_registry
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.protocol.records import encode_batch
from kafkatw.storage.log_manager import LogManager
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.web import http_root
from kafkatw.web.console import ConsoleResource, console_refusal, render_value
from kafkatw.web.health import readiness_problems
from kafkatw.web.lag import GROUP_KIND_COORDINATOR, GROUP_KIND_ZOOKEEPER, LagMonitor, compute_lag
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import CommittedOffset, PartitionState


def fake_broker(**changes: Any) -> Any:
    """The parts of a L{kafkatw.broker.server.KafkaServer} the health checks read; a ready broker by default."""
    ready = defer.Deferred()
    ready.callback(None)
    values = dict(zookeeper=SimpleNamespace(connected=True), log_manager=object(), start_error=None, ready=ready,
                  broker_id=3, shutting_down=False)
    values.update(changes)
    return SimpleNamespace(**values)


class ReadinessTests(unittest.SynchronousTestCase):
    def test_ready(self) -> None:
        self.assertEqual(readiness_problems(fake_broker()), [])

    def test_every_reason(self) -> None:
        problems = readiness_problems(fake_broker(zookeeper=SimpleNamespace(connected=False), log_manager=None,
                                                  ready=defer.Deferred(), shutting_down=True))
        self.assertEqual(problems, ["the broker is shutting down", "no ZooKeeper session (zookeeper.connect)",
                                    "the logs are not loaded yet",
                                    "broker 3 is not registered in /brokers/ids yet"])

    def test_start_error(self) -> None:
        problems = readiness_problems(fake_broker(zookeeper=None, start_error="broker 3 failed to start: x"))
        self.assertIn("broker 3 failed to start: x", problems)
        self.assertIn("no ZooKeeper session (zookeeper.connect)", problems)

    def render(self, broker: Any, path: bytes) -> tuple[int, bytes]:
        config = BrokerConfig({"metrics.port": "0"})
        root = http_root(SimpleNamespace(config=config, **vars(broker)), SimpleNamespace())
        request = DummyRequest([])
        body = root.children[path].render(request)
        return request.responseCode or 200, body

    def test_endpoints(self) -> None:
        self.assertEqual(self.render(fake_broker(), b"healthz"), (200, b"ok\n"))
        self.assertEqual(self.render(fake_broker(), b"readyz"), (200, b"ready\n"))
        self.assertEqual(self.render(fake_broker(log_manager=None), b"healthz"), (200, b"ok\n"))
        self.assertEqual(self.render(fake_broker(log_manager=None), b"readyz"),
                         (503, b"not ready:\n- the logs are not loaded yet\n"))


class ComputeLagTests(unittest.SynchronousTestCase):
    def test_lag(self) -> None:
        snapshot = compute_lag(
            5, {"g": {("t", 0): 7, ("t", 1): 10, ("u", 0): 3}, "h": {("t", 0): 0}},
            {"g": GROUP_KIND_COORDINATOR, "h": GROUP_KIND_ZOOKEEPER}, {("t", 0): 10, ("t", 1): 9})
        self.assertEqual([(r.group, r.topic, r.partition, r.committed, r.end_offset, r.lag) for r in snapshot.rows], [
            ("g", "t", 0, 7, 10, 3),
            ("g", "t", 1, 10, 9, 0),  # a committed offset beyond the high watermark is no negative lag
            ("g", "u", 0, 3, -1, None),  # end offset unknown
            ("h", "t", 0, 0, 10, 10),
        ])
        self.assertEqual(snapshot.group_lag(), {"g": 3, "h": 10})


def lag_monitor(clock: Clock, end_offsets: dict) -> tuple[LagMonitor, Registry]:
    zk = FakeZooKeeperClient(FakeZooKeeper())
    zk.start()
    registry = Registry(zk)

    async def ends(partitions: set) -> dict:
        return {tp: end_offsets[tp] for tp in partitions if tp in end_offsets}

    return LagMonitor(registry, ends, clock, interval_ms=1000, history=3), registry


class LagMonitorTests(unittest.SynchronousTestCase):
    def test_both_kinds_of_group(self) -> None:
        clock = Clock()
        clock.advance(100)
        ends = {("t", 0): 10, ("t", 1): 4}
        monitor, registry = lag_monitor(clock, ends)
        registry.set_committed_offset("kafka-clients", "t", 0, CommittedOffset(6))
        registry.set_committed_offset("paper", "t", 1, CommittedOffset(1))
        registry.client.create("/consumers/paper/ids/c1", b"{}", makepath=True, ephemeral=True)
        monitor.start()
        snapshot = monitor.latest
        self.assertEqual(snapshot.kinds, {"kafka-clients": GROUP_KIND_COORDINATOR, "paper": GROUP_KIND_ZOOKEEPER})
        self.assertEqual(snapshot.group_lag(), {"kafka-clients": 4, "paper": 3})
        self.assertEqual(snapshot.time_ms, 100000)
        # the consumers catch up; the next computation is one interval later
        registry.set_committed_offset("kafka-clients", "t", 0, CommittedOffset(10))
        registry.set_committed_offset("paper", "t", 1, CommittedOffset(4))
        self.assertEqual(monitor.latest.group_lag(), {"kafka-clients": 4, "paper": 3})
        clock.advance(1)
        self.assertEqual(monitor.latest.group_lag(), {"kafka-clients": 0, "paper": 0})
        self.assertEqual([(t, totals["paper"]) for t, totals, _ in monitor.history], [(100000, 3), (101000, 0)])
        for _ in range(3):
            clock.advance(1)
        self.assertEqual(len(monitor.history), 3)  # bounded
        monitor.stop()
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_failure_is_logged_and_retried(self) -> None:
        clock = Clock()
        monitor, registry = lag_monitor(clock, {})
        registry.set_committed_offset("g", "t", 0, CommittedOffset(1))
        registry.client.available = False
        registry.client.disconnect()
        monitor.start()
        self.assertIsNone(monitor.latest)
        self.assertEqual(len(self.flushLoggedErrors()), 0)
        registry.client.reconnect()
        clock.advance(1)
        self.assertEqual(monitor.latest.group_lag(), {"g": 0})
        monitor.stop()


class LagMetricsTests(unittest.SynchronousTestCase):
    def server(self, active: bool) -> Any:
        snapshot = compute_lag(0, {"g": {("t", 0): 2}}, {"g": GROUP_KIND_COORDINATOR}, {("t", 0): 5})
        apis = SimpleNamespace(messages_in=3, bytes_in=30, bytes_out=20, failed_produce_requests=0,
                               failed_fetch_requests=0, request_counts={}, connections=set(),
                               topic_messages_in={"t": 3}, topic_bytes_in={"t": 30}, topic_bytes_out={"t": 20})
        metrics = RequestMetrics(Clock().seconds)
        metrics.record("totaltimems", 0, 0.7)
        metrics.record("totaltimems", 0, 30.0)
        metrics.record("totaltimems", 1, 20000.0)
        return SimpleNamespace(apis=apis, log_manager=None, controller=SimpleNamespace(active=active,
                               metadata=MetadataCache(0)), request_metrics=metrics,
                               lag_monitor=SimpleNamespace(latest=snapshot))

    def test_lag_on_the_controller_only(self) -> None:
        value = metrics_registry(self.server(True)).get_sample_value
        labels = {"consumergroup": "g", "topic": "t", "partition": "0"}
        self.assertEqual(value("kafka_consumergroup_lag", labels), 3)
        self.assertEqual(value("kafka_consumergroup_current_offset", labels), 2)
        self.assertEqual(value("kafka_topic_partition_current_offset", {"topic": "t", "partition": "0"}), 5)
        self.assertIsNone(metrics_registry(self.server(False)).get_sample_value("kafka_consumergroup_lag", labels))

    def test_per_topic_and_latency(self) -> None:
        value = metrics_registry(self.server(True)).get_sample_value
        self.assertEqual(value("kafka_server_brokertopicmetrics_bytesin_total"), 30)
        self.assertEqual(value("kafka_server_brokertopicmetrics_bytesin_total", {"topic": "t"}), 30)
        self.assertEqual(value("kafka_server_brokertopicmetrics_messagesin_total", {"topic": "t"}), 3)
        self.assertEqual(value("kafka_server_brokertopicmetrics_bytesout_total", {"topic": "t"}), 20)
        produce = {"request": "Produce"}
        self.assertEqual(value("kafka_network_requestmetrics_totaltimems_bucket", {**produce, "le": "0.5"}), 0)
        self.assertEqual(value("kafka_network_requestmetrics_totaltimems_bucket", {**produce, "le": "1.0"}), 1)
        self.assertEqual(value("kafka_network_requestmetrics_totaltimems_bucket", {**produce, "le": "50.0"}), 2)
        self.assertEqual(value("kafka_network_requestmetrics_totaltimems_count", produce), 2)
        self.assertAlmostEqual(value("kafka_network_requestmetrics_totaltimems_sum", produce), 30.7)
        self.assertEqual(value("kafka_network_requestmetrics_totaltimems_bucket",
                               {"request": "Fetch", "le": "10000.0"}), 0)
        self.assertEqual(value("kafka_network_requestmetrics_totaltimems_bucket",
                               {"request": "Fetch", "le": "+Inf"}), 1)


class RenderValueTests(unittest.SynchronousTestCase):
    def test_kinds(self) -> None:
        self.assertEqual(render_value(None), {"null": True})
        self.assertEqual(render_value(b"hi"), {"text": "hi", "size": 2})
        self.assertEqual(render_value(b'{"a": 1}'), {"json": {"a": 1}, "size": 8})
        self.assertEqual(render_value(b"[1, 2"), {"text": "[1, 2", "size": 5})
        self.assertEqual(render_value(b"\xff\x00"), {"hex": "ff00", "size": 2})


class ConsoleRefusalTests(unittest.SynchronousTestCase):
    def test_refused_with_an_authorizer(self) -> None:
        self.assertIsNone(console_refusal(BrokerConfig({})))
        self.assertIn("metrics.console.enable", console_refusal(BrokerConfig({"metrics.console.enable": "false"})))
        refusal = console_refusal(BrokerConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}))
        self.assertIn("authorizer", refusal)


class _ConsoleFixture:
    """A console over a fake broker with real logs: topic t (partition 0 here), group g (ZooKeeper)."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        config = BrokerConfig({"metrics.port": "0"})
        directory = self.mktemp()
        self.log_manager = LogManager([directory], topic_log_config(config, {}), now_ms=lambda: 1000000)
        self.addCleanup(self.log_manager.close)
        log = self.log_manager.get_or_create("t", 0)
        log.append(encode_batch([(b"k%d" % i, b'{"n": %d}' % i, [("h", b"\x01")], 1000000 + i) for i in range(4)]), 0)
        log.append(encode_batch([(b"k4", b"not replicated yet", [], 1000004)]), 0)
        log.update_high_watermark(4)
        metadata = MetadataCache(0, "cluster-x")
        metadata.set_brokers({0: BrokerEndpoint(0, "127.0.0.1", 9092), 1: BrokerEndpoint(1, "127.0.0.1", 9093)})
        metadata.controller_id = 1
        metadata.set_topic(TopicMetadata("t", uuid.uuid4(), {0: [0, 1], 1: [1, 0]}, {"retention.ms": "1000"}))
        metadata.set_partition_state("t", 0, PartitionState(0, 0, [0]))  # under-replicated
        metadata.set_partition_state("t", 1, PartitionState(2, 0, [2]))  # broker 2 is not registered: offline
        snapshot = compute_lag(999000, {"g": {("t", 0): 1}}, {"g": GROUP_KIND_ZOOKEEPER}, {("t", 0): 4})
        zk = FakeZooKeeperClient(FakeZooKeeper())
        zk.start()
        zk.create("/consumers/g/ids/consumer-1", b"{}", makepath=True, ephemeral=True)
        zk.create("/consumers/g/owners/t/0", b"consumer-1", makepath=True, ephemeral=True)
        ready = defer.Deferred()
        ready.callback(None)
        apis = SimpleNamespace(messages_in=5, bytes_in=100, bytes_out=40, topic_messages_in={"t": 5},
                               topic_bytes_in={"t": 100}, topic_bytes_out={"t": 40}, group_coordinator=None)
        self.broker = SimpleNamespace(
            config=config, broker_id=0, metadata=metadata, log_manager=self.log_manager, reactor=self.clock,
            milliseconds=lambda: int(self.clock.seconds() * 1000),
            apis=apis, registry=Registry(zk), zookeeper=zk, ready=ready, start_error=None, shutting_down=False,
            lag_monitor=SimpleNamespace(latest=snapshot, history=[(999000, {"g": 3}, {"g": {("t", 0): 3}})]),
            _topic_config=lambda name: topic_log_config(config, metadata.topics[name].config, strict=False))
        self.console = ConsoleResource(self.broker)

    def get(self, api: str, **args: str) -> defer.Deferred:
        request = DummyRequest([])
        request.client = IPv4Address("TCP", "127.0.0.1", 50000)
        request.args = {k.encode(): [v.encode()] for k, v in args.items()}
        d = request.notifyFinish()
        result = self.console.children[b"api"].children[api.encode()].render(request)
        self.assertEqual(result, NOT_DONE_YET)
        d.addCallback(lambda _: (request.responseCode or 200, json.loads(b"".join(request.written))))
        return d


class ConsoleApiTests(_ConsoleFixture, unittest.TestCase):
    def test_overview(self) -> None:
        code, body = self.successResultOf(self.get("overview"))
        self.assertEqual(code, 200)
        self.assertEqual((body["cluster_id"], body["controller_id"], [b["id"] for b in body["brokers"]]),
                         ("cluster-x", 1, [0, 1]))
        self.assertEqual((body["partitions"], body["under_replicated_partitions"], body["offline_partitions"]),
                         (2, 1, 1))
        self.assertTrue(body["ready"])
        self.assertEqual(body["counters"]["topics"]["t"], {"messages_in": 5, "bytes_in": 100, "bytes_out": 40})
        self.assertEqual(body["time_ms"], 1000000)

    def test_topics_and_topic(self) -> None:
        _, body = self.successResultOf(self.get("topics"))
        [topic] = body["topics"]
        self.assertEqual((topic["name"], topic["partitions"], topic["replication_factor"], topic["under_replicated"],
                          topic["offline"]), ("t", 2, 2, 1, 1))
        self.assertGreater(topic["size_bytes"], 0)
        _, body = self.successResultOf(self.get("topic", name="t"))
        first, second = body["partitions"]
        self.assertEqual((first["leader"], first["isr"], first["high_watermark"], first["log_end_offset"]),
                         (0, [0], 4, 5))
        self.assertEqual((second["leader"], second["size_bytes"]), (-1, None))  # no replica here
        configs = {c["name"]: c for c in body["configs"]}
        self.assertEqual((configs["retention.ms"]["value"], configs["retention.ms"]["override"]), ("1000", True))
        self.assertFalse(configs["segment.bytes"]["override"])
        code, body = self.successResultOf(self.get("topic", name="nope"))
        self.assertEqual((code, body["error"]), (400, "unknown topic 'nope'"))

    def test_messages_from_an_offset_and_a_time(self) -> None:
        _, body = self.successResultOf(self.get("messages", topic="t", partition="0", offset="1", limit="2"))
        self.assertEqual([r["offset"] for r in body["records"]], [1, 2])
        record = body["records"][0]
        self.assertEqual((record["key"], record["value"], record["timestamp_ms"]),
                         ({"text": "k1", "size": 2}, {"json": {"n": 1}, "size": 8}, 1000001))
        self.assertEqual(record["headers"], [{"key": "h", "value": {"hex": "01", "size": 1}}])
        _, body = self.successResultOf(self.get("messages", topic="t", partition="0", timestamp="1000003"))
        self.assertEqual([r["offset"] for r in body["records"]], [3])  # below the high watermark only
        _, body = self.successResultOf(self.get("messages", topic="t", partition="0", offset="-1", limit="2"))
        self.assertEqual([r["offset"] for r in body["records"]], [2, 3])
        code, body = self.successResultOf(self.get("messages", topic="t", partition="1"))
        self.assertEqual(code, 400)
        self.assertEqual(body["error"], "t-1 has no leader (offline): its records cannot be read now")

    def test_groups(self) -> None:
        _, body = self.successResultOf(self.get("groups"))
        self.assertEqual(body["groups"], [{"group": "g", "kind": "zookeeper", "lag": 3, "partitions": 1,
                                           "coordinator": None}])
        _, body = self.successResultOf(self.get("group", id="g"))
        self.assertEqual(body["members"], [{"member_id": "consumer-1", "client_id": "", "host": "",
                                            "assignment": ["t-0"]}])
        self.assertEqual(body["partitions"], [{"topic": "t", "partition": 0, "current_offset": 1,
                                               "log_end_offset": 4, "lag": 3}])
        self.assertEqual((body["state"], body["lag"], body["history"]), ("Stable", 3, [{"time_ms": 999000, "lag": 3}]))
        self.assertEqual(body["partition_history"], {"t-0": [[999000, 3]]})


class GrafanaDashboardTests(unittest.SynchronousTestCase):
    def test_every_metric_is_exported(self) -> None:
        """docs/grafana-dashboard.json is valid JSON and asks only for metrics the broker exports."""
        import os
        import re

        import kafkatw.broker.metrics

        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(root, "docs", "grafana-dashboard.json")) as f:
            dashboard = json.load(f)
        with open(kafkatw.broker.metrics.__file__) as f:
            source = f.read()
        source += "".join(f'"kafka_network_requestmetrics_{kind}"' for kind in RequestMetrics.KINDS)
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        self.assertGreater(len(exprs), 10)
        names = {re.sub(r"_(total|bucket|sum|count)$", "", n) for e in exprs for n in re.findall(r"\bkafka_\w+", e)}
        self.assertIn("kafka_consumergroup_lag", names)
        for name in names:
            self.assertIn(f'"{name}', source, f"{name} is not exported by kafkatw.broker.metrics")


class RequestAndTopicMetricsOnTheBrokerTests(unittest.TestCase):
    """RequestMetrics timed by the connection, BrokerTopicMetrics counted by the handlers, on a MemoryReactorClock."""

    def test_pipelined_latency_and_topic_counters(self) -> None:
        from twisted.internet.testing import StringTransport

        from kafkatw.broker.network import KafkaConnection
        from kafkatw.protocol.messages import encode_request
        from tests.unit.test_broker import BrokerHarness, _frame

        h = BrokerHarness(self)
        h.create_topic("t")
        h.apis.request_metrics = metrics = RequestMetrics(h.clock.seconds)
        h.produce("t", 0, encode_batch([(b"k", b"12345", [], None)] * 3))
        self.assertEqual((h.apis.topic_messages_in, h.apis.topic_bytes_in["t"] > 0), ({"t": 3}, True))
        connection = KafkaConnection(h.apis, h.config["socket.request.max.bytes"])
        transport = StringTransport()
        connection.makeConnection(transport)
        slow = encode_request(1, 12, 1, "c", h.fetch_request("t", 0, 3, max_wait_ms=100, min_bytes=1))
        fast = encode_request(18, 3, 2, "c", {"client_software_name": "t", "client_software_version": "1"})
        connection.dataReceived(_frame(slow) + _frame(fast))
        h.clock.advance(0.2)  # the fetch waits its 100 ms; ApiVersions waits behind it
        while transport.producer is not None:
            transport.producer.resumeProducing()
        self.assertTrue(transport.value())
        value = metrics_registry(SimpleNamespace(apis=h.apis, request_metrics=metrics, lag_monitor=None,
                                                 controller=None, log_manager=None)).get_sample_value
        self.assertIsNone(value("kafka_network_requestmetrics_totaltimems_count", {"request": "Produce"}))
        for api in ("Fetch", "ApiVersions"):
            self.assertEqual(value("kafka_network_requestmetrics_totaltimems_bucket", {"request": api, "le": "100.0"}),
                             0, api)
            self.assertEqual(value("kafka_network_requestmetrics_totaltimems_bucket", {"request": api, "le": "250.0"}),
                             1, api)
            self.assertEqual(value("kafka_network_requestmetrics_requestqueuetimems_count", {"request": api}), 1)
            self.assertEqual(value("kafka_network_requestmetrics_responsesendtimems_bucket",
                                   {"request": api, "le": "0.5"}), 1)


class BrokerUserCheckerTests(unittest.SynchronousTestCase):
    def checker(self, settings: Any) -> tuple[Any, Clock]:
        from kafkatw.web.auth import BrokerUserChecker

        clock = Clock()
        return BrokerUserChecker(lambda: settings, clock), clock

    def check(self, checker: Any, user: bytes, password: bytes) -> Any:
        from twisted.cred.credentials import UsernamePassword

        return checker.requestAvatarId(UsernamePassword(user, password))

    def test_plain_users(self) -> None:
        from twisted.cred.error import UnauthorizedLogin

        from kafkatw.broker.authenticator import SaslServerSettings

        checker, _ = self.checker(SaslServerSettings(["PLAIN"], {"alice": "alice-secret"}))
        self.assertEqual(self.successResultOf(self.check(checker, b"alice", b"alice-secret")), b"alice")
        self.failureResultOf(self.check(checker, b"alice", b"wrong"), UnauthorizedLogin)
        self.failureResultOf(self.check(checker, b"mallory", b"alice-secret"), UnauthorizedLogin)

    def test_scram_users_and_the_cache(self) -> None:
        from twisted.cred.error import UnauthorizedLogin

        from kafkatw.broker.authenticator import SaslServerSettings
        from kafkatw.security.sasl import make_scram_credential

        credentials = {"bob": make_scram_credential("SCRAM-SHA-512", "bob-secret")}
        lookups = []

        def scram_credential(mechanism: str, user: str) -> defer.Deferred:
            lookups.append((mechanism, user))
            return defer.succeed(credentials.get(user) if mechanism == "SCRAM-SHA-512" else None)

        checker, clock = self.checker(SaslServerSettings(["SCRAM-SHA-256", "SCRAM-SHA-512"],
                                                         scram_credential=scram_credential))
        self.failureResultOf(self.check(checker, b"bob", b"wrong"), UnauthorizedLogin)
        self.assertEqual(self.successResultOf(self.check(checker, b"bob", b"bob-secret")), b"bob")
        del credentials["bob"]  # deleted: still accepted until the cache forgets it
        lookups.clear()
        self.assertEqual(self.successResultOf(self.check(checker, b"bob", b"bob-secret")), b"bob")
        self.assertEqual(lookups, [])
        clock.advance(61)
        self.failureResultOf(self.check(checker, b"bob", b"bob-secret"), UnauthorizedLogin)

    def test_not_started(self) -> None:
        from twisted.cred.error import UnauthorizedLogin

        checker, _ = self.checker(None)
        self.failureResultOf(self.check(checker, b"alice", b"x"), UnauthorizedLogin)


class FakeAuthorizer:
    """Allows exactly the C{(principal, operation, resource type, name)} in C{allowed}."""

    def __init__(self, allowed: set) -> None:
        self.allowed = allowed

    def authorize(self, principal: str, host: str, operation: Any, resource_type: Any, name: str) -> bool:
        return (principal, operation, resource_type, name) in self.allowed


class ConsoleAclTests(_ConsoleFixture, unittest.TestCase):
    """The console of an authenticated principal shows only what the ACLs let it Describe (and Read)."""

    def setUp(self) -> None:
        from kafkatw.security.acl import AclOperation, ResourceType

        super().setUp()
        self.broker.metadata.set_topic(TopicMetadata("secret", uuid.uuid4(), {0: [0]}))
        self.broker.apis.authorizer = FakeAuthorizer({
            ("User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, "t"),
            ("User:alice", AclOperation.DESCRIBE, ResourceType.GROUP, "g"),
        })
        self.console = ConsoleResource(self.broker, "User:alice")

    def test_only_described_topics(self) -> None:
        _, body = self.successResultOf(self.get("topics"))
        self.assertEqual([t["name"] for t in body["topics"]], ["t"])
        _, body = self.successResultOf(self.get("overview"))
        self.assertEqual((body["topics"], body["partitions"], body["principal"]), (1, 2, "User:alice"))
        code, body = self.successResultOf(self.get("topic", name="secret"))
        self.assertEqual((code, body["error"]), (400, "unknown topic 'secret'"))
        _, body = self.successResultOf(self.get("topic", name="t"))
        self.assertIsNone(body["configs"])  # no DescribeConfigs

    def test_records_need_read(self) -> None:
        from kafkatw.security.acl import AclOperation, ResourceType

        code, body = self.successResultOf(self.get("messages", topic="t", partition="0"))
        self.assertEqual((code, body["error"]), (400, "User:alice may not Read topic t"))
        self.broker.apis.authorizer.allowed.add(("User:alice", AclOperation.READ, ResourceType.TOPIC, "t"))
        code, body = self.successResultOf(self.get("messages", topic="t", partition="0"))
        self.assertEqual((code, len(body["records"])), (200, 4))

    def test_groups_need_describe(self) -> None:
        from kafkatw.security.acl import AclOperation, ResourceType

        self.broker.apis.authorizer.allowed.discard(("User:alice", AclOperation.DESCRIBE, ResourceType.GROUP, "g"))
        _, body = self.successResultOf(self.get("groups"))
        self.assertEqual(body["groups"], [])
        code, _ = self.successResultOf(self.get("group", id="g"))
        self.assertEqual(code, 400)


class FakeAdmin:
    """The admin client and producer of the console's admin actions: records calls, answers C{errors}."""

    def __init__(self) -> None:
        self.calls: list = []
        self.errors: dict = {}

    def _result(self, name: str) -> Any:
        """None, or the admin client's KafkaError for C{self.errors[name]} (code, message)."""
        from kafkatw.errors import kafka_error

        if name not in self.errors:
            return None
        code, message = self.errors[name]
        error = kafka_error(code, message or "")
        error.error_message = message
        return error

    def create_topics(self, topics: list) -> defer.Deferred:
        self.calls.append(("create", [(t.name, t.num_partitions, t.replication_factor) for t in topics]))
        return defer.succeed({t.name: self._result(t.name) for t in topics})

    def delete_topics(self, names: list) -> defer.Deferred:
        self.calls.append(("delete", list(names)))
        return defer.succeed({n: self._result(n) for n in names})

    def coordinator_request(self, group: str, api_key: int, body: Any, version: int, error_of: Any) -> defer.Deferred:
        from kafkatw.errors import ErrorCode

        self.calls.append(("request", api_key, body))
        code = self.errors.get(group, (ErrorCode.none, None))[0]
        return defer.succeed(SimpleNamespace(results=[SimpleNamespace(group_id=group, error_code=code)]))

    def send(self, topic: str, value: Any, key: Any = None, partition: Any = None) -> defer.Deferred:
        self.calls.append(("send", topic, key, value, partition))
        return defer.succeed(SimpleNamespace(topic=topic, partition=0, offset=5))


class _AdminFixture(_ConsoleFixture):
    def setUp(self) -> None:
        super().setUp()
        self.broker.config = BrokerConfig({"metrics.port": "0", "metrics.console.admin.enable": "true"})
        self.fake = FakeAdmin()
        self.console = ConsoleResource(self.broker, admin=lambda: self.fake, producer=lambda: self.fake)

    def post(self, action: str, body: Any, headers: dict | None = None, method: bytes = b"POST") -> Any:
        import io

        request = DummyRequest([])
        request.method = method
        request.client = IPv4Address("TCP", "127.0.0.1", 50000)
        for name, value in ({"X-Kafkatw-Console": "1"} if headers is None else headers).items():
            request.requestHeaders.setRawHeaders(name, [value])
        request.content = io.BytesIO(json.dumps(body).encode())
        d = request.notifyFinish()
        result = self.console.children[b"api"].children[b"admin"].children[action.encode()].render(request)
        if result != NOT_DONE_YET:
            request.write(result)
            request.finish()
        d.addCallback(lambda _: (request.responseCode or 200, json.loads(b"".join(request.written))))
        return self.successResultOf(d)


class ConsoleAdminTests(_AdminFixture, unittest.TestCase):
    """metrics.console.admin.enable: the write endpoints, their cross-site guard and Kafka's errors."""

    def test_off_by_default(self) -> None:
        self.assertFalse(BrokerConfig({})["metrics.console.admin.enable"])
        self.broker.config = BrokerConfig({"metrics.port": "0"})
        self.console = ConsoleResource(self.broker, admin=lambda: self.fake, producer=lambda: self.fake)
        for action in ("create-topic", "delete-topic", "produce", "delete-group"):
            code, body = self.post(action, {"name": "x", "topic": "t", "group": "g"})
            self.assertEqual(code, 403)
            self.assertIn("read-only (metrics.console.admin.enable=false)", body["error"])
        self.assertEqual(self.fake.calls, [])
        _, body = self.successResultOf(self.get("overview"))
        self.assertFalse(body["admin"])

    def test_create_topic(self) -> None:
        from kafkatw.errors import ErrorCode

        _, body = self.successResultOf(self.get("overview"))
        self.assertTrue(body["admin"])
        code, body = self.post("create-topic", {"name": "new", "partitions": "3", "replication_factor": 2})
        self.assertEqual((code, body), (200, {"ok": True, "topic": "new"}))
        self.assertEqual(self.fake.calls, [("create", [("new", 3, 2)])])
        self.fake.errors["t"] = (ErrorCode.topic_already_exists, "Topic 't' already exists.")
        code, body = self.post("create-topic", {"name": "t"})
        self.assertEqual(code, 400)
        self.assertEqual(body["error"], "creating topic 't' failed: TOPIC_ALREADY_EXISTS (Topic 't' already exists.)")
        code, body = self.post("create-topic", {"name": "x", "partitions": "many"})
        self.assertEqual((code, body["error"]), (400, "partitions must be an integer"))
        code, body = self.post("create-topic", {})
        self.assertEqual((code, body["error"]), (400, "name is required"))

    def test_delete_topic(self) -> None:
        code, body = self.post("delete-topic", {"name": "t"})
        self.assertEqual((code, body), (200, {"ok": True, "topic": "t"}))
        self.assertEqual(self.fake.calls, [("delete", ["t"])])

    def test_produce(self) -> None:
        code, body = self.post("produce", {"topic": "t", "key": "k", "value": "héllo"})
        self.assertEqual((code, body), (200, {"ok": True, "topic": "t", "partition": 0, "offset": 5}))
        self.assertEqual(self.fake.calls, [("send", "t", b"k", "héllo".encode(), None)])
        code, body = self.post("produce", {"topic": "nope", "value": "v"})
        self.assertEqual((code, body["error"]), (400, "producing to 'nope' failed: UNKNOWN_TOPIC_OR_PARTITION"))

    def test_delete_group(self) -> None:
        from kafkatw.errors import ErrorCode

        code, body = self.post("delete-group", {"group": "g"})
        self.assertEqual((code, body), (200, {"ok": True, "group": "g"}))
        self.assertEqual(self.fake.calls, [("request", 42, {"groups_names": ["g"]})])
        self.fake.errors["busy"] = (ErrorCode.non_empty_group, None)
        code, body = self.post("delete-group", {"group": "busy"})
        self.assertEqual((code, body["error"]), (400, "deleting group 'busy' failed: NON_EMPTY_GROUP"))

    def test_cross_site_requests_are_refused(self) -> None:
        code, body = self.post("create-topic", {"name": "x"}, headers={})
        self.assertEqual(code, 403)
        self.assertIn("X-Kafkatw-Console: 1", body["error"])
        code, _ = self.post("create-topic", {"name": "x"}, headers={"X-Kafkatw-Console": "yes"})
        self.assertEqual(code, 403)
        code, body = self.post("create-topic", {"name": "x"}, method=b"GET")
        self.assertEqual((code, body["error"]), (405, "POST only"))
        self.assertEqual(self.fake.calls, [])


class ConsoleAdminAclTests(_AdminFixture, unittest.TestCase):
    """With an authorizer each action needs what Kafka checks: Create, Delete, Write."""

    def setUp(self) -> None:
        super().setUp()
        self.broker.apis.authorizer = FakeAuthorizer(set())
        self.console = ConsoleResource(self.broker, "User:alice", admin=lambda: self.fake, producer=lambda: self.fake)

    def allow(self, operation: Any, resource_type: Any, name: str) -> None:
        self.broker.apis.authorizer.allowed.add(("User:alice", operation, resource_type, name))

    def test_each_action_needs_its_acl(self) -> None:
        from kafkatw.security.acl import AclOperation, ResourceType

        refusals = [("create-topic", {"name": "new"},
                     "User:alice may not Create topic new (TOPIC_AUTHORIZATION_FAILED)"),
                    ("delete-topic", {"name": "t"}, "User:alice may not Delete topic t (TOPIC_AUTHORIZATION_FAILED)"),
                    ("produce", {"topic": "t", "value": "v"},
                     "User:alice may not Write topic t (TOPIC_AUTHORIZATION_FAILED)"),
                    ("delete-group", {"group": "g"}, "User:alice may not Delete group g (GROUP_AUTHORIZATION_FAILED)")]
        for action, body, error in refusals:
            self.assertEqual(self.post(action, body), (403, {"error": error}))
        self.assertEqual(self.fake.calls, [])
        self.allow(AclOperation.CREATE, ResourceType.CLUSTER, "kafka-cluster")
        self.allow(AclOperation.DELETE, ResourceType.TOPIC, "t")
        self.allow(AclOperation.WRITE, ResourceType.TOPIC, "t")
        self.allow(AclOperation.DELETE, ResourceType.GROUP, "g")
        for action, body, _ in refusals:
            self.assertEqual(self.post(action, body)[0], 200)
        self.assertEqual(len(self.fake.calls), 4)

    def test_create_on_the_topic_is_enough(self) -> None:
        from kafkatw.security.acl import AclOperation, ResourceType

        self.allow(AclOperation.CREATE, ResourceType.TOPIC, "mine")
        self.assertEqual(self.post("create-topic", {"name": "mine"})[0], 200)
        self.assertEqual(self.post("create-topic", {"name": "other"})[0], 403)


class HttpSiteTests(unittest.SynchronousTestCase):
    def test_polls_and_probes_are_not_logged(self) -> None:
        from twisted.web import http
        from twisted.web.resource import Resource

        from kafkatw.web import HttpSite

        logged = []
        self.patch(http.HTTPFactory, "log", lambda site, request: logged.append(request.uri))
        site = HttpSite(Resource(), reactor=Clock())
        for uri in (b"/console/api/overview", b"/healthz", b"/readyz", b"/metrics", b"/console/"):
            site.log(SimpleNamespace(uri=uri))
        self.assertEqual(logged, [b"/metrics", b"/console/"])


class BrokerHttpTests(unittest.SynchronousTestCase):
    """The HTTP port as L{kafkatw.tap} wires it into the broker (L{kafkatw.web.BrokerHttp})."""

    def start_metrics(self, http: Any) -> Any:
        from twisted.internet.testing import MemoryReactorClock

        from kafkatw.broker.server import KafkaServer

        reactor = MemoryReactorClock()
        server = KafkaServer(BrokerConfig({"metrics.port": "0"}), reactor, http=http)
        self.successResultOf(defer.Deferred.fromCoroutine(server._start_metrics(0)))
        self.addCleanup(server.gc_pauses.uninstall)  # the broker's gc.callbacks entry (kafkatw/broker/pauses.py)
        [(_port, site, _backlog, interface)] = reactor.tcpServers
        self.assertEqual(interface, "127.0.0.1")
        return server, site

    def test_with_the_web_package(self) -> None:
        from kafkatw.web import BrokerHttp, HttpSite

        server, site = self.start_metrics(BrokerHttp())
        self.assertIsInstance(site, HttpSite)
        self.assertEqual(sorted(site.resource.children), [b"console", b"healthz", b"metrics", b"readyz"])
        self.assertIn("consumer-lag", [part.name for part in server._parts(["/nonexistent"])])

    def test_without_it_metrics_only(self) -> None:
        """A broker made without C{http} (an embedding application) serves /metrics alone and runs no lag monitor."""
        server, site = self.start_metrics(None)
        self.assertEqual(list(site.resource.children), [b"metrics"])
        self.assertNotIn("consumer-lag", [part.name for part in server._parts(["/nonexistent"])])
