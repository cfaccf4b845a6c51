"""
The log pipeline and the C{kafkatw} data source on a standalone Spark
cluster: a master and two workers started with the C{spark-class} that the
C{pyspark} wheel ships (no Spark download), executors in their own JVMs on
the workers, their Python workers reading a real broker (real ZooKeeper),
applications submitted with the wheel's C{spark-submit} as a user submits
them (docs/spark.md, "On a cluster").

Executors find kafkatw through C{PYSPARK_PYTHON}: the virtual environment's
Python, which has kafkatw and its dependencies (pyarrow, Twisted, the
compiled accelerator) installed, as docs/spark.md recommends for clusters
whose nodes have that environment (on YARN and Kubernetes the docs ship the
environment itself with C{--archives}; a wheel in C{--py-files} cannot carry
the dependencies nor the compiled extension).

Skipped when pyspark (the C{spark} extra) or Java is not installed
(C{scripts/setup.sh} installs both, as the local Spark tests need them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

from twisted.trial import unittest

try:
    import pyspark
    import pyarrow  # noqa: F401
except ImportError:  # pragma: no cover - the spark extra is not installed
    pyspark = None

from kafkatw.testing import ClassFixture, find_free_port, running_cluster, wait_for, wait_until

from .test_spark import SAMPLE_LINES, create_topic, produce, ship

HERE = os.path.dirname(os.path.abspath(__file__))
#: a submitted application's longest run (s); about 150 s on the 2 cores of a machine running
#: four other test suites (load average 11), less on an idle one
SUBMIT_TIMEOUT_S = 400.0


class StandaloneSparkCluster:
    """
    A Spark standalone master and C{workers} workers (1 core, C{worker_memory}
    each) on free 127.0.0.1 ports, their logs, work and local directories
    under C{directory}; C{stop} ends them and the executors they launched.

    @ivar master: C{"spark://127.0.0.1:PORT"}, once started.
    """

    def __init__(self, directory: str, workers: int = 2, worker_memory: str = "768m") -> None:
        self.directory = directory
        self.workers = workers
        self.worker_memory = worker_memory
        self.spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
        self.processes: list[subprocess.Popen] = []
        self.port = find_free_port()
        self.ui_port = find_free_port()
        self.master = f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment of the daemons and of C{spark-submit}."""
        return {**os.environ, "SPARK_HOME": self.spark_home, "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_MEMORY": "256m",
                # no REST submission server (it listens on the fixed port 6066)
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}

    def _spawn(self, name: str, *argv: str, **env: str) -> None:
        logs = os.path.join(self.directory, "logs")
        os.makedirs(logs, exist_ok=True)
        with open(os.path.join(logs, name + ".log"), "wb") as log:
            self.processes.append(subprocess.Popen(
                [os.path.join(self.spark_home, "bin", "spark-class"), *argv], cwd=self.directory,
                env={**self.env(), **env}, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True))

    def state(self) -> dict[str, Any]:
        """The master's state (its web UI's C{/json/}); {} while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
                return json.load(response)
        except OSError:
            return {}

    def start(self, timeout_s: float = 90.0) -> "StandaloneSparkCluster":
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        wait_for(lambda: self.state().get("status") == "ALIVE", timeout_s, "the Spark master", interval_s=0.3)
        for i in range(self.workers):
            work = os.path.join(self.directory, f"worker-{i}")
            os.makedirs(os.path.join(work, "local"))
            self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master, "--host", "127.0.0.1",
                        "--port", "0", "--webui-port", str(find_free_port()), "--cores", "1",
                        "--memory", self.worker_memory, "--work-dir", work,
                        SPARK_LOCAL_DIRS=os.path.join(work, "local"))
        wait_for(lambda: self.state().get("aliveworkers") == self.workers, timeout_s, "the Spark workers",
                 interval_s=0.3)
        return self

    def submit(self, *argv: str) -> subprocess.Popen:
        """
        Start C{spark-submit} to the master, as docs/spark.md does: one
        executor of 1 core and 512 MiB per worker, the driver on 127.0.0.1
        (its output to C{directory/logs/submit-*.log}); L{wait} for it.
        """
        command = [os.path.join(self.spark_home, "bin", "spark-submit"), "--master", self.master,
                   "--driver-memory", "512m", "--executor-memory", "512m", "--total-executor-cores",
                   str(self.workers), "--conf", "spark.executor.cores=1",
                   "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
                   "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
                   "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
                   "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.sql.session.timeZone=UTC",
                   *argv]
        self.submit_log = os.path.join(self.directory, "logs", f"submit-{len(self.processes)}.log")
        with open(self.submit_log, "wb") as log:
            popen = subprocess.Popen(command, cwd=self.directory, env=self.env(), stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes.append(popen)
        return popen

    def wait(self, popen: subprocess.Popen, timeout_s: float = SUBMIT_TIMEOUT_S) -> None:
        """
        Wait for a L{submit}ted application to end.

        @raise AssertionError: it ran over C{timeout_s} (it is killed) or did
            not exit 0; the message ends with its output.
        """
        try:
            status = popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
            status = f"ran over {timeout_s} s"
        assert status == 0, f"spark-submit: {status}:\n{self.output()[-8000:]}"

    def output(self) -> str:
        """What the last L{submit}ted application printed (stdout and stderr)."""
        with open(self.submit_log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM to each daemon's process group (executors included), SIGKILL after C{timeout_s}."""
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout_s
        for process in reversed(self.processes):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)  # what is left of its group (executors, Python workers)
            except ProcessLookupError:
                pass
            process.wait()
        self.processes = []


