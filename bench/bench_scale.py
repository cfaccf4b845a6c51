"""
How a broker's costs grow with its partitions (issue 32's scale curve):
for each count, a fresh ZooKeeper and C{--brokers} brokers on free loopback
ports, topics of 100 partitions each (C{--replication-factor}, 1 by default:
with 3 brokers and 3, every broker holds a replica of every partition, so
the count is partitions per broker), then

  - topic creation: partitions a second, from the first CreateTopics until
    Metadata shows every partition led;
  - C{settled}: seconds after that until no broker uses more than a
    quarter of a core (followers still create logs and start fetching);
  - a full Metadata request (every topic): the median of 5, through
    librdkafka's C{list_topics}, once settled;
  - the broker's RSS and open files (C{/proc/<pid>/status}, C{/proc/<pid>/fd};
    with several brokers, the largest);
  - a clean restart (SIGTERM, start) and a restart after SIGKILL of broker 0
    (the only one by default; with C{--restarts} also with several): seconds
    from the signal until Metadata shows every partition led again (and,
    as C{started_s}, until the broker logged that it started);
  - with several brokers, C{controller_failover}: SIGKILL of the controller
    (C{/controller}) until Metadata from another broker shows every
    partition led by a live broker (the target: C{zookeeper.session.timeout.ms}
    + 3 s: the session expires, another broker is elected and moves the
    leaderships), and C{controller_elected}, until C{/controller} names
    another broker; C{cpu_s} is each surviving broker's CPU seconds from the
    SIGKILL until every partition is led (C{controller} names the new one).

Each figure carries C{load}, the 1-minute load average when it was taken
(the machine may be shared).

Each partition holds one open file (its segment's C{.log}; the indexes are
opened only to be written): 10,000 need C{ulimit -n} above 10,256 (the
broker raises its soft limit to the hard one at start and keeps 256 free;
docs/operations.md, "Open files").

With C{--profile DIR} each restarted broker runs under cProfile, dumped
(C{DIR/restart_<how>_<partitions>.prof}, read with C{python -m pstats}) once
every partition is led again; with C{--logs DIR} (or C{--profile DIR}) the
broker logs are copied to C{DIR}.

Usage:
  python bench/bench_scale.py [--partitions 1000,4000] [--brokers 3 --replication-factor 3] [--restarts]
      [--session-timeout-ms 18000] [--profile DIR] [--logs DIR]
Prints one JSON line per figure (C{bench/_common.py}).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

from _common import cpu_seconds, emitter, profiled_command

_emit = emitter("scale")


def emit(figure: str, value: object, unit: str, **extra: object) -> None:
    _emit(figure, value, unit, **extra, load=round(os.getloadavg()[0], 2))


def _led(bootstrap: str, n: int, not_by: int = -1) -> bool:
    """Whether Metadata from C{bootstrap} names a leader (other than C{not_by}) for each of the C{n} partitions."""
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    except Exception:
        return False
    parts = [p for name, t in md.topics.items() if name.startswith("scale-") for p in t.partitions.values()]
    return len(parts) == n and all(p.leader >= 0 and p.leader != not_by and p.error is None for p in parts)


def _wait_led(bootstrap: str, n: int, deadline_s: float, not_by: int = -1) -> float:
    started = time.monotonic()
    while not _led(bootstrap, n, not_by):
        if time.monotonic() - started > deadline_s:
            raise SystemExit(f"not every one of {n} partitions led within {deadline_s:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - started


def _wait_quiet(pids: list[int], deadline_s: float, busy: float = 0.25) -> float:
    """
    Seconds until no broker uses more than C{busy} of a core over a second:
    after the last leader is named, followers still create their logs and
    start fetching, and a Metadata request measured meanwhile waits behind
    that work.
    """
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(1)
        if all(cpu_seconds(pid) - b < busy for pid, b in zip(pids, before)):
            break
    return time.monotonic() - started


def _proc(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss_kb, len(os.listdir(f"/proc/{pid}/fd"))


def _controller(connect: str) -> int:
    """The broker id in C{/controller} (-1: none), under the brokers' chroot (C{/kafkatw} by default)."""
    from kazoo.client import KazooClient

    from kafkatw.zookeeper.bridge import parse_connect_string

    hosts, chroot = parse_connect_string(connect)
    zk = KazooClient(hosts=hosts + chroot)
    zk.start(30)
    try:
        data, _ = zk.get("/controller")
        return int(json.loads(data)["brokerid"])
    except Exception as e:
        print(f"/controller: {e!r}", file=sys.stderr)
        return -1
    finally:
        zk.stop()
        zk.close()


