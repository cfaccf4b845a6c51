"""
C{kafkatw console-consumer --group G} without C{--zookeeper}: a member of a
consumer group coordinated by the broker (Kafka's classic group protocol, as
Kafka's console consumer joins one), for the command line.

L{CoordinatorGroupConsumer} is deliberately small and blocking:

  - the group protocol runs through a L{kafkatw.client.blocking.BlockingAdminClient}
    to the group's coordinator (FindCoordinator, JoinGroup v5 with KIP-394's
    C{MEMBER_ID_REQUIRED} round, SyncGroup v3, Heartbeat v3, OffsetFetch v5,
    OffsetCommit v7, LeaveGroup v3);
  - the records come from a L{kafkatw.client.blocking.BlockingConsumer}
    assigned the partitions the group gave this member;
  - it offers one assignor, C{range} (Kafka's C{RangeAssignor}: per topic, the
    members subscribed to it sorted by member id, member I{j} of I{C} takes
    C{P // C + (j < P % C)} partitions from C{j * (P // C) + min(j, P % C)}),
    which every Kafka client offers too, so it can share a group with them;
  - it heartbeats and auto-commits between polls (L{poll} never waits past the
    next heartbeat), commits the positions of its partitions before it
    rejoins, and commits and leaves the group when closed: at least once.

The consumer protocol's bytes (Kafka's C{ConsumerProtocolSubscription} and
C{ConsumerProtocolAssignment}) are L{kafkatw.protocol.consumer_protocol}'s.

Source: the Kafka protocol guide; KIP-394 (member id required); Kafka's
C{ConsumerCoordinator} and C{RangeAssignor}.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from kafkatw.client.zookeeper_group import range_assignment
from kafkatw.errors import ErrorCode, KafkaError, kafka_error
from kafkatw.protocol.consumer_protocol import decode_assignment, decode_subscription, encode_assignment, \
    encode_subscription

__all__ = ["CoordinatorGroupConsumer", "range_assign"]

TopicPartition = tuple[str, int]

_JOIN_GROUP_V = 5
_SYNC_GROUP_V = 3
_HEARTBEAT_V = 3
_LEAVE_GROUP_V = 3
_OFFSET_FETCH_V = 5
_OFFSET_FETCH_STABLE_V = 7  # require_stable (KIP-447)
_OFFSET_COMMIT_V = 7

#: Errors after which the coordinator is looked up again.
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                ErrorCode.coordinator_load_in_progress})
#: Errors that mean: join again.
_REJOIN = frozenset({ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id})


def range_assign(subscriptions: dict[str, list[str]], partition_counts: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """
    Kafka's range assignment (see the module docstring): the paper groups'
    L{kafkatw.client.zookeeper_group.range_assignment}, keyed by member.

    @param subscriptions: member id -> subscribed topics.
    @param partition_counts: topic -> partition count (topics missing here get no partitions).
    @return: member id -> its sorted C{(topic, partition)}s (every member present).
    """
    consumers: dict[str, list[str]] = {}
    for member, topics in subscriptions.items():
        for topic in topics:
            consumers.setdefault(topic, []).append(member)
    owned = range_assignment({t: list(range(partition_counts.get(t, 0))) for t in consumers}, consumers)
    return {member: sorted(owned.get(member, ())) for member in subscriptions}


class CoordinatorGroupConsumer:
    """
    A blocking member of a broker-coordinated consumer group (see the module
    docstring).

    @param bootstrap_servers: C{"host:port,..."}.
    @param group_id: the group to join.
    @param topics: the topics to subscribe to.
    @param auto_offset_reset: C{"earliest"} or C{"latest"}: where a partition
        without a committed offset starts.
    @param session_timeout_ms: the session timeout asked of the coordinator (ms).
    @param heartbeat_interval_ms: time between heartbeats (ms).
    @param rebalance_timeout_ms: how long the coordinator waits for members
        to rejoin during a rebalance (ms).
    @param auto_commit_interval_ms: commit the positions this often (ms).
    @param enable_auto_commit: False: never commit the positions (not between
        polls, before a rejoin nor on close): for an application that commits
        its offsets itself, e.g. with
        L{kafkatw.client.producer.Producer.send_offsets_to_transaction} and
        L{group_metadata}.
    @param retry_backoff_ms: wait before retrying a failed group request (ms).
    @param consumer_options: passed to L{BlockingConsumer}.
    @raise KafkaError: a group request failed for a reason that retrying does
        not mend (for example C{GROUP_AUTHORIZATION_FAILED},
        C{INCONSISTENT_GROUP_PROTOCOL}).
    @raise BrokerConnectionError: no broker can be reached (a L{KafkaError}).
    """

    def __init__(self, bootstrap_servers: str, group_id: str, topics: Iterable[str], *,
                 auto_offset_reset: str = "latest", client_id: str = "kafkatw-console-consumer",
                 session_timeout_ms: int = 10000, heartbeat_interval_ms: int = 3000,
                 rebalance_timeout_ms: int = 60000, auto_commit_interval_ms: int = 5000,
                 enable_auto_commit: bool = True,
                 retry_backoff_ms: int = 200, request_timeout_ms: int = 30000,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], Any] = time.sleep,
                 **consumer_options: Any) -> None:
        from kafkatw.client.blocking import BlockingConsumer

        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError(f"auto_offset_reset must be earliest or latest, not {auto_offset_reset!r}")
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.auto_offset_reset = auto_offset_reset
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.enable_auto_commit = enable_auto_commit
        self._read_committed = consumer_options.get("isolation_level") == "read_committed"
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self._clock = clock
        self._sleep = sleep
        self.member_id = ""
        self.generation_id = -1
        self.assignment: list[TopicPartition] = []
        from kafkatw.client.blocking import BlockingAdminClient

        self._admin = BlockingAdminClient(bootstrap_servers, client_id=client_id,
                                          security=consumer_options.get("security"),
                                          request_timeout_ms=request_timeout_ms,
                                          default_api_timeout_ms=request_timeout_ms)
        try:
            self._consumer = BlockingConsumer(bootstrap_servers, client_id=client_id,
                                              auto_offset_reset=auto_offset_reset, **consumer_options)
        except BaseException:
            self._admin.close()
            raise
        self._next_heartbeat = 0.0
        self._next_commit = 0.0
        self._closed = False

    # --- requests to the coordinator ------------------------------------------------------

    def _send(self, api_key: int, version: int, body: dict, timeout_ms: int | None = None) -> Any:
        """
        One request to the coordinator (looked up first when unknown); a lost
        connection fails with a retriable L{KafkaError} and forgets the coordinator.
        """
        return self._admin.coordinator_request(self.group_id, api_key, body, version=version, timeout_ms=timeout_ms,
                                               retry=False)

    def _forget_coordinator(self) -> None:
        self._admin.forget_coordinator(self.group_id)

    def _code(self, response: Any) -> ErrorCode:
        code = ErrorCode(int(response.error_code))
        if code in _COORDINATOR_MOVED:
            self._forget_coordinator()
        return code

    # --- membership -----------------------------------------------------------------------

    def join(self) -> list[TopicPartition]:
        """
        Join (or rejoin) the group and start consuming the partitions it
        assigns; blocks until the group is stable.

        @return: this member's partitions.
        """
        deadline = self._clock() + (self.rebalance_timeout_ms + self.request_timeout_ms) / 1000.0
        while True:
            if self._clock() > deadline:
                raise kafka_error(ErrorCode.rebalance_in_progress,
                                  f"group {self.group_id!r} did not become stable in time")
            try:
                assignment = self._join_once()
            except (KafkaError, OSError) as e:
                if isinstance(e, KafkaError) and not e.retriable:
                    raise
                self._sleep(self.retry_backoff_ms / 1000.0)
                continue
            if assignment is not None:
                break
        self._start(assignment)
        return assignment

    def _join_once(self) -> list[TopicPartition] | None:
        """One JoinGroup + SyncGroup round; C{None}: try again."""
        body = {"group_id": self.group_id, "session_timeout": self.session_timeout_ms,
                "rebalance_timeout": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": encode_subscription(self.topics)}]}
        # the coordinator answers a join when the rebalance completes: up to the rebalance timeout
        response = self._send(11, _JOIN_GROUP_V, body, timeout_ms=self.rebalance_timeout_ms + self.request_timeout_ms)
        code = self._code(response)
        if code == ErrorCode.member_id_required:  # KIP-394: join again with the id the coordinator gave
            self.member_id = response.member_id
            return None
        if code == ErrorCode.unknown_member_id:
            self.member_id = ""
            return None
        if code in _COORDINATOR_MOVED or code == ErrorCode.rebalance_in_progress:
            self._sleep(self.retry_backoff_ms / 1000.0)
            return None
        if code != ErrorCode.none:
            raise kafka_error(code, f"joining group {self.group_id!r}: {code.name}")
        self.member_id = response.member_id
        self.generation_id = int(response.generation_id)
        assignments = []
        if response.leader == self.member_id:
            subscriptions = {m.member_id: decode_subscription(bytes(m.metadata)) or []
                             for m in response.members}
            wanted = sorted({t for ts in subscriptions.values() for t in ts})
            counts = {}
            for topic in wanted:
                try:
                    counts[topic] = len(self._admin.describe_topics([topic])[topic].partitions)
                except KafkaError:
                    counts[topic] = 0
            assignments = [{"member_id": m, "assignment": encode_assignment(tps)}
                           for m, tps in range_assign(subscriptions, counts).items()]
        synced = self._send(14, _SYNC_GROUP_V, {"group_id": self.group_id, "generation_id": self.generation_id,
                                                "member_id": self.member_id, "group_instance_id": None,
                                                "assignments": assignments})
        code = self._code(synced)
        if code == ErrorCode.unknown_member_id:
            self.member_id = ""
        if code in _REJOIN or code in _COORDINATOR_MOVED:
            return None
        if code != ErrorCode.none:
            raise kafka_error(code, f"syncing group {self.group_id!r}: {code.name}")
        return sorted(tp for tp in decode_assignment(bytes(synced.assignment or b"")) or []
                      if tp[0] in self.topics)

    def _start(self, assignment: list[TopicPartition]) -> None:
        """Consume C{assignment} from the group's committed offsets (else C{auto_offset_reset})."""
        self.assignment = assignment
        self._consumer.assign(assignment)
        committed = self.committed(assignment) if assignment else {}
        reset = [tp for tp in assignment if committed.get(tp, -1) < 0]
        for tp in assignment:
            if committed.get(tp, -1) >= 0:
                self._consumer.seek(tp, committed[tp])
        if reset:
            if self.auto_offset_reset == "earliest":
                self._consumer.seek_to_beginning(*reset)
            else:
                self._consumer.seek_to_end(*reset)
        now = self._clock()
        self._next_heartbeat = now + self.heartbeat_interval_ms / 1000.0
        self._next_commit = now + self.auto_commit_interval_ms / 1000.0

    def group_metadata(self) -> Any:
        """
        This member's group id, generation id and member id, for
        L{kafkatw.client.producer.Producer.send_offsets_to_transaction}
        (Java's C{ConsumerGroupMetadata}, KIP-447).

        @rtype: L{kafkatw.client.transaction_manager.GroupMetadata}
        """
        from kafkatw.client.transaction_manager import GroupMetadata

        return GroupMetadata(self.group_id, self.generation_id, self.member_id, None)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """
        The group's committed offsets of C{partitions} (-1: none).  A
        read_committed member asks for stable offsets (OffsetFetch v7
        C{require_stable}, KIP-447) and waits, retrying for up to
        C{request_timeout_ms}, while a transaction's offsets of a partition
        are pending: it must not start before a commit that is being decided.
        """
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        deadline = self._clock() + self.request_timeout_ms / 1000.0
        while True:
            response = self._send(9, _OFFSET_FETCH_STABLE_V if self._read_committed else _OFFSET_FETCH_V, {
                "group_id": self.group_id, "require_stable": self._read_committed, "topics": [
                    {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]})
            code = self._code(response)
            if code != ErrorCode.none:
                raise kafka_error(code, f"fetching the offsets of group {self.group_id!r}: {code.name}")
            result = {}
            unstable = False
            for t in response.topics:
                for p in t.partitions:
                    partition_code = ErrorCode(int(p.error_code))
                    if partition_code == ErrorCode.none:
                        result[(t.name, int(p.partition_index))] = int(p.committed_offset)
                    elif partition_code == ErrorCode.unstable_offset_commit:
                        unstable = True
            if not unstable:
                return result
            if self._clock() >= deadline:
                raise kafka_error(ErrorCode.unstable_offset_commit,
                                  f"group {self.group_id!r}: offsets still pending in a transaction after"
                                  f" {self.request_timeout_ms} ms")
            self._sleep(self.retry_backoff_ms / 1000.0)

    def commit(self) -> dict[TopicPartition, int]:
        """
        Commit the position (the next offset to consume) of every assigned
        partition, in this generation.

        @return: what was committed; C{{}} when the group is rebalancing (the
            next join commits nothing older: positions are kept).
        """
        if not self.assignment or self.generation_id < 0:
            return {}
        offsets = {tp: self._consumer.position(tp) for tp in self.assignment}
        topics: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""})
        response = self._send(8, _OFFSET_COMMIT_V, {
            "group_id": self.group_id, "generation_id_or_member_epoch": self.generation_id,
            "member_id": self.member_id, "group_instance_id": None,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
        for t in response.topics:
            for p in t.partitions:
                code = ErrorCode(int(p.error_code))
                if code in _REJOIN:
                    return {}
                if code in _COORDINATOR_MOVED:
                    self._forget_coordinator()
                    return {}
                if code != ErrorCode.none:
                    raise kafka_error(code, f"committing {t.name}-{p.partition_index} for group "
                                            f"{self.group_id!r}: {code.name}")
        self._next_commit = self._clock() + self.auto_commit_interval_ms / 1000.0
        return offsets

    def _heartbeat(self) -> None:
        try:
            response = self._send(12, _HEARTBEAT_V, {"group_id": self.group_id, "generation_id": self.generation_id,
                                                     "member_id": self.member_id, "group_instance_id": None})
        except (KafkaError, OSError) as e:
            if isinstance(e, KafkaError) and not e.retriable:
                raise
            self._next_heartbeat = self._clock() + self.retry_backoff_ms / 1000.0
            return
        code = self._code(response)
        self._next_heartbeat = self._clock() + self.heartbeat_interval_ms / 1000.0
        if code == ErrorCode.none or code in _COORDINATOR_MOVED:
            return
        if code == ErrorCode.rebalance_in_progress:
            if self.enable_auto_commit:
                self.commit()  # our generation is still valid: keep the progress before partitions move
        elif code == ErrorCode.unknown_member_id:
            self.member_id = ""
        elif code != ErrorCode.illegal_generation:
            raise kafka_error(code, f"heartbeat of group {self.group_id!r}: {code.name}")
        self.generation_id = -1
        self.join()

    # --- consuming --------------------------------------------------------------------------

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of C{topic} (see L{kafkatw.client.consumer.Consumer.partitions_for})."""
        return self._consumer.partitions_for(topic)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[Any]:
        """
        Records of this member's partitions, waiting up to C{timeout_ms} (ms);
        heartbeats, auto-commits and rebalances happen in here.
        """
        deadline = self._clock() + timeout_ms / 1000.0
        while True:
            now = self._clock()
            if now >= self._next_heartbeat:
                self._heartbeat()
            if now >= self._next_commit:
                if self.enable_auto_commit:
                    self.commit()
                else:
                    self._next_commit = now + self.auto_commit_interval_ms / 1000.0
            wait_s = max(0.0, min(deadline, self._next_heartbeat, self._next_commit) - self._clock())
            if self.assignment:
                records = self._consumer.poll(int(wait_s * 1000), max_records)
            else:
                self._sleep(wait_s)
                records = []
            if records or self._clock() >= deadline:
                return records

    def close(self) -> None:
        """Commit the positions, leave the group, close the connections."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.member_id:
                try:
                    if self.enable_auto_commit:
                        self.commit()
                finally:
                    self._send(13, _LEAVE_GROUP_V, {"group_id": self.group_id, "members": [
                        {"member_id": self.member_id, "group_instance_id": None}]})
        except (KafkaError, OSError):
            pass
        finally:
            try:
                self._consumer.close()
            finally:
                self._admin.close()

    def __enter__(self) -> "CoordinatorGroupConsumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
