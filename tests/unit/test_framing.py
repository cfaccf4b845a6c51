"""Tests of the sans-IO frame splitter shared by the broker and the clients."""

from __future__ import annotations

import socket
import struct
from typing import Iterator

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import tcp
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock
from twisted.trial import unittest

from kafkatw.protocol.framing import MAX_READ_BYTES, FrameBuffer, FrameSizeError, ReadSizer


def framed(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def chunked(stream: bytes, cuts: list[int]) -> Iterator[tuple[bytes, int]]:
    """C{stream} cut into chunks of the sizes C{cuts} (cycled): each chunk and the position after it."""
    position = 0
    i = 0
    while position < len(stream):
        chunk = stream[position:position + cuts[i % len(cuts)]]
        position += len(chunk)
        i += 1
        yield chunk, position


class FrameBufferTests(unittest.TestCase):
    @given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 50), min_size=1))
    def test_any_chunking_yields_the_frames(self, payloads: list[bytes], cuts: list[int]) -> None:
        stream = framed(*payloads)
        frames = FrameBuffer(1000)
        out: list[bytes] = []
        for chunk, _ in chunked(stream, cuts):
            out.extend(bytes(f) for f in frames.feed(chunk))
        self.assertEqual(out, payloads)

    def test_frames_are_views_of_one_buffer(self) -> None:
        [a, b] = list(FrameBuffer(100).feed(framed(b"abc", b"de")))
        self.assertIsInstance(a, memoryview)
        self.assertTrue(a.readonly)
        self.assertEqual((bytes(a), bytes(b)), (b"abc", b"de"))

    def test_sizes_out_of_bounds(self) -> None:
        with self.assertRaises(FrameSizeError) as caught:
            list(FrameBuffer(10).feed(struct.pack(">i", 11)))
        self.assertEqual(caught.exception.size, 11)
        self.assertRaises(FrameSizeError, list, FrameBuffer(10).feed(struct.pack(">i", -1)))
        self.assertRaises(FrameSizeError, list, FrameBuffer(10, min_size=4).feed(struct.pack(">i", 3)))

    def test_a_large_frame_is_joined_once_complete(self) -> None:
        frames = FrameBuffer(1 << 20)
        stream = framed(b"x" * 100_000) + framed(b"next")[:2]
        body_end = 4 + 100_000
        for start in range(0, body_end - 1, 1000):
            self.assertEqual(list(frames.feed(stream[start:min(start + 1000, body_end - 1)])), [])
        [frame] = list(frames.feed(stream[body_end - 1:]))
        self.assertEqual(len(frame), 100_000)
        [following] = list(frames.feed(framed(b"next")[2:]))
        self.assertEqual(bytes(following), b"next")


class _Transport:
    """What L{ReadSizer} touches of a Twisted TCP transport: its read size."""

    def __init__(self, buffer_size: int = 65536) -> None:
        self.bufferSize = buffer_size


class ReadSizerTests(unittest.TestCase):
    @given(st.lists(st.integers(0, 3000), min_size=1, max_size=6), st.lists(st.integers(1, 2000), min_size=1, max_size=6))
    def test_reads_follow_the_frame_being_received(self, sizes: list[int], cuts: list[int]) -> None:
        """
        Fed any chunking of frames of any size, the transport reads what the
        frame being received still needs (at most max_read_bytes), and its own
        read size when that is less; the frames come out whole.  (Scaled down:
        reads of 64 bytes, at most 1,024; the broker's are 64 KiB and 1 MiB.)
        """
        stream = b"".join(struct.pack(">i", n) + bytes(n) for n in sizes)
        ends = []
        position = 0
        for n in sizes:
            position += 4 + n
            ends.append(position)
        transport = _Transport(64)
        sizer = ReadSizer(transport, max_read_bytes=1024)
        frames = FrameBuffer(4000)
        out: list[int] = []
        for chunk, position in chunked(stream, cuts):
            out.extend(len(f) for f in frames.feed(chunk))
            sizer.follow(frames)
            # the model: the stream after the last whole frame holds the next size prefix, then its body
            start = max([0] + [end for end in ends if end <= position])
            if position - start < 4:
                missing = 4 - (position - start)
            else:
                missing = min(end for end in ends if end > position) - position
            self.assertEqual(frames.missing_bytes, missing)
            self.assertEqual(transport.bufferSize, 64 if missing <= 64 else min(missing, 1024))
        self.assertEqual(out, sizes)
        self.assertEqual(transport.bufferSize, 64)

    def test_a_megabyte_frame_is_read_in_one_more_read(self) -> None:
        transport = _Transport()
        sizer = ReadSizer(transport)
        frames = FrameBuffer(4 * MAX_READ_BYTES)
        stream = framed(bytes(1_000_000))
        self.assertEqual(list(frames.feed(stream[:65536])), [])
        sizer.follow(frames)
        self.assertEqual(transport.bufferSize, len(stream) - 65536)
        [frame] = list(frames.feed(stream[65536:]))
        sizer.follow(frames)
        self.assertEqual((len(frame), transport.bufferSize), (1_000_000, 65536))
        list(frames.feed(struct.pack(">i", 3 * MAX_READ_BYTES)))
        sizer.follow(frames)
        self.assertEqual(transport.bufferSize, MAX_READ_BYTES)

    def test_transports_without_a_read_size_are_left_alone(self) -> None:
        frames = FrameBuffer(4 * MAX_READ_BYTES)
        list(frames.feed(struct.pack(">i", 2 * MAX_READ_BYTES)))
        transport = object()
        ReadSizer(transport).follow(frames)  # no bufferSize: nothing to set, nothing raised
        ReadSizer(None).follow(frames)
        self.assertFalse(hasattr(transport, "bufferSize"))

    def test_twisted_tcp_reads_up_to_buffer_size(self) -> None:
        """
        The Twisted behaviour L{ReadSizer} relies on (docs/design.md): one
        C{tcp.Connection.doRead} reads up to the transport's C{bufferSize}.
        Fails loudly if Twisted changes how it sizes its reads.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        ours.setblocking(False)
        reads: list[int] = []

        class Reads(Protocol):
            def dataReceived(self, data: bytes) -> None:
                reads.append(len(data))

        connection = tcp.Connection(ours, Reads(), MemoryReactorClock())
        self.assertEqual(connection.bufferSize, 65536)
        theirs.sendall(bytes(150_000))
        connection.doRead()
        self.assertEqual(reads, [65536])
        connection.bufferSize = 200_000
        connection.doRead()
        self.assertEqual(reads, [65536, 150_000 - 65536])
