"""
Tests for the transactional data path of L{kafkatw.storage}: open and
completed transactions in the producer state, control batches, the last stable
offset, the aborted-transaction index (C{.txnindex}) and its rebuild on
recovery and on followers.
"""

import os
import struct

from twisted.trial import unittest

from kafkatw.errors import ErrorCode, InvalidProducerEpochError, InvalidRecordError, KafkaError
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.control import EndTransactionMarker, encode_marker_batch
from kafkatw.storage.producer_state import ProducerStateManager
from kafkatw.storage.transaction_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex

from .test_storage import LogTestMixin, TestCase

TXN = 0x10


def txn_batch(pid, seq, n=2, epoch=0):
    return build_batch([(b"k", b"v")] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       timestamp_ms=1_000_000, attributes=TXN)


def plain(n=1):
    return build_batch([(b"k", b"v")] * n, timestamp_ms=1_000_000)


class TransactionIndexTests(TestCase):
    def test_format_is_kafkas(self):
        """34-byte entries: version int16 0, producer id, first, last, last stable offsets (int64)."""
        path = self.mktemp()
        index = TransactionIndex(path)
        index.append(AbortedTxn(7, 10, 20, 21))
        index.append(AbortedTxn(8, 15, 30, 31))
        index.close()
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(len(data), 2 * ABORTED_TXN_SIZE)
        self.assertEqual(struct.unpack(">hqqqq", data[:34]), (0, 7, 10, 20, 21))
        again = TransactionIndex(path)
        again.load()
        self.assertEqual(again.entries, [AbortedTxn(7, 10, 20, 21), AbortedTxn(8, 15, 30, 31)])

    def test_torn_tail_dropped(self):
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(AbortedTxn(1, 2, 3, 4).encode() + b"\x00\x00\x01")
        index = TransactionIndex(path)
        index.load()
        self.assertEqual(index.entries, [AbortedTxn(1, 2, 3, 4)])

    def test_collect_rules(self):
        """Kafka's rule: lastOffset >= fetch offset and firstOffset < upper bound; stop at LSO >= upper."""
        index = TransactionIndex(self.mktemp())
        for e in [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 7, 10, 11), AbortedTxn(3, 12, 20, 21),
                  AbortedTxn(4, 22, 25, 26)]:
            index.append(e)
        found, complete = index.collect(6, 15)
        self.assertEqual([e.producer_id for e in found], [2, 3])
        self.assertTrue(complete)
        found, complete = index.collect(0, 100)
        self.assertEqual(len(found), 4)
        self.assertFalse(complete)

    def test_truncate(self):
        index = TransactionIndex(self.mktemp())
        index.append(AbortedTxn(1, 0, 5, 6))
        index.append(AbortedTxn(2, 7, 10, 11))
        index.truncate_to(10)
        self.assertEqual(index.entries, [AbortedTxn(1, 0, 5, 6)])
        index.truncate_to(3)
        self.assertFalse(os.path.exists(index.path))

    def test_out_of_order_refused(self):
        index = TransactionIndex(self.mktemp())
        index.append(AbortedTxn(1, 0, 5, 6))
        self.assertRaises(KafkaError, index.append, AbortedTxn(2, 0, 4, 6))


class ProducerStateTransactionTests(unittest.TestCase):
    def test_open_then_commit(self):
        from kafkatw.protocol.batch import parse_batch_headers

        state = ProducerStateManager()
        [h] = parse_batch_headers(txn_batch(1, 0))
        state.load_batch(h._replace(base_offset=10))
        self.assertEqual(state.ongoing, {1: 10})
        self.assertEqual(state.first_unstable_offset(5), 10)
        [m] = parse_batch_headers(encode_marker_batch(1, 0, 0, True, 0))
        done = state.load_batch(m._replace(base_offset=12), EndTransactionMarker(True, 0))
        self.assertEqual((done.first_offset, done.last_offset, done.aborted), (10, 12, False))
        self.assertEqual(state.ongoing, {})
        # completed but the high watermark has not passed the marker: still unstable
        self.assertEqual(state.first_unstable_offset(12), 10)
        self.assertIsNone(state.first_unstable_offset(13))

    def test_marker_fencing(self):
        from kafkatw.protocol.batch import parse_batch_headers

        state = ProducerStateManager()
        [h] = parse_batch_headers(txn_batch(1, 0, epoch=3))
        state.load_batch(h)
        self.assertRaises(InvalidProducerEpochError, state.validate_marker, 1, 2, 0)
        [m] = parse_batch_headers(encode_marker_batch(1, 3, 5, False, 0))
        state.load_batch(m, EndTransactionMarker(False, 5))
        with self.assertRaises(KafkaError) as e:
            state.validate_marker(1, 3, 4)
        self.assertEqual(e.exception.error_code, ErrorCode.transaction_coordinator_fenced)
        state.validate_marker(1, 4, 5)

    def test_snapshot_round_trip(self):
        from kafkatw.protocol.batch import parse_batch_headers

        state = ProducerStateManager()
        [h] = parse_batch_headers(txn_batch(1, 0))
        state.load_batch(h._replace(base_offset=4))
        other = ProducerStateManager()
        self.assertTrue(other.restore(state.snapshot(6), 6))
        self.assertEqual(other.ongoing, {1: 4})
        self.assertEqual(other.first_unstable_offset(6), 4)


