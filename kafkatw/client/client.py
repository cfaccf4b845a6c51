"""
L{KafkaClient}: cluster metadata and one connection per broker (docs/design.md: Clients).

The client bootstraps from C{bootstrap_servers}, keeps the cluster's metadata
(brokers, and per topic the leader of each partition), and opens one
L{BrokerConnection} per broker, lazily, negotiating API versions on connect.
Metadata is refreshed when a caller reports a stale-leader error
(L{KafkaClient.invalidate}), when a topic it needs is missing, and when it is
older than C{metadata_max_age_ms}.  A broker whose connection fails is retried
after C{reconnect_backoff_ms}, doubling up to C{reconnect_backoff_max_ms} with
±20% jitter, as the Java client does.

Everything runs on the reactor passed in; nothing blocks.  The blocking facade
(L{kafkatw.client.blocking}) drives the same code from other threads.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterable

from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol
from twisted.internet.protocol import Factory
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.python.failure import Failure

from ..errors import ErrorCode, KafkaError
from . import sasl
from ..security.tls import TLSConfigError, client_options
from .connection import BrokerConnection, BrokerConnectionError, parse_bootstrap_servers
from .security import PLAINTEXT, SecurityConfig

__all__ = ["KafkaClient", "PartitionMetadata", "RETRIABLE_METADATA_ERRORS", "client_for"]

_log = Logger()

#: Errors after which the client refreshes metadata and retries.
RETRIABLE_METADATA_ERRORS = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.network_exception,
    ErrorCode.request_timed_out,
})


def client_for(reactor: Any, bootstrap_servers: str | list[str] | None, client: "KafkaClient | None",
               client_id: str, request_timeout_ms: int,
               security: SecurityConfig | None = None) -> tuple["KafkaClient", bool]:
    """
    The client a producer or consumer uses: C{client} when given, else a new
    one for C{bootstrap_servers} (secured by C{security}).

    @return: (client, whether the caller created it and so must close it).
    @raise ValueError: neither C{bootstrap_servers} nor C{client} given.
    """
    if client is not None:
        return client, False
    if bootstrap_servers is None:
        raise ValueError("give bootstrap_servers or client")
    return KafkaClient(reactor, bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                       security=security), True


class PartitionMetadata:
    """A partition's leader (-1: none) and its leader epoch."""

    __slots__ = ("leader", "leader_epoch")

    def __init__(self, leader: int, leader_epoch: int) -> None:
        self.leader = leader
        self.leader_epoch = leader_epoch


#: A coordinator's node id is this less its broker id (L{KafkaClient.coordinator_node}; Kafka's Integer.MAX_VALUE).
COORDINATOR_NODE_BASE = 2**31 - 1


