"""
L{ConsumerCoordinator}: a L{kafkatw.client.consumer.Consumer}'s membership of
a consumer group coordinated by a broker (Kafka's classic group protocol, as
Kafka's C{ConsumerCoordinator} runs it), in Twisted.  The consumer fetches,
keeps positions and decodes as it does for partitions it was assigned by
hand; the coordinator only decides which partitions those are, and where a
newly assigned partition starts (its committed offset).

The protocol (the Kafka protocol guide; versions this module speaks)::

    FindCoordinator (key type 0)  ->  the group's coordinator broker
    JoinGroup v5    member id "" first: MEMBER_ID_REQUIRED gives one (KIP-394),
                    join again with it; a static member (group_instance_id,
                    KIP-345) skips that round and keeps its member id's place
    SyncGroup v3    the leader sends every member's assignment, computed with
                    the assignor the coordinator chose among the ones every
                    member offered (L{kafkatw.client.assignors}); each member
                    gets its own
    Heartbeat v3    every heartbeat_interval_ms on its own timer, whatever the
                    application does
    OffsetCommit v7 / OffsetFetch v5 (v7 require_stable for read_committed, KIP-447)
                    with this member's generation id and member id
    LeaveGroup v3   on close, not for a static member (its session ends it)

When: the member joins, and rejoins after a heartbeat or a commit learnt
of a rebalance (C{REBALANCE_IN_PROGRESS}) or of its fencing, only when the
application polls (L{kafkatw.client.consumer.Consumer.poll} or
C{wait_for_assignment}), as Kafka's consumer rebalances inside C{poll}: the
partitions of a batch the application is processing (and, say, committing in a
transaction with L{ConsumerCoordinator.group_metadata}) do not move under it.
Heartbeats go on, on their own timer, meanwhile; a member that does not poll
within C{rebalance_timeout_ms} (Kafka's C{max.poll.interval.ms}) is removed by
the coordinator.  The leader also rejoins (and so rebalances the group) when
a topic it assigned has another partition count in the metadata, refreshed
once older than the client's C{metadata_max_age_ms} (Kafka's assignment
snapshot); the consumer is changed only through its
L{kafkatw.client.consumer.SubscriptionState}.

Rebalance protocol: I{eager} unless every assignor offered is cooperative
(C{cooperative-sticky}, KIP-429), as Kafka's consumer decides:

  - eager: before joining, commit (with C{enable_auto_commit}), call
    C{on_partitions_revoked(all owned)} and drop them; after SyncGroup, take
    the new assignment and call C{on_partitions_assigned(it)}.
  - cooperative: keep consuming everything owned while joining (the
    subscription says what it owns); after SyncGroup, call
    C{on_partitions_revoked(owned - new)} for what went, then
    C{on_partitions_assigned(new - owned)}; when something was revoked, join
    again at once so the group can hand it to its new member.

Errors (the response's error code): C{REBALANCE_IN_PROGRESS} from Heartbeat
or OffsetCommit: join again.  C{ILLEGAL_GENERATION}, C{UNKNOWN_MEMBER_ID}:
this member was fenced: C{on_partitions_lost(owned)} (no commit: the
partitions may have new owners already), forget the generation (and the
member id for C{UNKNOWN_MEMBER_ID}) and join again.  C{NOT_COORDINATOR},
C{COORDINATOR_NOT_AVAILABLE}, C{COORDINATOR_LOAD_IN_PROGRESS} and lost
connections: find the coordinator again after C{retry_backoff_ms}.
C{FENCED_INSTANCE_ID} (another process took this static member's id), and
errors no retry mends (C{GROUP_AUTHORIZATION_FAILED},
C{INCONSISTENT_GROUP_PROTOCOL}, …) stop the member: the next
L{kafkatw.client.consumer.Consumer.poll} fails with them.

Offsets: C{enable_auto_commit} commits, every C{auto_commit_interval_ms} and
before a rebalance, the positions the consumer had when
L{kafkatw.client.consumer.Consumer.poll} was last called: the records
returned by the polls before it, which the application has processed by
then (at least once, as Kafka's consumer commits in C{poll}); on close, the
positions (everything returned).

Source: the Kafka protocol guide; KIP-345 (static membership); KIP-394
(member id required); KIP-429 (incremental cooperative rebalancing); KIP-447
(group metadata, require_stable); Kafka's C{ConsumerCoordinator},
C{AbstractCoordinator} and C{ConsumerRebalanceListener}.
"""

