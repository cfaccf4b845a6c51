"""
Interoperability with real Kafka clients against a real kafkatw broker.

kcat (Debian's 1.7.1, librdkafka 2.0.2), confluent-kafka (librdkafka 2.16),
kafka-python 3.0 and aiokafka 0.14 each produce one deterministic record set
(keys, null keys, empty and ~10 KB binary values, headers with duplicate names
and null values, explicit non-monotonic create times) to partition 0 of its own
topic C{interop-<producer>-<codec>}, once per compression codec; then every
client consumes every topic from the beginning, and each consumed record must
equal what was produced byte for byte, at offsets 0..N-1, in order.

What a producer cannot set, it is not held to:

  - kcat sends the same headers with every record (C{-H}) and cannot set a
    create time, so its records carry librdkafka's send time: consumers must
    then agree among themselves on each record's timestamp.
  - kafka-python refuses a null header value (C{TypeError: All headers items
    must be (str, bytes) tuples}), so it sends an empty one instead.
  - kcat drops a message that is empty with no key, so the record set keeps
    every empty value keyed.

What a consumer cannot show, it is not asked for: kcat's C{-f %h} prints header
values as text (so header values stay printable and free of C{,} and C{=}) and
does not print the timestamp type.

One ZooKeeper and one broker serve the whole module.  Nothing joins a consumer
group: consumers C{assign} partition 0.
"""

from __future__ import annotations

import asyncio
import glob
import os
import random
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

from twisted.trial import unittest

from kafkatw.testing import ClassFixture, running_cluster

KCAT = shutil.which("kcat") or "/usr/bin/kcat"

#: Records per producer and topic.
RECORD_COUNT = 200

#: Create times (ms since the epoch) start here; see L{record_set}.
BASE_TIMESTAMP_MS = 1_700_000_000_000

#: Clients' own timeouts and our loop bounds (s).
TIMEOUT_S = 30.0

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PRODUCERS = ["kcat", "confluent", "kafka-python", "aiokafka"]
CONSUMERS = ["kcat", "confluent", "kafka-python", "aiokafka"]

#: kcat's input delimiters (C{-K}, C{-D}): never inside a key or value.
KCAT_KEY_DELIMITER = b"#KEY#"
KCAT_MESSAGE_DELIMITER = b"@@END-OF-MESSAGE@@"
#: kcat's headers (C{-H}): the same on every record it sends.
KCAT_HEADERS = [("h1", b"kcat"), ("h2", None)]

#: TIMESTAMP_TYPE create time, as consumers report it.
CREATE_TIME = 0


@dataclass(frozen=True)
class Record:
    """
    One record as produced or consumed.

    @ivar offset: C{None} for a record not yet produced.
    @ivar headers: C{(name, value)} pairs in order; a value may be C{None}.
    @ivar timestamp_ms: the create time; C{None} when the producer did not set one.
    @ivar timestamp_type: 0 (create time) or 1 (log append time); C{None} when
        the consumer does not report it.
    """

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int | None
    offset: int | None = None
    timestamp_type: int | None = None


def record_set() -> list[Record]:
    """
    The deterministic record set every producer sends.

    Every 10th record (from the 4th) has a null key; every 50th an empty value
    (always keyed); every 40th (from the 8th) a ~10 KB binary value; the rest
    short binary values of varied length.  Values hold every byte value but
    repeat themselves: clients send a batch uncompressed when compressing does
    not shrink it (librdkafka, kafka-python's C{_maybe_compress}), and every
    batch here must be compressed.  Headers rotate through none,
    two (one with an empty value) and three (a repeated name and a null value).
    Create times step by one second but go back every few records, so a
    batch's first timestamp is not its smallest.
    """
    rng = random.Random(20261122)
    records = []
    for i in range(RECORD_COUNT):
        key = None if i % 10 == 3 else b"k%03d" % i
        if i % 50 == 0:
            value = b""
        elif i % 40 == 7:
            value = (rng.randbytes(251) * 41)[:10_000 + i]
        else:
            value = b"v%03d-" % i + bytes((j * 37 + i) % 256 for j in range(i % 97))
        assert KCAT_KEY_DELIMITER not in value and KCAT_MESSAGE_DELIMITER not in value
        headers: tuple[tuple[str, bytes | None], ...]
        if i % 3 == 0:
            headers = ()
        elif i % 3 == 1:
            headers = (("h1", b"a%03d" % i), ("h2", b""))
        else:
            headers = (("h1", b"x"), ("h1", b"dup%03d" % i), ("h3", None))
        timestamp_ms = BASE_TIMESTAMP_MS + i * 1000 - (i % 4) * 2500
        records.append(Record(key, value, headers, timestamp_ms))
    return records