def read_parquet(path: str) -> Any:
    """Every parquet file under C{path} (Spark's output directories) as one Arrow table."""
    import pyarrow.dataset as ds

    return ds.dataset(path, format="parquet").to_table()


class SparkClusterTests(ClassFixture, unittest.SynchronousTestCase):
    """
    One Spark standalone cluster, ZooKeeper and broker, and one application
    (tests/integration/spark_cluster_app.py) for the module: its set-up runs
    it, the tests check what it wrote.
    """

    @classmethod
    def setUpClass(cls) -> None:
        if pyspark is None:
            raise unittest.SkipTest("pyspark is not installed (pip install kafkatw[spark])")
        if shutil.which("java") is None:
            raise unittest.SkipTest("Java is not installed (scripts/setup.sh installs default-jre-headless)")
        cls.started = time.monotonic()
        cls.tmp = tempfile.mkdtemp(prefix="kafkatw-spark-cluster-")
        cls._cluster = running_cluster(tmpdir=os.path.join(cls.tmp, "kafkatw"))
        cls.bootstrap = cls._cluster.__enter__()[0].bootstrap
        cls.spark = StandaloneSparkCluster(os.path.join(cls.tmp, "spark"))
        try:
            os.makedirs(cls.spark.directory)
            cls.spark.start()
            cls.startup_s = time.monotonic() - cls.started
            cls.run_application()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def run_application(cls) -> None:
        """
        Produce to topic C{cluster}, ship log files to topic C{logs}, submit
        the application, ship more lines when it asks (its pipeline's restart
        reads them), read its report.
        """
        create_topic(cls.bootstrap, "cluster", 3)
        cls.expected = produce(cls.bootstrap, "cluster", 3, 900)
        create_topic(cls.bootstrap, "logs", 2)
        cls.logs = os.path.join(cls.tmp, "logs")
        os.makedirs(cls.logs)
        cls.paths = [os.path.join(cls.logs, name) for name in SAMPLE_LINES]
        state = os.path.join(cls.tmp, "ship-state.json")
        cls.write_logs(3)
        ship(cls.bootstrap, "logs", cls.paths, state)
        cls.output, report = os.path.join(cls.tmp, "out"), os.path.join(cls.tmp, "report.json")
        started = time.monotonic()
        application = cls.spark.submit(
            os.path.join(HERE, "spark_cluster_app.py"), "--bootstrap-server", cls.bootstrap, "--topic", "cluster",
            "--logs-topic", "logs", "--output", cls.output, "--report", report, "--max-offsets-per-trigger", "300")
        if not wait_until(lambda: os.path.exists(report + ".part1") or application.poll() is not None,
                          SUBMIT_TIMEOUT_S, interval_s=0.2):
            os.killpg(application.pid, signal.SIGKILL)
            raise AssertionError(f"the application's first part ran over {SUBMIT_TIMEOUT_S} s:\n"
                                 f"{cls.spark.output()[-8000:]}")
        if application.poll() is None:
            cls.write_logs(1)
            ship(cls.bootstrap, "logs", cls.paths, state)
            open(report + ".go", "w").close()
        cls.spark.wait(application, SUBMIT_TIMEOUT_S - (time.monotonic() - started))
        cls.application_s = time.monotonic() - started
        cls.stages = [line for line in cls.spark.output().splitlines() if line.startswith("kafkatw-cluster-test:")]
        with open(report) as f:
            cls.report = json.load(f)

    @classmethod
    def write_logs(cls, repeat: int) -> None:
        for name, lines in SAMPLE_LINES.items():
            with open(os.path.join(cls.logs, name), "a", encoding="utf-8") as f:
                f.write(("\n".join(lines) + "\n") * repeat)

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.spark.stop()
        finally:
            cls._cluster.__exit__(None, None, None)
            shutil.rmtree(cls.tmp, ignore_errors=True)
            print(f"\nSpark cluster tests: set-up {getattr(cls, 'startup_s', -1):.1f} s, application"
                  f" {getattr(cls, 'application_s', -1):.1f} s ({'; '.join(getattr(cls, 'stages', []))}),"
                  f" whole class {time.monotonic() - cls.started:.1f} s", file=sys.stderr)

    def test_executors(self) -> None:
        """
        Executors in their own JVMs on the two workers ran the tasks' Python
        workers, which imported kafkatw (with its compiled accelerator)
        from the environment C{PYSPARK_PYTHON} names.
        """
        self.assertEqual(self.report["executors"], 2)
        self.assertEqual({executor for _, executor, _ in self.report["tasks"]}, {"0", "1"})
        from kafkatw.protocol import records

        # the same kafkatw as here: with the accelerator where it is built (scripts/setup.sh builds it)
        self.assertEqual({speedups for _, _, speedups in self.report["tasks"]}, {records._speedups is not None})
        self.assertNotIn(os.getpid(), {pid for pid, _, _ in self.report["tasks"]})

    def test_source_batch_and_stream(self) -> None:
        """
        A batch read and an C{availableNow} stream of the C{kafkatw} source,
        run by the executors, give back every record produced, every column,
        exactly once; the stream in the micro-batches C{maxOffsetsPerTrigger}
        makes (with small fetches passed as C{kafka.*} options).
        """
        import pyarrow as pa

        from kafkatw.spark._options import rate_limit

        batch = read_parquet(os.path.join(self.output, "batch"))
        self.assertEqual(batch.num_rows, 900)
        rows = batch.to_pylist()
        # Spark's timestamps (INT96 in parquet: UTC instants) as ms since the epoch
        stamps = batch.column("timestamp").cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
        self.assertEqual({r["topic"] for r in rows}, {"cluster"})
        self.assertEqual({(r["partition"], r["offset"]): (
            r["key"], r["value"], ms, tuple((h["key"], h["value"]) for h in r["headers"] or ()))
            for r, ms in zip(rows, stamps)}, self.expected)

        stream = read_parquet(os.path.join(self.output, "stream"))
        self.assertEqual(stream.num_rows, 900)
        got = {(r["partition"], r["offset"]): r["value"] for r in stream.to_pylist()}
        self.assertEqual(got, {k: v[1] for k, v in self.expected.items()})
        # the micro-batches: Spark's rateLimit over the three partitions' backlogs
        start = {("cluster", p): 0 for p in range(3)}
        latest = {("cluster", p): 300 for p in range(3)}
        sizes = []
        while start != latest:
            end = rate_limit(300, start, latest)
            sizes.append(sum(end.values()) - sum(start.values()))
            start = end
        self.assertEqual(self.report["stream_batches"], sizes)
        self.assertEqual(sizes, [300, 300, 300])

    def test_log_pipeline(self) -> None:
        """
        examples/log_pipeline/job.py on the cluster: the line counts equal the
        lines shipped, per source, level and status, across a restart from the
        checkpoint with more lines shipped in between (first the Spark SQL
        parser, then the reference parser in the executors' Python workers);
        the output written by the executors (Spark's writer: the master is
        not local).
        """
        rows = read_parquet(os.path.join(self.output, "pipeline")).to_pylist()
        expected = {}
        for path in self.paths:
            with open(path, "rb") as f:
                expected[path] = f.read().count(b"\n")
        self.assertEqual(sum(expected.values()), 4 * sum(len(lines) for lines in SAMPLE_LINES.values()))

        def by(column: str, source: str | None = None) -> dict:
            out: dict = {}
            for row in rows:
                if source is None or row["source"] == os.path.join(self.logs, source):
                    out[row[column]] = out.get(row[column], 0) + row["count"]
            return out

        self.assertEqual(by("source"), expected)
        self.assertEqual(by("status", "access.log"), {200: 280, 404: 280, 500: 280})
        self.assertEqual(by("level", "app.log"), {"info": 320, "error": 320, "warning": 320})
        self.assertEqual(by("level", "twistd.log"), {"info": 80, "unparsed": 68})
        printed = self.report["pipeline_printed"]
        self.assertEqual(printed.count("--- batch"), 2, printed)
        self.assertIn("top messages", printed)
        batches = [int(n) for n in re.findall(r"--- batch \d+: (\d+) lines", printed)]
        self.assertEqual(sum(batches), sum(expected.values()))
