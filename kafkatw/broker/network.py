"""
The broker's connections: framing, ordered responses, and file-region sending.

Each connection reads size-prefixed frames with L{Int32StringReceiver}
(C{MAX_LENGTH} = C{socket.request.max.bytes}), hands each request to
L{KafkaApis.handle}, and writes the responses strictly in request order, as
Kafka does (a client matches responses to requests by order as well as by
correlation id).  A handler may answer at once or later (a long-polling fetch);
later responses wait for earlier ones.

A response is either C{bytes} (a frame without its size prefix) or a
C{(chunks, total_bytes)} pair whose chunks are C{bytes} and
L{kafkatw.storage.log.FileRegion}s.  Regions are sent by L{ResponseWriter}, an
C{IPullProducer}: with C{os.sendfile} from the segment file straight to the
socket when the transport is a plain TCP connection with an empty buffer, else
by reading the region in slices and writing them (TLS).  No record batch is
copied into Python memory on the sendfile path.

Bad frames: a frame over C{MAX_LENGTH} or one whose header does not parse closes
that connection with a log line; other connections carry on.

TLS listeners (C{SSL}, C{SASL_SSL}) wrap each connection in Twisted's
C{TLSMemoryBIOProtocol}; the connection learns of the finished handshake through
C{IHandshakeListener}, takes the principal C{User:<distinguished name>} of the
client certificate (mapped by C{ssl.principal.mapping.rules}; C{User:ANONYMOUS}
without one) and closes connections whose handshake takes longer than
C{ssl.handshake.timeout.ms} or fails (plaintext bytes, an untrusted or expired
certificate), with a log line saying why.  Fetch responses over TLS cannot use
C{sendfile}: L{ResponseWriter} reads each region in slices of C{_READ_SLICE}
bytes, one slice at a time as the TLS transport drains (docs/security.md).
"""

from __future__ import annotations

import os
import socket
import struct
from collections import deque
from typing import Any, NamedTuple

from twisted.internet import defer
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHandshakeListener, IPullProducer
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.protocols.basic import Int32StringReceiver
from zope.interface import implementer

from ..client.connection import SocketWriter
from ..protocol.framing import FrameBuffer, FrameSizeError, ReadSizer
from ..protocol.messages import API_NAMES, MalformedRequest, UnsupportedVersion, parse_request_header
from ..security.tls import distinguished_name
from .request_context import ANONYMOUS, ConnectionContext

__all__ = ["KafkaConnection", "KafkaServerFactory", "ResponseWriter", "TLSListenerPolicy"]

_log = Logger()
_SIZE = struct.Struct(">i")
_READ_SLICE = 256 * 1024
#: send(2)'s "more data follows" flag (Linux; 0 elsewhere: each piece is pushed at once)
_MSG_MORE = getattr(socket, "MSG_MORE", 0)


