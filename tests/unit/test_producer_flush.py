"""
L{Producer.flush} sends every record sent before it without waiting for
C{linger_ms}, as Java's C{KafkaProducer.flush} does: while a flush is in
progress (C{RecordAccumulator.beginFlush}, C{flushesInProgress > 0}) every
batch is ready — also the batches opened after the call for records that were
waiting for metadata or C{buffer_memory} — and the flush completes once every
record sent before it is acknowledged or has failed.  Records sent during a
flush may ride along; it does not wait for them.

The producer runs against the fakes of tests/unit/test_producer.py on a
L{Clock}, with metadata requests that wait for the test (answered or failed
when the test says); no sockets, no sleeps.  C{linger_ms} is a minute: a flush
that waited for it would move the clock there.
"""

from __future__ import annotations

import collections
import gc
import threading
from types import SimpleNamespace as NS
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.blocking import BlockingProducer, FutureRecordMetadata
from kafkatw.client.connection import BrokerConnectionError
from kafkatw.client.producer import KafkaTimeoutError, Producer
from kafkatw.client.transaction_manager import TransactionState
from kafkatw.errors import ErrorCode, KafkaError, RecordTooLargeError

from .test_producer import VALUE, FakeClient, FakeRequest, respond

LINGER_MS = 60000
LINGER_S = LINGER_MS / 1000.0
_API_FIND_COORDINATOR = 10
_API_INIT_PRODUCER_ID = 22
_API_ADD_PARTITIONS_TO_TXN = 24
_API_END_TXN = 26


class SlowMetadataClient(FakeClient):
    """
    L{FakeClient} whose metadata requests wait for the test, answered oldest
    first: L{metadata_arrives} (the topics asked for become known) or
    L{metadata_fails}.  Until a topic is known it has no leader.
    """

    def __init__(self, partitions: dict[str, int], leaders: dict[tuple[str, int], int] | None = None) -> None:
        super().__init__(partitions)
        self.leaders.update(leaders or {})
        self.pending_metadata: list[tuple[defer.Deferred, list[str]]] = []

    def ensure_metadata(self, topics: Any = ()) -> defer.Deferred:  # type: ignore[override]
        self.metadata_calls += 1
        d: defer.Deferred = defer.Deferred()
        self.pending_metadata.append((d, list(topics)))
        return d

    def metadata_arrives(self) -> None:
        d, topics = self.pending_metadata.pop(0)
        self.known.update(t for t in topics if any(tp[0] == t for tp in self.leaders))
        d.callback(None)

    def metadata_fails(self) -> None:
        d, _ = self.pending_metadata.pop(0)
        d.errback(BrokerConnectionError("metadata request lost"))

    def unanswered(self) -> list[FakeRequest]:
        return [r for r in self.requests if not r.deferred.called]

    def of(self, api_key: int) -> list[FakeRequest]:
        return [r for r in self.requests if r.api_key == api_key]


def producer_id(request: FakeRequest, pid: int = 7, epoch: int = 0) -> None:
    request.deferred.callback(NS(error_code=ErrorCode.none, producer_id=pid, producer_epoch=epoch))


