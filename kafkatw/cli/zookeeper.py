"""
C{kafkatw zookeeper}: run a ZooKeeper server in the foreground: standalone, or
one member of an ensemble (C{--myid} and the C{--server} list, ZooKeeper's
C{myid} file and C{server.N} lines).
"""

from __future__ import annotations

import sys

import click

__all__ = ["zookeeper"]


class _QuorumServerType(click.ParamType):
    name = "N=HOST:PEER_PORT:ELECTION_PORT"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        from kafkatw.zookeeper.embedded import QuorumServer

        if isinstance(value, QuorumServer):
            return value
        try:
            return QuorumServer.parse(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


@click.command(short_help="Run ZooKeeper (standalone, or a member of an ensemble) in the foreground.")
@click.option("--port", type=click.IntRange(1, 65535), default=2181, show_default=True, help="clientPort.")
@click.option("--bind-address", default="127.0.0.1", show_default=True,
              help="clientPortAddress: the address clients connect to (0.0.0.0: every interface).")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="dataDir.")
@click.option("--tick-time-ms", type=click.IntRange(min=1), default=2000, show_default=True, help="tickTime (ms).")
@click.option("--myid", type=click.IntRange(1, 255), default=None,
              help="This member's id in the ensemble (the N of its --server; written to <data-dir>/myid).")
@click.option("--server", "servers", multiple=True, type=_QuorumServerType(),
              help="A member of the ensemble, as zoo.cfg's server.N=HOST:PEER_PORT:ELECTION_PORT"
                   " (e.g. 1=zk1.example:2888:3888); repeat for each member, this one included.")
@click.option("--init-limit", type=click.IntRange(min=1), default=10, show_default=True,
              help="initLimit (ticks): how long a follower may take to connect to and sync with the leader.")
@click.option("--sync-limit", type=click.IntRange(min=1), default=5, show_default=True,
              help="syncLimit (ticks): how far a follower may fall behind the leader before it is dropped.")
def zookeeper(port: int, bind_address: str, data_dir: str, tick_time_ms: int, myid: int | None,
              servers: tuple, init_limit: int, sync_limit: int) -> None:
    """Run ZooKeeper (Debian's zookeeper package) in the foreground.

    Without --server it is a standalone server.  With the ensemble's --server
    list (the same on every member) and this member's --myid it is one member
    of an ensemble; it serves once a majority of the members run.
    """
    from kafkatw.zookeeper.embedded import ZooKeeperNotInstalledError, ZooKeeperStartError, check_ensemble
    from kafkatw.zookeeper.standalone import run

    try:
        check_ensemble(servers, myid)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    try:
        status = run(port, data_dir, tick_time_ms, port_setting="--port", bind_address=bind_address,
                     servers=servers, myid=myid, init_limit=init_limit, sync_limit=sync_limit)
    except (ZooKeeperStartError, ZooKeeperNotInstalledError) as e:
        raise click.ClickException(str(e)) from None
    sys.exit(status)
