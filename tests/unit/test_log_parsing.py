"""
Tests of the log pipeline's line parsing (examples/log_pipeline/parsing.py)
and of its job's session settings and output (examples/log_pipeline/job.py):
no Spark.
"""

from __future__ import annotations

import importlib.util
import os
from datetime import datetime, timezone

from twisted.trial import unittest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "log_pipeline", "parsing.py")
_spec = importlib.util.spec_from_file_location("log_pipeline_parsing", _PATH)
parsing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(parsing)
_JOB_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "log_pipeline", "job.py")
_job_spec = importlib.util.spec_from_file_location("log_pipeline_job", _JOB_PATH)
job = importlib.util.module_from_spec(_job_spec)
_job_spec.loader.exec_module(job)


def ms(*args: int, tz: timezone = timezone.utc) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


RECORD_MS = ms(2026, 11, 22, 4, 1, 0)
#: samples of real logs (tests/data/README.md)
_DATA = os.path.join(os.path.dirname(__file__), "..", "data")


class ParseLineTests(unittest.SynchronousTestCase):
    def check(self, line: str, fmt: str, ts: int | None, level: str | None, status: int | None,
              message: str | None = None, record_ms: int = RECORD_MS) -> None:
        parsed = parsing.parse_line(line, record_ms)
        self.assertEqual((parsed.format, parsed.timestamp_ms, parsed.level, parsed.status),
                         (fmt, ts, level, status), line)
        if message is not None:
            self.assertEqual(parsed.message, message)

    def test_syslog_rfc3164(self) -> None:
        self.check("Nov 22 04:00:41 web1 sshd[1234]: Accepted publickey for root", "syslog",
                   ms(2026, 11, 22, 4, 0, 41), "info", None, "sshd: Accepted publickey for root")
        self.check("Nov  2 04:00:41 web1 kernel: EXT4-fs error (device sda1): bad block", "syslog",
                   ms(2026, 11, 2, 4, 0, 41), "error", None)
        self.check("Nov 22 04:00:41 web1 CRON[9]: warning: low disk", "syslog", ms(2026, 11, 22, 4, 0, 41),
                   "warning", None)

    def test_syslog_year_rollover(self) -> None:
        """A December line read in January belongs to the previous year."""
        self.check("Dec 31 23:59:59 h prog: x", "syslog", ms(2025, 12, 31, 23, 59, 59), "info", None,
                   record_ms=ms(2026, 1, 1, 0, 0, 5))

    def test_syslog_rfc3339(self) -> None:
        self.check("2026-11-22T04:00:41.123456+00:00 web1 systemd[1]: Started Session 5 of user root.", "syslog",
                   ms(2026, 11, 22, 4, 0, 41) + 123, "info", None, "systemd: Started Session 5 of user root.")
        self.check("2026-11-22T05:00:41+01:00 web1 app: connection failed", "syslog",
                   ms(2026, 11, 22, 4, 0, 41), "error", None)

    def test_twistd(self) -> None:
        self.check("2026-11-22T04:00:41+0000 [kafkatw.broker.server#info] listening on 9092", "twistd",
                   ms(2026, 11, 22, 4, 0, 41), "info", None, "listening on 9092")
        self.check("2026-11-22T04:00:41-0100 [-#error] boom", "twistd", ms(2026, 11, 22, 5, 0, 41), "error", None)
        self.check("2026-11-22T04:00:41+0000 [x#warn] careful", "twistd", ms(2026, 11, 22, 4, 0, 41), "warning",
                   None)

    def test_app_logs(self) -> None:
        self.check("2026-11-22 04:00:41,123 ERROR Something broke", "app", ms(2026, 11, 22, 4, 0, 41) + 123,
                   "error", None, "Something broke")
        self.check("2026-11-22 04:00:41,123 - myapp - WARNING - disk at 91%", "app",
                   ms(2026, 11, 22, 4, 0, 41) + 123, "warning", None, "disk at 91%")
        self.check("2026-11-22T04:00:41Z [INFO] ready", "app", ms(2026, 11, 22, 4, 0, 41), "info", None, "ready")
        # a lower-case level word that is just part of the message is not a level
        self.check("2026-11-22 04:00:41 user info updated", "app", ms(2026, 11, 22, 4, 0, 41), "info", None)

    def test_dpkg_and_apt(self) -> None:
        self.check("2026-11-22 04:00:41 status installed libc-bin:amd64 2.36-9", "dpkg",
                   ms(2026, 11, 22, 4, 0, 41), "info", None)
        self.check("2026-11-22 04:00:41 upgrade curl:amd64 7.88.1-10 7.88.1-10+deb12u5", "dpkg",
                   ms(2026, 11, 22, 4, 0, 41), "info", None)
        self.check("Start-Date: 2026-11-22  04:00:41", "dpkg", ms(2026, 11, 22, 4, 0, 41), "info", None)

    def test_alternatives_log(self) -> None:
        """Debian's alternatives.log (a sample from a Debian 12 machine): every line parses, in its own minute."""
        with open(os.path.join(_DATA, "alternatives.log"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 6)
        for line in lines:
            parsed = parsing.parse_line(line, RECORD_MS)
            self.assertEqual((parsed.format, parsed.level, parsed.status), ("program", "info", None), line)
            self.assertEqual(parsed.message, "update-alternatives: " + line.split(": ", 1)[1])
        self.check(lines[0], "program", ms(2025, 6, 24, 14, 36, 53), "info", None)
        self.check("update-alternatives 2026-11-22 04:00:41: error: no alternatives for x", "program",
                   ms(2026, 11, 22, 4, 0, 41), "error", None, "update-alternatives: error: no alternatives for x")
        self.check("update-alternatives 2026-11-22 04:00:41: ", "program", ms(2026, 11, 22, 4, 0, 41), "info", None,
                   "update-alternatives: ")
        # a date that does not exist: no time (the record's), as for the other formats
        self.check("update-alternatives 2026-13-22 04:00:41: x", "program", None, "info", None)
        # not a program's name
        self.check("1x 2026-11-22 04:00:41: x", "unparsed", None, "unparsed", None)

    def test_carriage_returns(self) -> None:
        """A line is what a terminal shows of it: the text after its last \\r (trailing ones dropped)."""
        self.check("(Reading 5%\r(Reading 10%\r(Reading 6089 files installed.)\r", "unparsed", None, "unparsed",
                   None, "(Reading 6089 files installed.)")
        self.check("a\r\rb", "unparsed", None, "unparsed", None, "b")
        self.check("x\r\r\n", "unparsed", None, "unparsed", None, "x")
        self.check("\r", "unparsed", None, "unparsed", None, "")
        self.check("Progress: [ 40%]\r2026-11-22 04:00:41 ERROR y", "app", ms(2026, 11, 22, 4, 0, 41), "error",
                   None, "y")

    def test_apt_term_log(self) -> None:
        """
        apt/term.log (a sample from a Debian 12 machine): its headers carry
        their time; dpkg's output lines (format C{term}, by the source) none,
        so they count at the record's time, each as the one message a
        terminal shows (never a progress bar's updates); its blank line, an
        empty message.
        """
        with open(os.path.join(_DATA, "term.log"), encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")[:-1]
        self.assertEqual(len(lines), 12)
        parsed = [parsing.parse_line(line, RECORD_MS, "/var/log/apt/term.log") for line in lines]
        self.assertEqual(parsed[0], parsing.ParsedLine("term", None, "info", None, ""))
        self.assertEqual(parsed[1], parsing.ParsedLine("dpkg", ms(2025, 6, 24, 14, 36, 25), "info", None,
                                                       "Log started"))
        self.assertEqual(parsed[-1], parsing.ParsedLine("dpkg", ms(2025, 6, 24, 14, 36, 25), "info", None,
                                                        "Log ended"))
        templates = [parsing.template(p.message) for p in parsed[2:-1]]
        self.assertEqual(templates[0], "(Reading database ... # files and directories currently installed.)")
        self.assertEqual(templates[4], templates[0])
        self.assertEqual(templates[3], "Setting up libsystemd#:amd# (#.#-#~deb#u#) ...")
        self.assertEqual([(p.format, p.timestamp_ms, p.level) for p in parsed[2:-1]], [("term", None, "info")] * 9)
        for t in templates:
            self.assertNotIn("%", t)
        # the same lines from another file: of no known format
        self.assertEqual({parsing.parse_line(line, RECORD_MS, "/var/log/x").format for line in lines[2:-1]},
                         {"unparsed"})

    def test_term_source(self) -> None:
        """Which sources are apt's term.log (parsing_sql spells TERM_SOURCE in Java's syntax: the same)."""
        line = "dpkg: error processing package foo (--configure):\r"
        for source, fmt in [("/var/log/apt/term.log", "term"), ("apt/term.log.1", "term"), ("/x/apt/term.log", "term"),
                            ("/var/log/apt/term.log.1.gz", "unparsed"), ("/var/log/xapt/term.log", "unparsed"),
                            ("/var/log/apt/term.log\n", "unparsed"), (None, "unparsed")]:
            parsed = parsing.parse_line(line, RECORD_MS, source)
            self.assertEqual((parsed.format, parsed.level), (fmt, "error" if fmt == "term" else "unparsed"), source)
            self.assertEqual(parsed.message, line[:-1])
        _sql_spec = importlib.util.spec_from_file_location(
            "log_pipeline_parsing_sql", os.path.join(os.path.dirname(_PATH), "parsing_sql.py"))
        parsing_sql = importlib.util.module_from_spec(_sql_spec)
        _sql_spec.loader.exec_module(parsing_sql)
        self.assertEqual(parsing_sql._patterns()["term_source"], parsing.TERM_SOURCE.pattern.replace("\\Z", "\\z"))

    def test_access_logs(self) -> None:
        self.check('127.0.0.1 - - [22/Nov/2026:04:00:41 +0000] "GET /index.html?x=1 HTTP/1.1" 200 612 "-" "curl/7.88"',
                   "access", ms(2026, 11, 22, 4, 0, 41), None, 200, "GET /index.html")
        self.check('10.0.0.1 - bob [22/Nov/2026:05:00:41 +0100] "POST /api HTTP/2.0" 503 0', "access",
                   ms(2026, 11, 22, 4, 0, 41), None, 503)

    def test_unparsed(self) -> None:
        for line in ["", "just some text", "\x00\x01binary", "Nov 99 04:00:41 h p: x", "Foo 22 04:00:41 h p: x",
                     "  Commandline: apt-get install foo"]:
            parsed = parsing.parse_line(line, RECORD_MS)
            if parsed.format == "syslog":
                self.assertIsNone(parsed.timestamp_ms)
            else:
                self.assertEqual((parsed.format, parsed.timestamp_ms, parsed.level, parsed.status),
                                 ("unparsed", None, "unparsed", None), line)

    def test_never_raises_on_bad_dates(self) -> None:
        for line in ["2026-13-45 99:99:99 ERROR x", "2026-02-30T04:00:41Z [-#info] x",
                     '1.1.1.1 - - [31/Feb/2026:04:00:41 +0000] "GET / HTTP/1.1" 200 1']:
            parsed = parsing.parse_line(line, RECORD_MS)
            self.assertIsNone(parsed.timestamp_ms)


class HelperTests(unittest.SynchronousTestCase):
    def test_minute(self) -> None:
        parsed = parsing.parse_line("2026-11-22 04:00:41,123 ERROR x", RECORD_MS)
        self.assertEqual(parsing.minute_ms(parsed, RECORD_MS), ms(2026, 11, 22, 4, 0, 0))
        unparsed = parsing.parse_line("junk", RECORD_MS)
        self.assertEqual(parsing.minute_ms(unparsed, RECORD_MS + 5_000), ms(2026, 11, 22, 4, 1, 0))

    def test_is_error(self) -> None:
        self.assertTrue(parsing.is_error("error", None))
        self.assertTrue(parsing.is_error("critical", None))
        self.assertTrue(parsing.is_error(None, 502))
        self.assertFalse(parsing.is_error(None, 404))
        self.assertFalse(parsing.is_error("warning", None))
        self.assertFalse(parsing.is_error("unparsed", None))

    def test_template(self) -> None:
        self.assertEqual(parsing.template("took 123 ms at 0xdeadBEEF"), "took # ms at #")
        self.assertEqual(parsing.template("(Reading 5%\r(Reading 10%\r"), "(Reading #% (Reading #%")

    def test_source(self) -> None:
        self.assertEqual(parsing.source_of(b"/var/log/syslog", b"h:/other"), "/var/log/syslog")
        self.assertEqual(parsing.source_of(None, b"host1:/var/log/a.log"), "/var/log/a.log")
        self.assertEqual(parsing.source_of(None, None), "unknown")


class FakeConf:
    """C{SparkSession.conf}'s get and set over a dict (Spark's defaults when unset)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class FakeSession:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = FakeConf(values)


class TuneTests(unittest.SynchronousTestCase):
    KEY = "spark.sql.codegen.hugeMethodLimit"

    def test_default_limit_lowered(self) -> None:
        """Spark's default limit (unset, or set to the default) becomes the JVM's 8000 bytes."""
        for values in ({}, {self.KEY: "65535"}):
            spark = FakeSession(values)
            job.tune(spark)
            self.assertEqual(spark.conf.values[self.KEY], "8000")

    def test_user_limit_kept(self) -> None:
        spark = FakeSession({self.KEY: "20000"})
        job.tune(spark)
        self.assertEqual(spark.conf.values, {self.KEY: "20000"})

    def test_huge_methods_compiled(self) -> None:
        """Where the task JVMs compile huge methods, whole-stage code generation keeps Spark's limit."""
        flag = job.COMPILE_HUGE_METHODS
        for values in ({"spark.master": "local[2]", "spark.driver.extraJavaOptions": f"-Xss4m {flag}"},
                       {"spark.master": "spark://h:7077", "spark.executor.extraJavaOptions": flag}):
            spark = FakeSession(values)
            job.tune(spark)
            self.assertNotIn(self.KEY, spark.conf.values)

    def test_huge_methods_compiled_elsewhere_only(self) -> None:
        """The flag must be on the JVMs that run the tasks: the driver's for local masters, else the executors'."""
        flag = job.COMPILE_HUGE_METHODS
        for values in ({"spark.master": "local[2]", "spark.executor.extraJavaOptions": flag},
                       {"spark.master": "yarn", "spark.driver.extraJavaOptions": flag},
                       {"spark.master": "local[2]", "spark.driver.extraJavaOptions": "-XX:+DontCompileHugeMethods"}):
            spark = FakeSession(values)
            job.tune(spark)
            self.assertEqual(spark.conf.values[self.KEY], "8000")


class OutputTests(unittest.SynchronousTestCase):
    """Where the job's output is written from, and the driver's writer (pyarrow: the spark extra)."""

    def setUp(self) -> None:
        if importlib.util.find_spec("pyarrow") is None:  # pragma: no cover - the spark extra is not installed
            raise unittest.SkipTest("pyarrow is not installed (pip install kafkatw[spark])")

    def test_local_directory(self) -> None:
        """The driver writes file: URIs, and paths without a scheme under a local master only."""
        self.assertEqual(job.local_directory("out/batch-00000001", "local[2]"), "out/batch-00000001")
        self.assertEqual(job.local_directory("/tmp/out", "local"), "/tmp/out")
        self.assertEqual(job.local_directory("file:///tmp/o%20ut", "yarn"), "/tmp/o ut")
        self.assertIsNone(job.local_directory("/tmp/out", "spark://h:7077"))  # fs.defaultFS may be HDFS
        self.assertIsNone(job.local_directory("hdfs://nn:8020/out", "local[2]"))
        self.assertIsNone(job.local_directory("s3a://bucket/out", "local[*]"))

    def table(self, count: int):
        """Two rows of the output's columns, the first counted C{count} times."""
        import pyarrow as pa

        return pa.table({"source": ["/var/log/a", "/var/log/b"],
                         "minute": pa.array([1_795_305_600_000_000, 1_795_305_660_000_000], pa.timestamp("us", "UTC")),
                         "level": [None, "error"], "status": pa.array([200, None], pa.int32()),
                         "count": pa.array([count, 1], pa.int64())})

    def test_write_counts(self) -> None:
        """One parquet file and _SUCCESS, with the output's schema; a replayed batch replaces the directory."""
        import pyarrow.parquet as pq

        output = self.mktemp()
        directory = os.path.join(output, "batch-00000003")
        job.write_counts(self.table(5), directory)
        with open(os.path.join(directory, "stale.parquet"), "wb") as f:
            f.write(b"from an earlier attempt")
        job.write_counts(self.table(7), directory)
        self.assertEqual(sorted(os.listdir(output)), ["batch-00000003"])  # no staging directory left
        self.assertEqual(sorted(os.listdir(directory)), ["_SUCCESS", "part-00000.snappy.parquet"])
        written = pq.read_table(directory)
        self.assertEqual([str(t) for t in written.schema.types], ["string", "timestamp[us, tz=UTC]", "string", "int32",
                                                                  "int64"])
        self.assertEqual(written.to_pylist(), self.table(7).to_pylist())

    def test_write_counts_failure(self) -> None:
        """A failed write leaves the earlier directory as it was, and no staging directory."""
        import pyarrow as pa

        output = self.mktemp()
        directory = os.path.join(output, "batch-00000003")
        job.write_counts(self.table(5), directory)
        before = sorted(os.listdir(directory))
        bad = pa.table({"source": ["x"]})  # not the output's columns
        self.assertRaises(ValueError, job.write_counts, bad, directory)
        self.assertEqual(sorted(os.listdir(output)), ["batch-00000003"])
        self.assertEqual(sorted(os.listdir(directory)), before)


class SummaryTests(unittest.SynchronousTestCase):
    """The job's printed summary (job.Summary)."""

    def test_unparsed_per_source_and_blank_lines(self) -> None:
        """
        Per source, the lines of no known format; blank lines (an empty
        message) counted on a line of their own, never as a top message;
        the running totals are the sums of the batches.
        """
        import io

        out = io.StringIO()
        summary = job.Summary(out)
        summary.add(1, [{"source": "/var/log/apt/term.log", "lines": 12, "errors": 0, "unparsed": 10},
                        {"source": "/var/log/alternatives.log", "lines": 6, "errors": 1, "unparsed": 0}],
                    [{"message": "update-alternatives: link group pager updated", "count": 3}], 1)
        summary.add(2, [{"source": "/var/log/apt/term.log", "lines": 3, "errors": 0, "unparsed": 2}], [], 0)
        self.assertEqual(out.getvalue().splitlines(), [
            "--- batch 1: 18 lines, 1 errors (running total 18 lines, 1 errors)",
            f"{'source':<48} {'lines':>10} {'errors':>8} {'unparsed':>9}",
            f"{'/var/log/alternatives.log':<48} {6:>10} {1:>8} {0:>9}",
            f"{'/var/log/apt/term.log':<48} {12:>10} {0:>8} {10:>9}",
            "top messages this batch:",
            f"  {3:>8}  update-alternatives: link group pager updated",
            f"  {1:>8}  lines with no message (blank) this batch, not among the messages",
            "--- batch 2: 3 lines, 0 errors (running total 21 lines, 1 errors)",
            f"{'source':<48} {'lines':>10} {'errors':>8} {'unparsed':>9}",
            f"{'/var/log/alternatives.log':<48} {6:>10} {1:>8} {0:>9}",
            f"{'/var/log/apt/term.log':<48} {15:>10} {0:>8} {12:>9}",
        ])
