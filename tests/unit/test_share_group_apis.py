"""
Unit tests of the share-group APIs (KIP-932) on one broker's real
L{KafkaApis} in memory (L{BrokerHarness}: real logs, a L{MemoryReactorClock}):
ShareGroupHeartbeat and ShareGroupDescribe membership and assignment,
ShareFetch and ShareAcknowledge with share sessions, acquisition locks and
delivery counts, encoded and decoded as on the wire.
"""

from __future__ import annotations

import uuid
from typing import Any

from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.broker.group_coordinator import coordinator_for
from kafkatw.broker.share_group_coordinator import simple_assignment
from kafkatw.errors import ErrorCode
from kafkatw.protocol.records import decode_batches, encode_batch

from .test_broker import BrokerHarness

LOCK_MS = 10000


def group_id(prefix: str = "sg") -> str:
    """A group id broker 0 (of brokers 0 and 1) coordinates."""
    return next(g for g in (f"{prefix}{i}" for i in range(1000)) if coordinator_for(g, [0, 1]) == 0)


class ShareHarness:
    def __init__(self, testcase: unittest.TestCase, partitions: int = 1, **overrides: Any) -> None:
        configs = {"group.share.auto.offset.reset": "earliest", "group.share.record.lock.duration.ms": LOCK_MS,
                   "group.share.delivery.count.limit": 3,
                   # group configs below Kafka's bounds (45 s sessions, 5 s heartbeats, 15 s locks) for short tests
                   "group.share.min.record.lock.duration.ms": 1000, "group.share.min.session.timeout.ms": 1000,
                   "group.share.min.heartbeat.interval.ms": 1000, **overrides}
        self.h = BrokerHarness(testcase, **configs)
        self.testcase = testcase
        self.meta = self.h.create_topic("t", partitions)
        self.topic_id = self.meta.topic_id
        self.group = group_id()
        self.epochs: dict[str, int] = {}

    def produce(self, count: int, partition: int = 0, start: int = 0) -> None:
        records = encode_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(start, start + count)])
        result = self.h.produce("t", partition, records)
        if isinstance(result, defer.Deferred):
            self.testcase.successResultOf(result)

    def heartbeat(self, member: str, epoch: int, topics: Any = ("t",)) -> Any:
        return self.h.call(76, 1, {"group_id": self.group, "member_id": member, "member_epoch": epoch,
                                   "rack_id": None, "subscribed_topic_names": list(topics) if topics else None})

    def fetch(self, member: str, epoch: int | None = None, acks: dict[int, list] | None = None,
              partitions: Any = (0,), max_records: int = 500, max_wait_ms: int = 0, version: int = 1) -> Any:
        if epoch is None:
            epoch = self.epochs.get(member, 0)
        self.epochs[member] = 1 if epoch == 0 else epoch + 1
        acks = acks or {}
        body = {"group_id": self.group, "member_id": member, "share_session_epoch": epoch, "max_wait": max_wait_ms,
                "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records, "batch_size": 500,
                "topics": [{"topic_id": self.topic_id, "partitions": [
                    {"partition_index": p, "acknowledgement_batches": [
                        {"first_offset": a, "last_offset": b, "acknowledge_types": list(t)}
                        for a, b, t in acks.get(p, [])]} for p in sorted(set(partitions) | set(acks))]}],
                "forgotten_topics_data": []}
        result = self.h.request(78, version, body)
        return result

    def settle(self, d: defer.Deferred) -> Any:
        """C{d}'s result, the clock advanced in steps of the persister's retry backoff (0.1 s) until it fires."""
        for _ in range(20):
            if d.called:
                break
            self.h.clock.advance(0.1)
        return self.testcase.successResultOf(d)

    def fetched(self, result: Any, version: int = 1) -> Any:
        if isinstance(result, defer.Deferred):
            result = self.settle(result)
        return self.h.decode(78, version, result)

    def acknowledge(self, member: str, acks: dict[int, list], epoch: int | None = None) -> Any:
        if epoch is None:
            epoch = self.epochs[member]
        self.epochs[member] = epoch + 1
        body = {"group_id": self.group, "member_id": member, "share_session_epoch": epoch,
                "topics": [{"topic_id": self.topic_id, "partitions": [
                    {"partition_index": p, "acknowledgement_batches": [
                        {"first_offset": a, "last_offset": b, "acknowledge_types": list(t)} for a, b, t in batches]}
                    for p, batches in acks.items()]}]}
        result = self.h.request(79, 1, body)
        if isinstance(result, defer.Deferred):
            result = self.settle(result)
        return self.h.decode(79, 1, result)


