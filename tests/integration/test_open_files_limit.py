"""
A broker under a low open files limit (issue 32; docs/operations.md, "Open
files"), with real processes: a real ZooKeeper, one kafkatw broker started
under C{prlimit --nofile=SOFT:HARD}, librdkafka (confluent-kafka) as the
client.

  - the broker raises its soft limit to the hard one at start, and says so;
  - a topic with more partitions than the limit allows: the partitions that
    fit are created and served, the others are not created (one log line
    each, C{KAFKA_STORAGE_ERROR} to a producer); the log dir stays online and
    the broker serves on;
  - restarted under a hard limit its logs do not fit in, the broker exits
    with status 1 and one line naming the limit; under a higher one it starts
    again with every log (its log dir was never taken offline).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ZooKeeperFixture, wait_for

#: The broker keeps this many descriptors free below its soft limit (OPEN_FILES_RESERVE).
_RESERVE = 256
_PARTITIONS = 400


class LimitedBroker(BrokerProcess):
    """A L{BrokerProcess} started under C{prlimit --nofile=<soft>:<hard>}."""

    nofile = "600:600"

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}", "--"] + super().command()


def _log_text(broker: BrokerProcess) -> str:
    text = ""
    for path in (broker.log_path + ".1", broker.log_path):
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                text += f.read()
    return text


def _hosted(broker: BrokerProcess) -> set[str]:
    return {name for name in os.listdir(broker.data_dir) if name.startswith("many-")}


class OpenFilesLimitTests(unittest.TestCase):
    timeout = 240

    def setUp(self) -> None:
        if shutil.which("prlimit") is None:
            raise unittest.SkipTest("prlimit (util-linux) is not installed")

    def start_zookeeper(self) -> tuple[str, str]:
        """
        A temporary base dir and a real ZooKeeper in it, both gone after the
        test: (base dir, connect string with the C{/kafkatw} chroot).
        """
        base = tempfile.mkdtemp(prefix="kafkatw-open-files-")
        self.addCleanup(shutil.rmtree, base, True)
        zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"))
        connect = zookeeper.start() + "/kafkatw"
        self.addCleanup(zookeeper.stop)
        return base, connect

    def test_partitions_past_the_limit_are_refused_and_a_start_that_cannot_fit_exits(self) -> None:
        base, connect = self.start_zookeeper()
        broker = LimitedBroker(0, connect, base)
        broker.nofile = "300:600"
        broker.start(60)
        self.addCleanup(broker.kill)
        self.assertIn("raised the open files limit (ulimit -n) from 300 to 600", _log_text(broker))

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("many", _PARTITIONS, 1)], operation_timeout=60)["many"].result(90)
        # every assigned partition is either hosted or refused; none makes the broker stop
        wait_for(lambda: _log_text(broker).count("is offline on broker 0: cannot create the log of many-")
                 + len(_hosted(broker)) >= _PARTITIONS, 90, "every partition hosted or refused")
        hosted = _hosted(broker)
        self.assertGreater(len(hosted), 50)
        self.assertLess(len(hosted), _PARTITIONS)
        with open(f"/proc/{broker.popen.pid}/limits") as f:
            self.assertIn("600", next(line for line in f if line.startswith("Max open files")))
        self.assertLessEqual(len(os.listdir(f"/proc/{broker.popen.pid}/fd")), 600 - _RESERVE + 10)
        text = _log_text(broker)
        self.assertIn("of the 600 open files the limit (ulimit -n) allows are in use", text)
        self.assertNotIn("offline (", text)  # no log dir failure
        self.assertIsNone(broker.popen.poll())

        # a hosted partition takes records; a refused one does not
        served = int(sorted(hosted)[0].rsplit("-", 1)[1])
        refused = min(set(range(_PARTITIONS)) - {int(n.rsplit("-", 1)[1]) for n in hosted})
        results: dict[int, object] = {}
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000, "retries": 0})
        for partition in (served, refused):
            producer.produce("many", b"v", partition=partition,
                             on_delivery=lambda err, msg: results.__setitem__(msg.partition(), err))
        producer.flush(30)
        self.assertIsNone(results[served])
        # KAFKA_STORAGE_ERROR is retriable: librdkafka retries it until the message times out
        self.assertIsNotNone(results[refused])

        # a start whose logs do not fit: status 1, one line naming the limit
        self.assertEqual(broker.stop(), -signal.SIGTERM)  # a clean stop (twistd re-raises the signal)
        broker.nofile = "150:150"
        with self.assertRaises(RuntimeError) as caught:
            broker.start(60)
        self.assertEqual(broker.popen.returncode, 1)
        self.assertIn("need more file descriptors than the open files limit (ulimit -n) of 150", str(caught.exception))
        broker.nofile = "600:600"
        broker.start(60)
        loaded = [int(n) for n in re.findall(r"loaded (\d+) logs in", _log_text(broker))]
        self.assertGreaterEqual(loaded[-1], len(hosted))
        self.assertLessEqual(hosted, _hosted(broker))  # (a few more may fit now: fewer connections)

    def test_a_replica_refused_past_the_limit_leads_nowhere(self) -> None:
        """
        Three brokers, replication factor 3, broker 2 under a low limit: the
        replicas it refuses are offline for the controller (as after a
        LeaderAndIsr C{KAFKA_STORAGE_ERROR} in Kafka), which moves their
        leaderships to brokers 0 and 1 and drops broker 2 from their ISRs;
        records produced to them are acknowledged by all the others.
        """
        base, connect = self.start_zookeeper()
        brokers = [BrokerProcess(0, connect, base), BrokerProcess(1, connect, base), LimitedBroker(2, connect, base)]
        for broker in brokers:
            broker.start(60)
            self.addCleanup(broker.kill)
        limited = brokers[2]
        admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
        admin.create_topics([NewTopic("many", _PARTITIONS, 3)], operation_timeout=60)["many"].result(90)
        wait_for(lambda: _log_text(limited).count("is offline on broker 2: cannot create the log of many-")
                 + len(_hosted(limited)) >= _PARTITIONS, 120, "every replica of broker 2 hosted or refused")
        hosted = {int(n.rsplit("-", 1)[1]) for n in _hosted(limited)}
        refused = set(range(_PARTITIONS)) - hosted
        self.assertTrue(refused and hosted)

        def placement() -> dict[int, tuple[int, list[int]]]:
            topic = admin.list_topics("many", timeout=10).topics["many"]
            return {p.id: (p.leader, list(p.isrs)) for p in topic.partitions.values()}

        def settled() -> bool:
            found = placement()
            return len(found) == _PARTITIONS and all(
                leader in (0, 1) and 2 not in isr for p, (leader, isr) in found.items() if p in refused)

        wait_for(settled, 120, "every refused replica out of its leadership and ISR")
        found = placement()
        self.assertTrue(all(found[p][0] in (0, 1) or p in hosted for p in found))  # 2 leads only what it hosts
        self.assertIn("a replica of broker 2 is offline here", _log_text(limited))
        partition = min(refused)
        results: list[object] = []
        producer = Producer({"bootstrap.servers": brokers[0].bootstrap, "acks": "all", "message.timeout.ms": 20000})
        producer.produce("many", b"v", partition=partition, on_delivery=lambda err, msg: results.append(err))
        producer.flush(30)
        self.assertEqual(results, [None])
        self.assertIsNone(limited.popen.poll())
