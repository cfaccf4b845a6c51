"""
C{kafkatw transactions}: Kafka's C{kafka-transactions.sh} (C{TransactionsCommand},
KIP-664) — look at transactions and abort hanging ones::

    kafkatw transactions --bootstrap-server B list [--duration-filter MS]
    kafkatw transactions --bootstrap-server B describe --transactional-id X
    kafkatw transactions --bootstrap-server B describe-producers --topic T --partition P [--broker-id N]
    kafkatw transactions --bootstrap-server B abort --topic T --partition P --start-offset S
    kafkatw transactions --bootstrap-server B abort --topic T --partition P \\
        --producer-id N --producer-epoch E --coordinator-epoch C

The output is Kafka's table: a header row and one row per item, each column
padded to its widest value and followed by a tab.  Columns:

  - C{list}: TransactionalId, Coordinator, ProducerId, TransactionState
    (ListTransactions on every broker);
  - C{describe}: CoordinatorId, TransactionalId, ProducerId, ProducerEpoch,
    TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs,
    TransactionDurationMs, TopicPartitions (DescribeTransactions on the id's
    coordinator; C{None} where no transaction is open);
  - C{describe-producers}: ProducerId, ProducerEpoch, LatestCoordinatorEpoch,
    LastSequence, LastTimestamp, CurrentTransactionStartOffset
    (DescribeProducers on the partition's leader).

C{abort} writes an ABORT marker to one partition through its leader
(WriteTxnMarkers), as Kafka's tool does, for a transaction its coordinator no
longer knows (a "hanging" transaction holding the partition's last stable
offset back).  With C{--start-offset} the producer is the one whose open
transaction starts there (DescribeProducers); its coordinator epoch is taken
from the same answer.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Sequence

import click

from kafkatw.errors import KafkaError

from ._common import bootstrap_option, client_security, command_config_option, describe_error, fail

__all__ = ["transactions", "format_table", "list_rows", "describe_rows", "producer_rows",
           "LIST_HEADERS", "DESCRIBE_HEADERS", "PRODUCER_HEADERS"]

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCER_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset")

#: Kafka's tool gives the admin client 30 s
_TIMEOUT_MS = 30000


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """Kafka's C{prettyPrintTable}: each value left-aligned to its column's widest, then a tab."""
    table = [list(map(str, headers))] + [list(map(str, row)) for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    return ["".join(value.ljust(width) + "\t" for value, width in zip(row, widths)) for row in table]


def _none(value: int) -> Any:
    return "None" if value < 0 else value


def list_rows(listings: Iterable[Any]) -> list[tuple]:
    """C{list}'s rows of L{kafkatw.client.admin.TransactionListing}s."""
    return [(t.transactional_id, t.coordinator_id, t.producer_id, t.state) for t in listings]


def describe_rows(description: Any, now_ms: int) -> list[tuple]:
    """C{describe}'s row of a L{kafkatw.client.admin.TransactionDescription}; C{now_ms}: ms since the epoch."""
    start = description.transaction_start_time_ms
    return [(description.coordinator_id, description.transactional_id, description.producer_id,
             description.producer_epoch, description.state, description.transaction_timeout_ms, _none(start),
             "None" if start < 0 else now_ms - start,
             ",".join(f"{t}-{p}" for t, p in description.topic_partitions))]


def producer_rows(producers: Iterable[Any]) -> list[tuple]:
    """C{describe-producers}' rows of L{kafkatw.client.admin.ProducerState}s."""
    return [(p.producer_id, p.producer_epoch, _none(p.coordinator_epoch), p.last_sequence, p.last_timestamp_ms,
             _none(p.current_txn_start_offset)) for p in producers]


def _with_admin(ctx: click.Context, action: Callable[[Any], Any]) -> Any:
    from kafkatw.client.blocking import BlockingAdminClient

    admin = None
    try:
        admin = BlockingAdminClient(ctx.obj["bootstrap_server"], **client_security(), client_id="transactions-tool",
                                    request_timeout_ms=_TIMEOUT_MS, default_api_timeout_ms=_TIMEOUT_MS)
        return action(admin)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error: {describe_error(e)}")
    finally:
        if admin is not None:
            admin.close()


def _echo(lines: Iterable[str]) -> None:
    for line in lines:
        click.echo(line)


