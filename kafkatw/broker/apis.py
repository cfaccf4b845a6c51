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
admin tools (admin_tool_apis.py), Produce (produce_apis.py), and Fetch,
ListOffsets and OffsetForLeaderEpoch (fetch_apis.py).  This module keeps the
dispatch, ApiVersions, Metadata and DescribeCluster.

The versions served are exactly L{SUPPORTED_VERSIONS}, advertised in
ApiVersions.  They cover what librdkafka 2.0 (Debian's kcat), librdkafka 2.16
(confluent-kafka), kafka-python 3 and aiokafka negotiate.  An ApiVersions request
of a version not served gets an ApiVersions v0 response with
C{UNSUPPORTED_VERSION} and the list (KIP-511); any other unserved API or version
closes the connection, as Kafka does.

Source: Apache Kafka protocol guide; KafkaApis.scala.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..config import BrokerConfig
from ..errors import ErrorCode, KafkaError
from ..protocol.messages import RequestHeader, UnsupportedVersion, decode_request, encode_response
from ..security.acl import (
    CLUSTER_NAME,
    OPERATIONS_NOT_REQUESTED,
    AclOperation,
    ResourceType,
    operations_bit_field,
    supported_operations,
)
from ..zookeeper.bridge import ZooKeeperError
from .fetch_session import FetchSessionCache
from .group_coordinator import GroupCoordinator, OffsetStore
from .metadata_response import metadata_response_encoder
from .quota_apis import QUOTA_VERSIONS, QuotaApis
from .quota_manager import ClientQuotas, user_of_principal
from .request_context import NO_CONNECTION, ConnectionContext, RequestContext
from .admin_tool_apis import ADMIN_TOOL_VERSIONS, AdminToolApis
from .classic_group_apis import CLASSIC_GROUP_VERSIONS, ClassicGroupApis
from .share_group_apis import SHARE_GROUP_VERSIONS, ShareGroupApis
from .consumer_group_apis import CONSUMER_GROUP_VERSIONS, ConsumerGroupApis
from .security_apis import SECURITY_VERSIONS, SecurityApis
from .topic_admin_apis import TOPIC_ADMIN_VERSIONS, TopicAdminApis, validate_topic_name
from .produce_apis import PRODUCE_VERSIONS, ProduceApis, ProduceRun
from .fetch_apis import FETCH_VERSIONS, FetchApis
from .transaction_apis import TRANSACTION_VERSIONS, TransactionApis

__all__ = ["SUPPORTED_VERSIONS", "ADVERTISED_VERSIONS", "KafkaApis", "ProduceRun", "validate_topic_name"]

_log = Logger()

#: API key -> (min version, max version) served.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    3: (0, 12),  # Metadata
    18: (0, 3),  # ApiVersions
    60: (0, 1),  # DescribeCluster (KIP-700; v2's fenced brokers are KRaft's)
    **PRODUCE_VERSIONS,  # Produce (message format v2 only: v3+): kafkatw/broker/produce_apis.py
    **FETCH_VERSIONS,  # Fetch, ListOffsets, OffsetForLeaderEpoch: kafkatw/broker/fetch_apis.py
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


class KafkaApis(ProduceApis, FetchApis, TransactionApis, QuotaApis, AdminToolApis, ClassicGroupApis, ConsumerGroupApis,
                ShareGroupApis, TopicAdminApis, SecurityApis):
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
            3: self.handle_metadata,
            18: self.handle_api_versions,
            60: self.handle_describe_cluster,
            **self.produce_handlers(),
            **self.fetch_handlers(),
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
        """
        A Metadata response's plain values (with L{_metadata_operations}: what
        L{_metadata_response} answers, encoded by kio as a whole).
        """
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

    def _metadata_response(self, context: RequestContext, request: Any, names: list[str],
                           errors: dict[str, ErrorCode], unknown_ids: list[dict] | tuple = ()) -> bytes:
        """
        The Metadata response naming C{names} (then the C{unknown_ids}
        entries), as kio encodes L{_metadata_body} with
        L{_metadata_operations} -- byte for byte -- but from each topic's
        encoded entry, kept in L{MetadataCache.encoded_topics} until it
        changes (L{kafkatw.broker.metadata_response}): a full Metadata of
        10,000 partitions is a join of cached bytes.

        @param errors: topic -> the error it is answered with (no partitions).
        """
        version = context.api_version
        encoder = metadata_response_encoder(version)
        self._watch_replica_roles()
        include_ops = getattr(request, "include_topic_authorized_operations", False)
        known = self.metadata.topics
        cache = self.metadata.encoded_topics
        encoded = []
        for name in names:
            ops = self._authorized_operations(context, ResourceType.TOPIC, name) if include_ops else None
            if name in errors or name not in known:
                entry = {"error_code": int(errors[name]), "name": name, "partitions": [],
                         "topic_authorized_operations": -2147483648} if name in errors else self._topic_metadata(name)
                if include_ops:
                    entry["topic_authorized_operations"] = ops
                encoded.append(encoder.topic(entry))
                continue
            entries = cache.get(name)
            if entries is None:
                entries = cache[name] = {}
            data = entries.get((version, ops))
            if data is None:
                entry = self._topic_metadata(name)
                if include_ops:
                    entry["topic_authorized_operations"] = ops
                data = entries[(version, ops)] = encoder.topic(entry)
            encoded.append(data)
        for entry in unknown_ids:
            if include_ops:
                entry = {**entry, "topic_authorized_operations": self._authorized_operations(
                    context, ResourceType.TOPIC, entry["name"])}
            encoded.append(encoder.topic(entry))
        body = self._metadata_body([], {}, context.connection.listener_name)
        if getattr(request, "include_cluster_authorized_operations", False):
            body["cluster_authorized_operations"] = self._cluster_operations(context)
        return encoder.splice(self._respond(context, body), encoded, len(encoded))

    def _watch_replica_roles(self) -> None:
        """
        Once: a change of a replica's role here drops its topic's encoded
        Metadata entries (a partition this broker leads by its state is
        named led only once its replica leads, L{_topic_metadata}).
        """
        replica_manager = self.replica_manager
        if replica_manager is None or self.__dict__.get("_roles_watched") is replica_manager:
            return
        self._roles_watched = replica_manager
        invalidate = self.metadata.invalidate_topic
        replica_manager.leadership_listeners.append(lambda topic, partition, role, leader_epoch: invalidate(topic))

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
            return self._metadata_response(context, request, names, {})
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
            return self._metadata_response(context, request, names, errors, unknown_ids)
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
        return self._metadata_response(context, request, names, errors)

    # --- Produce -------------------------------------------------------------

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
