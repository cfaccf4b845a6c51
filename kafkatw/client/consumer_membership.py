"""
L{ConsumerMembershipManager}: a L{kafkatw.client.consumer.Consumer}'s
membership of a KIP-848 consumer group (C{group_protocol="consumer"}), after
Kafka's C{ConsumerMembershipManager} and C{ConsumerHeartbeatRequestManager}.

No JoinGroup, no SyncGroup, no client-side assignor: the member sends
ConsumerGroupHeartbeat on its own timer (at the interval the coordinator
gives), carrying its subscription and the partitions it owns; the
coordinator answers with its member epoch and the partitions it may own now
(computed by the server-side assignor, C{group_remote_assignor}, and handed
out only once their previous owners have given them up).

The protocol (the Kafka protocol guide, KIP-848)::

    FindCoordinator (key type 0)  ->  the group's coordinator broker
    ConsumerGroupHeartbeat v0-1   member id generated here (a UUID, kept for
                                  the consumer's life); epoch 0 joins, then
                                  the epoch the coordinator gave; every
                                  heartbeat carries the full state (topics,
                                  rebalance timeout, instance id, owned
                                  partitions), which Kafka allows
    OffsetCommit v9               the generation id is the member epoch
    ConsumerGroupHeartbeat epoch -1 (a static member: -2) on close

Reconciliation, when the application polls (as Kafka's consumer runs its
rebalance callbacks inside C{poll}): the partitions no longer in the
coordinator's assignment are committed (with C{enable_auto_commit}), given to
C{on_partitions_revoked} and dropped; the new ones are taken and given to
C{on_partitions_assigned}; a heartbeat then tells the coordinator at once.
Partitions kept are consumed throughout.

Errors: C{FENCED_MEMBER_EPOCH}, C{UNKNOWN_MEMBER_ID}: the partitions are lost
(C{on_partitions_lost}), the member rejoins at epoch 0 with the same member
id.  C{NOT_COORDINATOR}, C{COORDINATOR_NOT_AVAILABLE},
C{COORDINATOR_LOAD_IN_PROGRESS}, lost connections: find the coordinator
again after C{retry_backoff_ms}.  Anything else
(C{UNRELEASED_INSTANCE_ID}, C{GROUP_MAX_SIZE_REACHED},
C{UNSUPPORTED_ASSIGNOR}, C{INVALID_REQUEST}, C{GROUP_ID_NOT_FOUND} for a
classic group's id, C{GROUP_AUTHORIZATION_FAILED}…) stops the member: the
next poll fails with it.

Source: KIP-848; Kafka 4.0's C{ConsumerMembershipManager},
C{AbstractMembershipManager}, C{ConsumerHeartbeatRequestManager}.
"""

from __future__ import annotations

import uuid
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import ErrorCode, KafkaError, kafka_error
from .consumer_coordinator import COORDINATOR_MOVED, ConsumerCoordinator, TopicPartition

__all__ = ["ConsumerMembershipManager", "CONSUMER_GROUP_HEARTBEAT"]

_log = Logger()

CONSUMER_GROUP_HEARTBEAT = 68
#: the epochs of a heartbeat that leaves (KIP-848)
_LEAVE_EPOCH, _STATIC_LEAVE_EPOCH = -1, -2
#: errors that end this member's epoch: it gives up its partitions and rejoins
_FENCED = frozenset({ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id})


