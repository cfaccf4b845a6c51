"""
A Twisted share consumer (KIP-932): a member of a share group, which reads
records cooperatively with the group's other members and acknowledges each
record on its own, after Kafka's C{KafkaShareConsumer}.

    consumer = ShareConsumer(reactor, "my-share-group", bootstrap_servers="127.0.0.1:9092")
    consumer.subscribe(["orders"])
    records = await consumer.poll(1000)      # Deferreds: poll, commit, close
    for record in records:
        consumer.acknowledge(record, AcknowledgeType.ACCEPT)   # or RELEASE, REJECT
    await consumer.commit()        # or let the next poll carry the acknowledgements
    await consumer.close()

Membership is kept by ShareGroupHeartbeat to the group's coordinator, every
C{group.share.heartbeat.interval.ms} the coordinator names; the coordinator
assigns partitions (several members may read one).  Records come from each
partition's leader through ShareFetch in a share session per leader
(ShareSessionEpoch 0, 1, 2, …); each L{ShareRecord} carries its
C{delivery_count}.  Acknowledgements (L{acknowledge}) ride on the next
ShareFetch to the record's leader, or go at once with L{commit}
(ShareAcknowledge).  With C{acknowledgement_mode="implicit"} (Kafka's
C{share.acknowledgement.mode} default) the records of a poll that were not
acknowledged are accepted by the next poll, L{commit} or L{close}; with
C{"explicit"} every record must be acknowledged before the next poll
(C{ValueError} otherwise).  L{close} closes the share sessions (the records
still acquired are released at once) and leaves the group.

Records not acknowledged within the broker's
C{group.share.record.lock.duration.ms} are given to another member;
acknowledging them then fails (C{INVALID_RECORD_STATE}, in
L{acknowledgement_errors} or L{commit}'s answer).  Acknowledgements that a
failed ShareFetch carried are not sent again: their partition's error is in
L{acknowledgement_errors} too, and their records come again.

Source: KIP-932; Apache Kafka C{KafkaShareConsumer}, C{ShareConsumeRequestManager},
C{ShareMembershipManager}.
"""

from __future__ import annotations

import enum
import uuid
from typing import Any, Iterable, NamedTuple

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import ErrorCode, KafkaError, kafka_error
from ..protocol.records import decode_batches
from .client import client_for, sleep
from .security import SecurityConfig
from .transaction_manager import find_coordinator

__all__ = ["ShareConsumer", "ShareRecord", "AcknowledgeType"]

_log = Logger()

_HEARTBEAT = 76
_SHARE_FETCH = 78
_SHARE_ACKNOWLEDGE = 79
#: Coordinator errors after which the coordinator is looked up again.
_COORDINATOR_ERRORS = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress}
#: Session errors after which the next request opens a new session.
_SESSION_ERRORS = {ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch}


class AcknowledgeType(enum.IntEnum):
    """How a record is acknowledged (KIP-932)."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class ShareRecord(NamedTuple):
    """
    One record delivered to a share consumer.

    @ivar delivery_count: how many times the record was delivered, this time included (1 the first time).
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    delivery_count: int


