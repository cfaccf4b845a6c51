"""
L{TransactionManager}: the transactional producer's side of KIP-98
(docs/transactions.md: kafkatw's clients).

A L{kafkatw.client.producer.Producer} made with a C{transactional_id} owns one.
It talks to the transaction coordinator (FindCoordinator with key type 1,
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and to the group
coordinator (TxnOffsetCommit), and keeps the producer's state in one table,
Kafka's C{TransactionManager.State}::

    state                   entered from
    UNINITIALIZED           (start)
    INITIALIZING            UNINITIALIZED, ABORTING_TRANSACTION (an epoch bump after an abort)
    READY                   INITIALIZING, COMMITTING_TRANSACTION, ABORTING_TRANSACTION
    IN_TRANSACTION          READY
    COMMITTING_TRANSACTION  IN_TRANSACTION
    ABORTING_TRANSACTION    IN_TRANSACTION, ABORTABLE_ERROR
    ABORTABLE_ERROR         IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTABLE_ERROR, INITIALIZING
    FATAL_ERROR             any state

Errors, as Kafka's client sorts them:

  - retried (after C{retry_backoff_ms}, until C{max_block_ms}): C{COORDINATOR_NOT_AVAILABLE},
    C{NOT_COORDINATOR} (the coordinator is looked up again), C{COORDINATOR_LOAD_IN_PROGRESS},
    C{CONCURRENT_TRANSACTIONS} (the coordinator is still completing the last transaction)
    and lost connections;
  - fatal (L{FATAL_ERROR}: the producer can only be closed): C{PRODUCER_FENCED},
    C{INVALID_PRODUCER_EPOCH} (a newer instance with the same transactional id exists),
    C{TRANSACTIONAL_ID_AUTHORIZATION_FAILED}, C{INVALID_PRODUCER_ID_MAPPING},
    C{INVALID_TXN_STATE}, C{TRANSACTION_COORDINATOR_FENCED};
  - abortable (L{ABORTABLE_ERROR}: the application must call C{abort_transaction}):
    any other failure of a request or a record batch of the transaction.

Source: KIP-98; Apache Kafka's C{TransactionManager} and C{KafkaProducer}
(C{initTransactions}, C{beginTransaction}, C{sendOffsetsToTransaction},
C{commitTransaction}, C{abortTransaction}); KIP-447 (group metadata in
TxnOffsetCommit); KIP-588 (C{PRODUCER_FENCED}).
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Iterable, NamedTuple

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode, KafkaError, kafka_error
from .client import sleep
from .connection import BrokerConnectionError, RequestTimedOutError

__all__ = ["TransactionState", "VALID_PREVIOUS_STATES", "GroupMetadata", "TransactionManager",
           "IllegalTransactionStateError", "find_coordinator", "COORDINATOR_GROUP", "COORDINATOR_TRANSACTION"]

_log = Logger()

#: FindCoordinator key types.
COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1

_API_FIND_COORDINATOR = 10
_API_INIT_PRODUCER_ID = 22
_API_ADD_PARTITIONS_TO_TXN = 24
_API_ADD_OFFSETS_TO_TXN = 25
_API_END_TXN = 26
_API_TXN_OFFSET_COMMIT = 28


class TransactionState(enum.Enum):
    """Kafka's C{TransactionManager.State}."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState

#: state -> the states it may be entered from (Kafka's C{State.isTransitionValid});
#: FATAL_ERROR may be entered from any state.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.UNINITIALIZED: frozenset(),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR,
                                  S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(TransactionState),
}

#: Errors after which the producer can only be closed.
FATAL_ERRORS = frozenset({
    ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch, ErrorCode.transactional_id_authorization_failed,
    ErrorCode.invalid_producer_id_mapping, ErrorCode.invalid_txn_state, ErrorCode.transaction_coordinator_fenced,
    ErrorCode.unsupported_version, ErrorCode.cluster_authorization_failed,
})
#: Errors after which the coordinator is looked up again.
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
#: Errors retried as they are.
_RETRIED = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
                      ErrorCode.request_timed_out, ErrorCode.network_exception}) | _COORDINATOR_MOVED


