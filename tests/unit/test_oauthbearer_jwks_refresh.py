"""
How the JWKS validator keeps its key set (Kafka's C{RefreshingHttpsJwks},
KIP-768): one fetch at a time shared by every login waiting for it; fetches
started at most once per backoff, counted from a fetch's start and doubled
after each failure up to the maximum; the keys held stay in use when a
refresh fails (one warning until a fetch succeeds); an unknown C{kid}
starts at most one refresh per backoff, and the same C{kid} no other for a
minute; C{nbf} checked with the allowed clock skew.  A fake fetcher whose
Deferreds the test fires, on a fixed clock the test moves: no sockets, no
sleeps.
"""

from __future__ import annotations

import json
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from twisted.internet import defer
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial import unittest

from kafkatw.security.oauthbearer import InvalidToken, JwksValidator

NOW = 1_700_000_000.0
URL = "https://idp.example/jwks"


class FakeIdP:
    """The JWKS endpoint: each fetch is a Deferred the test fires (C{answer}) or fails (C{down})."""

    def __init__(self, key: Any) -> None:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        public.update(kid="k1", alg="RS256", use="sig")
        self.body = json.dumps({"keys": [public]}).encode()
        self.pending: list[defer.Deferred] = []
        self.started = 0
        self.down = False
        self.immediate = False

    def fetch(self, url: str) -> Any:
        self.started += 1
        if self.down:
            return defer.fail(ConnectionRefusedError("IdP down"))
        if self.immediate:
            return defer.succeed(self.body)
        d: defer.Deferred = defer.Deferred()
        self.pending.append(d)
        return d

    def answer(self) -> None:
        pending, self.pending = self.pending, []
        for d in pending:
            d.callback(self.body)


