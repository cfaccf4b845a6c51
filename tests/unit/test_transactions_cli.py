"""
Unit tests of C{kafkatw transactions} (kafka-transactions.sh): the table
format and rows, the usage errors, and the L{AdminClient} calls behind it
(ListTransactions, DescribeTransactions, DescribeProducers, WriteTxnMarkers)
on the fake client of C{test_admin_client}.  No sockets, no sleeps.
"""

from __future__ import annotations

import datetime
from typing import Any

from click.testing import CliRunner
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.cli.main import main
from kafkatw.cli.transactions import (
    DESCRIBE_HEADERS,
    LIST_HEADERS,
    PRODUCER_HEADERS,
    describe_rows,
    format_table,
    list_rows,
    producer_rows,
)
from kafkatw.client.admin import AdminClient, ProducerState, TransactionDescription, TransactionListing
from kafkatw.client.client import PartitionMetadata
from kafkatw.errors import ErrorCode, KafkaError
from kafkatw.protocol.messages import decode_response, encode_response

from .test_admin_client import AdminTestCase, FakeClient, metadata, respond


class TableTests(unittest.TestCase):
    def test_kafka_pretty_print_table(self) -> None:
        self.assertEqual(format_table(("A", "Long"), [("xyz", 1), ("q", 22222)]),
                         ["A  \tLong \t", "xyz\t1    \t", "q  \t22222\t"])

    def test_rows(self) -> None:
        self.assertEqual(format_table(LIST_HEADERS, list_rows([TransactionListing("shop", 1, 7, "Ongoing")])),
                         ["TransactionalId\tCoordinator\tProducerId\tTransactionState\t",
                          "shop           \t1          \t7         \tOngoing         \t"])
        open_ = TransactionDescription(1, "shop", "Ongoing", 7, 2, 60000, 1000, [("t", 0), ("t", 1)])
        self.assertEqual(describe_rows(open_, now_ms=4000), [(1, "shop", 7, 2, "Ongoing", 60000, 1000, 3000,
                                                              "t-0,t-1")])
        self.assertEqual(len(DESCRIBE_HEADERS), len(describe_rows(open_, 0)[0]))
        idle = TransactionDescription(1, "shop", "CompleteCommit", 7, 2, 60000, -1, [])
        self.assertEqual(describe_rows(idle, now_ms=4000)[0][6:], ("None", "None", ""))
        rows = producer_rows([ProducerState(7, 2, 5, 1234, -1, 40), ProducerState(8, 0, 0, 99, 3, -1)])
        self.assertEqual(rows, [(7, 2, "None", 5, 1234, 40), (8, 0, 3, 0, 99, "None")])
        self.assertEqual(len(PRODUCER_HEADERS), len(rows[0]))

    def test_describe_transactions_without_a_start_time_decodes(self) -> None:
        # Kafka's -1 "no open transaction" start time, which kio's datetime reader refuses
        no_time = datetime.datetime.fromtimestamp(-0.001, tz=datetime.timezone.utc)
        frame = encode_response(65, 0, 42, {"throttle_time": 0, "transaction_states": [
            {"error_code": 0, "transactional_id": "a", "transaction_state": "CompleteCommit",
             "transaction_timeout": 60000, "transaction_start_time": no_time, "producer_id": 7, "producer_epoch": 2,
             "topics": [{"topic": "t", "partitions": [0, 3]}]},
            {"error_code": 105, "transactional_id": "b", "transaction_state": "", "transaction_timeout": 0,
             "transaction_start_time": 1700000000000, "producer_id": -1, "producer_epoch": -1, "topics": []}]})
        correlation_id, response = decode_response(65, 0, memoryview(frame))  # as the connection hands it
        first, second = response.transaction_states
        self.assertEqual((correlation_id, first.transactional_id, first.transaction_start_time, first.producer_id,
                          [(t.topic, list(t.partitions)) for t in first.topics]),
                         (42, "a", None, 7, [("t", [0, 3])]))
        self.assertEqual((second.error_code, second.transaction_start_time.timestamp()),
                         (ErrorCode.transactional_id_not_found, 1700000000))

    def test_usage_errors(self) -> None:
        runner = CliRunner()
        base = ["transactions", "--bootstrap-server", "localhost:1"]
        for args in (["abort", "--topic", "t", "--partition", "0"],
                     ["abort", "--topic", "t", "--partition", "0", "--producer-id", "1"],
                     ["abort", "--topic", "t", "--partition", "0", "--start-offset", "3", "--producer-id", "1"],
                     ["describe"], ["describe-producers", "--topic", "t"]):
            result = runner.invoke(main, base + args, prog_name="kafkatw")
            self.assertEqual(result.exit_code, 2, (args, result.output))


