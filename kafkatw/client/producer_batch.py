"""
L{ProducerBatch}: the records of one partition that travel together in a
Produce request, and the completion of their Deferreds and C{on_delivery}
callbacks (Kafka's C{ProducerBatch} and C{FutureRecordMetadata}).

A record's Deferred is a L{_RecordDeferred}, made without running
C{Deferred.__init__}; an acknowledged batch fires only the Deferreds that
somebody references (C{sys.getrefcount}), and its C{on_delivery} loop runs in
C when the compiled accelerator is built (docs/design.md, "Compiled
accelerator" and "Private APIs").

Source: Apache Kafka's C{ProducerBatch}, C{ProduceRequestResult},
C{FutureRecordMetadata}.
"""

from __future__ import annotations

from sys import getrefcount
from typing import Any, NamedTuple

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import ErrorCode, KafkaError
from ..protocol import records as _records

__all__ = ["ProducerBatch", "RecordMetadata", "KafkaTimeoutError", "ProducerClosedError", "SendManyGroup",
           "FlushWaiter", "deliver_records", "fail_records"]

_log = Logger()

#: bytes of a record beyond key and value: varints, attributes (upper bound for small records)
RECORD_OVERHEAD = 11
#: the RecordBatch v2 header
BATCH_OVERHEAD = 61
_tuple_new = tuple.__new__


