"""
The share group coordinator: membership of share groups (KIP-932), after
Kafka's C{GroupMetadataManager} share-group paths and C{ShareGroup}.

A share group's coordinator is its consumer-group coordinator (the broker
FindCoordinator names for the group id, L{kafkatw.broker.group_coordinator}).
Members join, stay and leave by ShareGroupHeartbeat alone:

  - C{member_epoch} 0 joins with the member id the client generated and its
    subscribed topic names; -1 leaves; below -1 is C{INVALID_REQUEST}; any
    other must be the member's current epoch or the one before it (the answer
    that bumped it may have been lost: the assignment is sent again), else
    C{FENCED_MEMBER_EPOCH}; an unknown member id is C{UNKNOWN_MEMBER_ID}, and
    the client rejoins with epoch 0;
  - every change of membership, of a subscription, or of a subscribed topic's
    partition count bumps the I{group epoch} and computes a new target
    assignment at once (the assignment epoch); a member whose epoch is behind
    takes the group epoch and gets its new assignment in the response.  Share
    groups have no revocation step: several members may read one partition,
    so an assignment takes effect as it is sent;
  - a member that sends no heartbeat for C{group.share.session.timeout.ms} is
    removed; members are told to heartbeat every
    C{group.share.heartbeat.interval.ms} (a group's own C{share.session.timeout.ms}
    and C{share.heartbeat.interval.ms}, set with IncrementalAlterConfigs on the
    GROUP resource, take their place for that group).

Assignment (Kafka's C{simple} share assignor, KIP-932 "Share group assignor"),
per subscribed topic, members in member-id order and partitions in index order:
with at least as many partitions as members, partition I{i} goes to member
I{i mod members} (each partition to one member, spread evenly); with more
members than partitions, member I{j} gets partition I{j mod partitions}, so every
partition is read by members that differ by at most one in number.

Group membership is held in memory by the coordinator: after a coordinator
moves, members are C{UNKNOWN_MEMBER_ID} and rejoin (epoch 0); the records'
states are the share partitions' (kafkatw/broker/share_partition.py) and do not
depend on it.

Source: KIP-932; Apache Kafka C{group-coordinator/.../GroupMetadataManager.java}
(C{shareGroupHeartbeat}), C{SimpleAssignor.java}.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Mapping

from twisted.logger import Logger

from ..errors import ErrorCode

__all__ = ["ShareGroupCoordinator", "ShareGroup", "ShareGroupMember", "simple_assignment", "SHARE_PROTOCOL_TYPE"]

_log = Logger()

#: The C{protocol_type} ListGroups answers for a share group (Kafka's C{ShareGroup.PROTOCOL_TYPE}).
SHARE_PROTOCOL_TYPE = "share"
#: ShareGroupDescribe's C{assignor_name}.
ASSIGNOR_NAME = "simple"


class ShareGroupMember:
    """
    One member of a share group.

    @ivar assignment: topic name -> sorted partition indexes (the target assignment).
    """

    def __init__(self, member_id: str, client_id: str, client_host: str) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.client_host = client_host
        self.rack_id: str | None = None
        self.member_epoch = 0
        #: the epoch before the last bump (a heartbeat of it is accepted: its answer may have been lost)
        self.previous_member_epoch = -1
        self.subscribed_topic_names: tuple[str, ...] = ()
        self.assignment: dict[str, list[int]] = {}
        self.session_timer: Any = None


class ShareGroup:
    """
    A share group's membership.

    @ivar group_epoch: bumped by every change of membership, subscriptions or
        subscribed topics' partitions.
    @ivar assignment_epoch: the group epoch of the target assignment.
    @ivar subscription_metadata: (topic, partition count, topic id) of the
        subscribed topics when the assignment was computed.
    """

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareGroupMember] = {}
        self.subscription_metadata: tuple[tuple[str, int, str], ...] = ()
        #: every topic a member ever subscribed to (what --describe --offsets shows of an empty group)
        self.known_topics: set[str] = set()

    @property
    def state(self) -> str:
        """Kafka's C{ShareGroupState}: C{Empty} or C{Stable}."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> list[str]:
        return sorted({t for m in self.members.values() for t in m.subscribed_topic_names})


def simple_assignment(members: dict[str, tuple[str, ...]],
                      partitions: dict[str, int]) -> dict[str, dict[str, list[int]]]:
    """
    The C{simple} share assignment (see the module docstring).

    @param members: member id -> its subscribed topic names.
    @param partitions: topic name -> partition count (topics that do not exist are absent).
    @return: member id -> topic name -> sorted partition indexes.
    """
    result: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    for topic in sorted({t for ts in members.values() for t in ts}):
        count = partitions.get(topic, 0)
        subscribers = sorted(m for m, ts in members.items() if topic in ts)
        if not count or not subscribers:
            continue
        if len(subscribers) <= count:
            for index in range(count):
                result[subscribers[index % len(subscribers)]].setdefault(topic, []).append(index)
        else:
            for j, member in enumerate(subscribers):
                result[member][topic] = [j % count]
    return result


