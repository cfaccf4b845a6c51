"""
Transaction state of the transaction coordinator (KIP-98), after Kafka's
C{TransactionState}, C{TransactionMetadata} and C{TransactionLog}.

A transactional id's state is one L{TransactionMetadata}: its producer id and
epoch, its timeout, the partitions of its open transaction and where that
transaction stands (L{TransactionState}).  Every change is made in two steps, as
Kafka does: C{prepare_*} checks the transition against L{VALID_PREVIOUS_STATES},
sets the pending state (which blocks any other change) and returns the new
values (L{TxnTransitMetadata}); once the record of those values is replicated in
``__transaction_state``, L{TransactionMetadata.complete_transition} applies them
(or L{TransactionMetadata.abort_transition} drops them when the write failed).

Transaction states and their valid previous states -- the one table of this
machine (L{VALID_PREVIOUS_STATES}), as Kafka's C{TransactionState}::

    state              id  valid previous states
    Empty              0   Empty, CompleteCommit, CompleteAbort
    Ongoing            1   Ongoing, Empty, CompleteCommit, CompleteAbort
    PrepareCommit      2   Ongoing
    PrepareAbort       3   Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort
    CompleteCommit     4   PrepareCommit
    CompleteAbort      5   PrepareAbort
    Dead               6   Empty, CompleteCommit, CompleteAbort
    PrepareEpochFence  7   Ongoing

  - Empty: a producer id and epoch, no transaction (after InitProducerId).
  - Ongoing: partitions or offsets were added (AddPartitionsToTxn, AddOffsetsToTxn).
  - PrepareCommit / PrepareAbort: EndTxn (or a timeout, or a new instance) decided;
    COMMIT/ABORT markers are being written to the transaction's partitions.
  - CompleteCommit / CompleteAbort: every marker is written.
  - PrepareEpochFence: the epoch is being bumped to fence a producer whose
    transaction is aborted (a new instance's InitProducerId, a timeout); pending
    only, never written to the log (it becomes PrepareAbort).
  - Dead: the transactional id expired (C{transactional.id.expiration.ms}); its
    tombstone is being written.
  - PrepareAbort from Empty, CompleteCommit or CompleteAbort is KIP-890's
    (transactions v2, EndTxn v5+); kafkatw's coordinator serves transactions v1
    (EndTxn v0-v4), so it never takes those transitions, but the table is Kafka's.

The ``__transaction_state`` records (Kafka's C{TransactionLogKey} and
C{TransactionLogValue} message definitions; big-endian)::

    key (TransactionLogKey v0):
        version              int16  (0, the coordinator record type TRANSACTION_LOG)
        transactional_id     string (int16 length, UTF-8)

    value (TransactionLogValue v0):
        version                       int16 (0)
        producer_id                   int64
        producer_epoch                int16
        transaction_timeout_ms        int32
        transaction_status            int8  (the state id above)
        transaction_partitions        nullable array (int32 count, -1: null; null when Empty) of
            topic                     string (int16 length)
            partition_ids             array (int32 count) of int32
        transaction_last_update_timestamp_ms  int64
        transaction_start_timestamp_ms        int64 (-1: no transaction)

    value (TransactionLogValue v1, flexible): the same fields, with compact
    arrays and strings (unsigned varint length + 1) and a tagged-field section
    after each partitions entry and at the end, where tag 0 is the previous
    producer id (int64), tag 1 the next producer id (int64) and tag 2 the
    client's transaction version (int16), each written only when it is not its
    default (-1, -1, 0).

A tombstone (a record with a null value) removes the transactional id.
Records carry no compression and are written with acks=all
(C{TransactionLog.EnforcedRequiredAcks}).

Which partition of ``__transaction_state`` holds a transactional id:
L{partition_for} (Kafka's C{Utils.abs(transactionalId.hashCode) %
transaction.state.log.num.partitions}).

Source: Apache Kafka C{transaction-coordinator} module and
C{kafka.coordinator.transaction} (3.x-4.x); KIP-98; KIP-360 (epoch bump on
InitProducerId with an expected epoch); KIP-890 (transactions v2).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field, replace

from ..errors import CorruptRecordError, ErrorCode, kafka_error
from ..protocol.records import decode_batches, decode_uvarint, encode_batch, encode_uvarint

__all__ = [
    "TopicPartition",
    "TransactionState",
    "VALID_PREVIOUS_STATES",
    "InvalidTransition",
    "TxnTransitMetadata",
    "TransactionMetadata",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "TRANSACTION_STATE_TOPIC",
    "java_string_hash",
    "partition_for",
    "encode_transaction_log_key",
    "decode_transaction_log_key",
    "encode_transaction_log_value",
    "decode_transaction_log_value",
    "is_epoch_exhausted",
    "encode_transaction_log_batch",
    "transaction_log_records",
]

#: (topic, partition).
TopicPartition = tuple[str, int]

#: The internal topic holding transaction state (Kafka's C{Topic.TRANSACTION_STATE_TOPIC_NAME}).
TRANSACTION_STATE_TOPIC = "__transaction_state"

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_SHORT_MAX = 32767


class TransactionState(enum.Enum):
    """Kafka's C{TransactionState}: the value is the state's name (DescribeTransactions shows it)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        """The C{transaction_status} byte of the log value."""
        return _STATE_IDS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        """@raise ValueError: an unknown id."""
        try:
            return _STATES_BY_ID[state_id]
        except KeyError:
            raise ValueError(f"unknown transaction state id {state_id} in a transaction log value") from None

    @property
    def expiration_allowed(self) -> bool:
        """Whether an idle transactional id in this state may expire (C{transactional.id.expiration.ms})."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


_T = TransactionState
_STATE_IDS = {_T.EMPTY: 0, _T.ONGOING: 1, _T.PREPARE_COMMIT: 2, _T.PREPARE_ABORT: 3, _T.COMPLETE_COMMIT: 4,
              _T.COMPLETE_ABORT: 5, _T.DEAD: 6, _T.PREPARE_EPOCH_FENCE: 7}
_STATES_BY_ID = {v: k for k, v in _STATE_IDS.items()}

#: state -> the states it may be entered from (Kafka's C{TransactionState.validPreviousStates}).
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _T.EMPTY: frozenset({_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}),
    _T.ONGOING: frozenset({_T.ONGOING, _T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}),
    _T.PREPARE_COMMIT: frozenset({_T.ONGOING}),
    _T.PREPARE_ABORT: frozenset({_T.ONGOING, _T.PREPARE_EPOCH_FENCE, _T.EMPTY, _T.COMPLETE_COMMIT,
                                 _T.COMPLETE_ABORT}),
    _T.COMPLETE_COMMIT: frozenset({_T.PREPARE_COMMIT}),
    _T.COMPLETE_ABORT: frozenset({_T.PREPARE_ABORT}),
    _T.DEAD: frozenset({_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}),
    _T.PREPARE_EPOCH_FENCE: frozenset({_T.ONGOING}),
}


class InvalidTransition(Exception):
    """A transition the table (or the metadata's pending state) does not allow: a coordinator bug."""


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """
    Whether no further epoch may be handed out for this producer id: the
    coordinator keeps C{Short.MAX_VALUE} for itself so that it can always
    fence (Kafka's C{TransactionMetadata.isEpochExhausted}).
    """
    return producer_epoch >= _SHORT_MAX - 1


@dataclass(frozen=True)
class TxnTransitMetadata:
    """
    The values of a prepared transition (Kafka's C{TxnTransitMetadata}):
    what the log record carries and what the metadata becomes once it is
    written.

    @ivar topic_partitions: a frozenset of L{TopicPartition}.
    @ivar txn_timeout_ms: the transaction timeout (ms).
    @ivar txn_start_timestamp_ms: when the transaction's first partition was
        added (ms since the epoch; -1: no transaction).
    @ivar txn_last_update_timestamp_ms: ms since the epoch.
    """

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int


@dataclass(eq=False)
class TransactionMetadata:
    """
    One transactional id's state (Kafka's C{TransactionMetadata}).

    @ivar last_producer_id: the producer id before the last rotation
        (C{prevProducerId}; -1: none).
    @ivar last_producer_epoch: the epoch before the last bump, so that a
        retried InitProducerId whose answer was lost gets the same epoch again
        (KIP-360; -1: none, and after a load from the log, whose v0 value does
        not carry it).
    @ivar pending_state: the state of a prepared transition whose record is
        being written; None when no transition is under way.
    @ivar has_failed_epoch_fence: a fence's abort could not be written, so the
        next fence does not bump the epoch again.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending_state: TransactionState | None = None
    has_failed_epoch_fence: bool = False

    # --- the two-step transitions -------------------------------------------------

    def _transit(self) -> TxnTransitMetadata:
        return TxnTransitMetadata(
            producer_id=self.producer_id, last_producer_id=self.last_producer_id,
            producer_epoch=self.producer_epoch, last_producer_epoch=self.last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms, state=self.state, topic_partitions=frozenset(self.topic_partitions),
            txn_start_timestamp_ms=self.txn_start_timestamp_ms,
            txn_last_update_timestamp_ms=self.txn_last_update_timestamp_ms)

    def prepare_transition(self, transit: TxnTransitMetadata) -> TxnTransitMetadata:
        """
        Check C{transit.state} against L{VALID_PREVIOUS_STATES} and set it as
        the pending state (Kafka's C{prepareTransitionTo}).

        @return: C{transit}, with C{last_producer_id} set to the current producer id.
        @raise InvalidTransition: a transition is already pending, the table
            forbids it, or the producer id or epoch is negative.
        """
        if self.pending_state is not None:
            raise InvalidTransition(f"{self.transactional_id}: preparing {transit.state.value} while "
                                    f"{self.pending_state.value} is pending")
        if transit.producer_id < 0:
            raise InvalidTransition(f"{self.transactional_id}: illegal producer id {transit.producer_id}")
        if transit.state != _T.DEAD and transit.producer_epoch < 0:
            raise InvalidTransition(f"{self.transactional_id}: illegal producer epoch {transit.producer_epoch}")
        if self.state not in VALID_PREVIOUS_STATES[transit.state]:
            raise InvalidTransition(f"{self.transactional_id}: {self.state.value} -> {transit.state.value} "
                                    f"is not a valid transition")
        self.pending_state = transit.state
        return replace(transit, last_producer_id=self.producer_id)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """
        Bump the epoch to fence the producer of an Ongoing transaction before
        aborting it (a new instance's InitProducerId, a timeout).  Not bumped
        again after a fence whose abort failed to be written.
        """
        bumped = self.producer_epoch
        if not self.has_failed_epoch_fence and self.producer_epoch < _SHORT_MAX:
            bumped += 1
        return self.prepare_transition(replace(self._transit(), state=_T.PREPARE_EPOCH_FENCE,
                                               producer_epoch=bumped))

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> TxnTransitMetadata:
        """
        InitProducerId on a transactional id with no open transaction: the next
        epoch, or -- KIP-360 -- the same epoch again for a retry whose answer
        was lost.

        @param expected_epoch: the epoch the producer says it has (InitProducerId
            v3+ with a producer id), or None.
        @raise KafkaError: C{PRODUCER_FENCED} when C{expected_epoch} is neither
            the current nor the last epoch.
        @raise InvalidTransition: the epoch is exhausted (rotate the producer id instead).
        """
        if is_epoch_exhausted(self.producer_epoch):
            raise InvalidTransition(f"{self.transactional_id}: no epoch left for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise kafka_error(ErrorCode.producer_fenced,
                              f"expected epoch {expected_epoch} is neither the current epoch "
                              f"{self.producer_epoch} nor the last {self.last_producer_epoch}")
        return self.prepare_transition(TxnTransitMetadata(
            producer_id=self.producer_id, last_producer_id=self.last_producer_id, producer_epoch=epoch,
            last_producer_epoch=last_epoch, txn_timeout_ms=txn_timeout_ms, state=_T.EMPTY,
            topic_partitions=frozenset(), txn_start_timestamp_ms=-1, txn_last_update_timestamp_ms=now_ms))

    def prepare_producer_id_rotation(self, new_producer_id: int, txn_timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        """A new producer id at epoch 0, once the epochs of the current one are exhausted."""
        if self.state in (_T.ONGOING, _T.PREPARE_COMMIT, _T.PREPARE_ABORT):
            raise InvalidTransition(f"{self.transactional_id}: rotating producer ids during a transaction")
        return self.prepare_transition(TxnTransitMetadata(
            producer_id=new_producer_id, last_producer_id=self.producer_id, producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms, state=_T.EMPTY, topic_partitions=frozenset(),
            txn_start_timestamp_ms=-1, txn_last_update_timestamp_ms=now_ms))

    def prepare_add_partitions(self, partitions: set[TopicPartition] | frozenset[TopicPartition],
                               now_ms: int) -> TxnTransitMetadata:
        """Ongoing with C{partitions} added; a transaction starting now is stamped C{now_ms}."""
        start = now_ms if self.state in (_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT) \
            else self.txn_start_timestamp_ms
        return self.prepare_transition(replace(
            self._transit(), state=_T.ONGOING, topic_partitions=frozenset(self.topic_partitions | set(partitions)),
            txn_start_timestamp_ms=start, txn_last_update_timestamp_ms=now_ms))

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TxnTransitMetadata:
        """PrepareCommit or PrepareAbort, same producer id and epoch (transactions v1)."""
        return self.prepare_transition(replace(self._transit(), state=state, txn_last_update_timestamp_ms=now_ms))

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """CompleteCommit or CompleteAbort once every marker is written; the partitions are cleared."""
        self.has_failed_epoch_fence = False
        state = _T.COMPLETE_COMMIT if self.state == _T.PREPARE_COMMIT else _T.COMPLETE_ABORT
        return self.prepare_transition(replace(self._transit(), state=state, topic_partitions=frozenset(),
                                               txn_last_update_timestamp_ms=now_ms))

    def prepare_dead(self) -> TxnTransitMetadata:
        """Dead: the transactional id expired; its tombstone is written next."""
        return self.prepare_transition(replace(self._transit(), state=_T.DEAD, topic_partitions=frozenset()))

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """
        Apply a prepared transition once its record is replicated (Kafka's
        C{completeTransitionTo}).

        @raise InvalidTransition: C{transit} is not the pending transition, or its
            values break the rules of its state (epoch, partitions, timestamps).
        """
        to = self.pending_state
        if to is None or to != transit.state:
            raise InvalidTransition(f"{self.transactional_id}: completing {transit.state.value} while "
                                    f"{to.value if to else 'nothing'} is pending")
        same_producer = transit.producer_id == self.producer_id and transit.producer_epoch == self.producer_epoch
        ok = True
        if to == _T.EMPTY:
            bump = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id)
            ok = (transit.producer_epoch == self.producer_epoch or bump) and not transit.topic_partitions \
                and transit.txn_start_timestamp_ms == -1
        elif to == _T.ONGOING:
            ok = same_producer and transit.topic_partitions >= self.topic_partitions \
                and transit.txn_timeout_ms == self.txn_timeout_ms
        elif to in (_T.PREPARE_COMMIT, _T.PREPARE_ABORT):
            ok = same_producer and transit.topic_partitions == frozenset(self.topic_partitions) \
                and transit.txn_timeout_ms == self.txn_timeout_ms \
                and transit.txn_start_timestamp_ms == self.txn_start_timestamp_ms
        elif to in (_T.COMPLETE_COMMIT, _T.COMPLETE_ABORT):
            ok = same_producer and transit.txn_timeout_ms == self.txn_timeout_ms \
                and transit.txn_start_timestamp_ms != -1
        else:  # PrepareEpochFence becomes PrepareAbort; Dead is removed from the cache
            ok = False
        if not ok:
            raise InvalidTransition(f"{self.transactional_id}: unexpected values completing "
                                    f"{self.state.value} -> {to.value}: {transit}")
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp_ms = transit.txn_start_timestamp_ms
        self.txn_last_update_timestamp_ms = transit.txn_last_update_timestamp_ms
        self.state = to
        self.pending_state = None

    def abort_transition(self) -> None:
        """Drop the pending transition (its record could not be written)."""
        self.pending_state = None

    def remove_partition(self, tp: TopicPartition) -> None:
        """
        A marker is written to C{tp}: it leaves the set of partitions awaiting one.

        @raise InvalidTransition: the transaction is not preparing to commit or abort.
        """
        if self.state not in (_T.PREPARE_COMMIT, _T.PREPARE_ABORT):
            raise InvalidTransition(f"{self.transactional_id}: removing a marked partition in {self.state.value}")
        self.topic_partitions.discard(tp)


# --- partitioning ----------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's C{String.hashCode}: over UTF-16 code units, C{s[0]*31^(n-1) + ... + s[n-1]}, as a signed int32."""
    data = text.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """
    The ``__transaction_state`` partition of C{transactional_id}: Kafka's
    C{Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions}
    (C{Utils.abs} maps C{Integer.MIN_VALUE} to 0), so that a kafkatw cluster and a
    Kafka cluster place every transactional id alike.
    """
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- the __transaction_state records -------------------------------------------------

_I16 = struct.Struct(">h")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TIMESTAMPS = struct.Struct(">qq")


def encode_transaction_log_key(transactional_id: str) -> bytes:
    """The record key: TransactionLogKey v0 behind its version (0)."""
    name = transactional_id.encode("utf-8")
    return _I16.pack(0) + _I16.pack(len(name)) + name


def decode_transaction_log_key(key: bytes) -> str | None:
    """
    @return: the transactional id, or None when the key's version is not 0
        (not a transaction log key; Kafka skips those).
    @raise ValueError: a truncated key.
    """
    if len(key) < 4:
        raise ValueError(f"transaction log key of {len(key)} bytes")
    (version,) = _I16.unpack_from(key, 0)
    if version != 0:
        return None
    (n,) = _I16.unpack_from(key, 2)
    if n < 0 or 4 + n > len(key):
        raise ValueError("transaction log key: bad transactional id length")
    return key[4:4 + n].decode("utf-8")


def _group_by_topic(partitions: frozenset[TopicPartition] | set[TopicPartition]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())


def encode_transaction_log_value(transit: TxnTransitMetadata | TransactionMetadata, version: int = 0) -> bytes:
    """
    The record value of a transition: TransactionLogValue v0 (Kafka's default
    until C{transaction.version} 1) or v1 (flexible) behind its version.

    @raise ValueError: an Empty state with partitions (Kafka refuses it too), or
        an unknown version.
    """
    state = transit.state
    if state == _T.EMPTY and transit.topic_partitions:
        raise ValueError(f"an Empty transaction has no partitions: {transit}")
    topics = None if state == _T.EMPTY else _group_by_topic(transit.topic_partitions)
    head = _VALUE_HEAD.pack(version, transit.producer_id, transit.producer_epoch, transit.txn_timeout_ms, state.id)
    stamps = _TIMESTAMPS.pack(transit.txn_last_update_timestamp_ms, transit.txn_start_timestamp_ms)
    parts = [head]
    if version == 0:
        if topics is None:
            parts.append(_I32.pack(-1))
        else:
            parts.append(_I32.pack(len(topics)))
            for topic, ids in topics:
                name = topic.encode("utf-8")
                parts.append(_I16.pack(len(name)) + name + _I32.pack(len(ids)) + struct.pack(f">{len(ids)}i", *ids))
        parts.append(stamps)
    elif version == 1:
        if topics is None:
            parts.append(encode_uvarint(0))
        else:
            parts.append(encode_uvarint(len(topics) + 1))
            for topic, ids in topics:
                name = topic.encode("utf-8")
                parts.append(encode_uvarint(len(name) + 1) + name + encode_uvarint(len(ids) + 1)
                             + struct.pack(f">{len(ids)}i", *ids) + encode_uvarint(0))
        parts.append(stamps)
        tagged = []
        if transit.last_producer_id != NO_PRODUCER_ID:
            tagged.append(encode_uvarint(0) + encode_uvarint(8) + _I64.pack(transit.last_producer_id))
        parts.append(encode_uvarint(len(tagged)))
        parts.extend(tagged)
    else:
        raise ValueError(f"TransactionLogValue version {version} (0 and 1 are known)")
    return b"".join(parts)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return decode_uvarint(data, pos)
    except CorruptRecordError as e:
        raise ValueError(f"transaction log value: {e}") from None


def decode_transaction_log_value(transactional_id: str, value: bytes | None) -> TransactionMetadata | None:
    """
    The metadata a record value holds (Kafka's C{readTxnRecordValue}).

    @return: None for a tombstone (C{value} None).
    @raise ValueError: an unknown version, an unknown state id, or a truncated value.
    """
    if value is None:
        return None
    try:
        version, producer_id, epoch, timeout_ms, status = _VALUE_HEAD.unpack_from(value, 0)
        pos = _VALUE_HEAD.size
        partitions: set[TopicPartition] = set()
        last_producer_id = NO_PRODUCER_ID
        if version == 0:
            (count,) = _I32.unpack_from(value, pos)
            pos += 4
            for _ in range(max(count, 0)):
                (n,) = _I16.unpack_from(value, pos)
                topic = value[pos + 2:pos + 2 + n].decode("utf-8")
                pos += 2 + n
                (k,) = _I32.unpack_from(value, pos)
                pos += 4
                partitions.update((topic, p) for p in struct.unpack_from(f">{k}i", value, pos))
                pos += 4 * k
            last_update, start = _TIMESTAMPS.unpack_from(value, pos)
        elif version == 1:
            count, pos = _read_uvarint(value, pos)
            for _ in range(count - 1 if count else 0):
                n, pos = _read_uvarint(value, pos)
                topic = value[pos:pos + n - 1].decode("utf-8")
                pos += n - 1
                k, pos = _read_uvarint(value, pos)
                partitions.update((topic, p) for p in struct.unpack_from(f">{k - 1}i", value, pos))
                pos += 4 * (k - 1)
                pos = _skip_tagged(value, pos)
            last_update, start = _TIMESTAMPS.unpack_from(value, pos)
            pos += _TIMESTAMPS.size
            fields, pos = _read_uvarint(value, pos)
            for _ in range(fields):
                tag, pos = _read_uvarint(value, pos)
                size, pos = _read_uvarint(value, pos)
                if tag == 0 and size == 8:
                    (last_producer_id,) = _I64.unpack_from(value, pos)
                pos += size
        else:
            raise ValueError(f"unknown TransactionLogValue version {version}")
    except struct.error as e:
        raise ValueError(f"transaction log value: {e}") from None
    state = TransactionState.from_id(status)
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
        txn_timeout_ms=timeout_ms, state=state, topic_partitions=set() if state == _T.EMPTY else partitions,
        txn_start_timestamp_ms=start, txn_last_update_timestamp_ms=last_update, last_producer_id=last_producer_id)


def _skip_tagged(data: bytes, pos: int) -> int:
    fields, pos = _read_uvarint(data, pos)
    for _ in range(fields):
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
    return pos


# --- record batches of __transaction_state ------------------------------------------


def encode_transaction_log_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """
    One uncompressed RecordBatch v2 of C{records} (key, value or None), as the
    coordinator appends them (Kafka: C{TransactionLog.EnforcedCompression} none;
    no producer id).  The log assigns offsets and the leader epoch.
    """
    return encode_batch([(key, value, (), timestamp_ms) for key, value in records])


def transaction_log_records(data: bytes) -> list[tuple[bytes, bytes | None]]:
    """
    The (key, value) records of the batches in C{data} (a segment's bytes, or a
    read of the partition), control batches skipped, in offset order: what
    L{kafkatw.broker.transaction_coordinator.TransactionLog.read} returns.

    @raise kafkatw.errors.CorruptRecordError: a batch fails its CRC.
    """
    return [(r.key or b"", r.value) for batch in decode_batches(data) if not batch.is_control
            for r in batch.records]
