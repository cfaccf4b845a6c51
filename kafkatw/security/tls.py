"""
TLS for listeners and clients: PEM stores (KIP-651), Twisted's TLS options,
and the principal of a client certificate.

A PEM key store (C{ssl.keystore.location}) holds a certificate chain (the
leaf first) and its private key, encrypted with C{ssl.key.password} or not;
a PEM trust store (C{ssl.truststore.location}) holds CA certificates.  They
become Twisted's L{CertificateOptions} (server side: L{server_options}) or
L{optionsForClientTLS} (client side: L{client_options}, which checks the
server's host name with C{service-identity} as RFC 6125 says).

A client certificate's subject is written as an RFC 2253 distinguished name
(C{CN=alice,OU=eng,O=Example}; the last RDN of the certificate first, as
Java's C{X500Principal.getName()}), and C{ssl.principal.mapping.rules}
(L{PrincipalMapper}, Kafka's C{SslPrincipalMapper}) turns it into the user
name of the principal C{User:<name>}.

Source: Kafka's C{SslFactory}, C{DefaultSslEngineFactory} (PEM stores,
KIP-651), C{SslPrincipalMapper} (KIP-371); RFC 2253, RFC 6125.
"""

from __future__ import annotations

import re
import weakref
from typing import Any, NamedTuple, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL, crypto
from twisted.internet import ssl as tssl

__all__ = [
    "TLSConfigError",
    "PemStore",
    "load_key_store",
    "load_trust_store",
    "server_options",
    "client_options",
    "distinguished_name",
    "PrincipalMapper",
    "NoMatchingRule",
    "CLIENT_AUTH",
    "VerifyLog",
]

#: C{ssl.client.auth}'s values.
CLIENT_AUTH = ("none", "requested", "required")

_VERSIONS = {
    "TLSV1": tssl.TLSVersion.TLSv1_0,
    "TLSV1.1": tssl.TLSVersion.TLSv1_1,
    "TLSV1.2": tssl.TLSVersion.TLSv1_2,
    "TLSV1.3": tssl.TLSVersion.TLSv1_3,
}
_ORDER = ["TLSV1", "TLSV1.1", "TLSV1.2", "TLSV1.3"]

# Kafka users write IANA (Java) cipher suite names; OpenSSL wants its own.
# The TLS 1.2 suites of Mozilla's "intermediate" profile.
_IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
}


class TLSConfigError(ValueError):
    """A TLS setting that cannot be used; the message names the setting, never a password."""


class PemStore(NamedTuple):
    """A PEM key store: the certificate chain (leaf first) and the private key."""

    chain: list[crypto.X509]
    key: crypto.PKey


