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

from kafkatw.client.blocking import BlockingConsumer, BlockingProducer
from kafkatw.errors import KafkaError
from kafkatw.protocol.records import COMPRESSION_CODECS

from ._common import (bootstrap_option, client_security, command_config_option, describe_error, fail,
                      parse_properties, read_properties_file)

__all__ = ["console_producer", "console_consumer", "format_record"]

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
def console_producer(bootstrap_server: str, topic: str, properties: tuple[str, ...],
                     producer_properties: tuple[str, ...], compression_codec: str | None,
                     batch_size: int | None, linger_ms: int | None, producer_config: str | None = None) -> None:
    """Send lines of stdin to a topic (kafka-console-producer.sh)."""
    props = parse_properties(properties, "--property")
    pprops = {}
    if producer_config:
        pprops = read_properties_file(producer_config, "--producer.config",
                                      ("acks", "compression.type", "batch.size", "linger.ms", "client.id"))
    pprops.update(parse_properties(producer_properties, "--producer-property"))
    acks_text = pprops.get("acks", "all").strip().lower()
    if acks_text not in _ACKS:
        raise click.BadParameter(f"acks must be all, -1, 0 or 1, not {acks_text!r}", param_hint="--producer-property")
    codec_name = compression_codec or pprops.get("compression.type", "none")
    if codec_name not in COMPRESSION_CODECS:
        raise click.BadParameter(f"unknown compression type {codec_name!r}", param_hint="--producer-property")
    try:
        batch_bytes = batch_size or int(pprops.get("batch.size", 16384))
        linger = (linger_ms if linger_ms is not None else int(pprops.get("linger.ms", 1000))) / 1000
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--producer-property") from None
    parse_key = _truthy(props.get("parse.key"))
    separator = props.get("key.separator", "\t").encode()
    ignore_error = _truthy(props.get("ignore.error"))
    if parse_key and not separator:
        raise click.BadParameter("key.separator must not be empty", param_hint="--property")

    line_number = 0
    pending: collections.deque = collections.deque()  # futures not yet known to have succeeded
    try:
        with BlockingProducer(bootstrap_server, **client_security(),
                              client_id=pprops.get("client.id", "kafkatw-console-producer"),
                              acks=_ACKS[acks_text],
                              compression_type=None if codec_name == "none" else codec_name,
                              batch_size=batch_bytes, linger_ms=linger * 1000) as producer:
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
                if len(pending) >= 1000:
                    _check(pending, topic, wait=False)
            producer.flush()
            _check(pending, topic, wait=True)
    except KeyboardInterrupt:
        sys.exit(130)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"ERROR Error when sending message to topic {topic}: {describe_error(e)}")


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


@click.command("console-consumer", short_help="Print a topic's records (kafka-console-consumer.sh).")
@bootstrap_option
@command_config_option
@click.option("--topic", required=True, help="The topic to consume.")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset instead of the latest.")
@click.option("--partition", type=click.IntRange(min=0), help="Consume only this partition.")
@click.option("--offset", "offset_spec", help="With --partition: an offset, 'earliest' or 'latest' (default).")
@click.option("--max-messages", type=click.IntRange(min=1), help="Exit after this many messages.")
@click.option("--timeout-ms", type=click.IntRange(min=0), help="Exit when no message arrives for this long.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="print.key, print.offset, print.partition, print.timestamp (true/false), key.separator.")
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
                   "is not given), client.id.")
def console_consumer(bootstrap_server: str, topic: str, from_beginning: bool, partition: int | None,
                     offset_spec: str | None, max_messages: int | None, timeout_ms: int | None,
                     properties: tuple[str, ...], max_wait_ms: int, group_id: str | None = None,
                     zookeeper_connect: str | None = None, consumer_config: str | None = None) -> None:
    """Print a topic's messages on stdout (kafka-console-consumer.sh)."""
    props = parse_properties(properties, "--property")
    client_id = "kafkatw-console-consumer"
    if consumer_config:
        cprops = read_properties_file(consumer_config, "--consumer.config", ("group.id", "client.id"))
        if group_id is None:
            group_id = cprops.get("group.id") or None
        client_id = cprops.get("client.id", client_id)
    if zookeeper_connect is not None and group_id is None:
        raise click.UsageError("--zookeeper needs --group (it selects a ZooKeeper-coordinated group)")
    if group_id is not None:
        if partition is not None or offset_spec is not None:
            raise click.UsageError("--partition and --offset cannot be used with --group")
        if zookeeper_connect is not None:
            return _console_zookeeper_group(bootstrap_server, zookeeper_connect, group_id, topic, from_beginning,
                                            max_messages, timeout_ms, max_wait_ms, props)
        return _console_coordinator_group(bootstrap_server, group_id, topic, from_beginning, max_messages,
                                          timeout_ms, max_wait_ms, props, client_id)
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
    opts = print_options(props)
    out = sys.stdout.buffer
    processed = 0
    _consume.processed = 0  # type: ignore[attr-defined]
    try:
        with BlockingConsumer(bootstrap_server, **client_security(), client_id=client_id,
                              auto_offset_reset="earliest" if from_beginning else "latest",
                              fetch_max_wait_ms=max_wait_ms) as consumer:
            processed = _consume(consumer, out, topic, from_beginning, partition, offset_spec, max_messages,
                                 timeout_ms, max_wait_ms, opts)
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


