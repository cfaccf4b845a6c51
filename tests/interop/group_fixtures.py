"""
What the consumer group interop modules (test_group_members.py,
test_consumer_group_protocol.py) share: group members that count a batch only
once its commit succeeded and read it again when the commit is refused, so
that a test can check every record is counted exactly once across members --
a librdkafka member polling in a thread of its own (L{ConfluentMember}) and a
kafkatw member on the blocking clients' reactor thread (L{TwistedMember}) --
and L{wait_for}.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from twisted.internet import defer

__all__ = ["wait_for", "Counted", "ConfluentMember", "TwistedMember"]


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    """Poll C{predicate} every 50 ms until it is true; C{AssertionError} naming C{what} after C{timeout_s}."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Counted:
    """The (partition, offset)s every member counted, by member name (members of several kinds together)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_member: dict[str, list[tuple[int, int]]] = {}

    def add(self, member: str, records: list[tuple[int, int]]) -> None:
        with self.lock:
            self.by_member.setdefault(member, []).extend(records)

    def everything(self) -> list[tuple[int, int]]:
        with self.lock:
            return sorted(r for rs in self.by_member.values() for r in rs)


class _Arrivals:
    """What both kinds of member record: the records counted and when records arrived."""

    def _init_records(self, name: str, counted: Counted | None) -> None:
        self.name = name
        self.lock = threading.Lock()
        #: C{(partition, offset)} of every record counted (its batch's commit succeeded)
        self.counted: list[tuple[int, int]] = []
        #: C{(monotonic time, partition)} of every record received
        self.arrivals: list[tuple[float, int]] = []
        self._sink = counted

    def _arrived(self, partitions: list[int]) -> None:
        now = time.monotonic()
        with self.lock:
            self.arrivals.extend((now, p) for p in partitions)

    def _count(self, records: list[tuple[int, int]]) -> None:
        with self.lock:
            self.counted.extend(records)
        if self._sink is not None:
            self._sink.add(self.name, records)

    def longest_pause_s(self, start: float, end: float) -> float:
        """The longest time without a record between C{start} and C{end} (monotonic s)."""
        with self.lock:
            times = [start] + [t for t, _ in self.arrivals if start <= t <= end] + [end]
        return max(b - a for a, b in zip(times, times[1:]))


class ConfluentMember(_Arrivals):
    """
    A confluent-kafka (librdkafka) consumer polling in its own thread.  It
    commits each batch synchronously and counts it only when the commit
    succeeded; a refused commit (the group rebalanced: C{REBALANCE_IN_PROGRESS},
    C{STALE_MEMBER_EPOCH}, C{UNKNOWN_MEMBER_ID} ...) is not counted, and the
    member seeks back to the batch's first offsets where the partitions are
    still its own.

    @param config: the consumer's configuration besides C{bootstrap.servers},
        C{group.id}, C{client.id} (C{name}), C{enable.auto.commit=false} and
        C{auto.offset.reset=earliest}.
    @param counted: also count into this, by C{name}.
    @param commit: C{False}: only consume (nothing is committed or counted).
    @param max_records: C{consume}'s C{num_messages}.
    @param poll_s: C{consume}'s timeout (s).
    @param processing_s: how long the application takes over each counted
        batch (s): it calls C{consume} again only after that.
    @ivar assigned: the C{(topic, partition)}s of each assignment, in order.
    @ivar revoked: those of each revocation (or loss: librdkafka calls
        C{on_revoke} for lost partitions when no C{on_lost} is given).
    """

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, config: dict[str, Any] | None = None,
                 counted: Counted | None = None, commit: bool = True, max_records: int = 200,
                 poll_s: float = 0.1, processing_s: float = 0.0) -> None:
        from confluent_kafka import Consumer

        self._init_records(name, counted)
        self.commit = commit
        self.max_records = max_records
        self.poll_s = poll_s
        self.processing_s = processing_s
        self.assigned: list[set[tuple[str, int]]] = []
        self.revoked: list[set[tuple[str, int]]] = []
        self._owned: set[tuple[str, int]] = set()
        self.stopped = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "client.id": name, **(config or {})})

        def on_assign(consumer: Any, partitions: list) -> None:
            with self.lock:
                self.assigned.append({(p.topic, p.partition) for p in partitions})
                self._owned |= self.assigned[-1]

        def on_revoke(consumer: Any, partitions: list) -> None:
            with self.lock:
                self.revoked.append({(p.topic, p.partition) for p in partitions})
                self._owned -= self.revoked[-1]

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        while not self.stopped.is_set():
            messages = [m for m in self.consumer.consume(num_messages=self.max_records, timeout=self.poll_s)
                        if not m.error()]
            if not messages or not self.commit:
                continue
            self._arrived([m.partition() for m in messages])
            offsets: dict[tuple[str, int], int] = {}
            first: dict[tuple[str, int], int] = {}
            for m in messages:
                offsets[(m.topic(), m.partition())] = m.offset() + 1
                first.setdefault((m.topic(), m.partition()), m.offset())
            try:
                self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                     asynchronous=False)
            except KafkaException:
                # refused: not counted; read it again where still ours
                for (t, p), o in first.items():
                    try:
                        self.consumer.seek(TopicPartition(t, p, o))
                    except KafkaException:
                        pass
                continue
            self._count([(m.partition(), m.offset()) for m in messages])
            self.stopped.wait(self.processing_s)

    def owned(self) -> set[int]:
        """The partitions it owns now."""
        with self.lock:
            return {p for _, p in self._owned}

    def close(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        self.thread.join(30)
        self.consumer.close()


class TwistedMember(_Arrivals):
    """
    kafkatw's Twisted consumer (L{kafkatw.client.consumer.Consumer} with a
    C{group_id}) on the blocking clients' reactor thread.  Its loop runs in
    the reactor, so nothing of the group happens between a poll and the
    commit that decides whether its batch counts; it counts a batch as
    L{ConfluentMember} does.

    @param counted: also count into this, by C{name}.
    @param listener: its C{ConsumerRebalanceListener}, or C{None}.
    @param poll_ms: C{poll}'s timeout (ms).
    @param options: the consumer's options besides C{group_id},
        C{client_id} (C{name}), C{enable_auto_commit=False} and
        C{auto_offset_reset="earliest"}.
    """

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, counted: Counted | None = None,
                 listener: Any = None, poll_ms: int = 200, **options: Any) -> None:
        from kafkatw.client.blocking import reactor_thread
        from kafkatw.client.consumer import Consumer

        self._init_records(name, counted)
        self.thread = reactor_thread()
        self.poll_ms = poll_ms
        self.stopped = False

        def make() -> Consumer:
            consumer = Consumer(self.thread.reactor, bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False, client_id=name, **options)
            consumer.subscribe([topic], listener)
            return consumer

        self.consumer: Any = self.thread.call(30, make)
        # poll (the group is joined in poll), commit and count in the reactor until closed
        self.thread.call_soon(lambda: defer.Deferred.fromCoroutine(self._run()))

    async def _run(self) -> None:
        from kafkatw.client import CommitFailedError
        from kafkatw.errors import KafkaError

        consumer = self.consumer
        while not self.stopped:
            try:
                records = await consumer.poll(timeout_ms=self.poll_ms)
            except KafkaError:
                continue
            if not records or self.stopped:
                continue
            # the group rebalances only in poll: these partitions are this member's until the commit
            self._arrived([r.partition for r in records])
            offsets, first = {}, {}
            for r in records:
                offsets[(r.topic, r.partition)] = r.offset + 1
                first.setdefault((r.topic, r.partition), r.offset)
            try:
                await consumer.commit(offsets)
            except (CommitFailedError, KafkaError):
                # refused (the group rebalanced): not counted; read it again where still ours
                assigned = consumer.assignment()
                for tp, offset in first.items():
                    if tp in assigned:
                        consumer.seek(tp, offset)
                continue
            self._count([(r.partition, r.offset) for r in records])

    def assignment(self) -> set:
        """Its C{(topic, partition)}s now."""
        return self.thread.call(10, self.consumer.assignment)

    def owned(self) -> set[int]:
        """The partitions it owns now."""
        return {p for _, p in self.assignment()}

    def close(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.thread.call(30, self.consumer.close)
