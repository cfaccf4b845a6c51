"""
L{kafkatw.broker.network.ResponseWriter} on a plain TCP connection (issue 32):
a response's bytes up to its first file region (the size prefix and the
header of a fetch response) go out in one C{send} flagged C{MSG_MORE}, so
that they leave in the same segments as the region's first bytes, which
follow by C{sendfile}.  Sent apart, each piece was a TCP segment of its own
(C{TCP_NODELAY}) that woke the follower for four bytes, then for the header.

A real loopback TCP connection carries the bytes; its socket is wrapped to
record the sends (their bytes and flags).  Nothing waits on time: each
response is small enough for the socket buffers, and the reading side reads
exactly the bytes sent.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Any

from twisted.internet import tcp
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker.network import ResponseWriter
from kafkatw.storage.segment import FileRegion

MSG_MORE = getattr(socket, "MSG_MORE", 0)


class _RecordingSocket:
    """A connected socket whose C{send} calls are recorded as C{(bytes, flags)}."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sends: list[tuple[bytes, int]] = []

    def send(self, data: Any, flags: int = 0) -> int:
        self.sends.append((bytes(data), flags))
        return self.sock.send(data, flags)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class ResponseWriterSendTests(SynchronousTestCase):

    def setUp(self) -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        self.peer = socket.create_connection(listener.getsockname(), timeout=5)
        self.addCleanup(self.peer.close)
        server, _ = listener.accept()
        self.addCleanup(server.close)
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server.setblocking(False)
        self.sock = _RecordingSocket(server)
        self.transport = tcp.Connection(self.sock, Protocol(), MemoryReactor())
        self.transport.connected = 1
        self.idle: list[bool] = []
        self.writer = ResponseWriter(self.transport, lambda: self.idle.append(True))

    def region(self, payload: bytes) -> FileRegion:
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(payload)
        fd = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        return FileRegion(fd, path, 0, len(payload))

    def received(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.peer.recv(size - len(data))
            if not chunk:
                break
            data += chunk
        return bytes(data)

    def test_prefix_and_header_in_one_send_before_the_region(self) -> None:
        """
        The size prefix and the header of a fetch response go out in one
        C{send} flagged C{MSG_MORE}; the region follows by C{sendfile}
        (no other C{send}), and the reader gets the frame whole.
        """
        payload = os.urandom(200_000)
        header = b"\x00\x00\x00\x2a" + b"h" * 69
        prefix = struct.pack(">i", len(header) + len(payload))
        sendfile_before = ResponseWriter.sendfile_bytes
        self.writer.write_chunks([prefix, header, self.region(payload)])
        self.assertEqual(self.sock.sends, [(prefix + header, MSG_MORE)])
        self.assertEqual(ResponseWriter.sendfile_bytes - sendfile_before, len(payload))
        self.assertEqual(self.idle, [True])
        self.assertFalse(self.writer.registered)
        self.assertEqual(self.received(4 + len(header) + len(payload)), prefix + header + payload)

    def test_bytes_between_regions(self) -> None:
        """
        Bytes between two regions (the next partition's fields) go in one
        C{send} held back for the second region; the last bytes of a response
        (no region after them) are pushed at once.
        """
        first, second = os.urandom(5000), os.urandom(7000)
        chunks = [b"\x00\x00\x00\x10", b"head", self.region(first), b"mid1", b"mid2", self.region(second), b"tail"]
        self.writer.write_chunks(chunks)
        self.assertEqual(self.sock.sends, [(b"\x00\x00\x00\x10head", MSG_MORE), (b"mid1mid2", MSG_MORE),
                                           (b"tail", 0)])
        expected = b"\x00\x00\x00\x10head" + first + b"mid1mid2" + second + b"tail"
        self.assertEqual(self.received(len(expected)), expected)

    def test_no_region_after(self) -> None:
        """
        A response of bytes only, and bytes before an empty region, are
        pushed at once: nothing is held back waiting for bytes that never come.
        """
        empty = FileRegion(self.region(b"x").fileno, "", 0, 0)
        self.writer.write_chunks([b"\x00\x00\x00\x03", b"abc"])
        self.writer.write_chunks([b"\x00\x00\x00\x02", b"de", empty])
        self.assertEqual(self.sock.sends, [(b"\x00\x00\x00\x03abc", 0), (b"\x00\x00\x00\x02de", 0)])
        self.assertEqual(self.received(13), b"\x00\x00\x00\x03abc\x00\x00\x00\x02de")
