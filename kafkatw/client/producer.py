"""
L{Producer}: the Twisted Kafka producer (docs/design.md: Clients).

The facade of three parts, named as Kafka's producer names them:

  - L{kafkatw.client.record_accumulator.RecordAccumulator}: C{send} appends a
    record to the open batch of its partition; batches are sealed by size, by
    C{linger_ms}, or by a flush, and partitioning (KIP-480) happens there;
  - L{kafkatw.client.sender.Sender}: sealed batches travel in Produce requests,
    one per leader, and their records' Deferreds fire when the response
    arrives (acks, retries, idempotence: the delivery semantics are there);
  - L{kafkatw.client.producer_batch}: a batch, its records' Deferreds and
    L{RecordMetadata}.

The producer itself holds the sends that wait (for metadata, or for
C{buffer_memory}: C{send}'s Deferred waits — the record is held in a FIFO of
waiting sends, and every later send queues behind it — until
acknowledgements free room; C{max_block_ms} later it fails with
L{KafkaTimeoutError}; L{Producer.ready} tells a send loop when to pause),
flushes, closes, and the transactional glue (KIP-98) around the
L{kafkatw.client.transaction_manager.TransactionManager}.

With the compiled accelerator (C{kafkatw.protocol._speedups}), the commonest
send (an unkeyed C{bytes} value for the sticky partition's open batch, with or
without C{on_delivery}) is appended in C by the instance's C{send} (a
C{HotSender}; any other call runs L{Producer.send}), the C{on_delivery} loop of
an acknowledged batch runs in C, and batches of plain values are encoded in
one pass: the same steps and results as the Python code (docs/design.md,
"Compiled accelerator").

Records sent without C{timestamp_ms} carry the time their batch was opened (at
most C{linger_ms} before the send), read from the wall clock (C{wall_clock},
C{time.time}); linger, backoffs and timeouts run on the reactor's time, which
may be the monotonic clock (L{kafkatw.client.clock.use_monotonic_clock}).

Source: Apache Kafka's C{KafkaProducer} and C{ProducerConfig}; KIP-98
(idempotence and transactions).
"""

from __future__ import annotations

import time
from collections import deque
from types import MethodType
from typing import Any, Callable

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import ErrorCode, KafkaError, kafka_error
from ..protocol import records as _records
from ..protocol.records import COMPRESSION_CODECS
from .client import KafkaClient, client_for
from .producer_batch import (
    RECORD_OVERHEAD,
    FlushWaiter,
    KafkaTimeoutError,
    ProducerBatch,
    ProducerClosedError,
    RecordMetadata,
    SendManyGroup,
    _new,
    _RecordDeferred,
    add_callback,
    fail_one,
    group_one_done,
)
from .record_accumulator import PartitionBatches, RecordAccumulator
from .security import SecurityConfig, security_from
from .sender import Sender
from .transaction_manager import (
    GroupMetadata,
    IllegalTransactionStateError,
    TransactionManager,
    TransactionState,
    as_group_metadata,
)

__all__ = ["Producer", "RecordMetadata", "KafkaTimeoutError", "ProducerClosedError"]

_log = Logger()

_ACKS = {0: 0, 1: 1, -1: -1, "0": 0, "1": 1, "-1": -1, "all": -1}


