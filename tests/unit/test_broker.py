"""
Unit tests of the broker's request handling: KafkaApis with real storage in a
temporary directory, an in-memory ZooKeeper, a MemoryReactorClock, and
KafkaConnection over a StringTransport.  No sockets, no sleeps.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import uuid
from typing import Any

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial import unittest

from kafkatw.broker.admin import AdminManager
from kafkatw.broker.apis import (
    ADVERTISED_VERSIONS,
    SUPPORTED_VERSIONS,
    KafkaApis,
    validate_topic_name,
)
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.broker.network import KafkaConnection
from kafkatw.broker.replica_manager import ReplicaManager
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch, parse_batch_headers
from kafkatw.protocol.messages import decode_response, encode_request, parse_request_header
from kafkatw.storage.log_manager import LogManager
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.registry import Registry


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class BrokerHarness:
    """One broker's KafkaApis over real logs and a fake ZooKeeper."""

    def __init__(self, testcase: unittest.TestCase, broker_id: int = 0, **overrides: object) -> None:
        self.directory = tempfile.mkdtemp(prefix="kafkatw-broker-test-")
        testcase.addCleanup(shutil.rmtree, self.directory, True)
        self.clock = MemoryReactorClock()
        self.config = BrokerConfig({"broker.id": broker_id, "log.dirs": self.directory, **overrides})
        self.zookeeper = FakeZooKeeperClient()
        testcase.successResultOf(self.zookeeper.start())
        self.registry = Registry(self.zookeeper)
        self.metadata = MetadataCache(broker_id)
        self.metadata.set_brokers({0: BrokerEndpoint(0, "127.0.0.1", 9092), 1: BrokerEndpoint(1, "127.0.0.1", 9093)})
        now_ms = lambda: int(self.clock.seconds() * 1000)  # noqa: E731
        self.log_manager = LogManager([self.directory], topic_log_config(self.config, {}), now_ms=now_ms)
        self.log_manager.load()
        testcase.addCleanup(self.log_manager.close)
        self.replica_manager = ReplicaManager(
            broker_id, self.log_manager, self.metadata, self.clock, lambda t: topic_log_config(self.config, {}),
            write_isr=self.registry.set_partition_state, reload_state=self.reload_state, now_ms=now_ms,
        )
        self.admin = AdminManager(self.config, self.registry, self.metadata, on_topic=self._topic_added)
        self.apis = KafkaApis(self.config, self.replica_manager, self.metadata, self.admin, self.clock, now_ms)
        self.testcase = testcase
        self._correlation = 0

    def create_topic(self, name: str, partitions: int = 1, replicas: list[int] = [0]) -> TopicMetadata:
        return self.testcase.successResultOf(defer.ensureDeferred(
            self.admin.create_topic(name, partitions, len(replicas), {p: list(replicas) for p in range(partitions)},
                                    {})))

    def reload_state(self, topic: str, partition: int) -> None:
        """What the broker does after a failed ISR write: re-read the state and apply it."""
        self.apply_state(topic, partition)

    def apply_state(self, topic: str, partition: int) -> None:
        """Apply the partition's state znode, as the broker's watch does."""
        state = self.testcase.successResultOf(self.registry.get_partition_state(topic, partition))
        self.metadata.set_partition_state(topic, partition, state)
        replicas = self.metadata.topics[topic].partitions[partition]
        self.replica_manager.apply_state(topic, partition, replicas, state)

    def write_state(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: list[int]) -> None:
        """Write a partition's state as the controller does, and apply it."""
        self.testcase.successResultOf(self.registry.set_partition_state(topic, partition, leader, leader_epoch, isr))
        self.apply_state(topic, partition)

    def _topic_added(self, meta: TopicMetadata) -> None:
        """What the broker does for a topic it created: follow its partition states."""
        for partition, replicas in meta.partitions.items():
            state = self.metadata.partition_states.get((meta.name, partition))
            self.replica_manager.apply_state(meta.name, partition, replicas, state)

    def request(self, api_key: int, version: int, body: dict) -> object:
        """Serve one request; returns what the handler returned."""
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, "test", body)
        return self.apis.handle(parse_request_header(frame), frame)

    def call(self, api_key: int, version: int, body: dict) -> object:
        """Serve one request and decode its (immediate or fired) response."""
        result = self.request(api_key, version, body)
        if isinstance(result, defer.Deferred):
            result = self.testcase.successResultOf(result)
        return self.decode(api_key, version, result)

    def decode(self, api_key: int, version: int, result: object) -> object:
        if isinstance(result, tuple):
            chunks, total = result
            data = b"".join(c if isinstance(c, bytes) else os.pread(c.fileno, c.length, c.position) for c in chunks)
            assert len(data) == total
            result = data
        correlation_id, response = decode_response(api_key, version, result)
        return response

    def produce(self, topic: str, partition: int, records: bytes, acks: int = 1, version: int = 9) -> object:
        body = {"acks": acks, "timeout": 1000,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}
        result = self.request(0, version, body)
        if acks == 0:
            return result
        return self.decode(0, version, result).responses[0].partition_responses[0]

    def fetch_request(self, topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1,
                      max_bytes: int = 1 << 20, version: int = 12, replica_id: int = -1,
                      current_leader_epoch: int = -1) -> dict:
        return {"replica_id": replica_id, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                            "partition_max_bytes": max_bytes,
                                                            "current_leader_epoch": current_leader_epoch,
                                                            "log_start_offset": -1}]}],
                "forgotten_topics_data": [], "rack_id": ""}

    def fetch(self, topic: str, partition: int, offset: int, **kwargs: Any) -> Any:
        version = kwargs.get("version", 12)
        response = self.call(1, version, self.fetch_request(topic, partition, offset, **kwargs))
        return response.responses[0].partitions[0]


class ApiVersionsTests(unittest.TestCase):
    def test_advertises_exactly_the_served_versions(self) -> None:
        h = BrokerHarness(self)
        for version in (0, 3):
            response = h.call(18, version, {"client_software_name": "t", "client_software_version": "1"})
            self.assertEqual(response.error_code, ErrorCode.none)
            advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            self.assertEqual(advertised, ADVERTISED_VERSIONS)
            self.assertEqual(advertised[0], (0, SUPPORTED_VERSIONS[0][1]))  # librdkafka#4956
            self.assertEqual({k: v for k, v in advertised.items() if k != 0},
                             {k: v for k, v in SUPPORTED_VERSIONS.items() if k != 0})

    def test_produce_v2_is_refused_although_v0_is_advertised(self) -> None:
        h = BrokerHarness(self)
        connection, transport = ConnectionTests.connect(self, h)
        connection.dataReceived(_frame(struct.pack(">hhih", 0, 2, 1, -1) + b"\x00" * 12))
        self.assertTrue(transport.disconnecting)

    def test_find_coordinator_answers_group_keys(self) -> None:
        from kafkatw.broker.group_coordinator import coordinator_for

        h = BrokerHarness(self)
        expected = {g: coordinator_for(g, [0, 1]) for g in ("g", "h")}
        for version, body in [(0, {"key": "g"}), (3, {"key": "g", "key_type": 0}),
                              (4, {"key_type": 0, "coordinator_keys": ["g", "h"]})]:
            response = h.call(10, version, body)
            if version < 4:
                self.assertEqual(response.error_code, ErrorCode.none)
                self.assertEqual(response.node_id, expected["g"])
                self.assertEqual(response.port, 9092 + expected["g"])
            else:
                self.assertEqual([c.error_code for c in response.coordinators], [ErrorCode.none] * 2)
                self.assertEqual([c.node_id for c in response.coordinators], [expected["g"], expected["h"]])
        response = h.call(10, 3, {"key": "g", "key_type": 2})
        self.assertEqual(response.error_code, ErrorCode.invalid_request)

    def test_unsupported_api_versions_version_answers_v0_with_error(self) -> None:
        """KIP-511: an ApiVersions version the broker lacks gets a v0 response with UNSUPPORTED_VERSION."""
        h = BrokerHarness(self)
        frame = struct.pack(">hhih", 18, 99, 7, 1) + b"x"
        result = h.apis.handle(parse_request_header(frame), frame)
        correlation_id, response = decode_response(18, 0, result)
        self.assertEqual(correlation_id, 7)
        self.assertEqual(response.error_code, ErrorCode.unsupported_version)
        self.assertIn(0, [k.api_key for k in response.api_keys])

    def test_api_versions_v3_body_has_no_tagged_fields(self) -> None:
        """Debian's kcat (librdkafka 2.0) misparses tagged fields in the ApiVersions v3 body."""
        h = BrokerHarness(self)
        result = h.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        self.assertEqual(result[-5:], b"\x00\x00\x00\x00\x00")  # throttle 0, empty top-level tagged fields


