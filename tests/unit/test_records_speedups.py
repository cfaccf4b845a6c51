"""
Tests for the optional compiled accelerator of the record codec
(C{kafkatw.protocol._speedups}): it gives what the pure-Python loops of
L{kafkatw.protocol.records} give (the same bytes, the same records, the same
errors), and survives any input.

Without the extension these tests skip, unless C{KAFKATW_REQUIRE_SPEEDUPS=1}
(scripts/test.sh sets it) makes them fail: CI cannot silently leave the C path
untested.
"""

from __future__ import annotations

import gc
import os
import struct
import subprocess
import sys
from typing import Any, Callable, NamedTuple

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.consumer import ConsumerRecord
from kafkatw.errors import CorruptRecordError
from kafkatw.protocol import records as R

from .test_records import compiled_speedups




def outcome(call: Callable[[], Any]) -> tuple:
    """C{("ok", result)} or C{("raised", exception type)}."""
    try:
        return ("ok", call())
    except Exception as e:  # the comparison is the point: whatever one raises, the other must too
        return ("raised", type(e))


def batch_of(region: bytes, count: int, base_offset: int = 0, attributes: int = 0,
             base_ts: int = 1_700_000_000_000, max_ts: int = 1_700_000_000_999, last_offset_delta: int | None = None,
             producer_id: int = -1) -> bytes:
    """A v2 batch around a hand-made records region, with a correct CRC."""
    codec = attributes & 7
    if codec:
        region = R.compress(codec, region)
    if last_offset_delta is None:
        last_offset_delta = max(count - 1, 0)
    post = R._POST_CRC.pack(attributes, last_offset_delta, base_ts, max_ts, producer_id, -1, -1, count) + region
    return R._PRE_CRC.pack(base_offset, len(post) + 9, -1, 2, R.crc32c(post)) + post


# --- strategies -------------------------------------------------------------------------

small_int = st.integers(min_value=-(2**14), max_value=2**14)
any_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# lengths around the 1-, 2- and 3-byte varint boundaries
boundary_length = st.sampled_from([0, 1, 63, 64, 65, 8191, 8192, 8193])
payload = st.one_of(st.none(), st.binary(max_size=300), boundary_length.map(lambda n: b"p" * n))
header_key = st.one_of(st.text(max_size=20), st.binary(max_size=10))
headers = st.one_of(
    st.none(),
    st.just([]),
    st.just(()),
    st.lists(st.tuples(header_key, st.one_of(st.none(), st.binary(max_size=50))), max_size=5),
    st.lists(st.tuples(header_key, st.one_of(st.none(), st.binary(max_size=50))), max_size=5).map(tuple),
)
timestamp = st.one_of(st.none(), st.integers(min_value=0, max_value=2**42),
                      small_int.map(lambda d: 1_700_000_000_000 + d), any_int64)
record = st.tuples(payload, payload, headers, timestamp)


def varint_bytes() -> st.SearchStrategy[bytes]:
    """Varints as they may come from the wire: canonical, padded, 64-bit extremes, wider, too long."""
    return st.one_of(
        small_int.map(R.encode_varint),
        any_int64.map(R.encode_varint),
        st.sampled_from([
            b"\x80\x00",  # a padded 0
            b"\x81\x80\x00",  # a padded -1
            b"\xff" * 9 + b"\x01",  # the widest 64-bit varint
            b"\xfe" * 9 + b"\x01",
            b"\xff" * 9 + b"\x02",  # bits beyond the 64th: Python gives a wider int
            b"\xff" * 9 + b"\x7f",
            b"\xff" * 10 + b"\x01",  # longer than 10 bytes
            b"\xff",  # truncated
        ]),
    )


