"""Tests for L{kafkatw.protocol.records}, the RecordBatch v2 codec (trial test cases; pytest runs them too)."""

from __future__ import annotations

import importlib
import os
import struct
from types import ModuleType
from unittest import SkipTest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.errors import CorruptRecordError, InvalidRecordError
from kafkatw.protocol import records as R
from kafkatw.protocol.records import decode_batches, decode_varint, encode_batch, encode_varint


def compiled_speedups() -> ModuleType:
    """
    The compiled accelerator (C{kafkatw.protocol._speedups}).

    @raise SkipTest: it was not built (no C compiler).
    @raise AssertionError: it was not built but C{KAFKATW_REQUIRE_SPEEDUPS=1}
        (CI, scripts/test.sh): the C path must not go untested.
    """
    try:
        return importlib.import_module("kafkatw.protocol._speedups")
    except ImportError as e:
        if os.environ.get("KAFKATW_REQUIRE_SPEEDUPS") == "1":
            raise AssertionError(f"KAFKATW_REQUIRE_SPEEDUPS=1 but kafkatw.protocol._speedups does not import: {e}")
        raise SkipTest(f"the compiled accelerator is not built ({e})")


headers_st = st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=50))), max_size=4)
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=20000)),
    headers_st,
    st.integers(min_value=0, max_value=2**62),
)


def _expected(records, base_offset=0):
    return [(base_offset + i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(records)]


# --- interop with kafka-python ---------------------------------------------------------

try:
    from kafka.record import default_records as kafka_records
except ImportError:  # a test extra; its tests skip without it
    kafka_records = None


def _kafka_python_with_codec(codec: int) -> ModuleType:
    """
    kafka-python's record module, able to use C{codec}.

    @raise SkipTest: kafka-python, or the library it needs for C{codec}, is not installed.
    """
    if kafka_records is None:
        raise SkipTest("kafka-python is not installed")
    try:
        if codec:
            kafka_records.DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1)._assert_has_codec(codec)
    except Exception as e:
        raise SkipTest(f"kafka-python lacks this codec's library ({e})")
    return kafka_records


SAMPLE = [(b"key-%d" % i if i % 3 else None, (b"value-%d" % i) * (i % 50) if i % 7 else None,
           [("h%d" % i, b"x" * i)] if i % 2 else [], 1_700_000_000_000 + i * 3) for i in range(200)]


# --- the codec, with each record loop -----------------------------------------------------

def _round_trip(codec: int):
    """A test that C{codec}'s batches decode to what was encoded (one generated method per codec)."""

    # run by the compiled subclass too: a stateless test, fine from either
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(records=st.lists(record_st, min_size=1, max_size=20), base_offset=st.integers(0, 2**62))
    def test(self, records, base_offset) -> None:
        data = encode_batch(records, base_offset=base_offset, compression=codec)
        [batch] = decode_batches(data)
        self.assertEqual(batch.base_offset, base_offset)
        self.assertEqual(batch.compression, codec)
        self.assertEqual(batch.last_offset_delta, len(records) - 1)
        self.assertEqual(batch.record_count, len(records))
        self.assertEqual(batch.base_timestamp, records[0][3])
        self.assertEqual(batch.max_timestamp, max(r[3] for r in records))
        self.assertEqual(batch.size, len(data))
        self.assertEqual([tuple(r) for r in batch.records], _expected(records, base_offset))

    return test


def _decode_kafka_python_batches(codec: int):
    """A test that kafkatw decodes kafka-python's C{codec} batches."""

    def test(self) -> None:
        kp = _kafka_python_with_codec(codec)
        builder = kp.DefaultRecordBatchBuilder(2, codec, False, 5, 1, 10, 1 << 30)
        for i, (k, v, h, ts) in enumerate(SAMPLE):
            builder.append(i, ts, k, v, h)
        data = bytes(builder.build())
        [b] = decode_batches(data)
        self.assertEqual((b.producer_id, b.producer_epoch, b.base_sequence, b.compression), (5, 1, 10, codec))
        self.assertEqual([tuple(r) for r in b.records], _expected(SAMPLE))

    return test