from __future__ import annotations

from typing import Any, Iterable

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import ErrorCode, KafkaError, kafka_error
from ..protocol.consumer_protocol import (
    MemberSubscription,
    decode_assignment,
    decode_member_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
)
from .assignors import ASSIGNORS, COOPERATIVE
from .client import sleep
from .transaction_manager import GroupMetadata, find_coordinator

__all__ = ["ConsumerCoordinator", "ConsumerRebalanceListener", "CommitFailedError"]

_log = Logger()

TopicPartition = tuple[str, int]

_FIND_COORDINATOR_GROUP = 0
_JOIN_GROUP, _JOIN_GROUP_V = 11, 5
_SYNC_GROUP, _SYNC_GROUP_V = 14, 3
_HEARTBEAT, _HEARTBEAT_V = 12, 3
_LEAVE_GROUP, _LEAVE_GROUP_V = 13, 3
_OFFSET_FETCH, _OFFSET_FETCH_V, _OFFSET_FETCH_STABLE_V = 9, 5, 7
_OFFSET_COMMIT, _OFFSET_COMMIT_V = 8, 7

#: Errors after which the coordinator is looked up again.
COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                               ErrorCode.coordinator_load_in_progress})
#: Errors that mean this member's generation is gone: its partitions are lost.
FENCED = frozenset({ErrorCode.illegal_generation, ErrorCode.unknown_member_id})


def _cancel(call: Any) -> None:
    """Cancel a C{reactor.callLater} call unless C{None}, fired or cancelled; C{None}, to store in its place."""
    if call is not None and call.active():
        call.cancel()


class CommitFailedError(Exception):
    """
    A commit named partitions this consumer does not own (any more): in a
    broker-coordinated group (L{kafkatw.client.consumer.Consumer.commit}), the
    group rebalanced and refused the commit of this member's generation
    (Kafka's C{CommitFailedException}); in the paper's ZooKeeper group
    (L{kafkatw.client.zookeeper_group}), partitions it does not own.
    """


class ConsumerRebalanceListener:
    """
    Told of partitions moving in and out of this member (Kafka's
    C{ConsumerRebalanceListener}); subclass and override.  Each method may
    return a Deferred: the rebalance waits for it.  An exception is logged
    and the rebalance goes on.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """
        C{revoked} are taken away in an orderly rebalance; the consumer's
        positions are still there (commit them here when not auto-committing).
        Eager protocol: every owned partition, before joining (possibly
        empty); cooperative: only those that move, after SyncGroup (not called
        when none does).
        """

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """
        C{assigned} are this member's from now on (eager: all of its
        partitions; cooperative: only the new ones; possibly empty).  Their
        positions start at the group's committed offsets unless sought here.
        """

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """
        C{lost} may have new owners already (this member was fenced:
        C{ILLEGAL_GENERATION}, C{UNKNOWN_MEMBER_ID}, its session timed out):
        do not commit them.  By default calls L{on_partitions_revoked}, as
        Kafka's does.
        """
        return self.on_partitions_revoked(lost)


class _Rejoin(Exception):
    """One join attempt ended without an assignment: try again (after C{delay} s)."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(delay)
        self.delay = delay