@st.composite
def raw_record(draw: st.DrawFn) -> bytes:
    """One record, well formed or not in any of its fields."""
    parts = [draw(varint_bytes()), b"\x00", draw(varint_bytes()), draw(varint_bytes())]
    for _ in range(2):  # key, value
        kind = draw(st.sampled_from(["null", "bytes", "bytes", "negative", "raw"]))
        if kind == "null":
            parts.append(b"\x01")
        elif kind == "negative":
            parts.append(R.encode_varint(draw(st.integers(min_value=-(2**40), max_value=-2))))
        elif kind == "raw":
            parts.append(draw(varint_bytes()))
        else:
            data = draw(st.binary(max_size=40))
            parts.append(R.encode_varint(len(data)) + data)
    if draw(st.booleans()):
        parts.append(b"\x00")
    else:
        pairs = draw(st.lists(st.tuples(st.binary(max_size=12), st.one_of(st.none(), st.binary(max_size=12))),
                              max_size=4))
        count = draw(st.one_of(st.just(len(pairs)), st.integers(min_value=-3, max_value=10)))
        parts.append(R.encode_varint(count))
        for k, v in pairs:  # keys: any bytes, invalid UTF-8 too
            parts.append(b"\x01" if not k and draw(st.booleans()) else R.encode_varint(len(k)) + k)
            parts.append(b"\x01" if v is None else R.encode_varint(len(v)) + v)
    return b"".join(parts)


# --- tests ------------------------------------------------------------------------------


class AcceleratorPresenceTests(SynchronousTestCase):
    """Whether the extension is there, and in use."""

    def test_required(self) -> None:
        """
        With C{KAFKATW_REQUIRE_SPEEDUPS=1} (CI: scripts/test.sh) the extension
        must import: a failure, not a skip, when it does not.
        """
        if os.environ.get("KAFKATW_REQUIRE_SPEEDUPS") != "1":
            return
        try:
            from kafkatw.protocol import _speedups  # noqa: F401
        except ImportError as e:
            self.fail(f"KAFKATW_REQUIRE_SPEEDUPS=1 but kafkatw.protocol._speedups does not import ({e}): build it"
                      " with `pip install -e .` or `python setup.py build_ext --inplace` (a C compiler and"
                      " Python's headers are needed; scripts/setup.sh installs them)")
        if os.environ.get("KAFKATW_PURE_PYTHON", "") in ("", "0"):
            self.assertTrue(R.SPEEDUPS)

    def test_flag(self) -> None:
        """L{R.SPEEDUPS} says whether the module found the extension (and was not told to ignore it)."""
        self.assertEqual(R.SPEEDUPS, R._speedups is not None)

    def run_python(self, code: str, **env: str) -> str:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("KAFKATW_")}
        environment.update(env)
        return subprocess.run([sys.executable, "-c", code], env=environment, check=True, capture_output=True,
                              text=True).stdout.strip()

    def test_pure_python_environment(self) -> None:
        """C{KAFKATW_PURE_PYTHON=1} makes the module ignore the extension; the codec still works."""
        code = ("from kafkatw.protocol import records as R;"
                "b = R.encode_batch([(b'k', b'v', [('h', b'x')], 5)]);"
                "print(R.SPEEDUPS, R.decode_batches(b)[0].records[0].key)")
        self.assertEqual(self.run_python(code, KAFKATW_PURE_PYTHON="1"), "False b'k'")
        compiled_speedups()
        self.assertEqual(self.run_python(code), "True b'k'")
        self.assertEqual(self.run_python(code, KAFKATW_PURE_PYTHON="0"), "True b'k'")


class CompiledTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.sp = compiled_speedups()

    def encode_both(self, records: list, **kwargs: Any) -> tuple[tuple, tuple]:
        return (outcome(lambda: R._encode_batch(self.sp, records, **kwargs)),
                outcome(lambda: R._encode_batch(None, records, **kwargs)))

    def decode_both(self, data: bytes, fetch_offset: int = 0, aborted: list | None = None) -> tuple:
        """decode_fetched and decode_batches, compiled then Python, as outcomes; they must agree."""
        compiled = outcome(lambda: R._decode_fetched(self.sp, data, "t", 7, fetch_offset, ConsumerRecord, True,
                                                     aborted))
        python = outcome(lambda: R._decode_fetched(None, data, "t", 7, fetch_offset, ConsumerRecord, True, aborted))
        self.assertEqual(compiled, python)
        if compiled[0] == "ok":
            self.assertEqual([type(r) for r in compiled[1][0]], [type(r) for r in python[1][0]])
        batches_c = outcome(lambda: [(b.base_offset, b.records) for b in R._decode_batches(self.sp, data, True)])
        batches_py = outcome(lambda: [(b.base_offset, b.records) for b in R._decode_batches(None, data, True)])
        self.assertEqual(batches_c, batches_py)
        if batches_c[0] == "ok":
            for (_, records_c), (_, records_py) in zip(batches_c[1], batches_py[1]):
                self.assertEqual([type(r) for r in records_c], [type(r) for r in records_py])
                self.assertEqual([type(r.headers) for r in records_c], [list] * len(records_c))
        return compiled


class EncodeSameAsPythonTests(CompiledTestCase):
    """The compiled record loop of L{R.encode_batch} makes the Python loop's bytes."""

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(records=st.lists(record, min_size=1, max_size=30), compression=st.sampled_from([0, 0, 1, 2, 3, 4]),
           base_offset=st.integers(min_value=0, max_value=2**62), timestamp_type=st.sampled_from([0, 1]))
    def test_random_batches(self, records: list, compression: int, base_offset: int, timestamp_type: int) -> None:
        if records[0][3] is None:  # the batch's timestamp would be now: two calls, two times
            records[0] = records[0][:3] + (1_700_000_000_000,)
        compiled, python = self.encode_both(records, base_offset=base_offset, compression=compression,
                                            timestamp_type=timestamp_type, producer_id=3, producer_epoch=1,
                                            base_sequence=10)
        self.assertEqual(compiled, python)
        region = self.sp.encode_records(records, records[0][3])
        if compiled[0] == "ok" and region is not NotImplemented:  # else declined: Python's loop did it
            self.assertEqual(region, R._encode_records(records, records[0][3]))

    def test_shipper_records(self) -> None:
        """Keyed records with headers, as C{kafkatw ship} sends them."""
        records = [(b"web1:/var/log/nginx/access.log", b"127.0.0.1 - - [line %d]" % i,
                    [("host", b"web1"), ("path", b"/var/log/nginx/access.log")], 1_700_000_000_000 + i)
                   for i in range(1000)]
        compiled, python = self.encode_both(records)
        self.assertEqual(compiled[0], "ok")
        self.assertEqual(compiled, python)

    def test_declined_input(self) -> None:
        """Input the C loop leaves to Python's gives Python's result or error."""
        cases = [
            [[b"k", b"v", None, 5]],  # a list, not a tuple
            [(bytearray(b"k"), b"v", None, 5)],
            [(b"k", memoryview(b"v"), None, 5)],
            [(b"k", b"v", [("h", bytearray(b"x"))], 5)],
            [(b"k", b"v", [["h", b"x"]], 5)],
            [(b"k", b"v", [("h", b"x", b"y")], 5)],
            [(b"k", b"v", [("\ud800", b"x")], 5)],  # not UTF-8 encodable: UnicodeEncodeError
            [(b"k", b"v", iter([("h", b"x")]), 5)],
            [(b"k", b"v", "", 5)],
            [(b"k", b"v", None, 5.0)],
            [(b"k", b"v", None, 5), (b"k", b"v", None, 6.5)],
            [(b"k", b"v", None, 2**63 - 1), (b"k", b"v", None, -(2**63))],  # a delta beyond 64 bits
            [(b"k", b"v", None, 0), (b"k", b"v", None, 2**64)],
            [(b"k", b"v", None, 2**64)],
            [(b"k", b"v", None, True), (None, None, None, None)],
            [(b"k", b"v", [("h", None)] * (2**14), 5)],
            [(b"k", b"v", None)],
            [(None, b"v", None, 5)] * 20000,  # offset deltas past the small-varint table
        ]
        for records in cases:
            compiled, python = self.encode_both(records)
            self.assertEqual(compiled, python, records[:1])

    def test_not_a_sequence(self) -> None:
        self.assertIs(self.sp.encode_records(iter([(b"k", b"v", None, 5)]), 5), NotImplemented)
        self.assertIs(self.sp.encode_records([(b"k", b"v", None, 5)], 2**64), NotImplemented)
        self.assertIs(self.sp.encode_records([(b"k", b"v", None, 5)], 5.0), NotImplemented)


