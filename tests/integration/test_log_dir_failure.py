"""
A log dir that fills (KIP-112), with real processes: a real ZooKeeper, three
kafkatw brokers, librdkafka (confluent-kafka) as the client.

Broker 0 has two log dirs: the first on a small tmpfs (24 MB, mounted by the
test; root only) and the second on the ordinary disk.  It leads C{full-0},
whose replica is on the tmpfs, and follows C{full-1}, whose replica is on the
disk.  An acks=all load (RF=3, min.insync.replicas=2) fills the tmpfs.  What
must happen (issue 27: "a full disk hangs producers" until this):

  - broker 0 takes the tmpfs dir offline, the controller moves C{full-0}'s
    leadership to another in-sync replica and drops broker 0 from its ISR:
    the producer keeps getting acknowledgements within seconds of the fill;
  - broker 0 keeps serving its other log dir: it stays in C{full-1}'s ISR;
  - DescribeLogDirs and C{kafkatw log-dirs} show the tmpfs dir offline with
    C{KafkaStorageException};
  - once the tmpfs is grown and broker 0 restarted, it recovers the dir and
    rejoins C{full-0}'s ISR, and every acknowledged record is there.
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

from kafkatw.testing import BrokerProcess, ZooKeeperFixture, wait_for

from .test_admin_tools import kafkatw
from .test_replication import consume_all, isr_of, partition_info

_TOPIC = "full"
_OVERRIDES = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "zookeeper.session.timeout.ms": "6000",
    "log.segment.bytes": str(4 * 1024 * 1024),
}
_VALUE = 8 * 1024
#: The longest the producer may go without an acknowledgement when the tmpfs fills (s).
_MAX_STALL_S = 8.0


def _mount_tmpfs(directory: str, size: str) -> str | None:
    """Mount a tmpfs of C{size} at C{directory}; @return: why not, or C{None}."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", directory],
                            capture_output=True, text=True)
    return None if result.returncode == 0 else f"cannot mount a tmpfs: {result.stderr.strip()}"


