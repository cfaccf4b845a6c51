"""
Tests for L{kafkatw.storage}: indexes, segments, partition logs, producer
state, the log manager.  Real files in temporary directories; time injected.
"""

import os
import pickle
import shutil
import struct
import tempfile

from crc32c import crc32c
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from twisted.trial import unittest

from kafkatw.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidProducerEpochError,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from kafkatw.protocol import records as records_module
from kafkatw.protocol.batch import build_batch, parse_batch_headers
from kafkatw.protocol.records import decode_batches, encode_batch
from kafkatw.storage import log as log_module
from kafkatw.storage import segment as segment_module
from kafkatw.storage.index import OffsetIndex, TimeIndex
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import FILE_DELETE_DELAY_MS, LogConfig
from kafkatw.storage.log_dir_failure import LogDirFiles
from kafkatw.storage.log_manager import (
    CHECKPOINT_FILE,
    CLEAN_SHUTDOWN_FILE,
    LogManager,
    read_checkpoint,
    write_checkpoint,
)
from kafkatw.storage.producer_state import ProducerStateManager, increment_sequence

from .test_records import compiled_speedups


class TestCase(unittest.TestCase):
    """
    trial's TestCase whose L{mktemp} is under the system temporary directory:
    under pytest, trial's own mktemp writes into the working directory.
    """

    def mktemp(self):
        if not hasattr(self, "_tmp_root"):
            self._tmp_root = tempfile.mkdtemp(prefix="kafkatw-test-")
            self.addCleanup(shutil.rmtree, self._tmp_root, True)
        return tempfile.mktemp(dir=self._tmp_root)


class Clock:
    def __init__(self, now_ms=1_000_000):
        self.now = now_ms

    def __call__(self):
        return self.now


def batch(n=1, size=10, ts=1_000_000, **kw):
    return build_batch([(b"k%d" % i, b"v" * size) for i in range(n)], timestamp_ms=ts, **kw)


def region_bytes(regions):
    return b"".join(os.pread(r.fileno, r.length, r.position) for r in regions)


def read_offsets(log, offset, max_bytes=1 << 30, max_offset=None):
    """Every record offset in the batches read from C{offset}."""
    data = region_bytes(log.read(offset, max_bytes, max_offset))
    if not data:
        return []
    return [h.base_offset + i for h in parse_batch_headers(data) for i in range(h.record_count)]


class LogTestMixin:
    def make_log(self, path=None, clean=False, recovery_point=0, **config):
        path = path or self.mktemp()
        self.clock = getattr(self, "clock", None) or Clock()
        log = PartitionLog(path, "topic", 0, LogConfig(**config), recovery_point=recovery_point,
                           clean_shutdown=clean, now_ms=self.clock)
        return log


class IndexTests(TestCase):
    def test_offset_index_lookup_truncate_reload(self):
        path = self.mktemp()
        index = OffsetIndex(path, 100)
        for i in range(10):
            index.append(100 + i * 10, i * 1000)
        self.assertEqual(index.lookup(99), (100, 0))
        self.assertEqual(index.lookup(135), (130, 3000))
        self.assertEqual(index.lookup(10_000), (190, 9000))
        self.assertEqual(index.floor_position(4500), 4000)
        index.truncate_to(150)
        self.assertEqual(len(index), 5)
        index.close()
        again = OffsetIndex(path, 100)
        again.load()
        again.sanity_check(10_000)
        self.assertEqual(again.last_entry, (140, 4000))
        self.assertEqual(os.path.getsize(path), 40)
        again.close()

    def test_time_index(self):
        path = self.mktemp()
        index = TimeIndex(path, 0)
        index.maybe_append(10, 0)
        index.maybe_append(10, 5)  # not growing: skipped
        index.maybe_append(20, 8)
        self.assertEqual(len(index), 2)
        self.assertEqual(index.lookup_before(10), 0)
        self.assertEqual(index.lookup_before(15), 0)
        self.assertEqual(index.lookup_before(21), 8)
        index.flush()
        again = TimeIndex(path, 0)
        again.load()
        self.assertEqual(again.last_entry, (20, 8))
        index.close()
        again.close()


