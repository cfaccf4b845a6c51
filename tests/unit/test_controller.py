"""
Unit tests of L{kafkatw.broker.controller}: the partition and replica state
tables, the election rules, and L{KafkaController} on a fake ZooKeeper with a
L{MetadataCache} (what the broker's watches would fill in, the tests set
directly): elections from the live ISR, unclean elections, controlled
shutdown, and fencing by controller epoch and zkVersion.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.broker.controller import (
    CONTROLLED_SHUTDOWN_PATH,
    PARTITION_STATES,
    REPLICA_STATES,
    IllegalStateChange,
    KafkaController,
    StateMachine,
    controlled_shutdown_leader,
    offline_partition_leader,
)
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.config import BrokerConfig
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.registry import PartitionState, Registry

# Kafka's PartitionState / ReplicaState validPreviousStates, written out again
# (not read from the module) so that a change to the tables fails here.
KAFKA_PARTITION_STATES = {
    "NonExistentPartition": {"OfflinePartition"},
    "NewPartition": {"NonExistentPartition"},
    "OnlinePartition": {"NewPartition", "OnlinePartition", "OfflinePartition"},
    "OfflinePartition": {"NewPartition", "OnlinePartition", "OfflinePartition"},
}
KAFKA_REPLICA_STATES = {
    "NonExistentReplica": {"ReplicaDeletionSuccessful"},
    "NewReplica": {"NonExistentReplica"},
    "OnlineReplica": {"NewReplica", "OnlineReplica", "OfflineReplica", "ReplicaDeletionIneligible"},
    "OfflineReplica": {"NewReplica", "OnlineReplica", "OfflineReplica", "ReplicaDeletionIneligible"},
    "ReplicaDeletionStarted": {"OfflineReplica"},
    "ReplicaDeletionSuccessful": {"ReplicaDeletionStarted"},
    "ReplicaDeletionIneligible": {"OfflineReplica", "ReplicaDeletionStarted"},
}


class StateTableTests(unittest.TestCase):
    def check_table(self, table: dict, expected: dict, initial: str) -> None:
        self.assertEqual({k: set(v) for k, v in table.items()}, expected)
        for previous in expected:
            for target in expected:
                machine = StateMachine(table, initial)
                machine.states["k"] = previous
                if previous in expected[target]:
                    machine.move("k", target)
                    self.assertEqual(machine.state("k"), target)
                else:
                    self.assertRaises(IllegalStateChange, machine.move, "k", target)
                    self.assertEqual(machine.state("k"), previous)

    def test_partition_states(self) -> None:
        self.check_table(PARTITION_STATES, KAFKA_PARTITION_STATES, "NonExistentPartition")

    def test_replica_states(self) -> None:
        self.check_table(REPLICA_STATES, KAFKA_REPLICA_STATES, "NonExistentReplica")

    def test_some_disallowed_transitions(self) -> None:
        partitions = StateMachine(PARTITION_STATES, "NonExistentPartition")
        self.assertRaises(IllegalStateChange, partitions.move, "p", "OnlinePartition")  # never created
        partitions.move("p", "NewPartition")
        self.assertRaises(IllegalStateChange, partitions.move, "p", "NewPartition")
        self.assertRaises(IllegalStateChange, partitions.move, "p", "NonExistentPartition")  # only when offline
        partitions.move("p", "OnlinePartition")
        partitions.move("p", "OfflinePartition")
        partitions.move("p", "NonExistentPartition")
        replicas = StateMachine(REPLICA_STATES, "NonExistentReplica")
        self.assertRaises(IllegalStateChange, replicas.move, "r", "OnlineReplica")
        replicas.move("r", "NewReplica")
        self.assertRaises(IllegalStateChange, replicas.move, "r", "ReplicaDeletionStarted")  # must go offline first
        replicas.forget("r")
        self.assertEqual(replicas.state("r"), "NonExistentReplica")


class ElectionRuleTests(unittest.TestCase):
    def test_offline_partition_leader_takes_the_first_live_isr_member_in_assignment_order(self) -> None:
        self.assertEqual(offline_partition_leader([3, 2, 1], [1, 2, 3], {1, 2}, False), (2, False))
        self.assertEqual(offline_partition_leader([3, 2, 1], [1, 3], {1, 2}, False), (1, False))
        self.assertEqual(offline_partition_leader([3, 2, 1], [3], {1, 2, 3}, False), (3, False))

    def test_offline_partition_leader_without_a_live_isr_member(self) -> None:
        self.assertEqual(offline_partition_leader([3, 2, 1], [3], {1, 2}, False), (-1, False))
        self.assertEqual(offline_partition_leader([3, 2, 1], [3], {1, 2}, True), (2, True))
        self.assertEqual(offline_partition_leader([3, 2, 1], [3], set(), True), (-1, False))
        self.assertEqual(offline_partition_leader([3, 2, 1], [], {1}, True), (1, True))

    def test_controlled_shutdown_leader(self) -> None:
        self.assertEqual(controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}), 2)
        self.assertEqual(controlled_shutdown_leader([1, 2, 3], [1, 3], {1, 2, 3}, {1}), 3)  # 2 is not in sync
        self.assertEqual(controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 3}, {1}), 3)  # 2 is dead
        self.assertEqual(controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}), 3)
        self.assertEqual(controlled_shutdown_leader([1, 2], [1], {1, 2}, {1}), -1)  # nobody in sync to take over


class ControllerHarness:
    """
    Brokers 1, 2 and 3 registered; the controller of broker C{broker_id},
    active.  Each partition starts led by its first replica at epoch 0 with
    every replica in sync, unless C{states} says otherwise.
    """

    def __init__(self, testcase: unittest.TestCase, assignments: dict[str, dict[int, list[int]]],
                 states: dict[tuple[str, int], tuple[int, list[int]]] | None = None, broker_id: int = 1) -> None:
        self.testcase = testcase
        self.server = FakeZooKeeper()
        self.zookeeper = FakeZooKeeperClient(self.server)
        testcase.successResultOf(self.zookeeper.start())
        self.registry = Registry(self.zookeeper)
        self.metadata = MetadataCache(broker_id)
        self.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9090 + b) for b in (1, 2, 3)})
        self.topic_configs: dict[str, dict[str, Any]] = {}
        for topic, partitions in assignments.items():
            self.add_topic(topic, partitions, states or {})
        self.controller = KafkaController(broker_id, BrokerConfig({"broker.id": broker_id}), self.registry,
                                          self.metadata, lambda t: self.topic_configs.get(t, {}))
        self.versions = {key: state.zk_version for key, state in self.metadata.partition_states.items()}
        self.assertTrue(self.wait(self.controller.elect()))
        self.testcase.assertTrue(self.controller.active)

    def add_topic(self, topic: str, partitions: dict[int, list[int]],
                  states: dict[tuple[str, int], tuple[int, list[int]]] | None = None) -> None:
        """Create a topic and its first states, as AdminManager does, and tell the controller's cache."""
        created = self.wait(self.registry.create_topic(topic, partitions))
        for p, replicas in partitions.items():
            leader, isr = (states or {}).get((topic, p), (replicas[0], list(replicas)))
            version = self.wait(self.registry.set_partition_state(topic, p, leader, 0, isr))
            self.metadata.set_partition_state(topic, p, PartitionState(leader, 0, isr, 1, version))
        self.metadata.set_topic(TopicMetadata(topic, created.topic_id, dict(created.partitions)))

    def assertTrue(self, value: Any) -> None:
        self.testcase.assertTrue(value)

    def wait(self, d: defer.Deferred) -> Any:
        return self.testcase.successResultOf(d)

    def state(self, topic: str, partition: int) -> PartitionState:
        return self.wait(self.registry.get_partition_state(topic, partition))

    def summary(self, topic: str, partition: int) -> tuple[int, int, list[int]]:
        """(leader, leader epoch, ISR) in ZooKeeper; also checks the controller's cache agrees."""
        state = self.state(topic, partition)
        self.testcase.assertEqual(self.metadata.partition_states[(topic, partition)], state)
        return state.leader, state.leader_epoch, state.isr

    def broker_died(self, broker_id: int) -> None:
        brokers = dict(self.metadata.brokers)
        del brokers[broker_id]
        self.metadata.set_brokers(brokers)
        self.wait(self.controller.brokers_changed(brokers))