class FlushTests(SynchronousTestCase):
    """One ordering at a time, spelled out."""

    def setUp(self) -> None:
        self.clock = Clock()

    def new_producer(self, partitions: dict[str, int] | None = None,
                     leaders: dict[tuple[str, int], int] | None = None,
                     **options: Any) -> tuple[Producer, SlowMetadataClient]:
        """A producer that knows no metadata yet."""
        client = SlowMetadataClient(partitions or {"t": 1}, leaders)
        options.setdefault("linger_ms", LINGER_MS)
        return Producer(self.clock, client=client, **options), client

    def test_first_send_of_a_new_producer(self) -> None:
        """
        The first records of a new producer wait for metadata; a flush sends
        their batch as soon as the metadata is there (the bug: it lingered
        linger_ms, and a flush of a producer with linger_ms=60000 timed out).
        """
        producer, client = self.new_producer({"t": 2})
        sent = [producer.send("t", b"a"), producer.send("t", b"b", key=b"k"), producer.send("t", b"c", partition=1)]
        flushed = producer.flush()
        self.assertEqual(client.produce_requests(), [])
        self.assertNoResult(flushed)
        client.metadata_arrives()
        self.clock.advance(0)
        requests = client.produce_requests()
        self.assertEqual(len(requests), 1, "the flush sent the records as soon as metadata came")
        self.assertEqual(sorted(v for vs in requests[0].values().values() for v in vs), [b"a", b"b", b"c"])
        self.assertNoResult(flushed)
        respond(requests[0])
        for d in sent:
            self.successResultOf(d)
        self.assertIsNone(self.successResultOf(flushed))
        self.assertEqual(self.clock.seconds(), 0)

    def test_after_the_flush_batches_linger_again(self) -> None:
        """Once the flush is done, a new batch waits for linger_ms as before."""
        producer, client = self.new_producer()
        producer.send("t", b"a")
        flushed = producer.flush()
        client.metadata_arrives()
        self.clock.advance(0)
        respond(client.produce_requests()[0])
        self.successResultOf(flushed)
        later = producer.send("t", b"later")
        self.clock.advance(LINGER_S - 0.001)
        self.assertEqual(len(client.produce_requests()), 1)
        self.clock.advance(0.001)
        self.clock.advance(0)
        self.assertEqual(client.produce_requests()[1].values(), {("t", 0): [b"later"]})
        respond(client.produce_requests()[1], base_offsets={("t", 0): 1})
        self.assertEqual(self.successResultOf(later).offset, 1)

    def test_records_sent_during_a_flush_ride_along_and_are_not_waited_for(self) -> None:
        """
        A record sent during a flush goes out with it (its batch is ready
        while the flush runs), but the flush fires once the records sent
        before it are done, whatever becomes of the later one.
        """
        producer, client = self.new_producer({"t": 2}, leaders={("t", 1): 2})
        before = producer.send("t", b"before", partition=0)
        flushed = producer.flush()
        during = producer.send("t", b"during", partition=1)
        client.metadata_arrives()
        self.clock.advance(0)
        to_1, to_2 = sorted(client.produce_requests(), key=lambda r: r.node)
        self.assertEqual((to_1.values(), to_2.values()), ({("t", 0): [b"before"]}, {("t", 1): [b"during"]}))
        respond(to_1)
        self.successResultOf(before)
        self.successResultOf(flushed)
        self.assertNoResult(during)
        respond(to_2)
        self.successResultOf(during)
        self.assertEqual(self.clock.seconds(), 0)

    def test_record_sent_during_a_flush_with_metadata_known(self) -> None:
        """
        With metadata known, a record sent while the flush waits for an
        acknowledgement opens a batch that is sent at the sender's next pass
        (not linger_ms later), and the flush does not wait for it.
        """
        producer, client = self.new_producer()
        first = producer.send("t", b"a")
        client.metadata_arrives()
        flushed = producer.flush()
        (request,) = client.produce_requests()
        during = [producer.send("t", b"b"), producer.send("t", b"c")]
        self.clock.advance(0)
        second = client.produce_requests()[1]
        self.assertEqual(second.values(), {("t", 0): [b"b", b"c"]}, "records of one turn share the batch")
        respond(request)
        self.successResultOf(first)
        self.successResultOf(flushed)
        for d in during:
            self.assertNoResult(d)
        respond(second, base_offsets={("t", 0): 1})
        self.assertEqual([self.successResultOf(d).offset for d in during], [1, 2])

    def test_flush_waits_for_a_record_sent_before_it_in_a_later_batch(self) -> None:
        """
        A record that waited for metadata can share its batch with records
        sent after the flush: the flush fires with that batch, not before.
        """
        producer, client = self.new_producer()
        before = producer.send("t", b"a")
        flushed = producer.flush()
        during = producer.send("t", b"b")
        client.metadata_arrives()
        self.clock.advance(0)
        (request,) = client.produce_requests()
        self.assertEqual(request.values(), {("t", 0): [b"a", b"b"]})
        self.assertNoResult(flushed)
        respond(request)
        self.successResultOf(before)
        self.successResultOf(during)
        self.successResultOf(flushed)

    def test_flush_while_a_metadata_request_fails_and_is_retried(self) -> None:
        producer, client = self.new_producer(retry_backoff_ms=100)
        d = producer.send("t", b"a")
        flushed = producer.flush()
        client.metadata_fails()
        self.assertEqual(client.pending_metadata, [])
        self.clock.advance(0.1)  # retry_backoff_ms
        self.assertEqual(len(client.pending_metadata), 1)
        client.metadata_fails()
        self.clock.advance(0.1)
        client.metadata_arrives()
        self.clock.advance(0)
        (request,) = client.produce_requests()
        respond(request)
        self.successResultOf(d)
        self.successResultOf(flushed)
        self.assertAlmostEqual(self.clock.seconds(), 0.2)

    def test_record_that_fails_for_metadata_resolves_the_flush(self) -> None:
        """A record that never gets metadata fails after max_block_ms: the flush fires then."""
        producer, client = self.new_producer(max_block_ms=500, retry_backoff_ms=100)
        d = producer.send("t", b"a")
        flushed = producer.flush()
        for _ in range(4):
            client.metadata_fails()
            self.clock.advance(0.1)
            self.assertNoResult(d)
            self.assertNoResult(flushed)
        client.metadata_fails()
        self.clock.advance(0.1)  # max_block_ms after the send
        self.failureResultOf(d, KafkaTimeoutError)
        self.successResultOf(flushed)

    def test_records_waiting_for_buffer_memory(self) -> None:
        """
        Records waiting for buffer_memory when flush is called get a batch
        once acknowledgements free room; the flush sends it at once.
        """
        producer, client = self.new_producer(buffer_memory=4 * 111 + 50, batch_size=1000)
        accepted = [producer.send("t", VALUE) for _ in range(4)]
        client.metadata_arrives()
        waiting = producer.send("t", VALUE)
        flushed = producer.flush()
        (first,) = client.produce_requests()
        self.assertEqual(len(first.values()[("t", 0)]), 4)
        respond(first)
        for d in accepted:
            self.successResultOf(d)
        self.clock.advance(0)
        second = client.produce_requests()[1]
        self.assertEqual(second.values(), {("t", 0): [VALUE]})
        respond(second, base_offsets={("t", 0): 4})
        self.assertEqual(self.successResultOf(waiting).offset, 4)
        self.successResultOf(flushed)
        self.assertEqual(self.clock.seconds(), 0)

    def test_cancelled_waiting_send_does_not_end_the_flush_early(self) -> None:
        """
        A waiting send whose Deferred its caller cancelled counts as resolved,
        but the flush still waits for the batch sent before it (it fired at
        once when the cancelled send was counted last but one).
        """
        producer, client = self.new_producer(buffer_memory=200, batch_size=1000)
        accepted = producer.send("t", VALUE)
        client.metadata_arrives()
        waiting = producer.send("t", VALUE)  # no buffer room
        waiting.cancel()
        self.failureResultOf(waiting, defer.CancelledError)
        flushed = producer.flush()
        self.assertNoResult(flushed)
        respond(client.produce_requests()[0])
        self.successResultOf(accepted)
        self.successResultOf(flushed)

    def test_batch_made_during_a_flush_waits_for_a_request_slot(self) -> None:
        """
        With every request slot taken, the batch opened during the flush keeps
        taking records (as a lingered batch) and goes when the slot frees.
        """
        producer, client = self.new_producer(max_in_flight_requests_per_connection=1)
        first = producer.send("t", b"a")
        client.metadata_arrives()
        flushed = producer.flush()
        (request,) = client.produce_requests()
        later = [producer.send("t", b"b")]
        self.clock.advance(0)
        later.append(producer.send("t", b"c"))
        self.clock.advance(0)
        self.assertEqual(len(client.produce_requests()), 1)
        respond(request)
        self.successResultOf(first)
        self.successResultOf(flushed)
        self.clock.advance(0)
        second = client.produce_requests()[1]
        self.assertEqual(second.values(), {("t", 0): [b"b", b"c"]})
        respond(second, base_offsets={("t", 0): 1})
        self.assertEqual([self.successResultOf(d).offset for d in later], [1, 2])

    def test_idempotent_producer(self) -> None:
        """InitProducerId, metadata, then the batch: no linger_ms on the way."""
        producer, client = self.new_producer(acks="all", enable_idempotence=True)
        d = producer.send("t", b"a")
        flushed = producer.flush()
        (init,) = client.of(_API_INIT_PRODUCER_ID)
        client.metadata_arrives()
        self.clock.advance(0)
        self.assertEqual(client.produce_requests(), [])
        producer_id(init)
        self.clock.advance(0)
        (request,) = client.produce_requests()
        self.assertEqual(request.batches()[("t", 0)].producer_id, 7)
        respond(request)
        self.successResultOf(d)
        self.successResultOf(flushed)
        self.assertEqual(self.clock.seconds(), 0)

    def test_commit_transaction_flushes_without_linger(self) -> None:
        """
        commit_transaction flushes: a record that waited for metadata gets its
        partition added to the transaction and is sent, then EndTxn, without
        the clock moving.
        """
        producer, client = self.new_producer(transactional_id="tx")
        client.brokers = {1: ("127.0.0.1", 9092)}
        initialized = producer.init_transactions()
        client.of(_API_FIND_COORDINATOR)[-1].deferred.callback(
            NS(error_code=ErrorCode.none, node_id=2, host="127.0.0.1", port=9002, coordinators=None))
        producer_id(client.of(_API_INIT_PRODUCER_ID)[-1], epoch=3)
        self.successResultOf(initialized)
        producer.begin_transaction()
        d = producer.send("t", b"a")
        committed = producer.commit_transaction()
        client.metadata_arrives()
        self.clock.advance(0)
        (add,) = client.of(_API_ADD_PARTITIONS_TO_TXN)
        add.deferred.callback(NS(results_by_topic_v3_and_below=[
            NS(name="t", results_by_partition=[NS(partition_index=0, partition_error_code=0)])]))
        self.clock.advance(0)
        (request,) = client.produce_requests()
        self.assertEqual(client.of(_API_END_TXN), [])
        respond(request)
        self.successResultOf(d)
        end = client.of(_API_END_TXN)[-1]
        self.assertTrue(end.body["committed"])
        end.deferred.callback(NS(error_code=ErrorCode.none))
        self.successResultOf(committed)
        self.assertIs(producer._txn.state, TransactionState.READY)
        self.assertEqual(self.clock.seconds(), 0)

    def test_close_flushes_without_linger(self) -> None:
        producer, client = self.new_producer()
        d = producer.send("t", b"a")
        closed = producer.close()
        client.metadata_arrives()
        self.clock.advance(0)
        respond(client.produce_requests()[0])
        self.successResultOf(d)
        self.successResultOf(closed)
        self.assertEqual(self.clock.seconds(), 0)


