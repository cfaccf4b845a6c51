"""
Unit tests of the WriteTxnMarkers channel with a fake peer: requests grouped
per leader, retries of retriable errors through the leader known then, deleted
partitions, fenced markers, cancellation.  Responses are real kio
WriteTxnMarkers responses, decoded from the bytes a broker would send.  And the
control batch a leader appends for a marker, in Kafka's format.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.transaction_markers import TransactionMarkerChannel
from kafkatw.errors import ErrorCode, KafkaError
from kafkatw.protocol.messages import decode_response, encode_request, encode_response

E = ErrorCode


class FakePeer:
    """Records WriteTxnMarkers requests; each is answered by the test."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, dict, defer.Deferred]] = []

    def send(self, broker_id: int, body: dict) -> defer.Deferred:
        encode_request(27, 1, 1, "coordinator", body)  # the body is a valid request
        d: defer.Deferred = defer.Deferred()
        self.requests.append((broker_id, body, d))
        return d

    def answer(self, index: int, errors: dict[tuple[str, int], ErrorCode] | None = None,
               omit: tuple = ()) -> None:
        """Answer request C{index}: NONE for every partition unless C{errors} says otherwise."""
        _broker, body, d = self.requests[index]
        errors = errors or {}
        response = {"markers": [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p, "error_code": int(errors.get((t["name"], p), E.none))}
                for p in t["partition_indexes"] if (t["name"], p) not in omit]}
            for t in m["topics"]]} for m in body["markers"]]}
        _correlation, entity = decode_response(27, 1, encode_response(27, 1, 1, response))
        d.callback(entity)


class Harness:
    def __init__(self) -> None:
        self.clock = Clock()
        self.peer = FakePeer()
        self.leaders: dict[tuple[str, int], int | None] = {("a", 0): 1, ("a", 1): 1, ("b", 0): 2}
        self.channel = TransactionMarkerChannel(self.clock, self.peer.send, lambda t, p: self.leaders.get((t, p)),
                                                retry_backoff_ms=100)

    def write(self, *tps: tuple[str, int], pid: int = 7, committed: bool = True) -> dict[tuple[str, int], Any]:
        return self.channel.write_markers(pid, 3, 11, committed, tps)


class ChannelTests(unittest.TestCase):
    def test_one_request_per_leader(self) -> None:
        h = Harness()
        ds = h.write(("a", 0), ("a", 1), ("b", 0))
        h.write(("a", 0), pid=8, committed=False)
        self.assertEqual(h.peer.requests, [])  # sent on the next reactor turn, together
        h.clock.advance(0)
        by_broker = {b: body for b, body, _ in h.peer.requests}
        self.assertEqual(sorted(by_broker), [1, 2])
        self.assertEqual(by_broker[1], {"markers": [
            {"producer_id": 7, "producer_epoch": 3, "transaction_result": True, "coordinator_epoch": 11,
             "topics": [{"name": "a", "partition_indexes": [0, 1]}]},
            {"producer_id": 8, "producer_epoch": 3, "transaction_result": False, "coordinator_epoch": 11,
             "topics": [{"name": "a", "partition_indexes": [0]}]}]})
        for i in range(2):
            h.peer.answer(i)
        for d in ds.values():
            self.assertIsNone(self.successResultOf(d))

    def test_retriable_error_goes_to_the_new_leader(self) -> None:
        h = Harness()
        ds = h.write(("a", 0), ("a", 1))
        h.clock.advance(0)
        h.leaders[("a", 0)] = 3
        h.peer.answer(0, {("a", 0): E.not_leader_or_follower})
        self.assertIsNone(self.successResultOf(ds[("a", 1)]))
        self.assertNoResult(ds[("a", 0)])
        h.clock.advance(0.1)
        h.clock.advance(0)
        self.assertEqual([(b, body["markers"][0]["topics"]) for b, body, _ in h.peer.requests[1:]],
                         [(3, [{"name": "a", "partition_indexes": [0]}])])
        h.peer.answer(1)
        self.assertIsNone(self.successResultOf(ds[("a", 0)]))

    def test_missing_partition_and_failed_request_are_retried(self) -> None:
        h = Harness()
        ds = h.write(("a", 0), ("a", 1))
        h.clock.advance(0)
        h.peer.answer(0, omit=(("a", 1),))
        self.assertNoResult(ds[("a", 1)])
        h.clock.advance(0.1)
        h.clock.advance(0)
        h.peer.requests[1][2].errback(ConnectionError("refused"))
        h.clock.advance(0.1)
        h.clock.advance(0)
        self.assertEqual(len(h.peer.requests), 3)
        h.peer.answer(2)
        self.assertIsNone(self.successResultOf(ds[("a", 1)]))

    def test_leaderless_partition_waits(self) -> None:
        h = Harness()
        h.leaders[("b", 0)] = -1
        d = h.write(("b", 0))[("b", 0)]
        h.clock.advance(0)
        h.clock.advance(0.1)
        self.assertEqual(h.peer.requests, [])
        h.leaders[("b", 0)] = 2
        h.clock.advance(0.1)
        h.clock.advance(0)
        h.peer.answer(0)
        self.assertIsNone(self.successResultOf(d))

    def test_deleted_partition_counts_as_written(self) -> None:
        h = Harness()
        d = h.write(("gone", 0))[("gone", 0)]
        self.assertIsNone(self.successResultOf(d))
        h.clock.advance(0)
        self.assertEqual(h.peer.requests, [])

    def test_unsupported_format_is_dropped(self) -> None:
        h = Harness()
        d = h.write(("a", 0))[("a", 0)]
        h.clock.advance(0)
        h.peer.answer(0, {("a", 0): E.unsupported_for_message_format})
        self.assertIsNone(self.successResultOf(d))

    def test_fenced_marker_fails(self) -> None:
        h = Harness()
        ds = h.write(("a", 0), ("a", 1))
        h.clock.advance(0)
        h.peer.answer(0, {("a", 0): E.invalid_producer_epoch, ("a", 1): E.transaction_coordinator_fenced})
        for tp, code in [(("a", 0), E.invalid_producer_epoch), (("a", 1), E.transaction_coordinator_fenced)]:
            self.assertEqual(self.failureResultOf(ds[tp], KafkaError).value.error_code, code)
        h.clock.advance(1)
        self.assertEqual(len(h.peer.requests), 1)

    def test_cancel_stops_retries(self) -> None:
        h = Harness()
        d = h.write(("a", 0))[("a", 0)]
        h.clock.advance(0)
        h.peer.answer(0, {("a", 0): E.not_enough_replicas})
        d.cancel()
        self.failureResultOf(d, defer.CancelledError)
        h.clock.advance(1)
        self.assertEqual(len(h.peer.requests), 1)

    def test_close(self) -> None:
        h = Harness()
        d = h.write(("a", 0))[("a", 0)]
        h.channel.close()
        self.failureResultOf(d, defer.CancelledError)
        h.clock.advance(1)
        self.assertEqual(h.peer.requests, [])
        self.assertEqual(h.clock.getDelayedCalls(), [])