def expected_records(producer: str) -> list[Record]:
    """What C{producer} can send of L{record_set}: see the module docstring."""
    if producer == "kcat":
        return [Record(r.key, r.value, tuple(KCAT_HEADERS), None) for r in record_set()]
    if producer == "kafka-python":
        return [Record(r.key, r.value, tuple((n, b"" if v is None else v) for n, v in r.headers), r.timestamp_ms)
                for r in record_set()]
    return record_set()


def topic_name(producer: str, codec: str) -> str:
    return f"interop-{producer}-{codec}"


# --- the cluster -------------------------------------------------------------


def create_topics(bootstrap: str, partitions_by_topic: dict[str, int]) -> None:
    """Create topics with confluent-kafka's AdminClient (CreateTopics)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in partitions_by_topic.items()],
        operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S,
    )
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


# --- producers ---------------------------------------------------------------
# Each sends expected_records(<producer>) to partition 0 of `topic` and returns
# the offsets it was acknowledged (None where the client does not report them).


def produce_kcat(bootstrap: str, topic: str, codec: str) -> list[int] | None:
    data = bytearray()
    for record in expected_records("kcat"):
        if record.key is not None:
            data += record.key + KCAT_KEY_DELIMITER
        data += record.value + KCAT_MESSAGE_DELIMITER
    headers = []
    for name, value in KCAT_HEADERS:
        headers += ["-H", name if value is None else f"{name}={value.decode()}"]
    subprocess.run(
        [KCAT, "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-z", codec,
         "-K", KCAT_KEY_DELIMITER.decode(), "-D", KCAT_MESSAGE_DELIMITER.decode(), *headers,
         "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=5"],
        input=bytes(data), check=True, timeout=TIMEOUT_S, capture_output=True,
    )
    return None


def produce_confluent(bootstrap: str, topic: str, codec: str) -> list[int]:
    from confluent_kafka import KafkaException, Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
        "compression.type": codec, "linger.ms": 5,
    })
    offsets: dict[int, int] = {}
    errors: list[Any] = []

    def delivered(index: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets[index] = msg.offset()
        return report

    for index, record in enumerate(expected_records("confluent")):
        producer.produce(topic, value=record.value, key=record.key, partition=0,
                         timestamp=record.timestamp_ms, headers=list(record.headers),
                         on_delivery=delivered(index))
        producer.poll(0)
    remaining = producer.flush(TIMEOUT_S)
    if errors or remaining:
        raise KafkaException(f"confluent-kafka: {remaining} undelivered, errors {errors[:5]}")
    return [offsets[i] for i in range(RECORD_COUNT)]


def produce_kafka_python(bootstrap: str, topic: str, codec: str) -> list[int]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                             compression_type=None if codec == "none" else codec, linger_ms=5,
                             request_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        assert producer.config["enable_idempotence"], "kafka-python's default is idempotent"
        futures = [
            producer.send(topic, value=r.value, key=r.key, partition=0, timestamp_ms=r.timestamp_ms,
                          headers=list(r.headers))
            for r in expected_records("kafka-python")
        ]
        producer.flush(TIMEOUT_S)
        return [future.get(TIMEOUT_S).offset for future in futures]
    finally:
        producer.close(TIMEOUT_S)


def produce_aiokafka(bootstrap: str, topic: str, codec: str) -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def go() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                    compression_type=None if codec == "none" else codec, linger_ms=5,
                                    request_timeout_ms=int(TIMEOUT_S * 1000))
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=r.value, key=r.key, partition=0,
                                    timestamp_ms=r.timestamp_ms, headers=list(r.headers))
                for r in expected_records("aiokafka")
            ]
            metadata = await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT_S)
            return [m.offset for m in metadata]
        finally:
            await producer.stop()

    return asyncio.run(go())


PRODUCE = {
    "kcat": produce_kcat,
    "confluent": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}


# --- consumers ---------------------------------------------------------------
# Each reads partition 0 of `topic` from the beginning until it has `count`
# records (bounded by TIMEOUT_S) and returns them as Records.

_KCAT_FORMAT = "%o|%T|%K|%S|%h\\n%k%s\\n"


def consume_kcat(bootstrap: str, topic: str, count: int) -> list[Record]:
    out = subprocess.run(
        [KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-X", "check.crcs=true", "-f", _KCAT_FORMAT],
        check=True, timeout=TIMEOUT_S, capture_output=True,
    ).stdout
    records = []
    pos = 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        offset, timestamp, key_length, value_length, header_text = out[pos:end].split(b"|", 4)
        pos = end + 1
        key = value = None
        if int(key_length) >= 0:
            key = out[pos:pos + int(key_length)]
            pos += int(key_length)
        if int(value_length) >= 0:
            value = out[pos:pos + int(value_length)]
            pos += int(value_length)
        assert out[pos:pos + 1] == b"\n", f"kcat output out of step at byte {pos}"
        pos += 1
        headers = []
        for pair in header_text.split(b",") if header_text else []:
            name, _, text = pair.partition(b"=")
            headers.append((name.decode(), None if text == b"NULL" else text))
        records.append(Record(key, value, tuple(headers), int(timestamp), int(offset)))
    return records


def consume_confluent(bootstrap: str, topic: str, count: int) -> list[Record]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "interop-assign-only", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "check.crcs": True,
    })
    records: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=count - len(records), timeout=1.0):
                if msg.error() is not None:
                    raise AssertionError(f"confluent-kafka consumer: {msg.error()}")
                timestamp_type, timestamp = msg.timestamp()
                records.append(Record(msg.key(), msg.value(), tuple(msg.headers() or ()), timestamp,
                                      msg.offset(), timestamp_type - 1))  # librdkafka: 1 = create time
    finally:
        consumer.close()
    return records


def consume_kafka_python(bootstrap: str, topic: str, count: int) -> list[Record]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", check_crcs=True,
                             request_timeout_ms=int(TIMEOUT_S * 1000))
    records: list[Record] = []
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                for msg in batch:
                    records.append(Record(msg.key, msg.value, tuple(msg.headers), msg.timestamp, msg.offset,
                                          msg.timestamp_type))
    finally:
        consumer.close()
    return records


def consume_aiokafka(bootstrap: str, topic: str, count: int) -> list[Record]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> list[Record]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", check_crcs=True,
                                    request_timeout_ms=int(TIMEOUT_S * 1000))
        await consumer.start()
        records: list[Record] = []
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            deadline = time.monotonic() + TIMEOUT_S
            while len(records) < count and time.monotonic() < deadline:
                for batch in (await consumer.getmany(partition, timeout_ms=1000)).values():
                    for msg in batch:
                        records.append(Record(msg.key, msg.value, tuple(msg.headers), msg.timestamp,
                                              msg.offset, msg.timestamp_type))
        finally:
            await consumer.stop()
        return records

    return asyncio.run(go())


CONSUME = {
    "kcat": consume_kcat,
    "confluent": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}


# --- producer × codec × consumer --------------------------------------------


_produced: dict[tuple[str, str], list[int] | None] = {}


def produced(bootstrap: str, producer: str, codec: str) -> list[int] | None:
    """Produce to C{interop-<producer>-<codec>} once per module; the acknowledged offsets."""
    key = (producer, codec)
    if key not in _produced:
        _produced[key] = PRODUCE[producer](bootstrap, topic_name(producer, codec), codec)
    return _produced[key]


_timestamps_seen: dict[tuple[str, str], list[int]] = {}


def check_produce_then_consume(topics: Any, producer: str, codec: str, consumer: str) -> None:
    """
    C{consumer} reads back what C{producer} sent with C{codec}: offsets 0..N-1,
    keys, values and headers byte for byte, and the create times the producer
    set (kcat's own times must agree across consumers).
    """
    bootstrap = topics.bootstrap
    acknowledged = produced(bootstrap, producer, codec)
    if acknowledged is not None:
        assert acknowledged == list(range(RECORD_COUNT))

    got = CONSUME[consumer](bootstrap, topic_name(producer, codec), RECORD_COUNT)

    assert [r.offset for r in got] == list(range(RECORD_COUNT))
    want = expected_records(producer)
    for sent, read in zip(want, got):
        assert (read.key, read.value, read.headers) == (sent.key, sent.value, sent.headers), f"offset {read.offset}"
    if producer == "kcat":
        seen = _timestamps_seen.setdefault((producer, codec), [r.timestamp_ms for r in got])
        assert [r.timestamp_ms for r in got] == seen
        assert all(r.timestamp_ms > BASE_TIMESTAMP_MS for r in got)
    else:
        assert [r.timestamp_ms for r in got] == [r.timestamp_ms for r in want]
    if consumer != "kcat":
        assert {r.timestamp_type for r in got} == {CREATE_TIME}


#: Record batch attributes' compression bits (Kafka protocol guide, "Record Batch").
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

#: baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32,
#: attributes i16, lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64,
#: producerId i64, producerEpoch i16, baseSequence i32, recordCount i32.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def stored_batches(broker: Any, topic: str) -> list[dict[str, int]]:
    """The record batch headers in partition 0's segment files, in order."""
    batches = []
    for path in sorted(glob.glob(os.path.join(broker.log_dir, f"data-{broker.broker_id}", f"{topic}-0", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + _BATCH_HEADER.size <= len(data):
            (base_offset, length, _epoch, magic, _crc, attributes, last_delta, _base_ts, max_ts,
             producer_id, _producer_epoch, base_sequence, count) = _BATCH_HEADER.unpack_from(data, pos)
            batches.append({"base_offset": base_offset, "magic": magic, "codec": attributes & 7,
                            "last_offset_delta": last_delta, "max_timestamp": max_ts,
                            "producer_id": producer_id, "base_sequence": base_sequence, "count": count})
            pos += 12 + length
        assert pos == len(data), f"{path}: {len(data) - pos} trailing bytes"
    return batches


# librdkafka only compresses when the broker's ApiVersions satisfy its feature
# checks (Produce v0 listed: librdkafka#4956; FindCoordinator listed for lz4);
# otherwise it logs "Broker does not support compression type <codec>" and sends
# the batch uncompressed.  The codec check below catches that.


def check_batches_stored_as_produced(topics: Any, producer: str, codec: str) -> None:
    """
    The broker keeps each producer's batches as sent (compression.type=producer):
    magic 2, the producer's codec, contiguous offsets, and -- every producer
    here being idempotent -- a producer id from InitProducerId and sequences
    that follow the offsets.
    """
    produced(topics.bootstrap, producer, codec)
    batches = stored_batches(topics, topic_name(producer, codec))
    assert batches, "no batches on disk"
    assert {b["magic"] for b in batches} == {2}
    assert {b["codec"] for b in batches} == {CODEC_IDS[codec]}
    next_offset = 0
    for batch in batches:
        assert batch["base_offset"] == next_offset
        assert batch["count"] == batch["last_offset_delta"] + 1
        assert batch["base_sequence"] == batch["base_offset"]  # one producer session per topic
        next_offset += batch["count"]
    assert next_offset == RECORD_COUNT
    assert len({b["producer_id"] for b in batches}) == 1 and batches[0]["producer_id"] >= 0
    if producer != "kcat":
        assert max(b["max_timestamp"] for b in batches) == max(r.timestamp_ms for r in record_set())


# --- metadata, admin, partitioner -------------------------------------------


def check_kcat_metadata_listing(topics: Any) -> None:
    """C{kcat -L} lists the broker (as controller) and the topics' partitions led by it."""
    out = subprocess.run([KCAT, "-b", topics.bootstrap, "-L"], check=True, timeout=TIMEOUT_S,
                         capture_output=True, text=True).stdout
    assert f"broker 0 at {topics.bootstrap}" in out
    assert "1 brokers:" in out
    assert f'topic "{topic_name("kcat", "none")}" with 1 partitions:' in out
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in out


def check_kafka_python_admin_create_and_describe(broker: Any) -> None:
    """kafka-python's KafkaAdminClient creates a 3-partition topic and describes its configs."""
    from kafka import KafkaConsumer
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        admin.create_topics({"interop-admin-kafka-python": {"num_partitions": 3, "replication_factor": 1}},
                            wait_for_metadata=True)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "interop-admin-kafka-python")],
                                           config_filter="all")
    finally:
        admin.close()
    configs = described["topic"]["interop-admin-kafka-python"]
    assert "cleanup.policy" in configs or "retention.ms" in configs, configs
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        assert consumer.partitions_for_topic("interop-admin-kafka-python") == {0, 1, 2}
    finally:
        consumer.close()


def check_aiokafka_admin_create_and_describe(broker: Any) -> None:
    """aiokafka's AIOKafkaAdminClient creates a 3-partition topic and describes its configs."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def go() -> tuple[Any, Any, Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000))
        await admin.start()
        try:
            created = await admin.create_topics([NewTopic("interop-admin-aiokafka", 3, 1)])
            described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC,
                                                                     "interop-admin-aiokafka")])
            topics_meta = await admin.describe_topics(["interop-admin-aiokafka"])
            return created, described, topics_meta
        finally:
            await admin.close()

    created, described, topics_meta = asyncio.run(go())
    created = created.to_object()
    assert [(t["topic"], t["error_code"]) for t in created["topic_errors"]] == [("interop-admin-aiokafka", 0)], created
    (response,) = described
    (resource,) = response.to_object()["resources"]
    assert (resource["error_code"], resource["resource_name"]) == (0, "interop-admin-aiokafka"), resource
    assert resource["config_entries"], resource
    (meta,) = topics_meta
    assert sorted(p["partition"] for p in meta["partitions"]) == [0, 1, 2]


def check_same_key_same_partition(broker: Any) -> None:
    """
    confluent-kafka with C{partitioner=murmur2_random} and kafka-python's
    default partitioner (both murmur2, as the Java client) put each key in the
    same partition of a 6-partition topic.
    """
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    create_topics(broker.bootstrap, {"interop-keyed-confluent": 6, "interop-keyed-kafka-python": 6})
    keys = [b"key-%d" % i for i in range(60)]

    confluent: dict[bytes, int] = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random",
                         "enable.idempotence": True})

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        confluent[msg.key()] = msg.partition()

    for key in keys:
        producer.produce("interop-keyed-confluent", value=b"v", key=key, on_delivery=report)
    assert producer.flush(TIMEOUT_S) == 0

    kafka_python = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        futures = {key: kafka_python.send("interop-keyed-kafka-python", value=b"v", key=key) for key in keys}
        kafka_python.flush(TIMEOUT_S)
        python = {key: future.get(TIMEOUT_S).partition for key, future in futures.items()}
    finally:
        kafka_python.close(TIMEOUT_S)

    assert confluent == python
    assert len(set(python.values())) == 6, "60 keys should reach all 6 partitions"


def check_broker_log_clean(broker: Any) -> None:
    """After all of the above, the broker logged no traceback or unhandled error."""
    lines = broker.log_text().splitlines()
    bad = [i for i, line in enumerate(lines) if "Traceback" in line or "Unhandled" in line or "[-] ERROR" in line]
    # each finding with the lines around it, so that a failure says what happened
    assert not bad, "\n---\n".join("\n".join(lines[max(0, i - 3):i + 25]) for i in bad[:5])


# --- the test case: one broker for the module; runs under trial and pytest alike ----------


class InteropTests(ClassFixture, unittest.TestCase):
    """Every check above against one real broker (and its ZooKeeper)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1)
        cls.broker = cls._cluster.__enter__()[0]
        create_topics(cls.broker.bootstrap, {topic_name(p, c): 1 for p in PRODUCERS for c in CODECS})

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def test_kcat_metadata_listing(self) -> None:
        check_kcat_metadata_listing(self.broker)

    def test_kafka_python_admin_create_and_describe(self) -> None:
        check_kafka_python_admin_create_and_describe(self.broker)

    def test_aiokafka_admin_create_and_describe(self) -> None:
        check_aiokafka_admin_create_and_describe(self.broker)

    def test_same_key_same_partition(self) -> None:
        check_same_key_same_partition(self.broker)

    def test_zz_broker_log_clean(self) -> None:
        """Last (tests run in name order): after all of the above, no traceback or error logged."""
        check_broker_log_clean(self.broker)


def _add_test(name: str, check: Any, *args: str) -> None:
    def test(self: InteropTests) -> None:
        check(self.broker, *args)

    test.__name__ = name
    test.__doc__ = check.__doc__
    setattr(InteropTests, name, test)


for _producer in PRODUCERS:
    for _codec in CODECS:
        _add_test(f"test_batches_stored_as_produced_{_producer}_{_codec}", check_batches_stored_as_produced,
                  _producer, _codec)
        for _consumer in CONSUMERS:
            _add_test(f"test_produce_then_consume_{_producer}_{_codec}_{_consumer}", check_produce_then_consume,
                      _producer, _codec, _consumer)
