"""
L{RecordAccumulator}: the producer's batches, per partition (Kafka's
C{RecordAccumulator}).

A record sent is appended to the open batch of its partition — a plain
C{value}, or a C{(key, value, headers, timestamp_ms)} tuple, in a list, no
per-record object.  A batch is sealed when it reaches C{batch_size} bytes or
C{linger_ms} after it was opened (one timer for the whole producer), or at the
sender's next pass while a flush is in progress — or, when it could not be
sent then (every request slot to its leader taken, batches of its partition
ahead of it), once it can: meanwhile it keeps taking records, as Java's
C{RecordAccumulator} keeps appending to a batch the sender has not drained.
Sealed batches wait in their partition's C{ready} queue for the
L{kafkatw.client.sender.Sender}.

Partitioning is the Java client's (C{BuiltInPartitioner}): keyed records go to
C{toPositive(murmur2(key)) % numPartitions}; unkeyed records stick to one
partition until its batch is sealed, then to another one picked at random among
those with a leader (KIP-480).

C{buffered} counts the bytes of records held in batches not yet acknowledged
(C{buffer_memory} bounds it: an append that would exceed it returns False and
the producer holds the send until acknowledgements free room).

The unkeyed send's hot path: the open batch of a topic's sticky partition is in
C{hot} while it holds only values, no send waits, and C{buffer_memory} has room
for all of it (C{batch.room}); L{kafkatw.client.producer.Producer.send} appends
to it directly (in C with the compiled accelerator), and its C{size} and
C{buffered} catch up when it leaves C{hot} (L{RecordAccumulator.cool}).

Source: Apache Kafka's C{RecordAccumulator} and C{BuiltInPartitioner};
KIP-480 (sticky partitioner).
"""

from __future__ import annotations

import bisect
import random
import time
from collections import deque
from itertools import accumulate, repeat
from operator import itemgetter
from typing import Any, Callable

from twisted.internet.defer import Deferred

from ..errors import RecordTooLargeError, UnknownTopicOrPartitionError
from .client import KafkaClient
from .partitioner import murmur2
from .producer_batch import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    ProducerBatch,
    SendManyGroup,
    add_callback,
    fail_one,
)

__all__ = ["RecordAccumulator", "PartitionBatches", "TopicBatches"]


class PartitionBatches:
    """One partition's open batch and its sealed batches waiting to be sent, oldest first."""

    __slots__ = ("topic", "partition", "open", "ready", "in_flight", "next_sequence")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.open: ProducerBatch | None = None
        self.ready: deque[ProducerBatch] = deque()
        self.in_flight = 0
        self.next_sequence = 0


class TopicBatches:
    """A topic's partitions (L{PartitionBatches}, by partition number) and its sticky partition (KIP-480)."""

    __slots__ = ("name", "partitions", "sticky", "previous")

    def __init__(self, name: str) -> None:
        self.name = name
        self.partitions: list[PartitionBatches] = []
        self.sticky = -1
        self.previous = -1