class AppendReadTests(LogTestMixin, TestCase):
    def test_offsets_consecutive_across_batches(self):
        log = self.make_log()
        r1 = log.append(batch(3), leader_epoch=4)
        r2 = log.append(batch(1) + batch(2), leader_epoch=4)
        self.assertEqual((r1.base_offset, r1.last_offset, r1.record_count), (0, 2, 3))
        self.assertEqual((r2.base_offset, r2.last_offset, r2.record_count), (3, 5, 3))
        self.assertEqual(r2.log_append_time_ms, -1)
        self.assertFalse(r2.duplicate)
        self.assertEqual((r2.batch_count, r2.size_bytes), (2, len(batch(1)) + len(batch(2))))
        # appends never move the high watermark: the broker's partition does
        self.assertEqual((log.log_end_offset, log.high_watermark), (6, 0))
        self.assertTrue(log.update_high_watermark(6))
        self.assertEqual(log.high_watermark, 6)
        self.assertEqual(read_offsets(log, 0), list(range(6)))

    def test_read_returns_stored_batches_patched(self):
        """The regions' bytes are the appended batches with base offset and epoch patched, CRC intact."""
        log = self.make_log()
        raw = [batch(2, ts=5), batch(3, ts=6)]
        for b in raw:
            log.append(b, leader_epoch=9)
        data = region_bytes(log.read(0, 1 << 20))
        self.assertEqual(len(data), sum(map(len, raw)))
        first = DefaultRecordBatch(data[:len(raw[0])])
        second = DefaultRecordBatch(data[len(raw[0]):])
        self.assertTrue(first.validate_crc() and second.validate_crc())
        self.assertEqual([r.offset for r in second], [2, 3, 4])
        self.assertEqual(data[len(raw[0]) + 16:], raw[1][16:])  # only bytes 0-7 and 12-15 changed
        self.assertEqual(parse_batch_headers(data)[1].partition_leader_epoch, 9)

    def test_corrupt_crc_appends_nothing(self):
        log = self.make_log()
        log.append(batch(1), 0)
        bad = bytearray(batch(2))
        bad[-1] ^= 0x55
        self.assertRaises(CorruptRecordError, log.append, batch(1) + bytes(bad), 0)
        self.assertEqual(log.log_end_offset, 1)
        self.assertEqual(log.size_bytes, len(batch(1)))

    def test_too_large(self):
        log = self.make_log(max_message_bytes=200)
        self.assertRaises(RecordTooLargeError, log.append, batch(1, size=500), 0)
        self.assertEqual(log.log_end_offset, 0)

    def test_roll_by_size(self):
        one = batch(1, size=100)
        log = self.make_log(segment_bytes=len(one) * 3)
        for _ in range(10):
            log.append(one, 0)
        self.assertEqual([s.base_offset for s in log.segments], [0, 3, 6, 9])
        self.assertTrue(all(s.size_bytes <= len(one) * 3 for s in log.segments))
        self.assertEqual(sorted(n for n in os.listdir(log.directory) if n.endswith(".log"))[1],
                         "00000000000000000003.log")
        self.assertEqual(read_offsets(log, 0), list(range(10)))

    def test_roll_by_time(self):
        log = self.make_log(segment_ms=1000)
        log.append(batch(1), 0)
        self.clock.now += 500
        log.append(batch(1), 0)
        self.assertEqual(len(log.segments), 1)
        self.clock.now += 600
        log.append(batch(1), 0)
        self.assertEqual([s.base_offset for s in log.segments], [0, 2])

    def test_roll_when_index_full(self):
        log = self.make_log(index_interval_bytes=1, segment_index_bytes=8 * 2)
        for _ in range(8):
            log.append(batch(1), 0)
        self.assertGreater(len(log.segments), 1)
        self.assertEqual(read_offsets(log, 0), list(range(8)))

    def test_index_lookup_middle_of_many_segments(self):
        log = self.make_log(segment_bytes=4000, index_interval_bytes=200)
        for i in range(300):
            log.append(batch(2, size=30, ts=1_000_000 + i), 0)
        self.assertGreater(len(log.segments), 10)
        for offset in (0, 1, 137, 301, 302, 450, 599):
            regions = log.read(offset, 1)  # one batch (KIP-74)
            (h,) = parse_batch_headers(region_bytes(regions))
            self.assertTrue(h.base_offset <= offset <= h.last_offset, (offset, h))
            self.assertEqual(h.base_offset, offset - offset % 2)

    def test_max_bytes_whole_batches_and_kip74(self):
        one = batch(1, size=100)
        log = self.make_log()
        for _ in range(5):
            log.append(one, 0)
        self.assertEqual(read_offsets(log, 0, max_bytes=len(one) * 2 + 10), [0, 1])
        self.assertEqual(read_offsets(log, 0, max_bytes=10), [0])  # first batch even if bigger
        big = batch(1, size=5000)
        log.append(big, 0)
        self.assertEqual(read_offsets(log, 5, max_bytes=100), [5])
        self.assertEqual(read_offsets(log, 4, max_bytes=len(one) + 100), [4])

    def test_read_across_segments(self):
        one = batch(1, size=100)
        log = self.make_log(segment_bytes=len(one) * 2)
        for _ in range(6):
            log.append(one, 0)
        regions = log.read(1, 1 << 20)
        self.assertEqual(len(regions), 3)
        self.assertEqual(read_offsets(log, 1), [1, 2, 3, 4, 5])

    def test_max_offset(self):
        log = self.make_log()
        for _ in range(5):
            log.append(batch(2), 0)
        self.assertEqual(read_offsets(log, 0, max_offset=6), list(range(6)))
        self.assertEqual(read_offsets(log, 6, max_offset=6), [])
        log.update_high_watermark(4)
        self.assertEqual(read_offsets(log, 1, max_offset=log.high_watermark), [0, 1, 2, 3])

    def test_offset_out_of_range(self):
        log = self.make_log()
        log.append(batch(3), 0)
        self.assertEqual(log.read(3, 100), [])
        self.assertRaises(OffsetOutOfRangeError, log.read, 4, 100)
        self.assertRaises(OffsetOutOfRangeError, log.read, -1, 100)

    def test_offset_for_timestamp(self):
        log = self.make_log(segment_bytes=300, index_interval_bytes=100)
        for i in range(20):
            log.append(batch(2, ts=1000 + 10 * i), 0)
        self.assertEqual(log.offset_for_timestamp(0), (0, 1000))
        self.assertEqual(log.offset_for_timestamp(1055), (12, 1060))
        self.assertEqual(log.offset_for_timestamp(1190), (38, 1190))
        self.assertIsNone(log.offset_for_timestamp(1191))

    def test_offset_for_timestamp_finds_the_record_inside_a_batch(self):
        log = self.make_log()
        log.append(build_batch([(None, b"a"), (None, b"b"), (None, b"c")], timestamps_ms=[1000, 2000, 3000]), 0)
        log.append(build_batch([(None, b"d")], timestamp_ms=4000), 0)
        self.assertEqual(log.offset_for_timestamp(1000), (0, 1000))
        self.assertEqual(log.offset_for_timestamp(1500), (1, 2000))
        self.assertEqual(log.offset_for_timestamp(2001), (2, 3000))
        self.assertEqual(log.offset_for_timestamp(3500), (3, 4000))
        self.assertIsNone(log.offset_for_timestamp(4001))

    def test_log_append_time(self):
        log = self.make_log(message_timestamp_type="LogAppendTime")
        self.clock.now = 777_000
        result = log.append(batch(1, ts=5), 0)
        self.assertEqual(result.log_append_time_ms, 777_000)
        self.assertEqual(log.offset_for_timestamp(700_000), (0, 777_000))

    def test_log_append_time_stamps_the_batches(self):
        """Kafka's LogValidator: the attribute bit and maxTimestamp, with a CRC that still checks."""
        log = self.make_log(message_timestamp_type="LogAppendTime")
        self.clock.now = 777_000
        log.append(batch(3, ts=5, producer_id=7, producer_epoch=1, base_sequence=0), 0)
        [decoded] = decode_batches(region_bytes(log.read(0, 1 << 20)), verify_crc=True)
        self.assertEqual((decoded.timestamp_type, decoded.max_timestamp), (1, 777_000))
        self.assertEqual([r.timestamp_ms for r in decoded.records], [777_000] * 3)
        self.assertEqual((decoded.producer_id, decoded.producer_epoch, decoded.base_sequence), (7, 1, 0))
        self.assertEqual([r.key for r in decoded.records], [b"k0", b"k1", b"k2"])

    def test_compression_type_recompresses_other_codecs(self):
        log = self.make_log(compression_type="lz4")
        log.append(encode_batch([(b"a", b"x" * 100, [], 1000), (b"b", None, [("h", b"1")], 1001)],
                                compression=1), 0)
        log.append(encode_batch([(b"c", b"y", [], 1002)], compression=3), 0)  # lz4 already: kept
        decoded = decode_batches(region_bytes(log.read(0, 1 << 20)), verify_crc=True)
        self.assertEqual([d.compression for d in decoded], [3, 3])
        self.assertEqual([(r.offset, r.key, r.value, r.headers) for d in decoded for r in d.records],
                         [(0, b"a", b"x" * 100, []), (1, b"b", None, [("h", b"1")]), (2, b"c", b"y", [])])
        plain = self.make_log(path=self.mktemp(), compression_type="uncompressed")
        plain.append(encode_batch([(b"a", b"v", [], 1000)], compression=4), 0)
        [d] = decode_batches(region_bytes(plain.read(0, 1 << 20)))
        self.assertEqual((d.compression, d.records[0].value), (0, b"v"))

    def test_compression_levels(self):
        records = [(b"k%d" % i, b"value %d " % i * 20, [], 1000 + i) for i in range(50)]
        sizes = {}
        for codec, levels in (("gzip", (1, 9)), ("lz4", (1, 17)), ("zstd", (-5, 19))):
            for level in levels:
                log = self.make_log(path=self.mktemp(), compression_type=codec,
                                    **{f"compression_{codec}_level": level})
                log.append(encode_batch(records), 0)
                data = region_bytes(log.read(0, 1 << 20))
                [d] = decode_batches(data)
                self.assertEqual([r.value for r in d.records], [r[1] for r in records])
                sizes[codec, level] = len(data)
        self.assertGreater(sizes["gzip", 1], sizes["gzip", 9])
        self.assertGreater(sizes["zstd", -5], sizes["zstd", 19])

    def test_producer_compression_type_keeps_the_bytes(self):
        log = self.make_log(compression_type="producer")
        sent = encode_batch([(b"a", b"v", [], 1000)], compression=1)
        log.append(sent, 0)
        self.assertEqual(region_bytes(log.read(0, 1 << 20))[16:], sent[16:])

    def test_timestamp_bounds(self):
        log = self.make_log(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)
        self.clock.now = 10_000
        for ts in (8_999, 10_501):
            with self.assertRaises(KafkaError) as raised:
                log.append(batch(1, ts=ts), 0)
            self.assertEqual(raised.exception.error_code, ErrorCode.invalid_timestamp)
        self.assertEqual(log.log_end_offset, 0)
        log.append(batch(1, ts=9_000), 0)
        log.append(batch(1, ts=10_500), 0)
        # the deprecated difference applies to a bound left at its default
        old = self.make_log(path=self.mktemp(), message_timestamp_difference_max_ms=100)
        self.assertRaises(KafkaError, old.append, batch(1, ts=10_101), 0)
        # LogAppendTime topics are not checked
        stamped = self.make_log(path=self.mktemp(), message_timestamp_type="LogAppendTime",
                                message_timestamp_before_max_ms=0)
        stamped.append(batch(1, ts=1), 0)

    def test_flush_messages(self):
        log = self.make_log(flush_messages=3)
        log.append(batch(2), 0)
        self.assertEqual(log.recovery_point, 0)
        log.append(batch(1), 0)
        self.assertEqual(log.recovery_point, 3)

    def test_flush_ms(self):
        log = self.make_log(flush_ms=1000)
        log.append(batch(2), 0)
        self.assertFalse(log.maybe_flush(self.clock.now + 999))
        self.assertTrue(log.maybe_flush(self.clock.now + 1000))
        self.assertEqual(log.recovery_point, 2)

    def test_truncate_to(self):
        log = self.make_log(segment_bytes=300)
        for _ in range(10):
            log.append(batch(2), 0)
        log.truncate_to(9)  # mid-batch: the batch holding 8..9 goes too
        self.assertEqual(log.log_end_offset, 8)
        self.assertEqual(log.append(batch(1), 0).base_offset, 8)
        self.assertEqual(read_offsets(log, 0), list(range(9)))
        log.truncate_to(0)
        self.assertEqual((log.log_start_offset, log.log_end_offset), (0, 0))

    def test_a_read_stops_at_a_next_segments_batch_that_does_not_fit(self):
        """
        Issue 26: a read that reaches the end of a segment with bytes left,
        but fewer than the next segment's first batch, stops there; it used
        to go on to the segment after, skipping every batch in between.
        """
        small, large = batch(1, size=100), batch(1, size=3000)
        log = self.make_log(segment_bytes=len(small) * 2 + len(large))
        for _ in range(2):
            log.append(small, 0)
        log.roll()
        log.append(large, 0)
        log.append(small, 0)
        log.roll()
        for _ in range(2):
            log.append(small, 0)
        # [0 small, 1 small] | [2 large, 3 small] | [4 small, 5 small]
        self.assertEqual([s.base_offset for s in log.segments], [0, 2, 4])
        # from offset 1: the rest of the first segment and room for 500 bytes more: not for batch 2,
        # but for batch 4, which the old read returned after 1
        self.assertEqual(read_offsets(log, 1, max_bytes=len(small) + 500), [1])
        for min_one_batch in (True, False):
            regions = log.read(0, len(small) * 2 + 500, min_one_batch=min_one_batch)
            offsets = [h.base_offset for h in parse_batch_headers(region_bytes(regions))]
            self.assertEqual(offsets, [0, 1])
        # the next read starts at batch 2, and a read with room for it gets it and what follows
        self.assertEqual(read_offsets(log, 2, max_bytes=1), [2])
        self.assertEqual(read_offsets(log, 1, max_bytes=len(small) * 2 + len(large)), [1, 2, 3])
        self.assertEqual(read_offsets(log, 1), [1, 2, 3, 4, 5])
        # a later partition of a fetch (no KIP-74 minimum) reads nothing rather than something later
        self.assertEqual(log.read(2, len(large) - 1, min_one_batch=False), [])
        log.close()

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(sizes=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 400)), min_size=1, max_size=40),
           segment_bytes=st.integers(100, 3000), interval=st.integers(1, 1000))
    def test_property_every_offset_readable(self, sizes, segment_bytes, interval):
        log = self.make_log(path=self.mktemp(), segment_bytes=segment_bytes, index_interval_bytes=interval)
        expected = 0
        for count, size in sizes:
            result = log.append(batch(count, size=size), 0)
            self.assertEqual(result.base_offset, expected)
            expected += count
        self.assertEqual(read_offsets(log, 0), list(range(expected)))
        for offset in range(expected):
            data = region_bytes(log.read(offset, 1))
            (h,) = parse_batch_headers(data)
            self.assertTrue(h.base_offset <= offset <= h.last_offset)
        log.close()
        reopened = self.make_log(path=log.directory, clean=True, segment_bytes=segment_bytes,
                                 index_interval_bytes=interval)
        self.assertEqual(reopened.log_end_offset, expected)
        self.assertEqual(read_offsets(reopened, 0), list(range(expected)))
        reopened.close()


