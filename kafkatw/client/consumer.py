"""
L{Consumer}: a partition-level consumer with a prefetching fetch pipeline
(docs/design.md: Clients; the paper's §3.1 "pull" consumer).

The application picks partitions with L{Consumer.assign}, or, with a
C{group_id}, subscribes to topics with L{Consumer.subscribe} and lets a
consumer group coordinated by a broker decide (Kafka's classic protocol,
L{kafkatw.client.consumer_coordinator.ConsumerCoordinator}), and reads records
with L{Consumer.poll} or C{async for}.  The paper's ZooKeeper group (§3.2,
L{kafkatw.client.zookeeper_group}) drives a consumer through
L{Consumer.assign} and L{Consumer.initial_positions}; the two groups differ
only in membership: fetching, positions and decoding are this class's.

Fetch pipeline
==============

Per partition the consumer keeps two offsets: the I{position} (the offset of
the next record L{Consumer.poll} returns) and the I{fetch offset} (the offset
after the data already buffered).  Fetched data is kept as raw record-batch
bytes ("chunks") and decoded only when L{Consumer.poll} reaches it, in bulk
(L{kafkatw.protocol.records.decode_fetched}).

At most one Fetch is in flight per leader broker.  It covers every assigned,
unpaused partition led by that broker whose buffer holds fewer than
C{max_buffered_bytes / len(assignment)} bytes (and at least always an empty
buffer), and is sent as soon as the previous response from that broker has
been processed — before the records of that response reach the application —
so the data for the next poll is already on its way.  A partition whose buffer
is full is left out of fetches until L{Consumer.poll} drains it
(back-pressure): memory stays below about C{max_buffered_bytes} plus one
response per broker.  Partitions rotate in each request so that every
partition is sometimes first (a broker returns at least one whole batch of the
first partition, KIP-74).

Errors of a partition in a Fetch response:

  - C{OFFSET_OUT_OF_RANGE}: C{auto_offset_reset} "earliest"/"latest" look the
    offset up (ListOffsets) and carry on; "none" makes L{Consumer.poll} fail
    with L{OffsetOutOfRangeError} until the application seeks.
  - leadership and connection errors (L{RETRIABLE_METADATA_ERRORS}, among
    them C{FENCED_LEADER_EPOCH}): the metadata is invalidated and refreshed and
    the partition is fetched again after C{retry_backoff_ms}.

Leader changes (KIP-320): each Fetch names the leader epoch the consumer knows
(C{current_leader_epoch}).  When the metadata shows a newer leader epoch than
the one the position was last validated under, the consumer first asks the new
leader (OffsetForLeaderEpoch) where the epoch of the last fetched batch ended.
An end below the fetch position means the log was truncated under the
consumer (an unclean election): it is reported — L{LogTruncationError} from
L{Consumer.poll} with C{auto_offset_reset="none"}, else a warning and a seek to
that end offset — never skipped silently.
  - anything else fails L{Consumer.poll} with the typed error.

Source: Kafka protocol guide (Fetch, ListOffsets); KIP-74; Apache Kafka's
C{Fetcher}/C{FetchCollector} (the Java client buffers one completed fetch per
partition; here the bound is in bytes).
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, NamedTuple

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import (
    ErrorCode,
    KafkaError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
    kafka_error,
)
from ..protocol.fetch import FetchRequestBody
from ..protocol.records import decode_fetched, scan_fetched
from .client import RETRIABLE_METADATA_ERRORS, KafkaClient, client_for, sleep
from .security import SecurityConfig, security_from

__all__ = [
    "Consumer",
    "ConsumerRecord",
    "NoOffsetForPartitionError",
    "LogTruncationError",
    "ConsumerClosedError",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
]

_log = Logger()

#: ListOffsets timestamps meaning "log start offset" and "high watermark".
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

_RESETS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": None}
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}

TopicPartition = tuple[str, int]


class ConsumerRecord(NamedTuple):
    """
    One record as the consumer returns it.

    @ivar offset: its offset in the partition.
    @ivar timestamp_ms: ms since the epoch.
    @ivar timestamp_type: 0 CreateTime, 1 LogAppendTime.
    @ivar key: bytes or None.
    @ivar value: bytes or None.
    @ivar headers: a tuple of C{(str, bytes | None)}.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """
    A partition has no position and C{auto_offset_reset} is "none" (Kafka's
    C{NoOffsetForPartitionException}; like it, an offset error).

    @ivar partitions: the C{(topic, partition)}s concerned.
    """


class LogTruncationError(OffsetOutOfRangeError):
    """
    The log was truncated below the consumer's fetch position after a leader
    change (KIP-320; Kafka's C{LogTruncationException}): records it fetched
    are gone from the new leader's log.  Raised with C{auto_offset_reset="none"}.

    @ivar partitions: C{(topic, partition)} -> the offset where the log now ends.
    """


class ConsumerClosedError(KafkaError):
    """The consumer was closed."""


class _Chunk:
    """Fetched record-batch bytes of one partition, decoded on first use."""

    __slots__ = ("data", "fetch_offset", "next_offset", "nbytes", "records", "index", "aborted")

    def __init__(self, data: bytes, fetch_offset: int, next_offset: int,
                 aborted: list[tuple[int, int]] | None = None) -> None:
        self.data = data
        #: read_committed: the response's aborted transactions, (producer id, first offset)
        self.aborted = aborted
        self.fetch_offset = fetch_offset
        self.next_offset = next_offset
        self.nbytes = len(data)
        self.records: list | None = None
        self.index = 0


