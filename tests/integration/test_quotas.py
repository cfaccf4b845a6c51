"""
Client quotas with real processes: a real ZooKeeper, one kafkatw broker, and
two confluent-kafka (librdkafka) producers side by side.

A producer whose client id has a low C{producer_byte_rate} (set with
C{kafkatw configs --entity-type clients}) is slowed to about its quota by
C{throttle_time_ms} and the muted connection (KIP-219), while the other keeps
a much higher rate; deleting the quota with C{kafkatw configs} takes effect
without a restart.  The quota is described with C{kafkatw configs --describe}
and kafkatw's AdminClient.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.client.admin import ClientQuotaFilterComponent
from kafkatw.client.blocking import BlockingAdminClient
from kafkatw.testing import ClassFixture, running_cluster

QUOTA_BYTES_PER_S = 50_000
#: Three 1 s samples: a young rate is measured over at least 2 s, so a burst of
#: at most twice the quota passes before the first throttle.
OVERRIDES = {"quota.window.num": "3", "quota.window.size.seconds": "1"}
VALUE = b"q" * 1000


def configs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "configs", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


def produce_for(bootstrap: str, client_id: str, topic: str, seconds: float, out: dict) -> None:
    """Produce as fast as the broker lets C{client_id} for C{seconds}; C{out[client_id]} = bytes acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "batch.size": 16384, "queue.buffering.max.kbytes": 64, "acks": 1})
    delivered = [0]

    def report(err: object, msg: object) -> None:
        if err is None:
            delivered[0] += len(VALUE)

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, VALUE, partition=0, on_delivery=report)
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    out[client_id] = delivered[0]  # what was acknowledged within the time
    producer.flush(30)


class ClientQuotaTests(ClassFixture, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1, overrides=OVERRIDES)
        cls.cluster = cls._cluster.__enter__()
        cls.bootstrap = cls.cluster[0].bootstrap
        admin = AdminClient({"bootstrap.servers": cls.bootstrap})
        admin.create_topics([NewTopic("quota-t", 1, 1)])["quota-t"].result(20)

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def race(self, seconds: float) -> dict:
        out: dict = {}
        threads = [threading.Thread(target=produce_for, args=(self.bootstrap, c, "quota-t", seconds, out))
                   for c in ("slow", "fast")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 60)
        return {c: out[c] / seconds for c in out}

    def test_throttled_client_next_to_an_unthrottled_one_and_live_change(self) -> None:
        done = configs("--bootstrap-server", self.bootstrap, "--alter", "--entity-type", "clients",
                       "--entity-name", "slow", "--add-config", f"producer_byte_rate={QUOTA_BYTES_PER_S}")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), "Completed updating config for client slow.")
        shown = configs("--bootstrap-server", self.bootstrap, "--describe", "--entity-type", "clients",
                        "--entity-name", "slow")
        self.assertEqual(shown.stdout.strip(),
                         f"Quota configs for client-id 'slow' are producer_byte_rate={float(QUOTA_BYTES_PER_S)}")
        with BlockingAdminClient(self.bootstrap) as admin:
            found = admin.describe_client_quotas([ClientQuotaFilterComponent("client-id", "slow")])
        self.assertEqual(found, {(("client-id", "slow"),): {"producer_byte_rate": float(QUOTA_BYTES_PER_S)}})
        time.sleep(1)  # the broker follows /config/changes

        rates = self.race(6.0)
        self.assertLess(rates["slow"], 2 * QUOTA_BYTES_PER_S, rates)
        self.assertGreater(rates["fast"], 4 * rates["slow"], rates)

        done = configs("--bootstrap-server", self.bootstrap, "--alter", "--entity-type", "clients",
                       "--entity-name", "slow", "--delete-config", "producer_byte_rate")
        self.assertEqual(done.returncode, 0, done.stderr)
        shown = configs("--bootstrap-server", self.bootstrap, "--describe", "--entity-type", "clients")
        self.assertEqual(shown.stdout.strip(), "")
        time.sleep(4)  # the notification, and the throttle of the first run has passed
        out: dict = {}
        produce_for(self.bootstrap, "slow", "quota-t", 4.0, out)
        self.assertGreater(out["slow"] / 4.0, 4 * QUOTA_BYTES_PER_S, out)