def blocking_producer(producer: Producer) -> BlockingProducer:
    """A L{BlockingProducer} around C{producer}, without a reactor thread: its reactor-side steps run in the test."""
    blocking = BlockingProducer.__new__(BlockingProducer)
    blocking._producer = producer
    blocking._queue = collections.deque()
    blocking._scheduled = False
    blocking._blocked = False
    blocking._cond = threading.Condition()
    blocking._waiting = 0
    blocking._closed = False
    blocking.timeout_s = None
    return blocking


class BlockingFlushTests(SynchronousTestCase):
    """
    L{BlockingProducer.flush} hands its queued sends to the producer,
    waiting for buffer room when the producer says so; that room must come
    from batches sent now, not linger_ms later.  Its reactor-side steps run
    here on a L{Clock} (no reactor thread).
    """

    def test_flush_with_buffer_memory_full(self) -> None:
        clock = Clock()
        client = FakeClient({"t": 1})
        client.known.add("t")
        # one batch could take all of buffer_memory; ready() fires at half of it
        producer = Producer(clock, client=client, linger_ms=LINGER_MS, buffer_memory=40000, batch_size=1 << 20)
        blocking = blocking_producer(producer)
        futures = []
        for _ in range(600):
            future = FutureRecordMetadata(blocking)
            futures.append(future)
            blocking._queue.append((future, ("t", VALUE, None, None, None, None)))
        flushed = defer.Deferred.fromCoroutine(blocking._flush_in_reactor())
        offset = 0
        for _ in range(100):
            if flushed.called:
                break
            clock.advance(0)
            for request in [r for r in client.produce_requests() if not r.deferred.called]:
                respond(request, base_offsets={("t", 0): offset})
                offset += len(request.values()[("t", 0)])
        self.successResultOf(flushed)
        self.assertEqual(clock.seconds(), 0)
        self.assertGreater(len(client.produce_requests()), 1)  # the buffer was full on the way
        self.assertEqual([f.get().offset for f in futures], list(range(600)))