class ControllerTests(unittest.TestCase):
    def test_activation_bumps_the_controller_epoch_and_leaves_live_leaders_alone(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2, 3], 1: [2, 3, 1]}})
        self.assertEqual(h.controller.epoch, 1)
        self.assertEqual(self.successResultOf(h.registry.get_controller_epoch()), 1)
        for p in (0, 1):
            self.assertEqual(h.state("t", p).zk_version, h.versions[("t", p)])
            self.assertEqual(h.controller.partition_states.state(("t", p)), "OnlinePartition")
        self.assertEqual(h.controller.elections, 0)

    def test_leader_death_elects_from_the_live_isr_and_drops_dead_followers(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 2, 1], 1: [1, 2, 3], 2: [2, 3, 1]}},
                              states={("t", 0): (3, [3, 1, 2])})
        h.broker_died(3)
        # t-0: the first live ISR member in assignment order (2, not 1), epoch + 1
        self.assertEqual(h.summary("t", 0), (2, 1, [1, 2]))
        # t-1, t-2: a dead follower leaves the ISR at once, the epoch stays
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2]))
        self.assertEqual(h.summary("t", 2), (2, 0, [2, 1]))
        self.assertEqual(h.state("t", 0).controller_epoch, h.controller.epoch)
        self.assertEqual((h.controller.elections, h.controller.unclean_elections), (1, 0))
        self.assertEqual(h.controller.partition_states.state(("t", 0)), "OnlinePartition")
        self.assertEqual(h.controller.replica_states.state(("t", 0, 3)), "OfflineReplica")
        self.assertEqual(h.controller.replica_states.state(("t", 0, 2)), "OnlineReplica")
        self.assertEqual(h.metadata.leader("t", 0), 2)

    def test_no_live_isr_member_keeps_the_partition_offline(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 1], 1: [3, 2]}}, states={("t", 0): (3, [3])})
        h.broker_died(3)
        state = h.state("t", 0)
        self.assertEqual((state.leader, state.leader_epoch, state.isr, state.zk_version),
                         (3, 0, [3], h.versions[("t", 0)]))  # nothing written
        self.assertEqual(h.controller.partition_states.state(("t", 0)), "OfflinePartition")
        self.assertEqual(h.metadata.leader("t", 0), -1)
        self.assertEqual(h.controller.unclean_elections, 0)
        self.assertEqual(h.summary("t", 1), (2, 1, [2]))  # the others are still elected

    def test_unclean_leader_election(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 1, 2]}}, states={("t", 0): (3, [3])})
        h.topic_configs["t"] = {"unclean.leader.election.enable": True}
        h.broker_died(3)
        self.assertEqual(h.summary("t", 0), (1, 1, [1]))
        self.assertEqual((h.controller.elections, h.controller.unclean_elections), (1, 1))

    def test_partition_created_after_activation_can_go_offline_and_be_elected(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2]}})
        h.add_topic("u", {0: [3], 1: [3, 1]})
        h.wait(h.controller.topics_changed())
        h.broker_died(3)
        self.assertEqual(h.controller.partition_states.state(("u", 0)), "OfflinePartition")
        self.assertEqual(h.summary("u", 1), (1, 1, [1]))
        self.assertEqual(h.controller.partition_states.state(("u", 1)), "OnlinePartition")

    def test_returning_leader_brings_an_offline_partition_back_online(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 1]}}, states={("t", 0): (3, [3])})
        h.broker_died(3)
        self.assertEqual(h.controller.partition_states.state(("t", 0)), "OfflinePartition")
        brokers = {**h.metadata.brokers, 3: BrokerEndpoint(3, "127.0.0.1", 9093)}
        h.metadata.set_brokers(brokers)
        h.wait(h.controller.brokers_changed(brokers))
        self.assertEqual(h.controller.partition_states.state(("t", 0)), "OnlinePartition")
        self.assertEqual(h.metadata.leader("t", 0), 3)
        # elected again at a new epoch, as Kafka does, and written to ZooKeeper
        self.assertEqual(h.summary("t", 0), (3, 1, [3]))
        self.assertEqual(h.state("t", 0).leader_epoch, 1)

    def test_controlled_shutdown_moves_leadership_and_leaves_the_isr(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 1, 2], 1: [1, 3, 2], 2: [3, 1]}},
                              states={("t", 2): (3, [3])})
        other = FakeZooKeeperClient(h.server)
        self.successResultOf(other.start())
        self.successResultOf(other.create(f"{CONTROLLED_SHUTDOWN_PATH}/3", b"", ephemeral=True, makepath=True))
        self.assertEqual(h.controller.shutting_down, {3})
        self.assertEqual(h.summary("t", 0), (1, 1, [1, 2]))
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2]))
        self.assertEqual(h.summary("t", 2), (3, 0, [3]))  # nobody in sync to take over: it stays

    def test_a_newer_controller_fences_the_old_one(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 1, 2]}})
        before = h.state("t", 0)
        # broker 1's session ends (its /controller goes) and broker 2 becomes controller
        # before broker 1 has heard of it
        h.server.expire(h.zookeeper.session_id)
        other = FakeZooKeeperClient(h.server)
        self.successResultOf(other.start())
        self.assertTrue(self.successResultOf(Registry(other).elect_controller(2)))
        self.assertEqual(self.successResultOf(Registry(other).get_controller_epoch()), 2)
        h.broker_died(3)
        self.assertEqual(h.state("t", 0), before)  # the deposed controller wrote nothing
        self.assertFalse(h.controller.active)
        self.assertEqual(h.controller.elections, 0)

    def test_resigned_controller_handles_no_events(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 1, 2]}})
        h.controller.controller_changed(2)
        self.assertFalse(h.controller.active)
        before = h.state("t", 0)
        h.broker_died(3)
        self.assertEqual(h.state("t", 0), before)

    def test_stale_zk_version_is_re_read_never_overwritten(self) -> None:
        """The leader shrank the ISR meanwhile: the controller must not elect from its stale view."""
        h = ControllerHarness(self, {"t": {0: [3, 1, 2]}})
        version = h.wait(h.registry.set_partition_state("t", 0, 3, 0, [3, 2], 1, expected_version=h.versions[("t", 0)]))
        h.broker_died(3)
        fresh = h.state("t", 0)
        self.assertEqual((fresh.leader, fresh.isr, fresh.zk_version), (3, [3, 2], version))  # not overwritten
        self.assertEqual(h.metadata.partition_states[("t", 0)], fresh)  # re-read
        self.assertEqual(h.controller.elections, 0)
        # the next event (the broker's state watch calls topics_changed) elects from the fresh ISR
        h.wait(h.controller.topics_changed())
        self.assertEqual(h.summary("t", 0), (2, 1, [2]))  # not 1, which had left the ISR


class ControllerElectionTests(unittest.TestCase):
    def test_concurrent_elections_share_one_result_and_one_epoch(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2]}})
        h.controller.resign()
        h.wait(h.zookeeper.delete("/controller"))
        first, second = h.controller.elect(), h.controller.elect()
        self.assertTrue(h.wait(first))
        self.assertTrue(h.wait(second))
        self.assertEqual(h.controller.epoch, 2)
        self.assertEqual(h.wait(h.registry.get_controller_epoch()), 2)