class EncodeValueBatchSameAsPythonTests(CompiledTestCase):
    """The compiled L{R.encode_value_batch} (the producer's batches of plain values) makes the Python bytes."""

    def both(self, values: Any, *args: Any) -> tuple[tuple, tuple]:
        """The compiled encoder's outcome (Python's where it declines) and the Python encoder's."""
        def compiled() -> bytes:
            encoded = self.sp.encode_value_batch(values, *args, R.crc32c)
            if encoded is NotImplemented:
                return R.encode_value_batch_py(values, args[0], 0, *args[2:], bool(args[1]))
            return encoded

        return outcome(compiled), outcome(lambda: R.encode_value_batch_py(values, args[0], 0, *args[2:],
                                                                           bool(args[1])))

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(values=st.lists(st.one_of(st.binary(max_size=300), boundary_length.map(lambda n: b"v" * n)),
                           min_size=1, max_size=150),
           timestamp=any_int64, transactional=st.booleans(), producer_id=any_int64,
           epoch=st.integers(min_value=-(2**15), max_value=2**15 - 1),
           sequence=st.integers(min_value=-(2**31), max_value=2**31 - 1))
    def test_random_batches(self, values: list, timestamp: int, transactional: bool, producer_id: int, epoch: int,
                            sequence: int) -> None:
        attributes = 0x10 if transactional else 0
        compiled = self.sp.encode_value_batch(values, timestamp, attributes, producer_id, epoch, sequence, R.crc32c)
        python = R.encode_value_batch_py(values, timestamp, 0, producer_id, epoch, sequence, transactional)
        self.assertEqual(compiled, python)
        self.assertEqual(python, R.encode_batch_py([(None, v, None, timestamp) for v in values],
                                                   producer_id=producer_id, producer_epoch=epoch,
                                                   base_sequence=sequence, is_transactional=transactional))
        self.assertEqual(R.encode_value_batch(values, timestamp, 0, producer_id, epoch, sequence, transactional),
                         python)

    def test_many_records(self) -> None:
        """Offset deltas past one- and two-byte varints."""
        values = [b"x" * (i % 300) for i in range(20000)]
        self.assertEqual(self.both(values, 1_700_000_000_000, 0, -1, -1, -1)[0][0], "ok")
        self.assertEqual(*self.both(values, 1_700_000_000_000, 0, -1, -1, -1))

    def test_declined_input(self) -> None:
        """Input the C encoder leaves to Python's gives Python's result or error."""
        cases = [
            ([], 5, 0, -1, -1, -1),
            ([bytearray(b"v")], 5, 0, -1, -1, -1),
            ([b"v", memoryview(b"v")], 5, 0, -1, -1, -1),
            ([b"v", None], 5, 0, -1, -1, -1),
            ([b"v"], 2**63, 0, -1, -1, -1),
            ([b"v"], 5.0, 0, -1, -1, -1),
            ([b"v"], 5, 0, 2**63, -1, -1),
            ([b"v"], 5, 0, -1, 2**15, -1),
            ([b"v"], 5, 0, -1, -1, 2**31),
            ([b"v"], 5, 0, -1, -1, "1"),
        ]
        for case in cases:
            self.assertIs(self.sp.encode_value_batch(*case, R.crc32c), NotImplemented, case)
            compiled, python = self.both(*case)
            self.assertEqual(compiled, python, case)
        self.assertRaises(TypeError, self.sp.encode_value_batch, (b"v",), 5, 0, -1, -1, -1, R.crc32c)

    def test_through_records_when_in_use(self) -> None:
        """L{R.encode_value_batch} takes the compiled path for a list without compression, else Python's."""
        saved = R._speedups
        R._speedups = self.sp
        try:
            values = [b"a", b"bb"]
            self.assertEqual(R.encode_value_batch(values, 5), R.encode_value_batch_py(values, 5))
            self.assertEqual(R.encode_value_batch(tuple(values), 5), R.encode_value_batch_py(values, 5))
            self.assertEqual(R.encode_value_batch(values, 5, R.COMPRESSION_GZIP)[:8], b"\x00" * 8)
            self.assertRaises(ValueError, R.encode_value_batch, [], 5)
        finally:
            R._speedups = saved


