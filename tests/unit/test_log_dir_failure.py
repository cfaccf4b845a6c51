"""
Log directory failure (KIP-112): an I/O error on a log dir takes the dir
offline, its partitions stop being served here at once (KAFKA_STORAGE_ERROR,
never a hang), the broker tells the controller, which moves their
leaderships and drops the broker from their ISRs; the other log dirs keep
serving; a broker whose every log dir failed stops with one line and exit
status 1; a restart recovers what was acknowledged.

The faults are injected through each log dir's
L{kafkatw.storage.log_dir_failure.LogDirFiles} (and, for a vanished dir, by
removing it): deterministic, one dir at a time.  Real logs in temporary
directories, an in-memory ZooKeeper, a MemoryReactorClock; no sleeps.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import struct
import sys
import tempfile
from typing import Any

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial import unittest

from kafkatw import tap
from kafkatw.broker.admin import AdminManager
from kafkatw.broker.apis import KafkaApis
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache
from kafkatw.broker.metrics import BrokerCollector
from kafkatw.broker.network import KafkaConnection
from kafkatw.broker.replica_manager import ReplicaManager
from kafkatw.broker.server import KafkaServer
from kafkatw.cli.log_dirs import format_log_dirs
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.errors import ErrorCode, KafkaStorageError
from kafkatw.protocol.batch import build_batch
from kafkatw.storage.log_dir_failure import LogDirFiles, LogDirsFailedError
from kafkatw.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import (
    BROKER_IDS_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    PartitionState,
    decode_offline_replicas,
)

from .test_broker import BrokerHarness, _frame
from .test_controller import ControllerHarness
from .test_tap import _FakeTwistdOptions, parse


def records(n: int = 1, value: bytes = b"v") -> bytes:
    return build_batch([(None, value)] * n, timestamp_ms=1_700_000_000_000)


class TwoDirBroker(BrokerHarness):
    """
    L{BrokerHarness} with two log dirs, C{a} and C{b}: broker 0 leads C{t-0}
    (placed in C{a}) and C{t-1} (placed in C{b}), both assigned [0, 1], ISR
    [0, 1] (broker 1 is a follower that fetches only when a test says so).
    """

    def __init__(self, testcase: unittest.TestCase, **overrides: object) -> None:
        self.testcase = testcase
        self._correlation = 0
        self.directory = tempfile.mkdtemp(prefix="kafkatw-log-dir-failure-")
        testcase.addCleanup(shutil.rmtree, self.directory, True)
        self.dir_a, self.dir_b = (os.path.join(self.directory, name) for name in ("a", "b"))
        self.clock = MemoryReactorClock()
        self.config = BrokerConfig({"broker.id": 0, "log.dirs": f"{self.dir_a},{self.dir_b}", **overrides})
        self.zookeeper = FakeZooKeeperClient()
        testcase.successResultOf(self.zookeeper.start())
        self.registry = Registry(self.zookeeper)
        self.metadata = MetadataCache(0)
        self.metadata.set_brokers({0: BrokerEndpoint(0, "127.0.0.1", 9092), 1: BrokerEndpoint(1, "127.0.0.1", 9093)})
        now_ms = lambda: int(self.clock.seconds() * 1000)  # noqa: E731
        self.log_manager = LogManager([self.dir_a, self.dir_b], topic_log_config(self.config, {}), now_ms=now_ms)
        self.log_manager.load()
        testcase.addCleanup(self.log_manager.close)
        self.replica_manager = ReplicaManager(
            0, self.log_manager, self.metadata, self.clock, lambda t: topic_log_config(self.config, {}),
            write_isr=self.registry.set_partition_state, reload_state=self.reload_state, now_ms=now_ms,
        )
        self.failures: list[tuple[str, str]] = []
        listeners = getattr(self.replica_manager, "log_dir_failure_listeners", [])  # (getattr: run on old code too)
        listeners.append(lambda d, m: self.failures.append((d, m)))
        self.admin = AdminManager(self.config, self.registry, self.metadata, on_topic=self._topic_added)
        self.apis = KafkaApis(self.config, self.replica_manager, self.metadata, self.admin, self.clock, now_ms)
        self.create_topic("t", 2, replicas=[0, 1])
        testcase.assertEqual(self.log_manager.log_dir_of("t", 0), self.dir_a)
        testcase.assertEqual(self.log_manager.log_dir_of("t", 1), self.dir_b)

    def files(self, log_dir: str) -> LogDirFiles:
        return self.log_manager.files[log_dir]

    def produce_all(self, partition: int, timeout_ms: int = 30000) -> defer.Deferred:
        body = {"acks": -1, "timeout": timeout_ms, "topic_data": [
            {"name": "t", "partition_data": [{"index": partition, "records": records()}]}]}
        d = self.request(0, 9, body)
        self.testcase.assertIsInstance(d, defer.Deferred)
        return d

    def answer(self, d: defer.Deferred) -> Any:
        return self.decode(0, 9, self.testcase.successResultOf(d)).responses[0].partition_responses[0]

    def list_offset(self, partition: int, replica_id: int = -1) -> Any:
        body = {"replica_id": replica_id, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                          "timestamp": -1}]}]}
        return self.call(2, 7, body).topics[0].partitions[0]


class LogDirFilesTests(unittest.TestCase):
    def test_an_injected_fault_hits_only_its_dir_and_only_as_often_as_asked(self) -> None:
        h = TwoDirBroker(self)
        h.files(h.dir_b).fail("writev", errno.ENOSPC, times=2)
        log_a, log_b = h.log_manager.get("t", 0), h.log_manager.get("t", 1)
        log_a.append(records(), 0)
        for _ in range(2):
            with self.assertRaises(KafkaStorageError) as caught:
                log_b.append(records(), 0)
            self.assertIn("No space left on device", str(caught.exception))
        log_b.append(records(), 0)  # the third call is os.writev again
        self.assertEqual((log_a.log_end_offset, log_b.log_end_offset), (1, 1))
        h.files(h.dir_a).fail("fsync", errno.EIO, times=None)
        for _ in range(3):
            self.assertRaises(KafkaStorageError, log_a.flush)
        h.files(h.dir_a).heal()
        log_a.flush()
        self.assertRaises(ValueError, h.files(h.dir_a).fail, "unlink")


class ServingTests(unittest.TestCase):
    """What clients see: KAFKA_STORAGE_ERROR for the failed dir's partitions, at once; the other dir serves."""

    def test_a_write_error_takes_the_dir_offline_at_once(self) -> None:
        h = TwoDirBroker(self)
        self.assertEqual(h.produce("t", 0, records()).error_code, ErrorCode.none)
        h.files(h.dir_a).fail("writev", errno.ENOSPC)
        answer = h.produce("t", 0, records())
        self.assertEqual(answer.error_code, ErrorCode.kafka_storage_error)
        self.assertEqual(h.log_manager.offline_log_dirs.keys(), {h.dir_a})
        self.assertIn("No space left on device", h.log_manager.offline_log_dirs[h.dir_a])
        self.assertEqual(h.failures, [(h.dir_a, h.log_manager.offline_log_dirs[h.dir_a])])
        # The disk answers again, but the dir stays offline: nothing more is written there.
        self.assertIs(h.files(h.dir_a).writev, os.writev)
        segment = os.path.join(h.dir_a, "t-0", "00000000000000000000.log")
        size = os.path.getsize(segment)
        for acks in (1, -1):
            body = {"acks": acks, "timeout": 1000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": records()}]}]}
            result = h.request(0, 9, body)
            self.assertNotIsInstance(result, defer.Deferred)  # answered, not parked in the purgatory
            self.assertEqual(h.decode(0, 9, result).responses[0].partition_responses[0].error_code,
                             ErrorCode.kafka_storage_error)
        self.assertEqual(os.path.getsize(segment), size)
        self.assertEqual(h.fetch("t", 0, 0).error_code, ErrorCode.kafka_storage_error)
        self.assertEqual(h.fetch("t", 0, 0, replica_id=1).error_code, ErrorCode.kafka_storage_error)
        self.assertEqual(h.list_offset(0).error_code, ErrorCode.kafka_storage_error)
        # the log end asked by the controller's unclean recovery (the debugging replica id)
        self.assertEqual(h.list_offset(0, replica_id=-2).error_code, ErrorCode.kafka_storage_error)
        # the other log dir keeps serving
        self.assertEqual(h.produce("t", 1, records()).error_code, ErrorCode.none)
        self.assertEqual(h.fetch("t", 1, 0, replica_id=1).error_code, ErrorCode.none)
        self.assertEqual(h.fetch("t", 1, 1, replica_id=1).error_code, ErrorCode.none)  # the follower has it
        fetched = h.fetch("t", 1, 0)
        self.assertEqual((fetched.error_code, fetched.high_watermark), (ErrorCode.none, 1))
        self.assertTrue(fetched.records)
        self.assertEqual(h.list_offset(1).offset, 1)
        self.assertEqual(sorted(h.replica_manager.offline_partitions), [("t", 0)])
        self.assertEqual(sorted(h.replica_manager.partitions), [("t", 1)])

    def test_waiting_requests_are_answered_not_left_to_time_out(self) -> None:
        h = TwoDirBroker(self)
        waiting_0, waiting_1 = h.produce_all(0), h.produce_all(1)
        consumer_fetch = h.request(1, 12, h.fetch_request("t", 0, 0, max_wait_ms=30000))  # nothing committed yet
        for d in (waiting_0, waiting_1, consumer_fetch):
            self.assertNoResult(d)
        h.files(h.dir_a).fail("writev", errno.EIO)
        self.assertEqual(h.produce("t", 0, records()).error_code, ErrorCode.kafka_storage_error)
        # no time passes: the acks=all produce and the fetches on t-0 are answered now
        self.assertEqual(h.answer(waiting_0).error_code, ErrorCode.kafka_storage_error)
        p = h.decode(1, 12, self.successResultOf(consumer_fetch)).responses[0].partitions[0]
        self.assertEqual(p.error_code, ErrorCode.kafka_storage_error)
        self.assertNoResult(waiting_1)  # t-1 (the other dir) waits for its follower as before
        self.assertEqual(h.fetch("t", 1, 1, replica_id=1).error_code, ErrorCode.none)
        self.assertEqual(h.answer(waiting_1).error_code, ErrorCode.none)
        self.assertEqual(h.replica_manager.produce_purgatory_size, 0)

    def test_a_produce_run_whose_write_fails(self) -> None:
        """
        Produce requests read together (one write per partition): a failed
        write answers every request of the dir's partitions with the error,
        and the next run too, though the disk answers again.
        """
        h = TwoDirBroker(self)
        connection = KafkaConnection(h.apis, h.config["socket.request.max.bytes"])
        transport = StringTransport()
        connection.makeConnection(transport)

        def run(first_id: int) -> list[tuple[int, int, int]]:
            frames = [_frame(_encode_produce(first_id + i, i % 2)) for i in range(6)]
            transport.clear()
            connection.dataReceived(b"".join(frames))  # one run: one write per partition
            answers, data = [], transport.value()
            while data:
                (size,) = struct.unpack_from(">i", data)
                frame, data = data[4:4 + size], data[4 + size:]
                p = _decode_produce(frame)
                answers.append((struct.unpack_from(">i", frame)[0], p.index, p.error_code))
            return answers

        h.files(h.dir_a).fail("writev", errno.ENOSPC)
        storage, ok = int(ErrorCode.kafka_storage_error), int(ErrorCode.none)
        expected = [(i, i % 2, storage if i % 2 == 0 else ok) for i in range(6)]
        self.assertEqual(run(0), expected)
        self.assertEqual(run(10), [(10 + i, p, code) for i, p, code in expected])
        self.assertEqual(h.log_manager.get("t", 1).log_end_offset, 6)
        self.assertIsNone(h.log_manager.get("t", 0))

    def test_a_read_error_takes_the_dir_offline(self) -> None:
        h = TwoDirBroker(self)
        for p in (0, 1):
            h.produce("t", p, records())
            h.fetch("t", p, 1, replica_id=1)  # the follower has it: the high watermark is 1

        def eio(*args: Any, **kwargs: Any) -> Any:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        h.log_manager.get("t", 1).read = eio  # the disk of b fails under a consumer's fetch
        self.assertEqual(h.fetch("t", 1, 0).error_code, ErrorCode.kafka_storage_error)
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.dir_b])
        self.assertEqual(h.produce("t", 1, records()).error_code, ErrorCode.kafka_storage_error)
        h.log_manager.get("t", 0).offset_for_timestamp = eio  # and a ListOffsets by time, on a's disk
        body = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": 5}]}]}
        self.assertEqual(h.call(2, 7, body).topics[0].partitions[0].error_code, ErrorCode.kafka_storage_error)
        self.assertEqual(sorted(h.log_manager.offline_log_dirs), [h.dir_a, h.dir_b])

    def test_a_vanished_dir_goes_offline_on_its_next_segment(self) -> None:
        h = TwoDirBroker(self, **{"log.segment.bytes": 1024})
        for _ in range(4):
            self.assertEqual(h.produce("t", 1, records(1, b"x" * 300)).error_code, ErrorCode.none)
        shutil.rmtree(h.dir_b)
        # the active segment's file is open still: the next roll fails to create a segment
        codes = [h.produce("t", 1, records(1, b"x" * 300)).error_code for _ in range(3)]
        self.assertEqual(codes, [ErrorCode.kafka_storage_error] * 3)
        self.assertIn(h.dir_b, h.log_manager.offline_log_dirs)
        self.assertEqual(h.produce("t", 0, records()).error_code, ErrorCode.none)

    def test_a_failed_flush_takes_the_dir_offline(self) -> None:
        h = TwoDirBroker(self, **{"log.flush.interval.ms": 1000})
        h.produce("t", 0, records())
        h.produce("t", 1, records())
        h.files(h.dir_b).fail("fsync", errno.EIO)
        h.clock.advance(2)
        self.assertEqual(h.log_manager.flush_dirty(h.log_manager.now_ms()), 1)  # t-0's; t-1's failed
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.dir_b])
        self.assertEqual(h.produce("t", 1, records()).error_code, ErrorCode.kafka_storage_error)

    def test_a_failed_checkpoint_takes_its_dir_offline_and_writes_the_others(self) -> None:
        h = TwoDirBroker(self)
        h.produce("t", 0, records())
        h.produce("t", 1, records())
        shutil.rmtree(h.dir_a)  # the dir vanished (its disk was pulled)
        write = h.log_manager.high_watermark_checkpoints()
        failed = self.assertRaises(LogDirsFailedError, write)
        self.assertEqual(list(failed.failures), [h.dir_a])
        self.assertTrue(os.path.exists(os.path.join(h.dir_b, "replication-offset-checkpoint")))
        h.log_manager.report(failed)  # what the broker does with it, on the reactor thread
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.dir_a])
        self.assertEqual(h.fetch("t", 0, 0).error_code, ErrorCode.kafka_storage_error)

    def test_a_follower_append_that_fails_stops_following(self) -> None:
        h = TwoDirBroker(self)
        unfollowed = []
        h.replica_manager.fetcher_manager = _Fetchers(unfollowed)
        h.write_state("t", 0, 1, 1, [1, 0])  # broker 1 leads t-0 now; broker 0 follows it
        p = h.replica_manager.partitions[("t", 0)]
        h.files(h.dir_a).fail("write", errno.EIO)
        with self.assertRaises(KafkaStorageError):
            h.replica_manager.append_as_follower(p, records())
        self.assertEqual(unfollowed, [("t", 0)])
        self.assertEqual(h.replica_manager.offline_partitions, {("t", 0): h.dir_a})
        h.write_state("t", 0, 0, 2, [0, 1])  # a state naming it leader is ignored: the replica is offline
        self.assertNotIn(("t", 0), h.replica_manager.partitions)
        self.assertEqual(h.produce("t", 0, records()).error_code, ErrorCode.kafka_storage_error)


    def test_a_follower_truncation_that_fails_takes_the_dir_offline(self) -> None:
        """Kafka's maybeHandleIOException around truncation: the fetcher's retry would fail again."""
        h = TwoDirBroker(self)
        for _ in range(3):
            self.assertEqual(h.produce("t", 0, records()).error_code, ErrorCode.none)
        unfollowed = []
        h.replica_manager.fetcher_manager = _Fetchers(unfollowed)
        h.write_state("t", 0, 1, 1, [1, 0])  # broker 1 leads t-0 now; broker 0 follows it
        p = h.replica_manager.partitions[("t", 0)]
        h.files(h.dir_a).fail("ftruncate", errno.EIO)
        with self.assertRaises(KafkaStorageError):
            h.replica_manager.truncate_as_follower(p, 1)
        self.assertEqual(unfollowed, [("t", 0)])
        self.assertEqual(h.replica_manager.offline_partitions, {("t", 0): h.dir_a})
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.dir_a])
        self.assertEqual(h.produce("t", 1, records()).error_code, ErrorCode.none)  # the other dir serves

