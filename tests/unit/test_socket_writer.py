"""
L{kafkatw.client.connection.SocketWriter} (issue 32): bytes go to a TCP
connection's socket at once while the transport's own buffer is empty, and
through C{transport.write} otherwise, so that the peer reads every byte in
the order written, whatever mix of writes, partial sends and flushes came
before.  A real loopback TCP connection with small socket buffers carries
the bytes (partial sends happen); the reactor is a L{MemoryReactor}: the
transport's buffer is flushed only when the test calls C{doWrite}.  Nothing
waits on time: the peer's socket is non-blocking and read until empty.
"""

from __future__ import annotations

import select
import socket
import struct

from hypothesis import event, given, settings
from hypothesis import strategies as st
from twisted.internet import tcp
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.ssl import CertificateOptions
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.connection import SocketWriter

BUFFER_BYTES = 4096  # each side's socket buffer (the kernel doubles it, and has a floor)


def connected_pair(test: SynchronousTestCase) -> tuple[tcp.Connection, socket.socket, MemoryReactor]:
    """A Twisted TCP transport on a loopback socket with small buffers, and its peer's socket (non-blocking)."""
    listener = socket.create_server(("127.0.0.1", 0))
    test.addCleanup(listener.close)
    peer = socket.socket()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)
    peer.connect(listener.getsockname())
    test.addCleanup(peer.close)
    peer.setblocking(False)
    ours, _ = listener.accept()
    test.addCleanup(ours.close)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
    ours.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ours.setblocking(False)
    reactor = MemoryReactor()
    transport = tcp.Connection(ours, Protocol(), reactor)
    transport.connected = 1
    return transport, peer, reactor


def drain(peer: socket.socket) -> bytes:
    """Everything the peer's socket holds now."""
    data = bytearray()
    while True:
        try:
            chunk = peer.recv(65536)
        except BlockingIOError:
            return bytes(data)
        if not chunk:
            return bytes(data)
        data += chunk


def pattern(number: int, size: int) -> bytes:
    """C{size} bytes that say which write they belong to (and where in it)."""
    return (struct.pack(">I", number) * (size // 4 + 1))[:size]


class SocketWriterTests(SynchronousTestCase):

    def setUp(self) -> None:
        self.transport, self.peer, self.reactor = connected_pair(self)
        self.writer = SocketWriter(self.transport)

    def test_written_at_once(self) -> None:
        """The bytes are on the peer's side at once; the transport never watched for writability."""
        self.assertIs(self.writer.socket, self.transport.socket)
        self.assertTrue(self.writer.write(b"request"))
        self.assertEqual(drain(self.peer), b"request")
        self.assertTrue(self.writer.buffer_empty())
        self.assertEqual(self.reactor.getWriters(), [])

    def test_after_bytes_the_transport_holds(self) -> None:
        """Bytes written through the transport and not yet sent go first: the next write queues behind them."""
        self.transport.write(b"first")
        self.assertFalse(self.writer.buffer_empty())
        self.assertFalse(self.writer.write(b"second"))
        self.assertEqual(drain(self.peer), b"")
        self.transport.doWrite()
        self.assertEqual(drain(self.peer), b"firstsecond")
        self.assertTrue(self.writer.buffer_empty())

    def test_partial_send(self) -> None:
        """What the socket does not take waits in the transport's buffer and follows once the peer reads."""
        data = pattern(1, 1 << 20)
        self.assertFalse(self.writer.write(data))
        self.assertFalse(self.writer.buffer_empty())
        received = bytearray(drain(self.peer))
        self.assertLess(len(received), len(data))
        for _ in range(10_000):
            if len(received) == len(data):
                break
            self.transport.doWrite()
            received += drain(self.peer)
        self.assertEqual(bytes(received), data)

    def test_socket_error_left_to_the_transport(self) -> None:
        """A send that fails does not raise: the transport's own write fails and loses the connection."""
        self.peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.peer.close()  # a reset
        readable, _, _ = select.select([self.transport.socket], [], [], 10.0)  # the reset has arrived
        self.assertTrue(readable)
        self.assertFalse(self.writer.write(b"x" * 100))
        self.assertIsNotNone(self.transport.doWrite())  # the reason the connection is lost

    def test_not_a_tcp_connection(self) -> None:
        """A test's transport is written through C{write}."""
        transport = StringTransport()
        writer = SocketWriter(transport)
        self.assertIsNone(writer.socket)
        self.assertFalse(writer.buffer_empty())
        self.assertFalse(writer.write(b"abc"))
        self.assertEqual(transport.value(), b"abc")

    def test_tls_is_never_written_at_once(self) -> None:
        """
        A TLS wrapper passes attribute reads through to the TCP transport under
        it (its C{socket} is the connection's): only a C{tcp.Connection} is
        written at once, else the bytes would bypass the encryption.
        """
        factory = TLSMemoryBIOFactory(CertificateOptions(), True, Factory.forProtocol(Protocol))
        wrapper = factory.buildProtocol(None)
        wrapper.transport = self.transport  # (not connected: no handshake starts)
        self.assertIs(getattr(wrapper, "socket"), self.transport.socket)
        self.assertIsNone(SocketWriter(wrapper).socket)
        self.transport.TLS = True  # a connection that started TLS itself
        self.assertIsNone(SocketWriter(self.transport).socket)


# Small writes, and writes from a buffer's size to several times what the two sockets hold, so
# that a write at once goes out in part (`--hypothesis-show-statistics`: in about a fifth of the
# examples; a whole write at once and one queued behind held bytes in about a third each).
size_st = st.one_of(st.integers(min_value=1, max_value=64),
                    st.integers(min_value=BUFFER_BYTES, max_value=16 * BUFFER_BYTES))
write_st = st.one_of(
    st.tuples(st.just("writer"), size_st),
    st.tuples(st.just("transport"), size_st),
    st.tuples(st.just("flush"), st.just(0)),
    st.tuples(st.just("read"), st.just(0)),
)


class OrderTests(SynchronousTestCase):
    """Any mix of writes at once, writes through the transport, flushes and reads: the peer reads them in order."""

    @settings(max_examples=60, deadline=None)
    @given(st.lists(write_st, min_size=1, max_size=25))
    def test_in_order(self, steps: list[tuple[str, int]]) -> None:
        transport, peer, _ = connected_pair(self)
        writer = SocketWriter(transport)
        written = bytearray()
        received = bytearray()
        for number, (kind, size) in enumerate(steps):
            if kind == "writer":
                data = pattern(number, size)
                queued_before = not writer.buffer_empty()
                if writer.write(data):
                    event("written at once, whole")
                elif queued_before:
                    event("queued behind bytes the transport held")
                else:
                    event("written at once in part, the rest queued")  # the socket was full
                written += data
            elif kind == "transport":
                data = pattern(number, size)
                transport.write(data)
                written += data
            elif kind == "flush":
                transport.doWrite()
            else:
                received += drain(peer)
        for _ in range(10_000):
            if len(received) >= len(written):
                break
            transport.doWrite()
            received += drain(peer)
        self.assertEqual(bytes(received), bytes(written))
