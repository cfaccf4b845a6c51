"""
A share partition: one share group's view of one topic partition (KIP-932),
after Kafka's C{SharePartition.java}.

A share group reads a partition cooperatively: records are I{acquired} by one
member at a time, for a limited time, and each is acknowledged on its own.
The share partition, kept by the partition's leader, holds::

    start offset (SPSO)                                  end offset (SPEO, exclusive here)
        |                                                      |
        v                                                      v
    ... | ACKED | ACQUIRED(m1,2) | AVAILABLE(1) | ARCHIVED | ... | records never delivered ...
        '------------------- in-flight records ----------------'

  - below the start offset every record is acknowledged or archived (and is
    forgotten);
  - from the end offset on, every record is AVAILABLE with delivery count 0;
  - between them each offset has a state, AVAILABLE, ACQUIRED (by one member,
    under an acquisition lock), ACKNOWLEDGED or ARCHIVED, and a delivery count
    (how often it was acquired).

Transitions (Kafka's C{RecordState}; KIP-932 "In-flight records")::

    AVAILABLE    --acquire-->              ACQUIRED   (delivery count + 1)
    ACQUIRED     --accept (1)-->           ACKNOWLEDGED
    ACQUIRED     --release (2), lock expiry--> AVAILABLE, or ARCHIVED once the
                                           delivery count reached the limit
    ACQUIRED     --reject (3), gap (0)-->  ARCHIVED
    AVAILABLE    --not in the log-->       ARCHIVED   (compacted away: the log read
                                           from the offset returned a later batch)

ACKNOWLEDGED and ARCHIVED are final.  Only the member holding a record may
acknowledge it (else C{INVALID_RECORD_STATE}).  The start offset moves
forward over final records; nothing below it is kept.

Acquisition locks expire after C{group.share.record.lock.duration.ms} on the
reactor's clock (C{callLater}); at most C{group.share.partition.max.record.locks}
records are acquired at once; a record is archived instead of being made
available again once it was delivered C{group.share.delivery.count.limit}
times.

L{SharePartition.snapshot} is what is made durable (kafkatw/broker/share_state.py):
the start offset and the in-flight records' states and delivery counts, an
acquired record written as AVAILABLE (an acquisition lost on failover only
causes a redelivery: KIP-932's guarantee is at-least-once).

Source: KIP-932; Apache Kafka C{core/src/main/java/kafka/server/share/SharePartition.java}.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Iterable, NamedTuple

__all__ = [
    "RecordState",
    "AcknowledgeType",
    "AcquiredRecords",
    "InFlightRecord",
    "SharePartition",
    "SharePartitionSnapshot",
    "StateBatch",
    "InvalidRecordState",
]


class RecordState(enum.IntEnum):
    """A record's state in a share partition (Kafka's C{RecordState} ids, as persisted)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """The acknowledge types of ShareFetch and ShareAcknowledge (KIP-932)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class AcquiredRecords(NamedTuple):
    """A range of acquired offsets with one delivery count (the ShareFetch response's C{AcquiredRecords})."""

    first_offset: int
    last_offset: int
    delivery_count: int


class StateBatch(NamedTuple):
    """A range of in-flight offsets with one state and delivery count (Kafka's C{PersisterStateBatch})."""

    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


class SharePartitionSnapshot(NamedTuple):
    """
    The durable part of a share partition (Kafka's C{ShareSnapshotValue}).

    @ivar state_epoch: bumped by each reset of the start offset (C{--reset-offsets}).
    @ivar start_offset: the share-partition start offset (SPSO); C{-1}: not initialized.
    @ivar state_batches: the in-flight records that are not plain AVAILABLE with
        delivery count 0, in offset order; ACQUIRED ones as AVAILABLE.
    @ivar leader_epoch: the leader epoch of the partition leader that wrote
        it (C{-1}: not written by a leader, as an offsets reset); a share
        coordinator refuses a write of an older leader epoch than the one it
        holds (C{FENCED_LEADER_EPOCH}: the writer was deposed).
    """

    state_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    leader_epoch: int = -1


class InvalidRecordState(Exception):
    """An acknowledgement of a record the member does not hold (C{INVALID_RECORD_STATE})."""


class _Lock:
    """One acquisition lock: the offsets acquired together, and their timer."""

    __slots__ = ("offsets", "timer")

    def __init__(self, offsets: set[int]) -> None:
        self.offsets = offsets
        self.timer: Any = None


class InFlightRecord:
    """One in-flight offset's state, delivery count, and (while ACQUIRED) its member and lock."""

    __slots__ = ("state", "delivery_count", "member_id", "lock")

    def __init__(self, state: RecordState = RecordState.AVAILABLE, delivery_count: int = 0) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id: str | None = None
        self.lock: _Lock | None = None

    def __repr__(self) -> str:
        return f"InFlightRecord({self.state.name}, {self.delivery_count}, {self.member_id!r})"


class SharePartition:
    """
    The share-partition state of one (group, topic, partition), on its leader.

    @param clock: the reactor (C{callLater}, C{seconds}) that times acquisition locks.
    @param start_offset: the initial start offset (SPSO).
    @param record_lock_duration_ms: C{group.share.record.lock.duration.ms}.
    @param delivery_count_limit: C{group.share.delivery.count.limit}.
    @param max_record_locks: C{group.share.partition.max.record.locks}.
    @param on_lock_expired: called with the partition after expired locks made
        records available or archived them (so the change can be made durable).
    @param leader_epoch: the leader epoch of the partition this leader loaded
        it under (written with each snapshot).

    @ivar start_offset: SPSO; every offset below it is acknowledged or archived.
    @ivar end_offset: one past the last in-flight offset; from it on, records
        are AVAILABLE with delivery count 0.
    @ivar in_flight: offset -> L{InFlightRecord}, for offsets in
        [C{start_offset}, C{end_offset}).
    """

    def __init__(self, clock: Any, start_offset: int, record_lock_duration_ms: int = 30000,
                 delivery_count_limit: int = 5, max_record_locks: int = 200,
                 on_lock_expired: Callable[["SharePartition"], Any] | None = None, state_epoch: int = 0,
                 leader_epoch: int = -1) -> None:
        self.clock = clock
        self.leader_epoch = leader_epoch
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.state_epoch = state_epoch
        self.record_lock_duration_ms = record_lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        self.on_lock_expired = on_lock_expired
        self.in_flight: dict[int, InFlightRecord] = {}
        self.acquired_count = 0

    # --- loading and snapshots -----------------------------------------------

    @classmethod
    def from_snapshot(cls, clock: Any, snapshot: SharePartitionSnapshot, **configs: Any) -> "SharePartition":
        """A share partition as C{snapshot} left it (a new leader's load)."""
        partition = cls(clock, snapshot.start_offset, state_epoch=snapshot.state_epoch, **configs)
        for batch in snapshot.state_batches:
            state = RecordState(batch.state)
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            for offset in range(max(batch.first_offset, snapshot.start_offset), batch.last_offset + 1):
                partition.in_flight[offset] = InFlightRecord(state, batch.delivery_count)
                partition.end_offset = max(partition.end_offset, offset + 1)
        partition._fill_and_advance()
        return partition

    def snapshot(self) -> SharePartitionSnapshot:
        """The durable state now (see L{SharePartitionSnapshot})."""
        batches: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            record = self.in_flight[offset]
            state = RecordState.AVAILABLE if record.state == RecordState.ACQUIRED else record.state
            if state == RecordState.AVAILABLE and record.delivery_count == 0:
                continue
            last = batches[-1] if batches else None
            if last is not None and last.last_offset == offset - 1 and last.state == state \
                    and last.delivery_count == record.delivery_count:
                batches[-1] = last._replace(last_offset=offset)
            else:
                batches.append(StateBatch(offset, offset, int(state), record.delivery_count))
        return SharePartitionSnapshot(self.state_epoch, self.start_offset, tuple(batches), self.leader_epoch)

    # --- reading ---------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """The first offset that may be acquired: the first AVAILABLE in-flight one, else the end offset."""
        for offset in range(self.start_offset, self.end_offset):
            if self.in_flight[offset].state == RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Whether another record may be acquired now (fewer than C{max_record_locks} are)."""
        return self.acquired_count < self.max_record_locks

    def state_of(self, offset: int) -> tuple[RecordState, int]:
        """(state, delivery count) of C{offset}; below the start offset final, reported ARCHIVED."""
        if offset < self.start_offset:
            return RecordState.ARCHIVED, 0
        record = self.in_flight.get(offset)
        if record is None:
            return RecordState.AVAILABLE, 0
        return record.state, record.delivery_count

    # --- acquisition -------------------------------------------------------------

    def acquire(self, member_id: str, batches: Iterable[tuple[int, int]], max_records: int,
                skip: Iterable[tuple[int, int]] = (), fetch_offset: int | None = None) -> list[AcquiredRecords]:
        """
        Acquire for C{member_id} the AVAILABLE offsets of the fetched C{batches}
        (each C{(first offset, last offset)}, in log order, as read from the
        log from L{next_fetch_offset}), whole batches at a time while fewer
        than C{max_records} were acquired (a batch is never split for
        C{max_records}, as Kafka's batch-optimized acquire mode), and while
        C{max_record_locks} allows (which may stop in a batch).

        Offsets the log did not return, from C{fetch_offset} up to a batch
        acquired from (before the first batch, between two batches: a log
        compaction removed them), are not in the log: AVAILABLE ones are
        archived, so the start offset passes them (Kafka's C{SharePartition}
        starts a new in-flight batch at the fetched batch's base offset).

        @param skip: ranges (within C{batches}) that are never delivered, such
            as control batches: they are archived as they are passed.
        @param fetch_offset: the offset the log was read from (default
            L{next_fetch_offset}).
        @return: the acquired ranges with their delivery counts, in offset order.
        """
        acquired: list[int] = []
        skipped = [(first, last) for first, last in skip]
        count = 0
        read_to = self.next_fetch_offset() if fetch_offset is None else fetch_offset
        for first, last in batches:
            if count >= max_records or not self.can_acquire():
                break
            first = max(first, self.start_offset)
            self._archive_absent(read_to, first)
            read_to = max(read_to, last + 1)
            for offset in range(first, last + 1):
                if not self.can_acquire():
                    break
                if offset >= self.end_offset:
                    for o in range(self.end_offset, offset + 1):
                        self.in_flight[o] = InFlightRecord()
                    self.end_offset = offset + 1
                record = self.in_flight[offset]
                if record.state != RecordState.AVAILABLE:
                    continue
                if any(a <= offset <= b for a, b in skipped):
                    record.state = RecordState.ARCHIVED
                    continue
                record.state = RecordState.ACQUIRED
                record.delivery_count += 1
                record.member_id = member_id
                self.acquired_count += 1
                acquired.append(offset)
                count += 1
        if not acquired:
            self._advance()
            return []
        lock = _Lock(set(acquired))
        for offset in acquired:
            self.in_flight[offset].lock = lock
        lock.timer = self.clock.callLater(self.record_lock_duration_ms / 1000.0, self._lock_expired, lock)
        self._advance()
        ranges: list[AcquiredRecords] = []
        for offset in acquired:
            count = self.in_flight[offset].delivery_count
            last = ranges[-1] if ranges else None
            if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
                ranges[-1] = last._replace(last_offset=offset)
            else:
                ranges.append(AcquiredRecords(offset, offset, count))
        return ranges

    # --- acknowledgement -----------------------------------------------------

    def acknowledge(self, member_id: str, batches: Iterable[tuple[int, int, list[int]]]) -> None:
        """
        Apply a member's acknowledgement batches, each C{(first offset, last
        offset, acknowledge types)} with one type for the whole range or one per
        offset (KIP-932).  All or nothing: every offset must be ACQUIRED by
        C{member_id} (a gap, type 0, may also name an offset not acquired).

        @raise InvalidRecordState: an offset not acquired by C{member_id}, or a
            malformed batch; nothing is changed then.
        """
        changes: list[tuple[int, AcknowledgeType]] = []
        for first, last, types in batches:
            if last < first or len(types) not in (1, last - first + 1):
                raise InvalidRecordState(f"malformed acknowledgement batch {first}-{last} with {len(types)} types")
            for offset in range(first, last + 1):
                try:
                    ack = AcknowledgeType(types[0] if len(types) == 1 else types[offset - first])
                except ValueError:
                    raise InvalidRecordState(f"unknown acknowledge type for offset {offset}") from None
                record = self.in_flight.get(offset) if offset >= self.start_offset else None
                if record is None or record.state != RecordState.ACQUIRED or record.member_id != member_id:
                    if ack == AcknowledgeType.GAP and (record is None or record.state != RecordState.ACQUIRED):
                        continue  # a gap the member saw in a batch (compaction): nothing to deliver
                    raise InvalidRecordState(f"offset {offset} is not acquired by member {member_id}")
                changes.append((offset, ack))
        for offset, ack in changes:
            record = self.in_flight[offset]
            if ack == AcknowledgeType.ACCEPT:
                self._settle(offset, record, RecordState.ACKNOWLEDGED)
            elif ack == AcknowledgeType.RELEASE:
                self._settle(offset, record, self._released_state(record))
            else:  # REJECT, GAP
                self._settle(offset, record, RecordState.ARCHIVED)
        self._advance()

    def release_member(self, member_id: str) -> bool:
        """
        Release every record C{member_id} holds (its share session closed or it
        left the group), as lock expiry would.

        @return: whether any record was released.
        """
        released = False
        for offset in range(self.start_offset, self.end_offset):
            record = self.in_flight[offset]
            if record.state == RecordState.ACQUIRED and record.member_id == member_id:
                self._settle(offset, record, self._released_state(record))
                released = True
        if released:
            self._advance()
        return released

    def acquired_by(self, member_id: str) -> list[int]:
        """The offsets C{member_id} holds now."""
        return [o for o, r in self.in_flight.items() if r.state == RecordState.ACQUIRED and r.member_id == member_id]

    def reset(self, start_offset: int) -> None:
        """
        Move the start offset to C{start_offset}, forgetting every in-flight
        record (C{--reset-offsets}; the group must have no members); bumps the state epoch.
        """
        for record in self.in_flight.values():
            if record.lock is not None and record.lock.timer is not None and record.lock.timer.active():
                record.lock.timer.cancel()
        self.in_flight.clear()
        self.acquired_count = 0
        self.start_offset = self.end_offset = start_offset
        self.state_epoch += 1

    def move_start_to(self, log_start_offset: int) -> None:
        """Records below the log start offset are gone (retention, DeleteRecords): archive them."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            record = self.in_flight[offset]
            if record.state == RecordState.ACQUIRED:
                self._settle(offset, record, RecordState.ARCHIVED)
            elif record.state == RecordState.AVAILABLE:
                record.state = RecordState.ARCHIVED
        if self.end_offset < log_start_offset:
            for offset in range(self.end_offset, log_start_offset):
                self.in_flight[offset] = InFlightRecord(RecordState.ARCHIVED)
            self.end_offset = log_start_offset
        self._advance()

    def close(self) -> None:
        """Cancel every acquisition lock timer (the partition is unloaded)."""
        for record in self.in_flight.values():
            lock = record.lock
            if lock is not None and lock.timer is not None and lock.timer.active():
                lock.timer.cancel()

    # --- internals -----------------------------------------------------------------

    def _released_state(self, record: InFlightRecord) -> RecordState:
        return RecordState.ARCHIVED if record.delivery_count >= self.delivery_count_limit else RecordState.AVAILABLE

    def _settle(self, offset: int, record: InFlightRecord, state: RecordState) -> None:
        """Leave ACQUIRED for C{state}: drop the member and the offset's part of its lock."""
        if record.state == RecordState.ACQUIRED:
            self.acquired_count -= 1
        record.state = state
        record.member_id = None
        lock, record.lock = record.lock, None
        if lock is not None:
            lock.offsets.discard(offset)
            if not lock.offsets and lock.timer is not None and lock.timer.active():
                lock.timer.cancel()

    def _lock_expired(self, lock: _Lock) -> None:
        lock.timer = None
        for offset in sorted(lock.offsets):
            record = self.in_flight.get(offset)
            if record is not None and record.lock is lock:
                self._settle(offset, record, self._released_state(record))
        lock.offsets.clear()
        self._advance()
        if self.on_lock_expired is not None:
            self.on_lock_expired(self)

    def _archive_absent(self, first: int, end: int) -> None:
        """Offsets [C{first}, C{end}) are not in the log (compacted away): archive the AVAILABLE ones."""
        first = max(first, self.start_offset)
        if first >= end:
            return
        for offset in range(first, end):
            record = self.in_flight.get(offset)
            if record is None:
                self.in_flight[offset] = InFlightRecord(RecordState.ARCHIVED)
            elif record.state == RecordState.AVAILABLE:
                record.state = RecordState.ARCHIVED
        self.end_offset = max(self.end_offset, end)

    def _fill_and_advance(self) -> None:
        for offset in range(self.start_offset, self.end_offset):
            self.in_flight.setdefault(offset, InFlightRecord())
        self._advance()

    def _advance(self) -> None:
        """Move the start offset over final records, forgetting them."""
        offset = self.start_offset
        in_flight = self.in_flight
        while offset < self.end_offset and in_flight[offset].state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            del in_flight[offset]
            offset += 1
        self.start_offset = offset
