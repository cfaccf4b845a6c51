"""
Live configuration: the config tables, the three broker layers, change
notifications on the fake ZooKeeper, AlterConfigs / IncrementalAlterConfigs
and DescribeConfigs answers.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid

from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.admin import AdminManager
from kafkatw.broker.apis import KafkaApis
from kafkatw.broker.metadata_cache import TopicMetadata
from kafkatw.broker.server import KafkaServer
from kafkatw.config import (
    BROKER_CONFIG,
    CONFIG_TYPE_CODES,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIG,
    BrokerConfig,
    config_type,
    is_dynamic_broker_config,
    is_sensitive,
    parse_topic_config,
    topic_log_config,
)
from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.messages import decode_response, encode_request, parse_request_header
from kafkatw.storage.log_manager import LogManager
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.config_changes import CHANGE_EXPIRATION_MS, ConfigChangeListener, parse_entity_path
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import CONFIG_CHANGES_PATH

from .test_broker import BrokerHarness

#: Kafka 3.x/4.x "Topic Configs" but the compaction ones (the log cleaner's).
KAFKA_TOPIC_CONFIGS = """cleanup.policy compression.type file.delete.delay.ms flush.messages flush.ms
follower.replication.throttled.replicas index.interval.bytes leader.replication.throttled.replicas
local.retention.bytes local.retention.ms max.message.bytes message.downconversion.enable message.format.version
message.timestamp.after.max.ms message.timestamp.before.max.ms message.timestamp.difference.max.ms
message.timestamp.type min.insync.replicas preallocate remote.storage.enable retention.bytes retention.ms
segment.bytes segment.index.bytes segment.jitter.ms segment.ms unclean.leader.election.enable""".split()


class ConfigTableTests(unittest.TestCase):
    def test_every_kafka_topic_config_is_known(self) -> None:
        self.assertEqual(sorted(set(KAFKA_TOPIC_CONFIGS) - set(TOPIC_CONFIG)), [])

    def test_kafka_types(self) -> None:
        types = {"retention.bytes": "LONG", "retention.ms": "LONG", "segment.bytes": "INT", "cleanup.policy": "LIST",
                 "compression.type": "STRING", "preallocate": "BOOLEAN", "min.insync.replicas": "INT",
                 "follower.replication.throttled.replicas": "LIST", "message.timestamp.after.max.ms": "LONG",
                 "flush.messages": "LONG", "unclean.leader.election.enable": "BOOLEAN"}
        self.assertEqual({k: config_type(TOPIC_CONFIG[k]) for k in types}, types)
        self.assertEqual(config_type(BROKER_CONFIG["log.retention.bytes"]), "LONG")
        self.assertEqual(config_type(BROKER_CONFIG["broker.id"]), "INT")
        self.assertEqual(CONFIG_TYPE_CODES["LONG"], 5)

    def test_validators(self) -> None:
        for codec in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"):
            self.assertEqual(parse_topic_config("compression.type", codec), codec)
        with self.assertRaises(ValueError) as raised:
            parse_topic_config("compression.type", "zip")
        self.assertIn("String must be one of", str(raised.exception))
        self.assertRaises(ValueError, parse_topic_config, "min.insync.replicas", "0")
        self.assertRaises(ValueError, parse_topic_config, "segment.bytes", "13")
        self.assertRaises(ValueError, parse_topic_config, "segment.bytes", str(2**31))
        self.assertEqual(parse_topic_config("retention.bytes", str(2**40)), 2**40)
        self.assertRaises(ValueError, parse_topic_config, "retention.ms", "-2")
        self.assertRaises(ValueError, parse_topic_config, "preallocate", "maybe")
        self.assertRaises(ValueError, parse_topic_config, "message.timestamp.type", "Now")
        self.assertFalse(parse_topic_config("remote.storage.enable", "false"))
        with self.assertRaises(ValueError) as raised:
            parse_topic_config("remote.storage.enable", "true")
        self.assertIn("no tiered storage", str(raised.exception))
        with self.assertRaises(ValueError) as raised:
            topic_log_config(BrokerConfig(), {"no.such": "1"})
        self.assertEqual(str(raised.exception), "Unknown topic config name: no.such")
        # a znode written by another tool does not stop a broker
        lenient = topic_log_config(BrokerConfig(), {"no.such": "1", "retention.ms": "x", "segment.ms": "5"}, False)
        self.assertEqual((lenient["retention.ms"], lenient["segment.ms"]), (604800000, 5))

    def test_dynamic_and_sensitive(self) -> None:
        for name in ("log.retention.ms", "log.retention.bytes", "log.segment.bytes", "log.roll.ms",
                     "log.cleanup.policy", "min.insync.replicas", "message.max.bytes", "log.flush.interval.ms",
                     "log.flush.interval.messages", "unclean.leader.election.enable", "compression.type",
                     "follower.replication.throttled.rate", "leader.replication.throttled.rate"):
            self.assertTrue(is_dynamic_broker_config(name), name)
        for name in ("broker.id", "zookeeper.connect", "log.dirs", "listeners", "log.message.format.version"):
            self.assertFalse(is_dynamic_broker_config(name), name)
        self.assertTrue(is_sensitive("listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"))
        self.assertTrue(is_sensitive("ssl.keystore.password"))
        self.assertFalse(is_sensitive("retention.ms"))


class BrokerLayersTests(unittest.TestCase):
    def test_precedence_and_sources(self) -> None:
        config = BrokerConfig({"log.retention.ms": "1000"})
        self.assertEqual((config["log.retention.ms"], config.source("log.retention.ms")), (1000, STATIC_BROKER_CONFIG))
        self.assertEqual(config.source("log.segment.bytes"), DEFAULT_CONFIG)
        config.set_dynamic(DYNAMIC_DEFAULT_BROKER_CONFIG, {"log.retention.ms": "2000", "log.segment.bytes": "4096"})
        self.assertEqual((config["log.retention.ms"], config.source("log.retention.ms")),
                         (2000, DYNAMIC_DEFAULT_BROKER_CONFIG))
        skipped = config.set_dynamic(DYNAMIC_BROKER_CONFIG, {"log.retention.ms": "3000", "broker.id": "7",
                                                             "log.segment.bytes": "x"})
        self.assertEqual(sorted(skipped), ["broker.id", "log.segment.bytes"])
        self.assertEqual((config["log.retention.ms"], config.source("log.retention.ms")), (3000, DYNAMIC_BROKER_CONFIG))
        self.assertEqual((config["log.segment.bytes"], config["broker.id"]), (4096, 0))
        self.assertEqual(topic_log_config(config, {})["retention.ms"], 3000)
        config.set_dynamic(DYNAMIC_BROKER_CONFIG, {})
        self.assertEqual(config["log.retention.ms"], 2000)


def _two_brokers(testcase: unittest.TestCase) -> tuple[Clock, list[Registry]]:
    clock = Clock()
    clock.advance(1_700_000_000)
    server = FakeZooKeeper(clock)
    registries = []
    for _ in range(2):
        client = FakeZooKeeperClient(server)
        testcase.successResultOf(client.start())
        registries.append(Registry(client))
    return clock, registries


class ConfigChangeListenerTests(unittest.TestCase):
    def test_notification_format(self) -> None:
        clock, (a, _) = _two_brokers(self)
        self.successResultOf(a.change_entity_config("topics", "t", {"retention.ms": "5"}))
        self.successResultOf(a.set_broker_config("<default>", {"log.retention.ms": "6"}))
        children = self.successResultOf(a.client.get_children(CONFIG_CHANGES_PATH))
        self.assertEqual(children, ["config_change_0000000000", "config_change_0000000001"])
        data, _ = self.successResultOf(a.client.get(f"{CONFIG_CHANGES_PATH}/{children[0]}"))
        self.assertEqual(json.loads(data), {"version": 2, "entity_path": "topics/t"})
        data, _ = self.successResultOf(a.client.get("/config/topics/t"))
        self.assertEqual(json.loads(data), {"version": 1, "config": {"retention.ms": "5"}})
        self.assertEqual(parse_entity_path(b'{"version":2,"entity_path":"users/u/clients/c"}'),
                         ("users", "u/clients/c"))
        self.assertEqual(parse_entity_path(b'{"version":1,"entity_type":"topics","entity_name":"t"}'), ("topics", "t"))
        self.assertRaises(ValueError, parse_entity_path, b'{"version":1,"entity_path":"topics/t"}')
        self.assertRaises(ValueError, parse_entity_path, b'garbage')

    def test_every_broker_follows_in_order(self) -> None:
        clock, (a, b) = _two_brokers(self)
        # a notification written before the listener starts is handled at start
        self.successResultOf(a.set_topic_config("t", {"retention.ms": "1"}))
        seen: list = []
        listener = ConfigChangeListener(b, clock)
        listener.on_entity_change("topics", lambda name, config: seen.append(("topics", name, config)))
        listener.on_entity_change("brokers", lambda name, config: seen.append(("brokers", name, config)))
        listener.on_entity_change("users", lambda name, config: seen.append(("users", name, config)))
        self.successResultOf(listener.start())
        clock.advance(0)
        self.successResultOf(listener.idle())
        self.assertEqual(seen, [("topics", "t", {"retention.ms": "1"})])
        self.successResultOf(a.set_topic_config("t", {"retention.ms": "2"}))
        self.successResultOf(a.set_broker_config("1", {"follower.replication.throttled.rate": "10"}))
        self.successResultOf(a.change_entity_config("users", "alice", {"SCRAM-SHA-256": "..."}))
        clock.advance(0)
        self.successResultOf(listener.idle())
        self.assertEqual(seen[1:], [("topics", "t", {"retention.ms": "2"}),
                                    ("brokers", "1", {"follower.replication.throttled.rate": "10"}),
                                    ("users", "alice", {"SCRAM-SHA-256": "..."})])
        self.assertEqual(listener.last_change, 3)
        # nothing is handled twice
        self.successResultOf(a.client.create("/config/changes/unrelated", b""))
        clock.advance(0)
        self.successResultOf(listener.idle())
        self.assertEqual(len(seen), 4)
        listener.stop()

    def test_a_failing_callback_does_not_stop_the_others(self) -> None:
        clock, (a, b) = _two_brokers(self)
        seen: list = []
        listener = ConfigChangeListener(b, clock)
        listener.on_entity_change("topics", lambda name, config: 1 / 0)
        listener.on_entity_change("topics", lambda name, config: seen.append(name))
        self.successResultOf(listener.start())
        self.successResultOf(a.set_topic_config("t", {}))
        clock.advance(0)
        self.successResultOf(listener.idle())
        self.assertEqual(seen, ["t"])
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_old_notifications_are_purged(self) -> None:
        clock, (a, b) = _two_brokers(self)
        listener = ConfigChangeListener(b, clock)
        self.successResultOf(listener.start())
        self.successResultOf(a.set_topic_config("t", {"retention.ms": "1"}))
        clock.advance(0)
        self.successResultOf(listener.idle())
        clock.advance(CHANGE_EXPIRATION_MS / 1000 + 1)
        self.successResultOf(a.set_topic_config("t", {"retention.ms": "2"}))
        clock.advance(0)
        self.successResultOf(listener.idle())
        self.assertEqual(self.successResultOf(a.client.get_children(CONFIG_CHANGES_PATH)),
                         ["config_change_0000000001"])

    def test_catch_up_handles_the_notifications_without_the_watch(self) -> None:
        clock, (a, b) = _two_brokers(self)
        seen: list = []
        listener = ConfigChangeListener(b, clock)
        listener.on_entity_change("topics", lambda name, config: seen.append((name, config)))
        self.successResultOf(listener.start())
        self.successResultOf(a.set_topic_config("t", {"retention.ms": "1"}))
        self.successResultOf(a.set_topic_config("u", {"retention.ms": "2"}))
        self.assertEqual(seen, [])  # the watch has not fired yet (the clock has not moved)
        self.assertIsNone(self.successResultOf(listener.catch_up()))
        self.assertEqual(seen, [("t", {"retention.ms": "1"}), ("u", {"retention.ms": "2"})])
        self.assertEqual(listener.last_change, 1)
        clock.advance(0)
        self.successResultOf(listener.idle())
        self.assertEqual(len(seen), 2)  # the watch finds nothing new
        # ZooKeeper unreachable: logged, not failed (the write was made; the watch handles it later)
        b.client.disconnect()
        self.assertIsNone(self.successResultOf(listener.catch_up()))
        b.client.reconnect()
        self.successResultOf(a.set_topic_config("t", {}))
        clock.advance(0)
        self.successResultOf(listener.idle())
        self.assertEqual(seen[-1], ("t", {}))


def _server(testcase: unittest.TestCase, clock: Clock, registry: Registry, broker_id: int = 1,
            **static: object) -> KafkaServer:
    """A KafkaServer with what its config handlers use: logs, the change listener, topic C{t}."""
    directory = tempfile.mkdtemp(prefix="kafkatw-live-config-")
    testcase.addCleanup(shutil.rmtree, directory, True)
    server = KafkaServer(BrokerConfig({"broker.id": broker_id, "log.dirs": directory, **static}), clock)
    server.registry = registry
    server.log_manager = LogManager([directory], topic_log_config(server.config, {}),
                                    now_ms=lambda: int(clock.seconds() * 1000))
    testcase.addCleanup(server.log_manager.close)
    server.config_changes = ConfigChangeListener(registry, clock)
    server.config_changes.on_entity_change("topics", server._topic_config_changed)
    server.config_changes.on_entity_change("brokers", server._broker_config_changed)
    testcase.successResultOf(server.config_changes.start())
    server.metadata.set_topic(TopicMetadata("t", uuid.uuid4(), {0: [broker_id]}))
    return server


class BrokerPropagationTests(unittest.TestCase):
    """A broker's handlers (KafkaServer) apply notified changes to its logs without a restart."""

    def broker(self, clock: Clock, registry: Registry, **static: object) -> KafkaServer:
        return _server(self, clock, registry, **static)

    def settle(self, clock: Clock, *servers: KafkaServer) -> None:
        clock.advance(0)
        for server in servers:
            self.successResultOf(server.config_changes.idle())

    def test_topic_and_broker_changes_reach_every_log(self) -> None:
        clock, (a, b) = _two_brokers(self)
        brokers = [self.broker(clock, a), self.broker(clock, b, **{"log.retention.ms": "1000"})]
        logs = [s.log_manager.get_or_create("t", 0, s._topic_config("t")) for s in brokers]
        self.assertEqual([log.config.retention_ms for log in logs], [604800000, 1000])
        self.successResultOf(a.set_topic_config("t", {"retention.ms": "10", "max.message.bytes": "100",
                                                      "compression.type": "lz4"}))
        self.settle(clock, *brokers)
        self.assertEqual([(log.config.retention_ms, log.config.max_message_bytes, log.config.compression_type)
                          for log in logs], [(10, 100, "lz4")] * 2)
        self.assertEqual([s._topic_config("t")["max.message.bytes"] for s in brokers], [100, 100])
        # a broker default changes what the topic does not override
        self.successResultOf(a.set_topic_config("t", {}))
        self.successResultOf(a.set_broker_config("<default>", {"log.retention.ms": "20", "min.insync.replicas": "2"}))
        self.settle(clock, *brokers)
        self.assertEqual([log.config.retention_ms for log in logs], [20, 20])
        self.assertEqual([s._topic_config("t")["min.insync.replicas"] for s in brokers], [2, 2])
        # a per-broker config wins over the default, for that broker only (both are broker.id 1 here)
        self.successResultOf(a.set_broker_config("1", {"log.retention.ms": "30"}))
        self.successResultOf(a.set_broker_config("2", {"log.retention.ms": "40"}))
        self.settle(clock, *brokers)
        self.assertEqual([log.config.retention_ms for log in logs], [30, 30])
        self.assertEqual(brokers[0].config.source("log.retention.ms"), DYNAMIC_BROKER_CONFIG)
        # follower.replication.throttled.replicas names the replicas this broker's fetches throttle
        self.assertEqual([s._throttled("t", 0) for s in brokers], [False, False])
        self.successResultOf(a.set_topic_config("t", {"follower.replication.throttled.replicas": "1:2,0:1"}))
        self.settle(clock, *brokers)
        self.assertEqual([s._throttled("t", 0) for s in brokers], [True, True])
        self.successResultOf(a.set_topic_config("t", {"follower.replication.throttled.replicas": "*"}))
        self.settle(clock, *brokers)
        self.assertTrue(brokers[0]._throttled("t", 0))
        # a topic this broker does not know is read when it appears, not from the notification
        self.successResultOf(a.set_topic_config("unknown", {"retention.ms": "1"}))
        self.settle(clock, *brokers)
        self.assertNotIn("unknown", brokers[0]._topic_configs)

    def test_retention_applies_at_once(self) -> None:
        clock, (a, b) = _two_brokers(self)
        server = self.broker(clock, b)
        log = server.log_manager.get_or_create("t", 0, server._topic_config("t"))
        old = int(clock.seconds() * 1000) - 3_600_000
        log.append(build_batch([(None, b"old")], timestamp_ms=old), 0)
        log.roll()
        log.append(build_batch([(None, b"new")], timestamp_ms=int(clock.seconds() * 1000)), 0)
        log.update_high_watermark(log.log_end_offset)
        server.log_manager.run_retention(int(clock.seconds() * 1000))
        self.assertEqual(log.log_start_offset, 0)
        self.successResultOf(a.set_topic_config("t", {"retention.ms": "60000"}))
        self.settle(clock, server)
        server.log_manager.run_retention(int(clock.seconds() * 1000))
        self.assertEqual(log.log_start_offset, 1)


