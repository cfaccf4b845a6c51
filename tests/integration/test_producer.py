"""
Integration tests of L{kafkatw.client.producer.Producer} against a real broker
(ZooKeeper and broker processes from L{running_cluster}); records are read back
with confluent-kafka (librdkafka).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.internet import defer, task, threads
from twisted.trial import unittest

from kafkatw.client.producer import Producer
from kafkatw.testing import ClassFixture, running_cluster

TIMEOUT_S = 60.0


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name].result(15)


def read_all(bootstrap: str, topic: str, partitions: int, expected: int,
             timeout_s: float = 30) -> dict[int, list[tuple[int, bytes | None, bytes]]]:
    """partition -> [(offset, key, value)] in offset order, read from the beginning."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "producer-it", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list] = {p: [] for p in range(partitions)}
    count = 0
    deadline = time.monotonic() + timeout_s
    try:
        while count < expected and time.monotonic() < deadline:
            for message in consumer.consume(10000, 0.5):
                if message.error():
                    continue
                out[message.partition()].append((message.offset(), message.key(), message.value()))
                count += 1
        # anything beyond what was expected (duplicates) shows up here
        for message in consumer.consume(10000, 0.5):
            if not message.error():
                out[message.partition()].append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return out


class ProducerIntegrationTests(ClassFixture, unittest.TestCase):
    timeout = 120

    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1)
        cls.brokers = cls._cluster.__enter__()
        cls.bootstrap = cls.brokers[0].bootstrap

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def test_100k_keyed_records_six_partitions(self) -> defer.Deferred:
        """Every record is written once, where its key says, in the order sent per partition."""
        return defer.ensureDeferred(self._keyed())

    async def _keyed(self) -> None:
        from twisted.internet import reactor

        topic, partitions, count = "keyed", 6, 100_000
        await threads.deferToThread(create_topic, self.bootstrap, topic, partitions)
        producer = Producer(reactor, self.bootstrap, linger_ms=5)
        results: list[defer.Deferred] = []
        for i in range(count):
            results.append(producer.send(topic, b"%d" % i, key=b"key-%d" % (i % 997)))
            if i % 2000 == 1999:
                await producer.ready()
                await task.deferLater(reactor, 0, lambda: None)
        await producer.flush()
        metadata = [self.successResultOf(d) for d in results]
        await producer.close()

        from kafkatw.client.partitioner import partition_for_key

        written = await threads.deferToThread(read_all, self.bootstrap, topic, partitions, count)
        self.assertEqual(sum(len(v) for v in written.values()), count)
        seen = set()
        for p, records in written.items():
            numbers = [int(value) for _offset, _key, value in records]
            self.assertEqual(numbers, sorted(numbers), f"partition {p} out of order")
            for _offset, key, value in records:
                self.assertEqual(partition_for_key(key, partitions), p)
                seen.add(int(value))
        self.assertEqual(seen, set(range(count)))
        by_position = {(p, offset): int(value) for p, records in written.items() for offset, _k, value in records}
        for i, md in enumerate(metadata):
            self.assertEqual(by_position[(md.partition, md.offset)], i)

    def test_unkeyed_records_with_on_delivery_one_partition(self) -> defer.Deferred:
        """
        send(topic, value, on_delivery=f), the hot path (compiled when the
        extension is built): every record written once, in order, and every
        on_delivery called once with its record's offset.
        """
        return defer.ensureDeferred(self._unkeyed())

    async def _unkeyed(self) -> None:
        from twisted.internet import reactor

        topic, count = "unkeyed", 50_000
        await threads.deferToThread(create_topic, self.bootstrap, topic, 1)
        producer = Producer(reactor, self.bootstrap)
        delivered: list = []

        def on_delivery(metadata: Any, error: Exception | None) -> None:
            delivered.append(error if error is not None else metadata.offset)

        for i in range(count):
            producer.send(topic, b"%d" % i, on_delivery=on_delivery)
            if i % 385 == 384:
                await producer.ready()
                await task.deferLater(reactor, 0, lambda: None)
        await producer.flush()
        await producer.close()
        self.assertEqual(delivered, list(range(count)))
        written = await threads.deferToThread(read_all, self.bootstrap, topic, 1, count)
        self.assertEqual([(offset, key, value) for offset, key, value in written[0]],
                         [(i, None, b"%d" % i) for i in range(count)])

    def test_producer_perf_test(self) -> defer.Deferred:
        """kafkatw producer-perf-test with Kafka's defaults: Kafka's final line, and every record written."""
        return defer.ensureDeferred(self._perf_test())

    async def _perf_test(self) -> None:
        topic, count = "perf", 20_000
        await threads.deferToThread(create_topic, self.bootstrap, topic, 1)
        command = [sys.executable, "-m", "kafkatw.cli.main", "producer-perf-test", "--topic", topic,
                   "--num-records", str(count), "--record-size", "200", "--throughput", "-1",
                   "--producer-props", "acks=1", f"bootstrap.servers={self.bootstrap}"]
        out = await threads.deferToThread(subprocess.run, command, capture_output=True, text=True, timeout=60,
                                          env=dict(os.environ, KAFKATW_NO_PROGRESS="1"))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout.strip().splitlines()[-1],
                         r"^20000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency,"
                         r" [\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.$")
        written = await threads.deferToThread(read_all, self.bootstrap, topic, 1, count)
        self.assertEqual([offset for offset, _key, _value in written[0]], list(range(count)))
        self.assertEqual({len(value) for _offset, _key, value in written[0]}, {200})

    def test_send_to_a_missing_topic_auto_creates_it(self) -> defer.Deferred:
        """Like Java's producer: Metadata asks for auto-creation; the broker creates the topic."""
        return defer.ensureDeferred(self._auto_create())

    async def _auto_create(self) -> None:
        from twisted.internet import reactor

        producer = Producer(reactor, self.bootstrap, max_block_ms=20000)
        try:
            metadata = await producer.send("created-on-first-send", b"hello")
        finally:
            await producer.close()
        self.assertEqual((metadata.topic, metadata.partition, metadata.offset), ("created-on-first-send", 0, 0))

    def test_broker_restart_acks_1(self) -> defer.Deferred:
        """
        acks=1 with retries and one request in flight: a clean broker restart in
        the middle loses no acknowledged record and keeps each partition's order
        of first occurrences (a retried batch may be written twice).
        """
        return defer.ensureDeferred(self._restart("restart-acks1", acks=1, idempotent=False))

    def test_broker_restart_idempotent(self) -> defer.Deferred:
        """With idempotence the same restart leaves every record exactly once, in order."""
        return defer.ensureDeferred(self._restart("restart-idem", acks="all", idempotent=True))

    async def _restart(self, topic: str, acks: Any, idempotent: bool) -> None:
        from twisted.internet import reactor

        partitions, count = 3, 30_000
        await threads.deferToThread(create_topic, self.bootstrap, topic, partitions)
        producer = Producer(reactor, self.bootstrap, acks=acks, linger_ms=5, retry_backoff_ms=50,
                            max_in_flight_requests_per_connection=1 if not idempotent else 5,
                            enable_idempotence=idempotent, request_timeout_ms=5000)
        results: list[defer.Deferred] = []
        restart: defer.Deferred | None = None
        broker = self.brokers[0]

        # The middle third of the records is sent while the broker is down, for
        # certain: sending waits for the stop, and the start waits for those sends.
        down: defer.Deferred = defer.Deferred()
        may_start = threading.Event()
        self.addCleanup(may_start.set)

        def restart_broker() -> None:
            try:
                broker.stop()
            finally:
                reactor.callFromThread(down.callback, None)
            may_start.wait(TIMEOUT_S)
            broker.start()

        for i in range(count):
            results.append(producer.send(topic, b"%d" % i, key=b"%d" % (i % 101)))
            if i % 500 == 499:
                if not count // 3 <= i < 2 * count // 3:  # (while the broker is down nothing drains)
                    await producer.ready()
                await task.deferLater(reactor, 0.01, lambda: None)
            if i == count // 3:
                restart = threads.deferToThread(restart_broker)
                await down
            if i == 2 * count // 3:
                may_start.set()
        assert restart is not None
        await restart
        await producer.flush()
        outcomes = []
        for d in results:
            outcomes.append(self.successResultOf(d))
        await producer.close()

        written = await threads.deferToThread(read_all, self.bootstrap, topic, partitions, count)
        values = [int(v) for records in written.values() for _o, _k, v in records]
        self.assertEqual(set(values), set(range(count)), "an acknowledged record is missing")
        if idempotent:
            self.assertEqual(len(values), count, "duplicates despite idempotence")
        for p, records in written.items():
            first: list[int] = []
            seen: set[int] = set()
            for _offset, _key, value in records:
                n = int(value)
                if n not in seen:
                    seen.add(n)
                    first.append(n)
            self.assertEqual(first, sorted(first), f"partition {p}: first occurrences out of order")
