"""
What a handler knows about the request it serves: the header and the connection.

Named after Kafka's C{RequestContext} (KIP-504 gives it to authorizers).  A
L{ConnectionContext} is made once per connection when it opens (listener name,
security protocol, client address, principal); a L{RequestContext} pairs it with
one request's header.  Handlers receive the context as an argument, so it stays
right across a handler's Deferreds (a JoinGroup answered seconds later still
knows its client's address).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..protocol.messages import RequestHeader

__all__ = ["ConnectionContext", "RequestContext", "ANONYMOUS"]

#: Kafka's principal for an unauthenticated connection (C{KafkaPrincipal.ANONYMOUS}).
ANONYMOUS = "User:ANONYMOUS"


class ConnectionContext(NamedTuple):
    """
    One client connection, as handlers and the authorizer see it.

    @ivar listener_name: the listener it came in on (C{PLAINTEXT}, or a named listener).
    @ivar security_protocol: C{PLAINTEXT}, C{SSL}, C{SASL_PLAINTEXT} or C{SASL_SSL}.
    @ivar client_host: the peer's address (C{"127.0.0.1"}), or C{""} when unknown.
    @ivar client_port: the peer's port, or -1.
    @ivar principal: C{"User:<name>"}; L{ANONYMOUS} until authenticated.
    @ivar connection: the L{kafkatw.broker.network.KafkaConnection} (or C{None} in tests).
    """

    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    client_host: str = ""
    client_port: int = -1
    principal: str = ANONYMOUS
    connection: Any = None


#: The context of a request that came from no connection (unit tests, internal calls).
NO_CONNECTION = ConnectionContext()


class RequestContext(NamedTuple):
    """
    One request: its header (API key, version, correlation id, client id) and
    the L{ConnectionContext} it arrived on.
    """

    header: RequestHeader
    connection: ConnectionContext = NO_CONNECTION

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id

    @property
    def client_id(self) -> str | None:
        return self.header.client_id