def encode_batches(batches: list, first: int, data: st.DataObject) -> tuple[bytes, int]:
    """
    Record batches from C{(records, compression, timestamp type, is control)}
    tuples, the first at offset C{first}, concatenated, and sometimes a
    partial trailing batch (drawn from C{data}); and the offset after the last.
    """
    encoded = []
    offset = first
    for records, compression, timestamp_type, control in batches:
        encoded.append(R.encode_batch_py(records, base_offset=offset, compression=compression,
                                         timestamp_type=timestamp_type, is_control=control))
        offset += len(records)
    blob = b"".join(encoded)
    return blob + data.draw(st.sampled_from([b"", blob[:30]])), offset


class DecodeSameAsPythonTests(CompiledTestCase):
    """The compiled record loop of L{R.decode_fetched} and L{R.decode_batches} gives the Python loop's records."""

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(batches=st.lists(st.tuples(st.lists(record, min_size=1, max_size=20),
                                      st.sampled_from([0, 0, 1, 2, 3, 4]), st.sampled_from([0, 1]), st.booleans()),
                            min_size=1, max_size=4),
           data=st.data())
    def test_random_batches(self, batches: list, data: st.DataObject) -> None:
        first = data.draw(st.integers(min_value=0, max_value=2**62))
        batches = [([(k, v, h, 1_700_000_000_000 if ts is None or not 0 <= ts < 2**62 else ts)
                     for k, v, h, ts in records], *rest) for records, *rest in batches]
        blob, offset = encode_batches(batches, first, data)
        fetch_offset = data.draw(st.integers(min_value=first, max_value=offset))
        result = self.decode_both(blob, fetch_offset)
        self.assertEqual(result[0], "ok")

    @settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(records=st.lists(raw_record(), min_size=0, max_size=6), count_change=st.sampled_from([0, 0, 0, -1, 1]),
           attributes=st.sampled_from([0, 0, 8, 2, 4]), base_offset=st.sampled_from([0, 2**40, 2**63 - 3]),
           base_ts=st.sampled_from([1_700_000_000_000, 2**63 - 1, -(2**63)]))
    @example(records=[b"\x06\x00\x00\x00\x01\x01\x00"], count_change=0, attributes=0, base_offset=0, base_ts=0)
    def test_wire_records(self, records: list, count_change: int, attributes: int, base_offset: int,
                          base_ts: int) -> None:
        """Hand-made records (big and wide varints, negative lengths, bad header counts, invalid UTF-8)."""
        blob = batch_of(b"".join(records), len(records) + count_change, base_offset=base_offset,
                        attributes=attributes, base_ts=base_ts, last_offset_delta=0)
        self.decode_both(blob)

    def test_big_varints(self) -> None:
        """64-bit deltas, offsets and timestamps past 64 bits when added to the batch's bases."""
        region = b"".join(
            R.encode_varint(9) + b"\x00" + R.encode_varint(ts) + R.encode_varint(off) + b"\x01\x01\x00"
            for ts, off in [(2**63 - 1, 0), (-(2**63), 2**63 - 1), (5, -(2**63))])
        blob = batch_of(region, 3, base_offset=2**63 - 1, base_ts=2**63 - 1)
        compiled = self.decode_both(blob)
        self.assertEqual(compiled[0], "ok")
        self.assertEqual(compiled[1][0][0][2:4], (2**63 - 1, 2**64 - 2))

    def test_wide_varint_declined(self) -> None:
        """A timestamp delta wider than 64 bits: the C loop declines, Python's gives its (wide) result."""
        region = b"\x10\x00" + b"\xff" * 9 + b"\x7f" + b"\x00\x01\x01\x00"
        blob = batch_of(region, 1)
        header = R._HEADER.unpack_from(blob, 0)
        out = [object()]
        self.assertIs(self.sp.decode_records(blob, 61, len(blob), header, out, "t", 0, tuple), False)
        self.assertEqual(len(out), 1)
        compiled = self.decode_both(blob)
        self.assertEqual(compiled[0], "ok")

    def test_messages(self) -> None:
        """The errors the Python loop names, the compiled one names alike."""
        cases = {
            b"\x0a\x00\x00\x00\x01\x01\x03\x01\x00\x01": "invalid number of record headers -2",
            b"\x0a\x00\x00\x00\x01\x01\x02\x01\x00\x01": "null header key",
            b"\x06\x00\x00\x00\x01\x01\x00\x00\x00": "2 bytes left after 1 records",
            b"\x06\x00\x00\x00\x01\x01": "records truncated",
            b"\x06\x00\x00\x00\x01\x20ab": "records truncated",
            b"\x06\x00" + b"\xff" * 10 + b"\x01": "varint longer than 10 bytes",
        }
        for region, message in cases.items():
            blob = batch_of(region, 1)
            for sp in (self.sp, None):
                with self.assertRaises(CorruptRecordError) as raised:
                    R._decode_fetched(sp, blob, "t", 0, 0, tuple, True, None)
                self.assertEqual(str(raised.exception), message, (region, sp))

    def test_batch_errors(self) -> None:
        """Batch-level errors of the batch loop (length, magic, CRC, codec), with their messages."""
        good = R.encode_batch_py([(b"k", b"v" * 20, [("h", b"x")], 5)] * 3, base_offset=40)
        region_at = 61

        def patched(at: int, raw: bytes, data: bytes = good) -> bytes:
            return data[:at] + raw + data[at + len(raw):]

        def by_hand(attributes: int, region: bytes) -> bytes:
            post = R._POST_CRC.pack(attributes, 0, 0, 0, -1, -1, -1, 1) + region
            return R._PRE_CRC.pack(0, len(post) + 9, -1, 2, R.crc32c(post)) + post

        cases = [
            patched(8, struct.pack(">i", 10)),
            patched(8, struct.pack(">i", -100)),
            patched(16, b"\x01"),
            patched(region_at + 3, b"\xff"),  # CRC mismatch
            good + patched(16, b"\x07"),  # a bad second batch
            good + good[:40],  # a partial trailing batch: ignored
            by_hand(5, b"\x00" * 10),  # codec 5: unknown
            by_hand(3, b"garbage!"),  # lz4 that is not
            by_hand(0x20, b"\x00" * 10),  # a control batch: skipped, whatever it holds
        ]
        for data in cases:
            for verify_crc in (True, False):
                results = []
                for sp in (self.sp, None):
                    try:
                        results.append(("ok", R._decode_fetched(sp, data, "t", 7, 0, ConsumerRecord, verify_crc,
                                                                None)))
                    except Exception as e:
                        results.append(("raised", type(e), str(e)))
                self.assertEqual(results[0], results[1], data[:30])
        with self.assertRaises(CorruptRecordError) as raised:
            R._decode_fetched(self.sp, patched(region_at + 3, b"\xff"), "t", 7, 0, ConsumerRecord, True, None)
        self.assertEqual(str(raised.exception), "CRC mismatch in batch at offset 40 of t-7")

    def test_fetched_accepts_bytes_likes(self) -> None:
        data = R.encode_batch_py([(b"k", b"v", None, 5)] * 3, base_offset=2)
        for blob in (bytearray(data), memoryview(data)):
            self.assertEqual(R.decode_fetched(blob, "t", 0, 3, ConsumerRecord),
                             R.decode_fetched_py(data, "t", 0, 3, ConsumerRecord))

    def test_fetch_offset_past_64_bits(self) -> None:
        data = R.encode_batch_py([(b"k", b"v", None, 5)] * 3)
        self.assertIs(self.sp.decode_fetched(data, "t", 0, 2**64, tuple, True, R.crc32c, R.decompress,
                                             R._decode_consumer_records), NotImplemented)
        self.assertEqual(self.decode_both(data, 2**64), ("ok", ([], 2**64)))

    def test_shipper_records(self) -> None:
        records = [(b"web1:/var/log/nginx/access.log", b"127.0.0.1 - - [line %d]" % i,
                    [("host", b"web1"), ("path", b"/var/log/nginx/access.log")], 1_700_000_000_000 + i)
                   for i in range(500)]
        blob = R.encode_batch_py(records, base_offset=100) + R.encode_batch_py(records, base_offset=600,
                                                                                  compression=3)
        compiled = self.decode_both(blob, fetch_offset=150)
        self.assertEqual(len(compiled[1][0]), 950)
        self.assertEqual(compiled[1][0][0].headers, (("host", b"web1"), ("path", b"/var/log/nginx/access.log")))

    def test_read_committed(self) -> None:
        """Aborted transactions are dropped the same way on both paths."""
        data = R.encode_batch_py([(b"k", b"a", None, 1)] * 3, base_offset=0, producer_id=9, is_transactional=True)
        marker = R.encode_batch_py([(b"\x00\x00\x00\x00", b"", None, 1)], base_offset=3, producer_id=9,
                                   is_transactional=True, is_control=True)
        after = R.encode_batch_py([(b"k", b"b", None, 1)], base_offset=4)
        compiled = self.decode_both(data + marker + after, aborted=[(9, 0)])
        self.assertEqual([r.value for r in compiled[1][0]], [b"b"])


