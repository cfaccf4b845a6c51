"""
Run a ZooKeeper server in the foreground: the body of C{kafkatw zookeeper}.

The server is a child process (see L{kafkatw.zookeeper.embedded}); SIGINT and
SIGTERM are forwarded to it, and L{run} returns its exit status once it exited.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from kafkatw.zookeeper.embedded import ZooKeeperStartError, start_blocking, stop_blocking, wait_ready

__all__ = ["run"]


def run(port: int, data_dir: str, tick_time_ms: int = 2000, ready_timeout_s: float = 30.0,
        port_setting: str = "--port") -> int:
    """
    Start ZooKeeper on 127.0.0.1:C{port} with data in C{data_dir}; block until it
    exits (Ctrl-C or SIGTERM stop it cleanly).  "ZooKeeper ready" is printed
    only once I{this} server serves (L{wait_ready} with its process).

    @param port_setting: how the user moves the port, named when it is taken.
    @return: the server's exit status (0 after a forwarded SIGTERM/SIGINT).
    @raise ZooKeeperNotInstalledError: java or the jars are missing.
    @raise ZooKeeperPortInUseError: the port is taken.
    @raise ZooKeeperStartError: the server did not become ready.
    """
    popen = start_blocking(data_dir, port, tick_time_ms, log_path=None, port_setting=port_setting)
    stopping = False

    def forward(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            wait_ready(port, ready_timeout_s, popen)
        except ZooKeeperStartError:
            if not stopping:
                raise
        else:
            print(
                f"ZooKeeper ready on 127.0.0.1:{port} (data {data_dir}, log {popen.kafkatw_log_path})",  # type: ignore[attr-defined]
                file=sys.stderr,
                flush=True,
            )
        status = popen.wait()
        return 0 if stopping and status in (0, 143, -signal.SIGTERM) else status
    finally:
        if popen.poll() is None:
            stop_blocking(popen)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