def acquired(response: Any) -> dict[int, list[tuple[int, int, int]]]:
    """partition -> (first, last, delivery count) of a decoded ShareFetch response."""
    return {p.partition_index: [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
            for t in response.responses for p in t.partitions}


def values(response: Any) -> list[bytes]:
    """The record values a ShareFetch response delivers (only its acquired offsets)."""
    out = []
    for t in response.responses:
        for p in t.partitions:
            ranges = [(a.first_offset, a.last_offset) for a in p.acquired_records]
            for batch in decode_batches(bytes(p.records or b"")):
                for record in batch.records:
                    if any(a <= record.offset <= b for a, b in ranges):
                        out.append(record.value)
    return out


class SimpleAssignorTests(unittest.TestCase):
    def test_members_fewer_than_partitions(self) -> None:
        self.assertEqual(simple_assignment({"a": ("t",), "b": ("t",)}, {"t": 3}),
                         {"a": {"t": [0, 2]}, "b": {"t": [1]}})

    def test_members_more_than_partitions_share(self) -> None:
        self.assertEqual(simple_assignment({m: ("t",) for m in "abc"}, {"t": 2}),
                         {"a": {"t": [0]}, "b": {"t": [1]}, "c": {"t": [0]}})

    def test_missing_topic(self) -> None:
        self.assertEqual(simple_assignment({"a": ("t", "u")}, {"t": 1}), {"a": {"t": [0]}})


class HeartbeatTests(unittest.TestCase):
    def test_join_heartbeat_leave(self) -> None:
        s = ShareHarness(self, partitions=2)
        r = s.heartbeat("m1", 0)
        self.assertEqual((r.error_code, r.member_id, r.member_epoch), (ErrorCode.none, "m1", 1))
        self.assertEqual(int(r.heartbeat_interval.total_seconds() * 1000), 5000)
        self.assertEqual([(tp.topic_id, tp.partitions) for tp in r.assignment.topic_partitions],
                         [(s.topic_id, (0, 1))])
        r2 = s.heartbeat("m2", 0)
        self.assertEqual((r2.member_epoch, r2.assignment.topic_partitions[0].partitions), (2, (1,)))
        # m1 is behind the group epoch: its heartbeat brings epoch 2 and its new assignment
        r = s.heartbeat("m1", 1, topics=None)
        self.assertEqual((r.member_epoch, r.assignment.topic_partitions[0].partitions), (2, (0,)))
        r = s.heartbeat("m1", 2, topics=None)
        self.assertEqual((r.member_epoch, r.assignment), (2, None))
        self.assertEqual(s.heartbeat("m1", 3, topics=None).error_code, ErrorCode.fenced_member_epoch)
        self.assertEqual(s.heartbeat("nobody", 3, topics=None).error_code, ErrorCode.unknown_member_id)
        self.assertEqual(s.heartbeat("m2", -1, topics=None).member_epoch, -1)
        described = s.h.call(77, 1, {"group_ids": [s.group], "include_authorized_operations": False}).groups[0]
        self.assertEqual((described.group_state, described.group_epoch, described.assignor_name),
                         ("Stable", 3, "simple"))
        self.assertEqual([(m.member_id, m.member_epoch) for m in described.members], [("m1", 2)])
        self.assertEqual([(tp.topic_name, tp.partitions) for tp in described.members[0].assignment.topic_partitions],
                         [("t", (0, 1))])

    def test_session_timeout_removes_the_member(self) -> None:
        s = ShareHarness(self, **{"group.share.session.timeout.ms": 45000})
        s.heartbeat("m1", 0)
        s.h.clock.advance(44.9)
        self.assertEqual(s.heartbeat("m1", 1, topics=None).error_code, ErrorCode.none)
        s.h.clock.advance(45)
        self.assertEqual(s.heartbeat("m1", 1, topics=None).error_code, ErrorCode.unknown_member_id)
        described = s.h.call(77, 1, {"group_ids": [s.group], "include_authorized_operations": False}).groups[0]
        self.assertEqual((described.group_state, described.members), ("Empty", ()))

    def test_not_coordinator(self) -> None:
        s = ShareHarness(self)
        s.group = next(g for g in (f"x{i}" for i in range(1000)) if coordinator_for(g, [0, 1]) == 1)
        self.assertEqual(s.heartbeat("m1", 0).error_code, ErrorCode.not_coordinator)

    def test_list_groups_shows_share_groups(self) -> None:
        s = ShareHarness(self)
        s.heartbeat("m1", 0)
        listed = s.h.call(16, 4, {"states_filter": []}).groups
        self.assertEqual([(g.group_id, g.protocol_type, g.group_state) for g in listed], [(s.group, "share", "Stable")])


class ShareFetchTests(unittest.TestCase):
    def test_fetch_acquires_and_acknowledge_accepts(self) -> None:
        s = ShareHarness(self)
        s.produce(5)
        response = s.fetched(s.fetch("m1"))
        self.assertEqual(response.error_code, ErrorCode.none)
        self.assertEqual(int(response.acquisition_lock_timeout.total_seconds() * 1000), LOCK_MS)
        self.assertEqual(acquired(response), {0: [(0, 4, 1)]})
        self.assertEqual(values(response), [b"v%d" % i for i in range(5)])
        # the other member finds everything acquired
        self.assertEqual(acquired(s.fetched(s.fetch("m2"))), {0: []})
        r = s.acknowledge("m1", {0: [(0, 1, [1]), (2, 4, [2])]})
        self.assertEqual([p.error_code for t in r.responses for p in t.partitions], [ErrorCode.none])
        response = s.fetched(s.fetch("m2"))
        self.assertEqual(acquired(response), {0: [(2, 4, 2)]})
        self.assertEqual(values(response), [b"v2", b"v3", b"v4"])
        share = s.h.apis.share_partition_manager.partitions[next(iter(s.h.apis.share_partition_manager.partitions))]
        self.assertEqual(share.share.start_offset, 2)

    def test_piggy_backed_acknowledgements_and_lock_expiry(self) -> None:
        s = ShareHarness(self)
        s.produce(3)
        self.assertEqual(acquired(s.fetched(s.fetch("m1"))), {0: [(0, 2, 1)]})
        # accepts 0 with the next fetch; 1 and 2 stay acquired until their lock expires
        response = s.fetched(s.fetch("m1", acks={0: [(0, 0, [1])]}))
        self.assertEqual(response.responses[0].partitions[0].acknowledge_error_code, 0)
        self.assertEqual(acquired(response), {0: []})
        s.h.clock.advance(LOCK_MS / 1000)
        self.assertEqual(acquired(s.fetched(s.fetch("m2"))), {0: [(1, 2, 2)]})
        # m1's acknowledgement of records it no longer holds fails
        r = s.acknowledge("m1", {0: [(1, 1, [1])]})
        self.assertEqual(r.responses[0].partitions[0].error_code, ErrorCode.invalid_record_state)

    def test_rejected_and_delivery_limit_archive(self) -> None:
        s = ShareHarness(self)  # delivery count limit 3
        s.produce(2)
        self.assertEqual(acquired(s.fetched(s.fetch("m1", epoch=0))), {0: [(0, 1, 1)]})
        s.acknowledge("m1", {0: [(0, 1, [3, 2])]})  # reject offset 0 (archived), release offset 1
        for delivery in (2, 3):
            self.assertEqual(acquired(s.fetched(s.fetch("m1", epoch=0))), {0: [(1, 1, delivery)]})
            s.acknowledge("m1", {0: [(1, 1, [2])]})
        # the third delivery's release reached the limit: archived, never delivered again
        self.assertEqual(acquired(s.fetched(s.fetch("m1", epoch=0))), {0: []})
        share = next(iter(s.h.apis.share_partition_manager.partitions.values())).share
        self.assertEqual(share.start_offset, 2)

    def test_session_epochs(self) -> None:
        s = ShareHarness(self)
        s.produce(1)
        self.assertEqual(s.fetched(s.fetch("m1", epoch=3)).error_code, ErrorCode.share_session_not_found)
        s.fetched(s.fetch("m1", epoch=0))
        self.assertEqual(s.fetched(s.fetch("m1", epoch=5)).error_code, ErrorCode.invalid_share_session_epoch)
        self.assertEqual(s.fetched(s.fetch("m1", epoch=1)).error_code, ErrorCode.none)
        # an initial fetch may not carry acknowledgements
        self.assertEqual(s.fetched(s.fetch("m1", epoch=0, acks={0: [(0, 0, [1])]})).error_code,
                         ErrorCode.invalid_request)
        # ShareAcknowledge cannot open a session (Kafka: INVALID_SHARE_SESSION_EPOCH)
        self.assertEqual(s.acknowledge("m9", {0: [(0, 0, [1])]}, epoch=0).error_code,
                         ErrorCode.invalid_share_session_epoch)

    def test_closing_the_session_releases_records(self) -> None:
        s = ShareHarness(self)
        s.produce(4)
        s.fetched(s.fetch("m1"))
        r = s.acknowledge("m1", {0: [(0, 0, [1])]}, epoch=-1)
        self.assertEqual(r.responses[0].partitions[0].error_code, ErrorCode.none)
        self.assertEqual(acquired(s.fetched(s.fetch("m2"))), {0: [(1, 3, 2)]})
        self.assertNotIn((s.group, "m1"), s.h.apis.share_partition_manager.sessions)

    def test_incremental_response_leaves_out_quiet_partitions(self) -> None:
        s = ShareHarness(self, partitions=2)
        s.produce(2, partition=1)
        response = s.fetched(s.fetch("m1", partitions=(0, 1)))
        self.assertEqual(acquired(response), {0: [], 1: [(0, 1, 1)]})
        response = s.fetched(s.fetch("m1", partitions=()))
        self.assertEqual(acquired(response), {})
        s.produce(1, partition=0)
        self.assertEqual(acquired(s.fetched(s.fetch("m1", partitions=()))), {0: [(0, 0, 1)]})

    def test_waits_for_records(self) -> None:
        s = ShareHarness(self)
        d = s.fetch("m1", max_wait_ms=500)
        self.assertNoResult(d)
        s.produce(2)
        self.assertEqual(acquired(s.fetched(d)), {0: [(0, 1, 1)]})
        d = s.fetch("m1", max_wait_ms=500)
        self.assertNoResult(d)
        s.h.clock.advance(0.5)
        self.assertEqual(acquired(s.fetched(d)), {})

    def test_latest_starts_at_the_high_watermark(self) -> None:
        s = ShareHarness(self, **{"group.share.auto.offset.reset": "latest"})
        s.produce(3)
        self.assertEqual(acquired(s.fetched(s.fetch("m1"))), {0: []})
        s.produce(2, start=3)
        response = s.fetched(s.fetch("m1"))
        self.assertEqual(acquired(response), {0: [(3, 4, 1)]})
        self.assertEqual(values(response), [b"v3", b"v4"])

    def test_max_records_and_record_locks(self) -> None:
        s = ShareHarness(self, **{"group.share.partition.max.record.locks": 4})
        for i in range(6):
            s.produce(1, start=i)
        self.assertEqual(acquired(s.fetched(s.fetch("m1", max_records=2))), {0: [(0, 1, 1)]})
        self.assertEqual(acquired(s.fetched(s.fetch("m2", max_records=10))), {0: [(2, 3, 1)]})
        self.assertEqual(acquired(s.fetched(s.fetch("m3", max_records=10))), {0: []})

    def test_unknown_topic_id(self) -> None:
        s = ShareHarness(self)
        s.topic_id = uuid.uuid4()
        response = s.fetched(s.fetch("m1"))
        self.assertEqual(response.responses[0].partitions[0].error_code, ErrorCode.unknown_topic_id)

    def test_v2_is_served(self) -> None:
        s = ShareHarness(self)
        s.produce(1)
        self.assertEqual(acquired(s.fetched(s.fetch("m1", version=2), version=2)), {0: [(0, 0, 1)]})


class DurableStateTests(unittest.TestCase):
    """The share coordinator on the harness's broker: state in ``__share_group_state``."""

    def harness(self) -> ShareHarness:
        s = ShareHarness(self, **{"share.coordinator.state.topic.num.partitions": 3,
                                  "share.coordinator.state.topic.replication.factor": 1,
                                  "share.coordinator.state.topic.min.isr": 1})
        self.sent: list[int] = []

        def send(broker: int, api_key: int, body: Any) -> defer.Deferred:
            self.sent.append(api_key)
            return defer.fail(AssertionError("the only broker leads every state partition"))

        s.h.create_topic("__share_group_state", 3)  # every partition on broker 0
        s.h.apis.start_share_coordinator(s.h.admin, lambda: int(s.h.clock.seconds() * 1000), send)
        return s

    def test_state_survives_a_new_leader(self) -> None:
        s = self.harness()
        s.produce(6)
        self.assertEqual(acquired(s.fetched(s.fetch("m1"))), {0: [(0, 5, 1)]})
        self.assertIn("__share_group_state", s.h.metadata.topics)
        s.acknowledge("m1", {0: [(0, 1, [1]), (2, 2, [3]), (3, 3, [2]), (5, 5, [1])]})
        coordinator = s.h.apis.share_coordinator
        # a new leader: the share partitions and the coordinator's state are loaded again from the log
        s.h.apis.share_partition_manager.close()
        for partition in range(3):
            coordinator.leadership_changed("__share_group_state", partition, "leader", 0)
        response = s.fetched(s.fetch("m2"))
        # 0-2 are final (accepted, rejected), 5 accepted; 3 was released and 4 still acquired when the
        # state was last written (an acquired record is written AVAILABLE with its delivery count): both again
        self.assertEqual(acquired(response), {0: [(3, 4, 2)]})
        self.assertEqual(values(response), [b"v3", b"v4"])
        self.assertEqual(self.sent, [])

    def test_state_records_are_compacted_keys(self) -> None:
        from kafkatw.broker.share_state import decode_snapshot_key, decode_snapshot_value
        from kafkatw.protocol.records import decode_batches as decode
        import os
        s = self.harness()
        s.produce(2)
        s.fetched(s.fetch("m1"))
        s.acknowledge("m1", {0: [(0, 1, [1])]})
        records = []
        for (topic, _), p in s.h.replica_manager.partitions.items():
            if topic == "__share_group_state":
                log = p.log
                for r in log.read(log.log_start_offset, 1 << 30, log.log_end_offset):
                    for batch in decode(os.pread(r.fileno, r.length, r.position)):
                        records += [(decode_snapshot_key(x.key), decode_snapshot_value(x.value))
                                    for x in batch.records]
        self.assertEqual([(k.group_id, k.partition, v.start_offset) for k, v in records],
                         [(s.group, 0, 0), (s.group, 0, 2)])


class ShareGroupOffsetsTests(unittest.TestCase):
    def test_describe_and_reset_offsets(self) -> None:
        s = ShareHarness(self)
        s.produce(4)
        s.heartbeat("m1", 0)
        s.fetched(s.fetch("m1"))
        s.acknowledge("m1", {0: [(0, 3, [1])]}, epoch=-1)

        def describe() -> Any:
            return s.h.call(90, 1, {"groups": [{"group_id": s.group, "topics": None}]}).groups[0]

        g = describe()
        self.assertEqual([(t.topic_name, p.partition_index, p.start_offset) for t in g.topics for p in t.partitions],
                         [("t", 0, 4)])
        alter = {"group_id": s.group, "topics": [{"topic_name": "t", "partitions": [
            {"partition_index": 0, "start_offset": 1}]}]}
        self.assertEqual(s.h.call(91, 0, alter).error_code, ErrorCode.non_empty_group)
        s.heartbeat("m1", -1, topics=None)
        response = s.h.call(91, 0, alter)
        self.assertEqual([p.error_code for t in response.responses for p in t.partitions], [ErrorCode.none])
        self.assertEqual(describe().topics[0].partitions[0].start_offset, 1)
        # the group's next first session on the leader loads the reset state
        self.assertEqual(acquired(s.fetched(s.fetch("m2", epoch=0))), {0: [(1, 3, 1)]})

    def test_a_stale_share_partition_is_fenced_after_a_reset(self) -> None:
        s = ShareHarness(self)
        s.produce(2)
        s.fetched(s.fetch("m1"))  # m1 holds 0 and 1; its share partition stays loaded
        manager = s.h.apis.share_partition_manager
        stale = next(iter(manager.partitions.values())).share
        s.testcase.successResultOf(manager.persister.write(next(iter(manager.partitions)), stale.snapshot()._replace(
            state_epoch=1, start_offset=1, state_batches=())))  # a reset written by the coordinator
        r = s.acknowledge("m1", {0: [(0, 1, [1])]})
        self.assertEqual(r.responses[0].partitions[0].error_code, ErrorCode.fenced_state_epoch)
        self.assertEqual(manager.partitions, {})  # dropped: loaded again from the reset state
        self.assertEqual(acquired(s.fetched(s.fetch("m2"))), {0: [(1, 1, 1)]})


class GroupConfigTests(unittest.TestCase):
    """
    A share group's own configs (KIP-932, Kafka's C{GroupConfig}), set with
    IncrementalAlterConfigs on resource type GROUP (32) and read with
    DescribeConfigs, honoured by the share group coordinator and the share
    partitions in place of the broker's C{group.share.*}.
    """

    def alter(self, s: ShareHarness, *configs: tuple[str, int, str | None], group: str | None = None) -> int:
        """IncrementalAlterConfigs v1 of C{(name, operation 0 SET / 1 DELETE, value)}; its error code."""
        result = s.h.request(44, 1, {"resources": [{
            "resource_type": 32, "resource_name": group or s.group,
            "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in configs]}],
            "validate_only": False})
        s.h.clock.advance(0)
        if isinstance(result, defer.Deferred):
            result = self.successResultOf(result)
        return s.h.decode(44, 1, result).responses[0].error_code

    def described(self, s: ShareHarness) -> dict[str, tuple[str, int]]:
        """DescribeConfigs v4 of the group: name -> (value, config source: 8 the group's, 5 the default)."""
        response = s.h.call(32, 4, {"resources": [{"resource_type": 32, "resource_name": s.group,
                                                   "configuration_keys": None}],
                                    "include_synonyms": False, "include_documentation": False})
        return {c.name: (c.value, c.config_source) for c in response.results[0].configs}

    def test_session_timeout_and_heartbeat_interval(self) -> None:
        """C{share.session.timeout.ms} and C{share.heartbeat.interval.ms} of one group; another keeps the broker's."""
        # within Kafka's default bounds (group.share.min/max.session.timeout.ms 45000..60000,
        # group.share.min/max.heartbeat.interval.ms 5000..15000)
        s = ShareHarness(self, **{"group.share.session.timeout.ms": 45000,
                                  "group.share.heartbeat.interval.ms": 5000})
        self.assertEqual(self.alter(s, ("share.session.timeout.ms", 0, "55000"),
                                    ("share.heartbeat.interval.ms", 0, "6000")), ErrorCode.none)
        self.assertEqual(self.described(s)["share.session.timeout.ms"], ("55000", 8))
        r = s.heartbeat("m1", 0)
        self.assertEqual(r.heartbeat_interval.total_seconds(), 6.0)
        s.h.clock.advance(54.9)
        self.assertEqual(s.heartbeat("m1", 1, topics=None).error_code, ErrorCode.none)
        s.h.clock.advance(50)  # more than the broker's 45 s, less than the group's 55 s
        self.assertEqual(s.heartbeat("m1", 1, topics=None).error_code, ErrorCode.none)
        s.h.clock.advance(55.1)
        self.assertEqual(s.heartbeat("m1", 1, topics=None).error_code, ErrorCode.unknown_member_id)
        # a group without overrides: the broker's 5 s and 45 s
        other = ShareHarness(self, **{"group.share.session.timeout.ms": 45000})
        other.group = group_id("other")
        self.assertEqual(other.heartbeat("m1", 0).heartbeat_interval.total_seconds(), 5.0)
        other.h.clock.advance(45.1)
        self.assertEqual(other.heartbeat("m1", 1, topics=None).error_code, ErrorCode.unknown_member_id)
        # the override deleted: the broker's again, from the next heartbeat
        self.assertEqual(self.alter(s, ("share.heartbeat.interval.ms", 1, None)), ErrorCode.none)
        self.assertEqual(s.heartbeat("m2", 0).heartbeat_interval.total_seconds(), 5.0)

    def test_partition_max_record_locks(self) -> None:
        """C{share.partition.max.record.locks} caps the group's acquired records; a change applies at once."""
        s = ShareHarness(self, **{"group.share.partition.max.record.locks": 200})
        self.assertEqual(self.described(s)["share.partition.max.record.locks"], ("200", 5))
        self.assertEqual(self.alter(s, ("share.partition.max.record.locks", 0, "100")), ErrorCode.none)
        self.assertEqual(self.described(s)["share.partition.max.record.locks"], ("100", 8))
        for start in range(0, 300, 10):
            records = encode_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(start, start + 10)])
            s.h.produce("t", 0, records)
        self.assertEqual(acquired(s.fetched(s.fetch("m1", max_records=500))), {0: [(0, 99, 1)]})
        self.assertEqual(acquired(s.fetched(s.fetch("m2", max_records=500))), {0: []})
        # raised while the share partition is loaded: 50 more may be acquired
        self.assertEqual(self.alter(s, ("share.partition.max.record.locks", 0, "150")), ErrorCode.none)
        self.assertEqual(acquired(s.fetched(s.fetch("m2", max_records=500))), {0: [(100, 149, 1)]})

    def test_record_lock_duration_and_delivery_count_limit(self) -> None:
        """The group's C{share.record.lock.duration.ms} times the locks and is ShareFetch's AcquisitionLockTimeoutMs."""
        s = ShareHarness(self)  # the broker's lock: LOCK_MS (10 s)
        self.assertEqual(self.alter(s, ("share.record.lock.duration.ms", 0, "20000"),
                                    ("share.delivery.count.limit", 0, "2")), ErrorCode.none)
        s.produce(1)
        response = s.fetched(s.fetch("m1"))
        self.assertEqual(int(response.acquisition_lock_timeout.total_seconds() * 1000), 20000)
        self.assertEqual(acquired(response), {0: [(0, 0, 1)]})
        s.h.clock.advance(10.0)  # the broker's lock would have expired
        self.assertEqual(acquired(s.fetched(s.fetch("m2"))), {0: []})
        s.h.clock.advance(10.0)
        self.assertEqual(acquired(s.fetched(s.fetch("m2"))), {0: [(0, 0, 2)]})
        s.h.clock.advance(20.0)  # the second delivery's lock expires: the limit (2) archives it
        self.assertEqual(acquired(s.fetched(s.fetch("m3"))), {0: []})

    def test_invalid_values(self) -> None:
        """Kafka's bounds: 100..10000 locks, a heartbeat below the session timeout."""
        s = ShareHarness(self)
        for configs in ([("share.partition.max.record.locks", 0, "99")],
                        [("share.partition.max.record.locks", 0, "10001")],
                        [("share.session.timeout.ms", 0, "1000"), ("share.heartbeat.interval.ms", 0, "1000")]):
            self.assertEqual(self.alter(s, *configs), ErrorCode.invalid_config)
        self.assertEqual(s.h.apis.group_configs.group_config(s.group), {})


class ShareFetchQuotaTests(unittest.TestCase):
    def test_consumer_byte_rate_throttles_and_still_delivers(self) -> None:
        """A ShareFetch over C{consumer_byte_rate} answers a throttle time, with the records it acquired."""
        from kafkatw.broker.quota_manager import QuotaEntity

        s = ShareHarness(self)
        s.produce(1)
        no_quota = s.fetched(s.fetch("m1"))
        self.assertEqual(no_quota.throttle_time.total_seconds(), 0)
        s.h.apis.quotas.update(QuotaEntity(None, "test"), {"consumer_byte_rate": "100"})
        records = encode_batch([(None, b"y" * 5000, [], 2000)])
        s.h.produce("t", 0, records)
        response = s.fetched(s.fetch("m2"))
        self.assertGreater(response.throttle_time.total_seconds(), 0)
        self.assertEqual(acquired(response), {0: [(1, 1, 1)]})
        self.assertEqual(values(response), [b"y" * 5000])


class WaitingShareFetchTests(unittest.TestCase):
    """A ShareFetch waiting for records (MaxWaitMs) is answered as soon as records may be acquired again."""

    def test_an_acknowledgement_under_the_lock_cap_answers_a_waiting_fetch(self) -> None:
        s = ShareHarness(self, **{"group.share.partition.max.record.locks": 4})
        for i in range(6):
            s.produce(1, start=i)
        self.assertEqual(acquired(s.fetched(s.fetch("m1", max_records=10))), {0: [(0, 3, 1)]})
        waiting = s.fetch("m2", max_wait_ms=30000)  # every lock is taken: it waits
        self.assertNoResult(waiting)
        s.acknowledge("m1", {0: [(0, 3, [1])]})  # four locks freed
        response = s.h.decode(78, 1, self.successResultOf(waiting))
        self.assertEqual(acquired(response), {0: [(4, 5, 1)]})
        self.assertLess(s.h.clock.seconds(), 5)  # not its 30 s

    def test_a_lock_expiry_answers_a_waiting_fetch(self) -> None:
        s = ShareHarness(self)  # locks of LOCK_MS (10 s)
        s.produce(2)
        self.assertEqual(acquired(s.fetched(s.fetch("m1"))), {0: [(0, 1, 1)]})
        waiting = s.fetch("m2", max_wait_ms=30000)
        s.h.clock.advance(LOCK_MS / 1000 - 0.1)
        self.assertNoResult(waiting)
        s.h.clock.advance(0.1)
        for _ in range(5):  # the expiry's state write, then the fetch
            s.h.clock.advance(0)
        response = s.h.decode(78, 1, self.successResultOf(waiting))
        self.assertEqual(acquired(response), {0: [(0, 1, 2)]})

    def test_a_fetch_woken_for_nothing_waits_on(self) -> None:
        """Another group's acknowledgement wakes it; nothing for it to acquire: it waits out its MaxWaitMs."""
        s = ShareHarness(self)
        s.produce(1)
        self.assertEqual(acquired(s.fetched(s.fetch("m1"))), {0: [(0, 0, 1)]})
        waiting = s.fetch("m1", max_wait_ms=3000)  # m1 holds everything there is
        other = ShareHarness.__new__(ShareHarness)
        other.h, other.testcase, other.topic_id, other.epochs = s.h, self, s.topic_id, {}
        other.group = group_id("other")
        self.assertEqual(acquired(other.fetched(other.fetch("o1"))), {0: [(0, 0, 1)]})
        other.acknowledge("o1", {0: [(0, 0, [1])]})
        self.assertNoResult(waiting)
        s.h.clock.advance(3)
        self.assertEqual(acquired(s.h.decode(78, 1, self.successResultOf(waiting))), {})  # a quiet partition
