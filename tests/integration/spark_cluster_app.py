"""
The Spark application that tests/integration/test_spark_cluster.py submits
(C{spark-submit}) to a standalone cluster: the C{kafkatw} data source in
batch and in a stream, and the log pipeline (examples/log_pipeline/job.py's
C{run}, as tests/integration/test_spark.py runs it) twice, from one
checkpoint.  Not a test module itself (pytest collects C{test_*.py} only).

    spark-submit --master spark://HOST:PORT spark_cluster_app.py \\
        --bootstrap-server HOST:PORT --topic T --logs-topic L --output DIR --report FILE

Writes, from the executors, C{DIR/batch} (a batch read of the whole topic
C{T}, headers included), C{DIR/stream} (a stream of C{T} from the earliest
offsets, C{trigger(availableNow=True)}, C{maxOffsetsPerTrigger} records per
micro-batch, small fetches passed as C{kafka.*} options) and the pipeline's
C{DIR/pipeline} (topic C{L}), all parquet.  Between the pipeline's two runs
it writes C{FILE.part1} and waits (at most 120 s) for C{FILE.go}, so that
the test can ship more lines.  Then it writes to C{FILE} a JSON report: the
executor ids its tasks' Python workers ran under, the executors registered,
the stream's micro-batch sizes, and what the pipeline printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def executor_of_this_process(_: object) -> list:
    """
    (this Python worker's pid, the executor id of the JVM it descends
    from, whether its kafkatw has the compiled accelerator): the parent
    chain in C{/proc} up to C{CoarseGrainedExecutorBackend} (Spark's executor
    process; None where there is none: a C{local} master).
    """
    import os
    import time

    from kafkatw.protocol import records

    speedups = records._speedups is not None

    time.sleep(0.3)  # so that one executor does not run every task before the other starts
    pid = os.getpid()
    process = pid
    for _ in range(8):
        try:
            with open(f"/proc/{process}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{process}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv:
            return [(pid, argv[argv.index(b"--executor-id") + 1].decode(), speedups)]
        process = parent
    return [(pid, None, speedups)]


def _stage(name: str, started: list = []) -> None:  # noqa: B006 (the time of the first call)
    """Print how long the application has run at the end of stage C{name} (to its log)."""
    if not started:
        started.append(time.monotonic())
    print(f"kafkatw-cluster-test: {name} at {time.monotonic() - started[0]:.1f} s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--logs-topic", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=300)
    args = parser.parse_args(argv)

    import io

    from pyspark.sql import SparkSession

    import kafkatw.spark

    _stage("start")
    spark = SparkSession.builder.appName("kafkatw-cluster-test").getOrCreate()
    _stage("session")
    spark.sparkContext.setLogLevel("WARN")
    try:
        kafkatw.spark.register(spark)
        sc = spark.sparkContext
        tasks = sc.parallelize(range(6), 6).mapPartitions(executor_of_this_process).collect()
        executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver's block manager
        _stage("executors")

        batch = (spark.read.format("kafkatw").option("kafka.bootstrap.servers", args.bootstrap_server)
                 .option("subscribe", args.topic).option("includeHeaders", "true").load())
        batch.write.parquet(os.path.join(args.output, "batch"))
        _stage("batch")

        stream = (spark.readStream.format("kafkatw").option("kafka.bootstrap.servers", args.bootstrap_server)
                  .option("subscribe", args.topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
                  .option("kafka.client.id", "kafkatw-cluster-test")
                  .option("kafka.max.partition.fetch.bytes", "2048").option("kafka.fetch.max.bytes", "8192")
                  .load())
        query = (stream.writeStream.format("parquet").option("path", os.path.join(args.output, "stream"))
                 .option("checkpointLocation", os.path.join(args.output, "stream-checkpoint"))
                 .trigger(availableNow=True).start())
        if not query.awaitTermination(120):
            query.stop()
            raise RuntimeError("the stream did not finish within 120 s")
        if query.exception() is not None:
            raise RuntimeError(f"the stream failed: {query.exception()}")
        stream_batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        _stage("stream")

        job = _load_job()
        output, checkpoint = os.path.join(args.output, "pipeline"), os.path.join(args.output, "pipeline-checkpoint")
        printed = io.StringIO()
        job.run(spark, args.bootstrap_server, args.logs_topic, output, checkpoint, available_now=True, out=printed)
        _stage("pipeline")
        open(args.report + ".part1", "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(args.report + ".go"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args.report}.go did not appear within 120 s")
            time.sleep(0.1)
        # restarted from the checkpoint, parsing with the reference parser in the executors' Python
        # workers (the job ships parsing.py to them with addPyFile)
        job.run(spark, args.bootstrap_server, args.logs_topic, output, checkpoint, available_now=True,
                out=printed, parser="python")
        _stage("pipeline restarted")
        report = {"tasks": tasks, "executors": executors, "stream_batches": stream_batches,
                  "pipeline_printed": printed.getvalue()}
        with open(args.report, "w") as f:
            json.dump(report, f)
    finally:
        spark.stop()
    return 0


def _load_job():
    """examples/log_pipeline/job.py as a module (it is a script, not a package)."""
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "examples", "log_pipeline", "job.py")
    spec = importlib.util.spec_from_file_location("log_pipeline_job", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(main())
