"""
L{Producer}: the Twisted Kafka producer (docs/design.md: Clients).

C{send} appends a record to the open batch of its partition — a plain
C{(key, value, headers, timestamp_ms)} tuple in a list, no per-record object —
and returns a Deferred.  A batch is sealed when it reaches C{batch_size} bytes or
C{linger_ms} after it was opened (one timer for the whole producer), or at the
sender's next pass while a L{Producer.flush} is in progress — or, when it could
not be sent then (every request slot to its leader taken, batches of its
partition ahead of it), once it can: meanwhile it keeps taking records, as Java's
C{RecordAccumulator} keeps appending to a batch the sender has not drained — then encoded
once (L{kafkatw.protocol.records.encode_batch}, compressed as a whole).  Sealed
batches whose partitions share a leader travel in ONE Produce request (one batch
per partition per request, as Kafka's brokers require for magic 2), at most
C{max_request_size} bytes, at most C{max_in_flight_requests_per_connection}
requests in flight per broker.  When the response arrives each record's Deferred
fires, in a tight loop, with its L{RecordMetadata}.

With the compiled accelerator (C{kafkatw.protocol._speedups}), the commonest
send (an unkeyed C{bytes} value for the sticky partition's open batch, with or
without C{on_delivery}) is appended in C by the instance's C{send} (a
C{HotSender}; any other call runs L{Producer.send}), the C{on_delivery} loop of
an acknowledged batch runs in C, and batches of plain values are encoded in
one pass: the same steps and results as the Python code (docs/design.md,
"Compiled accelerator").

Partitioning is the Java client's (C{BuiltInPartitioner}): keyed records go to
C{toPositive(murmur2(key)) % numPartitions}; unkeyed records stick to one
partition until its batch is sealed, then to another one picked at random among
those with a leader (KIP-480).

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
  - C{buffer_memory}: bytes of records held in batches not yet acknowledged.
    When a send would exceed it, its Deferred waits — the record is held in a
    FIFO of waiting sends, and every later send queues behind it — until
    acknowledgements free room; C{max_block_ms} later it fails with
    L{KafkaTimeoutError}.  L{Producer.ready} tells a send loop when to pause.

Records sent without C{timestamp_ms} carry the time their batch was opened (at
most C{linger_ms} before the send), read from the reactor's clock.

Source: Apache Kafka's C{RecordAccumulator}, C{Sender}, C{BuiltInPartitioner}
and C{ProducerConfig}; KIP-480 (sticky partitioner); KIP-98 (idempotence);
KIP-91 (delivery.timeout.ms); KIP-360 (epoch bump).
"""

from __future__ import annotations

import bisect
import datetime
import random
import struct
from sys import getrefcount
from collections import deque
from itertools import accumulate, repeat
from operator import itemgetter
from types import MethodType
from typing import Any, Callable, NamedTuple

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import ErrorCode, KafkaError, RecordTooLargeError, UnknownTopicOrPartitionError, kafka_error
from ..protocol import records as _records
from ..protocol.records import COMPRESSION_CODECS, encode_batch, encode_value_batch
from ..protocol.messages import encode_uvarint
from .client import RETRIABLE_METADATA_ERRORS, KafkaClient, client_for
from .security import SecurityConfig, security_from
from .connection import BrokerConnectionError, RequestTimedOutError
from .partitioner import murmur2
from .transaction_manager import (
    GroupMetadata,
    IllegalTransactionStateError,
    TransactionManager,
    TransactionState,
    as_group_metadata,
)

__all__ = ["Producer", "RecordMetadata", "KafkaTimeoutError", "ProducerClosedError"]

_log = Logger()

_RECORD_OVERHEAD = 11  # bytes of a record beyond key and value: varints, attributes (upper bound for small records)
_BATCH_OVERHEAD = 61  # RecordBatch v2 header
_API_PRODUCE = 0
_API_INIT_PRODUCER_ID = 22
_ACKS = {0: 0, 1: 1, -1: -1, "0": 0, "1": 1, "-1": -1, "all": -1}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
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
    """L{Producer.send} after L{Producer.close}."""

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
    The Deferred L{Producer.send} returns: made without
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


# --- the Produce request body, hand-encoded ---------------------------------------------


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


# --- accumulator state ---------------------------------------------------------------------


