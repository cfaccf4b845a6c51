"""
SASL mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802,
RFC 7677), and SCRAM credentials as Kafka stores them.

The SCRAM computations are RFC 5802's, with the standard library's C{hmac}
and C{hashlib.pbkdf2_hmac}, as Kafka's C{ScramFormatter} makes them: any salt
of one byte or more, the password's UTF-8 bytes without SASLprep (Kafka's
C{ScramFormatter.normalize}).  (C{scramp}, the reference the tests check
against, refuses salts under 12 bytes, which Kafka's brokers and clients
accept: an AlterUserScramCredentials upsertion sets the salt.)  This module
adds Kafka's rules (Kafka's C{PlainSaslServer}, C{ScramSaslServer},
C{ScramSaslClient}, C{ScramCredentialUtils}):

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
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

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

#: Every mechanism kafkatw speaks (OAUTHBEARER: L{kafkatw.security.oauthbearer};
#: GSSAPI: L{kafkatw.security.kerberos}).
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
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
    if salt is None:
        salt = os.urandom(_SALT_BYTES)
    elif not salt:
        raise ValueError("the salt must not be empty")
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)


#: The length of the random salts of new credentials (bytes).
_SALT_BYTES = 16


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
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first_text = ""
        self._nonce = ""
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
        if not _printable(self._client_nonce):
            raise SaslException("Invalid SCRAM client first message (invalid nonce)")
        gs2_cbind, authzid, bare = text.split(",", 2)
        self._gs2_header = f"{gs2_cbind},{authzid},"
        self._client_first_bare = bare
        self._credential = credential
        self._nonce = self._client_nonce + _new_nonce()
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first_text = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first_text.encode("utf-8")

    def _server_final(self, text: str) -> bytes:
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attributes = without_proof.split(",")
        if not sep or len(attributes) < 2 or not attributes[0].startswith("c=") \
                or not attributes[1].startswith("r="):
            raise SaslException("Invalid SCRAM client final message")
        nonce = attributes[1][2:]
        expected = self._nonce
        # RFC 5802 and Kafka since CVE-2024-56128 want the server-first nonce
        # exactly.  librdkafka 2.0 (Debian's kcat) sends its own client nonce
        # in front of it, which Kafka's older endsWith check let through; that
        # one shape is accepted too (the proof covers the message as sent, and
        # the server's fresh nonce is still required), nothing else.
        if nonce != expected and nonce != self._client_nonce + expected:
            raise SaslException("Invalid client nonce in the final client message.")
        try:
            binding = base64.b64decode(attributes[0][2:], validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise SaslException("Invalid SCRAM client final message (not base64)") from None
        if binding != self._gs2_header.encode("utf-8"):
            raise SaslException("Invalid SCRAM client final message (channel-bindings-dont-match)")
        name = _HASHES[self.mechanism]
        credential = self._credential
        assert credential is not None  # set with the server-first message
        auth_message = f"{self._client_first_bare},{self._server_first_text},{without_proof}".encode("utf-8")
        signature = hmac.new(credential.stored_key, auth_message, name).digest()
        if len(proof) != len(signature) or not hmac.compare_digest(
                hashlib.new(name, _xor(proof, signature)).digest(), credential.stored_key):
            # RFC 5802's server-error-value (Kafka: "Invalid client credentials")
            raise SaslException("Invalid SCRAM client final message (invalid-proof)")
        self.username = self._username
        self.complete = True
        server_signature = hmac.new(credential.server_key, auth_message, name).digest()
        return b"v=" + base64.b64encode(server_signature)


def _new_nonce() -> str:
    """A fresh nonce: 24 printable characters (base64 of 18 random bytes, no ',')."""
    return base64.b64encode(os.urandom(18)).decode("ascii")


def _printable(nonce: str) -> bool:
    """RFC 5802's C{printable}: not empty, characters 0x21-0x7E except C{,}."""
    return bool(nonce) and all("!" <= c <= "~" and c != "," for c in nonce)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def _attributes(message: str, description: str) -> dict[str, str]:
    """C{a=value,...} as a dict (the first of each letter); @raise SaslException: not that shape."""
    found: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslException(f"Invalid SCRAM {description}")
        found.setdefault(key, value)
    return found


# --- client side ------------------------------------------------------------------


def plain_client_token(username: str, password: str) -> bytes:
    """The client's PLAIN message: C{NUL username NUL password} (RFC 4616)."""
    return f"\x00{username}\x00{password}".encode("utf-8")


class ScramClientExchange:
    """
    The client's side of SCRAM, as Kafka's C{ScramSaslClient}: L{first}, then
    L{final} with the server-first message, then L{verify} with the
    server-final one.  Any salt of one byte or more is taken; an iteration
    count below L{MIN_ITERATIONS} is refused (Kafka's "Requested iterations
    ... is less than minimum").
    """

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self._password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._client_nonce = _new_nonce()
        self._client_first_bare = f"n={name},r={self._client_nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        """@raise SaslException: a malformed server-first message, or too few iterations."""
        try:
            text = bytes(server_first).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslException("Invalid SCRAM server first message (not UTF-8)") from None
        attributes = _attributes(text, "server first message")
        if "e" in attributes:
            raise SaslException(f"Invalid SCRAM server first message (the server returned {attributes['e']!r})")
        nonce, salt_b64, iterations_text = attributes.get("r", ""), attributes.get("s", ""), attributes.get("i", "")
        if "m" in attributes or not nonce.startswith(self._client_nonce) or len(nonce) <= len(self._client_nonce) \
                or not _printable(nonce):
            raise SaslException("Invalid SCRAM server first message (invalid nonce)")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iterations_text)
        except (binascii.Error, ValueError):
            raise SaslException("Invalid SCRAM server first message (salt or iteration count)") from None
        if not salt:
            raise SaslException("Invalid SCRAM server first message (empty salt)")
        if iterations < MIN_ITERATIONS:
            raise SaslException(f"Requested iterations {iterations} is less than minimum {MIN_ITERATIONS} "
                                f"for {self.mechanism}")
        name = _HASHES[self.mechanism]
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = hmac.new(salted, b"Client Key", name).digest()
        stored_key = hashlib.new(name, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode('ascii')},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode("utf-8")
        proof = _xor(client_key, hmac.new(stored_key, auth_message, name).digest())
        server_key = hmac.new(salted, b"Server Key", name).digest()
        self._server_signature = hmac.new(server_key, auth_message, name).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("utf-8")

    def verify(self, server_final: bytes) -> None:
        """@raise SaslException: the server did not prove it knows the credential."""
        try:
            text = bytes(server_final).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslException("Invalid SCRAM server final message (not UTF-8)") from None
        attributes = _attributes(text, "server final message")
        if "e" in attributes:
            raise SaslException(f"Invalid SCRAM server final message (the server returned {attributes['e']!r})")
        try:
            signature = base64.b64decode(attributes.get("v", ""), validate=True)
        except (binascii.Error, ValueError):
            raise SaslException("Invalid SCRAM server final message (not base64)") from None
        if not self._server_signature or not hmac.compare_digest(signature, self._server_signature):
            raise SaslException("Invalid SCRAM server final message (invalid server signature)")