def _kafka_python_decodes_ours(codec: int):
    """A test that kafka-python decodes kafkatw's C{codec} batches."""

    def test(self) -> None:
        kp = _kafka_python_with_codec(codec)
        data = encode_batch(SAMPLE, base_offset=100, compression=codec)
        batch = kp.DefaultRecordBatch(data)
        self.assertTrue(batch.validate_crc())
        got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        self.assertEqual(got, _expected(SAMPLE, 100))

    return test


class RecordBatchTests(SynchronousTestCase):
    """
    L{encode_batch}, L{decode_batches} and the varints with the pure-Python
    record loops; L{RecordBatchCompiledTests} runs every test again with the
    compiled ones.  Tests per compression codec are generated, one method each
    (C{_none}, C{_gzip}, C{_snappy}, C{_lz4}, C{_zstd}).
    """

    def setUp(self) -> None:
        self.patch(R, "_speedups", None)

    test_round_trip_none = _round_trip(0)
    test_round_trip_gzip = _round_trip(1)
    test_round_trip_snappy = _round_trip(2)
    test_round_trip_lz4 = _round_trip(3)
    test_round_trip_zstd = _round_trip(4)

    def test_header_fields(self) -> None:
        data = encode_batch([(b"k", b"v", [], 5)], base_offset=7, producer_id=42, producer_epoch=3,
                            base_sequence=9, partition_leader_epoch=11, is_transactional=True)
        [b] = decode_batches(data)
        self.assertEqual((b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence, b.partition_leader_epoch),
                         (7, 42, 3, 9, 11))
        self.assertTrue(b.is_transactional)
        self.assertFalse(b.is_control)
        self.assertEqual(b.magic, 2)
        self.assertEqual(b.next_offset, 8)

    def test_log_append_time_uses_max_timestamp(self) -> None:
        data = encode_batch([(None, b"a", [], 10), (None, b"b", [], 20)], timestamp_type=1)
        [b] = decode_batches(data)
        self.assertEqual(b.timestamp_type, 1)
        self.assertEqual([r.timestamp_ms for r in b.records], [20, 20])

    def test_control_batch_is_flagged(self) -> None:
        # a COMMIT marker: key = version 0, type 1; value = version 0, coordinator epoch 0
        data = encode_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 1)], is_control=True,
                            is_transactional=True, producer_id=1, producer_epoch=0)
        [b] = decode_batches(data)
        self.assertTrue(b.is_control)

    def test_several_batches_and_partial_tail(self) -> None:
        one = encode_batch([(b"a", b"1", [], 1)], base_offset=0)
        two = encode_batch([(b"b", b"2", [], 2), (b"c", b"3", [], 3)], base_offset=1, compression=3)
        data = one + two
        for cut in range(len(one), len(data)):
            batches = decode_batches(data[:cut])
            self.assertEqual([b.base_offset for b in batches], [0], f"cut at {cut}")
        batches = decode_batches(memoryview(data + two[:5]))
        self.assertEqual([r.offset for b in batches for r in b.records], [0, 1, 2])

    def test_empty_input(self) -> None:
        self.assertEqual(decode_batches(b""), [])

    def test_crc_flip_raises(self) -> None:
        """A flipped bit anywhere under the CRC (attributes, a timestamp, the records, the last byte)."""
        for position in (21, 30, 61, -1):
            with self.subTest(position=position):
                data = bytearray(encode_batch([(b"k", b"value", [("h", b"x")], 1)]))
                data[position] ^= 0x01
                self.assertRaises(CorruptRecordError, decode_batches, bytes(data))

    def test_crc_not_verified_when_asked(self) -> None:
        data = bytearray(encode_batch([(b"k", b"value", [], 1)]))
        data[-2] ^= 0x01  # last byte of the value (the last byte is the header count)
        [b] = decode_batches(bytes(data), verify_crc=False)
        self.assertEqual(b.records[0].value, b"valud")
        self.assertRaises(CorruptRecordError, decode_batches, bytes(data))

    def test_negative_header_count_is_corrupt(self) -> None:
        data = bytearray(encode_batch([(b"k", b"value", [], 1)]))
        data[-1] = 0x01  # header count -1
        self.assertRaises(CorruptRecordError, decode_batches, bytes(data), verify_crc=False)

    def test_patched_offset_and_epoch_keep_crc_valid(self) -> None:
        data = bytearray(encode_batch([(b"k", b"v", [], 1)]))
        data[0:8] = struct.pack(">q", 1000)
        data[12:16] = struct.pack(">i", 5)
        [b] = decode_batches(bytes(data))
        self.assertEqual((b.base_offset, b.partition_leader_epoch, b.records[0].offset), (1000, 5, 1000))

    def test_wrong_magic(self) -> None:
        data = bytearray(encode_batch([(b"k", b"v", [], 1)]))
        data[16] = 1
        self.assertRaises(InvalidRecordError, decode_batches, bytes(data))

    def test_no_records_refused(self) -> None:
        self.assertRaises(ValueError, encode_batch, [])

    def test_xerial_snappy_accepted(self) -> None:
        import cramjam
        from crc32c import crc32c

        body_batch = encode_batch([(b"k%d" % i, b"v" * 100, [], i) for i in range(50)])
        raw_records = body_batch[61:]
        half = len(raw_records) // 2
        chunks = [bytes(cramjam.snappy.compress_raw(raw_records[:half])),
                  bytes(cramjam.snappy.compress_raw(raw_records[half:]))]
        xerial = R._XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"".join(struct.pack(">I", len(c)) + c for c in chunks)
        post = bytearray(body_batch[21:61]) + xerial
        post[0:2] = struct.pack(">h", 2)  # attributes: snappy
        data = struct.pack(">qiibI", 0, len(post) + 9, -1, 2, crc32c(bytes(post))) + bytes(post)
        [b] = decode_batches(data)
        self.assertEqual([r.key for r in b.records], [b"k%d" % i for i in range(50)])

    def test_varint_edges(self) -> None:
        for n in (0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 300, -300):
            with self.subTest(n=n):
                encoded = encode_varint(n)
                self.assertEqual(decode_varint(encoded), (n, len(encoded)), n)
                self.assertEqual(decode_varint(b"\xff" + encoded, 1), (n, len(encoded) + 1), n)

    def test_varint_known_bytes(self) -> None:
        # protocol guide / protobuf zig-zag examples
        self.assertEqual(encode_varint(0), b"\x00")
        self.assertEqual(encode_varint(-1), b"\x01")
        self.assertEqual(encode_varint(1), b"\x02")
        self.assertEqual(encode_varint(2**31 - 1), b"\xfe\xff\xff\xff\x0f")
        self.assertEqual(encode_varint(-(2**31)), b"\xff\xff\xff\xff\x0f")
        self.assertEqual(len(encode_varint(2**63 - 1)), 10)

    def test_varint_errors(self) -> None:
        self.assertRaises(CorruptRecordError, decode_varint, b"\x80\x80")
        self.assertRaises(CorruptRecordError, decode_varint, b"\xff" * 11)
        self.assertRaises(ValueError, encode_varint, 2**63)

    test_decode_kafka_python_batches_none = _decode_kafka_python_batches(0)
    test_decode_kafka_python_batches_gzip = _decode_kafka_python_batches(1)
    test_decode_kafka_python_batches_snappy = _decode_kafka_python_batches(2)
    test_decode_kafka_python_batches_lz4 = _decode_kafka_python_batches(3)
    test_decode_kafka_python_batches_zstd = _decode_kafka_python_batches(4)

    test_kafka_python_decodes_ours_none = _kafka_python_decodes_ours(0)
    test_kafka_python_decodes_ours_gzip = _kafka_python_decodes_ours(1)
    test_kafka_python_decodes_ours_snappy = _kafka_python_decodes_ours(2)
    test_kafka_python_decodes_ours_lz4 = _kafka_python_decodes_ours(3)
    test_kafka_python_decodes_ours_zstd = _kafka_python_decodes_ours(4)

    def test_kio_reads_ours(self) -> None:
        from kio.records.readers import read_batch

        data = encode_batch(SAMPLE, base_offset=3)
        batch, size = read_batch(data, 0)
        self.assertEqual(size, len(data))
        self.assertEqual([r.offset for r in batch.records], list(range(3, 3 + len(SAMPLE))))
        self.assertEqual([(r.key, r.value) for r in batch.records], [(k, v) for k, v, _h, _t in SAMPLE])
        self.assertEqual([[(h.key.decode(), h.value) for h in r.headers] for r in batch.records],
                         [h for _k, _v, h, _t in SAMPLE])

    def test_scan_fetched_gives_the_last_complete_batch_epoch(self) -> None:
        data = (encode_batch([(None, b"a", [], 1)], base_offset=0, partition_leader_epoch=3)
                + encode_batch([(None, b"b", [], 1), (None, b"c", [], 1)], base_offset=1, partition_leader_epoch=5))
        self.assertEqual(R.scan_fetched(data, 0), (3, 5))
        self.assertEqual(R.scan_fetched(data + data[:20], 0), (3, 5))  # a partial trailing batch is ignored
        self.assertEqual(R.scan_fetched(data[:20], 7), (7, -1))


