"""
C{kafkatw producer-perf-test}, as Kafka's C{kafka-producer-perf-test.sh}
(C{org.apache.kafka.tools.ProducerPerformance}): same flags, same output.

    kafkatw producer-perf-test --topic t --num-records 1000000 --record-size 200 \\
        --throughput -1 --producer-props acks=1 linger.ms=5 bootstrap.servers=localhost:9092

Every 5 s a line ``N records sent, X records/sec (Y MB/sec), Z ms avg latency, W ms
max latency.``; at the end ``N records sent, X records/sec (Y MB/sec), A ms avg
latency, M ms max latency, p50 ms 50th, p95 ms 95th, p99 ms 99th, p999 ms
99.9th.`` (MB = 2**20 bytes, as Kafka prints it).  Latency is from C{send} to
the record's acknowledgement, sampled as Kafka's tool does: one sample per
chunk of records (its send time read once, a fraction of a millisecond,
before the chunk; its last record's acknowledgement), weighted by the
chunk's records in the averages.  A chunk is one round of requests in flight:
C{max.in.flight.requests.per.connection} batches' worth of records (at most
1,000), or 5 ms' worth at a C{--throughput}.  On a terminal a C{rich} progress bar runs on stderr.

The producer runs on the reactor (L{twisted.internet.task.react}), after
C{gc.freeze()} (see docs/clients.md, "Throughput"); records are
sent in chunks between which the reactor runs, and the loop pauses while
C{buffer.memory} is more than half used (L{Producer.ready}).
"""

from __future__ import annotations

import gc
import operator
import os
import random
import sys
import time
from array import array
from functools import partial
from typing import Any, Callable

import click

from ._common import client_security, command_config_option, describe_error, fail, parse_properties

__all__ = ["producer_perf_test", "producer_options"]

_MB = 1024 * 1024

#: Kafka producer config name -> (Producer keyword, converter)
_PRODUCER_CONFIGS: dict[str, tuple[str, Any]] = {
    "bootstrap.servers": ("bootstrap_servers", str),
    "client.id": ("client_id", str),
    "acks": ("acks", lambda v: "all" if v.strip().lower() in ("all", "-1") else int(v)),
    "batch.size": ("batch_size", int),
    "linger.ms": ("linger_ms", float),
    "compression.type": ("compression_type", lambda v: None if v.strip().lower() == "none" else v.strip().lower()),
    "retries": ("retries", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", int),
    "buffer.memory": ("buffer_memory", int),
    "max.request.size": ("max_request_size", int),
    "enable.idempotence": ("enable_idempotence", lambda v: v.strip().lower() == "true"),
    "max.block.ms": ("max_block_ms", int),
}


def producer_options(props: dict[str, str], warn: bool = True) -> dict[str, Any]:
    """
    Kafka producer configs (C{acks}, C{linger.ms}, …) as L{Producer} keywords.
    Unknown names are ignored with a warning on stderr, as Kafka's clients log them.

    @raise click.BadParameter: a value does not convert.
    """
    options: dict[str, Any] = {}
    for name, value in props.items():
        known = _PRODUCER_CONFIGS.get(name)
        if known is None:
            if warn:
                click.echo(f"WARN The configuration '{name}' was supplied but isn't a known config.", err=True)
            continue
        keyword, convert = known
        try:
            options[keyword] = convert(value)
        except ValueError:
            raise click.BadParameter(f"invalid value {value!r} for {name}", param_hint="--producer-props") from None
    return options


def _percentile(sorted_ms: array, fraction: float) -> int:
    if not sorted_ms:
        return 0
    return int(sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * fraction))])


