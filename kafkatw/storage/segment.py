"""
One log segment: a C{.log} file of whole record batches plus its indexes.

Files of a segment whose first offset is 368769 (20 digits, "so that ls sorts
the files numerically", as Kafka's C{LogFileUtils})::

    00000000000000368769.log        RecordBatch v2, exactly as on the wire
    00000000000000368769.index      see L{kafkatw.storage.index.OffsetIndex}
    00000000000000368769.timeindex  see L{kafkatw.storage.index.TimeIndex}
    00000000000000368769.txnindex   aborted transactions, if any: see
                                    L{kafkatw.storage.transaction_index}

The C{.log} is a plain concatenation of batches::

    [batch 368769..368772][batch 368773..368773][batch 368774..368900] ...
     ^ position 0          ^ position p1         ^ position p2

Reads never copy data: they return a L{FileRegion} (file descriptor, position,
length) which the broker sends with C{os.sendfile}.  Positioning reads only
batch headers (C{os.pread} of 61 bytes), starting at the offset-index floor.
"""

from __future__ import annotations

import os
import struct
from typing import Callable, Iterator, NamedTuple

from twisted.logger import Logger

from kafkatw.errors import KafkaStorageError
from kafkatw.protocol.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    scan_valid_prefix,
    unpack_header,
)
from kafkatw.storage.index import IndexCorruptError, OffsetIndex, TimeIndex
from kafkatw.storage.log_dir_failure import OS_FILES, LogDirFiles
from kafkatw.storage.transaction_index import TransactionIndex

__all__ = ["FileRegion", "LogSegment", "segment_file_name", "CLEANED_SUFFIX", "SWAP_SUFFIX", "DELETED_SUFFIX",
           "PRODUCER_SNAPSHOT_SUFFIX"]

_log = Logger()

_RECOVERY_CHUNK_BYTES = 4 * 1024 * 1024
_LENGTH = struct.Struct(">i")
_INT32_MAX = 2**31 - 1


class FileRegion(NamedTuple):
    """
    A byte range of an open segment file, to be sent with C{os.sendfile}.

    The descriptor stays open until the segment is closed; a segment deleted by
    retention is unlinked at once but its descriptor is only closed later
    (C{PartitionLog}'s delete delay), so in-flight regions stay readable.
    """

    fileno: int
    path: str
    position: int
    length: int


def segment_file_name(base_offset: int, suffix: str) -> str:
    """C{00000000000000000042.log} for C{(42, ".log")}."""
    return f"{base_offset:020d}{suffix}"


#: Suffixes of the log cleaner's files (Kafka's C{LogFileUtils}): a cleaned
#: segment being written, one ready to replace the old ones, an old one
#: replaced (its descriptor still open for in-flight reads).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
#: The producer state written at a clean shutdown, C{<20-digit LEO>.snapshot}
#: (L{kafkatw.storage.producer_state}; Kafka's C{LogFileUtils}).
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"


#: iovecs per writev call (Linux's IOV_MAX is 1024).
_IOV_MAX = 1024
#: Buffers up to this size (bytes) appended with C{write=False} are copied into the pending bytearray.
_COPY_MAX = 16384


