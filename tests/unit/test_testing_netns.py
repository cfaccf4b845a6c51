"""
The pure parts of the network-fault harness (L{kafkatw.testing_netns}): the
nemesis's nftables rules, the checker's rules for one partition, the longest
stall, and the reading of a replica's segment files below the high
watermark.  No root, no namespaces, no processes (the run itself is
tests/integration/test_network_faults.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from twisted.trial import unittest

from kafkatw.protocol.batch import build_batch
from kafkatw import testing_netns as netns_module
from kafkatw.testing_netns import (
    FAULT_KINDS,
    BridgeNetwork,
    Summary,
    check_partition,
    fault_rules,
    longest_stall,
    netns_unavailable_reason,
    replica_batches,
)


def _values(partition: int, seqs: list[int]) -> list[bytes]:
    return [f"{partition}:{seq}".encode() for seq in seqs]


class FaultRulesTests(unittest.SynchronousTestCase):
    def test_isolate_drops_everything_on_eth0_only(self) -> None:
        """Isolation drops what comes in and goes out on eth0; loopback traffic is untouched."""
        self.assertEqual(fault_rules("isolate"), [("input", 'iifname "eth0" drop'), ("output", 'oifname "eth0" drop')])

    def test_cuts_name_the_peers_both_ways(self) -> None:
        """A cut drops packets from the peers (input) and to them (output)."""
        for kind in ("zookeeper", "peers", "clients"):
            self.assertEqual(fault_rules(kind, ["10.213.0.11", "10.213.0.12"]),
                             [("input", "ip saddr { 10.213.0.11, 10.213.0.12 } drop"),
                              ("output", "ip daddr { 10.213.0.11, 10.213.0.12 } drop")])

    def test_loss_drops_a_share_each_way(self) -> None:
        self.assertEqual(fault_rules("loss", percent=20), [("input", "numgen random mod 100 < 20 drop"),
                                                           ("output", "numgen random mod 100 < 20 drop")])

    def test_refuses_what_would_not_be_a_fault(self) -> None:
        """An unknown kind, a cut of nobody, a loss of 0 % are errors, not silently healthy runs."""
        self.assertRaises(ValueError, fault_rules, "delay")
        self.assertRaises(ValueError, fault_rules, "peers", [])
        self.assertRaises(ValueError, fault_rules, "loss", percent=0)
        self.assertRaises(ValueError, fault_rules, "loss", percent=101)
        self.assertEqual(set(FAULT_KINDS), {"isolate", "zookeeper", "peers", "clients", "loss"})

    def test_not_root_is_a_reason_to_skip(self) -> None:
        """Without root the harness says why it cannot run (the test skips with that reason)."""
        self.patch(netns_module.os, "geteuid", lambda: 1000)
        self.assertIn("need root", netns_unavailable_reason())

    def test_interface_names_fit(self) -> None:
        """Linux interface names are at most 15 characters: the largest pid fits, a longer prefix is refused."""
        self.assertEqual(BridgeNetwork("ktnf4194304").bridge, "ktnf4194304br")
        self.assertRaises(ValueError, BridgeNetwork, "ktnf41943041234")


class CheckPartitionTests(unittest.SynchronousTestCase):
    def test_a_clean_history(self) -> None:
        """Every acknowledged record once, at its offset, in order, received by the group, offsets forward: clean."""
        records = list(enumerate(_values(0, [0, 1, 2, 3])))
        found = check_partition(0, records, {0: 0, 1: 1, 3: 3}, set(_values(0, [0, 1, 2, 3])),
                                [(1.0, 1), (1.5, 1), (2.0, 4)])
        self.assertEqual({k: v for k, v in found.items() if k != "details"},
                         {"lost": 0, "duplicated": 0, "reordered": 0, "offset_mismatches": 0,
                          "offsets_moved_back": 0, "group_missing": 0})
        self.assertEqual(found["details"], [])

    def test_unacknowledged_records_may_be_missing(self) -> None:
        """A send that failed (never acknowledged) may be absent: only acknowledged records count as lost."""
        records = list(enumerate(_values(1, [0, 2])))
        found = check_partition(1, records, {0: 0, 2: 1}, set(_values(1, [0, 2])), [])
        self.assertEqual(found["lost"], 0)
        self.assertEqual(found["offset_mismatches"], 0)

    def test_lost_and_misplaced(self) -> None:
        """A truncated acknowledged record is lost, and its offset now holds another record."""
        records = list(enumerate(_values(0, [0, 1, 3])))  # seq 2 acknowledged at offset 2, then truncated
        found = check_partition(0, records, {0: 0, 1: 1, 2: 2, 3: 3}, set(_values(0, [0, 1, 2, 3])), [])
        self.assertEqual(found["lost"], 1)
        self.assertEqual(found["offset_mismatches"], 2)  # seq 2 at 2 (holds seq 3) and seq 3 at 3 (nothing)
        self.assertIn("seq [2]", found["details"][0])

    def test_duplicates_and_reordering(self) -> None:
        """A retried batch written twice is a duplicate; acknowledged records out of sequence are reordered."""
        records = list(enumerate(_values(2, [0, 2, 1, 2, 3])))
        found = check_partition(2, records, {0: 0, 1: 2, 2: 1, 3: 4}, set(_values(2, [0, 1, 2, 3])), [])
        self.assertEqual(found["duplicated"], 1)
        self.assertEqual(found["reordered"], 1)  # 2 then 1 (the duplicate 2 after 1 is in order)
        self.assertIn("b'2:2' at offsets [1, 3]", found["details"][0])

    def test_group_missing_and_offsets_moving_back(self) -> None:
        """A record the group never saw, and a committed offset read lower than an earlier one."""
        records = list(enumerate(_values(0, [0, 1, 2])))
        found = check_partition(0, records, {0: 0, 1: 1, 2: 2}, set(_values(0, [0, 2])),
                                [(1.0, 2), (1.5, 3), (2.0, 1), (2.5, 3), (3.0, 2)])
        self.assertEqual(found["group_missing"], 1)
        # each read below the highest committed offset read before: 1 after 3, and 2 after 3 (3 again is not)
        self.assertEqual(found["offsets_moved_back"], 2)
        self.assertIn("committed offset 1 read at 2.00 s, after 3", "\n".join(found["details"]))


class LongestStallTests(unittest.SynchronousTestCase):
    def test_per_partition_and_overall(self) -> None:
        """One partition's leader unreachable for 5 s is a 5 s stall even while the others are acknowledged."""
        acks = {0: [1.0, 2.0, 7.0, 8.0], 1: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]}
        stall = longest_stall(acks, 0.0, 8.5)
        self.assertEqual((stall["partition_gap_s"], stall["partition_gap_at"], stall["partition"]), (5.0, 2.0, 0))
        self.assertEqual(stall["all_gap_s"], 1.0)

    def test_the_load_window_bounds_the_stall(self) -> None:
        """No acknowledgement after the last one until the end of the load counts too."""
        stall = longest_stall({0: [1.0]}, 0.0, 10.0)
        self.assertEqual((stall["partition_gap_s"], stall["partition_gap_at"]), (9.0, 1.0))
        self.assertEqual(longest_stall({}, 0.0, 3.0)["all_gap_s"], 3.0)


