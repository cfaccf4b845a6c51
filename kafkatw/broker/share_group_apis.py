"""
The share-group request handlers of L{kafkatw.broker.apis.KafkaApis} (KIP-932):
ShareGroupHeartbeat (76) and ShareGroupDescribe (77), served by the group's
coordinator (L{kafkatw.broker.share_group_coordinator}), and ShareFetch (78)
and ShareAcknowledge (79), served by each partition's leader
(L{kafkatw.broker.share_partition_manager}).

Only the KIP-932 versions of Apache Kafka 4.1 are served (v1; ShareFetch and
ShareAcknowledge v2 too, whose I{renew} acknowledgements are refused with
C{INVALID_REQUEST}); the early-access v0 of Kafka 4.0 is not.

With an authorizer, every request needs Read on the group (else
C{GROUP_AUTHORIZATION_FAILED}), ShareGroupDescribe and
DescribeShareGroupOffsets Describe on it; ShareFetch and ShareAcknowledge
need Read on each topic (else the partition's C{TOPIC_AUTHORIZATION_FAILED}).
As Kafka's C{KafkaApis} (KAFKA-18817): a ShareGroupHeartbeat naming a topic
the principal may not Describe is answered C{TOPIC_AUTHORIZATION_FAILED}; a
described group whose members' assignments name one is answered
C{TOPIC_AUTHORIZATION_FAILED} without its members; DescribeShareGroupOffsets
answers a named topic the principal may not Describe
C{TOPIC_AUTHORIZATION_FAILED} per partition and leaves such topics out when
it lists all of the group's; AlterShareGroupOffsets needs Read on each topic
(else its partitions' C{TOPIC_AUTHORIZATION_FAILED}) and is
C{GROUP_ID_NOT_FOUND} for the id of a classic or consumer group.

Source: KIP-932; Apache Kafka C{KafkaApis.handleShareFetchRequest},
C{handleShareAcknowledgeRequest}, C{handleShareGroupHeartbeatRequest}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from ..errors import ErrorCode, KafkaError
from ..protocol.share_fetch import SharePartitionData, encode_share_fetch_response
from ..security.acl import AclOperation, ResourceType
from .request_context import RequestContext
from .share_group_coordinator import SHARE_PROTOCOL_TYPE, ShareGroupCoordinator
from .share_partition_manager import ShareFetchResult, SharePartitionManager
from .share_state import SharePartitionKey

__all__ = ["SHARE_GROUP_VERSIONS", "ShareGroupApis"]

SHARE_GROUP_VERSIONS: dict[int, tuple[int, int]] = {
    76: (1, 1),  # ShareGroupHeartbeat (KIP-932)
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 2),  # ShareFetch
    79: (1, 2),  # ShareAcknowledge
    90: (0, 1),  # DescribeShareGroupOffsets (kafkatw share-groups --describe --offsets)
    91: (0, 0),  # AlterShareGroupOffsets (--reset-offsets)
    84: (0, 0),  # ReadShareGroupState (a share partition's leader to its share coordinator)
    85: (0, 1),  # WriteShareGroupState
}

#: The RENEW acknowledge type of v2 (KIP-1222): not served.
_RENEW = 4


class ShareGroupApis:
    """Mixed into L{kafkatw.broker.apis.KafkaApis}: share groups."""

    share_group_coordinator: ShareGroupCoordinator
    share_partition_manager: SharePartitionManager
    #: The L{kafkatw.broker.share_coordinator.ShareCoordinator} (C{None}: state in memory only).
    share_coordinator: Any = None

    def init_share_groups(self) -> None:
        """Make the share group coordinator and share partition manager (called by C{KafkaApis.__init__})."""
        config = self.config  # type: ignore[attr-defined]
        self.share_group_coordinator = ShareGroupCoordinator(
            self.reactor, self.group_coordinator.owns, lambda: self.metadata.topics,  # type: ignore[attr-defined]
            config["group.share.session.timeout.ms"], config["group.share.heartbeat.interval.ms"],
            config["group.share.max.size"],
            # one namespace of group ids: a classic or consumer group's id is not a share group's
            classic_group_exists=lambda g: self.group_type(g) in ("classic", "consumer"),  # type: ignore
            group_config=self.share_group_config)
        self.share_partition_manager = SharePartitionManager(
            self.reactor, self.replica_manager, self.metadata, config,  # type: ignore[attr-defined]
            group_config=self.share_group_config)
        # share groups that moved to another coordinator are unloaded, as classic and consumer groups
        self.group_coordinator.placement_listeners.append(  # type: ignore[attr-defined]
            self.share_group_coordinator.unload_moved)
        # A member leaving the group does not release its records here: its share sessions do when
        # they close (a client sends its last acknowledgements and its leave heartbeat at once, on
        # two connections), else their acquisition locks expire, as in Kafka.

    def share_group_config(self, group_id: str) -> dict[str, str]:
        """
        The group's config overrides (IncrementalAlterConfigs on resource type
        GROUP, kafkatw/broker/group_config.py): C{share.auto.offset.reset},
        C{share.record.lock.duration.ms}, … ; C{{}} without any.
        """
        configs = getattr(self, "group_configs", None)
        return configs.group_config(group_id) if configs is not None else {}

    def share_group_handlers(self) -> dict[int, Any]:
        return {76: self.handle_share_group_heartbeat, 77: self.handle_share_group_describe,
                78: self.handle_share_fetch, 79: self.handle_share_acknowledge,
                84: self.handle_read_share_group_state, 85: self.handle_write_share_group_state,
                90: self.handle_describe_share_group_offsets, 91: self.handle_alter_share_group_offsets}

    def start_share_coordinator(self, admin: Any, now_ms: Any, send: Any) -> None:
        """
        Serve ``__share_group_state`` partitions led here and keep share
        state there (kafkatw/broker/share_coordinator.py); C{send} is the
        inter-broker client's C{(broker id, API key, body) -> Deferred}.
        """
        from .share_coordinator import ReplicatedPersister, ShareCoordinator

        coordinator = ShareCoordinator(self.config, self.replica_manager, self.metadata,  # type: ignore
                                       admin, now_ms)
        coordinator.start()
        self.use_share_coordinator(coordinator, ReplicatedPersister(
            self.broker_id, coordinator, self.metadata, send, self.reactor))  # type: ignore[attr-defined]

    def stop_share_groups(self) -> None:
        """Stop the share coordinator, the share partitions' lock timers and the members' session timers."""
        if self.share_coordinator is not None:
            self.share_coordinator.stop()
        self.share_partition_manager.close()
        self.share_group_coordinator.close()

    def use_share_coordinator(self, coordinator: Any, persister: Any) -> None:
        """
        Keep share-partition state in ``__share_group_state`` (the server
        calls this; without it the state is in memory,
        L{kafkatw.broker.share_state.MemoryPersister}).
        """
        self.share_coordinator = coordinator
        self.share_partition_manager.persister = persister

    def delete_share_group(self, group_id: str) -> defer.Deferred | None:
        """DeleteGroups of a share group (C{NON_EMPTY_GROUP} while it has members); C{None}: not a share group."""
        group = self.share_group_coordinator.groups.get(group_id)
        if group is None:
            return None
        code = self.share_group_coordinator.delete(group_id)
        if code != ErrorCode.none:
            return defer.succeed(code)
        # its share-partition state goes too: on the topics its members subscribed to since it was loaded here
        topics = [self.metadata.topics[n] for n in sorted(group.known_topics)  # type: ignore[attr-defined]
                  if n in self.metadata.topics]  # type: ignore[attr-defined]
        d = self.share_partition_manager.delete_state(group_id, [(m.topic_id, i) for m in topics for i in m.partitions])
        return d.addCallbacks(lambda _: ErrorCode.none, lambda f: f.value.error_code if f.check(KafkaError)
                              else ErrorCode.unknown_server_error)

    def with_share_groups(self, groups: list) -> list:
        """ListGroups: the classic groups' (id, protocol type, state) and this broker's share groups."""
        return list(groups) + [(g, SHARE_PROTOCOL_TYPE, s) for g, s in self.share_group_coordinator.list_groups()]

    # --- coordinator side ------------------------------------------------------------

    def handle_share_group_heartbeat(self, context: RequestContext, request: Any) -> bytes:
        refused = None
        if self._group_denied(context, request.group_id):  # type: ignore[attr-defined]
            refused = ErrorCode.group_authorization_failed
        elif request.subscribed_topic_names and self.undescribable_topics(  # type: ignore[attr-defined]
                context, request.subscribed_topic_names):
            refused = ErrorCode.topic_authorization_failed  # KAFKA-18817: names it may not Describe
        if refused is not None:
            body = {"throttle_time": 0, "error_code": int(refused),
                    "error_message": None, "member_id": None, "member_epoch": 0, "heartbeat_interval": 0,
                    "assignment": None}
        else:
            body = self.share_group_coordinator.heartbeat(
                request.group_id, request.member_id, request.member_epoch, request.rack_id,
                request.subscribed_topic_names, context.client_id or "",
                self._client_host(context))  # type: ignore[attr-defined]
        return self._respond(context, body)  # type: ignore[attr-defined]

    def handle_share_group_describe(self, context: RequestContext, request: Any) -> bytes:
        groups = []
        blank = {"error_message": None, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                 "assignor_name": "", "members": [], "authorized_operations": -2147483648}
        for group_id in request.group_ids:
            if self._group_denied(context, group_id, AclOperation.DESCRIBE):  # type: ignore[attr-defined]
                groups.append({**blank, "group_id": group_id,
                               "error_code": int(ErrorCode.group_authorization_failed)})
                continue
            entry = self.share_group_coordinator.describe(group_id)
            if request.include_authorized_operations and not entry["error_code"]:
                entry["authorized_operations"] = self._authorized_operations(  # type: ignore[attr-defined]
                    context, ResourceType.GROUP, group_id)
            groups.append(entry)
        self.hide_undescribable_groups(context, groups, ("assignment",), blank)  # type: ignore[attr-defined]
        return self._respond(context, {"throttle_time": 0, "groups": groups})  # type: ignore[attr-defined]

    # --- partition leader side ----------------------------------------------------------

    def _share_topics(self, context: RequestContext, topics: Any) -> tuple[list, dict]:
        """(topic id, [(partition, batches)]) of a request, and the denied partitions' answers."""
        wanted, denied = [], {}
        for topic in topics:
            name = self.share_partition_manager.topic_name(topic.topic_id)
            if name is not None and self.authorizer is not None and \
                    not self._allowed(context, AclOperation.READ, ResourceType.TOPIC, name):  # type: ignore
                denied[topic.topic_id] = [p.partition_index for p in topic.partitions]
                continue
            wanted.append((topic.topic_id, [(p.partition_index, [
                (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches])
                for p in topic.partitions]))
        return wanted, denied

    @staticmethod
    def _renewing(request: Any) -> bool:
        return bool(getattr(request, "is_renew_ack", False)) or any(
            _RENEW in b.acknowledge_types for t in request.topics for p in t.partitions
            for b in p.acknowledgement_batches)

    def handle_share_fetch(self, context: RequestContext, request: Any) -> Any:
        # AcquisitionLockTimeoutMs: the group's share.record.lock.duration.ms (else the broker's)
        lock_ms = self.share_partition_manager.share_configs(request.group_id or "")["record_lock_duration_ms"]
        if self._group_denied(context, request.group_id or ""):  # type: ignore[attr-defined]
            return encode_share_fetch_response(context.correlation_id, [], lock_ms,
                                               int(ErrorCode.group_authorization_failed))
        if self._renewing(request):
            return encode_share_fetch_response(context.correlation_id, [], lock_ms, int(ErrorCode.invalid_request),
                                               "Renew acknowledgements are not supported.")
        wanted, denied = self._share_topics(context, request.topics)
        forgotten = [(t.topic_id, list(t.partitions)) for t in request.forgotten_topics_data]
        d = defer.Deferred.fromCoroutine(self.share_partition_manager.share_fetch(
            request.group_id or "", request.member_id or "", request.share_session_epoch,
            int(request.max_wait.total_seconds() * 1000), request.max_bytes, request.max_records, wanted, forgotten))

        def answer(result: ShareFetchResult) -> tuple[list, int]:
            topics = result.topics + [(topic_id, [SharePartitionData(
                i, int(ErrorCode.topic_authorization_failed), None, 0, None, -1, -1, (), ()) for i in indexes])
                for topic_id, indexes in denied.items()]
            return encode_share_fetch_response(context.correlation_id, topics, lock_ms, result.error_code,
                                               result.error_message, self._share_endpoints(context, topics),
                                               self._share_fetch_throttle_ms(context, topics))

        return d.addCallback(answer)

    def _share_fetch_throttle_ms(self, context: RequestContext, topics: list) -> int:
        """
        Client quotas (KIP-219, kafkatw/broker/quota_manager.py): the bytes
        of a ShareFetch response count against the member's
        C{consumer_byte_rate}, as a Fetch's do, and its handler time against
        C{request_percentage}; the larger throttle (ms) is answered in
        C{ThrottleTimeMs} and mutes the connection for that long.  Unlike a
        throttled Fetch, the records are still sent: they are acquired for the
        member, and dropping them would leave them locked until their lock
        expires and count a delivery.
        """
        quotas = self.quotas  # type: ignore[attr-defined]
        if not quotas.enabled:
            return 0
        size = sum(p.records_bytes for _, partitions in topics for p in partitions)
        user, client_id = self._quota_client(context)  # type: ignore[attr-defined]
        bandwidth_ms = quotas.fetch.record_and_get_throttle_time_ms(user, client_id, size, quotas.now_ms())
        throttle_ms = max(bandwidth_ms, self._request_throttle_ms(context))  # type: ignore[attr-defined]
        self._throttle(context, throttle_ms)  # type: ignore[attr-defined]
        return throttle_ms

    def _share_endpoints(self, context: RequestContext, topics: list) -> list:
        """The C{node_endpoints}: the leaders of the partitions answered C{NOT_LEADER_OR_FOLLOWER}."""
        leaders = {p.leader_id for _, ps in topics for p in ps
                   if p.error_code == ErrorCode.not_leader_or_follower and p.leader_id >= 0}
        endpoints = []
        for broker_id in sorted(leaders):
            broker = self.metadata.brokers.get(broker_id)  # type: ignore[attr-defined]
            address = broker.address(context.connection.listener_name) if broker is not None else None
            if address is not None:
                endpoints.append((broker_id, address[0], address[1], broker.rack))
        return endpoints

    def handle_share_acknowledge(self, context: RequestContext, request: Any) -> Any:
        lock_ms = self.share_partition_manager.share_configs(request.group_id or "")["record_lock_duration_ms"]

        def body(code: int, message: str | None = None, topics: Any = ()) -> dict:
            return {"throttle_time": 0, "error_code": code, "error_message": message,
                    "acquisition_lock_timeout": lock_ms, "responses": list(topics), "node_endpoints": []}

        if self._group_denied(context, request.group_id or ""):  # type: ignore[attr-defined]
            return self._respond(context, body(int(ErrorCode.group_authorization_failed)))  # type: ignore
        if self._renewing(request):
            return self._respond(context, body(int(ErrorCode.invalid_request),  # type: ignore[attr-defined]
                                               "Renew acknowledgements are not supported."))
        wanted, denied = self._share_topics(context, request.topics)
        d = defer.Deferred.fromCoroutine(self.share_partition_manager.share_acknowledge(
            request.group_id or "", request.member_id or "", request.share_session_epoch, wanted))

        def answer(result: ShareFetchResult) -> bytes:
            responses = [{"topic_id": topic_id, "partitions": [{
                "partition_index": p.partition_index, "error_code": p.acknowledge_error_code or p.error_code,
                "error_message": p.acknowledge_error_message or p.error_message,
                "current_leader": {"leader_id": p.leader_id, "leader_epoch": p.leader_epoch}} for p in ps]}
                for topic_id, ps in result.topics]
            responses += [{"topic_id": topic_id, "partitions": [{
                "partition_index": i, "error_code": int(ErrorCode.topic_authorization_failed), "error_message": None,
                "current_leader": {"leader_id": -1, "leader_epoch": -1}} for i in indexes]}
                for topic_id, indexes in denied.items()]
            return self._respond(context, body(result.error_code, result.error_message,  # type: ignore
                                               responses))

        return d.addCallback(answer)

    # --- share coordinator side (broker to broker) ----------------------------------------

    def _share_state_denied(self, context: RequestContext) -> bool:
        return self.authorizer is not None and not self._allowed(  # type: ignore[attr-defined]
            context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)

    def handle_read_share_group_state(self, context: RequestContext, request: Any) -> bytes:
        coordinator = self.share_coordinator
        if coordinator is None or self._share_state_denied(context):
            code = int(ErrorCode.cluster_authorization_failed if coordinator is not None
                       else ErrorCode.not_coordinator)
            body = {"results": [{"topic_id": t.topic_id, "partitions": [
                {"partition": p.partition, "error_code": code, "error_message": None, "state_epoch": 0,
                 "start_offset": -1, "state_batches": []} for p in t.partitions]} for t in request.topics]}
        else:
            body = coordinator.handle_read(request.group_id, request.topics)
        return self._respond(context, body)  # type: ignore[attr-defined]

    def handle_write_share_group_state(self, context: RequestContext, request: Any) -> Any:
        coordinator = self.share_coordinator
        if coordinator is None or self._share_state_denied(context):
            code = int(ErrorCode.cluster_authorization_failed if coordinator is not None
                       else ErrorCode.not_coordinator)
            return self._respond(context, {"results": [{"topic_id": t.topic_id, "partitions": [  # type: ignore
                {"partition": p.partition, "error_code": code, "error_message": None} for p in t.partitions]}
                for t in request.topics]})
        d = defer.Deferred.fromCoroutine(coordinator.handle_write(request.group_id, request.topics))
        return d.addCallback(lambda body: self._respond(context, body))  # type: ignore[attr-defined]

    # --- share group offsets (the group coordinator's side) ---------------------------------

    def _topic_ids(self) -> dict[str, Any]:
        return {name: meta.topic_id for name, meta in self.metadata.topics.items()}  # type: ignore[attr-defined]

    def handle_describe_share_group_offsets(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        Each share partition's start offset, read from the persister
        (C{-1}: never read by the group); C{topics} null: the topics the
        group's members subscribed to since this coordinator loaded it.
        """
        async def describe() -> dict:
            groups = []
            ids = self._topic_ids()
            for group in request.groups:
                entry: dict[str, Any] = {"group_id": group.group_id, "error_code": 0, "error_message": None,
                                         "topics": []}
                groups.append(entry)
                if self._group_denied(context, group.group_id, AclOperation.DESCRIBE):  # type: ignore
                    entry["error_code"] = int(ErrorCode.group_authorization_failed)
                    continue
                if not self.group_coordinator.owns(group.group_id):  # type: ignore[attr-defined]
                    entry["error_code"] = int(ErrorCode.not_coordinator)
                    continue
                if group.topics is None:
                    known = self.share_group_coordinator.groups.get(group.group_id)
                    names = sorted(known.known_topics) if known is not None else []
                    wanted = [(n, sorted(self.metadata.topics[n].partitions))  # type: ignore[attr-defined]
                              for n in names if n in ids]
                else:
                    wanted = [(t.topic_name, list(t.partitions)) for t in group.topics]
                # topics the principal may not Describe: left out of all, TOPIC_AUTHORIZATION_FAILED if named
                denied = set() if self.authorizer is None else self._denied_topics(  # type: ignore[attr-defined]
                    context, AclOperation.DESCRIBE, [name for name, _ in wanted])
                if group.topics is None:
                    wanted = [(name, partitions) for name, partitions in wanted if name not in denied]
                for name, partitions in wanted:
                    topic_id = None if name in denied else ids.get(name)
                    parts = []
                    for index in partitions:
                        part: dict[str, Any] = {"partition_index": index, "start_offset": -1, "leader_epoch": -1,
                                                "lag": -1, "error_code": 0, "error_message": None}
                        if name in denied:
                            part["error_code"] = int(ErrorCode.topic_authorization_failed)
                        elif topic_id is None:
                            part["error_code"] = int(ErrorCode.unknown_topic_or_partition)
                        else:
                            try:
                                snapshot = await self.share_partition_manager.persister.read(
                                    SharePartitionKey(group.group_id, str(topic_id), index))
                            except KafkaError as e:
                                part["error_code"] = int(e.error_code)
                            else:
                                if snapshot is not None:
                                    part["start_offset"] = snapshot.start_offset
                        parts.append(part)
                    entry["topics"].append({"topic_name": name, "topic_id": topic_id, "partitions": parts})
            return {"throttle_time": 0, "groups": groups}

        d = defer.Deferred.fromCoroutine(describe())
        return d.addCallback(lambda body: self._respond(context, body))  # type: ignore[attr-defined]

    def handle_alter_share_group_offsets(self, context: RequestContext, request: Any) -> Any:
        """
        Set share partitions' start offsets (C{--reset-offsets}): only for a
        group without members (else C{NON_EMPTY_GROUP}); each written to the
        persister with the next state epoch, forgetting the in-flight records.
        """
        def answer(code: ErrorCode, message: str | None = None, topics: Any = ()) -> bytes:
            return self._respond(context, {"throttle_time": 0, "error_code": int(code),  # type: ignore
                                          "error_message": message, "responses": list(topics)})

        group_id = request.group_id
        if self._group_denied(context, group_id):  # type: ignore[attr-defined]
            return answer(ErrorCode.group_authorization_failed)
        if not self.group_coordinator.owns(group_id):  # type: ignore[attr-defined]
            return answer(ErrorCode.not_coordinator)
        if self.group_type(group_id) in ("classic", "consumer"):  # type: ignore[attr-defined]
            # Kafka's getOrMaybeCreateShareGroup: one namespace of group ids
            return answer(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        known = self.share_group_coordinator.groups.get(group_id)
        if known is not None and known.members:
            return answer(ErrorCode.non_empty_group, "The group has active members.")
        # Read on each topic (Kafka's handleAlterShareGroupOffsetsRequest), else its partitions are refused
        denied = set() if self.authorizer is None else self._denied_topics(  # type: ignore[attr-defined]
            context, AclOperation.READ, [t.topic_name for t in request.topics])

        async def alter() -> bytes:
            ids = self._topic_ids()
            topics = []
            for t in request.topics:
                topic_id = ids.get(t.topic_name)
                parts = []
                for p in t.partitions:
                    code, message = ErrorCode.none, None
                    if t.topic_name in denied:
                        code = ErrorCode.topic_authorization_failed
                    elif topic_id is None:
                        code = ErrorCode.unknown_topic_or_partition
                    else:
                        try:
                            await self.share_partition_manager.reset_offsets(group_id, topic_id, p.partition_index,
                                                                             p.start_offset)
                        except KafkaError as e:
                            code, message = e.error_code, str(e) or None
                    parts.append({"partition_index": p.partition_index, "error_code": int(code),
                                  "error_message": message})
                topics.append({"topic_name": t.topic_name, "topic_id": topic_id, "partitions": parts})
            if known is None:
                self.share_group_coordinator.ensure_group(group_id)
            return answer(ErrorCode.none, None, topics)

        return defer.Deferred.fromCoroutine(alter())
