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
C{handleConsumerGroupDescribe} check.

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
                                        self.group_configs.group_config)

    def consumer_group_handlers(self) -> dict[int, Any]:
        """The API key -> handler entries for L{CONSUMER_GROUP_VERSIONS}."""
        return {68: self.handle_consumer_group_heartbeat, 69: self.handle_consumer_group_describe}

    def handle_consumer_group_heartbeat(self, context: RequestContext, request: Any) -> defer.Deferred:
        if self._group_denied(context, request.group_id):
            d = defer.succeed({"error_code": int(ErrorCode.group_authorization_failed), "error_message": None,
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
                client_host=self._client_host(context), version=context.api_version))
        return d.addCallback(lambda body: self._respond(context, {"throttle_time": 0, **body}))

    def handle_consumer_group_describe(self, context: RequestContext, request: Any) -> bytes:
        groups = []
        for group_id in request.group_ids:
            if self._group_denied(context, group_id, AclOperation.DESCRIBE):
                described = {"group_id": group_id, "error_code": int(ErrorCode.group_authorization_failed),
                             "error_message": None, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                             "assignor_name": "", "members": []}
            else:
                described = self.consumer_group_coordinator.describe(group_id)
            described["authorized_operations"] = OPERATIONS_NOT_REQUESTED
            if request.include_authorized_operations and not described["error_code"]:
                described["authorized_operations"] = self._authorized_operations(context, ResourceType.GROUP,
                                                                                 group_id)
            groups.append(described)
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
