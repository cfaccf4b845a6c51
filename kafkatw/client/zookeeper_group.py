"""
The paper's consumer group: decentralized rebalancing through ZooKeeper
(Kreps et al., NetDB 2011, section 3.2, Algorithm 1), as Kafka 0.8's
C{ZookeeperConsumerConnector} did it.  No broker coordinates anything: every
consumer of a group watches the same registries and computes the same range
assignment.

ZooKeeper layout (docs/design.md: ZooKeeper layout; under the chroot, default C{/kafkatw}; C{<G>}
is the group id, percent-encoded into one path component by
L{kafkatw.zookeeper.zk_data.group_path})::

    /consumers/<G>/ids/<consumer id>        ephemeral   {"version":1,"subscription":{"topic":1},
                                                         "pattern":"static","timestamp":"<ms>"}
    /consumers/<G>/owners/<topic>/<p>       ephemeral   the owning consumer id (UTF-8)
    /consumers/<G>/offsets/<topic>/<p>      persistent  the next offset to consume:
        {"version":1,"offset":42,"leader_epoch":-1,"metadata":"","commit_timestamp":1700000000000}
        (L{kafkatw.zookeeper.zk_data.encode_committed_offset}, shared with the
        broker's group coordinator; Kafka 0.8's bare decimal C{42} is read too)

A pattern subscription registers C{"pattern":"white_list"} with the regular
expression as the subscription's only key (Kafka 0.8's C{WildcardTopicCount});
a topic matches when the whole name matches (Java's C{String.matches}).

Rebalance (one L{GroupState} machine, table L{TRANSITIONS}).  A rebalance is
triggered by watches on C{/consumers/<G>/ids} (children), C{/brokers/ids}
(children), each subscribed topic's C{/brokers/topics/<t>} (data: partitions
added) and, for a pattern, C{/brokers/topics} (children: topics created).  One
attempt:

  1. make sure C{/consumers/<G>/ids/<id>} exists in this session (re-created
     after a session expiry) and the watches are set;
  2. read the registries; sort each topic's partitions and the consumers
     subscribed to it; take this consumer's range (Kafka's range assignor:
     C{n = P // C}, C{extra = P % C}, consumer I{j} takes
     C{n + (j < extra)} partitions from C{j * n + min(j, extra)});
  3. if that is exactly what this consumer owns (nodes verified), nothing
     moves: fetching goes on (or resumes after a suspension);
  4. otherwise: stop fetching, commit the processed offsets, release every
     ownership, read the registries again, take the range again, and claim each
     partition with an ephemeral owner node;
  5. a node still held by another consumer: release all, back off
     C{rebalance_backoff_ms} (x 1..1.5 jitter) and try again, at most
     C{rebalance_max_retries} more times; then L{ConsumerRebalanceFailedError}
     (the consumer deregisters so the others stop counting it);
  6. fetch each claimed partition from its committed offset; a partition the
     group never committed starts at C{auto_offset_reset}, and that start is
     committed at once so the group keeps it.

Watches that fire during an attempt trigger another attempt after it.  A
session whose connection is lost (C{SUSPENDED}) stops fetching at once: the
server may expire it and hand its partitions to others.  A session that
expires (C{LOST}) has lost its ownerships; the consumer re-registers and
rebalances in the new session.

Offsets (delivery semantics, docs/consumer-groups.md): records returned by
L{ZookeeperConsumerGroup.poll} count as I{processed} once the application calls
C{poll} again (or asks the async iterator for the next record).  Auto-commit
(every C{auto_commit_interval_ms}), a rebalance and a session suspension
commit the processed positions: at least once.  C{commit()} commits the
positions after I{every} record returned so far (call it after processing for
at least once, before processing for at most once); C{commit(offsets)} commits
the given next offsets of owned partitions.
"""

from __future__ import annotations

import collections
import enum
import json
import random
import re
import socket
import time
import uuid
from typing import Any, Callable, Iterable, NamedTuple

from twisted.internet.defer import Deferred, DeferredLock, succeed
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from kafkatw.client.assignors import range_assignment
from kafkatw.client.consumer_coordinator import CommitFailedError
from kafkatw.zookeeper.bridge import (
    NodeExistsError,
    NoNodeError,
    ZooKeeperError,
)
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import BROKER_IDS_PATH, TOPICS_PATH, CommittedOffset, decode_topic, group_path

__all__ = [
    "ZookeeperConsumerGroup",
    "GroupState",
    "TRANSITIONS",
    "ConsumerRebalanceFailedError",
    "CommitFailedError",
    "range_assignment",
    "encode_subscription",
    "decode_subscription",
    "Subscription",
]

_log = Logger()

TopicPartition = tuple[str, int]


class ConsumerRebalanceFailedError(Exception):
    """
    The consumer could not claim its partitions within C{rebalance_max_retries}
    retries (Kafka 0.8's C{ConsumerRebalanceFailedException}).  Usually another
    consumer keeps a stale ownership: raise C{rebalance_backoff_ms} or
    C{rebalance_max_retries}, or look for a consumer that cannot see ZooKeeper.
    """


class GroupClosedError(Exception):
    """The group consumer was closed."""


# --- subscriptions (the range assignor: kafkatw.client.assignors.range_assignment) ---------------------


class Subscription(NamedTuple):
    """A registered consumer's subscription: C{pattern} is C{"static"} or C{"white_list"}."""

    pattern: str
    topics: tuple[str, ...]  # static: topic names; white_list: (regex,)

    def matches(self, topic: str) -> bool:
        if self.pattern == "static":
            return topic in self.topics
        return any(re.fullmatch(regex, topic) for regex in self.topics)


