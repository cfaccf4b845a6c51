"""
The transactional request handlers and the broker's transaction wiring, in
one process: KafkaApis over real logs, a fake ZooKeeper and a
MemoryReactorClock, with WriteTxnMarkers sent back into the same KafkaApis.
"""

from __future__ import annotations

import datetime
import os
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from twisted.internet import defer
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import EventLoggingObserver
from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial import unittest

from kafkatw.broker.apis import ADVERTISED_VERSIONS
from kafkatw.broker.group_coordinator import coordinator_for
from kafkatw.broker.transaction_apis import TRANSACTION_VERSIONS, TransactionWiring
from kafkatw.broker.transaction_coordinator import offsets_partition_for
from kafkatw.broker.transaction_log import PendingOffsetStore, transaction_state_create_configs
from kafkatw.broker.transaction_state import TRANSACTION_STATE_TOPIC, TransactionState
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch, parse_batch_headers, unpack_header
from kafkatw.protocol.control import encode_marker_batch
from kafkatw.protocol.messages import decode_response, encode_request, parse_request_header

from .test_broker import BrokerHarness

TXN_CONFIG = {"transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
              "transaction.state.log.num.partitions": 1}


def group_led_by(broker: int) -> str:
    return next(g for g in (f"group-{i}" for i in range(100)) if coordinator_for(g, [0, 1]) == broker)


class TxnHarness(BrokerHarness):
    """A broker harness with the transaction wiring; markers loop back into the same broker."""

    def __init__(self, testcase: unittest.TestCase, **overrides: Any) -> None:
        super().__init__(testcase, **{**TXN_CONFIG, **overrides})
        self.sent: list[tuple[int, dict]] = []
        self.wiring = TransactionWiring(self.config, self.replica_manager, self.metadata, self.admin, self.registry,
                                        self._send, self.clock, lambda: int(self.clock.seconds() * 1000))
        self.apis.transactions = self.wiring
        self.wiring.start()
        testcase.addCleanup(self.wiring.stop)

    def _send(self, broker: int, api_key: int, body: dict) -> defer.Deferred:
        self.sent.append((broker, body))
        frame = encode_request(api_key, 1, 99, "broker", body)
        result = self.apis.handle(parse_request_header(frame), frame)
        d = result if isinstance(result, defer.Deferred) else defer.succeed(result)
        return d.addCallback(lambda data: decode_response(api_key, 1, data)[1])

    def settle(self) -> None:
        for _ in range(5):
            self.clock.advance(0)
            self.clock.advance(0.2)

    def init(self, tid: str = "tx", version: int = 4) -> Any:
        self.call(10, 3, {"key": tid, "key_type": 1})  # creates __transaction_state
        self.settle()
        response = self.call(22, version, {"transactional_id": tid, "transaction_timeout": 60000,
                                           "producer_id": -1, "producer_epoch": -1})
        return response

    def txn_produce(self, topic: str, partition: int, pid: int, epoch: int, seq: int, n: int = 2) -> Any:
        records = build_batch([(b"k", b"v%d" % i) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                              base_sequence=seq, attributes=0x10)
        body = {"transactional_id": "tx", "acks": -1, "timeout": 1000,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}
        return self.call(0, 9, body).responses[0].partition_responses[0]

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], tid: str = "tx") -> Any:
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        return self.call(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                 "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
                                     {"name": t, "partitions": ps} for t, ps in topics.items()]})

    def end(self, pid: int, epoch: int, committed: bool, tid: str = "tx") -> Any:
        return self.call(26, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                 "committed": committed})

    def fetch_committed(self, topic: str, partition: int, offset: int, version: int = 12) -> Any:
        body = self.fetch_request(topic, partition, offset, version=version)
        body["isolation_level"] = 1
        return self.call(1, version, body).responses[0].partitions[0]


