"""
A disk model for the simulation: what a broker wrote and did not C{fsync}
is lost when it crashes, and the last of it may be torn.

The segments' C{.log} files of a log directory go through one
L{LogDirFiles} (L{kafkatw.storage.log_dir_failure}); L{SimulatedDisk} is
one that remembers, for each file, its size at its last C{fsync} (the size
it had when first opened, for a file that existed: what survived a crash
is on the platter).  The files stay real (on C{/dev/shm} or the temporary
directory), so the page cache of the model is the real one; a simulated
crash (L{SimulatedDisk.crash}) puts each file back to its last synced size,
plus, with a seeded chance, a torn part of the unsynced tail: a prefix of
what was written after the last C{fsync}, cut at any byte (the pages of a
write reach the disk in order, the last one partly).  I/O errors
(C{ENOSPC}, C{EIO}) are injected with L{LogDirFiles.fail}, which keeps the
model's own operations for when the fault has passed.

What is modelled: the C{.log} files' unsynced appends (C{write},
C{writev}) and truncations (C{ftruncate}: durable at once, a truncation
a crash does not undo).

What is not: the C{.index} and C{.timeindex} files (written through
C{mmap}, not through L{LogDirFiles}) keep what was written; the recovery
of every segment past the recovery point rebuilds them from the log
anyway, and the segments below it were flushed with their indexes.  The
checkpoints, C{meta.properties} and producer snapshots are written
atomically (a temporary file, C{fsync}, C{rename}): they are either the
old or the new one, which the model keeps as written (the leader epoch
checkpoint too, whose assignments are fsynced only by the log's next flush:
tests/unit/test_leader_epoch_writes.py crashes it back to its last synced
version).  Directory entries
(created segment files, renames, unlinks) are durable at once.
"""

from __future__ import annotations

import os
import random
from typing import Any, Callable

from kafkatw.storage.log_dir_failure import FILE_OPERATIONS, LogDirFiles

__all__ = ["SimulatedDisk"]


class SimulatedDisk(LogDirFiles):
    """
    The file operations of one log directory, recording what is synced.

    @ivar synced: file path -> its size at its last C{fsync} (or open).
    @ivar fds: file descriptor -> the path it was opened on (by this disk).
    """

    def __init__(self, path: str | None = None) -> None:
        super().__init__(path)
        self.synced: dict[str, int] = {}
        self.fds: dict[int, str] = {}
        self.heal()

    def __repr__(self) -> str:
        return f"<SimulatedDisk {self.path}>"

    def operation(self, name: str) -> Callable[..., Any]:
        if name not in FILE_OPERATIONS:
            raise ValueError(f"{name!r} is not one of {', '.join(FILE_OPERATIONS)}")
        return getattr(self, f"_{name}", None) or getattr(os, name)

    def _open(self, path: str, flags: int, mode: int = 0o777) -> int:
        fd = os.open(path, flags, mode)
        self.fds[fd] = path
        if path not in self.synced:
            self.synced[path] = os.fstat(fd).st_size
        return fd

    def _fsync(self, fd: int) -> None:
        os.fsync(fd)
        path = self.fds.get(fd)
        if path is not None:
            self.synced[path] = os.fstat(fd).st_size

    def _ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)
        path = self.fds.get(fd)
        if path is not None:
            self.synced[path] = min(self.synced.get(path, length), length)

    def unsynced_bytes(self) -> int:
        """The bytes a crash now would lose (before any tearing)."""
        total = 0
        for path, synced in self.synced.items():
            try:
                total += max(0, os.stat(path).st_size - synced)
            except FileNotFoundError:
                pass
        return total

    def crash(self, rng: random.Random, tear_chance: float = 0.5) -> list[tuple[str, int, int]]:
        """
        The machine loses its page cache: each file goes back to its synced
        size, plus (with C{tear_chance}, drawn from C{rng}) a prefix of its
        unsynced tail of a random length.  The descriptors this disk opened
        are closed (the process is gone).  Then the disk starts afresh.

        @return: C{(file path under the log dir, size before, size after)} of each file cut, in path order.
        """
        cut = []
        for path in sorted(self.synced):
            synced = self.synced[path]
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                continue
            if size <= synced:
                continue
            keep = synced
            if rng.random() < tear_chance:
                keep += rng.randrange(size - synced)
            os.truncate(path, keep)
            cut.append((os.path.relpath(path, self.path) if self.path else path, size, keep))
        for fd, path in sorted(self.fds.items()):
            try:  # only if it is still this file's descriptor (the broker may have closed and reused it)
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except OSError:
                continue
            if same:
                os.close(fd)
        self.synced.clear()
        self.fds.clear()
        return cut
