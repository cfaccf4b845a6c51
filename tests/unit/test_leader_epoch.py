"""
Tests for L{kafkatw.storage.leader_epoch}: the C{leader-epoch-checkpoint}
format, Kafka's C{LeaderEpochFileCache} rules (assign, endOffsetFor,
truncation) and the follower's truncation decision (KIP-101, KIP-279).
The expected values follow Kafka's own C{LeaderEpochFileCacheTest} cases.
"""

import os
import shutil
import tempfile

from twisted.trial import unittest

from kafkatw.errors import KafkaStorageError
from kafkatw.storage.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    offset_truncation_state,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


class CountingCache(LeaderEpochCache):
    """Counts checkpoint writes."""

    writes = 0

    def _write(self, *args, **kwargs):
        self.writes += 1
        super()._write(*args, **kwargs)


def cache_of(*entries):
    cache = LeaderEpochCache(None)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


class CheckpointFileTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kafkatw-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT_FILE)

    def write(self, text):
        with open(self.path, "w") as f:
            f.write(text)

    def read(self):
        with open(self.path) as f:
            return f.read()

    def test_round_trip_in_kafka_format(self):
        cache = LeaderEpochCache(self.path)
        self.assertTrue(cache.needs_rebuild)  # no file yet
        cache.assign(0, 0)
        cache.assign(2, 3)
        cache.assign(5, 7)
        self.assertEqual(self.read(), "0\n3\n0 0\n2 3\n5 7\n")
        self.assertFalse(os.path.exists(self.path + ".tmp"))
        again = LeaderEpochCache(self.path)
        self.assertFalse(again.needs_rebuild)
        self.assertEqual(again.entries, [EpochEntry(0, 0), EpochEntry(2, 3), EpochEntry(5, 7)])

    def test_reads_kafka_written_file(self):
        """Kafka's reader splits on any whitespace; so does ours."""
        self.write("0\n2\n0  1\n1\t2\n")
        self.assertEqual(LeaderEpochCache(self.path).entries, [(0, 1), (1, 2)])

    def test_empty_cache_is_a_valid_file(self):
        cache = LeaderEpochCache(self.path)
        self.assertTrue(cache.assign_all([]) is False)
        self.assertEqual(self.read(), "0\n0\n")
        again = LeaderEpochCache(self.path)
        self.assertFalse(again.needs_rebuild)
        self.assertEqual(again.entries, [])

    def test_missing_empty_or_malformed_file_needs_rebuild(self):
        for text in ["", "1\n1\n0 0\n", "0\n2\n0 0\n", "0\n1\n0 0\n1 5\n", "0\n1\nzero 0\n", "0\n1\n0\n",
                     "0\n2\n3 10\n2 20\n", "0\n2\n2 10\n3 10\n", "0\n1\n-1 0\n", "0\nx\n", "0\n", "\xff\n"]:
            self.write(text)
            cache = LeaderEpochCache(self.path)
            self.assertTrue(cache.needs_rebuild, repr(text))
            self.assertEqual(cache.entries, [], repr(text))
        os.unlink(self.path)
        self.assertTrue(LeaderEpochCache(self.path).needs_rebuild)

    def test_rebuild_writes_the_file(self):
        self.write("garbage")
        cache = LeaderEpochCache(self.path)
        cache.assign_all([(1, 0), (4, 10)])
        self.assertFalse(cache.needs_rebuild)
        self.assertEqual(self.read(), "0\n2\n1 0\n4 10\n")

    def test_written_only_when_changed(self):
        cache = CountingCache(self.path)
        cache.assign(2, 6)
        cache.assign(2, 7)  # same epoch, later offset: nothing changes
        cache.truncate_from_end(100)
        cache.truncate_from_start(1)
        cache.truncate_from_start(6)
        self.assertEqual(cache.writes, 1)
        cache.assign_all([(2, 9), (3, 10), (4, 12)])
        self.assertEqual(cache.writes, 2)
        self.assertEqual(LeaderEpochCache(self.path).entries, [(2, 6), (3, 10), (4, 12)])

    def test_truncations_and_clear_are_persisted(self):
        cache = LeaderEpochCache(self.path)
        cache.assign_all([(2, 6), (3, 8), (4, 11)])
        cache.truncate_from_end(11)
        cache.truncate_from_start(8)
        self.assertEqual(LeaderEpochCache(self.path).entries, [(3, 8)])
        cache.clear()
        self.assertEqual(self.read(), "0\n0\n")

    def test_write_failure_is_a_storage_error(self):
        cache = LeaderEpochCache(os.path.join(self.dir, "gone", LEADER_EPOCH_CHECKPOINT_FILE))
        self.assertRaises(KafkaStorageError, cache.assign, 0, 0)


