"""
Integration tests: real ZooKeeper and real broker processes on free loopback
ports, driven by a real client (confluent-kafka, i.e. librdkafka) and by raw
protocol requests.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
import unittest

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.messages import decode_response, encode_request
from kafkatw.testing import ClassFixture, running_cluster


def create_topic(bootstrap: str, name: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10)
    futures[name].result(15)


def raw_request(bootstrap: str, api_key: int, version: int, body: dict) -> object:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        frame = encode_request(api_key, version, 1, "test", body)
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _read_exactly(s, 4))[0]
        return decode_response(api_key, version, _read_exactly(s, size))[1]


def _read_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 30) -> dict:
    """(partition, offset) -> value for every record of C{topic}, read from the beginning."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "integration", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: dict = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error():
                    continue
                records[(message.partition(), message.offset())] = message.value()
    finally:
        consumer.close()
    return records


class TwoBrokerTests(ClassFixture, unittest.TestCase):
    """Two brokers sharing topics through ZooKeeper."""

    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=2)
        cls.brokers = cls._cluster.__enter__()

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def test_partitions_spread_and_clients_follow_leaders(self) -> None:
        bootstrap = self.brokers[0].bootstrap
        create_topic(bootstrap, "shared", 4)
        # broker 1 learns the new partitions' leaders from ZooKeeper watches, a moment
        # after broker 0 (the controller, maybe) answered CreateTopics: ask until it knows
        deadline = time.monotonic() + 15
        while True:
            metadata = raw_request(self.brokers[1].bootstrap, 3, 12, {"topics": [{"name": "shared"}],
                                                                       "allow_auto_topic_creation": False})
            leaders = {p.partition_index: p.leader_id for p in metadata.topics[0].partitions}
            if (len(leaders) == 4 and -1 not in leaders.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(sorted(b.node_id for b in metadata.brokers), [0, 1])
        self.assertEqual(sorted(leaders), [0, 1, 2, 3])
        self.assertEqual(set(leaders.values()), {0, 1})

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        for i in range(400):
            producer.produce("shared", value=b"v%d" % i, partition=i % 4)
        self.assertEqual(producer.flush(30), 0)
        records = consume_all(self.brokers[1].bootstrap, "shared", 4, 400)
        self.assertEqual(sorted(records.values()), sorted(b"v%d" % i for i in range(400)))
        for p in range(4):
            self.assertEqual(sorted(o for (q, o) in records if q == p), list(range(100)))

    def test_wrong_broker_answers_not_leader(self) -> None:
        create_topic(self.brokers[0].bootstrap, "placed", 2)
        deadline = time.monotonic() + 10
        while True:  # as Kafka's, Metadata names a leader once it serves (LEADER_NOT_AVAILABLE until then)
            metadata = raw_request(self.brokers[0].bootstrap, 3, 12, {"topics": [{"name": "placed"}],
                                                                       "allow_auto_topic_creation": False})
            partitions = metadata.topics[0].partitions
            if (partitions and all(p.leader_id >= 0 for p in partitions)) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(len(partitions), 2)
        for partition in partitions:
            wrong = self.brokers[1 - partition.leader_id].bootstrap
            response = raw_request(wrong, 0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
                {"name": "placed", "partition_data": [{"index": partition.partition_index,
                                                       "records": build_batch([(b"k", b"v")])}]}]})
            self.assertEqual(response.responses[0].partition_responses[0].error_code,
                             ErrorCode.not_leader_or_follower)

    def test_topic_created_on_one_broker_is_served_by_the_other(self) -> None:
        create_topic(self.brokers[1].bootstrap, "seen-everywhere", 2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            metadata = raw_request(self.brokers[0].bootstrap, 3, 12, {"topics": [{"name": "seen-everywhere"}],
                                                                       "allow_auto_topic_creation": False})
            if metadata.topics[0].error_code == ErrorCode.none:
                break
            time.sleep(0.05)
        self.assertEqual(metadata.topics[0].error_code, ErrorCode.none)
        self.assertEqual(len(metadata.topics[0].partitions), 2)


    def test_delete_topic_removes_logs_on_every_broker(self) -> None:
        bootstrap = self.brokers[0].bootstrap
        create_topic(bootstrap, "doomed", 4)
        producer = Producer({"bootstrap.servers": bootstrap})
        for p in range(4):
            producer.produce("doomed", value=b"x", partition=p)
        self.assertEqual(producer.flush(10), 0)

        def partition_dirs() -> list[str]:
            return [d for b in self.brokers for d in os.listdir(os.path.join(b.log_dir, f"data-{b.broker_id}"))
                    if d.startswith("doomed-")]

        self.assertEqual(len(partition_dirs()), 4)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics(["doomed"], operation_timeout=10)["doomed"].result(15)
        deadline = time.monotonic() + 10
        while partition_dirs() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(partition_dirs(), [])


class CrashRecoveryTests(unittest.TestCase):
    def test_sigkill_during_produce_keeps_every_acknowledged_record(self) -> None:
        """
        SIGKILL the broker in the middle of a produce stream (acks=1), restart
        it on the same log dir: every acknowledged record is there, in order,
        at the offset it was acknowledged with.
        """
        with running_cluster(brokers=1) as [broker]:
            create_topic(broker.bootstrap, "crash", 2)
            acknowledged: dict = {}
            errors: list = []

            def delivered(err: object, message: object) -> None:
                if err is None:
                    acknowledged[(message.partition(), message.offset())] = message.value()
                else:
                    errors.append(err)

            producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 2,
                                 "message.timeout.ms": 5000, "retries": 0, "enable.idempotence": False})
            sent = 0
            deadline = time.monotonic() + 30
            while sent < 200000 and time.monotonic() < deadline:
                try:
                    producer.produce("crash", value=b"record-%08d" % sent, partition=sent % 2,
                                     on_delivery=delivered)
                    sent += 1
                except BufferError:
                    producer.poll(0.01)
                producer.poll(0)
                if len(acknowledged) > 20000 and broker.popen.poll() is None:
                    broker.kill()
            producer.flush(15)
            self.assertIsNotNone(broker.popen.poll(), "the broker was not killed")
            self.assertGreater(len(acknowledged), 20000)
            self.assertIn("broker 0 started", broker.log_text())

            broker.start()
            self.assertIn("clean=False", broker.log_text().rsplit("broker 0 started", 2)[1])
            records = consume_all(broker.bootstrap, "crash", 2, len(acknowledged))
            missing = {k: v for k, v in acknowledged.items() if records.get(k) != v}
            self.assertEqual(missing, {}, f"{len(missing)} acknowledged records lost or moved")
            for p in range(2):
                offsets = sorted(o for (q, o) in records if q == p)
                self.assertEqual(offsets, list(range(len(offsets))))
                values = [records[(p, o)] for o in offsets]
                self.assertEqual(values, sorted(values), "records out of order")

    def test_checkpoints_are_written_every_interval_while_serving(self) -> None:
        """
        The high-watermark and recovery-point checkpoints are written every
        interval while the broker serves (their fsyncs on its thread pool,
        not its reactor), and hold the offsets of the moment.
        """
        from kafkatw.storage.log_manager import CHECKPOINT_FILE, HIGH_WATERMARK_CHECKPOINT_FILE, read_checkpoint

        overrides = {"replica.high.watermark.checkpoint.interval.ms": "100",
                     "log.flush.offset.checkpoint.interval.ms": "100"}
        with running_cluster(brokers=1, overrides=overrides) as [broker]:
            create_topic(broker.bootstrap, "checkpointed", 1)
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for i in range(100):
                producer.produce("checkpointed", value=b"%d" % i)
            self.assertEqual(producer.flush(15), 0)
            high_watermarks = os.path.join(broker.data_dir, HIGH_WATERMARK_CHECKPOINT_FILE)
            recovery_points = os.path.join(broker.data_dir, CHECKPOINT_FILE)

            def written() -> tuple[int | None, bool]:
                # The two checkpoints are written by two loops, one after the other on the thread pool (their
                # fsyncs can take long on a busy disk): either may be the first to hold the partition.
                return (read_checkpoint(high_watermarks).get(("checkpointed", 0)) if os.path.exists(high_watermarks)
                        else None,
                        os.path.exists(recovery_points) and ("checkpointed", 0) in read_checkpoint(recovery_points))
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and written() != (100, True):
                time.sleep(0.05)
            self.assertEqual(written(), (100, True))
            self.assertNotIn("writing a checkpoint failed", broker.log_text())

    def test_clean_restart_scans_nothing(self) -> None:
        with running_cluster(brokers=1) as [broker]:
            create_topic(broker.bootstrap, "clean", 1)
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for i in range(1000):
                producer.produce("clean", value=b"%d" % i)
            self.assertEqual(producer.flush(15), 0)
            # twistd re-raises the signal it stopped on, so a clean SIGTERM exit is -SIGTERM.
            self.assertEqual(broker.stop(), -signal.SIGTERM)
            self.assertIn("broker 0 stopped", broker.log_text())
            broker.start()
            restart_log = broker.log_text().rsplit("broker 0 shutting down", 1)[1]
            self.assertIn("loaded 1 logs", restart_log)
            self.assertIn("clean=True recovered=0 producer_state=snapshot", restart_log)
            self.assertNotIn("clean=False", restart_log)
            self.assertEqual(len(consume_all(broker.bootstrap, "clean", 1, 1000)), 1000)


