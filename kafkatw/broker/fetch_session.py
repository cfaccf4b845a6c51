"""
Fetch sessions (KIP-227): a fetch names only the partitions that changed.

Named after Kafka's C{kafka.server.FetchSession} (C{CachedPartition},
C{FetchSession}, C{FetchSessionCache} and the C{FetchContext}s).  A Fetch
request from v7 carries C{session_id} and C{session_epoch}:

  ============  =============  ============================================
  session_id    session_epoch  meaning
  ============  =============  ============================================
  0             -1 (FINAL)     sessionless: a full fetch, no session (as
                               before KIP-227, and every Fetch before v7)
  0             0 (INITIAL)    full fetch; create a session if the cache
                               has (or can free) a slot, its id answered
  N             0 (INITIAL)    full fetch; close session N, create another
  N             -1 (FINAL)     close session N; the fetch is sessionless
  N             E > 0          incremental fetch in session N at epoch E
  ============  =============  ============================================

An incremental request lists only the partitions the fetcher added or whose
request fields (fetch offset, log start offset, max bytes, leader epoch)
changed, and in C{forgotten_topics_data} those it removed; the broker reads
every partition of the session (a follower's fetch offset of an unlisted
partition is the cached one, so the ISR stays as it was) and answers only the
partitions with records, a changed high watermark, last stable offset or log
start offset, or an error.  A session that is not in the cache answers
C{FETCH_SESSION_ID_NOT_FOUND} (70), an epoch other than the session's next one
C{INVALID_FETCH_SESSION_EPOCH} (71); either way the fetcher starts over with a
full fetch.  Epochs count 1, 2, ... and wrap from 2**31-1 to 1.

The cache holds at most C{max.incremental.fetch.session.cache.slots} sessions
(Kafka's default 1000; 0 turns sessions off: every fetch is full).  When it is
full, a new session may evict (Kafka's C{FetchSessionCacheShard.tryEvict}):
the session used least recently if it has been idle over
L{EVICTION_MS}; else the least valuable one, by (privileged, partitions, id),
if the new session is worth at least as much — where followers' sessions are
privileged and a session is evictable by a consumer's only once it is older
than L{EVICTION_MS} at its last use, by a follower's also when it is a
consumer's.  A full cache is rare, so those choices are linear scans.

Source: KIP-227 (Introduce Incremental FetchRequests to Increase Partition
Scalability); the Kafka protocol guide (FetchRequest v7+).
"""

from __future__ import annotations

import random
from typing import Any, Iterable, NamedTuple, Sequence

from ..errors import ErrorCode
from ..protocol.fetch import PartitionFetchData
from .partition import LEADER

__all__ = [
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchSession",
    "FetchSessionCache",
    "FullFetchContext",
    "IncrementalFetchContext",
    "SessionErrorFetchContext",
    "SessionTopic",
    "SessionlessFetchContext",
    "next_epoch",
]

#: C{session_id} of a fetch outside any session.
INVALID_SESSION_ID = 0
#: C{session_epoch} of a full fetch that asks for a new session.
INITIAL_EPOCH = 0
#: C{session_epoch} of a fetch that closes its session (or has none).
FINAL_EPOCH = -1
#: Kafka's C{MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS}: a session idle this
#: long is stale (any new session evicts it), and a session younger than this
#: at its last use is safe from eviction by a bigger one (ms).
EVICTION_MS = 120_000

_MAX_EPOCH = 0x7FFFFFFF


def next_epoch(epoch: int) -> int:
    """
    The epoch after C{epoch} (Kafka's C{FetchMetadata.nextEpoch}): FINAL
    stays FINAL, INITIAL is followed by 1, and 2**31-1 wraps to 1.
    """
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


