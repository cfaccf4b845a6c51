"""
L{kafkatw.testing.BrokerProcess.start} waits for the broker's "started"
line in its twistd log, also when twistd rotates that log during the start
(it renames it to C{<log>.1} at 1,000,000 bytes: a start with thousands of
partitions does).  The broker here is a child process that does what twistd
does; each step waits on it, never on a clock.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import unittest

from kafkatw.testing import BrokerProcess

# A log written past the start, rotated, and the "started" line at the top of the new file.
_ROTATING_BROKER = """
import os, sys, time
path = sys.argv[1]
with open(path, "ab") as f:
    f.write(b"x" * 5000 + b"\\n")
os.rename(path, path + ".1")
with open(path, "ab") as f:
    f.write(b"broker 7 started at PLAINTEXT://127.0.0.1:1\\n")
time.sleep(60)
"""


class RotatingBroker(BrokerProcess):
    def command(self) -> list[str]:
        return [sys.executable, "-c", _ROTATING_BROKER, self.log_path]


class StartTests(unittest.TestCase):
    def test_the_started_line_in_a_rotated_log_is_found(self) -> None:
        base = tempfile.mkdtemp(prefix="kafkatw-broker-process-")
        self.addCleanup(shutil.rmtree, base, True)
        broker = RotatingBroker(7, "127.0.0.1:1", base)
        with open(broker.log_path, "wb") as f:  # an earlier run's log, longer than the new file
            f.write(b"earlier run\n" * 1000)
        self.addCleanup(broker.kill)
        self.assertIs(broker.start(timeout_s=30), broker)
        self.assertIsNone(broker.popen.poll())
        self.assertTrue(os.path.exists(broker.log_path + ".1"))
