"""
C{kafkatw console-producer} and C{kafkatw console-consumer}, as Kafka's
C{kafka-console-producer.sh} and C{kafka-console-consumer.sh}.

The producer reads lines from stdin and sends each as a record through
L{kafkatw.client.blocking.BlockingProducer} (the Twisted L{Producer} on its
reactor thread): per partition, a batch is sent when it reaches C{batch.size}
(16 KB), C{linger.ms} after it was opened (1000 ms, the console producer's
C{--timeout}), or at end of input.  Keyed lines go to the partition the Java
client's default partitioner picks (murmur2); unkeyed lines stick to one
partition per batch (KIP-480).
"""

from __future__ import annotations

import collections
import sys
import time
from typing import Any, BinaryIO

import click

from ._common import (INTERNAL_TOPICS, bootstrap_option, client_security, command_config_option, describe_error,
                      fail, parse_properties, read_properties_file)

__all__ = ["console_producer", "console_consumer", "format_record", "consumer_options", "select_topics",
           "FORMATTERS"]

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def print_options(props: dict[str, str]) -> dict[str, Any]:
    """C{format_record}'s keyword arguments from Kafka's console-consumer C{--property} values."""
    return {
        "print_key": _truthy(props.get("print.key")),
        "print_offset": _truthy(props.get("print.offset")),
        "print_partition": _truthy(props.get("print.partition")),
        "print_timestamp": _truthy(props.get("print.timestamp")),
        "key_separator": props.get("key.separator", "\t").encode(),
    }


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


# --- producer ---------------------------------------------------------------------------


