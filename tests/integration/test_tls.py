"""
TLS listeners with real processes (issue 11): a real ZooKeeper, kafkatw
brokers with PLAINTEXT and SSL listeners, and kcat, confluent-kafka
(librdkafka), kafka-python, aiokafka and kafkatw's own clients over SSL, with
and without client certificates; a two-broker cluster replicating through an
SSL inter-broker listener; bad input and bad settings.

The certificates are made with trustme when the class starts
(L{kafkatw.testing.make_tls_files}).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ClassFixture, ZooKeeperFixture, find_free_port, make_tls_files, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


class SingleBrokerTLSTests(ClassFixture, unittest.TestCase):
    """One broker: PLAINTEXT and SSL (client certificates requested) listeners."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.base = tempfile.mkdtemp(prefix="kafkatw-tls-")
        cls.tls = make_tls_files(os.path.join(cls.base, "certs"))
        cls.zookeeper = ZooKeeperFixture(os.path.join(cls.base, "zookeeper"))
        cls.broker = None
        try:
            connect = cls.zookeeper.start() + "/kafkatw"
            plain, ssl, other = find_free_port(), find_free_port(), find_free_port()
            cls.ssl_port, cls.other_port = ssl, other
            cls.broker = BrokerProcess(0, connect, cls.base, port=plain, env={"PYTHONPATH": child_env()["PYTHONPATH"]},
                                       overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl},OTHER://127.0.0.1:{other}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,OTHER:SSL",
                # a listener whose certificate names another host (per-listener ssl.* keys)
                "listener.name.other.ssl.keystore.location": cls.tls.other_host,
                "ssl.keystore.location": cls.tls.server,
                "ssl.truststore.location": cls.tls.ca,
                "ssl.client.auth": "requested",
                "ssl.handshake.timeout.ms": "2000",
                "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=eng,.*$/$1/,DEFAULT",
            }).start()
            cls.ssl_bootstrap = f"localhost:{ssl}"
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.broker is not None:
            cls.broker.stop()
        cls.zookeeper.stop()
        shutil.rmtree(cls.base, True)

    def confluent(self, **extra: str) -> dict[str, str]:
        return {"bootstrap.servers": self.ssl_bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": self.tls.ca, **extra}

    def round_trip_confluent(self, topic: str, **extra: str) -> list[bytes]:
        admin = AdminClient(self.confluent(**extra))
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
        producer = Producer(self.confluent(**extra))
        for i in range(50):
            producer.produce(topic, b"record-%d" % i)
        self.assertEqual(producer.flush(20), 0)
        consumer = Consumer(self.confluent(**extra, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 50 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.close()
        return values

    def test_confluent_kafka_over_ssl_gets_ssl_endpoints(self) -> None:
        metadata = AdminClient(self.confluent()).list_topics(timeout=10)
        self.assertEqual([(b.host, b.port) for b in metadata.brokers.values()], [("127.0.0.1", self.ssl_port)])
        plain = AdminClient({"bootstrap.servers": self.broker.bootstrap}).list_topics(timeout=10)
        self.assertEqual([b.port for b in plain.brokers.values()], [self.broker.port])
        self.assertEqual(self.round_trip_confluent("confluent-ssl"), [b"record-%d" % i for i in range(50)])

    def test_mutual_tls_principal(self) -> None:
        alice = self.tls.clients["alice"]
        values = self.round_trip_confluent("mtls", **{"ssl.certificate.location": alice, "ssl.key.location": alice})
        self.assertEqual(len(values), 50)
        self.assertIn("on listener SSL: principal User:alice", self.broker.log_text())

    def test_kcat(self) -> None:
        args = ["kcat", "-b", self.ssl_bootstrap, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={self.tls.ca}"]
        produced = subprocess.run(args + ["-P", "-t", "kcat-ssl"], input=b"one\ntwo\n", capture_output=True, timeout=60)
        self.assertEqual(produced.returncode, 0, produced.stderr)
        consumed = subprocess.run(args + ["-C", "-t", "kcat-ssl", "-o", "beginning", "-e", "-q"], capture_output=True,
                                  timeout=60)
        self.assertEqual(consumed.stdout.split(), [b"one", b"two"], consumed.stderr)

    def test_kafka_python(self) -> None:
        from kafka import KafkaConsumer, KafkaProducer

        options = {"bootstrap_servers": self.ssl_bootstrap, "security_protocol": "SSL", "ssl_cafile": self.tls.ca,
                   "ssl_certfile": self.tls.clients["bob"], "ssl_keyfile": self.tls.clients["bob"]}
        producer = KafkaProducer(**options)
        for i in range(10):
            producer.send("kafka-python-ssl", b"kp-%d" % i)
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer("kafka-python-ssl", auto_offset_reset="earliest", consumer_timeout_ms=10000,
                                 **options)
        values = [m.value for m in consumer]
        consumer.close()
        self.assertEqual(values, [b"kp-%d" % i for i in range(10)])
        self.assertIn("principal User:bob", self.broker.log_text())

    def test_aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.helpers import create_ssl_context

        async def go() -> list[bytes]:
            context = create_ssl_context(cafile=self.tls.ca)
            producer = AIOKafkaProducer(bootstrap_servers=self.ssl_bootstrap, security_protocol="SSL",
                                        ssl_context=context)
            await producer.start()
            try:
                for i in range(10):
                    await producer.send_and_wait("aiokafka-ssl", b"ak-%d" % i)
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer("aiokafka-ssl", bootstrap_servers=self.ssl_bootstrap, security_protocol="SSL",
                                        ssl_context=context, auto_offset_reset="earliest")
            await consumer.start()
            try:
                values = []
                while len(values) < 10:
                    batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                    values += [m.value for records in batch.values() for m in records]
                return values
            finally:
                await consumer.stop()

        self.assertEqual(asyncio.run(go()), [b"ak-%d" % i for i in range(10)])

    def test_kafkatw_clients_and_command_config(self) -> None:
        from kafkatw.client.blocking import BlockingConsumer, BlockingProducer

        options = {"security_protocol": "SSL", "ssl_cafile": self.tls.ca, "ssl_certfile": self.tls.clients["alice"]}
        with BlockingProducer(self.ssl_bootstrap, **options) as producer:
            for i in range(20):
                producer.send("kafkatw-ssl", b"kt-%d" % i)
            producer.flush()
        with BlockingConsumer(self.ssl_bootstrap, auto_offset_reset="earliest", **options) as consumer:
            consumer.assign([("kafkatw-ssl", 0)])
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < 20 and time.monotonic() < deadline:
                values += [r.value for r in consumer.poll(1000)]
        self.assertEqual(values, [b"kt-%d" % i for i in range(20)])
        properties = os.path.join(self.base, "client.properties")
        with open(properties, "w") as f:
            f.write(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={self.tls.ca}\n")
        listed = subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "topics", "--bootstrap-server",
                                 self.ssl_bootstrap, "--command-config", properties, "--list"],
                                capture_output=True, text=True, timeout=60, env=child_env())
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("kafkatw-ssl", listed.stdout.split())
        # Without the trust store the broker's certificate is not trusted: the command fails.
        with open(properties, "w") as f:
            f.write("security.protocol=SSL\n")
        refused = subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "topics", "--bootstrap-server",
                                  self.ssl_bootstrap, "--command-config", properties, "--list"],
                                 capture_output=True, text=True, timeout=90, env=child_env())
        self.assertNotEqual(refused.returncode, 0)

    def test_ship_with_command_config(self) -> None:
        properties = os.path.join(self.base, "ship.properties")
        with open(properties, "w") as f:
            f.write(f"security.protocol=SSL\nssl.truststore.location={self.tls.ca}\n")
        log = os.path.join(self.base, "app.log")
        with open(log, "w") as f:
            f.write("login alice\nlogout alice\n")
        shipped = subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "ship", "--bootstrap-server",
                                  self.ssl_bootstrap, "--command-config", properties, "--topic", "ship-ssl", "--once",
                                  "--no-state", log], capture_output=True, text=True, timeout=60, env=child_env())
        self.assertEqual(shipped.returncode, 0, shipped.stderr)
        consumed = subprocess.run(["kcat", "-b", self.broker.bootstrap, "-C", "-t", "ship-ssl", "-e", "-q"],
                                  capture_output=True, text=True, timeout=60)
        self.assertEqual(consumed.stdout.splitlines(), ["login alice", "logout alice"])

    def test_bad_input_leaves_others_served(self) -> None:
        """Plaintext bytes on the TLS port, a stalled handshake, a ClientHello on the plaintext port."""
        with socket.create_connection(("127.0.0.1", self.ssl_port)) as s:
            s.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
            s.settimeout(10)
            try:
                first = s.recv(100)[:1]
            except ConnectionResetError:  # aborted
                first = b""
            self.assertIn(first, (b"", b"\x15"))  # closed, perhaps after a TLS alert
        stalled = socket.create_connection(("127.0.0.1", self.ssl_port))
        try:
            stalled.settimeout(10)
            started = time.monotonic()
            try:
                self.assertEqual(stalled.recv(100), b"")  # closed after ssl.handshake.timeout.ms=2000
            except ConnectionResetError:  # aborted
                pass
            self.assertLess(time.monotonic() - started, 9)
        finally:
            stalled.close()
        import ssl

        context = ssl.create_default_context(cafile=self.tls.ca)
        with socket.create_connection(("127.0.0.1", self.broker.port)) as raw:
            with self.assertRaises((ssl.SSLError, OSError)):
                context.wrap_socket(raw, server_hostname="localhost")
        log = self.broker.log_text()
        self.assertTrue(wait_until(lambda: "no TLS handshake within ssl.handshake.timeout.ms=2000"
                                   in self.broker.log_text(), 10))
        self.assertIn("on listener SSL failed", log)
        self.assertIn("is outside 0..socket.request.max.bytes", log)
        self.assertEqual(len(self.round_trip_confluent("after-bad-input")), 50)


    def test_hostname_mismatch_and_refused_client_certificates(self) -> None:
        from kafkatw.client.blocking import BlockingAdminClient
        from kafkatw.errors import KafkaError

        bootstrap = f"localhost:{self.other_port}"
        with self.assertRaises(KafkaError):
            admin = BlockingAdminClient(bootstrap, security_protocol="SSL", ssl_cafile=self.tls.ca,
                                        request_timeout_ms=5000, default_api_timeout_ms=8000)
            try:
                admin.list_topics()
            finally:
                admin.close()
        with BlockingAdminClient(bootstrap, security_protocol="SSL", ssl_cafile=self.tls.ca,
                                 ssl_check_hostname=False) as admin:
            self.assertIsInstance(admin.list_topics(), list)
        import ssl

        for certfile in (self.tls.expired_client, self.tls.untrusted_client):
            context = ssl.create_default_context(cafile=self.tls.ca)
            context.load_cert_chain(certfile)
            with socket.create_connection(("127.0.0.1", self.ssl_port)) as raw:
                with self.assertRaises((ssl.SSLError, OSError)):
                    with context.wrap_socket(raw, server_hostname="localhost") as tls:
                        tls.sendall(b"\x00\x00\x00\x00")
                        tls.recv(10)
        def refused() -> list[str]:
            return [line for line in self.broker.log_text().splitlines()
                    if "on listener SSL failed" in line and "certificate" in line]

        self.assertTrue(wait_until(lambda: len(refused()) >= 2, 10), self.broker.log_text()[-3000:])
        reasons = "\n".join(refused())
        self.assertIn("CN=expired", reasons)
        self.assertIn("it has expired", reasons)
        self.assertIn("CN=mallory", reasons)
        self.assertIn("it is not signed by a CA in the trust store", reasons)
        self.assertEqual(len(self.round_trip_confluent("after-bad-certificates")), 50)


