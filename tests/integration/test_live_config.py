"""
Live configuration with real processes: a real ZooKeeper, two kafkatw brokers,
confluent-kafka's (librdkafka's) AdminClient, producer and consumer, kcat and
kafka-python.

A config change made through one broker reaches every broker through
C{/config/changes} within a second: retention shrinks the logs of both
replicas, a lowered C{max.message.bytes} refuses a larger record, a broker
default shows on every broker; a topic with C{compression.type=lz4} stores lz4
batches whatever the producer sent, and every client still reads them.
"""

from __future__ import annotations

import glob
import os
import subprocess
import time

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from twisted.trial import unittest

from kafkatw.client.blocking import BlockingAdminClient
from kafkatw.protocol.records import decode_batches
from kafkatw.testing import ClassFixture, running_cluster, wait_for

OVERRIDES = {
    "log.retention.check.interval.ms": "200",
    "replica.fetch.wait.max.ms": "100",
    "zookeeper.session.timeout.ms": "6000",
}


def segment_files(cluster, broker_id: int, topic: str, partition: int = 0) -> list[str]:
    return sorted(glob.glob(os.path.join(cluster[broker_id].data_dir, f"{topic}-{partition}", "*.log")))


class LiveConfigTests(ClassFixture, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=2, overrides=OVERRIDES)
        cls.cluster = cls._cluster.__enter__()
        cls.bootstrap = ",".join(b.bootstrap for b in cls.cluster)

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create(self, topic: str, config: dict[str, str] | None = None, rf: int = 2) -> None:
        admin = self.admin()
        # the replicas are brokers 0 .. rf-1, broker 0 first
        new = NewTopic(topic, 1, -1, replica_assignment=[list(range(rf))], config=config or {})
        admin.create_topics([new])[topic].result(20)
        wait_for(lambda: all(os.path.isdir(os.path.join(b.data_dir, f"{topic}-0")) for b in self.cluster[:rf]),
                 20, f"{topic}-0 on every replica")

    def alter(self, resource: ConfigResource) -> None:
        admin = self.admin()  # kept alive until the answer (a collected client fails its futures)
        admin.incremental_alter_configs([resource])[resource].result(20)

    def produce(self, topic: str, values: list[bytes], timestamp_ms: int | None = None, **config: object) -> list:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0, **config})
        reports: list = []
        for value in values:
            kwargs = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
            producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: reports.append(err), **kwargs)
            producer.flush(20)
        return reports

    def test_retention_change_reaches_every_replica_within_a_second(self) -> None:
        topic = "live-retention"
        self.create(topic, {"segment.bytes": "1024"})
        hour_ago = int(time.time() * 1000) - 3_600_000
        self.assertEqual(self.produce(topic, [b"x" * 400] * 12, timestamp_ms=hour_ago), [None] * 12)
        self.assertEqual(self.produce(topic, [b"now"]), [None])
        wait_for(lambda: all(len(segment_files(self.cluster, b, topic)) >= 4 for b in (0, 1)), 20,
                 "rolled segments on both replicas")
        resource = ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
        self.alter(resource)
        changed = time.monotonic()
        # every broker applies it within a second, then its retention pass (every 200 ms) deletes
        wait_for(lambda: all(f"topic {topic} config is now" in b.log_text() for b in self.cluster), 5,
                 "every broker applied the change", interval_s=0.02)
        self.assertLess(time.monotonic() - changed, 1.0)
        wait_for(lambda: all(len(segment_files(self.cluster, b, topic)) == 1 for b in (0, 1)), 10,
                 "old segments deleted on both replicas")
        for broker in self.cluster:
            [line] = [line for line in broker.log_text().splitlines() if f"topic {topic} config is now" in line]
            self.assertIn("'retention.ms': '60000'", line)
        admin = self.admin()
        [config] = [f.result(20) for f in admin.describe_configs([ConfigResource("topic", topic)]).values()]
        self.assertEqual(config["retention.ms"].value, "60000")
        self.assertEqual(config["retention.ms"].source, 1)  # DYNAMIC_TOPIC_CONFIG
        self.assertEqual(config["segment.ms"].source, 5)  # DEFAULT_CONFIG
        # the legacy AlterConfigs replaces the whole set
        legacy = ConfigResource("topic", topic, set_config={"segment.bytes": "2048"})
        admin.alter_configs([legacy])[legacy].result(20)

        def replaced():
            entries = admin.describe_configs([ConfigResource("topic", topic)])
            [config] = [f.result(20) for f in entries.values()]
            return config if config["segment.bytes"].value == "2048" else None

        config = wait_for(replaced, 5, "the legacy AlterConfigs applied")
        self.assertEqual((config["retention.ms"].value, config["retention.ms"].source), ("604800000", 5))

    def test_max_message_bytes_lowered_refuses_larger_records(self) -> None:
        topic = "live-max-message"
        self.create(topic)
        self.assertEqual(self.produce(topic, [b"y" * 2000]), [None])
        self.alter(ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)]))
        wait_for(lambda: all(f"topic {topic} config is now" in b.log_text() for b in self.cluster), 5,
                 "every broker applied the change")
        [error] = self.produce(topic, [b"y" * 2000])
        self.assertIsNotNone(error)
        self.assertEqual(error.name(), "MSG_SIZE_TOO_LARGE")
        self.assertEqual(self.produce(topic, [b"small"]), [None])

    def test_broker_default_seen_by_every_broker(self) -> None:
        with BlockingAdminClient(self.cluster[0].bootstrap) as admin:
            result = admin.incremental_alter_configs({(4, ""): [("log.retention.bytes", 0, "123456789")]})
            self.assertEqual(result, {(4, ""): None})
        admin = self.admin()

        def described(broker: int):
            resource = ConfigResource("broker", str(broker))
            entry = admin.describe_configs([resource])[resource].result(20)["log.retention.bytes"]
            return entry if entry.value == "123456789" else None

        for broker in (0, 1):
            entry = wait_for(lambda: described(broker), 5, f"broker {broker} has the new default")
            self.assertEqual(entry.source, 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
        # kafka-python reads the same, with Kafka's type (KIP-569) and every synonym
        from kafka.admin import ConfigResource as KafkaPythonResource, ConfigResourceType, KafkaAdminClient

        client = KafkaAdminClient(bootstrap_servers=self.cluster[1].bootstrap)
        try:
            answer = client.describe_configs([KafkaPythonResource(ConfigResourceType.BROKER, "1")],
                                             config_filter="all", include_synonyms=True)
            entry = answer["broker"]["1"]["log.retention.bytes"]
            self.assertEqual((entry["value"], entry["config_source"], entry["config_type"]),
                             ("123456789", "DYNAMIC_DEFAULT_BROKER_CONFIG", "LONG"))
            self.assertEqual([(s["value"], s["source"]) for s in entry["synonyms"]],
                             [("123456789", "DYNAMIC_DEFAULT_BROKER_CONFIG"), ("-1", "DEFAULT_CONFIG")])
        finally:
            client.close()
        # a static-only config cannot change dynamically
        resource = ConfigResource("broker", "0", incremental_configs=[
            ConfigEntry("zookeeper.connect", "elsewhere:2181", incremental_operation=AlterConfigOpType.SET)])
        with self.assertRaises(KafkaException) as raised:
            self.alter(resource)
        self.assertIn("Cannot update these configs dynamically", str(raised.exception))

    def test_lz4_topic_stores_lz4_batches_every_client_reads(self) -> None:
        topic = "live-lz4"
        self.create(topic, {"compression.type": "lz4"}, rf=1)
        values = [b"value-%d" % i for i in range(20)]
        self.assertEqual(self.produce(topic, values, **{"compression.type": "none"}), [None] * 20)
        self.assertEqual(self.produce(topic, [b"gz"], **{"compression.type": "gzip"}), [None])
        with open(segment_files(self.cluster, 0, topic)[0], "rb") as f:
            batches = decode_batches(f.read())
        self.assertEqual({b.compression for b in batches}, {3})  # lz4
        # librdkafka
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "live-lz4", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        read: list = []
        deadline = time.monotonic() + 20
        try:
            while len(read) < 21 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and not message.error():
                    read.append(message.value())
        finally:
            consumer.close()
        self.assertEqual(read, values + [b"gz"])
        # kcat (librdkafka 2.0)
        out = subprocess.run(["kcat", "-C", "-b", self.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e",
                              "-q"], capture_output=True, timeout=60, check=True).stdout
        self.assertEqual(out.split(b"\n")[:21], values + [b"gz"])

    def test_log_append_time_topic_answers_the_brokers_time(self) -> None:
        topic = "live-append-time"
        self.create(topic, {"message.timestamp.type": "LogAppendTime"}, rf=1)
        before = int(time.time() * 1000)
        self.assertEqual(self.produce(topic, [b"a", b"b"], timestamp_ms=1_000_000), [None, None])
        after = int(time.time() * 1000)
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "live-append-time",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        stamps: list = []
        deadline = time.monotonic() + 20
        try:
            while len(stamps) < 2 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and not message.error():
                    stamps.append(message.timestamp())
        finally:
            consumer.close()
        self.assertEqual([kind for kind, _ in stamps], [TIMESTAMP_LOG_APPEND_TIME] * 2)
        self.assertTrue(all(before <= ts <= after + 1000 for _, ts in stamps), (before, stamps, after))
        # kcat prints the timestamps it reads (%T), and they are the broker's too
        out = subprocess.run(["kcat", "-C", "-b", self.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e",
                              "-q", "-f", "%T %s\\n"], capture_output=True, timeout=60, check=True).stdout
        lines = out.decode().split()
        self.assertEqual(lines[1::2], ["a", "b"])
        self.assertTrue(all(before <= int(ts) <= after + 1000 for ts in lines[0::2]), lines)


#: How many alter-then-describe rounds each client makes (bounded; the old broker answered the old value
#: in some of them, depending on whether its watch on /config/changes had already fired).
ROUNDS = 25


class DescribeAfterAlterTests(unittest.TestCase):
    """
    Issue 26: a DescribeConfigs right after an acknowledged AlterConfigs or
    IncrementalAlterConfigs, answered by the broker that answered the alter,
    sees the change (librdkafka and KafkaJS saw the old value).  One broker,
    so that every request of the admin clients reaches the same broker.
    """

    timeout = 300

    def test_every_describe_after_an_alter_sees_it(self) -> None:
        with running_cluster(1) as cluster:
            bootstrap = cluster[0].bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("rw", 1, 1)])["rw"].result(20)
            topic, broker = ConfigResource("topic", "rw"), ConfigResource("broker", "0")

            def described(resource: ConfigResource, name: str) -> tuple:
                entry = admin.describe_configs([resource])[resource].result(20)[name]
                return entry.value, entry.source

            for i in range(ROUNDS):
                value = str(60000 + i)
                if i % 2:  # the legacy AlterConfigs
                    resource = ConfigResource("topic", "rw", set_config={"retention.ms": value})
                    admin.alter_configs([resource])[resource].result(20)
                else:
                    resource = ConfigResource("topic", "rw", incremental_configs=[
                        ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
                    admin.incremental_alter_configs([resource])[resource].result(20)
                self.assertEqual(described(topic, "retention.ms"), (value, 1), f"round {i}")  # DYNAMIC_TOPIC_CONFIG
                value = str(1_000_000 + i)
                resource = ConfigResource("broker", "0", incremental_configs=[
                    ConfigEntry("log.retention.bytes", value, incremental_operation=AlterConfigOpType.SET)])
                admin.incremental_alter_configs([resource])[resource].result(20)
                self.assertEqual(described(broker, "log.retention.bytes"), (value, 2),  # DYNAMIC_BROKER_CONFIG
                                 f"round {i}")
                # the broker-level value is what the topic (with no override of it) now has
                self.assertEqual(described(topic, "retention.bytes"), (value, 2), f"round {i}")

            # validate_only changes nothing
            last = str(60000 + ROUNDS - 1)
            resource = ConfigResource("topic", "rw", incremental_configs=[
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([resource], validate_only=True)[resource].result(20)
            self.assertEqual(described(topic, "retention.ms"), (last, 1))

            # kafkatw's own admin client, through the same broker
            with BlockingAdminClient(bootstrap) as kafkatw_admin:
                for i in range(5):
                    value = str(70000 + i)
                    errors = kafkatw_admin.incremental_alter_configs({(2, "rw"): [("segment.ms", 0, value)]})
                    self.assertEqual(errors, {(2, "rw"): None})
                    entries = kafkatw_admin.describe_configs([(2, "rw")], ["segment.ms"])[(2, "rw")]
                    self.assertEqual((entries["segment.ms"].value, entries["segment.ms"].source), (value, 1))
