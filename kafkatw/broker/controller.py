"""
The controller: one broker elects partition leaders, as Kafka's ZooKeeper-mode C{KafkaController}.

Every broker runs a L{KafkaController}; the one whose session holds the
ephemeral C{/controller} is I{active}.  Becoming active increments
C{/controller_epoch}; every partition-state write of the controller is one
ZooKeeper multi that checks C{/controller_epoch}'s version and the state
znode's zkVersion (L{kafkatw.zookeeper.registry.Registry.set_partition_state}),
so a deposed controller cannot write, and a write based on a stale state fails
and is retried on a fresh read.

Brokers learn of what the controller wrote through their watches on the state
znodes of the topics they know (one read per broker per change: ZooKeeper load
proportional to changes, not to partitions × brokers).

The controller reacts to:

  - activation: every partition without a live leader is elected one;
  - a change of the live brokers (C{/brokers/ids}): partitions led by a broker
    that went away are elected a new leader from the live ISR, in assignment
    order (Kafka's C{offlinePartitionLeaderElection}); with
    C{unclean.leader.election.enable} (broker or topic config) and no live ISR
    member, a live out-of-sync replica is elected and the possible loss is
    logged; otherwise the partition stays offline.  Dead followers are removed
    from the ISR at once, so acks=all writes need not wait
    C{replica.lag.time.max.ms} for them;
  - a controlled shutdown (C{/admin/controlled_shutdown/<id>}, written by a
    broker on SIGTERM): its leaderships move to other ISR members and it leaves
    every ISR (Kafka's C{controlledShutdownPartitionLeaderElection}).

Each election bumps the leader epoch.  The partition and replica state machines
are the tables L{PARTITION_STATES} and L{REPLICA_STATES} (each state with its
valid previous states, as Kafka's C{PartitionStateMachine} and
C{ReplicaStateMachine}).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from twisted.internet import defer
from twisted.logger import Logger

from ..zookeeper.bridge import BadVersionError, ZooKeeperError

__all__ = ["KafkaController", "PARTITION_STATES", "REPLICA_STATES", "StateMachine", "IllegalStateChange",
           "offline_partition_leader", "controlled_shutdown_leader"]

_log = Logger()

# state -> the states it may be entered from (Kafka's PartitionState.validPreviousStates)
PARTITION_STATES: dict[str, frozenset[str]] = {
    "NonExistentPartition": frozenset({"OfflinePartition"}),
    "NewPartition": frozenset({"NonExistentPartition"}),
    "OnlinePartition": frozenset({"NewPartition", "OnlinePartition", "OfflinePartition"}),
    "OfflinePartition": frozenset({"NewPartition", "OnlinePartition", "OfflinePartition"}),
}

# Kafka's ReplicaState.validPreviousStates
REPLICA_STATES: dict[str, frozenset[str]] = {
    "NonExistentReplica": frozenset({"ReplicaDeletionSuccessful"}),
    "NewReplica": frozenset({"NonExistentReplica"}),
    "OnlineReplica": frozenset({"NewReplica", "OnlineReplica", "OfflineReplica", "ReplicaDeletionIneligible"}),
    "OfflineReplica": frozenset({"NewReplica", "OnlineReplica", "OfflineReplica", "ReplicaDeletionIneligible"}),
    "ReplicaDeletionStarted": frozenset({"OfflineReplica"}),
    "ReplicaDeletionSuccessful": frozenset({"ReplicaDeletionStarted"}),
    "ReplicaDeletionIneligible": frozenset({"OfflineReplica", "ReplicaDeletionStarted"}),
}

CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"


class IllegalStateChange(Exception):
    """A transition the state table does not allow."""


class StateMachine:
    """
    Current states of some keys, changed only along a table's transitions.

    @param table: state -> valid previous states.
    @param initial: the state of a key never seen.
    """

    def __init__(self, table: dict[str, frozenset[str]], initial: str) -> None:
        self.table = table
        self.initial = initial
        self.states: dict[Any, str] = {}

    def state(self, key: Any) -> str:
        return self.states.get(key, self.initial)

    def move(self, key: Any, target: str) -> None:
        """@raise IllegalStateChange: C{target} may not follow the current state."""
        current = self.state(key)
        if current not in self.table[target]:
            raise IllegalStateChange(f"{key}: {current} -> {target}")
        self.states[key] = target

    def forget(self, key: Any) -> None:
        self.states.pop(key, None)


def offline_partition_leader(assignment: list[int], isr: list[int], live: Iterable[int],
                             unclean: bool) -> tuple[int, bool]:
    """
    Kafka's C{offlinePartitionLeaderElection}: the first assigned replica that
    is alive and in the ISR; failing that, with C{unclean}, the first live one.

    @return: C{(leader, was_unclean)}; leader -1 when none can be elected.
    """
    live = set(live)
    for replica in assignment:
        if replica in live and replica in isr:
            return replica, False
    if unclean:
        for replica in assignment:
            if replica in live:
                return replica, True
    return -1, False


def controlled_shutdown_leader(assignment: list[int], isr: list[int], live: Iterable[int],
                               shutting_down: set[int]) -> int:
    """Kafka's C{controlledShutdownPartitionLeaderElection}: a live ISR member not shutting down, or -1."""
    live = set(live)
    for replica in assignment:
        if replica in live and replica in isr and replica not in shutting_down:
            return replica
    return -1


