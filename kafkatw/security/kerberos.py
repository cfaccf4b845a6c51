"""
SASL/GSSAPI (Kerberos V5, RFC 4752) as Kafka serves it, with Kafka's mapping
of Kerberos principals to short names (C{sasl.kerberos.principal.to.local.rules}).

The exchange (Kafka's broker uses the JDK's C{GssKrb5Server}; RFC 4752,
section 3.1)::

    client                                     broker
    GSS-API token (AP-REQ)          -->
                                    <--        GSS-API token (AP-REP), when the client asked for
                                               mutual authentication; then the client answers
    (empty)                         -->        an empty token
                                    <--        wrap([0x01, 0, 0, 0]): "no security layer" offered,
                                               no maximum message size
    wrap([0x01, size(3 bytes)] + authzid) -->  unwrapped: the layer chosen must be 0x01
                                    <--        (empty): authenticated

Only C{auth} is offered (no integrity or confidentiality layer: Kafka's
C{SaslServerAuthenticator} never wraps the frames that follow).  The client's
authorization identity is ignored, as Kafka's C{SaslServerCallbackHandler}
authorizes the authenticated principal itself; the connection's principal is
C{User:<short name>}, the short name coming from the rules.

Rules (Kafka's C{KerberosShortNamer} and C{KerberosRule})::

    DEFAULT
    RULE:[n:format](regex)s/pattern/replacement/[g][/L|/U]

C{DEFAULT} maps C{name[/host]@REALM} to C{name} when C{REALM} is the default
realm of C{krb5.conf}.  C{RULE:[n:format]} applies to principals of C{n}
components; C{format} builds a string from C{$0} (the realm), C{$1}, C{$2}
(the components); it must match C{regex} (whole), then the sed-like
substitution applies (C{g}: every match), C{/L} / C{/U} lower / upper the
result.  The first rule giving a name wins; a name holding C{/} or C{@} is an
error; no rule giving a name refuses the client.

The GSS-API calls are python-gssapi's (C{pip install kafkatw[kerberos]},
MIT Kerberos underneath): the broker's credentials come from the keytab of
its JAAS C{Krb5LoginModule} entry (C{keyTab}, C{principal}), a client's from
a keytab or from the ticket cache (C{KRB5CCNAME}).  Exceptions never carry a
key or a ticket.

Source: RFC 4752; RFC 2743/4121 (GSS-API, its Kerberos mechanism); Kafka's
C{org.apache.kafka.common.security.kerberos} package (C{KerberosName},
C{KerberosShortNamer}, C{KerberosRule}) and C{SaslServerAuthenticator};
Kafka documentation, "Authentication using SASL/Kerberos".
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .sasl import SaslException

__all__ = [
    "MECHANISM",
    "KRB5_LOGIN_MODULE",
    "QOP_AUTH",
    "KerberosName",
    "KerberosRule",
    "KerberosShortNamer",
    "NoMatchingRule",
    "parse_rules",
    "default_realm",
    "GssapiServer",
    "GssapiClientExchange",
    "acceptor_credentials",
    "initiator_credentials",
    "keytab_login",
]

MECHANISM = "GSSAPI"
#: The JAAS login module of Kafka's GSSAPI entries.
KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
#: RFC 4752's security layer bit of "no security layer" (SASL's C{auth} quality of protection).
QOP_AUTH = 0x01

_NAME = re.compile(r"([^/@]*)(/([^/@]*))?@([^/@]*)")
_RULE = re.compile(r"((DEFAULT)|((RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?(s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?)))")
_PARAMETER = re.compile(r"([^$]*)(\$(\d*))?")
_NON_SIMPLE = re.compile(r"[/@]")


class NoMatchingRule(SaslException):
    """No rule of C{sasl.kerberos.principal.to.local.rules} gives the principal a short name."""


@dataclass(frozen=True)
class KerberosName:
    """
    A Kerberos principal C{service[/host][@REALM]} (Kafka's C{KerberosName}).

    @ivar service_name: the first component (a user's name, or a service's).
    @ivar host_name: the second component, or C{None}.
    @ivar realm: the realm, or C{None} for a bare name.
    """

    service_name: str
    host_name: str | None = None
    realm: str | None = None

    @classmethod
    def parse(cls, principal: str) -> "KerberosName":
        """
        @raise ValueError: a name holding C{@} that is not C{a[/b]@REALM}.
        """
        match = _NAME.fullmatch(principal)
        if match is None:
            if "@" in principal:
                raise ValueError(f"Malformed Kerberos name: {principal}")
            return cls(principal)
        return cls(match.group(1), match.group(3), match.group(4))

    def __str__(self) -> str:
        text = self.service_name
        if self.host_name is not None:
            text += "/" + self.host_name
        if self.realm is not None:
            text += "@" + self.realm
        return text


def _java_replacement(replacement: str) -> Any:
    """Java's C{Matcher.replaceAll} replacement (C{$n} groups, C{\\} escapes) as a Python C{re.sub} function."""
    def expand(match: re.Match) -> str:
        out, i = [], 0
        while i < len(replacement):
            c = replacement[i]
            if c == "\\" and i + 1 < len(replacement):
                out.append(replacement[i + 1])
                i += 2
            elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
                j = i + 1
                while j < len(replacement) and replacement[j].isdigit():
                    j += 1
                out.append(match.group(int(replacement[i + 1:j])) or "")
                i = j
            else:
                out.append(c)
                i += 1
        return "".join(out)
    return expand


@dataclass(frozen=True)
class KerberosRule:
    """
    One rule of C{sasl.kerberos.principal.to.local.rules} (Kafka's C{KerberosRule}).
    """

    default_realm: str
    text: str = "DEFAULT"
    components: int = 0
    format: str = ""
    match: str | None = None
    from_pattern: str | None = None
    to_pattern: str = ""
    repeat: bool = False
    lower: bool = False
    upper: bool = False

    @property
    def is_default(self) -> bool:
        return self.text == "DEFAULT"

    def apply(self, params: Sequence[str]) -> str | None:
        """
        @param params: C{[realm, first component, second component?]}.
        @return: the short name, or C{None} when this rule does not apply.
        @raise NoMatchingRule: the result still holds C{/} or C{@}.
        @raise ValueError: C{$n} outside the principal's components.
        """
        result = None
        if self.is_default:
            if self.default_realm == params[0]:
                result = params[1]
        elif len(params) - 1 == self.components:
            base = self._replace_parameters(params)
            if self.match is None or re.fullmatch(self.match, base):
                if self.from_pattern is None:
                    result = base
                else:
                    result = re.sub(self.from_pattern, _java_replacement(self.to_pattern), base,
                                    count=0 if self.repeat else 1)
        if result is not None and _NON_SIMPLE.search(result):
            raise NoMatchingRule(f"Non-simple name {result} after auto_to_local rule {self.text}")
        if result is not None and self.lower:
            result = result.lower()
        elif result is not None and self.upper:
            result = result.upper()
        return result

    def _replace_parameters(self, params: Sequence[str]) -> str:
        out, start = [], 0
        while start < len(self.format):
            match = _PARAMETER.match(self.format, start)
            assert match is not None
            out.append(match.group(1))
            if match.group(3) is not None:
                if not match.group(3):
                    raise ValueError(f"bad format in username mapping in {self.format}")
                number = int(match.group(3))
                if number >= len(params):
                    raise ValueError(f"index {number} from {self.format} is outside of the valid range 0 to "
                                     f"{len(params) - 1}")
                out.append(params[number])
            if match.end() == start:
                break
            start = match.end()
        return "".join(out)


def parse_rules(default_realm: str, rules: Iterable[str]) -> list[KerberosRule]:
    """
    Kafka's C{KerberosShortNamer.parseRules}.

    @param rules: the rules, as C{sasl.kerberos.principal.to.local.rules} lists them.
    @raise ValueError: a rule that is not C{DEFAULT} or C{RULE:...}, or a
        regular expression Python cannot compile.
    """
    parsed = []
    for rule in rules:
        rule = rule.strip()
        match = _RULE.match(rule)
        if match is None or not rule:
            raise ValueError(f"Invalid rule: {rule}")
        if match.end() != len(rule):
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end():]}`")
        if match.group(2) is not None:
            parsed.append(KerberosRule(default_realm))
            continue
        for pattern in (match.group(8), match.group(10)):
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as e:
                    raise ValueError(f"Invalid rule: `{rule}`: {e}") from None
        parsed.append(KerberosRule(default_realm, rule, int(match.group(5) or 0), match.group(6), match.group(8),
                                   match.group(10), match.group(11) or "", match.group(12) == "g",
                                   match.group(13) == "L", match.group(13) == "U"))
    return parsed


class KerberosShortNamer:
    """
    Principal to short name (Kafka's C{KerberosShortNamer}).

    @param default_realm: the realm C{DEFAULT} maps (L{default_realm}).
    @param rules: C{sasl.kerberos.principal.to.local.rules}.
    @raise ValueError: a rule that does not parse.
    """

    def __init__(self, default_realm: str, rules: Iterable[str] = ("DEFAULT",)) -> None:
        self.default_realm = default_realm
        self.rules = parse_rules(default_realm, rules)

    def short_name(self, principal: str | KerberosName) -> str:
        """
        @raise NoMatchingRule: no rule gives a name (or one gives a name with C{/} or C{@}).
        @raise ValueError: a malformed principal.
        """
        name = principal if isinstance(principal, KerberosName) else KerberosName.parse(principal)
        if name.host_name is None:
            if name.realm is None:
                return name.service_name
            params = [name.realm, name.service_name]
        else:
            params = [name.realm or "", name.service_name, name.host_name]
        for rule in self.rules:
            result = rule.apply(params)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {name}, rules {[r.text for r in self.rules]}")


def default_realm() -> str | None:
    """
    The default realm of the Kerberos configuration (C{default_realm} of
    C{[libdefaults]}; C{KRB5_CONFIG}, else C{/etc/krb5.conf}), as MIT
    Kerberos reads it: the realm it gives a principal named without one
    (C{gss_canonicalize_name}); C{None} when none is set or python-gssapi is
    missing.
    """
    try:
        gssapi = _gssapi()
    except ImportError:
        return None
    name = gssapi.Name("kafkatw", name_type=gssapi.NameType.kerberos_principal)
    try:
        canonical = name.canonicalize(gssapi.MechType.kerberos)
    except gssapi.exceptions.GSSError:  # no default realm configured
        return None
    return KerberosName.parse(str(canonical)).realm or None


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError as e:  # also OSError-like failures to load libgssapi_krb5
        raise ImportError("SASL/GSSAPI needs python-gssapi and MIT Kerberos' libraries: "
                          "pip install kafkatw[kerberos] (Debian: apt-get install libkrb5-dev first)") from e
    return gssapi


def _principal_name(principal: str) -> Any:
    gssapi = _gssapi()
    return gssapi.Name(principal, name_type=gssapi.NameType.kerberos_principal)


def acceptor_credentials(principal: str | None, keytab: str | None) -> Any:
    """
    The broker's Kerberos credentials: C{principal}'s keys in C{keytab}
    (a JAAS C{Krb5LoginModule} entry's C{principal} and C{keyTab}).

    @param principal: C{kafka/host@REALM}; C{None} accepts for any principal
        of the keytab.
    @param keytab: a keytab file; C{None}: the default (C{KRB5_KTNAME}).
    @return: C{gssapi.Credentials} for accepting.
    @raise ValueError: the keytab cannot be read or lacks the principal (the
        GSS-API's message).
    """
    gssapi = _gssapi()
    name = _principal_name(principal) if principal else None
    try:
        if keytab:
            return gssapi.Credentials(name=name, usage="accept", store={"keytab": keytab})
        return gssapi.Credentials(name=name, usage="accept")
    except gssapi.exceptions.GSSError as e:
        raise ValueError(f"cannot read the Kerberos keys of {principal or 'the default principal'} from "
                         f"{keytab or 'the default keytab'}: {e.gen_message()}") from None


def initiator_credentials(principal: str | None = None, keytab: str | None = None,
                          ccache: str | None = None) -> Any:
    """
    A client's Kerberos credentials: a ticket-granting ticket for
    C{principal} obtained with the keys of C{keytab} (as Kafka's
    C{Krb5LoginModule} with C{useKeyTab=true}), or, without a keytab, the
    tickets of the cache (C{KRB5CCNAME}, or C{ccache}).

    @raise ValueError: no ticket could be had (the GSS-API's message: an
        unknown principal, a keytab with stale keys, an unreachable KDC).
    """
    gssapi = _gssapi()
    name = _principal_name(principal) if principal else None
    store: dict[str, str] = {}
    if keytab:
        store["client_keytab"] = keytab
        # one memory cache per login, so that its ticket-granting ticket serves every connection
        login = hashlib.sha256(f"{principal}\0{keytab}".encode()).hexdigest()[:16]
        store["ccache"] = ccache or f"MEMORY:kafkatw-{login}"
    elif ccache:
        store["ccache"] = ccache
    try:
        credentials = gssapi.Credentials(name=name, usage="initiate", store=store or None)
        credentials.lifetime  # noqa: B018 -- inquiring makes the library get the ticket now
        return credentials
    except gssapi.exceptions.GSSError as e:
        raise ValueError(f"no Kerberos ticket for {principal or 'the default principal'}: {e.gen_message()}") \
            from None


def keytab_login(jaas_options: Mapping[str, str]) -> tuple[str | None, str | None]:
    """
    C{(principal, keytab)} of a JAAS C{Krb5LoginModule} entry's options:
    C{keyTab} when C{useKeyTab=true}, and C{principal}.
    """
    use_keytab = jaas_options.get("useKeyTab", "false").lower() == "true"
    return jaas_options.get("principal") or None, (jaas_options.get("keyTab") or None) if use_keytab else None


class GssapiServer:
    """
    The broker's side of one GSSAPI exchange (RFC 4752; the JDK's
    C{GssKrb5Server} as Kafka runs it).

    @param credentials: the broker's acceptor credentials (L{acceptor_credentials}).
    @param short_namer: a L{KerberosShortNamer}.
    @ivar principal: the client's Kerberos principal (C{alice@REALM}) once
        its security context is established.
    @ivar username: the short name, once L{complete}.
    """

    def __init__(self, credentials: Any, short_namer: KerberosShortNamer) -> None:
        self._credentials = credentials
        self._short_namer = short_namer
        self._context: Any = None
        self._stage = "context"
        self.principal: str | None = None
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes | None:
        """
        @return: the next token for the client; C{None} once authenticated
            (Kafka sends nothing then on a raw v0 exchange, an empty
            SaslAuthenticate answer on v1).
        @raise SaslException: a token the GSS-API refuses (a ticket for a
            service whose keys the broker lacks, a replay, garbage), a
            non-empty answer where RFC 4752 wants an empty one, a security
            layer not offered.
        @raise NoMatchingRule: no rule gives the principal a short name.
        """
        gssapi = _gssapi()
        try:
            if self._stage == "context":
                if self._context is None:
                    self._context = gssapi.SecurityContext(creds=self._credentials, usage="accept")
                out = self._context.step(bytes(token))
                if not self._context.complete:
                    return out or b""
                self.principal = str(self._context.initiator_name)
                if out:  # mutual authentication: the AP-REP, then the client's empty token
                    self._stage = "empty"
                    return out
                return self._offer()
            if self._stage == "empty":
                if token:
                    raise SaslException("GSSAPI: expected an empty token after the security context")
                return self._offer()
            if self._stage == "selection":
                self._stage = "done"
                message = self._context.unwrap(bytes(token)).message
                if len(message) < 4:
                    raise SaslException("GSSAPI: the client's security layer message is shorter than 4 bytes")
                if message[0] != QOP_AUTH:
                    raise SaslException(f"GSSAPI: the client chose security layer {message[0]:#x}; only "
                                        f"{QOP_AUTH:#x} (no security layer) is offered")
                assert self.principal is not None
                self.username = self._short_namer.short_name(self.principal)
                self.complete = True
                return None
        except gssapi.exceptions.GSSError as e:
            self._stage = "done"
            raise SaslException(f"GSSAPI: {e.gen_message()}") from None
        raise SaslException(f"GSSAPI: unexpected token in stage {self._stage}")

    def _offer(self) -> bytes:
        """RFC 4752: the security layers offered (C{auth} only) and a maximum size of 0, wrapped."""
        self._stage = "selection"
        return self._context.wrap(struct.pack(">B", QOP_AUTH) + b"\x00\x00\x00", False).message


class GssapiClientExchange:
    """
    A client's side of the GSSAPI exchange (RFC 4752), as Kafka's Java
    client makes it: mutual authentication, then C{auth} (no security
    layer) chosen without an authorization identity.

    @param service_name: C{sasl.kerberos.service.name} (C{kafka}).
    @param host: the broker's host as connected (the service principal is
        C{service_name/host}, canonicalised by the Kerberos library's rules).
    @param credentials: L{initiator_credentials}, or C{None} for the
        default ticket cache.
    """

    def __init__(self, service_name: str, host: str, credentials: Any = None) -> None:
        gssapi = _gssapi()
        self._gssapi = gssapi
        target = gssapi.Name(f"{service_name}@{host}", name_type=gssapi.NameType.hostbased_service)
        flags = gssapi.RequirementFlag.mutual_authentication
        try:
            self._context = gssapi.SecurityContext(name=target, creds=credentials, usage="initiate", flags=flags)
        except gssapi.exceptions.GSSError as e:
            raise SaslException(f"GSSAPI: {e.gen_message()}") from None
        self._layer_chosen = False
        self.complete = False

    def first(self) -> bytes:
        """The first token (the AP-REQ).  @raise SaslException: no ticket for the service."""
        return self.step(b"")

    def step(self, challenge: bytes) -> bytes:
        """
        The answer to the broker's C{challenge}.

        @raise SaslException: a token the GSS-API refuses; a broker offering
            no C{auth} layer.
        """
        try:
            if not self._context.complete:
                return self._context.step(bytes(challenge) or None) or b""
            if not self._layer_chosen:
                offer = self._context.unwrap(bytes(challenge)).message
                if len(offer) < 4 or not offer[0] & QOP_AUTH:
                    raise SaslException("GSSAPI: the broker does not offer the 'auth' security layer")
                self._layer_chosen = True
                self.complete = True
                return self._context.wrap(struct.pack(">B", QOP_AUTH) + b"\x00\x00\x00", False).message
        except self._gssapi.exceptions.GSSError as e:
            raise SaslException(f"GSSAPI: {e.gen_message()}") from None
        raise SaslException("GSSAPI: unexpected message from the broker after the exchange")
