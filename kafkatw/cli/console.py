"""
C{kafkatw console-producer} and C{kafkatw console-consumer}, as Kafka's
C{kafka-console-producer.sh} and C{kafka-console-consumer.sh}.

The producer reads lines from stdin and sends them as record batches: per
partition, a batch is sent when it reaches C{batch.size} (16 KB), when no line
arrived for C{linger.ms} (1000 ms, the console producer's C{--timeout}), or at
end of input.  Keyed lines go to the partition the Java client's default
partitioner picks (murmur2); unkeyed lines stick to one partition per batch,
round-robin.
"""

from __future__ import annotations

import queue
import random
import sys
import threading
import time
from typing import Any, BinaryIO

import click

from kafkatw.client.partitioner import partition_for_key
from kafkatw.client.wire import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, WireClient
from kafkatw.errors import ErrorCode, KafkaError
from kafkatw.protocol.records import COMPRESSION_CODECS, decode_batches, encode_batch

from ._common import bootstrap_option, describe_error, fail, parse_properties

__all__ = ["console_producer", "console_consumer", "format_record"]

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


# --- producer ---------------------------------------------------------------------------


def _read_lines(stream: BinaryIO, out: queue.Queue) -> None:
    try:
        for line in stream:
            out.put(line)
    finally:
        out.put(None)


class _Accumulator:
    """Per-partition pending records of the console producer."""

    def __init__(self, client: WireClient, topic: str, num_partitions: int, acks: int,
                 compression: int, batch_bytes: int) -> None:
        self.client = client
        self.topic = topic
        self.num_partitions = num_partitions
        self.acks = acks
        self.compression = compression
        self.batch_bytes = batch_bytes
        self.pending: dict[int, list[tuple[bytes | None, bytes, list, int]]] = {}
        self.sizes: dict[int, int] = {}
        self.sticky = random.randrange(num_partitions)
        self.sent = 0

    def add(self, key: bytes | None, value: bytes) -> None:
        if key is not None:
            partition = partition_for_key(key, self.num_partitions)
        else:
            partition = self.sticky
        self.pending.setdefault(partition, []).append((key, value, [], int(time.time() * 1000)))
        size = self.sizes[partition] = self.sizes.get(partition, 0) + len(value) + len(key or b"") + 16
        if size >= self.batch_bytes:
            self.send(partition)

    def send(self, partition: int) -> None:
        records = self.pending.pop(partition, None)
        self.sizes.pop(partition, None)
        if not records:
            return
        if partition == self.sticky:
            self.sticky = (self.sticky + 1) % self.num_partitions
        batch = encode_batch(records, compression=self.compression)
        self.client.produce(self.topic, partition, batch, acks=self.acks)
        self.sent += len(records)

    def flush(self) -> None:
        for partition in list(self.pending):
            self.send(partition)


@click.command("console-producer")
@bootstrap_option
@click.option("--topic", required=True, help="The topic to produce to.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="parse.key=true, key.separator=SEP (default tab), ignore.error=true.")
@click.option("--producer-property", "producer_properties", multiple=True, metavar="KEY=VALUE",
              help="acks=all|1|0, compression.type, batch.size, linger.ms.")
@click.option("--compression-codec", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              help="Compression of the record batches.")
@click.option("--batch-size", type=click.IntRange(min=1), help="batch.size in bytes (default 16384).")
@click.option("--timeout", "linger_ms", type=click.IntRange(min=0),
              help="linger.ms: send a partial batch after this long without input (default 1000).")
def console_producer(bootstrap_server: str, topic: str, properties: tuple[str, ...],
                     producer_properties: tuple[str, ...], compression_codec: str | None,
                     batch_size: int | None, linger_ms: int | None) -> None:
    """Send lines of stdin to a topic (kafka-console-producer.sh)."""
    props = parse_properties(properties, "--property")
    pprops = parse_properties(producer_properties, "--producer-property")
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

    lines: queue.Queue = queue.Queue(maxsize=10000)
    threading.Thread(target=_read_lines, args=(sys.stdin.buffer, lines), daemon=True).start()
    line_number = 0
    try:
        with WireClient(bootstrap_server) as client:
            acc = _Accumulator(client, topic, client.partitions_for(topic), _ACKS[acks_text],
                               COMPRESSION_CODECS[codec_name], batch_bytes)
            while True:
                try:
                    line = lines.get(timeout=linger) if acc.pending else lines.get()
                except queue.Empty:
                    acc.flush()
                    continue
                if line is None:
                    break
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
                            acc.flush()
                            fail(f"No key separator found on line number {line_number}: '{line.decode('utf-8', 'replace')}'")
                else:
                    value = line
                acc.add(key, value)
            acc.flush()
    except KeyboardInterrupt:
        sys.exit(130)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"ERROR Error when sending message to topic {topic}: {describe_error(e)}")


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


