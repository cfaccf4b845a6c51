"""
The embedded ZooKeeper keeps its data in the first log dir
(C{<log dir>/zookeeper}); when that disk fills, ZooKeeper 3.8 exits (its
transaction log write fails: C{java.io.IOException: No space left on device},
exit status 1).  The broker must not run on without it, a silent casualty: it
stops with one line naming the cause, and exits with status 1.

The log dir is a 24 MB tmpfs (C{mount -t tmpfs}: root only; skipped
otherwise), filled with a file; any ZooKeeper write then fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from kafkatw.testing import BrokerProcess, find_free_port


def _mount_tmpfs(path: str, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                            capture_output=True, timeout=30)
    return result.returncode == 0


def _fill(path: str) -> None:
    """Write C{path} until the filesystem is full (ENOSPC)."""
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
    # what the buffer could not take: one byte at a time is too slow, 4 KB will do
    with open(path, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


class EmbeddedZooKeeperDiskFullTests(unittest.TestCase):
    def test_broker_stops_with_one_line_when_its_zookeeper_dies_of_a_full_disk(self) -> None:
        from kazoo.client import KazooClient

        base = tempfile.mkdtemp(prefix="kafkatw-zk-full-")
        self.addCleanup(shutil.rmtree, base, True)
        port = find_free_port()
        broker = BrokerProcess(0, f"embedded:{port}", base)
        os.makedirs(broker.data_dir)
        if not _mount_tmpfs(broker.data_dir, "24m"):
            self.skipTest("needs root and tmpfs (mount -t tmpfs) for a log dir that fills")
        self.addCleanup(subprocess.run, ["umount", "-l", broker.data_dir], capture_output=True, timeout=30)
        stderr_path = os.path.join(base, "stderr")
        open(broker.log_path, "a").close()
        with open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(broker.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=stderr)
        self.addCleanup(lambda: process.poll() is None and (process.kill(), process.wait(10)))
        deadline = time.monotonic() + 60
        while "broker 0 started" not in (text := broker.log_text()) and time.monotonic() < deadline:
            self.assertIsNone(process.poll(), text[-3000:])
            time.sleep(0.1)
        self.assertIn("broker 0 started", broker.log_text())

        _fill(os.path.join(broker.data_dir, "filler"))
        zk = KazooClient(hosts=f"127.0.0.1:{port}", timeout=3.0)
        zk.start(timeout=10)
        try:
            # any write: its transaction log entry cannot be written, and ZooKeeper exits
            for i in range(2000):
                try:
                    zk.create(f"/kafkatw/filler-{i}", b"x" * 1024)
                except Exception:
                    break
        finally:
            zk.stop()
            zk.close()
        try:
            status = process.wait(60)
        except subprocess.TimeoutExpired:
            self.fail(f"the broker still runs 60 s after its embedded ZooKeeper died:\n{broker.log_text()[-3000:]}")
        with open(stderr_path, "rb") as f:
            stderr_text = f.read().decode("utf-8", "replace")
        line = (f"broker 0 stops: its embedded ZooKeeper on port {port} exited with status 1:"
                f" java.io.IOException: No space left on device")
        self.assertEqual(status, 1, stderr_text)
        self.assertIn(line, stderr_text)
        self.assertIn(line, broker.log_text())
        self.assertIn(f"ZooKeeper keeps its data in {os.path.join(broker.data_dir, 'zookeeper')}", stderr_text)
        self.assertIn("broker 0 stopped", broker.log_text())
