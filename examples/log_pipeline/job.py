"""
The log pipeline: a Spark Structured Streaming job reading shipped log lines
from a kafkatw topic (records from C{kafkatw ship}: value = one line, key =
C{"host:path"}, headers C{host}, C{path}, C{line_no}) and writing per
(source, minute, level or HTTP status) line counts to parquet.

    python examples/log_pipeline/job.py --bootstrap-server 127.0.0.1:9092 \\
        --topic logs --output out/ --checkpoint ckpt/ --available-now

Output: C{<output>/batch-<batch id>/} holds one micro-batch's counts, columns
C{source} (the shipped file's path), C{minute} (timestamp, UTC), C{level}
(string or null), C{status} (int or null), C{count} (long); one row per group
per micro-batch, so totals are sums: C{spark.read.parquet(output + "/batch-*")}
or C{pandas.read_parquet(output)}.

Exactly once: Spark records a micro-batch's offsets in the checkpoint before
running it and replays the same offsets (same batch id) after a crash;
C{foreachBatch} writes each batch to the directory named by its batch id,
replacing what is there, so a replayed batch replaces its own earlier output
instead of adding to it.  A local directory is written by the driver and
renamed into place whole (L{write_counts}); elsewhere Spark writes it with
C{mode("overwrite")}, and a reader that may run while the job writes should
skip directories without a C{_SUCCESS} file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import urllib.parse
import urllib.request
import uuid
from typing import Any, TextIO

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import parsing  # noqa: E402
import parsing_sql  # noqa: E402

OUTPUT_SCHEMA = "source string, minute timestamp, level string, status int, count long"
#: the rows of L{parsing_sql.parse} (and of its reference, L{parsing.parse_arrow_batches})
PARSED_SCHEMA = "source string, minute timestamp, level string, status int, error boolean, message string"


class Summary:
    """The running summary printed after each micro-batch."""

    def __init__(self, out: TextIO = sys.stdout, top: int = 5) -> None:
        self.out = out
        self.top = top
        self.lines: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.unparsed: dict[str, int] = {}

    def add(self, batch_id: int, per_source: list, messages: list, empty: int = 0) -> None:
        """
        Print one micro-batch's summary and the running totals.

        @param per_source: rows C{{"source", "lines", "errors", "unparsed"}}
            ("unparsed": lines of no known format, counted at the record's
            time; C{"unparsed"} may be absent: 0).
        @param messages: the top rows C{{"message", "count"}}, none with an
            empty message.
        @param empty: lines whose message is empty (blank lines, or a
            prefix with nothing after it): counted among the lines, never
            as a message.
        """
        for row in per_source:
            source = row["source"]
            self.lines[source] = self.lines.get(source, 0) + row["lines"]
            self.errors[source] = self.errors.get(source, 0) + row["errors"]
            self.unparsed[source] = self.unparsed.get(source, 0) + row.get("unparsed", 0)
        batch_lines = sum(r["lines"] for r in per_source)
        batch_errors = sum(r["errors"] for r in per_source)
        w = self.out.write
        w(f"--- batch {batch_id}: {batch_lines} lines, {batch_errors} errors"
          f" (running total {sum(self.lines.values())} lines, {sum(self.errors.values())} errors)\n")
        w(f"{'source':<48} {'lines':>10} {'errors':>8} {'unparsed':>9}\n")
        for source in sorted(self.lines):
            shown = source if len(source) <= 48 else "..." + source[-45:]
            w(f"{shown:<48} {self.lines[source]:>10} {self.errors[source]:>8} {self.unparsed[source]:>9}\n")
        if messages:
            w("top messages this batch:\n")
            for row in messages:
                w(f"  {row['count']:>8}  {row['message'][:100]}\n")
        if empty:
            w(f"  {empty:>8}  lines with no message (blank) this batch, not among the messages\n")
        self.out.flush()


def local_directory(path: str, master: str) -> str | None:
    """
    The local directory that the output path C{path} names, or None where it
    may name another file system (Spark then writes it): a C{file:} URI, or a
    path without a scheme when Spark's master is C{local} (Spark's own default
    file system, C{fs.defaultFS}, may be HDFS on a cluster).
    """
    parsed = urllib.parse.urlparse(path)
    if parsed.scheme == "file":
        return urllib.request.url2pathname(parsed.path)
    if parsed.scheme == "" and master.startswith("local"):
        return path
    return None


def write_counts(counts: Any, directory: str) -> None:
    """
    Write the output's rows C{counts} (a C{pyarrow.Table} of L{OUTPUT_SCHEMA})
    to the local C{directory} as one parquet file and an empty C{_SUCCESS},
    replacing the directory if it exists (a replayed micro-batch): written to
    a hidden directory beside it (C{.<name>.<random>.tmp}, which C{batch-*}
    and Spark's and pyarrow's readers skip) and renamed into place, so that a
    reader sees the whole batch or none of it.

    @raise OSError: the directory could not be written; nothing is left in
        its place but what was there before or, where the old directory was
        removed and the rename failed, nothing.
    @raise ValueError: C{counts} does not have the output's columns and types.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(  # OUTPUT_SCHEMA in Arrow's types
        [("source", pa.string()), ("minute", pa.timestamp("us", tz="UTC")), ("level", pa.string()),
         ("status", pa.int32()), ("count", pa.int64())])
    directory = os.path.abspath(directory)
    parent, name = os.path.split(directory)
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{name}.{uuid.uuid4().hex}.tmp")
    os.mkdir(staging)
    try:
        pq.write_table(counts.cast(schema), os.path.join(staging, "part-00000.snappy.parquet"), compression="snappy")
        open(os.path.join(staging, "_SUCCESS"), "wb").close()
        if os.path.lexists(directory):
            shutil.rmtree(directory)
        os.rename(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def parse_lines(rows: Any, parser: str = "sql") -> Any:
    """
    The parsed rows (L{PARSED_SCHEMA}) of the kafkatw source's rows C{rows}
    (a streaming or a batch DataFrame with columns key, value, timestamp and
    headers).

    L{run} applies it to the stream once, so that Spark analyses the parsing
    expressions when the query starts rather than in every micro-batch.

    @param parser: C{"sql"}: Spark SQL expressions, in the JVM
        (L{parsing_sql.parse}); C{"python"}: the reference parser, per line in
        Python workers (L{parsing.parse_arrow_batches}).  Same rows.
    """
    rows = rows.select("key", "value", "timestamp", "headers")
    if parser == "python":
        return rows.mapInArrow(parsing.parse_arrow_batches, PARSED_SCHEMA)
    return parsing_sql.parse(rows)


def process_batch(parsed: Any, batch_id: int, output: str, summary: Summary) -> None:
    """
    The C{foreachBatch} function: count a micro-batch's parsed lines
    (L{parse_lines}), write C{<output>/batch-<id>}, summarise.

    The lines are parsed and aggregated in one Spark job over the
    micro-batch's records: one aggregation with two grouping sets, the
    output's groups (source, minute, level, status; C{error} follows from
    level and status) and the messages.  Its result, a few rows per minute
    and message, comes to the driver as one Arrow table; the per-source
    totals and the top messages are computed from it there, and the output's
    rows are written to parquet from it: by the driver where the output is a
    local directory (L{local_directory}, L{write_counts}), else by a second,
    small Spark job that does not parse again.
    """
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    keys = ["source", "minute", "level", "status", "error"]
    groups = (parsed.groupingSets([keys, ["message"]], *keys, "message")
              .agg(F.count(F.lit(1)).alias("count"), F.grouping("message").alias("per_group"))
              .toArrow())
    counts = groups.filter(pc.equal(groups["per_group"], 1))
    if not counts.num_rows:
        return
    errors = pc.if_else(pc.fill_null(counts["error"], False), counts["count"], 0)
    unparsed = pc.if_else(pc.fill_null(pc.equal(counts["level"], "unparsed"), False), counts["count"], 0)
    per_source = [{"source": r["source"], "lines": r["count_sum"], "errors": r["errors_sum"],
                   "unparsed": r["unparsed_sum"]}
                  for r in counts.select(["source", "count"]).append_column("errors", errors)
                  .append_column("unparsed", unparsed).group_by("source")
                  .aggregate([("count", "sum"), ("errors", "sum"), ("unparsed", "sum")]).to_pylist()]
    rows = counts.select(["source", "minute", "level", "status", "count"])
    spark = parsed.sparkSession
    directory = os.path.join(output, f"batch-{batch_id:08d}")
    local = local_directory(directory, spark.conf.get("spark.master", ""))
    if local is not None:
        write_counts(rows, local)
    else:
        spark.createDataFrame(rows, OUTPUT_SCHEMA).coalesce(1).write.mode("overwrite").parquet(directory)
    # Spark's order: count descending, then message ascending (nulls first), UTF-8 bytes as Arrow's
    # an empty message (a blank line) is not a message: counted apart, so the lines still add up
    by_message = groups.filter(pc.equal(groups["per_group"], 0)).select(["message", "count"])
    blank = pc.fill_null(pc.equal(by_message["message"], ""), False)
    empty = pc.sum(by_message.filter(blank)["count"]).as_py() or 0
    messages = (by_message.filter(pc.invert(blank))
                .sort_by([("count", "descending", "at_end"), ("message", "ascending", "at_start")])
                .slice(0, summary.top).to_pylist())
    summary.add(batch_id, per_source, messages, empty)


#: Spark's default C{spark.sql.codegen.hugeMethodLimit}
_SPARK_HUGE_METHOD_LIMIT = "65535"
#: the HotSpot option that lets the JIT compile methods over 8000 bytes of bytecode
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"


def _compiles_huge_methods(spark: Any) -> bool:
    """
    Whether the JVMs that run the tasks were started with
    L{COMPILE_HUGE_METHODS}: the driver's (C{local} masters) or the
    executors' C{extraJavaOptions} name it.
    """
    def named(key: str) -> bool:
        return COMPILE_HUGE_METHODS in spark.conf.get(key, "").split()

    if spark.conf.get("spark.master", "").startswith("local"):
        return named("spark.driver.extraJavaOptions")
    return named("spark.executor.extraJavaOptions")


def tune(spark: Any) -> None:
    """
    Session settings the job needs to run at speed, where the session has
    Spark's defaults.

    The parsing expressions (L{parsing_sql.parse}) make one
    whole-stage-generated method of about 27 KB of bytecode, and by default
    the JVM does not compile methods over 8000 bytes (HotSpot's
    C{DontCompileHugeMethods}): it would interpret that method for every
    line, at about twice the CPU per line.  Where the task JVMs were started
    with L{COMPILE_HUGE_METHODS} (L{session} does so for C{local} masters),
    the method is compiled and whole-stage code generation is the fastest;
    elsewhere C{spark.sql.codegen.hugeMethodLimit} is lowered to 8000, so
    that Spark runs that stage without whole-stage code generation, with
    expressions in generated methods small enough to be compiled.
    """
    key = "spark.sql.codegen.hugeMethodLimit"
    if spark.conf.get(key, _SPARK_HUGE_METHOD_LIMIT) == _SPARK_HUGE_METHOD_LIMIT and not _compiles_huge_methods(spark):
        spark.conf.set(key, "8000")


def run(spark: Any, bootstrap: str, topic: str, output: str, checkpoint: str, available_now: bool = True,
        trigger_seconds: float = 10.0, starting_offsets: str = "earliest", max_offsets_per_trigger: int | None = None,
        out: TextIO = sys.stdout, parser: str = "sql") -> Any:
    """
    Start the job on C{spark}; with C{available_now}, wait until it has
    processed everything in the topic when it started.

    @return: the C{StreamingQuery}.
    """
    import kafkatw.spark

    kafkatw.spark.register(spark)
    tune(spark)
    if parser == "python":
        spark.sparkContext.addPyFile(os.path.join(HERE, "parsing.py"))
    reader = (spark.readStream.format("kafkatw").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", starting_offsets)
              .option("includeHeaders", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    summary = Summary(out)
    writer = (parse_lines(reader.load(), parser).writeStream.queryName(f"log-pipeline-{topic}")
              .option("checkpointLocation", checkpoint)
              .foreachBatch(lambda df, batch_id: process_batch(df, batch_id, output, summary)))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    query = writer.start()
    if available_now:
        query.awaitTermination()
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"the log pipeline failed: {error}")
    return query


def session() -> Any:
    """A SparkSession for running the job on this machine (local[*] unless spark-submit says otherwise)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("kafkatw-log-pipeline").config("spark.sql.session.timeZone", "UTC")
    if "SPARK_MASTER" in os.environ or not os.environ.get("SPARK_ENV_LOADED"):
        builder = (builder.master(os.environ.get("SPARK_MASTER", "local[*]"))
                   .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.extraJavaOptions", COMPILE_HUGE_METHODS)
                   .config("spark.executor.extraJavaOptions", COMPILE_HUGE_METHODS)
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "4"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-server", required=True, help="host:port of a kafkatw broker")
    parser.add_argument("--topic", default="logs")
    parser.add_argument("--output", required=True, help="directory for the parquet counts")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (keep it to resume)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--available-now", action="store_true",
                      help="process what is in the topic now, in micro-batches, then exit")
    mode.add_argument("--trigger-seconds", type=float, default=10.0, help="micro-batch interval when following (s)")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest, latest or JSON (first run only)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, help="records per micro-batch at most")
    parser.add_argument("--parser", choices=["sql", "python"], default="sql",
                        help="sql: Spark SQL expressions (parsing_sql.py); python: the reference parser (parsing.py)")
    args = parser.parse_args(argv)
    spark = session()
    try:
        query = run(spark, args.bootstrap_server, args.topic, args.output, args.checkpoint,
                    available_now=args.available_now, trigger_seconds=args.trigger_seconds,
                    starting_offsets=args.starting_offsets, max_offsets_per_trigger=args.max_offsets_per_trigger,
                    parser=args.parser)
        if not args.available_now:
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                query.stop()
    finally:
        # The executor's heartbeater can race the shutdown and log a harmless
        # WARN with a stack trace ("Could not find HeartbeatReceiver").
        spark.sparkContext.setLogLevel("ERROR")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