class CachedPartition:
    """
    One partition of a session: the request fields last sent for it (named
    as the request's, so the broker reads it as a request partition) and the
    response fields last answered.

    @ivar high_watermark: the last answered high watermark; -1 after an error,
        so the partition is answered again once the error is gone.
    @ivar local_log_start_offset: the last answered log start offset (the
        broker's; C{log_start_offset} is the fetcher's own).
    """

    __slots__ = ("topic", "partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch",
                 "last_fetched_epoch", "log_start_offset", "high_watermark", "last_stable_offset",
                 "local_log_start_offset")

    def __init__(self, topic: str, request_partition: Any) -> None:
        self.topic = topic
        self.partition = request_partition.partition
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.local_log_start_offset = -1
        self.update_request(request_partition)

    def update_request(self, p: Any) -> None:
        """Take the request fields of C{p} (a request's FetchPartition)."""
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.current_leader_epoch = getattr(p, "current_leader_epoch", -1)
        self.last_fetched_epoch = getattr(p, "last_fetched_epoch", -1)
        self.log_start_offset = getattr(p, "log_start_offset", -1)

    def must_respond(self, data: PartitionFetchData) -> bool:
        """
        Whether an incremental response includes this partition (Kafka's
        C{CachedPartition.maybeUpdateResponseData}): it has records or an
        error, or its high watermark, last stable offset or log start offset
        differs from the last answered; remembers what is answered now.
        """
        respond = data.records_bytes > 0
        if data.error_code:
            self.high_watermark = -1
            return True
        if self.high_watermark != data.high_watermark:
            respond = True
            self.high_watermark = data.high_watermark
        if self.last_stable_offset != data.last_stable_offset:
            respond = True
            self.last_stable_offset = data.last_stable_offset
        if self.local_log_start_offset != data.log_start_offset:
            respond = True
            self.local_log_start_offset = data.log_start_offset
        return respond

    def __repr__(self) -> str:
        return (f"CachedPartition({self.topic}-{self.partition}, fetch_offset={self.fetch_offset}, "
                f"high_watermark={self.high_watermark})")


class SessionTopic(NamedTuple):
    """A topic's partitions of a session, shaped as a request's C{FetchTopic} (C{topic}, C{partitions})."""

    topic: str
    partitions: list[CachedPartition]


