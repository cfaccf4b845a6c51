"""
One client connection to one broker: framing, correlation ids, pipelining.

Requests are written as soon as they are made (pipelining; L{SocketWriter}:
to the socket at once, not at the end of the reactor's turn); each gets the next
correlation id and a Deferred that fires with the decoded kio response, or fails
with L{RequestTimedOutError} after C{request_timeout_ms} or with
L{BrokerConnectionError} when the connection is lost.  A Produce with acks=0 has
no response: its Deferred fires with C{None} once the request is written.

On connect the connection negotiates versions with ApiVersions (v3, falling back
to v0 on C{UNSUPPORTED_VERSION}, as Kafka's own clients do) and keeps, per API,
the highest version both sides speak.

Source: Kafka protocol guide ("Network", "Versioning and Compatibility"); afkak's
C{_protocol.py} keeps the same correlation-id map.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from twisted.internet import defer, tcp
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.logger import Logger

from ..errors import ErrorCode, KafkaError, kafka_error
from ..protocol.framing import FrameBuffer, FrameSizeError, ReadSizer
from ..protocol.messages import decode_response, encode_request, request_schema

__all__ = [
    "CLIENT_VERSIONS",
    "BrokerConnection",
    "BrokerConnectionError",
    "RequestTimedOutError",
    "SocketWriter",
    "UnsupportedApiError",
    "parse_bootstrap_servers",
    "common_versions",
    "unreachable",
]

_log = Logger()
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_SIZE_HEADER = struct.Struct(">ihhi")  # frame size, api key, api version, correlation id

#: API key -> (min, max) versions kafkatw's clients speak.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 8),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    18: (0, 3),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    22: (0, 4),  # InitProducerId
    24: (0, 3),  # AddPartitionsToTxn
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 3),  # EndTxn
    28: (0, 3),  # TxnOffsetCommit
    27: (1, 1),  # WriteTxnMarkers (the transaction coordinator's, broker to broker)
    32: (1, 4),  # DescribeConfigs
    23: (2, 4),  # OffsetForLeaderEpoch
    37: (0, 3),  # CreatePartitions
    43: (0, 2),  # ElectLeaders
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    44: (0, 1),  # IncrementalAlterConfigs
    60: (0, 1),  # DescribeCluster
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    17: (1, 1),  # SaslHandshake (v1: tokens in SaslAuthenticate, KIP-152)
    36: (0, 2),  # SaslAuthenticate
    48: (0, 1),  # DescribeClientQuotas (KIP-546)
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    21: (0, 2),  # DeleteRecords
    34: (1, 2),  # AlterReplicaLogDirs
    35: (1, 4),  # DescribeLogDirs
    47: (0, 0),  # OffsetDelete
    61: (0, 0),  # DescribeProducers
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions
    68: (0, 1),  # ConsumerGroupHeartbeat (KIP-848: kafkatw.client.consumer_membership)
    69: (0, 1),  # ConsumerGroupDescribe
    76: (1, 1),  # ShareGroupHeartbeat (KIP-932: kafkatw.client.share_consumer)
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 1),  # ShareFetch
    79: (1, 1),  # ShareAcknowledge
    84: (0, 0),  # ReadShareGroupState (broker to share coordinator)
    85: (0, 0),  # WriteShareGroupState
}


class BrokerConnectionError(KafkaError):
    """The connection to a broker failed or was lost (retriable)."""

    error_code = ErrorCode.network_exception


class RequestTimedOutError(KafkaError):
    """No response within C{request_timeout_ms} (retriable)."""

    error_code = ErrorCode.request_timed_out


class UnsupportedApiError(KafkaError):
    """The broker serves no version of an API that this client speaks."""

    error_code = ErrorCode.unsupported_version


def common_versions(api_keys: Any, ours: dict[int, tuple[int, int]]) -> dict[int, int]:
    """
    API key -> the highest version both sides speak, from an ApiVersions
    response's C{api_keys} and our (min, max) per API; APIs with no common
    version are left out.
    """
    versions = {}
    for item in api_keys:
        mine = ours.get(int(item.api_key))
        if mine is None:
            continue
        high = min(mine[1], int(item.max_version))
        if high >= max(mine[0], int(item.min_version)):
            versions[int(item.api_key)] = high
    return versions


def parse_bootstrap_servers(bootstrap_servers: str | list[str]) -> list[tuple[str, int]]:
    """
    C{"host:port,host:port"} (or a list; C{PLAINTEXT://} prefixes allowed) as
    a list of (host, port).

    @raise ValueError: an entry is not host:port.
    """
    items = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    servers = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        servers.append((host.strip("[]") or "localhost", int(port)))
    if not servers:
        raise ValueError("no bootstrap servers given")
    return servers


class SocketWriter:
    """
    Writes to a Twisted TCP connection's socket at once while the
    connection's own buffer is empty; otherwise, and for what the socket did
    not take, through C{transport.write}, so that bytes stay in order.

    Twisted's C{write} buffers bytes until the reactor next finds the socket
    writable: after the rest of the current turn, with one C{epoll_ctl} to
    watch for writability and one to stop.  A request or a response written
    at once leaves that much sooner (docs/design.md, "Writes at once").  On a
    socket error the bytes go to C{transport.write}, whose own send then
    fails and closes the connection as any write error does.

    Only a C{twisted.internet.tcp.Connection} is written to at once: a TLS
    wrapper (C{TLSMemoryBIOProtocol}) passes attribute reads through to the
    TCP transport under it, so any duck-typed test would take its socket and
    write past the encryption.  Whether the buffer is empty is read from
    Twisted's C{_tempDataLen}, C{dataBuffer} and C{offset} (docs/design.md,
    "Private APIs"; tests/unit/test_private_apis.py pins them).

    @ivar socket: the socket written at once (None: every write goes through
        the transport).
    """

    __slots__ = ("transport", "socket")

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.socket = transport.socket if isinstance(transport, tcp.Connection) and not transport.TLS else None

    def buffer_empty(self) -> bool:
        """True when the transport holds no bytes still to send (False without a socket)."""
        t = self.transport
        return self.socket is not None and not t._tempDataLen and len(t.dataBuffer) - t.offset == 0

    def write(self, data: bytes, flags: int = 0) -> bool:
        """
        Write C{data} (C{flags}: C{send}'s, such as C{MSG_MORE}, when it goes at once).

        @return: True when all of it went to the socket now; False when some
            of it waits in the transport's buffer.
        """
        sock = self.socket
        if sock is not None and self.buffer_empty():
            try:
                sent = sock.send(data, flags)
            except OSError:  # full (EAGAIN), interrupted, or broken: the transport's write deals with it
                sent = 0
            if sent == len(data):
                return True
            if sent:
                data = data[sent:]
        self.transport.write(data)
        return False


class _Pending:
    __slots__ = ("deferred", "api_key", "version", "deadline")

    def __init__(self, deferred: defer.Deferred, api_key: int, version: int, deadline: float) -> None:
        self.deferred = deferred
        self.api_key = api_key
        self.version = version
        self.deadline = deadline  # reactor seconds


class BrokerConnection(Protocol):
    """
    The client side of one broker connection.

    @ivar versions: API key -> the negotiated version (after L{negotiate}).
    @ivar node_id: the broker id this connection is for (-1 for bootstrap).
    """

    def __init__(self, reactor: Any, client_id: str, request_timeout_ms: int, node_id: int = -1) -> None:
        self.reactor = reactor
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.node_id = node_id
        self.versions: dict[int, int] = {}
        self.connected = False
        self.lost: defer.Deferred[None] = defer.Deferred()
        self._pending: dict[int, _Pending] = {}
        # ONE timer for the request timeouts of the connection, armed for the
        # earliest deadline: not a timer made and cancelled per request (a
        # producer at linger_ms=0 sends a request per record).  It is left
        # armed when a response arrives, and when it fires with nothing due it
        # is armed again only for the requests still pending.
        self._timeout_call: Any = None
        self._header_rests: dict[tuple[int, int], tuple[bytes, bool]] = {}
        self._next_correlation_id = 0
        # A response has at least a correlation id; its size is bounded only by memory.
        self._frames = FrameBuffer(max_size=0x7FFFFFFF, min_size=4)
        self._read_sizer = ReadSizer(None)
        self._writer = SocketWriter(None)

    # --- framing ---------------------------------------------------------------

    def connectionMade(self) -> None:
        self.connected = True
        # Small requests (a Fetch, a ListOffsets) must not wait for Nagle's
        # algorithm behind an unacknowledged write: ~40 ms with delayed ACKs.
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(True)
        # a fetch response of a megabyte is read in one or two reads, not sixteen
        self._read_sizer = ReadSizer(self.transport)
        # a request leaves at once, not at the end of the reactor's turn
        self._writer = SocketWriter(self.transport)

    def dataReceived(self, data: bytes) -> None:
        try:
            for frame in self._frames.feed(data):
                self._frame_received(frame)
        except FrameSizeError as e:
            _log.warn("broker {node} sent a frame of {size} bytes; closing", node=self.node_id, size=e.size)
            self.transport.abortConnection()
            return
        self._read_sizer.follow(self._frames)

    def _frame_received(self, frame: memoryview) -> None:
        (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            _log.warn("response with unknown correlation id {cid} from broker {node}", cid=correlation_id,
                      node=self.node_id)
            return
        try:
            _cid, response = decode_response(pending.api_key, pending.version, frame)
        except Exception as e:
            pending.deferred.errback(kafka_error(ErrorCode.corrupt_message, f"undecodable response: {e}"))
            self.transport.abortConnection()
            return
        pending.deferred.callback(response)

    def connectionLost(self, reason: Any = None) -> None:
        self.connected = False
        pending, self._pending = self._pending, {}
        if self._timeout_call is not None:
            if self._timeout_call.active():
                self._timeout_call.cancel()
            self._timeout_call = None
        for p in pending.values():
            p.deferred.errback(BrokerConnectionError(f"connection to broker {self.node_id} lost{_why(reason)}"))
        if not self.lost.called:
            self.lost.callback(None)

    # --- requests --------------------------------------------------------------

    def request(self, api_key: int, body: Any, version: int | None = None,
                expect_response: bool = True, timeout_ms: int | None = None) -> defer.Deferred:
        """
        Send one request.

        @param body: plain values for L{kafkatw.protocol.messages.build}, or a kio entity.
        @param version: the version to use; default: the negotiated one.
        @return: a Deferred firing with the kio response (C{None} when
            C{expect_response} is false).
        @raise UnsupportedApiError: (as failure) the broker serves no common version.
        """
        if not self.connected:
            return defer.fail(BrokerConnectionError(f"not connected to broker {self.node_id}"))
        if version is None:
            version = self.versions.get(api_key)
            if version is None:
                return defer.fail(UnsupportedApiError(f"broker {self.node_id} serves no usable version of API {api_key}"))
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        try:
            encode_body = getattr(body, "encode_body", None)
            if encode_body is not None:
                # A body that encodes itself (the producer's Produce, the
                # consumer's Fetch): the header's constant part (client id,
                # tagged fields) is encoded once per API version.
                rest = self._header_rests.get((api_key, version))
                if rest is None:
                    rest = self._header_rest(api_key, version)
                payload = encode_body(version, rest[1])
                data = _SIZE_HEADER.pack(8 + len(rest[0]) + len(payload), api_key, version,
                                         correlation_id) + rest[0] + payload
            else:
                frame = encode_request(api_key, version, correlation_id, self.client_id, body)
                data = _SIZE.pack(len(frame)) + frame
        except Exception as e:
            return defer.fail(e)
        self._writer.write(data)
        if not expect_response:
            return defer.succeed(None)
        d: defer.Deferred = defer.Deferred()
        now = self.reactor.seconds()
        deadline = now + (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        self._pending[correlation_id] = _Pending(d, api_key, version, deadline)
        self._arm_timeout(deadline, now)
        return d

    def _arm_timeout(self, deadline: float, now: float) -> None:
        """Make the connection's timeout timer fire by C{deadline} (reactor seconds)."""
        call = self._timeout_call
        if call is None:
            self._timeout_call = self.reactor.callLater(max(0.0, deadline - now), self._check_timeouts)
        elif call.getTime() > deadline:
            call.reset(max(0.0, deadline - now))

    def _header_rest(self, api_key: int, version: int) -> tuple[bytes, bool]:
        """(the request header after the correlation id, whether the version is flexible), kept per version."""
        flexible = bool(request_schema(api_key, version).__flexible__)
        client = self.client_id.encode() if self.client_id is not None else None
        rest = _INT16.pack(-1) if client is None else _INT16.pack(len(client)) + client
        if flexible:
            rest += b"\x00"  # the header's tagged fields
        self._header_rests[(api_key, version)] = value = (rest, flexible)
        return value

    def _check_timeouts(self) -> None:
        """
        The timeout timer fired: fail the requests past their deadline, and
        close the connection, as Kafka's clients do (C{NetworkClient}
        disconnects a node on a request timeout; librdkafka too): the
        broker may be gone without a reset reaching us (a half-open
        connection), and the other requests waiting on it would each wait
        their own timeout.  They fail as the connection is lost
        (L{BrokerConnectionError}, retriable); the next request connects
        again.
        """
        self._timeout_call = None
        now = self.reactor.seconds()
        expired = [cid for cid, p in self._pending.items() if p.deadline <= now + 1e-9]
        closing = bool(expired) and self.transport is not None and self.connected
        if closing:
            self.connected = False  # no new request on it, not even from a timed-out one's errback
        for correlation_id in expired:
            self._timed_out(correlation_id)
        if closing:
            self.transport.abortConnection()  # connectionLost fails the others
            return
        if self._pending and self.connected:
            # (a request made by a failed request's errback may have armed it already)
            self._arm_timeout(min(p.deadline for p in self._pending.values()), now)

    def _timed_out(self, correlation_id: int) -> None:
        pending = self._pending.pop(correlation_id, None)
        if pending is not None:
            pending.deferred.errback(RequestTimedOutError(
                f"no response from broker {self.node_id} to API {pending.api_key} within"
                f" {self.request_timeout_ms} ms"))

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def negotiate(self) -> dict[int, int]:
        """
        Negotiate API versions (ApiVersions v3, or v0 when the broker lacks v3).

        @return: L{versions}.
        """
        response = await self.request(18, {"client_software_name": "kafkatw",
                                           "client_software_version": _client_version()}, version=3)
        if response.error_code == ErrorCode.unsupported_version:
            response = await self.request(18, {}, version=0)
        if response.error_code != ErrorCode.none:
            raise kafka_error(ErrorCode(int(response.error_code)), "ApiVersions failed")
        self.versions = common_versions(response.api_keys, CLIENT_VERSIONS)
        return self.versions


def unreachable(bootstrap_servers: str, timeout_s: float = 2.0) -> str | None:
    """
    Why no broker of C{bootstrap_servers} can be reached, or C{None} when one
    accepts a TCP connection: C{"connection refused to 127.0.0.1:9092"},
    C{"no answer from HOST:PORT within 2 s"}, C{"cannot resolve HOST"} (one
    clause per server, joined by C{"; "}).

    @param timeout_s: how long each connection attempt may take (s).
    @raise ValueError: C{bootstrap_servers} is not C{host:port[,host:port]}.
    """
    reasons = []
    for host, port in parse_bootstrap_servers(bootstrap_servers):
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return None
        except ConnectionRefusedError:
            reasons.append(f"connection refused to {host}:{port}")
        except socket.timeout:
            reasons.append(f"no answer from {host}:{port} within {timeout_s:g} s")
        except socket.gaierror:
            reasons.append(f"cannot resolve {host}")
        except OSError as e:
            reasons.append(f"cannot connect to {host}:{port}: {e.strerror or e}")
    return "; ".join(reasons) or None


def _why(reason: Any) -> str:
    """C{": <reason>"} for a connection lost to an error (a failed TLS handshake, say), else C{""}."""
    if reason is None or reason.check(ConnectionDone):
        return ""
    return f": {reason.getErrorMessage()}"


def _client_version() -> str:
    from .._version import __version__

    return __version__
