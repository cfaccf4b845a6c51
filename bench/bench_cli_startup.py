"""
How long a C{kafkatw} tool call takes: wall time of C{kafkatw --version},
C{kafkatw topics --help} and C{kafkatw topics --list} against a running
broker, and the import time of what C{topics --list} imports
(C{python -X importtime}: the sum of the top-level modules' cumulative times).

    .venv/bin/python bench/bench_cli_startup.py                  # starts ZooKeeper and one broker
    .venv/bin/python bench/bench_cli_startup.py --bootstrap-server 127.0.0.1:9092

Each call runs once to warm up, then C{--runs} times (one process each, one
at a time); the JSON lines give the fastest and the median run in seconds,
wall time and CPU time (user + system, which a busy machine inflates less).
The calls cache their bytecode as an installed kafkatw does, even where
C{PYTHONDONTWRITEBYTECODE} is set (the tree's C{__pycache__} folders, which
git ignores); C{--no-bytecode-cache} measures with nothing cached (every
module, the standard library's and site-packages' too, compiled from source
in every run: the worst case).  The tool runs as
C{python -m kafkatw.cli.main} with this interpreter, so C{PYTHONPATH} picks
the tree measured (an older checkout, for a before/after figure); the
console script C{kafkatw} runs the same code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Iterator

from _common import emitter

emit = emitter("cli_startup")


def wall(argv: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """
    Seconds each of C{runs} runs of C{argv} took, after one more to warm up
    (exit status 0 required): wall time, and CPU time (user + system, which a
    busy machine inflates less).
    """
    times, cpu = [], []
    for _ in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60, env=env)
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    return times[1:], cpu[1:]


def import_seconds(argv: list[str], env: dict[str, str]) -> tuple[float, list[tuple[float, str]]]:
    """
    C{python -X importtime} of C{argv} (a C{-m ...} command): the total of the
    top-level imports' cumulative times (s), and the five slowest of them.
    """
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=60, text=True, env=env)
    top = []
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)  # no indent: a top-level import
        if m:
            top.append((int(m.group(1)) / 1e6, m.group(2)))
    return sum(t for t, _ in top), sorted(top, reverse=True)[:5]


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """The given broker, or ZooKeeper and one broker started for the run (with a topic)."""
    if bootstrap is not None:
        yield bootstrap
        return
    from kafkatw.client import NewTopic
    from kafkatw.client.blocking import BlockingAdminClient
    from kafkatw.testing import running_cluster

    with running_cluster(1) as cluster:
        with BlockingAdminClient(cluster[0].bootstrap) as admin:
            admin.create_topics([NewTopic("bench-startup", 1, 1)])
        yield cluster[0].bootstrap


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--bootstrap-server", help="A running broker (default: start one).")
    p.add_argument("--no-bytecode-cache", action="store_true",
                   help="Compile every module from source in every run (an empty PYTHONPYCACHEPREFIX, no bytecode written).")
    args = p.parse_args()
    tool = [sys.executable, "-m", "kafkatw.cli.main"]
    tree = os.path.dirname(os.path.dirname(__import__("kafkatw").__file__))
    env = dict(os.environ)
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="kafkatw-nopyc-")  # empty: nothing cached is read
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        run(args, tool, tree, env)
    finally:
        if args.no_bytecode_cache:
            shutil.rmtree(env["PYTHONPYCACHEPREFIX"], ignore_errors=True)
    emit("load_average", round(os.getloadavg()[0], 2), "", cores=os.cpu_count())


def run(args: argparse.Namespace, tool: list[str], tree: str, env: dict[str, str]) -> None:
    cached = not args.no_bytecode_cache
    with broker(args.bootstrap_server) as bootstrap:
        calls = {"version": ["--version"], "topics_help": ["topics", "--help"],
                 "topics_list": ["topics", "--bootstrap-server", bootstrap, "--list"]}
        for figure, extra in calls.items():
            times, cpu = wall([*tool, *extra], args.runs, env)
            emit(f"{figure}_wall", round(min(times), 3), "s", median=round(statistics.median(times), 3),
                 cpu_min=round(min(cpu), 3), cpu_median=round(statistics.median(cpu), 3), runs=args.runs, argv=" ".join(["kafkatw", *extra]), tree=tree, bytecode_cached=cached)
        total, slowest = import_seconds(["-m", "kafkatw.cli.main", *calls["topics_list"]], env)
        emit("topics_list_imports", round(total, 3), "s", slowest=[[round(t, 3), name] for t, name in slowest],
             tree=tree, bytecode_cached=cached)


if __name__ == "__main__":
    main()
