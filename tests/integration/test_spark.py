"""
Integration tests of the C{kafkatw} Spark data source and the log pipeline
(examples/log_pipeline) against a real ZooKeeper and broker, with one
C{local[2]} SparkSession for the whole module (Spark takes seconds to start).

Skipped when pyspark (the C{spark} extra) is not installed.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

from twisted.trial import unittest

try:
    import pyspark  # noqa: F401
    import pyarrow  # noqa: F401
except ImportError:  # pragma: no cover - the spark extra is not installed
    pyspark = None

from kafkatw.client import NewTopic
from kafkatw.client.blocking import BlockingAdminClient, BlockingProducer
from kafkatw.testing import ClassFixture, running_cluster

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _load_job():
    """examples/log_pipeline/job.py as a module (it is a script, not a package)."""
    path = os.path.join(ROOT, "examples", "log_pipeline", "job.py")
    spec = importlib.util.spec_from_file_location("log_pipeline_job", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(os.path.dirname(path))
    return module


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict | None = None) -> None:
    with BlockingAdminClient(bootstrap) as client:
        errors = client.create_topics([NewTopic(name, partitions, 1, configs=configs or {})])
        assert errors == {name: None}, errors
        deadline = time.monotonic() + 30
        while True:  # until every broker's metadata has it
            try:
                if len(client.describe_topics([name])[name].partitions) == partitions:
                    return
            except Exception:
                pass
            assert time.monotonic() < deadline, f"topic {name} did not appear"
            time.sleep(0.1)


def log_offset(bootstrap: str, topic: str, partition: int, timestamp: int) -> int:
    """ListOffsets for one partition (-2: the log start offset, -1: the high watermark)."""
    with BlockingAdminClient(bootstrap) as client:
        return client.list_offsets({(topic, partition): timestamp})[(topic, partition)].offset


def produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0,
            timestamp_ms: int | None = None, flush_every: int | None = None) -> dict[tuple[int, int], tuple]:
    """
    Produce C{count} records round-robin over the partitions (a flush every
    C{flush_every} records makes that many record batches); return
    (partition, offset) -> (key, value, timestamp ms, headers) as acknowledged.
    """
    sent = []
    with BlockingProducer(bootstrap, acks=-1, linger_ms=5) as producer:
        for i in range(start, start + count):
            key = None if i % 7 == 0 else b"key-%d" % i
            value = b"value-%d-" % i + b"x" * (i % 40)
            headers = [("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else []
            ts = timestamp_ms if timestamp_ms is not None else 1_700_000_000_000 + i
            future = producer.send(topic, value, key=key, partition=i % partitions, headers=headers,
                                   timestamp_ms=ts)
            sent.append((future, key, value, ts, headers))
            if flush_every and (i + 1) % flush_every == 0:
                producer.flush(30)
        producer.flush(30)
    out = {}
    for future, key, value, ts, headers in sent:
        meta = future.get(30)
        out[(meta.partition, meta.offset)] = (key, value, ts, tuple(headers))
    return out


class SparkTestsBase(ClassFixture, unittest.SynchronousTestCase):
    spark = None

    @classmethod
    def setUpClass(cls) -> None:
        if pyspark is None:
            raise unittest.SkipTest("pyspark is not installed (pip install kafkatw[spark])")
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        cls.tmp = tempfile.mkdtemp(prefix="kafkatw-spark-")
        # one broker: its __transaction_state (test_read_committed) has one replica
        cls._cluster = running_cluster(overrides={"log.retention.check.interval.ms": "200",
                                                  "transaction.state.log.replication.factor": "1",
                                                  "transaction.state.log.min.isr": "1"})
        cls.cluster = cls._cluster.__enter__()
        cls.bootstrap = cls.cluster[0].bootstrap
        try:
            from pyspark.sql import SparkSession

            import kafkatw.spark

            started = time.monotonic()
            cls.spark = (SparkSession.builder.master("local[2]").appName("kafkatw-tests")
                         .config("spark.driver.host", "127.0.0.1")
                         .config("spark.driver.bindAddress", "127.0.0.1")
                         .config("spark.ui.enabled", "false")
                         .config("spark.sql.shuffle.partitions", "2")
                         .config("spark.sql.session.timeZone", "UTC")
                         .getOrCreate())
            cls.spark.sparkContext.setLogLevel("ERROR")
            cls.spark_startup_s = time.monotonic() - started
            kafkatw.spark.register(cls.spark)
        except BaseException:
            cls._cluster.__exit__(None, None, None)
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.spark is not None:
            cls.spark.stop()
        cls._cluster.__exit__(None, None, None)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, name: str) -> str:
        return os.path.join(self.tmp, self.id().rsplit(".", 1)[-1], name)

    def source(self, stream: bool = False, **options: str):
        reader = self.spark.readStream if stream else self.spark.read
        reader = reader.format("kafkatw").option("kafka.bootstrap.servers", self.bootstrap)
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load()

    def stream_to_parquet(self, topic: str, name: str, available_now: bool = True, **options: str):
        df = self.source(stream=True, subscribe=topic, **options)
        writer = (df.writeStream.format("parquet").option("path", self.path(name + "-out"))
                  .option("checkpointLocation", self.path(name + "-checkpoint")))
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime="200 milliseconds")
        return writer.start()

    def parquet_rows(self, name: str) -> list:
        if not glob.glob(os.path.join(self.path(name + "-out"), "*.parquet")):
            return []
        return self.spark.read.parquet(self.path(name + "-out")).select("partition", "offset", "value").collect()


class _DataSourceCases:
    def test_batch_read_every_column(self) -> None:
        """
        A batch read with headers gives back exactly what was produced, every
        column, and the schema of Spark's Kafka source.
        """
        create_topic(self.bootstrap, "known", 3)
        expected = produce(self.bootstrap, "known", 3, 600)
        df = self.source(subscribe="known", includeHeaders="true", maxRecordsPerPartition="77")
        self.assertEqual(
            [(f.name, f.dataType.simpleString()) for f in df.schema.fields],
            [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
             ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
             ("headers", "array<struct<key:string,value:binary>>")])
        rows = df.collect()
        self.assertEqual(len(rows), 600)
        got = {}
        for r in rows:
            self.assertEqual(r.topic, "known")
            self.assertEqual(r.timestampType, 0)
            ts_ms = (r.timestamp.replace(tzinfo=timezone.utc) - EPOCH) // timedelta(milliseconds=1)
            key = None if r.key is None else bytes(r.key)
            headers = tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers)
            got[(r.partition, r.offset)] = (key, bytes(r.value), ts_ms, headers)
        self.assertEqual(got, expected)
        # without headers: no headers column; offsets JSON bounds
        df = self.source(assign='{"known":[1,2]}', startingOffsets='{"known":{"1":5,"2":-2}}',
                         endingOffsets='{"known":{"1":15,"2":-1}}')
        self.assertNotIn("headers", df.columns)
        pairs = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
        self.assertEqual(pairs, [(1, o) for o in range(5, 15)] + [(2, o) for o in range(200)])
        self.assertEqual(self.source(subscribePattern="kno.*").count(), 600)

    def test_read_committed(self) -> None:
        """
        kafka.isolation.level=read_committed (as Spark's Kafka source): only
        committed transactions' records, never an aborted one; the default
        reads them all.
        """
        from confluent_kafka import Producer

        create_topic(self.bootstrap, "txn", 1)
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "spark-test"})
        producer.init_transactions(30)
        for values, commit in ((["c1", "c2", "c3"], True), (["a1", "a2"], False), (["c4"], True)):
            producer.begin_transaction()
            for v in values:
                producer.produce("txn", v.encode(), partition=0)
            producer.flush(30)  # on the broker before the abort (an abort purges what is still queued)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
        committed = sorted(bytes(r.value).decode() for r in
                           self.source(subscribe="txn", **{"kafka.isolation.level": "read_committed"}).collect())
        self.assertEqual(committed, ["c1", "c2", "c3", "c4"])
        everything = sorted(bytes(r.value).decode() for r in self.source(subscribe="txn").collect())
        self.assertEqual(everything, ["a1", "a2", "c1", "c2", "c3", "c4"])

    def test_starting_timestamp(self) -> None:
        """startingTimestamp starts each partition at its first record at or after the timestamp."""
        create_topic(self.bootstrap, "stamped", 2)
        expected = produce(self.bootstrap, "stamped", 2, 400)  # record i: timestamp 1_700_000_000_000 + i
        df = self.source(subscribe="stamped", startingTimestamp=str(1_700_000_000_000 + 250))
        self.assertEqual(sorted(r.value for r in df.select("value").collect()),
                         sorted(v[1] for v in expected.values() if v[2] >= 1_700_000_000_000 + 250))

    def test_bad_options(self) -> None:
        """Bad option combinations fail with a message naming the option."""
        from pyspark.errors import PySparkException
        from py4j.protocol import Py4JJavaError

        cases = [
            ({}, "exactly one of"),
            ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
            ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets='latest'"),
            ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets='earliest'"),
            ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ]
        for options, message in cases:
            with self.assertRaises((PySparkException, Py4JJavaError, ValueError)) as caught:
                self.source(**options).collect()
            self.assertIn(message, str(caught.exception))

    def test_available_now_several_batches(self) -> None:
        """availableNow with maxOffsetsPerTrigger runs several micro-batches and reads each record once."""
        create_topic(self.bootstrap, "avail", 2)
        expected = produce(self.bootstrap, "avail", 2, 1000)
        query = self.stream_to_parquet("avail", "avail", startingOffsets="earliest", maxOffsetsPerTrigger="300")
        query.awaitTermination(120)
        self.assertIsNone(query.exception())
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        self.assertEqual([p["numInputRows"] for p in batches], [300, 300, 300, 100])
        rows = self.parquet_rows("avail")
        self.assertEqual(sorted((r.partition, r.offset) for r in rows), sorted(expected))
        self.assertEqual({(r.partition, r.offset): bytes(r.value) for r in rows},
                         {k: v[1] for k, v in expected.items()})

    def test_min_offsets_per_trigger(self) -> None:
        """
        minOffsetsPerTrigger and maxTriggerDelay, as Spark's Kafka source: the
        first micro-batch runs at once; then one waits until that many new
        offsets are there (60 arrive in one record batch: read at once) or
        maxTriggerDelay passed since the last one (5 records: read only then).
        """
        create_topic(self.bootstrap, "minoffsets", 1)

        def produce_batch(start: int, count: int) -> None:
            # one record batch (flushed before the linger ends): the records become readable together
            with BlockingProducer(self.bootstrap, acks=-1, linger_ms=60_000) as producer:
                for i in range(start, start + count):
                    producer.send("minoffsets", b"value-%d" % i, partition=0)
                producer.flush(30)

        def wait_rows(count: int) -> None:
            # the micro-batches' progress reports (reading the sink's files before its metadata log has them fails)
            deadline = time.monotonic() + 90
            while sum(p["numInputRows"] for p in query.recentProgress) < count:
                self.assertIsNone(query.exception())
                self.assertLess(time.monotonic(), deadline, f"{count} rows did not arrive")
                time.sleep(0.2)

        produce_batch(0, 10)
        query = self.stream_to_parquet("minoffsets", "minoffsets", available_now=False, startingOffsets="earliest",
                                       minOffsetsPerTrigger="50", maxTriggerDelay="25s")
        try:
            wait_rows(10)
            produce_batch(10, 60)
            wait_rows(70)
            produce_batch(70, 5)
            wait_rows(75)
        finally:
            query.stop()
        batches = [(p["numInputRows"], datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")))
                   for p in query.recentProgress if p["numInputRows"] > 0]
        self.assertEqual([n for n, _ in batches], [10, 60, 5])
        (_, first), (_, enough), (_, late) = batches
        self.assertLess((enough - first).total_seconds(), 20)  # did not wait for maxTriggerDelay
        self.assertGreaterEqual((late - enough).total_seconds(), 22)  # waited for it (25 s from its latestOffset)
        self.assertEqual(sorted(bytes(r.value) for r in self.parquet_rows("minoffsets")),
                         sorted(b"value-%d" % i for i in range(75)))

    def test_restart_from_checkpoint(self) -> None:
        """
        A query stopped part-way and restarted from its checkpoint (with more
        records produced meanwhile) ends with exactly the expected rows.
        """
        create_topic(self.bootstrap, "restart", 3)
        expected = produce(self.bootstrap, "restart", 3, 900)
        query = self.stream_to_parquet("restart", "restart", available_now=False, startingOffsets="earliest",
                                       maxOffsetsPerTrigger="100")
        deadline = time.monotonic() + 60
        while len([p for p in query.recentProgress if p["numInputRows"] > 0]) < 2:
            self.assertLess(time.monotonic(), deadline)
            self.assertIsNone(query.exception())
            time.sleep(0.2)
        query.stop()
        first = self.parquet_rows("restart")
        self.assertGreater(len(first), 0)
        self.assertLess(len(first), 900)
        expected.update(produce(self.bootstrap, "restart", 3, 300, start=900))
        query = self.stream_to_parquet("restart", "restart", startingOffsets="latest")  # ignored: checkpoint wins
        query.awaitTermination(120)
        self.assertIsNone(query.exception())
        rows = self.parquet_rows("restart")
        self.assertEqual(sorted((r.partition, r.offset) for r in rows), sorted(expected))

    def test_fail_on_data_loss(self) -> None:
        """
        After retention deleted offsets a query needs: failOnDataLoss=true
        fails it naming the topic, partition and offsets; false skips to the
        log start offset.
        """
        create_topic(self.bootstrap, "retained", 1, {"retention.ms": "1000", "segment.bytes": "2048"})
        old = int(time.time() * 1000) - 3_600_000
        produce(self.bootstrap, "retained", 1, 300, timestamp_ms=old, flush_every=10)
        deadline = time.monotonic() + 30
        while (log_start := log_offset(self.bootstrap, "retained", 0, -2)) == 0:
            self.assertLess(time.monotonic(), deadline, "retention did not run")
            time.sleep(0.2)
        high = log_offset(self.bootstrap, "retained", 0, -1)
        self.assertEqual(high, 300)
        starting = '{"retained":{"0":0}}'

        with self.assertRaises(Exception) as caught:
            self.source(subscribe="retained", startingOffsets=starting).collect()
        log_start_after = log_offset(self.bootstrap, "retained", 0, -2)
        # retention keeps running: the error names the log start offset of its moment
        missing = re.search(r"retained-0: offsets \[0, (\d+)\)", str(caught.exception))
        self.assertIsNotNone(missing, str(caught.exception))
        self.assertTrue(log_start <= int(missing.group(1)) <= log_start_after,
                        (log_start, missing.group(1), log_start_after))
        self.assertIn("failOnDataLoss", str(caught.exception))
        log_start = log_start_after

        rows = self.source(subscribe="retained", startingOffsets=starting, failOnDataLoss="false").collect()
        log_start_after = log_offset(self.bootstrap, "retained", 0, -2)
        # Retention keeps deleting old segments meanwhile: the read starts at the log
        # start offset of its moment, between the two seen around it, and misses nothing after.
        offsets = sorted(r.offset for r in rows)
        self.assertTrue(log_start <= offsets[0] <= log_start_after, (log_start, offsets[0], log_start_after))
        self.assertEqual(offsets, list(range(offsets[0], 300)))

        query = self.stream_to_parquet("retained", "retained-stream", startingOffsets=starting)
        with self.assertRaises(Exception) as caught:
            query.awaitTermination(120)
        self.assertIn("retained-0: offsets [0, ", str(caught.exception))

        query = self.stream_to_parquet("retained", "retained-skip", startingOffsets=starting,
                                       failOnDataLoss="false")
        query.awaitTermination(120)
        self.assertIsNone(query.exception())
        offsets = sorted(r.offset for r in self.parquet_rows("retained-skip"))
        self.assertEqual(offsets[-1], 299)
        self.assertEqual(offsets, list(range(offsets[0], 300)))
        self.assertGreaterEqual(offsets[0], log_start)


SAMPLE_LINES = {
    "syslog": ["Nov 22 04:00:%02d web1 sshd[12]: Accepted publickey for user%d" % (i % 60, i) for i in range(150)]
    + ["Nov 22 04:01:%02d web1 kernel: I/O error on dev sda" % (i % 60) for i in range(30)],
    "app.log": ["2026-11-22 04:0%d:00,123 %s request %d handled" % (i % 3, ("INFO", "ERROR", "WARNING")[i % 3], i)
                for i in range(240)],
    "dpkg.log": ["2026-11-22 04:00:41 status installed pkg%d:amd64 1.%d" % (i, i) for i in range(50)],
    "access.log": ['10.0.0.%d - - [22/Nov/2026:04:00:41 +0000] "GET /p%d HTTP/1.1" %d 12 "-" "curl"'
                   % (i % 9, i % 4, (200, 404, 500)[i % 3]) for i in range(210)],
    "twistd.log": ["2026-11-22T04:00:41+0000 [kafkatw#info] started %d" % i for i in range(20)]
    + ["garbage line %d \u00e9" % i for i in range(17)],
}


def ship(bootstrap: str, topic: str, paths: list[str], state_file: str) -> None:
    """Ship the files with kafkatw.shipper if it exists, else produce records of the same shape."""
    try:
        from kafkatw.shipper import ship_once
    except ImportError:
        ship_once = None
    if ship_once is not None:
        ship_once(bootstrap, topic, paths, state_file=state_file)
        return
    import json
    import socket

    host = socket.gethostname()
    state = json.load(open(state_file)) if os.path.exists(state_file) else {}
    with BlockingProducer(bootstrap, acks=-1, linger_ms=5) as producer:
        for path in paths:
            with open(path, "rb") as f:
                lines = f.read().split(b"\n")[:-1]
            for n, line in enumerate(lines[state.get(path, 0):], state.get(path, 0) + 1):
                producer.send(topic, line, key=f"{host}:{path}".encode(),
                              headers=[("host", host.encode()), ("path", path.encode()), ("line_no", b"%d" % n)])
            state[path] = len(lines)
        producer.flush(30)
    with open(state_file, "w") as f:
        json.dump(state, f)


class _PipelineCases:
    def write_logs(self, directory: str, repeat: int) -> None:
        os.makedirs(directory, exist_ok=True)
        for name, lines in SAMPLE_LINES.items():
            with open(os.path.join(directory, name), "a", encoding="utf-8") as f:
                for _ in range(repeat):
                    f.write("\n".join(lines) + "\n")

    def totals(self, output: str) -> dict[str, int]:
        rows = self.spark.read.parquet(os.path.join(output, "batch-*")).groupBy("source").sum("count").collect()
        return {r[0]: r[1] for r in rows}

    def expected(self, directory: str) -> dict[str, int]:
        out = {}
        for name in SAMPLE_LINES:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[path] = f.read().count(b"\n")
        return out

    def test_pipeline_totals(self) -> None:
        """
        Lines counted by the Spark job = lines in the shipped files, per
        source, over several micro-batches and across a restart from the
        checkpoint with more lines shipped in between (the first run parses
        with the reference parser in Python workers, the second with the
        Spark SQL expressions: the job's two C{--parser}s).
        """
        import io

        job = _load_job()
        create_topic(self.bootstrap, "logs", 2)
        logs = self.path("logs")
        output, checkpoint, state = self.path("out"), self.path("checkpoint"), self.path("ship-state.json")
        paths = [os.path.join(logs, name) for name in SAMPLE_LINES]
        self.write_logs(logs, 3)
        ship(self.bootstrap, "logs", paths, state)
        printed = io.StringIO()
        job.run(self.spark, self.bootstrap, "logs", output, checkpoint, available_now=True,
                max_offsets_per_trigger=1000, out=printed, parser="python")
        self.assertEqual(self.totals(output), self.expected(logs))
        self.assertGreaterEqual(printed.getvalue().count("--- batch"), 2)
        self.assertIn("top messages", printed.getvalue())
        print(printed.getvalue()[:3000])
        import pandas  # the output is plain parquet: pandas reads the whole directory too
        self.assertEqual(int(pandas.read_parquet(output)["count"].sum()), sum(self.expected(logs).values()))

        self.write_logs(logs, 1)
        ship(self.bootstrap, "logs", paths, state)
        job.run(self.spark, self.bootstrap, "logs", output, checkpoint, available_now=True, out=printed)
        self.assertEqual(self.totals(output), self.expected(logs))

        df = self.spark.read.parquet(os.path.join(output, "batch-*"))
        self.assertEqual([(f.name, f.dataType.simpleString()) for f in df.schema.fields],
                         [("source", "string"), ("minute", "timestamp"), ("level", "string"), ("status", "int"),
                          ("count", "bigint")])
        access = os.path.join(logs, "access.log")
        by_status = {r[0]: r[1] for r in df.where(df.source == access).groupBy("status").sum("count").collect()}
        self.assertEqual(by_status, {200: 280, 404: 280, 500: 280})
        app = os.path.join(logs, "app.log")
        by_level = {r[0]: r[1] for r in df.where(df.source == app).groupBy("level").sum("count").collect()}
        self.assertEqual(by_level, {"info": 320, "error": 320, "warning": 320})
        twistd = os.path.join(logs, "twistd.log")
        by_level = {r[0]: r[1] for r in df.where(df.source == twistd).groupBy("level").sum("count").collect()}
        self.assertEqual(by_level, {"info": 80, "unparsed": 68})
        # the summary's error totals (from the same aggregation as the output) agree with the output
        errors = (df.where(df.level.isin("error", "critical") | (df.status >= 500)).groupBy().sum("count")
                  .collect()[0][0])
        batches = re.findall(r"--- batch \d+: (\d+) lines, (\d+) errors", printed.getvalue())
        self.assertEqual((sum(int(b[0]) for b in batches), sum(int(b[1]) for b in batches)),
                         (sum(self.expected(logs).values()), errors))


class SparkTests(_DataSourceCases, _PipelineCases, SparkTestsBase):
    """All the Spark tests, in one class: one cluster and one SparkSession for the module."""
