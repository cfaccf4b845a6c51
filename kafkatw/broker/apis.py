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
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    operations_bit_field,
    supported_operations,
)
from ..security.sasl import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISM_TYPES, credential_from_salted_password
from ..zookeeper.bridge import ZooKeeperError
from ..zookeeper.zk_data import CommittedOffset
from .config_helper import describe_broker_configs, describe_topic_configs
from .fetch_session import FINAL_EPOCH, INVALID_SESSION_ID, FetchSessionCache
from .group_coordinator import GroupCoordinator, OffsetStore
from .quota_apis import QUOTA_VERSIONS, QuotaApis
from .quota_manager import ClientQuotas, user_of_principal
from .request_context import NO_CONNECTION, ConnectionContext, RequestContext
from .admin_tool_apis import ADMIN_TOOL_VERSIONS, AdminToolApis
from .share_group_apis import SHARE_GROUP_VERSIONS, ShareGroupApis
from .consumer_group_apis import CONSUMER_GROUP_VERSIONS, ConsumerGroupApis
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
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    8: (2, 9),  # OffsetCommit (v9: the generation id is a KIP-848 member epoch)
    9: (1, 9),  # OffsetFetch (v8 batches groups, v9 adds KIP-848 member epochs)
    10: (0, 4),  # FindCoordinator (key type 0 groups, 1 transactions)
    11: (0, 8),  # JoinGroup (v9's KIP-814 skip_assignment: not served)
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups (v5 filters by group type, KIP-848: not served)
    42: (0, 2),  # DeleteGroups
    22: (0, 4),  # InitProducerId (idempotent and transactional producers)
    32: (1, 4),  # DescribeConfigs
    23: (2, 4),  # OffsetForLeaderEpoch (KIP-101, KIP-279; followers and KIP-320 clients)
    37: (0, 3),  # CreatePartitions
    43: (0, 2),  # ElectLeaders (KIP-460; answered by the controller)
    45: (0, 0),  # AlterPartitionReassignments (KIP-455; answered by the controller)
    46: (0, 0),  # ListPartitionReassignments (KIP-455; answered by the controller)
    33: (0, 2),  # AlterConfigs (legacy: replaces a resource's whole set)
    44: (0, 1),  # IncrementalAlterConfigs (KIP-339)
    60: (0, 1),  # DescribeCluster (KIP-700; v2's fenced brokers are KRaft's)
    29: (1, 3),  # DescribeAcls (KIP-11, KIP-290 patterns; v2+ flexible)
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    17: (0, 1),  # SaslHandshake (before authentication: kafkatw.broker.authenticator)
    36: (0, 2),  # SaslAuthenticate (KIP-152; likewise)
    50: (0, 0),  # DescribeUserScramCredentials (KIP-554)
    51: (0, 0),  # AlterUserScramCredentials (KIP-554)
    **CONSUMER_GROUP_VERSIONS,  # ConsumerGroupHeartbeat, ConsumerGroupDescribe: kafkatw/broker/consumer_group_apis.py
    **ADMIN_TOOL_VERSIONS,  # DeleteRecords, DescribeLogDirs, OffsetDelete: kafkatw/broker/admin_tool_apis.py
    **TRANSACTION_VERSIONS,  # AddPartitionsToTxn ... ListTransactions: kafkatw/broker/transaction_apis.py
    **QUOTA_VERSIONS,  # DescribeClientQuotas, AlterClientQuotas: kafkatw/broker/quota_apis.py
    **SHARE_GROUP_VERSIONS,  # ShareGroupHeartbeat ... ShareAcknowledge (KIP-932): kafkatw/broker/share_group_apis.py
}

#: What ApiVersions advertises where it differs from L{SUPPORTED_VERSIONS}.
#: librdkafka before 2.8 enables gzip/snappy/lz4 only when Produce v0 is
#: advertised (confluentinc/librdkafka#4956), so Produce is listed from v0 as
#: Apache Kafka 4.0 does (KAFKA-18659) while v0–v2 requests are still refused.
ADVERTISED_VERSIONS: dict[int, tuple[int, int]] = {**SUPPORTED_VERSIONS, 0: (0, SUPPORTED_VERSIONS[0][1])}

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_tuple_new = tuple.__new__

LATEST_TIMESTAMP = -1
#: Fetch and ListOffsets C{isolation_level} of read-committed consumers (KIP-98).
READ_COMMITTED = 1
EARLIEST_TIMESTAMP = -2
#: ListOffsets v7+: the record with the largest timestamp (KIP-734).
MAX_TIMESTAMP = -3
#: ListOffsets v8+: the earliest offset in local storage (KIP-405; no tiered storage: the log start).
EARLIEST_LOCAL_TIMESTAMP = -4
#: The C{error_message} of DescribeAcls on a broker without an authorizer, with
#: C{SECURITY_DISABLED} (Kafka's C{AclApis.handleDescribeAcls}).
NO_AUTHORIZER = "No Authorizer is configured on the broker"
#: The same for CreateAcls and DeleteAcls (Kafka's C{SecurityDisabledException} there).
NO_AUTHORIZER_ALTER = "No Authorizer is configured."


