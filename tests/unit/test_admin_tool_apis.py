"""
Unit tests of DeleteRecords, DescribeLogDirs, OffsetDelete and ListOffsets
v7/v8 through KafkaApis (real logs in a temporary directory, a fake
ZooKeeper, a MemoryReactorClock), and of the log start offset in the storage.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from typing import Any

from twisted.trial import unittest

from kafkatw.broker.group_coordinator import Group, GroupState, Member
from kafkatw.errors import ErrorCode, OffsetOutOfRangeError
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.consumer_protocol import decode_subscription
from kafkatw.security.acl import AclOperation, ResourceType
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import LogConfig
from kafkatw.storage.log_manager import LogManager
from kafkatw.zookeeper.zk_data import CommittedOffset
from tests.unit.test_broker import BrokerHarness


def records(n: int, ts: int = 1_000) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(n)], timestamp_ms=ts)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


class DenyAll:
    """An authorizer refusing everything but what C{allowed} lists as (operation, resource type)."""

    def __init__(self, allowed: set = frozenset()) -> None:
        self.allowed = allowed

    def authorize(self, principal: Any, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        return (operation, resource_type) in self.allowed


class DeleteRecordsTests(unittest.TestCase):
    def harness(self, replicas: list[int] = [0]) -> BrokerHarness:
        h = BrokerHarness(self, **{"replica.lag.time.max.ms": 100})
        h.create_topic("t", 1, replicas=replicas)
        return h

    def fill(self, h: BrokerHarness, batches: int = 4, size: int = 5) -> None:
        for i in range(batches):
            self.assertEqual(h.produce("t", 0, records(size, 1_000 + i)).error_code, ErrorCode.none)

    def delete(self, h: BrokerHarness, offset: int, timeout_ms: int = 1000, topic: str = "t", partition: int = 0
               ) -> Any:
        body = {"topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}],
                "timeout": timeout_ms}
        return h.request(21, 2, body)

    def answer(self, h: BrokerHarness, result: Any) -> Any:
        result = self.successResultOf(result)
        return h.decode(21, 2, result).topics[0].partitions[0]

    def test_moves_the_log_start_offset_inside_a_batch(self) -> None:
        h = self.harness()
        self.fill(h)
        p = self.answer(h, self.delete(h, 7))
        self.assertEqual((p.error_code, p.low_watermark), (ErrorCode.none, 7))
        log = h.replica_manager.partitions[("t", 0)].log
        self.assertEqual(log.log_start_offset, 7)
        self.assertEqual(h.fetch("t", 0, 6).error_code, ErrorCode.offset_out_of_range)
        fetched = h.fetch("t", 0, 7)
        self.assertEqual((fetched.error_code, fetched.log_start_offset), (ErrorCode.none, 7))
        self.assertTrue(fetched.records)  # the whole batch 5-9; the consumer skips 5 and 6
        earliest = h.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
        self.assertEqual(earliest.topics[0].partitions[0].offset, 7)

    def test_minus_one_is_the_high_watermark_and_lower_offsets_do_nothing(self) -> None:
        h = self.harness()
        self.fill(h)
        self.assertEqual(self.answer(h, self.delete(h, -1)).low_watermark, 20)
        self.assertEqual(self.answer(h, self.delete(h, 3)).low_watermark, 20)

    def test_beyond_the_high_watermark_is_offset_out_of_range(self) -> None:
        h = self.harness()
        self.fill(h)
        for offset in (21, -2):
            p = self.answer(h, self.delete(h, offset))
            self.assertEqual((p.error_code, p.low_watermark), (ErrorCode.offset_out_of_range, -1))
        self.assertEqual(h.replica_manager.partitions[("t", 0)].log.log_start_offset, 0)

    def test_unknown_partition(self) -> None:
        h = self.harness()
        p = self.answer(h, self.delete(h, 0, partition=3))
        self.assertEqual(p.error_code, ErrorCode.unknown_topic_or_partition)

    def test_topic_without_delete_permission(self) -> None:
        h = self.harness()
        self.fill(h)
        h.apis.authorizer = DenyAll({(AclOperation.DESCRIBE, ResourceType.TOPIC)})
        p = self.answer(h, self.delete(h, 5))
        self.assertEqual(p.error_code, ErrorCode.topic_authorization_failed)
        h.apis.authorizer = DenyAll({(AclOperation.DELETE, ResourceType.TOPIC)})
        self.assertEqual(self.answer(h, self.delete(h, 5)).error_code, ErrorCode.none)

    def follower_fetch(self, h: BrokerHarness, offset: int, log_start_offset: int) -> Any:
        body = h.fetch_request("t", 0, offset, replica_id=1)
        body["topics"][0]["partitions"][0]["log_start_offset"] = log_start_offset
        return h.decode(1, 12, h.request(1, 12, body)).responses[0].partitions[0]

    def test_waits_until_the_in_sync_follower_has_the_new_log_start(self) -> None:
        h = self.harness([0, 1])
        body = {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": records(10)}]}]}
        h.decode(0, 9, h.request(0, 9, body))
        self.follower_fetch(h, 10, 0)  # the follower holds 0-9: the high watermark is 10
        waiting = self.delete(h, 6, timeout_ms=5000)
        self.assertNoResult(waiting)
        p = self.follower_fetch(h, 10, 0)
        self.assertEqual(p.log_start_offset, 6)  # what the follower applies
        self.assertNoResult(waiting)
        self.follower_fetch(h, 10, 6)  # its next fetch reports it
        answer = self.answer(h, waiting)
        self.assertEqual((answer.error_code, answer.low_watermark), (ErrorCode.none, 6))

    def test_times_out_when_the_follower_does_not_follow(self) -> None:
        h = self.harness([0, 1])
        body = {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": records(10)}]}]}
        h.decode(0, 9, h.request(0, 9, body))
        self.follower_fetch(h, 10, 0)
        waiting = self.delete(h, 6, timeout_ms=500)
        h.clock.advance(0.499)
        self.assertNoResult(waiting)
        h.clock.advance(0.001)
        answer = self.answer(h, waiting)
        self.assertEqual(answer.error_code, ErrorCode.request_timed_out)
        self.assertEqual(h.replica_manager.partitions[("t", 0)].log.log_start_offset, 6)
        self.assertEqual(h.replica_manager.partitions[("t", 0)].low_watermark_waiters, [])

    def test_lost_leadership_fails_the_wait(self) -> None:
        h = self.harness([0, 1])
        body = {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": records(10)}]}]}
        h.decode(0, 9, h.request(0, 9, body))
        self.follower_fetch(h, 10, 0)
        waiting = self.delete(h, 6, timeout_ms=5000)
        h.write_state("t", 0, 1, 1, [0, 1])
        self.assertEqual(self.answer(h, waiting).error_code, ErrorCode.not_leader_or_follower)


class ListOffsetsMaxTimestampTests(unittest.TestCase):
    def test_max_timestamp_is_the_record_with_the_largest_timestamp(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        h.produce("t", 0, build_batch([(None, b"a"), (None, b"b"), (None, b"c")], timestamps_ms=[10, 50, 30]))
        h.produce("t", 0, build_batch([(None, b"d")], timestamp_ms=40))

        def ask(version: int, timestamp: int) -> Any:
            response = h.call(2, version, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
            return response.topics[0].partitions[0]

        p = ask(7, -3)
        self.assertEqual((p.error_code, p.offset, p.timestamp), (ErrorCode.none, 1, 50))
        self.assertEqual(ask(8, -4).offset, 0)
        self.assertEqual(ask(6, -3).error_code, ErrorCode.invalid_request)

    def test_max_timestamp_of_an_empty_log(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        response = h.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -3}]}]})
        p = response.topics[0].partitions[0]
        self.assertEqual((p.error_code, p.offset, p.timestamp), (ErrorCode.none, -1, -1))


class ListOffsetsBoundTests(unittest.TestCase):
    """
    ListOffsets answers a consumer from below the high watermark (the last
    stable offset for read_committed) and a replica from the whole log, as
    Kafka's C{Partition.fetchOffsetForTimestamp}: a timestamp matched only
    by records a consumer cannot fetch yet has no answer.
    """

    def answer(self, h: BrokerHarness, timestamp: int, replica_id: int = -1) -> Any:
        response = h.call(2, 7, {"replica_id": replica_id, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
        return response.topics[0].partitions[0]

    def ask(self, h: BrokerHarness, timestamp: int, replica_id: int = -1) -> Any:
        p = self.answer(h, timestamp, replica_id)
        self.assertEqual(p.error_code, ErrorCode.none)
        return p.offset, p.timestamp

    def half_replicated(self) -> BrokerHarness:
        """t-0 on brokers 0 (the leader) and 1: 0-4 at 1,000 ms and 5-9 at 2,000 ms, the follower holding 0-4."""
        h = BrokerHarness(self)
        h.create_topic("t", 1, replicas=[0, 1])
        for i in range(2):
            body = {"acks": 1, "timeout": 1000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": records(5, 1_000 * (i + 1))}]}]}
            h.decode(0, 9, h.request(0, 9, body))
        h.decode(1, 12, h.request(1, 12, h.fetch_request("t", 0, 5, replica_id=1)))
        return h

    def test_only_offsets_below_the_high_watermark_answer_a_consumer(self) -> None:
        h = self.half_replicated()
        self.assertEqual(h.replica_manager.partitions[("t", 0)].log.high_watermark, 5)
        self.assertEqual(self.ask(h, -1), (5, -1))
        self.assertEqual(self.ask(h, 1_000), (0, 1_000))
        self.assertEqual(self.ask(h, 2_000), (-1, -1))  # only in 5-9, above the high watermark
        self.assertEqual(self.ask(h, -1, replica_id=1), (10, -1))
        self.assertEqual(self.ask(h, 2_000, replica_id=1), (5, 2_000))

    def test_a_new_leader_below_the_start_of_its_epoch_is_asked_again(self) -> None:
        """
        KIP-207: elected again (epoch 1) with 0-9 in its log and the high
        watermark at 5, the leader answers C{OFFSET_NOT_AVAILABLE} (retriable)
        for the latest offset and for a timestamp only 5-9 match, until its
        follower has fetched to the start of the epoch: a consumer is never
        told an end below offsets the previous leader may have acknowledged.
        (The simulation's seed 60184 with C{--disk-model --faults 16 --window
        50 --link-faults 4}: the read-back took 382 for the end of a log whose
        records up to 399 had been acknowledged.)
        """
        h = self.half_replicated()
        h.write_state("t", 0, 0, 1, [0, 1])
        partition = h.replica_manager.partitions[("t", 0)]
        self.assertEqual((partition.leader_epoch, partition.epoch_start_offset, partition.high_watermark), (1, 10, 5))
        self.assertEqual([self.answer(h, ts).error_code for ts in (-1, 2_000, -3)],
                         [ErrorCode.offset_not_available] * 3)
        self.assertTrue(ErrorCode.offset_not_available.retriable)
        self.assertEqual(self.ask(h, -2), (0, -1))  # the earliest is fetchable
        self.assertEqual(self.ask(h, 1_000), (0, 1_000))  # so is a timestamp matched below the high watermark
        self.assertEqual(self.ask(h, 3_000), (-1, -1))  # and one nothing matches
        self.assertEqual(self.ask(h, -1, replica_id=1), (10, -1))  # a replica is not a consumer
        h.decode(1, 12, h.request(1, 12, h.fetch_request("t", 0, 10, replica_id=1)))  # the follower caught up
        self.assertEqual(self.ask(h, -1), (10, -1))
        self.assertEqual(self.ask(h, 2_000), (5, 2_000))


    def test_any_replica_answers_the_debugging_replica_id(self) -> None:
        """
        The latest offset asked from the debugging replica id (-2, Kafka's
        C{DEBUGGING_REPLICA_ID}) is answered by a follower too, with its own
        log end and latest leader epoch: what the controller's unclean
        recovery compares (KIP-966).  A broker without a replica says so.
        """
        h = self.half_replicated()
        h.write_state("t", 0, 1, 1, [0, 1])  # broker 0 follows now; its log holds 0-9, of epoch 0
        self.assertEqual(self.answer(h, -1).error_code, ErrorCode.not_leader_or_follower)
        p = self.answer(h, -1, replica_id=-2)
        self.assertEqual((p.error_code, p.offset, p.leader_epoch), (ErrorCode.none, 10, 0))
        self.assertEqual(self.answer(h, -2, replica_id=-2).error_code, ErrorCode.not_leader_or_follower)
        h.create_topic("u", 1, replicas=[1])
        response = h.call(2, 7, {"replica_id": -2, "isolation_level": 0, "topics": [
            {"name": "u", "partitions": [{"partition_index": 0, "timestamp": -1}]},
            {"name": "v", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        self.assertEqual([t.partitions[0].error_code for t in response.topics],
                         [ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition])


class DescribeLogDirsTests(unittest.TestCase):
    def test_partitions_with_sizes(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t", 2)
        h.create_topic("u")
        h.produce("t", 1, records(3))
        response = h.call(35, 4, {"topics": None})
        self.assertEqual(response.error_code, ErrorCode.none)
        [result] = response.results
        self.assertEqual(result.log_dir, h.directory)
        self.assertGreater(result.total_bytes, 0)
        found = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
                 for t in result.topics for p in t.partitions}
        size = h.replica_manager.partitions[("t", 1)].log.size_bytes
        self.assertGreater(size, 0)
        self.assertEqual(found, {("t", 0): (0, 0, False), ("t", 1): (size, 0, False), ("u", 0): (0, 0, False)})
        only = h.call(35, 1, {"topics": [{"topic": "t", "partitions": [1]}]})
        self.assertEqual([(t.name, [p.partition_index for p in t.partitions]) for t in only.results[0].topics],
                         [("t", [1])])

    def test_needs_describe_on_the_cluster(self) -> None:
        h = BrokerHarness(self)
        h.apis.authorizer = DenyAll()
        response = h.call(35, 4, {"topics": None})
        self.assertEqual((response.error_code, response.results), (ErrorCode.cluster_authorization_failed, ()))
        h.apis.authorizer = DenyAll({(AclOperation.DESCRIBE, ResourceType.CLUSTER)})
        self.assertEqual(len(h.call(35, 4, {"topics": None}).results), 1)


class OffsetDeleteTests(unittest.TestCase):
    def setUp(self) -> None:
        self.h = BrokerHarness(self)
        self.h.create_topic("t", 2)
        self.h.create_topic("u")
        coordinator = self.h.apis.group_coordinator
        self.group = next(f"g{i}" for i in range(100) if coordinator.owns(f"g{i}"))

    def commit(self, topic: str, partition: int, offset: int) -> None:
        self.successResultOf(self.h.registry.set_committed_offset(self.group, topic, partition,
                                                                  CommittedOffset(offset)))

    def committed(self) -> dict:
        return {k: v.offset for k, v in self.successResultOf(self.h.registry.get_committed_offsets(self.group)).items()}

    def delete(self, *partitions: tuple[str, int], group: str | None = None) -> Any:
        topics: dict[str, list] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append({"partition_index": p})
        return self.h.call(47, 0, {"group_id": group or self.group,
                                   "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})

    def codes(self, response: Any) -> dict:
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    def test_empty_group_offsets_are_deleted(self) -> None:
        self.commit("t", 0, 5)
        self.commit("t", 1, 6)
        self.commit("u", 0, 7)
        response = self.delete(("t", 0), ("u", 0), ("t", 9))
        self.assertEqual(response.error_code, ErrorCode.none)
        self.assertEqual(self.codes(response), {("t", 0): ErrorCode.none, ("u", 0): ErrorCode.none,
                                                ("t", 9): ErrorCode.unknown_topic_or_partition})
        self.assertEqual(self.committed(), {("t", 1): 6})

    def test_unknown_group(self) -> None:
        response = self.delete(("t", 0))
        self.assertEqual((response.error_code, response.topics), (ErrorCode.group_id_not_found, ()))

    def members(self, protocol_type: str, *topics: str) -> None:
        group = Group(self.group, state=GroupState.STABLE, generation_id=1, protocol_type=protocol_type,
                      protocol_name="range")
        group.members["m1"] = Member("m1", None, "c", "/127.0.0.1", 1000, 1000, protocol_type,
                                     [("range", subscription(*topics))])
        self.h.apis.group_coordinator.groups[self.group] = group

    def test_stable_consumer_group_keeps_the_offsets_of_subscribed_topics(self) -> None:
        self.commit("t", 0, 5)
        self.commit("u", 0, 7)
        self.members("consumer", "t")
        response = self.delete(("t", 0), ("u", 0))
        self.assertEqual(response.error_code, ErrorCode.none)
        self.assertEqual(self.codes(response), {("t", 0): ErrorCode.group_subscribed_to_topic,
                                                ("u", 0): ErrorCode.none})
        self.assertEqual(self.committed(), {("t", 0): 5})

    def test_non_consumer_group_with_members_is_non_empty(self) -> None:
        self.commit("t", 0, 5)
        self.members("connect", "t")
        self.assertEqual(self.delete(("t", 0)).error_code, ErrorCode.non_empty_group)
        self.assertEqual(self.committed(), {("t", 0): 5})

    def test_authorization(self) -> None:
        self.commit("t", 0, 5)
        self.h.apis.authorizer = DenyAll({(AclOperation.READ, ResourceType.TOPIC)})
        self.assertEqual(self.delete(("t", 0)).error_code, ErrorCode.group_authorization_failed)
        self.h.apis.authorizer = DenyAll({(AclOperation.DELETE, ResourceType.GROUP)})
        response = self.delete(("t", 0))
        self.assertEqual(self.codes(response), {("t", 0): ErrorCode.topic_authorization_failed})
        self.assertEqual(self.committed(), {("t", 0): 5})

    def test_not_coordinator(self) -> None:
        coordinator = self.h.apis.group_coordinator
        other = next(f"g{i}" for i in range(100) if not coordinator.owns(f"g{i}"))
        self.assertEqual(self.delete(("t", 0), group=other).error_code, ErrorCode.not_coordinator)

    def test_subscriptions_are_decoded(self) -> None:
        self.assertEqual(decode_subscription(subscription("a", "bc")), ["a", "bc"])
        self.assertIsNone(decode_subscription(b"\x00"))


class LogStartOffsetTests(unittest.TestCase):
    def mktemp(self) -> str:
        directory = tempfile.mkdtemp(prefix="kafkatw-test-")
        self.addCleanup(shutil.rmtree, directory, True)
        return directory

    def make(self, directory: str) -> PartitionLog:
        return PartitionLog(directory, "t", 0, LogConfig(segment_bytes=200), now_ms=lambda: 0)

    def test_whole_segments_below_the_log_start_are_deleted(self) -> None:
        log = self.make(self.mktemp())
        for i in range(6):
            log.append(records(3, 1000 + i), 0)
        log.update_high_watermark(log.log_end_offset)
        bases = [s.base_offset for s in log.segments]
        self.assertGreater(len(bases), 2)
        self.assertTrue(log.maybe_increment_log_start_offset(bases[2] + 1))
        self.assertEqual([s.base_offset for s in log.segments], bases[2:])
        self.assertEqual(log.log_start_offset, bases[2] + 1)
        self.assertFalse(log.maybe_increment_log_start_offset(bases[1]))
        with self.assertRaises(OffsetOutOfRangeError):
            log.maybe_increment_log_start_offset(log.high_watermark + 1)
        # never the active segment
        log.maybe_increment_log_start_offset(log.high_watermark)
        self.assertEqual(len(log.segments), 1)
        self.assertEqual(log.read(log.log_end_offset, 100), [])

    def test_the_log_manager_keeps_it_across_a_restart(self) -> None:
        directory = self.mktemp()
        manager = LogManager([directory], {}, now_ms=lambda: 0)
        manager.load()
        log = manager.get_or_create("t", 0)
        log.append(records(10), 0)
        log.update_high_watermark(10)
        log.maybe_increment_log_start_offset(4)
        manager.close()
        again = LogManager([directory], {}, now_ms=lambda: 0)
        again.load()
        self.addCleanup(again.close)
        self.assertEqual(again.get("t", 0).log_start_offset, 4)
        self.assertEqual(again.log_dir_of("t", 0), os.path.abspath(directory))
