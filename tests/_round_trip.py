"""
Produce records to partition 0 of a topic with one client library and read
them back from the beginning with the same library: the round trips that the
security interop tests (C{tests/interop/test_sasl.py},
C{tests/integration/test_security_e2e.py}) run with each client over each
listener.  Each function takes the library's own connection settings, so the
same loop serves plaintext, SASL and SASL_SSL.

Each returns the values read (at most C{len(records)}, waiting up to
C{timeout_s} seconds for them); the caller compares them with C{records}.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from typing import Any, Callable, Iterable

KCAT = shutil.which("kcat") or "/usr/bin/kcat"


def round_trip_kcat(settings: list[str], topic: str, records: list[bytes], timeout_s: float,
                    produce_settings: tuple[str, ...] = ()) -> list[bytes]:
    """
    @param settings: kcat's C{-b} and C{-X} arguments for both runs.
    @param produce_settings: more C{-X} arguments for the producing run.
    """
    subprocess.run([KCAT, *settings, *produce_settings, "-P", "-t", topic, "-p", "0"],
                   input=b"\n".join(records) + b"\n", check=True, timeout=timeout_s, capture_output=True)
    out = subprocess.run([KCAT, *settings, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                          "-c", str(len(records)), "-f", "%s\n"], check=True, timeout=timeout_s, capture_output=True)
    return out.stdout.splitlines()


def round_trip_confluent(conf: dict[str, Any], topic: str, records: list[bytes], timeout_s: float,
                         group_id: str) -> list[bytes]:
    """
    @param conf: confluent-kafka's (librdkafka's) settings for both clients.
    @param group_id: the consumer's C{group.id} (assign only, nothing committed).
    @raise AssertionError: a record was not delivered or a fetch failed.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    producer = Producer(conf)
    for value in records:
        producer.produce(topic, value, partition=0)
    assert producer.flush(timeout_s) == 0
    consumer = Consumer({**conf, "group.id": group_id, "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while len(values) < len(records) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10, timeout=1.0):
                assert msg.error() is None, msg.error()
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def round_trip_kafka_python(settings: dict[str, Any], topic: str, records: list[bytes],
                            timeout_s: float) -> list[bytes]:
    """@param settings: kafka-python's keyword arguments for both clients."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(**settings)
    for value in records:
        producer.send(topic, value, partition=0).get(timeout=timeout_s)
    producer.close()
    consumer = KafkaConsumer(group_id=None, enable_auto_commit=False, **settings)
    values: list[bytes] = []
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        deadline = time.monotonic() + timeout_s
        while len(values) < len(records) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                values.extend(msg.value for msg in batch)
    finally:
        consumer.close()
    return values


def round_trip_aiokafka(settings: dict[str, Any], topic: str, records: list[bytes], timeout_s: float,
                        ssl_cafile: str | None = None) -> list[bytes]:
    """
    @param settings: aiokafka's keyword arguments for both clients.
    @param ssl_cafile: the CA file of a TLS listener (aiokafka takes an SSL
        context, made here in the event loop).
    """
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    async def go() -> list[bytes]:
        tls = {} if ssl_cafile is None else {"ssl_context": create_ssl_context(cafile=ssl_cafile)}
        producer = AIOKafkaProducer(**tls, **settings)
        await producer.start()
        try:
            for value in records:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **tls, **settings)
        await consumer.start()
        values: list[bytes] = []
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            deadline = time.monotonic() + timeout_s
            while len(values) < len(records) and time.monotonic() < deadline:
                for batch in (await consumer.getmany(partition, timeout_ms=1000)).values():
                    values.extend(msg.value for msg in batch)
        finally:
            await consumer.stop()
        return values

    return asyncio.run(go())


def round_trip_kafkatw(client_kwargs: Callable[[], dict[str, Any]], topic: str, records: list[bytes],
                       timeout_s: float) -> list[bytes]:
    """
    @param client_kwargs: called once per client: the keyword arguments of
        L{kafkatw.client.blocking.BlockingProducer} and C{BlockingConsumer}
        (kafka-python's names, or C{client=KafkaClient(...)}).
    """
    from kafkatw.client.blocking import BlockingConsumer, BlockingProducer

    producer = BlockingProducer(**client_kwargs())
    for value in records:
        producer.send(topic, value, partition=0).get(timeout_s)
    producer.close()
    consumer = BlockingConsumer(**client_kwargs())
    values: list[bytes] = []
    try:
        consumer.assign([(topic, 0)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        while len(values) < len(records) and time.monotonic() < deadline:
            values.extend(r.value for r in consumer.poll(timeout_ms=1000))
    finally:
        consumer.close()
    return values


def add_round_trip_tests(case: type, clients: Iterable[str], mechanisms: Iterable[str]) -> None:
    """
    Add C{test_<client>_<mechanism>} to C{case} (names with C{_} for C{-},
    lower case) for every client and SASL mechanism, each calling
    C{self.check(client, mechanism)}.
    """
    mechanisms = list(mechanisms)
    for client in clients:
        for mechanism in mechanisms:
            def test(self: Any, client: str = client, mechanism: str = mechanism) -> None:
                self.check(client, mechanism)

            name = f"test_{client.replace('-', '_')}_{mechanism.replace('-', '_').lower()}"
            test.__name__ = name
            setattr(case, name, test)
