"""
Unit tests of the transaction coordinator on fakes (an in-memory
``__transaction_state``, a marker writer the test completes, a producer-id
counter) and a L{Clock}: InitProducerId and fencing, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, timeouts, expiration, failover from the log, and every
bad request getting Kafka's error and changing nothing.  No sockets, no sleeps.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.transaction_coordinator import (
    InitProducerIdResult,
    TransactionCoordinator,
    fenced_error,
    offsets_partition_for,
    transaction_state_topic_configs,
)
from kafkatw.broker.transaction_markers import TransactionMarkerChannel
from kafkatw.broker.transaction_state import (
    TransactionState,
    decode_transaction_log_key,
    decode_transaction_log_value,
)
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.testing import FakeMarkerWriter, FakeProducerIdAllocator, FakeTransactionLog

S = TransactionState
E = ErrorCode
PARTITIONS = 4
TIMEOUT_MS = 60000
TOPICS = {"orders": 3, "payments": 2}


class Harness:
    """A coordinator leading every ``__transaction_state`` partition (coordinator epoch 5) over fakes."""

    def __init__(self, testcase: unittest.TestCase, log: FakeTransactionLog | None = None,
                 markers: Any = None, load: bool = True, **overrides: object) -> None:
        self.testcase = testcase
        self.clock = Clock()
        self.clock.advance(1_700_000_000)  # ms timestamps like a real clock's
        self.config = BrokerConfig({"transaction.state.log.num.partitions": PARTITIONS, **overrides})
        self.log = log if log is not None else FakeTransactionLog()
        self.markers = markers if markers is not None else FakeMarkerWriter()
        self.producer_ids = FakeProducerIdAllocator()
        self.coordinator = TransactionCoordinator(
            self.config, self.clock, self.log, self.markers, self.producer_ids,
            lambda topic, partition: 0 <= partition < TOPICS.get(topic, 0))
        if load:
            for p in range(PARTITIONS):
                testcase.successResultOf(self.coordinator.on_became_leader(p, 5))

    def init(self, tid: str = "app", timeout_ms: int = TIMEOUT_MS, pid: int = -1,
             epoch: int = -1) -> InitProducerIdResult:
        return self.testcase.successResultOf(self.coordinator.init_producer_id(tid, timeout_ms, pid, epoch))

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], tid: str = "app") -> dict:
        return self.testcase.successResultOf(self.coordinator.add_partitions_to_txn(tid, pid, epoch, tps))

    def end(self, pid: int, epoch: int, committed: bool = True, tid: str = "app") -> ErrorCode:
        return self.testcase.successResultOf(self.coordinator.end_txn(tid, pid, epoch, committed))

    def meta(self, tid: str = "app") -> Any:
        return self.coordinator.transactions()[tid]

    def states_logged(self, tid: str = "app") -> list:
        """The states written for C{tid}, in order (None: a tombstone)."""
        out = []
        for records in self.log.partitions.values():
            for key, value in records:
                if decode_transaction_log_key(key) == tid:
                    meta = decode_transaction_log_value(tid, value)
                    out.append(None if meta is None else meta.state)
        return out

    def ongoing(self, tid: str = "app") -> InitProducerIdResult:
        r = self.init(tid)
        self.testcase.assertEqual(self.add(r.producer_id, r.producer_epoch, ("orders", 0), ("payments", 1), tid=tid),
                                  {("orders", 0): E.none, ("payments", 1): E.none})
        return r


class InitProducerIdTests(unittest.TestCase):
    def test_new_transactional_id(self) -> None:
        h = Harness(self)
        self.assertEqual(h.init(), InitProducerIdResult(E.none, 1000, 0))
        self.assertEqual(h.states_logged(), [S.EMPTY])
        self.assertEqual(h.log.appends[0][0], h.coordinator.partition_for("app"))
        self.assertEqual(h.log.appends[0][1], 5)  # written at the coordinator epoch

    def test_new_instance_bumps_the_epoch_and_fences_the_old(self) -> None:
        h = Harness(self)
        old = h.init()
        new = h.init()
        self.assertEqual((new.producer_id, new.producer_epoch), (old.producer_id, 1))
        before = len(h.log.appends)
        self.assertEqual(h.add(old.producer_id, old.producer_epoch, ("orders", 0)), {("orders", 0): E.producer_fenced})
        self.assertEqual(h.end(old.producer_id, old.producer_epoch), E.producer_fenced)
        self.assertEqual(len(h.log.appends), before)  # nothing changed
        self.assertEqual(h.add(new.producer_id, new.producer_epoch, ("orders", 0)), {("orders", 0): E.none})

    def test_new_instance_aborts_the_ongoing_transaction_first(self) -> None:
        """CONCURRENT_TRANSACTIONS while the old transaction is aborted at a bumped epoch; then the next epoch."""
        h = Harness(self)
        old = h.ongoing()
        self.assertEqual(h.init().error, E.concurrent_transactions)
        self.assertEqual(h.meta().state, S.PREPARE_ABORT)
        self.assertEqual(h.meta().producer_epoch, 1)  # fenced: the old producer's epoch 0 is refused from now on
        [call] = h.markers.calls
        self.assertEqual((call.producer_id, call.producer_epoch, call.coordinator_epoch, call.committed),
                         (old.producer_id, 1, 5, False))
        self.assertEqual(sorted(call.partitions), [("orders", 0), ("payments", 1)])
        self.assertEqual(h.init().error, E.concurrent_transactions)  # markers still pending
        self.assertEqual(h.end(old.producer_id, old.producer_epoch), E.producer_fenced)
        call.complete()
        self.assertEqual(h.meta().state, S.COMPLETE_ABORT)
        self.assertEqual(h.init(), InitProducerIdResult(E.none, old.producer_id, 2))
        self.assertEqual(h.states_logged(), [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY])

    def test_waits_for_a_prepared_commit(self) -> None:
        h = Harness(self)
        r = h.ongoing()
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.none)
        self.assertEqual(h.init().error, E.concurrent_transactions)
        h.markers.calls[0].complete()
        self.assertEqual(h.init().producer_epoch, 1)
        self.assertEqual(h.states_logged(), [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.EMPTY])

    def test_timeout_above_the_maximum(self) -> None:
        h = Harness(self, **{"transaction.max.timeout.ms": 900000})
        for timeout in (900001, 0, -1):
            self.assertEqual(h.init(timeout_ms=timeout).error, E.invalid_transaction_timeout)
        self.assertEqual(h.log.appends, [])
        self.assertEqual(h.producer_ids.next_id, 1000)  # no id handed out
        self.assertEqual(h.init(timeout_ms=900000).error, E.none)

    def test_empty_transactional_id(self) -> None:
        self.assertEqual(Harness(self).init(tid="").error, E.invalid_request)

    def test_kip360_bump_and_retry(self) -> None:
        h = Harness(self)
        r = h.init()
        bumped = h.init(pid=r.producer_id, epoch=r.producer_epoch)
        self.assertEqual((bumped.producer_id, bumped.producer_epoch), (r.producer_id, 1))
        # the same request again (its answer was lost): the same epoch
        self.assertEqual(h.init(pid=r.producer_id, epoch=r.producer_epoch).producer_epoch, 1)
        self.assertEqual(h.init(pid=r.producer_id, epoch=7).error, E.producer_fenced)
        self.assertEqual(h.init(pid=4242, epoch=1).error, E.producer_fenced)

    def test_exhausted_epoch_rotates_the_producer_id(self) -> None:
        h = Harness(self)
        r = h.init()
        h.meta().producer_epoch = 32766
        rotated = h.init()
        self.assertEqual((rotated.producer_id, rotated.producer_epoch), (r.producer_id + 1, 0))

    def test_allocation_failure(self) -> None:
        h = Harness(self)
        h.producer_ids.broken = True
        self.assertEqual(h.init().error, E.coordinator_not_available)
        self.assertEqual(h.coordinator.transactions(), {})

    def test_log_write_failures(self) -> None:
        h = Harness(self)
        h.log.fail_next(E.not_enough_replicas)
        self.assertEqual(h.init().error, E.coordinator_not_available)
        self.assertEqual(h.meta().pending_state, None)
        h.log.fail_next(E.not_leader_or_follower)
        self.assertEqual(h.init().error, E.not_coordinator)
        self.assertEqual(h.init(), InitProducerIdResult(E.none, 1000, 0))

    def test_concurrent_requests(self) -> None:
        h = Harness(self, log=FakeTransactionLog(hold=True))
        first = h.coordinator.init_producer_id("app", TIMEOUT_MS)
        self.assertNoResult(first)
        self.assertEqual(h.init().error, E.concurrent_transactions)
        h.log.replicate()
        self.assertEqual(self.successResultOf(first), InitProducerIdResult(E.none, 1000, 0))


class TransactionTests(unittest.TestCase):
    def test_commit(self) -> None:
        h = Harness(self)
        r = h.ongoing()
        group_tp = offsets_partition_for("group-1")
        self.assertEqual(self.successResultOf(h.coordinator.add_offsets_to_txn("app", r.producer_id, r.producer_epoch,
                                                                               "group-1")), E.none)
        self.assertEqual(h.meta().topic_partitions, {("orders", 0), ("payments", 1), group_tp})
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.none)
        [call] = h.markers.calls
        self.assertTrue(call.committed)
        self.assertEqual(set(call.partitions), {("orders", 0), ("payments", 1), group_tp})
        call.deferreds[("orders", 0)].callback(None)
        self.assertEqual(h.meta().state, S.PREPARE_COMMIT)
        self.assertEqual(h.meta().topic_partitions, {("payments", 1), group_tp})  # DescribeTransactions shows these
        call.complete()
        self.assertEqual(h.meta().state, S.COMPLETE_COMMIT)
        self.assertEqual(h.meta().topic_partitions, set())
        self.assertEqual(h.states_logged(), [S.EMPTY, S.ONGOING, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT])
        # the next transaction on the same epoch
        self.assertEqual(h.add(r.producer_id, r.producer_epoch, ("orders", 2)), {("orders", 2): E.none})
        self.assertEqual(h.end(r.producer_id, r.producer_epoch, committed=False), E.none)

    def test_offsets_partition_is_kafkas(self) -> None:
        self.assertEqual(offsets_partition_for("console-consumer-group"), ("__consumer_offsets", 48))
        self.assertEqual(offsets_partition_for("polygenelubricants"), ("__consumer_offsets", 0))

    def test_adding_known_partitions_writes_nothing(self) -> None:
        h = Harness(self)
        r = h.ongoing()
        before = len(h.log.appends)
        self.assertEqual(h.add(r.producer_id, r.producer_epoch, ("orders", 0)), {("orders", 0): E.none})
        self.assertEqual(len(h.log.appends), before)

    def test_end_txn_twice(self) -> None:
        h = Harness(self)
        r = h.ongoing()
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.none)
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.concurrent_transactions)  # markers pending
        self.assertEqual(h.end(r.producer_id, r.producer_epoch, committed=False), E.concurrent_transactions)
        self.assertEqual(h.add(r.producer_id, r.producer_epoch, ("orders", 1)),
                         {("orders", 1): E.concurrent_transactions})
        h.markers.calls[0].complete()
        before = len(h.log.appends)
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.none)  # a retry of the completed commit
        self.assertEqual(h.end(r.producer_id, r.producer_epoch, committed=False), E.invalid_txn_state)
        self.assertEqual(len(h.log.appends), before)
        self.assertEqual(len(h.markers.calls), 1)

    def test_fenced_producer_is_told_so_while_the_id_is_busy(self) -> None:
        h = Harness(self)
        old = h.ongoing()
        self.assertEqual(h.init().error, E.concurrent_transactions)  # the abort's markers are pending
        self.assertEqual(h.add(old.producer_id, old.producer_epoch, ("orders", 1)),
                         {("orders", 1): E.producer_fenced})
        self.assertEqual(h.add(old.producer_id, old.producer_epoch + 1, ("orders", 1)),
                         {("orders", 1): E.concurrent_transactions})

    def test_end_txn_without_a_transaction(self) -> None:
        h = Harness(self)
        r = h.init()
        before = len(h.log.appends)
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.invalid_txn_state)
        self.assertEqual(h.end(r.producer_id, r.producer_epoch, committed=False), E.invalid_txn_state)
        self.assertEqual(len(h.log.appends), before)
        self.assertEqual(h.meta().state, S.EMPTY)

    def test_unknown_producer_id(self) -> None:
        h = Harness(self)
        r = h.ongoing()
        before = len(h.log.appends)
        self.assertEqual(h.add(r.producer_id + 1, 0, ("orders", 1)), {("orders", 1): E.invalid_producer_id_mapping})
        self.assertEqual(h.end(r.producer_id + 1, 0), E.invalid_producer_id_mapping)
        self.assertEqual(self.successResultOf(h.coordinator.add_offsets_to_txn("app", r.producer_id + 1, 0, "g")),
                         E.invalid_producer_id_mapping)
        # a transactional id that never called InitProducerId
        self.assertEqual(h.add(r.producer_id, 0, ("orders", 1), tid="stranger"),
                         {("orders", 1): E.invalid_producer_id_mapping})
        self.assertEqual(h.end(r.producer_id, 0, tid="stranger"), E.invalid_producer_id_mapping)
        self.assertEqual(len(h.log.appends), before)
        self.assertEqual(h.meta().topic_partitions, {("orders", 0), ("payments", 1)})

    def test_unknown_topic(self) -> None:
        """UNKNOWN_TOPIC_OR_PARTITION for the missing, OPERATION_NOT_ATTEMPTED for the rest; nothing added."""
        h = Harness(self)
        r = h.init()
        before = len(h.log.appends)
        self.assertEqual(h.add(r.producer_id, r.producer_epoch, ("orders", 0), ("nope", 0), ("orders", 9)), {
            ("orders", 0): E.operation_not_attempted, ("nope", 0): E.unknown_topic_or_partition,
            ("orders", 9): E.unknown_topic_or_partition})
        self.assertEqual(len(h.log.appends), before)
        self.assertEqual(h.meta().state, S.EMPTY)

    def test_failed_write_changes_nothing(self) -> None:
        h = Harness(self)
        r = h.ongoing()
        h.log.fail_next(E.request_timed_out)
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.coordinator_not_available)
        self.assertEqual((h.meta().state, h.meta().pending_state), (S.ONGOING, None))
        self.assertEqual(h.markers.calls, [])
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.none)

    def test_completion_write_is_retried(self) -> None:
        h = Harness(self)
        r = h.ongoing()
        h.end(r.producer_id, r.producer_epoch)
        h.log.fail_next(E.not_enough_replicas)
        h.markers.calls[0].complete()
        self.assertEqual(h.meta().state, S.PREPARE_COMMIT)
        h.clock.advance(0.1)
        self.assertEqual(h.meta().state, S.COMPLETE_COMMIT)

    def test_fenced_error_for_old_versions(self) -> None:
        self.assertEqual(fenced_error(26, 1, E.producer_fenced), E.invalid_producer_epoch)
        self.assertEqual(fenced_error(26, 2, E.producer_fenced), E.producer_fenced)
        self.assertEqual(fenced_error(22, 3, E.producer_fenced), E.invalid_producer_epoch)
        self.assertEqual(fenced_error(28, 2, E.producer_fenced), E.invalid_producer_epoch)
        self.assertEqual(fenced_error(24, 0, E.invalid_txn_state), E.invalid_txn_state)

    def test_topic_configs(self) -> None:
        self.assertEqual(transaction_state_topic_configs(BrokerConfig()), {
            "cleanup.policy": "compact", "min.insync.replicas": "2", "segment.bytes": "104857600",
            "unclean.leader.election.enable": "false"})


class TimeoutTests(unittest.TestCase):
    def test_timed_out_transaction_is_aborted_and_its_producer_fenced(self) -> None:
        h = Harness(self)
        h.coordinator.start()
        self.addCleanup(h.coordinator.stop)
        r = h.ongoing()
        h.clock.advance(50)  # 50 s < 60 s
        self.assertEqual(h.meta().state, S.ONGOING)
        h.clock.advance(10)  # 60 s: not yet more than the timeout
        self.assertEqual(h.meta().state, S.ONGOING)
        h.clock.advance(10)
        self.assertEqual(h.meta().state, S.PREPARE_ABORT)
        self.assertEqual(h.meta().producer_epoch, 1)
        [call] = h.markers.calls
        self.assertEqual((call.committed, call.producer_epoch), (False, 1))
        call.complete()
        self.assertEqual(h.meta().state, S.COMPLETE_ABORT)
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.producer_fenced)
        self.assertEqual(h.add(r.producer_id, r.producer_epoch, ("orders", 0)), {("orders", 0): E.producer_fenced})

    def test_failed_fence_is_not_bumped_again(self) -> None:
        """An abort whose PrepareAbort write failed keeps its bumped epoch; the next attempt reuses it."""
        h = Harness(self)
        r = h.ongoing()
        h.clock.advance(61)
        h.log.fail_next(E.not_enough_replicas)
        self.assertEqual(h.coordinator.abort_timed_out_transactions(), ["app"])
        self.assertEqual((h.meta().state, h.meta().producer_epoch, h.meta().has_failed_epoch_fence),
                         (S.ONGOING, 1, True))
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.producer_fenced)  # never answered, still fenced
        self.assertEqual(h.coordinator.abort_timed_out_transactions(), ["app"])
        self.assertEqual((h.meta().state, h.meta().producer_epoch), (S.PREPARE_ABORT, 1))
        self.assertEqual(h.markers.calls[0].producer_epoch, 1)

    def test_a_busy_transaction_is_not_aborted_twice(self) -> None:
        h = Harness(self)
        h.ongoing()
        h.clock.advance(61)
        self.assertEqual(h.coordinator.abort_timed_out_transactions(), ["app"])
        self.assertEqual(h.coordinator.abort_timed_out_transactions(), [])

    def test_idle_transactional_id_expires(self) -> None:
        h = Harness(self, **{"transactional.id.expiration.ms": 3600_000,
                             "transaction.remove.expired.transaction.cleanup.interval.ms": 600_000})
        h.coordinator.start()
        self.addCleanup(h.coordinator.stop)
        r = h.init()
        h.ongoing("busy")
        h.clock.advance(3000)
        self.assertIn("app", h.coordinator.transactions())
        h.clock.advance(600)
        self.assertNotIn("app", h.coordinator.transactions())
        self.assertIn("busy", h.coordinator.transactions())  # Ongoing never expires (it times out)
        self.assertEqual(h.states_logged(), [S.EMPTY, None])
        self.assertEqual(h.add(r.producer_id, r.producer_epoch, ("orders", 0)),
                         {("orders", 0): E.invalid_producer_id_mapping})
        self.assertEqual(h.init().producer_id, r.producer_id + 2)  # a new producer id

    def test_completed_transactional_id_expires(self) -> None:
        h = Harness(self, **{"transactional.id.expiration.ms": 1000})
        r = h.ongoing()
        h.end(r.producer_id, r.producer_epoch)
        h.clock.advance(5)
        self.assertEqual(h.coordinator.remove_expired_transactional_ids(), [])  # PrepareCommit: not yet
        h.markers.calls[0].complete()
        h.clock.advance(5)
        self.assertEqual(h.coordinator.remove_expired_transactional_ids(), ["app"])


class FailoverTests(unittest.TestCase):
    def test_load_in_progress_and_not_coordinator(self) -> None:
        log = FakeTransactionLog()
        reading: defer.Deferred = defer.Deferred()
        log.read = lambda partition: reading  # type: ignore[method-assign]
        h = Harness(self, log=log, load=False)
        self.assertEqual(h.init().error, E.not_coordinator)
        loaded = h.coordinator.on_became_leader(h.coordinator.partition_for("app"), 7)
        self.assertEqual(h.init().error, E.coordinator_load_in_progress)
        self.assertEqual(h.coordinator.list_transactions()["error_code"], E.coordinator_load_in_progress)
        reading.callback([])
        self.assertEqual(self.successResultOf(loaded), 0)
        self.assertEqual(h.init().error, E.none)
        self.assertEqual(h.log.appends[-1][1], 7)
        self.assertEqual(h.coordinator.owned_partitions(), {h.coordinator.partition_for("app"): 7})

    def test_served_once_the_loaded_log_is_committed(self) -> None:
        """
        A new leader's log may end with state the previous leader never
        committed (an Ongoing whose write failed): a later leader without it
        would truncate it.  The coordinator serves the partition only once its
        high watermark passed everything loaded, so an AddPartitionsToTxn is
        never answered from such a record (the simulation's seed 1027: a
        transaction's partitions written, the transaction then unknown, its
        records holding the last stable offset for good).  Until then, and
        while too few replicas are in sync, COORDINATOR_LOAD_IN_PROGRESS.
        """
        old = Harness(self)
        r = old.ongoing()  # Ongoing over orders-0 and payments-1, in the log
        partition = old.coordinator.partition_for("app")
        old.log.uncommitted.add(partition)
        new = Harness(self, log=old.log, load=False)
        loaded = new.coordinator.on_became_leader(partition, 6)
        self.assertNoResult(loaded)
        add = new.coordinator.add_partitions_to_txn("app", r.producer_id, r.producer_epoch, [("orders", 0)])
        self.assertEqual(self.successResultOf(add), {("orders", 0): E.coordinator_load_in_progress})
        new.log.fail_committed(partition, E.not_enough_replicas_after_append)  # too few in sync: wait on
        new.clock.advance(0.1)
        self.assertNoResult(loaded)
        self.assertTrue(new.coordinator.is_loading())
        new.log.commit(partition)
        self.assertEqual(self.successResultOf(loaded), 1)
        self.assertEqual(new.add(r.producer_id, r.producer_epoch, ("orders", 0)), {("orders", 0): E.none})

    def test_a_leadership_lost_while_waiting_for_the_commit_ends_the_load(self) -> None:
        log = FakeTransactionLog()
        log.uncommitted.add(0)
        h = Harness(self, log=log, load=False)
        loaded = h.coordinator.on_became_leader(0, 6)
        log.fail_committed(0, E.not_leader_or_follower)
        self.assertIsNone(self.successResultOf(loaded))
        self.assertFalse(h.coordinator.is_loading())
        self.assertEqual(h.coordinator.owned_partitions(), {})

    def test_resignation_of_an_older_epoch_keeps_a_newer_load(self) -> None:
        log = FakeTransactionLog()
        reading: defer.Deferred = defer.Deferred()
        log.read = lambda partition: reading  # type: ignore[method-assign]
        h = Harness(self, log=log, load=False)
        loaded = h.coordinator.on_became_leader(0, 8)
        h.coordinator.on_resigned(0, 7)
        self.assertTrue(h.coordinator.is_loading())
        reading.callback([])
        self.assertEqual(self.successResultOf(loaded), 0)
        h.coordinator.on_resigned(0, 7)
        self.assertEqual(h.coordinator.owned_partitions(), {0: 8})
        h.coordinator.on_resigned(0, 8)
        self.assertEqual(h.coordinator.owned_partitions(), {})

    def test_prepare_commit_is_completed_by_the_next_leader(self) -> None:
        """The old coordinator wrote PrepareCommit and died before the markers; the new one sends them."""
        old = Harness(self)
        r = old.ongoing()
        self.assertEqual(old.end(r.producer_id, r.producer_epoch), E.none)
        partition = old.coordinator.partition_for("app")
        old.coordinator.on_resigned(partition)
        self.assertTrue(old.markers.calls[0].deferreds[("orders", 0)].called)  # cancelled
        self.assertEqual(old.init().error, E.not_coordinator)

        new = Harness(self, log=old.log, load=False)
        self.assertEqual(self.successResultOf(new.coordinator.on_became_leader(partition, 6)), 1)
        self.assertEqual(new.meta().state, S.PREPARE_COMMIT)
        [call] = new.markers.calls
        self.assertEqual((call.producer_id, call.producer_epoch, call.coordinator_epoch, call.committed),
                         (r.producer_id, r.producer_epoch, 6, True))
        self.assertEqual(sorted(call.partitions), [("orders", 0), ("payments", 1)])
        call.complete()
        self.assertEqual(new.meta().state, S.COMPLETE_COMMIT)
        self.assertEqual(new.log.appends[-1][1], 6)
        self.assertEqual(new.end(r.producer_id, r.producer_epoch), E.none)  # the client's retry

    def test_ongoing_is_left_to_time_out(self) -> None:
        old = Harness(self)
        r = old.ongoing()
        new = Harness(self, log=old.log, load=False)
        for p in range(PARTITIONS):
            new.coordinator.on_became_leader(p, 6)
        self.assertEqual(new.meta().state, S.ONGOING)
        self.assertEqual(new.meta().topic_partitions, {("orders", 0), ("payments", 1)})
        self.assertEqual(new.markers.calls, [])
        # the producer may go on with the new coordinator...
        self.assertEqual(new.add(r.producer_id, r.producer_epoch, ("orders", 1)), {("orders", 1): E.none})
        # ...or be aborted when the transaction times out
        new.clock.advance(61)
        self.assertEqual(new.coordinator.abort_timed_out_transactions(), ["app"])
        self.assertEqual(new.markers.calls[0].committed, False)

    def test_reload_keeps_the_last_value_and_drops_tombstones(self) -> None:
        old = Harness(self, **{"transactional.id.expiration.ms": 1000})
        old.init("gone")
        old.clock.advance(2)
        old.coordinator.remove_expired_transactional_ids()
        r = old.init("kept")
        old.init("kept")
        new = Harness(self, log=old.log)
        self.assertNotIn("gone", new.coordinator.transactions())
        self.assertEqual(new.meta("kept").producer_epoch, 1)
        self.assertEqual(new.meta("kept").producer_id, r.producer_id)

    def test_stale_write_after_resignation(self) -> None:
        h = Harness(self, log=FakeTransactionLog(hold=True))
        d = h.coordinator.init_producer_id("app", TIMEOUT_MS)
        h.coordinator.on_resigned(h.coordinator.partition_for("app"))
        h.log.replicate()
        self.assertEqual(self.successResultOf(d).error, E.not_coordinator)


class DescribeAndListTests(unittest.TestCase):
    def test_describe(self) -> None:
        h = Harness(self)
        r = h.ongoing()
        h.init("idle")
        out = h.coordinator.describe_transactions(["app", "idle", "unknown"])
        self.assertEqual(out[0], {
            "error_code": E.none, "transactional_id": "app", "transaction_state": "Ongoing",
            "transaction_timeout": TIMEOUT_MS, "transaction_start_time": 1_700_000_000_000,
            "producer_id": r.producer_id, "producer_epoch": 0,
            "topics": [{"topic": "orders", "partitions": [0]}, {"topic": "payments", "partitions": [1]}]})
        self.assertEqual((out[1]["error_code"], out[1]["transaction_state"], out[1]["topics"]), (E.none, "Empty", []))
        self.assertEqual(out[2]["error_code"], E.transactional_id_not_found)
        self.assertEqual(h.coordinator.describe_transactions([""])[0]["error_code"], E.invalid_request)
        h.coordinator.on_resigned(h.coordinator.partition_for("app"))
        self.assertEqual(h.coordinator.describe_transactions(["app"])[0]["error_code"], E.not_coordinator)

    def test_list(self) -> None:
        h = Harness(self)
        a = h.ongoing("a")
        h.init("b")
        h.clock.advance(10)
        c = h.ongoing("c")
        listed = h.coordinator.list_transactions()
        self.assertEqual(listed["error_code"], E.none)
        self.assertEqual(sorted((t["transactional_id"], t["transaction_state"]) for t in listed["transaction_states"]),
                         [("a", "Ongoing"), ("b", "Empty"), ("c", "Ongoing")])
        only = h.coordinator.list_transactions(state_filters=["Ongoing", "Bogus"], producer_id_filters=[c.producer_id])
        self.assertEqual(only["unknown_state_filters"], ["Bogus"])
        self.assertEqual([t["transactional_id"] for t in only["transaction_states"]], ["c"])
        longer = h.coordinator.list_transactions(state_filters=["Ongoing"], duration_filter_ms=5000)
        self.assertEqual([t["producer_id"] for t in longer["transaction_states"]], [a.producer_id])
        pattern = h.coordinator.list_transactions(transactional_id_pattern="[ab]")
        self.assertEqual(sorted(t["transactional_id"] for t in pattern["transaction_states"]), ["a", "b"])
        self.assertEqual(h.coordinator.list_transactions(transactional_id_pattern="(")["error_code"],
                         E.invalid_regular_expression)


class WithMarkerChannelTests(unittest.TestCase):
    """The coordinator over the real marker channel and a fake WriteTxnMarkers peer."""

    def test_commit_through_the_channel(self) -> None:
        sent: list = []

        def send(broker_id: int, body: dict) -> defer.Deferred:
            sent.append((broker_id, body))
            return defer.succeed(SimpleNamespace(markers=[SimpleNamespace(
                producer_id=m["producer_id"],
                topics=[SimpleNamespace(name=t["name"], partitions=[
                    SimpleNamespace(partition_index=p, error_code=0) for p in t["partition_indexes"]])
                    for t in m["topics"]]) for m in body["markers"]]))

        clock = Clock()
        channel = TransactionMarkerChannel(clock, send, lambda topic, p: {"orders": 1, "payments": 2}[topic])
        h = Harness(self, markers=channel)
        channel.reactor = h.clock
        r = h.ongoing()
        self.assertEqual(h.end(r.producer_id, r.producer_epoch), E.none)
        h.clock.advance(0)
        self.assertEqual(sorted(b for b, _ in sent), [1, 2])
        self.assertEqual(h.meta().state, S.COMPLETE_COMMIT)
