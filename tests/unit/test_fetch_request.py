"""
Unit tests for L{kafkatw.protocol.fetch.FetchRequestBody}: the consumer's
hand-encoded FetchRequest gives kio's bytes for every version kafkatw's
clients speak, and the broker's decoder reads it back.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.connection import CLIENT_VERSIONS
from kafkatw.protocol.fetch import FETCH_MAX_VERSION, FETCH_MIN_VERSION, FetchRequestBody
from kafkatw.protocol.messages import decode_request, encode_request, parse_request_header

_INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_NAME = st.text(min_size=1, max_size=20)

_partition = st.fixed_dictionaries({
    "partition": _INT32, "fetch_offset": _INT64, "partition_max_bytes": _INT32,
    "current_leader_epoch": _INT32, "last_fetched_epoch": _INT32, "log_start_offset": _INT64})
_body = st.fixed_dictionaries({
    "replica_id": _INT32, "max_wait": st.integers(0, (1 << 31) - 1), "min_bytes": _INT32, "max_bytes": _INT32,
    "isolation_level": st.sampled_from([0, 1]), "session_id": _INT32, "session_epoch": _INT32,
    "topics": st.lists(st.fixed_dictionaries({"topic": _NAME, "partitions": st.lists(_partition, max_size=3)}),
                       max_size=3),
    "forgotten_topics_data": st.lists(st.fixed_dictionaries({"topic": _NAME,
                                                             "partitions": st.lists(_INT32, max_size=3)}),
                                      max_size=2),
    "rack_id": st.text(max_size=10)})


class FetchRequestBodyTests(SynchronousTestCase):
    def test_versions_cover_the_client(self) -> None:
        """Every Fetch version kafkatw's clients may negotiate is encoded by hand."""
        low, high = CLIENT_VERSIONS[1]
        self.assertGreaterEqual(low, FETCH_MIN_VERSION)
        self.assertLessEqual(high, FETCH_MAX_VERSION)

    @settings(max_examples=300, deadline=None)
    @given(version=st.integers(FETCH_MIN_VERSION, FETCH_MAX_VERSION), body=_body)
    def test_same_bytes_as_kio(self, version: int, body: dict) -> None:
        """The frame equals kio's encoding of the same plain values."""
        self.assertEqual(encode_request(1, version, 9, "c", FetchRequestBody(body)),
                         encode_request(1, version, 9, "c", body))

    def test_broker_reads_it(self) -> None:
        """The broker's decoder gets the consumer's fields back (v12: compact, tagged fields)."""
        body = FetchRequestBody(replica_id=-1, max_wait=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
                                session_id=0, session_epoch=-1, topics=[{"topic": "clicks", "partitions": [
                                    {"partition": 2, "fetch_offset": 99, "partition_max_bytes": 1048576,
                                     "current_leader_epoch": 3, "last_fetched_epoch": -1, "log_start_offset": -1}]}],
                                forgotten_topics_data=[], rack_id="")
        frame = encode_request(1, 12, 5, "consumer-1", body)
        header = parse_request_header(frame)
        request = decode_request(frame, header)
        self.assertEqual(request.isolation_level, 1)
        (topic,) = request.topics
        (partition,) = topic.partitions
        self.assertEqual((topic.topic, partition.partition, partition.fetch_offset, partition.current_leader_epoch,
                          partition.partition_max_bytes), ("clicks", 2, 99, 3, 1048576))

    def test_still_plain_values(self) -> None:
        """The body stays a mapping of plain values (what tests and the fakes read)."""
        body = FetchRequestBody(max_wait=1, min_bytes=1, topics=[])
        self.assertEqual(body["max_wait"], 1)
        self.assertIsInstance(body, dict)

    def test_unknown_version(self) -> None:
        """A version outside the hand-encoded ones is refused."""
        body = FetchRequestBody(max_wait=1, min_bytes=1, topics=[])
        self.assertRaises(ValueError, body.encode_body, FETCH_MAX_VERSION + 1, True)
        self.assertRaises(ValueError, body.encode_body, FETCH_MIN_VERSION - 1, False)