class RecordAccumulator:
    """
    The batches of one producer.

    @param batch_size: seal a partition's batch at this many bytes.
    @param linger_ms: seal a batch at most this long after it was opened (ms).
    @param buffer_memory: bytes of records held in unacknowledged batches before appends wait.
    @param max_request_size: largest Produce request (bytes); also the largest record.
    @param partitioner: C{partitioner(key, all_partitions, available_partitions) -> partition}; None: Java's.
    @param wall_clock: the wall clock (s since the epoch): a batch's base timestamp (its records' C{CreateTime}).
    @ivar topics: C{{topic: TopicBatches}}, for the topics whose metadata arrived.
    @ivar ready: the partitions with sealed batches to send.
    @ivar open: the open batches, oldest first, by partition.
    @ivar incomplete: every batch not yet acknowledged or failed.
    @ivar lingered: partitions whose open batch outlived C{linger_ms} while it
        could not be sent, and those whose batch was opened during a flush:
        each is sealed as soon as it can be sent.
    @ivar flushes_in_progress: while above 0, every batch is ready at once
        (Java's C{RecordAccumulator.flushesInProgress}).
    @ivar wakeup: called when a batch was sealed or must be sealed soon (the sender's C{drain_soon}).
    @ivar cannot_send: C{cannot_send(partition_batches) -> bool}, the sender's
        answer to whether a batch sealed now would wait.
    """

    def __init__(self, reactor: Any, client: KafkaClient, *, batch_size: int, linger_ms: float, buffer_memory: int,
                 max_request_size: int, partitioner: Callable[..., int] | None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.reactor = reactor
        self.wall_clock = wall_clock
        self.client = client
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.max_request_size = max_request_size
        self.partitioner = partitioner
        self.topics: dict[str, TopicBatches] = {}
        self.buffered = 0  # bytes of records in unacknowledged batches
        self.ready: set[PartitionBatches] = set()
        self.incomplete: set[ProducerBatch] = set()
        self.open: dict[PartitionBatches, ProducerBatch] = {}
        # topic -> the open batch of its sticky partition while it holds only
        # values and no send waits: send's hot path
        self.hot: dict[str, ProducerBatch] = {}
        self.hot_reserved = 0  # the sum of (batch_size - size) of the batches in hot
        self.lingered: set[PartitionBatches] = set()
        self.flushes_in_progress = 0
        self.random = random.Random()
        self.wakeup: Callable[[], None] = lambda: None
        self.cannot_send: Callable[[PartitionBatches], bool] = lambda state: False
        self._batch_number = 0
        self._linger_call: Any = None

    # --- appending --------------------------------------------------------------------------

    def append(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None,
               headers: Any, timestamp_ms: int | None, d: Deferred, on_delivery: Any, may_be_hot: bool) -> bool:
        """
        Append a record to its partition's open batch; False when it must wait
        (no metadata for C{topic} yet, or no C{buffer_memory}).  A record that
        can never be sent (too large, a partition the topic lacks) fails its
        Deferred and counts as appended.

        @param may_be_hot: whether the batch may join send's hot path (no send waits, the producer is open).
        """
        tstate = self.topics.get(topic)
        if tstate is None:
            return False
        if self.hot:
            self.cool(topic)
        size = RECORD_OVERHEAD
        if value is not None:
            size += len(value)
        if key is not None:
            size += len(key)
        if headers:
            size += sum(len(k) + (len(v) if v is not None else 0) + 4 for k, v in headers)
        if self.buffered + size > self.buffer_memory:
            if size + BATCH_OVERHEAD > self.buffer_memory or size + BATCH_OVERHEAD > self.max_request_size:
                fail_one(d, on_delivery, RecordTooLargeError(
                    f"a record of about {size} bytes exceeds buffer_memory or max_request_size"))
                return True
            return False
        if size + BATCH_OVERHEAD > self.max_request_size:
            fail_one(d, on_delivery, RecordTooLargeError(f"a record of about {size} bytes exceeds max_request_size"
                                                        f" ({self.max_request_size})"))
            return True
        partitions = tstate.partitions
        sticky = False
        if partition is None:
            if self.partitioner is not None:
                ids = list(range(len(partitions)))
                partition = self.partitioner(key, ids, self.available(tstate) or ids)
            elif key is not None:
                partition = (murmur2(key) & 0x7FFFFFFF) % len(partitions)
            else:
                sticky = True
                partition = tstate.sticky
                if partition < 0:
                    partition = self.next_sticky(tstate)
        elif not 0 <= partition < len(partitions):
            fail_one(d, on_delivery, UnknownTopicOrPartitionError(f"{topic} has no partition {partition}"
                                                                 f" ({len(partitions)} partitions)"))
            return True
        state = partitions[partition]
        batch = state.open
        if batch is None:
            batch = self.new_batch(state)
        elif batch.size + size > self.batch_size or batch.groups is not None:
            self.seal(state, batch)
            if sticky:  # KIP-480: the record that would open a new batch goes to a new sticky partition
                state = partitions[self.next_sticky(tstate)]
                batch = state.open or self.new_batch(state)
            else:
                batch = self.new_batch(state)
        hot = False
        if key is None and not headers and timestamp_ms is None:
            if batch.simple:
                batch.records.append(value)
                hot = sticky and value is not None and may_be_hot
            else:
                batch.records.append((None, value, None, None))
        else:
            if batch.simple:
                batch.records = [(None, v, None, None) for v in batch.records]
                batch.simple = False
            batch.records.append((key, value, headers, timestamp_ms))
        batch.deferreds.append(d)
        if on_delivery is not None or batch.callbacks is not None:
            add_callback(batch, on_delivery)
        batch.size += size
        self.buffered += size
        if batch.size >= self.batch_size:
            self.seal(state, batch)
        elif hot:
            room = self.batch_size - batch.size
            if self.buffered + self.hot_reserved + room <= self.buffer_memory:
                # send's hot path fills the rest of this batch
                batch.room = room
                self.hot_reserved += room
                self.hot[topic] = batch
        return True

    def append_many(self, state: PartitionBatches, records: list[tuple], group: SendManyGroup) -> bool:
        """
        Append C{records} to C{state}'s batches (the batches hold no other
        records); False, having appended nothing, when they must go one at a
        time (buffer memory, a record too large).
        """
        # Each record's size as append estimates it, the headers' bytes taken
        # from the last record (line numbers grow) plus room for one more
        # header in records that have more headers than it.
        try:
            last_headers = records[-1][2]
            keys = set(map(_first, records))
            per_record = RECORD_OVERHEAD + max((len(k) for k in keys if k is not None), default=0)
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
        if self.hot:
            self.cool(state.topic)
        if (self.buffered + total > self.buffer_memory
                or max(lengths) + per_record + BATCH_OVERHEAD > self.max_request_size):
            return False
        batch_size = self.batch_size
        start = 0
        used = 0  # bytes of records[:start]
        while start < n:
            batch = state.open
            if batch is not None and (batch.groups is None or batch.size >= batch_size):
                self.seal(state, batch)
                batch = None
            if batch is None:
                batch = self.new_batch(state)
                batch.simple = False
                batch.groups = []
            room = batch_size - batch.size
            # the records that fit: the most with (value bytes + per_record each) <= room, at least one
            stop = bisect.bisect_right(range(start, n), room + used,
                                       key=lambda i: ends[i] + (i + 1) * per_record) + start
            if stop == start:
                if batch.records:
                    self.seal(state, batch)
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
            self.buffered += through - used
            used = through
            start = stop
            if batch.size >= batch_size:
                self.seal(state, batch)
        return True

    # --- send's hot path ----------------------------------------------------------------------

    def cool(self, topic: str) -> None:
        """Take C{topic}'s batch out of send's hot path: its size and C{buffered} catch up."""
        batch = self.hot.pop(topic, None)
        if batch is not None:
            reserved = self.batch_size - batch.size
            self.hot_reserved -= reserved
            added = reserved - batch.room
            batch.size += added
            self.buffered += added
            batch.room = 0

    def cool_all(self) -> None:
        for topic in list(self.hot):
            self.cool(topic)

    def hot_bytes(self) -> int:
        """Bytes that send's hot path added to the batches in C{hot} and that C{buffered} does not count yet."""
        batch_size = self.batch_size
        return sum(batch_size - batch.size - batch.room for batch in self.hot.values())

    # --- batches ----------------------------------------------------------------------------

    def new_batch(self, state: PartitionBatches) -> ProducerBatch:
        self._batch_number += 1
        batch = ProducerBatch(state, self.reactor.seconds(), self._batch_number, int(self.wall_clock() * 1000))
        state.open = batch
        self.open[state] = batch
        self.incomplete.add(batch)
        if self.flushes_in_progress or not self.linger_ms:
            # As Java's accumulator while a flush is in progress: the batch is
            # ready now.  It is sealed by the sender's next pass (once it can
            # be sent), so that the records appended until then share it.
            # With linger_ms=0 every batch is ready at once the same way: no
            # linger timer per batch, one reactor turn between send and request.
            self.lingered.add(state)
            self.wakeup()
        if self._linger_call is None and self.linger_ms:
            self._linger_call = self.reactor.callLater(self.linger_ms / 1000.0, self._linger_expired)
        return batch

    def seal(self, state: PartitionBatches, batch: ProducerBatch, wake: bool = True) -> None:
        """
        Close C{state}'s open C{batch} to appends; it joins the partition's ready queue.

        @param wake: call L{wakeup} (not when the sender's pass that drains the ready queues seals it).
        """
        if self.hot.get(state.topic) is batch:
            self.cool(state.topic)
        self.lingered.discard(state)
        state.open = None
        del self.open[state]
        state.ready.append(batch)
        self.ready.add(state)
        topic = self.topics.get(state.topic)
        if topic is not None and topic.sticky == state.partition:
            topic.previous = state.partition
            topic.sticky = -1  # KIP-480: a new batch, a new sticky partition
        if wake:
            self.wakeup()

    def seal_lingered(self) -> None:
        """Seal the lingered batches that can be sent now (the sender's pass, which sends them next)."""
        for state in list(self.lingered):
            batch = state.open
            if batch is None:
                self.lingered.discard(state)
            elif not self.cannot_send(state):
                self.seal(state, batch, False)

    def seal_all(self) -> None:
        """Seal every open batch (a flush)."""
        for state, batch in list(self.open.items()):
            self.seal(state, batch)

    def deallocate(self, batch: ProducerBatch) -> None:
        """C{batch} is acknowledged or failed: its bytes leave C{buffered}."""
        batch.done = True
        self.incomplete.discard(batch)
        self.buffered -= batch.size - BATCH_OVERHEAD

    def reset_sequences(self) -> None:
        """A new producer id or epoch: every partition's sequence starts at 0 (KIP-98)."""
        for tstate in self.topics.values():
            for state in tstate.partitions:
                state.next_sequence = 0

    def add_partitions(self, topic: str, partitions: int) -> None:
        """The metadata says C{topic} has C{partitions} partitions (never fewer than before)."""
        tstate = self.topics.get(topic)
        if tstate is None:
            tstate = self.topics[topic] = TopicBatches(topic)
        for p in range(len(tstate.partitions), partitions):
            tstate.partitions.append(PartitionBatches(topic, p))

    def close(self) -> None:
        if self._linger_call is not None and self._linger_call.active():
            self._linger_call.cancel()
        self._linger_call = None

    # --- partitioning ---------------------------------------------------------------------------

    def available(self, tstate: TopicBatches) -> list[int]:
        leader_for = self.client.leader_for
        return [p.partition for p in tstate.partitions if leader_for(tstate.name, p.partition) >= 0]

    def next_sticky(self, tstate: TopicBatches) -> int:
        candidates = self.available(tstate) or list(range(len(tstate.partitions)))
        previous = tstate.sticky if tstate.sticky >= 0 else tstate.previous
        if len(candidates) > 1 and previous in candidates:
            candidates.remove(previous)
        tstate.sticky = self.random.choice(candidates)
        return tstate.sticky

    def _linger_expired(self) -> None:
        self._linger_call = None
        now = self.reactor.seconds()
        linger = self.linger_ms / 1000.0
        for state, batch in list(self.open.items()):
            if batch.created + linger <= now + 1e-9:
                if self.cannot_send(state):
                    # As Java's accumulator: a batch whose linger is over but
                    # that could not be sent now keeps taking records (up to
                    # batch_size) until a request slot frees.
                    self.lingered.add(state)
                else:
                    self.seal(state, batch)
            else:
                self._linger_call = self.reactor.callLater(batch.created + linger - now, self._linger_expired)
                break  # open is oldest first


_first = itemgetter(0)
_second = itemgetter(1)
_third = itemgetter(2)


def _third_or_empty(record: tuple) -> Any:
    return record[2] or ()
