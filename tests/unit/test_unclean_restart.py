"""
A broker whose process restarts after an unclean shutdown (a crash that lost
what it had not flushed) leads no partition at a state written for its
previous process, and the controller moves such leaderships and ISR places
(issue 28: found by the simulation's disk model, seed 11 of
C{python -m kafkatw.simulation --disk-model}).

  - L{kafkatw.broker.replica_manager.ReplicaManager.fence_leadership}: the
    broker's side (no leadership before it registered; after, only from
    states written since);
  - L{kafkatw.broker.controller.KafkaController}: a registration that says
    C{unclean_shutdown} makes the partitions whose states predate it (their
    C{mzxid} below its C{czxid}, KIP-380's broker epoch) elect another ISR
    member, or the restarted broker at a new epoch when it is the only one;
  - the whole cluster in the simulation, on seed 11's shrunk schedule.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.broker.controller import KafkaController
from kafkatw.broker.metadata_cache import MetadataCache, TopicMetadata
from kafkatw.broker.partition import FOLLOWER, LEADER, next_isr_zxids
from kafkatw.broker.replica_manager import ReplicaManager
from kafkatw.config import BrokerConfig
from kafkatw.simulation import Fault, Schedule, Settings, run_seed
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.bridge import ZooKeeperUnavailableError
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import PartitionState, decode_partition_state, encode_partition_state
from tests.unit.test_controller import LOG_END_OFFSET, ControllerHarness, MemoryLogManager


class ControllerTests(unittest.TestCase):
    """
    t-0 led by 3 (ISR all), t-1 led by 1 with 3 a follower in the ISR, t-2
    led by 3 alone in its ISR, t-3 without 3 in its ISR.
    """

    def setUp(self) -> None:
        self.h = ControllerHarness(self, {"t": {0: [3, 2, 1], 1: [1, 2, 3], 2: [3, 1, 2], 3: [1, 2, 3]}},
                                   states={("t", 2): (3, [3]), ("t", 3): (1, [1, 2])})

    def register(self, broker_id: int, unclean: bool) -> int:
        """Broker C{broker_id}'s process registers (in a session of its own); returns its broker epoch."""
        client = FakeZooKeeperClient(self.h.server)
        self.h.wait(client.start())
        stat = self.h.wait(Registry(client).register_broker(broker_id, "127.0.0.1", 9090 + broker_id,
                                                            unclean_shutdown=unclean))
        return stat.czxid

    def brokers_changed(self, controller: KafkaController | None = None) -> None:
        self.h.wait((controller or self.h.controller).brokers_changed(dict(self.h.metadata.brokers)))

    def test_a_restart_after_an_unclean_shutdown_moves_its_leaderships_and_isr_places(self) -> None:
        h = self.h
        registered = self.register(3, unclean=True)
        self.brokers_changed()
        self.assertEqual(h.summary("t", 0), (2, 1, [2, 1]))  # another ISR member leads, at a new epoch
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2]))  # 3 leaves the ISR
        self.assertEqual(h.summary("t", 2), (3, 1, [3]))  # the only one left leads again, at a new epoch
        # ... in the ISR from now, not from its previous process's place (or it would not lead)
        self.assertGreater(h.state("t", 2).isr_join_zxid(3), registered)
        self.assertLess(h.state("t", 0).isr_join_zxid(2), registered)  # the others keep theirs
        self.assertEqual(h.summary("t", 3), (1, 0, [1, 2]))  # untouched
        self.assertEqual(h.controller.restarted_replicas, {})
        # once written, the partitions are ordinary again: the next change moves nothing,
        elections = h.controller.elections
        self.brokers_changed()
        self.assertEqual(h.controller.elections, elections)
        # and the leader takes 3 back into t-1's ISR once it has caught up: it stays there
        version = h.state("t", 1).zk_version
        h.wait(h.registry.set_partition_state("t", 1, 1, 0, [1, 2, 3], 1, version))
        h.metadata.set_partition_state("t", 1, h.state("t", 1))
        h.wait(h.controller.partition_changed(("t", 1)))
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2, 3]))

    def test_a_new_session_is_not_a_new_restart(self) -> None:
        """
        The restarted broker 3 caught up and its leader took it back into t-1's
        ISR; then its session expired and it registered again (a new broker
        epoch, the same process): the restart is still the first
        registration's, so t-1's state, written since, is not stale, and 3
        keeps its ISR place -- and would be an eligible leader replica if the
        ISR shrank.  (The simulation's seed 9011 with C{--disk-model}: counted
        as restarted again, a caught-up replica was kept out of the eligible
        leader replicas, and a broker that had lost the records was elected.)
        """
        h = self.h
        client = FakeZooKeeperClient(self.h.server)
        self.h.wait(client.start())
        registry = Registry(client)
        first = h.wait(registry.register_broker(3, "127.0.0.1", 9093, unclean_shutdown=True)).czxid
        self.brokers_changed()
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2]))  # 3 left the ISR at its restart
        version = h.state("t", 1).zk_version  # caught up: its leader takes it back
        h.wait(h.registry.set_partition_state("t", 1, 1, 0, [1, 2, 3], 1, version))
        h.metadata.set_partition_state("t", 1, h.state("t", 1))
        h.wait(h.controller.partition_changed(("t", 1)))
        client.expire_session()  # registered again in the new session
        h.wait(client.ensure_path("/brokers/ids"))
        registration = h.wait(h.registry.get_broker_registration(3))
        self.assertGreater(registration.broker_epoch, first)
        self.assertEqual((registration.unclean_shutdown, registration.restart_epoch), (True, first))
        self.brokers_changed()
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2, 3]))
        self.assertEqual(h.controller.restarted_replicas, {})

    def test_a_partition_of_one_replica_is_left_alone(self) -> None:
        h = self.h
        h.add_topic("one", {0: [3]})
        self.register(3, unclean=True)
        self.brokers_changed()
        self.assertEqual(h.summary("one", 0), (3, 0, [3]))

    def test_a_clean_restart_moves_nothing(self) -> None:
        h = self.h
        self.register(3, unclean=False)
        self.brokers_changed()
        self.assertEqual([h.summary("t", p) for p in range(4)],
                         [(3, 0, [3, 2, 1]), (1, 0, [1, 2, 3]), (3, 0, [3]), (1, 0, [1, 2])])
        self.assertEqual(h.controller.elections, 0)

    def test_a_state_written_after_the_registration_is_not_stale(self) -> None:
        """An election made once 3 was back (by a controller that had already handled it) stays."""
        h = self.h
        self.register(3, unclean=True)
        version = h.state("t", 0).zk_version
        h.wait(h.registry.set_partition_state("t", 0, 3, 1, [3, 2, 1], 1, version))
        h.metadata.set_partition_state("t", 0, h.state("t", 0))
        self.brokers_changed()
        self.assertEqual(h.summary("t", 0), (3, 1, [3, 2, 1]))

    def fail_first_registration_read(self, disconnect: bool) -> list[int]:
        """Broker 3's next registration read fails with C{ConnectionLoss} (dropping the connection first)."""
        h = self.h
        read = h.registry.get_broker_registration
        failed: list[int] = []

        def losing(broker: int) -> Any:
            if broker == 3 and not failed:
                failed.append(broker)
                if disconnect:
                    h.zookeeper.disconnect()
                return defer.fail(ZooKeeperUnavailableError("ConnectionLoss (test)"))
            return read(broker)

        h.registry.get_broker_registration = losing  # type: ignore[method-assign]
        return failed

    def test_a_registration_not_read_for_a_lost_connection_is_read_again(self) -> None:
        """
        The controller's read of 3's registration loses its ZooKeeper
        connection: the event runs again once connected, rather than go on
        without knowing that 3 restarted after an unclean shutdown (the
        simulation's seed 136142 with C{--disk-model --faults 18 --window 50
        --link-faults 6 --start-zookeeper-drops 2}: a restarted controller
        could not read its own registration and elected itself, with the log
        it had lost, from the eligible leader replicas).
        """
        h = self.h
        self.register(3, unclean=True)
        failed = self.fail_first_registration_read(disconnect=True)  # the connection is lost under the read
        d = h.controller.brokers_changed(dict(h.metadata.brokers))
        self.assertEqual(failed, [3])
        self.assertNoResult(d)  # it waits for the connection to come back
        h.zookeeper.reconnect()  # CONNECTED
        h.wait(d)
        self.assertEqual(h.summary("t", 0), (2, 1, [2, 1]))  # found restarted all the same
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2]))

    def test_a_read_that_failed_after_the_connection_came_back_runs_again_at_once(self) -> None:
        """
        The read's C{ConnectionLoss} is handled once the client is connected
        again (a late answer, as in the simulation's seed 146128): the event
        runs again at once, where waiting for the next C{CONNECTED} state
        waited for good.
        """
        h = self.h
        self.register(3, unclean=True)
        failed = self.fail_first_registration_read(disconnect=False)
        self.assertTrue(h.zookeeper.connected)
        h.wait(h.controller.brokers_changed(dict(h.metadata.brokers)))
        self.assertEqual(failed, [3])
        self.assertEqual(h.summary("t", 0), (2, 1, [2, 1]))

    def test_a_leadership_begun_before_the_registration_is_found_under_a_later_isr_change(self) -> None:
        """
        Broker 3 registers after an unclean shutdown while the controller,
        which has not read that registration, shrinks t-0's ISR (broker 1
        died), keeping 3 its leader at the same epoch: the write comes after
        the registration, so its C{mzxid} alone does not date it.  The write
        carries the zxid its leader epoch began at (epoch 0, elected before 3
        restarted) and the one each member joined the ISR at, so 3 is found
        restarted by this controller or any later one, and another ISR
        member is elected.  (The simulation's seed 100124 with
        C{--disk-model --faults 14 --window 45 --link-faults 4
        --start-zookeeper-drops 2}: the restarted broker stayed leader and
        last ISR member with an empty log, was elected again, and the others
        truncated to it.)
        """
        h = self.h
        elected = h.state("t", 0).epoch_start_zxid
        write = h.registry.set_partition_states
        registered: list[int] = []

        def racing(*args: Any, **kwargs: Any) -> Any:
            if not registered:
                registered.append(self.register(3, unclean=True))
            return write(*args, **kwargs)

        h.registry.set_partition_states = racing  # type: ignore[method-assign]
        h.broker_died(1)
        h.registry.set_partition_states = write  # type: ignore[method-assign]
        state = h.state("t", 0)
        self.assertEqual((state.leader, state.leader_epoch, state.isr), (3, 0, [3, 2]))
        self.assertLess(elected, registered[0])
        self.assertLess(registered[0], state.mzxid)
        self.assertEqual(state.epoch_start_zxid, elected)
        self.brokers_changed()
        self.assertEqual(h.summary("t", 0), (2, 1, [2]))

    def test_a_follower_carried_in_the_isr_by_its_leaders_later_write_is_found(self) -> None:
        """
        Broker 3, a follower in t-1's ISR, registers after an unclean
        shutdown; its leader, 1, which has not heard of it, writes an ISR
        change keeping it (2 leaves), after the registration.  The state
        carries the zxid each member joined the ISR at (KIP-903's broker
        epochs of the members, in ZooKeeper's terms): 3's predates its
        registration, so the controller still counts it as restarted and
        takes it out of the ISR, where it could have been elected with the
        records it lost.
        """
        h = self.h
        registered = self.register(3, unclean=True)
        state = h.state("t", 1)
        joined = [state.isr_join_zxid(r) for r in state.isr]
        h.wait(h.registry.set_partition_state("t", 1, 1, 0, [1, 3], 1, state.zk_version,
                                              leader_epoch_zxid=state.epoch_start_zxid,
                                              isr_zxids=next_isr_zxids(state.isr, joined, [1, 3])))
        h.metadata.set_partition_state("t", 1, h.state("t", 1))
        written = h.state("t", 1)
        self.assertLess(registered, written.mzxid)
        self.assertLess(written.isr_join_zxid(3), registered)
        self.brokers_changed()
        self.assertEqual(h.summary("t", 1), (1, 0, [1]))

    def test_unclean_recovery_elects_the_replica_with_the_newest_and_longest_log(self) -> None:
        """
        t-2's only ISR member, 3, restarted after an unclean shutdown and lost
        its log; replicas 1 and 2, outside the ISR, caught up with it before
        (they could not rejoin the ISR).  The controller asks each live
        replica for its log end (latest leader epoch, log end offset), writes
        nothing until all have answered, then elects the newest and longest
        log, alone in the ISR (KIP-966's unclean recovery), not 3, whose
        election truncated the others' logs to its own: the simulation's seed
        94037 (C{--zookeeper-latency 60 --disk-model --faults 12
        --link-faults 4 --start-zookeeper-drops 2}) lost 44 acknowledged
        records of a partition so.
        """
        h = self.h
        asked: list[tuple[int, list, defer.Deferred]] = []

        def log_ends(broker: int, keys: list) -> defer.Deferred:
            d: defer.Deferred = defer.Deferred()
            asked.append((broker, list(keys), d))
            return d

        h.controller.log_ends = log_ends
        self.register(3, unclean=True)
        self.brokers_changed()
        self.assertEqual(sorted((b, keys) for b, keys, _ in asked), [(b, [("t", 2)]) for b in (1, 2, 3)])
        self.assertEqual(h.summary("t", 2), (3, 0, [3]))  # nothing written while asking
        answers = {1: (0, 40), 2: (0, 44), 3: (-1, 0)}
        for broker, keys, d in asked:
            d.callback({keys[0]: answers[broker]})
        self.assertEqual(h.summary("t", 2), (2, 1, [2]))
        self.assertEqual(h.summary("t", 0), (2, 1, [2, 1]))  # the others as before
        self.assertEqual(h.controller.replica_log_ends, {})

    def test_unclean_recovery_keeps_the_restarted_replica_on_a_tie_and_skips_a_silent_one(self) -> None:
        """3 kept as much as the others hold: it is elected, as without the recovery; 1 did not answer."""
        h = self.h

        def log_ends(broker: int, keys: list) -> defer.Deferred:
            if broker == 1:
                return defer.fail(ConnectionRefusedError("broker 1 (test)"))
            return defer.succeed({keys[0]: (0, 44)})

        h.controller.log_ends = log_ends
        self.register(3, unclean=True)
        self.brokers_changed()
        self.assertEqual(h.summary("t", 2), (3, 1, [3]))

    def test_a_new_controller_finds_the_unclean_restart(self) -> None:
        """
        The controller was cut off when 3 restarted (the simulation's seed
        11): the next one, on activation, reads 3's registration.
        """
        h = self.h
        h.controller.resign()
        self.register(3, unclean=True)
        h.wait(h.zookeeper.delete("/controller"))
        client = FakeZooKeeperClient(h.server)
        h.wait(client.start())
        metadata = MetadataCache(2)
        metadata.set_brokers(dict(h.metadata.brokers))
        metadata.set_topic(h.metadata.topics["t"])
        for p in range(4):
            metadata.set_partition_state("t", p, h.state("t", p))
        successor = KafkaController(2, BrokerConfig({"broker.id": 2}), Registry(client), metadata, lambda t: {})
        self.assertTrue(h.wait(successor.elect()))
        states = [h.state("t", p) for p in range(4)]
        self.assertEqual([(s.leader, s.leader_epoch, s.isr) for s in states],
                         [(2, 1, [2, 1]), (1, 0, [1, 2]), (3, 1, [3]), (1, 0, [1, 2])])


