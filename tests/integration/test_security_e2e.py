"""
Issue 11's three parts together, with real processes: a secured cluster.

One ZooKeeper and two brokers serve the module.  Before the brokers start,
C{kafkatw configs --zookeeper} creates the SCRAM credentials of C{admin} (the
brokers' own principal and the operators'), C{alice} and C{bob}; C{carol} is a
PLAIN user of the listener's JAAS option.  Each broker has

  - a C{SASL_SSL} listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 over TLS) for
    clients, which is also C{inter.broker.listener.name}: the replica fetchers
    log in over TLS with C{sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512}
    as C{User:admin};
  - an C{SSL} listener requiring client certificates, whose principal is the
    certificate's subject mapped by C{ssl.principal.mapping.rules}
    (C{CN=alice,OU=eng,O=kafkatw-test} -> C{User:alice});
  - Kafka's C{AclAuthorizer} with C{super.users=User:admin}.

ACLs are managed with C{kafkatw acls --bootstrap-server --command-config
admin.properties} over C{SASL_SSL}: alice and carol get prefixed producer and
consumer ACLs on C{e2e-*}; then kcat, confluent-kafka, kafka-python, aiokafka
and kafkatw's own clients and commands round-trip records over SASL_SSL with
each mechanism; a consumer group; RF=2 acks=all with the full ISR; bob is
refused with Kafka's authorization errors, a deny beats an allow and both
brokers apply every change without a restart.  Certificates are made with
trustme (L{kafkatw.testing.make_tls_files}).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ClassFixture, ZooKeeperFixture, find_free_port, make_tls_files, wait_for
from tests import _round_trip
from tests._round_trip import add_round_trip_tests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 30.0
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_carol="carol-secret";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
              'password="admin-secret";')
#: mechanism -> (user, password)
USERS = {"PLAIN": ("carol", "carol-secret"), "SCRAM-SHA-256": ("alice", "alice-secret"),
         "SCRAM-SHA-512": ("alice", "alice-secret")}
PASSWORDS = ("admin-secret", "alice-secret", "bob-secret", "carol-secret")
RECORDS = [f"record-{i}".encode() for i in range(5)]


def kafkatw(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "kafkatw.cli.main", *args], capture_output=True, timeout=120,
                          input=input, env=env)


def write_properties(path: str, lines: dict[str, str]) -> str:
    with open(path, "w") as f:
        f.writelines(f"{key}={value}\n" for key, value in lines.items())
    return path


class SecuredClusterTests(ClassFixture, unittest.TestCase):
    timeout = 300

    @classmethod
    def setUpClass(cls) -> None:
        cls.base = tempfile.mkdtemp(prefix="kafkatw-security-e2e-")
        cls.tls = make_tls_files(os.path.join(cls.base, "certs"), clients=("alice", "bob"))
        cls.zookeeper = ZooKeeperFixture(os.path.join(cls.base, "zookeeper"))
        cls.brokers: list[BrokerProcess] = []
        try:
            connect = cls.zookeeper.start() + "/kafkatw"
            for user, mechanisms in (("admin", ("SCRAM-SHA-256", "SCRAM-SHA-512")),
                                     ("alice", ("SCRAM-SHA-256", "SCRAM-SHA-512")), ("bob", ("SCRAM-SHA-512",))):
                config = ",".join(f"{m}=[iterations=4096,password={user}-secret]" for m in mechanisms)
                created = kafkatw("configs", "--zookeeper", connect, "--alter", "--add-config", config,
                                  "--entity-type", "users", "--entity-name", user)
                assert created.returncode == 0, created.stderr
            ports = [(find_free_port(), find_free_port()) for _ in range(2)]
            for broker_id, (sasl_ssl, ssl) in enumerate(ports):
                cls.brokers.append(BrokerProcess(broker_id, connect, cls.base, port=sasl_ssl, overrides={
                    "listeners": f"SASL_SSL://127.0.0.1:{sasl_ssl},SSL://127.0.0.1:{ssl}",
                    "inter.broker.listener.name": "SASL_SSL",
                    "ssl.keystore.location": cls.tls.server,
                    "ssl.truststore.location": cls.tls.ca,
                    "listener.name.ssl.ssl.client.auth": "required",
                    "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=eng,.*$/$1/,DEFAULT",
                    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                    "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
                    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
                    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                    "super.users": "User:admin",
                    "auto.create.topics.enable": "false",
                    "replica.lag.time.max.ms": "3000",
                    "replica.fetch.wait.max.ms": "200",
                    "connection.failed.authentication.delay.ms": "100",
                    "transaction.state.log.replication.factor": "2",
                    "transaction.state.log.min.isr": "1",
                    "transaction.state.log.num.partitions": "2",
                }).start())
            cls.sasl_ssl = [f"localhost:{sasl_ssl}" for sasl_ssl, _ in ports]
            cls.ssl = [f"localhost:{ssl}" for _, ssl in ports]
            cls.bootstrap = ",".join(cls.sasl_ssl)

            def scram(user: str) -> dict[str, str]:
                return {"security.protocol": "SASL_SSL", "ssl.truststore.location": cls.tls.ca,
                        "sasl.mechanism": "SCRAM-SHA-512",
                        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                            f'username="{user}" password="{user}-secret";'}

            cls.admin_properties = write_properties(os.path.join(cls.base, "admin.properties"), scram("admin"))
            cls.alice_properties = write_properties(os.path.join(cls.base, "alice.properties"), scram("alice"))
            cls.bob_properties = write_properties(os.path.join(cls.base, "bob.properties"), scram("bob"))
            for principal in ("User:alice", "User:carol"):
                for role in (("--producer", "--idempotent", "--topic", "e2e-"),
                             ("--consumer", "--topic", "e2e-", "--group", "e2e-")):
                    added = cls.acls("--add", "--allow-principal", principal, *role,
                                     "--resource-pattern-type", "prefixed")
                    assert added.returncode == 0, added.stderr
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        for broker in cls.brokers:
            broker.stop()
        cls.zookeeper.stop()
        shutil.rmtree(cls.base, True)

    @classmethod
    def acls(cls, *args: str) -> subprocess.CompletedProcess:
        result = kafkatw("acls", "--bootstrap-server", cls.sasl_ssl[0], "--command-config", cls.admin_properties,
                         *args)
        result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
        return result

    # -- clients ---------------------------------------------------------------------

    def confluent(self, mechanism: str, user: str | None = None, **extra: str) -> dict[str, str]:
        user = user or USERS[mechanism][0]
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": self.tls.ca,
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": f"{user}-secret", **extra}

    def kafka_python(self, mechanism: str, user: str | None = None) -> dict[str, str]:
        user = user or USERS[mechanism][0]
        return {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_SSL", "ssl_cafile": self.tls.ca,
                "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": f"{user}-secret"}

    def create_topic(self, topic: str, replication_factor: int = 1) -> None:
        created = kafkatw("topics", "--bootstrap-server", self.bootstrap, "--command-config", self.admin_properties,
                          "--create", "--topic", topic, "--partitions", "1",
                          "--replication-factor", str(replication_factor))
        self.assertEqual(created.returncode, 0, created.stderr)

    def round_trip_kcat(self, topic: str, mechanism: str) -> list[bytes]:
        user, password = USERS[mechanism]
        sasl = ["-b", self.bootstrap, "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={self.tls.ca}",
                "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
        return _round_trip.round_trip_kcat(sasl, topic, RECORDS, TIMEOUT_S)

    def round_trip_confluent(self, topic: str, mechanism: str) -> list[bytes]:
        return _round_trip.round_trip_confluent(self.confluent(mechanism), topic, RECORDS, TIMEOUT_S, "e2e-assign-only")

    def round_trip_kafka_python(self, topic: str, mechanism: str) -> list[bytes]:
        return _round_trip.round_trip_kafka_python(self.kafka_python(mechanism), topic, RECORDS, TIMEOUT_S)

    def round_trip_aiokafka(self, topic: str, mechanism: str) -> list[bytes]:
        settings = self.kafka_python(mechanism)
        del settings["ssl_cafile"]
        return _round_trip.round_trip_aiokafka(settings, topic, RECORDS, TIMEOUT_S, ssl_cafile=self.tls.ca)

    def round_trip_kafkatw(self, topic: str, mechanism: str) -> list[bytes]:
        return _round_trip.round_trip_kafkatw(lambda: self.kafka_python(mechanism), topic, RECORDS, TIMEOUT_S)

    def check(self, client: str, mechanism: str) -> None:
        topic = f"e2e-{client}-{mechanism.lower()}"
        self.create_topic(topic)
        self.assertEqual(getattr(self, f"round_trip_{client.replace('-', '_')}")(topic, mechanism), RECORDS)

    # -- tests -----------------------------------------------------------------------

    def test_console_tools_with_command_config(self) -> None:
        """kafkatw console-producer and console-consumer (in a group) with --command-config, as alice."""
        self.create_topic("e2e-console")
        produced = kafkatw("console-producer", "--bootstrap-server", self.bootstrap, "--command-config",
                           self.alice_properties, "--topic", "e2e-console", input=b"one\ntwo\nthree\n")
        self.assertEqual(produced.returncode, 0, produced.stderr)
        consumed = kafkatw("console-consumer", "--bootstrap-server", self.bootstrap, "--command-config",
                           self.alice_properties, "--topic", "e2e-console", "--from-beginning",
                           "--group", "e2e-console-group", "--max-messages", "3", "--timeout-ms", "30000")
        self.assertEqual(consumed.returncode, 0, consumed.stderr)
        self.assertEqual(consumed.stdout.splitlines(), [b"one", b"two", b"three"])

    def test_consumer_group_over_sasl_ssl(self) -> None:
        """A confluent-kafka consumer group of two members; bob is refused the group."""
        from confluent_kafka import Consumer, KafkaException, Producer

        self.create_topic("e2e-group")
        producer = Producer(self.confluent("SCRAM-SHA-256"))
        for value in RECORDS:
            producer.produce("e2e-group", value)
        self.assertEqual(producer.flush(TIMEOUT_S), 0)
        consumer = Consumer(self.confluent("SCRAM-SHA-512", **{"group.id": "e2e-group-1",
                                                               "auto.offset.reset": "earliest"}))
        values: list[bytes] = []
        try:
            consumer.subscribe(["e2e-group"])
            deadline = time.monotonic() + 60
            while len(values) < len(RECORDS) and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    values.append(message.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        self.assertEqual(values, RECORDS)

        refused = Consumer(self.confluent("SCRAM-SHA-512", "bob", **{"group.id": "e2e-group-1",
                                                                     "auto.offset.reset": "earliest"}))
        try:
            refused.subscribe(["e2e-group"])
            errors = []
            deadline = time.monotonic() + TIMEOUT_S
            while not errors and time.monotonic() < deadline:
                try:
                    message = refused.poll(1.0)
                except KafkaException as e:
                    errors.append(e.args[0].name())
                    break
                if message is not None and message.error() is not None:
                    errors.append(message.error().name())
            self.assertIn(errors[0], ("GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"))
        finally:
            refused.close()

    def test_replication_over_sasl_ssl(self) -> None:
        """RF=2, acks=all: the followers fetch over SASL_SSL as the super user User:admin."""
        from kafka import KafkaProducer

        self.create_topic("e2e-replicated", replication_factor=2)
        producer = KafkaProducer(acks="all", **self.kafka_python("SCRAM-SHA-512"))
        for i in range(10):
            producer.send("e2e-replicated", f"r{i}".encode(), partition=0).get(timeout=TIMEOUT_S)
        producer.close()

        def in_sync() -> bool:
            described = kafkatw("topics", "--bootstrap-server", self.bootstrap, "--command-config",
                                self.admin_properties, "--describe", "--topic", "e2e-replicated")
            return b"Isr: 0,1" in described.stdout or b"Isr: 1,0" in described.stdout

        wait_for(in_sync, 30, "both replicas in sync")
        logs = "".join(b.log_text() for b in self.brokers)
        self.assertIn("authenticated User:admin", logs)

    def test_transactions_with_acls(self) -> None:
        """
        A transactional producer needs Write on its transactional id: alice's commits (the markers
        go from broker to broker over SASL_SSL as User:admin), bob's is refused.
        """
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

        self.create_topic("e2e-tx", replication_factor=2)
        added = self.acls("--add", "--allow-principal", "User:alice", "--producer", "--topic", "e2e-tx",
                          "--transactional-id", "e2e-tx-alice")
        self.assertEqual(added.returncode, 0, added.stderr)
        producer = Producer(self.confluent("SCRAM-SHA-512", **{"transactional.id": "e2e-tx-alice"}))
        producer.init_transactions(60)
        producer.begin_transaction()
        for value in RECORDS:
            producer.produce("e2e-tx", value, partition=0)
        producer.commit_transaction(60)
        consumer = Consumer(self.confluent("SCRAM-SHA-512", **{"group.id": "e2e-tx-reader",
                                                               "isolation.level": "read_committed",
                                                               "enable.auto.commit": False}))
        values: list[bytes] = []
        try:
            consumer.assign([TopicPartition("e2e-tx", 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + TIMEOUT_S
            while len(values) < len(RECORDS) and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=10, timeout=1.0):
                    if msg.error() is None:
                        values.append(msg.value())
        finally:
            consumer.close()
        self.assertEqual(values, RECORDS)

        refused = Producer(self.confluent("SCRAM-SHA-512", "bob", **{"transactional.id": "e2e-tx-bob"}))
        with self.assertRaises(KafkaException) as raised:
            refused.init_transactions(30)
        self.assertEqual(raised.exception.args[0].name(), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")

    def test_mutual_tls_principal_and_acls(self) -> None:
        """On the SSL listener the client certificate is the principal: alice's is allowed, bob's is not."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

        self.create_topic("e2e-mtls")

        def conf(user: str, **extra: str) -> dict[str, str]:
            return {"bootstrap.servers": ",".join(self.ssl), "security.protocol": "SSL",
                    "ssl.ca.location": self.tls.ca, "ssl.certificate.location": self.tls.clients[user],
                    "ssl.key.location": self.tls.clients[user], **extra}

        delivered: list = []
        producer = Producer(conf("alice"))
        producer.produce("e2e-mtls", b"from-alice", partition=0, on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(TIMEOUT_S)
        self.assertEqual(delivered, [None])
        consumer = Consumer(conf("alice", **{"group.id": "e2e-mtls", "enable.auto.commit": False}))
        try:
            consumer.assign([TopicPartition("e2e-mtls", 0, OFFSET_BEGINNING)])
            message = None
            deadline = time.monotonic() + TIMEOUT_S
            while message is None and time.monotonic() < deadline:
                message = consumer.poll(1.0)
            self.assertIsNotNone(message)
            self.assertIsNone(message.error())
            self.assertEqual(message.value(), b"from-alice")
        finally:
            consumer.close()

        delivered = []
        producer = Producer(conf("bob", **{"message.timeout.ms": "10000"}))
        producer.produce("e2e-mtls", b"from-bob", on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(TIMEOUT_S)
        self.assertEqual([e.name() for e in delivered], ["TOPIC_AUTHORIZATION_FAILED"])
        logs = "".join(b.log_text() for b in self.brokers)
        self.assertIn("principal User:alice", logs)
        self.assertIn("principal User:bob", logs)

    def test_authorization_with_sasl_principals(self) -> None:
        """bob is refused until ACLs name him; literal and prefixed ACLs; deny beats allow; both brokers follow."""
        from confluent_kafka import Producer
        from kafka import KafkaConsumer, KafkaProducer
        from kafka.errors import TopicAuthorizationFailedError

        self.create_topic("team-orders")

        def bob_produces(topic: str, broker: str) -> str | None:
            delivered: list = []
            producer = Producer({**self.confluent("SCRAM-SHA-512", "bob"), "bootstrap.servers": broker,
                                 "message.timeout.ms": "8000"})
            producer.produce(topic, b"from-bob", partition=0, on_delivery=lambda err, msg: delivered.append(err))
            producer.flush(TIMEOUT_S)
            return delivered[0].name() if delivered and delivered[0] else None

        self.assertEqual(bob_produces("team-orders", self.sasl_ssl[0]), "TOPIC_AUTHORIZATION_FAILED")
        producer = KafkaProducer(max_block_ms=8000, **self.kafka_python("SCRAM-SHA-512", "bob"))
        try:
            with self.assertRaises(TopicAuthorizationFailedError):
                producer.send("team-orders", b"x").get(timeout=TIMEOUT_S)
        finally:
            producer.close(timeout=5)

        # A literal producer ACL, then a consumer ACL with a group: applied by both brokers without a restart.
        added = self.acls("--add", "--allow-principal", "User:bob", "--producer", "--topic", "team-orders")
        self.assertEqual(added.returncode, 0, added.stderr)
        for broker in self.sasl_ssl:
            wait_for(lambda broker=broker: bob_produces("team-orders", broker) is None, 20,
                     f"bob's Write on {broker}")
        added = self.acls("--add", "--allow-principal", "User:bob", "--consumer", "--topic", "team-",
                          "--group", "bob-", "--resource-pattern-type", "prefixed")
        self.assertEqual(added.returncode, 0, added.stderr)
        wait_for(lambda: self.kafka_python_group_read("bob", "bob-1", "team-orders") == [b"from-bob"] * 2, 40,
                 "bob reading in group bob-1")
        # A group the prefix does not cover.
        consumer = KafkaConsumer("team-orders", group_id="other-group", auto_offset_reset="earliest",
                                 consumer_timeout_ms=10000, **self.kafka_python("SCRAM-SHA-512", "bob"))
        try:
            from kafka.errors import GroupAuthorizationFailedError

            with self.assertRaises(GroupAuthorizationFailedError):
                list(consumer)
        finally:
            consumer.close()

        # Deny beats allow, on both brokers; alice is not concerned.
        added = self.acls("--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", "team-orders")
        self.assertEqual(added.returncode, 0, added.stderr)
        for broker in self.sasl_ssl:
            wait_for(lambda broker=broker: bob_produces("team-orders", broker) == "TOPIC_AUTHORIZATION_FAILED", 20,
                     f"bob's denied Write on {broker}")
        listed = self.acls("--list", "--topic", "team-orders")
        self.assertIn("(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)", listed.stdout)
        removed = self.acls("--remove", "--force", "--deny-principal", "User:bob", "--operation", "Write",
                            "--topic", "team-orders")
        self.assertEqual(removed.returncode, 0, removed.stderr)
        for broker in self.sasl_ssl:
            wait_for(lambda broker=broker: bob_produces("team-orders", broker) is None, 20,
                     f"bob's Write again on {broker}")

    def kafka_python_group_read(self, user: str, group: str, topic: str) -> list[bytes]:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=8000,
                                 **self.kafka_python("SCRAM-SHA-512", user))
        try:
            values = [m.value for m in consumer]
        finally:
            consumer.close()
        return values

    def test_zz_no_password_in_the_logs(self) -> None:
        logs = "".join(b.log_text() for b in self.brokers)
        for password in PASSWORDS:
            self.assertNotIn(password, logs)


add_round_trip_tests(SecuredClusterTests, ("kcat", "confluent", "kafka-python", "aiokafka", "kafkatw"), USERS)
