"""
Unit tests of L{kafkatw.broker.partition.Partition} as the broker wires it: a
L{ReplicaManager} over real logs in a temporary directory, a fake ZooKeeper
whose partition-state znode is the truth (ISR changes are conditional writes
on its zkVersion), and a L{Clock} for C{replica.lag.time.max.ms}.  The leader
is broker 0 of brokers 0, 1 and 2; followers' fetches are
L{Partition.update_follower} calls (the Fetch path through L{KafkaApis} is
tested in C{tests/unit/test_broker.py}).
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.broker.partition import FOLLOWER, LEADER, OFFLINE, Partition
from kafkatw.broker.replica_manager import ReplicaManager
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.errors import FencedLeaderEpochError, NotEnoughReplicasError, UnknownLeaderEpochError
from kafkatw.protocol.batch import build_batch
from kafkatw.storage.log_manager import LogManager
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.bridge import BadVersionError
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import PartitionState

TOPIC = "t"
LAG_MS = 10_000


def records(n: int = 1) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(n)])


class ReplicationHarness:
    """
    Broker C{broker_id} hosting C{t-0}, assigned C{replicas}, following the
    state znode that L{write_state} writes.

    @ivar isr_writes: every C{write_isr} call, as C{(isr, expected_version)}.
    @ivar reloads: every C{reload_state} call.
    """

    def __init__(self, testcase: unittest.TestCase, replicas: list[int] = [0, 1, 2], broker_id: int = 0,
                 write_isr: Any = None, watch: bool = False, **overrides: object) -> None:
        self.testcase = testcase
        directory = tempfile.mkdtemp(prefix="kafkatw-partition-test-")
        testcase.addCleanup(shutil.rmtree, directory, True)
        self.clock = Clock()
        self.clock.advance(1000)
        self.config = BrokerConfig({"broker.id": broker_id, "log.dirs": directory,
                                    "replica.lag.time.max.ms": LAG_MS, **overrides})
        self.zookeeper = FakeZooKeeperClient()
        testcase.successResultOf(self.zookeeper.start())
        self.registry = Registry(self.zookeeper)
        self.metadata = MetadataCache(broker_id)
        self.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in (0, 1, 2)})
        now_ms = lambda: int(self.clock.seconds() * 1000)  # noqa: E731
        self.log_manager = LogManager([directory], topic_log_config(self.config, {}), now_ms=now_ms)
        self.log_manager.load()
        testcase.addCleanup(self.log_manager.close)
        self.replicas = list(replicas)
        self.isr_writes: list[tuple[list[int], int]] = []
        self.reloads: list[tuple[str, int]] = []
        self._write_isr = write_isr
        self.replica_manager = ReplicaManager(
            broker_id, self.log_manager, self.metadata, self.clock, lambda t: topic_log_config(self.config, {}),
            write_isr=self.write_isr, reload_state=self.reload_state, now_ms=now_ms)
        created = testcase.successResultOf(self.registry.create_topic(TOPIC, {0: self.replicas}))
        self.metadata.set_topic(TopicMetadata(TOPIC, created.topic_id, dict(created.partitions)))
        if watch:
            # the broker's own watch on the state znode, as KafkaServer sets it
            testcase.successResultOf(self.registry.watch_partition_state(TOPIC, 0, self.apply))

    def write_isr(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: list[int],
                  controller_epoch: int, expected_version: int, elr: list[int] | None = None,
                  elr_isr_zxids: list[int] | None = None, leader_epoch_zxid: int = -1,
                  isr_zxids: list[int] | None = None) -> defer.Deferred:
        self.isr_writes.append((list(isr), expected_version))
        if self._write_isr is not None:
            return self._write_isr(isr)
        return self.registry.set_partition_state(topic, partition, leader, leader_epoch, isr, controller_epoch,
                                                 expected_version=expected_version, elr=elr,
                                                 elr_isr_zxids=elr_isr_zxids, leader_epoch_zxid=leader_epoch_zxid,
                                                 isr_zxids=isr_zxids)

    def reload_state(self, topic: str, partition: int) -> None:
        self.reloads.append((topic, partition))
        self.apply(self.state())

    def write_state(self, leader: int, leader_epoch: int, isr: list[int], controller_epoch: int = 1,
                    apply: bool = True) -> int:
        """Write the state znode as the controller does (unconditionally); apply it unless told not to."""
        version = self.testcase.successResultOf(self.registry.set_partition_state(
            TOPIC, 0, leader, leader_epoch, isr, controller_epoch))
        if apply:
            self.apply(self.state())
        return version

    def state(self) -> PartitionState:
        return self.testcase.successResultOf(self.registry.get_partition_state(TOPIC, 0))

    def apply(self, state: PartitionState | None) -> None:
        self.replica_manager.apply_state(TOPIC, 0, self.replicas, state)

    @property
    def partition(self) -> Partition:
        return self.replica_manager.partitions[(TOPIC, 0)]

    def append(self, n: int = 1, min_insync_replicas: int | None = None) -> Any:
        return self.replica_manager.append(TOPIC, 0, records(n), min_insync_replicas)

    def advance_ms(self, ms: int) -> None:
        self.clock.advance(ms / 1000.0)


class HighWatermarkTests(unittest.TestCase):
    def test_high_watermark_waits_for_every_isr_follower(self) -> None:
        """The high watermark is the smallest log end offset of the ISR; a follower not heard from holds it."""
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0, 1, 2])
        p = h.partition
        self.assertEqual(p.role, LEADER)
        h.append(3)
        self.assertEqual((p.log_end_offset, p.high_watermark), (3, 0))
        p.update_follower(1, 3)
        self.assertEqual(p.high_watermark, 0)  # follower 2 has not fetched yet
        p.update_follower(2, 1)
        self.assertEqual(p.high_watermark, 1)
        p.update_follower(2, 3)
        self.assertEqual(p.high_watermark, 3)

    def test_high_watermark_ignores_replicas_outside_the_isr(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0, 1])
        p = h.partition
        h.append(3)
        p.update_follower(1, 3)
        self.assertEqual(p.high_watermark, 3)

    def test_single_replica_isr_advances_on_append(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0])
        h.append(2)
        self.assertEqual(h.partition.high_watermark, 2)

    def test_high_watermark_never_moves_back(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0, 1])
        p = h.partition
        h.append(3)
        p.update_follower(1, 3)
        p.update_follower(1, 2)  # its log lost a record it held (an unclean restart)
        self.assertEqual((p.high_watermark, p.isr), (3, [0]))

    def test_an_isr_member_being_added_counts_for_the_high_watermark(self) -> None:
        """KIP-497: while an ISR expansion is in flight the high watermark uses the maximal ISR."""
        pending: list[defer.Deferred] = []

        def write_isr(isr: list[int]) -> defer.Deferred:
            d: defer.Deferred = defer.Deferred()
            pending.append(d)
            return d

        h = ReplicationHarness(self, write_isr=write_isr)
        h.write_state(0, 0, [0, 1])
        p = h.partition
        h.append(2)
        p.update_follower(1, 2)
        self.assertEqual(p.high_watermark, 2)
        p.update_follower(2, 2)  # follower 2 reached the high watermark: expand
        self.assertEqual(h.isr_writes, [([0, 1, 2], h.state().zk_version)])
        self.assertEqual(p.maximal_isr, [0, 1, 2])
        self.assertEqual(p.isr, [0, 1])  # not until the write succeeds
        h.append(2)
        p.update_follower(1, 4)
        self.assertEqual(p.high_watermark, 2)  # follower 2, being added, is at 2
        p.update_follower(2, 4)
        self.assertEqual(p.high_watermark, 4)
        pending[0].callback(h.state().zk_version + 1)
        self.assertEqual((p.isr, p.isr_expands), ([0, 1, 2], 1))


class IsrTests(unittest.TestCase):
    def test_follower_reaching_the_high_watermark_joins_the_isr(self) -> None:
        h = ReplicationHarness(self)
        version = h.write_state(0, 0, [0, 1])
        p = h.partition
        h.append(3)
        p.update_follower(1, 3)
        p.update_follower(2, 0)
        self.assertEqual((p.isr, h.isr_writes), ([0, 1], []))  # 2 is below the high watermark
        p.update_follower(2, 2)
        self.assertEqual(h.isr_writes, [])
        p.update_follower(2, 3)
        self.assertEqual(h.isr_writes, [([0, 1, 2], version)])
        state = h.state()
        self.assertEqual((state.isr, state.zk_version, state.leader_epoch), ([0, 1, 2], version + 1, 0))
        self.assertEqual((p.isr, p.zk_version, p.isr_expands, p.isr_shrinks), ([0, 1, 2], version + 1, 1, 0))

    def test_an_isr_member_fetching_below_the_high_watermark_leaves_at_once(self) -> None:
        """
        Follower 2 held offsets 0-2 (the high watermark counted it at 3);
        its next fetch from 1 says its log lost two acknowledged records (an
        unclean restart that lost what it had not flushed).  It leaves the
        ISR at once, not after replica.lag.time.max.ms, during which it was
        electable with those records missing (the leader's death then lost
        them); it rejoins once it has caught up.
        """
        h = ReplicationHarness(self)
        version = h.write_state(0, 0, [0, 1, 2])
        p = h.partition
        h.append(3)
        p.update_follower(1, 3)
        p.update_follower(2, 3)
        self.assertEqual(p.high_watermark, 3)
        p.update_follower(2, 1)
        self.assertEqual(h.isr_writes, [([0, 1], version)])
        self.assertEqual((h.state().isr, p.isr, p.isr_shrinks, p.high_watermark), ([0, 1], [0, 1], 1, 3))
        h.append(1)
        p.update_follower(1, 4)
        self.assertEqual(p.high_watermark, 4)  # acks=all no longer waits for it
        p.update_follower(2, 3)
        self.assertEqual(p.isr, [0, 1])  # below the high watermark still
        p.update_follower(2, 4)
        self.assertEqual((h.state().isr, p.isr, p.isr_expands), ([0, 1, 2], [0, 1, 2], 1))

    def test_follower_must_reach_the_epoch_start_offset_to_join(self) -> None:
        """A new leader's high watermark may lag its log end offset; a follower must reach the epoch's start."""
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0])
        h.append(3)
        h.partition.log.update_high_watermark(1)
        h.write_state(0, 1, [0, 2])  # leader again, at epoch 1 from offset 3; 2 has not fetched
        p = h.partition
        self.assertEqual((p.epoch_start_offset, p.high_watermark), (3, 1))
        p.update_follower(1, 1)
        self.assertEqual(p.isr, [0, 2])
        p.update_follower(1, 3)
        self.assertEqual(p.isr, [0, 2, 1])

    def test_lagging_follower_leaves_the_isr_after_replica_lag_time_max_ms(self) -> None:
        h = ReplicationHarness(self)
        version = h.write_state(0, 0, [0, 1, 2])
        p = h.partition
        h.append(3)
        p.update_follower(1, 3)
        p.update_follower(2, 1)
        h.advance_ms(LAG_MS)
        p.update_follower(1, 3)
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(p.isr, [0, 1, 2])  # not yet longer than the lag time
        h.advance_ms(1)
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(h.isr_writes, [([0, 1], version)])
        self.assertEqual((h.state().isr, h.state().zk_version), ([0, 1], version + 1))
        self.assertEqual((p.isr, p.isr_shrinks, p.high_watermark), ([0, 1], 1, 3))

    def test_an_isr_change_carries_the_zxid_its_leader_epoch_began_at(self) -> None:
        """
        The leader's ISR changes keep its epoch, and write the C{mzxid} of the
        state that began it (its election), through changes read back and
        not yet read back, and the zxid each member joined the ISR at: a
        broker that restarted since is not dated by the later writes
        (L{ReplicaManager.fence_leadership}, the controller's check of
        restarted replicas).
        """
        h = ReplicationHarness(self, watch=True)
        h.write_state(0, 0, [0, 1, 2])
        elected = h.state().mzxid
        p = h.partition
        self.assertEqual(p.leader_epoch_zxid, elected)
        h.advance_ms(LAG_MS + 1)
        p.update_follower(1, 0)
        h.replica_manager.shrink_isrs(LAG_MS)  # 2 leaves
        shrunk = h.state()
        self.assertEqual((shrunk.isr, shrunk.leader_epoch_zxid), ([0, 1], elected))
        self.assertGreater(shrunk.mzxid, elected)
        self.assertEqual([shrunk.isr_join_zxid(r) for r in shrunk.isr], [elected, elected])
        p.update_follower(2, 0)  # 2 caught up: it rejoins
        expanded = h.state()
        self.assertEqual((expanded.isr, expanded.epoch_start_zxid), ([0, 1, 2], elected))
        self.assertEqual(p.leader_epoch_zxid, elected)
        # each member keeps the zxid it joined at; 2 joined with this write
        self.assertEqual([expanded.isr_join_zxid(r) for r in expanded.isr], [elected, elected, expanded.mzxid])
        self.assertEqual(p.isr_zxids, [elected, elected, expanded.mzxid])  # read back through the watch

    def test_follower_fetching_up_to_the_previous_log_end_offset_stays(self) -> None:
        """Kafka's lastCaughtUpTimeMs: reaching the leader's LEO as of one's previous fetch counts as caught up."""
        h = ReplicationHarness(self, replicas=[0, 1])
        h.write_state(0, 0, [0, 1])
        p = h.partition
        for _ in range(5):
            h.append(1)
            p.update_follower(1, p.log_end_offset - 1)  # always one behind, but never further
            h.advance_ms(LAG_MS // 2)
            h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(p.isr, [0, 1])

    def test_a_follower_never_heard_from_leaves_the_isr(self) -> None:
        h = ReplicationHarness(self, replicas=[0, 1])
        h.write_state(0, 0, [0, 1])
        h.advance_ms(LAG_MS + 1)
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(h.partition.isr, [0])

    def test_own_isr_write_seen_first_through_the_watch_is_still_counted(self) -> None:
        """The state watch may deliver our own ISR write before the write's answer."""
        h = ReplicationHarness(self, replicas=[0, 1], watch=True)
        h.write_state(0, 0, [0, 1], apply=False)  # the watch applies it
        p = h.partition
        self.assertEqual(p.role, LEADER)
        h.advance_ms(LAG_MS + 1)
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual((p.isr, p.isr_shrinks), ([0], 1))
        p.update_follower(1, 0)
        self.assertEqual((p.isr, p.isr_expands), ([0, 1], 1))

    def test_failed_conditional_write_reloads_and_never_overwrites(self) -> None:
        h = ReplicationHarness(self)
        version = h.write_state(0, 0, [0, 1, 2])
        p = h.partition
        # Another writer (the controller) changes the state; this broker has not seen it.
        h.write_state(0, 0, [0, 1, 2], controller_epoch=7, apply=False)
        written = h.state()
        h.append(1)
        h.advance_ms(LAG_MS + 1)
        p.update_follower(1, 1)  # caught up; 2 has not fetched for longer than the lag time
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(h.isr_writes, [([0, 1], version)])  # based on the stale version: refused
        self.assertEqual(h.reloads, [(TOPIC, 0)])
        self.assertEqual(h.state(), written)  # not overwritten
        self.assertEqual((p.isr, p.zk_version, p.controller_epoch, p.isr_shrinks), ([0, 1, 2], version + 1, 7, 0))
        # with the state re-read, the next check writes on the current version
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(h.isr_writes[-1], ([0, 1], version + 1))
        self.assertEqual((h.state().isr, h.state().controller_epoch), ([0, 1], 7))
        self.assertEqual(p.isr, [0, 1])

    def test_no_second_isr_change_while_one_is_in_flight(self) -> None:
        pending: list[defer.Deferred] = []
        h = ReplicationHarness(self, write_isr=lambda isr: pending.append(defer.Deferred()) or pending[-1])
        h.write_state(0, 0, [0, 1])
        p = h.partition
        p.update_follower(2, 0)
        self.assertEqual(len(pending), 1)
        h.advance_ms(LAG_MS + 1)
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(len(pending), 1)
        pending[0].errback(BadVersionError("state changed"))
        self.assertEqual(h.reloads, [(TOPIC, 0)])
        self.assertIsNone(p._pending_isr)

    def test_a_write_answered_after_a_newer_state_is_ignored(self) -> None:
        pending: list[defer.Deferred] = []
        h = ReplicationHarness(self, write_isr=lambda isr: pending.append(defer.Deferred()) or pending[-1])
        h.write_state(0, 0, [0, 1])
        p = h.partition
        p.update_follower(2, 0)  # expand [0, 1] -> [0, 1, 2] in flight
        newer = h.write_state(0, 1, [0])  # the controller moved on meanwhile
        pending[0].callback(99)
        self.assertEqual((p.isr, p.zk_version, p.leader_epoch, p.isr_expands), ([0], newer, 1, 0))


class StateTests(unittest.TestCase):
    def test_roles_follow_the_state(self) -> None:
        h = ReplicationHarness(self)
        h.apply(None)
        p = h.partition
        self.assertEqual((p.role, p.replicas), (OFFLINE, [0, 1, 2]))
        h.write_state(1, 0, [1, 0])
        self.assertEqual((p.role, p.leader_id, p.leader_epoch, p.isr), (FOLLOWER, 1, 0, [1, 0]))
        h.write_state(0, 1, [0])
        self.assertEqual((p.role, p.leader_id, p.leader_epoch), (LEADER, 0, 1))
        h.write_state(-1, 2, [0])
        self.assertEqual((p.role, p.leader_id), (OFFLINE, -1))

    def test_stale_states_are_ignored(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 3, [0, 1, 2])
        p = h.partition
        current = h.state()
        self.assertIsNone(p.apply_state([0, 1, 2], 1, 2, [1], current.zk_version + 5))  # lower epoch
        self.assertIsNone(p.apply_state([0, 1, 2], 1, 3, [1], current.zk_version - 1))  # lower zkVersion
        self.assertIsNone(p.apply_state([0, 1, 2], 1, 3, [1], current.zk_version))  # the same one again
        self.assertEqual((p.role, p.leader_id, p.leader_epoch, p.isr, p.zk_version),
                         (LEADER, 0, 3, [0, 1, 2], current.zk_version))
        # a newer zkVersion at the same epoch changes only the ISR
        self.assertIsNone(p.apply_state([0, 1, 2], 0, 3, [0, 2], current.zk_version + 1))
        self.assertEqual((p.role, p.isr), (LEADER, [0, 2]))

    def test_check_leader_epoch(self) -> None:
        """KIP-320: an older epoch is fenced, a newer one unknown, -1 is not checked."""
        h = ReplicationHarness(self)
        h.write_state(0, 3, [0, 1, 2])
        p = h.partition
        p.check_leader_epoch(3)
        p.check_leader_epoch(-1)
        self.assertRaises(FencedLeaderEpochError, p.check_leader_epoch, 2)
        self.assertRaises(UnknownLeaderEpochError, p.check_leader_epoch, 4)

    def test_becoming_leader_assigns_the_epoch_start_offset(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0, 1, 2])
        h.append(3)
        h.write_state(1, 1, [1, 0])  # follower at epoch 1: nothing written by it here
        h.write_state(0, 2, [0, 1])
        p = h.partition
        log = p.log
        self.assertEqual((p.role, p.epoch_start_offset), (LEADER, 3))
        self.assertEqual([tuple(e) for e in log.leader_epoch_cache.entries], [(0, 0), (2, 3)])
        self.assertEqual(log.end_offset_for_epoch(0), (0, 3))
        self.assertEqual(log.end_offset_for_epoch(1), (0, 3))
        self.assertEqual(log.end_offset_for_epoch(2), (2, 3))
        h.append(2)
        self.assertEqual(log.end_offset_for_epoch(2), (2, 5))
        self.assertEqual(log.epoch_for_offset(4), 2)

    def test_min_insync_replicas_is_checked_before_appending(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0, 1])
        self.assertRaises(NotEnoughReplicasError, h.append, 1, 3)
        self.assertEqual(h.partition.log_end_offset, 0)
        h.append(1, 2)
        self.assertEqual(h.partition.log_end_offset, 1)


