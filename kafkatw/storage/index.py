"""
Sparse offset and time indexes of one log segment.

Both are rebuildable from the segment's C{.log} (docs/design.md: On disk as on the wire); they are kept
in memory as two parallel C{array}s searched with C{bisect}, and appended to
their files in batches (pending entries are written on L{flush}, L{close}, or
when 4 KB have accumulated).  A missing tail of entries never gives a wrong
answer, only a longer forward scan.

An index holds no open file: each write, truncation or C{fsync} opens the
file and closes it again (about once per 512 entries, so once per 2 MB of log
at the default C{index.interval.bytes}), which leaves one descriptor per
segment -- its C{.log}, which fetches send from -- and lets 10,000 partitions
fit under a 20,000 C{ulimit -n} (docs/operations.md, "Open files").  L{flush}
fsyncs only an index written to since its last C{fsync}, so idle partitions
cost no C{fsync} at a flush or a clean shutdown.

C{<base offset, 20 digits>.index} — as Kafka's C{OffsetIndex}, "a 4 byte
'relative' offset and a 4 byte file location"::

    +----------------------+----------------------+
    | relative offset  i32 | position in .log i32 |   8 bytes per entry, big-endian
    +----------------------+----------------------+

The relative offset is C{batch base offset - segment base offset} of the batch
that starts at C{position}.  (Kafka stores the batch's I{last} offset; the base
offset gives a tighter floor for the same lookup.)  Entries are strictly
increasing in both columns.

C{<base offset, 20 digits>.timeindex}::

    +------------------------+----------------------+
    | timestamp (ms)     i64 | relative offset  i32 |   12 bytes per entry, big-endian
    +------------------------+----------------------+

An entry C{(T, o)} says: every record of the segment in batches up to and
including the batch at relative offset C{o} has a timestamp C{<= T}.  Entries are
added only when C{T} grows, so both columns strictly increase.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

__all__ = ["OffsetIndex", "TimeIndex", "IndexCorruptError"]

_LITTLE = sys.byteorder == "little"
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_PENDING_LIMIT = 4096


class IndexCorruptError(Exception):
    """An index file fails its sanity check; rebuild it from the log."""


class _Index:
    entry_size: int
    _struct: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_bytes: int = 10 * 1024 * 1024) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._keys = array(self._key_type)
        self._values = array(self._value_type)
        self._pending = bytearray()
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        #: written to (or truncated) since the last C{fsync}
        self._unsynced = False
        self._closed = False
        #: whether the index holds C{max_entries} (kept up to date by every change, read on each append)
        self.is_full = False

    _key_type = "i"
    _value_type = "i"

    def __len__(self) -> int:
        return len(self._keys)

    def _entries_changed(self) -> None:
        self.is_full = len(self._keys) >= self.max_entries

    def _open(self) -> int:
        """A descriptor of the file, for one operation (the caller closes it). @raise OSError: closed index."""
        if self._closed:
            raise OSError(errno.EBADF, f"{self.path} is closed")
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def load(self) -> None:
        """
        Read the file into memory.

        @raise IndexCorruptError: its size is not a multiple of the entry size.
        """
        data = b""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size % self.entry_size:
                raise IndexCorruptError(f"{self.path}: size {size} is not a multiple of {self.entry_size}")
            if size:
                data = os.pread(fd, size, 0)
        finally:
            os.close(fd)
        self._decode(data)
        self._entries_changed()

    def _write_pending(self, fsync: bool = False) -> None:
        if not self._pending and not (fsync and self._unsynced):
            return
        fd = self._open()
        try:
            if self._pending:
                data = memoryview(bytes(self._pending))
                self._pending.clear()
                self._unsynced = True
                while data:
                    data = data[os.write(fd, data):]
            if fsync:
                os.fsync(fd)
                self._unsynced = False
        finally:
            os.close(fd)

    def _append_raw(self, key: int, value: int, entry: bytes) -> None:
        self._keys.append(key)
        self._values.append(value)
        self._pending += entry
        self.is_full = len(self._keys) >= self.max_entries
        if len(self._pending) >= _PENDING_LIMIT:
            try:
                self._write_pending()
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                # out of descriptors for a moment: the entries stay pending, for the next write or flush

    def _truncate_file(self, size: int) -> None:
        fd = self._open()
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        self._unsynced = True

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._keys = array(self._key_type)
        self._values = array(self._value_type)
        self._pending.clear()
        self._truncate_file(0)
        self.is_full = False

    def _truncate_entries(self, count: int) -> None:
        if count >= len(self._keys):
            return
        self._write_pending()
        del self._keys[count:]
        del self._values[count:]
        self._truncate_file(count * self.entry_size)
        self._entries_changed()

    def flush(self, fsync: bool = True) -> None:
        """Write the pending entries; with C{fsync}, C{fsync} the file if it changed since the last one."""
        self._write_pending(fsync)

    def close(self) -> None:
        if not self._closed:
            self._write_pending()
            self._closed = True

    def close_handler(self) -> None:
        """Drop the entries not written yet and close (a failed log directory); nothing is written."""
        self._pending.clear()
        self._closed = True

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_Index):
    """
    The sparse offset index: batch base offset -> position in the C{.log}.
    """

    entry_size = 8
    _struct = _OFFSET_ENTRY

    def _decode(self, data: bytes) -> None:
        both = array("i")
        both.frombytes(data)
        if _LITTLE:
            both.byteswap()
        self._keys = both[0::2]
        self._values = both[1::2]

    def sanity_check(self, log_size_bytes: int) -> None:
        """
        Kafka's check: entries start at a non-negative offset, the last entry
        is the largest, and every position lies inside the log.

        @raise IndexCorruptError: when not.
        """
        keys, values = self._keys, self._values
        if not keys:
            return
        if keys[0] < 0 or values[0] < 0:
            raise IndexCorruptError(f"{self.path}: negative first entry")
        if keys[-1] < keys[0] or values[-1] < values[0] or (len(keys) > 1 and keys[-1] == keys[0]):
            raise IndexCorruptError(f"{self.path}: last entry is not the largest")
        if values[-1] >= log_size_bytes:
            raise IndexCorruptError(f"{self.path}: position {values[-1]} beyond log size {log_size_bytes}")

    def append(self, offset: int, position: int) -> None:
        """Add an entry for the batch of base C{offset} at C{position}."""
        rel = offset - self.base_offset
        self._append_raw(rel, position, _OFFSET_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """
        @return: C{(offset, position)} of the last entry with offset C{<= offset},
            or C{(base_offset, 0)} when there is none.
        """
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._keys[i] + self.base_offset, self._values[i]

    def floor_position(self, position: int) -> int:
        """@return: the largest indexed position C{<= position}, or 0."""
        i = bisect_right(self._values, position) - 1
        return self._values[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is C{>= offset}."""
        self._truncate_entries(bisect_left(self._keys, offset - self.base_offset))

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._keys:
            return self.base_offset, 0
        return self._keys[-1] + self.base_offset, self._values[-1]