class IsrJoinZxidTests(unittest.TestCase):
    """The zxid each ISR member joined at, through any chain of written states."""

    @given(st.lists(st.lists(st.integers(0, 4), unique=True, max_size=5), min_size=1, max_size=12),
           st.lists(st.integers(1, 1000), min_size=12, max_size=12))
    def test_each_member_is_dated_by_the_state_that_took_it_in(self, isrs: list, gaps: list) -> None:
        """
        ISR changes written one after another (each state's JSON encoded with
        L{next_isr_zxids} from the one it replaces, read back with a later
        C{mzxid}): every member's L{PartitionState.isr_join_zxid} is the
        C{mzxid} of the state that took it in since it was last out.
        """
        state = None
        mzxid = 0
        joined: dict[int, int] = {}  # the model: member -> the mzxid it joined at
        for isr, gap in zip(isrs, gaps):
            carried = [] if state is None else next_isr_zxids(
                state.isr, [state.isr_join_zxid(r) for r in state.isr], isr)
            mzxid += gap
            state = decode_partition_state(encode_partition_state(0, 0, isr, isr_zxids=carried), 0, mzxid)
            joined = {r: joined.get(r, mzxid) for r in isr}
            self.assertEqual({r: state.isr_join_zxid(r) for r in isr}, joined)


