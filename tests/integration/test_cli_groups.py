"""
Integration tests of the command line's consumer groups against a real
ZooKeeper and broker: C{kafkatw console-consumer --group G} joins G through
the broker's group coordinator (without C{--zookeeper}), and C{kafkatw
consumer-groups --describe} without C{--zookeeper} shows a ZooKeeper-
coordinated group of that name.

Console consumers run as subprocesses (C{python -m kafkatw.cli.main}); every
wait is bounded.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import unittest

from click.testing import CliRunner

from kafkatw.cli.main import main as cli_main
from kafkatw.client.blocking import BlockingProducer
from kafkatw.testing import ClassFixture, running_cluster, wait_until

PARTITIONS = 4
PER_PARTITION = 10
OVERRIDES = {"group.initial.rebalance.delay.ms": "200", "group.min.session.timeout.ms": "1000"}




class ConsoleConsumer:
    """A C{kafkatw console-consumer} subprocess and the lines it printed."""

    def __init__(self, *args: str) -> None:
        # A shell starts background commands with SIGINT ignored, and Python keeps an ignored SIGINT
        # ignored: so that Ctrl-C reaches it wherever the tests run, the child installs Python's
        # default handler (KeyboardInterrupt), as it has it when started from a terminal.
        launcher = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
                    " sys.argv[0] = 'kafkatw'; runpy.run_module('kafkatw.cli.main', run_name='__main__')")
        self.popen = subprocess.Popen([sys.executable, "-c", launcher, "console-consumer", *args],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
        self.lines: list[str] = []
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(line.rstrip("\n") for line in self.popen.stdout),
                         daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.popen.stderr), daemon=True).start()

    def interrupt(self) -> int:
        """Ctrl-C, as a person stops it: it commits, leaves the group and exits 0."""
        self.popen.send_signal(signal.SIGINT)
        return self.popen.wait(30)

    def cleanup(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)


class ConsoleGroupTests(ClassFixture, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1, overrides=OVERRIDES)
        cls.cluster = cls._cluster.__enter__()
        cls.bootstrap = cls.cluster[0].bootstrap
        cls.zookeeper = cls.cluster.zookeeper.connect_string + "/kafkatw"

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def cli(self, *args: str):
        result = CliRunner().invoke(cli_main, list(args))
        return result

    def make_topic(self, topic: str) -> set[str]:
        result = self.cli("topics", "--bootstrap-server", self.bootstrap, "--create", "--topic", topic,
                          "--partitions", str(PARTITIONS))
        self.assertEqual(result.exit_code, 0, result.output)
        values = set()
        with BlockingProducer(self.bootstrap) as producer:
            for p in range(PARTITIONS):
                for i in range(PER_PARTITION):
                    value = f"{topic}-p{p}-{i}"
                    producer.send(topic, value.encode(), partition=p)
                    values.add(value)
            producer.flush()
        return values

    def describe_rows(self, group: str) -> tuple[str, list[list[str]]]:
        result = self.cli("consumer-groups", "--bootstrap-server", self.bootstrap, "--describe", "--group", group)
        self.assertEqual(result.exit_code, 0, result.output)
        return result.output, [line.split() for line in result.output.splitlines() if line.startswith(group + " ")]

    def test_console_consumer_joins_through_the_coordinator(self):
        topic, group = "cli-coord", "cli-coord-g"
        values = self.make_topic(topic)
        first = ConsoleConsumer("--bootstrap-server", self.bootstrap, "--topic", topic, "--group", group,
                                "--from-beginning")
        self.addCleanup(first.cleanup)
        self.assertTrue(wait_until(lambda: len(first.lines) >= len(values), 30), (first.lines, first.stderr))
        self.assertEqual(set(first.lines), values)

        # the coordinator knows it: one member holding every partition
        def one_member_owns_all() -> bool:
            output, rows = self.describe_rows(group)
            return len(rows) == PARTITIONS and all(r[6] != "-" for r in rows) and len({r[6] for r in rows}) == 1
        self.assertTrue(wait_until(one_member_owns_all, 20), self.describe_rows(group)[0])
        output, rows = self.describe_rows(group)
        self.assertTrue(all(r[-1] == "kafkatw-console-consumer" for r in rows), output)

        # a second member: the partitions are split between the two, nothing is read twice
        more = set()
        with BlockingProducer(self.bootstrap) as producer:
            for p in range(PARTITIONS):
                value = f"{topic}-p{p}-more"
                producer.send(topic, value.encode(), partition=p)
                more.add(value)
        second = ConsoleConsumer("--bootstrap-server", self.bootstrap, "--topic", topic, "--group", group,
                                 "--from-beginning")
        self.addCleanup(second.cleanup)

        def two_members_split() -> bool:
            output, rows = self.describe_rows(group)
            owners = [r[6] for r in rows]
            return len(rows) == PARTITIONS and "-" not in owners and \
                sorted(owners.count(o) for o in set(owners)) == [PARTITIONS // 2, PARTITIONS // 2]
        self.assertTrue(wait_until(two_members_split, 30), self.describe_rows(group)[0])
        self.assertTrue(wait_until(lambda: more <= set(first.lines) | set(second.lines), 30),
                        (first.lines, second.lines, second.stderr))
        self.assertTrue(set(second.lines) <= more, second.lines)  # it started at the group's committed offsets

        # Ctrl-C: each commits and leaves
        self.assertEqual(first.interrupt(), 0, first.stderr)
        self.assertEqual(second.interrupt(), 0, second.stderr)
        output, rows = self.describe_rows(group)
        self.assertIn(f"Consumer group '{group}' has no active members", output)
        self.assertEqual({(r[2], r[3], r[5]) for r in rows},
                         {(str(p), str(PER_PARTITION + 1), "0") for p in range(PARTITIONS)}, output)

        # a new member resumes at the committed offsets: nothing left to read
        result = self.cli("console-consumer", "--bootstrap-server", self.bootstrap, "--topic", topic,
                          "--group", group, "--from-beginning", "--timeout-ms", "1500")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(result.stdout, "")
        self.assertIn("Processed a total of 0 messages", result.output)

    def test_describe_shows_a_zookeeper_group(self):
        topic, group = "cli-zk", "cli-zk-g"
        values = self.make_topic(topic)
        member = ConsoleConsumer("--bootstrap-server", self.bootstrap, "--topic", topic, "--group", group,
                                 "--zookeeper", self.zookeeper, "--from-beginning")
        self.addCleanup(member.cleanup)
        self.assertTrue(wait_until(lambda: len(member.lines) >= len(values), 60), (member.lines, member.stderr))
        output, rows = self.describe_rows(group)
        self.assertIn(f"Consumer group '{group}' is coordinated by ZooKeeper", output)
        self.assertIn(f"--zookeeper {self.zookeeper} --describe --group {group}", output)
        self.assertEqual(len(rows), PARTITIONS, output)
        owners = {r[6] for r in rows}
        self.assertEqual(len(owners), 1, output)
        self.assertTrue(owners.pop().startswith(group + "_"), output)
        self.assertEqual(member.interrupt(), 0, member.stderr)

    def test_describe_of_an_unknown_group(self):
        result = self.cli("consumer-groups", "--bootstrap-server", self.bootstrap, "--describe", "--group", "nope")
        self.assertEqual(result.exit_code, 1, result.output)
        self.assertEqual(result.output.strip(), "Error: Consumer group 'nope' does not exist.")


if __name__ == "__main__":
    unittest.main()
