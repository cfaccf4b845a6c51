"""
C{twistd kafkatw}: command-line options and the broker service.

    twistd -n kafkatw --broker-id 0 --listeners tcp:9092:interface=127.0.0.1 \\
        --log-dirs /var/lib/kafkatw --zookeeper embedded

Configuration is layered as Kafka's is: defaults, then C{--config
server.properties}, then the flags below, then each C{--override key=value}
(any key of L{kafkatw.config.BROKER_CONFIG}, by its Kafka name).

Failures are loud, for a person and for a supervisor (systemd's
C{Restart=on-failure}):

  - a usage error (an unknown flag, a value the broker cannot honour such as
    C{log.cleanup.policy=shred}) prints one line and a pointer to C{--help}
    on stderr and exits 2, before anything is touched;
  - a failure to start (a taken port, ZooKeeper unreachable, log directories
    of another cluster: L{kafkatw.broker.server.KafkaServer.start_error}) is
    one line in the log, and on stderr too when the log goes elsewhere; the
    reactor stops and the process exits 1.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import resource
import sys
from typing import Any, Callable

from twisted.internet.error import ReactorNotRunning
from twisted.logger import Logger
from twisted.python import usage

from .client.clock import use_monotonic_clock
from .config import BrokerConfig
from .properties import parse_properties

_log = Logger()

__all__ = ["Options", "makeService", "raise_open_files_limit", "use_monotonic_clock"]


class Options(usage.Options):
    """Options of C{twistd kafkatw}; validation happens in L{postOptions}."""

    synopsis = "[options]"
    longdesc = ("A Kafka-protocol broker (kafkatw): partitioned, replicated logs on disk, coordinated by "
                "ZooKeeper.")

    optParameters = [
        ["broker-id", None, None, "broker.id: this broker's id (an integer, unique in the cluster)."],
        ["listeners", None, None, "listeners: comma-separated NAME://host:port (PLAINTEXT, SSL, ... or names in"
         " listener.security.protocol.map), or Twisted endpoint strings (plaintext)."],
        ["log-dirs", None, None, "log.dirs: comma-separated directories for partition logs."],
        ["zookeeper", None, None, "zookeeper.connect: HOST:PORT[,HOST:PORT][/chroot], or 'embedded[:PORT]' "
                                  "(a child ZooKeeper on 127.0.0.1:PORT, default 2181 or "
                                  "$KAFKATW_EMBEDDED_ZOOKEEPER_PORT)."],
        ["config", None, None, "A Kafka-style server.properties file."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["overrides"] = []

    def parseOptions(self, options: Any = None) -> None:
        """
        Parse and validate.  Under twistd (as its subcommand: L{parent} is set)
        a usage error prints one line and a pointer to C{--help} on stderr and
        exits 2; twistd itself would print its whole usage first and the line
        that matters last.  Called directly, it raises L{usage.UsageError}.
        """
        try:
            super().parseOptions(options)
        except usage.UsageError as e:
            if self.parent is None:
                raise
            sys.stderr.write(f"twistd kafkatw: {e}\n"
                             "Run 'twistd -n kafkatw --help' (or 'kafkatw broker --help') for the options.\n")
            sys.stderr.flush()
            raise SystemExit(USAGE_ERROR_STATUS) from None

    def opt_override(self, value: str) -> None:
        """Set any config by its Kafka name: --override key=value (repeatable)."""
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise usage.UsageError(f"--override takes key=value, not {value!r}")
        self["overrides"].append((key.strip(), val.strip()))

    def postOptions(self) -> None:
        values: list[tuple[str, str]] = []
        self.ignored_keys: list[str] = []
        if self["config"] is not None:
            try:
                with open(self["config"], encoding="utf-8") as f:
                    properties = parse_properties(f.read())
            except OSError as e:
                raise usage.UsageError(f"cannot read --config {self['config']}: {e.strerror}") from None
            # As Kafka does, a properties file may hold keys this broker does not
            # know (a stock server.properties): they are logged and ignored.
            # --override keys must be known: a typo there is an error.
            for key, value in properties.items():
                if BrokerConfig.knows(key):
                    values.append((key, value))
                else:
                    self.ignored_keys.append(key)
        for flag, key in [("broker-id", "broker.id"), ("listeners", "listeners"), ("log-dirs", "log.dirs"),
                          ("zookeeper", "zookeeper.connect")]:
            if self[flag] is not None:
                values.append((key, self[flag]))
        values.extend(self["overrides"])
        config = BrokerConfig()
        for key, value in values:
            try:
                config.set(key, value)
            except ValueError as e:
                raise usage.UsageError(str(e)) from None
        if config["broker.id"] < 0:
            raise usage.UsageError("broker.id must be 0 or more")
        if not config["log.dirs"]:
            raise usage.UsageError("log.dirs must name at least one directory")
        if not config["listeners"]:
            raise usage.UsageError("listeners must name at least one listener")
        from .broker.listeners import listener_config
        from .broker.server import embedded_zookeeper_port

        from .security.tls import CLIENT_AUTH, PrincipalMapper

        try:
            for listener in listener_config(config).listeners:
                if not listener.tls:
                    continue
                if not config.for_listener(listener.name, "ssl.keystore.location"):
                    raise ValueError(f"listener {listener.name} ({listener.security_protocol}) needs"
                                     " ssl.keystore.location (a PEM certificate chain and private key)")
                if config.for_listener(listener.name, "ssl.client.auth").lower() not in CLIENT_AUTH:
                    raise ValueError(f"ssl.client.auth must be one of {', '.join(CLIENT_AUTH)}")
                PrincipalMapper.parse(config.for_listener(listener.name, "ssl.principal.mapping.rules"))
        except ValueError as e:
            raise usage.UsageError(str(e)) from None
        try:
            embedded = embedded_zookeeper_port(config["zookeeper.connect"]) is not None
        except ValueError as e:
            raise usage.UsageError(str(e)) from None
        if embedded:  # the README's one broker: Kafka's single-broker values for the internal topics
            config.use_single_broker_defaults()
        self.broker_config = config


#: The exit status of a usage error (as click's and argparse's).
USAGE_ERROR_STATUS = 2

#: The exit status of a failure to start.
START_FAILURE_STATUS = 1

#: The exit status of a running broker that had to stop (L{kafkatw.broker.server.KafkaServer.stop_on_error}).
STOPPED_ON_ERROR_STATUS = 1


class _ExitStatus:
    """
    The process's exit status after a failure to start.

    twistd has no public way for a service to choose the exit status (Twisted
    issue #11335): after the reactor stops it removes the pid file, returns,
    and the process exits 0.  So the status is set at interpreter exit, after
    twistd's own clean-up: an C{atexit} handler flushes the standard streams
    and ends the process with C{os._exit(status)}.
    """

    def __init__(self, register: Callable[[Callable[[], None]], Any] = atexit.register,
                 exit: Callable[[int], Any] = os._exit) -> None:
        self.status = 0
        self._register = register
        self._exit_now = exit
        self._registered = False

    def set(self, status: int) -> None:
        """Exit with C{status} at interpreter exit."""
        self.status = status
        if not self._registered:
            self._registered = True
            self._register(self.exit)

    def exit(self) -> None:
        if not self.status:
            return
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except Exception:
                pass
        self._exit_now(self.status)


_exit_status = _ExitStatus()


def _log_on_terminal(options: Options) -> bool:
    """Whether twistd's log goes to the terminal's stdout (C{-n} without C{--logfile}, or C{--logfile=-})."""
    twistd = options.parent
    if twistd is None:
        return False
    try:
        if twistd["syslog"]:
            return False
        logfile = twistd["logfile"]
        return logfile == "-" or (bool(twistd["nodaemon"]) and not logfile)
    except KeyError:
        return False


#: Where the soft limit goes when the hard one is unlimited (Linux's default C{fs.nr_open}).
OPEN_FILES_WITHOUT_HARD_LIMIT = 1048576


#: mallopt(3)'s parameters, from glibc's C{<malloc.h>}.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks below this size come from malloc's heap rather than from a mmap(2) of their own (glibc's default is
#: 128 KiB, raised as blocks are freed; 32 MiB is the most it takes on 64-bit systems).
MALLOC_MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free memory at the top of malloc's heap is given back to the system only above this size (glibc's default:
#: twice the mmap threshold).
MALLOC_TRIM_THRESHOLD = 64 * 1024 * 1024
#: Environment variables through which a person sets glibc's malloc themselves (and C{glibc.malloc} tunables in
#: C{GLIBC_TUNABLES}): then it is left as they set it.
_MALLOC_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_buffers(mallopt: Callable[[int, int], int] | None = None,
                       environ: dict[str, str] | Any = os.environ) -> bool:
    """
    Make glibc's malloc keep the memory of freed large buffers for the next
    ones (mallopt(3): C{M_MMAP_THRESHOLD} L{MALLOC_MMAP_THRESHOLD},
    C{M_TRIM_THRESHOLD} L{MALLOC_TRIM_THRESHOLD}).

    A broker allocates and frees buffers of about a batch (up to
    C{message.max.bytes}, 1 MiB by default) for every produce request and
    every follower fetch response: the frame, the records.  With glibc's
    defaults each of these either is a mmap(2) of its own or lands at the
    top of a heap that is trimmed as soon as a few of them are freed, so
    every buffer's pages are faulted in and zeroed by the kernel again, and
    unmapped again: at replication factor 3 this was a third of the
    brokers' CPU time (bench/bench_replication.py).  Kept, at most
    L{MALLOC_TRIM_THRESHOLD} of free memory stays in the process.

    Nothing is changed when the person tuned malloc themselves
    (C{MALLOC_MMAP_THRESHOLD_}, C{MALLOC_TRIM_THRESHOLD_},
    C{MALLOC_TOP_PAD_}, or C{glibc.malloc} in C{GLIBC_TUNABLES}) or when the
    C library has no C{mallopt} (not glibc).

    @param mallopt: C{mallopt(param, value) -> 1 (done) or 0}; the C
        library's (the one this process runs on) when None.
    @return: whether both parameters were set.
    """
    if any(name in environ for name in _MALLOC_ENVIRONMENT) or "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return False
    if mallopt is None:
        try:
            mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
        except (OSError, AttributeError):
            return False
    done = mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD) == 1
    return mallopt(M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD) == 1 and done


def raise_open_files_limit(getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit,
                           setrlimit: Callable[[int, tuple[int, int]], None] = resource.setrlimit) -> tuple[int, int]:
    """
    Raise this process's soft limit of open files (C{ulimit -n}) as far as
    the hard limit allows: a broker keeps one descriptor per segment open
    (its C{.log}) besides its connections, and a distribution's default soft
    limit (1024) is reached at several hundred partitions.  Kafka leaves
    this to its start scripts; a broker near the limit refuses to create more
    logs, and one whose logs do not fit does not start (docs/operations.md,
    "Open files").

    @return: C{(soft limit before, soft limit after)}; equal when it could
        not be raised (already at the hard limit, or refused).
    """
    soft, hard = getrlimit(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_WITHOUT_HARD_LIMIT if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            _log.warn("cannot raise the open files limit (ulimit -n) from {soft} to {target}: {error}",
                      soft=soft, target=target, error=e)
            return soft, soft
        return soft, target
    return soft, soft


def makeService(options: Options, reactor: Any = None) -> Any:
    """
    The broker service for C{options} (a parsed L{Options}), its HTTP port
    (C{metrics.port}) serving the probes, the consumer lag and the console
    of L{kafkatw.web} next to /metrics.  The process's reactor (C{reactor}
    None) runs its timers on the monotonic clock (L{use_monotonic_clock}).

    If the broker fails to start, its one-line reason is also written to
    stderr (unless the log already goes to the terminal), the reactor is
    stopped, and the process exits with L{START_FAILURE_STATUS}.  A running
    broker that must stop (its embedded ZooKeeper died) ends the same way,
    with L{STOPPED_ON_ERROR_STATUS}.
    """
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
        use_monotonic_clock(reactor)
    from .broker.server import KafkaServer
    from .web import BrokerHttp

    before, after = raise_open_files_limit()
    if after != before:
        _log.info("raised the open files limit (ulimit -n) from {before} to {after}", before=before, after=after)
    keep_freed_buffers()
    for d in options.broker_config["log.dirs"]:
        os.makedirs(d, exist_ok=True)
    for key in getattr(options, "ignored_keys", []):
        _log.warn("{key} in {file} is not a kafkatw config; ignored", key=key, file=options["config"])
    server = KafkaServer(options.broker_config, reactor, http=BrokerHttp())
    to_stderr = options.parent is not None and not _log_on_terminal(options)

    def failed(failure: Any) -> None:
        if server.start_error is None:  # the start was abandoned by a shutdown: no failure of its own
            return
        end(START_FAILURE_STATUS, server.start_error)

    def end(status: int, line: str) -> None:
        _exit_status.set(status)
        if to_stderr and sys.__stderr__ is not None:
            sys.__stderr__.write(line + "\n")
            sys.__stderr__.flush()
        reactor.callWhenRunning(stop)

    def stop() -> None:
        try:
            reactor.stop()
        except ReactorNotRunning:  # already stopping (a SIGTERM came first)
            pass

    server.ready.addErrback(failed)
    server.stopped_on_error.addCallback(lambda line: end(STOPPED_ON_ERROR_STATUS, line))
    return server
