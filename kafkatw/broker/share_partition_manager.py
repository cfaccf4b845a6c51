"""
The share partitions of a broker and the share sessions of its share
consumers (KIP-932), after Kafka's C{SharePartitionManager.java} and
C{ShareSessionCache}.

A share consumer reads the partitions its share group assigned it with
ShareFetch, to each partition's leader, and acknowledges what it got in its
next ShareFetch (piggy-backed) or in ShareAcknowledge.  Requests go through a
I{share session} per (group id, member id) on that broker, numbered by
C{ShareSessionEpoch}:

  - 0 opens a session (a full request: the partitions named are the
    session's; acknowledgements are not allowed, C{INVALID_REQUEST}; a
    ShareAcknowledge cannot, C{INVALID_SHARE_SESSION_EPOCH}); an existing
    session of the member is replaced, its acquired records released;
  - N > 0 continues it: N must be the session's next epoch (else
    C{INVALID_SHARE_SESSION_EPOCH}; no session: C{SHARE_SESSION_NOT_FOUND});
    the partitions named are added, the forgotten ones removed, and the
    response carries only the partitions with records, an error or an
    acknowledgement result;
  - -1 closes it after its acknowledgements: the member's records still
    acquired on this broker are released (a ShareFetch with -1 fetches
    nothing: a partition named without acknowledgements is
    C{INVALID_REQUEST}).

The next epoch after 2147483647 is 1.  A session unused for two minutes is
evicted (a consumer that stopped without closing it; its records are left to
their acquisition locks), and a broker keeps at most 2000 sessions (else
C{SHARE_SESSION_LIMIT_REACHED}), as Kafka's C{ShareSessionCache}.

Each (group, topic, partition) has a L{SharePartition} on the partition's
leader, loaded on first use from the persister (L{kafkatw.broker.share_state})
or, the first time, started at C{share.auto.offset.reset} (C{latest}: the
high watermark; C{earliest}: the log start offset) and written at once, so
that a later leader resumes from the same start offset.  A share partition
loaded under an older leader epoch is dropped and loaded again.  Every
acknowledgement, release, lock expiry and start-offset move is written to the
persister; an acknowledgement is answered once its write completed.

A ShareFetch that acquires nothing waits up to its C{MaxWaitMs} (Kafka's
C{DelayedShareFetch}); it is woken by new records appended to a partition
it reads, and also when records of such a partition may be acquired again:
an acknowledgement (accepted records free their acquisition locks, up to
C{share.partition.max.record.locks}; released ones are available), a
member's release, a lock expiry.

Source: KIP-932; Apache Kafka C{SharePartitionManager.java},
C{ShareSessionCache.java}, C{ShareFetchUtils.java}.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any, Callable, NamedTuple

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode, KafkaError, NotLeaderOrFollowerError, kafka_error
from ..protocol.batch import BATCH_HEADER_SIZE, unpack_header
from ..protocol.share_fetch import SharePartitionData
from ..storage.segment import FileRegion
from .share_partition import InvalidRecordState, SharePartition, SharePartitionSnapshot
from .share_state import MemoryPersister, SharePartitionKey

__all__ = ["SharePartitionManager", "ShareSession", "ShareFetchResult", "next_share_session_epoch"]

_log = Logger()

#: ShareSessionEpoch values (KIP-932).
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_CONTROL = 0x20  # batch attribute: a control batch (transaction marker)
_TRANSACTIONAL = 0x10  # batch attribute: written in a transaction
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def next_share_session_epoch(epoch: int) -> int:
    """The epoch after C{epoch}: C{epoch + 1}, and 1 after 2147483647."""
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


class ShareSession:
    """One member's share session on this broker: its partitions (topic id, partition) and next epoch."""

    def __init__(self, group_id: str, member_id: str) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = 1
        self.partitions: dict[tuple[uuid.UUID, int], None] = {}
        #: when a request last used it (reactor seconds)
        self.last_used_s = 0.0


class ShareFetchResult(NamedTuple):
    """A ShareFetch or ShareAcknowledge answer: top-level error and the topics' partitions."""

    error_code: int
    error_message: str | None
    topics: list[tuple[uuid.UUID, list[SharePartitionData]]]


