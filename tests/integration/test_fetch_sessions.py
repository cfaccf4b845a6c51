"""
Fetch sessions (KIP-227) with real processes: a real ZooKeeper, kafkatw
brokers, and real clients.

  - Consumers: kafka-python (which keeps a C{FetchSessionHandler} per broker)
    and librdkafka (confluent-kafka 2.16, whose fetches are sessionless)
    consume every record of several
    partitions, also records produced to one partition while the others stay
    idle (an incremental fetch answers only that one), and the broker's
    metrics show which fetches came in sessions.
  - Followers: three brokers at RF=3 replicate with incremental fetches;
    the replicas' logs end equal, the ISR stays full through an idle stretch
    longer than C{replica.lag.time.max.ms} (the partitions a follower's
    incremental fetch leaves out count as fetched at their cached offset), and
    an idle follower fetch is a fraction of a full one's size.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import urllib.request
from typing import Any, Iterator

from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ZooKeeperFixture, find_free_port, wait_for

from .test_replication import create_topic, isr_of

_OVERRIDES = {
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "zookeeper.session.timeout.ms": "3000",
}

#: loop bounds (s)
TIMEOUT_S = 60.0


@contextlib.contextmanager
def cluster_with_metrics(brokers: int, overrides: dict[str, str]) -> Iterator[list[tuple[BrokerProcess, int]]]:
    """C{brokers} real brokers, each with its own metrics port: C{[(process, metrics port)]}."""
    base = tempfile.mkdtemp(prefix="kafkatw-fetch-sessions-")
    started: list[tuple[BrokerProcess, int]] = []
    try:
        with ZooKeeperFixture(os.path.join(base, "zookeeper")) as connect:
            try:
                for broker_id in range(brokers):
                    port = find_free_port()
                    process = BrokerProcess(broker_id, connect + "/kafkatw", base,
                                            {**overrides, "metrics.port": str(port)})
                    started.append((process, port))
                    process.start()
                yield started
            finally:
                for process, _ in started:
                    process.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def metrics(port: int) -> dict[tuple[str, tuple], float]:
    """The broker's samples: C{(name, sorted labels) -> value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def session_requests(port: int, context: str) -> float:
    return metrics(port).get(("kafkatw_fetch_session_requests_total", (("context", context),)), 0.0)


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]], acks: str = "all") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    for partition, value in records:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def read_until(poll: Any, expected: int, idle_s: float) -> dict[int, list[bytes]]:
    """
    Call C{poll()} (-> C{(partition, value)} pairs) until C{expected} records
    arrived and then for C{idle_s} more, within L{TIMEOUT_S}: the records by
    partition.
    """
    got: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + TIMEOUT_S
    idle_until = None
    while time.monotonic() < deadline:
        if sum(map(len, got.values())) >= expected:
            idle_until = idle_until or time.monotonic() + idle_s
            if time.monotonic() >= idle_until:
                break
        for partition, value in poll():
            got.setdefault(partition, []).append(value)
    return got


