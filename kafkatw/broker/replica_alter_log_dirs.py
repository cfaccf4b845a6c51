"""
Moving replicas between the log directories of one broker (AlterReplicaLogDirs,
KIP-113): Kafka's C{ReplicaAlterLogDirsManager} and C{ReplicaAlterLogDirsThread}.

C{AlterReplicaLogDirs} (L{ReplicaAlterLogDirsManager.alter}) creates the
partition's I{future log} in the destination directory
(L{kafkatw.storage.future_log}); from then on the manager copies the current
log into it in bounded steps on the reactor, as a follower copies its
leader's log, with the follower's append
(L{kafkatw.storage.log.PartitionLog.append_as_follower}: batches byte for
byte at their offsets, the leader epochs and producer state loaded from their
headers).  Each step, for each moving partition:

  1. the future log follows the current one: it is truncated where the
     current log was truncated (by leader epoch, as a follower truncates;
     or to the current log end offset), and moves its log start offset up
     to the current one (retention, DeleteRecords);
  2. up to C{replica.fetch.max.bytes} of batches are read from the current
     log at the future log's end offset and appended to it;
  3. when the future log has every batch (same log end offset, no append of
     the current turn waiting to be written) it is swapped in
     (L{kafkatw.storage.log_manager.LogManager.replace_current_with_future_log}):
     the partition's log object is replaced in that same reactor turn, so
     that no append or read sees half a swap.  The old log is deleted
     C{log.segment.delete.delay.ms} later (reads under way keep its descriptors).

A step that copied something is followed at once by the next (or, with
C{replica.alter.log.dirs.io.max.bytes.per.second}, when the bytes copied
are paid for at that rate: Kafka's C{ReplicaAlterLogDirsIOThrottle});
otherwise the next comes C{replica.fetch.backoff.ms} later (capped at 100 ms).  Appends
happen between steps, so a move whose copy outpaces the producers catches up
and swaps in the turn that copies its last batch.

A storage error during the copy takes offline the log dir of the log it
came from: the current log's, or the destination's for the future log's
(Kafka's C{ReplicaAlterLogDirsThread}); out of file descriptors
(C{EMFILE}/C{ENFILE}) takes none offline and cancels the move.

A broker stopped (or killed) during a move leaves the old log serving and
the future log on disk: the next start loads it and the move resumes
(L{kafkatw.storage.log_manager.LogManager.load}), as Kafka's does.

Errors, as Kafka's C{ReplicaManager.alterReplicaLogDirs} gives them:
C{LOG_DIR_NOT_FOUND} (not one of C{log.dirs}, as an absolute path),
C{KAFKA_STORAGE_ERROR} (the destination or the partition is offline, or a
log dir is offline: no future log is created then; or the future log cannot
be created: out of file descriptors, as for a new log, leaves the destination
online), C{REPLICA_NOT_AVAILABLE}
(no replica here yet: the directory is remembered, and the replica is
created there when it is assigned, as C{kafka-reassign-partitions.sh}
expects), C{INVALID_TOPIC_EXCEPTION} (a future log's directory name would be
longer than 255 bytes).

Source: Apache Kafka C{ReplicaManager.alterReplicaLogDirs},
C{ReplicaAlterLogDirsThread}, C{Partition.maybeReplaceCurrentWithFutureReplica},
C{LogManager.replaceCurrentWithFutureLog}; KIP-113.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from twisted.logger import Logger

from ..errors import ErrorCode, KafkaStorageError
from ..storage.future_log import future_dir_name, new_move_id
from ..storage.log import UnexpectedAppendOffsetError
from ..storage.log_dir_failure import OpenFilesLimitError, out_of_descriptors

__all__ = ["ReplicaAlterLogDirsManager"]

_log = Logger()
_E = ErrorCode
#: Kafka's limit on a file name (KAFKA-4893).
_MAX_DIR_NAME = 255


class _CurrentLogFailed(Exception):
    """A storage error of the current log met while the future log follows it (its C{error})."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class ReplicaAlterLogDirsManager:
    """
    The moves of replicas between this broker's log dirs.

    @param replica_manager: the broker's
        L{kafkatw.broker.replica_manager.ReplicaManager} (its C{log_manager},
        C{partitions}, C{offline_partitions}).
    @param reactor: provides C{callLater}.
    @param config: broker config values: C{replica.fetch.max.bytes} (bytes
        copied per partition and step), C{replica.fetch.backoff.ms},
        C{log.segment.delete.delay.ms} (ms before a replaced log is deleted),
        C{replica.alter.log.dirs.io.max.bytes.per.second} (bytes/s copied,
        all moves together).

    @ivar moves_completed: swaps done since the start (tests, metrics).
    """

    def __init__(self, replica_manager: Any, reactor: Any, config: Mapping[str, Any]) -> None:
        self.replica_manager = replica_manager
        self.log_manager = replica_manager.log_manager
        self.reactor = reactor
        self.step_bytes = int(config.get("replica.fetch.max.bytes", 1048576))
        self.idle_s = min(int(config.get("replica.fetch.backoff.ms", 1000)), 100) / 1000.0
        self.delete_delay_s = int(config.get("log.segment.delete.delay.ms", 60000)) / 1000.0
        self.rate = float(config.get("replica.alter.log.dirs.io.max.bytes.per.second", float("inf")))
        self.moves_completed = 0
        self._moving: list[tuple[str, int]] = []
        self._timer: Any = None
        self._deletions: list[tuple[Any, Any]] = []
        self._stopped = False

    # --- life cycle --------------------------------------------------------------

    def start(self) -> None:
        """Resume the moves whose future logs the log manager loaded."""
        for key in sorted(self.log_manager.future_logs):
            _log.info("resuming the move of {partition} to {log_dir}", partition=f"{key[0]}-{key[1]}",
                      log_dir=self.log_manager.future_log_dir_of(*key))
            self._moving.append(key)
        self._wake(0)

    def stop(self) -> None:
        """Stop copying (the future logs stay, closed by the log manager) and delete the replaced logs now."""
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        for timer, log in self._deletions:
            if timer.active():
                timer.cancel()
                self.log_manager.delete_old_log(log)
        self._deletions = []

    # --- AlterReplicaLogDirs -------------------------------------------------------

    def alter(self, topic: str, partition: int, log_dir: str) -> ErrorCode:
        """
        Move C{topic-partition}'s replica here to C{log_dir} (see the module
        docstring for the errors).  A move to the directory the replica is in
        does nothing (and cancels a move under way); a move to another
        directory than the one of a move under way cancels that one first.

        @return: the partition's error code in the AlterReplicaLogDirs response.
        """
        lm = self.log_manager
        key = (topic, partition)
        if len(future_dir_name(topic, partition, "0" * 32).encode()) > _MAX_DIR_NAME:
            return _E.invalid_topic_exception
        path = os.path.normpath(log_dir) if os.path.isabs(log_dir) else None
        if path not in lm.log_dirs:
            return _E.log_dir_not_found
        if path in lm.offline_log_dirs or key in self.replica_manager.offline_partitions:
            return _E.kafka_storage_error
        moving_to = lm.future_log_dir_of(topic, partition)
        if moving_to is not None and moving_to != path:
            self._cancel(key, f"its destination changed to {path}")
            moving_to = None
        current = lm.get(topic, partition)
        if current is None or key not in self.replica_manager.partitions:
            lm.preferred_log_dirs[key] = path
            return _E.replica_not_available
        if lm.log_dir_of(topic, partition) == path or moving_to == path:
            return _E.none
        if lm.offline_log_dirs:
            return _E.kafka_storage_error  # Kafka creates no future log while a log dir is offline
        try:
            lm.create_future_log(topic, partition, path, new_move_id())
        except KafkaStorageError:
            return _E.kafka_storage_error
        _log.info("moving {partition} from {source} to {destination}", partition=f"{topic}-{partition}",
                  source=lm.log_dir_of(topic, partition), destination=path)
        if key not in self._moving:
            self._moving.append(key)
        self._wake(0)
        return _E.none

    def _cancel(self, key: tuple[str, int], why: str) -> None:
        if key in self._moving:
            self._moving.remove(key)
        try:
            removed = self.log_manager.remove_future_log(*key)
        except (KafkaStorageError, OSError) as e:
            _log.warn("removing the future log of {partition} failed: {error}", partition=f"{key[0]}-{key[1]}",
                      error=e)
            return
        if removed:
            _log.info("cancelled the move of {partition}: {why}", partition=f"{key[0]}-{key[1]}", why=why)

    # --- the copy ------------------------------------------------------------------

    def _wake(self, delay_s: float) -> None:
        if self._stopped or not self._moving:
            return
        if self._timer is not None and self._timer.active():
            if delay_s > 0:
                return
            self._timer.cancel()
        self._timer = self.reactor.callLater(delay_s, self.step)

    def step(self) -> int:
        """
        One step of every move (the module docstring's 1–3).

        @return: bytes copied.
        """
        self._timer = None
        copied = 0
        for key in list(self._moving):
            try:
                copied += self._advance(key)
            except KafkaStorageError as e:
                _log.error("moving {partition} between log dirs failed: {error}; the move is cancelled",
                           partition=f"{key[0]}-{key[1]}", error=str(e))
                self._cancel(key, "it failed")
            except Exception:
                _log.failure("moving {partition} between log dirs failed; the move is cancelled",
                             partition=f"{key[0]}-{key[1]}")
                self._cancel(key, "it failed")
        self._wake(min(copied / self.rate, 60.0) if copied else self.idle_s)
        return copied

    def _advance(self, key: tuple[str, int]) -> int:
        lm = self.log_manager
        future = lm.future_logs.get(key)
        if future is None:  # its log dir failed, or it was removed
            self._moving.remove(key)
            return 0
        current = lm.get(*key)
        if current is None:
            self._cancel(key, "its current log is gone (deleted, or its log dir failed)")
            return 0
        if current.has_pending:
            return 0  # appends of this turn not written yet: the next step copies them
        try:
            self._follow(current, future)
        except _CurrentLogFailed as e:
            self._current_failed(key, e.error)
            return 0
        except (KafkaStorageError, OSError) as e:
            self._future_failed(key, future, e)
            return 0
        copied = 0
        while future.log_end_offset < current.log_end_offset and copied < self.step_bytes:
            start = future.log_end_offset
            try:
                regions = current.read(start, self.step_bytes - copied)
                data = b"".join(os.pread(r.fileno, r.length, r.position) for r in regions)
            except (KafkaStorageError, OSError) as e:
                self._current_failed(key, e)
                return copied
            if not data:
                break
            try:
                future.append_as_follower(data)
            except UnexpectedAppendOffsetError as e:
                _log.warn("{partition}: {error}; copying again from the log start offset",
                          partition=f"{key[0]}-{key[1]}", error=str(e))
                future.truncate_fully_and_start_at(current.log_start_offset)
                return copied
            except (KafkaStorageError, OSError) as e:
                self._future_failed(key, future, e)
                return copied
            copied += len(data)
            if future.log_end_offset <= start:
                break
        if future.log_end_offset == current.log_end_offset:
            self._swap(key, current)
        return copied

    def _current_failed(self, key: tuple[str, int], error: BaseException) -> None:
        """A storage error of the current log: its log dir goes offline (not the destination)."""
        if out_of_descriptors(error):
            self._out_of_descriptors(key, error)
            return
        self.log_manager.log_failed(key[0], key[1], error)

    def _future_failed(self, key: tuple[str, int], future: Any, error: BaseException) -> None:
        """A storage error of the future log: the destination goes offline."""
        if isinstance(error, OpenFilesLimitError) or out_of_descriptors(error):
            self._out_of_descriptors(key, error)
            return
        future_dir = self.log_manager.future_log_dir_of(*key)
        if future_dir is not None:
            self.log_manager.failure_channel.maybe_add_offline_log_dir(future_dir, f"{future.directory}: {error}")

    def _out_of_descriptors(self, key: tuple[str, int], error: BaseException) -> None:
        """
        C{EMFILE}/C{ENFILE}: a limit of the process, not a failure of a log
        dir (as L{kafkatw.storage.log_manager.LogManager.get_or_create}):
        the move is cancelled, both log dirs stay online.
        """
        _log.warn("moving {partition} between log dirs: out of file descriptors at the open files limit"
                  " (ulimit -n) ({error}); the move is cancelled, the log dirs stay online",
                  partition=f"{key[0]}-{key[1]}", error=str(error))
        self._cancel(key, "out of file descriptors")

    @staticmethod
    def _follow(current: Any, future: Any) -> None:
        """
        Step 1: truncate the future log where it diverges from the current
        one, follow its log start offset.

        @raise _CurrentLogFailed: reading the current log failed.
        @raise KafkaStorageError: (or C{OSError}) writing the future log failed.
        """
        try:
            current_leo, current_start = current.log_end_offset, current.log_start_offset
            current_high_watermark = current.high_watermark
        except (KafkaStorageError, OSError) as e:
            raise _CurrentLogFailed(e) from e
        if future.log_end_offset > current_leo:
            future.truncate_to(current_leo)
        epoch = future.latest_epoch
        if epoch >= 0 and future.log_end_offset > future.log_start_offset:
            # Kafka's ReplicaAlterLogDirsThread truncates the future replica by leader epoch, as a
            # follower of the current one
            try:
                current_epoch, end = current.end_offset_for_epoch(epoch)
            except (KafkaStorageError, OSError) as e:
                raise _CurrentLogFailed(e) from e
            if current_epoch < 0:
                target = future.log_start_offset
            elif current_epoch == epoch:
                target = min(end, future.log_end_offset)
            else:
                target = min(end, future.end_offset_for_epoch(current_epoch)[1])
            if 0 <= target < future.log_end_offset:
                future.truncate_to(target)
        if current_start > future.log_end_offset:
            future.truncate_fully_and_start_at(current_start)
        elif current_start > future.log_start_offset:
            future.update_high_watermark(current_high_watermark)  # the log start offset stays below it
            future.maybe_increment_log_start_offset(current_start)

    def _swap(self, key: tuple[str, int], current: Any) -> None:
        lm = self.log_manager
        source, destination = lm.log_dir_of(*key), lm.future_log_dir_of(*key)
        old = lm.replace_current_with_future_log(*key)
        partition = self.replica_manager.partitions.get(key)
        if partition is not None and partition.log is old:
            partition.log = lm.get(*key)
        self._moving.remove(key)
        self.moves_completed += 1
        timer = self.reactor.callLater(self.delete_delay_s, self._delete, old)
        self._deletions = [(t, log) for t, log in self._deletions if t.active()] + [(timer, old)]
        _log.info("moved {partition} from {source} to {destination} at offset {offset}",
                  partition=f"{key[0]}-{key[1]}", source=source, destination=destination,
                  offset=old.log_end_offset)

    def _delete(self, log: Any) -> None:
        self.log_manager.delete_old_log(log)
