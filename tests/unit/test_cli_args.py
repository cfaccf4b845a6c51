"""Argument handling of the C{kafkatw} command (no broker needed)."""

from __future__ import annotations

import uuid
from typing import Any

from twisted.trial import unittest

import click
from click.testing import CliRunner

from kafkatw.cli.console import format_record
from kafkatw.cli.main import main
from kafkatw.cli.topics import format_topic_id
from kafkatw.protocol.records import Record

B = ["--bootstrap-server", "127.0.0.1:1"]


USAGE_ERRORS = [
    ["topics", *B],  # no action
    ["topics", "--list"],  # no bootstrap server
    ["topics", *B, "--create"],  # no topic
    ["topics", *B, "--delete"],
    ["topics", *B, "--create", "--topic", "t", "--partitions", "0"],
    ["topics", *B, "--create", "--topic", "t", "--partitions", "x"],
    ["topics", *B, "--create", "--topic", "t", "--config", "novalue"],
    ["topics", *B, "--list", "--partitions", "3"],
    ["topics", *B, "--describe", "--if-not-exists"],
    ["topics", *B, "--alter", "--topic", "t"],  # no --partitions
    ["topics", *B, "--alter", "--partitions", "3"],  # no topic
    ["topics", *B, "--alter", "--topic", "t", "--partitions", "3", "--replication-factor", "2"],
    ["topics", *B, "--list", "--under-replicated-partitions"],
    ["topics", *B, "--describe", "--under-replicated-partitions", "--unavailable-partitions"],
    ["topics", *B, "--list", "--bogus"],
    ["console-producer", *B],  # no topic
    ["console-producer", *B, "--topic", "t", "--compression-codec", "brotli"],
    ["console-producer", *B, "--topic", "t", "--producer-property", "acks=2"],
    ["console-producer", *B, "--topic", "t", "--property", "parse.key"],
    ["console-consumer", *B],
    ["console-consumer", *B, "--topic", "t", "--offset", "5"],  # --offset needs --partition
    ["console-consumer", *B, "--topic", "t", "--partition", "0", "--offset", "5", "--from-beginning"],
    ["console-consumer", *B, "--topic", "t", "--partition", "0", "--offset", "soon"],
    ["console-consumer", *B, "--topic", "t", "--partition", "-1"],
    ["console-consumer", *B, "--topic", "t", "--max-messages", "0"],
    ["console-consumer", *B, "--topic", "t", "--zookeeper", "127.0.0.1:1"],  # --zookeeper needs --group
    ["console-consumer", *B, "--topic", "t", "--group", "g", "--partition", "0"],
    ["consumer-groups", *B, "--describe"],  # no group
    ["ship", *B, "--topic", "t"],  # no path
    ["zookeeper", "--port", "2181"],  # no data dir
    ["zookeeper", "--data-dir", "/tmp/x", "--port", "70000"],
]


#: Twisted's epytext markup, which belongs in docstrings and never in what a person reads in --help
_EPYTEXT = ("C{", "L{", "I{", "B{", "@param", "@type", "@return", "@raise", "@ivar")


class CliArgumentTests(unittest.TestCase):
    """Usage errors, help texts and exit statuses, through click's runner (no broker)."""

    def run_cli(self, *args: str, input: str | None = None) -> Any:
        return CliRunner().invoke(main, list(args), input=input, prog_name="kafkatw")

    def test_help_lists_commands(self) -> None:
        result = self.run_cli("--help")
        self.assertEqual(result.exit_code, 0)
        for name in ("topics", "console-producer", "console-consumer", "zookeeper", "broker"):
            self.assertIn(name, result.output)

    def test_usage_errors(self) -> None:
        for args in USAGE_ERRORS:
            result = self.run_cli(*args)
            self.assertEqual(result.exit_code, 2, (args, result.output))
            # the error first, then where help is (Kafka's tools put the error first; no usage dump)
            lines = result.output.splitlines()
            self.assertTrue(lines[0].startswith("Error: "), (args, result.output))
            self.assertEqual(lines[1:], [f"Try 'kafkatw {args[0]} --help' for help."], (args, result.output))

    def test_usage_error_output_exactly(self) -> None:
        result = self.run_cli("topics", *B, "--list", "--bogus")
        self.assertEqual(result.exit_code, 2)
        self.assertEqual(result.output, "Error: No such option '--bogus'.\nTry 'kafkatw topics --help' for help.\n")
        result = self.run_cli("nosuch")
        self.assertEqual(result.output, "Error: No such command 'nosuch'.\nTry 'kafkatw --help' for help.\n")
        result = self.run_cli("console-consumer", *B, "--topic", "t", "--zookeeper", "127.0.0.1:1")
        self.assertEqual(result.exit_code, 2)
        self.assertEqual(result.output.splitlines()[0],
                         "Error: --zookeeper needs --group (it selects a ZooKeeper-coordinated group)")

    def test_help_texts_have_no_epytext(self) -> None:
        # `broker` passes --help through to twistd; its own summary line is checked in the group's help
        commands = [name for name in main.list_commands(click.Context(main)) if name != "broker"]
        self.assertGreaterEqual(len(commands), 8)
        outputs = {"kafkatw": self.run_cli("--help").output}
        for name in commands:
            result = self.run_cli(name, "--help")
            self.assertEqual(result.exit_code, 0, (name, result.output))
            outputs[name] = result.output
        for name, text in outputs.items():
            for marker in _EPYTEXT:
                self.assertNotIn(marker, text, (name, marker))

    def test_command_summaries_are_whole(self) -> None:
        text = self.run_cli("--help").output.split("Commands:")[1]
        for line in text.splitlines():
            if line.strip():
                self.assertFalse(line.rstrip().endswith("..."), line)

    def test_unreachable_broker_is_exit_1(self) -> None:
        result = self.run_cli("topics", *B, "--list")
        self.assertEqual(result.exit_code, 1)
        self.assertIn("Error while executing topic command", result.output)

    def test_bad_bootstrap_server_is_exit_1(self) -> None:
        self.assertEqual(self.run_cli("topics", "--bootstrap-server", "nohostport", "--list").exit_code, 1)


class FormatTests(unittest.TestCase):
    def test_format_topic_id(self) -> None:
        self.assertEqual(format_topic_id(None), "AAAAAAAAAAAAAAAAAAAAAA")
        self.assertEqual(format_topic_id(uuid.UUID(int=0)), "AAAAAAAAAAAAAAAAAAAAAA")
        self.assertEqual(len(format_topic_id(uuid.uuid4())), 22)

    def test_format_record(self) -> None:
        opts = {"print_key": True, "print_offset": True, "print_partition": True, "print_timestamp": True,
                "key_separator": b"\t"}
        line = format_record(Record(5, 1000, None, b"v", []), 2, 0, opts)
        self.assertEqual(line, b"CreateTime:1000\tPartition:2\tOffset:5\tnull\tv")
        plain = dict(opts, print_key=False, print_offset=False, print_partition=False, print_timestamp=False)
        self.assertEqual(format_record(Record(5, 1000, b"k", None, []), 2, 1, plain), b"null")
