"""
L{kafkatw.protocol.messages.decode_simple_produce}, the broker's hand
decoder of one-topic, one-partition Produce requests: whatever it accepts
decodes to what kio decodes (L{decode_request}); anything else is left to kio.
"""

from __future__ import annotations

import datetime
import struct
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial import unittest

from kafkatw.protocol import records as records_module
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.messages import (
    MalformedRequest,
    decode_request,
    decode_simple_produce,
    encode_request,
    parse_request_header,
    simple_produce_decoder,
)

from .test_records import compiled_speedups

_names = st.text(alphabet="abcXYZ09._-é", min_size=0, max_size=140)
_records = st.one_of(st.none(), st.binary(max_size=300), st.just(build_batch([(None, b"v" * 200)])),
                   st.just(b"r" * 20000))
_partitions = st.lists(st.fixed_dictionaries({"index": st.integers(-3, 2**31 - 1), "records": _records}),
                       min_size=0, max_size=2)
_bodies = st.fixed_dictionaries({
    "transactional_id": st.one_of(st.none(), st.none(), st.text(max_size=5)),
    "acks": st.sampled_from([-1, 0, 1, 2]),
    "timeout": st.integers(0, 2**31 - 1),
    "topic_data": st.lists(st.fixed_dictionaries({"name": _names, "partition_data": _partitions}),
                           min_size=0, max_size=2),
})


def _kio(frame: memoryview):
    """kio's decode of the one-partition shape, C{None} for another shape, C{"error"} when it fails."""
    header = parse_request_header(frame)
    try:
        request = decode_request(frame, header)
    except MalformedRequest:
        return "error"
    if (request.transactional_id is not None or len(request.topic_data) != 1
            or len(request.topic_data[0].partition_data) != 1):
        return None
    topic = request.topic_data[0]
    partition = topic.partition_data[0]
    timeout = request.timeout
    # exact: total_seconds() * 1000 rounds 16.301 s down to 16300 ms
    timeout_ms = timeout // datetime.timedelta(milliseconds=1) if hasattr(timeout, "total_seconds") else int(timeout)
    return request.acks, timeout_ms, topic.name, partition.index, partition.records


def _fast(frame: memoryview, decode=decode_simple_produce):
    header = parse_request_header(frame)
    decoded = decode(frame, header.body_offset, header.api_version >= 9)
    if decoded is None:
        return None
    acks, timeout, name, index, records = decoded
    return acks, timeout, name, index, None if records is None else bytes(records)


class DecodeSimpleProduceTests(unittest.TestCase):
    #: The decoder under test: the Python one here, the compiled one in L{CompiledDecodeSimpleProduceTests}.
    decode = staticmethod(decode_simple_produce)

    @settings(max_examples=300, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])  # and the subclass
    @given(body=_bodies, version=st.integers(3, 9))
    def test_same_as_kio(self, body, version):
        frame = memoryview(encode_request(0, version, 5, "client", body))
        fast, kio = _fast(frame, self.decode), _kio(frame)
        self.assertNotEqual(kio, "error")
        if kio is not None:
            self.assertEqual(fast, kio)  # the common shape is always taken
        else:
            self.assertIsNone(fast)

    @settings(max_examples=400, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])
    @given(body=_bodies, version=st.integers(3, 9), cut=st.integers(0, 400), flips=st.lists(
        st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3), extra=st.binary(max_size=3))
    def test_damaged_frames(self, body, version, cut, flips, extra):
        """Truncated, altered or extended frames: decoded as kio decodes them, or left to kio."""
        frame = bytearray(encode_request(0, version, 5, "client", body))
        header_end = parse_request_header(bytes(frame)).body_offset
        for position, value in flips:
            if header_end + position < len(frame):
                frame[header_end + position] = value
        frame = frame[:max(header_end, len(frame) - cut)] + extra
        view = memoryview(bytes(frame))
        fast = _fast(view, self.decode)
        if fast is not None:
            self.assertEqual(fast, _kio(view))
        self.assertEqual(fast, _fast(view))  # and as the Python decoder decodes it (or leaves it)
        self.assertEqual(_fast(bytes(frame), self.decode), fast)  # bytes as a view of them

    def test_shapes_left_to_kio(self):
        batch = build_batch([(None, b"v")])
        one = {"name": "t", "partition_data": [{"index": 0, "records": batch}]}
        for version in (3, 8, 9):
            for body in [
                {"transactional_id": "tx", "acks": 1, "timeout": 1, "topic_data": [one]},
                {"transactional_id": None, "acks": 1, "timeout": 1, "topic_data": [one, one]},
                {"transactional_id": None, "acks": 1, "timeout": 1, "topic_data": []},
                {"transactional_id": None, "acks": 1, "timeout": 1, "topic_data": [
                    {"name": "t", "partition_data": [{"index": 0, "records": batch}] * 2}]},
                {"transactional_id": None, "acks": 1, "timeout": 1, "topic_data": [{"name": "x" * 200,
                                                                                    "partition_data": []}]},
            ]:
                self.assertIsNone(_fast(memoryview(encode_request(0, version, 1, None, body)), self.decode),
                                  (version, body))

    def test_a_position_past_the_frame(self):
        """None, for positions whose bounds arithmetic would overflow too."""
        for pos in (sys.maxsize, sys.maxsize - 8, sys.maxsize - 13, 41):
            self.assertIsNone(self.decode(b"\0" * 40, pos, True))
            self.assertIsNone(self.decode(b"\0" * 40, pos, False))

    def test_a_negative_position_is_refused(self):
        """Not counted from the end of the frame (which, with Python's negative indexes, parsed this one)."""
        frame = bytes([2, 0, 0, 0, 0, 0x10, 1, 0, 0, 0, 7, 2, 12]) + bytes(11)
        self.assertIsNone(self.decode(frame, -20, True))
        self.assertIsNone(self.decode(frame, -1, False))

    def test_a_view_of_the_frame(self):
        batch = build_batch([(None, b"v" * 200)])
        frame = encode_request(0, 9, 1, "c", {"transactional_id": None, "acks": 0, "timeout": 30000, "topic_data": [
            {"name": "topic", "partition_data": [{"index": 4, "records": batch}]}]})
        header = parse_request_header(frame)
        acks, timeout, name, index, records = self.decode(frame, header.body_offset, True)
        self.assertEqual((acks, timeout, name, index, bytes(records)), (0, 30000, "topic", 4, batch))
        self.assertIsInstance(records, memoryview)
        self.assertIs(records.obj, frame)


