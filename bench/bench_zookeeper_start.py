"""
How long a fresh ZooKeeper (Debian's 3.8) takes to answer, and to serve.

Starts the server C{--runs} times and polls it every C{--poll-ms} from the
spawn on.  Prints one JSON line per run: seconds until C{ruok} first answered
C{imok}, until C{srvr} first reported the server's mode (it serves sessions),
and the gap between the two, which is why readiness probes use C{srvr}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from kafkatw.zookeeper.embedded import (
    find_free_port,
    ruok,
    serving,
    start_blocking,
    stop_blocking,
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--poll-ms", type=float, default=2.0)
    p.add_argument("--timeout-s", type=float, default=30.0)
    args = p.parse_args()
    for run in range(args.runs):
        port = find_free_port()
        with tempfile.TemporaryDirectory(prefix="kafkatw-bench-zk-") as data_dir:
            popen = start_blocking(data_dir, port, tick_time_ms=500)
            started = time.monotonic()
            imok_s = serving_s = None
            try:
                while serving_s is None and time.monotonic() - started < args.timeout_s:
                    if imok_s is None and ruok(port):
                        imok_s = time.monotonic() - started
                    if serving(port):
                        serving_s = time.monotonic() - started
                    time.sleep(args.poll_ms / 1000.0)
            finally:
                stop_blocking(popen)
        gap = None if imok_s is None or serving_s is None else round(serving_s - imok_s, 3)
        print(json.dumps({"run": run, "imok_s": imok_s and round(imok_s, 3),
                          "serving_s": serving_s and round(serving_s, 3), "gap_s": gap}))


if __name__ == "__main__":
    main()
