"""
A real ZooKeeper server (Debian's C{zookeeper} package, 3.8) as a child process.

Used by C{--zookeeper embedded} (DESIGN.md D5), the C{kafkatw zookeeper} command
and the integration tests.  The server runs as::

    java -Xmx256m -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \\
        org.apache.zookeeper.server.ZooKeeperServerMain <data_dir>/zoo.cfg

(C{zookeeper.jar}'s manifest lists the rest of its class path.)  The generated
C{zoo.cfg} listens on 127.0.0.1 unless told otherwise (C{clientPortAddress}),
disables the Jetty admin server (it would listen on 0.0.0.0:8080) and allows
the four-letter words C{ruok}, C{conf}, C{srvr}, C{stat} and C{mntr}.

A member of an ensemble (L{QuorumServer}: C{server.N=HOST:PEER_PORT:ELECTION_PORT}
lines, and the member's own N in C{<dataDir>/myid}) runs
C{org.apache.zookeeper.server.quorum.QuorumPeerMain} on a static configuration,
as the ZooKeeper Administrator's Guide ("Clustered (Multi-Server) Setup")
describes it; ZooKeeper 3.5+'s dynamic reconfiguration stays off
(C{reconfigEnabled=false}, its default), so C{zoo.cfg} is never rewritten.  A
member serves (answers C{conf}) only while a quorum (a majority of the
C{server.N} lines) runs and has elected a leader.

The server is ready when I{our} child process serves, never when merely
something answers on the port (another ZooKeeper may hold it, and a broker
that took its answer would join that other cluster):

  1. before spawning, the port must be free (L{port_in_use}): a taken port is
     a L{ZooKeeperPortInUseError} naming the port and the setting that moves it;
  2. readiness probes send C{conf} until the answer names our C{dataDir}
     (C{<data_dir>/version-2}); ZooKeeper answers C{conf} only once it serves
     sessions ("This ZooKeeper instance is not currently serving requests"
     before; C{ruok} already answers C{imok} while the server still loads, 0.15
     to 0.2 s on an idle machine, and a client that connects then is turned
     away), and another server answers with its own C{dataDir} or not at all;
  3. the child must still be running after that answer.  A child that exited
     is a start failure that quotes the bind error from its log
     (C{java.net.BindException: Address already in use}): the port was taken
     between the check of step 1 and the child's bind.

ZooKeeper cannot listen on port 0; L{find_free_port} picks a free port.

Two flavours: L{EmbeddedZooKeeperService}, a Twisted service driven by the
reactor, and blocking helpers (L{start_blocking}, L{wait_ready},
L{stop_blocking}) for tests and command-line code that has no reactor.
"""

from __future__ import annotations

import collections
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet import protocol, task
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.logger import Logger

__all__ = [
    "ZOOKEEPER_JAR",
    "SLF4J_JAR",
    "ZooKeeperNotInstalledError",
    "ZooKeeperStartError",
    "ZooKeeperPortInUseError",
    "QuorumServer",
    "QUORUM_MAIN_CLASS",
    "check_ensemble",
    "check_myid",
    "find_free_port",
    "port_in_use",
    "java_command",
    "write_config",
    "ruok",
    "serving",
    "serving_from",
    "server_mode",
    "srvr_mode",
    "probe_host",
    "is_ours",
    "start_error_from_log",
    "start_error_from_text",
    "EmbeddedZooKeeperService",
    "start_blocking",
    "wait_ready",
    "wait_listening",
    "stop_blocking",
]

_log = Logger()

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_JAR = "/usr/share/java/slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
#: The main class of an ensemble's member (it runs L{MAIN_CLASS} itself for a standalone zoo.cfg).
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperNotInstalledError(RuntimeError):
    """java or the ZooKeeper jars are missing."""


class ZooKeeperStartError(RuntimeError):
    """The ZooKeeper process did not become ready; the message is one line for a person."""