class LogDirFailureTests(unittest.TestCase):
    timeout = 240

    def test_a_full_log_dir_moves_its_leaderships_and_the_broker_recovers_after_a_restart(self) -> None:
        base = tempfile.mkdtemp(prefix="kafkatw-log-dir-failure-")
        self.addCleanup(shutil.rmtree, base, True)
        small = os.path.join(base, "small")
        os.makedirs(small)
        reason = _mount_tmpfs(small, "24m")
        if reason is not None:
            raise unittest.SkipTest(reason)
        self.addCleanup(subprocess.run, ["umount", "-l", small], capture_output=True)
        disk = os.path.join(base, "disk")
        started = time.monotonic()
        zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"))
        connect = zookeeper.start() + "/kafkatw"
        self.addCleanup(zookeeper.stop)
        brokers = [BrokerProcess(i, connect, base, _OVERRIDES) for i in range(3)]
        brokers[0].data_dir = f"{small},{disk}"  # the tmpfs first: full-0's replica goes there
        for broker in brokers:
            self.addCleanup(broker.stop)
            broker.start()
        bootstrap = ",".join(b.bootstrap for b in brokers)
        topic = NewTopic(_TOPIC, num_partitions=2, replica_assignment=[[0, 1, 2], [1, 2, 0]],
                         config={"min.insync.replicas": "2"})
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([topic])[_TOPIC].result(20)
        for p in (0, 1):
            wait_for(lambda p=p: isr_of(bootstrap, _TOPIC, p) == [0, 1, 2], what=f"{_TOPIC}-{p}'s full ISR")
        self.assertEqual(partition_info(bootstrap, _TOPIC, 0)[0], 0)
        self.assertTrue(os.path.isdir(os.path.join(small, f"{_TOPIC}-0")))
        self.assertTrue(os.path.isdir(os.path.join(disk, f"{_TOPIC}-1")))

        acked: dict[int, dict[int, bytes]] = {0: {}, 1: {}}
        ack_times: dict[int, list[float]] = {0: [], 1: []}
        errors: list[str] = []

        def delivered(err, message) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked[message.partition()][message.offset()] = message.value()
                ack_times[message.partition()].append(time.monotonic())

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
                             "socket.timeout.ms": 10000, "queue.buffering.max.kbytes": 8192})
        sent = [0, 0]
        begin_count = [0]

        def send_for(duration_s: float, stop=lambda: False, rate: float | None = None) -> None:
            """Produce to both partitions for C{duration_s} (at most C{rate} records/s each), or until C{stop()}."""
            begin = time.monotonic()
            end = begin + duration_s
            while time.monotonic() < end and not stop():
                if rate is not None and sent[0] >= rate * (time.monotonic() - begin) + begin_count[0]:
                    producer.poll(0.01)
                    continue
                for p in (0, 1):
                    value = f"p{p}-{sent[p]:07d}-".encode().ljust(_VALUE if p == 0 else 64, b".")
                    try:
                        producer.produce(_TOPIC, value, partition=p, on_delivery=delivered)
                        sent[p] += 1
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)

        checked = [0.0]

        def full() -> bool:
            """Whether the tmpfs filled (checked every 0.2 s; a failed write is cut back: a MB may stay free)."""
            if time.monotonic() - checked[0] < 0.2:
                return False
            checked[0] = time.monotonic()
            stat = os.statvfs(small)
            return stat.f_bavail * stat.f_frsize < 1536 * 1024 or "is offline" in brokers[0].log_text()

        # Fill the tmpfs (24 MB) with full-0's records, bounded in time; then the load goes on.
        send_for(60, stop=full)
        checked[0] = 0.0
        self.assertTrue(full(), f"the tmpfs did not fill: {len(acked[0])} records of {_TOPIC}-0 acknowledged")
        begin_count[0] = sent[0]
        send_for(10, rate=200)
        end = time.monotonic()
        # The longest wait between two acknowledgements of full-0 (or the last and the end of
        # the load): the failover of the fill, as the load ran all along.
        times = ack_times[0]
        self.assertTrue(times)
        waits = [b - a for a, b in zip(times, times[1:] + [end])]
        stall = max(waits)
        at = times[waits.index(stall)] - started
        print(f"longest wait for an acknowledgement of {_TOPIC}-0: {stall:.2f} s, from {at:.1f} s"
              f" ({len(acked[0])} records acknowledged in {end - started:.1f} s)", file=sys.stderr)
        self.assertLess(stall, _MAX_STALL_S, f"the producer waited {stall:.1f} s for an acknowledgement"
                                             f" of {_TOPIC}-0 after the tmpfs filled")
        self.assertEqual(producer.flush(30), 0)
        self.assertEqual(errors, [])
        self.assertIn("is offline", brokers[0].log_text())
        leader, _, isr = partition_info(bootstrap, _TOPIC, 0)
        self.assertIn(leader, (1, 2))
        self.assertNotIn(0, isr)
        self.assertEqual(isr_of(bootstrap, _TOPIC, 1), [0, 1, 2])  # broker 0 serves its other log dir

        # DescribeLogDirs (kafkatw log-dirs): the tmpfs dir is offline, the disk one serves.
        result = kafkatw("log-dirs", "--bootstrap-server", bootstrap, "--describe", "--broker-list", "0")
        self.assertEqual(result.returncode, 0, result.stderr)
        [broker] = json.loads(result.stdout.splitlines()[-1])["brokers"]
        dirs = {d["logDir"]: d for d in broker["logDirs"]}
        self.assertEqual(dirs[small]["error"], "org.apache.kafka.common.errors.KafkaStorageException")
        self.assertEqual(dirs[small]["partitions"], [])
        self.assertIsNone(dirs[disk]["error"])
        self.assertEqual([p["partition"] for p in dirs[disk]["partitions"]], [f"{_TOPIC}-1"])

        # Grow the tmpfs, restart broker 0: it recovers the dir and rejoins full-0's ISR.
        subprocess.run(["mount", "-o", "remount,size=1g", small], check=True)
        brokers[0].stop()
        brokers[0].start()
        wait_for(lambda: isr_of(bootstrap, _TOPIC, 0) == [0, 1, 2], timeout_s=30, what="broker 0 back in the ISR")
        begin_count[0] = sent[0]
        send_for(1, rate=200)
        self.assertEqual(producer.flush(30), 0)

        # Nothing acknowledged was lost.
        for p in (0, 1):
            end = max(acked[p]) + 1
            found = dict(consume_all(bootstrap, _TOPIC, p, end, timeout_s=30))
            missing = [o for o in acked[p] if found.get(o) != acked[p][o]]
            self.assertEqual(missing[:5], [], f"{len(missing)} acknowledged records of {_TOPIC}-{p} lost")
        self.assertLess(time.monotonic() - started, 150)