def _read(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TLSConfigError(f"cannot read {setting}={path}: {e.strerror}") from None


def _certificates(data: bytes, path: str, setting: str) -> list[crypto.X509]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise TLSConfigError(f"{setting}={path} holds no PEM certificate")
    return [crypto.X509.from_cryptography(c) for c in certs]


def load_key_store(certfile: str, password: str | None = None, keyfile: str | None = None,
                   setting: str = "ssl.keystore.location") -> PemStore:
    """
    Read a PEM key store: certificates (leaf first) and a private key, from one
    file (Kafka's C{ssl.keystore.location}) or two (kafka-python's C{ssl_certfile}
    and C{ssl_keyfile}).

    @param password: the key's password (C{ssl.key.password}), or C{None}.
    @raise TLSConfigError: an unreadable file, no certificate, no key, a wrong
        password, or a key that does not match the certificate.
    """
    data = _read(certfile, setting)
    chain = _certificates(data, certfile, setting)
    key_data = _read(keyfile, "ssl_keyfile") if keyfile else data
    try:
        key = serialization.load_pem_private_key(key_data, password.encode() if password else None)
    except TypeError:
        raise TLSConfigError(f"the private key in {keyfile or certfile} is encrypted: set ssl.key.password"
                             if not password else
                             f"the private key in {keyfile or certfile} is not encrypted: remove ssl.key.password")
    except ValueError:
        raise TLSConfigError(f"{keyfile or certfile} holds no PEM private key, or ssl.key.password is wrong") from None
    pkey = crypto.PKey.from_cryptography_key(key)
    leaf_key = chain[0].to_cryptography().public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    own = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if leaf_key != own:
        raise TLSConfigError(f"the private key in {keyfile or certfile} is not the first certificate's")
    return PemStore(chain, pkey)


def load_trust_store(path: str, setting: str = "ssl.truststore.location") -> list[crypto.X509]:
    """
    The CA certificates of a PEM trust store.

    @raise TLSConfigError: an unreadable file or no certificate in it.
    """
    return _certificates(_read(path, setting), path, setting)


def _versions(enabled: Sequence[str]) -> dict[str, Any]:
    chosen = []
    for name in enabled:
        key = name.strip().upper()
        if key not in _VERSIONS:
            raise TLSConfigError(f"ssl.enabled.protocols: {name!r} is not one of TLSv1.2, TLSv1.3 (or TLSv1, TLSv1.1)")
        chosen.append(_ORDER.index(key))
    if not chosen:
        raise TLSConfigError("ssl.enabled.protocols is empty")
    low, high = _VERSIONS[_ORDER[min(chosen)]], _VERSIONS[_ORDER[max(chosen)]]
    options: dict[str, Any] = {"lowerMaximumSecurityTo": high}
    if _ORDER[min(chosen)] in ("TLSV1", "TLSV1.1"):
        options["insecurelyLowerMinimumTo"] = low
    else:
        options["raiseMinimumTo"] = low
    return options


def _ciphers(suites: Sequence[str]) -> dict[str, Any]:
    names = [_IANA_TO_OPENSSL.get(s.strip(), s.strip()) for s in suites if s.strip()]
    if not names:
        return {}
    try:
        return {"acceptableCiphers": tssl.AcceptableCiphers.fromOpenSSLCipherString(":".join(names))}
    except Exception as e:  # OpenSSL.SSL.Error: no cipher matched
        raise TLSConfigError(f"ssl.cipher.suites: no usable suite in {','.join(suites)} ({e})") from None


def server_options(keystore: str, key_password: str | None = None, truststore: str | None = None,
                   client_auth: str = "none", enabled_protocols: Sequence[str] = ("TLSv1.2", "TLSv1.3"),
                   cipher_suites: Sequence[str] = ()) -> tssl.CertificateOptions:
    """
    A TLS listener's options, from Kafka's C{ssl.*} settings.

    @param keystore: C{ssl.keystore.location} (PEM: chain and key).
    @param truststore: C{ssl.truststore.location} (PEM CAs), or C{None}/C{""} for
        the platform's trust store; used to check client certificates.
    @param client_auth: C{ssl.client.auth}: C{none}, C{requested} or C{required}.
    @raise TLSConfigError: a setting that cannot be used (one line).
    """
    if not keystore:
        raise TLSConfigError("a TLS listener needs ssl.keystore.location (a PEM certificate chain and key)")
    client_auth = client_auth.strip().lower()
    if client_auth not in CLIENT_AUTH:
        raise TLSConfigError(f"ssl.client.auth: {client_auth!r} is not one of {', '.join(CLIENT_AUTH)}")
    store = load_key_store(keystore, key_password)
    options: dict[str, Any] = {**_versions(enabled_protocols), **_ciphers(cipher_suites)}
    if client_auth != "none":
        options["requireCertificate"] = client_auth == "required"
        if truststore:
            options["verify"] = True
            options["caCerts"] = load_trust_store(truststore)
        else:
            options["trustRoot"] = tssl.platformTrust()  # implies verify
    try:
        return tssl.CertificateOptions(privateKey=store.key, certificate=store.chain[0],
                                       extraCertChain=store.chain[1:], **options)
    except ValueError as e:
        if cipher_suites and "cipher" in str(e).lower():
            raise TLSConfigError(f"ssl.cipher.suites: no usable suite in {','.join(cipher_suites)}") from None
        raise TLSConfigError(f"TLS settings cannot be used: {e}") from None


def client_options(hostname: str, cafile: str | None = None, certfile: str | None = None,
                   keyfile: str | None = None, password: str | None = None, check_hostname: bool = True,
                   ciphers: str | Sequence[str] | None = None,
                   enabled_protocols: Sequence[str] = ("TLSv1.2", "TLSv1.3")) -> Any:
    """
    A client connection's TLS options (kafka-python's names).

    @param hostname: the host connected to; its certificate must name it
        (DNS name or IP address, RFC 6125, checked by service-identity) when
        C{check_hostname}.
    @param cafile: PEM CAs that sign the server's certificate (default: the platform's).
    @param certfile: PEM client certificate chain, for mutual TLS (may hold the key).
    @param ciphers: an OpenSSL cipher string, or suite names.
    @return: an C{IOpenSSLClientConnectionCreator} for L{wrapClientTLS}.
    @raise TLSConfigError: a file that cannot be used.
    """
    trust: Any = None
    if cafile:
        cas = load_trust_store(cafile, "ssl_cafile")
        trust = tssl.trustRootFromCertificates([tssl.Certificate(c) for c in cas])
    extra: dict[str, Any] = {**_versions(enabled_protocols)}
    if ciphers:
        extra.update(_ciphers(ciphers.split(":") if isinstance(ciphers, str) else ciphers))
    client_cert = None
    if certfile:
        store = load_key_store(certfile, password, keyfile, setting="ssl_certfile")
        client_cert = tssl.PrivateCertificate.fromCertificateAndKeyPair(tssl.Certificate(store.chain[0]),
                                                                         tssl.KeyPair(store.key))
        if store.chain[1:]:
            extra["extraCertChain"] = store.chain[1:]
    if check_hostname:
        return tssl.optionsForClientTLS(hostname, trustRoot=trust, clientCertificate=client_cert,
                                        extraCertificateOptions=extra)
    if client_cert is not None:
        extra.update(privateKey=client_cert.privateKey.original, certificate=client_cert.original)
    return tssl.CertificateOptions(trustRoot=trust or tssl.platformTrust(), **extra)


# The X509_V_ERR_* codes a refused peer certificate most often gets (OpenSSL's x509_vfy.h).
_VERIFY_ERRORS = {
    2: "its issuer's certificate is not in the trust store",
    7: "its signature does not verify",
    9: "it is not valid yet",
    10: "it has expired",
    18: "it is self-signed and not in the trust store",
    19: "its chain has a self-signed certificate not in the trust store",
    20: "it is not signed by a CA in the trust store",
    21: "its chain does not reach a CA in the trust store",
    23: "it has been revoked",
    26: "its key usage does not allow this purpose",
}


class VerifyLog:
    """
    Records why OpenSSL refused a peer's certificate, per TLS connection, so
    that the connection can log it (OpenSSL's own error only says
    C{certificate verify failed}).

    Installed on the context of a L{CertificateOptions} with C{verify}
    (L{install}); the verdict is OpenSSL's, unchanged.
    """

    def __init__(self) -> None:
        self._failures: "weakref.WeakKeyDictionary[SSL.Connection, str]" = weakref.WeakKeyDictionary()

    def install(self, options: tssl.CertificateOptions) -> None:
        context = options.getContext()
        context.set_verify(context.get_verify_mode(), self._verify)

    def _verify(self, connection: SSL.Connection, certificate: crypto.X509, errno: int, depth: int,
                ok: int) -> bool:
        if not ok and connection not in self._failures:
            why = _VERIFY_ERRORS.get(errno, f"X509 verify error {errno}")
            self._failures[connection] = f"certificate {distinguished_name(certificate)} (depth {depth}): {why}"
        return bool(ok)

    def why(self, connection: Any) -> str | None:
        """Why the certificate of C{connection} (an C{SSL.Connection}) was refused, or C{None}."""
        try:
            return self._failures.get(connection)
        except TypeError:
            return None


# The attribute types RFC 2253 (section 2.3) writes by keyword; any other is written
# as its dotted OID and "#" with the hex of its value's DER encoding, as Java does.
_RFC2253_KEYWORDS = {"2.5.4.3", "2.5.4.6", "2.5.4.7", "2.5.4.8", "2.5.4.10", "2.5.4.11", "2.5.4.9",
                     "0.9.2342.19200300.100.1.25", "0.9.2342.19200300.100.1.1"}


def _der_items(data: bytes) -> list[bytes]:
    """The DER encodings (tag, length, content) of the elements inside one constructed value's content."""
    items, i = [], 0
    while i < len(data):
        start = i
        i += 1
        length = data[i]
        i += 1
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(data[i:i + count], "big")
            i += count
        i += length
        items.append(data[start:i])
    return items


def _content(der: bytes) -> bytes:
    """The content of one DER value (after its tag and length)."""
    return der[2 + (der[1] & 0x7F if der[1] & 0x80 else 0):]


def distinguished_name(certificate: crypto.X509) -> str:
    """
    The subject of C{certificate} as an RFC 2253 string (C{CN=alice,O=Example}),
    as Java's C{X500Principal.getName()} writes it (Kafka's principal): the
    certificate's last RDN first, the keywords of RFC 2253 section 2.3, and other
    attribute types as C{<OID>=#<hex of the value's DER>}
    (C{1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d}).
    """
    subject = certificate.to_cryptography().subject
    # The DER of each attribute value, in the order of subject.rdns (both follow the encoding).
    values = [[_der_items(_content(pair))[1] for pair in _der_items(_content(rdn))]
              for rdn in _der_items(_content(subject.public_bytes()))]
    rdns = []
    for rdn, rdn_values in zip(subject.rdns, values):
        parts = []
        for attribute, value_der in zip(rdn, rdn_values):
            if attribute.oid.dotted_string in _RFC2253_KEYWORDS:
                parts.append(attribute.rfc4514_string())
            else:
                parts.append(f"{attribute.oid.dotted_string}=#{value_der.hex()}")
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


# Kafka's SslPrincipalMapper.RULE_PARSER: DEFAULT, or RULE:pattern/replacement/[LU].
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)[^,\n]*?)\s*(?:[,\n]\s*|$)")