class ProduceFetchTests(unittest.TestCase):
    def setUp(self) -> None:
        self.h = BrokerHarness(self)
        self.h.create_topic("t", 2)

    def test_produce_assigns_consecutive_offsets(self) -> None:
        first = self.h.produce("t", 0, build_batch([(b"k", b"v1"), (None, b"v2")]))
        second = self.h.produce("t", 0, build_batch([(b"k", b"v3")]))
        self.assertEqual((first.error_code, first.base_offset), (ErrorCode.none, 0))
        self.assertEqual((second.error_code, second.base_offset), (ErrorCode.none, 2))

    def test_fetch_returns_the_batches_with_assigned_offsets(self) -> None:
        from kafka.record.default_records import DefaultRecordBatch

        self.h.produce("t", 1, build_batch([(b"a", b"1")]))
        self.h.produce("t", 1, build_batch([(b"b", b"2"), (b"c", b"3")]))
        p = self.h.fetch("t", 1, 0)
        self.assertEqual(p.error_code, ErrorCode.none)
        self.assertEqual(p.high_watermark, 3)
        first = DefaultRecordBatch(p.records[: 12 + struct.unpack_from(">i", p.records, 8)[0]])
        self.assertTrue(first.validate_crc())
        self.assertEqual([(r.offset, r.key, r.value) for r in first], [(0, b"a", b"1")])

    def test_old_fetch_versions(self) -> None:
        self.h.produce("t", 0, build_batch([(b"a", b"1")]))
        for version in range(4, 13):
            p = self.h.fetch("t", 0, 0, version=version)
            self.assertEqual((p.error_code, p.high_watermark), (ErrorCode.none, 1), version)
            self.assertTrue(p.records)

    def test_acks_zero_has_no_response(self) -> None:
        self.assertIsNone(self.h.produce("t", 0, build_batch([(b"k", b"v")]), acks=0))
        self.assertEqual(self.h.log_manager.get("t", 0).log_end_offset, 1)

    def test_corrupt_batch_is_rejected_and_nothing_appended(self) -> None:
        batch = bytearray(build_batch([(b"k", b"v")]))
        batch[-1] ^= 0xFF
        p = self.h.produce("t", 0, bytes(batch))
        self.assertEqual(p.error_code, ErrorCode.corrupt_message)
        self.assertEqual(self.h.log_manager.get("t", 0).log_end_offset, 0)

    def test_unknown_topic(self) -> None:
        p = self.h.produce("nope", 0, build_batch([(b"k", b"v")]))
        self.assertEqual(p.error_code, ErrorCode.unknown_topic_or_partition)
        self.assertEqual(self.h.fetch("nope", 0, 0).error_code, ErrorCode.unknown_topic_or_partition)
        self.assertEqual(self.h.fetch("t", 7, 0).error_code, ErrorCode.unknown_topic_or_partition)

    def test_offsets_out_of_range(self) -> None:
        self.h.produce("t", 0, build_batch([(b"k", b"v")]))
        self.assertEqual(self.h.fetch("t", 0, 5).error_code, ErrorCode.offset_out_of_range)
        self.assertEqual(self.h.fetch("t", 0, -1).error_code, ErrorCode.offset_out_of_range)
        at_end = self.h.fetch("t", 0, 1)
        self.assertEqual((at_end.error_code, at_end.records), (ErrorCode.none, b""))

    def test_not_leader(self) -> None:
        h = self.h
        h.testcase.successResultOf(defer.ensureDeferred(h.admin.create_topic("other", 1, 1, {0: [1]}, {})))
        p = h.produce("other", 0, build_batch([(b"k", b"v")]))
        self.assertEqual(p.error_code, ErrorCode.not_leader_or_follower)

    def test_fetch_max_bytes_is_honoured_at_batch_granularity(self) -> None:
        for i in range(10):
            self.h.produce("t", 0, build_batch([(b"k", b"x" * 1000)]))
        one_batch = self.h.fetch("t", 0, 0, max_bytes=1500).records
        self.assertLessEqual(len(one_batch), 1500)
        self.assertGreater(len(one_batch), 1000)
        # KIP-74: a first batch larger than max_bytes is still returned whole.
        self.assertEqual(self.h.fetch("t", 0, 0, max_bytes=10).records, one_batch)

    def test_only_the_first_partition_may_exceed_max_bytes(self) -> None:
        for p in (0, 1):
            self.h.produce("t", p, build_batch([(b"k", b"x" * 1000)]))
        request = self.h.fetch_request("t", 0, 0, max_bytes=10)
        request["topics"][0]["partitions"].append(dict(request["topics"][0]["partitions"][0], partition=1))
        response = self.h.call(1, 12, request)
        first, second = response.responses[0].partitions
        self.assertGreater(len(first.records), 1000)
        self.assertEqual((second.error_code, second.records), (ErrorCode.none, b""))

    def test_long_poll_is_woken_by_append_not_by_polling(self) -> None:
        d = self.h.request(1, 12, self.h.fetch_request("t", 0, 0, max_wait_ms=500, min_bytes=1))
        self.assertIsInstance(d, defer.Deferred)
        self.assertNoResult(d)
        self.h.produce("t", 0, build_batch([(b"k", b"woken")]))
        response = self.h.decode(1, 12, self.successResultOf(d))
        self.assertIn(b"woken", response.responses[0].partitions[0].records)
        self.assertEqual(self.h.clock.seconds(), 0)

    def test_long_poll_times_out_empty(self) -> None:
        d = self.h.request(1, 12, self.h.fetch_request("t", 0, 0, max_wait_ms=500, min_bytes=1))
        self.h.clock.advance(0.499)
        self.assertNoResult(d)
        self.h.clock.advance(0.002)
        response = self.h.decode(1, 12, self.successResultOf(d))
        self.assertEqual(response.responses[0].partitions[0].records, b"")

    def test_list_offsets(self) -> None:
        self.h.produce("t", 0, build_batch([(b"k", b"v")], timestamp_ms=1000))
        self.h.produce("t", 0, build_batch([(b"k", b"v")], timestamp_ms=2000))

        def offset(ts: int) -> tuple[int, int]:
            body = {"replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": ts,
                                                             "current_leader_epoch": -1}]}]}
            p = self.h.call(2, 6, body).topics[0].partitions[0]
            return p.error_code, p.offset

        self.assertEqual(offset(-2), (ErrorCode.none, 0))
        self.assertEqual(offset(-1), (ErrorCode.none, 2))
        self.assertEqual(offset(1500), (ErrorCode.none, 1))
        self.assertEqual(offset(3000), (ErrorCode.none, -1))
        self.assertEqual(offset(-5), (ErrorCode.invalid_request, -1))