class RecordingCondition:
    """
    A stand-in for the blocking producer's C{threading.Condition}, run in one
    thread: it records what was done with it, and C{on_wait} plays the
    reactor thread while a waiter waits.
    """

    def __init__(self) -> None:
        self.events: list[str] = []
        self.on_wait: Any = None

    def __enter__(self) -> "RecordingCondition":
        self.events.append("lock")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.events.append("unlock")

    def wait(self, timeout: float | None = None) -> None:
        self.events.append("wait")
        on_wait, self.on_wait = self.on_wait, None
        if on_wait is None:
            raise AssertionError("a wait nothing would end")
        on_wait()

    def notify_all(self) -> None:
        self.events.append("notify")


class BlockingFutureTests(SynchronousTestCase):
    """
    A L{FutureRecordMetadata} is its record's C{on_delivery} (no Deferred
    callbacks per record): it holds the outcome, touches the producer's
    condition only when a thread waits in C{get}, and handles the failure of
    the record's Deferred, which nobody else holds (else it would be logged as
    "Unhandled error in Deferred" once collected).
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.client = FakeClient({"t": 1})
        self.client.known.add("t")
        self.producer = Producer(self.clock, client=self.client, linger_ms=0, retries=0, max_request_size=10000)
        self.blocking = blocking_producer(self.producer)

    def send(self, n: int, value: bytes = VALUE, key: bytes | None = None,
             future_class: type = FutureRecordMetadata) -> list[FutureRecordMetadata]:
        """Queue C{n} sends as L{BlockingProducer.send} does, hand them over in one drain, send the batch."""
        futures = []
        for _ in range(n):
            future = future_class(self.blocking)
            futures.append(future)
            self.blocking._queue.append((future, ("t", value, key, None, None, None)))
        self.blocking._drain()
        self.clock.advance(0)
        return futures

    def answer(self, **kwargs: Any) -> None:
        for request in [r for r in self.client.produce_requests() if not r.deferred.called]:
            respond(request, **kwargs)

    def assertNoUnhandledErrors(self) -> None:
        self.client.requests.clear()  # their batches hold the records' Deferreds
        gc.collect()  # an unhandled failure is logged when its Deferred is collected
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_acknowledged(self) -> None:
        futures = self.send(3) + self.send(2, key=b"k")  # send's hot path, and the call with every argument
        self.assertFalse(any(f.done() for f in futures))
        self.answer(base_offsets={("t", 0): 7})
        self.assertEqual([f.get(0).offset for f in futures], [7, 8, 9, 7, 8])
        self.assertEqual([f.exception(0) for f in futures], [None] * 5)

    def test_failed_by_the_broker(self) -> None:
        futures = self.send(3)
        self.answer(errors={("t", 0): ErrorCode.invalid_topic_exception})
        self.assertEqual([f.exception(0).error_code for f in futures], [ErrorCode.invalid_topic_exception] * 3)
        try:
            futures[0].get(0)
        except KafkaError as e:
            self.assertIs(e, futures[0].exception(0))
        else:
            self.fail("get() returned for a failed record")
        del futures
        self.assertNoUnhandledErrors()

    def test_failed_at_send(self) -> None:
        [future] = self.send(1, value=b"x" * 20000)  # larger than max_request_size: failed before any batch
        self.assertIsInstance(future.exception(0), RecordTooLargeError)
        del future
        self.assertNoUnhandledErrors()

    def test_completion_without_a_waiter_leaves_the_condition_alone(self) -> None:
        self.blocking._cond = condition = RecordingCondition()
        [future] = self.send(1)
        self.answer()
        self.assertTrue(future.done())
        self.assertEqual(future.get(0).offset, 0)  # done: no wait
        self.assertEqual(condition.events, [])

    def test_completion_while_a_thread_waits(self) -> None:
        self.blocking._cond = condition = RecordingCondition()
        [future] = self.send(1)
        condition.on_wait = self.answer  # the reactor thread acknowledges while the caller waits
        self.assertEqual(future.get(0.5).offset, 0)
        # the waiter was counted before it looked, so the completion notified it, under the lock
        self.assertEqual(condition.events, ["lock", "wait", "lock", "notify", "unlock", "unlock"])
        self.assertEqual(self.blocking._waiting, 0)

    def test_completion_after_the_waiter_counted_itself(self) -> None:
        # the reactor thread completes after get() counted itself, before it looked at the
        # future again: the completion notifies, and the waiter sees it done and does not wait
        self.blocking._cond = condition = RecordingCondition()
        test = self

        class LookedAt(FutureRecordMetadata):
            @property  # type: ignore[override]
            def _done(self) -> bool:
                if test.blocking._waiting and not self.__dict__.get("done"):
                    test.answer()
                return self.__dict__.get("done", False)

            @_done.setter
            def _done(self, done: bool) -> None:
                self.__dict__["done"] = done

        [future] = self.send(1, future_class=LookedAt)
        self.assertEqual(future.get(0.5).offset, 0)
        self.assertEqual(condition.events, ["lock", "lock", "notify", "unlock", "unlock"])


# --- every ordering ----------------------------------------------------------------------

TOPICS = {"a": 2, "b": 1}
LEADERS = {("a", 0): 1, ("a", 1): 2, ("b", 0): 1}

send_st = st.tuples(st.just("send"), st.sampled_from(sorted(TOPICS)), st.sampled_from(["sticky", "key", "partition"]),
                    st.sampled_from([b"v", VALUE, b"w" * 300]))
flush_st = st.just(("flush",))
answer_st = st.tuples(st.just("answer"), st.integers(min_value=0, max_value=3),
                      st.sampled_from(["ok", "ok", "ok", "retriable", "lost", "fatal"]))
step_st = st.one_of(
    send_st, send_st, send_st, flush_st, flush_st,
    st.tuples(st.just("metadata"), st.sampled_from([True, True, False])),
    answer_st, answer_st,
    st.tuples(st.just("tick"), st.sampled_from([0.0, 0.0, 0.05, 0.1])),
)


class FlushModel:
    """
    A producer driven by a list of steps, with what every flush was called
    after: the Deferreds of the records sent before it.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        self.clock = Clock()
        self.client = SlowMetadataClient(TOPICS, LEADERS)
        self.producer = Producer(self.clock, client=self.client, linger_ms=LINGER_MS, retry_backoff_ms=100, **options)
        self.producer._accumulator.random.seed(0)
        self.records: list[defer.Deferred] = []
        self.flushes: list[tuple[defer.Deferred, list[defer.Deferred]]] = []
        self.epoch = 0
        self.offsets: collections.Counter = collections.Counter()

    def flushing(self) -> bool:
        return any(not flushed.called for flushed, _ in self.flushes)

    def step(self, step: tuple) -> None:
        kind = step[0]
        if kind == "send":
            _, topic, how, value = step
            n = len(self.records)
            if how == "key":
                d = self.producer.send(topic, value, key=b"k%d" % (n % 3))
            elif how == "partition":
                d = self.producer.send(topic, value, partition=n % TOPICS[topic])
            else:
                d = self.producer.send(topic, value)
            d.addErrback(lambda _: None)  # failed records are resolved too
            if topic in self.producer._accumulator.topics and self.producer._waiting:
                event("a send waited for buffer memory")
            self.records.append(d)
        elif kind == "flush":
            if self.producer._waiting:
                event("flush with records waiting for metadata or buffer memory")
            if self.flushing():
                event("flush during a flush")
            self.flushes.append((self.producer.flush(), list(self.records)))
        elif kind == "metadata":
            if self.client.pending_metadata:
                if step[1]:
                    self.client.metadata_arrives()
                else:
                    self.client.metadata_fails()
        elif kind == "answer":
            unanswered = self.client.unanswered()
            if unanswered:
                self.answer(unanswered[step[1] % len(unanswered)], step[2])
        else:
            self.clock.advance(step[1])

    def answer(self, request: FakeRequest, outcome: str) -> None:
        if outcome != "ok" and self.flushing():
            event(f"{outcome} answer during a flush")
        if outcome == "lost":
            request.deferred.errback(BrokerConnectionError("connection lost"))
        elif request.api_key == _API_INIT_PRODUCER_ID:
            if outcome == "ok":
                self.epoch += 1
                producer_id(request, epoch=self.epoch)
            else:
                request.deferred.callback(NS(error_code=ErrorCode.coordinator_load_in_progress))
        elif outcome == "ok":
            offsets = {}
            for tp, values in request.values().items():
                offsets[tp] = self.offsets[tp]
                self.offsets[tp] += len(values)
            respond(request, base_offsets=offsets)
        else:
            code = ErrorCode.not_leader_or_follower if outcome == "retriable" else ErrorCode.message_too_large
            respond(request, errors={tp: code for tp in request.values()})

    def check(self, test: SynchronousTestCase) -> None:
        """Each flush has fired exactly when every record sent before it is resolved."""
        for i, (flushed, before) in enumerate(self.flushes):
            resolved = all(d.called for d in before)
            test.assertEqual(flushed.called, resolved,
                             f"flush #{i}: fired={flushed.called}, records before it resolved={resolved}"
                             f" (clock {self.clock.seconds()})")

    def finish(self, test: SynchronousTestCase) -> None:
        """
        Answer everything (metadata, requests) and run the timers due, until
        every flush fired; none may need the clock to reach linger_ms.
        """
        pending = sum(not flushed.called for flushed, _ in self.flushes)
        event(f"flushes pending after the steps: {min(pending, 3)}{'+' if pending > 3 else ''}")
        for _ in range(10000):
            if all(flushed.called for flushed, _ in self.flushes):
                break
            if self.client.pending_metadata:
                self.client.metadata_arrives()
            elif self.client.unanswered():
                self.answer(self.client.unanswered()[0], "ok")
            else:
                calls = self.clock.getDelayedCalls()
                test.assertTrue(calls, "flushes pending and nothing to do")
                self.clock.advance(max(0.0, min(c.getTime() for c in calls) - self.clock.seconds()))
            self.check(test)
            test.assertLess(self.clock.seconds(), LINGER_S,
                            f"{sum(not f.called for f, _ in self.flushes)} flushes waited for linger_ms")
        test.assertTrue(all(flushed.called for flushed, _ in self.flushes))


