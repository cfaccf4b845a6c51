"""
The partitions this broker holds replicas of: appends, reads, and the purgatories.

Named after Kafka's C{ReplicaManager}.  Each hosted partition is a
L{kafkatw.broker.partition.Partition}, which follows the partition-state znode
(L{ReplicaManager.apply_state}); as a follower it is fetched by the
L{kafkatw.broker.replica_fetcher.ReplicaFetcherManager}.

Two purgatories, woken by events, never by polling:

  - the fetch purgatory (Kafka's C{DelayedFetch}): a fetch that finds fewer
    than C{min_bytes} registers on each partition it reads.  A follower's fetch
    is woken by appends to the leader's log; a consumer's fetch by the high
    watermark moving (consumers read only below it).
  - the produce purgatory (Kafka's C{DelayedProduce}): an acks=all produce
    waits until the high watermark of every partition it wrote covers its
    batches, i.e. every ISR member has them, or times out with
    C{REQUEST_TIMED_OUT}.

A storage error of a log operation (a write, a flush, a follower's append)
takes the log's directory offline (KIP-112, L{ReplicaManager.handle_log_dir_failure}):
its partitions stop being served here at once -- their waiting produces and
fetches are answered, later requests get C{KAFKA_STORAGE_ERROR}, their
fetchers stop -- and the broker tells the controller
(L{log_dir_failure_listeners}), which moves their leaderships elsewhere.

A broker whose process starts after an unclean shutdown (a crash) may have
lost records it had not flushed, records its followers hold and acknowledged.
It leads no partition at a state written for its previous process
(L{ReplicaManager.fence_leadership}): until it has registered, every state
that names it leader is withheld; then only states whose leader epoch began,
and whose ISR it joined, after its registration make it leader (the zxids of
L{kafkatw.zookeeper.zk_data.PartitionState.epoch_start_zxid} and
L{kafkatw.zookeeper.zk_data.PartitionState.isr_join_zxid} above its broker
epoch, the registration's C{czxid}, KIP-380: a state written since, by a
controller or leader that had not heard of the restart, does not make the
previous process's leadership or ISR place its own).  The controller writes
such a state for each of those partitions (L{kafkatw.broker.controller}):
another ISR member leads at a new epoch, or it does when it is the only one
left (and joins the ISR anew).  A partition
whose only replica is this broker's has nothing better to elect: it leads it
at once, as after a clean shutdown.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    kafka_error,
)
from ..storage.log_dir_failure import OpenFilesLimitError
from .partition import FOLLOWER, LEADER, OFFLINE, Partition

__all__ = ["ReplicaManager", "Purgatory", "DelayedOperation", "DelayedFetch", "DelayedProduce"]

_log = Logger()


class Purgatory:
    """
    Operations waiting on partitions (Kafka's C{DelayedOperationPurgatory}):
    each L{DelayedOperation} watches the keys it was made for until it completes.
    """

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, int], set["DelayedOperation"]] = {}

    def watch(self, operation: "DelayedOperation") -> None:
        for key in operation.keys:
            self._by_key.setdefault(key, set()).add(operation)

    def unwatch(self, operation: "DelayedOperation") -> None:
        for key in operation.keys:
            waiting = self._by_key.get(key)
            if waiting is not None:
                waiting.discard(operation)
                if not waiting:
                    del self._by_key[key]

    def watching(self, key: tuple[str, int]) -> list["DelayedOperation"]:
        """The operations waiting on C{key} (a copy: completing one changes the set)."""
        waiting = self._by_key.get(key)
        return list(waiting) if waiting else []

    def operations(self) -> set["DelayedOperation"]:
        return {operation for waiting in self._by_key.values() for operation in waiting}

    def __len__(self) -> int:
        return len(self.operations())

    def __bool__(self) -> bool:
        """Whether any operation waits (cheaper than C{len})."""
        return bool(self._by_key)


class DelayedOperation:
    """
    A request waiting in a L{Purgatory} (Kafka's C{DelayedOperation}): it
    completes once, by L{complete} or when C{timeout_ms} expires.

    @ivar deferred: fires with L{result} when it completes.
    """

    def __init__(self, purgatory: Purgatory, keys: list[tuple[str, int]], timeout_ms: int, reactor: Any) -> None:
        self.purgatory = purgatory
        self.keys = list(keys)
        self.deferred: defer.Deferred = defer.Deferred()
        self.done = False
        self._timer = reactor.callLater(timeout_ms / 1000.0, self.expire)
        purgatory.watch(self)

    def expire(self) -> None:
        self.complete()

    def result(self) -> Any:
        return None

    def complete(self) -> None:
        if self.done:
            return
        self.done = True
        if self._timer.active():
            self._timer.cancel()
        self.purgatory.unwatch(self)
        self.deferred.callback(self.result())


class DelayedFetch(DelayedOperation):
    """
    A fetch waiting for C{min_bytes} of new data or for its timeout; its
    Deferred fires with C{None}.

    @ivar replica: a follower's fetch (woken by appends) rather than a
        consumer's (woken by the high watermark).
    @ivar stable_offsets: a read-committed consumer's fetch: C{(topic,
        partition)} -> the last stable offset it read up to; it is woken only
        when a partition's LSO passes that (not by uncommitted data).
    """

    def __init__(self, purgatory: Purgatory, partitions: list[tuple[str, int]], min_bytes: int,
                 accumulated_bytes: int, max_wait_ms: int, reactor: Any, replica: bool = False,
                 stable_offsets: dict[tuple[str, int], int] | None = None) -> None:
        self.min_bytes = min_bytes
        self.accumulated_bytes = accumulated_bytes
        self.replica = replica
        self.stable_offsets = stable_offsets
        super().__init__(purgatory, partitions, max_wait_ms, reactor)

    def on_append(self, size_bytes: int) -> None:
        self.accumulated_bytes += size_bytes
        if self.accumulated_bytes >= self.min_bytes:
            self.complete()


class DelayedProduce(DelayedOperation):
    """
    An acks=all produce waiting for its partitions' high watermarks.

    @ivar required: C{(topic, partition)} -> the offset the high watermark must reach.
    @ivar errors: C{(topic, partition)} -> the error it ended with (C{None}: ok);
        the Deferred fires with it once every partition is done or at the timeout.
    """

    def __init__(self, manager: "ReplicaManager", required: dict[tuple[str, int], int], timeout_ms: int,
                 reactor: Any) -> None:
        self.manager = manager
        self.required = dict(required)
        self.errors: dict[tuple[str, int], KafkaError | None] = {}
        super().__init__(manager.produce_purgatory, list(required), timeout_ms, reactor)

    def check(self) -> None:
        for tp, offset in self.required.items():
            if tp in self.errors:
                continue
            partition = self.manager.partitions.get(tp)
            if partition is None:
                offline = self.manager.offline_partitions.get(tp)
                self.errors[tp] = NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]} is no longer hosted here") \
                    if offline is None else KafkaStorageError(f"{tp[0]}-{tp[1]} is in the offline log dir {offline}")
                continue
            done, error = partition.enough_replicas_reached(offset, self.manager.min_insync_replicas(tp[0]))
            if done:
                self.errors[tp] = error
        if len(self.errors) == len(self.required):
            self.complete()

    def expire(self) -> None:
        for tp in self.required:
            self.errors.setdefault(tp, kafka_error(ErrorCode.request_timed_out,
                                                   "not every in-sync replica acknowledged in time"))
        self.complete()

    def result(self) -> dict:
        return self.errors


class ReplicaManager:
    """
    The hosted partitions and their purgatories.

    @param log_manager: a L{kafkatw.storage.log_manager.LogManager}.
    @param metadata: the L{kafkatw.broker.metadata_cache.MetadataCache}.
    @param topic_config: C{topic_config(topic) -> dict} of effective topic configs.
    @param write_isr: C{write_isr(topic, partition, leader, leader_epoch, isr,
        controller_epoch, expected_version[, elr=, elr_isr_zxids=][, leader_epoch_zxid=][, isr_zxids=]) -> Deferred}
        of the new zkVersion (L{kafkatw.zookeeper.registry.Registry.set_partition_state}).
    @param reload_state: C{reload_state(topic, partition)} re-reads a
        partition's state from ZooKeeper and applies it.
    @param now_ms: the reactor's time in ms (the broker's C{hi_res_clock_ms}, not the wall
        clock): the followers' fetch and caught-up times, their lag for the ISR.

    @ivar partitions: C{(topic, partition)} -> L{Partition}.
    @ivar fetcher_manager: set by the broker (None in unit tests): told which
        partitions to follow from which leader.
    @ivar offline_partitions: C{(topic, partition)} -> the failed log
        directory its replica was in (Kafka's C{HostedPartition.Offline}):
        not served here until the broker restarts.
    """

    def __init__(self, broker_id: int, log_manager: Any, metadata: Any, reactor: Any,
                 topic_config: Callable[[str], dict], write_isr: Callable[..., defer.Deferred] | None = None,
                 reload_state: Callable[[str, int], Any] | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.metadata = metadata
        self.reactor = reactor
        self.topic_config = topic_config
        self._write_isr = write_isr
        self._reload_state = reload_state
        self.now_ms = now_ms or (lambda: int(reactor.seconds() * 1000))
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetcher_manager: Any = None
        #: set by the broker: moves replicas between log dirs (L{kafkatw.broker.replica_alter_log_dirs})
        self.alter_log_dirs_manager: Any = None
        self.fetch_purgatory = Purgatory()
        self.produce_purgatory = Purgatory()
        #: (topic, partition) -> [partition, bytes appended] of appends made with write=False (L{write_pending})
        self._unwritten: dict[tuple[str, int], list] = {}
        #: C{listener(topic, partition, role, leader_epoch)} after this broker's
        #: role of a partition changed (role C{"leader"}, C{"follower"} or
        #: C{"offline"}; leader epoch None when the partition is no longer
        #: hosted): the transaction coordinator follows its partitions so.
        self.leadership_listeners: list[Callable[[str, int, str, int | None], None]] = []
        self.offline_partitions: dict[tuple[str, int], str] = {}
        #: C{listener(log_dir, message)} after a log directory failed and its
        #: partitions went offline here, or (C{log_dir} C{""}) a replica's log
        #: was refused for want of file descriptors (L{OpenFilesLimitError}):
        #: the broker tells the controller.
        self.log_dir_failure_listeners: list[Callable[[str, str], object]] = []
        #: after an unclean shutdown (L{fence_leadership}): whether states naming this broker
        #: leader are checked, and its broker epoch once registered (None before)
        self._fenced = False
        self._broker_epoch: int | None = None
        #: the partitions whose leadership is withheld: C{(topic, partition)} -> the state
        self.withheld_leaderships: dict[tuple[str, int], Any] = {}
        channel = getattr(log_manager, "failure_channel", None)
        if channel is not None:
            channel.add_listener(self.handle_log_dir_failure)
            # log dirs that failed while the logs were loading: their partitions are offline from the start
            for log_dir in channel.offline:
                for key in log_manager.offline_partitions.get(log_dir, []):
                    self.offline_partitions[key] = log_dir

    # --- partitions ---------------------------------------------------------------

    def min_insync_replicas(self, topic: str) -> int:
        return int(self.topic_config(topic).get("min.insync.replicas", 1))

    def local_log_end(self, topic: str, partition: int) -> tuple[int, int]:
        """
        This broker's replica's latest leader epoch (-1: none) and log end
        offset, whatever its role (leader, follower, or a leadership withheld
        after an unclean shutdown): what the controller's unclean recovery
        compares (KIP-966).

        @raise KafkaStorageError: the replica is in a failed log dir.
        @raise NotLeaderOrFollowerError: this broker holds no replica of it.
        @raise UnknownTopicOrPartitionError: no such topic or partition.
        """
        log = None if (topic, partition) in self.offline_partitions else self.log_manager.get(topic, partition)
        if log is None:
            self.get_partition(topic, partition)  # raises why: an offline log dir, no such partition
            raise NotLeaderOrFollowerError()
        return log.latest_epoch, log.log_end_offset

    def get_partition(self, topic: str, partition: int) -> Partition:
        """
        @raise UnknownTopicOrPartitionError: no such topic or partition.
        @raise NotLeaderOrFollowerError: it exists but this broker holds no replica.
        """
        found = self.partitions.get((topic, partition))
        if found is not None:
            return found
        offline = self.offline_partitions.get((topic, partition))
        if offline is not None:
            raise KafkaStorageError(f"{topic}-{partition} is in the offline log dir {offline}")
        meta = self.metadata.topics.get(topic)
        if meta is None or partition not in meta.partitions:
            raise UnknownTopicOrPartitionError()
        raise NotLeaderOrFollowerError()

    def leader_partition(self, topic: str, partition: int) -> Partition:
        """@raise KafkaError: as L{get_partition}, and when this broker does not lead it."""
        found = self.get_partition(topic, partition)
        if found.role != LEADER:
            raise NotLeaderOrFollowerError()
        return found

    def _partition(self, topic: str, partition: int, state: Any = None) -> Partition | None:
        """
        The hosted partition, its log opened or created; C{None}: it is
        offline here, or undecided.  While a log dir is offline, a replica
        whose log is in no live log dir may have its data in the offline
        one (Kafka's C{LogManager.getOrCreateLog} refuses to create the log
        of a partition that is not new then): with no C{state} yet nothing
        is created; when C{state} lists this broker in the ISR (or as the
        leader) the replica is offline here -- an empty new log must never
        count as in sync -- and the controller is told; otherwise its log is
        created new and it catches up as a follower.
        """
        key = (topic, partition)
        found = self.partitions.get(key)
        if found is None:
            if key in self.offline_partitions:
                return None
            log = self.log_manager.get(topic, partition)
            offline_dirs = list(getattr(self.log_manager, "offline_log_dirs", {}))
            if log is None and offline_dirs:
                if state is None:
                    return None
                if self.broker_id in state.isr or state.leader == self.broker_id:
                    log_dir = offline_dirs[0]
                    self.offline_partitions[key] = log_dir
                    message = (f"{topic}-{partition} is in the ISR {state.isr} but its log is in no live log dir "
                               f"(offline: {', '.join(offline_dirs)})")
                    _log.error("{message}: offline on broker {id}", message=message, id=self.broker_id)
                    for listener in list(self.log_dir_failure_listeners):
                        listener(log_dir, message)
                    return None
            if log is None:
                try:
                    log = self.log_manager.get_or_create(topic, partition, self.topic_config(topic))
                except KafkaStorageError as e:
                    # every log dir offline, the one chosen failed now (and is offline), or out of descriptors
                    failed = getattr(e, "failures", None)
                    self.offline_partitions[key] = next(iter(failed)) if failed else ""
                    _log.error("{topic}-{partition} is offline on broker {id}: {error}", topic=topic,
                               partition=partition, id=self.broker_id, error=e)
                    if isinstance(e, OpenFilesLimitError):  # no log dir failed: the controller is told all the same
                        for listener in list(self.log_dir_failure_listeners):
                            listener("", str(e))
                    return None
            found = self.partitions[key] = Partition(
                topic, partition, self.broker_id, log, self.now_ms, self._write_partition_isr,
                self._high_watermark_moved, self._reload_partition, self._isr_eligible,
                lambda topic=topic: self.min_insync_replicas(topic))
        return found

    def fence_leadership(self) -> None:
        """
        The process started after an unclean shutdown: from now until
        L{registered}, no state that names this broker leader is applied, and
        after it only those written since the registration (see the module
        docstring).  Call it before the first state is applied.
        """
        self._fenced = True

    def registered(self, broker_epoch: int) -> None:
        """
        The broker registered at C{broker_epoch} (its registration's
        C{czxid}): the withheld leaderships whose states were written since
        are taken up; the others wait for the controller's next state.
        """
        self._broker_epoch = broker_epoch
        for (topic, partition), state in sorted(self.withheld_leaderships.items()):
            current = self.metadata.partition_states.get((topic, partition)) or state
            meta = self.metadata.topics.get(topic)
            if meta is not None and not self._withholds(current):
                del self.withheld_leaderships[(topic, partition)]
                self.apply_state(topic, partition, meta.partitions.get(partition, []), current)

    def _withholds(self, state: Any) -> bool:
        """Whether the fence withholds a state naming this broker leader (L{fence_leadership})."""
        if self._broker_epoch is None:
            return True
        # -1: a state this broker wrote itself (its controller's), after it registered; a state
        # that kept an epoch begun before (an ISR change) was written for the previous process, and
        # so was an election by a controller that had not read the registration yet, of a member
        # whose ISR place was the previous process's
        return (0 <= state.epoch_start_zxid < self._broker_epoch
                or 0 <= state.isr_join_zxid(self.broker_id) < self._broker_epoch)

    def apply_state(self, topic: str, partition: int, replicas: list[int], state: Any) -> None:
        """
        Follow a partition-state znode (a L{kafkatw.zookeeper.zk_data.PartitionState},
        or C{None} before the first one is written) for a partition assigned
        C{replicas}.  Creates the local log of a newly assigned replica.
        """
        if self.broker_id not in replicas:
            return
        p = self._partition(topic, partition, state)
        if p is None:
            return  # offline here: the controller treats the replica as offline
        if self._fenced and state is not None and len(replicas) > 1:  # a lone replica leads with what it has
            if state.leader == self.broker_id and self._withholds(state):
                if (topic, partition) not in self.withheld_leaderships:
                    _log.warn("{topic}-{partition}: not leading at epoch {epoch}, a state written before this"
                              " process registered (it started after an unclean shutdown); it leads once the"
                              " controller has elected it again", topic=topic, partition=partition,
                              epoch=state.leader_epoch)
                self.withheld_leaderships[(topic, partition)] = state
                p.replicas = list(replicas)
                return
            self.withheld_leaderships.pop((topic, partition), None)
        if state is None:
            p.replicas = list(replicas)
            return
        change = p.apply_state(replicas, state.leader, state.leader_epoch, state.isr, state.zk_version,
                               state.controller_epoch, state.elr, state.elr_isr_zxids, state.mzxid,
                               state.epoch_start_zxid, [state.isr_join_zxid(r) for r in state.isr])
        if change is None:
            if p.role == LEADER:
                self._check_produces((topic, partition))
            return
        if self.fetcher_manager is not None:
            if change == FOLLOWER:
                self.fetcher_manager.follow(p, state.leader)
            else:
                self.fetcher_manager.unfollow(p)
        # waiting requests re-check against the new role
        for fetch in self.fetch_purgatory.watching((topic, partition)):
            fetch.complete()
        self._check_produces((topic, partition))
        for listener in list(self.leadership_listeners):
            listener(topic, partition, change, state.leader_epoch)

    def host_partition(self, topic: str, partition: int) -> None:
        """
        Create (or open) the local log of a partition assigned to this broker
        (before its state is known); nothing when it is offline here.
        """
        self._partition(topic, partition)

    def remove_partition(self, topic: str, partition: int) -> None:
        """Stop hosting a partition and delete its log (topic deletion, reassignment)."""
        key = (topic, partition)
        if self.offline_partitions.pop(key, None) is not None:
            _log.warn("{topic}-{partition} was removed while its log dir is offline: its log there is left as it"
                      " is", topic=topic, partition=partition)
            return
        p = self.partitions.pop(key, None)
        if p is not None and self.fetcher_manager is not None:
            self.fetcher_manager.unfollow(p)
        for fetch in self.fetch_purgatory.watching(key):
            fetch.complete()
        for produce in self.produce_purgatory.watching(key):
            produce.check()
        if p is not None:
            for listener in list(self.leadership_listeners):
                listener(topic, partition, OFFLINE, None)
        if self.log_manager.get(topic, partition) is not None:
            self.log_manager.delete(topic, partition)

    def _write_partition_isr(self, p: Partition, isr: list[int], elr: list[int],
                             elr_isr_zxids: list[int], isr_zxids: list[int]) -> defer.Deferred:
        if self._write_isr is None:
            return defer.succeed(p.zk_version + 1)
        return defer.maybeDeferred(self._write_isr, p.topic, p.partition, p.leader_id, p.leader_epoch, isr,
                                   p.controller_epoch, p.zk_version,
                                   **({"elr": elr, "elr_isr_zxids": elr_isr_zxids} if elr else {}),
                                   **({"leader_epoch_zxid": p.leader_epoch_zxid} if p.leader_epoch_zxid >= 0 else {}),
                                   **({"isr_zxids": isr_zxids} if any(z >= 0 for z in isr_zxids) else {}))

    def _isr_eligible(self, broker_id: int) -> bool:
        """A follower may join an ISR while its broker is alive and not shutting down (KIP-841)."""
        return self.metadata.is_replica_isr_eligible(broker_id)

    def _reload_partition(self, p: Partition) -> None:
        if self._reload_state is not None:
            self._reload_state(p.topic, p.partition)

    def shrink_isrs(self, max_lag_ms: int) -> None:
        """
        Run every led partition's ISR shrink check (C{replica.lag.time.max.ms}):
        the broker calls it every C{replica.lag.time.max.ms} / 2, so a follower
        that stopped fetching is out between 1 and 1.5 times the lag time.
        """
        for p in list(self.partitions.values()):
            if p.role == LEADER:
                p.maybe_shrink_isr(max_lag_ms)

    def led_partitions(self) -> list[Partition]:
        return [p for p in self.partitions.values() if p.role == LEADER]

    # --- appends ------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes, min_insync_replicas: int | None = None,
               write: bool = True) -> Any:
        """
        Append a produce request's records to a partition this broker leads.

        @param min_insync_replicas: for acks=all, checked before appending.
        @param write: C{False}: the write, the high watermark and the waiting
            followers' fetches wait for L{write_pending}, so that the appends
            of the Produce requests read together go out in one write per
            partition.
        @return: the log's C{AppendResult}.
        @raise KafkaError: the error to answer for this partition.
        """
        key = (topic, partition)
        p = self.partitions.get(key)
        if p is None:
            p = self.get_partition(topic, partition)
        if not write:
            unwritten = self._unwritten.get(key)
            if unwritten is None:
                unwritten = self._unwritten[key] = [p, 0]
            try:
                result = p.append_as_leader(records, min_insync_replicas, False)
            except (KafkaStorageError, OSError) as e:
                raise self.log_manager.log_failed(topic, partition, e) from None
            if not result.duplicate:
                unwritten[1] += len(records)
            return result
        try:
            result = p.append_as_leader(records, min_insync_replicas)
        except (KafkaStorageError, OSError) as e:
            raise self.log_manager.log_failed(topic, partition, e) from None
        if not result.duplicate and self.fetch_purgatory:
            size = len(records)
            for fetch in self.fetch_purgatory.watching(key):
                if fetch.replica:
                    fetch.on_append(size)
        return result

    def append_many(self, topic: str, partition: int, records_list: list) -> list:
        """
        L{append} with C{write=False} of several Produce requests' records to
        one partition, in order, as one call
        (L{kafkatw.broker.partition.Partition.append_many_as_leader}).

        @return: one entry per item: the log's C{AppendResult}, or the
            C{KafkaError} to answer for it.
        """
        key = (topic, partition)
        p = self.partitions.get(key)
        try:
            if p is None:
                p = self.get_partition(topic, partition)
            results = p.append_many_as_leader(records_list)
        except KafkaError as e:
            if isinstance(e, KafkaStorageError) and p is not None:
                e = self.log_manager.log_failed(topic, partition, e)
            return [e] * len(records_list)
        except OSError as e:
            return [self.log_manager.log_failed(topic, partition, e)] * len(records_list)
        unwritten = self._unwritten.get(key)
        if unwritten is None:
            unwritten = self._unwritten[key] = [p, 0]
        size = 0
        failed = None
        for records, result in zip(records_list, results):
            if isinstance(result, KafkaError):
                if isinstance(result, KafkaStorageError):
                    failed = result
            elif not result.duplicate:
                size += len(records)
        unwritten[1] += size
        if failed is not None:  # the write_pending of the run answers the appends that were not written
            self.log_manager.log_failed(topic, partition, failed)
        return results

    def write_pending(self) -> dict[tuple[str, int], Exception]:
        """
        Finish the appends made with C{append(..., write=False)}: write each
        partition's batches (one C{os.writev}), then move its high watermark
        and wake the followers' fetches waiting for data, as L{append} does
        for one request.

        @return: C{(topic, partition)} -> the C{KafkaStorageError} of a
            partition whose write failed (its appends at or past its log end
            offset were not written: see
            L{kafkatw.storage.log.PartitionLog.write_pending}).
        """
        errors: dict[tuple[str, int], Exception] = {}
        unwritten, self._unwritten = self._unwritten, {}
        offline = self.offline_partitions
        for key, (p, size) in unwritten.items():
            if key in offline:  # its log dir failed during the run: nothing of it is answered as written
                errors[key] = KafkaStorageError(f"{key[0]}-{key[1]} is in the offline log dir {offline[key]}")
                continue
            try:
                p.log.write_pending()
            except (KafkaStorageError, OSError) as e:
                errors[key] = self.log_manager.log_failed(key[0], key[1], e)
                continue
            p.maybe_advance_high_watermark()
            if size and self.fetch_purgatory:
                for fetch in self.fetch_purgatory.watching(key):
                    if fetch.replica:
                        fetch.on_append(size)
        return errors

    def append_as_follower(self, p: Partition, records: bytes) -> Any:
        """
        Append batches fetched from the leader to a followed partition's log
        (L{kafkatw.storage.log.PartitionLog.append_as_follower}).

        @raise KafkaError: the log's errors; C{KAFKA_STORAGE_ERROR} when the
            write failed (its log directory is then offline).
        """
        try:
            return p.log.append_as_follower(records)
        except (KafkaStorageError, OSError) as e:
            raise self.log_manager.log_failed(p.topic, p.partition, e) from None

    def truncate_as_follower(self, p: Partition, offset: int, fully: bool = False) -> None:
        """
        Truncate a followed partition's log to C{offset} (the replica
        fetcher's truncation by leader epoch), or with C{fully} empty it and
        start it at C{offset} (below the leader's log start offset).

        @raise KafkaStorageError: the truncation failed; its log directory is
            then offline (Kafka's C{maybeHandleIOException}), and the
            partition no longer followed.
        """
        try:
            if fully:
                p.log.truncate_fully_and_start_at(offset)
            else:
                p.log.truncate_to(offset)
        except (KafkaStorageError, OSError) as e:
            raise self.log_manager.log_failed(p.topic, p.partition, e) from None

    # --- failed log directories (KIP-112) -------------------------------------------

    def handle_log_dir_failure(self, log_dir: str, message: str) -> None:
        """
        A log directory failed (a listener of the log manager's
        L{kafkatw.storage.log_dir_failure.LogDirFailureChannel}; Kafka's
        C{ReplicaManager.handleLogDirFailure}): each partition whose replica
        was there goes offline here -- it no longer leads or follows (its
        fetcher stops), its waiting fetches and acks=all produces are
        answered now (C{KAFKA_STORAGE_ERROR}), and every later request for
        it gets C{KAFKA_STORAGE_ERROR} -- then L{log_dir_failure_listeners}
        are told (the broker writes the log dir event notification for the
        controller, or stops when no log directory is left).
        """
        keys = list(self.log_manager.offline_partitions.get(log_dir, []))
        changed = []
        for key in keys:
            self.offline_partitions[key] = log_dir
            p = self.partitions.pop(key, None)
            if p is None:
                continue
            changed.append(p)
            p.go_offline()
            if self.fetcher_manager is not None:
                self.fetcher_manager.unfollow(p)
        _log.error("broker {id} stopped serving the replicas in the failed log dir {log_dir}: {partitions}",
                   id=self.broker_id, log_dir=log_dir,
                   partitions=", ".join(f"{t}-{p}" for t, p in keys) or "none")
        for key in keys:
            for fetch in self.fetch_purgatory.watching(key):
                fetch.complete()
            self._check_produces(key)
        for p in changed:
            for listener in list(self.leadership_listeners):
                listener(p.topic, p.partition, OFFLINE, None)
        for listener in list(self.log_dir_failure_listeners):
            listener(log_dir, message)

    def _high_watermark_moved(self, p: Partition) -> None:
        key = (p.topic, p.partition)
        if not self.fetch_purgatory and not self.produce_purgatory:
            return  # nobody waits
        lso = None
        for fetch in self.fetch_purgatory.watching(key):
            if fetch.replica:
                continue
            if fetch.stable_offsets is not None:
                if lso is None:
                    lso = p.log.last_stable_offset
                if lso <= fetch.stable_offsets.get(key, -1):
                    continue  # only uncommitted data arrived
            fetch.complete()
        self._check_produces(key)

    def _check_produces(self, key: tuple[str, int]) -> None:
        waiting = self.produce_purgatory.watching(key)
        if not waiting:
            return
        partition = self.partitions.get(key)
        if partition is None or partition.role != LEADER or partition.high_watermark_stalled():
            for produce in waiting:
                produce.check()
            return
        # A healthy leader: a produce of this partition alone whose append is not below the high
        # watermark yet stays as it is (its check would find it not done), so it is not checked --
        # at a high watermark moving once per follower fetch, checking every waiting produce each
        # time cost the leader O(waiting) checks per record once produces queued up.
        high_watermark = partition.log.high_watermark
        for produce in waiting:
            required = produce.required
            if len(required) == 1 and required[key] > high_watermark:
                continue
            produce.check()

    def delay_produce(self, required: dict[tuple[str, int], int], timeout_ms: int) -> defer.Deferred:
        """
        Wait until each partition's high watermark reaches its required offset.

        @return: a Deferred firing with C{(topic, partition) -> KafkaError | None}.
        """
        produce = DelayedProduce(self, required, timeout_ms, self.reactor)
        produce.check()
        return produce.deferred

    # --- fetches ------------------------------------------------------------------

    def delay_fetch(self, partitions: list[tuple[str, int]], min_bytes: int, accumulated_bytes: int,
                    max_wait_ms: int, replica: bool = False,
                    stable_offsets: dict[tuple[str, int], int] | None = None) -> defer.Deferred[None]:
        """
        Wait until C{min_bytes} have arrived on C{partitions} (counting
        C{accumulated_bytes} already available) or C{max_wait_ms} has passed.

        @param stable_offsets: for a read-committed fetch, each partition's
            last stable offset when it was read (see L{DelayedFetch}).
        """
        fetch = DelayedFetch(self.fetch_purgatory, partitions, min_bytes, accumulated_bytes, max_wait_ms,
                             self.reactor, replica, stable_offsets)
        return fetch.deferred

    @property
    def fetch_purgatory_size(self) -> int:
        return len(self.fetch_purgatory)

    @property
    def produce_purgatory_size(self) -> int:
        return len(self.produce_purgatory)

    def complete_all_delayed(self) -> None:
        """Answer every waiting fetch and produce now (shutdown)."""
        for fetch in self.fetch_purgatory.operations():
            fetch.complete()
        for produce in self.produce_purgatory.operations():
            produce.expire()
