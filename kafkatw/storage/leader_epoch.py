"""
The leader epoch cache of one partition (Kafka's C{LeaderEpochFileCache};
KIP-101, KIP-279): which leader epoch wrote which stretch of the log.

Each entry says "leader epoch E wrote its first batch at offset S"; the log
from S up to the next entry's start (or the log end offset) holds batches
whose C{partitionLeaderEpoch} is E.  Epochs and start offsets both increase
strictly from entry to entry::

    offset   0    1    2    3    4    5    6    7    8  (LEO 9)
    epoch   [ 0 ][ 0 ][ 0 ][ 2 ][ 2 ][ 2 ][ 2 ][ 5 ][ 5 ]
             ^              ^                   ^
             (0, 0)         (2, 3)              (5, 7)      <- the entries

A follower that becomes a follower again asks its leader for the end offset of
its own latest epoch (OffsetForLeaderEpoch, L{LeaderEpochCache.end_offset_for})
and truncates there, never at its high watermark alone (KIP-101).

The cache lives in the partition directory as C{leader-epoch-checkpoint},
Kafka's C{LeaderEpochCheckpointFile} format: UTF-8 text, one item a line::

    0          <- format version, always 0
    3          <- number of entries
    0 0        <- leader_epoch (int32) start_offset (int64), ascending
    2 3
    5 7

Every change is written at once and atomically (temporary file
C{leader-epoch-checkpoint.tmp}, rename), so a crash of the process leaves
either the old or the new file.  An assignment is made durable (C{fsync} of
the file and of the directory, L{LeaderEpochCache.sync}) before the log's
recovery point can pass it: L{kafkatw.storage.log.PartitionLog.flush} syncs
the cache before it syncs the segments.  Until then, a crash of the machine
may bring back an older file, which lacks only entries for batches past the
recovery point; the next start, unclean, completes the cache from the
headers of exactly those batches (L{kafkatw.storage.log_loader.LogLoader.load_leader_epochs},
as Kafka's C{LogSegment.recover} assigns the epochs of the batches it
recovers).  An entry with no batch yet (an epoch assigned at the log end
offset by a new leader) that such a crash loses is one the start would have
cut anyway.  Kafka fsyncs every assignment at once; here a broker that
becomes leader of thousands of partitions in a controller failover writes
their checkpoints without waiting for the disk, two C{fsync}s each.  A
truncation is written without C{fsync} either (as Kafka since KAFKA-15046):
entries it removed that a crash of the machine brings back are removed
again by the next start's truncation to the log.  The truncations of a start (L{LeaderEpochCache.truncate_from_end}
and C{truncate_from_start} with C{write=False}) are not written at all: the
next change writes them, and until then the next start redoes them; so a
restart whose leaders come back at the same epoch writes nothing.  Nothing is
written when the entries are those of the file already.  A missing, empty or
malformed file (bad version, wrong count, an unparsable line, entries not
strictly ascending) is reported by L{LeaderEpochCache.needs_rebuild}; the
L{kafkatw.storage.log.PartitionLog} then rebuilds the cache from the
C{partitionLeaderEpoch} of its batch headers.

No I/O happens here but the checkpoint file's; no reactor.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from typing import Iterable, NamedTuple

from twisted.logger import Logger

from kafkatw.errors import KafkaStorageError
from kafkatw.storage.files import sync_file, write_atomically

__all__ = [
    "EpochEntry",
    "LeaderEpochCache",
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "offset_truncation_state",
]

_log = Logger()

#: The checkpoint's file name in the partition directory (Kafka's).
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
#: Kafka's C{OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH}: no epoch.
UNDEFINED_EPOCH = -1
#: Kafka's C{OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET}: no offset.
UNDEFINED_EPOCH_OFFSET = -1
_CURRENT_VERSION = 0


class EpochEntry(NamedTuple):
    """Leader epoch C{epoch} wrote its first batch at offset C{start_offset}."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """
    The entries of one partition's C{leader-epoch-checkpoint}, in memory and
    on disk.

    @param path: the checkpoint file; C{None} keeps the cache in memory only.
    @ivar needs_rebuild: the file was missing, empty or malformed when the
        cache was opened: the cache starts empty and the owner must rebuild it
        from the log (L{assign_all}), which also writes the file.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._starts: list[int] = []
        #: the entries in the file (as read or last written); C{None}: unknown (missing or malformed)
        self._in_file: tuple[tuple[int, int], ...] | None = None
        self.needs_rebuild = False
        #: the file holds assignments not yet fsynced (L{sync})
        self.unsynced = False
        #: held while the file is written or synced (L{sync} may run on another thread)
        self._sync_lock = threading.Lock()
        if path is not None:
            entries = self._read(path)
            if entries is None:
                self.needs_rebuild = True
            else:
                for epoch, start in entries:
                    self._epochs.append(epoch)
                    self._starts.append(start)
                self._in_file = tuple(zip(self._epochs, self._starts))

    def __repr__(self) -> str:
        return f"<LeaderEpochCache {self.entries}>"

    # -- the file -------------------------------------------------------------

    @staticmethod
    def _read(path: str) -> list[EpochEntry] | None:
        """The file's entries, or C{None} when missing, empty or malformed."""
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            _log.warn("cannot read {path}: {error}; rebuilding it from the log", path=path, error=str(e))
            return None
        if not lines:
            return None
        try:
            if int(lines[0]) != _CURRENT_VERSION:
                raise ValueError(f"unsupported version {lines[0]!r}")
            count = int(lines[1])
            body = [line for line in lines[2:] if line.strip()]
            if len(body) != count:
                raise ValueError(f"{count} entries announced, {len(body)} found")
            entries = []
            for line in body:
                epoch_text, start_text = line.split()
                entry = EpochEntry(int(epoch_text), int(start_text))
                if entry.epoch < 0 or entry.start_offset < 0:
                    raise ValueError(f"negative entry {line!r}")
                if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset <= entries[-1].start_offset):
                    raise ValueError(f"entry {line!r} does not follow {entries[-1]}")
                entries.append(entry)
        except (IndexError, ValueError) as e:
            _log.warn("malformed {path}: {error}; rebuilding it from the log", path=path, error=str(e))
            return None
        return entries

    def _write(self, sync: bool = True, assigned: bool = False) -> None:
        """
        Write the checkpoint atomically (temporary file, rename; with C{sync}
        an C{fsync} of the file and of the directory), unless the file holds
        these entries already.  With C{assigned} (an assignment written
        without C{sync}) the file is L{unsynced} until L{sync}.
        """
        path = self.path
        if path is None:
            return
        entries = tuple(zip(self._epochs, self._starts))
        if entries == self._in_file:
            return
        lines = [str(_CURRENT_VERSION), str(len(entries))]
        lines.extend(f"{epoch} {start}" for epoch, start in entries)
        with self._sync_lock:
            try:
                write_atomically(path, ("\n".join(lines) + "\n").encode("utf-8"), fsync=sync)
            except OSError as e:
                raise KafkaStorageError(f"cannot write {path}: {e}") from e
            self._in_file = entries
            if sync:
                self.unsynced = False
            elif assigned:
                self.unsynced = True

    def sync(self) -> None:
        """
        Make the assignments written since the last sync durable (C{fsync}
        of the file and of its directory); nothing when there are none.  The
        log calls it before its recovery point moves (see the module's
        docstring), and the broker's background job (L{kafkatw.storage.log_manager.LogManager.leader_epoch_syncs})
        on a pool thread: a write and a sync of the same cache take turns, so
        that an assignment written during a sync stays unsynced.  A file
        whose directory was deleted meanwhile needs none.

        @raise KafkaStorageError: the sync failed.
        """
        if not self.unsynced or self.path is None:
            return
        with self._sync_lock:
            if not self.unsynced:
                return  # another thread synced it meanwhile
            try:
                sync_file(self.path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise KafkaStorageError(f"cannot sync {self.path}: {e}") from e
            self.unsynced = False

    # -- reading --------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        """Every entry, oldest first (a copy)."""
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts)]

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, L{UNDEFINED_EPOCH} (-1) when the cache is empty."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._starts[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._starts[0]) if self._epochs else None

    def __len__(self) -> int:
        return len(self._epochs)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """
        The end of C{requested_epoch} in this log, as Kafka's
        C{LeaderEpochFileCache.endOffsetFor} answers OffsetForLeaderEpoch
        (KIP-101, with KIP-279's epoch in the answer):

          - C{requested_epoch} is L{UNDEFINED_EPOCH}, or the cache is empty,
            or the epoch is newer than every entry: C{(-1, -1)}
            (L{UNDEFINED_EPOCH}, L{UNDEFINED_EPOCH_OFFSET});
          - it is the latest epoch: C{(latest epoch, log_end_offset)};
          - otherwise C{(E, S)}: E is the largest epoch C{<= requested_epoch}
            and S the start offset of the first epoch after it; when no entry
            is C{<= requested_epoch} (older than the cache), E is
            C{requested_epoch} itself and S the first entry's start offset.

        @param log_end_offset: the log's LEO, the end of the latest epoch.
        @return: C{(epoch, end_offset)}; the end offset is exclusive.
        """
        epochs = self._epochs
        if requested_epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """
        The epoch that wrote C{offset} (Kafka's C{epochForOffset}): that of
        the last entry starting at or before it; L{UNDEFINED_EPOCH} when
        C{offset} is before the first entry or the cache is empty.
        """
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    # -- changes ----------------------------------------------------------------

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        epochs, starts = self._epochs, self._starts
        if epochs and epoch == epochs[-1] and start_offset >= starts[-1]:
            return False  # the epoch is already known to start there or before
        # Keep both columns strictly ascending: the new entry wins over every
        # later entry that conflicts with it (an epoch not older, or a start
        # offset not smaller), as Kafka's maybeTruncateNonMonotonicEntries.
        removed = []
        while epochs and (epochs[-1] >= epoch or starts[-1] >= start_offset):
            removed.append(EpochEntry(epochs.pop(), starts.pop()))
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            _log.warn("leader epoch entry ({epoch}, {start}) removed the conflicting entries {removed} of {path}",
                      epoch=epoch, start=start_offset, removed=removed[::-1], path=self.path)
        epochs.append(epoch)
        starts.append(start_offset)
        return True

    def assign(self, epoch: int, start_offset: int) -> bool:
        """
        Record that leader epoch C{epoch} starts at C{start_offset}, and write
        the file (without C{fsync}: L{sync}) if that changed anything (Kafka's
        C{assign}).

          - the latest epoch again, at or after its start: nothing changes (an
            epoch's start offset, once assigned, stays);
          - otherwise the entry is added, after removing every entry from the
            end whose epoch is C{>= epoch} or whose start offset is
            C{>= start_offset}: the latest assignment wins, so both columns
            stay strictly ascending.  In the normal case (a newer epoch at the
            log end offset) nothing is removed.

        Callers assign only epochs newer than L{latest_epoch}.

        @param epoch: a leader epoch, C{>= 0}.
        @param start_offset: the offset of its first batch, C{>= 0}.
        @return: whether the cache changed.
        @raise ValueError: a negative epoch or start offset.
        @raise KafkaStorageError: the file could not be written.
        """
        changed = self._assign(epoch, start_offset)
        if changed:
            self._write(sync=False, assigned=True)
        return changed

    def assign_all(self, entries: Iterable[tuple[int, int]]) -> bool:
        """
        L{assign} each C{(epoch, start_offset)} in order and write the file
        once; with L{needs_rebuild} set, the file is written even when
        nothing changed (an empty cache is then known to be right).

        @return: whether the cache changed.
        """
        changed = False
        for epoch, start_offset in entries:
            changed = self._assign(epoch, start_offset) or changed
        if changed or self.needs_rebuild:
            self._write(sync=False, assigned=True)
            self.needs_rebuild = False
        return changed

    def truncate_from_end(self, end_offset: int, write: bool = True) -> bool:
        """
        Remove every entry whose start offset is C{>= end_offset} (the log
        was truncated to C{end_offset}; Kafka's C{truncateFromEnd}).  A
        negative C{end_offset} (L{UNDEFINED_EPOCH_OFFSET}) changes nothing.
        The file is written without C{fsync}; with C{write=False} (a start
        cutting the cache to the loaded log) not at all, until the next change.

        @return: whether the cache changed.
        """
        epochs, starts = self._epochs, self._starts
        if end_offset < 0 or not starts or starts[-1] < end_offset:
            return False
        keep = bisect_left(starts, end_offset)
        del epochs[keep:], starts[keep:]
        if write:
            self._write(sync=False)
        return True

    def truncate_from_start(self, start_offset: int, write: bool = True) -> bool:
        """
        The log now starts at C{start_offset} (retention, a new log start
        offset; Kafka's C{truncateFromStart}): the entries starting at or
        before it are replaced by one entry, that of the last of them, moved
        up to C{start_offset}.  Entries starting after it stay; a
        C{start_offset} before the first entry changes nothing.  Written as
        L{truncate_from_end} writes.

        @return: whether the cache changed.
        """
        epochs, starts = self._epochs, self._starts
        covered = bisect_right(starts, start_offset)
        if covered == 0 or (covered == 1 and starts[0] == start_offset):
            return False
        epoch = epochs[covered - 1]
        del epochs[:covered], starts[:covered]
        epochs.insert(0, epoch)
        starts.insert(0, start_offset)
        if write:
            self._write(sync=False)
        return True

    def clear(self) -> None:
        """Remove every entry and write the (empty) file (Kafka's C{clearAndFlush})."""
        self._epochs.clear()
        self._starts.clear()
        self._in_file = None  # written even when the file was empty already
        self._write()
        self.needs_rebuild = False


