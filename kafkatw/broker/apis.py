"""
Request handlers, one C{handle_*} per API key, after Kafka's C{KafkaApis.scala}.

L{KafkaApis.handle} decodes a request with kio, calls the handler, and returns
what L{kafkatw.broker.network.KafkaConnection} writes: C{None} (no response,
Produce with acks=0), response C{bytes}, a C{(chunks, total_bytes)} pair (Fetch,
with file regions), or a Deferred of one of those.

Most API areas' handlers are mixins in modules of their own, each with its
table of versions merged into L{SUPPORTED_VERSIONS}: classic groups
(kafkatw/broker/classic_group_apis.py), KIP-848 consumer groups
(consumer_group_apis.py), KIP-932 share groups (share_group_apis.py), topic
administration (topic_admin_apis.py), security (security_apis.py),
transactions (transaction_apis.py), client quotas (quota_apis.py) and the
admin tools (admin_tool_apis.py).  This module keeps the dispatch,
ApiVersions, Metadata, DescribeCluster, Produce, Fetch, ListOffsets and
OffsetForLeaderEpoch.

The versions served are exactly L{SUPPORTED_VERSIONS}, advertised in
ApiVersions.  They cover what librdkafka 2.0 (Debian's kcat), librdkafka 2.16
(confluent-kafka), kafka-python 3 and aiokafka negotiate.  An ApiVersions request
of a version not served gets an ApiVersions v0 response with
C{UNSUPPORTED_VERSION} and the list (KIP-511); any other unserved API or version
closes the connection, as Kafka does.

Source: Apache Kafka protocol guide; KafkaApis.scala.
"""

from __future__ import annotations

import struct
import time
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..config import BrokerConfig
from ..errors import CorruptRecordError, ErrorCode, KafkaError, kafka_error
from ..protocol.fetch import FETCH_MAX_VERSION, FETCH_MIN_VERSION, PartitionFetchData, encode_fetch_response
from ..protocol.messages import (RequestHeader, UnsupportedVersion, decode_request, encode_response,
                                 simple_produce_decoder)
from ..protocol.produce import encode_produce_response
from ..security.acl import (
    CLUSTER_NAME,
    OPERATIONS_NOT_REQUESTED,
    AclOperation,
    ResourceType,
    operations_bit_field,
    supported_operations,
)
from ..zookeeper.bridge import ZooKeeperError
from .fetch_session import FINAL_EPOCH, INVALID_SESSION_ID, FetchSessionCache
from .group_coordinator import GroupCoordinator, OffsetStore
from .quota_apis import QUOTA_VERSIONS, QuotaApis
from .quota_manager import ClientQuotas, user_of_principal
from .request_context import NO_CONNECTION, ConnectionContext, RequestContext
from .admin_tool_apis import ADMIN_TOOL_VERSIONS, AdminToolApis
from .classic_group_apis import CLASSIC_GROUP_VERSIONS, ClassicGroupApis
from .share_group_apis import SHARE_GROUP_VERSIONS, ShareGroupApis
from .consumer_group_apis import CONSUMER_GROUP_VERSIONS, ConsumerGroupApis
from .security_apis import SECURITY_VERSIONS, SecurityApis
from .topic_admin_apis import TOPIC_ADMIN_VERSIONS, TopicAdminApis, validate_topic_name
from .transaction_apis import TRANSACTION_VERSIONS, TransactionApis

__all__ = ["SUPPORTED_VERSIONS", "ADVERTISED_VERSIONS", "KafkaApis", "ProduceRun", "validate_topic_name"]

_log = Logger()

#: API key -> (min version, max version) served.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce (message format v2 only: v3+)
    1: (FETCH_MIN_VERSION, FETCH_MAX_VERSION),  # Fetch (v13+ use topic ids)
    2: (1, 8),  # ListOffsets (v7: MAX_TIMESTAMP, KIP-734; v8: EARLIEST_LOCAL, KIP-405)
    3: (0, 12),  # Metadata
    18: (0, 3),  # ApiVersions
    23: (2, 4),  # OffsetForLeaderEpoch (KIP-101, KIP-279; followers and KIP-320 clients)
    60: (0, 1),  # DescribeCluster (KIP-700; v2's fenced brokers are KRaft's)
    **CLASSIC_GROUP_VERSIONS,  # FindCoordinator, JoinGroup ... DeleteGroups: kafkatw/broker/classic_group_apis.py
    **CONSUMER_GROUP_VERSIONS,  # ConsumerGroupHeartbeat, ConsumerGroupDescribe: kafkatw/broker/consumer_group_apis.py
    **TOPIC_ADMIN_VERSIONS,  # CreateTopics ... ListPartitionReassignments: kafkatw/broker/topic_admin_apis.py
    **ADMIN_TOOL_VERSIONS,  # DeleteRecords, DescribeLogDirs, OffsetDelete: kafkatw/broker/admin_tool_apis.py
    **TRANSACTION_VERSIONS,  # InitProducerId, AddPartitionsToTxn ... ListTransactions: kafkatw/broker/transaction_apis.py
    **SECURITY_VERSIONS,  # SaslHandshake ... DeleteAcls: kafkatw/broker/security_apis.py
    **QUOTA_VERSIONS,  # DescribeClientQuotas, AlterClientQuotas: kafkatw/broker/quota_apis.py
    **SHARE_GROUP_VERSIONS,  # ShareGroupHeartbeat ... ShareAcknowledge (KIP-932): kafkatw/broker/share_group_apis.py
}

#: What ApiVersions advertises where it differs from L{SUPPORTED_VERSIONS}.
#: librdkafka before 2.8 enables gzip/snappy/lz4 only when Produce v0 is
#: advertised (confluentinc/librdkafka#4956), so Produce is listed from v0 as
#: Apache Kafka 4.0 does (KAFKA-18659) while v0–v2 requests are still refused.
ADVERTISED_VERSIONS: dict[int, tuple[int, int]] = {**SUPPORTED_VERSIONS, 0: (0, SUPPORTED_VERSIONS[0][1])}

_tuple_new = tuple.__new__

LATEST_TIMESTAMP = -1
#: Fetch and ListOffsets C{isolation_level} of read-committed consumers (KIP-98).
READ_COMMITTED = 1
EARLIEST_TIMESTAMP = -2
#: ListOffsets v7+: the record with the largest timestamp (KIP-734).
MAX_TIMESTAMP = -3
#: ListOffsets v8+: the earliest offset in local storage (KIP-405; no tiered storage: the log start).
EARLIEST_LOCAL_TIMESTAMP = -4

_INT32 = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhih")  # API key, version, correlation id, client id length
#: (version, topic) -> L{_produce_template}
_produce_templates: dict[tuple[int, str], tuple[bytes, struct.Struct, bytes]] = {}


