"""
Unit tests of L{kafkatw.broker.share_partition.SharePartition} (KIP-932): the
record states, acquisition locks on a L{Clock}, delivery counts, the start
offset, and a hypothesis state machine of members acquiring, accepting,
releasing and rejecting records while locks expire.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.share_partition import (AcknowledgeType, AcquiredRecords, InvalidRecordState, RecordState,
                                             SharePartition, StateBatch)

ACCEPT, RELEASE, REJECT, GAP = (int(AcknowledgeType.ACCEPT), int(AcknowledgeType.RELEASE),
                                int(AcknowledgeType.REJECT), int(AcknowledgeType.GAP))


def batches(first: int, last: int, size: int = 1) -> list[tuple[int, int]]:
    """The log's batches of C{size} records covering [first, last]."""
    return [(o, min(o + size - 1, last)) for o in range(first, last + 1, size)]


class SharePartitionTests(unittest.TestCase):
    def partition(self, **configs: int) -> tuple[Clock, SharePartition]:
        clock = Clock()
        return clock, SharePartition(clock, 0, **configs)

    def test_acquire_accept_moves_the_start_offset(self) -> None:
        _, p = self.partition()
        self.assertEqual(p.acquire("m1", batches(0, 9, 5), 100), [AcquiredRecords(0, 9, 1)])
        self.assertEqual(p.next_fetch_offset(), 10)
        p.acknowledge("m1", [(0, 4, [ACCEPT])])
        self.assertEqual((p.start_offset, p.end_offset), (5, 10))
        self.assertEqual(p.state_of(7), (RecordState.ACQUIRED, 1))

    def test_only_the_holder_acknowledges(self) -> None:
        _, p = self.partition()
        p.acquire("m1", batches(0, 3), 100)
        self.assertRaises(InvalidRecordState, p.acknowledge, "m2", [(0, 0, [ACCEPT])])
        # all or nothing: offset 0 is not accepted because offset 5 is not acquired
        self.assertRaises(InvalidRecordState, p.acknowledge, "m1", [(0, 0, [ACCEPT]), (5, 5, [ACCEPT])])
        self.assertEqual(p.state_of(0), (RecordState.ACQUIRED, 1))

    def test_release_makes_records_available_with_their_delivery_count(self) -> None:
        _, p = self.partition()
        p.acquire("m1", batches(0, 3), 100)
        p.acknowledge("m1", [(0, 3, [RELEASE, ACCEPT, REJECT, RELEASE])])
        self.assertEqual(p.start_offset, 0)
        self.assertEqual(p.next_fetch_offset(), 0)
        self.assertEqual(p.acquire("m2", batches(0, 5), 100),
                         [AcquiredRecords(0, 0, 2), AcquiredRecords(3, 3, 2), AcquiredRecords(4, 5, 1)])

    def test_lock_expiry_releases_on_the_clock(self) -> None:
        clock, p = self.partition(record_lock_duration_ms=30000)
        expired = []
        p.on_lock_expired = expired.append
        p.acquire("m1", batches(0, 1), 100)
        clock.advance(29.999)
        self.assertEqual(p.state_of(0), (RecordState.ACQUIRED, 1))
        clock.advance(0.001)
        self.assertEqual(p.state_of(0), (RecordState.AVAILABLE, 1))
        self.assertEqual(expired, [p])
        self.assertEqual(p.acquire("m2", batches(0, 1), 100), [AcquiredRecords(0, 1, 2)])

    def test_accepting_every_record_cancels_the_lock(self) -> None:
        clock, p = self.partition()
        p.acquire("m1", batches(0, 1), 100)
        p.acknowledge("m1", [(0, 1, [ACCEPT])])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_archived_after_the_delivery_count_limit(self) -> None:
        clock, p = self.partition(delivery_count_limit=3, record_lock_duration_ms=1000)
        for delivery in (1, 2):
            self.assertEqual(p.acquire("m", batches(0, 0), 1), [AcquiredRecords(0, 0, delivery)])
            p.acknowledge("m", [(0, 0, [RELEASE])])
        self.assertEqual(p.acquire("m", batches(0, 0), 1), [AcquiredRecords(0, 0, 3)])
        clock.advance(1)  # the third delivery's lock expires: archived
        self.assertEqual(p.start_offset, 1)
        self.assertEqual(p.acquire("m", batches(0, 0), 1), [])

    def test_max_record_locks(self) -> None:
        _, p = self.partition(max_record_locks=3)
        self.assertEqual(p.acquire("m1", batches(0, 9, 2), 100), [AcquiredRecords(0, 2, 1)])
        self.assertFalse(p.can_acquire())
        self.assertEqual(p.acquire("m2", batches(3, 9, 2), 100), [])
        p.acknowledge("m1", [(0, 0, [ACCEPT])])
        self.assertEqual(p.acquire("m2", batches(3, 9, 2), 100), [AcquiredRecords(3, 3, 1)])

    def test_max_records_keeps_whole_batches(self) -> None:
        _, p = self.partition()
        self.assertEqual(p.acquire("m1", batches(0, 9, 4), 2), [AcquiredRecords(0, 3, 1)])

    def test_skipped_ranges_are_archived(self) -> None:
        _, p = self.partition()
        self.assertEqual(p.acquire("m1", [(0, 2), (3, 3), (4, 5)], 100, skip=[(3, 3)]),
                         [AcquiredRecords(0, 2, 1), AcquiredRecords(4, 5, 1)])
        p.acknowledge("m1", [(0, 2, [ACCEPT])])
        self.assertEqual(p.start_offset, 4)

    def test_gap_archives(self) -> None:
        _, p = self.partition()
        p.acquire("m1", batches(0, 2, 3), 100)
        p.acknowledge("m1", [(0, 2, [ACCEPT, GAP, ACCEPT])])
        self.assertEqual(p.start_offset, 3)

    def test_offsets_compacted_away_are_archived(self) -> None:
        """A log read from offset 10 returns batch 15-19 (10-14 compacted): 10-14 never block the start offset."""
        _, p = self.partition()
        p.reset(10)
        self.assertEqual(p.acquire("m1", [(15, 19)], 500), [AcquiredRecords(15, 19, 1)])
        p.acknowledge("m1", [(15, 19, [ACCEPT])])
        self.assertEqual((p.start_offset, p.next_fetch_offset(), p.in_flight), (20, 20, {}))
        # a gap between two batches, and released records compacted away before their redelivery
        self.assertEqual(p.acquire("m1", [(20, 21), (25, 26)], 500),
                         [AcquiredRecords(20, 21, 1), AcquiredRecords(25, 26, 1)])
        self.assertEqual(p.state_of(22), (RecordState.ARCHIVED, 0))
        p.acknowledge("m1", [(20, 20, [RELEASE]), (21, 21, [ACCEPT]), (25, 26, [ACCEPT])])
        self.assertEqual(p.next_fetch_offset(), 20)
        self.assertEqual(p.acquire("m2", [(27, 28)], 500, fetch_offset=20), [AcquiredRecords(27, 28, 1)])
        p.acknowledge("m2", [(27, 28, [ACCEPT])])
        self.assertEqual((p.start_offset, p.in_flight, p.snapshot().state_batches), (29, {}, ()))

    def test_release_member(self) -> None:
        _, p = self.partition()
        p.acquire("m1", batches(0, 1), 100)
        p.acquire("m2", batches(2, 3), 100)
        self.assertTrue(p.release_member("m1"))
        self.assertEqual(p.acquired_by("m2"), [2, 3])
        self.assertEqual(p.next_fetch_offset(), 0)

    def test_snapshot_round_trip(self) -> None:
        clock, p = self.partition()
        p.acquire("m1", batches(0, 5), 100)
        p.acknowledge("m1", [(1, 1, [ACCEPT]), (2, 2, [REJECT]), (3, 3, [RELEASE])])
        snapshot = p.snapshot()
        self.assertEqual(snapshot.start_offset, 0)
        self.assertEqual(snapshot.state_batches, (
            StateBatch(0, 0, int(RecordState.AVAILABLE), 1), StateBatch(1, 1, int(RecordState.ACKNOWLEDGED), 1),
            StateBatch(2, 2, int(RecordState.ARCHIVED), 1), StateBatch(3, 5, int(RecordState.AVAILABLE), 1)))
        loaded = SharePartition.from_snapshot(clock, snapshot)
        self.assertEqual(loaded.acquire("m2", batches(0, 6), 100),
                         [AcquiredRecords(0, 0, 2), AcquiredRecords(3, 5, 2), AcquiredRecords(6, 6, 1)])

    def test_move_start_to_log_start(self) -> None:
        _, p = self.partition()
        p.acquire("m1", batches(0, 3), 100)
        p.move_start_to(2)
        self.assertEqual(p.start_offset, 2)
        self.assertEqual(p.acquired_count, 2)
        p.move_start_to(10)
        self.assertEqual((p.start_offset, p.end_offset, p.acquired_count), (10, 10, 0))