class ShareConsumer:
    """
    A share group member (see the module docstring).

    @param group_id: the share group.
    @param acknowledgement_mode: C{"implicit"} or C{"explicit"} (Kafka's C{share.acknowledgement.mode}).
    @param max_poll_records: ShareFetch's C{max_records}.
    @param fetch_max_wait_ms: how long a broker waits for records before answering a ShareFetch (ms).
    @param fetch_max_bytes: ShareFetch's C{max_bytes}.
    """

    def __init__(self, reactor: Any, group_id: str, bootstrap_servers: str | list[str] | None = None,
                 client: Any = None, client_id: str = "kafkatw-share-consumer", request_timeout_ms: int = 30000,
                 acknowledgement_mode: str = "implicit", max_poll_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52428800,
                 security: SecurityConfig | None = None) -> None:
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError("acknowledgement_mode is implicit or explicit")
        self.reactor = reactor
        self.group_id = group_id
        self.client, self._owns_client = client_for(reactor, bootstrap_servers, client, client_id,
                                                    request_timeout_ms, security)
        self.acknowledgement_mode = acknowledgement_mode
        self.max_poll_records = max_poll_records
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        #: The member id this consumer made (KIP-932: the client generates it).
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.subscription: tuple[str, ...] = ()
        #: (topic, partition) the coordinator assigned this member.
        self.assignment: set[tuple[str, int]] = set()
        #: (topic, partition) -> the error of its last acknowledgement carried by a ShareFetch.
        self.acknowledgement_errors: dict[tuple[str, int], ErrorCode] = {}
        self.heartbeat_interval_ms = 5000
        self._coordinator: int | None = None
        self._heartbeat_timer: Any = None
        self._heartbeating: defer.Deferred | None = None
        self._joined: defer.Deferred = defer.Deferred()
        self._sessions: dict[int, int] = {}  # leader -> next share session epoch
        self._session_partitions: dict[int, set[tuple[str, int]]] = {}
        self._locks: dict[int, defer.DeferredLock] = {}
        self._pending: dict[tuple[str, int], dict[int, int]] = {}  # acknowledgements to send
        self._delivered: dict[tuple[str, int], set[int]] = {}  # offsets of the last poll not acknowledged
        self._closed = False
        self._sent_subscription: tuple[str, ...] = ()

    # --- subscription and membership -------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to C{topics} (replaces the subscription); the next heartbeat sends it."""
        self.subscription = tuple(sorted(set(topics)))
        self.client.want(self.subscription)
        if self._heartbeat_timer is None and self._heartbeating is None:
            self._heartbeat_soon(0)

    def _heartbeat_soon(self, delay_ms: float) -> None:
        if self._closed:
            return
        if self._heartbeat_timer is not None and self._heartbeat_timer.active():
            self._heartbeat_timer.cancel()
        self._heartbeat_timer = self.reactor.callLater(delay_ms / 1000.0, self._heartbeat)

    def _heartbeat(self) -> None:
        self._heartbeat_timer = None
        self._heartbeating = defer.Deferred.fromCoroutine(self._send_heartbeat())

        def done(result: Any) -> None:
            self._heartbeating = None
            if isinstance(result, Failure):
                _log.failure("share group {group}: heartbeat", result, group=self.group_id)

        self._heartbeating.addBoth(done)

    async def _send_heartbeat(self, leaving: bool = False) -> None:
        delay_ms = self.heartbeat_interval_ms
        try:
            if self._coordinator is None:
                self._coordinator = await find_coordinator(self.client, self.group_id, 0)
            epoch = -1 if leaving else self.member_epoch
            body = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                    "rack_id": None, "subscribed_topic_names": list(self.subscription) if epoch == 0 else None}
            if epoch != 0 and not leaving and self._sent_subscription != self.subscription:
                body["subscribed_topic_names"] = list(self.subscription)
            response = await self.client.send(self._coordinator, _HEARTBEAT, body)
            code = ErrorCode(int(response.error_code))
            if leaving:
                return
            if code in _COORDINATOR_ERRORS:
                self._coordinator = None
                delay_ms = 100
            elif code in (ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch):
                self.member_epoch = 0
                delay_ms = 0
            elif code != ErrorCode.none:
                _log.warn("share group {group}: heartbeat failed: {code}", group=self.group_id, code=code.name)
                delay_ms = 1000
            else:
                self._sent_subscription = tuple(body["subscribed_topic_names"] or self._sent_subscription)
                self.member_epoch = int(response.member_epoch)
                self.heartbeat_interval_ms = int(response.heartbeat_interval.total_seconds() * 1000) or delay_ms
                delay_ms = self.heartbeat_interval_ms
                if response.assignment is not None:
                    await self._assigned(response.assignment)
        except KafkaError as e:
            if leaving:
                return
            _log.info("share group {group}: heartbeat: {error!r}", group=self.group_id, error=e)
            self._coordinator = None
            delay_ms = 200
        finally:
            if not leaving:
                self._heartbeat_soon(delay_ms)

    async def _assigned(self, assignment: Any) -> None:
        names = {str(v): k for k, v in self.client.topic_ids.items()}
        if any(str(tp.topic_id) not in names for tp in assignment.topic_partitions):
            await self.client.refresh_metadata()
            names = {str(v): k for k, v in self.client.topic_ids.items()}
        self.assignment = {(names[str(tp.topic_id)], int(p)) for tp in assignment.topic_partitions
                           if str(tp.topic_id) in names for p in tp.partitions}
        if not self._joined.called:
            self._joined.callback(None)

    # --- acknowledgements ----------------------------------------------------------------

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """
        Acknowledge C{record} of the last poll: ACCEPT (processed), RELEASE
        (deliver it again, to any member) or REJECT (never deliver it again).
        Sent with the next poll or L{commit}.

        @raise ValueError: C{record} is not one of the last poll's, or was acknowledged already.
        """
        tp = (record.topic, record.partition)
        delivered = self._delivered.get(tp)
        if delivered is None or record.offset not in delivered:
            raise ValueError(f"{record.topic}-{record.partition}@{record.offset} is not awaiting acknowledgement")
        delivered.discard(record.offset)
        self._pending.setdefault(tp, {})[record.offset] = int(type)

    def _settle_delivered(self) -> None:
        """Implicit mode: accept what the last poll returned and was not acknowledged."""
        unacknowledged = {tp: offsets for tp, offsets in self._delivered.items() if offsets}
        if unacknowledged and self.acknowledgement_mode == "explicit":
            raise ValueError(f"records of the last poll are not acknowledged: {sorted(unacknowledged)}")
        for tp, offsets in unacknowledged.items():
            pending = self._pending.setdefault(tp, {})
            for offset in offsets:
                pending[offset] = int(AcknowledgeType.ACCEPT)
        self._delivered = {}

    @staticmethod
    def _batches(acks: dict[int, int]) -> list[dict]:
        """Acknowledgement batches: runs of consecutive offsets with one type."""
        batches: list[dict] = []
        for offset in sorted(acks):
            kind = acks[offset]
            last = batches[-1] if batches else None
            if last is not None and last["last_offset"] == offset - 1 and last["acknowledge_types"] == [kind]:
                last["last_offset"] = offset
            else:
                batches.append({"first_offset": offset, "last_offset": offset, "acknowledge_types": [kind]})
        return batches

    def _acknowledgements_failed(self, acks: dict[tuple[str, int], dict[int, int]], code: ErrorCode) -> None:
        """
        C{acks} were not delivered (the ShareFetch carrying them failed, or
        their share session is gone): each partition's C{code} goes to
        L{acknowledgement_errors}; their records come again once their
        acquisition locks expire (as Kafka's C{ShareConsumeRequestManager}
        completes them with the error).
        """
        for tp in acks:
            self.acknowledgement_errors[tp] = code

    def _take_acks(self, leader: int) -> dict[tuple[str, int], dict[int, int]]:
        taken = {}
        for tp in list(self._pending):
            if self.client.leader_for(*tp) == leader:
                taken[tp] = self._pending.pop(tp)
        return taken

    def _topics_body(self, partitions: Iterable[tuple[str, int]], acks: dict, key: str) -> list[dict]:
        by_topic: dict[str, list[dict]] = {}
        for topic, partition in sorted(set(partitions) | set(acks)):
            by_topic.setdefault(topic, []).append({
                key: partition, "acknowledgement_batches": self._batches(acks.get((topic, partition), {}))})
        return [{"topic_id": self.client.topic_ids[t], "partitions": ps} for t, ps in by_topic.items()]

    # --- fetching ---------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> defer.Deferred:
        """
        Records acquired for this member, from the partitions assigned to it,
        waiting up to C{timeout_ms}; carries the pending acknowledgements.

        @return: a Deferred firing with L{ShareRecord}s (possibly none).
        @raise ValueError: (as failure) explicit mode with records of the last
            poll not acknowledged.
        """
        return defer.Deferred.fromCoroutine(self._poll(timeout_ms))

    async def _poll(self, timeout_ms: int) -> list[ShareRecord]:
        if self._closed:
            raise KafkaError("the share consumer is closed")
        self._settle_delivered()
        deadline = self.reactor.seconds() + timeout_ms / 1000.0
        if not self._joined.called:
            waiting: defer.Deferred = defer.Deferred()
            timer = self.reactor.callLater(max(0.0, timeout_ms / 1000.0), waiting.callback, None)

            def joined(result: Any) -> Any:
                if not waiting.called:
                    timer.cancel()
                    waiting.callback(None)
                return result

            self._joined.addCallback(joined)
            await waiting
            if not self._joined.called:
                return []
        while True:
            await self.client.ensure_metadata(self.subscription)
            leaders: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(self.assignment):
                leader = self.client.leader_for(*tp)
                if leader is not None and leader >= 0:
                    leaders.setdefault(leader, []).append(tp)
            for leader in set(self._sessions) | {self.client.leader_for(*tp) for tp in self._pending}:
                if leader is not None and leader >= 0:
                    leaders.setdefault(leader, [])
            started = self.reactor.seconds()
            remaining_ms = max(0, int((deadline - started) * 1000))
            results = await defer.gatherResults([
                defer.Deferred.fromCoroutine(self._fetch(leader, tps, min(self.fetch_max_wait_ms, remaining_ms)))
                for leader, tps in leaders.items()], consumeErrors=True) if leaders else []
            records = [r for batch in results for r in batch]
            if records or self.reactor.seconds() >= deadline:
                for r in records:
                    self._delivered.setdefault((r.topic, r.partition), set()).add(r.offset)
                return records
            if not leaders or self.reactor.seconds() - started < 0.001:
                # nothing to fetch, or answered at once (errors, a wait cut short): do not spin,
                # which would also starve the reactor (the heartbeats) when nothing yields
                await sleep(self.reactor, min(0.1, max(0.0, deadline - self.reactor.seconds())))

    def _lock(self, leader: int) -> defer.DeferredLock:
        return self._locks.setdefault(leader, defer.DeferredLock())

    async def _fetch(self, leader: int, partitions: list[tuple[str, int]], max_wait_ms: int) -> list[ShareRecord]:
        lock = self._lock(leader)
        await lock.acquire()
        try:
            return await self._fetch_locked(leader, partitions, max_wait_ms)
        except KafkaError as e:
            _log.info("share fetch from broker {leader}: {error!r}", leader=leader, error=e)
            self.client.invalidate()
            return []
        finally:
            lock.release()

    async def _fetch_locked(self, leader: int, partitions: list[tuple[str, int]],
                            max_wait_ms: int) -> list[ShareRecord]:
        epoch = self._sessions.get(leader, 0)
        acks = self._take_acks(leader)
        if epoch == 0:
            # a new session: what the old one acquired is released (or its locks expire); its
            # acknowledgements cannot be sent (reported in acknowledgement_errors), those records come again
            self._acknowledgements_failed(acks, ErrorCode.share_session_not_found)
            acks = {}
            self._session_partitions[leader] = set()
            if not partitions:
                return []
        known = self._session_partitions[leader]
        forgotten = known - set(partitions)
        body = {"group_id": self.group_id, "member_id": self.member_id, "share_session_epoch": epoch,
                "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": self.fetch_max_bytes,
                "max_records": self.max_poll_records, "batch_size": self.max_poll_records,
                "topics": self._topics_body(partitions, acks, "partition_index"),
                "forgotten_topics_data": [{"topic_id": self.client.topic_ids[t], "partitions": [
                    p for tt, p in sorted(forgotten) if tt == t]} for t in sorted({t for t, _ in forgotten})]}
        try:
            response = await self.client.send(leader, _SHARE_FETCH, body,
                                              timeout_ms=self.client.request_timeout_ms + max_wait_ms)
        except KafkaError as e:
            self._acknowledgements_failed(acks, e.error_code)
            raise
        code = ErrorCode(int(response.error_code))
        if code != ErrorCode.none:
            self._acknowledgements_failed(acks, code)
            if code in _SESSION_ERRORS:
                self._sessions[leader] = 0
            raise kafka_error(code, response.error_message or code.name)
        self._sessions[leader] = 1 if epoch >= 0x7FFFFFFF else epoch + 1
        self._session_partitions[leader] = set(partitions)
        names = {str(v): k for k, v in self.client.topic_ids.items()}
        records: list[ShareRecord] = []
        for topic in response.responses:
            name = names.get(str(topic.topic_id))
            for p in topic.partitions:
                tp = (name, int(p.partition_index))
                if p.acknowledge_error_code:
                    self.acknowledgement_errors[tp] = ErrorCode(int(p.acknowledge_error_code))
                elif tp in acks:
                    self.acknowledgement_errors.pop(tp, None)
                if p.error_code:
                    if int(p.error_code) in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
                        self.client.invalidate()
                    continue
                if name is None or not p.acquired_records or not p.records:
                    continue
                ranges = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                          for a in p.acquired_records]
                for batch in decode_batches(bytes(p.records)):
                    if batch.is_control:
                        continue
                    for record in batch.records:
                        count = next((c for a, b, c in ranges if a <= record.offset <= b), None)
                        if count is not None:
                            records.append(ShareRecord(name, tp[1], record.offset, record.timestamp_ms, record.key,
                                                       record.value, tuple(record.headers), count))
        return records

    def commit(self) -> defer.Deferred:
        """
        Send the pending acknowledgements now (ShareAcknowledge to each leader).

        @return: a Deferred firing with (topic, partition) -> the
            acknowledgement's error (C{NONE} when accepted).
        """
        return defer.Deferred.fromCoroutine(self._commit())

    async def _commit(self) -> dict[tuple[str, int], ErrorCode]:
        self._settle_delivered()
        results: dict[tuple[str, int], ErrorCode] = {}
        leaders = {self.client.leader_for(*tp) for tp in self._pending}
        for leader in leaders:
            if leader is None or leader < 0:
                continue
            results.update(await self._acknowledge(leader, final=False))
        return results

    async def _acknowledge(self, leader: int, final: bool) -> dict[tuple[str, int], ErrorCode]:
        lock = self._lock(leader)
        await lock.acquire()
        try:
            epoch = self._sessions.get(leader, 0)
            acks = self._take_acks(leader)
            if epoch == 0:
                return {tp: ErrorCode.share_session_not_found for tp in acks}
            body = {"group_id": self.group_id, "member_id": self.member_id,
                    "share_session_epoch": -1 if final else epoch,
                    "topics": self._topics_body((), acks, "partition_index")}
            response = await self.client.send(leader, _SHARE_ACKNOWLEDGE, body)
            code = ErrorCode(int(response.error_code))
            if final:
                self._sessions.pop(leader, None)
            elif code in _SESSION_ERRORS:
                self._sessions[leader] = 0
            else:
                self._sessions[leader] = 1 if epoch >= 0x7FFFFFFF else epoch + 1
            if code != ErrorCode.none:
                return {tp: code for tp in acks}
            names = {str(v): k for k, v in self.client.topic_ids.items()}
            return {(names.get(str(t.topic_id)), int(p.partition_index)): ErrorCode(int(p.error_code))
                    for t in response.responses for p in t.partitions}
        finally:
            lock.release()

    def close(self) -> defer.Deferred:
        """
        Send the pending acknowledgements, close the share sessions (what is
        still acquired is released) and leave the group.
        """
        return defer.Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        if self._closed:
            return
        try:
            if self.acknowledgement_mode == "implicit":
                self._settle_delivered()
        except ValueError:
            pass
        self._closed = True
        if self._heartbeat_timer is not None and self._heartbeat_timer.active():
            self._heartbeat_timer.cancel()
        self._heartbeat_timer = None
        for leader in list(self._sessions):
            try:
                await self._acknowledge(leader, final=True)
            except KafkaError as e:
                _log.info("closing the share session on broker {leader}: {error!r}", leader=leader, error=e)
        if self._heartbeating is not None:
            await self._heartbeating
        if self.member_epoch > 0 or self._coordinator is not None:
            try:
                await self._send_heartbeat(leaving=True)
            except KafkaError:
                pass
        if self._owns_client:
            await self.client.close()