class ReplicaBatchesTests(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="kafkatw-netns-unit-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        os.makedirs(os.path.join(self.dir, "t-0"))

    def _segment(self, base: int, batches: list[bytes], tail: bytes = b"") -> None:
        with open(os.path.join(self.dir, "t-0", f"{base:020d}.log"), "wb") as f:
            f.write(b"".join(batches) + tail)

    def test_batches_below_the_high_watermark_across_segments(self) -> None:
        """Whole batches in order across segment files, stopping at the first batch at or past the high watermark."""
        b0 = build_batch([(None, b"a"), (None, b"b")], base_offset=0)
        b2 = build_batch([(None, b"c")], base_offset=2)
        b3 = build_batch([(None, b"d"), (None, b"e")], base_offset=3)
        self._segment(0, [b0, b2])
        self._segment(3, [b3])
        self.assertEqual(replica_batches(self.dir, "t", 0, 5), ([(0, b0), (2, b2), (3, b3)], 5))
        self.assertEqual(replica_batches(self.dir, "t", 0, 3), ([(0, b0), (2, b2)], 3))
        self.assertEqual(replica_batches(self.dir, "t", 0, 0), ([], -1))

    def test_a_replica_behind_or_torn(self) -> None:
        """A torn tail is not a batch: the replica holds batches up to where it is whole."""
        b0 = build_batch([(None, b"a")], base_offset=0)
        b1 = build_batch([(None, b"b")], base_offset=1)
        self._segment(0, [b0], tail=b1[:30])
        self.assertEqual(replica_batches(self.dir, "t", 0, 2), ([(0, b0)], 1))

    def test_no_partition_directory(self) -> None:
        self.assertEqual(replica_batches(self.dir, "missing", 0, 10), ([], -1))


class SummaryTests(unittest.SynchronousTestCase):
    def test_ok_only_without_findings(self) -> None:
        summary = Summary(seed=1, seconds=45.0, acknowledged=10)
        self.assertTrue(summary.ok)
        for name, value in [("lost", 1), ("duplicated", 1), ("reordered", 1), ("offset_mismatches", 1),
                            ("replica_mismatches", 1), ("offsets_moved_back", 1), ("group_missing", 1),
                            ("stuck", [2]), ("producer_fatal_errors", 1), ("client_errors", 1)]:
            bad = Summary(seed=1, seconds=45.0, **{name: value})
            self.assertFalse(bad.ok, name)
            self.assertIn(f'"{name}": {value}'.replace("'", '"'), bad.to_json())