class RobustnessTests(CompiledTestCase):
    """Garbage and truncations give CorruptRecordError (or records), never a crash, and leak no references."""

    header = (0, 0, -1, 2, 0, 0, 0, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, 1)

    def decode_region(self, region: bytes, count: int, cls: type = ConsumerRecord) -> tuple:
        header = self.header[:12] + (count,)
        out_c: list = []
        out_py: list = []
        compiled = outcome(lambda: self.sp.decode_records(region, 0, len(region), header, out_c, "t", 0, cls))
        python = outcome(lambda: R._decode_consumer_records(region, 0, len(region), header, out_py, "t", 0, cls))
        if compiled == ("ok", False):
            return python  # declined: Python's loop decodes it
        self.assertIn(compiled, [("ok", True), ("raised", CorruptRecordError)])
        self.assertIn(python, [("ok", None), ("raised", CorruptRecordError)])
        self.assertEqual(compiled[0], python[0], region)
        if compiled[0] == "ok":
            self.assertEqual(out_c, out_py)
        else:
            self.assertEqual(out_c, [])
        return compiled

    @settings(max_examples=1000, deadline=None)
    @given(region=st.binary(max_size=200), count=st.integers(min_value=-2, max_value=40))
    def test_garbage(self, region: bytes, count: int) -> None:
        self.decode_region(region, count)

    @settings(max_examples=300, deadline=None)
    @given(records=st.lists(record, min_size=1, max_size=8), data=st.data())
    def test_truncated_and_flipped(self, records: list, data: st.DataObject) -> None:
        records = [(k, v, h, 1_700_000_000_000) for k, v, h, _ in records]
        region = R._encode_records(records, 1_700_000_000_000)[0]
        cut = data.draw(st.integers(min_value=0, max_value=len(region)))
        self.decode_region(region[:cut], len(records))
        if region:
            at = data.draw(st.integers(min_value=0, max_value=len(region) - 1))
            flipped = bytearray(region)
            flipped[at] ^= data.draw(st.integers(min_value=1, max_value=255))
            self.decode_region(bytes(flipped), len(records))

    def test_every_truncation_of_a_batch(self) -> None:
        records = [(b"key%d" % i, b"value" * i, [("h%d" % i, b"x" * i), ("n", None)], 1_700_000_000_000 + i)
                   for i in range(5)]
        region = R._encode_records(records, 1_700_000_000_000)[0]
        for cut in range(len(region)):
            self.assertEqual(self.decode_region(region[:cut], 5), ("raised", CorruptRecordError))
        self.assertEqual(self.decode_region(region, 5), ("ok", True))

    def test_bounds_of_the_arguments(self) -> None:
        out: list = []
        for pos, end in [(-1, 5), (5, 4), (0, 100)]:
            with self.assertRaises(ValueError):
                self.sp.decode_records(b"abc" * 10, pos, end, self.header, out, "t", 0, tuple)
        with self.assertRaises(TypeError):
            self.sp.decode_records(b"", 0, 0, self.header, out, "t", 0, dict)
        with self.assertRaises(ValueError):
            self.sp.decode_records(b"", 0, 0, self.header[:5], out, "t", 0, tuple)

    def test_no_reference_leaks(self) -> None:
        """The shared objects of a record come back to their reference counts, after success and errors."""

        class Fresh(NamedTuple):  # no records of it anywhere else
            topic: str
            partition: int
            offset: int
            timestamp_ms: int
            timestamp_type: int
            key: bytes | None
            value: bytes | None
            headers: tuple

        topic = "-".join(["leak", "check", str(os.getpid())])  # made now: not shared with other code
        partition = int("1" * 30)
        records = [(b"k", b"v", [("h", b"x")], 1_700_000_000_000)] * 50
        good = R._encode_records(records, 1_700_000_000_000)[0]
        header = self.header[:12] + (50,)
        gc.collect()
        before = (sys.getrefcount(topic), sys.getrefcount(partition), sys.getrefcount(Fresh))
        for _ in range(20):
            out: list = []
            self.assertTrue(self.sp.decode_records(good, 0, len(good), header, out, topic, partition, Fresh))
            del out
            for cut in (5, len(good) // 2, len(good) - 1):
                with self.assertRaises(CorruptRecordError):
                    self.sp.decode_records(good[:cut], 0, cut, header, [], topic, partition, Fresh)
            blob = batch_of(good, 50)
            decoded = self.sp.decode_fetched(blob, topic, partition, 0, Fresh, True, R.crc32c, R.decompress,
                                             R._decode_consumer_records)
            self.assertEqual(len(decoded[0]), 50)
            del decoded
            with self.assertRaises(CorruptRecordError):
                self.sp.decode_fetched(blob[:-3] + b"\x00" * 3, topic, partition, 0, Fresh, True, R.crc32c,
                                       R.decompress, R._decode_consumer_records)
        gc.collect()
        self.assertEqual(before, (sys.getrefcount(topic), sys.getrefcount(partition), sys.getrefcount(Fresh)))

    def test_records_left_to_reference_counting(self) -> None:
        """
        Consumer records hold no reference cycles: they leave the cyclic
        collector's lists at once (what the collector itself does to such
        exact tuples), unless their class could hold more than its items.
        """

        class WithDict(tuple):
            """Its instances have a __dict__, which could hold anything."""

        records = [(b"k", b"v", [("h", b"x")], 1_700_000_000_000)]
        region = R._encode_records(records, 1_700_000_000_000)[0]
        header = self.header
        for cls, tracked in [(ConsumerRecord, False), (tuple, False), (WithDict, True)]:
            out: list = []
            self.sp.decode_records(region, 0, len(region), header, out, "t", 0, cls)
            self.assertEqual(gc.is_tracked(out[0]), tracked, cls)
            self.assertFalse(gc.is_tracked(out[0][7]))
        out = []
        self.sp.decode_records(region, 0, len(region), header, out, ["not", "a", "str"], 0, tuple)
        self.assertTrue(gc.is_tracked(out[0]))
        out = []
        self.sp.decode_records(region, 0, len(region), header, out, "", 0, R.Record, True)
        self.assertTrue(gc.is_tracked(out[0]))
        self.assertEqual(out[0].headers, [("h", b"x")])