def validate_topic_name(name: str | None) -> ErrorCode:
    """
    Kafka's topic name rules (C{Topic.validate}): 1–249 characters of
    C{[a-zA-Z0-9._-]}, not C{.} or C{..}.

    @return: C{ErrorCode.none} or C{ErrorCode.invalid_topic_exception}.
    """
    if not name or name in (".", "..") or len(name) > 249 or not _LEGAL_TOPIC.match(name):
        return ErrorCode.invalid_topic_exception
    return ErrorCode.none


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


class KafkaApis(TransactionApis, QuotaApis, AdminToolApis, ConsumerGroupApis, ShareGroupApis):
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
            33: self.handle_alter_configs,
            44: self.handle_incremental_alter_configs,
            60: self.handle_describe_cluster,
            29: self.handle_describe_acls,
            30: self.handle_create_acls,
            31: self.handle_delete_acls,
            17: self.handle_sasl_handshake,
            36: self.handle_sasl_authenticate,
            50: self.handle_describe_user_scram_credentials,
            51: self.handle_alter_user_scram_credentials,
            **self.admin_tool_handlers(),
            **self.consumer_group_handlers(),
            **self.transaction_handlers(),
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

    # --- CreateTopics / DeleteTopics ----------------------------------------

    def handle_create_topics(self, context: RequestContext, request: Any) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._create_topics(context, request))

    async def _create_topics(self, context: RequestContext, request: Any) -> bytes:
        results = []
        cluster_create = self._allowed(context, AclOperation.CREATE, ResourceType.CLUSTER)
        for topic in request.topics:
            entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None,
                                     "num_partitions": -1, "replication_factor": -1, "configs": None}
            if not cluster_create and not self._allowed(context, AclOperation.CREATE, ResourceType.TOPIC, topic.name):
                entry["error_code"] = int(ErrorCode.topic_authorization_failed)
                results.append(entry)
                continue
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
                    {k: c[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                    for c in describe_topic_configs(self.config, configs)
                ]
                if not self._allowed(context, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name):
                    entry.update(configs=None, topic_config_error_code=int(ErrorCode.topic_authorization_failed))
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
                if not self._allowed(context, AclOperation.DELETE, ResourceType.TOPIC, name) and (
                        name in self.metadata.topics
                        or not self._allowed(context, AclOperation.DESCRIBE, ResourceType.TOPIC, name)):
                    raise kafka_error(ErrorCode.topic_authorization_failed, "")
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

    # --- CreatePartitions ------------------------------------------------------

    def handle_create_partitions(self, context: RequestContext, request: Any) -> defer.Deferred:
        async def go() -> bytes:
            results = []
            for topic in request.topics:
                entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None}
                try:
                    if not self._allowed(context, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                        raise kafka_error(ErrorCode.topic_authorization_failed, "")
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

    # --- AlterConfigs / IncrementalAlterConfigs -----------------------------------

    def handle_alter_configs(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        AlterConfigs (legacy): each resource's configs are replaced by the
        given set (L{kafkatw.broker.admin.AdminManager.alter_configs}).
        """
        return self._alter_configs(context, request, incremental=False)

    def handle_incremental_alter_configs(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        IncrementalAlterConfigs (KIP-339): SET, DELETE, APPEND, SUBTRACT of
        topic and broker configs (L{kafkatw.broker.admin.AdminManager.alter_configs}).
        """
        return self._alter_configs(context, request, incremental=True)

    def _alter_configs(self, context: RequestContext, request: Any, incremental: bool) -> defer.Deferred:
        async def go() -> bytes:
            responses = []
            for resource in request.resources:
                entry: dict[str, Any] = {"error_code": 0, "error_message": None,
                                         "resource_type": resource.resource_type,
                                         "resource_name": resource.resource_name}
                if incremental:
                    operations = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
                else:
                    operations = [(c.name, 0, c.value) for c in resource.configs if c.value is not None]
                try:
                    denied = self._config_denied(context, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                                 resource.resource_name)
                    if denied:
                        raise kafka_error(denied, "")
                    await self.admin.alter_configs(int(resource.resource_type), resource.resource_name, operations,
                                                   incremental, request.validate_only)
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

        if not self._allowed(context, AclOperation.ALTER, ResourceType.CLUSTER):
            return answer({k: (ErrorCode.cluster_authorization_failed, None) for k in wanted or []},
                          ErrorCode.cluster_authorization_failed)
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
                                           "error_message": None if top in (ErrorCode.none,
                                                                            ErrorCode.cluster_authorization_failed)
                                           else "not the controller",
                                           "responses": [{"name": t, "partitions": ps} for t, ps in topics.items()]})

        if not self._allowed(context, AclOperation.ALTER, ResourceType.CLUSTER):
            return answer({}, ErrorCode.cluster_authorization_failed)
        if self._not_controller():
            return answer({}, ErrorCode.not_controller)
        return self.controller.reassign(targets).addCallback(answer)

    def handle_list_partition_reassignments(self, context: RequestContext, request: Any) -> bytes:
        if not self._allowed(context, AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.cluster_authorization_failed),
                                           "error_message": None, "topics": []})
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
            "cluster_authorized_operations": OPERATIONS_NOT_REQUESTED,
        }
        if getattr(request, "include_cluster_authorized_operations", False):
            body["cluster_authorized_operations"] = self._cluster_operations(context)
        if getattr(request, "endpoint_type", 1) != 1:
            body.update(error_code=int(ErrorCode.unsupported_endpoint_type), brokers=[], controller_id=-1,
                        endpoint_type=request.endpoint_type,
                        error_message="this broker describes only broker endpoints (endpoint_type 1)")
        return self._respond(context, body)

    # --- DescribeConfigs -----------------------------------------------------

    def _config_denied(self, context: RequestContext, operation: AclOperation, resource_type: int,
                       name: str) -> ErrorCode:
        """
        DescribeConfigs / AlterConfigs of a topic need that operation on the
        topic, of a broker on the cluster (Kafka's C{ConfigHelper}).

        @return: C{TOPIC_AUTHORIZATION_FAILED}, C{CLUSTER_AUTHORIZATION_FAILED} or C{NONE}.
        """
        if self.authorizer is None:
            return ErrorCode.none
        if resource_type == 2 and not self._allowed(context, operation, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed
        if resource_type in (4, 8) and not self._allowed(context, operation, ResourceType.CLUSTER):
            return ErrorCode.cluster_authorization_failed
        if resource_type == 32 and not self._allowed(context, operation, ResourceType.GROUP, name):  # KIP-848
            return ErrorCode.group_authorization_failed
        return ErrorCode.none

    def handle_describe_configs(self, context: RequestContext, request: Any) -> bytes:
        """
        DescribeConfigs v1-v4 (L{kafkatw.broker.config_helper}): a topic's
        configs, this broker's (its id), or the cluster-wide dynamic defaults
        (resource name C{""}); another broker's id is C{INVALID_REQUEST}, as
        Kafka answers (clients ask each broker for its own).
        """
        include_synonyms = bool(getattr(request, "include_synonyms", False))
        include_documentation = bool(getattr(request, "include_documentation", False))
        results = []
        for resource in request.resources:
            entry: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": resource.resource_type,
                                     "resource_name": resource.resource_name, "configs": []}
            keys = list(resource.configuration_keys) if resource.configuration_keys is not None else None
            denied = self._config_denied(context, AclOperation.DESCRIBE_CONFIGS, resource.resource_type,
                                         resource.resource_name)
            if denied:
                entry["error_code"] = int(denied)
            elif resource.resource_type == 2:  # TOPIC
                meta = self.metadata.topics.get(resource.resource_name)
                if meta is None:
                    entry["error_code"] = int(ErrorCode.unknown_topic_or_partition)
                    entry["error_message"] = f"Topic {resource.resource_name} does not exist"
                else:
                    entry["configs"] = describe_topic_configs(self.config, meta.config, keys, include_synonyms,
                                                              include_documentation)
            elif resource.resource_type == 4:  # BROKER
                name = resource.resource_name
                if name and name != str(self.broker_id):
                    entry["error_code"] = int(ErrorCode.invalid_request)
                    entry["error_message"] = (f"Unexpected broker id, expected {self.broker_id} or empty string, "
                                              f"but received {name}")
                else:
                    entry["configs"] = describe_broker_configs(self.config, bool(name), keys, include_synonyms,
                                                               include_documentation)
            elif resource.resource_type == 32:  # GROUP (KIP-848, KIP-932: kafkatw/broker/group_config.py)
                entry["configs"] = self.group_configs.describe(resource.resource_name, keys)
            else:
                entry["error_code"] = int(ErrorCode.invalid_request)
                entry["error_message"] = f"resource type {resource.resource_type} is not supported"
            results.append(entry)
        return self._respond(context, {"throttle_time": 0, "results": results})

    # --- SASL and SCRAM credentials ---------------------------------------------

    def handle_sasl_handshake(self, context: RequestContext, request: Any) -> bytes:
        """
        Reached only after authentication, or on a listener without SASL
        (L{kafkatw.broker.authenticator} answers it before): C{ILLEGAL_SASL_STATE},
        as Kafka's C{KafkaApis}.
        """
        return self._respond(context, {"error_code": int(ErrorCode.illegal_sasl_state), "mechanisms": []})

    def handle_sasl_authenticate(self, context: RequestContext, request: Any) -> bytes:
        """Likewise: no re-authentication (C{connections.max.reauth.ms=0})."""
        return self._respond(context, {
            "error_code": int(ErrorCode.illegal_sasl_state), "auth_bytes": b"", "session_lifetime": 0,
            "error_message": "SaslAuthenticate request received after successful authentication"
            if context.connection.security_protocol.startswith("SASL_") else
            f"SaslAuthenticate on a {context.connection.security_protocol} listener"})

    def handle_describe_user_scram_credentials(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        The mechanisms and iteration counts of users' SCRAM credentials (never
        salts or keys); every user having one when C{users} is null or empty.
        Kafka's errors per user: C{RESOURCE_NOT_FOUND} (no credential),
        C{DUPLICATE_RESOURCE} (named twice).
        """
        async def go() -> bytes:
            try:
                everyone = await self.admin.registry.list_scram_users()
            except ZooKeeperError as e:
                _log.warn("DescribeUserScramCredentials: ZooKeeper unavailable ({error})", error=e)
                return self._respond(context, {"error_code": int(ErrorCode.unknown_server_error),
                                               "error_message": "ZooKeeper is unavailable", "results": []})
            results = []
            names = [u.name for u in request.users] if request.users else sorted(everyone)
            for name in dict.fromkeys(names):
                entry: dict[str, Any] = {"user": name, "error_code": 0, "error_message": None, "credential_infos": []}
                if names.count(name) > 1:
                    entry.update(error_code=int(ErrorCode.duplicate_resource),
                                 error_message="Cannot describe SCRAM credentials for the same user twice in a "
                                               f"single request: {name}")
                elif name not in everyone:
                    entry.update(error_code=int(ErrorCode.resource_not_found),
                                 error_message=f"Attempt to describe a user credential that does not exist: {name}")
                else:
                    entry["credential_infos"] = [
                        {"mechanism": SCRAM_MECHANISM_TYPES[m], "iterations": c.iterations}
                        for m, c in sorted(everyone[name].items())]
                results.append(entry)
            return self._respond(context, {"error_code": 0, "error_message": None, "results": results})

        return defer.Deferred.fromCoroutine(go())

    def handle_alter_user_scram_credentials(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        Upsert and delete SCRAM credentials in C{/config/users/<user>}, with
        Kafka's checks per user: C{UNSUPPORTED_SASL_MECHANISM} (mechanism type
        not 1 or 2), C{UNACCEPTABLE_CREDENTIAL} (iterations outside
        4096..16384, an empty name or salted password), C{DUPLICATE_RESOURCE}
        (a mechanism of a user altered twice), C{RESOURCE_NOT_FOUND} (deleting
        a credential that does not exist).  A user with any error is left
        unchanged.  The broker stores the salted password's keys (KIP-554):
        the password itself never reaches it.
        """
        mechanisms = {t: m for m, t in SCRAM_MECHANISM_TYPES.items()}

        def check(name: str, mechanism_type: int, seen: set) -> tuple[ErrorCode, str] | None:
            if not name:
                return ErrorCode.unacceptable_credential, "Username must not be empty"
            if mechanism_type not in mechanisms:
                return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
            if (name, mechanism_type) in seen:
                return ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"
            seen.add((name, mechanism_type))
            return None

        async def go() -> bytes:
            errors: dict[str, tuple[ErrorCode, str]] = {}
            order: list[str] = []
            seen: set = set()
            upserts: dict[str, dict[str, Any]] = {}
            deletes: dict[str, list[str]] = {}
            for d in request.deletions:
                order.append(d.name)
                problem = check(d.name, int(d.mechanism), seen)
                if problem:
                    errors.setdefault(d.name, problem)
                else:
                    deletes.setdefault(d.name, []).append(mechanisms[int(d.mechanism)])
            for u in request.upsertions:
                order.append(u.name)
                problem = check(u.name, int(u.mechanism), seen)
                if problem is None and int(u.iterations) < MIN_ITERATIONS:
                    problem = ErrorCode.unacceptable_credential, "Too few iterations"
                if problem is None and int(u.iterations) > MAX_ITERATIONS:
                    problem = ErrorCode.unacceptable_credential, "Too many iterations"
                if problem is None and (not u.salt or not u.salted_password):
                    # Any salt of one byte or more, as Kafka takes it (RFC 5802 sets no length).
                    problem = ErrorCode.unacceptable_credential, "The salt and the salted password must not be empty"
                if problem:
                    errors.setdefault(u.name, problem)
                else:
                    mechanism = mechanisms[int(u.mechanism)]
                    upserts.setdefault(u.name, {})[mechanism] = credential_from_salted_password(
                        mechanism, bytes(u.salt), bytes(u.salted_password), int(u.iterations))
            results = []
            for name in dict.fromkeys(order):
                if name not in errors:
                    try:
                        existing = await self.admin.registry.get_user_scram_credentials(name)
                        missing = [m for m in deletes.get(name, []) if m not in existing]
                        if missing:
                            errors[name] = (ErrorCode.resource_not_found,
                                            "Attempt to delete a user credential that does not exist")
                        else:
                            await self.admin.registry.alter_user_scram_credentials(
                                name, upserts.get(name, {}), deletes.get(name, []))
                            _log.info("SCRAM credentials of user {user}: set {set}, deleted {deleted}", user=name,
                                      set=sorted(upserts.get(name, {})), deleted=deletes.get(name, []))
                    except ZooKeeperError as e:
                        _log.warn("AlterUserScramCredentials of {user}: ZooKeeper unavailable ({error})",
                                  user=name, error=e)
                        errors[name] = (ErrorCode.unknown_server_error, "ZooKeeper is unavailable")
                code, message = errors.get(name, (ErrorCode.none, None))
                results.append({"user": name, "error_code": int(code), "error_message": message})
            return self._respond(context, {"throttle_time": 0, "results": results})

        return defer.Deferred.fromCoroutine(go())

    # --- FindCoordinator -----------------------------------------------------

    def handle_find_coordinator(self, context: RequestContext, request: Any) -> bytes:
        """
        A group's coordinator is the broker holding the group's
        C{__consumer_offsets} partition in ZooKeeper
        (L{kafkatw.broker.group_coordinator_election}), so every broker answers
        the same; C{COORDINATOR_NOT_AVAILABLE} while no broker holds it (or its
        holder has no such listener).  A transactional id's (key type 1) is the leader of its
        ``__transaction_state`` partition (L{TransactionApis}).  With an
        authorizer: Describe on the group (else C{GROUP_AUTHORIZATION_FAILED})
        or on the TransactionalId (else C{TRANSACTIONAL_ID_AUTHORIZATION_FAILED}).
        """
        key_type = getattr(request, "key_type", 0)
        keys = list(request.coordinator_keys) if hasattr(request, "coordinator_keys") else [request.key]
        coordinators = [self._find_coordinator(key, key_type, context.connection.listener_name, context)
                        for key in keys]
        if self.authorizer is not None and key_type == 0:
            for entry in coordinators:
                if not self._allowed(context, AclOperation.DESCRIBE, ResourceType.GROUP, entry["key"]):
                    entry.update(error_code=int(ErrorCode.group_authorization_failed), error_message=None,
                                 node_id=-1, host="", port=-1)
        body = {"throttle_time": 0, "coordinators": coordinators, **coordinators[0]}
        return self._respond(context, body)

    def _find_coordinator(self, key: str, key_type: int, listener: str = "PLAINTEXT",
                          context: RequestContext | None = None) -> dict:
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 0,
                                 "error_message": None}
        if key_type == 1:
            return self._find_transaction_coordinator(key, listener, context)
        if key_type != 0:
            entry["error_code"] = int(ErrorCode.invalid_request)
            entry["error_message"] = f"unknown key type {key_type}"
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
            entry["error_message"] = ("no live broker coordinates the group yet" if broker is None
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

    def _group_denied(self, context: RequestContext, group_id: str, operation: AclOperation = AclOperation.READ
                      ) -> bool:
        return self.authorizer is not None and not self._allowed(context, operation, ResourceType.GROUP, group_id)

    def handle_join_group(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        version = context.api_version
        if self._group_denied(context, request.group_id):
            return self._respond(context, {
                "throttle_time": 0, "error_code": int(ErrorCode.group_authorization_failed), "generation_id": -1,
                "protocol_type": None, "protocol_name": None if version >= 7 else "", "leader": "", "member_id": "",
                "members": []})
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

    def handle_sync_group(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        if self._group_denied(context, request.group_id):
            return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.group_authorization_failed),
                                           "protocol_type": None, "protocol_name": None, "assignment": b""})
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

    def handle_heartbeat(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        if self._group_denied(context, request.group_id):
            return self._respond(context, {"throttle_time": 0,
                                           "error_code": int(ErrorCode.group_authorization_failed)})
        d = self.group_coordinator.heartbeat(request.group_id, request.member_id,
                                             getattr(request, "group_instance_id", None), request.generation_id)
        return d.addCallback(lambda code: self._respond(context, {"throttle_time": 0, "error_code": int(code)}))

    def handle_leave_group(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        if self._group_denied(context, request.group_id):
            return self._respond(context, {"throttle_time": 0,
                                           "error_code": int(ErrorCode.group_authorization_failed), "members": []})
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
        """Read on the group (else every partition C{GROUP_AUTHORIZATION_FAILED}) and on each topic."""
        offsets = {}
        order = []
        refused: dict[tuple[str, int], ErrorCode] = {}
        group_denied = self._group_denied(context, request.group_id)
        denied = None if self.authorizer is None or group_denied else \
            self._denied_topics(context, AclOperation.READ, (t.name for t in request.topics))
        for topic in request.topics:
            for p in topic.partitions:
                key = (topic.name, p.partition_index)
                order.append(key)
                if group_denied:
                    refused[key] = ErrorCode.group_authorization_failed
                elif denied and topic.name in denied:
                    refused[key] = ErrorCode.topic_authorization_failed
                else:
                    offsets[key] = CommittedOffset(p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                                   p.committed_metadata or "")
        if refused and not offsets:
            d: defer.Deferred = defer.succeed({})
        else:
            d = self.group_coordinator.commit_offsets(
                request.group_id, request.generation_id_or_member_epoch, request.member_id,
                getattr(request, "group_instance_id", None), offsets)

        def answer(codes: dict) -> bytes:
            codes = {**codes, **refused}
            topics: dict[str, list] = {}
            for name, partition in order:
                topics.setdefault(name, []).append({"partition_index": partition,
                                                    "error_code": int(codes[(name, partition)])})
            return self._respond(context, {"throttle_time": 0, "topics": [
                {"name": name, "partitions": partitions} for name, partitions in topics.items()]})

        return d.addCallback(answer)

    def handle_offset_fetch(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        The group's committed offsets.  With an authorizer it takes Describe
        on the group (else C{GROUP_AUTHORIZATION_FAILED}) and Describe on each
        topic: the partitions of a named topic it may not describe answer
        C{TOPIC_AUTHORIZATION_FAILED}, and such topics are left out of an
        all-topics fetch (Kafka's C{KafkaApis.handleOffsetFetchRequest}; Read,
        which implies Describe, is needed only to commit).  v8+ asks for
        several groups (L{ConsumerGroupApis.handle_offset_fetch_groups}).
        """
        if context.api_version >= 8:
            return self.handle_offset_fetch_groups(context, request)
        d = self.offset_fetch_group(context, request.group_id, request.topics, request)
        return d.addCallback(lambda body: self._respond(context, {"throttle_time": 0, **body}))

    def offset_fetch_group(self, context: RequestContext, group_id: str, wanted_topics: Any, request: Any,
                           member_error: ErrorCode = ErrorCode.none) -> defer.Deferred:
        """
        One group of an OffsetFetch: a Deferred firing with C{{"error_code",
        "topics"}} (C{member_error}: the group's answer without reading, a
        KIP-848 member's C{STALE_MEMBER_EPOCH} or C{UNKNOWN_MEMBER_ID}).
        """
        wanted = None if wanted_topics is None else [
            (t.name, p) for t in wanted_topics for p in t.partition_indexes]
        if self._group_denied(context, group_id, AclOperation.DESCRIBE):
            d: defer.Deferred = defer.succeed((ErrorCode.group_authorization_failed, {}))
        elif member_error:
            d = defer.succeed((member_error, {}))
        else:
            d = self._require_stable(lambda: self.group_coordinator.fetch_offsets(group_id, wanted), request)

        def answer(result: tuple) -> dict:
            error, found, *unstable = result
            keys = wanted if wanted is not None else sorted(found)
            denied: set[str] = set()
            if self.authorizer is not None and not error:
                denied = self._denied_topics(context, AclOperation.DESCRIBE, (name for name, _ in keys))
                if wanted is None:
                    keys = [k for k in keys if k[0] not in denied]
                else:
                    found = {k: v for k, v in found.items() if k[0] not in denied}
            partition_error = int(error) if context.api_version < 2 else 0
            topics: dict[str, list] = {}
            for name, partition in keys:
                committed = found.get((name, partition))
                topics.setdefault(name, []).append({
                    "partition_index": partition,
                    "committed_offset": committed.offset if committed else -1,
                    "committed_leader_epoch": committed.leader_epoch if committed else -1,
                    "metadata": committed.metadata if committed else "",
                    "error_code": int(ErrorCode.topic_authorization_failed) if name in denied else partition_error,
                })
                if unstable and (name, partition) in unstable[0]:  # KIP-447 require_stable
                    topics[name][-1].update(committed_offset=-1, error_code=int(ErrorCode.unstable_offset_commit))
            return {"error_code": int(error), "topics": [
                {"name": name, "partitions": partitions} for name, partitions in topics.items()]}

        return d.addCallback(answer)

    def _denied_group(self, group_id: str) -> defer.Deferred:
        return defer.succeed({"error_code": int(ErrorCode.group_authorization_failed), "group_id": group_id,
                              "group_state": "", "protocol_type": "", "protocol_data": "", "members": []})

    def handle_describe_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        d = defer.gatherResults([
            self._denied_group(g) if self._group_denied(context, g, AclOperation.DESCRIBE)
            else self.group_coordinator.describe_group(g) for g in request.groups])
        include = getattr(request, "include_authorized_operations", False)

        def answer(groups: list) -> bytes:
            for g in groups:
                g["authorized_operations"] = OPERATIONS_NOT_REQUESTED
                if include and g["error_code"] != ErrorCode.group_authorization_failed:
                    g["authorized_operations"] = self._authorized_operations(context, ResourceType.GROUP,
                                                                             g["group_id"])
            return self._respond(context, {"throttle_time": 0, "groups": groups})

        return d.addCallback(answer)

    def handle_list_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        states = {s.lower() for s in getattr(request, "states_filter", ())}
        d = self.group_coordinator.list_groups().addCallback(self.with_share_groups)

        def answer(groups: list) -> bytes:
            listed = [{"group_id": g, "protocol_type": t, "group_state": s} for g, t, s in groups
                      if not states or s.lower() in states]
            if self.authorizer is not None and not self._allowed(context, AclOperation.DESCRIBE,
                                                                 ResourceType.CLUSTER):
                listed = [g for g in listed if not self._group_denied(context, g["group_id"], AclOperation.DESCRIBE)]
            return self._respond(context, {"throttle_time": 0, "error_code": 0, "groups": listed})

        def failed(failure: Any) -> bytes:
            failure.trap(ZooKeeperError)
            return self._respond(context, {"throttle_time": 0,
                                          "error_code": int(ErrorCode.coordinator_not_available), "groups": []})

        return d.addCallbacks(answer, failed)

    def handle_delete_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        names = list(request.groups_names)
        d = defer.gatherResults([
            defer.succeed(ErrorCode.group_authorization_failed) if self._group_denied(context, g, AclOperation.DELETE)
            else self.delete_share_group(g) or self.group_coordinator.delete_group(g) for g in names])
        return d.addCallback(lambda codes: self._respond(context, {"throttle_time": 0, "results": [
            {"group_id": g, "error_code": int(c)} for g, c in zip(names, codes)]}))

    # --- InitProducerId ------------------------------------------------------

    def handle_init_producer_id(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        """
        A producer id for an idempotent producer (a new id, or the same id
        with its epoch bumped, KIP-360).  A transactional id goes to the
        transaction coordinator (L{TransactionApis}).
        """
        if request.transactional_id is None and self.authorizer is not None and not (
                self._allowed(context, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
                or self.authorizer.authorize_any(context.connection.principal, context.connection.client_host,
                                                 AclOperation.WRITE, ResourceType.TOPIC)):
            # KIP-679: IdempotentWrite on the cluster, or Write on some topic.
            return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.cluster_authorization_failed),
                                          "producer_id": -1, "producer_epoch": -1})
        if request.transactional_id is not None:
            return self._init_transactional_producer_id(context, request)
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


    # --- ACLs: CreateAcls, DescribeAcls, DeleteAcls (KIP-11, KIP-290) ---------------

    def _acls_refused(self, context: RequestContext, operation: AclOperation,
                      disabled_message: str) -> tuple[ErrorCode, str | None]:
        """
        C{(SECURITY_DISABLED, disabled_message)} without an authorizer;
        C{(CLUSTER_AUTHORIZATION_FAILED, None)} without C{operation} on the
        cluster; else C{(NONE, None)}.  Kafka's texts (C{AclApis}) are
        L{NO_AUTHORIZER} (DescribeAcls) and L{NO_AUTHORIZER_ALTER}
        (CreateAcls, DeleteAcls).
        """
        if self.authorizer is None:
            return ErrorCode.security_disabled, disabled_message
        if not self._allowed(context, operation, ResourceType.CLUSTER):
            return ErrorCode.cluster_authorization_failed, None
        return ErrorCode.none, None

    @staticmethod
    def _acl_filter(f: Any) -> AclBindingFilter:
        """@raise InvalidAclError: a code Kafka does not define."""
        try:
            return AclBindingFilter(ResourceType(f.resource_type_filter), f.resource_name_filter,
                                    PatternType(f.pattern_type_filter), f.principal_filter, f.host_filter,
                                    AclOperation(f.operation), AclPermissionType(f.permission_type))
        except ValueError as e:
            raise InvalidAclError(str(e)) from None

    def handle_create_acls(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        """Alter on the cluster is needed; each creation is answered on its own (C{INVALID_REQUEST} for a bad one)."""
        refused, message = self._acls_refused(context, AclOperation.ALTER, NO_AUTHORIZER_ALTER)
        if refused:
            return self._respond(context, {"throttle_time": 0, "results": [
                {"error_code": int(refused), "error_message": message} for _ in request.creations]})
        bindings: list[AclBinding | None] = []
        for c in request.creations:
            try:
                bindings.append(AclBinding(
                    ResourcePattern(ResourceType(c.resource_type), c.resource_name, PatternType(c.resource_pattern_type)),
                    AccessControlEntry(c.principal, c.host, AclOperation(c.operation),
                                       AclPermissionType(c.permission_type))))
            except ValueError:
                bindings.append(None)

        async def go() -> bytes:
            valid = [b for b in bindings if b is not None]
            outcome = iter(await self.authorizer.create_acls(valid))
            results = []
            for binding in bindings:
                error = next(outcome) if binding is not None else InvalidAclError("unknown code in the ACL")
                if error is None:
                    results.append({"error_code": 0, "error_message": None})
                    _log.info("ACL created by {principal}: {pattern} {entry}", principal=context.connection.principal,
                              pattern=str(binding.pattern), entry=str(binding.entry))
                elif isinstance(error, InvalidAclError):
                    results.append({"error_code": int(ErrorCode.invalid_request), "error_message": str(error)})
                else:
                    results.append({"error_code": int(ErrorCode.unknown_server_error), "error_message": str(error)})
            return self._respond(context, {"throttle_time": 0, "results": results})

        return defer.Deferred.fromCoroutine(go())

    def handle_describe_acls(self, context: RequestContext, request: Any) -> bytes:
        """
        Describe on the cluster is needed; a filter with an unknown code gets
        C{INVALID_REQUEST}; without an authorizer, C{SECURITY_DISABLED} and
        L{NO_AUTHORIZER} (not an empty list), as Kafka answers.
        """
        body: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": []}
        refused, message = self._acls_refused(context, AclOperation.DESCRIBE, NO_AUTHORIZER)
        if refused:
            body.update(error_code=int(refused), error_message=message)
            return self._respond(context, body)
        try:
            acl_filter = self._acl_filter(request)
            acl_filter.validate()
        except InvalidAclError as e:
            body.update(error_code=int(ErrorCode.invalid_request), error_message=str(e))
            return self._respond(context, body)
        for pattern, entries in sorted(self.authorizer.describe_acls(acl_filter).items(), key=lambda kv: kv[0]):
            body["resources"].append({
                "resource_type": int(pattern.resource_type), "resource_name": pattern.name,
                "pattern_type": int(pattern.pattern_type),
                "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                          "permission_type": int(e.permission_type)} for e in entries]})
        return self._respond(context, body)

    def handle_delete_acls(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        """Alter on the cluster is needed; each filter is answered with the ACLs it deleted."""
        refused, message = self._acls_refused(context, AclOperation.ALTER, NO_AUTHORIZER_ALTER)
        if refused:
            return self._respond(context, {"throttle_time": 0, "filter_results": [
                {"error_code": int(refused), "error_message": message, "matching_acls": []}
                for _ in request.filters]})
        filters: list[AclBindingFilter | InvalidAclError] = []
        for f in request.filters:
            try:
                filters.append(self._acl_filter(f))
            except InvalidAclError as e:
                filters.append(e)

        async def go() -> bytes:
            valid = [f for f in filters if isinstance(f, AclBindingFilter)]
            outcome = iter(await self.authorizer.delete_acls(valid))
            results = []
            for f in filters:
                result: Any = next(outcome) if isinstance(f, AclBindingFilter) else f
                if isinstance(result, InvalidAclError):
                    results.append({"error_code": int(ErrorCode.invalid_request), "error_message": str(result),
                                    "matching_acls": []})
                elif isinstance(result, Exception):
                    results.append({"error_code": int(ErrorCode.unknown_server_error), "error_message": str(result),
                                    "matching_acls": []})
                else:
                    for b in result:
                        _log.info("ACL deleted by {principal}: {pattern} {entry}",
                                  principal=context.connection.principal, pattern=str(b.pattern), entry=str(b.entry))
                    results.append({"error_code": 0, "error_message": None, "matching_acls": [
                        {"error_code": 0, "error_message": None, "resource_type": int(b.pattern.resource_type),
                         "resource_name": b.pattern.name, "pattern_type": int(b.pattern.pattern_type),
                         "principal": b.entry.principal, "host": b.entry.host, "operation": int(b.entry.operation),
                         "permission_type": int(b.entry.permission_type)} for b in result]})
            return self._respond(context, {"throttle_time": 0, "filter_results": results})

        return defer.Deferred.fromCoroutine(go())
