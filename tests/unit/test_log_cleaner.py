"""
Tests for L{kafkatw.storage.log_cleaner}: log compaction of partition logs in
temporary directories, the cleaner invoked synchronously, time injected.
"""

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.trial import unittest

from kafkatw.broker.log_cleaner import LogCleaner
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.errors import InvalidRecordError
from kafkatw.protocol.batch import build_batch, parse_batch_headers
from kafkatw.protocol.records import decode_batches, encode_batch
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import FILE_DELETE_DELAY_MS, LogConfig
from kafkatw.storage.log_cleaner import (
    CLEANER_CHECKPOINT_FILE,
    Cleaner,
    DedupeBufferTooSmallError,
    LogCleanerManager,
    Throttler,
    cleanable_range,
)
from kafkatw.storage.log_manager import read_checkpoint
from kafkatw.storage.producer_state import ProducerStateManager
from kafkatw.storage.segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from kafkatw.storage.transaction_index import TransactionIndex

NOW = 1_000_000_000


class Clock:
    def __init__(self, now_ms=NOW):
        self.now = now_ms

    def __call__(self):
        return self.now


class Manager:
    """The part of a LogManager the cleaner uses."""

    def __init__(self, *logs):
        self.logs = list(logs)

    def all_logs(self):
        return list(self.logs)

    def get(self, topic, partition):
        for log in self.logs:
            if (log.topic, log.partition) == (topic, partition):
                return log
        return None


CLEANER_CONFIG = {
    "log.cleaner.threads": 1,
    "log.cleaner.backoff.ms": 15000,
    "log.cleaner.dedupe.buffer.size": 1 << 20,
    "log.cleaner.io.max.bytes.per.second": 1.7976931348623157e308,
}


class Crash(Exception):
    pass


def read_records(log, start=None):
    """(offset, key, value) of every record of the log, and the batches' (base, last) offsets."""
    start = log.log_start_offset if start is None else start
    data = b"".join(os.pread(r.fileno, r.length, r.position) for r in log.read(start, 1 << 30))
    batches = decode_batches(data)
    return [(r.offset, r.key, r.value) for b in batches for r in b.records], batches


def last_values(records):
    result = {}
    for _, key, value in records:
        result[key] = value
    return result


class CleanerTestCase(unittest.TestCase):
    def mktemp(self):
        if not hasattr(self, "_tmp_root"):
            self._tmp_root = tempfile.mkdtemp(prefix="kafkatw-test-")
            self.addCleanup(shutil.rmtree, self._tmp_root, True)
        return tempfile.mktemp(dir=self._tmp_root)

    def setUp(self):
        self.clock = Clock()
        self.log_dir = self.mktemp()
        os.makedirs(self.log_dir)

    def make_log(self, clean_shutdown=False, **config):
        config.setdefault("cleanup_policy", "compact")
        config.setdefault("segment_bytes", 700)
        log = PartitionLog(os.path.join(self.log_dir, "t-0"), "t", 0, LogConfig(**config),
                           clean_shutdown=clean_shutdown, now_ms=self.clock)
        self.addCleanup(self.close, log)
        return log

    def close(self, log):
        if not getattr(log, "_test_closed", False):
            log._test_closed = True
            log.close()

    def reopen(self, log):
        self.close(log)
        again = PartitionLog(log.directory, "t", 0, log.config, clean_shutdown=False, now_ms=self.clock)
        self.addCleanup(self.close, again)
        return again

    def make_cleaner(self, *logs, **config):
        return LogCleanerManager(Manager(*logs), {**CLEANER_CONFIG, **config}, self.clock)

    def put(self, log, key, value, ts=None, **kw):
        ts = self.clock.now if ts is None else ts
        result = log.append(build_batch([(key, value)], timestamp_ms=ts, **kw), 0)
        log.update_high_watermark(log.log_end_offset)
        return result.base_offset

    def fill(self, log, count, keys=3, prefix=b"k"):
        """C{count} updates of C{keys} keys, value = b"v<offset>"; @return: {key: last value}."""
        written = {}
        for i in range(count):
            key = prefix + b"%d" % (i % keys)
            value = b"v%d" % log.log_end_offset
            self.put(log, key, value)
            written[key] = value
        return written

    def assert_compacted(self, log, written):
        """One record per key below the active segment, the last values, offsets rising."""
        records, batches = read_records(log)
        offsets = [o for o, _, _ in records]
        self.assertEqual(offsets, sorted(set(offsets)))
        bases = [b.base_offset for b in batches]
        self.assertEqual(bases, sorted(set(bases)))
        active = log.active_segment.base_offset
        cleaned_keys = [k for o, k, _ in records if o < active]
        self.assertEqual(len(cleaned_keys), len(set(cleaned_keys)))
        self.assertEqual(last_values(records), written)
        for offset, _, value in records:  # every value names the offset it was written at
            if value is not None and value.startswith(b"v"):
                self.assertEqual(value, b"v%d" % offset)
        return records


