"""
Transactions with real processes: a real ZooKeeper, kafkatw brokers, and the
transactional producers of librdkafka (confluent-kafka), kafka-python and
aiokafka; read-committed consumers (librdkafka, kcat) see only committed
records.

One single-broker cluster serves the interop tests (one test class); the
coordinator-failover test runs its own three brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.testing import ClassFixture, running_cluster, wait_for

_SINGLE = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


def create_topic(bootstrap: str, topic: str, partitions: int = 2, rf: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf, config=config or {})])[topic].result(20)


def read_values(bootstrap: str, topic: str, isolation: str, partitions: int = 2, expect: int | None = None,
                timeout_s: float = 15.0) -> list[bytes]:
    """Every value of C{topic} a consumer with C{isolation.level=isolation} sees from the start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic()}",
                         "enable.auto.commit": False, "isolation.level": isolation, "fetch.wait.max.ms": 100,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(message.partition())
                    if len(at_end) == partitions and (expect is None or len(values) >= expect):
                        break
                continue
            at_end.discard(message.partition())
            values.append(message.value())
    finally:
        consumer.close()
    return sorted(values)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int = 2) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def transactional_producer(bootstrap: str, transactional_id: str, **config: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         **config})
    producer.init_transactions(30)
    return producer


class SingleBrokerTestCase(ClassFixture, unittest.TestCase):
    """One broker for the whole class, its ``__transaction_state`` with one replica (L{_SINGLE})."""

    timeout = 180

    @classmethod
    def setUpClass(cls) -> None:
        cls._stack = contextlib.ExitStack()
        cls.cluster = cls._stack.enter_context(running_cluster(1, overrides=_SINGLE))
        cls.bootstrap = cls.cluster[0].bootstrap

    @classmethod
    def tearDownClass(cls) -> None:
        cls._stack.close()