class CompiledDecodeSimpleProduceTests(DecodeSimpleProduceTests):
    """
    L{DecodeSimpleProduceTests} of the compiled decoder (C{decode_simple_produce}
    of kafkatw/protocol/_speedups.c), which the broker uses when it is built
    (L{simple_produce_decoder}).  Without the extension these tests skip,
    unless C{KAFKATW_REQUIRE_SPEEDUPS=1} (CI), which makes its absence a failure
    (L{compiled_speedups}).
    """

    def setUp(self):
        self.decode = compiled_speedups().decode_simple_produce

    def test_the_broker_uses_it(self):
        """Whenever the extension is in use (not ignored with C{KAFKATW_PURE_PYTHON})."""
        self.assertIs(simple_produce_decoder, self.decode if records_module.SPEEDUPS else decode_simple_produce)

    def test_not_a_buffer(self):
        with self.assertRaises(TypeError):
            self.decode("not a buffer", 0, True)


class ProduceTemplateTests(unittest.TestCase):
    """The broker's one-partition ProduceResponse (L{kafkatw.broker.produce_apis._produce_template}) is kio's bytes."""

    @settings(max_examples=200, deadline=None)
    @given(version=st.integers(3, 9), topic=st.text(alphabet="abcZ09._-", min_size=1, max_size=249),
           correlation_id=st.integers(-2**31, 2**31 - 1), index=st.integers(0, 2**31 - 1),
           base_offset=st.integers(0, 2**63 - 1), append_time=st.integers(-1, 2**63 - 1),
           start=st.integers(0, 2**63 - 1))
    def test_same_bytes(self, version, topic, correlation_id, index, base_offset, append_time, start):
        from kafkatw.broker.produce_apis import _produce_template
        from kafkatw.protocol.produce import encode_produce_response

        prefix, partition, suffix = _produce_template(version, topic)
        fields = (index, 0, base_offset, append_time, start)
        got = (struct.pack(">i", correlation_id) + prefix + partition.pack(*(fields if version >= 5 else fields[:4]))
               + suffix)
        expected = encode_produce_response(version, correlation_id, [(topic, [
            {"index": index, "error_code": 0, "base_offset": base_offset, "log_append_time": append_time,
             "log_start_offset": start}])])
        self.assertEqual(got, expected)


class _Run:
    def queue(self, topic, partition, records):
        self.queued = (topic, partition, bytes(records))
        return [], 0

    def add(self, finish):
        return 7


class ProduceInRunTests(unittest.TestCase):
    """L{kafkatw.broker.apis.KafkaApis.produce_in_run}'s hand-parsed request header is L{parse_request_header}'s."""

    @settings(max_examples=200, deadline=None)
    @given(version=st.integers(0, 10), client_id=st.one_of(st.none(), st.text(max_size=20)),
           correlation_id=st.integers(-2**31, 2**31 - 1), acks=st.sampled_from([-1, 0, 1]),
           cut=st.integers(0, 3))
    def test_header(self, version, client_id, correlation_id, acks, cut):
        from types import SimpleNamespace

        from kafkatw.broker.apis import KafkaApis

        body = {"transactional_id": None, "acks": acks, "timeout": 10, "topic_data": [
            {"name": "t", "partition_data": [{"index": 1, "records": b"r"}]}]}
        frame = encode_request(0, min(max(version, 3), 9), correlation_id, client_id, body)
        frame = frame[:2] + struct.pack(">h", version) + frame[4:]  # versions kafkatw does not serve too
        if cut:
            frame = frame[:-cut]
        apis = SimpleNamespace(NOT_SIMPLE=KafkaApis.NOT_SIMPLE, authorizer=None, quotas=SimpleNamespace(enabled=False),
                               request_counts={}, replica_manager=SimpleNamespace(partitions={}))  # acks=all: not led
        run = _Run()
        got = KafkaApis.produce_in_run(apis, memoryview(frame), None, run)  # type: ignore[arg-type]
        if not 3 <= version <= 9 or acks == -1 or cut:
            self.assertIs(got, KafkaApis.NOT_SIMPLE)
            self.assertEqual(apis.request_counts, {})
            return
        self.assertEqual(run.queued, ("t", 1, b"r"))
        self.assertEqual(apis.request_counts, {0: 1})
        if acks == 0:
            self.assertIsNone(got)
        else:
            self.assertEqual(got, (parse_request_header(frame), 7))
