"""
The read path end to end (issue 26): real clients read a real broker's log
from chosen offsets with chosen fetch sizes, and every read must return every
offset from its start up to its end, in order, exactly once.

The rule they check is docs/storage.md's "What a read returns": a Fetch
returns consecutive whole batches from the one holding the fetch offset, across
segment boundaries, and stops at the first batch that does not fit in the bytes
left; it never skips a batch (or a whole segment) to return a later one.

Two tests share one ZooKeeper and one broker:

  - L{ReadPathTests.test_librdkafka_batches_over_1mb_segments}: issue 26's own
    case, scaled down.  librdkafka (confluent-kafka, C{linger.ms=50}) writes
    ~1 MB batches of 1 KB records into 1 MB segments; then kcat, confluent-kafka
    and kafka-python, with their default C{max.partition.fetch.bytes} (1 MiB),
    read from just before each segment's end into the segment after the next.
    Before the fix, a read that ended a segment with fewer bytes left than the
    next segment's ~1 MB first batch went on to the segment after it: kcat
    printed the last offset of a segment, then the first of the segment after
    the next.
  - L{ReadPathTests.test_random_reads}: a seeded randomized reader test.  A
    topic with small segments (C{segment.bytes} and C{max.message.bytes}
    drawn from the seed) gets batches of random sizes (one record up to near
    C{max.message.bytes}) and codecs (none, gzip, snappy, lz4, zstd) from
    kafkatw's producer and from librdkafka with various C{linger.ms} and
    C{batch.size}; then C{KAFKATW_READ_COUNT} reads from random offsets with
    random fetch sizes (C{max.partition.fetch.bytes}, C{fetch.max.bytes}:
    uniform, tiny, and just around batch and segment boundaries) by kafkatw's
    consumer, librdkafka (confluent-kafka), kafka-python, and the Spark source
    (a batch query with C{startingOffsets}/C{endingOffsets} as JSON and
    C{maxRecordsPerPartition} splitting it into several input partitions,
    each read from its own start; the source fetches with its consumer's
    default size).

Each record's key is its offset in decimal (every topic has one partition and
one writer at a time), so a read also shows that each offset holds its own
record.  The tests read the segment files to check that the log reached the
state the reads are aimed at: L{fetched_batches} gives what one Fetch returns
under the read rule and under the rule before the fix, and reads are chosen
(part of them on purpose) where the two differ.

Seed and length: C{KAFKATW_READ_SEED} (default: a new random seed on every
run; it is printed, and every failure names it) and C{KAFKATW_READ_COUNT}
(default 16 reads).  A long run, with the seed of a failure or a new one
(docs/storage.md, "Testing the read path")::

    KAFKATW_READ_SEED=12345 KAFKATW_READ_COUNT=2000 \\
        .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/integration/test_read_path.py -k test_random_reads

A seed repeats the topic's settings, the records, codecs and producers'
settings, and the choice of reads; librdkafka also batches by time, so its
batches (and the reads planned from the layout) can come out slightly
different.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from twisted.trial import unittest

from kafkatw.testing import ClassFixture, running_cluster

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError:  # pragma: no cover - the spark extra is not installed
    pyspark = None

KCAT = shutil.which("kcat") or "/usr/bin/kcat"

#: The seed of L{ReadPathTests.test_random_reads}: the environment's, or a new one.
SEED = int(os.environ.get("KAFKATW_READ_SEED") or random.SystemRandom().randrange(2 ** 32))
#: How many reads L{ReadPathTests.test_random_reads} makes.
READ_COUNT = int(os.environ.get("KAFKATW_READ_COUNT") or 16)

#: Clients' own timeouts and our loop bounds (s).
TIMEOUT_S = 30.0

#: Every client's default C{max.partition.fetch.bytes}.
DEFAULT_PARTITION_MAX_BYTES = 1048576

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
#: Record batch attributes' compression bits (Kafka protocol guide, "Record Batch").
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

#: baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32,
#: attributes i16, lastOffsetDelta i32 (Kafka protocol guide, "Record Batch").
_BATCH_HEADER = struct.Struct(">qiibIhi")


# --- the log as it is on disk, and what one Fetch returns from it -------------------------


@dataclass(frozen=True)
class Batch:
    """One record batch of a segment file: its offsets, its size on disk (bytes) and codec."""

    base_offset: int
    last_offset: int
    size: int
    codec: str


def segment_layout(broker: Any, topic: str) -> list[list[Batch]]:
    """
    The batches of partition 0 of C{topic}, segment by segment (each
    C{<base offset>.log} in offset order), as the broker wrote them.
    """
    segments = []
    pattern = os.path.join(broker.data_dir, f"{topic}-0", "*.log")
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            data = f.read()
        batches = []
        pos = 0
        while pos + _BATCH_HEADER.size <= len(data):
            base_offset, length, _epoch, magic, _crc, attributes, last_delta = _BATCH_HEADER.unpack_from(data, pos)
            assert magic == 2, f"{path} at {pos}: magic {magic}"
            batches.append(Batch(base_offset, base_offset + last_delta, 12 + length, CODEC_NAMES[attributes & 7]))
            pos += 12 + length
        assert pos == len(data), f"{path}: {len(data) - pos} trailing bytes"
        segments.append(batches)
    return segments


def fetched_batches(layout: list[list[Batch]], offset: int, max_bytes: int, skip_bug: bool = False) -> list[Batch]:
    """
    The batches one Fetch at C{offset} returns from C{layout}, for a partition
    read first in its Fetch (so at least one batch, KIP-74), with C{max_bytes}
    for it (the smaller of C{partition_max_bytes} and the request's
    C{max_bytes}), up to the log end: docs/storage.md's read rule.

    @param skip_bug: the rule before issue 26's fix instead: a segment whose
        first batch did not fit in the bytes left was passed over, and the
        read went on with the next segment.
    """
    out: list[Batch] = []
    remaining = max_bytes
    for segment in layout:
        if not segment or segment[-1].last_offset < offset:
            continue
        pending = [batch for batch in segment if batch.last_offset >= offset]
        if pending[0].size > remaining:
            if not out:
                return [pending[0]]  # KIP-74: the first batch, however large
            if skip_bug:
                continue
            return out
        for batch in pending:
            if batch.size > remaining:
                return out
            out.append(batch)
            remaining -= batch.size
    return out


def skipped_by_old_rule(layout: list[list[Batch]], offset: int, max_bytes: int) -> tuple[int, int] | None:
    """
    Where a Fetch at C{offset} with C{max_bytes} skipped batches before issue
    26's fix: C{(first offset skipped, first offset returned after them)}, or
    C{None} where both rules return the same.
    """
    old = fetched_batches(layout, offset, max_bytes, skip_bug=True)
    new = fetched_batches(layout, offset, max_bytes)
    if old == new:
        return None
    assert old[:len(new)] == new, (old, new)
    return new[-1].last_offset + 1, old[len(new)].base_offset


def describe_layout(layout: list[list[Batch]]) -> str:
    """One line per segment: its batches as C{first..last:bytes[/codec]}."""
    return "\n".join(f"segment {segment[0].base_offset if segment else '-'}: "
                     + " ".join(f"{b.base_offset}..{b.last_offset}:{b.size}{'' if b.codec == 'none' else '/' + b.codec}"
                                for b in segment)
                     for segment in layout)


# --- reads --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """
    One read of partition 0 of C{topic}: offsets C{[start, stop)}.

    @ivar partition_max_bytes: C{max.partition.fetch.bytes} (None: the client's default).
    @ivar fetch_max_bytes: C{fetch.max.bytes} (None: the client's default).
    @ivar max_records_per_partition: the Spark source's C{maxRecordsPerPartition}.
    @ivar aim: why these offsets and sizes were chosen (for the failure message).
    """

    reader: str
    topic: str
    start: int
    stop: int
    partition_max_bytes: int | None = None
    fetch_max_bytes: int | None = None
    max_records_per_partition: int | None = None
    aim: str = ""

    @property
    def first_fetch_bytes(self) -> int:
        """What the broker's read of the first Fetch may return (bytes)."""
        return min(self.partition_max_bytes or DEFAULT_PARTITION_MAX_BYTES, self.fetch_max_bytes or 52428800)


def read_kcat(bootstrap: str, read: Read) -> list[tuple[int, bytes | None]]:
    """kcat (librdkafka 2.0): C{-o start -c count}, printing each offset and key."""
    out = subprocess.run(
        [KCAT, "-b", bootstrap, "-C", "-t", read.topic, "-p", "0", "-o", str(read.start),
         "-c", str(read.stop - read.start), "-e", "-q", "-f", "%o %k\\n"],
        check=True, timeout=TIMEOUT_S, capture_output=True,
    ).stdout
    got = []
    for line in out.splitlines():
        offset, _, key = line.partition(b" ")
        got.append((int(offset), key))
    return got


def read_kafkatw(bootstrap: str, read: Read) -> list[tuple[int, bytes | None]]:
    """kafkatw's consumer (the blocking facade of L{kafkatw.client.consumer.Consumer})."""
    from kafkatw.client.blocking import BlockingConsumer

    options: dict[str, Any] = {}
    if read.partition_max_bytes is not None:
        options["max_partition_fetch_bytes"] = read.partition_max_bytes
    if read.fetch_max_bytes is not None:
        options["fetch_max_bytes"] = read.fetch_max_bytes
    tp = (read.topic, 0)
    got: list[tuple[int, bytes | None]] = []
    with BlockingConsumer(bootstrap, auto_offset_reset="none", **options) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, read.start)
        deadline = time.monotonic() + TIMEOUT_S
        while not _done(got, read) and time.monotonic() < deadline:
            got += [(r.offset, r.key) for r in consumer.poll(timeout_ms=500)]
    return got


def read_librdkafka(bootstrap: str, read: Read) -> list[tuple[int, bytes | None]]:
    """
    confluent-kafka's consumer (librdkafka 2.16), assigned at C{start}.
    librdkafka needs C{fetch.max.bytes >= message.max.bytes} (at least 1000).
    """
    from confluent_kafka import Consumer, TopicPartition

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": "read-path", "enable.auto.commit": False,
                              "enable.auto.offset.store": False, "auto.offset.reset": "error"}
    if read.partition_max_bytes is not None:
        config["max.partition.fetch.bytes"] = read.partition_max_bytes
    if read.fetch_max_bytes is not None:
        config["fetch.max.bytes"] = read.fetch_max_bytes
        config["message.max.bytes"] = min(read.fetch_max_bytes, 1000000)
    consumer = Consumer(config)
    got: list[tuple[int, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(read.topic, 0, read.start)])
        deadline = time.monotonic() + TIMEOUT_S
        while not _done(got, read) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    raise AssertionError(f"librdkafka: {msg.error()}")
                got.append((msg.offset(), msg.key()))
    finally:
        consumer.close()
    return got


