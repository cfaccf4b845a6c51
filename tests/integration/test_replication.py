"""
Replication and failover with real processes: a real ZooKeeper, three kafkatw
brokers, and librdkafka (confluent-kafka) as the client.

Each test checks what acks=all with min.insync.replicas promises: every
acknowledged record is present once, in order, at its offset, after the
leader is SIGKILLed or shut down, and the replicas' logs are byte-identical.
"""

from __future__ import annotations

import glob
import os
import signal
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.testing import running_cluster, wait_for

_OVERRIDES = {
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "zookeeper.session.timeout.ms": "3000",
}


def partition_info(bootstrap: str, topic: str, partition: int = 0):
    """(leader, replicas, isr) of a partition, as Metadata answers it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        meta = admin.list_topics(topic, timeout=5)
    except KafkaException:
        return None
    t = meta.topics.get(topic)
    if t is None or t.error is not None or partition not in t.partitions:
        return None
    p = t.partitions[partition]
    return p.leader, list(p.replicas), sorted(p.isrs)


def isr_of(bootstrap: str, topic: str, partition: int = 0) -> list[int]:
    """A partition's ISR as Metadata answers it ([] while unknown)."""
    info = partition_info(bootstrap, topic, partition)
    return info[2] if info is not None else []


def new_leader(bootstrap: str, topic: str, old: int, partition: int = 0):
    """C{partition_info} once the partition has a leader other than C{old}, else C{None}."""
    info = partition_info(bootstrap, topic, partition)
    return info if info is not None and info[0] not in (-1, old) else None


