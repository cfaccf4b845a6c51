"""
One partition hosted by this broker: its log, its role, its ISR and high watermark.

Named after Kafka's C{Partition.scala}.  The partition-state znode
(C{/brokers/topics/<t>/partitions/<p>/state}: leader, leader epoch, ISR, and its
zkVersion) is the truth; L{Partition.apply_state} follows it.  A leader keeps,
per follower, the log end offset of its last fetch and the last time it was
caught up; from these it

  - advances the high watermark to the smallest log end offset of the ISR
    (consumers read below it; an acks=all produce is acknowledged once it covers
    the batch);
  - shrinks the ISR when a follower has not caught up for
    C{replica.lag.time.max.ms}, counted from its last caught-up fetch (so a
    follower that stops fetching leaves even when nothing new is written),
    and expands it when a follower reaches the high watermark and is eligible
    (its broker alive and not in controlled shutdown, KIP-841).

ISR changes are written with a conditional set on the state's zkVersion
(Kafka 2.x C{Partition.updateIsr}); while one is in flight the high watermark is
computed over the I{maximal} ISR (the current one plus any replica being added,
KIP-497), and a failed conditional set means this broker's view is stale: it
re-reads the state instead of overwriting it.  The controller writes the
same znode, conditionally on the same zkVersion, so neither undoes the other:
the write based on the older state fails and its writer re-reads.

Eligible leader replicas (KIP-966): a replica that leaves the ISR while the
ISR is smaller than C{min.insync.replicas} (capped at the replication factor)
becomes an eligible leader replica (ELR, kept in the state znode), and the
high watermark does not move while the ISR is that small, so every ELR member
holds every record below it; the controller elects an ELR member when no ISR
member is live (L{next_eligible_leader_replicas} says how the ELR follows an
ISR change; the leader and the controller both apply it).

Roles and leader epochs (KIP-101): a broker becoming leader starts the new
epoch at its log end offset in the leader-epoch cache; a broker becoming
follower hands the partition to the replica fetcher, which truncates by leader
epoch before fetching.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)

__all__ = ["Partition", "FollowerState", "LEADER", "FOLLOWER", "OFFLINE", "next_eligible_leader_replicas",
           "next_elr_isr_zxids", "next_isr_zxids"]

_log = Logger()


def next_eligible_leader_replicas(isr: list[int], elr: list[int], new_isr: list[int], min_insync_replicas: int,
                                  replicas: list[int], excluded: Any = ()) -> list[int]:
    """
    The eligible leader replicas after the ISR changes from C{isr} to
    C{new_isr} (KIP-966): none while the new ISR has at least the effective
    C{min.insync.replicas} (capped at the replication factor); otherwise the
    earlier ones and those that left the ISR now, but for ISR members,
    replicas no longer assigned and C{excluded} (a replica that restarted
    after an unclean shutdown, or whose log dir failed: its log may lack
    records below the high watermark).

    @return: the ELR, in the order of C{replicas}.
    """
    if len(new_isr) >= min(min_insync_replicas, len(replicas)):
        return []
    candidates = set(elr) | (set(isr) - set(new_isr))
    return [r for r in replicas if r in candidates and r not in new_isr and r not in excluded]


def next_elr_isr_zxids(elr: list[int], elr_isr_zxids: list[int], mzxid: int, new_elr: list[int]) -> list[int]:
    """
    Beside the eligible leader replicas C{new_elr} that a state replacing one
    written at C{mzxid} (with eligible leader replicas C{elr} and their
    C{elr_isr_zxids}) carries, the C{mzxid} of the last state that held each
    in the ISR (L{kafkatw.zookeeper.zk_data.PartitionState.elr_isr_zxids}):
    an earlier one's is kept, one that leaves the ISR now was in it at
    C{mzxid} (-1 for each when not known).
    """
    earlier = dict(zip(elr, elr_isr_zxids))
    return [earlier.get(r, -1) if r in elr else mzxid for r in new_elr]


def next_isr_zxids(isr: list[int], isr_zxids: list[int], new_isr: list[int]) -> list[int]:
    """
    Beside C{new_isr}, the zxid at which each member joined the ISR
    (L{kafkatw.zookeeper.zk_data.PartitionState.isr_zxids}), in a state
    replacing one whose members C{isr} joined at C{isr_zxids} (each its
    L{kafkatw.zookeeper.zk_data.PartitionState.isr_join_zxid}): a member that
    stays keeps its zxid, one that joins now has -1 (the new state's own).
    """
    earlier = dict(zip(isr, isr_zxids))
    return [earlier.get(r, -1) for r in new_isr]


LEADER = "leader"
FOLLOWER = "follower"
OFFLINE = "offline"  # hosted, but the partition has no leader (or we were told nothing yet)


class FollowerState:
    """
    What a leader knows of one follower.

    @ivar log_end_offset: the fetch offset of its last fetch (-1: none yet).
    @ivar last_caught_up_ms: the last time its fetch reached the leader's log
        end offset as it was at the follower's previous fetch (Kafka's
        C{lastCaughtUpTimeMs}).
    """

    __slots__ = ("log_end_offset", "last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms", "log_start_offset")

    def __init__(self, now_ms: int) -> None:
        self.log_end_offset = -1
        #: the follower's log start offset from its last fetch (-1: not known yet)
        self.log_start_offset = -1
        self.last_caught_up_ms = now_ms
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = now_ms

    def update(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = now_ms
        elif fetch_offset >= self.last_fetch_leader_leo >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms


class Partition:
    """
    A partition this broker holds a replica of.

    @param log: its L{kafkatw.storage.log.PartitionLog}.
    @param write_isr: C{write_isr(partition, new_isr, new_elr, new_elr_isr_zxids, new_isr_zxids) -> Deferred}
        (the new eligible leader replicas with it, L{next_elr_isr_zxids} beside them, and
        L{next_isr_zxids} beside the new ISR) firing with
        the new zkVersion (raises C{BadVersionError} when the state changed);
        see L{kafkatw.broker.replica_manager.ReplicaManager}.
    @param on_high_watermark: C{on_high_watermark(partition)} after the high
        watermark moved (wakes delayed produces and consumer fetches).
    @param reload_state: C{reload_state(partition)} after a failed ISR write.
    @param is_isr_eligible: C{is_isr_eligible(broker_id)}: whether a follower
        on that broker may join the ISR (alive and not in controlled shutdown:
        L{kafkatw.broker.metadata_cache.MetadataCache.is_replica_isr_eligible});
        every follower when not given.

    @ivar role: L{LEADER}, L{FOLLOWER} or L{OFFLINE}.
    @ivar leader_id: the leader's broker id (-1: none).
    @ivar leader_epoch: the epoch of the state last applied (-1: none).
    @ivar isr: the in-sync replicas, as in ZooKeeper.
    @ivar zk_version: the state znode's version last seen.
    @ivar zk_mzxid: the C{mzxid} of that version (-1: not known yet, as after
        this leader's own write until its watch reads it back).
    @ivar isr_zxids: beside C{isr}, the zxid at which each member joined the
        ISR (-1: not known yet, as for a member this leader's write took in
        until its watch reads the write back).
    @ivar leader_epoch_zxid: the zxid at which the leader epoch began
        (L{kafkatw.zookeeper.zk_data.PartitionState.epoch_start_zxid}; -1: not
        known), which this leader's ISR changes carry.
    @ivar replicas: the assigned replicas (preferred leader first).
    """

    def __init__(self, topic: str, partition: int, broker_id: int, log: Any,
                 now_ms: Callable[[], int],
                 write_isr: Callable[["Partition", list[int], list[int], list[int]], defer.Deferred],
                 on_high_watermark: Callable[["Partition"], None],
                 reload_state: Callable[["Partition"], None],
                 is_isr_eligible: Callable[[int], bool] | None = None,
                 min_insync_replicas: Callable[[], int] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self.now_ms = now_ms
        self._write_isr = write_isr
        self._on_high_watermark = on_high_watermark
        self._reload_state = reload_state
        self._is_isr_eligible = is_isr_eligible or (lambda broker_id: True)
        self._min_insync_replicas = min_insync_replicas or (lambda: 1)
        self.role = OFFLINE
        self.leader_id = -1
        self.leader_epoch = -1
        self.controller_epoch = 0
        self.isr: list[int] = []
        #: the eligible leader replicas (KIP-966), as the state says
        self.elr: list[int] = []
        #: beside C{elr}, the C{mzxid} of the last state that held each in the ISR (-1: not known)
        self.elr_isr_zxids: list[int] = []
        self.zk_version = -1
        self.zk_mzxid = -1
        self.isr_zxids: list[int] = []
        self.leader_epoch_zxid = -1
        self.replicas: list[int] = []
        self.followers: dict[int, FollowerState] = {}
        self._pending_isr: list[int] | None = None
        #: The log end offset when this broker last became leader (the start of its epoch).
        self.epoch_start_offset = 0
        #: Counters read by the metrics (Kafka's IsrShrinksPerSec / IsrExpandsPerSec).
        self.isr_shrinks = 0
        self.isr_expands = 0
        #: DeleteRecords waiting for the low watermark: C{(offset, Deferred)} (Kafka's DelayedDeleteRecords)
        self.low_watermark_waiters: list[tuple[int, defer.Deferred]] = []

    def __repr__(self) -> str:
        return (f"<Partition {self.topic}-{self.partition} {self.role} leader={self.leader_id} "
                f"epoch={self.leader_epoch} isr={self.isr}>")

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def is_leader(self) -> bool:
        return self.role == LEADER

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR plus replicas an in-flight ISR change adds (KIP-497)."""
        if self._pending_isr is None:
            return self.isr
        return self.isr + [r for r in self._pending_isr if r not in self.isr]

    @property
    def under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.replicas)

    # --- following the partition-state znode -----------------------------------

    def apply_state(self, replicas: list[int], leader: int, leader_epoch: int, isr: list[int], zk_version: int,
                    controller_epoch: int = 0, elr: list[int] | None = None, elr_isr_zxids: list[int] | None = None,
                    mzxid: int = -1, leader_epoch_zxid: int = -1, isr_zxids: list[int] | None = None) -> str | None:
        """
        Follow a partition state read from ZooKeeper, for a partition assigned
        C{replicas}.  As leader, ISR members no longer assigned (a reassignment
        removed them while an ISR change was in flight) are dropped at once:
        they would hold the high watermark back for ever.  C{leader_epoch_zxid}
        is the state's L{kafkatw.zookeeper.zk_data.PartitionState.epoch_start_zxid},
        C{isr_zxids} its members' L{kafkatw.zookeeper.zk_data.PartitionState.isr_join_zxid}.

        @return: C{"leader"} or C{"follower"} when this broker's role or the
            leader epoch changed (the caller starts or restarts fetching),
            C{None} when only the ISR or nothing changed, C{"offline"} when the
            partition lost its leader.
        """
        change = self._apply_state(replicas, leader, leader_epoch, isr, zk_version, controller_epoch, elr or [],
                                   elr_isr_zxids or [], mzxid, leader_epoch_zxid,
                                   isr_zxids if isr_zxids is not None else [-1] * len(isr))
        if self.role == LEADER and self._pending_isr is None and any(r not in self.replicas for r in self.isr):
            self._change_isr([r for r in self.isr if r in self.replicas], "shrink")
        self._check_low_watermark()  # an ISR shrink may complete a DeleteRecords; lost leadership fails it
        return change

    def _apply_state(self, replicas: list[int], leader: int, leader_epoch: int, isr: list[int], zk_version: int,
                     controller_epoch: int, elr: list[int], elr_isr_zxids: list[int], mzxid: int,
                     leader_epoch_zxid: int, isr_zxids: list[int]) -> str | None:
        self.replicas = list(replicas)
        if leader_epoch < self.leader_epoch:
            return None  # an older state delivered late
        if leader_epoch == self.leader_epoch and zk_version <= self.zk_version:
            if zk_version == self.zk_version and mzxid >= 0:
                self.zk_mzxid = mzxid  # this leader's own write, read back through its watch
                if self.leader_epoch_zxid < 0:
                    self.leader_epoch_zxid = leader_epoch_zxid
                self.isr_zxids = [z if z >= 0 else mzxid for z in self.isr_zxids]  # members it took in
            return None
        epoch_changed = leader_epoch != self.leader_epoch
        self.isr = list(isr)
        self.isr_zxids = list(isr_zxids)
        self.elr = list(elr)
        self.elr_isr_zxids = list(elr_isr_zxids)
        self.zk_version = zk_version
        self.zk_mzxid = mzxid
        if epoch_changed or self.leader_epoch_zxid < 0:  # else the start it knows (a later ISR change's may not)
            self.leader_epoch_zxid = leader_epoch_zxid
        self.controller_epoch = controller_epoch
        self._pending_isr = None
        if not epoch_changed and self.leader_id == leader:
            if self.is_leader:
                self.maybe_advance_high_watermark()
            return None
        self.leader_epoch = leader_epoch
        self.leader_id = leader
        if leader == self.broker_id:
            self._become_leader()
            return LEADER
        if leader < 0:
            self.role = OFFLINE
            self.followers = {}
            return OFFLINE
        self.role = FOLLOWER
        self.followers = {}
        return FOLLOWER

    def _become_leader(self) -> None:
        self.role = LEADER
        self.log.maybe_assign_epoch_start_offset(self.leader_epoch, self.log.log_end_offset)
        self.epoch_start_offset = self.log.log_end_offset
        now = self.now_ms()
        self.followers = {r: FollowerState(now) for r in self.replicas if r != self.broker_id}
        _log.info("{partition}: leader at epoch {epoch} from offset {offset}, ISR {isr}",
                  partition=self.name, epoch=self.leader_epoch, offset=self.log_end_offset, isr=self.isr)
        self.maybe_advance_high_watermark()

    def go_offline(self) -> None:
        """
        The log directory holding this replica failed (KIP-112): it neither
        leads nor follows from now on (the high watermark stays, no ISR
        change is written), and DeleteRecords waiting on it fail.  The
        replica manager stops applying states to it.
        """
        self.role = OFFLINE
        self.followers = {}
        self._check_low_watermark()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # --- leader: checks -----------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """
        KIP-320: a request that names the leader epoch it knows.

        @raise FencedLeaderEpochError: the request's epoch is older than ours.
        @raise UnknownLeaderEpochError: the request's epoch is newer than ours.
        """
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{self.name}: leader epoch {current_leader_epoch} < {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(f"{self.name}: leader epoch {current_leader_epoch} > {self.leader_epoch}")

    def leader_log(self) -> Any:
        """@raise NotLeaderOrFollowerError: this broker does not lead the partition."""
        if self.role != LEADER:
            raise NotLeaderOrFollowerError(f"{self.name}: broker {self.broker_id} is not its leader")
        return self.log

    def check_min_isr(self, min_insync_replicas: int) -> None:
        """
        Before an acks=all append.

        @raise NotEnoughReplicasError: the ISR is smaller than C{min.insync.replicas}.
        """
        if len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.name}: ISR {self.isr} is smaller than min.insync.replicas={min_insync_replicas}")

    # --- leader: appends and the high watermark -----------------------------------

    def append_as_leader(self, records: bytes, min_insync_replicas: int | None = None, write: bool = True) -> Any:
        """
        Append a produce request's batches.

        @param min_insync_replicas: for acks=all, the ISR size required.
        @param write: C{False}: the log's write waits for
            C{log.write_pending()} (L{kafkatw.storage.log.PartitionLog.append}),
            and so does the high watermark: call
            L{maybe_advance_high_watermark} after it.
        @return: the log's C{AppendResult}.
        @raise KafkaError: L{NotLeaderOrFollowerError}, L{NotEnoughReplicasError},
            or the log's validation errors.
        """
        if self.role != LEADER:
            raise NotLeaderOrFollowerError(f"{self.name}: broker {self.broker_id} is not its leader")
        if min_insync_replicas is not None:
            self.check_min_isr(min_insync_replicas)
        result = self.log.append(records, self.leader_epoch, False, write)
        if write and not result.duplicate:
            self.maybe_advance_high_watermark()
        return result

    def append_many_as_leader(self, records_list: list) -> list:
        """
        L{append_as_leader} with C{write=False} for several requests' batches
        (L{kafkatw.storage.log.PartitionLog.append_many}).

        @return: one C{AppendResult} or C{KafkaError} per item.
        @raise NotLeaderOrFollowerError: this broker does not lead the partition.
        """
        if self.role != LEADER:
            raise NotLeaderOrFollowerError(f"{self.name}: broker {self.broker_id} is not its leader")
        return self.log.append_many(records_list, self.leader_epoch)

    def high_watermark_stalled(self, min_insync_replicas: int | None = None) -> bool:
        """
        Whether the ISR is too small for the high watermark to move (KIP-966):
        short of every replica and of C{min.insync.replicas} (the topic's,
        looked up only for a partial ISR, unless given).
        """
        isr_size = len(self.isr)
        if isr_size >= len(self.replicas):
            return False
        return isr_size < (self._min_insync_replicas() if min_insync_replicas is None else min_insync_replicas)

    def maybe_advance_high_watermark(self) -> bool:
        """
        High watermark = the smallest log end offset in the (maximal) ISR,
        moving only while the ISR has at least the effective
        C{min.insync.replicas} (KIP-966: the eligible leader replicas hold
        everything below it).

        @return: whether it moved (listeners were told).
        """
        if self.role != LEADER:
            return False
        if self.high_watermark_stalled():
            return False
        low = self.log.log_end_offset
        if self._pending_isr is None and self.isr == [self.broker_id]:
            # An ISR of one: the high watermark is the log end offset.
            if low > self.log.high_watermark and self.log.update_high_watermark(low):
                self._on_high_watermark(self)
                return True
            return False
        for replica in self.maximal_isr:
            if replica == self.broker_id:
                continue
            state = self.followers.get(replica)
            if state is None or state.log_end_offset < 0:
                return False  # not heard from since we became leader
            if state.log_end_offset < low:
                low = state.log_end_offset
        if low > self.log.high_watermark and self.log.update_high_watermark(low):
            self._on_high_watermark(self)
            return True
        return False

    def enough_replicas_reached(self, required_offset: int, min_insync_replicas: int) -> tuple[bool, Exception | None]:
        """
        Whether an acks=all append ending before C{required_offset} is done
        (Kafka's C{checkEnoughReplicasReachOffset}).

        @return: C{(done, error)}: not done yet; done; or done with an error
            (L{NotLeaderOrFollowerError}, or C{NOT_ENOUGH_REPLICAS_AFTER_APPEND}
            when the ISR shrank below C{min.insync.replicas} meanwhile: at
            once when the append is not below the high watermark yet, which
            then does not move).
        """
        if self.role != LEADER:
            return True, NotLeaderOrFollowerError(f"{self.name}: leadership moved")
        if self.log.high_watermark >= required_offset:
            if len(self.isr) < min_insync_replicas:
                return True, NotEnoughReplicasAfterAppendError(
                    f"{self.name}: ISR {self.isr} shrank below min.insync.replicas={min_insync_replicas}")
            return True, None
        if self.high_watermark_stalled(min_insync_replicas):
            # the high watermark does not move while the ISR is this small (KIP-966): say so now
            return True, NotEnoughReplicasAfterAppendError(
                f"{self.name}: ISR {self.isr} shrank below min.insync.replicas={min_insync_replicas}")
        return False, None

    # --- leader: followers' fetches and the ISR -----------------------------------

    @property
    def low_watermark(self) -> int:
        """
        The lowest log start offset of this leader's replica and of the
        followers in the ISR, as they last reported it in a fetch (Kafka's
        C{lowWatermarkIfLeader}; -1 while a follower has not reported one).
        """
        starts = [self.log.log_start_offset]
        for replica in self.isr:
            if replica != self.broker_id:
                state = self.followers.get(replica)
                starts.append(state.log_start_offset if state is not None else -1)
        return min(starts)

    def wait_for_low_watermark(self, offset: int) -> defer.Deferred:
        """
        A Deferred firing with the low watermark once it reaches C{offset}
        (at once when it has), or failing with L{NotLeaderOrFollowerError}
        when leadership moves first.  The caller adds its own timeout.
        """
        low = self.low_watermark
        if low >= offset:
            return defer.succeed(low)
        d: defer.Deferred = defer.Deferred(lambda d: self._drop_waiter(d))
        self.low_watermark_waiters.append((offset, d))
        return d

    def _drop_waiter(self, d: defer.Deferred) -> None:
        self.low_watermark_waiters = [w for w in self.low_watermark_waiters if w[1] is not d]

    def _check_low_watermark(self) -> None:
        waiters = self.low_watermark_waiters
        if not waiters:
            return
        if self.role != LEADER:
            self.low_watermark_waiters = []
            for _, d in waiters:
                d.errback(NotLeaderOrFollowerError(f"{self.name}: leadership moved"))
            return
        low = self.low_watermark
        self.low_watermark_waiters = [w for w in waiters if w[0] > low]
        for offset, d in waiters:
            if offset <= low:
                d.callback(low)

    def update_follower(self, replica_id: int, fetch_offset: int, log_start_offset: int = -1) -> None:
        """
        A follower fetched from C{fetch_offset}: it holds everything below it.
        May expand the ISR and advance the high watermark.  The ISR takes a
        follower that reached the high watermark and the start of this
        leader's epoch, and only while its broker is eligible (alive and not
        in controlled shutdown, Kafka's C{canAddReplicaToIsr}): a last fetch of
        a broker that is stopping must not put it back into an ISR the
        controller takes it out of.  Its
        C{log_start_offset} (fetch v5+) moves the low watermark that
        DeleteRecords waits for.

        An ISR member fetching below the high watermark leaves the ISR at
        once: it held everything below it (it counted for it, or joined the
        ISR at or above it), and fetch offsets only go back when a log lost
        records: an unclean restart that lost what was not flushed, a
        replaced disk (truncation by leader epoch stops at or above the high
        watermark).  Kept in the ISR while it catches up, it would be
        electable with a log missing acknowledged records, as before KIP-903
        in Kafka (whose broker epochs in Fetch and AlterPartition close the
        same hole); it rejoins once it reaches the high watermark again.
        """
        if self.role != LEADER:
            return
        if replica_id not in self.replicas:
            # no longer assigned (a reassignment removed it): it must not rejoin the ISR
            self.followers.pop(replica_id, None)
            return
        state = self.followers.get(replica_id)
        if state is None:
            state = self.followers[replica_id] = FollowerState(self.now_ms())
        state.update(fetch_offset, self.log.log_end_offset, self.now_ms())
        if log_start_offset >= 0:
            state.log_start_offset = log_start_offset
            self._check_low_watermark()
        if fetch_offset < self.log.high_watermark and replica_id in self.isr and self._pending_isr is None:
            _log.warn("{partition}: ISR member {replica} fetches from {offset}, below the high watermark {hw}: its"
                      " log lost acknowledged records (an unclean restart); it leaves the ISR until it has caught up",
                      partition=self.name, replica=replica_id, offset=fetch_offset, hw=self.log.high_watermark)
            self._change_isr([r for r in self.isr if r != replica_id], "shrink")
            return
        if replica_id not in self.isr and self._pending_isr is None and \
                fetch_offset >= self.log.high_watermark and \
                fetch_offset >= self.epoch_start_offset and self._is_isr_eligible(replica_id):
            self._change_isr(self.isr + [replica_id], "expand")
        self.maybe_advance_high_watermark()

    def out_of_sync_replicas(self, max_lag_ms: int) -> list[int]:
        """
        ISR followers not caught up for more than C{max_lag_ms}
        (C{replica.lag.time.max.ms}), measured from the last fetch that found
        them caught up (L{FollowerState.last_caught_up_ms}) -- whether or not
        the leader's log grew since: a follower that stopped fetching is out of
        sync after C{max_lag_ms} even when nothing was written meanwhile, and
        an ISR member not heard from since this broker became leader counts
        from then.
        """
        now = self.now_ms()
        lagging = []
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            state = self.followers.get(replica)
            if state is None:
                state = self.followers[replica] = FollowerState(now)
            if now - state.last_caught_up_ms > max_lag_ms:
                lagging.append(replica)
        return lagging

    def maybe_shrink_isr(self, max_lag_ms: int) -> None:
        """Drop followers lagging longer than C{replica.lag.time.max.ms} from the ISR."""
        if self.role != LEADER or self._pending_isr is not None:
            return
        lagging = self.out_of_sync_replicas(max_lag_ms)
        if lagging:
            self._change_isr([r for r in self.isr if r not in lagging], "shrink")

    def eligible_leader_replicas_after(self, new_isr: list[int]) -> list[int]:
        """The ELR an ISR change to C{new_isr} writes (L{next_eligible_leader_replicas})."""
        return next_eligible_leader_replicas(self.isr, self.elr, new_isr, self._min_insync_replicas(), self.replicas)

    def _change_isr(self, new_isr: list[int], kind: str) -> None:
        self._pending_isr = new_isr
        new_elr = self.eligible_leader_replicas_after(new_isr)
        new_elr_isr_zxids = next_elr_isr_zxids(self.elr, self.elr_isr_zxids, self.zk_mzxid, new_elr)
        new_isr_zxids = next_isr_zxids(self.isr, self.isr_zxids, new_isr)
        epoch, version = self.leader_epoch, self.zk_version
        _log.info("{partition}: {kind} ISR {old} -> {new}{elr}", partition=self.name, kind=kind, old=self.isr,
                  new=new_isr, elr=f", eligible leader replicas {new_elr}" if new_elr or self.elr else "")
        d = self._write_isr(self, new_isr, new_elr, new_elr_isr_zxids, new_isr_zxids)

        def written(new_version: int) -> None:
            if self.leader_epoch != epoch or self.zk_version not in (version, new_version):
                return  # a newer state arrived meanwhile (our own write, seen first through the watch, is not)
            if self.zk_version != new_version:
                self.zk_mzxid = -1  # until the watch reads the write back
                self.isr_zxids = new_isr_zxids  # (read back first: with the joins' zxid known)
            self.isr = new_isr
            self.elr = new_elr
            self.elr_isr_zxids = new_elr_isr_zxids
            self.zk_version = new_version
            self._pending_isr = None
            if kind == "shrink":
                self.isr_shrinks += 1
            else:
                self.isr_expands += 1
            self.maybe_advance_high_watermark()
            # a smaller ISR can complete waiting produces (or fail them on min ISR)
            self._on_high_watermark(self)

        def failed(failure: Any) -> None:
            self._pending_isr = None
            _log.warn("{partition}: ISR change to {new} not written ({error}); re-reading the state",
                      partition=self.name, new=new_isr, error=failure.getErrorMessage())
            self._reload_state(self)

        d.addCallbacks(written, failed)
