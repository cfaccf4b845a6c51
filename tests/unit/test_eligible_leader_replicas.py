"""
Eligible leader replicas (KIP-966, issue 28): a replica that leaves the ISR
while the ISR is smaller than C{min.insync.replicas} keeps every record below
the high watermark, which does not move meanwhile, and is elected when no ISR
member is live -- before a replica that restarted after an unclean shutdown
(found by the simulation's disk model, seeds 51 and 62: the only ISR member
crashed, lost what it had not flushed, and was elected again while the
replicas the ISR had lost held every acknowledged record).
"""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial import unittest

from kafkatw.broker.controller import KafkaController
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache
from kafkatw.config import BrokerConfig
from kafkatw.broker.partition import next_eligible_leader_replicas, next_elr_isr_zxids
from kafkatw.simulation import Fault, Schedule, Settings, run_seed
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.registry import Registry
from tests.unit.test_controller import ControllerHarness
from tests.unit.test_partition import LAG_MS, ReplicationHarness


@st.composite
def isr_changes(draw: st.DrawFn) -> tuple:
    replicas = draw(st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True))
    subset = st.lists(st.sampled_from(replicas), unique=True)
    isr, new_isr, excluded = draw(subset), draw(subset), draw(subset)
    elr = [r for r in draw(subset) if r not in isr]
    return replicas, isr, elr, new_isr, draw(st.integers(1, 6)), excluded


class NextEligibleLeaderReplicasTests(unittest.TestCase):
    @given(isr_changes())
    def test_the_rules_of_kip_966(self, change: tuple) -> None:
        replicas, isr, elr, new_isr, min_isr, excluded = change
        result = next_eligible_leader_replicas(isr, elr, new_isr, min_isr, replicas, excluded)
        self.assertEqual(result, [r for r in replicas if r in result])  # in assignment order, no repeats
        self.assertFalse(set(result) & set(new_isr))
        self.assertFalse(set(result) & set(excluded))
        if len(new_isr) >= min(min_isr, len(replicas)):
            self.assertEqual(result, [])  # the high watermark moves again: nobody else is sure to hold it
        else:
            kept = (set(elr) | set(isr)) - set(new_isr) - set(excluded)
            self.assertEqual(set(result), kept)

    @given(isr_changes(), st.data())
    def test_each_eligible_leader_replica_keeps_the_zxid_it_left_the_isr_at(self, change: tuple,
                                                                             data: st.DataObject) -> None:
        """
        L{next_elr_isr_zxids} beside the ELR of any ISR change: a member
        already eligible keeps its zxid (-1 when the state had none for it),
        one that leaves the ISR now takes the replaced state's C{mzxid}.
        """
        replicas, isr, elr, new_isr, min_isr, excluded = change
        zxids = data.draw(st.lists(st.integers(-1, 10**6), max_size=len(elr)))  # a shorter list: an older writer's
        mzxid = data.draw(st.integers(-1, 10**6))
        new_elr = next_eligible_leader_replicas(isr, elr, new_isr, min_isr, replicas, excluded)
        result = next_elr_isr_zxids(elr, zxids, mzxid, new_elr)
        self.assertEqual(len(result), len(new_elr))
        earlier = dict(zip(elr, zxids))
        for replica, zxid in zip(new_elr, result):
            self.assertEqual(zxid, earlier.get(replica, -1) if replica in elr else mzxid)
            if replica not in elr:
                self.assertIn(replica, isr)  # only an ISR member takes the replaced state's zxid

    def test_examples(self) -> None:
        self.assertEqual(next_eligible_leader_replicas([1, 2, 3], [], [1], 2, [1, 2, 3]), [2, 3])
        self.assertEqual(next_eligible_leader_replicas([1, 2, 3], [], [1, 2], 2, [1, 2, 3]), [])
        self.assertEqual(next_eligible_leader_replicas([1], [2, 3], [1, 2], 2, [1, 2, 3]), [])
        self.assertEqual(next_eligible_leader_replicas([3], [1], [2], 3, [1, 2, 3], excluded={3}), [1])
        # min.insync.replicas above the replication factor: the factor counts
        self.assertEqual(next_eligible_leader_replicas([1, 2], [], [1, 2], 3, [1, 2]), [])