class TimeIndex(_Index):
    """
    The sparse time index: largest timestamp so far -> batch base offset.
    """

    entry_size = 12
    _struct = _TIME_ENTRY
    _key_type = "q"

    def _decode(self, data: bytes) -> None:
        keys = array("q")
        values = array("i")
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            keys.append(ts)
            values.append(rel)
        self._keys = keys
        self._values = values

    def sanity_check(self, next_offset: int | None = None) -> None:
        """@raise IndexCorruptError: entries not increasing or out of range."""
        keys, values = self._keys, self._values
        if not keys:
            return
        if values[0] < 0 or values[-1] < values[0] or keys[-1] < keys[0]:
            raise IndexCorruptError(f"{self.path}: entries not increasing")
        if next_offset is not None and values[-1] + self.base_offset >= next_offset:
            raise IndexCorruptError(f"{self.path}: offset beyond the log end")

    def maybe_append(self, timestamp_ms: int, offset: int) -> None:
        """Add C{(timestamp_ms, offset)} if C{timestamp_ms} exceeds the last entry's."""
        if self._keys and timestamp_ms <= self._keys[-1]:
            return
        rel = offset - self.base_offset
        self._append_raw(timestamp_ms, rel, _TIME_ENTRY.pack(timestamp_ms, rel))

    def lookup_before(self, timestamp_ms: int) -> int:
        """
        @return: the offset of the last entry whose timestamp is strictly below
            C{timestamp_ms} (no record up to that batch can match), or the base
            offset when there is none.
        """
        i = bisect_left(self._keys, timestamp_ms) - 1
        return self._values[i] + self.base_offset if i >= 0 else self.base_offset

    def lookup_at_or_after(self, timestamp_ms: int) -> tuple[int, int] | None:
        """@return: C{(offset, timestamp_ms)} of the first entry with timestamp C{>= timestamp_ms}, or C{None}."""
        i = bisect_left(self._keys, timestamp_ms)
        if i == len(self._keys):
            return None
        return self._values[i] + self.base_offset, self._keys[i]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is C{>= offset}."""
        rel = offset - self.base_offset
        count = len(self._values)
        while count and self._values[count - 1] >= rel:
            count -= 1
        self._truncate_entries(count)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """C{(timestamp_ms, offset)} of the last entry, or C{None}."""
        if not self._keys:
            return None
        return self._keys[-1], self._values[-1] + self.base_offset
