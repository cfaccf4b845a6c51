"""
Unit tests of L{kafkatw.broker.controller}: the partition and replica state
tables, the election rules, and L{KafkaController} on a fake ZooKeeper with a
L{MetadataCache} (what the broker's watches would fill in, the tests set
directly): elections from the live ISR, unclean elections, controlled
shutdown, and fencing by controller epoch and zkVersion.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.trial import unittest

from kafkatw.broker.controller import (
    CONTROLLED_SHUTDOWN_PATH,
    PARTITION_STATES,
    REPLICA_STATES,
    IllegalStateChange,
    MAX_SETTLE_ATTEMPTS,
    SETTLE_BATCH_SIZE,
    KafkaController,
    StateMachine,
    controlled_shutdown_leader,
    offline_partition_leader,
)
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.broker.replica_manager import ReplicaManager
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.bridge import ZooKeeperError, ZooKeeperUnavailableError
from kafkatw.zookeeper.registry import PartitionStateWrite, Registry
from kafkatw.zookeeper.zk_data import PartitionState, partition_state_path

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
            self.wait(self.registry.set_partition_state(topic, p, leader, 0, isr))
            self.metadata.set_partition_state(topic, p, self.state(topic, p))  # as the broker's watch reads it
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
        """
        The leader shrank the ISR meanwhile: the controller's write based on
        its stale view is refused, and the same event re-reads the state and
        elects from the fresh ISR (it does not wait for another event).
        """
        h = ControllerHarness(self, {"t": {0: [3, 1, 2]}})
        version = h.wait(h.registry.set_partition_state("t", 0, 3, 0, [3, 2], 1, expected_version=h.versions[("t", 0)]))
        h.broker_died(3)
        fresh = h.state("t", 0)
        # 2, not 1, which had left the ISR; one write, on the version the leader wrote
        self.assertEqual(h.summary("t", 0), (2, 1, [2]))
        self.assertEqual(fresh.zk_version, version + 1)
        self.assertEqual(h.controller.elections, 1)


class ConnectionLossTests(unittest.TestCase):
    """An event that loses its ZooKeeper connection runs again once it is back (Kafka's retryRequestsUntilConnected)."""

    def test_an_event_that_lost_zookeeper_runs_again_once_it_is_back(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 2, 1], 1: [1, 2, 3]}}, states={("t", 0): (3, [3, 1, 2])})
        brokers = dict(h.metadata.brokers)
        del brokers[3]
        h.metadata.set_brokers(brokers)
        h.zookeeper.disconnect()  # the event's first read fails with ConnectionLoss
        done = h.controller.brokers_changed(brokers)
        self.assertNoResult(done)
        h.zookeeper.reconnect()
        self.successResultOf(done)
        self.assertTrue(h.controller.active)
        self.assertEqual(h.summary("t", 0), (2, 1, [1, 2]))  # elected, and 3 out of every ISR
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2]))

    def test_an_event_of_an_earlier_term_is_not_run_again(self) -> None:
        """Deposed while the connection was gone: the event ends, nothing is written."""
        h = ControllerHarness(self, {"t": {0: [3, 2, 1]}}, states={("t", 0): (3, [3, 1, 2])})
        brokers = dict(h.metadata.brokers)
        del brokers[3]
        h.metadata.set_brokers(brokers)
        h.zookeeper.disconnect()
        done = h.controller.brokers_changed(brokers)
        h.controller.resign()  # another broker holds /controller now
        h.zookeeper.reconnect()
        self.successResultOf(done)
        self.assertEqual(h.state("t", 0).zk_version, h.versions[("t", 0)])


