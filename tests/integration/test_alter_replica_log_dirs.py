"""
Moving a replica between the log dirs of one broker (AlterReplicaLogDirs,
KIP-113), with real processes: a real ZooKeeper, one kafkatw broker with
C{log.dirs=a,b}, librdkafka (confluent-kafka) producing and consuming.

  1. C{kafkatw reassign-partitions --execute} with a C{log_dirs} entry moves
     the replica from a to b while an idempotent producer writes; while it
     moves, C{kafkatw log-dirs --describe} shows the future replica in b;
     afterwards DescribeLogDirs shows the replica in b only, C{--verify}
     says it completed, the old directory is gone, and every record
     produced is consumed exactly once, in order.
  2. The kafkatw AdminClient moves it back to a; the broker is killed
     (SIGKILL) in the middle of the move and restarted: the old log serves,
     the move resumes and completes, and nothing is lost.

The copy is throttled (C{replica.alter.log.dirs.io.max.bytes.per.second})
so that each move lasts seconds, long enough to be seen and interrupted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.client.blocking import BlockingAdminClient
from kafkatw.errors import ErrorCode
from kafkatw.testing import BrokerProcess, ZooKeeperFixture, wait_for

from .test_admin_tools import kafkatw
from .test_replication import consume_all

_TOPIC = "moving"
_RATE = 300_000  # bytes/s copied
_VALUE = 1000


def replica_dirs(admin: BlockingAdminClient) -> dict[bool, str]:
    """C{is_future -> log dir} of the replica of moving-0 on broker 0."""
    found = {}
    for result in admin.describe_log_dirs([0], [(_TOPIC, 0)])[0]:
        for t in result.topics:
            for p in t.partitions:
                found[bool(p.is_future_key)] = result.log_dir
    return found


class AlterReplicaLogDirsTests(unittest.TestCase):
    timeout = 300

    def test_moves_while_producing_and_after_a_kill(self) -> None:
        base = tempfile.mkdtemp(prefix="kafkatw-alter-log-dirs-")
        self.addCleanup(shutil.rmtree, base, True)
        a, b = os.path.join(base, "a"), os.path.join(base, "b")
        zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"))
        connect = zookeeper.start() + "/kafkatw"
        self.addCleanup(zookeeper.stop)
        broker = BrokerProcess(0, connect, base, {
            "replica.alter.log.dirs.io.max.bytes.per.second": str(_RATE), "log.segment.bytes": str(1 << 20),
            "log.segment.delete.delay.ms": "1000", "zookeeper.session.timeout.ms": "6000"})
        broker.data_dir = f"{a},{b}"
        self.addCleanup(broker.stop)
        broker.start()
        bootstrap = broker.bootstrap
        creator = AdminClient({"bootstrap.servers": bootstrap})
        creator.create_topics([NewTopic(_TOPIC, num_partitions=1, replication_factor=1)])[_TOPIC].result(20)
        wait_for(lambda: os.path.isdir(os.path.join(a, f"{_TOPIC}-0")), what="the replica in log dir a")
        admin = BlockingAdminClient(bootstrap)
        self.addCleanup(admin.close)

        sent: list[bytes] = []
        errors: list[str] = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000})

        def delivered(err, message) -> None:
            if err is not None:
                errors.append(str(err))

        def produce(count: int) -> None:
            for _ in range(count):
                value = b"%08d" % len(sent) + b"x" * (_VALUE - 8)
                sent.append(value)
                while True:
                    try:
                        producer.produce(_TOPIC, value, partition=0, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)

        produce(3000)  # 3 MB: about 10 s of copy at _RATE
        self.assertEqual(producer.flush(30), 0)

        # 1. reassign-partitions with a log_dirs entry, while producing
        plan = os.path.join(base, "plan.json")
        with open(plan, "w") as f:
            json.dump({"version": 1, "partitions": [{"topic": _TOPIC, "partition": 0, "replicas": [0],
                                                     "log_dirs": [b]}]}, f)
        tool = subprocess.Popen([sys.executable, "-m", "kafkatw.cli.main", "reassign-partitions",
                                 "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file", plan],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while tool.poll() is None and time.monotonic() < deadline:
            produce(5)  # about 100 KB/s, below the copy's _RATE: the move catches up
            time.sleep(0.05)
        out, err = tool.communicate(timeout=30)
        self.assertEqual(tool.returncode, 0, err)
        self.assertIn(f"Successfully started moving log directory to {b} for replica {_TOPIC}-0 with broker 0", out)
        seen_future = False
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            produce(5)
            dirs = replica_dirs(admin)
            if dirs == {False: b}:
                break
            if dirs.get(True) == b and not seen_future:
                seen_future = True
                described = kafkatw("log-dirs", "--bootstrap-server", bootstrap, "--describe",
                                    "--topic-list", _TOPIC)
                self.assertEqual(described.returncode, 0, described.stderr)
                logs = json.loads(described.stdout.splitlines()[-1])["brokers"][0]["logDirs"]
                futures = {d["logDir"]: [p["isFuture"] for p in d["partitions"]] for d in logs}
                self.assertEqual(futures, {a: [False], b: [True]})
            time.sleep(0.05)
        self.assertTrue(seen_future, "the future replica was never seen")
        self.assertEqual(replica_dirs(admin), {False: b})
        produce(200)  # written to the moved replica
        self.assertEqual(producer.flush(30), 0)
        self.assertEqual(errors, [])
        verify = kafkatw("reassign-partitions", "--bootstrap-server", bootstrap, "--verify",
                         "--reassignment-json-file", plan)
        self.assertIn(f"Reassignment of replica {_TOPIC}-0-0 completed successfully.", verify.stdout)
        wait_for(lambda: not [n for n in os.listdir(a) if n.startswith(f"{_TOPIC}-0")],
                 what="the old log deleted from a")
        self.assertEqual([v for _, v in consume_all(bootstrap, _TOPIC, 0, len(sent))], sent)

        # 2. the AdminClient moves it back to a; kill -9 in the middle of the move
        self.assertEqual(admin.alter_replica_log_dirs({(_TOPIC, 0, 0): a}), {(_TOPIC, 0, 0): ErrorCode.none})
        wait_for(lambda: replica_dirs(admin).get(True) == a, what="the future replica in a")
        time.sleep(1.0)  # part of the copy done
        self.assertEqual(replica_dirs(admin), {False: b, True: a})
        broker.kill()
        futures = [n for n in os.listdir(a) if n.startswith(f"{_TOPIC}-0.") and n.endswith("-future")]
        self.assertEqual(len(futures), 1, os.listdir(a))
        admin.close()
        broker.start()
        admin = BlockingAdminClient(bootstrap)
        self.addCleanup(admin.close)
        with open(broker.log_path, encoding="utf-8") as f:
            self.assertIn(f"resuming the move of {_TOPIC}-0", f.read())
        wait_for(lambda: replica_dirs(admin) == {False: a}, timeout_s=90, what="the move resumed and finished")
        produce(100)
        self.assertEqual(producer.flush(30), 0)
        self.assertEqual(errors, [])
        self.assertEqual([v for _, v in consume_all(bootstrap, _TOPIC, 0, len(sent))], sent)
