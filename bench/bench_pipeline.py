"""
Log pipeline benchmark (issue 14): a generated web-server access log shipped
with C{kafkatw ship} to ONE kafkatw broker started here (its own ZooKeeper
too, 127.0.0.1 only), then the log pipeline's Spark job
(examples/log_pipeline/job.py) from the topic to parquet on C{local[2]}.

One JSON line per figure:

  - generate: the access log (combined format, seeded: the same file every run);
  - ship: wall time of C{kafkatw ship --once --no-state FILE} (a child
    process, interpreter start-up included) and lines/s;
  - spark_startup: building the SparkSession (JVM start-up included);
  - job: the whole availableNow run (first micro-batch included) and its
    steady rate: lines / time of the micro-batches after the first (from the
    query's progress reports, C{durationMs.triggerExecution}), i.e. after
    Spark's and the Python workers' start-up, and those seconds by the
    progress reports' phases (C{seconds_by}: C{addBatch} is the job's
    C{foreachBatch} function, C{queryPlanning} the source's plan, ...); with
    the CPU seconds of the JVM, Spark's Python workers and the job's
    driver-side Python (this process and its children but the broker and
    ZooKeeper) per line, for the whole run and for the steady phase, the
    steady phase's also by where it went (C{cpu_us_per_line_by}: the JVM's
    task threads, JIT compilers, garbage collector and other threads, and
    the Python processes);
  - check: the line total in the parquet output equals the lines shipped.

Client, broker and Spark share this machine's cores.

Usage:
  python bench/bench_pipeline.py [--lines 3000000] [--max-offsets-per-trigger 1000000]
      [--master local[2]] [--no-spark] [--spark-conf KEY=VALUE ...]

The default micro-batch (1,000,000 lines) is what the job gets from its default
10-second trigger at 100,000 lines/s; a micro-batch also costs about 2 CPU-seconds
whatever its size (planning, and the JIT compilers' work on it), which smaller
micro-batches spread over fewer lines (docs/spark.md, "Throughput").
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from kafkatw.client import NewTopic
from kafkatw.client.blocking import BlockingAdminClient
from kafkatw.testing import running_cluster, wait_for

from _common import emitter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


emit = emitter("pipeline")


_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_PATHS = ["/", "/index.html", "/api/v1/items", "/api/v1/items/{n}", "/static/app.{n}.js", "/login",
          "/search?q={n}", "/images/{n}.png", "/health", "/cart/{n}/checkout"]
_AGENTS = ['"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"', '"curl/7.88.1"',
           '"Go-http-client/1.1"', '"-"']
_STATUSES = [200] * 80 + [301, 302, 304] * 3 + [404] * 6 + [500, 502, 503]


def generate_access_log(path: str, lines: int, seed: int = 14) -> int:
    """
    Write C{lines} combined-format access-log lines to C{path}, one second
    apart from 22 Nov 2026 00:00:00 +0000; return the file's size (bytes).
    """
    rng = random.Random(seed)
    start = 1_795_305_600  # 2026-11-22T00:00:00Z
    with open(path, "w", encoding="ascii") as f:
        chunk = []
        for i in range(lines):
            t = time.gmtime(start + i)
            stamp = f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}:{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
            method = "POST" if rng.random() < 0.1 else "GET"
            target = rng.choice(_PATHS).format(n=rng.randrange(10_000))
            chunk.append(f'10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)} - - [{stamp} +0000]'
                         f' "{method} {target} HTTP/1.1" {rng.choice(_STATUSES)} {rng.randrange(100, 60_000)}'
                         f' "-" {rng.choice(_AGENTS)}\n')
            if len(chunk) >= 10_000:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))
    return os.path.getsize(path)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with BlockingAdminClient(bootstrap) as client:
        errors = client.create_topics([NewTopic(name, partitions, 1)])
        if errors.get(name) is not None:
            raise RuntimeError(f"cannot create topic {name}: {errors[name]}")
        wait_for(lambda: name in client.describe_topics([name]), 30, f"topic {name}")


def ship(bootstrap: str, topic: str, path: str) -> tuple[float, float]:
    """Run C{kafkatw ship --once --no-state path}; return its wall time and CPU time (s)."""
    env = {**os.environ, "KAFKATW_NO_PROGRESS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "import sys; from kafkatw.cli.main import main; sys.exit(main())",
                           "ship", "--bootstrap-server", bootstrap, "--topic", topic, "--once", "--no-state", path],
                          env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"kafkatw ship failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def spark_session(master: str, conf: dict[str, str]):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("kafkatw-bench-pipeline")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4").config("spark.sql.session.timeZone", "UTC")
             .config(map=conf).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_cpu_s() -> float:
    """
    CPU seconds of this process (the job's driver-side Python: its
    C{foreachBatch} function) and of its children except the broker and
    ZooKeeper: the JVM and Spark's Python workers, those that have exited
    included.
    """
    children: dict[int, list[tuple[int, float]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # utime + stime, and cutime + cstime: the CPU of its children that have exited
            # (Spark's Python workers that ended), which is no longer found in /proc
            children.setdefault(int(fields[1]), []).append((int(name), sum(map(int, fields[11:15])) / CLK_TCK))
    own = os.times()
    total = own.user + own.system
    todo = [os.getpid()]
    while todo:
        for pid, cpu in children.get(todo.pop(), []):
            if pid in _EXCLUDED:
                continue
            total += cpu
            todo.append(pid)
    return total


def _jvm_pid() -> int | None:
    """The Spark driver's JVM: this process's child running java (ZooKeeper's excluded)."""
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in _EXCLUDED:
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.index("(") + 1:stat.rindex(")")] == "java" and int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                return int(name)
    return None


