"""Tests of the sans-IO frame splitter shared by the broker and the clients."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial import unittest

from kafkatw.protocol.framing import FrameBuffer, FrameSizeError


def framed(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


class FrameBufferTests(unittest.TestCase):
    @given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 50), min_size=1))
    def test_any_chunking_yields_the_frames(self, payloads: list[bytes], cuts: list[int]) -> None:
        stream = framed(*payloads)
        frames = FrameBuffer(1000)
        out: list[bytes] = []
        position = 0
        i = 0
        while position < len(stream):
            size = cuts[i % len(cuts)]
            out.extend(bytes(f) for f in frames.feed(stream[position:position + size]))
            position += size
            i += 1
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
