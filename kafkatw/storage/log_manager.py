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
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Callable, Mapping

from twisted.logger import Logger

from kafkatw.errors import KafkaStorageError
from kafkatw.storage.files import write_atomically
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import LogConfig
from kafkatw.storage.log_dir_failure import LogDirFailureChannel, LogDirFiles, LogDirsFailedError

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

    @ivar files: log directory -> the L{LogDirFiles} its segments write through.
    """

    def __init__(self, log_dirs: list[str], default_config: Mapping[str, Any], now_ms: Callable[[], int],
                 failure_channel: LogDirFailureChannel | None = None, *,
                 files_factory: Callable[[str], LogDirFiles] = LogDirFiles) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.failure_channel = failure_channel if failure_channel is not None else LogDirFailureChannel()
        self.files = {d: files_factory(d) for d in self.log_dirs}
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
        #: checkpoint path -> the offsets last written there
        self._written: dict[str, dict[tuple[str, int], int]] = {}
        #: held while checkpoint files are written (from whichever thread)
        self._checkpoint_lock = threading.Lock()

    def _config_for(self, topic: str) -> LogConfig:
        return LogConfig.from_topic_config({**self.default_config, **self._topic_configs.get(topic, {})})

    def load(self) -> None:
        """
        Open every partition log found in the log directories, recovering
        unclean ones.  A directory whose loading fails with an I/O error goes
        offline (reported to the failure channel, its logs loaded so far
        dropped, L{offline_partitions} naming them) and the others load, as
        Kafka's C{LogManager.loadLogs} does.

        @raise LogDirsFailedError: every log directory failed.
        @raise KafkaStorageError: a partition is in two log directories.
        """
        for log_dir in self.log_dirs:
            if log_dir in self.failure_channel.offline:
                continue
            seen: list[tuple[str, int]] = []
            try:
                self._load_log_dir(log_dir, seen)
            except _DuplicateLogError:
                raise
            except (OSError, KafkaStorageError) as e:  # a segment that cannot be opened wraps its OSError
                self.failure_channel.maybe_add_offline_log_dir(log_dir, f"loading its logs failed: {e}")
                self.offline_partitions[log_dir] = sorted(set(self.offline_partitions.get(log_dir, [])) | set(seen))
        if not self.live_log_dirs:
            raise LogDirsFailedError(self.offline_log_dirs)

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
        try:
            log = PartitionLog(os.path.join(log_dir, f"{topic}-{partition}"), topic, partition,
                               self._config_for(topic), now_ms=self.now_ms, files=self.files[log_dir])
        except (KafkaStorageError, OSError) as e:
            message = f"cannot create the log of {topic}-{partition}: {e}"
            self.failure_channel.maybe_add_offline_log_dir(log_dir, message)
            raise LogDirsFailedError({log_dir: message}) from e
        self._logs[tp] = log
        self._log_dir_of[tp] = log_dir
        return log

    def delete(self, topic: str, partition: int) -> bool:
        """Remove a partition's log and directory. @return: whether it existed."""
        log = self._logs.pop((topic, partition), None)
        self._log_dir_of.pop((topic, partition), None)
        if log is None:
            return False
        log.delete()
        return True

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
        for (topic, _), log in self._logs.items():
            if topic not in configs:
                configs[topic] = self._config_for(topic)
            log.config = configs[topic]

    def update_config(self, topic: str, topic_config: Mapping[str, Any]) -> None:
        """Apply a topic's new config (overrides of the defaults) to all its partitions."""
        self._topic_configs[topic] = dict(topic_config)
        config = self._config_for(topic)
        for (t, _), log in self._logs.items():
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
        for log in self._offline_logs:
            log.close_handlers()
        self._offline_logs.clear()
        self._logs.clear()
        self._log_dir_of.clear()