class ReplicaManagerTests(unittest.TestCase):
    """The restarted broker 1's side: the fence of L{ReplicaManager.fence_leadership}."""

    def setUp(self) -> None:
        self.metadata = MetadataCache(1)
        self.metadata.set_topic(TopicMetadata("t", None, {0: [1, 2], 1: [1, 2], 2: [2, 1], 3: [1]}))  # type: ignore[arg-type]
        self.rm = ReplicaManager(1, MemoryLogManager(LOG_END_OFFSET), self.metadata, None, lambda topic: {},
                                 now_ms=lambda: 0)
        self.rm.fence_leadership()

    def apply(self, partition: int, state: PartitionState) -> None:
        self.metadata.set_partition_state("t", partition, state)
        self.rm.apply_state("t", partition, self.metadata.topics["t"].partitions[partition], state)

    def role(self, partition: int) -> Any:
        return self.rm.partitions[("t", partition)].role

    def test_no_leadership_before_registering_then_only_from_states_written_since(self) -> None:
        self.apply(0, PartitionState(1, 0, [1, 2], 1, 0, mzxid=10))  # written for the previous process
        self.apply(1, PartitionState(1, 0, [1, 2], 1, 0, mzxid=10))
        self.apply(2, PartitionState(2, 0, [2, 1], 1, 0, mzxid=10))
        self.assertNotEqual(self.role(0), LEADER)
        self.assertEqual(self.role(2), FOLLOWER)  # following is no risk: the leader truncates it
        self.assertEqual(set(self.rm.withheld_leaderships), {("t", 0), ("t", 1)})
        # t-1 is elected again before the registration is known (mzxid 30 > the epoch 20)
        self.apply(1, PartitionState(1, 1, [1], 1, 1, mzxid=30))
        self.assertNotEqual(self.role(1), LEADER)
        self.rm.registered(20)
        self.assertNotEqual(self.role(0), LEADER)
        self.assertEqual(self.role(1), LEADER)
        self.assertEqual(set(self.rm.withheld_leaderships), {("t", 0)})
        # the controller's state for t-0 (written after the registration) makes it leader
        self.apply(0, PartitionState(2, 1, [2], 1, 1, mzxid=25))
        self.assertEqual(self.role(0), FOLLOWER)
        self.assertEqual(self.rm.withheld_leaderships, {})
        self.apply(0, PartitionState(1, 2, [2, 1], 1, 2, mzxid=40))
        self.assertEqual(self.role(0), LEADER)

    def test_an_isr_change_written_since_does_not_date_a_leadership_begun_before(self) -> None:
        """
        A state written after the registration (C{mzxid} 30 > the epoch 20)
        that keeps a leader epoch begun before it (at zxid 10: an ISR change
        by a controller that had not read the registration) is the previous
        process's leadership: withheld, until an election at a new epoch,
        whose ISR changes then carry its start.  (The simulation's seed 100124:
        the restarted broker led with its empty log, and its follower truncated
        to it.)
        """
        self.rm.registered(20)
        self.apply(0, PartitionState(1, 0, [1], 1, 1, mzxid=30, leader_epoch_zxid=10))
        self.assertNotEqual(self.role(0), LEADER)
        self.assertEqual(set(self.rm.withheld_leaderships), {("t", 0)})
        self.apply(0, PartitionState(1, 1, [1], 1, 2, mzxid=40))
        self.assertEqual(self.role(0), LEADER)
        self.assertEqual(self.rm.partitions[("t", 0)].leader_epoch_zxid, 40)
        self.apply(0, PartitionState(1, 1, [1, 2], 1, 3, mzxid=50, leader_epoch_zxid=40))
        self.assertEqual(self.role(0), LEADER)
        self.assertEqual(self.rm.withheld_leaderships, {})

    def test_an_election_of_a_member_whose_isr_place_predates_the_registration_is_withheld(self) -> None:
        """
        An election written after the registration (epoch 1 begins at zxid
        30 > 20) by a controller that had not read it yet: this broker is in
        the ISR only by its previous process's place (it joined at 10), so it
        does not lead; the controller, once it has read the registration,
        elects it again as an ISR member from then (it joined at 40).
        """
        self.rm.registered(20)
        self.apply(0, PartitionState(1, 1, [1, 2], 1, 1, mzxid=30, isr_zxids=[10, 10]))
        self.assertNotEqual(self.role(0), LEADER)
        self.apply(0, PartitionState(1, 2, [1], 1, 2, mzxid=40))
        self.assertEqual(self.role(0), LEADER)

    def test_a_partition_of_one_replica_leads_at_once(self) -> None:
        """Nothing better can be elected (a single broker after kill -9): no wait for the controller."""
        self.apply(3, PartitionState(1, 0, [1], 1, 0, mzxid=10))
        self.assertEqual(self.role(3), LEADER)

    def test_without_the_fence_a_stale_state_leads(self) -> None:
        """The behaviour the fence changes (a clean start): the same state leads at once."""
        rm = ReplicaManager(1, MemoryLogManager(LOG_END_OFFSET), self.metadata, None, lambda topic: {},
                            now_ms=lambda: 0)
        rm.apply_state("t", 0, [1, 2], PartitionState(1, 0, [1, 2], 1, 0, mzxid=10))
        self.assertEqual(rm.partitions[("t", 0)].role, LEADER)


