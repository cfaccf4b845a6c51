"""
L{BlockingZookeeperConsumerGroup}: the paper's ZooKeeper-coordinated consumer
group (L{kafkatw.client.zookeeper_group}) for threads without a reactor, on
the per-process reactor thread of L{kafkatw.client.blocking} (crochet).

    with BlockingZookeeperConsumerGroup("g", ["t"], zookeeper_connect="127.0.0.1:2181",
                                        bootstrap_servers="127.0.0.1:9092") as group:
        for record in group:          # auto commit, at least once
            handle(record)

Iterating marks a record processed when the next one is asked for; L{poll}
marks the records of the previous call processed (see the group's docstring).
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

from .blocking import _Bound
from .zookeeper_group import ZookeeperConsumerGroup

__all__ = ["BlockingZookeeperConsumerGroup"]


class BlockingZookeeperConsumerGroup(_Bound):
    """
    A L{ZookeeperConsumerGroup} driven from any thread.  Takes the same
    arguments (without the reactor), plus:

    @param start: join the group in the constructor (waits until stable).
    @param start_timeout_s: how long joining may take (s).
    @param consumer_timeout_ms: iteration stops after this long without a
        record (ms; None: never by itself).
    @param timeout_s: default wait for L{commit} and L{close} (s).
    """

    def __init__(self, group_id: str, topics: Iterable[str] | None = None, pattern: str | None = None, *,
                 start: bool = True, start_timeout_s: float = 120.0, consumer_timeout_ms: int | None = None,
                 timeout_s: float = 60.0, **options: Any) -> None:
        super().__init__()
        thread = self._thread
        self.group: ZookeeperConsumerGroup = thread.call(
            60.0, lambda: ZookeeperConsumerGroup(thread.reactor, group_id, topics, pattern, **options))
        self.consumer_timeout_ms = consumer_timeout_ms
        self.timeout_s = timeout_s
        self._records: list[Any] = []
        self._index = 0
        self._closed = False
        if start:
            try:
                self.start(start_timeout_s)
            except BaseException:
                self.close()
                raise

    def _call(self, timeout_s: float | None, function: Any, *args: Any) -> Any:
        return self._check_process().call(timeout_s, function, *args)

    @property
    def consumer_id(self) -> str:
        return self.group.consumer_id

    def start(self, timeout_s: float = 120.0) -> None:
        """Register and wait until the first rebalance is done."""
        self._call(timeout_s, self.group.start)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[Any]:
        """Records, waiting up to C{timeout_ms} (ms); see L{ZookeeperConsumerGroup.poll}."""
        if self._index < len(self._records):
            limit = max_records or len(self._records)
            out = self._records[self._index:self._index + limit]
            self._index += len(out)
            return out
        return self._call(timeout_ms / 1000.0 + self.timeout_s, self.group.poll, timeout_ms, max_records)

    def __iter__(self) -> Iterator[Any]:
        last = time.monotonic()
        while not self._closed:
            if self._index < len(self._records):
                record = self._records[self._index]
                self._index += 1
                last = time.monotonic()
                yield record
                continue
            wait_ms = 1000
            if self.consumer_timeout_ms is not None:
                left_ms = self.consumer_timeout_ms - (time.monotonic() - last) * 1000
                if left_ms <= 0:
                    return
                wait_ms = int(min(wait_ms, left_ms)) + 1
            self._records = self._call(wait_ms / 1000.0 + self.timeout_s, self.group.poll, wait_ms, None)
            self._index = 0

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> dict[tuple[str, int], int]:
        """
        Commit (see L{ZookeeperConsumerGroup.commit}); records still held by
        the iterator do not count as returned.
        """
        if offsets is None and self._index < len(self._records):
            held = self._records[self._index:]
            first: dict[tuple[str, int], int] = {}
            for r in held:
                first.setdefault((r.topic, r.partition), r.offset)
            position = {tp: o for tp, o in self._call(self.timeout_s, self._returned).items()}
            position.update(first)
            owned = self.assignment()
            offsets = {tp: o for tp, o in position.items() if tp in owned}
        return self._call(self.timeout_s, self.group.commit, offsets)

    def _returned(self) -> dict[tuple[str, int], int]:
        return {tp: o for tp, o in self.group._returned.items() if tp in self.group._owned}

    def assignment(self) -> set[tuple[str, int]]:
        return self._call(self.timeout_s, self.group.assignment)

    def group_metadata(self) -> Any:
        """L{kafkatw.client.zookeeper_group.ZookeeperConsumerGroup.group_metadata}."""
        return self._call(self.timeout_s, self.group.group_metadata)

    @property
    def state(self) -> str:
        return self.group.state.value

    def close(self, timeout_s: float | None = None) -> None:
        """Commit what was returned, release the partitions, leave the group."""
        if self._closed:
            return
        self._closed = True
        if self._index < len(self._records):
            # Records handed to us but never to the application: do not commit them.
            self._call(self.timeout_s, self._unreturn, self._records[self._index:])
        self._records, self._index = [], 0
        self._call(timeout_s if timeout_s is not None else self.timeout_s, self.group.close)

    def _unreturn(self, held: list[Any]) -> None:
        first: dict[tuple[str, int], int] = {}
        for r in held:
            first.setdefault((r.topic, r.partition), r.offset)
        for tp, offset in first.items():
            if tp in self.group._returned:
                self.group._returned[tp] = min(self.group._returned[tp], offset)
        self.group._last_returned = [(tp, min(o, first.get(tp, o))) for tp, o in self.group._last_returned]

    def __enter__(self) -> "BlockingZookeeperConsumerGroup":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