class ZooKeeperPortInUseError(ZooKeeperStartError):
    """
    The client port is held by another process (another ZooKeeper, say).

    @ivar port: the port (on C{host}, 127.0.0.1 unless told otherwise).
    """

    def __init__(self, port: int, setting: str, detail: str = "", host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self.setting = setting
        what = f" ({detail})" if detail else ""
        super().__init__(
            f"ZooKeeper cannot listen on {host}:{port}: the port is already in use{what};"
            f" stop what holds it or choose another port with {setting}"
        )


@dataclass(frozen=True)
class QuorumServer:
    """
    One member of a ZooKeeper ensemble, as a C{server.N=HOST:PEER_PORT:ELECTION_PORT}
    line of C{zoo.cfg} names it (ZooKeeper Administrator's Guide, "Clustered
    (Multi-Server) Setup").

    @ivar server_id: N, the member's C{myid} (1..255).
    @ivar host: the address the other members reach it at; the member binds
        its own peer and election ports there.
    @ivar peer_port: the port followers connect to when this member leads
        (2888 by convention).
    @ivar election_port: the port of leader election (3888 by convention).
    """

    server_id: int
    host: str
    peer_port: int
    election_port: int

    @classmethod
    def parse(cls, text: str) -> "QuorumServer":
        """
        Parse C{N=HOST:PEER_PORT:ELECTION_PORT} (or the C{zoo.cfg} line
        C{server.N=HOST:PEER_PORT:ELECTION_PORT}).

        @raise ValueError: another shape, an id outside 1..255 or a port
            outside 1..65535 (the message quotes C{text}).
        """
        form = "N=HOST:PEER_PORT:ELECTION_PORT (as zoo.cfg's server.N=HOST:PEER_PORT:ELECTION_PORT)"
        key, sep, address = text.strip().partition("=")
        key = key.strip()
        if key.startswith("server."):
            key = key[len("server."):]
        parts = address.strip().rsplit(":", 2)
        if not sep or not key.isdigit() or len(parts) != 3 or not parts[0] or not all(p.isdigit() for p in parts[1:]):
            raise ValueError(f"{text!r} is not {form}")
        server = cls(int(key), parts[0].strip("[]"), int(parts[1]), int(parts[2]))
        if not 1 <= server.server_id <= 255:
            raise ValueError(f"{text!r}: a server id (myid) must be in 1..255")
        for port in (server.peer_port, server.election_port):
            if not 1 <= port <= 65535:
                raise ValueError(f"{text!r}: ports must be in 1..65535")
        return server

    @property
    def config_line(self) -> str:
        """The C{zoo.cfg} line: C{server.N=HOST:PEER_PORT:ELECTION_PORT}."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"server.{self.server_id}={host}:{self.peer_port}:{self.election_port}"


def check_ensemble(servers: Sequence[QuorumServer], myid: int | None) -> None:
    """
    Check an ensemble's C{server.N} list and this member's id.

    @raise ValueError: C{myid} without servers or servers without C{myid};
        C{myid} not among the servers; an id or a HOST:PORT named twice.
    """
    if not servers and myid is None:
        return
    if not servers:
        raise ValueError("--myid needs the ensemble's --server N=HOST:PEER_PORT:ELECTION_PORT list")
    if myid is None:
        raise ValueError("a member of an ensemble needs --myid (its N among the --server lines)")
    ids = [s.server_id for s in servers]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"server.{twice[0]} is named twice")
    if myid not in ids:
        raise ValueError(f"--myid {myid} is none of the servers ({', '.join(f'server.{i}' for i in sorted(ids))})")
    addresses = [(s.host, p) for s in servers for p in (s.peer_port, s.election_port)]
    taken = [a for a in addresses if addresses.count(a) > 1]
    if taken:
        raise ValueError(f"{taken[0][0]}:{taken[0][1]} is named twice among the servers' ports")


def _check_quorum_ports(server: QuorumServer) -> None:
    """
    Before spawning a member: its own peer and election ports must be free on
    its own host (binding there must work).

    @raise ZooKeeperPortInUseError: a port is taken.
    @raise ZooKeeperStartError: the host is not an address of this machine
        (the wrong C{--myid} for this machine, say).
    """
    for port in (server.peer_port, server.election_port):
        family = socket.AF_INET6 if ":" in server.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((server.host, port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise ZooKeeperPortInUseError(port, server.config_line, host=server.host) from None
                raise ZooKeeperStartError(
                    f"{server.config_line}: cannot bind {server.host}:{port} ({e.strerror or e}): is this machine"
                    f" server.{server.server_id} (--myid {server.server_id})?"
                ) from None


def check_myid(data_dir: str, myid: int) -> None:
    """
    A data directory that already holds a C{myid} file belongs to that member.

    @raise ZooKeeperStartError: C{<data_dir>/myid} names another member.
    """
    path = os.path.join(os.path.abspath(data_dir), "myid")
    try:
        with open(path) as f:
            stored = f.read().strip()
    except FileNotFoundError:
        return
    if stored != str(myid):
        raise ZooKeeperStartError(
            f"{path} says this data is member {stored}'s, not member {myid}'s: use --myid {stored}"
            f" or another --data-dir"
        )


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """
    Whether another socket listens on C{host:port}: binding there fails.  The
    probe socket sets C{SO_REUSEADDR}, as ZooKeeper's own does, so connections
    left in C{TIME_WAIT} do not count.  A free port may still be taken before
    ZooKeeper binds it; L{EmbeddedZooKeeperService.whenReady} and L{wait_ready}
    catch that.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def start_error_from_log(log_path: str, offset: int = 0) -> str:
    """
    L{start_error_from_text} of ZooKeeper's log from byte C{offset}; C{""}
    when the log cannot be read.
    """
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return start_error_from_text(text)


def start_error_from_text(text: str) -> str:
    """
    The line of ZooKeeper's output that says why it exited: the first
    exception line right after an C{ERROR} line (C{java.net.BindException:
    Address already in use}, C{java.io.IOException: No space left on
    device}), else the JVM's own (C{Exception in thread "main" ...},
    C{Error: ...}), else the last C{ERROR} line; C{""} when there is none.
    Exceptions logged at other levels are not why it exited: a member of an
    ensemble logs C{WARN}ings with C{java.net.ConnectException} while its
    peers are down.
    """
    lines = [line.strip() for line in text.splitlines()]

    def exception(line: str) -> bool:
        return line.startswith("java.") and ("Exception" in line or "Error" in line)

    for before, line in zip(lines, lines[1:]):
        if " ERROR " in before and exception(line):
            return line
    for line in lines:
        if line.startswith(("Exception in thread ", "Error: ")):
            return line
    errors = [line for line in lines if " ERROR " in line]
    return errors[-1] if errors else ""


def _exited_error(port: int, status: Any, reason: str, log_path: str, setting: str,
                  host: str = "127.0.0.1") -> ZooKeeperStartError:
    if "BindException" in reason or "Address already in use" in reason:
        return ZooKeeperPortInUseError(port, setting, reason, host=host)
    because = f": {reason}" if reason else ""
    return ZooKeeperStartError(
        f"ZooKeeper (port {port}) exited with status {status} before it was ready{because}; log: {log_path}"
    )


#: the ports L{find_free_port} handed out lately, in this process
_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=256)