class KafkaClient:
    """
    Metadata and broker connections shared by producers and consumers.

    @param bootstrap_servers: C{"host:port,host:port"}.
    @param request_timeout_ms: per-request timeout (ms).
    @param metadata_max_age_ms: refresh metadata at least this often (ms).
    @param reconnect_backoff_ms: first wait before reconnecting to a broker (ms).
    @param reconnect_backoff_max_ms: the longest such wait (ms).
    @param allow_auto_create_topics: ask the broker to create unknown topics
        when fetching their metadata (the broker decides, with
        C{auto.create.topics.enable}), as Kafka's Java clients do by default.
    @param security: how connections are secured (TLS, SASL); plaintext by default.
    @param random_source: the random choices (reconnection backoff jitter, the
        least loaded broker among equals); a seeded one makes them repeatable
        (L{kafkatw.simulation}); None: one seeded by the system.
    @param endpoint_factory: C{endpoint_factory(host, port, timeout_s)} returns
        the C{IStreamClientEndpoint} a broker connection is made through
        (C{timeout_s}: the connection attempt's timeout, seconds); None:
        Twisted's C{HostnameEndpoint} on C{reactor} (TCP).  A fake cluster
        in memory (L{kafkatw.testing.FakeCluster}) passes its own.
    """

    def __init__(self, reactor: Any, bootstrap_servers: str | list[str], client_id: str = "kafkatw",
                 request_timeout_ms: int = 30000, metadata_max_age_ms: int = 300000,
                 reconnect_backoff_ms: int = 50, reconnect_backoff_max_ms: int = 1000,
                 allow_auto_create_topics: bool = True, security: SecurityConfig | None = None,
                 random_source: random.Random | None = None,
                 endpoint_factory: Callable[[str, int, float], Any] | None = None) -> None:
        self.reactor = reactor
        self._endpoint_factory = endpoint_factory or (
            lambda host, port, timeout_s: HostnameEndpoint(reactor, host, port, timeout=timeout_s))
        self.security = security or PLAINTEXT
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.allow_auto_create_topics = allow_auto_create_topics
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, dict[int, PartitionMetadata]] = {}
        self.topic_ids: dict[str, Any] = {}
        #: Topics the last Metadata refused with C{TOPIC_AUTHORIZATION_FAILED} (an ACL): not retried.
        self.topic_errors: dict[str, ErrorCode] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        self._metadata_at = -1.0
        self._wanted_topics: set[str] = set()
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, _Shared] = {}
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._refreshing: _Shared | None = None
        self._closed = False
        self._random = random_source or random.Random()
        self._tls_by_host: dict[str, Any] = {}

    # --- connections ---------------------------------------------------------

    def coordinator_node(self, broker_id: int) -> int:
        """
        The node id under which a group member talks to its coordinator,
        broker C{broker_id}, on a connection of its own: C{2**31 - 1 -
        broker_id}, as Kafka's C{AbstractCoordinator} does.  A broker answers
        each connection's requests in order, so on the connection that
        fetches, a heartbeat, a commit or a JoinGroup would wait behind a
        Fetch held for up to C{fetch_max_wait_ms}.
        """
        return COORDINATOR_NODE_BASE - broker_id

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id in self.brokers:
            return self.brokers[node_id]
        if COORDINATOR_NODE_BASE - node_id in self.brokers:
            return self.brokers[COORDINATOR_NODE_BASE - node_id]
        if node_id < 0 and -node_id - 1 < len(self.bootstrap):
            return self.bootstrap[-node_id - 1]
        raise BrokerConnectionError(f"unknown broker {node_id}")

    def connection(self, node_id: int) -> defer.Deferred:
        """
        The open connection to broker C{node_id} (bootstrap servers are nodes
        -1, -2, …), connecting and negotiating versions first when needed.

        @return: a Deferred firing with a L{BrokerConnection}.
        """
        existing = self._connections.get(node_id)
        if existing is not None and existing.connected:
            return defer.succeed(existing)
        shared = self._connecting.get(node_id)
        if shared is None:
            shared = _Shared(defer.Deferred.fromCoroutine(self._connect(node_id)),
                             lambda: self._connecting.pop(node_id, None))
            if not shared.done:
                self._connecting[node_id] = shared
        return shared.wait()

    async def _connect(self, node_id: int) -> BrokerConnection:
        if self._closed:
            raise BrokerConnectionError("client closed")
        wait = self._retry_at.get(node_id, 0) - self.reactor.seconds()
        if wait > 0:
            await sleep(self.reactor, wait)
        host, port = self._address(node_id)
        protocol = BrokerConnection(self.reactor, self.client_id, self.request_timeout_ms, node_id)
        try:
            endpoint = self._endpoint_factory(host, port, self.request_timeout_ms / 1000.0)
            if self.security.tls:
                # Twisted's TLS transport batches small writes on a clock: ours, not the global reactor.
                await endpoint.connect(TLSMemoryBIOFactory(self._tls_options(host), True,
                                                           Factory.forProtocol(lambda: protocol), clock=self.reactor))
            else:
                await connectProtocol(endpoint, protocol)
            # The first request waits for the TLS handshake (which checks the
            # certificate and host name); a failed handshake fails it.
            await protocol.negotiate()
            if self.security.sasl:
                await sasl.authenticate(protocol, self.security, host)
        except TLSConfigError:
            raise
        except Exception as e:
            failures = self._failures.get(node_id, 0) + 1
            self._failures[node_id] = failures
            backoff = min(self.reconnect_backoff_ms * 2 ** (failures - 1), self.reconnect_backoff_max_ms)
            backoff *= self._random.uniform(0.8, 1.2)
            self._retry_at[node_id] = self.reactor.seconds() + backoff / 1000.0
            if protocol.transport is not None:
                protocol.transport.abortConnection()
            if isinstance(e, KafkaError):
                raise
            raise BrokerConnectionError(f"cannot connect to broker {node_id} at {host}:{port}: {e}") from e
        self._failures.pop(node_id, None)
        self._retry_at.pop(node_id, None)
        self._connections[node_id] = protocol
        protocol.lost.addCallback(lambda _: self._lost(node_id, protocol))
        return protocol

    def _tls_options(self, host: str) -> Any:
        """
        TLS options for a connection to C{host}, made once per host (the files are read once).

        @raise TLSConfigError: an unusable C{ssl_cafile}, C{ssl_certfile} or C{ssl_keyfile}.
        """
        cache = self._tls_by_host
        if host not in cache:
            s = self.security
            cache[host] = client_options(host, s.ssl_cafile, s.ssl_certfile, s.ssl_keyfile, s.ssl_password,
                                         s.ssl_check_hostname, s.ssl_ciphers)
        return cache[host]

    def _lost(self, node_id: int, protocol: BrokerConnection) -> None:
        if self._connections.get(node_id) is protocol:
            del self._connections[node_id]

    async def send(self, node_id: int, api_key: int, body: Any, expect_response: bool = True,
                   timeout_ms: int | None = None, version: int | None = None) -> Any:
        """
        Send one request to broker C{node_id}.

        @param version: the request's version; default: the one negotiated
            with the broker (a broker's own request to another, e.g.
            AddPartitionsToTxn v4, names a version clients do not send).
        @return: the kio response (C{None} when C{expect_response} is false).
        @raise BrokerConnectionError: the broker cannot be reached.
        @raise RequestTimedOutError: no response in time.
        """
        connection = await self.connection(node_id)
        return await connection.request(api_key, body, version=version, expect_response=expect_response,
                                        timeout_ms=timeout_ms)

    def request(self, node_id: int, api_key: int, body: Any, expect_response: bool = True,
                timeout_ms: int | None = None) -> defer.Deferred:
        """
        L{send} as a Deferred: straight to the connection's request when the
        connection to C{node_id} is open (no coroutine and no Deferred between
        the response and the caller: the producer sends one request per batch),
        else through L{send}.

        @return: a Deferred firing with the kio response (C{None} when
            C{expect_response} is false), or failing as L{send} raises.
        """
        existing = self._connections.get(node_id)
        if existing is not None and existing.connected:
            return existing.request(api_key, body, expect_response=expect_response, timeout_ms=timeout_ms)
        return defer.Deferred.fromCoroutine(self.send(node_id, api_key, body, expect_response, timeout_ms))

    def versions(self, node_id: int) -> dict[int, int]:
        """The negotiated versions with C{node_id} (empty when not connected)."""
        connection = self._connections.get(node_id)
        return connection.versions if connection is not None else {}

    def least_loaded_node(self) -> int:
        """
        A connected broker with the fewest requests in flight, else a known
        broker not waiting to reconnect, else a bootstrap server not waiting
        to reconnect, else any known broker or bootstrap server.

        When every broker the last metadata named is unreachable, the client
        goes back to its bootstrap servers: Kafka's
        C{metadata.recovery.strategy=rebootstrap} (KIP-899), the default since
        Kafka 4.0 (KIP-1102).  The metadata may name only brokers that have
        gone since (a cluster's one live broker then), while a bootstrap
        server leads the partitions now.
        """
        connected = [(c.in_flight, n) for n, c in self._connections.items() if c.connected]
        if connected:
            return min(connected)[1]
        now = self.reactor.seconds()
        known = [n for n in self.brokers if self._retry_at.get(n, 0) <= now]
        if known:
            return self._random.choice(known)
        candidates = [-(i + 1) for i in range(len(self.bootstrap))]
        ready = [n for n in candidates if self._retry_at.get(n, 0) <= now]
        return self._random.choice(ready or list(self.brokers) or candidates)

    # --- metadata --------------------------------------------------------------

    def want(self, topics: Iterable[str]) -> None:
        """Keep these topics in every metadata refresh."""
        self._wanted_topics.update(topics)

    def invalidate(self) -> None:
        """Mark the metadata stale: the next L{ensure_metadata} refreshes it."""
        self._metadata_at = -1.0

    def metadata_stale(self) -> bool:
        return self._metadata_at < 0 or \
            (self.reactor.seconds() - self._metadata_at) * 1000 >= self.metadata_max_age_ms

    async def ensure_metadata(self, topics: Iterable[str] = ()) -> None:
        """Refresh metadata if stale or if any of C{topics} is unknown."""
        topics = list(topics)
        self.want(topics)
        if self.metadata_stale() or any(t not in self.topics for t in topics):
            await self.refresh_metadata()

    def refresh_metadata(self, allow_auto_create: bool | None = None) -> defer.Deferred:
        """
        Fetch metadata for the wanted topics (one refresh at a time; callers
        during a refresh share it).

        @return: a Deferred firing with C{None}.
        """
        shared = self._refreshing
        if shared is None:
            shared = _Shared(defer.Deferred.fromCoroutine(self._refresh(allow_auto_create)),
                             lambda: setattr(self, "_refreshing", None))
            if not shared.done:
                self._refreshing = shared
        return shared.wait()

    async def _refresh(self, allow_auto_create: bool | None) -> None:
        if allow_auto_create is None:
            allow_auto_create = self.allow_auto_create_topics
        attempts = max(2, len(self.brokers) + len(self.bootstrap))
        last_error: Exception | None = None
        for _ in range(attempts):
            node = self.least_loaded_node()
            try:
                topics = [{"name": t} for t in sorted(self._wanted_topics)]
                response = await self.send(node, 3, {"topics": topics, "allow_auto_topic_creation": allow_auto_create,
                                                     "include_topic_authorized_operations": False})
            except KafkaError as e:
                last_error = e
                continue
            self._apply_metadata(response)
            return
        raise last_error or BrokerConnectionError("no broker reachable for metadata")

    def _apply_metadata(self, response: Any) -> None:
        self.note_cluster(response)
        topics: dict[str, dict[int, PartitionMetadata]] = {}
        self.topic_errors = {topic.name: ErrorCode.topic_authorization_failed for topic in response.topics
                             if topic.error_code == ErrorCode.topic_authorization_failed}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none and not topic.partitions:
                continue
            topics[topic.name] = {
                int(p.partition_index): PartitionMetadata(
                    int(p.leader_id) if p.error_code in (ErrorCode.none, ErrorCode.replica_not_available) else -1,
                    int(getattr(p, "leader_epoch", -1)))
                for p in topic.partitions
            }
            if getattr(topic, "topic_id", None) is not None:
                self.topic_ids[topic.name] = topic.topic_id
        self.topics = topics
        self._metadata_at = self.reactor.seconds()

    def note_cluster(self, response: Any) -> None:
        """
        Take the brokers, cluster id and controller of a Metadata response
        asked for by someone else (the admin client's own Metadata requests),
        leaving the topics and the metadata's age alone.
        """
        self.note_brokers({int(b.node_id): (b.host, int(b.port)) for b in response.brokers},
                          getattr(response, "cluster_id", None), int(getattr(response, "controller_id", -1)))

    def note_brokers(self, brokers: dict[int, tuple[str, int]], cluster_id: str | None, controller_id: int) -> None:
        """Take the live brokers, cluster id and controller learnt elsewhere (Metadata, DescribeCluster)."""
        self.brokers = dict(brokers)
        self.cluster_id = cluster_id
        self.controller_id = controller_id

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids, as last seen (empty when unknown)."""
        return sorted(self.topics.get(topic, {}))

    def leader_for(self, topic: str, partition: int) -> int:
        """The leader's broker id, or -1 when unknown or unavailable."""
        meta = self.topics.get(topic, {}).get(partition)
        return meta.leader if meta is not None else -1

    # --- life cycle ---------------------------------------------------------------

    async def start(self, topics: Iterable[str] = ()) -> None:
        """Bootstrap: fetch metadata (for C{topics}) from a bootstrap server."""
        self.want(topics)
        await self.refresh_metadata()

    def close(self, timeout_ms: int | None = None) -> defer.Deferred:
        """
        Close every connection; pending requests fail with
        L{BrokerConnectionError}.  A connection closes as TCP does, once what
        was written to it is sent; one whose bytes are not all sent within
        C{timeout_ms} (default: C{request_timeout_ms}) -- its broker stopped
        reading, or a link drops its packets -- is aborted, rather than wait
        for TCP to give up (about 15 minutes on Linux).

        @return: a Deferred firing once every connection is closed.
        """
        self._closed = True
        losses = []
        grace_s = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        for connection in list(self._connections.values()):
            transport = connection.transport
            if connection.connected and transport is not None:
                lost = connection.lost
                losses.append(lost)
                transport.loseConnection()
                if not lost.called:
                    abort = self.reactor.callLater(grace_s, transport.abortConnection)
                    lost.addBoth(_cancel_then, abort)
        self._connections.clear()
        return defer.DeferredList(losses).addCallback(lambda _: None)


def _cancel_then(result: Any, call: Any) -> Any:
    """Cancel the delayed C{call} if it has not run, and pass C{result} on."""
    if call.active():
        call.cancel()
    return result


class _Shared:
    """One operation several callers wait for: each gets its own Deferred."""

    def __init__(self, operation: defer.Deferred, on_done: Any) -> None:
        self._waiters: list[defer.Deferred] = []
        self._on_done = on_done
        self.done = False
        self._result: Any = None
        operation.addBoth(self._fire)

    def wait(self) -> defer.Deferred:
        if self.done:
            result = self._result
            return defer.fail(result) if isinstance(result, Failure) else defer.succeed(result)
        d: defer.Deferred = defer.Deferred()
        self._waiters.append(d)
        return d

    def _fire(self, result: Any) -> None:
        self.done = True
        self._result = result
        self._on_done()
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            if isinstance(result, Failure):
                d.errback(result)
            else:
                d.callback(result)


def sleep(reactor: Any, seconds: float) -> defer.Deferred:
    """A Deferred that fires after C{seconds} on C{reactor} (the clients' back-off waits)."""
    return deferLater(reactor, seconds, lambda: None)
