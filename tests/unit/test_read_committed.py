"""
Unit tests of the read-committed consumer (KIP-98): hand-built Fetch
responses with transactional batches, control batches (COMMIT/ABORT markers)
and aborted-transaction lists, filtered by
L{kafkatw.protocol.records.decode_fetched} and L{kafkatw.client.consumer.Consumer}
as Kafka's C{CompletedFetch} does.  A fake client on a L{Clock}; no sockets.
"""

from __future__ import annotations

import struct
from typing import Any

from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.client.consumer import Consumer, ConsumerRecord
from kafkatw.protocol.messages import build, response_schema
from kafkatw.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, control_type, decode_fetched, encode_batch

from .test_consumer import FakeClient

T = "t"


def data(base_offset: int, values: list[bytes], producer_id: int = -1) -> bytes:
    """A batch; transactional when it has a producer id."""
    return encode_batch([(None, v, [], 1000) for v in values], base_offset=base_offset, producer_id=producer_id,
                        producer_epoch=0 if producer_id >= 0 else -1, base_sequence=0 if producer_id >= 0 else -1,
                        is_transactional=producer_id >= 0)


def marker(offset: int, producer_id: int, kind: int) -> bytes:
    """A control batch as a partition leader writes it (key: version, type; value: version, coordinator epoch)."""
    return encode_batch([(struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0), [], 1000)], base_offset=offset,
                        producer_id=producer_id, producer_epoch=0, is_transactional=True, is_control=True)


#: offsets 0-1 pid 10 (committed at 7), 2-3 pid 11 (aborted at 6), 4-5 plain,
#: 8-9 pid 11 again (committed at 10)
LOG = (data(0, [b"a0", b"a1"], 10) + data(2, [b"x2", b"x3"], 11) + data(4, [b"p4", b"p5"])
       + marker(6, 11, CONTROL_ABORT) + marker(7, 10, CONTROL_COMMIT) + data(8, [b"b8", b"b9"], 11)
       + marker(10, 11, CONTROL_COMMIT))


def values(records: list) -> list[bytes]:
    return [r.value for r in records]


class DecodeFetchedTests(unittest.SynchronousTestCase):
    def decode(self, log: bytes, fetch_offset: int = 0, aborted: Any = None) -> tuple[list[bytes], int]:
        records, next_offset = decode_fetched(log, T, 0, fetch_offset, ConsumerRecord, True, aborted)
        return values(records), next_offset

    def test_control_type(self) -> None:
        self.assertEqual(control_type(marker(0, 1, CONTROL_ABORT), 0, 1 << 20), CONTROL_ABORT)
        self.assertEqual(control_type(marker(0, 1, CONTROL_COMMIT), 0, 1 << 20), CONTROL_COMMIT)

    def test_read_uncommitted_skips_control_batches_only(self) -> None:
        self.assertEqual(self.decode(LOG), ([b"a0", b"a1", b"x2", b"x3", b"p4", b"p5", b"b8", b"b9"], 11))

    def test_aborted_range_ends_at_the_producers_abort_marker(self) -> None:
        self.assertEqual(self.decode(LOG, aborted=[(11, 2)]), ([b"a0", b"a1", b"p4", b"p5", b"b8", b"b9"], 11))

    def test_two_aborted_transactions_of_one_producer(self) -> None:
        log = LOG[:-len(marker(10, 11, CONTROL_COMMIT))] + marker(10, 11, CONTROL_ABORT)
        self.assertEqual(self.decode(log, aborted=[(11, 8), (11, 2)]), ([b"a0", b"a1", b"p4", b"p5"], 11))

    def test_an_abort_range_that_starts_later_spares_earlier_batches(self) -> None:
        # pid 11's batch at 2 is not aborted: only its transaction starting at 8 is
        log = LOG[:-len(marker(10, 11, CONTROL_COMMIT))] + marker(10, 11, CONTROL_ABORT)
        self.assertEqual(self.decode(log, aborted=[(11, 8)]), ([b"a0", b"a1", b"x2", b"x3", b"p4", b"p5"], 11))

    def test_non_transactional_batches_of_an_aborted_producer_id_stay(self) -> None:
        log = data(0, [b"t0"], 11) + encode_batch(
            [(None, b"idem", [], 1000)], base_offset=1, producer_id=11, producer_epoch=0, base_sequence=1)
        self.assertEqual(self.decode(log, aborted=[(11, 0)]), ([b"idem"], 2))

    def test_fetch_offset_inside_the_log(self) -> None:
        self.assertEqual(self.decode(LOG, fetch_offset=5, aborted=[(11, 2)]), ([b"p5", b"b8", b"b9"], 11))