def read_kafka_python(bootstrap: str, read: Read) -> list[tuple[int, bytes | None]]:
    """kafka-python's consumer, assigned and sought to C{start}."""
    from kafka import KafkaConsumer, TopicPartition

    options: dict[str, Any] = {}
    if read.partition_max_bytes is not None:
        options["max_partition_fetch_bytes"] = read.partition_max_bytes
    if read.fetch_max_bytes is not None:
        options["fetch_max_bytes"] = read.fetch_max_bytes
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=int(TIMEOUT_S * 1000), **options)
    got: list[tuple[int, bytes | None]] = []
    try:
        tp = TopicPartition(read.topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, read.start)
        deadline = time.monotonic() + TIMEOUT_S
        while not _done(got, read) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [(r.offset, r.key) for r in records]
    finally:
        consumer.close()
    return got


def read_spark(spark: Any, bootstrap: str, read: Read) -> list[tuple[int, bytes | None]]:
    """The Spark source: a batch query of C{[start, stop)}, rows in the order C{collect} gives them."""
    df = (spark.read.format("kafkatw").option("kafka.bootstrap.servers", bootstrap)
          .option("assign", json.dumps({read.topic: [0]}))
          .option("startingOffsets", json.dumps({read.topic: {"0": read.start}}))
          .option("endingOffsets", json.dumps({read.topic: {"0": read.stop}}))
          .option("maxRecordsPerPartition", str(read.max_records_per_partition))
          .load())
    return [(row.offset, None if row.key is None else bytes(row.key)) for row in df.select("offset", "key").collect()]