def _thread_group(name: str) -> str:
    if name.startswith("Executor task"):
        return "task"
    if "CompilerThre" in name:
        return "jit"
    if name.startswith(("GC ", "G1 ")):
        return "gc"
    return "jvm_other"


def cpu_groups(jvm: int | None) -> dict[str, float]:
    """
    CPU seconds by where they were spent: the JVM's task threads (Spark's
    executor: parsing, aggregating, reading the source's Arrow batches), its
    JIT compilers, its garbage collector, its other threads (planning,
    scheduling, the parquet commit, and threads that have ended), and the
    Python processes (this one, the driver's: the job's C{foreachBatch}
    function; Spark's Python workers reading the topic, and the data
    source's driver-side calls).
    """
    total = spark_cpu_s()
    out = {"task": 0.0, "jit": 0.0, "gc": 0.0, "jvm_other": 0.0, "python": total}
    if jvm is None:
        return out
    try:
        with open(f"/proc/{jvm}/stat") as f:
            jvm_total = sum(map(int, f.read().rsplit(")", 1)[1].split()[11:13])) / CLK_TCK
        named = 0.0
        for tid in os.listdir(f"/proc/{jvm}/task"):
            try:
                with open(f"/proc/{jvm}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            cpu = sum(map(int, stat.rsplit(")", 1)[1].split()[11:13])) / CLK_TCK
            group = _thread_group(stat[stat.index("(") + 1:stat.rindex(")")])
            if group != "jvm_other":
                out[group] += cpu
                named += cpu
    except OSError:
        return out
    out["jvm_other"] = jvm_total - named
    out["python"] = total - jvm_total
    return out


