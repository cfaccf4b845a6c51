"""
Integration tests of the group coordinator: a real ZooKeeper and two real
brokers (one cluster for the module), driven by confluent-kafka, kcat -G,
kafka-python, aiokafka and C{kafkatw consumer-groups}.

Group settings are shortened for speed: C{group.initial.rebalance.delay.ms}
200 and session timeouts down to 1 s allowed.  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Callable

from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.broker.group_coordinator_election import preferred_coordinator
from kafkatw.broker.transaction_coordinator import offsets_partition_for as _offsets_partition_for
from kafkatw.cli.main import main as cli_main
from kafkatw.testing import ClassFixture, running_cluster, wait_until

def offsets_partition_for(group: str) -> int:
    return _offsets_partition_for(group)[1]


KCAT = shutil.which("kcat") or "/usr/bin/kcat"
OVERRIDES = {"group.initial.rebalance.delay.ms": "200", "group.min.session.timeout.ms": "1000",
             "zookeeper.session.timeout.ms": "3000"}

_CONSUMER_SCRIPT = r"""
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 2000,
              "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest"})
def assigned(consumer, partitions):
    print("ASSIGNED " + ",".join(str(p.partition) for p in partitions), flush=True)
c.subscribe([sys.argv[3]], on_assign=assigned)
while True:
    c.poll(0.2)