def encode_subscription(subscription: Subscription, timestamp_ms: int) -> bytes:
    """The JSON of C{/consumers/<G>/ids/<id>}, Kafka 0.8's C{ZKGroupDirs} registration."""
    return json.dumps(
        {
            "version": 1,
            "subscription": {t: 1 for t in subscription.topics},
            "pattern": subscription.pattern,
            "timestamp": str(timestamp_ms),
        },
        separators=(",", ":"),
    ).encode("utf-8")


def decode_subscription(data: bytes) -> Subscription:
    """Inverse of L{encode_subscription}; Kafka's C{"black_list"} is read as nothing."""
    body = json.loads(data)
    pattern = body.get("pattern", "static")
    topics = tuple(sorted((body.get("subscription") or {}).keys()))
    if pattern not in ("static", "white_list"):
        topics = ()
    return Subscription(pattern, topics)


# --- the state machine ------------------------------------------------------------------------


class GroupState(enum.Enum):
    IDLE = "IDLE"  # constructed, start() not called
    REBALANCING = "REBALANCING"  # one attempt of Algorithm 1 is running
    BACKING_OFF = "BACKING_OFF"  # a claim conflicted: all released, waiting to retry
    STABLE = "STABLE"  # owns its range and fetches it
    SUSPENDED = "SUSPENDED"  # ZooKeeper connection lost, session maybe alive: not fetching
    EXPIRED = "EXPIRED"  # session expired: ownerships gone, waiting for the new session
    FAILED = "FAILED"  # retries exhausted: deregistered, poll() raises
    CLOSING = "CLOSING"  # close(): commit, release, deregister
    CLOSED = "CLOSED"


S = GroupState

#: (state, event) -> (next state, action method or None).  Every pair not listed
#: is a programming error, logged and ignored.  Events:
#:   start                 start() was called
#:   watch_fired           a watched registry changed
#:   rebalanced            an attempt owns its range and fetches it
#:   rebalanced_stale      ... but a watch fired during the attempt (guard:
#:                         C{rebalanced} while a watch is pending)
#:   claim_conflict        an attempt failed (a partition held by another
#:                         consumer, or a ZooKeeper error) and retries remain
#:   retries_exhausted     ... and none remain (guard on the retry count)
#:   backoff_elapsed       the back-off timer fired
#:   zk_suspended / zk_reconnected / zk_session_lost / zk_new_session
#:                         the ZooKeeper session's states (bridge.py)
#:   close / closed        close() was called / finished
TRANSITIONS: dict[tuple[GroupState, str], tuple[GroupState, str | None]] = {
    (S.IDLE, "start"): (S.REBALANCING, "_begin_rebalance"),
    (S.IDLE, "close"): (S.CLOSING, "_leave"),
    (S.REBALANCING, "watch_fired"): (S.REBALANCING, "_mark_pending"),
    (S.REBALANCING, "rebalanced"): (S.STABLE, "_enter_stable"),
    (S.REBALANCING, "rebalanced_stale"): (S.REBALANCING, "_begin_rebalance"),
    (S.REBALANCING, "claim_conflict"): (S.BACKING_OFF, "_schedule_retry"),
    (S.REBALANCING, "retries_exhausted"): (S.FAILED, "_give_up"),
    (S.REBALANCING, "zk_suspended"): (S.SUSPENDED, "_suspend"),
    (S.REBALANCING, "zk_session_lost"): (S.EXPIRED, "_drop_session"),
    (S.REBALANCING, "close"): (S.CLOSING, "_leave"),
    (S.BACKING_OFF, "watch_fired"): (S.BACKING_OFF, None),  # the retry reads the registries anew
    (S.BACKING_OFF, "backoff_elapsed"): (S.REBALANCING, "_retry_rebalance"),
    (S.BACKING_OFF, "zk_suspended"): (S.SUSPENDED, "_suspend"),
    (S.BACKING_OFF, "zk_session_lost"): (S.EXPIRED, "_drop_session"),
    (S.BACKING_OFF, "close"): (S.CLOSING, "_leave"),
    (S.STABLE, "watch_fired"): (S.REBALANCING, "_begin_rebalance"),
    (S.STABLE, "zk_suspended"): (S.SUSPENDED, "_suspend"),
    (S.STABLE, "zk_session_lost"): (S.EXPIRED, "_drop_session"),
    (S.STABLE, "close"): (S.CLOSING, "_leave"),
    (S.SUSPENDED, "watch_fired"): (S.SUSPENDED, None),
    (S.SUSPENDED, "zk_reconnected"): (S.REBALANCING, "_begin_rebalance"),
    (S.SUSPENDED, "zk_session_lost"): (S.EXPIRED, "_drop_session"),
    (S.SUSPENDED, "close"): (S.CLOSING, "_leave"),
    (S.EXPIRED, "watch_fired"): (S.EXPIRED, None),
    (S.EXPIRED, "zk_suspended"): (S.EXPIRED, None),
    (S.EXPIRED, "zk_reconnected"): (S.EXPIRED, None),  # the new-session callback follows
    (S.EXPIRED, "zk_session_lost"): (S.EXPIRED, None),
    (S.EXPIRED, "zk_new_session"): (S.REBALANCING, "_begin_rebalance"),
    (S.EXPIRED, "close"): (S.CLOSING, "_leave"),
    (S.FAILED, "close"): (S.CLOSING, "_leave"),
    (S.CLOSED, "close"): (S.CLOSED, None),
}
# Events that may arrive at any time but mean nothing in some states.
for _state in (S.IDLE, S.FAILED, S.CLOSING, S.CLOSED):
    for _event in ("watch_fired", "zk_suspended", "zk_reconnected", "zk_session_lost", "zk_new_session"):
        TRANSITIONS.setdefault((_state, _event), (_state, None))