class _Rule(NamedTuple):
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str


class NoMatchingRule(ValueError):
    """No rule of C{ssl.principal.mapping.rules} matched a distinguished name."""


class PrincipalMapper:
    """
    Kafka's C{ssl.principal.mapping.rules}: a comma-separated list of
    C{RULE:pattern/replacement/[LU]} and C{DEFAULT}; the first rule whose
    pattern matches the whole distinguished name gives the name (the
    replacement with C{$1}, C{$2} ... as groups, then lower (C{L}) or upper
    (C{U}) case), C{DEFAULT} gives the name unchanged.

    Source: Kafka's C{SslPrincipalMapper}, KIP-371.
    """

    def __init__(self, rules: Sequence[_Rule]) -> None:
        self.rules = list(rules)

    @classmethod
    def parse(cls, text: str) -> "PrincipalMapper":
        """
        @raise TLSConfigError: text that is not a list of rules, or a pattern
            that does not compile.
        """
        text = text.strip() or "DEFAULT"
        rules: list[_Rule] = []
        position = 0
        while position < len(text):
            match = _RULE.match(text, position)
            if match is None or match.end() == position:
                raise TLSConfigError(f"ssl.principal.mapping.rules: cannot parse {text[position:]!r}"
                                     " (rules are RULE:pattern/replacement/[LU] or DEFAULT)")
            position = match.end()
            if match.group(1):
                rules.append(_Rule(None, "", ""))
                continue
            try:
                pattern = re.compile(match.group(2).replace("\\/", "/"))
            except re.error as e:
                raise TLSConfigError(f"ssl.principal.mapping.rules: bad pattern {match.group(2)!r}: {e}") from None
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(3).replace("\\/", "/"))
            rules.append(_Rule(pattern, replacement, match.group(4)))
        return cls(rules)

    def name(self, distinguished_name: str) -> str:
        """
        The principal's name for C{distinguished_name}.

        @raise NoMatchingRule: no rule matched (Kafka fails the authentication).
        """
        for rule in self.rules:
            if rule.pattern is None:
                return distinguished_name
            match = rule.pattern.fullmatch(distinguished_name)
            if match is None:
                continue
            result = match.expand(rule.replacement)
            if rule.case == "L":
                result = result.lower()
            elif rule.case == "U":
                result = result.upper()
            return result
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule matches {distinguished_name!r}")
