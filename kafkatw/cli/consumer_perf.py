"""
C{kafkatw consumer-perf-test}, as Kafka's C{kafka-consumer-perf-test.sh}
(C{ConsumerPerformance}): read C{--messages} records of a topic from the
beginning (or the end with C{--from-latest}) and print Kafka's columns::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
    nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec

Bytes are the keys' and values' bytes, MB are 1024 * 1024 bytes, as in Kafka.
There is no consumer group here: C{rebalance.time.ms} is the time to assign
the partitions and look up the starting offsets, and the C{fetch.*} figures
leave it out, as Kafka leaves out its group join.
"""

from __future__ import annotations

import datetime
import sys
import time

import click

from ._common import bootstrap_option, client_security, command_config_option, describe_error, fail

__all__ = ["consumer_perf_test"]

HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,"
          " rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def _date(seconds: float, date_format: str) -> str:
    moment = datetime.datetime.fromtimestamp(seconds)
    if date_format == "yyyy-MM-dd HH:mm:ss:SSS":
        return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"
    return moment.strftime(date_format)


def format_result(start_s: float, end_s: float, joined_s: float, total_bytes: int, total_messages: int,
                  date_format: str = "yyyy-MM-dd HH:mm:ss:SSS") -> str:
    """One line of Kafka's ConsumerPerformance figures (times in s since the epoch)."""
    elapsed = max(end_s - start_s, 1e-9)
    fetch = max(end_s - joined_s, 1e-9)
    mb = total_bytes / (1024 * 1024)
    return (f"{_date(start_s, date_format)}, {_date(end_s, date_format)}, {mb:.4f}, {mb / elapsed:.4f},"
            f" {total_messages}, {total_messages / elapsed:.4f}, {int((joined_s - start_s) * 1000)},"
            f" {int(fetch * 1000)}, {mb / fetch:.4f}, {total_messages / fetch:.4f}")


@click.command("consumer-perf-test", short_help="Consumer throughput (kafka-consumer-perf-test.sh).")
@bootstrap_option
@command_config_option
@click.option("--topic", required=True, help="The topic to consume.")
@click.option("--messages", required=True, type=click.IntRange(min=1), help="The number of messages to consume.")
@click.option("--fetch-size", type=click.IntRange(min=1), default=1048576, show_default=True,
              help="Bytes per partition per Fetch (max.partition.fetch.bytes).")
@click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=10000, show_default=True,
              help="Give up when no record arrives for this long (ms).")
@click.option("--from-latest", is_flag=True, help="Start at the end of the log instead of the beginning.")
@click.option("--hide-header", is_flag=True, help="Print the figures without the header line.")
@click.option("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", show_default=True,
              help="Format of start.time and end.time (Kafka's default, or a strftime format).")
@click.option("--max-poll-records", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Records per poll.")
def consumer_perf_test(bootstrap_server: str, topic: str, messages: int, fetch_size: int, timeout_ms: int,
                       from_latest: bool, hide_header: bool, date_format: str, max_poll_records: int) -> None:
    """Measure consumer throughput (kafka-consumer-perf-test.sh)."""
    from kafkatw.client.blocking import BlockingConsumer  # before start.time: not part of the figures
    from kafkatw.errors import KafkaError

    progress = None
    total_bytes = 0
    total_messages = 0
    try:
        start = time.time()
        with BlockingConsumer(bootstrap_server, **client_security(), client_id="kafkatw-perf-consumer",
                              auto_offset_reset="latest" if from_latest else "earliest",
                              max_partition_fetch_bytes=fetch_size, max_poll_records=max_poll_records) as consumer:
            tps = [(topic, p) for p in sorted(consumer.partitions_for(topic))]
            consumer.assign(tps)
            for tp in tps:
                consumer.position(tp)
            joined = time.time()
            if sys.stderr.isatty():
                from rich.progress import Progress

                progress = Progress(transient=True)
                progress.start()
                task = progress.add_task("consuming", total=messages)
            last_record = time.monotonic()
            timed_out = False
            end = joined
            while total_messages < messages:
                records = consumer.poll(min(1000, timeout_ms))
                if not records:
                    if (time.monotonic() - last_record) * 1000 >= timeout_ms:
                        timed_out = True
                        break
                    continue
                last_record = time.monotonic()
                end = time.time()
                records = records[:messages - total_messages]
                total_messages += len(records)
                total_bytes += sum([len(r.value or b"") + len(r.key or b"") for r in records])
                if progress is not None:
                    progress.update(task, completed=total_messages)
    except KeyboardInterrupt:
        sys.exit(130)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"ERROR {describe_error(e)}")
    finally:
        if progress is not None:
            progress.stop()
    if timed_out:
        click.echo(f"WARNING: Exiting before consuming the expected number of messages: timeout ({timeout_ms} ms)"
                   " exceeded. You can use the --timeout option to increase the timeout.", err=True)
    if not hide_header:
        click.echo(HEADER)
    click.echo(format_result(start, end, joined, total_bytes, total_messages, date_format))