class CompactionTests(CleanerTestCase):
    def test_last_value_per_key_and_offsets(self):
        log = self.make_log()
        written = self.fill(log, 120)
        before = log.size_bytes
        stats = self.make_cleaner(log).clean_log(log)
        self.assertIsNotNone(stats)
        records = self.assert_compacted(log, written)
        self.assertLess(log.size_bytes, before / 4)
        self.assertEqual(stats.end_offset, log.active_segment.base_offset)
        # gaps stay: the offsets kept are far apart
        self.assertGreater(records[0][0], 0)
        self.assertLess(len(records), 60)
        self.assertEqual(log.log_end_offset, 120)
        # the checkpoint, in Kafka's format
        path = os.path.join(self.log_dir, CLEANER_CHECKPOINT_FILE)
        self.assertEqual(read_checkpoint(path), {("t", 0): stats.end_offset})
        with open(path) as f:
            self.assertEqual(f.read(), f"0\n1\nt 0 {stats.end_offset}\n")
        # nothing left behind but the old files waiting for the delete delay
        names = os.listdir(log.directory)
        self.assertFalse([n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))])
        log.apply_retention(self.clock.now + FILE_DELETE_DELAY_MS)
        self.assertFalse([n for n in os.listdir(log.directory) if n.endswith(DELETED_SUFFIX)])
        # the cleaned log survives a reload (indexes and all)
        again = self.reopen(log)
        self.assert_compacted(again, written)
        self.assertEqual(again.log_end_offset, 120)

    def test_second_pass_merges_segments_and_appends_continue(self):
        log = self.make_log()
        cleaner = self.make_cleaner(log)
        written = self.fill(log, 120)
        cleaner.clean_log(log)
        count = len(log.segments)
        written.update(self.fill(log, 120))
        cleaner.clean_log(log, force=True)
        self.assert_compacted(log, written)
        self.assertLess(len(log.segments), count + 10)
        self.assertEqual(self.put(log, b"k0", b"v240"), 240)
        written[b"k0"] = b"v240"
        self.assert_compacted(log, written)

    def test_batches_keep_base_and_last_offset(self):
        log = self.make_log(segment_bytes=400)
        # batches of three records, the same three keys: only the last batch survives whole
        for i in range(12):
            base = log.log_end_offset
            log.append(build_batch([(b"a", b"v%d" % base), (b"b", b"v%d" % (base + 1)),
                                    (b"x%d" % i, b"v%d" % (base + 2))],
                                   timestamp_ms=NOW), 0)
        log.update_high_watermark(log.log_end_offset)
        self.make_cleaner(log).clean_log(log)
        _, batches = read_records(log)
        for b in batches:
            self.assertEqual(b.last_offset_delta, 2)
            self.assertEqual(b.base_offset % 3, 0)
        kept = [b for b in batches if b.base_offset < log.active_segment.base_offset]
        self.assertIn(1, [b.record_count for b in kept])  # a batch that lost two records

    def test_compressed_batches_are_rewritten_compressed(self):
        log = self.make_log(segment_bytes=2000)
        for i in range(20):
            base = log.log_end_offset
            recs = [(b"k%d" % j, b"v%d" % (base + j), [], NOW) for j in range(3)]
            recs.append((b"u%d" % i, b"v%d" % (base + 3), [], NOW))
            log.append(encode_batch(recs, compression=1), 0)
        log.update_high_watermark(log.log_end_offset)
        self.make_cleaner(log).clean_log(log)
        records, batches = read_records(log)
        self.assertTrue(all(b.compression == 1 for b in batches))
        keys = [k for o, k, _ in records if o < log.active_segment.base_offset]
        self.assertEqual(len(keys), len(set(keys)))
        for offset, _, value in records:
            self.assertEqual(value, b"v%d" % offset)

    def test_long_keys_values_and_timestamp_deltas(self):
        """Multi-byte varints everywhere: 300-byte keys, 1000-byte values, timestamps hours apart."""
        log = self.make_log(segment_bytes=20000)
        written = {}
        for i in range(40):
            base = log.log_end_offset
            recs = []
            for j in range(3):
                key = (b"%d" % ((i + j) % 4)) * 300
                value = b"v%d:" % (base + j) + b"x" * 1000
                recs.append((key, value, [("h", b"%d" % j)], NOW - 7_200_000 * ((i + j) % 5)))
                written[key] = value
            log.append(encode_batch(recs, compression=3 if i % 2 else 0), 0)
        log.update_high_watermark(log.log_end_offset)
        before = {r.offset: r.timestamp_ms for b in decode_batches(
            b"".join(os.pread(x.fileno, x.length, x.position) for x in log.read(0, 1 << 30))) for r in b.records}
        self.make_cleaner(log).clean_log(log)
        data = b"".join(os.pread(x.fileno, x.length, x.position) for x in log.read(0, 1 << 30))
        records = [r for b in decode_batches(data) for r in b.records]
        self.assertEqual({r.key: r.value for r in records}, written)
        for r in records:
            self.assertEqual(r.timestamp_ms, before[r.offset])
            self.assertEqual(r.value[:r.value.index(b":")], b"v%d" % r.offset)
            self.assertEqual(len(r.headers), 1)
        keys = [r.key for r in records if r.offset < log.active_segment.base_offset]
        self.assertEqual(len(keys), len(set(keys)))

    def test_tombstones_kept_then_removed_after_delete_retention(self):
        log = self.make_log(segment_bytes=700, delete_retention_ms=5000)
        cleaner = self.make_cleaner(log)
        self.put(log, b"dead", b"v0")
        self.put(log, b"dead", None)
        for i in range(30):  # unique keys: the cleaned segments stay full and are not merged
            self.put(log, b"u%03d" % i, b"v%d" % log.log_end_offset)
        real_now_ns = os.stat(log.active_segment.path).st_mtime_ns
        old = real_now_ns - 10_000 * 1_000_000
        segments = log.segments
        os.utime(segments[0].path, ns=(old, old))
        cleaner.clean_log(log, force=True)
        records, _ = read_records(log)
        # the first pass has no clean segment before it: the tombstone stays
        self.assertIn((1, b"dead", None), records)
        self.assertNotIn((0, b"dead", b"v0"), records)
        for i in range(30, 60):
            self.put(log, b"u%03d" % i, b"v%d" % log.log_end_offset)
        # the tombstone's segment is 10 s older than the newest clean one: past 20 s it stays
        log.config.delete_retention_ms = 20000
        cleaner.clean_log(log, force=True)
        self.assertIn((1, b"dead", None), read_records(log)[0])
        for i in range(60, 90):
            self.put(log, b"u%03d" % i, b"v%d" % log.log_end_offset)
        log.config.delete_retention_ms = 5000
        cleaner.clean_log(log, force=True)
        records, _ = read_records(log)
        self.assertNotIn(b"dead", [k for _, k, _ in records])
        self.assertEqual(len([k for _, k, _ in records if k.startswith(b"u")]), 90)
        self.close(log)

    def test_keyless_records_refused_on_compacted_log(self):
        log = self.make_log()
        with self.assertRaises(InvalidRecordError) as caught:
            log.append(build_batch([(b"k", b"v"), (None, b"v")], timestamp_ms=NOW), 0)
        self.assertIn("Compacted topic cannot accept message without key", str(caught.exception))
        self.assertEqual(log.log_end_offset, 0)
        # not on a delete log
        plain = PartitionLog(os.path.join(self.log_dir, "p-0"), "p", 0, LogConfig(), now_ms=self.clock)
        self.addCleanup(plain.close)
        plain.append(build_batch([(None, b"v")], timestamp_ms=NOW), 0)

    def test_compact_policy_skips_retention_compact_delete_applies_it(self):
        log = self.make_log(retention_ms=1000)
        self.fill(log, 60)
        self.assertEqual(log.apply_retention(NOW + 10**7), 0)
        log.config.cleanup_policy = "compact,delete"
        self.assertGreater(log.apply_retention(NOW + 10**7), 0)

    def test_follower_appends_compacted_batches_with_gaps(self):
        leader = self.make_log()
        self.fill(leader, 90)
        self.make_cleaner(leader).clean_log(leader)
        data = b"".join(os.pread(r.fileno, r.length, r.position) for r in leader.read(0, 1 << 30))
        follower = PartitionLog(os.path.join(self.log_dir, "t-1"), "t", 1, LogConfig(cleanup_policy="compact"),
                                now_ms=self.clock)
        self.addCleanup(follower.close)
        follower.append_as_follower(data)
        self.assertEqual(follower.log_end_offset, leader.log_end_offset)
        self.assertEqual(read_records(follower)[0], read_records(leader)[0])
        # the headers of a compacted log parse only when compacted batches are allowed
        parse_batch_headers(data, allow_compacted=True)
        self.assertRaises(InvalidRecordError, parse_batch_headers, data)