class LeaderTests(unittest.TestCase):
    """The leader's side: its ISR shrink writes the ELR, and the high watermark stops."""

    def test_a_shrink_below_min_isr_makes_elr_and_stops_the_high_watermark(self) -> None:
        h = ReplicationHarness(self, **{"min.insync.replicas": 2})
        h.write_state(0, 0, [0, 1, 2])
        p = h.partition
        h.append(3)
        p.update_follower(1, 3)
        p.update_follower(2, 3)
        self.assertEqual(p.high_watermark, 3)
        h.advance_ms(LAG_MS + 1)  # both followers stop fetching
        h.replica_manager.shrink_isrs(LAG_MS)
        state = h.state()
        self.assertEqual((state.isr, state.elr), ([0], [1, 2]))
        self.assertEqual((p.isr, p.elr), ([0], [1, 2]))
        h.append(2)
        self.assertEqual((p.log_end_offset, p.high_watermark), (5, 3))  # alone in the ISR: it does not move
        p.update_follower(1, 5)  # 1 catches up and rejoins: ISR [0, 1], the ELR is gone, the watermark moves
        state = h.state()
        self.assertEqual((state.isr, state.elr), ([0, 1], []))
        self.assertEqual(p.high_watermark, 5)

    def test_each_eligible_leader_replica_carries_the_zxid_it_was_last_in_the_isr(self) -> None:
        """
        1 leaves the ISR first, at the state the controller wrote; 2 next, at
        the leader's own write, whose C{mzxid} the leader reads back through
        its watch; 1 keeps its own.
        """
        h = ReplicationHarness(self, watch=True, **{"min.insync.replicas": 3})
        h.write_state(0, 0, [0, 1, 2], apply=False)
        first = h.state()
        p = h.partition
        h.append(3)
        h.advance_ms(LAG_MS + 1)
        p.update_follower(2, 3)  # 2 is caught up, 1 lags
        h.replica_manager.shrink_isrs(LAG_MS)
        second = h.state()
        self.assertEqual((second.isr, second.elr, second.elr_isr_zxids), ([0, 2], [1], [first.mzxid]))
        self.assertEqual(p.zk_mzxid, second.mzxid)
        h.advance_ms(LAG_MS + 1)  # now 2 lags too
        h.replica_manager.shrink_isrs(LAG_MS)
        third = h.state()
        self.assertEqual((third.isr, third.elr, third.elr_isr_zxids), ([0], [1, 2], [first.mzxid, second.mzxid]))
        self.assertLess(first.mzxid, second.mzxid)

    def test_with_min_isr_one_nothing_changes(self) -> None:
        h = ReplicationHarness(self)
        h.write_state(0, 0, [0, 1, 2])
        p = h.partition
        h.append(3)
        h.advance_ms(LAG_MS + 1)
        h.replica_manager.shrink_isrs(LAG_MS)
        self.assertEqual((h.state().isr, h.state().elr), ([0], []))
        self.assertEqual(p.high_watermark, 3)


