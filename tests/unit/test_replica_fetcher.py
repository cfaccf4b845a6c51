"""
Unit tests of L{kafkatw.broker.replica_fetcher}: a follower's truncation by
leader epoch (the scenarios written out in KIP-101 and KIP-279) and its
fetching, driven through a fake inter-broker client whose answers the test
gives (kio-like responses built with C{SimpleNamespace}), a L{Clock}, and
real follower logs in a temporary directory.
"""

from __future__ import annotations

import shutil
import tempfile
from types import SimpleNamespace
from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.partition import FOLLOWER, Partition
from kafkatw.broker.replica_fetcher import ReplicaFetcherManager
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.errors import ErrorCode, KafkaStorageError
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.fetch import FetchRequestBody
from kafkatw.protocol.messages import encode_request
from kafkatw.storage.log_manager import LogManager

LEADER_ID = 0
FOLLOWER_ID = 1
BACKOFF_MS = 100


class FakeClient:
    """
    The inter-broker client: records each request and answers when the test
    says.  Not L{kafkatw.testing.FakeCluster}: the scenarios need a leader
    whose answers (epochs, end offsets, errors) the test writes, mid-fetch.
    """

    def __init__(self) -> None:
        self.brokers: dict[int, tuple[str, int]] = {}
        self.sent: list[tuple[int, int, dict, defer.Deferred]] = []

    def send(self, node_id: int, api_key: int, body: dict, timeout_ms: int | None = None) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.sent.append((node_id, api_key, body, d))
        return d


def epochs_response(leader_epoch: int, end_offset: int, error: ErrorCode = ErrorCode.none) -> Any:
    return SimpleNamespace(topics=[SimpleNamespace(topic="t", partitions=[SimpleNamespace(
        partition=0, error_code=int(error), leader_epoch=leader_epoch, end_offset=end_offset)])])


def fetch_response(records: bytes | None, high_watermark: int, error: ErrorCode = ErrorCode.none) -> Any:
    return SimpleNamespace(error_code=0, responses=[SimpleNamespace(topic="t", partitions=[SimpleNamespace(
        partition_index=0, error_code=int(error), high_watermark=high_watermark, records=records)])])


def batch(n: int, base_offset: int = 0, epoch: int = 0) -> bytes:
    return build_batch([(None, b"r%d" % (base_offset + i)) for i in range(n)], base_offset=base_offset,
                       partition_leader_epoch=epoch)


class FetcherHarness:
    """Broker 1 following C{t-0} from broker 0 at leader epoch C{leader_epoch}."""

    def __init__(self, testcase: unittest.TestCase, history: list[tuple[int, int]], high_watermark: int | None = None,
                 leader_epoch: int = 5, empty_epoch: int | None = None) -> None:
        """
        @param history: the follower's log before it follows: C{(epoch, records)}
            stretches, written one single-record batch at a time (truncation
            removes whole batches).
        @param empty_epoch: an epoch the follower then led without writing
            (it starts at the log end offset).
        """
        self.testcase = testcase
        directory = tempfile.mkdtemp(prefix="kafkatw-fetcher-test-")
        testcase.addCleanup(shutil.rmtree, directory, True)
        self.clock = Clock()
        self.config = BrokerConfig({"broker.id": FOLLOWER_ID, "log.dirs": directory,
                                    "replica.fetch.backoff.ms": BACKOFF_MS})
        self.log_manager = LogManager([directory], topic_log_config(self.config, {}), now_ms=lambda: 0)
        self.log_manager.load()
        testcase.addCleanup(self.log_manager.close)
        self.log = self.log_manager.get_or_create("t", 0)
        for epoch, count in history:
            for _ in range(count):
                self.log.append(build_batch([(None, b"x")]), epoch)
        if empty_epoch is not None:
            self.log.maybe_assign_epoch_start_offset(empty_epoch, self.log.log_end_offset)
        if high_watermark is not None:
            self.log.update_high_watermark(high_watermark)
        self.partition = Partition("t", 0, FOLLOWER_ID, self.log, lambda: 0, lambda p, isr, elr: defer.succeed(0),
                                   lambda p: None, lambda p: None)
        role = self.partition.apply_state([LEADER_ID, FOLLOWER_ID], LEADER_ID, leader_epoch,
                                          [LEADER_ID, FOLLOWER_ID], 1)
        testcase.assertEqual(role, FOLLOWER)
        self.client = FakeClient()
        self.manager = ReplicaFetcherManager(FOLLOWER_ID, self.config, self.client, self.clock,
                                             lambda b: ("127.0.0.1", 9092 + b),
                                             lambda p, records: p.log.append_as_follower(records))
        self.manager.follow(self.partition, LEADER_ID)
        testcase.addCleanup(self.stop)

    def stop(self) -> defer.Deferred:
        stopping = self.manager.stop()
        for _, _, _, d in self.client.sent:
            if not d.called:
                d.errback(ConnectionError("test over"))
        return stopping

    def request(self, api_key: int) -> dict:
        """The one request waiting for an answer, which must be of C{api_key}."""
        waiting = [(key, body) for _, key, body, d in self.client.sent if not d.called]
        self.testcase.assertEqual([key for key, _ in waiting], [api_key])
        return waiting[0][1]

    def answer(self, response: Any) -> None:
        [d] = [d for _, _, _, d in self.client.sent if not d.called]
        d.callback(response)

    def epoch_request(self) -> tuple[int, int]:
        """The pending OffsetForLeaderEpoch: (current leader epoch, requested epoch)."""
        body = self.request(23)
        self.testcase.assertEqual(body["replica_id"], FOLLOWER_ID)
        [p] = body["topics"][0]["partitions"]
        return p["current_leader_epoch"], p["leader_epoch"]

    def fetch_offset(self) -> int:
        """The pending Fetch's offset."""
        body = self.request(1)
        self.testcase.assertEqual(body["replica_id"], FOLLOWER_ID)
        [p] = body["topics"][0]["partitions"]
        return p["fetch_offset"]

    def epochs(self) -> list[tuple[int, int]]:
        return [tuple(e) for e in self.log.leader_epoch_cache.entries]


