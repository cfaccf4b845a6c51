"""
The session guard: a broker's ZooKeeper session ends as soon as the broker's
process dies while its host stays up, instead of at the session timeout.

A broker killed with SIGKILL (an OOM kill, a crash) cannot close its
ZooKeeper session.  Its TCP connection is closed by the kernel at once, but
ZooKeeper keeps the session, with C{/brokers/ids/<id>} and C{/controller},
for C{zookeeper.session.timeout.ms} (18 s): the client might be reconnecting
to another server.  Only then does the controller elect new leaders (Kafka
behaves the same).  ZooKeeper ends a session early only for a client that
presents its id and password (ZooKeeper Programmer's Guide, "ZooKeeper
Sessions"), so no peer broker and no controller can end it, and a peer cannot
know for certain that the process is dead: a refused or reset connection
may be a firewall rule, a restart, or a network fault while the broker still
holds its session and still acts as a leader.

On the broker's own host the death is certain, and the password is at hand.
A broker holds an exclusive C{flock(2)} on C{<log dir>/.lock} from before its
session registers anything until after the session is closed, and records the
session's id and password beside it (L{kafkatw.broker.log_dir_lock}); the
kernel drops the lock the moment the process dies, however it dies.  With
C{zookeeper.session.guard.enable} the broker starts this guard, a small
process (C{python -m kafkatw.broker.session_guard}, in a session of its own,
about 60 MB of memory), once it holds the lock (L{spawn}).  The guard:

  1. blocks in C{flock(LOCK_EX)} on the first log dir's C{.lock}: it returns
     only when no process holds the lock, i.e. the broker process has died or
     has stopped cleanly (having closed its session and removed the record);
  2. drops that lock and takes the broker's lock on every log dir
     (L{LogDirLock.acquire}, non-blocking; when a restarted broker holds it
     already, that broker ends the dead session itself and the guard exits);
  3. reads the recorded sessions (this host's, these directories') and
     releases the lock at once (microseconds: a broker starting again is not
     kept out);
  4. ends each recorded session (L{ZooKeeperClient.end_session}), as the
     restarted broker would: ZooKeeper deletes that session's ephemeral nodes,
     the controller sees the broker leave and elects new leaders, or brokers
     elect a new controller.  A session that had ended already is left alone.
     Then it exits.  When ZooKeeper cannot be reached it gives up after
     C{zookeeper.session.timeout.ms} (the session has expired by then anyway).

That is the restart's own reasoning (L{kafkatw.broker.log_dir_lock}): whoever
holds the lock knows that the owner of any recorded session still open died
without closing it.  So the guard never ends the session of a live process,
and never another broker's: what it ends is what the session timeout would
end later, minus the wait.  What it cannot cover: the host dying (or its
network), the guard dying with the broker (C{kill -9} of both, a container
stopped whole), a frozen but living broker (SIGSTOP, swapping): those still
take the session timeout, as in Kafka.

If a broker started again took the lock before a woken guard did (step 1
does not hand the lock over), the old guard waits on, now for the new
process: redundant, never wrong, since it acts only on what it reads while
holding the lock.  A guard that exits while its broker runs (killed, or
failed) is logged by the broker (L{GuardProcess}); the broker runs on
without one.

The guard logs to the stderr it inherits from the broker (a service
manager's journal); the restarted broker also says whether the session it
found recorded had ended already.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import sys
from typing import Any, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..zookeeper.bridge import ZooKeeperError
from .log_dir_lock import LOCK_FILE, LogDirLock, LogDirLockedError, RecordedSession

__all__ = ["wait_until_unlocked", "dead_sessions", "end_sessions", "GuardProcess", "spawn", "main"]

_log = Logger(namespace="kafkatw.broker.session_guard")  # also when run as __main__


def wait_until_unlocked(log_dir: str) -> bool:
    """
    Block until no process holds C{<log_dir>/.lock} (C{flock(LOCK_EX)},
    waiting), then drop the lock again.

    @return: C{False} when there is no lock file (nothing to guard).
    @raise OSError: the file cannot be opened or locked.
    """
    try:
        fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # retried by Python when a signal interrupts it (PEP 475)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return True


def dead_sessions(log_dirs: Sequence[str], host: str | None = None) -> list[RecordedSession]:
    """
    The sessions recorded in C{log_dirs} by processes that no longer hold them:
    take the directories' lock (without waiting), read the records
    (L{LogDirLock.recorded_sessions}: this host's, these directories'), and
    release the lock.

    @return: the sessions; C{[]} when another process holds the lock again (a
        broker started anew there ends them itself).
    """
    lock = LogDirLock(log_dirs, host)
    try:
        lock.acquire()
    except LogDirLockedError:
        return []
    try:
        return lock.recorded_sessions()
    finally:
        lock.release()


async def end_sessions(zookeeper: Any, sessions: Sequence[RecordedSession], broker_id: int) -> list[bool | None]:
    """
    End each session (L{kafkatw.zookeeper.bridge.ZooKeeperClient.end_session}), logging each outcome.

    @param zookeeper: a L{kafkatw.zookeeper.bridge.ZooKeeperClient} (it need not be started).
    @return: per session, whether it was open and is now closed (C{None}: ZooKeeper could not be reached).
    @raise Exception: anything but a L{ZooKeeperError} (a bug: the guard exits non-zero with the traceback).
    """
    results: list[bool | None] = []
    for session in sessions:
        try:
            ended = await zookeeper.end_session(session.session_id, session.password)
        except ZooKeeperError as e:
            _log.warn("broker {id}'s process died; could not end its ZooKeeper session {session}: {error}; it "
                      "expires at the session timeout", id=broker_id, session=f"{session.session_id:#x}", error=e)
            results.append(None)
            continue
        if ended:
            _log.info("broker {id}'s process died; ended its ZooKeeper session {session}: its registration is "
                      "deleted now, not at the session timeout", id=broker_id, session=f"{session.session_id:#x}")
        else:
            _log.info("broker {id}'s ZooKeeper session {session} had ended already", id=broker_id,
                      session=f"{session.session_id:#x}")
        results.append(ended)
    return results


class GuardProcess(ProcessProtocol):
    """
    The broker's end of its guard process (L{spawn}).

    The guard exits by itself once the broker's lock is released; while the
    broker runs, an exit (the guard killed, or failed) leaves the broker
    without one, which is logged (warning) once.

    @ivar pid: the guard's process id, once spawned.
    @ivar ended: fires with the exit's reason (L{twisted.internet.error.ProcessDone}
        or L{twisted.internet.error.ProcessTerminated}) once the guard has exited.
    """

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.pid: int | None = None
        self.ended: Deferred = Deferred()
        self._broker_stopping = False

    def connectionMade(self) -> None:  # noqa: N802 (Twisted's name)
        self.pid = self.transport.pid

    def broker_stopping(self) -> None:
        """The broker is stopping: the guard's exit from now on is expected (it follows the lock's release)."""
        self._broker_stopping = True

    def processEnded(self, reason: Failure) -> None:  # noqa: N802 (Twisted's name)
        if not self._broker_stopping:
            _log.warn("broker {id}'s session guard (pid {pid}) exited while the broker runs: {reason}; if this"
                      " broker's process dies now, its ZooKeeper session lasts until zookeeper.session.timeout.ms",
                      id=self.broker_id, pid=self.pid, reason=reason.getErrorMessage())
        self.ended.callback(reason.value)


def spawn(reactor: Any, guard: GuardProcess, log_dirs: Sequence[str], zookeeper_hosts: str,
          session_timeout_ms: int, broker_id: int) -> Any:
    """
    Start the guard of a broker that holds C{log_dirs}' lock (call it only
    then: a guard started before would find the lock free at once).

    The guard gets the broker's environment, stdout and stderr, and no other
    descriptor (it must not share the broker's lock: Twisted closes the
    rest in the child).  It starts a session of its own (L{main}), so that a
    terminal's SIGINT or SIGHUP, or a signal to the broker's process group,
    goes to the broker alone.

    @param reactor: an L{twisted.internet.interfaces.IReactorProcess}.
    @param guard: the protocol told of the guard's exit.
    @param log_dirs: the broker's log directories (real paths, as L{LogDirLock.log_dirs}).
    @param zookeeper_hosts: C{HOST:PORT[,...]} (no chroot needed: sessions are the ensemble's).
    @param session_timeout_ms: how long the guard tries to reach ZooKeeper (ms).
    @return: the guard's L{twisted.internet.interfaces.IProcessTransport}.
    @raise OSError: the process could not be started.
    """
    command = [sys.executable, "-m", "kafkatw.broker.session_guard", "--zookeeper", zookeeper_hosts,
               "--session-timeout-ms", str(session_timeout_ms), "--broker-id", str(broker_id), "--", *log_dirs]
    return reactor.spawnProcess(guard, sys.executable, command, env=dict(os.environ), childFDs={1: 1, 2: 2})


def main(argv: Sequence[str] | None = None) -> int:
    """The guard process (L{spawn}); returns when the broker's process is gone and its session handled."""
    parser = argparse.ArgumentParser(prog="python -m kafkatw.broker.session_guard",
                                     description="End a kafkatw broker's ZooKeeper session when its process dies.")
    parser.add_argument("--zookeeper", required=True, help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--session-timeout-ms", type=int, default=18000)
    parser.add_argument("--broker-id", type=int, default=-1)
    parser.add_argument("log_dirs", nargs="+")
    args = parser.parse_args(argv)
    try:
        os.setsid()  # out of the broker's session and process group
    except PermissionError:
        pass  # a process group leader already (started by hand from a shell)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    # Everything the guard needs is imported before it waits: after the death, only I/O is left.
    from twisted.internet import task
    from twisted.logger import globalLogBeginner, textFileLogObserver

    from ..zookeeper.bridge import ZooKeeperClient

    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    if not wait_until_unlocked(args.log_dirs[0]):
        return 0
    sessions = dead_sessions(args.log_dirs)
    if not sessions:
        return 0  # a clean stop (its record removed), or a new holder that ends them itself

    async def end(reactor: Any) -> None:
        # Past the session timeout the session has expired anyway: no longer wait for ZooKeeper then.
        zookeeper = ZooKeeperClient(args.zookeeper, reactor, session_timeout_ms=args.session_timeout_ms,
                                    connection_timeout_ms=args.session_timeout_ms)
        await end_sessions(zookeeper, sessions, args.broker_id)

    try:
        task.react(lambda reactor: Deferred.fromCoroutine(end(reactor)))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