class _Partition(NamedTuple):
    share: SharePartition
    leader_epoch: int
    topic: str = ""


def _batches_of(regions: list[FileRegion]) -> list[tuple[int, int, bool, FileRegion, int]]:
    """
    (first offset, last offset, is control, the batch's region, producer id
    of a transactional batch else -1) of each batch in C{regions}.
    """
    out = []
    for region in regions:
        position, end = region.position, region.position + region.length
        while position + BATCH_HEADER_SIZE <= end:
            header = unpack_header(os.pread(region.fileno, BATCH_HEADER_SIZE, position))
            out.append((header.base_offset, header.last_offset, bool(header.attributes & _CONTROL),
                        FileRegion(region.fileno, region.path, position, header.size),
                        header.producer_id if header.attributes & _TRANSACTIONAL else -1))
            position += header.size
    return out


def _aborted(log: Any, batches: list) -> list[tuple[int, int]]:
    """
    The ranges of C{batches} that aborted transactions wrote
    (C{share.isolation.level=read_committed}): archived, never delivered,
    as a read-committed consumer drops them (KIP-98, KIP-932).
    """
    aborted = log.collect_aborted_transactions(batches[0][0], batches[-1][1] + 1)
    return [(b[0], b[1]) for b in batches if b[4] >= 0 and any(
        t.producer_id == b[4] and t.first_offset <= b[0] <= t.last_offset for t in aborted)]


def _merge(regions: list[FileRegion]) -> list[FileRegion]:
    """Adjacent regions of one file as one."""
    merged: list[FileRegion] = []
    for r in regions:
        last = merged[-1] if merged else None
        if last is not None and last.fileno == r.fileno and last.position + last.length == r.position:
            merged[-1] = last._replace(length=last.length + r.length)
        else:
            merged.append(r)
    return merged