class BadInputTests(unittest.TestCase):
    """Bad input on one connection does not disturb others, and loses nothing."""

    def test_broker_keeps_serving_after_garbage(self) -> None:
        with running_cluster(brokers=1, overrides={"socket.request.max.bytes": "1048576"}) as [broker]:
            create_topic(broker.bootstrap, "sturdy", 1)
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            producer.produce("sturdy", value=b"before")
            self.assertEqual(producer.flush(10), 0)
            host, port = broker.bootstrap.split(":")
            for garbage in [
                struct.pack(">i", 2_000_000),  # over socket.request.max.bytes
                struct.pack(">i", -1),
                struct.pack(">i", 3) + b"\x00\x01\x02",  # shorter than a header
                struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1),  # unknown API key
                struct.pack(">i", 16) + struct.pack(">hhih", 0, 9, 1, -1) + b"\xff" * 6,  # garbage body
                os.urandom(4096),
            ]:
                with socket.create_connection((host, int(port)), timeout=5) as s:
                    # The broker may close the connection before we finish: that is the point.
                    try:
                        s.sendall(garbage)
                        s.shutdown(socket.SHUT_WR)
                        while s.recv(4096):
                            pass
                    except OSError:  # reset, broken pipe, not connected
                        pass
            producer.produce("sturdy", value=b"after")
            self.assertEqual(producer.flush(10), 0)
            records = consume_all(broker.bootstrap, "sturdy", 1, 2)
            self.assertEqual(sorted(records.values()), [b"after", b"before"])
            log = broker.log_text()
            self.assertIn("closing connection", log)
            self.assertEqual(broker.popen.poll(), None)

    def test_produce_to_missing_topic_with_auto_create_off(self) -> None:
        with running_cluster(brokers=1, overrides={"auto.create.topics.enable": "false"}) as [broker]:
            response = raw_request(broker.bootstrap, 0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
                {"name": "absent", "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")])}]}]})
            self.assertEqual(response.responses[0].partition_responses[0].error_code,
                             ErrorCode.unknown_topic_or_partition)
            metadata = raw_request(broker.bootstrap, 3, 12, {"topics": [{"name": "absent"}],
                                                              "allow_auto_topic_creation": True})
            self.assertEqual(metadata.topics[0].error_code, ErrorCode.unknown_topic_or_partition)


