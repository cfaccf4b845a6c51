"""
Replication between two brokers whose only listener is SASL_PLAINTEXT: each
broker's replica fetchers log in with C{sasl.mechanism.inter.broker.protocol}
(PLAIN) and the C{username}/C{password} of its listener's JAAS option, so an
acks=all write is acknowledged by both replicas.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ZooKeeperFixture, find_free_port, wait_for

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


class SaslReplicationTests(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="kafkatw-sasl-replication-")
        self.addCleanup(shutil.rmtree, self.directory, True)
        zookeeper = ZooKeeperFixture(os.path.join(self.directory, "zookeeper"))
        connect = zookeeper.start()
        self.addCleanup(zookeeper.stop)
        self.brokers = []
        for broker_id in (0, 1):
            port = find_free_port()
            broker = BrokerProcess(broker_id, connect + "/kafkatw", self.directory, {
                "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            }, port=port)
            self.addCleanup(broker.stop)
            self.brokers.append(broker.start())

    def test_followers_fetch_over_sasl(self) -> None:
        from kafkatw.client.admin import NewTopic
        from kafkatw.client.blocking import BlockingAdminClient
        from kafkatw.client.security import SecurityConfig

        security = SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                  sasl_plain_username="alice", sasl_plain_password="alice-secret")
        bootstrap = self.brokers[0].bootstrap
        with BlockingAdminClient(bootstrap, security=security) as admin:
            self.assertIsNone(admin.create_topics([NewTopic("replicated", 1, 2)])["replicated"])
            from kafka import KafkaProducer

            producer = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                                     sasl_mechanism="PLAIN", sasl_plain_username="alice",
                                     sasl_plain_password="alice-secret", acks="all")
            for i in range(10):
                producer.send("replicated", f"r{i}".encode(), partition=0).get(timeout=30)
            producer.close()

            def in_sync() -> bool:
                partition = admin.describe_topics(["replicated"])["replicated"].partitions[0]
                return sorted(partition.isr) == [0, 1]

            wait_for(in_sync, 30, "both replicas in sync")
        for broker in self.brokers:
            log = broker.log_text()
            self.assertNotIn("secret", log)
        self.assertTrue(any("authenticated User:broker" in b.log_text() for b in self.brokers))
