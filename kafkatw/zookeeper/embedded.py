"""
A real ZooKeeper server (Debian's C{zookeeper} package, 3.8) as a child process.

Used by C{--zookeeper embedded} (DESIGN.md D5), the C{kafkatw zookeeper} command
and the integration tests.  The server runs as::

    java -Xmx256m -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \\
        org.apache.zookeeper.server.ZooKeeperServerMain <data_dir>/zoo.cfg

(C{zookeeper.jar}'s manifest lists the rest of its class path.)  The generated
C{zoo.cfg} listens on 127.0.0.1 only, disables the Jetty admin server (it would
listen on 0.0.0.0:8080) and allows the four-letter words C{ruok}, C{srvr},
C{stat} and C{mntr}.  Readiness probes send C{srvr} until the server reports
its C{Mode}: C{ruok} already answers C{imok} while the server is still loading
(0.15 to 0.2 s on an idle machine, longer on a busy one), and a client that
connects then is turned away and backs off.

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
    "find_free_port",
    "java_command",
    "write_config",
    "ruok",
    "serving",
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
    """The ZooKeeper process did not become ready."""


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
            "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
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
    """Blocking readiness probe: C{True} once the server's C{srvr} reports its mode."""
    return _SERVING_MARK in four_letter_word(port, b"srvr", host, timeout_s)


# -- the Twisted service ------------------------------------------------------


class _ZooKeeperProcess(protocol.ProcessProtocol):
    """
    The embedded server's output goes to C{log_path} (ZooKeeper is chatty: every
    readiness probe logs a line); only ERROR lines reach the broker's log.
    """

    def __init__(self, port: int, log_path: str) -> None:
        self.port = port
        self.ended: Deferred = Deferred()
        self.exited = False
        self.log_path = log_path
        self._log_file = open(log_path, "ab")

    def outReceived(self, data: bytes) -> None:
        self._log_lines(data)

    def errReceived(self, data: bytes) -> None:
        self._log_lines(data)

    def _log_lines(self, data: bytes) -> None:
        self._log_file.write(data)
        self._log_file.flush()
        for line in data.decode("utf-8", "replace").splitlines():
            if " ERROR " in line:
                _log.error("zookeeper:{port}: {line}", port=self.port, line=line)

    def processEnded(self, reason: Any) -> None:
        self.exited = True
        self._log_file.close()
        _log.info("ZooKeeper on port {port} exited: {reason}", port=self.port, reason=reason.value)
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

    C{startService} spawns it; L{whenReady} fires once it serves (C{srvr});
    C{stopService} sends SIGTERM and fires when it exited (SIGKILL after
    C{kill_after_s}).
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
    ) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.ready_timeout_s = ready_timeout_s
        self.kill_after_s = kill_after_s
        self._reactor = reactor
        self._process: _ZooKeeperProcess | None = None
        self._transport: Any = None
        self.command: list[str] = []

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def startService(self) -> None:
        config = write_config(self.data_dir, self.port, self.tick_time_ms)
        self.command = java_command(config)
        self._process = _ZooKeeperProcess(self.port, os.path.join(self.data_dir, "zookeeper.log"))
        _log.info("starting ZooKeeper: {command}", command=" ".join(self.command))
        self._transport = self._reactor.spawnProcess(
            self._process, self.command[0], self.command, env=dict(os.environ), path=self.data_dir
        )
        Service.startService(self)

    def _probe(self) -> Deferred:
        endpoint = TCP4ClientEndpoint(self._reactor, "127.0.0.1", self.port, timeout=1)
        proto = _FourLetterWord(self._reactor, b"srvr", timeout_s=1.0)
        d = endpoint.connect(protocol.Factory.forProtocol(lambda: proto))
        d.addCallback(lambda _: proto.done)
        d.addCallbacks(lambda answer: _SERVING_MARK in answer, lambda _: False)
        return d

    def whenReady(self) -> Deferred:
        """
        @return: a Deferred firing with the connect string once the server
            serves: C{srvr} reports its mode (polled every 100 ms).
        @raise ZooKeeperStartError: (as failure) not ready within
            C{ready_timeout_s}, or the process exited.
        """
        deadline = self._reactor.seconds() + self.ready_timeout_s

        async def poll() -> str:
            while True:
                if self._process is None or self._process.exited:
                    raise ZooKeeperStartError(
                        f"ZooKeeper process exited before it was ready; command: {' '.join(self.command)}"
                    )
                if await self._probe():
                    return self.connect_string
                if self._reactor.seconds() > deadline:
                    raise ZooKeeperStartError(
                        f"ZooKeeper on port {self.port} not ready after {self.ready_timeout_s} s;"
                        f" command: {' '.join(self.command)}"
                    )
                await task.deferLater(self._reactor, 0.1, lambda: None)

        return Deferred.fromCoroutine(poll())

    def stopService(self) -> Deferred:
        Service.stopService(self)
        process = self._process
        if process is None or process.exited:
            return Deferred.fromCoroutine(_noop())
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


def start_blocking(data_dir: str, port: int, tick_time_ms: int = 2000, log_path: str | None = None) -> subprocess.Popen:
    """
    Start ZooKeeper without a reactor; its output goes to C{log_path} (default
    C{<data_dir>/zookeeper.log}).  Call L{wait_ready} next.
    """
    config = write_config(data_dir, port, tick_time_ms)
    command = java_command(config)
    log_path = log_path or os.path.join(os.path.abspath(data_dir), "zookeeper.log")
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=os.path.abspath(data_dir)
        )
    popen.kafkatw_command = command  # type: ignore[attr-defined]
    popen.kafkatw_log_path = log_path  # type: ignore[attr-defined]
    return popen


def wait_ready(port: int, timeout_s: float = 30.0, popen: subprocess.Popen | None = None) -> None:
    """
    Poll C{srvr} every 100 ms until the server reports its mode (it serves).

    @raise ZooKeeperStartError: not ready within C{timeout_s}, or C{popen} exited.
    """
    deadline = time.monotonic() + timeout_s
    command = " ".join(getattr(popen, "kafkatw_command", []) or ["java ... " + MAIN_CLASS])
    while True:
        if popen is not None and popen.poll() is not None:
            raise ZooKeeperStartError(
                f"ZooKeeper exited with {popen.returncode} before it was ready; command: {command};"
                f" log: {getattr(popen, 'kafkatw_log_path', '?')}"
            )
        if serving(port):
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
