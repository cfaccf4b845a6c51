"""
The options of the C{kafkatw} Spark data source, named and checked as Spark's
built-in Kafka source names and checks them (Spark's C{KafkaSourceProvider}),
and the offset arithmetic of its readers.  Pure functions: no Spark, no
sockets, so that they are unit-testable on their own.

Offsets are JSON-able dicts C{{topic: {partition (str): offset}}} — the
shape Spark's Kafka source writes in its checkpoint (docs/design.md: Spark).  In
C{startingOffsets}/C{endingOffsets}, C{-2} means earliest and C{-1} latest.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["SourceOptions", "parse_options", "rate_limit", "split_ranges", "EARLIEST", "LATEST"]

EARLIEST = -2
LATEST = -1

#: kafkatw's own default for splitting offset ranges into input partitions.
DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetSpec:
    """
    Where to start or end: C{kind} is "earliest", "latest", "offsets"
    (C{offsets}: (topic, partition) -> offset, -2/-1 allowed), "timestamp"
    (C{timestamp_ms} for every partition) or "timestamps" (C{timestamps}:
    (topic, partition) -> ms).
    """

    kind: str
    offsets: dict = field(default_factory=dict)
    timestamp_ms: int | None = None
    timestamps: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options; see L{parse_options}."""

    bootstrap_servers: str
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    timestamp_strategy: str  # "error" or "latest"
    max_records_per_partition: int
    min_partitions: int | None
    poll_timeout_ms: int
    #: the L{kafkatw.client.security.SecurityConfig} of C{kafka.security.protocol},
    #: C{kafka.ssl.*}, C{kafka.sasl.mechanism}, C{kafka.sasl.jaas.config}.
    security: Any = None
    #: C{kafka.isolation.level}: C{read_uncommitted} (Spark's default) or
    #: C{read_committed} (only committed transactions' records, up to the last
    #: stable offset; KIP-98).
    isolation_level: str = "read_uncommitted"


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"option {name!r} must be true or false, not {value!r}")
    return text == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"option {name!r} must be a positive integer, not {value!r}") from None
    if number <= 0:
        raise ValueError(f"option {name!r} must be a positive integer, not {value!r}")
    return number


def _json_offsets(name: str, text: str) -> dict[TopicPartition, int]:
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f"option {name!r} must be earliest, latest or JSON like"
                         f' {{"topic":{{"0":23,"1":-2}}}}, not {text!r}') from None
    if not isinstance(data, dict):
        raise ValueError(f"option {name!r}: expected a JSON object of topics, got {text!r}")
    out: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"option {name!r}: topic {topic!r} must map partitions to numbers")
        for partition, value in partitions.items():
            try:
                out[(str(topic), int(partition))] = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"option {name!r}: bad partition or number {partition!r}: {value!r}") from None
    return out


def _offset_spec(options: Mapping[str, str], prefix: str, default: str, streaming: bool) -> OffsetSpec:
    """Spark's precedence: xTimestamp > xOffsetsByTimestamp > xOffsets."""
    name = f"{prefix}Offsets"
    ts = options.get(f"{prefix}Timestamp".lower())
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp_ms=int(str(ts).strip()))
        except ValueError:
            raise ValueError(f"option {prefix}Timestamp must be ms since the epoch, not {ts!r}") from None
    by_ts = options.get(f"{prefix}OffsetsByTimestamp".lower())
    if by_ts is not None:
        return OffsetSpec("timestamps", timestamps=_json_offsets(f"{prefix}OffsetsByTimestamp", str(by_ts)))
    text = str(options.get(name.lower(), default)).strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        if prefix == "starting" and kind == "latest" and not streaming:
            raise ValueError("startingOffsets='latest' is not allowed in a batch query (it would read nothing)")
        if prefix == "ending" and kind == "earliest":
            raise ValueError("endingOffsets='earliest' is not allowed in a batch query")
        return OffsetSpec(kind)
    offsets = _json_offsets(name, text)
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise ValueError(f"option {name!r}: offset {offset} for {topic}-{partition} is not valid")
        if prefix == "starting" and offset == LATEST and not streaming:
            raise ValueError(f"startingOffsets for {topic}-{partition} can't be latest (-1) in a batch query")
        if prefix == "ending" and offset == EARLIEST:
            raise ValueError(f"endingOffsets for {topic}-{partition} can't be earliest (-2) in a batch query")
    return OffsetSpec("offsets", offsets=offsets)


