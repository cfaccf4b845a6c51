"""
The client's side of SASL: SaslHandshake v1, then SaslAuthenticate requests
carrying the mechanism's tokens (KIP-152), on a freshly negotiated connection.

PLAIN sends one message; OAUTHBEARER one message with the token of
C{sasl_oauth_token_provider} (RFC 7628; a broker's JSON error is answered
C{\x01}, as Kafka's client, and the failure carries it); GSSAPI the
GSS-API tokens of a Kerberos ticket for C{<service>/<broker host>} then
RFC 4752's security layer message (L{kafkatw.security.kerberos}; the ticket is
got in the reactor's thread pool: the KDC is asked over the network);
SCRAM-SHA-256/512 (L{kafkatw.security.sasl.ScramClientExchange}) sends
client-first and client-final and checks the server's signature, so that a
broker that does not hold the credential is not trusted.  Any failure is an
L{AuthenticationFailedError} -- not retriable, carrying the broker's message
(Kafka's C{SaslAuthenticationException}) -- and the connection is dropped.

Source: Kafka's C{SaslClientAuthenticator}; KIP-43, KIP-152; RFC 4616,
RFC 5802, RFC 7677, RFC 7628, RFC 4752; KIP-255.
"""

from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, KafkaError
from ..security.oauthbearer import client_initial_response
from ..security.sasl import SaslException, ScramClientExchange, plain_client_token
from .security import SecurityConfig

__all__ = ["AuthenticationFailedError", "authenticate"]

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class AuthenticationFailedError(KafkaError):
    """SASL authentication failed (Kafka's C{SASL_AUTHENTICATION_FAILED}); not retriable."""

    error_code = ErrorCode.sasl_authentication_failed


def _failed(code: ErrorCode, message: str) -> AuthenticationFailedError:
    error = AuthenticationFailedError(message)
    error.error_code = code
    return error


async def authenticate(connection: Any, security: SecurityConfig, host: str | None = None) -> None:
    """
    Authenticate C{connection} (a negotiated
    L{kafkatw.client.connection.BrokerConnection}) with C{security}'s
    mechanism, user name and password.

    @param host: the broker's host as connected (GSSAPI's service principal
        is C{<service>/<host>}, unless C{sasl_kerberos_domain_name} is set).

    @raise AuthenticationFailedError: the broker refused the mechanism
        (C{UNSUPPORTED_SASL_MECHANISM}, with its enabled list), the
        credentials (C{SASL_AUTHENTICATION_FAILED}, with its message), or did
        not prove that it holds the SCRAM credential; or the broker has no
        SASL (C{ILLEGAL_SASL_STATE}).
    """
    mechanism = security.sasl_mechanism
    username, password = security.sasl_plain_username, security.sasl_plain_password
    node = connection.node_id
    provider = security.sasl_oauth_token_provider
    if mechanism == "OAUTHBEARER":
        if provider is None:
            raise _failed(ErrorCode.sasl_authentication_failed,
                          "SASL OAUTHBEARER: no sasl_oauth_token_provider")
    elif mechanism == "GSSAPI":
        pass
    elif not username or password is None:
        raise _failed(ErrorCode.sasl_authentication_failed,
                      f"SASL {mechanism}: no user name or password (sasl_plain_username, sasl_plain_password)")
    if SASL_HANDSHAKE not in connection.versions or SASL_AUTHENTICATE not in connection.versions:
        raise _failed(ErrorCode.illegal_sasl_state, f"broker {node} does not offer SaslHandshake v1 and "
                                                    "SaslAuthenticate")
    response = await connection.request(SASL_HANDSHAKE, {"mechanism": mechanism})
    code = ErrorCode(int(response.error_code))
    if code == ErrorCode.unsupported_sasl_mechanism:
        raise _failed(code, f"Client SASL mechanism '{mechanism}' not enabled in the server, enabled mechanisms "
                            f"are [{', '.join(response.mechanisms)}]")
    if code != ErrorCode.none:
        raise _failed(code, f"SaslHandshake with broker {node} failed: {code.name}")

    async def exchange(token: bytes) -> bytes:
        answer = await connection.request(SASL_AUTHENTICATE, {"auth_bytes": token})
        code = ErrorCode(int(answer.error_code))
        if code != ErrorCode.none:
            raise _failed(code, answer.error_message or f"SASL {mechanism} authentication failed: {code.name}")
        return bytes(answer.auth_bytes)

    if mechanism == "PLAIN":
        await exchange(plain_client_token(username, password))
        return
    if mechanism == "OAUTHBEARER":
        await _oauthbearer(exchange, provider)
        return
    if mechanism == "GSSAPI":
        try:
            await _gssapi(connection.reactor, exchange, security, security.sasl_kerberos_domain_name or host or "")
        except (SaslException, ValueError, ImportError) as e:  # no ticket, a refused token, no python-gssapi
            raise _failed(ErrorCode.sasl_authentication_failed, f"SASL GSSAPI with broker {node}: {e}") from None
        return
    scram = ScramClientExchange(mechanism, username, password)
    try:
        server_first = await exchange(scram.first())
        server_final = await exchange(scram.final(server_first))
        scram.verify(server_final)
    except SaslException as e:
        raise _failed(ErrorCode.sasl_authentication_failed, f"SASL {mechanism} with broker {node}: {e}") from None


async def _oauthbearer(exchange: Any, provider: Any) -> None:
    """RFC 7628's exchange: the client's first message; a server error (a JSON challenge) is answered C{\\x01}."""
    token_of = getattr(provider, "token", None)
    token = token_of() if callable(token_of) else provider()
    if hasattr(token, "__await__"):
        token = await token
    extensions_of = getattr(provider, "extensions", None)
    extensions = extensions_of() if callable(extensions_of) else None
    challenge = await exchange(client_initial_response(str(token), extensions=extensions))
    if challenge:  # the broker refused the token: Kafka's broker then fails the exchange with the JSON
        await exchange(b"\x01")
        raise _failed(ErrorCode.sasl_authentication_failed, challenge.decode("utf-8", "replace"))


#: Most SaslAuthenticate round trips of a GSSAPI exchange (RFC 4752 needs 3 with mutual authentication).
GSSAPI_MAX_ROUNDS = 8


async def _gssapi(reactor: Any, exchange: Any, security: SecurityConfig, host: str) -> None:
    """
    RFC 4752's exchange; the credentials and the first token (which asks the
    KDC for the service ticket) are made in the reactor's thread pool.
    """
    from twisted.internet.threads import deferToThreadPool

    from ..security.kerberos import GssapiClientExchange, initiator_credentials

    def start() -> tuple[GssapiClientExchange, bytes]:
        credentials = None
        if security.sasl_kerberos_principal or security.sasl_kerberos_keytab:
            credentials = initiator_credentials(security.sasl_kerberos_principal, security.sasl_kerberos_keytab)
        gssapi = GssapiClientExchange(security.sasl_kerberos_service_name, host, credentials)
        return gssapi, gssapi.first()

    gssapi, token = await deferToThreadPool(reactor, reactor.getThreadPool(), start)
    for _ in range(GSSAPI_MAX_ROUNDS):
        challenge = await exchange(token)
        if gssapi.complete:
            return
        token = gssapi.step(challenge)
    raise SaslException(f"no outcome after {GSSAPI_MAX_ROUNDS} tokens")
