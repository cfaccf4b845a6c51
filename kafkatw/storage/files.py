"""
Small files written atomically: checkpoints, C{meta.properties}, snapshots.

A reader after a crash sees either the old file or the new one, never a torn
one: the bytes go to C{<path>.tmp}, are fsynced, renamed over C{path}, and the
directory is fsynced so that the rename itself is durable (as Kafka's
C{Utils.atomicMoveWithFallback} after C{FileChannel.force}).
"""

from __future__ import annotations

import os

__all__ = ["write_atomically", "sync_file", "sync_directory"]


def write_atomically(path: str, data: bytes, sync_directory: bool = True, mode: int = 0o644,
                     fsync: bool = True) -> None:
    """
    Replace C{path} with C{data}: temporary file, fsync, rename, and (with
    C{sync_directory}) fsync of the directory.  The file gets C{mode} (0600
    for a secret), also when a leftover temporary file existed.  With
    C{fsync=False} neither the file nor the directory is synced: still
    whole-or-nothing for a crash of the process, not for one of the machine
    (for a file the next start can do without: Kafka's leader epoch
    truncations, KAFKA-15046).

    @raise OSError: the write failed; C{path} is unchanged.
    """
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # a leftover temporary file keeps its mode through O_CREAT
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_directory and fsync:
        _sync_parent(path)


def sync_file(path: str, sync_directory: bool = True) -> None:
    """
    C{fsync} C{path} and (with C{sync_directory}) its directory: what
    L{write_atomically} with C{fsync} does after the fact, for a file written
    with C{fsync=False} that must now be durable.

    @raise FileNotFoundError: C{path} is gone (its directory was deleted).
    @raise OSError: the sync failed.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if sync_directory:
        _sync_parent(path)


def sync_directory(path: str) -> None:
    """C{fsync} a directory, so that the renames, creations and deletions in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_parent(path: str) -> None:
    sync_directory(os.path.dirname(path) or ".")
