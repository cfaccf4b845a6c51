"""
The broker's SASL authenticator: one per connection on a C{SASL_PLAINTEXT} or
C{SASL_SSL} listener, after Kafka's C{SaslServerAuthenticator}.

Until a client has authenticated, its frames come here rather than to
L{kafkatw.broker.apis.KafkaApis}.  The exchange is a state machine, all of it
in L{TRANSITIONS}::

    HANDSHAKE_OR_VERSIONS --ApiVersions--> HANDSHAKE --SaslHandshake v1--> AUTHENTICATE
                          --SaslHandshake v1----------------------------> AUTHENTICATE
                          --SaslHandshake v0----------------------------> AUTHENTICATE_RAW
    AUTHENTICATE     --SaslAuthenticate--> EVALUATING     --challenge--> AUTHENTICATE
    AUTHENTICATE_RAW --raw token---------> EVALUATING_RAW --challenge--> AUTHENTICATE_RAW
    EVALUATING(_RAW) --success--> COMPLETE;  --failure--> FAILED

An ApiVersions of a version not served is answered (C{UNSUPPORTED_VERSION},
KIP-511) and leaves the state as it was, so that a client can retry with an
older one.  SaslHandshake v1 is followed by SaslAuthenticate requests carrying
the tokens (KIP-152); v0 by bare size-prefixed tokens.  Anything else -- another
API, a frame that is not a request, a token while a SCRAM credential is being
read -- closes the connection with a log line and no answer, as Kafka does.

  - An unknown mechanism: SaslHandshake answers C{UNSUPPORTED_SASL_MECHANISM}
    with the enabled list, then the connection is closed (both after the
    failed-authentication delay, as Kafka's C{buildResponseOnAuthenticateFailure}).
  - Wrong credentials: SaslAuthenticate answers C{SASL_AUTHENTICATION_FAILED}
    with Kafka's message after C{connection.failed.authentication.delay.ms},
    then the connection is closed.  A malformed exchange (PLAIN's fields, a
    SCRAM nonce, a message out of turn) gets Kafka's generic message.
  - Frames are bounded by C{sasl.server.max.receive.size} until authenticated
    (L{max_receive_size}); a longer one closes the connection.
  - OAUTHBEARER (L{kafkatw.security.oauthbearer}): a token that does not
    validate is answered with Kafka's JSON error as a challenge
    (C{{"status":"invalid_token"}}); the client's C{\x01} then gets
    C{SASL_AUTHENTICATION_FAILED} with that JSON, one log line with the
    reason, and the connection is closed.
  - GSSAPI (L{kafkatw.security.kerberos}): a GSS-API token the broker's
    keytab cannot accept, or a principal no
    C{sasl.kerberos.principal.to.local.rules} rule names, is answered
    C{SASL_AUTHENTICATION_FAILED} with Kafka's generic message.  On success
    nothing is sent on a raw (v0) exchange, as Kafka (RFC 4752's last message
    is the client's).
  - Success: the connection's principal becomes C{User:<name>} (for GSSAPI,
    the principal's short name).  No mechanism
    re-authenticates (C{connections.max.reauth.ms=0}, the session lifetime
    answered is 0): a connection authenticated with an OAUTHBEARER token stays
    so after the token's C{exp}, as Kafka's with re-authentication off.

No log line, exception message or response holds a password or a token.

Source: Kafka's C{SaslServerAuthenticator.java}; KIP-43 (SaslHandshake),
KIP-152 (SaslAuthenticate), KIP-306 (the failed-authentication delay), KIP-255
(OAUTHBEARER), KIP-368 (re-authentication); RFC 4752 (GSSAPI).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode
from ..protocol.messages import API_NAMES, MalformedRequest, decode_request, encode_response, parse_request_header
from ..security.jaas import parse_jaas_config
from ..security.oauthbearer import JwksValidator, OAuthBearerServer, UnsecuredValidator, unsecured_login_provider
from ..zookeeper.bridge import ZooKeeperError
from ..security.sasl import (
    SCRAM_MECHANISMS,
    PlainServer,
    SaslAuthenticationFailed,
    SaslException,
    ScramServer,
)

__all__ = ["SaslServerAuthenticator", "SaslServerSettings", "TRANSITIONS", "State", "Event",
           "listener_sasl_settings", "sasl_client_settings", "gssapi_server_factory"]

_log = Logger()

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class State:
    HANDSHAKE_OR_VERSIONS = "HANDSHAKE_OR_VERSIONS"
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    AUTHENTICATE_RAW = "AUTHENTICATE_RAW"
    EVALUATING = "EVALUATING"
    EVALUATING_RAW = "EVALUATING_RAW"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class Event:
    API_VERSIONS = "ApiVersions"
    API_VERSIONS_UNSUPPORTED = "ApiVersions (unsupported version)"
    HANDSHAKE_V0 = "SaslHandshake v0"
    HANDSHAKE_V1 = "SaslHandshake v1"
    UNSUPPORTED_MECHANISM = "SaslHandshake (unsupported mechanism)"
    AUTHENTICATE = "SaslAuthenticate"
    RAW_TOKEN = "raw token"
    CHALLENGE = "challenge"
    SUCCESS = "success"
    FAILURE = "failure"


#: state -> {event: next state}.  An event a state does not list closes the connection.
TRANSITIONS: dict[str, dict[str, str]] = {
    State.HANDSHAKE_OR_VERSIONS: {
        Event.API_VERSIONS: State.HANDSHAKE,
        Event.API_VERSIONS_UNSUPPORTED: State.HANDSHAKE_OR_VERSIONS,
        Event.HANDSHAKE_V1: State.AUTHENTICATE,
        Event.HANDSHAKE_V0: State.AUTHENTICATE_RAW,
        Event.UNSUPPORTED_MECHANISM: State.FAILED,
    },
    State.HANDSHAKE: {
        Event.HANDSHAKE_V1: State.AUTHENTICATE,
        Event.HANDSHAKE_V0: State.AUTHENTICATE_RAW,
        Event.UNSUPPORTED_MECHANISM: State.FAILED,
    },
    State.AUTHENTICATE: {Event.AUTHENTICATE: State.EVALUATING},
    State.AUTHENTICATE_RAW: {Event.RAW_TOKEN: State.EVALUATING_RAW},
    State.EVALUATING: {Event.CHALLENGE: State.AUTHENTICATE, Event.SUCCESS: State.COMPLETE,
                       Event.FAILURE: State.FAILED},
    State.EVALUATING_RAW: {Event.CHALLENGE: State.AUTHENTICATE_RAW, Event.SUCCESS: State.COMPLETE,
                           Event.FAILURE: State.FAILED},
    State.COMPLETE: {},
    State.FAILED: {},
}


class IllegalSaslState(Exception):
    """A frame the current state does not accept (the connection is closed)."""


class SaslServerSettings:
    """
    One listener's SASL settings.

    @param mechanisms: the enabled mechanisms (C{sasl.enabled.mechanisms}).
    @param plain_users: PLAIN's user name -> password (the listener's JAAS
        C{user_<name>} options).
    @param scram_credential: C{(mechanism, user)} -> a Deferred firing with the
        user's L{kafkatw.security.sasl.ScramCredential} or C{None}.
    @param failed_delay_ms: C{connection.failed.authentication.delay.ms}.
    @param max_receive_size: C{sasl.server.max.receive.size} (bytes).
    @param oauthbearer_validator: OAUTHBEARER's token validator
        (L{kafkatw.security.oauthbearer.UnsecuredValidator} or C{JwksValidator});
        default: an unsecured one with Kafka's default options.
    @param gssapi_server: makes GSSAPI's L{kafkatw.security.kerberos.GssapiServer}
        for one exchange (L{gssapi_server_factory}); C{None} when GSSAPI is off.
    """

    def __init__(self, mechanisms: list[str], plain_users: Mapping[str, str] | None = None,
                 scram_credential: Callable[[str, str], Any] | None = None,
                 failed_delay_ms: int = 100, max_receive_size: int = 524288,
                 oauthbearer_validator: Any = None, gssapi_server: Callable[[], Any] | None = None) -> None:
        self.mechanisms = list(mechanisms)
        self.gssapi_server = gssapi_server
        self.oauthbearer_validator = oauthbearer_validator or UnsecuredValidator()
        self.plain_users = dict(plain_users or {})
        self.scram_credential = scram_credential or (lambda mechanism, user: defer.succeed(None))
        self.failed_delay_ms = failed_delay_ms
        self.max_receive_size = max_receive_size

    def __repr__(self) -> str:
        return f"SaslServerSettings(mechanisms={self.mechanisms!r}, plain_users={sorted(self.plain_users)!r})"

    def mechanism_server(self, mechanism: str) -> Any:
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        if mechanism in SCRAM_MECHANISMS:
            return ScramServer(mechanism, lambda user: self.scram_credential(mechanism, user))
        if mechanism == "OAUTHBEARER":
            return OAuthBearerServer(self.oauthbearer_validator)
        if mechanism == "GSSAPI" and self.gssapi_server is not None:
            return self.gssapi_server()
        raise ValueError(mechanism)


def listener_sasl_settings(config: Any, listener_name: str, registry: Any, reactor: Any = None) -> SaslServerSettings:
    """
    A SASL listener's settings from the broker's configuration: its
    C{sasl.enabled.mechanisms} (listener prefix first), PLAIN's users from
    C{listener.name.<listener>.plain.sasl.jaas.config}, and SCRAM credentials
    read from ZooKeeper (C{/config/users/<user>}) at each authentication, so
    that a credential altered by any broker or by C{kafkatw configs
    --zookeeper} applies to the next connection.

    @param config: a L{kafkatw.config.BrokerConfig}.
    @param registry: a L{kafkatw.zookeeper.registry.Registry}.
    @param reactor: the reactor whose thread pool fetches OAUTHBEARER's JWKS.
    @raise ValueError: GSSAPI enabled without a service name or keys (L{gssapi_server_factory}).
    """
    mechanisms = config.listener_value(listener_name, "sasl.enabled.mechanisms")
    plain_users: dict[str, str] = {}
    jaas = config.listener_value(listener_name, "sasl.jaas.config", "PLAIN", inherit=False)
    if jaas:
        plain_users = parse_jaas_config(jaas).users()
    if "PLAIN" in mechanisms and not plain_users:
        _log.warn("listener {listener} enables PLAIN but listener.name.{lower}.plain.sasl.jaas.config names no "
                  "user_<name> entries: PLAIN lets nobody in", listener=listener_name, lower=listener_name.lower())

    def scram_credential(mechanism: str, user: str) -> Any:
        return registry.get_user_scram_credentials(user).addCallback(lambda found: found.get(mechanism))

    return SaslServerSettings(mechanisms, plain_users, scram_credential,
                              config["connection.failed.authentication.delay.ms"],
                              config["sasl.server.max.receive.size"],
                              oauthbearer_validator(config, listener_name, reactor)
                              if "OAUTHBEARER" in mechanisms else None,
                              gssapi_server_factory(config, listener_name) if "GSSAPI" in mechanisms else None)


def gssapi_server_factory(config: Any, listener_name: str) -> Callable[[], Any]:
    """
    A GSSAPI listener's exchanges, as Kafka's broker logs in: the keys of
    C{principal} in C{keyTab} of the C{Krb5LoginModule} entry
    C{listener.name.<listener>.gssapi.sasl.jaas.config} (else
    C{sasl.jaas.config}), read once, at start; the service name of its
    C{serviceName} option, else C{sasl.kerberos.service.name}; short names by
    C{sasl.kerberos.principal.to.local.rules}, C{DEFAULT} mapping principals
    of C{krb5.conf}'s default realm (else of the broker principal's realm).

    @return: a callable making one L{kafkatw.security.kerberos.GssapiServer}.
    @raise ValueError: no service name, a JAAS entry that is not
        C{Krb5LoginModule}, a keytab without the principal's keys.
    @raise ImportError: python-gssapi is not installed (C{pip install kafkatw[kerberos]}).
    """
    from ..security.kerberos import (KRB5_LOGIN_MODULE, GssapiServer, KerberosName, KerberosShortNamer,
                                     acceptor_credentials, default_realm, keytab_login)

    jaas = config.listener_value(listener_name, "sasl.jaas.config", "GSSAPI")
    entry = parse_jaas_config(jaas) if jaas else None
    if entry is not None and entry.login_module != KRB5_LOGIN_MODULE:
        raise ValueError(f"listener {listener_name}: GSSAPI's JAAS entry must use {KRB5_LOGIN_MODULE}, "
                         f"not {entry.login_module}")
    options = entry.options if entry else {}
    service = options.get("serviceName") or config.listener_value(listener_name, "sasl.kerberos.service.name",
                                                                   "GSSAPI")
    if not service:
        raise ValueError(f"listener {listener_name} enables GSSAPI: no serviceName defined in either JAAS or "
                         "Kafka configuration (sasl.kerberos.service.name)")
    principal, keytab = keytab_login(options)
    if principal and KerberosName.parse(principal).service_name != service:
        _log.warn("listener {listener}: the broker's Kerberos principal {principal} is not of the service "
                  "{service} (sasl.kerberos.service.name) that clients ask tickets for",
                  listener=listener_name, principal=principal, service=service)
    credentials = acceptor_credentials(principal, keytab)
    realm = default_realm() or (KerberosName.parse(principal).realm if principal else None) or ""
    namer = KerberosShortNamer(realm, config.listener_value(listener_name, "sasl.kerberos.principal.to.local.rules",
                                                            "GSSAPI"))
    return lambda: GssapiServer(credentials, namer)


def oauthbearer_validator(config: Any, listener_name: str, reactor: Any = None) -> Any:
    """
    A listener's OAUTHBEARER validator: the one Kafka's
    C{listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class}
    names; without it, a L{kafkatw.security.oauthbearer.JwksValidator} when
    C{sasl.oauthbearer.jwks.endpoint.url} is set (KIP-768; Kafka would need
    the class named too), else Kafka's default, the unsecured validator with
    the C{unsecuredValidator*} options of
    C{listener.name.<listener>.oauthbearer.sasl.jaas.config}.

    @raise ValueError: a JAAS option that is not a number where one is needed;
        the JWKS validator named without C{sasl.oauthbearer.jwks.endpoint.url}.
    @raise ImportError: a JWKS URL without PyJWT installed (C{pip install kafkatw[oauth]}).
    """
    from ..config import OAUTHBEARER_CALLBACK_HANDLERS

    url = config["sasl.oauthbearer.jwks.endpoint.url"]
    handler = config.listener_value(listener_name, "sasl.server.callback.handler.class", "OAUTHBEARER", inherit=False)
    kind = OAUTHBEARER_CALLBACK_HANDLERS.get(handler or "", "jwks" if url else "unsecured")
    if kind == "jwks" and not url:
        raise ValueError(f"listener {listener_name}: {handler} needs sasl.oauthbearer.jwks.endpoint.url")
    if kind == "jwks":
        return JwksValidator(url, config["sasl.oauthbearer.expected.audience"],
                             config["sasl.oauthbearer.expected.issuer"], config["sasl.oauthbearer.sub.claim.name"],
                             config["sasl.oauthbearer.scope.claim.name"], config["sasl.oauthbearer.clock.skew.seconds"],
                             config["sasl.oauthbearer.jwks.endpoint.refresh.ms"],
                             config["sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"], reactor=reactor,
                             retry_backoff_max_ms=config["sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"])
    jaas = config.listener_value(listener_name, "sasl.jaas.config", "OAUTHBEARER", inherit=False)
    _log.warn("listener {listener} enables OAUTHBEARER with unsecured tokens (no sasl.oauthbearer.jwks.endpoint.url):"
              " any client may claim any principal; for development only", listener=listener_name)
    return UnsecuredValidator(parse_jaas_config(jaas).options if jaas else {})


def sasl_client_settings(config: Any, listener_name: str) -> dict[str, Any]:
    """
    The SASL part of the broker's own connections to other brokers through
    the SASL listener C{listener_name}, as L{SecurityConfig} fields: the
    mechanism C{sasl.mechanism.inter.broker.protocol} with the C{username}
    and C{password} of C{listener.name.<listener>.<mechanism>.sasl.jaas.config},
    else of C{sasl.jaas.config} (as Kafka's broker logs in with its
    listener's JAAS entry).
    """
    mechanism = config["sasl.mechanism.inter.broker.protocol"]
    jaas = config.listener_value(listener_name, "sasl.jaas.config", mechanism)
    entry = parse_jaas_config(jaas) if jaas else None
    if mechanism == "GSSAPI":  # Kafka's Krb5LoginModule: the broker's own principal and keytab
        from ..security.kerberos import keytab_login

        principal, keytab = keytab_login(entry.options) if entry else (None, None)
        service = (entry.options.get("serviceName") if entry else None) or \
            config.listener_value(listener_name, "sasl.kerberos.service.name", mechanism) or "kafka"
        return {"sasl_mechanism": mechanism, "sasl_kerberos_principal": principal, "sasl_kerberos_keytab": keytab,
                "sasl_kerberos_service_name": service}
    if mechanism == "OAUTHBEARER":  # Kafka's OAuthBearerLoginModule with unsecuredLogin* options
        return {"sasl_mechanism": mechanism,
                "sasl_oauth_token_provider": unsecured_login_provider(entry.options) if entry else None}
    return {"sasl_mechanism": mechanism, "sasl_plain_username": entry.username if entry else None,
            "sasl_plain_password": entry.password if entry else None}


class SaslServerAuthenticator:
    """
    The SASL exchange of one connection.

    @param connection: the L{kafkatw.broker.network.KafkaConnection}; used
        through C{write_frame(bytes)}, C{close(reason)}, C{authenticated(principal)},
        C{peer} and C{context}.
    @param apis: answers ApiVersions (L{kafkatw.broker.apis.KafkaApis.handle}).
    @param settings: the listener's L{SaslServerSettings}.
    @param reactor: an C{IReactorTime} for the failed-authentication delay.
    @ivar state: the current L{State}.
    """

    def __init__(self, connection: Any, apis: Any, settings: SaslServerSettings, reactor: Any) -> None:
        self.connection = connection
        self.apis = apis
        self.settings = settings
        self.reactor = reactor
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self._server: Any = None
        self._delayed: Any = None

    @property
    def complete(self) -> bool:
        return self.state == State.COMPLETE

    @property
    def max_receive_size(self) -> int:
        return self.settings.max_receive_size

    def _move(self, event: str) -> None:
        allowed = TRANSITIONS[self.state]
        if event not in allowed:
            raise IllegalSaslState(f"unexpected {event} in SASL state {self.state}")
        self.state = allowed[event]

    def frame_received(self, frame: Any) -> None:
        """Handle one frame received before authentication completed."""
        try:
            if self.state in (State.AUTHENTICATE_RAW, State.EVALUATING_RAW):
                self._move(Event.RAW_TOKEN)
                self._evaluate(bytes(frame), None)
                return
            if self.state == State.FAILED:
                return  # the failure is being answered; the connection closes after it
            header = parse_request_header(frame)
            if header.api_key == API_VERSIONS:
                self._api_versions(header, frame)
            elif header.api_key == SASL_HANDSHAKE:
                self._handshake(header, frame)
            elif header.api_key == SASL_AUTHENTICATE:
                self._move(Event.AUTHENTICATE)
                request = decode_request(frame, self._served(header))
                self._evaluate(request.auth_bytes, header)
            else:
                raise IllegalSaslState(
                    f"unexpected {API_NAMES.get(header.api_key, header.api_key)} request before authentication"
                    f" (SASL state {self.state})")
        except (IllegalSaslState, MalformedRequest) as e:
            _log.warn("closing connection from {peer}: {error}", peer=self.connection.peer, error=e)
            self.state = State.FAILED
            self.connection.close(abort=True)

    @staticmethod
    def _served(header: Any) -> Any:
        low, high = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}[header.api_key]
        if not low <= header.api_version <= high:
            raise IllegalSaslState(f"{API_NAMES[header.api_key]} v{header.api_version} is not served")
        return header

    def _api_versions(self, header: Any, frame: Any) -> None:
        from .apis import SUPPORTED_VERSIONS

        low, high = SUPPORTED_VERSIONS[API_VERSIONS]
        self._move(Event.API_VERSIONS if low <= header.api_version <= high else Event.API_VERSIONS_UNSUPPORTED)
        self.connection.write_frame(self.apis.handle(header, frame, self.connection.context))

    def _handshake(self, header: Any, frame: Any) -> None:
        request = decode_request(frame, self._served(header))
        mechanism = request.mechanism
        enabled = self.settings.mechanisms
        if mechanism not in enabled:
            self._move(Event.UNSUPPORTED_MECHANISM)
            _log.warn("closing connection from {peer}: SASL mechanism {mechanism!r} is not enabled ({enabled})",
                      peer=self.connection.peer, mechanism=mechanism[:64], enabled=",".join(enabled))
            self._answer_failure(encode_response(
                SASL_HANDSHAKE, header.api_version, header.correlation_id,
                {"error_code": int(ErrorCode.unsupported_sasl_mechanism), "mechanisms": enabled}))
            return
        self._move(Event.HANDSHAKE_V1 if header.api_version >= 1 else Event.HANDSHAKE_V0)
        self.mechanism = mechanism
        self._server = self.settings.mechanism_server(mechanism)
        self.connection.write_frame(encode_response(
            SASL_HANDSHAKE, header.api_version, header.correlation_id,
            {"error_code": 0, "mechanisms": enabled}))

    def _evaluate(self, token: bytes, header: Any) -> None:
        result = defer.maybeDeferred(self._server.evaluate, bytes(token))
        result.addCallbacks(self._challenge, self._failed, callbackArgs=(header,), errbackArgs=(header,))
        result.addErrback(lambda f: _log.failure("SASL authenticator of {peer} failed", f,
                                                 peer=self.connection.peer))

    def _respond(self, header: Any, body: dict) -> None:
        body.setdefault("session_lifetime", 0)  # connections.max.reauth.ms=0: no re-authentication
        self.connection.write_frame(encode_response(SASL_AUTHENTICATE, header.api_version,
                                                    header.correlation_id, body))

    def _challenge(self, challenge: bytes | None, header: Any) -> None:
        if self.state == State.FAILED:
            return  # closed meanwhile
        server = self._server
        if header is None:
            if challenge is not None:  # GSSAPI's success: nothing (Kafka's SaslServer returns null)
                self.connection.write_frame(challenge)
        else:
            self._respond(header, {"error_code": 0, "error_message": None, "auth_bytes": challenge or b""})
        if server.complete:
            self._move(Event.SUCCESS)
            principal = f"User:{server.username}"
            kerberos = getattr(server, "principal", None)
            _log.debug("authenticated {principal} from {peer} with {mechanism}{kerberos}",
                      principal=principal, peer=self.connection.peer, mechanism=self.mechanism,
                      kerberos=f" (Kerberos principal {kerberos})" if kerberos else "")
            self.connection.authenticated(principal)
        else:
            self._move(Event.CHALLENGE)

    def _failed(self, failure: Any, header: Any) -> None:
        if self.state == State.FAILED:
            return
        self._move(Event.FAILURE)
        error = failure.value
        reason = getattr(error, "reason", None) or str(error)
        if isinstance(error, SaslAuthenticationFailed):
            message = str(error)
        elif isinstance(error, SaslException):
            message = ("Authentication failed during authentication due to invalid credentials with SASL "
                       f"mechanism {self.mechanism}")
        elif isinstance(error, ZooKeeperError):
            message = f"Authentication failed: the {self.mechanism} credentials could not be read"
        else:
            _log.failure("SASL {mechanism} exchange with {peer} failed", failure, mechanism=self.mechanism,
                         peer=self.connection.peer)
            message = f"Authentication failed due to an unexpected error with SASL mechanism {self.mechanism}"
        _log.warn("authentication of {peer} with {mechanism} failed: {reason}; closing the connection after "
                  "{delay_ms} ms", peer=self.connection.peer, mechanism=self.mechanism, reason=reason,
                  delay_ms=self.settings.failed_delay_ms)

        response = None
        if header is not None:  # raw (v0) tokens: no way to say why, the connection just closes
            response = encode_response(SASL_AUTHENTICATE, header.api_version, header.correlation_id, {
                "error_code": int(ErrorCode.sasl_authentication_failed), "error_message": message,
                "auth_bytes": b"", "session_lifetime": 0})
        self._answer_failure(response)

    def _answer_failure(self, response: bytes | None) -> None:
        """Send C{response} and close, after C{connection.failed.authentication.delay.ms} (as Kafka)."""
        def answer() -> None:
            self._delayed = None
            if response is not None:
                self.connection.write_frame(response)
            self.connection.close()

        self._delayed = self.reactor.callLater(self.settings.failed_delay_ms / 1000.0, answer)

    def connection_lost(self) -> None:
        """Cancel a pending failure answer."""
        if self._delayed is not None and self._delayed.active():
            self._delayed.cancel()
        self._delayed = None
        self.state = State.FAILED
