"""
The broker's logs across its log directories: loading and recovery, placement
of new partitions, flush policy, retention, recovery-point checkpoints.

Each log directory holds::

    <log dir>/
        meta.properties                     broker.id and cluster.id (L{kafkatw.storage.meta_properties})
        recovery-point-offset-checkpoint    Kafka's text format, below
        replication-offset-checkpoint       the same format: each partition's high watermark
        .kafka_cleanshutdown                present only while the broker is stopped cleanly
        <topic>-<partition>/                one L{PartitionLog} each

C{recovery-point-offset-checkpoint} (Kafka's C{OffsetCheckpointFile}), written
atomically (temporary file, fsync, rename)::

    0                 <- format version
    2                 <- number of entries
    orders 0 1520     <- topic partition offset
    orders 1 1499

C{replication-offset-checkpoint} holds high watermarks in the same format,
written by L{LogManager.checkpoint_high_watermarks} and L{LogManager.close}.
On load each log's high watermark is its entry clamped to
C{[log start offset, log end offset]}; a log without an entry starts at its
log start offset (Kafka's rule: nothing is known to be committed), except
when the file does not exist at all (a log directory from before
replication), where it starts at the log end offset.

On L{LogManager.load}, a directory with the clean-shutdown marker is trusted
(indexes loaded, only the tail after the last index entry is read); otherwise
every log re-scans its segments from its recovery point and truncates at the
first invalid batch.  The marker is removed once loaded and written again by
L{LogManager.close}.

A storage error of any log operation is reported to the manager's
L{LogDirFailureChannel} with the log's directory, which takes the directory
offline (KIP-112, L{kafkatw.storage.log_dir_failure}): L{handle_log_dir_failure}
drops its logs (their files stay open, unwritten, until L{close}), and from
then on nothing touches it: no flush, retention or checkpoint, no new
partition, and no clean-shutdown marker, so that the next start recovers its
logs from what is on disk.

Running out of file descriptors is not a failure of a directory but a limit
of the process (docs/operations.md, "Open files"): a new log that would leave
fewer than L{OPEN_FILES_RESERVE} descriptors below the soft C{RLIMIT_NOFILE},
or whose creation fails with C{EMFILE}/C{ENFILE}, is not created
(L{OpenFilesLimitError}, C{KAFKA_STORAGE_ERROR} for that partition) and the
directory stays online; at L{LogManager.load} the same error stops the start.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import threading
from typing import Any, Callable, Mapping

from twisted.logger import Logger

from kafkatw.errors import KafkaStorageError
from kafkatw.storage.files import sync_directory, write_atomically
from kafkatw.storage.future_log import (FUTURE_SUFFIX, delete_dir_name, future_dir_name, parse_moving_dir,
                                        recover_interrupted_moves)
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import LogConfig
from kafkatw.storage.log_dir_failure import (
    OPEN_FILES_RESERVE,
    LogDirFailureChannel,
    LogDirFiles,
    LogDirsFailedError,
    OpenFilesLimitError,
    out_of_descriptors,
)

__all__ = ["LogManager", "CHECKPOINT_FILE", "CLEAN_SHUTDOWN_FILE", "HIGH_WATERMARK_CHECKPOINT_FILE", "read_checkpoint",
           "write_checkpoint"]

_log = Logger()

CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
#: Kafka's high-watermark checkpoint file (C{ReplicaManager.HighWatermarkFilename}).
HIGH_WATERMARK_CHECKPOINT_FILE = "replication-offset-checkpoint"
#: Kafka's log start offset checkpoint (C{LogManager.LogStartOffsetCheckpointFile}):
#: a log start offset moved inside a segment by DeleteRecords survives a restart.
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """
    Read an offset checkpoint file.

    @return: C{(topic, partition) -> offset}; empty when the file is missing.
    @raise KafkaStorageError: malformed file.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    try:
        if lines[0].strip() != "0":
            raise ValueError(f"unsupported version {lines[0]!r}")
        count = int(lines[1])
        result = {}
        for line in lines[2:2 + count]:
            topic, partition, offset = line.split()
            result[(topic, int(partition))] = int(offset)
        if len(result) != count:
            raise ValueError(f"expected {count} entries, found {len(result)}")
        return result
    except (IndexError, ValueError) as e:
        raise KafkaStorageError(f"malformed checkpoint file {path}: {e}") from e