def _produce_template(version: int, topic: str) -> tuple[bytes, struct.Struct, bytes]:
    """
    The ProduceResponse of one partition of C{topic} without error or
    throttle, cut around its partition's fixed fields: C{(the bytes after the
    correlation id and before the partition, the struct of index, error code,
    base offset, log append time (and log start offset, v5+), the bytes
    after them)}, from L{encode_produce_response} (so the same bytes).
    """
    partition_struct = struct.Struct(">ihqqq" if version >= 5 else ">ihqq")
    fields = (0x5A5A5A5A, 0, 0x5A5A5A5A5A5A5A5A, 0x5A5A5A5A5A5A5A5A, 0x5A5A5A5A5A5A5A5A)
    full = encode_produce_response(version, 0, [(topic, [dict(zip(
        ("index", "error_code", "base_offset", "log_append_time", "log_start_offset"), fields))])])
    packed = partition_struct.pack(*(fields if version >= 5 else fields[:4]))
    at = full.rindex(packed)
    template = _produce_templates[(version, topic)] = (full[4:at], partition_struct, full[at + len(packed):])
    return template


class ProduceRun:
    """
    Produce requests read together from one connection (one C{dataReceived}),
    appended with one write per partition: each request's appends assign
    offsets and update the log's indexes, producer state and epoch cache at
    once, and L{finish} writes every partition's batches with one
    C{os.writev}, moves the high watermarks (waking the fetches and acks=all
    produces waiting for them) and only then answers the requests, in order.
    So an acks=1 response is written only once its batches are in the file,
    and a Fetch read after the run sees them.

    Made by L{KafkaApis.produce_run}; used by
    L{kafkatw.broker.network.KafkaConnection}.
    """

    def __init__(self, apis: "KafkaApis") -> None:
        self._apis = apis
        self._finishers: list[Callable[[dict], Any]] = []
        #: (topic, partition) -> (topic, partition, [records, ...], [result, ...]): the appends
        #: L{queue}d since the last L{append_queued}, and their results once appended.
        self._queued: dict[tuple[str, int], tuple[str, int, list, list]] = {}

    def queue(self, topic: str, partition: int, records: Any) -> tuple[list, int]:
        """
        Queue an append of C{records} to a partition: L{append_queued} makes
        the queued appends of each partition with one call
        (L{kafkatw.broker.replica_manager.ReplicaManager.append_many}).

        @return: C{(results, i)}: C{results[i]} is the append's
            C{AppendResult} or C{KafkaError} once L{append_queued} ran.
        """
        key = (topic, partition)
        entry = self._queued.get(key)
        if entry is None:
            entry = self._queued[key] = (topic, partition, [], [])
        entry[2].append(records)
        return entry[3], len(entry[2]) - 1

    def append_queued(self) -> None:
        """Make the L{queue}d appends (before any other append of the run, and by L{finish})."""
        queued = self._queued
        if not queued:
            return
        self._queued = {}
        append_many = self._apis._append_many
        for topic, partition, records_list, results in queued.values():
            results.extend(append_many(topic, partition, records_list))

    def add(self, finish: Callable[[dict], Any]) -> int:
        """
        Add a request's answer: C{finish(write_errors)} returns it once the
        run is written.

        @return: its index in L{finish}'s list.
        """
        self._finishers.append(finish)
        return len(self._finishers) - 1

    def finish(self) -> list[Any]:
        """
        Write the run's appends, move the high watermarks, and answer.

        @return: each request's answer, in order: C{None} (acks=0), response
            C{bytes}, or a Deferred of them (acks=all).
        """
        apis = self._apis
        self.append_queued()
        errors = apis.replica_manager.write_pending()
        finishers, self._finishers = self._finishers, []
        answers = [finish(errors) for finish in finishers]
        for answer in answers:
            if isinstance(answer, defer.Deferred):
                apis._track(answer)
        return answers