class JwksRefreshTests(unittest.TestCase):
    def setUp(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.idp = FakeIdP(self.key)
        self.now = NOW
        self.warnings: list[dict] = []

        def observe(event: dict) -> None:
            if event.get("log_namespace") == "kafkatw.security.oauthbearer" and event["log_level"] >= LogLevel.warn:
                self.warnings.append(event)

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)

    def validator(self, **kwargs: Any) -> JwksValidator:
        return JwksValidator(URL, fetch=self.idp.fetch, clock=lambda: self.now, **kwargs)

    def token(self, kid: str = "k1", **claims: Any) -> str:
        body = {"sub": "alice", "iat": int(self.now), "exp": int(self.now) + 600, **claims}
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": kid})

    def results(self, ds: list[defer.Deferred]) -> list[Any]:
        out: list[Any] = []
        for d in ds:
            d.addBoth(out.append)
        return out

    def test_concurrent_logins_wait_for_one_fetch(self) -> None:
        validator = self.validator()
        ds = [validator.validate(self.token()) for _ in range(50)]
        self.assertEqual(self.idp.started, 1)
        self.assertTrue(validator.fetching)
        self.assertEqual([d.called for d in ds], [False] * 50)
        self.idp.answer()
        self.assertEqual([r.principal_name for r in self.results(ds)], ["alice"] * 50)
        self.assertFalse(validator.fetching)

    def test_a_failed_refresh_keeps_the_keys_and_warns_once(self) -> None:
        validator = self.validator(refresh_ms=3600000, retry_backoff_ms=100, retry_backoff_max_ms=1000)
        self.idp.immediate = True
        self.assertEqual(self.successResultOf(validator.validate(self.token())).principal_name, "alice")
        self.now += 3601
        self.idp.down = True
        for _ in range(30):  # the IdP is down for 30 s: logins go on with the keys held
            self.assertEqual(self.successResultOf(validator.validate(self.token())).principal_name, "alice")
            self.now += 1
        self.assertEqual(self.idp.started, 1 + 30)  # a refresh each second (the backoff's maximum)
        self.assertEqual(len(self.warnings), 1)
        self.assertIn("the keys read before stay in use", self.warnings[0]["then"])
        self.idp.down = False
        self.successResultOf(validator.validate(self.token()))
        self.assertEqual(self.idp.started, 32)
        self.now += 1
        self.successResultOf(validator.validate(self.token()))
        self.assertEqual(self.idp.started, 32)  # fresh again: no fetch for an hour

    def test_fetches_start_once_per_backoff_doubled_after_each_failure(self) -> None:
        validator = self.validator(retry_backoff_ms=100, retry_backoff_max_ms=400)
        self.idp.down = True
        starts = []
        for step in range(20):  # a login every 50 ms for a second, the IdP down
            failure = self.failureResultOf(validator.validate(self.token()), InvalidToken)
            self.assertIn(f"the JWKS at {URL} could not be read (IdP down)", str(failure.value))
            if self.idp.started > len(starts):
                starts.append(step * 50)
            self.now += 0.05
        # backoff from each start: 100, 200, 400, 400 ms
        self.assertEqual(starts, [0, 100, 300, 700])
        self.assertEqual(len(self.warnings), 1)
        self.assertIn("logins fail until it is read", self.warnings[0]["then"])

    def test_the_backoff_counts_from_the_start_of_a_fetch(self) -> None:
        validator = self.validator(retry_backoff_ms=100)
        first = validator.validate(self.token())
        self.now += 0.25  # a slow IdP: the fetch takes 250 ms
        self.idp.answer()
        self.successResultOf(first)
        # an unknown kid right after: the last fetch started 250 ms ago, so this one may start now
        rotated = validator.validate(self.token("k2"))
        self.assertEqual(self.idp.started, 2)
        self.idp.answer()
        self.failureResultOf(rotated, InvalidToken)

    def test_unknown_kids_start_one_refresh_per_backoff(self) -> None:
        validator = self.validator(retry_backoff_ms=100)
        self.idp.immediate = True
        self.successResultOf(validator.validate(self.token()))
        self.idp.immediate = False
        self.now += 1
        ds = [validator.validate(self.token(f"bogus{i}")) for i in range(20)]
        self.assertEqual(self.idp.started, 2)  # one refresh, all 20 waiting for it
        self.idp.answer()
        for r in self.results(ds):
            self.assertIn("no key with kid 'bogus", str(r.value))
        ds = [validator.validate(self.token(f"bogus{i}")) for i in range(20, 40)]  # within the backoff
        self.assertEqual(self.idp.started, 2)
        self.assertEqual([type(r.value) for r in self.results(ds)], [InvalidToken] * 20)  # at once
        self.now += 0.1
        d = validator.validate(self.token("bogus0"))  # this kid started a refresh less than a minute ago
        self.assertEqual(self.idp.started, 2)
        self.failureResultOf(d, InvalidToken)
        d = validator.validate(self.token("k-new"))
        self.assertEqual(self.idp.started, 3)
        self.idp.answer()
        self.failureResultOf(d, InvalidToken)
        self.now += 60
        again = validator.validate(self.token("bogus0"))
        self.assertEqual(self.idp.started, 4)  # a minute later it may again
        huge = validator.validate(self.token("x" * 1001))
        self.assertEqual(self.idp.started, 4)  # in flight; and a kid this long never starts one
        self.idp.answer()
        self.now += 1
        self.failureResultOf(validator.validate(self.token("y" * 1001)), InvalidToken)
        self.assertEqual(self.idp.started, 4)
        self.failureResultOf(huge, InvalidToken)
        self.failureResultOf(again, InvalidToken)

    def test_a_rotated_key_is_found_by_the_refresh_its_login_waits_for(self) -> None:
        validator = self.validator()
        self.idp.immediate = True
        self.successResultOf(validator.validate(self.token()))
        self.now += 1
        new_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(new_key.public_key()))
        public.update(kid="k2", alg="RS256", use="sig")
        self.idp.body = json.dumps({"keys": [public]}).encode()
        self.idp.immediate = False
        d = validator.validate(jwt.encode({"sub": "bob", "iat": int(self.now), "exp": int(self.now) + 60},
                                          new_key, algorithm="RS256", headers={"kid": "k2"}))
        self.assertNoResult(d)
        self.idp.answer()
        self.assertEqual(self.successResultOf(d).principal_name, "bob")

    def test_nbf_with_the_clock_skew(self) -> None:
        validator = self.validator(clock_skew_s=30)
        self.idp.immediate = True
        failure = self.failureResultOf(validator.validate(self.token(nbf=int(self.now) + 31)), InvalidToken)
        self.assertIn("nbf", str(failure.value))
        self.assertEqual(failure.value.json(), '{"status":"invalid_token"}')
        self.assertEqual(self.successResultOf(validator.validate(self.token(nbf=int(self.now) + 29))).principal_name,
                         "alice")
        self.successResultOf(validator.validate(self.token(nbf=int(self.now) - 100)))
        self.failureResultOf(validator.validate(self.token(nbf="soon")), InvalidToken)
