"""
The leader epoch checkpoint's writes (issue 32, restart and failover at
scale): an assignment is written at once and fsynced before the log's
recovery point passes it (the log's flush syncs it first); a truncation is
written without C{fsync} (Kafka's KAFKA-15046); the truncations of a start
are not written at all, so a restart whose partitions come back at the same
epoch writes no checkpoint; nothing is written when the file holds the
entries already.  A crash of the machine at any point leaves a file the next
start completes from the log: every batch's epoch is known again
(L{CrashTests}).  Real files; C{os.fsync} and C{os.replace} counted.
"""

import os
import shutil
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial import unittest

from kafkatw.protocol.batch import build_batch
from kafkatw.storage import files as files_module
from kafkatw.storage import leader_epoch as leader_epoch_module
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

    def test_assign_is_synced_by_sync_truncation_never(self):
        synced = []
        self.patch(leader_epoch_module, "sync_file", synced.append)
        cache = LeaderEpochCache(self.path)
        cache.assign(0, 0)
        cache.assign(3, 10)
        self.assertEqual(self.writes, [(LEADER_EPOCH_CHECKPOINT_FILE, False)] * 2)
        self.assertTrue(cache.unsynced)
        cache.sync()
        cache.sync()  # nothing new: no second fsync
        self.assertEqual((synced, cache.unsynced), ([self.path], False))
        cache.truncate_from_end(5)
        cache.truncate_from_start(2)
        self.assertEqual(self.writes[2:], [(LEADER_EPOCH_CHECKPOINT_FILE, False)] * 2)
        self.assertFalse(cache.unsynced)
        cache.sync()
        self.assertEqual(synced, [self.path])
        self.assertEqual(LeaderEpochCache(self.path).entries, cache.entries)
        cache.clear()  # written with fsync at once
        self.assertEqual((self.writes[-1], cache.unsynced), ((LEADER_EPOCH_CHECKPOINT_FILE, True), False))

    def test_sync_fsyncs_the_file_and_its_directory(self):
        fsynced = []
        real_fsync = os.fsync

        def fsync(fd):
            fsynced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        self.patch(os, "fsync", fsync)
        cache = LeaderEpochCache(self.path)
        cache.assign(2, 0)
        self.assertEqual(fsynced, [])
        cache.sync()
        self.assertEqual(fsynced, [os.path.realpath(self.path), os.path.realpath(self.dir)])

    def test_a_write_and_a_sync_take_turns(self):
        """
        The file is written and synced only under the cache's lock (a sync runs on a pool thread,
        writes on the reactor's): an assignment written while a sync runs waits for it, and stays
        unsynced after it.
        """
        cache = LeaderEpochCache(self.path)
        held = []
        write, sync = leader_epoch_module.write_atomically, leader_epoch_module.sync_file

        def locked_write(path, data, *args, **kwargs):
            held.append(("write", cache._sync_lock.locked()))
            return write(path, data, *args, **kwargs)

        def locked_sync(path, *args, **kwargs):
            held.append(("sync", cache._sync_lock.locked()))
            return sync(path, *args, **kwargs)

        self.patch(leader_epoch_module, "write_atomically", locked_write)
        self.patch(leader_epoch_module, "sync_file", locked_sync)
        cache.assign(1, 0)
        cache.sync()
        cache.assign(2, 5)
        self.assertEqual(held, [("write", True), ("sync", True), ("write", True)])
        self.assertTrue(cache.unsynced)
        self.assertEqual([tuple(e) for e in LeaderEpochCache(self.path).entries], [(1, 0), (2, 5)])

    def test_a_deleted_directory_needs_no_sync(self):
        cache = LeaderEpochCache(self.path)
        cache.assign(2, 0)
        shutil.rmtree(self.dir)
        cache.sync()
        self.assertFalse(cache.unsynced)

    def test_the_log_syncs_the_checkpoint_before_its_segments(self):
        """A flush (and so a clean close) fsyncs the checkpoint before the recovery point moves."""
        order = []
        log = PartitionLog(os.path.join(self.dir, "t-0"), "t", 0, LogConfig(), now_ms=lambda: 1_000_000)
        real_sync = log.leader_epoch_cache.sync

        def sync():
            order.append(("checkpoint", log.leader_epoch_cache.unsynced, log.recovery_point))
            real_sync()

        self.patch(log.leader_epoch_cache, "sync", sync)
        log.maybe_assign_epoch_start_offset(4, 0)
        log.append(build_batch([(None, b"v")], timestamp_ms=1_000_000), 4)
        log.flush()
        self.assertEqual((order, log.recovery_point, log.leader_epoch_cache.unsynced),
                         ([("checkpoint", True, 0)], 1, False))
        log.maybe_assign_epoch_start_offset(5, 1)
        log.close()
        self.assertEqual(order[1:], [("checkpoint", True, 1)])

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