"""




class GroupTests(ClassFixture, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=2, overrides=OVERRIDES)
        cls.brokers = cls._cluster.__enter__()
        cls.bootstrap = ",".join(b.bootstrap for b in cls.brokers)
        cls.admin = AdminClient({"bootstrap.servers": cls.bootstrap})
        cls.tmp = tempfile.mkdtemp(prefix="kafkatw-groups-")

    @classmethod
    def tearDownClass(cls) -> None:
        # librdkafka's threads live as long as the handle: drop it, or it keeps
        # reconnecting to the stopped brokers for the rest of the test run
        del cls.admin
        cls._cluster.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def create_topic(self, name: str, partitions: int, records_per_partition: int = 0,
                     replica_assignment: list | None = None) -> None:
        topic = NewTopic(name, partitions, -1, replica_assignment=replica_assignment) if replica_assignment else \
            NewTopic(name, partitions, 1)
        self.admin.create_topics([topic], operation_timeout=10)[name].result(15)
        if records_per_partition:
            producer = Producer({"bootstrap.servers": self.bootstrap})
            for i in range(records_per_partition):
                for p in range(partitions):
                    producer.produce(name, f"{p}-{i}".encode(), partition=p)
            self.assertEqual(producer.flush(15), 0)

    def broker(self, broker_id: int):
        return [b for b in self.brokers if b.broker_id == broker_id][0]

    def describe(self, group: str) -> str:
        result = CliRunner().invoke(cli_main, ["consumer-groups", "--bootstrap-server", self.bootstrap,
                                               "--describe", "--group", group])
        self.assertEqual(result.exit_code, 0, result.output)
        return result.output

    @staticmethod
    def described_offsets(group: str, text: str) -> list[list[str]]:
        """PARTITION, CURRENT-OFFSET, LOG-END-OFFSET and LAG of each --describe row, by partition."""
        return [row[2:6] for row in sorted(line.split() for line in text.splitlines()
                                           if line.startswith(group + " "))]

    def kafka_python_resumes_at(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        """The first offset a kafka-python member of C{group} reads from each partition."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(topic, bootstrap_servers=self.bootstrap, group_id=group,
                                 enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=1000)
        try:
            first: dict[int, int] = {}
            deadline = time.monotonic() + 40
            while len(first) < partitions and time.monotonic() < deadline:
                for tp, records in consumer.poll(timeout_ms=500).items():
                    if records:
                        first.setdefault(tp.partition, records[0].offset)
            return first
        finally:
            consumer.close()

    # --- tests -------------------------------------------------------------------------

    def test_confluent_group_of_three_splits_six_partitions(self) -> None:
        self.create_topic("cg6", 6, 20)
        consumers = [Consumer({"bootstrap.servers": self.bootstrap, "group.id": "cg", "auto.offset.reset": "earliest",
                               "enable.auto.commit": False}) for _ in range(3)]
        try:
            for c in consumers:
                c.subscribe(["cg6"])
            seen = 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                for c in consumers:
                    seen += sum(1 for m in c.consume(100, 0.1) if not m.error())
                if seen >= 120 and all(len(c.assignment()) == 2 for c in consumers):
                    break
            assignments = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
            self.assertEqual([len(a) for a in assignments], [2, 2, 2], assignments)
            self.assertEqual(sorted(p for a in assignments for p in a), list(range(6)))
            self.assertEqual(seen, 120)
            for c in consumers:
                c.commit(asynchronous=False)
            text = self.describe("cg")
            rows = [line.split() for line in text.splitlines() if line.startswith("cg ")]
            self.assertEqual(len(rows), 6, text)
            for row in rows:
                self.assertEqual(row[3:6], ["20", "20", "0"], text)  # CURRENT-OFFSET LOG-END-OFFSET LAG
                self.assertTrue(row[6].startswith("rdkafka-"), text)
                self.assertEqual(row[7], "/127.0.0.1", text)
        finally:
            for c in consumers:
                c.close()
        listed = CliRunner().invoke(cli_main, ["consumer-groups", "--bootstrap-server", self.bootstrap, "--list"])
        self.assertIn("cg", listed.output.split())

    def test_kcat_group_of_three_splits_six_partitions(self) -> None:
        self.create_topic("kcat6", 6, 5)
        processes, logs = [], []
        try:
            for i in range(3):
                log = open(os.path.join(self.tmp, f"kcat-{i}.err"), "w+")
                logs.append(log)
                processes.append(subprocess.Popen(
                    [KCAT, "-b", self.bootstrap, "-G", "kcatgroup", "-o", "beginning", "kcat6"],
                    stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL))

            def last_assignments() -> list:
                result = []
                for log in logs:
                    log.flush()
                    with open(log.name) as f:
                        text = f.read()
                    found = re.findall(r"assigned: (.*)", text)
                    result.append(sorted(int(p) for p in re.findall(r"\[(\d+)\]", found[-1])) if found else None)
                return result

            self.assertTrue(wait_until(lambda: [len(a or []) for a in last_assignments()] == [2, 2, 2], 30),
                            last_assignments())
            self.assertEqual(sorted(p for a in last_assignments() for p in a), list(range(6)))
        finally:
            for p in processes:
                p.terminate()
            for p in processes:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
            for log in logs:
                log.close()

    def test_killed_member_is_expired_and_its_partitions_reassigned(self) -> None:
        self.create_topic("kill6", 6)
        processes = []
        outputs = []
        try:
            for i in range(2):
                out = open(os.path.join(self.tmp, f"member-{i}.out"), "w+")
                outputs.append(out)
                processes.append(subprocess.Popen(
                    [sys.executable, "-c", _CONSUMER_SCRIPT, self.bootstrap, "killgroup", "kill6"],
                    stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))

            def assigned(i: int) -> list | None:
                with open(outputs[i].name) as f:
                    lines = [line for line in f.read().splitlines() if line.startswith("ASSIGNED")]
                if not lines:
                    return None
                text = lines[-1].split(" ", 1)[1] if " " in lines[-1] else ""
                return sorted(int(p) for p in text.split(",") if p)

            self.assertTrue(wait_until(lambda: [len(assigned(i) or []) for i in range(2)] == [3, 3], 30),
                            [assigned(i) for i in range(2)])
            processes[0].send_signal(signal.SIGKILL)
            processes[0].wait(5)
            killed_at = time.monotonic()
            self.assertTrue(wait_until(lambda: assigned(1) == list(range(6)), 20), assigned(1))
            # Session timeout 2 s; the survivor's rebalance waits for its own rejoin.
            self.assertLess(time.monotonic() - killed_at, 15)
        finally:
            for p in processes:
                if p.poll() is None:
                    p.kill()
                    p.wait(5)
            for out in outputs:
                out.close()

    def test_commits_survive_a_coordinator_restart_and_are_shared_between_clients(self) -> None:
        """aiokafka commits; the coordinator restarts; kafka-python resumes from the commits; --describe agrees."""
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import OffsetAndMetadata
        from aiokafka.structs import TopicPartition as AioTopicPartition

        self.create_topic("handoff", 2, 100)

        async def aiokafka_commits() -> None:
            consumer = AIOKafkaConsumer("handoff", bootstrap_servers=self.bootstrap, group_id="handoff",
                                        enable_auto_commit=False, auto_offset_reset="earliest",
                                        session_timeout_ms=6000, heartbeat_interval_ms=500)
            await consumer.start()
            try:
                got = 0
                deadline = time.monotonic() + 30
                while got < 40 and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=500)
                    got += sum(len(v) for v in batches.values())
                self.assertGreaterEqual(got, 40)
                await consumer.commit({AioTopicPartition("handoff", p): OffsetAndMetadata(30 + p, "aio")
                                       for p in range(2)})
            finally:
                await consumer.stop()

        asyncio.run(aiokafka_commits())

        coordinator = self.broker(preferred_coordinator("handoff", [b.broker_id for b in self.brokers]))
        coordinator.stop()
        coordinator.start()

        self.assertEqual(self.kafka_python_resumes_at("handoff", "handoff", 2), {0: 30, 1: 31})
        text = self.describe("handoff")
        self.assertIn("has no active members", text)
        self.assertEqual(self.described_offsets("handoff", text),
                         [["0", "30", "100", "70"], ["1", "31", "100", "69"]], text)

    def test_zookeeper_group_offsets_seen_by_the_coordinator(self) -> None:
        """
        The paper's ZooKeeper-coordinated consumer commits; C{consumer-groups
        --bootstrap-server --describe} (the broker's OffsetFetch) shows those
        offsets, and a kafka-python member of the same group resumes there.
        """
        from kafkatw.client.blocking_group import BlockingZookeeperConsumerGroup

        self.create_topic("shared-offsets", 2, 50)
        zookeeper = self.brokers.zookeeper.connect_string + "/kafkatw"
        with BlockingZookeeperConsumerGroup("both-ways", ["shared-offsets"], zookeeper_connect=zookeeper,
                                            bootstrap_servers=self.bootstrap, auto_offset_reset="smallest",
                                            enable_auto_commit=False, zookeeper_session_timeout_ms=3000) as group:
            seen = 0
            deadline = time.monotonic() + 30
            while seen < 100 and time.monotonic() < deadline:
                seen += len(group.poll(500))
            self.assertEqual(seen, 100)
            group.commit({("shared-offsets", 0): 20, ("shared-offsets", 1): 35})
        self.assertEqual(self.described_offsets("both-ways", self.describe("both-ways")),
                         [["0", "20", "50", "30"], ["1", "35", "50", "15"]])
        self.assertEqual(self.kafka_python_resumes_at("both-ways", "shared-offsets", 2), {0: 20, 1: 35})

    def test_reset_offsets_and_delete(self) -> None:
        self.create_topic("reset2", 2, 10)
        runner = CliRunner()
        base = ["consumer-groups", "--bootstrap-server", self.bootstrap]
        result = runner.invoke(cli_main, base + ["--reset-offsets", "--group", "resetg", "--topic", "reset2",
                                                 "--to-latest", "--execute"])
        self.assertEqual(result.exit_code, 0, result.output)
        rows = [line.split() for line in self.describe("resetg").splitlines() if line.startswith("resetg ")]
        self.assertEqual([r[3] for r in rows], ["10", "10"])
        result = runner.invoke(cli_main, base + ["--delete", "--group", "resetg"])
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("successful", result.output)
        result = runner.invoke(cli_main, base + ["--describe", "--group", "resetg"])
        self.assertIn("does not exist", result.output)

    def test_z_coordinator_failure_moves_the_group(self) -> None:
        """Kill the group's coordinator: the other broker takes the group over with its committed offsets."""
        ids = [b.broker_id for b in self.brokers]
        group = next(g for g in (f"failover-{i}" for i in range(100)) if preferred_coordinator(g, ids) == ids[0])
        survivor = ids[1]
        self.create_topic("failover1", 1, 10, replica_assignment=[[survivor]])
        config = {"bootstrap.servers": self.brokers[1].bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
        consumer = Consumer(config)
        try:
            consumer.subscribe(["failover1"])
            seen = 0
            deadline = time.monotonic() + 20
            while seen < 10 and time.monotonic() < deadline:
                seen += sum(1 for m in consumer.consume(100, 0.2) if not m.error())
            consumer.commit(offsets=[TopicPartition("failover1", 0, 7)], asynchronous=False)
            self.broker(ids[0]).kill()
            # The survivor sees /brokers/ids/<dead> vanish after the ZooKeeper session timeout (3 s).
            committed: list = []

            def moved() -> bool:
                try:
                    committed[:] = consumer.committed([TopicPartition("failover1", 0)], timeout=2)
                except Exception:
                    return False
                return bool(committed) and committed[0].offset == 7

            self.assertTrue(wait_until(moved, 25, 0.5), committed)

            # Group membership is not carried over: the member's next commit gets
            # ILLEGAL_GENERATION, it rejoins at the new coordinator, then commits.
            def commit_after_rejoin() -> bool:
                consumer.consume(10, 0.2)
                try:
                    consumer.commit(offsets=[TopicPartition("failover1", 0, 9)], asynchronous=False)
                    return True
                except Exception:
                    return False

            self.assertTrue(wait_until(commit_after_rejoin, 20, 0.1))
        finally:
            consumer.close()
            self.broker(ids[0]).start()
        other = Consumer({**config, "group.id": group})
        try:
            self.assertEqual(other.committed([TopicPartition("failover1", 0)], timeout=15)[0].offset, 9)
        finally:
            other.close()

    def test_zz_group_commits_across_a_sigkilled_coordinator_and_back(self) -> None:
        """
        A confluent-kafka member consumes and commits while its coordinator is
        SIGKILLed (the other broker claims the group's partition once the
        dead broker's session expires) and while it comes back (it is handed
        the partition again): consumption and commits go on, and the
        committed offsets in ZooKeeper, sampled throughout, never go back.
        """
        from kazoo.client import KazooClient

        ids = [b.broker_id for b in self.brokers]
        victim, survivor = ids
        group = next(g for g in (f"fenced-{i}" for i in range(1000)) if preferred_coordinator(g, ids) == victim)
        topic = "fenced-commits"
        self.create_topic(topic, 2, 50, replica_assignment=[[survivor], [survivor]])
        partition = offsets_partition_for(group)
        holder_path = f"/kafkatw/group_coordinator/holders/{partition}"
        zookeeper = KazooClient(hosts=self.brokers.zookeeper.connect_string)
        zookeeper.start(10)
        seen: dict[int, list[int]] = {0: [], 1: []}
        stop = threading.Event()

        def sample() -> None:  # the committed offsets as ZooKeeper holds them, every 20 ms
            while not stop.is_set():
                for p in (0, 1):
                    try:
                        data, _ = zookeeper.get(f"/kafkatw/consumers/{group}/offsets/{topic}/{p}")
                    except Exception:
                        continue
                    offset = json.loads(data)["offset"]
                    if not seen[p] or seen[p][-1] != offset:
                        seen[p].append(offset)
                stop.wait(0.02)

        def holder() -> tuple[int, int]:
            body = json.loads(zookeeper.get(holder_path)[0])
            return body["brokerid"], body["coordinator_epoch"]

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        producer = Producer({"bootstrap.servers": self.broker(survivor).bootstrap})
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        consumed = 0
        produced = 50

        def run(seconds: float, until: Callable[[], bool]) -> None:
            """Produce a little, consume, commit; for at most C{seconds} or until C{until()}."""
            nonlocal consumed, produced
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not until():
                for p in (0, 1):
                    producer.produce(topic, b"x", partition=p)
                produced += 1
                producer.poll(0)
                got = [m for m in consumer.consume(50, 0.1) if not m.error()]
                consumed += len(got)
                if got:
                    try:
                        consumer.commit(asynchronous=False)
                    except KafkaException:
                        pass  # the coordinator is moving: the next commit carries the positions

        def committed_past(offset: int) -> Callable[[], bool]:
            return lambda: all(seen[p] and seen[p][-1] > offset for p in (0, 1))

        try:
            consumer.subscribe([topic])
            run(20, committed_past(20))
            self.assertTrue(committed_past(20)(), seen)
            self.assertEqual(holder()[0], victim)
            epoch = holder()[1]
            before_kill = min(seen[p][-1] for p in (0, 1))

            self.broker(victim).kill()
            run(25, lambda: committed_past(before_kill + 30)() and holder()[0] == survivor)
            self.assertEqual(holder()[0], survivor, "the survivor did not take the group over")
            self.assertGreater(holder()[1], epoch)
            self.assertTrue(committed_past(before_kill + 30)(), (before_kill, seen))
            after_kill = min(seen[p][-1] for p in (0, 1))

            self.broker(victim).start()  # the preferred broker is handed the partition back
            run(25, lambda: committed_past(after_kill + 30)() and holder()[0] == victim)
            self.assertEqual(holder()[0], victim)
            self.assertTrue(committed_past(after_kill + 30)(), (after_kill, seen))
        finally:
            consumer.close()
            stop.set()
            sampler.join(5)
            zookeeper.stop()
            zookeeper.close()
            process = self.broker(victim)
            if process.popen is None or process.popen.poll() is not None:
                process.start()
        for p in (0, 1):
            self.assertEqual(seen[p], sorted(seen[p]), f"partition {p}'s committed offset went back: {seen[p]}")
        self.assertGreater(consumed, 2 * 50)


if __name__ == "__main__":
    unittest.main()