class ZooKeeperOutageTests(unittest.TestCase):
    def test_broker_serves_through_outage_and_reregisters(self) -> None:
        """
        With ZooKeeper frozen (SIGSTOP) past the session timeout, produce and
        fetch go on, requests that need ZooKeeper fail with a retriable error;
        once ZooKeeper is back the broker is registered (again, in a new session
        when the old one expired) and serves requests that need ZooKeeper.
        """
        with running_cluster(brokers=1) as cluster:
            [broker] = cluster
            create_topic(broker.bootstrap, "through", 1)
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            producer.produce("through", value=b"before")
            self.assertEqual(producer.flush(10), 0)
            zookeeper = cluster.zookeeper.popen
            zookeeper.send_signal(signal.SIGSTOP)
            try:
                producer.produce("through", value=b"during")
                self.assertEqual(producer.flush(10), 0)
                self.assertEqual(sorted(consume_all(broker.bootstrap, "through", 1, 2).values()),
                                 [b"before", b"during"])
                started = time.monotonic()
                response = raw_request(broker.bootstrap, 19, 7, {
                    "topics": [{"name": "while-down", "num_partitions": 1, "replication_factor": 1}],
                    "timeout": 5000, "validate_only": False})
                self.assertEqual(response.topics[0].error_code, ErrorCode.request_timed_out)
                self.assertTrue(response.topics[0].error_code.retriable)
                self.assertLess(time.monotonic() - started, 15)
                time.sleep(4)  # past zookeeper.session.timeout.ms=3000: the session expires on resume
            finally:
                zookeeper.send_signal(signal.SIGCONT)
            deadline = time.monotonic() + 30
            error = None
            while time.monotonic() < deadline:
                response = raw_request(broker.bootstrap, 19, 7, {
                    "topics": [{"name": "after", "num_partitions": 1, "replication_factor": 1}],
                    "timeout": 5000, "validate_only": False})
                error = response.topics[0].error_code
                if error == ErrorCode.none:
                    break
                time.sleep(0.2)
            self.assertEqual(error, ErrorCode.none)
            log = broker.log_text()
            self.assertIn("ZooKeeper session SUSPENDED", log)
            # Whether the session expired (LOST, then a new session) or the client got back
            # in before ZooKeeper's expirer ran is a race inside ZooKeeper; either way the
            # broker must be registered again.  (Re-registration itself is unit-tested on a
            # fake ZooKeeper whose session expiry is deterministic.)
            if "ZooKeeper session LOST" in log:
                self.assertIn("re-registering broker 0", log)
            metadata = raw_request(broker.bootstrap, 3, 12, {"topics": None, "allow_auto_topic_creation": False})
            self.assertEqual([b.node_id for b in metadata.brokers], [0])
            self.assertEqual(sorted(t.name for t in metadata.topics), ["after", "through"])


