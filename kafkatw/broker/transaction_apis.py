"""
The transactional request handlers (KIP-98, KIP-664), mixed into
L{kafkatw.broker.apis.KafkaApis}, and the broker's transaction wiring.

L{TransactionWiring} builds the transaction coordinator
(L{kafkatw.broker.transaction_coordinator.TransactionCoordinator}) over the
broker: its state log is the broker's ``__transaction_state`` partitions
(L{kafkatw.broker.transaction_log.ReplicatedTransactionLog}), its markers go
through the inter-broker client (WriteTxnMarkers) or, for group offsets, to
ZooKeeper (L{kafkatw.broker.transaction_log.GroupOffsetsMarkerWriter}), its
producer ids come from the broker's C{AdminManager}, and it follows the
leadership of the ``__transaction_state`` partitions (the replica manager's
leadership listeners).

``__transaction_state`` is created at the first FindCoordinator for a
transactional id (or InitProducerId with one), as Kafka does: with
C{transaction.state.log.num.partitions} partitions and
C{transaction.state.log.replication.factor} replicas; while fewer brokers are
alive than that factor the creation waits and clients are answered
C{COORDINATOR_NOT_AVAILABLE} (Kafka's rule since 0.11, KAFKA-3959).

Handlers (versions: L{TRANSACTION_VERSIONS}): FindCoordinator key type 1,
InitProducerId (an idempotent producer's, and with a transactional id),
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers (the partition
leader's side), TxnOffsetCommit (the group coordinator's side: pending offsets
in ZooKeeper), DescribeTransactions, ListTransactions, DescribeProducers.

Source: Apache Kafka C{KafkaApis} (C{handleFindCoordinatorRequest},
C{handleInitProducerIdRequest}, C{handleAddPartitionsToTxnRequest},
C{handleAddOffsetsToTxnRequest}, C{handleEndTxnRequest},
C{handleWriteTxnMarkersRequest}, C{handleTxnOffsetCommitRequest},
C{handleDescribeTransactionsRequest}, C{handleListTransactionsRequest},
C{handleDescribeProducersRequest}); KIP-98, KIP-664.

Authorization (with an authorizer only; docs/security.md): the checks of
Kafka's C{KafkaApis} for each handler, with its error codes -- Write on the
TransactionalId for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit and a transactional Produce
(C{TRANSACTIONAL_ID_AUTHORIZATION_FAILED}); IdempotentWrite on the cluster, or Write on
some topic, for an idempotent producer's InitProducerId (KIP-679,
C{CLUSTER_AUTHORIZATION_FAILED}); Write on each topic added to a
transaction (C{TOPIC_AUTHORIZATION_FAILED}, the other partitions
C{OPERATION_NOT_ATTEMPTED}); Read on the group for AddOffsetsToTxn and
TxnOffsetCommit (C{GROUP_AUTHORIZATION_FAILED}) and on each committed topic;
ClusterAction on the cluster for WriteTxnMarkers
(C{CLUSTER_AUTHORIZATION_FAILED}); Describe on the TransactionalId for
FindCoordinator and DescribeTransactions, which ListTransactions uses as its
filter; Read on each topic for DescribeProducers.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode, KafkaError
from ..security.acl import AclOperation, ResourceType
from ..zookeeper.zk_data import CommittedOffset
from .request_context import RequestContext
from .transaction_coordinator import OFFSETS_TOPIC, TransactionCoordinator, fenced_error
from .transaction_log import (
    GroupOffsetsMarkerWriter,
    PendingOffsetStore,
    ReplicatedTransactionLog,
    append_markers,
    transaction_state_create_configs,
)
from .transaction_markers import TransactionMarkerChannel
from .transaction_state import TRANSACTION_STATE_TOPIC, TopicPartition

__all__ = ["TransactionApis", "TransactionWiring", "TRANSACTION_VERSIONS"]

_log = Logger()
_E = ErrorCode
_O = AclOperation
_TXN_ID = ResourceType.TRANSACTIONAL_ID

#: Kafka's C{Topic.isInternal}: AddPartitionsToTxn refuses these as unauthorized.
_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

#: API key -> (min, max) version served for transactions (transactions v1, and
#: KIP-890's partition verification: AddPartitionsToTxn v4, sent by brokers;
#: KIP-890's transactions v2 versions are not served).
TRANSACTION_VERSIONS: dict[int, tuple[int, int]] = {
    22: (0, 4),  # InitProducerId (idempotent and transactional producers)
    24: (0, 4),  # AddPartitionsToTxn (v4: KIP-890's batched form, sent by brokers to verify; v5: v2)
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 3),  # EndTxn (v4: KIP-890's TRANSACTION_ABORTABLE, v5: transactions v2)
    27: (1, 1),  # WriteTxnMarkers (v0 is gone from Kafka 4's definitions; v2: KIP-1228)
    28: (0, 3),  # TxnOffsetCommit (v4+: KIP-890)
    61: (0, 0),  # DescribeProducers (KIP-664)
    65: (0, 0),  # DescribeTransactions (KIP-664)
    66: (0, 1),  # ListTransactions (KIP-664; v1: KIP-994's duration filter)
}

_NO_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.timezone.utc)
_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.timezone.utc)


def _topic_results(codes: dict[TopicPartition, ErrorCode]) -> list[dict]:
    """AddPartitionsToTxn's results by topic, then partition (in C{codes}' order), of C{{(topic, partition): code}}."""
    by_topic: dict[str, list] = {}
    for (name, p), code in codes.items():
        by_topic.setdefault(name, []).append({"partition_index": p, "partition_error_code": int(code)})
    return [{"name": name, "results_by_partition": results} for name, results in by_topic.items()]


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


class TransactionWiring:
    """
    The transaction coordinator of one broker and what it runs on.

    @param replica_manager: the broker's replica manager.
    @param metadata: the broker's metadata cache.
    @param admin: the broker's C{AdminManager} (producer ids, topic creation).
    @param send: C{send(broker_id, api_key, body) -> Deferred} of the response
        (the inter-broker client's C{send}).
    @param reactor: C{IReactorTime}.
    @param now_ms: the wall clock (ms since the epoch): the transactions' and
        the transaction log's timestamps, the markers' batches'.
    """

    def __init__(self, config: Any, replica_manager: Any, metadata: Any, admin: Any, registry: Any,
                 send: Callable[[int, int, Any], defer.Deferred], reactor: Any,
                 now_ms: Callable[[], int]) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.admin = admin
        self.reactor = reactor
        self.now_ms = now_ms
        self.send = send
        self.log = ReplicatedTransactionLog(replica_manager, now_ms, config["offsets.commit.timeout.ms"] * 6)
        self.channel = TransactionMarkerChannel(reactor, lambda broker, body: send(broker, 27, body),
                                                self.leader_for)
        self.pending_offsets = PendingOffsetStore(registry)
        self.markers = GroupOffsetsMarkerWriter(self.channel, self.pending_offsets, reactor)
        self.coordinator = TransactionCoordinator(config, reactor, self.log, self.markers, admin,
                                                  self.partition_exists, now_ms=now_ms)
        self._creating: defer.Deferred | None = None
        self._short_of = -1  # live brokers when the topic last could not be created (logged once per count)
        self.started = False

    def leader_for(self, topic: str, partition: int) -> int | None:
        meta = self.metadata.topics.get(topic)
        if meta is None or partition not in meta.partitions:
            return None
        return self.metadata.leader(topic, partition)

    def partition_exists(self, topic: str, partition: int) -> bool:
        meta = self.metadata.topics.get(topic)
        return meta is not None and partition in meta.partitions

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: list[TopicPartition]) -> defer.Deferred:
        """
        Ask C{transactional_id}'s coordinator whether C{partitions} are in
        the producer's ongoing transaction (KIP-890's partition
        verification): this broker's own coordinator directly, another's by
        AddPartitionsToTxn v4 with C{verify_only}.

        @return: a Deferred firing with C{{(topic, partition): ErrorCode}}
            (L{TransactionCoordinator.verify_partitions_in_txn}); it never
            fails: no coordinator known, or no answer from it, is
            C{COORDINATOR_NOT_AVAILABLE} for each partition.
        """
        unavailable = {tp: ErrorCode.coordinator_not_available for tp in partitions}
        leader = self.metadata.leader(TRANSACTION_STATE_TOPIC, self.coordinator.partition_for(transactional_id))
        if leader is None or leader < 0:
            return defer.succeed(unavailable)
        if leader == self.replica_manager.broker_id:
            return defer.succeed(self.coordinator.verify_partitions_in_txn(
                transactional_id, producer_id, producer_epoch, partitions))
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                  "producer_epoch": producer_epoch, "verify_only": True,
                                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}

        def answered(response: Any) -> dict[TopicPartition, ErrorCode]:
            codes = dict(unavailable)
            if response.error_code != ErrorCode.none:
                return {tp: ErrorCode(int(response.error_code)) for tp in partitions}
            for txn in response.results_by_transaction:
                for topic in txn.topic_results:
                    for p in topic.results_by_partition:
                        key = (topic.name, int(p.partition_index))
                        if key in codes:
                            codes[key] = ErrorCode(int(p.partition_error_code))
            return codes

        def failed(failure: Any) -> dict[TopicPartition, ErrorCode]:
            _log.info("verifying partitions of transactional id {id} with broker {broker} failed: {error}",
                      id=transactional_id, broker=leader, error=failure.getErrorMessage())
            return unavailable

        return self.send(leader, 24, body, version=4).addCallbacks(answered, failed)

    def start(self) -> None:
        """Start the coordinator's timers and follow the leadership of ``__transaction_state``."""
        self.started = True
        self.coordinator.start()
        self.replica_manager.leadership_listeners.append(self.leadership_changed)
        for p in self.replica_manager.led_partitions():
            if p.topic == TRANSACTION_STATE_TOPIC:
                self.leadership_changed(p.topic, p.partition, "leader", p.leader_epoch)

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        if self.leadership_changed in self.replica_manager.leadership_listeners:
            self.replica_manager.leadership_listeners.remove(self.leadership_changed)
        self.coordinator.stop()
        self.markers.close()

    def leadership_changed(self, topic: str, partition: int, role: str, leader_epoch: int | None) -> None:
        """A replica manager leadership listener: load or unload a coordinator partition."""
        if topic != TRANSACTION_STATE_TOPIC:
            return
        if role == "leader":
            d = self.coordinator.on_became_leader(partition, leader_epoch)
            d.addErrback(lambda f: _log.failure("loading {topic}-{partition} failed", f, topic=topic,
                                                partition=partition))
        else:
            self.coordinator.on_resigned(partition, leader_epoch)

    def ensure_topic(self) -> bool:
        """
        Whether ``__transaction_state`` exists; if not, start creating it (once
        enough brokers are alive).
        """
        if TRANSACTION_STATE_TOPIC in self.metadata.topics:
            return True
        if self._creating is None:
            replication_factor = self.config["transaction.state.log.replication.factor"]
            if len(self.metadata.brokers) < replication_factor:
                if self._short_of != len(self.metadata.brokers):
                    self._short_of = len(self.metadata.brokers)
                    _log.warn("{topic} not created: {alive} live brokers, transaction.state.log.replication.factor "
                              "is {rf}", topic=TRANSACTION_STATE_TOPIC, alive=len(self.metadata.brokers),
                              rf=replication_factor)
                return False
            if replication_factor == 1 < len(self.metadata.brokers):
                _log.info("creating {topic} with replication factor 1 on {alive} live brokers: no replica takes "
                          "over its partitions if their broker fails (transaction.state.log.replication.factor=1, "
                          "the single-broker value; set 3, and transaction.state.log.min.isr 2, for a cluster)",
                          topic=TRANSACTION_STATE_TOPIC, alive=len(self.metadata.brokers))
            self._creating = defer.ensureDeferred(self.admin.create_topic(
                TRANSACTION_STATE_TOPIC, self.config["transaction.state.log.num.partitions"], replication_factor,
                None, transaction_state_create_configs(self.config)))

            def done(result: Any) -> None:
                self._creating = None
                if isinstance(result, Exception) or hasattr(result, "value"):
                    error = getattr(result, "value", result)
                    if not (isinstance(error, KafkaError) and error.error_code == _E.topic_already_exists):
                        _log.warn("creating {topic} failed: {error}", topic=TRANSACTION_STATE_TOPIC, error=error)

            self._creating.addBoth(done)
        return False


