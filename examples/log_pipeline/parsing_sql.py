"""
The log pipeline's parsing (examples/log_pipeline/parsing.py) as Spark SQL
expressions: the job parses in the JVM, with no Python per line.

L{parse} turns the C{kafkatw} source's rows (columns key, value, timestamp,
headers) into the rows C{parsing.parse_arrow_batches} gives for them --
source, minute, level, status, error, message -- with the same values:
parsing.py stays the reference, and tests/integration/test_log_parsing_spark.py
checks the two against each other on the same lines.

How the Python rules carry over
===============================

  - The line is cut as parsing.py cuts it (its trailing C{\\r}/C{\\n}
    dropped, then the text after its last C{\\r}: a progress bar's last
    update).  Formats are tried in parsing.py's order (access, twistd, dpkg,
    apt, program, ISO 8601 line, RFC 3164; then C{term} for a line of none
    in apt's term.log); each regular expression is the Python one in Java's
    syntax.  Python's C{\\s}, C{\\d} and C{\\w} match Unicode whitespace,
    decimal digits and word characters; Java's match ASCII only, so they are
    written as Java's Unicode classes for the same sets (L{_py_class}:
    C{\\p{Nd}}, C{[\\p{L}\\p{N}_]}, and Python's whitespace spelt out; the
    classes most tested list their ASCII members first, as C{[0-9\\p{Nd}]},
    because Java tests a class's parts in turn), and digits other than 0-9 are translated to 0-9 before a number is read, as
    C{int()} reads them.  C{.} is C{[^\\n]} and C{$} is C{\\z} (the line has
    no trailing newline).  C{\\b} is spelt as look-arounds on Python's C{\\w}.
  - One match per format: C{regexp_replace} rewrites a matching line to its
    groups joined by U+0001 (the free-text group last, so that a U+0001 in it
    cannot shift the others) and C{split} takes them apart.
  - Dates are checked and converted to milliseconds with integer arithmetic
    (days from the civil date, U{https://howardhinnant.github.io/date_algorithms.html}),
    not with Spark's date functions: the same validity rules as Python's
    C{datetime} (years 1-9999, no second 60, offsets under 24 hours), no
    dependence on the session time zone, nothing that raises under ANSI mode.
  - Intermediate columns are computed in successive projections, so that
    each regular expression runs once per line (Spark does not collapse a
    projection into one that would repeat a costly expression).
  - Cheap per line where it can be: the format is a small integer (L{_FMT}),
    compared many times per line, not a string; C{rtrim} and C{btrim} with
    a trim string (which walk the whole text) run only where the text
    starts or ends with something they could remove.  Spark's strings are
    UTF-8 bytes, and whatever counts characters walks the text: C{length},
    C{ascii}, C{substring} from the end, or up to a far position.  So the
    ends of a text are tested by their bytes (L{_strip}), only the short
    numeric groups are tested for non-ASCII digits (not the line), the
    template is cut to 100 characters only where it has more than 100
    bytes, and the record's key is made valid UTF-8 only where there is no
    path header to take the source from.  The access pattern captures the
    request's first two tokens itself: a regular expression less per line
    (each C{regexp_replace} also decodes its text to a Java string, makes a
    C{Matcher} and encodes its result back).

Known differences from the Python reference, none of them met in the tests:
letters and digits assigned in a Unicode version that the JVM's tables
predate (Java 17 has Unicode 13, Python 3.11 Unicode 14) are not word
characters or digits here; case-insensitive matching of the error and
warning words follows Java's Unicode case rules, which may differ from
Python's for a few non-ASCII letters; a value that is not valid UTF-8 is
repaired by Spark's C{make_valid_utf8}, which may not insert as many U+FFFD
characters as Python's C{decode(errors="replace")}.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

__all__ = ["parse", "PARSED_COLUMNS"]

PARSED_COLUMNS = ["source", "minute", "level", "status", "error", "message"]

_SEP = "\u0001"
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_LEVELS = {
    "trace": "debug", "debug": "debug", "dbg": "debug",
    "info": "info", "information": "info", "notice": "info",
    "warn": "warning", "warning": "warning",
    "err": "error", "error": "error", "severe": "error",
    "crit": "critical", "critical": "critical", "fatal": "critical", "alert": "critical",
    "emerg": "critical", "emergency": "critical", "panic": "critical",
}
#: the line formats of L{_build} as small integers (compared per line, cheaper than strings)
_FMT = {name: i for i, name in enumerate(["unparsed", "access", "twistd", "dpkg", "apt", "iso", "rfc3164",
                                                           "program", "term"])}
_DPKG_ACTIONS = "status|install|upgrade|remove|purge|configure|trigproc|startup|conffile"
_ERROR_WORDS = "error|errors|fail|failed|failure|fatal|panic|critical|denied|segfault|exception"


def _ranges(predicate: Any) -> list[tuple[int, int]]:
    out = []
    start = None
    for code in range(sys.maxunicode + 1):
        if predicate(chr(code)):
            if start is None:
                start = code
        elif start is not None:
            out.append((start, code - 1))
            start = None
    if start is not None:
        out.append((start, sys.maxunicode))
    return out


@functools.lru_cache(maxsize=None)
def _py_class(name: str) -> str:
    """
    The body of a Java character class matching what Python's C{\\s},
    C{\\d} or C{\\w} (C{name}) matches in a str pattern: C{str.isspace}
    (spelt out), Unicode category Nd, categories L and N and C{_} (the
    same sets in Python's tables: tests/integration/test_log_parsing_spark.py
    checks).
    """
    if name == "s":
        return "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in _ranges(str.isspace))
    return {"d": "\\p{Nd}", "w": "\\p{L}\\p{N}_"}[name]


@functools.lru_cache(maxsize=None)
def _digits() -> tuple[str, str]:
    """Every non-ASCII decimal digit, and its value as an ASCII digit (for C{translate})."""
    import unicodedata

    chars = [chr(c) for a, b in _ranges(str.isdecimal) for c in range(a, b + 1) if c > 0x7F]
    return "".join(chars), "".join(str(unicodedata.decimal(c)) for c in chars)


@functools.lru_cache(maxsize=None)
def _patterns() -> dict[str, str]:
    s, d, w = _py_class("s"), _py_class("d"), _py_class("w")
    # The same sets with their common ASCII members first (a Java class tests its parts in
    # turn): printable ASCII is not whitespace, 0-9 are digits, A-Z a-z 0-9 _ word characters.
    WS, NWS, D, W = f"[{s}]", f"[!-~[^{s}]]", f"[0-9{d}]", f"[A-Za-z0-9{w}]"
    NWS_NQ = f"[!#-~[^\"{s}]]"  # (not whitespace, not '"')
    iso = (f"({D}{{4}})-({D}{{2}})-({D}{{2}})[T ]({D}{{2}}):({D}{{2}}):({D}{{2}})(?:[.,]({D}{{1,9}}))?"
           f"(Z|[+-]{D}{{2}}:?{D}{{2}})?")
    not_word_before = f"(?<![{w}])"
    not_word_after = f"(?![{w}])"
    return {
        # (groups 8 and 9: the request's first two tokens, as str.split() gives them; they are the
        # request's runs of non-whitespace, and the request holds no '"')
        "access": (f"^{NWS}+ {NWS}+ {NWS}+ \\[({D}{{2}})/({W}{{3}})/({D}{{4}}):({D}{{2}}):({D}{{2}}):({D}{{2}})"
                   f" ([+-]{D}{{4}})\\] \"{WS}*+(?:({NWS_NQ}++)(?:{WS}++({NWS_NQ}++))?)?[^\"]*\" ({D}{{3}}) "),
        "twistd": f"^{iso} \\[([^\\]#]*)#({W}+)\\] ?([^\\n]*)\\z",
        "dpkg": (f"^({D}{{4}})-({D}{{2}})-({D}{{2}}) ({D}{{2}}):({D}{{2}}):({D}{{2}}) (?:{_DPKG_ACTIONS})"
                 f" ([^\\n]*)\\z"),
        "apt": (f"^(?:Start-Date|End-Date|Log started|Log ended): ({D}{{4}})-({D}{{2}})-({D}{{2}}){WS}+"
                f"({D}{{2}}):({D}{{2}}):({D}{{2}})"),
        # (the program's name: ASCII only, in both)
        "program": (f"^([A-Za-z][A-Za-z0-9_.+\\-]*) ({D}{{4}})-({D}{{2}})-({D}{{2}}) ({D}{{2}}):({D}{{2}}):({D}{{2}}):"
                    f" ([^\\n]*)\\z"),
        "term_source": "(?:^|/)apt/term\\.log(?:\\.[0-9]+)?\\z",  # parsing.TERM_SOURCE
        "iso": f"^\\[?{iso}\\]?{WS}+([^\\n]*)\\z",
        "rfc3164": (f"^({W}{{3}}) {{1,2}}({D}{{1,2}}) ({D}{{2}}):({D}{{2}}):({D}{{2}}) ({NWS}+)"
                    f" ([^{s}:\\[]+)(?:\\[{D}+\\])?: ?([^\\n]*)\\z"),
        "syslog_tail": f"^({NWS}+) ([^{s}:\\[]+)(?:\\[{D}+\\])?: ?([^\\n]*)\\z",
        # the first four tokens (runs of non-space), joined by single spaces
        "tokens": (f"^{WS}*+({NWS}*+){WS}*+({NWS}*+){WS}*+({NWS}*+){WS}*+({NWS}*+)(?s:.*)"),
        "token_prefix": f"^{WS}*+(?:{NWS}++{WS}++){{%d}}{NWS}++",
        "level_token": "^([\\[(<]?)([A-Za-z]+)([\\])>:]?)\\z",
        "error": f"(?=(?iu:[efpcds])){not_word_before}(?iu:{_ERROR_WORDS}){not_word_after}",
        "warning": f"(?=(?iu:w)){not_word_before}(?iu:warn(?:ing)?){not_word_after}",
        "numbers": f"0x[0-9a-fA-F]+|{D}+",
        "control": "[\\x00-\\x1f\\x7f]+",
        "whitespace": "".join(chr(c) for a, b in _ranges(str.isspace) for c in range(a, b + 1)),
    }


def _fields_text(F: Any, text: Any, pattern: str, groups: list[int | str]) -> Any:
    """
    C{text} rewritten to the groups C{groups} of C{pattern}'s match joined
    by U+0001 (C{text} if none); a string in C{groups} is a replacement of
    its own (C{"$8 $9"}).
    """
    return F.regexp_replace(text, pattern + "(?s:.*)", _SEP.join(g if isinstance(g, str) else f"${g}" for g in groups))


def _fields(F: Any, text: Any, pattern: str, groups: list[int]) -> Any:
    """
    The groups C{groups} of C{pattern}'s match of C{text} as an array of
    strings (an empty string for a group that did not take part); only the
    last group may contain U+0001.
    """
    return F.split(_fields_text(F, text, pattern, groups), _SEP, len(groups))


def _ascii_digits(F: Any, text: Any) -> Any:
    """C{text} with every decimal digit written as 0-9 (as Python's int() reads them)."""
    non_ascii, ascii_ = _digits()
    return F.translate(text, non_ascii, ascii_)


def _valid(F: Any, y: Any, m: Any, d: Any, hh: Any, mm: Any, ss: Any, offset_minutes: Any) -> Any:
    """Where Python's C{datetime(y, m, d, hh, mm, ss, tzinfo=offset)} does not raise ValueError."""
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    days_in_month = (F.when(m == 2, F.when(leap, 29).otherwise(28))
                     .when(m.isin(4, 6, 9, 11), 30).otherwise(31))
    return (y.between(1, 9999) & m.between(1, 12) & (d >= 1) & (d <= days_in_month) & (hh <= 23) & (mm <= 59)
            & (ss <= 59) & (F.abs(offset_minutes) < 1440))


def _days(F: Any, y: Any, m: Any, d: Any) -> Any:
    """Days since 1970-01-01 of a valid date (a DATE has no time zone)."""
    return F.unix_date(F.make_date(y, m, d)).cast("long")


def _offset_minutes(F: Any, zone: Any) -> Any:
    """parsing._zone as minutes east of UTC: '' or 'Z' -> 0; '+hh:mm', '+hhmm'."""
    digits = F.replace(zone, F.lit(":"), F.lit(""))
    sign = F.when(F.substring(digits, 1, 1) == "-", -1).otherwise(1)
    minutes = F.substring(digits, 2, 2).try_cast("long") * 60 + F.substring(digits, 4, 2).try_cast("long")
    return F.when((zone == "") | (zone == "Z"), F.lit(0).cast("long")).otherwise(sign * minutes)


def _strip(F: Any, text: Any, chars: str) -> Any:
    """
    C{btrim(text, chars)} (C{chars}: no printable ASCII), called only where
    C{text} starts or ends with something else than printable ASCII (Spark's
    C{btrim} with a trim string walks the whole text).

    The first and last characters are tested by their bytes: in UTF-8 a
    character is printable ASCII exactly when its first (or last) byte is
    0x21-0x7E.  (C{ascii(text)} and C{substring(text, -1, 1)} would count
    the characters of the whole text first.)  An empty text has no such byte:
    C{btrim} then gives "".
    """
    utf8 = text.cast("binary")

    def other(byte: Any) -> Any:
        return ~byte.between(F.lit(bytearray(b"!")), F.lit(bytearray(b"~")))

    return (F.when(other(F.substring(utf8, 1, 1)) | other(F.substring(utf8, -1, 1)), F.btrim(text, F.lit(chars)))
            .otherwise(text))


def _map(F: Any, mapping: dict) -> Any:
    return F.create_map(*[F.lit(x) for kv in mapping.items() for x in kv])


def _after_first(F: Any, text: Any, separator: str) -> Any:
    """C{text} after the first C{separator} (all of C{text} where it has none)."""
    return F.substring(text, F.instr(text, separator) + 1, F.lit(2**31 - 1))


class _Projections:
    """Stands in for a DataFrame in L{_build}: records the projections."""

    def __init__(self) -> None:
        self.projections: list[tuple] = []

    def select(self, *columns: Any) -> "_Projections":
        self.projections.append(columns)
        return self


_built: dict[int, list[tuple]] = {}


def parse(df: Any) -> Any:
    """
    The parsed rows of the kafkatw source's rows C{df} (columns key, value,
    timestamp, headers as C{includeHeaders=true} gives them): columns
    L{PARSED_COLUMNS} with the types of the job's C{PARSED_SCHEMA}.

    The columns are built once per JVM (a second for each py4j call that
    builds them) and reused for every micro-batch.
    """
    from pyspark import SparkContext

    key = id(SparkContext._gateway)
    projections = _built.get(key)
    if projections is None:
        projections = _built[key] = _build(_Projections()).projections
    for columns in projections:
        df = df.select(*columns)
    return df


def _build(df: Any) -> Any:
    """The projections of L{parse}, applied to C{df} (anything with C{select})."""
    from pyspark.sql import functions as F

    p = _patterns()
    col = F.col
    zero = F.lit(0).cast("long")
    # 1. the line, the record's time, the source (parsing.source_of)
    path = F.make_valid_utf8(F.get(F.filter("headers", lambda h: h["key"] == "path"), 0)["value"].cast("string"))
    value = F.coalesce(F.make_valid_utf8(col("value").cast("string")), F.lit(""))
    # (only where the line ends with \r or \n: a regular expression walks the whole line; not
    # rtrim(value, trim), whose two-parameter form Spark 4 reports as deprecated)
    value = (F.when(value.endswith("\r") | value.endswith("\n"), F.regexp_replace(value, "[\r\n]+\\z", ""))
             .otherwise(value))
    df = df.select(value.alias("trimmed"), F.coalesce(F.unix_millis("timestamp"), zero).alias("record_ms"), "key",
                   path.alias("path_"))
    # what a terminal shows of a progress bar: the text after the line's last \r
    trimmed = col("trimmed")
    df = df.select(F.when(F.instr(trimmed, "\r") > 0, F.substring_index(trimmed, "\r", -1)).otherwise(trimmed)
                   .alias("line"), "record_ms", "key", "path_")
    # (the key is made valid UTF-8 only where it is needed: records without a path header)
    key = F.make_valid_utf8(col("key").cast("string"))
    source = (F.when(F.coalesce(col("path_"), F.lit("")) != "", col("path_"))
              .when(F.coalesce(key, F.lit("")) == "", "unknown")
              .when(F.instr(key, ":") > 0, _after_first(F, key, ":"))
              .otherwise(key))
    line = col("line")
    # 2. the format: the first that matches, in parsing.parse_line's order.  Access lines (the
    #    most common) with one match: the groups of a match are always shorter than the line
    #    (the line also holds the separators the pattern requires, each of at least one byte, where
    #    the groups are joined by one-byte U+0001s and the request's two tokens by one space), so
    #    a line rewritten to fewer bytes matched: a comparison of lengths in bytes, which Spark
    #    keeps, not of the texts.  The tokens go last: they may hold U+0001.
    access_groups = _fields_text(F, line, p["access"], [1, 2, 3, 4, 5, 6, 7, 10, "$8 $9"])
    df = df.select("line", "record_ms", source.alias("source"), access_groups.alias("access_groups"))
    line = col("line")
    fmt = F.lit(_FMT["unparsed"])
    for name in reversed(["twistd", "dpkg", "apt", "program", "iso", "rfc3164"]):
        fmt = F.when(line.rlike(p[name]), _FMT[name]).otherwise(fmt)
    fmt = F.when(F.octet_length("access_groups") < F.octet_length(line), _FMT["access"]).otherwise(fmt)
    df = df.select("line", "record_ms", "source", "access_groups", fmt.alias("fmt"))
    fmt = col("fmt")
    # 3. its groups, with one match
    groups = {
        "twistd": [1, 2, 3, 4, 5, 6, 7, 8, 10, 11],
        "dpkg": [1, 2, 3, 4, 5, 6],
        "apt": [1, 2, 3, 4, 5, 6],
        "program": [2, 3, 4, 5, 6, 7],  # program and text: program_tail
        "iso": [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "rfc3164": [1, 2, 3, 4, 5],  # program and message: rfc_tail
    }
    g: Any = F.when(fmt == _FMT["access"], F.split(col("access_groups"), _SEP, 9))
    for name, numbers in groups.items():
        g = g.when(fmt == _FMT[name], _fields(F, line, p[name], numbers))
    rfc_tail = F.when(fmt == _FMT["rfc3164"], F.regexp_replace(line, p["rfc3164"] + "(?s:.*)", "$7 $8"))
    rfc_tail = rfc_tail.when(fmt == _FMT["program"], F.regexp_replace(line, p["program"], "$1 $8"))
    df = df.select("line", "record_ms", "source", "fmt", g.alias("g"), rfc_tail.alias("rfc_tail"))
    g = col("g")
    # the first eight groups (the dates, times, zones, status) with their digits as 0-9, where a
    # group is not all ASCII (length counts characters: a group's few, not the line's)
    numeric = [F.get(g, i) for i in range(8)]
    df = df.select("line", "record_ms", "source", "fmt", "g", "rfc_tail",
                   *(F.when(F.length(x) == F.octet_length(x), x).otherwise(_ascii_digits(F, x)).alias(f"n{i}")
                     for i, x in enumerate(numeric)))

    def field(i: int) -> Any:
        return F.coalesce(col(f"n{i}"), F.lit(""))

    def number(i: int) -> Any:
        return col(f"n{i}").try_cast("long")

    # 4. the date and time fields, status, level and message where the format alone decides them
    month = _map(F, {m: i for i, m in enumerate(_MONTHS, 1)})
    access, rfc = fmt == _FMT["access"], fmt == _FMT["rfc3164"]
    iso_like = fmt.isin(*(_FMT[n] for n in ("twistd", "dpkg", "apt", "iso", "program")))
    record_day = ((col("record_ms") - F.pmod(col("record_ms"), F.lit(86_400_000))) / 86_400_000).cast("long")
    y = (F.when(access, number(2)).when(iso_like, number(0))
         .when(rfc, F.year(F.date_from_unix_date(record_day)).cast("long")))
    mo = (F.when(access, F.try_element_at(month, field(1)).cast("long"))
          .when(rfc, F.try_element_at(month, field(0)).cast("long")).when(iso_like, number(1)))
    d = F.when(access, number(0)).when(iso_like, number(2)).when(rfc, number(1))
    hh = F.when(access | iso_like, number(3)).when(rfc, number(2))
    mi = F.when(access | iso_like, number(4)).when(rfc, number(3))
    ss = F.when(access | iso_like, number(5)).when(rfc, number(4))
    fraction = F.when(iso_like, field(6)).otherwise(F.lit(""))  # (digits 0-9 in n6)
    millis = F.when(fraction == "", zero).otherwise(F.rpad(F.substring(fraction, 1, 3), 3, "0").try_cast("long"))
    offset = F.when(access, _offset_minutes(F, field(6))).when(iso_like, _offset_minutes(F, field(7))).otherwise(zero)
    # parsing.py: the request's first two tokens up to a "?"; with no token, the request, which is
    # then all whitespace and makes the same template as "" (empty); rtrim (spaces) drops the
    # space after a lone token
    access_message = F.substring_index(F.rtrim(F.get(g, 8)), "?", 1)
    twistd_word = F.lower(F.get(g, 8))
    bad_month = rfc & F.try_element_at(month, field(0)).isNull()  # RFC 3164 with no month name: unparsed
    # parsing.TERM_SOURCE: a line of no format in apt's term.log is dpkg's output (level guessed)
    term = ((fmt == _FMT["unparsed"]) | bad_month) & col("source").rlike(p["term_source"])
    fmt2 = F.when(term, _FMT["term"]).when(bad_month, _FMT["unparsed"]).otherwise(fmt)
    level = (F.when(bad_month, "unparsed").when(fmt.isin(_FMT["dpkg"], _FMT["apt"]), "info")
             .when(fmt == _FMT["twistd"], F.coalesce(F.try_element_at(_map(F, _LEVELS), twistd_word), twistd_word))
             .when(fmt == _FMT["unparsed"], "unparsed"))
    message = (F.when(bad_month, line).when(access, access_message).when(fmt == _FMT["twistd"], F.get(g, 9))
               .when(fmt == _FMT["dpkg"], F.substring(line, 21, 1 << 30)).when(fmt == _FMT["apt"], F.substring_index(line, ":", 1))
               .when(rfc | (fmt == _FMT["program"]), F.concat(F.substring_index(col("rfc_tail"), " ", 1), F.lit(": "),
                                   _after_first(F, col("rfc_tail"), " ")))
               .when(fmt == _FMT["unparsed"], line))
    # the text a level is guessed from (syslog, program, term)
    guess = (F.when(term, line)
             .when((rfc & ~bad_month) | (fmt == _FMT["program"]), _after_first(F, col("rfc_tail"), " ")))
    rest = F.when(fmt == _FMT["iso"], F.get(g, 8))
    df = df.select("record_ms", "source", fmt2.alias("fmt"), y.alias("y"), mo.alias("mo"), d.alias("d"),
                   hh.alias("hh"), mi.alias("mi"), ss.alias("ss"), millis.alias("millis"), offset.alias("offset"),
                   F.when(access, number(7).cast("int")).alias("status"), level.alias("level"),
                   message.alias("message"), guess.alias("guess"), rest.alias("rest"))
    fmt, y, mo, d, hh, mi, ss = (col(c) for c in ("fmt", "y", "mo", "d", "hh", "mi", "ss"))
    # 5. the time (parsing._iso_ms and the RFC 3164 year rule), and an ISO line's first four tokens
    time_ms = ((hh * 60 + mi) * 60 + ss) * 1000 + col("millis") - col("offset") * 60000
    ts = F.when(_valid(F, y, mo, d, hh, mi, ss, col("offset")), _days(F, y, mo, d) * 86_400_000 + time_ms)
    previous_year = F.when(_valid(F, y - 1, mo, d, hh, mi, ss, col("offset")),
                           _days(F, y - 1, mo, d) * 86_400_000 + time_ms)
    tokens = F.when(fmt == _FMT["iso"], F.split(F.regexp_replace(col("rest"), p["tokens"], "$1 $2 $3 $4"), " ", 4))
    df = df.select("record_ms", "source", "fmt", "status", "level", "message", "guess", "rest",
                   ts.alias("ts"), F.when(fmt == _FMT["rfc3164"], previous_year).alias("ts_previous"),
                   tokens.alias("tokens"))
    fmt = col("fmt")
    # 6. RFC 3164: the previous year when the record's puts the line more than two days after the record;
    #    an ISO line: the first of its first four tokens that is a level word (app), else syslog, else app
    ts = F.when((fmt == _FMT["rfc3164"]) & (col("ts") - col("record_ms") > 2 * 86_400_000),
                col("ts_previous")).otherwise(col("ts"))
    levels = list(_LEVELS)
    choice = F.lit(-1)
    for k in reversed(range(4)):
        token = F.get(col("tokens"), k)
        parts = _fields(F, token, p["level_token"], [1, 2, 3])
        word = F.get(parts, 1)
        qualifies = (token.rlike(p["level_token"]) & F.lower(word).isin(levels)
                     & ((F.upper(word) == word) | (F.get(parts, 0) != "") | (F.get(parts, 2) != "")))
        choice = F.when(F.coalesce(qualifies, F.lit(False)), k).otherwise(choice)
    df = df.select("record_ms", "source", "fmt", "status", "level", "message", "guess", "rest", "tokens",
                   ts.alias("ts"), F.when(fmt == _FMT["iso"], choice).alias("k"))
    k, rest, iso = col("k"), col("rest"), col("fmt") == _FMT["iso"]
    tail: Any = F
    for i in range(4):
        tail = tail.when(k == i, F.regexp_replace(rest, p["token_prefix"] % i, ""))
    app_word = F.lower(F.regexp_replace(F.get(col("tokens"), k), "[^A-Za-z]", ""))
    syslog = F.when(iso & (k < 0) & rest.rlike(p["syslog_tail"]),
                    F.regexp_replace(rest, p["syslog_tail"] + "(?s:.*)", "$2 $3"))  # "program message"
    df = df.select("record_ms", "source", "fmt", "status", "level", "message", "guess", "rest", "ts", "k",
                   F.regexp_replace(tail, "^[ \\-:]+", "").alias("app_message"),
                   F.try_element_at(_map(F, _LEVELS), app_word).alias("app_level"), syslog.alias("syslog"))
    iso, app, syslog = col("fmt") == _FMT["iso"], col("k") >= 0, col("syslog").isNotNull()
    message = (F.when(iso & app, col("app_message"))
               .when(iso & syslog, F.concat(F.substring_index(col("syslog"), " ", 1), F.lit(": "),
                                            _after_first(F, col("syslog"), " ")))
               .when(iso, rest).otherwise(col("message")))
    guess = F.when(iso & ~app, F.when(syslog, _after_first(F, col("syslog"), " ")).otherwise(rest)).otherwise(col("guess"))
    level = F.when(iso & app, col("app_level")).otherwise(col("level"))
    df = df.select("record_ms", "source", "status", "ts", level.alias("level"), message.alias("message"),
                   guess.alias("guess"))
    # 7. guess_level where the line names no level; the job's columns
    guessed = (F.when(col("guess").rlike(p["error"]), "error").when(col("guess").rlike(p["warning"]), "warning")
               .otherwise("info"))
    level = F.when(col("guess").isNotNull(), guessed).otherwise(col("level"))
    ts = F.coalesce(col("ts"), col("record_ms"))
    minute = ts - F.pmod(ts, F.lit(60_000))
    template = F.regexp_replace(F.regexp_replace(col("message"), p["numbers"], "#"), p["control"], " ")
    df = df.select("source", F.timestamp_millis(minute).alias("minute"), level.alias("level"), "status",
                   template.alias("message"))
    error = col("level").isin("error", "critical") | F.coalesce(col("status") >= 500, F.lit(False))
    df = df.select("source", "minute", "level", "status", F.coalesce(error, F.lit(False)).alias("error"),
                   _strip(F, col("message"), p["whitespace"]).alias("message"))
    # its first 100 characters: a text of at most 100 bytes has at most 100 (substring would count them)
    message = col("message")
    return df.select("source", "minute", "level", "status", "error",
                     F.when(F.octet_length(message) <= 100, message).otherwise(F.substring(message, 1, 100))
                     .alias("message"))