def find_free_port(host: str = "127.0.0.1") -> int:
    """
    A TCP port that was free a moment ago on C{host} (bind to port 0, read the
    port, close), and not one this process was handed lately: two ports
    picked before either is bound (a broker's listener and its metrics port)
    differ, where the kernel may give the same free port twice in a row (a
    broker of tests/integration/test_fetch_sessions.py failed to start so).
    Another process may take it before it is used again.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            break
    _HANDED_OUT.append(port)
    return port


def java_command(config_path: str, heap_mb: int = 256, main_class: str = MAIN_CLASS) -> list[str]:
    """
    The command line that runs ZooKeeper on C{config_path}.

    @param heap_mb: the JVM's maximum heap (C{-Xmx}, MB).
    @param main_class: L{MAIN_CLASS} (standalone) or L{QUORUM_MAIN_CLASS} (a member of an ensemble).
    @raise ZooKeeperNotInstalledError: no C{java} on C{PATH} or no jar.
    """
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotInstalledError(
            "java not found on PATH; ZooKeeper needs a JRE: apt-get install zookeeper (pulls in a JRE)"
        )
    for jar in (ZOOKEEPER_JAR, SLF4J_JAR):
        if not os.path.exists(jar):
            raise ZooKeeperNotInstalledError(f"{jar} not found: apt-get install zookeeper")
    return [java, f"-Xmx{heap_mb}m", "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_JAR}", main_class, config_path]


def write_config(data_dir: str, port: int, tick_time_ms: int = 2000, bind_address: str = "127.0.0.1",
                 servers: Sequence[QuorumServer] = (), myid: int | None = None,
                 init_limit: int = 10, sync_limit: int = 5) -> str:
    """
    Write C{<data_dir>/zoo.cfg} (creating C{data_dir}) and return its path;
    for a member of an ensemble also C{<data_dir>/myid}.

    @param tick_time_ms: ZooKeeper's basic time unit (ms); sessions time out
        after 2 to 20 ticks.  Tests use 500.
    @param bind_address: C{clientPortAddress}: where clients connect
        (C{0.0.0.0}: every interface).
    @param servers: the ensemble's C{server.N} lines (none: a standalone server).
    @param myid: this member's N (required with C{servers}).
    @param init_limit: C{initLimit}: ticks a follower has to connect to and
        sync with the leader (ensembles only).
    @param sync_limit: C{syncLimit}: ticks a follower may lag behind the
        leader before it is dropped (ensembles only).
    @raise ValueError: see L{check_ensemble}.
    """
    check_ensemble(servers, myid)
    data_dir = os.path.abspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, "zoo.cfg")
    ensemble = ""
    if servers:
        ensemble = f"initLimit={init_limit}\nsyncLimit={sync_limit}\n" + "".join(
            f"{server.config_line}\n" for server in sorted(servers, key=lambda s: s.server_id))
        with open(os.path.join(data_dir, "myid"), "w") as f:
            f.write(f"{myid}\n")
    with open(path, "w") as f:
        f.write(
            f"tickTime={tick_time_ms}\n"
            f"dataDir={data_dir}\n"
            f"clientPort={port}\n"
            f"clientPortAddress={bind_address}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,conf,srvr,stat,mntr\n"
            "maxClientCnxns=0\n"
            + ensemble
        )
    return path


#: C{srvr}'s answer once the server serves sessions (before: "This ZooKeeper
#: instance is not currently serving requests").
_SERVING_MARK = b"Mode: "


def four_letter_word(port: int, word: bytes, host: str = "127.0.0.1", timeout_s: float = 1.0) -> bytes:
    """
    Blocking: send a four-letter word (C{ruok}, C{srvr}, …) and return the
    answer, read until the server closes; C{b""} when it cannot be reached or
    does not answer within C{timeout_s} (per socket operation).
    """
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(word)
            while chunk := s.recv(4096):
                answer += chunk
    except OSError:
        pass
    return answer


def ruok(port: int, host: str = "127.0.0.1", timeout_s: float = 1.0) -> bool:
    """Blocking liveness probe: C{True} when the server at C{host:port} answers C{imok}."""
    return four_letter_word(port, b"ruok", host, timeout_s) == b"imok"


def serving(port: int, host: str = "127.0.0.1", timeout_s: float = 1.0) -> bool:
    """Blocking readiness probe: C{True} once the server's C{srvr} reports its mode (any server)."""
    return _SERVING_MARK in four_letter_word(port, b"srvr", host, timeout_s)


