"""
The exactly-once example (examples/exactly_once/) under SIGKILL: the service
is killed at random moments while it works through an access log, restarted
each time, and once the broker (the transaction coordinator's) is killed under
it and restarted; then the service is left to finish, and a read-committed
consumer finds every input line counted exactly once in the output
(examples/exactly_once/check.py).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time

from twisted.trial import unittest

from kafkatw.client.blocking import BlockingProducer
from kafkatw.testing import running_cluster

from .test_transactions import _SINGLE, create_topic

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "exactly_once")
sys.path.insert(0, _EXAMPLE)
from check import check  # noqa: E402


def access_lines(n: int, rng: random.Random) -> list[bytes]:
    lines = []
    for i in range(n):
        client = f"10.0.{rng.randrange(3)}.{rng.randrange(8)}"
        lines.append(f'{client} - - [22/Nov/2026:04:{i // 60 % 60:02d}:{i % 60:02d} +0000] "GET /p/{i} HTTP/1.1" '
                     f'200 {rng.randrange(100, 5000)} "-" "curl/8"'.encode())
        if i % 97 == 0:
            lines.append(b"not an access-log line")
    return lines


class ExactlyOnceExampleTests(unittest.TestCase):
    timeout = 400

    def test_random_sigkills(self) -> None:
        seed = int(os.environ.get("KAFKATW_TEST_SEED", time.time()))
        rng = random.Random(seed)
        with contextlib.ExitStack() as stack:
            cluster = stack.enter_context(running_cluster(1, overrides=_SINGLE))
            bootstrap = cluster[0].bootstrap
            create_topic(bootstrap, "access-log", partitions=2)
            create_topic(bootstrap, "client-counts", partitions=2)
            producer = BlockingProducer(bootstrap, timeout_s=60)
            stack.callback(producer.close)

            def produce(lines: list[bytes]) -> None:
                for line in lines:
                    producer.send("access-log", line)
                producer.flush()

            produce(access_lines(1500, rng))
            command = [sys.executable, os.path.join(_EXAMPLE, "service.py"), "--bootstrap-server", bootstrap,
                       "--max-records", "25"]
            kills = 0
            for round_ in range(4):
                service = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                joined = service.stdout.readline()  # "joined client-counts: [...]": it works from now on
                self.assertTrue(joined.startswith("joined"), joined)
                time.sleep(rng.uniform(0.1, 3.0))  # mid-transaction, between transactions, ...
                if round_ == 1:
                    # the transaction coordinator's broker (the only one) dies under the
                    # running service and comes back: the service carries on
                    cluster[0].kill()
                    time.sleep(rng.uniform(0.5, 2.0))
                    cluster[0].start(timeout_s=60)
                    time.sleep(rng.uniform(1.0, 4.0))
                if service.poll() is None:
                    service.send_signal(signal.SIGKILL)
                    kills += 1
                service.wait(30)
                service.stdout.close()
                produce(access_lines(200, rng))  # more input arrives meanwhile
            self.assertGreaterEqual(kills, 3, f"seed {seed}")
            final = subprocess.run(command + ["--exit-when-idle-s", "8"], capture_output=True, text=True, timeout=300)
            self.assertEqual(final.returncode, 0, final.stderr[-3000:])
            self.assertIn("committed", final.stdout)
            expected, counted = check(bootstrap, "access-log", "client-counts")
            self.assertEqual(sum(expected.values()), 1500 + 4 * 200)
            self.assertEqual(counted, expected, f"seed {seed}")
