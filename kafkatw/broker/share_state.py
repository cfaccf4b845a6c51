"""
Durable share-partition state (KIP-932 "Share-group state"): what a share
partition's leader writes so that a new leader resumes it, after Kafka's share
coordinator (C{share-coordinator/.../ShareCoordinatorShard.java}) and its
``__share_group_state`` records.

A I{persister} stores one L{SharePartitionSnapshot} per share partition, keyed
by (group id, topic id, partition):

  - L{MemoryPersister} keeps them in the broker's memory (a broker restart or
    a leader change forgets them: the new leader starts the share partition
    again from C{share.auto.offset.reset});
  - L{ReplicatedPersister} (kafkatw/broker/share_state_log.py, when present)
    keeps them in the internal replicated topic ``__share_group_state``.

A snapshot record of ``__share_group_state`` (key and value, both
L{encode_snapshot_key} / L{encode_snapshot_value}; Kafka's
C{ShareSnapshotKey}/C{ShareSnapshotValue} in spirit, JSON here)::

    key   {"v":0,"group":"g","topic_id":"<uuid>","partition":0}
    value {"v":0,"state_epoch":0,"start_offset":42,"leader_epoch":3,
           "batches":[[first,last,state,delivery_count], ...]}   state: 0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED
    ("leader_epoch": the writing partition leader's; absent in older records: -1)
    value with "start_offset":-1: not initialized; DeleteGroups of a share group
        writes this with the next state epoch (its writers still loaded elsewhere
        are fenced, C{FENCED_STATE_EPOCH}; the group made again starts at
        C{share.auto.offset.reset} under that state epoch)
    value null: a deletion (the coordinator's L{kafkatw.broker.share_coordinator.ShareCoordinator.write}
        of C{None}); the last record of a key wins

Source: KIP-932; Apache Kafka C{ShareCoordinatorShard}, C{PersisterStateBatch}.
"""

from __future__ import annotations

import json
import zlib
from typing import NamedTuple

from twisted.internet import defer

from ..errors import ErrorCode, KafkaError, kafka_error

from .share_partition import SharePartitionSnapshot, StateBatch

__all__ = ["SHARE_GROUP_STATE_TOPIC", "SharePartitionKey", "MemoryPersister", "encode_snapshot_key",
           "decode_snapshot_key", "encode_snapshot_value", "decode_snapshot_value", "state_partition_for",
           "check_leader_epoch"]

#: Kafka's internal topic of share-group state.
SHARE_GROUP_STATE_TOPIC = "__share_group_state"


class SharePartitionKey(NamedTuple):
    """A share partition: (group id, topic id as a string, partition)."""

    group_id: str
    topic_id: str
    partition: int


def state_partition_for(key: SharePartitionKey, partitions: int) -> int:
    """The ``__share_group_state`` partition of C{key} (crc32 of C{group:topic_id:partition})."""
    return zlib.crc32(f"{key.group_id}:{key.topic_id}:{key.partition}".encode()) % partitions


def encode_snapshot_key(key: SharePartitionKey) -> bytes:
    return json.dumps({"v": 0, "group": key.group_id, "topic_id": key.topic_id, "partition": key.partition},
                      separators=(",", ":")).encode()


def decode_snapshot_key(data: bytes) -> SharePartitionKey:
    value = json.loads(data)
    return SharePartitionKey(value["group"], value["topic_id"], value["partition"])


def encode_snapshot_value(snapshot: SharePartitionSnapshot) -> bytes:
    return json.dumps({"v": 0, "state_epoch": snapshot.state_epoch, "start_offset": snapshot.start_offset,
                       "leader_epoch": snapshot.leader_epoch,
                       "batches": [list(b) for b in snapshot.state_batches]}, separators=(",", ":")).encode()


def decode_snapshot_value(data: bytes) -> SharePartitionSnapshot:
    value = json.loads(data)
    return SharePartitionSnapshot(value["state_epoch"], value["start_offset"],
                                  tuple(StateBatch(*b) for b in value["batches"]), value.get("leader_epoch", -1))


def check_leader_epoch(seen: dict[SharePartitionKey, int], key: SharePartitionKey, leader_epoch: int,
                       dry_run: bool = False) -> None:
    """
    A share partition leader's read or write under C{leader_epoch}, against
    C{seen} (key -> the newest leader epoch read or written under, kept up
    to date unless C{dry_run}): a leader epoch older than the one seen is
    C{FENCED_LEADER_EPOCH} (its leader was deposed: a new one loaded the
    state since), as Kafka's C{ShareCoordinatorShard}; C{-1} (not a
    partition leader: an offsets reset, DescribeShareGroupOffsets) is never
    fenced.

    @raise KafkaError: C{FENCED_LEADER_EPOCH}.
    """
    if leader_epoch < 0:
        return
    newest = seen.get(key, -1)
    if leader_epoch < newest:
        raise kafka_error(ErrorCode.fenced_leader_epoch,
                          f"leader epoch {leader_epoch} is older than {newest}: the partition has a newer leader")
    if not dry_run:
        seen[key] = leader_epoch


class MemoryPersister:
    """
    Share-partition snapshots in this broker's memory: survives a leader's
    unload and reload on the same broker, not a restart or a move.
    """

    durable = False

    def __init__(self) -> None:
        self.snapshots: dict[SharePartitionKey, SharePartitionSnapshot] = {}
        #: the newest leader epoch each share partition was read or written under
        self.leader_epochs: dict[SharePartitionKey, int] = {}

    def read(self, key: SharePartitionKey, leader_epoch: int = -1) -> defer.Deferred:
        """
        The snapshot of C{key}, or C{None}, for the partition leader of
        C{leader_epoch} (C{-1}: not a leader); C{FENCED_LEADER_EPOCH} for an
        older leader epoch than one seen (see L{check_leader_epoch}).
        """
        try:
            check_leader_epoch(self.leader_epochs, key, leader_epoch)
        except KafkaError as e:
            return defer.fail(e)
        return defer.succeed(self.snapshots.get(key))

    def write(self, key: SharePartitionKey, snapshot: SharePartitionSnapshot) -> defer.Deferred:
        """
        Keep C{snapshot}; C{FENCED_LEADER_EPOCH} for an older leader epoch
        than one seen, C{FENCED_STATE_EPOCH} for an older state epoch than
        the one held.
        """
        current = self.snapshots.get(key)
        try:
            check_leader_epoch(self.leader_epochs, key, snapshot.leader_epoch, dry_run=True)
        except KafkaError as e:
            return defer.fail(e)
        if current is not None and snapshot.state_epoch < current.state_epoch:
            return defer.fail(kafka_error(ErrorCode.fenced_state_epoch, "older state epoch"))
        check_leader_epoch(self.leader_epochs, key, snapshot.leader_epoch)
        self.snapshots[key] = snapshot
        return defer.succeed(None)

    def delete(self, key: SharePartitionKey) -> defer.Deferred:
        self.snapshots.pop(key, None)
        self.leader_epochs.pop(key, None)
        return defer.succeed(None)

    def keys(self) -> list[SharePartitionKey]:
        return list(self.snapshots)
