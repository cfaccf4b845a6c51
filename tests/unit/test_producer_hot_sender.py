"""
Tests for the compiled hot path of L{Producer.send}
(C{kafkatw.protocol._speedups.HotSender}) and the compiled completion loop
(C{_speedups.complete_records}): a producer that has them sends the same
batches, calls the same C{on_delivery} callbacks with the same metadata and
fires the same Deferreds as one that runs the Python L{Producer.send} for
every record and the Python loop of C{kafkatw.client.producer_batch.deliver_records}.

Without the extension these tests skip, unless C{KAFKATW_REQUIRE_SPEEDUPS=1}
(scripts/test.sh sets it) makes them fail.
"""

from __future__ import annotations

import gc
import os
import sys
from types import MethodType
from typing import Any, NamedTuple
from unittest import SkipTest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client import producer_batch as producer_module
from kafkatw.client.producer import Producer
from kafkatw.client.producer_batch import ProducerBatch as _Batch, _RecordDeferred, add_callback as _add_callback
from kafkatw.protocol import records

from .test_producer import FakeClient, respond
from .test_records import compiled_speedups

# one step: ("send", value, key, partition, on_delivery, keep the Deferred) or ("turn",) or ("respond",)
send_st = st.tuples(
    st.just("send"),
    st.one_of(st.binary(max_size=300), st.just(b"x" * 200), st.none(), st.text(max_size=5)),
    st.one_of(st.none(), st.none(), st.binary(max_size=5)),
    st.one_of(st.none(), st.none(), st.none(), st.integers(min_value=0, max_value=1)),
    st.booleans(),
    st.booleans(),
)
step_st = st.one_of(send_st, send_st, send_st, send_st, st.just(("turn",)), st.just(("respond",)))


def run(steps: list[tuple], compiled: bool, options: dict[str, Any], log_append_time: Any = None) -> tuple:
    """
    Run C{steps} on a producer with (or without) the compiled hot path and
    completion loop; what it did, in order.
    """
    saved = producer_module._complete_records
    if not compiled:
        producer_module._complete_records = None  # the Python loop of deliver_records
    try:
        return _run(steps, compiled, options, log_append_time)
    finally:
        producer_module._complete_records = saved


def _run(steps: list[tuple], compiled: bool, options: dict[str, Any], log_append_time: Any) -> tuple:
    clock = Clock()
    client = FakeClient({"t": 2})
    client.known.add("t")
    producer = Producer(clock, client=client, wall_clock=clock.seconds, **options)  # the same timestamps each run
    if not compiled:
        vars(producer).pop("send", None)  # the Python Producer.send
    producer._accumulator.random.seed(7)
    seen: list = []
    held: list = []
    answered = 0
    for i, step in enumerate(steps):
        if step[0] == "send":
            _, value, key, partition, with_callback, keep = step
            if with_callback:
                d = producer.send("t", value, key=key, partition=partition,
                                  on_delivery=lambda m, e, i=i: seen.append((i, m, type(e))))
            elif key is None and partition is None:
                d = producer.send("t", value)  # the form the hot path takes without keywords
            else:
                d = producer.send("t", value, key=key, partition=partition)
            if keep:
                held.append((i, d))
        elif step[0] == "turn":
            clock.advance(0.001)
        else:
            requests = client.produce_requests()
            for request in requests[answered:]:
                respond(request, log_append_time=log_append_time)
            answered = len(requests)
    producer.flush()
    clock.advance(1)
    requests = client.produce_requests()
    for request in requests[answered:]:
        respond(request, log_append_time=log_append_time)
    # (the order of partitions in and across requests follows a set's: per partition, in order)
    sent = sorted(((topic, partition, data) for r in requests for topic, ps in r.body.topics for partition, data in ps),
                  key=lambda tpd: tpd[:2])
    seen.sort(key=lambda s: s[0])
    results = []
    for i, d in held:
        outcome: list = []
        d.addBoth(outcome.append)
        result = outcome[0] if outcome else None
        results.append((i, type(result.value) if isinstance(result, Failure) else result))
    return sent, seen, results, producer.buffered_bytes


class HotSenderTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.speedups = compiled_speedups()

    def test_installed_on_a_producer(self) -> None:
        if not records.SPEEDUPS:
            raise SkipTest("KAFKATW_PURE_PYTHON=1: the producer runs the Python send")
        producer = Producer(Clock(), client=FakeClient({"t": 1}))
        self.assertIsInstance(vars(producer)["send"], self.speedups.HotSender)
        self.assertEqual(vars(producer)["send"].slow.__func__, Producer.send)

    def test_not_installed_when_a_subclass_has_its_own_send(self) -> None:
        class Mine(Producer):
            def send(self, *args: Any, **kwargs: Any) -> Any:
                return super().send(*args, **kwargs)

        self.assertNotIn("send", vars(Mine(Clock(), client=FakeClient({"t": 1}))))

    def test_not_installed_when_producer_send_was_replaced(self) -> None:
        """A wrapper (instrumentation) or mock put on Producer.send sees every send, as without the extension."""
        original = Producer.send
        seen: list = []

        def traced(self: Producer, topic: str, value: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(value)
            return original(self, topic, value, *args, **kwargs)

        Producer.send = traced  # type: ignore[method-assign]
        try:
            client = FakeClient({"t": 1})
            client.known.add("t")
            producer = Producer(Clock(), client=client)
            for i in range(5):
                producer.send("t", b"v%d" % i)
        finally:
            Producer.send = original  # type: ignore[method-assign]
        self.assertNotIn("send", vars(producer))
        self.assertEqual(seen, [b"v%d" % i for i in range(5)])

    def test_refuses_a_batch_type_without_the_slots(self) -> None:
        class NoSlots:
            pass

        HotSender = self.speedups.HotSender
        HotSender({}, print, _Batch, _RecordDeferred, _add_callback, print, 11)
        self.assertRaises(TypeError, HotSender, {}, print, NoSlots, _RecordDeferred, _add_callback, print, 11)
        self.assertRaises(TypeError, HotSender, [], print, _Batch, _RecordDeferred, _add_callback, print, 11)

    def test_other_calls_go_to_the_python_send(self) -> None:
        calls: list = []

        def slow(*args: Any, **kwargs: Any) -> str:
            calls.append((args, kwargs))
            return "slow"

        send = self.speedups.HotSender({}, slow, _Batch, _RecordDeferred, _add_callback, print, 11)
        self.assertEqual(send("t", b"v"), "slow")  # no hot batch for t
        self.assertEqual(send("t", b"v", key=b"k"), "slow")
        self.assertEqual(send("t", b"v", None, 0), "slow")
        self.assertEqual(send(topic="t", value=b"v"), "slow")
        self.assertEqual(calls, [(("t", b"v"), {}), (("t", b"v"), {"key": b"k"}), (("t", b"v", None, 0), {}),
                                 ((), {"topic": "t", "value": b"v"})])

    def test_hot_records_do_not_reach_the_python_send(self) -> None:
        """Once a send made the sticky batch hot, plain sends are appended in C."""
        producer = Producer(Clock(), client=FakeClient({"t": 1}))
        producer.client.known.add("t")
        python_send = MethodType(Producer.send, producer)
        calls: list = []

        def slow(*args: Any, **kwargs: Any) -> Any:
            calls.append(args)
            return python_send(*args, **kwargs)

        producer.send = self.speedups.HotSender(producer._hot, slow, _Batch, _RecordDeferred, _add_callback,
                                                producer._seal, 11)
        producer.send("t", b"first")  # metadata: waits, then opens the batch
        producer.flush()
        producer.send("t", b"second")  # a new batch, made hot
        seen: list = []
        deferreds = [producer.send("t", b"v%d" % i, on_delivery=lambda m, e: seen.append(m)) for i in range(5)]
        self.assertEqual(len(calls), 2)
        (batch,) = producer._hot.values()
        self.assertEqual(batch.records, [b"second"] + [b"v%d" % i for i in range(5)])
        self.assertEqual(batch.deferreds[1:], deferreds)
        self.assertEqual(batch.callbacks[0], None)
        self.assertEqual(len(batch.callbacks), 6)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps=st.lists(step_st, max_size=60),
           options=st.sampled_from([{"batch_size": 600}, {"batch_size": 16384}, {"batch_size": 211 + 61},
                                    {"batch_size": 1000, "buffer_memory": 1500, "max_request_size": 1400}]))
    def test_same_as_python_send(self, steps: list[tuple], options: dict[str, Any]) -> None:
        """The same batches, callbacks, Deferred results and buffered bytes with and without the compiled path."""
        self.assertEqual(run(steps, True, options), run(steps, False, options))

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps=st.lists(step_st, max_size=40), log_append_time=st.sampled_from([None, 1_700_000_000_123]))
    def test_log_append_time_as_python(self, steps: list[tuple], log_append_time: Any) -> None:
        self.assertEqual(run(steps, True, {"batch_size": 700}, log_append_time),
                         run(steps, False, {"batch_size": 700}, log_append_time))

    def test_failing_on_delivery_is_logged_and_the_rest_complete(self) -> None:
        """An Exception from one callback is logged; the batch's other records complete, compiled or not."""
        for compiled in (True, False):
            saved = producer_module._complete_records
            if not compiled:
                producer_module._complete_records = None
            try:
                clock = Clock()
                client = FakeClient({"t": 1})
                client.known.add("t")
                producer = Producer(clock, client=client)
                seen: list = []

                def boom(m: Any, e: Any) -> None:
                    raise ValueError("boom")

                held = [producer.send("t", b"a", on_delivery=boom),
                        producer.send("t", b"b", on_delivery=lambda m, e: seen.append(m.offset))]
                producer.flush()
                clock.advance(0)
                respond(client.produce_requests()[0], base_offsets={("t", 0): 5})
                self.assertEqual(seen, [6])
                self.assertEqual([self.successResultOf(d).offset for d in held], [5, 6])
                self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)
            finally:
                producer_module._complete_records = saved

    def test_complete_records_leaks_no_references(self) -> None:
        """The objects complete_records is handed come back to their reference counts, after callbacks that raise."""

        class Fresh(NamedTuple):  # no records of it anywhere else
            topic: str
            partition: int
            offset: int
            timestamp_ms: int

        topic = "-".join(["leak", "check", str(os.getpid())])  # made now: not shared with other code
        partition = int("1" * 30)
        ts = int("2" * 30)
        fired: list = []

        def ok(m: Any, e: Any) -> None:
            pass

        def boom(m: Any, e: Any) -> None:
            raise ValueError(m)

        def failed(error: Exception, topic: str, partition: int) -> None:
            pass

        def fire(d: Any, m: Any) -> None:
            fired.append(m.offset)

        objects = (topic, partition, ts, Fresh, ok, boom, failed, fire)
        gc.collect()
        before = [sys.getrefcount(o) for o in objects]
        for _ in range(20):
            deferreds = [object() for _ in range(10)]
            held = deferreds[3]
            self.speedups.complete_records(deferreds, [ok] * 5 + [boom] * 5, Fresh, topic, partition, 5, ts, None,
                                           fire, failed)
            self.speedups.complete_records(deferreds, [None] * 10, Fresh, topic, partition, -1, ts, [ts] * 10, fire,
                                           failed)
            del held, deferreds
        self.assertEqual(fired, [8, -1] * 20)
        gc.collect()
        self.assertEqual(before, [sys.getrefcount(o) for o in objects])

    def test_fills_and_seals_batches_as_python_send(self) -> None:
        """Records of exactly the room left: the batch is sealed by the record that fills it."""
        steps = [("send", b"x" * 200, None, None, True, True)] * 9 + [("turn",), ("respond",)]
        for options in ({"batch_size": 2 * 211 + 61}, {"batch_size": 3 * 211 + 61 + 1}):
            compiled = run(steps, True, options)
            self.assertEqual(compiled, run(steps, False, options))
            self.assertGreater(len(compiled[0]), 2)
            self.assertEqual(len(compiled[1]), 9)

    def test_python_code_run_by_a_gc_pass_in_send(self) -> None:
        """
        A GC pass inside send (making the record's Deferred) runs Python code
        (gc callbacks here; finalizers and weakref callbacks alike) that may
        send too: a keyed record to the hot batch's partition replaces the
        batch's records list and takes it out of the hot path.  The record
        being sent is still sent, after it, and its Deferred fires with its
        own offset, compiled or not.
        """
        for compiled in (True, False):
            clock = Clock()
            client = FakeClient({"t": 1})
            client.known.add("t")
            producer = Producer(clock, client=client)
            if not compiled:
                vars(producer).pop("send", None)
            producer.send("t", b"a")
            producer.flush()
            clock.advance(1)
            producer.send("t", b"b")  # a new batch, made hot
            self.assertIn("t", producer._hot)
            nested: list = []

            def in_gc(phase: str, info: Any) -> None:
                if phase == "start" and not nested:
                    nested.append(producer.send("t", b"nested", key=b"k"))

            gc.collect()
            threshold = gc.get_threshold()
            gc.callbacks.append(in_gc)
            gc.set_threshold(1)  # a pass at the next allocation of a GC object or so: send's Deferred
            try:
                d = producer.send("t", b"c")
            finally:
                gc.set_threshold(*threshold)
                gc.callbacks.remove(in_gc)
            self.assertEqual(len(nested), 1)
            batch = producer._accumulator.topics["t"].partitions[0].open
            self.assertEqual(len(batch.records), len(batch.deferreds))
            producer.flush()
            clock.advance(1)
            (first, second) = client.produce_requests()
            respond(first)
            respond(second, base_offsets={("t", 0): 10})
            ((_, ((_, data),)),) = second.body.topics
            values = [r.value for b in records.decode_batches(data) for r in b.records]
            self.assertEqual(sorted(values), [b"b", b"c", b"nested"])
            self.assertEqual(self.successResultOf(d).offset, 10 + values.index(b"c"))
            self.assertEqual(self.successResultOf(nested[0]).offset, 10 + values.index(b"nested"))