class _PartitionState:
    """
    What the consumer knows of one assigned partition.

    @ivar position: offset of the next record to return; None: unknown (to be
        looked up: C{reset_to}, else the initial positions, else
        C{auto_offset_reset}).
    @ivar fetch_offset: offset after the buffered data (the next Fetch asks for it).
    @ivar epoch: bumped by every seek; responses to older requests are dropped.
    @ivar error: raised by the next poll that reaches this partition.
    @ivar retry_at: not fetched before this time (reactor seconds) after a retriable error.
    @ivar hold: an OFFSET_OUT_OF_RANGE arrived with data still buffered: fetch
        again only once the buffer is drained.
    """

    __slots__ = ("tp", "topic", "partition", "position", "fetch_offset", "epoch", "chunks",
                 "buffered_bytes", "paused", "in_flight", "resetting", "reset_to", "error", "retry_at",
                 "hold", "highwater", "log_start_offset", "last_stable_offset", "position_waiters",
                 "last_fetched_epoch", "validated_leader_epoch", "validating")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.topic, self.partition = tp
        self.position: int | None = None
        self.fetch_offset = -1
        self.epoch = 0
        self.chunks: collections.deque[_Chunk] = collections.deque()
        self.buffered_bytes = 0
        self.paused = False
        self.in_flight = False
        self.resetting = False
        self.reset_to: int | None = None
        self.error: Exception | None = None
        self.retry_at = 0.0
        self.hold = False
        self.highwater = -1
        self.log_start_offset = -1
        self.last_stable_offset = -1
        self.position_waiters: list[defer.Deferred] = []
        #: partition leader epoch of the last fetched batch (-1: none since the last seek)
        self.last_fetched_epoch = -1
        #: the leader epoch the fetch position was last known valid under (-1: not yet)
        self.validated_leader_epoch = -1
        self.validating = False

    def seek(self, offset: int | None, reset_to: int | None = None) -> None:
        self.position = offset
        self.fetch_offset = -1 if offset is None else offset
        self.reset_to = reset_to
        self.epoch += 1
        self.chunks.clear()
        self.buffered_bytes = 0
        self.resetting = False
        self.error = None
        self.hold = False
        self.last_fetched_epoch = -1
        self.validated_leader_epoch = -1
        self.validating = False
        if offset is not None:
            self.resolve_waiters()

    def fail(self, error: Exception) -> None:
        self.error = error
        waiters, self.position_waiters = self.position_waiters, []
        for d in waiters:
            d.errback(error)

    def resolve_waiters(self) -> None:
        waiters, self.position_waiters = self.position_waiters, []
        for d in waiters:
            d.callback(self.position)


class _PollWaiter:
    __slots__ = ("deferred", "max_records", "timer")

    def __init__(self, deferred: defer.Deferred, max_records: int) -> None:
        self.deferred = deferred
        self.max_records = max_records
        self.timer: Any = None


class SubscriptionState:
    """
    The part of a L{Consumer} its group membership sees and changes (named
    after Kafka's C{SubscriptionState}, which Kafka's C{ConsumerCoordinator}
    is given): the coordinator
    (L{kafkatw.client.consumer_coordinator.ConsumerCoordinator}) calls only
    these and the consumer's public methods, never its private state.
    """

    def __init__(self, consumer: "Consumer") -> None:
        self._consumer = consumer

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """
        Consume exactly C{partitions} (C{(topic, partition)}s), as the group
        assigned them: partitions kept keep their positions and buffered
        records, new ones start at their committed offsets (else
        C{auto_offset_reset}), and dropped ones are forgotten, also from
        L{Consumer.consumed_positions}.
        """
        self._consumer._assign_from_group(partitions)

    def all_consumed(self) -> dict[TopicPartition, int]:
        """
        C{{(topic, partition): position}} of every assigned partition that has
        one: the next offset after everything L{Consumer.poll} returned (what
        is committed on close).
        """
        return self._consumer._positions()

    def group_failed(self) -> None:
        """
        The member stopped with an error (its C{error()}): pending
        L{Consumer.poll}s fail with it now.
        """
        self._consumer._wake_waiters_for_group()

    def request_metadata_update(self) -> None:
        """
        Refresh the cluster metadata soon (at most once per
        C{retry_backoff_ms}), as Kafka's C{Metadata.requestUpdate}: the
        coordinator asks when it is older than C{metadata.max.age.ms}, to
        notice subscribed topics whose partition count changed.
        """
        self._consumer._request_metadata_refresh()