@implementer(IPullProducer)
class ResponseWriter:
    """
    Writes queued responses (bytes and file regions) to a transport, in order.

    @ivar queue: chunks still to write: C{bytes} or regions
        (C{fileno}, C{position}, C{length}).
    @cvar sendfile_bytes: record bytes sent with C{os.sendfile} by this process.
    @cvar copied_bytes: record bytes read into memory and written instead.
    """

    sendfile_bytes = 0
    copied_bytes = 0

    def __init__(self, transport: Any, on_idle: Any) -> None:
        self.transport = transport
        self.queue: deque[Any] = deque()
        self.registered = False
        self._on_idle = on_idle
        self._socket_writer = SocketWriter(transport)
        self._sendfile_fd: int | None = None
        if self._socket_writer.socket is not None:
            try:
                self._sendfile_fd = self._socket_writer.socket.fileno()
            except OSError:
                self._sendfile_fd = None

    def write_chunks(self, chunks: list[Any]) -> None:
        self.queue.extend(chunks)
        if not self.registered:
            self.registered = True
            self.transport.registerProducer(self, False)

    def write_bytes(self, data: bytes) -> None:
        """
        Write C{data} after what is queued: at once when nothing waits before
        it (L{SocketWriter}), else in order.
        """
        if self.registered:
            self.write_chunks([data])
        else:
            self._socket_writer.write(data)

    def resumeProducing(self) -> None:
        queue = self.queue
        while queue:
            chunk = queue[0]
            if isinstance(chunk, bytes):
                queue.popleft()
                if self._sendfile_fd is not None and self._socket_writer.buffer_empty():
                    # Send it straight to the socket, so that the transport's
                    # buffer stays empty and the region after it can go by
                    # sendfile: the bytes up to the next region in one send (a
                    # response's size prefix and header), held back (MSG_MORE)
                    # to leave in the same segments as the region's first bytes.
                    # Sent apart, each piece is a TCP segment of its own (no
                    # Nagle) that wakes the reader for a few bytes: a follower
                    # would read a fetch response's 4-byte size, then its
                    # header, then the records, each after a wakeup of its own.
                    if queue and isinstance(queue[0], bytes):
                        pieces = [chunk]
                        while queue and isinstance(queue[0], bytes):
                            pieces.append(queue.popleft())
                        chunk = b"".join(pieces)
                    flags = _MSG_MORE if queue and queue[0].length > 0 else 0
                    if not self._socket_writer.write(chunk, flags):
                        return  # resumed once the transport has drained the rest
                    continue
                self.transport.write(chunk)
                continue
            fileno, position, length = chunk.fileno, chunk.position, chunk.length
            if self._sendfile_fd is not None and not self._socket_writer.buffer_empty():
                # Earlier responses are still in the transport's buffer: wait for
                # it to drain (the transport then resumes us) and sendfile after.
                return
            if self._sendfile_fd is not None:
                try:
                    sent = os.sendfile(self._sendfile_fd, fileno, position, length)
                except BlockingIOError:
                    sent = 0
                except OSError as e:
                    if e.errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: no sendfile here
                        self._sendfile_fd = None
                        continue
                    _log.warn("sendfile failed: {error}; closing connection", error=e)
                    self.transport.abortConnection()
                    return
                ResponseWriter.sendfile_bytes += sent
                if sent == length:
                    queue.popleft()
                    continue
                if sent:
                    position += sent
                    length -= sent
            # The socket is full (or no sendfile): hand a slice to the transport,
            # which calls us again once it has drained it.
            n = min(length, _READ_SLICE)
            try:
                data = os.pread(fileno, n, position)
            except OSError as e:
                _log.warn("reading a segment for a fetch failed: {error}; closing connection", error=e)
                self.transport.abortConnection()
                return
            if len(data) != n:
                _log.warn("segment shorter than the region being fetched; closing connection")
                self.transport.abortConnection()
                return
            if n == length:
                queue.popleft()
            else:
                queue[0] = chunk._replace(position=position + n, length=length - n)
            ResponseWriter.copied_bytes += n
            self.transport.write(data)
            return
        self.registered = False
        self.transport.unregisterProducer()
        self._on_idle()

    def stopProducing(self) -> None:
        self.queue.clear()
        self.registered = False


class _Cork:
    """
    Holds back the bytes responses that complete while a connection's read
    is handled (its own requests, or those its requests complete elsewhere:
    produce requests waiting for this follower's fetch), and writes each
    connection's together when the outermost read ends: one send for the
    responses to a client's pipelined requests, not one each, as Twisted's
    buffering at the end of the reactor's turn did, but without waiting for
    the rest of the turn.  One per process (reads do not nest across brokers
    in one process except in tests and the simulation, where they share it).
    """

    __slots__ = ("depth", "connections")

    def __init__(self) -> None:
        self.depth = 0  # reads being handled
        self.connections: list[KafkaConnection] = []  # with responses held back

    def release(self) -> None:
        connections, self.connections = self.connections, []
        for connection in connections:
            connection._release_corked()


_CORK = _Cork()


class _Slot:
    __slots__ = ("response", "done", "api_key", "received")

    def __init__(self, api_key: int = -1, received: float = 0.0) -> None:
        self.response: Any = None
        self.done = False
        #: For RequestMetrics (L{kafkatw.broker.metrics.RequestMetrics}): the API and the frame's arrival (s).
        self.api_key = api_key
        self.received = received