class LogSegment:
    """
    A segment of a partition log.

    @ivar next_offset: one past the last offset stored (the segment's log end).
    @ivar size_bytes: bytes in the C{.log}.
    @ivar largest_timestamp_ms: largest batch max timestamp seen, -1 if none.
    @ivar created_ms: time the segment was rolled (ms), for C{segment.ms}.
    @param files: the file operations of the log directory the C{.log}
        goes through (open, write, fsync, truncate; faults are injected there:
        L{kafkatw.storage.log_dir_failure.LogDirFiles}).
    """

    def __init__(
        self,
        directory: str,
        base_offset: int,
        index_interval_bytes: int = 4096,
        max_index_bytes: int = 10 * 1024 * 1024,
        created_ms: int = 0,
        files: LogDirFiles = OS_FILES,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.path = os.path.join(directory, segment_file_name(base_offset, ".log"))
        self._files = files
        self._fd = -1
        try:
            self._fd = files.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self.size_bytes = os.fstat(self._fd).st_size
            self._indexes_existed = all(
                os.path.exists(os.path.join(directory, segment_file_name(base_offset, suffix)))
                for suffix in (".index", ".timeindex"))
            self.offset_index = OffsetIndex(os.path.join(directory, segment_file_name(base_offset, ".index")),
                                            base_offset, max_index_bytes)
            self.time_index = TimeIndex(os.path.join(directory, segment_file_name(base_offset, ".timeindex")),
                                        base_offset, max_index_bytes)
            #: the aborted transactions whose ABORT marker is in this segment
            self.txn_index = TransactionIndex(os.path.join(directory, segment_file_name(base_offset, ".txnindex")))
        except OSError as e:
            if self._fd >= 0:  # an index could not be created: the .log's descriptor does not leak
                os.close(self._fd)
                self._fd = -1
            raise KafkaStorageError(f"cannot open segment {self.path}: {e}") from e
        self.next_offset = base_offset
        self.largest_timestamp_ms = -1
        self.created_ms = created_ms
        self._bytes_since_index = 0
        #: batches scanned with CRC checks by L{recover} (for tests and metrics)
        self.recovered_batches = 0
        #: buffers appended with C{write=False}, not in the file yet (L{write_pending}):
        #: large ones as they came, small ones copied into the bytearray after them
        self._pending: list = []
        self._pending_tail = bytearray()
        self._pending_bytes = 0
        self._pending_first_offset = base_offset

    # -- properties ---------------------------------------------------------

    @property
    def fileno(self) -> int:
        return self._fd

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    @property
    def index_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def __repr__(self) -> str:
        return f"<LogSegment {self.path} [{self.base_offset}, {self.next_offset}) {self.size_bytes} bytes>"

    # -- loading ------------------------------------------------------------

    def load(self) -> None:
        """
        Open an existing segment trusting its C{.log}: load the indexes (rebuilt
        by L{recover} when missing or failing their sanity check), then scan the
        headers after the last index entry to find the next offset.  Falls back
        to L{recover} when that tail is not made of whole batches.
        """
        try:
            self.offset_index.load()
            self.time_index.load()
            self.offset_index.sanity_check(self.size_bytes)
            self.time_index.sanity_check()
            if self.size_bytes and not self._indexes_existed:
                raise IndexCorruptError(f"index files of {self.path} are missing")
        except IndexCorruptError as e:
            _log.warn("rebuilding indexes of {segment}: {reason}", segment=self.path, reason=str(e))
            self.recover()
            return
        _, position = self.offset_index.last_entry
        self.next_offset = self.base_offset
        last_ts = self.time_index.last_entry
        self.largest_timestamp_ms = last_ts[0] if last_ts else -1
        end = position
        first = True
        for header in self.iter_headers(position):
            if first and position == 0:
                self._set_created_from(header)
            first = False
            self.next_offset = header.next_offset
            if header.max_timestamp > self.largest_timestamp_ms:
                self.largest_timestamp_ms = header.max_timestamp
            end = header.end_position
        if end != self.size_bytes:
            _log.warn("segment {segment} has a bad tail at {position}: recovering", segment=self.path, position=end)
            self.recover()
            return
        if position != 0 and self.size_bytes:
            first_header = self.read_header(0)
            if first_header is not None:
                self._set_created_from(first_header)
        self._bytes_since_index = self.size_bytes - position

    def _set_created_from(self, header: BatchHeader) -> None:
        # Kafka's rollingBasedTimestamp: the first batch's max timestamp
        if header.max_timestamp > 0:
            self.created_ms = header.max_timestamp

    def recover(self) -> int:
        """
        Re-scan the whole C{.log} checking every batch's CRC, truncate it at the
        first invalid batch, and rebuild both indexes.

        @return: the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.largest_timestamp_ms = -1
        self._bytes_since_index = 0
        file_size = os.fstat(self._fd).st_size
        pos = 0
        while pos < file_size:
            buf = os.pread(self._fd, min(_RECOVERY_CHUNK_BYTES, file_size - pos), pos)
            at_eof = pos + len(buf) >= file_size
            headers, end = scan_valid_prefix(buf)
            self._index_batches(headers, pos)
            pos += end
            if end == len(buf):
                continue
            if at_eof:
                break  # torn or invalid batch at the tail: truncate here
            if end > 0:
                continue  # re-read from the stopping batch: it may be cut by the chunk
            # the first batch of this chunk is invalid or larger than the chunk
            if len(buf) < LOG_OVERHEAD:
                break
            (length,) = _LENGTH.unpack_from(buf, 8)
            need = length + LOG_OVERHEAD
            if length < MIN_BATCH_LENGTH or need <= len(buf) or pos + need > file_size:
                break
            headers, end = scan_valid_prefix(os.pread(self._fd, need, pos))
            if not headers:
                break
            self._index_batches(headers, pos)
            pos += end
        truncated = file_size - pos
        if truncated:
            _log.warn("truncating {segment} at {position}: {count} invalid bytes",
                      segment=self.path, position=pos, count=truncated)
            os.ftruncate(self._fd, pos)
        self.size_bytes = pos
        return truncated

    def _index_batches(self, headers: list[BatchHeader], shift: int) -> None:
        if not headers:
            return
        if shift == 0 and headers[0].position == 0:
            self._set_created_from(headers[0])
        interval = self.index_interval_bytes
        since = self._bytes_since_index
        largest = self.largest_timestamp_ms
        offset_append = self.offset_index.append
        time_append = self.time_index.maybe_append
        for h in headers:
            if since >= interval:
                offset_append(h.base_offset, h.position + shift)
                since = 0
            since += h.size
            if h.max_timestamp > largest:
                largest = h.max_timestamp
                time_append(largest, h.base_offset)
        self._bytes_since_index = since
        self.largest_timestamp_ms = largest
        self.next_offset = headers[-1].next_offset
        self.recovered_batches += len(headers)

    # -- header access ------------------------------------------------------

    def read_header(self, position: int) -> BatchHeader | None:
        """The header of the batch at C{position}, or C{None} at or past the end."""
        if self._pending_bytes:
            self.write_pending()
        if position + BATCH_HEADER_SIZE > self.size_bytes:
            return None
        data = os.pread(self._fd, BATCH_HEADER_SIZE, position)
        if len(data) < BATCH_HEADER_SIZE:
            return None
        return unpack_header(data, 0)._replace(position=position)

    def iter_headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """
        Batch headers from C{position} to the end, one C{pread} each, no CRC
        check; stops at the first header that is not a plausible whole batch.
        """
        if self._pending_bytes:
            self.write_pending()
        size = os.fstat(self._fd).st_size
        fd = self._fd
        while position + BATCH_HEADER_SIZE <= size:
            data = os.pread(fd, BATCH_HEADER_SIZE, position)
            if len(data) < BATCH_HEADER_SIZE:
                return
            h = unpack_header(data, 0)
            if h.size < BATCH_HEADER_SIZE or h.magic != 2 or h.last_offset_delta < 0 or position + h.size > size:
                return
            yield h._replace(position=position)
            position += h.size

    def _find_batch(self, offset: int) -> BatchHeader | None:
        """The header of the first batch whose last offset is C{>= offset}."""
        if self._pending_bytes:
            self.write_pending()
        _, position = self.offset_index.lookup(offset)
        fd = self._fd
        size = self.size_bytes
        while position + BATCH_HEADER_SIZE <= size:
            data = os.pread(fd, BATCH_HEADER_SIZE, position)
            h = unpack_header(data, 0)
            if h.base_offset + h.last_offset_delta >= offset:
                return h._replace(position=position)
            position += h.size
        return None

    def position_of(self, offset: int) -> int:
        """
        Position of the batch containing C{offset} (or the first batch after
        it); C{size_bytes} when C{offset >= next_offset}.
        """
        if offset >= self.next_offset:
            return self.size_bytes
        h = self._find_batch(offset)
        return self.size_bytes if h is None else h.position

    # -- append / read ------------------------------------------------------

    def append(self, buf: bytes | bytearray | list, headers: list[BatchHeader], size_bytes: int | None = None,
               write: bool = True) -> None:
        """
        Append whole batches with one C{os.write} (or C{os.writev} of a list
        of buffers, C{size_bytes} long in all).  Offsets in C{headers} are the
        patched ones; positions are relative to the start of the data.

        With C{write=False} the buffers (a list) are kept in memory and only
        the segment's bookkeeping moves (size, next offset, indexes): the
        caller writes them, with those of the appends after it, in one
        C{os.writev} by L{write_pending} before anything reads the file
        (every read of this segment writes them first).

        @raise KafkaStorageError: the write failed.
        """
        position = self.size_bytes
        if not write:
            if not self._pending_bytes:
                self._pending_first_offset = headers[0].base_offset
            total = size_bytes if size_bytes is not None else sum(len(b) for b in buf)
            # Small buffers are copied into one bytearray: nothing of the request stays referenced
            # (no memoryview kept alive for the garbage collector to scan) and the write takes one iovec.
            tail = self._pending_tail
            for piece in buf:
                if len(piece) <= _COPY_MAX:
                    tail += piece
                else:
                    if tail:
                        self._pending.append(tail)
                        tail = self._pending_tail = bytearray()
                    self._pending.append(piece)
            self._pending_bytes += total
        else:
            if self._pending_bytes:
                self.write_pending()
            try:
                if isinstance(buf, list):
                    total = size_bytes if size_bytes is not None else sum(len(b) for b in buf)
                    self._writev(buf, total)
                else:
                    total = len(buf)
                    view = memoryview(buf)
                    write = self._files.write
                    written = write(self._fd, view)
                    while written < total:
                        written += write(self._fd, view[written:])
            except OSError as e:
                raise KafkaStorageError(f"write to {self.path} failed: {e}") from e
        interval = self.index_interval_bytes
        since = self._bytes_since_index
        largest = self.largest_timestamp_ms
        for h in headers:
            if since >= interval:
                self.offset_index.append(h.base_offset, position + h.position)
                since = 0
            since += h.size
            if h.max_timestamp > largest:
                largest = h.max_timestamp
                self.time_index.maybe_append(largest, h.base_offset)
        self._bytes_since_index = since
        self.largest_timestamp_ms = largest
        self.size_bytes = position + total
        last = headers[-1]
        self.next_offset = last.base_offset + last.last_offset_delta + 1

    def _writev(self, buffers: list, total: int) -> None:
        """Write C{buffers} (C{total} bytes) in order, C{_IOV_MAX} at a time, finishing short writes."""
        fd = self._fd
        files = self._files
        if len(buffers) <= _IOV_MAX:
            groups = [(buffers, total)]
        else:
            groups = [(g, sum(len(b) for b in g))
                      for g in (buffers[i:i + _IOV_MAX] for i in range(0, len(buffers), _IOV_MAX))]
        for group, wanted in groups:
            written = files.writev(fd, group)
            if written < wanted:  # a short write: finish this group, joined
                rest = memoryview(b"".join(group))[written:]
                while rest:
                    rest = rest[files.write(fd, rest):]

    @property
    def has_pending(self) -> bool:
        """Whether batches appended with C{write=False} are not in the file yet."""
        return bool(self._pending_bytes)

    @property
    def pending_first_offset(self) -> int:
        """The base offset of the first batch not in the file yet (L{next_offset} when none)."""
        return self._pending_first_offset if self._pending_bytes else self.next_offset

    def write_pending(self) -> None:
        """
        Write the batches appended with C{write=False}, in one C{os.writev}
        (C{_IOV_MAX} buffers per call).  On failure the file is cut back to
        where they began and they are dropped; the segment's bookkeeping
        still counts them, and the log truncates it
        (L{kafkatw.storage.log.PartitionLog.write_pending}).

        @raise KafkaStorageError: the write failed.
        """
        if not self._pending_bytes:
            return
        pending = self._pending
        if self._pending_tail:
            pending.append(self._pending_tail)
        total = self._pending_bytes
        self._pending = []
        self._pending_tail = bytearray()
        self._pending_bytes = 0
        try:
            self._writev(pending, total)
        except OSError as e:
            start = self.size_bytes - total
            try:
                self._files.ftruncate(self._fd, start)
            except OSError:
                pass
            self.size_bytes = start
            raise KafkaStorageError(f"write to {self.path} failed: {e}") from e

    def read(
        self, start_offset: int, max_bytes: int, max_position: int | None = None, min_one_batch: bool = True
    ) -> FileRegion | None:
        """
        The region of whole batches starting with the batch that contains
        C{start_offset}, at most C{max_bytes} long, ending at or before
        C{max_position}.  With C{min_one_batch} the first batch is returned
        even when larger than C{max_bytes} (KIP-74).

        @return: a L{FileRegion}; an empty one (C{length} 0, at the batch's
            position) when that first batch does not fit in C{max_bytes} and
            C{min_one_batch} is false, which ends the read there (as Kafka's
            C{LogSegment.read} answers an empty C{FetchDataInfo}); C{None}
            only when this segment holds no batch at or after C{start_offset}
            below C{max_position}, so the next segment may be read.
        """
        if self._pending_bytes:
            self.write_pending()
        if start_offset >= self.next_offset:
            return None
        first = self._find_batch(start_offset)
        if first is None:
            return None
        start = first.position
        limit = self.size_bytes if max_position is None else min(max_position, self.size_bytes)
        if start >= limit:
            return None
        want_end = start + max_bytes
        if want_end >= limit:
            end = limit
        else:
            pos = max(start, self.offset_index.floor_position(want_end))
            fd = self._fd
            while pos + LOG_OVERHEAD <= want_end:
                (length,) = _LENGTH.unpack(os.pread(fd, 4, pos + 8))
                if pos + length + LOG_OVERHEAD > want_end:
                    break
                pos += length + LOG_OVERHEAD
            end = pos
            if end == start:
                if not min_one_batch:
                    return FileRegion(self._fd, self.path, start, 0)
                end = min(start + first.size, limit)
        return FileRegion(self._fd, self.path, start, end - start)

    def find_offset_by_timestamp(self, timestamp_ms: int, starting_offset: int = 0) -> tuple[int, int] | None:
        """
        The first record at or after C{starting_offset} whose timestamp is
        C{>= timestamp_ms} (ListOffsets): the time index and batch headers
        find its batch, and that batch is decoded (decompressed if need be)
        to find the record, as Kafka's C{LogSegment.findOffsetByTimestamp}
        does.  A batch whose largest timestamp matches but none of whose
        records at or after C{starting_offset} does (it straddles the log
        start offset; a compacted batch) does not end the search: the next
        batch is looked at.

        @param starting_offset: the log start offset (records below it are
            deleted, even inside this segment).
        @return: C{(offset, timestamp_ms)} of that record, or C{None}.
        """
        if self.largest_timestamp_ms < timestamp_ms or starting_offset >= self.next_offset:
            return None
        offset = max(self.time_index.lookup_before(timestamp_ms), starting_offset)
        _, position = self.offset_index.lookup(offset)
        for h in self.iter_headers(position):
            if h.max_timestamp < timestamp_ms or h.next_offset <= starting_offset or h.record_count == 0:
                continue
            whole = h.base_offset >= starting_offset and h.record_count == h.last_offset_delta + 1
            if h.timestamp_type == 1 and whole:  # LogAppendTime: every record has the batch's time
                return h.base_offset, h.max_timestamp
            if h.base_timestamp >= timestamp_ms and whole:  # the first record's time
                return h.base_offset, h.base_timestamp
            from kafkatw.protocol.records import decode_batches

            [batch] = decode_batches(os.pread(self._fd, h.size, h.position), verify_crc=False)
            for record in batch.records:
                time = h.max_timestamp if h.timestamp_type == 1 else record.timestamp_ms
                if time >= timestamp_ms and record.offset >= starting_offset:
                    return record.offset, time
        # (the time index is no answer: its entries name batches the scan above looked at, and
        # may name one without records, an empty batch the log cleaner kept for its offsets)
        return None

    def relative_offset_fits(self, offset: int) -> bool:
        return offset - self.base_offset <= _INT32_MAX

    # -- maintenance --------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """
        Remove every batch whose last offset is C{>= offset}.

        @return: bytes removed.
        """
        if self._pending_bytes:
            self.write_pending()
        if offset >= self.next_offset:
            return 0
        if offset <= self.base_offset:
            position, cut = 0, self.base_offset
        else:
            first = self._find_batch(offset)
            # the indexes lose the entries of every batch removed: from the base offset of the first
            # one, which lies below C{offset} when C{offset} is inside that batch (this index keys a
            # batch by its base offset, Kafka's by its last)
            position, cut = (self.size_bytes, offset) if first is None else (
                first.position, min(offset, first.base_offset))
        removed = self.size_bytes - position
        self._files.ftruncate(self._fd, position)
        self.size_bytes = position
        self.offset_index.truncate_to(cut)
        self.txn_index.truncate_to(cut)
        self.time_index.truncate_to(cut)
        # recompute next offset and largest timestamp from the index tail
        _, index_position = self.offset_index.last_entry
        last_ts = self.time_index.last_entry
        self.largest_timestamp_ms = last_ts[0] if last_ts else -1
        self.next_offset = self.base_offset
        since = 0
        for h in self.iter_headers(index_position):
            self.next_offset = h.next_offset
            since = h.end_position - index_position
            if h.max_timestamp > self.largest_timestamp_ms:
                self.largest_timestamp_ms = h.max_timestamp
        self._bytes_since_index = since
        return removed

    def flush(self) -> None:
        """C{fsync} the log and both indexes."""
        if self._pending_bytes:
            self.write_pending()
        try:
            self._files.fsync(self._fd)
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.path} failed: {e}") from e

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.close_log()

    def close_log(self) -> None:
        if self._pending_bytes:
            self.write_pending()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close_handlers(self) -> None:
        """
        Close the segment's files without writing anything: batches not
        written yet and index entries not flushed are dropped (its log
        directory failed; Kafka's C{LogSegment.closeHandlers}).  Errors are
        ignored.
        """
        self._pending = []
        self._pending_tail = bytearray()
        self._pending_bytes = 0
        for index in (self.offset_index, self.time_index):
            index.close_handler()
        try:
            self.txn_index.close()
        except OSError:
            pass
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1

    def delete(self, close_log: bool = True) -> None:
        """
        Unlink the segment's files.  With C{close_log=False} the C{.log}
        descriptor stays open (for regions being sent); call L{close_log} later.
        """
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        if close_log:
            self.close_log()


SegmentFactory = Callable[[int], LogSegment]
