"""
The share coordinator: share-partition state kept in the internal replicated
topic ``__share_group_state`` (KIP-932 "Share-group state"), after Kafka's
C{share-coordinator} module (C{ShareCoordinatorService}, C{ShareCoordinatorShard}).

A share partition (group, topic id, partition) is hashed to one partition of
``__share_group_state`` (L{kafkatw.broker.share_state.state_partition_for});
that partition's leader is its I{share coordinator}.  The share partition's
leader (kafkatw/broker/share_partition_manager.py), wherever it is, reads and
writes its state through L{ReplicatedPersister}:

  - on the same broker as the share coordinator, directly;
  - else with ReadShareGroupState (84) and WriteShareGroupState (85) to the
    coordinator, retried (after C{NOT_COORDINATOR}, C{COORDINATOR_LOAD_IN_PROGRESS},
    C{COORDINATOR_NOT_AVAILABLE} or a lost connection) through the leader
    known then, for up to C{timeout_ms}.

The coordinator writes each state as one record (key and value of
L{kafkatw.broker.share_state}) appended as leader, and answers once the high
watermark passed it (acks=all with the topic's C{min.insync.replicas}): a write
answered is on every in-sync replica, so a new leader of the state partition
(which loads the partition from its log start to its log end offset, the last
record of each key winning, as compaction keeps) holds it.  A coordinator
answers for a state partition only once it loaded it, and once the partition's
high watermark has reached the end of what it loaded
(C{COORDINATOR_LOAD_IN_PROGRESS} until then): the end of a new leader's log
may hold a state its predecessor never committed, which a later leader
without it truncates, and a state read from it would go back then.

What this guarantees (docs/consumer-groups.md): an acknowledgement answered
without error survives the failure of any broker while C{min.insync.replicas}
replicas of its state partition remain; records acquired but not acknowledged
when their share partition's leader fails are delivered again (their delivery
count as last written).

Source: KIP-932; Apache Kafka C{ShareCoordinatorShard.java},
C{PersisterStateManager.java}, C{DefaultStatePersister.java}.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Callable

from twisted.internet import defer, task
from twisted.internet import error as net_error
from twisted.logger import Logger

from ..errors import ErrorCode, KafkaError, kafka_error
from ..protocol.records import decode_batches, encode_batch
from .config_helper import internal_topic_configs
from .share_partition import SharePartitionSnapshot, StateBatch
from .share_state import (SHARE_GROUP_STATE_TOPIC, SharePartitionKey, check_leader_epoch, decode_snapshot_key,
                          decode_snapshot_value, encode_snapshot_key, encode_snapshot_value, state_partition_for)

__all__ = ["ShareCoordinator", "ReplicatedPersister", "share_state_create_configs", "READ_SHARE_GROUP_STATE",
           "WRITE_SHARE_GROUP_STATE"]

_log = Logger()

READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
#: Errors after which a persister call is tried again through the leader known then.
_RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
              ErrorCode.coordinator_not_available, ErrorCode.not_leader_or_follower,
              ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
              ErrorCode.request_timed_out, ErrorCode.unknown_topic_or_partition, ErrorCode.network_exception}
#: A connection to the share coordinator that could not be made or was lost: tried again too.
_CONNECTION_ERRORS = (net_error.ConnectError, net_error.ConnectionLost, net_error.ConnectionDone,
                      net_error.TimeoutError)


def share_state_create_configs(config: Any) -> dict[str, str]:
    """
    The configs ``__share_group_state`` is created with: compacted, with the
    share coordinator's C{min.insync.replicas}; C{cleanup.policy=delete} with
    unlimited retention where this broker does not accept compaction.
    """
    return internal_topic_configs(config, {
        "cleanup.policy": "compact", "min.insync.replicas": str(config["share.coordinator.state.topic.min.isr"])})


class ShareCoordinator:
    """
    The ``__share_group_state`` partitions this broker leads: their latest
    snapshot per share partition, loaded when leadership comes.

    @param replica_manager: the broker's replica manager (its leadership listeners are followed).
    @param admin: creates ``__share_group_state`` (L{ensure_topic}).
    """

    def __init__(self, config: Any, replica_manager: Any, metadata: Any, admin: Any,
                 now_ms: Callable[[], int], timeout_ms: int = 30000) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.admin = admin
        self.now_ms = now_ms
        self.timeout_ms = timeout_ms
        self.num_partitions = config["share.coordinator.state.topic.num.partitions"]
        #: state partition -> (leader epoch, the log end offset it was loaded to: served once
        #: committed to there, key -> snapshot)
        self.loaded: dict[int, tuple[int, int, dict[SharePartitionKey, SharePartitionSnapshot]]] = {}
        #: state partition -> key -> the newest share-partition leader epoch read or written under
        self.leader_epochs: dict[int, dict[SharePartitionKey, int]] = {}
        self._creating: defer.Deferred | None = None

    def start(self) -> None:
        self.replica_manager.leadership_listeners.append(self.leadership_changed)
        for (topic, partition), p in list(self.replica_manager.partitions.items()):
            if topic == SHARE_GROUP_STATE_TOPIC and p.is_leader:
                self.leadership_changed(topic, partition, "leader", p.leader_epoch)

    def stop(self) -> None:
        if self.leadership_changed in self.replica_manager.leadership_listeners:
            self.replica_manager.leadership_listeners.remove(self.leadership_changed)
        self.loaded.clear()

    def partitions(self) -> int:
        meta = self.metadata.topics.get(SHARE_GROUP_STATE_TOPIC)
        return len(meta.partitions) if meta is not None else self.num_partitions

    def leadership_changed(self, topic: str, partition: int, role: str, leader_epoch: int | None) -> None:
        """Load a state partition that became led here; forget one that did not."""
        if topic != SHARE_GROUP_STATE_TOPIC:
            return
        self.loaded.pop(partition, None)
        self.leader_epochs.pop(partition, None)
        if role != "leader":
            return
        try:
            p = self.replica_manager.partitions[(topic, partition)]
            log = p.log
            snapshots: dict[SharePartitionKey, SharePartitionSnapshot] = {}
            end = log.log_end_offset
            for region in log.read(log.log_start_offset, 1 << 62, end):
                for batch in decode_batches(os.pread(region.fileno, region.length, region.position)):
                    if batch.is_control:
                        continue
                    for record in batch.records:
                        key = decode_snapshot_key(record.key)
                        if record.value is None:
                            snapshots.pop(key, None)
                        else:
                            snapshots[key] = decode_snapshot_value(record.value)
        except Exception as e:  # noqa: BLE001 - a partition that does not load is not served
            _log.error("loading {topic}-{partition} failed: {error!r}", topic=topic, partition=partition, error=e)
            return
        self.loaded[partition] = (p.leader_epoch if leader_epoch is None else leader_epoch, end, snapshots)
        self.leader_epochs[partition] = {k: s.leader_epoch for k, s in snapshots.items() if s.leader_epoch >= 0}
        _log.info("share coordinator loaded {topic}-{partition}: {count} share partitions",
                  topic=topic, partition=partition, count=len(snapshots))

    def _loaded(self, key: SharePartitionKey) -> tuple[int, dict]:
        partition = state_partition_for(key, self.partitions())
        held = self.loaded.get(partition)
        p = self.replica_manager.partitions.get((SHARE_GROUP_STATE_TOPIC, partition))
        if held is None or p is None or not p.is_leader or p.leader_epoch != held[0]:
            raise kafka_error(ErrorCode.not_coordinator, f"{SHARE_GROUP_STATE_TOPIC}-{partition} is not led here")
        _, end, snapshots = held
        if p.log.high_watermark < end:
            raise kafka_error(ErrorCode.coordinator_load_in_progress,
                              f"{SHARE_GROUP_STATE_TOPIC}-{partition} is loaded to offset {end} and committed to"
                              f" {p.log.high_watermark}")
        return partition, snapshots

    def leads(self, key: SharePartitionKey) -> bool:
        try:
            self._loaded(key)
            return True
        except KafkaError:
            return False

    def read(self, key: SharePartitionKey, leader_epoch: int = -1) -> SharePartitionSnapshot | None:
        """
        The snapshot of C{key} for the share partition's leader of
        C{leader_epoch} (C{-1}: not a leader), which fences the older ones
        (L{kafkatw.broker.share_state.check_leader_epoch}).

        @raise KafkaError: C{NOT_COORDINATOR} when the state partition is not
            loaded here; C{FENCED_LEADER_EPOCH}.
        """
        partition, snapshots = self._loaded(key)
        check_leader_epoch(self.leader_epochs.setdefault(partition, {}), key, leader_epoch)
        return snapshots.get(key)

    def write(self, key: SharePartitionKey, snapshot: SharePartitionSnapshot | None) -> defer.Deferred:
        """
        Append C{snapshot} (C{None}: a deletion) and fire once the in-sync
        replicas have it.  Refused: a snapshot of an older leader epoch than
        one read or written under (C{FENCED_LEADER_EPOCH}: its writer was
        deposed), of an older state epoch than the one held
        (C{FENCED_STATE_EPOCH}: its writer missed an offsets reset), as Kafka's
        C{ShareCoordinatorShard}.  A snapshot of leader epoch C{-1} (an
        offsets reset) keeps the leader epoch held.
        """
        try:
            partition, snapshots = self._loaded(key)
            current = snapshots.get(key)
            seen = self.leader_epochs.setdefault(partition, {})
            if snapshot is not None:
                check_leader_epoch(seen, key, snapshot.leader_epoch, dry_run=True)
            if snapshot is not None and current is not None and snapshot.state_epoch < current.state_epoch:
                raise kafka_error(ErrorCode.fenced_state_epoch,
                                  f"state epoch {snapshot.state_epoch} is older than {current.state_epoch}")
            if snapshot is not None:
                check_leader_epoch(seen, key, snapshot.leader_epoch)
                if snapshot.leader_epoch < 0 and key in seen:
                    snapshot = snapshot._replace(leader_epoch=seen[key])
            tp = (SHARE_GROUP_STATE_TOPIC, partition)
            manager = self.replica_manager
            value = None if snapshot is None else encode_snapshot_value(snapshot)
            batch = encode_batch([(encode_snapshot_key(key), value, [], self.now_ms())])
            result = manager.append(SHARE_GROUP_STATE_TOPIC, partition, batch, manager.min_insync_replicas(tp[0]))
        except KafkaError as e:
            return defer.fail(e)
        d = manager.delay_produce({tp: result.last_offset + 1}, self.timeout_ms)

        def replicated(errors: dict) -> None:
            error = errors.get(tp)
            if error is not None:
                raise error
            if snapshot is None:
                snapshots.pop(key, None)
            else:
                snapshots[key] = snapshot

        return d.addCallback(replicated)

    def ensure_topic(self) -> bool:
        """Whether ``__share_group_state`` exists; if not, start creating it once enough brokers are alive."""
        if SHARE_GROUP_STATE_TOPIC in self.metadata.topics:
            return True
        replication_factor = self.config["share.coordinator.state.topic.replication.factor"]
        if self._creating is None and len(self.metadata.brokers) >= replication_factor:
            self._creating = defer.ensureDeferred(self.admin.create_topic(
                SHARE_GROUP_STATE_TOPIC, self.num_partitions, replication_factor, None,
                share_state_create_configs(self.config)))

            def done(result: Any) -> None:
                self._creating = None
                error = getattr(result, "value", None)
                if error is not None and not (isinstance(error, KafkaError)
                                              and error.error_code == ErrorCode.topic_already_exists):
                    _log.warn("creating {topic} failed: {error}", topic=SHARE_GROUP_STATE_TOPIC, error=error)

            self._creating.addBoth(done)
        return False

    # --- ReadShareGroupState and WriteShareGroupState (the coordinator's side) ---------------

    def handle_read(self, group_id: str, topics: Any) -> dict:
        """The ReadShareGroupState (v0) response body for the request's C{topics}."""
        results = []
        for topic in topics:
            partitions = []
            for p in topic.partitions:
                key = SharePartitionKey(group_id, str(topic.topic_id), p.partition)
                entry: dict[str, Any] = {"partition": p.partition, "error_code": 0, "error_message": None,
                                         "state_epoch": 0, "start_offset": -1, "state_batches": []}
                try:
                    snapshot = self.read(key, p.leader_epoch)
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                else:
                    if snapshot is not None:
                        entry.update(state_epoch=snapshot.state_epoch, start_offset=snapshot.start_offset,
                                     state_batches=[{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                                     "delivery_state": b.state, "delivery_count": b.delivery_count}
                                                    for b in snapshot.state_batches])
                partitions.append(entry)
            results.append({"topic_id": topic.topic_id, "partitions": partitions})
        return {"results": results}

    async def handle_write(self, group_id: str, topics: Any) -> dict:
        """The WriteShareGroupState (v0–v1) response body for the request's C{topics}."""
        results = []
        for topic in topics:
            partitions = []
            for p in topic.partitions:
                key = SharePartitionKey(group_id, str(topic.topic_id), p.partition)
                snapshot = SharePartitionSnapshot(p.state_epoch, p.start_offset, tuple(
                    StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                    for b in p.state_batches), p.leader_epoch)
                entry = {"partition": p.partition, "error_code": 0, "error_message": None}
                try:
                    await self.write(key, snapshot)
                except KafkaError as e:
                    entry["error_code"] = int(e.error_code)
                    entry["error_message"] = str(e) or None
                partitions.append(entry)
            results.append({"topic_id": topic.topic_id, "partitions": partitions})
        return {"results": results}