class _TransactionsGroup(click.Group):
    """The subcommands, and Kafka's that are refused answered with the reason (L{kafka_flags})."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        from .kafka_flags import refused_command

        reason = refused_command("transactions", args[0]) if args else None
        if reason is not None:
            raise click.UsageError(f"kafkatw transactions does not serve {args[0]}: {reason}.", ctx)
        return super().resolve_command(ctx, args)


@click.group("transactions", cls=_TransactionsGroup,
             short_help="List, describe and abort transactions (kafka-transactions.sh).")
@bootstrap_option
@command_config_option
@click.pass_context
def transactions(ctx: click.Context, bootstrap_server: str) -> None:
    """List, describe and abort transactions (kafka-transactions.sh)."""
    ctx.obj = {"bootstrap_server": bootstrap_server}


@transactions.command("list")
@click.option("--duration-filter", type=int, default=-1, show_default=True, metavar="MS",
              help="Only transactions open longer than MS milliseconds (KIP-994; negative: all).")
@click.pass_context
def list_command(ctx: click.Context, duration_filter: int) -> None:
    """List the transactional ids every broker coordinates."""
    listings = _with_admin(ctx, lambda admin: admin.list_transactions(duration_filter_ms=duration_filter))
    _echo(format_table(LIST_HEADERS, list_rows(listings)))


@transactions.command("describe")
@click.option("--transactional-id", required=True, help="The transactional id to describe.")
@click.pass_context
def describe_command(ctx: click.Context, transactional_id: str) -> None:
    """Describe a transactional id's state (DescribeTransactions on its coordinator)."""
    found = _with_admin(ctx, lambda admin: admin.describe_transactions([transactional_id]))
    _echo(format_table(DESCRIBE_HEADERS, describe_rows(found[transactional_id], int(time.time() * 1000))))


@transactions.command("describe-producers")
@click.option("--topic", required=True, help="The topic of the partition.")
@click.option("--partition", required=True, type=click.IntRange(min=0), help="The partition id.")
@click.option("--broker-id", type=int, help="Ask this broker (default: the partition's leader).")
@click.pass_context
def describe_producers_command(ctx: click.Context, topic: str, partition: int, broker_id: int | None) -> None:
    """Describe the active producers of a partition (DescribeProducers)."""
    found = _with_admin(ctx, lambda admin: admin.describe_producers([(topic, partition)], broker_id=broker_id))
    _echo(format_table(PRODUCER_HEADERS, producer_rows(found[(topic, partition)])))


@transactions.command("abort")
@click.option("--topic", required=True, help="The topic of the partition.")
@click.option("--partition", required=True, type=click.IntRange(min=0), help="The partition id.")
@click.option("--start-offset", type=click.IntRange(min=0),
              help="The first offset of the transaction to abort (finds its producer).")
@click.option("--producer-id", type=int, help="The producer id of the transaction to abort.")
@click.option("--producer-epoch", type=int, help="Its producer epoch.")
@click.option("--coordinator-epoch", type=int, help="The epoch of its coordinator.")
@click.pass_context
def abort_command(ctx: click.Context, topic: str, partition: int, start_offset: int | None, producer_id: int | None,
                  producer_epoch: int | None, coordinator_epoch: int | None) -> None:
    """Abort a hanging transaction on one partition (an ABORT marker through its leader)."""
    by_producer = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is None and None in by_producer:
        raise click.UsageError("Either --start-offset or all of --producer-id, --producer-epoch and"
                               " --coordinator-epoch are required")
    if start_offset is not None and any(v is not None for v in by_producer):
        raise click.UsageError("--start-offset cannot be used with --producer-id, --producer-epoch or"
                               " --coordinator-epoch")

    def abort(admin: Any) -> None:
        nonlocal producer_id, producer_epoch, coordinator_epoch
        if start_offset is not None:
            producers = admin.describe_producers([(topic, partition)])[(topic, partition)]
            match = [p for p in producers if p.current_txn_start_offset == start_offset]
            if not match:
                fail(f"Could not find any open transactions starting at offset {start_offset} on partition"
                     f" {topic}-{partition}")
            producer_id, producer_epoch = match[0].producer_id, match[0].producer_epoch
            coordinator_epoch = max(0, match[0].coordinator_epoch)
        admin.abort_transaction(topic, partition, producer_id, producer_epoch, coordinator_epoch)

    _with_admin(ctx, abort)