MEMBERS = ("a", "b", "c")
LOG_END = 30
LIMIT = 3


class SharePartitionMachine(RuleBasedStateMachine):
    """
    Members acquire, accept, release and reject records of a 30-record log
    (batches of 1–4 records) while time passes and locks expire; a model
    holds what was accepted and archived.
    """

    @initialize(batch_size=st.integers(1, 4), max_record_locks=st.integers(1, 12))
    def start(self, batch_size: int, max_record_locks: int) -> None:
        self.clock = Clock()
        self.partition = SharePartition(self.clock, 0, record_lock_duration_ms=10000, delivery_count_limit=LIMIT,
                                        max_record_locks=max_record_locks)
        self.batches = batches(0, LOG_END - 1, batch_size)
        self.accepted: set[int] = set()
        self.holder: dict[int, str] = {}
        self.start_offsets = [0]

    def _log_batches(self) -> list[tuple[int, int]]:
        start = self.partition.next_fetch_offset()
        return [b for b in self.batches if b[1] >= start]

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 10))
    def acquire(self, member: str, max_records: int) -> None:
        for first, last, count in self.partition.acquire(member, self._log_batches(), max_records):
            self.assertTrue(count <= LIMIT)
            for offset in range(first, last + 1):
                assert offset not in self.accepted, f"accepted offset {offset} acquired again"
                assert offset not in self.holder, f"offset {offset} acquired by two members"
                self.holder[offset] = member

    @precondition(lambda self: self.holder)
    @rule(data=st.data(), ack=st.sampled_from([ACCEPT, RELEASE, REJECT]))
    def acknowledge(self, data: st.DataObject, ack: int) -> None:
        offset = data.draw(st.sampled_from(sorted(self.holder)))
        member = self.holder.pop(offset)
        self.partition.acknowledge(member, [(offset, offset, [ack])])
        if ack == ACCEPT:
            self.accepted.add(offset)

    @precondition(lambda self: self.holder)
    @rule(data=st.data())
    def acknowledge_by_another(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(sorted(self.holder)))
        other = next(m for m in MEMBERS if m != self.holder[offset])
        before = self.partition.snapshot()
        try:
            self.partition.acknowledge(other, [(offset, offset, [ACCEPT])])
        except InvalidRecordState:
            pass
        else:
            raise AssertionError("a member acknowledged a record it does not hold")
        assert self.partition.snapshot() == before

    @rule(member=st.sampled_from(MEMBERS))
    def release_member(self, member: str) -> None:
        self.partition.release_member(member)
        self.holder = {o: m for o, m in self.holder.items() if m != member}

    @rule(seconds=st.sampled_from([1.0, 5.0, 10.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.holder = {o: m for o, m in self.holder.items()
                       if self.partition.state_of(o)[0] == RecordState.ACQUIRED}

    def assertTrue(self, value: bool) -> None:
        assert value

    @invariant()
    def holders_agree(self) -> None:
        p = self.partition
        acquired = {o: r.member_id for o, r in p.in_flight.items() if r.state == RecordState.ACQUIRED}
        assert acquired == self.holder, (acquired, self.holder)
        assert p.acquired_count == len(acquired) <= p.max_record_locks

    @invariant()
    def delivery_count_bounded(self) -> None:
        for record in self.partition.in_flight.values():
            assert 0 <= record.delivery_count <= LIMIT

    @invariant()
    def start_offset_moves_forward_over_final_records(self) -> None:
        p = self.partition
        assert p.start_offset >= self.start_offsets[-1]
        self.start_offsets.append(p.start_offset)
        assert set(p.in_flight) == set(range(p.start_offset, p.end_offset))
        if p.end_offset > p.start_offset:
            assert p.in_flight[p.start_offset].state in (RecordState.AVAILABLE, RecordState.ACQUIRED)
        for offset in self.accepted:
            assert offset < p.start_offset or p.in_flight[offset].state == RecordState.ACKNOWLEDGED

    @invariant()
    def snapshot_reloads_the_same_final_states(self) -> None:
        p = self.partition
        loaded = SharePartition.from_snapshot(Clock(), p.snapshot(), delivery_count_limit=LIMIT)
        assert loaded.start_offset == p.start_offset
        for offset in range(p.start_offset, p.end_offset):
            state, count = p.state_of(offset)
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            assert loaded.state_of(offset) == (state, count)


class SharePartitionMachineTests(unittest.TestCase):
    def test_machine(self) -> None:
        """The state machine above, as a trial test case (both runners count it)."""
        run_state_machine_as_test(SharePartitionMachine, settings=settings(
            max_examples=150, stateful_step_count=40, deadline=None))