class AlterConfigsTests(unittest.TestCase):
    def alter(self, h: BrokerHarness, resource_type: int, name: str, configs: list, validate_only: bool = False,
              incremental: bool = True) -> tuple[int, str | None]:
        if incremental:
            body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": [
                {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}],
                "validate_only": validate_only}
            [response] = h.call(44, 1, body).responses
        else:
            body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": [
                {"name": k, "value": v} for k, v in configs]}], "validate_only": validate_only}
            [response] = h.call(33, 2, body).responses
        return response.error_code, response.error_message

    def topic_config(self, h: BrokerHarness) -> dict:
        return self.successResultOf(h.registry.get_topic_config("t"))

    def test_incremental_topic_operations(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        self.assertEqual(self.alter(h, 2, "t", [("retention.ms", 0, "1000"), ("cleanup.policy", 0, "delete")]),
                         (0, None))
        self.assertEqual(self.topic_config(h), {"retention.ms": "1000", "cleanup.policy": "delete"})
        self.assertEqual(self.alter(h, 2, "t", [("leader.replication.throttled.replicas", 2, "0:1,1:2"),
                                                ("retention.ms", 1, None)]), (0, None))
        self.assertEqual(self.alter(h, 2, "t", [("leader.replication.throttled.replicas", 2, "1:2,2:0")]), (0, None))
        self.assertEqual(self.alter(h, 2, "t", [("leader.replication.throttled.replicas", 3, "0:1")]), (0, None))
        self.assertEqual(self.topic_config(h), {"cleanup.policy": "delete",
                                                "leader.replication.throttled.replicas": "1:2,2:0"})
        # validate_only writes nothing
        self.assertEqual(self.alter(h, 2, "t", [("segment.ms", 0, "5")], validate_only=True), (0, None))
        self.assertNotIn("segment.ms", self.topic_config(h))

    def test_legacy_alter_replaces_the_set(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        self.assertEqual(self.alter(h, 2, "t", [("retention.ms", 0, "1000")]), (0, None))
        self.assertEqual(self.alter(h, 2, "t", [("segment.ms", "5000")], incremental=False), (0, None))
        self.assertEqual(self.topic_config(h), {"segment.ms": "5000"})
        self.assertEqual(self.alter(h, 4, "", [("log.retention.ms", "1")], incremental=False), (0, None))
        self.assertEqual(self.successResultOf(h.registry.get_broker_config("<default>")), {"log.retention.ms": "1"})

    def test_errors_as_kafka(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        code, message = self.alter(h, 2, "t", [("retention.ms", 0, "soon")])
        self.assertEqual(code, ErrorCode.invalid_request)
        self.assertEqual(message, "Invalid config value for resource ConfigResource(type=TOPIC, name='t'): "
                                  "Invalid value soon for configuration retention.ms: Not a number of type LONG")
        self.assertEqual(self.alter(h, 2, "t", [("no.such", 0, "1")]),
                         (ErrorCode.invalid_config, "Unknown topic config name: no.such"))
        self.assertEqual(self.alter(h, 2, "t", [("remote.storage.enable", 0, "true")])[0], ErrorCode.invalid_request)
        self.assertEqual(self.alter(h, 2, "t", [("retention.ms", 2, "1")]),
                         (ErrorCode.invalid_request, "Config value append is not allowed for config key: retention.ms"))
        self.assertEqual(self.alter(h, 2, "t", [("retention.ms", 0, "1"), ("retention.ms", 1, None)])[0],
                         ErrorCode.invalid_request)
        self.assertEqual(self.alter(h, 2, "t", [("retention.ms", 0, None)])[0], ErrorCode.invalid_request)
        self.assertEqual(self.alter(h, 2, "absent", [("retention.ms", 0, "1")])[0],
                         ErrorCode.unknown_topic_or_partition)
        self.assertEqual(self.alter(h, 8, "0", [("kafka.server", 0, "DEBUG")])[0], ErrorCode.invalid_request)
        self.assertEqual(self.alter(h, 4, "0", [("message.max.bytes", 0, "-1")])[0], ErrorCode.invalid_request)
        self.assertEqual(self.topic_config(h), {})

    def test_create_topics_accepts_every_config(self) -> None:
        h = BrokerHarness(self)
        body = {"topics": [{"name": "lz", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                            "configs": [{"name": "compression.type", "value": "lz4"},
                                        {"name": "preallocate", "value": "true"},
                                        {"name": "message.timestamp.type", "value": "LogAppendTime"}]}],
                "timeout": 1000, "validate_only": False}
        [topic] = h.call(19, 7, body).topics
        self.assertEqual(topic.error_code, ErrorCode.none)
        created = {c.name: (c.value, c.config_source) for c in topic.configs}
        self.assertEqual(created["compression.type"], ("lz4", DYNAMIC_TOPIC_CONFIG))
        self.assertEqual(created["retention.ms"], ("604800000", DEFAULT_CONFIG))
        body["topics"][0].update(name="remote", configs=[{"name": "remote.storage.enable", "value": "true"}])
        [topic] = h.call(19, 7, body).topics
        self.assertEqual(topic.error_code, ErrorCode.invalid_config)
        self.assertIn("no tiered storage", topic.error_message)


class ProduceTests(unittest.TestCase):
    """A topic's config as Produce answers it."""

    def test_invalid_timestamp_and_record_too_large(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        h.produce("t", 0, build_batch([(None, b"first")]))  # hosts the log
        h.clock.advance(1_700_000_000)
        h.log_manager.update_config("t", topic_log_config(h.config, {"message.timestamp.before.max.ms": "1000",
                                                                      "max.message.bytes": "200"}))
        now_ms = int(h.clock.seconds() * 1000)
        self.assertEqual(h.produce("t", 0, build_batch([(None, b"old")], timestamp_ms=now_ms - 5000)).error_code,
                         ErrorCode.invalid_timestamp)
        self.assertEqual(h.produce("t", 0, build_batch([(None, b"x" * 300)], timestamp_ms=now_ms)).error_code,
                         ErrorCode.message_too_large)
        self.assertEqual(h.produce("t", 0, build_batch([(None, b"ok")], timestamp_ms=now_ms)).error_code,
                         ErrorCode.none)


class DescribeConfigsTests(unittest.TestCase):
    def describe(self, h: BrokerHarness, resource_type: int, name: str, keys: list | None = None,
                 version: int = 4, synonyms: bool = True, documentation: bool = True):
        body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
                "include_synonyms": synonyms, "include_documentation": documentation}
        [result] = h.call(32, version, body).results
        return result

    def test_topic_sources_synonyms_types(self) -> None:
        h = BrokerHarness(self, **{"log.retention.ms": "5000"})
        h.create_topic("t")
        self.successResultOf(h.registry.set_topic_config("t", {"segment.ms": "100"}))
        h.metadata.topics["t"].config.update({"segment.ms": "100"})  # as the broker's listener does
        h.config.set_dynamic(DYNAMIC_DEFAULT_BROKER_CONFIG, {"log.retention.bytes": "7"})
        result = self.describe(h, 2, "t")
        configs = {c.name: c for c in result.configs}
        self.assertEqual(sorted(configs), sorted(TOPIC_CONFIG))
        segment_ms = configs["segment.ms"]
        self.assertEqual((segment_ms.value, segment_ms.config_source), ("100", DYNAMIC_TOPIC_CONFIG))
        self.assertEqual([(s.name, s.value, s.source) for s in segment_ms.synonyms],
                         [("segment.ms", "100", DYNAMIC_TOPIC_CONFIG), ("log.roll.ms", "604800000", DEFAULT_CONFIG)])
        retention = configs["retention.ms"]
        self.assertEqual((retention.value, retention.config_source), ("5000", STATIC_BROKER_CONFIG))
        self.assertEqual([(s.name, s.value, s.source) for s in retention.synonyms],
                         [("log.retention.ms", "5000", STATIC_BROKER_CONFIG),
                          ("log.retention.ms", "604800000", DEFAULT_CONFIG)])
        retention_bytes = configs["retention.bytes"]
        self.assertEqual((retention_bytes.value, retention_bytes.config_source, retention_bytes.config_type),
                         ("7", DYNAMIC_DEFAULT_BROKER_CONFIG, CONFIG_TYPE_CODES["LONG"]))
        self.assertEqual(configs["cleanup.policy"].config_type, CONFIG_TYPE_CODES["LIST"])
        self.assertEqual(configs["preallocate"].value, "false")
        self.assertIn("no effect", configs["preallocate"].documentation)
        self.assertFalse(any(c.read_only or c.is_sensitive for c in result.configs))
        # without synonyms and documentation; only the keys asked for; v1
        result = self.describe(h, 2, "t", ["retention.ms", "no.such"], version=1, synonyms=False)
        self.assertEqual([(c.name, c.value, list(c.synonyms)) for c in result.configs], [("retention.ms", "5000", [])])
        self.assertEqual(self.describe(h, 2, "absent").error_code, ErrorCode.unknown_topic_or_partition)

    def test_sensitive_values_are_never_returned(self) -> None:
        name = "sasl.jaas.config"  # a sensitive key (ConfigKey.sensitive): Kafka's PASSWORD type
        h = BrokerHarness(self, **{name: "org.apache.kafka.common.security.scram.ScramLoginModule required;"})
        [entry] = self.describe(h, 4, "0", [name]).configs
        self.assertEqual((entry.value, entry.is_sensitive, entry.config_type),
                         (None, True, CONFIG_TYPE_CODES["PASSWORD"]))
        self.assertEqual([(s.value, s.source) for s in entry.synonyms],
                         [(None, STATIC_BROKER_CONFIG), (None, DEFAULT_CONFIG)])

    def test_broker_entities(self) -> None:
        h = BrokerHarness(self, **{"message.max.bytes": "2000"})
        h.config.set_dynamic(DYNAMIC_DEFAULT_BROKER_CONFIG, {"log.retention.ms": "10"})
        h.config.set_dynamic(DYNAMIC_BROKER_CONFIG, {"log.retention.ms": "20"})
        configs = {c.name: c for c in self.describe(h, 4, "0").configs}
        self.assertEqual(sorted(configs), sorted(BROKER_CONFIG))
        retention = configs["log.retention.ms"]
        self.assertEqual((retention.value, retention.config_source, retention.read_only), ("20", DYNAMIC_BROKER_CONFIG,
                                                                                          False))
        self.assertEqual([s.source for s in retention.synonyms],
                         [DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG])
        self.assertEqual((configs["message.max.bytes"].value, configs["message.max.bytes"].config_source),
                         ("2000", STATIC_BROKER_CONFIG))
        self.assertTrue(configs["broker.id"].read_only)
        self.assertEqual(configs["log.dirs"].config_type, CONFIG_TYPE_CODES["LIST"])
        # the default entity: its dynamic configs only
        default = self.describe(h, 4, "")
        self.assertEqual([(c.name, c.value, c.config_source) for c in default.configs],
                         [("log.retention.ms", "10", DYNAMIC_DEFAULT_BROKER_CONFIG)])
        other = self.describe(h, 4, "5")
        self.assertEqual(other.error_code, ErrorCode.invalid_request)
        self.assertEqual(other.error_message, "Unexpected broker id, expected 0 or empty string, but received 5")


class DescribeAfterAlterTests(unittest.TestCase):
    """
    Issue 26: once a broker has acknowledged an AlterConfigs or
    IncrementalAlterConfigs (its write to ZooKeeper succeeded), the
    DescribeConfigs it answers and its logs' configs follow the change,
    before its watch on /config/changes reports the notification; the other
    brokers follow the notification.  The clock does not move between an
    alter and the describes after it, so no watch fires in between.
    """

    def setUp(self) -> None:
        self.clock, registries = _two_brokers(self)
        self.a, self.b = [self.serving(_server(self, self.clock, registry, broker_id=broker_id))
                          for broker_id, registry in zip((1, 2), registries)]
        self.handled: list = []  # the topic notifications broker a handles
        self.a.config_changes.on_entity_change("topics", lambda name, config: self.handled.append(config))
        self._correlation = 0

    def serving(self, server: KafkaServer) -> KafkaServer:
        """The request handlers, wired as KafkaServer._start_serving wires them."""
        server.admin = AdminManager(server.config, server.registry, server.metadata,
                                    config_written=server.config_changes.catch_up)
        server.apis = KafkaApis(server.config, None, server.metadata, server.admin, self.clock,
                                lambda: int(self.clock.seconds() * 1000))
        server.log = server.log_manager.get_or_create("t", 0, server._topic_config("t"))
        return server

    def call(self, server: KafkaServer, api_key: int, version: int, body: dict) -> Any:
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, "test", body)
        result = server.apis.handle(parse_request_header(frame), frame)
        if isinstance(result, defer.Deferred):
            result = self.successResultOf(result)
        return decode_response(api_key, version, result)[1]

    def alter(self, server: KafkaServer, resource_type: int, name: str, configs: list, incremental: bool = True,
              validate_only: bool = False) -> tuple[int, str | None]:
        if incremental:
            [response] = self.call(server, 44, 1, {"validate_only": validate_only, "resources": [
                {"resource_type": resource_type, "resource_name": name, "configs": [
                    {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}]}).responses
        else:
            [response] = self.call(server, 33, 2, {"validate_only": validate_only, "resources": [
                {"resource_type": resource_type, "resource_name": name, "configs": [
                    {"name": k, "value": v} for k, v in configs]}]}).responses
        return response.error_code, response.error_message

    def describe(self, server: KafkaServer, resource_type: int, name: str) -> dict[str, tuple]:
        [result] = self.call(server, 32, 4, {"include_synonyms": False, "include_documentation": False,
                                             "resources": [{"resource_type": resource_type, "resource_name": name,
                                                            "configuration_keys": None}]}).results
        self.assertEqual(result.error_code, ErrorCode.none)
        return {c.name: (c.value, c.config_source) for c in result.configs}

    def settle(self) -> None:
        self.clock.advance(0)
        for server in (self.a, self.b):
            self.successResultOf(server.config_changes.idle())

    def test_topic_alters_are_described_at_once(self) -> None:
        dynamic, default = DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG
        steps = [  # (incremental, configs, what broker a answers next, its log's retention.ms and cleanup.policy)
            (True, [("retention.ms", 0, "60000"), ("cleanup.policy", 0, "delete")],
             {"retention.ms": ("60000", dynamic), "cleanup.policy": ("delete", dynamic)}, (60000, "delete")),
            (True, [("cleanup.policy", 2, "compact")],
             {"retention.ms": ("60000", dynamic), "cleanup.policy": ("delete,compact", dynamic)},
             (60000, "delete,compact")),
            (True, [("retention.ms", 1, None)],
             {"retention.ms": ("604800000", default), "cleanup.policy": ("delete,compact", dynamic)},
             (604800000, "delete,compact")),
            (False, [("retention.ms", "1000")],  # the legacy AlterConfigs replaces the whole set
             {"retention.ms": ("1000", dynamic), "cleanup.policy": ("delete", default)}, (1000, "delete")),
        ]
        before = {k: self.describe(self.b, 2, "t")[k] for k in ("retention.ms", "cleanup.policy")}
        for incremental, configs, expected, (retention_ms, cleanup_policy) in steps:
            self.assertEqual(self.alter(self.a, 2, "t", configs, incremental), (0, None))
            for _ in range(3):  # every describe after the alter, not only the first
                described = self.describe(self.a, 2, "t")
                self.assertEqual({k: described[k] for k in expected}, expected)
            self.assertEqual((self.a.log.config.retention_ms, set(self.a.log.config.cleanup_policy.split(","))),
                             (retention_ms, set(cleanup_policy.split(","))))
            # broker b did not answer the alter: it follows the notification
            self.assertEqual({k: self.describe(self.b, 2, "t")[k] for k in expected}, before)
            self.settle()
            before = {k: self.describe(self.b, 2, "t")[k] for k in expected}
            self.assertEqual(before, expected)
            self.assertEqual({k: self.describe(self.a, 2, "t")[k] for k in expected}, expected)
            self.assertEqual(self.b.log.config.retention_ms, retention_ms)
        # broker a handled each of its notifications once, before answering; its watch found nothing new
        self.assertEqual(len(self.handled), len(steps))

    def test_an_empty_cleanup_policy_keeps_every_segment(self) -> None:
        """
        Kafka accepts an empty C{cleanup.policy} list (its ValidList checks
        each item): neither retention nor the cleaner touches the log, as
        with C{retention.ms=-1} and C{retention.bytes=-1} (KAFKA-19112's
        upgrade note).
        """
        self.assertEqual(self.alter(self.a, 2, "t", [("retention.ms", 0, "1"), ("cleanup.policy", 0, "delete")]),
                         (0, None))
        self.assertEqual(self.alter(self.a, 2, "t", [("cleanup.policy", 3, "delete")]), (0, None))  # SUBTRACT
        self.assertEqual(self.describe(self.a, 2, "t")["cleanup.policy"], ("", DYNAMIC_TOPIC_CONFIG))
        self.assertEqual(self.alter(self.a, 2, "t", [("cleanup.policy", 0, "")]), (0, None))  # SET to nothing
        self.assertEqual(self.alter(self.a, 2, "t", [("cleanup.policy", "")], incremental=False), (0, None))
        log = self.a.log
        self.assertEqual((log.config.cleanup_policy, log.config.delete, log.config.compact), ("", False, False))
        for _ in range(3):
            log.append(build_batch([(b"k", b"v")], timestamp_ms=0), leader_epoch=0)
            log.roll()
        log.update_high_watermark(log.log_end_offset)
        self.assertEqual(log.apply_retention(now_ms=10**12), 0)
        self.assertEqual(len(log.segments), 4)
        self.assertEqual(self.alter(self.a, 2, "t", [("cleanup.policy", 2, "delete")]), (0, None))  # APPEND
        self.assertEqual(log.apply_retention(now_ms=10**12), 3)  # the same log, with delete: retention.ms=1
        self.assertEqual(self.alter(self.a, 2, "t", [("cleanup.policy", 0, "shred")])[0], ErrorCode.invalid_request)

    def test_a_notification_not_yet_seen_is_applied_first(self) -> None:
        """Broker b's write, not yet reported to broker a, is applied before a's own (its alter read it)."""
        self.successResultOf(self.b.registry.set_topic_config("t", {"retention.ms": "1"}))
        self.assertEqual(self.alter(self.a, 2, "t", [("segment.ms", 0, "5000")]), (0, None))
        described = self.describe(self.a, 2, "t")
        self.assertEqual((described["retention.ms"], described["segment.ms"]),
                         (("1", DYNAMIC_TOPIC_CONFIG), ("5000", DYNAMIC_TOPIC_CONFIG)))
        self.settle()
        self.assertEqual(self.handled[-1], {"retention.ms": "1", "segment.ms": "5000"})
        self.assertEqual((self.a.log.config.retention_ms, self.a.log.config.segment_ms), (1, 5000))

    def test_validate_only_changes_nothing(self) -> None:
        for incremental, configs in ((True, [("retention.ms", 0, "1000")]), (False, [("retention.ms", "1000")])):
            self.assertEqual(self.alter(self.a, 2, "t", configs, incremental, validate_only=True), (0, None))
            self.assertEqual(self.alter(self.a, 4, "1", [("log.retention.ms", 0, "1000")], validate_only=True),
                             (0, None))
            self.assertEqual(self.describe(self.a, 2, "t")["retention.ms"], ("604800000", DEFAULT_CONFIG))
            self.assertEqual(self.describe(self.a, 4, "1")["log.retention.ms"], ("604800000", DEFAULT_CONFIG))
        self.settle()
        self.assertEqual(self.a.log.config.retention_ms, 604800000)
        self.assertIsNone(self.successResultOf(self.a.registry.client.exists(CONFIG_CHANGES_PATH)))  # no notification
        self.assertEqual(self.successResultOf(self.a.registry.get_topic_config("t")), {})
        self.assertEqual(self.handled, [])

    def test_broker_alters_are_described_at_once(self) -> None:
        # broker a's own entity (broker.id 1): its dynamic per-broker layer
        self.assertEqual(self.alter(self.a, 4, "1", [("log.retention.ms", 0, "1000")]), (0, None))
        self.assertEqual(self.describe(self.a, 4, "1")["log.retention.ms"], ("1000", DYNAMIC_BROKER_CONFIG))
        self.assertEqual(self.describe(self.a, 2, "t")["retention.ms"], ("1000", DYNAMIC_BROKER_CONFIG))
        self.assertEqual(self.a.log.config.retention_ms, 1000)
        # the cluster-wide default, through the legacy AlterConfigs
        self.assertEqual(self.alter(self.a, 4, "", [("log.retention.bytes", "123456")], incremental=False), (0, None))
        self.assertEqual(self.describe(self.a, 4, ""),
                         {"log.retention.bytes": ("123456", DYNAMIC_DEFAULT_BROKER_CONFIG)})
        self.assertEqual(self.describe(self.a, 4, "1")["log.retention.bytes"],
                         ("123456", DYNAMIC_DEFAULT_BROKER_CONFIG))
        self.assertEqual(self.a.log.config.retention_bytes, 123456)
        self.assertEqual(self.describe(self.b, 4, "2")["log.retention.bytes"], ("-1", DEFAULT_CONFIG))
        # IncrementalAlterConfigs DELETE of the per-broker value: the default shows again
        self.assertEqual(self.alter(self.a, 4, "1", [("log.retention.ms", 1, None)]), (0, None))
        self.assertEqual(self.describe(self.a, 4, "1")["log.retention.ms"], ("604800000", DEFAULT_CONFIG))
        self.assertEqual(self.a.log.config.retention_ms, 604800000)
        self.settle()
        self.assertEqual(self.describe(self.b, 4, "2")["log.retention.bytes"],
                         ("123456", DYNAMIC_DEFAULT_BROKER_CONFIG))
        self.assertEqual(self.describe(self.a, 4, "1")["log.retention.bytes"],
                         ("123456", DYNAMIC_DEFAULT_BROKER_CONFIG))