for _state in (S.REBALANCING, S.STABLE, S.BACKING_OFF):
    TRANSITIONS.setdefault((_state, "zk_reconnected"), (_state, None))  # same session, nothing lost
    TRANSITIONS.setdefault((_state, "zk_new_session"), (_state, None))
TRANSITIONS[(S.SUSPENDED, "zk_suspended")] = (S.SUSPENDED, None)
TRANSITIONS[(S.CLOSING, "close")] = (S.CLOSING, None)
TRANSITIONS[(S.CLOSING, "closed")] = (S.CLOSED, None)
TRANSITIONS[(S.CLOSED, "closed")] = (S.CLOSED, None)
del _state, _event


def transition_table_markdown() -> str:
    """L{TRANSITIONS} as a Markdown table (docs/consumer-groups.md shows it)."""
    lines = ["| state | event | next state | action |", "|---|---|---|---|"]
    for (state, event), (new, action) in TRANSITIONS.items():
        if new is state and action is None:
            continue
        lines.append(f"| {state.value} | {event} | {new.value} | {(action or '').lstrip('_')} |")
    return "\n".join(lines)


class _Superseded(Exception):
    """The attempt was overtaken (state change, close): drop it silently."""


class _ClaimConflict(Exception):
    pass


def _normalize_reset(value: str) -> str:
    table = {"smallest": "earliest", "earliest": "earliest", "largest": "latest", "latest": "latest"}
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"auto_offset_reset must be smallest, largest, earliest or latest, not {value!r}") from None


def default_consumer_id(group_id: str) -> str:
    """Kafka 0.8's C{<group>_<host>-<ms>-<8 hex>}."""
    return f"{group_id}_{socket.gethostname()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


# --- the group consumer ---------------------------------------------------------------------------


