"""
Unit tests of the console as the cluster's (issue 30): every broker's
counters read from its own C{/metrics} and summed
(L{kafkatw.web.cluster_metrics}), the broker page, the message browser
fetching from another broker's leader as a client would, and the topic id
printed as Kafka's tools print it.  Fakes only: the other brokers' C{/metrics}
are L{kafkatw.broker.metrics} expositions of fake counters, the leader's
Fetch answer is a real record batch.
"""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace
from typing import Any

from prometheus_client.exposition import generate_latest
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.broker.metrics import metrics_registry
from kafkatw.cli.topics import format_topic_id as cli_format_topic_id
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.errors import ErrorCode
from kafkatw.protocol.records import encode_batch
from kafkatw.web.cluster_metrics import REUSE_S, ClusterCounters, add_counters, local_counters, parse_counters
from kafkatw.web.console import ConsoleResource, format_topic_id
from kafkatw.zookeeper.zk_data import BrokerInfo, PartitionState, decode_broker, encode_broker


def fake_apis(messages_in: int, bytes_in: int, bytes_out: int, topics: dict[str, tuple[int, int, int]]) -> Any:
    """The counters of a L{kafkatw.broker.apis.KafkaApis} (what L{kafkatw.broker.metrics} reads)."""
    return SimpleNamespace(messages_in=messages_in, bytes_in=bytes_in, bytes_out=bytes_out,
                           failed_produce_requests=0, failed_fetch_requests=0, request_counts={}, connections=set(),
                           topic_messages_in={t: v[0] for t, v in topics.items()},
                           topic_bytes_in={t: v[1] for t, v in topics.items()},
                           topic_bytes_out={t: v[2] for t, v in topics.items()}, group_coordinator=None)


def exposition(apis: Any) -> str:
    """What C{/metrics} of a broker with C{apis} answers."""
    server = SimpleNamespace(apis=apis, log_manager=None, request_metrics=None, lag_monitor=None)
    return generate_latest(metrics_registry(server)).decode("utf-8")


class ParseCountersTests(unittest.SynchronousTestCase):
    def test_the_exposition_reads_back_as_the_counters(self) -> None:
        apis = fake_apis(7, 700, 350, {"a": (5, 500, 300), "b": (2, 200, 50)})
        self.assertEqual(parse_counters(exposition(apis)), local_counters(apis))
        self.assertEqual(local_counters(apis), {
            "messages_in": 7, "bytes_in": 700, "bytes_out": 350,
            "topics": {"a": {"messages_in": 5, "bytes_in": 500, "bytes_out": 300},
                       "b": {"messages_in": 2, "bytes_in": 200, "bytes_out": 50}}})

    def test_sum(self) -> None:
        one = local_counters(fake_apis(7, 700, 350, {"a": (7, 700, 350)}))
        two = local_counters(fake_apis(3, 30, 0, {"a": (1, 10, 0), "b": (2, 20, 0)}))
        self.assertEqual(add_counters([one, two]), {
            "messages_in": 10, "bytes_in": 730, "bytes_out": 350,
            "topics": {"a": {"messages_in": 8, "bytes_in": 710, "bytes_out": 350},
                       "b": {"messages_in": 2, "bytes_in": 20, "bytes_out": 0}}})
        self.assertEqual(add_counters([]), {"messages_in": 0, "bytes_in": 0, "bytes_out": 0, "topics": {}})

    def test_not_prometheus_text(self) -> None:
        self.assertRaises(ValueError, parse_counters, "<html>not metrics</html>")


