"""
SASL mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802,
RFC 7677), and SCRAM credentials as Kafka stores them.

The SCRAM computations are C{scramp}'s; this module adds Kafka's rules around
them (Kafka's C{PlainSaslServer}, C{ScramSaslServer}, C{ScramCredentialUtils}):

  - PLAIN's message is C{authzid NUL authcid NUL passwd}; an authorization id,
    when given, must equal the user name.
  - SCRAM's user name is the C{saslname} of RFC 5802 (C{=2C} for C{,},
    C{=3D} for C{=}); channel binding (C{p=}) is not offered.
  - A credential is stored, never the password, as Kafka's text::

        salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

    in C{/config/users/<user>} (L{kafkatw.zookeeper.registry}).

The messages of L{SaslAuthenticationFailed} are Kafka's, sent to the client in
SaslAuthenticate's C{error_message}; none holds a password or a token.

Source: RFC 4616, RFC 5802, RFC 7677; KIP-84 (SCRAM in Kafka); Kafka's
C{org.apache.kafka.common.security.plain} and C{.scram} packages.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import scramp

__all__ = [
    "MECHANISMS",
    "SCRAM_MECHANISMS",
    "SCRAM_MECHANISM_TYPES",
    "MIN_ITERATIONS",
    "MAX_ITERATIONS",
    "SaslException",
    "SaslAuthenticationFailed",
    "ScramCredential",
    "make_scram_credential",
    "salted_password",
    "credential_from_salted_password",
    "PlainServer",
    "ScramServer",
    "plain_client_token",
    "ScramClientExchange",
]

#: Every mechanism kafkatw speaks.
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: The SCRAM mechanisms.
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's C{ScramMechanism} type byte (Describe/AlterUserScramCredentials).
SCRAM_MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
#: The iteration counts Kafka accepts for a new credential (C{UNACCEPTABLE_CREDENTIAL} outside).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class SaslException(Exception):
    """
    A malformed or out-of-sequence exchange.  The client is told only Kafka's
    generic C{"Authentication failed during authentication due to invalid
    credentials with SASL mechanism <M>"}; the message here is for the log and
    never holds a secret.
    """


class SaslAuthenticationFailed(SaslException):
    """Wrong credentials: the message (Kafka's) is sent to the client as it is."""


@dataclass(frozen=True)
class ScramCredential:
    """
    What the broker keeps of a SCRAM password (RFC 5802 section 3).

    @ivar salt: the random salt.
    @ivar stored_key: H(ClientKey).
    @ivar server_key: HMAC(SaltedPassword, "Server Key").
    @ivar iterations: the PBKDF2 iteration count.
    """

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"

    def to_kafka(self) -> str:
        """Kafka's text form (C{ScramCredentialUtils.credentialToString})."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> "ScramCredential":
        """
        Parse Kafka's text form.

        @raise ValueError: a field missing or malformed.
        """
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise ValueError("a SCRAM credential is salt=...,stored_key=...,server_key=...,iterations=...")
            fields[key.strip()] = value.strip()
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True),
                       int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"malformed SCRAM credential ({type(e).__name__})") from None


def make_scram_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                          salt: bytes | None = None) -> ScramCredential:
    """
    The credential of C{password}, with a new random salt unless C{salt} is
    given.  The default iteration count is Kafka's (C{kafka-configs} uses the
    mechanism's minimum, 4096, when C{iterations=} is not given).

    @param mechanism: one of L{SCRAM_MECHANISMS}.
    @raise ValueError: an unknown mechanism, or C{iterations} outside
        L{MIN_ITERATIONS}..L{MAX_ITERATIONS}.
    """
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {iterations}")
    salt_out, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt)
    return ScramCredential(salt_out, stored_key, server_key, count)


_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """
    RFC 5802's C{SaltedPassword = Hi(password, salt, i)} (Hi is PBKDF2 with
    the mechanism's HMAC): what AlterUserScramCredentials carries instead of
    the password (KIP-554).  The password is not normalised with SASLprep
    (Kafka's clients do not either).
    """
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """
    The stored credential of a salted password (RFC 5802 section 3:
    C{StoredKey = H(HMAC(SaltedPassword, "Client Key"))},
    C{ServerKey = HMAC(SaltedPassword, "Server Key")}), as Kafka's broker makes it
    from an AlterUserScramCredentials upsertion.
    """
    name = _HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return ScramCredential(salt, hashlib.new(name, client_key).digest(),
                           hmac.new(salted, b"Server Key", name).digest(), iterations)


class PlainServer:
    """
    The broker's side of SASL/PLAIN: one client message, no challenge.

    @param users: user name -> password (a listener's JAAS C{user_<name>} options).
    @ivar username: the authenticated user, once L{complete}.
    """

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        """
        Check C{authzid NUL authcid NUL passwd}.

        @return: the empty challenge.
        @raise SaslAuthenticationFailed: missing fields, an unknown user or a
            wrong password (Kafka's messages).
        @raise SaslException: not UTF-8, not three fields, or a second message.
        """
        if self.complete:
            raise SaslException("PLAIN takes one message")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslException("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslException(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare_digest on equal-length digests: no timing hint of the stored password.
        if expected is None or not hmac.compare_digest(_digest(expected), _digest(password)):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an authorization id "
                                           "that is different from username")
        self.username = username
        self.complete = True
        return b""


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _saslname(name: str) -> str:
    """RFC 5802's saslname to a user name (C{=2C} -> C{,}, C{=3D} -> C{=})."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslException("Invalid SCRAM user name: a '=' not followed by 2C or 3D")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """
    The broker's side of one SCRAM exchange: client-first, then client-final.

    @param mechanism: C{SCRAM-SHA-256} or C{SCRAM-SHA-512}.
    @param lookup: user name -> the user's L{ScramCredential} for this
        mechanism, or C{None}; may return a Deferred (a ZooKeeper read).
    @ivar username: the authenticated user, once L{complete}.
    """

    def __init__(self, mechanism: str, lookup: Callable[[str], Any]) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._server: Any = None
        self._state = "first"
        self._username: str | None = None
        self._client_nonce = ""
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> Any:
        """
        Take the client's next message.

        @return: the server-first message after client-first (a Deferred of it
            when the lookup returns one), the server-final message after
            client-final.
        @raise SaslAuthenticationFailed: an authorization id other than the user.
        @raise SaslException: an unknown user, a wrong proof (password) or
            nonce, malformed messages, channel binding, or a message after the
            exchange ended -- all answered with Kafka's generic message, which
            does not tell an unknown user from a wrong password.
        """
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslException("Invalid SCRAM message: not UTF-8") from None
        if self._state == "first":
            self._state = "looking-up"
            username = self._parse_first(text)
            self._username = username
            found = self._lookup(username)
            if hasattr(found, "addCallback"):
                return found.addCallback(self._server_first, text)
            return self._server_first(found, text)
        if self._state == "final":
            self._state = "done"
            return self._server_final(text)
        raise SaslException(f"Unexpected SCRAM message in state {self._state}")

    def _parse_first(self, text: str) -> str:
        parts = text.split(",")
        if len(parts) < 4 or parts[0] not in ("n", "y") or not parts[2].startswith("n=") \
                or not parts[3].startswith("r="):
            if parts[0].startswith("p="):
                raise SaslException("Invalid SCRAM client first message: channel binding is not supported")
            raise SaslException("Invalid SCRAM client first message")
        self._client_nonce = parts[3][2:]
        username = _saslname(parts[2][2:])
        if not username:
            raise SaslException("Invalid SCRAM client first message: empty user name")
        authzid = parts[1]
        if authzid:
            if not authzid.startswith("a=") or _saslname(authzid[2:]) != username:
                raise SaslAuthenticationFailed("Authentication failed: Client requested an authorization id "
                                               "that is different from username")
        return username

    def _server_first(self, credential: ScramCredential | None, text: str) -> bytes:
        if credential is None:  # Kafka's SaslException: the client is not told the user is unknown
            raise SaslException("Authentication failed: Invalid user credentials")
        value = (credential.salt, credential.stored_key, credential.server_key, credential.iterations)
        self._server = scramp.ScramMechanism(self.mechanism).make_server(lambda _name: value)
        try:
            self._server.set_client_first(text)
            first = self._server.get_server_first()
        except scramp.ScramException as e:
            raise SaslException(f"Invalid SCRAM client first message ({_scram_reason(e)})") from None
        self._state = "final"
        return first.encode("utf-8")

    def _server_final(self, text: str) -> bytes:
        nonce = next((p[2:] for p in text.split(",") if p.startswith("r=")), "")
        expected = str(self._server.nonce)
        # RFC 5802 and Kafka since CVE-2024-56128 want the server-first nonce
        # exactly.  librdkafka 2.0 (Debian's kcat) sends its own client nonce
        # in front of it, which Kafka's older endsWith check let through; that
        # one shape is accepted too (the proof covers the message as sent, and
        # the server's fresh nonce is still required), nothing else.
        if nonce != expected and nonce != self._client_nonce + expected:
            raise SaslException("Invalid client nonce in the final client message.")
        if nonce != expected:
            self._server.nonce = type(self._server.nonce)(nonce)
        try:
            self._server.set_client_final(text)
            final = self._server.get_server_final()
        except scramp.ScramException as e:
            # A wrong password is scramp's "invalid-proof" (Kafka: "Invalid client credentials").
            raise SaslException(f"Invalid SCRAM client final message ({_scram_reason(e)})") from None
        self.username = self._username
        self.complete = True
        return final.encode("utf-8")


def _scram_reason(e: Exception) -> str:
    # scramp's messages name fields and states, never the password or keys.
    return str(e).split("\n")[0][:200]


# --- client side ------------------------------------------------------------------


def plain_client_token(username: str, password: str) -> bytes:
    """The client's PLAIN message: C{NUL username NUL password} (RFC 4616)."""
    return f"\x00{username}\x00{password}".encode("utf-8")


class ScramClientExchange:
    """
    The client's side of SCRAM (with C{scramp}): L{first}, then L{final}
    with the server-first message, then L{verify} with the server-final one.
    """

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self._client = scramp.ScramClient([mechanism], username, password)

    def first(self) -> bytes:
        return self._client.get_client_first().encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        """@raise SaslException: a malformed server-first message."""
        try:
            self._client.set_server_first(bytes(server_first).decode("utf-8"))
            return self._client.get_client_final().encode("utf-8")
        except (scramp.ScramException, UnicodeDecodeError) as e:
            raise SaslException(f"Invalid SCRAM server first message ({_scram_reason(e)})") from None

    def verify(self, server_final: bytes) -> None:
        """@raise SaslException: the server did not prove it knows the credential."""
        try:
            self._client.set_server_final(bytes(server_final).decode("utf-8"))
        except (scramp.ScramException, UnicodeDecodeError) as e:
            raise SaslException(f"Invalid SCRAM server final message ({_scram_reason(e)})") from None
