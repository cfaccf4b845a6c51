"""
Loading the log of one partition when it is opened (Kafka's C{LogLoader}).

    <log dir>/<topic>-<partition>/
        00000000000000000000.log  .index  .timeindex  (.txnindex)   trusted, or recovered
        00000000000000368769.log  .index  .timeindex                (see L{kafkatw.storage.segment})
        00000000000000368769.log.swap     a log cleaner's swap cut short: completed
        00000000000000368769.log.cleaned  (or .deleted, .index.swap, ...): removed or completed
        00000000000000737337.snapshot     the producer state of a clean shutdown
        leader-epoch-checkpoint           see L{kafkatw.storage.leader_epoch}

L{LogLoader.load}, in order:

  1. a log cleaner's segment swap that a crash cut short is completed or
     undone (C{.cleaned}, C{.swap}, C{.deleted} files, docs/storage.md "Log
     compaction"), and index files without their C{.log} are removed;
  2. each segment is opened: after a clean shutdown, or wholly below the
     recovery point, it is trusted (its indexes are checked, not its
     batches); otherwise it is recovered (L{LogSegment.recover}: every batch's
     CRC checked and a torn tail truncated), and the segments after a
     truncated one, or after a gap a crash left in a delete-policy log, are
     deleted;
  3. the producer state comes from the snapshot of a clean shutdown, or is
     rebuilt from every batch header (L{rebuild_producer_state}, Kafka's
     C{UnifiedLog.rebuildProducerState}), the C{.txnindex} files with it.

L{LogLoader.load_leader_epochs} then makes the leader epoch cache agree with
the loaded log (KIP-101).  L{kafkatw.storage.log.PartitionLog} runs both when
it is constructed.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from twisted.logger import Logger

from kafkatw.errors import InvalidRecordError
from kafkatw.protocol.batch import BATCH_HEADER_SIZE, unpack_header
from kafkatw.protocol.control import read_marker
from kafkatw.storage.leader_epoch import LeaderEpochCache
from kafkatw.storage.log_config import LogConfig
from kafkatw.storage.producer_state import ProducerStateManager
from kafkatw.storage.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, PRODUCER_SNAPSHOT_SUFFIX, SWAP_SUFFIX,
                                     LogSegment)
from kafkatw.storage.transaction_index import AbortedTxn

__all__ = ["LogLoader", "rebuild_producer_state", "aborted_txn"]

_log = Logger()


def rebuild_producer_state(producer_state: ProducerStateManager, segments: list[LogSegment],
                           rebuild_txn_index: bool) -> None:
    """
    Rebuild the producer state from every batch header of C{segments},
    reading the record of each control batch (recovery: the open
    transactions, and with C{rebuild_txn_index} every segment's
    aborted-transaction index; Kafka's C{UnifiedLog.rebuildProducerState}).
    """
    state = producer_state
    state.clear()
    load_batch = state.load_batch
    for segment in segments:
        aborted = []
        for h in segment.iter_headers(0):
            if h.producer_id < 0:
                continue
            if not h.is_control:
                load_batch(h)
                continue
            data = os.pread(segment.fileno, min(h.size, BATCH_HEADER_SIZE + 64), h.position)
            try:
                marker = read_marker(data)
            except InvalidRecordError:
                marker = None
            completed = load_batch(h, marker)
            if completed is not None and completed.aborted:
                aborted.append(aborted_txn(producer_state, completed))
        if rebuild_txn_index:
            segment.txn_index.reset(aborted)


def aborted_txn(producer_state: ProducerStateManager, completed: Any) -> AbortedTxn:
    """The C{.txnindex} entry of an aborted transaction just completed (its LSO: Kafka's)."""
    first_open = producer_state.first_ongoing_offset()
    lso = first_open if first_open is not None else completed.last_offset + 1
    return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)


class LogLoader:
    """
    Load the segments and producer state of a partition's directory (Kafka's
    C{LogLoader}); see the module docstring for the steps.

    @param topic_partition: C{<topic>-<partition>}, for the log messages.
    @param producer_state: the log's L{ProducerStateManager}, restored or
        rebuilt by L{load}.
    @param new_segment: opens the segment of a base offset (its files are
        created when missing).
    @ivar segments: after L{load}, the log's segments, oldest first (one
        empty segment at offset 0 for a new log).
    @ivar recovered_segments: segments re-scanned with CRC checks (0 after a
        clean shutdown).
    @ivar producer_state_source: C{"snapshot"} or C{"scan"} after L{load}.
    @ivar snapshot_on_disk: C{(file name, bytes)} of the producer snapshot
        restored when it is the only one in the directory, else C{None}.
    """

    def __init__(
        self,
        directory: str,
        topic_partition: str,
        config: LogConfig,
        recovery_point: int,
        clean_shutdown: bool,
        producer_state: ProducerStateManager,
        new_segment: Callable[[int], LogSegment],
    ) -> None:
        self.directory = directory
        self.topic_partition = topic_partition
        self.config = config
        self.recovery_point = recovery_point
        self.clean_shutdown = clean_shutdown
        self.producer_state = producer_state
        self._new_segment = new_segment
        self.segments: list[LogSegment] = []
        self.recovered_segments = 0
        self.producer_state_source = "none"
        self.snapshot_on_disk: tuple[str, bytes] | None = None

    def _complete_swaps(self) -> bool:
        """
        Finish or undo a log cleaner's segment swap cut short by a crash, as
        Kafka's C{LogLoader} does (docs/storage.md, "Log compaction"):
        C{.cleaned} and C{.deleted} files are removed; each C{<base>.log.swap}
        replaces the C{.log} segments (and their C{.index}, C{.timeindex},
        C{.txnindex}) whose base offsets lie in C{[base, swap's next offset)}
        and is renamed into place, with its C{.txnindex.swap} if any; its
        other indexes are rebuilt when the segment is loaded.  A
        C{.txnindex.swap} left by a crash after its C{.log.swap} was renamed
        goes into place too.

        @return: whether a swap was completed (the producer state and the
            C{.txnindex} files are then rebuilt from the log, not taken from a
            snapshot).
        """
        directory = self.directory
        names = os.listdir(directory)
        txn_swap = ".txnindex" + SWAP_SUFFIX
        for name in names:
            if name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX)) or (
                    name.endswith(SWAP_SUFFIX) and not name.endswith((".log" + SWAP_SUFFIX, txn_swap))):
                os.unlink(os.path.join(directory, name))
        swaps = sorted(int(name.split(".")[0]) for name in names if name.endswith(".log" + SWAP_SUFFIX))
        completed = False
        for base in swaps:
            swap_path = os.path.join(directory, f"{base:020d}.log{SWAP_SUFFIX}")
            end = base
            fd = os.open(swap_path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                position = 0
                while position + BATCH_HEADER_SIZE <= size:
                    header = unpack_header(os.pread(fd, BATCH_HEADER_SIZE, position))
                    if header.size < BATCH_HEADER_SIZE or position + header.size > size:
                        break
                    end = header.next_offset
                    position += header.size
            finally:
                os.close(fd)
            for name in os.listdir(directory):
                stem, _, suffix = name.partition(".")
                covered = stem.isdigit() and base <= int(stem) <= max(base, end - 1)
                if covered and suffix in ("log", "index", "timeindex", "txnindex"):
                    os.unlink(os.path.join(directory, name))
            os.replace(swap_path, swap_path[:-len(SWAP_SUFFIX)])
            completed = True
            _log.info("completed the segment swap of {partition} at offset {offset} (up to {end})",
                      partition=self.topic_partition, offset=base, end=end)
        # a .txnindex.swap whose log is live: the crash came while step 3 renamed the files into
        # place (with the log still .cleaned, it came during step 1: the old segments stand)
        uncommitted = {name[:-len(".log" + CLEANED_SUFFIX)] for name in names if name.endswith(".log" + CLEANED_SUFFIX)}
        for name in os.listdir(directory):
            if name.endswith(txn_swap):
                path = os.path.join(directory, name)
                stem = name[:-len(txn_swap)]
                if stem not in uncommitted and os.path.exists(os.path.join(directory, stem + ".log")):
                    os.replace(path, path[:-len(SWAP_SUFFIX)])
                    completed = True
                else:
                    os.unlink(path)
        return completed

    def load(self) -> list[LogSegment]:
        """
        Complete a cut-short swap, open (and where needed recover) the
        segments, and restore or rebuild the producer state.

        @return: L{segments}.
        @raise OSError, KafkaStorageError: a file could not be read or written.
        """
        recovery_point, clean_shutdown = self.recovery_point, self.clean_shutdown
        swapped = self._complete_swaps()
        bases = []
        for name in os.listdir(self.directory):
            if name.endswith(".log") and name[:-4].isdigit():
                bases.append(int(name[:-4]))
            elif name.endswith((".index", ".timeindex", ".txnindex")):
                stem = name.rsplit(".", 1)[0]
                if stem.isdigit() and not os.path.exists(os.path.join(self.directory, stem + ".log")):
                    os.unlink(os.path.join(self.directory, name))  # orphan index
        bases.sort()
        truncated_at = None
        for base in bases:
            segment = self._new_segment(base)
            if truncated_at is not None:
                # a segment after one that was truncated by recovery is not part of the log
                segment.delete()
                continue
            if clean_shutdown or segment.base_offset < recovery_point and not self._crosses(bases, base, recovery_point):
                segment.load()
            else:
                previous = self.segments[-1] if self.segments else None
                if previous is not None and previous.next_offset < base and not self.config.compact:
                    # The previous segment lost its tail in a crash (its writes were not flushed) while
                    # this one's survived: offsets [previous end, base) are gone, so this segment and
                    # the later ones are not part of the log (a delete-policy log has no gaps; a
                    # compacted one may, where the cleaner removed records).
                    _log.warn("{partition}: segment {base} follows a segment ending at {end} (lost in a crash):"
                              " deleting it and the later ones", partition=self.topic_partition,
                              base=base, end=previous.next_offset)
                    truncated_at = previous.next_offset
                    segment.delete()
                    continue
                self.recovered_segments += 1
                if segment.recover():
                    truncated_at = segment.next_offset
            self.segments.append(segment)
        if not self.segments:
            self.segments.append(self._new_segment(0))
        snapshots = sorted(name for name in os.listdir(self.directory) if name.endswith(PRODUCER_SNAPSHOT_SUFFIX))
        loaded = False
        if clean_shutdown and snapshots and not swapped:
            path = os.path.join(self.directory, snapshots[-1])
            with open(path, "rb") as f:
                data = f.read()
            loaded = self.producer_state.restore(data, self.segments[-1].next_offset)
            if loaded and len(snapshots) == 1:
                self.snapshot_on_disk = (snapshots[-1], data)
        # The snapshots stay: one is used only at a clean start, and every clean shutdown
        # (PartitionLog.close) writes this log's snapshot again -- or finds it unchanged -- and
        # removes the others first; so an idle partition costs no write at the shutdown and no
        # unlink at the start (issue 32).
        if loaded:
            self.producer_state_source = "snapshot"
            for segment in self.segments:
                segment.txn_index.load()
            return self.segments
        self.producer_state_source = "scan"
        rebuild_producer_state(self.producer_state, self.segments, rebuild_txn_index=True)
        return self.segments

    def load_leader_epochs(self, cache: LeaderEpochCache) -> None:
        """
        Make the epoch cache agree with the loaded log: rebuilt from every
        batch header when its file was missing, empty or malformed (a log from
        before replication); otherwise cut to C{[log start, LEO)} and, after
        an unclean shutdown, completed from the headers of the segments past
        the recovery point.  Called after L{load}, with the log's
        L{LeaderEpochCache} read from its checkpoint.
        """
        if cache.needs_rebuild:
            if sum(s.size_bytes for s in self.segments) == 0:
                return  # a new log: the file is written at its first assignment
            segments = self.segments
            _log.info("rebuilding the leader epoch cache of {partition} from the log",
                      partition=self.topic_partition)
        else:
            # not written: the next change writes them, and the next start redoes them until then
            cache.truncate_from_end(self.segments[-1].next_offset, write=False)
            cache.truncate_from_start(self.segments[0].base_offset, write=False)
            if self.clean_shutdown:
                return
            segments = [s for s in self.segments if s.next_offset > self.recovery_point]
        latest = cache.latest_epoch
        found = []
        for segment in segments:
            for h in segment.iter_headers(0):
                if h.partition_leader_epoch > latest:
                    latest = h.partition_leader_epoch
                    found.append((latest, h.base_offset))
        cache.assign_all(found)

    @staticmethod
    def _crosses(bases: list[int], base: int, recovery_point: int) -> bool:
        """Whether the segment of C{base} holds offsets at or past C{recovery_point}."""
        i = bases.index(base)
        return i + 1 >= len(bases) or bases[i + 1] > recovery_point
