"""
Parsing of log lines for the log pipeline (examples/log_pipeline/job.py):
pure functions, no Spark, unit-tested in tests/unit/test_log_parsing.py.

Formats recognised, tried in this order (first match wins):

  - C{access}: nginx/Apache combined or common access logs,
    C{1.2.3.4 - - [22/Nov/2026:04:00:41 +0000] "GET / HTTP/1.1" 200 612 ...};
    gives the HTTP C{status}, no level.
  - C{twistd}: Twisted's log format, C{2026-11-22T04:00:41+0000 [ns#level] msg}.
  - C{dpkg}: dpkg.log, C{2026-11-22 04:00:41 status installed foo:amd64 1.0}, and
    apt's history/term logs (C{Start-Date: 2026-11-22  04:00:41}); level info.
  - C{program}: a program's name, then a time without zone and a colon, as
    Debian's C{update-alternatives} writes alternatives.log
    (C{update-alternatives 2026-11-22 04:00:41: run with --install ...});
    message C{"program: text"}, level guessed from the text as for syslog.
  - C{app}: ISO 8601 application logs with a level word among the first tokens
    after the time, e.g. Python's logging C{2026-11-22 04:00:41,123 ERROR msg}.
  - C{syslog}: RFC 3164 C{Nov 22 04:00:41 host prog[pid]: msg} and the RFC 3339
    form rsyslog writes on Debian 12 (C{2026-11-22T04:00:41.123+00:00 host prog: msg}).
    Syslog files carry no severity: the level is guessed from the message
    (error/fail/fatal/panic/denied... -> error; warn -> warning; else info).
  - C{term}: in apt's term.log (L{TERM_SOURCE}: the source is C{.../apt/term.log}
    or a rotated C{term.log.1}), a line of none of the formats above: dpkg's
    output (C{Setting up foo (1.0) ...}); level guessed from the text as for
    syslog, no timestamp (the record's, see docs/spark.md: each record is
    parsed alone, so the time of the file's C{Log started:} header above it
    is not carried down).
  - anything else: C{unparsed} (level C{"unparsed"}, no timestamp: the job
    uses the record's timestamp).

Before any of these, a line is cut to what a terminal shows of it: its
trailing C{\\r} and C{\\n} removed, then only the text after its last C{\\r}
(apt and dpkg draw progress bars as C{\\r}-separated updates within one
line: C{(Reading database ... 5%\\r(Reading database ... 10%\\r...}).

Timestamps without a zone are taken as UTC; RFC 3164 timestamps have no year:
the record's year is used (the previous one if that puts the line more than
two days after the record, i.e. across New Year).
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator, NamedTuple

__all__ = ["ParsedLine", "parse_line", "TERM_SOURCE", "minute_ms", "is_error", "source_of", "template",
           "parse_arrow_batches"]

UTC = timezone.utc
_MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)}


class ParsedLine(NamedTuple):
    """
    @ivar format: access, twistd, dpkg, program, app, syslog, term or unparsed.
    @ivar timestamp_ms: the line's own time (ms since the epoch) or None.
    @ivar level: debug, info, warning, error, critical; "unparsed"; None for access logs.
    @ivar status: the HTTP status of an access-log line, else None.
    @ivar message: the line's message part (for access logs: "METHOD path").
    """

    format: str
    timestamp_ms: int | None
    level: str | None
    status: int | None
    message: str


_LEVELS = {
    "trace": "debug", "debug": "debug", "dbg": "debug",
    "info": "info", "information": "info", "notice": "info",
    "warn": "warning", "warning": "warning",
    "err": "error", "error": "error", "severe": "error",
    "crit": "critical", "critical": "critical", "fatal": "critical", "alert": "critical",
    "emerg": "critical", "emergency": "critical", "panic": "critical",
}

_ISO = r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?"
_ACCESS = re.compile(
    r'^\S+ \S+ \S+ \[(\d{2})/(\w{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-]\d{4})\] "([^"]*)" (\d{3}) ')
_TWISTD = re.compile(r"^" + _ISO + r" \[([^\]#]*)#(\w+)\] ?(.*)$")
_DPKG = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) (?:status|install|upgrade|remove|purge"
                   r"|configure|trigproc|startup|conffile) (.*)$")
_APT = re.compile(r"^(?:Start-Date|End-Date|Log started|Log ended): (\d{4})-(\d{2})-(\d{2})\s+(\d{2}):(\d{2}):(\d{2})")
_PROGRAM = re.compile(r"^([A-Za-z][A-Za-z0-9_.+-]*) (\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}): (.*)$")
#: the sources whose lines of no known format are dpkg's terminal output (C{term})
TERM_SOURCE = re.compile(r"(?:^|/)apt/term\.log(?:\.[0-9]+)?\Z")
_ISO_LINE = re.compile(r"^\[?" + _ISO + r"\]?\s+(.*)$")
_SYSLOG_TAIL = re.compile(r"^(\S+) ([^\s:\[]+)(?:\[\d+\])?: ?(.*)$")
_RFC3164 = re.compile(r"^(\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\S+) ([^\s:\[]+)(?:\[\d+\])?: ?(.*)$")
_TOKENS = re.compile(r"\S+")
_LEVEL_TOKEN = re.compile(r"^[\[(<]?([A-Za-z]+)[\])>:]?$")
_ERROR_WORDS = re.compile(r"\b(error|errors|fail|failed|failure|fatal|panic|critical|denied|segfault|exception)\b",
                          re.IGNORECASE)
_WARN_WORDS = re.compile(r"\bwarn(ing)?\b", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


def _ms(dt: datetime) -> int:
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def _zone(text: str | None) -> timezone:
    if not text or text == "Z":
        return UTC
    text = text.replace(":", "")
    sign = -1 if text[0] == "-" else 1
    return timezone(sign * timedelta(hours=int(text[1:3]), minutes=int(text[3:5])))


def _iso_ms(groups: tuple) -> int | None:
    year, month, day, hour, minute, second, fraction, zone = groups[:8]
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        dt = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, _zone(zone))
    except ValueError:
        return None
    return _ms(dt)


def guess_level(message: str) -> str:
    """A level for a line that names none (syslog): from words in C{message}."""
    if _ERROR_WORDS.search(message):
        return "error"
    if _WARN_WORDS.search(message):
        return "warning"
    return "info"


def parse_line(line: str, record_ms: int | None = None, source: str | None = None) -> ParsedLine:
    """
    Parse one log line.

    @param line: the line, without its newline.
    @param record_ms: the record's timestamp (ms since the epoch), used for the
        year of RFC 3164 syslog timestamps (default: now).
    @param source: the file the line is from (L{source_of}); only apt's
        term.log (L{TERM_SOURCE}) changes anything.
    @return: a L{ParsedLine}; never raises.
    """
    parsed = _parse_line(line, record_ms)
    if parsed.format == "unparsed" and source is not None and TERM_SOURCE.search(source):
        return ParsedLine("term", None, guess_level(parsed.message), None, parsed.message)
    return parsed


def _parse_line(line: str, record_ms: int | None) -> ParsedLine:
    line = line.rstrip("\r\n")
    if "\r" in line:
        line = line[line.rfind("\r") + 1:]  # what a terminal shows of a progress bar: its last update
    m = _ACCESS.match(line)
    if m:
        day, mon, year, hour, minute, second, zone, request, status = m.groups()
        ts = None
        if mon in _MONTHS:
            try:
                ts = _ms(datetime(int(year), _MONTHS[mon], int(day), int(hour), int(minute), int(second),
                                  tzinfo=_zone(zone)))
            except ValueError:
                ts = None
        parts = request.split()
        message = " ".join(parts[:2]).split("?", 1)[0] if parts else request
        return ParsedLine("access", ts, None, int(status), message)
    m = _TWISTD.match(line)
    if m:
        level = _LEVELS.get(m.group(10).lower(), m.group(10).lower())
        return ParsedLine("twistd", _iso_ms(m.groups()), level, None, m.group(11))
    m = _DPKG.match(line)
    if m:
        return ParsedLine("dpkg", _iso_ms(m.groups()[:6] + (None, None)), "info", None, line[20:])
    m = _APT.match(line)
    if m:
        return ParsedLine("dpkg", _iso_ms(m.groups()[:6] + (None, None)), "info", None, line.split(":", 1)[0])
    m = _PROGRAM.match(line)
    if m:
        text = m.group(8)
        return ParsedLine("program", _iso_ms(m.groups()[1:7] + (None, None)), guess_level(text), None,
                          f"{m.group(1)}: {text}")
    m = _ISO_LINE.match(line)
    if m:
        ts = _iso_ms(m.groups())
        rest = m.group(9)
        for i, token in enumerate(_TOKENS.finditer(rest)):
            if i >= 4:
                break
            t = _LEVEL_TOKEN.match(token.group())
            if t and t.group(1).lower() in _LEVELS and (t.group(1).isupper() or token.group() != t.group(1)):
                message = rest[token.end():].lstrip(" -:")
                return ParsedLine("app", ts, _LEVELS[t.group(1).lower()], None, message)
        s = _SYSLOG_TAIL.match(rest)
        if s:
            message = f"{s.group(2)}: {s.group(3)}"
            return ParsedLine("syslog", ts, guess_level(s.group(3)), None, message)
        return ParsedLine("app", ts, guess_level(rest), None, rest)
    m = _RFC3164.match(line)
    if m and m.group(1) in _MONTHS:
        mon, day, hour, minute, second, _host, program, message = m.groups()
        reference = datetime.now(UTC) if record_ms is None else datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            milliseconds=record_ms)
        try:
            dt = datetime(reference.year, _MONTHS[mon], int(day), int(hour), int(minute), int(second), tzinfo=UTC)
            if dt - reference > timedelta(days=2):
                dt = dt.replace(year=dt.year - 1)
            ts = _ms(dt)
        except ValueError:
            ts = None
        return ParsedLine("syslog", ts, guess_level(message), None, f"{program}: {message}")
    return ParsedLine("unparsed", None, "unparsed", None, line)


def minute_ms(parsed: ParsedLine, record_ms: int) -> int:
    """The start of the minute of the line's time, else of the record's (ms)."""
    ts = parsed.timestamp_ms if parsed.timestamp_ms is not None else record_ms
    return ts - ts % 60_000


def is_error(level: str | None, status: int | None) -> bool:
    """An error line: level error or critical, or an HTTP status of 500 or more."""
    return level in ("error", "critical") or (status is not None and status >= 500)


def template(message: str, limit: int = 100) -> str:
    """
    C{message} with numbers replaced by C{#} (so that similar lines group) and
    control characters by spaces, at most C{limit} characters.
    """
    return _CONTROL.sub(" ", _NUMBERS.sub("#", message)).strip()[:limit]


def source_of(path_header: str | bytes | None, key: str | bytes | None) -> str:
    """
    The shipped file's path: the C{path} header, else the key after C{"host:"}
    (the shipper keys records C{"host:path"}), else C{"unknown"}.
    """
    if isinstance(path_header, bytes):
        path_header = path_header.decode("utf-8", "replace")
    if path_header:
        return path_header
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    if key:
        return key.split(":", 1)[1] if ":" in key else key
    return "unknown"


def parse_arrow_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """
    The job's C{mapInArrow} function (runs on executors): Arrow record
    batches of the kafkatw source (columns value, key, timestamp, headers) to
    batches of parsed rows: source, minute (timestamp), level, status, error
    (bool), message (a L{template}).  Here, not in job.py, so that Spark
    pickles it by reference to this module, which the job ships to executors
    with C{addPyFile}.
    """
    import pyarrow as pa

    p = sys.modules[__name__]

    for batch in batches:
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist()
        stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()  # microseconds
        headers = batch.column("headers").to_pylist()
        unit = batch.schema.field("timestamp").type.unit
        divisor = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
        out: dict[str, list] = {name: [] for name in ("source", "minute", "level", "status", "error", "message")}
        for value, key, stamp, hdrs in zip(values, keys, stamps, headers):
            record_ms = int(stamp // divisor) if stamp is not None else 0
            path = None
            for h in hdrs or ():
                if h["key"] == "path":
                    path = h["value"]
                    break
            line = (value or b"").decode("utf-8", "replace")
            source = p.source_of(path, key)
            parsed = p.parse_line(line, record_ms, source)
            out["source"].append(source)
            out["minute"].append(p.minute_ms(parsed, record_ms))
            out["level"].append(parsed.level)
            out["status"].append(parsed.status)
            out["error"].append(p.is_error(parsed.level, parsed.status))
            out["message"].append(p.template(parsed.message))
        yield pa.RecordBatch.from_arrays([
            pa.array(out["source"], pa.string()),
            pa.array(out["minute"], pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
            pa.array(out["level"], pa.string()),
            pa.array(out["status"], pa.int32()),
            pa.array(out["error"], pa.bool_()),
            pa.array(out["message"], pa.string()),
        ], names=["source", "minute", "level", "status", "error", "message"])
