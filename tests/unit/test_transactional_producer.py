"""
Unit tests for the transactional L{Producer} and its
L{kafkatw.client.transaction_manager.TransactionManager}: a fake client on a
L{Clock}, the request sequence and the state table; no sockets, no sleeps.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.producer import Producer, ProducerClosedError
from kafkatw.client.transaction_manager import (
    VALID_PREVIOUS_STATES,
    GroupMetadata,
    IllegalTransactionStateError,
    TransactionManager,
    TransactionState,
)
from kafkatw.errors import ErrorCode, KafkaError

from .test_producer import FakeClient, FakeRequest, respond

S = TransactionState
COORDINATOR = 2
GROUP_COORDINATOR = 3


class TxnClient(FakeClient):
    def __init__(self, partitions: dict[str, int]) -> None:
        super().__init__(partitions)
        self.brokers: dict[int, tuple[str, int]] = {1: ("127.0.0.1", 9092)}

    def of(self, api_key: int) -> list[FakeRequest]:
        return [r for r in self.requests if r.api_key == api_key]

    def last(self, api_key: int) -> FakeRequest:
        return self.of(api_key)[-1]


def found(node: int) -> NS:
    return NS(error_code=ErrorCode.none, node_id=node, host="127.0.0.1", port=9000 + node, coordinators=None)


class StateTableTests(SynchronousTestCase):
    def manager(self) -> TransactionManager:
        return TransactionManager(Clock(), None, "tx", 60000, 100, 60000, lambda pid, epoch: None)

    def test_every_edge_of_the_table(self) -> None:
        for target, sources in VALID_PREVIOUS_STATES.items():
            for source in TransactionState:
                m = self.manager()
                m.state = source
                if source in sources:
                    m.transition(target)
                    self.assertIs(m.state, target)
                else:
                    self.assertRaises(IllegalTransactionStateError, m.transition, target)

    def test_fencing_is_fatal_other_errors_abortable(self) -> None:
        m = self.manager()
        m.state = S.IN_TRANSACTION
        m.fail(KafkaError("boom"))
        self.assertIs(m.state, S.ABORTABLE_ERROR)
        fenced = KafkaError("fenced")
        fenced.error_code = ErrorCode.producer_fenced
        m.fail(fenced)
        self.assertIs(m.state, S.FATAL_ERROR)
        self.assertIs(m.last_error, fenced)
        m.fail(KafkaError("later"))
        self.assertIs(m.state, S.FATAL_ERROR)
        self.assertIs(m.last_error, fenced)


class TransactionalProducerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.client = TxnClient({"t": 2, "out": 1})
        self.client.known.update({"t", "out"})
        self.producer = Producer(self.clock, client=self.client, transactional_id="tx", linger_ms=5,
                                 retry_backoff_ms=100, max_block_ms=10000)

    def init(self, pid: int = 7, epoch: int = 3) -> None:
        d = self.producer.init_transactions()
        find = self.client.last(10)
        self.assertEqual((find.body["key"], find.body["key_type"]), ("tx", 1))
        find.deferred.callback(found(COORDINATOR))
        init = self.client.last(22)
        self.assertEqual(init.node, COORDINATOR)
        self.assertEqual((init.body["transactional_id"], init.body["transaction_timeout"]), ("tx", 60000))
        init.deferred.callback(NS(error_code=ErrorCode.none, producer_id=pid, producer_epoch=epoch))
        self.successResultOf(d)
        self.assertIs(self.producer._txn.state, S.READY)

    def partitions_added(self) -> None:
        """Linger passes, and the coordinator answers the AddPartitionsToTxn that follows: the batch goes out."""
        self.clock.advance(0.005)
        self.client.last(24).deferred.callback(NS(results_by_topic_v3_and_below=[]))
        self.clock.advance(0)

    def test_transactional_id_implies_idempotence_and_acks_all(self) -> None:
        self.assertTrue(self.producer.enable_idempotence)
        self.assertEqual(self.producer.acks, -1)
        self.assertRaises(ValueError, Producer, self.clock, client=self.client, transactional_id="x", acks=0)

    def test_init_retries_concurrent_transactions_and_not_coordinator(self) -> None:
        d = self.producer.init_transactions()
        self.client.last(10).deferred.callback(found(COORDINATOR))
        self.client.last(22).deferred.callback(NS(error_code=ErrorCode.concurrent_transactions))
        self.assertNoResult(d)
        self.assertEqual(len(self.client.of(22)), 1)
        self.clock.advance(0.1)
        self.assertEqual(len(self.client.of(22)), 2)  # same coordinator, after the back-off
        self.client.last(22).deferred.callback(NS(error_code=ErrorCode.not_coordinator))
        self.clock.advance(0.1)
        self.assertEqual(len(self.client.of(10)), 2)  # looked up again
        self.client.last(10).deferred.callback(found(5))
        self.assertEqual(self.client.last(22).node, 5)
        self.client.last(22).deferred.callback(NS(error_code=ErrorCode.none, producer_id=1, producer_epoch=0))
        self.successResultOf(d)

    def test_send_outside_a_transaction_fails(self) -> None:
        self.failureResultOf(self.producer.send("t", b"x"), IllegalTransactionStateError)
        self.init()
        self.failureResultOf(self.producer.send("t", b"x"), IllegalTransactionStateError)
        self.failureResultOf(self.producer.commit_transaction(), IllegalTransactionStateError)

    def test_commit_sequence(self) -> None:
        self.init()
        self.producer.begin_transaction()
        sent = [self.producer.send("t", b"a", partition=0), self.producer.send("t", b"b", partition=1),
                self.producer.send("out", b"c", key=b"k")]
        self.clock.advance(0.005)
        # AddPartitionsToTxn first, batched, before any Produce
        self.assertEqual(self.client.produce_requests(), [])
        add = self.client.last(24)
        self.assertEqual(add.node, COORDINATOR)
        self.assertEqual(add.body["v3_and_below_producer_id"], 7)
        self.assertEqual(sorted((t["name"], p) for t in add.body["v3_and_below_topics"] for p in t["partitions"]),
                         [("out", 0), ("t", 0), ("t", 1)])
        add.deferred.callback(NS(results_by_topic_v3_and_below=[
            NS(name="t", results_by_partition=[NS(partition_index=0, partition_error_code=0),
                                               NS(partition_index=1, partition_error_code=0)])]))
        self.clock.advance(0)
        (produce,) = self.client.produce_requests()
        self.assertEqual(produce.body.transactional_id, "tx")
        for batch in produce.batches().values():
            self.assertTrue(batch.is_transactional)
            self.assertEqual((batch.producer_id, batch.producer_epoch, batch.base_sequence), (7, 3, 0))
        respond(produce)
        for d in sent:
            self.successResultOf(d)
        # offsets: AddOffsetsToTxn to the transaction coordinator, TxnOffsetCommit to the group's
        offsets = self.producer.send_offsets_to_transaction({("in", 0): 5, ("in", 1): (9, "meta")},
                                                            GroupMetadata("g", 4, "m-1", None))
        add_offsets = self.client.last(25)
        self.assertEqual((add_offsets.node, add_offsets.body["group_id"]), (COORDINATOR, "g"))
        add_offsets.deferred.callback(NS(error_code=ErrorCode.none))
        find = self.client.last(10)
        self.assertEqual((find.body["key"], find.body["key_type"]), ("g", 0))
        find.deferred.callback(found(GROUP_COORDINATOR))
        commit_offsets = self.client.last(28)
        self.assertEqual(commit_offsets.node, GROUP_COORDINATOR)
        body = commit_offsets.body
        self.assertEqual((body["generation_id"], body["member_id"], body["producer_epoch"]), (4, "m-1", 3))
        self.assertEqual([(p["partition_index"], p["committed_offset"], p["committed_metadata"])
                          for p in body["topics"][0]["partitions"]], [(0, 5, ""), (1, 9, "meta")])
        commit_offsets.deferred.callback(NS(topics=[NS(partitions=[NS(error_code=0), NS(error_code=0)])]))
        self.successResultOf(offsets)
        committed = self.producer.commit_transaction()
        self.assertIs(self.producer._txn.state, S.COMMITTING_TRANSACTION)
        end = self.client.last(26)
        self.assertEqual((end.node, end.body["committed"], end.body["producer_epoch"]), (COORDINATOR, True, 3))
        end.deferred.callback(NS(error_code=ErrorCode.none))
        self.successResultOf(committed)
        self.assertIs(self.producer._txn.state, S.READY)
        # the next transaction adds its partitions again
        self.producer.begin_transaction()
        self.producer.send("t", b"d", partition=0)
        self.clock.advance(0.005)
        self.assertEqual(len(self.client.of(24)), 2)

    def test_empty_transaction_commits_without_end_txn(self) -> None:
        self.init()
        self.producer.begin_transaction()
        self.successResultOf(self.producer.commit_transaction())
        self.assertEqual(self.client.of(26), [])
        self.assertIs(self.producer._txn.state, S.READY)

    def test_commit_waits_for_the_flush(self) -> None:
        self.init()
        self.producer.begin_transaction()
        self.producer.send("t", b"a", partition=0)
        committed = self.producer.commit_transaction()
        add = self.client.last(24)
        self.assertEqual(self.client.of(26), [])
        add.deferred.callback(NS(results_by_topic_v3_and_below=[]))
        self.clock.advance(0)
        respond(self.client.produce_requests()[-1])
        self.client.last(26).deferred.callback(NS(error_code=ErrorCode.none))
        self.successResultOf(committed)

    def test_fenced_is_fatal(self) -> None:
        self.init()
        self.producer.begin_transaction()
        d = self.producer.send("t", b"a", partition=0)
        self.clock.advance(0.005)
        self.client.last(24).deferred.callback(NS(results_by_topic_v3_and_below=[
            NS(name="t", results_by_partition=[NS(partition_index=0,
                                                  partition_error_code=ErrorCode.producer_fenced)])]))
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.producer_fenced)
        self.assertIs(self.producer._txn.state, S.FATAL_ERROR)
        failure = self.failureResultOf(self.producer.commit_transaction(), KafkaError)
        self.assertEqual(failure.value.error_code, ErrorCode.producer_fenced)
        self.failureResultOf(self.producer.abort_transaction(), KafkaError)
        self.assertEqual(self.client.of(26), [])

    def test_close_after_an_abortable_error_does_not_wait_for_unadded_partitions(self) -> None:
        self.init()
        self.producer.begin_transaction()
        first = self.producer.send("t", b"a", partition=0)
        self.partitions_added()
        second = self.producer.send("t", b"b", partition=1)  # a new partition, not yet in the transaction
        respond(self.client.produce_requests()[-1], errors={("t", 0): ErrorCode.invalid_record})
        self.failureResultOf(first, KafkaError)
        self.assertIs(self.producer._txn.state, S.ABORTABLE_ERROR)
        self.clock.advance(0.005)
        self.assertEqual(len(self.client.of(24)), 1)  # no AddPartitionsToTxn in an abortable state
        self.successResultOf(self.producer.close())
        self.failureResultOf(second, ProducerClosedError)

    def test_fenced_produce_is_fatal(self) -> None:
        self.init()
        self.producer.begin_transaction()
        d = self.producer.send("t", b"a", partition=0)
        self.partitions_added()
        respond(self.client.produce_requests()[-1], errors={("t", 0): ErrorCode.invalid_producer_epoch})
        self.failureResultOf(d, KafkaError)
        self.assertIs(self.producer._txn.state, S.FATAL_ERROR)

    def test_abortable_error_then_abort_bumps_the_epoch(self) -> None:
        self.init()
        self.producer.begin_transaction()
        d = self.producer.send("t", b"a", partition=0)
        self.partitions_added()
        respond(self.client.produce_requests()[-1], errors={("t", 0): ErrorCode.invalid_record})
        self.failureResultOf(d, KafkaError)
        self.assertIs(self.producer._txn.state, S.ABORTABLE_ERROR)
        self.failureResultOf(self.producer.send("t", b"b", partition=0), KafkaError)
        self.assertEqual(self.failureResultOf(self.producer.commit_transaction(), KafkaError).value.error_code,
                         ErrorCode.invalid_record)
        aborted = self.producer.abort_transaction()
        end = self.client.last(26)
        self.assertFalse(end.body["committed"])
        end.deferred.callback(NS(error_code=ErrorCode.none))
        bump = self.client.last(22)  # a gap in the sequence: a new epoch (KIP-360)
        self.assertEqual((bump.body["producer_id"], bump.body["producer_epoch"]), (7, 3))
        bump.deferred.callback(NS(error_code=ErrorCode.none, producer_id=7, producer_epoch=4))
        self.successResultOf(aborted)
        self.assertIs(self.producer._txn.state, S.READY)
        self.assertEqual(self.producer.producer_epoch, 4)
        self.producer.begin_transaction()
        self.producer.send("t", b"c", partition=0)
        self.partitions_added()
        (batch,) = self.client.produce_requests()[-1].batches().values()
        self.assertEqual((batch.producer_epoch, batch.base_sequence), (4, 0))

    def test_abort_fails_records_waiting_for_their_partition(self) -> None:
        self.init()
        self.producer.begin_transaction()
        d = self.producer.send("t", b"a", partition=0)
        self.clock.advance(0.005)
        add = self.client.last(24)  # still unanswered
        aborted = self.producer.abort_transaction()
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.operation_not_attempted)
        add.deferred.callback(NS(results_by_topic_v3_and_below=[]))
        self.client.last(26).deferred.callback(NS(error_code=ErrorCode.none))
        self.successResultOf(aborted)
        self.assertEqual(self.client.produce_requests(), [])
        self.assertIs(self.producer._txn.state, S.READY)

    def test_abort_fails_records_still_waiting_for_metadata(self) -> None:
        """
        A record sent just before the abort, to a topic whose metadata has
        not come yet, is failed too: it would otherwise get its batch after
        the abort began, for a partition never added, and the abort's flush
        would wait for it for ever (found by the simulation, issue 28).
        """
        metadata: defer.Deferred = defer.Deferred()
        known = self.client.ensure_metadata

        async def slow(topics: object = ()) -> None:
            await metadata
            await known(topics)

        self.client.ensure_metadata = slow  # type: ignore[method-assign]
        self.client.known.discard("t")
        self.init()
        self.producer.begin_transaction()
        d = self.producer.send("t", b"a", partition=0)
        self.clock.advance(0.005)
        aborted = self.producer.abort_transaction()
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.operation_not_attempted)
        metadata.callback(None)
        self.clock.advance(1.0)
        self.successResultOf(aborted)  # nothing joined the transaction: no EndTxn
        self.assertEqual((self.client.of(24), self.client.produce_requests()), ([], []))
        self.assertIs(self.producer._txn.state, S.READY)

    def test_unknown_partition_in_add_partitions_is_abortable(self) -> None:
        self.init()
        self.producer.begin_transaction()
        d = self.producer.send("t", b"a", partition=0)
        self.clock.advance(0.005)
        self.client.last(24).deferred.callback(NS(results_by_topic_v3_and_below=[
            NS(name="t", results_by_partition=[
                NS(partition_index=0, partition_error_code=ErrorCode.unknown_topic_or_partition)])]))
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.unknown_topic_or_partition)
        self.assertIs(self.producer._txn.state, S.ABORTABLE_ERROR)

    def test_begin_twice_and_calls_without_transactional_id(self) -> None:
        self.init()
        self.producer.begin_transaction()
        self.assertRaises(IllegalTransactionStateError, self.producer.begin_transaction)
        plain = Producer(self.clock, client=self.client)
        self.assertRaises(IllegalTransactionStateError, plain.begin_transaction)
        self.failureResultOf(plain.init_transactions(), IllegalTransactionStateError)

    def test_unkeyed_sends_fail_after_an_abortable_error(self) -> None:
        """The hot path of send (Python or compiled) takes no record once the transaction has failed."""
        self.init()
        self.producer.begin_transaction()
        d = self.producer.send("t", b"a", partition=0)
        self.partitions_added()
        self.producer.send("out", b"b")
        self.producer.send("out", b"c")
        self.assertIn("out", self.producer._hot)  # the sticky batch of "out" takes unkeyed sends
        respond(self.client.produce_requests()[-1], errors={("t", 0): ErrorCode.invalid_record})
        self.failureResultOf(d, KafkaError)
        self.assertIs(self.producer._txn.state, S.ABORTABLE_ERROR)
        self.assertEqual(self.failureResultOf(self.producer.send("out", b"d"), KafkaError).value.error_code,
                         ErrorCode.invalid_record)