class _Stats:
    """
    Kafka's ProducerPerformance.Stats: a window line every 5 s, totals at the
    end.  As Kafka's tool, latencies are sampled: one per chunk of records
    sent together (the chunk's last record, acknowledged last on its
    partition), standing for the chunk's records in the averages and counts;
    percentiles are over the samples.  Every other record's acknowledgement
    only looks for an error.
    """

    def __init__(self, num_records: int, record_size: int, report_every_s: float = 5.0) -> None:
        self.start = time.monotonic()
        self.record_size = record_size
        self.latencies = array("d")  # ms, one per sample
        self.weights = array("q")  # records each sample stands for
        self.report_every_s = report_every_s
        self.window_start = self.start
        self.window_index = 0
        self.errors: list[Exception] = []
        append = self.latencies.append
        weigh = self.weights.append
        errors = self.errors
        monotonic = time.monotonic

        def record(sent_at: float, metadata: Any, error: Exception | None, records: int = 1) -> None:
            if error is None:
                append((monotonic() - sent_at) * 1000.0)
                weigh(records)
            else:
                errors.append(error)

        def check(metadata: Any, error: Exception | None) -> None:
            if error is not None:
                errors.append(error)

        #: C{record(sent_at, metadata, error, records=1)}: a L{Producer.send}
        #: C{on_delivery} callback once C{sent_at} (L{time.monotonic}) and the
        #: records the sample stands for are bound.
        self.record = record
        #: C{check(metadata, error)}: the C{on_delivery} of the records not sampled.
        self.check = check

    @property
    def count(self) -> int:
        return sum(self.weights)

    def maybe_print_window(self) -> None:
        now = time.monotonic()
        if now - self.window_start >= self.report_every_s:
            self.print_window(now)

    def print_window(self, now: float) -> None:
        elapsed = now - self.window_start
        window = self.latencies[self.window_index:]
        weights = self.weights[self.window_index:]
        count = sum(weights)
        rate = count / elapsed if elapsed > 0 else 0.0
        avg = sum(map(operator.mul, window, weights)) / count if count else 0.0
        click.echo(f"{count} records sent, {rate:.1f} records/sec"
                   f" ({rate * self.record_size / _MB:.2f} MB/sec), {avg:.1f} ms avg latency,"
                   f" {max(window, default=0.0):.1f} ms max latency.")
        self.window_start = now
        self.window_index += len(window)

    def final_line(self) -> str:
        elapsed = time.monotonic() - self.start
        count = self.count
        rate = count / elapsed if elapsed > 0 else 0.0
        avg = sum(map(operator.mul, self.latencies, self.weights)) / count if count else 0.0
        ordered = array("d", sorted(self.latencies))
        return (f"{count} records sent, {rate:f} records/sec ({rate * self.record_size / _MB:.2f} MB/sec),"
                f" {avg:.2f} ms avg latency, {max(self.latencies, default=0.0):.2f} ms max latency,"
                f" {_percentile(ordered, 0.5)} ms 50th, {_percentile(ordered, 0.95)} ms 95th,"
                f" {_percentile(ordered, 0.99)} ms 99th, {_percentile(ordered, 0.999)} ms 99.9th.")