class Producer:
    """
    A Kafka producer on the reactor.

    Options are Kafka's producer configs under Python names (C{batch.size} is
    C{batch_size}, …), with Kafka's defaults.

    @param bootstrap_servers: C{"host:port,…"}; used when C{client} is None
        (then the producer owns its L{KafkaClient} and closes it).
    @param client: a shared L{KafkaClient}.
    @param acks: 0, 1 or C{"all"} (-1).
    @param batch_size: seal a partition's batch at this many bytes.
    @param linger_ms: seal a batch at most this long after it was opened (ms).
    @param compression_type: None, C{"gzip"}, C{"snappy"}, C{"lz4"} or C{"zstd"}.
    @param retries: resend a batch after a retriable error at most this often.
    @param retry_backoff_ms: wait between attempts (ms).
    @param delivery_timeout_ms: fail a record this long after its batch was opened (ms).
    @param request_timeout_ms: wait for a Produce response this long (ms).
    @param max_in_flight_requests_per_connection: Produce requests in flight per
        broker; 1 keeps order per partition through retries.
    @param buffer_memory: bytes of records held before sends wait.
    @param max_request_size: largest Produce request (bytes); also the largest record.
    @param partitioner: C{partitioner(key, all_partitions, available_partitions)
        -> partition}, called for every record without an explicit partition (as
        kafka-python's); None: the Java client's default.
    @param enable_idempotence: producer id, epoch and sequence numbers (KIP-98).
    @param max_block_ms: how long a send may wait for metadata or buffer room (ms);
        also how long a transactional call retries the coordinator.
    @param transactional_id: makes the producer transactional (KIP-98; see
        L{init_transactions}): implies C{enable_idempotence} and C{acks="all"}
        (the default C{acks=1} becomes C{"all"}; C{acks=0} is refused).
    @param transaction_timeout_ms: how long the coordinator lets a transaction
        stay open before aborting it (ms; at most the broker's
        C{transaction.max.timeout.ms}).
    @param wall_clock: the wall clock, C{time.time}'s shape (s since the
        epoch): the records' C{CreateTime}s (Kafka's C{Time.milliseconds()}),
        whatever clock the reactor's timers run on.
    @param security: a L{kafkatw.client.security.SecurityConfig} (TLS, SASL) for the
        client made from C{bootstrap_servers}; kafka-python's keyword options
        (C{security_protocol}, C{ssl_cafile}, C{ssl_certfile}, C{ssl_keyfile},
        C{ssl_password}, C{ssl_check_hostname}, C{sasl_mechanism},
        C{sasl_plain_username}, C{sasl_plain_password}) set or replace its fields.
    """

    def __init__(self, reactor: Any, bootstrap_servers: str | None = None, client: KafkaClient | None = None, *,
                 client_id: str = "kafkatw-producer", acks: int | str = 1, batch_size: int = 16384,
                 linger_ms: float = 5, compression_type: str | None = None, retries: int = 2147483647,
                 retry_backoff_ms: int = 100, delivery_timeout_ms: int = 120000, request_timeout_ms: int = 30000,
                 max_in_flight_requests_per_connection: int = 5, buffer_memory: int = 33554432,
                 max_request_size: int = 1048576, partitioner: Callable[..., int] | None = None,
                 enable_idempotence: bool = False, max_block_ms: int = 60000,
                 transactional_id: str | None = None, transaction_timeout_ms: int = 60000,
                 wall_clock: Callable[[], float] = time.time,
                 security: SecurityConfig | None = None, **security_options: Any) -> None:
        if transactional_id is not None:
            if acks not in (1, "all", -1, "-1"):  # 1: the default, which a transactional id turns into all
                raise ValueError("a transactional_id needs acks='all'")
            acks = "all"
            enable_idempotence = True
        if acks not in _ACKS:
            raise ValueError(f"acks must be 0, 1 or 'all', not {acks!r}")
        codec = COMPRESSION_CODECS.get(compression_type or "none")
        if codec is None:
            raise ValueError(f"unknown compression_type {compression_type!r}")
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        client, self._owns_client = client_for(reactor, bootstrap_servers, client, client_id, request_timeout_ms,
                                               security_from(security, security_options, "Producer"))
        self.reactor = reactor
        #: the wall clock the records' timestamps are read from (C{time.time}'s shape)
        self.wall_clock = wall_clock
        self.client = client
        self.acks = _ACKS[acks]
        if enable_idempotence:
            if self.acks != -1:
                raise ValueError("enable_idempotence needs acks='all'")
            if max_in_flight_requests_per_connection > 5:
                raise ValueError("enable_idempotence needs max_in_flight_requests_per_connection <= 5")
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = codec
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self.buffer_memory = buffer_memory
        self.max_request_size = max_request_size
        self.max_block_ms = max_block_ms
        #: L{ready} fires at or below this many buffered bytes: half of
        #: buffer_memory, at most what keeps every request in flight full
        #: several times over (at least 1 MB).
        self.ready_bytes = min(buffer_memory // 2,
                               max(1 << 20, 4 * batch_size * max_in_flight_requests_per_connection))
        self.partitioner = partitioner
        self.enable_idempotence = enable_idempotence
        self._waiting: deque[tuple] = deque()  # sends not yet in a batch: metadata or buffer_memory
        self._block_timer: Any = None
        self._refreshing = False
        self._refreshed_at = -1e9
        self._closed = False
        self._closing = False
        self._ready_waiters: list[Deferred] = []
        self.transactional_id = transactional_id
        self._txn: TransactionManager | None = None
        if transactional_id is not None:
            self._txn = TransactionManager(reactor, client, transactional_id, transaction_timeout_ms,
                                           retry_backoff_ms, max_block_ms, self._transactional_producer_id)
        self._accumulator = accumulator = RecordAccumulator(
            reactor, client, batch_size=batch_size, linger_ms=linger_ms, buffer_memory=buffer_memory,
            max_request_size=max_request_size, partitioner=partitioner, wall_clock=wall_clock)
        self._sender = Sender(
            reactor, client, accumulator, acks=self.acks, compression=codec, retries=retries,
            retry_backoff_ms=retry_backoff_ms, delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms, max_in_flight=max_in_flight_requests_per_connection,
            max_request_size=max_request_size, enable_idempotence=enable_idempotence,
            transactional_id=transactional_id, txn=self._txn, refresh_metadata=self._refresh_metadata,
            last_metadata_refresh=lambda: self._refreshed_at, memory_freed=self._memory_freed)
        # send's hot path works on the accumulator's dict of hot batches itself
        self._hot = accumulator.hot
        self._seal = accumulator.seal
        self._append_record = accumulator.append
        if self._txn is not None:
            self._txn.on_added = self._sender.drain_soon
            self._txn.on_add_failed = self._partitions_not_added
            self._txn.on_left = accumulator.cool_all  # send's hot path checks no transaction state
        hot_sender = getattr(_records._speedups, "HotSender", None)
        # (the send defined here: not when a subclass, a test's mock or an
        # instrumentation wrapper replaced it, which must see every call)
        if hot_sender is not None and type(self).send is _PYTHON_SEND:
            # send's hot path compiled (kafkatw/protocol/_speedups.c): the steps of
            # the hot path at the top of send, for send(topic, value) and
            # send(topic, value, on_delivery=f); every other call runs send.
            self.send = hot_sender(self._hot, MethodType(_PYTHON_SEND, self), ProducerBatch, _RecordDeferred,
                                   add_callback, self._seal, RECORD_OVERHEAD)

    @property
    def producer_id(self) -> int:
        """The idempotent or transactional producer id (-1 before InitProducerId)."""
        return self._sender.producer_id

    @property
    def producer_epoch(self) -> int:
        """Its epoch (-1 before InitProducerId)."""
        return self._sender.producer_epoch

    # --- sending ---------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
             headers: list[tuple[str, bytes | None]] | None = None, timestamp_ms: int | None = None,
             on_delivery: Callable[[RecordMetadata | None, Exception | None], object] | None = None) -> Deferred:
        """
        Send one record.

        @param value: bytes (str is UTF-8 encoded) or None.
        @param key: bytes (str is UTF-8 encoded) or None; picks the partition
            when C{partition} is None.
        @param headers: C{[(str, bytes | None)]}.
        @param timestamp_ms: create time (ms since the epoch); None: the time
            the record's batch was opened.
        @param on_delivery: called as C{on_delivery(metadata, None)} when the
            record is acknowledged, or C{on_delivery(None, error)} when it
            fails, just before the returned Deferred fires (as the Java
            client's C{send(record, callback)}).  A callback per record costs
            a fraction of a callback on the Deferred (no Deferred machinery
            runs); an exception it raises is logged and ignored.
        @return: a Deferred firing with L{RecordMetadata}, or failing with a
            L{KafkaError} (L{KafkaTimeoutError} after C{delivery_timeout_ms};
            the broker's error for a non-retriable one; L{RecordTooLargeError};
            L{UnknownTopicOrPartitionError} for a partition the topic lacks).
            While C{buffer_memory} is exhausted the Deferred also waits for room.
        """
        # The Deferred first: making it may run a GC pass, and with it Python
        # code (finalizers, weakref callbacks) that sends too and changes _hot.
        d = _new(_RecordDeferred)
        batch = self._hot.get(topic)
        if (batch is not None and value.__class__ is bytes and key is None and partition is None and headers is None
                and timestamp_ms is None):
            # The hot path: an unkeyed record for the open batch of the sticky
            # partition (the batch is in _hot only while no send waits, and
            # while buffer_memory has room for all of it: batch.room).
            room = batch.room - len(value) - RECORD_OVERHEAD
            if room >= 0:
                batch.room = room
                batch.records.append(value)
                batch.deferreds.append(d)
                if batch.callbacks is not None:
                    batch.callbacks.append(on_delivery)
                elif on_delivery is not None:
                    add_callback(batch, on_delivery)
                if not room:  # batch_size reached
                    self._seal(batch.state, batch)
                return d
        if self._closing:
            fail_one(d, on_delivery, ProducerClosedError("producer closed"))
            return d
        if self._txn is not None and self._txn.state is not TransactionState.IN_TRANSACTION:
            try:
                self._txn.check(TransactionState.IN_TRANSACTION, what="send outside a transaction")
            except KafkaError as error:
                fail_one(d, on_delivery, error)
                return d
        if value.__class__ is not bytes and value is not None:
            value = _as_bytes(value)
        if key is not None and key.__class__ is not bytes:
            key = _as_bytes(key)
        # (no send waits here: the batch may join the hot path unless the producer is closing)
        if (self._waiting or self._closed
                or not self._append_record(topic, value, key, partition, headers, timestamp_ms, d, on_delivery,
                                           not self._closing)):
            if self._closed:
                fail_one(d, on_delivery, ProducerClosedError("producer closed"))
                return d
            self._accumulator.cool_all()
            self._waiting.append((topic, value, key, partition, headers, timestamp_ms, d, self.reactor.seconds(),
                                  on_delivery))
            if topic not in self._accumulator.topics:
                self._refresh_metadata()
            if self._block_timer is None:
                self._block_timer = self.reactor.callLater(self.max_block_ms / 1000.0, self._block_expired)
        return d

    def send_many(self, topic: str, records: list[tuple[bytes | None, bytes, Any, int | None]],
                  partition: int) -> Deferred:
        """
        Send many records to one partition, without a Deferred or a callback
        per record: for senders of many records that only need to know that
        all of them arrived (L{kafkatw.shipper}).  The records go into the
        partition's batches in order, as C{len(records)} calls of L{send}
        would put them, and are encoded as L{send}'s are.

        @param records: C{(key, value, headers, timestamp_ms)} tuples, as
            L{kafkatw.protocol.records.encode_batch} takes them: key bytes or
            None, value bytes (not str, not None), headers a list of
            C{(str, bytes | None)} or None, timestamp_ms None (the time the
            batch was opened) or ms since the epoch.
        @param partition: the partition (a partition the topic lacks fails
            every record with L{UnknownTopicOrPartitionError}).
        @return: a Deferred firing with None once every record is
            acknowledged, or failing with the error of the first batch that
            failed, once every batch holding some of them is done.
        """
        group = SendManyGroup()
        if records:
            tstate = self._accumulator.topics.get(topic)
            if (tstate is None or self._closing or self._waiting or self._closed
                    or (self._txn is not None and self._txn.state is not TransactionState.IN_TRANSACTION)
                    or not 0 <= partition < len(tstate.partitions)
                    or not self._accumulator.append_many(tstate.partitions[partition], records, group)):
                # Waiting (metadata, buffer memory) or failing: one record at a time.
                for key, value, headers, timestamp_ms in records:
                    group.pending += 1
                    self.send(topic, value, key, partition, headers, timestamp_ms).addBoth(group_one_done, group)
        group.one_done()
        return group.deferred

    def _append(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None,
                headers: Any, timestamp_ms: int | None, d: Deferred, on_delivery: Any = None) -> bool:
        """Append a record to its partition's open batch; False when it must wait (metadata, buffer)."""
        if self._closed:
            return False
        return self._accumulator.append(topic, value, key, partition, headers, timestamp_ms, d, on_delivery,
                                        not self._waiting and not self._closing)

    def _memory_freed(self) -> None:
        """A batch is done: sends waiting for buffer memory may go on."""
        if self._waiting:
            self._process_waiting()
        elif self._ready_waiters:
            self._fire_ready()

    def _block_expired(self) -> None:
        self._block_timer = None
        self._process_waiting()
        if self._waiting:
            since = self._waiting[0][7]
            delay = max(0.0, since + self.max_block_ms / 1000.0 - self.reactor.seconds())
            self._block_timer = self.reactor.callLater(delay, self._block_expired)

    # --- back-pressure and flushing ---------------------------------------------------------

    def ready(self) -> Deferred:
        """
        A Deferred firing (with None) once no send waits for buffer room or
        metadata and at most L{ready_bytes} are buffered: a send loop awaits it
        now and then, so that it neither holds sends waiting for
        C{buffer_memory} nor builds a queue deeper than the requests in flight
        need (a deep queue adds latency, and garbage-collection work for every
        record that lives long enough to reach the oldest generation).
        """
        if not self._waiting and self.buffered_bytes <= self.ready_bytes:
            return defer.succeed(None)
        d: Deferred = Deferred()
        self._ready_waiters.append(d)
        return d

    @property
    def buffered_bytes(self) -> int:
        """Bytes of records accepted and not yet acknowledged (estimate)."""
        accumulator = self._accumulator
        return accumulator.buffered + (accumulator.hot_bytes() if accumulator.hot else 0)

    def _process_waiting(self) -> None:
        waiting = self._waiting
        now = self.reactor.seconds()
        while waiting:
            topic, value, key, partition, headers, ts, d, since, on_delivery = waiting[0]
            refused = self.client.topic_errors.get(topic) if topic not in self._accumulator.topics else None
            if refused is not None:  # an ACL: fail now, as Kafka's TopicAuthorizationException
                waiting.popleft()
                fail_one(d, on_delivery, kafka_error(refused, f"{topic}: {refused.name} (not authorized to write it)"))
                continue
            if self._append(topic, value, key, partition, headers, ts, d, on_delivery):
                waiting.popleft()
                continue
            if (now - since) * 1000 >= self.max_block_ms:
                waiting.popleft()
                what = "metadata" if topic not in self._accumulator.topics else "buffer memory"
                fail_one(d, on_delivery, KafkaTimeoutError(f"waited {self.max_block_ms} ms for {what} ({topic})"))
                continue
            break
        self._fire_ready()

    def _fire_ready(self) -> None:
        if (self._ready_waiters and not self._waiting
                and self.buffered_bytes <= self.ready_bytes):
            waiters, self._ready_waiters = self._ready_waiters, []
            for d in waiters:
                d.callback(None)

    def flush(self) -> Deferred:
        """
        Send every record sent so far now, without waiting for C{linger_ms}:
        the open batches are sealed, and until the returned Deferred fires
        every batch opened is sent as soon as it can be — the batches of
        records that were waiting for metadata or C{buffer_memory} when
        C{flush} was called, and of records sent meanwhile, which may ride
        along (Java's C{KafkaProducer.flush}: C{RecordAccumulator.beginFlush}
        makes every batch ready while C{flushesInProgress > 0}).

        @return: a Deferred firing (with None) when every record sent before
            the call is acknowledged or has failed (never failing); records
            sent after it are not waited for.
        """
        self._accumulator.seal_all()
        waiter = FlushWaiter()
        waiter.count = 1  # flush itself, until every record is counted
        for batch in self._accumulator.incomplete:
            if batch.waiters is None:
                batch.waiters = []
            batch.waiters.append(waiter)
            waiter.count += 1
        for entry in self._waiting:  # not in a batch yet: their batch is made ready when they get one
            waiter.count += 1
            entry[6].addBoth(waiter.one_done)
        waiter.count -= 1
        if waiter.count == 0:
            return defer.succeed(None)
        self._accumulator.flushes_in_progress += 1
        waiter.deferred.addBoth(self._flush_done)
        self._sender.drain_now()
        return waiter.deferred

    def _flush_done(self, result: Any) -> Any:
        self._accumulator.flushes_in_progress -= 1
        return result

    def close(self) -> Deferred:
        """
        Flush, then close the connections if this producer created its client.

        @return: a Deferred firing with None.
        """
        return Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        self._closing = True  # sends from now on fail: they would miss the final flush
        self._accumulator.cool_all()
        txn = self._txn
        if txn is not None and txn.state not in (TransactionState.IN_TRANSACTION,
                                                 TransactionState.COMMITTING_TRANSACTION):
            # an aborted or failed transaction: records whose partition never joined it cannot go
            self._fail_unadded(ProducerClosedError(f"producer closed in transaction state {txn.state.value}"))
        await self.flush()
        self._closed = True
        self._accumulator.close()
        self._sender.close()
        if self._block_timer is not None and self._block_timer.active():
            self._block_timer.cancel()
        self._block_timer = None
        if self._owns_client:
            await self.client.close()

    # --- transactions (KIP-98) -----------------------------------------------------------------

    def _transaction_manager(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalTransactionStateError("transactional calls need a producer made with a transactional_id")
        return self._txn

    def init_transactions(self) -> Deferred:
        """
        Get this transactional id's producer id and a new epoch from its
        transaction coordinator (FindCoordinator with key type 1, then
        InitProducerId), which fences every older producer with the same
        C{transactional_id} and completes or aborts the transaction it left
        open.  Call once, before the first L{begin_transaction}.

        @return: a Deferred firing with None; failing with the coordinator's
            error after C{max_block_ms} of retriable ones, with
            L{IllegalTransactionStateError} when called twice or without a
            transactional id, with C{PRODUCER_FENCED} and the like (the
            producer is then unusable: close it).
        """
        return Deferred.fromCoroutine(self._init_transactions())

    async def _init_transactions(self) -> None:
        txn = self._transaction_manager()
        txn.transition(TransactionState.INITIALIZING)
        await self._initialize(txn)

    async def _initialize(self, txn: TransactionManager) -> None:
        try:
            await txn.init_producer_id()
        except Exception as error:
            txn.fail(error)
            raise
        txn.transition(TransactionState.READY)

    def _transactional_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: sequences start afresh."""
        sender = self._sender
        sender.producer_id, sender.producer_epoch = producer_id, producer_epoch
        sender.bump_epoch = False
        self._accumulator.reset_sequences()

    def begin_transaction(self) -> None:
        """
        Start a transaction: the records sent from now on, and the offsets
        given to L{send_offsets_to_transaction}, commit or abort together.
        Local (no request): the coordinator hears of the transaction with the
        first partition written (AddPartitionsToTxn).

        @raise IllegalTransactionStateError: not after L{init_transactions} or
            a completed transaction; the transaction's error in an error state.
        """
        txn = self._transaction_manager()
        txn.check(TransactionState.READY, what="begin a transaction")
        txn.transition(TransactionState.IN_TRANSACTION)

    def send_offsets_to_transaction(self, offsets: dict[tuple[str, int], Any], group_metadata: Any) -> Deferred:
        """
        Commit a consumer group's offsets as part of the transaction
        (AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit
        to the group's coordinator): they become the group's committed offsets
        only if the transaction commits.

        @param offsets: C{{(topic, partition): offset}} — the offset of the
            next record to consume; values may also be C{(offset, metadata)}
            tuples or objects with C{offset} and C{metadata} attributes
            (kafka-python's C{OffsetAndMetadata}).
        @param group_metadata: the consumer's C{group_metadata()} (a
            L{GroupMetadata}; the broker checks generation and member id), or
            a group id string.
        @return: a Deferred firing with None; failing with the error (which
            also makes the transaction abortable, or the producer fenced).
        """
        return Deferred.fromCoroutine(self._send_offsets(offsets, as_group_metadata(group_metadata)))

    async def _send_offsets(self, offsets: dict[tuple[str, int], Any], group: GroupMetadata) -> None:
        txn = self._transaction_manager()
        txn.check(TransactionState.IN_TRANSACTION, what="send offsets to the transaction")
        try:
            await txn.send_offsets(offsets, group)
        except Exception as error:
            txn.fail(error)
            raise

    def commit_transaction(self) -> Deferred:
        """
        Flush, then commit the transaction (EndTxn): its records become
        visible to read-committed consumers and its offsets the group's
        committed offsets.

        @return: a Deferred firing with None once the coordinator has the
            commit (its markers follow); failing with the error of a record
            or request of the transaction (then call L{abort_transaction}),
            or a fatal one such as C{PRODUCER_FENCED}.
        """
        return Deferred.fromCoroutine(self._commit())

    async def _commit(self) -> None:
        txn = self._transaction_manager()
        txn.check(TransactionState.IN_TRANSACTION, what="commit the transaction")
        txn.transition(TransactionState.COMMITTING_TRANSACTION)
        self._accumulator.cool_all()
        await self.flush()
        if txn.state is not TransactionState.COMMITTING_TRANSACTION:
            txn.check(TransactionState.COMMITTING_TRANSACTION, what="commit the transaction")
        try:
            await txn.end_txn(committed=True)
        except Exception as error:
            txn.fail(error)
            raise
        txn.transition(TransactionState.READY)

    def abort_transaction(self) -> Deferred:
        """
        Abort the transaction (EndTxn): records whose partition has not joined
        the transaction yet fail with C{OPERATION_NOT_ATTEMPTED}, the others are
        flushed and then
        hidden from read-committed consumers by the ABORT markers; the
        offsets sent to the transaction are dropped.  Also the way out of an
        abortable error.  After a batch failed (a gap in its sequence), the
        producer gets a new epoch (InitProducerId) before it is ready again.

        @return: a Deferred firing with None; failing with a fatal error.
        """
        return Deferred.fromCoroutine(self._abort())

    async def _abort(self) -> None:
        txn = self._transaction_manager()
        txn.check(TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR, what="abort the transaction")
        txn.transition(TransactionState.ABORTING_TRANSACTION)
        self._accumulator.cool_all()
        self._fail_unadded(kafka_error(ErrorCode.operation_not_attempted, "the transaction was aborted"
                                       " before this record's partition joined it"))
        await self.flush()
        try:
            await txn.end_txn(committed=False)
        except Exception as error:
            txn.fail(error)
            raise
        if txn.epoch_bump_required:
            txn.transition(TransactionState.INITIALIZING)
            await self._initialize(txn)
        else:
            txn.transition(TransactionState.READY)

    def _fail_unadded(self, error: Exception) -> None:
        """
        Fail the batches of partitions not (yet) in the transaction: they can
        no longer be sent; and the records not in a batch yet (waiting for
        their topic's metadata or for C{buffer_memory}), which Java's producer
        aborts as undrained (C{RecordAccumulator.abortUndrainedBatches}).
        """
        txn = self._txn
        waiting, self._waiting = self._waiting, deque()
        for entry in waiting:
            fail_one(entry[6], entry[8], error)
        if waiting:
            self._fire_ready()
        for state in list(self._accumulator.open) + list(self._accumulator.ready):
            if (state.topic, state.partition) in txn.partitions:
                continue
            self._fail_partition(state, error)

    def _partitions_not_added(self, tps: Any, error: Exception) -> None:
        """AddPartitionsToTxn failed: fail the partitions' batches."""
        for topic, partition in tps:
            tstate = self._accumulator.topics.get(topic)
            if tstate is not None and partition < len(tstate.partitions):
                self._fail_partition(tstate.partitions[partition], error)

    def _fail_partition(self, state: PartitionBatches, error: Exception) -> None:
        if state.open is not None:
            self._accumulator.seal(state, state.open)
        while state.ready:
            self._sender.fail(state.ready.popleft(), error)
        self._accumulator.ready.discard(state)
        self._accumulator.lingered.discard(state)

    # --- metadata ---------------------------------------------------------------------------

    def _refresh_metadata(self) -> None:
        if self._refreshing or self._closed:
            return
        self._refreshing = True
        topics = set(self._accumulator.topics)
        topics.update(entry[0] for entry in self._waiting)
        d = defer.ensureDeferred(self.client.ensure_metadata(sorted(topics)))
        d.addBoth(self._metadata_done)

    def _metadata_done(self, result: Any) -> None:
        self._refreshing = False
        self._refreshed_at = self.reactor.seconds()
        if isinstance(result, Failure):
            _log.warn("metadata refresh failed: {error}", error=result.value)
            self.client.invalidate()
        for name in {entry[0] for entry in self._waiting} | set(self._accumulator.topics):
            partitions = self.client.partitions_for(name)
            if not partitions:
                continue
            self._accumulator.add_partitions(name, max(partitions) + 1)
        if self._waiting:
            self._process_waiting()
        retry = isinstance(result, Failure) or any(entry[0] not in self._accumulator.topics for entry in self._waiting)
        if retry and not self._closed:
            self.reactor.callLater(self.retry_backoff_ms / 1000.0, self._refresh_metadata)
        if self._accumulator.ready:
            self._sender.drain_soon()




#: Producer.send as defined above: the one the compiled hot path stands in for.
_PYTHON_SEND = Producer.send

def _as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"record keys and values are bytes, str or None, not {type(value).__name__}")