class ControllerRetryTests(unittest.TestCase):
    """Issue 27: a controller write that lost to the leader's is decided again, never dropped."""

    def racing_leader(self, h: ControllerHarness, wins: int, isr: list[int], topic: str = "t") -> list[int]:
        """
        Before each of the controller's next C{wins} writes of C{topic}-0, the
        leader's ISR write (to C{isr}) lands first.

        @return: the controller's write attempts, as their expected zkVersions.
        """
        real = h.registry.set_partition_state  # the leader's (unfenced) ISR write
        attempts: list[int] = []
        real_batch = h.registry.set_partition_states  # every write of the controller, one partition or many

        def set_partition_states(writes: list[PartitionStateWrite], controller_epoch: int,
                                 controller_epoch_zk_version: int) -> defer.Deferred:
            for write in writes:
                if (write.topic, write.partition) == (topic, 0):
                    attempts.append(write.expected_version)
                    if len(attempts) <= wins:
                        current = h.state(topic, 0)
                        h.wait(real(topic, 0, current.leader, current.leader_epoch, isr, 1,
                                    expected_version=current.zk_version))
            return real_batch(writes, controller_epoch, controller_epoch_zk_version)

        h.registry.set_partition_states = set_partition_states  # type: ignore[method-assign]
        return attempts

    def test_a_lost_removal_is_decided_again_in_the_same_event(self) -> None:
        """The leader shrinks lagging 2 out just as the controller takes dead 3 out: both stay out."""
        h = ControllerHarness(self, {"t": {0: [1, 2, 3]}})
        attempts = self.racing_leader(h, 1, [1, 3])
        h.broker_died(3)
        self.assertEqual(h.summary("t", 0), (1, 0, [1]))
        self.assertEqual(attempts, [h.versions[("t", 0)], h.versions[("t", 0)] + 1])

    def test_a_topic_named_controller_epoch_is_not_taken_for_a_new_controller(self) -> None:
        """
        A lost write of C{/brokers/topics/controller_epoch/partitions/0/state},
        alone or in a batch, is decided again; the controller does not resign
        (its fence is told by the error's type, not by a path in its message).
        """
        for partitions in (1, 2):
            h = ControllerHarness(self, {"controller_epoch": {p: [1, 2, 3] for p in range(partitions)}})
            attempts = self.racing_leader(h, 1, [1, 3], topic="controller_epoch")
            h.broker_died(3)
            self.assertTrue(h.controller.active, partitions)
            # alone: lost, then decided again; in a batch: the refused batch, its lone write from the stale
            # state (lost), then decided again from the state re-read
            self.assertEqual(len(attempts), 2 if partitions == 1 else 3, partitions)
            self.assertEqual(h.summary("controller_epoch", 0), (1, 0, [1]))  # the leader shrank 2 out first
            for p in range(1, partitions):
                self.assertEqual(h.summary("controller_epoch", p), (1, 0, [1, 2]))

    def test_a_leader_winning_every_attempt_leaves_the_partition_to_a_re_run(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2, 3], 1: [2, 3, 1]}})
        attempts = self.racing_leader(h, MAX_SETTLE_ATTEMPTS + 2, [1, 2, 3])
        h.broker_died(3)
        # t-0 lost its batch's write (with t-1's: neither written) and MAX_SETTLE_ATTEMPTS writes of its
        # own in the event; t-1 was settled meanwhile; the re-run settled t-0
        self.assertEqual(h.summary("t", 0), (1, 0, [1, 2]))
        self.assertEqual(h.summary("t", 1), (2, 0, [2, 1]))
        self.assertEqual(len(attempts), MAX_SETTLE_ATTEMPTS + 2 + 1)  # the winning one
        self.assertEqual(h.controller._unsettled, set())

    def test_a_preferred_election_that_lost_its_write_is_decided_again(self) -> None:
        """
        ElectLeaders (preferred) for t-0 while its leader shrinks the ISR:
        the lost write is decided again from the fresh state, and success is
        reported only for a state written.
        """
        h = ControllerHarness(self, {"t": {0: [1, 2, 3]}}, states={("t", 0): (2, [2, 1, 3])})
        attempts = self.racing_leader(h, 1, [2, 1])  # still in sync: elected at the second attempt
        results = h.wait(h.controller.elect_leaders(0, [("t", 0)]))
        self.assertEqual(results, {("t", 0): (ErrorCode.none, None)})
        self.assertEqual(h.summary("t", 0), (1, 1, [2, 1]))
        self.assertEqual(len(attempts), 2)

    def test_a_preferred_election_whose_replica_left_the_isr_meanwhile_reports_it(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2, 3]}}, states={("t", 0): (2, [2, 1, 3])})
        self.racing_leader(h, 1, [2, 3])  # the leader shrinks 1 out first: no election possible
        results = h.wait(h.controller.elect_leaders(0, [("t", 0)]))
        self.assertEqual(results[("t", 0)][0], ErrorCode.preferred_leader_not_available)
        self.assertEqual(h.summary("t", 0), (2, 0, [2, 3]))

    def test_an_election_losing_every_write_reports_an_error(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2, 3]}}, states={("t", 0): (2, [2, 1, 3])})
        self.racing_leader(h, MAX_SETTLE_ATTEMPTS, [2, 1, 3])
        results = h.wait(h.controller.elect_leaders(0, [("t", 0)]))
        self.assertEqual(results[("t", 0)][0], ErrorCode.unknown_server_error)
        self.assertEqual(h.state("t", 0).leader, 2)

    def test_a_state_deleted_under_the_controller_is_dropped_from_its_cache(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2, 3]}})
        version = h.wait(h.registry.set_partition_state("t", 0, 1, 0, [1, 2, 3]))
        h.metadata.set_partition_state("t", 0, PartitionState(1, 0, [1, 2, 3], 1, version))
        h.wait(h.zookeeper.delete(partition_state_path("t", 0)))  # the topic is being deleted
        h.broker_died(3)
        self.assertIsNone(h.state("t", 0))
        self.assertNotIn(("t", 0), h.metadata.partition_states)