class RetentionTests(LogTestMixin, TestCase):
    def test_retention_by_time(self):
        one = batch(1, size=100)
        log = self.make_log(segment_bytes=len(one) * 2, retention_ms=10_000)
        for i in range(6):
            log.append(batch(1, size=100, ts=1000 * i), 0)
        self.assertEqual(len(log.segments), 3)  # [0,1] [2,3] [4,5]
        log.update_high_watermark(log.log_end_offset)  # retention deletes only below it
        self.assertEqual(log.apply_retention(11_000), 0)  # Kafka: deleted when now - max ts > retention.ms
        self.assertEqual(log.apply_retention(11_001), 1)
        self.assertEqual(log.log_start_offset, 2)
        self.assertEqual(log.apply_retention(1_000_000), 1)  # never the active segment
        self.assertEqual(log.log_start_offset, 4)
        self.assertRaises(OffsetOutOfRangeError, log.read, 3, 100)
        self.assertEqual(read_offsets(log, 4), [4, 5])

    def test_retention_by_bytes(self):
        one = batch(1, size=100)
        log = self.make_log(segment_bytes=len(one) * 2, retention_bytes=len(one) * 3, retention_ms=-1)
        for _ in range(7):
            log.append(one, 0)
        log.update_high_watermark(log.log_end_offset)  # retention deletes only below it
        self.assertEqual(log.apply_retention(self.clock.now), 2)
        self.assertEqual(log.log_start_offset, 4)
        self.assertEqual(log.size_bytes, len(one) * 3)

    def test_deleted_segment_regions_stay_readable(self):
        one = batch(1, size=100)
        log = self.make_log(segment_bytes=len(one), retention_bytes=0, retention_ms=-1)
        log.append(one, 0)
        log.append(one, 0)
        log.update_high_watermark(log.log_end_offset)  # retention deletes only below it
        regions = log.read(0, 1 << 20)
        log.apply_retention(0)
        self.assertFalse(os.path.exists(regions[0].path))
        self.assertEqual(len(region_bytes(regions[:1])), len(one))
        self.assertEqual(len(log._graveyard), 1)
        log.apply_retention(FILE_DELETE_DELAY_MS)
        self.assertEqual(log._graveyard, [])
        log.close()

    def test_file_delete_delay_ms(self):
        one = batch(1, size=100)
        log = self.make_log(segment_bytes=len(one), retention_bytes=0, retention_ms=-1, file_delete_delay_ms=10)
        log.append(one, 0)
        log.append(one, 0)
        log.update_high_watermark(log.log_end_offset)  # retention deletes only below it
        log.apply_retention(0)
        self.assertEqual(len(log._graveyard), 1)
        log.apply_retention(9)
        self.assertEqual(len(log._graveyard), 1)
        log.apply_retention(10)
        self.assertEqual(log._graveyard, [])
        log.close()


