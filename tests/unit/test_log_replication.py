"""
Tests for the storage side of replication: L{PartitionLog.append_as_follower},
the log's leader epoch cache, the high watermark and its checkpoint, and the
truncation scenarios of KIP-101 and KIP-279 played on real logs (the broker's
fetcher and OffsetForLeaderEpoch replaced by direct calls).
"""

import os

from kafkatw.errors import CorruptRecordError, OutOfOrderSequenceError
from kafkatw.protocol.batch import build_batch, parse_batch_headers
from kafkatw.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, offset_truncation_state
from kafkatw.storage.log import PartitionLog, UnexpectedAppendOffsetError
from kafkatw.storage.log_manager import HIGH_WATERMARK_CHECKPOINT_FILE, LogManager, read_checkpoint

from .test_storage import Clock, LogTestMixin, TestCase, batch, read_offsets, region_bytes

_ALL = 1 << 30


def log_bytes(log):
    return region_bytes(log.read(log.log_start_offset, _ALL))


def replicate(leader, follower, max_bytes=1 << 20):
    """Fetch from C{leader} at the follower's LEO until caught up; @return: the appends' results."""
    results = []
    for _ in range(10000):  # bounded: a regression that appends nothing fails instead of hanging
        if follower.log_end_offset >= leader.log_end_offset:
            return results
        results.append(follower.append_as_follower(log_bytes_from(leader, follower.log_end_offset, max_bytes)))
    raise AssertionError(f"the follower did not catch up: {follower.log_end_offset} < {leader.log_end_offset}")


def log_bytes_from(log, offset, max_bytes):
    return region_bytes(log.read(offset, max_bytes))


def truncate_by_epoch(follower, leader):
    """
    A follower's truncation on becoming a follower of C{leader}: ask the
    leader for the end of its latest epoch (OffsetForLeaderEpoch), decide
    (L{offset_truncation_state}), truncate, and ask again until done.

    @return: the offsets truncated to, in order.
    """
    steps = []
    for _ in range(100):  # bounded: each round truncates or ends
        leader_epoch, leader_end = leader.end_offset_for_epoch(follower.latest_epoch)
        offset, done = offset_truncation_state(follower.leader_epoch_cache, follower.log_end_offset,
                                               leader_epoch, leader_end, follower.high_watermark)
        follower.truncate_to(offset)
        steps.append(offset)
        if done:
            return steps
    raise AssertionError(f"truncation did not end: {steps}")


def values(log):
    """Every record value, in offset order (uncompressed batches only)."""
    from kafkatw.protocol.records import decode_batches

    data = log_bytes(log)
    return [r.value for b in decode_batches(data) for r in b.records] if data else []


def message(name):
    return build_batch([(b"k", name.encode().ljust(10, b"."))], timestamp_ms=1_000_000)