def _consume(consumer: BlockingConsumer, out: BinaryIO, topic: str, from_beginning: bool, partition: int | None,
             offset_spec: str | None, max_messages: int | None, timeout_ms: int | None,
             max_wait_ms: int, opts: dict[str, Any]) -> int:
    _consume.processed = 0  # type: ignore[attr-defined]
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
            out.write(format_record(record, record.partition, record.timestamp_type, opts) + b"\n")
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


def _console_coordinator_group(bootstrap_server: str, group_id: str, topic: str, from_beginning: bool,
                               max_messages: int | None, timeout_ms: int | None, max_wait_ms: int,
                               props: dict[str, str], client_id: str = "kafkatw-console-consumer") -> None:
    """
    C{console-consumer --group G}: print the records of the partitions the
    broker's group coordinator gives this member (auto commit, and a commit
    on exit: at least once).
    """
    from .coordinator_group import CoordinatorGroupConsumer

    opts = print_options(props)
    out = sys.stdout.buffer
    processed = 0
    group = None
    try:
        group = CoordinatorGroupConsumer(bootstrap_server, group_id, [topic], **client_security(),
                                         auto_offset_reset="earliest" if from_beginning else "latest",
                                         client_id=client_id, fetch_max_wait_ms=max_wait_ms)
        group.partitions_for(topic)  # an unknown topic fails here, as without --group
        group.join()
        last_message = time.monotonic()
        while True:
            wait_ms = 1000
            if timeout_ms is not None:
                wait_ms = max(0, timeout_ms - int((time.monotonic() - last_message) * 1000))
            left = None if max_messages is None else max_messages - processed
            records = group.poll(wait_ms, left)
            for record in records:
                out.write(format_record(record, record.partition, record.timestamp_type, opts) + b"\n")
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
        if group is not None:
            group.close()
        click.echo(f"ERROR Error processing message, terminating consumer process: {describe_error(e)}", err=True)
        click.echo(f"Processed a total of {processed} messages", err=True)
        sys.exit(1)
    if group is not None:
        group.close()
    click.echo(f"Processed a total of {processed} messages", err=True)


def _console_zookeeper_group(bootstrap_server: str, zookeeper_connect: str, group_id: str, topic: str,
                             from_beginning: bool, max_messages: int | None, timeout_ms: int | None,
                             max_wait_ms: int, props: dict[str, str]) -> None:
    """
    C{kafkatw console-consumer --group G --zookeeper Z}: print the records of
    the partitions this member owns (L{kafkatw.client.blocking_group.BlockingZookeeperConsumerGroup}; auto
    commit, at least once).  A new group starts at the log end, or at the log
    start with C{--from-beginning} (Kafka 0.8's C{auto.offset.reset}).
    """
    from kafkatw.client.blocking_group import BlockingZookeeperConsumerGroup

    opts = print_options(props)
    out = sys.stdout.buffer
    processed = 0
    group = None
    try:
        group = BlockingZookeeperConsumerGroup(
            group_id, [topic], zookeeper_connect=zookeeper_connect, bootstrap_servers=bootstrap_server,
            **client_security(),
            auto_offset_reset="smallest" if from_beginning else "largest", fetch_max_wait_ms=max_wait_ms)
        last_message = time.monotonic()
        while True:
            wait_ms = 1000
            if timeout_ms is not None:
                wait_ms = max(0, timeout_ms - int((time.monotonic() - last_message) * 1000))
            # never more than --max-messages: close() commits every record returned
            records = group.poll(wait_ms, None if max_messages is None else max_messages - processed)
            for record in records:
                out.write(format_record(record, record.partition, record.timestamp_type, opts) + b"\n")
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