class KafkaApis(TransactionApis, QuotaApis, AdminToolApis, ClassicGroupApis, ConsumerGroupApis, ShareGroupApis,
                TopicAdminApis, SecurityApis):
    """
    Serves the Kafka APIs of one broker.

    @param replica_manager: the L{kafkatw.broker.replica_manager.ReplicaManager}.
    @param metadata: the L{kafkatw.broker.metadata_cache.MetadataCache}.
    @param admin: creates and deletes topics and hands out producer ids
        (L{kafkatw.broker.admin.AdminManager}); its methods return Deferreds.
    @param advertised: this broker's (host, port) by broker id, for Metadata.
    @param now_ms: the wall clock (ms since the epoch; C{time.time}'s by default).
    @param hi_res_clock_ms: the reactor's time in ms (C{reactor.seconds()} by default).
    """

    def __init__(self, config: BrokerConfig, replica_manager: Any, metadata: Any, admin: Any,
                 reactor: Any, now_ms: Callable[[], int] | None = None,
                 group_coordinator: GroupCoordinator | None = None,
                 hi_res_clock_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.broker_id = config["broker.id"]
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.admin = admin
        self.reactor = reactor
        #: the wall clock, ms since the epoch (Kafka's C{Time.milliseconds()}): offset commit
        #: timestamps, a log start offset's deletions
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        #: the reactor's time in ms (Kafka's C{Time.hiResClockMs()}): fetch sessions' ages and
        #: the followers' fetch times (their lag, for the ISR)
        self.hi_res_clock_ms = hi_res_clock_ms or (lambda: int(reactor.seconds() * 1000))
        self.connections: set[Any] = set()
        self.in_flight: set[defer.Deferred] = set()
        if group_coordinator is None:
            offsets = OffsetStore(admin.registry, reactor, config["offsets.commit.batch.interval.ms"],
                                  config["offsets.commit.timeout.ms"], now_ms=self.now_ms)
            group_coordinator = GroupCoordinator(self.broker_id, config, reactor, lambda: list(metadata.brokers),
                                                 offsets, self._partition_exists, now_ms=self.now_ms)
        self.group_coordinator = group_coordinator
        #: KIP-932 share groups (kafkatw/broker/share_group_apis.py).
        self.init_share_groups()
        #: KIP-848 consumer groups (kafkatw/broker/consumer_group.py).
        self.consumer_group_coordinator = self.make_consumer_group_coordinator()
        self._handlers = {
            0: self.handle_produce,
            1: self.handle_fetch,
            2: self.handle_list_offsets,
            3: self.handle_metadata,
            18: self.handle_api_versions,
            23: self.handle_offset_for_leader_epoch,
            60: self.handle_describe_cluster,
            **self.topic_admin_handlers(),
            **self.admin_tool_handlers(),
            **self.classic_group_handlers(),
            **self.consumer_group_handlers(),
            **self.transaction_handlers(),
            **self.security_handlers(),
            **self.quota_handlers(),
            **self.share_group_handlers(),
        }
        #: The L{kafkatw.broker.authorizer.ZkAclAuthorizer} (set by the server when
        #: C{authorizer.class.name} is set; C{None}: every request is allowed).
        self.authorizer: Any = None
        #: The broker's L{kafkatw.broker.controller.KafkaController} (set by the server;
        #: C{None}: this broker answers controller requests C{NOT_CONTROLLER}).
        self.controller: Any = None
        #: Kafka's BrokerTopicMetrics and RequestMetrics, read by L{kafkatw.broker.metrics}.
        self.request_counts: dict[int, int] = {}
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        #: topic -> the same counters per topic (C{BrokerTopicMetrics,topic=T}).
        self.topic_messages_in: dict[str, int] = {}
        self.topic_bytes_in: dict[str, int] = {}
        self.topic_bytes_out: dict[str, int] = {}
        self.failed_produce_requests = 0
        self.failed_fetch_requests = 0
        #: Incremental fetch sessions (KIP-227; kafkatw/broker/fetch_session.py).
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        #: Fetch requests with session fields by context: C{full}, C{incremental},
        #: C{error} (the others, sessionless, are the rest of C{request_counts[1]}).
        self.fetch_session_requests = {"full": 0, "incremental": 0, "error": 0}
        #: A follower's incremental fetch skips the read of its quiet partitions
        #: (L{kafkatw.broker.fetch_session.IncrementalFetchContext.follower_read_topics});
        #: C{False} reads them all, as Kafka does (tests compare the two).
        self.skip_quiet_follower_partitions = True
        #: Followers' Fetch requests and their size in bytes (Kafka's RequestBytes of FetchFollower).
        self.follower_fetch_requests = 0
        self.follower_fetch_request_bytes = 0
        #: Client quotas (kafkatw/broker/quota_manager.py), filled from ZooKeeper by the server.
        self.quotas = ClientQuotas(reactor, config["quota.window.num"], config["quota.window.size.seconds"])
        #: Seconds of a monotonic clock, for request handler time (C{request_percentage}).
        self.handler_timer: Callable[[], float] = time.perf_counter
        self._handling: tuple[RequestContext, float] | None = None

    # --- connections ---------------------------------------------------------

    def connection_opened(self, connection: Any) -> None:
        self.connections.add(connection)

    def connection_closed(self, connection: Any) -> None:
        self.connections.discard(connection)

    # --- dispatch ------------------------------------------------------------

    def handle(self, header: RequestHeader, frame: bytes, connection: ConnectionContext = NO_CONNECTION,
               run: ProduceRun | None = None) -> Any:
        """
        Serve one request frame arriving on C{connection}.

        @param run: for a Produce request read with others
            (L{produce_run}): its appends are written by C{run.finish()},
            which returns its answer; this returns its index in that list
            (C{None}: no answer, acks=0).

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
        if api_key == 1 and request.replica_id >= 0:
            self.follower_fetch_requests += 1
            self.follower_fetch_request_bytes += len(frame)
        context = _tuple_new(RequestContext, (header, connection))  # RequestContext(header, connection), faster
        if run is not None:
            if api_key != 0 or self.quotas.enabled:
                raise ValueError("only Produce requests without client quotas are served in a ProduceRun")
            run.append_queued()  # the appends of the requests before it come first
            return self.handle_produce(context, request, run)
        if not self.quotas.enabled:
            result = self._handlers[api_key](context, request)
        else:
            self._handling = (context, self.handler_timer())
            try:
                result = self._handlers[api_key](context, request)
            finally:
                handling, self._handling = self._handling, None
            if handling is not None and not self._quota_exempt(context, request):
                # Answered later (or not through _respond): the handler's time counts now.
                user, client_id = self._quota_client(context)
                self.quotas.request.record((self.handler_timer() - handling[1]) * 100.0, user, client_id,
                                           self.quotas.now_ms())
        if isinstance(result, defer.Deferred):
            self._track(result)
        return result

    def _track(self, result: defer.Deferred) -> None:
        """Keep C{result} in L{in_flight} until it fires."""
        self.in_flight.add(result)

        def _done(value: Any) -> Any:
            self.in_flight.discard(result)
            return value

        result.addBoth(_done)

    def _respond(self, context: RequestContext, body: Any) -> bytes:
        if self.quotas.enabled and isinstance(body, dict) and "throttle_time" in body and context.api_key != 27:
            throttle_ms = max(int(body["throttle_time"] or 0), self._request_throttle_ms(context))
            body["throttle_time"] = throttle_ms
            self._throttle(context, throttle_ms)
        return encode_response(context.api_key, context.api_version, context.correlation_id, body)

    # --- client quotas (kafkatw/broker/quota_manager.py, KIP-219) ------------

    @staticmethod
    def _quota_client(context: RequestContext) -> tuple[str, str]:
        """The (user, client id) a request's quotas are looked up by."""
        return user_of_principal(context.connection.principal), context.client_id or ""

    @staticmethod
    def _quota_exempt(context: RequestContext, request: Any) -> bool:
        """
        A follower's fetch (C{replica_id} >= 0) and WriteTxnMarkers are
        broker-to-broker requests, not a client's: no client quota.
        """
        return (context.api_key == 1 and getattr(request, "replica_id", -1) >= 0) or context.api_key == 27

    def _request_throttle_ms(self, context: RequestContext) -> int:
        """
        Record the handler time of C{context}'s request if it is being
        handled now (C{request_percentage}) and return the request throttle.
        """
        quotas = self.quotas
        elapsed_s = 0.0
        handling = self._handling
        if handling is not None and handling[0] is context:
            self._handling = None
            elapsed_s = self.handler_timer() - handling[1]
        user, client_id = self._quota_client(context)
        return quotas.request.record_and_get_throttle_time_ms(user, client_id, elapsed_s * 100.0, quotas.now_ms())

    @staticmethod
    def _throttle(context: RequestContext, throttle_ms: int) -> None:
        """Mute the request's connection for C{throttle_ms} once it is answered (KIP-219)."""
        connection = context.connection.connection
        if throttle_ms > 0 and connection is not None:
            connection.throttle(throttle_ms)

    # --- authorization (docs/security.md) ------------------------------------

    def _allowed(self, context: RequestContext, operation: AclOperation, resource_type: ResourceType,
                 name: str = CLUSTER_NAME) -> bool:
        """Whether the request's principal may do C{operation} on the resource (always, without an authorizer)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        connection = context.connection
        return authorizer.authorize(connection.principal, connection.client_host, operation, resource_type, name)

    def _denied_topics(self, context: RequestContext, operation: AclOperation, names: Any) -> set[str]:
        """The topics of C{names} the principal may not C{operation} (call only with an authorizer)."""
        return {name for name in set(names) if not self._allowed(context, operation, ResourceType.TOPIC, name)}

    def _authorized_operations(self, context: RequestContext, resource_type: ResourceType, name: str) -> int:
        """The C{authorized_operations} bit set (every supported operation without an authorizer, as Kafka)."""
        authorizer = self.authorizer
        if authorizer is None:
            return operations_bit_field(supported_operations(resource_type))
        connection = context.connection
        return authorizer.authorized_operations(connection.principal, connection.client_host, resource_type, name)

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
        """
        A topic's Metadata entry.  Kafka's brokers learn a topic from the
        controller's UpdateMetadata, which carries every partition's leader,
        after the leaders were told (LeaderAndIsr); until then the topic is
        C{LEADER_NOT_AVAILABLE} (the answer to the Metadata request that
        auto-created it).  The same here: a topic with a partition whose
        state znode is not read yet is C{LEADER_NOT_AVAILABLE} with no
        partitions, and a partition this broker leads by its state but does
        not yet serve as leader is C{LEADER_NOT_AVAILABLE} with leader -1, as
        Kafka answers a partition whose leader is not alive
        (C{MetadataCache.getPartitionMetadata}): a client that goes to the
        named leader is never told C{NOT_LEADER_OR_FOLLOWER} by it.
        """
        meta = self.metadata.topics.get(name)
        if meta is None:
            return {"error_code": int(ErrorCode.unknown_topic_or_partition), "name": name, "partitions": []}
        states = self.metadata.partition_states
        if any((name, index) not in states for index in meta.partitions):
            return {"error_code": int(ErrorCode.leader_not_available), "name": name, "partitions": [],
                    "topic_authorized_operations": -2147483648}
        partitions = []
        for index in sorted(meta.partitions):
            replicas = meta.partitions[index]
            leader = self.metadata.leader(name, index)
            if leader == self.metadata.broker_id and not self._serving_as_leader(name, index):
                leader = -1
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

    def _serving_as_leader(self, topic: str, partition: int) -> bool:
        """Whether this broker's replica leads the partition at the epoch of its state znode."""
        if self.replica_manager is None:
            return True  # no replicas here (a metadata-only harness): the state znode is all there is
        hosted = self.replica_manager.partitions.get((topic, partition))
        return hosted is not None and hosted.is_leader and \
            hosted.leader_epoch >= self.metadata.leader_epoch(topic, partition)

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

    def _metadata_operations(self, context: RequestContext, request: Any, body: dict) -> dict:
        """Fill C{topic_authorized_operations} / C{cluster_authorized_operations} when asked (KIP-430)."""
        if getattr(request, "include_topic_authorized_operations", False):
            for topic in body["topics"]:
                topic["topic_authorized_operations"] = self._authorized_operations(
                    context, ResourceType.TOPIC, topic["name"])
        if getattr(request, "include_cluster_authorized_operations", False):
            body["cluster_authorized_operations"] = self._cluster_operations(context)
        return body

    def _cluster_operations(self, context: RequestContext) -> int:
        """The cluster's bit set, 0 without Describe on it (Kafka's C{computeDescribeClusterResponse})."""
        if not self._allowed(context, AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return 0
        return self._authorized_operations(context, ResourceType.CLUSTER, CLUSTER_NAME)

    def handle_metadata(self, context: RequestContext, request: Any) -> Any:
        """
        With an authorizer: all-topics requests list only the topics the
        principal may Describe; a named topic it may not Describe, or may not
        auto-create (Create on the cluster or the topic), gets
        C{TOPIC_AUTHORIZATION_FAILED}, whether it exists or not (Kafka's
        C{handleTopicMetadataRequest}).
        """
        authorizer = self.authorizer
        if request.topics is None or (context.api_version == 0 and not request.topics):
            names = sorted(self.metadata.topics)
            if authorizer is not None:
                denied = self._denied_topics(context, AclOperation.DESCRIBE, names)
                names = [name for name in names if name not in denied]
            return self._respond(context, self._metadata_operations(
                context, request, self._metadata_body(names, {}, context.connection.listener_name)))
        names, unknown_ids = self.metadata_topic_names(request.topics)
        allow_auto = getattr(request, "allow_auto_topic_creation", True) and self.config["auto.create.topics.enable"]
        errors: dict[str, ErrorCode] = {}
        creating = []
        for name in names:
            if authorizer is not None and not self._allowed(context, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                errors[name] = ErrorCode.topic_authorization_failed
                continue
            if name in self.metadata.topics:
                continue
            invalid = validate_topic_name(name)
            if invalid:
                errors[name] = invalid
            elif allow_auto:
                if authorizer is not None and not (
                        self._allowed(context, AclOperation.CREATE, ResourceType.CLUSTER)
                        or self._allowed(context, AclOperation.CREATE, ResourceType.TOPIC, name)):
                    errors[name] = ErrorCode.topic_authorization_failed
                else:
                    creating.append(name)
        if not creating:
            body = self._metadata_body(names, errors, context.connection.listener_name)
            body["topics"].extend(unknown_ids)
            return self._respond(context, self._metadata_operations(context, request, body))
        return defer.Deferred.fromCoroutine(self._auto_create_then_metadata(context, names, errors, creating,
                                                                            request))

    async def _auto_create_then_metadata(self, context: RequestContext, names: list[str],
                                         errors: dict[str, ErrorCode], creating: list[str],
                                         request: Any = None) -> bytes:
        """
        Auto-create C{creating}, then answer as Kafka's
        C{KafkaApis.createTopic} does: each topic created (or created
        meanwhile by another request) is C{LEADER_NOT_AVAILABLE} with no
        partitions, so that the client asks again once the leaders serve.
        """
        for name in creating:
            try:
                await self.admin.create_topic(
                    name, self.config["num.partitions"], self.config["default.replication.factor"], None, {}
                )
                errors[name] = ErrorCode.leader_not_available
            except KafkaError as e:
                errors[name] = ErrorCode.leader_not_available if e.error_code == ErrorCode.topic_already_exists \
                    else e.error_code
            except ZooKeeperError as e:
                _log.warn("auto-creating topic {topic} failed: ZooKeeper unavailable ({error})", topic=name, error=e)
                errors[name] = ErrorCode.leader_not_available
        return self._respond(context, self._metadata_operations(
            context, request, self._metadata_body(names, errors, context.connection.listener_name)))

    # --- Produce -------------------------------------------------------------

    def handle_produce(self, context: RequestContext, request: Any, run: "ProduceRun | None" = None) -> Any:
        """
        Append each partition's batches on its leader.  With acks=all the
        answer waits in the produce purgatory until every in-sync replica has
        the batches (or C{timeout} passes: C{REQUEST_TIMED_OUT}); an ISR
        smaller than C{min.insync.replicas} refuses the write before appending
        (C{NOT_ENOUGH_REPLICAS}).

        @param run: the L{ProduceRun} of the Produce requests read together
            with this one: the appends are written by L{ProduceRun.finish},
            which returns what this request is answered with; this call
            returns the request's index in the run (C{None} for acks=0:
            no answer).
        """
        acks = request.acks
        produce_bytes = sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data) \
            if self.quotas.enabled else 0
        required: dict[tuple[str, int], int] = {}
        if request.transactional_id is not None and self._refuse_transactional_produce(context, request):
            code = ErrorCode.transactional_id_authorization_failed
            results = [
                (t.name, [{"index": p.index, "error_code": int(code), "base_offset": -1} for p in t.partition_data])
                for t in request.topic_data
            ]
        else:
            # acks=0 in a run: nobody reads the partition responses (no quotas there, no answer)
            results = self._produce_append(context, request, required, run is None,
                                           run is None or acks != 0)
        if run is not None:
            if acks == 0 and not produce_bytes:
                return None  # no answer, whatever the write does
            return run.add(lambda errors: self._produce_finish(context, request, results, required, produce_bytes,
                                                               errors))
        return self._produce_finish(context, request, results, required, produce_bytes)

    def _produce_append(self, context: RequestContext, request: Any, required: dict[tuple[str, int], int],
                        write: bool = True, answered: bool = True) -> list:
        """
        Append a Produce request's partitions (with C{write=False}, see
        L{kafkatw.broker.replica_manager.ReplicaManager.append}); fill
        C{required} (acks=all: the offset each partition's high watermark
        must reach).

        @param answered: C{False}: the partition responses of appended
            partitions are not built (an acks=0 request, answered by nobody).
        @return: C{[(topic, [partition response dict, ...]), ...]}.
        """
        results = []
        append = self.replica_manager.append
        min_isr = self.replica_manager.min_insync_replicas if request.acks == -1 else None
        denied = None if self.authorizer is None else \
            self._denied_topics(context, AclOperation.WRITE, (t.name for t in request.topic_data))
        for topic in request.topic_data:
            name = topic.name
            if denied and name in denied:
                results.append((name, [{"index": p.index, "error_code": int(ErrorCode.topic_authorization_failed),
                                        "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
                                       for p in topic.partition_data]))
                continue
            partitions = []
            for p in topic.partition_data:
                records = p.records
                try:
                    if records is None:
                        raise CorruptRecordError("a null record set")
                    result = append(name, p.index, records, min_isr(name) if min_isr is not None else None, write)
                except KafkaError as e:
                    self.failed_produce_requests += 1
                    code = e.error_code
                    partitions.append({"index": p.index, "error_code": int(code), "base_offset": -1,
                                       "log_append_time": -1, "log_start_offset": -1,
                                       "error_message": str(e) or None})
                    continue
                if not result.duplicate:
                    self._count_in(name, result.record_count, len(records))
                if min_isr is not None:
                    required[(name, p.index)] = result.last_offset + 1
                if answered:
                    partitions.append({
                        "index": p.index, "error_code": 0, "base_offset": result.base_offset,
                        "log_append_time": result.log_append_time_ms, "log_start_offset": result.log_start_offset,
                    })
            results.append((name, partitions))
        return results

    def _produce_finish(self, context: RequestContext, request: Any, results: list,
                        required: dict[tuple[str, int], int], produce_bytes: int,
                        write_errors: dict[tuple[str, int], Exception] | None = None) -> Any:
        """
        Answer a Produce request whose appends are in the logs: C{None}
        (acks=0), the response, or a Deferred of it (acks=all).

        @param write_errors: C{(topic, partition)} -> the error of a write
            that failed after the appends (L{ProduceRun}); the partitions
            whose batches it lost are answered with it.
        """
        if write_errors:
            self._fail_unwritten(results, required, write_errors)
        if required:
            timeout = request.timeout
            timeout_ms = int(timeout.total_seconds() * 1000) if hasattr(timeout, "total_seconds") else int(timeout)
            d = self.replica_manager.delay_produce(required, max(timeout_ms, 0))
            return d.addCallback(self._produce_acknowledged, context, results, produce_bytes)
        if request.acks == 0:
            if produce_bytes:
                self._throttle(context, max(self._produce_throttle_ms(context, produce_bytes),
                                            self._request_throttle_ms(context)))
            return None
        return self._produce_response(context, results, produce_bytes)

    def _fail_unwritten(self, results: list, required: dict[tuple[str, int], int],
                        write_errors: dict[tuple[str, int], Exception]) -> None:
        """
        Answer C{KAFKA_STORAGE_ERROR} for the partitions whose appended batches
        a failed write lost: those at or past the log end offset left by it
        (L{kafkatw.storage.log.PartitionLog.write_pending}).
        """
        for name, partitions in results:
            for entry in partitions:
                key = (name, entry["index"])
                error = write_errors.get(key)
                if error is None or entry["error_code"] != 0:
                    continue
                partition = self.replica_manager.partitions.get(key)
                if partition is not None and entry["base_offset"] < partition.log.log_end_offset:
                    continue  # written before the failure
                self.failed_produce_requests += 1
                required.pop(key, None)
                entry.update(error_code=int(ErrorCode.kafka_storage_error), base_offset=-1, log_append_time=-1,
                             log_start_offset=-1, error_message=str(error) or None)

    #: What L{produce_in_run} returns for a request it leaves to L{handle}.
    NOT_SIMPLE = object()

    def produce_in_run(self, frame: Any, connection: ConnectionContext, run: ProduceRun) -> Any:
        """
        L{handle} for a Produce request frame of a L{ProduceRun} of the
        common shape (v3-v9, acks 0 or 1, no transactional id, one topic,
        one partition; no authorizer), its header and body decoded by hand
        (L{simple_produce_decoder}; kio's entities and the request header
        of an acks=0 request are not built) and its append queued
        (L{ProduceRun.queue}): the same appends, counters and response as
        L{handle}.

        @return: C{None} (acks=0: no answer), C{(header, index)} (acks=1:
            the request's L{RequestHeader} and its index in the run's
            answers), or L{NOT_SIMPLE}: any other request or a frame that
            does not parse (call L{handle}).
        """
        try:
            api_key, version, correlation_id, client_size = _REQUEST_HEADER.unpack_from(frame, 0)
        except struct.error:
            return self.NOT_SIMPLE
        if api_key != 0 or not 3 <= version <= 9 or self.authorizer is not None or self.quotas.enabled:
            return self.NOT_SIMPLE
        body = 10 + client_size if client_size > 0 else 10
        if version >= 9:  # request header v2: tagged fields (none, as clients send it)
            if len(frame) <= body or frame[body] != 0:
                return self.NOT_SIMPLE
            body += 1
        decoded = simple_produce_decoder(frame, body, version >= 9)
        if decoded is None:
            return self.NOT_SIMPLE
        acks, _timeout, name, index, records = decoded
        if acks != 0 and acks != 1 or records is None:
            return self.NOT_SIMPLE
        counts = self.request_counts
        counts[0] = counts.get(0, 0) + 1
        results, i = run.queue(name, index, records)
        if acks == 0:
            return None
        client_id = None if client_size < 0 else str(frame[10:10 + client_size], "utf-8", "replace")
        header = _tuple_new(RequestHeader, (0, version, correlation_id, client_id, body))
        context = _tuple_new(RequestContext, (header, connection))
        return header, run.add(lambda errors: self._produce_acks1_finish(context, name, index, results[i], errors))

    def _append_many(self, topic: str, partition: int, records_list: list) -> list:
        """
        Append several requests' records to one partition
        (L{kafkatw.broker.replica_manager.ReplicaManager.append_many}),
        counting them as L{_produce_append} does.

        @return: one C{AppendResult} or C{KafkaError} per item.
        """
        results = self.replica_manager.append_many(topic, partition, records_list)
        count = size = failed = 0
        for records, result in zip(records_list, results):
            if isinstance(result, KafkaError):
                failed += 1
            elif not result.duplicate:
                count += result.record_count
                size += len(records)
        self.failed_produce_requests += failed
        if count or size:
            self._count_in(topic, count, size)
        return results

    def _count_in(self, topic: str, record_count: int, size_bytes: int) -> None:
        """Kafka's BrokerTopicMetrics MessagesInPerSec and BytesInPerSec, broker-wide and for C{topic}."""
        self.messages_in += record_count
        self.bytes_in += size_bytes
        topic_messages_in = self.topic_messages_in
        topic_messages_in[topic] = topic_messages_in.get(topic, 0) + record_count
        topic_bytes_in = self.topic_bytes_in
        topic_bytes_in[topic] = topic_bytes_in.get(topic, 0) + size_bytes

    def _produce_acks1_finish(self, context: RequestContext, topic: str, partition: int, result: Any,
                              write_errors: dict[tuple[str, int], Exception]) -> bytes:
        """L{_produce_finish} of an acks=1 request of L{produce_in_run} (C{result}: its append's)."""
        if not write_errors and not isinstance(result, KafkaError) and not self.quotas.enabled:
            header = context.header
            version = header.api_version
            template = _produce_templates.get((version, topic))
            if template is None:
                template = _produce_template(version, topic)
            prefix, partition_struct, suffix = template
            if version >= 5:
                body = partition_struct.pack(partition, 0, result.base_offset, result.log_append_time_ms,
                                             result.log_start_offset)
            else:
                body = partition_struct.pack(partition, 0, result.base_offset, result.log_append_time_ms)
            return _INT32.pack(header.correlation_id) + prefix + body + suffix
        if isinstance(result, KafkaError):
            entry = {"index": partition, "error_code": int(result.error_code), "base_offset": -1,
                     "log_append_time": -1, "log_start_offset": -1, "error_message": str(result) or None}
        else:
            entry = {"index": partition, "error_code": 0, "base_offset": result.base_offset,
                     "log_append_time": result.log_append_time_ms, "log_start_offset": result.log_start_offset}
        results = [(topic, [entry])]
        if write_errors:
            self._fail_unwritten(results, {}, write_errors)
        return self._produce_response(context, results)

    def produce_run(self) -> "ProduceRun | None":
        """
        A L{ProduceRun} for Produce requests read together from one
        connection, or C{None} when they must be served one by one (client
        quotas are on: a request's throttle mutes the connection before the
        next one is read, KIP-219).
        """
        if self.quotas.enabled:
            return None
        return ProduceRun(self)

    def _produce_acknowledged(self, errors: dict, context: RequestContext, results: list,
                              produce_bytes: int = 0) -> bytes:
        for name, partitions in results:
            for entry in partitions:
                error = errors.get((name, entry["index"]))
                if error is not None and entry["error_code"] == 0:
                    self.failed_produce_requests += 1
                    entry.update(error_code=int(error.error_code), error_message=str(error) or None)
        return self._produce_response(context, results, produce_bytes)

    def _produce_throttle_ms(self, context: RequestContext, produce_bytes: int) -> int:
        """Record a produce request's bytes (C{producer_byte_rate}) and return its bandwidth throttle."""
        quotas = self.quotas
        user, client_id = self._quota_client(context)
        return quotas.produce.record_and_get_throttle_time_ms(user, client_id, produce_bytes, quotas.now_ms())

    def _produce_response(self, context: RequestContext, results: list, produce_bytes: int = 0) -> bytes:
        """The ProduceResponse, encoded by hand (L{encode_produce_response}); quotas as L{_respond}."""
        throttle_ms = self._produce_throttle_ms(context, produce_bytes) if produce_bytes else 0
        if self.quotas.enabled:
            throttle_ms = max(throttle_ms, self._request_throttle_ms(context))
            self._throttle(context, throttle_ms)
        return encode_produce_response(context.api_version, context.correlation_id, results, throttle_ms)

    # --- Fetch ---------------------------------------------------------------

    def _read_partitions(self, request: Any, denied: set[str] | None = None, quota_max_bytes: int | None = None,
                         fetch_topics: Any = None) -> tuple[list[tuple[str, list[PartitionFetchData]]], int, bool]:
        """
        Read every requested partition once, on its leader.  A consumer reads
        below the high watermark; a follower (C{replica_id} >= 0) reads up to
        the log end offset, and its fetch offset tells the leader what it holds
        (L{kafkatw.broker.partition.Partition.update_follower}).

        @param fetch_topics: the topics to read, shaped as C{request.topics}
            (an incremental fetch reads its session's,
            L{kafkatw.broker.fetch_session.FetchSession.fetch_topics});
            C{None}: C{request.topics}.

        @return: (topics for the response, bytes found, whether any partition
            had an error).
        """
        replica_id = getattr(request, "replica_id", -1)
        read_committed = replica_id < 0 and getattr(request, "isolation_level", 0) == READ_COMMITTED
        remaining = request.max_bytes if getattr(request, "max_bytes", None) is not None else 0x7FFFFFFF
        if quota_max_bytes is not None:  # Kafka's getMaxValueInQuotaWindow bound
            remaining = min(remaining, quota_max_bytes)
        topics = []
        total = 0
        any_error = False
        for topic in request.topics if fetch_topics is None else fetch_topics:
            name = topic.topic
            if denied and name in denied:
                any_error = True
                topics.append((name, [PartitionFetchData(p.partition, int(ErrorCode.topic_authorization_failed), -1,
                                                         -1, -1, (), 0) for p in topic.partitions]))
                continue
            partitions = []
            for p in topic.partitions:
                try:
                    # Kafka's Partition.getLocalLog: the leader epoch (KIP-320) before the role
                    partition = self.replica_manager.get_partition(name, p.partition)
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    log = partition.leader_log()
                    if replica_id >= 0:
                        if log.log_start_offset <= p.fetch_offset <= log.log_end_offset:
                            # what the follower holds; not for a fetch in error (Kafka's updateFollowerFetchState)
                            partition.update_follower(replica_id, p.fetch_offset, getattr(p, "log_start_offset", -1))
                        max_offset = log.log_end_offset
                    else:
                        max_offset = log.high_watermark
                    high_watermark = log.high_watermark
                    last_stable_offset = log.last_stable_offset
                    if read_committed:
                        max_offset = last_stable_offset
                    regions: list[Any] = []
                    size = 0
                    if remaining > 0 or total == 0:
                        # KIP-74: until a partition returned data, its first batch comes whatever the limits
                        # (Kafka's minOneMessage), a zero limit too; 1 byte reads the same for log.read
                        limit = max(min(p.partition_max_bytes, remaining), 0 if total else 1)
                        regions = log.read(p.fetch_offset, limit, max_offset, min_one_batch=total == 0)
                        size = sum(r.length for r in regions)
                        remaining = max(0, remaining - size)
                    elif not log.log_start_offset <= p.fetch_offset <= log.log_end_offset:
                        log.read(p.fetch_offset, 1, max_offset)  # raises OffsetOutOfRange
                    aborted = None
                    if read_committed:
                        aborted = [(t.producer_id, t.first_offset) for t in
                                   log.collect_aborted_transactions(p.fetch_offset, max_offset)] if size else []
                    partitions.append(PartitionFetchData(
                        p.partition, 0, high_watermark, last_stable_offset, log.log_start_offset, regions, size,
                        aborted))
                    total += size
                except KafkaError as e:
                    any_error = True
                    self.failed_fetch_requests += 1
                    partitions.append(PartitionFetchData(p.partition, int(e.error_code), -1, -1, -1, (), 0))
                except OSError as e:  # a read of a failing log dir (EIO): the dir goes offline (KIP-112)
                    any_error = True
                    self.failed_fetch_requests += 1
                    self.replica_manager.log_manager.log_failed(name, p.partition, e)
                    partitions.append(PartitionFetchData(p.partition, int(ErrorCode.kafka_storage_error), -1, -1, -1,
                                                         (), 0))
            topics.append((name, partitions))
        return topics, total, any_error

    def handle_fetch(self, context: RequestContext, request: Any) -> Any:
        """
        With an authorizer, a consumer needs Read on each topic and a
        follower (C{replica_id} >= 0) ClusterAction on the cluster; the
        partitions of the others get C{TOPIC_AUTHORIZATION_FAILED}, as Kafka's
        C{handleFetchRequest} answers.

        A fetch with C{session_id} 0 and C{session_epoch} -1 (every fetch
        before v7, and clients without fetch sessions) is read and answered
        as it is; any other goes through its fetch session (KIP-227,
        L{kafkatw.broker.fetch_session}).
        """
        fetch_context = None
        fetch_topics = request.topics
        if getattr(request, "session_epoch", FINAL_EPOCH) != FINAL_EPOCH \
                or getattr(request, "session_id", INVALID_SESSION_ID) != INVALID_SESSION_ID:
            fetch_context = self.fetch_sessions.new_context(
                request.session_id, request.session_epoch, request.replica_id >= 0, request.topics,
                request.forgotten_topics_data, self.hi_res_clock_ms())
            if fetch_context.error_code:
                self.fetch_session_requests["error"] += 1
                return self._fetch_response(context, [], request, fetch_context)
            self.fetch_session_requests["full" if fetch_context.session is None else "incremental"] += 1
            fetch_topics = fetch_context.topics
        denied = None
        if self.authorizer is not None:
            names = [t.topic for t in fetch_topics]
            if getattr(request, "replica_id", -1) >= 0:
                denied = set() if self._allowed(context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) \
                    else set(names)
            else:
                denied = self._denied_topics(context, AclOperation.READ, names)
        quota_max_bytes = None
        if self.quotas.enabled and not self._quota_exempt(context, request):
            bound = self.quotas.fetch.max_value_in_window(*self._quota_client(context))
            quota_max_bytes = None if bound is None else max(1, int(bound))
        # a follower's incremental fetch does not read its quiet partitions (kafkatw/broker/fetch_session.py)
        quiet = fetch_context is not None and fetch_context.session is not None \
            and fetch_context.session.privileged and not denied and self.skip_quiet_follower_partitions
        topics, total, any_error = self._read_partitions(
            request, denied, quota_max_bytes, self._follower_read_topics(fetch_context, request) if quiet
            else fetch_topics)
        max_wait_ms = int(request.max_wait.total_seconds() * 1000)
        if any_error or total >= request.min_bytes or max_wait_ms <= 0 or 0 < request.max_bytes <= total:
            return self._fetch_response(context, topics, request, fetch_context)
        tps = [(t.topic, p.partition) for t in fetch_topics for p in t.partitions]
        if not tps:
            return self._fetch_response(context, topics, request, fetch_context)
        d = self.replica_manager.delay_fetch(tps, request.min_bytes, total, max_wait_ms,
                                             replica=getattr(request, "replica_id", -1) >= 0,
                                             stable_offsets=self._stable_offsets(request, topics))
        d.addCallback(lambda _: self._fetch_response(
            context, self._read_partitions(
                request, denied, quota_max_bytes, self._follower_read_topics(fetch_context, request) if quiet
                else fetch_topics)[0],
            request, fetch_context))
        return d

    def _follower_read_topics(self, fetch_context: Any, request: Any) -> list:
        """The partitions of a follower's incremental fetch that need a read (its quiet ones do not)."""
        return fetch_context.follower_read_topics(self.replica_manager.partitions, request.replica_id,
                                                  self.hi_res_clock_ms())

    def _fetch_response(self, context: RequestContext, topics: list, request: Any = None,
                        fetch_context: Any = None) -> tuple[list, int]:
        """
        Encode the FetchResponse of the partitions read (C{topics}); a
        session's C{fetch_context} picks what is answered and the session id.
        """
        size = sum(p.records_bytes for _, partitions in topics for p in partitions)
        throttle_ms = 0
        if self.quotas.enabled and not self._quota_exempt(context, request):
            # Kafka's handleFetchRequest: a consumer over its consumer_byte_rate or
            # request_percentage gets an empty response carrying the throttle.
            quotas = self.quotas
            user, client_id = self._quota_client(context)
            now_ms = quotas.now_ms()
            bandwidth_ms = quotas.fetch.record_and_get_throttle_time_ms(user, client_id, size, now_ms)
            throttle_ms = max(bandwidth_ms, self._request_throttle_ms(context))
            if throttle_ms > 0:
                quotas.fetch.unrecord(user, client_id, size, now_ms)
                topics, size = [], 0
                self._throttle(context, throttle_ms)
        error_code = 0
        session_id = INVALID_SESSION_ID
        if fetch_context is not None:
            if throttle_ms > 0:
                # Kafka's getThrottledResponse: nothing answered, the session as it was
                error_code, session_id = fetch_context.throttled()
            else:
                topics, error_code, session_id = fetch_context.finish(topics)
        if size:
            self.bytes_out += size
            topic_bytes_out = self.topic_bytes_out
            for name, partitions in topics:
                sent = sum(p.records_bytes for p in partitions)
                if sent:
                    topic_bytes_out[name] = topic_bytes_out.get(name, 0) + sent
        return encode_fetch_response(context.api_version, context.correlation_id, topics, throttle_ms, error_code,
                                     session_id)

    # --- ListOffsets ---------------------------------------------------------

    def handle_list_offsets(self, context: RequestContext, request: Any) -> bytes:
        topics = []
        denied = None if self.authorizer is None else \
            self._denied_topics(context, AclOperation.DESCRIBE, (t.name for t in request.topics))
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                entry = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                         "leader_epoch": -1}
                if denied and topic.name in denied:
                    entry["error_code"] = int(ErrorCode.topic_authorization_failed)
                    partitions.append(entry)
                    continue
                try:
                    # the leader epoch (KIP-320) before the role, as Fetch (Kafka's Partition.getLocalLog)
                    partition = self.replica_manager.get_partition(topic.name, p.partition_index)
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    log = partition.leader_log()
                    ts = p.timestamp
                    # Kafka's Partition.fetchOffsetForTimestamp: a consumer sees the offsets below the
                    # high watermark (the last stable offset for read_committed), a replica the whole log
                    if getattr(request, "replica_id", -1) >= 0:
                        last_fetchable = log.log_end_offset
                    elif getattr(request, "isolation_level", 0) == READ_COMMITTED:
                        last_fetchable = log.last_stable_offset
                    else:
                        last_fetchable = log.high_watermark
                    if ts == LATEST_TIMESTAMP:
                        entry["offset"] = last_fetchable
                    elif ts == EARLIEST_TIMESTAMP or ts == EARLIEST_LOCAL_TIMESTAMP and context.api_version >= 8:
                        entry["offset"] = log.log_start_offset
                    elif ts == MAX_TIMESTAMP and context.api_version >= 7:
                        found = log.max_timestamp_and_offset(
                            log.last_stable_offset if getattr(request, "isolation_level", 0) == READ_COMMITTED
                            else None)
                        if found is not None:
                            entry["offset"], entry["timestamp"] = found
                    elif ts < 0:
                        raise kafka_error(ErrorCode.invalid_request, f"timestamp {ts}")
                    else:
                        found = log.offset_for_timestamp(ts, upper_offset=last_fetchable)
                        if found is not None:
                            entry["offset"], entry["timestamp"] = found
                    entry["leader_epoch"] = partition.leader_epoch
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                except OSError as e:  # a read of a failing log dir (EIO): the dir goes offline (KIP-112)
                    self.replica_manager.log_manager.log_failed(topic.name, p.partition_index, e)
                    entry.update(error_code=int(ErrorCode.kafka_storage_error), offset=-1, timestamp=-1)
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return self._respond(context, {"throttle_time": 0, "topics": topics})

    # --- OffsetForLeaderEpoch ---------------------------------------------------

    def handle_offset_for_leader_epoch(self, context: RequestContext, request: Any) -> bytes:
        """
        For each partition, the largest epoch at or below the requested one
        and the offset where it ended (KIP-101, KIP-279): a follower truncates
        to it, a KIP-320 consumer validates its position with it.
        """
        topics = []
        denied: set[str] | None = None
        if self.authorizer is not None:
            names = [t.topic for t in request.topics]
            if getattr(request, "replica_id", -1) != -1:  # a follower (or -2, debug): ClusterAction, as Kafka's
                denied = set() if self._allowed(context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) \
                    else set(names)
            else:
                denied = self._denied_topics(context, AclOperation.DESCRIBE, names)
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                entry = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
                if denied and topic.topic in denied:
                    code = ErrorCode.topic_authorization_failed if getattr(request, "replica_id", -1) == -1 \
                        else ErrorCode.cluster_authorization_failed
                    entry["error_code"] = int(code)
                    partitions.append(entry)
                    continue
                try:
                    # the leader epoch before the role, as Fetch (Kafka's Partition.getLocalLog)
                    partition = self.replica_manager.get_partition(topic.topic, p.partition)
                    partition.check_leader_epoch(p.current_leader_epoch)
                    entry["leader_epoch"], entry["end_offset"] = \
                        partition.leader_log().end_offset_for_epoch(p.leader_epoch)
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                partitions.append(entry)
            topics.append({"topic": topic.topic, "partitions": partitions})
        return self._respond(context, {"throttle_time": 0, "topics": topics})

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
            "cluster_authorized_operations": OPERATIONS_NOT_REQUESTED,
        }
        if getattr(request, "include_cluster_authorized_operations", False):
            body["cluster_authorized_operations"] = self._cluster_operations(context)
        if getattr(request, "endpoint_type", 1) != 1:
            body.update(error_code=int(ErrorCode.unsupported_endpoint_type), brokers=[], controller_id=-1,
                        endpoint_type=request.endpoint_type,
                        error_message="this broker describes only broker endpoints (endpoint_type 1)")
        return self._respond(context, body)

    # --- helpers of the group APIs (classic, KIP-848, share groups) ----------

    @staticmethod
    def _client_host(context: RequestContext) -> str:
        host = context.connection.client_host
        return f"/{host}" if host else ""

    def _partition_exists(self, topic: str, partition: int) -> bool:
        meta = self.metadata.topics.get(topic)
        return meta is not None and partition in meta.partitions

    def _group_denied(self, context: RequestContext, group_id: str, operation: AclOperation = AclOperation.READ
                      ) -> bool:
        return self.authorizer is not None and not self._allowed(context, operation, ResourceType.GROUP, group_id)