class EventQueueTests(unittest.TestCase):
    """
    Issue 27: the controller's event queue with thousands of events queued
    behind one that waits -- what a failover of a few hundred partitions
    queues, one notification per state write.  The queue once handed over
    from event to event inside the previous one's stack: at about 120
    events that finished without I/O, C{RecursionError}, and the queue
    stayed locked for good.
    """

    def test_thousands_of_events_queued_behind_a_waiting_one_all_run(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2, 3]}})
        gate: defer.Deferred = defer.Deferred()
        h.controller.run(lambda: gate)
        ran: list[int] = []
        done = [h.controller.run(lambda i=i: defer.succeed(ran.append(i))) for i in range(3000)]
        with LogFailures() as failures:
            gate.callback(None)
        self.assertEqual(failures.failures, [])
        self.assertEqual(ran, list(range(3000)))
        for d in done:
            self.assertIsNone(self.successResultOf(d))
        h.broker_died(3)  # and the controller still acts
        self.assertEqual(h.summary("t", 0), (1, 0, [1, 2]))

    def test_a_failed_event_is_logged_and_the_next_one_runs(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2, 3]}})

        def fail() -> None:
            raise RuntimeError("boom")

        with LogFailures() as failures:
            first = h.controller.run(fail)
            second = h.controller.run(lambda: defer.succeed(None))
        self.assertEqual([f.type for f in failures.failures], [RuntimeError])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertIsNone(self.successResultOf(first))
        self.assertIsNone(self.successResultOf(second))

    def test_settling_passes_queued_meanwhile_share_one_run(self) -> None:
        """Two thousand C{topics_changed} while an event waits: one pass settles them all."""
        h = ControllerHarness(self, {"t": {p: [1, 2, 3] for p in range(30)}})
        passes: list[int] = []
        settle_all = h.controller._settle_all

        async def counted() -> None:
            passes.append(1)
            await settle_all()

        h.controller._settle_all = counted  # type: ignore[method-assign]
        gate: defer.Deferred = defer.Deferred()
        h.controller.run(lambda: gate)
        waiters = [h.controller.topics_changed() for _ in range(2000)]
        with LogFailures() as failures:
            gate.callback(None)
        self.assertEqual(failures.failures, [])
        self.assertEqual(len(passes), 1)
        for d in waiters:
            self.assertIsNone(self.successResultOf(d))
        # a call after the pass has started queues a new one, which runs
        self.assertIsNone(self.successResultOf(h.controller.topics_changed()))
        self.assertEqual(len(passes), 2)

    def test_a_pass_skipped_by_a_resigned_controller_does_not_stop_later_ones(self) -> None:
        h = ControllerHarness(self, {"t": {0: [1, 2, 3]}})
        h.controller.controller_changed(2)
        self.assertIsNone(self.successResultOf(h.controller.topics_changed()))
        self.assertIsNone(self.successResultOf(h.controller.partition_changed(("t", 0))))
        self.assertTrue(h.wait(h.controller.elect()))  # /controller is still ours: active again
        brokers = {b: e for b, e in h.metadata.brokers.items() if b != 3}
        h.metadata.set_brokers(brokers)
        h.controller.live = set(brokers)
        self.assertIsNone(self.successResultOf(h.controller.partition_changed(("t", 0))))
        self.assertEqual(h.summary("t", 0), (1, 0, [1, 2]))

    def test_a_failover_with_every_write_notifying_the_controller(self) -> None:
        """
        Broker 3 dies leading a third of 900 partitions, and every state
        write notifies the controller back, as the broker's state watches
        do: every partition is settled, nothing fails, the notifications
        are settled one partition each (not a pass over all 900 each), and
        the controller still acts afterwards.
        """
        count = 900
        h = ControllerHarness(self, {"t": {p: [(p + i) % 3 + 1 for i in range(3)] for p in range(count)}})
        notified: list[tuple[str, int]] = []

        def changed(partition: int, state: PartitionState | None) -> None:
            notified.append(("t", partition))
            h.metadata.set_partition_state("t", partition, state)
            h.controller.partition_changed(("t", partition))

        for p in range(count):
            h.wait(h.registry.watch_partition_state("t", p, lambda state, p=p: changed(p, state)))
        notified.clear()  # the watches' first reads
        decided: list[tuple[str, int]] = []
        decide = h.controller._decide

        def counted(key: tuple[str, int], state: Any) -> Any:
            decided.append(key)
            return decide(key, state)

        h.controller._decide = counted  # type: ignore[method-assign]
        with LogFailures() as failures:
            h.broker_died(3)
        self.assertEqual(failures.failures, [])
        self.assertEqual(len(notified), count)  # one write each: 300 elections, 600 ISR removals
        for p in range(count):
            state = h.state("t", p)
            self.assertNotEqual(state.leader, 3)
            self.assertNotIn(3, state.isr)
        self.assertLess(len(decided), 6 * count)
        self.assertEqual(h.controller.elections, count // 3)
        h.broker_died(2)
        self.assertEqual({h.state("t", p).leader for p in range(count)}, {1})


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

    def elect_through_a_lost_answer(self, step: str, epoch: int) -> KafkaController:
        """
        An election whose connection loses ZooKeeper's answers (a one-way
        partition) when C{step} (C{"create"} of C{/controller}, or C{"epoch"},
        its increment) is sent: the write is made, the client is told
        C{ConnectionLoss}; once the connection is back, the election completes
        at controller epoch C{epoch}.
        """
        clock = Clock()
        server = FakeZooKeeper(clock, tick_time_ms=500)
        client = FakeZooKeeperClient(server)
        self.successResultOf(client.start())
        registry = Registry(client)
        self.successResultOf(client.create("/controller_epoch", b"4"))
        controller = KafkaController(1, BrokerConfig({"broker.id": 1}), registry, MetadataCache(1), lambda t: {})
        if step == "create":
            client.partition(replies_only=True)
        else:
            set_data = client.set

            def cut_then_set(path: str, *args: Any, **kwargs: Any) -> defer.Deferred:
                if path == "/controller_epoch":
                    client.set = set_data  # once
                    client.partition(replies_only=True)
                return set_data(path, *args, **kwargs)

            client.set = cut_then_set  # type: ignore[method-assign]
        elected = controller.elect()
        clock.advance(client.session_timeout_ms / 1000.0)  # the client notices: ConnectionLoss, SUSPENDED
        self.assertNoResult(elected)
        self.assertFalse(controller.active)
        client.heal()
        self.assertTrue(self.successResultOf(elected))
        self.assertTrue(controller.active)
        self.assertEqual(controller.epoch, epoch)
        self.assertEqual(self.successResultOf(registry.get_controller_epoch()), epoch)
        self.assertEqual(self.successResultOf(client.exists("/controller")).ephemeralOwner, client.session_id)
        return controller

    def test_an_election_whose_create_was_answered_by_a_connection_loss_completes_once_connected(self) -> None:
        """
        The simulation's seed 9119 (C{--disk-model --transactions --groups
        --faults 12 --window 40}): the create of C{/controller} was made but
        its answer lost; the broker held C{/controller} without having
        incremented the epoch, and the next election found it and said "not
        us": no broker was the controller again.
        """
        controller = self.elect_through_a_lost_answer("create", 5)
        # and the next election of the same session is the same one: no new epoch
        controller.resign()
        self.assertTrue(self.successResultOf(controller.elect()))
        self.assertEqual(controller.epoch, 5)

    def test_an_election_whose_epoch_increment_was_answered_by_a_connection_loss_completes_once_connected(
            self) -> None:
        # the lost increment was made: the epoch grows past it (epochs only need to grow)
        self.elect_through_a_lost_answer("epoch", 6)


# --- ISR membership under races (issue 27) ------------------------------------------------------
#
# A simulated cluster: one FakeZooKeeper whose operations and watch notifications
# wait in one FIFO channel per ZooKeeper session (ZooKeeper answers a session's
# requests and delivers its notifications in order), brokers wired as KafkaServer
# wires its controller, metadata cache and replica manager, and what brokers do on
# their own (a follower's fetch, SIGTERM, an ISR shrink check) in channels of their
# own.  Hypothesis picks which channel moves next, so every interleaving of the
# leader's ISR writes, the controller's reads and writes, the watches that tell
# each of the other and the controller moving between brokers can come up.


class Steps:
    """Work waiting in named FIFO channels; L{run} takes the head of one."""

    def __init__(self) -> None:
        self.channels: dict[str, collections.deque[tuple[str, Callable[[], object]]]] = {}
        self.trace: list[str] = []

    def add(self, channel: str, label: str, work: Callable[[], object]) -> None:
        self.channels.setdefault(channel, collections.deque()).append((label, work))

    def ready(self) -> list[str]:
        return sorted(name for name, queue in self.channels.items() if queue)

    def drop(self, channel: str) -> None:
        self.channels.pop(channel, None)

    def run(self, channel: str) -> None:
        label, work = self.channels[channel].popleft()
        self.trace.append(f"{channel}: {label}")
        work()

    def run_until_quiet(self, choose: Callable[[list[str]], str], max_steps: int = 5000) -> None:
        """
        @raise AssertionError: still busy after C{max_steps} (the brokers and
            the controller did not settle).
        """
        for _ in range(max_steps):
            ready = self.ready()
            if not ready:
                return
            self.run(choose(ready))
        raise AssertionError(f"not quiet after {max_steps} steps: {self.ready()}")


class SteppedZooKeeper(FakeZooKeeper):
    """A L{FakeZooKeeper} whose watch notifications wait in their session's channel."""

    def __init__(self, steps: Steps) -> None:
        super().__init__()
        self.steps = steps

    def _fire(self, path: str, what: str) -> None:
        for client in list(self.clients):
            for watch in list(client._watches):
                if watch.abs_path == path and (
                    (watch.kind == "children" and what in ("child", "created", "deleted"))
                    or (watch.kind in ("data", "versioned", "stat") and what in ("created", "changed", "deleted"))
                ):
                    channel = getattr(client, "channel", None)
                    if channel is None:
                        watch._refresh()  # the test's own session
                    else:
                        self.steps.add(channel, f"notify {self._rel(path)}", watch._refresh)

    @staticmethod
    def _rel(path: str) -> str:
        return path.removeprefix("/kafkatw")


class OrderedWatches(dict):
    """The set of a client's watches, iterated in the order they were set (so runs repeat exactly)."""

    def add(self, watch: Any) -> None:
        self[watch] = None

    def discard(self, watch: Any) -> None:
        self.pop(watch, None)


class SteppedClient(FakeZooKeeperClient):
    """
    A L{FakeZooKeeperClient} whose operations wait in its channel and reach
    the server when the channel moves; L{stop} is the process ending: what
    was waiting is dropped.
    """

    def __init__(self, server: SteppedZooKeeper, channel: str) -> None:
        super().__init__(server)
        self.channel = channel
        self.steps = server.steps
        self._watches = OrderedWatches()  # type: ignore[assignment]

    def _op(self, fn: Callable[[], Any]) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()

        def run() -> None:
            if not self._connected:
                d.errback(ZooKeeperUnavailableError("not connected (fake)"))
                return
            try:
                result = fn()
            except ZooKeeperError as e:
                d.errback(e)
            else:
                d.callback(result)

        self.steps.add(self.channel, "operation", run)
        return d

    def stop(self) -> defer.Deferred:
        self.steps.drop(self.channel)
        return super().stop()


class MemoryLog:
    """What a L{Partition} reads of its log when nothing is appended: offsets."""

    def __init__(self, log_end_offset: int) -> None:
        self.log_start_offset = 0
        self.log_end_offset = log_end_offset
        self.high_watermark = log_end_offset

    def maybe_assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        pass

    def update_high_watermark(self, offset: int) -> bool:
        offset = max(self.log_start_offset, min(offset, self.log_end_offset))
        moved, self.high_watermark = offset != self.high_watermark, offset
        return moved


class MemoryLogManager:
    def __init__(self, log_end_offset: int) -> None:
        self.log_end_offset = log_end_offset
        self.logs: dict[tuple[str, int], MemoryLog] = {}

    def get(self, topic: str, partition: int) -> MemoryLog:
        return self.logs.setdefault((topic, partition), MemoryLog(self.log_end_offset))


LOG_END_OFFSET = 10
SIM_LAG_MS = 10_000


class SimBroker:
    """
    One broker of the simulated cluster: its ZooKeeper session, metadata
    cache, controller and hosted partitions, wired as
    L{kafkatw.broker.server.KafkaServer} wires them (C{_brokers_changed},
    C{_shutdowns_changed}, C{_partition_state_changed},
    C{_reload_partition_state}, C{_controller_changed}).
    """

    def __init__(self, cluster: "SimCluster", broker_id: int, candidate: bool) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.client = SteppedClient(cluster.server, f"zk{broker_id}")
        self.registry = Registry(self.client)
        self.metadata = MetadataCache(broker_id)
        self.candidate = candidate
        self.controller = KafkaController(broker_id, BrokerConfig({"broker.id": broker_id}), self.registry,
                                          self.metadata, lambda topic: {})
        now_ms = lambda: int(cluster.clock.seconds() * 1000)  # noqa: E731
        self.replica_manager = ReplicaManager(
            broker_id, MemoryLogManager(LOG_END_OFFSET), self.metadata, cluster.clock, lambda topic: {},
            write_isr=self.registry.set_partition_state, reload_state=self.reload_state, now_ms=now_ms)
        self.running = False

    def start(self) -> None:
        """The start-up's watches and registration (their reads wait in the channel)."""
        self.running = True
        self.cluster.testcase.successResultOf(self.client.start())
        for topic, partitions in self.cluster.assignments.items():
            self.metadata.set_topic(TopicMetadata(topic, self.cluster.topic_ids[topic], dict(partitions)))
        self.registry.watch_brokers(self.brokers_changed, detailed=True)
        self.client.watch_children(CONTROLLED_SHUTDOWN_PATH, self.shutdowns_changed)
        for topic, partitions in self.cluster.assignments.items():
            for partition in partitions:
                self.registry.watch_partition_state(
                    topic, partition, lambda state, t=topic, p=partition: self.partition_state_changed(t, p, state))
        self.registry.register_broker(self.broker_id, "127.0.0.1", 9090 + self.broker_id)

    def watch_controller(self) -> None:
        """The last step of the start-up: follow C{/controller}, and take it when it is free."""
        if self.candidate:
            self.registry.watch_controller(self.controller_changed)

    def stop(self) -> None:
        """The process ends: its session closes (its ephemeral znodes go) and nothing more runs here."""
        self.running = False
        self.client.stop()

    def brokers_changed(self, infos: dict[int, Any]) -> None:
        self.metadata.set_brokers({b: BrokerEndpoint(b, i.host, i.port) for b, i in infos.items()})
        self.controller.brokers_changed(infos)

    def shutdowns_changed(self, ids: list[str]) -> None:
        self.metadata.set_shutting_down_brokers({int(i) for i in ids})

    def partition_state_changed(self, topic: str, partition: int, state: PartitionState | None) -> None:
        cached = self.metadata.partition_states.get((topic, partition))
        if state is not None and cached is not None and (state.leader_epoch, state.zk_version) < (
                cached.leader_epoch, cached.zk_version):
            state = cached
        self.metadata.set_partition_state(topic, partition, state)
        self.replica_manager.apply_state(topic, partition, self.cluster.assignments[topic][partition], state)
        if self.controller.active:
            self.controller.partition_changed((topic, partition))

    def reload_state(self, topic: str, partition: int) -> None:
        d = self.registry.get_partition_state(topic, partition)
        d.addCallback(lambda state: self.partition_state_changed(topic, partition, state))

    def controller_changed(self, controller_id: int | None) -> None:
        self.metadata.controller_id = controller_id if controller_id is not None else -1
        self.controller.controller_changed(controller_id)
        if controller_id is None or (controller_id == self.broker_id and not self.controller.active):
            self.controller.elect()

    def fetch(self, follower: int, topic: str, partition: int, offset: int) -> None:
        """A fetch of broker C{follower}'s replica reaches this broker (its leader, or no longer)."""
        p = self.replica_manager.partitions.get((topic, partition))
        if p is not None:
            p.update_follower(follower, offset)


class SimCluster:
    """
    Brokers 1, 2 and 3 (1 and 2 can be controller, 1 is at first), topic
    C{t} with partitions assigned as given, each partition state written
    first as C{states} says (leader epoch 0).
    """

    def __init__(self, testcase: unittest.TestCase, assignments: dict[int, list[int]],
                 states: dict[int, tuple[int, list[int]]]) -> None:
        self.testcase = testcase
        self.steps = Steps()
        self.server = SteppedZooKeeper(self.steps)
        self.clock = Clock()
        self.clock.advance(1000)
        self.admin = FakeZooKeeperClient(self.server)  # the test's own session: not stepped
        testcase.successResultOf(self.admin.start())
        self.admin_registry = Registry(self.admin)
        self.assignments = {"t": dict(assignments)}
        created = testcase.successResultOf(self.admin_registry.create_topic("t", assignments))
        self.topic_ids = {"t": created.topic_id}
        for partition, (leader, isr) in states.items():
            testcase.successResultOf(self.admin_registry.set_partition_state("t", partition, leader, 0, isr))
        # left by earlier shutdowns: a request is then one notification per watch
        testcase.successResultOf(self.admin.ensure_path(CONTROLLED_SHUTDOWN_PATH))
        self.brokers = {b: SimBroker(self, b, candidate=b in (1, 2)) for b in (1, 2, 3)}
        for broker in self.brokers.values():
            broker.start()
        self.settle_in_order()
        for broker in self.brokers.values():  # broker 1 first: it becomes the controller
            broker.watch_controller()
            self.settle_in_order()
        testcase.assertTrue(self.brokers[1].controller.active)
        for partition, (leader, isr) in states.items():
            testcase.assertEqual((self.state(partition).leader, self.state(partition).isr), (leader, isr))

    def settle_in_order(self) -> None:
        self.steps.run_until_quiet(lambda ready: ready[0])

    def act(self, channel: str, label: str, work: Callable[[], object]) -> None:
        self.steps.add(channel, label, work)

    def state(self, partition: int) -> PartitionState:
        return self.testcase.successResultOf(self.admin_registry.get_partition_state("t", partition))

    def live(self) -> set[int]:
        return {b for b, broker in self.brokers.items() if broker.running}

    def shutting_down(self) -> set[int]:
        try:
            ids = self.testcase.successResultOf(self.admin.get_children(CONTROLLED_SHUTDOWN_PATH))
        except Exception:
            return set()
        return {int(i) for i in ids}

    def check_settled(self) -> None:
        """
        The cluster is as the controller must leave it once every event ran:

          - no ISR lists a broker that is gone or shutting down, but for a
            leader that nobody in sync can take over from;
          - a partition is led by a broker shutting down, or has no live
            leader, only when no live ISR member can take over;
          - exactly one active controller, at the current epoch;
          - every running broker's cache and hosted partition agree with
            ZooKeeper, and no ISR change is in flight.
        """
        tc = self.testcase
        live, leaving = self.live(), self.shutting_down()
        active = [b for b in live if self.brokers[b].controller.active]
        tc.assertEqual(len(active), 1, f"active controllers: {active}")
        for partition, replicas in self.assignments["t"].items():
            state = self.state(partition)
            others = [r for r in state.isr if r != state.leader]
            tc.assertEqual([r for r in others if r not in live or r in leaving], [],
                           f"t-{partition}: {state} lists a broker gone or shutting down")
            if state.leader not in live or state.leader in leaving:
                tc.assertEqual(controlled_shutdown_leader(replicas, state.isr, live, leaving), -1,
                               f"t-{partition}: {state} should have been moved off broker {state.leader}")
            for b in live:
                broker = self.brokers[b]
                tc.assertEqual(broker.metadata.partition_states[("t", partition)], state)
                p = broker.replica_manager.partitions.get(("t", partition))
                if p is not None:
                    tc.assertEqual((p.leader_id, p.leader_epoch, p.isr, p.zk_version, p._pending_isr),
                                   (state.leader, state.leader_epoch, state.isr, state.zk_version, None),
                                   f"broker {b}'s view of t-{partition}")


def delete_controller(cluster: SimCluster) -> None:
    """Make the controller move: C{/controller} goes and the candidates elect one again."""
    cluster.testcase.successResultOf(cluster.admin.delete("/controller"))


class LogFailures:
    """Failures logged meanwhile (a controller event that raised, a watch callback that failed)."""

    def __init__(self) -> None:
        self.failures: list[Any] = []

    def __call__(self, event: dict) -> None:
        if "log_failure" in event:
            self.failures.append(event["log_failure"])

    def __enter__(self) -> "LogFailures":
        globalLogPublisher.addObserver(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        globalLogPublisher.removeObserver(self)


def choose_with(data: Any) -> Callable[[list[str]], str]:
    return lambda ready: ready[0] if len(ready) == 1 else data.draw(st.sampled_from(ready))


class IsrRaceTests(unittest.TestCase):
    """
    Issue 27: a broker stopped right after it rejoined stayed in the ISRs its
    leader had just expanded to include it.  Every interleaving of the
    leader's expansion, the broker's going and the controller's reads and
    writes (and the controller moving meanwhile) must end with the broker in
    no ISR and every broker agreeing with ZooKeeper.
    """

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(data=st.data(), controlled=st.booleans(), late_fetch=st.booleans(), controller_moves=st.booleans())
    def test_expand_racing_shutdown(self, data: Any, controlled: bool, late_fetch: bool,
                                    controller_moves: bool) -> None:
        """
        Broker 3 rejoined: it fetches up to the high watermark of both
        partitions led by 2 (the leader expands their ISRs), then is stopped
        (SIGTERM: a controlled shutdown request, possibly one more fetch that
        was in flight, then its session ends; or it dies at once).
        """
        cluster = SimCluster(self, {0: [2, 1, 3], 1: [2, 3, 1]}, {0: (2, [2, 1]), 1: (2, [2, 1])})
        leader, x = cluster.brokers[2], cluster.brokers[3]
        cluster.act("x", "fetch t-0", lambda: leader.fetch(3, "t", 0, LOG_END_OFFSET))
        cluster.act("x", "fetch t-1", lambda: leader.fetch(3, "t", 1, LOG_END_OFFSET))
        if controlled:
            cluster.act("x", "request controlled shutdown", lambda: x.client.create(
                f"{CONTROLLED_SHUTDOWN_PATH}/3", b"", ephemeral=True, makepath=True))
        if late_fetch:
            cluster.act("x", "a fetch in flight arrives", lambda: leader.fetch(3, "t", 0, LOG_END_OFFSET))
        cluster.act("x", "session ends", x.stop)
        if controller_moves:
            cluster.act("admin", "/controller deleted", lambda: delete_controller(cluster))
        with LogFailures() as failures:
            cluster.steps.run_until_quiet(choose_with(data))
        note("\n".join(cluster.steps.trace))
        self.assertEqual(failures.failures, [])
        cluster.check_settled()
        for partition in (0, 1):
            self.assertNotIn(3, cluster.state(partition).isr)

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(data=st.data(), controller_moves=st.booleans())
    def test_shrink_racing_election(self, data: Any, controller_moves: bool) -> None:
        """
        Broker 2 leads both partitions and is shut down (controlled) while it
        shrinks broker 3, which stopped fetching, out of their ISRs: whichever
        write lands first, the leadership moves to an ISR member as it is
        after the other (t-0 prefers 3, which may have just left), and no
        write undoes the other.
        """
        cluster = SimCluster(self, {0: [2, 3, 1], 1: [2, 1, 3]}, {0: (2, [2, 3, 1]), 1: (2, [2, 1, 3])})
        leader = cluster.brokers[2]
        for partition in (0, 1):
            p = leader.replica_manager.partitions[("t", partition)]
            p.update_follower(1, LOG_END_OFFSET)
            p.update_follower(3, LOG_END_OFFSET - 5)  # behind, and then it stops fetching
        cluster.clock.advance(SIM_LAG_MS / 1000 + 1)
        for partition in (0, 1):
            leader.replica_manager.partitions[("t", partition)].update_follower(1, LOG_END_OFFSET)
        cluster.act("leader", "ISR shrink check", lambda: leader.replica_manager.shrink_isrs(SIM_LAG_MS))
        cluster.act("b2", "request controlled shutdown", lambda: leader.client.create(
            f"{CONTROLLED_SHUTDOWN_PATH}/2", b"", ephemeral=True, makepath=True))
        if controller_moves:
            cluster.act("admin", "/controller deleted", lambda: delete_controller(cluster))
        with LogFailures() as failures:
            cluster.steps.run_until_quiet(choose_with(data))
        note("\n".join(cluster.steps.trace))
        self.assertEqual(failures.failures, [])
        cluster.check_settled()
        for partition in (0, 1):
            state = cluster.state(partition)
            self.assertNotEqual(state.leader, 2, f"t-{partition}: {state}")
            self.assertNotIn(2, state.isr)

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(data=st.data(), controlled=st.booleans())
    def test_dead_broker_leaves_every_isr_while_the_controller_moves(self, data: Any, controlled: bool) -> None:
        """
        Broker 3, in both ISRs, goes while the controller moves: the deposed
        controller's writes are fenced, and whichever broker is elected
        (broker 1 again included) takes 3 out of both ISRs.
        """
        cluster = SimCluster(self, {0: [2, 1, 3], 1: [2, 3, 1]}, {0: (2, [2, 1, 3]), 1: (2, [2, 3, 1])})
        x = cluster.brokers[3]
        if controlled:
            cluster.act("x", "request controlled shutdown", lambda: x.client.create(
                f"{CONTROLLED_SHUTDOWN_PATH}/3", b"", ephemeral=True, makepath=True))
        cluster.act("x", "session ends", x.stop)
        cluster.act("admin", "/controller deleted", lambda: delete_controller(cluster))
        with LogFailures() as failures:
            cluster.steps.run_until_quiet(choose_with(data))
        note("\n".join(cluster.steps.trace))
        self.assertEqual(failures.failures, [])
        cluster.check_settled()
        for partition in (0, 1):
            self.assertNotIn(3, cluster.state(partition).isr)


class SettleOrderTests(unittest.TestCase):
    def test_a_dead_brokers_leaderships_move_before_the_isrs_shrink(self) -> None:
        """
        As Kafka's C{onReplicasBecomeOffline}: the partitions it led are
        elected new leaders first, then it leaves the ISRs it was in, so
        that at scale every partition is led again sooner.
        """
        assignments = {p: [[3, 1, 2], [1, 3, 2], [2, 1, 3]][p % 3] for p in range(30)}
        h = ControllerHarness(self, {"t": assignments})
        written: list[tuple[int, bool]] = []
        real = h.registry.set_partition_state

        def recording(topic: str, partition: int, leader: int, leader_epoch: int, *args: Any, **kw: Any) -> Any:
            written.append((partition, leader_epoch > h.metadata.partition_states[(topic, partition)].leader_epoch))
            return real(topic, partition, leader, leader_epoch, *args, **kw)

        real_batch = h.registry.set_partition_states

        def recording_batch(writes: list[PartitionStateWrite], *args: Any) -> Any:
            written.extend((w.partition, w.leader_epoch > h.metadata.partition_states[(w.topic, w.partition)]
                            .leader_epoch) for w in writes)
            return real_batch(writes, *args)

        h.registry.set_partition_state = recording  # type: ignore[method-assign]
        h.registry.set_partition_states = recording_batch  # type: ignore[method-assign]
        h.broker_died(3)
        elections = [p for p, new_epoch in written if new_epoch]
        self.assertEqual(sorted(elections), [p for p in range(30) if p % 3 == 0])
        self.assertEqual([new_epoch for _, new_epoch in written], [True] * 10 + [False] * 20)
        self.assertTrue(all(3 not in h.state("t", p).isr and h.state("t", p).leader != 3 for p in range(30)))


#: Where a partition is assigned: broker 3 leads it, follows in it, or holds no replica of it.
ASSIGNMENTS = [[3, 1, 2], [1, 3, 2], [2, 3], [1, 2]]


class BatchedSettleTests(unittest.TestCase):
    """
    Issue 32: an event's writes go to ZooKeeper in multis of up to
    L{SETTLE_BATCH_SIZE} partitions (L{KafkaController._settle_batch}), with
    the semantics of one fenced, conditional write per partition.
    """

    def recorded(self, h: ControllerHarness, before_first_batch: Callable[[], None] | None = None
                 ) -> tuple[list[list[tuple[str, int]]], list[tuple[str, int]]]:
        """
        Record the controller's multis of several partitions (their
        partitions) and its writes of one partition; C{before_first_batch}
        runs just before the first multi of several reaches ZooKeeper
        (another writer gets there first).
        """
        batches: list[list[tuple[str, int]]] = []
        single: list[tuple[str, int]] = []
        real_batch = h.registry.set_partition_states

        def set_partition_states(writes: list[PartitionStateWrite], *args: Any) -> defer.Deferred:
            if len(writes) == 1:
                single.append((writes[0].topic, writes[0].partition))
                return real_batch(writes, *args)
            if not batches and before_first_batch is not None:
                before_first_batch()
            batches.append([(w.topic, w.partition) for w in writes])
            return real_batch(writes, *args)

        h.registry.set_partition_states = set_partition_states  # type: ignore[method-assign]
        return batches, single

    def assert_settled_without(self, h: ControllerHarness, broker: int, partitions: int) -> None:
        for p in range(partitions):
            leader, _, isr = h.summary("t", p)
            self.assertNotEqual(leader, broker)
            self.assertNotIn(broker, isr)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(kinds=st.lists(st.sampled_from(range(len(ASSIGNMENTS))), min_size=1, max_size=2 * SETTLE_BATCH_SIZE + 30))
    def test_a_failover_writes_in_batches(self, kinds: list[int]) -> None:
        """
        Every partition that needs a write gets exactly one, in a multi of up
        to L{SETTLE_BATCH_SIZE} (or on its own when it is alone to decide in
        its batch); the elections' batches come before the ISR shrinks'.
        """
        h = ControllerHarness(self, {"t": {p: ASSIGNMENTS[k] for p, k in enumerate(kinds)}})
        batches, single = self.recorded(h)
        h.broker_died(3)
        self.assert_settled_without(h, 3, len(kinds))
        needed = [("t", p) for p, k in enumerate(kinds) if 3 in ASSIGNMENTS[k]]
        for p, k in enumerate(kinds):
            written = 3 in ASSIGNMENTS[k]
            self.assertEqual(h.state("t", p).zk_version, h.versions[("t", p)] + written)
            self.assertEqual(h.state("t", p).leader_epoch, int(ASSIGNMENTS[k][0] == 3))
        self.assertEqual(sorted(sum(batches, []) + single), sorted(needed))
        self.assertTrue(all(2 <= len(batch) <= SETTLE_BATCH_SIZE for batch in batches))
        # the keys are taken in batches of SETTLE_BATCH_SIZE, leaderless first: one multi per batch
        # holding more than one that needs a write
        ordered = [("t", p) for p, k in enumerate(kinds) if ASSIGNMENTS[k][0] == 3]
        ordered += [("t", p) for p, k in enumerate(kinds) if ASSIGNMENTS[k][0] != 3]
        chunks = [[key for key in ordered[i:i + SETTLE_BATCH_SIZE] if key in needed]
                  for i in range(0, len(ordered), SETTLE_BATCH_SIZE)]
        self.assertEqual(sorted(map(sorted, batches)), sorted(sorted(c) for c in chunks if len(c) > 1))
        self.assertEqual(sorted(single), sorted(c[0] for c in chunks if len(c) == 1))
        self.assertEqual(h.controller.elections, sum(1 for k in kinds if ASSIGNMENTS[k][0] == 3))

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(partitions=st.integers(min_value=2, max_value=SETTLE_BATCH_SIZE + 20),
           racing=st.integers(min_value=0, max_value=SETTLE_BATCH_SIZE - 1))
    @example(partitions=SETTLE_BATCH_SIZE + 1, racing=SETTLE_BATCH_SIZE // 2).via("a second batch of one")
    def test_a_stale_version_in_a_batch_writes_it_partition_by_partition(self, partitions: int, racing: int) -> None:
        """
        The leader of one partition of the first batch changes its ISR just
        before the multi: nothing of the batch is written, then each of its
        partitions is written on its own -- the changed one decided again
        from its fresh state -- and the other batches are not held up.
        """
        racing %= min(partitions, SETTLE_BATCH_SIZE)  # a partition of the first batch
        h = ControllerHarness(self, {"t": {p: [1, 2, 3] for p in range(partitions)}})

        def leader_shrinks() -> None:  # broker 1 takes lagging 2 out; it does not know 3 is gone yet
            h.wait(h.registry.set_partition_state("t", racing, 1, 0, [1, 3], 1,
                                                  expected_version=h.versions[("t", racing)]))

        batches, single = self.recorded(h, leader_shrinks)
        h.broker_died(3)
        for p in range(partitions):
            self.assertEqual(h.summary("t", p), (1, 0, [1] if p == racing else [1, 2]))
            # written once by the controller (and once by the leader): the refused batch wrote nothing
            self.assertEqual(h.state("t", p).zk_version, h.versions[("t", p)] + 1 + (p == racing))
        first = [("t", p) for p in range(min(partitions, SETTLE_BATCH_SIZE))]
        self.assertEqual(batches[0], first)
        # the refused batch's partitions one by one, the racing one twice (lost, then decided again);
        # the second batch is a multi (or a write of its own when it is one partition)
        rest = [("t", p) for p in range(SETTLE_BATCH_SIZE, partitions)]
        self.assertEqual(sorted(single), sorted(first + [("t", racing)] + (rest if len(rest) == 1 else [])))
        self.assertEqual(sum(batches[1:], []), rest if len(rest) > 1 else [])
        self.assertEqual(h.controller._unsettled, set())

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(partitions=st.integers(min_value=2, max_value=SETTLE_BATCH_SIZE + 20))
    def test_a_deposed_controller_writes_no_batch(self, partitions: int) -> None:
        """Another controller is elected just before the first multi: nothing is written, nothing one by one."""
        h = ControllerHarness(self, {"t": {p: [3, 1, 2] for p in range(partitions)}})
        before = [h.state("t", p) for p in range(partitions)]
        other = FakeZooKeeperClient(h.server)
        self.successResultOf(other.start())

        def another_controller() -> None:
            self.successResultOf(other.set("/controller_epoch", b"2"))

        batches, single = self.recorded(h, another_controller)
        h.broker_died(3)
        self.assertEqual([h.state("t", p) for p in range(partitions)], before)
        self.assertFalse(h.controller.active)
        # the first multi was refused; nothing was written one by one after it
        self.assertTrue(batches)
        self.assertEqual((single, h.controller.elections), ([], 0))

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(data=st.data(), partitions=st.integers(min_value=2, max_value=SETTLE_BATCH_SIZE))
    def test_a_deleted_partition_in_a_batch_stays_deleted(self, data: Any, partitions: int) -> None:
        """
        One partition's state is deleted (its topic is being deleted) just
        before the multi: the batch is refused, the others are written one by
        one, the deleted one is not brought back and leaves the cache.
        """
        deleted = data.draw(st.integers(min_value=0, max_value=partitions - 1), label="deleted")
        h = ControllerHarness(self, {"t": {p: [3, 1, 2] for p in range(partitions)}})

        def delete_state() -> None:
            self.successResultOf(h.zookeeper.delete(partition_state_path("t", deleted)))

        batches, single = self.recorded(h, delete_state)
        h.broker_died(3)
        self.assertIsNone(h.state("t", deleted))
        self.assertNotIn(("t", deleted), h.metadata.partition_states)
        for p in range(partitions):
            if p != deleted:
                self.assertEqual(h.summary("t", p), (1, 1, [1, 2]))
                self.assertEqual(h.state("t", p).zk_version, h.versions[("t", p)] + 1)
        self.assertEqual(len(batches), 1)
        self.assertEqual(sorted(single), [("t", p) for p in range(partitions)])
        self.assertEqual(h.controller.elections, partitions - 1)
        self.assertEqual(h.controller._unsettled, set())