class SchedulingTests(CleanerTestCase):
    def test_dirty_ratio_threshold(self):
        log = self.make_log(min_cleanable_dirty_ratio=0.5)
        cleaner = self.make_cleaner(log)
        self.fill(log, 200, keys=50)
        self.assertIs(cleaner.grab_filthiest_log().log, log)
        self.assertIsNotNone(cleaner.clean_log(log))
        # a little dirt on a large clean part: below the ratio
        self.fill(log, 12, keys=50, prefix=b"z")
        to_clean = cleanable_range(log, cleaner.checkpoint_offset(log), self.clock.now)
        self.assertGreater(to_clean.cleanable_bytes, 0)
        self.assertLess(to_clean.dirty_ratio, 0.5)
        self.assertIsNone(cleaner.grab_filthiest_log())
        self.assertIsNone(cleaner.clean_log(log))
        self.fill(log, 300, keys=50, prefix=b"z")
        self.assertGreaterEqual(cleanable_range(log, cleaner.checkpoint_offset(log), self.clock.now).dirty_ratio, 0.5)
        self.assertIsNotNone(cleaner.clean_log(log))

    def test_not_compacted_logs_are_not_chosen(self):
        log = self.make_log(cleanup_policy="delete")
        self.fill(log, 100)
        self.assertIsNone(self.make_cleaner(log).grab_filthiest_log())

    def test_min_compaction_lag(self):
        log = self.make_log(min_compaction_lag_ms=60_000)
        for i in range(60):
            self.put(log, b"k%d" % (i % 3), b"v%d" % i, ts=NOW - 120_000)
        young = log.log_end_offset
        for i in range(60, 120):
            self.put(log, b"k%d" % (i % 3), b"v%d" % i, ts=NOW - 1000)
        to_clean = cleanable_range(log, None, NOW)
        # the uncleanable part starts at the first segment holding a young record
        young_segment = [s for s in log.segments if s.next_offset > young][0]
        self.assertEqual(to_clean.first_uncleanable_offset, young_segment.base_offset)
        stats = self.make_cleaner(log).clean_log(log)
        self.assertEqual(stats.end_offset, young_segment.base_offset)
        records, _ = read_records(log)
        self.assertEqual(len([o for o, _, _ in records if o >= young]), 60)

    def test_max_compaction_lag_forces_cleaning(self):
        log = self.make_log(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=3_600_000)
        cleaner = self.make_cleaner(log)
        for i in range(100):
            self.put(log, b"u%d" % i, b"v%d" % i)
        cleaner.clean_log(log)
        for i in range(20):
            self.put(log, b"k%d" % (i % 2), b"v%d" % i)
        log.roll()
        self.assertIsNone(cleaner.grab_filthiest_log())
        self.clock.now += 3_600_001
        to_clean = cleaner.grab_filthiest_log()
        self.assertIsNotNone(to_clean)
        self.assertGreater(to_clean.max_compaction_delay_ms, 0)
        self.assertIsNotNone(cleaner.clean_log(log))

    def test_active_segment_rolls_at_max_compaction_lag(self):
        log = self.make_log(segment_bytes=10**6, max_compaction_lag_ms=1000)
        self.put(log, b"k", b"v")
        self.clock.now += 1001
        self.put(log, b"k", b"w")
        self.assertEqual(len(log.segments), 2)
        self.assertEqual(LogConfig(segment_ms=5000, max_compaction_lag_ms=1000).max_segment_ms, 5000)

    def test_high_watermark_bounds_cleaning(self):
        log = self.make_log()
        self.fill(log, 120)
        log.update_high_watermark(10)
        to_clean = cleanable_range(log, None, NOW)
        self.assertLessEqual(to_clean.first_uncleanable_offset, 10)

    def test_truncation_lowers_the_checkpoint(self):
        log = self.make_log()
        cleaner = self.make_cleaner(log)
        self.fill(log, 120)
        stats = cleaner.clean_log(log)
        self.assertGreater(stats.end_offset, 60)
        log.truncate_to(50)  # a follower truncating: what comes next at 50.. was never cleaned
        self.fill(log, 100)
        self.assertEqual(cleaner.checkpoint_offset(log), 50)
        self.assertIsNone(log.truncated_to)

    def test_a_recreated_log_loses_its_checkpoint(self):
        log = self.make_log()
        cleaner = self.make_cleaner(log)
        self.fill(log, 120)
        self.assertGreater(cleaner.clean_log(log).end_offset, 0)
        log.delete()
        log._test_closed = True
        again = self.make_log()
        cleaner.log_manager.logs[:] = [again]
        self.assertIsNone(cleaner.checkpoint_offset(again))

    def test_dedupe_buffer_limits_a_pass(self):
        log = self.make_log()
        written = self.fill(log, 200, keys=200)
        entries = 15
        cleaner = self.make_cleaner(log)
        cleaner.cleaner.map_capacity = entries
        stats = cleaner.clean_log(log)
        self.assertLess(stats.end_offset, log.active_segment.base_offset)
        while cleaner.clean_log(log, force=True) is not None:
            pass
        self.assert_compacted(log, written)
        cleaner.cleaner.map_capacity = 1
        written = self.fill(log, 60, keys=60, prefix=b"z")
        self.assertRaises(DedupeBufferTooSmallError, cleaner.clean_log, log, True)


