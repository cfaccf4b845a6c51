"""
Unit tests of the fencing of share-partition state writes (KIP-932; Kafka's
C{ShareCoordinatorShard}): a deposed share-partition leader drops its share
partitions and its late writes are refused (C{FENCED_LEADER_EPOCH}); the
writes of one share partition reach the share coordinator in the order they
were made, also when one is tried again after a lost connection.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.internet import defer
from twisted.internet.error import ConnectionLost
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.share_coordinator import ReplicatedPersister
from kafkatw.broker.share_partition import SharePartitionSnapshot
from kafkatw.broker.share_state import MemoryPersister, SharePartitionKey
from kafkatw.errors import ErrorCode, KafkaError

from . import test_share_group_apis as share_apis
from .test_share_group_apis import LOCK_MS, ShareHarness, acquired

KEY = SharePartitionKey("g", "00000000-0000-0000-0000-000000000007", 0)


class DeposedLeaderTests(unittest.TestCase):
    def test_a_deposed_leader_drops_its_share_partitions_and_writes_nothing(self) -> None:
        s = ShareHarness(self)
        s.produce(2)
        self.assertEqual(acquired(s.fetched(s.fetch("m1"))), {0: [(0, 1, 1)]})
        manager = s.h.apis.share_partition_manager
        written: list[Any] = []
        write = manager.persister.write
        manager.persister.write = lambda key, snapshot: written.append(snapshot) or write(key, snapshot)
        # broker 1 becomes the leader of t-0 (epoch 1): this broker's share partition goes
        s.h.write_state("t", 0, 1, 1, [0, 1])
        self.assertEqual(manager.partitions, {})
        s.h.clock.advance(LOCK_MS / 1000.0 + 1)  # the old acquisition lock would have expired
        self.assertEqual(written, [])

    def test_a_leader_epoch_older_than_one_seen_is_fenced(self) -> None:
        persister = MemoryPersister()
        snapshot = SharePartitionSnapshot(0, 5, (), 1)
        self.successResultOf(persister.write(KEY, snapshot))
        # the new leader (epoch 2) reads the state: the leader of epoch 1 is fenced from then on
        self.assertEqual(self.successResultOf(persister.read(KEY, 2)), snapshot)
        failure = self.failureResultOf(persister.write(KEY, snapshot._replace(start_offset=3)), KafkaError)
        self.assertEqual(failure.value.error_code, ErrorCode.fenced_leader_epoch)
        self.assertEqual(self.failureResultOf(persister.read(KEY, 1), KafkaError).value.error_code,
                         ErrorCode.fenced_leader_epoch)
        # an offsets reset (no leader, -1) is not fenced; the new leader writes on
        self.successResultOf(persister.write(KEY, SharePartitionSnapshot(1, 9, (), -1)))
        self.successResultOf(persister.write(KEY, SharePartitionSnapshot(1, 10, (), 2)))
        self.assertEqual(persister.snapshots[KEY].start_offset, 10)

    def test_the_share_coordinator_fences_older_leader_epochs(self) -> None:
        s = share_apis.DurableStateTests.harness(self)  # type: ignore[arg-type]  # __share_group_state here
        coordinator = s.h.apis.share_coordinator
        self.successResultOf(coordinator.write(KEY, SharePartitionSnapshot(0, 5, (), 3)))
        failure = self.failureResultOf(coordinator.write(KEY, SharePartitionSnapshot(0, 6, (), 2)), KafkaError)
        self.assertEqual(failure.value.error_code, ErrorCode.fenced_leader_epoch)
        # loaded again by a new coordinator: the leader epoch is in the record
        for partition in range(3):
            coordinator.leadership_changed("__share_group_state", partition, "leader", 0)
        self.assertEqual(coordinator.read(KEY).leader_epoch, 3)
        failure = self.failureResultOf(coordinator.write(KEY, SharePartitionSnapshot(0, 6, (), 2)), KafkaError)
        self.assertEqual(failure.value.error_code, ErrorCode.fenced_leader_epoch)


class LoadTests(unittest.TestCase):
    def test_served_once_the_loaded_log_is_committed(self) -> None:
        """
        A state partition is answered for only once its high watermark has
        reached the end of what was loaded: a new leader's log may end with a
        state its predecessor never committed, which a later leader without it
        would truncate (as the transaction coordinator's, found by the
        simulation's seed 1027).
        """
        from kafkatw.broker.share_state import encode_snapshot_key, encode_snapshot_value, state_partition_for
        from kafkatw.protocol.records import encode_batch

        s = share_apis.DurableStateTests.harness(self)  # type: ignore[arg-type]  # __share_group_state here
        coordinator = s.h.apis.share_coordinator
        self.successResultOf(coordinator.write(KEY, SharePartitionSnapshot(0, 5, (), 3)))
        partition = state_partition_for(KEY, coordinator.partitions())
        p = s.h.replica_manager.partitions[("__share_group_state", partition)]
        tail = SharePartitionSnapshot(0, 9, (), 3)  # appended, not committed (the high watermark is below it)
        p.log.append(encode_batch([(encode_snapshot_key(KEY), encode_snapshot_value(tail), [], 0)]), p.leader_epoch)
        self.assertLess(p.log.high_watermark, p.log.log_end_offset)
        coordinator.leadership_changed("__share_group_state", partition, "leader", p.leader_epoch)
        with self.assertRaises(KafkaError) as raised:
            coordinator.read(KEY)
        self.assertEqual(raised.exception.error_code, ErrorCode.coordinator_load_in_progress)
        failure = self.failureResultOf(coordinator.write(KEY, SharePartitionSnapshot(0, 10, (), 3)), KafkaError)
        self.assertEqual(failure.value.error_code, ErrorCode.coordinator_load_in_progress)
        self.assertFalse(coordinator.leads(KEY))
        p.maybe_advance_high_watermark()  # the in-sync replicas have it now (here: this broker alone)
        self.assertEqual(coordinator.read(KEY), tail)
        self.assertTrue(coordinator.leads(KEY))


class _Coordinator:
    """A share coordinator on another broker (1): the persister sends to it."""

    def ensure_topic(self) -> bool:
        return True

    def partitions(self) -> int:
        return 1


class PersisterOrderTests(unittest.TestCase):
    def persister(self) -> tuple[Clock, ReplicatedPersister, list[tuple[int, defer.Deferred]]]:
        clock = Clock()
        sent: list[tuple[int, defer.Deferred]] = []

        def send(broker: int, api_key: int, body: Any) -> defer.Deferred:
            d: defer.Deferred = defer.Deferred()
            sent.append((body["topics"][0]["partitions"][0]["start_offset"], d))
            return d

        metadata = SimpleNamespace(leader=lambda topic, partition: 1)
        return clock, ReplicatedPersister(0, _Coordinator(), metadata, send, clock), sent

    @staticmethod
    def ok() -> Any:
        return SimpleNamespace(results=[SimpleNamespace(partitions=[SimpleNamespace(error_code=0)])])

    def test_writes_of_a_key_are_sent_in_order_also_when_retried(self) -> None:
        clock, persister, sent = self.persister()
        first = persister.write(KEY, SharePartitionSnapshot(0, 5, ()))
        second = persister.write(KEY, SharePartitionSnapshot(0, 7, ()))
        self.assertEqual([o for o, _ in sent], [5])  # the second waits for the first
        sent[0][1].errback(ConnectionLost())
        clock.advance(0.1)
        self.assertEqual([o for o, _ in sent], [5, 5])  # the first, tried again
        sent[1][1].callback(self.ok())
        self.successResultOf(first)
        self.assertEqual([o for o, _ in sent], [5, 5, 7])
        sent[2][1].callback(self.ok())
        self.successResultOf(second)
        self.assertEqual(persister._writes, {})

    def test_an_error_other_than_a_lost_connection_is_not_retried(self) -> None:
        clock, persister, sent = self.persister()
        d = persister.write(KEY, SharePartitionSnapshot(0, 5, ()))
        sent[0][1].errback(ValueError("a bug"))
        self.failureResultOf(d, ValueError)
        clock.advance(1)
        self.assertEqual(len(sent), 1)
