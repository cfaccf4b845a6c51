"""
Request handlers, one C{handle_*} per API key, after Kafka's C{KafkaApis.scala}.

L{KafkaApis.handle} decodes a request with kio, calls the handler, and returns
what L{kafkatw.broker.network.KafkaConnection} writes: C{None} (no response,
Produce with acks=0), response C{bytes}, a C{(chunks, total_bytes)} pair (Fetch,
with file regions), or a Deferred of one of those.

The versions served are exactly L{SUPPORTED_VERSIONS}, advertised in
ApiVersions.  They cover what librdkafka 2.0 (Debian's kcat), librdkafka 2.16
(confluent-kafka), kafka-python 3 and aiokafka negotiate.  An ApiVersions request
of a version not served gets an ApiVersions v0 response with
C{UNSUPPORTED_VERSION} and the list (KIP-511); any other unserved API or version
closes the connection, as Kafka does.

Source: Apache Kafka protocol guide; KafkaApis.scala.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..config import BROKER_CONFIG, TOPIC_CONFIG_KEYS, BrokerConfig
from ..errors import CorruptRecordError, ErrorCode, KafkaError, kafka_error
from ..protocol.fetch import FETCH_MAX_VERSION, FETCH_MIN_VERSION, PartitionFetchData, encode_fetch_response
from ..protocol.messages import RequestHeader, UnsupportedVersion, decode_request, encode_response
from ..zookeeper.bridge import ZooKeeperError
from ..zookeeper.registry import CommittedOffset
from .group_coordinator import GroupCoordinator, OffsetStore
from .request_context import NO_CONNECTION, ConnectionContext, RequestContext

__all__ = ["SUPPORTED_VERSIONS", "ADVERTISED_VERSIONS", "TRANSACTIONAL_API_KEYS", "TRANSACTIONS_UNSUPPORTED",
           "TRANSACTIONS_UNSUPPORTED_MESSAGE", "KafkaApis", "validate_topic_name"]

_log = Logger()

#: API key -> (min version, max version) served.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce (message format v2 only: v3+)
    1: (FETCH_MIN_VERSION, FETCH_MAX_VERSION),  # Fetch (v13+ use topic ids)
    2: (1, 6),  # ListOffsets (v7 adds MAX_TIMESTAMP, not served)
    3: (0, 12),  # Metadata
    18: (0, 3),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    8: (2, 8),  # OffsetCommit (v9+ carry KIP-848 member epochs: not served)
    9: (1, 7),  # OffsetFetch (v8 batches groups, v9 adds member epochs: not served)
    10: (0, 4),  # FindCoordinator (group keys; transaction keys: TRANSACTIONS_UNSUPPORTED)
    11: (0, 8),  # JoinGroup (v9's KIP-814 skip_assignment: not served)
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups (v5 filters by group type, KIP-848: not served)
    42: (0, 2),  # DeleteGroups
    22: (0, 4),  # InitProducerId (idempotent producers; a transactional id: TRANSACTIONS_UNSUPPORTED)
    32: (1, 4),  # DescribeConfigs
    23: (2, 4),  # OffsetForLeaderEpoch (KIP-101, KIP-279; followers and KIP-320 clients)
    37: (0, 3),  # CreatePartitions
    43: (0, 2),  # ElectLeaders (KIP-460; answered by the controller)
    45: (0, 0),  # AlterPartitionReassignments (KIP-455; answered by the controller)
    46: (0, 0),  # ListPartitionReassignments (KIP-455; answered by the controller)
    44: (0, 1),  # IncrementalAlterConfigs (the replication throttles of brokers only, for now)
    60: (0, 1),  # DescribeCluster (KIP-700; v2's fenced brokers are KRaft's)
}

#: The transactional APIs (KIP-98, KIP-664): AddPartitionsToTxn, AddOffsetsToTxn,
#: EndTxn, WriteTxnMarkers, TxnOffsetCommit, DescribeTransactions,
#: ListTransactions.  None is served, so none is advertised (a unit test pins it).
TRANSACTIONAL_API_KEYS = frozenset({24, 25, 26, 27, 28, 65, 66})

#: The answer to a transactional producer until transactions exist: FindCoordinator
#: for a transactional id (key type 1), InitProducerId with a transactional id and
#: a transactional Produce get this code.  It is the one error every client treats
#: as fatal on the way into a transaction -- librdkafka fails C{init_transactions}
#: at once only for it (or CLUSTER_AUTHORIZATION_FAILED) and shows FindCoordinator's
#: error message with it; Kafka's Java client, kafka-python and aiokafka raise
#: their TransactionalIdAuthorization errors -- whereas UNSUPPORTED_VERSION,
#: INVALID_REQUEST and COORDINATOR_NOT_AVAILABLE are retried by librdkafka until
#: the application's timeout.  docs/protocol.md shows what each client reports.
TRANSACTIONS_UNSUPPORTED = ErrorCode.transactional_id_authorization_failed
TRANSACTIONS_UNSUPPORTED_MESSAGE = (
    "kafkatw does not support transactions: unset transactional.id "
    "(the idempotent producer, enable.idempotence, is supported)"
)

#: What ApiVersions advertises where it differs from L{SUPPORTED_VERSIONS}.
#: librdkafka before 2.8 enables gzip/snappy/lz4 only when Produce v0 is
#: advertised (confluentinc/librdkafka#4956), so Produce is listed from v0 as
#: Apache Kafka 4.0 does (KAFKA-18659) while v0–v2 requests are still refused.
ADVERTISED_VERSIONS: dict[int, tuple[int, int]] = {**SUPPORTED_VERSIONS, 0: (0, SUPPORTED_VERSIONS[0][1])}

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


def validate_topic_name(name: str | None) -> ErrorCode:
    """
    Kafka's topic name rules (C{Topic.validate}): 1–249 characters of
    C{[a-zA-Z0-9._-]}, not C{.} or C{..}.

    @return: C{ErrorCode.none} or C{ErrorCode.invalid_topic_exception}.
    """
    if not name or name in (".", "..") or len(name) > 249 or not _LEGAL_TOPIC.match(name):
        return ErrorCode.invalid_topic_exception
    return ErrorCode.none


class KafkaApis:
    """
    Serves the Kafka APIs of one broker.

    @param replica_manager: the L{kafkatw.broker.replica_manager.ReplicaManager}.
    @param metadata: the L{kafkatw.broker.metadata_cache.MetadataCache}.
    @param admin: creates and deletes topics and hands out producer ids
        (L{kafkatw.broker.admin.AdminManager}); its methods return Deferreds.
    @param advertised: this broker's (host, port) by broker id, for Metadata.
    """

    def __init__(self, config: BrokerConfig, replica_manager: Any, metadata: Any, admin: Any,
                 reactor: Any, now_ms: Callable[[], int] | None = None,
                 group_coordinator: GroupCoordinator | None = None) -> None:
        self.config = config
        self.broker_id = config["broker.id"]
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.admin = admin
        self.reactor = reactor
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.connections: set[Any] = set()
        self.in_flight: set[defer.Deferred] = set()
        if group_coordinator is None:
            offsets = OffsetStore(admin.registry, reactor, config["offsets.commit.batch.interval.ms"],
                                  config["offsets.commit.timeout.ms"], now_ms=self.now_ms)
            group_coordinator = GroupCoordinator(self.broker_id, config, reactor, lambda: list(metadata.brokers),
                                                 offsets, self._partition_exists, now_ms=self.now_ms)
        self.group_coordinator = group_coordinator
        self._handlers = {
            0: self.handle_produce,
            1: self.handle_fetch,
            2: self.handle_list_offsets,
            3: self.handle_metadata,
            8: self.handle_offset_commit,
            9: self.handle_offset_fetch,
            10: self.handle_find_coordinator,
            11: self.handle_join_group,
            12: self.handle_heartbeat,
            13: self.handle_leave_group,
            14: self.handle_sync_group,
            15: self.handle_describe_groups,
            16: self.handle_list_groups,
            42: self.handle_delete_groups,
            18: self.handle_api_versions,
            19: self.handle_create_topics,
            20: self.handle_delete_topics,
            22: self.handle_init_producer_id,
            32: self.handle_describe_configs,
            23: self.handle_offset_for_leader_epoch,
            37: self.handle_create_partitions,
            43: self.handle_elect_leaders,
            45: self.handle_alter_partition_reassignments,
            46: self.handle_list_partition_reassignments,
            44: self.handle_incremental_alter_configs,
            60: self.handle_describe_cluster,
        }
        #: The broker's L{kafkatw.broker.controller.KafkaController} (set by the server;
        #: C{None}: this broker answers controller requests C{NOT_CONTROLLER}).
        self.controller: Any = None
        #: Kafka's BrokerTopicMetrics and RequestMetrics, read by L{kafkatw.broker.metrics}.
        self.request_counts: dict[int, int] = {}
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.failed_produce_requests = 0
        self.failed_fetch_requests = 0

    # --- connections ---------------------------------------------------------

    def connection_opened(self, connection: Any) -> None:
        self.connections.add(connection)

    def connection_closed(self, connection: Any) -> None:
        self.connections.discard(connection)

    # --- dispatch ------------------------------------------------------------

    def handle(self, header: RequestHeader, frame: bytes, connection: ConnectionContext = NO_CONNECTION) -> Any:
        """
        Serve one request frame arriving on C{connection}.

        @raise UnsupportedVersion: an API or version kafkatw does not serve
            (the connection is closed).
        @raise MalformedRequest: the body does not decode.
        """
        api_key, version = header.api_key, header.api_version
        served = SUPPORTED_VERSIONS.get(api_key)
        if api_key == 18 and (served is None or not served[0] <= version <= served[1]):
            return self._api_versions_response(0, header.correlation_id, ErrorCode.unsupported_version)
        if served is None:
            raise UnsupportedVersion(f"API key {api_key} is not served")
        if not served[0] <= version <= served[1]:
            raise UnsupportedVersion(f"version {version} outside {served[0]}-{served[1]}")
        request = decode_request(frame, header)
        self.request_counts[api_key] = self.request_counts.get(api_key, 0) + 1
        result = self._handlers[api_key](RequestContext(header, connection), request)
        if isinstance(result, defer.Deferred):
            self.in_flight.add(result)

            def _done(value: Any) -> Any:
                self.in_flight.discard(result)
                return value

            result.addBoth(_done)
        return result

    def _respond(self, context: RequestContext, body: Any) -> bytes:
        return encode_response(context.api_key, context.api_version, context.correlation_id, body)

    # --- ApiVersions ---------------------------------------------------------

    def _api_versions_response(self, version: int, correlation_id: int, error: ErrorCode) -> bytes:
        body = {
            "error_code": int(error),
            "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(ADVERTISED_VERSIONS.items())
            ],
            "throttle_time": 0,
        }
        return encode_response(18, version, correlation_id, body)

    def handle_api_versions(self, context: RequestContext, request: Any) -> bytes:
        return self._api_versions_response(context.api_version, context.correlation_id, ErrorCode.none)

    # --- Metadata ------------------------------------------------------------

    def _broker_list(self, listener: str = "PLAINTEXT") -> list[dict]:
        """The live brokers as clients of C{listener} reach them (brokers without it are left out, as Kafka does)."""
        brokers = []
        for b in sorted(self.metadata.brokers.values(), key=lambda b: b.broker_id):
            address = b.address(listener)
            if address is not None:
                brokers.append({"node_id": b.broker_id, "host": address[0], "port": address[1], "rack": b.rack})
        return brokers

    def _topic_metadata(self, name: str) -> dict:
        meta = self.metadata.topics.get(name)
        if meta is None:
            return {"error_code": int(ErrorCode.unknown_topic_or_partition), "name": name, "partitions": []}
        partitions = []
        for index in sorted(meta.partitions):
            replicas = meta.partitions[index]
            leader = self.metadata.leader(name, index)
            partitions.append({
                "error_code": int(ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available),
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": self.metadata.leader_epoch(name, index),
                "replica_nodes": list(replicas),
                "isr_nodes": self.metadata.isr(name, index),
                "offline_replicas": [r for r in replicas if r not in self.metadata.brokers],
            })
        return {
            "error_code": 0,
            "name": name,
            "topic_id": meta.topic_id,
            "is_internal": False,
            "partitions": partitions,
            "topic_authorized_operations": -2147483648,
        }

    def _metadata_body(self, names: list[str], errors: dict[str, ErrorCode], listener: str = "PLAINTEXT") -> dict:
        topics = []
        for name in names:
            if name in errors:
                topics.append({"error_code": int(errors[name]), "name": name, "partitions": [],
                               "topic_authorized_operations": -2147483648})
            else:
                topics.append(self._topic_metadata(name))
        return {
            "throttle_time": 0,
            "brokers": self._broker_list(listener),
            "cluster_id": self.metadata.cluster_id,
            "controller_id": self.metadata.controller_id,
            "topics": topics,
            "cluster_authorized_operations": -2147483648,
        }

    def handle_metadata(self, context: RequestContext, request: Any) -> Any:
        if request.topics is None or (context.api_version == 0 and not request.topics):
            names = sorted(self.metadata.topics)
            return self._respond(context, self._metadata_body(names, {}, context.connection.listener_name))
        names = [t.name for t in request.topics]
        allow_auto = getattr(request, "allow_auto_topic_creation", True) and self.config["auto.create.topics.enable"]
        errors: dict[str, ErrorCode] = {}
        creating = []
        for name in names:
            if name in self.metadata.topics:
                continue
            invalid = validate_topic_name(name)
            if invalid:
                errors[name] = invalid
            elif allow_auto:
                creating.append(name)
        if not creating:
            return self._respond(context, self._metadata_body(names, errors, context.connection.listener_name))
        return defer.Deferred.fromCoroutine(self._auto_create_then_metadata(context, names, errors, creating))

    async def _auto_create_then_metadata(self, context: RequestContext, names: list[str],
                                         errors: dict[str, ErrorCode], creating: list[str]) -> bytes:
        for name in creating:
            try:
                await self.admin.create_topic(
                    name, self.config["num.partitions"], self.config["default.replication.factor"], None, {}
                )
            except KafkaError as e:
                if e.error_code != ErrorCode.topic_already_exists:
                    errors[name] = e.error_code
            except ZooKeeperError as e:
                _log.warn("auto-creating topic {topic} failed: ZooKeeper unavailable ({error})", topic=name, error=e)
                errors[name] = ErrorCode.leader_not_available
        return self._respond(context, self._metadata_body(names, errors, context.connection.listener_name))

    # --- Produce -------------------------------------------------------------

    def handle_produce(self, context: RequestContext, request: Any) -> Any:
        """
        Append each partition's batches on its leader.  With acks=all the
        answer waits in the produce purgatory until every in-sync replica has
        the batches (or C{timeout} passes: C{REQUEST_TIMED_OUT}); an ISR
        smaller than C{min.insync.replicas} refuses the write before appending
        (C{NOT_ENOUGH_REPLICAS}).
        """
        acks = request.acks
        if request.transactional_id is not None:
            self._refuse_transactions("Produce", context, request.transactional_id)
            code = TRANSACTIONS_UNSUPPORTED
            results = [
                (t.name, [{"index": p.index, "error_code": int(code), "base_offset": -1} for p in t.partition_data])
                for t in request.topic_data
            ]
        else:
            results = []
            append = self.replica_manager.append
            min_isr = self.replica_manager.min_insync_replicas if acks == -1 else None
            required: dict[tuple[str, int], int] = {}
            for topic in request.topic_data:
                name = topic.name
                partitions = []
                for p in topic.partition_data:
                    try:
                        if p.records is None:
                            raise CorruptRecordError("a null record set")
                        result = append(name, p.index, p.records, min_isr(name) if min_isr is not None else None)
                    except KafkaError as e:
                        self.failed_produce_requests += 1
                        code = e.error_code
                        partitions.append({"index": p.index, "error_code": int(code), "base_offset": -1,
                                           "log_append_time": -1, "log_start_offset": -1,
                                           "error_message": str(e) or None})
                        continue
                    if not result.duplicate:
                        self.messages_in += result.record_count
                        self.bytes_in += len(p.records)
                    if min_isr is not None:
                        required[(name, p.index)] = result.last_offset + 1
                    partitions.append({
                        "index": p.index, "error_code": 0, "base_offset": result.base_offset,
                        "log_append_time": result.log_append_time_ms, "log_start_offset": result.log_start_offset,
                    })
                results.append((name, partitions))
            if required:
                timeout = request.timeout
                timeout_ms = int(timeout.total_seconds() * 1000) if hasattr(timeout, "total_seconds") else int(timeout)
                d = self.replica_manager.delay_produce(required, max(timeout_ms, 0))
                return d.addCallback(self._produce_acknowledged, context, results)
        if acks == 0:
            return None
        return self._produce_response(context, results)

    def _produce_acknowledged(self, errors: dict, context: RequestContext, results: list) -> bytes:
        for name, partitions in results:
            for entry in partitions:
                error = errors.get((name, entry["index"]))
                if error is not None and entry["error_code"] == 0:
                    self.failed_produce_requests += 1
                    entry.update(error_code=int(error.error_code), error_message=str(error) or None)
        return self._produce_response(context, results)

    def _produce_response(self, context: RequestContext, results: list) -> bytes:
        body = {
            "responses": [{"name": name, "partition_responses": partitions} for name, partitions in results],
            "throttle_time": 0,
        }
        return self._respond(context, body)

    # --- Fetch ---------------------------------------------------------------

    def _read_partitions(self, request: Any) -> tuple[list[tuple[str, list[PartitionFetchData]]], int, bool]:
        """
        Read every requested partition once, on its leader.  A consumer reads
        below the high watermark; a follower (C{replica_id} >= 0) reads up to
        the log end offset, and its fetch offset tells the leader what it holds
        (L{kafkatw.broker.partition.Partition.update_follower}).

        @return: (topics for the response, bytes found, whether any partition
            had an error).
        """
        replica_id = getattr(request, "replica_id", -1)
        remaining = request.max_bytes if getattr(request, "max_bytes", None) is not None else 0x7FFFFFFF
        topics = []
        total = 0
        any_error = False
        for topic in request.topics:
            name = topic.topic
            partitions = []
            for p in topic.partitions:
                try:
                    partition = self.replica_manager.leader_partition(name, p.partition)
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    log = partition.log
                    if replica_id >= 0:
                        partition.update_follower(replica_id, p.fetch_offset)
                        max_offset = log.log_end_offset
                    else:
                        max_offset = log.high_watermark
                    high_watermark = log.high_watermark
                    regions: list[Any] = []
                    size = 0
                    if remaining > 0:
                        regions = log.read(p.fetch_offset, min(p.partition_max_bytes, remaining), max_offset,
                                           min_one_batch=total == 0)
                        size = sum(r.length for r in regions)
                        remaining -= size
                    elif not log.log_start_offset <= p.fetch_offset <= log.log_end_offset:
                        log.read(p.fetch_offset, 1, max_offset)  # raises OffsetOutOfRange
                    partitions.append(PartitionFetchData(
                        p.partition, 0, high_watermark, high_watermark, log.log_start_offset, regions, size
                    ))
                    total += size
                except KafkaError as e:
                    any_error = True
                    self.failed_fetch_requests += 1
                    partitions.append(PartitionFetchData(p.partition, int(e.error_code), -1, -1, -1, (), 0))
            topics.append((name, partitions))
        return topics, total, any_error

    def handle_fetch(self, context: RequestContext, request: Any) -> Any:
        topics, total, any_error = self._read_partitions(request)
        max_wait_ms = int(request.max_wait.total_seconds() * 1000)
        if any_error or total >= request.min_bytes or max_wait_ms <= 0 or total >= request.max_bytes:
            return self._fetch_response(context, topics)
        tps = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
        if not tps:
            return self._fetch_response(context, topics)
        d = self.replica_manager.delay_fetch(tps, request.min_bytes, total, max_wait_ms,
                                             replica=getattr(request, "replica_id", -1) >= 0)
        d.addCallback(lambda _: self._fetch_response(context, self._read_partitions(request)[0]))
        return d

    def _fetch_response(self, context: RequestContext, topics: list) -> tuple[list, int]:
        self.bytes_out += sum(p.records_bytes for _, partitions in topics for p in partitions)
        return encode_fetch_response(context.api_version, context.correlation_id, topics)

    # --- ListOffsets ---------------------------------------------------------

    def handle_list_offsets(self, context: RequestContext, request: Any) -> bytes:
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                entry = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                         "leader_epoch": -1}
                try:
                    partition = self.replica_manager.leader_partition(topic.name, p.partition_index)
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    log = partition.log
                    ts = p.timestamp
                    if ts == LATEST_TIMESTAMP:
                        entry["offset"] = log.high_watermark
                    elif ts == EARLIEST_TIMESTAMP:
                        entry["offset"] = log.log_start_offset
                    elif ts < 0:
                        raise kafka_error(ErrorCode.invalid_request, f"timestamp {ts}")
                    else:
                        found = log.offset_for_timestamp(ts)
                        if found is not None:
                            entry["offset"], entry["timestamp"] = found
                    entry["leader_epoch"] = partition.leader_epoch
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return self._respond(context, {"throttle_time": 0, "topics": topics})

    # --- CreateTopics / DeleteTopics ----------------------------------------

    def handle_create_topics(self, context: RequestContext, request: Any) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._create_topics(context, request))

    async def _create_topics(self, context: RequestContext, request: Any) -> bytes:
        results = []
        for topic in request.topics:
            entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None,
                                     "num_partitions": -1, "replication_factor": -1, "configs": None}
            try:
                invalid = validate_topic_name(topic.name)
                if invalid:
                    raise kafka_error(invalid, f"invalid topic name {topic.name!r}")
                configs = {c.name: c.value for c in topic.configs}
                assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None
                partitions = topic.num_partitions if topic.num_partitions != -1 else self.config["num.partitions"]
                rf = topic.replication_factor if topic.replication_factor != -1 else \
                    self.config["default.replication.factor"]
                meta = await self.admin.create_topic(
                    topic.name, partitions, rf, assignment, configs, validate_only=request.validate_only
                )
                entry["num_partitions"] = len(meta.partitions)
                entry["replication_factor"] = len(next(iter(meta.partitions.values())))
                entry["topic_id"] = meta.topic_id
                entry["configs"] = [
                    {"name": k, "value": str(v), "read_only": False,
                     "config_source": 1 if k in configs else 5, "is_sensitive": False}
                    for k, v in sorted(self._effective_topic_config(topic.name, configs).items())
                ]
            except KafkaError as e:
                entry["error_code"] = int(e.error_code)
                entry["error_message"] = str(e) or None
            except ZooKeeperError as e:
                entry["error_code"] = int(ErrorCode.request_timed_out)
                entry["error_message"] = f"ZooKeeper unavailable: {e}"
            results.append(entry)
        return self._respond(context, {"throttle_time": 0, "topics": results})

    def handle_delete_topics(self, context: RequestContext, request: Any) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._delete_topics(context, request))

    async def _delete_topics(self, context: RequestContext, request: Any) -> bytes:
        if hasattr(request, "topic_names"):
            names = list(request.topic_names)
        else:
            by_id = {meta.topic_id: name for name, meta in self.metadata.topics.items()}
            names = [t.name if t.name is not None else by_id.get(t.topic_id, str(t.topic_id)) for t in request.topics]
        results = []
        for name in names:
            entry = {"name": name, "error_code": 0, "error_message": None}
            try:
                if not self.config["delete.topic.enable"]:
                    raise kafka_error(ErrorCode.topic_deletion_disabled, "delete.topic.enable=false")
                if name not in self.metadata.topics:
                    raise kafka_error(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
                entry["topic_id"] = self.metadata.topics[name].topic_id
                await self.admin.delete_topic(name)
            except KafkaError as e:
                entry["error_code"] = int(e.error_code)
                entry["error_message"] = str(e) or None
            except ZooKeeperError as e:
                entry["error_code"] = int(ErrorCode.request_timed_out)
                entry["error_message"] = f"ZooKeeper unavailable: {e}"
            results.append(entry)
        return self._respond(context, {"throttle_time": 0, "responses": results})

    # --- OffsetForLeaderEpoch ---------------------------------------------------

    def handle_offset_for_leader_epoch(self, context: RequestContext, request: Any) -> bytes:
        """
        For each partition, the largest epoch at or below the requested one
        and the offset where it ended (KIP-101, KIP-279): a follower truncates
        to it, a KIP-320 consumer validates its position with it.
        """
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                entry = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
                try:
                    partition = self.replica_manager.leader_partition(topic.topic, p.partition)
                    partition.check_leader_epoch(p.current_leader_epoch)
                    entry["leader_epoch"], entry["end_offset"] = partition.log.end_offset_for_epoch(p.leader_epoch)
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                partitions.append(entry)
            topics.append({"topic": topic.topic, "partitions": partitions})
        return self._respond(context, {"throttle_time": 0, "topics": topics})

    # --- CreatePartitions ------------------------------------------------------

    def handle_create_partitions(self, context: RequestContext, request: Any) -> defer.Deferred:
        async def go() -> bytes:
            results = []
            for topic in request.topics:
                entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None}
                try:
                    assignment = None if topic.assignments is None else [list(a.broker_ids)
                                                                           for a in topic.assignments]
                    await self.admin.create_partitions(topic.name, topic.count, assignment, request.validate_only)
                except KafkaError as e:
                    entry.update(error_code=int(e.error_code), error_message=str(e) or None)
                except ZooKeeperError as e:
                    entry.update(error_code=int(ErrorCode.request_timed_out), error_message=f"ZooKeeper: {e}")
                results.append(entry)
            return self._respond(context, {"throttle_time": 0, "results": results})

        return defer.Deferred.fromCoroutine(go())

    # --- IncrementalAlterConfigs ------------------------------------------------

    def handle_incremental_alter_configs(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        Brokers' dynamic replication throttles (C{leader.replication.throttled.rate},
        C{follower.replication.throttled.rate}); any other key or resource type
        is refused (C{INVALID_CONFIG} / C{INVALID_REQUEST}).
        """

        async def go() -> bytes:
            responses = []
            for resource in request.resources:
                entry: dict[str, Any] = {"error_code": 0, "error_message": None,
                                         "resource_type": resource.resource_type,
                                         "resource_name": resource.resource_name}
                try:
                    if resource.resource_type != 4:  # BROKER
                        raise kafka_error(ErrorCode.invalid_request,
                                          f"resource type {resource.resource_type} cannot be altered in this version")
                    await self.admin.alter_broker_config(
                        resource.resource_name, [(c.name, int(c.config_operation), c.value) for c in resource.configs],
                        request.validate_only)
                except KafkaError as e:
                    entry.update(error_code=int(e.error_code), error_message=str(e) or None)
                except ZooKeeperError as e:
                    entry.update(error_code=int(ErrorCode.request_timed_out), error_message=f"ZooKeeper: {e}")
                responses.append(entry)
            return self._respond(context, {"throttle_time": 0, "responses": responses})

        return defer.Deferred.fromCoroutine(go())

    # --- controller requests: ElectLeaders, partition reassignments ----------------

    def _not_controller(self) -> bool:
        return self.controller is None or not self.controller.active

    def handle_elect_leaders(self, context: RequestContext, request: Any) -> Any:
        """ElectLeaders (KIP-460): preferred (0) or unclean (1) elections, on the controller."""
        election_type = getattr(request, "election_type", 0)
        wanted = None if request.topic_partitions is None else [
            (t.topic, p) for t in request.topic_partitions for p in t.partitions]

        def answer(results: dict, top: ErrorCode = ErrorCode.none) -> bytes:
            topics: dict[str, list] = {}
            for (topic, partition), (code, message) in sorted(results.items()):
                topics.setdefault(topic, []).append({"partition_id": partition, "error_code": int(code),
                                                     "error_message": message})
            return self._respond(context, {"throttle_time": 0, "error_code": int(top), "replica_election_results": [
                {"topic": topic, "partition_result": partitions} for topic, partitions in topics.items()]})

        if self._not_controller():
            return answer({k: (ErrorCode.not_controller, "not the controller") for k in wanted or []},
                          ErrorCode.not_controller)
        return self.controller.elect_leaders(election_type, wanted).addCallback(answer)

    def handle_alter_partition_reassignments(self, context: RequestContext, request: Any) -> Any:
        targets = {(t.name, p.partition_index): (None if p.replicas is None else list(p.replicas))
                   for t in request.topics for p in t.partitions}

        def answer(results: dict, top: ErrorCode = ErrorCode.none) -> bytes:
            topics: dict[str, list] = {}
            for (topic, partition), (code, message) in sorted(results.items()):
                topics.setdefault(topic, []).append({"partition_index": partition, "error_code": int(code),
                                                     "error_message": message})
            return self._respond(context, {"throttle_time": 0, "error_code": int(top),
                                           "error_message": None if top == ErrorCode.none else "not the controller",
                                           "responses": [{"name": t, "partitions": ps} for t, ps in topics.items()]})

        if self._not_controller():
            return answer({}, ErrorCode.not_controller)
        return self.controller.reassign(targets).addCallback(answer)

    def handle_list_partition_reassignments(self, context: RequestContext, request: Any) -> bytes:
        if self._not_controller():
            return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.not_controller),
                                           "error_message": "not the controller", "topics": []})
        wanted = None if request.topics is None else {
            (t.name, p) for t in request.topics for p in t.partition_indexes}
        topics: dict[str, list] = {}
        for (topic, partition), (replicas, adding, removing) in sorted(self.controller.ongoing_reassignments().items()):
            if wanted is None or (topic, partition) in wanted:
                topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas,
                                                     "adding_replicas": adding, "removing_replicas": removing})
        return self._respond(context, {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": [
            {"name": t, "partitions": ps} for t, ps in topics.items()]})
    # --- DescribeCluster -------------------------------------------------------

    def handle_describe_cluster(self, context: RequestContext, request: Any) -> bytes:
        """
        KIP-700: the live brokers, the cluster id and the controller's broker
        id (C{/controller}; -1 when there is none).  A v1 request for the
        controllers' endpoints (C{endpoint_type} 2, KRaft) gets
        C{UNSUPPORTED_ENDPOINT_TYPE}, as a Kafka broker answers it.
        """
        body: dict[str, Any] = {
            "throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": self.metadata.cluster_id, "controller_id": self.metadata.controller_id,
            "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                        for b in self._broker_list(context.connection.listener_name)],
            "cluster_authorized_operations": -2147483648,
        }
        if getattr(request, "endpoint_type", 1) != 1:
            body.update(error_code=int(ErrorCode.unsupported_endpoint_type), brokers=[], controller_id=-1,
                        endpoint_type=request.endpoint_type,
                        error_message="this broker describes only broker endpoints (endpoint_type 1)")
        return self._respond(context, body)

    # --- DescribeConfigs -----------------------------------------------------

    def _effective_topic_config(self, topic: str, overrides: dict[str, str] | None = None) -> dict[str, Any]:
        if overrides is None:
            meta = self.metadata.topics.get(topic)
            overrides = meta.config if meta is not None else {}
        result: dict[str, Any] = {}
        for key, broker_key in TOPIC_CONFIG_KEYS.items():
            result[key] = overrides.get(key, self.config[broker_key])
        return result

    def handle_describe_configs(self, context: RequestContext, request: Any) -> bytes:
        results = []
        for resource in request.resources:
            entry: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": resource.resource_type,
                                     "resource_name": resource.resource_name, "configs": []}
            keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
            if resource.resource_type == 2:  # TOPIC
                meta = self.metadata.topics.get(resource.resource_name)
                if meta is None:
                    entry["error_code"] = int(ErrorCode.unknown_topic_or_partition)
                else:
                    for key, value in sorted(self._effective_topic_config(meta.name).items()):
                        if keys is None or key in keys:
                            entry["configs"].append({
                                "name": key, "value": str(value), "read_only": False,
                                "config_source": 1 if key in meta.config else 5,
                                "is_sensitive": False, "synonyms": [], "config_type": 0, "documentation": None,
                            })
            elif resource.resource_type == 4:  # BROKER
                for key in sorted(BROKER_CONFIG):
                    if keys is None or key in keys:
                        value = self.config[key]
                        if isinstance(value, list):
                            value = ",".join(value)
                        sensitive = "password" in key  # Kafka answers a PASSWORD config's value as null
                        entry["configs"].append({
                            "name": key, "value": None if sensitive else str(value), "read_only": True,
                            "config_source": 4, "is_sensitive": sensitive, "synonyms": [], "config_type": 0,
                            "documentation": BROKER_CONFIG[key].doc,
                        })
            else:
                entry["error_code"] = int(ErrorCode.invalid_request)
                entry["error_message"] = f"resource type {resource.resource_type} is not supported"
            results.append(entry)
        return self._respond(context, {"throttle_time": 0, "results": results})

    # --- FindCoordinator -----------------------------------------------------

    def handle_find_coordinator(self, context: RequestContext, request: Any) -> bytes:
        """
        A group's coordinator is the broker L{kafkatw.broker.group_coordinator.coordinator_for}
        picks from the live brokers in ``/brokers/ids``, so every broker answers
        the same.  Transactions are not served: transaction keys (key type 1)
        get L{TRANSACTIONS_UNSUPPORTED} with L{TRANSACTIONS_UNSUPPORTED_MESSAGE},
        which clients treat as fatal.
        """
        key_type = getattr(request, "key_type", 0)
        keys = list(request.coordinator_keys) if hasattr(request, "coordinator_keys") else [request.key]
        if key_type != 0:
            self._refuse_transactions("FindCoordinator", context, ",".join(keys))
        coordinators = [self._find_coordinator(key, key_type, context.connection.listener_name) for key in keys]
        body = {"throttle_time": 0, "coordinators": coordinators, **coordinators[0]}
        return self._respond(context, body)

    def _find_coordinator(self, key: str, key_type: int, listener: str = "PLAINTEXT") -> dict:
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 0,
                                 "error_message": None}
        if key_type != 0:
            entry["error_code"] = int(TRANSACTIONS_UNSUPPORTED)
            entry["error_message"] = TRANSACTIONS_UNSUPPORTED_MESSAGE
            return entry
        if not key:
            entry["error_code"] = int(ErrorCode.invalid_request)
            entry["error_message"] = "empty group id"
            return entry
        broker_id = self.group_coordinator.coordinator(key)
        broker = self.metadata.brokers.get(broker_id) if broker_id is not None else None
        address = broker.address(listener) if broker is not None else None
        if broker is None or address is None:
            entry["error_code"] = int(ErrorCode.coordinator_not_available)
            entry["error_message"] = ("no live broker" if broker is None
                                      else f"the coordinator has no listener {listener}")
            return entry
        entry.update(node_id=broker.broker_id, host=address[0], port=address[1])
        return entry

    # --- consumer groups -----------------------------------------------------

    @staticmethod
    def _client_host(context: RequestContext) -> str:
        host = context.connection.client_host
        return f"/{host}" if host else ""

    def _partition_exists(self, topic: str, partition: int) -> bool:
        meta = self.metadata.topics.get(topic)
        return meta is not None and partition in meta.partitions

    def handle_join_group(self, context: RequestContext, request: Any) -> defer.Deferred:
        version = context.api_version
        session_timeout_ms = int(request.session_timeout.total_seconds() * 1000)
        rebalance = getattr(request, "rebalance_timeout", None)
        rebalance_timeout_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_timeout_ms
        d = self.group_coordinator.join_group(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None), version >= 4,
            context.client_id or "", self._client_host(context), rebalance_timeout_ms, session_timeout_ms,
            request.protocol_type, [(p.name, bytes(p.metadata)) for p in request.protocols],
        )

        def answer(result: Any) -> bytes:
            empty = None if version >= 7 else ""
            return self._respond(context, {
                "throttle_time": 0, "error_code": int(result.error), "generation_id": result.generation_id,
                "protocol_type": result.protocol_type if result.protocol_type is not None else None,
                "protocol_name": result.protocol_name if result.protocol_name is not None else empty,
                "leader": result.leader_id, "member_id": result.member_id, "members": list(result.members),
            })

        return d.addCallback(answer)

    def handle_sync_group(self, context: RequestContext, request: Any) -> defer.Deferred:
        d = self.group_coordinator.sync_group(
            request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None),
            getattr(request, "protocol_type", None), getattr(request, "protocol_name", None),
            {a.member_id: bytes(a.assignment) for a in request.assignments},
        )

        def answer(result: Any) -> bytes:
            return self._respond(context, {"throttle_time": 0, "error_code": int(result.error),
                                          "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
                                          "assignment": result.assignment})

        return d.addCallback(answer)

    def handle_heartbeat(self, context: RequestContext, request: Any) -> defer.Deferred:
        d = self.group_coordinator.heartbeat(request.group_id, request.member_id,
                                             getattr(request, "group_instance_id", None), request.generation_id)
        return d.addCallback(lambda code: self._respond(context, {"throttle_time": 0, "error_code": int(code)}))

    def handle_leave_group(self, context: RequestContext, request: Any) -> defer.Deferred:
        if context.api_version >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [(request.member_id, None)]
        d = self.group_coordinator.leave_group(request.group_id, leaving)

        def answer(result: tuple) -> bytes:
            top, codes = result
            if context.api_version < 3 and not top:
                top = codes[0]
            return self._respond(context, {
                "throttle_time": 0, "error_code": int(top),
                "members": [{"member_id": m, "group_instance_id": i, "error_code": int(c)}
                            for (m, i), c in zip(leaving, codes)],
            })

        return d.addCallback(answer)

    def handle_offset_commit(self, context: RequestContext, request: Any) -> defer.Deferred:
        offsets = {}
        order = []
        for topic in request.topics:
            for p in topic.partitions:
                key = (topic.name, p.partition_index)
                order.append(key)
                offsets[key] = CommittedOffset(p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                               p.committed_metadata or "")
        d = self.group_coordinator.commit_offsets(
            request.group_id, request.generation_id_or_member_epoch, request.member_id,
            getattr(request, "group_instance_id", None), offsets)

        def answer(codes: dict) -> bytes:
            topics: dict[str, list] = {}
            for name, partition in order:
                topics.setdefault(name, []).append({"partition_index": partition,
                                                    "error_code": int(codes[(name, partition)])})
            return self._respond(context, {"throttle_time": 0, "topics": [
                {"name": name, "partitions": partitions} for name, partitions in topics.items()]})

        return d.addCallback(answer)

    def handle_offset_fetch(self, context: RequestContext, request: Any) -> defer.Deferred:
        wanted = None if request.topics is None else [
            (t.name, p) for t in request.topics for p in t.partition_indexes]
        d = self.group_coordinator.fetch_offsets(request.group_id, wanted)

        def answer(result: tuple) -> bytes:
            error, found = result
            keys = wanted if wanted is not None else sorted(found)
            partition_error = int(error) if context.api_version < 2 else 0
            topics: dict[str, list] = {}
            for name, partition in keys:
                committed = found.get((name, partition))
                topics.setdefault(name, []).append({
                    "partition_index": partition,
                    "committed_offset": committed.offset if committed else -1,
                    "committed_leader_epoch": committed.leader_epoch if committed else -1,
                    "metadata": committed.metadata if committed else "",
                    "error_code": partition_error,
                })
            return self._respond(context, {"throttle_time": 0, "error_code": int(error), "topics": [
                {"name": name, "partitions": partitions} for name, partitions in topics.items()]})

        return d.addCallback(answer)

    def handle_describe_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        d = defer.gatherResults([self.group_coordinator.describe_group(g) for g in request.groups])

        def answer(groups: list) -> bytes:
            for g in groups:
                g["authorized_operations"] = -2147483648
            return self._respond(context, {"throttle_time": 0, "groups": groups})

        return d.addCallback(answer)

    def handle_list_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        states = {s.lower() for s in getattr(request, "states_filter", ())}
        d = self.group_coordinator.list_groups()

        def answer(groups: list) -> bytes:
            listed = [{"group_id": g, "protocol_type": t, "group_state": s} for g, t, s in groups
                      if not states or s.lower() in states]
            return self._respond(context, {"throttle_time": 0, "error_code": 0, "groups": listed})

        def failed(failure: Any) -> bytes:
            failure.trap(ZooKeeperError)
            return self._respond(context, {"throttle_time": 0,
                                          "error_code": int(ErrorCode.coordinator_not_available), "groups": []})

        return d.addCallbacks(answer, failed)

    def handle_delete_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        names = list(request.groups_names)
        d = defer.gatherResults([self.group_coordinator.delete_group(g) for g in names])
        return d.addCallback(lambda codes: self._respond(context, {"throttle_time": 0, "results": [
            {"group_id": g, "error_code": int(c)} for g, c in zip(names, codes)]}))

    # --- InitProducerId ------------------------------------------------------

    def _refuse_transactions(self, api: str, context: RequestContext, transactional_id: str) -> None:
        _log.warn("refused {api} for transactional id {transactional_id!r} from client {client!r}: "
                  "{message}", api=api, transactional_id=transactional_id, client=context.client_id or "",
                  message=TRANSACTIONS_UNSUPPORTED_MESSAGE)

    def handle_init_producer_id(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        """
        A producer id for an idempotent producer (a new id, or the same id
        with its epoch bumped, KIP-360).  A transactional id is refused with
        L{TRANSACTIONS_UNSUPPORTED}.
        """
        if request.transactional_id is not None:
            self._refuse_transactions("InitProducerId", context, request.transactional_id)
            return self._respond(context, {"throttle_time": 0, "error_code": int(TRANSACTIONS_UNSUPPORTED),
                                          "producer_id": -1, "producer_epoch": -1})
        producer_id = getattr(request, "producer_id", -1)
        epoch = getattr(request, "producer_epoch", -1)
        if producer_id >= 0 and 0 <= epoch < 32766:
            # KIP-360: an idempotent producer bumps its epoch to reset sequences.
            return self._respond(context, {"throttle_time": 0, "error_code": 0, "producer_id": producer_id,
                                          "producer_epoch": epoch + 1})
        d = defer.ensureDeferred(self.admin.allocate_producer_id())

        def answer(new_id: int) -> bytes:
            return self._respond(context, {"throttle_time": 0, "error_code": 0, "producer_id": new_id,
                                          "producer_epoch": 0})

        def failed(failure: Any) -> bytes:
            _log.warn("allocating a producer id failed: {error}", error=failure.value)
            return self._respond(context, {"throttle_time": 0,
                                          "error_code": int(ErrorCode.coordinator_not_available),
                                          "producer_id": -1, "producer_epoch": -1})

        return d.addCallbacks(answer, failed)