class ControllerTests(unittest.TestCase):
    """t-0 and t-1 assigned [3, 1, 2], led by 3 with ISR [3, 1], C{min.insync.replicas} 2."""

    def setUp(self) -> None:
        self.h = ControllerHarness(self, {"t": {0: [3, 1, 2], 1: [3, 1, 2]}},
                                   states={("t", 0): (3, [3, 1]), ("t", 1): (3, [3, 1])})
        self.h.topic_configs["t"] = {"min.insync.replicas": 2}

    def broker_returned(self, broker_id: int, unclean: bool = False) -> None:
        h = self.h
        client = FakeZooKeeperClient(h.server)
        h.wait(client.start())
        h.wait(Registry(client).register_broker(broker_id, "127.0.0.1", 9090 + broker_id, unclean_shutdown=unclean))
        brokers = dict(h.metadata.brokers)
        brokers[broker_id] = BrokerEndpoint(broker_id, "127.0.0.1", 9090 + broker_id)
        h.metadata.set_brokers(brokers)
        h.wait(h.controller.brokers_changed(brokers))

    def elr(self, partition: int) -> list[int]:
        return self.h.state("t", partition).elr

    def test_an_eligible_leader_replica_is_elected_when_the_isr_is_gone(self) -> None:
        h = self.h
        h.broker_died(1)
        self.assertEqual((h.summary("t", 0), self.elr(0)), ((3, 0, [3]), [1]))
        self.broker_returned(1)
        h.broker_died(3)
        self.assertEqual((h.summary("t", 0), self.elr(0)), ((1, 1, [1]), [3]))
        # 3 comes back after a crash: it may have lost what it held, it is eligible no more
        self.broker_returned(3, unclean=True)
        self.assertEqual((h.summary("t", 0), self.elr(0)), ((1, 1, [1]), []))

    def test_an_uncleanly_restarted_isr_member_waits_for_a_down_eligible_one(self) -> None:
        h = self.h
        h.broker_died(1)
        h.broker_died(3)
        self.assertEqual((h.summary("t", 1), self.elr(1)), ((3, 0, [3]), [1]))  # offline: nobody to elect
        self.broker_returned(3, unclean=True)
        self.assertEqual(h.summary("t", 1), (3, 0, [3]))  # not elected again: 1 holds what 3 may have lost
        self.assertEqual(h.controller.partition_states.state(("t", 1)), "OfflinePartition")
        self.broker_returned(1)
        self.assertEqual((h.summary("t", 1), self.elr(1)), ((1, 1, [1]), []))

    def both_isr_members_go_and_one_returns_uncleanly(self) -> None:
        """1 and 3, the ISR, go at once (no controller write between); 3 comes back uncleanly: it waits for 1."""
        h = self.h
        brokers = {b: e for b, e in h.metadata.brokers.items() if b == 2}
        h.metadata.set_brokers(brokers)
        h.wait(h.controller.brokers_changed(brokers))
        self.assertEqual((h.summary("t", 0), self.elr(0)), ((3, 0, [3, 1]), []))
        self.broker_returned(3, unclean=True)
        self.assertEqual(h.summary("t", 0), (3, 0, [3, 1]))
        self.assertEqual(h.controller.partition_states.state(("t", 0)), "OfflinePartition")
        self.broker_returned(1)
        self.assertEqual(h.summary("t", 0)[:2], (1, 1))

    def test_an_uncleanly_restarted_isr_member_waits_for_a_down_isr_member(self) -> None:
        """Seed 181: no ELR was written, and electing 3 alone would make 1 eligible, so it waits."""
        self.both_isr_members_go_and_one_returns_uncleanly()

    def test_with_min_isr_one_too_an_uncleanly_restarted_isr_member_waits_for_a_down_isr_member(self) -> None:
        """
        Seed 140003 of C{python -m kafkatw.simulation --brokers 2 --disk-model
        --faults 12 --link-faults 4 --start-zookeeper-drops 2}: with
        C{min.insync.replicas} 1 no ELR is written, but an ISR member that
        went while no controller could take it out (1 here) holds every
        record acknowledged while it was in: 3, back uncleanly, is not
        elected alone until 1 returns.
        """
        self.h.topic_configs["t"] = {}
        self.both_isr_members_go_and_one_returns_uncleanly()

    def test_a_restart_the_controller_had_not_read_when_it_wrote_the_elr_is_not_eligible(self) -> None:
        """
        Seed 5 of C{python -m kafkatw.simulation --disk-model}: broker 1
        crashed and its new process, which lost what the old one had not
        flushed, registered; the controller, not yet told of it, moved 1 from
        t-0's ISR to its ELR in a state written after the registration (so
        not stale by its C{mzxid}); then 3, the leader, went and 1 was
        elected with an empty log.  The ELR entry says 1 was last in the ISR
        before the registration: it is not eligible.
        """
        h = self.h
        before = h.state("t", 0)
        client = FakeZooKeeperClient(h.server)
        h.wait(client.start())
        restart = h.wait(Registry(client).register_broker(1, "127.0.0.1", 9091, unclean_shutdown=True)).czxid
        h.broker_died(1)  # the controller acts on 1's old session ending before it reads the new registration
        written = h.state("t", 0)
        self.assertEqual((written.isr, written.elr), ([3], [1]))
        self.assertGreater(written.mzxid, restart)
        self.assertEqual(written.elr_isr_zxid(1), before.mzxid)
        self.assertLess(before.mzxid, restart)
        brokers = dict(h.metadata.brokers)
        brokers[1] = BrokerEndpoint(1, "127.0.0.1", 9091)
        h.metadata.set_brokers(brokers)
        h.wait(h.controller.brokers_changed(brokers))  # now it reads it: 1 leaves the ELR
        self.assertEqual((h.summary("t", 0), self.elr(0)), ((3, 0, [3]), []))
        h.broker_died(3)
        self.assertEqual(h.summary("t", 0), (3, 0, [3]))  # offline: 3 holds what 1 lost
        self.assertEqual(h.controller.partition_states.state(("t", 0)), "OfflinePartition")

    def test_a_new_controller_finds_the_stale_eligible_leader_replica(self) -> None:
        """The same, read by the next controller on its activation (as broker 2 did in seed 5), with 3 gone too."""
        h = self.h
        client = FakeZooKeeperClient(h.server)
        h.wait(client.start())
        h.wait(Registry(client).register_broker(1, "127.0.0.1", 9091, unclean_shutdown=True))
        h.broker_died(1)
        written = h.state("t", 0)
        self.assertEqual((written.leader, written.isr, written.elr), (3, [3], [1]))
        h.controller.resign()
        h.wait(h.zookeeper.delete("/controller"))
        successor_client = FakeZooKeeperClient(h.server)
        h.wait(successor_client.start())
        metadata = MetadataCache(2)
        metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9090 + b) for b in (1, 2)})
        metadata.set_topic(h.metadata.topics["t"])
        for p in range(2):
            metadata.set_partition_state("t", p, h.state("t", p))
        successor = KafkaController(2, BrokerConfig({"broker.id": 2}), Registry(successor_client), metadata,
                                    lambda t: h.topic_configs.get(t, {}))
        self.assertTrue(h.wait(successor.elect()))
        # offline, its state left as it is: the entry still says where 1 was last in sync, for
        # whichever controller comes next
        self.assertEqual(h.state("t", 0), written)
        self.assertEqual(successor.restarted_replicas[("t", 0)], {1})
        self.assertEqual(successor.partition_states.state(("t", 0)), "OfflinePartition")

    def test_with_min_isr_one_an_uncleanly_restarted_member_is_elected(self) -> None:
        """Nobody else is sure to hold more (the single-broker case after kill -9): it leads again."""
        h = self.h
        h.topic_configs["t"] = {}
        h.broker_died(1)
        h.broker_died(3)
        self.broker_returned(3, unclean=True)
        self.assertEqual(h.summary("t", 0), (3, 1, [3]))