class RecoveryTests(LogTestMixin, TestCase):
    def fill(self, **config):
        log = self.make_log(segment_bytes=600, index_interval_bytes=100, **config)
        for _ in range(10):
            log.append(batch(2, size=40), 0)
        path, leo = log.directory, log.log_end_offset
        log.close()
        last = sorted(n for n in os.listdir(path) if n.endswith(".log"))[-1]
        return path, os.path.join(path, last), leo

    def assert_recovered_to(self, path, leo, **kw):
        log = self.make_log(path=path, segment_bytes=600, index_interval_bytes=100, **kw)
        self.assertEqual(log.log_end_offset, leo)
        self.assertEqual(read_offsets(log, 0), list(range(leo)))
        self.assertEqual(log.append(batch(1), 0).base_offset, leo)
        self.assertEqual(read_offsets(log, 0), list(range(leo + 1)))
        return log

    def test_torn_tail(self):
        path, last, leo = self.fill()
        os.truncate(last, os.path.getsize(last) - 5)
        self.assert_recovered_to(path, leo - 2)

    def test_garbage_appended(self):
        path, last, leo = self.fill()
        with open(last, "ab") as f:
            f.write(os.urandom(20) + b"\x00" * 100)
        log = self.assert_recovered_to(path, leo)
        self.assertEqual(log.recovered_segments, len(log.segments))

    def test_flipped_byte_in_last_batch(self):
        path, last, leo = self.fill()
        with open(last, "r+b") as f:
            f.seek(os.path.getsize(last) - 3)
            c = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([c[0] ^ 0xFF]))
        self.assert_recovered_to(path, leo - 2)

    def test_recovery_point_trusts_earlier_segments(self):
        path, last, leo = self.fill()
        log = self.make_log(path=path, recovery_point=leo - 2, segment_bytes=600, index_interval_bytes=100)
        self.assertEqual(log.recovered_segments, 1)
        self.assertEqual(log.log_end_offset, leo)

    def test_index_deleted_rebuilt(self):
        path, last, leo = self.fill()
        first_index = os.path.join(path, "00000000000000000000.index")
        entries = os.path.getsize(first_index)
        self.assertGreater(entries, 0)
        os.unlink(first_index)
        os.unlink(os.path.join(path, "00000000000000000000.timeindex"))
        log = self.make_log(path=path, clean=True, segment_bytes=600, index_interval_bytes=100)
        self.assertEqual(log.log_end_offset, leo)
        self.assertEqual(len(log.segments[0].offset_index) * 8, entries)
        self.assertEqual(read_offsets(log, 3, max_bytes=1), [2, 3])
        log.close()
        self.assertEqual(os.path.getsize(first_index), entries)

    def test_corrupt_index_rebuilt(self):
        path, last, leo = self.fill()
        first_index = os.path.join(path, "00000000000000000000.index")
        with open(first_index, "ab") as f:
            f.write(b"\x01\x02\x03")
        log = self.make_log(path=path, clean=True, segment_bytes=600, index_interval_bytes=100)
        self.assertEqual(read_offsets(log, 0), list(range(leo)))
        self.assertEqual(os.path.getsize(first_index) % 8, 0)

    def test_clean_shutdown_scans_nothing(self):
        """After a clean shutdown a CRC-corrupt last batch is kept: nothing was re-validated."""
        path, last, leo = self.fill()
        with open(last, "r+b") as f:
            f.seek(os.path.getsize(last) - 3)
            f.write(b"\xAA")
        log = self.make_log(path=path, clean=True, segment_bytes=600, index_interval_bytes=100)
        self.assertEqual(log.recovered_segments, 0)
        self.assertEqual(sum(s.recovered_batches for s in log.segments), 0)
        self.assertEqual(log.log_end_offset, leo)
        log.close()
        log = self.make_log(path=path, clean=False, segment_bytes=600, index_interval_bytes=100)
        self.assertEqual(log.log_end_offset, leo - 2)

    def test_a_segment_whose_predecessor_lost_its_tail_is_not_part_of_the_log(self):
        """
        A crash lost the unflushed tail of a rolled segment (cut cleanly at a
        batch boundary: nothing torn to notice) while the next segment's
        data survived: the offsets in between are gone, so recovery ends the
        log at the first segment's end instead of keeping a hole.
        """
        path, last, leo = self.fill()
        names = sorted(n for n in os.listdir(path) if n.endswith(".log"))
        self.assertGreaterEqual(len(names), 3)
        first = os.path.join(path, names[0])
        log = self.make_log(path=path, clean=True, segment_bytes=600, index_interval_bytes=100)
        first_end = log.segments[0].next_offset
        batch_bytes = os.path.getsize(first) // (first_end // 2)  # the fill's batches are all alike
        log.close()
        os.truncate(first, os.path.getsize(first) - batch_bytes)  # its last batch (2 records) lost
        self.assert_recovered_to(path, first_end - 2)
        self.assertEqual(sorted(n for n in os.listdir(path) if n.endswith(".log")), [names[0]])

    def test_a_compacted_log_keeps_its_gaps(self):
        path, last, leo = self.fill(cleanup_policy="compact")
        names = sorted(n for n in os.listdir(path) if n.endswith(".log"))
        first = os.path.join(path, names[0])
        log = self.make_log(path=path, clean=True, segment_bytes=600, index_interval_bytes=100,
                            cleanup_policy="compact")
        first_end = log.segments[0].next_offset
        batch_bytes = os.path.getsize(first) // (first_end // 2)
        log.close()
        os.truncate(first, os.path.getsize(first) - batch_bytes)  # as the cleaner may leave it
        log = self.make_log(path=path, segment_bytes=600, index_interval_bytes=100, cleanup_policy="compact")
        self.assertEqual(log.log_end_offset, leo)
        self.assertEqual(sorted(n for n in os.listdir(path) if n.endswith(".log")), names)


class FlushTests(LogTestMixin, TestCase):
    def test_a_rolled_segment_is_flushed_by_the_next_pass(self):
        """Kafka flushes a segment when it rolls: flush.ms (infinite by default) does not hold it back."""
        fsyncs = []
        files = LogDirFiles()
        files.fsync = lambda fd: (fsyncs.append(fd), os.fsync(fd))[1]
        self.clock = Clock()
        log = PartitionLog(self.mktemp(), "topic", 0, LogConfig(segment_bytes=600), now_ms=self.clock, files=files)
        log.append(batch(2, size=40), 0)
        self.assertFalse(log.maybe_flush(self.clock()))  # nothing rolled, flush.ms not reached
        while len(log.segments) < 2:
            log.append(batch(2, size=40), 0)
        active_base = log.segments[-1].base_offset
        self.assertLess(log.recovery_point, active_base)
        self.assertTrue(log.maybe_flush(self.clock()))
        self.assertEqual(log.recovery_point, active_base)
        self.assertEqual(len(fsyncs), 1)  # the rolled segment only; the active one waits for flush.ms
        self.assertFalse(log.maybe_flush(self.clock()))
        log.close()

