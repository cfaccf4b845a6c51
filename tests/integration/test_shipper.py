"""
Integration tests of C{kafkatw ship} against a real broker (ZooKeeper and a
broker process from L{running_cluster}); records are read back with
confluent-kafka.  The shipper runs as a subprocess, as a user runs it.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.shipper import ship_once
from kafkatw.testing import ClassFixture, running_cluster

HOST = socket.gethostname()


class Reader:
    """Reads a topic from the beginning and keeps going where it stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ship-it", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])

    def read(self, expected: int, timeout_s: float = 20.0, settle_s: float = 0.5) -> list[tuple]:
        """(key, value, headers dict) records: at least C{expected}, plus any that follow within C{settle_s}."""
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            out += self._take(0.2)
        out += self._take(settle_s)
        return out

    def _take(self, timeout_s: float) -> list[tuple]:
        out = []
        for m in self.consumer.consume(1000, timeout_s):
            if not m.error():
                out.append((m.key(), m.value(), dict(m.headers() or [])))
        return out

    def close(self) -> None:
        self.consumer.close()


def ship(bootstrap: str, topic: str, *args: str, timeout_s: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "ship", "--bootstrap-server", bootstrap,
                           "--topic", topic, *args], capture_output=True, timeout=timeout_s)


def by_file(records: list[tuple]) -> dict[str, list[tuple[bytes, int]]]:
    out: dict[str, list] = {}
    for key, value, headers in records:
        out.setdefault(headers["path"].decode(), []).append((value, int(headers["line_no"])))
    return out


class ShipperTests(ClassFixture, unittest.SynchronousTestCase):
    """C{kafkatw ship} and L{ship_once} into a fresh two-partition topic of one broker shared by the tests."""

    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1)
        cls.bootstrap = cls._cluster.__enter__()[0].bootstrap

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def setUp(self) -> None:
        self.topic = f"logs-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(self.topic, 2, 1)], operation_timeout=10)[self.topic].result(15)
        self.reader = Reader(self.bootstrap, self.topic)
        self.addCleanup(self.reader.close)
        # not self.mktemp(): under pytest it creates directories in the working tree
        directory = tempfile.mkdtemp(prefix="kafkatw-ship-")
        self.addCleanup(shutil.rmtree, directory, True)
        self.tmp_path = pathlib.Path(directory)

    def test_once_then_restart_ships_only_new_lines(self) -> None:
        logs = self.tmp_path / "logs"
        logs.mkdir()
        (logs / "a.log").write_bytes(b"a1\na2\na3\n")
        (logs / "b.log").write_bytes(b"b1\n\x00bin\xff\n")
        state = str(self.tmp_path / "state.json")
        result = ship(self.bootstrap, self.topic, "--once", "--state-file", state, str(logs))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stderr.decode().strip().endswith("shipped 5 lines (13 bytes) from 2 files"),
                        result.stderr)
        records = self.reader.read(5)
        a, b = str(logs / "a.log"), str(logs / "b.log")
        self.assertEqual(by_file(records),
                         {a: [(b"a1", 1), (b"a2", 2), (b"a3", 3)], b: [(b"b1", 1), (b"\x00bin\xff", 2)]})
        for key, value, headers in records:
            path = headers["path"].decode()
            self.assertEqual(key, f"{HOST}:{path}".encode())
            self.assertEqual(headers["host"], HOST.encode())

        with open(logs / "a.log", "ab") as f:
            f.write(b"a4\na5\n")
        result = ship(self.bootstrap, self.topic, "--once", "--state-file", state, str(logs / "*.log"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(by_file(self.reader.read(2)), {a: [(b"a4", 4), (b"a5", 5)]})

    def test_python_api_long_lines(self) -> None:
        log = self.tmp_path / "big.log"
        log.write_bytes(b"small\n" + b"L" * 1_200_000 + b"\nend\n")
        stats = ship_once(self.bootstrap, self.topic, [str(log)], state_file=str(self.tmp_path / "s.json"))
        self.assertEqual((stats.lines, stats.truncated, stats.files), (3, 1, 1))
        records = self.reader.read(3)
        self.assertEqual([r[1][:5] for r in records], [b"small", b"LLLLL", b"end"])
        self.assertEqual(len(records[1][1]), 1_000_000)
        self.assertEqual(records[1][2]["truncated"], b"1200000")

    def test_follow_append_rotation_truncation(self) -> None:
        log = self.tmp_path / "app.log"
        log.write_bytes(b"1\n2\n")
        other = self.tmp_path / "other.log"
        other.write_bytes(b"x1\nx2\nx3\n")
        state = str(self.tmp_path / "state.json")
        env = dict(os.environ, KAFKATW_NO_PROGRESS="1")
        process = subprocess.Popen([sys.executable, "-m", "kafkatw.cli.main", "ship",
                                    "--bootstrap-server", self.bootstrap, "--topic", self.topic,
                                    "--state-file", state, "--poll-interval-ms", "50", str(log), str(other)], stderr=subprocess.PIPE, env=env)
        try:
            self.assertEqual(sorted(by_file(self.reader.read(5)).items()), [
                (str(log), [(b"1", 1), (b"2", 2)]), (str(other), [(b"x1", 1), (b"x2", 2), (b"x3", 3)])])

            with open(log, "ab") as f:  # append, with a line completed later
                f.write(b"3\npart")
            self.assertEqual(by_file(self.reader.read(1)), {str(log): [(b"3", 3)]})
            with open(log, "ab") as f:
                f.write(b"ial\n")
            self.assertEqual(by_file(self.reader.read(1)), {str(log): [(b"partial", 4)]})

            with open(log, "ab") as f:  # rotation by rename: the old file is finished first
                f.write(b"last-of-old\n")
            os.rename(log, self.tmp_path / "app.log.1")
            log.write_bytes(b"new1\nnew2\n")
            self.assertEqual(by_file(self.reader.read(3)),
                             {str(log): [(b"last-of-old", 5), (b"new1", 1), (b"new2", 2)]})

            other.write_bytes(b"t1\n")  # truncation (copytruncate) to a shorter file
            self.assertEqual(by_file(self.reader.read(1)), {str(other): [(b"t1", 1)]})
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=20)
        self.assertEqual(process.returncode, 0, err)
        self.assertIn(b"shipped 11 lines", err)

        # the checkpoint taken at SIGTERM: a restart ships nothing again
        with open(log, "ab") as f:
            f.write(b"new3\n")
        result = ship(self.bootstrap, self.topic, "--once", "--state-file", state, str(log), str(other))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(by_file(self.reader.read(1)), {str(log): [(b"new3", 3)]})