def consume_confluent(bootstrap: str, topic: str, partitions: int, expected: int,
                      consumer: Any = None, idle_s: float = 0.0) -> tuple[dict[int, list[bytes]], Any]:
    """
    Read until C{expected} records arrived (and then for C{idle_s} more);
    returns them by partition and the (open) consumer.
    """
    if consumer is None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"s-{time.monotonic()}",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def poll() -> list[tuple[int, bytes]]:
        message = consumer.poll(0.1)
        return [] if message is None or message.error() else [(message.partition(), message.value())]

    return read_until(poll, expected, idle_s), consumer


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, expected: int,
                         consumer: Any = None, idle_s: float = 0.0) -> tuple[dict[int, list[bytes]], Any]:
    """L{consume_confluent} with kafka-python (which fetches only within C{poll})."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    if consumer is None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
        assigned = [KTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)

    def poll() -> list[tuple[int, bytes]]:
        return [(tp.partition, m.value) for tp, messages in consumer.poll(timeout_ms=100).items() for m in messages]

    return read_until(poll, expected, idle_s), consumer


class ConsumerSessionTests(unittest.TestCase):
    PARTITIONS = 6

    def check_client(self, consume: Any, label: str) -> tuple[float, float]:
        """Consume with C{consume}; C{(full, incremental)} session fetches the broker counted."""
        with cluster_with_metrics(1, _OVERRIDES) as brokers:
            process, port = brokers[0]
            bootstrap = process.bootstrap
            topic = f"sessions-{label}"
            create_topic(bootstrap, topic, self.PARTITIONS, rf=1)
            first = [(p, b"%d-%d" % (p, i)) for p in range(self.PARTITIONS) for i in range(50)]
            produce(bootstrap, topic, first, acks="1")
            got, consumer = consume(bootstrap, topic, self.PARTITIONS, len(first))
            try:
                self.assertEqual(got, {p: [v for q, v in first if q == p] for p in range(self.PARTITIONS)})
                # idle partitions: fetch rounds without data, then records on one partition only
                idle, consumer = consume(bootstrap, topic, self.PARTITIONS, 0, consumer, idle_s=1.0)
                self.assertEqual(idle, {})
                later = [(3, b"later-%d" % i) for i in range(20)]
                produce(bootstrap, topic, later, acks="1")
                got, consumer = consume(bootstrap, topic, self.PARTITIONS, len(later), consumer)
                self.assertEqual(got, {3: [v for _, v in later]})
            finally:
                consumer.close()
            return session_requests(port, "full"), session_requests(port, "incremental")

    def test_kafka_python_consumes_in_a_session(self) -> None:
        full, incremental = self.check_client(consume_kafka_python, "kafka-python")
        self.assertGreaterEqual(full, 1)
        self.assertGreater(incremental, 5)

    def test_librdkafka_consumes(self) -> None:
        """
        librdkafka consumes every record from a broker with sessions.  (librdkafka
        2.16 sends sessionless fetches, session id 0 and epoch -1: the broker's
        path without sessions.)
        """
        self.check_client(consume_confluent, "confluent")


class FollowerSessionTests(unittest.TestCase):
    PARTITIONS = 30

    def test_followers_stay_in_sync_with_sessions(self) -> None:
        with cluster_with_metrics(3, _OVERRIDES) as brokers:
            bootstrap = brokers[0][0].bootstrap
            topic = "replicated-sessions"
            create_topic(bootstrap, topic, self.PARTITIONS, rf=3)
            records = [(p, b"v%d-%d" % (p, i)) for p in range(self.PARTITIONS) for i in range(20)]
            produce(bootstrap, topic, records)

            def log_end_offsets(port: int) -> dict[int, float]:
                return {int(dict(labels)["partition"]): value for (name, labels), value in metrics(port).items()
                        if name == "kafka_log_log_logendoffset" and dict(labels)["topic"] == topic}

            expected = {p: 20.0 for p in range(self.PARTITIONS)}
            wait_for(lambda: all(log_end_offsets(port) == expected for _, port in brokers), TIMEOUT_S,
                     "every replica has every record")
            wait_for(lambda: all(len(isr_of(bootstrap, topic, p)) == 3 for p in range(self.PARTITIONS)), TIMEOUT_S,
                     "full ISRs")
            before = [metrics(port) for _, port in brokers]
            # idle for longer than replica.lag.time.max.ms: incremental fetches that name nothing
            time.sleep(6.0)
            self.assertEqual([p for p in range(self.PARTITIONS) if len(isr_of(bootstrap, topic, p)) != 3], [])
            after = [metrics(port) for _, port in brokers]
            for old, new in zip(before, after):
                incremental = new[("kafkatw_fetch_session_requests_total", (("context", "incremental"),))] - \
                    old[("kafkatw_fetch_session_requests_total", (("context", "incremental"),))]
                requests = new[("kafkatw_fetch_follower_requests_total", ())] - \
                    old[("kafkatw_fetch_follower_requests_total", ())]
                size = new[("kafkatw_fetch_follower_request_bytes_total", ())] - \
                    old[("kafkatw_fetch_follower_request_bytes_total", ())]
                self.assertGreater(requests, 10)
                self.assertEqual(incremental, requests)  # every idle follower fetch is incremental
                self.assertLess(size / requests, 80)  # no partition named: the fixed fields only
                self.assertEqual(new[("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())], 2.0)
            # traffic again, on a few partitions: the followers catch up
            more = [(p, b"more-%d" % i) for p in (1, 7, 29) for i in range(10)]
            produce(bootstrap, topic, more)
            expected.update({1: 30.0, 7: 30.0, 29: 30.0})
            wait_for(lambda: all(log_end_offsets(port) == expected for _, port in brokers), TIMEOUT_S,
                     "every replica has the new records")