class FlushOrderingTests(SynchronousTestCase):
    @settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps=st.lists(step_st, min_size=5, max_size=80), flush_at=st.integers(min_value=0, max_value=60),
           options=st.sampled_from([
               {},
               {"max_in_flight_requests_per_connection": 1},
               {"batch_size": 61 + 3 * 111},
               {"acks": "all", "enable_idempotence": True},
               {"acks": "all", "enable_idempotence": True, "batch_size": 61 + 3 * 111},
               {"buffer_memory": 1000, "batch_size": 500},
           ]))
    def test_flush_fires_when_every_earlier_record_is_resolved(self, steps: list[tuple], flush_at: int,
                                                                options: dict[str, Any]) -> None:
        """
        Sends, flushes, metadata answers and failures, Produce and
        InitProducerId answers (acknowledged, retriable error, connection
        lost, fatal error) and clock ticks well below linger_ms, in any order:
        after every step each flush has fired exactly when every record sent
        before it is acknowledged or failed; then, with every request
        answered, every flush fires before the clock reaches linger_ms.
        """
        steps = steps[:flush_at] + [("flush",)] + steps[flush_at:]  # at least one flush
        event(f"steps: {len(steps) // 10 * 10}+")
        model = FlushModel(options)
        for step in steps:
            model.step(step)
            model.check(self)
        model.finish(self)