# Seeds 51 and 62 of `python -m kafkatw.simulation --disk-model`, shrunk.
# 51: broker 3, leader of sim-0, is cut off from its peers: it shrinks the ISR to itself; it then
# crashes, loses its unflushed log, restarts, and was elected again as the only ISR member.
# 62: brokers 1 and 2 lose ZooKeeper, so the controller takes them out of every ISR; broker 3, the
# only one left, crashes and restarts: the same.
SEED_51 = Schedule(51, [Fault(16.373, "isolate", (3, "drop")), Fault(20.394, "heal-zk", (3,)),
                        Fault(48.386, "crash", (3, "end-session"))])
# 181: broker 1 pauses (its session expires), broker 3 crashes, broker 2 is cut off (its session
# expires), broker 3 restarts: it was elected alone while broker 2, down, held what it had lost.
SEED_181 = Schedule(181, [Fault(29.667, "pause", (1,)), Fault(35.387, "crash", (3, "expire-session")),
                          Fault(39.768, "isolate", (2, "drop")), Fault(40.714, "start", (3,))])
SEED_62 = Schedule(62, [Fault(14.093, "isolate-zk", (2,)), Fault(20.194, "isolate", (1, "drop")),
                        Fault(28.184, "crash", (3, "expire-session")), Fault(31.364, "start", (3,))])


class SimulationTests(unittest.TestCase):
    def check(self, seed: int, schedule: Schedule) -> None:
        result = run_seed(seed, dataclasses.replace(Settings(), disk_model=True), schedule=schedule)
        self.assertEqual(result.violations, [], "\n".join(map(str, result.violations[:10])))
        self.assertGreater(result.acknowledged, 500)

    def test_seed_51_loses_no_acknowledged_record(self) -> None:
        self.check(51, SEED_51)

    def test_seed_62_loses_no_acknowledged_record(self) -> None:
        self.check(62, SEED_62)

    def test_seed_181_loses_no_acknowledged_record(self) -> None:
        self.check(181, SEED_181)
