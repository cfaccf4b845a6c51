"""
Unit tests of the admin client's DeleteRecords, DescribeLogDirs and
OffsetDelete (L{kafkatw.client.admin.AdminClient}), over the fake client of
L{tests.unit.test_admin_client}: no sockets, no sleeps.
"""

from __future__ import annotations

from typing import Any

from kafkatw.client.client import PartitionMetadata
from kafkatw.errors import ErrorCode, KafkaError
from tests.unit.test_admin_client import AdminTestCase, metadata, respond


class DeleteRecordsTests(AdminTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.client.topics = {"t": {0: PartitionMetadata(1, 7), 1: PartitionMetadata(2, 3)}}

    def deleted(self, partitions: dict, error_code: int = 0) -> Any:
        return respond(21, 2, {"throttle_time": 0, "topics": [{"name": "t", "partitions": [
            {"partition_index": p, "low_watermark": low, "error_code": error_code} for p, low in partitions.items()]}]})

    def test_one_request_per_leader(self) -> None:
        d = self.admin.delete_records({("t", 0): 5, ("t", 1): -1}, timeout_ms=3000)
        requests = {node: body for node, _, body, _ in self.client.pending(21)}
        self.assertEqual(sorted(requests), [1, 2])
        self.assertEqual((requests[1]["timeout"], requests[1]["topics"][0]["partitions"]),
                         (3000, [{"partition_index": 0, "offset": 5}]))
        for node, _, _, pending in self.client.pending(21):
            pending.callback(self.deleted({0: 5}) if node == 1 else
                             self.deleted({1: -1}, ErrorCode.offset_out_of_range))
        result = self.successResultOf(d)
        self.assertEqual(result[("t", 0)], (5, None))
        low, error = result[("t", 1)]
        self.assertEqual((low, error.error_code), (-1, ErrorCode.offset_out_of_range))

    def test_follows_a_leader_change(self) -> None:
        d = self.admin.delete_records({("t", 0): 5})
        self.answer(21, self.deleted({0: -1}, ErrorCode.not_leader_or_follower), node=1)
        self.assertNoResult(d)
        self.client.next_topics = {"t": {0: PartitionMetadata(3, 8)}}
        self.clock.advance(0.1)
        self.answer(21, self.deleted({0: 5}), node=3)
        self.assertEqual(self.successResultOf(d), {("t", 0): (5, None)})

    def test_unknown_partition(self) -> None:
        d = self.admin.delete_records({("t", 9): 5})
        [(low, error)] = self.successResultOf(d).values()
        self.assertEqual((low, error.error_code), (-1, ErrorCode.unknown_topic_or_partition))


class DescribeLogDirsTests(AdminTestCase):
    def test_every_broker(self) -> None:
        d = self.admin.describe_log_dirs(topics=[("t", 1), ("t", 0)])
        self.answer(3, metadata(brokers=(1, 2)))
        for node in (1, 2):
            _, body = self.answer(35, respond(35, 4, {"throttle_time": 0, "error_code": 0, "results": [
                {"error_code": 0, "log_dir": f"/d{node}", "topics": [], "total_bytes": 1, "usable_bytes": 1}]}),
                node=node)
            self.assertEqual(body["topics"], [{"topic": "t", "partitions": [0, 1]}])
        found = self.successResultOf(d)
        self.assertEqual({n: [r.log_dir for r in rs] for n, rs in found.items()}, {1: ["/d1"], 2: ["/d2"]})

    def test_refused(self) -> None:
        d = self.admin.describe_log_dirs([1])
        self.answer(3, metadata(brokers=(1,)))
        self.answer(35, respond(35, 4, {"throttle_time": 0, "error_code": int(ErrorCode.cluster_authorization_failed),
                                        "results": []}))
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.cluster_authorization_failed)


class DeleteConsumerGroupOffsetsTests(AdminTestCase):
    def find(self, node: int) -> None:
        self.answer(10, respond(10, 4, {"coordinators": [
            {"key": "g", "node_id": node, "host": f"h{node}", "port": 9000 + node, "error_code": 0}]}))

    def test_on_the_coordinator(self) -> None:
        d = self.admin.delete_consumer_group_offsets("g", [("t", 0), ("t", 1)])
        self.find(2)
        subscribed = int(ErrorCode.group_subscribed_to_topic)
        _, body = self.answer(47, respond(47, 0, {"error_code": 0, "throttle_time": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "error_code": 0},
                                         {"partition_index": 1, "error_code": subscribed}]}]}), node=2)
        self.assertEqual(body, {"group_id": "g", "topics": [{"name": "t", "partitions": [
            {"partition_index": 0}, {"partition_index": 1}]}]})
        self.assertEqual(self.successResultOf(d), {("t", 0): ErrorCode.none,
                                                   ("t", 1): ErrorCode.group_subscribed_to_topic})

    def test_group_error(self) -> None:
        d = self.admin.delete_consumer_group_offsets("g", [("t", 0)])
        self.find(2)
        self.answer(47, respond(47, 0, {"error_code": int(ErrorCode.group_id_not_found), "throttle_time": 0,
                                        "topics": []}))
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.group_id_not_found)