class _Batch:
    """The records of one partition that travel together; C{size} in bytes (estimate, with header)."""

    __slots__ = ("topic", "partition", "state", "records", "simple", "deferreds", "size", "created", "base_ts",
                 "number", "attempts", "retry_at", "encoded", "epoch", "waiters", "done", "callbacks", "room",
                 "groups")

    def __init__(self, state: _PartitionState, now: float, number: int) -> None:
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
        self.size = _BATCH_OVERHEAD
        self.created = now
        self.base_ts = int(now * 1000)
        self.number = number
        self.attempts = 0
        self.retry_at = 0.0
        self.encoded: bytes | None = None
        self.epoch = -1
        self.waiters: list[_FlushWaiter] | None = None
        self.done = False
        # While the batch is in Producer._hot: bytes it may still take
        # (batch_size - size when it became hot, less what send's hot path
        # added since; size and the producer's _buffered catch up when it
        # leaves _hot).
        self.room = 0
        # The send_many calls whose records this batch holds (then it holds no
        # other records, and deferreds is empty).
        self.groups: list[_Group] | None = None


class _Group:
    """
    The records of one L{Producer.send_many} call: its Deferred fires once
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


class _PartitionState:
    """One partition's open batch and its sealed batches waiting to be sent, oldest first."""

    __slots__ = ("topic", "partition", "open", "ready", "in_flight", "next_sequence")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.open: _Batch | None = None
        self.ready: deque[_Batch] = deque()
        self.in_flight = 0
        self.next_sequence = 0


class _TopicState:
    __slots__ = ("name", "partitions", "sticky", "previous")

    def __init__(self, name: str) -> None:
        self.name = name
        self.partitions: list[_PartitionState] = []
        self.sticky = -1
        self.previous = -1


