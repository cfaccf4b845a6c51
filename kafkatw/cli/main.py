"""
The C{kafkatw} command: Kafka's command-line tools under Kafka's names and flags.

    kafkatw topics --bootstrap-server localhost:9092 --create --topic t --partitions 3
    kafkatw console-producer --bootstrap-server localhost:9092 --topic t
    kafkatw console-consumer --bootstrap-server localhost:9092 --topic t --from-beginning
    kafkatw consumer-perf-test --bootstrap-server localhost:9092 --topic t --messages 1000000
    kafkatw consumer-groups --bootstrap-server localhost:9092 --describe --group g
    kafkatw acls --bootstrap-server localhost:9092 --add --allow-principal User:alice --operation Read --topic t
    kafkatw leader-election --bootstrap-server localhost:9092 --election-type PREFERRED --all-topic-partitions
    kafkatw reassign-partitions --bootstrap-server localhost:9092 --reassignment-json-file r.json --execute
    kafkatw configs --bootstrap-server localhost:9092 --entity-type users --entity-name alice --describe
    kafkatw delete-records --bootstrap-server localhost:9092 --offset-json-file offsets.json
    kafkatw log-dirs --bootstrap-server localhost:9092 --describe --topic-list t
    kafkatw get-offsets --bootstrap-server localhost:9092 --topic t --time -1
    kafkatw dump-log --files /var/lib/kafkatw/t-0/00000000000000000000.log --print-data-log
    kafkatw transactions --bootstrap-server localhost:9092 describe --transactional-id shop
    kafkatw zookeeper --port 2181 --data-dir /var/lib/zookeeper
    kafkatw broker --broker-id 0 --listeners tcp:9092 --log-dirs /var/lib/kafkatw --zookeeper embedded
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from typing import Any

import click

from kafkatw._version import __version__

__all__ = ["main", "COMMANDS", "broker_argv"]

#: The tools, imported when one is run (a tool call imports its own module only, which keeps start-up
#: short: docs/operations.md, Start-up time): name -> (module of kafkatw.cli, command, the summary
#: `kafkatw --help` shows, which tests/unit/test_cli_args.py keeps equal to the command's short_help).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "acls": ("acls", "acls", "Add, remove or list ACLs (kafka-acls.sh)."),
    "configs": ("configs", "configs", "Describe and alter user, client, topic and broker configs (kafka-configs.sh)."),
    "console-consumer": ("console", "console_consumer", "Print a topic's records (kafka-console-consumer.sh)."),
    "console-producer": ("console", "console_producer", "Send lines to a topic (kafka-console-producer.sh)."),
    "consumer-groups": ("consumer_groups", "consumer_groups",
                        "Consumer groups and offsets (kafka-consumer-groups.sh)."),
    "consumer-perf-test": ("consumer_perf", "consumer_perf_test",
                           "Consumer throughput (kafka-consumer-perf-test.sh)."),
    "delete-records": ("delete_records", "delete_records", "Delete records below offsets (kafka-delete-records.sh)."),
    "share-groups": ("share_groups", "share_groups", "Share groups and their offsets (kafka-share-groups.sh)."),
    "dump-log": ("dump_log", "dump_log", "Print log segment and index files (kafka-dump-log.sh)."),
    "get-offsets": ("get_offsets", "get_offsets", "Offsets of partitions for a time (kafka-get-offsets.sh)."),
    "leader-election": ("leader_election", "leader_election",
                        "Elect preferred or unclean leaders (kafka-leader-election.sh)."),
    "log-dirs": ("log_dirs", "log_dirs", "Describe the brokers' log directories (kafka-log-dirs.sh)."),
    "producer-perf-test": ("perf", "producer_perf_test", "Producer throughput (kafka-producer-perf-test.sh)."),
    "reassign-partitions": ("reassign_partitions", "reassign_partitions",
                            "Move partitions between brokers (kafka-reassign-partitions.sh)."),
    "ship": ("ship", "ship", "Follow log files and send each line to a topic."),
    "topics": ("topics", "topics", "Create, list, describe, alter, delete topics (kafka-topics.sh)."),
    "transactions": ("transactions", "transactions", "List, describe and abort transactions (kafka-transactions.sh)."),
    "zookeeper": ("zookeeper", "zookeeper",
                  "Run ZooKeeper (standalone, or a member of an ensemble) in the foreground."),
}


#: click >= 8.2 raises this for a group called without a command (its message is the help)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _KafkaTools(click.Group):
    """
    The C{kafkatw} group.  A usage error prints the error first, then where
    to find help (two lines, exit status 2), as Kafka's tools put the error
    first; click would print the usage line before it.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """
        The console script's entry (and C{python -m kafkatw.cli.main}'s).

        kio registers hypothesis strategies for its types whenever it finds
        hypothesis installed (a test dependency of kafkatw), and that import
        brings pytest and trio along: 0.3-0.7 s of every tool call for
        something no tool uses.  A tool process that has not imported
        hypothesis marks it absent (a C{None} entry in C{sys.modules} makes
        its import raise C{ImportError}), so kio takes its no-hypothesis path.
        Tests calling L{main} in-process (click's C{CliRunner}) do not pass here.
        """
        if "hypothesis" not in sys.modules:
            sys.modules["hypothesis"] = None  # type: ignore[assignment]
        return super().__call__(*args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The command C{name}, its module imported on first use."""
        command = super().get_command(ctx, name)
        if command is None and name in COMMANDS:
            module, attribute, _ = COMMANDS[name]
            command = getattr(importlib.import_module(f"kafkatw.cli.{module}"), attribute)
            self.add_command(command, name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The Commands section of C{kafkatw --help}, from L{COMMANDS} without importing the tools."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                rows.append((name, self.commands[name].get_short_help_str(formatter.width)))
            else:
                rows.append((name, COMMANDS[name][2]))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as e:  # `kafkatw` alone: the help
            click.echo(e.format_message(), err=True)
            sys.exit(e.exit_code)
        except click.UsageError as e:
            message = e.format_message()
            if isinstance(e, click.NoSuchOption) and e.ctx is not None:  # a Kafka flag kafkatw refuses: why
                from .kafka_flags import refusal

                names, ctx = [], e.ctx
                while ctx.parent is not None:  # "transactions list": the command's path under kafkatw
                    names.append(ctx.info_name or "")
                    ctx = ctx.parent
                command = " ".join(reversed(names))
                reason = refusal(command, e.option_name)
                if reason is not None:
                    message = f"kafkatw {command} does not serve {e.option_name}: {reason}."
            click.echo(f"Error: {message}", err=True)
            if e.ctx is not None:
                command = e.ctx.command_path
                help_names = e.ctx.help_option_names
                if help_names:
                    click.echo(f"Try '{command} {help_names[-1]}' for help.", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)


@click.group(cls=_KafkaTools, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kafkatw")
def main() -> None:
    """kafkatw: Kafka's tools for a kafkatw (or Apache Kafka) cluster."""


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []},
              short_help="Run a broker in the foreground (twistd -n kafkatw).")