class _Cluster:
    """
    A console on broker 2 of a three-broker cluster: broker 2 leads nothing,
    brokers 0 and 1 lead t-0 and t-1; their C{/metrics} answer fake counters.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        metadata = MetadataCache(2, "cluster-x")
        metadata.set_brokers({i: BrokerEndpoint(i, "127.0.0.1", 9092 + i) for i in range(3)})
        metadata.controller_id = 0
        self.topic_id = uuid.UUID("1e4f0fbd-66f5-4c64-ac3e-9211639a91e1")
        metadata.set_topic(TopicMetadata("t", self.topic_id, {0: [0, 2], 1: [1, 2]}, {}))
        metadata.set_partition_state("t", 0, PartitionState(0, 0, [0, 2]))
        metadata.set_partition_state("t", 1, PartitionState(1, 0, [1]))
        self.apis = {0: fake_apis(30, 3000, 100, {"t": (30, 3000, 100)}),
                     1: fake_apis(12, 1200, 0, {"t": (12, 1200, 0)}),
                     2: fake_apis(0, 0, 40, {})}
        self.asked: list[str] = []
        self.down: set[int] = set()
        self.broker = SimpleNamespace(
            config=BrokerConfig({"metrics.port": "0"}), broker_id=2, metadata=metadata, log_manager=None,
            reactor=self.clock, apis=self.apis[2], milliseconds=lambda: int(self.clock.seconds() * 1000),
            registered_brokers={0: BrokerInfo(0, "127.0.0.1", 9092, metrics_port=8000),
                                1: BrokerInfo(1, "127.0.0.1", 9093, metrics_port=8001),
                                2: BrokerInfo(2, "127.0.0.1", 9094, metrics_port=8002)},
            ready=defer.succeed(None), start_error=None, shutting_down=False,
            zookeeper=SimpleNamespace(connected=True), lag_monitor=None,
            _topic_config=lambda name: topic_log_config(BrokerConfig({}), {}, strict=False))
        self.counters = ClusterCounters(self.broker, get=self.get)
        self.admin = FakeLeader()
        self.console = ConsoleResource(self.broker, admin=lambda: self.admin, producer=lambda: None,
                                       counters=lambda: self.counters)

    def get(self, url: str) -> defer.Deferred:
        self.asked.append(url)
        broker_id = int(url.rsplit(":", 1)[1].split("/")[0]) - 8000
        if broker_id in self.down:
            return defer.fail(ConnectionRefusedError("Connection refused"))
        return defer.succeed(exposition(self.apis[broker_id]))

    def api(self, endpoint: str, **args: str) -> tuple[int, dict]:
        request = DummyRequest([])
        request.client = IPv4Address("TCP", "127.0.0.1", 50000)
        request.args = {k.encode(): [v.encode()] for k, v in args.items()}
        d = request.notifyFinish()
        self.assertEqual(self.console.children[b"api"].children[endpoint.encode()].render(request), NOT_DONE_YET)
        d.addCallback(lambda _: (request.responseCode or 200, json.loads(b"".join(request.written))))
        return self.successResultOf(d)


class FakeLeader:
    """The console's admin client toward the leader of t-1: ListOffsets and one Fetch (log start 10, HW 14)."""

    def __init__(self) -> None:
        self.calls: list = []
        self.error = ErrorCode.none

    def list_offsets(self, timestamps: dict) -> defer.Deferred:
        self.calls.append(("list_offsets", dict(timestamps)))
        ends = {-2: 10, -1: 14, 1000012: 12}
        return defer.succeed({tp: SimpleNamespace(offset=ends.get(ts, -1)) for tp, ts in timestamps.items()})

    def send(self, node: int, api_key: int, body: Any, timeout_ms: int) -> defer.Deferred:
        [topic] = body["topics"]
        [partition] = topic["partitions"]
        self.calls.append(("fetch", node, api_key, topic["topic"], partition["partition"], partition["fetch_offset"]))
        # the leader answers whole batches: from 10 to 15, one past the high watermark
        records = encode_batch([(b"k%d" % i, b"v%d" % i, [], 1000000 + i) for i in range(10, 16)], base_offset=10)
        answer = SimpleNamespace(partition_index=partition["partition"], error_code=self.error, high_watermark=14,
                                 records=records)
        return defer.succeed(SimpleNamespace(error_code=0, responses=[
            SimpleNamespace(topic=topic["topic"], partitions=[answer])]))


class ClusterCountersTests(_Cluster, unittest.TestCase):
    def test_every_broker_read_from_its_own_metrics(self) -> None:
        readings = self.successResultOf(self.counters.read())
        self.assertEqual(sorted(self.asked), ["http://127.0.0.1:8000/metrics", "http://127.0.0.1:8001/metrics"])
        self.assertEqual({b: r["messages_in"] for b, r in readings.items()}, {0: 30, 1: 12, 2: 0})
        self.assertEqual(readings[2], local_counters(self.apis[2]))  # its own, from memory

    def test_one_reading_shared_then_read_again(self) -> None:
        first = self.counters.read()
        self.successResultOf(first)
        self.successResultOf(self.counters.read())
        self.assertEqual(len(self.asked), 2)
        self.clock.advance(REUSE_S + 0.1)
        self.successResultOf(self.counters.read())
        self.assertEqual(len(self.asked), 4)

    def test_concurrent_callers_share_one_scrape(self) -> None:
        pending: list[defer.Deferred] = []
        self.counters.get = lambda url: pending.append(defer.Deferred()) or pending[-1]
        a, b = self.counters.read(), self.counters.read()
        self.assertEqual(len(pending), 2)
        for d in pending:
            d.callback(exposition(self.apis[0]))
        self.assertEqual(self.successResultOf(a), self.successResultOf(b))

    def test_unreachable_and_unregistered(self) -> None:
        self.down.add(1)
        self.broker.registered_brokers[0] = BrokerInfo(0, "127.0.0.1", 9092)  # no HTTP port
        readings = self.successResultOf(self.counters.read())
        self.assertEqual(readings[0], {"error": "broker 0 serves no metrics (its metrics.port is -1)"})
        self.assertEqual(readings[1]["url"], "http://127.0.0.1:8001/metrics")
        self.assertIn("did not answer (ConnectionRefusedError: Connection refused)", readings[1]["error"])


