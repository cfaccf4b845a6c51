"""
Tests for L{kafkatw.protocol.control}: the transaction marker's control batch,
written and read back in place.
"""

from __future__ import annotations

from twisted.trial import unittest

from kafkatw.errors import InvalidRecordError
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.control import CONTROL_ABORT, CONTROL_COMMIT, EndTransactionMarker, encode_marker_batch, \
    read_marker
from kafkatw.protocol.records import control_type, decode_batches, encode_batch


class MarkerBatchTests(unittest.SynchronousTestCase):
    def test_commit_marker_batch(self) -> None:
        batch = encode_marker_batch(1000, 4, 7, True, 1_700_000_000_000)
        [decoded] = decode_batches(batch)
        self.assertEqual((decoded.is_control, decoded.is_transactional, decoded.producer_id, decoded.producer_epoch,
                          decoded.base_sequence, decoded.compression), (True, True, 1000, 4, -1, 0))
        self.assertEqual(decoded.attributes, 0x30)
        [record] = decoded.records
        self.assertEqual(record.key, bytes.fromhex("0000" "0001"))  # version 0, COMMIT
        self.assertEqual(record.value, bytes.fromhex("0000" "00000007"))  # version 0, coordinator epoch 7
        self.assertEqual(read_marker(batch), EndTransactionMarker(True, 7))
        self.assertEqual(control_type(batch, 0, len(batch)), CONTROL_COMMIT)

    def test_abort_marker(self) -> None:
        batch = encode_marker_batch(1, 0, 3, False, 0)
        self.assertEqual(read_marker(batch), EndTransactionMarker(False, 3))
        self.assertEqual(control_type(batch, 0, len(batch)), CONTROL_ABORT)

    def test_read_in_place(self) -> None:
        """A marker after other batches is read at its position, in bytes or a memoryview."""
        first = encode_batch([(b"k", b"v", (), 0)])
        data = first + encode_marker_batch(5, 1, 9, True, 0)
        self.assertEqual(read_marker(data, len(first)), EndTransactionMarker(True, 9))
        self.assertEqual(read_marker(memoryview(data), len(first)), EndTransactionMarker(True, 9))

    def test_short_value(self) -> None:
        """A value without the coordinator epoch gives epoch -1."""
        batch = encode_batch([(bytes.fromhex("00000001"), b"", (), 0)], is_control=True)
        self.assertEqual(read_marker(batch), EndTransactionMarker(True, -1))

    def test_not_a_marker(self) -> None:
        self.assertRaises(InvalidRecordError, read_marker, encode_batch([(b"k", b"v", (), 0)]))
        self.assertRaises(InvalidRecordError, read_marker, build_batch([(b"\x00\x00\x00\x07", b"x")]))
        other_control = encode_batch([(bytes.fromhex("00000005"), b"\0\0\0\0\0\0", (), 0)], is_control=True)
        self.assertRaises(InvalidRecordError, read_marker, other_control)

    def test_truncated(self) -> None:
        batch = encode_marker_batch(1, 0, 3, False, 0)
        for end in (61, 63, 66, 70):
            self.assertRaises(InvalidRecordError, read_marker, batch[:end])
