"""
SASL over a real broker's C{SASL_PLAINTEXT} listener: kcat, confluent-kafka,
kafka-python, aiokafka and kafkatw's own clients with PLAIN, SCRAM-SHA-256
and SCRAM-SHA-512.

One ZooKeeper and one broker serve the module.  Before the broker starts,
C{kafkatw configs --zookeeper} creates alice's SCRAM credentials (both
mechanisms), as an operator creates the first admin; the broker's listener
has PLAIN users admin and carol from its JAAS option; once it runs,
C{kafkatw configs --bootstrap-server --command-config admin.properties}
creates bob's SCRAM-SHA-512 credential through AlterUserScramCredentials.
Every client produces records to its own topic and reads them back.  Bad
input (a wrong password, a request before authentication) is refused while
the broker goes on serving the others, and no password reaches the broker's
log or ZooKeeper.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import time

from tests._round_trip import (KCAT, round_trip_aiokafka, round_trip_confluent, round_trip_kafka_python,
                               add_round_trip_tests, round_trip_kafkatw, round_trip_kcat)
from tests.interop.sasl_fixtures import SaslBrokerClass, kafkatw

TIMEOUT_S = 30.0
#: mechanism -> (user, password)
USERS = {"PLAIN": ("carol", "carol-secret"), "SCRAM-SHA-256": ("alice", "alice-secret"),
         "SCRAM-SHA-512": ("bob", "bob-secret")}
PASSWORDS = ("admin-secret", "carol-secret", "alice-secret", "bob-secret", "wrong-secret")
RECORDS = [f"record-{i}".encode() for i in range(5)]


def produce_consume_kcat(bootstrap: str, topic: str, mechanism: str, user: str, password: str) -> list[bytes]:
    sasl = ["-b", bootstrap, "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    # idempotent, so that a first send refused while the topic is auto-created is retried in order
    return round_trip_kcat(sasl, topic, RECORDS, TIMEOUT_S, ("-X", "enable.idempotence=true"))


def produce_consume_confluent(bootstrap: str, topic: str, mechanism: str, user: str, password: str) -> list[bytes]:
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}
    return round_trip_confluent(conf, topic, RECORDS, TIMEOUT_S, "sasl-assign-only")


def _sasl_settings(bootstrap: str, mechanism: str, user: str, password: str) -> dict[str, str]:
    """kafka-python's and aiokafka's settings."""
    return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}


def produce_consume_kafka_python(bootstrap: str, topic: str, mechanism: str, user: str,
                                 password: str) -> list[bytes]:
    return round_trip_kafka_python(_sasl_settings(bootstrap, mechanism, user, password), topic, RECORDS, TIMEOUT_S)


def produce_consume_aiokafka(bootstrap: str, topic: str, mechanism: str, user: str, password: str) -> list[bytes]:
    return round_trip_aiokafka(_sasl_settings(bootstrap, mechanism, user, password), topic, RECORDS, TIMEOUT_S)


def produce_consume_kafkatw(bootstrap: str, topic: str, mechanism: str, user: str, password: str) -> list[bytes]:
    from kafkatw.client.blocking import BlockingAdminClient, reactor_thread
    from kafkatw.client.client import KafkaClient
    from kafkatw.client.security import SecurityConfig

    security = SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                              sasl_plain_username=user, sasl_plain_password=password)
    with BlockingAdminClient(bootstrap, security=security) as admin:
        from kafkatw.client.admin import NewTopic

        assert admin.create_topics([NewTopic(topic, 1, 1)])[topic] is None
    reactor = reactor_thread().reactor
    return round_trip_kafkatw(lambda: {"client": KafkaClient(reactor, bootstrap, security=security)}, topic,
                              RECORDS, TIMEOUT_S)


CLIENTS = {
    "kcat": produce_consume_kcat,
    "confluent": produce_consume_confluent,
    "kafka-python": produce_consume_kafka_python,
    "aiokafka": produce_consume_aiokafka,
    "kafkatw": produce_consume_kafkatw,
}


class SaslInteropTests(SaslBrokerClass):
    @classmethod
    def prepare(cls) -> None:
        created = kafkatw("configs", "--zookeeper", cls.connect, "--entity-type", "users", "--entity-name",
                          "alice", "--alter", "--add-config",
                          "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
                          "SCRAM-SHA-512=[password=alice-secret]")
        assert created.returncode == 0, created.stderr
        cls.zookeeper_output = created.stdout

    @classmethod
    def started(cls) -> None:
        created = kafkatw("configs", "--bootstrap-server", cls.bootstrap, "--command-config",
                          cls.admin_properties, "--entity-type", "users", "--entity-name", "bob", "--alter",
                          "--add-config", "SCRAM-SHA-512=[iterations=4096,password=bob-secret]")
        assert created.returncode == 0, created.stderr
        cls.bootstrap_output = created.stdout

    def check(self, client: str, mechanism: str, suffix: str = "") -> None:
        user, password = USERS[mechanism]
        topic = f"sasl-{client}-{mechanism.lower()}{suffix}"
        self.assertEqual(CLIENTS[client](self.bootstrap, topic, mechanism, user, password), RECORDS)

    def test_configs_tool_output(self) -> None:
        self.assertEqual(self.zookeeper_output.strip(),
                         "Completed updating config for entity: user-principal 'alice'.")
        self.assertEqual(self.bootstrap_output.strip(), "Completed updating config for user bob.")
        described = kafkatw("configs", "--bootstrap-server", self.bootstrap, "--command-config",
                            self.admin_properties, "--entity-type", "users", "--describe")
        self.assertEqual(described.stdout.splitlines(), [
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
            "SCRAM-SHA-512=iterations=4096",
            "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096",
        ])
        nobody = kafkatw("configs", "--bootstrap-server", self.bootstrap, "--command-config",
                         self.admin_properties, "--entity-type", "users", "--entity-name", "nobody", "--describe")
        self.assertEqual(nobody.stdout.strip(), "Error retrieving SCRAM credential configs for user-principal "
                                                "'nobody': Attempt to describe a user credential that does not "
                                                "exist: nobody")
        refused = kafkatw("configs", "--bootstrap-server", self.bootstrap, "--command-config",
                          self.admin_properties, "--entity-type", "users", "--entity-name", "bob", "--alter",
                          "--add-config", "SCRAM-SHA-256=[iterations=100,password=bob-secret]")
        self.assertEqual(refused.returncode, 1)
        self.assertIn("Too few iterations", refused.stderr)
        # A wrong password: the broker's message, at once (not retried).
        wrong = os.path.join(self.directory, "wrong.properties")
        with open(self.admin_properties) as f, open(wrong, "w") as out:
            out.write(f.read().replace("admin-secret", "wrong-secret"))
        started = time.monotonic()
        refused = kafkatw("configs", "--bootstrap-server", self.bootstrap, "--command-config", wrong,
                          "--entity-type", "users", "--describe")
        self.assertEqual(refused.returncode, 1)
        self.assertIn("Authentication failed: Invalid username or password", refused.stderr)
        self.assertNotIn("wrong-secret", refused.stderr)
        self.assertLess(time.monotonic() - started, 20)
        # Topics through DescribeConfigs, on the same authenticated connection type.
        self.check("kafka-python", "SCRAM-SHA-256", "-configs")
        topic = kafkatw("configs", "--bootstrap-server", self.bootstrap, "--command-config", self.admin_properties,
                        "--entity-type", "topics", "--entity-name", "sasl-kafka-python-scram-sha-256-configs",
                        "--describe", "--all")
        self.assertEqual(topic.returncode, 0, topic.stderr)
        lines = topic.stdout.splitlines()
        self.assertEqual(lines[0], "All configs for topic sasl-kafka-python-scram-sha-256-configs are:")
        self.assertIn("  retention.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:retention.ms=604800000}",
                      lines)
        # Without --command-config the tool cannot authenticate: refused at once, not retried forever.
        started = time.monotonic()
        anonymous = kafkatw("configs", "--bootstrap-server", self.bootstrap, "--entity-type", "users", "--describe")
        self.assertNotEqual(anonymous.returncode, 0)
        self.assertLess(time.monotonic() - started, 60)

    def test_credentials_in_zookeeper_never_hold_passwords(self) -> None:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.connect + "/kafkatw")
        zk.start(timeout=TIMEOUT_S)
        try:
            for user in ("alice", "bob"):
                data, _ = zk.get(f"/config/users/{user}")
                stored = json.loads(data)
                self.assertEqual(stored["version"], 1)
                for value in stored["config"].values():
                    self.assertRegex(value, r"^salt=.+,stored_key=.+,server_key=.+,iterations=\d+$")
                for password in PASSWORDS:
                    self.assertNotIn(password.encode(), data)
            notes = [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in sorted(zk.get_children("/config/changes"))]
            self.assertEqual(notes, [{"version": 2, "entity_path": "users/alice"},
                                     {"version": 2, "entity_path": "users/bob"}])
        finally:
            zk.stop()
            zk.close()

    def test_short_salt_credential_logs_in(self) -> None:
        """
        AlterUserScramCredentials with a 5-byte salt, as Kafka accepts it
        (RFC 5802 sets no length): librdkafka, kafka-python and kafkatw's own
        client then log in with that credential.
        """
        from kafkatw.client.admin import UserScramCredentialUpsertion
        from kafkatw.client.blocking import BlockingAdminClient
        from kafkatw.client.security import SecurityConfig

        security = SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                  sasl_plain_username="admin", sasl_plain_password="admin-secret")
        with BlockingAdminClient(self.bootstrap, security=security) as admin:
            errors = admin.alter_user_scram_credentials([
                UserScramCredentialUpsertion("dave", "SCRAM-SHA-256", "dave-secret", 4096, salt=b"short")])
        self.assertEqual(errors, {"dave": None})
        for client in ("confluent", "kafka-python", "kafkatw"):
            topic = f"sasl-short-salt-{client}"
            self.assertEqual(CLIENTS[client](self.bootstrap, topic, "SCRAM-SHA-256", "dave", "dave-secret"), RECORDS)

    def test_wrong_password_is_refused_and_others_are_served(self) -> None:
        result = subprocess.run([KCAT, "-b", self.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                                 "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=alice",
                                 "-X", "sasl.password=wrong-secret", "-L", "-m", "5"],
                                capture_output=True, timeout=TIMEOUT_S)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(b"Authentication failed", result.stderr + result.stdout)
        self.check("kafka-python", "PLAIN", "-after-a-failure")

    def test_request_before_authentication_closes_the_connection(self) -> None:
        metadata_v1 = struct.pack(">hhih", 3, 1, 1, 1) + b"x" + struct.pack(">i", -1)
        for data in (struct.pack(">i", len(metadata_v1)) + metadata_v1,  # no answer: closed
                     struct.pack(">i", 1 << 20)):  # an oversized SASL token
            with socket.create_connection(("127.0.0.1", self.broker.port), timeout=TIMEOUT_S) as s:
                s.sendall(data)
                try:
                    self.assertEqual(s.recv(100), b"")
                except ConnectionResetError:
                    pass  # aborted: as closed
        self.check("confluent", "SCRAM-SHA-512", "-after-bad-input")
        log = self.broker.log_text()
        self.assertIn("unexpected Metadata request before authentication", log)
        self.assertIn("sasl.server.max.receive.size", log)

    def test_zz_no_password_in_the_broker_log(self) -> None:
        log = self.broker.log_text()
        self.assertIn("authenticated User:", log)
        for password in PASSWORDS:
            self.assertNotIn(password, log)


add_round_trip_tests(SaslInteropTests, CLIENTS, USERS)
