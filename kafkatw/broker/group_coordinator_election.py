"""
Which broker coordinates a consumer group, fenced (issue 27): at most one
broker at a time acts as a group's coordinator, and a deposed coordinator's
writes fail.

Kafka's guarantee, Kafka's unit.  A group belongs to one partition of
C{__consumer_offsets} (Kafka's C{partitionFor}: C{abs(hashCode(group id)) %
50}, L{kafkatw.broker.transaction_coordinator.offsets_partition_for}); in Kafka
the leader of that partition coordinates the group and every write is an
append fenced by the partition's leader epoch.  kafkatw keeps committed
offsets in ZooKeeper (DESIGN.md D12), so the partition is an election in
ZooKeeper, and the fence is a znode version checked by the same multi that
writes the offsets::

    /group_coordinator/candidates/<broker id>  ephemeral  the brokers taking part
    /group_coordinator/holders/<partition>     ephemeral  {"version":1,"brokerid":B,"coordinator_epoch":E,...}
    /group_coordinator/epochs/<partition>      persistent E; the znode's version is E

  - A broker I{claims} a partition with one multi: create the ephemeral
    holder (fails while anyone holds it) and set the epoch znode at the version
    it read (fails if anyone claimed meanwhile); the new version is its
    coordinator epoch.  The epoch znode is never deleted, so epochs only grow,
    and an epoch belongs to the one claim that made it.
  - Every write of the holder checks the epoch znode's version in the same
    multi (L{kafkatw.zookeeper.registry.Registry.set_committed_offsets}).  A
    broker that lost its claim -- its session expired while it was cut off,
    paused, or slow to hear of it -- gets C{BadVersion}: nothing is written,
    the commit is answered C{NOT_COORDINATOR}, and the claim is dropped.
    JoinGroup and SyncGroup answers wait for such a check too
    (L{kafkatw.broker.group_coordinator.OffsetStore.confirm}).
  - A claim moves only when its holder's session ends (crash, expiry: the
    ephemeral vanishes with the broker's registration) or when the holder
    releases it: at controlled shutdown (after withdrawing its candidacy, so
    the others take over at once), or to hand it to the preferred broker.
  - The preferred holder of a partition is L{coordinator_for} over the
    candidates (rendezvous hashing, as groups were placed before): a free
    partition is claimed by its preferred candidate, and a holder that is not
    the preferred one releases it when the preferred one is a candidate, so
    the groups spread over the brokers again after a restart.  Views may
    differ for a while (a watch not fired yet): then a partition may stay
    unclaimed until they agree (clients are told C{COORDINATOR_NOT_AVAILABLE}
    and retry), but never has two holders.
  - A broker acts (answers JoinGroup, SyncGroup, Heartbeat, OffsetCommit,
    OffsetFetch...) only for the partitions it claimed in its current session
    and while connected to ZooKeeper; while C{SUSPENDED} it answers
    C{NOT_COORDINATOR} and keeps its groups, which it unloads if the session
    is C{LOST}.
  - FindCoordinator answers the holder in ZooKeeper (watched), the same
    answer from every broker.

Why not the leader of a ``__consumer_offsets`` partition, as the transaction
coordinator uses ``__transaction_state``: the offsets are written to
ZooKeeper, not to that topic, so a leader epoch would fence nothing there
without a check on the partition's state znode, whose version also moves on
every ISR change; and the topic would have to exist, replicated, before any
group could commit.  One claim znode and one epoch znode per partition fence
the very store the writes go to.

Source: Kafka C{GroupCoordinator.partitionFor}, C{onElection}/C{onResignation}
(the coordinator epoch); ZooKeeper Programmer's Guide, "Multi-update" and
"Ephemeral Nodes"; docs/consumer-groups.md.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from twisted.internet import defer
from twisted.logger import Logger

from ..zookeeper.bridge import BadVersionError, NodeExistsError, ZooKeeperError
from ..zookeeper.zk_data import GROUP_COORDINATOR_CANDIDATES_PATH, GroupCoordinatorHolder, group_coordinator_epoch_path
from .group_coordinator import Fence, coordinator_for
from .transaction_coordinator import OFFSETS_TOPIC, offsets_partition_for

__all__ = ["GroupCoordinatorElection", "OFFSETS_TOPIC_PARTITIONS", "preferred_coordinator"]

_log = Logger()

#: Kafka's C{offsets.topic.num.partitions} default: the groups are split into this many claims.
OFFSETS_TOPIC_PARTITIONS = 50


def preferred_coordinator(group_id: str, candidates: Iterable[int], partitions: int = OFFSETS_TOPIC_PARTITIONS
                          ) -> int | None:
    """
    The broker that holds C{group_id}'s partition once the elections have
    settled with these C{candidates}: L{coordinator_for} over the candidates
    for C{__consumer_offsets-<partition>}.  (The holder in ZooKeeper is the
    truth: FindCoordinator answers it.)
    """
    return coordinator_for(f"{OFFSETS_TOPIC}-{offsets_partition_for(group_id, partitions)[1]}", candidates)


class GroupCoordinatorElection:
    """
    This broker's part in the group coordinator elections (module docstring):
    its candidacy, its claims, and the holders seen in ZooKeeper.  It is the
    placement of a L{kafkatw.broker.group_coordinator.GroupCoordinator}
    (L{kafkatw.broker.group_coordinator.GroupCoordinator.use_election}).

    @param registry: a L{kafkatw.zookeeper.registry.Registry} (its C{client}'s
        session states and id are used).
    @ivar claims: partition -> the coordinator epoch this broker holds it at,
        in its current session.
    @ivar holders: partition -> L{GroupCoordinatorHolder} seen in ZooKeeper.
    @ivar candidates: the broker ids taking part.
    @ivar listeners: called with no argument whenever what this broker may
        act for changed.
    @ivar before_release: called with the L{Fence} of a claim being given
        up, after it stopped acting for it and before the holder znode is
        deleted; may return a Deferred (the group coordinator writes the
        offsets it accepted under that epoch).
    """

    def __init__(self, broker_id: int, registry: Any, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> None:
        self.broker_id = broker_id
        self.registry = registry
        self.client = registry.client
        self.partitions = partitions
        self.claims: dict[int, int] = {}
        self.holders: dict[int, GroupCoordinatorHolder] = {}
        self.candidates: frozenset[int] = frozenset()
        #: L{preferred}'s answers for the candidates they were computed among (asked for every partition at
        #: every change)
        self._preferred: tuple[frozenset[int], dict[int, int | None]] = (self.candidates, {})
        self.listeners: list[Callable[[], object]] = []
        self.before_release: Callable[[Fence], Any] | None = None
        self.connected = False
        self.running = False
        self._claiming: dict[int, defer.Deferred] = {}
        self._releasing: dict[int, defer.Deferred] = {}
        #: the holders' watch, then the candidates' (a start made again after a lost connection keeps them)
        self._watches: list[Any] = []
        self._candidacy: defer.Deferred | None = None
        self._listening = False

    # --- placement (what the group coordinator asks) ---------------------------

    def partition_for(self, group_id: str) -> int:
        """The group's C{__consumer_offsets} partition (Kafka's C{partitionFor})."""
        return offsets_partition_for(group_id, self.partitions)[1]

    def preferred(self, partition: int) -> int | None:
        """The candidate that should hold C{partition}: rendezvous hashing over the candidates."""
        among, answers = self._preferred
        if among is not self.candidates:
            among, answers = self._preferred = (self.candidates, {})
        if partition not in answers:
            answers[partition] = coordinator_for(f"{OFFSETS_TOPIC}-{partition}", among)
        return answers[partition]

    def coordinator(self, group_id: str) -> int | None:
        """The broker holding C{group_id}'s partition, as seen in ZooKeeper; C{None} while nobody does."""
        partition = self.partition_for(group_id)
        if partition in self.claims:
            return self.broker_id
        holder = self.holders.get(partition)
        return None if holder is None else holder.broker_id

    def fence(self, group_id: str) -> Fence | None:
        """The L{Fence} of this broker's claim on C{group_id}'s partition, or C{None}."""
        partition = self.partition_for(group_id)
        epoch = self.claims.get(partition)
        return None if epoch is None else Fence(group_coordinator_epoch_path(partition), epoch)

    def acting(self, group_id: str) -> Fence | None:
        """L{fence}, while this broker is running its election and connected to ZooKeeper; else C{None}."""
        return self.fence(group_id) if self.running and self.connected else None

    def fenced(self, fence: Fence) -> None:
        """A write checked C{fence} and found it moved: that claim is gone."""
        for partition, epoch in list(self.claims.items()):
            if epoch == fence.version and group_coordinator_epoch_path(partition) == fence.path:
                _log.warn("lost the group coordinator claim on {topic}-{partition} (epoch {epoch}): a newer"
                          " claim fenced it", topic=OFFSETS_TOPIC, partition=partition, epoch=epoch)
                del self.claims[partition]
                self._changed()

    # --- lifecycle ---------------------------------------------------------------

    def start(self) -> defer.Deferred:
        """
        Take part: watch the candidates and holders, become a candidate, and
        claim the free partitions this broker is preferred for.

        @return: a Deferred firing once those claims are settled (the
            partitions other brokers hold are handed over later, as they
            release them); failing with
            L{kafkatw.zookeeper.bridge.ZooKeeperUnavailableError} when the
            connection was lost, after which it may be called again (the
            broker's start does, once connected).
        """
        return defer.Deferred.fromCoroutine(self._start())

    async def _start(self) -> None:
        self.running = True
        if not self._listening:
            self._listening = True
            self.client.add_state_listener(self._state)
            self.client.on_new_session(self._new_session)
        self.connected = self.client.connected
        await self.registry.ensure_group_coordinator_paths()
        if not self._watches:
            self._watches.append(await self.registry.watch_group_coordinators(self._holders_changed))
        if len(self._watches) < 2:
            self._watches.append(await self.registry.watch_group_coordinator_candidates(self._candidates_changed))
        await self._become_candidate()
        # The candidates as ZooKeeper has them now (the watch may not have fired yet).
        names = await self.client.get_children(GROUP_COORDINATOR_CANDIDATES_PATH)
        self._candidates_changed(frozenset(int(n) for n in names if n.isdigit()))
        await self.settled()
        _log.info("group coordinator elections: broker {id} holds {count} of {total} partitions of {topic}",
                  id=self.broker_id, count=len(self.claims), total=self.partitions, topic=OFFSETS_TOPIC)

    def settled(self) -> defer.Deferred:
        """@return: a Deferred firing once the claims and releases in flight are done."""
        pending = [d for d in [*self._claiming.values(), *self._releasing.values()] if not d.called]
        return defer.DeferredList(pending, consumeErrors=True).addCallback(lambda _: None)

    def stop(self) -> defer.Deferred:
        """
        Controlled shutdown: withdraw the candidacy (the others now prefer
        each other), then release every claim, writing first what was
        accepted under it (L{before_release}).

        @return: a Deferred firing once released (or failed: the claims end
            with the session anyway).
        """

        async def go() -> None:
            self.running = False  # the watches go on: FindCoordinator answers the new holders until the end
            self._changed()
            if self.client.connected:
                try:
                    await self.registry.remove_group_coordinator_candidate(self.broker_id)
                except ZooKeeperError as e:
                    _log.warn("could not withdraw the group coordinator candidacy: {error}", error=e)
            for partition in list(self.claims):
                self._release(partition)
            await self.settled()

        return defer.Deferred.fromCoroutine(go())

    # --- ZooKeeper events ------------------------------------------------------

    def _state(self, state: str) -> None:
        if state == "CONNECTED":
            self.connected = True
        elif state == "SUSPENDED":
            self.connected = False  # the session may live on: keep the claims, stop acting
        elif state == "LOST":
            self.connected = False
            if self.claims:
                _log.warn("ZooKeeper session lost: giving up the group coordinator claims on {count} partitions",
                          count=len(self.claims))
            self.claims.clear()
        self._changed()
        self._evaluate()

    def _new_session(self) -> None:
        if self.running:
            self._candidacy = None
            d = self._become_candidate()
            d.addCallback(lambda _: self._evaluate())

    def _candidates_changed(self, candidates: frozenset[int]) -> None:
        self.candidates = candidates
        if self.running and self.connected and self.broker_id not in candidates:
            self._become_candidate()  # a previous process's candidacy ended, or ours was deleted
        self._evaluate()

    def _holders_changed(self, holders: dict[int, GroupCoordinatorHolder]) -> None:
        session = self.client.session_id
        seen = dict(holders)
        lost = False
        for partition, holder in holders.items():
            epoch = self.claims.get(partition)
            if epoch is not None:
                if holder.session_id != session and holder.coordinator_epoch > epoch:
                    _log.warn("broker {other} claimed {topic}-{partition} at epoch {new}: this broker's claim at"
                              " epoch {epoch} is gone", other=holder.broker_id, topic=OFFSETS_TOPIC,
                              partition=partition, new=holder.coordinator_epoch, epoch=epoch)
                    del self.claims[partition]
                    lost = True
            elif (holder.session_id == session and self.running and partition not in self._releasing
                  and holder.broker_id == self.broker_id):
                self.claims[partition] = holder.coordinator_epoch  # seen before the claim's answer
                lost = True
        for partition, epoch in self.claims.items():
            holder = seen.get(partition)
            if holder is None or holder.coordinator_epoch < epoch:
                # a read older than our claim
                seen[partition] = GroupCoordinatorHolder(self.broker_id, epoch, session or 0)
        self.holders = seen
        if lost:  # or gained
            self._changed()
        self._evaluate()

    # --- claims and releases -----------------------------------------------------

    def _evaluate(self) -> None:
        """Claim the free partitions this broker is preferred for; release those preferred elsewhere."""
        if not (self.running and self.connected) or self.broker_id not in self.candidates:
            return
        for partition in range(self.partitions):
            preferred = self.preferred(partition)
            if partition in self.claims:
                if preferred is not None and preferred != self.broker_id:
                    self._release(partition)
            elif (partition not in self.holders and preferred == self.broker_id
                  and partition not in self._claiming and partition not in self._releasing):
                self._claim(partition)

    def _claim(self, partition: int) -> None:
        session = self.client.session_id
        self._claiming[partition] = defer.Deferred()  # the claim's own watch events may come first
        d = self.registry.claim_group_coordinator(partition, self.broker_id)

        def claimed(epoch: int) -> None:
            if self.client.session_id != session:
                return  # the session that made it has ended, and the claim with it
            self.claims[partition] = epoch
            self.holders[partition] = GroupCoordinatorHolder(self.broker_id, epoch, session or 0)
            _log.info("coordinating the groups of {topic}-{partition} at coordinator epoch {epoch}",
                      topic=OFFSETS_TOPIC, partition=partition, epoch=epoch)
            self._changed()
            if not self.running or self.preferred(partition) not in (None, self.broker_id):
                self._release(partition)  # stopped, or a preferred broker came meanwhile

        def failed(failure: Any) -> None:
            if not failure.check(NodeExistsError, BadVersionError):  # another broker was first
                failure.trap(ZooKeeperError)
                _log.warn("claiming {topic}-{partition} failed: {error}", topic=OFFSETS_TOPIC, partition=partition,
                          error=failure.value)

        def done(_: Any) -> None:
            self._claiming.pop(partition, None)

        self._claiming[partition] = d
        d.addCallbacks(claimed, failed)
        d.addErrback(lambda f: _log.failure("claiming {partition} failed", f, partition=partition))
        d.addBoth(done)

    def _release(self, partition: int) -> None:
        if partition in self._releasing:
            return
        epoch = self.claims.pop(partition)
        fence = Fence(group_coordinator_epoch_path(partition), epoch)
        _log.info("giving up the groups of {topic}-{partition} (coordinator epoch {epoch}){reason}",
                  topic=OFFSETS_TOPIC, partition=partition, epoch=epoch,
                  reason="" if not self.running else f" to broker {self.preferred(partition)}")
        self._changed()

        async def go() -> None:
            if self.before_release is not None:
                try:
                    await defer.maybeDeferred(self.before_release, fence)
                except Exception:
                    _log.failure("writing the offsets of {partition} before releasing it failed", partition=partition)
            released = await self.registry.release_group_coordinator(partition, epoch)
            holder = self.holders.get(partition)
            if released and holder is not None and holder.coordinator_epoch == epoch:
                del self.holders[partition]

        d = defer.Deferred.fromCoroutine(go())
        d.addErrback(lambda f: _log.warn("releasing {topic}-{partition} failed: {error}", topic=OFFSETS_TOPIC,
                                         partition=partition, error=f.value))

        def done(_: Any) -> None:
            self._releasing.pop(partition, None)
            self._evaluate()

        if d.called:
            done(None)
        else:
            self._releasing[partition] = d
            d.addBoth(done)

    def _become_candidate(self) -> defer.Deferred:
        if self._candidacy is not None and not self._candidacy.called:
            return self._candidacy
        d = self.registry.add_group_coordinator_candidate(self.broker_id)

        def result(ours: bool) -> None:
            if not ours:
                _log.info("broker {id}'s previous process is still a group coordinator candidate; waiting for its"
                          " ZooKeeper session to end", id=self.broker_id)

        def failed(failure: Any) -> None:
            failure.trap(ZooKeeperError)
            _log.warn("could not become a group coordinator candidate: {error}", error=failure.value)

        d.addCallbacks(result, failed)
        self._candidacy = d
        return d

    def _changed(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                _log.failure("group coordinator placement listener failed")
