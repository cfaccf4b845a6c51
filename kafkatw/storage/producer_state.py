"""
Idempotent-producer state of one partition (Kafka's C{ProducerStateManager}).

Per producer id the partition remembers the producer epoch and the metadata of
the last five batches it appended — Kafka keeps five because a producer with
idempotence has at most five requests in flight
(C{max.in.flight.requests.per.connection <= 5})::

    producer id -> epoch, deque[(first_seq, last_seq, base_offset, last_offset)] (maxlen 5)

Rules, from Kafka's C{ProducerStateManager}/C{ProducerAppendInfo} and the
protocol guide:

  - producer id -1: no check.
  - epoch below the current one: C{INVALID_PRODUCER_EPOCH}.
  - same epoch, C{(first_seq, last_seq)} equal to a remembered batch: a retried
    duplicate; nothing is written and the original offsets are answered.
  - epoch above the current one: the sequence must restart at 0, else
    C{OUT_OF_ORDER_SEQUENCE_NUMBER}; the state is reset.
  - same epoch otherwise: the first sequence must follow the last one
    (C{last_seq + 1}, wrapping from 2**31-1 to 0), else
    C{OUT_OF_ORDER_SEQUENCE_NUMBER}.
  - unknown producer id: any sequence is accepted, as Kafka does since KIP-360
    (its state may have been expired or removed with old segments).
  - control batches (transaction markers) carry no sequence: not checked.

On a clean shutdown the log writes the state to C{<20-digit LEO>.snapshot}
in the partition directory (JSON, L{ProducerStateManager.snapshot}); a clean
start whose snapshot matches the log end offset loads it and reads no batch.
Otherwise (an unclean shutdown, or no snapshot) the log rebuilds the state from
the batch headers of all its segments (L{ProducerStateManager.load_batch}).
The snapshot is removed once loaded, so a later crash never trusts a stale one.

Transactions (KIP-98; Kafka's C{ProducerStateEntry.currentTxnFirstOffset},
C{ProducerStateManager.ongoingTxns}/C{unreplicatedTxns}):

  - a transactional batch of a producer with no open transaction opens one at
    its base offset;
  - a control batch (a COMMIT or ABORT marker, L{kafkatw.protocol.control.read_marker}) closes it: the
    transaction is completed, but stays I{unstable} until the high watermark
    passes its marker; an ABORT is returned to the log, which adds it to the
    segment's aborted-transaction index
    (L{kafkatw.storage.transaction_index}); a control batch without records
    (the header the log cleaner leaves of a marker whose transaction is gone)
    closes nothing;
  - a marker carries the coordinator epoch; a marker of an older producer
    epoch (C{INVALID_PRODUCER_EPOCH}) or of an older coordinator epoch
    (C{TRANSACTION_COORDINATOR_FENCED}) is refused (L{validate_marker});
  - the first unstable offset is the smallest first offset of the open and
    the unstable transactions; the partition's last stable offset (LSO) is
    C{min(first unstable offset, high watermark)}
    (L{ProducerStateManager.first_unstable_offset}).

Followers load the same batches, so every replica computes the same LSO.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Iterable, NamedTuple

from kafkatw.errors import (
    ErrorCode,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    kafka_error,
)
from kafkatw.protocol.batch import BatchHeader
from kafkatw.protocol.control import EndTransactionMarker

__all__ = ["BatchMetadata", "ProducerEntry", "ProducerStateManager", "increment_sequence", "NUM_BATCHES_TO_RETAIN",
           "CompletedTxn"]

NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's C{DefaultRecordBatch.incrementSequence}: wraps past 2**31-1 to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker: C{aborted} ones go to the C{.txnindex}."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


class ProducerEntry:
    """State of one producer id."""

    __slots__ = ("producer_id", "epoch", "batches", "current_txn_first_offset", "coordinator_epoch")

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        #: the first offset of the producer's open transaction (None: none open)
        self.current_txn_first_offset: int | None = None
        #: the coordinator epoch of the last marker (-1: none)
        self.coordinator_epoch = -1

    @property
    def last_seq(self) -> int | None:
        return self.batches[-1].last_seq if self.batches else None

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def copy(self) -> "ProducerEntry":
        other = ProducerEntry(self.producer_id, self.epoch)
        other.batches.extend(self.batches)
        other.current_txn_first_offset = self.current_txn_first_offset
        other.coordinator_epoch = self.coordinator_epoch
        return other


class ProducerStateManager:
    """The producer ids of one partition and their recent batches."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        #: producer id -> first offset of its open transaction
        self.ongoing: dict[int, int] = {}
        #: completed transactions whose marker the high watermark has not passed yet, in log order
        self.unreplicated: deque[CompletedTxn] = deque()
        #: producer id -> the guard of a verification under way (KIP-890's C{VerificationGuard}): a
        #: leader asked the coordinator whether the producer's next transactional batch belongs to its
        #: ongoing transaction; a marker (or a truncation) in between drops it, so the answer no longer
        #: counts (L{kafkatw.broker.produce_apis})
        self.verification_guards: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verification_guards.clear()

    def snapshot(self, offset: int) -> bytes:
        """
        The state as JSON: C{{"version": 2, "offset": <LEO>, "producers":
        [[producer id, epoch, [[first_seq, last_seq, base_offset, last_offset], ...],
        open transaction's first offset or null, coordinator epoch], ...],
        "unreplicated": [[producer id, first offset, marker offset, aborted], ...]}}.
        Version 1 (no transactions) is still read.
        """
        producers = [[e.producer_id, e.epoch, [list(b) for b in e.batches], e.current_txn_first_offset,
                      e.coordinator_epoch] for e in self.producers.values()]
        return json.dumps({"version": 2, "offset": offset, "producers": producers,
                           "unreplicated": [list(t) for t in self.unreplicated]}, separators=(",", ":")).encode()

    def restore(self, data: bytes, offset: int) -> bool:
        """
        Load a L{snapshot} taken at C{offset}.

        @return: whether it was loaded (C{False}: unreadable, or taken at
            another offset; the state is then left empty).
        """
        try:
            body = json.loads(data)
            if body.get("version") not in (1, 2) or body.get("offset") != offset:
                return False
            producers = {}
            ongoing = {}
            for producer_id, epoch, batches, *txn in body["producers"]:
                entry = ProducerEntry(int(producer_id), int(epoch))
                entry.batches.extend(BatchMetadata(*map(int, b)) for b in batches)
                if txn:
                    first, entry.coordinator_epoch = txn[0], int(txn[1])
                    if first is not None:
                        entry.current_txn_first_offset = ongoing[entry.producer_id] = int(first)
                producers[entry.producer_id] = entry
            unreplicated = deque(CompletedTxn(int(p), int(f), int(last), bool(a))
                                 for p, f, last, a in body.get("unreplicated", ()))
        except (ValueError, TypeError, KeyError):
            return False
        self.producers = producers
        self.ongoing = ongoing
        self.unreplicated = unreplicated
        return True

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def validate(self, headers: Iterable[BatchHeader]) -> BatchMetadata | None:
        """
        Check the batches of one append, as a whole, before anything is
        written.  Batches of the same producer within the append are checked
        against each other too.

        @return: the metadata of the original batch when a batch is a retried
            duplicate (the append must then write nothing), else C{None}.
        @raise InvalidProducerEpochError: an epoch older than the current one.
        @raise OutOfOrderSequenceError: a sequence gap, or a new epoch not
            starting at sequence 0.
        @raise KafkaError: C{INVALID_TXN_STATE}, a non-transactional batch of a
            producer whose transaction is open (Kafka's C{ProducerAppendInfo}).
        """
        pending: dict[int, tuple[int, int | None]] = {}
        for h in headers:
            pid = h.producer_id
            if pid < 0 or h.is_control:
                continue
            entry = self.producers.get(pid)
            if pid in pending:
                epoch, last_seq = pending[pid]
            elif entry is not None:
                epoch, last_seq = entry.epoch, entry.last_seq
            else:
                epoch, last_seq = -1, None
            if entry is not None and entry.current_txn_first_offset is not None and not h.attributes & 0x10 \
                    and h.producer_epoch == entry.epoch:
                raise kafka_error(ErrorCode.invalid_txn_state,
                                  f"producer {pid}: a non-transactional write while its transaction is open")
            first_seq = h.base_sequence
            batch_last_seq = increment_sequence(first_seq, h.last_offset_delta)
            if entry is not None and h.producer_epoch == entry.epoch and pid not in pending:
                duplicate = entry.find_duplicate(first_seq, batch_last_seq)
                if duplicate is not None:
                    return duplicate
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid}: epoch {h.producer_epoch} is older than the current epoch {epoch}")
            if h.producer_epoch > epoch:
                if first_seq != 0 and epoch != -1:
                    raise OutOfOrderSequenceError(
                        f"producer {pid}: new epoch {h.producer_epoch} must start at sequence 0, not {first_seq}")
            elif last_seq is not None and first_seq != increment_sequence(last_seq, 1):
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch}: expected sequence {increment_sequence(last_seq, 1)}, got {first_seq}")
            pending[pid] = (h.producer_epoch, batch_last_seq)
        return None

    def validate_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """
        Check a marker before the leader appends it (Kafka's
        C{ProducerAppendInfo.appendEndTxnMarker}).

        @raise InvalidProducerEpochError: the producer has a newer epoch.
        @raise KafkaError: C{TRANSACTION_COORDINATOR_FENCED}, a newer
            coordinator epoch wrote a marker for this producer.
        """
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id}: marker epoch {producer_epoch} is older than the current epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise kafka_error(ErrorCode.transaction_coordinator_fenced,
                              f"producer {producer_id}: coordinator epoch {coordinator_epoch} is older than "
                              f"{entry.coordinator_epoch}")

    def load_batch(self, h: BatchHeader, marker: EndTransactionMarker | None = None) -> CompletedTxn | None:
        """
        Record an appended batch (offsets already assigned), without checks:
        used after a validated append and when rebuilding from the log.

        @param marker: the marker of a control batch (L{kafkatw.protocol.control.read_marker}).
        @return: the transaction a control batch completed, if one was open.
        """
        pid = h.producer_id
        if pid < 0:
            return None
        if h.is_control and h.record_count == 0:
            # the empty header the log cleaner leaves of a marker whose transaction is gone from
            # the log: nothing to close (Kafka's ProducerAppendInfo.append)
            return None
        entry = self.producers.get(pid)
        if h.is_control:
            self.verification_guards.pop(pid, None)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid, h.producer_epoch)
            elif h.producer_epoch > entry.epoch:
                entry.epoch = h.producer_epoch  # a fencing abort bumps the epoch: sequences restart
                entry.batches.clear()
            if marker is not None:
                entry.coordinator_epoch = marker.coordinator_epoch
            first = entry.current_txn_first_offset
            if first is None:
                return None
            entry.current_txn_first_offset = None
            self.ongoing.pop(pid, None)
            completed = CompletedTxn(pid, first, h.base_offset, marker is not None and not marker.committed)
            self.unreplicated.append(completed)
            return completed
        if entry is None or h.producer_epoch != entry.epoch:
            if entry is not None and h.producer_epoch < entry.epoch:
                return None
            old = entry
            entry = self.producers[pid] = ProducerEntry(pid, h.producer_epoch)
            if old is not None:
                entry.current_txn_first_offset = old.current_txn_first_offset
                entry.coordinator_epoch = old.coordinator_epoch
        entry.batches.append(BatchMetadata(
            h.base_sequence, increment_sequence(h.base_sequence, h.last_offset_delta),
            h.base_offset, h.base_offset + h.last_offset_delta))
        if h.attributes & 0x10 and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = self.ongoing[pid] = h.base_offset
        return None

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """
        The first offset of the oldest transaction that is open, or completed
        with its marker at or above C{high_watermark} (Kafka's
        C{ProducerStateManager.firstUnstableOffset}); None when there is none.
        Completed transactions the high watermark has passed are forgotten.
        """
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.popleft()
        first = min(self.ongoing.values()) if self.ongoing else None
        for txn in unreplicated:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def first_ongoing_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or above C{offset} (log truncation)."""
        self.verification_guards.clear()
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if entry.current_txn_first_offset is not None and entry.current_txn_first_offset >= offset:
                entry.current_txn_first_offset = None
                self.ongoing.pop(pid, None)
            if not kept:
                del self.producers[pid]
                self.ongoing.pop(pid, None)
            elif len(kept) != len(entry.batches):
                entry.batches.clear()
                entry.batches.extend(kept)