class ConsumerCoordinator:
    """
    The group membership of one L{kafkatw.client.consumer.Consumer} (see the
    module docstring).  Made by the consumer for its C{group_id}; its
    methods are reached through the consumer's (C{subscribe}, C{commit},
    C{committed}, C{group_metadata}, C{close}).

    @param consumer: the consumer whose partitions this decides.
    @param group_id: the group.
    @param group_instance_id: a static member's id (KIP-345), C{None}: dynamic.
    @param assignors: the assignor names to offer, preferred first
        (L{kafkatw.client.assignors.ASSIGNORS}).
    @param session_timeout_ms: the coordinator removes the member after this
        long without a heartbeat (ms).
    @param rebalance_timeout_ms: how long the coordinator waits for members
        to rejoin in a rebalance (ms; Kafka's C{max.poll.interval.ms}).
    @param heartbeat_interval_ms: time between heartbeats (ms).
    @param enable_auto_commit: commit positions every C{auto_commit_interval_ms}
        (ms), before rebalances and on close.
    @param require_stable: OffsetFetch with C{require_stable} (read_committed
        consumers, KIP-447): wait while a transaction's offsets are pending.
    @raise ValueError: an unknown assignor name, or none.
    """

    #: OffsetCommit's version (v9+: the generation id is a KIP-848 member epoch)
    offset_commit_version = _OFFSET_COMMIT_V

    def __init__(self, consumer: Any, group_id: str, *, group_instance_id: str | None = None,
                 assignors: Iterable[str] = ("range", "cooperative-sticky"), session_timeout_ms: int = 45000,
                 rebalance_timeout_ms: int = 300000, heartbeat_interval_ms: int = 3000,
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 require_stable: bool = False) -> None:
        names = list(dict.fromkeys(assignors))
        if not names:
            raise ValueError("partition_assignment_strategy must name at least one assignor")
        unknown = [n for n in names if n not in ASSIGNORS]
        if unknown:
            raise ValueError(f"unknown assignor(s) {unknown}; known: {sorted(ASSIGNORS)}")
        if not group_id:
            raise ValueError("group_id must not be empty")
        self.consumer = consumer
        #: the consumer's L{kafkatw.client.consumer.SubscriptionState}: what this member changes of it
        self.subscriptions = consumer.subscriptions
        self.reactor = consumer.reactor
        self.client = consumer.client
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.assignors = names
        #: the rebalance protocol: cooperative only when every assignor is (KIP-429)
        self.cooperative = all(n in COOPERATIVE for n in names)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.require_stable = require_stable
        self.retry_backoff_ms = consumer.retry_backoff_ms
        self.request_timeout_ms = consumer.request_timeout_ms
        self.default_api_timeout_ms = consumer.default_api_timeout_ms
        self.member_id = ""
        self.generation_id = -1
        #: the assignor the coordinator chose in the last join
        self.protocol: str | None = None
        self.topics: tuple[str, ...] = ()
        self.listener: ConsumerRebalanceListener = ConsumerRebalanceListener()
        #: this member's partitions (what the consumer is assigned)
        self.owned: set[TopicPartition] = set()
        #: the last assignment, kept through an eager revocation for the sticky assignor's user data
        self._sticky_previous: tuple[list[TopicPartition], int] = ([], -1)
        #: an eager member's paused partitions before it revoked them, paused again if reassigned
        self._paused_before_revoke: set[TopicPartition] = set()
        self.rebalances = 0
        self._coordinator: int | None = None
        self._joining: defer.Deferred | None = None
        self._rejoin_needed = True
        self._heartbeat_call: Any = None
        self._auto_commit_call: Any = None
        self._error: BaseException | None = None
        self._closed = False
        self._stable_waiters: list[defer.Deferred] = []
        #: the leader's: topic -> partition count its last assignment used (Kafka's assignmentSnapshot)
        self._assignment_snapshot: dict[str, int] | None = None

    # --- the application's side --------------------------------------------------------------

    def subscribe(self, topics: Iterable[str], listener: ConsumerRebalanceListener | None = None) -> None:
        """Subscribe to C{topics} (replacing the subscription): join the group (or rejoin) at the next poll."""
        topics = tuple(sorted(set(topics)))
        if not topics:
            raise ValueError("subscribe to at least one topic (unsubscribe by closing)")
        if listener is not None:
            self.listener = listener
        if topics != self.topics:
            self.topics = topics
            self.request_rejoin()
        self._start_auto_commit()

    def error(self) -> BaseException | None:
        """The error that stopped this member (see the module docstring), else C{None}."""
        return self._error

    def wait_for_assignment(self) -> defer.Deferred:
        """
        @return: a Deferred firing with this member's partitions once it is in
            a stable generation (at once when it is), or failing with the
            error that stopped it.
        """
        if self._error is not None:
            return defer.fail(self._error)
        if self.generation_id >= 0 and not self._rejoin_needed and self._joining is None:
            return defer.succeed(set(self.owned))
        d: defer.Deferred = defer.Deferred()
        self._stable_waiters.append(d)
        self.maybe_join()
        return d

    def group_metadata(self) -> GroupMetadata:
        """
        This member's group id, generation id, member id and group instance id
        (Java's C{ConsumerGroupMetadata}, KIP-447), for
        L{kafkatw.client.producer.Producer.send_offsets_to_transaction}.
        """
        return GroupMetadata(self.group_id, self.generation_id, self.member_id, self.group_instance_id)

    # --- joining -------------------------------------------------------------------------------

    def request_rejoin(self) -> None:
        """
        Join again at the next L{maybe_join} (a new subscription, a rebalance
        announced): the application's next poll.
        """
        self._rejoin_needed = True

    def maybe_join(self) -> None:
        """
        Start joining when needed and no join runs (one at a time): called by
        the consumer's C{poll} and C{wait_for_assignment}, so that partitions
        move only while the application is between batches (Kafka's consumer
        rebalances inside C{poll}).
        """
        if self._closed or not self.topics or self._error is not None:
            return
        self._check_partition_counts()
        if self._joining is None and self._rejoin_needed:
            self._stop_heartbeat()
            joining = defer.Deferred.fromCoroutine(self._join_until_stable())
            self._joining = joining
            joining.addBoth(self._join_done)

    def _check_partition_counts(self) -> None:
        """
        The leader's check that the topics it last assigned still have the
        partitions it assigned (Kafka's C{ConsumerCoordinator.rejoinNeededOrPending}
        comparing its assignment snapshot with the metadata): metadata older
        than the client's C{metadata_max_age_ms} is refreshed, and once it
        shows another partition count (partitions created, a topic deleted)
        the leader rejoins, which rebalances the whole group.
        """
        snapshot = self._assignment_snapshot
        if snapshot is None or self._joining is not None or self._rejoin_needed:
            return
        if self.client.metadata_stale():
            self.subscriptions.request_metadata_update()
        changed = {t: len(self.client.partitions_for(t)) for t, n in snapshot.items()
                   if len(self.client.partitions_for(t)) != n}
        if changed:
            _log.info("group {group}: partition counts changed ({changed}, were {was}); rejoining",
                      group=self.group_id, changed=changed, was={t: snapshot[t] for t in changed})
            self._assignment_snapshot = None
            self.request_rejoin()

    def _join_done(self, result: Any) -> None:
        self._joining = None
        if isinstance(result, Failure):
            if not self._closed:
                self._error = result.value
                _log.error("consumer group {group} member stopped: {error}", group=self.group_id,
                           error=result.getErrorMessage())
                self.subscriptions.group_failed()
            waiters, self._stable_waiters = self._stable_waiters, []
            for d in waiters:
                d.errback(result.value) if not self._closed else d.callback(None)
            return
        if self._closed:
            return
        if self._rejoin_needed:  # asked again during the join (a heartbeat, a cooperative revocation)
            self.maybe_join()
            return
        self._schedule_heartbeat(self.heartbeat_interval_ms / 1000.0)
        waiters, self._stable_waiters = self._stable_waiters, []
        for d in waiters:
            d.callback(set(self.owned))

    async def _join_until_stable(self) -> None:
        while self._rejoin_needed and not self._closed:
            try:
                await self._join_once()
            except _Rejoin as again:
                if again.delay:
                    await sleep(self.reactor, again.delay)
            except KafkaError as e:
                if not e.retriable:
                    raise
                self._coordinator = None
                _log.debug("group {group}: join failed, retrying: {error}", group=self.group_id, error=e)
                await sleep(self.reactor, self.retry_backoff_ms / 1000.0)

    async def _join_once(self) -> None:
        node = await self._ensure_coordinator()
        if self.enable_auto_commit and self.generation_id >= 0 and self.owned:
            # still in our generation: keep the progress before anything moves
            await self._commit_quietly(self.consumer.consumed_positions())
        if not self.cooperative and self.owned:
            revoked, self.owned = set(self.owned), set()
            self._paused_before_revoke = self.consumer.paused()
            await self._call_listener("on_partitions_revoked", revoked)
            self.subscriptions.assign_from_subscribed([])
        self._rejoin_needed = False
        joined = await self._request(node, _JOIN_GROUP, _JOIN_GROUP_V, {
            "group_id": self.group_id, "session_timeout": self.session_timeout_ms,
            "rebalance_timeout": self.rebalance_timeout_ms, "member_id": self.member_id,
            "group_instance_id": self.group_instance_id, "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": self._metadata(name)} for name in self.assignors]},
            timeout_ms=self.rebalance_timeout_ms + self.request_timeout_ms)
        code = ErrorCode(int(joined.error_code))
        if code != ErrorCode.none:
            self._rejoin_needed = True
            if code == ErrorCode.member_id_required:  # KIP-394: join again with the id the coordinator gave
                self.member_id = joined.member_id
                raise _Rejoin()
            if code in FENCED:
                self._fenced(code)
                raise _Rejoin()
            if code in COORDINATOR_MOVED:
                self._coordinator = None
                raise _Rejoin(self.retry_backoff_ms / 1000.0)
            if code == ErrorCode.rebalance_in_progress:
                raise _Rejoin(self.retry_backoff_ms / 1000.0)
            raise kafka_error(code, f"joining group {self.group_id!r}: {code.name}")
        self.member_id = joined.member_id
        self.generation_id = int(joined.generation_id)
        self.protocol = joined.protocol_name
        assignments = []
        self._assignment_snapshot = None
        if joined.leader == self.member_id and joined.members:
            assignments = await self._assign(joined.protocol_name, joined.members)
        synced = await self._request(node, _SYNC_GROUP, _SYNC_GROUP_V, {
            "group_id": self.group_id, "generation_id": self.generation_id, "member_id": self.member_id,
            "group_instance_id": self.group_instance_id, "assignments": assignments})
        code = ErrorCode(int(synced.error_code))
        if code != ErrorCode.none:
            self._rejoin_needed = True
            if code in FENCED:
                self._fenced(code)
                raise _Rejoin()
            if code in COORDINATOR_MOVED:
                self._coordinator = None
                raise _Rejoin(self.retry_backoff_ms / 1000.0)
            if code == ErrorCode.rebalance_in_progress:
                raise _Rejoin()
            raise kafka_error(code, f"syncing group {self.group_id!r}: {code.name}")
        assigned = {tp for tp in decode_assignment(bytes(synced.assignment or b"")) or []
                    if tp[0] in self.topics}
        self.rebalances += 1
        await self._apply(assigned)

    async def _apply(self, assigned: set[TopicPartition]) -> None:
        """Take the assignment SyncGroup gave (listener calls as the module docstring says)."""
        self._sticky_previous = (sorted(assigned), self.generation_id)
        if self.cooperative:
            revoked = self.owned - assigned
            added = assigned - self.owned
            if revoked:
                if self.enable_auto_commit:
                    await self._commit_quietly({tp: o for tp, o in self.consumer.consumed_positions().items()
                                                if tp in revoked})
                await self._call_listener("on_partitions_revoked", revoked)
            self.owned = set(assigned)
            self.subscriptions.assign_from_subscribed(sorted(assigned))
            await self._call_listener("on_partitions_assigned", added)
            if revoked:
                self._rejoin_needed = True  # KIP-429: let the group give them to their new member
        else:
            self.owned = set(assigned)
            paused, self._paused_before_revoke = self._paused_before_revoke, set()
            self.subscriptions.assign_from_subscribed(sorted(assigned))
            kept_paused = [tp for tp in paused if tp in assigned]
            if kept_paused:
                self.consumer.pause(*kept_paused)
            await self._call_listener("on_partitions_assigned", set(assigned))

    def _fenced(self, code: ErrorCode) -> None:
        """This member's generation is gone (C{FENCED}): its partitions are lost."""
        self.generation_id = -1
        if code == ErrorCode.unknown_member_id:
            self.member_id = ""
        self._rejoin_needed = True
        if self.owned:
            lost, self.owned = set(self.owned), set()
            self.subscriptions.assign_from_subscribed([])
            d = self._call_listener("on_partitions_lost", lost)
            d.addErrback(lambda f: None)

    def _metadata(self, assignor: str) -> bytes:
        """This member's subscription for C{assignor} (owned partitions for the cooperative protocol)."""
        if self.cooperative:
            return encode_subscription(self.topics, None, sorted(self.owned))
        if assignor == "sticky":
            partitions, generation = self._sticky_previous
            return encode_subscription(self.topics, encode_sticky_user_data(partitions, generation))
        return encode_subscription(self.topics)

    async def _assign(self, protocol: str, members: list) -> list[dict]:
        """The leader's part: every member's assignment by C{protocol}."""
        subscriptions: dict[str, MemberSubscription] = {}
        for m in members:
            decoded = decode_member_subscription(bytes(m.metadata))
            subscriptions[m.member_id] = decoded if decoded is not None else MemberSubscription(())
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts: dict[str, int] = {}
        if topics:
            self.client.want(topics)
            try:
                await self.client.ensure_metadata(topics)
            except KafkaError as e:
                _log.warn("group {group}: metadata for the assignment: {error}", group=self.group_id, error=e)
            for topic in topics:
                counts[topic] = len(self.client.partitions_for(topic))
        assignor = ASSIGNORS.get(protocol)
        if assignor is None:
            raise kafka_error(ErrorCode.inconsistent_group_protocol,
                              f"group {self.group_id!r}: the coordinator chose {protocol!r}, which this member"
                              f" does not offer")
        result = assignor(subscriptions, counts)
        self._assignment_snapshot = dict(counts)
        _log.info("group {group} generation {generation}: {protocol} assignment {assignment}",
                  group=self.group_id, generation=self.generation_id, protocol=protocol, assignment=result)
        return [{"member_id": member, "assignment": encode_assignment(tps)} for member, tps in result.items()]

    def _call_listener(self, method: str, partitions: set[TopicPartition]) -> defer.Deferred:
        def failed(failure: Failure) -> None:
            _log.failure("group {group}: rebalance listener {method}", failure, group=self.group_id, method=method)

        return defer.maybeDeferred(getattr(self.listener, method), set(partitions)).addErrback(failed)

    # --- requests --------------------------------------------------------------------------------

    async def _ensure_coordinator(self) -> int:
        if self._coordinator is None:
            broker_id = await find_coordinator(self.client, self.group_id, _FIND_COORDINATOR_GROUP)
            # a connection of the member's own (KafkaClient.coordinator_node)
            self._coordinator = self.client.coordinator_node(broker_id)
        return self._coordinator

    async def _request(self, node: int, api_key: int, version: int, body: dict,
                       timeout_ms: int | None = None) -> Any:
        """One request to the coordinator; a lost connection forgets it (and raises, retriable)."""
        try:
            connection = await self.client.connection(node)
            return await connection.request(api_key, body, version=version,
                                            timeout_ms=timeout_ms or self.request_timeout_ms)
        except KafkaError as e:
            if e.retriable:
                self._coordinator = None
            raise

    # --- heartbeats ----------------------------------------------------------------------------

    def _schedule_heartbeat(self, delay: float) -> None:
        self._stop_heartbeat()
        if not self._closed:
            self._heartbeat_call = self.reactor.callLater(delay, self._heartbeat)

    def _stop_heartbeat(self) -> None:
        self._heartbeat_call = _cancel(self._heartbeat_call)

    def _heartbeat(self) -> None:
        self._heartbeat_call = None
        if self._closed or self._joining is not None:
            return
        d = defer.Deferred.fromCoroutine(self._send_heartbeat())
        d.addErrback(lambda f: _log.failure("group {group}: heartbeat", f, group=self.group_id))

    async def _send_heartbeat(self) -> None:
        generation = self.generation_id
        try:
            node = await self._ensure_coordinator()
            response = await self._request(node, _HEARTBEAT, _HEARTBEAT_V, {
                "group_id": self.group_id, "generation_id": generation, "member_id": self.member_id,
                "group_instance_id": self.group_instance_id})
        except KafkaError as e:
            if not e.retriable:
                raise
            self._coordinator = None
            self._schedule_heartbeat(self.retry_backoff_ms / 1000.0)
            return
        if self._closed or self._joining is not None or generation != self.generation_id:
            return
        code = ErrorCode(int(response.error_code))
        if code == ErrorCode.none:
            self._schedule_heartbeat(self.heartbeat_interval_ms / 1000.0)
        elif code in COORDINATOR_MOVED:
            self._coordinator = None
            self._schedule_heartbeat(self.retry_backoff_ms / 1000.0)
        elif code == ErrorCode.rebalance_in_progress:
            # rejoin at the next poll; heartbeat meanwhile so that the session lives
            _log.info("group {group}: rebalance in progress, rejoining at the next poll", group=self.group_id)
            self.request_rejoin()
            self._schedule_heartbeat(self.heartbeat_interval_ms / 1000.0)
        elif code in FENCED:
            _log.info("group {group}: {code} in heartbeat, partitions lost, rejoining at the next poll",
                      group=self.group_id, code=code.name)
            self._fenced(code)
        else:
            self._stop(kafka_error(code, f"heartbeat of group {self.group_id!r}: {code.name}"))

    def _stop(self, error: BaseException) -> None:
        """A fatal error (e.g. C{FENCED_INSTANCE_ID}): stop heartbeating; polls fail with it."""
        _log.error("consumer group {group} member stopped: {error}", group=self.group_id, error=error)
        self._error = error
        self._stop_heartbeat()
        self._stop_auto_commit()
        self.subscriptions.group_failed()

    # --- offsets -------------------------------------------------------------------------------

    def _start_auto_commit(self) -> None:
        if self.enable_auto_commit and self._auto_commit_call is None and not self._closed:
            self._auto_commit_call = self.reactor.callLater(self.auto_commit_interval_ms / 1000.0,
                                                            self._auto_commit)

    def _stop_auto_commit(self) -> None:
        self._auto_commit_call = _cancel(self._auto_commit_call)

    def _auto_commit(self) -> None:
        self._auto_commit_call = None
        if self._closed:
            return
        if self._joining is None and self.generation_id >= 0 and self.owned:
            d = self._commit_quietly(self.consumer.consumed_positions())
        else:
            d = defer.succeed(None)
        d.addBoth(lambda _: self._start_auto_commit())

    def _commit_quietly(self, offsets: dict[TopicPartition, int]) -> defer.Deferred:
        def failed(failure: Failure) -> None:
            _log.warn("group {group}: auto commit failed: {error}", group=self.group_id,
                      error=failure.getErrorMessage())

        return self.commit(offsets, retry=False).addErrback(failed)

    def commit(self, offsets: dict[TopicPartition, int], retry: bool = True) -> defer.Deferred:
        """
        OffsetCommit of C{offsets} (the next offset to consume, per
        partition) in this member's generation (without a subscription, for
        partitions the application assigned itself: generation -1, no member
        id, as Kafka's consumer commits then).

        @param retry: retry lost connections and a moved coordinator until
            C{default_api_timeout_ms} (a synchronous commit); without it one
            attempt (an asynchronous one).
        @return: a Deferred firing with the offsets committed, or failing with
            L{CommitFailedError} (the group rebalanced: this member's
            generation is over or ending; the partitions may have new owners)
            or the L{KafkaError} of the response.
        """
        return defer.Deferred.fromCoroutine(self._commit(dict(offsets), retry))

    async def _commit(self, offsets: dict[TopicPartition, int], retry: bool) -> dict[TopicPartition, int]:
        if not offsets:
            return {}
        member = bool(self.topics)  # subscribed: a member; else partitions assigned by hand (no generation)
        if member and (self.generation_id < 0 or self._error is not None):
            raise CommitFailedError(f"group {self.group_id!r}: this member is not in a stable generation"
                                    " (rebalancing); its partitions may move: commit again after it rejoins")
        topics: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": int(offset),
                                                 "committed_leader_epoch": -1, "committed_metadata": ""})
        body = {"group_id": self.group_id, "generation_id_or_member_epoch": self.generation_id if member else -1,
                "member_id": self.member_id if member else "",
                "group_instance_id": self.group_instance_id if member else None,
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
        deadline = self.reactor.seconds() + self.default_api_timeout_ms / 1000.0
        while True:
            try:
                node = await self._ensure_coordinator()
                response = await self._request(node, _OFFSET_COMMIT, self.offset_commit_version, body)
                codes = {ErrorCode(int(p.error_code)) for t in response.topics for p in t.partitions}
                moved = codes & COORDINATOR_MOVED
                if moved:
                    self._coordinator = None
                    code = min(moved)
                    raise kafka_error(code, f"committing offsets of group {self.group_id!r}: {code.name}")
            except KafkaError as e:
                if not (retry and e.retriable) or self.reactor.seconds() >= deadline:
                    raise
                await sleep(self.reactor, self.retry_backoff_ms / 1000.0)
                continue
            break
        for code in sorted(codes):
            if code == ErrorCode.none:
                continue
            if code == ErrorCode.rebalance_in_progress:
                self.request_rejoin()
            elif code in FENCED:
                self._fenced(code)
            else:
                raise kafka_error(code, f"committing offsets of group {self.group_id!r}: {code.name}")
            raise CommitFailedError(
                f"group {self.group_id!r} rebalanced ({code.name}): the commit of generation"
                f" {body['generation_id_or_member_epoch']} was refused; the partitions may have been"
                " given to another member")
        return offsets

    def committed(self, partitions: Iterable[TopicPartition]) -> defer.Deferred:
        """
        OffsetFetch: the group's committed offsets of C{partitions}; with
        C{require_stable}, waits (retrying until C{default_api_timeout_ms})
        while a transaction's offsets of a partition are pending.

        @return: a Deferred firing with C{{(topic, partition): offset}}, -1
            for a partition without one.
        """
        return defer.Deferred.fromCoroutine(self._committed(sorted(set(partitions))))

    async def _committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        version = _OFFSET_FETCH_STABLE_V if self.require_stable else _OFFSET_FETCH_V
        body = {"group_id": self.group_id, "require_stable": self.require_stable,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}
        deadline = self.reactor.seconds() + self.default_api_timeout_ms / 1000.0
        while True:
            try:
                node = await self._ensure_coordinator()
                response = await self._request(node, _OFFSET_FETCH, version, body)
                code = ErrorCode(int(response.error_code))
                if code in COORDINATOR_MOVED:
                    self._coordinator = None
                if code != ErrorCode.none:
                    raise kafka_error(code, f"fetching the offsets of group {self.group_id!r}: {code.name}")
                result: dict[TopicPartition, int] = {}
                unstable = False
                for t in response.topics:
                    for p in t.partitions:
                        partition_code = ErrorCode(int(p.error_code))
                        if partition_code == ErrorCode.none:
                            result[(t.name, int(p.partition_index))] = int(p.committed_offset)
                        elif partition_code == ErrorCode.unstable_offset_commit:
                            unstable = True
                        else:
                            raise kafka_error(partition_code, f"offset of {t.name}-{p.partition_index} in group"
                                                              f" {self.group_id!r}: {partition_code.name}")
                if unstable:
                    raise kafka_error(ErrorCode.unstable_offset_commit,
                                      f"group {self.group_id!r}: offsets pending in a transaction")
                return result
            except KafkaError as e:
                if not e.retriable or self.reactor.seconds() >= deadline:
                    raise
                await sleep(self.reactor, self.retry_backoff_ms / 1000.0)

    # --- closing -------------------------------------------------------------------------------

    def close(self) -> defer.Deferred:
        """
        Leave: commit (with C{enable_auto_commit}), C{on_partitions_revoked},
        LeaveGroup (not for a static member: its session timeout removes it,
        and rejoining in time keeps its partitions).  Errors are logged, not raised.

        @return: a Deferred firing with C{None}.
        """
        return defer.Deferred.fromCoroutine(self._close())

    def _in_group(self) -> bool:
        """Whether the member holds a generation of the group (its partitions are revoked on close, not lost)."""
        return self.generation_id >= 0

    async def _leave_group(self) -> None:
        """LeaveGroup on close, except for a static member (KIP-345): its partitions wait for it."""
        if self.member_id and self.group_instance_id is None:
            await self._request(await self._ensure_coordinator(), _LEAVE_GROUP, _LEAVE_GROUP_V, {
                "group_id": self.group_id,
                "members": [{"member_id": self.member_id, "group_instance_id": None}]})

    async def _close(self) -> None:
        if self._closed:
            return
        self._stop_heartbeat()
        self._stop_auto_commit()
        joining = self._joining
        self._closed = True
        if joining is not None:
            joining.cancel()
        try:
            if self._in_group() and self._error is None:
                if self.enable_auto_commit and self.owned:
                    # the application closes: everything poll returned is processed (Kafka's close)
                    await self._commit_quietly(self.subscriptions.all_consumed())
                if self.owned:
                    await self._call_listener("on_partitions_revoked", set(self.owned))
            elif self.owned:
                await self._call_listener("on_partitions_lost", set(self.owned))
            self.owned = set()
            await self._leave_group()
        except Exception as e:
            _log.info("group {group}: leaving: {error}", group=self.group_id, error=e)
        finally:
            waiters, self._stable_waiters = self._stable_waiters, []
            for d in waiters:
                if not d.called:
                    d.callback(None)
