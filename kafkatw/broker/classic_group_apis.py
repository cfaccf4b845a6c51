"""
The group coordinator's handlers for Kafka's classic group protocol, mixed
into L{kafkatw.broker.apis.KafkaApis}: FindCoordinator, the membership of a
classic group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), committed
offsets (OffsetCommit, OffsetFetch) and the groups' administration
(DescribeGroups, ListGroups, DeleteGroups), served by
L{kafkatw.broker.group_coordinator.GroupCoordinator}.

Some of these serve every kind of group: FindCoordinator finds a KIP-848
consumer group's and a share group's coordinator as a classic group's (and a
transactional id's, key type 1: L{kafkatw.broker.transaction_apis}),
OffsetCommit and OffsetFetch commit and read a KIP-848 member's offsets
(OffsetFetch v8+: L{kafkatw.broker.consumer_group_apis}), ListGroups lists the
share groups and DeleteGroups deletes them.  KIP-848's own requests
(ConsumerGroupHeartbeat, ConsumerGroupDescribe) are in
L{kafkatw.broker.consumer_group_apis}, KIP-932's in
L{kafkatw.broker.share_group_apis}.

With an authorizer each checks what Kafka's C{KafkaApis} checks: Read on the
group to join, sync, heartbeat, leave and commit (and Read on each committed
topic), Describe on the group to find its coordinator, fetch its offsets
(and Describe on each topic) and describe it, Delete on the group to delete
it; ListGroups lists the groups the principal may describe, unless it may
describe the cluster.

Source: Apache Kafka C{KafkaApis} (C{handleFindCoordinatorRequest},
C{handleJoinGroupRequest}, C{handleSyncGroupRequest},
C{handleHeartbeatRequest}, C{handleLeaveGroupRequest},
C{handleOffsetCommitRequest}, C{handleOffsetFetchRequest},
C{handleDescribeGroupsRequest}, C{handleListGroupsRequest},
C{handleDeleteGroupsRequest}); the protocol guide's group membership API.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer

from ..errors import ErrorCode
from ..security.acl import OPERATIONS_NOT_REQUESTED, AclOperation, ResourceType
from ..zookeeper.bridge import ZooKeeperError
from ..zookeeper.zk_data import CommittedOffset
from .request_context import RequestContext

__all__ = ["CLASSIC_GROUP_VERSIONS", "ClassicGroupApis"]

#: API key -> (min, max) version served.
CLASSIC_GROUP_VERSIONS: dict[int, tuple[int, int]] = {
    10: (0, 4),  # FindCoordinator (key type 0 groups, 1 transactions)
    11: (0, 8),  # JoinGroup (v9's KIP-814 skip_assignment: not served)
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    8: (2, 9),  # OffsetCommit (v9: the generation id is a KIP-848 member epoch)
    9: (1, 9),  # OffsetFetch (v8 batches groups, v9 adds KIP-848 member epochs)
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups (v5 filters by group type, KIP-848: not served)
    42: (0, 2),  # DeleteGroups
}


class ClassicGroupApis:
    """
    FindCoordinator, the classic protocol's membership, offsets and the
    groups' administration; a mixin of L{kafkatw.broker.apis.KafkaApis},
    whose attributes and helpers (C{_group_denied}, C{_client_host}, and
    those of the other mixins: C{_find_transaction_coordinator},
    C{_require_stable}, C{handle_offset_fetch_groups}, C{with_share_groups},
    C{delete_share_group}) it uses.
    """

    # provided by KafkaApis
    metadata: Any
    group_coordinator: Any
    authorizer: Any
    _allowed: Callable[..., bool]
    _denied_topics: Callable[..., set]
    _authorized_operations: Callable[..., int]
    _group_denied: Callable[..., bool]
    _client_host: Callable[[RequestContext], str]
    _respond: Callable[..., bytes]
    group_type: Callable[[str], str | None]

    def classic_group_handlers(self) -> dict[int, Callable[..., Any]]:
        """The API key -> handler entries for L{CLASSIC_GROUP_VERSIONS}."""
        return {10: self.handle_find_coordinator, 11: self.handle_join_group, 12: self.handle_heartbeat,
                13: self.handle_leave_group, 14: self.handle_sync_group, 8: self.handle_offset_commit,
                9: self.handle_offset_fetch, 15: self.handle_describe_groups, 16: self.handle_list_groups,
                42: self.handle_delete_groups}

    # --- FindCoordinator -----------------------------------------------------

    def handle_find_coordinator(self, context: RequestContext, request: Any) -> bytes:
        """
        A group's coordinator is the broker holding the group's
        C{__consumer_offsets} partition in ZooKeeper
        (L{kafkatw.broker.group_coordinator_election}), so every broker answers
        the same; C{COORDINATOR_NOT_AVAILABLE} while no broker holds it (or its
        holder has no such listener).  A transactional id's (key type 1) is the leader of its
        ``__transaction_state`` partition (L{kafkatw.broker.transaction_apis.TransactionApis}).  With an
        authorizer: Describe on the group (else C{GROUP_AUTHORIZATION_FAILED})
        or on the TransactionalId (else C{TRANSACTIONAL_ID_AUTHORIZATION_FAILED}).
        """
        key_type = getattr(request, "key_type", 0)
        keys = list(request.coordinator_keys) if hasattr(request, "coordinator_keys") else [request.key]
        coordinators = [self._find_coordinator(key, key_type, context.connection.listener_name, context)
                        for key in keys]
        if self.authorizer is not None and key_type == 0:
            for entry in coordinators:
                if not self._allowed(context, AclOperation.DESCRIBE, ResourceType.GROUP, entry["key"]):
                    entry.update(error_code=int(ErrorCode.group_authorization_failed), error_message=None,
                                 node_id=-1, host="", port=-1)
        body = {"throttle_time": 0, "coordinators": coordinators, **coordinators[0]}
        return self._respond(context, body)

    def _find_coordinator(self, key: str, key_type: int, listener: str = "PLAINTEXT",
                          context: RequestContext | None = None) -> dict:
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 0,
                                 "error_message": None}
        if key_type == 1:
            return self._find_transaction_coordinator(key, listener, context)
        if key_type != 0:
            entry["error_code"] = int(ErrorCode.invalid_request)
            entry["error_message"] = f"unknown key type {key_type}"
            return entry
        if not key:
            entry["error_code"] = int(ErrorCode.invalid_request)
            entry["error_message"] = "empty group id"
            return entry
        broker_id = self.group_coordinator.coordinator(key)
        broker = self.metadata.brokers.get(broker_id) if broker_id is not None else None
        address = broker.address(listener) if broker is not None else None
        if broker is None or address is None:
            entry["error_code"] = int(ErrorCode.coordinator_not_available)
            entry["error_message"] = ("no live broker coordinates the group yet" if broker is None
                                      else f"the coordinator has no listener {listener}")
            return entry
        entry.update(node_id=broker.broker_id, host=address[0], port=address[1])
        return entry

    # --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------

    def handle_join_group(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        version = context.api_version
        if self._group_denied(context, request.group_id):
            return self._respond(context, {
                "throttle_time": 0, "error_code": int(ErrorCode.group_authorization_failed), "generation_id": -1,
                "protocol_type": None, "protocol_name": None if version >= 7 else "", "leader": "", "member_id": "",
                "members": []})
        if self.group_type(request.group_id) == "share":
            # Kafka's classicGroupJoin: a group of another kind (one namespace of group ids)
            return self._respond(context, {
                "throttle_time": 0, "error_code": int(ErrorCode.inconsistent_group_protocol), "generation_id": -1,
                "protocol_type": None, "protocol_name": None if version >= 7 else "", "leader": "", "member_id": "",
                "members": []})
        session_timeout_ms = int(request.session_timeout.total_seconds() * 1000)
        rebalance = getattr(request, "rebalance_timeout", None)
        rebalance_timeout_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_timeout_ms
        d = self.group_coordinator.join_group(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None), version >= 4,
            context.client_id or "", self._client_host(context), rebalance_timeout_ms, session_timeout_ms,
            request.protocol_type, [(p.name, bytes(p.metadata)) for p in request.protocols],
        )

        def answer(result: Any) -> bytes:
            empty = None if version >= 7 else ""
            return self._respond(context, {
                "throttle_time": 0, "error_code": int(result.error), "generation_id": result.generation_id,
                "protocol_type": result.protocol_type if result.protocol_type is not None else None,
                "protocol_name": result.protocol_name if result.protocol_name is not None else empty,
                "leader": result.leader_id, "member_id": result.member_id, "members": list(result.members),
            })

        return d.addCallback(answer)

    def handle_sync_group(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        if self._group_denied(context, request.group_id):
            return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.group_authorization_failed),
                                           "protocol_type": None, "protocol_name": None, "assignment": b""})
        d = self.group_coordinator.sync_group(
            request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None),
            getattr(request, "protocol_type", None), getattr(request, "protocol_name", None),
            {a.member_id: bytes(a.assignment) for a in request.assignments},
        )

        def answer(result: Any) -> bytes:
            return self._respond(context, {"throttle_time": 0, "error_code": int(result.error),
                                          "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
                                          "assignment": result.assignment})

        return d.addCallback(answer)

    def handle_heartbeat(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        if self._group_denied(context, request.group_id):
            return self._respond(context, {"throttle_time": 0,
                                           "error_code": int(ErrorCode.group_authorization_failed)})
        d = self.group_coordinator.heartbeat(request.group_id, request.member_id,
                                             getattr(request, "group_instance_id", None), request.generation_id)
        return d.addCallback(lambda code: self._respond(context, {"throttle_time": 0, "error_code": int(code)}))

    def handle_leave_group(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        if self._group_denied(context, request.group_id):
            return self._respond(context, {"throttle_time": 0,
                                           "error_code": int(ErrorCode.group_authorization_failed), "members": []})
        if context.api_version >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [(request.member_id, None)]
        d = self.group_coordinator.leave_group(request.group_id, leaving)

        def answer(result: tuple) -> bytes:
            top, codes = result
            if context.api_version < 3 and not top:
                top = codes[0]
            return self._respond(context, {
                "throttle_time": 0, "error_code": int(top),
                "members": [{"member_id": m, "group_instance_id": i, "error_code": int(c)}
                            for (m, i), c in zip(leaving, codes)],
            })

        return d.addCallback(answer)

    # --- OffsetCommit, OffsetFetch ---------------------------------------

    def handle_offset_commit(self, context: RequestContext, request: Any) -> defer.Deferred:
        """Read on the group (else every partition C{GROUP_AUTHORIZATION_FAILED}) and on each topic."""
        offsets = {}
        order = []
        refused: dict[tuple[str, int], ErrorCode] = {}
        group_denied = self._group_denied(context, request.group_id)
        denied = None if self.authorizer is None or group_denied else \
            self._denied_topics(context, AclOperation.READ, (t.name for t in request.topics))
        for topic in request.topics:
            for p in topic.partitions:
                key = (topic.name, p.partition_index)
                order.append(key)
                if group_denied:
                    refused[key] = ErrorCode.group_authorization_failed
                elif denied and topic.name in denied:
                    refused[key] = ErrorCode.topic_authorization_failed
                else:
                    offsets[key] = CommittedOffset(p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                                   p.committed_metadata or "")
        if refused and not offsets:
            d: defer.Deferred = defer.succeed({})
        else:
            d = self.group_coordinator.commit_offsets(
                request.group_id, request.generation_id_or_member_epoch, request.member_id,
                getattr(request, "group_instance_id", None), offsets, context.api_version)

        def answer(codes: dict) -> bytes:
            codes = {**codes, **refused}
            topics: dict[str, list] = {}
            for name, partition in order:
                topics.setdefault(name, []).append({"partition_index": partition,
                                                    "error_code": int(codes[(name, partition)])})
            return self._respond(context, {"throttle_time": 0, "topics": [
                {"name": name, "partitions": partitions} for name, partitions in topics.items()]})

        return d.addCallback(answer)

    def handle_offset_fetch(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        The group's committed offsets.  With an authorizer it takes Describe
        on the group (else C{GROUP_AUTHORIZATION_FAILED}) and Describe on each
        topic: the partitions of a named topic it may not describe answer
        C{TOPIC_AUTHORIZATION_FAILED}, and such topics are left out of an
        all-topics fetch (Kafka's C{KafkaApis.handleOffsetFetchRequest}; Read,
        which implies Describe, is needed only to commit).  v8+ asks for
        several groups (L{kafkatw.broker.consumer_group_apis.ConsumerGroupApis.handle_offset_fetch_groups}).
        """
        if context.api_version >= 8:
            return self.handle_offset_fetch_groups(context, request)
        d = self.offset_fetch_group(context, request.group_id, request.topics, request)
        return d.addCallback(lambda body: self._respond(context, {"throttle_time": 0, **body}))

    def offset_fetch_group(self, context: RequestContext, group_id: str, wanted_topics: Any, request: Any,
                           member_error: ErrorCode = ErrorCode.none) -> defer.Deferred:
        """
        One group of an OffsetFetch: a Deferred firing with C{{"error_code",
        "topics"}} (C{member_error}: the group's answer without reading, a
        KIP-848 member's C{STALE_MEMBER_EPOCH} or C{UNKNOWN_MEMBER_ID}).
        """
        wanted = None if wanted_topics is None else [
            (t.name, p) for t in wanted_topics for p in t.partition_indexes]
        if self._group_denied(context, group_id, AclOperation.DESCRIBE):
            d: defer.Deferred = defer.succeed((ErrorCode.group_authorization_failed, {}))
        elif member_error:
            d = defer.succeed((member_error, {}))
        else:
            d = self._require_stable(lambda: self.group_coordinator.fetch_offsets(group_id, wanted), request)

        def answer(result: tuple) -> dict:
            error, found, *unstable = result
            keys = wanted if wanted is not None else sorted(found)
            denied: set[str] = set()
            if self.authorizer is not None and not error:
                denied = self._denied_topics(context, AclOperation.DESCRIBE, (name for name, _ in keys))
                if wanted is None:
                    keys = [k for k in keys if k[0] not in denied]
                else:
                    found = {k: v for k, v in found.items() if k[0] not in denied}
            partition_error = int(error) if context.api_version < 2 else 0
            topics: dict[str, list] = {}
            for name, partition in keys:
                committed = found.get((name, partition))
                topics.setdefault(name, []).append({
                    "partition_index": partition,
                    "committed_offset": committed.offset if committed else -1,
                    "committed_leader_epoch": committed.leader_epoch if committed else -1,
                    "metadata": committed.metadata if committed else "",
                    "error_code": int(ErrorCode.topic_authorization_failed) if name in denied else partition_error,
                })
                if unstable and (name, partition) in unstable[0]:  # KIP-447 require_stable
                    topics[name][-1].update(committed_offset=-1, error_code=int(ErrorCode.unstable_offset_commit))
            return {"error_code": int(error), "topics": [
                {"name": name, "partitions": partitions} for name, partitions in topics.items()]}

        return d.addCallback(answer)

    # --- DescribeGroups, ListGroups, DeleteGroups ---------------------------

    def _denied_group(self, group_id: str) -> defer.Deferred:
        return defer.succeed({"error_code": int(ErrorCode.group_authorization_failed), "group_id": group_id,
                              "group_state": "", "protocol_type": "", "protocol_data": "", "members": []})

    def handle_describe_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        d = defer.gatherResults([
            self._denied_group(g) if self._group_denied(context, g, AclOperation.DESCRIBE)
            else self.group_coordinator.describe_group(g) for g in request.groups])
        include = getattr(request, "include_authorized_operations", False)

        def answer(groups: list) -> bytes:
            for g in groups:
                g["authorized_operations"] = OPERATIONS_NOT_REQUESTED
                if include and g["error_code"] != ErrorCode.group_authorization_failed:
                    g["authorized_operations"] = self._authorized_operations(context, ResourceType.GROUP,
                                                                             g["group_id"])
            return self._respond(context, {"throttle_time": 0, "groups": groups})

        return d.addCallback(answer)

    def handle_list_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        states = {s.lower() for s in getattr(request, "states_filter", ())}
        d = self.group_coordinator.list_groups().addCallback(self.with_share_groups)

        def answer(groups: list) -> bytes:
            listed = [{"group_id": g, "protocol_type": t, "group_state": s} for g, t, s in groups
                      if not states or s.lower() in states]
            if self.authorizer is not None and not self._allowed(context, AclOperation.DESCRIBE,
                                                                 ResourceType.CLUSTER):
                listed = [g for g in listed if not self._group_denied(context, g["group_id"], AclOperation.DESCRIBE)]
            return self._respond(context, {"throttle_time": 0, "error_code": 0, "groups": listed})

        def failed(failure: Any) -> bytes:
            failure.trap(ZooKeeperError)
            return self._respond(context, {"throttle_time": 0,
                                          "error_code": int(ErrorCode.coordinator_not_available), "groups": []})

        return d.addCallbacks(answer, failed)

    def handle_delete_groups(self, context: RequestContext, request: Any) -> defer.Deferred:
        names = list(request.groups_names)
        d = defer.gatherResults([
            defer.succeed(ErrorCode.group_authorization_failed) if self._group_denied(context, g, AclOperation.DELETE)
            else self.delete_share_group(g) or self.group_coordinator.delete_group(g) for g in names])
        return d.addCallback(lambda codes: self._respond(context, {"throttle_time": 0, "results": [
            {"group_id": g, "error_code": int(c)} for g, c in zip(names, codes)]}))