class CrashRecoveryTests(CleanerTestCase):
    def crash_at(self, step, then=None):
        log = self.make_log()
        written = self.fill(log, 120)
        original = read_records(log)[0]
        cleaner = self.make_cleaner(log)

        def swap(old, base):
            if step == "cleaned":
                raise Crash(step)

            def crash_after(done):
                if done == step:
                    raise Crash(step)

            log.replace_segments(old, base, crash_after=crash_after)

        self.assertRaises(Crash, cleaner.clean_log, log, False, swap)
        if then is not None:
            then(log.directory)
        suffixes = {n.rsplit(".", 1)[-1] for n in os.listdir(log.directory)}
        # the process dies: descriptors closed, nothing flushed or snapshotted
        log._test_closed = True
        for segment in log.segments:
            segment.close()
        # (the graveyard's descriptors are closed after the test: that would remove the .deleted files)
        self.addCleanup(log.apply_retention, 10**15)
        again = PartitionLog(log.directory, "t", 0, log.config, clean_shutdown=False, now_ms=self.clock)
        self.addCleanup(self.close, again)
        self.assertFalse([n for n in os.listdir(again.directory) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX,
                                                                                  DELETED_SUFFIX))])
        records, _ = read_records(again)
        offsets = [o for o, _, _ in records]
        self.assertEqual(offsets, sorted(set(offsets)))
        self.assertEqual(last_values(records), written)
        self.assertEqual(again.log_end_offset, 120)
        again.append(build_batch([(b"k0", b"v120")], timestamp_ms=NOW), 0)
        return original, records, suffixes

    def test_crash_after_cleaned(self):
        original, records, suffixes = self.crash_at("cleaned")
        self.assertIn("cleaned", suffixes)
        self.assertEqual(records, original)

    def test_crash_after_swap(self):
        original, records, suffixes = self.crash_at("swap")
        self.assertIn("swap", suffixes)
        self.assertLess(len(records), len(original))  # the first group was swapped in at load

    def test_crash_after_delete(self):
        original, records, suffixes = self.crash_at("delete")
        self.assertIn("deleted", suffixes)
        self.assertLess(len(records), len(original))

    def test_crash_during_delete(self):
        # the first old segment renamed .deleted, its indexes gone, the others untouched
        def partly_deleted(directory):
            first = sorted(n for n in os.listdir(directory) if n.endswith(".log"))[0]
            os.replace(os.path.join(directory, first), os.path.join(directory, first + DELETED_SUFFIX))
            for suffix in (".index", ".timeindex"):
                os.unlink(os.path.join(directory, first[:-4] + suffix))

        original, records, suffixes = self.crash_at("swap", partly_deleted)
        self.assertEqual({"swap", "deleted"} - suffixes, set())
        self.assertLess(len(records), len(original))

    def test_crash_during_live(self):
        # the .log renamed into place, its indexes still .swap
        def log_live(directory):
            [swap] = [n for n in os.listdir(directory) if n.endswith(".log" + SWAP_SUFFIX)]
            os.replace(os.path.join(directory, swap), os.path.join(directory, swap[:-len(SWAP_SUFFIX)]))

        original, records, suffixes = self.crash_at("delete", log_live)
        self.assertIn("swap", suffixes)
        self.assertLess(len(records), len(original))

    def test_crash_after_live(self):
        original, records, _ = self.crash_at("live")
        self.assertLess(len(records), len(original))

    def test_swap_refused_when_the_log_changed(self):
        log = self.make_log()
        self.fill(log, 120)
        cleaner = self.make_cleaner(log)
        to_clean = cleanable_range(log, None, NOW)
        task = Cleaner.prepare(to_clean, NOW)
        self.addCleanup(task.close)
        log.truncate_to(30)  # a follower truncation while the pass runs
        self.fill(log, 90)
        from kafkatw.storage.log_cleaner import CleanerAbortedError

        self.assertRaises(CleanerAbortedError, cleaner.cleaner.clean, task,
                          lambda old, base: cleaner._swap(task, old, base))
        self.assertFalse([n for n in os.listdir(log.directory) if n.endswith(CLEANED_SUFFIX)])
        self.assertEqual(log.log_end_offset, 120)


class ServiceTests(CleanerTestCase):
    """The service's slots on a fake reactor, its "threads" run synchronously."""

    def make_service(self, *logs, **config):
        self.reactor = MemoryReactorClock()
        return LogCleaner(Manager(*logs), {**CLEANER_CONFIG, "log.cleaner.backoff.ms": 1000, **config}, self.reactor,
                          self.clock, in_thread=lambda f, *a: defer.maybeDeferred(f, *a),
                          from_thread=lambda f, *a: f(*a))

    def test_slots_clean_then_back_off(self):
        log = self.make_log()
        written = self.fill(log, 120)
        service = self.make_service(log)
        service.start()
        self.assertEqual(len(self.reactor.triggers["before"]["shutdown"]), 1)
        self.reactor.advance(0)
        self.assertEqual(service.passes, 1)
        self.assert_compacted(log, written)
        self.reactor.advance(0)  # it looks again at once, finds nothing, backs off
        self.assertEqual(service.passes, 1)
        [call] = [c for c in self.reactor.getDelayedCalls() if c.active()]
        self.assertEqual(call.getTime() - self.reactor.seconds(), 1.0)
        written.update(self.fill(log, 120))
        self.reactor.advance(1)
        self.assertEqual(service.passes, 2)
        self.assert_compacted(log, written)
        self.successResultOf(defer.Deferred.fromCoroutine(service.stop()))
        self.assertFalse([c for c in self.reactor.getDelayedCalls() if c.active()])

    def test_a_failed_pass_is_logged_and_backs_off(self):
        log = self.make_log()
        self.fill(log, 120)
        service = self.make_service(log)
        service.cleaner.map_capacity = 1  # DedupeBufferTooSmallError
        service.start()
        self.reactor.advance(0)
        self.assertEqual(len(self.flushLoggedErrors(DedupeBufferTooSmallError)), 1)
        self.assertEqual(service.passes, 0)
        self.assertIs(service.uncleanable[("t", 0)], log)
        self.assertIsNone(service.grab_filthiest_log())  # not chosen again
        self.assertEqual(os.listdir(self.log_dir).count(CLEANER_CHECKPOINT_FILE), 0)
        self.successResultOf(defer.Deferred.fromCoroutine(service.stop()))

    def test_a_deleted_log_aborts_its_pass(self):
        log = self.make_log()
        self.fill(log, 120)
        manager = Manager(log)
        service = self.make_service(log)
        service.log_manager = manager
        to_clean = service.grab_filthiest_log()
        task = Cleaner.prepare(to_clean, NOW)
        self.addCleanup(task.close)
        manager.logs.clear()  # the topic is deleted while the pass runs
        from kafkatw.storage.log_cleaner import CleanerAbortedError

        self.assertRaises(CleanerAbortedError, service.cleaner.clean, task,
                          lambda old, base: service._swap(task, old, base))
        self.assertEqual(read_records(log)[0][0][0], 0)  # untouched


class ProducerStateAndReadsTests(CleanerTestCase):
    def test_idempotent_producer_state_survives_cleaning(self):
        log = self.make_log()
        seq = 0
        for i in range(60):
            log.append(build_batch([(b"k%d" % (i % 3), b"v%d" % i)], timestamp_ms=NOW, producer_id=7,
                                   producer_epoch=0, base_sequence=seq), 0)
            seq += 1
        # another producer overwrites producer 7's last key: its last batch is emptied but kept
        self.put(log, b"k2", b"other")
        self.fill(log, 30, keys=3, prefix=b"z")
        log.update_high_watermark(log.log_end_offset)
        entry_before = log.producer_state.producers[7]
        self.make_cleaner(log).clean_log(log, force=True)
        _, batches = read_records(log)
        empty = [b for b in batches if b.record_count == 0 and b.producer_id == 7]
        # producer 7's last batch, and the last batch of each rewritten group (which keeps its offsets)
        self.assertIn((59, 59), [(b.base_offset, b.base_sequence) for b in empty])
        again = self.reopen(log)
        entry = again.producer_state.producers[7]
        self.assertEqual(entry.last_seq, entry_before.last_seq)
        self.assertEqual(entry.batches[-1].last_offset, 59)
        # the next sequence is accepted, a retry of the last one is a duplicate
        again.append(build_batch([(b"k9", b"n")], timestamp_ms=NOW, producer_id=7, producer_epoch=0,
                                 base_sequence=60), 0)
        result = again.append(build_batch([(b"k9", b"n")], timestamp_ms=NOW, producer_id=7, producer_epoch=0,
                                          base_sequence=60), 0)
        self.assertTrue(result.duplicate)

    def test_fetch_region_taken_before_the_swap_reads_old_bytes(self):
        log = self.make_log()
        self.fill(log, 120)
        regions = log.read(0, 1 << 30)
        old_bytes = [os.pread(r.fileno, r.length, r.position) for r in regions]
        self.make_cleaner(log).clean_log(log)
        self.assertEqual([os.pread(r.fileno, r.length, r.position) for r in regions], old_bytes)
        self.assertNotEqual(b"".join(os.pread(r.fileno, r.length, r.position) for r in log.read(0, 1 << 30)),
                            b"".join(old_bytes))

    def test_control_batches_are_kept(self):
        log = self.make_log()
        self.fill(log, 30)
        # a control batch (an ABORT marker, appended as WriteTxnMarkers does)
        marker = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], timestamp_ms=NOW,
                             attributes=0x30, producer_id=9, producer_epoch=0)
        offset = log.log_end_offset
        log.append(marker, 0, allow_control=True)
        self.fill(log, 60)
        self.make_cleaner(log).clean_log(log)
        _, batches = read_records(log)
        self.assertIn(offset, [b.base_offset for b in batches if b.is_control])



