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

import os
import signal
import subprocess
import sys
import tempfile
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

        # Kafka's --members and --state views of the live group (issue 30)
        result = self.cli("consumer-groups", "--bootstrap-server", self.bootstrap, "--describe", "--group", group,
                          "--members", "--verbose")
        self.assertEqual(result.exit_code, 0, result.output)
        lines = result.output.splitlines()
        self.assertEqual(lines[1].split(), ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"])
        self.assertEqual(sorted(line.split()[4] for line in lines[2:]), [str(PARTITIONS // 2)] * 2, result.output)
        self.assertEqual(sorted(p for line in lines[2:] for p in line.split()[5].strip(f"{topic}()").split(",")),
                         [str(p) for p in range(PARTITIONS)], result.output)
        result = self.cli("consumer-groups", "--bootstrap-server", self.bootstrap, "--describe", "--group", group,
                          "--state")
        host, port = self.bootstrap.rsplit(":", 1)
        self.assertEqual(result.output.splitlines()[2].split(), [group, f"{host}:{port}", "(0)", "range", "Stable", "2"])

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

    def test_reset_offsets_and_group_listing_flags(self):
        """
        --shift-by, --to-current, --to-datetime (no ZooKeeper), --all-topics,
        --export/--from-file, --list --state, --describe --state/--members of
        an empty group, --all-groups.
        """
        from kafkatw.cli.consumer_groups import BrokerGroupSource
        from kafkatw.client.blocking import BlockingAdminClient

        topic, group = "cli-reset", "cli-reset-g"
        self.make_topic(topic)
        with BlockingAdminClient(self.bootstrap) as admin:
            BrokerGroupSource(admin).commit(group, {(topic, 0): 5, (topic, 1): 2})
        base = ["consumer-groups", "--bootstrap-server", self.bootstrap]

        def new_offsets(*args: str) -> dict[tuple[str, int], int]:
            result = self.cli(*base, "--reset-offsets", "--group", group, *args)
            self.assertEqual(result.exit_code, 0, result.output)
            return {(r[1], int(r[2])): int(r[3]) for r in (line.split() for line in result.stdout.splitlines())
                    if r and r[0] == group}

        self.assertEqual(new_offsets("--all-topics", "--shift-by", "-3"), {(topic, 0): 2, (topic, 1): 0})
        self.assertEqual(new_offsets("--topic", f"{topic}:0", "--shift-by", "100"), {(topic, 0): PER_PARTITION})
        self.assertEqual(new_offsets("--topic", topic, "--to-current"),
                         {(topic, 0): 5, (topic, 1): 2, (topic, 2): PER_PARTITION, (topic, 3): PER_PARTITION})
        self.assertEqual(new_offsets("--topic", topic, "--to-datetime", "2000-01-01T00:00:00.000"),
                         {(topic, p): 0 for p in range(PARTITIONS)})
        result = self.cli(*base, "--reset-offsets", "--group", group, "--topic", f"{topic}:3", "--to-datetime",
                          "2100-01-01T00:00:00.000Z")
        self.assertIn(f"Warn: Partition 3 from topic {topic} is empty. Falling back to latest known offset.",
                      result.stdout)
        self.assertEqual(new_offsets("--topic", topic, "--by-duration", "PT1M"),
                         {(topic, p): 0 for p in range(PARTITIONS)})
        self.assertEqual(new_offsets("--all-topics", "--to-offset", "1", "--execute"), {(topic, 0): 1, (topic, 1): 1})
        exported = self.cli(*base, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", "2", "--export")
        self.assertEqual(exported.stdout.splitlines(), [f"{topic},0,3", f"{topic},1,3"])
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(exported.stdout)
        self.addCleanup(os.unlink, f.name)
        path = f.name
        self.assertEqual(new_offsets("--from-file", path, "--execute"), {(topic, 0): 3, (topic, 1): 3})

        listed = self.cli(*base, "--list", "--state")
        self.assertIn([group, "Empty"], [line.split() for line in listed.stdout.splitlines()])
        self.assertEqual(self.cli(*base, "--list", "--state", "Stable").stdout.split()[:2], ["GROUP", "STATE"])
        self.assertNotIn(group, self.cli(*base, "--list", "--state", "Stable").stdout)
        state = self.cli(*base, "--describe", "--group", group, "--state")
        self.assertEqual(state.exit_code, 0, state.output)
        self.assertIn(f"Consumer group '{group}' has no active members.", state.stderr)
        self.assertEqual(state.stdout.splitlines()[2].split()[-2:], ["Empty", "0"])
        members = self.cli(*base, "--describe", "--group", group, "--members")
        self.assertEqual(members.stdout.splitlines()[1:], [
            "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     "])
        described = self.cli(*base, "--describe", "--all-groups")
        self.assertEqual(described.exit_code, 0, described.output)
        self.assertIn(f"{group} ", described.stdout)

    def test_console_include_sync_and_isolation_level(self):
        """
        console-producer --sync --request-required-acks 1 into two topics;
        console-consumer --include reads both (read_committed, with
        --consumer-property), alone and in a group.
        """
        sent = set()
        for topic in ("inc-a", "inc-b"):
            result = self.cli("topics", "--bootstrap-server", self.bootstrap, "--create", "--topic", topic,
                              "--partitions", "2")
            self.assertEqual(result.exit_code, 0, result.output)
            lines = [f"{topic}-{i}" for i in range(3)]
            result = CliRunner().invoke(cli_main, ["console-producer", "--bootstrap-server", self.bootstrap, "--topic",
                                                   topic, "--sync", "--request-required-acks", "1"],
                                        input="\n".join(lines) + "\n")
            self.assertEqual(result.exit_code, 0, result.output)
            sent.update(lines)
        for extra in ([], ["--group", "inc-g"]):
            result = self.cli("console-consumer", "--bootstrap-server", self.bootstrap, "--include", "inc-.*",
                              "--from-beginning", "--isolation-level", "read_committed", "--consumer-property",
                              "max.poll.records=2", "--max-messages", "6", "--timeout-ms", "15000", *extra)
            self.assertEqual(result.exit_code, 0, result.output)
            self.assertEqual(set(result.stdout.splitlines()), sent, (extra, result.output))
            self.assertIn("Processed a total of 6 messages", result.stderr)

    def test_describe_of_an_unknown_group(self):
        result = self.cli("consumer-groups", "--bootstrap-server", self.bootstrap, "--describe", "--group", "nope")
        self.assertEqual(result.exit_code, 1, result.output)
        self.assertEqual(result.output.strip(), "Error: Consumer group 'nope' does not exist.")


if __name__ == "__main__":
    unittest.main()
