"""
Tests for L{kafkatw.protocol.batch}.
"""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from twisted.trial.unittest import TestCase

from kafkatw.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from kafkatw.protocol.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    _parse_batches,
    build_batch,
    parse_batch_headers,
    patch_batch,
    scan_valid_prefix,
)


def kafka_python_batch(count=3, producer_id=-1, producer_epoch=-1, base_sequence=-1, transactional=False,
                       compression=0):
    builder = DefaultRecordBatchBuilder(2, compression, transactional, producer_id, producer_epoch, base_sequence,
                                        1 << 20)
    for i in range(count):
        builder.append(i, 1000 + i, b"key%d" % i, b"value%d" % i, [])
    return bytes(builder.build())


class BuildBatchTests(TestCase):
    def test_kafka_python_reads_it(self):
        """kafka-python iterates the records of L{build_batch} and validates its CRC."""
        records = [(b"k", b"v"), (None, b"x" * 300), (b"kk", None), (b"", b"")]
        raw = build_batch(records, base_offset=5, timestamp_ms=1234, producer_id=9, producer_epoch=2,
                          base_sequence=7)
        batch = DefaultRecordBatch(raw)
        self.assertTrue(batch.validate_crc())
        self.assertEqual(batch.producer_id, 9)
        self.assertEqual(batch.base_sequence, 7)
        got = [(r.offset, r.key, r.value, r.timestamp) for r in batch]
        self.assertEqual(got, [(5 + i, k, v, 1234) for i, (k, v) in enumerate(records)])

    def test_per_record_timestamps(self):
        raw = build_batch([(None, b"a"), (None, b"b")], timestamps_ms=[100, 300])
        (h,) = parse_batch_headers(raw)
        self.assertEqual((h.base_timestamp, h.max_timestamp), (100, 300))
        self.assertEqual([r.timestamp for r in DefaultRecordBatch(raw)], [100, 300])

    def test_empty_refused(self):
        self.assertRaises(ValueError, build_batch, [])


class ParseBatchHeadersTests(TestCase):
    def test_kafka_python_batches(self):
        """Headers of batches built by kafka-python are parsed with their positions and sizes."""
        a = kafka_python_batch(3, producer_id=7, producer_epoch=1, base_sequence=0)
        b = kafka_python_batch(1, transactional=True, producer_id=7, producer_epoch=1, base_sequence=3)
        c = kafka_python_batch(5, compression=DefaultRecordBatchBuilder.CODEC_GZIP)
        headers = parse_batch_headers(a + b + c)
        self.assertEqual([h.position for h in headers], [0, len(a), len(a) + len(b)])
        self.assertEqual([h.size for h in headers], [len(a), len(b), len(c)])
        first = headers[0]
        self.assertEqual((first.magic, first.record_count, first.last_offset_delta, first.last_offset),
                         (2, 3, 2, 2))
        self.assertEqual((first.producer_id, first.producer_epoch, first.base_sequence), (7, 1, 0))
        self.assertEqual((first.base_timestamp, first.max_timestamp), (1000, 1002))
        self.assertFalse(first.is_transactional)
        self.assertTrue(headers[1].is_transactional)
        self.assertFalse(headers[1].is_control)
        self.assertEqual(headers[2].compression, 1)
        self.assertEqual(first.timestamp_type, 0)
        self.assertEqual(first.crc, DefaultRecordBatch(a).crc)

    def test_empty(self):
        self.assertRaises(CorruptRecordError, parse_batch_headers, b"")

    def test_truncated_header(self):
        raw = build_batch([(None, b"v")])
        self.assertRaises(CorruptRecordError, parse_batch_headers, raw[:BATCH_HEADER_SIZE - 1])
        self.assertRaises(CorruptRecordError, parse_batch_headers, raw + raw[:30])

    def test_truncated_body(self):
        raw = build_batch([(None, b"value")])
        self.assertRaises(CorruptRecordError, parse_batch_headers, raw[:-1])

    def test_partial_tail_allowed(self):
        """A Fetch response may end inside a batch: with allow_partial_tail that batch is left out."""
        raw = build_batch([(None, b"value")])
        for data in (b"", raw[:30], raw[:-1]):
            self.assertEqual(parse_batch_headers(data, allow_partial_tail=True), [])
        for tail in (raw[:30], raw[:BATCH_HEADER_SIZE], raw[:-1]):
            self.assertEqual(len(parse_batch_headers(raw + tail, allow_partial_tail=True)), 1)
        bad = bytearray(raw)
        bad[-1] ^= 1  # a whole batch is still checked
        self.assertRaises(CorruptRecordError, parse_batch_headers, bytes(bad) + raw[:30], allow_partial_tail=True)

    def test_short_length(self):
        raw = bytearray(build_batch([(None, b"v")]))
        struct.pack_into(">i", raw, 8, 48)
        self.assertRaises(CorruptRecordError, parse_batch_headers, bytes(raw))

    def test_bad_magic(self):
        raw = bytearray(build_batch([(None, b"v")]))
        raw[16] = 1
        self.assertRaises(CorruptRecordError, parse_batch_headers, bytes(raw))

    def test_crc_mismatch(self):
        raw = bytearray(build_batch([(b"k", b"value")]))
        raw[-2] ^= 0xFF
        self.assertRaises(CorruptRecordError, parse_batch_headers, bytes(raw))
        self.assertEqual(len(parse_batch_headers(bytes(raw), verify_crc=False)), 1)

    def test_too_large(self):
        raw = build_batch([(None, b"x" * 1000)])
        self.assertRaises(RecordTooLargeError, parse_batch_headers, raw, max_batch_bytes=len(raw) - 1)
        self.assertEqual(len(parse_batch_headers(raw, max_batch_bytes=len(raw))), 1)

    def test_inconsistent_count(self):
        """Kafka's LogValidator: count > 0, lastOffsetDelta >= 0, count == lastOffsetDelta + 1."""
        for count, delta in [(0, 0), (-1, 0), (3, -1), (3, 1)]:
            raw = bytearray(build_batch([(None, b"a"), (None, b"b"), (None, b"c")]))
            struct.pack_into(">i", raw, 23, delta)
            struct.pack_into(">i", raw, 57, count)
            self.assertRaises(InvalidRecordError, parse_batch_headers, bytes(raw), verify_crc=False)

    def test_memoryview_input(self):
        raw = build_batch([(None, b"v")]) * 2
        self.assertEqual(len(parse_batch_headers(memoryview(raw))), 2)


