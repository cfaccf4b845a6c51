"""
C{kafkatw get-offsets}: the offsets of partitions for a time, as Kafka's
C{kafka-get-offsets.sh} (C{GetOffsetShell}): one ListOffsets per leader,
printed C{topic:partition:offset} sorted by topic and partition::

    $ kafkatw get-offsets --bootstrap-server localhost:9092 --topic t --time -1
    t:0:42
    t:1:40

C{--time}: C{-1} or C{latest} (the high watermark, the default), C{-2} or
C{earliest} (the log start offset), C{-3} or C{max-timestamp} (the record
with the largest timestamp, ListOffsets v7, KIP-734), or a timestamp in ms
(the first offset whose record's timestamp is at least it).  A partition
without such an offset is not printed.  C{--topic} is a regular expression
matched against whole topic names (default: every topic).
"""

from __future__ import annotations

import re

import click

from kafkatw.errors import KafkaError

from ._common import bootstrap_option, client_security, command_config_option, describe_error, fail

__all__ = ["get_offsets", "parse_time", "parse_partitions", "format_offsets"]

_TIMEOUT_MS = 30000
_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}
_INTERNAL = ("__consumer_offsets", "__transaction_state")


def parse_time(text: str) -> int:
    """C{--time}: a name of L{_TIMES} or a long. @raise click.BadParameter: neither."""
    if text.lower() in _TIMES:
        return _TIMES[text.lower()]
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"Malformed time argument {text}, please use -1 or latest / -2 or earliest / "
                                 "-3 or max-timestamp, or a specified long format timestamp",
                                 param_hint="--time") from None


def parse_partitions(text: str) -> list[tuple[int, int | None]]:
    """
    C{--partitions}: comma-separated ids or ranges (C{0,2-4,7-}).

    @return: inclusive C{(low, high)} ranges (C{high} None: open).
    @raise click.BadParameter: malformed.
    """
    ranges: list[tuple[int, int | None]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d*))?", part)
        if match is None:
            raise click.BadParameter(f"Invalid partition id or range {part!r}", param_hint="--partitions")
        low = int(match.group(1))
        if match.group(2) is None:
            ranges.append((low, low))
        else:
            ranges.append((low, int(match.group(2)) if match.group(2) else None))
    return ranges


def _wanted(partition: int, ranges: list[tuple[int, int | None]]) -> bool:
    return not ranges or any(low <= partition and (high is None or partition <= high) for low, high in ranges)


def format_offsets(offsets: dict[tuple[str, int], int]) -> list[str]:
    """C{topic:partition:offset} lines, sorted; offsets of -1 (none found) are left out."""
    return [f"{t}:{p}:{o}" for (t, p), o in sorted(offsets.items()) if o >= 0]


@click.command("get-offsets", short_help="Offsets of partitions for a time (kafka-get-offsets.sh).")
@bootstrap_option
@command_config_option
@click.option("--topic", default=".*", show_default=True, help="Topics to query: a regular expression.")
@click.option("--partitions", default="", metavar="0,2-4,7-", help="Partition ids or ranges (default: all).")
@click.option("--time", "time_", default="-1", show_default=True, metavar="-1|-2|-3|MS",
              help="-1 or latest, -2 or earliest, -3 or max-timestamp, or a timestamp in ms.")
@click.option("--exclude-internal-topics", is_flag=True, help="Leave out internal topics.")
def get_offsets(bootstrap_server: str, topic: str, partitions: str, time_: str,
                exclude_internal_topics: bool) -> None:
    """Print the offsets of partitions for a time, topic:partition:offset (kafka-get-offsets.sh)."""
    timestamp = parse_time(time_)
    ranges = parse_partitions(partitions)
    try:
        pattern = re.compile(topic)
    except re.error as e:
        raise click.BadParameter(f"invalid regular expression: {e}", param_hint="--topic") from None
    from kafkatw.client.blocking import BlockingAdminClient

    admin = None
    try:
        admin = BlockingAdminClient(bootstrap_server, **client_security(), client_id="get-offsets-tool",
                                    request_timeout_ms=_TIMEOUT_MS, default_api_timeout_ms=_TIMEOUT_MS)
        names = [t for t in admin.list_topics() if pattern.fullmatch(t)
                 and not (exclude_internal_topics and t in _INTERNAL)]
        wanted = []
        if names:
            for name, description in admin.describe_topics(names).items():
                wanted.extend((name, p.partition) for p in description.partitions if _wanted(p.partition, ranges))
        if not wanted:
            fail("Could not match any topic-partitions with the specified filters")
        found = admin.list_offsets({tp: timestamp for tp in wanted})
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error occurred: {describe_error(e)}")
    finally:
        if admin is not None:
            admin.close()
    for line in format_offsets({tp: info.offset for tp, info in found.items()}):
        click.echo(line)
