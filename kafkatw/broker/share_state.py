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
    value {"v":0,"state_epoch":0,"start_offset":42,
           "batches":[[first,last,state,delivery_count], ...]}   state: 0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED
    value null: the share partition's state was deleted (its group was deleted)

Source: KIP-932; Apache Kafka C{ShareCoordinatorShard}, C{PersisterStateBatch}.
"""

from __future__ import annotations

import json
import zlib
from typing import NamedTuple

from twisted.internet import defer

from ..errors import ErrorCode, kafka_error

from .share_partition import SharePartitionSnapshot, StateBatch

__all__ = ["SHARE_GROUP_STATE_TOPIC", "SharePartitionKey", "MemoryPersister", "encode_snapshot_key",
           "decode_snapshot_key", "encode_snapshot_value", "decode_snapshot_value", "state_partition_for"]

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
                       "batches": [list(b) for b in snapshot.state_batches]}, separators=(",", ":")).encode()


def decode_snapshot_value(data: bytes) -> SharePartitionSnapshot:
    value = json.loads(data)
    return SharePartitionSnapshot(value["state_epoch"], value["start_offset"],
                                  tuple(StateBatch(*b) for b in value["batches"]))


class MemoryPersister:
    """
    Share-partition snapshots in this broker's memory: survives a leader's
    unload and reload on the same broker, not a restart or a move.
    """

    durable = False

    def __init__(self) -> None:
        self.snapshots: dict[SharePartitionKey, SharePartitionSnapshot] = {}

    def read(self, key: SharePartitionKey) -> defer.Deferred:
        """The snapshot of C{key}, or C{None}."""
        return defer.succeed(self.snapshots.get(key))

    def write(self, key: SharePartitionKey, snapshot: SharePartitionSnapshot) -> defer.Deferred:
        """Keep C{snapshot}; C{FENCED_STATE_EPOCH} for an older state epoch than the one held."""
        current = self.snapshots.get(key)
        if current is not None and snapshot.state_epoch < current.state_epoch:
            return defer.fail(kafka_error(ErrorCode.fenced_state_epoch, "older state epoch"))
        self.snapshots[key] = snapshot
        return defer.succeed(None)

    def delete(self, key: SharePartitionKey) -> defer.Deferred:
        self.snapshots.pop(key, None)
        return defer.succeed(None)

    def keys(self) -> list[SharePartitionKey]:
        return list(self.snapshots)
