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

import os
import shutil
import sys
from typing import Any

import click

from kafkatw._version import __version__

from .acls import acls
from .configs import configs
from .console import console_consumer, console_producer
from .perf import producer_perf_test
from .ship import ship
from .consumer_perf import consumer_perf_test
from .consumer_groups import consumer_groups
from .delete_records import delete_records
from .dump_log import dump_log
from .get_offsets import get_offsets
from .log_dirs import log_dirs
from .leader_election import leader_election
from .reassign_partitions import reassign_partitions
from .topics import topics
from .transactions import transactions
from .zookeeper import zookeeper

__all__ = ["main"]


#: click >= 8.2 raises this for a group called without a command (its message is the help)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _KafkaTools(click.Group):
    """
    The C{kafkatw} group.  A usage error prints the error first, then where
    to find help (two lines, exit status 2), as Kafka's tools put the error
    first; click would print the usage line before it.
    """

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
            click.echo(f"Error: {e.format_message()}", err=True)
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
    No twistd.pid is written, so several brokers can run from one directory.
    """
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    if not os.access(twistd, os.X_OK):
        twistd = shutil.which("twistd") or ""
    if not twistd:
        raise click.ClickException("cannot find twistd (is Twisted installed?)")
    argv = [twistd, "-n", "--pidfile=", "kafkatw", *twistd_args]
    os.execv(twistd, argv)


main.add_command(topics)
main.add_command(console_producer)
main.add_command(console_consumer)
main.add_command(consumer_perf_test)
main.add_command(zookeeper)
main.add_command(producer_perf_test)
main.add_command(consumer_groups)
main.add_command(ship)
main.add_command(leader_election)
main.add_command(reassign_partitions)
main.add_command(acls)
main.add_command(configs)
main.add_command(delete_records)
main.add_command(log_dirs)
main.add_command(get_offsets)
main.add_command(dump_log)
main.add_command(transactions)


if __name__ == "__main__":  # pragma: no cover
    main()
