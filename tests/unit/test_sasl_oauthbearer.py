"""
Unit tests of SASL/OAUTHBEARER (KIP-255, RFC 7628, KIP-768): the client's
first message, the unsecured and JWKS validators on a fixed clock, the
broker's authenticator over a KafkaConnection on a StringTransport (the JSON
error challenge, then SASL_AUTHENTICATION_FAILED after the delay), the
client's exchange, and the configuration.  Hypothesis feeds malformed first
messages and tokens: nothing but Kafka's errors comes out.  No sockets, no
sleeps.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings, strategies as st
from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.broker.authenticator import SaslServerAuthenticator, SaslServerSettings, listener_sasl_settings, \
    oauthbearer_validator, sasl_client_settings
from kafkatw.broker.network import KafkaConnection
from kafkatw.client import sasl as client_sasl
from kafkatw.client.security import SecurityConfig
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.protocol.messages import decode_response
from kafkatw.security.oauthbearer import (
    InvalidToken,
    JwksValidator,
    OAuthBearerServer,
    OAuthBearerTokenRefused,
    UnsecuredTokenProvider,
    UnsecuredValidator,
    client_initial_response,
    parse_client_initial_response,
    unsecured_login_provider,
    unsecured_token,
)
from kafkatw.security.sasl import SaslAuthenticationFailed, SaslException

from .test_broker import BrokerHarness
from .test_sasl import _Events, _FakeBrokerConnection, _frame, _frames

NOW = 1_700_000_000.0


def _clock() -> float:
    return NOW


def _b64(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _jws(header: Any, claims: Any, signature: str = "") -> str:
    return f"{_b64(header)}.{_b64(claims)}.{signature}"


# --- the client's first message ---------------------------------------------------------------


class ClientInitialResponseTests(unittest.TestCase):
    def test_round_trip_with_authzid_and_extensions(self) -> None:
        message = client_initial_response("a.b.", "al=ice,x", {"traceId": "123"})
        self.assertEqual(message, b"n,a=al=3Dice=2Cx,\x01auth=Bearer a.b.\x01traceId=123\x01\x01")
        self.assertEqual(parse_client_initial_response(message), ("al=ice,x", "a.b.", {"traceId": "123"}))

    def test_kafka_pythons_and_librdkafkas_shape(self) -> None:
        # kafka-python: "n,,\x01auth=Bearer {token}{extensions}\x01\x01"
        self.assertEqual(parse_client_initial_response(b"n,,\x01auth=Bearer tok.en.\x01\x01"), ("", "tok.en.", {}))
        self.assertEqual(parse_client_initial_response(b"n,,\x01auth=bearer  t\x01\x01")[1], "t")

    def test_malformed_messages_get_kafkas_messages(self) -> None:
        for message, reason in [
            (b"n,,\x01\x01", "'auth' not specified"),
            (b"n,,\x01auth=Basic dXNlcg\x01\x01", "Invalid scheme"),
            (b"n,,\x01auth=Bearer a b\x01\x01", "invalid 'auth' format"),
            (b"y,,\x01auth=Bearer t\x01\x01", "Invalid OAUTHBEARER client first message"),
            (b"n,,\x01auth=Bearer t\x01", "Invalid OAUTHBEARER client first message"),
            (b"\xff", "not UTF-8"),
        ]:
            with self.assertRaises(SaslException) as caught:
                parse_client_initial_response(message)
            self.assertIn(reason, str(caught.exception))

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(st.binary(max_size=200),
                     st.text(alphabet="n,a=\x01authBearer .-_xyz=2C3D\t", max_size=60).map(str.encode)))
    def test_any_message_is_parsed_or_refused_with_a_sasl_exception(self, message: bytes) -> None:
        try:
            authzid, token, extensions = parse_client_initial_response(message)
        except SaslException:
            return
        self.assertTrue(token)
        self.assertNotIn("auth", extensions)


# --- the unsecured validator ------------------------------------------------------------------


class UnsecuredValidatorTests(unittest.TestCase):
    def validator(self, **options: str) -> UnsecuredValidator:
        return UnsecuredValidator(options, clock=_clock)

    def test_a_good_token(self) -> None:
        token = self.validator().validate(unsecured_token("alice", 60, ["read", "write"], now=NOW - 1))
        self.assertEqual(token.principal_name, "alice")
        self.assertEqual(token.scope, {"read", "write"})
        self.assertEqual(token.lifetime_ms, int((NOW + 59) * 1000))

    def test_librdkafkas_unsecured_token(self) -> None:
        # What librdkafka's enable.sasl.oauthbearer.unsecure.jwt sends for sasl.oauthbearer.config=principal=alice
        token = _jws({"alg": "none"}, {"sub": "alice", "iat": int(NOW), "exp": int(NOW) + 3600})
        self.assertEqual(self.validator().validate(token).principal_name, "alice")

    def test_expiry_and_clock_skew(self) -> None:
        expired = unsecured_token("alice", 60, now=NOW - 61)
        with self.assertRaisesRegex(InvalidToken, "expired 1000 ms ago"):
            self.validator().validate(expired)
        self.assertEqual(self.validator(unsecuredValidatorAllowableClockSkewMs="1000").validate(expired)
                         .principal_name, "alice")
        future = unsecured_token("alice", 60, now=NOW + 5)
        with self.assertRaisesRegex(InvalidToken, "in the future"):
            self.validator().validate(future)
        with self.assertRaisesRegex(InvalidToken, "required claim missing: exp"):
            self.validator().validate(_jws({"alg": "none"}, {"sub": "alice"}))

    def test_principal_and_scope_options(self) -> None:
        token = unsecured_token("bob", 60, ["read"], principal_claim="user", scope_claim="roles", now=NOW)
        validator = self.validator(unsecuredValidatorPrincipalClaimName="user",
                                   unsecuredValidatorScopeClaimName="roles",
                                   unsecuredValidatorRequiredScope="read")
        self.assertEqual(validator.validate(token).principal_name, "bob")
        with self.assertRaisesRegex(InvalidToken, "required claim missing or empty: sub"):
            self.validator().validate(token)
        with self.assertRaises(InvalidToken) as caught:
            self.validator(unsecuredValidatorScopeClaimName="roles",
                           unsecuredValidatorPrincipalClaimName="user",
                           unsecuredValidatorRequiredScope="read write").validate(token)
        self.assertEqual(caught.exception.json(), '{"status":"insufficient_scope", "scope":"write"}')

    def test_not_unsecured(self) -> None:
        for token, reason in [
            (_jws({"alg": "RS256"}, {"sub": "a", "exp": NOW + 9}), "alg header 'none'"),
            (_jws({"alg": "none"}, {"sub": "a", "exp": NOW + 9}, "c2ln"), "must not carry a signature"),
            ("a.b", "3 dot-separated"),
            ("!!!.e30.", "not base64url"),
            (_jws({"alg": "none"}, ["sub"]), "not a JSON object"),
            (_jws({"alg": "none"}, {"sub": "a", "exp": "tomorrow"}), "exp claim is not a number"),
            (_jws({"alg": "none"}, {"sub": "a", "exp": NOW + 9, "scope": 3}), "scope claim"),
        ]:
            with self.assertRaises(InvalidToken) as caught:
                self.validator().validate(token)
            self.assertIn(reason, str(caught.exception))
            self.assertEqual(caught.exception.json(), '{"status":"invalid_token"}')

    def test_bad_options(self) -> None:
        with self.assertRaises(ValueError):
            UnsecuredValidator({"unsecuredValidatorAllowableClockSkewMs": "soon"})

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(
        st.text(max_size=80),
        st.tuples(st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.booleans(), st.integers(),
                                                                 st.floats(), st.text(max_size=5)), max_size=3),
                  st.dictionaries(st.sampled_from(["sub", "exp", "iat", "scope", "x"]),
                                  st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                                            st.text(max_size=5), st.lists(st.text(max_size=3), max_size=2)),
                                  max_size=5),
                  st.sampled_from(["", "sig"]))
        .map(lambda t: _jws({"alg": "none", **t[0]}, t[1], t[2]))))
    def test_any_token_validates_or_is_refused_with_invalid_token(self, token: str) -> None:
        for validator in (self.validator(), self.validator(unsecuredValidatorRequiredScope="x")):
            try:
                result = validator.validate(token)
            except InvalidToken as e:
                self.assertIn(e.json(), ('{"status":"invalid_token"}', '{"status":"insufficient_scope", "scope":"x"}'))
            else:
                self.assertTrue(result.principal_name)

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=120), st.binary(max_size=5))
    def test_server_never_raises_anything_but_kafkas_errors(self, first: bytes, second: bytes) -> None:
        server = OAuthBearerServer(UnsecuredValidator(clock=_clock))
        for message in (first, client_initial_response(first.decode("latin-1").replace("\x01", "")),
                        b"n,,\x01auth=Bearer " + first + b"\x01\x01"):
            server = OAuthBearerServer(UnsecuredValidator(clock=_clock))
            try:
                answer = server.evaluate(message)
                if server.complete:
                    continue
                self.assertEqual(json.loads(answer)["status"], "invalid_token")
                server.evaluate(second)
                self.fail("a second message after the error must fail")
            except SaslException:
                pass


# --- the JWKS validator -----------------------------------------------------------------------


class JwksValidatorTests(unittest.TestCase):
    def setUp(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.keys = [self.jwk(self.rsa, "rsa-1", "RS256"), self.jwk(self.ec, "ec-1", "ES256")]
        self.fetches: list[str] = []
        self.now = NOW

    @staticmethod
    def jwk(private: Any, kid: str, alg: str) -> dict:
        algorithm = jwt.get_algorithm_by_name(alg)
        key = json.loads(algorithm.to_jwk(private.public_key()))
        key.update(kid=kid, alg=alg, use="sig")
        return key

    def fetch(self, url: str) -> bytes:
        self.fetches.append(url)
        return json.dumps({"keys": self.keys}).encode()

    def validator(self, **kwargs: Any) -> JwksValidator:
        return JwksValidator("https://idp.example/jwks", fetch=self.fetch, clock=lambda: self.now, **kwargs)

    def token(self, private: Any = None, kid: str = "rsa-1", alg: str = "RS256", **claims: Any) -> str:
        body = {"sub": "alice", "iat": int(NOW), "exp": int(NOW) + 300, "aud": "kafka", "iss": "https://idp.example",
                "scope": "read write", **claims}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, private or self.rsa, algorithm=alg, headers={"kid": kid})

    def validate(self, validator: JwksValidator, token: str) -> Any:
        return self.successResultOf(validator.validate(token))

    def refused(self, validator: JwksValidator, token: str, reason: str) -> None:
        failure = self.failureResultOf(validator.validate(token), InvalidToken)
        self.assertIn(reason, str(failure.value))
        self.assertEqual(failure.value.json(), '{"status":"invalid_token"}')

    def test_good_tokens(self) -> None:
        validator = self.validator(audience=["other", "kafka"], issuer="https://idp.example")
        token = self.validate(validator, self.token())
        self.assertEqual((token.principal_name, token.scope), ("alice", {"read", "write"}))
        self.assertEqual(self.validate(validator, self.token(self.ec, "ec-1", "ES256", sub="bob")).principal_name,
                         "bob")
        self.assertEqual(len(self.fetches), 1)  # fetched once, when first needed
        self.assertEqual(self.validate(self.validator(sub_claim="client_id"),
                                       self.token(client_id="svc")).principal_name, "svc")

    def test_refusals(self) -> None:
        validator = self.validator(audience=["kafka"], issuer="https://idp.example")
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.refused(validator, self.token(other), "Signature verification failed")
        self.refused(validator, self.token(aud="elsewhere"), "Audience doesn't match")
        self.refused(validator, self.token(iss="https://evil.example"), "Invalid issuer")
        self.refused(validator, self.token(exp=int(NOW) - 31, iat=int(NOW) - 100), "expired")
        self.assertEqual(self.validate(validator, self.token(exp=int(NOW) - 29, iat=int(NOW) - 100)).principal_name, "alice")  # skew
        self.refused(validator, self.token(iat=None), "required claim missing: iat")
        self.refused(validator, self.token(sub=None), "required claim missing or empty: sub")
        self.refused(validator, unsecured_token("alice", now=NOW), "alg none")
        self.refused(validator, self.token(kid="ec-1"), "is not its key's")
        self.refused(validator, "not-a-jwt", "not a signed JWT")

    def test_unknown_kid_refetches_within_the_backoff(self) -> None:
        validator = self.validator()
        self.validate(validator, self.token())
        rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys.append(self.jwk(rotated, "rsa-2", "RS256"))
        self.refused(validator, self.token(rotated, "rsa-2"), "no key with kid 'rsa-2'")  # within 100 ms
        self.assertEqual(len(self.fetches), 1)
        self.now += 0.1
        self.assertEqual(self.validate(validator, self.token(rotated, "rsa-2")).principal_name, "alice")
        self.assertEqual(len(self.fetches), 2)
        self.now += 3600
        self.refused(validator, self.token(rotated, "rsa-2"), "expired")  # but the key set is refreshed
        self.assertEqual(len(self.fetches), 3)

    def test_unreadable_key_set(self) -> None:
        def broken(url: str) -> Any:
            return defer.fail(OSError("connection refused"))

        validator = JwksValidator("https://idp.example/jwks", fetch=broken, clock=lambda: NOW)
        self.refused(validator, self.token(), "could not be read (connection refused)")
        validator = JwksValidator("https://idp.example/jwks", fetch=lambda url: b"{}", clock=lambda: NOW)
        self.refused(validator, self.token(), "not a usable key set")

    def test_file_url_from_the_broker_config(self) -> None:
        path = os.path.abspath(self.mktemp())
        with open(path, "w") as f:
            json.dump({"keys": self.keys}, f)
        config = BrokerConfig({"sasl.oauthbearer.jwks.endpoint.url": f"file://{path}",
                               "sasl.oauthbearer.expected.audience": "kafka,other",
                               "sasl.oauthbearer.expected.issuer": "https://idp.example",
                               "sasl.oauthbearer.clock.skew.seconds": "5"})
        validator = oauthbearer_validator(config, "SASL_PLAINTEXT")
        self.assertIsInstance(validator, JwksValidator)
        self.assertEqual((validator.audience, validator.clock_skew_ms), (["kafka", "other"], 5000))
        from kafkatw.security.oauthbearer import fetch_url

        # read in this thread (no reactor thread pool in a unit test), on this test's clock
        validator = JwksValidator(validator.url, validator.audience, validator.issuer, fetch=fetch_url,
                                  clock=lambda: NOW)
        self.assertEqual(self.validate(validator, self.token()).principal_name, "alice")


# --- the broker's authenticator ---------------------------------------------------------------


ALICE = unsecured_token("alice", 3600, now=NOW - 10)


class OAuthBearerAuthenticatorTests(unittest.TestCase):
    def setUp(self) -> None:
        self.events = _Events(self)
        self.h = BrokerHarness(self, **{
            "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                'unsecuredValidatorRequiredScope="kafka" unsecuredValidatorAllowableClockSkewMs="1000";'})
        self.settings = listener_sasl_settings(self.h.config, "SASL_PLAINTEXT", self.h.registry)
        self.settings.oauthbearer_validator.clock = lambda: NOW  # the token times are NOW's
        self.cid = 0

    def connect(self) -> tuple[KafkaConnection, Any]:
        from twisted.internet.testing import StringTransport

        connection = KafkaConnection(
            self.h.apis, self.h.config["socket.request.max.bytes"], "SASL_PLAINTEXT", "SASL_PLAINTEXT",
            authenticator=lambda c: SaslServerAuthenticator(c, self.h.apis, self.settings, self.h.clock))
        transport = StringTransport()
        connection.makeConnection(transport)
        return connection, transport

    def send(self, connection: KafkaConnection, transport: Any, api_key: int, version: int, body: dict) -> Any:
        from kafkatw.protocol.messages import encode_request

        self.cid += 1
        transport.clear()
        connection.dataReceived(_frame(encode_request(api_key, version, self.cid, "t", body)))
        frames = _frames(transport.value())
        return decode_response(api_key, version, frames[-1])[1] if frames else None

    def exchange(self, token: bytes) -> tuple[KafkaConnection, Any, Any]:
        connection, transport = self.connect()
        self.assertEqual(self.send(connection, transport, 17, 1, {"mechanism": "OAUTHBEARER"}).error_code, 0)
        return connection, transport, self.send(connection, transport, 36, 2, {"auth_bytes": token})

    def warnings(self) -> list[str]:
        from twisted.logger import LogLevel, formatEvent

        return [formatEvent(e) for e in self.events.events if e.get("log_level") == LogLevel.warn
                and "OAUTHBEARER" in formatEvent(e) and "unsecured tokens" not in formatEvent(e)]

    def test_the_settings_follow_the_listeners_jaas_options(self) -> None:
        validator = self.settings.oauthbearer_validator
        self.assertIsInstance(validator, UnsecuredValidator)
        self.assertEqual((validator.required_scope, validator.clock_skew_ms), ({"kafka"}, 1000))
        self.assertEqual(self.settings.mechanisms, ["PLAIN", "OAUTHBEARER"])

    def test_a_good_token_authenticates_the_subject(self) -> None:
        token = unsecured_token("alice", 3600, ["kafka"], now=NOW - 10)
        connection, transport, response = self.exchange(client_initial_response(token))
        self.assertEqual((response.error_code, bytes(response.auth_bytes)), (0, b""))
        self.assertEqual(response.session_lifetime.total_seconds(), 0)  # connections.max.reauth.ms=0
        self.assertEqual(connection.context.principal, "User:alice")
        self.assertEqual(self.send(connection, transport, 3, 12, {"topics": None}).brokers[0].node_id, 0)
        self.assertFalse(transport.disconnecting)

    def test_a_bad_token_gets_the_json_challenge_then_the_failure(self) -> None:
        for token, status in [(ALICE, '{"status":"insufficient_scope", "scope":"kafka"}'),
                              (unsecured_token("bob", 60, ["kafka"], now=NOW - 62), '{"status":"invalid_token"}')]:
            connection, transport, response = self.exchange(client_initial_response(token))
            self.assertEqual((response.error_code, bytes(response.auth_bytes)), (0, status.encode()))
            self.assertIsNone(self.send(connection, transport, 36, 2, {"auth_bytes": b"\x01"}))
            self.h.clock.advance(0.1)  # connection.failed.authentication.delay.ms
            _, failed = decode_response(36, 2, _frames(transport.value())[0])
            self.assertEqual(failed.error_code, ErrorCode.sasl_authentication_failed)
            self.assertEqual(failed.error_message, status)
            self.assertTrue(transport.disconnecting)
            self.assertEqual(connection.context.principal, "User:ANONYMOUS")
        warnings = self.warnings()
        self.assertEqual(len(warnings), 2, warnings)
        self.assertIn("lacks the required 'kafka'", warnings[0])
        self.assertIn("expired 2000 ms ago (allowable clock skew 1000 ms)", warnings[1])
        self.assertNotIn(ALICE.split(".")[1], self.events.text())
        # others are served meanwhile
        connection, _, response = self.exchange(client_initial_response(
            unsecured_token("carol", 60, ["kafka"], now=NOW)))
        self.assertEqual(connection.context.principal, "User:carol")

    def test_malformed_message_gets_kafkas_generic_failure(self) -> None:
        connection, transport, response = self.exchange(b"n,,\x01auth=Basic x\x01\x01")
        self.assertIsNone(response)
        self.h.clock.advance(0.1)
        _, failed = decode_response(36, 2, _frames(transport.value())[0])
        self.assertEqual(failed.error_message, "Authentication failed during authentication due to invalid "
                                               "credentials with SASL mechanism OAUTHBEARER")
        self.assertTrue(transport.disconnecting)

    def test_authorization_id_must_be_the_subject(self) -> None:
        token = unsecured_token("alice", 3600, ["kafka"], now=NOW)
        _, transport, response = self.exchange(client_initial_response(token, authzid="admin"))
        self.h.clock.advance(0.1)
        _, failed = decode_response(36, 2, _frames(transport.value())[0])
        self.assertIn("authorization id (admin) that is different from the token's principal name (alice)",
                      failed.error_message)

    def test_oauthbearer_needs_enabling(self) -> None:
        h = BrokerHarness(self)
        settings = listener_sasl_settings(h.config, "SASL_PLAINTEXT", h.registry)
        self.assertNotIn("OAUTHBEARER", settings.mechanisms)


# --- the client ----------------------------------------------------------------------------------


class ClientTests(unittest.TestCase):
    def setUp(self) -> None:
        self.settings = SaslServerSettings(["OAUTHBEARER"], oauthbearer_validator=UnsecuredValidator(
            {"unsecuredValidatorRequiredScope": "kafka"}))

    def run_exchange(self, provider: Any) -> defer.Deferred:
        security = SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                                  sasl_oauth_token_provider=provider)
        return defer.ensureDeferred(client_sasl.authenticate(_FakeBrokerConnection(self, self.settings), security))

    def test_provider_object_and_plain_callable(self) -> None:
        self.successResultOf(self.run_exchange(UnsecuredTokenProvider("alice", scope=["kafka"])))
        self.successResultOf(self.run_exchange(lambda: unsecured_token("alice", scope=["kafka"])))

    def test_refused_token_carries_the_json(self) -> None:
        failure = self.failureResultOf(self.run_exchange(UnsecuredTokenProvider("alice")),
                                       client_sasl.AuthenticationFailedError)
        self.assertEqual(str(failure.value), '{"status":"insufficient_scope", "scope":"kafka"}')
        self.assertFalse(failure.value.retriable)
        failure = self.failureResultOf(self.run_exchange(None), client_sasl.AuthenticationFailedError)
        self.assertIn("no sasl_oauth_token_provider", str(failure.value))

    def test_client_properties_and_the_login_module(self) -> None:
        security = SecurityConfig.from_properties({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                                'unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope=",kafka,x" '
                                'unsecuredLoginLifetimeSeconds="60";'})
        provider = security.sasl_oauth_token_provider
        token = UnsecuredValidator({"unsecuredValidatorRequiredScope": "kafka x"}).validate(provider.token())
        self.assertEqual(token.principal_name, "alice")
        self.assertLessEqual(token.lifetime_ms - (token.start_time_ms or 0), 60000)
        with self.assertRaises(ValueError):
            unsecured_login_provider({})

    def test_inter_broker_oauthbearer(self) -> None:
        config = BrokerConfig({
            "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
            "listener.name.internal.oauthbearer.sasl.jaas.config":
                'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                'unsecuredLoginStringClaim_sub="broker";'})
        settings = sasl_client_settings(config, "INTERNAL")
        self.assertEqual(settings["sasl_oauth_token_provider"].principal, "broker")
        self.assertEqual(SecurityConfig(security_protocol="SASL_PLAINTEXT", **settings).sasl_mechanism, "OAUTHBEARER")


class RefusedErrorTests(unittest.TestCase):
    def test_refused_is_kafkas_authentication_failure(self) -> None:
        error = OAuthBearerTokenRefused('{"status":"invalid_token"}', "expired")
        self.assertIsInstance(error, SaslAuthenticationFailed)
        self.assertEqual((str(error), error.reason), ('{"status":"invalid_token"}', "expired"))


class CallbackHandlerConfigTests(unittest.TestCase):
    PREFIX = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"

    def test_kafkas_handler_class_names_the_validator(self) -> None:
        jwks = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
        unsecured = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                     "OAuthBearerUnsecuredValidatorCallbackHandler")
        url = {"sasl.oauthbearer.jwks.endpoint.url": "https://idp.example/jwks"}
        self.assertIsInstance(oauthbearer_validator(BrokerConfig({self.PREFIX: jwks, **url}), "SASL_PLAINTEXT"),
                              JwksValidator)
        self.assertIsInstance(oauthbearer_validator(BrokerConfig({self.PREFIX: unsecured, **url}), "SASL_PLAINTEXT"),
                              UnsecuredValidator)
        self.assertIsInstance(oauthbearer_validator(BrokerConfig(url), "SASL_PLAINTEXT"), JwksValidator)
        self.assertIsInstance(oauthbearer_validator(BrokerConfig(), "SASL_PLAINTEXT"), UnsecuredValidator)
        with self.assertRaisesRegex(ValueError, "needs sasl.oauthbearer.jwks.endpoint.url"):
            oauthbearer_validator(BrokerConfig({self.PREFIX: jwks}), "SASL_PLAINTEXT")
        with self.assertRaises(ValueError):
            BrokerConfig({self.PREFIX: "com.example.MyHandler"})