class KafkaController:
    """
    This broker's controller; active while it holds C{/controller}.

    @param registry: a L{kafkatw.zookeeper.registry.Registry}.
    @param metadata: the broker's L{kafkatw.broker.metadata_cache.MetadataCache}
        (assignments and partition states, kept current by the broker's watches).
    @param topic_config: C{topic_config(topic) -> dict} of effective topic configs.
    """

    def __init__(self, broker_id: int, config: Any, registry: Any, metadata: Any,
                 topic_config: Callable[[str], dict]) -> None:
        self.broker_id = broker_id
        self.config = config
        self.registry = registry
        self.metadata = metadata
        self.topic_config = topic_config
        self.active = False
        self.epoch = 0
        self._epoch_zk_version = -1
        self._lock = defer.DeferredLock()
        self.live: set[int] = set()
        self.shutting_down: set[int] = set()
        self.partition_states = StateMachine(PARTITION_STATES, "NonExistentPartition")
        self.replica_states = StateMachine(REPLICA_STATES, "NonExistentReplica")
        self._shutdown_watch: Any = None
        #: Kafka's controller metrics.
        self.elections = 0
        self.unclean_elections = 0

    # --- election of the controller ---------------------------------------------------

    async def elect(self) -> bool:
        """Try to become the controller; on success, act on the cluster as it is."""
        if self.active:
            return True
        if not await self.registry.elect_controller(self.broker_id):
            return False
        self.epoch, self._epoch_zk_version = self.registry.controller_epoch
        self.active = True
        _log.info("broker {id} is the controller (epoch {epoch})", id=self.broker_id, epoch=self.epoch)
        try:
            self._shutdown_watch = await self.registry.client.watch_children(
                CONTROLLED_SHUTDOWN_PATH, self._shutdowns_changed)
        except ZooKeeperError as e:
            _log.warn("cannot watch {path}: {error}", path=CONTROLLED_SHUTDOWN_PATH, error=e)
        await self.run(self._on_activation)
        return True

    def resign(self) -> None:
        if self.active:
            _log.info("broker {id} is no longer the controller", id=self.broker_id)
        self.active = False
        if self._shutdown_watch is not None:
            self._shutdown_watch.cancel()
            self._shutdown_watch = None

    def controller_changed(self, controller_id: int | None) -> None:
        """The C{/controller} watch: resign when another broker holds it."""
        if controller_id != self.broker_id:
            self.resign()

    # --- events ---------------------------------------------------------------------

    def run(self, event: Callable[[], Any]) -> defer.Deferred:
        """Run one controller event at a time (Kafka's controller event queue)."""

        async def go() -> None:
            if not self.active:
                return
            try:
                await event()
            except BadVersionError as e:
                if "/controller_epoch" in str(e):
                    _log.warn("another controller was elected: {error}", error=e)
                    self.resign()
                else:
                    raise

        d = self._lock.run(lambda: defer.Deferred.fromCoroutine(go()))
        d.addErrback(lambda f: _log.failure("controller event failed", f))
        return d

    def brokers_changed(self, live: Iterable[int]) -> defer.Deferred:
        """The C{/brokers/ids} watch."""
        self.live = set(live)
        return self.run(self._on_brokers_changed)

    def topics_changed(self) -> defer.Deferred:
        """A topic or partition state appeared: elect leaders where none is live."""
        return self.run(self._elect_offline)

    def _shutdowns_changed(self, ids: list[str]) -> None:
        self.shutting_down = {int(i) for i in ids if i.isdigit()}
        if self.shutting_down:
            self.run(self._on_controlled_shutdown)

    async def _on_activation(self) -> None:
        self.live = set(self.metadata.brokers)
        for key in self._all_partitions():
            state = self.metadata.partition_states.get(key)
            self.partition_states.states[key] = (
                "OnlinePartition" if state is not None and state.leader in self.live else
                "OfflinePartition" if state is not None else "NewPartition")
        await self._elect_offline()

    async def _on_brokers_changed(self) -> None:
        for (topic, partition), replicas in self._assignments():
            for replica in replicas:
                key = (topic, partition, replica)
                self.replica_states.states[key] = "OnlineReplica" if replica in self.live else "OfflineReplica"
        await self._elect_offline()
        await self._remove_dead_from_isr()

    # --- elections ---------------------------------------------------------------------

    def _all_partitions(self) -> list[tuple[str, int]]:
        return [key for key, _ in self._assignments()]

    def _assignments(self) -> list[tuple[tuple[str, int], list[int]]]:
        return [((name, p), replicas) for name, meta in list(self.metadata.topics.items())
                for p, replicas in meta.partitions.items()]

    def _unclean(self, topic: str) -> bool:
        return bool(self.topic_config(topic).get("unclean.leader.election.enable", False))

    def _track(self, key: tuple[str, int], state: Any) -> None:
        """
        Enter a partition with a state znode into the partition state machine
        when it is new to it (created after activation: C{NewPartition}), and
        mark it C{OnlinePartition} when its leader is live (a returned leader).
        """
        current = self.partition_states.state(key)
        if current == "NonExistentPartition":
            self.partition_states.move(key, "NewPartition")
            current = "NewPartition"
        if state.leader in self.live and current != "OnlinePartition":
            self.partition_states.move(key, "OnlinePartition")

    async def _elect_offline(self) -> None:
        for (topic, partition), replicas in self._assignments():
            state = self.metadata.partition_states.get((topic, partition))
            if state is not None:
                self._track((topic, partition), state)
            if state is None or state.leader in self.live:
                continue
            leader, unclean = offline_partition_leader(replicas, state.isr, self.live, self._unclean(topic))
            key = (topic, partition)
            if leader < 0:
                if self.partition_states.state(key) != "OfflinePartition":
                    _log.warn("{topic}-{partition} is offline: no live in-sync replica among {isr}",
                              topic=topic, partition=partition, isr=state.isr)
                self.partition_states.move(key, "OfflinePartition")
                continue
            if unclean:
                _log.warn("unclean leader election for {topic}-{partition}: broker {leader} was not in ISR {isr}; "
                          "records acknowledged by the ISR may be lost", topic=topic, partition=partition,
                          leader=leader, isr=state.isr)
                isr = [leader]
                self.unclean_elections += 1
            else:
                isr = [r for r in state.isr if r in self.live]
            await self._write(topic, partition, state, leader, isr, new_epoch=True)

    async def _remove_dead_from_isr(self) -> None:
        for (topic, partition), _replicas in self._assignments():
            state = self.metadata.partition_states.get((topic, partition))
            if state is None or state.leader not in self.live:
                continue
            isr = [r for r in state.isr if r in self.live]
            if isr != list(state.isr) and isr:
                await self._write(topic, partition, state, state.leader, isr, new_epoch=False)

    async def _on_controlled_shutdown(self) -> None:
        leaving = self.shutting_down
        for (topic, partition), replicas in self._assignments():
            state = self.metadata.partition_states.get((topic, partition))
            if state is None:
                continue
            if state.leader in leaving:
                leader = controlled_shutdown_leader(replicas, state.isr, self.live, leaving)
                if leader < 0:
                    continue  # nobody to take over: it stays until the broker is gone
                isr = [r for r in state.isr if r not in leaving and r in self.live]
                await self._write(topic, partition, state, leader, isr, new_epoch=True)
            elif any(r in leaving for r in state.isr) and state.leader in self.live:
                isr = [r for r in state.isr if r not in leaving]
                if isr:
                    await self._write(topic, partition, state, state.leader, isr, new_epoch=False)

    async def _write(self, topic: str, partition: int, state: Any, leader: int, isr: list[int],
                     new_epoch: bool) -> None:
        """Write a new state, fenced; on a stale zkVersion re-read and let the next event retry."""
        epoch = state.leader_epoch + 1 if new_epoch else state.leader_epoch
        key = (topic, partition)
        if self.partition_states.state(key) == "NonExistentPartition":
            self.partition_states.move(key, "NewPartition")
        try:
            version = await self.registry.set_partition_state(
                topic, partition, leader, epoch, isr, self.epoch, expected_version=state.zk_version,
                controller_epoch_zk_version=self._epoch_zk_version)
        except BadVersionError as e:
            if "/controller_epoch" in str(e):
                raise
            fresh = await self.registry.get_partition_state(topic, partition)
            _log.info("{topic}-{partition}: state changed under the controller; re-read", topic=topic,
                      partition=partition)
            if fresh is not None:
                self.metadata.set_partition_state(topic, partition, fresh)
            return
        from ..zookeeper.registry import PartitionState

        self.metadata.set_partition_state(topic, partition,
                                          PartitionState(leader, epoch, list(isr), self.epoch, version))
        if new_epoch:
            self.elections += 1
            self.partition_states.move(key, "OnlinePartition")
            _log.info("{topic}-{partition}: leader {leader} at epoch {epoch}, ISR {isr}", topic=topic,
                      partition=partition, leader=leader, epoch=epoch, isr=isr)
