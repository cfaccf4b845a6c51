"""
Integration tests of the Twisted L{Consumer} and the blocking facade against a
real broker (and ZooKeeper), with records produced by confluent-kafka.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time

from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.client.consumer import Consumer, ConsumerRecord
from kafkatw.errors import OffsetOutOfRangeError
from kafkatw.testing import ClassFixture, running_cluster

PARTITIONS = 6


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name].result(15)


def produce(bootstrap: str, topic: str, count: int, compression: str = "none", start: int = 0,
            headers: bool = False) -> dict[tuple[int, int], tuple]:
    """Produce keyed records; return (partition, offset) -> (key, value, headers) from the delivery reports."""
    delivered: dict[tuple[int, int], tuple] = {}

    def report(err, message, sent_headers) -> None:
        assert err is None, err
        delivered[(message.partition(), message.offset())] = (message.key(), message.value(), sent_headers)

    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": compression,
                                  "partitioner": "murmur2_random"})
    for i in range(start, start + count):
        sent = (("h", b"%d" % i),) if headers and i % 3 == 0 else ()
        producer.produce(topic, key=b"key-%d" % (i % 97), value=b"value-%d-" % i + b"x" * (i % 50),
                         headers=list(sent) or None,
                         on_delivery=lambda err, message, sent=sent: report(err, message, sent))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    return delivered


def _child_consume(bootstrap: str, topic: str, queue) -> None:
    try:
        from kafkatw.client.blocking import BlockingConsumer

        with BlockingConsumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000) as consumer:
            consumer.assign([(topic, 0)])
            queue.put(("ok", os.getpid(), [r.value for r in consumer]))
    except BaseException as e:  # pragma: no cover - reported to the parent
        queue.put(("error", os.getpid(), repr(e)))


class ConsumerIntegrationTests(ClassFixture, unittest.TestCase):
    timeout = 60

    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1)
        cls.brokers = cls._cluster.__enter__()
        cls.bootstrap = cls.brokers[0].bootstrap
        create_topic(cls.bootstrap, "records", PARTITIONS)
        cls.expected = produce(cls.bootstrap, "records", 6000, "none", headers=True)
        cls.expected.update(produce(cls.bootstrap, "records", 3000, "lz4", start=6000))
        cls.expected.update(produce(cls.bootstrap, "records", 3000, "zstd", start=9000))
        cls.expected.update(produce(cls.bootstrap, "records", 3000, "gzip", start=12000))
        cls.expected.update(produce(cls.bootstrap, "records", 3000, "snappy", start=15000))

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def consumer(self, **options) -> Consumer:
        from twisted.internet import reactor

        consumer = Consumer(reactor, self.bootstrap, **options)
        self.addCleanup(consumer.close)
        return consumer

    @defer.inlineCallbacks
    def test_consumes_everything_exactly(self):
        consumer = self.consumer(auto_offset_reset="earliest", max_partition_fetch_bytes=64 * 1024,
                                 max_buffered_bytes=512 * 1024)
        consumer.assign([("records", p) for p in range(PARTITIONS)])
        got: dict[tuple[int, int], tuple] = {}
        deadline = time.monotonic() + 30
        while len(got) < len(self.expected) and time.monotonic() < deadline:
            for r in (yield consumer.poll(timeout_ms=1000)):
                self.assertIsInstance(r, ConsumerRecord)
                self.assertNotIn((r.partition, r.offset), got)
                got[(r.partition, r.offset)] = (r.key, r.value, r.headers)
        self.assertEqual(len(got), len(self.expected))
        wrong = [(tp, got.get(tp), want) for tp, want in self.expected.items() if got.get(tp) != want]
        self.assertEqual(wrong[:3], [], f"{len(wrong)} records differ")
        for p in range(PARTITIONS):
            offsets = sorted(o for q, o in got if q == p)
            self.assertEqual(offsets, list(range(len(offsets))))
            self.assertEqual((yield consumer.position(("records", p))), len(offsets))
            self.assertEqual(consumer.highwater(("records", p)), len(offsets))
        self.assertEqual(len({p for p, _ in got}), PARTITIONS)

    @defer.inlineCallbacks
    def test_seek_and_offset_lookups(self):
        consumer = self.consumer()
        tp = ("records", 2)
        count = sum(1 for p, _ in self.expected if p == 2)
        consumer.assign([tp])
        self.assertEqual((yield consumer.position(tp)), count)  # latest by default
        yield consumer.seek_to_beginning()
        self.assertEqual((yield consumer.position(tp)), 0)
        consumer.seek(tp, 17)
        records = yield consumer.poll(timeout_ms=5000, max_records=5)
        self.assertEqual([r.offset for r in records], [17, 18, 19, 20, 21])
        self.assertEqual([r.value for r in records], [self.expected[(2, o)][1] for o in range(17, 22)])
        self.assertEqual((yield consumer.position(tp)), 22)
        yield consumer.seek_to_end(tp)
        self.assertEqual((yield consumer.position(tp)), count)
        self.assertEqual((yield consumer.poll(timeout_ms=200)), [])

        consumer.seek(tp, 100)
        [record] = yield consumer.poll(timeout_ms=5000, max_records=1)
        found = yield consumer.offsets_for_times({tp: record.timestamp_ms, ("records", 3): 2 ** 50})
        # the first record at or after the time: at most offset 100 (earlier records may share
        # its millisecond), with exactly its timestamp (one producer: create times never go back)
        self.assertLessEqual(found[tp][0], 100)
        self.assertEqual(found[tp][1], record.timestamp_ms)
        self.assertIsNone(found[("records", 3)])
        self.assertEqual((yield consumer.beginning_offsets([tp])), {tp: 0})
        self.assertEqual((yield consumer.end_offsets([tp])), {tp: count})

    @defer.inlineCallbacks
    def test_out_of_range(self):
        tp = ("records", 1)
        strict = self.consumer(auto_offset_reset="none")
        strict.assign([tp])
        strict.seek(tp, 10 ** 9)
        yield self.assertFailure(strict.poll(timeout_ms=5000), OffsetOutOfRangeError)
        lenient = self.consumer(auto_offset_reset="earliest")
        lenient.assign([tp])
        lenient.seek(tp, 10 ** 9)
        records = yield lenient.poll(timeout_ms=5000, max_records=3)
        self.assertEqual([r.offset for r in records], [0, 1, 2])

    @defer.inlineCallbacks
    def test_async_iteration(self):
        consumer = self.consumer(auto_offset_reset="earliest")
        consumer.assign([("records", 4)])
        count = sum(1 for p, _ in self.expected if p == 4)

        async def read() -> list[int]:
            offsets = []
            async for record in consumer:
                offsets.append(record.offset)
                if len(offsets) == count:
                    break
            return offsets

        offsets = yield defer.Deferred.fromCoroutine(read())
        self.assertEqual(offsets, list(range(count)))

    def test_blocking_facade_from_a_plain_script(self):
        script = textwrap.dedent(f"""
            from kafkatw.client.blocking import BlockingConsumer, BlockingProducer
            with BlockingProducer({self.bootstrap!r}) as producer:
                meta = producer.send_and_wait("script", b"hello", key=b"k", partition=0, timeout_s=30)
                futures = [producer.send("script", b"m%d" % i, partition=0) for i in range(1000)]
                producer.flush(30)
                assert [f.get(1).offset for f in futures] == list(range(1, 1001))
            with BlockingConsumer({self.bootstrap!r}, auto_offset_reset="earliest",
                                  consumer_timeout_ms=2000) as consumer:
                consumer.assign([("script", 0)])
                values = [r.value for r in consumer]
                assert consumer.position(("script", 0)) == 1001
            print(meta.offset, len(values), values[0].decode(), values[-1].decode())
        """)
        create_topic(self.bootstrap, "script", 1)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["0", "1001", "hello", "m999"])

    def test_blocking_facade_in_forked_children(self):
        from kafkatw.client.blocking import BlockingProducer

        create_topic(self.bootstrap, "forked", 1)
        context = multiprocessing.get_context("fork")
        results = []
        # 1. the parent has not used the facade yet (its reactor thread is not running)
        produce(self.bootstrap, "forked", 10)
        queue = context.Queue()
        child = context.Process(target=_child_consume, args=(self.bootstrap, "forked", queue))
        child.start()
        results.append(queue.get(timeout=45))
        child.join(10)
        # 2. the parent uses it first, then forks
        with BlockingProducer(self.bootstrap) as producer:
            producer.send_and_wait("forked", b"from-parent", key=b"k", timeout_s=30)
            child = context.Process(target=_child_consume, args=(self.bootstrap, "forked", queue))
            child.start()
            results.append(queue.get(timeout=45))
            child.join(10)
            # the parent's facade still works
            self.assertEqual(producer.send_and_wait("forked", b"after", timeout_s=30).offset, 11)
        for status, pid, values in results:
            self.assertEqual(status, "ok", values)
            self.assertNotEqual(pid, os.getpid())
        self.assertEqual(len(results[0][2]), 10)
        self.assertEqual(results[1][2][-1], b"from-parent")

    def test_client_made_before_fork_refuses_to_work_in_the_child(self):
        from kafkatw.client.blocking import BlockingConsumer, WrongProcessError

        consumer = BlockingConsumer(self.bootstrap)
        self.addCleanup(consumer.close)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                consumer.assign([("records", 0)])
                os._exit(1)
            except WrongProcessError:
                os._exit(0)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)

    def test_console_consumer_and_perf_test(self):
        kafkatw = [sys.executable, "-m", "kafkatw.cli.main"]
        out = subprocess.run(kafkatw + ["console-consumer", "--bootstrap-server", self.bootstrap, "--topic", "records",
                                        "--partition", "5", "--offset", "3", "--max-messages", "4",
                                        "--property", "print.offset=true"],
                             capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines, [b"Offset:%d\t" % o + self.expected[(5, o)][1] for o in range(3, 7)])
        self.assertIn(b"Processed a total of 4 messages", out.stderr)

        out = subprocess.run(kafkatw + ["consumer-perf-test", "--bootstrap-server", self.bootstrap, "--topic",
                                        "records", "--messages", str(len(self.expected))],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        header, figures = out.stdout.strip().splitlines()
        self.assertTrue(header.startswith("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg"))
        self.assertEqual(int(figures.split(", ")[4]), len(self.expected))
