"""
The controller: one broker elects partition leaders, as Kafka's ZooKeeper-mode C{KafkaController}.

Every broker runs a L{KafkaController}; the one whose session holds the
ephemeral C{/controller} is I{active}.  Becoming active increments
C{/controller_epoch}; every partition-state write of the controller is part
of a ZooKeeper multi that checks C{/controller_epoch}'s version and the state
znode's zkVersion, so a deposed controller cannot write, and a write based on
a stale state fails and is retried on a fresh read.  An event that settles
many partitions writes them in multis of up to L{SETTLE_BATCH_SIZE}
(L{kafkatw.zookeeper.registry.Registry.set_partition_states}: one check of
C{/controller_epoch}, one conditional set per partition, all or none); when
one partition's state changed or was deleted meanwhile, the multi writes
nothing and its partitions are written one by one (a multi of one each), as
a lone write always is.

Brokers learn of what the controller wrote through their watches on the state
znodes of the topics they know (one read per broker per change: ZooKeeper load
proportional to changes, not to partitions × brokers).

The controller reacts to activation, a change of the live brokers
(C{/brokers/ids}), a controlled shutdown (C{/admin/controlled_shutdown/<id>},
written by a broker on SIGTERM), a failed log dir
(C{/log_dir_event_notification/log_dir_event_<n>}, KIP-112) and any change of
a partition state (the broker's watches) the same way: it I{settles}
partitions (L{KafkaController._decide}) -- every partition on a change of
brokers, shutdowns or log dirs, the changed ones on a partition-state change:

  - a partition whose leader went away is elected a new leader from the live
    ISR, in assignment order (Kafka's C{offlinePartitionLeaderElection}); with
    C{unclean.leader.election.enable} (broker or topic config) and no live ISR
    member, a live out-of-sync replica is elected and the possible loss is
    logged; otherwise the partition stays offline;
  - a partition led by a broker in controlled shutdown moves to another live
    ISR member (Kafka's C{controlledShutdownPartitionLeaderElection});
  - a broker that is gone or shutting down leaves every ISR at once, so
    acks=all writes need not wait C{replica.lag.time.max.ms} for it -- also
    when a leader's ISR expansion raced its going: the leader's write and the
    controller's are both conditional on the state's zkVersion, the one based
    on the older state fails, and the controller decides again from the state
    it re-reads until the partition is settled (a bounded number of writes
    per event, then a re-run of the event), so it never leaves a broker it
    knows is gone in an ISR;
  - a replica in a broker's failed log dir is I{offline} (Kafka's
    C{OfflineReplica}): for that partition the broker counts as gone --
    it loses the leadership to another live ISR member and leaves the ISR
    -- while it stays live for its other partitions.  Which replicas are
    offline the broker writes in its registration
    (L{kafkatw.zookeeper.registry.Registry.set_offline_log_dirs}; Kafka
    learns them from LeaderAndIsr responses, which kafkatw has not); its
    notification makes the controller read them again, as activation and
    a broker's (re)registration do.  A restarted broker registers without
    them;
  - a broker whose process restarted after an unclean shutdown (a crash:
    its logs may have lost what was not flushed) says so in its
    registration (KIP-966's unclean-shutdown registration).  Each partition
    whose state it leads, or whose ISR it is in, was written before that
    registration (the state's C{mzxid} is below the registration's
    C{czxid}, the broker epoch of KIP-380), or whose state it leads at an
    epoch begun before it (L{PartitionState.epoch_start_zxid}: a later ISR
    change kept it on), or whose ISR it joined before it
    (L{PartitionState.isr_join_zxid}) counts it as gone until the
    controller has written the partition again: its leadership moves to
    another live ISR member at a new epoch, or, when none is live, it is
    elected again at a new epoch (its log is all that is left); and it
    leaves the ISR, which it rejoins once it has caught up (a partition of
    one replica is left alone: there is nothing better to elect).  The broker
    itself leads none of those partitions at the epoch it found
    (L{kafkatw.broker.replica_manager.ReplicaManager.fence_leadership}).

Events run one at a time from a queue drained by one loop (Kafka's
C{ControllerEventManager}), in constant stack depth however many queue up
during a failover; state-change notifications queued meanwhile share one
event; one event has up to L{SETTLE_BATCHES_IN_FLIGHT} multis, or
L{SETTLE_WRITES_IN_FLIGHT} partitions' writes of their own, in flight.

Each election bumps the leader epoch.  The partition and replica state machines
are the tables L{PARTITION_STATES} and L{REPLICA_STATES} (each state with its
valid previous states, as Kafka's C{PartitionStateMachine} and
C{ReplicaStateMachine}).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Iterable

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import ErrorCode
from ..zookeeper.bridge import BadVersionError, ZooKeeperError, ZooKeeperUnavailableError, connected_again
from ..zookeeper.registry import ControllerMovedError, PartitionStateWrite, WrittenState
from ..zookeeper.zk_data import LOG_DIR_EVENT_NOTIFICATION_PATH, PartitionState, TopicAssignment
from .partition import next_eligible_leader_replicas, next_elr_isr_zxids, next_isr_zxids

__all__ = ["KafkaController", "PARTITION_STATES", "REPLICA_STATES", "StateMachine", "IllegalStateChange",
           "Decision", "offline_partition_leader", "controlled_shutdown_leader", "MAX_SETTLE_ATTEMPTS",
           "SETTLE_WRITES_IN_FLIGHT", "SETTLE_BATCH_SIZE", "SETTLE_BATCHES_IN_FLIGHT"]

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

#: Writes one event makes to settle one partition (L{KafkaController._settle})
#: before it leaves the partition to a re-run queued behind the other events:
#: each lost write means another writer changed the state meanwhile.
MAX_SETTLE_ATTEMPTS = 5

#: Partitions one event writes (one by one: L{KafkaController._settle_batch}
#: after a refused multi) or reads (L{KafkaController._find_restarted_replicas},
#: the topics at activation) at once: a window of them keeps ZooKeeper busy
#: instead of one round trip per partition.
SETTLE_WRITES_IN_FLIGHT = 64

#: Partitions whose writes one ZooKeeper multi carries when an event settles
#: many (L{KafkaController._settle_keys}): one round trip, one ZooKeeper
#: transaction (one log append and fsync) and one reply to handle instead of
#: one each.  About 200 bytes a partition: far below ZooKeeper's C{jute.maxbuffer}.
SETTLE_BATCH_SIZE = 100

#: Such multis one event has in flight at once.
SETTLE_BATCHES_IN_FLIGHT = 4


class _QueuedPass:
    """
    A controller event queued once for any number of calls made until it
    starts: they share it (it has read nothing yet, so it sees what they
    announce); a call made once it has started queues the next one.
    """

    def __init__(self) -> None:
        self._waiters: list[defer.Deferred] | None = None

    def join(self, run: Callable[[Callable[[], Any]], defer.Deferred],
             body: Callable[[], Coroutine[Any, Any, None]]) -> defer.Deferred:
        """
        @param run: the controller's L{KafkaController.run}.
        @return: a Deferred firing with C{None} once the pass has run (or was
            skipped: the controller is not active).
        """
        waiter: defer.Deferred = defer.Deferred()
        if self._waiters is not None:
            self._waiters.append(waiter)
            return waiter
        waiters = self._waiters = [waiter]

        def started() -> None:
            if self._waiters is waiters:
                self._waiters = None

        async def go() -> None:
            started()
            await body()

        def ended(_: Any) -> None:
            started()
            for each in waiters:
                each.callback(None)

        run(go).addBoth(ended)
        return waiter


@dataclass(frozen=True)
class Decision:
    """
    A partition state the controller decided to write.

    @ivar new_epoch: an election (the leader epoch is incremented) rather
        than an ISR change at the same epoch.
    @ivar why: for the log.
    @ivar unclean: an out-of-sync replica is elected (records may be lost).
    """

    leader: int
    isr: list[int]
    new_epoch: bool
    why: str
    unclean: bool = False
    #: an unclean recovery (KIP-966) elects a replica outside the ISR: what only the lost replica held is lost
    recovery: bool = False


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


async def _each_in_flight(keys: list[Any], work: Callable[[Any], Any],
                          in_flight: int = SETTLE_WRITES_IN_FLIGHT) -> None:
    """
    Await C{work(key)} for each of C{keys}, up to C{in_flight} at once, each
    key's in the order given to its worker.

    @raise Exception: the first failure of C{work}; the other workers stop at
        their next key.
    """
    pending = iter(keys)
    failed: list[Failure] = []

    async def worker() -> None:
        for key in pending:
            if failed:
                return
            try:
                await work(key)
            except Exception:
                failed.append(Failure())
                return

    await defer.gatherResults([defer.Deferred.fromCoroutine(worker())
                               for _ in range(min(in_flight, len(keys)))])
    if failed:
        failed[0].raiseException()


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
    @param log_ends: C{log_ends(broker_id, keys) -> Deferred} of C{{key:
        (latest leader epoch, log end offset)}}, each partition's replica as
        that broker has it (the broker's ListOffsets from the debugging
        replica id, L{kafkatw.broker.fetch_apis.DEBUGGING_REPLICA_ID}): the
        unclean recovery of L{_recovery_leader} asks it; C{None}: not asked
        (the restarted ISR member is elected).
    """

    def __init__(self, broker_id: int, config: Any, registry: Any, metadata: Any,
                 topic_config: Callable[[str], dict],
                 log_ends: Callable[[int, list[tuple[str, int]]], defer.Deferred] | None = None) -> None:
        self.broker_id = broker_id
        self.log_ends = log_ends
        #: partition -> broker -> (latest leader epoch, log end offset) of its replica, as answered for
        #: the unclean recovery of L{_recovery_leader} ((-1, -1): no answer); dropped once the state is written
        self.replica_log_ends: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
        #: the partitions whose replicas' log ends are being asked
        self._asking_log_ends: set[tuple[str, int]] = set()
        self.config = config
        self.registry = registry
        self.metadata = metadata
        self.topic_config = topic_config
        self.active = False
        self.epoch = 0
        self._epoch_zk_version = -1
        #: the event queue (Kafka's C{ControllerEventManager}): C{(event, done)} pairs, run in order
        #: by one loop (L{_drain}), so events that finish without I/O do not nest on the stack
        self._events: collections.deque[tuple[Callable[[], Any], defer.Deferred]] = collections.deque()
        self._draining = False
        #: the L{topics_changed} and L{partition_changed} passes, each queued once while it waits
        self._settle_all_pass = _QueuedPass()
        self._changed_pass = _QueuedPass()
        #: the partitions changed since the L{partition_changed} pass started
        self._changed: set[tuple[str, int]] = set()
        self.live: set[int] = set()
        self.shutting_down: set[int] = set()
        self.partition_states = StateMachine(PARTITION_STATES, "NonExistentPartition")
        self.replica_states = StateMachine(REPLICA_STATES, "NonExistentReplica")
        self._shutdown_watch: Any = None
        self._log_dir_watch: Any = None
        #: broker id -> the partitions whose replicas are in its failed log dirs (KIP-112)
        self.offline_replicas: dict[int, set[tuple[str, int]]] = {}
        #: broker id -> its broker epoch (the C{czxid} of its registration, KIP-380) when it
        #: registered after an unclean shutdown and its stale partitions were looked for
        self.unclean_restarts: dict[int, int] = {}
        #: partition -> the brokers that restarted uncleanly after its state was written
        #: (they count as gone for it until the controller writes it again)
        self.restarted_replicas: dict[tuple[str, int], set[int]] = {}
        self._electing: defer.Deferred | None = None
        self._election_waiters: list[defer.Deferred] = []
        #: C{(topic, partition)} -> target replicas of a reassignment in progress.
        self.reassignments: dict[tuple[str, int], list[int]] = {}
        self._adding: dict[tuple[str, int], list[int]] = {}
        #: partitions whose settling lost every attempt, and whether their re-run is queued
        self._unsettled: set[tuple[str, int]] = set()
        self._settle_queued = False
        #: Kafka's controller metrics.
        self.elections = 0
        self.unclean_elections = 0

    # --- election of the controller ---------------------------------------------------

    def elect(self) -> defer.Deferred:
        """
        Try to become the controller; on success, act on the cluster as it is.
        Calls made while an election is under way share its result.

        @return: a Deferred firing with whether this broker is the controller.
        """
        waiter: defer.Deferred = defer.Deferred()
        self._election_waiters.append(waiter)
        if self._electing is None:
            self._electing = defer.Deferred.fromCoroutine(self._elect())
            self._electing.addBoth(self._elected)
        return waiter

    def _elected(self, result: Any) -> None:
        self._electing = None
        waiters, self._election_waiters = self._election_waiters, []
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)

    async def _elect(self) -> bool:
        if self.active:
            return True
        while True:
            try:
                if not await self.registry.elect_controller(self.broker_id):
                    return False
                break
            except ZooKeeperUnavailableError as e:
                # The create may have been made: tried again once connected, it finds this session's
                # /controller and completes the election (the simulation's seed 9119 with
                # --disk-model --transactions --groups --faults 12 --window 40: left half made, no
                # broker was the controller again)
                _log.info("controller election interrupted ({error}); it runs again once ZooKeeper is back",
                          error=e)
                await connected_again(self.registry.client)
        self.epoch, self._epoch_zk_version = self.registry.controller_epoch
        self.active = True
        _log.info("broker {id} is the controller (epoch {epoch})", id=self.broker_id, epoch=self.epoch)
        try:
            self._shutdown_watch = await self.registry.client.watch_children(
                CONTROLLED_SHUTDOWN_PATH, self._shutdowns_changed)
        except ZooKeeperError as e:
            _log.warn("cannot watch {path}: {error}", path=CONTROLLED_SHUTDOWN_PATH, error=e)
        try:
            self._log_dir_watch = await self.registry.watch_log_dir_events(self._log_dir_events_changed)
        except ZooKeeperError as e:
            _log.warn("cannot watch {path}: {error}", path=LOG_DIR_EVENT_NOTIFICATION_PATH, error=e)
        await self.run(self._on_activation)
        return True

    def resign(self) -> None:
        if self.active:
            _log.info("broker {id} is no longer the controller", id=self.broker_id)
        self.active = False
        self.unclean_restarts.clear()
        self.restarted_replicas.clear()
        self.replica_log_ends.clear()
        if self._shutdown_watch is not None:
            self._shutdown_watch.cancel()
            self._shutdown_watch = None
        if self._log_dir_watch is not None:
            self._log_dir_watch.cancel()
            self._log_dir_watch = None

    def controller_changed(self, controller_id: int | None) -> None:
        """The C{/controller} watch: resign when another broker holds it."""
        if controller_id != self.broker_id:
            self.resign()

    # --- events ---------------------------------------------------------------------

    def run(self, event: Callable[[], Any]) -> defer.Deferred:
        """
        Run one controller event at a time (Kafka's controller event queue).
        A write fenced by C{/controller_epoch} ends the event, and this
        controller resigns -- unless it was elected again since the event
        began (the fenced write was the earlier term's): resigning then would
        leave the cluster without a controller while this broker holds
        C{/controller}.  An event that loses its ZooKeeper connection
        (L{ZooKeeperUnavailableError}) runs again from its start once the
        connection is back, while this broker is still the controller of the
        same term (Kafka's C{retryRequestsUntilConnected}): an event decides
        from the states it reads, so what it wrote before the loss is not
        written twice, and nothing it was to do is left for an event that
        may never come.
        """

        async def go() -> None:
            if not self.active:
                return
            term = self._epoch_zk_version
            while True:
                try:
                    await event()
                    return
                except ControllerMovedError as e:
                    if self._epoch_zk_version == term:
                        _log.warn("another controller was elected: {error}", error=e)
                        self.resign()
                    return
                except ZooKeeperUnavailableError as e:
                    _log.info("controller event interrupted ({error}); it runs again once ZooKeeper is back",
                              error=e)
                    await connected_again(self.registry.client)
                    if not self.active or self._epoch_zk_version != term:
                        return

        done: defer.Deferred = defer.Deferred()
        done.addErrback(lambda f: _log.failure("controller event failed", f))
        self._events.append((go, done))
        if not self._draining:
            defer.Deferred.fromCoroutine(self._drain())
        return done

    async def _drain(self) -> None:
        """
        Run the queued events one after the other until none is left.  A loop,
        not a chain of callbacks: thousands of events that finish at once
        (a failover's state-change notifications) run in constant stack depth.
        """
        self._draining = True
        try:
            while self._events:
                go, done = self._events.popleft()
                try:
                    await go()
                except Exception:
                    done.errback(Failure())
                else:
                    done.callback(None)
        finally:
            self._draining = False

    def brokers_changed(self, live: Iterable[int]) -> defer.Deferred:
        """The C{/brokers/ids} watch."""
        self.live = set(live)
        return self.run(self._on_brokers_changed)

    def topics_changed(self) -> defer.Deferred:
        """
        A topic changed, or a config that decides elections did: settle every
        partition again (L{_settle}: elect leaders where none is live, take
        brokers that are gone or shutting down out of the ISRs, also out of
        the ones a leader has just expanded), and finish reassignments whose
        new replicas caught up.

        Calls made while such a pass waits in the queue share it: it has not
        read anything yet, so it sees what they announce.

        @return: a Deferred firing with C{None} when the pass has run.
        """
        return self._settle_all_pass.join(self.run, self._settle_all_and_continue)

    async def _settle_all_and_continue(self) -> None:
        await self._settle_all()
        if self.reassignments:
            await self._continue_reassignments()

    def partition_changed(self, key: tuple[str, int]) -> defer.Deferred:
        """
        One partition's state changed (the broker's watch on its state
        znode, also for the controller's own writes): settle that partition
        (L{_settle}) and continue reassignments.  The partitions changed
        while such a pass waits in the queue are settled by it together, so
        a failover that rewrites N partitions queues a handful of passes, not
        N passes over every partition.

        @return: a Deferred firing with C{None} when the pass has run.
        """
        self._changed.add(key)
        return self._changed_pass.join(self.run, self._settle_changed)

    async def _settle_changed(self) -> None:
        keys, self._changed = self._changed, set()
        await self._settle_keys(sorted(keys))
        if self.reassignments:
            await self._continue_reassignments()

    def _shutdowns_changed(self, ids: list[str]) -> None:
        self.shutting_down = {int(i) for i in ids if i.isdigit()}
        if self.shutting_down:
            self.run(self._on_controlled_shutdown)

    def _log_dir_events_changed(self, children: list[str]) -> None:
        """The C{/log_dir_event_notification} watch (Kafka's C{LogDirEventNotificationHandler})."""
        if children:
            self.run(lambda: self._on_log_dir_events(children))

    async def _on_log_dir_events(self, children: list[str]) -> None:
        """
        Read and delete the notifications, re-read the offline replicas of
        the brokers they name, and settle every partition: the leaderships
        of offline replicas move to other live ISR members and their brokers
        leave those ISRs (Kafka's C{onBrokerLogDirFailure}, which makes them
        C{OfflineReplica}s).
        """
        brokers = set()
        for child in children:
            broker = await self.registry.take_log_dir_event(child)
            if broker is not None:
                brokers.add(broker)
        for broker in sorted(brokers):
            await self._read_registration(broker)
        if brokers:
            await self._settle_all()

    async def _read_registration(self, broker: int) -> None:
        """
        Read which replicas of C{broker} are offline from its registration
        (none when it is gone), and, when it registered after an unclean
        shutdown, which partitions' states predate that (L{_find_restarted_replicas}).
        """
        try:
            registration = await self.registry.get_broker_registration(broker)
        except ZooKeeperUnavailableError:
            # the event runs again once ZooKeeper is back (L{run}): going on without the registration,
            # a broker that restarted after an unclean shutdown could be elected with the records it
            # lost (the simulation's seed 136142: a restarted controller could not read its own)
            raise
        except ZooKeeperError as e:
            _log.warn("cannot read broker {broker}'s registration: {error}", broker=broker, error=e)
            return
        offline = None if registration is None else registration.offline_replicas
        # The restart is at the process's first registration: a later one (a new session's, after
        # an expiry) carries its epoch, and a state written between the two names the broker for
        # what it did since it restarted (it rejoined an ISR once caught up): counted as restarted
        # there, it was kept out of the eligible leader replicas, and a replica that had lost the
        # records was elected instead (the simulation's seed 9011 with --disk-model).
        if (registration is not None and registration.unclean_shutdown
                and self.unclean_restarts.get(broker) != registration.restart_epoch):
            await self._find_restarted_replicas(broker, registration.restart_epoch)
            self.unclean_restarts[broker] = registration.restart_epoch  # once every state was read
        before = self.offline_replicas.get(broker, set())
        if offline:
            self.offline_replicas[broker] = set(offline)
        else:
            self.offline_replicas.pop(broker, None)
        if (offline or set()) != before:
            _log.info("broker {broker}'s offline replicas (in failed log dirs): {partitions}", broker=broker,
                      partitions=", ".join(f"{t}-{p}" for t, p in sorted(offline or ())) or "none")
        for topic, partition in offline or ():
            self.replica_states.states[(topic, partition, broker)] = "OfflineReplica"

    async def _find_restarted_replicas(self, broker: int, broker_epoch: int) -> None:
        """
        The partitions whose state names C{broker} as leader or ISR member and
        was written before its registration at C{broker_epoch} (a state's
        C{mzxid} below it), or names it leader at an epoch that began before
        it (L{PartitionState.epoch_start_zxid}: a state written since, by a
        controller or leader that had not yet read the registration, kept it
        on), or an ISR member that joined before it
        (L{PartitionState.isr_join_zxid}), or names it an eligible leader replica that was
        last in the ISR before it (L{PartitionState.elr_isr_zxid}: a state
        written since, by a controller or leader that had not yet read the
        registration, moved it from a stale ISR place to the ELR): its process
        lost, in an unclean shutdown, what it had not flushed, so for them it
        counts as gone (L{_live_for}) until the controller has written them
        again.  The states are read afresh, up to L{SETTLE_WRITES_IN_FLIGHT}
        at once.
        """
        def named(state: Any) -> bool:
            return state.leader == broker or broker in state.isr or broker in state.elr

        # a partition whose only replica it is has nothing better to elect: it is left as it is
        keys = [key for key, replicas in self._assignments() if broker in replicas and len(replicas) > 1
                and (state := self.metadata.partition_states.get(key)) is not None and named(state)]
        found: list[tuple[str, int]] = []

        async def check(key: tuple[str, int]) -> None:
            try:
                fresh = await self.registry.get_partition_state(*key)
            except ZooKeeperUnavailableError:
                raise  # read again when the event runs again (L{_read_registration})
            except ZooKeeperError as e:
                _log.warn("cannot read {topic}-{partition}'s state: {error}", topic=key[0], partition=key[1], error=e)
                return
            if fresh is None:
                return
            self.metadata.set_partition_state(key[0], key[1], fresh)
            if (0 <= fresh.mzxid < broker_epoch and named(fresh)
                    # its leadership began before it: a later ISR change (written by a controller or
                    # leader that had not read the registration yet) kept it on (seed 100124)
                    or fresh.leader == broker and 0 <= fresh.epoch_start_zxid < broker_epoch
                    # it joined the ISR before it, whoever wrote the state since (KIP-903's broker epochs)
                    or broker in fresh.isr and 0 <= fresh.isr_join_zxid(broker) < broker_epoch
                    or broker in fresh.elr and 0 <= fresh.elr_isr_zxid(broker) < broker_epoch):
                self.restarted_replicas.setdefault(key, set()).add(broker)
                found.append(key)

        await _each_in_flight(keys, check)
        if found:
            _log.warn("broker {broker} restarted after an unclean shutdown: it leaves the leadership and ISR of"
                      " {count} partitions whose state predates its registration, until it has caught up",
                      broker=broker, count=len(found))

    def _eligible_leader_replicas(self, key: tuple[str, int], state: Any, isr: list[int]) -> list[int]:
        """
        The ELR a write of C{isr} over C{state} carries (KIP-966,
        L{next_eligible_leader_replicas}): never a replica that restarted
        uncleanly since the state was written or whose log dir failed.
        """
        min_isr = int(self.topic_config(key[0]).get("min.insync.replicas", 1))
        return next_eligible_leader_replicas(state.isr, state.elr, isr, min_isr, self._replicas(key) or [],
                                             self._unsure_replicas(key))

    def _unsure_replicas(self, key: tuple[str, int]) -> set[int]:
        """The replicas of C{key} that restarted uncleanly since its state was written or whose log dir failed."""
        unsure = set(self.restarted_replicas.get(key, ()))
        unsure.update(b for b, offline in self.offline_replicas.items() if key in offline)
        return unsure

    def _may_hold_more(self, key: tuple[str, int], state: Any, restarted: int) -> list[int]:
        """
        The replicas, other than C{restarted} (an ISR member back after an
        unclean shutdown), sure to hold every record acknowledged while they
        were in sync: the other ISR members and the eligible leader replicas,
        but for those that restarted uncleanly too or whose log dir failed,
        whatever C{min.insync.replicas} (the ELR a write of C{[restarted]}
        would carry, L{_eligible_leader_replicas}, covers an ISR member that
        is down only where C{min.insync.replicas} is above 1; with 1, an ISR
        member no controller took out before it went -- no controller was
        up, as in the simulation's seed 140003 -- holds them as well).
        """
        excluded = self._unsure_replicas(key) | {restarted}
        return [r for r in self._replicas(key) or [] if (r in state.isr or r in state.elr) and r not in excluded]

    def _live_for(self, key: tuple[str, int]) -> set[int]:
        """
        The live brokers whose replica of C{key} is not offline (in a failed
        log dir) and did not restart uncleanly since C{key}'s state was written.
        """
        restarted = self.restarted_replicas.get(key)
        if not self.offline_replicas and not restarted:
            return self.live
        return {b for b in self.live
                if key not in self.offline_replicas.get(b, ()) and not (restarted and b in restarted)}

    async def _on_activation(self) -> None:
        self.live = set(self.metadata.brokers)
        # Which replicas sit in failed log dirs (the brokers' registrations): Kafka's new
        # controller learns it from the LeaderAndIsr responses of every broker.
        self.offline_replicas.clear()
        self.unclean_restarts.clear()
        self.restarted_replicas.clear()
        self.replica_log_ends.clear()
        for broker in sorted(self.live):
            await self._read_registration(broker)
        # Reassignments a previous controller started live on in the topic znodes (KIP-455),
        # read up to SETTLE_WRITES_IN_FLIGHT at once (one round trip each would add up at thousands of topics).
        names = list(self.metadata.topics)
        read: dict[str, TopicAssignment] = {}

        async def get_topic(name: str) -> None:
            try:
                read[name] = await self.registry.get_topic(name)
            except Exception:
                pass

        await _each_in_flight(names, get_topic)
        for name in names:
            current = read.get(name)
            if current is None:
                continue
            for partition, removing in current.removing_replicas.items():
                replicas = current.partitions.get(partition, [])
                self.reassignments[(name, partition)] = [r for r in replicas if r not in removing]
            for partition, adding in current.adding_replicas.items():
                self._adding[(name, partition)] = list(adding)
                if (name, partition) not in self.reassignments:
                    self.reassignments[(name, partition)] = list(current.partitions.get(partition, []))
        for key in self._all_partitions():
            state = self.metadata.partition_states.get(key)
            self.partition_states.states[key] = (
                "OnlinePartition" if state is not None and state.leader in self._live_for(key) else
                "OfflinePartition" if state is not None else "NewPartition")
        # What a deposed controller left undone (an ISR still listing a dead broker) is done now.
        await self._settle_all()

    async def _on_brokers_changed(self) -> None:
        # A broker gone takes its offline replicas with it.  Every live broker's registration is
        # read again: one that restarted within its session timeout may be in no change the
        # watch saw, but its broker epoch grew (KIP-380).
        for broker in list(self.offline_replicas):
            if broker not in self.live:
                del self.offline_replicas[broker]
        for broker in list(self.unclean_restarts):
            if broker not in self.live:
                del self.unclean_restarts[broker]
        self.replica_log_ends.clear()  # a broker that restarted meanwhile may have lost what it told
        for broker in sorted(self.live):
            await self._read_registration(broker)
        for (topic, partition), replicas in self._assignments():
            for replica in replicas:
                key = (topic, partition, replica)
                self.replica_states.states[key] = "OnlineReplica" if replica in self._live_for(
                    (topic, partition)) else "OfflineReplica"
        await self._settle_all()

    async def _on_controlled_shutdown(self) -> None:
        await self._settle_all()

    # --- settling partitions: elections and ISR membership -----------------------------

    def _all_partitions(self) -> list[tuple[str, int]]:
        return [key for key, _ in self._assignments()]

    def _assignments(self) -> list[tuple[tuple[str, int], list[int]]]:
        return [((name, p), replicas) for name, meta in list(self.metadata.topics.items())
                for p, replicas in meta.partitions.items()]

    def _replicas(self, key: tuple[str, int]) -> list[int] | None:
        meta = self.metadata.topics.get(key[0])
        return None if meta is None else meta.partitions.get(key[1])

    def _unclean(self, topic: str) -> bool:
        return bool(self.topic_config(topic).get("unclean.leader.election.enable", False))

    def isr_eligible(self, broker_id: int) -> bool:
        """Whether a broker may be in an ISR: alive and not in controlled shutdown (KIP-841)."""
        return broker_id in self.live and broker_id not in self.shutting_down

    def _track(self, key: tuple[str, int], state: Any, live: set[int]) -> None:
        """
        Enter a partition with a state znode into the partition state machine
        when it is new to it (created after activation: C{NewPartition}), and
        mark it C{OnlinePartition} when its leader is live (a returned leader).
        """
        self._ensure_known(key)
        current = self.partition_states.state(key)
        if state.leader in live and current != "OnlinePartition":
            self.partition_states.move(key, "OnlinePartition")

    def _decide(self, key: tuple[str, int], state: Any) -> Decision | None:
        """
        What one partition's state should become, given the live brokers and
        those shutting down, or C{None} when it is as it should be.  In order:

          1. a partition whose leader is gone is elected one
             (L{_decide_election});
          2. a partition whose leader is shutting down moves to another live
             ISR member that is not (Kafka's
             C{controlledShutdownPartitionLeaderElection}), at a new epoch;
          3. an ISR listing a broker that is gone or shutting down loses it,
             at the same epoch (Kafka's C{removeReplicasFromIsr}); the leader
             stays in it, and so does a leader nobody can take over from.

        A broker whose replica of this partition is offline (in a failed log
        dir, KIP-112), or that restarted after an unclean shutdown since the
        state was written, counts as gone in all three, for this partition
        only: its leadership moves (1) and it leaves the ISR (3).

        The state machines' moves (C{OfflinePartition} and back) happen here.
        """
        replicas = self._replicas(key)
        if replicas is None or state is None:
            return None
        restarted = self.restarted_replicas.get(key)
        if restarted is not None:
            # one that holds neither the leadership nor an ISR place (any more) is an ordinary replica
            restarted.intersection_update([state.leader, *state.isr, *state.elr])
            if not restarted:
                del self.restarted_replicas[key]
        live = self._live_for(key)
        elected = self._decide_election(key, replicas, state, live)
        if elected is not None or state.leader not in live:
            return elected
        shutting_down = self.shutting_down
        eligible = [r for r in state.isr if r in live and r not in shutting_down]
        if state.leader in shutting_down:
            leader = controlled_shutdown_leader(replicas, state.isr, live, shutting_down)
            if leader >= 0:
                return Decision(leader, eligible, True, "controlled shutdown")
        isr = [r for r in state.isr if r == state.leader or r in live and r not in shutting_down]
        if isr and isr != list(state.isr):
            return Decision(state.leader, isr, False, "replicas gone, offline, restarted or shutting down")
        if restarted and restarted & set(state.elr):
            return Decision(state.leader, list(state.isr), False, "an eligible leader replica restarted uncleanly")
        return None

    def _decide_election(self, key: tuple[str, int], replicas: list[int], state: Any,
                         live: set[int]) -> Decision | None:
        """
        Kafka's C{offlinePartitionLeaderElection} for a partition without a
        live leader: the first assigned replica alive and in the ISR, at a new
        epoch, with the ISR reduced to its live members; failing that an
        unclean election when allowed, else the partition is offline.  A
        partition that was offline and whose last leader returned is elected
        again (at a new epoch, as Kafka does).  Without a live ISR member,
        the first live eligible leader replica is elected (KIP-966); with no
        eligible leader replica, an ISR member that restarted after an
        unclean shutdown is (before an unclean election: its log is all that
        is left of the ISR's), at a new epoch, alone in the ISR -- unless that
        election would leave eligible leader replicas (ISR members or eligible
        ones that are down, and hold what it may have lost): the partition
        then waits for one of them.  An offline partition whose leader's
        broker lives but whose replica is offline (a failed log dir, a log
        refused for want of file descriptors) is written without a leader
        (-1) at a new epoch, as Kafka's C{removeReplicasFromIsr} does for an
        C{OfflineReplica} that leads: no broker names a leader that answers
        C{KAFKA_STORAGE_ERROR}.

        @param live: the live brokers whose replica of this partition is online.
        """
        if state.leader in live and self.partition_states.state(key) == "OfflinePartition":
            leader, _ = offline_partition_leader(replicas, state.isr, live, False)
            if leader >= 0:
                return Decision(leader, [r for r in state.isr if r in live], True, "its leader returned")
        self._track(key, state, live)
        if state.leader in live:
            return None
        topic, partition = key
        leader, unclean = offline_partition_leader(replicas, state.isr, live, False)
        if leader < 0:
            restarted = self.restarted_replicas.get(key, ())
            for replica in replicas:
                if (replica in state.elr and replica in live and replica not in restarted):
                    return Decision(replica, [replica], True, "no in-sync replica is live: elected from the eligible"
                                    " leader replicas (KIP-966)")
            for replica in replicas:
                if (replica in restarted and replica in state.isr and replica in self.live
                        and key not in self.offline_replicas.get(replica, ())):
                    if self._may_hold_more(key, state, replica):
                        break  # a replica that is down (eligible, or in the ISR) holds what this one may have lost
                    recovered = self._recovery_leader(key, replicas, replica)
                    if recovered is None:
                        return None  # the replicas are asked for their log ends; settled again on the answers
                    if recovered != replica:
                        return Decision(recovered, [recovered], True,
                                        f"its only live in-sync replica, {replica}, restarted after an unclean"
                                        " shutdown and holds less than another replica", recovery=True)
                    return Decision(replica, [replica], True,
                                    "its only live in-sync replica restarted after an unclean shutdown")
            leader, unclean = offline_partition_leader(replicas, state.isr, live, self._unclean(topic))
        if leader < 0:
            if self.partition_states.state(key) != "OfflinePartition":
                _log.warn("{topic}-{partition} is offline: no live in-sync replica among {isr}",
                          topic=topic, partition=partition, isr=state.isr)
            self.partition_states.move(key, "OfflinePartition")
            if state.leader in self.live and key in self.offline_replicas.get(state.leader, ()):
                # Kafka's removeReplicasFromIsr for an OfflineReplica that leads: no leader, at a new
                # epoch, so that no broker names one that cannot serve; a lone ISR member stays in it
                isr = list(state.isr) if len(state.isr) <= 1 else [r for r in state.isr if r != state.leader]
                return Decision(-1, isr, True, "its leader's replica is offline and no other replica can lead")
            return None
        if unclean:
            return Decision(leader, [leader], True, "unclean", unclean=True)
        why = ("its leader is gone" if state.leader not in self.live else
               "its leader restarted after an unclean shutdown" if state.leader in self.restarted_replicas.get(key, ())
               else "its leader's replica is offline")
        return Decision(leader, [r for r in state.isr if r in live], True, why)

    def _recovery_leader(self, key: tuple[str, int], replicas: list[int], restarted: int) -> int | None:
        """
        KIP-966's unclean recovery, for a partition whose only live ISR
        member, C{restarted}, restarted after an unclean shutdown (and no
        eligible leader replica is left): the live replica with the highest
        latest leader epoch, then the longest log -- a replica outside the
        ISR may hold what C{restarted} lost (it caught up but could not
        rejoin the ISR) -- C{restarted} on a tie, then the assignment's
        order.  Without the answers of every live replica yet, they are
        asked (L{log_ends}) and C{None} is returned: the partition is
        settled again once they answered.  Without L{log_ends},
        C{restarted}.
        """
        if self.log_ends is None:
            return restarted
        candidates = [r for r in replicas if r in self.live and key not in self.offline_replicas.get(r, ())]
        known = self.replica_log_ends.get(key, {})
        missing = [r for r in candidates if r not in known]
        if missing:
            self._ask_log_ends(key, missing)
            return None
        return max(candidates, key=lambda r: (known[r], r == restarted, -replicas.index(r)))

    def _ask_log_ends(self, key: tuple[str, int], brokers: list[int]) -> None:
        """Ask C{brokers} for their replica's log end of C{key} (L{log_ends}); settle C{key} again on the answers."""
        if key in self._asking_log_ends:
            return
        self._asking_log_ends.add(key)
        assert self.log_ends is not None
        log_ends = self.log_ends

        async def ask(broker: int) -> None:
            try:
                answer = (await log_ends(broker, [key])).get(key, (-1, -1))
            except Exception as e:
                _log.warn("{topic}-{partition}: broker {broker} did not tell its log end ({error}); it is not"
                          " chosen by the unclean recovery", topic=key[0], partition=key[1], broker=broker, error=e)
                answer = (-1, -1)
            self.replica_log_ends.setdefault(key, {})[broker] = answer

        async def go() -> None:
            try:
                await defer.gatherResults([defer.Deferred.fromCoroutine(ask(b)) for b in brokers])
            finally:
                self._asking_log_ends.discard(key)
            _log.info("{topic}-{partition}: the replicas' log ends (latest leader epoch, offset) for its unclean"
                      " recovery: {ends}", topic=key[0], partition=key[1],
                      ends=", ".join(f"{b}: {e}" for b, e in sorted(self.replica_log_ends.get(key, {}).items())))
            if self.active:
                self._settle_later(key)

        defer.Deferred.fromCoroutine(go()).addErrback(
            lambda f: _log.failure("asking the log ends of {key} failed", f, key=key))

    async def _settle_all(self) -> None:
        """
        L{_settle} every partition; the ones still contended are settled
        again by a re-run.  Those without a live leader come first, as
        Kafka's C{onReplicasBecomeOffline} elects the offline partitions
        before it takes the replicas out of the other ISRs: when a broker
        dies, its leaderships move before the ISRs it follows in shrink.
        """
        keys = self._all_partitions()
        states = self.metadata.partition_states
        leaderless = [key for key in keys
                      if (state := states.get(key)) is not None and state.leader not in self._live_for(key)]
        if leaderless and len(leaderless) < len(keys):
            first = set(leaderless)
            keys = leaderless + [key for key in keys if key not in first]
        await self._settle_keys(keys)

    async def _settle_keys(self, keys: list[tuple[str, int]]) -> None:
        """
        L{_settle} each of C{keys}, and queue a re-run for the ones still
        contended.  The keys go in batches of L{SETTLE_BATCH_SIZE}, up to
        L{SETTLE_BATCHES_IN_FLIGHT} at once (L{_settle_batch}): the first
        write of every partition of a batch that needs one is one ZooKeeper
        multi, so a failover's thousands of elections take a few dozen round
        trips and ZooKeeper transactions, not one each.

        @raise ControllerMovedError: another controller was elected (the first
            such failure; the other workers stop at their next batch).
        """
        batches = [keys[i:i + SETTLE_BATCH_SIZE] for i in range(0, len(keys), SETTLE_BATCH_SIZE)]
        await _each_in_flight(batches, self._settle_batch, SETTLE_BATCHES_IN_FLIGHT)

    async def _settle_batch(self, keys: list[tuple[str, int]]) -> None:
        """
        Decide each of C{keys} (L{_decide}) and write every decision in one
        multi (L{kafkatw.zookeeper.registry.Registry.set_partition_states}:
        fenced by C{/controller_epoch}, each state conditional on the
        zkVersion it was decided from, all or none).  After a written batch,
        a partition that still needs a write (a leader elected that is in
        controlled shutdown) goes through L{_settle}; after a batch refused
        because one partition's state changed or was deleted meanwhile,
        nothing was written and every partition of it is written on its own
        as without batches (L{_settle}, up to L{SETTLE_WRITES_IN_FLIGHT} at
        once) -- the changed one fails, is re-read and decided again, the
        others are written.  A lone decision is written on its own.

        @raise ControllerMovedError: another controller was elected.
        """
        decided: list[tuple[tuple[str, int], Any, Decision]] = []
        for key in keys:
            state = self.metadata.partition_states.get(key)
            decision = self._decide(key, state)
            if decision is not None:
                decided.append((key, state, decision))
        if len(decided) > 1:
            writes = [self._planned(key, state, decision.leader, decision.isr, decision.new_epoch)
                      for key, state, decision in decided]
            try:
                written = await self.registry.set_partition_states(writes, self.epoch, self._epoch_zk_version)
            except ControllerMovedError:
                raise
            except BadVersionError as e:
                _log.info("{count} partitions' states written one by one: {error}", count=len(writes), error=e)
            else:
                for (key, state, decision), write, stat in zip(decided, writes, written):
                    self._written(write, stat, decision.new_epoch)
                    self._log_decision(key, state, decision)
                decided = [entry for entry in decided
                           if self._decide(entry[0], self.metadata.partition_states.get(entry[0])) is not None]

        async def settle(key: tuple[str, int]) -> None:
            if not await self._settle(key):
                self._settle_later(key)

        await _each_in_flight([key for key, _, _ in decided], settle)

    async def _settle(self, key: tuple[str, int]) -> bool:
        """
        Bring one partition to what L{_decide} wants, from its freshest state.
        Each write is conditional on the zkVersion the decision was made from;
        when another writer (the leader changing the ISR) got there first, the
        write fails, the state is re-read (L{_write}) and the decision made
        again from it -- never dropped: the leader's write may have put back a
        broker that is gone, and no later event need come (Kafka's
        C{removeReplicasFromIsr} retries the same way).  After
        L{MAX_SETTLE_ATTEMPTS} writes the partition is left to a re-run.

        @return: whether the partition is settled.
        @raise ControllerMovedError: another controller was elected (the event ends).
        """
        for _ in range(MAX_SETTLE_ATTEMPTS):
            state = self.metadata.partition_states.get(key)
            decision = self._decide(key, state)
            if decision is None:
                return True
            topic, partition = key
            if await self._write(topic, partition, state, decision.leader, decision.isr,
                                 new_epoch=decision.new_epoch):
                self._log_decision(key, state, decision)
        return self._decide(key, self.metadata.partition_states.get(key)) is None

    def _log_decision(self, key: tuple[str, int], state: Any, decision: Decision) -> None:
        """Log a written L{Decision} over C{state} (and count an unclean election)."""
        topic, partition = key
        if decision.unclean:
            _log.warn("unclean leader election for {topic}-{partition}: broker {leader} was not in ISR {isr}; "
                      "records acknowledged by the ISR may be lost", topic=topic, partition=partition,
                      leader=decision.leader, isr=state.isr)
            self.unclean_elections += 1
        if decision.recovery:
            _log.warn("unclean recovery of {topic}-{partition} (KIP-966): {why}; broker {leader}, the replica with the"
                      " newest and longest log, leads; records only the ISR {isr} held may be lost", topic=topic,
                      partition=partition, why=decision.why, leader=decision.leader, isr=state.isr)
        if not decision.new_epoch:
            _log.info("{topic}-{partition}: ISR {old} -> {isr} ({why})", topic=topic, partition=partition,
                      old=state.isr, isr=decision.isr, why=decision.why)

    def _settle_later(self, key: tuple[str, int]) -> None:
        """Queue a re-run that settles C{key} again (after the events already queued)."""
        self._unsettled.add(key)
        if self._settle_queued:
            return
        self._settle_queued = True

        async def again() -> None:
            self._settle_queued = False
            keys, self._unsettled = self._unsettled, set()
            await self._settle_keys(sorted(keys))

        self.run(again)

    # --- preferred and unclean elections on demand (ElectLeaders, KIP-460) ------------------

    def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None) -> defer.Deferred:
        """
        ElectLeaders: C{election_type} 0 elects each partition's preferred
        replica (the first assigned) when it is alive and in sync; 1 elects a
        live replica for partitions without a live leader (unclean).

        @param partitions: C{None} for every partition.
        @return: a Deferred firing with C{(topic, partition) -> (ErrorCode, message | None)}.
        """
        results: dict[tuple[str, int], tuple[Any, str | None]] = {}

        async def go() -> None:
            assignments = dict(self._assignments())
            wanted = list(assignments) if partitions is None else partitions
            for key in wanted:
                results[key] = await self._elect_on_demand(key, assignments.get(key), election_type)

        d = self.run(go)
        return d.addCallback(lambda _: results)

    async def _elect_on_demand(self, key: tuple[str, int], replicas: list[int] | None,
                               election_type: int) -> tuple[Any, str | None]:
        """
        One partition of L{elect_leaders}, decided from its freshest state:
        when the write loses to another writer (the leader changed the ISR
        meanwhile), the state is re-read and the election decided again, up
        to L{MAX_SETTLE_ATTEMPTS} writes; success is reported only for a
        written state.
        """
        for _ in range(MAX_SETTLE_ATTEMPTS):
            state = self.metadata.partition_states.get(key)
            if replicas is None or state is None:
                return ErrorCode.unknown_topic_or_partition, "no such partition"
            live = self._live_for(key)  # a replica in a failed log dir is not a candidate
            unclean = False
            if election_type == 0:
                leader = replicas[0]
                # A dead leader recorded in the state is no leader (Kafka writes NoLeader there).
                if state.leader == leader and leader in live:
                    return ErrorCode.election_not_needed, "the preferred replica leads"
                if leader not in live or leader not in state.isr:
                    return (ErrorCode.preferred_leader_not_available,
                            f"preferred replica {leader} is not alive and in sync")
                isr = list(state.isr)
            else:
                if state.leader in live:
                    return ErrorCode.election_not_needed, "the partition has a live leader"
                leader, unclean = offline_partition_leader(replicas, state.isr, live, True)
                if leader < 0:
                    return ErrorCode.eligible_leaders_not_available, "no live replica"
                isr = [leader] if unclean else [r for r in state.isr if r in live]
            if await self._write(key[0], key[1], state, leader, isr, new_epoch=True):
                if unclean:
                    _log.warn("unclean leader election for {topic}-{partition} on demand: broker {leader}",
                              topic=key[0], partition=key[1], leader=leader)
                    self.unclean_elections += 1
                return ErrorCode.none, None
        return (ErrorCode.unknown_server_error,
                f"the partition's state changed under the controller {MAX_SETTLE_ATTEMPTS} times; try again")

    def check_preferred_imbalance(self, imbalance_percentage: int) -> defer.Deferred:
        """
        C{auto.leader.rebalance.enable}: for each broker whose share of
        partitions it prefers but does not lead exceeds
        C{leader.imbalance.per.broker.percentage}, move those leaderships back
        to it when it is alive and in sync (Kafka's C{checkAndTriggerAutoLeaderRebalance}).
        """

        async def go() -> None:
            preferred: dict[int, list[tuple[str, int]]] = {}
            for key, replicas in self._assignments():
                if replicas:
                    preferred.setdefault(replicas[0], []).append(key)
            for broker, keys in preferred.items():
                if broker not in self.live or broker in self.shutting_down:
                    continue
                off = [k for k in keys if (self.metadata.partition_states.get(k) is not None
                                           and self.metadata.partition_states[k].leader != broker)]
                if not off or len(off) * 100 <= imbalance_percentage * len(keys):
                    continue
                _log.info("broker {broker} leads {led} of the {total} partitions it prefers; "
                          "electing it for the others", broker=broker, led=len(keys) - len(off), total=len(keys))
                for key in off:
                    state = self.metadata.partition_states[key]
                    if broker in state.isr and key not in self.offline_replicas.get(broker, ()):
                        await self._write(key[0], key[1], state, broker, list(state.isr), new_epoch=True)

        return self.run(go)

    # --- reassignment (KIP-455) ---------------------------------------------------------

    def reassign(self, targets: dict[tuple[str, int], list[int] | None]) -> defer.Deferred:
        """
        AlterPartitionReassignments: move each partition to its target
        replicas (C{None} cancels an ongoing reassignment).  The assignment
        first becomes target + original replicas, with the new ones recorded
        as adding and the old as removing in the topic znode; new replicas
        copy the log by replication; once every target replica is in the ISR
        the leadership moves into the target if needed and the assignment
        becomes the target (L{_continue_reassignments}); brokers that are no
        longer assigned delete their logs.

        @return: a Deferred firing with C{(topic, partition) -> (ErrorCode, message | None)}.
        """
        results: dict[tuple[str, int], tuple[Any, str | None]] = {}

        async def go() -> None:
            by_topic: dict[str, dict[int, list[int] | None]] = {}
            for (topic, partition), target in targets.items():
                by_topic.setdefault(topic, {})[partition] = target
            for topic, wanted in by_topic.items():
                def apply(current: TopicAssignment, topic: str = topic,
                          wanted: dict[int, list[int] | None] = wanted) -> TopicAssignment:
                    partitions = dict(current.partitions)
                    adding = dict(current.adding_replicas)
                    removing = dict(current.removing_replicas)
                    for partition, target in wanted.items():
                        key = (topic, partition)
                        if partition not in partitions:
                            results[key] = (ErrorCode.unknown_topic_or_partition, "no such partition")
                            continue
                        if target is None:
                            if partition not in adding and partition not in removing:
                                results[key] = (ErrorCode.no_reassignment_in_progress, "no reassignment in progress")
                                continue
                            original = [r for r in partitions[partition] if r not in adding.pop(partition, [])]
                            removing.pop(partition, None)
                            partitions[partition] = original
                            results[key] = (ErrorCode.none, None)
                            continue
                        if not target or len(set(target)) != len(target) or any(r not in self.live for r in target):
                            results[key] = (ErrorCode.invalid_replica_assignment,
                                            f"target {target} must be distinct live brokers")
                            continue
                        original = [r for r in partitions[partition] if r not in adding.get(partition, [])]
                        results[key] = (ErrorCode.none, None)
                        if list(target) == original:
                            continue
                        partitions[partition] = list(target) + [r for r in original if r not in target]
                        adding[partition] = [r for r in target if r not in original]
                        removing[partition] = [r for r in original if r not in target]
                    return TopicAssignment(topic, current.topic_id, partitions, adding, removing)

                written = await self.registry.update_topic_assignment(topic, apply, self._epoch_zk_version)
                adding, removing = written.adding_replicas, written.removing_replicas
                for partition, target in wanted.items():
                    key = (topic, partition)
                    if results.get(key, (None,))[0] != ErrorCode.none:
                        continue
                    if target is None or (not adding.get(partition) and not removing.get(partition)):
                        self.reassignments.pop(key, None)
                        self._adding.pop(key, None)
                    else:
                        self.reassignments[key] = list(target)
                        self._adding[key] = list(adding.get(partition, []))
                        _log.info("reassigning {topic}-{partition} to {target}", topic=topic, partition=partition,
                                  target=target)

        d = self.run(go)
        return d.addCallback(lambda _: results)

    async def _continue_reassignments(self) -> None:
        """Finish the reassignments whose target replicas are all in sync."""
        for key, target in list(self.reassignments.items()):
            state = self.metadata.partition_states.get(key)
            if state is None or any(r not in state.isr for r in target):
                continue
            topic, partition = key
            if state.leader not in target:
                leader = controlled_shutdown_leader(target, state.isr, self._live_for(key), self.shutting_down)
                if leader < 0:
                    continue
                if not await self._write(topic, partition, state, leader, [r for r in state.isr if r in target],
                                         new_epoch=True):
                    continue  # the state changed meanwhile: the next event decides from the fresh one
            elif any(r not in target for r in state.isr):
                if not await self._write(topic, partition, state, state.leader,
                                         [r for r in state.isr if r in target], new_epoch=False):
                    continue
            await self.registry.update_topic_assignment(topic, lambda current, partition=partition, target=target: (
                TopicAssignment(topic, current.topic_id, {**current.partitions, partition: list(target)},
                                {p: r for p, r in current.adding_replicas.items() if p != partition},
                                {p: r for p, r in current.removing_replicas.items() if p != partition})),
                self._epoch_zk_version)
            del self.reassignments[key]
            self._adding.pop(key, None)
            _log.info("reassignment of {topic}-{partition} to {target} completed", topic=topic,
                      partition=partition, target=target)

    def ongoing_reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """C{(topic, partition) -> (replicas, adding, removing)} of the reassignments in progress."""
        ongoing = {}
        for key, target in self.reassignments.items():
            meta = self.metadata.topics.get(key[0])
            replicas = list(meta.partitions.get(key[1], [])) if meta is not None else []
            ongoing[key] = (replicas, list(self._adding.get(key, [])), [r for r in replicas if r not in target])
        return ongoing

    def _ensure_known(self, key: tuple[str, int]) -> None:
        """
        A partition of a topic created after this controller's activation
        enters the table as C{NewPartition} (Kafka's C{onNewPartitionCreation}),
        so that its first election is a valid transition.
        """
        if self.partition_states.state(key) == "NonExistentPartition":
            self.partition_states.move(key, "NewPartition")

    def _planned(self, key: tuple[str, int], state: Any, leader: int, isr: list[int],
                 new_epoch: bool) -> PartitionStateWrite:
        """The write of a new state over C{state} (a new leader epoch with C{new_epoch}), with its ELR."""
        self._ensure_known(key)
        epoch = state.leader_epoch + 1 if new_epoch else state.leader_epoch
        elr = self._eligible_leader_replicas(key, state, isr)
        # a replica that restarted after an unclean shutdown and stays in the ISR (elected again, its log
        # all that is left) joins it now: its previous process's place is not carried
        restarted = self.restarted_replicas.get(key, ())
        joined = [-1 if r in restarted else state.isr_join_zxid(r) for r in state.isr]
        return PartitionStateWrite(key[0], key[1], leader, epoch, list(isr), state.zk_version, elr,
                                   next_elr_isr_zxids(state.elr, state.elr_isr_zxids, state.mzxid, elr),
                                   -1 if new_epoch else state.epoch_start_zxid,
                                   next_isr_zxids(state.isr, joined, isr))

    async def _write(self, topic: str, partition: int, state: Any, leader: int, isr: list[int],
                     new_epoch: bool) -> bool:
        """
        Write a new state, fenced by C{/controller_epoch}'s version and
        conditional on C{state}'s zkVersion.  On a stale zkVersion (the leader
        changed the ISR meanwhile) the state is re-read into the cache and
        nothing is written: the caller decides again from it.

        @return: whether it was written.
        @raise ControllerMovedError: another controller was elected.
        """
        write = self._planned((topic, partition), state, leader, isr, new_epoch)
        try:
            [written] = await self.registry.set_partition_states([write], self.epoch, self._epoch_zk_version)
        except ControllerMovedError:
            raise
        except BadVersionError:
            fresh = await self.registry.get_partition_state(topic, partition)
            _log.info("{topic}-{partition}: state changed under the controller; re-read", topic=topic,
                      partition=partition)
            self.metadata.set_partition_state(topic, partition, fresh)  # None: deleted (nothing to decide)
            return False
        self._written(write, written, new_epoch)
        return True

    def _written(self, write: PartitionStateWrite, written: WrittenState, new_epoch: bool) -> None:
        """Record a state written (at znode version and C{mzxid} C{written}): the cache, the state machine, the log."""
        topic, partition, leader, epoch, isr = write.topic, write.partition, write.leader, write.leader_epoch, write.isr
        key = (topic, partition)
        self.metadata.set_partition_state(topic, partition,
                                          PartitionState(leader, epoch, list(isr), self.epoch, written.version,
                                                         written.mzxid, list(write.elr or ()),
                                                         list(write.elr_isr_zxids or ()), write.leader_epoch_zxid,
                                                         list(write.isr_zxids or ())))
        self.restarted_replicas.pop(key, None)  # written now, after every registration it knows
        self.replica_log_ends.pop(key, None)
        if new_epoch and leader < 0:
            _log.warn("{topic}-{partition}: no leader at epoch {epoch}, ISR {isr} (its leader's replica is offline)",
                      topic=topic, partition=partition, epoch=epoch, isr=isr)
        elif new_epoch:
            self.elections += 1
            self.partition_states.move(key, "OnlinePartition")
            _log.info("{topic}-{partition}: leader {leader} at epoch {epoch}, ISR {isr}", topic=topic,
                      partition=partition, leader=leader, epoch=epoch, isr=isr)
