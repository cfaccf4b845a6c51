"""
Unit tests for L{kafkatw.protocol.produce}: the hand-written ProduceResponse
encoder gives kio's bytes for every version the broker answers, and clients'
decoders (kio's) read it back.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker.apis import SUPPORTED_VERSIONS
from kafkatw.protocol.messages import decode_response, encode_response
from kafkatw.protocol.produce import PRODUCE_RESPONSE_MAX_VERSION, encode_produce_response

_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)

_partition = st.fixed_dictionaries(
    {"index": st.integers(0, (1 << 31) - 1), "error_code": st.sampled_from([0, 1, 2, 6, 19, 47, 87]),
     "base_offset": _INT64},
    optional={"log_append_time": st.one_of(st.just(-1), st.integers(0, 1 << 45)),
              "log_start_offset": _INT64,
              "error_message": st.one_of(st.none(), st.text(max_size=40))},
)
_responses = st.lists(st.tuples(st.text(min_size=1, max_size=30), st.lists(_partition, max_size=4)), max_size=4)


def _kio(version: int, correlation_id: int, responses: list, throttle_ms: int) -> bytes:
    body = {"responses": [{"name": name, "partition_responses": partitions} for name, partitions in responses],
            "throttle_time": throttle_ms}
    return encode_response(0, version, correlation_id, body)


class EncodeProduceResponseTests(SynchronousTestCase):
    def test_versions_cover_the_broker(self) -> None:
        """Every Produce version the broker answers is encoded here."""
        low, high = SUPPORTED_VERSIONS[0]
        self.assertEqual(low, 3)
        self.assertLessEqual(high, PRODUCE_RESPONSE_MAX_VERSION)

    @settings(max_examples=300, deadline=None)
    @given(version=st.integers(3, PRODUCE_RESPONSE_MAX_VERSION), correlation_id=st.integers(-(1 << 31), (1 << 31) - 1),
           responses=_responses, throttle_ms=st.integers(0, (1 << 31) - 1))
    def test_same_bytes_as_kio(self, version: int, correlation_id: int, responses: list, throttle_ms: int) -> None:
        """The bytes equal kio's encoding of the same response, whatever the fields."""
        self.assertEqual(encode_produce_response(version, correlation_id, responses, throttle_ms),
                         _kio(version, correlation_id, responses, throttle_ms))

    def test_decodes(self) -> None:
        """A client reads the fields back (v9: compact strings and tagged fields)."""
        frame = encode_produce_response(9, 77, [("clicks", [
            {"index": 3, "error_code": 0, "base_offset": 1234, "log_append_time": -1, "log_start_offset": 5},
            {"index": 4, "error_code": 6, "base_offset": -1, "error_message": "not the leader"},
        ])], 25)
        correlation_id, response = decode_response(0, 9, frame)
        self.assertEqual(correlation_id, 77)
        (topic,) = response.responses
        self.assertEqual(topic.name, "clicks")
        first, second = topic.partition_responses
        self.assertEqual((first.index, int(first.error_code), first.base_offset, first.log_start_offset), (3, 0, 1234, 5))
        self.assertIsNone(first.log_append_time)
        self.assertEqual((second.index, int(second.error_code), second.error_message), (4, 6, "not the leader"))
        self.assertEqual(response.throttle_time.total_seconds(), 0.025)

    def test_unknown_version(self) -> None:
        """A version outside 3–9 is refused, not encoded wrongly."""
        self.assertRaises(ValueError, encode_produce_response, 2, 1, [], 0)
        self.assertRaises(ValueError, encode_produce_response, PRODUCE_RESPONSE_MAX_VERSION + 1, 1, [], 0)