class FindCoordinatorTests(unittest.TestCase):
    def test_creates_the_state_topic_then_answers_its_leader(self) -> None:
        h = TxnHarness(self, **{"transaction.state.log.num.partitions": 2})
        first = h.call(10, 3, {"key": "tx", "key_type": 1})
        self.assertEqual(first.error_code, ErrorCode.coordinator_not_available)
        h.settle()
        self.assertIn(TRANSACTION_STATE_TOPIC, h.metadata.topics)
        self.assertEqual(len(h.metadata.topics[TRANSACTION_STATE_TOPIC].partitions), 2)
        keys = ["tx", "other", "third"]
        second = h.call(10, 4, {"key_type": 1, "coordinator_keys": keys})
        leaders = {p: h.metadata.leader(TRANSACTION_STATE_TOPIC, p) for p in (0, 1)}
        self.assertEqual([(c.error_code, c.node_id) for c in second.coordinators],
                         [(ErrorCode.none, leaders[h.wiring.coordinator.partition_for(k)]) for k in keys])
        self.assertEqual(set(h.wiring.coordinator.owned_partitions()), {p for p, b in leaders.items() if b == 0})

    def test_one_line_when_a_larger_cluster_keeps_replication_factor_1(self) -> None:
        """The single-broker value on two live brokers: the topic is created, with one line saying so."""
        events = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        h = TxnHarness(self)
        h.call(10, 3, {"key": "tx", "key_type": 1})
        h.settle()
        self.assertIn(TRANSACTION_STATE_TOPIC, h.metadata.topics)
        lines = [formatEvent(e) for e in events if "replication factor 1 on" in e.get("log_format", "")]
        self.assertEqual(len(lines), 1)
        self.assertIn("__transaction_state with replication factor 1 on 2 live brokers", lines[0])

    def test_waits_for_enough_brokers(self) -> None:
        """Kafka's rule: the internal topic is not created with fewer live brokers than its replication factor."""
        h = TxnHarness(self, **{"transaction.state.log.replication.factor": 3})
        response = h.call(10, 3, {"key": "tx", "key_type": 1})
        self.assertEqual(response.error_code, ErrorCode.coordinator_not_available)
        h.settle()
        self.assertNotIn(TRANSACTION_STATE_TOPIC, h.metadata.topics)

    def test_state_topic_configs(self) -> None:
        configs = transaction_state_create_configs(BrokerConfig({"broker.id": 0}))
        # this base has no log compaction: delete, nothing ever deleted
        if configs["cleanup.policy"] == "delete":
            self.assertEqual((configs["retention.ms"], configs["retention.bytes"]), ("-1", "-1"))
        self.assertEqual(configs["unclean.leader.election.enable"], "false")
        self.assertEqual(configs["min.insync.replicas"], "2")

    def test_transactional_apis_advertised(self) -> None:
        h = TxnHarness(self)
        response = h.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        for key, versions in TRANSACTION_VERSIONS.items():
            self.assertEqual(advertised[key], versions)
        self.assertEqual(advertised, ADVERTISED_VERSIONS)


