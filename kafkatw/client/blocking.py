"""
Blocking facade: L{BlockingProducer}, L{BlockingConsumer} and
L{BlockingAdminClient} for code that has no reactor — scripts, the command
line, the Spark driver and executors (docs/design.md: Clients).

They drive the Twisted L{Producer}, L{Consumer} and L{AdminClient} on a reactor that runs in a
background thread through crochet's L{crochet.EventLoop}: every call hops into
the reactor thread and the calling thread waits for the result.

One reactor thread per process, started lazily
==============================================

Nothing starts at import.  The first blocking client made in a process starts
a reactor thread I{for that process} (checked with C{os.getpid()}), so a
process forked from one that already had it — C{multiprocessing} with the
C{fork} start method, Spark's forked Python workers — starts its own.

This is why the facade does not use crochet's global C{crochet.setup()}.
crochet 2.1 registers no fork handlers: after C{fork()} the child inherits
crochet's "set up" flag and the global reactor object (marked running, its
epoll descriptor and waker pipe shared with the parent) but not the reactor
thread, so C{crochet.setup()} is a no-op in the child and every
C{run_in_reactor} call waits forever (checked: the call times out in the child
while the parent's reactor keeps working).  Instead each process gets a private
reactor instance (same class as Twisted's default, not installed as
C{twisted.internet.reactor}, not registered as Twisted's I/O thread) run by a
private crochet C{EventLoop}; kafkatw's clients take their reactor as a
parameter, so they need no global one.  This also leaves an application's own
C{crochet.setup()} or reactor alone.

A client object belongs to the process that made it: using one made before a
fork in the forked child raises L{WrongProcessError} (its sockets are shared
with the parent; make a new client in the child).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any, Callable, Iterable, Iterator

import crochet
from twisted.internet import defer
from twisted.python.failure import Failure

from ..errors import KafkaError
from .admin import AdminClient
from .clock import use_monotonic_clock
from .consumer import Consumer, ConsumerRecord
from .producer import KafkaTimeoutError, Producer, RecordMetadata

__all__ = ["BlockingProducer", "BlockingConsumer", "BlockingAdminClient", "FutureRecordMetadata", "WrongProcessError",
           "call_with_zookeeper", "reactor_thread"]


def _handled(failure: Failure) -> None:
    """An errback for a record's Deferred whose failure a L{FutureRecordMetadata} reports."""


class WrongProcessError(RuntimeError):
    """A blocking client was used in a process forked after it was made."""


# --- the per-process reactor thread ------------------------------------------------------


def _new_reactor() -> Any:
    try:
        from twisted.internet.epollreactor import EPollReactor as reactor_class
    except ImportError:  # pragma: no cover - not Linux
        from twisted.internet.pollreactor import PollReactor as reactor_class
    reactor = reactor_class()
    reactor._registerAsIOThread = False  # leave Twisted's notion of "the" I/O thread alone
    use_monotonic_clock(reactor)  # the clients' timers unmoved by a step of the machine's clock
    return reactor


def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    result = function(*args, **kwargs)
    if hasattr(result, "__await__") and not isinstance(result, defer.Deferred):
        return defer.ensureDeferred(result)
    return result