def write_checkpoint(path: str, offsets: Mapping[tuple[str, int], int]) -> None:
    """Write an offset checkpoint file atomically: temporary file, fsync, rename, fsync of the directory."""
    lines = ["0", str(len(offsets))]
    lines.extend(f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items()))
    write_atomically(path, ("\n".join(lines) + "\n").encode("utf-8"))


def _read_high_watermarks(log_dir: str) -> dict[tuple[str, int], int] | None:
    """The directory's high-watermark checkpoint; C{None} when it has none (a directory from before replication)."""
    path = os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT_FILE)
    return read_checkpoint(path) if os.path.exists(path) else None


class _DuplicateLogError(KafkaStorageError):
    """A partition's log in two log directories: a configuration error, not a failed directory."""


def soft_open_files_limit() -> int | None:
    """This process's soft C{RLIMIT_NOFILE}; C{None} when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


class LogManager:
    """
    All partition logs of a broker.

    @param default_config: the broker's topic-level defaults, a topic config
        dict (L{kafkatw.config.topic_log_config} with no overrides).
    @param now_ms: clock (ms since the epoch); the only source of time.
    @param failure_channel: where storage errors are reported (a new
        L{LogDirFailureChannel} when not given).
    @param files_factory: makes the L{LogDirFiles} of a log directory from
        its absolute path (a simulation gives a disk model:
        L{kafkatw.simulation.disk}).
    @param open_files_limit: the soft C{RLIMIT_NOFILE} now (C{None}:
        unlimited); a new log is refused when it leaves fewer than
        L{OPEN_FILES_RESERVE} descriptors below it.

    @ivar files: log directory -> the L{LogDirFiles} its segments write through.
    """

    def __init__(self, log_dirs: list[str], default_config: Mapping[str, Any], now_ms: Callable[[], int],
                 failure_channel: LogDirFailureChannel | None = None, *,
                 files_factory: Callable[[str], LogDirFiles] = LogDirFiles,
                 open_files_limit: Callable[[], int | None] = soft_open_files_limit) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.failure_channel = failure_channel if failure_channel is not None else LogDirFailureChannel()
        self.files = {d: files_factory(d) for d in self.log_dirs}
        self.open_files_limit = open_files_limit
        #: the logs of failed directories: their files are closed (unwritten) by L{close}
        self._offline_logs: list[PartitionLog] = []
        #: offline log directory -> the partitions whose logs were there when it failed
        self.offline_partitions: dict[str, list[tuple[str, int]]] = {}
        # first of the channel's listeners: the broker's see the directory's logs dropped already
        self.failure_channel.add_listener(lambda log_dir, message: self.handle_log_dir_failure(log_dir))
        self.default_config = dict(default_config)
        self.now_ms = now_ms
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        #: the log dirs L{load} found logs in but no clean-shutdown marker: the
        #: previous process crashed, and may have lost what it had not flushed
        self.unclean_log_dirs: list[str] = []
        self._log_dir_of: dict[tuple[str, int], str] = {}
        self._topic_configs: dict[str, dict[str, Any]] = {}
        #: topic -> (default config, topic overrides, the LogConfig parsed from them) (L{_config_for})
        self._parsed_configs: dict[str, tuple[dict[str, Any], dict[str, Any] | None, LogConfig]] = {}
        #: checkpoint path -> the offsets last written there
        self._written: dict[str, dict[tuple[str, int], int]] = {}
        #: held while checkpoint files are written (from whichever thread)
        self._checkpoint_lock = threading.Lock()
        #: the logs whose leader epoch checkpoint the last L{leader_epoch_syncs} saw unsynced and left
        self._unsynced_seen: set[tuple[str, int]] = set()
        #: (topic, partition) -> its future log, a replica moving to another log dir
        #: (AlterReplicaLogDirs, KIP-113: L{kafkatw.storage.future_log})
        self.future_logs: dict[tuple[str, int], PartitionLog] = {}
        self._future_log_dir_of: dict[tuple[str, int], str] = {}
        #: (topic, partition) -> the log dir its log is created in (AlterReplicaLogDirs before the replica
        #: exists: Kafka's C{preferredLogDirs})
        self.preferred_log_dirs: dict[tuple[str, int], str] = {}

    def _config_for(self, topic: str) -> LogConfig:
        # parsed once per topic (a start opens thousands of logs of few topics): the entry holds while
        # both dicts it came from are the current ones (they are replaced on a change, never mutated)
        overrides = self._topic_configs.get(topic)
        cached = self._parsed_configs.get(topic)
        if cached is not None and cached[0] is self.default_config and cached[1] is overrides:
            return cached[2]
        config = LogConfig.from_topic_config({**self.default_config, **(overrides or {})})
        self._parsed_configs[topic] = (self.default_config, overrides, config)
        return config

    def load(self) -> None:
        """
        Open every partition log found in the log directories, recovering
        unclean ones.  A directory whose loading fails with an I/O error goes
        offline (reported to the failure channel, its logs loaded so far
        dropped, L{offline_partitions} naming them) and the others load, as
        Kafka's C{LogManager.loadLogs} does.

        @raise LogDirsFailedError: every log directory failed.
        @raise KafkaStorageError: a partition is in two log directories.
        @raise OpenFilesLimitError: the logs need more descriptors than the
            soft C{RLIMIT_NOFILE} allows (the logs opened are closed again).
        """
        recover_interrupted_moves(self.live_log_dirs, every_log_dir=not self.offline_log_dirs)
        for log_dir in self.log_dirs:
            if log_dir in self.failure_channel.offline:
                continue
            seen: list[tuple[str, int]] = []
            try:
                self._load_log_dir(log_dir, seen)
            except _DuplicateLogError:
                raise
            except (OSError, KafkaStorageError) as e:  # a segment that cannot be opened wraps its OSError
                if out_of_descriptors(e):
                    for log in self._logs.values():
                        log.close_handlers()
                    self._logs.clear()
                    self._log_dir_of.clear()
                    raise OpenFilesLimitError(
                        f"the logs of {log_dir} need more file descriptors than the open files limit (ulimit -n)"
                        f" of {self.open_files_limit()} allows (out of them at partition log {len(seen)},"
                        f" {seen[-1][0] if seen else ''}-{seen[-1][1] if seen else ''}): raise the hard limit"
                        f" (LimitNOFILE= of systemd, or ulimit -Hn); the broker raises its soft limit to it") from e
                self.failure_channel.maybe_add_offline_log_dir(log_dir, f"loading its logs failed: {e}")
                self.offline_partitions[log_dir] = sorted(set(self.offline_partitions.get(log_dir, [])) | set(seen))
        if not self.live_log_dirs:
            raise LogDirsFailedError(self.offline_log_dirs)
        self._load_future_logs()

    def _load_log_dir(self, log_dir: str, seen: list[tuple[str, int]]) -> None:
        """Load one log directory's logs; C{seen} gets each partition found, before it is opened."""
        os.makedirs(log_dir, exist_ok=True)
        marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery_points = read_checkpoint(os.path.join(log_dir, CHECKPOINT_FILE))
        high_watermarks = _read_high_watermarks(log_dir)
        start_path = os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT_FILE)
        log_starts = read_checkpoint(start_path) if os.path.exists(start_path) else {}
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            match = _PARTITION_DIR.match(name)
            if match is None or not os.path.isdir(path):
                continue
            tp = (match.group(1), int(match.group(2)))
            seen.append(tp)
            if tp in self._logs:
                raise _DuplicateLogError(f"{tp[0]}-{tp[1]} found in two log directories")
            log = PartitionLog(path, tp[0], tp[1], self._config_for(tp[0]),
                               recovery_point=recovery_points.get(tp, 0), clean_shutdown=clean,
                               now_ms=self.now_ms, files=self.files[log_dir])
            if high_watermarks is not None:
                log.update_high_watermark(high_watermarks.get(tp, log.log_start_offset))
            if log_starts.get(tp, -1) > log.log_start_offset:
                log.maybe_increment_log_start_offset(min(log_starts[tp], log.high_watermark))
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
            _log.info("loaded {partition} [{start}, {end}) clean={clean} recovered={recovered}"
                      " producer_state={source}",
                      partition=name, start=log.log_start_offset, end=log.log_end_offset, clean=clean,
                      recovered=log.recovered_segments, source=log.producer_state_source)
        if clean:
            os.unlink(marker)
        elif seen:
            self.unclean_log_dirs.append(log_dir)

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        """The log directory holding C{topic-partition}'s log (C{None}: no such log here)."""
        return self._log_dir_of.get((topic, partition))

    # -- failed log directories (KIP-112) ------------------------------------------

    @property
    def live_log_dirs(self) -> list[str]:
        """The log directories not offline, in C{log.dirs} order."""
        offline = self.failure_channel.offline
        return [d for d in self.log_dirs if d not in offline]

    @property
    def offline_log_dirs(self) -> dict[str, str]:
        """Offline log directory -> the error that took it offline."""
        return {d: self.failure_channel.offline[d] for d in self.log_dirs if d in self.failure_channel.offline}

    def log_failed(self, topic: str, partition: int, error: BaseException) -> KafkaStorageError:
        """
        Report a storage error (C{KafkaStorageError} or C{OSError}) of an
        operation on C{topic-partition}'s log to the failure channel, with
        the log's directory (Kafka's C{maybeHandleIOException}): the first
        report of a directory takes it offline.

        @return: the error to answer with (C{KAFKA_STORAGE_ERROR}).
        """
        log_dir = self._log_dir_of.get((topic, partition))
        if log_dir is not None:
            self.failure_channel.maybe_add_offline_log_dir(log_dir, f"{topic}-{partition}: {error}")
        if isinstance(error, KafkaStorageError):
            return error
        return KafkaStorageError(f"{topic}-{partition}: {error}")

    def handle_log_dir_failure(self, log_dir: str) -> list[tuple[str, int]]:
        """
        Drop the logs of C{log_dir}, which failed (Kafka's
        C{LogManager.handleLogDirFailure}; called by the failure channel,
        before its other listeners): nothing flushes, cleans, checkpoints or
        reads them any more; their files stay open until L{close}, which
        closes them without writing (a region being sent from them stays
        valid meanwhile).  L{offline_partitions} keeps what they were.

        @return: the partitions whose logs were there.
        """
        gone = sorted(tp for tp, d in self._log_dir_of.items() if d == log_dir)
        self.offline_partitions[log_dir] = sorted(set(self.offline_partitions.get(log_dir, [])) | set(gone))
        for tp in gone:
            self._offline_logs.append(self._logs.pop(tp))
            del self._log_dir_of[tp]
        for name in (CHECKPOINT_FILE, HIGH_WATERMARK_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE):
            self._written.pop(os.path.join(log_dir, name), None)
        for tp, d in list(self._future_log_dir_of.items()):
            if d == log_dir:
                self._offline_logs.append(self.future_logs.pop(tp))
                del self._future_log_dir_of[tp]
        return gone

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, topic_config: Mapping[str, Any] | None = None) -> PartitionLog:
        """
        The log of C{topic-partition}, created in the log directory holding
        the fewest partitions when new.
        """
        if topic_config is not None:
            self._topic_configs[topic] = dict(topic_config)
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            return log
        live = self.live_log_dirs
        if not live:
            raise KafkaStorageError(f"cannot create a log for {topic}-{partition}: every log dir is offline")
        counts = {d: 0 for d in live}
        for d in self._log_dir_of.values():
            counts[d] += 1
        log_dir = min(live, key=lambda d: counts[d])
        preferred = self.preferred_log_dirs.pop(tp, None)
        if preferred in live:
            log_dir = preferred
        path = os.path.join(log_dir, f"{topic}-{partition}")
        existed = os.path.exists(path)
        log = None
        try:
            log = PartitionLog(path, topic, partition, self._config_for(topic), now_ms=self.now_ms,
                               files=self.files[log_dir])
            self._check_open_files(topic, partition, log)
        except (KafkaStorageError, OSError) as e:
            self._maybe_refuse_for_descriptors(e, "log", topic, partition, log_dir, path, log, existed)
            message = f"cannot create the log of {topic}-{partition}: {e}"
            self.failure_channel.maybe_add_offline_log_dir(log_dir, message)
            raise LogDirsFailedError({log_dir: message}) from e
        self._logs[tp] = log
        self._log_dir_of[tp] = log_dir
        return log

    def delete(self, topic: str, partition: int) -> bool:
        """Remove a partition's log and directory (and its future log). @return: whether it existed."""
        self.remove_future_log(topic, partition)
        log = self._logs.pop((topic, partition), None)
        self._log_dir_of.pop((topic, partition), None)
        if log is None:
            return False
        log.delete()
        return True

    # -- future logs: replicas moving between log dirs (KIP-113) ----------------------

    def _load_future_logs(self) -> None:
        """
        Open the future logs found in the live log dirs (L{load}): a move
        whose partition has its current log here resumes (Kafka's); one
        whose partition has no log here any more is removed, unless a log dir
        is offline (its current log may be there: it is left on disk).
        """
        for log_dir in self.live_log_dirs:
            for name in sorted(os.listdir(log_dir)):
                parsed = parse_moving_dir(name)
                if parsed is None or parsed[3] != FUTURE_SUFFIX:
                    continue
                topic, partition, _, _ = parsed
                tp = (topic, partition)
                path = os.path.join(log_dir, name)
                if tp not in self._logs or tp in self.future_logs or self._log_dir_of[tp] == log_dir:
                    if not self.offline_log_dirs:
                        _log.warn("removing the future log {path}: its partition has no current log in another"
                                  " log dir", path=path)
                        shutil.rmtree(path, ignore_errors=True)
                    continue
                # its recovery point is not checkpointed: it is recovered whole (CRC checks)
                log = PartitionLog(path, topic, partition, self._config_for(topic), now_ms=self.now_ms,
                                   files=self.files[log_dir])
                self.future_logs[tp] = log
                self._future_log_dir_of[tp] = log_dir
                _log.info("loaded the future log of {partition} in {log_dir} [{start}, {end}): its move resumes",
                          partition=f"{topic}-{partition}", log_dir=log_dir, start=log.log_start_offset,
                          end=log.log_end_offset)

    def future_log_dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir of C{topic-partition}'s future log (C{None}: it is not moving)."""
        return self._future_log_dir_of.get((topic, partition))

    def create_future_log(self, topic: str, partition: int, log_dir: str, move_id: str) -> PartitionLog:
        """
        Create the future log of C{topic-partition} in C{log_dir}, empty,
        starting at the current log's log start offset
        (C{<topic>-<partition>.<move_id>-future}, L{kafkatw.storage.future_log}).

        @raise OpenFilesLimitError: out of file descriptors, as for
            L{get_or_create} (C{log_dir} stays online, nothing is left on disk).
        @raise KafkaStorageError: it cannot be created (C{log_dir} goes offline).
        """
        tp = (topic, partition)
        path = os.path.join(log_dir, future_dir_name(topic, partition, move_id))
        existed = os.path.exists(path)
        log = None
        try:
            log = PartitionLog(path, topic, partition, self._config_for(topic), now_ms=self.now_ms,
                               files=self.files[log_dir])
            self._check_open_files(topic, partition, log)
            current = self._logs.get(tp)
            if current is not None and current.log_start_offset > 0:
                log.truncate_fully_and_start_at(current.log_start_offset)
        except (KafkaStorageError, OSError) as e:
            self._maybe_refuse_for_descriptors(e, "future log", topic, partition, log_dir, path, log, existed)
            message = f"cannot create the future log of {topic}-{partition}: {e}"
            self.failure_channel.maybe_add_offline_log_dir(log_dir, message)
            raise LogDirsFailedError({log_dir: message}) from e
        self.future_logs[tp] = log
        self._future_log_dir_of[tp] = log_dir
        return log

    def remove_future_log(self, topic: str, partition: int) -> bool:
        """Close and remove C{topic-partition}'s future log (a move cancelled). @return: whether there was one."""
        tp = (topic, partition)
        log = self.future_logs.pop(tp, None)
        self._future_log_dir_of.pop(tp, None)
        if log is None:
            return False
        log.delete()
        return True

    def replace_current_with_future_log(self, topic: str, partition: int) -> PartitionLog:
        """
        Swap the future log of C{topic-partition} in (Kafka's
        C{LogManager.replaceCurrentWithFutureLog}), once it holds every
        batch of the current log (same log end offset, nothing pending): it
        takes the current log's log start offset, high watermark, leader
        epoch cache and producer state, is closed (flushed, snapshot and
        checkpoint written) and the two directories are renamed as
        L{kafkatw.storage.future_log} draws; it is then opened again as the
        current log (a clean open: its indexes are trusted).  The old log is
        not closed: reads under way keep its descriptors; the caller deletes
        it later (C{file.delete.delay.ms}) with L{delete_old_log}.

        @return: the old log (its directory already renamed C{...-delete}).
        @raise ValueError: not caught up.
        @raise KafkaStorageError: a rename or a write failed.
        """
        tp = (topic, partition)
        current, future = self._logs[tp], self.future_logs[tp]
        leo = current.log_end_offset
        if future.log_end_offset != leo or current.has_pending:
            raise ValueError(f"the future log of {topic}-{partition} is at {future.log_end_offset}, the current"
                             f" one at {leo}")
        source_dir, destination_dir = self._log_dir_of[tp], self._future_log_dir_of[tp]
        move_id = parse_moving_dir(os.path.basename(future.directory))[2]
        future.update_high_watermark(current.high_watermark)
        future.maybe_increment_log_start_offset(current.log_start_offset)
        future.producer_state.restore(current.producer_state.snapshot(leo), leo)
        future.leader_epoch_cache.clear()
        future.leader_epoch_cache.assign_all((e.epoch, e.start_offset) for e in current.leader_epoch_cache.entries)
        high_watermark = current.high_watermark
        current_path = current.directory
        old_path = os.path.join(source_dir, delete_dir_name(topic, partition, move_id))
        new_path = os.path.join(destination_dir, f"{topic}-{partition}")
        swapped = False
        undone = True
        try:
            future.close()
            current.flush()
            os.rename(current_path, old_path)
            try:
                sync_directory(source_dir)
                os.rename(future.directory, new_path)
            except OSError:
                undone = False
                os.rename(old_path, current_path)  # undone: the current log serves on
                undone = True
                raise
            swapped = True
            sync_directory(destination_dir)
            log = PartitionLog(new_path, topic, partition, self._config_for(topic), recovery_point=leo,
                               clean_shutdown=True, now_ms=self.now_ms, files=self.files[destination_dir])
        except (KafkaStorageError, OSError) as e:
            if swapped:
                # on disk the new log is in place (complete and closed) in the destination, which failed:
                # the partition is offline here until the next start opens it
                current.directory = old_path
                self._log_dir_of[tp] = destination_dir
                raise self.log_failed(topic, partition, e) from e
            if not undone:
                # the current log stays renamed -delete: its dir failed, the partition is offline here; the
                # future log, complete and closed, stays on disk: the next start finishes the swap
                # (future_log.recover_interrupted_moves)
                current.directory = old_path
                del self.future_logs[tp]
                del self._future_log_dir_of[tp]
                raise self.log_failed(topic, partition, e) from e
            # the move is abandoned; the current log, untouched, serves on
            del self.future_logs[tp]
            del self._future_log_dir_of[tp]
            shutil.rmtree(future.directory, ignore_errors=True)
            raise KafkaStorageError(f"moving {topic}-{partition} to {destination_dir} failed: {e}") from e
        log.update_high_watermark(high_watermark)
        log.maybe_increment_log_start_offset(future.log_start_offset)  # inside its first batch (DeleteRecords)
        current.directory = old_path
        self._logs[tp] = log
        self._log_dir_of[tp] = destination_dir
        del self.future_logs[tp]
        del self._future_log_dir_of[tp]
        return current

    @staticmethod
    def delete_old_log(log: PartitionLog) -> None:
        """Close the files of a log replaced by its future log and remove its (C{-delete}) directory."""
        log.close_handlers()
        shutil.rmtree(log.directory, ignore_errors=True)

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def set_default_config(self, default_config: Mapping[str, Any]) -> None:
        """
        Replace the broker's topic-level defaults (a dynamic broker config
        changed) and give every log its new L{LogConfig}.  Each log's config is
        one immutable object swapped whole, so an append or a retention pass
        sees either the old or the new settings, never a mix.
        """
        self.default_config = dict(default_config)
        configs: dict[str, LogConfig] = {}
        for (topic, _), log in [*self._logs.items(), *self.future_logs.items()]:
            if topic not in configs:
                configs[topic] = self._config_for(topic)
            log.config = configs[topic]

    def update_config(self, topic: str, topic_config: Mapping[str, Any]) -> None:
        """Apply a topic's new config (overrides of the defaults) to all its partitions."""
        before = self._config_for(topic)
        self._topic_configs[topic] = dict(topic_config)
        config = self._config_for(topic)
        if config == before:
            return  # its logs have an equal config already (a start sees every topic once: no walk of every log)
        for (t, _), log in [*self._logs.items(), *self.future_logs.items()]:
            if t == topic:
                log.config = config

    def flush_dirty(self, now_ms: int) -> int:
        """
        Apply C{flush.ms} to every log.  A log whose flush fails takes its
        directory offline (L{log_failed}); the others go on.

        @return: logs flushed.
        """
        flushed = 0
        for tp, log in list(self._logs.items()):
            if tp not in self._logs:
                continue  # its directory failed meanwhile
            try:
                if log.maybe_flush(now_ms):
                    flushed += 1
            except (KafkaStorageError, OSError) as e:
                self.log_failed(tp[0], tp[1], e)
        return flushed

    def run_retention(self, now_ms: int) -> int:
        """
        Apply retention to every log (a failure as in L{flush_dirty}).

        @return: segments deleted.
        """
        deleted = 0
        for tp, log in list(self._logs.items()):
            if tp not in self._logs:
                continue
            try:
                deleted += log.apply_retention(now_ms)
            except (KafkaStorageError, OSError) as e:
                self.log_failed(tp[0], tp[1], e)
        return deleted

    def checkpoint_recovery_points(self) -> None:
        """Write each log directory's recovery-point checkpoint (when it changed)."""
        self.recovery_point_checkpoints()()

    def checkpoint_high_watermarks(self) -> None:
        """Write each log directory's C{replication-offset-checkpoint} (every log's high watermark, when it changed)."""
        self.high_watermark_checkpoints()()

    def recovery_point_checkpoints(self) -> Callable[[], None]:
        """
        L{checkpoint_recovery_points} in two steps: the offsets are read now;
        the returned callable writes them (the recovery points and the log
        start offsets), on any thread (see L{high_watermark_checkpoints}).
        """
        return self._checkpoint_writer(self._changed_checkpoints(CHECKPOINT_FILE, lambda log: log.recovery_point)
                                       + self._changed_checkpoints(LOG_START_OFFSET_CHECKPOINT_FILE,
                                                                   lambda log: log.log_start_offset))

    def leader_epoch_syncs(self) -> Callable[[], None]:
        """
        The background sync of the leader epoch checkpoints (Kafka's
        scheduler flushes them so for truncations, KAFKA-15046), called
        periodically: the checkpoints holding assignments not yet fsynced
        that the previous call saw so too are listed now (so an assignment
        waits one to two periods: the burst of a failover's elections is
        over, and its fsyncs do not slow ZooKeeper's own on a shared disk);
        the returned callable fsyncs them, on any thread, so that neither a
        clean shutdown nor a flush is left thousands of them after a creation
        or a failover, and the event loop never waits for them.

        @return: a callable syncing them, raising L{LogDirsFailedError}
            naming the directories where a sync failed (after syncing the
            others); the caller reports them, on the reactor thread.
        """
        unsynced = {tp for tp, log in self._logs.items() if log.leader_epoch_cache.unsynced}
        due = [(self._log_dir_of.get(tp), self._logs[tp].leader_epoch_cache) for tp in unsynced & self._unsynced_seen]
        self._unsynced_seen = unsynced - self._unsynced_seen

        def sync() -> None:
            failures: dict[str, str] = {}
            for log_dir, cache in due:
                if log_dir in failures:
                    continue
                try:
                    cache.sync()
                except KafkaStorageError as e:
                    if log_dir is not None:
                        failures[log_dir] = str(e)
            if failures:
                raise LogDirsFailedError(failures)
        return sync

    def high_watermark_checkpoints(self) -> Callable[[], None]:
        """
        L{checkpoint_high_watermarks} in two steps: each log's high watermark
        is read now (on the thread that owns the logs); the returned callable
        writes the files that changed, and may run on another thread, so
        that the reactor does not wait for the fsyncs (a few to tens of ms on
        a busy disk; Kafka writes its checkpoints from its scheduler thread,
        not its request handlers).  Writes of this manager's checkpoints,
        from any thread, run one at a time.

        @return: a callable writing the checkpoints, raising
            L{LogDirsFailedError} naming the directories whose write failed
            (after writing the others; a failed file's last written offsets
            are forgotten, so that it is written again); the caller reports
            them to the failure channel, on the reactor thread.
        """
        return self._checkpoint_writer(self._changed_checkpoints(HIGH_WATERMARK_CHECKPOINT_FILE,
                                                                 lambda log: log.high_watermark))

    def _changed_checkpoints(self, file_name: str, offset_of: Callable[[PartitionLog], int]
                             ) -> list[tuple[str, dict[tuple[str, int], int]]]:
        """
        C{(path, offsets)} of each log directory's C{file_name} whose
        C{offset_of(log)} of its logs differ from those last written (two
        fsyncs saved every few seconds on an idle broker).
        """
        changed = []
        for log_dir in self.live_log_dirs:
            offsets = {tp: offset_of(self._logs[tp]) for tp, d in self._log_dir_of.items() if d == log_dir}
            path = os.path.join(log_dir, file_name)
            if self._written.get(path) != offsets:
                changed.append((path, offsets))
                self._written[path] = offsets
        return changed

    def _checkpoint_writer(self, changed: list[tuple[str, dict[tuple[str, int], int]]]) -> Callable[[], None]:
        def write() -> None:
            failures: dict[str, str] = {}
            with self._checkpoint_lock:
                for path, offsets in changed:
                    log_dir = os.path.dirname(path)
                    if log_dir in failures:
                        self._written.pop(path, None)
                        continue
                    try:
                        write_checkpoint(path, offsets)
                    except OSError as e:
                        self._written.pop(path, None)
                        failures[log_dir] = f"writing {path} failed: {e}"
            if failures:
                raise LogDirsFailedError(failures)
        return write

    def _maybe_refuse_for_descriptors(self, error: BaseException, what: str, topic: str, partition: int,
                                      log_dir: str, path: str, log: PartitionLog | None, existed: bool) -> None:
        """
        When C{error}, met creating a log (C{what}: "log", "future log") at
        C{path}, is for want of file descriptors: close what was opened,
        remove the directory if it is new and raise L{OpenFilesLimitError}
        (C{log_dir} stays online).  Otherwise return.
        """
        if not (isinstance(error, OpenFilesLimitError) or out_of_descriptors(error)):
            return
        if log is not None:
            log.close_handlers()
        if not existed:
            shutil.rmtree(path, ignore_errors=True)
        if isinstance(error, OpenFilesLimitError):
            raise error
        raise OpenFilesLimitError(f"cannot create the {what} of {topic}-{partition}: out of file descriptors"
                                  f" at the open files limit (ulimit -n) of {self.open_files_limit()}"
                                  f" ({error}); log dir {log_dir} stays online") from error

    def _check_open_files(self, topic: str, partition: int, log: PartitionLog) -> None:
        """
        @raise OpenFilesLimitError: C{log}'s newest descriptor leaves fewer
            than L{OPEN_FILES_RESERVE} below the limit.  Descriptors are
            allocated lowest first, so a descriptor numbered C{n} means at
            least C{n + 1} are open: the check never refuses too early.
        """
        limit = self.open_files_limit()
        if limit is None:
            return
        in_use = log.segments[-1].fileno + 1
        if in_use > limit - OPEN_FILES_RESERVE:
            raise OpenFilesLimitError(
                f"cannot create the log of {topic}-{partition}: {in_use} of the {limit} open files the limit"
                f" (ulimit -n) allows are in use and {OPEN_FILES_RESERVE} are kept for connections and"
                f" checkpoints; raise the hard limit (LimitNOFILE= of systemd, or ulimit -Hn)")

    def report(self, error: LogDirsFailedError) -> None:
        """Report each directory of C{error} to the failure channel (on the reactor thread)."""
        for log_dir, message in error.failures.items():
            self.failure_channel.maybe_add_offline_log_dir(log_dir, message)

    def close(self) -> None:
        """
        Flush and close every log, checkpoint, and mark each directory
        cleanly shut down -- each directory that is not offline: the logs
        of an offline one (or of one failing now) are closed without writing
        and it gets no marker, so that the next start recovers it.
        """
        for tp, log in list(self._logs.items()):
            if tp not in self._logs:
                continue
            try:
                log.close()
            except (KafkaStorageError, OSError) as e:
                self.log_failed(tp[0], tp[1], e)
        for checkpoint in (self.checkpoint_recovery_points, self.checkpoint_high_watermarks):
            try:
                checkpoint()
            except LogDirsFailedError as e:
                self.report(e)
        for log_dir in self.live_log_dirs:
            try:
                fd = os.open(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                             0o644)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as e:
                self.failure_channel.maybe_add_offline_log_dir(log_dir, f"writing {CLEAN_SHUTDOWN_FILE} failed: {e}")
        for tp, log in list(self.future_logs.items()):
            try:
                log.close()
            except (KafkaStorageError, OSError) as e:
                self.failure_channel.maybe_add_offline_log_dir(self._future_log_dir_of[tp], f"{log.directory}: {e}")
                log.close_handlers()
        self.future_logs.clear()
        self._future_log_dir_of.clear()
        for log in self._offline_logs:
            log.close_handlers()
        self._offline_logs.clear()
        self._logs.clear()
        self._log_dir_of.clear()
