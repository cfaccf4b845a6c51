"""
Consumer lag of every consumer group, computed periodically off the request path.

Both kinds of group keep their committed offsets in ZooKeeper at
C{/consumers/<group>/offsets/<topic>/<partition>} (docs/consumer-groups.md):
groups of Kafka clients through the broker's group coordinator, and the
paper's ZooKeeper-coordinated groups (L{kafkatw.client.zookeeper_group}),
which also register their consumers under C{/consumers/<group>/ids}.  Every
C{metrics.lag.interval.ms} a L{LagMonitor} reads the groups and their offsets,
asks for the partitions' high watermarks, and keeps the result (L{LagSnapshot})
and a short history for the console's lag-over-time chart.

The lag of a group in a partition is the partition's high watermark minus the
group's committed offset (the next offset it will consume), never below 0 —
what kafka_exporter exports as C{kafka_consumergroup_lag} and Kafka's
C{kafka-consumer-groups.sh --describe} prints as LAG.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..zookeeper.bridge import NoNodeError
from ..zookeeper.zk_data import group_path

__all__ = ["LagRow", "LagSnapshot", "LagMonitor", "compute_lag", "GROUP_KIND_COORDINATOR", "GROUP_KIND_ZOOKEEPER"]

_log = Logger()

TopicPartition = tuple[str, int]

#: A group of Kafka clients, coordinated by a broker's group coordinator.
GROUP_KIND_COORDINATOR = "coordinator"
#: A paper-style group coordinated through ZooKeeper (C{/consumers/<group>/ids}).
GROUP_KIND_ZOOKEEPER = "zookeeper"


@dataclass(frozen=True)
class LagRow:
    """
    One group's position in one partition.

    @ivar committed: the committed offset (the next offset the group reads).
    @ivar end_offset: the partition's high watermark, -1 when unknown.
    @ivar lag: C{max(0, end_offset - committed)} (records), C{None} when the
        end offset is unknown.
    """

    group: str
    topic: str
    partition: int
    committed: int
    end_offset: int
    lag: int | None


@dataclass
class LagSnapshot:
    """
    The lag of every group at one time.

    @ivar time_ms: when it was computed (ms since the epoch).
    @ivar rows: sorted by group, topic, partition.
    @ivar kinds: group -> L{GROUP_KIND_COORDINATOR} or L{GROUP_KIND_ZOOKEEPER}.
    @ivar end_offsets: partition -> high watermark (-1: unknown).
    """

    time_ms: int
    rows: list[LagRow] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    end_offsets: dict[TopicPartition, int] = field(default_factory=dict)

    def group_lag(self) -> dict[str, int]:
        """group -> its total lag over the partitions whose end offset is known (records)."""
        totals: dict[str, int] = {group: 0 for group in self.kinds}
        for row in self.rows:
            if row.lag is not None:
                totals[row.group] = totals.get(row.group, 0) + row.lag
        return totals


def compute_lag(time_ms: int, committed: dict[str, dict[TopicPartition, int]], kinds: dict[str, str],
                end_offsets: dict[TopicPartition, int]) -> LagSnapshot:
    """
    The lag of each group in each partition it committed an offset for.

    @param committed: group -> partition -> committed offset.
    @param kinds: group -> its kind.
    @param end_offsets: partition -> high watermark (absent or -1: unknown).
    """
    rows = []
    for group in sorted(committed):
        for (topic, partition), offset in sorted(committed[group].items()):
            end = end_offsets.get((topic, partition), -1)
            lag = max(0, end - offset) if end >= 0 else None
            rows.append(LagRow(group, topic, partition, offset, end, lag))
    return LagSnapshot(time_ms, rows, dict(kinds), dict(end_offsets))


class LagMonitor:
    """
    Computes a L{LagSnapshot} every C{interval_ms} on the reactor (ZooKeeper
    reads and one ListOffsets per leader; no work on the request path).

    @param registry: a L{kafkatw.zookeeper.registry.Registry}.
    @param end_offsets: C{async (partitions) -> {partition: high watermark}}
        (-1 or absent where unknown).
    @param reactor: provides C{seconds} and C{callLater}.
    @param now_ms: the wall clock (ms since the epoch), for the snapshots' C{time_ms}
        (the broker's C{milliseconds}); the reactor's C{seconds()} by default.
    @param interval_ms: time between two computations (ms).
    @param history: how many snapshots the console's chart keeps.
    @ivar latest: the last snapshot, C{None} before the first.
    @ivar history: the last snapshots' C{(time_ms, {group: total lag}, {group: {partition: lag}})}.
    """

    def __init__(self, registry: Any, end_offsets: Callable[[set[TopicPartition]], Awaitable[dict]],
                 reactor: Any, interval_ms: int, history: int = 180,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.registry = registry
        self.end_offsets = end_offsets
        self.reactor = reactor
        self.now_ms = now_ms or (lambda: int(reactor.seconds() * 1000))
        self.interval_ms = interval_ms
        self.latest: LagSnapshot | None = None
        self.history: deque[tuple[int, dict[str, int], dict[str, dict[TopicPartition, int]]]] = deque(maxlen=history)
        self._loop: task.LoopingCall | None = None
        self._running: defer.Deferred | None = None

    def start(self) -> None:
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = self.reactor
        self._loop.start(self.interval_ms / 1000.0, now=True)

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def _tick(self) -> None:
        if self._running is not None:
            return  # the previous computation is still reading
        self._running = defer.Deferred.fromCoroutine(self.compute())

        def done(result: Any) -> None:
            self._running = None
            if isinstance(result, Failure):
                _log.warn("computing consumer lag failed: {error}", error=result.getErrorMessage())

        self._running.addBoth(done)

    async def compute(self) -> LagSnapshot:
        """Read every group's offsets, the end offsets, and keep the snapshot."""
        groups = await self.registry.list_consumer_groups()
        committed: dict[str, dict[TopicPartition, int]] = {}
        kinds: dict[str, str] = {}
        for group in groups:
            offsets = await self.registry.get_committed_offsets(group)
            committed[group] = {tp: c.offset for tp, c in offsets.items()}
            kinds[group] = await self._kind(group)
        wanted = {tp for offsets in committed.values() for tp in offsets}
        ends = dict(await self.end_offsets(wanted)) if wanted else {}
        snapshot = compute_lag(self.now_ms(), committed, kinds, ends)
        self.latest = snapshot
        per_partition: dict[str, dict[TopicPartition, int]] = {}
        for row in snapshot.rows:
            if row.lag is not None:
                per_partition.setdefault(row.group, {})[(row.topic, row.partition)] = row.lag
        self.history.append((snapshot.time_ms, snapshot.group_lag(), per_partition))
        return snapshot

    async def _kind(self, group: str) -> str:
        try:
            await self.registry.client.get_children(f"{group_path(group)}/ids")
        except NoNodeError:
            return GROUP_KIND_COORDINATOR
        return GROUP_KIND_ZOOKEEPER


def local_high_watermarks(log_manager: Any, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """High watermarks of the partitions with a log on this broker (the others absent)."""
    found = {}
    for topic, partition in partitions:
        log = log_manager.get(topic, partition) if log_manager is not None else None
        if log is not None:
            found[(topic, partition)] = log.high_watermark
    return found