def parse_options(raw: Mapping[str, Any], streaming: bool) -> SourceOptions:
    """
    Check and parse the data source options (case-insensitive names, as Spark's).

    @param streaming: C{True} for C{readStream} (C{endingOffsets} refused,
        C{startingOffsets} defaults to latest), C{False} for C{read}
        (C{maxOffsetsPerTrigger} ignored, C{startingOffsets} defaults to earliest).
    @raise ValueError: with a message naming the offending option.
    """
    options = {str(k).lower(): v for k, v in raw.items() if v is not None}
    bootstrap = options.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError("option 'kafka.bootstrap.servers' must be specified (host:port[,host:port...])")
    strategies = [name for name in ("assign", "subscribe", "subscribePattern") if name.lower() in options]
    if len(strategies) != 1:
        raise ValueError(
            "exactly one of the options 'assign', 'subscribe' or 'subscribePattern' must be specified"
            + (f"; got {', '.join(strategies)}" if strategies else ""))
    subscribe = pattern = assign = None
    if "subscribe" in options:
        topics = tuple(t.strip() for t in str(options["subscribe"]).split(",") if t.strip())
        if not topics:
            raise ValueError("option 'subscribe' must name at least one topic (comma-separated)")
        subscribe = topics
    elif "subscribepattern" in options:
        pattern = str(options["subscribepattern"]).strip()
        if not pattern:
            raise ValueError("option 'subscribePattern' must be a non-empty regular expression")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"option 'subscribePattern' is not a valid regular expression: {e}") from None
    else:
        text = str(options["assign"])
        try:
            data = json.loads(text)
            assign = tuple((str(t), int(p)) for t, ps in data.items() for p in ps)
        except (ValueError, TypeError, AttributeError):
            raise ValueError(f'option \'assign\' must be JSON like {{"topicA":[0,1],"topicB":[2]}}, not {text!r}') \
                from None
        if not assign:
            raise ValueError("option 'assign' must name at least one partition")
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name.lower() in options:
                raise ValueError(f"option {name!r} is for batch queries only (spark.read), not readStream")
        ending = OffsetSpec("latest")
    else:
        ending = _offset_spec(options, "ending", "latest", streaming)
    for name in ("kafka.group.id", "kafka.auto.offset.reset", "kafka.enable.auto.commit"):
        if name in options:
            raise ValueError(f"option {name!r} is not supported: the source tracks offsets in Spark's checkpoint")
    strategy = str(options.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise ValueError(f"option 'startingOffsetsByTimestampStrategy' must be error or latest, not {strategy!r}")
    return SourceOptions(
        bootstrap_servers=str(bootstrap),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_offset_spec(options, "starting", "latest" if streaming else "earliest", streaming),
        ending=ending,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        timestamp_strategy=strategy,
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition") or DEFAULT_MAX_RECORDS_PER_PARTITION,
        min_partitions=_positive_int(options, "minPartitions"),
        poll_timeout_ms=_positive_int(options, "kafkaConsumer.pollTimeoutMs") or 120_000,
        security=_security(options),
        isolation_level=_isolation_level(options),
    )


def _isolation_level(options: Mapping[str, Any]) -> str:
    """C{kafka.isolation.level}, as Spark's Kafka source passes it to its consumers."""
    value = str(options.get("kafka.isolation.level", "read_uncommitted")).strip().lower()
    if value not in ("read_uncommitted", "read_committed"):
        raise ValueError(f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, not {value!r}")
    return value


def _security(options: Mapping[str, Any]) -> Any:
    """
    The client security of the C{kafka.}-prefixed options, passed through as
    Spark's Kafka source passes them to its consumers (C{kafka.security.protocol},
    C{kafka.ssl.truststore.location}, C{kafka.ssl.keystore.location} (PEM),
    C{kafka.ssl.key.password}, C{kafka.ssl.endpoint.identification.algorithm},
    C{kafka.sasl.mechanism}, C{kafka.sasl.jaas.config}).
    """
    from ..client.security import SecurityConfig

    properties = {k[len("kafka."):]: str(v) for k, v in options.items()
                  if k.startswith(("kafka.security.", "kafka.ssl.", "kafka.sasl."))}
    try:
        return SecurityConfig.from_properties(properties)
    except ValueError as e:
        raise ValueError(f"kafka.security.protocol / kafka.ssl.* / kafka.sasl.* options: {e}") from None


# --- offsets ---------------------------------------------------------------------------


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """(topic, partition) -> offset as Spark's Kafka source's JSON shape."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of L{to_json}."""
    return {(topic, int(p)): int(o) for topic, partitions in data.items() for p, o in partitions.items()}


def rate_limit(limit: int, start: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """
    Cap C{latest} so that at most about C{limit} records are read from
    C{start}, spread across partitions in proportion to their backlog; a
    partition whose share is below one record still gets one, so small
    partitions are never starved.  Spark's C{KafkaMicroBatchStream.rateLimit}.

    @param start: the batch's start offsets (partitions missing here start at
        their C{latest}, i.e. contribute nothing).
    """
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + share)
    return out


def split_ranges(ranges: list[tuple[str, int, int, int]], max_records: int,
                 min_partitions: int | None = None) -> list[tuple[str, int, int, int]]:
    """
    Split C{(topic, partition, start, end)} ranges into pieces of at most
    C{max_records} offsets, and further (largest first) until there are at
    least C{min_partitions} pieces.  Empty ranges are dropped.  The result is in
    (topic, partition, start) order, so it is the same every time it is
    computed for the same input (needed for a micro-batch replayed after a
    restart).
    """
    pieces = []
    for topic, partition, start, end in ranges:
        size = end - start
        if size <= 0:
            continue
        count = max(1, math.ceil(size / max_records))
        pieces.extend(_cut(topic, partition, start, end, count))
    if min_partitions and len(pieces) < min_partitions:
        total = sum(end - start for _, _, start, end in pieces)
        out = []
        for topic, partition, start, end in pieces:
            want = max(1, round(min_partitions * (end - start) / total)) if total else 1
            out.extend(_cut(topic, partition, start, end, min(want, end - start)))
        pieces = out
    return sorted(pieces)


def _cut(topic: str, partition: int, start: int, end: int, count: int) -> list[tuple[str, int, int, int]]:
    size = end - start
    bounds = [start + size * i // count for i in range(count + 1)]
    return [(topic, partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
