"""
Spark source benchmark (issue 14): the CPU per record of the kafkatw Spark
source's read path in one Python process, without Spark.

A generated access log (bench_pipeline.py's, one key and three headers per
line) is shipped with C{kafkatw ship} to ONE kafkatw broker started here (its
own ZooKeeper too, 127.0.0.1 only); then, C{--runs} times, the source reads
the partition's whole range as a Spark Python worker does
(C{kafkatw.spark._source._read_range}) and each Arrow record batch it yields
is written as an Arrow IPC stream into a pipe to C{cat} (as Spark's worker
writes them into its socket to the JVM).

One JSON line per run: CPU microseconds per record of this process (its
consumer's reactor thread included: C{time.process_time}), in all and split
into the batches' making (C{columns}: decoding into the Arrow columns, this
thread's CPU), their IPC writing (C{ipc}, this thread's) and the rest
(C{fetch}: polling, in both threads); the batches and records read.

Usage:
  python bench/bench_spark_source.py [--lines 500000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from kafkatw.spark import _source
from kafkatw.spark._options import parse_options
from kafkatw.testing import running_cluster

from _common import emitter
from bench_pipeline import create_topic, generate_access_log, ship

emit = emitter("spark_source")


def read_range(options: Any, part: Any, cpu: dict[str, float]) -> tuple[int, int]:
    """Read C{part} as Spark's worker does, the batches into a pipe; add the phases' CPU seconds to C{cpu}."""
    import pyarrow as pa

    # the function that makes each batch: _fetched_to_arrow, or _to_arrow in trees without it
    name = "_fetched_to_arrow" if hasattr(_source, "_fetched_to_arrow") else "_to_arrow"
    make = getattr(_source, name)

    def timed(*args: Any) -> Any:
        started = time.thread_time()
        try:
            return make(*args)
        finally:
            cpu["columns"] += time.thread_time() - started

    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    setattr(_source, name, timed)
    writer = None
    rows = batches = 0
    try:
        for batch in _source._read_range(options, part):
            started = time.thread_time()
            if writer is None:
                writer = pa.ipc.new_stream(cat.stdin, batch.schema)
            writer.write_batch(batch)
            cpu["ipc"] += time.thread_time() - started
            rows += batch.num_rows
            batches += 1
        if writer is not None:
            writer.close()
    finally:
        setattr(_source, name, make)
        cat.stdin.close()
        cat.wait()
    return rows, batches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import pandas  # noqa: F401 - what pyarrow imports on first use: not in the first run
    import pyarrow.compute  # noqa: F401

    tmp = tempfile.mkdtemp(prefix="kafkatw-bench-spark-source-")
    try:
        log = os.path.join(tmp, "access.log")
        generate_access_log(log, args.lines)
        with running_cluster(tmpdir=os.path.join(tmp, "cluster")) as cluster:
            bootstrap = cluster[0].bootstrap
            create_topic(bootstrap, "logs", 1)
            ship(bootstrap, "logs", log)
            options = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": "logs",
                                     "includeHeaders": "true"}, streaming=True)
            part = _source.KafkaInputPartition("logs", 0, 0, args.lines)
            for run in range(args.runs):
                cpu = {"columns": 0.0, "ipc": 0.0}
                started = time.process_time()
                wall = time.perf_counter()
                rows, batches = read_range(options, part, cpu)
                total = time.process_time() - started
                if rows != args.lines:
                    raise RuntimeError(f"read {rows} records, not {args.lines}")
                per = {k: round(v / rows * 1e6, 3) for k, v in cpu.items()}
                emit("read", round(total / rows * 1e6, 3), "cpu_us_per_record", run=run, records=rows,
                     batches=batches, wall_s=round(time.perf_counter() - wall, 2),
                     fetch=round((total - sum(cpu.values())) / rows * 1e6, 3), **per)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