class LogTransactionTests(LogTestMixin, TestCase):
    def test_lso_follows_open_transactions(self):
        log = self.make_log()
        log.append(plain(2), 0)  # 0-1
        log.append(txn_batch(1, 0), 0)  # 2-3
        log.append(plain(1), 0)  # 4
        log.update_high_watermark(5)
        self.assertEqual(log.last_stable_offset, 2)
        log.append_marker(1, 0, 0, True, 0, 1_000_000)  # 5
        self.assertEqual(log.last_stable_offset, 2)  # marker not replicated yet
        log.update_high_watermark(6)
        self.assertEqual(log.last_stable_offset, 6)
        self.assertEqual(log.collect_aborted_transactions(0, 6), [])

    def test_lso_bounded_by_high_watermark(self):
        log = self.make_log()
        log.append(plain(3), 0)
        log.update_high_watermark(1)
        self.assertEqual(log.last_stable_offset, 1)

    def test_abort_indexed(self):
        log = self.make_log()
        log.append(txn_batch(1, 0), 0)  # 0-1
        log.append(txn_batch(2, 0), 0)  # 2-3
        log.append_marker(1, 0, 0, False, 0, 1_000_000)  # 4: abort pid 1, pid 2 still open
        log.append_marker(2, 0, 0, False, 0, 1_000_000)  # 5
        log.update_high_watermark(6)
        self.assertEqual(log.active_segment.txn_index.entries,
                         [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)])
        self.assertEqual(log.collect_aborted_transactions(0, 6),
                         [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)])
        self.assertEqual(log.collect_aborted_transactions(5, 6), [AbortedTxn(2, 2, 5, 6)])
        self.assertTrue(os.path.exists(log.active_segment.txn_index.path))

    def test_non_transactional_write_during_a_transaction_refused(self):
        log = self.make_log()
        log.append(txn_batch(1, 0), 0)
        idempotent = build_batch([(b"k", b"v")], producer_id=1, producer_epoch=0, base_sequence=2,
                                 timestamp_ms=1_000_000)
        with self.assertRaises(KafkaError) as e:
            log.append(idempotent, 0)
        self.assertEqual(e.exception.error_code, ErrorCode.invalid_txn_state)
        log.append_marker(1, 0, 0, True, 0, 1_000_000)
        log.append(idempotent, 0)

    def test_client_control_batch_refused(self):
        log = self.make_log()
        self.assertRaises(InvalidRecordError, log.append, encode_marker_batch(1, 0, 0, True, 0), 0)

    def test_aborts_across_segments(self):
        log = self.make_log(segment_bytes=200)
        log.append(txn_batch(1, 0), 0)  # 0-1
        for _ in range(4):
            log.append(plain(3), 0)
        log.append_marker(1, 0, 0, False, 0, 1_000_000)
        log.update_high_watermark(log.log_end_offset)
        self.assertGreater(len(log.segments), 1)
        self.assertEqual(log.segments[0].txn_index.entries, [])
        self.assertEqual([e.producer_id for e in log.collect_aborted_transactions(0, log.log_end_offset)], [1])
        self.assertEqual([e.producer_id for e in log.collect_aborted_transactions(1, 3)], [1])

    def _filled(self, path):
        log = self.make_log(path)
        log.append(txn_batch(1, 0), 0)  # 0-1
        log.append_marker(1, 0, 0, False, 0, 1_000_000)  # 2
        log.append(txn_batch(2, 0), 0)  # 3-4, left open
        log.update_high_watermark(5)
        return log

    def test_recovery_rebuilds_index_and_open_transactions(self):
        path = self.mktemp()
        log = self._filled(path)
        entries = list(log.active_segment.txn_index.entries)
        index_path = log.active_segment.txn_index.path
        for s in log.segments:
            s.close()
        os.unlink(index_path)
        again = self.make_log(path)  # unclean: no snapshot
        self.assertEqual(again.producer_state_source, "scan")
        self.assertEqual(again.active_segment.txn_index.entries, entries)
        self.assertTrue(os.path.exists(index_path))
        self.assertEqual(again.producer_state.ongoing, {2: 3})
        again.update_high_watermark(5)
        self.assertEqual(again.last_stable_offset, 3)

    def test_clean_restart_keeps_state(self):
        path = self.mktemp()
        log = self._filled(path)
        log.close()
        again = self.make_log(path, clean=True)
        self.assertEqual(again.producer_state_source, "snapshot")
        self.assertEqual(again.producer_state.ongoing, {2: 3})
        self.assertEqual(again.active_segment.txn_index.entries, [AbortedTxn(1, 0, 2, 3)])

    def test_follower_rebuilds_same_state(self):
        leader = self._filled(self.mktemp())
        data = b"".join(os.pread(r.fileno, r.length, r.position) for r in leader.read(0, 1 << 20))
        follower = self.make_log()
        follower.append_as_follower(data)
        follower.update_high_watermark(5)
        self.assertEqual(follower.last_stable_offset, leader.last_stable_offset)
        self.assertEqual(follower.active_segment.txn_index.entries, leader.active_segment.txn_index.entries)

    def test_truncation_reopens_transaction(self):
        log = self._filled(self.mktemp())
        log.truncate_to(2)  # the abort marker is gone
        self.assertEqual(log.active_segment.txn_index.entries, [])
        self.assertEqual(log.producer_state.ongoing, {1: 0})
        self.assertEqual(log.last_stable_offset, 0)
