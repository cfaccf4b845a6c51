"""
Log directory failure (KIP-112, "Handle disk failure for JBOD"): the file
operations of one log directory, and the channel its I/O errors go to.

An I/O error on a log directory (C{ENOSPC} from a full disk, C{EIO} from a
failing one, C{ENOENT} when the directory vanished) takes the whole directory
offline, as Kafka does: any error of any log operation is reported to the
broker's L{LogDirFailureChannel} with the directory, which calls its
listeners once per directory (Kafka's C{LogDirFailureChannel} and the
C{ReplicaManager}'s C{LogDirFailureHandler}).  The broker then stops serving
the partitions of that directory (L{kafkatw.broker.replica_manager}), tells
the controller (docs/replication.md, "Disk failures"), and keeps serving the
partitions of its other directories; when every directory has failed it
stops.

L{LogDirFiles} holds the file operations the segments of one directory use
for their C{.log} files: C{open}, C{write}, C{writev}, C{fsync}, C{ftruncate},
which are C{os}'s own functions (an append costs one attribute lookup more
than calling C{os.writev} directly).  It is also where tests inject faults,
deterministically and only in that directory::

    files.fail("writev", errno.ENOSPC)          # the next writev raises OSError(ENOSPC)
    files.fail("fsync", errno.EIO, times=None)  # every fsync raises, until heal()
    files.heal()
"""

from __future__ import annotations

import errno
import os
from typing import Any, Callable

from twisted.logger import Logger

from kafkatw.errors import KafkaStorageError

__all__ = ["LogDirFiles", "LogDirFailureChannel", "LogDirsFailedError", "FILE_OPERATIONS", "OS_FILES",
           "OpenFilesLimitError", "OPEN_FILES_RESERVE", "out_of_descriptors"]

_log = Logger()

#: The operations of L{LogDirFiles}, each the C{os} function of that name.
FILE_OPERATIONS = ("open", "write", "writev", "fsync", "ftruncate")


class LogDirFiles:
    """
    The file operations of the segments of one log directory, as
    attributes (C{files.writev(fd, buffers)}); normally C{os}'s functions.

    @ivar path: the log directory (for the error's file name).
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.open = os.open
        self.write = os.write
        self.writev = os.writev
        self.fsync = os.fsync
        self.ftruncate = os.ftruncate

    def __repr__(self) -> str:
        return f"<LogDirFiles {self.path}>"

    def fail(self, operation: str, error_number: int = errno.EIO, times: int | None = 1) -> None:
        """
        Make C{operation} raise C{OSError(error_number)} without doing
        anything, for its next C{times} calls (C{None}: every call until
        L{heal}); then it is C{os}'s function again.

        @param operation: one of L{FILE_OPERATIONS}.
        @raise ValueError: another operation name.
        """
        if operation not in FILE_OPERATIONS:
            raise ValueError(f"{operation!r} is not one of {', '.join(FILE_OPERATIONS)}")
        original = self.operation(operation)
        remaining = [times]

        def failing(*args: Any, **kwargs: Any) -> Any:
            if remaining[0] is not None:
                remaining[0] -= 1
                if remaining[0] <= 0:
                    setattr(self, operation, original)
            name = args[0] if operation == "open" and args else self.path
            raise OSError(error_number, os.strerror(error_number), name)

        setattr(self, operation, failing)

    def heal(self) -> None:
        """Every operation is its own function again (L{operation})."""
        for operation in FILE_OPERATIONS:
            setattr(self, operation, self.operation(operation))

    def operation(self, name: str) -> Callable[..., Any]:
        """
        The function of operation C{name} when no fault is injected: C{os}'s;
        a subclass that models the disk (L{kafkatw.simulation.disk}) gives its own.
        """
        return getattr(os, name)


#: The files of logs opened without a log directory's L{LogDirFiles} (tools, tests).
OS_FILES = LogDirFiles()


class LogDirsFailedError(KafkaStorageError):
    """
    I/O errors of whole log directories (Kafka's C{KafkaStorageException}
    from C{LogDirFailureChannel.maybeAddOfflineLogDir}), e.g. the checkpoint
    writes of several directories, some of which failed.

    @ivar failures: log directory -> what failed there.
    """

    def __init__(self, failures: dict[str, str]) -> None:
        super().__init__("; ".join(f"{d}: {m}" for d, m in failures.items()))
        self.failures = dict(failures)


class LogDirFailureChannel:
    """
    Where storage errors are reported with their log directory (Kafka's
    C{LogDirFailureChannel}).  The first report of a directory takes it
    offline for the life of the process: its error is kept, and each
    listener is called once with C{(log_dir, message)}; later reports of it
    are ignored.  Listeners run at once, on the reporting (reactor) thread.

    @ivar offline: log directory -> the error that took it offline.
    """

    def __init__(self) -> None:
        self.offline: dict[str, str] = {}
        self._listeners: list[Callable[[str, str], object]] = []

    def add_listener(self, listener: Callable[[str, str], object]) -> None:
        """Call C{listener(log_dir, message)} when a directory goes offline (in the order added)."""
        self._listeners.append(listener)

    def has_offline_log_dir(self, log_dir: str) -> bool:
        return log_dir in self.offline

    def maybe_add_offline_log_dir(self, log_dir: str, message: str) -> bool:
        """
        Report a storage error of C{log_dir}.

        @return: whether this report took it offline (the first one).
        """
        if log_dir in self.offline:
            return False
        self.offline[log_dir] = message
        _log.error("log dir {log_dir} is offline: {message}", log_dir=log_dir, message=message)
        for listener in list(self._listeners):
            listener(log_dir, message)
        return True


class OpenFilesLimitError(KafkaStorageError):
    """
    A log could not be opened or created for want of file descriptors
    (C{EMFILE}, C{ENFILE}, or fewer than L{OPEN_FILES_RESERVE} left below the
    soft C{RLIMIT_NOFILE}): a limit of the process, not a failure of its log
    directory, which stays online (docs/operations.md, "Open files").
    """


#: Descriptors kept free below the soft C{RLIMIT_NOFILE} when a log is created:
#: for connections, index writes and checkpoints, which would otherwise fail with C{EMFILE}.
OPEN_FILES_RESERVE = 256


def out_of_descriptors(error: BaseException | None) -> bool:
    """Whether C{error}, or an error it was raised from, is C{EMFILE} or C{ENFILE}."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE):
            return True
        error = error.__cause__
    return False