def create_topic(bootstrap: str, topic: str, partitions: int = 1, rf: int = 3, config: dict | None = None) -> None:
    """
    Create C{topic}; while the answering broker does not see C{rf} live brokers
    yet (a just-started broker's registration not yet in its view), ask again.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 20
    while True:
        futures = admin.create_topics([NewTopic(topic, partitions, rf, config=config or {})])
        try:
            futures[topic].result(20)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def consume_all(bootstrap: str, topic: str, partition: int, end: int, timeout_s: float = 30.0) -> list:
    """Every (offset, value) of a partition below C{end}, from the beginning."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, partition, 0)])
    records = []
    deadline = time.monotonic() + timeout_s
    try:
        while (not records or records[-1][0] < end - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            records.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return records


def segment_bytes(cluster, broker_id: int, topic: str, partition: int) -> bytes:
    """
    A replica's segment files, concatenated.

    @raise AssertionError: the replica has no segment (so that two missing
        replicas never compare equal).
    """
    directory = os.path.join(cluster[broker_id].data_dir, f"{topic}-{partition}")
    paths = sorted(glob.glob(os.path.join(directory, "*.log")))
    if not paths:
        raise AssertionError(f"broker {broker_id} has no segment of {topic}-{partition} in {directory}")
    data = b""
    for path in paths:
        with open(path, "rb") as f:
            data += f.read()
    return data


class ReplicationTests(unittest.TestCase):
    timeout = 240

    def test_acks_all_survives_leader_sigkill(self) -> None:
        """
        An idempotent acks=all producer keeps sending while the leader is
        SIGKILLed: every acknowledged record is read back once, in order, and
        the surviving replicas' logs are byte-identical.
        """
        with running_cluster(3, overrides=_OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, "events", config={"min.insync.replicas": "2"})
            wait_for(lambda: isr_of(bootstrap, "events") == [0, 1, 2], what="a full ISR")
            leader, replicas, _ = partition_info(bootstrap, "events")
            acked: dict[int, bytes] = {}
            errors = []

            def delivered(err, message):
                if err is not None:
                    errors.append(err)
                else:
                    acked[message.offset()] = message.value()

            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                 "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100})
            total = 3000
            unacknowledged_at_kill = 0
            for i in range(total):
                producer.produce("events", f"record-{i:05d}".encode(), partition=0, on_delivery=delivered)
                if i == total // 3:  # some records acknowledged before the kill ...
                    wait_for(lambda: producer.poll(0.01) is not None and len(acked) >= total // 6,
                             what="acknowledgements before the kill")
                if i == total // 2:  # ... and the ones sent since still in flight when it comes
                    cluster[leader].kill()
                    unacknowledged_at_kill = i + 1 - len(acked)
                producer.poll(0)
            self.assertEqual(producer.flush(90), 0)
            self.assertGreater(unacknowledged_at_kill, 0, "nothing was in flight when the leader died")
            self.assertEqual(errors, [])
            self.assertEqual(len(acked), total)
            new = wait_for(lambda: new_leader(bootstrap, "events", leader), what="a new leader")
            self.assertIn(new[0], replicas)
            records = consume_all(bootstrap, "events", 0, max(acked) + 1)
            self.assertEqual([offset for offset, _ in records], list(range(len(records))))
            values = [value for _, value in records]
            self.assertEqual(values, [f"record-{i:05d}".encode() for i in range(total)])  # once, in order
            for offset, value in acked.items():
                self.assertEqual(records[offset][1], value)
            survivors = [b for b in replicas if b != leader]
            wait_for(lambda: segment_bytes(cluster, survivors[0], "events", 0)
                     == segment_bytes(cluster, survivors[1], "events", 0), what="identical replica logs")

    def test_under_min_isr_refuses_acks_all_and_controlled_shutdown_moves_leadership(self) -> None:
        """
        SIGTERM of the leader moves its leadership to another ISR member before
        it stops; with one replica left of three, acks=all is refused
        (min.insync.replicas=2) while acks=1 is still accepted.
        """
        with running_cluster(3, overrides=_OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, "audit", config={"min.insync.replicas": "2"})
            wait_for(lambda: isr_of(bootstrap, "audit") == [0, 1, 2], what="a full ISR")
            leader, replicas, _ = partition_info(bootstrap, "audit")
            # SIGTERM: the leadership moves to another ISR member before the broker stops.
            cluster[leader].stop()  # twistd ends by the signal it received: the status is -15
            self.assertIn(f"broker {leader} stopped", cluster[leader].log_text())
            self.assertIn("controlled shutdown: leaderships moved", cluster[leader].log_text())
            second = wait_for(lambda: new_leader(bootstrap, "audit", leader), what="a new leader")[0]
            # Kill the second leader too: one replica left, below min.insync.replicas=2.
            cluster[second].kill()
            last = [b for b in replicas if b not in (leader, second)][0]
            wait_for(lambda: (partition_info(cluster[last].bootstrap, "audit") or (-1, [], []))[:1] == (last,)
                     and partition_info(cluster[last].bootstrap, "audit")[2] == [last], what="ISR of one")
            results = []
            producer = Producer({"bootstrap.servers": cluster[last].bootstrap, "acks": "all",
                                 "message.timeout.ms": 5000, "retries": 0})
            producer.produce("audit", b"x", partition=0, on_delivery=lambda err, msg: results.append(err))
            producer.flush(20)
            self.assertEqual(len(results), 1)
            self.assertIsNotNone(results[0])
            self.assertEqual(results[0].code(), KafkaError.NOT_ENOUGH_REPLICAS)
            # acks=1 is still accepted by the remaining leader.
            results.clear()
            producer = Producer({"bootstrap.servers": cluster[last].bootstrap, "acks": 1})
            producer.produce("audit", b"y", partition=0, on_delivery=lambda err, msg: results.append(err))
            producer.flush(20)
            self.assertEqual(results, [None])


def all_partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]] | None:
    """Partition -> (leader, replicas, ISR) of every partition, as Metadata answers it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        meta = admin.list_topics(topic, timeout=5)
    except KafkaException:
        return None
    t = meta.topics.get(topic)
    if t is None or t.error is not None:
        return None
    return {n: (p.leader, list(p.replicas), sorted(p.isrs)) for n, p in t.partitions.items()}


def in_isrs(bootstrap: str, topic: str, broker_id: int) -> list[int] | None:
    """The partitions whose ISR lists C{broker_id} (None: Metadata did not answer)."""
    partitions = all_partitions(bootstrap, topic)
    return None if partitions is None else [n for n, (_, _, isr) in partitions.items() if broker_id in isr]


class IsrMembershipTests(unittest.TestCase):
    timeout = 120

    def test_a_broker_stopped_right_after_it_rejoined_leaves_every_isr(self) -> None:
        """
        Issue 27: a broker SIGTERMed right after it rejoined, while its
        leaders were adding it back to their ISRs, stayed in two ISRs for
        minutes and acks=all writes waited for it.  It must leave every ISR
        within seconds -- long before replica.lag.time.max.ms (30 s here) --
        and an acks=all produce to every partition must complete.
        """
        overrides = {**_OVERRIDES, "replica.lag.time.max.ms": "30000"}
        with running_cluster(3, overrides=overrides) as cluster:
            topic, partitions, x = "rejoin", 24, 2
            bootstrap = ",".join(b.bootstrap for b in cluster)
            others = ",".join(cluster[b].bootstrap for b in (0, 1))
            create_topic(bootstrap, topic, partitions=partitions, config={"min.insync.replicas": "2"})
            wait_for(lambda: (all_partitions(bootstrap, topic) or {0: (0, [0], [])}) and all(
                len(isr) == 3 for _, _, isr in all_partitions(bootstrap, topic).values()), what="full ISRs")
            cluster[x].stop()
            wait_for(lambda: in_isrs(others, topic, x) == [], what=f"broker {x} out of every ISR")
            producer = Producer({"bootstrap.servers": others, "acks": "all", "linger.ms": 5})
            for n in range(partitions):
                for i in range(20):
                    producer.produce(topic, b"while it was away %d" % i, partition=n)
            self.assertEqual(producer.flush(30), 0)
            cluster[x].start()
            # SIGTERM as soon as one leader has taken it back: the others are still at it
            wait_for(lambda: in_isrs(others, topic, x), timeout_s=30, interval_s=0.01, what="a first ISR expansion")
            cluster[x].stop()
            stopped = time.monotonic()
            wait_for(lambda: in_isrs(others, topic, x) == [], timeout_s=5,
                     what=f"broker {x} out of every ISR within 5 s of its shutdown")
            # --under-replicated-partitions shows every partition (the ISRs are smaller than the replica lists)
            described = all_partitions(others, topic)
            self.assertEqual(sorted(n for n, (_, replicas, isr) in described.items() if len(isr) < len(replicas)),
                             list(range(partitions)))
            results: list = []
            producer = Producer({"bootstrap.servers": others, "acks": "all", "message.timeout.ms": 10000})
            for n in range(partitions):
                producer.produce(topic, b"after", partition=n, on_delivery=lambda err, msg: results.append(err))
            producer.flush(20)
            self.assertEqual(results, [None] * partitions)
            self.assertLess(time.monotonic() - stopped, 30)  # well before the lag time could have done it

    def test_a_follower_that_stops_fetching_leaves_the_isr_without_new_writes(self) -> None:
        """
        A follower frozen (SIGSTOP) while nothing is written, its ZooKeeper
        session still alive, leaves every ISR after replica.lag.time.max.ms
        (2 s here), and rejoins once it fetches again.
        """
        overrides = {**_OVERRIDES, "replica.lag.time.max.ms": "2000",
                     "zookeeper.session.timeout.ms": "10000"}  # the fixture's ZooKeeper allows up to 10 s
        with running_cluster(3, overrides=overrides) as cluster:
            topic, partitions, x = "frozen", 6, 2
            bootstrap = ",".join(b.bootstrap for b in cluster)
            others = ",".join(cluster[b].bootstrap for b in (0, 1))
            create_topic(bootstrap, topic, partitions=partitions, config={"min.insync.replicas": "2"})
            wait_for(lambda: in_isrs(bootstrap, topic, x) == list(range(partitions)), what="full ISRs")
            followed = [n for n, (leader, _, _) in all_partitions(bootstrap, topic).items() if leader != x]
            cluster[x].popen.send_signal(signal.SIGSTOP)
            try:
                frozen = time.monotonic()
                wait_for(lambda: in_isrs(others, topic, x) is not None and
                         not set(followed) & set(in_isrs(others, topic, x)),
                         timeout_s=6, what=f"broker {x} out of the ISRs it follows while nothing is written")
                self.assertGreaterEqual(time.monotonic() - frozen, 2.0)
                admin = AdminClient({"bootstrap.servers": others})
                self.assertIn(x, admin.list_topics(topic, timeout=5).brokers)  # still registered: the lag did it
            finally:
                cluster[x].popen.send_signal(signal.SIGCONT)
            wait_for(lambda: in_isrs(bootstrap, topic, x) == list(range(partitions)), what="the ISRs again")


class KafkatwClientFailoverTests(unittest.TestCase):
    timeout = 240

    def test_kafkatw_producer_and_consumer_follow_the_new_leader(self) -> None:
        """
        kafkatw's own idempotent producer (acks=all) keeps every record through
        a leader SIGKILL without duplicates, and its consumer reads them all
        from the new leader.
        """
        from kafkatw.client import BlockingConsumer, BlockingProducer

        with running_cluster(3, overrides=_OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, "kt", config={"min.insync.replicas": "2"})
            wait_for(lambda: isr_of(bootstrap, "kt") == [0, 1, 2], what="a full ISR")
            leader = partition_info(bootstrap, "kt")[0]
            total = 2000
            with BlockingProducer(bootstrap, acks="all", enable_idempotence=True, linger_ms=2,
                                  retry_backoff_ms=50, timeout_s=90) as producer:
                futures = []
                unacknowledged_at_kill = 0
                for i in range(total):
                    futures.append(producer.send("kt", f"v{i:05d}".encode(), partition=0))
                    if i == total // 4:  # some records acknowledged before the kill ...
                        wait_for(lambda: sum(f.done() for f in futures) >= total // 8,
                                 what="acknowledgements before the kill", interval_s=0.01)
                    if i == total // 2:  # ... and the ones sent since still in flight when it comes
                        cluster[leader].kill()
                        unacknowledged_at_kill = sum(not f.done() for f in futures)
                producer.flush()
                offsets = [f.get(60).offset for f in futures]
            self.assertEqual(sorted(offsets), list(range(total)))
            self.assertGreater(unacknowledged_at_kill, 0, "nothing was in flight when the leader died")
            with BlockingConsumer(bootstrap) as consumer:
                consumer.assign([("kt", 0)])
                consumer.seek(("kt", 0), 0)
                values = []
                deadline = time.monotonic() + 60
                while len(values) < total and time.monotonic() < deadline:
                    values.extend(r.value for r in consumer.poll(1000))
            self.assertEqual(values, [f"v{i:05d}".encode() for i in range(total)])