class ClusterConsoleTests(_Cluster, unittest.TestCase):
    def test_overview_sums_the_brokers(self) -> None:
        code, body = self.api("overview")
        self.assertEqual(code, 200)
        self.assertEqual(body["counters"], add_counters([local_counters(a) for a in self.apis.values()]))
        self.assertEqual(body["counters"]["messages_in"], 42)  # not broker 2's 0: it leads nothing
        rows = {b["id"]: b for b in body["brokers"]}
        self.assertEqual({b: (r["leader_count"], r["partition_count"], r["counters"]["messages_in"])
                          for b, r in rows.items()}, {0: (1, 1, 30), 1: (1, 1, 12), 2: (0, 2, 0)})
        self.assertEqual([b for b, r in rows.items() if r["controller"]], [0])

    def test_a_broker_not_read_is_left_out_and_named(self) -> None:
        self.down.add(0)
        _, body = self.api("overview")
        self.assertEqual(body["counters"]["messages_in"], 12)
        row = body["brokers"][0]
        self.assertIsNone(row["counters"])
        self.assertIn("http://127.0.0.1:8000/metrics did not answer", row["error"])

    def test_broker_page(self) -> None:
        code, body = self.api("broker", id="2")
        self.assertEqual(code, 200)
        self.assertEqual((body["id"], body["leader_count"], body["counters"]["bytes_out"], body["served_by"]),
                         (2, 0, 40, 2))
        self.assertEqual([(p["topic"], p["partition"], p["role"], p["in_sync"]) for p in body["partitions"]],
                         [("t", 0, "follower", True), ("t", 1, "follower", False)])
        _, body = self.api("broker", id="1")
        self.assertEqual((body["counters"]["messages_in"], [p["role"] for p in body["partitions"]]), (12, ["leader"]))
        self.assertEqual(self.api("broker", id="7"),
                         (400, {"error": "broker 7 is not registered (not in /brokers/ids)"}))
        self.assertEqual(self.api("broker", id="x"), (400, {"error": "id must be a broker id"}))

    def test_messages_fetched_from_the_leader(self) -> None:
        code, body = self.api("messages", topic="t", partition="1", offset="11", limit="2")
        self.assertEqual(code, 200)
        self.assertEqual([(r["offset"], r["key"]["text"]) for r in body["records"]], [(11, "k11"), (12, "k12")])
        self.assertEqual((body["leader"], body["log_start_offset"], body["high_watermark"], body["from_offset"]),
                         (1, 10, 14, 11))
        self.assertIn(("fetch", 1, 1, "t", 1, 11), self.admin.calls)
        _, body = self.api("messages", topic="t", partition="1")  # earliest, below the high watermark only
        self.assertEqual([r["offset"] for r in body["records"]], [10, 11, 12, 13])
        _, body = self.api("messages", topic="t", partition="1", offset="-1", limit="1")  # the last one
        self.assertEqual([r["offset"] for r in body["records"]], [13])
        _, body = self.api("messages", topic="t", partition="1", timestamp="1000012")
        self.assertEqual(body["from_offset"], 12)
        self.admin.error = ErrorCode.not_leader_or_follower
        code, body = self.api("messages", topic="t", partition="1")
        self.assertEqual((code, body["error"]), (400, "fetching t-1 from broker 1 failed: NOT_LEADER_OR_FOLLOWER"))

    def test_topic_id_as_kafka_prints_it(self) -> None:
        _, body = self.api("topic", name="t")
        self.assertEqual(body["topic_id"], "Hk8PvWb1TGSsPpIRY5qR4Q")  # as kafkatw/cli/topics.py's docstring shows
        self.assertEqual(body["topic_id"], cli_format_topic_id(self.topic_id))
        self.assertEqual(format_topic_id(None), "AAAAAAAAAAAAAAAAAAAAAA")

    def test_topic_offsets_are_the_leaders(self) -> None:
        _, body = self.api("topic", name="t")  # broker 2 leads neither partition: ListOffsets to the leaders
        self.assertEqual([(p["leader"], p["log_start_offset"], p["high_watermark"], p["log_end_offset"])
                          for p in body["partitions"]], [(0, 10, 14, None), (1, 10, 14, None)])
        self.assertIsNone(body["offsets_error"])
        self.admin.list_offsets = lambda timestamps: defer.fail(TimeoutError("no answer"))
        _, body = self.api("topic", name="t")
        self.assertEqual(body["offsets_error"], "the leaders' offsets could not be read: no answer")
        self.assertEqual([p["high_watermark"] for p in body["partitions"]], [None, None])