class ScanValidPrefixTests(TestCase):
    def setUp(self):
        self.a = build_batch([(None, b"a" * 10)])
        self.b = build_batch([(None, b"b" * 20), (None, b"c")])

    def test_all_valid(self):
        headers, end = scan_valid_prefix(self.a + self.b)
        self.assertEqual(len(headers), 2)
        self.assertEqual(end, len(self.a) + len(self.b))

    def test_torn_tail(self):
        buf = self.a + self.b[:-3]
        headers, end = scan_valid_prefix(buf)
        self.assertEqual((len(headers), end), (1, len(self.a)))
        headers, end = scan_valid_prefix(self.a + self.b[:LOG_OVERHEAD])
        self.assertEqual((len(headers), end), (1, len(self.a)))

    def test_garbage(self):
        headers, end = scan_valid_prefix(self.a + b"\x00" * 100)
        self.assertEqual((len(headers), end), (1, len(self.a)))
        headers, end = scan_valid_prefix(self.a + b"\xff" * 100)
        self.assertEqual((len(headers), end), (1, len(self.a)))

    def test_bad_crc(self):
        b = bytearray(self.b)
        b[-1] ^= 1
        headers, end = scan_valid_prefix(self.a + bytes(b) + self.a)
        self.assertEqual((len(headers), end), (1, len(self.a)))

    def test_start(self):
        headers, end = scan_valid_prefix(self.a + self.b, start=len(self.a))
        self.assertEqual([h.position for h in headers], [len(self.a)])


class PatchBatchTests(TestCase):
    def test_patch_keeps_crc(self):
        """Base offset and leader epoch are outside the CRC."""
        buf = bytearray(build_batch([(None, b"v")]) + build_batch([(b"k", b"w")] * 2))
        headers = parse_batch_headers(buf)
        patch_batch(buf, headers[0].position, 100, 7)
        patch_batch(buf, headers[1].position, 101, 7)
        patched = parse_batch_headers(bytes(buf))
        self.assertEqual([(h.base_offset, h.partition_leader_epoch) for h in patched], [(100, 7), (101, 7)])
        second = DefaultRecordBatch(bytes(buf[headers[1].position:]))
        self.assertTrue(second.validate_crc())
        self.assertEqual([r.offset for r in second], [101, 102])


def _outcome(parse, data, *args):
    try:
        return parse(data, *args)
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return (type(e), str(e))


class OneBatchFastPathTests(TestCase):
    """L{parse_batch_headers}' one-batch fast path answers as the batch-by-batch loop does."""

    @settings(max_examples=300, deadline=None)
    @given(values=st.lists(st.binary(max_size=60), min_size=1, max_size=4),
           flips=st.lists(st.tuples(st.integers(0, 400), st.integers(1, 255)), max_size=2),
           cut=st.integers(-3, 3), twice=st.booleans(), verify_crc=st.booleans(),
           max_batch_bytes=st.sampled_from([None, 61, 100, 1 << 20]),
           partial=st.booleans(), compacted=st.booleans())
    def test_fast_path_is_the_loop(self, values, flips, cut, twice, verify_crc, max_batch_bytes, partial,
                                   compacted):
        data = bytearray(build_batch([(None, v) for v in values], timestamp_ms=1_700_000_000_000))
        for position, xor in flips:
            if position < len(data):
                data[position] ^= xor
        if cut < 0:
            del data[cut:]
        elif cut > 0:
            data += bytes(cut)
        if twice:
            data = data + data
        data = bytes(data)
        args = (verify_crc, max_batch_bytes, partial, compacted)
        self.assertEqual(_outcome(parse_batch_headers, data, *args),
                         _outcome(_parse_batches, memoryview(data), *args))
