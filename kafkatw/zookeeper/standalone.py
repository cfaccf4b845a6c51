"""
Run a ZooKeeper server in the foreground: the body of C{kafkatw zookeeper}.

The server is a child process (see L{kafkatw.zookeeper.embedded}); SIGINT and
SIGTERM are forwarded to it, and L{run} returns its exit status once it exited.
When this process dies otherwise (SIGKILL), the server gets SIGTERM (the
parent-death signal), so no ZooKeeper is left running without its command.
It is a standalone server, or, given the ensemble's C{server.N} lines and its
own C{myid}, one member of an ensemble.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import Any

from kafkatw.zookeeper.embedded import (
    QuorumServer,
    ZooKeeperStartError,
    server_mode,
    start_blocking,
    start_error_from_log,
    stop_blocking,
    wait_listening,
    wait_ready,
)

__all__ = ["run"]


def run(port: int, data_dir: str, tick_time_ms: int = 2000, ready_timeout_s: float = 30.0,
        port_setting: str = "--port", bind_address: str = "127.0.0.1", servers: Sequence[QuorumServer] = (),
        myid: int | None = None, init_limit: int = 10, sync_limit: int = 5) -> int:
    """
    Start ZooKeeper on C{bind_address:port} with data in C{data_dir}; block
    until it exits (Ctrl-C or SIGTERM stop it cleanly).  "ZooKeeper ready" is
    printed (to stderr) only once I{this} server serves (L{wait_ready} with its
    process).

    A member of an ensemble (C{servers} and C{myid}) serves only once a quorum
    of the ensemble runs, which may take as long as the other machines take
    to start: it first prints that it listens and waits for its quorum
    (within C{ready_timeout_s}), then "ZooKeeper ready" with its mode
    (C{leader} or C{follower}) whenever the quorum forms, without a deadline.

    @param port_setting: how the user moves the port, named when it is taken.
    @return: 0 after a forwarded SIGTERM/SIGINT; otherwise the server's exit
        status (128 + N when signal N killed it, as a shell reports it),
        after a line saying how it ended (and, for an exit of its own, the
        error from its log).
    @raise ValueError: a bad ensemble (L{kafkatw.zookeeper.embedded.check_ensemble}).
    @raise ZooKeeperNotInstalledError: java or the jars are missing.
    @raise ZooKeeperPortInUseError: the port (or this member's peer or election port) is taken.
    @raise ZooKeeperStartError: the server did not become ready.
    """
    popen = start_blocking(data_dir, port, tick_time_ms, log_path=None, port_setting=port_setting,
                           bind_address=bind_address, servers=servers, myid=myid, init_limit=init_limit,
                           sync_limit=sync_limit, die_with_parent=True)
    stopping = False

    def forward(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    log_path = popen.kafkatw_log_path  # type: ignore[attr-defined]
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            if servers:
                wait_listening(port, ready_timeout_s, popen)
                quorum = len(servers) // 2 + 1
                say(f"ZooKeeper member {myid} of {len(servers)} listening on {bind_address}:{port};"
                    f" waiting for a quorum ({quorum} of the {len(servers)} members running)")
                wait_ready(port, None, popen)
                mode = server_mode(port, popen.kafkatw_host)  # type: ignore[attr-defined]
                say(f"ZooKeeper ready on {bind_address}:{port} (member {myid} of {len(servers)},"
                    f" {mode or 'electing'}; data {data_dir}, log {log_path})")
            else:
                wait_ready(port, ready_timeout_s, popen)
                say(f"ZooKeeper ready on {bind_address}:{port} (data {data_dir}, log {log_path})")
        except ZooKeeperStartError:
            if not stopping:
                raise
        status = popen.wait()
        if stopping and status in (0, 143, -signal.SIGTERM):
            return 0
        if status < 0:  # a signal from outside (the OOM killer, a person): the log does not say why
            how, reason = f"was killed by signal {-status}", ""
        else:
            how = f"exited with status {status}"
            reason = start_error_from_log(log_path, popen.kafkatw_log_offset)  # type: ignore[attr-defined]
        say(f"ZooKeeper on {bind_address}:{port} {how}{': ' + reason if reason else ''}; log: {log_path}")
        return 128 - status if status < 0 else status
    finally:
        if popen.poll() is None:
            stop_blocking(popen)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
