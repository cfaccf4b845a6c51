"""
The handlers of KIP-848 consumer groups, mixed into
L{kafkatw.broker.apis.KafkaApis}: ConsumerGroupHeartbeat (API key 68) and
ConsumerGroupDescribe (69), served by
L{kafkatw.broker.consumer_group.ConsumerGroupCoordinator}; OffsetFetch v8+
(several groups; v9 checks a member's epoch); the topic ids a Metadata
request names (v12: KIP-848 clients resolve their assignment so).  It also
makes the broker's L{kafkatw.broker.group_config.GroupConfigManager}
(C{group_configs}).

With an authorizer, ConsumerGroupHeartbeat needs Read on the group and
ConsumerGroupDescribe Describe on it (else C{GROUP_AUTHORIZATION_FAILED}), as
Kafka's C{KafkaApis.handleConsumerGroupHeartbeat} and
C{handleConsumerGroupDescribe} check.  A heartbeat naming a topic the
principal may not Describe is answered C{TOPIC_AUTHORIZATION_FAILED}, and a
regular expression resolves only to the topics the member may Describe
(KAFKA-18813); a described group whose members' assignments or target
assignments name a topic the principal may not Describe is answered
C{TOPIC_AUTHORIZATION_FAILED} without its members.

Group ids are one namespace over classic, consumer and share groups
(L{ConsumerGroupApis.group_type}, Kafka's C{GroupMetadataManager.groups}).

Source: KIP-848; Kafka's C{ConsumerGroupHeartbeatRequest.json} and
C{ConsumerGroupDescribeRequest.json} (v1: client-generated member ids and
C{SubscribedTopicRegex}; ConsumerGroupDescribe v1: C{MemberType}).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.internet import defer

from ..errors import ErrorCode
from ..security.acl import OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType
from .consumer_group import ConsumerGroupCoordinator, HeartbeatRequest
from .group_config import GroupConfigManager
from .request_context import RequestContext

__all__ = ["CONSUMER_GROUP_VERSIONS", "ConsumerGroupApis"]

#: API key -> (min, max) version served.
CONSUMER_GROUP_VERSIONS: dict[int, tuple[int, int]] = {
    68: (0, 1),  # ConsumerGroupHeartbeat (KIP-848)
    69: (0, 1),  # ConsumerGroupDescribe (KIP-848)
}


#: The error message of a described group naming a topic the principal may not Describe (Kafka's).
UNDESCRIBABLE_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


def _ms(value: Any) -> int:
    return -1 if value is None else int(round(value.total_seconds() * 1000))


class ConsumerGroupApis:
    """
    ConsumerGroupHeartbeat and ConsumerGroupDescribe; a mixin of
    L{kafkatw.broker.apis.KafkaApis}, whose C{group_coordinator},
    C{metadata}, C{config}, C{reactor}, C{authorizer} and helpers
    (C{_respond}, C{_group_denied}, C{_authorized_operations},
    C{_client_host}) it uses.
    """

    def make_consumer_group_coordinator(self) -> ConsumerGroupCoordinator:
        """The consumer-group coordinator beside C{self.group_coordinator}, reading topics from the metadata cache."""
        metadata = self.metadata
        #: every group's config overrides (IncrementalAlterConfigs on resource type GROUP)
        self.group_configs = GroupConfigManager(self.config)
        if hasattr(self.admin, "group_config_changed"):
            self.admin.group_config_changed = self.group_configs.update

        def topics() -> dict:
            return {name: (meta.topic_id, len(meta.partitions)) for name, meta in metadata.topics.items()}

        return ConsumerGroupCoordinator(self.group_coordinator, self.config, self.reactor, topics,
                                        self.group_configs.group_config, group_type=self.group_type)

    def group_type(self, group_id: str) -> str | None:
        """
        The kind of the group this broker holds as C{group_id}: C{"share"},
        C{"consumer"} (KIP-848), C{"classic"}, or C{None}.  Group ids are one
        namespace (Kafka's C{GroupMetadataManager.groups}): a request of one
        kind for a group of another is refused (ConsumerGroupHeartbeat and
        ShareGroupHeartbeat C{GROUP_ID_NOT_FOUND}, JoinGroup to a share group
        C{INCONSISTENT_GROUP_PROTOCOL}, AlterShareGroupOffsets
        C{GROUP_ID_NOT_FOUND}), except the conversions Kafka 4 makes between
        an empty classic group and a consumer group.
        """
        share = getattr(self, "share_group_coordinator", None)
        if share is not None and group_id in share.groups:
            return "share"
        consumer = getattr(self, "consumer_group_coordinator", None)
        if consumer is not None and group_id in consumer.groups:
            return "consumer"
        if group_id in self.group_coordinator.groups:
            return "classic"
        return None

    def topic_describable(self, context: RequestContext) -> Any:
        """C{name -> bool}: whether the request's principal may Describe the topic; C{None} without an authorizer."""
        authorizer = self.authorizer
        if authorizer is None:
            return None
        principal, host = context.connection.principal, context.connection.client_host
        return lambda name: authorizer.authorize(principal, host, AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    def undescribable_topics(self, context: RequestContext, names: Any) -> bool:
        """Whether any of the topic C{names} is one the principal may not Describe (never without an authorizer)."""
        return self.authorizer is not None and bool(self._denied_topics(context, AclOperation.DESCRIBE, names))

    def hide_undescribable_groups(self, context: RequestContext, groups: list[dict], keys: tuple[str, ...],
                                  blank: dict) -> None:
        """
        ConsumerGroupDescribe and ShareGroupDescribe with an authorizer: a
        described group whose members' C{keys} assignments (C{"assignment"},
        C{"target_assignment"}) name a topic the principal may not Describe
        becomes C{blank} with C{TOPIC_AUTHORIZATION_FAILED} (Kafka's
        C{handleConsumerGroupDescribe}, C{handleShareGroupDescribe}).
        """
        if self.authorizer is None:
            return
        for i, group in enumerate(groups):
            if group["error_code"]:
                continue
            names = {tp["topic_name"] for m in group["members"] for key in keys
                     for tp in m[key]["topic_partitions"] if tp["topic_name"]}
            if self.undescribable_topics(context, names):
                groups[i] = {**blank, "group_id": group["group_id"],
                             "error_code": int(ErrorCode.topic_authorization_failed),
                             "error_message": UNDESCRIBABLE_TOPICS, "members": []}

    def consumer_group_handlers(self) -> dict[int, Any]:
        """The API key -> handler entries for L{CONSUMER_GROUP_VERSIONS}."""
        return {68: self.handle_consumer_group_heartbeat, 69: self.handle_consumer_group_describe}

    def handle_consumer_group_heartbeat(self, context: RequestContext, request: Any) -> defer.Deferred:
        refused = None
        if self._group_denied(context, request.group_id):
            refused = ErrorCode.group_authorization_failed
        elif request.subscribed_topic_names and self.undescribable_topics(context, request.subscribed_topic_names):
            refused = ErrorCode.topic_authorization_failed  # KAFKA-18813: names it may not Describe
        if refused is not None:
            d = defer.succeed({"error_code": int(refused), "error_message": None,
                               "member_id": None, "member_epoch": -1, "heartbeat_interval": 0,
                               "assignment": None})
        else:
            owned = None if request.topic_partitions is None else tuple(
                (tp.topic_id, tuple(tp.partitions)) for tp in request.topic_partitions)
            names = request.subscribed_topic_names
            d = self.consumer_group_coordinator.confirmed_heartbeat(HeartbeatRequest(
                group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
                instance_id=request.instance_id, rack_id=request.rack_id,
                rebalance_timeout_ms=_ms(request.rebalance_timeout),
                subscribed_topic_names=None if names is None else tuple(names),
                subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
                server_assignor=request.server_assignor, owned=owned, client_id=context.client_id or "",
                client_host=self._client_host(context), version=context.api_version,
                topic_describable=self.topic_describable(context)))
        return d.addCallback(lambda body: self._respond(context, {"throttle_time": 0, **body}))

    def handle_consumer_group_describe(self, context: RequestContext, request: Any) -> bytes:
        groups = []
        blank = {"error_message": None, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                 "assignor_name": "", "members": [], "authorized_operations": OPERATIONS_NOT_REQUESTED}
        for group_id in request.group_ids:
            if self._group_denied(context, group_id, AclOperation.DESCRIBE):
                described = {**blank, "group_id": group_id, "error_code": int(ErrorCode.group_authorization_failed)}
            else:
                described = self.consumer_group_coordinator.describe(group_id)
            described["authorized_operations"] = OPERATIONS_NOT_REQUESTED
            if request.include_authorized_operations and not described["error_code"]:
                described["authorized_operations"] = self._authorized_operations(context, ResourceType.GROUP,
                                                                                 group_id)
            groups.append(described)
        self.hide_undescribable_groups(context, groups, ("assignment", "target_assignment"), blank)
        return self._respond(context, {"throttle_time": 0, "groups": groups})

    def metadata_topic_names(self, topics: Any) -> tuple[list[str], list[dict]]:
        """
        The names of a Metadata request's topics, those named by topic id
        (v12+: a KIP-848 consumer resolves the topic ids of its assignment
        so) looked up in the metadata cache; an unknown id gets an entry
        C{UNKNOWN_TOPIC_ID} (Kafka's C{KafkaApis.handleTopicMetadataRequest}).

        @return: C{(names, entries of the unknown ids)}.
        """
        names: list[str] = []
        unknown: list[dict] = []
        by_id = None
        for t in topics:
            topic_id = getattr(t, "topic_id", None)
            if t.name is not None or topic_id is None or topic_id.int == 0:
                names.append(t.name)
                continue
            if by_id is None:
                by_id = {meta.topic_id: name for name, meta in self.metadata.topics.items()}
            if topic_id in by_id:
                names.append(by_id[topic_id])
            else:
                unknown.append({"error_code": int(ErrorCode.unknown_topic_id), "name": None, "topic_id": topic_id,
                                "partitions": [], "topic_authorized_operations": -2147483648})
        return names, unknown

    def handle_offset_fetch_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        OffsetFetch v8+ (KIP-709: several groups in one request; v9,
        KIP-848: a member's id and epoch, checked against its consumer group:
        C{STALE_MEMBER_EPOCH}, C{UNKNOWN_MEMBER_ID}).  Each group is answered
        as OffsetFetch v7 answers one.
        """
        fetches = []
        for group in request.groups:
            member_error = self.consumer_group_coordinator.fetch_error(
                group.group_id, getattr(group, "member_id", None), getattr(group, "member_epoch", -1))
            one = SimpleNamespace(group_id=group.group_id, require_stable=request.require_stable)
            d = self.offset_fetch_group(context, group.group_id, group.topics, one, member_error)
            d.addCallback(lambda body, group_id=group.group_id: {"group_id": group_id, **body})
            fetches.append(d)
        gathered = defer.gatherResults(fetches)
        return gathered.addCallback(lambda groups: self._respond(context, {"throttle_time": 0, "groups": groups}))
