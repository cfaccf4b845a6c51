"""
The aborted-transaction index of one segment (Kafka's C{TransactionIndex}).

A segment whose batches include the ABORT marker of a transaction has a
C{.txnindex} file next to its C{.log}, one 34-byte entry per aborted
transaction, in the order of the markers (Kafka's C{AbortedTxn})::

    00000000000000368769.txnindex
    +---------+-------------+--------------+-------------+-------------------+
    | version | producer id | first offset | last offset | last stable offset|
    | int16=0 | int64       | int64        | int64       | int64             |
    +---------+-------------+--------------+-------------+-------------------+
      first offset: the transaction's first batch; last offset: its ABORT
      marker; last stable offset: the partition's LSO once the transaction
      completed (the first offset of the oldest transaction still open then,
      or the marker's offset + 1)

A read-committed Fetch collects, from the segment holding its fetch offset
onwards, the entries with C{last_offset >= fetch offset} and C{first_offset <
upper bound}, and stops at an entry whose C{last_stable_offset >= upper bound}
(Kafka's C{TransactionIndex.collectAbortedTxns} and
C{UnifiedLog.collectAbortedTransactions}): the consumer drops those producers'
batches between C{first_offset} and the marker.

The entries are kept in memory too (a segment holds few aborted transactions);
the file is created at the first entry and rebuilt from the log's control
batches on recovery.

Source: Apache Kafka C{org.apache.kafka.storage.internals.log.TransactionIndex},
C{AbortedTxn}; KIP-98.
"""

from __future__ import annotations

import os
import struct
from typing import Iterable, NamedTuple

from kafkatw.errors import KafkaStorageError

__all__ = ["AbortedTxn", "TransactionIndex", "ABORTED_TXN_SIZE"]

_ENTRY = struct.Struct(">hqqqq")
#: Bytes of one entry.
ABORTED_TXN_SIZE = _ENTRY.size
assert ABORTED_TXN_SIZE == 34


class AbortedTxn(NamedTuple):
    """One aborted transaction: Kafka's C{AbortedTxn} (version 0)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class TransactionIndex:
    """
    The C{.txnindex} of one segment.

    @ivar entries: the aborted transactions, in marker order.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._fd = -1

    def __len__(self) -> int:
        return len(self.entries)

    def load(self) -> None:
        """
        Read the file, if any.  A torn last entry (a crash mid-write) is
        dropped; an entry of another version raises.

        @raise KafkaStorageError: unreadable, or an unknown entry version.
        """
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            self.entries = []
            return
        except OSError as e:
            raise KafkaStorageError(f"cannot read {self.path}: {e}") from e
        entries = []
        for position in range(0, len(data) - ABORTED_TXN_SIZE + 1, ABORTED_TXN_SIZE):
            version, *fields = _ENTRY.unpack_from(data, position)
            if version != 0:
                raise KafkaStorageError(f"{self.path}: entry version {version} at byte {position}")
            entries.append(AbortedTxn(*fields))
        self.entries = entries

    def _open(self) -> int:
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as e:
                raise KafkaStorageError(f"cannot open {self.path}: {e}") from e
        return self._fd

    def append(self, entry: AbortedTxn) -> None:
        """
        Add an aborted transaction; its marker must come after the last one's.

        @raise KafkaStorageError: out of order, or the write failed.
        """
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise KafkaStorageError(
                f"{self.path}: aborted transaction ending at {entry.last_offset} after one ending at "
                f"{self.entries[-1].last_offset}")
        try:
            os.write(self._open(), entry.encode())
        except OSError as e:
            raise KafkaStorageError(f"write to {self.path} failed: {e}") from e
        self.entries.append(entry)

    def reset(self, entries: Iterable[AbortedTxn] = ()) -> None:
        """Replace the whole index (recovery); an empty index has no file."""
        self.close()
        self.entries = list(entries)
        if not self.entries:
            self._unlink()
            return
        try:
            with open(self.path, "wb") as f:
                f.write(b"".join(e.encode() for e in self.entries))
        except OSError as e:
            raise KafkaStorageError(f"write to {self.path} failed: {e}") from e

    def truncate_to(self, offset: int) -> None:
        """Drop the transactions whose marker is at or after C{offset} (log truncation)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.reset(kept)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """
        The aborted transactions overlapping C{[fetch_offset, upper_bound_offset)}.

        @return: C{(entries, complete)}; C{complete}: an entry's last stable
            offset reached the upper bound, so later segments need not be read.
        """
        found = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                found.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def flush(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise KafkaStorageError(f"flush of {self.path} failed: {e}") from e

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def delete(self) -> None:
        self.close()
        self._unlink()
        self.entries = []
