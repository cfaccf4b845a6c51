"""
Kafka's framing, sans-IO: a stream of C{int32 size, bytes[size]} frames.

L{FrameBuffer} turns the chunks a transport delivers into whole frames.  Reads
are kept as a list until a whole frame is there, then joined once, and frames
are handed out as read-only memoryviews of that one buffer (kio decodes them
without a copy).  Twisted's C{IntNStringReceiver} concatenates its whole buffer
on every read instead: quadratic for the megabyte produce requests and fetch
responses real clients exchange.

L{ReadSizer} makes a Twisted TCP transport read the rest of a large frame at
once (as Kafka's C{NetworkReceive} reads into a buffer of the frame's size)
instead of in Twisted's 64 KiB reads.
"""

from __future__ import annotations

import struct
from typing import Any, Iterator

__all__ = ["FrameBuffer", "FrameSizeError", "ReadSizer", "MAX_READ_BYTES"]

_SIZE = struct.Struct(">i")


class FrameSizeError(ValueError):
    """A size prefix outside C{min_size..max_size}; C{.size} holds it."""

    def __init__(self, size: int) -> None:
        super().__init__(f"frame size {size}")
        self.size = size


#: The largest read L{ReadSizer} asks for (bytes): a megabyte produce request
#: or fetch response in one or two reads, not sixteen.
MAX_READ_BYTES = 1 << 20


class FrameBuffer:
    """
    @param max_size: the largest frame accepted (bytes).
    @param min_size: the smallest frame accepted (bytes).
    """

    def __init__(self, max_size: int, min_size: int = 0) -> None:
        self.max_size = max_size
        self.min_size = min_size
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._need = 4

    def feed(self, data: bytes) -> Iterator[memoryview]:
        """
        Add C{data}; yield every frame now complete (without its size prefix).

        @raise FrameSizeError: a size prefix out of bounds (the stream is then
            unusable: the caller closes the connection).
        """
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered < self._need:
            return
        alldata = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks = []
        self._buffered = 0
        end = len(alldata)
        view = memoryview(alldata)
        offset = 0
        need = 4
        unpack_from = _SIZE.unpack_from
        try:
            while end - offset >= 4:
                (length,) = unpack_from(alldata, offset)
                if length > self.max_size or length < self.min_size:
                    raise FrameSizeError(length)
                if end - offset - 4 < length:
                    need = 4 + length
                    break
                start = offset + 4
                offset = start + length
                yield view[start:offset]
        finally:
            if offset < end:
                rest = alldata[offset:] if offset else alldata
                self._chunks = [rest]
                self._buffered = len(rest)
            self._need = need

    @property
    def missing_bytes(self) -> int:
        """Bytes still to come before the next frame is whole (at least its size prefix's)."""
        return self._need - self._buffered


class ReadSizer:
    """
    Sizes a Twisted TCP transport's reads to the frame being received.

    C{twisted.internet.tcp.Connection.doRead} reads up to the transport's
    C{bufferSize} (64 KiB) per call, one reactor turn each: a 1 MiB frame
    takes 16 reads.  While a frame needs more than that, L{follow} sets
    C{bufferSize} to what it still needs (at most C{max_read_bytes}), then
    back to the transport's own size: one read takes what the kernel holds
    of the frame.  C{bufferSize} is also Twisted's threshold for pausing a
    I{streaming} producer; the connections sized so have none (the broker's
    L{kafkatw.broker.network.ResponseWriter} is a pull producer).

    A transport without an integer C{bufferSize} (a TLS wrapper, a test's
    C{StringTransport}) is left alone.  docs/design.md lists this use of
    Twisted; C{tests/unit/test_framing.py} fails if C{doRead} stops
    honouring C{bufferSize}.
    """

    def __init__(self, transport: Any, max_read_bytes: int = MAX_READ_BYTES) -> None:
        base = getattr(transport, "bufferSize", None)
        self.max_read_bytes = max_read_bytes
        self._transport = transport if isinstance(base, int) else None
        self._base = base if isinstance(base, int) else 0
        self._current = self._base

    def follow(self, frames: FrameBuffer) -> None:
        """Size the next read for what C{frames} still needs."""
        if self._transport is None:
            return
        missing = frames.missing_bytes
        size = self._base if missing <= self._base else min(missing, self.max_read_bytes)
        if size != self._current:
            self._current = self._transport.bufferSize = size