TXN = 0x10


def read_committed(log):
    """
    (offset, key, value) of the records a read-committed consumer gets from
    the log start: below the LSO, the aborted transactions of
    L{PartitionLog.collect_aborted_transactions} dropped as Kafka's consumer
    drops them (an aborted producer's batches from the transaction's first
    offset to its ABORT marker), control batches skipped.
    """
    start, lso = log.log_start_offset, log.last_stable_offset
    data = b"".join(os.pread(r.fileno, r.length, r.position) for r in log.read(start, 1 << 30, max_offset=lso))
    aborted = sorted(log.collect_aborted_transactions(start, lso), key=lambda t: t.first_offset)
    ongoing = set()
    visible = []
    for batch in decode_batches(data):
        while aborted and aborted[0].first_offset <= batch.last_offset:
            ongoing.add(aborted.pop(0).producer_id)
        if batch.is_control:
            if batch.records and batch.records[0].key[2:4] == b"\x00\x00":  # ABORT
                ongoing.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in ongoing:
            continue
        visible.extend((r.offset, r.key, r.value) for r in batch.records if r.offset < lso)
    return visible


def markers(log):
    """Offsets of the markers (control batches with their record) in the log."""
    return {b.base_offset for b in read_records(log)[1] if b.is_control and b.records}


def producer_view(log):
    """What the producer state decides: per producer its epoch, last sequence, last offset, open transaction."""
    state = log.producer_state
    return ({pid: (e.epoch, e.last_seq, e.batches[-1].last_offset if e.batches else None,
                   e.current_txn_first_offset) for pid, e in state.producers.items()},
            dict(state.ongoing), log.last_stable_offset)


class TransactionTestCase(CleanerTestCase):
    """Helpers to write transactions (the tests are in the subclasses)."""

    def setUp(self):
        super().setUp()
        self.seqs = {}

    def txn(self, log, pid, records):
        seq = self.seqs.get(pid, 0)
        log.append(build_batch(records, timestamp_ms=self.clock.now, producer_id=pid, producer_epoch=0,
                               base_sequence=seq, attributes=TXN), 0)
        self.seqs[pid] = seq + len(records)
        log.update_high_watermark(log.log_end_offset)
        return log.log_end_offset - len(records)

    def end(self, log, pid, committed):
        offset = log.append_marker(pid, 0, 0, committed, 0, self.clock.now).base_offset
        log.update_high_watermark(log.log_end_offset)
        return offset

    def mixed(self, log, rounds=6):
        """
        Rounds of a committed transaction of producer 1 and an aborted one of
        producer 2 over the same keys c0-c2 (interleaved, so that each is open
        while the other completes), and plain updates of k0-k2; then 30 plain
        updates that push them below the active segment.
        """
        for r in range(rounds):
            self.txn(log, 1, [(b"c%d" % (r % 3), b"commit%d" % r)])
            self.txn(log, 2, [(b"c%d" % ((r + 1) % 3), b"abort%d" % r), (b"k0", b"abort%d" % r)])
            self.fill(log, 4)
            self.txn(log, 1, [(b"c%d" % ((r + 2) % 3), b"commit%d'" % r)])
            self.end(log, 1, True)
            self.txn(log, 2, [(b"c%d" % r, b"abort%d'" % r)])
            self.fill(log, 2)
            self.end(log, 2, False)
        self.fill(log, 30)

    def assert_txn_indexes(self, log):
        """Each segment's .txnindex: on disk as in memory, its markers' entries only, no file without entries."""
        bases = {s.base_offset for s in log.segments}
        for name in os.listdir(log.directory):
            if name.endswith(".txnindex"):
                self.assertIn(int(name[:-len(".txnindex")]), bases, name)
        for segment in log.segments:
            on_disk = TransactionIndex(segment.txn_index.path)
            on_disk.load()
            self.assertEqual(on_disk.entries, segment.txn_index.entries)
            self.assertEqual(os.path.exists(segment.txn_index.path), bool(segment.txn_index.entries))
            for entry in segment.txn_index.entries:
                self.assertTrue(segment.base_offset <= entry.last_offset < segment.next_offset, entry)


