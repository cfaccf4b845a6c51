"""
L{AdminClient}: Kafka's admin operations on a L{KafkaClient} (docs/clients.md: The admin client).

Topics (Metadata, CreateTopics, DeleteTopics, CreatePartitions), configs
(DescribeConfigs), offsets (ListOffsets), the cluster (DescribeCluster, or
Metadata's C{controller_id} from a broker that does not serve it), the
controller's requests (ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments) and raw requests to a group's coordinator
(FindCoordinator), and ACLs (CreateAcls, DescribeAcls, DeleteAcls, with
L{kafkatw.security.acl.AclBinding} and L{kafkatw.security.acl.AclBindingFilter}),
under the names of Kafka's Java C{Admin} interface in snake case.

Every operation retries within its timeout (C{default_api_timeout_ms}, as
Kafka's C{default.api.timeout.ms}) when the cluster moved under it:

  - a lost or refused connection, or a request that timed out, is sent again
    to another (or the same, reconnected) broker;
  - C{NOT_LEADER_OR_FOLLOWER}, C{LEADER_NOT_AVAILABLE}, C{FENCED_LEADER_EPOCH},
    C{UNKNOWN_LEADER_EPOCH} refresh the metadata and go to the new leader;
  - C{NOT_CONTROLLER} refreshes the metadata and goes to the new controller
    (Metadata's C{controller_id});
  - C{NOT_COORDINATOR}, C{COORDINATOR_NOT_AVAILABLE} and
    C{COORDINATOR_LOAD_IN_PROGRESS} look the coordinator up again.

Between attempts it waits C{retry_backoff_ms}, doubling up to 1 s.  Other
errors fail at once.  A cluster that was never reached (no bootstrap server
answers) fails after every bootstrap server was tried twice, not after the
whole timeout, so that a mistyped address is reported at once.

Everything runs on the reactor passed in; L{kafkatw.client.blocking.BlockingAdminClient}
drives it from threads without one.

Source: Kafka protocol guide; Kafka's C{KafkaAdminClient} (retries, the
controller and coordinator look-ups); KIP-320 (leader epochs in ListOffsets);
KIP-455 (reassignments); KIP-460 (ElectLeaders); KIP-700 (DescribeCluster).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Mapping, TypeVar

from twisted.internet import defer
from twisted.logger import Logger

from .. import errors as _errors
from ..errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError
from ..security.sasl import SCRAM_MECHANISM_TYPES, salted_password
from .client import KafkaClient, client_for, sleep
from ..security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from .connection import BrokerConnectionError
from .security import SecurityConfig, security_from

__all__ = [
    "AdminClient",
    "NewTopic",
    "NewPartitions",
    "TopicDescription",
    "PartitionInfo",
    "ClusterDescription",
    "Node",
    "ConfigEntry",
    "ListOffsetsResultInfo",
    "PartitionReassignment",
    "ScramCredentialInfo",
    "UserScramCredentialUpsertion",
    "UserScramCredentialDeletion",
    "ClientQuotaFilterComponent",
    "ClientQuotaAlteration",
    "TransactionListing",
    "TransactionDescription",
    "ProducerState",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "RESOURCE_TOPIC",
    "RESOURCE_BROKER",
    "ELECTION_PREFERRED",
    "ELECTION_UNCLEAN",
]

_log = Logger()

T = TypeVar("T")
TopicPartition = tuple[str, int]

#: ListOffsets timestamps: the log start offset and the high watermark.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
#: DescribeConfigs resource types (Kafka's C{ConfigResource.Type}).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
#: ElectLeaders election types (Kafka's C{ElectionType}).
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
#: DescribeConfigs C{config_source} of a value nobody set (Kafka's C{DEFAULT_CONFIG}).
_SOURCE_DEFAULT = 5

#: Errors after which an operation refreshes what it knows and tries again.
_RETRY = frozenset({
    ErrorCode.network_exception,
    ErrorCode.request_timed_out,
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.not_controller,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.replica_not_available,
    ErrorCode.offset_not_available,  # ListOffsets to a new leader still below the start of its epoch (KIP-207)
})
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                ErrorCode.coordinator_load_in_progress})
#: How many metadata refreshes a topic may be missing from before it is unknown.
_UNKNOWN_TOPIC_ROUNDS = 5
_MAX_BACKOFF_MS = 1000

#: Error code -> the L{KafkaError} subclass of L{kafkatw.errors} that carries it.
_ERROR_CLASSES = {cls.error_code: cls for cls in vars(_errors).values()
                  if isinstance(cls, type) and issubclass(cls, KafkaError) and cls is not KafkaError}


def kafka_error(code: ErrorCode, message: str = "") -> KafkaError:
    """The error for C{code}: its class in L{kafkatw.errors} when it has one (C{TopicAlreadyExistsError}, …)."""
    cls = _ERROR_CLASSES.get(ErrorCode(int(code)))
    return cls(message) if cls is not None else _errors.kafka_error(ErrorCode(int(code)), message)


@dataclass(frozen=True)
class NewTopic:
    """
    A topic to create (Kafka's C{NewTopic}).

    @ivar num_partitions: -1: the broker's C{num.partitions}.
    @ivar replication_factor: -1: the broker's C{default.replication.factor}.
    @ivar replica_assignment: partition -> broker ids (then both counts are -1).
    @ivar configs: topic config overrides (Kafka's names).
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: Mapping[int, list[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NewPartitions:
    """
    Grow a topic to C{total_count} partitions (Kafka's C{NewPartitions.increaseTo}).

    @ivar new_assignments: one replica list per new partition, or None: the
        broker spreads them.
    """

    total_count: int
    new_assignments: list[list[int]] | None = None


@dataclass(frozen=True)
class Node:
    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionInfo:
    """
    One partition as Metadata describes it (Kafka's C{TopicPartitionInfo}).

    @ivar leader: the leader's broker id, -1 when there is none.
    @ivar error: the partition's error code (C{LEADER_NOT_AVAILABLE} when it has no leader).
    """

    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: list[PartitionInfo]


@dataclass(frozen=True)
class ClusterDescription:
    """The cluster id, the controller's broker id (-1: none) and the live brokers."""

    cluster_id: str | None
    controller_id: int
    nodes: dict[int, Node]


@dataclass(frozen=True)
class ConfigEntry:
    """
    One config of a resource (Kafka's C{ConfigEntry}); C{source} is Kafka's
    C{ConfigSource} number (1 dynamic topic, 4 static broker, 5 default).
    """

    name: str
    value: str | None
    source: int
    is_sensitive: bool
    read_only: bool

    @property
    def is_default(self) -> bool:
        return self.source == _SOURCE_DEFAULT


@dataclass(frozen=True)
class ListOffsetsResultInfo:
    """An offset (-1: none, e.g. no record at or after a timestamp), its record's timestamp (ms), its epoch."""

    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True)
class PartitionReassignment:
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


@dataclass(frozen=True)
class ScramCredentialInfo:
    """A user's SCRAM credential as DescribeUserScramCredentials shows it (no salt, no keys)."""

    mechanism: str
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """
    Set C{user}'s credential for C{mechanism} (C{SCRAM-SHA-256}, C{SCRAM-SHA-512}).
    Only the salted password is sent (KIP-554); C{salt} defaults to 32 random bytes.
    """

    user: str
    mechanism: str
    password: str = field(repr=False)
    iterations: int = 4096
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    """Delete C{user}'s credential for C{mechanism}."""

    user: str
    mechanism: str


@dataclass(frozen=True)
class ClientQuotaFilterComponent:
    """
    One component of a DescribeClientQuotas filter (KIP-546): C{entity_type}
    C{user} or C{client-id}; C{match_type} 0 matches the name C{match}
    exactly (C{None}: the default entity), 1 the default entity, 2 any
    entity of the type, the default included (Kafka's C{ClientQuotaFilterComponent.ofEntity},
    C{ofDefaultEntity}, C{ofEntityType}).
    """

    entity_type: str
    match: str | None = None
    match_type: int = 0


@dataclass(frozen=True)
class ClientQuotaAlteration:
    """
    Changes of one quota entity (KIP-546): C{entity} is
    C{(("user", "alice"), ("client-id", None))}-style pairs (C{None}: the
    default), C{ops} C{(key, value)} pairs, a C{None} value removing the key
    (C{producer_byte_rate}, C{consumer_byte_rate}, C{request_percentage}).
    """

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True)
class TransactionListing:
    """One transactional id as ListTransactions answers it (KIP-664), with the broker that coordinates it."""

    transactional_id: str
    coordinator_id: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """
    A transactional id as DescribeTransactions answers it (KIP-664).

    @ivar transaction_timeout_ms: the producer's C{transaction.timeout.ms}.
    @ivar transaction_start_time_ms: when the open transaction started (ms since
        the epoch; -1: none open).
    @ivar topic_partitions: the partitions of the open transaction.
    """

    coordinator_id: int
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    topic_partitions: list[TopicPartition]


@dataclass(frozen=True)
class ProducerState:
    """
    An active producer of a partition as DescribeProducers answers it (KIP-664).

    @ivar last_timestamp_ms: the last record's timestamp (ms since the epoch).
    @ivar coordinator_epoch: the epoch of the last marker's coordinator (-1: none).
    @ivar current_txn_start_offset: the first offset of its open transaction (-1: none).
    """

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int



async def _partitions_of_responses(requests: list) -> tuple[list[tuple[TopicPartition, Any]], KafkaError | None]:
    """
    Wait for requests sent to several leaders (ListOffsets, DeleteRecords):
    every partition of the answered ones as C{((topic, partition), entry)},
    and the error of a failed one (a connection error for a non-Kafka failure;
    the last, when several failed), C{None} when all were answered.
    """
    partitions: list[tuple[TopicPartition, Any]] = []
    error: KafkaError | None = None
    for ok, response in (await defer.DeferredList(requests, consumeErrors=True)) if requests else []:
        if not ok:
            error = response.value if isinstance(response.value, KafkaError) else \
                BrokerConnectionError(str(response.value))
            continue
        for topic in response.topics:
            for p in topic.partitions:
                partitions.append(((topic.name, int(p.partition_index)), p))
    return partitions, error

class AdminClient:
    """
    Kafka's admin operations (see the module docstring).

    @param reactor: the reactor everything runs on.
    @param bootstrap_servers: C{"host:port,..."}; or give C{client}.
    @param client: a L{KafkaClient} to share (not closed by L{close}).
    @param request_timeout_ms: per request (ms).
    @param default_api_timeout_ms: per operation, retries included (ms).
    @param retry_backoff_ms: the first wait between attempts (ms).
    @param security: a L{kafkatw.client.security.SecurityConfig}; kafka-python's
        keyword options (C{security_protocol}, C{ssl_cafile} ...) set its fields.
    """

    def __init__(self, reactor: Any, bootstrap_servers: str | list[str] | None = None, *,
                 client: KafkaClient | None = None, client_id: str = "kafkatw-admin",
                 request_timeout_ms: int = 30000, default_api_timeout_ms: int = 60000,
                 retry_backoff_ms: int = 100, security: SecurityConfig | None = None,
                 **security_options: Any) -> None:
        self.reactor = reactor
        security = security_from(security, security_options, "AdminClient")
        if client is None and bootstrap_servers is not None:
            # An admin client never creates a topic by asking for its metadata.
            client = KafkaClient(reactor, bootstrap_servers, client_id=client_id,
                                 request_timeout_ms=request_timeout_ms, allow_auto_create_topics=False,
                                 security=security)
            self._own_client = True
        else:
            client, self._own_client = client_for(reactor, bootstrap_servers, client, client_id, request_timeout_ms)
        self.client = client
        self.request_timeout_ms = request_timeout_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._coordinators: dict[str, int] = {}
        self._closed = False

    # --- the retry loop ---------------------------------------------------------------

    async def _retry(self, what: str, attempt: Callable[[], Awaitable[T]], timeout_ms: int | None) -> T:
        """
        Run C{attempt} until it succeeds, fails with an error not in
        L{_RETRY}, or C{timeout_ms} (default: C{default_api_timeout_ms}) passes.
        """
        timeout_ms = self.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = self.reactor.seconds() + timeout_ms / 1000.0
        tries = 0
        while True:
            if self._closed:
                raise BrokerConnectionError("admin client closed")
            try:
                return await attempt()
            except KafkaError as e:
                tries += 1
                if e.error_code not in _RETRY:
                    raise
                never_reached = isinstance(e, BrokerConnectionError) and not self.client.brokers
                if never_reached and tries >= 2 * max(1, len(self.client.bootstrap)):
                    raise
                backoff_ms = min(self.retry_backoff_ms * 2 ** (tries - 1), _MAX_BACKOFF_MS)
                if self.reactor.seconds() + backoff_ms / 1000.0 >= deadline:
                    raise kafka_error(e.error_code, f"{what}: no success within {timeout_ms} ms: {e}") from e
                _log.debug("{what} failed ({error}); retrying in {backoff_ms} ms", what=what, error=e,
                           backoff_ms=backoff_ms)
            self.client.invalidate()
            await sleep(self.reactor, backoff_ms / 1000.0)

    async def send(self, node_id: int, api_key: int, body: Any, version: int | None = None,
                   timeout_ms: int | None = None) -> Any:
        """
        One raw request to broker C{node_id} (no retry).

        @param version: the version to speak; default: the negotiated one
            (only for the APIs of L{kafkatw.client.connection.CLIENT_VERSIONS}).
        @return: the kio response.
        """
        connection = await self.client.connection(node_id)
        return await connection.request(api_key, body, version=version, timeout_ms=timeout_ms)

    # --- metadata and topics -----------------------------------------------------------

    async def _metadata(self, topics: list[str] | None, node: int | None = None) -> Any:
        """One Metadata request (C{None}: all topics), never creating topics; notes brokers and controller."""
        if node is None:
            node = self.client.least_loaded_node()
        connection = await self.client.connection(node)
        if topics is None and connection.versions.get(3, 1) == 0:
            body: dict[str, Any] = {"topics": []}  # v0: an empty list means all
        else:
            body = {"topics": None if topics is None else [{"name": t} for t in topics]}
        body.update(allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False)
        response = await connection.request(3, body)
        self.client.note_cluster(response)
        return response

    def metadata(self, topics: Iterable[str] | None = None, timeout_ms: int | None = None) -> defer.Deferred:
        """
        A raw Metadata response for C{topics} (None: every topic), retried on
        connection errors.

        @return: a Deferred firing with the kio MetadataResponse.
        """
        names = None if topics is None else list(topics)
        return defer.Deferred.fromCoroutine(self._retry("metadata", lambda: self._metadata(names), timeout_ms))

    def list_topics(self, timeout_ms: int | None = None) -> defer.Deferred:
        """
        @return: a Deferred firing with the sorted names of every topic.
        """
        async def go() -> list[str]:
            response = await self._retry("list topics", lambda: self._metadata(None), timeout_ms)
            return sorted(t.name for t in response.topics if t.error_code == ErrorCode.none and t.name)

        return defer.Deferred.fromCoroutine(go())

    def describe_topics(self, topics: Iterable[str] | None = None, timeout_ms: int | None = None) -> defer.Deferred:
        """
        Leaders, replicas, ISR, offline replicas and leader epochs of C{topics}
        (None: every topic).

        @return: a Deferred firing with C{{name: TopicDescription}}.
        @raise UnknownTopicOrPartitionError: (as failure) a named topic does not exist.
        """
        names = None if topics is None else list(topics)

        async def metadata() -> Any:
            response = await self._metadata(names)
            for t in response.topics:
                # a topic being created: no leaders yet (Kafka's answer too); asked again, as Kafka's client does
                if int(t.error_code) == ErrorCode.leader_not_available:
                    raise kafka_error(ErrorCode.leader_not_available, f"{t.name}: its leaders are not known yet")
            return response

        async def go() -> dict[str, TopicDescription]:
            response = await self._retry("describe topics", metadata, timeout_ms)
            out = {}
            for t in response.topics:
                code = ErrorCode(int(t.error_code))
                if code != ErrorCode.none:
                    if code == ErrorCode.unknown_topic_or_partition and names is None:
                        continue
                    raise kafka_error(code, f"Topic '{t.name}' does not exist"
                                      if code == ErrorCode.unknown_topic_or_partition else f"{t.name}: {code.name}")
                out[t.name] = _topic_description(t)
            return out

        return defer.Deferred.fromCoroutine(go())

    def describe_cluster(self, timeout_ms: int | None = None) -> defer.Deferred:
        """
        The cluster id, the controller and the live brokers: DescribeCluster
        (KIP-700) where the broker serves it, else Metadata.

        @return: a Deferred firing with a L{ClusterDescription}.
        """
        async def attempt() -> ClusterDescription:
            node = self.client.least_loaded_node()
            connection = await self.client.connection(node)
            if 60 in connection.versions:
                r = await connection.request(60, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
                if r.error_code != ErrorCode.none:
                    raise kafka_error(ErrorCode(int(r.error_code)), r.error_message or "DescribeCluster failed")
                nodes = {int(b.broker_id): Node(int(b.broker_id), b.host, int(b.port), b.rack) for b in r.brokers}
                self.client.note_brokers({n.id: (n.host, n.port) for n in nodes.values()}, r.cluster_id,
                                         int(r.controller_id))
                return ClusterDescription(r.cluster_id, int(r.controller_id), nodes)
            r = await self._metadata([], node)
            nodes = {int(b.node_id): Node(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))
                     for b in r.brokers}
            return ClusterDescription(getattr(r, "cluster_id", None), int(getattr(r, "controller_id", -1)), nodes)

        return defer.Deferred.fromCoroutine(self._retry("describe cluster", attempt, timeout_ms))

    # --- the controller's requests --------------------------------------------------------

    async def _controller(self, refresh: bool) -> int:
        if refresh or self.client.controller_id < 0:
            await self._metadata([])
        if self.client.controller_id < 0:
            raise kafka_error(ErrorCode.not_controller, "the cluster has no controller now")
        return self.client.controller_id

    async def _to_controller(self, what: str, api_key: int, body_for: Callable[[list | None], dict],
                             keys: list | None, results_of: Callable[[Any], dict], timeout_ms: int | None,
                             request_timeout_ms: int = 0, noun: str = "topic") -> dict:
        """
        Send C{body_for(keys)} to the controller; keys whose result is
        C{NOT_CONTROLLER} (or the whole request, on a top-level
        C{NOT_CONTROLLER} or a lost connection) are sent again to the
        controller the refreshed metadata names.

        @param keys: None: whatever the controller answers for (ElectLeaders
            of every partition); a C{NOT_CONTROLLER} anywhere sends the whole
            request again.
        @param results_of: response -> C{{key: (ErrorCode, message)}}; a key
            C{None} holds the top-level error.
        @param noun: what a key is (C{"topic"}, C{"partition"}), for the
            error of a key the response left out.
        @return: C{{key: KafkaError or None}}; each error's C{error_message}
            is the text the controller sent with it (None: it sent none).  A
            key the response left out fails with C{UNKNOWN_SERVER_ERROR}, as
            Kafka's admin client fails it.
        """
        remaining = None if keys is None else list(keys)
        done: dict = {}
        refresh = [False]

        async def attempt() -> dict:
            node = await self._controller(refresh[0])
            refresh[0] = True  # a retry asks again who the controller is
            response = await self.send(node, api_key, body_for(remaining),
                                       timeout_ms=self.request_timeout_ms + request_timeout_ms)
            results = results_of(response)
            top = results.pop(None, (ErrorCode.none, None))
            if top[0] == ErrorCode.not_controller:
                raise kafka_error(top[0], f"{what}: broker {node} is not the controller")
            if top[0] != ErrorCode.none and not results:
                raise kafka_error(top[0], f"{what}: {top[1] or top[0].name}")
            moved = any(code == ErrorCode.not_controller for code, _ in results.values())
            if moved and remaining is None:
                raise kafka_error(ErrorCode.not_controller, f"{what}: broker {node} is not the controller")
            for key, (code, message) in results.items():
                if code == ErrorCode.not_controller:
                    continue
                if remaining is None or key in remaining:
                    if remaining is not None:
                        remaining.remove(key)
                    done[key] = None if code == ErrorCode.none else _result_error(code, message)
            if moved:
                raise kafka_error(ErrorCode.not_controller, f"{what}: broker {node} is not the controller")
            for key in remaining or ():  # the response left them out
                done[key] = _result_error(ErrorCode.unknown_server_error, f"no answer from the controller for this "
                                          f"{noun}") if top[0] == ErrorCode.none else _result_error(*top)
            return done

        return await self._retry(what, attempt, timeout_ms)

    def create_topics(self, new_topics: Iterable[NewTopic], timeout_ms: int = 30000,
                      validate_only: bool = False) -> defer.Deferred:
        """
        CreateTopics, sent to the controller.

        @param timeout_ms: how long the controller may take (ms); also the operation's timeout.
        @return: a Deferred firing with C{{name: None, or the KafkaError of that topic}}
            (e.g. C{TopicAlreadyExistsError}, C{InvalidReplicationFactorError}).
        """
        topics = {t.name: t for t in new_topics}

        def body(names: list) -> dict:
            return {"topics": [_create_topic_body(topics[n]) for n in names], "timeout": timeout_ms,
                    "timeout_ms": timeout_ms, "validate_only": validate_only}

        def results(r: Any) -> dict:
            return {t.name: (ErrorCode(int(t.error_code)), getattr(t, "error_message", None)) for t in r.topics}

        return defer.Deferred.fromCoroutine(self._to_controller(
            "create topics", 19, body, list(topics), results, timeout_ms, timeout_ms))

    def delete_topics(self, topics: Iterable[str], timeout_ms: int = 30000) -> defer.Deferred:
        """
        DeleteTopics, sent to the controller.

        @return: a Deferred firing with C{{name: None or KafkaError}}.
        """
        def body(names: list) -> dict:
            return {"topics": [{"name": n} for n in names], "topic_names": list(names), "timeout": timeout_ms,
                    "timeout_ms": timeout_ms}

        def results(r: Any) -> dict:
            return {t.name: (ErrorCode(int(t.error_code)), getattr(t, "error_message", None)) for t in r.responses}

        return defer.Deferred.fromCoroutine(self._to_controller(
            "delete topics", 20, body, list(topics), results, timeout_ms, timeout_ms))

    def create_partitions(self, new_partitions: Mapping[str, NewPartitions | int], timeout_ms: int = 30000,
                          validate_only: bool = False) -> defer.Deferred:
        """
        CreatePartitions (grow topics), sent to the controller.

        @param new_partitions: topic -> L{NewPartitions} (or the new total count).
        @return: a Deferred firing with C{{name: None or KafkaError}} (e.g.
            C{InvalidPartitionsError} when the count would not grow the topic).
        """
        wanted = {name: (p if isinstance(p, NewPartitions) else NewPartitions(int(p)))
                  for name, p in new_partitions.items()}

        def body(names: list) -> dict:
            return {"topics": [{"name": n, "count": wanted[n].total_count,
                                "assignments": None if wanted[n].new_assignments is None else
                                [{"broker_ids": list(r)} for r in wanted[n].new_assignments]} for n in names],
                    "timeout": timeout_ms, "timeout_ms": timeout_ms, "validate_only": validate_only}

        def results(r: Any) -> dict:
            return {t.name: (ErrorCode(int(t.error_code)), t.error_message) for t in r.results}

        return defer.Deferred.fromCoroutine(self._to_controller(
            "create partitions", 37, body, list(wanted), results, timeout_ms, timeout_ms))

    def elect_leaders(self, election_type: int = ELECTION_PREFERRED,
                      partitions: Iterable[TopicPartition] | None = None,
                      timeout_ms: int = 30000) -> defer.Deferred:
        """
        ElectLeaders (KIP-460), sent to the controller.

        @param election_type: L{ELECTION_PREFERRED} or L{ELECTION_UNCLEAN}.
        @param partitions: None: every partition.
        @param timeout_ms: how long the controller may take, and the
            operation's timeout, retries included (ms).
        @return: a Deferred firing with C{{(topic, partition): None or KafkaError}}
            (C{ELECTION_NOT_NEEDED} when the preferred replica already leads);
            an error's C{error_message} is the controller's text for that
            partition (None: it sent none).  With C{partitions} None, the
            partitions are those the controller answered for.
        """
        keys = None if partitions is None else sorted(set(partitions))

        def body(tps: list | None) -> dict:
            if tps is None:
                wanted = None
            else:
                by_topic: dict[str, list[int]] = {}
                for topic, partition in tps:
                    by_topic.setdefault(topic, []).append(partition)
                wanted = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
            return {"election_type": election_type, "topic_partitions": wanted, "timeout": timeout_ms,
                    "timeout_ms": timeout_ms}

        def results(r: Any) -> dict:
            out: dict = {None: (ErrorCode(int(getattr(r, "error_code", 0))), None)}
            for t in r.replica_election_results:
                for p in t.partition_result:
                    out[(t.topic, int(p.partition_id))] = (ErrorCode(int(p.error_code)), p.error_message)
            return out

        return defer.Deferred.fromCoroutine(self._to_controller(
            "elect leaders", 43, body, keys, results, timeout_ms, timeout_ms, noun="partition"))

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, list[int] | None],
                                      timeout_ms: int = 30000) -> defer.Deferred:
        """
        AlterPartitionReassignments (KIP-455), sent to the controller.

        @param reassignments: C{(topic, partition)} -> the target replicas, or
            None to cancel an ongoing reassignment.
        @param timeout_ms: how long the controller may take, and the
            operation's timeout, retries included (ms).
        @return: a Deferred firing with C{{(topic, partition): None or KafkaError}};
            an error's C{error_message} is the controller's text for that
            partition (None: it sent none).
        """
        targets = dict(reassignments)

        def body(tps: list) -> dict:
            by_topic: dict[str, list] = {}
            for topic, partition in tps:
                replicas = targets[(topic, partition)]
                by_topic.setdefault(topic, []).append(
                    {"partition_index": partition, "replicas": None if replicas is None else list(replicas)})
            return {"timeout": timeout_ms, "timeout_ms": timeout_ms,
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def results(r: Any) -> dict:
            out: dict = {None: (ErrorCode(int(r.error_code)), r.error_message)}
            for t in r.responses:
                for p in t.partitions:
                    out[(t.name, int(p.partition_index))] = (ErrorCode(int(p.error_code)), p.error_message)
            return out

        return defer.Deferred.fromCoroutine(self._to_controller(
            "alter partition reassignments", 45, body, sorted(targets), results, timeout_ms, timeout_ms,
            noun="partition"))

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None,
                                     timeout_ms: int | None = None) -> defer.Deferred:
        """
        ListPartitionReassignments (KIP-455), sent to the controller.

        @param partitions: None: every ongoing reassignment.
        @return: a Deferred firing with C{{(topic, partition): PartitionReassignment}}.
        """
        wanted = None if partitions is None else sorted(set(partitions))
        refresh = [False]

        async def attempt() -> dict:
            node = await self._controller(refresh[0])
            refresh[0] = True
            topics = None
            if wanted is not None:
                by_topic: dict[str, list[int]] = {}
                for topic, partition in wanted:
                    by_topic.setdefault(topic, []).append(partition)
                topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
            r = await self.send(node, 46, {"timeout": self.request_timeout_ms, "timeout_ms": self.request_timeout_ms,
                                           "topics": topics})
            if r.error_code != ErrorCode.none:
                raise kafka_error(ErrorCode(int(r.error_code)), r.error_message or "list partition reassignments")
            return {(t.name, int(p.partition_index)): PartitionReassignment(
                        list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                    for t in r.topics for p in t.partitions}

        return defer.Deferred.fromCoroutine(self._retry("list partition reassignments", attempt, timeout_ms))

    # --- configs -------------------------------------------------------------------------

    def describe_configs(self, resources: Iterable[tuple[int, str]], keys: Iterable[str] | None = None,
                         timeout_ms: int | None = None) -> defer.Deferred:
        """
        DescribeConfigs of C{(resource type, name)} pairs (L{RESOURCE_TOPIC},
        L{RESOURCE_BROKER}); a broker's configs are asked of that broker.

        @param keys: only these config names (None: all).
        @return: a Deferred firing with C{{(type, name): {config name: ConfigEntry}}}.
        @raise KafkaError: (as failure) a resource's error, e.g. C{UNKNOWN_TOPIC_OR_PARTITION}.
        """
        wanted = list(resources)
        names = None if keys is None else list(keys)

        async def ask(node: int | None, group: list[tuple[int, str]]) -> dict:
            if node is None:
                node = self.client.least_loaded_node()
            elif node not in self.client.brokers:  # a broker's address comes from metadata
                await self.client.refresh_metadata()
            r = await self.send(node, 32, {
                "resources": [{"resource_type": rt, "resource_name": n, "configuration_keys": names} for rt, n in group],
                "include_synonyms": False, "include_documentation": False})
            out = {}
            for result in r.results:
                code = ErrorCode(int(result.error_code))
                if code != ErrorCode.none:
                    raise kafka_error(code, result.error_message or f"{result.resource_name}: {code.name}")
                out[(int(result.resource_type), result.resource_name)] = {
                    c.name: ConfigEntry(c.name, c.value, int(getattr(c, "config_source", -1)), bool(c.is_sensitive),
                                        bool(c.read_only)) for c in result.configs}
            return out

        async def go() -> dict:
            out: dict = {}
            # A broker's configs are asked of that broker; the cluster default ("") of any.
            topics = [r for r in wanted if r[0] != RESOURCE_BROKER or r[1] == ""]
            if topics:
                out.update(await self._retry("describe configs", lambda: ask(None, topics), timeout_ms))
            for resource in wanted:
                if resource[0] == RESOURCE_BROKER and resource[1] != "":
                    broker = int(resource[1])
                    out.update(await self._retry("describe configs", lambda: ask(broker, [resource]), timeout_ms))
            return out

        return defer.Deferred.fromCoroutine(go())

    def incremental_alter_configs(self, changes: Mapping[tuple[int, str], Iterable[tuple[str, int, str | None]]],
                                  validate_only: bool = False, timeout_ms: int | None = None) -> defer.Deferred:
        """
        IncrementalAlterConfigs (KIP-339): C{(resource type, name)} ->
        C{(config name, operation, value)} with operation 0 SET, 1 DELETE,
        2 APPEND, 3 SUBTRACT (list configs).  A broker resource named C{""} is
        the cluster-wide default.

        @return: a Deferred firing with C{{(type, name): None | KafkaError}}.
        """
        wanted = {key: list(ops) for key, ops in changes.items()}

        async def attempt() -> dict:
            r = await self.send(self.client.least_loaded_node(), 44, {
                "resources": [{"resource_type": rt, "resource_name": n, "configs": [
                    {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}
                    for (rt, n), ops in wanted.items()],
                "validate_only": validate_only})
            out: dict = {}
            for result in r.responses:
                code = ErrorCode(int(result.error_code))
                out[(int(result.resource_type), result.resource_name)] = None if code == ErrorCode.none else \
                    kafka_error(code, result.error_message or code.name)
            return out

        return defer.Deferred.fromCoroutine(self._retry("alter configs", attempt, timeout_ms))

    # --- client quotas (KIP-546) -----------------------------------------------------------

    def describe_client_quotas(self, components: Iterable[ClientQuotaFilterComponent] = (), strict: bool = False,
                               timeout_ms: int | None = None) -> defer.Deferred:
        """
        DescribeClientQuotas: the quotas of the entities matching every
        component (no components: all; C{strict}: only entities without other
        component types).

        @return: a Deferred firing with C{{entity: {key: value}}}, each entity
            a tuple of C{(entity_type, name or None)} pairs as the broker lists them.
        @raise KafkaError: (as failure) the request's error (e.g. C{CLUSTER_AUTHORIZATION_FAILED}).
        """
        body = {"components": [{"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match}
                               for c in components], "strict": strict}

        async def attempt() -> dict:
            r = await self.send(self.client.least_loaded_node(), 48, body)
            code = ErrorCode(int(r.error_code))
            if code != ErrorCode.none:
                raise _result_error(code, r.error_message)
            return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
                    {v.key: float(v.value) for v in entry.values} for entry in r.entries or ()}

        return defer.Deferred.fromCoroutine(self._retry("describe client quotas", attempt, timeout_ms))

    def alter_client_quotas(self, alterations: Iterable[ClientQuotaAlteration], validate_only: bool = False,
                            timeout_ms: int | None = None) -> defer.Deferred:
        """
        AlterClientQuotas: set and remove quotas of entities, stored by the
        broker in ZooKeeper (C{/config/users}, C{/config/clients}).

        @return: a Deferred firing with C{{entity: None | KafkaError}} (e.g.
            C{INVALID_REQUEST} for an unknown key or a fractional byte rate).
        """
        entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in a.entity],
                    "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                            for k, v in a.ops]} for a in alterations]

        async def attempt() -> dict:
            r = await self.send(self.client.least_loaded_node(), 49, {"entries": entries,
                                                                      "validate_only": validate_only})
            out: dict = {}
            for entry in r.entries:
                code = ErrorCode(int(entry.error_code))
                out[tuple((e.entity_type, e.entity_name) for e in entry.entity)] = \
                    _result_error(code, entry.error_message) if code != ErrorCode.none else None
            return out

        return defer.Deferred.fromCoroutine(self._retry("alter client quotas", attempt, timeout_ms))

    # --- SCRAM credentials (KIP-554) ------------------------------------------------------

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None,
                                        timeout_ms: int | None = None) -> defer.Deferred:
        """
        DescribeUserScramCredentials: the mechanisms and iteration counts of
        C{users}' credentials (None: of every user having one).

        @return: a Deferred firing with C{{user: [ScramCredentialInfo] | KafkaError}}
            (e.g. C{RESOURCE_NOT_FOUND} for a user without credentials).
        @raise KafkaError: (as failure) the request's own error.
        """
        names = None if users is None else list(users)
        kinds = {t: m for m, t in SCRAM_MECHANISM_TYPES.items()}

        async def attempt() -> dict:
            r = await self.send(self.client.least_loaded_node(), 50,
                                {"users": None if names is None else [{"name": n} for n in names]})
            code = ErrorCode(int(r.error_code))
            if code != ErrorCode.none:
                raise _result_error(code, r.error_message)
            out: dict = {}
            for result in r.results:
                code = ErrorCode(int(result.error_code))
                out[result.user] = _result_error(code, result.error_message) if code != ErrorCode.none else [
                    ScramCredentialInfo(kinds.get(int(c.mechanism), f"UNKNOWN({int(c.mechanism)})"),
                                        int(c.iterations)) for c in result.credential_infos]
            return out

        return defer.Deferred.fromCoroutine(self._retry("describe SCRAM credentials", attempt, timeout_ms))

    def alter_user_scram_credentials(self, alterations: Iterable[UserScramCredentialUpsertion
                                                                 | UserScramCredentialDeletion],
                                     timeout_ms: int | None = None) -> defer.Deferred:
        """
        AlterUserScramCredentials: upsertions carry the salted password
        (L{kafkatw.security.sasl.salted_password}), never the password.

        @return: a Deferred firing with C{{user: None | KafkaError}} (Kafka's
            C{UNACCEPTABLE_CREDENTIAL}, C{UNSUPPORTED_SASL_MECHANISM},
            C{RESOURCE_NOT_FOUND}, C{DUPLICATE_RESOURCE}).
        @raise ValueError: an unknown mechanism name.
        """
        deletions, upsertions = [], []
        for a in alterations:
            if a.mechanism not in SCRAM_MECHANISM_TYPES:
                raise ValueError(f"unknown SCRAM mechanism {a.mechanism!r}")
            kind = SCRAM_MECHANISM_TYPES[a.mechanism]
            if isinstance(a, UserScramCredentialDeletion):
                deletions.append({"name": a.user, "mechanism": kind})
            else:
                salt = a.salt if a.salt is not None else os.urandom(32)
                upsertions.append({"name": a.user, "mechanism": kind, "iterations": a.iterations, "salt": salt,
                                   "salted_password": salted_password(a.mechanism, a.password, salt, a.iterations)
                                   if a.iterations > 0 else b""})

        async def attempt() -> dict:
            r = await self.send(self.client.least_loaded_node(), 51,
                                {"deletions": deletions, "upsertions": upsertions})
            out: dict = {}
            for result in r.results:
                code = ErrorCode(int(result.error_code))
                out[result.user] = None if code == ErrorCode.none else _result_error(code, result.error_message)
            return out

        return defer.Deferred.fromCoroutine(self._retry("alter SCRAM credentials", attempt, timeout_ms))

    # --- offsets ---------------------------------------------------------------------------

    def list_offsets(self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None,
                     isolation_level: int = 0) -> defer.Deferred:
        """
        ListOffsets: for each partition the offset for a timestamp (ms), or
        L{EARLIEST_TIMESTAMP} (the log start offset) or L{LATEST_TIMESTAMP}
        (the high watermark); one request per leader, following leaders as
        they move (see the module docstring), with the leader epoch known
        from the metadata (KIP-320).

        @return: a Deferred firing with C{{(topic, partition): ListOffsetsResultInfo}}.
        @raise UnknownTopicOrPartitionError: (as failure) a topic or partition
            stays missing from the metadata.
        """
        remaining = dict(timestamps)
        found: dict[TopicPartition, ListOffsetsResultInfo] = {}
        missing_rounds = [0]

        async def attempt() -> dict:
            topics = sorted({t for t, _ in remaining})
            self.client.want(topics)
            await self.client.ensure_metadata(topics)
            missing = [tp for tp in remaining
                       if tp[0] not in self.client.topics or tp[1] not in self.client.topics[tp[0]]]
            if missing:
                missing_rounds[0] += 1
                if missing_rounds[0] > _UNKNOWN_TOPIC_ROUNDS:
                    t, p = missing[0]
                    raise UnknownTopicOrPartitionError(f"{t}-{p} does not exist")
            by_node: dict[int, dict[str, list[dict]]] = {}
            for (topic, partition), ts in remaining.items():
                meta = self.client.topics.get(topic, {}).get(partition)
                if meta is None or meta.leader < 0:
                    continue
                by_node.setdefault(meta.leader, {}).setdefault(topic, []).append(
                    {"partition_index": partition, "timestamp": ts, "current_leader_epoch": meta.leader_epoch})
            requests = [defer.ensureDeferred(self.send(node, 2, {
                "replica_id": -1, "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics_.items()]}))
                for node, topics_ in by_node.items()]
            partitions, error = await _partitions_of_responses(requests)
            for tp, p in partitions:
                if tp not in remaining:
                    continue
                code = ErrorCode(int(p.error_code))
                if code == ErrorCode.none:
                    found[tp] = ListOffsetsResultInfo(int(p.offset), int(p.timestamp),
                                                      int(getattr(p, "leader_epoch", -1)))
                    del remaining[tp]
                elif code in _RETRY or code == ErrorCode.unknown_topic_or_partition:
                    error = kafka_error(code, f"list offsets of {tp[0]}-{tp[1]}: {code.name}")
                else:
                    raise kafka_error(code, f"list offsets of {tp[0]}-{tp[1]}: {code.name}")
            if remaining:
                if error is None or error.error_code == ErrorCode.unknown_topic_or_partition:
                    t, p = next(iter(remaining))
                    error = kafka_error(ErrorCode.leader_not_available, f"no leader for {t}-{p}")
                raise error
            return found

        return defer.Deferred.fromCoroutine(self._retry("list offsets", attempt, timeout_ms))

    def delete_records(self, offsets: Mapping[TopicPartition, int], timeout_ms: int = 30000) -> defer.Deferred:
        """
        DeleteRecords (KIP-107): move each partition's log start offset up to
        its offset (C{-1}: the high watermark), one request per leader; the
        leaders answer once their in-sync followers have it too, within
        C{timeout_ms}.  Leadership changes are followed until the timeout.

        @return: a Deferred firing with C{{(topic, partition): (low_watermark,
            KafkaError or None)}}.
        @raise UnknownTopicOrPartitionError: (as failure) a partition stays
            missing from the metadata.
        """
        remaining = dict(offsets)
        results: dict[TopicPartition, tuple[int, KafkaError | None]] = {}

        async def attempt() -> dict:
            topics = sorted({t for t, _ in remaining})
            self.client.want(topics)
            await self.client.ensure_metadata(topics)
            by_node: dict[int, dict[str, list[dict]]] = {}
            for (topic, partition), offset in remaining.items():
                meta = self.client.topics.get(topic, {}).get(partition)
                if meta is None:
                    if topic in self.client.topics:
                        results[(topic, partition)] = (-1, UnknownTopicOrPartitionError(f"{topic}-{partition}"))
                    continue
                if meta.leader >= 0:
                    by_node.setdefault(meta.leader, {}).setdefault(topic, []).append(
                        {"partition_index": partition, "offset": offset})
            for tp in results:
                remaining.pop(tp, None)
            requests = [defer.ensureDeferred(self.send(node, 21, {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics_.items()], "timeout": timeout_ms},
                timeout_ms=timeout_ms + self.request_timeout_ms)) for node, topics_ in by_node.items()]
            partitions, error = await _partitions_of_responses(requests)
            for tp, p in partitions:
                code = ErrorCode(int(p.error_code))
                if code in _RETRY and code != ErrorCode.request_timed_out:
                    error = kafka_error(code, f"delete records of {tp[0]}-{tp[1]}: {code.name}")
                    continue
                results[tp] = (int(p.low_watermark), None if code == ErrorCode.none else
                               kafka_error(code, f"{tp[0]}-{tp[1]}: {code.name}"))
                remaining.pop(tp, None)
            if remaining:
                if error is None:
                    t, p = next(iter(remaining))
                    if t not in self.client.topics:
                        raise UnknownTopicOrPartitionError(f"{t}-{p} does not exist")
                    error = kafka_error(ErrorCode.leader_not_available, f"no leader for {t}-{p}")
                raise error
            return results

        async def go() -> dict:
            try:
                return await self._retry("delete records", attempt, timeout_ms)
            except KafkaError as e:
                if not results and not isinstance(e, UnknownTopicOrPartitionError):
                    raise
                for tp in remaining:
                    results[tp] = (-1, e)
                return results

        return defer.Deferred.fromCoroutine(go())

    def describe_log_dirs(self, brokers: Iterable[int] | None = None, topics: Iterable[TopicPartition] | None = None,
                          timeout_ms: int | None = None) -> defer.Deferred:
        """
        DescribeLogDirs (KIP-113) on each of C{brokers} (default: every broker).

        @param topics: the partitions to describe (default: every one).
        @return: a Deferred firing with C{{broker id: [DescribeLogDirsResult]}}
            (kio entities: C{log_dir}, C{error_code}, C{topics} of C{name}
            and C{partitions} with C{partition_index}, C{partition_size},
            C{offset_lag}, C{is_future_key}).
        @raise KafkaError: (as failure) a broker answered a top-level error
            (C{CLUSTER_AUTHORIZATION_FAILED}) or cannot be reached.
        """
        wanted = None
        if topics is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in topics:
                by_topic.setdefault(topic, []).append(partition)
            wanted = [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]

        async def attempt() -> dict:
            await self._metadata([])
            nodes = sorted(self.client.brokers) if brokers is None else sorted(set(brokers))
            answers = {}
            for node in nodes:
                if node not in self.client.brokers:
                    raise kafka_error(ErrorCode.broker_not_available, f"broker {node} is not in the cluster")
                response = await self.send(node, 35, {"topics": wanted})
                code = ErrorCode(int(getattr(response, "error_code", 0)))
                if code != ErrorCode.none:
                    raise kafka_error(code, f"describe log dirs of broker {node}: {code.name}")
                answers[node] = list(response.results)
            return answers

        return defer.Deferred.fromCoroutine(self._retry("describe log dirs", attempt, timeout_ms))

    def alter_replica_log_dirs(self, assignment: Mapping[tuple[str, int, int], str],
                               timeout_ms: int | None = None) -> defer.Deferred:
        """
        AlterReplicaLogDirs (KIP-113; Kafka's C{Admin.alterReplicaLogDirs}):
        move each replica C{(topic, partition, broker id)} to the log dir (an
        absolute path of that broker's C{log.dirs}); one request per broker.

        @return: a Deferred firing with C{{(topic, partition, broker id):
            ErrorCode}} (C{NONE}: the move started, or the replica is there
            already; C{REPLICA_NOT_AVAILABLE}: no replica on that broker yet,
            the dir is remembered for when it is created; C{LOG_DIR_NOT_FOUND},
            C{KAFKA_STORAGE_ERROR}, C{CLUSTER_AUTHORIZATION_FAILED}).
        @raise KafkaError: (as failure) a broker cannot be reached.
        """
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (topic, partition, broker), log_dir in assignment.items():
            by_broker.setdefault(int(broker), {}).setdefault(log_dir, {}).setdefault(topic, []).append(partition)

        async def attempt() -> dict:
            await self._metadata([])
            answers: dict[tuple[str, int, int], ErrorCode] = {}
            for node in sorted(by_broker):
                if node not in self.client.brokers:
                    raise kafka_error(ErrorCode.broker_not_available, f"broker {node} is not in the cluster")
                dirs = [{"path": path, "topics": [{"name": t, "partitions": sorted(ps)}
                                                  for t, ps in sorted(topics.items())]}
                        for path, topics in sorted(by_broker[node].items())]
                response = await self.send(node, 34, {"dirs": dirs})
                for t in response.results:
                    for p in t.partitions:
                        answers[(t.topic_name, int(p.partition_index), node)] = ErrorCode(int(p.error_code))
            return answers

        return defer.Deferred.fromCoroutine(self._retry("alter replica log dirs", attempt, timeout_ms))

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition],
                                      timeout_ms: int | None = None) -> defer.Deferred:
        """
        OffsetDelete (KIP-496) on the group's coordinator.

        @return: a Deferred firing with C{{(topic, partition): ErrorCode}}.
        @raise KafkaError: (as failure) the request's top-level error
            (C{GROUP_ID_NOT_FOUND}, C{NON_EMPTY_GROUP}, C{GROUP_AUTHORIZATION_FAILED} ...).
        """
        by_topic: dict[str, list[dict]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append({"partition_index": partition})
        body = {"group_id": group_id, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        d = self.coordinator_request(group_id, 47, body, version=0, timeout_ms=timeout_ms,
                                     error_of=lambda r: r.error_code)

        def results(response: Any) -> dict:
            code = ErrorCode(int(response.error_code))
            if code != ErrorCode.none:
                raise kafka_error(code, f"delete offsets of group {group_id!r}: {code.name}")
            return {(t.name, int(p.partition_index)): ErrorCode(int(p.error_code))
                    for t in response.topics for p in t.partitions}

        return d.addCallback(results)

    # --- groups --------------------------------------------------------------------------------

    async def _find_coordinator(self, group_id: str) -> int:
        node = self.client.least_loaded_node()
        connection = await self.client.connection(node)
        version = connection.versions.get(10, 2)
        if version >= 4:
            r = await connection.request(10, {"key_type": 0, "coordinator_keys": [group_id]}, version=version)
            found = r.coordinators[0]
        else:
            found = await connection.request(10, {"key": group_id, "key_type": 0}, version=max(version, 1))
        code = ErrorCode(int(found.error_code))
        if code != ErrorCode.none:
            raise kafka_error(code, f"finding the coordinator of group {group_id!r}: {code.name}")
        node_id = int(found.node_id)
        if node_id not in self.client.brokers:
            self.client.brokers[node_id] = (found.host, int(found.port))
        self._coordinators[group_id] = node_id
        return node_id

    def find_coordinator(self, group_id: str, timeout_ms: int | None = None) -> defer.Deferred:
        """
        FindCoordinator for a consumer group (remembered until L{forget_coordinator}).

        @return: a Deferred firing with the coordinator's broker id.
        """
        return defer.Deferred.fromCoroutine(self._retry(
            "find coordinator", lambda: self._find_coordinator(group_id), timeout_ms))

    def forget_coordinator(self, group_id: str) -> None:
        """The group's coordinator moved: look it up again on the next request."""
        self._coordinators.pop(group_id, None)

    def coordinator_request(self, group_id: str, api_key: int, body: Any, version: int | None = None,
                            timeout_ms: int | None = None, error_of: Callable[[Any], Any] | None = None,
                            retry: bool = True) -> defer.Deferred:
        """
        A raw request to the coordinator of C{group_id} (JoinGroup, OffsetFetch, …).

        @param version: the version to speak (group APIs: give it).
        @param timeout_ms: the request's timeout (ms; default C{request_timeout_ms}).
        @param error_of: response -> its top-level error code; with C{retry},
            a coordinator-moved code sends the request again to the new coordinator.
        @param retry: retry lost connections and moved coordinators within
            C{default_api_timeout_ms}; without it they fail (the coordinator is forgotten).
        @return: a Deferred firing with the kio response.
        """
        async def attempt() -> Any:
            node = self._coordinators.get(group_id)
            if node is None:
                node = await self._find_coordinator(group_id)
            try:
                response = await self.send(node, api_key, body, version=version, timeout_ms=timeout_ms)
            except KafkaError as e:
                if e.error_code in _RETRY:
                    self.forget_coordinator(group_id)
                raise
            if retry and error_of is not None:
                code = ErrorCode(int(error_of(response)))
                if code in _COORDINATOR_MOVED:
                    self.forget_coordinator(group_id)
                    raise kafka_error(code, f"coordinator of group {group_id!r}: {code.name}")
            return response

        if not retry:
            return defer.Deferred.fromCoroutine(attempt())
        timeout = self.default_api_timeout_ms if timeout_ms is None else max(timeout_ms, self.default_api_timeout_ms)
        return defer.Deferred.fromCoroutine(self._retry(f"request {api_key} of group {group_id!r}", attempt, timeout))

    def list_consumer_groups(self, version: int = 2, timeout_ms: int | None = None) -> defer.Deferred:
        """
        ListGroups on every broker.

        @return: a Deferred firing with the sorted group ids.
        """
        async def go() -> list[str]:
            cluster = await self.describe_cluster(timeout_ms)
            groups: set[str] = set()
            for node in sorted(cluster.nodes):
                async def attempt(node: int = node) -> Any:
                    r = await self.send(node, 16, {}, version=version)
                    if r.error_code != ErrorCode.none:
                        raise kafka_error(ErrorCode(int(r.error_code)), f"listing the groups of broker {node}")
                    return r
                r = await self._retry("list groups", attempt, timeout_ms)
                groups.update(g.group_id for g in r.groups)
            return sorted(groups)

        return defer.Deferred.fromCoroutine(go())

    # --- ACLs (KIP-11, KIP-290) -----------------------------------------------------------------

    def create_acls(self, bindings: Iterable[AclBinding], timeout_ms: int | None = None) -> defer.Deferred:
        """
        CreateAcls.

        @return: a Deferred firing with C{{binding: None | KafkaError}} (e.g.
            C{CLUSTER_AUTHORIZATION_FAILED} without Alter on the cluster,
            C{SECURITY_DISABLED} from a broker without an authorizer).
        """
        wanted = list(bindings)

        async def attempt() -> dict:
            r = await self.send(self.client.least_loaded_node(), 30, {"creations": [
                {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
                 "resource_pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
                 "host": b.entry.host, "operation": int(b.entry.operation),
                 "permission_type": int(b.entry.permission_type)} for b in wanted]})
            out: dict = {}
            for binding, result in zip(wanted, r.results):
                code = ErrorCode(int(result.error_code))
                out[binding] = None if code == ErrorCode.none else _result_error(code, result.error_message)
            return out

        return defer.Deferred.fromCoroutine(self._retry("create ACLs", attempt, timeout_ms))

    def describe_acls(self, acl_filter: AclBindingFilter, timeout_ms: int | None = None) -> defer.Deferred:
        """
        DescribeAcls.

        @return: a Deferred firing with the matching L{AclBinding}s.
        @raise KafkaError: (as failure) the response's error.
        """
        async def attempt() -> list[AclBinding]:
            r = await self.send(self.client.least_loaded_node(), 29, _acl_filter_body(acl_filter))
            code = ErrorCode(int(r.error_code))
            if code != ErrorCode.none:
                raise _result_error(code, r.error_message)
            return [AclBinding(
                ResourcePattern(ResourceType(res.resource_type), res.resource_name, PatternType(res.pattern_type)),
                AccessControlEntry(a.principal, a.host, AclOperation(a.operation), AclPermissionType(a.permission_type)))
                for res in r.resources for a in res.acls]

        return defer.Deferred.fromCoroutine(self._retry("describe ACLs", attempt, timeout_ms))

    def delete_acls(self, filters: Iterable[AclBindingFilter], timeout_ms: int | None = None) -> defer.Deferred:
        """
        DeleteAcls.

        @return: a Deferred firing with C{{filter: [deleted AclBinding] | KafkaError}}.
        """
        wanted = list(filters)

        async def attempt() -> dict:
            r = await self.send(self.client.least_loaded_node(), 31,
                                {"filters": [_acl_filter_body(f) for f in wanted]})
            out: dict = {}
            for acl_filter, result in zip(wanted, r.filter_results):
                code = ErrorCode(int(result.error_code))
                if code != ErrorCode.none:
                    out[acl_filter] = _result_error(code, result.error_message)
                    continue
                out[acl_filter] = [AclBinding(
                    ResourcePattern(ResourceType(m.resource_type), m.resource_name, PatternType(m.pattern_type)),
                    AccessControlEntry(m.principal, m.host, AclOperation(m.operation),
                                       AclPermissionType(m.permission_type))) for m in result.matching_acls]
            return out

        return defer.Deferred.fromCoroutine(self._retry("delete ACLs", attempt, timeout_ms))

    # --- transactions (KIP-98, KIP-664) -------------------------------------------------------------

    def list_transactions(self, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
                          duration_filter_ms: int = -1, timeout_ms: int | None = None) -> defer.Deferred:
        """
        ListTransactions on every broker (each lists the ids it coordinates).

        @param state_filters: only these states (C{"Ongoing"}, …; empty: all).
        @param duration_filter_ms: only transactions open longer than this (ms; -1: all; KIP-994).
        @return: a Deferred firing with L{TransactionListing}s sorted by transactional id.
        """
        states, pids = list(state_filters), list(producer_id_filters)

        async def go() -> list[TransactionListing]:
            cluster = await self.describe_cluster(timeout_ms)
            found: list[TransactionListing] = []
            for node in sorted(cluster.nodes):
                async def attempt(node: int = node) -> Any:
                    r = await self.send(node, 66, {"state_filters": states, "producer_id_filters": pids,
                                                   "duration_filter": duration_filter_ms})
                    if r.error_code != ErrorCode.none:
                        raise kafka_error(ErrorCode(int(r.error_code)),
                                          f"listing the transactions of broker {node}")
                    return r
                r = await self._retry("list transactions", attempt, timeout_ms)
                found += [TransactionListing(t.transactional_id, node, int(t.producer_id), t.transaction_state)
                          for t in r.transaction_states]
            return sorted(found, key=lambda t: t.transactional_id)

        return defer.Deferred.fromCoroutine(go())

    def describe_transactions(self, transactional_ids: Iterable[str],
                              timeout_ms: int | None = None) -> defer.Deferred:
        """
        DescribeTransactions of each id on its transaction coordinator (FindCoordinator, key type 1).

        @return: a Deferred firing with C{{transactional_id: TransactionDescription}};
            failing with the first id's error (e.g. C{TRANSACTIONAL_ID_NOT_FOUND}).
        """
        from .transaction_manager import COORDINATOR_TRANSACTION, find_coordinator

        async def go() -> dict[str, TransactionDescription]:
            out = {}
            for tid in transactional_ids:
                async def attempt(tid: str = tid) -> TransactionDescription:
                    node = await find_coordinator(self.client, tid, COORDINATOR_TRANSACTION)
                    r = await self.send(node, 65, {"transactional_ids": [tid]})
                    state = r.transaction_states[0]
                    code = ErrorCode(int(state.error_code))
                    if code != ErrorCode.none:
                        raise kafka_error(code, f"describing transactional id {tid!r}: {code.name}")
                    return TransactionDescription(
                        node, tid, state.transaction_state, int(state.producer_id), int(state.producer_epoch),
                        _as_ms(state.transaction_timeout), _as_ms(state.transaction_start_time),
                        sorted((t.topic, int(p)) for t in state.topics for p in t.partitions))
                out[tid] = await self._retry("describe transactions", attempt, timeout_ms)
            return out

        return defer.Deferred.fromCoroutine(go())

    def describe_producers(self, partitions: Iterable[TopicPartition], broker_id: int | None = None,
                           timeout_ms: int | None = None) -> defer.Deferred:
        """
        DescribeProducers of each partition on its leader (or on C{broker_id}).

        @return: a Deferred firing with C{{(topic, partition): [ProducerState]}};
            failing with a partition's error (C{UNKNOWN_TOPIC_OR_PARTITION}, …).
        """
        wanted = sorted(set(partitions))

        async def go() -> dict[TopicPartition, list[ProducerState]]:
            out: dict[TopicPartition, list[ProducerState]] = {}
            for topic, partition in wanted:
                async def attempt(topic: str = topic, partition: int = partition) -> list[ProducerState]:
                    node = broker_id if broker_id is not None else await self._leader(topic, partition)
                    r = await self.send(node, 61, {"topics": [{"name": topic, "partition_indexes": [partition]}]})
                    p = r.topics[0].partitions[0]
                    code = ErrorCode(int(p.error_code))
                    if code != ErrorCode.none:
                        raise kafka_error(code, f"describing the producers of {topic}-{partition}: {code.name}")
                    return [ProducerState(int(a.producer_id), int(a.producer_epoch), int(a.last_sequence),
                                          int(a.last_timestamp), int(a.coordinator_epoch),
                                          int(a.current_txn_start_offset)) for a in p.active_producers]
                out[(topic, partition)] = await self._retry("describe producers", attempt, timeout_ms)
            return out

        return defer.Deferred.fromCoroutine(go())

    def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int, timeout_ms: int | None = None) -> defer.Deferred:
        """
        Abort a hanging transaction on one partition: WriteTxnMarkers with an
        ABORT marker sent to the partition's leader, as Kafka's
        C{Admin.abortTransaction} (KIP-664) does.  For a transaction whose
        coordinator no longer knows it; the marker closes the partition's open
        transaction of that producer, which unblocks its LSO.

        @return: a Deferred firing with None; failing with the partition's error.
        """
        async def attempt() -> None:
            node = await self._leader(topic, partition)
            r = await self.send(node, 27, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": topic, "partition_indexes": [partition]}]}]})
            for t in r.markers[0].topics:
                for p in t.partitions:
                    code = ErrorCode(int(p.error_code))
                    if code != ErrorCode.none:
                        raise kafka_error(code, f"aborting the transaction of producer {producer_id} on"
                                                f" {topic}-{partition}: {code.name}")

        return defer.Deferred.fromCoroutine(self._retry("abort transaction", attempt, timeout_ms))

    async def _leader(self, topic: str, partition: int) -> int:
        await self.client.ensure_metadata([topic])
        leader = self.client.leader_for(topic, partition)
        if leader < 0:
            if partition not in self.client.partitions_for(topic):
                raise kafka_error(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition} does not exist")
            raise kafka_error(ErrorCode.leader_not_available, f"no leader for {topic}-{partition}")
        return leader

    # --- life cycle -----------------------------------------------------------------------------

    def close(self) -> defer.Deferred:
        """Close the L{KafkaClient} when this admin client made it."""
        self._closed = True
        if self._own_client:
            return self.client.close()
        return defer.succeed(None)


def _as_ms(value: Any) -> int:
    """A kio duration or timestamp (timedelta, datetime, None or int) in ms (-1: none)."""
    import datetime

    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def _create_topic_body(topic: NewTopic) -> dict:
    assignment = topic.replica_assignment
    return {
        "name": topic.name,
        "num_partitions": -1 if assignment else topic.num_partitions,
        "replication_factor": -1 if assignment else topic.replication_factor,
        "assignments": [{"partition_index": p, "broker_ids": list(b)} for p, b in sorted((assignment or {}).items())],
        "configs": [{"name": k, "value": v} for k, v in (topic.configs or {}).items()],
    }


def _acl_filter_body(f: AclBindingFilter) -> dict:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission_type)}


def _result_error(code: ErrorCode, message: str | None) -> KafkaError:
    """The error of one key of a response: C{message} (the broker's text, may be None) as C{error_message}."""
    error = kafka_error(code, message or code.name)
    error.error_message = message
    return error


def _topic_description(t: Any) -> TopicDescription:
    partitions = []
    for p in sorted(t.partitions, key=lambda p: int(p.partition_index)):
        code = ErrorCode(int(p.error_code))
        leader = int(p.leader_id) if code in (ErrorCode.none, ErrorCode.replica_not_available) else -1
        partitions.append(PartitionInfo(
            int(p.partition_index), leader, int(getattr(p, "leader_epoch", -1)),
            [int(r) for r in p.replica_nodes], [int(r) for r in p.isr_nodes],
            [int(r) for r in getattr(p, "offline_replicas", ())], code))
    topic_id = getattr(t, "topic_id", None)
    if topic_id is not None and topic_id.int == 0:
        topic_id = None
    return TopicDescription(t.name, topic_id, bool(getattr(t, "is_internal", False)), partitions)