class _FlushWaiter:
    __slots__ = ("count", "deferred")

    def __init__(self) -> None:
        self.count = 0
        self.deferred: Deferred = Deferred()

    def one_done(self, result: Any = None) -> Any:
        self.count -= 1
        if self.count == 0:
            self.deferred.callback(None)
        return result


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
        # Hold a partition while a batch of it is out (Java's guaranteeMessageOrder).
        self._hold_partitions = max_in_flight_requests_per_connection == 1 or enable_idempotence
        self._topics: dict[str, _TopicState] = {}
        self._buffered = 0  # bytes of records in unacknowledged batches
        self._waiting: deque[tuple] = deque()  # sends not yet in a batch: metadata or buffer_memory
        self._ready: set[_PartitionState] = set()  # partitions with sealed batches to send
        self._incomplete: set[_Batch] = set()
        self._open: dict[_PartitionState, _Batch] = {}  # open batches, oldest first
        # topic -> the open batch of its sticky partition while it holds only
        # values and no send waits: send's hot path
        self._hot: dict[str, _Batch] = {}
        self._hot_reserved = 0  # the sum of (batch_size - size) of the batches in _hot
        # partitions whose open batch outlived linger_ms while it could not be
        # sent, and those whose batch was opened during a flush: each is sealed
        # as soon as it can be sent
        self._lingered: set[_PartitionState] = set()
        # flushes in progress (Java's RecordAccumulator.flushesInProgress):
        # while any runs, every batch is ready at once, linger_ms or not
        self._flushes_in_progress = 0
        self._in_flight: dict[int, int] = {}  # broker -> Produce requests in flight
        self._batch_number = 0
        self._linger_call: Any = None
        self._block_timer: Any = None
        self._drain_call: Any = None
        self._wakeup_at = 0.0
        self._refreshing = False
        self._refreshed_at = -1e9
        self._closed = False
        self._closing = False
        self._ready_waiters: list[Deferred] = []
        self._random = random.Random()
        # idempotence
        self.producer_id = -1
        self.producer_epoch = -1
        self._init_pid: Deferred | None = None
        self._bump_epoch = False
        # transactions
        self.transactional_id = transactional_id
        self._txn: TransactionManager | None = None
        if transactional_id is not None:
            self._txn = TransactionManager(reactor, client, transactional_id, transaction_timeout_ms,
                                           retry_backoff_ms, max_block_ms, self._transactional_producer_id)
            self._txn.on_added = self._drain_soon
            self._txn.on_add_failed = self._partitions_not_added
            self._txn.on_left = self._cool_all  # send's hot path checks no transaction state
        hot_sender = getattr(_records._speedups, "HotSender", None)
        # (the send defined here: not when a subclass, a test's mock or an
        # instrumentation wrapper replaced it, which must see every call)
        if hot_sender is not None and type(self).send is _PYTHON_SEND:
            # send's hot path compiled (kafkatw/protocol/_speedups.c): the steps of
            # the hot path at the top of send, for send(topic, value) and
            # send(topic, value, on_delivery=f); every other call runs send.
            self.send = hot_sender(self._hot, MethodType(_PYTHON_SEND, self), _Batch, _RecordDeferred,
                                   _add_callback, self._seal, _RECORD_OVERHEAD)

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
            room = batch.room - len(value) - _RECORD_OVERHEAD
            if room >= 0:
                batch.room = room
                batch.records.append(value)
                batch.deferreds.append(d)
                if batch.callbacks is not None:
                    batch.callbacks.append(on_delivery)
                elif on_delivery is not None:
                    _add_callback(batch, on_delivery)
                if not room:  # batch_size reached
                    self._seal(batch.state, batch)
                return d
        if self._closing:
            _fail_one(d, on_delivery, ProducerClosedError("producer closed"))
            return d
        if self._txn is not None and self._txn.state is not TransactionState.IN_TRANSACTION:
            try:
                self._txn.check(TransactionState.IN_TRANSACTION, what="send outside a transaction")
            except KafkaError as error:
                _fail_one(d, on_delivery, error)
                return d
        if value.__class__ is not bytes and value is not None:
            value = _as_bytes(value)
        if key is not None and key.__class__ is not bytes:
            key = _as_bytes(key)
        if self._waiting or not self._append(topic, value, key, partition, headers, timestamp_ms, d, on_delivery):
            if self._closed:
                _fail_one(d, on_delivery, ProducerClosedError("producer closed"))
                return d
            self._cool_all()
            self._waiting.append((topic, value, key, partition, headers, timestamp_ms, d, self.reactor.seconds(),
                                  on_delivery))
            if topic not in self._topics:
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
        group = _Group()
        if records:
            tstate = self._topics.get(topic)
            if (tstate is None or self._closing or self._waiting or self._closed
                    or (self._txn is not None and self._txn.state is not TransactionState.IN_TRANSACTION)
                    or not 0 <= partition < len(tstate.partitions)
                    or not self._append_many(tstate.partitions[partition], records, group)):
                # Waiting (metadata, buffer memory) or failing: one record at a time.
                for key, value, headers, timestamp_ms in records:
                    group.pending += 1
                    self.send(topic, value, key, partition, headers, timestamp_ms).addBoth(_group_one_done, group)
        group.one_done()
        return group.deferred

    def _append_many(self, state: _PartitionState, records: list[tuple], group: _Group) -> bool:
        """
        Append C{records} to C{state}'s batches (the batches hold no other
        records); False, having appended nothing, when they must go one at a
        time (buffer memory, a record too large).
        """
        # Each record's size as _append estimates it, the headers' bytes taken
        # from the last record (line numbers grow) plus room for one more
        # header in records that have more headers than it.
        try:
            last_headers = records[-1][2]
            keys = set(map(_first, records))
            per_record = _RECORD_OVERHEAD + max((len(k) for k in keys if k is not None), default=0)
            if last_headers:
                per_record += sum(len(k) + (len(v) if v is not None else 0) + 4 for k, v in last_headers)
            try:
                headers_counts = set(map(len, map(_third, records)))
            except TypeError:  # some without headers (None)
                headers_counts = set(map(len, map(_third_or_empty, records)))
            if len(headers_counts) > 1:
                per_record += 64 * (max(headers_counts) - min(headers_counts))
            if not all(map(isinstance, map(_second, records), repeat(bytes))):
                return False  # (str values, None: one at a time)
            lengths = list(map(len, map(_second, records)))
        except TypeError:
            return False
        ends = list(accumulate(lengths))  # value bytes through each record
        n = len(records)
        total = ends[-1] + n * per_record
        if self._hot:
            self._cool(state.topic)
        if (self._buffered + total > self.buffer_memory
                or max(lengths) + per_record + _BATCH_OVERHEAD > self.max_request_size):
            return False
        batch_size = self.batch_size
        start = 0
        used = 0  # bytes of records[:start]
        while start < n:
            batch = state.open
            if batch is not None and (batch.groups is None or batch.size >= batch_size):
                self._seal(state, batch)
                batch = None
            if batch is None:
                batch = self._new_batch(state)
                batch.simple = False
                batch.groups = []
            room = batch_size - batch.size
            # the records that fit: the most with (value bytes + per_record each) <= room, at least one
            stop = bisect.bisect_right(range(start, n), room + used,
                                       key=lambda i: ends[i] + (i + 1) * per_record) + start
            if stop == start:
                if batch.records:
                    self._seal(state, batch)
                    continue
                stop = start + 1  # a record larger than batch_size: a batch of its own
            through = ends[stop - 1] + stop * per_record
            if batch.records:
                batch.records += records[start:stop]
            else:
                batch.records = records[start:stop]
            if not batch.groups or batch.groups[-1] is not group:
                batch.groups.append(group)
                group.pending += 1
            batch.size += through - used
            self._buffered += through - used
            used = through
            start = stop
            if batch.size >= batch_size:
                self._seal(state, batch)
        return True

    def _block_expired(self) -> None:
        self._block_timer = None
        self._process_waiting()
        if self._waiting:
            since = self._waiting[0][7]
            delay = max(0.0, since + self.max_block_ms / 1000.0 - self.reactor.seconds())
            self._block_timer = self.reactor.callLater(delay, self._block_expired)

    def _append(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None,
                headers: Any, timestamp_ms: int | None, d: Deferred, on_delivery: Any = None) -> bool:
        """Append a record to its partition's open batch; False when it must wait (metadata, buffer)."""
        tstate = self._topics.get(topic)
        if tstate is None or self._closed:
            return False
        if self._hot:
            self._cool(topic)
        size = _RECORD_OVERHEAD
        if value is not None:
            size += len(value)
        if key is not None:
            size += len(key)
        if headers:
            size += sum(len(k) + (len(v) if v is not None else 0) + 4 for k, v in headers)
        if self._buffered + size > self.buffer_memory:
            if size + _BATCH_OVERHEAD > self.buffer_memory or size + _BATCH_OVERHEAD > self.max_request_size:
                _fail_one(d, on_delivery, RecordTooLargeError(
                    f"a record of about {size} bytes exceeds buffer_memory or max_request_size"))
                return True
            return False
        if size + _BATCH_OVERHEAD > self.max_request_size:
            _fail_one(d, on_delivery, RecordTooLargeError(f"a record of about {size} bytes exceeds max_request_size"
                                                         f" ({self.max_request_size})"))
            return True
        partitions = tstate.partitions
        sticky = False
        if partition is None:
            if self.partitioner is not None:
                ids = list(range(len(partitions)))
                partition = self.partitioner(key, ids, self._available(tstate) or ids)
            elif key is not None:
                partition = (murmur2(key) & 0x7FFFFFFF) % len(partitions)
            else:
                sticky = True
                partition = tstate.sticky
                if partition < 0:
                    partition = self._next_sticky(tstate)
        elif not 0 <= partition < len(partitions):
            _fail_one(d, on_delivery, UnknownTopicOrPartitionError(f"{topic} has no partition {partition}"
                                                                  f" ({len(partitions)} partitions)"))
            return True
        state = partitions[partition]
        batch = state.open
        if batch is None:
            batch = self._new_batch(state)
        elif batch.size + size > self.batch_size or batch.groups is not None:
            self._seal(state, batch)
            if sticky:  # KIP-480: the record that would open a new batch goes to a new sticky partition
                state = partitions[self._next_sticky(tstate)]
                batch = state.open or self._new_batch(state)
            else:
                batch = self._new_batch(state)
        hot = False
        if key is None and not headers and timestamp_ms is None:
            if batch.simple:
                batch.records.append(value)
                hot = sticky and value is not None and not self._waiting and not self._closing
            else:
                batch.records.append((None, value, None, None))
        else:
            if batch.simple:
                batch.records = [(None, v, None, None) for v in batch.records]
                batch.simple = False
            batch.records.append((key, value, headers, timestamp_ms))
        batch.deferreds.append(d)
        if on_delivery is not None or batch.callbacks is not None:
            _add_callback(batch, on_delivery)
        batch.size += size
        self._buffered += size
        if batch.size >= self.batch_size:
            self._seal(state, batch)
        elif hot:
            room = self.batch_size - batch.size
            if self._buffered + self._hot_reserved + room <= self.buffer_memory:
                # send's hot path fills the rest of this batch
                batch.room = room
                self._hot_reserved += room
                self._hot[topic] = batch
        return True

    def _cool(self, topic: str) -> None:
        """Take C{topic}'s batch out of L{send}'s hot path: its size and _buffered catch up."""
        batch = self._hot.pop(topic, None)
        if batch is not None:
            reserved = self.batch_size - batch.size
            self._hot_reserved -= reserved
            added = reserved - batch.room
            batch.size += added
            self._buffered += added
            batch.room = 0

    def _cool_all(self) -> None:
        for topic in list(self._hot):
            self._cool(topic)

    def _hot_bytes(self) -> int:
        """Bytes that send's hot path added to the batches in _hot and that _buffered does not count yet."""
        batch_size = self.batch_size
        return sum(batch_size - batch.size - batch.room for batch in self._hot.values())

    def _new_batch(self, state: _PartitionState) -> _Batch:
        self._batch_number += 1
        batch = _Batch(state, self.reactor.seconds(), self._batch_number)
        state.open = batch
        self._open[state] = batch
        self._incomplete.add(batch)
        if self._flushes_in_progress:
            # As Java's accumulator while a flush is in progress: the batch is
            # ready now.  It is sealed by the sender's next pass (once it can
            # be sent), so that the records appended until then share it.
            self._lingered.add(state)
            self._drain_soon()
        if self._linger_call is None:
            self._linger_call = self.reactor.callLater(self.linger_ms / 1000.0, self._linger_expired)
        return batch

    def _seal(self, state: _PartitionState, batch: _Batch) -> None:
        if self._hot.get(state.topic) is batch:
            self._cool(state.topic)
        self._lingered.discard(state)
        state.open = None
        del self._open[state]
        state.ready.append(batch)
        self._ready.add(state)
        topic = self._topics.get(state.topic)
        if topic is not None and topic.sticky == state.partition:
            topic.previous = state.partition
            topic.sticky = -1  # KIP-480: a new batch, a new sticky partition
        self._drain_soon()

    def _available(self, tstate: _TopicState) -> list[int]:
        leader_for = self.client.leader_for
        return [p.partition for p in tstate.partitions if leader_for(tstate.name, p.partition) >= 0]

    def _next_sticky(self, tstate: _TopicState) -> int:
        candidates = self._available(tstate) or list(range(len(tstate.partitions)))
        previous = tstate.sticky if tstate.sticky >= 0 else tstate.previous
        if len(candidates) > 1 and previous in candidates:
            candidates.remove(previous)
        tstate.sticky = self._random.choice(candidates)
        return tstate.sticky

    def _linger_expired(self) -> None:
        self._linger_call = None
        now = self.reactor.seconds()
        linger = self.linger_ms / 1000.0
        for state, batch in list(self._open.items()):
            if batch.created + linger <= now + 1e-9:
                if self._cannot_send(state):
                    # As Java's accumulator: a batch whose linger is over but
                    # that could not be sent now keeps taking records (up to
                    # batch_size) until a request slot frees.
                    self._lingered.add(state)
                else:
                    self._seal(state, batch)
            else:
                self._linger_call = self.reactor.callLater(batch.created + linger - now, self._linger_expired)
                break  # _open is oldest first

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
        if not self._waiting and self._buffered + (self._hot_bytes() if self._hot else 0) <= self.ready_bytes:
            return defer.succeed(None)
        d: Deferred = Deferred()
        self._ready_waiters.append(d)
        return d

    @property
    def buffered_bytes(self) -> int:
        """Bytes of records accepted and not yet acknowledged (estimate)."""
        return self._buffered + (self._hot_bytes() if self._hot else 0)

    def _process_waiting(self) -> None:
        waiting = self._waiting
        now = self.reactor.seconds()
        while waiting:
            topic, value, key, partition, headers, ts, d, since, on_delivery = waiting[0]
            refused = self.client.topic_errors.get(topic) if topic not in self._topics else None
            if refused is not None:  # an ACL: fail now, as Kafka's TopicAuthorizationException
                waiting.popleft()
                _fail_one(d, on_delivery, kafka_error(refused, f"{topic}: {refused.name} (not authorized to write it)"))
                continue
            if self._append(topic, value, key, partition, headers, ts, d, on_delivery):
                waiting.popleft()
                continue
            if (now - since) * 1000 >= self.max_block_ms:
                waiting.popleft()
                what = "metadata" if topic not in self._topics else "buffer memory"
                _fail_one(d, on_delivery, KafkaTimeoutError(f"waited {self.max_block_ms} ms for {what} ({topic})"))
                continue
            break
        self._fire_ready()

    def _fire_ready(self) -> None:
        if (self._ready_waiters and not self._waiting
                and self._buffered + (self._hot_bytes() if self._hot else 0) <= self.ready_bytes):
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
        for state, batch in list(self._open.items()):
            self._seal(state, batch)
        waiter = _FlushWaiter()
        waiter.count = 1  # flush itself, until every record is counted
        for batch in self._incomplete:
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
        self._flushes_in_progress += 1
        waiter.deferred.addBoth(self._flush_done)
        self._drain_now()
        return waiter.deferred

    def _flush_done(self, result: Any) -> Any:
        self._flushes_in_progress -= 1
        return result

    def close(self) -> Deferred:
        """
        Flush, then close the connections if this producer created its client.

        @return: a Deferred firing with None.
        """
        return Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        self._closing = True  # sends from now on fail: they would miss the final flush
        self._cool_all()
        txn = self._txn
        if txn is not None and txn.state not in (TransactionState.IN_TRANSACTION,
                                                 TransactionState.COMMITTING_TRANSACTION):
            # an aborted or failed transaction: records whose partition never joined it cannot go
            self._fail_unadded(ProducerClosedError(f"producer closed in transaction state {txn.state.value}"))
        await self.flush()
        self._closed = True
        for call in (self._linger_call, self._drain_call, self._block_timer):
            if call is not None and call.active():
                call.cancel()
        self._linger_call = self._drain_call = self._block_timer = None
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
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._bump_epoch = False
        for tstate in self._topics.values():
            for state in tstate.partitions:
                state.next_sequence = 0

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
        self._cool_all()
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
        self._cool_all()
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
            _fail_one(entry[6], entry[8], error)
        if waiting:
            self._fire_ready()
        for state in list(self._open) + list(self._ready):
            if (state.topic, state.partition) in txn.partitions:
                continue
            self._fail_partition(state, error)

    def _partitions_not_added(self, tps: Any, error: Exception) -> None:
        """AddPartitionsToTxn failed: fail the partitions' batches."""
        for topic, partition in tps:
            tstate = self._topics.get(topic)
            if tstate is not None and partition < len(tstate.partitions):
                self._fail_partition(tstate.partitions[partition], error)

    def _fail_partition(self, state: _PartitionState, error: Exception) -> None:
        if state.open is not None:
            self._seal(state, state.open)
        while state.ready:
            self._fail(state.ready.popleft(), error)
        self._ready.discard(state)
        self._lingered.discard(state)

    # --- the sender ---------------------------------------------------------------------------

    def _drain_soon(self, delay: float = 0.0) -> None:
        at = self.reactor.seconds() + delay
        call = self._drain_call
        if call is not None:
            if call.active() and self._wakeup_at <= at:
                return
            if call.active():
                call.cancel()
        self._wakeup_at = at
        self._drain_call = self.reactor.callLater(delay, self._drain_now)

    def _drain_now(self) -> None:
        """Send what can be sent: per leader, requests of one batch per partition."""
        if self._drain_call is not None:
            if self._drain_call.active():
                self._drain_call.cancel()
            self._drain_call = None
        txn = self._txn
        if txn is None and self.enable_idempotence and (self.producer_id < 0 or self._bump_epoch):
            self._init_producer_id()
            return
        if txn is not None and self.producer_id < 0:
            return  # nothing was accepted before init_transactions
        if self._lingered:
            self._seal_lingered()
        now = self.reactor.seconds()
        by_node: dict[int, list[_PartitionState]] = {}
        wakeup = None
        need_metadata = False
        leader_for = self.client.leader_for
        new_partitions: list[tuple[str, int]] = []  # to add to the transaction first
        for state in list(self._ready):
            ready = state.ready
            while ready and not ready[0].attempts and self._expired(ready[0], now):
                self._fail(ready.popleft(), KafkaTimeoutError(
                    f"expiring records of {state.topic}-{state.partition}: {self.delivery_timeout_ms} ms"
                    " passed since the batch was opened"))
            if not ready:
                self._ready.discard(state)
                continue
            if self._hold_partitions and state.in_flight:
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
                    self._fail(ready.popleft(), KafkaTimeoutError(
                        f"expiring records of {state.topic}-{state.partition}: no leader within"
                        f" {self.delivery_timeout_ms} ms"))
                    if not ready:
                        self._ready.discard(state)
                continue
            nodes = by_node.get(leader)
            if nodes is None:
                by_node[leader] = [state]
            else:
                nodes.append(state)
        for node, states in by_node.items():
            while states and self._in_flight.get(node, 0) < self.max_in_flight:
                states = self._send_request(node, states, now)
        if new_partitions:
            txn.add_partitions(new_partitions)
        if need_metadata:
            backoff = self.retry_backoff_ms / 1000.0
            if now - self._refreshed_at >= backoff:
                self.client.invalidate()
                self._refresh_metadata()
            wakeup = now + backoff if wakeup is None else min(wakeup, now + backoff)
        if wakeup is not None:
            self._drain_soon(max(0.0, wakeup - now))

    def _expired(self, batch: _Batch, now: float) -> bool:
        return (now - batch.created) * 1000 >= self.delivery_timeout_ms

    def _encode(self, batch: _Batch) -> bytes:
        encoded = batch.encoded
        if encoded is None or (self.enable_idempotence and batch.epoch != self.producer_epoch):
            if batch.simple:
                records = batch.records
                if None not in records:
                    if self.enable_idempotence:
                        state = batch.state
                        encoded = encode_value_batch(records, batch.base_ts, self.compression, self.producer_id,
                                                     self.producer_epoch, state.next_sequence,
                                                     self._txn is not None)
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
                                       is_transactional=self._txn is not None)
                state.next_sequence = (state.next_sequence + len(records)) & 0x7FFFFFFF
                batch.epoch = self.producer_epoch
            else:
                encoded = encode_batch(records, compression=self.compression)
            batch.encoded = encoded
        return encoded

    def _send_request(self, node: int, states: list[_PartitionState], now: float) -> list[_PartitionState]:
        """Send one Produce request to C{node}; return the partitions still holding sendable batches."""
        topics: dict[str, list[tuple[int, bytes]]] = {}
        batches: dict[tuple[str, int], _Batch] = {}
        size = 64
        left: list[_PartitionState] = []
        for i, state in enumerate(states):
            batch = state.ready[0]
            try:
                data = self._encode(batch)
            except Exception as e:  # e.g. a value that is not bytes
                state.ready.popleft()
                self._fail(batch, kafka_error(ErrorCode.invalid_record, f"cannot encode batch: {e}"))
                if state.ready:
                    left.append(state)
                else:
                    self._ready.discard(state)
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
                if not self._hold_partitions and state.ready[0].retry_at <= now:
                    left.append(state)
            else:
                self._ready.discard(state)
        if not batches:
            return left
        body = ProduceBody(self.acks, self.request_timeout_ms, list(topics.items()), self.transactional_id)
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        d = self.client.request(node, _API_PRODUCE, body, expect_response=self.acks != 0)
        d.addCallbacks(self._handle_response, self._handle_request_failure,
                       callbackArgs=(node, batches), errbackArgs=(node, batches))
        d.addErrback(self._log_bug)
        return left

    def _cannot_send(self, state: _PartitionState) -> bool:
        """Whether a batch of C{state} sealed now would wait: sealed batches ahead of it, or no request slot."""
        if state.ready or (self._hold_partitions and state.in_flight):
            return True
        leader = self.client.leader_for(state.topic, state.partition)
        return leader >= 0 and self._in_flight.get(leader, 0) >= self.max_in_flight

    def _request_done(self, node: int) -> None:
        self._in_flight[node] -= 1
        if self._ready or self._lingered:  # (the drain seals lingered batches that can go)
            self._drain_soon()

    def _seal_lingered(self) -> None:
        """Seal the lingered batches that can be sent now."""
        for state in list(self._lingered):
            batch = state.open
            if batch is None:
                self._lingered.discard(state)
            elif not self._cannot_send(state):
                self._seal(state, batch)

    def _handle_response(self, response: Any, node: int, batches: dict[tuple[str, int], _Batch]) -> None:
        self._request_done(node)
        if response is None:  # acks=0
            for batch in batches.values():
                batch.state.in_flight -= 1
                self._complete(batch, -1, -1)
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
                    self._complete(batch, p.base_offset, _ms(p.log_append_time))
                else:
                    message = getattr(p, "error_message", None)
                    error = kafka_error(ErrorCode(int(code)), f"Produce to {name}-{p.index}: {ErrorCode(int(code)).name}"
                                        + (f": {message}" if message else ""))
                    self._retry_or_fail(batch, error, ErrorCode(int(code)))
        for batch in batches.values():  # the broker left them out
            batch.state.in_flight -= 1
            self._retry_or_fail(batch, kafka_error(ErrorCode.unknown_server_error, "partition missing from response"),
                                ErrorCode.network_exception)

    def _handle_request_failure(self, failure: Failure, node: int, batches: dict[tuple[str, int], _Batch]) -> None:
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

    def _retry_or_fail(self, batch: _Batch, error: KafkaError, code: ErrorCode) -> None:
        now = self.reactor.seconds()
        # Kafka's retriable errors (NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR, ...) and lost connections
        retriable = getattr(code, "retriable", False) or code in RETRIABLE_METADATA_ERRORS or isinstance(
            error, (BrokerConnectionError, RequestTimedOutError))
        if self.enable_idempotence and code in (ErrorCode.out_of_order_sequence_number,
                                                ErrorCode.unknown_producer_id, ErrorCode.invalid_producer_epoch,
                                                ErrorCode.producer_fenced, ErrorCode.invalid_txn_state,
                                                ErrorCode.transactional_id_authorization_failed):
            retriable = False
        if (retriable and batch.attempts < self.retries and not self._closed
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
            self._ready.add(state)
            if code in RETRIABLE_METADATA_ERRORS or isinstance(error, BrokerConnectionError):
                self.client.invalidate()
                self._refresh_metadata()
            self._drain_soon(self.retry_backoff_ms / 1000.0)
            return
        if retriable and (now - batch.created) * 1000 + self.retry_backoff_ms >= self.delivery_timeout_ms:
            error = KafkaTimeoutError(f"expiring records of {batch.topic}-{batch.partition}:"
                                      f" {self.delivery_timeout_ms} ms passed since the batch was opened"
                                      f" (last error: {error})")
        self._fail(batch, error)

    def _complete(self, batch: _Batch, base_offset: int, log_append_time_ms: int) -> None:
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
            self._deliver_records(batch, base_offset, log_append_time_ms)
        self._fire_waiters(batch)

    def _deliver_records(self, batch: _Batch, base_offset: int, log_append_time_ms: int) -> None:
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

    def _fail(self, batch: _Batch, error: Exception) -> None:
        self._finish(batch)
        if self._txn is not None:
            self._txn.fail(error)  # the transaction can only abort now (or the producer is fenced)
            if batch.encoded is not None:
                self._txn.epoch_bump_required = True  # the sequence has a gap: a new epoch after the abort
        elif self.enable_idempotence and batch.encoded is not None:
            self._bump_epoch = True  # the partition's sequence has a gap now
        if batch.groups is not None:
            for group in batch.groups:
                group.one_done(error)
        if batch.callbacks is not None:
            for on_delivery in batch.callbacks:
                if on_delivery is not None:
                    _call_on_delivery(on_delivery, None, error)
        failure = Failure(error)
        for d in batch.deferreds:
            d.__dict__.pop("_kafkatw_held", None)
            d.errback(failure)
        self._fire_waiters(batch)

    def _finish(self, batch: _Batch) -> None:
        batch.done = True
        self._incomplete.discard(batch)
        self._buffered -= batch.size - _BATCH_OVERHEAD
        if self._waiting:
            self._process_waiting()
        elif self._ready_waiters:
            self._fire_ready()

    def _fire_waiters(self, batch: _Batch) -> None:
        if batch.waiters:
            for waiter in batch.waiters:
                waiter.one_done()
            batch.waiters = None

    def _log_bug(self, failure: Failure) -> None:
        _log.failure("producer bug while handling a Produce response", failure)

    # --- metadata ---------------------------------------------------------------------------

    def _refresh_metadata(self) -> None:
        if self._refreshing or self._closed:
            return
        self._refreshing = True
        topics = set(self._topics)
        topics.update(entry[0] for entry in self._waiting)
        d = defer.ensureDeferred(self.client.ensure_metadata(sorted(topics)))
        d.addBoth(self._metadata_done)

    def _metadata_done(self, result: Any) -> None:
        self._refreshing = False
        self._refreshed_at = self.reactor.seconds()
        if isinstance(result, Failure):
            _log.warn("metadata refresh failed: {error}", error=result.value)
            self.client.invalidate()
        for name in {entry[0] for entry in self._waiting} | set(self._topics):
            partitions = self.client.partitions_for(name)
            if not partitions:
                continue
            tstate = self._topics.get(name)
            if tstate is None:
                tstate = self._topics[name] = _TopicState(name)
            for p in range(len(tstate.partitions), max(partitions) + 1):
                tstate.partitions.append(_PartitionState(name, p))
        if self._waiting:
            self._process_waiting()
        retry = isinstance(result, Failure) or any(entry[0] not in self._topics for entry in self._waiting)
        if retry and not self._closed:
            self.reactor.callLater(self.retry_backoff_ms / 1000.0, self._refresh_metadata)
        if self._ready:
            self._drain_soon()

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
            self._drain_soon(self.retry_backoff_ms / 1000.0)
            return
        new_epoch = (int(result.producer_id), int(result.producer_epoch))
        if new_epoch != (self.producer_id, self.producer_epoch) or self._bump_epoch:
            for tstate in self._topics.values():
                for state in tstate.partitions:
                    state.next_sequence = 0
        self.producer_id, self.producer_epoch = new_epoch
        self._bump_epoch = False
        self._drain_soon()


def _add_callback(batch: _Batch, on_delivery: Any) -> None:
    """Record the on_delivery callable of the record just appended to C{batch} (None: it has none)."""
    callbacks = batch.callbacks
    if callbacks is None:
        callbacks = batch.callbacks = [None] * (len(batch.deferreds) - 1)
    callbacks.append(on_delivery)


def _group_one_done(result: Any, group: _Group) -> None:
    group.one_done(result.value if isinstance(result, Failure) else None)


_first = itemgetter(0)
_second = itemgetter(1)
_third = itemgetter(2)


def _third_or_empty(record: tuple) -> Any:
    return record[2] or ()


def _on_delivery_failed(error: Exception, topic: str, partition: int) -> None:
    """What the compiled completion loop does with an Exception an C{on_delivery} raised: as the Python loop."""
    _log.failure("on_delivery callback of a record to {topic}-{partition} failed", Failure(error),
                 topic=topic, partition=partition)


#: Producer.send as defined above: the one the compiled hot path stands in for.
_PYTHON_SEND = Producer.send

#: The compiled loop of Producer._deliver_records (None: the Python loop runs).
_complete_records = getattr(_records._speedups, "complete_records", None)

#: The callbacks of a batch without any (never changed: the completion loop only reads it).
_NO_CALLBACKS: list = []


def _call_on_delivery(on_delivery: Any, metadata: Any, error: Exception | None) -> None:
    try:
        on_delivery(metadata, error)
    except Exception:
        _log.failure("on_delivery callback failed")


def _fail_one(d: Deferred, on_delivery: Any, error: Exception) -> None:
    """Fail one record that never reached a batch."""
    if on_delivery is not None:
        _call_on_delivery(on_delivery, None, error)
    d.errback(error)


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"record keys and values are bytes, str or None, not {type(value).__name__}")


def _ms(value: Any) -> int:
    """A kio datetime_i64 (None or a datetime) as ms since the epoch (-1: none)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
