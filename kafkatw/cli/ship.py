"""
C{kafkatw ship}: follow log files as C{tail -F} and send each line to a topic
(L{kafkatw.shipper}; docs/log-shipping.md).

    kafkatw ship --bootstrap-server localhost:9092 --topic logs /var/log/syslog '/var/log/nginx/*.log'
    kafkatw ship --bootstrap-server localhost:9092 --topic logs --once /var/log/

Positions are kept in C{--state-file} (default C{~/.kafkatw/ship-state-TOPIC.json}).
On a terminal, progress (lines/s, bytes, lag per file) is drawn on stderr with
C{rich}; otherwise one summary line is printed on stderr at the end.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from typing import Any

import click

from kafkatw.client.connection import unreachable
from kafkatw.shipper import (DEFAULT_MAX_LINE_BYTES, SKIPPED_BINARY, SKIPPED_UNREADABLE, ProducerSink, Shipper,
                             ShipStats)

from ._common import bootstrap_option, client_security, command_config_option, describe_error, fail

__all__ = ["ship", "default_state_file"]


def default_state_file(topic: str) -> str:
    """C{~/.kafkatw/ship-state-TOPIC.json}: one state file per topic."""
    return os.path.join(os.path.expanduser("~"), ".kafkatw", f"ship-state-{topic}.json")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _summary(stats: ShipStats) -> str:
    line = (f"shipped {_plural(stats.lines, 'line')} ({_plural(stats.bytes, 'byte')}) "
            f"from {_plural(stats.files, 'file')}")
    extra = []
    if stats.truncated:
        extra.append(f"{stats.truncated} truncated")
    if stats.skipped:
        extra.append(f"{stats.skipped} skipped")
    return line + (f" ({', '.join(extra)})" if extra else "") + "".join(
        f"\n  {path}: skipped {_skipped_reasons(reasons)}" for path, reasons in sorted(stats.skipped_per_file.items()))


def _skipped_reasons(reasons: dict[str, int]) -> str:
    """C{{"binary": 3}} as C{"3 binary lines (a NUL byte or not UTF-8)"}; C{"unreadable"} as why."""
    out = []
    for reason, count in sorted(reasons.items()):
        if reason == SKIPPED_BINARY:
            out.append(f"{_plural(count, 'binary line')} (a NUL byte or not UTF-8)")
        elif reason == SKIPPED_UNREADABLE:
            out.append("the whole file (unreadable: permission denied or not a regular file)")
        else:
            out.append(f"{count} ({reason})")
    return "; ".join(out)


class _Progress:
    """A C{rich} live table on stderr: totals, lines/s, lag per file."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = Console(stderr=True)
        self._live = Live(console=self._console, refresh_per_second=4, transient=False)
        self._live.start()
        self._started = time.monotonic()
        self._last = (self._started, 0)
        self._rate = 0.0

    def update(self, shipper: Shipper) -> None:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        now = time.monotonic()
        then, lines = self._last
        s = shipper.stats
        if now - then >= 1.0:  # lines/s over the last second or so
            self._rate = (s.lines - lines) / (now - then)
            self._last = (now, s.lines)
        elif then == self._started and now > then:
            self._rate = s.lines / (now - then)
        header = Text(f"{s.lines} lines, {s.bytes} bytes, {self._rate:.0f} lines/s, "
                      f"{s.truncated} truncated, {s.skipped} skipped")
        table = Table()
        table.add_column("file")
        table.add_column("lag (bytes)", justify="right")
        lag = shipper.lag()
        for path in sorted(lag, key=lambda p: -lag[p])[:20]:
            table.add_row(path, str(lag[path]))
        if len(lag) > 20:
            table.add_row(f"… {len(lag) - 20} more files", str(sum(sorted(lag.values())[:-20])))
        self._live.update(Group(header, table))

    def stop(self) -> None:
        self._live.stop()