class TransactionTests(TransactionTestCase):
    """Compaction of logs with transactions (Kafka's Cleaner with CleanedTransactionMetadata)."""

    def test_aborted_records_removed_committed_ones_compacted(self):
        log = self.make_log()
        self.mixed(log)
        before = read_committed(log)
        self.assertTrue([v for _, _, v in read_records(log)[0] if v.startswith(b"abort")])
        stats = self.make_cleaner(log).clean_log(log, force=True)
        self.assertEqual(stats.aborted_records_removed, 18)
        _, batches = read_records(log)
        records = [(r.offset, r.key, r.value) for b in batches if not b.is_control for r in b.records]
        self.assertFalse([v for _, _, v in records if v.startswith(b"abort")])
        after = read_committed(log)
        # the aborted records never shadow the committed ones: the latest committed value of every key stays
        self.assertEqual(last_values(after), last_values(before))
        self.assertEqual(last_values(after)[b"c0"][:6], b"commit")
        self.assertLess(set(after), set(before))
        # committed records are compacted like the others
        keys = [k for o, k, _ in after if o < log.active_segment.base_offset]
        self.assertEqual(len(keys), len(set(keys)))
        self.assertEqual(records, after)  # without aborted records, every reader sees the same
        self.assert_txn_indexes(log)

    def test_markers_kept_while_their_data_remains_then_removed_after_delete_retention(self):
        log = self.make_log(delete_retention_ms=5000)
        cleaner = self.make_cleaner(log)
        self.txn(log, 1, [(b"gone", b"c")])  # 0: committed, overwritten at 6
        self.assertEqual(self.end(log, 1, True), 1)
        self.txn(log, 2, [(b"x", b"a")])  # 2: aborted
        self.assertEqual(self.end(log, 2, False), 3)
        self.txn(log, 3, [(b"stays", b"c")])  # 4: committed, its key's last record
        self.assertEqual(self.end(log, 3, True), 5)
        self.put(log, b"gone", b"new")
        # producers 1 and 2 write again: their batches 0 and 2 are not their last (kept empty otherwise)
        for pid in (1, 2):
            self.put(log, b"p%d" % pid, b"later", producer_id=pid, producer_epoch=0, base_sequence=1)
        for i in range(30):  # unique keys: the cleaned segments stay full and are not merged
            self.put(log, b"u%03d" % i, b"v")
        old = os.stat(log.active_segment.path).st_mtime_ns - 10_000 * 1_000_000
        os.utime(log.segments[0].path, ns=(old, old))
        stats = cleaner.clean_log(log, force=True)
        records = read_records(log)[0]
        self.assertNotIn((0, b"gone", b"c"), records)
        self.assertNotIn((2, b"x", b"a"), records)
        self.assertIn((4, b"stays", b"c"), records)
        # the pass met each transaction's batch: every marker stays, the ABORT's with its .txnindex entry
        self.assertEqual(markers(log), {1, 3, 5})
        self.assertEqual(stats.markers_removed, 0)
        self.assertEqual([e[:3] for e in log.segments[0].txn_index.entries], [(2, 2, 3)])
        self.assert_txn_indexes(log)

        # the data of transactions 1 and 2 is gone: their markers may go, but their segment
        # (10 s older than the newest clean one) is within delete.retention.ms = 20 s
        for i in range(30, 60):
            self.put(log, b"u%03d" % i, b"v")
        log.config.delete_retention_ms = 20000
        cleaner.clean_log(log, force=True)
        self.assertEqual(markers(log), {1, 3, 5})
        self.assertEqual(log.segments[0].txn_index.entries, [])  # no aborted record left to filter
        self.assert_txn_indexes(log)

        # past delete.retention.ms = 5 s they go; the marker of the transaction whose record stays does not
        for i in range(60, 90):
            self.put(log, b"u%03d" % i, b"v")
        log.config.delete_retention_ms = 5000
        stats = cleaner.clean_log(log, force=True)
        self.assertEqual(stats.markers_removed, 2)
        self.assertEqual(markers(log), {5})
        self.assertIn((4, b"stays", b"c"), read_records(log)[0])
        again = self.reopen(log)
        self.assertEqual(again.producer_state.ongoing, {})
        self.assertEqual(again.last_stable_offset, again.log_end_offset)
        self.assertEqual(markers(again), {5})

    def test_txn_index_of_a_cleaned_group_holds_the_surviving_aborted_transactions(self):
        log = self.make_log()
        cleaner = self.make_cleaner(log)
        for r in range(6):
            pid = 2 + r % 2
            self.txn(log, pid, [(b"a%d" % r, b"abort%d" % r)])
            self.fill(log, 4)
            self.txn(log, pid, [(b"b%d" % r, b"abort%d" % r)])
            self.end(log, pid, False)
            self.fill(log, 3)
        self.fill(log, 30)
        with_entries = [s.base_offset for s in log.segments if s.txn_index.entries]
        self.assertGreater(len(with_entries), 2)

        def surviving():
            # the aborted transactions with a batch in the log (what the next pass meets)
            _, batches = read_records(log)
            entries = log.collect_aborted_transactions(log.log_start_offset, log.last_stable_offset)
            return [e for e in entries
                    if any(b.is_transactional and not b.is_control and b.producer_id == e.producer_id
                           and e.first_offset <= b.base_offset < e.last_offset for b in batches)]

        def indexed():
            return [e for s in log.segments for e in s.txn_index.entries]

        expected = surviving()
        self.assertEqual(len(expected), 6)
        cleaner.clean_log(log, force=True)
        self.assertEqual(indexed(), expected)
        self.assert_txn_indexes(log)
        # the next pass merges the small cleaned segments: the entries of the aborted
        # transactions whose batches are gone go, those with a batch left (a producer's
        # last batch, kept empty) move to the merged segment's .txnindex
        expected = surviving()
        self.assertTrue(0 < len(expected) < 6, expected)
        where = {e: s.base_offset for s in log.segments for e in s.txn_index.entries}
        self.fill(log, 30)
        cleaner.clean_log(log, force=True)
        self.assertTrue([e for s in log.segments for e in s.txn_index.entries if where[e] != s.base_offset])
        self.assertEqual(indexed(), expected)
        self.assert_txn_indexes(log)
        self.assertFalse([v for _, _, v in read_records(log)[0] if v.startswith(b"abort")])

    def txn_crash_at(self, step, then=None):
        log = self.make_log()
        self.mixed(log)
        expected = last_values(read_committed(log))
        end = log.log_end_offset
        cleaner = self.make_cleaner(log)

        def swap(old, base):
            # the first group whose cleaned segment keeps an aborted transaction
            if not os.path.exists(os.path.join(log.directory, "%020d.txnindex%s" % (base, CLEANED_SUFFIX))):
                log.replace_segments(old, base)
                return
            if step == "cleaned":
                raise Crash(step)

            def crash_after(done):
                if done == step:
                    raise Crash(step)

            log.replace_segments(old, base, crash_after=crash_after)

        self.assertRaises(Crash, cleaner.clean_log, log, True, swap)
        if then is not None:
            then(log.directory)
        suffixes = {n.split(".", 1)[1] for n in os.listdir(log.directory) if "." in n}
        log._test_closed = True
        for segment in log.segments:
            segment.close()
        self.addCleanup(log.apply_retention, 10**15)
        again = PartitionLog(log.directory, "t", 0, log.config, clean_shutdown=False, now_ms=self.clock)
        self.addCleanup(self.close, again)
        self.assertFalse([n for n in os.listdir(again.directory) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX,
                                                                                  DELETED_SUFFIX))])
        self.assertEqual(again.log_end_offset, end)
        self.assertEqual(again.producer_state.ongoing, {})
        self.assertEqual(again.last_stable_offset, end)
        visible = read_committed(again)
        self.assertEqual(last_values(visible), expected)
        self.assertFalse([v for _, _, v in visible if v.startswith(b"abort")])
        self.assert_txn_indexes(again)
        return suffixes

    def test_crash_after_cleaned_with_txn_index(self):
        self.assertIn("txnindex.cleaned", self.txn_crash_at("cleaned"))

    def test_crash_after_swap_with_txn_index(self):
        self.assertIn("txnindex.swap", self.txn_crash_at("swap"))

    def test_crash_during_swap_with_txn_index(self):
        # the indexes renamed .swap, the log still .cleaned: the old segments stand
        def log_not_renamed(directory):
            [swap] = [n for n in os.listdir(directory) if n.endswith(".log" + SWAP_SUFFIX)]
            os.replace(os.path.join(directory, swap),
                       os.path.join(directory, swap[:-len(SWAP_SUFFIX)] + CLEANED_SUFFIX))

        self.assertIn("txnindex.swap", self.txn_crash_at("swap", log_not_renamed))

    def test_crash_after_delete_with_txn_index(self):
        self.assertIn("txnindex.swap", self.txn_crash_at("delete"))

    def test_crash_during_live_with_txn_index(self):
        # the .log renamed into place, the .txnindex still .swap
        def log_live(directory):
            [swap] = [n for n in os.listdir(directory) if n.endswith(".log" + SWAP_SUFFIX)]
            os.replace(os.path.join(directory, swap), os.path.join(directory, swap[:-len(SWAP_SUFFIX)]))

        self.assertIn("txnindex.swap", self.txn_crash_at("delete", log_live))

    def test_crash_after_live_with_txn_index(self):
        suffixes = self.txn_crash_at("live")
        self.assertNotIn("txnindex.swap", suffixes)

    def test_a_swap_completed_at_load_rebuilds_the_producer_state(self):
        log = self.make_log()
        self.mixed(log)
        cleaner = self.make_cleaner(log)

        def swap(old, base):
            def crash_after(done):
                if done == "swap":
                    raise Crash(done)

            log.replace_segments(old, base, crash_after=crash_after)

        self.assertRaises(Crash, cleaner.clean_log, log, True, swap)
        log._test_closed = True
        for segment in log.segments:
            segment.close()
        log._write_producer_snapshot()
        self.addCleanup(log.apply_retention, 10**15)
        again = PartitionLog(log.directory, "t", 0, log.config, clean_shutdown=True, now_ms=self.clock)
        self.addCleanup(self.close, again)
        self.assertEqual(again.producer_state_source, "scan")
        self.assert_txn_indexes(again)

    def test_open_transaction_untouched_and_state_reloaded(self):
        log = self.make_log()
        self.mixed(log, rounds=4)
        first_open = self.txn(log, 3, [(b"c0", b"open")])
        self.fill(log, 40)
        self.assertEqual(log.last_stable_offset, first_open)
        to_clean = cleanable_range(log, None, NOW)
        holding = [s for s in log.segments if s.base_offset <= first_open < s.next_offset][0]
        self.assertEqual(to_clean.first_uncleanable_offset, holding.base_offset)

        def raw(from_offset):
            return b"".join(os.pread(r.fileno, r.length, r.position) for r in log.read(from_offset, 1 << 30))

        untouched = raw(holding.base_offset)
        before = producer_view(log)
        visible = read_committed(log)
        self.make_cleaner(log).clean_log(log, force=True)
        self.assertEqual(raw(holding.base_offset), untouched)
        self.assertEqual(producer_view(log), before)
        self.assertEqual(last_values(read_committed(log)), last_values(visible))
        again = self.reopen(log)  # unclean: the state is rebuilt from the cleaned log
        self.assertEqual(again.producer_state_source, "scan")
        self.assertEqual(producer_view(again), before)
        self.assertEqual(last_values(read_committed(again)), last_values(visible))
        self.assert_txn_indexes(again)
        self.close(again)
        clean = PartitionLog(log.directory, "t", 0, log.config, clean_shutdown=True, now_ms=self.clock)
        self.addCleanup(self.close, clean)
        self.assertEqual(clean.producer_state_source, "snapshot")
        self.assertEqual(producer_view(clean), before)
        self.assertEqual(last_values(read_committed(clean)), last_values(visible))
        # the transaction completes after the reload, and is then cleanable
        self.end(clean, 3, False)
        self.fill(clean, 30)
        self.make_cleaner(clean).clean_log(clean, force=True)
        self.assertNotIn(b"open", [v for _, _, v in read_records(clean)[0]])

    def test_an_abort_marker_stays_with_its_data_even_without_its_index_entry(self):
        log = self.make_log(delete_retention_ms=0)
        cleaner = self.make_cleaner(log)
        for i in range(30):
            self.put(log, b"u%03d" % i, b"v")
        cleaner.clean_log(log, force=True)  # a clean part: the next pass has a delete horizon
        self.txn(log, 2, [(b"x", b"a")])
        abort = self.end(log, 2, False)
        self.put(log, b"p2", b"later", producer_id=2, producer_epoch=0, base_sequence=1)
        for i in range(30, 60):
            self.put(log, b"u%03d" % i, b"v")
        for segment in log.segments:  # the .txnindex lost (a log written before it was kept at swaps)
            segment.txn_index.reset([])
        old = os.stat(log.active_segment.path).st_mtime_ns - 10_000 * 1_000_000
        for segment in log.segments[:-1]:
            os.utime(segment.path, ns=(old, old))
        cleaner.clean_log(log, force=True)
        self.assertIn(abort, markers(log))  # the aborted batch was met (taken for committed): its marker stays
        again = self.reopen(log)
        self.assertEqual(again.producer_state.ongoing, {})
        self.assertEqual(again.last_stable_offset, again.log_end_offset)

    def test_an_empty_marker_closes_nothing(self):
        """The header the cleaner leaves of a marker whose transaction is gone (Kafka's ProducerAppendInfo)."""
        state = ProducerStateManager()
        [data] = parse_batch_headers(build_batch([(b"k", b"v")], producer_id=5, producer_epoch=0, base_sequence=0,
                                                 attributes=TXN, timestamp_ms=NOW), False)
        state.load_batch(data)
        [control] = parse_batch_headers(build_batch([(b"\x00\x00\x00\x00", b"")], base_offset=1, producer_id=5,
                                                    producer_epoch=0, attributes=TXN | 0x20,
                                                    timestamp_ms=NOW), False)
        self.assertIsNone(state.load_batch(control._replace(record_count=0)))
        self.assertEqual(state.ongoing, {5: 0})


