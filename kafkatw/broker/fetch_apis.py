"""
The fetch-side handlers, mixed into L{kafkatw.broker.apis.KafkaApis}: Fetch
(consumers' and followers', with incremental fetch sessions, KIP-227, and
file regions sent by sendfile), ListOffsets and OffsetForLeaderEpoch
(KIP-101, KIP-279, KIP-320).

Source: Apache Kafka protocol guide (Fetch, ListOffsets, OffsetForLeaderEpoch);
KafkaApis.scala.
"""

from __future__ import annotations

from typing import Any


from ..errors import ErrorCode, KafkaError, kafka_error
from ..protocol.fetch import FETCH_MAX_VERSION, FETCH_MIN_VERSION, PartitionFetchData, encode_fetch_response
from ..security.acl import AclOperation, ResourceType
from .fetch_session import FINAL_EPOCH, INVALID_SESSION_ID
from .request_context import RequestContext

__all__ = ["FETCH_VERSIONS", "FetchApis", "LATEST_TIMESTAMP", "EARLIEST_TIMESTAMP", "MAX_TIMESTAMP",
           "EARLIEST_LOCAL_TIMESTAMP", "READ_COMMITTED"]

#: API key -> (min version, max version) served.
FETCH_VERSIONS: dict[int, tuple[int, int]] = {
    1: (FETCH_MIN_VERSION, FETCH_MAX_VERSION),  # Fetch (v13+ use topic ids)
    2: (1, 8),  # ListOffsets (v7: MAX_TIMESTAMP, KIP-734; v8: EARLIEST_LOCAL, KIP-405)
    23: (2, 4),  # OffsetForLeaderEpoch (KIP-101, KIP-279; followers and KIP-320 clients)
}

LATEST_TIMESTAMP = -1
#: ListOffsets' replica id of a debugging consumer (Kafka's C{ListOffsetsRequest.DEBUGGING_REPLICA_ID}): any
#: replica, not only the leader, answers it with its own log (the controller's unclean recovery asks so, KIP-966)
DEBUGGING_REPLICA_ID = -2
#: Fetch and ListOffsets C{isolation_level} of read-committed consumers (KIP-98).
READ_COMMITTED = 1
EARLIEST_TIMESTAMP = -2
#: ListOffsets v7+: the record with the largest timestamp (KIP-734).
MAX_TIMESTAMP = -3
#: ListOffsets v8+: the earliest offset in local storage (KIP-405; no tiered storage: the log start).
EARLIEST_LOCAL_TIMESTAMP = -4


def _offset_not_available(partition: Any, log: Any) -> KafkaError:
    """
    C{OFFSET_NOT_AVAILABLE} (retriable) for a ListOffsets to a leader whose
    high watermark is below the start offset of its epoch (KIP-207, Kafka's
    C{Partition.fetchOffsetForTimestamp}).
    """
    return kafka_error(ErrorCode.offset_not_available,
                       f"{partition.name}: the high watermark ({log.high_watermark}) is below the start of leader"
                       f" epoch {partition.leader_epoch} ({partition.epoch_start_offset}): the new leader's followers"
                       " have not caught it up yet")


