"""
KIP-848 consumer groups (C{group.protocol=consumer}): the group coordinator's
side of ConsumerGroupHeartbeat and ConsumerGroupDescribe, after Kafka 4.0's
C{GroupMetadataManager.consumerGroupHeartbeat}, C{ConsumerGroup} and
C{ConsumerGroupMember}.

No stop-the-world rebalance: each member heartbeats on its own, and the
coordinator moves its assignment towards the group's target one step at a
time (L{kafkatw.broker.current_assignment_builder}).  Three epochs::

    group epoch       bumped when the membership or a subscription changes,
                      or a subscribed topic changes (created, more partitions)
    assignment epoch  the group epoch the target assignment was computed at
                      (by the server-side assignor, on the next heartbeat)
    member epoch      each member's; it reaches the assignment epoch once the
                      member has revoked what it must give up

A heartbeat (one C{heartbeat} call) does, in order: validate the request
(C{INVALID_REQUEST}, C{UNSUPPORTED_ASSIGNOR}, C{INVALID_REGULAR_EXPRESSION});
leave (member epoch -1; -2: a static member leaves for now and keeps its
partitions until its session times out or it rejoins); find or create the
member (epoch 0 joins; a static member's instance id still held by a member
that did not leave with -2 is C{UNRELEASED_INSTANCE_ID}; an unknown member is
C{UNKNOWN_MEMBER_ID}; an epoch other than its own or its previous one with a
subset of its partitions is C{FENCED_MEMBER_EPOCH}); update its subscription
(bumping the group epoch when it or the subscribed topics' partition counts
changed); recompute the target assignment when the group epoch is past the
assignment epoch; reconcile the member; re-arm its session timer.

Group states (derived, as Kafka's C{ConsumerGroup.maybeUpdateGroupState})::

    Empty        no members
    Assigning    group epoch > assignment epoch (between a change and the
                 next heartbeat, which computes the target assignment)
    Reconciling  some member is not STABLE at the assignment epoch
    Stable       every member is
    Dead         unloaded (moved to another coordinator)

Timers: a member's session (C{group.consumer.session.timeout.ms}; no
heartbeat for that long removes it), and its rebalance timeout (the member's
C{RebalanceTimeoutMs}) while it has partitions to revoke: not revoking them in
time removes it too.

What kafkatw does not do: the group's state is kept in memory only (Kafka
writes C{ConsumerGroupMetadata}, C{ConsumerGroupMemberMetadata},
C{ConsumerGroupTargetAssignment*} and C{ConsumerGroupCurrentMemberAssignment}
records to C{__consumer_offsets}; kafkatw's group coordinator keeps offsets
in ZooKeeper).  When the coordinator moves, or restarts, the new one does not
know the group: each member's next heartbeat is answered
C{UNKNOWN_MEMBER_ID} and the member rejoins at epoch 0, as Kafka's clients
do for that error, after giving up its partitions.  Regular expressions are
Python's C{re} (full match) instead of Kafka's RE2/J.  No rack-aware
assignment, no client-side assignors, no classic members in a consumer group
(Kafka 4's C{group.consumer.migration.policy} is treated as C{disabled}: a
group with classic members refuses consumer members with
C{GROUP_ID_NOT_FOUND}, and a consumer group with members refuses JoinGroup
with C{INCONSISTENT_GROUP_PROTOCOL}).

Source: KIP-848; Kafka 4.0 C{org.apache.kafka.coordinator.group}
(C{GroupMetadataManager}, C{modern.consumer.ConsumerGroup},
C{modern.consumer.CurrentAssignmentBuilder}).
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode
from .consumer_group_assignors import ASSIGNORS, AssignmentMember
from .current_assignment_builder import MemberAssignment, MemberState, Partitions, reconcile
from .group_coordinator import check_coordinator, unload_moved_groups

__all__ = [
    "ConsumerGroupState",
    "ConsumerGroupMember",
    "ConsumerGroup",
    "ConsumerGroupCoordinator",
    "HeartbeatRequest",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "CONSUMER_GROUP_CONFIGS",
]

_log = Logger()

#: The member epoch of a member leaving the group (KIP-848).
LEAVE_GROUP_MEMBER_EPOCH = -1
#: The member epoch of a static member leaving for now (KIP-848).
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

#: Group-level configs of a consumer group (IncrementalAlterConfigs, resource type GROUP, KIP-848)
#: -> the broker config giving their default.
CONSUMER_GROUP_CONFIGS = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
}


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class HeartbeatRequest:
    """
    A ConsumerGroupHeartbeat request's fields (C{None}: not sent, unchanged since the last heartbeat).

    @ivar owned: the partitions the member owns, C{(topic id, partitions)} pairs.
    @ivar rebalance_timeout_ms: -1 when unchanged.
    """

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1
    #: topic name -> whether the member's principal may Describe it (C{None}: no authorizer)
    topic_describable: Callable[[str], bool] | None = field(default=None, compare=False)


@dataclass
class ConsumerGroupMember:
    """One member of a consumer group (Kafka's C{ConsumerGroupMember})."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assignment: MemberAssignment = field(default_factory=MemberAssignment)
    #: topic name -> whether the member may Describe it: its regex resolves to those only (KAFKA-18813)
    topic_describable: Callable[[str], bool] | None = None
    session_timer: Any = None
    rebalance_timer: Any = None

    @property
    def epoch(self) -> int:
        return self.assignment.epoch


@dataclass
class ConsumerGroup:
    """
    One consumer group (Kafka's C{ConsumerGroup}).

    @ivar target: member id -> its target partitions at L{assignment_epoch}.
    @ivar subscription_metadata: topic id -> partition count, of every topic
        some member subscribes to (by name or regex), as last computed.
    @ivar partition_owners: C{(topic id, partition)} -> the member owning it
        (assigned or pending revocation): Kafka's partition epochs.
    """

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    subscription_metadata: dict[uuid.UUID, int] = field(default_factory=dict)
    partition_owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    assignor_name: str = ""
    fence: Any = None
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.assignment.state is not MemberState.STABLE or m.epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """Kafka's C{currentPartitionEpoch}: the epoch of the member owning the partition, or -1."""
        owner = self.partition_owners.get((topic_id, partition))
        return -1 if owner is None else self.members[owner].epoch

    def set_assignment(self, member: ConsumerGroupMember, assignment: MemberAssignment) -> None:
        """Change C{member}'s assignment, keeping L{partition_owners} in step."""
        self._release(member)
        member.assignment = assignment
        for partitions in (assignment.assigned, assignment.pending_revocation):
            for topic_id, ps in partitions.items():
                for p in ps:
                    self.partition_owners[(topic_id, p)] = member.member_id

    def _release(self, member: ConsumerGroupMember) -> None:
        for partitions in (member.assignment.assigned, member.assignment.pending_revocation):
            for topic_id, ps in partitions.items():
                for p in ps:
                    if self.partition_owners.get((topic_id, p)) == member.member_id:
                        del self.partition_owners[(topic_id, p)]

    def add(self, member: ConsumerGroupMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self.set_assignment(member, member.assignment)

    def remove(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.get(member_id)
        if member is None:
            return None
        self._release(member)
        del self.members[member_id]
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        for timer in (member.session_timer, member.rebalance_timer):
            if timer is not None and timer.active():
                timer.cancel()
        member.session_timer = member.rebalance_timer = None
        return member


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


class ConsumerGroupCoordinator:
    """
    Serves KIP-848 consumer groups beside the classic groups of
    C{classic} (a L{kafkatw.broker.group_coordinator.GroupCoordinator}),
    whose placement (which broker coordinates a group) and committed-offset
    store it shares.

    @param config: the broker config (C{group.consumer.*} keys).
    @param clock: C{IReactorTime}.
    @param topics: returns C{{topic name: (topic id, partition count)}} of
        every topic (the metadata cache).
    @param group_configs: C{group_id -> {name: value}} of group-level
        configs (L{CONSUMER_GROUP_CONFIGS}); C{None}: none set.
    @param group_type: C{group_id -> "classic" | "consumer" | "share" | None}
        over every kind of group of the broker (one namespace of group ids,
        as Kafka's C{GroupMetadataManager.groups}): a heartbeat for a share
        group is C{GROUP_ID_NOT_FOUND}; C{None}: no share groups.
    """

    def __init__(self, classic: Any, config: Any, clock: Any,
                 topics: Callable[[], Mapping[str, tuple[uuid.UUID, int]]],
                 group_configs: Callable[[str], Mapping[str, str]] | None = None,
                 group_type: Callable[[str], str | None] | None = None) -> None:
        self.classic = classic
        self.clock = clock
        self.topics = topics
        self.group_configs = group_configs or (lambda group_id: {})
        self.group_type = group_type or (lambda group_id: None)
        self.heartbeat_interval_ms = config["group.consumer.heartbeat.interval.ms"]
        self.session_timeout_ms = config["group.consumer.session.timeout.ms"]
        self.max_size = config["group.consumer.max.size"]
        self.assignors = [name for name in config["group.consumer.assignors"] if name in ASSIGNORS]
        self.groups: dict[str, ConsumerGroup] = {}
        classic.consumer_groups = self

    # --- placement ---------------------------------------------------------------

    def _check(self, group_id: str) -> ErrorCode:
        """As the classic groups' coordinator checks (under its placement), over the consumer groups."""
        return check_coordinator(self.classic.placement, self.groups, group_id, self.unload)

    def placement_changed(self) -> None:
        """Drop the groups this broker no longer coordinates under the epoch they were loaded with."""
        unload_moved_groups(self.classic.placement, self.groups, self.unload)

    def unload(self, group_id: str) -> None:
        """Forget a group (moved away, or shut down): its members will be told C{UNKNOWN_MEMBER_ID} wherever they go."""
        group = self.groups.pop(group_id)
        group.dead = True
        for member_id in list(group.members):
            group.remove(member_id)

    def shutdown(self) -> None:
        for group_id in list(self.groups):
            self.unload(group_id)

    def active(self, group_id: str) -> bool:
        """Whether C{group_id} is a consumer group with members (JoinGroup refuses it)."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    # --- configs -----------------------------------------------------------------

    def _config(self, group_id: str, name: str, default: int) -> int:
        value = self.group_configs(group_id).get(name)
        return int(value) if value is not None else default

    def session_timeout(self, group_id: str) -> int:
        return self._config(group_id, "consumer.session.timeout.ms", self.session_timeout_ms)

    def heartbeat_interval(self, group_id: str) -> int:
        return self._config(group_id, "consumer.heartbeat.interval.ms", self.heartbeat_interval_ms)

    # --- ConsumerGroupHeartbeat -----------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> dict:
        """
        One ConsumerGroupHeartbeat (Kafka's C{GroupMetadataManager.consumerGroupHeartbeat}).

        @return: the response body: C{error_code}, C{error_message},
            C{member_id}, C{member_epoch}, C{heartbeat_interval} (ms) and
            C{assignment} (C{{"topic_partitions": [...]}} or C{None}).
        """
        try:
            error = self._check(request.group_id)
            if error:
                raise _Refused(error, "")
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(request)
            return self._heartbeat(request)
        except _Refused as refused:
            if refused.error not in (ErrorCode.not_coordinator,):
                _log.info("ConsumerGroupHeartbeat of member {member!r} (epoch {epoch}) of group {group!r}: "
                          "{error}: {message}", member=request.member_id, epoch=request.member_epoch,
                          group=request.group_id, error=refused.error.name.upper(), message=refused.message)
            return {"error_code": int(refused.error), "error_message": refused.message or None,
                    "member_id": None, "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}

    def confirmed_heartbeat(self, request: HeartbeatRequest) -> defer.Deferred:
        """
        L{heartbeat}, whose answer is sent only once ZooKeeper has confirmed
        that this broker still holds the group's coordinator epoch when it
        hands the member partitions it did not report owning (as the classic
        groups' JoinGroup and SyncGroup answers are gated,
        L{kafkatw.broker.group_coordinator.OffsetStore.confirm}): a deposed
        coordinator never gives out a partition the new one gave another
        member.  Not confirmed: C{NOT_COORDINATOR} (or
        C{COORDINATOR_NOT_AVAILABLE} when ZooKeeper failed); the member
        finds the new coordinator and rejoins there.

        @return: a Deferred firing with the answer of L{heartbeat}.
        """
        answer = self.heartbeat(request)
        group = self.groups.get(request.group_id)
        assignment = answer.get("assignment")
        if answer["error_code"] or assignment is None or group is None or group.fence is None \
                or group.fence.path is None:
            return defer.succeed(answer)
        owned = {(t, p) for t, ps in (request.owned or ()) for p in ps}
        granted = any((tp["topic_id"], p) not in owned
                      for tp in assignment["topic_partitions"] for p in tp["partitions"])
        if not granted:
            return defer.succeed(answer)

        def gate(code: ErrorCode) -> dict:
            if code == ErrorCode.none:
                return answer
            return {"error_code": int(code), "error_message": None, "member_id": None, "member_epoch": -1,
                    "heartbeat_interval": 0, "assignment": None}

        return self.classic.offsets.confirm(group.fence).addCallback(gate)

    def _validate(self, r: HeartbeatRequest) -> None:
        """Kafka's C{throwIfConsumerGroupHeartbeatRequestIsInvalid}."""
        def invalid(message: str) -> None:
            raise _Refused(ErrorCode.invalid_request, message)

        if r.version >= 1 and not r.member_id:
            invalid("MemberId can't be empty.")
        if r.instance_id is not None and not r.instance_id:
            invalid("InstanceId can't be empty.")
        if r.rack_id is not None and not r.rack_id:
            invalid("RackId can't be empty.")
        if r.member_epoch == 0:
            if r.rebalance_timeout_ms == -1:
                invalid("RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or any(ps for _, ps in r.owned):
                invalid("TopicPartitions must be empty when (re-)joining.")
            if r.subscribed_topic_names is None and r.subscribed_topic_regex is None:
                invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if r.instance_id is None:
                invalid("InstanceId can't be null.")
        elif r.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            invalid(f"MemberEpoch {r.member_epoch} is invalid.")
        elif r.member_epoch != LEAVE_GROUP_MEMBER_EPOCH and not r.member_id:
            invalid("MemberId can't be empty.")
        if r.server_assignor is not None and r.server_assignor not in self.assignors:
            raise _Refused(ErrorCode.unsupported_assignor,
                           f"ServerAssignor {r.server_assignor} is not supported. Supported assignors: "
                           f"{', '.join(self.assignors)}.")
        if r.subscribed_topic_regex:
            try:
                re.compile(r.subscribed_topic_regex)
            except re.error as e:
                raise _Refused(ErrorCode.invalid_regular_expression,
                               f"SubscribedTopicRegex `{r.subscribed_topic_regex}` is not a valid regular "
                               f"expression: {e}.") from None

    def _leave(self, r: HeartbeatRequest) -> dict:
        """Kafka's C{consumerGroupLeave}."""
        group = self.groups.get(r.group_id)
        if group is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Member {r.member_id} is not a member of group {r.group_id}.")
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise _Refused(ErrorCode.unknown_member_id,
                               f"Member {r.member_id} is not a member of group {r.group_id}.")
        else:
            member = self._static_member(group, r)
            if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                _log.info("static member {member} ({instance}) of group {group} left for now",
                          member=member.member_id, instance=r.instance_id, group=r.group_id)
                group.set_assignment(member, replace(member.assignment, epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                                     pending_revocation={}))
                self._cancel(member, "rebalance_timer")
                return self._answer(member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH, 0, None)
        _log.info("member {member} left consumer group {group}", member=member.member_id, group=r.group_id)
        self._fence(group, member)
        return self._answer(r.member_id, r.member_epoch, 0, None)

    def _static_member(self, group: ConsumerGroup, r: HeartbeatRequest) -> ConsumerGroupMember:
        member_id = group.static_members.get(r.instance_id or "")
        if member_id is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Instance id {r.instance_id} is unknown.")
        if member_id != r.member_id:
            raise _Refused(ErrorCode.fenced_instance_id,
                           f"Static member {r.member_id} with instance id {r.instance_id} was fenced by member "
                           f"{member_id}.")
        return group.members[member_id]

    def _answer(self, member_id: str, epoch: int, interval_ms: int, assignment: Partitions | None) -> dict:
        return {"error_code": 0, "error_message": None, "member_id": member_id, "member_epoch": epoch,
                "heartbeat_interval": interval_ms,
                "assignment": None if assignment is None else {"topic_partitions": [
                    {"topic_id": topic_id, "partitions": sorted(ps)}
                    for topic_id, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) if ps]}}

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Kafka's C{consumerGroupFenceMember}: remove the member; the others get its partitions."""
        group.remove(member.member_id)
        group.group_epoch += 1
        self._refresh_metadata(group)

    def _member_for(self, group: ConsumerGroup, r: HeartbeatRequest) -> tuple[ConsumerGroupMember, bool]:
        """Find or create the member; C{(member, is new)}."""
        if r.member_epoch == 0:
            if r.instance_id is not None:
                existing_id = group.static_members.get(r.instance_id)
                if existing_id is not None:
                    existing = group.members[existing_id]
                    if existing.epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and existing_id != r.member_id:
                        raise _Refused(ErrorCode.unreleased_instance_id,
                                       f"Static member {existing_id} with instance id {r.instance_id} is not "
                                       "released yet.")
                    # The static member comes back: a new member id takes over its partitions.
                    target = group.target.get(existing_id)
                    group.remove(existing_id)
                    member = replace(existing, member_id=r.member_id, session_timer=None, rebalance_timer=None,
                                     assignment=replace(existing.assignment, epoch=0, previous_epoch=0))
                    group.add(member)
                    if target is not None:
                        group.target[member.member_id] = target
                    _log.info("static member {instance} of group {group} rejoined as {member}",
                              instance=r.instance_id, group=r.group_id, member=r.member_id)
                    return member, False
            member = group.members.get(r.member_id)
            if member is not None:
                # A member rejoining at epoch 0 (after FENCED_MEMBER_EPOCH) gave up its partitions.
                group.set_assignment(member, MemberAssignment())
                self._cancel(member, "rebalance_timer")
                return member, False
            if len(group.members) >= self.max_size:
                raise _Refused(ErrorCode.group_max_size_reached,
                               f"The consumer group has reached its maximum capacity of {self.max_size} members.")
            member = ConsumerGroupMember(r.member_id or str(uuid.uuid4()), instance_id=r.instance_id)
            _log.info("member {member} joins consumer group {group}", member=member.member_id, group=r.group_id)
            return member, True
        member = group.members.get(r.member_id)
        if member is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Member {r.member_id} is not a member of group {r.group_id}.")
        if r.instance_id is not None and member.instance_id != r.instance_id:
            raise _Refused(ErrorCode.fenced_instance_id, f"Member {r.member_id} is not instance {r.instance_id}.")
        epoch, assignment = member.epoch, member.assignment
        # the answer with the bumped epoch may have been lost: its previous epoch with a subset is fine
        lost_answer = r.member_epoch == assignment.previous_epoch and _subset(r.owned, assignment.assigned)
        if r.member_epoch > epoch or (r.member_epoch < epoch and not lost_answer):
            raise _Refused(ErrorCode.fenced_member_epoch,
                           f"The consumer group member has a {'greater' if r.member_epoch > epoch else 'smaller'} "
                           f"member epoch ({r.member_epoch}) than the one known by the group coordinator ({epoch}). "
                           "The member must abandon all its partitions and rejoin.")
        return member, False

    def _heartbeat(self, r: HeartbeatRequest) -> dict:
        classic = self.classic.groups.get(r.group_id)
        if classic is not None and classic.members:
            raise _Refused(ErrorCode.group_id_not_found, f"Group {r.group_id} is not a consumer group.")
        group = self.groups.get(r.group_id)
        if group is None and self.group_type(r.group_id) == "share":
            # Kafka's getOrMaybeCreateConsumerGroup: one namespace of group ids, no share -> consumer conversion
            raise _Refused(ErrorCode.group_id_not_found, f"Group {r.group_id} is not a consumer group.")
        if group is None:
            if r.member_epoch != 0:
                # kafkatw keeps consumer groups in memory: after a coordinator move the member rejoins.
                raise _Refused(ErrorCode.unknown_member_id,
                               f"Member {r.member_id} is not a member of group {r.group_id}.")
            self.classic.drop_empty_group(r.group_id)  # an empty classic group becomes a consumer group
            group = self.groups[r.group_id] = ConsumerGroup(r.group_id,
                                                            fence=self.classic.placement.acting(r.group_id))
        member, is_new = self._member_for(group, r)
        before = member.assignment
        subscription_changed = is_new
        if r.subscribed_topic_names is not None and tuple(r.subscribed_topic_names) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(r.subscribed_topic_names)
            subscription_changed = True
        if r.subscribed_topic_regex is not None and (r.subscribed_topic_regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = r.subscribed_topic_regex or None
            subscription_changed = True
        if r.server_assignor is not None and r.server_assignor != member.server_assignor:
            member.server_assignor = r.server_assignor
            subscription_changed = True
        if r.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = r.rebalance_timeout_ms
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        member.client_id, member.client_host = r.client_id, r.client_host
        if r.topic_describable is not None:
            member.topic_describable = r.topic_describable
        if is_new:
            group.add(member)
        if subscription_changed:
            group.group_epoch += 1
        self._refresh_metadata(group, bump=not subscription_changed)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)
        self._reconcile(group, member, r.owned)
        self._schedule_session(group, member)
        # Kafka's isFullRequest: a regex subscription counts as a subscription too
        subscribed = r.subscribed_topic_names is not None or r.subscribed_topic_regex is not None
        full = r.member_epoch == 0 or (r.rebalance_timeout_ms != -1 and subscribed and r.owned is not None)
        changed = member.assignment.assigned != before.assigned or is_new
        return self._answer(member.member_id, member.epoch, self.heartbeat_interval(r.group_id),
                            member.assignment.assigned if full or changed else None)

    # --- subscriptions and the target assignment ---------------------------------------

    def _subscribed_ids(self, member: ConsumerGroupMember, topics: Mapping[str, tuple[uuid.UUID, int]]
                        ) -> frozenset[uuid.UUID]:
        ids = {topics[name][0] for name in member.subscribed_topic_names if name in topics}
        if member.subscribed_topic_regex:
            # a regex resolves to the matching topics the member may Describe (Kafka's
            # filterTopicDescribeAuthorizedTopics, KAFKA-18813); names it subscribes to were checked by the handler
            pattern = re.compile(member.subscribed_topic_regex)
            describable = member.topic_describable
            ids.update(topic_id for name, (topic_id, _) in topics.items()
                       if not name.startswith("__") and pattern.fullmatch(name)
                       and (describable is None or describable(name)))
        return frozenset(ids)

    def _refresh_metadata(self, group: ConsumerGroup, bump: bool = True) -> None:
        """Recompute the subscribed topics' partition counts; a change bumps the group epoch (when C{bump})."""
        topics = self.topics()
        metadata: dict[uuid.UUID, int] = {}
        for member in group.members.values():
            for topic_id in self._subscribed_ids(member, topics):
                metadata[topic_id] = 0
        for _, (topic_id, count) in topics.items():
            if topic_id in metadata:
                metadata[topic_id] = count
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            if bump:
                group.group_epoch += 1

    def _compute_target(self, group: ConsumerGroup) -> None:
        topics = self.topics()
        names = [m.server_assignor for m in group.members.values() if m.server_assignor]
        name = max(set(names), key=lambda n: (names.count(n), n)) if names else self.assignors[0]
        members = {m.member_id: AssignmentMember(self._subscribed_ids(m, topics), group.target.get(m.member_id, {}),
                                                 m.rack_id)
                   for m in group.members.values()}
        group.target = dict(ASSIGNORS[name].assign(members, group.subscription_metadata))
        group.assignment_epoch = group.group_epoch
        group.assignor_name = name
        _log.info("consumer group {group}: target assignment at epoch {epoch} by {assignor} for {count} members",
                  group=group.group_id, epoch=group.group_epoch, assignor=name, count=len(members))

    def _reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember,
                   owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None) -> None:
        before = member.assignment
        after = reconcile(before, group.assignment_epoch, group.target.get(member.member_id, {}), group.owner_epoch,
                          owned)
        if after == before:
            return
        group.set_assignment(member, after)
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            if before.state is not MemberState.UNREVOKED_PARTITIONS or before.epoch != after.epoch:
                self._cancel(member, "rebalance_timer")
                member.rebalance_timer = self.clock.callLater(member.rebalance_timeout_ms / 1000.0,
                                                              self._rebalance_expired, group, member.member_id,
                                                              after.epoch)
        else:
            self._cancel(member, "rebalance_timer")

    # --- timers ------------------------------------------------------------------------

    @staticmethod
    def _cancel(member: ConsumerGroupMember, name: str) -> None:
        timer = getattr(member, name)
        if timer is not None and timer.active():
            timer.cancel()
        setattr(member, name, None)

    def _schedule_session(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        self._cancel(member, "session_timer")
        member.session_timer = self.clock.callLater(self.session_timeout(group.group_id) / 1000.0,
                                                    self._session_expired, group, member.member_id)

    def _session_expired(self, group: ConsumerGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or group.dead:
            return
        member.session_timer = None
        _log.info("member {member} of consumer group {group} expired (no heartbeat within {timeout} ms)",
                  member=member_id, group=group.group_id, timeout=self.session_timeout(group.group_id))
        self._fence(group, member)

    def _rebalance_expired(self, group: ConsumerGroup, member_id: str, epoch: int) -> None:
        member = group.members.get(member_id)
        if member is None or group.dead:
            return
        member.rebalance_timer = None
        if member.assignment.state is MemberState.UNREVOKED_PARTITIONS and member.epoch == epoch:
            _log.info("member {member} of consumer group {group} did not revoke its partitions within "
                      "{timeout} ms: fenced", member=member_id, group=group.group_id,
                      timeout=member.rebalance_timeout_ms)
            self._fence(group, member)

    # --- offsets -------------------------------------------------------------------------

    def commit_error(self, group_id: str, member_id: str, member_epoch: int, version: int = 9) -> ErrorCode:
        """
        Kafka's C{ConsumerGroup.validateOffsetCommit} (OffsetCommit, whose
        generation id is the member epoch): a commit at a negative epoch (an
        admin tool, a consumer without group management) is taken only while
        the group has no members; otherwise the member must exist
        (C{UNKNOWN_MEMBER_ID}), use OffsetCommit v9+ (C{UNSUPPORTED_VERSION}:
        every member of a kafkatw consumer group uses the consumer protocol)
        and commit at its current epoch (C{STALE_MEMBER_EPOCH}).

        @param version: the OffsetCommit request's version.
        """
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """
        OffsetFetch v9+ with a member (Kafka's C{ConsumerGroup.validateOffsetFetch}):
        a fetch with neither a member id nor an epoch (an admin tool) is
        taken; otherwise the member must exist (C{UNKNOWN_MEMBER_ID}) at
        that epoch (C{STALE_MEMBER_EPOCH}).
        """
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    # --- ConsumerGroupDescribe / DescribeGroups / ListGroups -------------------------------

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """
        The topic names the members of consumer group C{group_id} subscribe
        to, regular expressions resolved (OffsetDelete answers them
        C{GROUP_SUBSCRIBED_TO_TOPIC}); C{None} when it is not a consumer
        group with members.
        """
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return None
        topics = self.topics()
        names = {topic_id: name for name, (topic_id, _) in topics.items()}
        subscribed: set[str] = set()
        for member in group.members.values():
            subscribed.update(member.subscribed_topic_names)
            subscribed.update(names[t] for t in self._subscribed_ids(member, topics))
        return subscribed

    def list_groups(self) -> list[tuple[str, str, str]]:
        """C{[(group_id, protocol type, state)]} of the consumer groups (ListGroups)."""
        return [(g.group_id, "consumer", g.state.value) for g in self.groups.values()]

    def describe(self, group_id: str) -> dict:
        """
        One ConsumerGroupDescribe C{DescribedGroup} (Kafka's
        C{ConsumerGroup.asDescribedGroup}); C{GROUP_ID_NOT_FOUND} for a
        classic or unknown group.
        """
        error = self._check(group_id)
        base = {"group_id": group_id, "error_code": int(error), "error_message": None, "group_state": "",
                "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}
        if error:
            return base
        group = self.groups.get(group_id)
        if group is None:
            classic = self.classic.groups.get(group_id)
            return {**base, "error_code": int(ErrorCode.group_id_not_found),
                    "error_message": f"Group {group_id} is not a consumer group." if classic is not None else
                    f"Group {group_id} not found."}
        topics = {topic_id: name for name, (topic_id, _) in self.topics().items()}

        def described(partitions: Partitions) -> dict:
            return {"topic_partitions": [
                {"topic_id": topic_id, "topic_name": topics.get(topic_id, ""), "partitions": sorted(ps)}
                for topic_id, ps in sorted(partitions.items(), key=lambda kv: topics.get(kv[0], "")) if ps]}

        members = [{
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
            "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": list(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex, "assignment": described(m.assignment.assigned),
            "target_assignment": described(group.target.get(m.member_id, {})),
            "member_type": 1,
        } for m in group.members.values()]
        return {**base, "group_state": group.state.value, "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch, "assignor_name": group.assignor_name or self.assignors[0],
                "members": members}


def _subset(owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None, assigned: Partitions) -> bool:
    """Kafka's C{isSubset}: the owned partitions (C{None}: not reported, so not a subset) are all assigned."""
    if owned is None:
        return False
    return all(p in assigned.get(topic_id, ()) for topic_id, ps in owned for p in ps)
