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
"""

from __future__ import annotations

import json
from collections import deque
from typing import Iterable, NamedTuple

from kafkatw.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from kafkatw.protocol.batch import BatchHeader

__all__ = ["BatchMetadata", "ProducerEntry", "ProducerStateManager", "increment_sequence", "NUM_BATCHES_TO_RETAIN"]

NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's C{DefaultRecordBatch.incrementSequence}: wraps past 2**31-1 to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


class ProducerEntry:
    """State of one producer id."""

    __slots__ = ("producer_id", "epoch", "batches")

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)

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
        return other


class ProducerStateManager:
    """The producer ids of one partition and their recent batches."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def clear(self) -> None:
        self.producers.clear()

    def snapshot(self, offset: int) -> bytes:
        """
        The state as JSON: C{{"version": 1, "offset": <LEO>, "producers":
        [[producer id, epoch, [[first_seq, last_seq, base_offset, last_offset], ...]], ...]}}.
        """
        producers = [[e.producer_id, e.epoch, [list(b) for b in e.batches]] for e in self.producers.values()]
        return json.dumps({"version": 1, "offset": offset, "producers": producers}, separators=(",", ":")).encode()

    def restore(self, data: bytes, offset: int) -> bool:
        """
        Load a L{snapshot} taken at C{offset}.

        @return: whether it was loaded (C{False}: unreadable, or taken at
            another offset; the state is then left empty).
        """
        try:
            body = json.loads(data)
            if body.get("version") != 1 or body.get("offset") != offset:
                return False
            producers = {}
            for producer_id, epoch, batches in body["producers"]:
                entry = ProducerEntry(int(producer_id), int(epoch))
                entry.batches.extend(BatchMetadata(*map(int, b)) for b in batches)
                producers[entry.producer_id] = entry
        except (ValueError, TypeError, KeyError):
            return False
        self.producers = producers
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

    def load_batch(self, h: BatchHeader) -> None:
        """
        Record an appended batch (offsets already assigned), without checks:
        used after a validated append and when rebuilding from the log.
        """
        pid = h.producer_id
        if pid < 0 or h.is_control:
            return
        entry = self.producers.get(pid)
        if entry is None or h.producer_epoch != entry.epoch:
            if entry is not None and h.producer_epoch < entry.epoch:
                return
            entry = self.producers[pid] = ProducerEntry(pid, h.producer_epoch)
        entry.batches.append(BatchMetadata(
            h.base_sequence, increment_sequence(h.base_sequence, h.last_offset_delta),
            h.base_offset, h.base_offset + h.last_offset_delta))

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or above C{offset} (log truncation)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept:
                del self.producers[pid]
            elif len(kept) != len(entry.batches):
                entry.batches.clear()
                entry.batches.extend(kept)