@click.command("ship", short_help="Follow log files and send each line to a topic.")
@bootstrap_option
@command_config_option
@click.option("--topic", required=True, help="The topic to send the lines to.")
@click.argument("paths", nargs=-1, required=True)
@click.option("--once", is_flag=True, help="Ship what is there now (unterminated last lines too) and exit.")
@click.option("--recursive", is_flag=True, help="Directories: their whole tree; globs: ** matches directories.")
@click.option("--state-file", type=click.Path(dir_okay=False),
              help="Positions per file (default ~/.kafkatw/ship-state-TOPIC.json).")
@click.option("--no-state", is_flag=True, help="Keep no state file: ship every file from its start.")
@click.option("--poll-interval-ms", type=click.IntRange(min=1), default=250, show_default=True,
              help="Stat the files this often when following.")
@click.option("--max-line-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_LINE_BYTES, show_default=True,
              help="Cut longer lines to this size (header 'truncated' holds the original length).")
@click.option("--skip-binary", is_flag=True, help="Skip lines with NUL bytes or invalid UTF-8 (default: ship as is).")
@click.option("--compression-codec", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default="none", help="Compression of the record batches.")
def ship(bootstrap_server: str, topic: str, paths: tuple[str, ...], once: bool, recursive: bool,
         state_file: str | None, no_state: bool, poll_interval_ms: int, max_line_bytes: int, skip_binary: bool,
         compression_codec: str) -> None:
    """Follow PATH... (files, directories, globs) and send each line to --topic as a record."""
    if no_state and state_file:
        raise click.BadParameter("give --state-file or --no-state, not both", param_hint="--no-state")
    if not no_state and not state_file:
        state_file = default_state_file(topic)

    def warn(message: str) -> None:
        click.echo(f"kafkatw ship: {message}", err=True)

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    try:
        why = unreachable(bootstrap_server)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--bootstrap-server") from None
    if why is not None:
        if once:
            fail(f"ERROR {why}")
        warn(f"{why}; will keep trying")

    try:
        sink = ProducerSink(bootstrap_server, topic, **client_security(),
                            compression_type=None if compression_codec == "none" else compression_codec)
    except Exception as e:
        fail(f"ERROR cannot start the producer: {describe_error(e)}")
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    progress = None
    # What start-up made (modules, classes, the producer) moves out of the
    # garbage collector's sight: the full collections that the records in
    # flight trigger then walk only those (docs/clients.md, "Throughput").
    gc.freeze()
    shipper = Shipper(paths, sink, state_file=None if no_state else state_file, recursive=recursive,
                      max_line_bytes=max_line_bytes, skip_binary=skip_binary, on_warning=warn)
    error: BaseException | None = None
    try:
        if sys.stderr.isatty() and not os.environ.get("KAFKATW_NO_PROGRESS"):
            progress = _Progress()
        if once:
            while shipper.poll_once() and not stop.is_set():
                if progress:
                    progress.update(shipper)
            if not stop.is_set():
                shipper.poll_once(final=True)
        else:
            while not stop.is_set():
                try:
                    busy = shipper.poll_once()
                except Exception as e:  # delivery failed: positions were rewound; try again
                    warn(f"sending failed, will retry from the last checkpoint: {_why(e, bootstrap_server)}")
                    busy = 0
                if progress:
                    progress.update(shipper)
                if not busy:
                    stop.wait(poll_interval_ms / 1000)
    except Exception as e:
        error = e
    finally:
        if progress:
            progress.update(shipper)
            progress.stop()
        shipper.close()
        try:
            sink.close()
        except Exception as e:
            error = error or e
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo(_summary(shipper.stats), err=True)
    if error is not None:
        fail(f"ERROR {_why(error, bootstrap_server)}")
    if once and not shipper.opened and not stop.is_set():
        fail(f"ERROR nothing to ship: no readable file in {' '.join(paths)}")


def _why(error: BaseException, bootstrap_server: str) -> str:
    """The error, and why the brokers cannot be reached when they cannot."""
    text = describe_error(error)
    try:
        reason = unreachable(bootstrap_server)
    except ValueError:
        reason = None
    return f"{text} ({reason})" if reason else text