class AssignTests(unittest.TestCase):
    def test_first_assignment(self):
        cache = cache_of((2, 10))
        self.assertEqual(cache.latest_epoch, 2)
        self.assertEqual(cache.entries, [(2, 10)])
        self.assertEqual(cache.end_offset_for(2, 11), (2, 11))

    def test_empty_cache(self):
        cache = LeaderEpochCache(None)
        self.assertEqual(cache.latest_epoch, -1)
        self.assertIsNone(cache.earliest_entry)
        self.assertIsNone(cache.latest_entry)
        self.assertEqual(len(cache), 0)

    def test_epoch_start_is_never_moved_later(self):
        cache = cache_of((2, 9))
        self.assertFalse(cache.assign(2, 10))
        self.assertEqual(cache.entries, [(2, 9)])

    def test_new_epoch_at_the_same_offset_replaces_the_empty_one(self):
        cache = cache_of((2, 9), (3, 9))
        self.assertEqual(cache.entries, [(3, 9)])

    def test_same_epoch_at_an_earlier_offset_truncates(self):
        cache = cache_of((5, 11), (6, 12), (7, 13))
        self.assertTrue(cache.assign(7, 12))
        self.assertEqual(cache.entries, [(5, 11), (7, 12)])
        self.assertEqual(cache.end_offset_for(5, 0), (5, 12))
        self.assertEqual(cache.end_offset_for(6, 0), (5, 12))

    def test_newer_epoch_at_an_earlier_offset_removes_the_conflicting_entries(self):
        cache = cache_of((2, 6), (3, 5))
        self.assertEqual(cache.entries, [(3, 5)])
        cache = cache_of((1, 0), (2, 6), (3, 8), (4, 7))
        self.assertEqual(cache.entries, [(1, 0), (2, 6), (4, 7)])

    def test_older_epoch_removes_the_later_epochs(self):
        """Kafka's rule: the latest assignment wins (both columns stay ascending)."""
        cache = cache_of((1, 5), (2, 6))
        self.assertTrue(cache.assign(1, 7))
        self.assertEqual(cache.latest_epoch, 1)
        self.assertEqual(cache.entries, [(1, 7)])
        self.assertEqual(cache.end_offset_for(1, 8), (1, 8))
        self.assertEqual(cache.end_offset_for(2, 8), UNDEFINED)

    def test_many_leader_changes(self):
        cache = LeaderEpochCache(None)
        leo = 0
        for epoch in range(5):
            cache.assign(epoch, leo)
            for _ in range(3):
                cache.assign(epoch, leo)  # every batch of the epoch
                leo += 1
        self.assertEqual(cache.entries, [(0, 0), (1, 3), (2, 6), (3, 9), (4, 12)])
        self.assertEqual(cache.end_offset_for(2, leo), (2, 9))
        self.assertEqual(cache.end_offset_for(4, leo), (4, 15))

    def test_invalid_entries_are_refused(self):
        cache = LeaderEpochCache(None)
        self.assertRaises(ValueError, cache.assign, -1, 0)
        self.assertRaises(ValueError, cache.assign, 0, -1)