class TxnFakeClient(FakeClient):
    """The admin tests' fake client, plus what transactions use: C{send}, leaders."""

    async def send(self, node: int, api_key: int, body: Any, expect_response: bool = True,
                   timeout_ms: int | None = None) -> Any:
        connection = await self.connection(node)
        return await connection.request(api_key, body)

    def leader_for(self, topic: str, partition: int) -> int:
        meta = self.topics.get(topic, {}).get(partition)
        return meta.leader if meta is not None else -1

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(self.topics.get(topic, {}))


class AdminTransactionTests(AdminTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.client = TxnFakeClient(self.clock)
        self.client.topics = {"t": {0: PartitionMetadata(2, 0)}}
        self.admin = AdminClient(self.clock, client=self.client, default_api_timeout_ms=5000, retry_backoff_ms=100)

    def test_list_transactions_asks_every_broker(self) -> None:
        d = self.admin.list_transactions(state_filters=["Ongoing"])
        self.answer(3, metadata(brokers=(1, 2)))
        for node, tid in ((1, "b"), (2, "a")):
            _, body = self.answer(66, respond(66, 1, {"throttle_time": 0, "error_code": 0, "transaction_states": [
                {"transactional_id": tid, "producer_id": node * 10, "transaction_state": "Ongoing"}]}), node=node)
            self.assertEqual(list(body["state_filters"]), ["Ongoing"])
        self.assertEqual(self.successResultOf(d), [TransactionListing("a", 2, 20, "Ongoing"),
                                                   TransactionListing("b", 1, 10, "Ongoing")])

    def test_describe_transactions_on_the_coordinator(self) -> None:
        d = self.admin.describe_transactions(["shop"])
        _, find = self.answer(10, respond(10, 4, {"throttle_time": 0, "coordinators": [
            {"key": "shop", "node_id": 3, "host": "h3", "port": 9003, "error_code": 0}]}))
        self.assertEqual((find["key_type"], list(find["coordinator_keys"])), (1, ["shop"]))
        self.answer(65, respond(65, 0, {"throttle_time": 0, "transaction_states": [{
            "error_code": 0, "transactional_id": "shop", "transaction_state": "Ongoing", "transaction_timeout": 60000,
            "transaction_start_time": 1700000000000, "producer_id": 7, "producer_epoch": 2,
            "topics": [{"topic": "t", "partitions": [1, 0]}]}]}), node=3)
        self.assertEqual(self.successResultOf(d)["shop"], TransactionDescription(
            3, "shop", "Ongoing", 7, 2, 60000, 1700000000000, [("t", 0), ("t", 1)]))

    def test_describe_transactions_error(self) -> None:
        d = self.admin.describe_transactions(["nope"])
        self.answer(10, respond(10, 4, {"throttle_time": 0, "coordinators": [
            {"key": "nope", "node_id": 3, "host": "h3", "port": 9003, "error_code": 0}]}))
        self.answer(65, respond(65, 0, {"throttle_time": 0, "transaction_states": [{
            "error_code": ErrorCode.transactional_id_not_found, "transactional_id": "nope", "transaction_state": "",
            "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1,
            "topics": []}]}))
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.transactional_id_not_found)

    def test_describe_producers_on_the_leader(self) -> None:
        d = self.admin.describe_producers([("t", 0)])
        self.answer(61, respond(61, 0, {"throttle_time": 0, "topics": [{"name": "t", "partitions": [{
            "partition_index": 0, "error_code": 0, "active_producers": [{
                "producer_id": 7, "producer_epoch": 2, "last_sequence": 9, "last_timestamp": 1234,
                "coordinator_epoch": 0, "current_txn_start_offset": 40}]}]}]}), node=2)
        self.assertEqual(self.successResultOf(d), {("t", 0): [ProducerState(7, 2, 9, 1234, 0, 40)]})

    def test_abort_writes_an_abort_marker_through_the_leader(self) -> None:
        d = self.admin.abort_transaction("t", 0, producer_id=7, producer_epoch=2, coordinator_epoch=5)
        _, body = self.answer(27, respond(27, 1, {"markers": [{"producer_id": 7, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]}]}), node=2)
        (marker,) = body["markers"]
        self.assertEqual((marker["producer_id"], marker["producer_epoch"], marker["transaction_result"],
                          marker["coordinator_epoch"]), (7, 2, False, 5))
        self.assertIsNone(self.successResultOf(d))

    def test_abort_of_an_unknown_partition(self) -> None:
        d = self.admin.abort_transaction("t", 9, producer_id=7, producer_epoch=2, coordinator_epoch=5,
                                         timeout_ms=100)
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.unknown_topic_or_partition)