class ProducerStateTests(LogTestMixin, TestCase):
    def idem(self, seq, n=2, epoch=0, pid=42):
        return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    def test_duplicate_returns_original_offsets(self):
        log = self.make_log()
        log.append(batch(3), 0)
        first = log.append(self.idem(0), 0)
        log.append(self.idem(2), 0)
        size = log.size_bytes
        again = log.append(self.idem(0), 0)
        self.assertTrue(again.duplicate)
        self.assertEqual((again.base_offset, again.last_offset), (first.base_offset, first.last_offset))
        self.assertEqual((log.size_bytes, log.log_end_offset), (size, 7))

    def test_gap(self):
        log = self.make_log()
        log.append(self.idem(0), 0)
        self.assertRaises(OutOfOrderSequenceError, log.append, self.idem(3), 0)
        self.assertEqual(log.log_end_offset, 2)

    def test_gap_within_one_request_writes_nothing(self):
        log = self.make_log()
        self.assertRaises(OutOfOrderSequenceError, log.append, self.idem(0) + self.idem(5), 0)
        self.assertEqual(log.log_end_offset, 0)
        log.append(self.idem(0) + self.idem(2), 0)
        self.assertEqual(log.log_end_offset, 4)

    def test_old_epoch(self):
        log = self.make_log()
        log.append(self.idem(0, epoch=3), 0)
        self.assertRaises(InvalidProducerEpochError, log.append, self.idem(2, epoch=2), 0)

    def test_new_epoch_must_start_at_zero(self):
        log = self.make_log()
        log.append(self.idem(0, epoch=3), 0)
        self.assertRaises(OutOfOrderSequenceError, log.append, self.idem(2, epoch=4), 0)
        self.assertEqual(log.append(self.idem(0, epoch=4), 0).base_offset, 2)

    def test_unknown_producer_any_sequence(self):
        log = self.make_log()
        self.assertEqual(log.append(self.idem(17), 0).base_offset, 0)
        self.assertEqual(log.append(self.idem(19), 0).base_offset, 2)

    def test_only_last_five_remembered(self):
        log = self.make_log()
        for i in range(6):
            log.append(self.idem(2 * i), 0)
        self.assertTrue(log.append(self.idem(2), 0).duplicate)
        self.assertRaises(OutOfOrderSequenceError, log.append, self.idem(0), 0)

    def test_sequence_wraps(self):
        self.assertEqual(increment_sequence(2**31 - 1, 1), 0)
        self.assertEqual(increment_sequence(2**31 - 2, 3), 1)
        log = self.make_log()
        log.append(self.idem(2**31 - 2, n=2), 0)
        self.assertEqual(log.append(self.idem(0), 0).base_offset, 2)

    def test_state_survives_reopen(self):
        log = self.make_log(segment_bytes=300)
        for i in range(4):
            log.append(self.idem(2 * i), 0)
        path = log.directory
        log.close()
        for clean in (True, False):
            log = self.make_log(path=path, clean=clean, segment_bytes=300)
            dup = log.append(self.idem(6), 0)
            self.assertTrue(dup.duplicate)
            self.assertEqual((dup.base_offset, dup.last_offset), (6, 7))
            self.assertRaises(OutOfOrderSequenceError, log.append, self.idem(10), 0)
            log.close()

    def test_clean_start_loads_the_snapshot_instead_of_replaying_batches(self):
        log = self.make_log()
        log.append(self.idem(0), 0)
        log.append(self.idem(2), 0)
        path = log.directory
        log.close()
        self.assertEqual([n for n in os.listdir(path) if n.endswith(".snapshot")], [f"{4:020d}.snapshot"])
        replayed = []
        original = ProducerStateManager.load_batch
        self.patch(ProducerStateManager, "load_batch", lambda self, h: replayed.append(h) or original(self, h))
        log = self.make_log(path=path, clean=True)
        self.assertEqual((log.producer_state_source, replayed), ("snapshot", []))
        self.assertTrue(log.append(self.idem(2), 0).duplicate)
        # kept (only a clean start uses it, and every clean shutdown writes it again)
        self.assertEqual([n for n in os.listdir(path) if n.endswith(".snapshot")], [f"{4:020d}.snapshot"])
        log.append(self.idem(4), 0)
        log.close()  # a new state at a new offset: the old snapshot goes
        self.assertEqual([n for n in os.listdir(path) if n.endswith(".snapshot")], [f"{6:020d}.snapshot"])

    def test_an_unchanged_log_rewrites_no_snapshot_at_its_clean_shutdown(self):
        log = self.make_log()
        log.append(self.idem(0), 0)
        path = log.directory
        log.close()
        snapshot = os.path.join(path, f"{2:020d}.snapshot")
        inode = os.stat(snapshot).st_ino
        log = self.make_log(path=path, clean=True)
        self.assertEqual(log.producer_state_source, "snapshot")
        log.close()
        self.assertEqual(os.stat(snapshot).st_ino, inode)  # not replaced
        log = self.make_log(path=path, clean=False)  # an unclean start: scanned, then written again
        self.assertEqual(log.producer_state_source, "scan")
        log.close()
        self.assertNotEqual(os.stat(snapshot).st_ino, inode)
        log = self.make_log(path=path, clean=True)
        self.assertTrue(log.append(self.idem(0), 0).duplicate)
        log.close()

    def test_unclean_start_ignores_a_stale_snapshot(self):
        log = self.make_log()
        log.append(self.idem(0), 0)
        path = log.directory
        log.close()  # snapshot at offset 2
        log = self.make_log(path=path, clean=True)
        log.append(self.idem(2), 0)  # not in the old snapshot; then a crash (no close)
        with open(os.path.join(path, f"{2:020d}.snapshot"), "wb") as f:
            f.write(b'{"version":1,"offset":2,"producers":[]}')
        log = self.make_log(path=path, clean=False)
        self.assertEqual(log.producer_state_source, "scan")
        self.assertTrue(log.append(self.idem(2), 0).duplicate)


class LogManagerTests(TestCase):
    def setUp(self):
        self.clock = Clock()
        self.dirs = [self.mktemp(), self.mktemp()]
        self.config = {"segment.bytes": "1000", "index.interval.bytes": 100, "retention.ms": 10_000,
                       "cleanup.policy": "delete"}

    def manager(self):
        m = LogManager(self.dirs, self.config, self.clock)
        m.load()
        return m

    def test_checkpoint_round_trip(self):
        path = self.mktemp()
        os.makedirs(path)
        file = os.path.join(path, CHECKPOINT_FILE)
        offsets = {("a-b", 0): 5, ("c", 12): 0}
        write_checkpoint(file, offsets)
        with open(file) as f:
            self.assertEqual(f.read(), "0\n2\na-b 0 5\nc 12 0\n")
        self.assertEqual(read_checkpoint(file), offsets)
        self.assertEqual(read_checkpoint(file + ".missing"), {})

    def test_placement_and_clean_restart(self):
        m = self.manager()
        logs = [m.get_or_create("orders-eu", p, {"segment.bytes": 500}) for p in range(4)]
        self.assertEqual(sorted(os.listdir(self.dirs[0])), ["orders-eu-0", "orders-eu-2"])
        self.assertEqual(logs[0].config.segment_bytes, 500)
        for log in logs:
            for _ in range(5):
                log.append(batch(2, size=50), 0)
        self.assertIs(m.get("orders-eu", 1), logs[1])
        self.assertIsNone(m.get("orders-eu", 9))
        m.close()
        for d in self.dirs:
            self.assertTrue(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)))
            self.assertEqual(set(read_checkpoint(os.path.join(d, CHECKPOINT_FILE)).values()), {10})
        m2 = self.manager()
        self.assertEqual(len(m2.all_logs()), 4)
        for log in m2.all_logs():
            self.assertEqual(log.recovered_segments, 0)
            self.assertEqual(log.log_end_offset, 10)
        for d in self.dirs:
            self.assertFalse(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)))
        m2.close()

    def test_background_sync_of_leader_epoch_assignments(self):
        """
        C{leader_epoch_syncs()} lists the checkpoints holding unsynced assignments that its previous
        call saw unsynced too, and returns their sync, for the thread pool: an assignment is synced
        by the second call after it; a directory whose sync fails is named in the error (for the
        failure channel), the others are synced.
        """
        from kafkatw.storage import leader_epoch as leader_epoch_module
        from kafkatw.storage.log_dir_failure import LogDirsFailedError

        m = self.manager()
        self.addCleanup(m.close)
        logs = [m.get_or_create("orders", p, {}) for p in range(4)]
        for log in logs[:3]:
            log.maybe_assign_epoch_start_offset(1, 0)
        m.leader_epoch_syncs()()  # seen now: synced by the next call
        self.assertEqual([log.leader_epoch_cache.unsynced for log in logs], [True, True, True, False])
        logs[3].maybe_assign_epoch_start_offset(1, 0)
        sync = m.leader_epoch_syncs()
        logs[0].maybe_assign_epoch_start_offset(2, 0)  # after the listing: still synced by it (a later write)
        sync()
        self.assertEqual([log.leader_epoch_cache.unsynced for log in logs], [False, False, False, True])
        m.leader_epoch_syncs()()
        self.assertEqual([log.leader_epoch_cache.unsynced for log in logs], [False] * 4)
        for log in logs:
            log.maybe_assign_epoch_start_offset(3, 0)
        m.leader_epoch_syncs()
        failing = os.path.abspath(self.dirs[1])
        real_sync = leader_epoch_module.sync_file

        def sync_file(path, *args, **kwargs):
            if path.startswith(failing):
                raise OSError(5, "Input/output error")
            return real_sync(path, *args, **kwargs)

        self.patch(leader_epoch_module, "sync_file", sync_file)
        with self.assertRaises(LogDirsFailedError) as caught:
            m.leader_epoch_syncs()()
        self.assertEqual(list(caught.exception.failures), [self.dirs[1]])
        self.assertEqual({log.directory.startswith(failing): log.leader_epoch_cache.unsynced for log in logs},
                         {True: True, False: False})

    def test_unclean_restart_recovers_from_checkpoint(self):
        m = self.manager()
        log = m.get_or_create("t", 0, {})
        for _ in range(30):
            log.append(batch(1, size=50), 0)
        log.flush()
        m.checkpoint_recovery_points()
        for _ in range(3):
            log.append(batch(1, size=50), 0)
        segments = len(log.segments)
        # crash: no close
        for s in log.segments:
            s.close()
        m2 = self.manager()
        log2 = m2.get("t", 0)
        self.assertEqual(log2.log_end_offset, 33)
        self.assertLess(log2.recovered_segments, segments)
        self.assertGreaterEqual(log2.recovered_segments, 1)
        m2.close()

    def test_retention_flush_update_config_delete(self):
        m = self.manager()
        log = m.get_or_create("t", 0, {})
        for i in range(20):
            log.append(batch(1, size=50, ts=1000 + i), 0)
        log.update_high_watermark(log.log_end_offset)  # retention deletes only below it
        self.assertEqual(m.run_retention(5000), 0)
        deleted = m.run_retention(1_000_000)
        self.assertGreater(deleted, 0)
        self.assertEqual(len(log.segments), 1)
        self.assertGreater(log.log_start_offset, 0)
        m.update_config("t", {"flush.ms": 10})
        self.assertEqual(log.config.flush_ms, 10)
        self.assertEqual(log.config.segment_bytes, 1000)
        log.append(batch(1), 0)
        self.assertEqual(m.flush_dirty(self.clock.now + 100), 1)
        self.assertEqual(log.recovery_point, log.log_end_offset)
        path = log.directory
        self.assertTrue(m.delete("t", 0))
        self.assertFalse(os.path.exists(path))
        self.assertIsNone(m.get("t", 0))
        m.close()