class FollowerAppendTests(LogTestMixin, TestCase):
    def leader_with_data(self, **config):
        leader = self.make_log(**config)
        leader.maybe_assign_epoch_start_offset(0, 0)
        for i in range(6):
            leader.append(batch(1 + i % 3, size=40), 0)
        leader.maybe_assign_epoch_start_offset(3, leader.log_end_offset)
        for i in range(4):
            leader.append(batch(2, size=40, producer_id=7, producer_epoch=0, base_sequence=2 * i), 3)
        return leader

    def test_follower_log_is_byte_identical(self):
        leader = self.leader_with_data()
        follower = self.make_log()
        results = replicate(leader, follower, max_bytes=200)  # several fetches, whole batches each
        self.assertGreater(len(results), 1)
        self.assertEqual(log_bytes(follower), log_bytes(leader))
        self.assertEqual(follower.log_end_offset, leader.log_end_offset)
        self.assertEqual(follower.leader_epoch_cache.entries, leader.leader_epoch_cache.entries)
        self.assertEqual(follower.leader_epoch_cache.entries, [(0, 0), (3, 12)])
        self.assertEqual(sum(r.record_count for r in results), leader.log_end_offset)
        self.assertEqual(sum(r.batch_count for r in results), 10)
        self.assertEqual(sum(r.size_bytes for r in results), leader.size_bytes)
        self.assertEqual([r.base_offset for r in results[1:]], [r.last_offset + 1 for r in results[:-1]])
        # the follower's segment files hold exactly the leader's bytes
        with open(follower.active_segment.path, "rb") as f, open(leader.active_segment.path, "rb") as g:
            self.assertEqual(f.read(), g.read())

    def test_high_watermark_is_not_moved_by_appends(self):
        leader = self.leader_with_data()
        follower = self.make_log()
        replicate(leader, follower)
        self.assertEqual((leader.high_watermark, follower.high_watermark), (0, 0))
        self.assertTrue(follower.update_high_watermark(5))
        self.assertFalse(follower.update_high_watermark(5))
        self.assertTrue(follower.update_high_watermark(10_000))
        self.assertEqual(follower.high_watermark, follower.log_end_offset)
        self.assertTrue(follower.update_high_watermark(-3))
        self.assertEqual(follower.high_watermark, follower.log_start_offset)

    def test_partial_trailing_batch_is_ignored(self):
        leader = self.leader_with_data()
        follower = self.make_log()
        data = log_bytes(leader)
        sizes = [h.size for h in parse_batch_headers(data)]
        for cut in (sizes[0] + 30, sizes[0] + sizes[1] - 1, sizes[0] + 61):
            follower = self.make_log()
            result = follower.append_as_follower(data[:cut])
            self.assertEqual((result.batch_count, result.size_bytes), (1, sizes[0]))
            self.assertEqual(log_bytes(follower), data[:sizes[0]])
            # the next fetch starts at the follower's LEO and carries on
            follower.append_as_follower(log_bytes_from(leader, follower.log_end_offset, _ALL))
            self.assertEqual(log_bytes(follower), data)

    def test_nothing_whole_appends_nothing(self):
        follower = self.make_log()
        for data in (b"", batch(2)[:40], batch(2)[:-1]):
            result = follower.append_as_follower(data)
            self.assertEqual((result.record_count, result.batch_count, result.base_offset), (0, 0, 0))
        self.assertEqual((follower.log_end_offset, follower.size_bytes), (0, 0))

    def test_crc_failure_writes_nothing(self):
        leader = self.leader_with_data()
        follower = self.make_log()
        data = bytearray(log_bytes(leader))
        data[len(data) - 5] ^= 0x40  # in the last batch: the whole append is refused
        self.assertRaises(CorruptRecordError, follower.append_as_follower, bytes(data))
        self.assertEqual((follower.log_end_offset, follower.size_bytes), (0, 0))
        self.assertEqual(follower.leader_epoch_cache.entries, [])

    def test_gap_or_overlap_is_refused(self):
        leader = self.leader_with_data()
        follower = self.make_log()
        replicate(leader, follower)
        leo = follower.log_end_offset
        for base in (leo + 1, leo - 1, 0):
            with self.assertRaises(UnexpectedAppendOffsetError) as caught:
                follower.append_as_follower(batch(1, base_offset=base, partition_leader_epoch=3))
            self.assertEqual((caught.exception.first_offset, caught.exception.log_end_offset), (base, leo))
            self.assertIn(f"expected {leo}", str(caught.exception))
        # a gap between two batches of one append
        gap = batch(1, base_offset=leo, partition_leader_epoch=3) + batch(1, base_offset=leo + 2)
        self.assertRaises(UnexpectedAppendOffsetError, follower.append_as_follower, gap)
        self.assertEqual(follower.log_end_offset, leo)
        self.assertEqual(log_bytes(follower), log_bytes(leader))
        # the error is Kafka's OFFSET_OUT_OF_RANGE
        self.assertEqual(UnexpectedAppendOffsetError("", 0, 0).error_code.name, "offset_out_of_range")

    def test_producer_state_follows_the_data(self):
        """A follower that becomes leader still rejects duplicates and sequence gaps."""
        leader = self.leader_with_data()
        follower = self.make_log()
        replicate(leader, follower)
        self.assertEqual(follower.producer_state.get(7).batches, leader.producer_state.get(7).batches)
        retry = follower.append(batch(2, size=40, producer_id=7, producer_epoch=0, base_sequence=6), 4)
        self.assertTrue(retry.duplicate)
        self.assertEqual((retry.base_offset, retry.last_offset), (18, 19))
        self.assertRaises(OutOfOrderSequenceError, follower.append,
                          batch(1, producer_id=7, producer_epoch=0, base_sequence=12), 4)
        self.assertEqual(follower.append(batch(1, producer_id=7, producer_epoch=0, base_sequence=8), 4).base_offset,
                         20)

    def test_segments_roll_and_flush_policy_apply(self):
        leader = self.leader_with_data(segment_bytes=400)
        follower = self.make_log(segment_bytes=400, flush_messages=1)
        replicate(leader, follower, max_bytes=150)
        self.assertGreater(len(follower.segments), 2)
        self.assertEqual(follower.recovery_point, follower.log_end_offset)  # flushed after each append
        self.assertEqual(log_bytes(follower), log_bytes(leader))
        self.assertEqual(read_offsets(follower, 0), list(range(20)))

    def test_follower_append_survives_restart(self):
        leader = self.leader_with_data(segment_bytes=400)
        path = self.mktemp()
        follower = self.make_log(path=path, segment_bytes=400)
        replicate(leader, follower)
        entries = follower.leader_epoch_cache.entries
        follower.close()
        again = self.make_log(path=path, clean=True, segment_bytes=400)
        self.assertEqual(log_bytes(again), log_bytes(leader))
        self.assertEqual(again.leader_epoch_cache.entries, entries)
        self.assertEqual(again.producer_state_source, "snapshot")


