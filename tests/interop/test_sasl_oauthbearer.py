"""
SASL/OAUTHBEARER (KIP-255) over a real broker's C{SASL_PLAINTEXT} listener:
librdkafka (confluent-kafka and kcat), kafka-python and kafkatw's own
clients.

Two brokers on one ZooKeeper (separate chroots):

  - the unsecured one (Kafka's default validator): C{alg: none} tokens, as
    librdkafka's C{enable.sasl.oauthbearer.unsecure.jwt} and kafka-python's
    token provider send them; Kafka's C{AclAuthorizer} with
    C{super.users=User:admin} (PLAIN), an ACL allowing alice, and one allowing
    mallory on the same topics but denying her Write to one;
  - the JWKS one (KIP-768): tokens signed with an RSA key of a key set read
    from a C{file://} URL, with the expected audience and issuer; librdkafka
    gets its signed token from C{oauth_cb}.

Each client produces records and reads them back.  Expired, unsigned,
wrongly signed tokens are refused with Kafka's C{{"status":"invalid_token"}}
(one broker log line each) while the broker goes on serving the others.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from kafkatw.security.oauthbearer import UnsecuredTokenProvider, unsecured_token
from tests._round_trip import round_trip_confluent, round_trip_kafka_python, round_trip_kafkatw, round_trip_kcat
from tests.interop.sasl_fixtures import SaslBrokerClass, kafkatw

TIMEOUT_S = 30.0
RECORDS = [f"record-{i}".encode() for i in range(5)]
AUDIENCE = "kafka"
ISSUER = "https://idp.example"


def kafka_python_provider(token: Any) -> Any:
    """kafka-python's C{sasl_oauth_token_provider}: an C{AbstractTokenProvider} giving C{token()}."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return token() if callable(token) else token

    return Provider()


def kafka_python_settings(bootstrap: str, token: Any) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": kafka_python_provider(token)}


def kafkatw_settings(bootstrap: str, provider: Any) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": provider}


def confluent_unsecured(bootstrap: str, principal: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": f"principal={principal}"}


class _BrokerClass(SaslBrokerClass):
    """One broker on its own ZooKeeper, with PLAIN and OAUTHBEARER, started with C{overrides}."""

    prefix = "kafkatw-oauth-"
    mechanisms = "PLAIN,OAUTHBEARER"

    def assertRefused(self, settings: dict[str, Any], reason: str) -> None:
        """kafkatw's client: C{AuthenticationFailedError} with Kafka's JSON; the broker logs C{reason} once."""
        from kafkatw.client.blocking import BlockingAdminClient
        from kafkatw.client.sasl import AuthenticationFailedError

        before = self.broker.log_text().count(reason)
        started = time.monotonic()
        with self.assertRaises(AuthenticationFailedError) as caught:
            with BlockingAdminClient(**settings) as admin:
                admin.list_topics()
        self.assertEqual(str(caught.exception), '{"status":"invalid_token"}')
        self.assertLess(time.monotonic() - started, 20)
        deadline = time.monotonic() + 10
        while self.broker.log_text().count(reason) == before and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.broker.log_text().count(reason), before + 1)

    def assertKafkaPythonRefused(self, token: str, reason: str) -> None:
        """kafka-python retries a refused bootstrap until its timeout: refused, each attempt logged."""
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        before = self.broker.log_text().count(reason)
        with self.assertRaises(KafkaError) as caught:
            client = KafkaAdminClient(**kafka_python_settings(self.bootstrap, token), bootstrap_timeout_ms=3000)
            client.close()
        self.assertNotIn(token, str(caught.exception))
        self.assertGreater(self.broker.log_text().count(reason), before)


