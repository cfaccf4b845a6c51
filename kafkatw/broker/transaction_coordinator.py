"""
The transaction coordinator (KIP-98), after Kafka's C{TransactionCoordinator}
and C{TransactionStateManager}.

Each transactional id belongs to one partition of the internal topic
``__transaction_state`` (L{partition_for}); the broker leading that partition is
the id's coordinator.  The coordinator keeps the state of its partitions' ids in
memory (L{TransactionMetadata}, one table of states in
L{kafkatw.broker.transaction_state}) and writes every change to the partition
with acks=all before it acts on it or answers, so that the next leader rebuilds
the same state from the log (L{TransactionCoordinator.on_became_leader}) and
finishes what was decided: a transaction found in PrepareCommit or PrepareAbort
gets its markers again; one found Ongoing is left to its timeout.

What the coordinator answers (transactions v1: InitProducerId v0-v5,
AddPartitionsToTxn v0-v3, AddOffsetsToTxn, EndTxn v0-v4):

  - InitProducerId with a transactional id: a new producer id at epoch 0, or the
    same id at the next epoch, which fences every older instance (their requests
    get C{PRODUCER_FENCED}).  An Ongoing transaction of the old instance is
    aborted first (the epoch is bumped, PrepareAbort written, markers sent) and
    the new instance is answered C{CONCURRENT_TRANSACTIONS}, which clients
    retry; a transaction in PrepareCommit or PrepareAbort is likewise waited
    for.  KIP-360: a producer that passes its producer id and epoch (v3+) may
    bump its own epoch, or get the same epoch again on a retry.
  - AddPartitionsToTxn, AddOffsetsToTxn: the transaction becomes Ongoing.
  - EndTxn: PrepareCommit or PrepareAbort is written, the client is answered,
    and the COMMIT or ABORT markers go to every partition of the transaction
    through the injected L{MarkerWriter}; once all are written,
    CompleteCommit or CompleteAbort is written.  EndTxn again with the same
    result answers C{NONE} once complete and C{CONCURRENT_TRANSACTIONS} while
    markers are pending; the other result, or EndTxn with no transaction,
    answers C{INVALID_TXN_STATE}.
  - Transactions open longer than their timeout are aborted (the producer is
    fenced by an epoch bump) every
    C{transaction.abort.timed.out.transaction.cleanup.interval.ms}; ids idle for
    C{transactional.id.expiration.ms} are forgotten (a tombstone) every
    C{transaction.remove.expired.transaction.cleanup.interval.ms}.

Errors are Kafka's: C{NOT_COORDINATOR}, C{COORDINATOR_LOAD_IN_PROGRESS},
C{COORDINATOR_NOT_AVAILABLE} (the log write failed), C{PRODUCER_FENCED} (older
request versions get C{INVALID_PRODUCER_EPOCH}: L{fenced_error}),
C{INVALID_PRODUCER_ID_MAPPING}, C{INVALID_TXN_STATE},
C{CONCURRENT_TRANSACTIONS}, C{INVALID_TRANSACTION_TIMEOUT},
C{UNKNOWN_TOPIC_OR_PARTITION} with C{OPERATION_NOT_ATTEMPTED} for the other
partitions of the request.  A refused request changes nothing.

The coordinator's dependencies are injected (L{TransactionLog},
L{MarkerWriter}, L{ProducerIdAllocator}, a partition-existence callback and the
reactor), so unit tests drive it with fakes (L{kafkatw.testing}) and a
L{twisted.internet.task.Clock}.

Source: Apache Kafka C{kafka.coordinator.transaction} (C{TransactionCoordinator},
C{TransactionStateManager}, C{TransactionMarkerChannelManager}); KIP-98;
KIP-360; KIP-588 (C{PRODUCER_FENCED}); KIP-664 (DescribeTransactions,
ListTransactions); KIP-890 (transactions v2, not served).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from twisted.internet import defer, task
from twisted.logger import Logger

from ..errors import ErrorCode, KafkaError
from .transaction_state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TRANSACTION_STATE_TOPIC,
    InvalidTransition,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    decode_transaction_log_key,
    decode_transaction_log_value,
    encode_transaction_log_key,
    encode_transaction_log_value,
    is_epoch_exhausted,
    java_string_hash,
    partition_for,
)

__all__ = [
    "TransactionLog",
    "MarkerWriter",
    "ProducerIdAllocator",
    "InitProducerIdResult",
    "TransactionCoordinator",
    "fenced_error",
    "offsets_partition_for",
    "transaction_state_topic_configs",
    "OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
]

_log = Logger()

_S = TransactionState
_E = ErrorCode

#: Kafka's group offsets topic: AddOffsetsToTxn adds the group's partition of it
#: to the transaction, as Kafka does, so that ``__transaction_state`` holds what
#: Kafka's would.
OFFSETS_TOPIC = "__consumer_offsets"

#: What a failed ``__transaction_state`` append is answered with (Kafka's
#: C{TransactionStateManager.appendTransactionToLog}).
_APPEND_ERRORS: dict[ErrorCode, ErrorCode] = {
    _E.unknown_topic_or_partition: _E.coordinator_not_available,
    _E.not_enough_replicas: _E.coordinator_not_available,
    _E.not_enough_replicas_after_append: _E.coordinator_not_available,
    _E.request_timed_out: _E.coordinator_not_available,
    _E.coordinator_not_available: _E.coordinator_not_available,
    _E.not_leader_or_follower: _E.not_coordinator,
    _E.kafka_storage_error: _E.not_coordinator,
    _E.not_coordinator: _E.not_coordinator,
    _E.message_too_large: _E.unknown_server_error,
    _E.record_list_too_large: _E.unknown_server_error,
}

#: API key -> the first version whose clients understand C{PRODUCER_FENCED}
#: (KIP-588); older ones get C{INVALID_PRODUCER_EPOCH} (Kafka's C{KafkaApis}).
_PRODUCER_FENCED_SINCE: dict[int, int] = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}


def fenced_error(api_key: int, version: int, code: ErrorCode) -> ErrorCode:
    """
    C{code} as the client of C{api_key} v{version} must see it:
    C{PRODUCER_FENCED} becomes C{INVALID_PRODUCER_EPOCH} below InitProducerId v4,
    AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2 and TxnOffsetCommit v3 (KIP-588).
    """
    if code == _E.producer_fenced and version < _PRODUCER_FENCED_SINCE.get(api_key, 0):
        return _E.invalid_producer_epoch
    return code


def offsets_partition_for(group_id: str, num_partitions: int = 50) -> TopicPartition:
    """
    The group's partition of ``__consumer_offsets`` (Kafka's
    C{GroupCoordinator.partitionFor}: C{Utils.abs(groupId.hashCode) %
    offsets.topic.num.partitions}, 50 by default).
    """
    h = java_string_hash(group_id)
    return OFFSETS_TOPIC, (0 if h == -(1 << 31) else abs(h)) % num_partitions


def transaction_state_topic_configs(config: Any) -> dict[str, str]:
    """
    The topic configs ``__transaction_state`` is created with (Kafka's
    C{TransactionStateManager.transactionTopicConfigs}): compacted, its
    C{min.insync.replicas} and segment size from the broker config, no unclean
    elections.
    """
    return {
        "cleanup.policy": "compact",
        "min.insync.replicas": str(config["transaction.state.log.min.isr"]),
        "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
        "unclean.leader.election.enable": "false",
    }


# --- injected interfaces --------------------------------------------------------------


class TransactionLog(Protocol):
    """
    The ``__transaction_state`` partitions of this broker (wired to the replica
    manager: records are (key, value) pairs of one uncompressed record batch).
    """

    def append(self, partition: int, coordinator_epoch: int,
               records: Sequence[tuple[bytes, bytes | None]]) -> defer.Deferred:
        """
        Append C{records} (key, value; value None: a tombstone) to partition
        C{partition} of ``__transaction_state`` as its leader at leader epoch
        C{coordinator_epoch}, with acks=all (C{transaction.state.log.min.isr}).

        @return: a Deferred that fires with None once the records are
            replicated (the high watermark passed them), or fails with a
            L{KafkaError}: C{NOT_LEADER_OR_FOLLOWER} (no longer the leader, or
            another leader epoch), C{NOT_ENOUGH_REPLICAS},
            C{NOT_ENOUGH_REPLICAS_AFTER_APPEND}, C{REQUEST_TIMED_OUT},
            C{KAFKA_STORAGE_ERROR}.
        """

    def read(self, partition: int) -> defer.Deferred:
        """
        Every record of partition C{partition} of ``__transaction_state`` from
        its log start offset to its log end offset, in offset order (a new
        leader's high watermark may still lag behind records the previous one
        committed, so reading to it could miss acknowledged state; see
        L{committed}).

        @return: a Deferred firing with a list of (key bytes, value bytes or None).
        """

    def committed(self, partition: int, coordinator_epoch: int) -> defer.Deferred:
        """
        Wait until everything in partition C{partition}'s log now is committed
        (its high watermark reached the log end offset), this broker still
        its leader at leader epoch C{coordinator_epoch}.

        @return: a Deferred firing with None, or failing with a L{KafkaError}:
            C{NOT_LEADER_OR_FOLLOWER} (the leadership moved), or one that a
            later call may outlast (C{NOT_ENOUGH_REPLICAS_AFTER_APPEND},
            C{REQUEST_TIMED_OUT}).
        """


class MarkerWriter(Protocol):
    """
    Writes COMMIT/ABORT control records (the WriteTxnMarkers channel:
    L{kafkatw.broker.transaction_markers.TransactionMarkerChannel}).
    """

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, defer.Deferred]:
        """
        Write the marker of C{producer_id}'s transaction at C{producer_epoch}
        (COMMIT if C{committed} else ABORT) to each partition through its
        leader, retrying retriable errors itself.

        @return: a Deferred per partition firing with None once that marker is
            written (or the partition no longer exists), or failing with a
            L{KafkaError} that ends the attempt (C{INVALID_PRODUCER_EPOCH},
            C{TRANSACTION_COORDINATOR_FENCED}); cancelling a Deferred stops its
            retries.
        """


class ProducerIdAllocator(Protocol):
    """Hands out producer ids no broker handed out before (L{kafkatw.broker.admin.AdminManager})."""

    async def allocate_producer_id(self) -> int:
        """@raise Exception: ZooKeeper is unreachable."""


@dataclass(frozen=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass
class _TxnPartition:
    """The transactional ids of one ``__transaction_state`` partition this broker leads."""

    coordinator_epoch: int
    transactions: dict[str, TransactionMetadata] = field(default_factory=dict)
    markers: dict[str, list[defer.Deferred]] = field(default_factory=dict)


def _background(coroutine: Any, what: str) -> defer.Deferred:
    """Run C{coroutine} with nobody waiting for it; a failure is logged (a coordinator bug)."""
    d = defer.Deferred.fromCoroutine(coroutine)
    d.addErrback(lambda failure: _log.failure("transaction coordinator: {what}", failure, what=what))
    return d


def _error_code(failure_or_exc: Any) -> ErrorCode:
    exc = getattr(failure_or_exc, "value", failure_or_exc)
    return exc.error_code if isinstance(exc, KafkaError) else _E.unknown_server_error


class TransactionCoordinator:
    """
    The transaction coordinator of one broker.

    @param config: the broker config (C{transaction.*} keys).
    @param reactor: C{IReactorTime}: the periodic abort and expiration tasks.
    @param now_ms: the wall clock (ms since the epoch; Kafka's
        C{Time.milliseconds()}): the transactions' timestamps, written to the
        transaction log and compared, by the next coordinator too, with the
        transaction and transactional id timeouts; C{reactor.seconds()} by default.
    @param log: the L{TransactionLog}.
    @param markers: the L{MarkerWriter}.
    @param producer_ids: the L{ProducerIdAllocator}.
    @param partition_exists: C{(topic, partition) -> bool}, from the metadata
        cache, for AddPartitionsToTxn.
    @param offsets_topic_partitions: partitions of ``__consumer_offsets``
        assumed for AddOffsetsToTxn (Kafka's C{offsets.topic.num.partitions}).
    @param retry_backoff_ms: pause before a failed completion write is retried.
    """

    def __init__(self, config: Any, reactor: Any, log: TransactionLog, markers: MarkerWriter,
                 producer_ids: ProducerIdAllocator, partition_exists: Callable[[str, int], bool],
                 offsets_topic_partitions: int = 50, retry_backoff_ms: int = 100,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.reactor = reactor
        self.now_ms = now_ms or (lambda: int(reactor.seconds() * 1000))
        self.log = log
        self.markers = markers
        self.producer_ids = producer_ids
        self.partition_exists = partition_exists
        self.offsets_topic_partitions = offsets_topic_partitions
        self.retry_backoff_ms = retry_backoff_ms
        self.num_partitions: int = config["transaction.state.log.num.partitions"]
        self._partitions: dict[int, _TxnPartition] = {}
        self._loading: dict[int, int] = {}  # partition -> coordinator epoch being loaded
        self._abort_task: task.LoopingCall | None = None
        self._expire_task: task.LoopingCall | None = None

    # --- service ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the periodic abort of timed-out transactions and expiration of idle ids."""
        self._abort_task = task.LoopingCall(self.abort_timed_out_transactions)
        self._abort_task.clock = self.reactor
        self._abort_task.start(self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000.0,
                               now=False)
        self._expire_task = task.LoopingCall(self.remove_expired_transactional_ids)
        self._expire_task.clock = self.reactor
        self._expire_task.start(
            self.config["transaction.remove.expired.transaction.cleanup.interval.ms"] / 1000.0, now=False)

    def stop(self) -> None:
        """Stop the periodic tasks and drop every partition's state."""
        for loop in (self._abort_task, self._expire_task):
            if loop is not None and loop.running:
                loop.stop()
        for partition in list(self._partitions):
            self.on_resigned(partition)
        self._loading.clear()

    # --- where ids live -------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of C{transactional_id} (FindCoordinator key type 1)."""
        return partition_for(transactional_id, self.num_partitions)

    def _lookup(self, transactional_id: str) -> tuple[ErrorCode, int, _TxnPartition | None]:
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            return _E.coordinator_load_in_progress, partition, None
        owned = self._partitions.get(partition)
        if owned is None:
            return _E.not_coordinator, partition, None
        return _E.none, partition, owned

    def _lookup_transaction(self, transactional_id: str
                            ) -> tuple[ErrorCode, int, _TxnPartition | None, TransactionMetadata | None]:
        """
        L{_lookup} and the cached state of C{transactional_id}, for the requests
        that need an existing transaction (AddPartitionsToTxn, AddOffsetsToTxn,
        EndTxn): C{INVALID_REQUEST} for an empty id, C{INVALID_PRODUCER_ID_MAPPING}
        for an unknown one.

        @return: C{(error, partition, owned, meta)}; C{meta} is C{None} exactly
            when C{error} is not C{NONE}.
        """
        if not transactional_id:
            return _E.invalid_request, -1, None, None
        error, partition, owned = self._lookup(transactional_id)
        if owned is None:
            return error, partition, None, None
        meta = owned.transactions.get(transactional_id)
        if meta is None:
            return _E.invalid_producer_id_mapping, partition, owned, None
        return _E.none, partition, owned, meta

    def _current(self, partition: int, coordinator_epoch: int, meta: TransactionMetadata) -> bool:
        """Whether C{meta} is still the cached state of its id at C{coordinator_epoch}."""
        owned = self._partitions.get(partition)
        return (owned is not None and owned.coordinator_epoch == coordinator_epoch
                and owned.transactions.get(meta.transactional_id) is meta)

    # --- immigration and emigration ---------------------------------------------------------

    def on_became_leader(self, partition: int, coordinator_epoch: int) -> defer.Deferred:
        """
        This broker leads C{partition} of ``__transaction_state`` at leader epoch
        C{coordinator_epoch}: load its transactional ids from the log (requests
        for them get C{COORDINATOR_LOAD_IN_PROGRESS} meanwhile), then send the
        markers of every transaction found in PrepareCommit or PrepareAbort.

        @return: a Deferred firing with the number of ids loaded (None when the
            load was overtaken by another leadership change or failed).
        """
        return defer.Deferred.fromCoroutine(self._load(partition, coordinator_epoch))

    async def _load(self, partition: int, coordinator_epoch: int) -> int | None:
        if partition in self._partitions:
            self.on_resigned(partition)
        self._loading[partition] = coordinator_epoch
        try:
            records = await self.log.read(partition)
        except Exception as e:
            _log.error("loading __transaction_state-{partition} failed: {error}", partition=partition, error=e)
            if self._loading.get(partition) == coordinator_epoch:
                del self._loading[partition]
            return None
        if self._loading.get(partition) != coordinator_epoch:
            return None
        # A new leader's log may end with records the previous leader had not
        # committed, which a later leader without them would truncate: served
        # as they are, a transaction could be acknowledged on state that then
        # vanishes (an AddPartitionsToTxn answered from an uncommitted Ongoing,
        # its partitions written, the transaction then unknown: a hanging
        # transaction). Served only once the high watermark passed all of them.
        if not await self._wait_committed(partition, coordinator_epoch):
            return None
        transactions: dict[str, TransactionMetadata] = {}
        for key, value in records:
            try:
                transactional_id = decode_transaction_log_key(key)
                if transactional_id is None:
                    continue
                meta = decode_transaction_log_value(transactional_id, value)
            except ValueError as e:
                _log.error("__transaction_state-{partition}: skipped a record that does not decode: {error}",
                           partition=partition, error=e)
                continue
            if meta is None:
                transactions.pop(transactional_id, None)
            else:
                transactions[transactional_id] = meta
        del self._loading[partition]
        owned = self._partitions[partition] = _TxnPartition(coordinator_epoch, transactions)
        _log.info("loaded {count} transactional ids of __transaction_state-{partition} at coordinator epoch "
                  "{epoch}", count=len(transactions), partition=partition, epoch=coordinator_epoch)
        for meta in list(owned.transactions.values()):
            if meta.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
                self._send_markers(partition, coordinator_epoch, meta, meta.state == _S.PREPARE_COMMIT)
        return len(transactions)

    async def _wait_committed(self, partition: int, coordinator_epoch: int) -> bool:
        """Wait while loading C{partition} until its log is committed; False when the load is over."""
        while self._loading.get(partition) == coordinator_epoch:
            try:
                await self.log.committed(partition, coordinator_epoch)
                return self._loading.get(partition) == coordinator_epoch
            except KafkaError as e:
                if e.error_code == _E.not_leader_or_follower:
                    break
                # too few in-sync replicas for now, or a timeout: again after a pause
                _log.info("__transaction_state-{partition} not committed to its end yet ({error}); waiting",
                          partition=partition, error=e)
                await task.deferLater(self.reactor, self.retry_backoff_ms / 1000.0, lambda: None)
        if self._loading.get(partition) == coordinator_epoch:
            del self._loading[partition]
        return False

    def on_resigned(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """
        This broker no longer leads C{partition}: forget its ids and stop
        sending their markers (requests get C{NOT_COORDINATOR}).  With
        C{coordinator_epoch}, only state loaded at that epoch or an older one is
        dropped.
        """
        loading = self._loading.get(partition)
        if loading is not None and (coordinator_epoch is None or loading <= coordinator_epoch):
            del self._loading[partition]
        owned = self._partitions.get(partition)
        if owned is None or (coordinator_epoch is not None and owned.coordinator_epoch > coordinator_epoch):
            return
        del self._partitions[partition]
        for deferreds in owned.markers.values():
            for d in deferreds:
                d.cancel()
        _log.info("unloaded __transaction_state-{partition}", partition=partition)

    def owned_partitions(self) -> dict[int, int]:
        """The ``__transaction_state`` partitions this coordinator serves -> their coordinator epochs."""
        return {p: owned.coordinator_epoch for p, owned in self._partitions.items()}

    def is_loading(self) -> bool:
        """Whether a partition is being loaded."""
        return bool(self._loading)

    # --- log writes ---------------------------------------------------------------------------

    async def _append(self, partition: int, coordinator_epoch: int, meta: TransactionMetadata,
                      transit: TxnTransitMetadata, retried: bool = False) -> ErrorCode:
        """
        Write C{transit} and complete it on C{meta} once replicated (a Dead
        transit removes the id instead).  When the write fails the pending
        transition is dropped, unless C{retried} and the error is
        C{COORDINATOR_NOT_AVAILABLE}: the caller writes it again.

        @return: C{NONE} or the error to answer (L{_APPEND_ERRORS}).
        """
        key = encode_transaction_log_key(meta.transactional_id)
        value = None if transit.state == _S.DEAD else encode_transaction_log_value(transit)
        try:
            await self.log.append(partition, coordinator_epoch, [(key, value)])
        except Exception as e:
            code = _error_code(e)
            mapped = _APPEND_ERRORS.get(code, _E.unknown_server_error)
            _log.warn("writing {state} of transactional id {id!r} to __transaction_state-{partition} failed: "
                      "{error} (answered {answer})", state=transit.state.value, id=meta.transactional_id,
                      partition=partition, error=code.name.upper(), answer=mapped.name.upper())
            if self._current(partition, coordinator_epoch, meta) and not (
                    retried and mapped == _E.coordinator_not_available):
                meta.abort_transition()
            return mapped
        if not self._current(partition, coordinator_epoch, meta) or meta.pending_state != transit.state:
            return _E.not_coordinator
        if transit.state == _S.DEAD:
            del self._partitions[partition].transactions[meta.transactional_id]
            _log.info("transactional id {id!r} expired", id=meta.transactional_id)
        else:
            meta.complete_transition(transit)
        return _E.none

    async def _allocate(self) -> int | None:
        try:
            return await defer.ensureDeferred(self.producer_ids.allocate_producer_id())
        except Exception as e:
            _log.warn("allocating a producer id failed: {error}", error=e)
            return None

    # --- InitProducerId -----------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                         producer_id: int = NO_PRODUCER_ID,
                         producer_epoch: int = NO_PRODUCER_EPOCH) -> defer.Deferred:
        """
        InitProducerId with a transactional id.

        @param transaction_timeout_ms: the producer's C{transaction.timeout.ms}
            (1 .. C{transaction.max.timeout.ms}).
        @param producer_id: with C{producer_epoch}, the producer's current id and
            epoch (InitProducerId v3+, KIP-360), or -1.
        @return: a Deferred firing with an L{InitProducerIdResult}.
        """
        return defer.Deferred.fromCoroutine(
            self._init_producer_id(transactional_id, transaction_timeout_ms, producer_id, producer_epoch))

    async def _init_producer_id(self, transactional_id: str, timeout_ms: int, expected_pid: int,
                                expected_epoch: int) -> InitProducerIdResult:
        if not transactional_id:
            return InitProducerIdResult(_E.invalid_request)
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return InitProducerIdResult(_E.invalid_transaction_timeout)
        expected = None if expected_pid == NO_PRODUCER_ID and expected_epoch == NO_PRODUCER_EPOCH \
            else (expected_pid, expected_epoch)
        error, partition, owned = self._lookup(transactional_id)
        if owned is None:
            return InitProducerIdResult(error)
        if transactional_id not in owned.transactions:
            new_id = await self._allocate()
            if new_id is None:
                return InitProducerIdResult(_E.coordinator_not_available)
            error, partition, owned = self._lookup(transactional_id)
            if owned is None:
                return InitProducerIdResult(error)
            owned.transactions.setdefault(transactional_id, TransactionMetadata(
                transactional_id=transactional_id, producer_id=new_id, producer_epoch=NO_PRODUCER_EPOCH,
                txn_timeout_ms=timeout_ms, state=_S.EMPTY, txn_last_update_timestamp_ms=self.now_ms()))
        meta = owned.transactions[transactional_id]
        coordinator_epoch = owned.coordinator_epoch
        if meta.pending_state is not None:
            return InitProducerIdResult(_E.concurrent_transactions)
        if expected is not None and not self._valid_producer_id(meta, *expected):
            return InitProducerIdResult(_E.producer_fenced)
        state = meta.state
        if state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            return InitProducerIdResult(_E.concurrent_transactions)
        if state == _S.ONGOING:
            # Fence the old instance and abort its transaction; the new one retries.
            transit = meta.prepare_fence_producer_epoch()
            _log.info("InitProducerId for transactional id {id!r}: aborting its ongoing transaction of "
                      "producer {pid} epoch {epoch}", id=transactional_id, pid=meta.producer_id,
                      epoch=meta.producer_epoch)
            code = await self._end_transaction(transactional_id, transit.producer_id, transit.producer_epoch,
                                               committed=False, from_client=False)
            return InitProducerIdResult(code if code != _E.none else _E.concurrent_transactions)
        if state not in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            _log.error("transactional id {id!r} found in state {state}, which is never completed",
                       id=transactional_id, state=state.value)
            return InitProducerIdResult(_E.unknown_server_error)
        now = self.now_ms()
        try:
            if is_epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
                new_id = await self._allocate()
                if new_id is None:
                    return InitProducerIdResult(_E.coordinator_not_available)
                if not self._current(partition, coordinator_epoch, meta) or meta.pending_state is not None:
                    return InitProducerIdResult(_E.concurrent_transactions)
                transit = meta.prepare_producer_id_rotation(new_id, timeout_ms, now, expected is not None)
            else:
                transit = meta.prepare_increment_producer_epoch(
                    timeout_ms, None if expected is None else expected[1], now)
        except KafkaError as e:
            return InitProducerIdResult(e.error_code)
        except InvalidTransition as e:
            _log.error("InitProducerId: {error}", error=e)
            return InitProducerIdResult(_E.unknown_server_error)
        code = await self._append(partition, coordinator_epoch, meta, transit)
        if code != _E.none:
            return InitProducerIdResult(code)
        _log.info("transactional id {id!r}: producer id {pid} epoch {epoch}", id=transactional_id,
                  pid=transit.producer_id, epoch=transit.producer_epoch)
        return InitProducerIdResult(_E.none, transit.producer_id, transit.producer_epoch)

    @staticmethod
    def _valid_producer_id(meta: TransactionMetadata, producer_id: int, epoch: int) -> bool:
        """Kafka's C{isValidProducerId}: new metadata, the current id, or the previous one at an exhausted epoch."""
        return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
                or (producer_id == meta.last_producer_id and is_epoch_exhausted(epoch)))

    # --- AddPartitionsToTxn, AddOffsetsToTxn ---------------------------------------------------

    def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[TopicPartition]) -> defer.Deferred:
        """
        AddPartitionsToTxn v0-v3 (one transaction).  Partitions of topics that
        do not exist get C{UNKNOWN_TOPIC_OR_PARTITION}, the others
        C{OPERATION_NOT_ATTEMPTED}, and nothing is added.

        @return: a Deferred firing with C{{(topic, partition): ErrorCode}}.
        """
        wanted = set(partitions)
        unknown = {tp for tp in wanted if not self.partition_exists(*tp)}
        if unknown:
            return defer.succeed({tp: _E.unknown_topic_or_partition if tp in unknown else _E.operation_not_attempted
                                  for tp in wanted})
        d = defer.Deferred.fromCoroutine(self._add_partitions(transactional_id, producer_id, producer_epoch, wanted))
        return d.addCallback(lambda code: {tp: code for tp in wanted})

    def verify_partitions_in_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """
        AddPartitionsToTxn v4+ with C{verify_only} (KIP-890), asked by a
        partition leader before it appends a batch that starts a transaction
        there: C{NONE} for each partition in the producer's ongoing
        transaction, else C{INVALID_TXN_STATE}; every partition gets
        C{INVALID_PRODUCER_ID_MAPPING} for another producer id,
        C{PRODUCER_FENCED} for another epoch, C{CONCURRENT_TRANSACTIONS} while
        the transaction ends, or the lookup's error (C{NOT_COORDINATOR},
        C{COORDINATOR_LOAD_IN_PROGRESS}). Nothing is written (Kafka's
        C{TransactionCoordinator.handleVerifyPartitionsInTransaction}).
        """
        wanted = list(partitions)
        error, _, _, meta = self._lookup_transaction(transactional_id)
        if meta is not None:
            if meta.producer_id != producer_id:
                error = _E.invalid_producer_id_mapping
            elif meta.producer_epoch != producer_epoch:
                error = _E.producer_fenced
            elif meta.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT) or \
                    (meta.pending_state is not None and meta.pending_state != _S.ONGOING):
                error = _E.concurrent_transactions
        if error != _E.none:
            return {tp: error for tp in wanted}
        assert meta is not None
        ongoing = meta.state == _S.ONGOING
        return {tp: _E.none if ongoing and tp in meta.topic_partitions else _E.invalid_txn_state for tp in wanted}

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           group_id: str) -> defer.Deferred:
        """
        AddOffsetsToTxn: the group's ``__consumer_offsets`` partition
        (L{offsets_partition_for}) joins the transaction, as in Kafka, so that
        its marker tells the group coordinator to make the transaction's offsets
        visible or drop them.

        @return: a Deferred firing with an L{ErrorCode}.
        """
        tp = offsets_partition_for(group_id, self.offsets_topic_partitions)
        return defer.Deferred.fromCoroutine(self._add_partitions(transactional_id, producer_id, producer_epoch, {tp}))

    async def _add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: set[TopicPartition]) -> ErrorCode:
        error, partition, owned, meta = self._lookup_transaction(transactional_id)
        if meta is None:
            return error
        if meta.producer_id != producer_id:
            return _E.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return _E.producer_fenced
        if meta.pending_state is not None:
            return _E.concurrent_transactions
        if meta.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            return _E.concurrent_transactions
        if meta.state == _S.ONGOING and partitions <= meta.topic_partitions:
            return _E.none
        try:
            transit = meta.prepare_add_partitions(partitions, self.now_ms())
        except InvalidTransition as e:
            _log.error("AddPartitionsToTxn: {error}", error=e)
            return _E.unknown_server_error
        return await self._append(partition, owned.coordinator_epoch, meta, transit)

    # --- EndTxn --------------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                committed: bool) -> defer.Deferred:
        """
        EndTxn v0-v4: commit (C{committed}) or abort.  Answered once PrepareCommit
        or PrepareAbort is replicated; the markers follow.

        @return: a Deferred firing with an L{ErrorCode}.
        """
        return defer.Deferred.fromCoroutine(
            self._end_transaction(transactional_id, producer_id, producer_epoch, committed, from_client=True))

    async def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                               committed: bool, from_client: bool) -> ErrorCode:
        error, partition, owned, meta = self._lookup_transaction(transactional_id)
        if meta is None:
            return error
        fencing = not from_client and meta.pending_state == _S.PREPARE_EPOCH_FENCE
        code = self._end_transaction_error(meta, producer_id, producer_epoch, committed, from_client)
        if code is not None:
            if fencing:
                meta.abort_transition()
            return code
        if fencing:
            # The fence becomes the abort, at the bumped epoch (Kafka's isEpochFence).
            meta.pending_state = None
            meta.producer_epoch = producer_epoch
            meta.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = meta.prepare_abort_or_commit(_S.PREPARE_COMMIT if committed else _S.PREPARE_ABORT,
                                               self.now_ms())
        coordinator_epoch = owned.coordinator_epoch
        code = await self._append(partition, coordinator_epoch, meta, transit)
        if code != _E.none:
            if fencing:
                meta.has_failed_epoch_fence = True
            return code
        _log.info("transactional id {id!r}: {state} of producer {pid} epoch {epoch} over {count} partitions",
                  id=transactional_id, state=transit.state.value, pid=meta.producer_id, epoch=meta.producer_epoch,
                  count=len(meta.topic_partitions))
        self._send_markers(partition, coordinator_epoch, meta, committed)
        return _E.none

    @staticmethod
    def _end_transaction_error(meta: TransactionMetadata, producer_id: int, producer_epoch: int,
                               committed: bool, from_client: bool) -> ErrorCode | None:
        """Why EndTxn is refused or answered at once (Kafka's C{endTransaction}, transactions v1), or None."""
        if meta.producer_id != producer_id:
            return _E.invalid_producer_id_mapping
        if (from_client and producer_epoch != meta.producer_epoch) or producer_epoch < meta.producer_epoch:
            return _E.producer_fenced
        if meta.pending_state is not None and (from_client or meta.pending_state != _S.PREPARE_EPOCH_FENCE):
            return _E.concurrent_transactions
        state = meta.state
        if state == _S.ONGOING:
            return None
        if state == (_S.COMPLETE_COMMIT if committed else _S.COMPLETE_ABORT):
            return _E.none  # a retry of an EndTxn that completed
        if state == (_S.PREPARE_COMMIT if committed else _S.PREPARE_ABORT):
            return _E.concurrent_transactions  # a retry while its markers are written
        if state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            _log.error("transactional id {id!r} found in state {state}, which is never completed",
                       id=meta.transactional_id, state=state.value)
            return _E.unknown_server_error
        _log.info("EndTxn ({result}) of transactional id {id!r} in state {state}: INVALID_TXN_STATE",
                  result="commit" if committed else "abort", id=meta.transactional_id, state=state.value)
        return _E.invalid_txn_state

    # --- markers and completion ------------------------------------------------------------------

    def _send_markers(self, partition: int, coordinator_epoch: int, meta: TransactionMetadata,
                      committed: bool) -> None:
        """
        Send the markers of C{meta}'s transaction, in PrepareCommit or
        PrepareAbort; complete it once all are written.  As in Kafka, the
        completion is prepared first, so the id stays busy
        (C{CONCURRENT_TRANSACTIONS}) until it is written.
        """
        complete = meta.prepare_complete(self.now_ms())
        remaining = set(meta.topic_partitions)
        if not remaining:
            self._complete(partition, coordinator_epoch, meta, complete)
            return
        owned = self._partitions[partition]
        deferreds = self.markers.write_markers(meta.producer_id, meta.producer_epoch, coordinator_epoch, committed,
                                               sorted(remaining))
        owned.markers[meta.transactional_id] = list(deferreds.values())

        def written(_: Any, tp: TopicPartition) -> None:
            if not self._current(partition, coordinator_epoch, meta) or \
                    meta.state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
                return
            meta.remove_partition(tp)
            remaining.discard(tp)
            if not remaining:
                owned.markers.pop(meta.transactional_id, None)
                self._complete(partition, coordinator_epoch, meta, complete)

        def failed(failure: Any, tp: TopicPartition) -> None:
            if failure.check(defer.CancelledError):
                return
            _log.warn("stopped writing the {result} marker of transactional id {id!r} to {tp}: {error}",
                      result="COMMIT" if committed else "ABORT", id=meta.transactional_id, tp=tp,
                      error=failure.value)

        for tp, d in deferreds.items():
            d.addCallbacks(written, failed, callbackArgs=(tp,), errbackArgs=(tp,))

    def _complete(self, partition: int, coordinator_epoch: int, meta: TransactionMetadata,
                  transit: TxnTransitMetadata) -> None:
        _background(self._write_complete(partition, coordinator_epoch, meta, transit), "completing a transaction")

    async def _write_complete(self, partition: int, coordinator_epoch: int, meta: TransactionMetadata,
                              transit: TxnTransitMetadata) -> None:
        if not self._current(partition, coordinator_epoch, meta) or meta.pending_state != transit.state:
            return
        code = await self._append(partition, coordinator_epoch, meta, transit, retried=True)
        if code == _E.coordinator_not_available and self._current(partition, coordinator_epoch, meta):
            self.reactor.callLater(self.retry_backoff_ms / 1000.0, self._complete, partition, coordinator_epoch,
                                   meta, transit)
        elif code == _E.none:
            _log.info("transactional id {id!r}: {state}", id=meta.transactional_id, state=meta.state.value)
        else:
            _log.warn("transactional id {id!r}: writing {state} failed with {error}", id=meta.transactional_id,
                      state=transit.state.value, error=code.name.upper())

    # --- timeouts and expiration ----------------------------------------------------------------

    def abort_timed_out_transactions(self) -> list[str]:
        """
        Abort every Ongoing transaction open longer than its timeout, fencing
        its producer with an epoch bump (Kafka's C{abortTimedOutTransactions}).

        @return: the transactional ids being aborted.
        """
        now = self.now_ms()
        aborted = []
        for owned in list(self._partitions.values()):
            for meta in list(owned.transactions.values()):
                if meta.state != _S.ONGOING or meta.pending_state is not None or \
                        meta.txn_start_timestamp_ms + meta.txn_timeout_ms >= now:
                    continue
                transit = meta.prepare_fence_producer_epoch()
                _log.info("aborting the transaction of transactional id {id!r} (producer {pid} epoch {epoch}): "
                          "open for more than its {timeout} ms timeout", id=meta.transactional_id,
                          pid=meta.producer_id, epoch=meta.producer_epoch, timeout=meta.txn_timeout_ms)
                aborted.append(meta.transactional_id)
                _background(self._end_transaction(
                    meta.transactional_id, transit.producer_id, transit.producer_epoch, committed=False,
                    from_client=False), "aborting a timed-out transaction")
        return aborted

    def remove_expired_transactional_ids(self) -> list[str]:
        """
        Forget transactional ids with no open transaction and no update for
        C{transactional.id.expiration.ms}: Dead, then a tombstone.

        @return: the transactional ids being removed.
        """
        now = self.now_ms()
        expiration_ms = self.config["transactional.id.expiration.ms"]
        removed = []
        for partition, owned in list(self._partitions.items()):
            for meta in list(owned.transactions.values()):
                if not meta.state.expiration_allowed or meta.pending_state is not None or \
                        meta.txn_last_update_timestamp_ms > now - expiration_ms:
                    continue
                transit = meta.prepare_dead()
                removed.append(meta.transactional_id)
                _background(self._append(partition, owned.coordinator_epoch, meta, transit),
                            "expiring a transactional id")
        return removed

    # --- DescribeTransactions, ListTransactions ----------------------------------------------------

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[dict[str, Any]]:
        """
        DescribeTransactions (KIP-664): one C{TransactionState} entry per id, in
        the response's field names (times in ms): C{NOT_COORDINATOR},
        C{COORDINATOR_LOAD_IN_PROGRESS} or C{TRANSACTIONAL_ID_NOT_FOUND} where
        this coordinator cannot describe it.
        """
        out = []
        for transactional_id in transactional_ids:
            # an error entry carries the schema's defaults (start time 0), as Kafka's
            entry: dict[str, Any] = {"transactional_id": transactional_id, "transaction_state": "",
                                     "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": -1,
                                     "producer_epoch": -1, "topics": []}
            if not transactional_id:
                out.append({**entry, "error_code": _E.invalid_request})
                continue
            error, _, owned = self._lookup(transactional_id)
            meta = owned.transactions.get(transactional_id) if owned is not None else None
            if owned is not None and (meta is None or meta.pending_state == _S.DEAD):
                error = _E.transactional_id_not_found
            if error != _E.none or meta is None:
                entry["error_code"] = error
                out.append(entry)
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(meta.topic_partitions):
                by_topic.setdefault(topic, []).append(p)
            entry.update(error_code=_E.none, transaction_state=meta.state.value,
                         transaction_timeout=meta.txn_timeout_ms, transaction_start_time=meta.txn_start_timestamp_ms,
                         producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                         topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
            out.append(entry)
        return out

    def list_transactions(self, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
                          duration_filter_ms: int = -1,
                          transactional_id_pattern: str | None = None) -> dict[str, Any]:
        """
        ListTransactions (KIP-664; v1's duration filter, KIP-994; v2's id
        pattern, KIP-1152: the whole id must match; C{INVALID_REGULAR_EXPRESSION}
        when it does not compile) over this coordinator's partitions, in the
        response's field names.  C{COORDINATOR_LOAD_IN_PROGRESS} while a
        partition loads; unknown state names are returned in
        C{unknown_state_filters}.
        """
        if self._loading:
            return {"error_code": _E.coordinator_load_in_progress, "unknown_state_filters": [],
                    "transaction_states": []}
        names = list(state_filters)
        by_name = {s.value: s for s in TransactionState}
        states = {by_name[n] for n in names if n in by_name}
        unknown = [n for n in names if n not in by_name]
        producer_ids = set(producer_id_filters)
        try:
            pattern = re.compile(transactional_id_pattern) if transactional_id_pattern else None
        except re.error:
            return {"error_code": _E.invalid_regular_expression, "unknown_state_filters": [],
                    "transaction_states": []}
        now = self.now_ms()
        listed = []
        for owned in self._partitions.values():
            for meta in owned.transactions.values():
                if meta.pending_state == _S.DEAD or (producer_ids and meta.producer_id not in producer_ids) or \
                        (names and meta.state not in states) or \
                        (duration_filter_ms >= 0 and now - meta.txn_start_timestamp_ms <= duration_filter_ms) or \
                        (pattern is not None and not pattern.fullmatch(meta.transactional_id)):
                    continue
                listed.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                               "transaction_state": meta.state.value})
        return {"error_code": _E.none, "unknown_state_filters": unknown, "transaction_states": listed}

    def transactions(self) -> Mapping[str, TransactionMetadata]:
        """Every transactional id this coordinator holds (for tests and tools)."""
        return {tid: meta for owned in self._partitions.values() for tid, meta in owned.transactions.items()}