class TLSListenerPolicy(NamedTuple):
    """
    What a TLS listener's connections do around the handshake.

    @ivar reactor: schedules the handshake timeout.
    @ivar handshake_timeout_ms: C{ssl.handshake.timeout.ms}.
    @ivar principal_name: distinguished name (RFC 2253) -> principal name
        (L{kafkatw.security.tls.PrincipalMapper.name}; raises C{ValueError}
        when no rule matches).
    @ivar verify_log: the listener's L{kafkatw.security.tls.VerifyLog} (why a
        client certificate was refused), or C{None}.
    """

    reactor: Any
    handshake_timeout_ms: int
    principal_name: Any
    verify_log: Any = None


@implementer(IHandshakeListener)
class KafkaConnection(Int32StringReceiver):
    """
    One client connection to the broker.

    @ivar apis: the L{kafkatw.broker.apis.KafkaApis} serving requests.
    @ivar tls: the L{TLSListenerPolicy} of a TLS listener's connection, else C{None}.
    """

    def __init__(self, apis: Any, max_request_bytes: int, listener_name: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT", tls: TLSListenerPolicy | None = None,
                 authenticator: Any = None) -> None:
        self.apis = apis
        self.MAX_LENGTH = max_request_bytes
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.context = ConnectionContext(listener_name, security_protocol, connection=self)
        self.tls = tls
        self.handshake_done = False
        self._handshake_timer: Any = None
        self._slots: deque[_Slot] = deque()
        self._writer: ResponseWriter | None = None
        #: response frames held back while a read is handled (L{_Cork})
        self._corked: list[bytes] = []
        self._closed = False
        self.peer = "?"
        self._frames = FrameBuffer(max_request_bytes)
        self._read_sizer = ReadSizer(None)
        #: The call that unmutes a throttled connection (KIP-219), else C{None}.
        self._unmute_call: Any = None
        #: The L{kafkatw.broker.authenticator.SaslServerAuthenticator} of a SASL
        #: listener's connection (made by C{authenticator(connection)}), which
        #: takes every frame until the client has authenticated; else C{None}.
        self.authenticator = authenticator(self) if authenticator is not None else None
        if self.authenticator is not None:
            self._frames.max_size = min(max_request_bytes, self.authenticator.max_receive_size)

    def connectionMade(self) -> None:
        # Responses go out as several writes (header, then file regions): without
        # TCP_NODELAY the last one can wait for the client's delayed ACK (~40 ms).
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(True)
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        self.context = self.context._replace(client_host=getattr(peer, "host", ""),
                                             client_port=getattr(peer, "port", -1))
        self._writer = ResponseWriter(self.transport, self._flush)
        # a produce request of a megabyte is read in one or two reads, not sixteen
        self._read_sizer = ReadSizer(self.transport)
        if self.tls is not None:
            self._handshake_timer = self.tls.reactor.callLater(self.tls.handshake_timeout_ms / 1000.0,
                                                               self._handshake_timed_out)
        self.apis.connection_opened(self)

    def _handshake_timed_out(self) -> None:
        self._handshake_timer = None
        _log.warn("closing connection from {peer} on listener {listener}: no TLS handshake within"
                  " ssl.handshake.timeout.ms={timeout}", peer=self.peer, listener=self.listener_name,
                  timeout=self.tls.handshake_timeout_ms if self.tls else 0)
        self._closed = True
        self.transport.abortConnection()

    def handshakeCompleted(self) -> None:
        """
        The TLS handshake is done (C{IHandshakeListener}).  On C{SSL} the
        principal is the client certificate's distinguished name mapped by
        C{ssl.principal.mapping.rules}, or C{User:ANONYMOUS}; on C{SASL_SSL}
        the SASL exchange names it, and a client certificate (checked by the
        handshake) is not mapped, as Kafka's C{SaslServerAuthenticator} does.
        """
        self.handshake_done = True
        if self._handshake_timer is not None and self._handshake_timer.active():
            self._handshake_timer.cancel()
        self._handshake_timer = None
        if self.security_protocol != "SSL":
            _log.info("TLS connection from {peer} on listener {listener}: SASL authentication follows",
                      peer=self.peer, listener=self.listener_name)
            return
        certificate = self.transport.getPeerCertificate()
        if certificate is None or self.tls is None:
            principal = ANONYMOUS
        else:
            dn = distinguished_name(certificate)
            try:
                principal = f"User:{self.tls.principal_name(dn)}"
            except ValueError as e:
                _log.warn("closing connection from {peer} on listener {listener}: {error}", peer=self.peer,
                          listener=self.listener_name, error=e)
                self._closed = True
                self.transport.abortConnection()
                return
        self.context = self.context._replace(principal=principal)
        _log.info("TLS connection from {peer} on listener {listener}: principal {principal}", peer=self.peer,
                  listener=self.listener_name, principal=principal)

    def _refused_certificate(self) -> str:
        """Why the client's certificate was refused (C{TLSListenerPolicy.verify_log}), else C{""}."""
        verify_log = self.tls.verify_log if self.tls is not None else None
        get_handle = getattr(self.transport, "getHandle", None)
        if verify_log is None or get_handle is None:
            return ""
        why = verify_log.why(get_handle())
        return f" ({why})" if why else ""

    def connectionLost(self, reason: Any = None) -> None:
        if self._unmute_call is not None and self._unmute_call.active():
            self._unmute_call.cancel()
        self._unmute_call = None
        if self._handshake_timer is not None and self._handshake_timer.active():
            self._handshake_timer.cancel()
        if self.tls is not None and not self.handshake_done and not self._closed:
            if reason is not None and reason.check(ConnectionDone):  # a port probe, say
                _log.info("connection from {peer} on listener {listener} closed before its TLS handshake",
                          peer=self.peer, listener=self.listener_name)
            else:
                _log.warn("TLS handshake from {peer} on listener {listener} failed: {reason}{detail}", peer=self.peer,
                          listener=self.listener_name,
                          reason=reason.getErrorMessage() if reason is not None else "?",
                          detail=self._refused_certificate())
        self._closed = True
        if self.authenticator is not None:
            self.authenticator.connection_lost()
        self._slots.clear()
        self.apis.connection_closed(self)

    def dataReceived(self, data: bytes) -> None:
        """
        Split the stream into frames with L{FrameBuffer}, which replaces
        L{Int32StringReceiver.dataReceived} (quadratic for large requests).
        Once a request's response throttles the connection (L{throttle}),
        the requests already received after it stay buffered until it is unmuted.

        Consecutive Produce requests read together (one or more) are served
        as one L{kafkatw.broker.produce_apis.ProduceRun}: one write per partition for
        all of them, then their responses, in order (unless client quotas are
        on, whose throttles need each request served before the next is read).

        Responses completed meanwhile, on this connection or another, are
        written when the read is handled (L{_Cork}).
        """
        cork = _CORK
        cork.depth += 1
        try:
            self._data_received(data)
        finally:
            cork.depth -= 1
            if not cork.depth and cork.connections:
                cork.release()

    def _data_received(self, data: bytes) -> None:
        if self.authenticator is None or self.authenticator.complete:
            make_run = getattr(self.apis, "produce_run", None)
            run = make_run() if make_run is not None and self._unmute_call is None else None
            if run is not None:
                self._frames_received(data, run)
                self._read_sizer.follow(self._frames)
                return
        try:
            for frame in self._frames.feed(data):
                if self._closed:
                    break
                self.stringReceived(frame)
                if self._unmute_call is not None:
                    break  # throttled: the frames after it wait in the buffer until unmuted
        except FrameSizeError as e:
            self.lengthLimitExceeded(e.size)
            return
        self._read_sizer.follow(self._frames)

    def _frames_received(self, data: bytes, run: Any) -> None:
        """L{dataReceived} without client quotas: runs of Produce requests go through C{run}."""
        frames: list[memoryview] = []
        size_error = None
        try:
            frames.extend(self._frames.feed(data))
        except FrameSizeError as e:
            size_error = e
        count = len(frames)
        i = 0
        while i < count and not self._closed:
            frame = frames[i]
            j = i
            while j < count and len(frames[j]) > 1 and frames[j][0] == 0 and frames[j][1] == 0:
                j += 1  # API key 0: Produce
            if j > i:
                self._produce_run(frames[i:j], run)
                i = j
            else:
                self.stringReceived(frame)
                i += 1
        if size_error is not None and not self._closed:
            self.lengthLimitExceeded(size_error.size)

    def _produce_run(self, frames: list[memoryview], run: Any) -> None:
        """
        Serve Produce requests read together: their appends are written once
        (C{run.finish()}) before any of them is answered.  A frame that does
        not parse ends the run: the requests before it are answered, then the
        connection is closed.
        """
        apis = self.apis
        request_metrics = getattr(apis, "request_metrics", None)
        simple = getattr(apis, "produce_in_run", None)
        not_simple = getattr(apis, "NOT_SIMPLE", None)
        context = self.context
        handled: list[tuple[Any, float, int]] = []
        failure: tuple[Any, Exception] | None = None
        try:
            for frame in frames:
                received = request_metrics.clock() if request_metrics is not None else 0.0
                if simple is not None:
                    answered = simple(frame, context, run)
                    if answered is None:
                        continue  # acks=0: no answer
                    if answered is not not_simple:
                        handled.append((answered[0], received, answered[1]))
                        continue
                try:
                    header = parse_request_header(frame)
                except MalformedRequest as e:
                    failure = (None, e)
                    break
                try:
                    index = apis.handle(header, frame, context, run)
                except (MalformedRequest, UnsupportedVersion) as e:
                    failure = (header, e)
                    break
                if index is not None:  # None: acks=0, no answer
                    handled.append((header, received, index))
        finally:
            answers = run.finish()
        for header, received, index in handled:
            self._answer(header, received, answers[index])
        if failure is not None:
            header, error = failure
            self._refuse(header, error)

    def _refuse(self, header: Any, error: Exception) -> None:
        """Close the connection for a request that does not parse (C{header} C{None}) or is not served."""
        if header is None:
            _log.warn("closing connection from {peer}: malformed request ({error})", peer=self.peer, error=error)
        else:
            _log.warn(
                "closing connection from {peer}: {api} v{version}: {error}",
                peer=self.peer, api=API_NAMES.get(header.api_key, header.api_key),
                version=header.api_version, error=error,
            )
        self._release_corked()  # the answers to the requests before it
        self._closed = True
        self.transport.abortConnection()

    def lengthLimitExceeded(self, length: int) -> None:
        setting = "socket.request.max.bytes"
        if self.authenticator is not None and not self.authenticator.complete:
            setting = "sasl.server.max.receive.size before authentication"
        _log.warn(
            "closing connection from {peer}: request size {length} is outside 0..{setting}={limit}",
            peer=self.peer, length=length, setting=setting, limit=self._frames.max_size,
        )
        self._release_corked()  # the answers to the requests before it
        self._closed = True
        self.transport.abortConnection()

    def stringReceived(self, frame: bytes) -> None:
        if self._closed:
            return
        if self.authenticator is not None and not self.authenticator.complete:
            self.authenticator.frame_received(frame)
            return
        try:
            header = parse_request_header(frame)
        except MalformedRequest as e:
            self._refuse(None, e)
            return
        request_metrics = getattr(self.apis, "request_metrics", None)
        received = request_metrics.clock() if request_metrics is not None else 0.0
        try:
            result = self.apis.handle(header, frame, self.context)
        except (MalformedRequest, UnsupportedVersion) as e:
            self._refuse(header, e)
            return
        self._answer(header, received, result)

    def _answer(self, header: Any, received: float, result: Any) -> None:
        """Queue a request's answer (C{None}: none) behind the earlier ones and write what is ready."""
        if result is None:  # e.g. Produce with acks=0: no response at all
            return
        request_metrics = getattr(self.apis, "request_metrics", None)
        slot = _Slot(header.api_key, received)
        if request_metrics is not None:
            request_metrics.record("requestqueuetimems", header.api_key, 0.0)
        self._slots.append(slot)
        if isinstance(result, defer.Deferred):
            result.addCallback(self._complete, slot)
            result.addErrback(self._failed, header)
        else:
            self._complete(result, slot)

    def _failed(self, failure: Any, header: Any) -> None:
        _log.failure(
            "handler for {api} v{version} from {peer} failed; closing connection",
            failure, api=API_NAMES.get(header.api_key, header.api_key), version=header.api_version, peer=self.peer,
        )
        if not self._closed:
            self._closed = True
            self.transport.abortConnection()

    def _complete(self, response: Any, slot: _Slot) -> None:
        slot.response = response
        slot.done = True
        self._flush()

    def _flush(self) -> None:
        writer = self._writer
        if writer is None or self._closed:
            return
        slots = self._slots
        request_metrics = getattr(self.apis, "request_metrics", None)
        while slots and slots[0].done:
            slot = slots.popleft()
            response = slot.response
            if request_metrics is not None:
                handed = request_metrics.clock()
            if isinstance(response, bytes):
                if _CORK.depth:
                    if not self._corked:
                        _CORK.connections.append(self)
                    self._corked.append(_SIZE.pack(len(response)))
                    self._corked.append(response)
                else:
                    writer.write_bytes(_SIZE.pack(len(response)) + response)
            else:
                chunks, total = response
                if self._corked:  # held back before it: in order, in the same write
                    held, self._corked = self._corked, []
                    writer.write_chunks([*held, _SIZE.pack(total), *chunks])
                else:
                    writer.write_chunks([_SIZE.pack(total), *chunks])
            if request_metrics is not None:
                sent = request_metrics.clock()
                request_metrics.record("responsesendtimems", slot.api_key, (sent - handed) * 1000.0)
                request_metrics.record("totaltimems", slot.api_key, (sent - slot.received) * 1000.0)

    def _release_corked(self) -> None:
        """Write the responses held back while a read was handled (L{_Cork}), in one write."""
        held, self._corked = self._corked, []
        writer = self._writer
        if held and writer is not None and not self._closed:
            writer.write_bytes(b"".join(held))

    # --- client quotas (KIP-219) ----------------------------------------------

    def throttle(self, throttle_time_ms: int) -> None:
        """
        Mute the connection for C{throttle_time_ms} (ms), as Kafka's broker
        does after a response whose C{throttle_time_ms} it set (KIP-219): no
        more requests are read from it (C{pauseProducing} on the transport;
        responses still go out) until the time has passed.  A longer throttle
        while muted extends it; a shorter one changes nothing.
        """
        if throttle_time_ms <= 0 or self._closed or self.transport is None:
            return
        clock = self.apis.reactor
        delay = throttle_time_ms / 1000.0
        call = self._unmute_call
        if call is not None and call.active():
            if call.getTime() >= clock.seconds() + delay:
                return
            call.reset(delay)
            return
        self.transport.pauseProducing()
        self._unmute_call = clock.callLater(delay, self._unmute)

    def _unmute(self) -> None:
        self._unmute_call = None
        if not self._closed:
            self.transport.resumeProducing()
            self.dataReceived(b"")  # the requests that arrived with the throttled one

    @property
    def muted(self) -> bool:
        """Whether the connection is muted by a quota throttle."""
        return self._unmute_call is not None and self._unmute_call.active()

    # --- what the SASL authenticator uses --------------------------------------

    def write_frame(self, data: bytes) -> None:
        """Write one frame (a response, or a bare SASL token) now."""
        if not self._closed:
            self.transport.write(_SIZE.pack(len(data)) + data)

    def close(self, abort: bool = False) -> None:
        """Close once what was written is sent (at once with C{abort})."""
        if self._closed:
            return
        self._closed = True
        if abort:
            self.transport.abortConnection()
        else:
            self.transport.loseConnection()

    def authenticated(self, principal: str) -> None:
        """The client authenticated as C{principal}: serve its requests from now on."""
        self.context = self.context._replace(principal=principal)
        self._frames.max_size = self.MAX_LENGTH

    @property
    def idle(self) -> bool:
        """No request in progress and nothing left to write."""
        return not self._slots and not self._corked and not (self._writer and self._writer.registered)


class KafkaServerFactory(Factory):
    """Makes L{KafkaConnection}s sharing one L{KafkaApis}."""

    def __init__(self, apis: Any, max_request_bytes: int, listener_name: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT", tls: TLSListenerPolicy | None = None,
                 authenticator: Any = None) -> None:
        self.apis = apis
        self.max_request_bytes = max_request_bytes
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.tls = tls
        #: C{authenticator(connection)} makes a connection's SASL authenticator (SASL listeners).
        self.authenticator = authenticator

    def buildProtocol(self, addr: Any) -> KafkaConnection:
        connection = KafkaConnection(self.apis, self.max_request_bytes, self.listener_name, self.security_protocol,
                                     self.tls, self.authenticator)
        connection.factory = self
        return connection
