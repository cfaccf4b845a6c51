"""
SASL/GSSAPI (Kerberos, RFC 4752) over a real broker's C{SASL_PLAINTEXT}
listener, against a real MIT Kerberos realm built for the module
(L{tests.interop.sasl_fixtures.KerberosRealm}: its own C{krb5.conf} and
C{kdc.conf}, C{kdb5_util create -s}, C{kadmin.local addprinc/ktadd},
C{krb5kdc -n} on a free port, no DNS).

Two brokers share the keys of C{kafka/127.0.0.1@KAFKATW.TEST}, in a keytab
named by their listener's C{Krb5LoginModule} JAAS entry, and log in to each
other with it (C{sasl.mechanism.inter.broker.protocol=GSSAPI}); their rules
(C{sasl.kerberos.principal.to.local.rules}) map one-component principals of
the realm to their lower-cased name and C{kafka/<host>} to C{kafka}, and no
others.  ACLs (Kafka's C{AclAuthorizer}; super users admin, over PLAIN, and
kafka, the brokers) allow alice and dave on the C{krb-} topics; bob has none.

Clients: kcat (Debian's librdkafka with Cyrus SASL, logging in with
C{kinit} from a keytab), kafka-python and aiokafka (python-gssapi, alice's
ticket cache in C{KRB5CCNAME}), kafkatw's own client (keytab and principal)
and tool (C{--command-config} with a C{Krb5LoginModule} entry), and
confluent-kafka where its librdkafka has GSSAPI (the PyPI wheel has not:
that test skips saying so).  A ticket for a service the broker has no keys
for, garbage tokens and a principal no rule maps are refused with
C{SASL_AUTHENTICATION_FAILED}; the broker goes on serving the others.

Without Debian's krb5-kdc, krb5-admin-server, krb5-user and python-gssapi
the module skips, unless C{KAFKATW_REQUIRE_KERBEROS=1} (scripts/test.sh, CI),
which makes that a failure.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import unittest as stdlib_unittest
from typing import Any

from tests._round_trip import (round_trip_aiokafka, round_trip_confluent, round_trip_kafka_python, round_trip_kafkatw,
                               round_trip_kcat)
from tests.interop.sasl_fixtures import PLAIN_JAAS, KerberosRealm, SaslBrokerClass, kafkatw, kerberos_missing

TIMEOUT_S = 30.0
REALM = "KAFKATW.TEST"
BROKER_PRINCIPAL = f"kafka/127.0.0.1@{REALM}"
RECORDS = [f"record-{i}".encode() for i in range(5)]
_REALM_RE = REALM.replace(".", "[.]")
#: one-component principals of the realm: the name, lower-cased; kafka/<host>: kafka; nothing else
RULES = f"RULE:[1:$1@$0](.*@{_REALM_RE})s/@.*///L,RULE:[2:$1@$0](kafka@{_REALM_RE})s/@.*//"
GENERIC_FAILURE = "Authentication failed during authentication due to invalid credentials with SASL mechanism GSSAPI"
MISSING = kerberos_missing()
REQUIRED = os.environ.get("KAFKATW_REQUIRE_KERBEROS") == "1"
ENV_KEYS = ("KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5RCACHEDIR", "KRB5CCNAME")


def krb5_jaas(principal: str, keytab: str) -> str:
    return (f'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
            f'keyTab="{keytab}" principal="{principal}";')


@stdlib_unittest.skipIf(MISSING is not None and not REQUIRED, f"{MISSING} (KAFKATW_REQUIRE_KERBEROS=1 fails instead)")
class GssapiInteropTests(SaslBrokerClass):
    prefix = "kafkatw-gssapi-"
    mechanisms = "PLAIN,GSSAPI"

    @classmethod
    def prepare(cls) -> None:
        if MISSING is not None:
            raise AssertionError(f"KAFKATW_REQUIRE_KERBEROS=1 but {MISSING}")
        cls.saved_env = {key: os.environ.get(key) for key in ENV_KEYS}
        cls.realm = KerberosRealm(os.path.join(cls.directory, "kdc"), REALM)
        os.makedirs(cls.realm.directory)
        cls.realm.start()
        cls.keytabs = {name: cls.realm.add_principal(name)
                       for name in ("kafka/127.0.0.1", "other/127.0.0.1", "alice", "bob", "Dave", "alice/admin")}
        cls.ccache = "FILE:" + os.path.join(cls.directory, "alice.ccache")
        cls.realm.kinit(f"alice@{REALM}", cls.keytabs["alice"], cls.ccache)
        os.environ.update(cls.realm.env, KRB5CCNAME=cls.ccache)  # for the clients in this process and kcat
        cls.broker_env = cls.realm.env
        cls.overrides = {
            "sasl.kerberos.service.name": "kafka",
            "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
                krb5_jaas(BROKER_PRINCIPAL, cls.keytabs["kafka/127.0.0.1"]),
            "sasl.kerberos.principal.to.local.rules": RULES,
            "sasl.mechanism.inter.broker.protocol": "GSSAPI",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:kafka",
        }

    @classmethod
    def started(cls) -> None:
        from kafkatw.testing import BrokerProcess, find_free_port

        port = find_free_port()
        cls.more_brokers = [BrokerProcess(1, cls.connect + "/kafkatw", cls.directory, {
            **cls.overrides, "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "sasl.enabled.mechanisms": cls.mechanisms,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}, port=port, env=cls.broker_env).start()]
        for principal in ("User:alice", "User:dave"):
            cls.admin("acls", "--add", "--allow-principal", principal, "--operation", "All", "--topic", "krb-",
                      "--resource-pattern-type", "prefixed")
            cls.admin("acls", "--add", "--allow-principal", principal, "--operation", "All", "--group", "*")
        from kafkatw.client.admin import NewTopic
        from kafkatw.client.blocking import BlockingAdminClient

        topics = ("krb-kcat", "krb-confluent", "krb-kafka-python", "krb-aiokafka", "krb-kafkatw", "krb-dave",
                  "krb-acl", "krb-after-refusals", "krb-kafkatw-ccache")
        with BlockingAdminClient(cls.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                 sasl_plain_username="admin", sasl_plain_password="admin-secret") as admin:
            created = admin.create_topics([NewTopic(topic, 1, 1) for topic in topics]
                                          + [NewTopic("krb-replicated", 1, 2)])
        assert created == dict.fromkeys([*topics, "krb-replicated"]), created

    @classmethod
    def cleanup(cls) -> None:
        realm = getattr(cls, "realm", None)
        if realm is not None:
            realm.stop()
        for key, value in getattr(cls, "saved_env", {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def kafkatw_settings(self, user: str, **overrides: Any) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": "kafka",
                "sasl_kerberos_principal": f"{user}@{REALM}", "sasl_kerberos_keytab": self.keytabs[user],
                **overrides}

    def assertKafkatwRefused(self, settings: dict[str, Any], message: str) -> Any:
        """kafkatw's admin client fails at once with C{AuthenticationFailedError} holding C{message}."""
        from kafkatw.client.blocking import BlockingAdminClient
        from kafkatw.client.sasl import AuthenticationFailedError
        from kafkatw.errors import ErrorCode

        started = time.monotonic()
        with self.assertRaises(AuthenticationFailedError) as caught:
            with BlockingAdminClient(**settings) as admin:
                admin.list_topics()
        self.assertEqual(caught.exception.error_code, ErrorCode.sasl_authentication_failed)
        self.assertIn(message, str(caught.exception))
        self.assertLess(time.monotonic() - started, 20)
        return caught.exception

    def test_kcat_logs_in_with_kinit_and_a_keytab(self) -> None:
        settings = ["-b", self.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                    "-X", "sasl.mechanisms=GSSAPI", "-X", "sasl.kerberos.service.name=kafka",
                    "-X", f"sasl.kerberos.principal=alice@{REALM}",
                    "-X", f"sasl.kerberos.keytab={self.keytabs['alice']}"]
        self.assertEqual(round_trip_kcat(settings, "krb-kcat", RECORDS, TIMEOUT_S), RECORDS)

    def test_confluent_kafka(self) -> None:
        from confluent_kafka import KafkaException, Producer

        conf = {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kafka",
                "sasl.kerberos.principal": f"alice@{REALM}", "sasl.kerberos.keytab": self.keytabs["alice"]}
        try:
            Producer(conf)
        except KafkaException as e:  # the PyPI wheel's librdkafka is built without Cyrus SASL
            self.skipTest(f"confluent-kafka's librdkafka has no GSSAPI: {e.args[0].str()}")
        self.assertEqual(round_trip_confluent(conf, "krb-confluent", RECORDS, TIMEOUT_S, "krb-confluent"), RECORDS)

    def test_kafka_python_with_the_ticket_cache(self) -> None:
        settings = {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": "kafka"}
        self.assertEqual(round_trip_kafka_python(settings, "krb-kafka-python", RECORDS, TIMEOUT_S), RECORDS)

    def test_aiokafka_with_the_ticket_cache(self) -> None:
        settings = {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": "kafka"}
        self.assertEqual(round_trip_aiokafka(settings, "krb-aiokafka", RECORDS, TIMEOUT_S), RECORDS)

    def test_kafkatw_with_a_keytab(self, topic: str = "krb-kafkatw") -> None:
        settings = self.kafkatw_settings("alice")
        self.assertEqual(round_trip_kafkatw(lambda: settings, topic, RECORDS, TIMEOUT_S), RECORDS)

    def test_kafkatw_with_the_ticket_cache(self) -> None:
        settings = {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "GSSAPI"}
        self.assertEqual(round_trip_kafkatw(lambda: settings, "krb-kafkatw-ccache", RECORDS, TIMEOUT_S),
                         RECORDS)

    def test_kafkatw_tool_with_the_login_module(self) -> None:
        properties = os.path.join(self.directory, "alice.properties")
        with open(properties, "w") as f:
            f.write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\nsasl.kerberos.service.name=kafka\n"
                    f"sasl.jaas.config={krb5_jaas(f'alice@{REALM}', self.keytabs['alice'])}\n")
        listed = kafkatw("topics", "--bootstrap-server", self.bootstrap, "--command-config", properties, "--list")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("krb-acl", listed.stdout.split())

    def test_acls_apply_to_the_short_name(self) -> None:
        """Dave@REALM is User:dave (the rule's C{/L}), allowed; bob has no ACL: denied."""
        from kafkatw.client.blocking import BlockingProducer

        self.assertEqual(round_trip_kafkatw(lambda: self.kafkatw_settings("Dave"), "krb-dave", RECORDS, TIMEOUT_S),
                         RECORDS)
        producer = BlockingProducer(**self.kafkatw_settings("bob"))
        try:
            with self.assertRaises(Exception) as caught:
                producer.send("krb-acl", b"denied", partition=0).get(TIMEOUT_S)
        finally:
            producer.close()
        self.assertIn("TOPIC_AUTHORIZATION_FAILED", repr(caught.exception).upper().replace(" ", "_"))
        log = self.broker.log_text()
        self.assertIn("authenticated User:dave from", log)
        self.assertIn(f"(Kerberos principal Dave@{REALM})", log)

    def test_refusals_and_others_still_served(self) -> None:
        # A ticket for other/127.0.0.1, whose keys the broker's keytab lacks.
        self.assertKafkatwRefused(self.kafkatw_settings("alice", sasl_kerberos_service_name="other"),
                                  GENERIC_FAILURE)
        # A principal no rule maps (two components, not kafka/<host>).
        self.assertKafkatwRefused(self.kafkatw_settings("alice/admin"), GENERIC_FAILURE)
        # Garbage for a GSS-API token, through the bare protocol: SaslAuthenticate answers error 58.
        self.assertEqual(self.raw_authenticate(b"\x60\x03garbage"), (58, GENERIC_FAILURE))
        # A stale keytab (bob's keys changed since): no ticket, refused by the client itself.
        stale = os.path.join(self.directory, "bob-stale.keytab")
        with open(self.keytabs["bob"], "rb") as f, open(stale, "wb") as out:
            out.write(f.read())
        self.realm.add_principal("bob")  # new keys for bob, written to bob.keytab
        error = self.assertKafkatwRefused(self.kafkatw_settings("bob", sasl_kerberos_keytab=stale), "SASL GSSAPI")
        self.assertIn("no Kerberos ticket", str(error))
        log = self.broker.log_text()
        self.assertIn("authentication of", log)
        self.assertIn("No rules apply to alice/admin@KAFKATW.TEST", log)
        self.test_kafkatw_with_a_keytab("krb-after-refusals")

    def test_brokers_replicate_over_gssapi(self) -> None:
        """
        C{sasl.mechanism.inter.broker.protocol=GSSAPI}: each broker logs in to
        the other with its keytab as C{kafka/127.0.0.1}, C{User:kafka} (a super
        user); the follower fetches alice's records from the leader (both in the ISR).
        """
        from kafkatw.client.blocking import BlockingAdminClient, BlockingProducer

        producer = BlockingProducer(**self.kafkatw_settings("alice"), acks="all")
        try:
            for value in RECORDS:
                producer.send("krb-replicated", value, partition=0).get(TIMEOUT_S)
        finally:
            producer.close()
        with BlockingAdminClient(**self.kafkatw_settings("alice")) as admin:
            partition = admin.describe_topics(["krb-replicated"])["krb-replicated"].partitions[0]
        self.assertEqual(sorted(partition.isr), [0, 1])
        leader = {0: self.broker, 1: self.more_brokers[0]}[partition.leader]  # the follower fetched from it
        self.assertIn("authenticated User:kafka from 127.0.0.1:", leader.log_text())
        self.assertIn(f"with GSSAPI (Kerberos principal {BROKER_PRINCIPAL})", leader.log_text())

    def raw_authenticate(self, token: bytes) -> tuple[int, str]:
        """SaslHandshake v1 (GSSAPI), then SaslAuthenticate v1 with C{token}: (error code, message)."""
        def request(api_key: int, version: int, body: bytes) -> bytes:
            header = struct.pack(">hhih", api_key, version, 7, 4) + b"test"
            s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
            size = struct.unpack(">i", read(4))[0]
            return read(size)

        def read(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = s.recv(n - len(data))
                self.assertTrue(chunk, "connection closed")
                data += chunk
            return data

        with socket.create_connection(("127.0.0.1", self.broker.port), timeout=TIMEOUT_S) as s:
            answer = request(17, 1, struct.pack(">h", 6) + b"GSSAPI")
            self.assertEqual(struct.unpack(">h", answer[4:6])[0], 0)
            answer = request(36, 1, struct.pack(">i", len(token)) + token)
            code, length = struct.unpack(">hh", answer[4:8])
            return code, answer[8:8 + length].decode()