def offset_truncation_state(
    cache: LeaderEpochCache,
    log_end_offset: int,
    leader_epoch: int,
    leader_end_offset: int,
    fetch_offset: int,
) -> tuple[int, bool]:
    """
    Where a follower truncates its log given its leader's OffsetForLeaderEpoch
    answer for the follower's latest epoch (Kafka's
    C{AbstractFetcherThread.getOffsetTruncationState}; KIP-101, KIP-279):

      - the leader knows no end offset (C{leader_end_offset == -1}): truncate
        at C{fetch_offset} (the follower's high watermark), the pre-KIP-101
        rule, and stop;
      - the leader answered without an epoch (C{leader_epoch == -1}): truncate
        at C{min(leader_end_offset, log_end_offset)} and stop;
      - the follower's own answer for C{leader_epoch}
        (L{LeaderEpochCache.end_offset_for}) names the same epoch: truncate
        at the smaller of both ends of that epoch (and of the LEO), and stop;
      - it names an older epoch (the follower never saw C{leader_epoch}: a
        different epoch history): truncate at the follower's end of that
        older epoch, and ask again with the follower's new latest epoch
        (KIP-279's fix for fast leader fail-over);
      - the follower has no answer (no epochs at all: a log from before
        epochs): truncate at C{min(leader_end_offset, log_end_offset)} and
        stop.

    @param cache: the follower's epoch cache.
    @param log_end_offset: the follower's LEO.
    @param leader_epoch: the epoch of the leader's answer.
    @param leader_end_offset: the end offset of the leader's answer.
    @param fetch_offset: the follower's fallback (its high watermark).
    @return: C{(truncation_offset, completed)}: with C{completed} false the
        follower truncates there and sends another OffsetForLeaderEpoch.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return fetch_offset, True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end_offset, log_end_offset), True
    follower_epoch, follower_end_offset = cache.end_offset_for(leader_epoch, log_end_offset)
    if follower_end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(leader_end_offset, log_end_offset), True
    if follower_epoch != leader_epoch:
        return min(follower_end_offset, log_end_offset), False
    return min(follower_end_offset, leader_end_offset, log_end_offset), True