def _done(got: list[tuple[int, bytes | None]], read: Read) -> bool:
    return len(got) >= read.stop - read.start or (bool(got) and got[-1][0] >= read.stop - 1)


def read_problem(read: Read, got: list[tuple[int, bytes | None]]) -> str | None:
    """
    What is wrong with what C{read} returned, or C{None}: it must be every
    offset of C{[start, stop)} in order, once each, each with its own key;
    records after the first at or past C{stop} (a client's read-ahead) are not
    looked at.
    """
    offsets = []
    for offset, key in got:
        if key != b"%d" % offset:
            return f"offset {offset} holds the record of key {key!r}"
        offsets.append(offset)
        if offset >= read.stop:
            break
    want = list(range(read.start, read.stop))
    if offsets[:len(want)] == want:
        return None
    for i, offset in enumerate(offsets):
        if i == len(want) or offset != want[i]:
            before = f"after offset {offsets[i - 1]}" if i else "first"
            return f"{before} came {offset}, not {want[i] if i < len(want) else 'nothing'}"
    last = offsets[-1] if offsets else None
    return f"{len(offsets)} of {len(want)} offsets within {TIMEOUT_S:.0f} s (the last: {last})"


# --- writing the logs --------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)], operation_timeout=TIMEOUT_S)[name].result(TIMEOUT_S)


