"""
L{Sender}: sends the producer's sealed batches (Kafka's C{Sender}).

Sealed batches (L{kafkatw.client.record_accumulator.RecordAccumulator}) whose
partitions share a leader travel in ONE Produce request (one batch per
partition per request, as Kafka's brokers require for magic 2), at most
C{max_request_size} bytes, at most C{max_in_flight_requests_per_connection}
requests in flight per broker.  Each batch is encoded once, when it is first
sent (L{kafkatw.protocol.records.encode_batch}, compressed as a whole): a
retry sends the same bytes, with idempotence the producer epoch and sequence
of the first attempt also after an epoch bump, since that attempt may have
been appended and only they let the broker drop the retry as a duplicate
(Kafka's C{RecordAccumulator} gives a new epoch and sequence only to a batch
never sent).  When the response
arrives each record's Deferred fires, in a tight loop, with its
L{kafkatw.client.producer_batch.RecordMetadata}
(L{kafkatw.client.producer_batch.deliver_records}).

Delivery (Kafka's semantics, C{ProducerConfig}):

  - C{acks=0}: the request has no response; records "complete" once written,
    with offset -1.  C{acks=1}: the leader appended them.  C{acks="all"} (-1):
    every in-sync replica has them.
  - Retriable errors (a stale leader, a lost connection, a request timeout)
    invalidate the metadata, refresh it and send the same batch bytes again after
    C{retry_backoff_ms}, up to C{retries} times and until C{delivery_timeout_ms}
    after the batch was opened; then its records fail with the last error (or
    L{KafkaTimeoutError}).  Without idempotence a retry may duplicate a batch the
    broker did append (acks=1: at least once).
  - With C{max_in_flight_requests_per_connection=1} (or idempotence) a partition
    is held while a batch of it is in flight or waiting to be retried: order per
    partition is kept through retries.
  - C{enable_idempotence}: InitProducerId, then every batch carries the producer
    id, epoch and per-partition sequence; the broker drops duplicates of a retried
    batch, so acknowledged records are written exactly once.  A batch that fails
    for good bumps the epoch (KIP-360) so that later sequences start afresh.

Source: Apache Kafka's C{Sender} and C{ProducerConfig}; KIP-98 (idempotence);
KIP-91 (delivery.timeout.ms); KIP-360 (epoch bump); the protocol guide's
Produce request (v3–v9).
"""

from __future__ import annotations

import bisect
import datetime
import struct
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import ErrorCode, KafkaError, kafka_error
from ..protocol.messages import encode_uvarint
from ..protocol.records import encode_batch, encode_value_batch
from .client import RETRIABLE_METADATA_ERRORS, KafkaClient
from .connection import BrokerConnectionError, RequestTimedOutError
from .producer_batch import KafkaTimeoutError, ProducerBatch, deliver_records, fail_records
from .record_accumulator import PartitionBatches, RecordAccumulator
from .transaction_manager import TransactionManager

__all__ = ["Sender", "ProduceBody"]

_log = Logger()

_API_PRODUCE = 0
_API_INIT_PRODUCER_ID = 22
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


class ProduceBody:
    """
    A Produce request body (v3–v9) encoded by hand: kio's writer is pure Python
    and costs more than the batches it carries.  v3–v8 share one layout; v9 is
    the first flexible version (compact strings, arrays and bytes, tagged fields).

    @ivar topics: C{[(topic, [(partition, batch bytes)])]}.
    """

    __slots__ = ("acks", "timeout_ms", "topics", "transactional_id")

    def __init__(self, acks: int, timeout_ms: int, topics: list[tuple[str, list[tuple[int, bytes]]]],
                 transactional_id: str | None = None) -> None:
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics
        self.transactional_id = transactional_id

    def encode_body(self, version: int, flexible: bool) -> bytes:
        if not 3 <= version <= 9:
            raise ValueError(f"kafkatw encodes Produce v3 to v9, not v{version}")
        pack_int32 = _INT32.pack
        tid = None if self.transactional_id is None else self.transactional_id.encode("utf-8")
        if flexible:
            parts = [b"\x00" if tid is None else encode_uvarint(len(tid) + 1) + tid,
                     _ACKS_TIMEOUT.pack(self.acks, self.timeout_ms), encode_uvarint(len(self.topics) + 1)]
            for name, partitions in self.topics:
                encoded = name.encode("utf-8")
                parts += (encode_uvarint(len(encoded) + 1), encoded, encode_uvarint(len(partitions) + 1))
                for partition, data in partitions:
                    parts += (pack_int32(partition), encode_uvarint(len(data) + 1), data, b"\x00")
                parts.append(b"\x00")
            parts.append(b"\x00")
        else:
            parts = [b"\xff\xff" if tid is None else _INT16.pack(len(tid)) + tid,
                     _ACKS_TIMEOUT.pack(self.acks, self.timeout_ms), pack_int32(len(self.topics))]
            for name, partitions in self.topics:
                encoded = name.encode("utf-8")
                parts += (_INT16.pack(len(encoded)), encoded, pack_int32(len(partitions)))
                for partition, data in partitions:
                    parts += (pack_int32(partition), pack_int32(len(data)), data)
        return b"".join(parts)