class ConsumerMembershipManager(ConsumerCoordinator):
    """
    The KIP-848 group membership of one consumer (see the module
    docstring).  It has the public surface of
    L{kafkatw.client.consumer_coordinator.ConsumerCoordinator} (C{subscribe},
    C{commit}, C{committed}, C{group_metadata}, C{wait_for_assignment},
    C{close}) and shares its offset commits and fetches; the generation id
    it commits with is the member epoch.

    @param remote_assignor: the server-side assignor to ask for
        (C{uniform}, C{range}), or C{None}: the coordinator's default.
    @param rebalance_timeout_ms: how long the coordinator waits for this
        member to revoke partitions (Kafka's C{max.poll.interval.ms}).
    """

    offset_commit_version = 9

    def __init__(self, consumer: Any, group_id: str, *, group_instance_id: str | None = None,
                 remote_assignor: str | None = None, rebalance_timeout_ms: int = 300000,
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 require_stable: bool = False) -> None:
        super().__init__(consumer, group_id, group_instance_id=group_instance_id,
                         rebalance_timeout_ms=rebalance_timeout_ms, enable_auto_commit=enable_auto_commit,
                         auto_commit_interval_ms=auto_commit_interval_ms, require_stable=require_stable)
        self.remote_assignor = remote_assignor
        #: generated here, kept for the consumer's life (ConsumerGroupHeartbeat v1)
        self.member_id = str(uuid.uuid4())
        #: the member epoch (0: joining); what commits carry as their generation id
        self.generation_id = 0
        #: the partitions the coordinator last said this member may own (None: no answer yet)
        self.target: set[TopicPartition] | None = None
        self._pending_ids: list[tuple[Any, tuple[int, ...]]] = []
        self._unresolved = False
        self._started = False
        self._in_flight = False
        self._again = False

    # --- the application's side --------------------------------------------------------------

    def wait_for_assignment(self) -> defer.Deferred:
        """
        @return: a Deferred firing with this member's partitions once it owns
            what the coordinator last assigned it (at once when it does), or
            failing with the error that stopped it.
        """
        if self._error is not None:
            return defer.fail(self._error)
        if self._reconciled():
            return defer.succeed(set(self.owned))
        d: defer.Deferred = defer.Deferred()
        self._stable_waiters.append(d)
        self.maybe_join()
        return d

    def _reconciled(self) -> bool:
        return (self.generation_id > 0 and self.target is not None and not self._unresolved
                and self.target == self.owned and self._joining is None)

    def _wake_waiters(self) -> None:
        if self._reconciled():
            waiters, self._stable_waiters = self._stable_waiters, []
            for d in waiters:
                d.callback(set(self.owned))

    def maybe_join(self) -> None:
        """
        Called by the consumer's C{poll}: start heartbeating (the first
        heartbeat joins), and reconcile with the coordinator's latest
        assignment when it differs from what this member owns.
        """
        if self._closed or not self.topics or self._error is not None:
            return
        if not self._started or self._rejoin_needed:
            self.client.want(self.topics)  # their topic ids name the coordinator's assignment
        if not self._started:
            self._started = True
            self._schedule_heartbeat(0)
        elif self._rejoin_needed:  # a new subscription: tell the coordinator now
            self._schedule_heartbeat(0)
        self._rejoin_needed = False
        if self._joining is None and self.target is not None and self.target != self.owned:
            joining = defer.Deferred.fromCoroutine(self._reconcile(set(self.target)))
            self._joining = joining
            joining.addBoth(self._reconcile_done)

    # --- reconciliation -------------------------------------------------------------------------

    async def _reconcile(self, target: set[TopicPartition]) -> None:
        revoked = self.owned - target
        added = target - self.owned
        if revoked:
            if self.enable_auto_commit:
                await self._commit_quietly({tp: o for tp, o in self.consumer.consumed_positions().items()
                                            if tp in revoked})
            await self._call_listener("on_partitions_revoked", revoked)
        self.owned = set(target)
        self.subscriptions.assign_from_subscribed(sorted(target))
        if added:
            await self._call_listener("on_partitions_assigned", added)
        self.rebalances += 1
        _log.info("group {group} member {member} epoch {epoch}: revoked {revoked}, assigned {added}",
                  group=self.group_id, member=self.member_id, epoch=self.generation_id, revoked=sorted(revoked),
                  added=sorted(added))

    def _reconcile_done(self, result: Any) -> None:
        self._joining = None
        if isinstance(result, Failure):
            _log.failure("group {group}: reconciliation", result, group=self.group_id)
        if self._closed:
            return
        self._schedule_heartbeat(0)  # acknowledge at once: the coordinator may hand revoked partitions on
        self._wake_waiters()

    def _fenced(self, code: ErrorCode) -> None:
        """This member's epoch is over: its partitions are lost; it rejoins at epoch 0 (same member id)."""
        self.generation_id = 0
        self.target = None
        if self.owned:
            lost, self.owned = set(self.owned), set()
            self.subscriptions.assign_from_subscribed([])
            self._call_listener("on_partitions_lost", lost).addErrback(lambda f: None)

    def _stop(self, error: BaseException) -> None:
        """A fatal error: stop heartbeating; polls and L{wait_for_assignment} fail with it."""
        super()._stop(error)
        waiters, self._stable_waiters = self._stable_waiters, []
        for d in waiters:
            d.errback(error)

    # --- heartbeats ----------------------------------------------------------------------------

    def _schedule_heartbeat(self, delay: float) -> None:
        if self._in_flight and delay == 0:
            self._again = True
            return
        super()._schedule_heartbeat(delay)

    def _heartbeat(self) -> None:
        self._heartbeat_call = None
        if self._closed or self._in_flight:
            return
        self._in_flight = True
        d = defer.Deferred.fromCoroutine(self._send_heartbeat())
        d.addErrback(lambda f: self._stop(f.value))

        def done(_: Any) -> None:
            self._in_flight = False
            if self._again and not self._closed and self._error is None:
                self._again = False
                self._schedule_heartbeat(0)

        d.addBoth(done)

    def _owned_by_id(self) -> list[dict]:
        by_topic: dict[Any, list[int]] = {}
        for topic, partition in sorted(self.owned):
            topic_id = self.client.topic_ids.get(topic)
            if topic_id is not None:
                by_topic.setdefault(topic_id, []).append(partition)
        return [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]

    async def _send_heartbeat(self, epoch: int | None = None) -> Any:
        leaving = epoch is not None
        joining = self.generation_id == 0
        body = {"group_id": self.group_id, "member_id": self.member_id,
                "member_epoch": self.generation_id if epoch is None else epoch,
                "instance_id": self.group_instance_id, "rack_id": None,
                "rebalance_timeout": -1 if leaving else self.rebalance_timeout_ms,
                "subscribed_topic_names": None if leaving else list(self.topics),
                "server_assignor": None if leaving else self.remote_assignor,
                "topic_partitions": None if leaving else ([] if joining else self._owned_by_id())}
        try:
            node = await self._ensure_coordinator()
            # the highest version both speak (v0 for Kafka 3.7-3.9); a broker without it: UNSUPPORTED_VERSION
            response = await self._request(node, CONSUMER_GROUP_HEARTBEAT, None, body)
        except KafkaError as e:
            if not e.retriable or leaving:
                raise
            self._coordinator = None
            self._schedule_heartbeat(self.retry_backoff_ms / 1000.0)
            return None
        if leaving:
            return response
        code = ErrorCode(int(response.error_code))
        if self._closed:
            return response
        if code == ErrorCode.none:
            self.generation_id = int(response.member_epoch)
            interval_ms = int(response.heartbeat_interval.total_seconds() * 1000)
            if interval_ms > 0:
                self.heartbeat_interval_ms = interval_ms
            if response.assignment is not None:
                self._take_assignment(response.assignment)
            elif self._unresolved:
                self._take_assignment(None)
            self._schedule_heartbeat(self.heartbeat_interval_ms / 1000.0)
            if self._stable_waiters:  # wait_for_assignment: the application waits for this, not polling
                self.maybe_join()
            self._wake_waiters()
        elif code in COORDINATOR_MOVED:
            self._coordinator = None
            self._schedule_heartbeat(self.retry_backoff_ms / 1000.0)
        elif code in _FENCED:
            _log.info("group {group}: {code} in heartbeat (epoch {epoch}): partitions lost, rejoining",
                      group=self.group_id, code=code.name, epoch=body["member_epoch"])
            self._fenced(code)
            self._schedule_heartbeat(0 if code == ErrorCode.unknown_member_id else self.retry_backoff_ms / 1000.0)
        else:
            raise kafka_error(code, f"heartbeat of group {self.group_id!r}: {code.name}"
                                    f"{': ' + response.error_message if response.error_message else ''}")
        return response

    def _take_assignment(self, assignment: Any) -> None:
        """The coordinator's assignment, topic ids resolved to names (unknown ids: metadata refreshed, kept)."""
        if assignment is not None:
            self._pending_ids = [(tp.topic_id, tuple(tp.partitions)) for tp in assignment.topic_partitions]
        names = {topic_id: name for name, topic_id in self.client.topic_ids.items()}
        target: set[TopicPartition] = set()
        self._unresolved = False
        for topic_id, partitions in self._pending_ids:
            name = names.get(topic_id)
            if name is None:  # a topic this client has no metadata of yet: taken once it has
                self._unresolved = True
                continue
            target.update((name, p) for p in partitions)
        if self._unresolved:
            self.subscriptions.request_metadata_update()
        self.target = target

    # --- closing -------------------------------------------------------------------------------

    def _in_group(self) -> bool:
        """A member epoch of the group (0: still joining)."""
        return self.generation_id > 0

    async def _leave_group(self) -> None:
        """A last heartbeat with epoch -1 (a static member: -2, its partitions wait for it)."""
        if self._started and self._error is None:
            await self._send_heartbeat(_STATIC_LEAVE_EPOCH if self.group_instance_id else _LEAVE_EPOCH)

