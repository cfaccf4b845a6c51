"""
Future logs: a partition's replica moving from one log directory of a broker
to another (AlterReplicaLogDirs, KIP-113).  While it moves the broker keeps
two logs of the partition: the I{current} log, which serves it, and the
I{future} log in the destination directory, which
L{kafkatw.broker.replica_alter_log_dirs} fills from the current one.  The
names are Kafka's (C{UnifiedLog.logFutureDirName}, C{logDeleteDirName}), with
one identifier per move::

    <log dir a>/orders-0/                                    the current log
    <log dir b>/orders-0.6f1c0c2e4d5b4c1c9a2b3c4d5e6f7a8b-future   the future log

When the future log has caught up, the swap
(L{kafkatw.storage.log_manager.LogManager.replace_current_with_future_log})
renames, in this order, each rename atomic and followed by an fsync of its
parent directory::

    1. <a>/orders-0        -> <a>/orders-0.<id>-delete   (the old log, deleted later)
    2. <b>/orders-0.<id>-future -> <b>/orders-0          (the new current log)

Kafka renames in the other order (future first), so that a crash between the
two renames leaves two C{orders-0} directories, which its next start refuses.
Here a crash between them leaves a C{-delete} directory and a C{-future}
directory of the same id and no C{orders-0} anywhere: the swap had begun, so
the future log was complete and flushed, and L{recover_interrupted_moves}
finishes it (rename 2) at the next start.  A C{-delete} directory is removed
at start-up only when its swap is known complete; when a log dir cannot be
read it may hold the future log, so the C{-delete} directory becomes the
current log again (L{recover_interrupted_moves}).  A C{-future} directory
whose partition still has its current log is loaded as a future log and its
move resumes, as Kafka does.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid

from twisted.logger import Logger

from kafkatw.storage.files import sync_directory

__all__ = ["FUTURE_SUFFIX", "DELETE_SUFFIX", "future_dir_name", "delete_dir_name", "parse_moving_dir",
           "recover_interrupted_moves", "new_move_id"]

_log = Logger()

FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
#: C{<topic>-<partition>.<32 hex digits>-future|-delete}
_MOVING_DIR = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})(-future|-delete)$")


def new_move_id() -> str:
    """A new move's identifier: 32 hex digits (Kafka's C{UUID} without dashes)."""
    return uuid.uuid4().hex


def future_dir_name(topic: str, partition: int, move_id: str) -> str:
    """C{orders-0.<id>-future} (Kafka's C{UnifiedLog.logFutureDirName})."""
    return f"{topic}-{partition}.{move_id}{FUTURE_SUFFIX}"


def delete_dir_name(topic: str, partition: int, move_id: str) -> str:
    """C{orders-0.<id>-delete} (Kafka's C{UnifiedLog.logDeleteDirName})."""
    return f"{topic}-{partition}.{move_id}{DELETE_SUFFIX}"


def parse_moving_dir(name: str) -> tuple[str, int, str, str] | None:
    """
    C{(topic, partition, move id, suffix)} of a future or deleted log's
    directory name (suffix L{FUTURE_SUFFIX} or L{DELETE_SUFFIX}), C{None}
    for any other name.
    """
    match = _MOVING_DIR.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2)), match.group(3), match.group(4)


def recover_interrupted_moves(log_dirs: list[str], every_log_dir: bool = True) -> list[tuple[str, int]]:
    """
    At start-up, before the logs are loaded, settle each C{-delete}
    directory (see the module docstring).  Its swap is known complete when
    the partition's directory (C{orders-0}) is in a log dir: it is removed.
    A swap cut short between its two renames (the C{-future} directory of
    the same id is there, no C{orders-0}) is finished, then it is removed.
    With neither: when every log dir was listed the partition was deleted
    after its swap (the old log waits C{log.segment.delete.delay.ms}) and it
    is removed; otherwise the future log may be in a log dir that cannot be
    read, so the swap is not known complete and the C{-delete} directory is
    renamed back to C{orders-0}: the old log serves again (and the move
    resumes when that dir is back).  Two such directories of one partition
    are both left as they are (which is the newer is not known).

    @param log_dirs: the live log directories (absolute paths); one that
        cannot be listed is skipped (loading it fails and takes it offline).
    @param every_log_dir: C{log_dirs} are all the broker's log dirs (none offline).
    @return: the partitions whose swap was finished.
    """
    listing: dict[str, list[str]] = {}
    for log_dir in log_dirs:
        try:
            listing[log_dir] = sorted(os.listdir(log_dir))
        except OSError as e:
            _log.warn("cannot list {log_dir} ({error}): moves between log dirs it took part in are not settled",
                      log_dir=log_dir, error=e)
            continue
    every_listed = every_log_dir and len(listing) == len(log_dirs)
    current = {name for names in listing.values() for name in names}
    futures: dict[tuple[str, int, str], str] = {}
    deletes: list[tuple[str, str, int, str]] = []
    for log_dir, names in listing.items():
        for name in names:
            parsed = parse_moving_dir(name)
            if parsed is None:
                continue
            topic, partition, move_id, suffix = parsed
            if suffix == FUTURE_SUFFIX:
                futures[(topic, partition, move_id)] = log_dir
            else:
                deletes.append((log_dir, topic, partition, move_id))
    finished = []
    unsettled: dict[str, list[str]] = {}
    for log_dir, topic, partition, move_id in deletes:
        name = f"{topic}-{partition}"
        path = os.path.join(log_dir, delete_dir_name(topic, partition, move_id))
        future_dir = futures.get((topic, partition, move_id))
        if name not in current and future_dir is not None:
            os.rename(os.path.join(future_dir, future_dir_name(topic, partition, move_id)),
                      os.path.join(future_dir, name))
            sync_directory(future_dir)
            current.add(name)
            finished.append((topic, partition))
            _log.warn("{partition}: finished moving its log from {source} to {destination} (the broker stopped"
                      " during the swap)", partition=name, source=log_dir, destination=future_dir)
        elif name not in current and not every_listed:
            unsettled.setdefault(name, []).append(path)
            continue
        shutil.rmtree(path, ignore_errors=True)
    for name, paths in sorted(unsettled.items()):
        if len(paths) > 1:
            _log.error("{partition}: {paths} are old logs of moves whose destinations cannot be read: left as"
                       " they are (no log of {partition} is loaded)", partition=name, paths=", ".join(paths))
            continue
        log_dir = os.path.dirname(paths[0])
        try:
            os.rename(paths[0], os.path.join(log_dir, name))
            sync_directory(log_dir)
        except OSError as e:
            _log.error("{partition}: renaming {path} back failed ({error}): left as it is", partition=name,
                       path=paths[0], error=e)
            continue
        _log.warn("{partition}: its move to another log dir is not known to be complete (a log dir cannot be"
                  " read): its old log {path} serves again", partition=name, path=paths[0])
    return finished
