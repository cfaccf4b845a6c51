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
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["SourceOptions", "parse_options", "rate_limit", "split_ranges", "TriggerDelay", "EARLIEST", "LATEST",
           "CONSUMER_CONFIGS", "ADMIN_CONFIGS"]

EARLIEST = -2
LATEST = -1

#: kafkatw's own default for splitting offset ranges into input partitions.
DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000

#: Spark's default C{maxTriggerDelay} (15 minutes; C{KafkaSourceProvider.DEFAULT_MAX_TRIGGER_DELAY})
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000


def _true_false(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(text)
    return value == "true"


#: The Kafka consumer configs (the option's name without C{kafka.}) that the
#: executors' consumers take, as Spark's Kafka source passes every C{kafka.*}
#: option to its consumers: Kafka name -> (L{kafkatw.client.consumer.Consumer}
#: keyword, parser).  C{kafka.isolation.level} and the security settings have
#: fields of their own in L{SourceOptions}.
CONSUMER_CONFIGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "client.id": ("client_id", str),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "default.api.timeout.ms": ("default_api_timeout_ms", int),
    "check.crcs": ("check_crcs", _true_false),
}

#: Those of L{CONSUMER_CONFIGS} that the driver's admin client
#: (L{kafkatw.client.admin.AdminClient}: metadata and offset look-ups) takes too.
ADMIN_CONFIGS = ("client.id", "request.timeout.ms", "retry.backoff.ms", "default.api.timeout.ms")

#: C{kafka.*} options refused, as Spark's Kafka source refuses them
#: (C{KafkaSourceProvider.validateGeneralOptions}), with what to use instead.
_REFUSED = {
    "group.id": "the source tracks offsets in Spark's checkpoint",
    "auto.offset.reset": "set the source option startingOffsets instead",
    "enable.auto.commit": "the source tracks offsets in Spark's checkpoint",
    "key.deserializer": "keys are always read as bytes: deserialize them with DataFrame operations",
    "value.deserializer": "values are always read as bytes: deserialize them with DataFrame operations",
    "interceptor.classes": "the source's consumers run no interceptors",
}

#: The security settings L{kafkatw.client.security.SecurityConfig.from_properties} reads.
_SECURITY_CONFIGS = frozenset((
    "security.protocol", "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
    "ssl.keystore.type", "ssl.key.password", "ssl.endpoint.identification.algorithm", "ssl.cipher.suites",
    "sasl.mechanism", "sasl.jaas.config"))

#: Options outside L{CONSUMER_CONFIGS} that have fields of their own.
_OWN_KAFKA_OPTIONS = frozenset(("bootstrap.servers", "isolation.level"))

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
    #: the executors' consumer settings of the C{kafka.*} options
    #: (L{CONSUMER_CONFIGS}): sorted C{(keyword, value)} pairs.
    consumer_config: tuple[tuple[str, Any], ...] = ()
    #: the driver's admin client settings of the C{kafka.*} options (L{ADMIN_CONFIGS}).
    admin_config: tuple[tuple[str, Any], ...] = ()
    #: C{kafka.*} options that kafkatw's clients have no setting for, which
    #: the source ignores (after a warning), as Kafka's consumer ignores
    #: configs it does not know.
    ignored_kafka_options: tuple[str, ...] = ()
    #: C{minOffsetsPerTrigger}: a streaming micro-batch waits until at least
    #: this many new offsets are there, or C{max_trigger_delay_ms} passed (L{TriggerDelay}).
    min_offsets_per_trigger: int | None = None
    #: C{maxTriggerDelay} (ms; Spark's default 15 minutes).
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS


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
    consumer_config, admin_config, ignored = _kafka_configs(options)
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
        consumer_config=consumer_config,
        admin_config=admin_config,
        ignored_kafka_options=ignored,
        min_offsets_per_trigger=_positive_int(options, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
    )


