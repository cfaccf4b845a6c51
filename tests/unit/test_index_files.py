"""
Tests for the open files of L{kafkatw.storage.index} and of a segment: an
index holds no descriptor (it opens its file for each write, truncation or
C{fsync}), so a partition costs one descriptor per segment (its C{.log});
its entries survive the writes past the pending buffer, truncations, a
reopen, and a crash (entries not written lost, the rest a prefix).
"""

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial import unittest

from kafkatw.protocol.batch import build_batch
from kafkatw.storage.index import OffsetIndex, TimeIndex
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import LogConfig


def open_paths(directory):
    """The paths under C{directory} this process has open (C{/proc/self/fd})."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor of the listing itself, closed by now
        if target.startswith(directory + os.sep):
            found.append(target)
    return sorted(found)


class TempDirMixin:
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kafkatw-test-index-")
        self.addCleanup(shutil.rmtree, self.dir, True)


class IndexDescriptorTests(TempDirMixin, unittest.TestCase):
    def test_an_index_holds_no_descriptor(self):
        """Creating, filling past the 4 KB pending buffer, truncating, flushing and loading leave nothing open."""
        offsets = OffsetIndex(os.path.join(self.dir, "0.index"), 0)
        times = TimeIndex(os.path.join(self.dir, "0.timeindex"), 0)
        for i in range(1000):  # 8,000 and 12,000 bytes: written in passing
            offsets.append(i * 2, i * 100)
            times.maybe_append(1000 + i, i * 2)
        self.assertEqual(open_paths(self.dir), [])
        self.assertGreater(os.path.getsize(offsets.path), 0)
        offsets.truncate_to(1000)
        times.truncate_to(1000)
        offsets.flush()
        times.flush()
        self.assertEqual(open_paths(self.dir), [])
        self.assertEqual(os.path.getsize(offsets.path), 500 * 8)
        self.assertEqual(os.path.getsize(times.path), 500 * 12)
        again = OffsetIndex(offsets.path, 0)
        again.load()
        self.assertEqual(len(again), 500)
        self.assertEqual(again.lookup(999), (998, 49900))
        self.assertEqual(open_paths(self.dir), [])

    def test_a_log_holds_one_descriptor_per_segment(self):
        """Its C{.log} files only: the indexes are opened when written, and closed again."""
        log = PartitionLog(os.path.join(self.dir, "t-0"), "t", 0,
                           LogConfig(segment_bytes=2000, index_interval_bytes=100), now_ms=lambda: 1_000_000)
        self.addCleanup(log.close)
        for i in range(40):
            log.append(build_batch([(None, b"v" * 100)], timestamp_ms=1_000_000 + i), 0)
        log.flush()
        self.assertGreater(len(log.segments), 2)
        self.assertEqual(open_paths(self.dir), sorted(s.path for s in log.segments))
        self.assertTrue(all(p.endswith(".log") for p in open_paths(self.dir)))

    def test_flush_fsyncs_only_a_changed_index(self):
        """An idle partition's indexes cost no C{fsync} at a flush or a clean shutdown."""
        fsyncs = []
        real = os.fsync
        self.patch(os, "fsync", lambda fd: (fsyncs.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
        index = OffsetIndex(os.path.join(self.dir, "0.index"), 0)
        index.flush()
        self.assertEqual(fsyncs, [])  # nothing written yet
        index.append(5, 100)
        index.flush()
        self.assertEqual(fsyncs, [index.path])
        index.flush()
        index.close()
        self.assertEqual(fsyncs, [index.path])
        reopened = OffsetIndex(index.path, 0)
        reopened.load()
        reopened.truncate_to(0)  # a truncation changes the file: the next flush syncs it
        reopened.flush()
        self.assertEqual(fsyncs, [index.path, index.path])

    def test_writes_after_close_fail(self):
        """As with a closed descriptor: a closed index is not written again (nor recreated after delete)."""
        index = OffsetIndex(os.path.join(self.dir, "0.index"), 0)
        index.delete()
        with self.assertRaises(OSError):
            for i in range(600):  # past the pending buffer: a write
                index.append(i, i)
        self.assertFalse(os.path.exists(index.path))


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 700)),
    st.tuples(st.just("truncate"), st.integers(0, 100)),
    st.tuples(st.just("flush"), st.booleans()),
    st.tuples(st.just("reopen"), st.just(0)),
    st.tuples(st.just("crash"), st.just(0)),
), max_size=30)


class IndexModelTests(TempDirMixin, unittest.TestCase):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ops)
    def test_entries_survive_writes_truncations_reopens_and_crashes(self, steps):
        """
        Against a list model: after a reopen the index has every entry; after
        a crash (the object dropped without close) it has a prefix of them
        that includes every entry up to the last flush -- what a restart's
        sanity check and the rebuild from the log rely on.
        """
        path = tempfile.mktemp(dir=self.dir)
        index = OffsetIndex(path, 1000)
        model = []        # (offset, position), what the index holds
        durable = 0       # entries known to be in the file (flushed)
        for op, arg in steps:
            if op == "append":
                for _ in range(arg):
                    offset, position = (model[-1][0] + 1, model[-1][1] + 7) if model else (1000, 0)
                    index.append(offset, position)
                    model.append((offset, position))
            elif op == "truncate":
                if model:
                    cut = model[len(model) * arg // 100][0] if arg < 100 else model[-1][0] + 1
                    index.truncate_to(cut)
                    model = [e for e in model if e[0] < cut]
                    durable = min(durable, len(model))
            elif op == "flush":
                index.flush(fsync=arg)
                durable = len(model)
            elif op == "reopen":
                index.close()
                index = OffsetIndex(path, 1000)
                index.load()
                durable = len(model)
            else:  # crash: nothing more is written by the old object
                index.close_handler()
                index = OffsetIndex(path, 1000)
                index.load()
                entries = [index.lookup(o)[0] for o, _ in model[:len(index)]]
                self.assertEqual(entries, [o for o, _ in model[:len(index)]])
                self.assertGreaterEqual(len(index), durable)
                self.assertLessEqual(len(index), len(model))
                model = model[:len(index)]
                durable = len(model)
            self.assertEqual(len(index), len(model))
            self.assertEqual(open_paths(self.dir), [])
        index.close()
        again = OffsetIndex(path, 1000)
        again.load()
        again.sanity_check(1 << 30)
        self.assertEqual([(again.lookup(o)) for o, _ in model], model)
        self.assertEqual(os.path.getsize(path), 8 * len(model))