class RecordBatchCompiledTests(RecordBatchTests):
    """L{RecordBatchTests} with the compiled record loops."""

    def setUp(self) -> None:
        self.patch(R, "_speedups", compiled_speedups())


class UnsignedVarintTests(SynchronousTestCase):
    """L{R.decode_uvarint}, the one unsigned reader (requests' tagged fields, the transaction log)."""

    def test_round_trip(self) -> None:
        for n in (0, 1, 127, 128, 300, 2**31 - 1, 2**32 - 1, 2**64 - 1):
            encoded = R.encode_uvarint(n)
            self.assertEqual(R.decode_uvarint(encoded), (n, len(encoded)))
            self.assertEqual(R.decode_uvarint(b"\xff" + encoded, 1), (n, len(encoded) + 1))

    def test_errors(self) -> None:
        self.assertRaises(CorruptRecordError, R.decode_uvarint, b"\x80\x80")
        self.assertRaises(CorruptRecordError, R.decode_uvarint, b"\xff" * 10 + b"\x01")


class EncodeValueBatchTests(SynchronousTestCase):
    """L{R.encode_value_batch}: byte for byte what L{encode_batch} makes of the same values."""

    def setUp(self) -> None:
        self.patch(R, "_speedups", None)  # encode_batch's Python loop here; the compiled one below

    # run by the subclass too (the compiled loop): a stateless test, fine from either
    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(values=st.one_of(
        st.lists(st.binary(max_size=300), min_size=1, max_size=200),
        st.integers(min_value=0, max_value=20000).flatmap(
            lambda n: st.lists(st.just(b"v" * n), min_size=1, max_size=100))),
        timestamp_ms=st.integers(min_value=0, max_value=2**42), compression=st.sampled_from([0, 2, 4]),
        sequence=st.sampled_from([(-1, -1, -1), (7, 2, 100)]))
    def test_same_bytes_as_encode_batch(self, values: list, timestamp_ms: int, compression: int,
                                        sequence: tuple) -> None:
        pid, epoch, base_sequence = sequence
        expected = encode_batch([(None, v, None, timestamp_ms) for v in values], compression=compression,
                                producer_id=pid, producer_epoch=epoch, base_sequence=base_sequence)
        self.assertEqual(R.encode_value_batch(values, timestamp_ms, compression, pid, epoch, base_sequence),
                         expected)

    def test_more_records_than_cached(self) -> None:
        values = [b"x" * 3] * (R._VALUE_PREFIXES_MAX_RECORDS + 10)
        expected = encode_batch([(None, v, None, 5) for v in values])
        self.assertEqual(R.encode_value_batch(values, 5), expected)
        self.assertEqual(R.encode_value_batch(values, 5), expected)
        (batch,) = decode_batches(expected)
        self.assertEqual(len(batch.records), len(values))

    def test_no_values(self) -> None:
        with self.assertRaises(ValueError):
            R.encode_value_batch([], 0)