#: one step of a partition's life: ("lead", _): a new leader epoch at the log end offset;
#: ("append", records): a leader append at the current epoch; ("flush", _); ("truncate", n):
#: the log cut n offsets short (a follower truncating to its leader)
_STEPS = st.lists(st.one_of(
    st.tuples(st.just("lead"), st.just(0)),
    st.tuples(st.just("append"), st.integers(1, 4)),
    st.tuples(st.just("flush"), st.just(0)),
    st.tuples(st.just("truncate"), st.integers(1, 6)),
), max_size=40)


class CrashTests(unittest.TestCase):
    """
    A crash of the machine after any history of leader elections, appends,
    flushes and truncations, in small segments (rolls put the batches of an
    epoch in segments below the recovery point): the checkpoint comes back as
    it was last made durable, the log as it was written, the next start is
    unclean, and every batch's epoch is what the cache says.  Fails when the
    log's flush does not sync the checkpoint first.
    """

    @settings(max_examples=150, deadline=None)
    @given(_STEPS)
    def test_every_batch_epoch_is_known_after_a_crash(self, steps):
        directory = tempfile.mkdtemp(prefix="kafkatw-test-epoch-crash-")
        self.addCleanup(shutil.rmtree, directory, True)
        path = os.path.join(directory, "t-0", LEADER_EPOCH_CHECKPOINT_FILE)
        durable = {"data": None}  # the checkpoint's bytes as of its last fsync (None: no file survives)
        real_write, real_sync = leader_epoch_module.write_atomically, leader_epoch_module.sync_file

        def write_atomically(p, data, *args, **kwargs):
            real_write(p, data, *args, **kwargs)
            if kwargs.get("fsync", True):
                durable["data"] = data

        def sync_file(p, *args, **kwargs):
            real_sync(p, *args, **kwargs)
            with open(p, "rb") as f:
                durable["data"] = f.read()

        self.patch(leader_epoch_module, "write_atomically", write_atomically)
        self.patch(leader_epoch_module, "sync_file", sync_file)
        config = LogConfig(segment_bytes=250)
        log = PartitionLog(os.path.join(directory, "t-0"), "t", 0, config, now_ms=lambda: 1_000_000)
        epoch = 0
        log.maybe_assign_epoch_start_offset(epoch, 0)
        for step, n in steps:
            if step == "lead":
                epoch += 1
                log.maybe_assign_epoch_start_offset(epoch, log.log_end_offset)
            elif step == "append":
                log.append(build_batch([(None, b"v" * 20)] * n, timestamp_ms=1_000_000), epoch)
            elif step == "flush":
                log.flush()
            elif log.log_end_offset > log.log_start_offset:
                log.truncate_to(max(log.log_start_offset, log.log_end_offset - n))
        recovery_point = log.recovery_point
        log.close_handlers()  # the crash: nothing more is written
        if durable["data"] is None:
            os.remove(path)
        else:
            with open(path, "wb") as f:
                f.write(durable["data"])
        reloaded = PartitionLog(os.path.join(directory, "t-0"), "t", 0, config, recovery_point=recovery_point,
                                clean_shutdown=False, now_ms=lambda: 1_000_000)
        self.addCleanup(reloaded.close_handlers)
        for segment in reloaded.segments:
            for header in segment.iter_headers(0):
                self.assertEqual(reloaded.epoch_for_offset(header.base_offset), header.partition_leader_epoch,
                                 (header.base_offset, reloaded.leader_epoch_cache.entries, recovery_point))