class _ReactorThread:
    """A private reactor running in a thread of this process, via crochet."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.reactor = _new_reactor()
        self._at_shutdown: list[Callable[[], Any]] = []
        main = threading.main_thread()
        watchdog = threading.Thread(target=self._watch, args=(main,), name="kafkatw-reactor-watchdog", daemon=True)
        self.event_loop = crochet.EventLoop(lambda: self.reactor, self._register, None, watchdog, lambda: None)
        self.event_loop.setup()
        self._run = self.event_loop.run_in_reactor(_call)
        self.ident = self._run(threading.get_ident)._result(60.0)

    def _register(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._at_shutdown.append(lambda: function(*args, **kwargs))

    def _watch(self, main: threading.Thread) -> None:
        # crochet's own watchdog does this: when the main thread ends, stop the
        # (non-daemon) reactor thread so that the interpreter can exit.
        main.join()
        for function in reversed(self._at_shutdown):
            try:
                function()
            except Exception:  # pragma: no cover
                pass

    def call(self, timeout_s: float | None, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """
        Run C{function(*args, **kwargs)} in the reactor thread and wait for
        its result (a Deferred or coroutine is waited for).

        @raise KafkaTimeoutError: no result within C{timeout_s} (the
            operation is cancelled).
        """
        if threading.get_ident() == self.ident:
            raise RuntimeError("the blocking kafkatw clients must not be called in their own reactor thread")
        result = self._run(function, *args, **kwargs)
        # Not EventualResult.wait(): its guard compares the caller with
        # Twisted's *global* I/O thread, which is not this reactor's thread,
        # and which a forked child inherits from a parent that forked from its
        # reactor thread; so the guard above replaces it.
        try:
            value = result._result(timeout_s)
        except crochet.TimeoutError:
            result.cancel()
            raise KafkaTimeoutError(f"{getattr(function, '__name__', function)} took longer than {timeout_s} s") \
                from None
        if isinstance(value, Failure):
            value.raiseException()
        return value

    def call_soon(self, function: Callable[..., Any], *args: Any) -> None:
        """Run C{function(*args)} in the reactor thread; do not wait."""
        self.reactor.callFromThread(function, *args)


_reactor_thread: _ReactorThread | None = None
_lock = threading.Lock()
#: this process's id, kept by the fork handler: a client checks it on every call (a getpid is a system call)
_pid = os.getpid()


def _after_fork_in_child() -> None:
    # A lock held by another thread at fork time would stay locked for ever.
    global _lock, _pid
    _lock = threading.Lock()
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def reactor_thread() -> _ReactorThread:
    """This process's reactor thread, started on first use."""
    global _reactor_thread
    current = _reactor_thread
    if current is not None and current.pid == os.getpid():
        return current
    with _lock:
        current = _reactor_thread
        if current is None or current.pid != os.getpid():
            current = _reactor_thread = _ReactorThread()
        return current


def call_with_zookeeper(fn: Callable[..., Any], zookeeper_connect: str, timeout_s: float, *args: Any) -> Any:
    """
    Run the coroutine function C{fn(zk, *args)} with a fresh ZooKeeper session
    (a L{kafkatw.zookeeper.bridge.ZooKeeperClient} to C{zookeeper_connect},
    closed afterwards) on this process's reactor thread, and wait for its
    result: the command-line tools' ZooKeeper modes.

    @param timeout_s: how long connecting may take (s); the whole call waits
        at most 5 s more.
    @raise KafkaTimeoutError: the call took longer.
    """
    from ..zookeeper.bridge import ZooKeeperClient

    thread = reactor_thread()

    async def session() -> Any:
        zk = ZooKeeperClient(zookeeper_connect, thread.reactor, session_timeout_ms=10000,
                             connection_timeout_ms=int(timeout_s * 1000))
        await zk.start()
        try:
            return await fn(zk, *args)
        finally:
            await zk.stop()

    return thread.call(timeout_s + 5, session)


class _Bound:
    """Base of the blocking clients: the reactor thread of the creating process."""

    def __init__(self) -> None:
        self._thread = reactor_thread()

    def _check_process(self) -> _ReactorThread:
        if self._thread.pid != _pid:
            raise WrongProcessError(
                f"this {type(self).__name__} was made in process {self._thread.pid}; a forked process"
                f" ({os.getpid()}) must make its own")
        return self._thread


# --- producer --------------------------------------------------------------------------


