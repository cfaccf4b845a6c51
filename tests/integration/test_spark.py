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

from kafkatw.client.blocking import BlockingProducer
from kafkatw.client.wire import WireClient
from kafkatw.testing import running_cluster

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
    with WireClient(bootstrap) as client:
        response = client.create_topics([{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                          "configs": configs or {}}])
        for topic in response.topics:
            assert int(topic.error_code) == 0, (topic.name, topic.error_code)
        client.partitions_for(name)


def produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0,
            timestamp_ms: int | None = None) -> dict[tuple[int, int], tuple]:
    """
    Produce C{count} records round-robin over the partitions; return
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
        producer.flush(30)
    out = {}
    for future, key, value, ts, headers in sent:
        meta = future.get(30)
        out[(meta.partition, meta.offset)] = (key, value, ts, tuple(headers))
    return out


class SparkTestsBase(unittest.SynchronousTestCase):
    spark = None

    @classmethod
    def setUpClass(cls) -> None:
        if pyspark is None:
            raise unittest.SkipTest("pyspark is not installed (pip install kafkatw[spark])")
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        cls.tmp = tempfile.mkdtemp(prefix="kafkatw-spark-")
        cls._cluster = running_cluster(overrides={"log.retention.check.interval.ms": "200"})
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


class DataSourceTests(SparkTestsBase):
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
        produce(self.bootstrap, "retained", 1, 300, timestamp_ms=old)
        deadline = time.monotonic() + 30
        with WireClient(self.bootstrap) as client:
            while (log_start := client.list_offsets("retained", 0, -2)) == 0:
                self.assertLess(time.monotonic(), deadline, "retention did not run")
                time.sleep(0.2)
            high = client.list_offsets("retained", 0, -1)
        self.assertEqual(high, 300)
        starting = '{"retained":{"0":0}}'

        with self.assertRaises(Exception) as caught:
            self.source(subscribe="retained", startingOffsets=starting).collect()
        self.assertIn("retained-0: offsets [0, %d)" % log_start, str(caught.exception))
        self.assertIn("failOnDataLoss", str(caught.exception))

        rows = self.source(subscribe="retained", startingOffsets=starting, failOnDataLoss="false").collect()
        self.assertEqual(sorted(r.offset for r in rows), list(range(log_start, 300)))

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
