"""
A real ZooKeeper server (Debian's C{zookeeper} package, 3.8) as a child process.

Used by C{--zookeeper embedded} (DESIGN.md D5), the C{kafkatw zookeeper} command
and the integration tests.  The server runs as::

    java -Xmx256m -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \\
        org.apache.zookeeper.server.ZooKeeperServerMain <data_dir>/zoo.cfg

(C{zookeeper.jar}'s manifest lists the rest of its class path.)  The generated
C{zoo.cfg} listens on 127.0.0.1 only, disables the Jetty admin server (it would
listen on 0.0.0.0:8080) and allows the four-letter words C{ruok}, C{conf},
C{srvr}, C{stat} and C{mntr}.

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

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

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
    "find_free_port",
    "port_in_use",
    "java_command",
    "write_config",
    "ruok",
    "serving",
    "serving_from",
    "is_ours",
    "start_error_from_log",
    "EmbeddedZooKeeperService",
    "start_blocking",
    "wait_ready",
    "stop_blocking",
]

_log = Logger()

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_JAR = "/usr/share/java/slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperNotInstalledError(RuntimeError):
    """java or the ZooKeeper jars are missing."""


class ZooKeeperStartError(RuntimeError):
    """The ZooKeeper process did not become ready; the message is one line for a person."""


class ZooKeeperPortInUseError(ZooKeeperStartError):
    """
    The client port is held by another process (another ZooKeeper, say).

    @ivar port: the port (on 127.0.0.1).
    """

    def __init__(self, port: int, setting: str, detail: str = "") -> None:
        self.port = port
        self.setting = setting
        what = f" ({detail})" if detail else ""
        super().__init__(
            f"ZooKeeper cannot listen on 127.0.0.1:{port}: the port is already in use{what};"
            f" stop what holds it or choose another port with {setting}"
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
    The line of ZooKeeper's log (from byte C{offset}) that says why it exited:
    the first exception line (C{java.net.BindException: Address already in
    use}), else the last C{ERROR} line; C{""} when there is none.
    """
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = text.splitlines()
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("java.") and ("Exception" in stripped or "Error" in stripped):
            return stripped
    errors = [line.strip() for line in lines if " ERROR " in line]
    return errors[-1] if errors else ""


def _exited_error(port: int, status: Any, log_path: str, offset: int, setting: str) -> ZooKeeperStartError:
    reason = start_error_from_log(log_path, offset)
    if "BindException" in reason or "Address already in use" in reason:
        return ZooKeeperPortInUseError(port, setting, reason)
    because = f": {reason}" if reason else ""
    return ZooKeeperStartError(
        f"ZooKeeper (port {port}) exited with status {status} before it was ready{because}; log: {log_path}"
    )


def find_free_port(host: str = "127.0.0.1") -> int:
    """
    A TCP port that was free a moment ago on C{host} (bind to port 0, read the
    port, close).  Another process may take it before it is used again.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def java_command(config_path: str, heap_mb: int = 256) -> list[str]:
    """
    The command line that runs ZooKeeper on C{config_path}.

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
    return [java, f"-Xmx{heap_mb}m", "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_JAR}", MAIN_CLASS, config_path]


