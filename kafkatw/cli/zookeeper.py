"""C{kafkatw zookeeper}: run a standalone ZooKeeper server in the foreground."""

from __future__ import annotations

import sys

import click

__all__ = ["zookeeper"]


@click.command(short_help="Run ZooKeeper in the foreground.")
@click.option("--port", type=click.IntRange(1, 65535), default=2181, show_default=True, help="clientPort.")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="dataDir.")
@click.option("--tick-time-ms", type=click.IntRange(min=1), default=2000, show_default=True, help="tickTime (ms).")
def zookeeper(port: int, data_dir: str, tick_time_ms: int) -> None:
    """Run ZooKeeper (Debian's zookeeper package) in the foreground."""
    from kafkatw.zookeeper.embedded import ZooKeeperNotInstalledError, ZooKeeperStartError
    from kafkatw.zookeeper.standalone import run

    try:
        status = run(port, data_dir, tick_time_ms, port_setting="--port")
    except (ZooKeeperStartError, ZooKeeperNotInstalledError) as e:
        raise click.ClickException(str(e)) from None
    sys.exit(status)
