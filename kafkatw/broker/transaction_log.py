"""
The transaction coordinator's wiring into a broker: its state log over the
replica manager, the markers a partition leader appends, and the group offsets
of transactions.

L{ReplicatedTransactionLog} is the coordinator's C{TransactionLog} over the
broker's own partitions of ``__transaction_state``: an append is one
uncompressed batch appended as leader at the coordinator epoch (the
partition's leader epoch), acknowledged once the high watermark passes it
(acks=all with the topic's C{min.insync.replicas}); a read returns the
partition from its log start to its log end offset, as Kafka's
C{TransactionStateManager} loads it: a new leader's high watermark may still
lag records the old leader acknowledged, and the leader's log is the one its
followers will hold (``__transaction_state`` has no unclean elections).

L{append_markers} is the leader's side of WriteTxnMarkers (Kafka's
C{KafkaApis.handleWriteTxnMarkersRequest}): each COMMIT or ABORT marker becomes
a control batch appended with acks=all (L{kafkatw.storage.log.PartitionLog.append_marker}),
which updates the partition's producer state, last stable offset and
aborted-transaction index; the answer waits for replication.

Group offsets (L{PendingOffsetStore}, L{GroupOffsetsMarkerWriter}).  kafkatw
keeps committed offsets in ZooKeeper (C{/consumers/<group>/offsets/...}), and no
broker leads a ``__consumer_offsets`` partition, so:

  - TxnOffsetCommit, on the group's coordinator, writes the offsets as
    I{pending} in ZooKeeper, keyed by producer id and group (durable: a
    committed transaction's offsets survive the death of any broker)::

        /transactions/pending_offsets/<group, percent-encoded>/<producer id>
        {"version":1,"producer_epoch":3,
         "offsets":[["topic",0,42,-1,"metadata"], ...]}   (topic, partition, offset, leader epoch, metadata)

  - the marker of the group's ``__consumer_offsets`` partition (added by
    AddOffsetsToTxn) is not sent to a partition leader but completed by the
    transaction coordinator's broker itself, in ZooKeeper: COMMIT copies the
    pending offsets of that producer's groups hashing to that partition into
    their committed offsets, then deletes them; ABORT deletes them.  Either is
    idempotent, so the coordinator's retries after a failover are safe.
  - OffsetFetch with C{require_stable} (KIP-447) answers
    C{UNSTABLE_OFFSET_COMMIT} for a partition with offsets pending
    (L{PendingOffsetStore.unstable}), which clients retry.

Source: Apache Kafka C{TransactionStateManager}, C{KafkaApis.handleWriteTxnMarkersRequest},
C{GroupMetadata} (pending transactional offsets); KIP-98.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import quote, unquote

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode, KafkaError, NotLeaderOrFollowerError, kafka_error
from ..zookeeper.bridge import BadVersionError, NodeExistsError, NoNodeError
from ..zookeeper.zk_data import CommittedOffset
from .config_helper import internal_topic_configs
from .transaction_coordinator import OFFSETS_TOPIC, offsets_partition_for, transaction_state_topic_configs
from .transaction_state import TRANSACTION_STATE_TOPIC, TopicPartition, encode_transaction_log_batch, \
    transaction_log_records

__all__ = ["ReplicatedTransactionLog", "transaction_state_create_configs", "append_markers",
           "PendingOffsetStore", "GroupOffsetsMarkerWriter", "PENDING_OFFSETS_PATH"]

_log = Logger()

#: Where pending transactional offsets live (under the registry's chroot).
PENDING_OFFSETS_PATH = "/transactions/pending_offsets"


def transaction_state_create_configs(config: Any) -> dict[str, str]:
    """
    The configs ``__transaction_state`` is created with: Kafka's
    (C{cleanup.policy=compact}, L{transaction_state_topic_configs}) when this
    broker accepts compaction, else C{cleanup.policy=delete} with unlimited
    retention (C{retention.ms=-1}, C{retention.bytes=-1}): nothing is lost,
    the log only grows.
    """
    return internal_topic_configs(config, transaction_state_topic_configs(config))


class ReplicatedTransactionLog:
    """
    The coordinator's C{TransactionLog} over the replica manager's
    ``__transaction_state`` partitions.

    @param replica_manager: the broker's L{kafkatw.broker.replica_manager.ReplicaManager}.
    @param now_ms: the clock (ms), for the batches' timestamps.
    @param timeout_ms: how long an append waits for the in-sync replicas
        (C{REQUEST_TIMED_OUT} after).
    """

    def __init__(self, replica_manager: Any, now_ms: Callable[[], int], timeout_ms: int = 30000) -> None:
        self.replica_manager = replica_manager
        self.now_ms = now_ms
        self.timeout_ms = timeout_ms

    def _leader(self, partition: int, coordinator_epoch: int | None = None) -> Any:
        p = self.replica_manager.partitions.get((TRANSACTION_STATE_TOPIC, partition))
        if p is None or not p.is_leader or (coordinator_epoch is not None and p.leader_epoch != coordinator_epoch):
            raise NotLeaderOrFollowerError(
                f"{TRANSACTION_STATE_TOPIC}-{partition}: not its leader at epoch {coordinator_epoch}")
        return p

    def append(self, partition: int, coordinator_epoch: int,
               records: Sequence[tuple[bytes, bytes | None]]) -> defer.Deferred:
        """See L{kafkatw.broker.transaction_coordinator.TransactionLog.append}."""
        tp = (TRANSACTION_STATE_TOPIC, partition)
        manager = self.replica_manager
        try:
            self._leader(partition, coordinator_epoch)
            batch = encode_transaction_log_batch(list(records), self.now_ms())
            result = manager.append(TRANSACTION_STATE_TOPIC, partition, batch,
                                    manager.min_insync_replicas(TRANSACTION_STATE_TOPIC))
        except KafkaError as e:
            return defer.fail(e)
        d = manager.delay_produce({tp: result.last_offset + 1}, self.timeout_ms)

        def replicated(errors: dict) -> None:
            error = errors.get(tp)
            if error is not None:
                raise error

        return d.addCallback(replicated)

    def committed(self, partition: int, coordinator_epoch: int) -> defer.Deferred:
        """See L{kafkatw.broker.transaction_coordinator.TransactionLog.committed}."""
        tp = (TRANSACTION_STATE_TOPIC, partition)
        try:
            end = self._leader(partition, coordinator_epoch).log.log_end_offset
        except KafkaError as e:
            return defer.fail(e)
        d = self.replica_manager.delay_produce({tp: end}, self.timeout_ms)

        def replicated(errors: dict) -> None:
            self._leader(partition, coordinator_epoch)  # (the wait ends too when the leadership moves)
            error = errors.get(tp)
            if error is not None:
                raise error

        return d.addCallback(replicated)

    def read(self, partition: int) -> defer.Deferred:
        """
        See L{kafkatw.broker.transaction_coordinator.TransactionLog.read}: to
        the log end offset, and only each key's last record (in the order of
        those last records), which loads the same state as every record.
        """
        try:
            log = self._leader(partition).log
            regions = log.read(log.log_start_offset, 1 << 62, log.log_end_offset)
            # Only the last record of each key matters (the coordinator's load
            # keeps the last value, as compaction would): one segment in
            # memory at a time, a key's records replaced as they come.
            latest: dict[bytes, bytes | None] = {}
            for r in regions:
                for key, value in transaction_log_records(os.pread(r.fileno, r.length, r.position)):
                    latest.pop(key, None)
                    latest[key] = value
            return defer.succeed(list(latest.items()))
        except Exception as e:
            return defer.fail(e)


def append_markers(replica_manager: Any, markers: Iterable[Any], now_ms: int, timeout_ms: int,
                   group_offsets: "PendingOffsetStore | None" = None) -> defer.Deferred:
    """
    The partition leader's side of WriteTxnMarkers: append each marker as a
    control batch, then wait until every in-sync replica has them.

    @param markers: the request's C{markers} (kio entities).
    @return: a Deferred firing with the response body (plain values): per
        marker and partition C{NONE}, C{UNKNOWN_TOPIC_OR_PARTITION},
        C{NOT_LEADER_OR_FOLLOWER}, C{NOT_ENOUGH_REPLICAS(_AFTER_APPEND)},
        C{REQUEST_TIMED_OUT}, C{INVALID_PRODUCER_EPOCH},
        C{TRANSACTION_COORDINATOR_FENCED}, C{KAFKA_STORAGE_ERROR}.
    """
    results: list[tuple[int, dict[TopicPartition, ErrorCode]]] = []
    required: dict[TopicPartition, int] = {}
    waits: list[tuple[dict, TopicPartition, defer.Deferred]] = []
    for marker in markers:
        codes: dict[TopicPartition, ErrorCode] = {}
        results.append((int(marker.producer_id), codes))
        for topic in marker.topics:
            for index in topic.partition_indexes:
                tp = (topic.name, int(index))
                if topic.name == OFFSETS_TOPIC and group_offsets is not None:
                    codes[tp] = ErrorCode.none
                    waits.append((codes, tp, group_offsets.complete(
                        int(marker.producer_id), int(index), bool(marker.transaction_result))))
                    continue
                try:
                    p = replica_manager.get_partition(*tp)
                    log = p.leader_log()
                    p.check_min_isr(replica_manager.min_insync_replicas(tp[0]))
                    result = log.append_marker(int(marker.producer_id), int(marker.producer_epoch),
                                               int(marker.coordinator_epoch), bool(marker.transaction_result),
                                               p.leader_epoch, now_ms)
                    p.maybe_advance_high_watermark()
                    for fetch in replica_manager.fetch_purgatory.watching(tp):
                        if fetch.replica:
                            fetch.on_append(result.size_bytes)
                    required[tp] = max(required.get(tp, 0), result.last_offset + 1)
                    codes[tp] = ErrorCode.none
                except KafkaError as e:
                    codes[tp] = e.error_code

    async def answer() -> dict:
        if required:
            errors = await replica_manager.delay_produce(required, timeout_ms)
            for _, codes in results:
                for tp in codes:
                    error = errors.get(tp)
                    if error is not None and codes[tp] == ErrorCode.none:
                        codes[tp] = error.error_code
        for codes, tp, d in waits:
            try:
                await d
            except Exception as e:
                _log.warn("completing the transactional offsets of {tp} failed: {error}", tp=tp, error=e)
                codes[tp] = ErrorCode.coordinator_not_available
        return {"markers": [
            {"producer_id": pid, "topics": [
                {"name": name, "partitions": [{"partition_index": p, "error_code": int(code)}
                                              for (t, p), code in codes.items() if t == name]}
                for name in dict.fromkeys(t for t, _ in codes)]}
            for pid, codes in results]}

    return defer.Deferred.fromCoroutine(answer())


class PendingOffsetStore:
    """
    Transactional offset commits waiting for their transaction's marker, in
    ZooKeeper (see the module docstring).

    @param registry: a L{kafkatw.zookeeper.registry.Registry} (its C{client}
        and C{set_committed_offset} are used).
    """

    def __init__(self, registry: Any, offsets_topic_partitions: int = 50) -> None:
        self.registry = registry
        self.offsets_topic_partitions = offsets_topic_partitions

    @staticmethod
    def path(group_id: str, producer_id: int | None = None) -> str:
        base = f"{PENDING_OFFSETS_PATH}/{quote(group_id, safe='')}"
        return base if producer_id is None else f"{base}/{producer_id}"

    def add(self, group_id: str, producer_id: int, producer_epoch: int,
            offsets: dict[tuple[str, int], CommittedOffset]) -> defer.Deferred:
        """
        Add C{offsets} to the pending offsets of C{producer_id} for C{group_id}
        (a later value of a partition replaces the earlier).

        @return: a Deferred firing once written; failing with a L{KafkaError}
            C{INVALID_PRODUCER_EPOCH} when the pending offsets belong to a
            newer epoch.
        """
        client = self.registry.client
        path = self.path(group_id, producer_id)

        async def go() -> None:
            for _ in range(10):
                try:
                    data, stat = await client.get(path)
                    version = stat.version
                    body = json.loads(data)
                except NoNodeError:
                    body, version = None, None
                merged: dict[tuple[str, int], list] = {}
                if body is not None:
                    if body["producer_epoch"] > producer_epoch:
                        raise kafka_error(ErrorCode.invalid_producer_epoch,
                                          f"pending offsets of producer {producer_id} are at a newer epoch")
                    merged = {(t, p): [t, p, o, e, m] for t, p, o, e, m in body["offsets"]}
                for (topic, partition), c in offsets.items():
                    merged[(topic, partition)] = [topic, partition, c.offset, c.leader_epoch, c.metadata]
                new = json.dumps({"version": 1, "producer_epoch": producer_epoch,
                                  "offsets": sorted(merged.values())}, separators=(",", ":")).encode()
                try:
                    if version is None:
                        await client.create(path, new, makepath=True)
                    else:
                        await client.set(path, new, version=version)
                    return
                except (NodeExistsError, BadVersionError, NoNodeError):
                    continue
            raise kafka_error(ErrorCode.concurrent_transactions, f"{path} keeps changing")

        return defer.Deferred.fromCoroutine(go())

    def pending(self, group_id: str) -> defer.Deferred:
        """
        @return: a Deferred firing with C{{producer id: {(topic, partition):
            CommittedOffset}}} pending for C{group_id}.
        """
        client = self.registry.client

        async def go() -> dict[int, dict[tuple[str, int], CommittedOffset]]:
            try:
                children = await client.get_children(self.path(group_id))
            except NoNodeError:
                return {}
            out = {}
            for child in children:
                try:
                    data, _ = await client.get(f"{self.path(group_id)}/{child}")
                except NoNodeError:
                    continue  # completed meanwhile: committed (before the delete) or dropped
                body = json.loads(data)
                out[int(child)] = {(t, p): CommittedOffset(o, e, m or "") for t, p, o, e, m in body["offsets"]}
            return out

        return defer.Deferred.fromCoroutine(go())

    def unstable(self, group_id: str) -> defer.Deferred:
        """
        @return: a Deferred firing with the C{(topic, partition)}s of
            C{group_id} with offsets pending (OffsetFetch's C{require_stable},
            KIP-447).
        """
        d = self.pending(group_id)
        return d.addCallback(lambda by_producer: {tp for offsets in by_producer.values() for tp in offsets})

    def complete(self, producer_id: int, partition: int, committed: bool) -> defer.Deferred:
        """
        The marker of C{__consumer_offsets-<partition>} for C{producer_id}:
        make the pending offsets of the groups of that partition committed
        (C{committed}) or drop them.  Idempotent.
        """
        client = self.registry.client

        async def go() -> None:
            try:
                groups = [unquote(g) for g in await client.get_children(PENDING_OFFSETS_PATH)]
            except NoNodeError:
                return
            for group in groups:
                if offsets_partition_for(group, self.offsets_topic_partitions)[1] != partition:
                    continue
                path = self.path(group, producer_id)
                try:
                    data, _ = await client.get(path)
                except NoNodeError:
                    continue
                body = json.loads(data)
                if committed:
                    for t, p, o, e, m in body["offsets"]:
                        await self.registry.set_committed_offset(group, t, p, CommittedOffset(o, e, m or ""))
                try:
                    await client.delete(path)
                except NoNodeError:
                    pass
                try:
                    await client.delete(self.path(group))
                except Exception:
                    pass  # other producers' offsets still pending
                _log.info("{result} the transactional offsets of producer {pid} for group {group}",
                          result="committed" if committed else "dropped", pid=producer_id, group=group)

        return defer.Deferred.fromCoroutine(go())


class GroupOffsetsMarkerWriter:
    """
    The coordinator's C{MarkerWriter}: markers of ``__consumer_offsets``
    partitions are completed in ZooKeeper (L{PendingOffsetStore.complete},
    retried until they succeed); the others go to the partition leaders
    through C{channel} (a L{kafkatw.broker.transaction_markers.TransactionMarkerChannel}).
    """

    def __init__(self, channel: Any, offsets: PendingOffsetStore, reactor: Any, retry_backoff_ms: int = 100) -> None:
        self.channel = channel
        self.offsets = offsets
        self.reactor = reactor
        self.retry_backoff_ms = retry_backoff_ms

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, defer.Deferred]:
        partitions = list(partitions)
        groups = [tp for tp in partitions if tp[0] == OFFSETS_TOPIC]
        out = self.channel.write_markers(producer_id, producer_epoch, coordinator_epoch, committed,
                                         [tp for tp in partitions if tp[0] != OFFSETS_TOPIC])
        for tp in groups:
            out[tp] = self._complete(producer_id, tp[1], committed)
        return out

    def _complete(self, producer_id: int, partition: int, committed: bool) -> defer.Deferred:
        state: dict[str, Any] = {"cancelled": False, "call": None}

        def cancel(_: Any) -> None:
            state["cancelled"] = True
            if state["call"] is not None and state["call"].active():
                state["call"].cancel()

        result: defer.Deferred = defer.Deferred(cancel)

        def attempt() -> None:
            if state["cancelled"]:
                return
            d = self.offsets.complete(producer_id, partition, committed)
            d.addCallbacks(done, failed)

        def done(_: Any) -> None:
            if not result.called:
                result.callback(None)

        def failed(failure: Any) -> None:
            _log.warn("completing the transactional offsets of producer {pid} failed ({error}); retrying",
                      pid=producer_id, error=failure.value)
            state["call"] = self.reactor.callLater(self.retry_backoff_ms / 1000.0, attempt)

        attempt()
        return result

    def close(self) -> None:
        self.channel.close()