def _resolve_offset(client: WireClient, topic: str, partition: int, spec: str) -> int:
    if spec == "earliest":
        return client.list_offsets(topic, partition, EARLIEST_TIMESTAMP)
    if spec == "latest":
        return client.list_offsets(topic, partition, LATEST_TIMESTAMP)
    return int(spec)


@click.command("console-consumer")
@bootstrap_option
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
def console_consumer(bootstrap_server: str, topic: str, from_beginning: bool, partition: int | None,
                     offset_spec: str | None, max_messages: int | None, timeout_ms: int | None,
                     properties: tuple[str, ...], max_wait_ms: int) -> None:
    """Print a topic's messages on stdout (kafka-console-consumer.sh)."""
    props = parse_properties(properties, "--property")
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
    opts = {
        "print_key": _truthy(props.get("print.key")),
        "print_offset": _truthy(props.get("print.offset")),
        "print_partition": _truthy(props.get("print.partition")),
        "print_timestamp": _truthy(props.get("print.timestamp")),
        "key_separator": props.get("key.separator", "\t").encode(),
    }
    out = sys.stdout.buffer
    processed = 0
    try:
        with WireClient(bootstrap_server) as client:
            processed = _consume(client, out, topic, from_beginning, partition, offset_spec, max_messages,
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


def _consume(client: WireClient, out: BinaryIO, topic: str, from_beginning: bool, partition: int | None,
             offset_spec: str | None, max_messages: int | None, timeout_ms: int | None,
             max_wait_ms: int, opts: dict[str, Any]) -> int:
    _consume.processed = 0  # type: ignore[attr-defined]
    num_partitions = client.partitions_for(topic)
    if partition is not None:
        if partition >= num_partitions:
            raise KafkaError(f"partition {partition} of {topic} does not exist ({num_partitions} partitions)")
        partitions = [partition]
    else:
        partitions = list(range(num_partitions))
    reset = EARLIEST_TIMESTAMP if from_beginning else LATEST_TIMESTAMP
    spec = offset_spec or ("earliest" if from_beginning else "latest")
    positions = {p: _resolve_offset(client, topic, p, spec) for p in partitions}
    if timeout_ms is not None:
        max_wait_ms = min(max_wait_ms, max(timeout_ms, 1))
    last_message = time.monotonic()
    processed = 0
    while True:
        results = client.fetch_many(topic, positions, max_wait_ms=max_wait_ms)
        got_any = False
        for p, (code, _hw, data) in results.items():
            if code == ErrorCode.offset_out_of_range:
                positions[p] = client.list_offsets(topic, p, reset)
                continue
            if code != ErrorCode.none:
                continue  # leadership errors: fetch_many dropped the cached leader
            for batch in decode_batches(data):
                if batch.is_control:
                    positions[p] = max(positions[p], batch.next_offset)
                    continue
                for record in batch.records:
                    if record.offset < positions[p]:
                        continue
                    out.write(format_record(record, p, batch.timestamp_type, opts) + b"\n")
                    processed += 1
                    _consume.processed = processed  # type: ignore[attr-defined]
                    positions[p] = record.offset + 1
                    got_any = True
                    if max_messages is not None and processed >= max_messages:
                        out.flush()
                        return processed
                positions[p] = max(positions[p], batch.next_offset)
        if got_any:
            out.flush()
            last_message = time.monotonic()
        elif timeout_ms is not None and (time.monotonic() - last_message) * 1000 >= timeout_ms:
            return processed
        if not results or all(code != ErrorCode.none for code, _, _ in results.values()):
            time.sleep(0.1)