def produce_with_librdkafka(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], config: dict[str, Any]
                            ) -> None:
    """Send C{records} (key, value) to partition 0 with confluent-kafka, then flush; every one must be delivered."""
    from confluent_kafka import Producer

    errors: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **config})
    for key, value in records:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=report)
    remaining = producer.flush(TIMEOUT_S)
    assert not errors and not remaining, f"librdkafka: {remaining} undelivered, errors {errors[:3]}"


class RandomLog:
    """
    Writes a seeded random log to partition 0 of a topic: runs of batches of
    random sizes and codecs, each run from kafkatw's producer (one batch per
    flush) or librdkafka (its own batching, with a random C{linger.ms} and
    C{batch.size}), one after another so that offsets follow the keys.
    """

    def __init__(self, bootstrap: str, topic: str, rng: random.Random, max_message_bytes: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.rng = rng
        self.max_message_bytes = max_message_bytes
        self.count = 0
        #: bytes of keys and values written so far
        self.bytes = 0
        self._kafkatw: dict[str, Any] = {}

    def top(self, size_class: str) -> int:
        """The largest value of a size class (bytes)."""
        return {"tiny": 40, "small": 600, "large": min(4000, self.max_message_bytes // 3)}[size_class]

    def record(self, size_class: str, compressible: bool) -> tuple[bytes, bytes]:
        """The next record: its offset as the key, a value of the size class."""
        rng = self.rng
        key = b"%d" % self.count
        self.count += 1
        top = self.top(size_class)
        length = rng.randint(0 if size_class == "tiny" else top // 4, top)
        value = (key + b"-") * (length // (len(key) + 1) + 1) if compressible else rng.randbytes(length)
        self.bytes += len(key) + length
        return key, value[:length]

    def batch_records(self) -> list[tuple[bytes, bytes]]:
        """Records for one batch: one record, or records adding up to nearly C{max.message.bytes}."""
        rng = self.rng
        size_class = rng.choice(["tiny", "small", "large"])
        compressible = rng.random() < 0.5
        target = 1 if rng.random() < 0.2 else rng.randint(100, self.max_message_bytes - 1024)
        # a record costs its key and value and up to ~24 bytes of varints; a batch 61 bytes of header
        size = 61
        records: list[tuple[bytes, bytes]] = []
        while not records or size + 24 + len(b"%d" % self.count) + self.top(size_class) <= target:
            records.append(self.record(size_class, compressible))
            size += 24 + len(records[-1][0]) + len(records[-1][1])
        return records

    def kafkatw_batch(self) -> None:
        from kafkatw.client.blocking import BlockingProducer

        codec = self.rng.choice(CODECS)
        producer = self._kafkatw.get(codec)
        if producer is None:
            # flush() seals the open batches, but a batch opened after it (records that waited for
            # metadata, on a new producer's first send) still waits for linger.ms: keep it short
            producer = self._kafkatw[codec] = BlockingProducer(
                self.bootstrap, acks="all", compression_type=None if codec == "none" else codec,
                batch_size=self.max_message_bytes - 512, linger_ms=100, timeout_s=TIMEOUT_S)
        futures = [producer.send(self.topic, value, key=key, partition=0) for key, value in self.batch_records()]
        producer.flush(TIMEOUT_S)
        for future in futures:
            future.get(TIMEOUT_S)

    def librdkafka_run(self) -> None:
        rng = self.rng
        records = []
        for _ in range(rng.randint(1, 4)):
            records += self.batch_records()
        produce_with_librdkafka(self.bootstrap, self.topic, records, {
            "compression.type": rng.choice(CODECS), "linger.ms": rng.choice([0, 5, 50]),
            "batch.size": rng.randint(1000, self.max_message_bytes - 512),
            "message.max.bytes": max(1000, self.max_message_bytes - 256)})

    def write(self, total_bytes: int) -> None:
        """Write batches until their keys and values add up to C{total_bytes}."""
        while self.bytes < total_bytes:
            if self.rng.random() < 0.6:
                self.kafkatw_batch()
            else:
                self.librdkafka_run()

    def close(self) -> None:
        for producer in self._kafkatw.values():
            producer.close(TIMEOUT_S)


def check_layout(layout: list[list[Batch]], count: int, max_message_bytes: int | None = None) -> None:
    """The segments hold offsets 0..count-1 in consecutive batches (and none larger than C{max_message_bytes})."""
    next_offset = 0
    for segment in layout:
        for batch in segment:
            assert batch.base_offset == next_offset, f"batch at {batch.base_offset}, expected {next_offset}"
            assert max_message_bytes is None or batch.size - 12 <= max_message_bytes
            next_offset = batch.last_offset + 1
    assert next_offset == count, f"the log ends at {next_offset}, {count} records were acknowledged"


# --- planning the random reads -----------------------------------------------------------


READERS = ["kafkatw", "librdkafka", "kafka-python", "spark"]


def plan_reads(rng: random.Random, layout: list[list[Batch]], topic: str, count: int, readers: list[str],
               segment_bytes: int) -> list[Read]:
    """
    C{count} reads, the readers taking turns.  The first read of each reader
    is aimed where the rule before issue 26's fix skipped batches on the
    first Fetch (when the layout has such a place; the Spark source only
    fetches with its consumer's default size); the others start at a random
    offset, a segment's first or last offset, or a batch's first or last
    offset, with fetch sizes that are the client's defaults, uniform, tiny,
    or within a byte of a batch's size or of a segment boundary.  A read goes
    to the log end, or a random number of offsets, or just past the segment
    after the next.
    """
    segments = [segment for segment in layout if segment]
    end = segments[-1][-1].last_offset + 1
    # (segment index, batch index within it) of every batch
    places = [(k, i) for k, segment in enumerate(segments) for i in range(len(segment))]

    def tail(k: int, i: int) -> int:
        return sum(batch.size for batch in segments[k][i:])

    def stop_for(start: int, k: int) -> int:
        choice = rng.random()
        if choice < 0.35:
            return end
        if choice < 0.5:
            return min(end, start + rng.randint(1, 5))
        if choice < 0.8 and k + 2 < len(segments):
            return min(end, segments[k + 2][0].base_offset + rng.randint(1, 5))
        return rng.randint(start + 1, end)

    def aimed(reader: str) -> Read | None:
        """A read whose first Fetch skipped batches before the fix, if the layout has one."""
        if reader == "spark":
            options = [(k, i, DEFAULT_PARTITION_MAX_BYTES) for k, i in places
                       if skipped_by_old_rule(layout, segments[k][i].base_offset, DEFAULT_PARTITION_MAX_BYTES)]
        else:
            # from batch i of segment k: its segment's tail, then too few bytes for the next segment's
            # first batch and enough for the first batch of the segment after it
            options = []
            for k, i in places:
                if k + 2 < len(segments):
                    left = tail(k, i)
                    first, second = (segment[0].size for segment in segments[k + 1:k + 3])
                    if second < first:
                        options.append((k, i, rng.randint(left + second, left + first - 1)))
        if not options:
            return None
        k, i, size = rng.choice(options)
        batch = segments[k][i]
        start = rng.randint(batch.base_offset, batch.last_offset)
        skipped = skipped_by_old_rule(layout, start, size)
        assert skipped is not None
        stop = end if rng.random() < 0.3 else min(end, skipped[1] + rng.randint(1, 50))
        aim = f"a {size}-byte fetch at {start} skipped offsets {skipped[0]}..{skipped[1] - 1} before the fix"
        if reader == "spark":
            return Read(reader, topic, start, stop, max_records_per_partition=stop - start, aim=aim)
        partition_max, fetch_max = rng.choice([(size, None), (None, size), (size, size + rng.randint(0, 3000))])
        return librdkafka_sizes(Read(reader, topic, start, stop, partition_max, fetch_max, aim=aim))

    def fetch_size(k: int, i: int) -> int | None:
        batch = segments[k][i]
        choice = rng.randrange(6)
        if choice == 0:
            return None
        if choice == 1:
            return rng.randint(1, 3 * segment_bytes)
        if choice == 2:
            return rng.randint(1, 64)
        if choice == 3:
            return max(1, batch.size + rng.randint(-1, 1))
        left = tail(k, i)
        if choice == 4 or k + 1 >= len(segments):
            return max(1, left + rng.randint(-1, 1))
        return left + segments[k + 1][0].size + rng.randint(-1, 1)

    def random_read(reader: str) -> Read:
        k, i = rng.choice(places)
        how = rng.randrange(5)
        if how == 0:
            start = rng.randrange(end)
            k, i = next((k, i) for k, i in places if segments[k][i].last_offset >= start)
        elif how == 1:
            i, start = 0, segments[k][0].base_offset
        elif how == 2:
            i = len(segments[k]) - 1
            start = segments[k][i].last_offset
        elif how == 3:
            start = segments[k][i].base_offset
        else:
            start = segments[k][i].last_offset
        stop = stop_for(start, k)
        if reader == "spark":
            span = stop - start
            return Read(reader, topic, start, stop, max_records_per_partition=rng.randint(max(1, span // 6), span),
                        aim="random")
        partition_max, fetch_max = fetch_size(k, i), None
        if rng.random() < 0.3:
            fetch_max = fetch_size(k, i)
        return librdkafka_sizes(Read(reader, topic, start, stop, partition_max, fetch_max, aim="random"))

    plan = []
    for n in range(count):
        reader = readers[n % len(readers)]
        read = aimed(reader) if n < len(readers) else None
        plan.append(read or random_read(reader))
    return plan


def librdkafka_sizes(read: Read) -> Read:
    """
    C{read} with fetch sizes librdkafka takes: it needs C{fetch.max.bytes >=
    message.max.bytes >= 1000}, so a smaller C{fetch.max.bytes} becomes the
    C{max.partition.fetch.bytes} (the same bytes for the first Fetch).
    """
    if read.reader != "librdkafka" or read.fetch_max_bytes is None or read.fetch_max_bytes >= 1000:
        return read
    partition_max = min(read.fetch_max_bytes, read.partition_max_bytes or DEFAULT_PARTITION_MAX_BYTES)
    return dataclasses.replace(read, partition_max_bytes=partition_max, fetch_max_bytes=None)


# --- the tests: one broker for the module; they run under trial and pytest alike ----------


class ReadPathTests(ClassFixture, unittest.SynchronousTestCase):
    """Every read of a real broker's log returns every offset after its start, in order, once."""

    spark: Any = None

    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1)
        cls.broker = cls._cluster.__enter__()[0]
        cls.bootstrap = cls.broker.bootstrap

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.spark is not None:
            cls.spark.stop()
            cls.spark = None
        cls._cluster.__exit__(None, None, None)

    @classmethod
    def spark_session(cls) -> Any:
        """One C{local[2]} SparkSession for the module, made when first needed (Spark takes seconds to start)."""
        if cls.spark is None:
            os.environ["PYSPARK_PYTHON"] = sys.executable
            os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
            os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
            from pyspark.sql import SparkSession

            import kafkatw.spark

            started = time.monotonic()
            cls.spark = (SparkSession.builder.master("local[2]").appName("kafkatw-read-path")
                         .config("spark.driver.host", "127.0.0.1")
                         .config("spark.driver.bindAddress", "127.0.0.1")
                         .config("spark.ui.enabled", "false")
                         .config("spark.sql.shuffle.partitions", "2")
                         .config("spark.ui.showConsoleProgress", "false")
                         .getOrCreate())
            cls.spark.sparkContext.setLogLevel("ERROR")
            kafkatw.spark.register(cls.spark)
            print(f"the SparkSession started in {time.monotonic() - started:.1f} s")
        return cls.spark

    def test_librdkafka_batches_over_1mb_segments(self) -> None:
        """
        Issue 26's case: librdkafka's ~1 MB batches of 1 KB records in 1 MB
        segments, read with every client's default C{max.partition.fetch.bytes}
        (1 MiB) from just before a segment's end.

        Each round writes a small batch, then, in one flush, two full batches
        (C{batch.num.messages}) and a 60-record one, so that the segments go
        C{[small, ~1 MB]}, C{[~1 MB, 60 KB]}: a read from the end of the first
        has ~75 KB left, too few for the next segment's first batch, and
        enough for the small batch that begins the segment after it, which
        the rule before the fix returned instead.  The layout on disk is
        checked for that before the reads.
        """
        topic = "read-path-1mb"
        create_topic(self.bootstrap, topic, {"segment.bytes": "1048576"})
        value = random.Random(26).randbytes(1000)
        records = [(b"%d" % i, value) for i in range(5 * 2000)]
        config = {"linger.ms": 50, "batch.num.messages": 960}
        position = 0
        for _round in range(5):
            for n in (20, 2 * 960 + 60):
                produce_with_librdkafka(self.bootstrap, topic, records[position:position + n], config)
                position += n
        layout = segment_layout(self.broker, topic)
        check_layout(layout, len(records))
        big = [b for segment in layout for b in segment if b.last_offset - b.base_offset + 1 == 960]
        self.assertGreaterEqual(len(big), 8, describe_layout(layout))
        self.assertTrue(all(900_000 < b.size <= 1_000_000 for b in big), describe_layout(layout))

        # from a few offsets before each segment's end to a few offsets into the segment after the next
        reads = []
        for k in range(len(layout) - 2):
            start = layout[k][-1].last_offset - 3
            reads.append((start, layout[k + 2][0].base_offset + 5,
                          skipped_by_old_rule(layout, start, DEFAULT_PARTITION_MAX_BYTES)))
        aimed = [start for start, _stop, skipped in reads if skipped]
        self.assertGreaterEqual(len(aimed), 3, "the log did not reach the state of issue 26:\n"
                                + describe_layout(layout))

        problems = []
        for start, stop, skipped in reads:
            for reader, function in (("kcat", read_kcat), ("librdkafka", read_librdkafka),
                                     ("kafka-python", read_kafka_python)):
                read = Read(reader, topic, start, stop)
                problem = read_problem(read, function(self.bootstrap, read))
                if problem is not None:
                    aim = f" (skipped offsets {skipped[0]}..{skipped[1] - 1} before the fix)" if skipped else ""
                    problems.append(f"{reader} from {start} to {stop}{aim}: {problem}")
        whole = Read("kcat", topic, 0, len(records))
        problem = read_problem(whole, read_kcat(self.bootstrap, whole))
        if problem is not None:
            problems.append(f"kcat from the beginning: {problem}")
        if problems:
            self.fail("\n".join(problems) + "\nthe log:\n" + describe_layout(layout))

    def test_random_reads(self) -> None:
        """
        The seeded randomized reader test: see the module docstring.
        KAFKATW_READ_SEED and KAFKATW_READ_COUNT set the seed and the number
        of reads; the seed is printed and named in the failure.
        """
        rng = random.Random(SEED)
        rerun = f"KAFKATW_READ_SEED={SEED} KAFKATW_READ_COUNT={READ_COUNT}"
        print(f"test_random_reads: {rerun}")
        segment_bytes = rng.randint(16 * 1024, 96 * 1024)
        max_message_bytes = rng.randint(2048, min(24 * 1024, segment_bytes))
        topic = "read-path-random"
        create_topic(self.bootstrap, topic, {"segment.bytes": str(segment_bytes),
                                             "max.message.bytes": str(max_message_bytes)})
        log = RandomLog(self.bootstrap, topic, rng, max_message_bytes)
        try:
            log.write(rng.randint(2 * 2 ** 20, 3 * 2 ** 20))
        finally:
            log.close()
        layout = segment_layout(self.broker, topic)
        check_layout(layout, log.count, max_message_bytes)
        codecs = sorted({b.codec for segment in layout for b in segment})
        print(f"segment.bytes={segment_bytes} max.message.bytes={max_message_bytes}: {log.count} records,"
              f" {sum(len(s) for s in layout)} batches ({', '.join(codecs)}) in {len(layout)} segments")

        readers = READERS if pyspark is not None else READERS[:-1]
        if pyspark is None:
            print("pyspark is not installed (pip install kafkatw[spark]): no reads by the Spark source")
        plan = plan_reads(rng, layout, topic, READ_COUNT, readers, segment_bytes)
        aimed = [read for read in plan if skipped_by_old_rule(layout, read.start, read.first_fetch_bytes)]
        print(f"{len(plan)} reads, {len(aimed)} of them where the rule before the fix skipped on the first Fetch")
        problems = []
        for n, read in enumerate(plan):
            started = time.monotonic()
            if read.reader == "spark":
                got = read_spark(self.spark_session(), self.bootstrap, read)
            else:
                got = {"kafkatw": read_kafkatw, "librdkafka": read_librdkafka,
                       "kafka-python": read_kafka_python}[read.reader](self.bootstrap, read)
            problem = read_problem(read, got)
            print(f"read {n}: {read.reader} [{read.start}, {read.stop}) partition_max_bytes={read.partition_max_bytes}"
                  f" fetch_max_bytes={read.fetch_max_bytes} {read.aim}: {problem or 'ok'}"
                  f" ({time.monotonic() - started:.1f} s)")
            if problem is not None:
                problems.append(f"read {n}: {read}: {problem}")
        if problems:
            self.fail(f"{rerun}: {len(problems)} of {len(plan)} reads went wrong\n" + "\n".join(problems)
                      + f"\n{rerun}; the log:\n{describe_layout(layout)}")