@click.command("console-producer", short_help="Send lines to a topic (kafka-console-producer.sh).")
@bootstrap_option
@command_config_option
@click.option("--topic", required=True, help="The topic to produce to.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="parse.key=true, key.separator=SEP (default tab), ignore.error=true.")
@click.option("--producer-property", "producer_properties", multiple=True, metavar="KEY=VALUE",
              help="acks=all|1|0, compression.type, batch.size, linger.ms.")
@click.option("--producer.config", "producer_config", type=click.Path(dir_okay=False), metavar="FILE",
              help="Producer configs from a properties file (config/client.properties): acks, compression.type, "
                   "batch.size, linger.ms, client.id; --producer-property wins.")
@click.option("--compression-codec", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              help="Compression of the record batches.")
@click.option("--batch-size", type=click.IntRange(min=1), help="batch.size in bytes (default 16384).")
@click.option("--timeout", "linger_ms", type=click.IntRange(min=0),
              help="linger.ms: send a partial batch after this long without input (default 1000).")
@click.option("--request-required-acks", "request_required_acks", metavar="ACKS",
              help="acks of the produce requests: all, -1, 0 or 1 (default all); wins over --producer-property acks.")
@click.option("--sync", is_flag=True,
              help="Send each line alone and wait for its acknowledgement before reading the next.")
@click.option("--request-timeout-ms", type=click.IntRange(min=1), help="request.timeout.ms (default 30000).")
@click.option("--message-send-max-retries", "retries", type=click.IntRange(min=0),
              help="retries: how often a failed send is retried (default: until delivery.timeout.ms).")
@click.option("--retry-backoff-ms", type=click.IntRange(min=0), help="retry.backoff.ms (default 100).")
@click.option("--max-block-ms", type=click.IntRange(min=0),
              help="max.block.ms: how long a send may wait for metadata or buffer space (default 60000).")
@click.option("--max-memory-bytes", "buffer_memory", type=click.IntRange(min=1),
              help="buffer.memory: the bytes of records waiting to be sent (default 33554432).")
@click.option("--max-partition-memory-bytes", "partition_batch_size", type=click.IntRange(min=1),
              help="batch.size, as Kafka maps it (wins over --batch-size).")
def console_producer(bootstrap_server: str, topic: str, properties: tuple[str, ...],
                     producer_properties: tuple[str, ...], compression_codec: str | None,
                     batch_size: int | None, linger_ms: int | None, producer_config: str | None = None,
                     request_required_acks: str | None = None, sync: bool = False,
                     request_timeout_ms: int | None = None, retries: int | None = None,
                     retry_backoff_ms: int | None = None, max_block_ms: int | None = None,
                     buffer_memory: int | None = None, partition_batch_size: int | None = None) -> None:
    """Send lines of stdin to a topic (kafka-console-producer.sh)."""
    from kafkatw.protocol.records import COMPRESSION_CODECS

    props = parse_properties(properties, "--property")
    pprops = {}
    if producer_config:
        pprops = read_properties_file(producer_config, "--producer.config",
                                      ("acks", "compression.type", "batch.size", "linger.ms", "client.id"))
    pprops.update(parse_properties(producer_properties, "--producer-property"))
    acks_hint = "--producer-property"
    if request_required_acks is not None:  # Kafka's maybeMergeOptions: the flag, when given, wins
        pprops["acks"], acks_hint = request_required_acks, "--request-required-acks"
    acks_text = pprops.get("acks", "all").strip().lower()
    if acks_text not in _ACKS:
        raise click.BadParameter(f"acks must be all, -1, 0 or 1, not {acks_text!r}", param_hint=acks_hint)
    codec_name = compression_codec or pprops.get("compression.type", "none")
    if codec_name not in COMPRESSION_CODECS:
        raise click.BadParameter(f"unknown compression type {codec_name!r}", param_hint="--producer-property")
    try:
        batch_bytes = partition_batch_size or batch_size or int(pprops.get("batch.size", 16384))
        linger = (linger_ms if linger_ms is not None else int(pprops.get("linger.ms", 1000))) / 1000
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--producer-property") from None
    parse_key = _truthy(props.get("parse.key"))
    separator = props.get("key.separator", "\t").encode()
    ignore_error = _truthy(props.get("ignore.error"))
    if parse_key and not separator:
        raise click.BadParameter("key.separator must not be empty", param_hint="--property")

    from kafkatw.client.blocking import BlockingProducer
    from kafkatw.errors import KafkaError

    line_number = 0
    pending: collections.deque = collections.deque()  # futures not yet known to have succeeded
    try:
        with BlockingProducer(bootstrap_server, **client_security(),
                              client_id=pprops.get("client.id", "kafkatw-console-producer"),
                              acks=_ACKS[acks_text],
                              compression_type=None if codec_name == "none" else codec_name,
                              batch_size=batch_bytes, linger_ms=linger * 1000,
                              **_given(request_timeout_ms=request_timeout_ms, retries=retries,
                                       retry_backoff_ms=retry_backoff_ms, max_block_ms=max_block_ms,
                                       buffer_memory=buffer_memory)) as producer:
            for line in sys.stdin.buffer:
                line_number += 1
                line = line.rstrip(b"\n")
                if line.endswith(b"\r"):
                    line = line[:-1]
                key = None
                if parse_key:
                    key, sep, value = line.partition(separator)
                    if not sep:
                        if ignore_error:
                            key, value = None, line
                        else:
                            producer.flush()
                            _check(pending, topic, wait=True)
                            fail(f"No key separator found on line number {line_number}: '{line.decode('utf-8', 'replace')}'")
                else:
                    value = line
                pending.append(producer.send(topic, value, key=key))
                if sync:  # Kafka's --sync: send(record).get(), one record at a time
                    producer.flush()
                    _check(pending, topic, wait=True)
                elif len(pending) >= 1000:
                    _check(pending, topic, wait=False)
            producer.flush()
            _check(pending, topic, wait=True)
    except KeyboardInterrupt:
        sys.exit(130)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"ERROR Error when sending message to topic {topic}: {describe_error(e)}")


def _given(**options: Any) -> dict[str, Any]:
    """The options given on the command line (the others keep the producer's defaults)."""
    return {name: value for name, value in options.items() if value is not None}