# Seed 11 of `python -m kafkatw.simulation --disk-model`, shrunk (`--shrink`): broker 3 leads t-1 and
# crashes, losing its unflushed log; the controller (broker 1) is cut from ZooKeeper before 3's
# session expires; 3 restarts and found itself leader of sim-1 at epoch 0 with an empty log, and its
# followers truncated to it: every acknowledged record of sim-1 was lost.
SEED_11 = Schedule(11, [Fault(14.494, "crash", (3, "expire-session")), Fault(20.137, "isolate-zk", (1,)),
                        Fault(24.086, "start", (3,))])

# Seed 1, shrunk: broker 2 crashes and, when the faults end, restarts before its session expired
# (it ends its predecessor's session and registers at once): the controller saw no change of the
# live brokers, and broker 2 led at the same epoch with the log it had left.
SEED_1 = Schedule(1, [Fault(49.988, "crash", (2, "expire-session"))])


class SimulationTests(unittest.TestCase):
    def check(self, seed: int, schedule: Schedule) -> None:
        settings = dataclasses.replace(Settings(), disk_model=True)
        result = run_seed(seed, settings, schedule=schedule)
        self.assertEqual(result.violations, [], "\n".join(map(str, result.violations[:10])))
        self.assertGreater(result.acknowledged, 500)
        self.assertEqual(result.failed, 0)

    def test_seed_11_loses_no_acknowledged_record(self) -> None:
        self.check(11, SEED_11)

    def test_seed_1_loses_no_acknowledged_record(self) -> None:
        self.check(1, SEED_1)