class CleanerTests(unittest.TestCase):
    def test_an_io_error_of_the_log_cleaner_takes_the_dir_offline(self) -> None:
        from kafkatw.broker.log_cleaner import LogCleaner

        from .test_log_cleaner import CLEANER_CONFIG, NOW, Clock

        directory = tempfile.mkdtemp(prefix="kafkatw-log-dir-failure-")
        self.addCleanup(shutil.rmtree, directory, True)
        clock = Clock()
        manager = LogManager([directory], {"cleanup.policy": "compact", "segment.bytes": 700}, now_ms=clock)
        manager.load()
        self.addCleanup(manager.close)
        log = manager.get_or_create("t", 0)
        for i in range(120):
            log.append(build_batch([(b"k%d" % (i % 3), b"v%d" % i)], timestamp_ms=NOW), 0)
        log.update_high_watermark(log.log_end_offset)
        reactor = MemoryReactorClock()
        service = LogCleaner(manager, {**CLEANER_CONFIG, "log.cleaner.backoff.ms": 1000}, reactor, clock,
                             in_thread=lambda f, *a: defer.maybeDeferred(f, *a), from_thread=lambda f, *a: f(*a))

        def full(fd: int, chunks: list) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        service.cleaner._write = full  # type: ignore[method-assign]  # the cleaned segment's write
        service.start()
        reactor.advance(0)
        self.assertEqual(service.passes, 0)
        self.assertEqual(list(manager.offline_log_dirs), [directory])
        self.assertIn("No space left on device", manager.offline_log_dirs[directory])
        self.assertIsNone(manager.get("t", 0))
        self.successResultOf(defer.Deferred.fromCoroutine(service.stop()))