class FutureRecordMetadata:
    """
    The outcome of L{BlockingProducer.send}: L{get} waits for it.

    It is also the record's C{on_delivery} callable (L{Producer.send}), called
    in the reactor thread: no Deferred machinery runs per record.
    """

    __slots__ = ("_owner", "_done", "_value", "_error", "_deferred")

    def __init__(self, owner: "BlockingProducer") -> None:
        self._owner = owner
        self._done = False
        self._value: RecordMetadata | None = None
        self._error: BaseException | None = None
        #: the record's Deferred from L{Producer.send}, whose failure this future reports
        self._deferred: defer.Deferred | None = None

    def __call__(self, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        # on_delivery: called just before the record's Deferred fires
        self._value = metadata
        if error is None:
            self._deferred = None  # nobody else holds it: the producer leaves it unfired
        else:
            self._error = error
            if self._deferred is not None:
                self._deferred.addErrback(_handled)
        self._done = True
        owner = self._owner
        if owner._waiting:  # read after _done is set: a waiter counted later sees _done (_wait_for)
            with owner._cond:
                owner._cond.notify_all()

    def done(self) -> bool:
        return self._done

    def get(self, timeout_s: float | None = None) -> RecordMetadata:
        """
        @return: the record's L{RecordMetadata}.
        @raise KafkaError: the send failed.
        @raise KafkaTimeoutError: no outcome within C{timeout_s}.
        """
        if not self._done:
            self._owner._wait_for(self, timeout_s)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def exception(self, timeout_s: float | None = None) -> BaseException | None:
        """The send's error (None when it succeeded), waiting up to C{timeout_s}."""
        if not self._done:
            self._owner._wait_for(self, timeout_s)
        return self._error


class BlockingProducer(_Bound):
    """
    L{Producer} for threads without a reactor.  Takes the same options.

    L{send} returns at once with a L{FutureRecordMetadata}: sends are handed
    to the reactor thread in bulk (one wake-up per burst, not per record).
    When the producer's C{buffer_memory} is full, L{send} blocks.

    @param timeout_s: default wait for L{flush} and L{close} (s; None: no limit).
    """

    _MAX_QUEUED = 10000

    def __init__(self, bootstrap_servers: str | list[str] | None = None, *, timeout_s: float | None = None,
                 **options: Any) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        thread = self._thread
        self._producer: Producer = thread.call(60.0, lambda: Producer(thread.reactor, bootstrap_servers, **options))
        self._queue: collections.deque = collections.deque()
        self._scheduled = False
        self._blocked = False  # the Producer asked us to wait (buffer_memory)
        self._cond = threading.Condition()
        self._waiting = 0  # threads in _wait_for
        self._closed = False

    # called in the user's thread

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
             headers: list[tuple[str, bytes | None]] | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Send one record (arguments as L{Producer.send}); see L{FutureRecordMetadata}."""
        thread = self._check_process()
        if self._closed:
            raise KafkaError("producer closed")
        future = FutureRecordMetadata(self)
        queue = self._queue
        if len(queue) >= self._MAX_QUEUED:
            with self._cond:
                while len(queue) >= self._MAX_QUEUED // 2:
                    self._cond.wait(1.0)
        queue.append((future, (topic, value, key, partition, headers, timestamp_ms)))
        if not self._scheduled:
            self._scheduled = True
            thread.call_soon(self._drain)
        return future

    def send_and_wait(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
                      headers: list[tuple[str, bytes | None]] | None = None, timestamp_ms: int | None = None,
                      timeout_s: float | None = None) -> RecordMetadata:
        """Send one record and wait for its acknowledgement."""
        return self.send(topic, value, key, partition, headers, timestamp_ms).get(timeout_s)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record sent so far is acknowledged or has failed."""
        thread = self._check_process()
        thread.call(timeout_s if timeout_s is not None else self.timeout_s, self._flush_in_reactor)

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is pending, wait for it (up to C{timeout_s}), and close."""
        thread = self._check_process()
        if self._closed:
            return
        self._closed = True
        thread.call(timeout_s if timeout_s is not None else self.timeout_s, self._close_in_reactor)

    # transactions (KIP-98): the Producer's calls, waited for

    def init_transactions(self, timeout_s: float | None = None) -> None:
        """L{Producer.init_transactions}, waited for."""
        self._check_process().call(timeout_s if timeout_s is not None else self.timeout_s,
                                   self._producer.init_transactions)

    def begin_transaction(self) -> None:
        """L{Producer.begin_transaction}."""
        self._check_process().call(self.timeout_s, self._producer.begin_transaction)

    def send_offsets_to_transaction(self, offsets: dict[tuple[str, int], Any], group_metadata: Any,
                                    timeout_s: float | None = None) -> None:
        """L{Producer.send_offsets_to_transaction}, waited for."""
        self._check_process().call(timeout_s if timeout_s is not None else self.timeout_s,
                                   self._producer.send_offsets_to_transaction, offsets, group_metadata)

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Hand the queued sends over, then L{Producer.commit_transaction}, waited for."""
        self._check_process().call(timeout_s if timeout_s is not None else self.timeout_s,
                                   self._end_in_reactor, True)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Hand the queued sends over, then L{Producer.abort_transaction}, waited for."""
        self._check_process().call(timeout_s if timeout_s is not None else self.timeout_s,
                                   self._end_in_reactor, False)

    def __enter__(self) -> "BlockingProducer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _wait_for(self, future: FutureRecordMetadata, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            # counted before _done is read: a completion that missed the count set _done before
            self._waiting += 1
            try:
                while not future._done:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise KafkaTimeoutError(f"no acknowledgement within {timeout_s} s")
                    self._cond.wait(remaining)
            finally:
                self._waiting -= 1

    # called in the reactor thread

    def _drain(self) -> None:
        self._scheduled = False
        if self._blocked:
            return
        queue = self._queue
        send = self._producer.send
        n = 0
        while True:
            try:
                future, args = queue.popleft()
            except IndexError:
                break
            n += 1
            topic, value, key, partition, headers, timestamp_ms = args
            try:
                if key is None and partition is None and headers is None and timestamp_ms is None:
                    d = send(topic, value, on_delivery=future)  # the form send's compiled hot path takes
                else:
                    d = send(topic, value, key, partition, headers, timestamp_ms, on_delivery=future)
            except Exception as e:
                future(None, e)
                continue
            if future._error is not None:  # failed at once: its failure is the future's
                d.addErrback(_handled)
            else:
                future._deferred = d
            if n % 256 == 0:
                ready = self._producer.ready()
                if not ready.called:
                    self._blocked = True
                    ready.addBoth(self._unblock)
                    break
        if n >= self._MAX_QUEUED // 2 or self._blocked:
            with self._cond:
                self._cond.notify_all()

    def _unblock(self, _: Any) -> None:
        self._blocked = False
        self._drain()

    async def _hand_over(self) -> None:
        """
        Hand every queued send to the producer.  While its C{buffer_memory}
        is full, what it holds is flushed: sent now, not C{linger_ms} after
        its batch opened, since the queued sends wait for that room.
        """
        while self._queue or self._blocked:
            if self._blocked:
                self._producer.flush()
                await self._producer.ready()
            self._drain()

    async def _flush_in_reactor(self) -> None:
        await self._hand_over()
        await self._producer.flush()

    async def _end_in_reactor(self, commit: bool) -> None:
        await self._hand_over()
        if commit:
            await self._producer.commit_transaction()
        else:
            await self._producer.abort_transaction()

    async def _close_in_reactor(self) -> None:
        await self._flush_in_reactor()
        await self._producer.close()


# --- consumer --------------------------------------------------------------------------


class BlockingConsumer(_Bound):
    """
    L{Consumer} for threads without a reactor.  Takes the same options (a
    C{group_id} for L{subscribe}, L{commit}, L{committed} and
    L{group_metadata}: a member of a broker-coordinated consumer group), plus:

    @param consumer_timeout_ms: iteration stops after this long without a
        record (ms; None: it never stops by itself), as kafka-python's.
    @param timeout_s: default wait for offset look-ups (s; None: the
        consumer's C{default_api_timeout_ms} plus a margin).
    """

    def __init__(self, bootstrap_servers: str | list[str] | None = None, *,
                 consumer_timeout_ms: int | None = None, timeout_s: float | None = None, **options: Any) -> None:
        super().__init__()
        thread = self._thread
        self._consumer: Consumer = thread.call(60.0, lambda: Consumer(thread.reactor, bootstrap_servers, **options))
        self.consumer_timeout_ms = consumer_timeout_ms
        self.timeout_s = timeout_s if timeout_s is not None else self._consumer.default_api_timeout_ms / 1000.0 + 5
        self._margin_s = self._consumer.request_timeout_ms / 1000.0
        self._records: list[ConsumerRecord] = []
        self._index = 0
        self._polled_metadata: Any = None

    def _call(self, function: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> Any:
        thread = self._check_process()
        return thread.call(self.timeout_s if timeout_s is None else timeout_s, function, *args)

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._call(self._consumer.assign, list(partitions))

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of C{topic}; see L{Consumer.partitions_for}."""
        return self._call(self._consumer.partitions_for, topic)

    def assignment(self) -> set[tuple[str, int]]:
        return self._call(self._consumer.assignment)

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        self._records, self._index = [], 0
        self._call(self._consumer.seek, tp, offset)

    def seek_to_beginning(self, *tps: tuple[str, int]) -> None:
        self._records, self._index = [], 0
        self._call(self._consumer.seek_to_beginning, *tps)

    def seek_to_end(self, *tps: tuple[str, int]) -> None:
        self._records, self._index = [], 0
        self._call(self._consumer.seek_to_end, *tps)

    def position(self, tp: tuple[str, int]) -> int:
        """The offset of the next record for C{tp} (records buffered in the iterator count as returned)."""
        return self._call(self._consumer.position, tp)

    def highwater(self, tp: tuple[str, int]) -> int:
        return self._call(self._consumer.highwater, tp)

    def offsets_for_times(self, timestamps: dict[tuple[str, int], int]) -> dict:
        return self._call(self._consumer.offsets_for_times, timestamps)

    def beginning_offsets(self, tps: Iterable[tuple[str, int]]) -> dict:
        return self._call(self._consumer.beginning_offsets, list(tps))

    def end_offsets(self, tps: Iterable[tuple[str, int]]) -> dict:
        return self._call(self._consumer.end_offsets, list(tps))

    def pause(self, *tps: tuple[str, int]) -> None:
        self._call(self._consumer.pause, *tps)

    def resume(self, *tps: tuple[str, int]) -> None:
        self._call(self._consumer.resume, *tps)

    def paused(self) -> set[tuple[str, int]]:
        return self._call(self._consumer.paused)

    # --- the consumer group (group_id=...): see Consumer.subscribe ---

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        """
        Join the consumer group C{group_id} subscribed to C{topics}
        (L{Consumer.subscribe}).  The C{listener}'s methods run in the
        reactor thread: they must not call this blocking consumer.
        """
        self._call(self._consumer.subscribe, list(topics), listener)

    def subscription(self) -> set[str]:
        return self._call(self._consumer.subscription)

    def wait_for_assignment(self, timeout_s: float | None = None) -> set[tuple[str, int]]:
        """Wait until the group is stable; this member's partitions (L{Consumer.wait_for_assignment})."""
        return self._call(self._consumer.wait_for_assignment, timeout_s=timeout_s)

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> dict[tuple[str, int], int]:
        """
        Commit offsets to the group and wait (L{Consumer.commit}); by default the
        positions, records held by the iterator not yet returned excepted.
        """
        if offsets is None and self._index < len(self._records):
            offsets = self._call(self._consumer._positions)
            for record in self._records[self._index:]:
                tp = (record.topic, record.partition)
                offsets[tp] = min(offsets.get(tp, record.offset), record.offset)
        return self._call(self._consumer.commit, offsets)

    def commit_async(self, offsets: dict[tuple[str, int], int] | None = None, callback: Any = None) -> None:
        """L{Consumer.commit_async}: do not wait; C{callback} runs in the reactor thread."""
        self._call(lambda: (self._consumer.commit_async(offsets, callback), None)[1])

    def committed(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return self._call(self._consumer.committed, list(partitions))

    def group_metadata(self) -> Any:
        """
        L{Consumer.group_metadata} as it was when the last poll returned
        records (before any poll: as it is now), for
        L{BlockingProducer.send_offsets_to_transaction}: the group's
        rebalances run in the reactor thread, and a transaction of records
        polled before a rebalance must carry their generation so that the
        coordinator fences it (KIP-447), as Kafka's consumer, whose
        rebalances happen inside C{poll}, gives.
        """
        if self._polled_metadata is not None:
            return self._polled_metadata
        return self._call(self._consumer.group_metadata)

    def poll(self, timeout_ms: int | None = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """
        Records, waiting up to C{timeout_ms} (ms; None: until some arrive) for
        some: see L{Consumer.poll}.
        Records still held by the iterator come first.
        """
        if self._index < len(self._records):
            limit = max_records or self._consumer.max_poll_records
            out = self._records[self._index:self._index + limit]
            self._index += len(out)
            return out
        return self._call(self._poll, timeout_ms, max_records,
                          timeout_s=None if timeout_ms is None else timeout_ms / 1000.0 + self._margin_s)

    def _poll(self, timeout_ms: int | None, max_records: int | None) -> Any:
        """In the reactor thread: a poll, noting the group's metadata when its records are returned."""
        consumer = self._consumer

        def returned(records: list[ConsumerRecord]) -> list[ConsumerRecord]:
            if consumer.coordinator is not None and records:
                self._polled_metadata = consumer.group_metadata()
            return records

        return consumer.poll(timeout_ms, max_records).addCallback(returned)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        index = self._index
        if index < len(self._records):
            self._index = index + 1
            return self._records[index]
        started = time.monotonic()
        limit = self.consumer_timeout_ms
        while True:
            wait_ms = 1000 if limit is None else max(0, min(1000, limit - int((time.monotonic() - started) * 1000)))
            records = self._call(self._poll, wait_ms, None, timeout_s=wait_ms / 1000.0 + self._margin_s)
            if records:
                self._records = records
                self._index = 1
                return records[0]
            if self._consumer._closed or (limit is not None and (time.monotonic() - started) * 1000 >= limit):
                raise StopIteration

    def close(self, timeout_s: float | None = None) -> None:
        thread = self._check_process()
        thread.call(timeout_s if timeout_s is not None else self.timeout_s, self._consumer.close)

    def __enter__(self) -> "BlockingConsumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()



# --- admin client ------------------------------------------------------------------------


class BlockingAdminClient(_Bound):
    """
    L{AdminClient} for threads without a reactor.  Takes the same options
    (C{client_id}, C{request_timeout_ms}, C{default_api_timeout_ms},
    C{retry_backoff_ms}); each method takes the same arguments as the
    L{AdminClient} method of that name and returns what its Deferred fires
    with, or raises its error.

        with BlockingAdminClient("localhost:9092") as admin:
            errors = admin.create_topics([NewTopic("t", 3, 3)])
            for name, topic in admin.describe_topics(["t"]).items():
                print(name, [(p.leader, p.isr) for p in topic.partitions])

    @param timeout_s: the longest wait for one call (s; default: the admin
        client's C{default_api_timeout_ms} plus its C{request_timeout_ms}, so
        that the operation's own timeout fires first).
    """

    def __init__(self, bootstrap_servers: str | list[str] | None = None, *, timeout_s: float | None = None,
                 **options: Any) -> None:
        super().__init__()
        thread = self._thread
        self._admin: AdminClient = thread.call(60.0, lambda: AdminClient(thread.reactor, bootstrap_servers, **options))
        self.timeout_s = timeout_s if timeout_s is not None else \
            (self._admin.default_api_timeout_ms + self._admin.request_timeout_ms) / 1000.0 + 5
        self._closed = False

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        thread = self._check_process()
        timeout_ms = kwargs.get("timeout_ms")
        timeout_s = self.timeout_s
        if timeout_ms is not None:
            timeout_s = max(timeout_s, (timeout_ms + self._admin.request_timeout_ms) / 1000.0 + 5)
        return thread.call(timeout_s, function, *args, **kwargs)

    def metadata(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(self._admin.metadata, *args, **kwargs)

    def list_topics(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._call(self._admin.list_topics, *args, **kwargs)

    def describe_topics(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.describe_topics, *args, **kwargs)

    def describe_cluster(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(self._admin.describe_cluster, *args, **kwargs)

    def create_topics(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.create_topics, *args, **kwargs)

    def delete_topics(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.delete_topics, *args, **kwargs)

    def create_partitions(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.create_partitions, *args, **kwargs)

    def describe_configs(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.describe_configs, *args, **kwargs)

    def incremental_alter_configs(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.incremental_alter_configs, *args, **kwargs)

    def create_acls(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.create_acls, *args, **kwargs)

    def describe_acls(self, *args: Any, **kwargs: Any) -> list:
        return self._call(self._admin.describe_acls, *args, **kwargs)

    def delete_acls(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.delete_acls, *args, **kwargs)

    def list_offsets(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.list_offsets, *args, **kwargs)

    def describe_user_scram_credentials(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.describe_user_scram_credentials, *args, **kwargs)

    def alter_user_scram_credentials(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.alter_user_scram_credentials, *args, **kwargs)

    def describe_client_quotas(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.describe_client_quotas, *args, **kwargs)

    def alter_client_quotas(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.alter_client_quotas, *args, **kwargs)

    def elect_leaders(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.elect_leaders, *args, **kwargs)

    def alter_partition_reassignments(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.alter_partition_reassignments, *args, **kwargs)

    def list_partition_reassignments(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.list_partition_reassignments, *args, **kwargs)

    def find_coordinator(self, *args: Any, **kwargs: Any) -> int:
        return self._call(self._admin.find_coordinator, *args, **kwargs)

    def forget_coordinator(self, group_id: str) -> None:
        self._call(self._admin.forget_coordinator, group_id)

    def coordinator_request(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(self._admin.coordinator_request, *args, **kwargs)

    def list_consumer_groups(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._call(self._admin.list_consumer_groups, *args, **kwargs)

    def delete_records(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.delete_records, *args, **kwargs)

    def describe_log_dirs(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.describe_log_dirs, *args, **kwargs)

    def alter_replica_log_dirs(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.alter_replica_log_dirs, *args, **kwargs)

    def delete_consumer_group_offsets(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.delete_consumer_group_offsets, *args, **kwargs)

    def list_transactions(self, *args: Any, **kwargs: Any) -> list:
        return self._call(self._admin.list_transactions, *args, **kwargs)

    def describe_transactions(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.describe_transactions, *args, **kwargs)

    def describe_producers(self, *args: Any, **kwargs: Any) -> dict:
        return self._call(self._admin.describe_producers, *args, **kwargs)

    def abort_transaction(self, *args: Any, **kwargs: Any) -> None:
        return self._call(self._admin.abort_transaction, *args, **kwargs)

    def send(self, *args: Any, **kwargs: Any) -> Any:
        """A raw request to one broker; see L{AdminClient.send}."""
        return self._call(self._admin.send, *args, **kwargs)

    def close(self, timeout_s: float | None = None) -> None:
        """Close the connections."""
        thread = self._check_process()
        if self._closed:
            return
        self._closed = True
        thread.call(timeout_s if timeout_s is not None else 30.0, self._admin.close)

    def __enter__(self) -> "BlockingAdminClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