class ReplicaLogEndsTests(unittest.TestCase):
    """
    The server's answer to the controller's unclean recovery
    (C{KafkaServer._replica_log_ends}): a ListOffsets from the debugging
    replica id to the broker asked, again after a lost connection.
    """

    def setUp(self) -> None:
        from twisted.internet.task import Clock

        from kafkatw.broker.server import KafkaServer

        self.clock = Clock()
        self.server = KafkaServer(BrokerConfig({"broker.id": 1, "replica.fetch.backoff.ms": 1000,
                                                "replica.socket.timeout.ms": 5000}), self.clock)
        self.sent: list[int] = []
        self.failures = 0

        server = self

        class Client:
            async def send(self, broker: int, api_key: int, body: dict) -> Any:
                server.sent.append(broker)
                if server.failures:
                    server.failures -= 1
                    from kafkatw.client.connection import BrokerConnectionError

                    raise BrokerConnectionError(f"connection to broker {broker} lost")
                partition = SimpleNamespace(partition_index=0, leader_epoch=4, offset=52, error_code=0)
                return SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[partition])])

        self.server.inter_broker_client = Client()  # type: ignore[assignment]

    def test_a_lost_connection_is_asked_again_after_the_backoff(self) -> None:
        """
        Seed 145038 of C{python -m kafkatw.simulation --brokers 2
        --disk-model --transactions --groups --faults 14 --window 45
        --link-faults 4}: the controller's connection to a broker just
        restarted (after its disk filled) was its previous process's; the
        ask failed, the broker counted as one that did not answer, and the
        other replica's shorter log was elected over the 52 records it had.
        """
        self.failures = 2
        d = self.server._replica_log_ends(3, [("t", 0)])
        self.assertNoResult(d)
        self.assertEqual(self.sent, [3])
        self.clock.advance(1.0)
        self.assertEqual(self.sent, [3, 3])
        self.clock.advance(1.0)
        self.assertEqual(self.successResultOf(d), {("t", 0): (4, 52)})

    def test_a_broker_that_stays_unreachable_is_given_up_on_within_the_socket_timeout(self) -> None:
        from kafkatw.client.connection import BrokerConnectionError

        self.failures = 100
        d = self.server._replica_log_ends(3, [("t", 0)])
        self.clock.pump([1.0] * 6)
        self.failureResultOf(d, BrokerConnectionError)
        self.assertEqual(len(self.sent), 6)  # at 0, 1, ..., 5 s; the next would come after the 5 s
