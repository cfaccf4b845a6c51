"""
The transaction marker channel: WriteTxnMarkers (API 27) from the transaction
coordinator to partition leaders, after Kafka's
C{TransactionMarkerChannelManager} and C{TransactionMarkerRequestCompletionHandler}.

The coordinator hands the channel the markers of a decided transaction
(L{TransactionMarkerChannel.write_markers}: producer id, epoch, coordinator
epoch, COMMIT or ABORT, partitions) and gets one Deferred per partition.  The
channel looks up each partition's leader, queues the marker for that broker,
and once per reactor turn sends every broker one WriteTxnMarkers request with
all its queued markers (grouped by transaction, then topic).  Per partition of
the answer:

  - C{NONE}: written; the partition's Deferred fires.
  - C{UNKNOWN_TOPIC_OR_PARTITION}, C{NOT_LEADER_OR_FOLLOWER},
    C{NOT_ENOUGH_REPLICAS}, C{NOT_ENOUGH_REPLICAS_AFTER_APPEND},
    C{REQUEST_TIMED_OUT}, C{KAFKA_STORAGE_ERROR}, a partition missing from the
    answer, or a failed request: retried after C{retry_backoff_ms}, through the
    leader known then.
  - C{UNSUPPORTED_FOR_MESSAGE_FORMAT}, C{UNSUPPORTED_VERSION}: the producer
    cannot have written there; the Deferred fires as if written (Kafka drops the
    partition too).
  - C{INVALID_PRODUCER_EPOCH}, C{TRANSACTION_COORDINATOR_FENCED}: a newer
    producer epoch or coordinator took over; the Deferred fails with that error
    and the transaction is left to them.
  - anything else (C{CORRUPT_MESSAGE}, C{MESSAGE_TOO_LARGE} ...): the Deferred
    fails (Kafka treats it as a bug).

A partition whose topic no longer exists (C{leader_for} answers None) counts as
written, as in Kafka; one with no leader right now (-1) waits for one.

What a partition leader appends for a marker is a control batch
(L{kafkatw.protocol.control.encode_marker_batch}).

Source: Apache Kafka C{kafka.coordinator.transaction.TransactionMarkerChannelManager};
the WriteTxnMarkers request and response definitions; KIP-98.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode, kafka_error
from .transaction_state import TopicPartition

__all__ = [
    "TransactionMarkerChannel",
    "RETRIABLE_MARKER_ERRORS",
    "WRITE_TXN_MARKERS",
]

_log = Logger()

_E = ErrorCode

#: The API key of WriteTxnMarkers.
WRITE_TXN_MARKERS = 27

#: Errors after which a marker is sent again (Kafka's completion handler).
RETRIABLE_MARKER_ERRORS = frozenset({
    _E.unknown_topic_or_partition, _E.not_leader_or_follower, _E.not_enough_replicas,
    _E.not_enough_replicas_after_append, _E.request_timed_out, _E.kafka_storage_error,
})

_DROPPED_MARKER_ERRORS = frozenset({_E.unsupported_for_message_format, _E.unsupported_version})


@dataclass(eq=False)
class _Marker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    tp: TopicPartition
    deferred: defer.Deferred = field(init=False)
    cancelled: bool = False
    attempts: int = 0

    @property
    def transaction(self) -> tuple[int, int, int, bool]:
        return self.producer_id, self.producer_epoch, self.coordinator_epoch, self.committed


class TransactionMarkerChannel:
    """
    Sends WriteTxnMarkers to partition leaders; implements the coordinator's
    L{kafkatw.broker.transaction_coordinator.MarkerWriter}.

    @param reactor: C{IReactorTime}.
    @param send: C{send(broker_id, body) -> Deferred} of the WriteTxnMarkers
        response (kio's, or any object with its attribute names: C{markers[].
        producer_id}, C{.topics[].name}, C{.partitions[].partition_index},
        C{.error_code}); C{body} is the request as plain values (C{{"markers":
        [{"producer_id", "producer_epoch", "transaction_result",
        "coordinator_epoch", "topics": [{"name", "partition_indexes"}]}]}}).
        The wiring is e.g. C{lambda b, body: Deferred.fromCoroutine(client.send(b, 27, body))}.
    @param leader_for: C{(topic, partition) -> int | None}: the leader's broker
        id, -1 when it has none right now, None when the partition does not exist.
    @param retry_backoff_ms: pause before a marker is sent again.
    """

    def __init__(self, reactor: Any, send: Callable[[int, dict], defer.Deferred],
                 leader_for: Callable[[str, int], int | None], retry_backoff_ms: int = 100) -> None:
        self.reactor = reactor
        self.send = send
        self.leader_for = leader_for
        self.retry_backoff_ms = retry_backoff_ms
        self._queues: dict[int, list[_Marker]] = {}
        self._flush_call: Any = None
        self._retry_calls: set[Any] = set()
        self._closed = False

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, defer.Deferred]:
        """See L{kafkatw.broker.transaction_coordinator.MarkerWriter.write_markers}."""
        out = {}
        for tp in partitions:
            marker = _Marker(producer_id, producer_epoch, coordinator_epoch, committed, tp)
            marker.deferred = defer.Deferred(lambda d, m=marker: self._cancel(m))
            out[tp] = marker.deferred
            self._enqueue(marker)
        return out

    def close(self) -> None:
        """Stop sending: cancel every pending marker and timer."""
        self._closed = True
        for call in list(self._retry_calls):
            if call.active():
                call.cancel()
        self._retry_calls.clear()
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        queues, self._queues = self._queues, {}
        for markers in queues.values():
            for m in markers:
                m.deferred.cancel()

    def pending(self) -> int:
        """Markers queued and not yet sent (for tests and metrics)."""
        return sum(len(q) for q in self._queues.values())

    # --- queueing -----------------------------------------------------------------------

    def _cancel(self, marker: _Marker) -> None:
        marker.cancelled = True  # dropped from its queue when flushed, its answer ignored

    def _enqueue(self, marker: _Marker) -> None:
        if marker.cancelled or self._closed:
            return
        leader = self.leader_for(*marker.tp)
        if leader is None:
            _log.info("{tp} no longer exists: its marker of producer {pid} is skipped", tp=marker.tp,
                      pid=marker.producer_id)
            marker.deferred.callback(None)
            return
        if leader < 0:
            self._retry([marker])
            return
        self._queues.setdefault(leader, []).append(marker)
        if self._flush_call is None or not self._flush_call.active():
            self._flush_call = self.reactor.callLater(0, self._flush)

    def _retry(self, markers: list[_Marker]) -> None:
        if self._closed:
            return

        def again() -> None:
            self._retry_calls.discard(call)
            for m in markers:
                self._enqueue(m)

        call = self.reactor.callLater(self.retry_backoff_ms / 1000.0, again)
        self._retry_calls.add(call)

    # --- sending ------------------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_call = None
        queues, self._queues = self._queues, {}
        for broker_id, markers in queues.items():
            markers = [m for m in markers if not m.cancelled]
            if markers:
                self._send(broker_id, markers)

    @staticmethod
    def request_body(markers: list[_Marker]) -> dict[str, Any]:
        """The WriteTxnMarkers request of C{markers}: one entry per transaction, partitions grouped by topic."""
        by_txn: dict[tuple[int, int, int, bool], dict[str, list[int]]] = {}
        for m in markers:
            by_txn.setdefault(m.transaction, {}).setdefault(m.tp[0], []).append(m.tp[1])
        return {"markers": [
            {"producer_id": pid, "producer_epoch": epoch, "transaction_result": committed,
             "coordinator_epoch": coordinator_epoch,
             "topics": [{"name": t, "partition_indexes": sorted(ps)} for t, ps in topics.items()]}
            for (pid, epoch, coordinator_epoch, committed), topics in by_txn.items()]}

    def _send(self, broker_id: int, markers: list[_Marker]) -> None:
        for m in markers:
            m.attempts += 1
        try:
            d = self.send(broker_id, self.request_body(markers))
        except Exception as e:
            d = defer.fail(e)
        d.addCallbacks(self._answered, self._request_failed, callbackArgs=(broker_id, markers),
                       errbackArgs=(broker_id, markers))

    def _request_failed(self, failure: Any, broker_id: int, markers: list[_Marker]) -> None:
        _log.info("WriteTxnMarkers to broker {broker} failed ({error}); {count} markers will be sent again",
                  broker=broker_id, error=failure.value, count=len(markers))
        self._retry([m for m in markers if not m.cancelled])

    def _answered(self, response: Any, broker_id: int, markers: list[_Marker]) -> None:
        codes: dict[tuple[int, TopicPartition], ErrorCode] = {}
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    codes[(int(result.producer_id), (topic.name, int(p.partition_index)))] = ErrorCode(
                        int(p.error_code))
        again = []
        for m in markers:
            if m.cancelled:
                continue
            code = codes.get((m.producer_id, m.tp))
            if code is None or code in RETRIABLE_MARKER_ERRORS:
                again.append(m)
            elif code == _E.none or code in _DROPPED_MARKER_ERRORS:
                m.deferred.callback(None)
            else:
                if code not in (_E.invalid_producer_epoch, _E.transaction_coordinator_fenced):
                    _log.error("the {result} marker of producer {pid} to {tp} failed with {error} at broker "
                               "{broker}", result="COMMIT" if m.committed else "ABORT", pid=m.producer_id,
                               tp=m.tp, error=code.name.upper(), broker=broker_id)
                m.deferred.errback(kafka_error(code, f"WriteTxnMarkers to {m.tp[0]}-{m.tp[1]}: {code.name.upper()}"))
        if again:
            self._retry(again)