class UnsecuredOAuthBearerTests(_BrokerClass):
    overrides = {
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredValidatorAllowableClockSkewMs="1000";',
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    }

    @classmethod
    def started(cls) -> None:
        for principal in ("User:alice", "User:mallory"):
            cls.admin("acls", "--add", "--allow-principal", principal, "--operation", "All", "--topic", "oauth-",
                      "--resource-pattern-type", "prefixed")
            cls.admin("acls", "--add", "--allow-principal", principal, "--operation", "All", "--group", "*")
        cls.admin("acls", "--add", "--deny-principal", "User:mallory", "--operation", "Write", "--topic", "oauth-acl")
        for topic in ("oauth-confluent", "oauth-kcat", "oauth-kafka-python", "oauth-kafkatw", "oauth-acl",
                      "oauth-kafkatw-after-refusals"):
            cls.create(topic)

    def test_confluent_kafka(self) -> None:
        self.assertEqual(round_trip_confluent(confluent_unsecured(self.bootstrap, "alice"), "oauth-confluent",
                                              RECORDS, TIMEOUT_S, "oauth-confluent"), RECORDS)

    def test_kcat(self) -> None:
        settings = ["-b", self.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                    "-X", "sasl.mechanisms=OAUTHBEARER", "-X", "enable.sasl.oauthbearer.unsecure.jwt=true",
                    "-X", "sasl.oauthbearer.config=principal=alice"]
        self.assertEqual(round_trip_kcat(settings, "oauth-kcat", RECORDS, TIMEOUT_S), RECORDS)

    def test_kafka_python(self) -> None:
        settings = kafka_python_settings(self.bootstrap, lambda: unsecured_token("alice", 3600))
        self.assertEqual(round_trip_kafka_python(settings, "oauth-kafka-python", RECORDS, TIMEOUT_S), RECORDS)

    def test_kafkatw(self, topic: str = "oauth-kafkatw") -> None:
        settings = kafkatw_settings(self.bootstrap, UnsecuredTokenProvider("alice"))
        self.assertEqual(round_trip_kafkatw(lambda: settings, topic, RECORDS, TIMEOUT_S), RECORDS)

    def test_kafkatw_tool_with_the_login_module(self) -> None:
        properties = os.path.join(self.directory, "alice.properties")
        with open(properties, "w") as f:
            f.write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                    'unsecuredLoginStringClaim_sub="alice";\n')
        listed = kafkatw("topics", "--bootstrap-server", self.bootstrap, "--command-config", properties, "--list")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("oauth-acl", listed.stdout.split())

    def test_acls_allow_alice_and_deny_mallory(self) -> None:
        from confluent_kafka import KafkaError, Producer

        alice = confluent_unsecured(self.bootstrap, "alice")
        self.assertEqual(round_trip_confluent(alice, "oauth-acl", RECORDS, TIMEOUT_S, "oauth-acl-alice"), RECORDS)
        errors: list[Any] = []
        producer = Producer({**confluent_unsecured(self.bootstrap, "mallory"), "message.timeout.ms": 10000})
        producer.produce("oauth-acl", b"denied", partition=0, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(TIMEOUT_S)
        self.assertEqual([e.code() for e in errors], [KafkaError.TOPIC_AUTHORIZATION_FAILED])
        # mallory still reads (allowed, only Write is denied), through kafka-python
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(**kafka_python_settings(self.bootstrap, lambda: unsecured_token("mallory")),
                                 enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition("oauth-acl", 0)])
            consumer.seek_to_beginning()
            values: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(values) < len(RECORDS) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=1000).values():
                    values.extend(r.value for r in records)
        finally:
            consumer.close()
        self.assertEqual(values, RECORDS)

    def test_expired_and_signed_tokens_are_refused_others_served(self) -> None:
        expired = unsecured_token("alice", 60, now=time.time() - 3600)
        self.assertRefused(kafkatw_settings(self.bootstrap, lambda: expired), "the token expired")
        self.assertKafkaPythonRefused(expired, "the token expired")
        self.assertRefused(kafkatw_settings(self.bootstrap, lambda: "e30.e30.c2ln"),
                           "an unsecured JWS must not carry a signature")
        self.assertNotIn(expired, self.broker.log_text())
        self.test_kafkatw("oauth-kafkatw-after-refusals")


class JwksOAuthBearerTests(_BrokerClass):
    @classmethod
    def prepare(cls) -> None:
        import jwt
        from cryptography.hazmat.primitives.asymmetric import rsa

        cls.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(jwt.get_algorithm_by_name("RS256").to_jwk(cls.key.public_key()))
        public.update(kid="test-1", alg="RS256", use="sig")
        jwks = os.path.join(cls.directory, "jwks.json")
        with open(jwks, "w") as f:
            json.dump({"keys": [public]}, f)
        cls.overrides = {"sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks}",
                         "sasl.oauthbearer.expected.audience": AUDIENCE,
                         "sasl.oauthbearer.expected.issuer": ISSUER}

    @classmethod
    def started(cls) -> None:
        for topic in ("oauth-jwks-confluent", "oauth-jwks-kafka-python", "oauth-jwks-kafkatw",
                      "oauth-jwks-kafkatw-after-refusals"):
            cls.create(topic)

    @classmethod
    def signed(cls, sub: str = "alice", lifetime_s: int = 600, key: Any = None, **claims: Any) -> str:
        import jwt

        now = int(time.time())
        body = {"sub": sub, "iat": now, "exp": now + lifetime_s, "aud": AUDIENCE, "iss": ISSUER, **claims}
        return jwt.encode(body, key or cls.key, algorithm="RS256", headers={"kid": "test-1"})

    def test_confluent_kafka_with_oauth_cb(self) -> None:
        def oauth_cb(config: Any) -> tuple[str, float]:
            return self.signed(), time.time() + 600

        conf = {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": oauth_cb}
        self.assertEqual(round_trip_confluent(conf, "oauth-jwks-confluent", RECORDS, TIMEOUT_S, "oauth-jwks"),
                         RECORDS)

    def test_kafka_python(self) -> None:
        settings = kafka_python_settings(self.bootstrap, self.signed)
        self.assertEqual(round_trip_kafka_python(settings, "oauth-jwks-kafka-python", RECORDS, TIMEOUT_S), RECORDS)

    def test_kafkatw(self, topic: str = "oauth-jwks-kafkatw") -> None:
        settings = kafkatw_settings(self.bootstrap, self.signed)
        self.assertEqual(round_trip_kafkatw(lambda: settings, topic, RECORDS, TIMEOUT_S), RECORDS)

    def test_bad_tokens_are_refused_others_served(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.assertRefused(kafkatw_settings(self.bootstrap, lambda: self.signed(key=other)),
                           "Signature verification failed")
        self.assertRefused(kafkatw_settings(self.bootstrap, lambda: self.signed(lifetime_s=-3600, iat=0)),
                           "the token expired")
        self.assertRefused(kafkatw_settings(self.bootstrap, lambda: self.signed(aud="elsewhere")),
                           "Audience doesn't match")
        self.assertRefused(kafkatw_settings(self.bootstrap, lambda: unsecured_token("alice")),
                           "the JWT is not signed (alg none)")
        self.assertKafkaPythonRefused(self.signed(key=other), "Signature verification failed")
        self.test_kafkatw("oauth-jwks-kafkatw-after-refusals")