_record = st.tuples(st.integers(0, 5), st.one_of(st.none(), st.binary(min_size=0, max_size=40)))


class PropertyTests(CleanerTestCase):
    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.tuples(st.lists(_record, min_size=1, max_size=4), st.sampled_from([0, 0, 1, 3])),
                    min_size=1, max_size=80),
           st.integers(1, 3), st.booleans())
    def test_last_value_read_is_last_written(self, batches, passes, idempotent):
        """
        Batches of 1-4 records (some gzip or lz4), 1-3 passes between writes,
        optionally from an idempotent producer: after cleaning, the last value
        read for each key is the last written, offsets rise strictly, and the
        log reloads to the same records.
        """
        self.log_dir = self.mktemp()
        os.makedirs(self.log_dir)
        log = self.make_log(segment_bytes=300)
        cleaner = self.make_cleaner(log)
        written = {}
        chunk = max(1, len(batches) // passes)
        seq = 0
        for start in range(0, len(batches), chunk):
            for records, codec in batches[start:start + chunk]:
                recs = [(b"k%d" % key, value, [], NOW) for key, value in records]
                producer = dict(producer_id=11, producer_epoch=0, base_sequence=seq) if idempotent else {}
                log.append(encode_batch(recs, compression=codec, **producer), 0)
                seq += len(recs)
                for key, value in records:
                    written[b"k%d" % key] = value
            log.update_high_watermark(log.log_end_offset)
            cleaner.clean_log(log, force=True)
        records, batches_read = read_records(log)
        offsets = [o for o, _, _ in records]
        self.assertEqual(offsets, sorted(set(offsets)))
        bases = [b.base_offset for b in batches_read]
        self.assertEqual(bases, sorted(set(bases)))
        self.assertEqual(last_values(records), written)
        if idempotent:
            last_seq = log.producer_state.producers[11].last_seq
        again = self.reopen(log)
        self.assertEqual(read_records(again)[0], records)
        if idempotent:
            self.assertEqual(again.producer_state.producers[11].last_seq, last_seq)
        self.close(again)


_txn_op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 3), st.one_of(st.none(), st.binary(min_size=0, max_size=8))),
    st.tuples(st.just("txn"), st.integers(1, 2), st.integers(0, 3)),
    st.tuples(st.sampled_from(["commit", "abort"]), st.integers(1, 2), st.just(0)),
    st.tuples(st.just("clean"), st.just(0), st.just(0)),
)


