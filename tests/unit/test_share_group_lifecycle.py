"""
Unit tests of a share group's life on its coordinator and partition leaders
(KIP-932): unloaded when its coordinator moves away (as classic and consumer
groups), and its share-partition state deleted with the group (DeleteGroups),
so that a group made again with the same id starts at
C{share.auto.offset.reset}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.broker.metadata_cache import BrokerEndpoint
from kafkatw.errors import ErrorCode

from .test_share_group_apis import ShareHarness, acquired

BROKERS = {0: BrokerEndpoint(0, "127.0.0.1", 9092), 1: BrokerEndpoint(1, "127.0.0.1", 9093)}


class CoordinatorMoveTests(unittest.TestCase):
    def test_share_groups_that_moved_away_are_unloaded(self) -> None:
        s = ShareHarness(self, partitions=2)
        s.heartbeat("m1", 0)
        s.heartbeat("m2", 0)
        coordinator = s.h.apis.share_group_coordinator
        # broker 0 leaves /brokers/ids as far as the placement goes: broker 1 coordinates every group
        s.h.metadata.set_brokers({1: BROKERS[1]})
        s.h.apis.group_coordinator.brokers_changed()
        self.assertEqual(coordinator.groups, {})
        self.assertEqual([c for c in s.h.clock.getDelayedCalls() if c.func == coordinator._session_expired], [])
        # the group comes back (m2 left meanwhile): m1 rejoins alone and gets both partitions
        s.h.metadata.set_brokers(BROKERS)
        s.h.apis.group_coordinator.brokers_changed()
        r = s.heartbeat("m1", 0)
        self.assertEqual(r.error_code, ErrorCode.none)
        self.assertEqual(sorted(coordinator.groups[s.group].members), ["m1"])
        self.assertEqual([tp.partitions for tp in r.assignment.topic_partitions], [(0, 1)])


class DeleteGroupTests(unittest.TestCase):
    def test_deleting_a_share_group_deletes_its_state(self) -> None:
        s = ShareHarness(self)
        s.produce(4)
        s.heartbeat("m1", 0)
        s.fetched(s.fetch("m1"))
        s.acknowledge("m1", {0: [(0, 3, [1])]}, epoch=-1)
        s.heartbeat("m1", -1, topics=None)
        manager = s.h.apis.share_partition_manager
        self.assertEqual([v.start_offset for v in manager.persister.snapshots.values()], [4])
        result = s.h.call(42, 2, {"groups_names": [s.group]})
        self.assertEqual([r.error_code for r in result.results], [ErrorCode.none])
        self.assertEqual(manager.partitions, {})
        self.assertEqual([(v.state_epoch, v.start_offset) for v in manager.persister.snapshots.values()], [(1, -1)])
        # made again: share.auto.offset.reset (earliest here), not the deleted group's offset 4
        s.heartbeat("m2", 0)
        self.assertEqual(acquired(s.fetched(s.fetch("m2", epoch=0))), {0: [(0, 3, 1)]})
        self.assertEqual([v.state_epoch for v in manager.persister.snapshots.values()], [1])


class ShareSessionTests(unittest.TestCase):
    """Share sessions on a partition leader (Kafka's C{ShareSessionCache}, C{SharePartitionManager})."""

    def test_idle_sessions_are_evicted_and_their_number_capped(self) -> None:
        s = ShareHarness(self)
        manager = s.h.apis.share_partition_manager
        manager.max_sessions = 2
        self.assertEqual(s.fetched(s.fetch("m1")).error_code, ErrorCode.none)
        s.h.clock.advance(60)
        self.assertEqual(s.fetched(s.fetch("m2")).error_code, ErrorCode.none)
        self.assertEqual(s.fetched(s.fetch("m3")).error_code, ErrorCode.share_session_limit_reached)
        s.h.clock.advance(61)  # m1 unused for 121 s: evicted
        self.assertEqual(s.fetched(s.fetch("m3", epoch=0)).error_code, ErrorCode.none)
        self.assertEqual(s.fetched(s.fetch("m1", epoch=1)).error_code, ErrorCode.share_session_not_found)
        self.assertEqual(sorted(m for _, m in manager.sessions), ["m2", "m3"])

    def test_a_final_request_keeps_a_session_opened_meanwhile(self) -> None:
        s = ShareHarness(self)
        s.produce(4)
        self.assertEqual(acquired(s.fetched(s.fetch("m1"))), {0: [(0, 3, 1)]})
        manager = s.h.apis.share_partition_manager
        held: list[defer.Deferred] = []
        write = manager.persister.write

        def slow_write(key: Any, snapshot: Any) -> defer.Deferred:
            d = defer.Deferred()
            held.append(d)
            return d.addCallback(lambda _: write(key, snapshot))

        manager.persister.write = slow_write
        # m1 closes its session with an acknowledgement whose write is slow, and opens a new one meanwhile
        final = s.h.request(79, 1, {"group_id": s.group, "member_id": "m1", "share_session_epoch": -1, "topics": [
            {"topic_id": s.topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]})
        self.assertNoResult(final)
        self.assertEqual(acquired(s.fetched(s.fetch("m1", epoch=0))), {0: [(1, 3, 2)]})
        for d in held:
            d.callback(None)
        self.assertEqual(s.h.decode(79, 1, self.successResultOf(final)).error_code, ErrorCode.none)
        share = next(iter(manager.partitions.values())).share
        self.assertEqual(share.acquired_by("m1"), [1, 2, 3])
        self.assertEqual(s.fetched(s.fetch("m1", epoch=1)).error_code, ErrorCode.none)

    def test_a_final_share_fetch_only_acknowledges(self) -> None:
        s = ShareHarness(self)
        s.produce(2)
        s.fetched(s.fetch("m1"))
        self.assertEqual(s.fetched(s.fetch("m1", epoch=-1)).error_code, ErrorCode.invalid_request)
        response = s.fetched(s.fetch("m1", epoch=-1, acks={0: [(0, 1, [1])]}, partitions=()))
        self.assertEqual((response.error_code, acquired(response)), (ErrorCode.none, {0: []}))
        self.assertEqual(s.fetched(s.fetch("m1", epoch=1)).error_code, ErrorCode.share_session_not_found)


class ShareHeartbeatEpochTests(unittest.TestCase):
    def test_the_previous_member_epoch_is_accepted_and_below_minus_one_is_invalid(self) -> None:
        s = ShareHarness(self, partitions=2)
        self.assertEqual(s.heartbeat("m1", 0).member_epoch, 1)
        self.assertEqual(s.heartbeat("m2", 0).member_epoch, 2)
        r = s.heartbeat("m1", 1, topics=None)
        self.assertEqual((r.member_epoch, r.assignment.topic_partitions[0].partitions), (2, (0,)))
        # the answer above was lost: m1 heartbeats with epoch 1 again and gets its assignment again
        r = s.heartbeat("m1", 1, topics=None)
        self.assertEqual((r.error_code, r.member_epoch, r.assignment.topic_partitions[0].partitions),
                         (ErrorCode.none, 2, (0,)))
        self.assertEqual(s.heartbeat("m1", 2, topics=None).assignment, None)
        self.assertEqual(s.heartbeat("m1", 3, topics=None).error_code, ErrorCode.fenced_member_epoch)
        self.assertEqual(s.heartbeat("m1", -2, topics=None).error_code, ErrorCode.invalid_request)