class ZookeeperConsumerGroup:
    """
    A member of consumer group C{group_id}, coordinated through ZooKeeper only.

    @param reactor: the reactor (L{IReactorTime}); timers (back-off, auto
        commit, poll timeouts) use it.
    @param topics: topic names to subscribe to; or
    @param pattern: a regular expression of topic names (whole-name match).
    @param zookeeper_connect: C{HOST:PORT[,...][/chroot]} (chroot default
        C{/kafkatw}, where the brokers register).
    @param bootstrap_servers: brokers for fetching (C{host:port,...}).
    @param consumer_id: this member's id (default Kafka 0.8's
        C{<group>_<host>-<ms>-<hex>}).
    @param auto_offset_reset: where a group without a committed offset starts:
        C{"smallest"}/C{"earliest"} or C{"largest"}/C{"latest"}.
    @param enable_auto_commit: commit processed offsets every
        C{auto_commit_interval_ms} (ms).
    @param rebalance_backoff_ms: wait after a conflicting claim (ms), times a
        random factor in [1, 1.5).
    @param rebalance_max_retries: retries after the first attempt before
        L{ConsumerRebalanceFailedError}.
    @param zookeeper_session_timeout_ms: the ZooKeeper session timeout (ms):
        how long a crashed member keeps its partitions.
    @param zookeeper: an injected L{kafkatw.zookeeper.bridge.ZooKeeperClient}
        or L{kafkatw.testing.FakeZooKeeperClient} (started or not); not stopped
        by L{close}.
    @param consumer: an injected L{kafkatw.client.consumer.Consumer}-like
        object; not closed by L{close}.
    @param wall_clock: the wall clock, C{time.time}'s shape (s since the
        epoch): the times written to ZooKeeper (the subscription's
        C{timestamp}, a commit's C{commit_timestamp}), whatever clock the
        reactor's timers run on (L{kafkatw.client.clock.use_monotonic_clock}).
    @param consumer_options: passed to L{kafkatw.client.consumer.Consumer}
        (C{fetch_min_bytes}, C{fetch_max_wait_ms}, C{max_poll_records}, ...).
    """

    def __init__(
        self,
        reactor: Any,
        group_id: str,
        topics: Iterable[str] | None = None,
        pattern: str | None = None,
        *,
        zookeeper_connect: str | None = None,
        bootstrap_servers: str | list[str] | None = None,
        consumer_id: str | None = None,
        auto_offset_reset: str = "largest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        rebalance_backoff_ms: int = 2000,
        rebalance_max_retries: int = 4,
        zookeeper_session_timeout_ms: int = 6000,
        zookeeper: Any = None,
        consumer: Any = None,
        random_source: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        **consumer_options: Any,
    ) -> None:
        if (topics is None) == (pattern is None):
            raise ValueError("give exactly one of topics and pattern")
        if topics is not None:
            topics = sorted(set(topics))
            if not topics:
                raise ValueError("topics must not be empty")
            self.subscription = Subscription("static", tuple(topics))
        else:
            re.compile(pattern)  # type: ignore[arg-type]
            self.subscription = Subscription("white_list", (pattern,))  # type: ignore[arg-type]
        if rebalance_max_retries < 0:
            raise ValueError("rebalance_max_retries must be >= 0")
        self.reactor = reactor
        self.wall_clock = wall_clock
        self.group_id = group_id
        self.consumer_id = consumer_id or default_consumer_id(group_id)
        self.auto_offset_reset = _normalize_reset(auto_offset_reset)
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.rebalance_backoff_ms = rebalance_backoff_ms
        self.rebalance_max_retries = rebalance_max_retries
        self._random = random_source or random.Random()

        if zookeeper is None:
            if zookeeper_connect is None:
                raise ValueError("zookeeper_connect (or zookeeper=) is required")
            from kafkatw.zookeeper.bridge import ZooKeeperClient

            zookeeper = ZooKeeperClient(zookeeper_connect, reactor, session_timeout_ms=zookeeper_session_timeout_ms)
            self._own_zookeeper = True
        else:
            self._own_zookeeper = False
        self.zookeeper = zookeeper
        self._registry = Registry(zookeeper)
        if consumer is None:
            if bootstrap_servers is None:
                raise ValueError("bootstrap_servers (or consumer=) is required")
            from kafkatw.client.consumer import Consumer

            consumer_options.setdefault("client_id", self.consumer_id)
            consumer = Consumer(reactor, bootstrap_servers, auto_offset_reset=self.auto_offset_reset, **consumer_options)
            self._own_consumer = True
        else:
            self._own_consumer = False
        self.consumer = consumer

        self._group_path = group_path(group_id)
        self.state = GroupState.IDLE
        self.history: list[tuple[GroupState, str, GroupState]] = []
        self._events: collections.deque[str] = collections.deque()
        self._dispatching = False
        self._attempt = 0
        self._tries = 0
        self._pending = False
        self._running: Deferred | None = None
        self._retry_call: Any = None
        self._error: BaseException | None = None
        self._listening = False
        self._watches: dict[str, Any] = {}  # path -> Watch
        self._seen_first: set[str] = set()
        # ownership and offsets, for the current session
        self._owned: set[TopicPartition] = set()
        self._fetching = False
        self._generation = 0
        self._returned: dict[TopicPartition, int] = {}  # after every record returned
        self._processed: dict[TopicPartition, int] = {}  # after records of earlier polls
        self._committed: dict[TopicPartition, int] = {}  # what ZooKeeper holds (as we wrote/read it)
        self._last_returned: list[tuple[TopicPartition, int]] = []
        self._commit_lock = DeferredLock()
        self._consumer_poll: Deferred | None = None
        self._auto_commit: LoopingCall | None = None
        self._stable_waiters: list[Deferred] = []
        self._fetch_waiters: list[Deferred] = []
        self._buffer: collections.deque = collections.deque()
        self._iter_last: tuple[TopicPartition, int] | None = None
        self._closed_d: Deferred | None = None
        self.rebalance_count = 0
        self.last_rebalance_ms: float | None = None

    # --- public API -------------------------------------------------------------------------

    def start(self) -> Deferred:
        """
        Connect (when the ZooKeeper client is ours), register and rebalance.

        @return: a Deferred firing with C{None} when the consumer is first
            stable; L{ConsumerRebalanceFailedError} when it cannot be.
        """
        return Deferred.fromCoroutine(self._start())

    async def _start(self) -> None:
        if self.state is not GroupState.IDLE:
            raise RuntimeError(f"start() in state {self.state.value}")
        if not self.zookeeper.connected:
            await self.zookeeper.start()
        if not self._listening:
            self._listening = True
            self.zookeeper.add_state_listener(self._zk_state)
            self.zookeeper.on_new_session(self._zk_new_session)
        waiter: Deferred = Deferred()
        self._stable_waiters.append(waiter)
        self._input("start")
        await waiter

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer owns and fetches now (empty while rebalancing)."""
        return set(self._owned) if self._fetching else set()

    def group_metadata(self) -> Any:
        """
        What L{kafkatw.client.producer.Producer.send_offsets_to_transaction}
        needs of this member (Java's C{ConsumerGroupMetadata}): the group id,
        the rebalance generation this member counted, and its consumer id as
        member id.  A transaction's offsets become this group's committed
        offsets in ZooKeeper when it commits (docs/transactions.md, Group
        offsets); commit nothing else meanwhile (C{enable_auto_commit=False}).

        @rtype: L{kafkatw.client.transaction_manager.GroupMetadata}
        """
        from .transaction_manager import GroupMetadata

        return GroupMetadata(self.group_id, self._generation, self.consumer_id, None)

    def owned(self) -> set[TopicPartition]:
        """The partitions whose owner node this consumer holds."""
        return set(self._owned)

    def committed(self) -> dict[TopicPartition, int]:
        """The offsets this consumer last committed or read, per owned partition."""
        return {tp: o for tp, o in self._committed.items() if tp in self._owned}

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> Deferred:
        """
        Records of the owned partitions.  Calling C{poll} marks the records of
        the previous calls as processed (the auto commit commits those).

        @param timeout_ms: the longest wait (ms) when nothing is available,
            including waiting out a rebalance.
        @return: a Deferred firing with a list of
            L{kafkatw.client.consumer.ConsumerRecord}, possibly empty;
            L{ConsumerRebalanceFailedError} once the group has failed.
        """
        self._mark_processed()
        return Deferred.fromCoroutine(self._poll(timeout_ms, max_records, self._note_returned))

    def __aiter__(self) -> "ZookeeperConsumerGroup":
        return self

    async def __anext__(self) -> Any:
        """
        The next record; asking for it marks the previous one processed.
        Stops (C{StopAsyncIteration}) once the consumer is closed.
        """
        if self._iter_last is not None:
            tp, next_offset = self._iter_last
            self._iter_last = None
            if tp in self._owned and self._processed.get(tp, -1) < next_offset:
                self._processed[tp] = next_offset
        while not self._buffer:
            if self.state in (GroupState.CLOSING, GroupState.CLOSED):
                raise StopAsyncIteration
            records = await self._poll(1000, None, None)
            self._buffer.extend(records)
        record = self._buffer.popleft()
        tp = (record.topic, record.partition)
        self._returned[tp] = max(self._returned.get(tp, -1), record.offset + 1)
        self._iter_last = (tp, record.offset + 1)
        return record

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> Deferred:
        """
        Write committed offsets to C{/consumers/<G>/offsets/<t>/<p>}.

        @param offsets: C{{(topic, partition): next offset to consume}}; by
            default the position after every record returned so far, for each
            owned partition.
        @return: a Deferred firing with the offsets written; L{CommitFailedError}
            when C{offsets} names a partition this consumer does not own (nothing
            is written then).
        """
        if offsets is None:
            self._last_returned = []
            self._iter_last = None
            for tp, offset in self._returned.items():
                if tp in self._owned:
                    self._processed[tp] = max(self._processed.get(tp, -1), offset)
            return self._commit({tp: o for tp, o in self._returned.items() if tp in self._owned})
        not_owned = sorted(tp for tp in offsets if tp not in self._owned)
        if not_owned:
            return _failed(CommitFailedError(
                f"consumer {self.consumer_id} of group {self.group_id} does not own {not_owned};"
                " a rebalance moved them: their records will be delivered again to the new owner"))
        for tp, offset in offsets.items():
            self._processed[tp] = max(self._processed.get(tp, -1), offset)
        return self._commit(dict(offsets))

    def close(self) -> Deferred:
        """
        Leave the group: with C{enable_auto_commit}, commit the position after
        every record returned; release the ownerships, delete the
        registration; then close the Kafka
        consumer and the ZooKeeper session when they are this object's own.
        """
        if self._closed_d is None:
            self._closed_d = Deferred()
            self._input("close")
        d: Deferred = Deferred()
        self._closed_d.addBoth(lambda r: (d.callback(None), r)[1])
        return d

    # --- the machine ----------------------------------------------------------------------

    def _input(self, event: str, attempt: int | None = None) -> None:
        """
        Feed one event.  Events raised while an action runs are queued and
        handled after it (run to completion).  Events of a rebalance attempt
        carry its number and are dropped once another attempt (or another
        state) has overtaken it.
        """
        self._events.append((event, attempt))
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._events:
                ev, tag = self._events.popleft()
                if tag is not None:
                    if tag != self._attempt or self.state is not GroupState.REBALANCING:
                        continue
                    ev = self._guard(ev)
                key = (self.state, ev)
                if key not in TRANSITIONS:
                    _log.error("group {group}: no transition for {event} in {state}", group=self.group_id,
                               event=ev, state=self.state.value)
                    continue
                new_state, action = TRANSITIONS[key]
                old, self.state = self.state, new_state
                if old is not new_state or action is not None:
                    self.history.append((old, ev, new_state))
                    _log.debug("group {group} consumer {consumer}: {old} --{event}--> {new}", group=self.group_id,
                               consumer=self.consumer_id, old=old.value, event=ev, new=new_state.value)
                if action is not None:
                    getattr(self, action)()
        finally:
            self._dispatching = False

    def _guard(self, event: str) -> str:
        """The two guarded outcomes of an attempt (see L{TRANSITIONS})."""
        if event == "rebalanced" and self._pending:
            return "rebalanced_stale"
        if event == "attempt_failed":
            self._tries += 1
            return "claim_conflict" if self._tries <= self.rebalance_max_retries else "retries_exhausted"
        return event

    # actions

    def _mark_pending(self) -> None:
        self._pending = True

    def _begin_rebalance(self) -> None:
        self._tries = 0
        self._launch()

    def _retry_rebalance(self) -> None:
        self._retry_call = None
        self._launch()

    def _launch(self) -> None:
        self._attempt += 1
        self._pending = False
        attempt = self._attempt
        started = self.reactor.seconds()
        previous, self._running = self._running, None
        d = Deferred.fromCoroutine(self._rebalance(attempt, previous))

        def done(event: str) -> None:
            self.last_rebalance_ms = (self.reactor.seconds() - started) * 1000
            self._input(event, attempt)

        def failed(failure: Any) -> None:
            if failure.check(_Superseded) or attempt != self._attempt:
                return
            self._last_failure = failure.value
            _log.warn("group {group} consumer {consumer}: rebalance attempt failed: {error}", group=self.group_id,
                      consumer=self.consumer_id, error=failure.getErrorMessage())
            self._input("attempt_failed", attempt)

        d.addCallbacks(done, failed)
        d.addErrback(lambda f: _log.failure("group rebalance bookkeeping failed", f))
        if not d.called:
            self._running = d

    def _schedule_retry(self) -> None:
        backoff_s = self.rebalance_backoff_ms / 1000.0 * (1 + self._random.random() * 0.5)
        self._retry_call = self.reactor.callLater(backoff_s, self._input, "backoff_elapsed")

    def _cancel_retry(self) -> None:
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None

    def _enter_stable(self) -> None:
        self._tries = 0
        self.rebalance_count += 1
        if self.enable_auto_commit and self._auto_commit is None:
            self._auto_commit = LoopingCall(self._auto_commit_tick)
            self._auto_commit.clock = self.reactor
            self._auto_commit.start(self.auto_commit_interval_ms / 1000.0, now=False)
        waiters, self._stable_waiters = self._stable_waiters, []
        for w in waiters:
            w.callback(None)

    def _give_up(self) -> None:
        error = ConsumerRebalanceFailedError(
            f"consumer {self.consumer_id} of group {self.group_id} failed to rebalance after"
            f" {self.rebalance_max_retries + 1} attempts ({self.rebalance_backoff_ms} ms back-off):"
            f" {getattr(self, '_last_failure', 'unknown error')}")
        self._error = error
        _log.error("{error}", error=str(error))
        self._stop_fetching()
        self._stop_auto_commit()
        self._cancel_watches()
        # Deregister so the other members stop assigning partitions to us.
        Deferred.fromCoroutine(self._release_and_deregister()).addErrback(
            lambda f: _log.failure("deregistering a failed consumer", f))
        self._fail_waiters(error)

    def _suspend(self) -> None:
        """Connection lost: the server may expire the session any moment, so stop fetching now."""
        self._attempt += 1
        self._stop_fetching()

    def _stop_fetching(self) -> None:
        self._cancel_retry()
        if self._fetching:
            self._fetching = False
            self._generation += 1
            self._buffer.clear()
            # A poll still waiting in the consumer must not take records of the
            # next assignment: they would advance its position and be dropped here.
            pending, self._consumer_poll = self._consumer_poll, None
            if pending is not None and not pending.called:
                pending.cancel()
            self.consumer.assign([])

    def _drop_session(self) -> None:
        """The session expired: its ephemeral nodes (ownerships, registration) are gone."""
        self._stop_fetching()
        self._attempt += 1
        self._owned.clear()
        self._returned.clear()
        self._processed.clear()
        self._committed.clear()
        self._last_returned = []
        self._iter_last = None

    def _leave(self) -> None:
        self._attempt += 1
        self._cancel_retry()
        Deferred.fromCoroutine(self._close()).addBoth(self._closed)

    def _closed(self, result: Any) -> None:
        self._input("closed")
        self._fail_waiters(GroupClosedError(f"consumer {self.consumer_id} closed"))
        if hasattr(result, "check"):
            _log.failure("closing group consumer", result)
        if self._closed_d is not None and not self._closed_d.called:
            self._closed_d.callback(None)

    def _fail_waiters(self, error: BaseException) -> None:
        waiters, self._stable_waiters = self._stable_waiters, []
        for w in waiters:
            w.errback(error)
        self._wake_fetch_waiters()

    # --- ZooKeeper session -----------------------------------------------------------------------

    def _zk_state(self, state: str) -> None:
        event = {"SUSPENDED": "zk_suspended", "CONNECTED": "zk_reconnected", "LOST": "zk_session_lost"}.get(state)
        if event is not None:
            self._input(event)

    def _zk_new_session(self) -> None:
        self._input("zk_new_session")

    def _on_watch(self, path: str, value: Any) -> None:
        if path not in self._seen_first:
            self._seen_first.add(path)  # the first value is the one the attempt reads anyway
            return
        self._input("watch_fired")

    def _on_topics(self, path: str, topics: list[str]) -> None:
        if self.subscription.pattern == "white_list":
            matched = {t for t in topics if self.subscription.matches(t)}
            for t in sorted(matched):
                tpath = f"{TOPICS_PATH}/{t}"
                if tpath not in self._watches:
                    self._watches[tpath] = None
                    self._add_watch(tpath, "data")
            for tpath in [p for p in self._watches if p.startswith(TOPICS_PATH + "/")]:
                if tpath.rsplit("/", 1)[1] not in matched and self._watches[tpath] is not None:
                    self._watches.pop(tpath).cancel()
                    self._seen_first.discard(tpath)
        self._on_watch(path, topics)

    def _add_watch(self, path: str, kind: str, callback: Callable[[str, Any], None] | None = None) -> Deferred:
        cb = callback or self._on_watch
        method = self.zookeeper.watch_children if kind == "children" else self.zookeeper.watch_data
        d = method(path, lambda value: cb(path, value))

        def set_watch(watch: Any) -> None:
            if self.state in (GroupState.CLOSING, GroupState.CLOSED, GroupState.FAILED):
                watch.cancel()
            else:
                self._watches[path] = watch

        def unset(failure: Any) -> Any:
            self._watches.pop(path, None)
            self._seen_first.discard(path)
            return failure

        return d.addCallbacks(set_watch, unset)

    async def _ensure_watches(self) -> None:
        wanted = [(f"{self._group_path}/ids", "children", None), (BROKER_IDS_PATH, "children", None)]
        if self.subscription.pattern == "static":
            wanted += [(f"{TOPICS_PATH}/{t}", "data", None) for t in self.subscription.topics]
        else:
            wanted.append((TOPICS_PATH, "children", self._on_topics))
        for path, kind, cb in wanted:
            if path not in self._watches:
                self._watches[path] = None
                await self._add_watch(path, kind, cb)

    def _cancel_watches(self) -> None:
        for watch in self._watches.values():
            if watch is not None:
                watch.cancel()
        self._watches.clear()
        self._seen_first.clear()

    # --- one rebalance attempt (Algorithm 1) -------------------------------------------------------

    def _check(self, attempt: int) -> None:
        if attempt != self._attempt or self.state is not GroupState.REBALANCING:
            raise _Superseded()

    async def _rebalance(self, attempt: int, previous_attempt: Deferred | None) -> str:
        if previous_attempt is not None and not previous_attempt.called:
            # An overtaken attempt stops at its next step; never run two at once.
            waiter: Deferred = Deferred()
            previous_attempt.addBoth(lambda r: (waiter.callback(None), r)[1])
            await waiter
            self._check(attempt)
        session = self.zookeeper.session_id
        await self._register()
        self._check(attempt)
        await self._ensure_watches()
        self._check(attempt)

        mine = await self._my_range()
        self._check(attempt)
        if mine == self._owned and await self._verify_owned(session):
            self._check(attempt)
            if not self._fetching:
                await self._start_fetching(attempt, previous={})
            return "rebalanced"

        # Something moves: stop fetching, commit what was processed, release all.
        self._stop_fetching()
        previous = {tp: (self._returned.get(tp), self._processed.get(tp), self._committed.get(tp))
                    for tp in self._owned}
        try:
            await self._commit_processed()
        except ZooKeeperError as e:
            _log.warn("commit before rebalance failed: {error}", error=e)
        await self._release_all()
        self._check(attempt)

        mine = await self._my_range()
        self._check(attempt)
        try:
            for tp in sorted(mine):
                await self._claim(tp, session)
                self._check(attempt)
            await self._start_fetching(attempt, previous)
        except _Superseded:
            raise
        except Exception:
            # Release all, back off, try again (Algorithm 1's conflict rule).
            self._stop_fetching()
            try:
                await self._release_all()
            except ZooKeeperError:
                pass
            raise
        _log.info("group {group} consumer {consumer} owns {partitions}", group=self.group_id,
                  consumer=self.consumer_id, partitions=sorted(self._owned))
        return "rebalanced"

    async def _register(self) -> None:
        path = f"{self._group_path}/ids/{self.consumer_id}"
        data = encode_subscription(self.subscription, int(self.wall_clock() * 1000))
        try:
            await self.zookeeper.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            _, stat = await self.zookeeper.get(path)
            if stat.ephemeralOwner != self.zookeeper.session_id:
                raise ZooKeeperError(
                    f"consumer id {self.consumer_id} is registered by another live ZooKeeper session"
                    f" ({stat.ephemeralOwner:#x}) at {path}")

    async def _read_registries(self) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
        zk = self.zookeeper
        try:
            ids = await zk.get_children(f"{self._group_path}/ids")
        except NoNodeError:
            ids = []
        subscriptions: dict[str, Subscription] = {}
        for cid in ids:
            try:
                data, _ = await zk.get(f"{self._group_path}/ids/{cid}")
                subscriptions[cid] = decode_subscription(data)
            except NoNodeError:
                continue
            except (ValueError, TypeError):
                _log.warn("unreadable registration of consumer {cid}", cid=cid)
        subscriptions.setdefault(self.consumer_id, self.subscription)
        static = {t for s in subscriptions.values() if s.pattern == "static" for t in s.topics}
        if any(s.pattern == "white_list" for s in subscriptions.values()):
            try:
                all_topics = set(await zk.get_children(TOPICS_PATH))
            except NoNodeError:
                all_topics = set()
            candidates = static | all_topics
        else:
            candidates = static
        # Only the topics this consumer subscribes to matter for its own range.
        topics = sorted(t for t in candidates if self.subscription.matches(t))
        partitions: dict[str, list[int]] = {}
        for topic in topics:
            try:
                data, _ = await zk.get(f"{TOPICS_PATH}/{topic}")
            except NoNodeError:
                continue
            if data:
                partitions[topic] = sorted(decode_topic(topic, data).partitions)
        consumers = {t: sorted(c for c, s in subscriptions.items() if s.matches(t)) for t in partitions}
        return partitions, consumers

    async def _my_range(self) -> set[TopicPartition]:
        partitions, consumers = await self._read_registries()
        return range_assignment(partitions, consumers).get(self.consumer_id, set())

    def _owner_path(self, tp: TopicPartition) -> str:
        return f"{self._group_path}/owners/{tp[0]}/{tp[1]}"

    def _offset_path(self, tp: TopicPartition) -> str:
        return f"{self._group_path}/offsets/{tp[0]}/{tp[1]}"

    async def _verify_owned(self, session: int | None) -> bool:
        for tp in sorted(self._owned):
            try:
                _, stat = await self.zookeeper.get(self._owner_path(tp))
            except NoNodeError:
                return False
            if stat.ephemeralOwner != session:
                return False
        return True

    async def _claim(self, tp: TopicPartition, session: int | None) -> None:
        path = self._owner_path(tp)
        try:
            await self.zookeeper.create(path, self.consumer_id.encode("utf-8"), ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                data, stat = await self.zookeeper.get(path)
            except NoNodeError:
                raise _ClaimConflict(f"{tp[0]}-{tp[1]} was released while claiming it; retrying")
            if stat.ephemeralOwner != session or session is None:
                raise _ClaimConflict(
                    f"partition {tp[0]}-{tp[1]} is still owned by {data.decode('utf-8', 'replace')}"
                    f" ({path})")
        self._owned.add(tp)

    async def _release_all(self) -> None:
        async with self._commit_lock:
            for tp in sorted(self._owned):
                path = self._owner_path(tp)
                try:
                    _, stat = await self.zookeeper.get(path)
                    if stat.ephemeralOwner == self.zookeeper.session_id:
                        await self.zookeeper.delete(path)
                except NoNodeError:
                    pass
                self._owned.discard(tp)
        self._returned.clear()
        self._processed.clear()
        self._committed.clear()
        self._last_returned = []
        self._iter_last = None

    async def _start_fetching(self, attempt: int, previous: dict[TopicPartition, tuple]) -> None:
        """Assign the owned partitions to the consumer and seek each to where the group is."""
        owned = sorted(self._owned)
        stored = await self._registry.get_committed_offsets(self.group_id, owned) if owned else {}
        self._check(attempt)
        start: dict[TopicPartition, int] = {}
        for tp in owned:
            if tp in self._returned:  # resuming after a suspension: nothing was released
                start[tp] = self._returned[tp]
                continue
            committed = stored.get(tp)
            if committed is None:
                continue
            self._committed[tp] = committed.offset
            returned, processed, was_committed = previous.get(tp, (None, None, None))
            if was_committed == committed.offset and returned is not None:
                # Ours before and nobody moved it since: go on where the application is.
                start[tp] = returned
                self._returned[tp] = returned
                self._processed[tp] = processed if processed is not None else committed.offset
            else:
                start[tp] = committed.offset
                self._returned[tp] = self._processed[tp] = committed.offset
        self.consumer.assign(owned)
        for tp, offset in start.items():
            self.consumer.seek(tp, offset)
        reset = [tp for tp in owned if tp not in start]
        if reset:
            if self.auto_offset_reset == "earliest":
                await self.consumer.seek_to_beginning(*reset)
            else:
                await self.consumer.seek_to_end(*reset)
            self._check(attempt)
            first: dict[TopicPartition, int] = {}
            for tp in reset:
                first[tp] = await self.consumer.position(tp)
                self._check(attempt)
            for tp, offset in first.items():
                self._returned[tp] = self._processed[tp] = offset
            # Anchor the group: a member that takes over must not reset again.
            await self._commit(first)
            self._check(attempt)
        self._fetching = True
        self._wake_fetch_waiters()

    # --- offsets ----------------------------------------------------------------------------

    def _mark_processed(self) -> None:
        for tp, offset in self._last_returned:
            if tp in self._owned and self._processed.get(tp, -1) < offset:
                self._processed[tp] = offset
        self._last_returned = []

    def _note_returned(self, records: list[Any]) -> None:
        last: dict[TopicPartition, int] = {}
        for r in records:
            tp = (r.topic, r.partition)
            last[tp] = max(last.get(tp, -1), r.offset + 1)
        for tp, offset in last.items():
            if self._returned.get(tp, -1) < offset:
                self._returned[tp] = offset
        self._last_returned = list(last.items())

    def _commit_processed(self) -> Deferred:
        return self._commit({tp: o for tp, o in self._processed.items() if tp in self._owned})

    def _auto_commit_tick(self) -> Deferred:
        if self.state not in (GroupState.STABLE, GroupState.REBALANCING) or not self._fetching:
            return succeed(None)
        d = self._commit_processed()
        d.addErrback(lambda f: _log.warn("auto commit of group {group} failed: {error}", group=self.group_id,
                                         error=f.getErrorMessage()))
        return d

    def _stop_auto_commit(self) -> None:
        if self._auto_commit is not None and self._auto_commit.running:
            self._auto_commit.stop()
        self._auto_commit = None

    def _commit(self, offsets: dict[TopicPartition, int]) -> Deferred:
        return Deferred.fromCoroutine(self._commit_locked(offsets))

    async def _commit_locked(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        written: dict[TopicPartition, int] = {}
        async with self._commit_lock:
            for tp, offset in sorted(offsets.items()):
                # Only an owner writes a partition's offset: a released partition
                # belongs to its next owner, whose commits must not be overwritten.
                if tp not in self._owned or self._committed.get(tp) == offset:
                    continue
                now_ms = int(self.wall_clock() * 1000)
                await self._registry.set_committed_offset(
                    self.group_id, tp[0], tp[1], CommittedOffset(offset, commit_timestamp_ms=now_ms))
                self._committed[tp] = offset
                written[tp] = offset
        return written

    # --- fetching -----------------------------------------------------------------------------

    def _wake_fetch_waiters(self) -> None:
        waiters, self._fetch_waiters = self._fetch_waiters, []
        for w in waiters:
            if not w.called:
                w.callback(None)

    async def _wait_fetching(self, timeout_s: float) -> None:
        d: Deferred = Deferred()
        self._fetch_waiters.append(d)
        call = self.reactor.callLater(timeout_s, lambda: None if d.called else d.callback(None))
        await d
        if call.active():
            call.cancel()

    async def _poll(self, timeout_ms: int, max_records: int | None, note: Callable[[list[Any]], None] | None) -> list[Any]:
        deadline = self.reactor.seconds() + timeout_ms / 1000.0
        while True:
            if self._error is not None:
                raise self._error
            if self.state in (GroupState.CLOSING, GroupState.CLOSED):
                return []
            remaining = deadline - self.reactor.seconds()
            if not self._fetching:
                if remaining <= 0:
                    return []
                await self._wait_fetching(remaining)
                continue
            generation = self._generation
            pending = self.consumer.poll(timeout_ms=max(0, int(remaining * 1000)), max_records=max_records)
            self._consumer_poll = pending
            try:
                records = await pending
            except Exception:
                if generation != self._generation:
                    continue  # the partitions moved under the poll (it was cancelled)
                raise
            finally:
                if self._consumer_poll is pending:
                    self._consumer_poll = None
            if generation != self._generation or not self._fetching:
                # A rebalance stopped fetching meanwhile: these records were never
                # returned, so they are not committed; their next owner gets them.
                if self.reactor.seconds() >= deadline:
                    return []
                continue
            records = [r for r in records if (r.topic, r.partition) in self._owned]
            if note is not None:
                note(records)
            if records or self.reactor.seconds() >= deadline:
                return records

    async def _release_and_deregister(self) -> None:
        try:
            await self._release_all()
        finally:
            try:
                await self.zookeeper.delete(f"{self._group_path}/ids/{self.consumer_id}")
            except (NoNodeError, ZooKeeperError):
                pass

    async def _close(self) -> None:
        running, self._running = self._running, None
        if running is not None and not running.called:
            waiter: Deferred = Deferred()
            running.addBoth(lambda r: (waiter.callback(None), r)[1])
            await waiter
        self._stop_auto_commit()
        self._mark_processed()
        if self._iter_last is not None:
            tp, offset = self._iter_last
            if tp in self._owned:
                self._processed[tp] = max(self._processed.get(tp, -1), offset)
        was_fetching = self._fetching
        self._stop_fetching()
        self._cancel_watches()
        if self.zookeeper.connected and self.state is not GroupState.IDLE:
            if (was_fetching or self._owned) and self.enable_auto_commit:
                try:
                    # The application is done with what it was given.  With manual
                    # commits, closing commits nothing (as Kafka's consumers do).
                    await self._commit({tp: o for tp, o in self._returned.items() if tp in self._owned})
                except ZooKeeperError as e:
                    _log.warn("final commit of group {group} failed: {error}", group=self.group_id, error=e)
            try:
                await self._release_and_deregister()
            except ZooKeeperError as e:
                _log.warn("leaving group {group} failed: {error}", group=self.group_id, error=e)
        if self._listening:
            try:
                self.zookeeper.remove_state_listener(self._zk_state)
            except ValueError:
                pass
        if self._own_consumer:
            await self.consumer.close()
        if self._own_zookeeper and self.zookeeper.connected:
            await self.zookeeper.stop()


def _failed(error: BaseException) -> Deferred:
    d: Deferred = Deferred()
    d.errback(error)
    return d