class CheckpointSkipTests(unittest.TestCase):
    def test_unchanged_checkpoints_are_not_rewritten(self) -> None:
        """An idle broker's periodic checkpoints cost no write (and no fsync)."""
        from kafkatw.storage.log_manager import HIGH_WATERMARK_CHECKPOINT_FILE, LogManager

        directory = tempfile.mkdtemp(prefix="kafkatw-checkpoint-test-")
        self.addCleanup(shutil.rmtree, directory, True)
        manager = LogManager([directory], {}, now_ms=lambda: 0)
        manager.load()
        log = manager.get_or_create("t", 0)
        path = os.path.join(directory, HIGH_WATERMARK_CHECKPOINT_FILE)
        manager.checkpoint_high_watermarks()
        first = os.stat(path).st_ino
        manager.checkpoint_high_watermarks()
        self.assertEqual(os.stat(path).st_ino, first)  # not replaced
        log.append(build_batch([(None, b"x")]), 0)
        log.update_high_watermark(1)
        manager.checkpoint_high_watermarks()
        self.assertNotEqual(os.stat(path).st_ino, first)
        with open(path) as f:
            self.assertEqual(f.read().split("\n")[2], "t 0 1")
        manager.close()

    def _manager_with_log(self):
        from kafkatw.storage.log_manager import LogManager

        directory = tempfile.mkdtemp(prefix="kafkatw-checkpoint-test-")
        self.addCleanup(shutil.rmtree, directory, True)
        manager = LogManager([directory], {}, now_ms=lambda: 0)
        manager.load()
        self.addCleanup(manager.close)
        log = manager.get_or_create("t", 0)
        log.append(build_batch([(None, b"x"), (None, b"y")]), 0)
        return directory, manager, log

    def test_offsets_are_read_when_prepared_and_written_when_called(self) -> None:
        """The broker reads the offsets on its reactor and writes them on a thread, later."""
        from kafkatw.storage.log_manager import HIGH_WATERMARK_CHECKPOINT_FILE, read_checkpoint

        directory, manager, log = self._manager_with_log()
        path = os.path.join(directory, HIGH_WATERMARK_CHECKPOINT_FILE)
        log.update_high_watermark(1)
        write = manager.high_watermark_checkpoints()
        log.update_high_watermark(2)  # after the read: not in this write
        self.assertFalse(os.path.exists(path))
        write()
        self.assertEqual(read_checkpoint(path), {("t", 0): 1})
        manager.high_watermark_checkpoints()()
        self.assertEqual(read_checkpoint(path), {("t", 0): 2})

    def test_failed_write_is_written_again_next_time(self) -> None:
        from unittest import mock

        from kafkatw.storage import log_manager
        from kafkatw.storage.log_manager import CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE, read_checkpoint

        from kafkatw.storage.log_dir_failure import LogDirsFailedError

        directory, manager, log = self._manager_with_log()
        log.flush()
        with mock.patch.object(log_manager, "write_checkpoint", side_effect=OSError("disk full")):
            # the directories whose write failed, for the broker to take offline (KIP-112)
            failed = self.assertRaises(LogDirsFailedError, manager.recovery_point_checkpoints())
        self.assertEqual(list(failed.failures), [directory])
        # unchanged offsets, but neither file was written: both are written now
        manager.recovery_point_checkpoints()()
        self.assertEqual(read_checkpoint(os.path.join(directory, CHECKPOINT_FILE)), {("t", 0): 2})
        self.assertEqual(read_checkpoint(os.path.join(directory, LOG_START_OFFSET_CHECKPOINT_FILE)), {("t", 0): 0})