class FetchApis:
    """
    The fetch-side handlers of L{kafkatw.broker.apis.KafkaApis} (a mixin),
    whose replica manager, fetch sessions, quotas, authorizer and counters
    they use.
    """

    def fetch_handlers(self) -> dict[int, Any]:
        """API key -> handler, merged into C{KafkaApis}' table."""
        return {1: self.handle_fetch, 2: self.handle_list_offsets, 23: self.handle_offset_for_leader_epoch}

    def _read_partitions(self, request: Any, denied: set[str] | None = None, quota_max_bytes: int | None = None,
                         fetch_topics: Any = None) -> tuple[list[tuple[str, list[PartitionFetchData]]], int, bool]:
        """
        Read every requested partition once, on its leader.  A consumer reads
        below the high watermark; a follower (C{replica_id} >= 0) reads up to
        the log end offset, and its fetch offset tells the leader what it holds
        (L{kafkatw.broker.partition.Partition.update_follower}).

        @param fetch_topics: the topics to read, shaped as C{request.topics}
            (an incremental fetch reads its session's,
            L{kafkatw.broker.fetch_session.FetchSession.fetch_topics});
            C{None}: C{request.topics}.

        @return: (topics for the response, bytes found, whether any partition
            had an error).
        """
        replica_id = getattr(request, "replica_id", -1)
        read_committed = replica_id < 0 and getattr(request, "isolation_level", 0) == READ_COMMITTED
        remaining = request.max_bytes if getattr(request, "max_bytes", None) is not None else 0x7FFFFFFF
        if quota_max_bytes is not None:  # Kafka's getMaxValueInQuotaWindow bound
            remaining = min(remaining, quota_max_bytes)
        topics = []
        total = 0
        any_error = False
        for topic in request.topics if fetch_topics is None else fetch_topics:
            name = topic.topic
            if denied and name in denied:
                any_error = True
                topics.append((name, [PartitionFetchData(p.partition, int(ErrorCode.topic_authorization_failed), -1,
                                                         -1, -1, (), 0) for p in topic.partitions]))
                continue
            partitions = []
            for p in topic.partitions:
                try:
                    # Kafka's Partition.getLocalLog: the leader epoch (KIP-320) before the role
                    partition = self.replica_manager.get_partition(name, p.partition)
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    log = partition.leader_log()
                    if replica_id >= 0:
                        if log.log_start_offset <= p.fetch_offset <= log.log_end_offset:
                            # what the follower holds; not for a fetch in error (Kafka's updateFollowerFetchState)
                            partition.update_follower(replica_id, p.fetch_offset, getattr(p, "log_start_offset", -1))
                        max_offset = log.log_end_offset
                    else:
                        max_offset = log.high_watermark
                    high_watermark = log.high_watermark
                    last_stable_offset = log.last_stable_offset
                    if read_committed:
                        max_offset = last_stable_offset
                    regions: list[Any] = []
                    size = 0
                    if remaining > 0 or total == 0:
                        # KIP-74: until a partition returned data, its first batch comes whatever the limits
                        # (Kafka's minOneMessage), a zero limit too; 1 byte reads the same for log.read
                        limit = max(min(p.partition_max_bytes, remaining), 0 if total else 1)
                        regions = log.read(p.fetch_offset, limit, max_offset, min_one_batch=total == 0)
                        size = sum(r.length for r in regions)
                        remaining = max(0, remaining - size)
                    elif not log.log_start_offset <= p.fetch_offset <= log.log_end_offset:
                        log.read(p.fetch_offset, 1, max_offset)  # raises OffsetOutOfRange
                    aborted = None
                    if read_committed:
                        aborted = [(t.producer_id, t.first_offset) for t in
                                   log.collect_aborted_transactions(p.fetch_offset, max_offset)] if size else []
                    partitions.append(PartitionFetchData(
                        p.partition, 0, high_watermark, last_stable_offset, log.log_start_offset, regions, size,
                        aborted))
                    total += size
                except KafkaError as e:
                    any_error = True
                    self.failed_fetch_requests += 1
                    partitions.append(PartitionFetchData(p.partition, int(e.error_code), -1, -1, -1, (), 0))
                except OSError as e:  # a read of a failing log dir (EIO): the dir goes offline (KIP-112)
                    any_error = True
                    self.failed_fetch_requests += 1
                    self.replica_manager.log_manager.log_failed(name, p.partition, e)
                    partitions.append(PartitionFetchData(p.partition, int(ErrorCode.kafka_storage_error), -1, -1, -1,
                                                         (), 0))
            topics.append((name, partitions))
        return topics, total, any_error

    def handle_fetch(self, context: RequestContext, request: Any) -> Any:
        """
        With an authorizer, a consumer needs Read on each topic and a
        follower (C{replica_id} >= 0) ClusterAction on the cluster; the
        partitions of the others get C{TOPIC_AUTHORIZATION_FAILED}, as Kafka's
        C{handleFetchRequest} answers.

        A fetch with C{session_id} 0 and C{session_epoch} -1 (every fetch
        before v7, and clients without fetch sessions) is read and answered
        as it is; any other goes through its fetch session (KIP-227,
        L{kafkatw.broker.fetch_session}).
        """
        fetch_context = None
        fetch_topics = request.topics
        if getattr(request, "session_epoch", FINAL_EPOCH) != FINAL_EPOCH \
                or getattr(request, "session_id", INVALID_SESSION_ID) != INVALID_SESSION_ID:
            fetch_context = self.fetch_sessions.new_context(
                request.session_id, request.session_epoch, request.replica_id >= 0, request.topics,
                request.forgotten_topics_data, self.hi_res_clock_ms())
            if fetch_context.error_code:
                self.fetch_session_requests["error"] += 1
                return self._fetch_response(context, [], request, fetch_context)
            self.fetch_session_requests["full" if fetch_context.session is None else "incremental"] += 1
            fetch_topics = fetch_context.topics
        denied = None
        if self.authorizer is not None:
            names = [t.topic for t in fetch_topics]
            if getattr(request, "replica_id", -1) >= 0:
                denied = set() if self._allowed(context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) \
                    else set(names)
            else:
                denied = self._denied_topics(context, AclOperation.READ, names)
        quota_max_bytes = None
        if self.quotas.enabled and not self._quota_exempt(context, request):
            bound = self.quotas.fetch.max_value_in_window(*self._quota_client(context))
            quota_max_bytes = None if bound is None else max(1, int(bound))
        # a follower's incremental fetch does not read its quiet partitions (kafkatw/broker/fetch_session.py)
        quiet = fetch_context is not None and fetch_context.session is not None \
            and fetch_context.session.privileged and not denied and self.skip_quiet_follower_partitions
        topics, total, any_error = self._read_partitions(
            request, denied, quota_max_bytes, self._follower_read_topics(fetch_context, request) if quiet
            else fetch_topics)
        max_wait_ms = int(request.max_wait.total_seconds() * 1000)
        if any_error or total >= request.min_bytes or max_wait_ms <= 0 or 0 < request.max_bytes <= total:
            return self._fetch_response(context, topics, request, fetch_context)
        tps = [(t.topic, p.partition) for t in fetch_topics for p in t.partitions]
        if not tps:
            return self._fetch_response(context, topics, request, fetch_context)
        d = self.replica_manager.delay_fetch(tps, request.min_bytes, total, max_wait_ms,
                                             replica=getattr(request, "replica_id", -1) >= 0,
                                             stable_offsets=self._stable_offsets(request, topics))
        d.addCallback(lambda _: self._fetch_response(
            context, self._read_partitions(
                request, denied, quota_max_bytes, self._follower_read_topics(fetch_context, request) if quiet
                else fetch_topics)[0],
            request, fetch_context))
        return d

    def _follower_read_topics(self, fetch_context: Any, request: Any) -> list:
        """The partitions of a follower's incremental fetch that need a read (its quiet ones do not)."""
        return fetch_context.follower_read_topics(self.replica_manager.partitions, request.replica_id,
                                                  self.hi_res_clock_ms())

    def _fetch_response(self, context: RequestContext, topics: list, request: Any = None,
                        fetch_context: Any = None) -> tuple[list, int]:
        """
        Encode the FetchResponse of the partitions read (C{topics}); a
        session's C{fetch_context} picks what is answered and the session id.
        """
        size = sum(p.records_bytes for _, partitions in topics for p in partitions)
        throttle_ms = 0
        if self.quotas.enabled and not self._quota_exempt(context, request):
            # Kafka's handleFetchRequest: a consumer over its consumer_byte_rate or
            # request_percentage gets an empty response carrying the throttle.
            quotas = self.quotas
            user, client_id = self._quota_client(context)
            now_ms = quotas.now_ms()
            bandwidth_ms = quotas.fetch.record_and_get_throttle_time_ms(user, client_id, size, now_ms)
            throttle_ms = max(bandwidth_ms, self._request_throttle_ms(context))
            if throttle_ms > 0:
                quotas.fetch.unrecord(user, client_id, size, now_ms)
                topics, size = [], 0
                self._throttle(context, throttle_ms)
        error_code = 0
        session_id = INVALID_SESSION_ID
        if fetch_context is not None:
            if throttle_ms > 0:
                # Kafka's getThrottledResponse: nothing answered, the session as it was
                error_code, session_id = fetch_context.throttled()
            else:
                topics, error_code, session_id = fetch_context.finish(topics)
        if size:
            self.bytes_out += size
            topic_bytes_out = self.topic_bytes_out
            for name, partitions in topics:
                sent = sum(p.records_bytes for p in partitions)
                if sent:
                    topic_bytes_out[name] = topic_bytes_out.get(name, 0) + sent
        return encode_fetch_response(context.api_version, context.correlation_id, topics, throttle_ms, error_code,
                                     session_id)

    # --- ListOffsets ---------------------------------------------------------

    def handle_list_offsets(self, context: RequestContext, request: Any) -> bytes:
        topics = []
        denied = None if self.authorizer is None else \
            self._denied_topics(context, AclOperation.DESCRIBE, (t.name for t in request.topics))
        debugging = getattr(request, "replica_id", -1) == DEBUGGING_REPLICA_ID
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                entry = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                         "leader_epoch": -1}
                if denied and topic.name in denied:
                    entry["error_code"] = int(ErrorCode.topic_authorization_failed)
                    partitions.append(entry)
                    continue
                if debugging and p.timestamp == LATEST_TIMESTAMP:
                    # any replica's own log end and latest epoch (Kafka's fetchOnlyFromLeader = false)
                    try:
                        entry["leader_epoch"], entry["offset"] = self.replica_manager.local_log_end(
                            topic.name, p.partition_index)
                    except KafkaError as e:
                        entry["error_code"] = int(e.error_code)
                    partitions.append(entry)
                    continue
                try:
                    # the leader epoch (KIP-320) before the role, as Fetch (Kafka's Partition.getLocalLog)
                    partition = self.replica_manager.get_partition(topic.name, p.partition_index)
                    partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    log = partition.leader_log()
                    ts = p.timestamp
                    # Kafka's Partition.fetchOffsetForTimestamp: a consumer sees the offsets below the
                    # high watermark (the last stable offset for read_committed), a replica the whole log
                    replica_id = getattr(request, "replica_id", -1)
                    if replica_id >= 0:
                        last_fetchable = log.log_end_offset
                    elif getattr(request, "isolation_level", 0) == READ_COMMITTED:
                        last_fetchable = log.last_stable_offset
                    else:
                        last_fetchable = log.high_watermark
                    # KIP-207: a new leader's high watermark may lag what its predecessor had
                    # acknowledged (its followers have not fetched since the election); until it
                    # reaches the start of the leader's epoch, a consumer is told to retry rather
                    # than given an end below offsets it may already have read
                    lagging = replica_id == -1 and partition.epoch_start_offset > log.high_watermark
                    if ts == LATEST_TIMESTAMP:
                        if lagging:
                            raise _offset_not_available(partition, log)
                        entry["offset"] = last_fetchable
                    elif ts == EARLIEST_TIMESTAMP or ts == EARLIEST_LOCAL_TIMESTAMP and context.api_version >= 8:
                        entry["offset"] = log.log_start_offset
                    elif ts == MAX_TIMESTAMP and context.api_version >= 7:
                        found = log.max_timestamp_and_offset(
                            log.last_stable_offset if getattr(request, "isolation_level", 0) == READ_COMMITTED
                            else None)
                        if lagging and (whole := log.max_timestamp_and_offset(log.log_end_offset)) is not None \
                                and whole[0] >= last_fetchable:
                            raise _offset_not_available(partition, log)  # the answer is not fetchable yet
                        if found is not None:
                            entry["offset"], entry["timestamp"] = found
                    elif ts < 0:
                        raise kafka_error(ErrorCode.invalid_request, f"timestamp {ts}")
                    else:
                        found = log.offset_for_timestamp(ts, upper_offset=last_fetchable)
                        if found is None and lagging and log.offset_for_timestamp(ts) is not None:
                            raise _offset_not_available(partition, log)  # the answer is not fetchable yet
                        if found is not None:
                            entry["offset"], entry["timestamp"] = found
                    entry["leader_epoch"] = partition.leader_epoch
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                except OSError as e:  # a read of a failing log dir (EIO): the dir goes offline (KIP-112)
                    self.replica_manager.log_manager.log_failed(topic.name, p.partition_index, e)
                    entry.update(error_code=int(ErrorCode.kafka_storage_error), offset=-1, timestamp=-1)
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return self._respond(context, {"throttle_time": 0, "topics": topics})

    # --- OffsetForLeaderEpoch ---------------------------------------------------

    def handle_offset_for_leader_epoch(self, context: RequestContext, request: Any) -> bytes:
        """
        For each partition, the largest epoch at or below the requested one
        and the offset where it ended (KIP-101, KIP-279): a follower truncates
        to it, a KIP-320 consumer validates its position with it.
        """
        topics = []
        denied: set[str] | None = None
        if self.authorizer is not None:
            names = [t.topic for t in request.topics]
            if getattr(request, "replica_id", -1) != -1:  # a follower (or -2, debug): ClusterAction, as Kafka's
                denied = set() if self._allowed(context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) \
                    else set(names)
            else:
                denied = self._denied_topics(context, AclOperation.DESCRIBE, names)
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                entry = {"partition": p.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
                if denied and topic.topic in denied:
                    code = ErrorCode.topic_authorization_failed if getattr(request, "replica_id", -1) == -1 \
                        else ErrorCode.cluster_authorization_failed
                    entry["error_code"] = int(code)
                    partitions.append(entry)
                    continue
                try:
                    # the leader epoch before the role, as Fetch (Kafka's Partition.getLocalLog)
                    partition = self.replica_manager.get_partition(topic.topic, p.partition)
                    partition.check_leader_epoch(p.current_leader_epoch)
                    entry["leader_epoch"], entry["end_offset"] = \
                        partition.leader_log().end_offset_for_epoch(p.leader_epoch)
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                partitions.append(entry)
            topics.append({"topic": topic.topic, "partitions": partitions})
        return self._respond(context, {"throttle_time": 0, "topics": topics})

    # --- DescribeCluster -------------------------------------------------------