class FetchSession:
    """
    One incremental fetch session.

    @ivar privileged: created by a follower (C{replica_id} >= 0).
    @ivar partitions: C{(topic, partition)} -> L{CachedPartition}, in the
        order they are read (a partition that returned records moves to the
        end, so a response limit does not starve the others).
    @ivar epoch: the epoch the next request must carry.
    @ivar cached_size: the partition count at the last L{FetchSessionCache.touch}
        (-1: not in a cache).
    """

    def __init__(self, session_id: int, privileged: bool, partitions: dict[tuple[str, int], CachedPartition],
                 now_ms: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1
        self._topics: list[SessionTopic] | None = None

    def __len__(self) -> int:
        return len(self.partitions)

    def __repr__(self) -> str:
        return (f"<FetchSession {self.id} epoch {self.epoch} {len(self.partitions)} partitions"
                f"{' privileged' if self.privileged else ''}>")

    def update(self, topics: Iterable[Any], forgotten: Iterable[Any]) -> tuple[int, int, int]:
        """
        Apply an incremental request (Kafka's C{FetchSession.update}): add or
        update each partition of C{topics} (request C{FetchTopic}s), then drop
        those of C{forgotten} (C{ForgottenTopic}s: C{topic}, C{partitions}).

        @return: C{(added, updated, removed)} partition counts.
        """
        partitions = self.partitions
        added = updated = removed = 0
        for topic in topics:
            name = topic.topic
            for p in topic.partitions:
                cached = partitions.get((name, p.partition))
                if cached is None:
                    partitions[(name, p.partition)] = CachedPartition(name, p)
                    added += 1
                else:
                    cached.update_request(p)
                    updated += 1
        for topic in forgotten:
            name = topic.topic
            for index in topic.partitions:
                if partitions.pop((name, index), None) is not None:
                    removed += 1
        if added or removed:
            self._topics = None
        return added, updated, removed

    def fetch_topics(self) -> list[SessionTopic]:
        """The session's partitions grouped as a request's topics (consecutive runs of a topic)."""
        topics = self._topics
        if topics is None:
            topics = []
            current: SessionTopic | None = None
            for cached in self.partitions.values():
                if current is None or current.topic != cached.topic:
                    current = SessionTopic(cached.topic, [])
                    topics.append(current)
                current.partitions.append(cached)
            self._topics = topics
        return topics

    def move_to_end(self, keys: Sequence[tuple[str, int]]) -> None:
        """Read C{keys} last from now on (they returned records)."""
        partitions = self.partitions
        for key in keys:
            partitions[key] = partitions.pop(key)
        self._topics = None


class SessionlessFetchContext:
    """A fetch outside any session: read what it names and answer all of it (session id 0)."""

    error_code = 0
    session = None

    def __init__(self, topics: Sequence[Any]) -> None:
        #: the topics to read: the request's
        self.topics = topics

    def finish(self, read: list) -> tuple[list, int, int]:
        """C{(topics to answer, error code, session id)} for the partitions C{read}."""
        return read, 0, INVALID_SESSION_ID

    def throttled(self) -> tuple[int, int]:
        """C{(error code, session id)} of an empty, throttled response."""
        return 0, INVALID_SESSION_ID


class SessionErrorFetchContext(SessionlessFetchContext):
    """A fetch whose session is unknown or at another epoch: nothing is read; the answer is the error."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__(())
        self.error_code = int(error)

    def finish(self, read: list) -> tuple[list, int, int]:
        return [], self.error_code, INVALID_SESSION_ID

    def throttled(self) -> tuple[int, int]:
        return self.error_code, INVALID_SESSION_ID


class FullFetchContext(SessionlessFetchContext):
    """
    A full fetch asking for a session: everything is read and answered, and
    the session (if the cache makes room) is built from the request and the
    answer; its id is the response's C{session_id} (0: none).
    """

    def __init__(self, cache: "FetchSessionCache", topics: Sequence[Any], privileged: bool, now_ms: int) -> None:
        super().__init__(topics)
        self.cache = cache
        self.privileged = privileged
        self.now_ms = now_ms

    def finish(self, read: list) -> tuple[list, int, int]:
        def partitions() -> dict[tuple[str, int], CachedPartition]:
            requested = {(t.topic, p.partition): p for t in self.topics for p in t.partitions}
            cached_partitions = {}
            for name, answered in read:
                for data in answered:
                    key = (name, data.partition_index)
                    cached = cached_partitions[key] = CachedPartition(name, requested[key])
                    cached.must_respond(data)
            return cached_partitions

        size = sum(len(t.partitions) for t in self.topics)
        session_id = self.cache.maybe_create_session(self.now_ms, self.privileged, size, partitions)
        return read, 0, session_id


class IncrementalFetchContext(SessionlessFetchContext):
    """
    An incremental fetch: every partition of the session is read (L{topics}),
    and only those L{CachedPartition.must_respond} says changed are answered.
    If the session's epoch moved meanwhile (a duplicate request answered
    first), the answer is C{INVALID_FETCH_SESSION_EPOCH}.

    A follower's session may skip the read of its I{quiet} partitions
    (L{follower_read_topics}).

    @ivar listed: the C{(topic, partition)} keys the request named.
    """

    def __init__(self, session: FetchSession, listed: set[tuple[str, int]] = frozenset()) -> None:
        super().__init__(session.fetch_topics())
        self.session = session
        self.expected_epoch = session.epoch
        self.listed = listed

    def follower_read_topics(self, partitions: Any, replica_id: int, now_ms: int) -> list[SessionTopic]:
        """
        The partitions of a follower's session that need a read, shaped as
        L{topics}: all but the I{quiet} ones, which the read would neither
        answer nor learn anything from.  A partition is quiet when this
        request does not name it, this broker still leads it at the leader
        epoch the follower gave, the follower's cached fetch offset is the
        log end offset (no records to send) and the high watermark (nothing
        waits for a follower: the read could not move it) and was the
        follower's last (L{kafkatw.broker.partition.FollowerState}), the
        follower is in the ISR, and the high watermark, log start offset and
        last stable offset are those last answered.  For a quiet partition the leader records the
        follower's fetch as the read would (C{FollowerState.update}: caught up
        now), so the ISR stays as it is — the only per-partition work left is
        these comparisons.  (Kafka reads every partition of the session.)

        @param partitions: C{(topic, partition)} -> the broker's
            L{kafkatw.broker.partition.Partition}s.
        """
        listed = self.listed
        read = []
        for topic in self.topics:
            name = topic.topic
            keep = None
            for cached in topic.partitions:
                key = (name, cached.partition)
                p = partitions.get(key)
                if p is not None and p.role == LEADER and (not listed or key not in listed):
                    epoch = cached.current_leader_epoch
                    log = p.log
                    offset = cached.fetch_offset
                    if (epoch < 0 or epoch == p.leader_epoch) and offset == log.log_end_offset \
                            and log.high_watermark == offset == cached.high_watermark \
                            and log.log_start_offset == cached.local_log_start_offset:
                        state = p.followers.get(replica_id)
                        if state is not None and state.log_end_offset == offset and replica_id in p.isr \
                                and log.last_stable_offset == cached.last_stable_offset:
                            state.update(offset, offset, now_ms)
                            continue
                if keep is None:
                    keep = SessionTopic(name, [])
                    read.append(keep)
                keep.partitions.append(cached)
        return read

    def finish(self, read: list) -> tuple[list, int, int]:
        session = self.session
        if session.epoch != self.expected_epoch:
            return [], int(ErrorCode.invalid_fetch_session_epoch), session.id
        cache = session.partitions
        answer = []
        moved = []
        for name, answered in read:
            changed = []
            for data in answered:
                cached = cache.get((name, data.partition_index))
                if cached is None or cached.must_respond(data):
                    changed.append(data)
                    if data.records_bytes and cached is not None:
                        moved.append((name, data.partition_index))
            if changed:
                answer.append((name, changed))
        if moved:
            session.move_to_end(moved)
        return answer, 0, session.id

    def throttled(self) -> tuple[int, int]:
        session = self.session
        if session.epoch != self.expected_epoch:
            return int(ErrorCode.invalid_fetch_session_epoch), session.id
        return 0, session.id


class FetchSessionCache:
    """
    The broker's fetch sessions (Kafka's C{FetchSessionCache} and
    C{FetchManager}): L{new_context} turns a Fetch request's session fields
    into the context that says what to read and what to answer.

    @param max_entries: C{max.incremental.fetch.session.cache.slots} (0: no sessions).
    @param eviction_ms: see L{EVICTION_MS}.
    @param rng: a C{random.Random} for session ids (tests pass a seeded one).
    @ivar evictions: sessions evicted so far (Kafka's
        C{IncrementalFetchSessionEvictionsPerSec} counts the same).
    """

    def __init__(self, max_entries: int = 1000, eviction_ms: int = EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self._rng = rng or random.Random()
        self._partitions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        """Kafka's C{NumIncrementalFetchPartitionsCached}: the partitions of every session (at their last use)."""
        return self._partitions

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        """Remove and return session C{session_id} (C{None}: not cached)."""
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self._partitions -= session.cached_size
            session.cached_size = -1
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Record a use of C{session} at C{now_ms} (its recency and size for eviction)."""
        session.last_used_ms = now_ms
        self._partitions += len(session) - max(session.cached_size, 0)
        session.cached_size = len(session)

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _MAX_EPOCH)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(self, now_ms: int, privileged: bool, size: int, partitions: Any) -> int:
        """
        Create a session if there is room or L{try_evict} makes some.

        @param size: the new session's partition count.
        @param partitions: C{partitions()} -> the session's C{(topic,
            partition)} -> L{CachedPartition} map (built only if created).
        @return: the new session's id, or C{INVALID_SESSION_ID}.
        """
        if len(self.sessions) >= self.max_entries and not self.try_evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, partitions(), now_ms)
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """
        Make room for a new session of C{size} partitions (see the module's
        docstring for the order).

        @return: whether a session was evicted.
        """
        sessions = self.sessions
        if not sessions:
            return False
        stale = min(sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stale.last_used_ms > self.eviction_ms:
            victim: FetchSession | None = stale
        else:
            eviction_ms = self.eviction_ms
            # Evictable by anyone: older than eviction_ms at its last use; by a follower's
            # session also: a consumer's (Kafka's evictableByAll, evictableByPrivileged).
            candidates = [s for s in sessions.values()
                          if s.last_used_ms - s.creation_ms > eviction_ms or (privileged and not s.privileged)]
            victim = min(candidates, key=lambda s: (s.privileged, s.cached_size, s.id), default=None)
            if victim is not None and (privileged, size, 0) < (victim.privileged, victim.cached_size, victim.id):
                victim = None
        if victim is None:
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def new_context(self, session_id: int, epoch: int, privileged: bool, topics: Sequence[Any],
                    forgotten: Iterable[Any], now_ms: int) -> SessionlessFetchContext:
        """
        The context of a Fetch request (Kafka's C{FetchManager.newContext}).

        @param session_id: the request's C{session_id}.
        @param epoch: the request's C{session_epoch}.
        @param privileged: the request is a follower's (C{replica_id} >= 0).
        @param topics: the request's C{topics}.
        @param forgotten: the request's C{forgotten_topics_data}.
        @param now_ms: the time (ms).
        @return: a L{SessionlessFetchContext}, L{FullFetchContext},
            L{IncrementalFetchContext} or L{SessionErrorFetchContext}.
        """
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH or self.max_entries <= 0:
                return SessionlessFetchContext(topics)
            return FullFetchContext(self, topics, privileged, now_ms)
        session = self.sessions.get(session_id)
        if session is None:
            return SessionErrorFetchContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionErrorFetchContext(ErrorCode.invalid_fetch_session_epoch)
        session.update(topics, forgotten)
        if not session.partitions:
            self.remove(session_id)
            return SessionlessFetchContext(topics)
        self.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session, {(t.topic, p.partition) for t in topics for p in t.partitions})