class MetricsTests(unittest.TestCase):
    def test_prometheus_endpoint_counts_messages(self) -> None:
        import re
        import urllib.request

        from kafkatw.testing import find_free_port

        port = find_free_port()
        with running_cluster(brokers=1, overrides={"metrics.port": str(port)}) as [broker]:
            create_topic(broker.bootstrap, "measured", 1)
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for i in range(25):
                producer.produce("measured", value=b"m")
            self.assertEqual(producer.flush(10), 0)
            self.assertEqual(len(consume_all(broker.bootstrap, "measured", 1, 25)), 25)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            # fetches went out from the page cache with sendfile, not through Python memory
            sendfile_bytes = float(re.search(r'kafkatw_fetch_record_bytes_total\{path="sendfile"\} (\S+)', text)[1])
            self.assertGreater(sendfile_bytes, 0)
            self.assertRegex(text, r"kafka_server_brokertopicmetrics_messagesin_total 25\.0")
            self.assertRegex(text, r'kafka_log_log_logendoffset\{partition="0",topic="measured"\} 25\.0')
            self.assertTrue(re.search(r'kafka_network_requestmetrics_requests_total\{request="Produce"\} \d', text))
            # the broker's pauses (kafkatw/broker/pauses.py): its event loop timer ran, every generation is listed
            self.assertGreater(float(re.search(r"kafkatw_event_loop_lag_seconds_count (\S+)", text)[1]), 0)
            for generation in "012":
                self.assertRegex(text, rf'kafkatw_gc_pause_max_seconds\{{generation="{generation}"\}} \d')