def fetch_response(records: bytes, aborted: list[tuple[int, int]] | None, lso: int) -> Any:
    return build(response_schema(1, 12), {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": T, "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": lso + 5, "last_stable_offset": lso,
            "log_start_offset": 0, "preferred_read_replica": -1, "records": records,
            "aborted_transactions": None if aborted is None else [
                {"producer_id": pid, "first_offset": first} for pid, first in aborted]}]}]})


class ConsumerReadCommittedTests(unittest.TestCase):
    def make(self, isolation_level: str) -> Consumer:
        self.clock = Clock()
        self.client = FakeClient(self.clock, {(T, 0): 1})
        consumer = Consumer(self.clock, client=self.client, isolation_level=isolation_level)
        self.addCleanup(consumer.close)
        consumer.assign([(T, 0)])
        consumer.seek((T, 0), 0)
        self.clock.advance(0)
        return consumer

    def answer(self, records: bytes, aborted: Any, lso: int) -> dict:
        [(node, key, body, d)] = self.client.pending(1)
        d.callback(fetch_response(records, aborted, lso))
        return body

    def test_read_committed_drops_aborted_records_and_stops_at_the_lso(self) -> None:
        consumer = self.make("read_committed")
        body = self.answer(LOG, [(11, 2)], lso=11)
        self.assertEqual(body["isolation_level"], 1)
        records = self.successResultOf(consumer.poll())
        self.assertEqual(values(records), [b"a0", b"a1", b"p4", b"p5", b"b8", b"b9"])
        self.assertEqual(self.successResultOf(consumer.position((T, 0))), 11)  # past the last marker
        [(_node, _key, body, _d)] = self.client.pending(1)
        self.assertEqual(body["topics"][0]["partitions"][0]["fetch_offset"], 11)
        self.assertEqual(consumer._state((T, 0)).last_stable_offset, 11)

    def test_a_response_of_aborted_records_only_moves_the_position(self) -> None:
        consumer = self.make("read_committed")
        self.answer(data(0, [b"x0", b"x1"], 11) + marker(2, 11, CONTROL_ABORT), [(11, 0)], lso=3)
        self.assertEqual(self.successResultOf(consumer.poll()), [])
        self.assertEqual(self.successResultOf(consumer.position((T, 0))), 3)

    def test_read_uncommitted_ignores_the_aborted_list(self) -> None:
        consumer = self.make("read_uncommitted")
        body = self.answer(LOG, [(11, 2)], lso=11)
        self.assertEqual(body["isolation_level"], 0)
        self.assertEqual(values(self.successResultOf(consumer.poll())),
                         [b"a0", b"a1", b"x2", b"x3", b"p4", b"p5", b"b8", b"b9"])

    def test_list_offsets_carries_the_isolation_level(self) -> None:
        consumer = self.make("read_committed")
        sought = consumer.seek_to_end((T, 0))
        sought.addErrback(lambda failure: None)  # closed unanswered at the end of the test
        self.clock.advance(0)
        [body] = [body for _node, key, body, _d in self.client.pending(2)]
        self.assertEqual(body["isolation_level"], 1)