def _check(pending: collections.deque, topic: str, wait: bool) -> None:
    """Drop acknowledged futures from the left of C{pending}; exit on the first failed one."""
    while pending and (wait or pending[0].done()):
        error = pending.popleft().exception()
        if error is not None:
            fail(f"ERROR Error when sending message to topic {topic}: {describe_error(error)}")


# --- consumer ---------------------------------------------------------------------------


def format_record(record: Any, partition: int, timestamp_type: int, opts: dict[str, Any]) -> bytes:
    """
    One output line of the console consumer, as Kafka's C{DefaultMessageFormatter}:
    C{[CreateTime:ts<sep>][Partition:p<sep>][Offset:o<sep>][key<sep>]value}.
    """
    sep = opts["key_separator"]
    parts = []
    if opts["print_timestamp"]:
        kind = "LogAppendTime" if timestamp_type == 1 else "CreateTime"
        parts.append(f"{kind}:{record.timestamp_ms}".encode() + sep)
    if opts["print_partition"]:
        parts.append(f"Partition:{partition}".encode() + sep)
    if opts["print_offset"]:
        parts.append(f"Offset:{record.offset}".encode() + sep)
    if opts["print_key"]:
        parts.append((b"null" if record.key is None else record.key) + sep)
    parts.append(b"null" if record.value is None else record.value)
    return b"".join(parts)


#: --formatter classes served: Kafka 3.x names (org.apache.kafka.tools.consumer.*, and the kafka.tools.*
#: names of Kafka up to 3.7) -> what is printed ("default": Kafka's DefaultMessageFormatter lines, "noop": nothing)
FORMATTERS = {
    "org.apache.kafka.tools.consumer.DefaultMessageFormatter": "default",
    "kafka.tools.DefaultMessageFormatter": "default",
    "org.apache.kafka.tools.consumer.NoOpMessageFormatter": "noop",
    "kafka.tools.NoOpMessageFormatter": "noop",
}