def cpu_marks(spark) -> list[dict[str, float]]:
    """
    L{cpu_groups} as each micro-batch with input ends (a query listener's
    progress events, delivered a moment after the batch): the steady phase's
    CPU is the last mark minus the first.
    """
    jvm = _jvm_pid()
    from pyspark.sql.streaming import StreamingQueryListener

    marks: list[float] = []

    class Marks(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            if event.progress.numInputRows:
                marks.append(cpu_groups(jvm))

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    spark.streams.addListener(Marks())
    return marks


_EXCLUDED: set[int] = set()
CLK_TCK = os.sysconf("SC_CLK_TCK")


def load_job():
    sys.path.insert(0, os.path.join(ROOT, "examples", "log_pipeline"))
    import job  # noqa: E402

    return job


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=3_000_000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-spark", action="store_true", help="ship only")
    parser.add_argument("--parser", choices=["sql", "python"], default="sql", help="the job's parser")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (repeatable); by default the driver's JVM is"
                             " started with the job's COMPILE_HUGE_METHODS, as the job's own session does")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="kafkatw-bench-pipeline-")
    try:
        log = os.path.join(tmp, "access.log")
        started = time.perf_counter()
        size = generate_access_log(log, args.lines)
        emit("generate", round(time.perf_counter() - started, 2), "s", lines=args.lines, bytes=size)
        with running_cluster(tmpdir=os.path.join(tmp, "cluster")) as cluster:
            bootstrap = cluster[0].bootstrap
            _EXCLUDED.update([cluster[0].popen.pid, cluster.zookeeper.popen.pid])
            create_topic(bootstrap, "logs", 1)
            elapsed, cpu_s = ship(bootstrap, "logs", log)
            emit("ship", round(elapsed, 2), "s", lines=args.lines, lines_per_s=round(args.lines / elapsed),
                 mb_per_s=round(size / elapsed / 1e6, 1), cpu_s=round(cpu_s, 2),
                 cpu_us_per_line=round(cpu_s / args.lines * 1e6, 1))
            if args.no_spark:
                return 0
            started = time.perf_counter()
            job = load_job()
            conf = {"spark.driver.extraJavaOptions": job.COMPILE_HUGE_METHODS}
            conf.update(setting.split("=", 1) for setting in args.spark_conf)
            spark = spark_session(args.master, conf)
            emit("spark_startup", round(time.perf_counter() - started, 2), "s", master=args.master)
            try:
                output = os.path.join(tmp, "output")
                marks = cpu_marks(spark)
                cpu_before = spark_cpu_s()
                started = time.perf_counter()
                with open(os.devnull, "w") as quiet:
                    query = job.run(spark, bootstrap, "logs", output, os.path.join(tmp, "checkpoint"),
                                    max_offsets_per_trigger=args.max_offsets_per_trigger, out=quiet,
                                    parser=args.parser)
                elapsed = time.perf_counter() - started
                progress = [p for p in query.recentProgress if p["numInputRows"]]
                deadline = time.monotonic() + 10  # the listener hears of the last batch a moment later
                while len(marks) < len(progress) and time.monotonic() < deadline:
                    time.sleep(0.1)
                rows = sum(p["numInputRows"] for p in progress)
                cpu_s = spark_cpu_s() - cpu_before
                emit("job", round(elapsed, 2), "s", lines=rows, lines_per_s=round(rows / elapsed),
                     batches=len(progress), parser=args.parser, cpu_s=round(cpu_s, 2),
                     cpu_us_per_line=round(cpu_s / max(rows, 1) * 1e6, 1))
                steady = progress[1:]
                if steady:
                    steady_rows = sum(p["numInputRows"] for p in steady)
                    steady_s = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
                    by_group = ({k: marks[len(progress) - 1][k] - marks[0][k] for k in marks[0]}
                                if len(marks) >= len(progress) else None)
                    steady_cpu = None if by_group is None else sum(by_group.values())
                    emit("job_steady", round(steady_rows / steady_s), "lines/s", lines=steady_rows,
                         seconds=round(steady_s, 2), first_batch_s=round(progress[0]["durationMs"]
                                                                         ["triggerExecution"] / 1000, 2),
                         batch_lines=steady[0]["numInputRows"],
                         batch_lines_per_s=[round(p["numInputRows"] * 1000 / p["durationMs"]["triggerExecution"])
                                            for p in steady],
                         seconds_by={phase: round(sum(p["durationMs"].get(phase, 0) for p in steady) / 1000, 2)
                                     for phase in steady[0]["durationMs"]},
                         cpu_s=None if steady_cpu is None else round(steady_cpu, 2),
                         cpu_us_per_line=None if steady_cpu is None else round(steady_cpu / steady_rows * 1e6, 1),
                         cpu_us_per_line_by=None if by_group is None else
                         {k: round(v / steady_rows * 1e6, 1) for k, v in by_group.items()})
                total = spark.read.parquet(os.path.join(output, "batch-*")).groupBy().sum("count").collect()[0][0]
                emit("check", total == args.lines, "bool", parquet_lines=total, shipped=args.lines)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