class ReplicationOverTLSTests(unittest.TestCase):
    """Two brokers replicating through an SSL inter-broker listener with client certificates required."""

    def test_replication_through_the_ssl_listener(self) -> None:
        base = tempfile.mkdtemp(prefix="kafkatw-tls-cluster-")
        self.addCleanup(shutil.rmtree, base, True)
        tls = make_tls_files(os.path.join(base, "certs"))
        zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"))
        connect = zookeeper.start() + "/kafkatw"
        self.addCleanup(zookeeper.stop)
        brokers = []
        internal_ports = []
        for broker_id in (0, 1):
            external, internal = find_free_port(), find_free_port()
            internal_ports.append(internal)
            broker = BrokerProcess(broker_id, connect, base, port=external, overrides={
                "listeners": f"EXTERNAL://127.0.0.1:{external},INTERNAL://127.0.0.1:{internal}",
                "advertised.listeners": f"EXTERNAL://127.0.0.1:{external},INTERNAL://localhost:{internal}",
                "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,INTERNAL:SSL",
                "inter.broker.listener.name": "INTERNAL",
                "listener.name.internal.ssl.keystore.location": tls.server,
                "listener.name.internal.ssl.truststore.location": tls.ca,
                "listener.name.internal.ssl.client.auth": "required",
                "replica.fetch.wait.max.ms": "200",
            })
            self.addCleanup(broker.stop)
            brokers.append(broker.start())
        bootstrap = brokers[0].bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("replicated", 2, 2)])["replicated"].result(20)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(100):
            producer.produce("replicated", b"r-%d" % i, partition=i % 2)
        self.assertEqual(producer.flush(30), 0)

        def isrs() -> bool:
            meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics("replicated", timeout=5)
            return all(sorted(p.isrs) == [0, 1] for p in meta.topics["replicated"].partitions.values())

        self.assertTrue(wait_until(isrs, 30))
        # Clients of the EXTERNAL listener are given EXTERNAL addresses.
        meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
        self.assertEqual(sorted(b.port for b in meta.brokers.values()), sorted(b.port for b in brokers))
        # ... and clients of the INTERNAL (SSL, client certificate required) listener INTERNAL ones.
        alice = tls.clients["alice"]
        internal = AdminClient({"bootstrap.servers": f"localhost:{internal_ports[0]}", "security.protocol": "SSL",
                                "ssl.ca.location": tls.ca, "ssl.certificate.location": alice,
                                "ssl.key.location": alice}).list_topics(timeout=10)
        self.assertEqual(sorted((b.host, b.port) for b in internal.brokers.values()),
                         sorted(("localhost", port) for port in internal_ports))
        for broker in brokers:  # each follower fetched over TLS with the broker's own certificate
            self.assertIn("on listener INTERNAL: principal User:CN=localhost", broker.log_text())


class StartupTests(unittest.TestCase):
    """Bad listener and TLS settings: one line, non-zero exit."""

    def run_broker(self, overrides: dict[str, str]) -> subprocess.CompletedProcess:
        base = tempfile.mkdtemp(prefix="kafkatw-tls-startup-")
        self.addCleanup(shutil.rmtree, base, True)
        return BrokerProcess(0, "127.0.0.1:1/kafkatw", base, overrides=overrides).run_to_exit(60)

    def test_usage_errors(self) -> None:
        for overrides, says in [
            ({"listeners": "INTERNAL://127.0.0.1:0"}, "no security protocol for listener INTERNAL"),
            ({"listeners": "SSL://127.0.0.1:0"}, "needs ssl.keystore.location"),
        ]:
            result = self.run_broker(overrides)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(says, result.stderr)

    def test_unreadable_keystore(self) -> None:
        result = self.run_broker({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent/k.pem"})
        self.assertEqual(result.returncode, 1, result.stderr)
        lines = [line for line in result.stderr.splitlines() if "failed to start" in line]
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn("listener SSL: cannot read ssl.keystore.location=/nonexistent/k.pem", lines[0])
