"""
A broker's C{advertised.listeners} changed at runtime (a per-broker dynamic
config, Kafka's C{DynamicListenerConfig}), with real processes: a real
ZooKeeper, two kafkatw brokers, librdkafka (confluent-kafka) as the client.

DescribeConfigs reports C{advertised.listeners} as not read-only;
C{kafkatw configs --alter --entity-type brokers --entity-name 0 --add-config
advertised.listeners=...} makes broker 0 register its new address in
C{/brokers/ids/0}, and a new client bootstrapping from either broker is
pointed at it (Metadata) and produces through it.  The cluster-wide default
is refused, as Kafka refuses it.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ZooKeeperFixture, wait_for

from .test_admin_tools import kafkatw


def broker_addresses(bootstrap: str) -> dict[int, tuple[str, int]]:
    """Broker id -> (host, port) in the Metadata answer to a new client bootstrapping from C{bootstrap}."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=10)
    return {b.id: (b.host, b.port) for b in metadata.brokers.values()}


class DynamicAdvertisedListenersTests(unittest.TestCase):
    timeout = 180

    def test_a_new_client_is_pointed_at_the_new_address(self) -> None:
        base = tempfile.mkdtemp(prefix="kafkatw-advertised-")
        self.addCleanup(shutil.rmtree, base, True)
        zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"))
        connect = zookeeper.start() + "/kafkatw"
        self.addCleanup(zookeeper.stop)
        brokers = [BrokerProcess(i, connect, base) for i in range(2)]
        for broker in brokers:
            self.addCleanup(broker.stop)
            broker.start()
        port = brokers[0].port
        for b in brokers:
            wait_for(lambda b=b: broker_addresses(b.bootstrap).get(0) == ("127.0.0.1", port),
                     what="broker 0 at 127.0.0.1")
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        entry = admin.describe_configs([resource])[resource].result(20)["advertised.listeners"]
        self.assertFalse(entry.is_read_only)

        refused = kafkatw("configs", "--bootstrap-server", brokers[0].bootstrap, "--entity-type", "brokers",
                          "--entity-default", "--alter", "--add-config",
                          f"advertised.listeners=PLAINTEXT://localhost:{port}")
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("broker id must be specified", refused.stdout + refused.stderr)
        wrong = kafkatw("configs", "--bootstrap-server", brokers[0].bootstrap, "--entity-type", "brokers",
                        "--entity-name", "0", "--alter", "--add-config",
                        f"advertised.listeners=OTHER://localhost:{port}")
        self.assertNotEqual(wrong.returncode, 0)

        changed = kafkatw("configs", "--bootstrap-server", brokers[0].bootstrap, "--entity-type", "brokers",
                          "--entity-name", "0", "--alter", "--add-config",
                          f"advertised.listeners=PLAINTEXT://localhost:{port}")
        self.assertEqual(changed.returncode, 0, changed.stderr)
        for b in brokers:  # broker 1 learns it from broker 0's registration
            wait_for(lambda b=b: broker_addresses(b.bootstrap).get(0) == ("localhost", port),
                     what=f"broker 0 at localhost in broker {b.broker_id}'s metadata")
        self.assertEqual(broker_addresses(brokers[1].bootstrap)[1], ("127.0.0.1", brokers[1].port))
        entry = admin.describe_configs([resource])[resource].result(20)["advertised.listeners"]
        self.assertEqual(entry.value, f"PLAINTEXT://localhost:{port}")
        self.assertFalse(entry.is_read_only)

        admin.create_topics([NewTopic("t", num_partitions=1, replica_assignment=[[0]])])["t"].result(20)
        delivered: list = []
        producer = Producer({"bootstrap.servers": brokers[1].bootstrap, "acks": "all"})
        producer.produce("t", b"via localhost", on_delivery=lambda err, m: delivered.append(err))
        self.assertEqual(producer.flush(30), 0)
        self.assertEqual(delivered, [None])
        with open(brokers[0].log_path, encoding="utf-8") as f:
            self.assertIn(f"broker 0 advertises PLAINTEXT://localhost:{port} now", f.read())
