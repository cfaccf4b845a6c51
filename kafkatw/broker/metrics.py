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

from bisect import bisect_left
from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.samples import Sample

from ..protocol.messages import API_NAMES

__all__ = ["BrokerCollector", "RequestMetrics", "metrics_registry"]


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
            family = CounterMetricFamily(name, doc, value=value)
            _add_per_topic(family, apis)
            yield family
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
        yield from self._fetch_sessions(apis)
        connections = GaugeMetricFamily("kafka_server_socketservermetrics_connection_count", "Open connections.")
        connections.add_metric([], len(apis.connections))
        yield connections
        quotas = getattr(apis, "quotas", None)
        if quotas is not None:  # per user and client id (kafkatw/broker/quota_manager.py)
            yield from quotas.metric_families()
        yield from self._replication()
        yield from self._health_and_lag()
        log_manager = self.server.log_manager
        if log_manager is None:
            return
        yield GaugeMetricFamily("kafka_log_logmanager_offlinelogdirectorycount",
                                "Log directories offline after an I/O error (KIP-112).",
                                value=len(log_manager.offline_log_dirs))
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

    # --- health and lag (issue 12; docs/operations.md "Health, lag and the console") ---

    def _health_and_lag(self) -> Iterator[Any]:
        """
        RequestMetrics histograms and consumer
        lag (kafka_exporter's names) on the active controller only, so a
        cluster exports each group's lag once.
        """
        request_metrics = getattr(self.server, "request_metrics", None)
        if request_metrics is not None:
            yield from request_metrics.families()
        for pauses in (getattr(self.server, "gc_pauses", None), getattr(self.server, "event_loop_lag", None)):
            if pauses is not None:  # kafkatw/broker/pauses.py
                yield from pauses.families()
        lag_monitor = getattr(self.server, "lag_monitor", None)
        controller = getattr(self.server, "controller", None)
        if lag_monitor is None or controller is None or not controller.active:
            return
        snapshot = lag_monitor.latest
        if snapshot is None:
            return
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Records produced and not yet consumed by the group.",
                                labels=["consumergroup", "topic", "partition"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset.",
                                    labels=["consumergroup", "topic", "partition"])
        for row in snapshot.rows:
            labels = [row.group, row.topic, str(row.partition)]
            current.add_metric(labels, row.committed)
            if row.lag is not None:
                lag.add_metric(labels, row.lag)
        ends = GaugeMetricFamily("kafka_topic_partition_current_offset", "The partition's high watermark.",
                                 labels=["topic", "partition"])
        for (topic, partition), offset in sorted(snapshot.end_offsets.items()):
            if offset >= 0:
                ends.add_metric([topic, str(partition)], offset)
        yield from (lag, current, ends)

    @staticmethod
    def _fetch_sessions(apis: Any) -> Iterator[Any]:
        """Kafka's C{FetchSessionCache} metrics (KIP-227) and the followers' Fetch request bytes."""
        cache = getattr(apis, "fetch_sessions", None)
        if cache is None:
            return
        yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                                "Incremental fetch sessions cached.", value=len(cache))
        yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                                "Partitions of the cached fetch sessions.", value=cache.total_partitions)
        yield CounterMetricFamily("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                                  "Fetch sessions evicted to make room for another.", value=cache.evictions)
        kinds = CounterMetricFamily("kafkatw_fetch_session_requests",
                                    "Fetch requests with session fields, by context.", labels=["context"])
        for kind, count in apis.fetch_session_requests.items():
            kinds.add_metric([kind], count)
        yield kinds
        yield CounterMetricFamily("kafkatw_fetch_follower_requests", "Followers' Fetch requests.",
                                  value=apis.follower_fetch_requests)
        yield CounterMetricFamily("kafkatw_fetch_follower_request_bytes", "Bytes of followers' Fetch requests.",
                                  value=apis.follower_fetch_request_bytes)

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


#: Per-topic counters of L{kafkatw.broker.apis.KafkaApis}, as the JMX exporter renders
#: C{BrokerTopicMetrics,topic=T}: samples with a C{topic} label beside the all-topics one.
_PER_TOPIC = {
    "kafka_server_brokertopicmetrics_messagesin": "topic_messages_in",
    "kafka_server_brokertopicmetrics_bytesin": "topic_bytes_in",
    "kafka_server_brokertopicmetrics_bytesout": "topic_bytes_out",
}


def _add_per_topic(family: Any, apis: Any) -> None:
    attribute = _PER_TOPIC.get(family.name)
    if attribute is None:
        return
    for topic, value in sorted(getattr(apis, attribute, {}).items()):
        family.samples.append(Sample(family.name + "_total", {"topic": topic}, value))


#: Upper bounds of the request latency buckets (ms), as the Prometheus JMX exporter's histograms would be.
LATENCY_BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)


def cumulative_buckets(bounds: tuple[float, ...], counts: list[float]) -> list[tuple[str, float]]:
    """
    Prometheus's cumulative C{(le, count)} pairs of a histogram kept as one
    count per bucket: C{counts[i]} those up to C{bounds[i]} (and above
    C{bounds[i-1]}), C{counts[len(bounds)]} those above the last; C{+Inf} last.
    """
    running, out = 0.0, []
    for bound, count in zip((*map(str, bounds), "+Inf"), counts):
        running += count
        out.append((bound, running))
    return out


class RequestMetrics:
    """
    Kafka's C{kafka.network:type=RequestMetrics} TotalTimeMs,
    RequestQueueTimeMs and ResponseSendTimeMs as Prometheus histograms by
    API (C{kafka_network_requestmetrics_totaltimems_bucket{request="Fetch"}}).

    Recording is one bisect and two additions; the families are built when
    scraped.  In kafkatw a request is handled as soon as its frame is read
    (one event loop, no request queue), so RequestQueueTimeMs is the time
    from the frame's arrival to its handler's call; TotalTimeMs runs to the
    response's hand-over to the transport (a response waiting behind an
    earlier one of the same connection counts); ResponseSendTimeMs is that
    hand-over.

    @param clock: returns seconds (a reactor's C{seconds}).
    """

    KINDS = ("totaltimems", "requestqueuetimems", "responsesendtimems")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        #: (kind, API key) -> [bucket counts..., +Inf count, sum in ms]
        self._data: dict[tuple[str, int], list[float]] = {}

    def record(self, kind: str, api_key: int, ms: float) -> None:
        """Count one observation of C{kind} (one of L{KINDS}) for C{api_key}, in ms."""
        data = self._data.get((kind, api_key))
        if data is None:
            data = self._data[(kind, api_key)] = [0.0] * (len(LATENCY_BUCKETS_MS) + 2)
        data[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        data[-1] += ms

    def families(self) -> Iterator[Any]:
        for kind in self.KINDS:
            family = HistogramMetricFamily(f"kafka_network_requestmetrics_{kind}",
                                           f"Kafka's RequestMetrics {kind} by API (ms).", labels=["request"])
            for (k, api_key), data in sorted(self._data.items()):
                if k != kind:
                    continue
                family.add_metric([API_NAMES.get(api_key, str(api_key))],
                                  cumulative_buckets(LATENCY_BUCKETS_MS, data[:-1]), data[-1])
            yield family


def metrics_registry(server: Any) -> CollectorRegistry:
    """A registry holding only this broker's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server))
    return registry
