"""
SASL/GSSAPI without a KDC: Kafka's Kerberos names and principal-to-local
rules, the configuration keys, the client's C{Krb5LoginModule} properties,
and the authenticator's handling of GSSAPI's last step (nothing sent on a
raw v0 exchange, an empty SaslAuthenticate answer on v1).  The exchange
against a real KDC is tests/interop/test_sasl_gssapi.py.
"""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

from hypothesis import given, strategies as st
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.authenticator import (SaslServerAuthenticator, SaslServerSettings, State, gssapi_server_factory,
                                          sasl_client_settings)
from kafkatw.client.security import SecurityConfig
from kafkatw.config import BrokerConfig
from kafkatw.protocol.messages import decode_response, encode_request
from kafkatw.security.kerberos import KerberosName, KerberosShortNamer, NoMatchingRule, default_realm, parse_rules

KAFKA_EXAMPLE = ["RULE:[1:$1@$0](.*@MYDOMAIN.COM)s/@.*//L", "RULE:[2:$1@$0](.*@MYDOMAIN.COM)s/@.*//", "DEFAULT"]


class KerberosNameTests(unittest.TestCase):
    def test_parse(self) -> None:
        self.assertEqual(KerberosName.parse("kafka/broker1.example.com@EXAMPLE.COM"),
                         KerberosName("kafka", "broker1.example.com", "EXAMPLE.COM"))
        self.assertEqual(KerberosName.parse("alice@EXAMPLE.COM"), KerberosName("alice", None, "EXAMPLE.COM"))
        self.assertEqual(KerberosName.parse("alice"), KerberosName("alice"))
        self.assertEqual(str(KerberosName.parse("kafka/h@R")), "kafka/h@R")
        with self.assertRaises(ValueError):
            KerberosName.parse("a@b@C")

    @given(st.from_regex(r"[a-zA-Z0-9._-]{1,12}", fullmatch=True), st.one_of(st.none(), st.from_regex(
        r"[a-z0-9.-]{1,12}", fullmatch=True)), st.from_regex(r"[A-Z.]{1,12}", fullmatch=True))
    def test_round_trip(self, service: str, host: str | None, realm: str) -> None:
        name = KerberosName(service, host, realm)
        self.assertEqual(KerberosName.parse(str(name)), name)


class ShortNamerTests(unittest.TestCase):
    def test_default_maps_the_default_realm_only(self) -> None:
        namer = KerberosShortNamer("EXAMPLE.COM")
        self.assertEqual(namer.short_name("alice@EXAMPLE.COM"), "alice")
        self.assertEqual(namer.short_name("kafka/broker1@EXAMPLE.COM"), "kafka")
        self.assertEqual(namer.short_name("alice"), "alice")  # already simple
        with self.assertRaises(NoMatchingRule):
            namer.short_name("alice@OTHER.COM")

    def test_kafka_documentation_example(self) -> None:
        """Kafka's docs: C{John@MYDOMAIN.COM} is C{john}; C{kafka/host@MYDOMAIN.COM} is C{kafka}."""
        namer = KerberosShortNamer("EXAMPLE.COM", KAFKA_EXAMPLE)
        self.assertEqual(namer.short_name("John@MYDOMAIN.COM"), "john")
        self.assertEqual(namer.short_name("kafka/host.mydomain.com@MYDOMAIN.COM"), "kafka")
        self.assertEqual(namer.short_name("bob@EXAMPLE.COM"), "bob")  # DEFAULT, after both rules
        with self.assertRaises(NoMatchingRule):
            namer.short_name("bob@ELSEWHERE.COM")

    def test_formats_substitutions_and_case(self) -> None:
        namer = KerberosShortNamer("R", ["RULE:[2:$1-$2](svc-.*)s/[.]/_/g/U", "RULE:[2:$2]", "RULE:[1:$1]s/a/4/"])
        self.assertEqual(namer.short_name("svc/a.b.c@R"), "SVC-A_B_C")
        self.assertEqual(namer.short_name("app/host@X"), "host")
        self.assertEqual(namer.short_name("banana@X"), "b4nana")  # first match only without g

    def test_non_simple_results_and_bad_rules(self) -> None:
        with self.assertRaisesRegex(NoMatchingRule, "Non-simple name"):
            KerberosShortNamer("R", ["RULE:[1:$1@$0]"]).short_name("alice@R")
        for rule in ("NOPE", "RULE:[1:$1](", "DEFAULT junk", "RULE:[1:$1](a)s/(/x/"):
            with self.assertRaises(ValueError, msg=rule):
                parse_rules("R", [rule])
        with self.assertRaisesRegex(ValueError, "outside of the valid range"):
            KerberosShortNamer("R", ["RULE:[1:$2]"]).short_name("alice@R")

    def test_default_realm_from_krb5_conf(self) -> None:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("[realms]\n default_realm = NOT.THIS\n[libdefaults]\n  dns_lookup_kdc = false\n"
                    "  default_realm = EXAMPLE.COM\n")
        with mock.patch.dict(os.environ, {"KRB5_CONFIG": f"/nonexistent:{path}"}):
            self.assertEqual(default_realm(), "EXAMPLE.COM")
        with mock.patch.dict(os.environ, {"KRB5_CONFIG": "/nonexistent"}):
            self.assertIsNone(default_realm())


