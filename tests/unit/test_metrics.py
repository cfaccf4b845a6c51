"""
Unit tests of L{kafkatw.broker.metrics}: the replication metrics under the
names the Prometheus JMX exporter gives Kafka's MBeans, read from a fake
server object.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client import generate_latest
from twisted.trial import unittest

from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.broker.metrics import metrics_registry
from kafkatw.zookeeper.zk_data import PartitionState


def partition(topic: str, leader: bool, isr: list[int], replicas: list[int], shrinks: int = 0,
              expands: int = 0) -> Any:
    return SimpleNamespace(topic=topic, is_leader=leader, isr=isr, replicas=replicas,
                           under_replicated=leader and len(isr) < len(replicas), isr_shrinks=shrinks,
                           isr_expands=expands)


def fake_server(controller_active: bool = True) -> Any:
    apis = SimpleNamespace(messages_in=0, bytes_in=0, bytes_out=0, failed_produce_requests=0,
                           failed_fetch_requests=0, request_counts={}, connections=set())
    partitions = {
        ("a", 0): partition("a", True, [0, 1, 2], [0, 1, 2], shrinks=2, expands=1),
        ("a", 1): partition("a", True, [0], [0, 1, 2], shrinks=1),  # under-replicated and under min ISR
        ("b", 0): partition("b", True, [0, 1], [0, 1, 2]),  # under-replicated only
        ("b", 1): partition("b", False, [1, 0], [1, 0], expands=3),  # a follower
    }
    min_isr = {"a": 2, "b": 2}
    replica_manager = SimpleNamespace(partitions=partitions, min_insync_replicas=min_isr.__getitem__,
                                      produce_purgatory_size=4, fetch_purgatory_size=7)
    metadata = MetadataCache(0)
    metadata.set_brokers({0: BrokerEndpoint(0, "h", 1), 1: BrokerEndpoint(1, "h", 2)})
    metadata.set_topic(TopicMetadata("c", None, {0: [0, 1], 1: [2, 1], 2: [2]}))
    metadata.set_partition_state("c", 0, PartitionState(0, 0, [0, 1]))
    metadata.set_partition_state("c", 1, PartitionState(2, 0, [2]))  # broker 2 is gone
    controller = SimpleNamespace(active=controller_active, metadata=metadata)  # c-2 has no state: offline
    return SimpleNamespace(apis=apis, log_manager=None, replica_manager=replica_manager, controller=controller,
                           fetcher_manager=SimpleNamespace(max_lag=42))


class ReplicationMetricsTests(unittest.TestCase):
    def test_replica_manager_metrics(self) -> None:
        registry = metrics_registry(fake_server())
        value = registry.get_sample_value
        self.assertEqual(value("kafka_server_replicamanager_underreplicatedpartitions"), 2)
        self.assertEqual(value("kafka_server_replicamanager_underminisrpartitioncount"), 1)
        self.assertEqual(value("kafka_server_replicamanager_leadercount"), 3)
        self.assertEqual(value("kafka_server_replicamanager_partitioncount"), 4)
        self.assertEqual(value("kafka_server_replicamanager_isrshrinks_total"), 3)
        self.assertEqual(value("kafka_server_replicamanager_isrexpands_total"), 4)
        self.assertEqual(value("kafka_server_delayedoperationpurgatory_purgatorysize",
                               {"delayedOperation": "Produce"}), 4)
        self.assertEqual(value("kafka_server_delayedoperationpurgatory_purgatorysize",
                               {"delayedOperation": "Fetch"}), 7)
        self.assertEqual(value("kafka_server_replicafetchermanager_maxlag", {"clientId": "Replica"}), 42)

    def test_controller_metrics_on_the_active_controller(self) -> None:
        value = metrics_registry(fake_server()).get_sample_value
        self.assertEqual(value("kafka_controller_kafkacontroller_activecontrollercount"), 1)
        self.assertEqual(value("kafka_controller_kafkacontroller_offlinepartitionscount"), 2)

    def test_controller_metrics_elsewhere_are_zero(self) -> None:
        value = metrics_registry(fake_server(controller_active=False)).get_sample_value
        self.assertEqual(value("kafka_controller_kafkacontroller_activecontrollercount"), 0)
        self.assertEqual(value("kafka_controller_kafkacontroller_offlinepartitionscount"), 0)

    def test_exposition_text(self) -> None:
        text = generate_latest(metrics_registry(fake_server())).decode()
        self.assertIn("# TYPE kafka_server_replicamanager_isrshrinks_total counter", text)
        self.assertIn('kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation="Produce"} 4.0', text)

    def test_a_broker_still_starting_has_no_replication_metrics(self) -> None:
        server = SimpleNamespace(apis=fake_server().apis, log_manager=None, replica_manager=None, controller=None,
                                 fetcher_manager=None)
        value = metrics_registry(server).get_sample_value
        self.assertIsNone(value("kafka_server_replicamanager_leadercount"))
        self.assertIsNone(value("kafka_controller_kafkacontroller_activecontrollercount"))