class InteropTests(SingleBrokerTestCase):
    def test_librdkafka_commit_abort_and_offsets(self) -> None:
        """
        Commit, abort, commit across two partitions with the consumed offsets
        sent to the transaction: read_committed sees the committed records
        only, read_uncommitted sees all, the group's offsets are the committed
        transactions' only.
        """
        bootstrap = self.bootstrap
        create_topic(bootstrap, "rk-out")
        producer = transactional_producer(bootstrap, "rk-1")
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rk-group", "enable.auto.commit": False})
        try:
            for round_, commit in enumerate([True, False, True]):
                producer.begin_transaction()
                for i in range(10):
                    producer.produce("rk-out", f"{round_}-{i}".encode(), partition=i % 2)
                offsets = [TopicPartition("rk-in", 0, 100 * (round_ + 1))]
                producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
                if commit:
                    producer.commit_transaction(30)
                else:
                    producer.abort_transaction(30)
        finally:
            consumer.close()
        committed = read_values(bootstrap, "rk-out", "read_committed", expect=20)
        self.assertEqual(committed, sorted(f"{r}-{i}".encode() for r in (0, 2) for i in range(10)))
        everything = read_values(bootstrap, "rk-out", "read_uncommitted", expect=30)
        self.assertEqual(len(everything), 30)
        self.assertEqual(committed_offsets(bootstrap, "rk-group", "rk-in", 1), [300])
        # kcat (librdkafka 2.0) reading committed only
        if shutil.which("kcat"):
            out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "rk-out", "-o", "beginning", "-e", "-q",
                                  "-X", "isolation.level=read_committed", "-f", "%s\n"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(sorted(out.stdout.split()), sorted(v.decode() for v in committed))

    def test_librdkafka_consume_transform_produce(self) -> None:
        """
        A read-process-write loop (subscribe with read_committed, produce,
        send_offsets_to_transaction, commit); the first instance abandons its
        last transaction half-way and a second instance with the same
        transactional id takes over: the output holds every input once.
        """
        bootstrap = self.bootstrap
        create_topic(bootstrap, "eos-in", partitions=1)
        create_topic(bootstrap, "eos-out", partitions=1)
        source = Producer({"bootstrap.servers": bootstrap})
        for i in range(300):
            source.produce("eos-in", str(i).encode(), partition=0)
        source.flush(10)

        def instance(batches: int, abandon_last: bool) -> None:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-group",
                                 "isolation.level": "read_committed", "enable.auto.commit": False,
                                 "auto.offset.reset": "earliest"})
            consumer.subscribe(["eos-in"])
            producer = transactional_producer(bootstrap, "eos-1")
            try:
                for batch in range(batches):
                    messages = []
                    deadline = time.monotonic() + 20
                    while len(messages) < 50 and time.monotonic() < deadline:
                        messages += [m for m in consumer.consume(50 - len(messages), 0.5) if not m.error()]
                    if not messages:
                        break
                    producer.begin_transaction()
                    for m in messages:
                        producer.produce("eos-out", b"out-" + m.value(), partition=0)
                    if abandon_last and batch == batches - 1:
                        producer.flush(10)
                        return  # dies with its transaction open: the next instance's init aborts it
                    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                         consumer.consumer_group_metadata(), 30)
                    producer.commit_transaction(30)
            finally:
                consumer.close()

        instance(3, abandon_last=True)  # commits 100, leaves 50 uncommitted
        instance(4, abandon_last=False)  # resumes at the committed offset 100: 4 batches of 50 left
        values = read_values(bootstrap, "eos-out", "read_committed", partitions=1, expect=300)
        self.assertEqual(values, sorted(b"out-%d" % i for i in range(300)))
        self.assertEqual(committed_offsets(bootstrap, "eos-group", "eos-in", 1), [300])
        self.assertEqual(len(read_values(bootstrap, "eos-out", "read_uncommitted", partitions=1, expect=350)), 350)

    def test_zombie_fencing(self) -> None:
        bootstrap = self.bootstrap
        create_topic(bootstrap, "fence-out")
        old = transactional_producer(bootstrap, "fence-1")
        old.begin_transaction()
        old.produce("fence-out", b"zombie", partition=0)
        old.flush(10)
        new = transactional_producer(bootstrap, "fence-1")  # aborts the old one's transaction
        new.begin_transaction()
        new.produce("fence-out", b"alive", partition=1)
        new.commit_transaction(30)
        with self.assertRaises(KafkaException) as raised:
            old.produce("fence-out", b"zombie-2", partition=0)
            old.commit_transaction(30)
        self.assertTrue(raised.exception.args[0].fatal() or raised.exception.args[0].txn_requires_abort())
        self.assertEqual(read_values(bootstrap, "fence-out", "read_committed", expect=1), [b"alive"])

    def test_transaction_timeout_aborts(self) -> None:
        """A transaction left open past transaction.timeout.ms is aborted by the coordinator: the LSO moves on."""
        bootstrap = self.bootstrap
        create_topic(bootstrap, "timeout-out", partitions=1)
        stale = transactional_producer(bootstrap, "timeout-1", **{"transaction.timeout.ms": 2000})
        stale.begin_transaction()
        stale.produce("timeout-out", b"stale", partition=0)
        stale.flush(10)
        other = transactional_producer(bootstrap, "timeout-2")
        other.begin_transaction()
        other.produce("timeout-out", b"fresh", partition=0)
        other.commit_transaction(30)
        # "fresh" comes after "stale": read-committed consumers see it only once "stale" is aborted
        values = wait_for(lambda: read_values(bootstrap, "timeout-out", "read_committed", 1, expect=1,
                                              timeout_s=2) or None, timeout_s=30, what="the timed-out abort")
        self.assertEqual(values, [b"fresh"])
        with self.assertRaises(KafkaException):
            stale.commit_transaction(10)

    def test_kafka_python_transactions(self) -> None:
        from kafka import KafkaProducer

        bootstrap = self.bootstrap
        create_topic(bootstrap, "kp-out")
        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-1", enable_idempotence=True)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("kp-out", b"kp-committed", partition=0)
            producer.commit_transaction()
            producer.begin_transaction()
            producer.send("kp-out", b"kp-aborted", partition=1)
            producer.flush()
            producer.abort_transaction()
        finally:
            producer.close(5)
        self.assertEqual(read_values(bootstrap, "kp-out", "read_committed", expect=1), [b"kp-committed"])
        self.assertEqual(len(read_values(bootstrap, "kp-out", "read_uncommitted", expect=2)), 2)

    def test_aiokafka_transactions(self) -> None:
        from aiokafka import AIOKafkaProducer

        bootstrap = self.bootstrap
        create_topic(bootstrap, "aio-out")

        async def run() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-1")
            await producer.start()
            try:
                async with producer.transaction():
                    await producer.send_and_wait("aio-out", b"aio-committed", partition=0)
                await producer.begin_transaction()
                await producer.send_and_wait("aio-out", b"aio-aborted", partition=1)
                await producer.abort_transaction()
            finally:
                await producer.stop()

        asyncio.run(run())
        self.assertEqual(read_values(bootstrap, "aio-out", "read_committed", expect=1), [b"aio-committed"])