class ReplicatedPersister:
    """
    The persister of L{kafkatw.broker.share_partition_manager.SharePartitionManager}
    over the share coordinators (see the module docstring).

    @param send: C{(broker id, API key, body) -> Deferred} of the kio response
        (the broker's inter-broker client).
    """

    durable = True

    def __init__(self, broker_id: int, coordinator: ShareCoordinator, metadata: Any,
                 send: Callable[[int, int, Any], defer.Deferred], reactor: Any, retry_backoff_ms: int = 100,
                 timeout_ms: int = 30000) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self.metadata = metadata
        self.send = send
        self.reactor = reactor
        self.retry_backoff_ms = retry_backoff_ms
        self.timeout_ms = timeout_ms
        #: key -> a Deferred firing once the last write asked for the key is done (L{write})
        self._writes: dict[SharePartitionKey, defer.Deferred] = {}

    async def _call(self, key: SharePartitionKey, local: Callable[[], Any], api_key: int, body: dict,
                    answer: Callable[[Any], Any]) -> Any:
        deadline = self.reactor.seconds() + self.timeout_ms / 1000.0
        last_error: Exception = kafka_error(ErrorCode.coordinator_not_available, "no share coordinator yet")
        while True:
            try:
                if self.coordinator.ensure_topic():
                    partition = state_partition_for(key, self.coordinator.partitions())
                    leader = self.metadata.leader(SHARE_GROUP_STATE_TOPIC, partition)
                    if leader == self.broker_id:
                        return await defer.maybeDeferred(local)
                    if leader is not None and leader >= 0:
                        return answer(await self.send(leader, api_key, body))
            except KafkaError as e:
                if e.error_code not in _RETRIABLE:
                    raise
                last_error = e
            except _CONNECTION_ERRORS as e:  # a lost connection: try again (any other error is raised)
                last_error = e
            if self.reactor.seconds() >= deadline:
                raise last_error
            await task.deferLater(self.reactor, self.retry_backoff_ms / 1000.0, lambda: None)

    def read(self, key: SharePartitionKey, leader_epoch: int = -1) -> defer.Deferred:
        """C{key}'s snapshot or C{None}, for its partition's leader of C{leader_epoch} (C{-1}: not a leader)."""
        body = {"group_id": key.group_id, "topics": [{"topic_id": uuid.UUID(key.topic_id), "partitions": [
            {"partition": key.partition, "leader_epoch": leader_epoch}]}]}

        def answer(response: Any) -> SharePartitionSnapshot | None:
            p = response.results[0].partitions[0]
            if p.error_code:
                raise kafka_error(p.error_code, p.error_message or "")
            if p.start_offset < 0:
                return None
            return SharePartitionSnapshot(p.state_epoch, p.start_offset, tuple(
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in p.state_batches))

        return defer.Deferred.fromCoroutine(self._call(
            key, lambda: self.coordinator.read(key, leader_epoch), READ_SHARE_GROUP_STATE, body, answer))

    def write(self, key: SharePartitionKey, snapshot: SharePartitionSnapshot) -> defer.Deferred:
        """
        Write C{snapshot} (with its leader epoch).  Writes of one key are sent
        one after the other, in the order asked: an older snapshot, tried
        again after a lost connection, never lands after a newer one.
        """
        body = {"group_id": key.group_id, "topics": [{"topic_id": uuid.UUID(key.topic_id), "partitions": [{
            "partition": key.partition, "state_epoch": snapshot.state_epoch, "leader_epoch": snapshot.leader_epoch,
            "start_offset": snapshot.start_offset, "state_batches": [
                {"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": b.state,
                 "delivery_count": b.delivery_count} for b in snapshot.state_batches]}]}]}

        def answer(response: Any) -> None:
            p = response.results[0].partitions[0]
            if p.error_code:
                raise kafka_error(p.error_code, p.error_message or "")

        previous = self._writes.get(key)
        done: defer.Deferred = defer.Deferred()
        self._writes[key] = done

        async def write_in_turn() -> None:
            try:
                if previous is not None:
                    await previous
                await self._call(key, lambda: self.coordinator.write(key, snapshot), WRITE_SHARE_GROUP_STATE,
                                 body, answer)
            finally:
                if self._writes.get(key) is done:
                    del self._writes[key]
                done.callback(None)

        return defer.Deferred.fromCoroutine(write_in_turn())

