"""
The README's brokers, as a reader runs them from one directory: the first with
C{kafkatw broker} and an embedded ZooKeeper (what C{scripts/run.sh
--broker-only} starts), then the README's own twistd command lines for the
second and the third broker, their ports moved to free ones.  twistd writes
C{twistd.pid} in the current directory unless told C{--pidfile=}, and refuses
to start a second server there.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from twisted.trial import unittest

from kafkatw.testing import find_free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def readme_broker_commands() -> list[list[str]]:
    """The README's C{.venv/bin/twistd ...} command lines, continuation lines joined."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.startswith(".venv/bin/twistd "):
                commands.append(shlex.split(command))
    return commands


class ReadmeBrokersTests(unittest.TestCase):
    timeout = 120

    def setUp(self) -> None:
        self.cwd = tempfile.mkdtemp(prefix="kafkatw-readme-")
        self.addCleanup(shutil.rmtree, self.cwd, True)
        os.symlink(os.path.join(ROOT, "config"), os.path.join(self.cwd, "config"))
        self.env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def start(self, argv: list[str], name: str) -> tuple[subprocess.Popen, str]:
        out = os.path.join(self.cwd, f"{name}.out")
        with open(out, "wb") as f:
            process = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=f,
                                       stderr=subprocess.STDOUT)
        self.addCleanup(self.stop, process)
        return process, out

    def stop(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def wait_started(self, process: subprocess.Popen, out: str, broker_id: int, timeout_s: float = 40) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(out, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            if f"broker {broker_id} started" in text:
                return
            if process.poll() is not None:
                self.fail(f"broker {broker_id} exited with {process.returncode}:\n{text[-2000:]}")
            time.sleep(0.1)
        self.fail(f"broker {broker_id} did not start within {timeout_s} s")

    def test_three_brokers_from_one_directory(self) -> None:
        commands = readme_broker_commands()
        self.assertEqual([c[c.index("--broker-id") + 1] for c in commands], ["1", "2"])
        zookeeper_port = find_free_port()
        first, out = self.start([sys.executable, "-m", "kafkatw.cli.main", "broker", "--broker-id", "0",
                                 "--listeners", f"tcp:{find_free_port()}:interface=127.0.0.1",
                                 "--log-dirs", "data/kafka-logs", "--zookeeper", f"embedded:{zookeeper_port}"],
                                "broker-0")
        self.wait_started(first, out, 0)
        for command in commands:
            broker_id = int(command[command.index("--broker-id") + 1])
            argv = [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; "
                    "sys.argv[0] = 'twistd'; run()"]
            for arg in command[1:]:
                arg = re.sub(r"^tcp:909\d:", f"tcp:{find_free_port()}:", arg)
                argv.append(arg.replace("127.0.0.1:2181/", f"127.0.0.1:{zookeeper_port}/"))
            process, out = self.start(argv, f"broker-{broker_id}")
            self.wait_started(process, out, broker_id)
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "twistd.pid")))
