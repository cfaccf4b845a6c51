"""
Unit tests of L{kafkatw.client.consumer.Consumer}, on a L{Clock}, no sockets,
no sleeps.  What the consumer does against a broker (resets, seeks, time
look-ups, compressed data) runs against L{kafkatw.testing.FakeCluster}, the
broker's real request handling in memory.  What it does with answers no
single in-memory broker gives on demand -- fetches pipelined to two leaders,
partial and corrupt batches, leadership errors, lost connections, answers
held back while the test looks at the requests -- runs against L{FakeClient},
which records each request and lets the test answer it.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.client.client import PartitionMetadata
from kafkatw.client.consumer import (
    Consumer,
    ConsumerRecord,
    NoOffsetForPartitionError,
)
from kafkatw.errors import CorruptRecordError, ErrorCode, OffsetOutOfRangeError
from kafkatw.protocol.messages import build, response_schema
from kafkatw.protocol.records import decode_batches, decode_fetched, encode_batch, scan_next_offset
from kafkatw.testing import FakeCluster

T = "t"


class FakeClient:
    """The part of L{KafkaClient} the consumer uses; requests wait for the test."""

    def __init__(self, reactor: Any, leaders: dict[tuple[str, int], int]) -> None:
        self.reactor = reactor
        self.requests: list[tuple[int, int, dict, defer.Deferred]] = []
        self.invalidations = 0
        self.refreshes = 0
        self.next_leaders: dict[tuple[str, int], int] | None = None
        self.wanted: set[str] = set()
        self.closed = False
        self.set_leaders(leaders)

    def set_leaders(self, leaders: dict[tuple[str, int], int]) -> None:
        self.topics: dict[str, dict[int, PartitionMetadata]] = {}
        for (topic, partition), leader in leaders.items():
            self.topics.setdefault(topic, {})[partition] = PartitionMetadata(leader, 0)

    def want(self, topics: Any) -> None:
        self.wanted.update(topics)

    def leader_for(self, topic: str, partition: int) -> int:
        meta = self.topics.get(topic, {}).get(partition)
        return meta.leader if meta is not None else -1

    def invalidate(self) -> None:
        self.invalidations += 1

    def refresh_metadata(self) -> defer.Deferred:
        self.refreshes += 1
        if self.next_leaders is not None:
            self.set_leaders(self.next_leaders)
            self.next_leaders = None
        return defer.succeed(None)

    async def ensure_metadata(self, topics: Any = ()) -> None:
        self.want(topics)

    def send(self, node: int, api_key: int, body: dict, expect_response: bool = True,
             timeout_ms: int | None = None) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.requests.append((node, api_key, body, d))
        return d

    def close(self) -> defer.Deferred:
        self.closed = True
        return defer.succeed(None)

    # helpers for the tests

    def pending(self, api_key: int | None = None) -> list[tuple[int, int, dict, defer.Deferred]]:
        return [r for r in self.requests if not r[3].called and (api_key is None or r[1] == api_key)]

    def fetches(self) -> list[tuple[int, dict[tuple[str, int], int], defer.Deferred]]:
        """Pending Fetches as (node, {tp: fetch offset}, deferred)."""
        out = []
        for node, _key, body, d in self.pending(1):
            offsets = {(t["topic"], p["partition"]): p["fetch_offset"] for t in body["topics"] for p in t["partitions"]}
            out.append((node, offsets, d))
        return out


def fetch_response(partitions: dict[tuple[str, int], dict]) -> Any:
    """A FetchResponse v12; each partition: records (bytes), error_code, high_watermark."""
    topics: dict[str, list] = {}
    for (topic, partition), p in partitions.items():
        topics.setdefault(topic, []).append({
            "partition_index": partition, "error_code": p.get("error_code", 0),
            "high_watermark": p.get("high_watermark", 100), "last_stable_offset": p.get("high_watermark", 100),
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": p.get("records", b"")})
    return build(response_schema(1, 12), {"throttle_time": 0, "error_code": 0, "session_id": 0,
                                          "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})


def list_offsets_response(offsets: dict[tuple[str, int], tuple[int, int]], error_code: int = 0) -> Any:
    topics: dict[str, list] = {}
    for (topic, partition), (offset, ts) in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error_code,
                                             "timestamp": ts, "offset": offset, "leader_epoch": 0})
    return build(response_schema(2, 6), {"throttle_time": 0,
                                         "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})


def batch(base_offset: int, count: int, value_bytes: int = 10, **kw: Any) -> bytes:
    return encode_batch([(b"k%d" % i, b"v" * value_bytes, [], 1000 + i) for i in range(count)],
                        base_offset=base_offset, **kw)


class ConsumerTestCase(unittest.TestCase):
    leaders = {(T, 0): 1, (T, 1): 1, (T, 2): 2, (T, 3): 2}

    def make(self, **options: Any) -> Consumer:
        self.clock = Clock()
        self.client = FakeClient(self.clock, self.leaders)
        consumer = Consumer(self.clock, client=self.client, **options)
        self.addCleanup(consumer.close)
        return consumer

    def answer_fetch(self, node: int, partitions: dict[tuple[str, int], dict]) -> None:
        [(_, _, d)] = [f for f in self.client.fetches() if f[0] == node]
        d.callback(fetch_response(partitions))

    def assign_at(self, consumer: Consumer, offsets: dict[tuple[str, int], int]) -> None:
        consumer.assign(list(offsets))
        for tp, offset in offsets.items():
            consumer.seek(tp, offset)
        self.clock.advance(0)


class FetchPipelineTests(ConsumerTestCase):
    def test_one_fetch_in_flight_per_leader(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, p): 0 for p in range(4)})
        fetches = self.client.fetches()
        self.assertEqual(sorted((node, sorted(offsets)) for node, offsets, _ in fetches),
                         [(1, [(T, 0), (T, 1)]), (2, [(T, 2), (T, 3)])])
        # more polls, seeks and resumes send nothing while those are out
        consumer.poll()
        consumer.seek((T, 0), 0)
        self.clock.advance(1)
        self.assertEqual(len(self.client.fetches()), 2)

    def test_next_fetch_goes_out_before_the_records_are_polled(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0, (T, 1): 0})
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 5)}, (T, 1): {}})
        [(node, offsets, _)] = self.client.fetches()
        self.assertEqual((node, offsets), (1, {(T, 0): 5, (T, 1): 0}))  # prefetching
        records = self.successResultOf(consumer.poll())
        self.assertEqual([(r.partition, r.offset) for r in records], [(0, i) for i in range(5)])
        self.assertIsInstance(records[0], ConsumerRecord)
        self.assertEqual(records[0], ConsumerRecord(T, 0, 0, 1000, 0, b"k0", b"v" * 10, ()))
        self.assertEqual(self.successResultOf(consumer.position((T, 0))), 5)

    def test_waiting_poll_fires_when_data_arrives(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        d = consumer.poll(timeout_ms=1000)
        self.assertNoResult(d)
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 3)}})
        self.assertEqual([r.offset for r in self.successResultOf(d)], [0, 1, 2])

    def test_poll_times_out_with_nothing(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        d = consumer.poll(timeout_ms=100)
        self.clock.advance(0.05)
        self.assertNoResult(d)
        self.clock.advance(0.05)
        self.assertEqual(self.successResultOf(d), [])

    def test_records_before_the_position_are_skipped(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 7})
        # the broker answers from the start of the batch holding offset 7
        self.answer_fetch(1, {(T, 0): {"records": batch(5, 5) + batch(10, 2)}})
        records = self.successResultOf(consumer.poll())
        self.assertEqual([r.offset for r in records], [7, 8, 9, 10, 11])
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 12})

    def test_control_batches_are_skipped(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        control = encode_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 1000)], base_offset=3,
                               is_control=True, is_transactional=True, producer_id=7, producer_epoch=0)
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 3) + control + batch(4, 2)}})
        records = self.successResultOf(consumer.poll())
        self.assertEqual([r.offset for r in records], [0, 1, 2, 4, 5])

    def test_trailing_control_batch_moves_the_position(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        control = encode_batch([(b"\x00\x00\x00\x00", b"\x00" * 6, [], 1000)], base_offset=2, is_control=True)
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 2) + control}})
        self.successResultOf(consumer.poll())
        self.assertEqual(self.successResultOf(consumer.position((T, 0))), 3)

    def test_partial_trailing_batch_is_ignored(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        whole = batch(0, 4)
        self.answer_fetch(1, {(T, 0): {"records": whole + batch(4, 4)[:30]}})
        self.assertEqual([r.offset for r in self.successResultOf(consumer.poll())], [0, 1, 2, 3])
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 4})

    def test_max_records_and_round_robin(self) -> None:
        consumer = self.make(max_poll_records=4)
        self.assign_at(consumer, {(T, 0): 0, (T, 1): 0})
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 6)}, (T, 1): {"records": batch(0, 6)}})
        first = self.successResultOf(consumer.poll())
        second = self.successResultOf(consumer.poll())
        self.assertEqual([(r.partition, r.offset) for r in first], [(0, 0), (0, 1), (0, 2), (0, 3)])
        self.assertEqual([(r.partition, r.offset) for r in second], [(1, 0), (1, 1), (1, 2), (1, 3)])
        third = self.successResultOf(consumer.poll(max_records=10))
        self.assertEqual([(r.partition, r.offset) for r in third], [(0, 4), (0, 5), (1, 4), (1, 5)])

    def test_record_decoder(self) -> None:
        """
        C{record_decoder} makes what C{poll} returns of each fetched piece
        (here: one item per piece, as the Spark source's); the position
        moves past the piece as with records.
        """
        calls = []

        def undecoded(data: bytes, topic: str, partition: int, fetch_offset: int, record_class: type,
                      verify_crc: bool, aborted: Any) -> tuple[list, int]:
            calls.append((topic, partition, fetch_offset, record_class, verify_crc, aborted))
            next_offset = scan_next_offset(data, fetch_offset)
            return [(topic, partition, next_offset - 1, data)], next_offset

        consumer = self.make(record_decoder=undecoded, max_poll_records=1)
        self.assign_at(consumer, {(T, 0): 2, (T, 1): 0})
        data = batch(0, 5) + batch(5, 2)
        self.answer_fetch(1, {(T, 0): {"records": data}, (T, 1): {}})
        self.assertEqual(self.successResultOf(consumer.poll()), [(T, 0, 6, data)])
        self.assertEqual(calls, [(T, 0, 2, ConsumerRecord, True, None)])
        self.assertEqual(self.successResultOf(consumer.position((T, 0))), 7)
        self.assertEqual(self.successResultOf(consumer.poll()), [])

    def test_back_pressure_stops_fetching_a_full_partition(self) -> None:
        consumer = self.make(max_buffered_bytes=1000, max_poll_records=10)
        self.assign_at(consumer, {(T, 0): 0})
        data = batch(0, 10, value_bytes=100) + batch(10, 10, value_bytes=100)
        self.assertGreater(len(data), 1000)
        self.answer_fetch(1, {(T, 0): {"records": data}})
        self.assertEqual(self.client.fetches(), [])  # buffer full: no prefetch
        self.clock.advance(5)
        self.assertEqual(self.client.fetches(), [])
        self.assertEqual(len(self.successResultOf(consumer.poll())), 10)
        self.assertEqual(self.client.fetches(), [])  # still 1 KB+ buffered
        self.assertEqual(len(self.successResultOf(consumer.poll())), 10)
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 20})

    def test_bound_is_shared_between_partitions(self) -> None:
        consumer = self.make(max_buffered_bytes=2000)
        self.assign_at(consumer, {(T, 0): 0, (T, 1): 0})
        big = batch(0, 10, value_bytes=120)
        self.assertGreater(len(big), 1000)
        self.answer_fetch(1, {(T, 0): {"records": big}, (T, 1): {"records": batch(0, 1)}})
        [(_, offsets, _)] = self.client.fetches()
        self.assertEqual(offsets, {(T, 1): 1})  # partition 0 is full, 1 is not

    def test_rotation_puts_every_partition_first(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0, (T, 1): 0})
        firsts = []
        for _ in range(2):
            [(_, _, body, d)] = [r for r in self.client.pending(1) if r[0] == 1]
            firsts.append(body["topics"][0]["partitions"][0]["partition"])
            d.callback(fetch_response({(T, 0): {}, (T, 1): {}}))
        self.assertEqual(sorted(firsts), [0, 1])


class PauseTests(ConsumerTestCase):
    def test_pause_and_resume(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0, (T, 1): 0})
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 2)}, (T, 1): {"records": batch(0, 2)}})
        consumer.pause((T, 0))
        self.assertEqual(consumer.paused(), {(T, 0)})
        self.assertEqual([(r.partition, r.offset) for r in self.successResultOf(consumer.poll())], [(1, 0), (1, 1)])
        # the prefetch sent before the pause comes back; the next Fetch leaves partition 0 out
        self.answer_fetch(1, {(T, 0): {}, (T, 1): {}})
        self.assertEqual(self.client.fetches()[0][1], {(T, 1): 2})
        self.assertEqual(self.successResultOf(consumer.poll()), [])
        consumer.resume((T, 0))
        self.assertEqual([(r.partition, r.offset) for r in self.successResultOf(consumer.poll())], [(0, 0), (0, 1)])
        self.answer_fetch(1, {(T, 1): {}})
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 2, (T, 1): 2})

    def test_resume_wakes_a_waiting_poll(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 2)}})
        consumer.pause((T, 0))
        d = consumer.poll(timeout_ms=1000)
        self.assertNoResult(d)
        consumer.resume((T, 0))
        self.assertEqual(len(self.successResultOf(d)), 2)


class OffsetResetTests(ConsumerTestCase):
    def out_of_range(self, consumer: Consumer) -> None:
        self.assign_at(consumer, {(T, 0): 50})
        self.answer_fetch(1, {(T, 0): {"error_code": ErrorCode.offset_out_of_range}})

    def test_none_fails_the_poll_until_a_seek(self) -> None:
        consumer = self.make(auto_offset_reset="none")
        self.out_of_range(consumer)
        failure = self.failureResultOf(consumer.poll(), OffsetOutOfRangeError)
        self.assertEqual(failure.value.partitions, {(T, 0): 50})
        self.failureResultOf(consumer.poll(), OffsetOutOfRangeError)  # sticky
        self.assertEqual(self.client.fetches(), [])
        self.assertEqual(self.client.pending(2), [])
        consumer.seek((T, 0), 10)
        self.clock.advance(0)
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 10})

    def test_none_without_a_position(self) -> None:
        consumer = self.make(auto_offset_reset="none")
        consumer.assign([(T, 0)])
        self.clock.advance(0)
        self.failureResultOf(consumer.poll(), NoOffsetForPartitionError)
        self.failureResultOf(consumer.position((T, 0)), NoOffsetForPartitionError)

    def test_out_of_range_after_buffered_data_waits_for_the_buffer(self) -> None:
        consumer = self.make(auto_offset_reset="earliest")
        self.assign_at(consumer, {(T, 0): 0})
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 3)}})
        self.answer_fetch(1, {(T, 0): {"error_code": ErrorCode.offset_out_of_range}})
        self.assertEqual(self.client.pending(2), [])
        self.assertEqual(self.client.fetches(), [])
        self.assertEqual([r.offset for r in self.successResultOf(consumer.poll())], [0, 1, 2])
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 3})

    def test_initial_position_from_auto_offset_reset(self) -> None:
        consumer = self.make(auto_offset_reset="latest")
        consumer.assign([(T, 0), (T, 2)])
        self.clock.advance(0)
        [(n1, _, _, d1), (n2, _, _, d2)] = sorted(self.client.pending(2), key=lambda r: r[0])
        self.assertEqual((n1, n2), (1, 2))
        d1.callback(list_offsets_response({(T, 0): (11, -1)}))
        d2.callback(list_offsets_response({(T, 2): (22, -1)}))
        self.assertEqual(sorted(f[1].items() for f in self.client.fetches()),
                         sorted([{(T, 0): 11}.items(), {(T, 2): 22}.items()]))

    def test_initial_positions_seam(self) -> None:
        class Committed(Consumer):
            def initial_positions(self, partitions):
                return defer.succeed({tp: 42 for tp in partitions if tp[1] == 0})

        self.clock = Clock()
        self.client = FakeClient(self.clock, self.leaders)
        consumer = Committed(self.clock, client=self.client, auto_offset_reset="earliest")
        consumer.assign([(T, 0), (T, 1)])
        self.clock.advance(0)
        [(_, _, body, d)] = self.client.pending(2)
        self.assertEqual([p["partition_index"] for p in body["topics"][0]["partitions"]], [1])
        d.callback(list_offsets_response({(T, 1): (0, -1)}))
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 42, (T, 1): 0})

    def test_seek_drops_buffered_records_and_stale_responses(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        consumer.seek((T, 0), 100)  # while the fetch at 0 is out
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 3)}})
        self.assertEqual(self.successResultOf(consumer.poll()), [])
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 100})

class RetryTests(ConsumerTestCase):
    def test_not_leader_refreshes_metadata_and_retries_with_backoff(self) -> None:
        consumer = self.make(retry_backoff_ms=100)
        self.assign_at(consumer, {(T, 0): 4})
        self.client.next_leaders = {**self.leaders, (T, 0): 2}
        refreshes = self.client.refreshes
        self.answer_fetch(1, {(T, 0): {"error_code": ErrorCode.not_leader_or_follower}})
        self.assertGreater(self.client.invalidations, 0)
        self.assertEqual(self.client.refreshes, refreshes + 1)
        self.assertEqual(self.client.fetches(), [])  # backing off
        self.clock.advance(0.1)
        [(node, offsets, _)] = self.client.fetches()
        self.assertEqual((node, offsets), (2, {(T, 0): 4}))
        self.answer_fetch(2, {(T, 0): {"records": batch(4, 2)}})
        self.assertEqual([r.offset for r in self.successResultOf(consumer.poll())], [4, 5])

    def test_connection_failure_retries(self) -> None:
        from kafkatw.client.connection import BrokerConnectionError

        consumer = self.make(retry_backoff_ms=100)
        self.assign_at(consumer, {(T, 0): 0})
        [(_, _, d)] = self.client.fetches()
        d.errback(BrokerConnectionError("gone"))
        self.assertEqual(self.client.fetches(), [])
        self.clock.advance(0.1)
        self.assertEqual(self.client.fetches()[0][1], {(T, 0): 0})

    def test_list_offsets_retries_leadership_errors(self) -> None:
        consumer = self.make(retry_backoff_ms=100)
        d = consumer.offsets_for_times({(T, 0): 5})
        [(_, _, _, ld)] = self.client.pending(2)
        ld.callback(list_offsets_response({(T, 0): (0, 0)}, error_code=ErrorCode.not_leader_or_follower))
        self.assertNoResult(d)
        self.clock.advance(0.1)
        [(_, _, _, ld)] = self.client.pending(2)
        ld.callback(list_offsets_response({(T, 0): (8, 6)}))
        self.assertEqual(self.successResultOf(d), {(T, 0): (8, 6)})

    def test_list_offsets_retries_a_new_leaders_offset_not_available(self) -> None:
        """KIP-207: a new leader whose high watermark has not reached the start of its epoch."""
        consumer = self.make(retry_backoff_ms=100)
        d = consumer.end_offsets([(T, 0)])
        [(_, _, _, ld)] = self.client.pending(2)
        ld.callback(list_offsets_response({(T, 0): (-1, -1)}, error_code=ErrorCode.offset_not_available))
        self.assertNoResult(d)
        self.clock.advance(0.1)
        [(_, _, _, ld)] = self.client.pending(2)
        ld.callback(list_offsets_response({(T, 0): (40, -1)}))
        self.assertEqual(self.successResultOf(d), {(T, 0): 40})

    def test_unknown_leader_waits_for_metadata(self) -> None:
        consumer = self.make(retry_backoff_ms=100)
        self.client.set_leaders({(T, 0): -1})
        self.client.next_leaders = {(T, 0): 2}
        self.assign_at(consumer, {(T, 0): 0})
        self.clock.advance(0.1)
        self.assertEqual(self.client.fetches()[0][0], 2)

    def test_corrupt_batch_fails_the_poll(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        data = bytearray(batch(0, 3))
        data[-1] ^= 0xFF
        self.answer_fetch(1, {(T, 0): {"records": bytes(data)}})
        self.failureResultOf(consumer.poll(), CorruptRecordError)
        self.assertEqual(self.successResultOf(consumer.position((T, 0))), 0)


class AsyncIterationTests(ConsumerTestCase):
    def test_async_for(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})
        seen: list[int] = []

        async def read() -> None:
            async for record in consumer:
                seen.append(record.offset)
                if record.offset == 4:
                    await consumer.close()

        d = defer.Deferred.fromCoroutine(read())
        self.assertNoResult(d)
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 3)}})
        self.assertEqual(seen, [0, 1, 2])
        self.assertNoResult(d)
        self.answer_fetch(1, {(T, 0): {"records": batch(3, 3)}})
        self.successResultOf(d)
        self.assertEqual(seen, [0, 1, 2, 3, 4])

    def test_close_ends_a_waiting_iteration(self) -> None:
        consumer = self.make()
        self.assign_at(consumer, {(T, 0): 0})

        async def read() -> int:
            return len([r async for r in consumer])

        d = defer.Deferred.fromCoroutine(read())
        self.assertNoResult(d)
        consumer.close()
        self.assertEqual(self.successResultOf(d), 0)


class DecodeFetchedTests(unittest.TestCase):
    def test_matches_decode_batches(self) -> None:
        records = [(None if i % 3 == 0 else b"k" * i, None if i % 5 == 0 else b"v" * (i * 7),
                    [("h%d" % j, None if j == 1 else b"x" * j) for j in range(i % 4)], 10_000 + i * 1000)
                   for i in range(300)]
        for codec in range(5):
            data = encode_batch(records, base_offset=1000, compression=codec)
            expected = [(r.offset, r.timestamp_ms, r.key, r.value, tuple(r.headers))
                        for b in decode_batches(data) for r in b.records]
            got, next_offset = decode_fetched(data, T, 3, 0, ConsumerRecord)
            self.assertEqual([(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in got], expected)
            self.assertEqual({(r.topic, r.partition, r.timestamp_type) for r in got}, {(T, 3, 0)})
            self.assertEqual(next_offset, 1300)

    def test_log_append_time(self) -> None:
        data = encode_batch([(None, b"a", [], 5), (None, b"b", [], 9)], timestamp_type=1)
        got, _ = decode_fetched(data, T, 0, 0, ConsumerRecord)
        self.assertEqual([(r.timestamp_ms, r.timestamp_type) for r in got], [(9, 1), (9, 1)])

    def test_scan_next_offset(self) -> None:
        data = batch(0, 3) + batch(3, 4)
        self.assertEqual(scan_next_offset(data, 0), 7)
        self.assertEqual(scan_next_offset(data[:-1], 0), 3)
        self.assertEqual(scan_next_offset(b"", 5), 5)


class LeaderEpochValidationTests(ConsumerTestCase):
    """KIP-320: after a leader change the position is validated with OffsetForLeaderEpoch."""

    leaders = {(T, 0): 1}

    def fetched_then_leader_moves(self, **options: Any) -> Consumer:
        consumer = self.make(**options)
        self.assign_at(consumer, {(T, 0): 0})
        [(_, _, body, _)] = self.client.pending(1)
        self.assertEqual(body["topics"][0]["partitions"][0]["current_leader_epoch"], 0)
        self.answer_fetch(1, {(T, 0): {"records": batch(0, 5, partition_leader_epoch=0)}})
        self.assertEqual(len(self.successResultOf(consumer.poll())), 5)
        # a new leader, broker 2, at epoch 1; the pending fetch to broker 1 is fenced
        [(_, _, d)] = self.client.fetches()
        self.client.topics[T][0] = PartitionMetadata(2, 1)
        d.callback(fetch_response({(T, 0): {"error_code": int(ErrorCode.fenced_leader_epoch)}}))
        self.clock.advance(1)
        [(node, _, body, d)] = self.client.pending(23)
        self.assertEqual(node, 2)
        self.assertEqual(body["topics"][0]["partitions"][0],
                         {"partition": 0, "current_leader_epoch": 1, "leader_epoch": 0})
        self.assertEqual(self.client.fetches(), [])  # no fetch before the position is validated
        return consumer

    def answer_epoch(self, end_offset: int) -> None:
        [(_, _, _, d)] = self.client.pending(23)
        d.callback(build(response_schema(23, 4), {"throttle_time": 0, "topics": [{"topic": T, "partitions": [
            {"partition": 0, "error_code": 0, "leader_epoch": 0, "end_offset": end_offset}]}]}))

    def test_no_truncation_fetches_on_with_the_new_epoch(self) -> None:
        self.fetched_then_leader_moves()
        self.answer_epoch(5)
        [(_, _, body, _)] = self.client.pending(1)
        partition = body["topics"][0]["partitions"][0]
        self.assertEqual((partition["fetch_offset"], partition["current_leader_epoch"]), (5, 1))

    def test_truncation_is_reported_with_reset_none(self) -> None:
        from kafkatw.client.consumer import LogTruncationError

        consumer = self.fetched_then_leader_moves(auto_offset_reset="none")
        self.answer_epoch(3)
        failure = self.failureResultOf(consumer.poll(), LogTruncationError)
        self.assertEqual(failure.value.partitions, {(T, 0): 3})
        self.assertIn("truncated at offset 3", str(failure.value))

    def test_truncation_with_a_reset_policy_continues_from_the_end_offset(self) -> None:
        consumer = self.fetched_then_leader_moves(auto_offset_reset="earliest")
        self.answer_epoch(3)
        self.assertEqual(self.successResultOf(consumer.position((T, 0))), 3)
        [(node, offsets, _)] = self.client.fetches()
        self.assertEqual((node, offsets), (2, {(T, 0): 3}))


class AgainstABrokerTests(unittest.TestCase):
    """The consumer against one real broker in memory (L{FakeCluster})."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.cluster = FakeCluster(self.clock, topics={T: 2})
        self.addCleanup(self.cluster.close)
        from kafkatw.client import AdminClient, Producer

        self.admin = AdminClient(self.clock, client=self.cluster.client())
        producer = Producer(self.clock, client=self.cluster.client())
        for i in range(9):  # nine records in partition 0, timestamps 1000..1008 ms
            self.cluster.result(producer.send(T, b"v%d" % i, key=b"k%d" % i, partition=0, timestamp_ms=1000 + i))

    def consumer(self, **options: Any) -> Consumer:
        consumer = Consumer(self.clock, client=self.cluster.client(), fetch_max_wait_ms=100, **options)
        self.addCleanup(lambda: self.cluster.result(consumer.close()))
        return consumer

    def read(self, consumer: Consumer, count: int) -> list[ConsumerRecord]:
        records: list[ConsumerRecord] = []
        for _ in range(100):
            records += self.cluster.result(consumer.poll(timeout_ms=100))
            if len(records) >= count:
                break
        return records

    def test_out_of_range_resets_to_earliest_or_latest(self) -> None:
        """A position past the log end (OFFSET_OUT_OF_RANGE) resets by C{auto_offset_reset}."""
        for reset, position in (("earliest", 0), ("latest", 9)):
            consumer = self.consumer(auto_offset_reset=reset)
            consumer.assign([(T, 0)])
            consumer.seek((T, 0), 50)
            self.cluster.advance(1)
            self.assertEqual(self.cluster.result(consumer.position((T, 0))), position, reset)

    def test_seek_to_beginning_and_end(self) -> None:
        """The beginning is the log start offset (after DeleteRecords), the end the high watermark."""
        self.assertEqual(self.cluster.result(self.admin.delete_records({(T, 0): 2}))[(T, 0)], (2, None))
        consumer = self.consumer()
        consumer.assign([(T, 0)])
        consumer.seek((T, 0), 5)
        self.assertIsNone(self.cluster.result(consumer.seek_to_beginning((T, 0))))
        self.assertEqual(self.cluster.result(consumer.position((T, 0))), 2)
        self.assertEqual([r.offset for r in self.read(consumer, 7)], list(range(2, 9)))
        self.cluster.result(consumer.seek_to_end())
        self.assertEqual(self.cluster.result(consumer.position((T, 0))), 9)

    def test_offsets_for_times(self) -> None:
        """The first offset at or after a timestamp, with its timestamp; None past the end or in an empty log."""
        consumer = self.consumer()
        found = self.cluster.result(consumer.offsets_for_times({(T, 0): 1005, (T, 1): 0}))
        self.assertEqual(found, {(T, 0): (5, 1005), (T, 1): None})
        self.assertEqual(self.cluster.result(consumer.offsets_for_times({(T, 0): 9999})), {(T, 0): None})

    def test_compressed_batches(self) -> None:
        """Batches compressed with each codec, as a producer sent them, read back in order."""
        from kafkatw.client import Producer

        for codec in ("gzip", "snappy", "lz4", "zstd"):
            producer = Producer(self.clock, client=self.cluster.client(), compression_type=codec, linger_ms=5)
            sends = [producer.send(T, b"%s-%d" % (codec.encode(), i), partition=1) for i in range(3)]
            for d in sends:
                self.cluster.result(d)
        consumer = self.consumer(auto_offset_reset="earliest")
        consumer.assign([(T, 1)])
        records = self.read(consumer, 12)
        self.assertEqual([r.offset for r in records], list(range(12)))
        self.assertEqual([r.value for r in records],
                         [b"%s-%d" % (c, i) for c in (b"gzip", b"snappy", b"lz4", b"zstd") for i in range(3)])