class IllegalTransactionStateError(KafkaError):
    """A transactional call in a state that does not allow it (Java's C{IllegalStateException})."""

    error_code = ErrorCode.invalid_txn_state


class GroupMetadata(NamedTuple):
    """
    What C{send_offsets_to_transaction} needs of a consumer group member
    (Java's C{ConsumerGroupMetadata}, KIP-447): the broker refuses offsets of a
    member fenced by a rebalance.  C{generation_id} -1 and an empty
    C{member_id} skip that check (a group id alone).
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


def as_group_metadata(group: Any) -> GroupMetadata:
    """A L{GroupMetadata} from one, a group id string, or an object with the same attributes."""
    if isinstance(group, GroupMetadata):
        return group
    if isinstance(group, str):
        return GroupMetadata(group)
    return GroupMetadata(group.group_id, getattr(group, "generation_id", -1), getattr(group, "member_id", "") or "",
                         getattr(group, "group_instance_id", None))


async def find_coordinator(client: Any, key: str, key_type: int) -> int:
    """
    FindCoordinator for a group (key type 0) or a transactional id (key type 1).

    @return: the coordinator's broker id (its address added to C{client.brokers}).
    @raise KafkaError: the response's error (e.g. C{COORDINATOR_NOT_AVAILABLE}).
    """
    node = client.least_loaded_node()
    # both shapes: v4 (KIP-699) reads coordinator_keys, v1-v3 key; build() ignores the other
    response = await client.send(node, _API_FIND_COORDINATOR,
                                 {"key": key, "key_type": key_type, "coordinator_keys": [key]})
    coordinators = getattr(response, "coordinators", None)
    found = coordinators[0] if coordinators else response
    code = ErrorCode(int(found.error_code))
    if code != ErrorCode.none:
        raise kafka_error(code, f"finding the coordinator of {key!r} (key type {key_type}): {code.name}")
    node_id = int(found.node_id)
    if node_id not in client.brokers:
        client.brokers[node_id] = (found.host, int(found.port))
    return node_id


def _offset_of(value: Any) -> tuple[int, str | None, int]:
    """C{(offset, metadata, leader epoch)} of an offsets-dict value: an int, a tuple, or an OffsetAndMetadata."""
    if isinstance(value, int):
        return value, "", -1
    if isinstance(value, tuple) and not hasattr(value, "offset"):
        return int(value[0]), (value[1] if len(value) > 1 else "") or "", -1
    return int(value.offset), getattr(value, "metadata", "") or "", int(getattr(value, "leader_epoch", -1) or -1)


class TransactionManager:
    """
    The transactional state of one producer.

    @ivar state: the current L{TransactionState}.
    @ivar partitions: the C{(topic, partition)}s added to the open transaction.
    @ivar last_error: the error that moved the manager to ABORTABLE_ERROR or FATAL_ERROR.
    """

    def __init__(self, reactor: Any, client: Any, transactional_id: str, transaction_timeout_ms: int,
                 retry_backoff_ms: int, max_block_ms: int, on_producer_id: Callable[[int, int], None]) -> None:
        self.reactor = reactor
        self.client = client
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_block_ms = max_block_ms
        self._on_producer_id = on_producer_id
        self.state = S.UNINITIALIZED
        self.last_error: Exception | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[tuple[str, int]] = set()
        self.pending: set[tuple[str, int]] = set()  # partitions waiting for AddPartitionsToTxn
        self.adding = False
        self.started = False  # the coordinator knows of the open transaction
        self.epoch_bump_required = False
        self.coordinator: int | None = None
        self._add_waiters: list[defer.Deferred] = []
        self.on_added: Callable[[], None] = lambda: None
        self.on_add_failed: Callable[[Iterable[tuple[str, int]], Exception], None] = lambda tps, error: None
        # called when the state leaves IN_TRANSACTION (the producer's send stops taking records)
        self.on_left: Callable[[], None] = lambda: None

    # --- the state table ---------------------------------------------------------------

    def transition(self, target: TransactionState, error: Exception | None = None) -> None:
        """
        Enter C{target}.

        @raise IllegalTransactionStateError: the table does not allow it.
        """
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id!r}: invalid transition from {self.state.value}"
                f" to {target.value}")
        _log.debug("transactional id {tid}: {old} -> {new}", tid=self.transactional_id, old=self.state.value,
                   new=target.value)
        if error is not None:
            self.last_error = error
        left = self.state is S.IN_TRANSACTION and target is not S.IN_TRANSACTION
        self.state = target
        if left:
            self.on_left()

    def fail(self, error: Exception) -> None:
        """A request or batch of the transaction failed: fatal, or abortable."""
        code = getattr(error, "error_code", None)
        if code in FATAL_ERRORS or self.state is S.FATAL_ERROR:
            if self.state is not S.FATAL_ERROR:
                _log.error("transactional id {tid}: fatal error {error}", tid=self.transactional_id, error=error)
                self.transition(S.FATAL_ERROR, error)
            return
        if self.state in VALID_PREVIOUS_STATES[S.ABORTABLE_ERROR]:
            self.transition(S.ABORTABLE_ERROR, error)

    def check(self, *allowed: TransactionState, what: str) -> None:
        """@raise KafkaError: the state is not one of C{allowed} (the error that caused a failed state)."""
        if self.state in allowed:
            return
        if self.state in (S.FATAL_ERROR, S.ABORTABLE_ERROR) and self.last_error is not None:
            error = self.last_error
            raise kafka_error(getattr(error, "error_code", ErrorCode.unknown_server_error),
                              f"cannot {what}: the transaction is in {self.state.value} after: {error}")
        raise IllegalTransactionStateError(f"cannot {what} in state {self.state.value}"
                                           f" (transactional id {self.transactional_id!r})")

    # --- requests ----------------------------------------------------------------------

    async def _request(self, what: str, api_key: int, body: dict[str, Any], error_of: Callable[[Any], Any],
                       group_id: str | None = None) -> Any:
        """
        Send C{body} to the transaction coordinator (or the coordinator of
        C{group_id}), retrying the retriable errors for C{max_block_ms}.

        @return: the response.
        @raise KafkaError: a non-retriable error, or the last error once
            C{max_block_ms} passed.
        """
        deadline = self.reactor.seconds() + self.max_block_ms / 1000.0
        coordinator = None if group_id is not None else self.coordinator
        while True:
            try:
                if coordinator is None:
                    if group_id is not None:
                        coordinator = await find_coordinator(self.client, group_id, COORDINATOR_GROUP)
                    else:
                        coordinator = self.coordinator = await find_coordinator(
                            self.client, self.transactional_id, COORDINATOR_TRANSACTION)
                response = await self.client.send(coordinator, api_key, body)
                code = ErrorCode(int(error_of(response)))
                if code == ErrorCode.none:
                    return response
                error: Exception = kafka_error(code, f"{what} (transactional id {self.transactional_id!r}):"
                                                     f" {code.name}")
            except (BrokerConnectionError, RequestTimedOutError) as e:
                code, error = ErrorCode.network_exception, e
            except KafkaError as e:
                code, error = e.error_code, e
            if code not in _RETRIED and not isinstance(error, (BrokerConnectionError, RequestTimedOutError)):
                raise error
            if code in _COORDINATOR_MOVED or isinstance(error, BrokerConnectionError):
                coordinator = None
                if group_id is None:
                    self.coordinator = None
            if self.reactor.seconds() + self.retry_backoff_ms / 1000.0 > deadline:
                raise error
            _log.debug("{what}: {error}; retrying", what=what, error=error)
            await sleep(self.reactor, self.retry_backoff_ms / 1000.0)

    async def init_producer_id(self) -> None:
        """InitProducerId with the transactional id: a new epoch, fencing older instances."""
        body = {"transactional_id": self.transactional_id, "transaction_timeout": self.transaction_timeout_ms,
                "producer_id": self.producer_id if self.epoch_bump_required else -1,
                "producer_epoch": self.producer_epoch if self.epoch_bump_required else -1}
        response = await self._request("InitProducerId", _API_INIT_PRODUCER_ID, body, lambda r: r.error_code)
        self.producer_id, self.producer_epoch = int(response.producer_id), int(response.producer_epoch)
        self.epoch_bump_required = False
        self._on_producer_id(self.producer_id, self.producer_epoch)

    def add_partitions(self, tps: Iterable[tuple[str, int]]) -> None:
        """Partitions the producer wants to write: added with the next AddPartitionsToTxn (one at a time)."""
        for tp in tps:
            if tp not in self.partitions:
                self.pending.add(tp)
        if self.pending and not self.adding and self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
            self.adding = True
            d = defer.Deferred.fromCoroutine(self._add_partitions())
            d.addErrback(lambda f: _log.failure("AddPartitionsToTxn", f))

    async def _add_partitions(self) -> None:
        tps = sorted(self.pending)
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        body = {"v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.producer_id, "v3_and_below_producer_epoch": self.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def error_of(response: Any) -> Any:
            codes = {ErrorCode(int(p.partition_error_code)) for t in response.results_by_topic_v3_and_below
                     for p in t.results_by_partition}
            codes.discard(ErrorCode.none)
            for code in (ErrorCode.unknown_topic_or_partition, ErrorCode.topic_authorization_failed):
                if code in codes:
                    return code  # the actual cause, not OPERATION_NOT_ATTEMPTED
            return min(codes, default=ErrorCode.none, key=int)

        try:
            await self._request("AddPartitionsToTxn", _API_ADD_PARTITIONS_TO_TXN, body, error_of)
        except Exception as error:
            self.adding = False
            self.pending.difference_update(tps)
            self.fail(error)
            self.on_add_failed(tps, error)
            self._fire_add_waiters()
            return
        self.adding = False
        self.started = True
        self.partitions.update(tps)
        self.pending.difference_update(tps)
        if self.pending and self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
            self.add_partitions(())
        self.on_added()
        self._fire_add_waiters()

    def _fire_add_waiters(self) -> None:
        if not self.adding:
            waiters, self._add_waiters = self._add_waiters, []
            for d in waiters:
                d.callback(None)

    def adds_done(self) -> defer.Deferred:
        """A Deferred firing once no AddPartitionsToTxn is in flight (the coordinator knows what it added)."""
        if not self.adding:
            return defer.succeed(None)
        d: defer.Deferred = defer.Deferred()
        self._add_waiters.append(d)
        return d

    async def send_offsets(self, offsets: dict[tuple[str, int], Any], group: GroupMetadata) -> None:
        """AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group coordinator."""
        await self._request("AddOffsetsToTxn", _API_ADD_OFFSETS_TO_TXN,
                            {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                             "producer_epoch": self.producer_epoch, "group_id": group.group_id},
                            lambda r: r.error_code)
        self.started = True
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), value in sorted(offsets.items()):
            offset, metadata, leader_epoch = _offset_of(value)
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": leader_epoch,
                                                 "committed_metadata": metadata})
        body = {"transactional_id": self.transactional_id, "group_id": group.group_id,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "generation_id": group.generation_id, "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def error_of(response: Any) -> Any:
            codes = [ErrorCode(int(p.error_code)) for t in response.topics for p in t.partitions]
            return next((c for c in codes if c != ErrorCode.none), ErrorCode.none)

        await self._request("TxnOffsetCommit", _API_TXN_OFFSET_COMMIT, body, error_of, group_id=group.group_id)

    async def end_txn(self, committed: bool) -> None:
        """EndTxn, when the coordinator knows of the transaction (after the AddPartitionsToTxn in flight)."""
        await self.adds_done()
        if self.started:
            await self._request("EndTxn", _API_END_TXN,
                                {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                                 "producer_epoch": self.producer_epoch, "committed": committed},
                                lambda r: r.error_code)
        self.partitions.clear()
        self.pending.clear()
        self.started = False
