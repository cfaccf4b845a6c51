"""
The handlers behind Kafka's admin tools, mixed into
L{kafkatw.broker.apis.KafkaApis}: DeleteRecords (C{kafka-delete-records.sh},
KIP-107), DescribeLogDirs (C{kafka-log-dirs.sh}, KIP-113),
AlterReplicaLogDirs (C{kafka-reassign-partitions.sh} C{log_dirs}, KIP-113:
L{kafkatw.broker.replica_alter_log_dirs}) and OffsetDelete
(C{kafka-consumer-groups.sh --delete-offsets}, KIP-496).

With an authorizer each checks what Kafka's C{KafkaApis} checks: DeleteRecords
needs Delete on each topic; DescribeLogDirs needs Describe on the cluster;
AlterReplicaLogDirs needs Alter on the cluster; OffsetDelete needs Delete on the group and Read on each topic.

Source: Apache Kafka C{KafkaApis} (C{handleDeleteRecordsRequest},
C{handleDescribeLogDirsRequest}, C{handleAlterReplicaLogDirsRequest}, C{handleOffsetDeleteRequest}),
C{ReplicaManager.deleteRecords}, C{DelayedDeleteRecords},
C{GroupCoordinator.handleDeleteOffsets}; KIP-107, KIP-113, KIP-496.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode, KafkaError, kafka_error
from ..protocol.consumer_protocol import decode_subscription
from ..security.acl import AclOperation, ResourceType
from ..zookeeper.bridge import ZooKeeperError
from ..zookeeper.registry import FencedError
from .group_coordinator import GroupState
from .request_context import RequestContext

__all__ = ["ADMIN_TOOL_VERSIONS", "AdminToolApis"]

_log = Logger()
_E = ErrorCode

#: API key -> (min, max) version served.
ADMIN_TOOL_VERSIONS: dict[int, tuple[int, int]] = {
    21: (0, 2),  # DeleteRecords (KIP-107; v2 flexible)
    34: (1, 2),  # AlterReplicaLogDirs (KIP-113; v2 flexible)
    35: (1, 4),  # DescribeLogDirs (KIP-113; v3 top-level error, v4 total/usable bytes)
    47: (0, 0),  # OffsetDelete (KIP-496)
}

#: Topics whose records DeleteRecords refuses to delete (Kafka's C{Topic.isInternal}).
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
#: The consumer protocol type whose members' subscriptions OffsetDelete checks.
_CONSUMER_PROTOCOL = "consumer"


class AdminToolApis:
    """
    DeleteRecords, DescribeLogDirs and OffsetDelete; a mixin of
    L{kafkatw.broker.apis.KafkaApis}, whose attributes (C{replica_manager},
    C{metadata}, C{group_coordinator}, C{reactor}, C{config}, C{authorizer})
    and helpers (C{_allowed}, C{_denied_topics}, C{_respond}) it uses.
    """

    def admin_tool_handlers(self) -> dict[int, Any]:
        """The API key -> handler entries for L{ADMIN_TOOL_VERSIONS}."""
        return {21: self.handle_delete_records, 34: self.handle_alter_replica_log_dirs,
                35: self.handle_describe_log_dirs, 47: self.handle_offset_delete}

    # --- DeleteRecords -------------------------------------------------------------

    def handle_delete_records(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        Move each partition's log start offset up to the requested offset on
        its leader (C{-1}: the high watermark), then wait, up to the request's
        C{timeout}, until every in-sync follower reports the new log start
        offset in its fetches (Kafka's C{DelayedDeleteRecords}).  Each
        partition's C{low_watermark} is the lowest log start offset of its
        in-sync replicas.

        Errors per partition: C{TOPIC_AUTHORIZATION_FAILED} (no Delete on the
        topic), C{UNKNOWN_TOPIC_OR_PARTITION}, C{NOT_LEADER_OR_FOLLOWER},
        C{INVALID_TOPIC_EXCEPTION} (an internal topic), C{POLICY_VIOLATION}
        (C{cleanup.policy} without C{delete}), C{OFFSET_OUT_OF_RANGE} (above
        the high watermark or below -1), C{REQUEST_TIMED_OUT} (the followers
        did not catch up in time; the leader's log has moved).
        """
        denied = set() if self.authorizer is None else \
            self._denied_topics(context, AclOperation.DELETE, (t.name for t in request.topics))
        timeout_ms = _ms(request.timeout)
        waits: list[defer.Deferred] = []
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                entry = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": 0}
                partitions.append(entry)
                if topic.name in denied:
                    entry["error_code"] = int(_E.topic_authorization_failed)
                    continue
                try:
                    partition, offset = self._delete_records(topic.name, p.partition_index, p.offset)
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                    continue
                entry["low_watermark"] = partition.low_watermark
                if entry["low_watermark"] < offset:
                    waits.append(self._await_low_watermark(partition, offset, timeout_ms, entry))
            topics.append({"name": topic.name, "partitions": partitions})

        def answer(_: Any) -> bytes:
            return self._respond(context, {"throttle_time": 0, "topics": topics})

        return defer.gatherResults(waits, consumeErrors=True).addCallback(answer)

    def _delete_records(self, topic: str, index: int, offset: int) -> tuple[Any, int]:
        if topic in _INTERNAL_TOPICS:
            raise kafka_error(_E.invalid_topic_exception, f"cannot delete records of internal topic {topic}")
        partition = self.replica_manager.leader_partition(topic, index)
        log = partition.log
        if not log.config.delete:
            raise kafka_error(_E.policy_violation,
                              f"records of {topic}-{index} cannot be deleted: cleanup.policy has no delete")
        target = log.high_watermark if offset == -1 else offset
        if target < 0 or target > log.high_watermark:
            raise kafka_error(_E.offset_out_of_range, f"cannot delete records of {topic}-{index} below {offset}: "
                                                       f"the high watermark is {log.high_watermark}")
        if log.maybe_increment_log_start_offset(target, self.now_ms()):
            _log.info("DeleteRecords: {topic}-{partition} starts at {offset}", topic=topic, partition=index,
                      offset=target)
        return partition, max(target, log.log_start_offset)

    def _await_low_watermark(self, partition: Any, offset: int, timeout_ms: int, entry: dict) -> defer.Deferred:
        d = partition.wait_for_low_watermark(offset)
        d.addTimeout(max(timeout_ms, 0) / 1000.0, self.reactor)

        def reached(low: int) -> None:
            entry["low_watermark"] = low

        def failed(failure: Any) -> None:
            if failure.check(defer.TimeoutError, defer.CancelledError):
                entry["error_code"] = int(_E.request_timed_out)
            elif failure.check(KafkaError):
                entry["error_code"] = int(failure.value.error_code)
                entry["low_watermark"] = -1
            else:
                _log.failure("DeleteRecords on {partition}", failure, partition=partition.name)
                entry["error_code"] = int(_E.unknown_server_error)

        return d.addCallbacks(reached, failed)

    # --- DescribeLogDirs -----------------------------------------------------------

    def handle_describe_log_dirs(self, context: RequestContext, request: Any) -> bytes:
        """
        Each log directory of this broker with the partitions it holds (every
        one, or those of C{request.topics}): size in bytes, offset lag
        (C{max(high watermark - log end offset, 0)}, Kafka's
        C{getLogEndOffsetLag} of a current replica) and C{is_future_key}
        false; a replica moving here from another directory
        (AlterReplicaLogDirs) is listed a second time, in its destination,
        with C{is_future_key} true and as lag the offsets it has still to
        copy (current log end offset - its log end offset).  v4 adds the file
        system's total and usable bytes.  An offline log directory (one that
        failed, KIP-112) is listed with C{KAFKA_STORAGE_ERROR}, no partitions
        and unknown sizes (-1), as Kafka's C{ReplicaManager.describeLogDirs}.
        Without Describe on the cluster: C{CLUSTER_AUTHORIZATION_FAILED} and
        no directories.
        """
        if not self._allowed(context, AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return self._respond(context, {"throttle_time": 0,
                                           "error_code": int(_E.cluster_authorization_failed), "results": []})
        log_manager = self.replica_manager.log_manager
        wanted: dict[str, set[int]] | None = None
        if request.topics is not None:
            wanted = {}
            for t in request.topics:
                wanted.setdefault(t.topic, set()).update(t.partitions)
        by_dir: dict[str, dict[str, list]] = {d: {} for d in log_manager.log_dirs}
        for log in sorted(log_manager.all_logs(), key=lambda log: (log.topic, log.partition)):
            if wanted is not None and log.partition not in wanted.get(log.topic, ()):
                continue
            log_dir = log_manager.log_dir_of(log.topic, log.partition)
            if log_dir is None:
                continue
            by_dir.setdefault(log_dir, {}).setdefault(log.topic, []).append({
                "partition_index": log.partition, "partition_size": log.size_bytes,
                "offset_lag": max(log.high_watermark - log.log_end_offset, 0), "is_future_key": False})
        for (topic, index), future in sorted(getattr(log_manager, "future_logs", {}).items()):
            if wanted is not None and index not in wanted.get(topic, ()):
                continue
            current = log_manager.get(topic, index)
            lag = max((current.log_end_offset if current is not None else 0) - future.log_end_offset, 0)
            by_dir.setdefault(log_manager.future_log_dir_of(topic, index), {}).setdefault(topic, []).append({
                "partition_index": index, "partition_size": future.size_bytes, "offset_lag": lag,
                "is_future_key": True})
        results = []
        offline = getattr(log_manager, "offline_log_dirs", {})
        for log_dir, topics in by_dir.items():
            if log_dir in offline:
                results.append({"error_code": int(_E.kafka_storage_error), "log_dir": log_dir, "total_bytes": -1,
                                "usable_bytes": -1, "topics": []})
                continue
            total = usable = -1
            try:
                stat = os.statvfs(log_dir)
                total, usable = stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
            except OSError:
                pass
            results.append({"error_code": 0, "log_dir": log_dir, "total_bytes": total, "usable_bytes": usable,
                            "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()]})
        return self._respond(context, {"throttle_time": 0, "error_code": 0, "results": results})

    # --- AlterReplicaLogDirs -------------------------------------------------------

    def handle_alter_replica_log_dirs(self, context: RequestContext, request: Any) -> bytes:
        """
        Move replicas between this broker's log dirs
        (L{kafkatw.broker.replica_alter_log_dirs.ReplicaAlterLogDirsManager.alter},
        whose module docstring gives the per-partition errors).  Without
        Alter on the cluster every partition gets
        C{CLUSTER_AUTHORIZATION_FAILED} (Kafka's
        C{handleAlterReplicaLogDirsRequest}).
        """
        allowed = self._allowed(context, AclOperation.ALTER, ResourceType.CLUSTER)
        mover = getattr(self.replica_manager, "alter_log_dirs_manager", None)
        results: dict[str, list[dict]] = {}
        for log_dir in request.dirs:
            for topic in log_dir.topics:
                for index in topic.partitions:
                    if not allowed:
                        code = _E.cluster_authorization_failed
                    elif mover is None:
                        code = _E.kafka_storage_error
                    else:
                        code = mover.alter(topic.name, int(index), log_dir.path)
                        if code:
                            _log.warn("AlterReplicaLogDirs of {partition} to {log_dir}: {error}",
                                      partition=f"{topic.name}-{index}", log_dir=log_dir.path, error=code.name)
                    results.setdefault(topic.name, []).append({"partition_index": int(index),
                                                               "error_code": int(code)})
        return self._respond(context, {"throttle_time": 0, "results": [
            {"topic_name": name, "partitions": ps} for name, ps in results.items()]})

    # --- OffsetDelete --------------------------------------------------------------

    def handle_offset_delete(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        Delete a group's committed offsets of the given partitions (Kafka's
        C{GroupCoordinator.handleDeleteOffsets}); the offsets live in
        ZooKeeper (C{/consumers/<group>/offsets/<topic>/<partition>}).

          - an Empty group, or one only known by its committed offsets: every
            requested offset is deleted;
          - a group of the C{consumer} protocol with members: partitions of
            topics a member subscribes to get C{GROUP_SUBSCRIBED_TO_TOPIC},
            the others are deleted;
          - any other group with members: C{NON_EMPTY_GROUP} for the request.

        Top-level errors: C{GROUP_AUTHORIZATION_FAILED} (no Delete on the
        group), C{INVALID_GROUP_ID}, C{NOT_COORDINATOR},
        C{GROUP_ID_NOT_FOUND}, C{COORDINATOR_NOT_AVAILABLE} (ZooKeeper
        failed).  Per partition: C{TOPIC_AUTHORIZATION_FAILED} (no Read on
        the topic), C{UNKNOWN_TOPIC_OR_PARTITION}.
        """
        group_id = request.group_id

        def respond(error: ErrorCode, codes: dict[tuple[str, int], ErrorCode]) -> bytes:
            topics: dict[str, list] = {}
            if not error:
                for t in request.topics:
                    for p in t.partitions:
                        topics.setdefault(t.name, []).append({
                            "partition_index": p.partition_index,
                            "error_code": int(codes.get((t.name, p.partition_index), _E.none))})
            return self._respond(context, {"error_code": int(error), "throttle_time": 0, "topics": [
                {"name": name, "partitions": ps} for name, ps in topics.items()]})

        if not self._allowed(context, AclOperation.DELETE, ResourceType.GROUP, group_id):
            return defer.succeed(respond(_E.group_authorization_failed, {}))
        coordinator = self.group_coordinator
        if not group_id:
            return defer.succeed(respond(_E.invalid_group_id, {}))
        if not coordinator.owns(group_id):
            return defer.succeed(respond(_E.not_coordinator, {}))
        denied = set() if self.authorizer is None else \
            self._denied_topics(context, AclOperation.READ, (t.name for t in request.topics))
        codes: dict[tuple[str, int], ErrorCode] = {}
        candidates: list[tuple[str, int]] = []
        for t in request.topics:
            for p in t.partitions:
                key = (t.name, p.partition_index)
                if t.name in denied:
                    codes[key] = _E.topic_authorization_failed
                elif not self._partition_exists(*key):
                    codes[key] = _E.unknown_topic_or_partition
                else:
                    candidates.append(key)

        async def go() -> bytes:
            registry = coordinator.offsets.registry
            group = coordinator.groups.get(group_id)
            # a KIP-848 consumer group with members: the topics they subscribe to (regexes resolved)
            consumer_group_topics = self.consumer_group_coordinator.subscribed_topics(group_id)
            if consumer_group_topics is None and (group is None or group.is_(GroupState.DEAD)):
                if not await registry.has_committed_offsets(group_id):
                    return respond(_E.group_id_not_found, {})
                group = None
            deletable = candidates
            if consumer_group_topics is not None:
                deletable = [k for k in candidates if k[0] not in consumer_group_topics]
                codes.update((k, _E.group_subscribed_to_topic) for k in candidates if k[0] in consumer_group_topics)
            elif group is not None and group.members:
                if group.protocol_type != _CONSUMER_PROTOCOL:
                    return respond(_E.non_empty_group, {})
                subscribed: set[str] = set()
                for member in group.members.values():
                    topics = decode_subscription(member.metadata(group.protocol_name))
                    if topics is None:  # unreadable subscription: assume every topic (Kafka's forall on None)
                        subscribed = {name for name, _ in candidates}
                        break
                    subscribed.update(topics)
                deletable = [k for k in candidates if k[0] not in subscribed]
                for key in candidates:
                    if key[0] in subscribed:
                        codes[key] = _E.group_subscribed_to_topic
            fence = coordinator.placement.acting(group_id)
            if fence is None:
                return respond(_E.not_coordinator, {})
            coordinator.offsets.flush_now()
            try:
                await registry.delete_committed_offsets(group_id, deletable, fence.path, fence.version)
            except FencedError:  # deposed meanwhile: the new coordinator answers
                return respond(_E.not_coordinator, {})
            if deletable:
                _log.info("deleted the committed offsets of group {group} for {partitions}", group=group_id,
                          partitions=", ".join(f"{t}-{p}" for t, p in deletable))
            return respond(_E.none, codes)

        def failed(failure: Any) -> bytes:
            failure.trap(ZooKeeperError)
            return respond(_E.coordinator_not_available, {})

        return defer.Deferred.fromCoroutine(go()).addErrback(failed)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)