class ShareGroupCoordinator:
    """
    Serves ShareGroupHeartbeat and ShareGroupDescribe for the groups this
    broker coordinates.

    @param owns: group id -> whether this broker coordinates it now
        (L{kafkatw.broker.group_coordinator.GroupCoordinator.owns}).
    @param topics: the metadata cache's topics (name -> C{TopicMetadata} with
        C{topic_id} and C{partitions}).
    @param classic_group_exists: group id -> whether a classic (or other
        kind of) group has the id (a share heartbeat for it is C{GROUP_ID_NOT_FOUND}).
    @param session_timeout_ms: C{group.share.session.timeout.ms}, the
        default of the group config C{share.session.timeout.ms}.
    @param heartbeat_interval_ms: C{group.share.heartbeat.interval.ms}, the
        default of the group config C{share.heartbeat.interval.ms}.
    @param max_size: C{group.share.max.size}.
    @param group_config: group id -> its group config overrides (Kafka's
        names, kafkatw/broker/group_config.py): C{share.session.timeout.ms}
        and C{share.heartbeat.interval.ms} replace the broker's for that
        group, read at each heartbeat, as Kafka's C{GroupMetadataManager}
        reads its C{GroupConfigManager}.
    """

    def __init__(self, reactor: Any, owns: Callable[[str], bool], topics: Callable[[], dict[str, Any]],
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000, max_size: int = 200,
                 classic_group_exists: Callable[[str], bool] = lambda group_id: False,
                 group_config: Callable[[str], Mapping[str, str]] = lambda group_id: {}) -> None:
        self.reactor = reactor
        self.owns = owns
        self.topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.classic_group_exists = classic_group_exists
        self.group_config = group_config
        self.groups: dict[str, ShareGroup] = {}
        #: Called with (group id, member id) when a member leaves or is removed.
        self.member_removed: list[Callable[[str, str], Any]] = []

    # --- ShareGroupHeartbeat -------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed_topic_names: Any, client_id: str = "", client_host: str = "") -> dict:
        """
        One ShareGroupHeartbeat (v1): the response body as plain values.
        """
        def error(code: ErrorCode, message: str | None = None) -> dict:
            return {"throttle_time": 0, "error_code": int(code), "error_message": message, "member_id": None,
                    "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}

        if not group_id:
            return error(ErrorCode.invalid_request, "GroupId can't be empty.")
        if not member_id:
            return error(ErrorCode.invalid_request, "MemberId can't be empty.")
        if not self.owns(group_id):
            return error(ErrorCode.not_coordinator)
        group = self.groups.get(group_id)
        if group is None and self.classic_group_exists(group_id):
            return error(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        if member_epoch < -1:
            return error(ErrorCode.invalid_request, "MemberEpoch is invalid.")
        if member_epoch == -1:
            if group is not None and member_id in group.members:
                self._remove(group, member_id)
            return {"throttle_time": 0, "error_code": 0, "error_message": None, "member_id": member_id,
                    "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}
        changed = False
        if member_epoch == 0:
            if not subscribed_topic_names:
                return error(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            member = group.members.get(member_id)
            if member is None:
                if len(group.members) >= self.max_size:
                    return error(ErrorCode.group_max_size_reached,
                                 f"The share group has reached its maximum capacity of {self.max_size} members.")
                member = group.members[member_id] = ShareGroupMember(member_id, client_id, client_host)
                changed = True
        else:
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                return error(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
            if member_epoch != member.member_epoch and member_epoch != member.previous_member_epoch:
                return error(ErrorCode.fenced_member_epoch,
                             f"The share group member has an epoch {member_epoch} other than {member.member_epoch}.")
        assert group is not None
        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed_topic_names is not None and tuple(sorted(subscribed_topic_names)) != \
                member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(sorted(subscribed_topic_names))
            group.known_topics.update(member.subscribed_topic_names)
            changed = True
        if changed or self._subscription_metadata(group) != group.subscription_metadata:
            group.group_epoch += 1
        if group.assignment_epoch != group.group_epoch:
            self._assign(group)
        self._schedule_session_timeout(group, member)
        assignment = None
        if member_epoch == 0 or member_epoch != group.assignment_epoch:
            # a new epoch, or the member's previous one (the answer that brought the new one was lost): sent again
            if member.member_epoch != group.assignment_epoch:
                member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
            assignment = {"topic_partitions": self._assignment_entries(member, with_names=False)}
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "member_id": member_id,
                "member_epoch": member.member_epoch, "heartbeat_interval": self.group_heartbeat_interval_ms(group_id),
                "assignment": assignment}

    # --- ShareGroupDescribe ---------------------------------------------------------

    def describe(self, group_id: str) -> dict:
        """One C{DescribedGroup} of ShareGroupDescribe (v1) as plain values."""
        entry: dict[str, Any] = {"error_code": 0, "error_message": None, "group_id": group_id,
                                 "group_state": "Dead", "group_epoch": 0, "assignment_epoch": 0,
                                 "assignor_name": ASSIGNOR_NAME, "members": [],
                                 "authorized_operations": -2147483648}
        if not self.owns(group_id):
            entry["error_code"] = int(ErrorCode.not_coordinator)
            return entry
        group = self.groups.get(group_id)
        if group is None:
            entry["error_code"] = int(ErrorCode.group_id_not_found)
            entry["error_message"] = f"Group {group_id} not found."
            return entry
        entry.update(group_state=group.state, group_epoch=group.group_epoch,
                     assignment_epoch=group.assignment_epoch)
        entry["members"] = [{
            "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
            "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": list(m.subscribed_topic_names),
            "assignment": {"topic_partitions": self._assignment_entries(m, with_names=True)},
        } for m in sorted(group.members.values(), key=lambda m: m.member_id)]
        return entry

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of the share groups this broker coordinates now."""
        return [(g.group_id, g.state) for g in self.groups.values() if self.owns(g.group_id)]

    def ensure_group(self, group_id: str) -> ShareGroup:
        """The share group C{group_id}, made empty if it did not exist (an offsets reset of a new group)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    def delete(self, group_id: str) -> ErrorCode:
        """Delete an empty share group (DeleteGroups); C{NON_EMPTY_GROUP} while it has members."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        return ErrorCode.none

    def unload_moved(self) -> None:
        """Forget the groups this broker no longer coordinates (their members rejoin elsewhere)."""
        for group_id in [g for g in self.groups if not self.owns(g)]:
            group = self.groups.pop(group_id)
            for member in group.members.values():
                if member.session_timer is not None and member.session_timer.active():
                    member.session_timer.cancel()

    def close(self) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                if member.session_timer is not None and member.session_timer.active():
                    member.session_timer.cancel()

    # --- internals -------------------------------------------------------------------

    def _subscription_metadata(self, group: ShareGroup) -> tuple[tuple[str, int, str], ...]:
        """(topic, partition count, topic id) of the subscribed topics: a recreated topic changes it too."""
        topics = self.topics()
        return tuple((t, len(topics[t].partitions), str(topics[t].topic_id)) if t in topics else (t, 0, "")
                     for t in group.subscribed_topics())

    def _assign(self, group: ShareGroup) -> None:
        group.subscription_metadata = self._subscription_metadata(group)
        counts = {topic: count for topic, count, _ in group.subscription_metadata}
        target = simple_assignment({m.member_id: m.subscribed_topic_names for m in group.members.values()}, counts)
        for member_id, assignment in target.items():
            group.members[member_id].assignment = assignment
        group.assignment_epoch = group.group_epoch

    def _assignment_entries(self, member: ShareGroupMember, with_names: bool) -> list[dict]:
        topics = self.topics()
        entries = []
        for topic, partitions in sorted(member.assignment.items()):
            meta = topics.get(topic)
            if meta is None:
                continue
            topic_id = meta.topic_id if isinstance(meta.topic_id, uuid.UUID) else uuid.UUID(str(meta.topic_id))
            entry: dict[str, Any] = {"topic_id": topic_id, "partitions": list(partitions)}
            if with_names:
                entry["topic_name"] = topic
            entries.append(entry)
        return entries

    def group_session_timeout_ms(self, group_id: str) -> int:
        """The group's C{share.session.timeout.ms} (ms), else C{group.share.session.timeout.ms}."""
        return int(self.group_config(group_id).get("share.session.timeout.ms", self.session_timeout_ms))

    def group_heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's C{share.heartbeat.interval.ms} (ms), else C{group.share.heartbeat.interval.ms}."""
        return int(self.group_config(group_id).get("share.heartbeat.interval.ms", self.heartbeat_interval_ms))

    def _schedule_session_timeout(self, group: ShareGroup, member: ShareGroupMember) -> None:
        timeout_s = self.group_session_timeout_ms(group.group_id) / 1000.0
        timer = member.session_timer
        if timer is not None and timer.active():
            timer.reset(timeout_s)
        else:
            member.session_timer = self.reactor.callLater(timeout_s, self._session_expired,
                                                          group.group_id, member.member_id)

    def _session_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            _log.info("share group {group}: member {member} removed after its session timeout",
                      group=group_id, member=member_id)
            group.members[member_id].session_timer = None
            self._remove(group, member_id)

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.session_timer is not None and member.session_timer.active():
            member.session_timer.cancel()
        group.group_epoch += 1
        self._assign(group)
        for listener in self.member_removed:
            listener(group.group_id, member_id)
