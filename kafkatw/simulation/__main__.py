"""
Run seeds of the cluster simulation: C{python -m kafkatw.simulation --seeds N --start S}.

Each seed prints one line (C{ok} or C{FAILED}, with its trace hash); a failing
seed prints its schedule and the violations.  C{--seed S --trace} replays one
seed and prints its whole trace.  Exit status 1 when a seed failed.

The process runs with C{PYTHONHASHSEED=0} (it starts itself again with it
when that is not set), so that a seed replays identically in another process
too: the order of sets of strings in the brokers depends on it.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import gc
import multiprocessing
import os
import resource
import sys
import time
from typing import Iterator

from twisted.logger import globalLogBeginner, textFileLogObserver

from kafkatw.simulation.cluster import RunResult, Settings, make_schedule, run_seed, shrink


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkatw.simulation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds (default 10)")
    parser.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seed", type=int, help="run this one seed (with --trace: print its trace)")
    parser.add_argument("--faults", type=int, default=Settings.faults, help="faults per seed")
    parser.add_argument("--window", type=float, default=Settings.fault_window_s,
                        help="simulated seconds in which the faults happen")
    parser.add_argument("--segment-bytes", type=int, default=Settings.segment_bytes, help="log.segment.bytes")
    parser.add_argument("--value-bytes", type=int, default=Settings.value_bytes, help="bytes per record value")
    parser.add_argument("--fetch-max-bytes", type=int, default=Settings.fetch_max_bytes,
                        help="max.partition.fetch.bytes of the consumer and replica.fetch.max.bytes")
    parser.add_argument("--disk-model", action=argparse.BooleanOptionalAction, default=Settings.disk_model,
                        help="a crash loses what the broker did not fsync, and may tear the last of it"
                        f" (default {'on' if Settings.disk_model else 'off'})")
    parser.add_argument("--disk-errors", type=int, default=Settings.disk_errors,
                        help="disk-error faults (ENOSPC or EIO) per seed, drawn apart from the others"
                        f" (default {Settings.disk_errors})")
    parser.add_argument("--brokers", type=int, default=Settings.brokers,
                        help=f"brokers in the cluster (default {Settings.brokers}; replication factor min(3, brokers))")
    parser.add_argument("--link-faults", type=int, default=Settings.link_faults,
                        help="slow or lossy link faults per seed, drawn apart from the others"
                        f" (default {Settings.link_faults})")
    parser.add_argument("--clock-jumps", type=int, default=Settings.clock_jumps,
                        help=f"jumps of one broker's wall clock per seed, drawn apart (default {Settings.clock_jumps})")
    parser.add_argument("--clock-jump-max", type=float, default=Settings.clock_jump_max_s,
                        help="the largest clock jump (s; drawn log-uniform from 0.5 s, forward or back;"
                        f" default {Settings.clock_jump_max_s:g})")
    parser.add_argument("--zookeeper-latency", type=float, default=Settings.zookeeper_latency_ms,
                        help="the largest latency of a broker's link to ZooKeeper (ms each way, drawn per broker"
                        f" from the seed; 0: none; default {Settings.zookeeper_latency_ms:g})")
    parser.add_argument("--transactions", action=argparse.BooleanOptionalAction, default=Settings.transactions,
                        help="a transactional producer commits and aborts transactions during the faults, and a"
                        " read-committed consumer checks them at the end"
                        f" (default {'on' if Settings.transactions else 'off'})")
    parser.add_argument("--groups", action=argparse.BooleanOptionalAction, default=Settings.groups,
                        help="two members of a consumer group read and commit during the faults; the committed"
                        f" offsets must never move backwards (default {'on' if Settings.groups else 'off'})")
    parser.add_argument("--admin-operations", type=int, default=Settings.admin_operations,
                        help="reassignments and preferred leader elections per seed, drawn apart"
                        f" (default {Settings.admin_operations})")
    parser.add_argument("--client-clock-jumps", type=int, default=Settings.client_clock_jumps,
                        help="jumps of the clients' wall clock per seed, drawn apart"
                        f" (default {Settings.client_clock_jumps})")
    parser.add_argument("--start-zookeeper-drops", type=float, default=Settings.start_zookeeper_drops,
                        help="the chance that a broker's start meets a drop of its ZooKeeper connection"
                        f" (ConnectionLoss; default {Settings.start_zookeeper_drops:g})")
    parser.add_argument("--drop", default="", help="with --seed: leave out these faults of its schedule"
                        " (indexes from 0, comma-separated, as --shrink prints them)")
    parser.add_argument("--shrink", action="store_true", help="shrink each failing seed's schedule")
    parser.add_argument("--jobs", type=int, default=1,
                        help="run the seeds in this many processes (default 1; the results print in seed order)")
    parser.add_argument("--log", action="store_true",
                        help="the brokers' and clients' log on stderr (else only failures are counted per seed)")
    parser.add_argument("--trace", action="store_true", help="print the trace of each seed")
    parser.add_argument("--schedule", action="store_true", help="print each seed's schedule, even when it passes")
    args = parser.parse_args(argv)
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)] if args.log else [],
                                     redirectStandardIO=False, discardBuffer=True)
    settings = Settings(faults=args.faults, fault_window_s=args.window, segment_bytes=args.segment_bytes,
                        value_bytes=args.value_bytes, fetch_max_bytes=args.fetch_max_bytes,
                        disk_model=args.disk_model, disk_errors=args.disk_errors, brokers=args.brokers,
                        link_faults=args.link_faults, clock_jumps=args.clock_jumps,
                        clock_jump_max_s=args.clock_jump_max, zookeeper_latency_ms=args.zookeeper_latency,
                        transactions=args.transactions, groups=args.groups,
                        admin_operations=args.admin_operations,
                        client_clock_jumps=args.client_clock_jumps,
                        start_zookeeper_drops=args.start_zookeeper_drops)
    # what the imports built lives as long as the process: out of the collector's generations, the
    # collection at the end of each seed (run_seed) walks only what the seed made (12% of its CPU)
    gc.collect()
    gc.freeze()
    # a seed's young objects are collected every 10,000 allocations, not 700: a third of the
    # collections' cost (2-3% of a seed's CPU), its cycles still freed during the seed and at its end
    gc.set_threshold(10_000, *gc.get_threshold()[1:])
    seeds = [args.seed] if args.seed is not None else list(range(args.start, args.start + args.seeds))
    failed = []
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    simulated = 0.0
    dropped = tuple(int(i) for i in args.drop.split(",") if i.strip())
    jobs = [(seed, settings, dropped) for seed in seeds]
    pool = None
    if args.jobs > 1:
        pool = concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("fork"))
        results: Iterator[RunResult] = pool.map(one_seed, jobs)
    else:
        results = map(one_seed, jobs)
    exercised: collections.Counter[str] = collections.Counter()
    for seed, result in zip(seeds, results):
        simulated += result.simulated_s
        exercised.update(result.exercised)
        print(result.report(), flush=True)
        if args.shrink and not result.ok:
            shrunk = shrink(seed, settings, result, lambda r: print(".", end="", flush=True))
            print(f"\nshrunk: python -m kafkatw.simulation --seed {seed}"
                  f" --drop {','.join(map(str, shrunk.schedule.dropped))} (and the same shape options)")
            print(shrunk.report(), flush=True)
        if args.schedule and result.ok:
            print(make_schedule(seed, settings))
        if args.trace:
            print("\n".join(result.trace))
        if not result.ok:
            failed.append(seed)
    if pool is not None:
        pool.shutdown()
    wall = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_started
    print("checks exercised: " + ", ".join(f"{name} {count}" for name, count in sorted(exercised.items())))
    print(f"{len(seeds)} seeds, {len(failed)} failed{': ' + ' '.join(map(str, failed)) if failed else ''};"
          f" {simulated:.0f} s simulated in {wall:.1f} s ({len(seeds) / wall * 60:.0f} seeds a minute);"
          f" {cpu:.1f} s of CPU ({len(seeds) / max(cpu, 1e-9) * 60:.0f} seeds a minute per core)")
    return 1 if failed else 0


def _cpu_seconds() -> float:
    """User and system CPU time of this process and its ended children (the C{--jobs} workers), in s."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def one_seed(job: tuple[int, Settings, tuple[int, ...]]) -> RunResult:
    """Run one seed in a worker process (C{--jobs}): C{(seed, settings, faults left out)}."""
    seed, settings, dropped = job
    schedule = None
    if dropped:
        full = make_schedule(seed, settings)
        schedule = full.without(dropped, full.faults)
    return run_seed(seed, settings, schedule=schedule)


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "kafkatw.simulation"] + sys.argv[1:])
    sys.exit(main())