def write_config(data_dir: str, port: int, tick_time_ms: int = 2000) -> str:
    """
    Write C{<data_dir>/zoo.cfg} (creating C{data_dir}) and return its path.

    @param tick_time_ms: ZooKeeper's basic time unit (ms); sessions time out
        after 2 to 20 ticks.  Tests use 500.
    """
    data_dir = os.path.abspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, "zoo.cfg")
    with open(path, "w") as f:
        f.write(
            f"tickTime={tick_time_ms}\n"
            f"dataDir={data_dir}\n"
            f"clientPort={port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,conf,srvr,stat,mntr\n"
            "maxClientCnxns=0\n"
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
    by L{EmbeddedZooKeeperService.whenReady}, with the reason from this log).

    @ivar stopping: set when we sent SIGTERM: its exit is then no news.
    @ivar status: the exit status (C{None} when killed by a signal or running).
    """

    def __init__(self, port: int, log_path: str) -> None:
        self.port = port
        self.ended: Deferred = Deferred()
        self.exited = False
        self.stopping = False
        self.ready = False
        self.status: int | None = None
        self.signal: int | None = None
        self.log_path = log_path
        self._log_file = open(log_path, "ab")
        self.log_offset = self._log_file.tell()

    def outReceived(self, data: bytes) -> None:
        self._log_lines(data)

    def errReceived(self, data: bytes) -> None:
        self._log_lines(data)

    def _log_lines(self, data: bytes) -> None:
        self._log_file.write(data)
        self._log_file.flush()
        if not self.ready or self.stopping:
            return
        for line in data.decode("utf-8", "replace").splitlines():
            if " ERROR " in line:
                _log.error("zookeeper:{port}: {line}", port=self.port, line=line)

    def processEnded(self, reason: Any) -> None:
        self.exited = True
        self._log_file.close()
        self.status = getattr(reason.value, "exitCode", None)
        self.signal = getattr(reason.value, "signal", None)
        # The JVM answers SIGTERM by running its shutdown hooks and exiting 143 (128 + 15).
        if self.stopping and (self.status in (0, 143) or self.signal == signal.SIGTERM):
            _log.info("ZooKeeper on port {port} stopped", port=self.port)
        elif self.ready:
            _log.error("ZooKeeper on port {port} exited unexpectedly (status {status}, signal {signal}); see {log}",
                       port=self.port, status=self.status, signal=self.signal, log=self.log_path)
        self.ended.callback(None)


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
    ) -> None:
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
        self._process = _ZooKeeperProcess(self.port, os.path.join(self.data_dir, "zookeeper.log"))
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
            return _exited_error(self.port, status, process.log_path, process.log_offset, self.port_setting)

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
                   port_setting: str = "the port argument") -> subprocess.Popen:
    """
    Start ZooKeeper without a reactor; its output goes to C{log_path} (default
    C{<data_dir>/zookeeper.log}).  Call L{wait_ready} next.

    @param port_setting: how a user moves the port, named in the error for a
        taken port (e.g. C{"--port"}).
    @raise ZooKeeperPortInUseError: the port is taken (nothing was written).
    @raise ZooKeeperNotInstalledError: no java or no jar.
    """
    if port_in_use(port):
        raise ZooKeeperPortInUseError(port, port_setting)
    config = write_config(data_dir, port, tick_time_ms)
    command = java_command(config)
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
    return popen


def wait_ready(port: int, timeout_s: float = 30.0, popen: subprocess.Popen | None = None,
               data_dir: str | None = None) -> None:
    """
    Poll every 100 ms until the server serves.  With a C{popen} of
    L{start_blocking} (or a C{data_dir}), only that server counts: its C{conf}
    must name its C{dataDir} and the process must still run afterwards (see
    the module docstring); otherwise any server whose C{srvr} reports its mode.

    @raise ZooKeeperPortInUseError: C{popen} exited with a bind error.
    @raise ZooKeeperStartError: not ready within C{timeout_s}, or C{popen}
        exited (the reason from its log in the message).
    """
    deadline = time.monotonic() + timeout_s
    command = " ".join(getattr(popen, "kafkatw_command", []) or ["java ... " + MAIN_CLASS])
    data_dir = data_dir or getattr(popen, "kafkatw_data_dir", None)

    def exited() -> ZooKeeperStartError:
        assert popen is not None
        return _exited_error(port, popen.returncode, getattr(popen, "kafkatw_log_path", "?"),
                             getattr(popen, "kafkatw_log_offset", 0),
                             getattr(popen, "kafkatw_port_setting", "the port argument"))

    while True:
        if popen is not None and popen.poll() is not None:
            raise exited()
        if serving_from(port, data_dir) if data_dir else serving(port):
            if popen is not None and popen.poll() is not None:
                raise exited()
            return
        if time.monotonic() > deadline:
            raise ZooKeeperStartError(f"ZooKeeper on port {port} not ready after {timeout_s} s; command: {command}")
        time.sleep(0.1)


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
