"""
The log pipeline's Spark SQL parsing (examples/log_pipeline/parsing_sql.py)
against its pure-Python reference (examples/log_pipeline/parsing.py) on the
same lines, through a C{local[1]} SparkSession (no broker).

The lines are the parsing unit tests' (tests/unit/test_log_parsing.py) and a
seeded random corpus: lines of every format, with fields out of range,
digits and spaces other than ASCII's, control characters, level words in
brackets and cases, and random edits of such lines.

Skipped when pyspark (the C{spark} extra) is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys

from twisted.trial import unittest

from kafkatw.testing import ClassFixture

try:
    import pyspark  # noqa: F401
    import pyarrow  # noqa: F401
except ImportError:  # pragma: no cover - the spark extra is not installed
    pyspark = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "log_pipeline")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"log_pipeline_{name}", os.path.join(EXAMPLE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


parsing = _load("parsing")
parsing_sql = _load("parsing_sql")

#: 2026-11-22T04:01:00Z
RECORD_MS = 1_795_320_060_000

UNIT_TEST_LINES = [
    "Nov 22 04:00:41 web1 sshd[1234]: Accepted publickey for root",
    "Nov  2 04:00:41 web1 kernel: EXT4-fs error (device sda1): bad block",
    "Nov 22 04:00:41 web1 CRON[9]: warning: low disk",
    "Dec 31 23:59:59 h prog: x",
    "2026-11-22T04:00:41.123456+00:00 web1 systemd[1]: Started Session 5 of user root.",
    "2026-11-22T05:00:41+01:00 web1 app: connection failed",
    "2026-11-22T04:00:41+0000 [kafkatw.broker.server#info] listening on 9092",
    "2026-11-22T04:00:41-0100 [-#error] boom",
    "2026-11-22T04:00:41+0000 [x#warn] careful",
    "2026-11-22 04:00:41,123 ERROR Something broke",
    "2026-11-22 04:00:41,123 - myapp - WARNING - disk at 91%",
    "2026-11-22T04:00:41Z [INFO] ready",
    "2026-11-22 04:00:41 user info updated",
    "2026-11-22 04:00:41 status installed libc-bin:amd64 2.36-9",
    "2026-11-22 04:00:41 upgrade curl:amd64 7.88.1-10 7.88.1-10+deb12u5",
    "Start-Date: 2026-11-22  04:00:41",
    '127.0.0.1 - - [22/Nov/2026:04:00:41 +0000] "GET /index.html?x=1 HTTP/1.1" 200 612 "-" "curl/7.88"',
    '10.0.0.1 - bob [22/Nov/2026:05:00:41 +0100] "POST /api HTTP/2.0" 503 0',
    "", "just some text", "\x00\x01binary", "Nov 99 04:00:41 h p: x", "Foo 22 04:00:41 h p: x",
    "  Commandline: apt-get install foo",
    "2026-13-45 99:99:99 ERROR x", "2026-02-30T04:00:41Z [-#info] x",
    '1.1.1.1 - - [31/Feb/2026:04:00:41 +0000] "GET / HTTP/1.1" 200 1',
    "took 123 ms at 0xdeadBEEF", "(Reading 5%\r(Reading 10%\r",
    # Debian's alternatives.log and apt/term.log (tests/data/alternatives.log, tests/data/term.log)
    "update-alternatives 2026-11-22 04:00:41: run with --install /usr/bin/pager pager /usr/bin/less 77",
    "update-alternatives 2026-11-22 04:00:41: error: no alternatives for x",
    "update-alternatives 2026-11-22 04:00:41: ", "update-alternatives 2026-13-22 04:00:41: bad date",
    "Log started: 2026-11-22  04:00:41", "Log ended: 2026-11-22  04:00:43",
    "(Reading database ... \r(Reading database ... 5%\r(Reading database ... 6089 files and directories currently"
    " installed.)\r",
    "Unpacking libsystemd0:amd64 (252.38-1~deb12u1) over (252.36-1~deb12u1) ...\r",
    "a\r\rb", "\r", "\r\r\n", "x\r ", "Progress: [ 40%]\r2026-11-22 04:00:41 ERROR y",
]

_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_ODD = ["\u0663", "\uff11", "\U0001d7ce", "\u00a0", "\u2003", "\x1c", "\t", "\r", "\n", "\x00", "\x01", "\x7f",
        "\u0130", "\u0131", "\u017f", "\u212a", "\u00e9", "\ufffd", "#", "[", "]", ":", "?", "\"", "-", " ", "  "]
_ACCESS_MONTHS = _MONTHS + ["nov", "Foo", "N\u00e9v"]
_TARGETS = ["", " /a?b=1", " /x y z", "\u2003/p\u2003HTTP/1.1", " /q?x"]
_STATUSES = ["200", "404", "500", "503", "\u0665\u0660\u0660"]
_TWISTD_LEVELS = ["info", "ERROR", "warn", "odd", "Debug", "\u00e9"]
_SPACES = [" ", "  ", "\u2003", "\t", "\u00a0"]
_HOSTS = ["web1", "h\u00e9"]
_PROGRAMS = ["sshd[1]", "kernel", "a\x01b", "CRON[12]", "x[y"]
_DAYS = ["1", " 1", "29", "31", "99", "\u0663"]
_WORDS = ["error", "ERROR", "Errors", "failed", "fail", "FATAL", "panic", "denied", "segfault", "exception",
          "warn", "WARNING", "warnings", "info", "INFO", "[INFO]", "(warn)", "<crit>", "debug:", "Notice",
          "err", "emerg", "trace", "ok", "xerror", "error_x", "é-error", "error2", "\u017fegfault", "fa\u0131l"]


def _digits(rng: random.Random, n: int, low: int = 0, high: int | None = None) -> str:
    high = 10 ** n - 1 if high is None else high
    text = str(rng.randint(low, high)).zfill(n)
    if rng.random() < 0.05:  # a digit that is not ASCII's (Python's \d and int() take it)
        i = rng.randrange(len(text))
        text = text[:i] + {"0": "\u0660", "1": "\uff11", "2": "\U0001d7d0"}.get(text[i], text[i]) + text[i + 1:]
    return text


def _date(rng: random.Random, sep: str = "-") -> str:
    year = rng.choice(["2026", "2024", "0000", "0001", "9999", "1969", "1600"])
    month = rng.choice(["01", "02", "12", "13", "00", _digits(rng, 2, 1, 12)])
    day = rng.choice(["01", "29", "30", "31", "00", _digits(rng, 2, 1, 28)])
    return f"{year}{sep}{month}{sep}{day}"


def _time(rng: random.Random) -> str:
    return (f"{rng.choice(['00', '23', '24', _digits(rng, 2, 0, 23)])}:{rng.choice(['00', '59', '60', _digits(rng, 2, 0, 59)])}"
            f":{rng.choice(['00', '59', '60', _digits(rng, 2, 0, 59)])}")


def _zone(rng: random.Random) -> str:
    return rng.choice(["", "Z", "+00:00", "+0000", "-0100", "+05:30", "+2359", "-2400", "+9999", "+0199"])


def _text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 8)):
        r = rng.random()
        if r < 0.3:
            parts.append(rng.choice(_WORDS))
        elif r < 0.5:
            parts.append(str(rng.randint(0, 10 ** 6)))
        elif r < 0.6:
            parts.append(f"0x{rng.randint(0, 1 << 32):x}")
        elif r < 0.7:
            parts.append(rng.choice(_ODD))
        else:
            parts.append(rng.choice(["the", "disk", "user", "ssh", "Started", "session", "GET", "a:b"]))
    return rng.choice([" ", "  ", " - ", ": "]).join(parts)


def corpus(count: int, seed: int = 14) -> list[str]:
    """C{count} lines of every format, with edits; the same every time."""
    rng = random.Random(seed)
    lines = list(UNIT_TEST_LINES)
    makers = [
        lambda: (f'{rng.choice(["1.2.3.4", "::1", "h"])} - {rng.choice(["-", "bob"])} [{_digits(rng, 2, 1, 31)}/'
                 f'{rng.choice(_ACCESS_MONTHS)}/{rng.choice(["2026", "2024", "0000"])}:{_time(rng)}'
                 f' {rng.choice(["+0000", "-0130", "+9999", "+2400"])}] "{rng.choice(["GET", "", " ", "POST"])}'
                 f'{rng.choice(_TARGETS)}"'
                 f' {rng.choice(_STATUSES)} {rng.randint(0, 9999)} "-"'),
        lambda: (f"{_date(rng)}{rng.choice(['T', ' '])}{_time(rng)}{rng.choice(['', '.1', ',123', '.123456789'])}"
                 f"{_zone(rng)} [{rng.choice(['-', 'ns.x', ''])}#{rng.choice(_TWISTD_LEVELS)}]"
                 f"{rng.choice(['', ' '])}{_text(rng)}"),
        lambda: (f"{_date(rng)} {_time(rng)} {rng.choice(['status', 'install', 'configure', 'conffile', 'other'])}"
                 f" {_text(rng)}"),
        lambda: (f"{rng.choice(['Start-Date', 'End-Date', 'Log started', 'Commandline'])}: {_date(rng)}"
                 f"{rng.choice(_SPACES)}{_time(rng)}"),
        lambda: (f"{rng.choice(['', '['])}{_date(rng)}{rng.choice(['T', ' '])}{_time(rng)}"
                 f"{rng.choice(['', '.5', ',250'])}{_zone(rng)}{rng.choice(['', ']'])}{rng.choice(_SPACES)}"
                 f"{_text(rng)}"),
        lambda: (f"{rng.choice(['', '['])}{_date(rng)} {_time(rng)} {rng.choice(_HOSTS)}"
                 f" {rng.choice(_PROGRAMS)}:{rng.choice(['', ' '])}{_text(rng)}"),
        lambda: (f"{rng.choice(_MONTHS + ['Foo', 'nov'])} {rng.choice(_DAYS)}"
                 f" {_time(rng)} {rng.choice(['web1', 'h'])} {rng.choice(['sshd[1234]', 'kernel', 'p'])}:"
                 f"{rng.choice(['', ' '])}{_text(rng)}"),
        lambda: (f"{rng.choice(['update-alternatives', 'x', 'a.b-c+d_1', '1x', 'é'])} {_date(rng)} {_time(rng)}:"
                 f"{rng.choice(['', ' '])}{_text(rng)}"),
        lambda: "\r".join(_text(rng) for _ in range(rng.randint(1, 4))),
        lambda: _text(rng),
    ]
    while len(lines) < count:
        line = rng.choice(makers)()
        if rng.random() < 0.15:  # a random edit
            i = rng.randrange(len(line) + 1)
            line = line[:i] + rng.choice(_ODD) + line[i + rng.choice([0, 0, 1]):]
        if rng.random() < 0.05:
            line += rng.choice(["\r", "\r\n", "\n", "\r\r"])
        lines.append(line)
    return lines


def record_times(rng: random.Random) -> int:
    return rng.choice([RECORD_MS, 1_767_225_605_000, 1_767_225_605_000 + 3 * 86_400_000, 0, 951_782_400_000,
                       -86_400_000 * 400])


def reference(rows: list[tuple]) -> list[tuple]:
    """The rows parsing.parse_arrow_batches gives (minute in ms), computed per line in Python."""
    out = []
    for key, value, record_ms, headers in rows:
        path = None
        for h_key, h_value in headers or ():
            if h_key == "path":
                path = h_value
                break
        line = (value or b"").decode("utf-8", "replace")
        source = parsing.source_of(path, key)
        parsed = parsing.parse_line(line, record_ms, source)
        out.append((source, parsing.minute_ms(parsed, record_ms), parsed.level, parsed.status,
                    parsing.is_error(parsed.level, parsed.status), parsing.template(parsed.message)))
    return out


class SparkParsingTests(ClassFixture, unittest.SynchronousTestCase):
    spark = None

    @classmethod
    def setUpClass(cls) -> None:
        if pyspark is None:
            raise unittest.SkipTest("pyspark is not installed (pip install kafkatw[spark])")
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        from pyspark.sql import SparkSession

        cls.spark = (SparkSession.builder.master("local[1]").appName("kafkatw-parsing-tests")
                     .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                     .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
                     .config("spark.sql.session.timeZone", "America/Los_Angeles")  # not UTC: must not matter
                     .getOrCreate())
        cls.spark.sparkContext.setLogLevel("ERROR")

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.spark is not None:
            cls.spark.stop()

    def parse_in_spark(self, rows: list[tuple]) -> list[tuple]:
        from pyspark.sql import functions as F

        df = self.spark.createDataFrame(
            [(i, *row) for i, row in enumerate(rows)],
            "i long, key binary, value binary, record_ms long, headers array<struct<key: string, value: binary>>")
        df = df.select("i", "key", "value", F.timestamp_millis("record_ms").alias("timestamp"), "headers")
        parsed = parsing_sql.parse(df.select("key", "value", "timestamp", "headers", "i"))
        self.assertEqual(parsed.columns, parsing_sql.PARSED_COLUMNS)
        # the row order is kept by these projections
        out = parsed.select("source", F.unix_millis("minute"), "level", "status", "error", "message").collect()
        return [tuple(r) for r in out]

    def check(self, rows: list[tuple]) -> None:
        got = self.parse_in_spark(rows)
        want = reference(rows)
        differences = [(rows[i][1], want[i], got[i]) for i in range(len(rows)) if want[i] != got[i]]
        self.assertEqual(differences[:10], [], f"{len(differences)} of {len(rows)} lines differ")

    def test_unit_test_lines(self) -> None:
        rows = [(b"h:/var/log/x", line.encode(), RECORD_MS, [("host", b"h"), ("path", b"/var/log/x")])
                for line in UNIT_TEST_LINES]
        self.check(rows)

    def test_year_rollover(self) -> None:
        jan_1 = 1_767_225_605_000  # 2026-01-01T00:00:05Z
        rows = [(b"h:/l", line.encode(), ms, None) for line, ms in [
            ("Dec 31 23:59:59 h prog: x", jan_1), ("Jan  1 00:00:01 h prog: x", jan_1),
            ("Jan  3 00:00:06 h prog: x", jan_1), ("Jan  3 00:00:04 h prog: x", jan_1),
            ("Feb 29 00:00:00 h prog: x", jan_1), ("Feb 29 00:00:00 h prog: x", 1_709_251_200_000)]]
        self.check(rows)

    def test_sources(self) -> None:
        line = b"x"
        rows = [(b"h:/a", line, RECORD_MS, [("path", b"/b")]), (b"h:/a", line, RECORD_MS, [("path", b"")]),
                (b"h:/a", line, RECORD_MS, [("path", None), ("path", b"/c")]), (None, line, RECORD_MS, None),
                (b"", line, RECORD_MS, []), (b"no-colon", line, RECORD_MS, []), (b"h:", line, RECORD_MS, []),
                (b"h:/x:y", line, RECORD_MS, [("host", b"h")]), (b"\xff:/\xfe", line, RECORD_MS, []),
                (b"h:/a", None, RECORD_MS, None)]
        self.check(rows)

    def test_message_ends_and_length(self) -> None:
        """
        The template's whitespace trim at either end (multi-byte whitespace
        and text included) and its cut at 100 characters, around 100
        characters and 100 bytes.
        """
        lines = ["\u00e9" * 60, "\u00e9" * 100, "\u00e9" * 101, "a" * 99, "a" * 100, "a" * 101, "a" * 100 + "\u00e9",
                 "\u2003x\u2003", "x\u00a0", "\u00a0", "\u00e9 x \u00e9", "\u2003", "", " ", "\x1c\x1c",
                 "x\u3000", "\u3000x", "\U0001f600" * 30, "\U0001f600x\u2003",
                 '10.0.0.1 - - [22/Nov/2026:00:00:00 +0000] "GET /' + "\u00e9" * 120 + ' HTTP/1.1" 200 5 "-" "a"',
                 '10.0.0.1 - - [22/Nov/2026:00:00:00 +0000] "\u2003GET\u2003/x\u2003" 200 5 "-" "a"']
        self.check([(b"h:/l", line.encode(), RECORD_MS, [("path", b"/l")]) for line in lines])

    def test_access_request_tokens(self) -> None:
        """
        An access line's message: the request's first two tokens (as
        C{str.split()} gives them) up to a C{?}, which the access pattern
        captures itself, with control characters and U+0001 in and around
        them, whitespace other than spaces, one token, none.
        """
        requests = ["GET /x HTTP/1.1", "\x01GET /x HTTP/1.1", "GET\x01 /x", "GET /x\x01y HTTP/1.1",
                    "GET /x HTTP/1.1\x01", "\x1cGET\x1c/x\x1c", "\x00", "\x7f", "\x1c", "", "  ", "\u2003",
                    "\t\u2003", "GET", "GET ", " GET", "\x01", "GET /a\x01b?c=1", "G?ET /x", "GET /x?y\x01 z",
                    "G\u00c9T /\u00e9\u2003H", "GET  /12/0x1f\x02\x03/34", "\u00a0GET\u00a0\u00a0/x\u3000"]
        lines = [f'10.0.0.1 - - [22/Nov/2026:00:00:00 +0000] "{r}" 200 5 "-" "a"' for r in requests]
        self.check([(b"h:/l", line.encode(), RECORD_MS, [("path", b"/l")]) for line in lines])

    def test_random_corpus(self) -> None:
        rng = random.Random(7)
        paths = [b"/var/log/x", b"/var/log/apt/term.log", b"apt/term.log.1", b"/var/log/apt/term.log.gz",
                 b"/var/log/xapt/term.log"]
        rows = []
        for line in corpus(4000):
            path = rng.choice(paths)
            rows.append((b"h:" + path, line.encode("utf-8", "surrogatepass"), record_times(rng), [("path", path)]))
        self.check(rows)


    def test_process_batch(self) -> None:
        """
        The job's C{foreachBatch} function: the parquet rows, and the summary's
        per-source totals and top messages, are the reference parser's counts.
        """
        import collections
        import io
        import tempfile

        from pyspark.sql import functions as F

        job = _load("job")
        rng = random.Random(11)
        rows = [(rng.choice([b"h:/var/log/a", b"h:/var/log/apt/term.log", None, b"no-colon"]),
                 line.encode("utf-8", "surrogatepass"), record_times(rng),
                 rng.choice([[("path", b"/var/log/c")], None, [("host", b"h")]]))
                for line in corpus(3000)]
        df = self.spark.createDataFrame(
            rows, "key binary, value binary, record_ms long, headers array<struct<key: string, value: binary>>")
        df = df.select("key", "value", F.timestamp_millis("record_ms").alias("timestamp"), "headers")
        output = tempfile.mkdtemp()
        self.addCleanup(__import__("shutil").rmtree, output, True)
        printed = io.StringIO()
        job.process_batch(job.parse_lines(df), 7, output, job.Summary(printed))
        job.process_batch(job.parse_lines(df.limit(0)), 8, output, job.Summary(printed))  # an empty batch: nothing
        self.assertEqual(sorted(os.listdir(output)), ["batch-00000007"])
        self.assertIn("_SUCCESS", os.listdir(os.path.join(output, "batch-00000007")))

        want = reference(rows)
        counts = collections.Counter((source, minute, level, status) for source, minute, level, status, _, _ in want)
        written = self.spark.read.parquet(os.path.join(output, "batch-00000007"))
        self.assertEqual([(f.name, f.dataType.simpleString()) for f in written.schema.fields],
                         [("source", "string"), ("minute", "timestamp"), ("level", "string"), ("status", "int"),
                          ("count", "bigint")])
        got = {tuple(r[:4]): r[4] for r in written.select("source", F.unix_millis("minute"), "level", "status",
                                                           "count").collect()}
        self.assertEqual(got, dict(counts))
        # the driver wrote it (a local directory); Spark's writer, for other file systems, writes the same rows
        spark_written = os.path.join(output, "spark")
        self.spark.createDataFrame(written.toArrow(), job.OUTPUT_SCHEMA).coalesce(1).write.parquet(spark_written)
        both = self.spark.read.parquet(os.path.join(output, "*"))
        self.assertEqual(both.select("source", F.unix_millis("minute"), "level", "status", "count").exceptAll(
            written.union(written).select("source", F.unix_millis("minute"), "level", "status", "count")).count(), 0)
        self.assertEqual(both.count(), 2 * written.count())

        lines, errors, unparsed = collections.Counter(), collections.Counter(), collections.Counter()
        for source, _, level, _, error, _ in want:
            lines[source] += 1
            errors[source] += error
            unparsed[source] += level == "unparsed"
        messages = collections.Counter(message for *_, message in want)
        empty = messages.pop("")
        self.assertGreater(empty, 0)
        top = sorted(messages.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        expected = io.StringIO()
        job.Summary(expected).add(7, [{"source": s, "lines": lines[s], "errors": errors[s], "unparsed": unparsed[s]}
                                      for s in lines],
                                  [{"message": m, "count": c} for m, c in top], empty)
        self.assertEqual(printed.getvalue(), expected.getvalue())
        self.assertNotIn("  \n", printed.getvalue())  # no empty top message
        self.assertIn(f"  {empty:>8}  lines with no message", printed.getvalue())


class ClassTests(unittest.SynchronousTestCase):
    """The Java classes parsing_sql uses for Python's \\d and \\w are the same sets in Python's tables."""

    def test_python_classes(self) -> None:
        import re
        import unicodedata

        word, digit = re.compile(r"\w"), re.compile(r"\d")
        for code in range(sys.maxunicode + 1):
            char = chr(code)
            category = unicodedata.category(char)
            self.assertEqual(bool(word.match(char)), category[0] in "LN" or char == "_", hex(code))
            self.assertEqual(bool(digit.match(char)), category == "Nd", hex(code))
