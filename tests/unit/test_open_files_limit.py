"""
Running out of file descriptors is a limit of the process, not a failure of
a log directory (issue 32; docs/operations.md, "Open files"): a log whose
creation fails with C{EMFILE}/C{ENFILE}, or would leave fewer than
L{OPEN_FILES_RESERVE} descriptors below the soft limit, is not created
(C{KAFKA_STORAGE_ERROR} for that partition) while the directory stays online
and everything else is served; at start-up the same error stops the broker
with one line naming the limit.  The faults come from a
L{kafkatw.storage.log_dir_failure.LogDirFiles} whose C{open} raises.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.trial import unittest

from kafkatw.broker.server import EXPECTED_START_FAILURES, KafkaServer
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode, KafkaStorageError
from kafkatw.protocol.batch import build_batch
from kafkatw.storage.log_dir_failure import OPEN_FILES_RESERVE, OpenFilesLimitError, out_of_descriptors
from kafkatw.storage.log_manager import LogManager
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import PartitionState


def records() -> bytes:
    return build_batch([(None, b"v")], timestamp_ms=1_700_000_000_000)


class LogManagerTests(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="kafkatw-open-files-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def manager(self, **kw) -> LogManager:
        manager = LogManager([self.dir], {}, now_ms=lambda: 1_000_000, **kw)
        manager.load()
        self.addCleanup(manager.close)
        return manager

    def test_emfile_on_creating_a_log_keeps_the_dir_online(self) -> None:
        manager = self.manager()
        manager.get_or_create("t", 0)
        manager.files[self.dir].fail("open", errno.EMFILE)
        with self.assertRaises(OpenFilesLimitError) as caught:
            manager.get_or_create("t", 1)
        self.assertEqual(caught.exception.error_code, ErrorCode.kafka_storage_error)
        self.assertIn("open files limit (ulimit -n)", str(caught.exception))
        self.assertEqual(manager.offline_log_dirs, {})
        self.assertEqual(manager.live_log_dirs, [self.dir])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "t-1")))  # nothing half-made is left
        manager.get("t", 0).append(records(), 0)  # the others are served
        self.assertEqual(manager.get_or_create("t", 1).log_end_offset, 0)  # and the next try works

    def test_enfile_too(self) -> None:
        manager = self.manager()
        manager.files[self.dir].fail("open", errno.ENFILE)
        self.assertRaises(OpenFilesLimitError, manager.get_or_create, "t", 0)
        self.assertEqual(manager.offline_log_dirs, {})

    def test_another_error_still_takes_the_dir_offline(self) -> None:
        manager = self.manager()
        manager.files[self.dir].fail("open", errno.EIO)
        with self.assertRaises(KafkaStorageError) as caught:
            manager.get_or_create("t", 0)
        self.assertNotIsInstance(caught.exception, OpenFilesLimitError)
        self.assertEqual(list(manager.offline_log_dirs), [self.dir])

    def test_a_log_leaving_less_than_the_reserve_is_refused_up_front(self) -> None:
        """The newest descriptor's number is a floor on those open: a limit just above it refuses."""
        probe = os.open(os.devnull, os.O_RDONLY)
        os.close(probe)
        limit = [probe + OPEN_FILES_RESERVE + 100]
        manager = self.manager(open_files_limit=lambda: limit[0])
        manager.get_or_create("t", 0)
        limit[0] = probe + OPEN_FILES_RESERVE
        with self.assertRaises(OpenFilesLimitError) as caught:
            manager.get_or_create("t", 1)
        self.assertIn(f"of the {limit[0]} open files", str(caught.exception))
        self.assertEqual(manager.offline_log_dirs, {})
        self.assertFalse(os.path.exists(os.path.join(self.dir, "t-1")))
        self.assertIsNone(manager.get("t", 1))
        limit[0] = None  # unlimited
        manager.get_or_create("t", 1)

    def test_emfile_at_load_is_one_error_naming_the_limit(self) -> None:
        manager = LogManager([self.dir], {}, now_ms=lambda: 1_000_000)
        manager.load()
        for p in range(3):
            manager.get_or_create("t", p)
        manager.close()
        again = LogManager([self.dir], {}, now_ms=lambda: 1_000_000, open_files_limit=lambda: 1234)
        again.files[self.dir].fail("open", errno.EMFILE)
        with self.assertRaises(OpenFilesLimitError) as caught:
            again.load()
        self.assertIn("open files limit (ulimit -n) of 1234", str(caught.exception))
        self.assertEqual(again.offline_log_dirs, {})  # not a failed dir: the start stops instead
        self.assertIn(OpenFilesLimitError, EXPECTED_START_FAILURES)  # one line, no traceback

    def test_out_of_descriptors_follows_the_cause(self) -> None:
        try:
            try:
                raise OSError(errno.EMFILE, "Too many open files")
            except OSError as e:
                raise KafkaStorageError("cannot open segment") from e
        except KafkaStorageError as wrapped:
            self.assertTrue(out_of_descriptors(wrapped))
        self.assertFalse(out_of_descriptors(OSError(errno.EIO, "I/O error")))
        self.assertFalse(out_of_descriptors(None))


class ReplicaManagerTests(unittest.TestCase):
    def test_the_partition_is_offline_here_and_the_broker_serves_the_rest(self) -> None:
        base = tempfile.mkdtemp(prefix="kafkatw-open-files-")
        self.addCleanup(shutil.rmtree, base, True)
        log_dir = os.path.join(base, "a")
        os.makedirs(log_dir)
        server = KafkaServer(BrokerConfig({"broker.id": 0, "log.dirs": log_dir}), MemoryReactorClock())
        zookeeper = FakeZooKeeperClient()
        self.successResultOf(zookeeper.start())
        server.zookeeper = zookeeper  # type: ignore[assignment]
        server.registry = Registry(zookeeper)
        server.metadata.cluster_id = "cluster"
        self.successResultOf(defer.Deferred.fromCoroutine(server._start_logs([log_dir])))
        self.addCleanup(lambda: self.successResultOf(defer.Deferred.fromCoroutine(server._stop_logs())))
        self.addCleanup(lambda: getattr(server, "log_dir_lock", None) is not None and server.log_dir_lock.release())
        rm = server.replica_manager
        rm.apply_state("t", 0, [0], PartitionState(0, 0, [0], 1, 0))
        server.log_manager.files[log_dir].fail("open", errno.EMFILE)
        rm.apply_state("t", 1, [0], PartitionState(0, 0, [0], 1, 0))
        with self.assertRaises(KafkaStorageError):
            rm.get_partition("t", 1)
        self.assertEqual(server.log_manager.offline_log_dirs, {})
        rm.append("t", 0, records())
        self.assertEqual(rm.get_partition("t", 0).log.log_end_offset, 1)
        self.assertFalse(server.stopped_on_error.called)
