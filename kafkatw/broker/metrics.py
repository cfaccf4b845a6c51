"""
Prometheus metrics of a broker, under Kafka's metric names.

A collector reads the broker's counters when scraped, so the request path pays
nothing for metrics.  Names follow the Prometheus JMX exporter's rendering of
Kafka's MBeans (C{kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec}
becomes C{kafka_server_brokertopicmetrics_messagesin_total}), so dashboards
built for Apache Kafka find them.

Enabled with C{metrics.port} (served on 127.0.0.1 at C{/metrics}).
"""

from __future__ import annotations

from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..protocol.messages import API_NAMES

__all__ = ["BrokerCollector", "metrics_registry"]


class BrokerCollector:
    """Collects the counters of one L{kafkatw.broker.server.KafkaServer}."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def collect(self) -> Iterator[Any]:
        apis = self.server.apis
        if apis is None:
            return
        for name, value, doc in [
            ("kafka_server_brokertopicmetrics_messagesin", apis.messages_in, "Records appended."),
            ("kafka_server_brokertopicmetrics_bytesin", apis.bytes_in, "Record batch bytes appended."),
            ("kafka_server_brokertopicmetrics_bytesout", apis.bytes_out, "Record batch bytes fetched."),
            ("kafka_server_brokertopicmetrics_failedproducerequests", apis.failed_produce_requests,
             "Partitions of produce requests that failed."),
            ("kafka_server_brokertopicmetrics_failedfetchrequests", apis.failed_fetch_requests,
             "Partitions of fetch requests that failed."),
        ]:
            yield CounterMetricFamily(name, doc, value=value)
        from .network import ResponseWriter

        fetched = CounterMetricFamily("kafkatw_fetch_record_bytes", "Record bytes written to fetch responses, by path.",
                                      labels=["path"])
        fetched.add_metric(["sendfile"], ResponseWriter.sendfile_bytes)
        fetched.add_metric(["copy"], ResponseWriter.copied_bytes)
        yield fetched
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests served by API.",
                                       labels=["request"])
        for api_key, count in sorted(apis.request_counts.items()):
            requests.add_metric([API_NAMES.get(api_key, str(api_key))], count)
        yield requests
        connections = GaugeMetricFamily("kafka_server_socketservermetrics_connection_count", "Open connections.")
        connections.add_metric([], len(apis.connections))
        yield connections
        quotas = getattr(apis, "quotas", None)
        if quotas is not None:  # per user and client id (kafkatw/broker/quota_manager.py)
            yield from quotas.metric_families()
        yield from self._replication()
        log_manager = self.server.log_manager
        if log_manager is None:
            return
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset.", labels=["topic", "partition"])
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset.", labels=["topic", "partition"])
        size = GaugeMetricFamily("kafka_log_log_size", "Log size in bytes.", labels=["topic", "partition"])
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments.", labels=["topic", "partition"])
        for log in log_manager.all_logs():
            labels = [log.topic, str(log.partition)]
            end.add_metric(labels, log.log_end_offset)
            start.add_metric(labels, log.log_start_offset)
            size.add_metric(labels, log.size_bytes)
            segments.add_metric(labels, len(log.segments))
        yield from (end, start, size, segments)

    def _replication(self) -> Iterator[Any]:
        """
        Kafka's C{ReplicaManager}, C{KafkaController}, C{ReplicaFetcherManager}
        and C{DelayedOperationPurgatory} metrics (docs/replication.md).
        """
        replica_manager = getattr(self.server, "replica_manager", None)
        if replica_manager is not None:
            partitions = list(replica_manager.partitions.values())
            led = [p for p in partitions if p.is_leader]
            under_min_isr = sum(1 for p in led if len(p.isr) < replica_manager.min_insync_replicas(p.topic))
            for name, value, doc in [
                ("kafka_server_replicamanager_underreplicatedpartitions", sum(1 for p in led if p.under_replicated),
                 "Partitions led here whose ISR is smaller than their replicas."),
                ("kafka_server_replicamanager_underminisrpartitioncount", under_min_isr,
                 "Partitions led here whose ISR is smaller than min.insync.replicas."),
                ("kafka_server_replicamanager_leadercount", len(led), "Partitions led here."),
                ("kafka_server_replicamanager_partitioncount", len(partitions), "Partitions with a replica here."),
            ]:
                yield GaugeMetricFamily(name, doc, value=value)
            yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks written by this leader.",
                                      value=sum(p.isr_shrinks for p in partitions))
            yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expansions written by this leader.",
                                      value=sum(p.isr_expands for p in partitions))
            purgatory = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                          "Requests waiting in a purgatory.", labels=["delayedOperation"])
            purgatory.add_metric(["Produce"], replica_manager.produce_purgatory_size)
            purgatory.add_metric(["Fetch"], replica_manager.fetch_purgatory_size)
            yield purgatory
        controller = getattr(self.server, "controller", None)
        if controller is not None:
            active = bool(controller.active)
            yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                    "1 on the active controller, else 0.", value=int(active))
            offline = 0
            if active:
                metadata = controller.metadata
                offline = sum(1 for name, meta in list(metadata.topics.items()) for p in meta.partitions
                              if metadata.leader(name, p) < 0)
            yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                    "Partitions without a live leader (on the active controller, else 0).",
                                    value=offline)
        fetcher_manager = getattr(self.server, "fetcher_manager", None)
        if fetcher_manager is not None:
            lag = GaugeMetricFamily("kafka_server_replicafetchermanager_maxlag",
                                    "Largest lag in records of a partition this broker follows.", labels=["clientId"])
            lag.add_metric(["Replica"], fetcher_manager.max_lag)
            yield lag


def metrics_registry(server: Any) -> CollectorRegistry:
    """A registry holding only this broker's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server))
    return registry