class LeaderEpochLogTests(LogTestMixin, TestCase):
    def test_leader_append_assigns_new_epochs_only(self):
        log = self.make_log()
        log.append(batch(2), 0)
        log.append(batch(2), 0)
        log.append(batch(1), 2)
        log.append(batch(1), 1)  # an older epoch is written but not assigned
        log.append(batch(1), -1)
        self.assertEqual(log.leader_epoch_cache.entries, [(0, 0), (2, 4)])
        self.assertEqual(log.end_offset_for_epoch(0), (0, 4))
        self.assertEqual(log.end_offset_for_epoch(1), (0, 4))
        self.assertEqual(log.end_offset_for_epoch(2), (2, 7))
        self.assertEqual(log.end_offset_for_epoch(3), (-1, -1))
        self.assertEqual(log.epoch_for_offset(5), 2)
        self.assertEqual(log.latest_epoch, 2)

    def test_duplicate_append_assigns_nothing(self):
        log = self.make_log()
        idem = batch(1, producer_id=1, producer_epoch=0, base_sequence=0)
        log.append(idem, 0)
        self.assertTrue(log.append(idem, 5).duplicate)
        self.assertEqual(log.leader_epoch_cache.entries, [(0, 0)])

    def test_epoch_assigned_at_election_before_any_batch(self):
        log = self.make_log()
        log.append(batch(3), 0)
        self.assertTrue(log.maybe_assign_epoch_start_offset(1, log.log_end_offset))
        self.assertEqual(log.end_offset_for_epoch(0), (0, 3))
        log.append(batch(1), 1)
        self.assertEqual(log.leader_epoch_cache.entries, [(0, 0), (1, 3)])

    def test_truncate_to_truncates_the_cache(self):
        log = self.make_log()
        log.append(batch(2), 0)
        log.append(batch(2), 1)
        log.append(batch(2), 2)
        log.update_high_watermark(6)
        log.truncate_to(4)
        self.assertEqual(log.leader_epoch_cache.entries, [(0, 0), (1, 2)])
        self.assertEqual((log.log_end_offset, log.high_watermark), (4, 4))
        log.truncate_to(3)  # inside the batch 2-3: the whole batch goes
        self.assertEqual(log.leader_epoch_cache.entries, [(0, 0)])
        self.assertEqual(log.log_end_offset, 2)

    def test_truncate_at_the_end_drops_an_epoch_without_data(self):
        """A leader that assigned an epoch but wrote nothing, turned follower (Kafka's truncateTo)."""
        log = self.make_log()
        log.append(batch(2), 0)
        log.maybe_assign_epoch_start_offset(1, 2)
        log.truncate_to(10)
        self.assertEqual(log.leader_epoch_cache.entries, [(0, 0)])
        self.assertEqual(log.log_end_offset, 2)

    def test_truncate_fully_and_start_at(self):
        log = self.make_log()
        log.append(batch(3, producer_id=4, producer_epoch=0, base_sequence=0), 0)
        log.update_high_watermark(3)
        log.truncate_fully_and_start_at(50)
        self.assertEqual((log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point),
                         (50, 50, 50, 50))
        self.assertEqual(log.leader_epoch_cache.entries, [])
        self.assertEqual(len(log.producer_state), 0)
        self.assertEqual([s.base_offset for s in log.segments], [50])
        follower_batch = batch(2, base_offset=50, partition_leader_epoch=6)
        self.assertEqual(log.append_as_follower(follower_batch).record_count, 2)
        self.assertEqual(log.leader_epoch_cache.entries, [(6, 50)])
        self.assertEqual(read_offsets(log, 50), [50, 51])
        # truncating to or below the first segment's base empties the log too
        log.truncate_to(50)
        self.assertEqual((log.log_start_offset, log.log_end_offset), (50, 50))
        self.assertEqual(log.leader_epoch_cache.entries, [])
        path = log.directory
        log.close()
        again = self.make_log(path=path, clean=True)
        self.assertEqual((again.log_start_offset, again.log_end_offset, again.leader_epoch_cache.entries),
                         (50, 50, []))

    def test_retention_truncates_the_cache_from_the_start(self):
        log = self.make_log(segment_bytes=200, retention_ms=10)
        for epoch in range(6):
            log.append(batch(1, size=60, ts=1000 + epoch), epoch // 2)
        self.assertEqual(log.leader_epoch_cache.entries, [(0, 0), (1, 2), (2, 4)])
        log.update_high_watermark(log.log_end_offset)  # retention deletes only below it
        self.assertGreater(log.apply_retention(1_000_000), 0)
        start = log.log_start_offset
        self.assertGreater(start, 0)
        self.assertEqual(log.leader_epoch_cache.earliest_entry.start_offset, start)
        self.assertEqual(log.leader_epoch_cache.earliest_entry.epoch, log.epoch_for_offset(start))

    def test_restart_keeps_the_epoch_cache(self):
        path = self.mktemp()
        log = self.make_log(path=path)
        log.append(batch(2), 0)
        log.append(batch(2), 3)
        log.maybe_assign_epoch_start_offset(5, 4)
        log.close()
        with open(os.path.join(path, LEADER_EPOCH_CHECKPOINT_FILE)) as f:
            self.assertEqual(f.read(), "0\n3\n0 0\n3 2\n5 4\n")
        again = self.make_log(path=path, clean=True)
        # as Kafka's LogLoader: entries at or past the LEO (an epoch with no
        # batch yet) are dropped on load; the broker is no longer its leader
        self.assertEqual(again.leader_epoch_cache.entries, [(0, 0), (3, 2)])

    def test_missing_or_corrupt_checkpoint_is_rebuilt_from_the_log(self):
        path = self.mktemp()
        log = self.make_log(path=path, segment_bytes=150)
        for epoch in (0, 0, 1, 1, 4, 4):
            log.append(batch(1, size=40), epoch)
        self.assertGreater(len(log.segments), 1)
        log.close()
        checkpoint = os.path.join(path, LEADER_EPOCH_CHECKPOINT_FILE)
        for damage in ("remove", "", "0\n5\n0 0\n"):
            if damage == "remove":
                os.unlink(checkpoint)
            else:
                with open(checkpoint, "w") as f:
                    f.write(damage)
            again = self.make_log(path=path, clean=True, segment_bytes=150)
            self.assertEqual(again.leader_epoch_cache.entries, [(0, 0), (1, 2), (4, 4)], repr(damage))
            with open(checkpoint) as f:
                self.assertEqual(f.read(), "0\n3\n0 0\n1 2\n4 4\n")
            again.close()

    def test_unclean_restart_completes_and_trims_the_cache(self):
        """
        The checkpoint can lag the log (an epoch written by an older broker)
        or lead it (an assignment whose batch was lost in the crash): after
        an unclean shutdown both are repaired from the recovered segments.
        """
        path = self.mktemp()
        log = self.make_log(path=path)
        log.append(batch(2), 0)
        log.append(batch(2), 2)
        log.flush()
        for s in log.segments:
            s.close()
        with open(os.path.join(path, LEADER_EPOCH_CHECKPOINT_FILE), "w") as f:
            f.write("0\n2\n0 0\n7 4\n")  # lacks epoch 2, has epoch 7 beyond the log's end
        again = self.make_log(path=path, clean=False)
        self.assertEqual(again.log_end_offset, 4)
        self.assertEqual(again.leader_epoch_cache.entries, [(0, 0), (2, 2)])


class ScenarioTests(LogTestMixin, TestCase):
    """
    The truncation scenarios of KIP-101 ("Alter the Replication Protocol to
    use Leader Epoch rather than High Watermark for Truncation") and KIP-279
    ("Fix log divergence between leader and follower after fast leader fail
    over"), on real logs.  m1, m2 ... are one-record batches.
    """

    def broker(self, name):
        log = self.make_log(path=self.mktemp())
        log.name = name
        return log

    def become_leader(self, log, epoch):
        log.maybe_assign_epoch_start_offset(epoch, log.log_end_offset)

    def write(self, log, epoch, *names):
        for name in names:
            log.append(message(name), epoch)

    def restart(self, log):
        path = log.directory
        high_watermark = log.high_watermark
        log.close()
        again = self.make_log(path=path, clean=True)
        again.update_high_watermark(high_watermark)  # as the log manager's checkpoint restores it
        return again

    def assertPrefix(self, follower, leader):
        data = log_bytes(follower)
        self.assertEqual(data, log_bytes(leader)[:len(data)])

    def test_kip101_scenario_1_high_watermark_truncation_then_immediate_election(self):
        """
        A leads, B follows; both have m1 and m2, but B's high watermark is
        still 1 (the fetch that would tell it 2 has not happened).  B
        restarts.  Truncating to its high watermark would drop m2, and with A
        dying next and B elected, m2 (acknowledged) would be lost.  By epoch,
        B asks A for the end of its epoch 0: 2, and keeps m2.
        """
        a, b = self.broker("A"), self.broker("B")
        self.become_leader(a, 0)
        self.write(a, 0, "m1", "m2")
        replicate(a, b)
        a.update_high_watermark(2)
        b.update_high_watermark(1)
        b = self.restart(b)
        self.assertEqual(b.high_watermark, 1)
        # pre-KIP-101: truncate to the high watermark (what leader_end -1 means)
        self.assertEqual(offset_truncation_state(b.leader_epoch_cache, 2, -1, -1, b.high_watermark), (1, True))
        # KIP-101: by epoch
        self.assertEqual(truncate_by_epoch(b, a), [2])
        self.assertEqual(values(b), [b"m1........", b"m2........"])
        # A dies; B is elected and writes on
        self.become_leader(b, 1)
        self.write(b, 1, "m3")
        self.assertEqual(values(b), [b"m1........", b"m2........", b"m3........"])
        self.assertEqual(b.leader_epoch_cache.entries, [(0, 0), (1, 2)])

    def test_kip101_scenario_2_replica_divergence_on_restart(self):
        """
        A leads with m1, m2; B has m1 only.  Both crash; B comes back first,
        is elected (epoch 1) and writes m3 at offset 1.  A comes back as
        follower: by epoch it learns that its epoch 0 ended at 1 on B, drops
        m2, and copies m3: no divergence at offset 1.
        """
        a, b = self.broker("A"), self.broker("B")
        self.become_leader(a, 0)
        self.write(a, 0, "m1", "m2")
        b.append_as_follower(log_bytes_from(a, 0, len(message("m1"))))
        self.assertEqual(b.log_end_offset, 1)
        a.update_high_watermark(2)  # the high watermark A had: it would keep m2 without epochs
        a, b = self.restart(a), self.restart(b)
        self.become_leader(b, 1)
        self.write(b, 1, "m3")
        self.assertEqual(b.end_offset_for_epoch(0), (0, 1))
        self.assertEqual(truncate_by_epoch(a, b), [1])
        replicate(b, a)
        self.assertEqual(log_bytes(a), log_bytes(b))
        self.assertEqual(values(a), [b"m1........", b"m3........"])
        self.assertEqual(a.leader_epoch_cache.entries, b.leader_epoch_cache.entries)
        self.assertEqual(a.leader_epoch_cache.entries, [(0, 0), (1, 1)])

    def test_kip279_fast_leader_failover(self):
        """
        KIP-279's case: A leads epoch 1 with m1, m2; B has m1.  A dies; B
        leads epoch 2 and writes m3 at 1, then dies before anyone copies it.
        A returns, leads epoch 3 and writes m4 at 2.  B follows A and asks for
        the end of its epoch 2: A never had epoch 2 and answers (1, 2), the
        end of its epoch 1.  KIP-101 alone truncates B at 2 and keeps m3:
        offset 1 differs.  With the epoch in the answer B truncates at the end
        of its own epoch 1, offset 1, and the logs agree.
        """
        a, b = self.broker("A"), self.broker("B")
        self.become_leader(a, 1)
        self.write(a, 1, "m1", "m2")
        b.append_as_follower(log_bytes_from(a, 0, len(message("m1"))))
        self.become_leader(b, 2)
        self.write(b, 2, "m3")
        self.become_leader(a, 3)
        self.write(a, 3, "m4")
        self.assertEqual(a.end_offset_for_epoch(b.latest_epoch), (1, 2))
        # KIP-101 without the epoch: the leader's offset alone keeps the divergent m3
        self.assertEqual(offset_truncation_state(b.leader_epoch_cache, b.log_end_offset, -1, 2, 0), (2, True))
        self.assertEqual(truncate_by_epoch(b, a), [1])
        replicate(a, b)
        self.assertEqual(log_bytes(b), log_bytes(a))
        self.assertEqual(values(b), [b"m1........", b"m2........", b"m4........"])
        self.assertEqual(b.leader_epoch_cache.entries, [(1, 0), (3, 2)])

    def test_kip279_follower_missing_the_leaders_epoch_asks_again(self):
        """
        A three-replica history where the answer names an epoch the follower
        never saw: the follower truncates to the end of its own older epoch
        and asks again (KIP-279's loop).  A leads epoch 0 (offsets 0-4, copied
        by B and C); C leads epoch 1 (5-7, not copied by B); B leads epoch 2
        (5-6, copied by nobody); C leads epoch 3 (8-9).  B follows C.
        """
        a, b, c = self.broker("A"), self.broker("B"), self.broker("C")
        self.become_leader(a, 0)
        self.write(a, 0, "a0", "a1", "a2", "a3", "a4")
        replicate(a, b)
        replicate(a, c)
        self.become_leader(c, 1)
        self.write(c, 1, "c5", "c6", "c7")
        self.become_leader(b, 2)
        self.write(b, 2, "b5", "b6")
        self.become_leader(c, 3)
        self.write(c, 3, "c8", "c9")
        self.assertEqual(c.end_offset_for_epoch(2), (1, 8))
        self.assertEqual(truncate_by_epoch(b, c), [5, 5])  # to the end of B's epoch 0, then confirmed
        self.assertPrefix(b, c)
        replicate(c, b)
        self.assertEqual(log_bytes(b), log_bytes(c))
        self.assertEqual(b.leader_epoch_cache.entries, [(0, 0), (1, 5), (3, 8)])

    def test_follower_ahead_in_the_same_epoch_truncates_to_the_leaders_end(self):
        """
        A leads epoch 0 and has m1-m3 copied by B up to m3, then B is elected
        (epoch 1) while A had written m4 that nobody copied: A, returning as
        follower, drops m4 (its divergent, unacknowledged tail) and only it.
        """
        a, b = self.broker("A"), self.broker("B")
        self.become_leader(a, 0)
        self.write(a, 0, "m1", "m2", "m3")
        replicate(a, b)
        self.write(a, 0, "m4")
        self.become_leader(b, 1)
        self.write(b, 1, "m5", "m6")
        self.assertEqual(truncate_by_epoch(a, b), [3])
        replicate(b, a)
        self.assertEqual(log_bytes(a), log_bytes(b))
        self.assertEqual(values(a), [b"m%d........" % i for i in (1, 2, 3, 5, 6)])

    def test_empty_follower_of_a_log_without_the_old_data(self):
        """A new replica (no epochs) of a leader whose log starts later truncates fully and starts there."""
        leader = self.broker("L")
        leader.truncate_fully_and_start_at(100)
        self.become_leader(leader, 4)
        self.write(leader, 4, "x", "y")
        follower = self.broker("F")
        self.assertEqual(truncate_by_epoch(follower, leader), [0])  # nothing to truncate
        # its fetch at 0 is below the leader's log start: it restarts there
        self.assertGreater(leader.log_start_offset, follower.log_end_offset)
        follower.truncate_fully_and_start_at(leader.log_start_offset)
        replicate(leader, follower)
        self.assertEqual(log_bytes(follower), log_bytes(leader))
        self.assertEqual(follower.leader_epoch_cache.entries, [(4, 100)])


class HighWatermarkCheckpointTests(TestCase):
    def setUp(self):
        self.clock = Clock()
        self.dirs = [self.mktemp(), self.mktemp()]

    def manager(self):
        m = LogManager(self.dirs, {"segment.bytes": "1000"}, self.clock)
        m.load()
        return m

    def fill(self, m):
        logs = [m.get_or_create("t", p, {}) for p in range(3)]
        for log in logs:
            for _ in range(4):
                log.append(batch(2), 0)
        return logs

    def test_round_trip(self):
        m = self.manager()
        logs = self.fill(m)
        for p, log in enumerate(logs):
            log.update_high_watermark(2 * p + 1)
        m.checkpoint_high_watermarks()
        written = {}
        for d in self.dirs:
            written.update(read_checkpoint(os.path.join(d, HIGH_WATERMARK_CHECKPOINT_FILE)))
        self.assertEqual(written, {("t", 0): 1, ("t", 1): 3, ("t", 2): 5})
        logs[0].update_high_watermark(7)
        m.close()
        m2 = self.manager()
        self.assertEqual([m2.get("t", p).high_watermark for p in range(3)], [7, 3, 5])
        m2.close()

    def test_clamped_to_the_log_end_offset(self):
        m = self.manager()
        log = self.fill(m)[0]
        m.close()
        directory = [d for d in self.dirs if os.path.isdir(os.path.join(d, "t-0"))][0]
        path = os.path.join(directory, HIGH_WATERMARK_CHECKPOINT_FILE)
        with open(path, "w") as f:
            f.write("0\n1\nt 0 999\n")
        m2 = self.manager()
        self.assertEqual(m2.get("t", 0).high_watermark, log.log_end_offset)
        m2.close()

    def test_log_dir_from_before_replication_starts_at_the_log_end_offset(self):
        m = self.manager()
        self.fill(m)
        m.close()
        for d in self.dirs:
            os.unlink(os.path.join(d, HIGH_WATERMARK_CHECKPOINT_FILE))
        m2 = self.manager()
        self.assertEqual({log.high_watermark for log in m2.all_logs()}, {8})
        m2.close()

    def test_log_missing_from_the_checkpoint_starts_at_its_log_start_offset(self):
        m = self.manager()
        self.fill(m)
        m.checkpoint_high_watermarks()  # every entry 0: nothing committed yet
        for log in m.all_logs():
            log.update_high_watermark(8)
        new = m.get_or_create("u", 0, {})
        new.truncate_fully_and_start_at(10)
        new.append(batch(3), 0)
        new.update_high_watermark(13)
        # a crash: no close, the checkpoint written before "u" existed stays
        for log in m.all_logs():
            for s in log.segments:
                s.close()
        m2 = self.manager()
        u = m2.get("u", 0)
        self.assertEqual((u.log_start_offset, u.log_end_offset, u.high_watermark), (10, 13, 10))
        self.assertEqual({m2.get("t", p).high_watermark for p in range(3)}, {0})
        m2.close()

    def test_log_opened_alone_starts_at_its_log_end_offset(self):
        path = self.mktemp()
        log = PartitionLog(path, "t", 0, LogConfigDefault())
        log.append(batch(2), 0)
        log.close()
        again = PartitionLog(path, "t", 0, LogConfigDefault(), clean_shutdown=True)
        self.assertEqual(again.high_watermark, 2)
        again.close()


def LogConfigDefault():
    from kafkatw.storage.log_config import LogConfig

    return LogConfig()
