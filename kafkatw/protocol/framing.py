"""
Kafka's framing, sans-IO: a stream of C{int32 size, bytes[size]} frames.

L{FrameBuffer} turns the chunks a transport delivers into whole frames.  Reads
are kept as a list until a whole frame is there, then joined once, and frames
are handed out as read-only memoryviews of that one buffer (kio decodes them
without a copy).  Twisted's C{IntNStringReceiver} concatenates its whole buffer
on every read instead: quadratic for the megabyte produce requests and fetch
responses real clients exchange.
"""

from __future__ import annotations

import struct
from typing import Iterator

__all__ = ["FrameBuffer", "FrameSizeError"]

_SIZE = struct.Struct(">i")


class FrameSizeError(ValueError):
    """A size prefix outside C{min_size..max_size}; C{.size} holds it."""

    def __init__(self, size: int) -> None:
        super().__init__(f"frame size {size}")
        self.size = size


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
