"""
Unit tests of the transaction state: Kafka's C{TransactionState} table, the
two-step transitions of L{TransactionMetadata}, the ``__transaction_state``
records against byte strings written out by hand from Kafka's
C{TransactionLogKey}/C{TransactionLogValue} schemas, and the partitioning of
transactional ids (Java's C{String.hashCode}, values computed with Java 17).
"""

from __future__ import annotations

import itertools

from twisted.trial import unittest

from kafkatw.broker.transaction_state import (
    VALID_PREVIOUS_STATES,
    InvalidTransition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    decode_transaction_log_key,
    decode_transaction_log_value,
    encode_transaction_log_key,
    encode_transaction_log_batch,
    encode_transaction_log_value,
    java_string_hash,
    partition_for,
    transaction_log_records,
)
from kafkatw.protocol.control import encode_marker_batch
from kafkatw.protocol.records import decode_batches
from kafkatw.errors import ErrorCode, KafkaError

S = TransactionState

#: Kafka's table, written out again (TransactionState.java's static block).
KAFKA_TABLE = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence", "Empty", "CompleteCommit", "CompleteAbort"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareEpochFence": {"Ongoing"},
}


def metadata(state: TransactionState, **kw: object) -> TransactionMetadata:
    values = dict(transactional_id="t", producer_id=1000, producer_epoch=3, txn_timeout_ms=60000, state=state,
                  topic_partitions={("a", 0)} if state not in (S.EMPTY, S.DEAD) else set(),
                  txn_start_timestamp_ms=10 if state not in (S.EMPTY, S.DEAD) else -1,
                  txn_last_update_timestamp_ms=20)
    values.update(kw)
    return TransactionMetadata(**values)  # type: ignore[arg-type]


def transit(state: TransactionState, **kw: object) -> TxnTransitMetadata:
    values = dict(producer_id=1000, last_producer_id=-1, producer_epoch=3, last_producer_epoch=-1,
                  txn_timeout_ms=60000, state=state, topic_partitions=frozenset(), txn_start_timestamp_ms=-1,
                  txn_last_update_timestamp_ms=30)
    values.update(kw)
    return TxnTransitMetadata(**values)  # type: ignore[arg-type]