class IdempotenceTests(unittest.TestCase):
    def test_retried_batch_is_written_once(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        init = h.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                              "producer_epoch": -1})
        self.assertEqual(init.error_code, ErrorCode.none)
        pid = init.producer_id
        batch = build_batch([(b"k", b"v")], producer_id=pid, producer_epoch=0, base_sequence=0)
        first = h.produce("t", 0, batch)
        retry = h.produce("t", 0, batch)
        self.assertEqual((first.base_offset, retry.base_offset, retry.error_code), (0, 0, ErrorCode.none))
        self.assertEqual(h.log_manager.get("t", 0).log_end_offset, 1)
        gap = h.produce("t", 0, build_batch([(b"k", b"v")], producer_id=pid, producer_epoch=0, base_sequence=5))
        self.assertEqual(gap.error_code, ErrorCode.out_of_order_sequence_number)

    def test_producer_ids_are_unique_across_brokers(self) -> None:
        a = BrokerHarness(self, broker_id=0, **{"producer.id.block.size": 3})
        b = BrokerHarness(self, broker_id=1, **{"producer.id.block.size": 3})
        b.zookeeper = FakeZooKeeperClient(a.zookeeper.server)
        self.successResultOf(b.zookeeper.start())
        b.admin.registry = Registry(b.zookeeper)
        body = {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
        ids = [h.call(22, 4, body).producer_id for _ in range(5) for h in (a, b)]
        self.assertEqual(len(set(ids)), 10)


class AdminTests(unittest.TestCase):
    def test_topic_name_rules(self) -> None:
        for bad in ("", ".", "..", "a b", "x" * 250, "ü"):
            self.assertEqual(validate_topic_name(bad), ErrorCode.invalid_topic_exception, bad)
        self.assertEqual(validate_topic_name("logs.nginx-access_1"), ErrorCode.none)

    def test_create_topics_errors(self) -> None:
        h = BrokerHarness(self)

        def create(name: str, partitions: int = 1, rf: int = 1, configs: list | None = None) -> object:
            body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                                "assignments": [], "configs": configs or []}],
                    "timeout": 1000, "validate_only": False}
            return h.call(19, 7, body).topics[0]

        ok = create("good", 3, configs=[{"name": "retention.ms", "value": "1000"}])
        self.assertEqual((ok.error_code, ok.num_partitions), (ErrorCode.none, 3))
        self.assertEqual(create("good").error_code, ErrorCode.topic_already_exists)
        self.assertEqual(create("bad name").error_code, ErrorCode.invalid_topic_exception)
        self.assertEqual(create("zero", 0).error_code, ErrorCode.invalid_partitions)
        self.assertEqual(create("rf", 1, 5).error_code, ErrorCode.invalid_replication_factor)
        self.assertEqual(create("cfg", configs=[{"name": "no.such", "value": "1"}]).error_code,
                         ErrorCode.invalid_config)
        described = h.call(32, 4, {"resources": [{"resource_type": 2, "resource_name": "good",
                                                  "configuration_keys": ["retention.ms"]}],
                                   "include_synonyms": False, "include_documentation": False})
        self.assertEqual([(c.name, c.value) for c in described.results[0].configs], [("retention.ms", "1000")])

    def test_delete_topics(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("gone", 2)
        h.produce("gone", 0, build_batch([(b"k", b"v")]))
        for version in (1, 6):
            body = {"topic_names": ["gone", "never"], "topics": [{"name": "gone"}, {"name": "never"}],
                    "timeout": 1000}
            response = h.call(20, version, body)
            codes = [r.error_code for r in response.responses]
            if version == 1:
                self.assertEqual(codes, [ErrorCode.none, ErrorCode.unknown_topic_or_partition])
                # the registry no longer has it; the watch (here: by hand) drops the logs
                self.assertEqual(self.successResultOf(h.registry.list_topics()), [])
                h.metadata.remove_topic("gone")
                h.replica_manager.remove_partition("gone", 0)
                self.assertIsNone(h.log_manager.get("gone", 0))
            else:
                self.assertEqual(codes, [ErrorCode.unknown_topic_or_partition] * 2)

    def test_delete_disabled(self) -> None:
        h = BrokerHarness(self, **{"delete.topic.enable": "false"})
        h.create_topic("kept")
        response = h.call(20, 6, {"topics": [{"name": "kept"}], "timeout": 1000})
        self.assertEqual(response.responses[0].error_code, ErrorCode.topic_deletion_disabled)
        self.assertIn("kept", h.metadata.topics)

    def test_metadata_auto_creates(self) -> None:
        """
        As Kafka's KafkaApis.createTopic: the request that creates the topic
        is answered LEADER_NOT_AVAILABLE with no partitions; the next one
        names the leaders.
        """
        h = BrokerHarness(self, **{"num.partitions": 3})
        body = {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False}
        topic = h.call(3, 12, body).topics[0]
        self.assertEqual((topic.error_code, topic.partitions), (ErrorCode.leader_not_available, ()))
        self.assertIn("auto", h.metadata.topics)
        topic = h.call(3, 12, body).topics[0]
        self.assertEqual((topic.error_code, len(topic.partitions)), (ErrorCode.none, 3))
        self.assertEqual({p.leader_id for p in topic.partitions}, {0, 1})

    def test_metadata_names_no_leader_that_does_not_serve_yet(self) -> None:
        """
        The topic is known (its /brokers/topics watch fired) before its
        partition states are; then this broker's state znode names it leader
        before its replica leads.  Neither is a leader a client may go to:
        ListOffsets there would answer NOT_LEADER_OR_FOLLOWER.
        """
        h = BrokerHarness(self)
        meta = TopicMetadata("early", uuid.uuid4(), {0: [0], 1: [1]})
        h.metadata.set_topic(meta)
        h._topic_added(meta)  # hosts partition 0, no state yet
        body = {"topics": [{"name": "early"}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}

        def answer() -> list:
            topic = h.call(3, 12, body).topics[0]
            return [topic.error_code] + [(p.partition_index, p.error_code, p.leader_id) for p in topic.partitions]

        self.assertEqual(answer(), [ErrorCode.leader_not_available])
        for partition, leader in ((0, 0), (1, 1)):
            self.successResultOf(h.registry.set_partition_state("early", partition, leader, 0, [leader]))
            state = self.successResultOf(h.registry.get_partition_state("early", partition))
            h.metadata.set_partition_state("early", partition, state)  # the metadata cache, not the replica yet
        self.assertEqual(answer(), [ErrorCode.none, (0, ErrorCode.leader_not_available, -1), (1, ErrorCode.none, 1)])
        list_offsets = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "early", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
        self.assertEqual(h.call(2, 7, list_offsets).topics[0].partitions[0].error_code,
                         ErrorCode.not_leader_or_follower)
        h.apply_state("early", 0)  # the replica leads now
        self.assertEqual(answer(), [ErrorCode.none, (0, ErrorCode.none, 0), (1, ErrorCode.none, 1)])
        self.assertEqual(h.call(2, 7, list_offsets).topics[0].partitions[0].error_code, ErrorCode.none)
        # a new leader epoch written for this broker, not applied yet: not served as leader at that epoch
        self.successResultOf(h.registry.set_partition_state("early", 0, 0, 1, [0]))
        h.metadata.set_partition_state("early", 0, self.successResultOf(h.registry.get_partition_state("early", 0)))
        self.assertEqual(answer()[1], (0, ErrorCode.leader_not_available, -1))

    def test_metadata_without_auto_create(self) -> None:
        h = BrokerHarness(self, **{"auto.create.topics.enable": "false"})
        response = h.call(3, 12, {"topics": [{"name": "absent"}], "allow_auto_topic_creation": True,
                                  "include_topic_authorized_operations": False})
        self.assertEqual(response.topics[0].error_code, ErrorCode.unknown_topic_or_partition)
        self.assertNotIn("absent", h.metadata.topics)


class ConnectionTests(unittest.TestCase):
    """Framing and bad input on one connection."""

    def connect(self, h: BrokerHarness) -> tuple[KafkaConnection, StringTransport]:
        connection = KafkaConnection(h.apis, h.config["socket.request.max.bytes"])
        transport = StringTransport()
        connection.makeConnection(transport)
        return connection, transport

    def responses(self, transport: StringTransport) -> list[tuple[int, bytes]]:
        data = transport.value()
        out = []
        while data:
            (size,) = struct.unpack_from(">i", data)
            frame = data[4 : 4 + size]
            out.append((struct.unpack_from(">i", frame)[0], frame))
            data = data[4 + size :]
        return out

    def test_pipelined_requests_answered_in_order(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport = self.connect(h)
        slow = encode_request(1, 12, 1, "c", h.fetch_request("t", 0, 0, max_wait_ms=100, min_bytes=1))
        fast = encode_request(18, 3, 2, "c", {"client_software_name": "t", "client_software_version": "1"})
        connection.dataReceived(_frame(slow) + _frame(fast)[:7])
        connection.dataReceived(_frame(fast)[7:])
        self.assertEqual(transport.value(), b"")  # the ApiVersions answer waits behind the fetch
        h.clock.advance(0.2)
        while transport.producer is not None:
            transport.producer.resumeProducing()
        self.assertEqual([cid for cid, _ in self.responses(transport)], [1, 2])

    def test_oversized_frame_closes_connection(self) -> None:
        h = BrokerHarness(self, **{"socket.request.max.bytes": 1000})
        connection, transport = self.connect(h)
        connection.dataReceived(struct.pack(">i", 1001))
        self.assertTrue(transport.disconnecting)

    def test_negative_length_closes_connection(self) -> None:
        h = BrokerHarness(self)
        connection, transport = self.connect(h)
        connection.dataReceived(struct.pack(">i", -5))
        self.assertTrue(transport.disconnecting)

    def test_truncated_header_closes_connection(self) -> None:
        h = BrokerHarness(self)
        connection, transport = self.connect(h)
        connection.dataReceived(_frame(b"\x00\x03\x00"))
        self.assertTrue(transport.disconnecting)

    def test_unknown_api_key_closes_connection(self) -> None:
        h = BrokerHarness(self)
        connection, transport = self.connect(h)
        connection.dataReceived(_frame(struct.pack(">hhih", 999, 0, 1, -1)))
        self.assertTrue(transport.disconnecting)

    def test_unsupported_version_closes_connection(self) -> None:
        h = BrokerHarness(self)
        connection, transport = self.connect(h)
        connection.dataReceived(_frame(struct.pack(">hhih", 3, 13, 1, -1) + b"\x00\x00\x00"))
        self.assertTrue(transport.disconnecting)

    def test_garbage_body_closes_connection_and_others_keep_working(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        bad, bad_transport = self.connect(h)
        good, good_transport = self.connect(h)
        bad.dataReceived(_frame(struct.pack(">hhih", 0, 9, 1, -1) + b"\x00\xff\xff\xff\xff\xff"))
        self.assertTrue(bad_transport.disconnecting)
        request = encode_request(0, 9, 5, "c", {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")])}]}]})
        good.dataReceived(_frame(request))
        self.assertFalse(good_transport.disconnecting)
        [(cid, frame)] = self.responses(good_transport)
        _, response = decode_response(0, 9, frame)
        self.assertEqual(response.responses[0].partition_responses[0].error_code, ErrorCode.none)


class ProduceRunTests(unittest.TestCase):
    """
    Produce requests read together (one C{dataReceived}) are appended with one
    write per partition (L{kafkatw.broker.apis.ProduceRun}) and answered in
    order once their batches are in the file.
    """

    def connect(self, h: BrokerHarness) -> tuple[KafkaConnection, StringTransport]:
        return ConnectionTests.connect(self, h)  # type: ignore[arg-type]

    def responses(self, transport: StringTransport) -> list[tuple[int, Any]]:
        return [(cid, decode_response(0, 9, frame)[1])
                for cid, frame in ConnectionTests.responses(self, transport)]  # type: ignore[arg-type]

    def produce_frame(self, correlation_id: int, records: bytes, acks: int = 1, partition: int = 0,
                      topic: str = "t") -> bytes:
        return _frame(encode_request(0, 9, correlation_id, "c", {"acks": acks, "timeout": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}))

    def batches(self, n: int) -> list[bytes]:
        return [build_batch([(None, b"v%d" % i)] * (1 + i % 3), timestamp_ms=1_700_000_000_000 + i // 4)
                for i in range(n)]

    def log_bytes(self, h: BrokerHarness, partition: int = 0) -> list[tuple[int, bytes]]:
        log = h.log_manager.get("t", partition)
        out = []
        for segment in log.segments:
            with open(segment.path, "rb") as f:
                out.append((segment.base_offset, f.read()))
        return out

    def test_many_requests_in_one_chunk(self) -> None:
        """Offsets, responses and the bytes on disk are those of the requests sent one by one."""
        batches = self.batches(40)
        together, one_by_one = BrokerHarness(self), BrokerHarness(self)
        for h in (together, one_by_one):
            h.create_topic("t")
        frames = [self.produce_frame(i, b) for i, b in enumerate(batches)]
        connection, transport = self.connect(together)
        connection.dataReceived(b"".join(frames))
        other, other_transport = self.connect(one_by_one)
        for frame in frames:
            other.stringReceived(frame[4:])  # one request at a time, without a ProduceRun
        got = self.responses(transport)
        self.assertEqual(got, self.responses(other_transport))
        self.assertEqual([cid for cid, _ in got], list(range(40)))
        offsets = [r.responses[0].partition_responses[0].base_offset for _, r in got]
        self.assertEqual(offsets, [sum(1 + i % 3 for i in range(k)) for k in range(40)])
        self.assertEqual(self.log_bytes(together), self.log_bytes(one_by_one))
        log = together.log_manager.get("t", 0)
        self.assertEqual(log.high_watermark, log.log_end_offset)
        self.assertFalse(log.has_pending)

    def test_simple_and_other_requests_mixed(self) -> None:
        """
        Hand-decoded one-partition requests (acks 0 and 1, v3-v9) between
        kio-decoded ones (acks=all, two partitions, null records, a corrupt
        batch, an unknown partition) in one chunk: responses, counters and
        files as one by one.
        """
        batches = self.batches(40)
        together, one_by_one = BrokerHarness(self), BrokerHarness(self)
        for h in (together, one_by_one):
            h.create_topic("t", partitions=2)
        corrupt = bytearray(batches[5])
        corrupt[-1] ^= 1
        frames = []
        for i, b in enumerate(batches):
            version = 3 + i % 7
            if i % 9 == 4:
                body: dict = {"acks": -1, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": [
                    {"index": 0, "records": b}]}]}
            elif i % 9 == 7:
                body = {"acks": 1, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": [
                    {"index": 0, "records": b}, {"index": 1, "records": b}]}]}
            else:
                records = bytes(corrupt) if i == 5 else None if i == 11 else b
                body = {"acks": i % 2, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": [
                    {"index": 2 if i == 14 else i % 3 % 2, "records": records}]}]}
            frames.append(_frame(encode_request(0, version, i, "c", body)))
        connection, transport = self.connect(together)
        connection.dataReceived(b"".join(frames))
        other, other_transport = self.connect(one_by_one)
        for frame in frames:
            other.stringReceived(frame[4:])  # one request at a time, without a ProduceRun
        self.assertEqual(transport.value(), other_transport.value())
        self.assertTrue(transport.value())
        for partition in (0, 1):
            self.assertEqual(self.log_bytes(together, partition), self.log_bytes(one_by_one, partition))
        for name in ("request_counts", "messages_in", "bytes_in", "topic_messages_in", "topic_bytes_in",
                     "failed_produce_requests"):
            self.assertEqual(getattr(together.apis, name), getattr(one_by_one.apis, name), name)
        self.assertEqual(together.apis.failed_produce_requests, 3)

    def test_a_lone_produce_request_is_a_run(self) -> None:
        """One Produce request read alone takes the run's path too (the hand decode): the same answer."""
        h, reference = BrokerHarness(self), BrokerHarness(self)
        for harness in (h, reference):
            harness.create_topic("t")
        connection, transport = self.connect(h)
        other, other_transport = self.connect(reference)
        calls = []
        produce_in_run = h.apis.produce_in_run
        h.apis.produce_in_run = lambda *a: calls.append(1) or produce_in_run(*a)  # type: ignore[method-assign]
        for i, b in enumerate(self.batches(3)):
            frame = self.produce_frame(i, b)
            connection.dataReceived(frame)
            other.stringReceived(frame[4:])
        self.assertEqual(len(calls), 3)
        self.assertEqual(transport.value(), other_transport.value())
        self.assertEqual(self.log_bytes(h), self.log_bytes(reference))

    def test_roll_in_the_middle(self) -> None:
        batches = self.batches(30)
        segment_bytes = sum(len(b) for b in batches[:7])
        together = BrokerHarness(self, **{"log.segment.bytes": segment_bytes})
        one_by_one = BrokerHarness(self, **{"log.segment.bytes": segment_bytes})
        for h in (together, one_by_one):
            h.create_topic("t")
        frames = [self.produce_frame(i, b, acks=0) for i, b in enumerate(batches)]
        self.connect(together)[0].dataReceived(b"".join(frames))
        other = self.connect(one_by_one)[0]
        for frame in frames:
            other.stringReceived(frame[4:])  # one request at a time, without a ProduceRun
        written = self.log_bytes(together)
        self.assertGreater(len(written), 3)
        self.assertEqual(written, self.log_bytes(one_by_one))
        log = together.log_manager.get("t", 0)
        self.assertEqual((log.log_end_offset, log.high_watermark), (sum(1 + i % 3 for i in range(30)),) * 2)

    def test_fetch_in_the_same_chunk_sees_the_records(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport = self.connect(h)
        fetch = _frame(encode_request(1, 12, 99, "c", h.fetch_request("t", 0, 0)))
        batches = self.batches(5)
        connection.dataReceived(b"".join(self.produce_frame(i, b, acks=0) for i, b in enumerate(batches)) + fetch)
        while transport.producer is not None:
            transport.producer.resumeProducing()
        [(cid, frame)] = ConnectionTests.responses(self, transport)  # type: ignore[arg-type]
        self.assertEqual(cid, 99)
        p = h.decode(1, 12, frame).responses[0].partitions[0]
        self.assertEqual(p.high_watermark, 9)
        self.assertEqual([h.base_offset for h in parse_batch_headers(p.records)], [0, 1, 3, 6, 7])

    def test_acks1_answers_only_once_the_batches_are_in_the_file(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport = self.connect(h)
        log = h.log_manager.get("t", 0)
        seen = []
        write = transport.write

        def checking_write(data: bytes) -> None:
            seen.append((os.path.getsize(log.active_segment.path), log.log_end_offset, log.high_watermark))
            write(data)

        transport.write = checking_write  # type: ignore[method-assign]
        batches = self.batches(6)
        connection.dataReceived(b"".join(self.produce_frame(i, b) for i, b in enumerate(batches)))
        self.assertEqual(len(self.responses(transport)), 6)
        self.assertTrue(seen)
        for file_size, leo, hw in seen:
            self.assertEqual((file_size, hw), (sum(len(b) for b in batches), leo))

    def test_waiting_consumer_fetch_woken_after_the_write(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        consumer, consumer_transport = self.connect(h)
        consumer.dataReceived(_frame(encode_request(1, 12, 7, "c",
                                                    h.fetch_request("t", 0, 0, max_wait_ms=5000, min_bytes=1))))
        self.assertEqual(consumer_transport.value(), b"")
        producer, _ = self.connect(h)
        producer.dataReceived(b"".join(self.produce_frame(i, b, acks=0) for i, b in enumerate(self.batches(3))))
        while consumer_transport.producer is not None:
            consumer_transport.producer.resumeProducing()
        [(cid, frame)] = ConnectionTests.responses(self, consumer_transport)  # type: ignore[arg-type]
        p = h.decode(1, 12, frame).responses[0].partitions[0]
        self.assertEqual((cid, p.high_watermark, len(parse_batch_headers(p.records))), (7, 6, 3))

    def test_errors_are_per_request(self) -> None:
        """A corrupt batch and an unknown partition in a run: those requests fail, the others append."""
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport = self.connect(h)
        corrupt = bytearray(build_batch([(None, b"x")]))
        corrupt[-1] ^= 1
        frames = [self.produce_frame(0, build_batch([(None, b"a")])), self.produce_frame(1, bytes(corrupt)),
                  self.produce_frame(2, build_batch([(None, b"b")]), partition=5),
                  self.produce_frame(3, build_batch([(None, b"c")]))]
        connection.dataReceived(b"".join(frames))
        codes = [(r.responses[0].partition_responses[0].error_code, r.responses[0].partition_responses[0].base_offset)
                 for _, r in self.responses(transport)]
        self.assertEqual(codes, [(ErrorCode.none, 0), (ErrorCode.corrupt_message, -1),
                                 (ErrorCode.unknown_topic_or_partition, -1), (ErrorCode.none, 1)])

    def test_a_failed_write_fails_the_requests_it_lost(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport = self.connect(h)
        connection.dataReceived(self.produce_frame(0, build_batch([(None, b"a")])))  # written alone
        log = h.log_manager.get("t", 0)

        def failing_writev(fd: int, buffers: Any) -> int:
            raise OSError(28, "No space left on device")

        self.patch(h.log_manager.files[h.directory], "writev", failing_writev)  # the log dir's file operations
        connection.dataReceived(b"".join(self.produce_frame(i, b) for i, b in enumerate(self.batches(3), 1)))
        codes = [r.responses[0].partition_responses[0].error_code for _, r in self.responses(transport)]
        self.assertEqual(codes, [ErrorCode.none] + [ErrorCode.kafka_storage_error] * 3)
        self.assertEqual((log.log_end_offset, log.high_watermark), (1, 1))
        # the log dir is offline now (KIP-112: tests/unit/test_log_dir_failure.py)
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.directory])

    def test_idempotent_sequences_within_a_run(self) -> None:
        """Each request is checked against the ones before it in the run: next sequences, a retry, a gap."""
        h = BrokerHarness(self)
        h.create_topic("t")
        pid = h.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                             "producer_epoch": -1}).producer_id

        def batch(sequence: int) -> bytes:
            return build_batch([(None, b"v")] * 2, producer_id=pid, producer_epoch=0, base_sequence=sequence)

        connection, transport = self.connect(h)
        connection.dataReceived(b"".join(self.produce_frame(i, batch(seq)) for i, seq in enumerate([0, 2, 2, 4, 9])))
        got = [(r.responses[0].partition_responses[0].error_code, r.responses[0].partition_responses[0].base_offset)
               for _, r in self.responses(transport)]
        self.assertEqual(got, [(ErrorCode.none, 0), (ErrorCode.none, 2), (ErrorCode.none, 2), (ErrorCode.none, 4),
                               (ErrorCode.out_of_order_sequence_number, -1)])
        self.assertEqual(h.log_manager.get("t", 0).log_end_offset, 6)

    def test_acks_all_in_a_run(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport = self.connect(h)
        connection.dataReceived(b"".join(self.produce_frame(i, b, acks=-1) for i, b in enumerate(self.batches(3))))
        got = [(cid, r.responses[0].partition_responses[0].base_offset) for cid, r in self.responses(transport)]
        self.assertEqual(got, [(0, 0), (1, 1), (2, 3)])
        self.assertFalse(h.apis.in_flight)

    def test_malformed_frame_ends_the_run(self) -> None:
        """The requests before it are answered; then the connection closes."""
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport = self.connect(h)
        bad = _frame(struct.pack(">hhih", 0, 9, 9, -1) + b"\x00\xff\xff\xff\xff\xff")
        connection.dataReceived(self.produce_frame(0, build_batch([(None, b"a")])) + bad
                                + self.produce_frame(2, build_batch([(None, b"b")])))
        self.assertEqual([cid for cid, _ in self.responses(transport)], [0])
        self.assertTrue(transport.disconnecting)
        self.assertEqual(h.log_manager.get("t", 0).log_end_offset, 1)


class HeldResponsesTests(unittest.TestCase):
    """
    Responses of bytes that complete while a read is handled are written
    together when it ends (L{kafkatw.broker.network._Cork}): one write for
    the answers to pipelined requests read together, as Twisted's buffering
    to the end of the reactor's turn gave before responses were written at
    once; a response completed outside any read is written at once.
    """

    def connect(self, h: BrokerHarness) -> tuple[KafkaConnection, StringTransport, list[tuple[bytes, int]]]:
        """A connection whose transport records each write with the number of reads being handled then."""
        from kafkatw.broker import network

        connection, transport = ConnectionTests.connect(self, h)  # type: ignore[arg-type]
        writes: list[tuple[bytes, int]] = []
        write = transport.write

        def recorded(data: bytes) -> None:
            writes.append((data, network._CORK.depth))
            write(data)

        transport.write = recorded  # type: ignore[method-assign]
        return connection, transport, writes

    def produce_frame(self, correlation_id: int, acks: int = 1) -> bytes:
        return ProduceRunTests.produce_frame(self, correlation_id, build_batch([(None, b"v")]), acks)  # type: ignore[arg-type]

    def pump(self, transport: StringTransport) -> None:
        """Let the connection's response writer (a pull producer) write its file regions, as a socket's room would."""
        for _ in range(100):
            if transport.producer is None:
                return
            transport.producer.resumeProducing()
        self.fail("the response writer never finished")

    def test_answers_to_requests_read_together_in_one_write(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport, writes = self.connect(h)
        api_versions = _frame(encode_request(18, 3, 3, "c", {"client_software_name": "t",
                                                                "client_software_version": "1"}))
        connection.dataReceived(b"".join(self.produce_frame(i) for i in range(3)) + api_versions)
        self.assertEqual([depth for _, depth in writes], [0])  # one write, after the read
        self.assertEqual([cid for cid, _ in ConnectionTests.responses(self, transport)],  # type: ignore[arg-type]
                         [0, 1, 2, 3])
        self.assertTrue(connection.idle)

    def test_an_answer_outside_a_read_is_written_at_once(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        connection, transport, writes = self.connect(h)
        connection.stringReceived(self.produce_frame(0)[4:])
        self.assertEqual(len(writes), 1)
        connection.stringReceived(self.produce_frame(1)[4:])
        self.assertEqual(len(writes), 2)

    def test_a_produce_answered_by_a_followers_fetch(self) -> None:
        """
        An acks=all produce completed by the follower's fetch (another
        connection's read) is written when that read ends; the fetch's own
        response (file regions) goes out during it.
        """
        h = BrokerHarness(self, **{"replica.lag.time.max.ms": 100})
        h.create_topic("t", 1, replicas=[0, 1])
        producer, producer_transport, produced = self.connect(h)
        follower, follower_transport, _ = self.connect(h)
        producer.dataReceived(self.produce_frame(7, acks=-1))
        self.assertEqual(produced, [])
        fetch = h.fetch_request("t", 0, 1, replica_id=1)
        follower.dataReceived(_frame(encode_request(1, 12, 9, "f", fetch)))
        self.assertEqual([depth for _, depth in produced], [0])
        self.pump(follower_transport)
        self.assertEqual([cid for cid, _ in ConnectionTests.responses(self, producer_transport)],  # type: ignore[arg-type]
                         [7])
        self.assertEqual([cid for cid, _ in ConnectionTests.responses(self, follower_transport)],  # type: ignore[arg-type]
                         [9])

    def test_a_fetch_response_after_held_answers(self) -> None:
        """Answers held back go first, in the same write as the fetch response that follows them."""
        h = BrokerHarness(self)
        h.create_topic("t")
        h.request(0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_batch([(None, b"old")])}]}]})
        connection, transport, _ = self.connect(h)
        fetch = _frame(encode_request(1, 12, 2, "c", h.fetch_request("t", 0, 0)))
        connection.dataReceived(self.produce_frame(0) + self.produce_frame(1) + fetch + self.produce_frame(3))
        self.pump(transport)
        got = ConnectionTests.responses(self, transport)  # type: ignore[arg-type]
        self.assertEqual([cid for cid, _ in got], [0, 1, 2, 3])
        records = decode_response(1, 12, got[2][1])[1].responses[0].partitions[0].records
        self.assertEqual([b.base_offset for b in parse_batch_headers(records)], [0, 1, 2])