class ConfigTests(unittest.TestCase):
    def test_broker_keys(self) -> None:
        config = BrokerConfig({
            "sasl.enabled.mechanisms": "PLAIN,GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "listener.name.sasl_plaintext.gssapi.sasl.kerberos.service.name": "kafka-internal",
            "listener.name.sasl_plaintext.sasl.kerberos.principal.to.local.rules": ",".join(KAFKA_EXAMPLE),
        })
        self.assertEqual(config["sasl.enabled.mechanisms"], ["PLAIN", "GSSAPI"])
        self.assertEqual(config["sasl.kerberos.principal.to.local.rules"], ["DEFAULT"])
        self.assertEqual(config.listener_value("SASL_PLAINTEXT", "sasl.kerberos.service.name", "GSSAPI"),
                         "kafka-internal")
        self.assertEqual(config.listener_value("OTHER", "sasl.kerberos.service.name", "GSSAPI"), "kafka")
        self.assertEqual(config.listener_value("SASL_PLAINTEXT", "sasl.kerberos.principal.to.local.rules",
                                               "GSSAPI"), KAFKA_EXAMPLE)
        with self.assertRaisesRegex(ValueError, "Invalid rule"):
            BrokerConfig({"sasl.kerberos.principal.to.local.rules": "RULE:nonsense"})

    def test_gssapi_needs_a_service_name_and_krb5_login_module(self) -> None:
        config = BrokerConfig({"sasl.enabled.mechanisms": "GSSAPI"})
        with self.assertRaisesRegex(ValueError, "no serviceName defined"):
            gssapi_server_factory(config, "SASL_PLAINTEXT")
        config = BrokerConfig({"sasl.enabled.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kafka",
                               "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
                                   'org.apache.kafka.common.security.plain.PlainLoginModule required username="a";'})
        with self.assertRaisesRegex(ValueError, "Krb5LoginModule"):
            gssapi_server_factory(config, "SASL_PLAINTEXT")

    def test_inter_broker_login_uses_the_listener_keytab(self) -> None:
        config = BrokerConfig({
            "sasl.enabled.mechanisms": "GSSAPI", "sasl.mechanism.inter.broker.protocol": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
                'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
                'keyTab="/etc/kafkatw/kafka.keytab" principal="kafka/b1.example.com@EXAMPLE.COM";'})
        self.assertEqual(sasl_client_settings(config, "SASL_PLAINTEXT"), {
            "sasl_mechanism": "GSSAPI", "sasl_kerberos_principal": "kafka/b1.example.com@EXAMPLE.COM",
            "sasl_kerberos_keytab": "/etc/kafkatw/kafka.keytab", "sasl_kerberos_service_name": "kafka"})

    def test_client_properties(self) -> None:
        security = SecurityConfig.from_properties({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
            "sasl.kerberos.service.name": "kafka-prod",
            "sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
                                'storeKey=true keyTab="/etc/security/alice.keytab" principal="alice@EXAMPLE.COM";'})
        self.assertEqual((security.sasl_mechanism, security.sasl_kerberos_service_name,
                          security.sasl_kerberos_principal, security.sasl_kerberos_keytab),
                         ("GSSAPI", "kafka-prod", "alice@EXAMPLE.COM", "/etc/security/alice.keytab"))
        cache = SecurityConfig.from_properties({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
            "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true;"})
        self.assertEqual((cache.sasl_kerberos_service_name, cache.sasl_kerberos_principal,
                          cache.sasl_kerberos_keytab), ("kafka", None, None))


class _FakeGssapiServer:
    """RFC 4752's broker side in outline: a token, a wrapped offer, then C{None} (authenticated)."""

    def __init__(self) -> None:
        self.answers: list[bytes | None] = [b"ap-rep", b"offer", None]
        self.complete = False
        self.username: str | None = None
        self.principal: str | None = None

    def evaluate(self, token: bytes) -> bytes | None:
        answer = self.answers.pop(0)
        if answer is None:
            self.complete, self.username, self.principal = True, "alice", "alice@EXAMPLE.COM"
        return answer


class _Connection:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.principal: str | None = None
        self.peer = "127.0.0.1:1"
        self.context: Any = None

    def write_frame(self, frame: bytes) -> None:
        self.frames.append(bytes(frame))

    def authenticated(self, principal: str) -> None:
        self.principal = principal

    def close(self, abort: bool = False) -> None:
        raise AssertionError("closed")


class AuthenticatorTests(unittest.TestCase):
    def authenticator(self) -> tuple[SaslServerAuthenticator, _Connection]:
        connection = _Connection()
        settings = SaslServerSettings(["GSSAPI"], gssapi_server=_FakeGssapiServer)
        return SaslServerAuthenticator(connection, None, settings, Clock()), connection

    def test_raw_exchange_sends_nothing_at_success(self) -> None:
        authenticator, connection = self.authenticator()
        authenticator.frame_received(encode_request(17, 0, 1, "t", {"mechanism": "GSSAPI"}))
        for token in (b"ap-req", b"", b"selection"):
            authenticator.frame_received(token)
        self.assertEqual(connection.frames[1:], [b"ap-rep", b"offer"])
        self.assertEqual(authenticator.state, State.COMPLETE)
        self.assertEqual(connection.principal, "User:alice")

    def test_v1_exchange_answers_empty_bytes_at_success(self) -> None:
        authenticator, connection = self.authenticator()
        authenticator.frame_received(encode_request(17, 1, 1, "t", {"mechanism": "GSSAPI"}))
        for cid, token in enumerate((b"ap-req", b"", b"selection"), start=2):
            authenticator.frame_received(encode_request(36, 1, cid, "t", {"auth_bytes": token}))
        answers = [decode_response(36, 1, frame)[1].auth_bytes for frame in connection.frames[1:]]
        self.assertEqual([bytes(a) for a in answers], [b"ap-rep", b"offer", b""])
        self.assertEqual(connection.principal, "User:alice")
