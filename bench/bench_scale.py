"""
How one broker's costs grow with its partitions (issue 32's scale curve):
for each count, a fresh ZooKeeper and broker on free loopback ports, topics
of 100 partitions each (replication factor 1), then

  - topic creation: partitions a second, from the first CreateTopics until
    Metadata shows every partition led;
  - a full Metadata request (every topic): the median of 5, through
    librdkafka's C{list_topics};
  - the broker's RSS and open files (C{/proc/<pid>/status}, C{/proc/<pid>/fd});
  - a clean restart (SIGTERM, start) and a restart after SIGKILL: seconds
    from the signal until Metadata shows every partition led again (and,
    as C{started_s}, until the broker logged that it started).

Each partition holds one open file (its segment's C{.log}; the indexes are
opened only to be written): 10,000 need C{ulimit -n} above 10,256 (the
broker raises its soft limit to the hard one at start and keeps 256 free;
docs/operations.md, "Open files").

With C{--profile DIR} each restarted broker runs under cProfile, dumped
(C{DIR/restart_<how>_<partitions>.prof}, read with C{python -m pstats}) once
every partition is led again; with C{--logs DIR} (or C{--profile DIR}) the
broker logs are copied to C{DIR}.

Usage:
  python bench/bench_scale.py [--partitions 1000,4000] [--session-timeout-ms 18000] [--profile DIR] [--logs DIR]
Prints one JSON line per figure (C{bench/_common.py}).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

from _common import emitter

emit = emitter("scale")


def _led(bootstrap: str, n: int) -> bool:
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    except Exception:
        return False
    parts = [p for name, t in md.topics.items() if name.startswith("scale-") for p in t.partitions.values()]
    return len(parts) == n and all(p.leader >= 0 and p.error is None for p in parts)


def _wait_led(bootstrap: str, n: int, deadline_s: float) -> float:
    started = time.monotonic()
    while not _led(bootstrap, n):
        if time.monotonic() - started > deadline_s:
            raise SystemExit(f"not every one of {n} partitions led within {deadline_s:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - started


def _proc(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss_kb, len(os.listdir(f"/proc/{pid}/fd"))


#: Runs twistd under cProfile; SIGUSR2 dumps the profile to argv[1] (twistd takes SIGUSR1 for its log).
_PROFILED = """
import cProfile, signal, sys
out = sys.argv.pop(1)
profile = cProfile.Profile()
def dump(*_):
    profile.disable()
    profile.dump_stats(out)
signal.signal(signal.SIGUSR2, dump)
from twisted.scripts.twistd import run
sys.argv[0] = 'twistd'
profile.enable()
run()
"""


def run(partitions: int, session_timeout_ms: int, profile_dir: str | None = None, logs_dir: str | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkatw.testing import BrokerProcess, ZooKeeperFixture

    tmp = tempfile.mkdtemp(prefix="kafkatw-bench-scale-")
    zookeeper = ZooKeeperFixture(os.path.join(tmp, "zk"))
    connect = zookeeper.start()
    broker = BrokerProcess(0, connect, tmp, overrides={"zookeeper.session.timeout.ms": str(session_timeout_ms)})
    try:
        broker.start(120)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        started = time.monotonic()
        for first in range(0, partitions // 100, 10):  # 1,000 partitions a request: well within its timeout
            names = [f"scale-{i}" for i in range(first, min(first + 10, partitions // 100))]
            for future in admin.create_topics([NewTopic(name, 100, 1) for name in names],
                                              operation_timeout=300, request_timeout=300).values():
                future.result(600)
        _wait_led(broker.bootstrap, partitions, 600)
        created_s = time.monotonic() - started
        emit("creation", round(partitions / created_s), "partitions/s", partitions=partitions)
        times = []
        for _ in range(5):
            t0 = time.monotonic()
            AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
            times.append(time.monotonic() - t0)
        emit("metadata", round(statistics.median(times) * 1000, 1), "ms", partitions=partitions)
        rss_kb, files = _proc(broker.popen.pid)
        emit("rss", round(rss_kb / 1024), "MiB", partitions=partitions)
        emit("open_files", files, "files", partitions=partitions)
        plain_command = broker.command
        for how, sig in (("clean", signal.SIGTERM), ("sigkill", signal.SIGKILL)):
            prof = None
            if profile_dir is not None:
                prof = os.path.join(os.path.abspath(profile_dir), f"restart_{how}_{partitions}.prof")
                broker.command = lambda prof=prof: [sys.executable, "-c", _PROFILED, prof] + plain_command()[3:]
            t0 = time.monotonic()
            os.kill(broker.popen.pid, sig)
            broker.popen.wait(300)
            broker.start(300)
            started_s = time.monotonic() - t0
            _wait_led(broker.bootstrap, partitions, 300)
            emit(f"restart_{how}", round(time.monotonic() - t0, 1), "s", partitions=partitions,
                 started_s=round(started_s, 1))
            if prof is not None:
                os.kill(broker.popen.pid, signal.SIGUSR2)
                for _ in range(100):
                    if os.path.exists(prof):
                        break
                    time.sleep(0.1)
                broker.command = plain_command
    finally:
        logs_dir = logs_dir or profile_dir
        if logs_dir is not None:
            for name in os.listdir(tmp):
                if name.startswith("broker-"):
                    shutil.copy(os.path.join(tmp, name), os.path.join(logs_dir, f"{partitions}-{name}"))
        if broker.popen is not None and broker.popen.poll() is None:
            broker.popen.kill()
            broker.popen.wait()
        zookeeper.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--partitions", default="1000,4000", help="comma-separated partition counts")
    p.add_argument("--session-timeout-ms", type=int, default=18000)
    p.add_argument("--profile", metavar="DIR", default=None, help="cProfile each restarted broker into DIR")
    p.add_argument("--logs", metavar="DIR", default=None, help="copy the broker logs into DIR")
    args = p.parse_args()
    for d in (args.profile, args.logs):
        if d is not None:
            os.makedirs(d, exist_ok=True)
    for count in (int(c) for c in args.partitions.split(",")):
        run(count, args.session_timeout_ms, args.profile, args.logs)


if __name__ == "__main__":
    sys.exit(main())
