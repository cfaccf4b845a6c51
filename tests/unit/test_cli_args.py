"""Argument handling of the C{kafkatw} command (no broker needed)."""

from __future__ import annotations

from twisted.trial import unittest

from tests._pytest_style import add_checks
import click
from click.testing import CliRunner

from kafkatw.cli.console import format_record
from kafkatw.cli.main import main
from kafkatw.cli.topics import format_topic_id
from kafkatw.protocol.records import Record

B = ["--bootstrap-server", "127.0.0.1:1"]


def run():
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(main, list(args), input=input, prog_name="kafkatw")

    return invoke


def check_help_lists_commands(run):
    result = run("--help")
    assert result.exit_code == 0
    for name in ("topics", "console-producer", "console-consumer", "zookeeper", "broker"):
        assert name in result.output


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


def check_usage_errors(run):
    for args in USAGE_ERRORS:
        _usage_error(run, args)


def _usage_error(run, args):
    result = run(*args)
    assert result.exit_code == 2, (args, result.output)
    # the error first, then where help is (Kafka's tools put the error first; no usage dump)
    lines = result.output.splitlines()
    assert lines[0].startswith("Error: "), (args, result.output)
    assert lines[1:] == [f"Try 'kafkatw {args[0]} --help' for help."], (args, result.output)


def check_usage_error_output_exactly(run):
    result = run("topics", *B, "--list", "--bogus")
    assert result.exit_code == 2
    assert result.output == "Error: No such option '--bogus'.\nTry 'kafkatw topics --help' for help.\n"
    result = run("nosuch")
    assert result.output == "Error: No such command 'nosuch'.\nTry 'kafkatw --help' for help.\n"
    result = run("console-consumer", *B, "--topic", "t", "--zookeeper", "127.0.0.1:1")
    assert result.exit_code == 2
    assert result.output.splitlines()[0] == "Error: --zookeeper needs --group (it selects a ZooKeeper-coordinated group)"


#: Twisted's epytext markup, which belongs in docstrings and never in what a person reads in --help
_EPYTEXT = ("C{", "L{", "I{", "B{", "@param", "@type", "@return", "@raise", "@ivar")


def check_help_texts_have_no_epytext(run):
    # `broker` passes --help through to twistd; its own summary line is checked in the group's help
    commands = [name for name in main.list_commands(click.Context(main)) if name != "broker"]
    assert len(commands) >= 8
    outputs = {"kafkatw": run("--help").output}
    for name in commands:
        result = run(name, "--help")
        assert result.exit_code == 0, (name, result.output)
        outputs[name] = result.output
    for name, text in outputs.items():
        for marker in _EPYTEXT:
            assert marker not in text, (name, marker, text)


def check_command_summaries_are_whole(run):
    text = run("--help").output.split("Commands:")[1]
    for line in text.splitlines():
        if line.strip():
            assert not line.rstrip().endswith("..."), line


def check_unreachable_broker_is_exit_1(run):
    result = run("topics", *B, "--list")
    assert result.exit_code == 1
    assert "Error while executing topic command" in result.output


def check_bad_bootstrap_server_is_exit_1(run):
    result = run("topics", "--bootstrap-server", "nohostport", "--list")
    assert result.exit_code == 1


def check_format_topic_id():
    import uuid

    assert format_topic_id(None) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert format_topic_id(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert len(format_topic_id(uuid.uuid4())) == 22


def check_format_record():
    opts = {"print_key": True, "print_offset": True, "print_partition": True, "print_timestamp": True,
            "key_separator": b"\t"}
    line = format_record(Record(5, 1000, None, b"v", []), 2, 0, opts)
    assert line == b"CreateTime:1000\tPartition:2\tOffset:5\tnull\tv"
    plain = dict(opts, print_key=False, print_offset=False, print_partition=False, print_timestamp=False)
    assert format_record(Record(5, 1000, b"k", None, []), 2, 1, plain) == b"null"


class CliArgumentTests(unittest.TestCase):
    """The checks above as trial test methods."""


add_checks(CliArgumentTests, dict(globals()), {"run": run})
