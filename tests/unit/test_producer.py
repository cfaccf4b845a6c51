"""
Unit tests for L{kafkatw.client.producer} on a L{Clock}; no sockets, no
sleeps.  Round trips through a broker (keys, headers, the broker's
timestamps, idempotence) run against L{kafkatw.testing.FakeCluster}, the
broker's real request handling in memory.  How the producer batches, routes
and retries is checked against L{FakeClient}, which keeps each request for
the test to look at and answer as it likes (several leaders, errors, lost
connections, answers held back), which one in-memory broker does not do on
demand.
"""

from __future__ import annotations

import gc
import random
import time
from types import SimpleNamespace as NS
from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.connection import BrokerConnectionError
from kafkatw.client.partitioner import partition_for_key
from kafkatw.client.producer import KafkaTimeoutError, Producer, ProducerClosedError, RecordMetadata
from kafkatw.client.sender import ProduceBody
from kafkatw.errors import ErrorCode, KafkaError, RecordTooLargeError, UnknownTopicOrPartitionError
from kafkatw.protocol.messages import decode_request, encode_request, parse_request_header
from kafkatw.protocol.records import decode_batches
from kafkatw.testing import FakeCluster


class FakeRequest:
    def __init__(self, node: int, api_key: int, body: Any, expect_response: bool) -> None:
        self.node = node
        self.api_key = api_key
        self.body = body
        self.expect_response = expect_response
        self.deferred: defer.Deferred = defer.Deferred()

    def batches(self) -> dict[tuple[str, int], Any]:
        """(topic, partition) -> the DecodedBatch carried."""
        out = {}
        for topic, partitions in self.body.topics:
            for partition, data in partitions:
                (batch,) = decode_batches(data)
                out[(topic, partition)] = batch
        return out

    def values(self) -> dict[tuple[str, int], list[bytes]]:
        return {tp: [r.value for r in b.records] for tp, b in self.batches().items()}


class FakeClient:
    """The parts of L{KafkaClient} the producer uses; leaders set by the test."""

    def __init__(self, partitions: dict[str, int], leader: int = 1) -> None:
        self.leaders = {(t, p): leader for t, n in partitions.items() for p in range(n)}
        self.known: set[str] = set()
        self.requests: list[FakeRequest] = []
        self.metadata_calls = 0
        self.invalidations = 0
        self.next_leaders: dict[tuple[str, int], int] | None = None
        self.closed = False
        self.topic_errors: dict = {}

    def leader_for(self, topic: str, partition: int) -> int:
        if topic not in self.known:
            return -1
        return self.leaders.get((topic, partition), -1)

    def partitions_for(self, topic: str) -> list[int]:
        if topic not in self.known:
            return []
        return sorted(p for t, p in self.leaders if t == topic)

    def invalidate(self) -> None:
        self.invalidations += 1

    async def ensure_metadata(self, topics: Any = ()) -> None:
        self.metadata_calls += 1
        if self.next_leaders is not None:
            self.leaders.update(self.next_leaders)
            self.next_leaders = None
        self.known.update(t for t in topics if any(tp[0] == t for tp in self.leaders))

    def least_loaded_node(self) -> int:
        return 1

    def send(self, node: int, api_key: int, body: Any, expect_response: bool = True) -> defer.Deferred:
        request = FakeRequest(node, api_key, body, expect_response)
        self.requests.append(request)
        if not expect_response:
            request.deferred.callback(None)
        return request.deferred

    request = send  # (KafkaClient.request: send as a Deferred)

    def close(self) -> defer.Deferred:
        self.closed = True
        return defer.succeed(None)

    def produce_requests(self) -> list[FakeRequest]:
        return [r for r in self.requests if r.api_key == 0]


def respond(request: FakeRequest, errors: dict[tuple[str, int], ErrorCode] | None = None,
            base_offsets: dict[tuple[str, int], int] | None = None, log_append_time: Any = None) -> None:
    errors = errors or {}
    base_offsets = base_offsets or {}
    topics = []
    for topic, partitions in request.body.topics:
        responses = []
        for partition, _data in partitions:
            code = errors.get((topic, partition), ErrorCode.none)
            responses.append(NS(index=partition, error_code=code,
                                base_offset=-1 if code else base_offsets.get((topic, partition), 0),
                                log_append_time=log_append_time, error_message=None))
        topics.append(NS(name=topic, partition_responses=responses))
    request.deferred.callback(NS(responses=topics, throttle_time=0))


VALUE = b"v" * 100


class ProducerTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()

    def producer(self, partitions: dict[str, int] | None = None, **options: Any) -> tuple[Producer, FakeClient]:
        client = FakeClient(partitions or {"t": 1})
        client.known.update(partitions or {"t": 1})
        options.setdefault("wall_clock", self.clock.seconds)  # timestamps the same in every run
        producer = Producer(self.clock, client=client, **options)
        return producer, client

    def start(self, producer: Producer, *topics: str) -> None:
        """Let the producer learn the topics' metadata."""
        for topic in topics:
            d = producer.send(topic, b"warm-up", partition=0)
            producer.flush()
            requests = producer.client.produce_requests()
            respond(requests[-1])
            self.successResultOf(d)
        producer.client.requests.clear()


