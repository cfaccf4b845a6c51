"""
The leader epoch checkpoint's writes (issue 32, restart at scale): an
assignment is fsynced; a truncation is written without C{fsync} (Kafka's
KAFKA-15046); the truncations of a start are not written at all, so a
restart whose partitions come back at the same epoch writes no checkpoint;
nothing is written when the file holds the entries already.  Real files;
C{os.fsync} and C{os.replace} counted.
"""

import os
import shutil
import tempfile

from twisted.trial import unittest

from kafkatw.protocol.batch import build_batch
from kafkatw.storage import files as files_module
from kafkatw.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import LogConfig


class WritesTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kafkatw-test-epoch-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT_FILE)
        self.writes = []  # (path, fsync)
        real = files_module.write_atomically

        def counting(path, data, *args, **kwargs):
            self.writes.append((os.path.basename(path), kwargs.get("fsync", True)))
            return real(path, data, *args, **kwargs)

        self.patch(files_module, "write_atomically", counting)
        from kafkatw.storage import leader_epoch
        self.patch(leader_epoch, "write_atomically", counting)

    def test_assign_fsyncs_truncation_does_not(self):
        cache = LeaderEpochCache(self.path)
        cache.assign(0, 0)
        cache.assign(3, 10)
        self.assertEqual(self.writes, [(LEADER_EPOCH_CHECKPOINT_FILE, True)] * 2)
        cache.truncate_from_end(5)
        cache.truncate_from_start(2)
        self.assertEqual(self.writes[2:], [(LEADER_EPOCH_CHECKPOINT_FILE, False)] * 2)
        self.assertEqual(LeaderEpochCache(self.path).entries, cache.entries)

    def test_nothing_is_written_when_the_file_has_the_entries(self):
        cache = LeaderEpochCache(self.path)
        cache.assign(2, 7)
        again = LeaderEpochCache(self.path)
        again.truncate_from_end(7, write=False)  # a start cutting (2, 7) off a log ending at 7
        self.assertEqual(again.entries, [])
        again.assign(2, 7)  # the leader comes back at the same epoch
        self.assertEqual(len(self.writes), 1)
        self.assertEqual(LeaderEpochCache(self.path).entries, again.entries)

    def test_a_start_truncation_not_written_is_redone_by_the_next_start(self):
        cache = LeaderEpochCache(self.path)
        cache.assign(1, 0)
        cache.assign(4, 9)
        again = LeaderEpochCache(self.path)
        again.truncate_from_end(9, write=False)
        self.assertEqual([tuple(e) for e in LeaderEpochCache(self.path).entries], [(1, 0), (4, 9)])  # not written
        third = LeaderEpochCache(self.path)
        third.truncate_from_end(9, write=False)
        self.assertEqual(third.entries, again.entries)
        third.assign(5, 9)  # the next change writes the whole cache
        self.assertEqual([tuple(e) for e in LeaderEpochCache(self.path).entries], [(1, 0), (5, 9)])

    def test_a_clean_restart_at_the_same_epoch_writes_no_checkpoint(self):
        """A log led at epoch 3 from its end, closed, reopened and led at epoch 3 again: no leader epoch write."""
        directory = os.path.join(self.dir, "t-0")
        log = PartitionLog(directory, "t", 0, LogConfig(), now_ms=lambda: 1_000_000)
        log.maybe_assign_epoch_start_offset(0, 0)
        log.append(build_batch([(None, b"v")], timestamp_ms=1_000_000), 0)
        log.maybe_assign_epoch_start_offset(3, log.log_end_offset)
        log.close()
        before = len([w for w in self.writes if w[0] == LEADER_EPOCH_CHECKPOINT_FILE])
        for clean in (True, False):
            log = PartitionLog(directory, "t", 0, LogConfig(), recovery_point=1, clean_shutdown=clean,
                               now_ms=lambda: 1_000_000)
            self.assertEqual(log.latest_epoch, 0)  # (3, LEO) is cut off in memory
            log.maybe_assign_epoch_start_offset(3, log.log_end_offset)
            self.assertEqual(log.latest_epoch, 3)
            log.close()
        self.assertEqual(len([w for w in self.writes if w[0] == LEADER_EPOCH_CHECKPOINT_FILE]), before)