class CoordinatorFailoverTests(unittest.TestCase):
    timeout = 300

    def test_coordinator_sigkill_mid_transaction(self) -> None:
        """
        Three brokers, ``__transaction_state`` and the output replicated three
        times; the coordinator's broker is SIGKILLed right after
        commit_transaction returned (its markers may or may not be out) and,
        in a second transaction, between produce and commit: every
        transaction ends committed or aborted as a whole.
        """
        overrides = {"transaction.state.log.num.partitions": "3", "replica.lag.time.max.ms": "4000",
                     "replica.fetch.wait.max.ms": "200", "zookeeper.session.timeout.ms": "3000"}
        with running_cluster(3, overrides=overrides) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, "ha-out", partitions=2, rf=3, config={"min.insync.replicas": "2"})
            producer = transactional_producer(bootstrap, "ha-1", **{"transaction.timeout.ms": 10000})
            producer.begin_transaction()
            for i in range(20):
                producer.produce("ha-out", f"first-{i}".encode(), partition=i % 2)
            producer.commit_transaction(30)
            coordinator = self._coordinator(bootstrap, "ha-1")
            cluster[coordinator].kill()  # answered: the new coordinator must finish the commit
            producer.begin_transaction()
            for i in range(20):
                producer.produce("ha-out", f"second-{i}".encode(), partition=i % 2)
            try:
                producer.commit_transaction(60)
                second_committed = True
            except KafkaException:
                second_committed = False
            alive = ",".join(b.bootstrap for i, b in enumerate(cluster) if i != coordinator)

            def settled() -> list[bytes] | None:
                # a partition's records become visible when its marker is written: wait for the end state
                values = read_values(alive, "ha-out", "read_committed", expect=20, timeout_s=5)
                first = sum(v.startswith(b"first-") for v in values)
                second = sum(v.startswith(b"second-") for v in values)
                done = first == 20 and second in (0, 20) and (second == 20 or not second_committed)
                return values if done else None

            values = wait_for(settled, timeout_s=120, what="both transactions decided")
            second = [v for v in values if v.startswith(b"second-")]
            self.assertIn(len(second), (0, 20))  # never half
            if second_committed:
                self.assertEqual(len(second), 20)

    def test_partition_leader_sigkill_while_markers_are_written(self) -> None:
        """
        The leader of an output partition is SIGKILLed between the produce and
        commit_transaction: the markers are retried through the new leader and
        the transaction ends committed (or, if EndTxn failed, aborted) as a whole.
        """
        overrides = {"transaction.state.log.num.partitions": "3", "replica.lag.time.max.ms": "4000",
                     "replica.fetch.wait.max.ms": "200", "zookeeper.session.timeout.ms": "3000"}
        with running_cluster(3, overrides=overrides) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, "lk-out", partitions=2, rf=3, config={"min.insync.replicas": "2"})
            producer = transactional_producer(bootstrap, "lk-1", **{"transaction.timeout.ms": 20000})
            coordinator = self._coordinator(bootstrap, "lk-1")
            admin = AdminClient({"bootstrap.servers": bootstrap})
            leaders = {p.id: p.leader for p in admin.list_topics("lk-out", timeout=10).topics["lk-out"]
                       .partitions.values()}
            victim = next((b for b in leaders.values() if b != coordinator), None)
            if victim is None:
                raise unittest.SkipTest("both partitions are led by the coordinator's broker")
            producer.begin_transaction()
            delivered: list[bytes] = []
            for i in range(20):
                producer.produce("lk-out", f"lk-{i}".encode(), partition=i % 2,
                                 on_delivery=lambda err, msg: err is None and delivered.append(msg.value()))
            producer.flush(30)
            # the premise: every record acknowledged by the in-sync replicas before the kill
            self.assertEqual(len(delivered), 20, f"acknowledged before the kill: {len(delivered)} of 20")
            cluster[victim].kill()
            try:
                producer.commit_transaction(60)
                committed = True
            except KafkaException:
                committed = False
            alive = ",".join(b.bootstrap for i, b in enumerate(cluster) if i != victim)
            if committed:
                # each partition's records become visible once its marker is written (by the new leader)
                values = wait_for(lambda: [v for v in [read_values(alive, "lk-out", "read_committed", expect=20,
                                                                   timeout_s=5)] if len(v) == 20],
                                  timeout_s=90, what="every committed record")[0]
                self.assertEqual(values, sorted(f"lk-{i}".encode() for i in range(20)))
            else:
                try:
                    wait_for(lambda: len(read_values(alive, "lk-out", "read_uncommitted", expect=20,
                                                     timeout_s=5)) == 20, timeout_s=90, what="the records")
                except Exception as e:
                    raise AssertionError(f"{e}; partitions now: {self._partition_states(alive)}") from e
                self.assertEqual(read_values(alive, "lk-out", "read_committed", timeout_s=5), [])

    @staticmethod
    def _partition_states(bootstrap: str) -> dict:
        """Leader and ISR of each partition of lk-out (for a failure's message)."""
        topic = AdminClient({"bootstrap.servers": bootstrap}).list_topics("lk-out", timeout=10).topics["lk-out"]
        return {p.id: {"leader": p.leader, "isr": list(p.isrs), "error": str(p.error)}
                for p in topic.partitions.values()}

    @staticmethod
    def _coordinator(bootstrap: str, transactional_id: str) -> int:
        from kafkatw.broker.transaction_state import partition_for

        admin = AdminClient({"bootstrap.servers": bootstrap})
        meta = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
        return meta.partitions[partition_for(transactional_id, len(meta.partitions))].leader