async def _run(reactor: Any, topic: str, num_records: int, payload: bytes, throughput: float,
               options: dict[str, Any], progress: Any) -> str:
    from twisted.internet import task

    from kafkatw.client.producer import Producer  # imported before gc.freeze(), with the rest of start-up

    # What start-up made (modules, classes: most of the process's objects) moves
    # out of the garbage collector's sight: its full collections, which the
    # records in flight trigger, then walk only those (docs/clients.md).
    gc.freeze()
    producer = Producer(reactor, **options)
    stats = _Stats(num_records, len(payload))
    errors = stats.errors
    record = stats.record
    check = stats.check
    send = producer.send
    monotonic = time.monotonic
    # Between chunks the reactor reads acknowledgements and writes requests.  A
    # chunk of one round of requests in flight (max.in.flight batches) has them
    # written together and their acknowledgements read together: a reactor turn
    # costs as much as tens of sends, and one per batch was a quarter of the CPU.
    per_batch = max(1, options.get("batch_size", 16384) // (len(payload) + 11))
    per_round = per_batch * options.get("max_in_flight_requests_per_connection", 5)
    chunk = max(50, min(1000, per_round)) if throughput <= 0 else max(1, min(1000, int(throughput / 200)))
    start = monotonic()
    sent = 0
    try:
        while sent < num_records and not errors:
            n = min(chunk, num_records - sent)
            # One send time per chunk (a chunk takes a fraction of a ms; Kafka's
            # tool reads a ms clock per record): latencies err by at most that,
            # upwards.  The chunk's last record is its latency sample.
            sent_at = monotonic()
            for _ in range(n - 1):
                send(topic, payload, on_delivery=check)
            send(topic, payload, on_delivery=partial(record, sent_at, records=n))
            sent += n
            stats.maybe_print_window()
            if progress is not None:
                progress(sent)
            await producer.ready()
            if throughput > 0:
                ahead = sent / throughput - (monotonic() - start)
                await task.deferLater(reactor, max(0.0, ahead), lambda: None)
            else:
                # Two reactor turns before the next chunk: the requests that the
                # acknowledgements just freed a place for are written to the
                # socket first (a turn runs its timed calls, then its reads and
                # writes), so the broker appends them while this loop sends the
                # next records, instead of after (on 2 cores: about 360k -> 500k
                # records/s with the defaults, docs/clients.md).
                await task.deferLater(reactor, 0, lambda: None)
                await task.deferLater(reactor, 0, lambda: None)
        await producer.flush()
    finally:
        await producer.close()
    if errors:
        raise errors[0]
    return stats.final_line()


@click.command("producer-perf-test", short_help="Producer throughput (kafka-producer-perf-test.sh).",
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--topic", required=True, help="The topic to produce to.")
@click.option("--num-records", type=click.IntRange(min=1), required=True, help="Number of records to produce.")
@click.option("--record-size", type=click.IntRange(min=0), help="Record size in bytes.")
@click.option("--payload-file", type=click.Path(exists=True, dir_okay=False),
              help="Send lines of this file (chosen at random) instead of --record-size random bytes.")
@click.option("--throughput", type=float, required=True,
              help="Throttle to about this many records/s; -1: no throttle.")
@click.option("--producer-props", "producer_props", multiple=True, metavar="PROP=VALUE",
              help="Producer configs: acks=1 linger.ms=5 batch.size=16384 compression.type=lz4 bootstrap.servers=H:P")
@click.option("--producer.config", "producer_config", type=click.Path(exists=True, dir_okay=False),
              help="A producer config properties file.")
@click.option("--bootstrap-server", "bootstrap_server", metavar="HOST:PORT", help="Overrides bootstrap.servers.")
@command_config_option
@click.pass_context
def producer_perf_test(ctx: click.Context, topic: str, num_records: int, record_size: int | None,
                       payload_file: str | None, throughput: float, producer_props: tuple[str, ...],
                       producer_config: str | None, bootstrap_server: str | None) -> None:
    """Produce records as fast as possible (or at --throughput) and print Kafka's perf figures."""
    extra = [a for a in ctx.args if "=" in a and not a.startswith("-")]
    unknown = [a for a in ctx.args if a not in extra]
    if unknown:
        from .kafka_flags import refusal

        for arg in unknown:  # a Kafka flag kafkatw refuses: why
            reason = refusal("producer-perf-test", arg.split("=", 1)[0])
            if reason is not None:
                raise click.UsageError(f"kafkatw producer-perf-test does not serve {arg.split('=', 1)[0]}: {reason}.")
        raise click.UsageError(f"unexpected arguments: {' '.join(unknown)}")
    if (record_size is None) == (payload_file is None):
        raise click.UsageError("give either --record-size or --payload-file")
    props: dict[str, str] = {}
    if producer_config:
        with open(producer_config) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith(("#", "!")) and "=" in line:
                    key, _, value = line.partition("=")
                    props[key.strip()] = value.strip()
    props.update(parse_properties([*producer_props, *extra], "--producer-props"))
    if bootstrap_server:
        props["bootstrap.servers"] = bootstrap_server
    if "bootstrap.servers" not in props:
        raise click.UsageError("give --bootstrap-server or bootstrap.servers in --producer-props")
    options = {**producer_options(props), **client_security()}
    if payload_file:
        with open(payload_file, "rb") as f:
            lines = [line.rstrip(b"\n") for line in f if line.strip()]
        if not lines:
            raise click.UsageError(f"{payload_file} has no payloads")
        payload = random.choice(lines)
    else:
        payload = bytes(random.choice(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(record_size or 0))

    from twisted.internet import defer, task

    from kafkatw.errors import KafkaError

    outcome: dict[str, Any] = {}

    def done(result: Any) -> None:
        if isinstance(result, str):
            outcome["line"] = result
        else:
            outcome["error"] = result.value
            if not isinstance(result.value, (KafkaError, OSError, ValueError)):
                result.printTraceback()

    def main(reactor: Any) -> defer.Deferred:
        from kafkatw.client.clock import use_monotonic_clock

        use_monotonic_clock(reactor)  # linger and timeouts unmoved by a step of the machine's clock
        return defer.ensureDeferred(_run(reactor, topic, num_records, payload, throughput, options,
                                         progress)).addBoth(done)

    progress: Callable[[int], None] | None = None
    bar = None
    if sys.stdout.isatty() and not os.environ.get("KAFKATW_NO_PROGRESS"):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("[bold]producing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       transient=True)
        task_id = bar.add_task("records", total=num_records)
        bar.start()

        def update_bar(done: int) -> None:
            bar.update(task_id, completed=done)

        progress = update_bar
    try:
        task.react(main)
    except SystemExit:
        pass
    finally:
        if bar is not None:
            bar.stop()
    if "error" in outcome:
        fail(f"ERROR Error when sending message to topic {topic}: {describe_error(outcome['error'])}")
    click.echo(outcome.get("line", ""))