class ReplicationApisTests(unittest.TestCase):
    """
    acks=all, the purgatories and the leader-epoch checks through KafkaApis:
    broker 0 leads C{t-0} assigned [0, 1]; broker 1's fetches are raw Fetch
    requests with C{replica_id} 1.
    """

    def harness(self, **overrides: object) -> BrokerHarness:
        h = BrokerHarness(self, **{"replica.lag.time.max.ms": 100, **overrides})
        h.create_topic("t", 1, replicas=[0, 1])
        self.assertEqual(h.metadata.isr("t", 0), [0, 1])
        return h

    def produce_all(self, h: BrokerHarness, n: int = 1, timeout_ms: int = 5000) -> Any:
        body = {"acks": -1, "timeout": timeout_ms, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_batch([(None, b"v")] * n)}]}]}
        return h.request(0, 9, body)

    def produced(self, h: BrokerHarness, result: Any) -> Any:
        if isinstance(result, defer.Deferred):
            result = self.successResultOf(result)
        return h.decode(0, 9, result).responses[0].partition_responses[0]

    def follower_fetch(self, h: BrokerHarness, offset: int, **kwargs: Any) -> Any:
        return h.fetch("t", 0, offset, replica_id=1, **kwargs)

    def test_acks_all_waits_until_the_follower_has_fetched_the_batch(self) -> None:
        h = self.harness()
        waiting = self.produce_all(h, 2)
        self.assertIsInstance(waiting, defer.Deferred)
        self.assertNoResult(waiting)
        self.assertEqual(h.replica_manager.produce_purgatory_size, 1)
        p = self.follower_fetch(h, 0)  # fetches the batch; the leader learns nothing new yet
        self.assertEqual((p.error_code, p.high_watermark), (ErrorCode.none, 0))
        self.assertTrue(p.records)
        self.assertNoResult(waiting)
        self.assertFalse(h.fetch("t", 0, 0).records)  # consumers read below the high watermark only
        p = self.follower_fetch(h, 2)  # it holds both records: the high watermark moves
        self.assertEqual(p.high_watermark, 2)
        answer = self.produced(h, waiting)
        self.assertEqual((answer.error_code, answer.base_offset), (ErrorCode.none, 0))
        self.assertEqual(h.replica_manager.produce_purgatory_size, 0)
        self.assertTrue(h.fetch("t", 0, 0).records)

    def test_a_high_watermark_answers_only_the_produces_it_covers(self) -> None:
        """
        Of several waiting produces, a follower's fetch answers those below
        the new high watermark; the others wait for theirs (and still fail at
        once when the ISR shrinks below min.insync.replicas meanwhile).
        """
        h = self.harness(**{"min.insync.replicas": 2})
        first, second, third = (self.produce_all(h) for _ in range(3))
        self.assertEqual(h.replica_manager.produce_purgatory_size, 3)
        self.follower_fetch(h, 1)
        self.assertEqual(self.produced(h, first).error_code, ErrorCode.none)
        self.assertNoResult(second)
        self.assertNoResult(third)
        self.follower_fetch(h, 2)
        answer = self.produced(h, second)
        self.assertEqual((answer.error_code, answer.base_offset), (ErrorCode.none, 1))
        self.assertNoResult(third)
        h.clock.advance(0.101)
        h.replica_manager.shrink_isrs(100)
        self.assertEqual(self.produced(h, third).error_code, ErrorCode.not_enough_replicas_after_append)
        self.assertEqual(h.replica_manager.produce_purgatory_size, 0)

    def test_a_high_watermark_move_checks_only_the_produces_it_may_complete(self) -> None:
        """
        A follower's fetch that moves the high watermark by one append checks
        the produces it covers, not every waiting one: 20 queued produces cost
        20 checks in all, not one per produce per move (about 200).
        """
        from kafkatw.broker.replica_manager import DelayedProduce

        h = self.harness(**{"min.insync.replicas": 2})
        waiting = [self.produce_all(h) for _ in range(20)]
        checks = []
        real = DelayedProduce.check

        def counted(produce: DelayedProduce) -> None:
            checks.append(produce)
            real(produce)

        DelayedProduce.check = counted  # type: ignore[method-assign]
        self.addCleanup(setattr, DelayedProduce, "check", real)
        for offset in range(1, 21):
            self.follower_fetch(h, offset)
            self.assertEqual(self.produced(h, waiting[offset - 1]).error_code, ErrorCode.none)
        self.assertEqual(len(checks), 20)
        self.assertEqual(h.replica_manager.produce_purgatory_size, 0)

    def test_acks_one_does_not_wait(self) -> None:
        h = self.harness()
        self.assertEqual(h.produce("t", 0, build_batch([(None, b"v")])).error_code, ErrorCode.none)

    def test_acks_all_times_out(self) -> None:
        h = self.harness()
        waiting = self.produce_all(h, timeout_ms=500)
        h.clock.advance(0.499)
        self.assertNoResult(waiting)
        h.clock.advance(0.001)
        self.assertEqual(self.produced(h, waiting).error_code, ErrorCode.request_timed_out)
        self.assertEqual(h.replica_manager.partitions[("t", 0)].log_end_offset, 1)  # appended all the same

    def test_isr_below_min_insync_replicas_refuses_before_appending(self) -> None:
        h = self.harness(**{"min.insync.replicas": 2})
        h.write_state("t", 0, 0, 0, [0])
        answer = self.produced(h, self.produce_all(h))
        self.assertEqual(answer.error_code, ErrorCode.not_enough_replicas)
        self.assertEqual(h.replica_manager.partitions[("t", 0)].log_end_offset, 0)
        # acks=1 does not need the ISR
        self.assertEqual(h.produce("t", 0, build_batch([(None, b"v")])).error_code, ErrorCode.none)

    def test_isr_shrinking_below_min_insync_replicas_during_the_wait(self) -> None:
        h = self.harness(**{"min.insync.replicas": 2})
        waiting = self.produce_all(h)
        self.assertNoResult(waiting)
        h.clock.advance(0.101)
        h.replica_manager.shrink_isrs(100)  # the follower never fetched: it leaves the ISR
        self.assertEqual(self.successResultOf(h.registry.get_partition_state("t", 0)).isr, [0])
        answer = self.produced(h, waiting)
        self.assertEqual(answer.error_code, ErrorCode.not_enough_replicas_after_append)

    def test_isr_shrinking_completes_a_waiting_produce(self) -> None:
        """With min.insync.replicas=1, a follower leaving the ISR lets the leader acknowledge alone."""
        h = self.harness()
        waiting = self.produce_all(h)
        h.clock.advance(0.101)
        h.replica_manager.shrink_isrs(100)
        self.assertEqual(self.produced(h, waiting).error_code, ErrorCode.none)

    def test_consumer_fetch_is_woken_by_the_high_watermark_not_by_the_append(self) -> None:
        h = self.harness()
        waiting = h.request(1, 12, h.fetch_request("t", 0, 0, max_wait_ms=1000))
        self.assertNoResult(waiting)
        self.assertEqual(h.produce("t", 0, build_batch([(None, b"v")])).error_code, ErrorCode.none)
        self.assertNoResult(waiting)  # appended, but not below the high watermark yet
        self.follower_fetch(h, 1)
        p = h.decode(1, 12, self.successResultOf(waiting)).responses[0].partitions[0]
        self.assertEqual((p.error_code, p.high_watermark), (ErrorCode.none, 1))
        self.assertTrue(p.records)

    def test_follower_fetch_is_woken_by_an_append(self) -> None:
        h = self.harness()
        waiting = h.request(1, 12, h.fetch_request("t", 0, 0, max_wait_ms=1000, replica_id=1))
        self.assertNoResult(waiting)
        self.assertEqual(h.replica_manager.fetch_purgatory_size, 1)
        self.assertEqual(h.produce("t", 0, build_batch([(None, b"v")])).error_code, ErrorCode.none)
        p = h.decode(1, 12, self.successResultOf(waiting)).responses[0].partitions[0]
        self.assertEqual((p.error_code, p.high_watermark), (ErrorCode.none, 0))
        self.assertTrue(p.records)
        self.assertEqual(h.replica_manager.fetch_purgatory_size, 0)

    def run_all(self, h: BrokerHarness, n: int, timeout_ms: int = 5000) -> tuple[StringTransport, list]:
        """Send C{n} acks=all requests in one chunk (a ProduceRun); the requests taken by L{KafkaApis.handle}."""
        connection, transport = ConnectionTests.connect(self, h)  # type: ignore[arg-type]
        handled: list = []
        handle = h.apis.handle
        h.apis.handle = lambda header, *a, **k: handled.append(header) or handle(header, *a, **k)  # type: ignore
        frames = [_frame(encode_request(0, 9, i, "c", {"acks": -1, "timeout": timeout_ms, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_batch([(None, b"v%d" % i)])}]}]}))
            for i in range(n)]
        connection.dataReceived(b"".join(frames))
        return transport, handled

    def answers(self, transport: StringTransport) -> list[tuple[int, int, int]]:
        """(correlation id, error code, base offset) of each Produce response written."""
        out = []
        for cid, frame in ConnectionTests.responses(self, transport):  # type: ignore[arg-type]
            p = decode_response(0, 9, frame)[1].responses[0].partition_responses[0]
            out.append((cid, p.error_code, p.base_offset))
        return out

    def test_acks_all_in_a_produce_run_waits_until_the_follower_has_fetched(self) -> None:
        """acks=all requests read together take the run's hand-decoded path and wait in the purgatory."""
        h = self.harness()
        transport, handled = self.run_all(h, 3)
        self.assertEqual(handled, [])  # none went through kio's decode
        self.assertEqual(h.replica_manager.partitions[("t", 0)].log_end_offset, 3)
        self.assertEqual(h.replica_manager.produce_purgatory_size, 3)
        self.assertEqual(transport.value(), b"")
        self.follower_fetch(h, 0)
        self.assertEqual(transport.value(), b"")  # fetched, not yet acknowledged by the follower
        self.follower_fetch(h, 2)  # holds the first two: those two are answered
        self.assertEqual(self.answers(transport), [(0, ErrorCode.none, 0), (1, ErrorCode.none, 1)])
        transport.clear()
        self.follower_fetch(h, 3)
        self.assertEqual(self.answers(transport), [(2, ErrorCode.none, 2)])
        self.assertEqual(h.replica_manager.produce_purgatory_size, 0)
        self.assertEqual(h.apis.request_counts.get(0), 3)

    def test_acks_all_in_a_produce_run_times_out(self) -> None:
        h = self.harness()
        transport, _ = self.run_all(h, 2, timeout_ms=500)
        h.clock.advance(0.499)
        self.assertEqual(transport.value(), b"")
        h.clock.advance(0.001)
        self.assertEqual(self.answers(transport), [(0, ErrorCode.request_timed_out, 0),
                                                   (1, ErrorCode.request_timed_out, 1)])

    def test_acks_all_in_a_produce_run_with_the_isr_below_min_insync_replicas(self) -> None:
        """Refused before appending (NOT_ENOUGH_REPLICAS), as one by one: such a request takes L{KafkaApis.handle}."""
        h = self.harness(**{"min.insync.replicas": 2})
        h.write_state("t", 0, 0, 0, [0])
        transport, handled = self.run_all(h, 2)
        self.assertEqual(len(handled), 2)
        self.assertEqual(self.answers(transport), [(0, ErrorCode.not_enough_replicas, -1),
                                                   (1, ErrorCode.not_enough_replicas, -1)])
        self.assertEqual(h.replica_manager.partitions[("t", 0)].log_end_offset, 0)

    def test_follower_fetch_is_woken_after_a_produce_run(self) -> None:
        """Produce requests read together (ProduceRun): the follower's fetch is woken once they are written."""
        h = self.harness()
        waiting = h.request(1, 12, h.fetch_request("t", 0, 0, max_wait_ms=1000, replica_id=1))
        connection, transport = ConnectionTests.connect(self, h)  # type: ignore[arg-type]
        frames = [ProduceRunTests.produce_frame(self, i, build_batch([(None, b"v%d" % i)]))  # type: ignore[arg-type]
                  for i in range(3)]
        connection.dataReceived(b"".join(frames))
        p = h.decode(1, 12, self.successResultOf(waiting)).responses[0].partitions[0]
        self.assertEqual([b.base_offset for b in parse_batch_headers(p.records)], [0, 1, 2])
        self.assertEqual(h.replica_manager.fetch_purgatory_size, 0)
        self.assertEqual(h.log_manager.get("t", 0).high_watermark, 0)  # the follower has not fetched past 0 yet
        self.assertEqual(len(ConnectionTests.responses(self, transport)), 3)  # type: ignore[arg-type]

    def test_follower_fetch_waits_out_its_max_wait(self) -> None:
        h = self.harness()
        waiting = h.request(1, 12, h.fetch_request("t", 0, 0, max_wait_ms=500, replica_id=1))
        h.clock.advance(0.5)
        p = h.decode(1, 12, self.successResultOf(waiting)).responses[0].partitions[0]
        self.assertEqual((p.error_code, bytes(p.records or b"")), (ErrorCode.none, b""))

    def offset_for_leader_epoch(self, h: BrokerHarness, epoch: int, current: int = -1, version: int = 4) -> Any:
        body = {"replica_id": 1, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]}
        p = h.call(23, version, body).topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset

    def test_offset_for_leader_epoch(self) -> None:
        h = self.harness()
        h.produce("t", 0, build_batch([(None, b"v")] * 3))  # epoch 0: offsets 0-2
        h.write_state("t", 0, 0, 2, [0, 1])  # leader again at epoch 2, from offset 3
        h.produce("t", 0, build_batch([(None, b"v")] * 2))  # epoch 2: offsets 3-4
        for version in (2, 3, 4):
            self.assertEqual(self.offset_for_leader_epoch(h, 0, version=version), (ErrorCode.none, 0, 3))
        self.assertEqual(self.offset_for_leader_epoch(h, 1), (ErrorCode.none, 0, 3))  # KIP-279: epoch 0 answers
        self.assertEqual(self.offset_for_leader_epoch(h, 2), (ErrorCode.none, 2, 5))  # the latest: the LEO
        self.assertEqual(self.offset_for_leader_epoch(h, 3), (ErrorCode.none, -1, -1))
        self.assertEqual(self.offset_for_leader_epoch(h, 2, current=2), (ErrorCode.none, 2, 5))
        self.assertEqual(self.offset_for_leader_epoch(h, 0, current=1)[0], ErrorCode.fenced_leader_epoch)
        self.assertEqual(self.offset_for_leader_epoch(h, 0, current=3)[0], ErrorCode.unknown_leader_epoch)

    def test_offset_for_leader_epoch_on_a_follower(self) -> None:
        h = self.harness()
        h.write_state("t", 0, 1, 1, [1, 0])
        self.assertEqual(self.offset_for_leader_epoch(h, 0)[0], ErrorCode.not_leader_or_follower)

    def test_stale_current_leader_epoch_is_fenced(self) -> None:
        """KIP-320: Fetch and ListOffsets name the leader epoch they know."""
        h = self.harness()
        h.produce("t", 0, build_batch([(None, b"v")]))
        h.write_state("t", 0, 0, 2, [0])

        def list_offsets(current: int) -> int:
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "current_leader_epoch": current, "timestamp": -1}]}]}
            p = h.call(2, 4, body).topics[0].partitions[0]
            return p.error_code

        for current, code in [(-1, ErrorCode.none), (2, ErrorCode.none), (1, ErrorCode.fenced_leader_epoch),
                              (3, ErrorCode.unknown_leader_epoch)]:
            self.assertEqual(h.fetch("t", 0, 0, current_leader_epoch=current).error_code, code, current)
            self.assertEqual(self.follower_fetch(h, 0, current_leader_epoch=current).error_code, code, current)
            self.assertEqual(list_offsets(current), code, current)

    def test_a_moved_leader_fences_a_stale_epoch_before_refusing(self) -> None:
        """
        Kafka's C{Partition.getLocalLog}, for ListOffsets and
        OffsetForLeaderEpoch as for Fetch: where the leader moved away, a
        stale C{current_leader_epoch} is C{FENCED_LEADER_EPOCH}, a newer one
        C{UNKNOWN_LEADER_EPOCH}, the current one (or none)
        C{NOT_LEADER_OR_FOLLOWER}.
        """
        h = self.harness()
        h.produce("t", 0, build_batch([(None, b"v")]))
        h.write_state("t", 0, 1, 2, [1, 0])  # broker 1 leads at epoch 2

        def list_offsets(current: int) -> int:
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "current_leader_epoch": current, "timestamp": -1}]}]}
            return h.call(2, 4, body).topics[0].partitions[0].error_code

        for current, code in [(-1, ErrorCode.not_leader_or_follower), (2, ErrorCode.not_leader_or_follower),
                              (1, ErrorCode.fenced_leader_epoch), (3, ErrorCode.unknown_leader_epoch)]:
            self.assertEqual(list_offsets(current), code, current)
            if current >= 0:
                self.assertEqual(self.offset_for_leader_epoch(h, 0, current=current)[0], code, current)

    def test_metadata_returns_the_stored_leader_epoch_and_isr(self) -> None:
        h = self.harness()
        h.write_state("t", 0, 1, 4, [1])
        p = h.call(3, 12, {"topics": [{"name": "t", "topic_id": None}], "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False}).topics[0].partitions[0]
        self.assertEqual((p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes)), (1, 4, [0, 1], [1]))
        self.assertEqual(h.produce("t", 0, build_batch([(None, b"v")])).error_code, ErrorCode.not_leader_or_follower)


class DescribeClusterTests(unittest.TestCase):
    def test_brokers_cluster_id_and_controller(self) -> None:
        h = BrokerHarness(self)
        h.metadata.cluster_id = "abcdefghijklmnopqrstuv"
        h.metadata.controller_id = 1
        for version in (0, 1):
            body = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
            response = h.call(60, version, body)
            self.assertEqual(response.error_code, ErrorCode.none)
            self.assertEqual((response.cluster_id, response.controller_id), ("abcdefghijklmnopqrstuv", 1))
            self.assertEqual([(b.broker_id, b.host, b.port, b.rack) for b in response.brokers],
                             [(0, "127.0.0.1", 9092, None), (1, "127.0.0.1", 9093, None)])

    def test_no_controller(self) -> None:
        h = BrokerHarness(self)
        response = h.call(60, 0, {"include_cluster_authorized_operations": False})
        self.assertEqual(response.controller_id, -1)

    def test_controller_endpoints_are_not_served(self) -> None:
        h = BrokerHarness(self)
        response = h.call(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
        self.assertEqual(response.error_code, ErrorCode.unsupported_endpoint_type)
        self.assertEqual(list(response.brokers), [])


class IncrementalAlterConfigsTests(unittest.TestCase):
    """The brokers' dynamic replication throttles in /config/brokers/<entity> (more in test_live_config.py)."""

    def alter(self, h: BrokerHarness, resource_type: int, name: str, configs: list, validate_only: bool = False):
        body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in configs]}], "validate_only": validate_only}
        [response] = h.call(44, 1, body).responses
        return response.error_code, response.error_message

    def test_throttle_set_and_deleted(self) -> None:
        h = BrokerHarness(self)
        self.assertEqual(self.alter(h, 4, "1", [("follower.replication.throttled.rate", 0, "1000"),
                                                ("leader.replication.throttled.rate", 0, "1000")]), (0, None))
        config = self.successResultOf(h.registry.get_broker_config("1"))
        self.assertEqual(config, {"follower.replication.throttled.rate": "1000",
                                  "leader.replication.throttled.rate": "1000"})
        self.assertEqual(self.alter(h, 4, "1", [("leader.replication.throttled.rate", 1, None)]), (0, None))
        self.assertEqual(self.successResultOf(h.registry.get_broker_config("1")),
                         {"follower.replication.throttled.rate": "1000"})
        # the cluster default has the entity name ""; validate_only writes nothing
        self.assertEqual(self.alter(h, 4, "", [("follower.replication.throttled.rate", 0, "5")], True), (0, None))
        self.assertEqual(self.successResultOf(h.registry.get_broker_config("<default>")), {})

    def test_refusals(self) -> None:
        h = BrokerHarness(self)
        code, message = self.alter(h, 4, "1", [("zookeeper.connect", 0, "x:1")])
        self.assertEqual(code, ErrorCode.invalid_request)
        self.assertIn("Cannot update these configs dynamically: zookeeper.connect", message)
        self.assertEqual(self.alter(h, 4, "1", [("follower.replication.throttled.rate", 0, "-1")])[0],
                         ErrorCode.invalid_request)
        self.assertEqual(self.alter(h, 4, "x", [("follower.replication.throttled.rate", 0, "1")])[0],
                         ErrorCode.invalid_request)
        self.assertEqual(self.alter(h, 2, "t", [("retention.ms", 0, "1")])[0], ErrorCode.unknown_topic_or_partition)
        self.assertEqual(self.successResultOf(h.registry.get_broker_config("1")), {})