class LingerAndSizeTests(ProducerTestCase):
    def test_linger_ms(self) -> None:
        """A partial batch is sent linger_ms after it was opened, not before."""
        producer, client = self.producer(linger_ms=5)
        self.start(producer, "t")
        d1 = producer.send("t", b"a")
        self.clock.advance(0.003)
        d2 = producer.send("t", b"b")
        self.clock.advance(0.0019)
        self.assertEqual(client.produce_requests(), [])
        self.clock.advance(0.0001)
        (request,) = client.produce_requests()
        self.assertEqual(request.values(), {("t", 0): [b"a", b"b"]})
        self.assertNoResult(d1)
        respond(request, base_offsets={("t", 0): 10})
        self.assertEqual(self.successResultOf(d1)[:3], ("t", 0, 10))
        self.assertEqual(self.successResultOf(d2)[:3], ("t", 0, 11))

    def test_linger_0_one_timer_per_request(self) -> None:
        """
        linger_ms=0: the records sent in one reactor turn share the request
        sent on the next turn, and it takes one timer (the sender's wake-up),
        no linger timer per batch as well.
        """
        producer, client = self.producer(linger_ms=0)
        self.start(producer, "t")
        call_later = self.clock.callLater
        made = []

        def counting(*args: Any, **kwargs: Any) -> Any:
            made.append(args[1])
            return call_later(*args, **kwargs)

        self.clock.callLater = counting  # type: ignore[method-assign]
        for round_ in range(3):
            d1, d2 = producer.send("t", b"a"), producer.send("t", b"b")
            self.assertEqual(client.produce_requests(), [])
            self.clock.advance(0)
            (request,) = client.produce_requests()
            self.assertEqual(request.values(), {("t", 0): [b"a", b"b"]})
            respond(request, base_offsets={("t", 0): 10})
            self.assertEqual([m[:3] for m in (self.successResultOf(d1), self.successResultOf(d2))],
                             [("t", 0, 10), ("t", 0, 11)])
            client.requests.clear()
        self.assertEqual(len(made), 3, made)

    def test_linger_0_batch_waiting_for_a_request_slot_keeps_growing(self) -> None:
        """linger_ms=0 and no request slot: the open batch takes the records sent until a slot frees."""
        producer, client = self.producer(linger_ms=0, max_in_flight_requests_per_connection=1)
        self.start(producer, "t")
        producer.send("t", b"a")
        self.clock.advance(0)
        (first,) = client.produce_requests()
        producer.send("t", b"b")
        self.clock.advance(0)
        producer.send("t", b"c")
        self.clock.advance(0)
        self.assertEqual(len(client.produce_requests()), 1)
        respond(first)
        self.clock.advance(0)
        self.assertEqual(client.produce_requests()[1].values(), {("t", 0): [b"b", b"c"]})

    def test_batch_size(self) -> None:
        """A batch is sent as soon as it reaches batch_size bytes, whatever linger_ms."""
        producer, client = self.producer(batch_size=61 + 4 * (100 + 11), linger_ms=60000)
        self.start(producer, "t")
        for _ in range(3):
            producer.send("t", VALUE)
        self.clock.advance(0)
        self.assertEqual(client.produce_requests(), [])
        producer.send("t", VALUE)
        self.clock.advance(0)
        (request,) = client.produce_requests()
        self.assertEqual(len(request.values()[("t", 0)]), 4)

    def test_record_that_does_not_fit_opens_a_new_batch(self) -> None:
        producer, client = self.producer(batch_size=300, linger_ms=60000)
        self.start(producer, "t")
        producer.send("t", VALUE, partition=0)
        producer.send("t", VALUE, partition=0)
        producer.send("t", VALUE, partition=0)  # 61 + 3 * 111 > 300: the first two go
        self.clock.advance(0)
        (request,) = client.produce_requests()
        self.assertEqual(len(request.values()[("t", 0)]), 2)

    def test_timestamps(self) -> None:
        """
        Records without a timestamp get the time their batch was opened, on
        the wall clock (C{wall_clock}), not the reactor's time: the reactor
        (here at 1000.5 s) may run on the monotonic clock (issue 28).
        """
        self.clock.advance(1000.5)
        wall = [1_700_000_000.25]
        producer, client = self.producer(linger_ms=5, wall_clock=lambda: wall[0])
        self.start(producer, "t")
        d1 = producer.send("t", b"a")
        d2 = producer.send("t", b"b", timestamp_ms=1234)
        wall[0] -= 3600  # the machine's clock steps back an hour: the linger does not follow it
        self.clock.advance(0.005)
        (request,) = client.produce_requests()
        batch = request.batches()[("t", 0)]
        opened = 1_700_000_000_250
        self.assertEqual([r.timestamp_ms for r in batch.records], [opened, 1234])
        respond(request)
        self.assertEqual(self.successResultOf(d1).timestamp_ms, opened)
        self.assertEqual(self.successResultOf(d2).timestamp_ms, 1234)

    def test_timestamps_read_the_machines_clock_by_default(self) -> None:
        """Without C{wall_clock}: C{time.time}, whatever the reactor's time (a monotonic reactor's is not since the epoch)."""
        self.clock.advance(1000.5)
        producer, client = self.producer(linger_ms=5, wall_clock=time.time)  # the default
        self.assertIs(Producer(self.clock, client=client).wall_clock, time.time)
        self.start(producer, "t")
        before = int(time.time() * 1000)
        d = producer.send("t", b"a")
        after = int(time.time() * 1000)
        self.clock.advance(0.005)
        (request,) = client.produce_requests()
        respond(request)
        self.assertTrue(before <= self.successResultOf(d).timestamp_ms <= after + 1, (before, after))

    def test_compression(self) -> None:
        for codec, code in (("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)):
            producer, client = self.producer(compression_type=codec)
            self.start(producer, "t")
            for i in range(100):
                producer.send("t", b"%d" % i)
            producer.flush()
            (request,) = client.produce_requests()
            batch = request.batches()[("t", 0)]
            self.assertEqual(batch.compression, code)
            self.assertEqual([r.value for r in batch.records], [b"%d" % i for i in range(100)])


class RequestTests(ProducerTestCase):
    def test_batches_per_leader_in_one_request(self) -> None:
        """Sealed batches of partitions that share a leader travel in one Produce request."""
        producer, client = self.producer({"t": 4, "u": 1})
        client.leaders.update({("t", 2): 2})
        self.start(producer, "t", "u")
        for p in range(4):
            producer.send("t", b"t%d" % p, partition=p)
        producer.send("u", b"u0", partition=0)
        d = producer.flush()
        requests = client.produce_requests()
        self.assertEqual(sorted(r.node for r in requests), [1, 2])
        by_node = {r.node: r for r in requests}
        self.assertEqual(by_node[1].values(), {("t", 0): [b"t0"], ("t", 1): [b"t1"], ("t", 3): [b"t3"],
                                               ("u", 0): [b"u0"]})
        self.assertEqual(by_node[2].values(), {("t", 2): [b"t2"]})
        self.assertNoResult(d)
        respond(by_node[1])
        self.assertNoResult(d)
        respond(by_node[2])
        self.successResultOf(d)

    def test_max_request_size(self) -> None:
        producer, client = self.producer({"t": 3}, max_request_size=400)
        self.start(producer, "t")
        for p in range(3):
            producer.send("t", VALUE, partition=p)
            producer.send("t", VALUE, partition=p)
        producer.flush()
        requests = client.produce_requests()
        self.assertEqual(len(requests), 3)  # one ~350-byte batch per request

    def test_max_in_flight(self) -> None:
        producer, client = self.producer({"t": 1}, batch_size=100, max_in_flight_requests_per_connection=2)
        self.start(producer, "t")
        for _ in range(5):
            producer.send("t", VALUE)
        self.clock.advance(0)
        self.assertEqual(len(client.produce_requests()), 2)
        respond(client.produce_requests()[0])
        self.clock.advance(0)
        self.assertEqual(len(client.produce_requests()), 3)

    def test_acks_0(self) -> None:
        """acks=0: no response is expected; records complete with offset -1 once written."""
        producer, client = self.producer(acks=0)
        self.start_acks0(producer)
        d = producer.send("t", b"x")
        self.clock.advance(0.005)
        (request,) = client.produce_requests()
        self.assertFalse(request.expect_response)
        self.assertEqual(request.body.acks, 0)
        self.assertEqual(self.successResultOf(d)[:3], ("t", 0, -1))

    def start_acks0(self, producer: Producer) -> None:
        producer.send("t", b"warm-up")
        producer.flush()
        producer.client.requests.clear()

    def test_acks_all(self) -> None:
        producer, client = self.producer(acks="all")
        self.start(producer, "t")
        producer.send("t", b"x")
        producer.flush()
        self.assertEqual(client.produce_requests()[0].body.acks, -1)

    def test_produce_body_matches_kio(self) -> None:
        """The hand-written Produce encoder agrees with kio's schemas, v3 to v9."""
        body = ProduceBody(-1, 30000, [("topic", [(0, b"batch-0"), (3, b"b3")]), ("ü", [(1, b"x" * 300)])])
        for version in range(3, 10):
            frame = encode_request(0, version, 7, "client", body)
            header = parse_request_header(frame)
            request = decode_request(frame, header)
            self.assertEqual(header.correlation_id, 7)
            self.assertIsNone(request.transactional_id)
            self.assertEqual(request.acks, -1)
            self.assertEqual(request.timeout.total_seconds(), 30)
            got = [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in request.topic_data]
            self.assertEqual(got, body.topics)
            plain = {"acks": -1, "timeout": 30000, "transactional_id": None,
                     "topic_data": [{"name": name, "partition_data": [{"index": p, "records": r} for p, r in parts]}
                                    for name, parts in body.topics]}
            self.assertEqual(frame, encode_request(0, version, 7, "client", plain))


class PartitionerTests(ProducerTestCase):
    def test_keyed_records_like_kafka_python(self) -> None:
        """Keyed records land where kafka-python's (and Java's) DefaultPartitioner puts them."""
        from kafka.partitioner.default import DefaultPartitioner

        rng = random.Random(3)
        for n in (1, 3, 6, 7, 32):
            producer, client = self.producer({"t": n})
            self.start(producer, "t")
            keys = [rng.randbytes(rng.randrange(0, 40)) for _ in range(200)]
            for key in keys:
                producer.send("t", b"v", key=key)
            producer.flush()
            placed = {}
            for request in client.produce_requests():
                for (_t, p), batch in request.batches().items():
                    for record in batch.records:
                        placed.setdefault(record.key, set()).add(p)
            cluster = NS(topics=lambda: {"t"}, partitions_for_topic=lambda t: set(range(n)),
                         available_partitions_for_topic=lambda t: set(range(n)))
            for key in keys:
                expected = DefaultPartitioner().partition("t", key, key, b"v", b"v", cluster)
                self.assertEqual(placed[key], {expected})
                self.assertEqual(expected, partition_for_key(key, n))

    def test_sticky_unkeyed(self) -> None:
        """KIP-480: unkeyed records stick to one partition until its batch is sealed, then move."""
        producer, client = self.producer({"t": 6}, batch_size=61 + 5 * (100 + 11), linger_ms=60000)
        self.start(producer, "t")
        results = [producer.send("t", VALUE) for _ in range(5)]
        self.clock.advance(0)
        (first,) = client.produce_requests()
        ((_, p1),) = first.values()
        self.assertEqual(len(first.values()[("t", p1)]), 5)
        results += [producer.send("t", VALUE) for _ in range(5)]
        self.clock.advance(0)
        second = client.produce_requests()[1]
        ((_, p2),) = second.values()
        self.assertNotEqual(p1, p2)
        self.assertEqual(len(second.values()[("t", p2)]), 5)
        respond(first)
        respond(second)
        self.assertEqual([self.successResultOf(d).partition for d in results], [p1] * 5 + [p2] * 5)

    def test_sticky_skips_partitions_without_leader(self) -> None:
        producer, client = self.producer({"t": 3}, batch_size=100)
        self.start(producer, "t")
        for p in (0, 2):
            client.leaders[("t", p)] = -1
        for _ in range(10):
            producer.send("t", VALUE)
        self.clock.advance(0)
        self.assertEqual({tp for r in client.produce_requests() for tp in r.values()}, {("t", 1)})

    def test_custom_partitioner(self) -> None:
        calls = []

        def last(key: Any, all_partitions: list[int], available: list[int]) -> int:
            calls.append(key)
            return all_partitions[-1]

        producer, client = self.producer({"t": 4}, partitioner=last)
        self.start(producer, "t")
        producer.send("t", b"v", key=b"k")
        producer.send("t", b"v")
        producer.flush()
        self.assertEqual(list(client.produce_requests()[0].values()), [("t", 3)])
        self.assertEqual(calls, [b"k", None])

    def test_unknown_partition(self) -> None:
        producer, client = self.producer({"t": 2})
        self.start(producer, "t")
        self.failureResultOf(producer.send("t", b"v", partition=2), UnknownTopicOrPartitionError)


class RetryTests(ProducerTestCase):
    def test_not_leader_refreshes_metadata_and_retries(self) -> None:
        producer, client = self.producer({"t": 2}, retry_backoff_ms=100)
        self.start(producer, "t")
        d0 = producer.send("t", b"a", partition=0)
        d1 = producer.send("t", b"b", partition=1)
        producer.flush()
        (request,) = client.produce_requests()
        invalidations, metadata_calls = client.invalidations, client.metadata_calls
        client.next_leaders = {("t", 0): 2}
        respond(request, errors={("t", 0): ErrorCode.not_leader_or_follower}, base_offsets={("t", 1): 5})
        self.assertEqual(self.successResultOf(d1)[:3], ("t", 1, 5))
        self.assertNoResult(d0)
        self.assertGreater(client.invalidations, invalidations)
        self.assertGreater(client.metadata_calls, metadata_calls)
        self.clock.advance(0.05)
        self.assertEqual(len(client.produce_requests()), 1)  # backing off
        self.clock.advance(0.05)
        retry = client.produce_requests()[1]
        self.assertEqual(retry.node, 2)
        first_bytes = dict(request.body.topics[0][1])[0]
        self.assertEqual(retry.body.topics, [("t", [(0, first_bytes)])])  # the same bytes again
        respond(retry, base_offsets={("t", 0): 9})
        self.assertEqual(self.successResultOf(d0)[:3], ("t", 0, 9))

    def test_connection_lost_retries(self) -> None:
        producer, client = self.producer(retry_backoff_ms=10)
        self.start(producer, "t")
        d = producer.send("t", b"a")
        producer.flush()
        client.produce_requests()[0].deferred.errback(BrokerConnectionError("lost"))
        self.clock.advance(0.01)
        respond(client.produce_requests()[1], base_offsets={("t", 0): 3})
        self.assertEqual(self.successResultOf(d).offset, 3)

    def test_non_retriable_error_fails(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        d = producer.send("t", b"a")
        producer.flush()
        respond(client.produce_requests()[0], errors={("t", 0): ErrorCode.invalid_record})
        failure = self.failureResultOf(d, KafkaError)
        self.assertEqual(failure.value.error_code, ErrorCode.invalid_record)
        self.assertEqual(len(client.produce_requests()), 1)

    def test_send_during_close_fails_instead_of_hanging(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        first = producer.send("t", b"a")
        closing = producer.close()
        late = producer.send("t", b"b")
        self.failureResultOf(late, ProducerClosedError)
        respond(client.produce_requests()[0])
        self.assertEqual(self.successResultOf(first).offset, 0)
        self.successResultOf(closing)

    def test_kafka_retriable_errors_are_retried(self) -> None:
        """NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR... are retriable in Kafka's table: the batch is resent."""
        producer, client = self.producer(retry_backoff_ms=10)
        self.start(producer, "t")
        d = producer.send("t", b"a")
        producer.flush()
        respond(client.produce_requests()[0], errors={("t", 0): ErrorCode.not_enough_replicas})
        self.assertNoResult(d)
        self.clock.advance(0.02)
        self.assertEqual(len(client.produce_requests()), 2)

    def test_retries_exhausted(self) -> None:
        producer, client = self.producer(retries=1, retry_backoff_ms=10)
        self.start(producer, "t")
        d = producer.send("t", b"a")
        producer.flush()
        for i in range(2):
            self.clock.advance(0.01)
            respond(client.produce_requests()[i], errors={("t", 0): ErrorCode.not_leader_or_follower})
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.not_leader_or_follower)
        self.assertEqual(len(client.produce_requests()), 2)

    def test_delivery_timeout_without_leader(self) -> None:
        producer, client = self.producer(delivery_timeout_ms=1000, retry_backoff_ms=100)
        self.start(producer, "t")
        client.leaders[("t", 0)] = -1
        d = producer.send("t", b"a")
        self.clock.pump([0.1] * 9)
        self.assertNoResult(d)
        self.clock.pump([0.1] * 3)
        self.failureResultOf(d, KafkaTimeoutError)
        self.assertEqual(client.produce_requests(), [])

    def test_delivery_timeout_while_retrying(self) -> None:
        producer, client = self.producer(delivery_timeout_ms=1000, retry_backoff_ms=300)
        self.start(producer, "t")
        d = producer.send("t", b"a")
        producer.flush()
        for _ in range(10):
            requests = client.produce_requests()
            if requests and not requests[-1].deferred.called:
                requests[-1].deferred.errback(BrokerConnectionError("lost"))
            self.clock.advance(0.3)
        self.failureResultOf(d, KafkaTimeoutError)
        self.assertLessEqual(len(client.produce_requests()), 4)

    def test_order_kept_with_one_in_flight(self) -> None:
        """max_in_flight=1: a retried batch goes before later batches of its partition."""
        producer, client = self.producer({"t": 1}, batch_size=100, max_in_flight_requests_per_connection=1,
                                         retry_backoff_ms=100)
        self.start(producer, "t")
        results = [producer.send("t", b"%d" % i + VALUE) for i in range(4)]
        self.clock.advance(0)
        (first,) = client.produce_requests()
        self.assertEqual(first.values()[("t", 0)], [b"0" + VALUE])
        client.next_leaders = {("t", 0): 2}
        respond(first, errors={("t", 0): ErrorCode.not_leader_or_follower})
        self.clock.advance(0.05)
        self.assertEqual(len(client.produce_requests()), 1)  # held while backing off
        offset = 0
        for i in range(4):
            self.clock.advance(0.1)
            requests = client.produce_requests()
            self.assertEqual(len(requests), i + 2)
            self.assertEqual(requests[-1].values()[("t", 0)], [b"%d" % i + VALUE])
            respond(requests[-1], base_offsets={("t", 0): offset})
            offset += 1
        self.assertEqual([self.successResultOf(d).offset for d in results], [0, 1, 2, 3])

    def test_retry_keeps_order_with_many_in_flight(self) -> None:
        """Two failed in-flight batches of a partition are retried oldest first."""
        producer, client = self.producer({"t": 1}, batch_size=100, retry_backoff_ms=10)
        self.start(producer, "t")
        for i in range(2):
            producer.send("t", b"%d" % i + VALUE)
        self.clock.advance(0)
        first, second = client.produce_requests()
        for request in (first, second):
            request.deferred.errback(BrokerConnectionError("lost"))
        self.clock.advance(0.01)
        self.clock.advance(0)
        retries = client.produce_requests()[2:]
        self.assertEqual([r.values()[("t", 0)][0][:1] for r in retries], [b"0", b"1"])


class BufferAndLifecycleTests(ProducerTestCase):
    def test_buffer_memory_back_pressure(self) -> None:
        """With buffer_memory used up, send's Deferred waits; acknowledgements let it in."""
        producer, client = self.producer(buffer_memory=4 * 111 + 50, batch_size=1000, linger_ms=5)
        self.start(producer, "t")
        accepted = [producer.send("t", VALUE) for _ in range(4)]
        waiting = producer.send("t", VALUE)
        self.assertNoResult(producer.ready())
        self.clock.advance(0.005)
        (request,) = client.produce_requests()
        self.assertEqual(len(request.values()[("t", 0)]), 4)  # the fifth is not in the batch
        later = producer.send("t", b"x")  # queues behind the waiting one
        ready = producer.ready()
        respond(request)
        for d in accepted:
            self.successResultOf(d)
        self.successResultOf(ready)
        self.clock.advance(0.005)
        second = client.produce_requests()[1]
        self.assertEqual(second.values()[("t", 0)], [VALUE, b"x"])
        respond(second, base_offsets={("t", 0): 4})
        self.assertEqual(self.successResultOf(waiting).offset, 4)
        self.assertEqual(self.successResultOf(later).offset, 5)

    def test_buffer_wait_times_out(self) -> None:
        producer, client = self.producer(buffer_memory=300, max_block_ms=1000)
        self.start(producer, "t")
        producer.send("t", VALUE)
        producer.send("t", VALUE)
        blocked = producer.send("t", VALUE)
        self.clock.advance(0.005)
        client.produce_requests()[0].deferred.errback(BrokerConnectionError("lost"))
        self.clock.pump([0.1] * 11)
        # the retry is still unanswered: the waiting send gives up after max_block_ms
        respond(client.produce_requests()[-1])
        self.failureResultOf(blocked, KafkaTimeoutError)

    def test_record_too_large(self) -> None:
        producer, client = self.producer(max_request_size=1000)
        self.start(producer, "t")
        self.failureResultOf(producer.send("t", b"x" * 2000), RecordTooLargeError)

    def test_metadata_fetched_on_first_send(self) -> None:
        client = FakeClient({"t": 2})
        producer = Producer(self.clock, client=client)
        d = producer.send("t", b"a", partition=1)
        self.assertEqual(client.metadata_calls, 1)
        producer.flush()
        (request,) = client.produce_requests()
        self.assertEqual(request.values(), {("t", 1): [b"a"]})
        respond(request)
        self.assertEqual(self.successResultOf(d)[:3], ("t", 1, 0))

    def test_unknown_topic_times_out(self) -> None:
        client = FakeClient({"t": 1})
        producer = Producer(self.clock, client=client, max_block_ms=500, retry_backoff_ms=100)
        d = producer.send("nope", b"a")
        self.clock.pump([0.1] * 6)
        self.failureResultOf(d, KafkaTimeoutError)

    def test_flush_waits_for_every_send(self) -> None:
        producer, client = self.producer({"t": 2}, linger_ms=1000)
        self.start(producer, "t")
        producer.send("t", b"a", partition=0)
        producer.send("t", b"b", partition=1)
        flushed = producer.flush()
        self.assertEqual(len(client.produce_requests()), 1)
        self.assertNoResult(flushed)
        respond(client.produce_requests()[0])
        self.successResultOf(flushed)
        self.successResultOf(producer.flush())  # nothing outstanding

    def test_close(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        d = producer.send("t", b"a")
        closed = producer.close()
        self.assertNoResult(closed)
        respond(client.produce_requests()[0])
        self.successResultOf(d)
        self.successResultOf(closed)
        self.assertFalse(client.closed)  # a shared client stays open
        self.failureResultOf(producer.send("t", b"late"), KafkaError)

    def test_record_metadata(self) -> None:
        md = RecordMetadata("t", 1, 2, 3)
        self.assertEqual((md.topic, md.partition, md.offset, md.timestamp_ms), ("t", 1, 2, 3))

    def test_callbacks_added_later_see_the_result(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        d = producer.send("t", b"a")
        producer.flush()
        respond(client.produce_requests()[0], base_offsets={("t", 0): 41})
        seen = []
        d.addCallback(lambda md: seen.append(md.offset))
        self.assertEqual(seen, [41])

    def test_cancelled_send_does_not_break_the_batch(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        d1 = producer.send("t", b"a")
        d2 = producer.send("t", b"b")
        d1.cancel()
        self.failureResultOf(d1, defer.CancelledError)
        producer.flush()
        respond(client.produce_requests()[0])
        self.assertEqual(self.successResultOf(d2).offset, 1)


class IdempotenceTests(ProducerTestCase):
    def test_producer_id_and_sequences(self) -> None:
        producer, client = self.producer({"t": 2}, acks="all", enable_idempotence=True, retry_backoff_ms=10)
        d = producer.send("t", b"a", partition=0)
        self.clock.advance(0.005)
        (init,) = client.requests
        self.assertEqual(init.api_key, 22)
        init.deferred.callback(NS(error_code=ErrorCode.none, producer_id=77, producer_epoch=3))
        self.clock.advance(0)
        (request,) = client.produce_requests()
        batch = request.batches()[("t", 0)]
        self.assertEqual((batch.producer_id, batch.producer_epoch, batch.base_sequence), (77, 3, 0))
        request.deferred.errback(BrokerConnectionError("lost"))
        self.clock.advance(0.01)
        retry = client.produce_requests()[1]
        self.assertEqual(retry.batches()[("t", 0)].base_sequence, 0)
        respond(retry)
        self.successResultOf(d)
        for _ in range(3):
            producer.send("t", b"b", partition=0)
        producer.flush()
        third = client.produce_requests()[2]
        self.assertEqual(third.batches()[("t", 0)].base_sequence, 1)

    def test_a_sent_batch_keeps_its_epoch_and_sequence_when_another_partition_bumps_it(self) -> None:
        """
        A batch already sent is retried with the epoch and sequence it was
        sent with, also after another partition's failure bumped the epoch
        (KIP-360): its first attempt may have been appended, and only the same
        epoch and sequence let the broker drop the retry as a duplicate (as
        Kafka's C{RecordAccumulator} re-sequences only batches never sent).
        Batches after it start the new epoch at sequence 0.  (Found by the
        simulation, seed 5032: a record appended twice.)
        """
        producer, client = self.producer({"t": 2}, acks="all", enable_idempotence=True, retry_backoff_ms=10)
        client.leaders[("t", 1)] = 2
        first = producer.send("t", b"a", partition=0)
        failed = producer.send("t", b"b", partition=1)
        self.clock.advance(0.005)
        (init,) = client.requests
        init.deferred.callback(NS(error_code=ErrorCode.none, producer_id=77, producer_epoch=3))
        self.clock.advance(0)
        to_1, to_2 = sorted(client.produce_requests(), key=lambda r: r.node)
        sent = to_1.batches()[("t", 0)]
        self.assertEqual((sent.producer_id, sent.producer_epoch, sent.base_sequence), (77, 3, 0))
        respond(to_2, errors={("t", 1): ErrorCode.invalid_topic_exception})  # fails for good: a new epoch
        self.failureResultOf(failed, KafkaError)
        to_1.deferred.errback(BrokerConnectionError("lost"))  # appended or not: unknown
        self.clock.advance(0)
        bump = [r for r in client.requests if r.api_key == 22][-1]
        self.assertIsNot(bump, init)
        bump.deferred.callback(NS(error_code=ErrorCode.none, producer_id=77, producer_epoch=4))
        self.clock.advance(0.01)
        retry = client.produce_requests()[-1]
        again = retry.batches()[("t", 0)]
        self.assertEqual((again.producer_epoch, again.base_sequence), (3, 0))
        self.assertEqual(retry.body.topics[0][1][0][1], to_1.body.topics[0][1][0][1])  # the same bytes
        respond(retry)
        self.successResultOf(first)
        producer.send("t", b"c", partition=0)
        producer.flush()
        after = client.produce_requests()[-1].batches()[("t", 0)]
        self.assertEqual((after.producer_epoch, after.base_sequence), (4, 0))

    def test_idempotence_needs_acks_all(self) -> None:
        self.assertRaises(ValueError, Producer, self.clock, client=FakeClient({}), acks=1, enable_idempotence=True)


class TopicAuthorizationTests(SynchronousTestCase):
    def test_a_topic_refused_by_an_acl_fails_at_once(self) -> None:
        """Metadata's TOPIC_AUTHORIZATION_FAILED fails the waiting records, as Kafka's TopicAuthorizationException."""
        clock = Clock()
        client = FakeClient({"t": 1})
        client.topic_errors = {"secret": ErrorCode.topic_authorization_failed}
        producer = Producer(clock, client=client, max_block_ms=500, retry_backoff_ms=100)
        d = producer.send("secret", b"v")
        clock.pump([0.1] * 2)
        failure = self.failureResultOf(d, KafkaError)
        self.assertEqual(failure.value.error_code, ErrorCode.topic_authorization_failed)


class OnDeliveryTests(ProducerTestCase):
    """C{send(..., on_delivery=f)}: f(metadata, None) or f(None, error), before the Deferred fires."""

    def test_acknowledged(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        seen: list = []
        d1 = producer.send("t", b"a", on_delivery=lambda md, err: seen.append((md, err)))
        d2 = producer.send("t", b"b")
        d3 = producer.send("t", b"c", key=b"k", on_delivery=lambda md, err: seen.append((md, err)))
        producer.flush()
        respond(client.produce_requests()[0], base_offsets={("t", 0): 10})
        self.assertEqual([(md.offset, err) for md, err in seen], [(10, None), (12, None)])
        self.assertEqual([self.successResultOf(d).offset for d in (d1, d2, d3)], [10, 11, 12])

    def test_callbacks_on_the_deferred_still_run(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        order: list = []
        d = producer.send("t", b"a", on_delivery=lambda md, err: order.append("on_delivery"))
        d.addCallback(lambda md: order.append("deferred"))
        producer.flush()
        respond(client.produce_requests()[0])
        self.assertEqual(order, ["on_delivery", "deferred"])

    def test_failed(self) -> None:
        producer, client = self.producer(retries=0)
        self.start(producer, "t")
        seen: list = []
        d = producer.send("t", b"a", on_delivery=lambda md, err: seen.append((md, err)))
        producer.flush()
        respond(client.produce_requests()[0], errors={("t", 0): ErrorCode.invalid_record})
        self.failureResultOf(d, KafkaError)
        self.assertEqual(len(seen), 1)
        self.assertIsNone(seen[0][0])
        self.assertIsInstance(seen[0][1], KafkaError)

    def test_failed_before_a_batch(self) -> None:
        producer, client = self.producer(max_request_size=100)
        self.start(producer, "t")
        seen: list = []
        d = producer.send("t", b"x" * 200, on_delivery=lambda md, err: seen.append(err))
        self.failureResultOf(d, RecordTooLargeError)
        self.assertIsInstance(seen[0], RecordTooLargeError)

    def test_raising_callback_is_logged(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")

        def boom(md: Any, err: Any) -> None:
            raise RuntimeError("boom")

        d = producer.send("t", b"a", on_delivery=boom)
        producer.flush()
        respond(client.produce_requests()[0])
        self.assertEqual(self.successResultOf(d).offset, 0)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class HotPathTests(ProducerTestCase):
    """The cached open batch of send's hot path never outlives the conditions it relies on."""

    def test_keyed_record_after_values(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        producer.send("t", b"a")
        producer.send("t", b"b")
        self.assertEqual(len(producer._hot), 1)
        producer.send("t", b"c", key=b"k", partition=0)
        self.assertEqual(producer._hot, {})
        producer.send("t", b"d")
        producer.flush()
        (request,) = client.produce_requests()
        records = request.batches()[("t", 0)].records
        self.assertEqual([(r.key, r.value) for r in records], [(None, b"a"), (None, b"b"), (b"k", b"c"), (None, b"d")])

    def test_sealed_batch_leaves(self) -> None:
        producer, client = self.producer(batch_size=61 + 3 * (11 + 100))
        self.start(producer, "t")
        for _ in range(4):
            producer.send("t", VALUE)
        producer.flush()
        requests = client.produce_requests()
        counts = [len(b.records) for r in requests for b in r.batches().values()]
        self.assertEqual(sum(counts), 4)
        self.assertEqual(max(counts), 3)

    def test_waiting_sends_keep_their_order(self) -> None:
        producer, client = self.producer(buffer_memory=3 * 111 + 10, batch_size=100000)
        self.start(producer, "t")
        ds = [producer.send("t", VALUE[:-1] + bytes([i])) for i in range(6)]
        self.assertEqual(producer._hot, {})
        producer.flush()
        respond(client.produce_requests()[0])
        producer.flush()
        respond(client.produce_requests()[1])
        self.assertEqual([self.successResultOf(d).offset for d in ds], [0, 1, 2, 0, 1, 2])
        values = [r.value[-1] for req in client.produce_requests() for b in req.batches().values() for r in b.records]
        self.assertEqual(values, list(range(6)))

    def test_closing_clears(self) -> None:
        producer, client = self.producer()
        self.start(producer, "t")
        producer.send("t", b"a")
        d = producer.close()
        self.assertEqual(producer._hot, {})
        self.failureResultOf(producer.send("t", b"late"), ProducerClosedError)
        respond(client.produce_requests()[0])
        self.successResultOf(d)


class LingerWhileBusyTests(ProducerTestCase):
    """
    As Java's accumulator: a batch whose linger_ms is over while it could not
    be sent (every request slot taken) keeps taking records until a slot frees.
    """

    def test_batch_fills_while_the_slots_are_taken(self) -> None:
        producer, client = self.producer(linger_ms=5, max_in_flight_requests_per_connection=1)
        self.start(producer, "t")
        first = producer.send("t", b"a")
        self.clock.advance(0.005)
        self.clock.advance(0)
        (request,) = client.produce_requests()
        later = [producer.send("t", b"b")]
        self.clock.advance(0.005)  # linger over, but the one slot is taken
        self.clock.advance(0)
        later.append(producer.send("t", b"c"))
        self.clock.advance(0.010)
        self.assertEqual(len(client.produce_requests()), 1)
        respond(request)
        self.successResultOf(first)
        self.clock.advance(0)
        requests = client.produce_requests()
        self.assertEqual(len(requests), 2)
        self.assertEqual(requests[1].values(), {("t", 0): [b"b", b"c"]})
        respond(requests[1], base_offsets={("t", 0): 1})
        self.assertEqual([self.successResultOf(d).offset for d in later], [1, 2])

    def test_full_batch_still_sealed(self) -> None:
        producer, client = self.producer(linger_ms=5, batch_size=61 + 2 * 111, max_in_flight_requests_per_connection=1)
        self.start(producer, "t")
        producer.send("t", VALUE)
        self.clock.advance(0.005)
        self.clock.advance(0)
        (request,) = client.produce_requests()
        for _ in range(4):
            producer.send("t", VALUE)
        self.clock.advance(0.010)
        respond(request)
        self.clock.advance(0)
        requests = client.produce_requests()
        self.assertEqual(len(requests), 2)
        self.assertEqual(len(requests[1].values()[("t", 0)]), 2)

    def test_flush_sends_a_lingered_batch(self) -> None:
        producer, client = self.producer(linger_ms=5, max_in_flight_requests_per_connection=1)
        self.start(producer, "t")
        producer.send("t", b"a")
        self.clock.advance(0.005)
        self.clock.advance(0)
        (request,) = client.produce_requests()
        d = producer.send("t", b"b")
        self.clock.advance(0.005)
        flushed = producer.flush()
        respond(request)
        self.clock.advance(0)
        respond(client.produce_requests()[1])
        self.successResultOf(flushed)
        self.assertEqual(self.successResultOf(d).offset, 0)


class SendManyTests(ProducerTestCase):
    """L{Producer.send_many}: many records of one partition, one Deferred."""

    def records(self, n: int, key: bytes = b"h:/a.log", start: int = 1) -> list[tuple]:
        return [(key, b"line %d" % i, [("host", b"h"), ("line_no", b"%d" % i)], None) for i in range(start, start + n)]

    def test_records_in_order_in_batches_of_batch_size(self) -> None:
        producer, client = self.producer({"t": 2}, batch_size=2048)
        self.start(producer, "t")
        records = self.records(300)
        d = producer.send_many("t", records, 1)
        producer.flush()
        answered = 0
        while answered < len(client.produce_requests()):
            if answered == len(client.produce_requests()) - 1:
                self.assertNoResult(d)
            respond(client.produce_requests()[answered])
            answered += 1
            self.clock.advance(0)
        requests = client.produce_requests()
        self.assertGreater(len(requests), 1)
        got = []
        for request in requests:
            for batch in request.batches().values():
                self.assertLessEqual(len(request.body.topics[0][1][0][1]), 2048 + 200)
                got.extend((r.key, r.value, [tuple(h) for h in r.headers]) for r in batch.records)
        self.assertEqual(got, [(k, v, [(hk, hv) for hk, hv in h]) for k, v, h, _ in records])
        self.assertEqual({tp for r in requests for tp in r.values()}, {("t", 1)})
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(producer.buffered_bytes, 0)

    def test_encoded_as_sends_are(self) -> None:
        """The batch bytes equal those of the same records sent one by one."""
        encoded = []
        for many in (False, True):
            self.clock = Clock()
            producer, client = self.producer({"t": 1})
            self.start(producer, "t")
            records = self.records(50)
            if many:
                producer.send_many("t", records, 0)
            else:
                for key, value, headers, ts in records:
                    producer.send("t", value, key, 0, headers, ts)
            producer.flush()
            encoded.append([r.body.topics for r in client.produce_requests()])
        self.assertEqual(encoded[0], encoded[1])

    def test_later_calls_join_the_open_batch(self) -> None:
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        first = producer.send_many("t", self.records(3), 0)
        second = producer.send_many("t", self.records(2, start=4), 0)
        self.clock.advance(producer.linger_ms / 1000.0)
        (request,) = client.produce_requests()
        self.assertEqual(request.values()[("t", 0)], [b"line %d" % i for i in range(1, 6)])
        respond(request)
        self.assertIsNone(self.successResultOf(first))
        self.assertIsNone(self.successResultOf(second))

    def test_send_after_send_many_opens_a_batch(self) -> None:
        """A batch holds either send_many's records or send's (each with its Deferred), not both."""
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        many = producer.send_many("t", self.records(2), 0)
        one = producer.send("t", b"single", partition=0)
        also = producer.send_many("t", self.records(1, start=3), 0)
        producer.flush()
        requests = client.produce_requests()
        for request in requests:
            respond(request)
        self.assertEqual([r.values()[("t", 0)] for r in requests],
                         [[b"line 1", b"line 2"], [b"single"], [b"line 3"]])
        self.assertIsNone(self.successResultOf(many))
        self.assertEqual(self.successResultOf(one).partition, 0)
        self.assertIsNone(self.successResultOf(also))

    def test_failure_fails_the_call_once_every_batch_is_done(self) -> None:
        producer, client = self.producer({"t": 1}, batch_size=1024, retries=0)
        self.start(producer, "t")
        d = producer.send_many("t", self.records(100), 0)
        producer.flush()
        requests = client.produce_requests()
        self.assertGreater(len(requests), 1)
        respond(requests[0], errors={("t", 0): ErrorCode.corrupt_message})
        self.assertNoResult(d)
        answered = 1
        while answered < len(client.produce_requests()):
            respond(client.produce_requests()[answered])
            answered += 1
            self.clock.advance(0)
        self.failureResultOf(d, KafkaError)

    def test_before_metadata_one_at_a_time(self) -> None:
        """Without the topic's metadata the records wait as sends do; the call's Deferred still fires once."""
        client = FakeClient({"t": 1})
        producer = Producer(self.clock, client=client)
        d = producer.send_many("t", self.records(3), 0)
        self.assertNoResult(d)
        client.known.add("t")
        self.clock.advance(producer.retry_backoff_ms / 1000.0)
        producer.flush()
        for request in client.produce_requests():
            respond(request)
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual([v for r in client.produce_requests() for v in r.values()[("t", 0)]],
                         [b"line 1", b"line 2", b"line 3"])

    def test_unknown_partition_fails(self) -> None:
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        self.failureResultOf(producer.send_many("t", self.records(2), 5), UnknownTopicOrPartitionError)

    def test_str_values_go_one_at_a_time(self) -> None:
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        d = producer.send_many("t", [(None, "text", None, None)], 0)
        producer.flush()
        (request,) = client.produce_requests()
        self.assertEqual(request.values()[("t", 0)], [b"text"])
        respond(request)
        self.assertIsNone(self.successResultOf(d))

    def test_empty(self) -> None:
        producer, _ = self.producer({"t": 1})
        self.assertIsNone(self.successResultOf(producer.send_many("t", [], 0)))


class RecordDeferredTests(ProducerTestCase):
    """The hot path's Deferreds: made without Deferred.__init__, fired only when someone holds them."""

    def test_held_deferreds_fire_and_take_callbacks(self) -> None:
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        held = [producer.send("t", VALUE) for _ in range(3)]
        seen: list = []
        held[1].addCallback(lambda m: seen.append(m) or m)
        producer.send("t", VALUE)  # dropped by its caller
        untouched = producer.send("t", VALUE)
        producer.flush()
        (request,) = client.produce_requests()
        respond(request, base_offsets={("t", 0): 10})
        self.assertEqual([self.successResultOf(d).offset for d in held], [10, 11, 12])
        self.assertEqual([m.offset for m in seen], [11])
        later: list = []
        untouched.addCallback(later.append)
        self.assertEqual([m.offset for m in later], [14])

    def test_awaited_and_cancelled(self) -> None:
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        cancelled = producer.send("t", VALUE)

        async def wait() -> Any:
            return await producer.send("t", VALUE)

        awaited = defer.Deferred.fromCoroutine(wait())
        cancelled.cancel()
        self.failureResultOf(cancelled, defer.CancelledError)
        producer.flush()
        respond(client.produce_requests()[0])
        self.assertEqual(self.successResultOf(awaited).offset, 1)

    def test_unshared_refcount(self) -> None:
        """The refcount a dropped record's Deferred has in the completion loop (CPython)."""
        from kafkatw.client import producer_batch as module

        items = [module._new(module._RecordDeferred)]
        counts = []
        for d in items:
            counts.append(module.getrefcount(d))
        self.assertEqual(counts, [module._UNSHARED])
        held = items[0]
        for d in items:
            self.assertGreater(module.getrefcount(d), module._UNSHARED)
        del held

    def test_fired_deferreds_do_not_hold_themselves(self) -> None:
        """Once fired, a record's Deferred keeps no reference to itself (no cycle for the collector)."""
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        plain = producer.send("t", VALUE)
        with_callback = producer.send("t", VALUE)
        with_callback.addCallback(lambda m: m)
        keyed = producer.send("t", VALUE, key=b"k")
        producer.flush()
        for request in client.produce_requests():
            respond(request)
        for d in (plain, with_callback, keyed):
            self.assertTrue(d.called)
            self.assertIsInstance(d.result, RecordMetadata)
            self.assertNotIn("_kafkatw_held", vars(d))

    def test_dropped_deferred_with_a_callback_fires(self) -> None:
        """A Deferred its caller dropped after adding a callback still fires it."""
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        seen: list = []
        producer.send("t", VALUE).addCallback(seen.append)
        producer.send("t", b"slow path", key=b"k").addCallback(seen.append)
        producer.flush()
        respond(client.produce_requests()[0])
        self.assertEqual([m.offset for m in seen], [0, 1])

    def test_failed_deferreds_always_fail(self) -> None:
        producer, client = self.producer({"t": 1}, retries=0)
        self.start(producer, "t")
        d = producer.send("t", VALUE)
        errors: list = []
        producer.send("t", VALUE, on_delivery=lambda m, e: errors.append(e))  # dropped, failed all the same
        producer.flush()
        respond(client.produce_requests()[0], errors={("t", 0): ErrorCode.corrupt_message})
        self.failureResultOf(d, KafkaError)
        self.assertEqual(len(errors), 1)
        gc.collect()  # the dropped Deferred's failure is logged as unhandled
        self.assertEqual(len(self.flushLoggedErrors(KafkaError)), 1)

    def test_buffered_bytes_follow_the_hot_path(self) -> None:
        """buffered_bytes counts the records send's hot path took, before and after the batch is sealed."""
        producer, client = self.producer({"t": 1})
        self.start(producer, "t")
        for _ in range(10):
            producer.send("t", VALUE)
        self.assertEqual(producer.buffered_bytes, 10 * (len(VALUE) + 11))
        producer.flush()
        self.assertEqual(producer.buffered_bytes, 10 * (len(VALUE) + 11))
        respond(client.produce_requests()[0])
        self.assertEqual(producer.buffered_bytes, 0)

    def test_hot_path_respects_buffer_memory(self) -> None:
        """The hot path only takes a batch whose rest fits in buffer_memory; beyond it sends wait."""
        producer, client = self.producer({"t": 1}, buffer_memory=1000, batch_size=100000, max_block_ms=10000)
        self.start(producer, "t")
        sent = [producer.send("t", VALUE) for _ in range(12)]
        self.assertLessEqual(producer.buffered_bytes, 1000)
        self.assertFalse(producer.ready().called)
        producer.flush()
        for request in client.produce_requests():
            respond(request)
        producer.flush()
        for request in client.produce_requests()[1:]:
            respond(request)
        self.assertEqual(len([self.successResultOf(d) for d in sent]), 12)


class AgainstABrokerTests(SynchronousTestCase):
    """The producer against one real broker in memory (L{FakeCluster}), read back by a consumer."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.cluster = FakeCluster(self.clock, topics={"t": 2})
        self.addCleanup(self.cluster.close)

    def read_back(self, partition: int, count: int) -> list:
        from kafkatw.client import Consumer

        consumer = Consumer(self.clock, client=self.cluster.client(), auto_offset_reset="earliest",
                            fetch_max_wait_ms=100)
        consumer.assign([("t", partition)])
        records: list = []
        for _ in range(100):
            records += self.cluster.result(consumer.poll(timeout_ms=100))
            if len(records) >= count:
                break
        self.cluster.result(consumer.close())
        return records

    def test_headers_and_keys_round_trip(self) -> None:
        producer = Producer(self.clock, client=self.cluster.client())
        sends = [producer.send("t", b"v1", key=b"k", headers=[("h", b"x"), ("n", None)], partition=0),
                 producer.send("t", "text", partition=0),
                 producer.send("t", None, key="key", partition=0)]
        self.assertEqual([self.cluster.result(d).offset for d in sends], [0, 1, 2])
        self.assertEqual([(r.key, r.value, r.headers) for r in self.read_back(0, 3)],
                         [(b"k", b"v1", (("h", b"x"), ("n", None))), (None, b"text", ()), (b"key", None, ())])

    def test_log_append_time(self) -> None:
        """A topic with C{message.timestamp.type=LogAppendTime}: the broker's clock stamps the records."""
        self.cluster.create_topic("stamped", 1, {"message.timestamp.type": "LogAppendTime"})
        self.clock.advance(1700000000.123)
        producer = Producer(self.clock, client=self.cluster.client())
        metadata = self.cluster.result(producer.send("stamped", b"a", timestamp_ms=5))
        # the broker's time of the append: after the send, by the time the answer came
        self.assertTrue(1700000000123 <= metadata.timestamp_ms <= int(self.clock.seconds() * 1000), metadata)

    def test_idempotent_producer(self) -> None:
        """An idempotent producer gets a producer id from the broker; its records carry it, in sequence."""
        producer = Producer(self.clock, client=self.cluster.client(), acks="all", enable_idempotence=True)
        for i in range(3):
            self.cluster.result(producer.send("t", b"%d" % i, partition=1))
        records = self.read_back(1, 3)
        self.assertEqual([(r.offset, r.value) for r in records], [(0, b"0"), (1, b"1"), (2, b"2")])
        self.assertGreaterEqual(producer.producer_id, 0)