class EndOffsetForTests(unittest.TestCase):
    """Kafka's C{endOffsetFor}, case by case."""

    def test_latest_epoch_ends_at_the_log_end_offset(self):
        cache = cache_of((2, 11), (2, 12))
        self.assertEqual(cache.end_offset_for(2, 14), (2, 14))

    def test_undefined_epoch_requested(self):
        self.assertEqual(cache_of((2, 11), (3, 12)).end_offset_for(UNDEFINED_EPOCH, 0), UNDEFINED)
        self.assertEqual(LeaderEpochCache(None).end_offset_for(UNDEFINED_EPOCH, 73), UNDEFINED)

    def test_empty_cache(self):
        self.assertEqual(LeaderEpochCache(None).end_offset_for(0, 0), UNDEFINED)
        self.assertEqual(LeaderEpochCache(None).end_offset_for(7, 0), UNDEFINED)

    def test_epoch_newer_than_every_entry(self):
        self.assertEqual(cache_of((2, 100)).end_offset_for(3, 100), UNDEFINED)

    def test_epoch_older_than_every_entry(self):
        """The requested epoch itself and the first entry's start (data already gone)."""
        cache = cache_of((5, 11), (6, 12), (7, 13))
        self.assertEqual(cache.end_offset_for(4, 0), (4, 11))

    def test_earlier_epoch_ends_where_the_next_starts(self):
        cache = cache_of((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
        self.assertEqual(cache.end_offset_for(2, 17), (2, 15))
        self.assertEqual(cache.end_offset_for(1, 17), (1, 13))

    def test_unknown_epoch_between_entries_answers_the_largest_below(self):
        """KIP-279: the answer names the epoch it is the end of."""
        cache = cache_of((0, 10), (2, 13), (4, 17))
        self.assertEqual(cache.end_offset_for(1, 0), (0, 13))
        self.assertEqual(cache.end_offset_for(2, 0), (2, 17))
        self.assertEqual(cache.end_offset_for(3, 0), (2, 17))
        self.assertEqual(cache.end_offset_for(4, 20), (4, 20))

    def test_epochs_not_starting_at_zero(self):
        cache = cache_of((2, 6))
        self.assertEqual(cache.end_offset_for(2, 7), (2, 7))
        self.assertEqual(cache.entries, [(2, 6)])

    def test_epoch_for_offset(self):
        cache = cache_of((0, 10), (1, 20), (5, 30))
        self.assertEqual(cache.epoch_for_offset(25), 1)
        self.assertEqual(cache.epoch_for_offset(20), 1)
        self.assertEqual(cache.epoch_for_offset(30), 5)
        self.assertEqual(cache.epoch_for_offset(50), 5)
        self.assertEqual(cache.epoch_for_offset(5), UNDEFINED_EPOCH)
        self.assertEqual(LeaderEpochCache(None).epoch_for_offset(0), UNDEFINED_EPOCH)


class TruncationTests(unittest.TestCase):
    def cache(self):
        return cache_of((2, 6), (3, 8), (4, 11))

    def test_truncate_from_end_on_an_epoch_boundary(self):
        cache = self.cache()
        self.assertTrue(cache.truncate_from_end(8))
        self.assertEqual(cache.entries, [(2, 6)])

    def test_truncate_from_end_between_boundaries(self):
        cache = self.cache()
        cache.truncate_from_end(9)
        self.assertEqual(cache.latest_epoch, 3)
        self.assertEqual(cache.entries, [(2, 6), (3, 8)])

    def test_truncate_from_end_past_the_end_or_undefined(self):
        cache = self.cache()
        self.assertFalse(cache.truncate_from_end(12))
        self.assertFalse(cache.truncate_from_end(UNDEFINED_EPOCH_OFFSET))
        self.assertEqual(len(cache), 3)
        self.assertFalse(LeaderEpochCache(None).truncate_from_end(7))

    def test_truncate_from_start_on_a_boundary(self):
        cache = self.cache()
        cache.truncate_from_start(8)
        self.assertEqual(cache.entries, [(3, 8), (4, 11)])

    def test_truncate_from_start_between_boundaries_moves_the_entry_up(self):
        cache = self.cache()
        self.assertTrue(cache.truncate_from_start(9))
        self.assertEqual(cache.entries, [(3, 9), (4, 11)])
        cache = cache_of((0, 0), (1, 7), (2, 10))
        cache.truncate_from_start(5)
        self.assertEqual(cache.entries, [(0, 5), (1, 7), (2, 10)])

    def test_truncate_from_start_before_or_at_the_first_entry(self):
        for offset in (1, 6, UNDEFINED_EPOCH_OFFSET):
            cache = self.cache()
            self.assertFalse(cache.truncate_from_start(offset))
            self.assertEqual(cache.entries, [(2, 6), (3, 8), (4, 11)])
        self.assertFalse(LeaderEpochCache(None).truncate_from_start(7))

    def test_truncate_from_start_keeps_the_latest_epoch(self):
        cache = self.cache()
        cache.truncate_from_start(11)
        self.assertEqual(cache.entries, [(4, 11)])
        cache = self.cache()
        cache.truncate_from_start(15)
        self.assertEqual(cache.entries, [(4, 15)])
        self.assertEqual(cache.earliest_entry, (4, 15))

    def test_clear(self):
        cache = self.cache()
        cache.clear()
        self.assertEqual(cache.entries, [])
        self.assertEqual(cache.latest_epoch, UNDEFINED_EPOCH)


class OffsetTruncationStateTests(unittest.TestCase):
    """Kafka's C{AbstractFetcherThread.getOffsetTruncationState}, each branch."""

    def test_leader_knows_no_offset_truncates_to_the_fetch_offset(self):
        follower = cache_of((0, 0))
        self.assertEqual(offset_truncation_state(follower, 10, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, 4), (4, True))

    def test_answer_without_epoch_truncates_to_the_leader_offset(self):
        follower = cache_of((0, 0))
        self.assertEqual(offset_truncation_state(follower, 10, UNDEFINED_EPOCH, 7, 4), (7, True))
        self.assertEqual(offset_truncation_state(follower, 5, UNDEFINED_EPOCH, 7, 4), (5, True))

    def test_same_epoch_truncates_to_the_smaller_end(self):
        follower = cache_of((0, 0), (1, 5), (3, 9))
        # the leader's epoch 1 ends at 7, the follower's at 9
        self.assertEqual(offset_truncation_state(follower, 12, 1, 7, 0), (7, True))
        # the leader's epoch 1 ends at 11, the follower's at 9
        self.assertEqual(offset_truncation_state(follower, 12, 1, 11, 0), (9, True))
        # the follower's latest epoch: its end is its LEO
        self.assertEqual(offset_truncation_state(follower, 12, 3, 20, 0), (12, True))

    def test_epoch_unknown_to_the_follower_truncates_and_asks_again(self):
        follower = cache_of((0, 0), (2, 5))
        self.assertEqual(offset_truncation_state(follower, 7, 1, 8, 0), (5, False))

    def test_follower_has_no_epoch_that_old(self):
        # its end of epoch 2 is the start of its first epoch (endOffsetFor's rule)
        follower = cache_of((4, 10))
        self.assertEqual(offset_truncation_state(follower, 15, 2, 12, 0), (10, True))
        # no epochs at all (a log from before epochs): the leader's offset
        self.assertEqual(offset_truncation_state(LeaderEpochCache(None), 15, 2, 12, 0), (12, True))
        self.assertEqual(offset_truncation_state(LeaderEpochCache(None), 11, 2, 12, 0), (11, True))