class TruncationTests(unittest.TestCase):
    def test_kip101_scenario_1_no_loss_from_high_watermark_truncation(self) -> None:
        """
        KIP-101 scenario 1: the follower holds m1, m2 but its high watermark
        says 1.  Truncating to the high watermark would lose m2 if it then
        became leader; asking the leader for the end of epoch 0 keeps it.
        """
        h = FetcherHarness(self, [(0, 2)], high_watermark=1)
        self.assertEqual(h.epoch_request(), (5, 0))
        h.answer(epochs_response(0, 2))
        self.assertEqual(h.log.log_end_offset, 2)
        self.assertEqual(h.fetch_offset(), 2)

    def test_kip101_scenario_2_divergent_tail_is_truncated(self) -> None:
        """
        KIP-101 scenario 2: after both replicas restart, the other one led
        epoch 1 from offset 1 and wrote m3 there; this follower's m2 at offset
        1 (epoch 0) diverges.  The leader says epoch 0 ended at 1: truncate
        there, although the high watermark is 2.
        """
        h = FetcherHarness(self, [(0, 2)], high_watermark=2)
        self.assertEqual(h.epoch_request(), (5, 0))
        h.answer(epochs_response(0, 1))
        self.assertEqual((h.log.log_end_offset, h.epochs()), (1, [(0, 0)]))
        self.assertEqual(h.fetch_offset(), 1)
        h.answer(fetch_response(batch(1, 1, epoch=1), 2))
        self.assertEqual((h.log.log_end_offset, h.epochs(), h.log.high_watermark), (2, [(0, 0), (1, 1)], 2))
        self.assertEqual(h.fetch_offset(), 2)  # and keeps fetching

    def test_a_truncation_that_fails_stops_fetching_the_partition(self) -> None:
        """
        The manager's C{truncate} raises C{KAFKA_STORAGE_ERROR} (its log dir
        went offline): the partition is no longer fetched, no Fetch is sent
        from a log that was not truncated, and the fetcher does not spin.
        """
        h = FetcherHarness(self, [(0, 2)], high_watermark=2)

        def failing(partition: Any, offset: int, fully: bool) -> None:
            raise KafkaStorageError("t-0: [Errno 5] Input/output error")

        h.manager.truncate = failing
        self.assertEqual(h.epoch_request(), (5, 0))
        h.answer(epochs_response(0, 1))
        self.assertEqual(h.log.log_end_offset, 2)  # not truncated, and not fetched from
        h.clock.advance(BACKOFF_MS / 1000.0 * 3)
        self.assertEqual([key for _, key, _, d in h.client.sent if not d.called], [])

    def test_kip279_leader_answers_an_older_epoch_the_follower_has(self) -> None:
        """
        KIP-279: the follower (an old leader) wrote offsets 2-3 at epoch 1
        that nobody has; the new leader never knew epoch 1 and answers epoch 0,
        which ended at 3 in its log but at 2 in the follower's: truncate to 2.
        """
        h = FetcherHarness(self, [(0, 2), (1, 2)])
        self.assertEqual(h.epoch_request(), (5, 1))
        h.answer(epochs_response(0, 3))
        self.assertEqual((h.log.log_end_offset, h.epochs()), (2, [(0, 0)]))
        self.assertEqual(h.fetch_offset(), 2)

    def test_kip279_follower_lacks_the_epoch_the_leader_answers(self) -> None:
        """
        KIP-279's fast leader fail-over: the follower led epoch 2 (offsets
        2-3, never replicated); the leader led epoch 1 from offset 2 and
        answers "epoch 1 ended at 4", an epoch the follower never saw.  The
        follower truncates to its end of the epoch below (2) and asks again,
        instead of keeping its divergent offsets 2-3 below 4.
        """
        h = FetcherHarness(self, [(0, 2), (2, 2)])
        self.assertEqual(h.epoch_request(), (5, 2))
        h.answer(epochs_response(1, 4))
        self.assertEqual((h.log.log_end_offset, h.epochs()), (2, [(0, 0)]))
        self.assertEqual(h.epoch_request(), (5, 0))  # asks again with its new latest epoch
        h.answer(epochs_response(0, 2))
        self.assertEqual(h.log.log_end_offset, 2)
        self.assertEqual(h.fetch_offset(), 2)
        h.answer(fetch_response(batch(2, 2, epoch=1) + batch(1, 4, epoch=3), 5))
        self.assertEqual((h.log.log_end_offset, h.epochs()), (5, [(0, 0), (1, 2), (3, 4)]))

    def test_kip279_an_epoch_the_follower_led_without_writing_goes(self) -> None:
        """
        The follower led epoch 2 from offset 2 and wrote nothing in it (the
        epoch starts at its log end offset); the leader never knew epoch 2
        and answers "epoch 1 ended at 3", an epoch the follower lacks.  Its
        end of the epoch below is its log end offset (2): nothing to cut,
        but epoch 2 goes from its cache, so that it asks about epoch 0 next
        rather than about epoch 2 for ever (the simulation's seed 145).
        """
        h = FetcherHarness(self, [(0, 2)], empty_epoch=2)
        self.assertEqual(h.epochs(), [(0, 0), (2, 2)])
        self.assertEqual(h.epoch_request(), (5, 2))
        h.answer(epochs_response(1, 3))
        self.assertEqual((h.log.log_end_offset, h.epochs()), (2, [(0, 0)]))
        self.assertEqual(h.epoch_request(), (5, 0))
        h.answer(epochs_response(0, 2))
        self.assertEqual(h.fetch_offset(), 2)

    def test_leader_end_offset_beyond_the_follower_truncates_nothing(self) -> None:
        h = FetcherHarness(self, [(0, 2)])
        h.epoch_request()
        h.answer(epochs_response(0, 7))
        self.assertEqual(h.log.log_end_offset, 2)
        self.assertEqual(h.fetch_offset(), 2)

    def test_leader_without_the_epoch_falls_back_to_the_high_watermark(self) -> None:
        h = FetcherHarness(self, [(0, 3)], high_watermark=1)
        h.epoch_request()
        h.answer(epochs_response(-1, -1))
        self.assertEqual(h.log.log_end_offset, 1)
        self.assertEqual(h.fetch_offset(), 1)

    def test_empty_follower_asks_with_no_epoch(self) -> None:
        h = FetcherHarness(self, [])
        self.assertEqual(h.epoch_request(), (5, -1))
        h.answer(epochs_response(-1, -1))
        self.assertEqual(h.fetch_offset(), 0)
        h.answer(fetch_response(batch(3, 0, epoch=4), 3))
        self.assertEqual((h.log.log_end_offset, h.epochs(), h.log.high_watermark), (3, [(4, 0)], 3))

    def test_fenced_answer_backs_off_and_asks_again(self) -> None:
        h = FetcherHarness(self, [(0, 2)])
        h.epoch_request()
        h.answer(epochs_response(-1, -1, ErrorCode.fenced_leader_epoch))
        self.assertEqual([key for _, key, _, d in h.client.sent if not d.called], [])
        self.assertEqual(h.log.log_end_offset, 2)
        h.clock.advance(BACKOFF_MS / 1000.0)
        self.assertEqual(h.epoch_request(), (5, 0))


