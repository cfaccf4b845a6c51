"""
The log shipper: follow files as C{tail -F} does and send each line to a topic
as one record (the paper's log aggregation use case, section 1; issue 6).

    stats = ship_once("localhost:9092", "logs", ["/var/log/syslog", "/var/log/nginx/"])
    print(stats.lines, stats.bytes)

Records
=======

One record per line: the value is the line's bytes as in the file without the
trailing C{\\n} (a C{\\r} before it is kept; undecodable bytes and NUL bytes are
shipped as they are unless C{skip_binary}), the key is C{host:path} (UTF-8,
the path absolute), the headers are C{host}, C{path} and C{line_no} (1-based
line number in the current incarnation of the file: it starts again at 1 after
a rotation or a truncation).  A line longer than C{max_line_bytes} is cut to
that many bytes and gets a C{truncated} header holding its original length
(decimal ASCII).  The key keeps a file's lines in one partition, in order.

Following
=========

L{Shipper.poll_once} is one step: for each followed path, C{stat} it and

  - same inode, size below what was read: truncated -- start again at 0;
  - a different inode at the path: rotated by rename -- finish the old file to
    its end (its unterminated last line included), then start the new one at 0;
  - path missing: keep reading the open file (a writer may still append to it);
  - otherwise read what was appended; complete lines are shipped, an
    unterminated last line waits for its newline.

Then the records are flushed (acks=all) and, once all are acknowledged, the
state file is written.  C{ship_once} repeats the step until every file is read
to its end, then ships each file's unterminated last line too.

State file
==========

JSON, written to a temporary file in the same directory and renamed over the
old one (atomic on POSIX), only after every record up to the recorded offsets
was acknowledged:

    {"version": 1,
     "files": {"/var/log/syslog": {"dev": 2049, "ino": 131090,
                                   "offset": 81920, "line_no": 1022}}}

C{offset} is the byte offset of the next line to ship, C{line_no} the number of
lines shipped from that incarnation of the file.  On start a path resumes from
its entry when the inode and device match and the file is at least C{offset}
bytes long; otherwise it starts at 0.  A crash between the acknowledgement and
the checkpoint repeats the lines acknowledged since the last checkpoint (at
least once): at most one poll's worth of lines (C{max_poll_bytes}).
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
import socket
import stat as stat_module
import sys
import tempfile
import threading
import time
from itertools import repeat
from typing import Any, Callable, Iterable, Protocol, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatw.client.partitioner import murmur2

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "FileFollower",
    "LineSink",
    "ProducerSink",
    "SKIPPED_BINARY",
    "SKIPPED_UNREADABLE",
    "ShipStats",
    "Shipper",
    "expand_paths",
    "load_state",
    "save_state",
    "ship_once",
]

_log = Logger()

#: Kafka's C{message.max.bytes} is 1,048,588; 1,000,000 bytes of value leaves room
#: for the key, headers and record batch overhead.
DEFAULT_MAX_LINE_BYTES = 1_000_000

_STATE_VERSION = 1
_READ_CHUNK_BYTES = 1 << 20


@dataclasses.dataclass
class ShipStats:
    """
    Counters of a shipper run.

    @ivar lines: records acknowledged.
    @ivar bytes: bytes of values acknowledged (after truncation).
    @ivar files: files from which at least one line was shipped.
    @ivar truncated: lines cut to C{max_line_bytes}.
    @ivar skipped: files that could not be read plus lines skipped as binary.
    @ivar skipped_per_file: what C{skipped} counts, per path and reason:
        C{{path: {reason: count}}}, reasons L{SKIPPED_BINARY} (lines: a NUL
        byte or not UTF-8, with C{skip_binary}) and L{SKIPPED_UNREADABLE}
        (the file, once: permission denied or not a regular file).  Its
        counts add up to C{skipped}.
    """

    lines: int = 0
    bytes: int = 0
    files: int = 0
    truncated: int = 0
    skipped: int = 0
    skipped_per_file: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    def skip(self, path: str, reason: str, count: int = 1) -> None:
        """Count C{count} things of C{path} skipped for C{reason}."""
        self.skipped += count
        reasons = self.skipped_per_file.setdefault(path, {})
        reasons[reason] = reasons.get(reason, 0) + count


#: a reason in L{ShipStats.skipped_per_file}: lines with a NUL byte or not UTF-8 (C{skip_binary})
SKIPPED_BINARY = "binary"
#: a reason in L{ShipStats.skipped_per_file}: a file that could not be opened (counted once)
SKIPPED_UNREADABLE = "unreadable"


class LineSink(Protocol):
    """Where the shipper's records go; L{ProducerSink} for Kafka, a list in tests."""

    def send(self, value: bytes, key: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        """Queue one record."""

    def flush(self) -> None:
        """Wait until every queued record is acknowledged; raise if one failed."""


def line_records(key: bytes, values: list[bytes], first_line_no: int,
                 headers: Sequence[tuple[str, bytes]]) -> list[tuple]:
    """
    The records of lines C{values} of one file, as L{ProducerSink} queues
    them: C{(key, value, (*headers, ("line_no", b"N")), None)}, N counting
    from C{first_line_no}.

    Tuples all the way down, made in three stages (all the line numbers'
    headers, then all the headers, then the records), so that the garbage
    collector stops tracking them in its young collections.  CPython stops
    tracking a tuple whose items are all untracked (bytes, str, None, such
    tuples) when a collection examines it, but a collection looks at a
    container before its items: a tuple is untracked only where its items
    were by an earlier collection.  The young collections that run while a
    stage is built (one per 700 new objects, by default) untrack the stage
    before: after the next one, none of 2,000 records is tracked, where the
    same tuples made nested (one C{zip} of C{zip}s) all stayed tracked
    until full collections, and a list of headers kept them tracked for
    good.  Then the records waiting in the chunks and the producer's
    batches are not walked by every full collection, which took about a
    fifth of C{kafkatw ship}'s time.  zip and map: no bytecode per line.
    """
    line_nos = map(b"%d".__mod__, range(first_line_no, first_line_no + len(values)))
    line_no_headers = list(zip(repeat("line_no"), line_nos))
    headers_per_line = list(zip(*map(repeat, headers), line_no_headers))
    return list(zip(repeat(key), values, headers_per_line, repeat(None)))


class _ChunkSender:
    """
    The reactor-thread half of L{ProducerSink}: sends chunks of records
    through a L{kafkatw.client.producer.Producer}, pausing while the producer
    is not L{ready<kafkatw.client.producer.Producer.ready>} (buffer memory or
    metadata), and finds the records that failed when flushed.

    A chunk is a list of runs C{(key, records)}: consecutive records of one
    key (one file), each C{(key, value, headers, None)} as
    L{Producer.send_many<kafkatw.client.producer.Producer.send_many>} takes
    them.  A run goes to the partition Kafka's default partitioner picks for
    its key (murmur2, as C{BuiltInPartitioner.partitionForKey}), computed here
    once per key and partition count, in pieces of at most C{_READY_EVERY}
    records: one C{send_many} (one Deferred) per piece.

    @param on_chunk_sent: called (in the reactor thread) after each chunk is
        handed to the producer (the other thread's back-pressure).
    """

    _READY_EVERY = 256

    def __init__(self, producer: Any, topic: str, on_chunk_sent: Callable[[], None] = lambda: None,
                 partition_by_key: bool = True) -> None:
        self.producer = producer
        self.partition_by_key = partition_by_key
        self.topic = topic
        self.on_chunk_sent = on_chunk_sent
        self._chunks: collections.deque = collections.deque()
        self._run = 0  # runs of _chunks[0] already sent
        self._position = 0  # records of that run already sent
        self._blocked = False
        self._sent: list[Any] = []  # the Deferreds of the pieces (or records) since the last flush
        self._error: BaseException | None = None
        self._idle_waiters: list[Deferred] = []
        self._hashes: dict[bytes, int] = {}

    def _partitioner(self) -> Callable[[bytes], int | None]:
        """
        key -> partition for the topic's partitions now (None: unknown yet, or
        a C{partitioner} was given: the producer picks).
        """
        count = len(self.producer.client.partitions_for(self.topic)) if self.partition_by_key else 0
        if not count:
            return lambda key: None
        hashes = self._hashes
        if len(hashes) > 4096:
            hashes.clear()

        def partition(key: bytes) -> int:
            h = hashes.get(key)
            if h is None:
                h = hashes[key] = murmur2(key) & 0x7FFFFFFF
            return h % count

        return partition

    def add(self, chunk: list[tuple[bytes, list[tuple[bytes, bytes, list[tuple[str, bytes]], None]]]]) -> None:
        """Send C{chunk}: C{(key, records)} runs."""
        self._chunks.append(chunk)
        if not self._blocked:
            self._drain()

    def _drain(self) -> None:
        chunks = self._chunks
        producer = self.producer
        topic = self.topic
        sent = self._sent
        every = self._READY_EVERY
        while chunks:
            chunk = chunks[0]
            partition_for = self._partitioner()
            while self._run < len(chunk):
                key, records = chunk[self._run]
                partition = partition_for(key)
                position = self._position
                size = len(records)
                while position < size:
                    stop = min(size, position + every)
                    try:
                        if partition is None:
                            send = producer.send
                            for record in records[position:stop]:
                                sent.append(send(topic, record[1], key, None, record[2]))
                        else:
                            sent.append(producer.send_many(topic, records[position:stop], partition))
                    except Exception as e:  # the producer raised instead of failing the Deferred
                        if self._error is None:
                            self._error = e
                    position = stop
                    self._position = position
                    ready = producer.ready()
                    if not ready.called:
                        if position == size:
                            self._run += 1
                            self._position = 0
                        self._blocked = True
                        ready.addBoth(self._unblock)
                        return
                self._run += 1
                self._position = 0
            chunks.popleft()
            self._run = 0
            self._position = 0
            self.on_chunk_sent()
        waiters, self._idle_waiters = self._idle_waiters, []
        for d in waiters:
            d.callback(None)

    def _unblock(self, _: Any) -> None:
        self._blocked = False
        self._drain()

    async def flush(self) -> None:
        """
        Send every chunk, wait until every record is acknowledged or failed.

        @raise Exception: the error of the first record that failed since the
            last flush.
        """
        if self._chunks:
            idle: Deferred = Deferred()
            self._idle_waiters.append(idle)
            await idle
        await self.producer.flush()
        sent, self._sent = self._sent, []
        error, self._error = self._error, None
        # The producer fires a Deferred without callbacks cheaply (no
        # callback per piece here): look at the outcomes once, at the end.
        for d in sent:
            if isinstance(d.result, Failure):
                if error is None:
                    error = d.result.value
                d.addErrback(lambda _: None)  # handled: reported below
        if error is not None:
            raise error


class ProducerSink:
    """
    A L{LineSink} on a L{kafkatw.client.producer.Producer} running on this
    process's reactor thread (L{kafkatw.client.blocking.reactor_thread}):
    acks=all, retries on, one request in flight per broker (a file's lines
    stay in order through retries).

    Lines are handed to the reactor thread in chunks of C{chunk_lines} (one
    wake-up per chunk, no object per record on this side but the record
    itself); at most C{max_chunks} chunks wait there, then L{send} blocks.

    @param options: more L{Producer} options (they override the defaults above).
    """

    def __init__(self, bootstrap_servers: str, topic: str, *, chunk_lines: int = 2000, max_chunks: int = 8,
                 **options: Any) -> None:
        from kafkatw.client.blocking import reactor_thread
        from kafkatw.client.producer import Producer

        settings: dict[str, Any] = dict(client_id="kafkatw-ship", acks="all", retries=2147483647,
                                        linger_ms=20, batch_size=262144,
                                        max_in_flight_requests_per_connection=1)
        settings.update(options)
        self.topic = topic
        self.chunk_lines = chunk_lines
        thread = self._thread = reactor_thread()
        self._producer = thread.call(60.0, lambda: Producer(thread.reactor, bootstrap_servers, **settings))
        self._room = threading.Semaphore(max_chunks)
        self._sender = _ChunkSender(self._producer, topic, on_chunk_sent=self._room.release,
                                    partition_by_key="partitioner" not in options)
        self._chunk: list[tuple[bytes, list[tuple]]] = []  # (key, records) runs
        self._lines = 0  # records in _chunk
        self._closed = False

    def send(self, value: bytes, key: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        chunk = self._chunk
        if chunk and chunk[-1][0] == key:
            chunk[-1][1].append((key, value, headers, None))
        else:
            chunk.append((key, [(key, value, headers, None)]))
        self._lines += 1
        if self._lines >= self.chunk_lines:
            self._hand_off()

    def send_lines(self, key: bytes, values: list[bytes], first_line_no: int,
                   headers: Sequence[tuple[str, bytes]]) -> None:
        """
        Queue one record per value, all with C{key}, and headers C{headers}
        followed by C{("line_no", b"N")}, N counting from C{first_line_no}:
        what L{send} makes of each line, without a call per line
        (L{line_records}).
        """
        if not values:
            return
        records = line_records(key, values, first_line_no, headers)
        chunk = self._chunk
        if chunk and chunk[-1][0] == key:
            chunk[-1][1].extend(records)
        else:
            chunk.append((key, records))
        self._lines += len(records)
        if self._lines >= self.chunk_lines:
            self._hand_off()

    def _hand_off(self) -> None:
        chunk, self._chunk = self._chunk, []
        self._lines = 0
        if chunk:
            self._room.acquire()
            self._thread.call_soon(self._sender.add, chunk)

    def flush(self) -> None:
        self._hand_off()
        self._thread.call(None, self._sender.flush)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._hand_off()

        async def close() -> None:
            try:
                await self._sender.flush()
            finally:
                await self._producer.close()

        self._thread.call(None, close)

# --- state file ---------------------------------------------------------------------


def load_state(path: str | None) -> dict[str, dict[str, int]]:
    """
    Read a state file (format in the module docstring).

    @return: path -> C{{"dev", "ino", "offset", "line_no"}}; empty when the file
        does not exist.  A corrupt file is reported and ignored (start over).
    """
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        _log.warn("ignoring unreadable state file {path}: {error}", path=path, error=e)
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    out = {}
    for name, entry in files.items():
        try:
            out[name] = {k: int(entry[k]) for k in ("dev", "ino", "offset", "line_no")}
        except (KeyError, TypeError, ValueError):
            continue
    return out


def save_state(path: str, files: dict[str, dict[str, int]]) -> None:
    """Write the state file atomically: a temporary file in its directory, fsync, rename."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ship-state-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"version": _STATE_VERSION, "files": files}, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --- path expansion -------------------------------------------------------------------


def _regular(path: str) -> bool:
    try:
        return stat_module.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def expand_paths(patterns: Iterable[str], recursive: bool = False) -> list[str]:
    """
    Expand C{PATH} arguments: a directory gives its regular files (its whole
    tree with C{recursive}), a glob its matches (C{**} only with C{recursive}),
    anything else is taken as a file to follow, whether it exists yet or not.

    @return: absolute paths, sorted, without duplicates.
    """
    out: set[str] = set()
    for pattern in patterns:
        if os.path.isdir(pattern):
            if recursive:
                for root, dirs, names in os.walk(pattern):
                    dirs.sort()
                    out.update(os.path.join(root, n) for n in names if _regular(os.path.join(root, n)))
            else:
                try:
                    names = os.listdir(pattern)
                except OSError as e:
                    _log.warn("cannot list {path}: {error}", path=pattern, error=e)
                    continue
                out.update(os.path.join(pattern, n) for n in names if _regular(os.path.join(pattern, n)))
        elif glob.has_magic(pattern):
            for match in glob.glob(pattern, recursive=recursive):
                if os.path.isdir(match):
                    out.update(expand_paths([match], recursive))
                elif _regular(match):
                    out.add(match)
        else:
            out.add(pattern)
    return sorted(os.path.abspath(p) for p in out)


# --- one followed path -----------------------------------------------------------------


Emit = Callable[[bytes, int, int | None], None]
EmitLines = Callable[[list[bytes], int], None]


class FileFollower:
    """
    Follows one path as C{tail -F}: reads appended bytes, cuts them into lines,
    notices truncation and rotation by rename.

    @ivar offset: byte offset of the next line to ship in the open file.
    @ivar line_no: lines shipped from the open file.
    @ivar checkpoint: the state entry to save once what was emitted is acknowledged.
    """

    def __init__(self, path: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 max_poll_bytes: int = 16 << 20,
                 on_finished: Callable[[int, int, int, int], None] | None = None) -> None:
        self.path = path
        self.on_finished = on_finished
        self.max_line_bytes = max_line_bytes
        self.max_poll_bytes = max_poll_bytes
        self.file: Any = None
        self.dev = 0
        self.ino = 0
        self.offset = 0
        self.line_no = 0
        self.unreadable = False
        self._buf = b""  # bytes after offset not yet a complete line
        self._long_prefix: bytes | None = None  # first max_line_bytes of a line over the limit
        self._long_len = 0
        self._read_pos = 0  # the open file's position
        self.size = 0  # size at the last stat (for lag)

    # -- opening ----------------------------------------------------------------------

    def open(self, offset: int = 0, line_no: int = 0) -> bool:
        """
        Open the path and start at C{offset}.

        @return: False when the path is missing or unreadable (then C{unreadable}
            says which; L{poll} tries again).
        @raise PermissionError: never; reported through C{unreadable}.
        """
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return False
        except OSError:
            self.unreadable = True
            return False
        st = os.fstat(f.fileno())
        if not stat_module.S_ISREG(st.st_mode):
            f.close()
            self.unreadable = True
            return False
        self.unreadable = False
        self.file = f
        self.dev, self.ino = st.st_dev, st.st_ino
        self.size = st.st_size
        if offset > st.st_size:
            offset, line_no = 0, 0
        self._reset(offset, line_no)
        return True

    def _reset(self, offset: int, line_no: int) -> None:
        self.offset = offset
        self.line_no = line_no
        self._buf = b""
        self._long_prefix = None
        self._long_len = 0
        self._read_pos = offset
        self.file.seek(offset)

    def resume(self, entry: dict[str, int] | None) -> bool:
        """Open at the position a state entry records, when it names this file; else at 0."""
        if not self.open():
            return False
        if entry and entry["dev"] == self.dev and entry["ino"] == self.ino and entry["offset"] <= self.size:
            self._reset(entry["offset"], entry["line_no"])
        return True

    def seek(self, offset: int, line_no: int) -> None:
        """Continue the open file at C{offset}, C{line_no} lines already shipped."""
        self._reset(offset, line_no)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    @property
    def checkpoint(self) -> dict[str, int] | None:
        if self.file is None:
            return None
        return {"dev": self.dev, "ino": self.ino, "offset": self.offset, "line_no": self.line_no}

    @property
    def lag_bytes(self) -> int:
        """Bytes in the file not shipped yet (as of the last stat)."""
        return max(0, self.size - self.offset) if self.file is not None else 0

    # -- reading ------------------------------------------------------------------------

    def poll(self, emit: Emit, final: bool = False, emit_lines: EmitLines | None = None) -> int:
        """
        One step: stat the path, handle truncation and rotation, read what was
        appended and C{emit(value, line_no, original_length_or_None)} each
        complete line (C{final}: the unterminated last line too).

        @param emit_lines: when given, C{emit_lines(values, first_line_no)}
            takes the complete lines of a read that are all within
            C{max_line_bytes} at once (numbered from C{first_line_no}); the
            others still go to C{emit}.

        @return: bytes read (0: caught up).
        """
        if self.file is None:
            if not self.open():
                return 0
        try:
            st = os.stat(self.path)
        except OSError:
            st = None  # moved away, new one not there yet: keep reading the open file
        total = 0
        if st is not None and (st.st_dev, st.st_ino) != (self.dev, self.ino):
            # rotated: finish the old file (to its very end), then the new one from 0
            total += self._read(emit, final=True, limit=None, emit_lines=emit_lines)
            if self.on_finished is not None:
                self.on_finished(self.dev, self.ino, self.offset, self.line_no)
            self.close()
            if not self.open():
                return total
            st = os.fstat(self.file.fileno())
        elif st is not None and st.st_size < self._read_pos:
            self._reset(0, 0)  # truncated
        fst = os.fstat(self.file.fileno())
        self.size = fst.st_size
        total += self._read(emit, final=final, limit=self.max_poll_bytes, emit_lines=emit_lines)
        if st is None and fst.st_nlink == 0 and self._read_pos >= fst.st_size:
            # deleted (not renamed) and read to its end: finish it and let go of it,
            # so its disk space is freed
            self._read(emit, final=True, limit=None, emit_lines=emit_lines)
            if self.on_finished is not None:
                self.on_finished(self.dev, self.ino, self.offset, self.line_no)
            self.close()
        return total

    def _read(self, emit: Emit, final: bool, limit: int | None, emit_lines: EmitLines | None = None) -> int:
        total = 0
        f = self.file
        while limit is None or total < limit:
            chunk = f.read(_READ_CHUNK_BYTES)
            if not chunk:
                break
            total += len(chunk)
            self._read_pos += len(chunk)
            self._feed(chunk, emit, emit_lines)
        if final:
            if self._long_prefix is not None:
                self._emit_long(emit, self._long_len)
            elif self._buf:
                self._emit(emit, self._buf, len(self._buf))
                self._buf = b""
        return total

    def _feed(self, chunk: bytes, emit: Emit, emit_lines: EmitLines | None = None) -> None:
        start = 0
        if self._long_prefix is not None:
            end = chunk.find(b"\n")
            if end < 0:
                self._long_len += len(chunk)
                return
            self._long_len += end
            self._emit_long(emit, self._long_len + 1)
            start = end + 1
        data = self._buf + chunk[start:] if self._buf else chunk[start:]
        pos = 0
        limit = self.max_line_bytes
        if emit_lines is not None:
            lines = data.split(b"\n")
            rest = lines.pop()
            if lines and max(map(len, lines)) <= limit:
                first = self.line_no + 1
                self.line_no += len(lines)
                self.offset += len(data) - len(rest)
                emit_lines(lines, first)
                pos = len(data) - len(rest)
        while True:
            end = data.find(b"\n", pos)
            if end < 0:
                break
            line = data[pos:end]
            if len(line) > limit:
                self._line(emit, line[:limit], end + 1 - pos, len(line))
            else:
                self._line(emit, line, end + 1 - pos, None)
            pos = end + 1
        rest = data[pos:]
        if len(rest) > limit:
            self._long_prefix = rest[:limit]
            self._long_len = len(rest)
            self._buf = b""
        else:
            self._buf = rest

    def _line(self, emit: Emit, value: bytes, consumed: int, original: int | None) -> None:
        self.line_no += 1
        self.offset += consumed
        emit(value, self.line_no, original)

    def _emit(self, emit: Emit, data: bytes, consumed: int) -> None:
        if len(data) > self.max_line_bytes:
            self._line(emit, data[:self.max_line_bytes], consumed, len(data))
        else:
            self._line(emit, data, consumed, None)

    def _emit_long(self, emit: Emit, consumed: int) -> None:
        """Ship the cut line: C{consumed} bytes of the file (the line, and its newline if any)."""
        prefix, self._long_prefix = self._long_prefix, None
        assert prefix is not None
        self._line(emit, prefix, consumed, self._long_len)
        self._long_len = 0


# --- the shipper -------------------------------------------------------------------------


def _is_binary(value: bytes) -> bool:
    if b"\x00" in value:
        return True
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


class Shipper:
    """
    Ships lines from the files that C{patterns} name to a L{LineSink}.

    @param patterns: files, directories and globs (see L{expand_paths}).
    @param sink: where records go.
    @param state_file: where positions are kept (None: nowhere; every run starts at 0).
    @param on_warning: called with each message for the user (unreadable file, …).
    @param clock: seconds, monotonic (for lines/s).
    """

    def __init__(self, patterns: Iterable[str], sink: LineSink, *, state_file: str | None = None,
                 recursive: bool = False, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 skip_binary: bool = False, max_poll_bytes: int = 16 << 20, host: str | None = None,
                 on_warning: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.patterns = list(patterns)
        self.sink = sink
        self.state_file = state_file
        self.recursive = recursive
        self.max_line_bytes = max_line_bytes
        self.skip_binary = skip_binary
        self.max_poll_bytes = max_poll_bytes
        self.host = host if host is not None else socket.gethostname()
        self.on_warning = on_warning or (lambda message: None)
        self.clock = clock
        self.stats = ShipStats()
        self.followers: dict[str, FileFollower] = {}
        self._state = load_state(state_file)
        self._saved = dict(self._state)
        self._reported: set[str] = set()
        self._finished: dict[tuple[int, int], tuple[int, int]] = {}
        self._shipped_from: set[str] = set()
        self._pending = ShipStats()
        self._pending_files: set[str] = set()
        self._patterns_checked = False
        #: paths opened at least once (readable regular files)
        self.opened: set[str] = set()
        self.started = clock()

    def _warn(self, message: str) -> None:
        _log.warn("{message}", message=message)
        self.on_warning(message)

    def _check_patterns(self) -> None:
        """
        Warn, once, about each C{PATH} argument that names nothing readable: a
        path that does not exist, a glob that matches nothing, a directory that
        cannot be listed.  (A file that exists but cannot be read is reported
        when it is first polled.)
        """
        self._patterns_checked = True
        for pattern in self.patterns:
            if glob.has_magic(pattern):
                if not glob.glob(pattern, recursive=self.recursive):
                    self._warn(f"no file matches {pattern}")
            elif os.path.isdir(pattern):
                if not os.access(pattern, os.R_OK | os.X_OK):
                    self._warn(f"cannot list directory {pattern}: permission denied")
            else:
                try:
                    os.stat(pattern)
                except FileNotFoundError:
                    self._warn(f"{pattern} does not exist")
                except OSError:
                    pass  # reported as unreadable when polled

    def _discover(self) -> None:
        """
        Follow the paths the patterns name now.  A new path that is a file
        already being followed, or finished after a rotation (same device and
        inode: C{app.log} renamed to C{app.log.1} under a directory or a glob),
        continues from that file's position instead of shipping it again.
        """
        known = dict(self._finished)
        for follower in self.followers.values():
            if follower.file is not None:
                known[(follower.dev, follower.ino)] = (follower.offset, follower.line_no)
        expanded = expand_paths(self.patterns, self.recursive)
        listed = set(expanded)
        for path in [p for p, f in self.followers.items() if f.file is None and p not in listed]:
            del self.followers[path]  # found under a directory or glob, gone now
        state_file = os.path.abspath(self.state_file) if self.state_file else None
        for path in expanded:
            if path in self.followers:
                continue
            if state_file and (path == state_file or (os.path.dirname(path) == os.path.dirname(state_file)
                                                      and os.path.basename(path).startswith(".ship-state-"))):
                continue  # the state file and its temporary files
            follower = FileFollower(path, self.max_line_bytes, self.max_poll_bytes, on_finished=self._on_finished)
            if follower.resume(self._state.get(path)) and path not in self._state:
                seen = known.get((follower.dev, follower.ino))
                if seen is not None and seen[0] <= follower.size:
                    follower.seek(*seen)
            self.followers[path] = follower

    def _on_finished(self, dev: int, ino: int, offset: int, line_no: int) -> None:
        self._finished[(dev, ino)] = (offset, line_no)
        while len(self._finished) > 1000:
            del self._finished[next(iter(self._finished))]

    def poll_once(self, final: bool = False) -> int:
        """
        One step of following: find new files, read every followed file (at most
        C{max_poll_bytes} each), send the lines, flush, and checkpoint.

        @param final: also ship each file's unterminated last line.
        @return: bytes read (0: every file caught up).
        @raise Exception: the sink's error when a record failed; nothing is
            checkpointed then, and the positions go back to the last checkpoint.
        """
        if not self._patterns_checked:
            self._check_patterns()
        if not self.followers:
            self._discover()
        total = 0
        send_lines = getattr(self.sink, "send_lines", None)
        for path, follower in list(self.followers.items()):
            was_unreadable = follower.unreadable
            key = f"{self.host}:{path}".encode("utf-8", "surrogateescape")
            fixed = (("host", self.host.encode()), ("path", path.encode("utf-8", "surrogateescape")))

            def emit(value: bytes, line_no: int, original: int | None, path: str = path, key: bytes = key,
                     fixed: tuple = fixed) -> None:
                if self.skip_binary and _is_binary(value):
                    self._pending.skip(path, SKIPPED_BINARY)
                    return
                # tuples, as line_records makes them
                headers = (*fixed, ("line_no", b"%d" % line_no))
                if original is not None:
                    headers += (("truncated", b"%d" % original),)
                    self._pending.truncated += 1
                self.sink.send(value, key, headers)
                self._pending.lines += 1
                self._pending.bytes += len(value)
                self._pending_files.add(path)

            def emit_lines(values: list[bytes], first_line_no: int, path: str = path, key: bytes = key,
                           fixed: tuple = fixed, emit: Emit = emit) -> None:
                # many lines at once (none too long): the same records as emit's
                if self.skip_binary:
                    for line_no, value in enumerate(values, first_line_no):
                        emit(value, line_no, None)
                    return
                send_lines(key, values, first_line_no, fixed)
                pending = self._pending
                pending.lines += len(values)
                pending.bytes += sum(map(len, values))
                self._pending_files.add(path)

            total += follower.poll(emit, final=final, emit_lines=emit_lines if send_lines is not None else None)
            if follower.file is not None:
                self.opened.add(path)
            if follower.unreadable and path not in self._reported:
                self._reported.add(path)
                self.stats.skip(path, SKIPPED_UNREADABLE)
                self._warn(f"cannot read {path}: permission denied or not a regular file; skipping it")
            elif was_unreadable and not follower.unreadable:
                self._reported.discard(path)
        # new files after the old ones were polled: a rotated file is finished by its
        # old path's follower before its new name is looked at
        self._discover()
        try:
            self.sink.flush()
        except Exception:
            self._rewind()
            raise
        self._commit()
        return total

    def _commit(self) -> None:
        p = self._pending
        s = self.stats
        s.lines += p.lines
        s.bytes += p.bytes
        s.truncated += p.truncated
        for path, reasons in p.skipped_per_file.items():
            for reason, count in reasons.items():
                s.skip(path, reason, count)
        self._shipped_from |= self._pending_files
        s.files = len(self._shipped_from)
        if p.truncated:
            self._warn(f"truncated {p.truncated} line(s) longer than {self.max_line_bytes} bytes")
        self._pending = ShipStats()
        self._pending_files = set()
        for path, follower in self.followers.items():
            entry = follower.checkpoint
            if entry is not None:
                self._state[path] = entry
        for path in [p for p in self._state if not os.path.lexists(p)]:
            del self._state[path]  # a later file at that path starts at 0 anyway
        if self.state_file and self._state != self._saved:
            save_state(self.state_file, self._state)
            self._saved = {k: dict(v) for k, v in self._state.items()}

    def _rewind(self) -> None:
        """After a failed flush: reopen every file at its last checkpoint."""
        self._pending = ShipStats()
        self._pending_files = set()
        for path, follower in self.followers.items():
            follower.close()
            follower.resume(self._state.get(path))

    def run_once(self) -> ShipStats:
        """Ship everything there is now (unterminated last lines included); return the stats."""
        while self.poll_once():
            pass
        self.poll_once(final=True)
        return self.stats

    def lag(self) -> dict[str, int]:
        """Per path, bytes not shipped yet (as of the last poll)."""
        return {path: f.lag_bytes for path, f in self.followers.items()}

    def close(self) -> None:
        for follower in self.followers.values():
            follower.close()


def ship_once(bootstrap: str, topic: str, paths: Iterable[str], state_file: str | None = None, *,
              recursive: bool = False, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, skip_binary: bool = False,
              on_warning: Callable[[str], None] | None = None, **producer_options: Any) -> ShipStats:
    """
    Ship every line now in the files C{paths} names to C{topic}, then return
    (blocking; for scripts and batch runs).  With C{state_file}, start where
    the last run stopped and record where this one did.

    @param producer_options: more L{kafkatw.client.producer.Producer} options.
    @return: L{ShipStats}.
    @raise KafkaError: a record could not be delivered.
    """
    if on_warning is None:
        def on_warning(message: str) -> None:
            print(f"kafkatw ship: {message}", file=sys.stderr)
    sink = ProducerSink(bootstrap, topic, **producer_options)
    shipper = Shipper(paths, sink, state_file=state_file, recursive=recursive, max_line_bytes=max_line_bytes,
                      skip_binary=skip_binary, on_warning=on_warning)
    try:
        return shipper.run_once()
    finally:
        shipper.close()
        sink.close()