class RecordMetadata(NamedTuple):
    """Where a record was written: C{offset} is -1 with acks=0; C{timestamp_ms} in ms since the epoch."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


class KafkaTimeoutError(KafkaError):
    """A record was not acknowledged within C{delivery_timeout_ms}, or a send waited longer than C{max_block_ms}."""

    error_code = ErrorCode.request_timed_out


class ProducerClosedError(KafkaError):
    """L{kafkatw.client.producer.Producer.send} after C{close}."""

    error_code = ErrorCode.unknown_server_error


# --- records' Deferreds ---------------------------------------------------------------------


class _LazyCallbacks:
    """
    C{_RecordDeferred._callbacks}: the callback list, made when first looked
    at (a non-data descriptor: from then on the instance's own attribute).
    """

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        callbacks: list = []
        attributes = instance.__dict__
        attributes["_callbacks"] = callbacks
        # A Deferred that had its callbacks looked at (a callback added, an
        # await) holds itself until it is fired: the producer's completion
        # loops, which leave alone the Deferreds nobody references, then see
        # a reference even when its caller dropped it after adding a callback.
        attributes["_kafkatw_held"] = instance
        return callbacks


class _RecordDeferred(Deferred):
    """
    The Deferred L{kafkatw.client.producer.Producer.send} returns: made without
    running C{Deferred.__init__} (a third of the cost: no callback list until
    a callback is added, no canceller; no C{Deferred.debug} creation stack).
    Relies on C{Deferred}'s private attributes C{_callbacks} and
    C{_canceller} (tests/unit/test_private_apis.py).
    """

    _canceller = None
    _callbacks = _LazyCallbacks()  # type: ignore[assignment]


def _unshared_refcount() -> int:
    """
    C{sys.getrefcount} of an object that only a list holds, read inside a
    C{for d in list} loop as the producer's completion loops read it: a
    record's Deferred whose count is not above this is referenced by nobody
    but its batch (its caller dropped it), so firing it cannot be observed.
    """
    items = [_new(_RecordDeferred)]
    for d in items:
        return getrefcount(d)
    raise AssertionError("unreachable")


_new = object.__new__
_UNSHARED = _unshared_refcount()


def _fire_record(d: Deferred, metadata: Any) -> None:
    """
    Fire a record's Deferred that somebody references with C{metadata}: through
    C{callback} when it has callbacks (or was cancelled by its owner), else by
    setting its result, which is what C{callback} does for a Deferred without
    callbacks, at a third of the cost (C{Deferred}'s private attributes:
    docs/design.md, Private APIs).
    """
    if d.__dict__.get("_callbacks") or d.called:
        d.__dict__.pop("_kafkatw_held", None)
        d.callback(metadata)
    else:
        d.called = True
        d._canceller = None
        d.result = metadata


# --- batches ----------------------------------------------------------------------------


class ProducerBatch:
    """
    The records of one partition that travel together (Kafka's C{ProducerBatch});
    C{size} in bytes (estimate, with the RecordBatch header).
    """

    __slots__ = ("topic", "partition", "state", "records", "simple", "deferreds", "size", "created", "base_ts",
                 "number", "attempts", "retry_at", "encoded", "epoch", "waiters", "done", "callbacks", "room",
                 "groups")

    def __init__(self, state: Any, now: float, number: int, base_ts: int) -> None:
        self.topic = state.topic
        self.partition = state.partition
        self.state = state
        # While every record is unkeyed, without headers or timestamp: just the
        # values; else (key, value, headers, timestamp_ms) tuples.
        self.records: list[Any] = []
        self.simple = True
        self.deferreds: list[Deferred] = []
        # on_delivery callables, parallel to deferreds (None: no record has one)
        self.callbacks: list[Any] | None = None
        self.size = BATCH_OVERHEAD
        self.created = now  # the reactor's time (s): linger, delivery timeout
        self.base_ts = base_ts  # the wall clock's (ms since the epoch): the records' CreateTime
        self.number = number
        self.attempts = 0
        self.retry_at = 0.0
        self.encoded: bytes | None = None
        self.epoch = -1
        self.waiters: list[FlushWaiter] | None = None
        self.done = False
        # While the batch is in the accumulator's hot dict: bytes it may still take
        # (batch_size - size when it became hot, less what send's hot path
        # added since; size and the accumulator's buffered catch up when it
        # leaves _hot).
        self.room = 0
        # The send_many calls whose records this batch holds (then it holds no
        # other records, and deferreds is empty).
        self.groups: list[SendManyGroup] | None = None


class SendManyGroup:
    """
    The records of one L{kafkatw.client.producer.Producer.send_many} call: its Deferred fires once
    every batch holding some of them is done, failing with the first error.
    """

    __slots__ = ("pending", "error", "deferred")

    def __init__(self) -> None:
        self.pending = 1  # the send_many call itself, until it has placed every record
        self.error: Exception | None = None
        self.deferred: Deferred = Deferred()

    def one_done(self, error: Exception | None = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.pending -= 1
        if self.pending == 0:
            if self.error is None:
                self.deferred.callback(None)
            else:
                self.deferred.errback(self.error)


class FlushWaiter:
    """One L{kafkatw.client.producer.Producer.flush}: fires once C{count} batches (and waiting sends) are done."""

    __slots__ = ("count", "deferred")

    def __init__(self) -> None:
        self.count = 0
        self.deferred: Deferred = Deferred()

    def one_done(self, result: Any = None) -> Any:
        self.count -= 1
        if self.count == 0:
            self.deferred.callback(None)
        return result


# --- completion ---------------------------------------------------------------------------


def deliver_records(batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
    """
    Each record's C{on_delivery} (a batch without callbacks has none),
    then its Deferred, with its RecordMetadata; compiled
    (C{_speedups.complete_records}) when the accelerator is built.
    """
    callbacks = batch.callbacks if batch.callbacks is not None else _NO_CALLBACKS
    ts = log_append_time_ms if log_append_time_ms >= 0 else batch.base_ts
    stamps: list[int] | None = None
    if log_append_time_ms < 0 and not batch.simple:
        stamps = [ts if r[3] is None else r[3] for r in batch.records]
    if _complete_records is not None:  # the loop below, compiled (kafkatw/protocol/_speedups.c)
        _complete_records(batch.deferreds, callbacks, RecordMetadata, batch.topic, batch.partition, base_offset,
                          ts, stamps, _fire_record, _on_delivery_failed)
        return
    new = _tuple_new
    metadata = RecordMetadata
    topic = batch.topic
    partition = batch.partition
    offset = base_offset
    step = 1 if base_offset >= 0 else 0
    unshared = _UNSHARED
    called = len(callbacks)
    i = 0
    for d in batch.deferreds:
        on_delivery = callbacks[i] if i < called else None
        if on_delivery is not None:
            m = new(metadata, (topic, partition, offset, ts if stamps is None else stamps[i]))
            try:
                on_delivery(m, None)
            except Exception:
                _log.failure("on_delivery callback of a record to {topic}-{partition} failed",
                             topic=topic, partition=partition)
        else:
            m = None
        if getrefcount(d) > unshared:
            if m is None:
                m = new(metadata, (topic, partition, offset, ts if stamps is None else stamps[i]))
            _fire_record(d, m)
        offset += step
        i += 1


def fail_records(batch: ProducerBatch, error: Exception) -> None:
    """Each record's C{on_delivery} with C{error}, then its Deferred's errback."""
    if batch.callbacks is not None:
        for on_delivery in batch.callbacks:
            if on_delivery is not None:
                call_on_delivery(on_delivery, None, error)
    failure = Failure(error)
    for d in batch.deferreds:
        d.__dict__.pop("_kafkatw_held", None)
        d.errback(failure)


def add_callback(batch: ProducerBatch, on_delivery: Any) -> None:
    """Record the on_delivery callable of the record just appended to C{batch} (None: it has none)."""
    callbacks = batch.callbacks
    if callbacks is None:
        callbacks = batch.callbacks = [None] * (len(batch.deferreds) - 1)
    callbacks.append(on_delivery)


def group_one_done(result: Any, group: SendManyGroup) -> None:
    group.one_done(result.value if isinstance(result, Failure) else None)


def _on_delivery_failed(error: Exception, topic: str, partition: int) -> None:
    """What the compiled completion loop does with an Exception an C{on_delivery} raised: as the Python loop."""
    _log.failure("on_delivery callback of a record to {topic}-{partition} failed", Failure(error),
                 topic=topic, partition=partition)


#: The compiled loop of L{deliver_records} (None: the Python loop runs).
_complete_records = getattr(_records._speedups, "complete_records", None)

#: The callbacks of a batch without any (never changed: the completion loop only reads it).
_NO_CALLBACKS: list = []


def call_on_delivery(on_delivery: Any, metadata: Any, error: Exception | None) -> None:
    try:
        on_delivery(metadata, error)
    except Exception:
        _log.failure("on_delivery callback failed")


def fail_one(d: Deferred, on_delivery: Any, error: Exception) -> None:
    """Fail one record that never reached a batch."""
    if on_delivery is not None:
        call_on_delivery(on_delivery, None, error)
    d.errback(error)