class SharePartitionManager:
    """
    The share partitions this broker leads and the share sessions of its clients.

    @param replica_manager: the broker's L{kafkatw.broker.replica_manager.ReplicaManager}.
    @param metadata: the L{kafkatw.broker.metadata_cache.MetadataCache} (topic ids, leaders).
    @param config: the broker's config (C{group.share.*}).
    @param persister: where share-partition snapshots are kept (L{kafkatw.broker.share_state}).
    @param group_config: group id -> its group config overrides
        (C{share.auto.offset.reset}, C{share.record.lock.duration.ms},
        C{share.delivery.count.limit}, C{share.partition.max.record.locks},
        C{share.isolation.level}; Kafka's names,
        kafkatw/broker/group_config.py); a setting not overridden is the
        broker's C{group.share.*} one (C{share.isolation.level}:
        C{read_uncommitted}).  C{share.auto.offset.reset} is read when a
        share partition is first started; the others at each ShareFetch, so
        a change applies from the next acquisition (as Kafka's
        C{SharePartition} reads its C{GroupConfigManager}).
    """

    def __init__(self, reactor: Any, replica_manager: Any, metadata: Any, config: Any,
                 persister: Any = None, group_config: Callable[[str], dict[str, str]] | None = None) -> None:
        self.reactor = reactor
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.config = config
        self.persister = persister if persister is not None else MemoryPersister()
        self.group_config = group_config or (lambda group_id: {})
        self.record_lock_duration_ms = config["group.share.record.lock.duration.ms"]
        self.delivery_count_limit = config["group.share.delivery.count.limit"]
        self.max_record_locks = config["group.share.partition.max.record.locks"]
        self.partitions: dict[SharePartitionKey, _Partition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._loading: dict[SharePartitionKey, list[defer.Deferred]] = {}
        #: (topic, partition) -> the Deferreds of the ShareFetches waiting on it (L{_wait_for_records})
        self._parked: dict[tuple[str, int], set[defer.Deferred]] = {}
        listeners = getattr(replica_manager, "leadership_listeners", None)
        if listeners is not None:
            listeners.append(self.leadership_changed)

    # --- topics ----------------------------------------------------------------

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for name, meta in self.metadata.topics.items():
            if meta.topic_id == topic_id or str(meta.topic_id) == str(topic_id):
                return name
        return None

    def _leader(self, name: str, partition: int) -> tuple[int, int]:
        return self.metadata.leader(name, partition), self.metadata.leader_epoch(name, partition)

    # --- share partitions ------------------------------------------------------

    async def share_partition(self, group_id: str, topic_id: uuid.UUID, name: str, index: int) -> SharePartition:
        """
        The share partition of C{group_id} on (C{name}, C{index}), loaded if need be.

        @raise NotLeaderOrFollowerError: this broker does not lead the partition.
        @raise KafkaError: the partition does not exist, or the persister failed.
        """
        partition = self.replica_manager.get_partition(name, index)
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(f"{name}-{index}")
        key = SharePartitionKey(group_id, str(topic_id), index)
        while True:
            held = self.partitions.get(key)
            if held is not None:
                if held.leader_epoch == partition.leader_epoch:
                    # the group's configs as they are now: a change applies from the next acquisition
                    for name, value in self.share_configs(group_id).items():
                        setattr(held.share, name, value)
                    return held.share
                held.share.close()
                del self.partitions[key]
            waiting = self._loading.get(key)
            if waiting is None:
                break
            d: defer.Deferred = defer.Deferred()
            waiting.append(d)
            await d
        self._loading[key] = []
        try:
            share = await self._load(key, group_id, partition)
            self.partitions[key] = _Partition(share, partition.leader_epoch, name)
        finally:
            for d in self._loading.pop(key):
                d.callback(None)
        return share

    def share_configs(self, group_id: str) -> dict[str, int]:
        """
        The L{SharePartition} settings of C{group_id}'s share partitions: the
        group's C{share.record.lock.duration.ms} (ms),
        C{share.delivery.count.limit} and C{share.partition.max.record.locks}
        (records), else the broker's C{group.share.*} ones.
        """
        overrides = self.group_config(group_id)
        return {"record_lock_duration_ms": int(overrides.get("share.record.lock.duration.ms",
                                                             self.record_lock_duration_ms)),
                "delivery_count_limit": int(overrides.get("share.delivery.count.limit", self.delivery_count_limit)),
                "max_record_locks": int(overrides.get("share.partition.max.record.locks", self.max_record_locks))}

    async def _load(self, key: SharePartitionKey, group_id: str, partition: Any) -> SharePartition:
        log = partition.leader_log()
        snapshot = await self.persister.read(key, partition.leader_epoch)
        overrides = self.group_config(group_id)
        configs: dict[str, Any] = {**self.share_configs(group_id), "leader_epoch": partition.leader_epoch,
                                   "on_lock_expired": lambda share: self._lock_expired(key, share)}
        if snapshot is None or snapshot.start_offset < 0:
            reset = overrides.get("share.auto.offset.reset") or self.config["group.share.auto.offset.reset"]
            start = self._reset_offset(log, reset)
            # a deleted group's state (start offset -1) keeps its state epoch: older writers stay fenced
            state_epoch = snapshot.state_epoch if snapshot is not None else 0
            share = SharePartition(self.reactor, start, state_epoch=state_epoch, **configs)
            _log.info("share partition {key} starts at offset {start} ({reset})", key=key, start=start, reset=reset)
            await self.persister.write(key, share.snapshot())
        else:
            share = SharePartition.from_snapshot(self.reactor, snapshot, **configs)
        before = share.snapshot()
        share.move_start_to(log.log_start_offset)
        if share.snapshot() != before:
            await self.persister.write(key, share.snapshot())
        return share

    def _reset_offset(self, log: Any, reset: str) -> int:
        """
        Where C{share.auto.offset.reset} starts a share partition: C{earliest}
        the log start offset, C{latest} the high watermark,
        C{by_duration:<ISO-8601 duration>} the first record at or after now
        minus the duration (the high watermark when there is none).
        """
        if reset == "earliest":
            return log.log_start_offset
        if reset.startswith("by_duration:"):
            m = _DURATION.match(reset[len("by_duration:"):])
            if m is not None:
                days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
                duration_ms = int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)
                found = log.offset_for_timestamp(int(self.reactor.seconds() * 1000) - duration_ms,
                                                 log.high_watermark)
                if found is not None:
                    return max(log.log_start_offset, min(found[0], log.high_watermark))
        return log.high_watermark

    def _persist(self, group_id: str, topic_id: uuid.UUID, index: int, share: SharePartition) -> defer.Deferred:
        key = SharePartitionKey(group_id, str(topic_id), index)
        return self.persister.write(key, share.snapshot()).addErrback(self._write_failed, key, share)

    def _lock_expired(self, key: SharePartitionKey, share: SharePartition) -> None:
        self._persist_in_background(key, share)
        self._wake(key)

    def _persist_in_background(self, key: SharePartitionKey, share: SharePartition) -> None:
        d = self.persister.write(key, share.snapshot()).addErrback(self._write_failed, key, share)
        d.addErrback(lambda f: _log.warn("writing the state of share partition {key} failed: {error}",
                                         key=key, error=f.value))

    def _write_failed(self, failure: Any, key: SharePartitionKey, share: SharePartition) -> Any:
        """A write refused for an older state epoch (offsets reset): drop the share partition, to be loaded again."""
        if failure.check(KafkaError) and failure.value.error_code in (ErrorCode.fenced_state_epoch,
                                                                      ErrorCode.fenced_leader_epoch):
            held = self.partitions.get(key)
            if held is not None and held.share is share:
                del self.partitions[key]
                share.close()
        return failure

    def reset_offsets(self, group_id: str, topic_id: uuid.UUID, index: int, start_offset: int) -> defer.Deferred:
        """
        Move a share partition's start offset (C{--reset-offsets}, the group
        has no members): written to the persister with the next state epoch.
        A share partition loaded here is dropped; one loaded on another
        broker is dropped when its group opens its first session there again,
        and its writes meanwhile are refused (C{FENCED_STATE_EPOCH}), which
        drops it too.
        """
        key = SharePartitionKey(group_id, str(topic_id), index)
        held = self.partitions.pop(key, None)
        if held is not None:
            held.share.close()

        async def reset() -> None:
            snapshot = await self.persister.read(key)
            epoch = snapshot.state_epoch + 1 if snapshot is not None else 0
            share = SharePartition(self.reactor, start_offset, state_epoch=epoch)
            await self.persister.write(key, share.snapshot())

        return defer.Deferred.fromCoroutine(reset())

    def delete_state(self, group_id: str, partitions: list[tuple[uuid.UUID, int]]) -> defer.Deferred:
        """
        Delete the share-partition state of C{group_id} (DeleteGroups of the
        share group, which has no members) on C{partitions} (topic id,
        partition): each share partition with state is written I{not
        initialized} (start offset C{-1}) with the next state epoch, so the
        group, made again, starts at C{share.auto.offset.reset}; a share
        partition loaded here is dropped, one loaded on another broker as
        after L{reset_offsets}.

        @return: a Deferred firing once written; failing with the first
            persister error (C{KafkaError}).
        """
        keys = [SharePartitionKey(group_id, str(topic_id), index) for topic_id, index in partitions]
        for key in keys:
            held = self.partitions.pop(key, None)
            if held is not None:
                held.share.close()

        async def delete() -> None:
            for key in keys:
                snapshot = await self.persister.read(key)
                if snapshot is not None and snapshot.start_offset >= 0:
                    await self.persister.write(key, SharePartitionSnapshot(snapshot.state_epoch + 1, -1, ()))

        return defer.Deferred.fromCoroutine(delete())

    def release_member(self, group_id: str, member_id: str) -> None:
        """Release what C{member_id} of C{group_id} holds on this broker (it left or its session closed)."""
        for key, held in list(self.partitions.items()):
            if key.group_id == group_id and held.share.release_member(member_id):
                self._persist_in_background(key, held.share)
                self._wake(key)

    def _forget_group(self, group_id: str) -> None:
        """
        The group's first session here: drop its share partitions, loaded
        again from the persister, which holds any offsets reset (AlterShareGroupOffsets,
        done while the group had no members) made since; what they held
        acquired is delivered again.
        """
        for key in [k for k in self.partitions if k.group_id == group_id]:
            self.partitions.pop(key).share.close()

    def leadership_changed(self, topic: str, partition: int, role: str, leader_epoch: int | None) -> None:
        """
        The broker's role of (C{topic}, C{partition}) changed: its share
        partitions loaded under another leader epoch (this broker no longer
        leads it, or leads it again under a new epoch) are closed and dropped,
        their acquisition locks with them, so a deposed leader writes nothing
        more (what it still has in flight is refused, C{FENCED_LEADER_EPOCH}).
        """
        for key, held in list(self.partitions.items()):
            if held.topic == topic and key.partition == partition and (
                    role != "leader" or held.leader_epoch != leader_epoch):
                del self.partitions[key]
                held.share.close()

    def close(self) -> None:
        listeners = getattr(self.replica_manager, "leadership_listeners", None)
        if listeners is not None and self.leadership_changed in listeners:
            listeners.remove(self.leadership_changed)
        for held in self.partitions.values():
            held.share.close()
        self.partitions.clear()

    # --- sessions ----------------------------------------------------------------

    #: Most share sessions kept (Kafka's C{ShareSessionCache} size: 10 share groups of 200 members).
    max_sessions = 2000
    #: A share session unused for this long is evicted (ms; Kafka's C{ShareSessionCache} eviction time).
    session_eviction_ms = 120000

    def _session(self, group_id: str, member_id: str, epoch: int, fetch: bool
                 ) -> tuple[ShareSession | None, ErrorCode, str | None]:
        """
        The member's share session for a request of C{epoch}, opened,
        continued or to be closed (see the module docstring); sessions
        unused for C{session_eviction_ms} are evicted first, and at most
        C{max_sessions} are kept (else C{SHARE_SESSION_LIMIT_REACHED}), as
        Kafka's C{ShareSessionCache}.
        """
        key = (group_id, member_id)
        self._evict_idle_sessions()
        session = self.sessions.get(key)
        if epoch == INITIAL_EPOCH:
            if not fetch:
                return None, ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session."
            if session is not None:
                del self.sessions[key]
                self.release_member(group_id, member_id)
            elif not any(g == group_id for g, _ in self.sessions):
                self._forget_group(group_id)
            if len(self.sessions) >= self.max_sessions:
                return None, ErrorCode.share_session_limit_reached, \
                    f"This broker holds its most share sessions ({self.max_sessions})."
            session = self.sessions[key] = ShareSession(group_id, member_id)
            session.last_used_s = self.reactor.seconds()
            return session, ErrorCode.none, None
        if session is None:
            return None, ErrorCode.share_session_not_found, f"No share session for member {member_id}."
        # the most recently used last: the dict is in order of last use
        del self.sessions[key]
        self.sessions[key] = session
        session.last_used_s = self.reactor.seconds()
        if epoch == FINAL_EPOCH:
            return session, ErrorCode.none, None
        if epoch != session.epoch:
            return None, ErrorCode.invalid_share_session_epoch, \
                f"Share session epoch {epoch}, expected {session.epoch}."
        session.epoch = next_share_session_epoch(epoch)
        return session, ErrorCode.none, None

    def _evict_idle_sessions(self) -> None:
        """
        Forget the share sessions unused for C{session_eviction_ms} (a
        consumer that stopped without closing them); their records are
        left to their acquisition locks.
        """
        oldest_s = self.reactor.seconds() - self.session_eviction_ms / 1000.0
        for key, session in list(self.sessions.items()):
            if session.last_used_s > oldest_s:
                break
            del self.sessions[key]

    def _close_session(self, session: ShareSession) -> None:
        """
        A final request (epoch -1) is done: drop C{session} and release its
        member's records, unless a newer session of the member replaced it
        meanwhile (its epoch-0 request released them already).
        """
        key = (session.group_id, session.member_id)
        if self.sessions.get(key) is session:
            del self.sessions[key]
            self.release_member(session.group_id, session.member_id)

    # --- ShareFetch and ShareAcknowledge --------------------------------------------

    async def share_fetch(self, group_id: str, member_id: str, epoch: int, max_wait_ms: int, max_bytes: int,
                          max_records: int, topics: list[tuple[uuid.UUID, list[tuple[int, list]]]],
                          forgotten: list[tuple[uuid.UUID, list[int]]]) -> ShareFetchResult:
        """
        One ShareFetch: acknowledge, then acquire and read.

        @param topics: (topic id, [(partition, acknowledgement batches)]),
            each batch C{(first offset, last offset, [types])}.
        @param forgotten: (topic id, [partition]) to remove from the session.
        """
        if not group_id or not member_id:
            return ShareFetchResult(int(ErrorCode.invalid_request), "GroupId and MemberId are required.", [])
        if epoch == INITIAL_EPOCH and any(acks for _, ps in topics for _, acks in ps):
            return ShareFetchResult(int(ErrorCode.invalid_request),
                                    "Acknowledge data present on initial ShareFetch.", [])
        if epoch == FINAL_EPOCH and any(not acks for _, ps in topics for _, acks in ps):
            return ShareFetchResult(int(ErrorCode.invalid_request),
                                    "A final ShareFetch (epoch -1) fetches nothing: only acknowledgements.", [])
        session, code, message = self._session(group_id, member_id, epoch, fetch=True)
        if session is None:
            return ShareFetchResult(int(code), message, [])
        results: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
        acks = [(topic_id, index, batches) for topic_id, ps in topics for index, batches in ps if batches]
        await self._acknowledge_all(group_id, member_id, acks, results)
        if epoch == FINAL_EPOCH:
            self._close_session(session)
            return ShareFetchResult(0, None, self._answer(results))
        for topic_id, ps in topics:
            for index, _ in ps:
                session.partitions[(topic_id, index)] = None
        for topic_id, indexes in forgotten:
            for index in indexes:
                session.partitions.pop((topic_id, index), None)
        wanted = list(session.partitions)
        if epoch == INITIAL_EPOCH:
            for tp in wanted:
                results.setdefault(tp, {})
        any_acquired = await self._acquire_all(group_id, member_id, wanted, max_bytes, max_records, results)
        if not any_acquired and max_wait_ms > 0 and not any(r.get("error_code") for r in results.values()):
            names = [(self.topic_name(t), i) for t, i in wanted]
            tps = [(n, i) for n, i in names if n is not None]
            deadline_s = self.reactor.seconds() + max_wait_ms / 1000.0
            while tps:
                await self._wait_for_records(tps, max_wait_ms)
                if await self._acquire_all(group_id, member_id, wanted, max_bytes, max_records, results):
                    break
                # woken for records another fetch took first, or for new ones not yet readable: wait on
                max_wait_ms = int((deadline_s - self.reactor.seconds()) * 1000)
                if max_wait_ms <= 0 or any(r.get("error_code") for r in results.values()):
                    break
        return ShareFetchResult(0, None, self._answer(results))

    async def share_acknowledge(self, group_id: str, member_id: str, epoch: int,
                                topics: list[tuple[uuid.UUID, list[tuple[int, list]]]]) -> ShareFetchResult:
        """One ShareAcknowledge (see L{share_fetch} for C{topics})."""
        if not group_id or not member_id:
            return ShareFetchResult(int(ErrorCode.invalid_request), "GroupId and MemberId are required.", [])
        session, code, message = self._session(group_id, member_id, epoch, fetch=False)
        if session is None:
            return ShareFetchResult(int(code), message, [])
        results: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
        acks = [(topic_id, index, batches) for topic_id, ps in topics for index, batches in ps]
        await self._acknowledge_all(group_id, member_id, acks, results)
        if epoch == FINAL_EPOCH:
            self._close_session(session)
        return ShareFetchResult(0, None, self._answer(results))

    async def _wait_for_records(self, partitions: list[tuple[str, int]], max_wait_ms: int) -> None:
        """
        Wait until records are appended to one of C{partitions}, one of their
        share partitions may have records to acquire again (L{_wake}), or
        C{max_wait_ms} passed.
        """
        waiting = self.replica_manager.delay_fetch(partitions, 1, 0, max_wait_ms)
        for tp in partitions:
            self._parked.setdefault(tp, set()).add(waiting)
        try:
            await waiting
        finally:
            for tp in partitions:
                parked = self._parked.get(tp)
                if parked is not None:
                    parked.discard(waiting)
                    if not parked:
                        del self._parked[tp]

    def _wake(self, key: SharePartitionKey) -> None:
        """Records of C{key} may be acquired again: the ShareFetches waiting on its partition try now."""
        if not self._parked:
            return
        name = self.topic_name(uuid.UUID(key.topic_id))
        tp = (name, key.partition)
        parked = self._parked.get(tp) if name is not None else None
        if parked:
            for fetch in self.replica_manager.fetch_purgatory.watching(tp):
                if fetch.deferred in parked:
                    fetch.complete()

    async def _locate(self, group_id: str, topic_id: uuid.UUID, index: int) -> SharePartition:
        name = self.topic_name(topic_id)
        if name is None:
            raise kafka_error(ErrorCode.unknown_topic_id, f"unknown topic id {topic_id}")
        return await self.share_partition(group_id, topic_id, name, index)

    async def _acknowledge_all(self, group_id: str, member_id: str, acks: list, results: dict) -> None:
        for topic_id, index, batches in acks:
            entry = results.setdefault((topic_id, index), {})
            entry["acknowledged"] = True
            try:
                share = await self._locate(group_id, topic_id, index)
                share.acknowledge(member_id, batches)
                await self._persist(group_id, topic_id, index, share)
                self._wake(SharePartitionKey(group_id, str(topic_id), index))
            except InvalidRecordState as e:
                entry["acknowledge_error_code"] = int(ErrorCode.invalid_record_state)
                entry["acknowledge_error_message"] = str(e)
            except Exception as e:  # noqa: BLE001 - the partition's error, as Kafka answers
                entry["acknowledge_error_code"] = int(_error_code(e))
                entry["acknowledge_error_message"] = str(e) or None

    async def _acquire_all(self, group_id: str, member_id: str, wanted: list, max_bytes: int, max_records: int,
                           results: dict) -> bool:
        remaining_bytes = max_bytes if max_bytes > 0 else 0x7FFFFFFF
        remaining_records = max_records if max_records > 0 else 0x7FFFFFFF
        any_acquired = False
        for topic_id, index in wanted:
            entry = results.get((topic_id, index), {})
            if remaining_records <= 0 or remaining_bytes <= 0 or entry.get("acquired"):
                continue
            try:
                share = await self._locate(group_id, topic_id, index)
                name = self.topic_name(topic_id)
                log = self.replica_manager.get_partition(name, index).leader_log()
                share.move_start_to(log.log_start_offset)
                if not share.can_acquire():
                    continue
                offset = share.next_fetch_offset()
                read_committed = self.group_config(group_id).get("share.isolation.level") == "read_committed"
                upper = log.last_stable_offset if read_committed else log.high_watermark
                if offset >= upper:
                    continue
                regions = log.read(offset, remaining_bytes, upper, min_one_batch=not any_acquired)
                batches = _batches_of(regions)
                skip = [(b[0], b[1]) for b in batches if b[2]]
                if read_committed and batches:
                    skip += _aborted(log, batches)
                acquired = share.acquire(member_id, [(b[0], b[1]) for b in batches], remaining_records, skip=skip,
                                         fetch_offset=offset)
            except Exception as e:  # noqa: BLE001 - the partition's error, as Kafka answers
                entry["error_code"] = int(_error_code(e))
                entry["error_message"] = str(e) or None
                results[(topic_id, index)] = entry
                continue
            if not acquired:
                continue
            results[(topic_id, index)] = entry
            last = acquired[-1].last_offset
            first = acquired[0].first_offset
            sent = _merge([b[3] for b in batches if b[1] >= first and b[0] <= last])
            entry["regions"] = sent
            entry["acquired"] = acquired
            any_acquired = True
            remaining_bytes -= sum(r.length for r in sent)
            remaining_records -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
        return any_acquired

    def _answer(self, results: dict) -> list[tuple[uuid.UUID, list[SharePartitionData]]]:
        topics: dict[uuid.UUID, list[SharePartitionData]] = {}
        for (topic_id, index), entry in results.items():
            name = self.topic_name(topic_id)
            leader, leader_epoch = self._leader(name, index) if name is not None else (-1, -1)
            topics.setdefault(topic_id, []).append(SharePartitionData(
                index, entry.get("error_code", 0), entry.get("error_message"),
                entry.get("acknowledge_error_code", 0), entry.get("acknowledge_error_message"),
                leader, leader_epoch, entry.get("regions", ()), [tuple(a) for a in entry.get("acquired", ())]))
        return list(topics.items())


def _error_code(e: Exception) -> ErrorCode:
    if isinstance(e, KafkaError):
        return e.error_code
    _log.error("share partition error: {error!r}", error=e)
    return ErrorCode.unknown_server_error