def _log_files(directory):
    """Every file of a log directory: name -> bytes (the checkpoint of leader epochs included)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


class DeferredWriteTests(LogTestMixin, TestCase):
    """
    C{append(..., write=False)} then C{write_pending()} (the broker's
    L{kafkatw.broker.apis.ProduceRun}): the same log, byte for byte, as
    appending one by one.
    """

    def pair(self, **config):
        return self.make_log(path=self.mktemp(), **config), self.make_log(path=self.mktemp(), **config)

    def assert_same(self, deferred, reference):
        self.assertEqual(deferred.log_end_offset, reference.log_end_offset)
        self.assertEqual([s.base_offset for s in deferred.segments], [s.base_offset for s in reference.segments])
        for d, r in zip(deferred.segments, reference.segments):
            self.assertEqual((d.size_bytes, d.next_offset, d.largest_timestamp_ms),
                             (r.size_bytes, r.next_offset, r.largest_timestamp_ms))
        deferred.flush()
        reference.flush()
        for log in (deferred, reference):
            for segment in log.segments:
                segment.offset_index.flush(fsync=False)
                segment.time_index.flush(fsync=False)
        self.assertEqual(_log_files(deferred.directory), _log_files(reference.directory))

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 300), st.booleans()), min_size=1, max_size=30),
           segment_bytes=st.integers(200, 3000), interval=st.integers(1, 600))
    def test_same_log_as_one_by_one(self, sizes, segment_bytes, interval):
        """Offsets, segments (rolls in the middle included), indexes, epochs: as appending one by one."""
        deferred, reference = self.pair(segment_bytes=segment_bytes, index_interval_bytes=interval)
        ts = 1_000_000
        for i, (count, size, write_now) in enumerate(sizes):
            ts += i % 3
            epoch = i // 10  # a new leader epoch now and then
            records = batch(count, size=size, ts=ts)
            a = deferred.append(records, epoch, write=False)
            b = reference.append(records, epoch)
            self.assertEqual(a, b)
            if write_now:
                deferred.write_pending()
                self.assertFalse(deferred.has_pending)
        deferred.write_pending()
        self.assert_same(deferred, reference)
        self.assertEqual(deferred.leader_epoch_cache.entries, reference.leader_epoch_cache.entries)
        self.assertEqual(read_offsets(deferred, 0), read_offsets(reference, 0))
        deferred.close()
        reference.close()

    def test_nothing_in_the_file_until_written(self):
        log = self.make_log()
        log.append(batch(2), 0, write=False)
        log.append(batch(3), 0, write=False)
        self.assertEqual(log.log_end_offset, 5)
        self.assertTrue(log.has_pending)
        self.assertEqual(os.path.getsize(log.active_segment.path), 0)
        log.write_pending()
        self.assertEqual(os.path.getsize(log.active_segment.path), log.active_segment.size_bytes)
        self.assertEqual(read_offsets(log, 0), list(range(5)))

    def test_a_read_writes_what_is_pending_first(self):
        log = self.make_log()
        log.append(batch(2), 0, write=False)
        self.assertEqual(read_offsets(log, 0), [0, 1])
        self.assertFalse(log.has_pending)

    def test_roll_writes_the_old_segment_first(self):
        size = len(batch(1, size=100))
        log = self.make_log(segment_bytes=2 * size + 10)
        for _ in range(4):
            log.append(batch(1, size=100), 0, write=False)
        self.assertEqual(len(log.segments), 2)
        old = log.segments[0]
        self.assertEqual(os.path.getsize(old.path), old.size_bytes)  # written when the new segment began
        self.assertEqual(old.size_bytes, 2 * size)
        self.assertEqual(os.path.getsize(log.active_segment.path), 0)
        log.write_pending()
        self.assertEqual(read_offsets(log, 0), [0, 1, 2, 3])

    def test_flush_messages_writes_and_flushes_each_append(self):
        log = self.make_log(flush_messages=1)
        log.append(batch(2), 0, write=False)
        self.assertFalse(log.has_pending)
        self.assertEqual(log.recovery_point, 2)

    def test_failed_write_truncates_to_what_was_written(self):
        log = self.make_log()
        log.append(batch(2), 0)
        written = log.active_segment.size_bytes
        log.append(batch(3), 0, write=False)
        log.append(batch(1), 0, write=False)
        self.addCleanup(log.files.heal)
        log.files.fail("writev", 28)  # the log dir's file operations (kafkatw/storage/log_dir_failure.py)
        self.assertRaises(KafkaStorageError, log.write_pending)
        self.assertEqual(log.log_end_offset, 2)
        self.assertEqual(log.active_segment.size_bytes, written)
        self.assertEqual(os.path.getsize(log.active_segment.path), written)
        self.assertFalse(log.has_pending)
        self.assertEqual(log.append(batch(1), 0).base_offset, 2)  # the offsets are free again

    def test_failed_roll_write_refuses_the_rest_until_reported(self):
        log = self.make_log(segment_bytes=2 * len(batch(1, size=100)) + 10)
        log.append(batch(1, size=100), 0, write=False)
        log.append(batch(1, size=100), 0, write=False)
        self.patch(log.files, "writev", _failing_writev)
        self.assertRaises(KafkaStorageError, log.append, batch(1, size=100), 0, write=False)  # the roll's write
        self.assertEqual(log.log_end_offset, 0)
        self.assertRaises(KafkaStorageError, log.append, batch(1), 0, write=False)
        self.assertRaises(KafkaStorageError, log.write_pending)
        self.assertFalse(log.has_pending)
        self.assertEqual([s.size_bytes for s in log.segments], [0])
        self.assertEqual(log.append(batch(1), 0, write=False).base_offset, 0)  # reported: appends again

    def test_writev_of_more_buffers_than_iov_max_and_short_writes(self):
        log = self.make_log()
        real_writev = os.writev

        def short_writev(fd, buffers):
            return real_writev(fd, list(buffers)[: max(1, len(buffers) // 2)])

        self.patch(log.files, "writev", short_writev)
        segment = log.active_segment
        pieces = [bytes([i % 256]) * (segment_module._COPY_MAX + 1 + i % 3) for i in range(2100)]
        headers = parse_batch_headers(build_batch([(None, b"x")], timestamp_ms=1))
        segment.append(pieces, headers, sum(len(p) for p in pieces), write=False)
        segment.write_pending()
        with open(segment.path, "rb") as f:
            self.assertEqual(f.read(), b"".join(pieces))


def _failing_writev(fd, buffers):
    raise OSError(28, "No space left on device")


class DeferredWriteGuardTests(LogTestMixin, TestCase):
    def test_segment_truncation_writes_what_is_pending_first(self):
        log = self.make_log()
        log.append(batch(2), 0, write=False)
        log.append(batch(1), 0, write=False)
        log.active_segment.truncate_to(2)
        self.assertEqual(log.active_segment.next_offset, 2)
        self.assertEqual(read_offsets(log, 0), [0, 1])
        self.assertEqual(os.path.getsize(log.active_segment.path), log.active_segment.size_bytes)


class AppendManyTests(LogTestMixin, TestCase):
    """
    L{PartitionLog.append_many} (a Produce run's appends to one partition):
    the same results, log and files as one C{append(..., write=False)} per
    item, whatever the items and the configuration.
    """

    def pair(self, **config):
        return self.make_log(path=self.mktemp(), **config), self.make_log(path=self.mktemp(), **config)

    @staticmethod
    def append_both(many, reference, items, epoch):
        """
        (what C{many.append_many(items, epoch)} returned, and what appending each
        item to C{reference} gave: an AppendResult or C{(error type, message)});
        both logs' pending bytes written.
        """
        expected = []
        for records in items:
            try:
                expected.append(reference.append(records, epoch, write=False))
            except KafkaError as e:
                expected.append((type(e), str(e)))
        reference.write_pending()
        got = many.append_many(items, epoch)
        many.write_pending()
        return got, expected

    def item(self, kind, i, pid_state):
        ts = 1_000_000 + i
        if kind == "plain":
            return batch(1 + i % 3, size=20 + i % 50, ts=ts)
        if kind == "two":
            return batch(2, ts=ts) + batch(1, ts=ts + 5)
        if kind == "big":  # above the size copied into one buffer (and above max_message_bytes=20000 with two)
            return batch(1 + i % 2, size=17000, ts=ts)
        if kind == "magic1":
            data = bytearray(batch(1, ts=ts))
            data[16] = 1
            return bytes(data)
        if kind == "count":  # a record count that disagrees with the last offset delta (CRC fixed up)
            data = bytearray(batch(2, ts=ts))
            data[57:61] = (3).to_bytes(4, "big")
            data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
            return bytes(data)
        if kind == "corrupt":
            data = bytearray(batch(1, ts=ts))
            data[-1] ^= 1
            return bytes(data)
        if kind == "control":
            return batch(1, ts=ts, attributes=0x20)
        if kind == "empty":
            return b""
        if kind == "view":  # as a Produce request's records arrive: a view into the request's frame
            return memoryview(b"\0\0\0" + batch(1 + i % 2, size=30, ts=ts) + b"\0")[3:-1]
        if kind == "bytearray":
            return bytearray(batch(1, ts=ts))
        sequence = pid_state[0]
        pid_state[0] += 2 if kind == "idempotent" else 0  # "retry": the same sequence again
        return batch(2, ts=ts, producer_id=7, producer_epoch=0, base_sequence=sequence)

    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])  # the pure-Python subclass
    @given(runs=st.lists(st.lists(st.sampled_from([
                             "plain", "plain", "plain", "two", "big", "corrupt", "control", "empty", "idempotent",
                             "retry", "magic1", "count", "view", "bytearray"]), min_size=1, max_size=12),
                         min_size=1, max_size=5),
           segment_bytes=st.sampled_from([150, 1000, 4000, 100000]), interval=st.integers(1, 600),
           index_bytes=st.sampled_from([24, 48, 10485760]), flush_messages=st.sampled_from([7, 2**63 - 1]),
           compact=st.booleans(), epoch_step=st.integers(1, 20), max_message_bytes=st.sampled_from([20000, 10**6]))
    def test_same_as_one_append_per_item(self, runs, segment_bytes, interval, index_bytes, flush_messages, compact,
                                         epoch_step, max_message_bytes):
        config = dict(segment_bytes=segment_bytes, index_interval_bytes=interval, segment_index_bytes=index_bytes,
                      flush_messages=flush_messages, max_message_bytes=max_message_bytes)
        if compact:
            config["cleanup_policy"] = "compact"
        many, reference = self.pair(**config)
        pids = [[0], [0]]
        i = 0
        for n, kinds in enumerate(runs):
            epoch = n // epoch_step
            items = []
            for kind in kinds:
                items.append(self.item(kind, i, pids[0]))
                i += 1
            got, expected = self.append_both(many, reference, items, epoch)
            self.assertEqual([r if isinstance(r, tuple) and not isinstance(r, Exception) else (type(r), str(r))
                              for r in got], expected)
        DeferredWriteTests.assert_same(self, many, reference)
        self.assertEqual(many.leader_epoch_cache.entries, reference.leader_epoch_cache.entries)
        self.assertEqual(read_offsets(many, 0), read_offsets(reference, 0))
        many.close()
        reference.close()

    def test_every_kind_in_one_run(self):
        """Each item refused or appended as by L{PartitionLog.append}, the plain ones around them grouped."""
        kinds = ["plain", "idempotent", "plain", "retry", "big", "big", "plain", "magic1", "count", "control", "corrupt",
                 "empty", "two", "plain", "idempotent", "idempotent", "retry", "plain", "view", "bytearray", "view"]
        for epoch in (-1, 0, 5):
            many, reference = self.pair(max_message_bytes=20000)
            pid = [0]
            items = [self.item(kind, i, pid) for i, kind in enumerate(kinds)]
            got, expected = self.append_both(many, reference, items, epoch)
            self.assertEqual([r if not isinstance(r, Exception) else (type(r), str(r)) for r in got], expected)
            self.assertEqual(sum(1 for r in got if isinstance(r, Exception)), 6)
            self.assertEqual(sum(1 for r in got if not isinstance(r, Exception) and r.duplicate), 1)
            DeferredWriteTests.assert_same(self, many, reference)
            self.assertEqual(many.leader_epoch_cache.entries, reference.leader_epoch_cache.entries)
            self.assertEqual(many.producer_state.snapshot(many.log_end_offset),
                             reference.producer_state.snapshot(reference.log_end_offset))
            many.close()
            reference.close()

    def test_a_negative_max_message_bytes_refuses_every_batch(self):
        """As one append per item does (C{RecordTooLargeError}), compiled loop or not."""
        many, reference = self.pair(max_message_bytes=-1)
        got, expected = self.append_both(many, reference, [batch(1), batch(2)], 0)
        self.assertEqual([(type(r), str(r)) for r in got], expected)
        self.assertEqual([kind for kind, _ in expected], [RecordTooLargeError] * 2)
        self.assertEqual(many.log_end_offset, 0)
        many.close()
        reference.close()

    def test_one_group_is_one_segment_append(self):
        """Plain one-batch items: one roll check and one segment append for the run."""
        log = self.make_log()
        calls = []
        append = log.active_segment.append
        log.active_segment.append = lambda *a, **kw: calls.append(len(a[1])) or append(*a, **kw)
        results = log.append_many([batch(1, ts=1_000_000 + i) for i in range(10)], 3)
        self.assertEqual(calls, [10])
        self.assertEqual([r.base_offset for r in results], list(range(10)))
        log.write_pending()
        self.assertEqual(read_offsets(log, 0), list(range(10)))
        self.assertEqual(log.leader_epoch_cache.entries, [(3, 0)])
        log.close()

    def test_a_run_that_would_roll_goes_one_by_one(self):
        log = self.make_log(segment_bytes=3 * len(batch(1)))
        results = log.append_many([batch(1) for _ in range(7)], 0)
        log.write_pending()
        self.assertEqual([r.base_offset for r in results], list(range(7)))
        self.assertEqual([s.base_offset for s in log.segments], [0, 3, 6])
        log.close()

    def test_a_time_index_filling_up_in_a_run_rolls_as_one_by_one(self):
        many, reference = self.pair(segment_index_bytes=48)  # 4 time index entries, 6 offset index entries
        items = [batch(1, ts=1_000_000 + i) for i in range(5)]
        for records in items:
            reference.append(records, 0, write=False)
        reference.write_pending()
        many.append_many(items, 0)
        many.write_pending()
        self.assertEqual(len(reference.segments), 2)
        DeferredWriteTests.assert_same(self, many, reference)
        many.close()
        reference.close()


class AppendManyPurePythonTests(AppendManyTests):
    """L{AppendManyTests} with the Python loop alone (as without the compiled accelerator)."""

    def setUp(self):
        self.patch(log_module, "_simple_batches", None)


class CompiledAppendTests(TestCase):
    """
    C{append_simple_batches} (kafkatw/protocol/_speedups.c), the compiled
    loop of L{PartitionLog.append_many}; L{AppendManyTests} checks its results
    against one append per item.  Without the extension these tests skip,
    unless C{KAFKATW_REQUIRE_SPEEDUPS=1} (CI), which makes its absence a failure
    (L{compiled_speedups}).
    """

    def setUp(self):
        self.scan = compiled_speedups().append_simple_batches

    def test_append_many_uses_it(self):
        """The log takes the compiled loop whenever the extension is in use (not ignored with C{KAFKATW_PURE_PYTHON})."""
        self.assertIs(log_module._simple_batches, self.scan if records_module.SPEEDUPS else None)

    def run_scan(self, items, next_offset=0, leader_epoch=4, max_bytes=-1, copy_max=16384):
        data, patched, group, out = bytearray(), [], [], []
        got = self.scan(items, 0, next_offset, leader_epoch, max_bytes, copy_max, data, patched, group, out, 0,
                        log_module.BatchHeader, crc32c)
        return got, bytes(data), patched, group, out

    def test_patched_bytes_and_headers(self):
        """Each batch's base offset and leader epoch rewritten, its header as parse_batch_headers reads it."""
        items = [batch(2, ts=5), memoryview(batch(1, size=3)), bytearray(batch(3, ts=7))]
        (stop, next_offset, end), data, patched, group, out = self.run_scan(items, next_offset=100)
        self.assertEqual((stop, next_offset, end), (3, 106, sum(len(x) for x in items)))
        headers = parse_batch_headers(data)
        self.assertEqual(patched, headers)
        self.assertEqual([(h.base_offset, h.partition_leader_epoch) for h in headers], [(100, 4), (102, 4), (103, 4)])
        self.assertEqual(data, b"".join(struct.pack(">qii", offset, len(item) - 12, 4) + bytes(item)[16:]
                                        for offset, item in zip((100, 102, 103), items)))
        self.assertEqual([(g[0], g[2], g[3], g[4]) for g in group],
                         [(0, 102, len(items[0]), 1), (1, 103, len(items[0]) + len(items[1]), 1), (2, 106, end, 1)])
        self.assertIs(group[1][1], items[1])
        self.assertEqual(out, [None, None, None])

    def test_stops_at_what_python_takes(self):
        """Anything but a plain batch within the limits ends the loop at that item, nothing of it appended."""
        plain = batch(1)
        corrupt = bytearray(plain)
        corrupt[-1] ^= 1
        two = plain + batch(1)
        cases = {"corrupt": (bytes(corrupt), {}), "two batches": (two, {}), "short": (plain[:60], {}),
                 "control": (batch(1, attributes=0x20), {}), "producer id": (batch(1, producer_id=3), {}),
                 "over max.message.bytes": (plain, {"max_bytes": len(plain) - 1}),
                 "over the copy size": (plain, {"copy_max": len(plain) - 1}), "not a buffer": ("text", {}),
                 "offsets past 64 bits": (plain, {"next_offset": 2**63 - 1})}
        for name, (item, options) in cases.items():
            (stop, next_offset, end), data, patched, group, out = self.run_scan([item, plain], **options)
            self.assertEqual((stop, data, patched, group, out), (0, b"", [], [], []), name)
            self.assertEqual((next_offset, end), (options.get("next_offset", 0), 0), name)
        (stop, next_offset, _), data, _, _, out = self.run_scan([plain, bytes(corrupt), plain])
        self.assertEqual((stop, next_offset, len(data), out), (1, 1, len(plain), [None]))

    def test_any_buffer(self):
        """An item that only exports a buffer (no slicing): its CRC is taken over a view of it, as in Python."""
        item = pickle.PickleBuffer(batch(2))
        (stop, next_offset, end), data, patched, _, _ = self.run_scan([item])
        self.assertEqual((stop, next_offset, end, len(patched)), (1, 2, len(batch(2)), 1))
        self.assertEqual(data, batch(2)[:12] + struct.pack(">i", 4) + batch(2)[16:])

    def test_crc32c_error_propagates(self):
        def broken(data):
            raise ZeroDivisionError("crc")
        with self.assertRaises(ZeroDivisionError):
            self.scan([batch(1)], 0, 0, 0, -1, 16384, bytearray(), [], [], [], 0, log_module.BatchHeader, broken)