@click.argument("twistd_args", nargs=-1, type=click.UNPROCESSED)
def broker(twistd_args: tuple[str, ...]) -> None:
    """Run a broker in the foreground: exec `twistd -n --pidfile= kafkatw ARGS...`.

    Every argument is passed through; `kafkatw broker --help` shows the broker's options.
    As with kafka-server-start.sh, a first argument that is not a flag is the server.properties
    file (`kafkatw broker config/server.properties --override broker.id=1`).
    No twistd.pid is written, so several brokers can run from one directory.
    """
    argv = broker_argv(twistd_args)
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    if not os.access(twistd, os.X_OK):
        twistd = shutil.which("twistd") or ""
    if not twistd:
        raise click.ClickException("cannot find twistd (is Twisted installed?)")
    os.execv(twistd, [twistd, *argv])


def broker_argv(args: tuple[str, ...] | list[str]) -> list[str]:
    """
    The twistd arguments (after the program) of C{kafkatw broker ARGS}: C{-n
    --pidfile= kafkatw}, then ARGS with a leading properties file (the form
    of C{kafka-server-start.sh server.properties [--override k=v]*}) given
    as C{--config FILE}.

    @raise click.UsageError: C{-daemon} or C{--version}, which L{kafkatw.cli.kafka_flags} refuses.
    """
    from .kafka_flags import refusal

    args = list(args)
    for flag in ("-daemon", "--version"):
        if flag in args:
            raise click.UsageError(f"kafkatw broker does not serve {flag}: {refusal('broker', flag)}.")
    if args and not args[0].startswith("-"):
        args = ["--config", args[0], *args[1:]]
    return ["-n", "--pidfile=", "kafkatw", *args]


if __name__ == "__main__":  # pragma: no cover
    main()