class RegistrationTests(unittest.SynchronousTestCase):
    def test_the_metrics_port_is_registered(self) -> None:
        data = encode_broker("h", 9092, metrics_port=8080)
        self.assertEqual(json.loads(data)["metrics_port"], 8080)
        self.assertEqual(decode_broker(1, data).metrics_port, 8080)
        self.assertNotIn("metrics_port", json.loads(encode_broker("h", 9092)))
        self.assertIsNone(decode_broker(1, encode_broker("h", 9092)).metrics_port)


class MetricsBindAddressTests(unittest.TestCase):
    """
    C{metrics.bind.address} (issue 30): the address the HTTP port listens on,
    and the host registered for the other brokers' consoles.
    """

    def registered(self, overrides: dict[str, str], listener_host: str = "broker0.example") -> dict:
        """The JSON a broker with C{overrides} and an HTTP port on 9404 writes in C{/brokers/ids/0}."""
        from twisted.internet.testing import MemoryReactorClock

        from kafkatw.broker.server import KafkaServer
        from kafkatw.testing import FakeZooKeeperClient
        from kafkatw.zookeeper.registry import Registry

        server = KafkaServer(BrokerConfig({"broker.id": "0", "metrics.port": "9404", **overrides}),
                             MemoryReactorClock())
        zookeeper = FakeZooKeeperClient()
        self.successResultOf(zookeeper.start())
        server.zookeeper = zookeeper  # type: ignore[assignment]
        server.registry = Registry(zookeeper)
        server.metrics_port = 9404  # as _start_metrics sets it once bound
        self.successResultOf(defer.Deferred.fromCoroutine(
            server._register(listener_host, 9092, [("PLAINTEXT", listener_host, 9092)])))
        data, _ = self.successResultOf(zookeeper.get("/brokers/ids/0"))
        self.assertEqual(decode_broker(0, data).metrics_host, json.loads(data).get("metrics_host"))
        return json.loads(data)

    def test_the_bind_address_is_registered(self) -> None:
        self.assertEqual(self.registered({})["metrics_host"], "127.0.0.1")  # the default
        registration = self.registered({"metrics.bind.address": "127.0.0.2"})
        self.assertEqual((registration["metrics_host"], registration["metrics_port"]), ("127.0.0.2", 9404))
        self.assertEqual(self.registered({"metrics.bind.address": "::1"})["metrics_host"], "::1")

    def test_every_interface_registers_the_inter_broker_listeners_host(self) -> None:
        for bind in ("0.0.0.0", "", "::"):
            self.assertEqual(self.registered({"metrics.bind.address": bind})["metrics_host"], "broker0.example", bind)

    def test_no_host_without_an_http_port(self) -> None:
        data = encode_broker("h", 9092, metrics_host="10.0.0.5")  # a host without a port is not written
        self.assertNotIn("metrics_host", json.loads(data))
        info = decode_broker(1, encode_broker("h", 9092, metrics_port=8080, metrics_host="10.0.0.5"))
        self.assertEqual((info.metrics_host, info.metrics_port), ("10.0.0.5", 8080))

    def test_only_ip_addresses(self) -> None:
        self.assertEqual(BrokerConfig({"metrics.bind.address": " 10.0.0.5 "})["metrics.bind.address"], "10.0.0.5")
        with self.assertRaisesRegex(ValueError, "metrics.bind.address.*not an IP address: 'broker0.example'"):
            BrokerConfig({"metrics.bind.address": "broker0.example"})

    def test_the_console_reads_each_broker_at_its_registered_host(self) -> None:
        metadata = MetadataCache(2)
        metadata.set_brokers({i: BrokerEndpoint(i, f"10.0.0.{i + 1}", 9092) for i in range(3)})
        server = SimpleNamespace(metadata=metadata, registered_brokers={
            0: BrokerInfo(0, "10.0.0.1", 9092, metrics_port=8000, metrics_host="192.168.1.1"),
            1: BrokerInfo(1, "10.0.0.2", 9092, metrics_port=8001, metrics_host="fd00::2"),
            2: BrokerInfo(2, "10.0.0.3", 9092, metrics_port=8002)})  # registered by a kafkatw before the setting
        counters = ClusterCounters(server, get=lambda url: defer.succeed(""))
        self.assertEqual([counters.url(i) for i in range(3)],
                         ["http://192.168.1.1:8000/metrics", "http://[fd00::2]:8001/metrics",
                          "http://10.0.0.3:8002/metrics"])