#: The consumer configs --consumer-property and --consumer.config pass on: Kafka name -> (keyword, parser)
_CONSUMER_CONFIGS: dict[str, tuple[str, Any]] = {
    "client.id": ("client_id", str),
    "isolation.level": ("isolation_level", str),
    "auto.offset.reset": ("auto_offset_reset", str),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "max.poll.records": ("max_poll_records", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "check.crcs": ("check_crcs", _truthy),
}

_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def consumer_options(props: dict[str, str], flag: str = "--consumer-property") -> dict[str, Any]:
    """
    The consumer's keyword arguments for Kafka consumer configs (C{client.id},
    C{isolation.level}, C{auto.offset.reset}, C{fetch.min.bytes},
    C{fetch.max.wait.ms}, C{fetch.max.bytes}, C{max.partition.fetch.bytes},
    C{max.poll.records}, C{request.timeout.ms}, C{check.crcs}); C{group.id}
    and other client configs are not among them.

    @raise click.BadParameter: a value that does not parse, an unknown
        C{isolation.level} or C{auto.offset.reset}.
    """
    options: dict[str, Any] = {}
    for name, text in props.items():
        if name not in _CONSUMER_CONFIGS:
            continue
        keyword, parse = _CONSUMER_CONFIGS[name]
        try:
            options[keyword] = parse(text.strip())
        except ValueError:
            raise click.BadParameter(f"{name}={text!r} is not a valid value", param_hint=flag) from None
    if options.get("isolation_level", "read_uncommitted") not in _ISOLATION_LEVELS:
        raise click.BadParameter(f"isolation.level must be read_uncommitted or read_committed, not "
                                 f"{options['isolation_level']!r}", param_hint=flag)
    if options.get("auto_offset_reset", "latest") not in ("earliest", "latest"):
        raise click.BadParameter(f"auto.offset.reset must be earliest or latest, not "
                                 f"{options['auto_offset_reset']!r}", param_hint=flag)
    return options


def select_topics(names: list[str], include: str) -> list[str]:
    """
    The topics an C{--include} regular expression subscribes to, as the Java
    consumer's pattern subscription: the whole name must match, internal
    topics (C{__consumer_offsets}, C{__transaction_state}) are left out.

    @raise click.BadParameter: C{include} is not a regular expression.
    """
    import re

    try:
        pattern = re.compile(include)
    except re.error as e:
        raise click.BadParameter(f"{include} is an invalid regex ({e})", param_hint="--include") from None
    return sorted(n for n in names if pattern.fullmatch(n) and n not in INTERNAL_TOPICS)


@click.command("console-consumer", short_help="Print a topic's records (kafka-console-consumer.sh).")
@bootstrap_option
@command_config_option
@click.option("--topic", help="The topic to consume (or --include).")
@click.option("--include", metavar="REGEX",
              help="Consume every topic whose whole name matches this regular expression (internal topics "
                   "excluded); the topics are those that exist at start.")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset instead of the latest.")
@click.option("--partition", type=click.IntRange(min=0), help="Consume only this partition.")
@click.option("--offset", "offset_spec", help="With --partition: an offset, 'earliest' or 'latest' (default).")
@click.option("--max-messages", type=click.IntRange(min=1), help="Exit after this many messages.")
@click.option("--timeout-ms", type=click.IntRange(min=0), help="Exit when no message arrives for this long.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="print.key, print.offset, print.partition, print.timestamp (true/false), key.separator.")
@click.option("--formatter", metavar="CLASS",
              help="org.apache.kafka.tools.consumer.DefaultMessageFormatter (the default) or "
                   "org.apache.kafka.tools.consumer.NoOpMessageFormatter (prints nothing); the kafka.tools.* "
                   "names too.")
@click.option("--formatter-config", type=click.Path(dir_okay=False), metavar="FILE",
              help="The formatter's properties from a file (those of --property, which wins).")
@click.option("--isolation-level", type=click.Choice(_ISOLATION_LEVELS),
              help="read_committed: only committed transactional records; read_uncommitted (default): all.")
@click.option("--consumer-property", "consumer_properties", multiple=True, metavar="KEY=VALUE",
              help="A consumer config: group.id, client.id, isolation.level, auto.offset.reset, fetch.min.bytes, "
                   "fetch.max.wait.ms, fetch.max.bytes, max.partition.fetch.bytes, max.poll.records; wins over "
                   "--consumer.config.")
@click.option("--max-wait-ms", type=click.IntRange(min=0), default=500, show_default=True,
              help="fetch.max.wait.ms of each Fetch.")
@click.option("--group", "group_id",
              help="Consume as a member of this consumer group, coordinated by the broker (with --zookeeper: "
                   "by ZooKeeper). Committed offsets are where it starts; --from-beginning only applies to "
                   "partitions without one.")
@click.option("--zookeeper", "zookeeper_connect", metavar="HOST:PORT[,...][/chroot]",
              help="Coordinate --group through ZooKeeper (the paper's consumer group; chroot default /kafkatw).")
@click.option("--consumer.config", "consumer_config", type=click.Path(dir_okay=False), metavar="FILE",
              help="Consumer configs from a properties file (config/client.properties): group.id (when --group "
                   "is not given), client.id and the configs of --consumer-property.")
def console_consumer(bootstrap_server: str, topic: str | None, from_beginning: bool, partition: int | None,
                     offset_spec: str | None, max_messages: int | None, timeout_ms: int | None,
                     properties: tuple[str, ...], max_wait_ms: int, group_id: str | None = None,
                     zookeeper_connect: str | None = None, consumer_config: str | None = None,
                     include: str | None = None, formatter: str | None = None, formatter_config: str | None = None,
                     isolation_level: str | None = None, consumer_properties: tuple[str, ...] = ()) -> None:
    """Print a topic's messages on stdout (kafka-console-consumer.sh)."""
    if (topic is None) == (include is None):
        raise click.UsageError("Exactly one of --include/--topic is required.")
    if include is not None and partition is not None:
        raise click.UsageError("The topic is required when partition is specified.")
    props: dict[str, str] = {}
    if formatter_config:
        props = read_properties_file(formatter_config, "--formatter-config",
                                     ("print.key", "print.offset", "print.partition", "print.timestamp",
                                      "key.separator"))
    props.update(parse_properties(properties, "--property"))
    kind = FORMATTERS.get(formatter or "org.apache.kafka.tools.consumer.DefaultMessageFormatter")
    if kind is None:
        raise click.BadParameter(f"{formatter} is not served: kafkatw formats with DefaultMessageFormatter or "
                                 f"NoOpMessageFormatter (a Java class cannot be loaded)", param_hint="--formatter")
    client_id = "kafkatw-console-consumer"
    cprops: dict[str, str] = {}
    if consumer_config:
        cprops = read_properties_file(consumer_config, "--consumer.config", ("group.id", *_CONSUMER_CONFIGS))
    cprops.update(parse_properties(consumer_properties, "--consumer-property"))
    given_groups = {g for g in (group_id, cprops.get("group.id") or None) if g is not None}
    if len(given_groups) > 1:
        raise click.UsageError("The group ids provided in different places (directly using '--group', via "
                               "'--consumer-property', or via '--consumer.config') do not match. Detected group "
                               f"ids: {', '.join(sorted(given_groups))}")
    group_id = next(iter(given_groups), None)
    options = consumer_options(cprops, "--consumer-property" if consumer_properties else "--consumer.config")
    client_id = options.pop("client_id", client_id)
    if isolation_level is not None:  # Kafka's maybeMergeOptions: the flag, when given, wins
        options["isolation_level"] = isolation_level
    reset = options.pop("auto_offset_reset", None)
    if from_beginning and reset not in (None, "earliest"):
        raise click.UsageError(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}', "
                               "please remove one option")
    if reset == "earliest":
        from_beginning = True
    options.setdefault("fetch_max_wait_ms", max_wait_ms)
    max_wait_ms = options["fetch_max_wait_ms"]
    if zookeeper_connect is not None and group_id is None:
        raise click.UsageError("--zookeeper needs --group (it selects a ZooKeeper-coordinated group)")
    opts = print_options(props)
    opts["noop"] = kind == "noop"
    if group_id is not None:
        if partition is not None or offset_spec is not None:
            raise click.UsageError("--partition and --offset cannot be used with --group")
        if zookeeper_connect is not None:
            return _console_zookeeper_group(bootstrap_server, zookeeper_connect, group_id, topic, from_beginning,
                                            max_messages, timeout_ms, options, opts, include)
        return _console_coordinator_group(bootstrap_server, group_id, topic, from_beginning, max_messages,
                                          timeout_ms, options, opts, client_id, include)
    if offset_spec is not None:
        if partition is None:
            raise click.UsageError("The partition is required when offset is specified.")
        if from_beginning:
            raise click.UsageError("Options from-beginning and offset cannot be specified together.")
        if offset_spec not in ("earliest", "latest"):
            try:
                if int(offset_spec) < 0:
                    raise ValueError
            except ValueError:
                raise click.BadParameter("must be a non-negative integer, 'earliest' or 'latest'",
                                         param_hint="--offset") from None
    from kafkatw.client.blocking import BlockingConsumer
    from kafkatw.errors import KafkaError

    out = sys.stdout.buffer
    processed = 0
    _consume.processed = 0  # type: ignore[attr-defined]
    try:
        with BlockingConsumer(bootstrap_server, **client_security(), client_id=client_id,
                              auto_offset_reset="earliest" if from_beginning else "latest", **options) as consumer:
            processed = _consume(consumer, out, topic, from_beginning, partition, offset_spec, max_messages,
                                 timeout_ms, opts, include, bootstrap_server, client_id)
    except KeyboardInterrupt:
        processed = _consume.processed  # type: ignore[attr-defined]
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
    except (KafkaError, OSError, ValueError) as e:
        click.echo(f"ERROR Error processing message, terminating consumer process: {describe_error(e)}", err=True)
        click.echo(f"Processed a total of {_consume.processed} messages", err=True)  # type: ignore[attr-defined]
        sys.exit(1)
    click.echo(f"Processed a total of {processed} messages", err=True)


def _write(out: BinaryIO, record: Any, opts: dict[str, Any]) -> None:
    if not opts.get("noop"):
        out.write(format_record(record, record.partition, record.timestamp_type, opts) + b"\n")


def _included_topics(bootstrap_server: str, client_id: str, include: str) -> list[str]:
    """The topics of C{--include} (Metadata); none is an error (the consumer would wait for nothing)."""
    from kafkatw.client.blocking import BlockingAdminClient
    from kafkatw.errors import KafkaError

    with BlockingAdminClient(bootstrap_server, **client_security(), client_id=client_id) as admin:
        topics = select_topics(admin.list_topics(), include)
    if not topics:
        raise KafkaError(f"no topic matches --include {include}")
    return topics


def _consume(consumer: Any, out: BinaryIO, topic: str | None, from_beginning: bool, partition: int | None,
             offset_spec: str | None, max_messages: int | None, timeout_ms: int | None,
             opts: dict[str, Any], include: str | None = None, bootstrap_server: str = "",
             client_id: str = "kafkatw-console-consumer") -> int:
    from kafkatw.errors import KafkaError

    _consume.processed = 0  # type: ignore[attr-defined]
    if include is not None:
        tps = [(t, p) for t in _included_topics(bootstrap_server, client_id, include)
               for p in sorted(consumer.partitions_for(t))]
    else:
        available = consumer.partitions_for(topic)
        if partition is not None:
            if partition not in available:
                raise KafkaError(f"partition {partition} of {topic} does not exist ({len(available)} partitions)")
            partitions = [partition]
        else:
            partitions = sorted(available)
        tps = [(topic, p) for p in partitions]
    consumer.assign(tps)
    spec = offset_spec or ("earliest" if from_beginning else "latest")
    if spec == "earliest":
        consumer.seek_to_beginning(*tps)
    elif spec == "latest":
        consumer.seek_to_end(*tps)
    else:
        consumer.seek(tps[0], int(spec))
    last_message = time.monotonic()
    processed = 0
    while True:
        wait_ms = 1000
        if timeout_ms is not None:
            wait_ms = max(0, timeout_ms - int((time.monotonic() - last_message) * 1000))
        records = consumer.poll(wait_ms)
        for record in records:
            _write(out, record, opts)
            processed += 1
            _consume.processed = processed  # type: ignore[attr-defined]
            if max_messages is not None and processed >= max_messages:
                out.flush()
                return processed
        if records:
            out.flush()
            last_message = time.monotonic()
        elif timeout_ms is not None and (time.monotonic() - last_message) * 1000 >= timeout_ms:
            return processed


def _console_coordinator_group(bootstrap_server: str, group_id: str, topic: str | None, from_beginning: bool,
                               max_messages: int | None, timeout_ms: int | None, options: dict[str, Any],
                               opts: dict[str, Any], client_id: str = "kafkatw-console-consumer",
                               include: str | None = None) -> None:
    """
    C{console-consumer --group G}: print the records of the partitions the
    broker's group coordinator gives this member (a
    L{kafkatw.client.blocking.BlockingConsumer} with a C{group_id}; auto
    commit, and a commit on exit: at least once).
    """
    from kafkatw.client.blocking import BlockingConsumer
    from kafkatw.errors import KafkaError

    out = sys.stdout.buffer
    processed = 0
    group = None

    def close() -> None:
        if group is not None:
            try:
                group.close()
            except (KafkaError, OSError):
                pass

    try:
        topics = [topic] if include is None else _included_topics(bootstrap_server, client_id, include)
        group = BlockingConsumer(bootstrap_server, group_id=group_id, client_id=client_id, **client_security(),
                                 auto_offset_reset="earliest" if from_beginning else "latest", **options)
        for name in topics:
            group.partitions_for(name)  # an unknown topic fails here, as without --group
        group.subscribe(topics)
        group.wait_for_assignment()
        last_message = time.monotonic()
        while True:
            wait_ms = 1000
            if timeout_ms is not None:
                wait_ms = max(0, timeout_ms - int((time.monotonic() - last_message) * 1000))
            left = None if max_messages is None else max_messages - processed
            records = group.poll(wait_ms, left)
            for record in records:
                _write(out, record, opts)
                processed += 1
            if records:
                out.flush()
                last_message = time.monotonic()
            if max_messages is not None and processed >= max_messages:
                break
            if not records and timeout_ms is not None and (time.monotonic() - last_message) * 1000 >= timeout_ms:
                break
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
    except (KafkaError, OSError, ValueError) as e:
        close()
        click.echo(f"ERROR Error processing message, terminating consumer process: {describe_error(e)}", err=True)
        click.echo(f"Processed a total of {processed} messages", err=True)
        sys.exit(1)
    close()
    click.echo(f"Processed a total of {processed} messages", err=True)


def _console_zookeeper_group(bootstrap_server: str, zookeeper_connect: str, group_id: str, topic: str | None,
                             from_beginning: bool, max_messages: int | None, timeout_ms: int | None,
                             options: dict[str, Any], opts: dict[str, Any], include: str | None = None) -> None:
    """
    C{kafkatw console-consumer --group G --zookeeper Z}: print the records of
    the partitions this member owns (L{kafkatw.client.blocking_group.BlockingZookeeperConsumerGroup}; auto
    commit, at least once).  A new group starts at the log end, or at the log
    start with C{--from-beginning} (Kafka 0.8's C{auto.offset.reset}).
    """
    from kafkatw.client.blocking_group import BlockingZookeeperConsumerGroup

    out = sys.stdout.buffer
    processed = 0
    group = None
    try:
        # --include: the paper's white-list subscription, which follows topics created later
        group = BlockingZookeeperConsumerGroup(
            group_id, None if include is not None else [topic], include, zookeeper_connect=zookeeper_connect,
            bootstrap_servers=bootstrap_server, **client_security(),
            auto_offset_reset="smallest" if from_beginning else "largest", **options)
        last_message = time.monotonic()
        while True:
            wait_ms = 1000
            if timeout_ms is not None:
                wait_ms = max(0, timeout_ms - int((time.monotonic() - last_message) * 1000))
            # never more than --max-messages: close() commits every record returned
            records = group.poll(wait_ms, None if max_messages is None else max_messages - processed)
            for record in records:
                _write(out, record, opts)
                processed += 1
            if max_messages is not None and processed >= max_messages:
                out.flush()
                return _zookeeper_group_done(group, processed)
            if records:
                out.flush()
                last_message = time.monotonic()
            elif timeout_ms is not None and (time.monotonic() - last_message) * 1000 >= timeout_ms:
                return _zookeeper_group_done(group, processed)
    except KeyboardInterrupt:
        _zookeeper_group_done(group, processed)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
    except Exception as e:
        click.echo(f"ERROR Error processing message, terminating consumer process: {type(e).__name__}: {e}", err=True)
        click.echo(f"Processed a total of {processed} messages", err=True)
        sys.exit(1)


def _zookeeper_group_done(group: Any, processed: int) -> None:
    if group is not None:
        group.close()
    click.echo(f"Processed a total of {processed} messages", err=True)
