"""
Kafka's C{KafkaZkClient} for kafkatw: every operation on the registries in
ZooKeeper (L{Registry}).  Where each znode lives and the JSON it holds (Kafka's
C{ZkData}) are in L{kafkatw.zookeeper.zk_data}, whose docstring has the layout.

ACLs are rewritten conditionally on the version read (L{Registry.update_acls}),
then a sequential change node names the pattern and every broker re-reads
that pattern (L{Registry.watch_acl_changes}).

Committed offsets are written fenced (L{Registry.set_committed_offsets}): one
multi that checks the version of the writer's C{/group_coordinator/epochs/<n>}
and sets every offset of the batch, so a deposed group coordinator writes
nothing (docs/consumer-groups.md, "Which broker coordinates a group").

The controller's partition-state writes are fenced the same way, by
C{/controller_epoch}'s version, and conditional on each state's zkVersion:
one multi for one partition or many (L{Registry.set_partition_states}, all
or none).

Topic deletion: Kafka 0.8+ writes C{/admin/delete_topics/<topic>} and lets the
controller delete; kafkatw deletes C{/brokers/topics/<topic>} and
C{/config/topics/<topic>} directly and lets watchers react (L{Registry.delete_topic}).

Every method returns a L{Deferred}; the client is a
L{kafkatw.zookeeper.bridge.ZooKeeperClient} or the fake in L{kafkatw.testing}.
"""

from __future__ import annotations

import json
import random as _random
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Coroutine, Iterable, NamedTuple
from urllib.parse import unquote

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from kafkatw.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkatw.security.acl import (
    AccessControlEntry,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
)
from kafkatw.security.sasl import SCRAM_MECHANISMS, ScramCredential
from kafkatw.zookeeper.bridge import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetOp,
    ZooKeeperError,
    ZooKeeperUnavailableError,
    connected_again,
)
from kafkatw.zookeeper.zk_data import (
    ACL_CHANGE_PATHS,
    ACL_CHANGE_PREFIX,
    BROKER_IDS_PATH,
    CONFIG_BROKERS_PATH,
    CONFIG_CHANGES_PATH,
    CONFIG_CHANGE_PREFIX,
    CONFIG_TOPICS_PATH,
    CONFIG_USERS_PATH,
    CONSUMERS_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    GROUP_COORDINATOR_CANDIDATES_PATH,
    GROUP_COORDINATOR_EPOCHS_PATH,
    GROUP_COORDINATOR_HOLDERS_PATH,
    LITERAL_ACL_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    LOG_DIR_EVENT_PREFIX,
    LOG_DIR_FAILURE_EVENT,
    PREFIXED_ACL_PATH,
    PRODUCER_ID_BLOCK_PATH,
    TOPICS_PATH,
    BrokerInfo,
    BrokerRegistration,
    CommittedOffset,
    GroupCoordinatorHolder,
    PartitionState,
    TopicAssignment,
    acl_path,
    consumer_offset_path,
    decode_acl_change,
    decode_broker,
    decode_committed_offset,
    decode_config,
    decode_controller,
    decode_offline_replicas,
    decode_partition_state,
    decode_topic,
    encode_acl_change,
    encode_broker,
    encode_committed_offset,
    encode_config,
    encode_config_change,
    encode_controller,
    encode_group_coordinator_holder,
    encode_log_dir_event,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic,
    group_coordinator_epoch_path,
    group_coordinator_holder_path,
    group_from_path_component,
    group_path,
    partition_state_path,
    user_entity_name,
)

__all__ = [
    "Registry",
    "BrokerIdInUseError",
    "FencedError",
    "assign_replicas",
    "MULTI_MAX_BYTES",
    "PartitionStateWrite",
    "WrittenState",
    "ControllerMovedError",
]

_log = Logger()

#: Offsets written by one multi at most (bytes of paths and values): ZooKeeper
#: refuses a request above C{jute.maxbuffer} (1 MB by default).
MULTI_MAX_BYTES = 512 * 1024


class BrokerIdInUseError(ZooKeeperError):
    """
    Another live session holds C{/brokers/ids/<id>}: a second broker with this
    broker.id, or this broker's predecessor whose session has not ended yet.

    @ivar session_id: the holder's ZooKeeper session (its C{ephemeralOwner}).
    """

    def __init__(self, message: str, session_id: int = 0) -> None:
        super().__init__(message)
        self.session_id = session_id


#: Offset znodes one fenced multi of L{Registry.delete_committed_offsets} deletes.
_DELETES_PER_MULTI = 500


class PartitionStateWrite(NamedTuple):
    """
    One partition's state in a batch of L{Registry.set_partition_states}:
    written only while the state znode is at C{expected_version} (its
    L{PartitionState.zk_version} when the write was decided).
    """

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    expected_version: int
    elr: list[int] | None = None
    #: beside C{elr}, L{PartitionState.elr_isr_zxids}
    elr_isr_zxids: list[int] | None = None
    #: L{PartitionState.leader_epoch_zxid} (-1: this write begins the epoch, or its start is not known)
    leader_epoch_zxid: int = -1
    #: beside C{isr}, L{PartitionState.isr_zxids}
    isr_zxids: list[int] | None = None


class WrittenState(NamedTuple):
    """A partition state written by L{Registry.set_partition_states}: its znode's new version and C{mzxid}."""

    version: int
    mzxid: int


class ControllerMovedError(BadVersionError):
    """
    A controller's write, fenced by C{/controller_epoch}'s version, found it
    at another version or gone: another controller was elected since
    (Kafka's C{ControllerMovedException}).  Nothing was written.
    """


def _controller_moved(error: ZooKeeperError, controller_epoch_zk_version: int) -> ControllerMovedError | None:
    """The L{ControllerMovedError} of a failed fenced write whose fence was C{/controller_epoch}, else C{None}."""
    if error.op_index != 0:
        return None
    return ControllerMovedError(f"{CONTROLLER_EPOCH_PATH} changed or is gone (expected version "
                                f"{controller_epoch_zk_version}): another controller was elected")


class FencedError(ZooKeeperError):
    """
    A fenced write found its fence znode at another version (or gone): the
    writer no longer holds what it held when it read the version (a deposed
    group coordinator).  Nothing was written.
    """


def _describe_registration(data: bytes) -> str:
    """A broker registration for a person: its endpoints and when it registered (UTC)."""
    try:
        body = json.loads(data)
        endpoints = ",".join(body.get("endpoints") or []) or f"{body.get('host')}:{body.get('port')}"
        registered = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(body["timestamp"]) / 1000))
    except (ValueError, TypeError, KeyError, OverflowError, AttributeError):
        return "an unreadable registration"
    return f"endpoints {endpoints}, registered {registered}"


def assign_replicas(
    partition_count: int,
    replication_factor: int,
    broker_ids: list[int],
    start_index: int | None = None,
    start_partition_id: int = 0,
    random: _random.Random | None = None,
) -> dict[int, list[int]]:
    """
    Spread replicas over brokers as Kafka's
    C{AdminUtils.assignReplicasToBrokersRackUnaware} does: the first replica of
    partition I{p} on broker C{(p + start) mod n}; the others shifted by a
    per-round increment so that replica sets differ between rounds.

    @param broker_ids: live broker ids (any order; sorted here as Kafka does).
    @param start_index: the fixed start index and initial shift; random when
        C{None} (Kafka's C{fixedStartIndex = -1}).
    @param start_partition_id: the first partition id (when adding partitions).
    @return: partition id -> replica list.
    @raise InvalidPartitionsError: C{partition_count < 1}.
    @raise InvalidReplicationFactorError: C{replication_factor < 1} or more than
        the number of brokers.
    """
    if partition_count < 1:
        raise InvalidPartitionsError(f"number of partitions must be larger than 0, got {partition_count}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be larger than 0, got {replication_factor}")
    brokers = sorted(broker_ids)
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}."
        )
    rng = random or _random.Random()
    first_start = start_index if start_index is not None else rng.randrange(n)
    shift = start_index if start_index is not None else rng.randrange(n)
    assignment: dict[int, list[int]] = {}
    partition = max(0, start_partition_id)
    for _ in range(partition_count):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + first_start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment[partition] = replicas
        partition += 1
    return assignment


