"""
The log directories' lock, and the ZooKeeper session recorded under it.

A broker holds an exclusive C{flock(2)} on C{<log dir>/.lock} in each of its
log directories from the moment they are found to be its own (their
C{meta.properties} checked) until it has stopped and its ZooKeeper session is
closed (Kafka's C{LogManager.lockLogDirs} and C{FileLock}, the same file
name).  A second process given the same directories fails to start instead of
sharing them.  The kernel drops the lock when the holder's process dies,
however it dies.  The file stays, empty: deleting it would let two processes
each lock a file of that name.

Before it registers in C{/brokers/ids}, and again after each new ZooKeeper
session, the broker records its session in C{<log dir>/.zookeeper_session}
(mode 0600, replaced atomically)::

    # the ZooKeeper session of the broker process holding this log directory
    session.id=0x1000008f1300000
    session.password=5f0c2c...        <- 16 bytes, hex: whoever has it can end the session
    host=worker-3                     <- socket.gethostname() of the writer
    log.dir=/var/lib/kafkatw/data     <- the directory it was written for (real path)

The lock gives the record its meaning.  The process that wrote it held the
lock from before its session registered anything until after that session was
closed.  So a process that now holds the lock knows this about a recorded
session that is still open: its owner died without closing it.  That owner is
this broker's dead predecessor, whose registration (and C{/controller}, if it
was the controller) would otherwise stay for up to the session timeout.  The
restarted broker ends that session
(L{kafkatw.zookeeper.bridge.ZooKeeperClient.end_session}); ZooKeeper deletes
the session's ephemeral nodes at once, as it would when the session expired,
and deletes nothing that belongs to another session.  A record counts only on
the host and in the directory it names.  A copy of a log directory (another
path, another machine) therefore never ends the session of a broker still
running on the original.

Sans-reactor: plain file operations, on the reactor thread (they are small).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from dataclasses import dataclass
from typing import Iterable

from twisted.logger import Logger

from ..properties import parse_properties
from ..storage.files import write_atomically

__all__ = ["LOCK_FILE", "SESSION_FILE", "LogDirLock", "LogDirLockedError", "RecordedSession"]

_log = Logger()

#: Kafka's lock file name (C{LogManager.LockFileName}).
LOCK_FILE = ".lock"
#: The ZooKeeper session of the process holding the directory.
SESSION_FILE = ".zookeeper_session"


class LogDirLockedError(Exception):
    """Another live process (or another broker in this process) holds a log directory's lock."""


@dataclass(frozen=True)
class RecordedSession:
    """
    A ZooKeeper session recorded in a log directory (the module docstring shows the file).

    @ivar session_id: the session id (a znode's C{ephemeralOwner}).
    @ivar password: the session password (16 bytes).
    @ivar host: the host name of the process that wrote it.
    @ivar log_dir: the real path of the directory it was written for.
    """

    session_id: int
    password: bytes
    host: str
    log_dir: str

    def to_text(self) -> str:
        return ("# the ZooKeeper session of the broker process holding this log directory\n"
                f"session.id={self.session_id:#x}\nsession.password={self.password.hex()}\n"
                f"host={self.host}\nlog.dir={self.log_dir}\n")

    @classmethod
    def from_text(cls, text: str) -> "RecordedSession":
        """@raise ValueError: a key is missing or malformed."""
        properties = parse_properties(text)
        try:
            return cls(int(properties["session.id"], 16), bytes.fromhex(properties["session.password"]),
                       properties["host"], properties["log.dir"])
        except KeyError as e:
            raise ValueError(f"no {e.args[0]}") from None


class LogDirLock:
    """
    The lock on a broker's log directories, and its recorded ZooKeeper session.

    @param log_dirs: the log directories (they exist).
    @param host: this machine's name (default C{socket.gethostname()}).
    """

    def __init__(self, log_dirs: Iterable[str], host: str | None = None) -> None:
        self.log_dirs = [os.path.realpath(d) for d in log_dirs]
        self.host = host if host is not None else socket.gethostname()
        self._fds: dict[str, int] = {}

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def acquire(self) -> None:
        """
        Lock every directory's C{.lock}, without waiting; all or none.

        @raise LogDirLockedError: a directory is locked by another process, or
            by another broker of this process (one line naming it).
        @raise OSError: a C{.lock} cannot be created or opened.
        """
        try:
            for log_dir in self.log_dirs:
                fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    os.close(fd)
                    if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise LogDirLockedError(
                            f"Failed to acquire lock on file {LOCK_FILE} in {log_dir}. A kafkatw broker in another"
                            " process (or another broker of this process) is using this directory; stop it, or"
                            " give this broker other log.dirs (--log-dirs)") from None
                    raise
                self._fds[log_dir] = fd
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Drop the locks (closing the files drops them, as a process's death does).  Idempotent."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def recorded_sessions(self) -> list[RecordedSession]:
        """
        The sessions recorded by earlier holders of these directories that
        count here: written on this host, for the directory they are in.
        Others are skipped with a log line (a copied directory, an unreadable
        file).  Call only while holding the lock.

        @return: distinct sessions, in directory order.
        """
        assert self.held, "read the recorded sessions only while holding the lock"
        sessions: list[RecordedSession] = []
        for log_dir in self.log_dirs:
            path = os.path.join(log_dir, SESSION_FILE)
            try:
                with open(path, encoding="utf-8") as f:
                    recorded = RecordedSession.from_text(f.read())
            except FileNotFoundError:
                continue
            except (OSError, ValueError, UnicodeDecodeError) as e:
                _log.warn("ignoring {path}: {error}", path=path, error=e)
                continue
            if (recorded.host, recorded.log_dir) != (self.host, log_dir):
                _log.info("ignoring {path}: written on host {host} for {dir} (a copy of another log directory?),"
                          " not on {here} for {log_dir}", path=path, host=recorded.host, dir=recorded.log_dir,
                          here=self.host, log_dir=log_dir)
                continue
            if all(s.session_id != recorded.session_id for s in sessions):
                sessions.append(recorded)
        return sessions

    def record_session(self, session_id: int, password: bytes) -> None:
        """
        Record the session in every directory (replacing what was there), before
        it registers anything.  Call only while holding the lock.

        @raise OSError: a file could not be written.
        """
        assert self.held, "record a session only while holding the lock"
        for log_dir in self.log_dirs:
            text = RecordedSession(session_id, password, self.host, log_dir).to_text()
            write_atomically(os.path.join(log_dir, SESSION_FILE), text.encode("utf-8"), sync_directory=False, mode=0o600)

    def forget_session(self) -> None:
        """Remove the records (after a clean stop closed the session).  Missing files are fine."""
        for log_dir in self.log_dirs:
            try:
                os.unlink(os.path.join(log_dir, SESSION_FILE))
            except FileNotFoundError:
                pass