class TransactionApis:
    """
    The transactional handlers of L{kafkatw.broker.apis.KafkaApis}.

    @ivar transactions: the broker's L{TransactionWiring} (set by the server;
        C{None}: transactional requests are answered C{COORDINATOR_NOT_AVAILABLE}).
    """

    transactions: TransactionWiring | None = None
    # provided by KafkaApis
    broker_id: int
    replica_manager: Any
    metadata: Any
    admin: Any
    group_coordinator: Any
    now_ms: Callable[[], int]
    authorizer: Any
    _allowed: Callable[..., bool]
    _denied_topics: Callable[..., set]
    _group_denied: Callable[..., bool]
    _partition_exists: Callable[[str, int], bool]

    def transaction_handlers(self) -> dict[int, Callable[..., Any]]:
        return {
            22: self.handle_init_producer_id,
            24: self.handle_add_partitions_to_txn,
            25: self.handle_add_offsets_to_txn,
            26: self.handle_end_txn,
            27: self.handle_write_txn_markers,
            28: self.handle_txn_offset_commit,
            61: self.handle_describe_producers,
            65: self.handle_describe_transactions,
            66: self.handle_list_transactions,
        }

    def _respond(self, context: Any, body: Any) -> bytes:  # pragma: no cover - KafkaApis's
        raise NotImplementedError

    @property
    def _coordinator(self) -> TransactionCoordinator | None:
        return self.transactions.coordinator if self.transactions is not None else None

    def _refuse_transactional_produce(self, context: Any, request: Any) -> bool:
        """
        Whether a Produce with a transactional id is refused, every partition
        C{TRANSACTIONAL_ID_AUTHORIZATION_FAILED}: the principal lacks Write on
        the TransactionalId (Kafka's C{handleProduceRequest}).
        """
        return self.authorizer is not None and not self._allowed(context, _O.WRITE, _TXN_ID,
                                                                 request.transactional_id)

    def _txn_id_denied(self, context: Any, transactional_id: str, operation: AclOperation = _O.WRITE) -> bool:
        """Whether an authorizer refuses C{operation} on the TransactionalId (never without one)."""
        return self.authorizer is not None and not self._allowed(context, operation, _TXN_ID, transactional_id)

    @staticmethod
    def _stable_offsets(request: Any, topics: list) -> dict[tuple[str, int], int] | None:
        """
        For a consumer's read-committed Fetch about to wait: each partition's
        last stable offset as read (the wait ends when one passes it).
        """
        if getattr(request, "replica_id", -1) >= 0 or getattr(request, "isolation_level", 0) != 1:
            return None
        return {(name, p.partition_index): p.last_stable_offset for name, partitions in topics for p in partitions}

    def _require_stable(self, fetch: Callable[[], defer.Deferred], request: Any) -> defer.Deferred:
        """
        OffsetFetch v7+ with C{require_stable} (KIP-447): the C{(error, found)}
        of C{fetch()} gets a third element, the partitions whose transactional
        offsets are pending (answered C{UNSTABLE_OFFSET_COMMIT}).

        The pending offsets are read I{before} the committed ones, never after:
        a transaction's COMMIT (L{PendingOffsetStore.complete}) writes the
        committed offsets first and then deletes the pending ones, so offsets
        found not pending are already committed when they are read.  Read the
        other way round, a commit completing between the two reads answered the
        offsets from before the transaction as stable, and a consumer started
        there counted that transaction's input twice.

        @param fetch: starts the read of the committed offsets
            (C{GroupCoordinator.fetch_offsets}).
        """
        if not getattr(request, "require_stable", False) or self.transactions is None:
            return fetch()
        pending = self.transactions.pending_offsets

        async def read() -> tuple:
            try:
                unstable = await pending.unstable(request.group_id)
            except Exception as e:
                _log.warn("reading the pending offsets of group {group} failed: {error}", group=request.group_id,
                          error=e)
                return (ErrorCode.coordinator_not_available, {})
            return (*(await fetch()), unstable)

        return defer.Deferred.fromCoroutine(read())

    # --- FindCoordinator key type 1 ----------------------------------------------------------

    def _find_transaction_coordinator(self, key: str, listener: str = "PLAINTEXT", context: Any = None) -> dict:
        """
        The coordinator of transactional id C{key}, at its C{listener} address:
        with an authorizer, Describe on the TransactionalId is checked first
        (else C{TRANSACTIONAL_ID_AUTHORIZATION_FAILED}, and
        ``__transaction_state`` is not created), as Kafka's C{getCoordinator} does.
        """
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 0,
                                 "error_message": None}
        if context is not None and self._txn_id_denied(context, key, _O.DESCRIBE):
            entry["error_code"] = int(_E.transactional_id_authorization_failed)
            return entry
        wiring = self.transactions
        if not key:
            entry.update(error_code=int(_E.invalid_request), error_message="empty transactional id")
            return entry
        if wiring is None or not wiring.ensure_topic():
            entry.update(error_code=int(_E.coordinator_not_available),
                         error_message=f"{TRANSACTION_STATE_TOPIC} is not available yet")
            return entry
        partition = wiring.coordinator.partition_for(key)
        leader = self.metadata.leader(TRANSACTION_STATE_TOPIC, partition)
        broker = self.metadata.brokers.get(leader)
        address = broker.address(listener) if broker is not None else None
        if broker is None or address is None:
            entry.update(error_code=int(_E.coordinator_not_available),
                         error_message=f"{TRANSACTION_STATE_TOPIC}-{partition} has no leader" if broker is None
                         else f"the coordinator has no listener {listener}")
            return entry
        entry.update(node_id=broker.broker_id, host=address[0], port=address[1])
        return entry

    # --- InitProducerId ----------------------------------------------------------------------

    def handle_init_producer_id(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        """
        A producer id for an idempotent producer (a new id, or the same id
        with its epoch bumped, KIP-360).  A transactional id goes to the
        transaction coordinator (L{_init_transactional_producer_id}).
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

    def _init_transactional_producer_id(self, context: Any, request: Any) -> Any:
        def answer(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> bytes:
            return self._respond(context, {"throttle_time": 0,
                                           "error_code": int(fenced_error(22, context.api_version, code)),
                                           "producer_id": producer_id, "producer_epoch": epoch})

        if self._txn_id_denied(context, request.transactional_id):
            return answer(_E.transactional_id_authorization_failed)
        wiring = self.transactions
        if wiring is None or not wiring.ensure_topic():
            return answer(_E.coordinator_not_available)
        d = wiring.coordinator.init_producer_id(
            request.transactional_id, _ms(request.transaction_timeout), getattr(request, "producer_id", -1),
            getattr(request, "producer_epoch", -1))
        return d.addCallback(lambda r: answer(r.error, r.producer_id, r.producer_epoch))

    # --- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn -----------------------------------------

    def handle_add_partitions_to_txn(self, context: Any, request: Any) -> Any:
        version = context.api_version
        if version >= 4:
            return self._add_partitions_to_txns(context, request)
        topics = request.v3_and_below_topics
        wanted = [(t.name, int(p)) for t in topics for p in t.partitions]

        def answer(codes: dict) -> bytes:
            return self._respond(context, {"throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(
                {tp: fenced_error(24, version, codes[tp]) for tp in wanted})})

        if self.authorizer is not None:
            if self._txn_id_denied(context, request.v3_and_below_transactional_id):
                return answer({tp: _E.transactional_id_authorization_failed for tp in wanted})
            names = {name for name, _ in wanted}
            denied = (self._denied_topics(context, _O.WRITE, names - _INTERNAL_TOPICS)
                      | (names & _INTERNAL_TOPICS))
            if denied:
                # Kafka: nothing is added; the others did not fail a check themselves
                exists = self._partition_exists
                return answer({(name, p): (_E.topic_authorization_failed if name in denied
                                           else _E.operation_not_attempted if exists(name, p)
                                           else _E.unknown_topic_or_partition) for name, p in wanted})
        coordinator = self._coordinator
        if coordinator is None:
            return answer({tp: _E.coordinator_not_available for tp in wanted})
        d = coordinator.add_partitions_to_txn(request.v3_and_below_transactional_id,
                                              request.v3_and_below_producer_id,
                                              request.v3_and_below_producer_epoch, wanted)
        return d.addCallback(answer)

    def _add_partitions_to_txns(self, context: Any, request: Any) -> Any:
        """
        AddPartitionsToTxn v4+ (KIP-890): several transactions, sent by a
        broker (ClusterAction on the cluster, else the top-level
        C{CLUSTER_AUTHORIZATION_FAILED}, as in Kafka).  A transaction with
        C{verify_only} is checked, not changed
        (L{TransactionCoordinator.verify_partitions_in_txn}): a partition
        leader asks before it appends a batch that starts a transaction; the
        others are added as v3 adds them.
        """
        if self.authorizer is not None and not self._allowed(context, _O.CLUSTER_ACTION, ResourceType.CLUSTER):
            return self._respond(context, {"throttle_time": 0, "error_code": int(_E.cluster_authorization_failed),
                                           "results_by_transaction": []})
        coordinator = self._coordinator
        answers: list[defer.Deferred] = []
        for txn in request.transactions:
            wanted = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
            if coordinator is None:
                d = defer.succeed({tp: _E.coordinator_not_available for tp in wanted})
            elif txn.verify_only:
                d = defer.succeed(coordinator.verify_partitions_in_txn(
                    txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch), wanted))
            else:
                d = coordinator.add_partitions_to_txn(txn.transactional_id, int(txn.producer_id),
                                                      int(txn.producer_epoch), wanted)
            answers.append(d)

        def answer(results: list) -> bytes:
            return self._respond(context, {"throttle_time": 0, "error_code": 0, "results_by_transaction": [
                {"transactional_id": txn.transactional_id, "topic_results": _topic_results(codes)}
                for txn, codes in zip(request.transactions, results)]})

        return defer.gatherResults(answers, consumeErrors=True).addCallback(answer)

    def _simple(self, context: Any, api_key: int, d: defer.Deferred | None) -> Any:
        def answer(code: ErrorCode) -> bytes:
            return self._respond(context, {"throttle_time": 0,
                                           "error_code": int(fenced_error(api_key, context.api_version, code))})

        if d is None:
            return answer(_E.coordinator_not_available)
        return d.addCallback(answer)

    def handle_add_offsets_to_txn(self, context: Any, request: Any) -> Any:
        """Write on the TransactionalId, then Read on the group (Kafka's order)."""
        if self._txn_id_denied(context, request.transactional_id):
            return self._simple(context, 25, defer.succeed(_E.transactional_id_authorization_failed))
        if self._group_denied(context, request.group_id):
            return self._simple(context, 25, defer.succeed(_E.group_authorization_failed))
        coordinator = self._coordinator
        d = None if coordinator is None else coordinator.add_offsets_to_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id)
        return self._simple(context, 25, d)

    def handle_end_txn(self, context: Any, request: Any) -> Any:
        if self._txn_id_denied(context, request.transactional_id):
            return self._simple(context, 26, defer.succeed(_E.transactional_id_authorization_failed))
        coordinator = self._coordinator
        d = None if coordinator is None else coordinator.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, bool(request.committed))
        return self._simple(context, 26, d)

    # --- WriteTxnMarkers ---------------------------------------------------------------------

    def handle_write_txn_markers(self, context: Any, request: Any) -> Any:
        """Sent by transaction coordinators: ClusterAction on the cluster, else every partition
        C{CLUSTER_AUTHORIZATION_FAILED} (Kafka's C{authorizeClusterOperation})."""
        if self.authorizer is not None and not self._allowed(context, _O.CLUSTER_ACTION, ResourceType.CLUSTER):
            code = int(_E.cluster_authorization_failed)
            return self._respond(context, {"markers": [
                {"producer_id": int(m.producer_id), "topics": [
                    {"name": t.name, "partitions": [{"partition_index": int(p), "error_code": code}
                                                    for p in t.partition_indexes]} for t in m.topics]}
                for m in request.markers]})
        pending = self.transactions.pending_offsets if self.transactions is not None else None
        d = append_markers(self.replica_manager, request.markers, self.now_ms(), 30000, pending)
        return d.addCallback(lambda body: self._respond(context, body))

    # --- TxnOffsetCommit ---------------------------------------------------------------------

    def handle_txn_offset_commit(self, context: Any, request: Any) -> Any:
        """
        With an authorizer, as Kafka: Write on the TransactionalId (else every
        partition C{TRANSACTIONAL_ID_AUTHORIZATION_FAILED}), Read on the group
        (else C{GROUP_AUTHORIZATION_FAILED}), and Read on each topic: the
        partitions of the others get C{TOPIC_AUTHORIZATION_FAILED}, the rest
        are committed.
        """
        version = context.api_version
        order = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions]
        denied: set[str] = set()

        def answer(code: ErrorCode) -> bytes:
            code = fenced_error(28, version, code)
            topics: dict[str, list] = {}
            for name, p in order:
                topics.setdefault(name, []).append({"partition_index": p, "error_code": int(
                    _E.topic_authorization_failed if name in denied else code)})
            return self._respond(context, {"throttle_time": 0, "topics": [
                {"name": name, "partitions": ps} for name, ps in topics.items()]})

        if self.authorizer is not None:
            if self._txn_id_denied(context, request.transactional_id):
                return answer(_E.transactional_id_authorization_failed)
            if self._group_denied(context, request.group_id):
                return answer(_E.group_authorization_failed)
            denied = self._denied_topics(context, _O.READ, (name for name, _ in order))
            if denied and all(name in denied for name, _ in order):
                return answer(_E.none)
        if self.transactions is None:
            return answer(_E.coordinator_not_available)
        if self.group_coordinator.coordinator(request.group_id) != self.broker_id:
            return answer(_E.not_coordinator)
        offsets = {(t.name, int(p.partition_index)): CommittedOffset(
            int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata or "")
            for t in request.topics if t.name not in denied for p in t.partitions}
        d = self.transactions.pending_offsets.add(request.group_id, int(request.producer_id),
                                                  int(request.producer_epoch), offsets)

        def failed(failure: Any) -> ErrorCode:
            if failure.check(KafkaError):
                return failure.value.error_code
            _log.warn("TxnOffsetCommit of group {group} failed: {error}", group=request.group_id,
                      error=failure.value)
            return _E.coordinator_not_available

        d.addCallbacks(lambda _: _E.none, failed)
        return d.addCallback(answer)

    # --- DescribeTransactions, ListTransactions, DescribeProducers ----------------------------

    def handle_describe_transactions(self, context: Any, request: Any) -> bytes:
        """
        With an authorizer, as Kafka: an id without Describe on it is answered
        C{TRANSACTIONAL_ID_AUTHORIZATION_FAILED}, and a state lists only the
        topics the principal may Describe.
        """
        coordinator = self._coordinator
        ids = list(request.transactional_ids)

        def refused_state(transactional_id: str) -> dict:
            # Kafka's answer: only the id and the error, the other fields their defaults
            return {"transactional_id": transactional_id, "error_code": int(_E.transactional_id_authorization_failed),
                    "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": _EPOCH,
                    "producer_id": 0, "producer_epoch": 0, "topics": []}

        refused = set() if self.authorizer is None else {t for t in ids if self._txn_id_denied(context, t, _O.DESCRIBE)}
        if coordinator is None:
            states = [refused_state(t) if t in refused else {
                "transactional_id": t, "error_code": int(_E.coordinator_not_available), "transaction_state": "",
                "transaction_timeout": 0, "transaction_start_time": _EPOCH, "producer_id": -1, "producer_epoch": -1,
                "topics": []} for t in ids]
        else:
            described = iter(coordinator.describe_transactions([t for t in ids if t not in refused]))
            states = [refused_state(t) if t in refused else next(described) for t in ids]
            for s in states:
                s["error_code"] = int(s["error_code"])
                start = s["transaction_start_time"]
                s["transaction_start_time"] = _NO_TIME if isinstance(start, int) and start < 0 else start
                if self.authorizer is not None and s["topics"]:
                    hidden = self._denied_topics(context, _O.DESCRIBE, (t["topic"] for t in s["topics"]))
                    s["topics"] = [t for t in s["topics"] if t["topic"] not in hidden]
        return self._respond(context, {"throttle_time": 0, "transaction_states": states})

    def handle_list_transactions(self, context: Any, request: Any) -> bytes:
        coordinator = self._coordinator
        if coordinator is None:
            body: dict[str, Any] = {"error_code": _E.coordinator_not_available, "unknown_state_filters": [],
                                    "transaction_states": []}
        else:
            body = coordinator.list_transactions(list(request.state_filters), list(request.producer_id_filters),
                                                 int(getattr(request, "duration_filter", -1)),
                                                 getattr(request, "transactional_id_pattern", None))
            if self.authorizer is not None:
                # Kafka: only the ids the principal may Describe
                body["transaction_states"] = [s for s in body["transaction_states"] if not self._txn_id_denied(
                    context, s["transactional_id"], _O.DESCRIBE)]
        body["error_code"] = int(body["error_code"])
        return self._respond(context, {"throttle_time": 0, **body})

    def handle_describe_producers(self, context: Any, request: Any) -> bytes:
        """With an authorizer, Read on each topic (else C{TOPIC_AUTHORIZATION_FAILED}), as Kafka."""
        denied = set() if self.authorizer is None else \
            self._denied_topics(context, _O.READ, (t.name for t in request.topics))
        topics = []
        for topic in request.topics:
            partitions = []
            for index in topic.partition_indexes:
                entry: dict[str, Any] = {"partition_index": int(index), "error_code": 0, "error_message": None,
                                         "active_producers": []}
                if topic.name in denied:
                    entry["error_code"] = int(_E.topic_authorization_failed)
                    partitions.append(entry)
                    continue
                try:
                    log = self.replica_manager.leader_partition(topic.name, int(index)).log
                    for e in log.producer_state.producers.values():
                        entry["active_producers"].append({
                            "producer_id": e.producer_id, "producer_epoch": e.epoch,
                            "last_sequence": e.last_seq if e.last_seq is not None else -1,
                            "last_timestamp": -1, "coordinator_epoch": e.coordinator_epoch,
                            "current_txn_start_offset": (e.current_txn_first_offset
                                                         if e.current_txn_first_offset is not None else -1)})
                except KafkaError as e:
                    entry.update(error_code=int(e.error_code), error_message=str(e) or None)
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return self._respond(context, {"throttle_time": 0, "topics": topics})