def _deferred(coro: Coroutine[Any, Any, Any]) -> Deferred:
    return Deferred.fromCoroutine(coro)


class _AclMethods:
    """The ACL part of L{Registry} (Kafka's C{KafkaZkClient} ACL methods)."""

    client: Any

    def get_acls(self, pattern: ResourcePattern) -> Deferred:
        """@return: a Deferred firing with C{(entries, znode version)}; C{(frozenset(), -1)} when absent."""
        async def go() -> tuple[frozenset[AccessControlEntry], int]:
            try:
                data, stat = await self.client.get(acl_path(pattern))
            except NoNodeError:
                return frozenset(), -1
            return decode_acls(data), stat.version

        return _deferred(go())

    def list_acls(self) -> Deferred:
        """@return: a Deferred firing with C{{ResourcePattern: entries}}, every stored ACL."""
        async def go() -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
            found: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
            for root, pattern_type in ((LITERAL_ACL_PATH, PatternType.LITERAL),
                                       (PREFIXED_ACL_PATH, PatternType.PREFIXED)):
                try:
                    kinds = await self.client.get_children(root)
                except NoNodeError:
                    continue
                for kind in kinds:
                    try:
                        resource_type = ResourceType.parse(kind)
                    except ValueError:
                        _log.warn("ignoring ACLs of unknown resource type {path}", path=f"{root}/{kind}")
                        continue
                    try:
                        names = await self.client.get_children(f"{root}/{kind}")
                    except NoNodeError:
                        continue
                    for name in names:
                        pattern = ResourcePattern(resource_type, name, pattern_type)  # type: ignore[arg-type]
                        entries, _version = await self.get_acls(pattern)
                        if entries:
                            found[pattern] = entries
            return found

        return _deferred(go())

    def update_acls(self, pattern: ResourcePattern,
                    change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]) -> Deferred:
        """
        Rewrite a pattern's ACLs: read them, apply C{change}, and write the
        result conditionally on the version read (create the znode when it
        was absent, delete it when nothing is left), reading again after a
        concurrent change, as Kafka's C{AclAuthorizer.updateResourceAcls};
        then notify every broker (L{notify_acl_change}).

        @return: a Deferred firing with C{(entries before, entries after)}.
        """
        async def go() -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
            path = acl_path(pattern)
            while True:
                current, version = await self.get_acls(pattern)
                new = frozenset(change(current))
                if new == current:
                    return current, new
                try:
                    if not new:
                        await self.client.delete(path, version=version)
                    elif version < 0:
                        await self.client.create(path, encode_acls(new), makepath=True)
                    else:
                        await self.client.set(path, encode_acls(new), version=version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
                await self.notify_acl_change(pattern)
                return current, new

        return _deferred(go())

    def notify_acl_change(self, pattern: ResourcePattern) -> Deferred:
        """Create the sequential change node naming C{pattern} (L{encode_acl_change})."""
        store, value = encode_acl_change(pattern)
        return self.client.create(f"{store}/{ACL_CHANGE_PREFIX}", value, sequence=True, makepath=True)

    def watch_acl_changes(self, callback: Callable[[str, list[str]], object]) -> Deferred:
        """
        Call C{callback(store, children)} for both change stores
        (L{ACL_CHANGE_PATHS}) now and whenever a notification is added.

        @return: a Deferred firing with the two L{Watch}es, or failing with
            the first watch's own error (L{ZooKeeperUnavailableError} for a
            lost connection, which the broker's start-up step makes again).
        """
        return Deferred.fromCoroutine(_gather([
            self.client.watch_children(store, lambda children, store=store: callback(store, children))
            for store in ACL_CHANGE_PATHS]))

    def get_acl_change(self, store: str, child: str) -> Deferred:
        """
        @return: a Deferred firing with C{(pattern, ctime in ms)} of a
            notification, or C{None} when it is gone or unreadable.
        """
        async def go() -> tuple[ResourcePattern, int] | None:
            try:
                data, stat = await self.client.get(f"{store}/{child}")
            except NoNodeError:
                return None
            try:
                return decode_acl_change(store, data), stat.ctime
            except (ValueError, KeyError) as e:
                _log.warn("ignoring unreadable ACL change {path}: {error}", path=f"{store}/{child}", error=e)
                return None

        return _deferred(go())

    def delete_acl_change(self, store: str, child: str) -> Deferred:
        """Delete one notification (gone already: no error)."""
        return self.client.delete(f"{store}/{child}").addErrback(lambda f: f.trap(NoNodeError) and None)


class Registry(_AclMethods):
    """
    Kafka's ZooKeeper registries over one ZooKeeper session.

    @param client: a L{ZooKeeperClient} (or L{kafkatw.testing.FakeZooKeeperClient}),
        started.
    """

    def __init__(self, client: Any) -> None:
        #: C{(epoch, znode version)} of C{/controller_epoch} after this registry's
        #: last successful L{elect_controller}, or C{None}.
        self.controller_epoch: tuple[int, int] | None = None
        #: the C{czxid} of the C{/controller} znode that election was for
        self._controller_czxid: int | None = None
        self.client = client
        self._registration: BrokerInfo | None = None
        #: the broker epoch of this process's first registration after an unclean shutdown (its later ones say so)
        self._unclean_epoch: int | None = None
        self._watching_sessions = False
        #: this broker's offline log dirs and their partitions, in its registration (L{set_offline_log_dirs})
        self._offline_log_dirs: dict[str, list[tuple[str, int]]] = {}
        #: offset znodes known to exist (L{set_committed_offsets} sets them without a read)
        self._offset_znodes: set[str] = set()

    # -- brokers --------------------------------------------------------------

    def register_broker(
        self, broker_id: int, host: str, port: int, rack: str | None = None, reregister: bool = True,
        endpoints: Any = None, protocol_map: Any = None, unclean_shutdown: bool = False,
        metrics_port: int | None = None, metrics_host: str | None = None,
    ) -> Deferred:
        """
        Create the ephemeral C{/brokers/ids/<broker_id>}.

        With C{reregister}, the node is created again after each new ZooKeeper
        session (after the old one expired), as Kafka's C{KafkaZkClient} does.

        @param endpoints: C{(listener, host, port)} per listener (L{kafkatw.zookeeper.zk_data.encode_broker}).
        @param protocol_map: listener -> security protocol.
        @param unclean_shutdown: the process started after an unclean
            shutdown (L{kafkatw.zookeeper.zk_data.encode_broker}); kept in every registration of this process,
            the later ones with the broker epoch of the first (C{unclean_shutdown_epoch}).
        @param metrics_port: the broker's HTTP port (L{kafkatw.zookeeper.zk_data.encode_broker}).
        @param metrics_host: the host that HTTP port is reached at (L{kafkatw.zookeeper.zk_data.encode_broker}).
        @return: a Deferred firing with the znode's L{ZnodeStat} (its
            C{czxid} is the broker epoch, KIP-380).
        @raise BrokerIdInUseError: another live session holds the id.
        """
        info = BrokerInfo(broker_id, host, port, rack, tuple(endpoints or ()),
                          tuple(sorted((protocol_map or {}).items())), unclean_shutdown, metrics_port,
                          metrics_host)
        if reregister:
            self._registration = info
            if not self._watching_sessions:
                self._watching_sessions = True
                self.client.on_new_session(self._reregister)
        return _deferred(self._register(info))

    def _reregister(self) -> Deferred | None:
        """
        Register again in a new session.  When the connection drops under it
        (the session may live on), register again once connected, as Kafka's
        C{KafkaZkClient.registerBroker} retries until connected: a broker
        left out of C{/brokers/ids} is never added back to an ISR (seed 428
        of the simulation).
        """
        registration = self._registration
        if registration is None:
            return None
        _log.info("re-registering broker {id} in a new ZooKeeper session", id=registration.broker_id)

        def failed(failure: Any) -> None:
            failure.trap(ZooKeeperUnavailableError)
            _log.info("re-registering broker {id} failed ({error}); again once connected",
                      id=registration.broker_id, error=failure.getErrorMessage())

            def again(_: None) -> None:
                if self._registration is registration:  # not deregistered (shutdown) meanwhile
                    self._reregister()

            connected_again(self.client).addCallback(again)

        return _deferred(self._register(registration)).addErrback(failed)

    async def _register(self, info: BrokerInfo) -> Any:
        path = f"{BROKER_IDS_PATH}/{info.broker_id}"
        await self.client.ensure_path(BROKER_IDS_PATH)
        data = encode_broker(info.host, info.port, info.rack, endpoints=info.endpoints,
                                  protocol_map=dict(info.protocol_map) or None,
                                  offline_log_dirs=self._offline_log_dirs or None,
                                  unclean_shutdown=info.unclean_shutdown, metrics_port=info.metrics_port,
                                  metrics_host=info.metrics_host, unclean_shutdown_epoch=self._unclean_epoch)
        while True:
            try:
                await self.client.create(path, data, ephemeral=True)
            except NodeExistsError:
                try:
                    existing, stat = await self.client.get(path)
                except NoNodeError:
                    # the holder's session (a crashed predecessor's) expired in between: create again
                    continue
                if stat.ephemeralOwner != self.client.session_id:
                    raise BrokerIdInUseError(
                        f"broker.id {info.broker_id} is registered by another live broker"
                        f" (ZooKeeper session {stat.ephemeralOwner:#x}, {_describe_registration(existing)})"
                        f" at {path}", stat.ephemeralOwner)
                await self.client.set(path, data)
            _, stat = await self.client.get(path)
            if info.unclean_shutdown and self._unclean_epoch is None:
                self._unclean_epoch = stat.czxid
            return stat

    def deregister_broker(self, broker_id: int) -> Deferred:
        """Delete C{/brokers/ids/<broker_id>} (controlled shutdown) and stop re-registering."""
        if self._registration is not None and self._registration.broker_id == broker_id:
            self._registration = None

        async def go() -> None:
            try:
                await self.client.delete(f"{BROKER_IDS_PATH}/{broker_id}")
            except NoNodeError:
                pass

        return _deferred(go())

    # -- failed log dirs (KIP-112) ------------------------------------------------

    def set_offline_log_dirs(self, broker_id: int, offline: dict[str, list[tuple[str, int]]]) -> Deferred:
        """
        Record this broker's offline log dirs and the partitions whose replicas
        were there in its registration (L{kafkatw.zookeeper.zk_data.encode_broker}'s
        C{offline_log_dirs}): rewritten now when it is registered, and kept
        in it when it registers again in a new session.  A restarted broker
        registers without them.

        @return: a Deferred firing once written.
        """
        self._offline_log_dirs = {d: sorted(partitions) for d, partitions in offline.items()}
        registration = self._registration
        if registration is None or registration.broker_id != broker_id:
            return _deferred(_none())
        return _deferred(self._register(registration))

    def get_broker_registration(self, broker_id: int) -> Deferred:
        """
        What the controller reads of a broker's registration besides its
        endpoints.

        @return: a Deferred firing with a L{BrokerRegistration}, or C{None}
            when the broker is not registered.
        """

        async def go() -> BrokerRegistration | None:
            try:
                data, stat = await self.client.get(f"{BROKER_IDS_PATH}/{broker_id}")
            except NoNodeError:
                return None
            body = json.loads(data)
            return BrokerRegistration(stat.czxid, decode_offline_replicas(data),
                                      bool(body.get("unclean_shutdown", False)),
                                      int(body.get("unclean_shutdown_epoch", -1)))

        return _deferred(go())

    def propagate_log_dir_event(self, broker_id: int) -> Deferred:
        """
        Tell the controller that a log dir of C{broker_id} failed (Kafka's
        C{KafkaZkClient.propagateLogDirEvent}): a persistent sequential
        C{/log_dir_event_notification/log_dir_event_<n>} holding
        C{{"version":1,"broker":<id>,"event":1}}.

        @return: a Deferred firing with the path created.
        """
        body = encode_log_dir_event(broker_id)
        return self.client.create(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{LOG_DIR_EVENT_PREFIX}", body,
                                  sequence=True, makepath=True)

    def watch_log_dir_events(self, callback: Callable[[list[str]], object]) -> Deferred:
        """
        Call C{callback(children)} with the notifications under
        C{/log_dir_event_notification} now and whenever one is added.

        @return: a Deferred firing with the L{Watch}.
        """
        async def go() -> Any:
            await self.client.ensure_path(LOG_DIR_EVENT_NOTIFICATION_PATH)
            return await self.client.watch_children(LOG_DIR_EVENT_NOTIFICATION_PATH, callback)

        return _deferred(go())

    def take_log_dir_event(self, child: str) -> Deferred:
        """
        Read and delete one log dir event notification.

        @return: a Deferred firing with the broker id it names, or C{None}
            when it is gone already or is not a failure event of Kafka's format.
        """

        async def go() -> int | None:
            path = f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}"
            try:
                data, _ = await self.client.get(path)
            except NoNodeError:
                return None
            try:
                await self.client.delete(path)
            except NoNodeError:
                pass
            try:
                body = json.loads(data)
                broker = int(body["broker"])
            except (ValueError, KeyError, TypeError):
                _log.warn("ignored the log dir event {path}: {data!r}", path=path, data=data)
                return None
            return broker if body.get("event", LOG_DIR_FAILURE_EVENT) == LOG_DIR_FAILURE_EVENT else None

        return _deferred(go())

    def list_brokers(self, detailed: bool = False) -> Deferred:
        """
        @return: a Deferred firing with C{{broker_id: (host, port, rack)}}
            (with C{detailed}, broker id -> L{BrokerInfo}).
        """
        return _deferred(self._list_brokers(None, detailed))

    async def _list_brokers(self, ids: list[str] | None = None, detailed: bool = False) -> dict[int, Any]:
        if ids is None:
            try:
                ids = await self.client.get_children(BROKER_IDS_PATH)
            except NoNodeError:
                return {}
        brokers: dict[int, Any] = {}
        for name in ids:
            try:
                data, _ = await self.client.get(f"{BROKER_IDS_PATH}/{name}")
            except NoNodeError:
                continue  # went away meanwhile
            info = decode_broker(int(name), data)
            brokers[info.broker_id] = info if detailed else (info.host, info.port, info.rack)
        return dict(sorted(brokers.items()))

    def watch_brokers(self, callback: Callable[[dict[int, Any]], object], detailed: bool = False) -> Deferred:
        """
        Call C{callback(brokers)} (as L{list_brokers}; with C{detailed}, broker
        id -> L{BrokerInfo}) now and whenever a broker registers or goes away.
        @return: a Deferred firing with the L{Watch}.
        """
        return self.client.watch_children(
            BROKER_IDS_PATH, self._chain(lambda ids: self._list_brokers(ids, detailed), callback))

    def _chain(self, fetch: Callable[[Any], Coroutine[Any, Any, Any]], callback: Callable[[Any], object],
               newest_only: bool = False) -> Callable[[Any], None]:
        """
        Run C{fetch(value)} per notification, delivering results in order.
        A fetch that finds ZooKeeper unavailable (the connection dropped, or
        the session is being closed at shutdown) is no failure: it runs again
        for the same notification once the session is connected again, so
        that the change is not lost.

        With C{newest_only} (for a C{fetch} that reads the whole state again
        each time), a notification that comes while the fetch of an earlier
        one waits for its turn takes its place: one fetch, of the newest
        value, instead of one per notification (a ZooKeeper watch, which
        fires once for the changes until it is set again, coalesces so too).
        """
        tail: list[Deferred] = [Deferred.fromCoroutine(_none())]
        #: with newest_only: the value of the fetch queued and not started yet, if any
        queued: list[Any] = []

        def again_when_connected(value: Any) -> None:
            def again(_: None) -> None:
                if not queued:  # else a fetch of a newer value is queued
                    on_change(value)

            connected_again(self.client).addCallback(again)

        def failed(f: Any, value: Any) -> None:
            if f.check(ZooKeeperUnavailableError):
                _log.info("ZooKeeper unavailable while reading after a watch ({error}); read again once connected",
                          error=f.getErrorMessage())
                again_when_connected(value)
                return
            _log.failure("registry watch callback failed", f)

        def on_change(value: Any) -> None:
            if newest_only:
                if queued:
                    queued[0] = value
                    return
                queued.append(value)

            def run(_: Any) -> Deferred:
                fetched = queued.pop() if newest_only else value
                d = _deferred(fetch(fetched))
                d.addCallback(callback)
                d.addErrback(failed, fetched)
                return d

            tail[0] = tail[0].addCallback(run)

        return on_change

    # -- topics ---------------------------------------------------------------

    def update_topic_assignment(self, name: str, change: Callable[[TopicAssignment], TopicAssignment | None],
                                controller_epoch_zk_version: int | None = None) -> Deferred:
        """
        Rewrite C{/brokers/topics/<name>}: read it, apply C{change} (new
        partitions for CreatePartitions, a reassignment's replicas with its
        adding/removing replicas, KIP-455), and write the result conditionally
        on the version read; a concurrent change makes it read and apply again.

        @param change: C{change(current) -> new assignment}, or C{None} to write nothing.
        @param controller_epoch_zk_version: when given, the write is fenced by
            C{/controller_epoch} as the controller's partition-state writes are.
        @return: a Deferred firing with the assignment written (or C{None}).
        @raise UnknownTopicOrPartitionError: the topic does not exist.
        @raise ControllerMovedError: another controller was elected (fenced writes only).
        """

        async def go() -> TopicAssignment | None:
            path = f"{TOPICS_PATH}/{name}"
            while True:
                current = await self.get_topic(name)
                new = change(current)
                if new is None:
                    return None
                data = encode_topic(new.topic_id, new.partitions, new.adding_replicas, new.removing_replicas)
                try:
                    if controller_epoch_zk_version is not None:
                        await self.client.fenced_set(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version, path, data,
                                                     version=current.zk_version)
                    else:
                        await self.client.set(path, data, version=current.zk_version)
                    return new
                except (NoNodeError, BadVersionError) as e:
                    if controller_epoch_zk_version is not None and (
                            moved := _controller_moved(e, controller_epoch_zk_version)) is not None:
                        raise moved from None
                    if isinstance(e, NoNodeError):
                        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
                    continue  # changed since read: apply the change to the new assignment

        return _deferred(go())

    def create_topic(
        self,
        name: str,
        assignment: dict[int, list[int]],
        config: dict[str, str] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> Deferred:
        """
        Create a topic as Kafka's C{AdminZkClient.createTopicWithAssignment}
        does: C{/config/topics/<name>} first, then C{/brokers/topics/<name>}.

        @return: a Deferred firing with the L{TopicAssignment}.
        @raise TopicAlreadyExistsError: the topic exists.
        """
        if not assignment:
            return _deferred(_raise(InvalidPartitionsError(f"topic {name!r}: no partitions")))
        return _deferred(self._create_topic(name, assignment, config or {}, topic_id or uuid.uuid4()))

    async def _create_topic(
        self, name: str, assignment: dict[int, list[int]], config: dict[str, str], topic_id: uuid.UUID
    ) -> TopicAssignment:
        topic_path = f"{TOPICS_PATH}/{name}"
        if await self.client.exists(topic_path) is not None:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        config_data = encode_config(config)
        config_path = f"{CONFIG_TOPICS_PATH}/{name}"
        try:
            await self.client.create(config_path, config_data, makepath=True)
        except NodeExistsError:
            await self.client.set(config_path, config_data)  # left over from a deleted topic
        await self.client.ensure_path(TOPICS_PATH)
        try:
            await self.client.create(topic_path, encode_topic(topic_id, assignment))
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        return TopicAssignment(name, topic_id, {p: list(r) for p, r in sorted(assignment.items())})

    def get_topic(self, name: str) -> Deferred:
        """@return: a Deferred firing with the L{TopicAssignment}; L{UnknownTopicOrPartitionError}."""

        async def go() -> TopicAssignment:
            try:
                data, stat = await self.client.get(f"{TOPICS_PATH}/{name}")
            except NoNodeError:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            return replace(decode_topic(name, data), zk_version=stat.version)

        return _deferred(go())

    def list_topics(self) -> Deferred:
        """@return: a Deferred firing with the sorted topic names."""

        async def go() -> list[str]:
            try:
                return sorted(await self.client.get_children(TOPICS_PATH))
            except NoNodeError:
                return []

        return _deferred(go())

    def watch_topics(self, callback: Callable[[list[str]], object]) -> Deferred:
        """Call C{callback(sorted topic names)} now and on every topic creation/deletion."""
        return self.client.watch_children(TOPICS_PATH, lambda names: callback(sorted(names)))

    def watch_topic(self, name: str, callback: Callable[[TopicAssignment | None], object]) -> Deferred:
        """Call C{callback(TopicAssignment | None)} now and whenever the topic's assignment changes."""
        return self.client.watch_data(
            f"{TOPICS_PATH}/{name}", lambda data: callback(None if data is None else decode_topic(name, data))
        )

    # -- dynamic broker configs -------------------------------------------------

    def get_broker_config(self, entity: str) -> Deferred:
        """
        A broker's dynamic config overrides, C{/config/brokers/<entity>}
        (entity: a broker id, or L{DEFAULT_BROKER_ENTITY} for the cluster
        default), as Kafka's ZooKeeper mode keeps them.

        @return: a Deferred firing with C{{key: value}} ({} when none).
        """
        return _deferred(self._get_config(f"{CONFIG_BROKERS_PATH}/{entity}"))

    def set_broker_config(self, entity: str, config: dict[str, str]) -> Deferred:
        """Replace C{/config/brokers/<entity>} (Kafka's v1 JSON) and notify every broker (L{change_entity_config})."""
        return self.change_entity_config("brokers", entity, config)

    # -- config change notifications ----------------------------------------------

    def get_entity_config(self, entity_type: str, name: str) -> Deferred:
        """
        The config of C{/config/<entity_type>/<name>} (C{topics}, C{brokers},
        C{users}, C{clients}; a nested entity as C{users/<u>/clients/<c>}).

        @return: a Deferred firing with C{{key: value}} ({} when none).
        """
        return _deferred(self._get_config(f"/config/{entity_type}/{name}"))

    def change_entity_config(self, entity_type: str, name: str, config: dict[str, str]) -> Deferred:
        """
        Replace C{/config/<entity_type>/<name>} and create the sequential
        notification C{/config/changes/config_change_NNNNNNNNNN} holding
        C{{"version":2,"entity_path":"<entity_type>/<name>"}}, as Kafka's
        C{AdminZkClient.changeEntityConfig} does; every broker's
        L{kafkatw.zookeeper.config_changes.ConfigChangeListener} then re-reads
        the entity.  Entity names are used as given (Kafka sanitizes user and
        client names with C{Sanitizer.sanitize} before calling it).
        """

        async def go() -> None:
            await self._set_config(f"/config/{entity_type}/{name}", config)
            await self.notify_config_change(f"{entity_type}/{name}")

        return _deferred(go())

    async def _get_config(self, path: str) -> dict[str, str]:
        try:
            data, _ = await self.client.get(path)
        except NoNodeError:
            return {}
        return decode_config(data)

    async def _set_config(self, path: str, config: dict[str, str]) -> None:
        data = encode_config(config)
        try:
            await self.client.set(path, data)
        except NoNodeError:
            await self.client.create(path, data, makepath=True)

    def get_topic_config(self, name: str) -> Deferred:
        """@return: a Deferred firing with the overrides C{{key: value}} ({} when none)."""
        return _deferred(self._get_config(f"{CONFIG_TOPICS_PATH}/{name}"))

    def set_topic_config(self, name: str, config: dict[str, str]) -> Deferred:
        """
        Replace the topic's overrides (Kafka's C{/config/topics/<topic>} v1)
        and notify every broker (L{change_entity_config}).
        """
        return self.change_entity_config("topics", name, config)

    # -- users: SCRAM credentials (KIP-554) ------------------------------------------

    def get_user_scram_credentials(self, user: str) -> Deferred:
        """
        The SCRAM credentials of C{user} in C{/config/users/<user>}: Kafka's
        v1 JSON, each mechanism's value the text of
        L{kafkatw.security.sasl.ScramCredential.to_kafka}::

            {"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=8192"}}

        @return: a Deferred firing with C{{mechanism: ScramCredential}} ({} when none;
            an unparseable entry is left out with a log line).
        """
        async def go() -> dict[str, Any]:
            config = await self._get_config(f"{CONFIG_USERS_PATH}/{user_entity_name(user)}")
            return _scram_credentials(user, config)

        return _deferred(go())

    def list_scram_users(self) -> Deferred:
        """@return: a Deferred firing with C{{user: {mechanism: ScramCredential}}} of every user having one."""
        async def go() -> dict[str, dict[str, Any]]:
            try:
                names = await self.client.get_children(CONFIG_USERS_PATH)
            except NoNodeError:
                return {}
            result = {}
            for name in names:
                user = unquote(name)
                credentials = _scram_credentials(user, await self._get_config(f"{CONFIG_USERS_PATH}/{name}"))
                if credentials:
                    result[user] = credentials
            return result

        return _deferred(go())

    def alter_user_scram_credentials(self, user: str, upsertions: dict[str, Any], deletions: list[str]) -> Deferred:
        """
        Set (C{upsertions}: mechanism -> L{kafkatw.security.sasl.ScramCredential})
        and delete (C{deletions}: mechanisms) credentials of C{user}, keeping the
        znode's other keys, then write the change notification
        (L{notify_config_change}) as Kafka's C{AdminZkClient} does.  The
        znode's write is conditional on the version read (retried on a race).

        @return: a Deferred firing with C{None}.
        """
        return self.alter_entity_config(
            f"users/{user_entity_name(user)}",
            {mechanism: credential.to_kafka() for mechanism, credential in upsertions.items()}, deletions)

    # -- client quotas (KIP-55, KIP-546) -------------------------------------------

    def alter_entity_config(self, entity_path: str, upserts: dict[str, str], deletions: list[str]) -> Deferred:
        """
        Set C{upserts} and delete C{deletions} in the config of
        C{/config/<entity_path>} (C{users/alice}, C{users/alice/clients/c1},
        C{clients/<default>}), keeping its other keys (a user's SCRAM
        credentials), then write the change notification, as Kafka's
        C{AdminZkClient.changeConfigs} does for quotas.  The write is
        conditional on the version read (retried on a race).

        @return: a Deferred firing with C{None}.
        """
        path = f"/config/{entity_path}"

        async def go() -> None:
            while True:
                try:
                    data, stat = await self.client.get(path)
                    version = stat.version
                except NoNodeError:
                    data, version = None, None
                config = decode_config(data)
                for key in deletions:
                    config.pop(key, None)
                config.update(upserts)
                encoded = encode_config(config)
                try:
                    if version is None:
                        await self.client.create(path, encoded, makepath=True)
                    else:
                        await self.client.set(path, encoded, version=version)
                    break
                except (NodeExistsError, BadVersionError):
                    continue
            await self.notify_config_change(entity_path)

        return _deferred(go())

    def list_quota_entity_configs(self) -> Deferred:
        """
        The configs of every user, user-and-client and client entity (Kafka's
        ZooKeeper layout, names as stored: sanitized, or C{<default>}).

        @return: a Deferred firing with C{[(entity_type, name, config)]}, a
            nested entity as C{("users", "alice/clients/c1", config)}.
        """
        async def children(path: str) -> list[str]:
            try:
                return sorted(await self.client.get_children(path))
            except NoNodeError:
                return []

        async def go() -> list[tuple[str, str, dict[str, str]]]:
            found = []
            for user in await children(CONFIG_USERS_PATH):
                found.append(("users", user, await self._get_config(f"{CONFIG_USERS_PATH}/{user}")))
                for client in await children(f"{CONFIG_USERS_PATH}/{user}/clients"):
                    name = f"{user}/clients/{client}"
                    found.append(("users", name, await self._get_config(f"{CONFIG_USERS_PATH}/{name}")))
            for client in await children("/config/clients"):
                found.append(("clients", client, await self._get_config(f"/config/clients/{client}")))
            return found

        return _deferred(go())

    def notify_config_change(self, entity_path: str) -> Deferred:
        """
        Write Kafka's config change notification,
        C{/config/changes/config_change_<10-digit sequence>} holding
        C{{"version":2,"entity_path":"users/alice"}}.
        """
        return self.client.create(f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}",
                                  encode_config_change(entity_path), sequence=True, makepath=True)

    def delete_topic(self, name: str) -> Deferred:
        """
        Delete C{/brokers/topics/<name>} (with its partition states) and
        C{/config/topics/<name>}.  Kafka instead marks
        C{/admin/delete_topics/<name>} for the controller; here watchers of the
        topic see it vanish and brokers delete their logs.

        @raise UnknownTopicOrPartitionError: no such topic.
        """

        async def go() -> None:
            path = f"{TOPICS_PATH}/{name}"
            if await self.client.exists(path) is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            await self.client.delete(path, recursive=True)
            await self.client.delete(f"{CONFIG_TOPICS_PATH}/{name}", recursive=True)

        return _deferred(go())

    # -- partition state ------------------------------------------------------

    def set_partition_state(
        self,
        topic: str,
        partition: int,
        leader: int,
        leader_epoch: int,
        isr: list[int],
        controller_epoch: int = 1,
        expected_version: int = -1,
        elr: list[int] | None = None,
        elr_isr_zxids: list[int] | None = None,
        leader_epoch_zxid: int = -1,
        isr_zxids: list[int] | None = None,
    ) -> Deferred:
        """
        Write the partition's state, unfenced (the first state of a new
        partition, a leader's ISR change); an unconditional write creates it
        when missing.  The controller's writes, fenced by
        C{/controller_epoch}, are L{set_partition_states}.

        @param expected_version: the znode version last read (L{PartitionState.zk_version});
            -1 writes unconditionally.
        @return: a Deferred firing with the new znode version.
        @raise BadVersionError: another writer changed the state since; or a
            conditional write found no state (deleted meanwhile).
        @param elr: the eligible leader replicas (L{PartitionState.elr}); none when not given.
        @param elr_isr_zxids: beside C{elr}, L{PartitionState.elr_isr_zxids} (-1 each when not given).
        @param leader_epoch_zxid: L{PartitionState.leader_epoch_zxid} (a leader's ISR change carries
            its epoch's start; -1: not known).
        @param isr_zxids: beside C{isr}, L{PartitionState.isr_zxids} (-1 each when not given).
        """

        async def go() -> int:
            path = partition_state_path(topic, partition)
            data = encode_partition_state(leader, leader_epoch, isr, controller_epoch, elr, elr_isr_zxids,
                                          leader_epoch_zxid, isr_zxids)
            try:
                return (await self.client.set(path, data, version=expected_version)).version
            except NoNodeError:
                # Only an unconditional write creates the state (AdminManager's, for a new partition); a
                # conditional write to a state deleted meanwhile (the topic is being deleted) must not
                # bring it back.
                if expected_version != -1:
                    raise BadVersionError(f"{path} does not exist (expected version {expected_version})")
                await self.client.create(path, data, makepath=True)
                return 0

        return _deferred(go())

    def set_partition_states(self, writes: list[PartitionStateWrite], controller_epoch: int,
                             controller_epoch_zk_version: int) -> Deferred:
        """
        The controller's write of one or several partitions' states, in one
        ZooKeeper multi: a check of C{/controller_epoch}'s version (the
        controller's fence: a deposed controller writes nothing), then one
        set per partition conditional on the zkVersion its write was decided
        from (Kafka's C{KafkaZkClient.updateLeaderAndIsr} sends the same
        checked writes, one request each).  All of them are written or none
        is; a batch costs one round trip and one ZooKeeper transaction.  The caller bounds the batch's size (ZooKeeper
        refuses a request above C{jute.maxbuffer}, 1 MB by default).

        @param controller_epoch: the epoch written into each state.
        @return: a Deferred firing with a L{WrittenState} (the new znode
            version and C{mzxid}) for each of C{writes}, in their order.
        @raise ControllerMovedError: another controller was elected.
        @raise BadVersionError: the state of C{writes[op_index]} changed or
            was deleted since it was read.  Nothing was written.
        """

        async def go() -> list[WrittenState]:
            if not writes:
                return []
            ops: list[Any] = [CheckOp(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)]
            ops.extend(SetOp(partition_state_path(w.topic, w.partition),
                             encode_partition_state(w.leader, w.leader_epoch, w.isr, controller_epoch, w.elr,
                                                    w.elr_isr_zxids, w.leader_epoch_zxid, w.isr_zxids),
                             w.expected_version)
                       for w in writes)
            try:
                stats = await self.client.multi(ops)
            except (BadVersionError, NoNodeError) as e:
                if e.op_index is None:
                    raise
                if (moved := _controller_moved(e, controller_epoch_zk_version)) is not None:
                    raise moved from None
                failed = writes[e.op_index - 1]
                what = "was deleted" if isinstance(e, NoNodeError) else "changed"
                error = BadVersionError(f"{partition_state_path(failed.topic, failed.partition)} {what} (expected "
                                        f"version {failed.expected_version})")
                error.op_index = e.op_index - 1
                raise error from None
            return [WrittenState(stat.version, stat.mzxid) for stat in stats[1:]]

        return _deferred(go())

    def get_partition_state(self, topic: str, partition: int) -> Deferred:
        """@return: a Deferred firing with a L{PartitionState}, or C{None} when none was written."""

        async def go() -> PartitionState | None:
            try:
                data, stat = await self.client.get(partition_state_path(topic, partition))
            except NoNodeError:
                return None
            return decode_partition_state(data, stat.version, stat.mzxid)

        return _deferred(go())

    def watch_partition_state(self, topic: str, partition: int,
                              callback: Callable[[PartitionState | None], object]) -> Deferred:
        """
        Call C{callback(PartitionState | None)} now and whenever the partition's
        state znode changes (C{None} while it does not exist).

        @return: a Deferred firing with the watch (C{.cancel()} stops it).
        """

        def changed(value: tuple[bytes | None, Any]) -> None:
            data, stat = value
            callback(None if not data else decode_partition_state(data, stat.version, stat.mzxid))

        return self.client.watch_data_with_stat(partition_state_path(topic, partition), changed)

    # -- producer ids -----------------------------------------------------------

    def allocate_producer_id_block(self, broker_id: int, block_size: int = 1000) -> Deferred:
        """
        Claim the next block of producer ids, as Kafka's
        C{ZkProducerIdManager}: read C{/latest_producer_id_block}, write the
        following block conditionally on the version read, retry on conflict.

        @return: a Deferred firing with C{(start, end)}, both inclusive.
        """

        async def go() -> tuple[int, int]:
            while True:
                try:
                    data, stat = await self.client.get(PRODUCER_ID_BLOCK_PATH)
                except NoNodeError:
                    data, stat = b"", None
                if data:
                    start = int(json.loads(data)["block_end"]) + 1
                else:
                    start = 0
                end = start + block_size - 1
                body = encode_producer_id_block(broker_id, start, end)
                try:
                    if stat is None:
                        await self.client.create(PRODUCER_ID_BLOCK_PATH, body)
                    else:
                        await self.client.set(PRODUCER_ID_BLOCK_PATH, body, version=stat.version)
                except (BadVersionError, NodeExistsError):
                    continue
                return start, end

        return _deferred(go())

    # -- controller -------------------------------------------------------------

    def elect_controller(self, broker_id: int) -> Deferred:
        """
        Try to become controller: create the ephemeral C{/controller}; on success
        increment C{/controller_epoch} (Kafka's
        C{KafkaController.elect}).

        A create whose answer the lost connection took (it may have been
        made) is tried again by the caller once connected: when this session
        holds C{/controller} for C{broker_id} from a create that did not get
        as far as the epoch, the epoch is incremented now -- the broker is the
        controller, and without it would never act as one.

        @return: a Deferred firing with C{True} when elected (also when this
            session already holds C{/controller} for C{broker_id}).
        @raise ZooKeeperUnavailableError: the connection was lost on the way.
        """

        async def go() -> bool:
            data = encode_controller(broker_id)
            try:
                await self.client.create(CONTROLLER_PATH, data, ephemeral=True)
            except NodeExistsError:
                try:
                    existing, stat = await self.client.get(CONTROLLER_PATH)
                except NoNodeError:
                    return await go()  # vanished meanwhile: try again
                if decode_controller(existing) != broker_id or stat.ephemeralOwner != self.client.session_id:
                    return False
                if stat.czxid == self._controller_czxid:
                    return True  # elected already
            else:
                stat = await self.client.exists(CONTROLLER_PATH)
                if stat is None:
                    return False  # the session ended since: its ephemeral znode went with it
            self.controller_epoch = await self._bump_controller_epoch()
            self._controller_czxid = stat.czxid
            return True

        return _deferred(go())

    async def _bump_controller_epoch(self) -> tuple[int, int]:
        """Increment C{/controller_epoch}; @return: C{(epoch, its znode version)}."""
        while True:
            try:
                data, stat = await self.client.get(CONTROLLER_EPOCH_PATH)
            except NoNodeError:
                try:
                    await self.client.create(CONTROLLER_EPOCH_PATH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = int(data.decode("ascii") or 0) + 1
            try:
                new = await self.client.set(CONTROLLER_EPOCH_PATH, str(epoch).encode("ascii"), version=stat.version)
                return epoch, new.version
            except BadVersionError:
                continue

    def get_controller_epoch(self) -> Deferred:
        """@return: a Deferred firing with the controller epoch (0 before any election)."""

        async def go() -> int:
            try:
                data, _ = await self.client.get(CONTROLLER_EPOCH_PATH)
            except NoNodeError:
                return 0
            return int(data.decode("ascii") or 0)

        return _deferred(go())

    def watch_controller(self, callback: Callable[[int | None], object]) -> Deferred:
        """Call C{callback(controller broker id | None)} now and on every change."""
        return self.client.watch_data(
            CONTROLLER_PATH, lambda data: callback(None if not data else decode_controller(data))
        )


    # -- consumer group offsets -----------------------------------------------------

    def set_committed_offset(self, group: str, topic: str, partition: int, committed: CommittedOffset) -> Deferred:
        """Write one committed offset (creating the znode and its parents when missing)."""

        async def go() -> None:
            path = consumer_offset_path(group, topic, partition)
            data = encode_committed_offset(committed)
            try:
                await self.client.set(path, data)
            except NoNodeError:
                try:
                    await self.client.create(path, data, makepath=True)
                except NodeExistsError:
                    await self.client.set(path, data)

        return _deferred(go())

    def get_committed_offsets(self, group: str, partitions: list[tuple[str, int]] | None = None) -> Deferred:
        """
        Read committed offsets of C{group}.

        @param partitions: C{(topic, partition)} pairs, or C{None} for every one.
        @return: a Deferred firing with C{{(topic, partition): CommittedOffset}};
            partitions without a commit are absent.
        @raise ZooKeeperError: (as failure) a read failed (the first one, of those made at once).
        """

        async def one(topic: str, partition: int) -> tuple[tuple[str, int], CommittedOffset | None]:
            try:
                data, _ = await self.client.get(consumer_offset_path(group, topic, partition))
            except NoNodeError:
                return (topic, partition), None
            return (topic, partition), decode_committed_offset(data)

        async def go() -> dict[tuple[str, int], CommittedOffset]:
            wanted = partitions
            if wanted is None:
                wanted = []
                base = f"{group_path(group)}/offsets"
                try:
                    topics = await self.client.get_children(base)
                except NoNodeError:
                    topics = []
                for topic in topics:
                    try:
                        children = await self.client.get_children(f"{base}/{topic}")
                    except NoNodeError:
                        continue
                    wanted.extend((topic, int(p)) for p in children if p.isdigit())
            results = await _gather([_deferred(one(t, p)) for t, p in wanted])
            return {tp: c for tp, c in results if c is not None}

        return _deferred(go())

    def list_consumer_groups(self) -> Deferred:
        """@return: a Deferred firing with the sorted ids of the groups under C{/consumers}."""

        async def go() -> list[str]:
            try:
                names = await self.client.get_children(CONSUMERS_PATH)
            except NoNodeError:
                return []
            return sorted(group_from_path_component(n) for n in names)

        return _deferred(go())

    def has_committed_offsets(self, group: str) -> Deferred:
        """@return: a Deferred firing with whether C{/consumers/<group>/offsets} has any topic."""

        async def go() -> bool:
            try:
                return bool(await self.client.get_children(f"{group_path(group)}/offsets"))
            except NoNodeError:
                return False

        return _deferred(go())

    def delete_committed_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None = None,
                                 fence_path: str | None = None, fence_version: int = -1) -> Deferred:
        """
        Delete committed offsets of C{group} (OffsetDelete: C{partitions};
        DeleteGroups: C{None}, every one), each ZooKeeper multi fenced as
        L{set_committed_offsets} is: with C{fence_path}, it also checks that
        C{fence_path} still has version C{fence_version}, so that a deposed
        coordinator deletes nothing.  Afterwards the topics' znodes left
        empty go, and for the whole group C{/consumers/<group>/offsets} and
        C{/consumers/<group>} when nothing else (a paper-style group's ids
        or owners) is under it.  A missing offset is no error.

        @return: a Deferred firing with C{None}.
        @raise FencedError: C{fence_path} is missing or at another version;
            nothing of that multi was deleted.
        """
        whole_group = partitions is None
        offsets_path = f"{group_path(group)}/offsets"

        async def listed() -> list[str]:
            if not whole_group:
                return [consumer_offset_path(group, topic, partition) for topic, partition in partitions]
            try:
                topics = await self.client.get_children(offsets_path)
            except NoNodeError:
                return []
            paths = []
            for topic in topics:
                try:
                    children = await self.client.get_children(f"{offsets_path}/{topic}")
                except NoNodeError:
                    continue
                paths += [f"{offsets_path}/{topic}/{child}" for child in children]
            return paths

        async def go() -> None:
            head = [CheckOp(fence_path, fence_version)] if fence_path is not None else []
            for _ in range(10):
                paths = await listed()
                stats = await _gather([self.client.exists(path) for path in paths])
                present = [path for path, stat in zip(paths, stats) if stat is not None]
                try:
                    for start in range(0, len(present), _DELETES_PER_MULTI):
                        ops = head + [DeleteOp(path) for path in present[start:start + _DELETES_PER_MULTI]]
                        await self.client.multi(ops)
                        self._offset_znodes.difference_update(present[start:start + _DELETES_PER_MULTI])
                    if head and not present:
                        await self.client.multi(head)
                except (NoNodeError, BadVersionError, NotEmptyError) as e:
                    if e.op_index is not None and e.op_index < len(head):
                        raise FencedError(f"{fence_path} is no longer at version {fence_version}: {e}") from None
                    if e.op_index is None:
                        raise
                    continue  # deleted (or a child created) meanwhile: look again
                break
            else:
                raise ZooKeeperError(f"the committed offsets of group {group} keep changing")
            parents = sorted({path.rsplit("/", 1)[0] for path in present}) + (
                [offsets_path, group_path(group)] if whole_group else [])
            for parent in parents:
                try:
                    await self.client.delete(parent)
                except (NoNodeError, NotEmptyError):
                    pass

        return _deferred(go())

    def set_committed_offsets(self, offsets: dict[tuple[str, str, int], CommittedOffset],
                              fence_path: str | None = None, fence_version: int = -1) -> Deferred:
        """
        Write committed offsets in one ZooKeeper multi (several when they
        exceed L{MULTI_MAX_BYTES}), each fenced: with C{fence_path}, the multi
        also checks that C{fence_path} still has version C{fence_version}, so
        that nothing is written once the writer is deposed.  Missing znodes
        (and their parents) are created; the offsets known to exist are set
        without reading them first, so a batch costs one round trip.

        @param offsets: C{(group, topic, partition)} -> L{CommittedOffset}.
        @return: a Deferred firing with C{None} once every offset is written.
        @raise FencedError: C{fence_path} is missing or at another version;
            nothing of that multi was written.
        """

        async def go() -> None:
            chunk: list[tuple[str, bytes]] = []
            size = 0
            for (group, topic, partition), committed in offsets.items():
                path = consumer_offset_path(group, topic, partition)
                data = encode_committed_offset(committed)
                if chunk and size + len(path) + len(data) > MULTI_MAX_BYTES:
                    await self._write_offsets(chunk, fence_path, fence_version)
                    chunk, size = [], 0
                chunk.append((path, data))
                size += len(path) + len(data)
            await self._write_offsets(chunk, fence_path, fence_version)

        return _deferred(go())

    async def _write_offsets(self, chunk: list[tuple[str, bytes]], fence_path: str | None,
                             fence_version: int) -> None:
        known = self._offset_znodes
        head = [CheckOp(fence_path, fence_version)] if fence_path is not None else []
        if not head and not chunk:
            return
        for _ in range(10):
            unknown = [path for path, _ in chunk if path not in known]
            if unknown:
                stats = await _gather([self.client.exists(path) for path in unknown])
                missing = {path for path, stat in zip(unknown, stats) if stat is None}
                for parent in sorted({path.rsplit("/", 1)[0] for path in missing}):
                    await self.client.ensure_path(parent)
                known.update(path for path in unknown if path not in missing)
            else:
                missing = set()
            ops = head + [CreateOp(path, data) if path in missing else SetOp(path, data) for path, data in chunk]
            try:
                await self.client.multi(ops)
            except (NoNodeError, NodeExistsError, BadVersionError) as e:
                index = e.op_index
                if index is None:
                    raise
                if index < len(head):
                    raise FencedError(f"{fence_path} is no longer at version {fence_version}: {e}") from None
                # an offset znode created or deleted meanwhile (DeleteGroups, a paper-style consumer): look again
                known.difference_update(path for path, _ in chunk)
                continue
            known.update(path for path, _ in chunk)
            if len(known) > 100_000:
                known.clear()  # only a cache of what exists
            return
        raise ZooKeeperError(f"the offset znodes of {chunk[0][0]} and others keep changing")

    def check_version(self, path: str, version: int) -> Deferred:
        """
        One multi with only a check: fires once ZooKeeper has confirmed that
        C{path} has version C{version} (a fence check ordered with every write).

        @raise FencedError: it does not (or C{path} is missing).
        """

        async def go() -> None:
            try:
                await self.client.multi([CheckOp(path, version)])
            except (NoNodeError, BadVersionError) as e:
                raise FencedError(f"{path} is no longer at version {version}: {e}") from None

        return _deferred(go())

    # -- group coordinator elections ------------------------------------------------

    def ensure_group_coordinator_paths(self) -> Deferred:
        """Create C{/group_coordinator/{candidates,holders,epochs}} when missing."""

        async def go() -> None:
            for path in (GROUP_COORDINATOR_CANDIDATES_PATH, GROUP_COORDINATOR_HOLDERS_PATH,
                         GROUP_COORDINATOR_EPOCHS_PATH):
                await self.client.ensure_path(path)

        return _deferred(go())

    def add_group_coordinator_candidate(self, broker_id: int) -> Deferred:
        """
        Create the ephemeral C{/group_coordinator/candidates/<broker_id>}.

        @return: a Deferred firing with C{True} when this session holds it,
            C{False} when another session does (a previous process of the
            broker whose session has not ended yet).
        """

        async def go() -> bool:
            path = f"{GROUP_COORDINATOR_CANDIDATES_PATH}/{broker_id}"
            try:
                await self.client.create(path, b"", ephemeral=True, makepath=True)
                return True
            except NodeExistsError:
                try:
                    _, stat = await self.client.get(path)
                except NoNodeError:
                    return False
                return stat.ephemeralOwner == self.client.session_id

        return _deferred(go())

    def remove_group_coordinator_candidate(self, broker_id: int) -> Deferred:
        """Delete C{/group_coordinator/candidates/<broker_id>} (a missing one is no error)."""

        async def go() -> None:
            try:
                await self.client.delete(f"{GROUP_COORDINATOR_CANDIDATES_PATH}/{broker_id}")
            except NoNodeError:
                pass

        return _deferred(go())

    def watch_group_coordinator_candidates(self, callback: Callable[[frozenset[int]], object]) -> Deferred:
        """Call C{callback(broker ids)} now and whenever a candidate comes or goes."""
        return self.client.watch_children(
            GROUP_COORDINATOR_CANDIDATES_PATH,
            lambda names: callback(frozenset(int(n) for n in names if n.isdigit())))

    def watch_group_coordinators(self, callback: Callable[[dict[int, GroupCoordinatorHolder]], object]) -> Deferred:
        """
        Call C{callback({partition: GroupCoordinatorHolder})} now and whenever
        a holder comes or goes; every holder is read again each time (a holder
        replaced between two notifications is seen), once for the
        notifications that come while an earlier read runs.
        """

        async def fetch(names: list[str]) -> dict[int, GroupCoordinatorHolder]:
            holders: dict[int, GroupCoordinatorHolder] = {}
            for name in names:
                if not name.isdigit():
                    continue
                try:
                    data, stat = await self.client.get(group_coordinator_holder_path(int(name)))
                except NoNodeError:
                    continue  # went away meanwhile
                body = json.loads(data)
                holders[int(name)] = GroupCoordinatorHolder(int(body["brokerid"]), int(body["coordinator_epoch"]),
                                                            stat.ephemeralOwner)
            return holders

        return self.client.watch_children(GROUP_COORDINATOR_HOLDERS_PATH,
                                          self._chain(fetch, callback, newest_only=True))

    def claim_group_coordinator(self, partition: int, broker_id: int) -> Deferred:
        """
        Become the coordinator of the groups of C{__consumer_offsets-<partition>}:
        one multi that creates the ephemeral holder znode and bumps the epoch
        znode's version, which is the new coordinator epoch (every later
        write of the holder checks it).  The claim fails while another
        session holds the partition; it ends with this session (or
        L{release_group_coordinator}).

        @return: a Deferred firing with the new coordinator epoch.
        @raise NodeExistsError: the partition has a holder.
        @raise BadVersionError: another broker claimed it meanwhile.
        """

        async def go() -> int:
            epoch_path = group_coordinator_epoch_path(partition)
            try:
                _, stat = await self.client.get(epoch_path)
            except NoNodeError:
                try:
                    await self.client.create(epoch_path, b"0", makepath=True)
                except NodeExistsError:
                    pass
                _, stat = await self.client.get(epoch_path)
            epoch = stat.version + 1
            holder = encode_group_coordinator_holder(broker_id, epoch)
            try:
                await self.client.multi([
                    CreateOp(group_coordinator_holder_path(partition), holder, ephemeral=True),
                    SetOp(epoch_path, str(epoch).encode("ascii"), stat.version),
                ])
            except (NodeExistsError, BadVersionError) as e:
                raise type(e)(f"group coordinator partition {partition}: {e}") from None
            return epoch

        return _deferred(go())

    def release_group_coordinator(self, partition: int, coordinator_epoch: int) -> Deferred:
        """
        Give up C{partition} (controlled shutdown, or handing it to the
        preferred broker): delete the holder znode, only while the epoch is
        still C{coordinator_epoch}.

        @return: a Deferred firing with C{True} when released, C{False} when
            it was no longer held at that epoch.
        """

        async def go() -> bool:
            try:
                await self.client.multi([CheckOp(group_coordinator_epoch_path(partition), coordinator_epoch),
                                         DeleteOp(group_coordinator_holder_path(partition))])
                return True
            except (NoNodeError, BadVersionError):
                return False

        return _deferred(go())


def _scram_credentials(user: str, config: dict[str, str]) -> dict[str, Any]:
    result = {}
    for mechanism in SCRAM_MECHANISMS:
        if mechanism in config:
            try:
                result[mechanism] = ScramCredential.from_kafka(config[mechanism])
            except ValueError as e:
                _log.warn("ignoring the {mechanism} credential of user {user}: {error}", mechanism=mechanism,
                          user=user, error=e)
    return result


async def _none() -> None:
    return None


async def _gather(deferreds: list[Deferred]) -> list:
    from twisted.internet.defer import gatherResults

    try:
        return await gatherResults(deferreds, consumeErrors=True)
    except Exception as e:  # FirstError: raise what failed
        from twisted.internet.defer import FirstError

        if isinstance(e, FirstError):
            raise e.subFailure.value from None
        raise


async def _raise(exc: BaseException) -> Any:
    raise exc