class StateTableTests(unittest.TestCase):
    def test_table_is_kafkas(self) -> None:
        self.assertEqual({to.value: {s.value for s in prev} for to, prev in VALID_PREVIOUS_STATES.items()},
                         KAFKA_TABLE)

    def test_ids_and_names(self) -> None:
        self.assertEqual([(s.value, s.id) for s in sorted(S, key=lambda s: s.id)], [
            ("Empty", 0), ("Ongoing", 1), ("PrepareCommit", 2), ("PrepareAbort", 3), ("CompleteCommit", 4),
            ("CompleteAbort", 5), ("Dead", 6), ("PrepareEpochFence", 7)])
        for s in S:
            self.assertIs(S.from_id(s.id), s)
        self.assertRaises(ValueError, S.from_id, 8)
        self.assertEqual({s for s in S if s.expiration_allowed}, {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

    def test_every_transition(self) -> None:
        """Each of the 64 (from, to) pairs is prepared exactly when the table allows it."""
        for current, target in itertools.product(S, S):
            meta = metadata(current)
            allowed = current.value in KAFKA_TABLE[target.value]
            if allowed:
                meta.prepare_transition(transit(target))
                self.assertIs(meta.pending_state, target, (current, target))
            else:
                self.assertRaises(InvalidTransition, meta.prepare_transition, transit(target))
                self.assertIsNone(meta.pending_state, (current, target))

    def test_one_pending_transition_at_a_time(self) -> None:
        meta = metadata(S.EMPTY)
        meta.prepare_add_partitions({("a", 0)}, 100)
        self.assertRaises(InvalidTransition, meta.prepare_add_partitions, {("b", 0)}, 100)
        meta.abort_transition()
        meta.prepare_add_partitions({("b", 0)}, 100)

    def test_negative_epoch_or_id_refused(self) -> None:
        self.assertRaises(InvalidTransition, metadata(S.EMPTY).prepare_transition,
                          transit(S.ONGOING, producer_epoch=-1))
        self.assertRaises(InvalidTransition, metadata(S.EMPTY).prepare_transition, transit(S.ONGOING, producer_id=-1))

    def test_a_transaction_round(self) -> None:
        meta = metadata(S.EMPTY)
        t = meta.prepare_add_partitions({("a", 0), ("b", 1)}, 100)
        self.assertEqual(t.txn_start_timestamp_ms, 100)
        meta.complete_transition(t)
        self.assertEqual((meta.state, meta.topic_partitions), (S.ONGOING, {("a", 0), ("b", 1)}))
        t = meta.prepare_add_partitions({("c", 2)}, 150)
        self.assertEqual(t.txn_start_timestamp_ms, 100)  # the transaction started at 100
        meta.complete_transition(t)
        meta.complete_transition(meta.prepare_abort_or_commit(S.PREPARE_COMMIT, 200))
        self.assertEqual(meta.state, S.PREPARE_COMMIT)
        for tp in [("a", 0), ("b", 1), ("c", 2)]:
            meta.remove_partition(tp)
        meta.complete_transition(meta.prepare_complete(300))
        self.assertEqual((meta.state, meta.topic_partitions, meta.producer_epoch), (S.COMPLETE_COMMIT, set(), 3))
        self.assertRaises(InvalidTransition, meta.remove_partition, ("a", 0))

    def test_complete_checks_the_pending_state(self) -> None:
        meta = metadata(S.EMPTY)
        self.assertRaises(InvalidTransition, meta.complete_transition, transit(S.ONGOING))
        meta.prepare_add_partitions({("a", 0)}, 100)
        self.assertRaises(InvalidTransition, meta.complete_transition, transit(S.PREPARE_COMMIT))
        # Ongoing at another epoch is not a valid completion
        self.assertRaises(InvalidTransition, meta.complete_transition,
                          transit(S.ONGOING, producer_epoch=4, topic_partitions=frozenset({("a", 0)})))

    def test_dead_is_never_completed(self) -> None:
        meta = metadata(S.EMPTY)
        self.assertRaises(InvalidTransition, meta.complete_transition, meta.prepare_dead())

    def test_epoch_fence(self) -> None:
        meta = metadata(S.ONGOING)
        self.assertEqual(meta.prepare_fence_producer_epoch().producer_epoch, 4)
        meta.abort_transition()
        meta.has_failed_epoch_fence = True
        self.assertEqual(meta.prepare_fence_producer_epoch().producer_epoch, 3)

    def test_increment_epoch_kip360(self) -> None:
        """No expected epoch: bump; the current one: bump; the last one: the same again; else PRODUCER_FENCED."""
        meta = metadata(S.EMPTY)
        t = meta.prepare_increment_producer_epoch(5000, None, 100)
        self.assertEqual((t.producer_epoch, t.last_producer_epoch, t.txn_timeout_ms), (4, -1, 5000))
        meta.abort_transition()
        t = meta.prepare_increment_producer_epoch(5000, 3, 100)
        self.assertEqual((t.producer_epoch, t.last_producer_epoch), (4, 3))
        meta.complete_transition(t)
        t = meta.prepare_increment_producer_epoch(5000, 3, 100)  # a retry of the same call
        self.assertEqual((t.producer_epoch, t.last_producer_epoch), (4, 3))
        meta.abort_transition()
        error = self.assertRaises(KafkaError, meta.prepare_increment_producer_epoch, 5000, 1, 100)
        self.assertEqual(error.error_code, ErrorCode.producer_fenced)

    def test_exhausted_epoch(self) -> None:
        meta = metadata(S.EMPTY, producer_epoch=32766)
        self.assertRaises(InvalidTransition, meta.prepare_increment_producer_epoch, 5000, None, 100)
        t = meta.prepare_producer_id_rotation(2000, 5000, 100, True)
        self.assertEqual((t.producer_id, t.producer_epoch, t.last_producer_epoch, t.last_producer_id),
                         (2000, 0, 32766, 1000))
        meta.complete_transition(t)
        self.assertEqual((meta.producer_id, meta.last_producer_id), (2000, 1000))


# TransactionLogKey v0 of "my-txn": version 0, string length 6, "my-txn".
KEY = bytes.fromhex("0000" "0006") + b"my-txn"

# TransactionLogValue v0: Ongoing, producer 1000 epoch 2, timeout 60 s, topic "t" partitions 0 and 1.
VALUE_V0 = bytes.fromhex(
    "0000"                      # version 0
    "00000000000003e8"          # producer id 1000
    "0002"                      # producer epoch 2
    "0000ea60"                  # transaction timeout 60000 ms
    "01"                        # status: Ongoing
    "00000001"                  # 1 topic
    "0001" "74"                 # "t"
    "00000002" "00000000" "00000001"  # partitions [0, 1]
    "0000018bcfe56864"          # last update 1700000000100
    "0000018bcfe56800"          # start 1700000000000
)

# The same Empty: partitions null, start -1.
VALUE_V0_EMPTY = bytes.fromhex(
    "0000" "00000000000003e8" "0003" "0000ea60" "00" "ffffffff" "0000018bcfe56864" "ffffffffffffffff")

# TransactionLogValue v1 (flexible) of VALUE_V0, previous producer id 999 in tag 0.
VALUE_V1 = bytes.fromhex(
    "0001" "00000000000003e8" "0002" "0000ea60" "01"
    "02"                        # compact array: 1 topic
    "02" "74"                   # compact string "t"
    "03" "00000000" "00000001"  # compact array [0, 1]
    "00"                        # no tagged fields in the entry
    "0000018bcfe56864" "0000018bcfe56800"
    "01" "00" "08" "00000000000003e7"  # 1 tagged field: tag 0, 8 bytes, 999
)


class TransactionLogRecordTests(unittest.TestCase):
    def ongoing(self) -> TransactionMetadata:
        return TransactionMetadata(transactional_id="my-txn", producer_id=1000, producer_epoch=2,
                                   txn_timeout_ms=60000, state=S.ONGOING, topic_partitions={("t", 1), ("t", 0)},
                                   txn_start_timestamp_ms=1700000000000, txn_last_update_timestamp_ms=1700000000100)

    def test_key(self) -> None:
        self.assertEqual(encode_transaction_log_key("my-txn"), KEY)
        self.assertEqual(decode_transaction_log_key(KEY), "my-txn")
        self.assertIsNone(decode_transaction_log_key(bytes.fromhex("0001000161")))  # another record type
        self.assertRaises(ValueError, decode_transaction_log_key, b"\x00")
        self.assertEqual(decode_transaction_log_key(encode_transaction_log_key("é-txn")), "é-txn")

    def test_value_v0(self) -> None:
        self.assertEqual(encode_transaction_log_value(self.ongoing()), VALUE_V0)
        meta = decode_transaction_log_value("my-txn", VALUE_V0)
        assert meta is not None
        self.assertEqual((meta.producer_id, meta.producer_epoch, meta.txn_timeout_ms, meta.state,
                          meta.topic_partitions, meta.txn_start_timestamp_ms, meta.txn_last_update_timestamp_ms,
                          meta.last_producer_epoch),
                         (1000, 2, 60000, S.ONGOING, {("t", 0), ("t", 1)}, 1700000000000, 1700000000100, -1))

    def test_value_v0_empty(self) -> None:
        meta = TransactionMetadata(transactional_id="my-txn", producer_id=1000, producer_epoch=3,
                                   txn_timeout_ms=60000, state=S.EMPTY, txn_last_update_timestamp_ms=1700000000100)
        self.assertEqual(encode_transaction_log_value(meta), VALUE_V0_EMPTY)
        decoded = decode_transaction_log_value("my-txn", VALUE_V0_EMPTY)
        assert decoded is not None
        self.assertEqual((decoded.state, decoded.topic_partitions, decoded.txn_start_timestamp_ms),
                         (S.EMPTY, set(), -1))

    def test_value_v1(self) -> None:
        meta = self.ongoing()
        meta.last_producer_id = 999
        self.assertEqual(encode_transaction_log_value(meta, version=1), VALUE_V1)
        decoded = decode_transaction_log_value("my-txn", VALUE_V1)
        assert decoded is not None
        self.assertEqual((decoded.state, decoded.topic_partitions, decoded.last_producer_id, decoded.producer_epoch),
                         (S.ONGOING, {("t", 0), ("t", 1)}, 999, 2))

    def test_round_trip_every_state(self) -> None:
        for state in S:
            for version in (0, 1):
                meta = self.ongoing()
                meta.state = state
                if state == S.EMPTY:
                    meta.topic_partitions = set()
                decoded = decode_transaction_log_value("my-txn", encode_transaction_log_value(meta, version))
                assert decoded is not None
                self.assertEqual((decoded.state, decoded.topic_partitions, decoded.producer_epoch),
                                 (state, meta.topic_partitions, 2))

    def test_tombstone_and_bad_values(self) -> None:
        self.assertIsNone(decode_transaction_log_value("my-txn", None))
        self.assertRaises(ValueError, decode_transaction_log_value, "my-txn", VALUE_V0[:20])
        self.assertRaises(ValueError, decode_transaction_log_value, "my-txn", b"\x00\x02" + VALUE_V0[2:])
        bad_state = VALUE_V0[:16] + b"\x09" + VALUE_V0[17:]
        self.assertRaises(ValueError, decode_transaction_log_value, "my-txn", bad_state)
        empty_with_partitions = self.ongoing()
        empty_with_partitions.state = S.EMPTY
        self.assertRaises(ValueError, encode_transaction_log_value, empty_with_partitions)


class TransactionLogBatchTests(unittest.TestCase):
    def test_batches_round_trip_and_skip_markers(self) -> None:
        first = [(KEY, VALUE_V0), (encode_transaction_log_key("other"), VALUE_V0_EMPTY)]
        second = [(KEY, None)]  # a tombstone
        data = (encode_transaction_log_batch(first, 1_700_000_000_000) + encode_marker_batch(5, 0, 1, True, 0)
                + encode_transaction_log_batch(second, 1_700_000_000_001))
        self.assertEqual(transaction_log_records(data), first + second)
        header = decode_batches(data)[0]
        self.assertEqual((header.compression, header.producer_id, header.is_transactional), (0, -1, False))


class PartitioningTests(unittest.TestCase):
    #: (id, String.hashCode, Utils.abs(hashCode) % 50), printed by Java 17.
    JAVA = [
        ("", 0, 0),
        ("my-txn", -1061187895, 45),
        ("hello", 99162322, 22),
        ("transactional-id-42", -1774587604, 4),
        ("exactly-once-\u00e9\U0001F600", 924153505, 5),  # a surrogate pair: two UTF-16 units
        ("polygenelubricants", -2147483648, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
        ("console-consumer-group", 210291998, 48),
    ]

    def test_java_hash_and_partition(self) -> None:
        for text, java_hash, partition in self.JAVA:
            self.assertEqual(java_string_hash(text), java_hash, text)
            self.assertEqual(partition_for(text, 50), partition, text)
