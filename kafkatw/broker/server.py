"""
One broker: a tree of services (listeners, embedded ZooKeeper, ZooKeeper
session, logs, replica fetchers, controller, request handling).

Named after Kafka's C{KafkaServer}.  Each part is a L{BrokerPart} child of the
L{KafkaServer} C{MultiService}, started in order once the previous one is up
and stopped one at a time in reverse order.  Start-up order: the listeners are bound
(connections wait, not accepted, until the broker has started), (embedded
ZooKeeper,) the ZooKeeper session, the cluster id, the log directories'
C{meta.properties} checked against it, the log directories' lock taken (and the
ZooKeeper session of a dead predecessor recorded under it ended, so that its
registration goes at once: L{kafkatw.broker.log_dir_lock}), log recovery, the
registry watches, then the broker registration — so a broker is only visible
in ``/brokers/ids`` once it can serve, and the expected failures (a taken port,
ZooKeeper unreachable, log directories of another cluster or broker, or in use
by another process) happen before anything in the log directories is
touched (an empty C{.lock} file aside).  They are L{BrokerStartupError}s (and the
errors listed in L{EXPECTED_START_FAILURES}): L{KafkaServer.start_error} is one
line for a person, and L{KafkaServer.ready} fails.  Shut-down (SIGTERM under twistd) reverses
it: stop accepting, answer waiting fetches and let in-flight requests finish,
flush and checkpoint the logs (a clean-shutdown marker spares the next start the
CRC scan of recovery), close the ZooKeeper session (its ephemeral registration goes with
it), stop an embedded ZooKeeper, and release the log directories' lock last.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import time
import uuid
from typing import Any, Callable

from twisted.application import service
from twisted.internet import defer, endpoints, task, threads
from twisted.internet.error import CannotListenError
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.python.failure import Failure

from ..client.connection import BrokerConnectionError
from ..client.security import SecurityConfig
from ..config import DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, BrokerConfig, topic_log_config
from ..errors import KafkaError
from ..security.tls import PrincipalMapper, TLSConfigError, VerifyLog, server_options
from ..storage.log_dir_failure import LogDirFiles, LogDirsFailedError, OpenFilesLimitError
from ..storage.log_manager import LogManager
from ..storage.meta_properties import MetaPropertiesError, check_log_dirs, ensure_meta_properties
from ..zookeeper.bridge import (NodeExistsError, ZooKeeperClient, ZooKeeperError, ZooKeeperUnavailableError,
                                next_connected)
from ..zookeeper.config_changes import ConfigChangeListener
from ..zookeeper.embedded import EmbeddedZooKeeperService, ZooKeeperNotInstalledError, ZooKeeperStartError
from ..zookeeper.registry import BrokerIdInUseError, Registry
from ..zookeeper.zk_data import BROKER_IDS_PATH, DEFAULT_BROKER_ENTITY
from .admin import AdminManager
from .apis import KafkaApis
from .authenticator import SaslServerAuthenticator, listener_sasl_settings, sasl_client_settings
from .authorizer import authorizer_from_config
from .group_coordinator_election import GroupCoordinatorElection
from .transaction_apis import TransactionWiring
from .controller import CONTROLLED_SHUTDOWN_PATH, KafkaController
from .fetch_apis import DEBUGGING_REPLICA_ID
from .listeners import DEFAULT_PROTOCOL_MAP, ListenerConfig, ListenerConfigError, listener_config, parse_listener
from .log_cleaner import LogCleaner
from .replica_alter_log_dirs import ReplicaAlterLogDirsManager
from .log_dir_lock import LogDirLock, LogDirLockedError
from .session_guard import GuardProcess, spawn as spawn_session_guard
from .replica_fetcher import ReplicaFetcherManager
from .metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from .network import KafkaServerFactory, TLSListenerPolicy
from .replica_manager import ReplicaManager

__all__ = [
    "KafkaServer",
    "BrokerStartupError",
    "EXPECTED_START_FAILURES",
    "listener_endpoint",
    "metrics_advertised_host",
    "embedded_zookeeper_port",
    "EMBEDDED_ZOOKEEPER_PORT",
    "EMBEDDED_ZOOKEEPER_PORT_ENV",
]

_log = Logger()

#: The port of ``--zookeeper embedded``, as ZooKeeper's usual client port.
EMBEDDED_ZOOKEEPER_PORT = 2181

#: The environment variable that moves the embedded ZooKeeper's default port.
EMBEDDED_ZOOKEEPER_PORT_ENV = "KAFKATW_EMBEDDED_ZOOKEEPER_PORT"

#: How often the leader epoch checkpoints assigned a period ago are fsynced, on the thread pool
#: (L{kafkatw.storage.log_manager.LogManager.leader_epoch_syncs}; Kafka schedules such a flush
#: at once, KAFKA-15046): 5-10 s after a leadership, not in the event loop.
LEADER_EPOCH_SYNC_INTERVAL_MS = 5000


class BrokerStartupError(Exception):
    """
    An expected failure to start: its message is the one line a person reads
    (what failed, and the setting that changes it), shown without a traceback.
    """


#: Failures to start that are the environment's or the configuration's, not
#: kafkatw's: logged as one line, without a traceback.
EXPECTED_START_FAILURES: tuple[type[BaseException], ...] = (
    BrokerStartupError,
    ZooKeeperStartError,
    ZooKeeperNotInstalledError,
    MetaPropertiesError,
    BrokerIdInUseError,
    ListenerConfigError,
    LogDirLockedError,
    OpenFilesLimitError,
)


def embedded_zookeeper_port(connect: str, environ: Any = None) -> int | None:
    """
    The port of an embedded ZooKeeper for C{zookeeper.connect}.

    @param connect: C{embedded} (the port from C{$KAFKATW_EMBEDDED_ZOOKEEPER_PORT},
        else 2181), C{embedded:PORT}, or a real connect string.
    @param environ: the environment (default C{os.environ}).
    @return: the port, or C{None} when C{connect} does not ask for an embedded server.
    @raise ValueError: a port that is not an integer in 1..65535.
    """
    if connect != "embedded" and not connect.startswith("embedded:"):
        return None
    environ = os.environ if environ is None else environ
    _, sep, value = connect.partition(":")
    source = "zookeeper.connect=embedded:PORT"
    if not sep:
        value = environ.get(EMBEDDED_ZOOKEEPER_PORT_ENV, str(EMBEDDED_ZOOKEEPER_PORT))
        source = EMBEDDED_ZOOKEEPER_PORT_ENV
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ValueError(f"{source}: the embedded ZooKeeper's port must be an integer in 1..65535, not {value!r}")
    return port


class _StartingFactory(Factory):
    """
    A listener's factory: L{serving} builds the connections; without it (while
    the broker stops) each connection is closed.  The listeners are bound first
    so that a taken port fails the start before the logs are touched, but
    their ports accept nothing until the broker has started: a client's
    connection waits in the kernel's accept queue (the listen backlog) and is
    answered once the broker serves, as Kafka's acceptors start only then
    (C{SocketServer.enableRequestProcessing}).
    """

    serving: Factory | None = None

    def buildProtocol(self, addr: Any) -> Any:
        return None if self.serving is None else self.serving.buildProtocol(addr)


def listener_endpoint(listener: str) -> str:
    """
    A Twisted server endpoint string for a listener: Kafka's
    C{NAME://host:port} (under Kafka's default protocol map), or a Twisted
    endpoint string (a plaintext listener; not C{ssl:}).

    @raise ValueError: a listener that does not parse (L{ListenerConfigError}).
    """
    return parse_listener(listener, DEFAULT_PROTOCOL_MAP).endpoint


class BrokerPart(service.Service):
    """
    One child service of the broker: started by an async C{start}, stopped by
    an async C{stop}.

    @ivar started: fires once C{start} has finished (or fails with its error).
    """

    def __init__(self, name: str, start: Any, stop: Any) -> None:
        self.name = name
        self._start = start
        self._stop = stop
        self.started: defer.Deferred[None] = defer.Deferred()
        self._running_start: defer.Deferred | None = None

    def __repr__(self) -> str:
        return f"<BrokerPart {self.name}>"

    def startService(self) -> None:
        super().startService()
        self._running_start = defer.Deferred.fromCoroutine(self._start())
        self._running_start.chainDeferred(self.started)

    def stopService(self) -> defer.Deferred:
        if not self.running:
            return defer.succeed(None)  # stopped already (a parent's removeService stops again)
        super().stopService()
        if self._running_start is not None and not self._running_start.called:
            self._running_start.cancel()
        return defer.Deferred.fromCoroutine(self._stop())


class KafkaServer(service.MultiService):
    """
    A kafkatw broker as a Twisted service.

    @ivar port: the TCP port of the first listener once listening (useful with port 0).
    @ivar ready: fires once the broker has started (registered in ZooKeeper),
        or fails with the reason it could not.
    @ivar start_error: after a failed start, one line saying why
        (C{"broker 0 failed to start: ..."}); C{None} otherwise.
    """

    def __init__(self, config: BrokerConfig, reactor: Any, http: Any = None, *,
                 zookeeper_client_factory: Callable[..., Any] | None = None,
                 random_source: random.Random | None = None,
                 log_dir_files_factory: Callable[[str], LogDirFiles] = LogDirFiles,
                 wall_clock: Callable[[], float] = time.time, freeze_after_start: bool = True) -> None:
        super().__init__()
        self.config = config
        #: the broker's timers and durations run on its time (C{seconds}, C{callLater}); under
        #: L{kafkatw.tap} that is a monotonic clock (L{kafkatw.tap.use_monotonic_clock})
        self.reactor = reactor
        #: the machine's wall clock, C{time.time}'s shape (s since the epoch): what
        #: L{milliseconds} reads; a simulation gives each broker its own (L{kafkatw.simulation})
        self.wall_clock = wall_clock
        #: makes the ZooKeeper client: C{factory(connect, reactor, session_timeout_ms=...,
        #: connection_timeout_ms=...)}, with L{ZooKeeperClient}'s interface; None: L{ZooKeeperClient}
        #: (a simulation gives a model of ZooKeeper: L{kafkatw.simulation})
        self.zookeeper_client_factory = zookeeper_client_factory or ZooKeeperClient
        #: the random choices of the broker's own clients (reconnection backoff jitter);
        #: a seeded one makes them repeatable (L{kafkatw.simulation}); None: seeded by the system
        self.random_source = random_source
        #: makes the file operations of each log dir (L{LogManager}'s C{files_factory}); a
        #: simulation gives a disk model that loses unflushed writes on a crash (L{kafkatw.simulation.disk})
        self.log_dir_files_factory = log_dir_files_factory
        #: C{gc.freeze()} once started (the process is this broker); a process of many brokers that
        #: come and go (L{kafkatw.simulation}) says False: what they built must stay collectable
        self.freeze_after_start = freeze_after_start
        #: what the HTTP port (C{metrics.port}) serves next to /metrics, and its lag monitor: a
        #: L{kafkatw.web.BrokerHttp} (given by L{kafkatw.tap}); without one, /metrics only
        self.http = http
        self.broker_id: int = config["broker.id"]
        self.metadata = MetadataCache(self.broker_id)
        self.embedded_zookeeper: EmbeddedZooKeeperService | None = None
        self.zookeeper: ZooKeeperClient | None = None
        self.registry: Registry | None = None
        self.log_manager: LogManager | None = None
        #: the log directories' lock, held from their check until the broker has stopped
        self.log_dir_lock: LogDirLock | None = None
        #: the guard process of L{kafkatw.broker.session_guard} (C{zookeeper.session.guard.enable}), once spawned
        self.session_guard: GuardProcess | None = None
        #: the sessions of this broker's earlier processes recorded in its log dirs (their ids)
        self._recorded_sessions: list[int] = []
        self._session_recorded = False
        self._zookeeper_closed = False
        self.log_cleaner: LogCleaner | None = None
        #: the endpoints registered in /brokers/ids/<id> (None before the registration)
        self._registered_endpoints: list[tuple[str, str, int]] | None = None
        #: the brokers whose registration's data this broker watches (L{_watch_registrations})
        self._registration_watches: set[int] = set()
        self.replica_manager: ReplicaManager | None = None
        self.controller: KafkaController | None = None
        self.fetcher_manager: ReplicaFetcherManager | None = None
        self.inter_broker_client: Any = None
        #: the coordinators' client to other brokers (L{_start_fetchers})
        self.coordinator_client: Any = None
        self._state_watches: dict[tuple[str, int], Any] = {}
        self.apis: KafkaApis | None = None
        self.admin: AdminManager | None = None
        self.transactions: TransactionWiring | None = None
        self._listening_ports: list[Any] = []
        self._loops: dict[str, list[task.LoopingCall]] = {}
        #: the ZooKeeper writes telling the controller of failed log dirs, in order (L{_log_dir_failed})
        self._log_dir_events: defer.Deferred = defer.succeed(None)
        #: a propagation of the offline replicas is queued, not started (one is enough for many refusals)
        self._log_dir_event_queued = False
        #: checkpoint writes running on the thread pool (L{_write_in_thread})
        self._checkpoint_writes: set[defer.Deferred] = set()
        self._zookeeper_connect: str | None = None
        self._fetchers_stopping: defer.Deferred | None = None
        self._topic_watches: dict[str, Any] = {}
        self._topic_configs: dict[str, dict[str, str]] = {}
        #: topic -> its effective config (L{topic_log_config}), dropped whenever an input changes.
        self._effective_topic_configs: dict[str, dict] = {}
        #: Follows /config/changes (created with the ZooKeeper session, started
        #: once the broker serves); other parts add their handlers with
        #: C{config_changes.on_entity_change("users", ...)}.
        self.config_changes: ConfigChangeListener | None = None
        self.port: int | None = None
        self.metrics_port: int | None = None
        #: broker id -> L{kafkatw.zookeeper.zk_data.BrokerInfo} of the registered brokers (with their metrics ports)
        self.registered_brokers: dict[int, Any] = {}
        #: With the HTTP port (C{metrics.port}): RequestMetrics histograms and the consumer lag
        #: (L{kafkatw.broker.metrics.RequestMetrics}, L{kafkatw.web.lag.LagMonitor}).
        self.request_metrics: Any = None
        self.lag_monitor: Any = None
        #: With the HTTP port: the garbage collector's pauses and the event loop's lag
        #: (L{kafkatw.broker.pauses.GcPauses}, L{kafkatw.broker.pauses.EventLoopLag}).
        self.gc_pauses: Any = None
        self.event_loop_lag: Any = None
        self._lag_admin: Any = None
        self.ready: defer.Deferred[None] = defer.Deferred()
        self.start_error: str | None = None
        #: fires with one line when the running broker must stop (L{stop_on_error})
        self.stopped_on_error: defer.Deferred[str] = defer.Deferred()
        self._starting: defer.Deferred | None = None
        self._stopping = False
        #: listener name -> the factory of its bound port (closing connections until the broker serves).
        self._listener_factories: dict[str, _StartingFactory] = {}
        #: listener name -> its TLS options (TLS listeners only).
        self._tls_options: dict[str, Any] = {}
        #: listener name -> why client certificates were refused (listeners asking for them).
        self._verify_logs: dict[str, VerifyLog] = {}
        #: listener name -> its bound port.
        self.bound: dict[str, Any] = {}
        self.listeners: ListenerConfig | None = None

    # --- life cycle ----------------------------------------------------------

    def milliseconds(self) -> int:
        """
        The wall clock in ms since the epoch (Kafka's C{Time.milliseconds()}):
        for what is written down or compared with times written down --
        record timestamps (C{LogAppendTime}), time-based retention and
        segment rolls (C{retention.ms}, C{segment.ms}), transaction and
        offset commit timestamps, the ages of notifications in ZooKeeper.
        It may step back or forward.
        """
        return int(self.wall_clock() * 1000)

    def hi_res_clock_ms(self) -> int:
        """
        The reactor's time in ms (Kafka's C{Time.hiResClockMs()}): for
        durations and deadlines kept in this process only -- a follower's
        lag since it last caught up (C{replica.lag.time.max.ms}), fetch
        session eviction.  Monotonic under L{kafkatw.tap}, as the timers.
        """
        return int(self.reactor.seconds() * 1000)

    def startService(self) -> None:
        """
        Start the broker (asynchronously: see L{ready}).  A failure to start is
        logged once — one line for the L{EXPECTED_START_FAILURES}, with a
        traceback otherwise — and fails L{ready}; stopping the process is the
        caller's decision (L{kafkatw.tap} stops the reactor and exits non-zero).
        """
        super().startService()
        self._starting = defer.Deferred.fromCoroutine(self._start())

        def failed(failure: Any) -> None:
            if self._stopping and failure.check(defer.CancelledError):
                _log.info("broker {id}: start abandoned by the shutdown", id=self.broker_id)
            elif failure.check(*EXPECTED_START_FAILURES):
                self.start_error = f"broker {self.broker_id} failed to start: {failure.getErrorMessage()}"
                _log.critical("{message}", message=self.start_error)
            else:
                self.start_error = (f"broker {self.broker_id} failed to start: unexpected "
                                    f"{failure.type.__name__}: {failure.getErrorMessage()} (traceback in the log)")
                _log.failure("broker {id} failed to start", failure, id=self.broker_id)
            if not self.ready.called:
                self.ready.errback(failure)

        self._starting.addCallbacks(lambda _: self.ready.callback(None), failed)

    async def _start(self) -> None:
        """Start the child services in order (L{_parts}), each once the previous one is up."""
        log_dirs = [os.path.abspath(d) for d in self.config["log.dirs"]]
        for d in log_dirs:
            os.makedirs(d, exist_ok=True)
        for part in self._parts(log_dirs):
            part.setServiceParent(self)
            await part.started

    def _parts(self, log_dirs: list[str]) -> list["BrokerPart"]:
        """
        The broker as a tree of services, in start order (stopped in reverse):
        listeners (bound first, closing connections until the broker serves),
        the embedded ZooKeeper (when asked for), the ZooKeeper session, the
        logs, the replica fetchers, the controller, and request handling
        (which registers the broker last and, on stop, hands its leaderships
        over first).
        """
        parts = [BrokerPart("listeners", self._listen, self._unbind)]
        embedded_port = embedded_zookeeper_port(self.config["zookeeper.connect"])
        if embedded_port is not None:
            parts.append(BrokerPart("embedded-zookeeper", lambda: self._start_embedded_zookeeper(log_dirs, embedded_port),
                                    self._stop_embedded_zookeeper))
        parts += [
            BrokerPart("zookeeper-session", self._start_zookeeper_session, self._stop_zookeeper_session),
            BrokerPart("logs", lambda: self._start_logs(log_dirs), self._stop_logs),
            BrokerPart("replica-fetchers", self._start_fetchers, self._stop_fetchers),
            BrokerPart("controller", self._start_controller, self._stop_controller),
            BrokerPart("requests", self._start_serving, self._stop_serving),
        ]
        if self.config["metrics.port"] >= 0 and self.http is not None:
            parts.append(BrokerPart("consumer-lag", lambda: self.http.start(self), lambda: self.http.stop(self)))
        return parts

    # --- the parts' starts and stops ---------------------------------------------

    async def _start_embedded_zookeeper(self, log_dirs: list[str], port: int) -> None:
        zk_dir = os.path.join(log_dirs[0], "zookeeper")
        self.embedded_zookeeper = EmbeddedZooKeeperService(
            zk_dir, port, self.reactor,
            port_setting=f"--zookeeper embedded:PORT (or the {EMBEDDED_ZOOKEEPER_PORT_ENV} environment variable)",
            on_unexpected_exit=lambda reason: self.stop_on_error(
                f"broker {self.broker_id} stops: its embedded {reason}; ZooKeeper keeps its data in {zk_dir}"
                " (on the first log dir's filesystem: a full disk stops it)"),
        )
        self.embedded_zookeeper.startService()
        self._zookeeper_connect = await self.embedded_zookeeper.whenReady()
        _log.info("embedded ZooKeeper ready at {connect}", connect=self._zookeeper_connect)

    def stop_on_error(self, message: str) -> None:
        """
        The broker cannot go on (its embedded ZooKeeper died: without it no
        broker of the cluster can reach ZooKeeper): log C{message} (one line,
        level critical) and fire L{stopped_on_error} with it, rather than run
        on as a silent casualty.  Stopping is the process's decision:
        L{kafkatw.tap} stops the reactor (a clean shutdown) and exits with
        status 1, so that a supervisor sees it (systemd's
        C{Restart=on-failure}).  Once the broker is stopping anyway, the
        message is only logged.
        """
        _log.critical("{line}", line=message)
        if not self._stopping and not self.stopped_on_error.called:
            self.stopped_on_error.callback(message)

    async def _stop_embedded_zookeeper(self) -> None:
        if self.embedded_zookeeper is not None:
            await self.embedded_zookeeper.stopService()

    async def _start_zookeeper_session(self) -> None:
        config = self.config
        self.zookeeper = self.zookeeper_client_factory(
            self._zookeeper_connect or config["zookeeper.connect"], self.reactor,
            session_timeout_ms=config["zookeeper.session.timeout.ms"],
            connection_timeout_ms=config["zookeeper.connection.timeout.ms"],
        )
        try:
            await self.zookeeper.start()
        except ZooKeeperUnavailableError as e:
            raise BrokerStartupError(
                f"{e}; check zookeeper.connect (--zookeeper) or raise zookeeper.connection.timeout.ms"
            ) from None
        self.zookeeper.add_state_listener(self._zookeeper_state)
        self.registry = Registry(self.zookeeper)
        self.metadata.cluster_id = await self._zookeeper_step("reading /cluster/id", self._cluster_id)
        self.config_changes = ConfigChangeListener(self.registry, self.reactor, now_ms=self.milliseconds)
        self.config_changes.on_entity_change("topics", self._topic_config_changed)
        self.config_changes.on_entity_change("brokers", self._broker_config_changed)
        for entity_type in ("users", "clients"):  # client quotas (kafkatw/broker/quota_manager.py)
            self.config_changes.on_entity_change(
                entity_type, lambda name, config, kind=entity_type: self._quota_config_changed(kind, name, config))

    def _quota_config_changed(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        if self.apis is not None:
            self.apis.quotas.entity_changed(entity_type, name, config)

    async def _stop_zookeeper_session(self) -> None:
        if self.zookeeper is not None:
            try:
                await self.zookeeper.stop()
                self._zookeeper_closed = True
            except Exception:
                _log.failure("closing the ZooKeeper session failed")

    async def _start_logs(self, log_dirs: list[str]) -> None:
        config = self.config
        # Nothing in the log directories is touched before this check.
        check_log_dirs(log_dirs, self.broker_id, self.metadata.cluster_id)
        self.log_dir_lock = LogDirLock(log_dirs)
        self.log_dir_lock.acquire()
        if config["zookeeper.session.guard.enable"]:
            self._start_session_guard()
        await self._end_predecessor_sessions()
        for written in ensure_meta_properties(log_dirs, self.broker_id, self.metadata.cluster_id):
            _log.info("wrote {path}: broker.id={id} cluster.id={cluster}", path=os.path.join(written, "meta.properties"),
                      id=self.broker_id, cluster=self.metadata.cluster_id)
        assert self.registry is not None
        # Kafka's DynamicConfigManager reads every entity's config before following the notifications.
        for entity in (DEFAULT_BROKER_ENTITY, str(self.broker_id)):
            self._broker_config_changed(entity, await self._zookeeper_step(
                f"reading /config/brokers/{entity}", lambda entity=entity: self.registry.get_broker_config(entity)))
        self.log_manager = LogManager(log_dirs, topic_log_config(config, {}), now_ms=self.milliseconds,
                                      files_factory=self.log_dir_files_factory)
        started = time.monotonic()
        self.log_manager.load()
        _log.info("loaded {count} logs in {seconds:.3f} s", count=len(self.log_manager.all_logs()),
                  seconds=time.monotonic() - started)
        assert self.registry is not None
        self.replica_manager = ReplicaManager(self.broker_id, self.log_manager, self.metadata, self.reactor,
                                              self._topic_config, write_isr=self.registry.set_partition_state,
                                              reload_state=self._reload_partition_state, now_ms=self.hi_res_clock_ms)
        self.replica_manager.log_dir_failure_listeners.append(self._log_dir_failed)
        if self.log_manager.unclean_log_dirs:
            # a crash may have lost records this broker had not flushed (and its followers acknowledged)
            _log.warn("log dirs {dirs} were not shut down cleanly: this broker leads no partition at a state"
                      " written before it registers", dirs=", ".join(self.log_manager.unclean_log_dirs))
            self.replica_manager.fence_leadership()
        if self.log_manager.offline_log_dirs:  # failed while loading: serve the others (Kafka's loadLogs)
            for log_dir, error in self.log_manager.offline_log_dirs.items():
                _log.error("log dir {log_dir} of broker {id} is offline ({error}); its partitions are offline here"
                           " and move to other replicas; the broker serves its other log dirs ({live})",
                           log_dir=log_dir, id=self.broker_id, error=error,
                           live=", ".join(self.log_manager.live_log_dirs))
            self._log_dir_events = self._log_dir_events.addCallback(
                lambda _: defer.Deferred.fromCoroutine(self._propagate_log_dir_event()))
        self._every("logs", config["log.flush.scheduler.interval.ms"], self._flush)
        self._every("logs", config["log.flush.offset.checkpoint.interval.ms"],
                    self._write_in_thread(self.log_manager.recovery_point_checkpoints))
        self._every("logs", config["log.retention.check.interval.ms"], self._retention)
        self._every("logs", max(config["replica.lag.time.max.ms"] // 2, 10), self._shrink_isrs)
        self._every("logs", config["replica.high.watermark.checkpoint.interval.ms"],
                    self._write_in_thread(self.log_manager.high_watermark_checkpoints))
        # the leader epoch assignments of new leaderships, fsynced off the event loop (docs/storage.md)
        self._every("logs", LEADER_EPOCH_SYNC_INTERVAL_MS, self._write_in_thread(self.log_manager.leader_epoch_syncs))
        if config["log.cleaner.enable"]:
            self.log_cleaner = LogCleaner(self.log_manager, config.as_dict(), self.reactor, self.milliseconds)
            self.log_cleaner.start()
        # AlterReplicaLogDirs (KIP-113): moves between this broker's log dirs; resumes those under way
        self.replica_manager.alter_log_dirs_manager = ReplicaAlterLogDirsManager(
            self.replica_manager, self.reactor, config.as_dict())
        self.replica_manager.alter_log_dirs_manager.start()

    def _start_session_guard(self) -> None:
        """
        Start the guard that ends this broker's ZooKeeper session when this
        process dies (L{kafkatw.broker.session_guard}); only once the log
        dirs' lock is held, which is what the guard waits for to be released.
        The guard exits by itself after the lock's release in L{_stop}.  A
        guard that cannot be started, or exits while the broker runs, is
        logged (warning); the broker runs on without it.
        """
        assert self.log_dir_lock is not None and self.log_dir_lock.held and self.zookeeper is not None
        guard = GuardProcess(self.broker_id)
        try:
            spawn_session_guard(self.reactor, guard, self.log_dir_lock.log_dirs, self.zookeeper.hosts,
                  self.config["zookeeper.session.timeout.ms"], self.broker_id)
        except OSError as e:
            _log.warn("could not start the session guard: {error}; after a crash this broker's ZooKeeper session "
                      "expires at the session timeout", error=e)
            return
        self.session_guard = guard
        _log.info("session guard started (pid {pid}): if this process dies, its ZooKeeper session is ended at once",
                  pid=guard.pid)

    async def _end_predecessor_sessions(self) -> None:
        """
        End the ZooKeeper sessions that this broker's earlier processes
        recorded in its log dirs (L{kafkatw.broker.log_dir_lock}).  This
        process holds the dirs' lock, so the owner of a recorded session that
        is still open died without closing it.  Ending the session deletes its
        registration (and C{/controller}, if it was the controller) now
        instead of at the session timeout.  Another broker's registration
        (another session) is never touched.  When ZooKeeper cannot be reached
        for this, the failure is logged, and the registration waits as for any
        other holder.
        """
        assert self.log_dir_lock is not None and self.zookeeper is not None
        recorded = self.log_dir_lock.recorded_sessions()
        self._recorded_sessions = [r.session_id for r in recorded]
        for session in recorded:
            try:
                ended = await self.zookeeper.end_session(session.session_id, session.password)
            except ZooKeeperError as e:
                _log.warn("could not end ZooKeeper session {session} of broker {id}'s previous process: {error}",
                          session=f"{session.session_id:#x}", id=self.broker_id, error=e)
                continue
            if ended:
                _log.info("ended ZooKeeper session {session} of broker {id}'s previous process, which held these"
                          " log dirs and is gone: its registration and other ephemeral nodes are deleted now,"
                          " not at the session timeout", session=f"{session.session_id:#x}", id=self.broker_id)
            else:
                _log.info("ZooKeeper session {session} of broker {id}'s previous process had ended already",
                          session=f"{session.session_id:#x}", id=self.broker_id)

    def _record_session(self) -> None:
        """
        Record the current ZooKeeper session in the log dirs, before it
        registers anything (at start and after each new session), so that
        the next process can end it if this one dies.  A failed write is
        logged: after a crash, the next start then waits for this session
        to expire.
        """
        lock, zookeeper = self.log_dir_lock, self.zookeeper
        if lock is None or not lock.held or zookeeper is None:
            return
        session_id, password = zookeeper.session_id, zookeeper.session_password
        if session_id is None or password is None:
            return
        try:
            lock.record_session(session_id, password)
            self._session_recorded = True
        except OSError as e:
            _log.warn("could not record ZooKeeper session {session} in the log dirs: {error}; after a crash, the"
                      " next start waits for the session to expire", session=f"{session_id:#x}", error=e)

    def _write_in_thread(self, prepare: Callable[[], Callable[[], None]]) -> Callable[[], defer.Deferred]:
        """
        A periodic checkpoint: C{prepare()} reads the offsets on the reactor
        thread and returns their write, which runs on the reactor's thread
        pool, so that requests are not held up by its fsyncs.  A failed
        write is logged (the next period writes again).
        """
        def checkpoint() -> defer.Deferred:
            write = prepare()
            d = threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(), write)
            self._checkpoint_writes.add(d)

            def done(result: Any) -> None:
                self._checkpoint_writes.discard(d)
                if isinstance(result, Failure):
                    if result.check(LogDirsFailedError) and self.log_manager is not None:
                        self.log_manager.report(result.value)  # those log dirs go offline (KIP-112)
                    else:
                        _log.warn("writing a checkpoint failed: {error}", error=result.value)

            return d.addBoth(done)
        checkpoint.__name__ = getattr(prepare, "__name__", "checkpoint")
        return checkpoint

    async def _stop_logs(self) -> None:
        self._stop_loops("logs")
        # a checkpoint being written finishes before the final ones of close()
        await defer.DeferredList(list(self._checkpoint_writes))
        if self.log_cleaner is not None:
            await self.log_cleaner.stop()
            self.log_cleaner = None
        if self.replica_manager is not None and self.replica_manager.alter_log_dirs_manager is not None:
            self.replica_manager.alter_log_dirs_manager.stop()
        if self.log_manager is not None:
            self.log_manager.close()

    async def _start_fetchers(self) -> None:
        from ..client.client import KafkaClient

        self.inter_broker_client = KafkaClient(
            self.reactor, "127.0.0.1:1", client_id=f"broker-{self.broker_id}-fetcher",
            request_timeout_ms=self.config["replica.socket.timeout.ms"], security=self.inter_broker_security(),
            random_source=self.random_source)
        # The coordinators' requests to other brokers (WriteTxnMarkers, KIP-890's verification, the
        # share-group state) go through connections of their own, as Kafka's channel managers' do: a
        # WriteTxnMarkers waits for the followers to fetch the markers, and queued on a follower's
        # fetch connection behind it, it held that fetch's answer until a request timed out.
        self.coordinator_client = KafkaClient(
            self.reactor, "127.0.0.1:1", client_id=f"broker-{self.broker_id}-coordinator",
            request_timeout_ms=self.config["replica.socket.timeout.ms"], security=self.inter_broker_security(),
            random_source=self.random_source)
        self.coordinator_client.brokers = self.inter_broker_client.brokers  # the addresses the fetchers keep
        assert self.replica_manager is not None
        self.fetcher_manager = ReplicaFetcherManager(
            self.broker_id, self.config, self.inter_broker_client, self.reactor, self._broker_address,
            self._append_as_follower, self._throttled, truncate=self.replica_manager.truncate_as_follower)
        self.replica_manager.fetcher_manager = self.fetcher_manager
        self._apply_throttle()

    async def _stop_fetchers(self) -> None:
        if self.fetcher_manager is not None:
            stopping = self._fetchers_stopping or self.fetcher_manager.stop()
            await self.inter_broker_client.close()  # fails requests in flight: the fetchers' loops end
            await stopping
        if self.coordinator_client is not None:
            await self.coordinator_client.close()

    async def _start_controller(self) -> None:
        self.controller = KafkaController(self.broker_id, self.config, self.registry, self.metadata,
                                          self._topic_config, log_ends=self._replica_log_ends)
        if self.config["auto.leader.rebalance.enable"]:
            self._every("controller", self.config["leader.imbalance.check.interval.seconds"] * 1000,
                        self._check_leader_imbalance)

    def _replica_log_ends(self, broker_id: int, keys: list[tuple[str, int]]) -> defer.Deferred:
        """
        Broker C{broker_id}'s replicas of C{keys}: C{{key: (latest leader
        epoch, log end offset)}}, for the controller's unclean recovery
        (L{KafkaController._recovery_leader}); a partition it answered with
        an error is left out.  Asked with a ListOffsets for the latest offset
        from the debugging replica id, which any replica answers
        (L{kafkatw.broker.fetch_apis.DEBUGGING_REPLICA_ID}); this broker's
        own replicas are read here.  A lost or refused connection is tried
        again every C{replica.fetch.backoff.ms} within
        C{replica.socket.timeout.ms} (a broker just restarted: the
        connection to its previous process was lost with it), after which
        the broker counts as one that did not answer.
        """
        if broker_id == self.broker_id and self.replica_manager is not None:
            ends = {}
            for key in keys:
                try:
                    ends[key] = self.replica_manager.local_log_end(*key)
                except KafkaError:
                    pass
            return defer.succeed(ends)
        topics: dict[str, list[int]] = {}
        for topic, partition in keys:
            topics.setdefault(topic, []).append(partition)
        body = {"replica_id": DEBUGGING_REPLICA_ID, "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                           "timestamp": -1} for p in partitions]}
                           for topic, partitions in topics.items()]}

        async def ask() -> dict[tuple[str, int], tuple[int, int]]:
            if self.inter_broker_client is None:
                raise KafkaError("the inter-broker client is not started")
            deadline = self.reactor.seconds() + self.config["replica.socket.timeout.ms"] / 1000.0
            backoff_s = self.config["replica.fetch.backoff.ms"] / 1000.0
            while True:
                try:
                    response = await self.inter_broker_client.send(broker_id, 2, body)
                    break
                except BrokerConnectionError as e:
                    # a connection to the broker's previous process, lost with it, or one it does not
                    # accept yet: its log end is asked again, as a replica fetcher would fetch again
                    if self.reactor.seconds() + backoff_s > deadline:
                        raise
                    _log.info("asking broker {broker} for its log ends: {error}; again in {backoff_ms} ms",
                              broker=broker_id, error=e, backoff_ms=int(backoff_s * 1000))
                    await task.deferLater(self.reactor, backoff_s, lambda: None)
            return {(topic.name, p.partition_index): (int(p.leader_epoch), int(p.offset))
                    for topic in response.topics for p in topic.partitions if not p.error_code}

        return defer.Deferred.fromCoroutine(ask())

    async def _stop_controller(self) -> None:
        self._stop_loops("controller")
        if self.controller is not None:
            self.controller.resign()

    async def _start_serving(self) -> None:
        config = self.config
        assert self.registry is not None
        assert self.config_changes is not None
        self.admin = AdminManager(config, self.registry, self.metadata, on_topic=self._topic_added,
                                  config_written=self.config_changes.catch_up)
        self.apis = KafkaApis(config, self.replica_manager, self.metadata, self.admin, self.reactor,
                              now_ms=self.milliseconds, hi_res_clock_ms=self.hi_res_clock_ms)
        self.apis.controller = self.controller
        self.apis.request_metrics = self.request_metrics
        # group configs (KIP-848, KIP-932: kafkatw/broker/group_config.py), current from /config/groups
        self.config_changes.on_entity_change("groups", self.apis.group_configs.update)
        step = self._zookeeper_step
        await step("reading /config/groups", lambda: self.apis.group_configs.load(self.registry))
        self.apis.authorizer = authorizer_from_config(config, self.registry, now_ms=self.milliseconds)
        if self.apis.authorizer is not None:
            await step("loading the ACLs", self.apis.authorizer.start)  # every ACL cached before the first request
        client = self.coordinator_client
        self.transactions = TransactionWiring(
            config, self.replica_manager, self.metadata, self.admin, self.registry,
            lambda broker, api_key, body, version=None: defer.Deferred.fromCoroutine(
                client.send(broker, api_key, body, version=version)),
            self.reactor, self.milliseconds)
        self.apis.transactions = self.transactions
        self.transactions.start()
        # KIP-932 share-partition state in __share_group_state (kafkatw/broker/share_coordinator.py)
        self.apis.start_share_coordinator(
            self.admin, self.milliseconds,
            lambda broker, api_key, body: defer.Deferred.fromCoroutine(client.send(broker, api_key, body)))
        advertised = self._advertised_endpoints()
        assert self.listeners is not None
        # The factories are ready before registering; the ports accept once the broker has
        # started (below): a peer that connects in between waits in the listen backlog.
        for listener in self.listeners.listeners:
            tls = None
            if listener.tls:
                mapper = PrincipalMapper.parse(config.for_listener(listener.name, "ssl.principal.mapping.rules"))
                tls = TLSListenerPolicy(self.reactor, config["ssl.handshake.timeout.ms"], mapper.name,
                                        self._verify_logs.get(listener.name))
            authenticator = None
            if listener.security_protocol.startswith("SASL_"):
                settings = listener_sasl_settings(config, listener.name, self.registry, self.reactor)
                authenticator = (lambda connection, settings=settings:
                                 SaslServerAuthenticator(connection, self.apis, settings, self.reactor))
            factory: Any = KafkaServerFactory(self.apis, config["socket.request.max.bytes"], listener.name,
                                              listener.security_protocol, tls, authenticator)
            if listener.tls:
                factory = TLSMemoryBIOFactory(self._tls_options[listener.name], False, factory, clock=self.reactor)
            self._listener_factories[listener.name].serving = factory

        registry = self.registry
        await step("watching /brokers/ids", lambda: registry.watch_brokers(self._brokers_changed, detailed=True))
        # A leader adds no broker in controlled shutdown to an ISR (KIP-841).
        await step(f"watching {CONTROLLED_SHUTDOWN_PATH}",
                   lambda: registry.client.watch_children(CONTROLLED_SHUTDOWN_PATH, self._shutdowns_changed))
        await step("watching /brokers/topics", lambda: registry.watch_topics(self._topics_changed))
        inter_broker = self.listeners.inter_broker_listener
        host, advertised_port = next((h, p) for name, h, p in advertised if name == inter_broker)
        assert self.zookeeper is not None
        self._record_session()
        self.zookeeper.on_new_session(self._record_session)  # before the registry's re-registration
        await self._register(host, advertised_port, advertised)
        await step("watching /controller", lambda: registry.watch_controller(self._controller_changed))
        config_changes = self.config_changes
        assert config_changes is not None
        for entity_type, name, entity_config in await step("reading the quota configs",
                                                           registry.list_quota_entity_configs):
            self._quota_config_changed(entity_type, name, entity_config)
        await step("watching /config/changes", config_changes.start)
        # Group coordinators are elected in ZooKeeper and fenced by their epoch (issue 27).
        election = GroupCoordinatorElection(self.broker_id, self.registry)
        self.apis.group_coordinator.use_election(election)
        await step("joining the group coordinator elections", election.start)
        # What start-up built (modules, loaded logs and indexes, metadata) lives
        # as long as the broker: out of the collector's generations, a full
        # collection no longer walks it, which keeps those pauses out of the
        # request latency's tail (docs/design.md, "Garbage collection").
        if self.freeze_after_start:
            gc.freeze()
        for port in self.bound.values():
            if callable(getattr(port, "startReading", None)):  # a socket's port (a FileDescriptor)
                port.startReading()  # accept: the connections that waited are answered now
        _log.info("broker {id} started at {endpoints} (cluster {cluster})", id=self.broker_id,
                  endpoints=",".join(f"{n}://{h}:{p}" for n, h, p in advertised), cluster=self.metadata.cluster_id)

    async def _stop_serving(self) -> None:
        if self.config_changes is not None:
            self.config_changes.stop()
        await self._controlled_shutdown()
        for factory in self._listener_factories.values():
            factory.serving = None  # new connections are closed from now on
        if self.transactions is not None:
            self.transactions.stop()
        if self.apis is not None:
            self.apis.stop_share_groups()
        if self.replica_manager is not None:
            self.replica_manager.complete_all_delayed()
        if self.apis is not None:
            # Waiting JoinGroup/SyncGroup requests are answered NOT_COORDINATOR;
            # batched offset commits are written (ZooKeeper is still up) and the
            # group coordinator claims released, for the other brokers to take.
            await self.apis.group_coordinator.shutdown()
            deadline = self.reactor.seconds() + 10
            while (self.apis.in_flight or any(not c.idle for c in self.apis.connections)) and \
                    self.reactor.seconds() < deadline:
                await task.deferLater(self.reactor, 0.01, lambda: None)
            for connection in list(self.apis.connections):
                connection.transport.loseConnection()

    async def _unbind(self) -> None:
        if self.gc_pauses is not None:
            self.gc_pauses.uninstall()
        if self.event_loop_lag is not None:
            self.event_loop_lag.stop()
        for port in self._listening_ports:
            await port.stopListening()
        self._listener_factories.clear()
        self._listening_ports.clear()

    async def _listen(self) -> None:
        """
        Bind every listener (and the metrics port).  A listener accepts no
        connection until the broker has started: they wait (L{_StartingFactory}).

        @raise BrokerStartupError: a port is taken or cannot be bound, a
            listener setting is wrong, a TLS listener's files cannot be used.
        """
        try:
            self.listeners = listener_config(self.config)
        except ListenerConfigError as e:
            raise BrokerStartupError(str(e)) from None
        for listener in self.listeners.listeners:
            if listener.tls:
                try:
                    options = self._tls_options[listener.name] = self._listener_tls_options(listener.name)
                    if self.config.for_listener(listener.name, "ssl.client.auth").strip().lower() != "none":
                        self._verify_logs[listener.name] = VerifyLog()
                        self._verify_logs[listener.name].install(options)
                except TLSConfigError as e:
                    raise BrokerStartupError(f"listener {listener.name}: {e}") from None
        for listener in self.listeners.listeners:
            endpoint = endpoints.serverFromString(self.reactor, listener.endpoint)
            factory = self._listener_factories[listener.name] = _StartingFactory()
            try:
                port = await endpoint.listen(factory)
            except CannotListenError as e:
                raise BrokerStartupError(
                    f"cannot listen on {listener.source}: {_socket_error(e)}; stop what holds"
                    " the port or change listeners (--listeners)"
                ) from None
            if callable(getattr(port, "stopReading", None)):  # a socket's port (a FileDescriptor)
                port.stopReading()  # listening, but accepting nothing until the broker has started
            self._listening_ports.append(port)
            self.bound[listener.name] = port
            _log.info("bound listener {name} ({protocol}) at {address} (connections wait until the broker"
                      " has started)", name=listener.name, protocol=listener.security_protocol,
                      address=port.getHost())
        self.port = self._listening_ports[0].getHost().port
        if self.config["metrics.port"] >= 0:
            try:
                await self._start_metrics(self.config["metrics.port"])
            except CannotListenError as e:
                raise BrokerStartupError(
                    f"cannot listen on {self.config['metrics.bind.address'] or '*'}:{self.config['metrics.port']}"
                    f" for metrics: {_socket_error(e)}; change metrics.port or metrics.bind.address"
                ) from None

    async def _start_metrics(self, port: int) -> None:
        from prometheus_client.twisted import MetricsResource
        from twisted.web.resource import Resource
        from twisted.web.server import Site

        from .metrics import RequestMetrics, metrics_registry
        from .pauses import EventLoopLag, GcPauses

        self.request_metrics = RequestMetrics(self.reactor.seconds)
        self.gc_pauses = GcPauses()
        self.gc_pauses.install()
        if self.config["metrics.event.loop.lag.interval.ms"] > 0:
            self.event_loop_lag = EventLoopLag(self.reactor, self.config["metrics.event.loop.lag.interval.ms"] / 1000)
            self.event_loop_lag.start()
        metrics = MetricsResource(registry=metrics_registry(self))
        if self.http is not None:
            site = self.http.site(self, metrics)
        else:
            site = Site(Resource(), reactor=self.reactor)
            site.resource.putChild(b"metrics", metrics)
        bind = self.config["metrics.bind.address"]
        endpoint = (endpoints.TCP6ServerEndpoint(self.reactor, port, interface=bind) if ":" in bind
                    else endpoints.TCP4ServerEndpoint(self.reactor, port, interface=bind))
        listening = await endpoint.listen(site)
        self._listening_ports.append(listening)
        self.metrics_port = listening.getHost().port
        shown = f"[{bind}]" if ":" in bind else bind or "0.0.0.0"
        if self.http is None:
            _log.info("metrics at http://{host}:{port}/metrics", host=shown, port=self.metrics_port)
        else:
            _log.info("metrics at http://{host}:{port}/metrics (health at /healthz and /readyz{console})",
                      host=shown, port=self.metrics_port,
                      console=", console at /console/" if site.resource.children.get(b"console") else "")

    async def _register(self, host: str, port: int, advertised: list[tuple[str, str, int]] | None = None) -> None:
        """
        Register in C{/brokers/ids}.  The session of this broker's previous
        process, recorded in its log dirs, was ended at start
        (L{_end_predecessor_sessions}), so its node is gone already.  Another
        session's node (another broker with this id, or a predecessor that
        recorded no session: an older kafkatw, a failed write) is waited for,
        up to C{zookeeper.session.timeout.ms} and a little more, rather than
        failing at once as Kafka does.

        @raise BrokerIdInUseError: another live broker holds the id after that.
        """
        assert self.registry is not None
        deadline = self.reactor.seconds() + self.config["zookeeper.session.timeout.ms"] / 1000.0 + 5
        reported: set[int] = set()
        unclean = bool(self.log_manager is not None and self.log_manager.unclean_log_dirs)
        registry = self.registry
        protocol_map = ({name: self.listeners.protocol_map[name] for name, _, _ in advertised}
                        if advertised and self.listeners is not None else None)
        while True:
            try:
                stat = await self._zookeeper_step(f"registering in {BROKER_IDS_PATH}", lambda: registry.register_broker(
                    self.broker_id, host, port, endpoints=advertised, protocol_map=protocol_map,
                    unclean_shutdown=unclean, metrics_port=self.metrics_port,
                    metrics_host=metrics_advertised_host(self.config["metrics.bind.address"], host)
                    if self.metrics_port is not None else None))
                if self.replica_manager is not None:
                    self.replica_manager.registered(stat.czxid)
                self._registered_endpoints = list(advertised or ())
                return
            except BrokerIdInUseError as e:
                if self.reactor.seconds() > deadline:
                    raise
                if e.session_id not in reported:  # once per holder, not every retry
                    reported.add(e.session_id)
                    recorded = ", ".join(f"{s:#x}" for s in self._recorded_sessions) or "none"
                    _log.warn("{error}; it is not this broker's previous process (sessions recorded in its log"
                              " dirs: {recorded}): waiting up to {seconds:.0f} s for that session to expire",
                              error=e, recorded=recorded, seconds=deadline - self.reactor.seconds())
                await task.deferLater(self.reactor, 0.5, lambda: None)

    async def _zookeeper_step(self, what: str, call: Callable[[], Any]) -> Any:
        """
        One ZooKeeper step of start-up, C{await call()}, again each time it
        fails with a lost connection (C{ConnectionLoss}, C{SessionExpired}:
        L{ZooKeeperUnavailableError}) once the client is connected again, as
        Kafka's C{KafkaZkClient.retryRequestsUntilConnected} does: a passing
        loss does not fail the start.  So each step is one that may be made
        again (a read, a watch, a create that takes its own node as made).

        Bounded by C{zookeeper.connection.timeout.ms} (Kafka's
        C{ZooKeeperClient.waitUntilConnected}): the client disconnected that
        long while the step waits, or the step still failing that long after
        its first loss, and the start fails with one line.

        @param what: the step, for that line (C{"registering in /brokers/ids"}).
        @return: what C{call()} gave.
        @raise BrokerStartupError: as said.
        """
        client = self.zookeeper
        assert client is not None
        timeout_ms = self.config["zookeeper.connection.timeout.ms"]
        deadline: float | None = None
        while True:
            try:
                return await self._unless_disconnected(defer.maybeDeferred(call), what)
            except ZooKeeperUnavailableError as e:
                now = self.reactor.seconds()
                deadline = now + timeout_ms / 1000.0 if deadline is None else deadline
                if now >= deadline:
                    raise BrokerStartupError(
                        f"{what}: ZooKeeper at {client.hosts} failed it for {timeout_ms} ms ({e}); check ZooKeeper"
                        " or raise zookeeper.connection.timeout.ms") from None
                _log.info("broker {id} start-up: {what} lost its ZooKeeper connection ({error}); again once"
                          " connected", id=self.broker_id, what=what, error=e)
                if client.connected:  # connected again already (or a new session): not at once, not in a loop
                    await task.deferLater(self.reactor, 0.1, lambda: None)
                else:
                    await self._unless_disconnected(next_connected(self.zookeeper), what)

    def _unless_disconnected(self, d: defer.Deferred, what: str) -> defer.Deferred:
        """
        C{d}'s result, unless the ZooKeeper client stays disconnected for
        C{zookeeper.connection.timeout.ms} before it comes: then C{d} is
        cancelled, and this fails with L{BrokerStartupError}.
        """
        client = self.zookeeper
        assert client is not None
        timeout_ms = self.config["zookeeper.connection.timeout.ms"]
        result: defer.Deferred = defer.Deferred(lambda _: d.cancel())
        timer: list[Any] = []

        def gone() -> None:
            timer.clear()
            if not result.called:
                result.errback(BrokerStartupError(
                    f"{what}: lost the connection to ZooKeeper at {client.hosts} and it did not come back within"
                    f" {timeout_ms} ms; check ZooKeeper or raise zookeeper.connection.timeout.ms"))
                d.addErrback(lambda f: None)
                d.cancel()

        def state(state: str) -> None:
            if state == "CONNECTED":
                while timer:
                    timer.pop().cancel()
            elif not timer:
                timer.append(self.reactor.callLater(timeout_ms / 1000.0, gone))

        def done(value: Any) -> None:
            client.remove_state_listener(state)
            while timer:
                timer.pop().cancel()
            if not result.called:
                if isinstance(value, Failure):
                    result.errback(value)
                else:
                    result.callback(value)

        if d.called:
            return d
        client.add_state_listener(state)
        if not client.connected:
            state("SUSPENDED")
        d.addBoth(done)
        return result

    def _every(self, group: str, interval_ms: int, function: Any) -> None:
        """Run C{function} every C{interval_ms}, until the part C{group} stops."""
        loop = task.LoopingCall(function)
        loop.clock = self.reactor
        loop.start(interval_ms / 1000.0, now=False).addErrback(
            lambda f: _log.failure("periodic task {name} failed", f, name=getattr(function, "__name__", "?"))
        )
        self._loops.setdefault(group, []).append(loop)

    def _stop_loops(self, group: str) -> None:
        for loop in self._loops.pop(group, []):
            if loop.running:
                loop.stop()

    def _advertised_endpoints(self) -> list[tuple[str, str, int]]:
        """
        C{(listener, host, port)} to register, per listener: its
        C{advertised.listeners} entry, else the address it is bound to
        (C{0.0.0.0}, C{::} and an empty host become C{127.0.0.1}; port 0 the bound port).
        """
        assert self.listeners is not None
        result = []
        for listener in self.listeners.listeners:
            bound = self.bound[listener.name].getHost()
            host, port = self.listeners.advertised.get(listener.name, (bound.host, bound.port))
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
            result.append((listener.name, host, port or bound.port))
        return result

    def _listener_tls_options(self, listener: str) -> Any:
        """The TLS options of a TLS listener from its C{ssl.*} settings (C{listener.name.<name>.ssl.*} first)."""
        config = self.config

        def get(key: str) -> Any:
            return config.for_listener(listener, key)

        for key in ("ssl.keystore.type", "ssl.truststore.type"):
            if get(key).upper() != "PEM":
                raise TLSConfigError(f"{key}={get(key)}: kafkatw reads PEM stores only (KIP-651)")
        PrincipalMapper.parse(get("ssl.principal.mapping.rules"))  # fail the start on bad rules
        return server_options(get("ssl.keystore.location"), get("ssl.key.password") or None,
                              get("ssl.truststore.location") or None, get("ssl.client.auth"),
                              get("ssl.enabled.protocols"), get("ssl.cipher.suites"))

    @property
    def shutting_down(self) -> bool:
        """Whether the broker has begun to stop (its C{/readyz} then answers 503)."""
        return self._stopping

    def inter_broker_security(self) -> SecurityConfig:
        """
        The L{SecurityConfig} of this broker's own connections to other
        brokers, for the inter-broker listener: its protocol; on TLS the trust
        store (C{ssl.truststore.location}), the key store as client
        certificate, and C{ssl.endpoint.identification.algorithm}; on SASL the
        mechanism C{sasl.mechanism.inter.broker.protocol} and the credentials
        of the listener's JAAS entry (L{sasl_client_settings}).
        """
        listeners = self.listeners or listener_config(self.config)
        name = listeners.inter_broker_listener
        protocol = listeners.protocol_map[name]
        config = self.config

        def get(key: str) -> Any:
            return config.for_listener(name, key)

        settings: dict[str, Any] = {"security_protocol": protocol}
        if protocol.startswith("SASL_"):
            settings.update(sasl_client_settings(config, name))
        if protocol in ("SSL", "SASL_SSL"):
            settings.update(
                ssl_cafile=get("ssl.truststore.location") or None,
                ssl_certfile=get("ssl.keystore.location") or None,
                ssl_password=get("ssl.key.password") or None,
                ssl_check_hostname=get("ssl.endpoint.identification.algorithm").strip().lower() == "https",
                ssl_ciphers=":".join(get("ssl.cipher.suites")) or None,
            )
        return SecurityConfig(**settings)

    async def _cluster_id(self) -> str:
        assert self.zookeeper is not None
        cluster_id = base64_uuid()
        try:
            await self.zookeeper.create("/cluster/id", json.dumps({"version": "1", "id": cluster_id}, separators=(",", ":")).encode(),
                                        makepath=True)
            return cluster_id
        except NodeExistsError:
            data, _stat = await self.zookeeper.get("/cluster/id")
            return json.loads(data)["id"]

    def stopService(self) -> defer.Deferred:
        self._stopping = True
        if self.session_guard is not None:
            self.session_guard.broker_stopping()  # it exits once the lock is released (or is stopped with us)
        if self._starting is not None and not self._starting.called:
            self._starting.cancel()
        return defer.Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        """Stop the child services one at a time, in reverse start order."""
        _log.info("broker {id} shutting down", id=self.broker_id)
        for part in reversed(list(self)):
            try:
                await part.stopService()
            except Exception:
                _log.failure("stopping {part} failed", part=getattr(part, "name", repr(part)))
            part.disownServiceParent()
        if self.log_dir_lock is not None:
            # Released last, once the session is closed: the next holder knows any session left open is dead.
            if self._session_recorded and self._zookeeper_closed:
                try:
                    self.log_dir_lock.forget_session()  # closed: nothing for the next start to end
                except OSError as e:
                    _log.warn("could not remove the recorded ZooKeeper session: {error}", error=e)
            self.log_dir_lock.release()
        service.Service.stopService(self)
        _log.info("broker {id} stopped", id=self.broker_id)

    async def _controlled_shutdown(self) -> None:
        """
        Ask the controller to move this broker's leaderships to other in-sync
        replicas and to take it out of the ISRs of the partitions it follows
        (C{/admin/controlled_shutdown/<id>}, ephemeral, as Kafka's
        ControlledShutdown request), and wait until it has, or for
        C{controlled.shutdown} to time out (10 s), so clients see only
        retriable errors and acks=all writes do not wait on a stopped broker.
        """
        if self.zookeeper is None or self.replica_manager is None or not self.zookeeper.connected:
            return

        def movable() -> list[Any]:
            live = set(self.metadata.brokers)
            led = [p for p in self.replica_manager.led_partitions()
                   if any(r != self.broker_id and r in live for r in p.isr)]
            # partitions whose live leader (another broker) still lists this one in sync
            followed = [key for key, state in self.metadata.partition_states.items()
                        if self.broker_id in state.isr and state.leader != self.broker_id and state.leader in live]
            return led + followed

        # Stop following first (Kafka's controller sends StopReplica): a last fetch
        # would otherwise put this broker back into ISRs the controller takes it out of.
        if self.fetcher_manager is not None:
            self._fetchers_stopping = self.fetcher_manager.stop()
        if not movable():
            return
        try:
            await self.zookeeper.create(f"{CONTROLLED_SHUTDOWN_PATH}/{self.broker_id}", b"", ephemeral=True,
                                        makepath=True)
        except NodeExistsError:
            pass
        except Exception as e:
            _log.warn("controlled shutdown not requested: {error}", error=e)
            return
        deadline = self.reactor.seconds() + 10
        while movable() and self.reactor.seconds() < deadline:
            await task.deferLater(self.reactor, 0.05, lambda: None)
        left = movable()
        if left:
            _log.warn("controlled shutdown: still leading or in the ISR of {count} partitions after 10 s",
                      count=len(left))
        else:
            _log.info("controlled shutdown: leaderships moved, out of every ISR")

    # --- replication ---------------------------------------------------------

    def _broker_address(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.metadata.brokers.get(broker_id)
        return None if broker is None else (broker.host, broker.port)

    def _append_as_follower(self, partition: Any, records: bytes) -> Any:
        assert self.replica_manager is not None
        return self.replica_manager.append_as_follower(partition, records)

    # --- failed log dirs (KIP-112) ---------------------------------------------

    def _log_dir_failed(self, log_dir: str, message: str) -> None:
        """
        A log dir failed and its partitions are offline here
        (L{ReplicaManager.handle_log_dir_failure}).  With every log dir
        offline the broker cannot serve anything: it stops, with one line
        and exit status 1 (L{stop_on_error}; Kafka halts).  Otherwise it
        records its offline log dirs and their partitions in its
        registration and writes a log dir event notification, on which the
        controller moves their leaderships away and drops this broker from
        their ISRs (docs/replication.md, "Disk failures").  With C{log_dir}
        C{""} no log dir failed: a replica's log was refused for want of file
        descriptors (L{OpenFilesLimitError}); it is offline here all the same,
        listed under C{""} in the registration, as Kafka's controller learns
        from a LeaderAndIsr response's C{KAFKA_STORAGE_ERROR} for it.
        """
        assert self.log_manager is not None and self.replica_manager is not None
        offline = self.log_manager.offline_log_dirs
        if not self.log_manager.live_log_dirs:
            self.stop_on_error(
                f"broker {self.broker_id} stops: every log dir has failed ("
                + "; ".join(f"{d}: {error}" for d, error in offline.items())
                + "); fix or replace the disks and start it again: it recovers its logs and rejoins")
            return
        if not log_dir:  # a replica refused for want of file descriptors (its log dir is fine)
            _log.error("a replica of broker {id} is offline here ({error}); the controller moves its leadership to"
                       " another replica", id=self.broker_id, error=message)
        else:
            _log.error("log dir {log_dir} of broker {id} failed ({error}); its partitions are offline here and move"
                       " to other replicas; the broker serves its other log dirs ({live})", log_dir=log_dir,
                       id=self.broker_id, error=message, live=", ".join(self.log_manager.live_log_dirs))
        if self._log_dir_event_queued:
            return  # the one queued writes every offline replica known when it runs
        self._log_dir_event_queued = True

        def propagate(_: object) -> defer.Deferred:
            self._log_dir_event_queued = False
            return defer.Deferred.fromCoroutine(self._propagate_log_dir_event())

        self._log_dir_events = self._log_dir_events.addCallback(propagate)

    async def _propagate_log_dir_event(self) -> None:
        """Write this broker's offline log dirs in its registration, then the notification (in that order)."""
        if self.registry is None or self.log_manager is None or self.replica_manager is None:
            return
        by_dir: dict[str, list[tuple[str, int]]] = {d: [] for d in self.log_manager.offline_log_dirs}
        for key, log_dir in self.replica_manager.offline_partitions.items():
            by_dir.setdefault(log_dir, []).append(key)
        try:
            await self.registry.set_offline_log_dirs(self.broker_id, by_dir)
            await self.registry.propagate_log_dir_event(self.broker_id)
        except Exception as e:
            _log.error("broker {id} could not tell the controller about its failed log dirs: {error}",
                       id=self.broker_id, error=e)

    def _check_leader_imbalance(self) -> None:
        if self.controller is not None and self.controller.active:
            self.controller.check_preferred_imbalance(self.config["leader.imbalance.per.broker.percentage"])

    def _throttled(self, topic: str, partition: int) -> bool:
        """
        Whether this broker's fetches of C{topic-partition} are throttled: a
        replica a reassignment is adding here, or one the topic's
        C{follower.replication.throttled.replicas} names (C{partition:broker}
        or C{*}, as Kafka's reassignment tool writes it).
        """
        meta = self.metadata.topics.get(topic)
        if meta is None:
            return False
        if self.broker_id in meta.adding_replicas.get(partition, ()):
            return True
        named = self._topic_config(topic).get("follower.replication.throttled.replicas") or ()
        return "*" in named or f"{partition}:{self.broker_id}" in named

    def _broker_config_changed(self, entity: str, config: dict[str, str]) -> None:
        """
        A dynamic broker config (C{/config/brokers/<id>} or C{<default>})
        changed: swap the layer in L{config}, then apply what depends on it
        (the follower's replication throttle, every log's config).
        """
        if entity == DEFAULT_BROKER_ENTITY:
            source = DYNAMIC_DEFAULT_BROKER_CONFIG
        elif entity == str(self.broker_id):
            source = DYNAMIC_BROKER_CONFIG
        else:
            return  # another broker's
        skipped = self.config.set_dynamic(source, config)
        for name, reason in skipped.items():
            _log.warn("dynamic broker config {entity} {name} ignored: {reason}", entity=entity, name=name,
                      reason=reason)
        _log.info("dynamic broker config {entity} is now {config}", entity=entity, config=config)
        self._apply_throttle()
        self._effective_topic_configs.clear()
        if self.log_manager is not None:
            self.log_manager.set_default_config(topic_log_config(self.config, {}))
            for topic in {log.topic for log in self.log_manager.all_logs()}:
                self.log_manager.update_config(topic, self._topic_config(topic))
        self._recheck_offline_partitions()
        if source == DYNAMIC_BROKER_CONFIG:
            self._maybe_readvertise()

    def _maybe_readvertise(self) -> None:
        """
        C{advertised.listeners} changed for this broker (a per-broker dynamic
        config, Kafka's C{DynamicListenerConfig}): register the new endpoints
        in C{/brokers/ids/<id>} (the same ephemeral node, its data set: the
        broker epoch stays); every broker's data watch on it
        (L{_watch_registrations}) updates its metadata, so that Metadata
        answers carry the new address.  A value that does not fit the
        listeners is logged and left unapplied.
        """
        if self.listeners is None or self._registered_endpoints is None:
            return  # not registered yet: the registration uses the config as it is then
        try:
            wanted = listener_config(self.config).advertised
        except ListenerConfigError as e:
            _log.error("dynamic advertised.listeners of broker {id} not applied: {error}", id=self.broker_id,
                       error=e)
            return
        if wanted == self.listeners.advertised:
            return
        self.listeners = self.listeners._replace(advertised=wanted)
        advertised = self._advertised_endpoints()
        inter_broker = self.listeners.inter_broker_listener
        host, port = next((h, p) for name, h, p in advertised if name == inter_broker)
        _log.info("broker {id} advertises {endpoints} now (advertised.listeners changed)", id=self.broker_id,
                  endpoints=",".join(f"{n}://{h}:{p}" for n, h, p in advertised))
        defer.ensureDeferred(self._register(host, port, advertised)).addErrback(
            lambda f: _log.failure("registering broker {id}'s new endpoints failed", f, id=self.broker_id))

    def _watch_registrations(self, infos: dict[int, Any]) -> None:
        """
        Watch the data of each broker's registration (Kafka's controller
        watches C{/brokers/ids/<id>} for endpoint changes): a broker that
        changes its C{advertised.listeners} sets it, and the brokers are
        read again (L{_brokers_changed}).
        """
        if self.registry is None:
            return
        for broker_id in infos:
            if broker_id in self._registration_watches:
                continue
            self._registration_watches.add(broker_id)
            first = [True]

            def changed(data: Any, first: list = first) -> None:
                if first[0]:
                    first[0] = False  # the watch's first call: the data just read
                    return
                if data is not None and self.registry is not None:
                    self.registry.list_brokers(detailed=True).addCallbacks(
                        self._brokers_changed,
                        lambda f: _log.warn("reading the brokers after a registration changed failed: {error}",
                                            error=f.getErrorMessage()))

            self.registry.client.watch_data(f"{BROKER_IDS_PATH}/{broker_id}", changed).addErrback(
                lambda f: _log.warn("watching a broker registration failed: {error}", error=f.getErrorMessage()))

    def _apply_throttle(self) -> None:
        rate = self.config["follower.replication.throttled.rate"]
        if self.fetcher_manager is not None:
            self.fetcher_manager.set_throttle(rate if rate < 2**63 - 1 else None)

    def _topic_config_changed(self, name: str, config: dict[str, str]) -> None:
        """C{/config/topics/<name>} changed (a config change notification): apply it to the topic's logs."""
        if name not in self._topic_watches and name not in self.metadata.topics:
            return  # not (or no longer) a topic here; its config is read when the topic is seen
        self._topic_configs[name] = dict(config)
        self._effective_topic_configs.pop(name, None)
        meta = self.metadata.topics.get(name)
        if meta is not None:
            self.metadata.set_topic(dataclasses.replace(meta, config=dict(config)))
        if self.log_manager is not None:
            self.log_manager.update_config(name, self._topic_config(name))
        _log.info("topic {topic} config is now {config}", topic=name, config=config)
        self._recheck_offline_partitions()

    def _recheck_offline_partitions(self) -> None:
        """
        The controller looks again for partitions without a live leader: an
        C{unclean.leader.election.enable} just turned on may elect one (as
        Kafka's controller does on that change).
        """
        if self.controller is not None and self.controller.active:
            self.controller.topics_changed().addErrback(
                lambda f: _log.failure("re-electing offline partitions failed", f))

    def _shrink_isrs(self) -> None:
        if self.replica_manager is not None:
            self.replica_manager.shrink_isrs(self.config["replica.lag.time.max.ms"])

    def _partition_state_changed(self, topic: str, partition: int, state: Any) -> None:
        cached = self.metadata.partition_states.get((topic, partition))
        if state is not None and cached is not None and (state.leader_epoch, state.zk_version) < (
                cached.leader_epoch, cached.zk_version):
            state = cached  # an older read delivered late; the newer one was applied
        self.metadata.set_partition_state(topic, partition, state)
        meta = self.metadata.topics.get(topic)
        if meta is not None and self.replica_manager is not None:
            self.replica_manager.apply_state(topic, partition, meta.partitions.get(partition, []), state)
        if self.controller is not None and self.controller.active:
            self.controller.partition_changed((topic, partition))

    def _reload_partition_state(self, topic: str, partition: int) -> None:
        assert self.registry is not None
        d = self.registry.get_partition_state(topic, partition)
        d.addCallback(lambda state: self._partition_state_changed(topic, partition, state))

        def failed(f: Failure) -> None:
            if f.check(ZooKeeperUnavailableError):
                # the partition's state watch reads it again once the session is connected
                _log.info("re-reading {topic}-{partition}'s state waits for ZooKeeper: {error}", topic=topic,
                          partition=partition, error=f.getErrorMessage())
                return
            _log.failure("re-reading {topic}-{partition}'s state failed", f, topic=topic, partition=partition)

        d.addErrback(failed)

    def _watch_partition_states(self, meta: TopicMetadata) -> None:
        assert self.registry is not None
        for partition in meta.partitions:
            key = (meta.name, partition)
            if key in self._state_watches:
                continue
            self._state_watches[key] = True
            d = self.registry.watch_partition_state(
                meta.name, partition, lambda state, p=partition: self._partition_state_changed(meta.name, p, state))

            def watching(watch: Any, key: tuple[str, int] = key) -> None:
                if self._state_watches.get(key) is True:
                    self._state_watches[key] = watch
                else:
                    watch.cancel()

            d.addCallbacks(watching, lambda f, key=key: _log.failure("watching {key} failed", f, key=key))

    def _unwatch_partition_states(self, topic: str) -> None:
        for key in [k for k in self._state_watches if k[0] == topic]:
            watch = self._state_watches.pop(key)
            if watch is not True:
                watch.cancel()

    # --- periodic log tasks --------------------------------------------------

    def _flush(self) -> None:
        assert self.log_manager is not None
        self.log_manager.flush_dirty(self.milliseconds())

    def _retention(self) -> None:
        assert self.log_manager is not None
        self.log_manager.run_retention(self.milliseconds())

    # --- registry watches ----------------------------------------------------

    def _zookeeper_state(self, state: str) -> None:
        if self._stopping and state == "LOST":
            _log.info("ZooKeeper session closed")
        else:
            _log.info("ZooKeeper session {state}", state=state)

    def _controller_changed(self, controller_id: int | None) -> None:
        self.metadata.controller_id = controller_id if controller_id is not None else -1
        if self.controller is None:
            return
        self.controller.controller_changed(controller_id)
        if controller_id is None or (controller_id == self.broker_id and not self.controller.active):
            d = self.controller.elect()
            d.addErrback(lambda f: _log.failure("controller election failed", f))

    def _brokers_changed(self, infos: dict[int, Any]) -> None:
        # Brokers reach each other through the inter-broker listener (a broker
        # registered without it is reached at its PLAINTEXT, else first, endpoint).
        inter_broker = self.listeners.inter_broker_listener if self.listeners is not None else "PLAINTEXT"
        self.registered_brokers = dict(infos)  # their metrics ports, for the console (kafkatw.web)
        self._watch_registrations(infos)
        brokers: dict[int, tuple[str, int, str | None]] = {}
        for broker_id, info in infos.items():
            host, port = info.address(inter_broker) or (info.host, info.port)
            brokers[broker_id] = (host, port, info.rack)
        self.metadata.set_brokers({
            broker_id: BrokerEndpoint(broker_id, host, port, rack, infos[broker_id].endpoints)
            for broker_id, (host, port, rack) in brokers.items()
        })
        if self.apis is not None:
            # Groups whose coordinator (a function of the live brokers) is no longer this broker move away.
            self.apis.group_coordinator.brokers_changed()
        if self.fetcher_manager is not None:
            self.fetcher_manager.brokers_changed({b: (e[0], e[1]) for b, e in brokers.items()})
        if self.controller is not None:
            self.controller.brokers_changed(brokers)

    def _shutdowns_changed(self, ids: list[str]) -> None:
        """The children of C{/admin/controlled_shutdown}: the brokers in controlled shutdown."""
        self.metadata.set_shutting_down_brokers({int(i) for i in ids if i.isdigit()})

    def _topics_changed(self, names: list[str]) -> None:
        assert self.registry is not None
        current = set(names)
        for name in list(self._topic_watches):
            if name not in current:
                del self._topic_watches[name]
                self._topic_removed(name)
        for name in names:
            if name not in self._topic_watches:
                self._topic_watches[name] = True
                self._start_watching_topic(name)

    def _start_watching_topic(self, name: str) -> None:
        """
        Read the topic's config and watch its assignment; when the connection
        to ZooKeeper is lost meanwhile, again once connected (a topic never
        watched is a topic this broker never replicates: the simulation,
        seed 16, a drop of the connection as the broker starts).
        """
        assert self.registry is not None
        d = self.registry.get_topic_config(name)
        d.addCallback(self._watch_topic, name)

        def failed(failure: Failure) -> None:
            if not failure.check(ZooKeeperUnavailableError):
                _log.failure("watching topic {topic} failed", failure, topic=name)
            elif self._topic_watches.get(name) is True:  # not deleted meanwhile
                _log.info("watching topic {topic}: {error}; again once connected to ZooKeeper", topic=name,
                          error=failure.getErrorMessage())
                self._again_once_connected(
                    lambda: self._start_watching_topic(name) if self._topic_watches.get(name) is True else None)

        d.addErrback(failed)

    def _again_once_connected(self, f: Callable[[], object]) -> None:
        """C{f()} once the ZooKeeper client is connected (0.1 s from now if it is), unless the broker stops."""
        assert self.zookeeper is not None
        if self._stopping:
            return
        d = task.deferLater(self.reactor, 0.1, lambda: None) if self.zookeeper.connected else next_connected(self.zookeeper)
        d.addCallback(lambda _: None if self._stopping else f())

    def _watch_topic(self, config: dict[str, str], name: str) -> Any:
        assert self.registry is not None
        self._topic_configs[name] = config
        self._effective_topic_configs.pop(name, None)

        def changed(assignment: Any) -> None:
            if assignment is None:
                self._topic_removed(name)
                return
            meta = TopicMetadata(name, assignment.topic_id, dict(assignment.partitions),
                                 dict(self._topic_configs.get(name, {})), dict(assignment.adding_replicas))
            self.metadata.set_topic(meta)
            self._topic_added(meta)
            self._watch_partition_states(meta)

        return self.registry.watch_topic(name, changed)

    def _topic_config(self, topic: str) -> dict:
        effective = self._effective_topic_configs.get(topic)
        if effective is None:
            meta = self.metadata.topics.get(topic)
            overrides = meta.config if meta is not None else self._topic_configs.get(topic, {})
            effective = self._effective_topic_configs[topic] = topic_log_config(self.config, overrides, strict=False)
        return effective

    def _topic_added(self, meta: TopicMetadata) -> None:
        self._topic_configs.setdefault(meta.name, dict(meta.config))
        self._effective_topic_configs.pop(meta.name, None)
        if self.replica_manager is None or self.log_manager is None:
            return
        self.log_manager.update_config(meta.name, self._topic_config(meta.name))
        for (topic, partition) in list(self.replica_manager.partitions):
            if topic == meta.name and self.broker_id not in meta.partitions.get(partition, ()):
                _log.info("{topic}-{partition} is no longer assigned to broker {id}; deleting its log",
                          topic=topic, partition=partition, id=self.broker_id)
                self.replica_manager.remove_partition(topic, partition)
        for partition, replicas in meta.partitions.items():
            if self.broker_id in replicas:
                self.replica_manager.host_partition(meta.name, partition)
            state = self.metadata.partition_states.get((meta.name, partition))
            if state is not None:
                self.replica_manager.apply_state(meta.name, partition, replicas, state)

    def _topic_removed(self, name: str) -> None:
        meta = self.metadata.topics.get(name)
        self._unwatch_partition_states(name)
        self.metadata.remove_topic(name)
        self._topic_configs.pop(name, None)
        self._effective_topic_configs.pop(name, None)
        if meta is not None and self.replica_manager is not None:
            for partition in meta.partitions:
                self.replica_manager.remove_partition(name, partition)
            _log.info("topic {topic} deleted; removed its local logs", topic=name)


def metrics_advertised_host(bind_address: str, listener_host: str) -> str:
    """
    The host the HTTP port (C{metrics.port}) is registered at for the
    other brokers' consoles: C{metrics.bind.address}, or, when it binds
    every interface (C{""}, C{0.0.0.0}, C{::}), the inter-broker
    listener's advertised host C{listener_host}, the address the other
    brokers already reach this one at.
    """
    if bind_address in ("", "0.0.0.0", "::"):
        return listener_host
    return bind_address


def _socket_error(error: CannotListenError) -> str:
    # CannotListenError's str() repeats the address; its socketError says why ("Address already in use").
    reason = error.socketError
    return getattr(reason, "strerror", None) or str(reason)


def base64_uuid() -> str:
    """A random UUID in Kafka's URL-safe base64 form (cluster ids, topic ids)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