class _Fetchers:
    def __init__(self, unfollowed: list) -> None:
        self.unfollowed = unfollowed

    def follow(self, partition: Any, leader: int) -> None:
        pass

    def unfollow(self, partition: Any) -> None:
        self.unfollowed.append((partition.topic, partition.partition))


def _encode_produce(correlation_id: int, partition: int) -> bytes:
    from kafkatw.protocol.messages import encode_request

    return encode_request(0, 9, correlation_id, "c", {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": partition, "records": records()}]}]})


def _decode_produce(frame: bytes) -> Any:
    from kafkatw.protocol.messages import decode_response

    return decode_response(0, 9, frame)[1].responses[0].partition_responses[0]


class DescribeTests(unittest.TestCase):
    def test_describe_log_dirs_and_the_tool_show_the_offline_dir(self) -> None:
        h = TwoDirBroker(self)
        h.produce("t", 1, records())
        h.files(h.dir_a).fail("writev", errno.ENOSPC)
        h.produce("t", 0, records())
        response = h.call(35, 4, {"topics": None})
        self.assertEqual(response.error_code, ErrorCode.none)
        by_dir = {r.log_dir: r for r in response.results}
        self.assertEqual(list(by_dir), [h.dir_a, h.dir_b])
        a, b = by_dir[h.dir_a], by_dir[h.dir_b]
        self.assertEqual((a.error_code, a.topics, a.total_bytes, a.usable_bytes),
                         (ErrorCode.kafka_storage_error, (), -1, -1))
        self.assertEqual(b.error_code, ErrorCode.none)
        self.assertEqual([(t.name, [p.partition_index for p in t.partitions]) for t in b.topics], [("t", [1])])
        shown = json.loads(format_log_dirs({0: list(response.results)}, set()))
        self.assertEqual(shown["brokers"][0]["logDirs"][0],
                         {"logDir": h.dir_a, "error": "org.apache.kafka.common.errors.KafkaStorageException",
                          "partitions": []})
        self.assertIsNone(shown["brokers"][0]["logDirs"][1]["error"])

    def test_metrics_count_offline_log_dirs(self) -> None:
        h = TwoDirBroker(self)

        def offline_count() -> float:
            server = type("Server", (), {"apis": h.apis, "log_manager": h.log_manager, "replica_manager": None,
                                         "controller": None, "fetcher_manager": None})()
            [family] = [f for f in BrokerCollector(server).collect()
                        if f.name == "kafka_log_logmanager_offlinelogdirectorycount"]
            return family.samples[0].value

        self.assertEqual(offline_count(), 0)
        h.files(h.dir_b).fail("writev", errno.EIO)
        h.produce("t", 1, records())
        self.assertEqual(offline_count(), 1)


class RestartTests(unittest.TestCase):
    def test_the_failed_dir_is_recovered_at_the_next_start_with_everything_acknowledged(self) -> None:
        h = TwoDirBroker(self)
        acknowledged = [h.produce("t", 0, records(1, b"r%d" % i)) for i in range(5)]
        self.assertEqual([a.base_offset for a in acknowledged], [0, 1, 2, 3, 4])
        h.files(h.dir_a).fail("writev", errno.ENOSPC)
        self.assertEqual(h.produce("t", 0, records(1, b"lost")).error_code, ErrorCode.kafka_storage_error)
        h.produce("t", 1, records())
        h.log_manager.close()
        # no clean-shutdown marker in the failed dir: its logs are recovered from disk
        self.assertFalse(os.path.exists(os.path.join(h.dir_a, CLEAN_SHUTDOWN_FILE)))
        self.assertTrue(os.path.exists(os.path.join(h.dir_b, CLEAN_SHUTDOWN_FILE)))
        again = LogManager([h.dir_a, h.dir_b], topic_log_config(h.config, {}), now_ms=lambda: 0)
        again.load()
        self.addCleanup(again.close)
        log = again.get("t", 0)
        self.assertGreater(log.recovered_segments, 0)
        self.assertEqual(log.log_end_offset, 5)
        from kafkatw.protocol.records import decode_batches
        data = b"".join(os.pread(r.fileno, r.length, r.position) for r in log.read(0, 1 << 20))
        self.assertEqual([r.value for b in decode_batches(data) for r in b.records], [b"r%d" % i for i in range(5)])
        self.assertEqual(again.offline_log_dirs, {})


def break_log_dir(log_dir: str, topic: str, partition: int) -> None:
    """A real I/O error at the next load: the partition's first segment file is a directory (EISDIR)."""
    path = os.path.join(log_dir, f"{topic}-{partition}")
    for name in os.listdir(path):
        if name.endswith(".log"):
            os.unlink(os.path.join(path, name))
            os.mkdir(os.path.join(path, name))


class LoadTests(unittest.TestCase):
    """A log dir whose loading fails goes offline; the broker's other log dirs load (Kafka's loadLogs)."""

    def written(self) -> tuple[str, str]:
        h = TwoDirBroker(self)
        for partition in (0, 1):
            self.assertEqual(h.produce("t", partition, records(3)).error_code, ErrorCode.none)
        h.log_manager.close()
        return h.dir_a, h.dir_b

    def test_the_other_log_dirs_load_when_one_fails(self) -> None:
        dir_a, dir_b = self.written()
        break_log_dir(dir_a, "t", 0)
        again = LogManager([dir_a, dir_b], {}, now_ms=lambda: 0)
        again.load()
        self.addCleanup(again.close)
        self.assertEqual(list(again.offline_log_dirs), [dir_a])
        self.assertIn("Is a directory", again.offline_log_dirs[dir_a])
        self.assertEqual(again.offline_partitions, {dir_a: [("t", 0)]})
        self.assertIsNone(again.get("t", 0))
        self.assertEqual(again.get("t", 1).log_end_offset, 3)
        self.assertEqual(again.live_log_dirs, [dir_b])

    def test_every_log_dir_failing_to_load_is_an_error(self) -> None:
        dir_a, dir_b = self.written()
        break_log_dir(dir_a, "t", 0)
        break_log_dir(dir_b, "t", 1)
        again = LogManager([dir_a, dir_b], {}, now_ms=lambda: 0)
        self.addCleanup(again.close)
        error = self.assertRaises(LogDirsFailedError, again.load)
        self.assertEqual(set(error.failures), {dir_a, dir_b})

    def test_the_broker_starts_on_the_others_and_never_counts_an_empty_log_in_sync(self) -> None:
        """
        Broker 0 restarts with log dir a unreadable: t-0 (in a) is offline
        and published as such; a replica with no log in a live dir that
        the state lists in the ISR stays offline (its data may be in a: an
        empty new log must not lead or count in sync), one that is not in
        the ISR gets a new log and catches up.
        """
        dir_a, dir_b = self.written()
        break_log_dir(dir_a, "t", 0)
        server = KafkaServer(BrokerConfig({"broker.id": 0, "log.dirs": f"{dir_a},{dir_b}"}), MemoryReactorClock())
        zookeeper = FakeZooKeeperClient()
        self.successResultOf(zookeeper.start())
        server.zookeeper = zookeeper  # type: ignore[assignment]
        server.registry = Registry(zookeeper)
        server.metadata.cluster_id = "cluster"
        self.successResultOf(defer.Deferred.fromCoroutine(server._start_logs([dir_a, dir_b])))
        self.addCleanup(lambda: self.successResultOf(defer.Deferred.fromCoroutine(server._stop_logs())))
        self.addCleanup(lambda: getattr(server, "log_dir_lock", None) is not None and server.log_dir_lock.release())
        self.assertEqual(server.replica_manager.offline_partitions, {("t", 0): dir_a})
        self.successResultOf(server.registry.register_broker(0, "127.0.0.1", 9092))
        self.assertEqual(self.successResultOf(server.registry.get_broker_registration(0)).offline_replicas, {("t", 0)})
        self.assertTrue(self.successResultOf(zookeeper.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH)))
        rm = server.replica_manager
        rm.apply_state("t", 0, [0, 1], PartitionState(0, 0, [0, 1], 1, 0))
        rm.apply_state("t", 1, [0, 1], PartitionState(0, 0, [0, 1], 1, 0))
        self.assertRaises(KafkaStorageError, rm.get_partition, "t", 0)
        self.assertEqual(rm.get_partition("t", 1).log.log_end_offset, 3)
        # u-0's data may be in a: it is in the ISR and has no log here -> offline, nothing created in b
        rm.host_partition("u", 0)
        self.assertIsNone(server.log_manager.get("u", 0))
        rm.apply_state("u", 0, [1, 0], PartitionState(1, 0, [1, 0], 1, 0))
        self.assertIsNone(server.log_manager.get("u", 0))
        self.assertRaises(KafkaStorageError, rm.get_partition, "u", 0)
        self.assertEqual(self.successResultOf(server.registry.get_broker_registration(0)).offline_replicas,
                         {("t", 0), ("u", 0)})
        # u-1 is not in the ISR: a new log in b, from which it catches up as a follower
        rm.apply_state("u", 1, [1, 0], PartitionState(1, 0, [1], 1, 0))
        self.assertEqual(server.log_manager.log_dir_of("u", 1), dir_b)
        self.assertFalse(server.stopped_on_error.called)

class BrokerTests(unittest.TestCase):
    """The broker's side: its registration and the notification for the controller; stopping when no dir is left."""

    def start_logs(self, server: KafkaServer, log_dirs: list[str]) -> FakeZooKeeperClient:
        for d in log_dirs:
            os.makedirs(d, exist_ok=True)
        zookeeper = FakeZooKeeperClient()
        self.successResultOf(zookeeper.start())
        server.zookeeper = zookeeper  # type: ignore[assignment]
        server.registry = Registry(zookeeper)
        server.metadata.cluster_id = "cluster"
        self.successResultOf(defer.Deferred.fromCoroutine(server._start_logs(log_dirs)))
        self.addCleanup(lambda: self.successResultOf(defer.Deferred.fromCoroutine(server._stop_logs())))
        self.addCleanup(lambda: getattr(server, "log_dir_lock", None) is not None and server.log_dir_lock.release())
        for partition in (0, 1):
            server.replica_manager.apply_state("t", partition, [0, 1], PartitionState(0, 0, [0, 1], 1, 0))
        return zookeeper

    def log_dirs(self, count: int) -> list[str]:
        base = tempfile.mkdtemp(prefix="kafkatw-log-dir-failure-")
        self.addCleanup(shutil.rmtree, base, True)
        return [os.path.join(base, name) for name in "ab"[:count]]

    def test_the_broker_publishes_its_offline_replicas_and_notifies_the_controller(self) -> None:
        dirs = self.log_dirs(2)
        server = KafkaServer(BrokerConfig({"broker.id": 0, "log.dirs": ",".join(dirs)}), MemoryReactorClock())
        zookeeper = self.start_logs(server, dirs)
        self.successResultOf(server.registry.register_broker(0, "127.0.0.1", 9092))
        self.assertEqual(server.log_manager.log_dir_of("t", 0), dirs[0])
        server.log_manager.files[dirs[0]].fail("writev", errno.ENOSPC)
        self.assertRaises(KafkaStorageError, server.replica_manager.append, "t", 0, records())
        data, _ = self.successResultOf(zookeeper.get(f"{BROKER_IDS_PATH}/0"))
        registration = json.loads(data)
        self.assertEqual(registration["offline_log_dirs"], {dirs[0]: {"t": [0]}})
        self.assertEqual(registration["port"], 9092)  # the rest of the registration is as it was
        self.assertEqual(decode_offline_replicas(data), {("t", 0)})
        [child] = self.successResultOf(zookeeper.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH))
        self.assertTrue(child.startswith("log_dir_event_"))
        event, _ = self.successResultOf(zookeeper.get(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}"))
        self.assertEqual(json.loads(event), {"version": 1, "broker": 0, "event": 1})
        self.assertFalse(server.stopped_on_error.called)  # the other dir serves on
        # a new session re-registers with the offline dirs
        self.successResultOf(server.registry._reregister())
        self.assertEqual(self.successResultOf(server.registry.get_broker_registration(0)).offline_replicas, {("t", 0)})

    def test_a_broker_whose_every_log_dir_failed_stops_with_one_line_and_status_1(self) -> None:
        dirs = self.log_dirs(1)
        exit_status = tap._ExitStatus(register=lambda f: None, exit=lambda status: None)
        self.patch(tap, "_exit_status", exit_status)
        stderr = io.StringIO()
        self.patch(sys, "__stderr__", stderr)
        options = parse("--log-dirs", dirs[0])
        options.parent = _FakeTwistdOptions(logfile="broker.log")
        reactor = MemoryReactorClock()
        reactor.running = True
        stops: list[bool] = []
        reactor.stop = lambda: stops.append(True)  # type: ignore[method-assign]
        server = tap.makeService(options, reactor)
        self.start_logs(server, dirs)
        server.log_manager.files[dirs[0]].fail("writev", errno.ENOSPC)
        self.assertRaises(KafkaStorageError, server.replica_manager.append, "t", 0, records())
        self.assertEqual(stops, [True])
        self.assertEqual(exit_status.status, tap.STOPPED_ON_ERROR_STATUS)
        self.assertNotEqual(exit_status.status, 0)
        [line] = stderr.getvalue().splitlines()
        self.assertTrue(line.startswith("broker 0 stops: every log dir has failed ("), line)
        self.assertIn(dirs[0], line)
        self.assertIn("No space left on device", line)


class ControllerTests(unittest.TestCase):
    """The controller's side: a replica in a failed log dir counts as a dead broker for its partition."""

    def broker_3(self, h: ControllerHarness) -> Registry:
        client = FakeZooKeeperClient(h.server)
        self.successResultOf(client.start())
        registry = Registry(client)
        self.successResultOf(registry.register_broker(3, "127.0.0.1", 9093))
        return registry

    def test_a_log_dir_event_moves_leaderships_and_shrinks_isrs(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 2, 1], 1: [1, 3, 2], 2: [3, 1, 2]}},
                              states={("t", 0): (3, [3, 1, 2])})
        broker = self.broker_3(h)
        self.successResultOf(broker.set_offline_log_dirs(3, {"/disks/b": [("t", 0), ("t", 1)]}))
        self.assertEqual(h.summary("t", 0), (3, 0, [3, 1, 2]))  # nothing yet: the registration alone says nothing
        self.successResultOf(broker.propagate_log_dir_event(3))
        # t-0: led by 3, whose replica is offline: the first live ISR member in assignment order, epoch + 1
        self.assertEqual(h.summary("t", 0), (2, 1, [1, 2]))
        # t-1: 3 follows it: it leaves the ISR, the epoch stays
        self.assertEqual(h.summary("t", 1), (1, 0, [1, 2]))
        # t-2: 3's replica is in a healthy dir: it leads on
        self.assertEqual(h.summary("t", 2), (3, 0, [3, 1, 2]))
        self.assertEqual(h.controller.offline_replicas, {3: {("t", 0), ("t", 1)}})
        self.assertEqual(self.successResultOf(h.zookeeper.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH)), [])
        self.assertEqual(h.controller.replica_states.state(("t", 0, 3)), "OfflineReplica")
        # 3 is not elected while its replica is offline, even when it is the last one alive
        h.broker_died(2)
        h.broker_died(1)
        self.assertEqual(h.metadata.leader("t", 0), -1)
        self.assertEqual(h.controller.partition_states.state(("t", 0)), "OfflinePartition")

    def test_a_new_controller_knows_the_offline_replicas_from_the_registrations(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 1, 2]}})
        broker = self.broker_3(h)
        # the notification was taken by a controller that died before it acted
        self.successResultOf(broker.set_offline_log_dirs(3, {"/disks/b": [("t", 0)]}))
        h.server.expire(h.zookeeper.session_id)
        h.controller.resign()
        client = FakeZooKeeperClient(h.server)
        self.successResultOf(client.start())
        metadata = MetadataCache(2)
        metadata.set_brokers(dict(h.metadata.brokers))
        metadata.set_topic(h.metadata.topics["t"])
        metadata.set_partition_state("t", 0, h.state("t", 0))
        from kafkatw.broker.controller import KafkaController

        controller = KafkaController(2, BrokerConfig({"broker.id": 2}), Registry(client), metadata, lambda t: {})
        self.assertTrue(self.successResultOf(controller.elect()))
        state = self.successResultOf(Registry(client).get_partition_state("t", 0))
        self.assertEqual((state.leader, state.leader_epoch, state.isr), (1, 1, [1, 2]))

    def test_a_restarted_broker_registers_without_offline_replicas_and_may_lead_again(self) -> None:
        h = ControllerHarness(self, {"t": {0: [3, 1]}})
        broker = self.broker_3(h)
        self.successResultOf(broker.set_offline_log_dirs(3, {"/disks/b": [("t", 0)]}))
        self.successResultOf(broker.propagate_log_dir_event(3))
        self.assertEqual(h.summary("t", 0), (1, 1, [1]))
        # the disk is replaced and broker 3 restarts: a new session, a registration without offline dirs
        broker.client.server.expire(broker.client.session_id)
        restarted = self.broker_3(h)
        self.assertEqual(self.successResultOf(restarted.get_broker_registration(3)).offline_replicas, set())
        h.wait(h.controller.brokers_changed(dict(h.metadata.brokers)))  # the watch may see no change at all
        self.assertEqual(h.controller.offline_replicas, {})
        # once it has caught up and the leader added it to the ISR, it can be elected again
        state = h.state("t", 0)
        self.successResultOf(h.registry.set_partition_state("t", 0, 1, state.leader_epoch, [1, 3],
                                                            expected_version=state.zk_version))
        h.metadata.set_partition_state("t", 0, h.state("t", 0))
        h.broker_died(1)
        self.assertEqual(h.summary("t", 0), (3, 2, [3]))