class Consumer:
    """
    A consumer of explicitly assigned partitions.

    @param reactor: the reactor (clock and network) to run on.
    @param bootstrap_servers: C{"host:port,..."}; used to make a L{KafkaClient}
        (closed with the consumer) when C{client} is not given.
    @param client: a L{KafkaClient} to share (not closed by L{close}).
    @param fetch_min_bytes: bytes the broker waits for before answering a Fetch.
    @param fetch_max_wait_ms: how long the broker may wait for them (ms).
    @param fetch_max_bytes: bytes per Fetch response, all partitions (the broker
        still returns one whole batch when the first is larger; KIP-74).
    @param max_partition_fetch_bytes: bytes per partition in one Fetch response.
    @param max_poll_records: records one L{poll} returns at most.
    @param auto_offset_reset: "earliest", "latest" or "none": where to start
        when a partition has no position or its position is out of range.
    @param check_crcs: verify each batch's CRC-32C.
    @param request_timeout_ms: request timeout (ms); Fetches get C{fetch_max_wait_ms} more.
    @param isolation_level: "read_uncommitted" or "read_committed" (KIP-98:
        Fetch and ListOffsets with isolation level 1, so the broker returns
        records only below the last stable offset and C{seek_to_end} goes to
        it; the records of aborted transactions are dropped using each
        response's C{aborted_transactions}, as Kafka's consumer does).
        Control batches (transaction markers) are skipped in both levels.
    @param max_buffered_bytes: bound on the raw record bytes held for the
        application, all partitions together (each partition gets an equal
        share; see the module docstring).
    @param retry_backoff_ms: wait after a retriable error (ms).
    @param default_api_timeout_ms: how long offset look-ups keep retrying (ms).
    @param record_decoder: what L{poll} returns for each piece of one
        partition's fetched data: a callable taking L{decode_fetched}'s
        arguments C{(data, topic, partition, fetch_offset, ConsumerRecord,
        check_crcs, aborted)} and returning C{(items, next_offset)} as it
        does (C{None}: L{decode_fetched}, items are L{ConsumerRecord}s).
        Item 2 of each item is its offset (a partly returned piece resumes
        after the last item returned).  For readers that decode the data
        themselves, as the Spark source does (one item per piece, holding
        its bytes).
    @param group_id: the consumer group L{subscribe} joins and L{commit} and
        L{committed} use (C{None}: no group; L{assign} only).
    @param group_instance_id: a static member's id (KIP-345): rejoining within
        C{session_timeout_ms} keeps its partitions without a rebalance.
    @param partition_assignment_strategy: the assignors this member offers,
        preferred first: C{"range"}, C{"roundrobin"}, C{"sticky"},
        C{"cooperative-sticky"} (L{kafkatw.client.assignors}); the cooperative
        rebalance protocol (KIP-429) when every one is cooperative.
    @param session_timeout_ms: the group drops this member after this long
        without a heartbeat (ms).
    @param heartbeat_interval_ms: time between heartbeats (ms), sent on their
        own timer.
    @param max_poll_interval_ms: the rebalance timeout (ms): how long the
        coordinator waits for members to rejoin.
    @param group_protocol: C{classic} (JoinGroup/SyncGroup, client-side
        assignors) or C{consumer} (KIP-848: ConsumerGroupHeartbeat,
        server-side assignors, incremental rebalances;
        L{kafkatw.client.consumer_membership}), as Kafka's C{group.protocol}.
        With C{consumer}, C{partition_assignment_strategy},
        C{session_timeout_ms} and C{heartbeat_interval_ms} are not used (the
        coordinator sets them).
    @param group_remote_assignor: with C{group_protocol="consumer"}: the
        server-side assignor to ask for (C{uniform}, C{range}; C{None}: the
        coordinator's default), as Kafka's C{group.remote.assignor}.
    @param enable_auto_commit: commit the positions of processed records
        every C{auto_commit_interval_ms} (ms), before rebalances and on close
        (L{kafkatw.client.consumer_coordinator}).
    @param security: a L{kafkatw.client.security.SecurityConfig} (TLS, SASL) for the
        client made from C{bootstrap_servers}; kafka-python's keyword options
        (C{security_protocol}, C{ssl_cafile}, C{ssl_certfile}, C{ssl_keyfile},
        C{ssl_password}, C{ssl_check_hostname}, C{sasl_mechanism},
        C{sasl_plain_username}, C{sasl_plain_password}) set or replace its fields.
    """

    def __init__(self, reactor: Any, bootstrap_servers: str | list[str] | None = None,
                 client: KafkaClient | None = None, *, client_id: str = "kafkatw-consumer",
                 fetch_min_bytes: int = 1, fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, max_poll_records: int = 500,
                 auto_offset_reset: str = "latest", check_crcs: bool = True, request_timeout_ms: int = 30000,
                 isolation_level: str = "read_uncommitted", max_buffered_bytes: int = 8 * 1024 * 1024,
                 retry_backoff_ms: int = 100, default_api_timeout_ms: int = 60000,
                 record_decoder: Callable[..., tuple[list, int]] | None = None,
                 group_id: str | None = None, group_instance_id: str | None = None,
                 partition_assignment_strategy: Iterable[str] | str = ("range", "cooperative-sticky"),
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300000, enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, group_protocol: str = "classic",
                 group_remote_assignor: str | None = None,
                 security: SecurityConfig | None = None, **security_options: Any) -> None:
        if auto_offset_reset not in _RESETS:
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}")
        if isolation_level not in _ISOLATION:
            raise ValueError(f"isolation_level must be read_uncommitted or read_committed, not {isolation_level!r}")
        if max_poll_records < 1:
            raise ValueError("max_poll_records must be at least 1")
        client, self._own_client = client_for(reactor, bootstrap_servers, client, client_id, request_timeout_ms,
                                              security_from(security, security_options, "Consumer"))
        self.reactor = reactor
        self.client = client
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.auto_offset_reset = auto_offset_reset
        self.check_crcs = check_crcs
        self.request_timeout_ms = request_timeout_ms
        self.isolation_level = isolation_level
        self._read_committed = isolation_level == "read_committed"
        self.max_buffered_bytes = max_buffered_bytes
        self.retry_backoff_ms = retry_backoff_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.record_decoder = record_decoder or decode_fetched
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._order: list[_PartitionState] = []
        self._partition_bound = max_buffered_bytes
        self._next = 0
        self._fetching: set[int] = set()
        self._rotation: dict[int, int] = {}
        self._waiters: list[_PollWaiter] = []
        self._refreshing = False
        self._last_refresh = -1e9
        self._wake_call: Any = None
        self._soon: Any = None
        self._closed = False
        self._iter_records: Any = iter(())
        self._subscribed = False
        #: positions when poll() was last called: what the records returned before it reached
        self._consumed: dict[TopicPartition, int] = {}
        self.group_id = group_id
        #: what the group's coordinator may see and change of this consumer
        self.subscriptions = SubscriptionState(self)
        self.coordinator: Any = None
        if group_protocol not in ("classic", "consumer"):
            raise ValueError(f"group_protocol must be classic or consumer, not {group_protocol!r}")
        if group_id is not None and group_protocol == "consumer":
            from .consumer_membership import ConsumerMembershipManager

            self.coordinator = ConsumerMembershipManager(
                self, group_id, group_instance_id=group_instance_id, remote_assignor=group_remote_assignor,
                rebalance_timeout_ms=max_poll_interval_ms, enable_auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms, require_stable=self._read_committed)
        elif group_id is not None:
            from .consumer_coordinator import ConsumerCoordinator

            if isinstance(partition_assignment_strategy, str):
                partition_assignment_strategy = [s.strip() for s in partition_assignment_strategy.split(",")]
            try:
                self.coordinator = ConsumerCoordinator(
                    self, group_id, group_instance_id=group_instance_id, assignors=partition_assignment_strategy,
                    session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=max_poll_interval_ms,
                    heartbeat_interval_ms=heartbeat_interval_ms, enable_auto_commit=enable_auto_commit,
                    auto_commit_interval_ms=auto_commit_interval_ms, require_stable=self._read_committed)
            except ValueError:
                if self._own_client:
                    client.close()
                raise

    # --- the consumer group ------------------------------------------------------------

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        """
        Join the consumer group C{group_id} subscribed to C{topics} (replacing
        an earlier subscription); the group assigns this consumer its
        partitions, which start at the group's committed offsets (else
        C{auto_offset_reset}).  Returns at once: the group is joined, and
        rejoined when it rebalances, when the application calls L{poll} (or
        L{wait_for_assignment}), as Kafka's consumer does; heartbeats run on
        their own timer.

        @param listener: a
            L{kafkatw.client.consumer_coordinator.ConsumerRebalanceListener},
            told of partitions revoked, assigned and lost.
        @raise ValueError: the consumer has no C{group_id}.
        @raise RuntimeError: partitions were assigned by hand (L{assign}).
        """
        self._check_open()
        if self.coordinator is None:
            raise ValueError("subscribe() needs a group_id")
        if self._states and not self._subscribed:
            raise RuntimeError("subscribe() after assign(): Kafka's consumer allows one or the other")
        self._subscribed = True
        self.coordinator.subscribe(topics, listener)

    def subscription(self) -> set[str]:
        """The subscribed topics (empty without L{subscribe})."""
        return set(self.coordinator.topics) if self._subscribed else set()

    def wait_for_assignment(self) -> defer.Deferred:
        """
        @return: a Deferred firing with this member's partitions once the group
            is stable, or failing with the error that stopped the member.
        """
        self._check_open()
        if not self._subscribed:
            return defer.succeed(self.assignment())
        return self.coordinator.wait_for_assignment()

    def group_metadata(self) -> Any:
        """
        This member's group id, generation id, member id and group instance id
        for L{kafkatw.client.producer.Producer.send_offsets_to_transaction}
        (Java's C{ConsumerGroupMetadata}, KIP-447).

        @rtype: L{kafkatw.client.transaction_manager.GroupMetadata}
        @raise ValueError: the consumer has no C{group_id}.
        """
        return self._group().group_metadata()

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> defer.Deferred:
        """
        Commit offsets to the group, synchronously: the Deferred fires once
        the coordinator has them, retrying a moved coordinator and lost
        connections until C{default_api_timeout_ms}.

        @param offsets: C{{(topic, partition): next offset to consume}};
            default: the position of every assigned partition (everything
            L{poll} returned counts as processed).
        @return: a Deferred firing with the offsets committed, or failing with
            L{kafkatw.client.consumer_coordinator.CommitFailedError} (the group
            rebalanced; the partitions may be another member's now) or a
            L{KafkaError}.
        @raise ValueError: the consumer has no C{group_id}.
        """
        group = self._group()
        if offsets is None:
            offsets = self._positions()
        return group.commit(offsets)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: Callable[[dict, BaseException | None], Any] | None = None) -> defer.Deferred:
        """
        Commit offsets in one attempt, without retrying (Kafka's
        C{commitAsync}): for progress that a later commit supersedes.

        @param callback: called with C{(offsets, None)} or C{(offsets, error)}.
        @return: a Deferred firing with C{None} when the attempt ends (never failing;
            a failure is logged and given to C{callback}).
        """
        group = self._group()
        if offsets is None:
            offsets = self._positions()

        def done(result: Any) -> None:
            error = result.value if isinstance(result, Failure) else None
            if error is not None:
                _log.warn("group {group}: commit_async failed: {error}", group=self.group_id, error=error)
            if callback is not None:
                callback(dict(offsets), error)

        return group.commit(offsets, retry=False).addBoth(done)

    def committed(self, partitions: Iterable[TopicPartition]) -> defer.Deferred:
        """
        The group's committed offsets (OffsetFetch; a read_committed consumer
        waits for stable ones, KIP-447).

        @return: a Deferred firing with C{{(topic, partition): offset}}, -1
            where there is none.
        @raise ValueError: the consumer has no C{group_id}.
        """
        return self._group().committed(partitions)

    def consumed_positions(self) -> dict[TopicPartition, int]:
        """
        The assigned partitions' positions when L{poll} was last called (the
        records returned before that call are processed): what auto-commit commits.
        """
        states = self._states
        return {tp: o for tp, o in self._consumed.items() if tp in states}

    def _positions(self) -> dict[TopicPartition, int]:
        return {s.tp: s.position for s in self._order if s.position is not None}

    def _group(self) -> Any:
        if self.coordinator is None:
            raise ValueError("the consumer has no group_id")
        return self.coordinator

    def _assign_from_group(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment (through L{SubscriptionState.assign_from_subscribed})."""
        self._assign(partitions)
        self._consumed = {tp: o for tp, o in self._consumed.items() if tp in self._states}

    def _wake_waiters_for_group(self) -> None:
        """The group member stopped: pending polls fail with its error (L{SubscriptionState.group_failed})."""
        error = self.coordinator.error() if self.coordinator is not None else None
        if error is None:
            return
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if waiter.timer is not None and waiter.timer.active():
                waiter.timer.cancel()
            waiter.deferred.errback(error)

    # --- assignment -----------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """
        Consume exactly these C{(topic, partition)}s from now on.  Partitions
        already assigned keep their position and buffered records; new ones
        start at L{initial_positions}, else at C{auto_offset_reset}.

        @raise RuntimeError: the consumer is L{subscribe}d: its group assigns.
        """
        self._check_open()
        if self._subscribed:
            raise RuntimeError("assign() after subscribe(): the group assigns this consumer's partitions")
        self._assign(partitions)

    def _assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        wanted = [(str(t), int(p)) for t, p in partitions]
        states = {}
        for tp in wanted:
            states[tp] = self._states.get(tp) or _PartitionState(tp)
        for tp, state in self._states.items():
            if tp not in states:
                state.epoch += 1
                state.fail(KafkaError(f"{tp[0]}-{tp[1]} is no longer assigned"))
        self._states = states
        self._order = list(states.values())
        self._partition_bound = max(1, self.max_buffered_bytes // max(1, len(states)))
        self._next = 0
        topics = {t for t, _ in states}
        self.client.want(topics)
        if any(t not in self.client.topics for t in topics):
            self._request_metadata_refresh()
        self._fetch_soon()

    def assignment(self) -> set[TopicPartition]:
        """The assigned C{(topic, partition)}s."""
        return set(self._states)

    def partitions_for(self, topic: str) -> defer.Deferred:
        """
        The partition ids of C{topic}, retrying a few times while it is being created.

        @return: a Deferred firing with a set of ints, or failing with
            L{UnknownTopicOrPartitionError}.
        """
        return defer.Deferred.fromCoroutine(self._partitions_for(topic))

    async def _partitions_for(self, topic: str) -> set[int]:
        for attempt in range(10):
            self.client.want([topic])
            if attempt:
                self.client.invalidate()
            try:
                await self.client.ensure_metadata([topic])
            except KafkaError:
                if attempt == 9:
                    raise
            partitions = self.client.partitions_for(topic)
            if partitions:
                return set(partitions)
            await sleep(self.reactor, self.retry_backoff_ms * (attempt + 1) / 1000.0)
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")

    def initial_positions(self, partitions: list[TopicPartition]) -> defer.Deferred:
        """
        Where newly assigned partitions start: the seam for committed offsets
        (overridable).  Partitions missing from the result start at
        C{auto_offset_reset}.

        @return: a Deferred firing with C{{(topic, partition): offset}}: with a
            C{group_id}, the group's committed offsets; else C{{}}.
        """
        if self.coordinator is None:
            return defer.succeed({})
        return self.coordinator.committed(partitions).addCallback(
            lambda found: {tp: o for tp, o in found.items() if o >= 0})

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get((tp[0], tp[1]))
        if state is None:
            raise KeyError(f"{tp[0]}-{tp[1]} is not assigned")
        return state

    # --- positions --------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make C{offset} the position of C{tp}: the next record returned is that one."""
        if offset < 0:
            raise ValueError(f"offset must not be negative: {offset}")
        self._state(tp).seek(int(offset))
        self._fetch_soon()

    def seek_to_beginning(self, *tps: TopicPartition) -> defer.Deferred:
        """
        Move C{tps} (default: all assigned) to their log start offsets.

        @return: a Deferred firing with C{None} once the offsets are known.
        """
        return self._seek_to(tps, EARLIEST_TIMESTAMP)

    def seek_to_end(self, *tps: TopicPartition) -> defer.Deferred:
        """
        Move C{tps} (default: all assigned) to their high watermarks.

        @return: a Deferred firing with C{None} once the offsets are known.
        """
        return self._seek_to(tps, LATEST_TIMESTAMP)

    def _seek_to(self, tps: tuple[TopicPartition, ...], timestamp: int) -> defer.Deferred:
        self._check_open()
        states = [self._state(tp) for tp in tps] if tps else list(self._order)
        for state in states:
            state.seek(None, timestamp)
        waits = [self.position(state.tp) for state in states]
        def unwrap(failure: Failure) -> Failure:
            return failure.value.subFailure if failure.check(defer.FirstError) else failure

        return defer.gatherResults(waits, consumeErrors=True).addCallbacks(lambda _: None, unwrap)

    def position(self, tp: TopicPartition) -> defer.Deferred:
        """
        The offset of the next record L{poll} returns for C{tp}, looking it up
        first when unknown.

        @return: a Deferred firing with the offset.
        """
        self._check_open()
        state = self._state(tp)
        if state.position is not None:
            return defer.succeed(state.position)
        if state.error is not None:
            return defer.fail(state.error)
        d: defer.Deferred = defer.Deferred()
        state.position_waiters.append(d)
        self._fetch_soon()
        return d

    def highwater(self, tp: TopicPartition) -> int:
        """The high watermark of C{tp} from the last Fetch response (-1: none yet)."""
        return self._state(tp).highwater

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> defer.Deferred:
        """
        The earliest offset whose timestamp is at least the given one, per partition.

        @param timestamps: C{{(topic, partition): ms since the epoch}}.
        @return: a Deferred firing with C{{(topic, partition): (offset, timestamp_ms) or None}}
            (None: no such record).
        """
        self._check_open()
        wanted = {(t, int(p)): int(ts) for (t, p), ts in timestamps.items()}
        for ts in wanted.values():
            if ts < 0:
                raise ValueError(f"timestamps must not be negative: {ts}")

        def shape(found: dict) -> dict:
            return {tp: (found[tp] if found[tp][0] >= 0 else None) for tp in wanted}

        return defer.Deferred.fromCoroutine(self._list_offsets(wanted)).addCallback(shape)

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> defer.Deferred:
        """@return: a Deferred firing with C{{tp: log start offset}}."""
        return self._offsets(tps, EARLIEST_TIMESTAMP)

    def end_offsets(self, tps: Iterable[TopicPartition]) -> defer.Deferred:
        """@return: a Deferred firing with C{{tp: high watermark}}."""
        return self._offsets(tps, LATEST_TIMESTAMP)

    def _offsets(self, tps: Iterable[TopicPartition], timestamp: int) -> defer.Deferred:
        self._check_open()
        wanted = {(t, int(p)): timestamp for t, p in tps}
        return defer.Deferred.fromCoroutine(self._list_offsets(wanted)).addCallback(
            lambda found: {tp: found[tp][0] for tp in wanted})

    # --- pause / resume ---------------------------------------------------------------

    def pause(self, *tps: TopicPartition) -> None:
        """Stop fetching and returning C{tps}; their buffered records are kept."""
        for tp in tps:
            self._state(tp).paused = True

    def resume(self, *tps: TopicPartition) -> None:
        """Undo L{pause}."""
        for tp in tps:
            self._state(tp).paused = False
        self._fetch_soon()
        self._wake_waiters()

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {s.tp for s in self._order if s.paused}

    # --- poll -------------------------------------------------------------------------

    def poll(self, timeout_ms: int | None = 0, max_records: int | None = None) -> defer.Deferred:
        """
        Records from the buffers, waiting up to C{timeout_ms} for some when
        there are none.

        @param timeout_ms: how long to wait (ms); 0: do not wait; None: until
            records arrive or the consumer is closed.
        @param max_records: at most this many (default C{max_poll_records}).
        @return: a Deferred firing with a list of L{ConsumerRecord}s (empty on
            timeout), in offset order per partition, or failing with the
            first partition error met (L{OffsetOutOfRangeError},
            L{NoOffsetForPartitionError}, L{kafkatw.errors.CorruptRecordError}, …).
        """
        if self._closed:
            return defer.fail(ConsumerClosedError("consumer closed"))
        coordinator = self.coordinator
        if coordinator is not None and self._subscribed:
            if coordinator.error() is not None:
                return defer.fail(coordinator.error())
            self._consumed = self._positions()
            coordinator.maybe_join()
        limit = max_records or self.max_poll_records
        try:
            records = self._drain(limit)
        except Exception as e:
            self._maybe_fetch()
            return defer.fail(e)
        if records or timeout_ms == 0:
            self._maybe_fetch()
            return defer.succeed(records)
        d: defer.Deferred = defer.Deferred(lambda d: self._cancel_waiter(waiter))
        waiter = _PollWaiter(d, limit)
        if timeout_ms is not None:
            waiter.timer = self.reactor.callLater(max(0, timeout_ms) / 1000.0, self._poll_timed_out, waiter)
        self._waiters.append(waiter)
        self._maybe_fetch()
        return d

    def _cancel_waiter(self, waiter: _PollWaiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        if waiter.timer is not None and waiter.timer.active():
            waiter.timer.cancel()

    def _poll_timed_out(self, waiter: _PollWaiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
            waiter.deferred.callback([])

    def _wake_waiters(self) -> None:
        while self._waiters:
            waiter = self._waiters[0]
            try:
                records = self._drain(waiter.max_records)
            except Exception as e:
                self._waiters.pop(0)
                if waiter.timer is not None and waiter.timer.active():
                    waiter.timer.cancel()
                waiter.deferred.errback(e)
                continue
            if not records:
                return
            self._waiters.pop(0)
            if waiter.timer is not None and waiter.timer.active():
                waiter.timer.cancel()
            waiter.deferred.callback(records)
            self._maybe_fetch()

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        """
        Take up to C{limit} records from the buffers, partition after
        partition, starting after the partition the last call ended with.

        @raise Exception: the error of the first partition in error met
            before any record was taken.
        """
        order = self._order
        n = len(order)
        out: list = []
        taken = 0
        start = self._next
        for i in range(n):
            state = order[(start + i) % n]
            if state.paused:
                continue
            chunks = state.chunks
            if not chunks:
                if state.error is not None:
                    if taken:
                        break
                    self._next = (start + i + 1) % n
                    error = state.error
                    if getattr(error, "_sticky", True) is False:
                        # raised once; the partition is fetched again after a back-off
                        state.error = None
                        state.retry_at = self.reactor.seconds() + self.retry_backoff_ms / 1000.0
                    raise error
                continue
            while chunks and taken < limit:
                chunk = chunks[0]
                records = chunk.records
                if records is None:
                    try:
                        records, _ = self.record_decoder(chunk.data, state.topic, state.partition,
                                                         chunk.fetch_offset, ConsumerRecord, self.check_crcs,
                                                         chunk.aborted)
                    except KafkaError as e:
                        # the position stays on the bad batch; seek past it to go on
                        state.chunks.clear()
                        state.buffered_bytes = 0
                        state.fetch_offset = state.position if state.position is not None else -1
                        state.epoch += 1
                        state.error = e
                        if taken:
                            break
                        self._next = (start + i + 1) % n
                        raise
                    chunk.records = records
                    chunk.data = b""
                index = chunk.index
                want = limit - taken
                if index == 0 and len(records) <= want:
                    part = records
                else:
                    part = records[index:index + want]
                if part:
                    if taken:
                        out.extend(part)
                    else:
                        out = part
                    taken += len(part)
                    chunk.index = index = index + len(part)
                if index >= len(records):
                    chunks.popleft()
                    state.buffered_bytes -= chunk.nbytes
                    state.position = chunk.next_offset
                else:
                    state.position = part[-1][2] + 1
            if taken >= limit:
                self._next = (start + i + 1) % n
                break
        else:
            self._next = (start + 1) % n if n else 0
        return out

    # --- async iteration --------------------------------------------------------------

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record, waiting as long as it takes; stops when the consumer is closed."""
        if self._closed:
            raise StopAsyncIteration
        record = next(self._iter_records, None)
        if record is not None:
            return record
        while True:
            if self._closed:
                raise StopAsyncIteration
            records = await self.poll(timeout_ms=None)
            if records:
                self._iter_records = iter(records)
                return next(self._iter_records)

    # --- the fetch pipeline ------------------------------------------------------------

    def _maybe_fetch(self) -> None:
        """Send a Fetch to every leader that has none in flight and partitions that want data."""
        if self._closed:
            return
        now = self.reactor.seconds()
        bound = self._partition_bound
        by_node: dict[int, list[_PartitionState]] = {}
        to_validate: dict[int, list[tuple[_PartitionState, int]]] = {}
        to_reset: list[_PartitionState] = []
        need_metadata = False
        wake_at = None
        known = self.client.topics
        fetching = self._fetching
        for state in self._order:
            if state.error is not None:
                continue
            if state.position is None:
                if not state.resetting:
                    if state.retry_at > now:
                        wake_at = state.retry_at if wake_at is None else min(wake_at, state.retry_at)
                    else:
                        to_reset.append(state)
                continue
            if state.in_flight or state.paused or state.buffered_bytes >= bound or (state.hold and state.chunks):
                continue
            if state.retry_at > now:
                wake_at = state.retry_at if wake_at is None else min(wake_at, state.retry_at)
                continue
            partitions = known.get(state.topic)
            meta = partitions.get(state.partition) if partitions else None
            leader = meta.leader if meta is not None else -1
            if leader < 0:
                need_metadata = True
                continue
            if state.validating:
                continue
            leader_epoch = meta.leader_epoch
            if leader_epoch > state.validated_leader_epoch:
                if state.validated_leader_epoch >= 0 and state.last_fetched_epoch >= 0:
                    to_validate.setdefault(leader, []).append((state, leader_epoch))
                    continue
                state.validated_leader_epoch = leader_epoch  # the position came from this leader
            if leader in fetching:
                continue
            by_node.setdefault(leader, []).append(state)
        for node, pairs in to_validate.items():
            self._validate_positions(node, pairs)
        for node, states in by_node.items():
            self._send_fetch(node, states)
        if to_reset:
            self._reset_positions(to_reset)
        if need_metadata:
            self._request_metadata_refresh()
        if wake_at is not None:
            self._wake_at(wake_at - now)

    def _validate_positions(self, node: int, pairs: list[tuple[_PartitionState, int]]) -> None:
        """
        KIP-320: after a leader change, ask the new leader where the epoch of
        the last fetched batch ended; a smaller offset than the fetch position
        is a truncation (L{LogTruncationError} or a reset, see the module docstring).
        """
        by_topic: dict[str, list[dict]] = {}
        requested = []
        for state, leader_epoch in pairs:
            state.validating = True
            requested.append((state, state.epoch, state.fetch_offset, leader_epoch))
            by_topic.setdefault(state.topic, []).append({
                "partition": state.partition, "current_leader_epoch": leader_epoch,
                "leader_epoch": state.last_fetched_epoch})
        body = {"replica_id": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        d = defer.ensureDeferred(self.client.send(node, 23, body, timeout_ms=self.request_timeout_ms))

        def done(response: Any) -> None:
            answers = {(t.topic, p.partition): p for t in response.topics for p in t.partitions}
            refresh = False
            for state, epoch, fetch_offset, leader_epoch in requested:
                state.validating = False
                if state.epoch != epoch or self._states.get(state.tp) is not state:
                    continue
                p = answers.get(state.tp)
                code = ErrorCode(int(p.error_code)) if p is not None else ErrorCode.unknown_server_error
                if code != ErrorCode.none:
                    state.retry_at = self.reactor.seconds() + self.retry_backoff_ms / 1000.0
                    refresh = True
                    continue
                state.validated_leader_epoch = leader_epoch
                if 0 <= p.end_offset < fetch_offset:
                    self._truncated(state, fetch_offset, p.end_offset, p.leader_epoch)

            if refresh:
                self.client.invalidate()
                self._request_metadata_refresh()
            self._maybe_fetch()

        def failed(failure: Failure) -> None:
            for state, _epoch, _offset, _leader_epoch in requested:
                state.validating = False
                state.retry_at = self.reactor.seconds() + self.retry_backoff_ms / 1000.0
            if not self._closed:
                self.client.invalidate()
                self._request_metadata_refresh()
                self._maybe_fetch()

        d.addCallbacks(done, failed)
        d.addErrback(lambda f: _log.failure("consumer position validation", f))

    def _truncated(self, state: _PartitionState, fetch_offset: int, end_offset: int, epoch: int) -> None:
        message = (f"{state.topic}-{state.partition}: the log was truncated at offset {end_offset} (leader epoch"
                   f" {epoch}) below the fetch position {fetch_offset}: records consumed from there were lost"
                   f" by the new leader (unclean leader election)")
        if _RESETS[self.auto_offset_reset] is None:
            error = LogTruncationError(message)
            error.partitions = {state.tp: end_offset}  # type: ignore[attr-defined]
            state.fail(error)
            self._wake_waiters()
        else:
            _log.warn("{message}; continuing from offset {offset}", message=message, offset=end_offset)
            state.seek(end_offset)

    def _fetch_soon(self) -> None:
        # L{_maybe_fetch} on the next reactor turn, once however often asked:
        # seeks made right after assign() come first and save look-ups.
        if self._soon is None:
            self._soon = self.reactor.callLater(0, self._fetch_now)

    def _fetch_now(self) -> None:
        self._soon = None
        self._maybe_fetch()

    def _wake_at(self, delay: float) -> None:
        call = self._wake_call
        if call is not None and call.active():
            if call.getTime() <= self.reactor.seconds() + delay:
                return
            call.cancel()
        self._wake_call = self.reactor.callLater(max(0.0, delay), self._maybe_fetch)

    def _fetch_body(self, states: list[_PartitionState]) -> FetchRequestBody:
        topics: dict[str, list[dict]] = {}
        max_bytes = self.max_partition_fetch_bytes
        for state in states:
            topics.setdefault(state.topic, []).append({
                "partition": state.partition, "fetch_offset": state.fetch_offset,
                "partition_max_bytes": max_bytes, "current_leader_epoch": state.validated_leader_epoch,
                "last_fetched_epoch": -1, "log_start_offset": -1})
        return FetchRequestBody({
            "replica_id": -1,
            "max_wait": self.fetch_max_wait_ms,
            "min_bytes": self.fetch_min_bytes,
            "max_bytes": self.fetch_max_bytes,
            "isolation_level": _ISOLATION[self.isolation_level],
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        })

    def _send_fetch(self, node: int, states: list[_PartitionState]) -> None:
        turn = self._rotation.get(node, 0)
        self._rotation[node] = turn + 1
        k = turn % len(states)
        if k:
            states = states[k:] + states[:k]
        self._fetching.add(node)
        requested = []
        for state in states:
            state.in_flight = True
            requested.append((state, state.fetch_offset, state.epoch))
        d = defer.ensureDeferred(self.client.send(node, 1, self._fetch_body(states),
                                                  timeout_ms=self.request_timeout_ms + self.fetch_max_wait_ms))
        d.addCallbacks(self._fetch_done, self._fetch_failed, callbackArgs=(node, requested),
                       errbackArgs=(node, requested))
        d.addErrback(lambda f: _log.failure("consumer fetch pipeline", f))

    def _fetch_failed(self, failure: Failure, node: int, requested: list) -> None:
        self._fetching.discard(node)
        retry_at = self.reactor.seconds() + self.retry_backoff_ms / 1000.0
        for state, _offset, _epoch in requested:
            state.in_flight = False
            state.retry_at = retry_at
        if not self._closed:
            _log.debug("fetch from broker {node} failed: {error}", node=node, error=failure.value)
            self.client.invalidate()
            self._request_metadata_refresh()
            self._maybe_fetch()

    def _fetch_done(self, response: Any, node: int, requested: list) -> None:
        self._fetching.discard(node)
        if self._closed:
            return
        partitions: dict[TopicPartition, Any] = {}
        for topic in response.responses:
            name = topic.topic
            for p in topic.partitions:
                partitions[(name, p.partition_index)] = p
        top_error = getattr(response, "error_code", ErrorCode.none)
        now = self.reactor.seconds()
        refresh = False
        woken = False
        states = self._states
        for i, (state, offset, epoch) in enumerate(requested):
            state.in_flight = False
            if state.epoch != epoch or states.get(state.tp) is not state:
                continue  # sought or unassigned meanwhile
            p = partitions.get(state.tp)
            code = p.error_code if p is not None else top_error
            if code == ErrorCode.none:
                if p is None:
                    continue
                state.hold = False
                state.highwater = p.high_watermark
                state.last_stable_offset = p.last_stable_offset
                state.log_start_offset = getattr(p, "log_start_offset", -1)
                data = p.records
                if not data:
                    continue
                next_offset, last_epoch = scan_fetched(data, offset)
                if last_epoch >= 0:
                    state.last_fetched_epoch = last_epoch
                if next_offset > offset:
                    aborted = getattr(p, "aborted_transactions", None) if self._read_committed else None
                    if aborted:
                        aborted = [(int(a.producer_id), int(a.first_offset)) for a in aborted]
                    state.chunks.append(_Chunk(data, offset, next_offset, aborted or None))
                    state.buffered_bytes += len(data)
                    state.fetch_offset = next_offset
                    woken = True
                elif i == 0:
                    # the first partition still got no whole batch: it cannot fit
                    state.fail(RecordTooLargeError(
                        f"{state.topic}-{state.partition} at offset {offset}: a record batch larger than"
                        f" the fetch size (max_partition_fetch_bytes={self.max_partition_fetch_bytes},"
                        f" fetch_max_bytes={self.fetch_max_bytes})"))
                    woken = True
            elif code == ErrorCode.offset_out_of_range:
                if state.chunks:
                    state.hold = True  # deal with it once the buffered records are consumed
                elif _RESETS[self.auto_offset_reset] is None:
                    error = OffsetOutOfRangeError(
                        f"offset {offset} is out of range for {state.topic}-{state.partition}"
                        f" and auto_offset_reset is none")
                    error.partitions = {state.tp: offset}  # type: ignore[attr-defined]
                    state.fail(error)
                    woken = True
                else:
                    _log.info("offset {offset} out of range for {topic}-{partition}; resetting to {reset}",
                              offset=offset, topic=state.topic, partition=state.partition,
                              reset=self.auto_offset_reset)
                    state.seek(None)
            elif code in RETRIABLE_METADATA_ERRORS or code == ErrorCode.kafka_storage_error:
                state.retry_at = now + self.retry_backoff_ms / 1000.0
                refresh = True
            else:
                error = kafka_error(ErrorCode(int(code)), f"fetch {state.topic}-{state.partition} at {offset}:"
                                                          f" {ErrorCode(int(code)).name}")
                error._sticky = False  # type: ignore[attr-defined]
                state.fail(error)
                woken = True
        if refresh:
            self.client.invalidate()
            self._request_metadata_refresh()
        self._maybe_fetch()  # the next Fetch goes out before the records are handed over
        if woken:
            self._wake_waiters()

    # --- metadata ------------------------------------------------------------------------

    def _request_metadata_refresh(self) -> None:
        if self._refreshing or self._closed:
            return
        self._refreshing = True
        delay = self._last_refresh + self.retry_backoff_ms / 1000.0 - self.reactor.seconds()
        if delay > 0:
            self.reactor.callLater(delay, self._refresh_metadata)
        else:
            self._refresh_metadata()

    def _refresh_metadata(self) -> None:
        if self._closed:
            self._refreshing = False
            return
        self._last_refresh = self.reactor.seconds()

        def done(result: Any) -> None:
            self._refreshing = False
            if isinstance(result, Failure):
                _log.debug("metadata refresh failed: {error}", error=result.value)
            self._maybe_fetch()

        self.client.refresh_metadata().addBoth(done)

    # --- offset look-ups -------------------------------------------------------------

    def _reset_positions(self, states: list[_PartitionState]) -> None:
        for state in states:
            state.resetting = True
        requested = [(state, state.epoch) for state in states]
        d = defer.Deferred.fromCoroutine(self._resolve_positions(requested))
        d.addErrback(lambda f: _log.failure("resolving consumer positions", f))

    async def _resolve_positions(self, requested: list[tuple[_PartitionState, int]]) -> None:
        def current(state: _PartitionState, epoch: int) -> bool:
            return state.epoch == epoch and self._states.get(state.tp) is state and not self._closed

        try:
            fresh = [state.tp for state, _ in requested if state.reset_to is None]
            initial = (await self.initial_positions(fresh)) if fresh else {}
            lookups: dict[TopicPartition, int] = {}
            policy = _RESETS[self.auto_offset_reset]
            for state, epoch in requested:
                if not current(state, epoch):
                    continue
                if state.reset_to is not None:
                    lookups[state.tp] = state.reset_to
                elif initial.get(state.tp) is not None:
                    state.seek(int(initial[state.tp]))
                elif policy is None:
                    error = NoOffsetForPartitionError(
                        f"no position for {state.topic}-{state.partition} and auto_offset_reset is none")
                    error.partitions = {state.tp}  # type: ignore[attr-defined]
                    state.resetting = False
                    state.fail(error)
                else:
                    lookups[state.tp] = policy
            found = (await self._list_offsets(lookups)) if lookups else {}
        except Exception as e:
            retry_at = self.reactor.seconds() + self.retry_backoff_ms / 1000.0
            for state, epoch in requested:
                if current(state, epoch) and state.position is None:
                    state.resetting = False
                    if isinstance(e, KafkaError) and not e.retriable:
                        state.fail(e)
                    else:
                        state.retry_at = retry_at
            self._wake_waiters()
            self._maybe_fetch()
            return
        for state, epoch in requested:
            if current(state, epoch) and state.tp in found and state.position is None:
                state.seek(found[state.tp][0])
        self._wake_waiters()
        self._maybe_fetch()

    async def _list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """
        ListOffsets for C{timestamps} (ms, or -1 latest, -2 earliest), one
        request per leader, retrying leadership and connection errors, and a
        new leader's C{OFFSET_NOT_AVAILABLE} (KIP-207), until
        C{default_api_timeout_ms}.

        @return: C{{tp: (offset, timestamp_ms)}}; offset -1 when there is none.
        """
        remaining = dict(timestamps)
        found: dict[TopicPartition, tuple[int, int]] = {}
        deadline = self.reactor.seconds() + self.default_api_timeout_ms / 1000.0
        last_error: Exception | None = None
        while remaining:
            if self._closed:
                raise ConsumerClosedError("consumer closed")
            try:
                await self.client.ensure_metadata({t for t, _ in remaining})
            except KafkaError as e:
                last_error = e
            by_node: dict[int, dict[str, list[dict]]] = {}
            for (topic, partition), ts in remaining.items():
                leader = self.client.leader_for(topic, partition)
                if leader < 0:
                    continue
                by_node.setdefault(leader, {}).setdefault(topic, []).append(
                    {"partition_index": partition, "timestamp": ts, "current_leader_epoch": -1})
            requests = []
            for node, topics in by_node.items():
                body = {"replica_id": -1, "isolation_level": _ISOLATION[self.isolation_level],
                        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                requests.append(defer.ensureDeferred(self.client.send(node, 2, body)))
            results = await defer.DeferredList(requests, consumeErrors=True) if requests else []
            for ok, response in results:
                if not ok:
                    last_error = response.value
                    continue
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = (topic.name, p.partition_index)
                        if tp not in remaining:
                            continue
                        code = p.error_code
                        if code == ErrorCode.none:
                            found[tp] = (int(p.offset), int(p.timestamp))
                            del remaining[tp]
                        elif code in RETRIABLE_METADATA_ERRORS or code == ErrorCode.offset_not_available:
                            # offset_not_available: a new leader whose high watermark has not reached
                            # the start of its epoch (KIP-207); asked again after the backoff
                            last_error = kafka_error(ErrorCode(int(code)), f"list offsets of {tp[0]}-{tp[1]}")
                        else:
                            raise kafka_error(ErrorCode(int(code)),
                                              f"list offsets of {tp[0]}-{tp[1]}: {ErrorCode(int(code)).name}")
            if not remaining:
                break
            if self.reactor.seconds() >= deadline:
                missing = ", ".join(f"{t}-{p}" for t, p in sorted(remaining))
                error = kafka_error(ErrorCode.request_timed_out,
                                    f"no offsets for {missing} within {self.default_api_timeout_ms} ms"
                                    + (f": {last_error}" if last_error else ""))
                raise error
            self.client.invalidate()
            await sleep(self.reactor, self.retry_backoff_ms / 1000.0)
        return found

    # --- life cycle ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("consumer closed")

    def close(self) -> defer.Deferred:
        """
        Leave the group (L{subscribe}d: commit with C{enable_auto_commit},
        C{on_partitions_revoked}, LeaveGroup unless static), stop fetching;
        pending polls fire with C{[]}.  Closes the L{KafkaClient} when the
        consumer made it.

        @return: a Deferred firing with C{None}.
        """
        if self._closed:
            return defer.succeed(None)
        if self.coordinator is not None and self._subscribed:
            self._subscribed = False
            return self.coordinator.close().addCallback(lambda _: self.close())
        self._closed = True
        for call in (self._wake_call, self._soon):
            if call is not None and call.active():
                call.cancel()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if waiter.timer is not None and waiter.timer.active():
                waiter.timer.cancel()
            waiter.deferred.callback([])
        for state in self._order:
            state.fail(ConsumerClosedError("consumer closed"))
            state.chunks.clear()
        if self._own_client:
            return self.client.close()
        return defer.succeed(None)