class FetchTests(unittest.TestCase):
    def test_follower_high_watermark_is_bounded_by_its_log_end_offset(self) -> None:
        h = FetcherHarness(self, [])
        h.epoch_request()
        h.answer(epochs_response(-1, -1))
        h.fetch_offset()
        h.answer(fetch_response(batch(2, 0, epoch=5), 10))
        self.assertEqual((h.log.log_end_offset, h.log.high_watermark), (2, 2))
        self.assertEqual(h.manager.max_lag, 8)
        body = h.request(1)
        self.assertEqual((body["replica_id"], body["topics"][0]["partitions"][0]["current_leader_epoch"]),
                         (FOLLOWER_ID, 5))

    def test_next_fetch_goes_out_in_the_turn_of_the_append(self) -> None:
        """
        The fetch after an append is sent in the same reactor turn (no timer,
        no clock advance), from the new log end offset; its body is encoded by
        hand (L{FetchRequestBody}, kio's bytes) as the consumer's is (issue 32).
        """
        h = FetcherHarness(self, [])
        h.epoch_request()
        h.answer(epochs_response(-1, -1))
        self.assertEqual(h.fetch_offset(), 0)
        h.answer(fetch_response(batch(3, 0, epoch=5), 3))
        self.assertEqual(h.log.log_end_offset, 3)
        self.assertEqual(h.fetch_offset(), 3)
        self.assertEqual(h.clock.seconds(), 0)
        body = h.request(1)
        self.assertIsInstance(body, FetchRequestBody)
        self.assertEqual(encode_request(1, 12, 7, "f", body), encode_request(1, 12, 7, "f", dict(body)))

    def test_offset_out_of_range_truncates_by_epoch_again(self) -> None:
        h = FetcherHarness(self, [(0, 2)])
        h.epoch_request()
        h.answer(epochs_response(0, 2))
        h.fetch_offset()
        h.answer(fetch_response(None, -1, ErrorCode.offset_out_of_range))
        h.clock.advance(BACKOFF_MS / 1000.0)
        # the leader's log starts below our log end offset: ours is ahead, truncated by epoch again
        h.request(2)
        h.answer(SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[SimpleNamespace(
            partition_index=0, error_code=0, offset=0)])]))
        self.assertEqual(h.epoch_request(), (5, 0))

    def test_unfollow_stops_the_fetcher(self) -> None:
        h = FetcherHarness(self, [(0, 1)])
        h.epoch_request()
        h.manager.unfollow(h.partition)
        self.assertEqual(h.manager.fetchers, {})