class ReassignmentIsrTests(unittest.TestCase):
    def test_isr_member_no_longer_assigned_is_dropped_and_the_high_watermark_moves(self) -> None:
        """
        A reassignment removed broker 2 while an ISR expansion had put it back
        (its last fetch raced the controller): the leader drops it once it
        learns the new assignment, instead of waiting on it for ever.
        """
        h = ReplicationHarness(self, replicas=[0, 1, 2])
        h.write_state(0, 1, [0, 1, 2])
        h.replicas = [0, 1]  # the reassignment completed: 2 is no longer assigned
        h.apply(h.state())
        self.assertEqual(h.isr_writes[-1][0], [0, 1])
        self.assertEqual(h.partition.isr, [0, 1])
        h.append(3)
        h.replica_manager.partitions[(TOPIC, 0)].update_follower(1, 3)
        self.assertEqual(h.partition.high_watermark, 3)
        h.partition.update_follower(2, 3)  # a late fetch of the removed replica
        self.assertEqual(h.partition.isr, [0, 1])


class IsrMembershipTests(unittest.TestCase):
    """
    Issue 27: a follower that stops fetching leaves the ISR after
    C{replica.lag.time.max.ms} whether or not anything is written meanwhile,
    and a leader adds no broker that is gone or in controlled shutdown to the
    ISR (KIP-841), also after an expansion of its lost a race with the
    controller.
    """

    def test_a_follower_that_stops_fetching_leaves_without_new_writes(self) -> None:
        h = ReplicationHarness(self)
        version = h.write_state(0, 0, [0, 1, 2])
        p = h.partition
        h.append(3)
        p.update_follower(1, 3)
        p.update_follower(2, 3)  # both caught up; 2 stops fetching here, and nothing more is written
        self.assertEqual(p.high_watermark, 3)
        for _ in range(4):
            h.advance_ms(LAG_MS // 4)
            p.update_follower(1, 3)  # 1 keeps fetching, at the log end offset
            h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(p.isr, [0, 1, 2])  # not yet longer than the lag time
        h.advance_ms(1)
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(h.isr_writes, [([0, 1], version)])
        self.assertEqual((p.isr, h.state().isr, p.isr_shrinks), ([0, 1], [0, 1], 1))
        # an acks=all write is no longer held by the stopped follower
        h.append(1)
        p.update_follower(1, 4)
        self.assertEqual(p.high_watermark, 4)

    def test_an_isr_member_never_heard_from_leaves_even_without_follower_state(self) -> None:
        """An ISR member this leader keeps no fetch state for still leaves after the lag time."""
        h = ReplicationHarness(self, replicas=[0, 1])
        h.write_state(0, 0, [0, 1])
        p = h.partition
        p.followers.clear()
        h.replica_manager.shrink_isrs(LAG_MS)  # starts counting now
        self.assertEqual(p.isr, [0, 1])
        h.advance_ms(LAG_MS + 1)
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual(p.isr, [0])

    def test_a_broker_that_is_gone_does_not_join_the_isr(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0, 1])
        p = h.partition
        h.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in (0, 1)})  # 2 went away
        self.assertFalse(h.metadata.is_replica_isr_eligible(2))
        p.update_follower(2, 0)  # its last fetch, at the high watermark
        self.assertEqual((p.isr, h.isr_writes), ([0, 1], []))
        h.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in (0, 1, 2)})  # it is back
        p.update_follower(2, 0)
        self.assertEqual(p.isr, [0, 1, 2])

    def test_a_broker_in_controlled_shutdown_does_not_join_the_isr(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0, 1])
        p = h.partition
        h.metadata.set_shutting_down_brokers({2})
        self.assertFalse(h.metadata.is_replica_isr_eligible(2))
        self.assertTrue(h.metadata.is_replica_isr_eligible(1))
        p.update_follower(2, 0)  # a fetch that was in flight when it stopped its fetchers
        self.assertEqual((p.isr, h.isr_writes), ([0, 1], []))
        h.metadata.set_shutting_down_brokers(set())
        p.update_follower(2, 0)
        self.assertEqual(p.isr, [0, 1, 2])

    def test_an_expansion_that_lost_to_the_controller_does_not_come_back_for_a_dead_broker(self) -> None:
        """
        The leader's expansion for 2 was in flight when the controller, which
        saw 2 go, wrote the state: the expansion fails on the zkVersion, the
        leader re-reads, and 2's fetches that still arrive put it back no more.
        """
        pending: list[defer.Deferred] = []

        def write_isr(isr: list[int]) -> defer.Deferred:
            d: defer.Deferred = defer.Deferred()
            pending.append(d)
            return d

        h = ReplicationHarness(self, write_isr=write_isr)
        h.write_state(0, 0, [0, 1])
        p = h.partition
        p.update_follower(2, 0)  # expand [0, 1] -> [0, 1, 2], in flight
        self.assertEqual(p.maximal_isr, [0, 1, 2])
        newer = h.write_state(0, 0, [0, 1], controller_epoch=2, apply=False)  # the controller's write
        h.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in (0, 1)})  # 2 went away
        pending[0].errback(BadVersionError("state changed"))
        self.assertEqual(h.reloads, [(TOPIC, 0)])
        self.assertEqual((p.isr, p.zk_version, p._pending_isr), ([0, 1], newer, None))
        p.update_follower(2, 0)  # late fetches of the dead broker
        p.update_follower(2, 0)
        self.assertEqual((p.isr, len(pending), h.state().isr), ([0, 1], 1, [0, 1]))

    def test_the_leaders_expansion_landing_first_refuses_the_controllers_stale_write(self) -> None:
        """
        The other order: the leader's expansion lands on ZooKeeper first and
        the controller's removal, based on the state before it, is refused;
        the leader keeps what it wrote, and the controller (which re-reads and
        decides again, see test_controller's IsrRaceTests) takes 2 out.
        """
        h = ReplicationHarness(self, watch=True)
        before = h.write_state(0, 0, [0, 1], apply=False)
        p = h.partition
        p.update_follower(2, 0)  # the expansion lands: [0, 1, 2] at before + 1
        self.assertEqual((p.isr, h.state().isr, h.state().zk_version), ([0, 1, 2], [0, 1, 2], before + 1))
        controller = h.registry.set_partition_state(TOPIC, 0, 0, 0, [0, 1], 2, expected_version=before)
        self.failureResultOf(controller, BadVersionError)
        self.assertEqual(h.state().isr, [0, 1, 2])  # not undone by the stale write
        h.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in (0, 1)})  # 2 went away
        self.successResultOf(h.registry.set_partition_state(TOPIC, 0, 0, 0, [0, 1], 2,
                                                            expected_version=before + 1))  # decided again
        self.assertEqual((p.isr, p.zk_version), ([0, 1], before + 2))  # the leader follows it
        p.update_follower(2, 0)
        self.assertEqual(p.isr, [0, 1])