class EncodeValueBatchCompiledTests(EncodeValueBatchTests):
    """L{EncodeValueBatchTests} against L{encode_batch}'s compiled record loop."""

    def setUp(self) -> None:
        self.patch(R, "_speedups", compiled_speedups())


class UniformDecodingTests(SynchronousTestCase):
    """
    L{R.decode_fetched_py}'s path for batches of uniform records (null key, no
    headers, one value length) gives what the general loop gives, and leaves
    every other batch to it.
    """

    def decode_both(self, data: bytes, fetch_offset: int = 0) -> tuple:
        used = []
        uniform = R._decode_uniform

        def spy(*args: object) -> bool:
            used.append(uniform(*args))
            return used[-1]

        self.patch(R, "_decode_uniform", spy)
        fast = R.decode_fetched_py(data, "t", 3, fetch_offset, tuple)
        self.patch(R, "_UNIFORM_MIN_RECORDS", 10**9)
        try:
            slow = R.decode_fetched_py(data, "t", 3, fetch_offset, tuple)
        finally:
            R._UNIFORM_MIN_RECORDS = 8
        self.used = used
        return fast, slow

    @settings(max_examples=200, deadline=None)
    @given(length=st.one_of(st.integers(min_value=0, max_value=300), st.sampled_from([118, 119, 120, 121, 122, 123,
                                                                                     124, 125, 126, 8180, 9000])),
           count=st.integers(min_value=1, max_value=80), data=st.data(),
           log_append=st.booleans(), base_offset=st.integers(min_value=0, max_value=2**40))
    def test_same_as_the_loop(self, length: int, count: int, data: st.DataObject, log_append: bool,
                              base_offset: int) -> None:
        base_ts = 1_700_000_000_000
        deltas = data.draw(st.lists(st.integers(min_value=-20000, max_value=20000), min_size=count, max_size=count))
        values = [bytes([i % 256]) * length for i in range(count)]
        # a record unlike the others (a key, headers, a null value or another length) now and then
        odd = data.draw(st.sampled_from([None, "key", "headers", "null", "length"]))
        records = [(None, v, None, base_ts + dt) for v, dt in zip(values, deltas)]
        if odd is not None:
            at = data.draw(st.integers(min_value=0, max_value=count - 1))
            key, value, headers, ts = records[at]
            records[at] = {"key": (b"k", value, None, ts), "headers": (None, value, [("h", b"v")], ts),
                           "null": (None, None, None, ts), "length": (None, value + b"+", None, ts)}[odd]
        batch = encode_batch(records, base_offset=base_offset, timestamp_type=1 if log_append else 0)
        fast, slow = self.decode_both(batch, base_offset)
        self.assertEqual(fast, slow)
        self.assertEqual(len(fast[0]), count)
        if odd is None and count >= 8 and all(-8192 <= dt <= 8191 for dt in deltas) and length < 8180:
            self.assertEqual(self.used, [True])
        if odd in ("key", "headers", "null", "length") and count >= 8:
            self.assertEqual(self.used, [False])

    def test_offset_gaps(self) -> None:
        """Offset deltas that are not 0, 1, 2, ... (a compacted batch) decode to their offsets."""
        batch = bytearray(encode_batch([(None, b"v" * 50, None, 5)] * 20))
        (body,) = R.decode_batches(bytes(batch))
        # rewrite the batch with offset deltas 0, 2, 4, ... by hand
        parts = []
        for i in range(20):
            rec = b"\x00" + R.encode_varint(0) + R.encode_varint(2 * i) + b"\x01" + R.encode_varint(50) + b"v" * 50 \
                + b"\x00"
            parts.append(R.encode_varint(len(rec)) + rec)
        region = b"".join(parts)
        header = list(R._HEADER.unpack_from(bytes(batch), 0))
        header[6] = 38  # lastOffsetDelta
        post = R._POST_CRC.pack(header[5], 38, header[7], header[8], header[9], header[10], header[11], 20) + region
        data = R._PRE_CRC.pack(0, len(post) + 9, -1, 2, R.crc32c(post)) + post
        fast, slow = self.decode_both(data)
        self.assertEqual(fast, slow)
        self.assertEqual(self.used, [True])
        self.assertEqual([r[2] for r in fast[0]], list(range(0, 40, 2)))
        self.assertEqual(body.records[0].value, b"v" * 50)

    def test_corrupt_left_to_the_loop(self) -> None:
        """Bytes after the last record: the uniform path declines, the loop reports it."""
        records = [(None, b"v" * 10, None, 5)] * 10
        good = encode_batch(records)
        header = list(R._HEADER.unpack_from(good, 0))
        region = good[61:] + b"\x00"
        post = R._POST_CRC.pack(header[5], header[6], header[7], header[8], header[9], header[10], header[11],
                                header[12]) + region
        data = R._PRE_CRC.pack(0, len(post) + 9, -1, 2, R.crc32c(post)) + post
        with self.assertRaises(CorruptRecordError):
            R.decode_fetched(data, "t", 0, 0, tuple)