def _controller_failover(processes: list, connect: str, partitions: int, session_timeout_ms: int,
                         **figure: object) -> None:
    """SIGKILL the controller; seconds until another is elected and until every partition is led by a live broker."""
    deadline = time.monotonic() + 60
    while (controller := _controller(connect)) not in [b.broker_id for b in processes]:
        if time.monotonic() > deadline:
            raise SystemExit(f"no controller among the brokers (/controller: {controller})")
        time.sleep(0.5)
    victim = next(b for b in processes if b.broker_id == controller)
    survivor = next(b for b in processes if b is not victim)
    others = [b for b in processes if b is not victim]
    cpu_before = {b.broker_id: cpu_seconds(b.popen.pid) for b in others}
    t0 = time.monotonic()
    victim.popen.send_signal(signal.SIGKILL)
    victim.popen.wait(30)
    elected_s = None
    deadline = t0 + session_timeout_ms / 1000 + 600
    while time.monotonic() < deadline:
        if elected_s is None and _controller(connect) not in (-1, controller):
            elected_s = time.monotonic() - t0
        if _led(survivor.bootstrap, partitions, not_by=controller):
            break
        time.sleep(0.1)
    else:
        raise SystemExit(f"not every one of {partitions} partitions led after the controller's SIGKILL")
    led_s = time.monotonic() - t0
    cpu_s = {b.broker_id: round(cpu_seconds(b.popen.pid) - cpu_before[b.broker_id], 1) for b in others}
    new_controller = _controller(connect)
    if elected_s is None:
        elected_s = led_s
    target_s = session_timeout_ms / 1000 + 3
    emit("controller_elected", round(elected_s, 1), "s", partitions=partitions, **figure)
    emit("controller_failover", round(led_s, 1), "s", partitions=partitions, target_s=target_s,
         met=led_s <= target_s, killed=controller, session_timeout_ms=session_timeout_ms,
         controller=new_controller, cpu_s=cpu_s, **figure)
    victim.start(300)  # back, so that the cluster is whole again


def run(partitions: int, session_timeout_ms: int, profile_dir: str | None = None, logs_dir: str | None = None,
        brokers_count: int = 1, replication_factor: int = 1, restarts: bool | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkatw.testing import BrokerProcess, ZooKeeperFixture

    if restarts is None:
        restarts = brokers_count == 1
    figure = {"brokers": brokers_count, "replication_factor": replication_factor}
    tmp = tempfile.mkdtemp(prefix="kafkatw-bench-scale-")
    # ZooKeeper grants at most 20 ticks of session timeout (maxSessionTimeout): a tick of 1/20 of it
    zookeeper = ZooKeeperFixture(os.path.join(tmp, "zk"), tick_time_ms=max(500, -(-session_timeout_ms // 20)))
    connect = zookeeper.start()
    brokers = [BrokerProcess(i, connect, tmp, overrides={"zookeeper.session.timeout.ms": str(session_timeout_ms)})
               for i in range(brokers_count)]
    broker = brokers[0]
    try:
        for b in brokers:
            b.start(120)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        started = time.monotonic()
        for first in range(0, partitions // 100, 10):  # 1,000 partitions a request: well within its timeout
            names = [f"scale-{i}" for i in range(first, min(first + 10, partitions // 100))]
            for future in admin.create_topics([NewTopic(name, 100, replication_factor) for name in names],
                                              operation_timeout=300, request_timeout=300).values():
                future.result(600)
        _wait_led(broker.bootstrap, partitions, 600)
        created_s = time.monotonic() - started
        emit("creation", round(partitions / created_s), "partitions/s", partitions=partitions, **figure)
        emit("settled", round(_wait_quiet([b.popen.pid for b in brokers], 120), 1), "s", partitions=partitions,
             **figure)
        times = []
        for _ in range(5):
            t0 = time.monotonic()
            AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
            times.append(time.monotonic() - t0)
        emit("metadata", round(statistics.median(times) * 1000, 1), "ms", partitions=partitions,
             runs_ms=[round(t * 1000, 1) for t in times], **figure)
        procs = [_proc(b.popen.pid) for b in brokers]
        emit("rss", round(max(rss for rss, _ in procs) / 1024), "MiB", partitions=partitions, **figure)
        emit("open_files", max(files for _, files in procs), "files", partitions=partitions, **figure)
        if brokers_count > 1:
            _controller_failover(brokers, connect, partitions, session_timeout_ms, **figure)
            _wait_led(broker.bootstrap, partitions, 600)
        if not restarts:
            return
        plain_command = broker.command
        for how, sig in (("clean", signal.SIGTERM), ("sigkill", signal.SIGKILL)):
            prof = None
            if profile_dir is not None:
                prof = os.path.join(os.path.abspath(profile_dir), f"restart_{how}_{partitions}.prof")
                broker.command = lambda prof=prof: profiled_command(plain_command(), prof)
            t0 = time.monotonic()
            os.kill(broker.popen.pid, sig)
            broker.popen.wait(300)
            broker.start(300)
            started_s = time.monotonic() - t0
            _wait_led(broker.bootstrap, partitions, 300)
            emit(f"restart_{how}", round(time.monotonic() - t0, 1), "s", partitions=partitions,
                 started_s=round(started_s, 1), **figure)
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
        for b in brokers:
            if b.popen is not None and b.popen.poll() is None:
                b.popen.kill()
                b.popen.wait()
        zookeeper.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--partitions", default="1000,4000", help="comma-separated partition counts")
    p.add_argument("--brokers", type=int, default=1, help="brokers in the cluster (ids 0, 1, ...)")
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--restarts", action=argparse.BooleanOptionalAction, default=None,
                   help="restart broker 0 (clean, then SIGKILL); default: only with one broker")
    p.add_argument("--session-timeout-ms", type=int, default=18000)
    p.add_argument("--profile", metavar="DIR", default=None, help="cProfile each restarted broker into DIR")
    p.add_argument("--logs", metavar="DIR", default=None, help="copy the broker logs into DIR")
    args = p.parse_args()
    for d in (args.profile, args.logs):
        if d is not None:
            os.makedirs(d, exist_ok=True)
    for count in (int(c) for c in args.partitions.split(",")):
        run(count, args.session_timeout_ms, args.profile, args.logs, args.brokers, args.replication_factor,
            args.restarts)


if __name__ == "__main__":
    sys.exit(main())
