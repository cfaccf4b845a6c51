"""
SASL/OAUTHBEARER (RFC 7628) as Kafka serves it (KIP-255), with Kafka's two
token validators: the unsecured one for development (unsigned JWS,
C{alg: none}) and the JWKS one for production (signed JWTs checked against an
OpenID provider's keys, KIP-768).

The client's first message is RFC 7628's, as Kafka's
C{OAuthBearerClientInitialResponse} reads it::

    n,[a=<authzid>],\\x01[key=value\\x01]*auth=Bearer <token>\\x01[key=value\\x01]*\\x01

A token that does not validate is answered, as a server challenge, with
Kafka's JSON error (C{{"status":"invalid_token"}}, or
C{{"status":"insufficient_scope", "scope":"<missing>"}}); the client answers
C{\\x01} and the exchange fails with that JSON as the C{SASL_AUTHENTICATION_FAILED}
message (Kafka's C{OAuthBearerSaslServer}).  A malformed first message fails
at once with Kafka's generic message.  Success: the principal is the
token's subject claim.

The unsecured validator is configured by the listener's JAAS options
(Kafka's C{OAuthBearerUnsecuredValidatorCallbackHandler}):
C{unsecuredValidatorPrincipalClaimName} (default C{sub}),
C{unsecuredValidatorScopeClaimName} (default C{scope}),
C{unsecuredValidatorRequiredScope} (space-separated scopes the token must all
hold), C{unsecuredValidatorAllowableClockSkewMs} (default 0).  A token must
have C{exp}; C{iat}, when present, must not be in the future.

No exception message or log line holds a token.

Source: RFC 7628 (sections 3.1 and 3.2.2), RFC 7515/7519 (JWS, JWT); KIP-255,
KIP-768; Kafka's C{org.apache.kafka.common.security.oauthbearer} package.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from twisted.logger import Logger

from .sasl import SaslAuthenticationFailed, SaslException

__all__ = [
    "MECHANISM",
    "OAuthBearerToken",
    "InvalidToken",
    "OAuthBearerTokenRefused",
    "UnsecuredValidator",
    "JwksValidator",
    "OAuthBearerServer",
    "parse_client_initial_response",
    "client_initial_response",
    "unsecured_token",
    "UnsecuredTokenProvider",
    "unsecured_login_provider",
    "fetch_url",
]

_log = Logger()

MECHANISM = "OAUTHBEARER"
_SEPARATOR = "\x01"
# Kafka's OAuthBearerClientInitialResponse patterns.
_CLIENT_FIRST = re.compile(r"n,(?:a=(?P<authzid>(?:[\x02-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+))?,\x01"
                           r"(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


@dataclass(frozen=True)
class OAuthBearerToken:
    """
    A validated token (Kafka's C{OAuthBearerToken}).

    @ivar principal_name: the subject (C{User:<principal_name>}).
    @ivar scope: the token's scope.
    @ivar lifetime_ms: its expiry (C{exp}), ms since the epoch.
    @ivar start_time_ms: C{iat} in ms, or C{None}.
    """

    principal_name: str
    scope: frozenset[str]
    lifetime_ms: int
    start_time_ms: int | None = None


class InvalidToken(Exception):
    """
    A token refused by a validator: C{str()} says why (for the broker's log,
    never the token); C{status} and C{scope} make the RFC 7628 error.
    """

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope

    @property
    def status(self) -> str:
        return "insufficient_scope" if self.scope is not None else "invalid_token"

    def json(self) -> str:
        """Kafka's C{OAuthBearerSaslServer.jsonErrorResponse}, byte for byte."""
        text = f'{{"status":"{self.status}"'
        if self.scope is not None:
            text += f', "scope":"{self.scope}"'
        return text + "}"


class OAuthBearerTokenRefused(SaslAuthenticationFailed):
    """
    The exchange's failure after a refused token: C{str()} is the JSON error
    sent to the client (Kafka's), C{reason} the validator's reason for the log.
    """

    def __init__(self, error_json: str, reason: str) -> None:
        super().__init__(error_json)
        self.reason = reason


def _b64url_json(part: str, what: str) -> dict:
    try:
        decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(decoded.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidToken(f"the JWS {what} is not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"the JWS {what} is not a JSON object")
    return value


def _number_ms(claims: Mapping[str, Any], name: str, required: bool) -> int | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"required claim missing: {name}")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or abs(value) > 1e15:
        raise InvalidToken(f"the {name} claim is not a number")
    return int(value * 1000)


def _scope(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    value = claims.get(name)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(v.strip() for v in value if v.strip())
    raise InvalidToken(f"the {name} claim is neither a string nor a list of strings")


def _principal(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidToken(f"required claim missing or empty: {name}")
    return value.strip()


def _check_times(claims: Mapping[str, Any], now_ms: int, skew_ms: int, iat_required: bool) -> tuple[int, int | None]:
    """Kafka's C{OAuthBearerValidationUtils}: C{exp} not past, C{iat} not future, C{iat} before C{exp}."""
    exp = _number_ms(claims, "exp", True)
    iat = _number_ms(claims, "iat", iat_required)
    assert exp is not None
    if now_ms > exp + skew_ms:
        raise InvalidToken(f"the token expired {now_ms - exp} ms ago (allowable clock skew {skew_ms} ms)")
    if iat is not None:
        if iat > now_ms + skew_ms:
            raise InvalidToken(f"the token is issued {iat - now_ms} ms in the future "
                               f"(allowable clock skew {skew_ms} ms)")
        if exp <= iat:
            raise InvalidToken("the token expires before it is issued (exp <= iat)")
    return exp, iat


class UnsecuredValidator:
    """
    Kafka's C{OAuthBearerUnsecuredValidatorCallbackHandler}: an unsigned JWS
    (three base64url parts, the last empty; header C{alg} C{none}).

    @param options: the listener's OAUTHBEARER JAAS options (the
        C{unsecuredValidator*} names above).
    @param clock: seconds since the epoch (C{time.time}).
    @raise ValueError: an option that is not a number where one is needed.
    """

    def __init__(self, options: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time) -> None:
        options = dict(options or {})
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub"
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope"
        self.required_scope = frozenset(options.get("unsecuredValidatorRequiredScope", "").split())
        try:
            self.clock_skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "").strip() or 0)
        except ValueError:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs must be a number of ms") from None
        if self.clock_skew_ms < 0:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs must not be negative")
        self.clock = clock

    def validate(self, token: str) -> OAuthBearerToken:
        """@raise InvalidToken: not an unsecured JWS, or its claims do not validate."""
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("an unsecured JWS has 3 dot-separated base64url-encoded parts")
        if parts[2]:
            raise InvalidToken("an unsecured JWS must not carry a signature")
        header = _b64url_json(parts[0], "header")
        if header.get("alg") != "none":
            raise InvalidToken("an unsecured JWS must have the alg header 'none'")
        claims = _b64url_json(parts[1], "payload")
        now_ms = int(self.clock() * 1000)
        principal = _principal(claims, self.principal_claim)
        exp, iat = _check_times(claims, now_ms, self.clock_skew_ms, False)
        scope = _scope(claims, self.scope_claim)
        for needed in sorted(self.required_scope):
            if needed not in scope:
                raise InvalidToken(f"the token's scope lacks the required {needed!r}", needed)
        return OAuthBearerToken(principal, scope, exp, iat)


def fetch_url(url: str, timeout_s: float = 10.0) -> bytes:
    """The body at C{url} (C{https://}, C{http://}, C{file://}); blocking."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 -- operator's URL
        return response.read()


class JwksValidator:
    """
    Kafka's C{OAuthBearerValidatorCallbackHandler} (KIP-768): a JWT signed
    with a key of the JSON Web Key Set at C{sasl.oauthbearer.jwks.endpoint.url},
    found by the token's C{kid}; C{alg: none} refused; C{exp} and C{iat}
    required, C{nbf} checked when present (each with the allowed clock skew);
    C{aud} among the expected audiences and C{iss} the expected issuer when
    those are configured.  Signatures are checked by PyJWT.

    The key set is kept as Kafka's C{RefreshingHttpsJwks} keeps it:

      - one fetch at a time: every login that needs the keys waits for the
        fetch under way, none starts another;
      - the first login fetches them; after C{refresh_ms} a login starts a
        refresh and is checked against the keys held meanwhile;
      - a refresh that fails keeps the keys held (logged once, until a fetch
        succeeds again); with no keys yet, logins fail with "could not be read";
      - fetches start at most once per backoff, counted from the start of
        the last one: C{retry_backoff_ms}, doubled after each failure in a
        row up to C{retry_backoff_max_ms};
      - an unknown C{kid} starts a refresh (and its login waits for it) when
        the backoff allows and that C{kid} has not started one in the last
        minute (the last 16 such C{kid}s are remembered, as Kafka's
        C{MISSING_KEY_ID_CACHE_*}; a C{kid} longer than 1000 characters never
        does); otherwise the login fails at once.

    @param refresh_ms: C{sasl.oauthbearer.jwks.endpoint.refresh.ms}.
    @param retry_backoff_ms: C{sasl.oauthbearer.jwks.endpoint.retry.backoff.ms}.
    @param retry_backoff_max_ms: C{sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms}.
    @param fetch: C{url -> bytes} or a Deferred of bytes (default: L{fetch_url}
        in a thread of C{reactor}'s pool).
    @param clock: seconds since the epoch.
    @param reactor: the reactor whose thread pool fetches (default: the global one).
    """

    #: Kafka's C{RefreshingHttpsJwks.MISSING_KEY_ID_CACHE_MAX_ENTRIES}, C{..._IN_FLIGHT_MS},
    #: C{MISSING_KEY_ID_MAX_KEY_LENGTH}
    MISSING_KID_ENTRIES = 16
    MISSING_KID_MS = 60000
    MISSING_KID_MAX_LENGTH = 1000

    def __init__(self, url: str, audience: Iterable[str] = (), issuer: str = "", sub_claim: str = "sub",
                 scope_claim: str = "scope", clock_skew_s: int = 30, refresh_ms: int = 3600000,
                 retry_backoff_ms: int = 100, fetch: Callable[[str], Any] | None = None,
                 clock: Callable[[], float] = time.time, reactor: Any = None,
                 retry_backoff_max_ms: int = 10000) -> None:
        import jwt  # noqa: F401 -- fail at start-up, not at the first login, without PyJWT

        self.url = url
        self.audience = [a for a in audience if a]
        self.issuer = issuer
        self.sub_claim = sub_claim or "sub"
        self.scope_claim = scope_claim or "scope"
        self.clock_skew_ms = int(clock_skew_s) * 1000
        self.refresh_ms = refresh_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self.clock = clock
        self._fetch = fetch or self._fetch_in_thread
        self._reactor = reactor
        self._keys: dict[str | None, Any] = {}
        #: when the fetch that read the keys held started (ms), None: no keys yet
        self._fetched_ms: int | None = None
        #: when the last fetch started (ms)
        self._attempt_ms: int | None = None
        #: the fetch under way: the Deferreds of the logins waiting for it
        self._waiting: list[Any] | None = None
        self._failures = 0
        self._error = ""
        #: unknown kid -> until when (ms) it starts no refresh
        self._missing: OrderedDict[str, int] = OrderedDict()

    def _fetch_in_thread(self, url: str) -> Any:
        from twisted.internet.threads import deferToThreadPool

        reactor = self._reactor
        if reactor is None:
            from twisted.internet import reactor  # type: ignore[no-redef]
        return deferToThreadPool(reactor, reactor.getThreadPool(), fetch_url, url)

    @property
    def fetching(self) -> bool:
        """Whether a fetch of the key set is under way."""
        return self._waiting is not None

    def _backoff_ms(self) -> int:
        if self._failures == 0:
            return self.retry_backoff_ms
        return min(self.retry_backoff_ms * 2 ** min(self._failures - 1, 62), self.retry_backoff_max_ms)

    def _may_fetch(self, now_ms: int) -> bool:
        return not self.fetching and (self._attempt_ms is None or now_ms - self._attempt_ms >= self._backoff_ms())

    def _start_fetch(self, now_ms: int) -> None:
        from twisted.internet import defer

        self._attempt_ms = now_ms
        self._waiting = []
        defer.maybeDeferred(self._fetch, self.url).addCallback(self._load).addCallbacks(
            self._fetched, self._fetch_failed, callbackArgs=(now_ms,))

    def _wait(self) -> Any:
        from twisted.internet import defer

        assert self._waiting is not None
        waiter = defer.Deferred()
        self._waiting.append(waiter)
        return waiter

    def _done(self) -> None:
        waiting, self._waiting = self._waiting or [], None
        for waiter in waiting:
            waiter.callback(None)

    def _load(self, body: bytes | str) -> dict[str | None, Any]:
        import jwt

        try:
            keys = jwt.PyJWKSet.from_json(body.decode("utf-8") if isinstance(body, bytes) else body)
        except (jwt.PyJWKSetError, jwt.InvalidKeyError, UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"not a usable key set ({e})") from None
        return {key.key_id: key for key in keys.keys}

    def _fetched(self, keys: dict[str | None, Any], started_ms: int) -> None:
        if self._failures:
            _log.info("read the JWKS at {url} again, after {failures} failed attempts", url=self.url,
                      failures=self._failures)
        self._keys = keys
        self._fetched_ms = started_ms
        self._failures = 0
        self._error = ""
        for kid in keys:
            self._missing.pop(str(kid), None)
        self._done()

    def _fetch_failed(self, failure: Any) -> None:
        self._failures += 1
        self._error = str(failure.value)[:200] or type(failure.value).__name__
        if self._failures == 1:
            _log.warn("reading the JWKS at {url} failed ({error}); {then} (retried with a backoff of up to"
                      " {max_ms} ms; logged again once it is read)", url=self.url, error=self._error,
                      then="the keys read before stay in use" if self._fetched_ms is not None
                      else "OAUTHBEARER logins fail until it is read", max_ms=self.retry_backoff_max_ms)
        self._done()

    def _unknown_kid_may_refresh(self, kid: Any, now_ms: int) -> bool:
        name = str(kid)
        if len(name) > self.MISSING_KID_MAX_LENGTH:
            return False
        until = self._missing.get(name)
        if until is not None and until > now_ms:
            return False
        self._missing[name] = now_ms + self.MISSING_KID_MS
        self._missing.move_to_end(name)
        while len(self._missing) > self.MISSING_KID_ENTRIES:
            self._missing.popitem(last=False)
        return True

    def validate(self, token: str) -> Any:
        """
        @return: a Deferred firing with an L{OAuthBearerToken}.
        @raise InvalidToken: (in the Deferred) a token that does not validate,
            or no key set read yet.
        """
        from twisted.internet import defer

        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return defer.fail(InvalidToken("not a signed JWT (JWS compact serialization)"))
        kid = header.get("kid")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg.lower() == "none":
            return defer.fail(InvalidToken("the JWT is not signed (alg none)"))
        now_ms = round(self.clock() * 1000)
        if self._fetched_ms is None:
            if self._may_fetch(now_ms):
                self._start_fetch(now_ms)
        elif now_ms - self._fetched_ms >= self.refresh_ms and self._may_fetch(now_ms):
            self._start_fetch(now_ms)  # this login goes on with the keys held
        if kid not in self._keys and self._fetched_ms is not None and self._may_fetch(now_ms) \
                and self._unknown_kid_may_refresh(kid, now_ms):
            self._start_fetch(now_ms)
        if self.fetching and (self._fetched_ms is None or kid not in self._keys):
            return self._wait().addCallback(lambda _: self._verify(token, kid, alg))
        return defer.maybeDeferred(self._verify, token, kid, alg)

    def _verify(self, token: str, kid: Any, alg: str) -> OAuthBearerToken:
        import jwt

        if self._fetched_ms is None:
            raise InvalidToken(f"the JWKS at {self.url} could not be read ({self._error})")
        key = self._keys.get(kid)
        if key is None:
            raise InvalidToken(f"no key with kid {str(kid)[:64]!r} in the JWKS")
        if key.algorithm_name != alg:
            raise InvalidToken(f"the JWT's alg {alg[:16]!r} is not its key's ({key.algorithm_name})")
        try:
            claims = jwt.decode(token, key, algorithms=[alg], audience=self.audience or None,
                                issuer=self.issuer or None,
                                options={"verify_exp": False, "verify_iat": False, "verify_nbf": False,
                                         "verify_aud": bool(self.audience), "verify_iss": bool(self.issuer),
                                         "require": []})
        except jwt.PyJWTError as e:
            raise InvalidToken(f"the JWT does not validate: {e}") from None
        now_ms = round(self.clock() * 1000)
        exp, iat = _check_times(claims, now_ms, self.clock_skew_ms, True)
        nbf = _number_ms(claims, "nbf", False)
        if nbf is not None and nbf > now_ms + self.clock_skew_ms:
            raise InvalidToken(f"the token is not valid for another {nbf - now_ms} ms (nbf; allowable clock skew"
                               f" {self.clock_skew_ms} ms)")
        return OAuthBearerToken(_principal(claims, self.sub_claim), _scope(claims, self.scope_claim), exp, iat)


def parse_client_initial_response(message: bytes) -> tuple[str, str, dict[str, str]]:
    """
    RFC 7628's client first message, as Kafka's C{OAuthBearerClientInitialResponse}.

    @return: C{(authorization id or "", token, extensions)}.
    @raise SaslException: not that shape, no C{auth}, a scheme other than
        C{Bearer}.  The message never quotes the token.
    """
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslException("Invalid OAUTHBEARER client first message: not UTF-8") from None
    match = _CLIENT_FIRST.fullmatch(text)
    if match is None:
        raise SaslException("Invalid OAUTHBEARER client first message")
    pairs: dict[str, str] = {}
    for pair in match.group("kvpairs").split(_SEPARATOR)[:-1]:
        key, _, value = pair.partition("=")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise SaslException("Invalid OAUTHBEARER client first message: 'auth' not specified")
    found = _AUTH.fullmatch(auth)
    if found is None:
        raise SaslException("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if found.group("scheme").lower() != "bearer":
        raise SaslException("Invalid scheme in OAUTHBEARER client first message")
    authzid = (match.group("authzid") or "").replace("=2C", ",").replace("=3D", "=")
    return authzid, found.group("token"), pairs


def client_initial_response(token: str, authzid: str = "", extensions: Mapping[str, str] | None = None) -> bytes:
    """The client's first message (RFC 7628 section 3.1), as Kafka's and kafka-python's clients send it."""
    name = authzid.replace("=", "=3D").replace(",", "=2C")
    text = f"n,{'a=' + name if name else ''},{_SEPARATOR}auth=Bearer {token}"
    for key, value in (extensions or {}).items():
        text += f"{_SEPARATOR}{key}={value}"
    return (text + _SEPARATOR + _SEPARATOR).encode("utf-8")


class OAuthBearerServer:
    """
    The broker's side of one OAUTHBEARER exchange (Kafka's
    C{OAuthBearerSaslServer}).

    @param validator: an L{UnsecuredValidator} or L{JwksValidator}
        (C{validate(token)} returning an L{OAuthBearerToken} or a Deferred of
        one, raising L{InvalidToken}).
    @ivar username: the principal's name once L{complete}.
    @ivar token: the validated L{OAuthBearerToken}.
    """

    def __init__(self, validator: Any) -> None:
        self._validator = validator
        self._state = "first"
        self._error: InvalidToken | None = None
        self._authzid = ""
        self.username: str | None = None
        self.token: OAuthBearerToken | None = None
        self.complete = False

    def evaluate(self, message: bytes) -> Any:
        """
        @return: C{b""} on success; the JSON error challenge for a refused
            token (a Deferred of either for a validator that returns one).
        @raise OAuthBearerTokenRefused: the client's C{\\x01} after the error.
        @raise SaslAuthenticationFailed: an authorization id other than the
            token's principal.
        @raise SaslException: a malformed or out-of-turn message.
        """
        if self._state == "error":
            self._state = "done"
            assert self._error is not None
            if bytes(message) == b"\x01":
                raise OAuthBearerTokenRefused(self._error.json(), str(self._error))
            raise SaslException("Invalid OAUTHBEARER message after the server's error: expected %x01")
        if self._state != "first":
            raise SaslException(f"Unexpected OAUTHBEARER message in state {self._state}")
        self._state = "validating"
        self._authzid, token, _extensions = parse_client_initial_response(message)
        try:
            result = self._validator.validate(token)
        except InvalidToken as e:
            return self._refused(e)
        if hasattr(result, "addCallbacks"):
            return result.addCallbacks(self._validated, self._refused_failure)
        return self._validated(result)

    def _refused_failure(self, failure: Any) -> bytes:
        failure.trap(InvalidToken)
        return self._refused(failure.value)

    def _refused(self, error: InvalidToken) -> bytes:
        self._state = "error"
        self._error = error
        return error.json().encode("utf-8")

    def _validated(self, token: OAuthBearerToken) -> bytes:
        if self._authzid and self._authzid != token.principal_name:
            self._state = "done"
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({self._authzid}) that is "
                f"different from the token's principal name ({token.principal_name})")
        self._state = "done"
        self.token = token
        self.username = token.principal_name
        self.complete = True
        return b""


# --- client side: unsecured tokens (development and tests) ----------------------------------------


def _b64url(value: Mapping[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode("utf-8")).rstrip(b"=").decode()


def unsecured_token(principal: str, lifetime_s: float = 3600, scope: Iterable[str] = (),
                    principal_claim: str = "sub", scope_claim: str = "scope", now: float | None = None,
                    claims: Mapping[str, Any] | None = None) -> str:
    """
    An unsecured JWS (C{alg: none}, no signature) as Kafka's
    C{OAuthBearerUnsecuredLoginCallbackHandler} and librdkafka's
    C{enable.sasl.oauthbearer.unsecure.jwt} make: C{sub}, C{iat}, C{exp}
    (C{now + lifetime_s}, seconds) and C{scope} when given.  For development
    and tests only: any broker that accepts it lets anyone claim any name.
    """
    issued = time.time() if now is None else now
    body: dict[str, Any] = {principal_claim: principal, "iat": issued, "exp": issued + lifetime_s}
    scope = list(scope)
    if scope:
        body[scope_claim] = scope
    body.update(claims or {})
    return f"{_b64url({'alg': 'none'})}.{_b64url(body)}."


class UnsecuredTokenProvider:
    """
    A token provider (kafka-python's C{sasl_oauth_token_provider} shape:
    C{token()} and C{extensions()}) of L{unsecured_token}s for C{principal},
    a fresh one for each call.
    """

    def __init__(self, principal: str, lifetime_s: float = 3600, scope: Iterable[str] = (),
                 principal_claim: str = "sub", scope_claim: str = "scope",
                 claims: Mapping[str, Any] | None = None) -> None:
        self.principal = principal
        self.lifetime_s = lifetime_s
        self.scope = tuple(scope)
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.claims = dict(claims or {})

    def token(self) -> str:
        return unsecured_token(self.principal, self.lifetime_s, self.scope, self.principal_claim,
                               self.scope_claim, claims=self.claims)

    def extensions(self) -> dict[str, str]:
        return {}

    def __repr__(self) -> str:
        return f"UnsecuredTokenProvider(principal={self.principal!r})"


def unsecured_login_provider(options: Mapping[str, str]) -> UnsecuredTokenProvider:
    """
    The provider of Kafka's C{OAuthBearerLoginModule} JAAS options
    (C{OAuthBearerUnsecuredLoginCallbackHandler}):
    C{unsecuredLoginStringClaim_<name>="value"} (C{sub} is the principal),
    C{unsecuredLoginNumberClaim_<name>}, C{unsecuredLoginListClaim_<name>}
    (the first character is the separator), C{unsecuredLoginLifetimeSeconds}
    (default 3600), C{unsecuredLoginPrincipalClaimName},
    C{unsecuredLoginScopeClaimName}.

    @raise ValueError: no principal claim, or a number that is not one.
    """
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "").strip() or "sub"
    scope_claim = options.get("unsecuredLoginScopeClaimName", "").strip() or "scope"
    claims: dict[str, Any] = {}
    for key, value in options.items():
        for prefix, convert in (("unsecuredLoginStringClaim_", str),
                                ("unsecuredLoginNumberClaim_", float),
                                ("unsecuredLoginListClaim_", lambda v: [s for s in v[1:].split(v[0]) if s]
                                 if v else [])):
            if key.startswith(prefix) and len(key) > len(prefix):
                try:
                    claims[key[len(prefix):]] = convert(value)
                except ValueError:
                    raise ValueError(f"sasl.jaas.config: {key} is not a number") from None
    principal = claims.pop(principal_claim, None)
    if not isinstance(principal, str) or not principal:
        raise ValueError(f"sasl.jaas.config: OAuthBearerLoginModule needs unsecuredLoginStringClaim_{principal_claim}")
    try:
        lifetime = float(options.get("unsecuredLoginLifetimeSeconds", "").strip() or 3600)
    except ValueError:
        raise ValueError("sasl.jaas.config: unsecuredLoginLifetimeSeconds is not a number") from None
    scope = claims.pop(scope_claim, ())
    return UnsecuredTokenProvider(principal, lifetime, scope if isinstance(scope, list) else str(scope).split(),
                                  principal_claim, scope_claim, claims)
