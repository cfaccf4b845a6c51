"""
The partitions this broker serves: appends, reads, and long-polling fetches.

Named after Kafka's C{ReplicaManager}.  Appends go to the partition's
L{kafkatw.storage.log.PartitionLog}; reads return file regions up to the high
watermark.  A fetch that finds fewer than C{min_bytes} waits in the fetch
purgatory (Kafka's C{DelayedFetch}): it registers on each partition it reads,
every append adds its size to the waiting fetches of that partition, and the
fetch completes as soon as C{min_bytes} have arrived or C{max_wait_ms} has passed.
Nothing polls.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError

__all__ = ["ReplicaManager", "DelayedFetch"]

_log = Logger()


class DelayedFetch:
    """
    A fetch waiting for C{min_bytes} of new data or for its timeout.

    @ivar deferred: fires with C{None} when the fetch should be answered.
    """

    def __init__(self, manager: "ReplicaManager", partitions: list[tuple[str, int]], min_bytes: int,
                 accumulated_bytes: int, max_wait_ms: int, reactor: Any) -> None:
        self.manager = manager
        self.partitions = partitions
        self.min_bytes = min_bytes
        self.accumulated_bytes = accumulated_bytes
        self.deferred: defer.Deferred[None] = defer.Deferred()
        self.done = False
        self._timer = reactor.callLater(max_wait_ms / 1000.0, self.complete)

    def on_append(self, size_bytes: int) -> None:
        self.accumulated_bytes += size_bytes
        if self.accumulated_bytes >= self.min_bytes:
            self.complete()

    def complete(self) -> None:
        if self.done:
            return
        self.done = True
        if self._timer.active():
            self._timer.cancel()
        self.manager._unwatch(self)
        self.deferred.callback(None)


class ReplicaManager:
    """
    Serves appends and reads for the partitions this broker leads.

    @param log_manager: a L{kafkatw.storage.log_manager.LogManager}.
    @param metadata: the L{kafkatw.broker.metadata_cache.MetadataCache}.
    @param topic_config: C{topic_config(topic) -> dict} of effective topic configs.
    """

    def __init__(self, broker_id: int, log_manager: Any, metadata: Any, reactor: Any,
                 topic_config: Callable[[str], dict]) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.metadata = metadata
        self.reactor = reactor
        self.topic_config = topic_config
        self._waiting: dict[tuple[str, int], set[DelayedFetch]] = {}

    def get_log(self, topic: str, partition: int) -> Any:
        """
        The local log of a partition this broker leads.

        @raise UnknownTopicOrPartitionError: no such topic or partition.
        @raise NotLeaderOrFollowerError: another broker leads it.
        """
        meta = self.metadata.topics.get(topic)
        if meta is None or partition not in meta.partitions:
            raise UnknownTopicOrPartitionError()
        if meta.partitions[partition][0] != self.broker_id:
            raise NotLeaderOrFollowerError()
        log = self.log_manager.get(topic, partition)
        if log is None:
            log = self.log_manager.get_or_create(topic, partition, self.topic_config(topic))
        return log

    def become_leader(self, topic: str, partition: int) -> None:
        """Create (or open) the local log of a partition assigned to this broker."""
        if self.log_manager.get(topic, partition) is None:
            self.log_manager.get_or_create(topic, partition, self.topic_config(topic))

    def append(self, topic: str, partition: int, records: bytes) -> Any:
        """
        Append a produce request's records to a partition.

        @return: the log's C{AppendResult}.
        @raise KafkaError: the error to answer for this partition.
        """
        log = self.get_log(topic, partition)
        result = log.append(records, self.metadata.leader_epoch(topic, partition))
        log.update_high_watermark(log.log_end_offset)  # single replica until the Partition manages it
        if not result.duplicate:
            waiting = self._waiting.get((topic, partition))
            if waiting:
                size = len(records)
                for fetch in list(waiting):
                    fetch.on_append(size)
        return result

    def delay_fetch(self, partitions: list[tuple[str, int]], min_bytes: int, accumulated_bytes: int,
                    max_wait_ms: int) -> defer.Deferred[None]:
        """
        Wait until C{min_bytes} have been appended to C{partitions} (counting
        C{accumulated_bytes} already available) or C{max_wait_ms} has passed.
        """
        fetch = DelayedFetch(self, partitions, min_bytes, accumulated_bytes, max_wait_ms, self.reactor)
        for tp in partitions:
            self._waiting.setdefault(tp, set()).add(fetch)
        return fetch.deferred

    def _unwatch(self, fetch: DelayedFetch) -> None:
        for tp in fetch.partitions:
            waiting = self._waiting.get(tp)
            if waiting is not None:
                waiting.discard(fetch)
                if not waiting:
                    del self._waiting[tp]

    def complete_all_delayed(self) -> None:
        """Answer every waiting fetch now (shutdown)."""
        for fetch in {f for fetches in self._waiting.values() for f in fetches}:
            fetch.complete()

    def remove_partition(self, topic: str, partition: int) -> None:
        waiting = self._waiting.get((topic, partition))
        if waiting:
            for fetch in list(waiting):
                fetch.complete()
        if self.log_manager.get(topic, partition) is not None:
            self.log_manager.delete(topic, partition)