class ThrottleTests(unittest.TestCase):
    """The follower replication throttle (reassign-partitions --throttle)."""

    def test_quota_is_a_token_bucket(self) -> None:
        from kafkatw.broker.replica_fetcher import ReplicationQuota

        quota = ReplicationQuota(1000, 0.0)
        self.assertEqual(quota.wait_s(0.0), 0.0)
        quota.record(3000, 0.0)
        self.assertAlmostEqual(quota.wait_s(0.0), 2.001)
        self.assertAlmostEqual(quota.wait_s(1.0), 1.001)
        self.assertEqual(quota.wait_s(2.5), 0.0)

    def test_throttled_partition_waits_for_the_quota(self) -> None:
        h = FetcherHarness(self, [])
        h.manager.throttled = lambda topic, partition: True
        h.manager.set_throttle(100)
        h.epoch_request()
        h.answer(epochs_response(-1, -1))
        body = h.request(1)
        self.assertEqual(body["topics"][0]["partitions"][0]["partition_max_bytes"], 100)
        data = batch(20, 0, epoch=5)  # a first batch is sent whole even above the limit (KIP-74)
        self.assertGreater(len(data), 100)
        h.answer(fetch_response(data, 20))
        # the bucket is overdrawn: no fetch until it refills
        self.assertEqual([key for _, key, _, d in h.client.sent if not d.called], [])
        h.clock.advance((len(data) - 100) / 100.0 + 0.01)
        self.assertEqual(h.fetch_offset(), 20)

    def test_unthrottled_partitions_are_not_limited(self) -> None:
        h = FetcherHarness(self, [])
        h.manager.set_throttle(1000)  # but the partition is not being reassigned
        h.epoch_request()
        h.answer(epochs_response(-1, -1))
        body = h.request(1)
        self.assertEqual(body["topics"][0]["partitions"][0]["partition_max_bytes"],
                         h.config["replica.fetch.max.bytes"])
        h.answer(fetch_response(batch(20, 0, epoch=5), 20))
        self.assertEqual(h.fetch_offset(), 20)
        h.manager.set_throttle(None)
        self.assertIsNone(h.manager.quota)


class LogStartOffsetTests(unittest.TestCase):
    def test_follower_applies_the_leaders_log_start_offset(self) -> None:
        """DeleteRecords on the leader: the follower's log start follows, bounded by its high watermark."""
        h = FetcherHarness(self, [])
        h.epoch_request()
        h.answer(epochs_response(-1, -1))
        h.fetch_offset()
        response = fetch_response(batch(6, 0, epoch=5), 4)
        response.responses[0].partitions[0].log_start_offset = 5
        h.answer(response)
        self.assertEqual((h.log.log_start_offset, h.log.high_watermark), (4, 4))
        self.assertEqual(h.request(1)["topics"][0]["partitions"][0]["log_start_offset"], 4)
        response = fetch_response(None, 6)
        response.responses[0].partitions[0].log_start_offset = 5
        h.answer(response)
        self.assertEqual(h.log.log_start_offset, 5)