def _kafka_configs(options: Mapping[str, Any]) -> tuple[tuple, tuple, tuple[str, ...]]:
    """
    The C{kafka.*} options (lower-cased names) as kafkatw client settings,
    as Spark's Kafka source passes them to its consumers: the executors'
    consumer keywords (L{CONSUMER_CONFIGS}), the driver's admin client
    keywords (L{ADMIN_CONFIGS}), and the names of those no kafkatw client
    has a setting for (ignored).

    @raise ValueError: an option Spark's source refuses (L{_REFUSED}), or a
        value that does not parse (naming the option).
    """
    consumer, admin, ignored = {}, {}, []
    for name in sorted(options):
        if not name.startswith("kafka."):
            continue
        config = name[len("kafka."):]
        if config in _REFUSED:
            raise ValueError(f"option {name!r} is not supported: {_REFUSED[config]}")
        if config in _OWN_KAFKA_OPTIONS or config in _SECURITY_CONFIGS:
            continue
        if config not in CONSUMER_CONFIGS:
            ignored.append(name)
            continue
        keyword, parse = CONSUMER_CONFIGS[config]
        text = str(options[name])
        try:
            value = parse(text.strip())
        except ValueError:
            raise ValueError(f"option {name!r}: not a valid {config}: {text!r}") from None
        if parse is int and value < 0:
            raise ValueError(f"option {name!r}: {config} must not be negative, not {text!r}")
        consumer[keyword] = value
        if config in ADMIN_CONFIGS:
            admin[keyword] = value
    return tuple(sorted(consumer.items())), tuple(sorted(admin.items())), tuple(ignored)


#: Spark's time units (C{JavaUtils.timeStringAsMs}): suffix -> milliseconds.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                  "d": 86_400_000}


def _duration_ms(options: Mapping[str, Any], name: str, default: int) -> int:
    """
    A duration option in Spark's notation (C{"15m"}, C{"30s"}, C{"500ms"},
    C{"2h"}, C{"1d"}; a plain number is milliseconds), in milliseconds.

    @raise ValueError: not a duration, or negative.
    """
    value = options.get(name.lower())
    if value is None:
        return default
    match = re.fullmatch(r"(\d+)\s*([a-z]*)", str(value).strip().lower())
    if match is None or match.group(2) not in _TIME_UNITS_MS and match.group(2) != "":
        raise ValueError(f"option {name!r} must be a duration such as 30s, 5m or 500ms, not {value!r}")
    return int(int(match.group(1)) * _TIME_UNITS_MS.get(match.group(2) or "ms", 1))


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


# --- triggers --------------------------------------------------------------------------


class TriggerDelay:
    """
    C{minOffsetsPerTrigger} and C{maxTriggerDelay}, as Spark's Kafka source
    applies them (C{KafkaMicroBatchStream.delayBatch}): a micro-batch is
    delayed while fewer than C{min_offsets} new offsets are there, until
    C{max_delay_ms} have passed since the last micro-batch this allowed.

    As in Spark's source (whose time of the last allowed micro-batch starts
    at 0, the epoch), the first call after the query starts is always
    allowed, whatever it finds; an allowed call that finds nothing new
    still counts as a trigger.

    @param clock: the time in seconds (C{time.time}); tests pass a fake one.
    """

    def __init__(self, min_offsets: int, max_delay_ms: int, clock: Callable[[], float] = time.time) -> None:
        self.min_offsets = min_offsets
        self.max_delay_ms = max_delay_ms
        self.clock = clock
        #: when the last micro-batch was allowed (ms; None: none yet)
        self.last_trigger_ms: int | None = None

    def delay(self, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> bool:
        """
        Whether to delay the micro-batch from C{start} to C{latest} (the
        source then returns C{start} as its end: no micro-batch runs).

        @param start: the micro-batch's start offsets (every partition of
            C{latest}; new partitions at their log start offsets).
        @param latest: the partitions' latest offsets.
        """
        now_ms = int(self.clock() * 1000)
        if self.last_trigger_ms is None or now_ms - self.last_trigger_ms >= self.max_delay_ms:
            self.last_trigger_ms = now_ms
            return False
        new = sum(max(0, end - start.get(tp, end)) for tp, end in latest.items())
        if new < self.min_offsets:
            return True
        self.last_trigger_ms = now_ms
        return False


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