def _data_dir_line(data_dir: str) -> bytes:
    # ZooKeeper keeps its files in <dataDir>/version-2 and names that in conf
    return b"dataDir=" + os.path.join(os.path.abspath(data_dir), "version-2").encode("utf-8")


def is_ours(conf_answer: bytes, data_dir: str) -> bool:
    """Whether a C{conf} answer comes from the server whose C{dataDir} is C{data_dir} (so it serves)."""
    return _data_dir_line(data_dir) in conf_answer.splitlines()


def probe_host(bind_address: str) -> str:
    """Where to reach a server bound to C{bind_address} from this machine (loopback for a wildcard)."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(bind_address, bind_address)


def server_mode(port: int, host: str = "127.0.0.1", timeout_s: float = 1.0) -> str | None:
    """
    Blocking: the server's C{Mode} as C{srvr} reports it: C{"leader"} or
    C{"follower"} for a member of an ensemble that serves, C{"standalone"};
    C{None} when it does not serve (an ensemble without a quorum, an
    election under way) or cannot be reached.
    """
    return srvr_mode(four_letter_word(port, b"srvr", host, timeout_s))


def srvr_mode(answer: bytes) -> str | None:
    """The C{Mode: ...} of a C{srvr} answer (C{"leader"}, C{"follower"}, C{"standalone"}), or C{None}."""
    for line in answer.splitlines():
        if line.startswith(_SERVING_MARK):
            return line[len(_SERVING_MARK):].strip().decode("ascii", "replace")
    return None


def serving_from(port: int, data_dir: str, host: str = "127.0.0.1", timeout_s: float = 1.0) -> bool:
    """
    Blocking readiness probe: C{True} once the server on C{host:port} serves
    and is the one keeping its data in C{data_dir} (its C{conf} names that
    C{dataDir}).  Another server on the port answers C{False}.
    """
    return is_ours(four_letter_word(port, b"conf", host, timeout_s), data_dir)


# -- the Twisted service ------------------------------------------------------


class _ZooKeeperProcess(protocol.ProcessProtocol):
    """
    The embedded server's output goes to C{log_path} (ZooKeeper is chatty: every
    readiness probe logs a line); only ERROR lines reach the broker's log, and
    only while the server is meant to run (a start that fails is reported once,
    by L{EmbeddedZooKeeperService.whenReady}, with the reason from its output).

    The last L{TAIL_BYTES} of output are also kept in memory, where the
    reason for an exit is read: the log shares the data's disk, and when that
    disk is full (why ZooKeeper exits, often) the log's last lines were never
    written.  A failed log write is logged once, never raised.

    @ivar stopping: set when we sent SIGTERM: its exit is then no news.
    @ivar status: the exit status (C{None} when killed by a signal or running).
    @ivar on_unexpected_exit: called with one line saying why (the exit
        status and the error from the output) when the server exits after
        it was ready and without being asked to.
    """

    TAIL_BYTES = 64 * 1024

    def __init__(self, port: int, log_path: str,
                 on_unexpected_exit: Callable[[str], object] | None = None) -> None:
        self.port = port
        self.ended: Deferred = Deferred()
        self.exited = False
        self.stopping = False
        self.ready = False
        self.status: int | None = None
        self.signal: int | None = None
        self.log_path = log_path
        self.on_unexpected_exit = on_unexpected_exit
        self._tail = bytearray()
        self._log_failed = False
        self._log_file = open(log_path, "ab")
        self.log_offset = self._log_file.tell()

    def outReceived(self, data: bytes) -> None:
        self._log_lines(data)

    def errReceived(self, data: bytes) -> None:
        self._log_lines(data)

    def _log_lines(self, data: bytes) -> None:
        self._tail += data
        del self._tail[:-self.TAIL_BYTES]
        if not self._log_failed:
            try:
                self._log_file.write(data)
                self._log_file.flush()
            except OSError as e:
                self._log_failed = True
                _log.warn("cannot write ZooKeeper's output to {log}: {error}", log=self.log_path, error=e)
        if not self.ready or self.stopping:
            return
        for line in data.decode("utf-8", "replace").splitlines():
            if " ERROR " in line:
                _log.error("zookeeper:{port}: {line}", port=self.port, line=line)

    def error_line(self) -> str:
        """L{start_error_from_text} of the output since the start (its last L{TAIL_BYTES})."""
        return start_error_from_text(self._tail.decode("utf-8", "replace"))

    def processEnded(self, reason: Any) -> None:
        self.exited = True
        try:
            self._log_file.close()
        except OSError:
            pass  # a full disk: the buffered rest is lost, the tail kept in memory is not
        self.status = getattr(reason.value, "exitCode", None)
        self.signal = getattr(reason.value, "signal", None)
        # The JVM answers SIGTERM by running its shutdown hooks and exiting 143 (128 + 15).
        if self.stopping and (self.status in (0, 143) or self.signal == signal.SIGTERM):
            _log.info("ZooKeeper on port {port} stopped", port=self.port)
        elif self.ready:
            _log.error("ZooKeeper on port {port} exited unexpectedly (status {status}, signal {signal}); see {log}",
                       port=self.port, status=self.status, signal=self.signal, log=self.log_path)
            if self.on_unexpected_exit is not None:
                self.on_unexpected_exit(self.exit_reason())
        self.ended.callback(None)

    def exit_reason(self) -> str:
        """
        One line: how the server ended and the error in its output, e.g.
        C{"ZooKeeper on port 2181 exited with status 1: java.io.IOException:
        No space left on device (log: …/zookeeper.log)"}.
        """
        if self.signal is not None:  # sent from outside (the OOM killer, a person): its log does not say why
            how, reason = f"was killed by signal {self.signal}", ""
        else:
            how, reason = f"exited with status {self.status}", self.error_line()
        because = f": {reason}" if reason else ""
        return f"ZooKeeper on port {self.port} {how}{because} (log: {self.log_path})"


class _FourLetterWord(protocol.Protocol):
    """
    Sends a four-letter word and collects the answer until the server closes.
    The connection is aborted after C{timeout_s}: a server that accepted but
    does not answer (ZooKeeper listens a moment before it reads; or a TCP
    self-connection to the port, which echoes the word back while nothing
    listens there yet) must not stall the readiness poll.
    """

    def __init__(self, reactor: Any, word: bytes, timeout_s: float) -> None:
        self.answer = b""
        self.done: Deferred = Deferred()
        self._reactor = reactor
        self._word = word
        self._timeout_s = timeout_s
        self._timer: Any = None

    def connectionMade(self) -> None:
        self.transport.write(self._word)
        self._timer = self._reactor.callLater(self._timeout_s, self.transport.abortConnection)

    def dataReceived(self, data: bytes) -> None:
        self.answer += data

    def connectionLost(self, reason: Any) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self.done.callback(self.answer)


class EmbeddedZooKeeperService(Service):
    """
    Runs a ZooKeeper server as a child process of the reactor.

    C{startService} checks that the port is free and spawns the server;
    L{whenReady} fires once I{that} server serves (see the module docstring);
    C{stopService} sends SIGTERM and fires when it exited (SIGKILL after
    C{kill_after_s}).

    @param port_setting: how a user moves the port, named in the error for a
        taken port (e.g. C{"zookeeper.connect=embedded:PORT"}).
    @param on_unexpected_exit: called (in the reactor) with one line saying
        why when the server exits after it was ready without being stopped
        (a full disk: C{java.io.IOException: No space left on device}); the
        broker stops on it rather than run on without its ZooKeeper.
    """

    name = "zookeeper"

    def __init__(
        self,
        data_dir: str,
        port: int,
        reactor: Any,
        tick_time_ms: int = 2000,
        ready_timeout_s: float = 30.0,
        kill_after_s: float = 10.0,
        port_setting: str = "the port argument",
        on_unexpected_exit: Callable[[str], object] | None = None,
    ) -> None:
        self.on_unexpected_exit = on_unexpected_exit
        self.data_dir = os.path.abspath(data_dir)
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.ready_timeout_s = ready_timeout_s
        self.kill_after_s = kill_after_s
        self.port_setting = port_setting
        self._reactor = reactor
        self._process: _ZooKeeperProcess | None = None
        self._transport: Any = None
        self._start_error: ZooKeeperStartError | None = None
        self.command: list[str] = []

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def startService(self) -> None:
        """
        Spawn the server, unless its port is taken: then nothing is written or
        spawned and L{whenReady} fails with L{ZooKeeperPortInUseError}.

        @raise ZooKeeperNotInstalledError: no java or no jar.
        """
        Service.startService(self)
        if port_in_use(self.port):
            self._start_error = ZooKeeperPortInUseError(self.port, self.port_setting)
            return
        config = write_config(self.data_dir, self.port, self.tick_time_ms)
        self.command = java_command(config)
        self._process = _ZooKeeperProcess(self.port, os.path.join(self.data_dir, "zookeeper.log"),
                                          self.on_unexpected_exit)
        _log.info("starting ZooKeeper: {command}", command=" ".join(self.command))
        self._transport = self._reactor.spawnProcess(
            self._process, self.command[0], self.command, env=dict(os.environ), path=self.data_dir
        )

    def _probe(self) -> Deferred:
        endpoint = TCP4ClientEndpoint(self._reactor, "127.0.0.1", self.port, timeout=1)
        proto = _FourLetterWord(self._reactor, b"conf", timeout_s=1.0)
        factory = protocol.Factory.forProtocol(lambda: proto)
        factory.noisy = False  # one probe every 100 ms: no "Starting factory" lines
        d = endpoint.connect(factory)
        d.addCallback(lambda _: proto.done)
        d.addCallbacks(lambda answer: is_ours(answer, self.data_dir), lambda _: False)
        return d

    def whenReady(self) -> Deferred:
        """
        @return: a Deferred firing with the connect string once our server
            serves: its C{conf} names our C{dataDir} and the process still runs
            (polled every 100 ms).
        @raise ZooKeeperPortInUseError: (as failure) the port is taken: before
            the start, or the process exited with a bind error.
        @raise ZooKeeperStartError: (as failure) not ready within
            C{ready_timeout_s}, or the process exited (the reason from its log).
        """
        deadline = self._reactor.seconds() + self.ready_timeout_s

        def exited(process: _ZooKeeperProcess) -> ZooKeeperStartError:
            status = process.status if process.signal is None else f"signal {process.signal}"
            return _exited_error(self.port, status, process.error_line(), process.log_path, self.port_setting)

        async def poll() -> str:
            while True:
                if self._start_error is not None:
                    raise self._start_error
                process = self._process
                if process is None:
                    raise ZooKeeperStartError(f"ZooKeeper (port {self.port}) is not running; command: "
                                              f"{' '.join(self.command) or '(not started)'}")
                if process.exited:
                    raise exited(process)
                if await self._probe():
                    if process.exited:
                        raise exited(process)
                    process.ready = True
                    return self.connect_string
                if self._reactor.seconds() > deadline:
                    raise ZooKeeperStartError(
                        f"ZooKeeper on port {self.port} not ready after {self.ready_timeout_s} s;"
                        f" log: {process.log_path}; command: {' '.join(self.command)}"
                    )
                await task.deferLater(self._reactor, 0.1, lambda: None)

        return Deferred.fromCoroutine(poll())

    def stopService(self) -> Deferred:
        Service.stopService(self)
        process = self._process
        if process is None or process.exited:
            return Deferred.fromCoroutine(_noop())
        process.stopping = True
        self._transport.signalProcess("TERM")

        def kill() -> None:
            if not process.exited:
                _log.warn("ZooKeeper on port {port} ignored SIGTERM; killing", port=self.port)
                self._transport.signalProcess("KILL")

        killer = self._reactor.callLater(self.kill_after_s, kill)

        def ended(result: Any) -> Any:
            if killer.active():
                killer.cancel()
            return None

        return process.ended.addBoth(ended)


async def _noop() -> None:
    return None


# -- blocking helpers ---------------------------------------------------------


def start_blocking(data_dir: str, port: int, tick_time_ms: int = 2000, log_path: str | None = None,
                   port_setting: str = "the port argument", bind_address: str = "127.0.0.1",
                   servers: Sequence[QuorumServer] = (), myid: int | None = None, init_limit: int = 10,
                   sync_limit: int = 5, heap_mb: int = 256, die_with_parent: bool = False) -> subprocess.Popen:
    """
    Start ZooKeeper without a reactor; its output goes to C{log_path} (default
    C{<data_dir>/zookeeper.log}).  Call L{wait_ready} next.

    With C{servers} and C{myid} the server is member C{myid} of that ensemble
    (see L{write_config} for the other settings).

    @param port_setting: how a user moves the port, named in the error for a
        taken port (e.g. C{"--port"}).
    @param heap_mb: the JVM's maximum heap (MB).
    @param die_with_parent: the server gets SIGTERM when the calling thread's
        process dies, also by SIGKILL (Linux's parent-death signal, set by
        util-linux's C{setpriv --pdeathsig} before it execs java; where
        C{setpriv} is missing the server outlives a killed parent).  Call it
        from the thread that lives as long as the process (the main thread):
        the signal follows the forking thread.
    @raise ValueError: a bad ensemble (L{check_ensemble}).
    @raise ZooKeeperPortInUseError: the client port, or this member's peer or
        election port, is taken (nothing was written).
    @raise ZooKeeperStartError: this member's host is not this machine's, or
        C{data_dir} holds another member's C{myid}.
    @raise ZooKeeperNotInstalledError: no java or no jar.
    """
    check_ensemble(servers, myid)
    if port_in_use(port, bind_address):
        raise ZooKeeperPortInUseError(port, port_setting, host=bind_address)
    if servers:
        assert myid is not None
        _check_quorum_ports(next(s for s in servers if s.server_id == myid))
        check_myid(data_dir, myid)
    config = write_config(data_dir, port, tick_time_ms, bind_address, servers, myid, init_limit, sync_limit)
    command = java_command(config, heap_mb, QUORUM_MAIN_CLASS if servers else MAIN_CLASS)
    setpriv = shutil.which("setpriv") if die_with_parent else None
    if setpriv is not None:
        command = [setpriv, "--pdeathsig", "TERM", *command]
    log_path = log_path or os.path.join(os.path.abspath(data_dir), "zookeeper.log")
    with open(log_path, "ab") as log:
        offset = log.tell()
        popen = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=os.path.abspath(data_dir)
        )
    popen.kafkatw_command = command  # type: ignore[attr-defined]
    popen.kafkatw_log_path = log_path  # type: ignore[attr-defined]
    popen.kafkatw_log_offset = offset  # type: ignore[attr-defined]
    popen.kafkatw_data_dir = os.path.abspath(data_dir)  # type: ignore[attr-defined]
    popen.kafkatw_port_setting = port_setting  # type: ignore[attr-defined]
    popen.kafkatw_bind_address = bind_address  # type: ignore[attr-defined]
    popen.kafkatw_host = probe_host(bind_address)  # type: ignore[attr-defined]
    return popen


def wait_ready(port: int, timeout_s: float | None = 30.0, popen: subprocess.Popen | None = None,
               data_dir: str | None = None, host: str | None = None) -> None:
    """
    Poll every 100 ms until the server serves.  With a C{popen} of
    L{start_blocking} (or a C{data_dir}), only that server counts: its C{conf}
    must name its C{dataDir} and the process must still run afterwards (see
    the module docstring); otherwise any server whose C{srvr} reports its mode.

    @param timeout_s: how long to wait (s); C{None}: as long as C{popen}
        runs (a member of an ensemble waiting for its quorum).
    @param host: where to reach the server (default: C{popen}'s bind address,
        else 127.0.0.1).
    @raise ZooKeeperPortInUseError: C{popen} exited with a bind error.
    @raise ZooKeeperStartError: not ready within C{timeout_s}, or C{popen}
        exited (the reason from its log in the message).
    """
    if timeout_s is None and popen is None:
        raise ValueError("wait_ready without a timeout needs the process (popen)")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    command = " ".join(getattr(popen, "kafkatw_command", []) or ["java ... " + MAIN_CLASS])
    data_dir = data_dir or getattr(popen, "kafkatw_data_dir", None)
    host = host or getattr(popen, "kafkatw_host", "127.0.0.1")

    def exited() -> ZooKeeperStartError:
        assert popen is not None
        return _popen_exited_error(port, popen)

    while True:
        if popen is not None and popen.poll() is not None:
            raise exited()
        if serving_from(port, data_dir, host) if data_dir else serving(port, host):
            if popen is not None and popen.poll() is not None:
                raise exited()
            return
        if deadline is not None and time.monotonic() > deadline:
            raise ZooKeeperStartError(f"ZooKeeper on port {port} not ready after {timeout_s} s; command: {command}")
        time.sleep(0.1)


def wait_listening(port: int, timeout_s: float, popen: subprocess.Popen) -> None:
    """
    Poll every 100 ms until C{popen} (of L{start_blocking}) answers C{ruok}
    with C{imok}: it listens for clients, serving or not (a member of an
    ensemble answers before it has a quorum).

    @raise ZooKeeperPortInUseError: C{popen} exited with a bind error.
    @raise ZooKeeperStartError: no answer within C{timeout_s}, or C{popen} exited.
    """
    deadline = time.monotonic() + timeout_s
    host = getattr(popen, "kafkatw_host", "127.0.0.1")
    while popen.poll() is None:
        if ruok(port, host) and popen.poll() is None:
            return
        if time.monotonic() > deadline:
            raise ZooKeeperStartError(f"ZooKeeper on port {port} did not answer ruok within {timeout_s} s;"
                                      f" log: {getattr(popen, 'kafkatw_log_path', '?')}")
        time.sleep(0.1)
    raise _popen_exited_error(port, popen)


def _popen_exited_error(port: int, popen: subprocess.Popen) -> ZooKeeperStartError:
    log_path = getattr(popen, "kafkatw_log_path", "?")
    reason = start_error_from_log(log_path, getattr(popen, "kafkatw_log_offset", 0))
    return _exited_error(port, popen.returncode, reason, log_path,
                         getattr(popen, "kafkatw_port_setting", "the port argument"),
                         getattr(popen, "kafkatw_bind_address", "127.0.0.1"))


def stop_blocking(popen: subprocess.Popen, kill_after_s: float = 10.0) -> int:
    """SIGTERM, wait (SIGKILL after C{kill_after_s}); return the exit status."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(kill_after_s)
        except subprocess.TimeoutExpired:
            print(f"ZooKeeper pid {popen.pid} ignored SIGTERM; killing", file=sys.stderr)
            popen.kill()
            popen.wait()
    return popen.returncode