class Sender:
    """
    Drains a L{RecordAccumulator} into Produce requests, one producer's.

    Options are the producer's (L{kafkatw.client.producer.Producer}); the
    callables connect it to the producer:

    @param refresh_metadata: start a metadata refresh (no-op while one runs).
    @param last_metadata_refresh: when the last refresh ended (reactor seconds).
    @param memory_freed: called after a batch's bytes left the accumulator
        (sends waiting for C{buffer_memory} may go on).
    @ivar producer_id: the idempotent or transactional producer id (-1: none yet).
    @ivar producer_epoch: its epoch.
    @ivar in_flight: C{{broker id: Produce requests in flight}}.
    @ivar closed: set by the producer once closed: nothing is retried.
    """

    def __init__(self, reactor: Any, client: KafkaClient, accumulator: RecordAccumulator, *, acks: int,
                 compression: int, retries: int, retry_backoff_ms: int, delivery_timeout_ms: int,
                 request_timeout_ms: int, max_in_flight: int, max_request_size: int, enable_idempotence: bool,
                 transactional_id: str | None, txn: TransactionManager | None,
                 refresh_metadata: Callable[[], None], last_metadata_refresh: Callable[[], float],
                 memory_freed: Callable[[], None]) -> None:
        self.reactor = reactor
        self.client = client
        self.accumulator = accumulator
        self.acks = acks
        self.compression = compression
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self.max_request_size = max_request_size
        self.enable_idempotence = enable_idempotence
        self.transactional_id = transactional_id
        self.txn = txn
        self.refresh_metadata = refresh_metadata
        self.last_metadata_refresh = last_metadata_refresh
        self.memory_freed = memory_freed
        # Hold a partition while a batch of it is out (Java's guaranteeMessageOrder).
        self.hold_partitions = max_in_flight == 1 or enable_idempotence
        self.in_flight: dict[int, int] = {}
        self.closed = False
        self.producer_id = -1
        self.producer_epoch = -1
        self.bump_epoch = False
        self._init_pid: Any = None
        self._drain_call: Any = None
        self._wakeup_at = 0.0
        accumulator.wakeup = self.drain_soon
        accumulator.cannot_send = self.cannot_send

    def close(self) -> None:
        self.closed = True
        if self._drain_call is not None and self._drain_call.active():
            self._drain_call.cancel()
        self._drain_call = None

    # --- draining -----------------------------------------------------------------------------

    def drain_soon(self, delay: float = 0.0) -> None:
        at = self.reactor.seconds() + delay
        call = self._drain_call
        if call is not None:
            if call.active() and self._wakeup_at <= at:
                return
            if call.active():
                call.cancel()
        self._wakeup_at = at
        self._drain_call = self.reactor.callLater(delay, self.drain_now)

    def drain_now(self) -> None:
        """Send what can be sent: per leader, requests of one batch per partition."""
        if self._drain_call is not None:
            if self._drain_call.active():
                self._drain_call.cancel()
            self._drain_call = None
        txn = self.txn
        if txn is None and self.enable_idempotence and (self.producer_id < 0 or self.bump_epoch):
            self._init_producer_id()
            return
        if txn is not None and self.producer_id < 0:
            return  # nothing was accepted before init_transactions
        if self.accumulator.lingered:
            self.accumulator.seal_lingered()
        now = self.reactor.seconds()
        by_node: dict[int, list[PartitionBatches]] = {}
        wakeup = None
        need_metadata = False
        leader_for = self.client.leader_for
        new_partitions: list[tuple[str, int]] = []  # to add to the transaction first
        for state in list(self.accumulator.ready):
            ready = state.ready
            while ready and not ready[0].attempts and self._expired(ready[0], now):
                self.fail(ready.popleft(), KafkaTimeoutError(
                    f"expiring records of {state.topic}-{state.partition}: {self.delivery_timeout_ms} ms"
                    " passed since the batch was opened"))
            if not ready:
                self.accumulator.ready.discard(state)
                continue
            if self.hold_partitions and state.in_flight:
                continue
            if txn is not None and (state.topic, state.partition) not in txn.partitions:
                new_partitions.append((state.topic, state.partition))
                continue
            head = ready[0]
            if head.retry_at > now:
                wakeup = head.retry_at if wakeup is None else min(wakeup, head.retry_at)
                continue
            leader = leader_for(state.topic, state.partition)
            if leader < 0:
                need_metadata = True
                if self._expired(head, now):
                    self.fail(ready.popleft(), KafkaTimeoutError(
                        f"expiring records of {state.topic}-{state.partition}: no leader within"
                        f" {self.delivery_timeout_ms} ms"))
                    if not ready:
                        self.accumulator.ready.discard(state)
                continue
            nodes = by_node.get(leader)
            if nodes is None:
                by_node[leader] = [state]
            else:
                nodes.append(state)
        for node, states in by_node.items():
            while states and self.in_flight.get(node, 0) < self.max_in_flight:
                states = self._send_request(node, states, now)
        if new_partitions:
            txn.add_partitions(new_partitions)
        if need_metadata:
            backoff = self.retry_backoff_ms / 1000.0
            if now - self.last_metadata_refresh() >= backoff:
                self.client.invalidate()
                self.refresh_metadata()
            wakeup = now + backoff if wakeup is None else min(wakeup, now + backoff)
        if wakeup is not None:
            self.drain_soon(max(0.0, wakeup - now))

    def _expired(self, batch: ProducerBatch, now: float) -> bool:
        return (now - batch.created) * 1000 >= self.delivery_timeout_ms

    def _encode(self, batch: ProducerBatch) -> bytes:
        encoded = batch.encoded
        if encoded is None:  # never sent: the current epoch, the partition's next sequence
            if batch.simple:
                records = batch.records
                if None not in records:
                    if self.enable_idempotence:
                        state = batch.state
                        encoded = encode_value_batch(records, batch.base_ts, self.compression, self.producer_id,
                                                     self.producer_epoch, state.next_sequence,
                                                     self.txn is not None)
                        state.next_sequence = (state.next_sequence + len(records)) & 0x7FFFFFFF
                        batch.epoch = self.producer_epoch
                    else:
                        encoded = encode_value_batch(records, batch.base_ts, self.compression)
                    batch.encoded = encoded
                    return encoded
                base_ts = batch.base_ts
                records = [(None, v, None, base_ts) for v in records]
            else:
                records = batch.records
                if records[0][3] is None:
                    first = records[0]
                    records[0] = (first[0], first[1], first[2], batch.base_ts)
            if self.enable_idempotence:
                state = batch.state
                encoded = encode_batch(records, compression=self.compression, producer_id=self.producer_id,
                                       producer_epoch=self.producer_epoch, base_sequence=state.next_sequence,
                                       is_transactional=self.txn is not None)
                state.next_sequence = (state.next_sequence + len(records)) & 0x7FFFFFFF
                batch.epoch = self.producer_epoch
            else:
                encoded = encode_batch(records, compression=self.compression)
            batch.encoded = encoded
        return encoded

    def _send_request(self, node: int, states: list[PartitionBatches], now: float) -> list[PartitionBatches]:
        """Send one Produce request to C{node}; return the partitions still holding sendable batches."""
        topics: dict[str, list[tuple[int, bytes]]] = {}
        batches: dict[tuple[str, int], ProducerBatch] = {}
        size = 64
        left: list[PartitionBatches] = []
        for i, state in enumerate(states):
            batch = state.ready[0]
            try:
                data = self._encode(batch)
            except Exception as e:  # e.g. a value that is not bytes
                state.ready.popleft()
                self.fail(batch, kafka_error(ErrorCode.invalid_record, f"cannot encode batch: {e}"))
                if state.ready:
                    left.append(state)
                else:
                    self.accumulator.ready.discard(state)
                continue
            extra = len(data) + len(state.topic) + 16
            if batches and size + extra > self.max_request_size:
                left.extend(states[i:])
                break
            size += extra
            state.ready.popleft()
            state.in_flight += 1
            batches[(state.topic, state.partition)] = batch
            partitions = topics.get(state.topic)
            if partitions is None:
                topics[state.topic] = [(state.partition, data)]
            else:
                partitions.append((state.partition, data))
            if state.ready:
                if not self.hold_partitions and state.ready[0].retry_at <= now:
                    left.append(state)
            else:
                self.accumulator.ready.discard(state)
        if not batches:
            return left
        body = ProduceBody(self.acks, self.request_timeout_ms, list(topics.items()), self.transactional_id)
        self.in_flight[node] = self.in_flight.get(node, 0) + 1
        d = self.client.request(node, _API_PRODUCE, body, expect_response=self.acks != 0)
        d.addCallbacks(self._handle_response, self._handle_request_failure,
                       callbackArgs=(node, batches), errbackArgs=(node, batches))
        d.addErrback(self._log_bug)
        return left

    def cannot_send(self, state: PartitionBatches) -> bool:
        """Whether a batch of C{state} sealed now would wait: sealed batches ahead of it, or no request slot."""
        if state.ready or (self.hold_partitions and state.in_flight):
            return True
        leader = self.client.leader_for(state.topic, state.partition)
        return leader >= 0 and self.in_flight.get(leader, 0) >= self.max_in_flight

    def _request_done(self, node: int) -> None:
        self.in_flight[node] -= 1
        if self.accumulator.ready or self.accumulator.lingered:  # (the drain seals lingered batches that can go)
            self.drain_soon()

    def _handle_response(self, response: Any, node: int, batches: dict[tuple[str, int], ProducerBatch]) -> None:
        self._request_done(node)
        if response is None:  # acks=0
            for batch in batches.values():
                batch.state.in_flight -= 1
                self.complete(batch, -1, -1)
            return
        for topic in response.responses:
            name = topic.name
            for p in topic.partition_responses:
                batch = batches.pop((name, p.index), None)
                if batch is None:
                    continue
                batch.state.in_flight -= 1
                code = p.error_code
                if code == 0 or code == ErrorCode.duplicate_sequence_number:
                    self.complete(batch, p.base_offset, _ms(p.log_append_time))
                else:
                    message = getattr(p, "error_message", None)
                    error = kafka_error(ErrorCode(int(code)), f"Produce to {name}-{p.index}: {ErrorCode(int(code)).name}"
                                        + (f": {message}" if message else ""))
                    self._retry_or_fail(batch, error, ErrorCode(int(code)))
        for batch in batches.values():  # the broker left them out
            batch.state.in_flight -= 1
            self._retry_or_fail(batch, kafka_error(ErrorCode.unknown_server_error, "partition missing from response"),
                                ErrorCode.network_exception)

    def _handle_request_failure(self, failure: Failure, node: int, batches: dict[tuple[str, int], ProducerBatch]) -> None:
        self._request_done(node)
        error = failure.value
        if isinstance(error, (BrokerConnectionError, RequestTimedOutError)):
            code = error.error_code
        elif isinstance(error, KafkaError):
            code = error.error_code
        else:
            error = kafka_error(ErrorCode.unknown_server_error, f"Produce request failed: {error!r}")
            code = ErrorCode.unknown_server_error
        for batch in batches.values():
            batch.state.in_flight -= 1
            self._retry_or_fail(batch, error, code)

    def _retry_or_fail(self, batch: ProducerBatch, error: KafkaError, code: ErrorCode) -> None:
        now = self.reactor.seconds()
        # Kafka's retriable errors (NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR, ...) and lost connections
        retriable = getattr(code, "retriable", False) or code in RETRIABLE_METADATA_ERRORS or isinstance(
            error, (BrokerConnectionError, RequestTimedOutError))
        if self.enable_idempotence and code in (ErrorCode.out_of_order_sequence_number,
                                                ErrorCode.unknown_producer_id, ErrorCode.invalid_producer_epoch,
                                                ErrorCode.producer_fenced, ErrorCode.invalid_txn_state,
                                                ErrorCode.transactional_id_authorization_failed):
            retriable = False
        if (retriable and batch.attempts < self.retries and not self.closed
                and (now - batch.created) * 1000 + self.retry_backoff_ms < self.delivery_timeout_ms):
            batch.attempts += 1
            batch.retry_at = now + self.retry_backoff_ms / 1000.0
            _log.debug("retrying batch of {topic}-{partition} after {error} (attempt {attempt})",
                       topic=batch.topic, partition=batch.partition, error=error, attempt=batch.attempts)
            state = batch.state
            ready = state.ready
            # back in line by age, so that retried batches keep their order
            numbers = [b.number for b in ready]
            ready.insert(bisect.bisect_left(numbers, batch.number), batch)
            self.accumulator.ready.add(state)
            if code in RETRIABLE_METADATA_ERRORS or isinstance(error, BrokerConnectionError):
                self.client.invalidate()
                self.refresh_metadata()
            self.drain_soon(self.retry_backoff_ms / 1000.0)
            return
        if retriable and (now - batch.created) * 1000 + self.retry_backoff_ms >= self.delivery_timeout_ms:
            error = KafkaTimeoutError(f"expiring records of {batch.topic}-{batch.partition}:"
                                      f" {self.delivery_timeout_ms} ms passed since the batch was opened"
                                      f" (last error: {error})")
        self.fail(batch, error)

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        """
        Fire every record's Deferred with its RecordMetadata, after its
        C{on_delivery}.  A Deferred that nobody but the batch references (its
        caller dropped it: C{sys.getrefcount}) is left as it is: nothing can
        observe it, and a fire-and-forget producer then pays nothing per
        record here.
        """
        self._finish(batch)
        if batch.groups is not None:
            for group in batch.groups:
                group.one_done()
        else:
            deliver_records(batch, base_offset, log_append_time_ms)
        self._fire_waiters(batch)

    def fail(self, batch: ProducerBatch, error: Exception) -> None:
        self._finish(batch)
        if self.txn is not None:
            self.txn.fail(error)  # the transaction can only abort now (or the producer is fenced)
            if batch.encoded is not None:
                self.txn.epoch_bump_required = True  # the sequence has a gap: a new epoch after the abort
        elif self.enable_idempotence and batch.encoded is not None:
            self.bump_epoch = True  # the partition's sequence has a gap now
        if batch.groups is not None:
            for group in batch.groups:
                group.one_done(error)
        fail_records(batch, error)
        self._fire_waiters(batch)

    def _finish(self, batch: ProducerBatch) -> None:
        self.accumulator.deallocate(batch)
        self.memory_freed()

    def _fire_waiters(self, batch: ProducerBatch) -> None:
        if batch.waiters:
            for waiter in batch.waiters:
                waiter.one_done()
            batch.waiters = None

    def _log_bug(self, failure: Failure) -> None:
        _log.failure("producer bug while handling a Produce response", failure)

    # --- idempotence ------------------------------------------------------------------------

    def _init_producer_id(self) -> None:
        if self._init_pid is not None:
            return
        body = {"transactional_id": None, "transaction_timeout": -1,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch}
        node = self.client.least_loaded_node()
        self._init_pid = defer.ensureDeferred(self.client.send(node, _API_INIT_PRODUCER_ID, body))
        self._init_pid.addBoth(self._producer_id_done)

    def _producer_id_done(self, result: Any) -> None:
        self._init_pid = None
        if isinstance(result, Failure) or result.error_code != ErrorCode.none:
            what = result.value if isinstance(result, Failure) else ErrorCode(int(result.error_code)).name
            _log.warn("InitProducerId failed: {error}", error=what)
            self.client.invalidate()
            self.drain_soon(self.retry_backoff_ms / 1000.0)
            return
        new_epoch = (int(result.producer_id), int(result.producer_epoch))
        if new_epoch != (self.producer_id, self.producer_epoch) or self.bump_epoch:
            self.accumulator.reset_sequences()
        self.producer_id, self.producer_epoch = new_epoch
        self.bump_epoch = False
        self.drain_soon()


def _ms(value: Any) -> int:
    """A kio datetime_i64 (None or a datetime) as ms since the epoch (-1: none)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