class TransactionFlowTests(unittest.TestCase):
    def setUp(self) -> None:
        self.h = TxnHarness(self)
        self.h.create_topic("t", 2)
        self.h.create_topic(TRANSACTION_STATE_TOPIC, 1, [0])  # led here (with 2 live brokers it might not be)
        response = self.h.init()
        self.assertEqual(response.error_code, ErrorCode.none)
        self.pid, self.epoch = response.producer_id, response.producer_epoch

    def test_commit(self) -> None:
        h = self.h
        self.assertEqual(h.add(self.pid, self.epoch, ("t", 0), ("t", 1)).results_by_topic_v3_and_below[0]
                         .results_by_partition[0].partition_error_code, ErrorCode.none)
        h.produce("t", 0, build_batch([(b"k", b"plain")]))  # offset 0, not transactional
        self.assertEqual(h.txn_produce("t", 0, self.pid, self.epoch, 0).error_code, ErrorCode.none)  # 1-2
        self.assertEqual(h.txn_produce("t", 1, self.pid, self.epoch, 0).error_code, ErrorCode.none)  # 0-1
        uncommitted = h.fetch("t", 0, 0)
        self.assertEqual((uncommitted.high_watermark, uncommitted.last_stable_offset), (3, 1))
        self.assertFalse(uncommitted.aborted_transactions)
        committed = h.fetch_committed("t", 0, 0)
        self.assertEqual(committed.last_stable_offset, 1)
        self.assertEqual([h.base_offset for h in parse_batch_headers(bytes(committed.records))], [0])
        self.assertFalse(h.fetch_committed("t", 1, 0).records)
        self.assertEqual(self._latest("t", 0, 1), 1)
        self.assertEqual(self._latest("t", 0, 0), 3)

        self.assertEqual(h.end(self.pid, self.epoch, True).error_code, ErrorCode.none)
        h.settle()
        self.assertEqual(h.wiring.coordinator.transactions()["tx"].state, TransactionState.COMPLETE_COMMIT)
        self.assertEqual(len(h.sent), 1)
        after = h.fetch_committed("t", 0, 0)
        self.assertEqual((after.high_watermark, after.last_stable_offset), (4, 4))
        headers = parse_batch_headers(bytes(after.records))
        self.assertEqual([(x.base_offset, x.is_control) for x in headers], [(0, False), (1, False), (3, True)])
        self.assertEqual(list(after.aborted_transactions), [])
        self.assertEqual(self._latest("t", 1, 1), 3)

    def test_read_committed_fetch_waits_for_the_lso(self) -> None:
        """A waiting read-committed fetch is not woken by uncommitted data, but by the commit."""
        h = self.h
        h.add(self.pid, self.epoch, ("t", 0))
        body = h.fetch_request("t", 0, 0, max_wait_ms=5000)
        body["isolation_level"] = 1
        waiting = h.request(1, 12, body)
        self.assertNoResult(waiting)
        h.txn_produce("t", 0, self.pid, self.epoch, 0)  # the high watermark moves, the LSO does not
        self.assertNoResult(waiting)
        h.end(self.pid, self.epoch, True)
        h.clock.advance(0)
        h.clock.advance(0)
        response = h.decode(1, 12, self.successResultOf(waiting)).responses[0].partitions[0]
        self.assertEqual(response.last_stable_offset, 3)
        self.assertLess(h.clock.seconds(), 5)

    def test_abort_lists_the_aborted_transaction(self) -> None:
        h = self.h
        h.add(self.pid, self.epoch, ("t", 0))
        h.txn_produce("t", 0, self.pid, self.epoch, 0)  # 0-1
        self.assertEqual(h.end(self.pid, self.epoch, False).error_code, ErrorCode.none)
        h.settle()
        after = h.fetch_committed("t", 0, 0)
        self.assertEqual(after.last_stable_offset, 3)
        self.assertEqual([(a.producer_id, a.first_offset) for a in after.aborted_transactions], [(self.pid, 0)])
        # the broker filters nothing: the aborted batch and the ABORT marker are in the records
        self.assertEqual(len(parse_batch_headers(bytes(after.records))), 2)
        segment = h.log_manager.get("t", 0).active_segment
        self.assertTrue(os.path.exists(segment.txn_index.path))
        # v4 carries the list too
        self.assertEqual(len(h.fetch_committed("t", 0, 0, version=4).aborted_transactions), 1)

    def test_fencing(self) -> None:
        h = self.h
        h.add(self.pid, self.epoch, ("t", 0))
        h.txn_produce("t", 0, self.pid, self.epoch, 0)
        again = h.call(22, 4, {"transactional_id": "tx", "transaction_timeout": 60000, "producer_id": -1,
                               "producer_epoch": -1})
        self.assertEqual(again.error_code, ErrorCode.concurrent_transactions)  # the old one is being aborted
        h.settle()
        again = h.call(22, 4, {"transactional_id": "tx", "transaction_timeout": 60000, "producer_id": -1,
                               "producer_epoch": -1})
        self.assertEqual((again.error_code, again.producer_id), (ErrorCode.none, self.pid))
        self.assertGreater(again.producer_epoch, self.epoch)
        self.assertEqual(h.end(self.pid, self.epoch, True).error_code, ErrorCode.producer_fenced)
        self.assertEqual(h.call(26, 1, {"transactional_id": "tx", "producer_id": self.pid,
                                        "producer_epoch": self.epoch, "committed": True}).error_code,
                         ErrorCode.invalid_producer_epoch)
        # the zombie's write is refused by the partition (its epoch is older than the ABORT marker's)
        self.assertEqual(h.txn_produce("t", 0, self.pid, self.epoch, 2).error_code,
                         ErrorCode.invalid_producer_epoch)
        self.assertEqual(h.fetch_committed("t", 0, 0).last_stable_offset, 3)

    def test_group_offsets_commit_and_abort(self) -> None:
        h = self.h
        group = group_led_by(0)
        self.assertEqual(h.call(25, 3, {"transactional_id": "tx", "producer_id": self.pid,
                                        "producer_epoch": self.epoch, "group_id": group}).error_code, ErrorCode.none)
        self.assertIn(offsets_partition_for(group), h.wiring.coordinator.transactions()["tx"].topic_partitions)
        commit = self._txn_offset_commit(group, 7, "m", add=False)
        self.assertEqual(commit.topics[0].partitions[0].error_code, ErrorCode.none)
        self.assertEqual(self._committed(group), -1)  # pending until the marker
        self.assertEqual(self._fetch_offset(group, require_stable=False), (ErrorCode.none, -1))
        self.assertEqual(self._fetch_offset(group, require_stable=True), (ErrorCode.unstable_offset_commit, -1))
        h.end(self.pid, self.epoch, True)
        h.settle()
        self.assertEqual(self._committed(group), 7)
        self.assertEqual(self._fetch_offset(group, require_stable=True), (ErrorCode.none, 7))
        self.assertEqual(self.successResultOf(PendingOffsetStore(h.registry).pending(group)), {})
        # an aborted transaction's offsets vanish
        self._txn_offset_commit(group, 9)
        h.end(self.pid, self.epoch, False)
        h.settle()
        self.assertEqual(self._committed(group), 7)
        self.assertEqual(self.successResultOf(PendingOffsetStore(h.registry).pending(group)), {})

    def test_stable_offset_fetch_while_the_commit_completes(self) -> None:
        """
        OffsetFetch with C{require_stable} while the COMMIT of the
        transaction's offsets completes in ZooKeeper between its reads (here:
        right after it lists the pending offsets, whose node is then gone when
        read) answers the transaction's offset, never the one from before it
        as stable: a consumer starting there would consume the transaction's
        input again.
        """
        h = self.h
        group = group_led_by(0)
        self._txn_offset_commit(group, 7)
        client = h.registry.client
        get_children = client.get_children
        listed = []

        def list_then_commit(path: str) -> defer.Deferred:
            d = get_children(path)
            if path == PendingOffsetStore.path(group) and not listed:
                listed.append(path)
                # EndTxn and its markers: committed offset 7 written, the pending node deleted
                self.assertEqual(h.end(self.pid, self.epoch, True).error_code, ErrorCode.none)
                h.settle()
            return d

        self.patch(client, "get_children", list_then_commit)
        self.assertEqual(self._fetch_offset(group, require_stable=True), (ErrorCode.none, 7))
        self.assertEqual(listed, [PendingOffsetStore.path(group)])
        self.assertEqual(self._committed(group), 7)

    def test_txn_offset_commit_elsewhere_is_not_coordinator(self) -> None:
        response = self.h.call(28, 3, {"transactional_id": "tx", "group_id": group_led_by(1),
                                       "producer_id": self.pid, "producer_epoch": self.epoch,
                                       "generation_id": -1, "member_id": "", "group_instance_id": None,
                                       "topics": [{"name": "t", "partitions": [
                                           {"partition_index": 0, "committed_offset": 1,
                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        self.assertEqual(response.topics[0].partitions[0].error_code, ErrorCode.not_coordinator)

    def test_describe_and_list(self) -> None:
        h = self.h
        h.add(self.pid, self.epoch, ("t", 1))
        h.txn_produce("t", 1, self.pid, self.epoch, 0)
        described = h.call(65, 0, {"transactional_ids": ["tx"]}).transaction_states[0]
        self.assertEqual((described.error_code, described.transaction_state, described.producer_id),
                         (ErrorCode.none, "Ongoing", self.pid))
        self.assertIsInstance(described.transaction_start_time, datetime.datetime)
        self.assertEqual([(t.topic, list(t.partitions)) for t in described.topics], [("t", [1])])
        # an unknown id is an error entry whose start time decodes (the schema's default, 0)
        unknown = h.call(65, 0, {"transactional_ids": ["nobody"]}).transaction_states[0]
        self.assertNotEqual(unknown.error_code, ErrorCode.none)
        self.assertEqual(unknown.transaction_start_time.timestamp(), 0)
        listed = h.call(66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
        self.assertEqual([(t.transactional_id, t.transaction_state) for t in listed.transaction_states],
                         [("tx", "Ongoing")])
        producers = h.call(61, 0, {"topics": [{"name": "t", "partition_indexes": [1, 5]}]}).topics[0].partitions
        self.assertEqual(producers[0].active_producers[0].producer_id, self.pid)
        self.assertEqual(producers[0].active_producers[0].current_txn_start_offset, 0)
        self.assertEqual(producers[0].active_producers[0].last_sequence, 1)
        self.assertEqual(producers[1].error_code, ErrorCode.unknown_topic_or_partition)

    def test_write_txn_markers_errors(self) -> None:
        h = self.h
        body = {"markers": [{"producer_id": self.pid, "producer_epoch": self.epoch, "transaction_result": True,
                             "coordinator_epoch": 0, "topics": [{"name": "nope", "partition_indexes": [0]},
                                                                {"name": "t", "partition_indexes": [0]}]}]}
        response = h.call(27, 1, body)
        codes = {(t.name, p.partition_index): p.error_code for t in response.markers[0].topics
                 for p in t.partitions}
        self.assertEqual(codes, {("nope", 0): ErrorCode.unknown_topic_or_partition, ("t", 0): ErrorCode.none})
        body["markers"][0]["producer_epoch"] = self.epoch - 1 if self.epoch > 0 else -1
        # a newer epoch in the partition's log (straight into the log: the produce path would ask the
        # coordinator, which knows no such epoch)
        h.replica_manager.append("t", 1, build_batch([(b"k", b"v")], producer_id=self.pid,
                                                     producer_epoch=self.epoch + 1, base_sequence=0,
                                                     attributes=0x10), None)
        body["markers"][0]["topics"] = [{"name": "t", "partition_indexes": [1]}]
        response = h.call(27, 1, body)
        self.assertEqual(response.markers[0].topics[0].partitions[0].error_code, ErrorCode.invalid_producer_epoch)

    def test_a_batch_that_starts_a_transaction_is_verified_with_the_coordinator(self) -> None:
        """
        KIP-890's partition verification: a transactional batch that would
        start a transaction on a partition is appended only when the
        coordinator places the partition in the producer's ongoing
        transaction.  A late batch of a transaction that has ended (its
        abort's marker written) is refused, and so is one of another epoch;
        a batch after the first of a transaction on the partition is not
        asked about again.
        """
        h = self.h
        self.assertEqual(h.txn_produce("t", 0, self.pid, self.epoch, 0).error_code,
                         ErrorCode.invalid_txn_state)  # no transaction holds t-0 yet
        h.add(self.pid, self.epoch, ("t", 0))
        self.assertEqual(h.txn_produce("t", 0, self.pid, self.epoch, 0).error_code, ErrorCode.none)
        with mock.patch.object(h.wiring.coordinator, "verify_partitions_in_txn",
                               side_effect=AssertionError("asked again")):
            self.assertEqual(h.txn_produce("t", 0, self.pid, self.epoch, 2).error_code, ErrorCode.none)
        self.assertEqual(h.end(self.pid, self.epoch, False).error_code, ErrorCode.none)
        h.settle()
        # the batch the producer sent next, arriving after the abort's marker: it would start a
        # transaction on t-0 that no marker ends (simulation seed 151169)
        self.assertEqual(h.txn_produce("t", 0, self.pid, self.epoch, 4).error_code, ErrorCode.invalid_txn_state)
        self.assertEqual(h.txn_produce("t", 0, self.pid, self.epoch + 1, 0).error_code,
                         ErrorCode.invalid_producer_epoch)
        self.assertEqual(h.fetch("t", 0, 0).last_stable_offset, h.fetch("t", 0, 0).high_watermark)

    def test_a_marker_between_the_verification_and_the_append_refuses_the_batch(self) -> None:
        """The answer is for the transaction open when it was asked: a marker written before it came
        drops the producer's verification guard on the partition (Kafka's VerificationGuard)."""
        h = self.h
        h.add(self.pid, self.epoch, ("t", 0))
        answer: defer.Deferred = defer.Deferred()
        with mock.patch.object(h.wiring, "verify", return_value=answer):
            records = build_batch([(b"k", b"v")], producer_id=self.pid, producer_epoch=self.epoch,
                                  base_sequence=0, attributes=0x10)
            body = {"transactional_id": "tx", "acks": -1, "timeout": 1000,
                    "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]}
            frame = encode_request(0, 9, 1, "producer", body)
            result = h.apis.handle(parse_request_header(frame), frame)
        h.replica_manager.partitions[("t", 0)].log.producer_state.load_batch(
            unpack_header(encode_marker_batch(self.pid, self.epoch, 0, False, 0)))
        answer.callback({("t", 0): ErrorCode.none})
        response = decode_response(0, 9, self.successResultOf(result))[1]
        self.assertEqual(response.responses[0].partition_responses[0].error_code, ErrorCode.invalid_txn_state)

    def test_verification_asks_another_broker_with_add_partitions_to_txn_v4(self) -> None:
        """The coordinator on another broker gets AddPartitionsToTxn v4, verify only; its answer is
        read per partition, and no answer is COORDINATOR_NOT_AVAILABLE."""
        h = self.h
        h.add(self.pid, self.epoch, ("t", 1))
        sent = []

        def send(broker: int, api_key: int, body: dict, version: int | None = None) -> defer.Deferred:
            sent.append((broker, api_key, version, body))
            frame = encode_request(api_key, version, 7, "broker", body)
            return defer.maybeDeferred(h.apis.handle, parse_request_header(frame), frame).addCallback(
                lambda data: decode_response(api_key, version, data)[1])

        h.wiring.send = send
        with mock.patch.object(h.metadata, "leader", return_value=5):
            codes = self.successResultOf(h.wiring.verify("tx", self.pid, self.epoch, [("t", 0), ("t", 1)]))
            self.assertEqual(codes, {("t", 0): ErrorCode.invalid_txn_state, ("t", 1): ErrorCode.none})
            self.assertEqual([(b, k, v, body["transactions"][0]["verify_only"]) for b, k, v, body in sent],
                             [(5, 24, 4, True)])
            h.wiring.send = lambda *args, **kwargs: defer.fail(ConnectionRefusedError())
            codes = self.successResultOf(h.wiring.verify("tx", self.pid, self.epoch, [("t", 1)]))
            self.assertEqual(codes, {("t", 1): ErrorCode.coordinator_not_available})

    def test_client_control_batch_refused(self) -> None:
        from kafkatw.protocol.control import encode_marker_batch

        response = self.h.produce("t", 0, encode_marker_batch(self.pid, self.epoch, 0, True, 0))
        self.assertEqual(response.error_code, ErrorCode.invalid_record)

    def _latest(self, topic: str, partition: int, isolation: int) -> int:
        body = {"replica_id": -1, "isolation_level": isolation, "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "timestamp": -1, "current_leader_epoch": -1}]}]}
        return self.h.call(2, 4, body).topics[0].partitions[0].offset

    def _txn_offset_commit(self, group: str, offset: int, metadata: str = "", add: bool = True) -> Any:
        """AddOffsetsToTxn (unless not C{add}), then TxnOffsetCommit of C{t-0} at C{offset}: its response."""
        if add:
            self.assertEqual(self.h.call(25, 3, {"transactional_id": "tx", "producer_id": self.pid,
                                                 "producer_epoch": self.epoch, "group_id": group}).error_code,
                             ErrorCode.none)
        return self.h.call(28, 3, {"transactional_id": "tx", "group_id": group, "producer_id": self.pid,
                                   "producer_epoch": self.epoch, "generation_id": -1, "member_id": "",
                                   "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                                       {"partition_index": 0, "committed_offset": offset,
                                        "committed_leader_epoch": -1, "committed_metadata": metadata}]}]})

    def _fetch_offset(self, group: str, require_stable: bool) -> tuple[ErrorCode, int]:
        response = self.h.call(9, 7, {"group_id": group, "require_stable": require_stable,
                                      "topics": [{"name": "t", "partition_indexes": [0]}]})
        p = response.topics[0].partitions[0]
        return p.error_code, p.committed_offset

    def _committed(self, group: str) -> int:
        found = self.successResultOf(self.h.registry.get_committed_offsets(group, [("t", 0)]))
        committed = found.get(("t", 0))
        return committed.offset if committed is not None else -1


class WiringPartsTests(unittest.TestCase):
    def test_state_log_refuses_another_epoch_and_follows_leadership(self) -> None:
        """The state log appends only as leader at the coordinator epoch; losing leadership unloads."""
        h = TxnHarness(self)
        h.create_topic(TRANSACTION_STATE_TOPIC, 1, [0])
        epoch = h.metadata.leader_epoch(TRANSACTION_STATE_TOPIC, 0)
        self.assertEqual(h.wiring.coordinator.owned_partitions(), {0: epoch})
        failure = self.failureResultOf(h.wiring.log.append(0, epoch + 1, [(b"k", b"v")]))
        self.assertEqual(failure.value.error_code, ErrorCode.not_leader_or_follower)
        self.successResultOf(h.wiring.log.append(0, epoch, [(b"k", b"v")]))
        self.successResultOf(h.wiring.log.append(0, epoch, [(b"j", b"1"), (b"k", b"w")]))
        # each key's last record, in the order of those
        self.assertEqual(self.successResultOf(h.wiring.log.read(0)), [(b"j", b"1"), (b"k", b"w")])
        h.write_state(TRANSACTION_STATE_TOPIC, 0, 1, epoch + 1, [0, 1])  # broker 1 leads now
        self.assertEqual(h.wiring.coordinator.owned_partitions(), {})
        failure = self.failureResultOf(h.wiring.log.read(0))
        self.assertEqual(failure.value.error_code, ErrorCode.not_leader_or_follower)
        h.write_state(TRANSACTION_STATE_TOPIC, 0, 0, epoch + 2, [0, 1])  # and back
        self.assertEqual(h.wiring.coordinator.owned_partitions(), {0: epoch + 2})

    def test_group_offsets_marker_retried_until_zookeeper_answers(self) -> None:
        from kafkatw.broker.transaction_log import GroupOffsetsMarkerWriter

        class FlakyStore:
            def __init__(self) -> None:
                self.calls = 0

            def complete(self, producer_id: int, partition: int, committed: bool) -> defer.Deferred:
                self.calls += 1
                return defer.fail(RuntimeError("ZooKeeper away")) if self.calls < 3 else defer.succeed(None)

        class NoChannel:
            def write_markers(self, *args: Any) -> dict:
                return {}

        h = TxnHarness(self)
        store = FlakyStore()
        writer = GroupOffsetsMarkerWriter(NoChannel(), store, h.clock, retry_backoff_ms=100)
        out = writer.write_markers(1, 0, 0, True, [("__consumer_offsets", 7)])
        d = out[("__consumer_offsets", 7)]
        self.assertNoResult(d)
        h.clock.advance(0.1)
        self.assertNoResult(d)
        h.clock.advance(0.1)
        self.successResultOf(d)
        self.assertEqual(store.calls, 3)
        # a cancelled one stops retrying
        store.calls = -10
        d = writer.write_markers(1, 0, 0, True, [("__consumer_offsets", 7)])[("__consumer_offsets", 7)]
        d.cancel()
        self.failureResultOf(d, defer.CancelledError)
        h.clock.advance(1)
        self.assertEqual(store.calls, -9)


class LateBatchMachine(RuleBasedStateMachine):
    """
    One transactional producer on one broker (its own coordinator) against
    a network that may hold any Produce request and deliver it later, after
    the transaction it belonged to has ended (KIP-890's partition
    verification; simulation seed 151169).  The producer behaves: it adds a
    partition before sending to it, and numbers each partition's batches in
    order.  After every step, a partition has a transaction open for the
    producer only while the coordinator's transaction is open with that
    partition in it: a late batch never opens one that no marker will end.
    """

    def __init__(self) -> None:
        super().__init__()
        self.case = unittest.SynchronousTestCase()  # the harness's assertions and cleanups, run by teardown
        self.h = TxnHarness(self.case)
        self.h.create_topic("t", 2)
        self.h.create_topic(TRANSACTION_STATE_TOPIC, 1, [0])
        init = self.h.init()
        self.pid, self.epoch = init.producer_id, init.producer_epoch
        self.sequence = {0: 0, 1: 0}
        self.added: set[int] = set()
        self.held: list[tuple[int, int]] = []  # (partition, base sequence) of Produce requests on the wire

    def teardown(self) -> None:
        self.case.doCleanups()

    @rule(partition=st.integers(0, 1))
    def add_partition(self, partition: int) -> None:
        self.h.add(self.pid, self.epoch, ("t", partition))
        self.added.add(partition)

    @precondition(lambda self: bool(self.added))
    @rule(data=st.data(), hold=st.booleans())
    def send(self, data: st.DataObject, hold: bool) -> None:
        partition = data.draw(st.sampled_from(sorted(self.added)))
        batch = (partition, self.sequence[partition])
        self.sequence[partition] += 2
        if hold:
            self.held.append(batch)
        else:
            self.h.txn_produce("t", batch[0], self.pid, self.epoch, batch[1])

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def deliver_held(self, data: st.DataObject) -> None:
        partition, sequence = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        self.h.txn_produce("t", partition, self.pid, self.epoch, sequence)

    @precondition(lambda self: bool(self.added))
    @rule(commit=st.booleans())
    def end(self, commit: bool) -> None:
        self.h.end(self.pid, self.epoch, commit)
        self.h.settle()
        self.added.clear()

    @invariant()
    def open_only_inside_the_coordinators_transaction(self) -> None:
        meta = self.h.wiring.coordinator.transactions()["tx"]
        for partition in (0, 1):
            entry = self.h.replica_manager.partitions[("t", partition)].log.producer_state.get(self.pid)
            if entry is not None and entry.current_txn_first_offset is not None:
                assert meta.state == TransactionState.ONGOING and ("t", partition) in meta.topic_partitions, \
                    f"t-{partition} has a transaction open from {entry.current_txn_first_offset}, the coordinator" \
                    f" {meta.state.name} over {sorted(meta.topic_partitions)}"


class LateBatchTests(unittest.SynchronousTestCase):
    def test_a_late_batch_never_opens_a_transaction_outside_the_coordinators(self) -> None:
        """L{LateBatchMachine}: held Produce requests delivered after aborts and commits."""
        run_state_machine_as_test(LateBatchMachine, settings=settings(
            max_examples=150, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]))

    # as hypothesis marks its own state machine TestCase.runTest (tests/unit/test_log_model.py)
    test_a_late_batch_never_opens_a_transaction_outside_the_coordinators.is_hypothesis_test = True  # type: ignore