def visible_state(records):
    """Key -> last value read, deleted keys left out."""
    return {k: v for k, v in last_values(records).items() if v is not None}


class TransactionPropertyTests(TransactionTestCase):
    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(_txn_op, min_size=1, max_size=60))
    def test_read_committed_state_survives_cleaning_and_reload(self, ops):
        """
        Plain writes and tombstones, transactions of two producers committed,
        aborted or left open, and cleaning passes in any order: what a
        read-committed consumer reads keeps the same last value of every key
        after each pass and after a reload, no aborted record stays below the
        cleaned offset, and a reload rebuilds the same producer state and LSO.
        """
        self.log_dir = self.mktemp()
        os.makedirs(self.log_dir)
        self.seqs = {}
        # delete.retention.ms=0: tombstones and markers go as soon as the rules let them
        log = self.make_log(segment_bytes=300, delete_retention_ms=0)
        cleaner = self.make_cleaner(log)
        open_txns = set()
        for op, a, b in ops:
            if op == "put":
                self.put(log, b"k%d" % a, b)
            elif op == "txn":
                self.txn(log, a, [(b"k%d" % b, b"t%d@%d" % (a, log.log_end_offset))])
                open_txns.add(a)
            elif op in ("commit", "abort") and a in open_txns:
                self.end(log, a, op == "commit")
                open_txns.discard(a)
            elif op == "clean":
                before = visible_state(read_committed(log))
                cleaner.clean_log(log, force=True)
                self.assertEqual(visible_state(read_committed(log)), before)
        for pid in sorted(open_txns):  # producer 1 commits, producer 2 aborts what is left open
            self.end(log, pid, pid == 1)
        for _ in range(12):  # push everything out of the active segment
            self.put(log, b"z", b"z")
        expected = visible_state(read_committed(log))
        view = producer_view(log)
        cleaner.clean_log(log, force=True)
        self.assertEqual(visible_state(read_committed(log)), expected)
        for _ in range(12):  # a second pass, with a clean part: markers whose data went may go
            self.put(log, b"z", b"z")
        view = producer_view(log)
        stats = cleaner.clean_log(log, force=True)
        self.assertEqual(visible_state(read_committed(log)), expected)
        self.assertEqual(producer_view(log), view)
        if stats is not None:
            cleaned = [v for o, _, v in read_records(log)[0] if o < stats.end_offset and v]
            committed = {v for _, _, v in read_committed(log)}
            self.assertFalse([v for v in cleaned if v.startswith(b"t") and v not in committed])
        self.assert_txn_indexes(log)
        again = self.reopen(log)
        self.assertEqual(producer_view(again), view)
        self.assertEqual(visible_state(read_committed(again)), expected)
        self.assert_txn_indexes(again)
        self.close(again)


class ConfigTests(unittest.TestCase):
    def test_cleanup_policies(self):
        for value, expected in [("delete", "delete"), ("compact", "compact"), ("compact,delete", "compact,delete"),
                                ("delete, compact", "compact,delete")]:
            config = topic_log_config(BrokerConfig(), {"cleanup.policy": value})
            self.assertEqual(config["cleanup.policy"], expected)
            self.assertEqual(LogConfig.from_topic_config(config).cleanup_policy, expected)
        self.assertRaises(ValueError, topic_log_config, BrokerConfig(), {"cleanup.policy": "shred"})
        # an empty list, as Kafka's ValidList takes it: neither policy (every segment kept)
        self.assertEqual(BrokerConfig({"log.cleanup.policy": ""})["log.cleanup.policy"], "")
        empty = LogConfig.from_topic_config(topic_log_config(BrokerConfig(), {"cleanup.policy": ""}))
        self.assertEqual((empty.cleanup_policy, empty.delete, empty.compact), ("", False, False))
        self.assertEqual(BrokerConfig({"log.cleanup.policy": "compact"})["log.cleanup.policy"], "compact")

    def test_topic_keys_and_synonyms(self):
        broker = BrokerConfig({"log.cleaner.delete.retention.ms": "1000", "log.cleaner.min.cleanable.ratio": "0.25"})
        config = LogConfig.from_topic_config(topic_log_config(broker, {"min.compaction.lag.ms": "5",
                                                                        "max.compaction.lag.ms": "9"}))
        self.assertEqual((config.delete_retention_ms, config.min_cleanable_dirty_ratio,
                          config.min_compaction_lag_ms, config.max_compaction_lag_ms), (1000, 0.25, 5, 9))
        defaults = LogConfig.from_topic_config(topic_log_config(BrokerConfig(), {}))
        self.assertEqual((defaults.delete_retention_ms, defaults.min_cleanable_dirty_ratio,
                          defaults.max_compaction_lag_ms), (86400000, 0.5, 2**63 - 1))
        self.assertRaises(ValueError, topic_log_config, BrokerConfig(), {"min.cleanable.dirty.ratio": "1.5"})
        b = BrokerConfig()
        self.assertEqual((b["log.cleaner.threads"], b["log.cleaner.backoff.ms"], b["log.cleaner.enable"],
                          b["log.cleaner.dedupe.buffer.size"]), (1, 15000, True, 134217728))


class ThrottlerTests(unittest.TestCase):
    def test_sleeps_to_the_rate(self):
        now = [0.0]
        slept = []

        def sleep(s):
            slept.append(s)
            now[0] += s

        throttler = Throttler(1000.0, monotonic=lambda: now[0], sleep=sleep)
        throttler.maybe_throttle(500)
        self.assertEqual(slept, [])  # within the check interval
        now[0] += 0.5
        throttler.maybe_throttle(1500)  # 2000 bytes in 0.5 s: 1.5 s more to be at 1000 B/s
        self.assertEqual(slept, [1.5])
        now[0] += 1.0
        throttler.maybe_throttle(500)  # under the rate
        self.assertEqual(slept, [1.5])
