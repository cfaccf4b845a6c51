"""
Followers fetch from their leaders: the replica fetcher threads of Kafka, as Deferreds.

Named after Kafka's C{ReplicaFetcherManager} / C{ReplicaFetcherThread}.  A
follower partition is assigned to one L{ReplicaFetcher} per (leader broker,
fetcher index), the index being the partition's hash modulo
C{num.replica.fetchers}.  Each fetcher runs one loop over its own connection to
the leader (kafkatw's Twisted client connection layer, as Kafka's brokers use
their C{NetworkClient}):

  1. partitions just handed over are first I{truncated by leader epoch}
     (KIP-101, KIP-279): OffsetForLeaderEpoch with the follower's latest epoch;
     the leader answers the largest epoch at or below it and where that epoch
     ended; the follower truncates to the smaller of that end offset and its
     own end of that epoch, so a returning old leader drops exactly its
     divergent tail — never by high watermark alone.  When the follower never
     had the epoch answered, it truncates to its end of the epoch below and
     asks again (L{kafkatw.storage.leader_epoch.offset_truncation_state}).
  2. then Fetch with C{replica_id} = this broker's id from each partition's log
     end offset, carrying the leader epoch it follows (KIP-320); the leader
     parks the fetch until data arrives (C{replica.fetch.wait.max.ms}).
  3. each partition's batches are appended byte for byte
     (L{kafkatw.storage.log.PartitionLog.append_as_follower}), and the
     follower's high watermark becomes min(leader's, own log end offset).

The fetches run in an incremental fetch session (KIP-227,
L{kafkatw.client.fetch_session_handler.FetchSessionHandler}): the first is
full, then each names only the partitions added or whose fetch offset (or
log start offset, leader epoch, max bytes) moved, forgets those no longer
fetched, and the leader answers only the partitions that changed — an idle
partition costs neither side its bytes.  A session error or failed fetch makes
the next fetch full; a leader with no session slot answers every fetch in
full.

A fetch offset the leader refuses (C{OFFSET_OUT_OF_RANGE}) is placed as
Kafka's C{handleOutOfRangeError} does: ListOffsets for the leader's log start
offset; below it the log restarts empty there, otherwise it is truncated by
leader epoch again.

Errors back off by C{replica.fetch.backoff.ms}.  C{FENCED_LEADER_EPOCH},
C{NOT_LEADER_OR_FOLLOWER} and C{UNKNOWN_LEADER_EPOCH} mean the state in
ZooKeeper has moved on: the partition waits for the broker to apply the new
state (which re-assigns it).
"""

from __future__ import annotations

import zlib
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..client.fetch_session_handler import FetchSessionHandler
from ..errors import ErrorCode, KafkaError, KafkaStorageError
from ..protocol.fetch import FetchRequestBody
from ..storage.leader_epoch import offset_truncation_state

__all__ = ["ReplicaFetcherManager", "ReplicaFetcher", "ReplicationQuota"]

_log = Logger()

_STOP_ON = {ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch,
            ErrorCode.unknown_topic_or_partition}
_SESSION_ERRORS = {int(ErrorCode.fetch_session_id_not_found), int(ErrorCode.invalid_fetch_session_epoch)}


class ReplicationQuota:
    """
    A follower's replication throttle (Kafka's C{follower.replication.throttled.rate},
    set by C{kafkatw reassign-partitions --throttle}): a token bucket of
    C{rate_bytes_per_s} that throttled partitions' fetched bytes drain; while
    it is empty they are left out of fetches.
    """

    def __init__(self, rate_bytes_per_s: int, now_s: float) -> None:
        self.rate = max(1, rate_bytes_per_s)
        self.tokens = float(self.rate)
        self.at = now_s

    def _refill(self, now_s: float) -> None:
        self.tokens = min(float(self.rate), self.tokens + (now_s - self.at) * self.rate)
        self.at = now_s

    def wait_s(self, now_s: float) -> float:
        """How long until throttled partitions may be fetched again (0: now)."""
        self._refill(now_s)
        return 0.0 if self.tokens > 0 else -self.tokens / self.rate + 0.001

    def record(self, size_bytes: int, now_s: float) -> None:
        self._refill(now_s)
        self.tokens -= size_bytes


class _FetchState:
    __slots__ = ("partition", "truncating", "out_of_range", "leader_epoch", "delayed_until", "lag", "fields")

    def __init__(self, partition: Any) -> None:
        self.partition = partition
        self.truncating = True
        #: the leader answered OFFSET_OUT_OF_RANGE: ask where its log starts before anything else
        self.out_of_range = False
        self.leader_epoch = partition.leader_epoch
        self.delayed_until = 0.0
        #: the leader's high watermark minus our log end offset at the partition's last answer
        self.lag = 0
        #: the request fields of its last fetch (a new dict when one of them changes, never changed in
        #: place: the fetch session compares them with what it sent)
        self.fields: dict | None = None


class ReplicaFetcher:
    """
    Fetches a set of partitions from one leader broker.

    @param client: a L{kafkatw.client.client.KafkaClient} whose C{brokers} map
        knows the leader's address.
    """

    def __init__(self, manager: "ReplicaFetcherManager", leader_id: int, index: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.index = index
        self.states: dict[tuple[str, int], _FetchState] = {}
        self._running = False
        self._wakeup: defer.Deferred | None = None
        self._wake_call: Any = None
        self._loop: defer.Deferred | None = None
        #: the fetch session with the leader (KIP-227)
        self.session = FetchSessionHandler()

    def __repr__(self) -> str:
        return f"<ReplicaFetcher {self.manager.broker_id}<-{self.leader_id} #{self.index} {sorted(self.states)}>"

    @property
    def max_lag(self) -> int:
        """The largest lag (leader's high watermark - our log end offset) of the fetched partitions."""
        return max((s.lag for s in self.states.values()), default=0)

    def add(self, partition: Any) -> None:
        self.states[(partition.topic, partition.partition)] = _FetchState(partition)
        self._wake()

    def remove(self, key: tuple[str, int]) -> None:
        self.states.pop(key, None)

    def start(self) -> None:
        self._running = True
        self._loop = defer.Deferred.fromCoroutine(self._run())
        self._loop.addErrback(lambda f: _log.failure("replica fetcher {fetcher} died", f, fetcher=repr(self)))

    def stop(self) -> defer.Deferred:
        self._running = False
        self._wake()
        return self._loop if self._loop is not None else defer.succeed(None)

    def _wake(self) -> None:
        call, self._wake_call = self._wake_call, None
        if call is not None and call.active():
            call.cancel()
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None:
            wakeup.callback(None)

    async def _run(self) -> None:
        manager = self.manager
        reactor = manager.reactor
        while self._running:
            now = reactor.seconds()
            # one pass over the partitions (thousands, mostly idle, a fetch)
            ready: dict[tuple[str, int], _FetchState] = {}
            out_of_range: dict[tuple[str, int], _FetchState] = {}
            truncating: dict[tuple[str, int], _FetchState] = {}
            for k, s in self.states.items():
                if s.delayed_until <= now:
                    ready[k] = s
                    if s.out_of_range:
                        out_of_range[k] = s
                    elif s.truncating:
                        truncating[k] = s
            if not ready:
                delays = [s.delayed_until - now for s in self.states.values()]
                self._wakeup = defer.Deferred()
                if delays:
                    self._wake_call = reactor.callLater(max(min(delays), 0.001), self._wake)
                await self._wakeup
                continue
            try:
                if out_of_range:
                    await self._handle_out_of_range(out_of_range)
                    continue
                if truncating:
                    await self._truncate(truncating)
                    continue
                await self._fetch(ready)
            except Exception as e:
                if not self._running:
                    break
                _log.warn("fetching from broker {leader} failed: {error}; backing off {ms} ms",
                          leader=self.leader_id, error=e, ms=manager.backoff_ms)
                self._delay(ready.values())

    def _delay(self, states: Any) -> None:
        until = self.manager.reactor.seconds() + self.manager.backoff_ms / 1000.0
        for s in states:
            s.delayed_until = until

    # --- truncation by leader epoch (KIP-101, KIP-279) ------------------------------

    async def _ask_leader(self, api_key: int, states: dict[tuple[str, int], _FetchState],
                          names: tuple[str, str], entry: Callable[[_FetchState], dict], body: dict
                          ) -> list[tuple[tuple[str, int], _FetchState, Any]]:
        """
        Send the leader one request of C{api_key} naming every partition of
        C{states} (C{names}: the request's and response's topic and partition
        field names; C{entry(state)}: a partition's other fields), and return
        C{(key, state, answer)} for each partition still fetched as it was when
        asked (one removed or re-added meanwhile is left out).
        """
        manager = self.manager
        topic_field, partition_field = names
        by_topic: dict[str, list] = {}
        for (topic, partition), s in states.items():
            by_topic.setdefault(topic, []).append({partition_field: partition, **entry(s)})
        body["topics"] = [{topic_field: t, "partitions": ps} for t, ps in by_topic.items()]
        response = await manager.client.send(self.leader_id, api_key, body, timeout_ms=manager.request_timeout_ms)
        if not self._running:
            return []
        answers = []
        for topic in response.topics:
            for p in topic.partitions:
                key = (getattr(topic, topic_field), getattr(p, partition_field))
                s = self.states.get(key)
                if s is not None and s is states.get(key):
                    answers.append((key, s, p))
        return answers

    async def _truncate(self, states: dict[tuple[str, int], _FetchState]) -> None:
        answers = await self._ask_leader(
            23, states, ("topic", "partition"),
            lambda s: {"current_leader_epoch": s.leader_epoch, "leader_epoch": s.partition.log.latest_epoch},
            {"replica_id": self.manager.broker_id})
        for key, s, p in answers:
            code = ErrorCode(int(p.error_code))
            if code != ErrorCode.none:
                self._partition_error(key, s, code)
                continue
            log = s.partition.log
            # Kafka's getOffsetTruncationState: the leader knows no epoch at
            # or below ours (or we have none): the high watermark; else the
            # smaller end of the answered epoch in both logs; when we never
            # had the answered epoch (KIP-279), our end of the epoch below
            # it, then ask again with our new latest epoch.
            target, completed = offset_truncation_state(
                log.leader_epoch_cache, log.log_end_offset, p.leader_epoch, p.end_offset, log.high_watermark)
            if target < log.log_end_offset:
                _log.info("{partition}: truncating from {leo} to {offset} (leader {leader} epoch {epoch})",
                          partition=s.partition.name, leo=log.log_end_offset, offset=target,
                          leader=self.leader_id, epoch=s.leader_epoch)
            if target <= log.log_end_offset:
                # also at the log end offset: the epochs that start there (a leader that wrote
                # nothing in them) go, so that the next question names the epoch below (KIP-279)
                if not self._truncate_log(key, s, target, fully=False):
                    continue
            s.truncating = not completed

    def _truncate_log(self, key: tuple[str, int], s: _FetchState, offset: int, fully: bool) -> bool:
        """
        Truncate through the manager's C{truncate}; a storage error has taken
        the partition's log dir offline (and the partition out of this
        fetcher): nothing more to do for it.

        @return: whether the log was truncated.
        """
        try:
            self.manager.truncate(s.partition, offset, fully)
        except KafkaStorageError as e:
            _log.error("{partition}: truncating to {offset} failed: {error}", partition=s.partition.name,
                       offset=offset, error=e)
            self.states.pop(key, None)
            return False
        return True

    # --- a fetch offset out of the leader's range ----------------------------------------

    async def _handle_out_of_range(self, states: dict[tuple[str, int], _FetchState]) -> None:
        """
        The leader refused our fetch offset (Kafka's
        C{AbstractFetcherThread.handleOutOfRangeError}): ask the leader's log
        start offset (ListOffsets C{EARLIEST_TIMESTAMP} as a replica).  Below
        it (retention or DeleteRecords removed what we lack), the log restarts
        empty there (C{truncate_fully_and_start_at}) and the next fetch asks
        from it; otherwise our log is ahead of the leader's: truncate by
        leader epoch again.
        """
        answers = await self._ask_leader(
            2, states, ("name", "partition_index"),
            lambda s: {"current_leader_epoch": s.leader_epoch, "timestamp": -2},  # EARLIEST_TIMESTAMP
            {"replica_id": self.manager.broker_id, "isolation_level": 0})
        for key, s, p in answers:
            s.out_of_range = False
            code = ErrorCode(int(p.error_code))
            if code != ErrorCode.none:
                self._partition_error(key, s, code)
                continue
            log = s.partition.log
            leader_start = int(p.offset)
            if leader_start > log.log_end_offset:
                _log.info("{partition}: log end offset {leo} below the leader's log start offset {offset}:"
                          " the log restarts there", partition=s.partition.name, leo=log.log_end_offset,
                          offset=leader_start)
                if self._truncate_log(key, s, leader_start, fully=True):
                    s.truncating = False
            else:
                s.truncating = True

    # --- fetching -------------------------------------------------------------------

    async def _fetch(self, states: dict[tuple[str, int], _FetchState]) -> None:
        manager = self.manager
        config = manager.config
        quota = manager.quota
        now = manager.reactor.seconds()
        throttled = {k for k in states if manager.throttled(*k)} if quota is not None else set()
        if throttled:
            wait_s = quota.wait_s(now)
            if wait_s > 0:
                for k in throttled:
                    states[k].delayed_until = now + wait_s
                states = {k: s for k, s in states.items() if k not in throttled}
                throttled = set()
                if not states:
                    return
        max_bytes = config["replica.fetch.max.bytes"]
        wanted: dict[tuple[str, int], dict] = {}
        # An idle partition's fields are those of its last fetch: the same dict, which the fetch
        # session recognises without comparing it (thousands of idle partitions a fetch).
        for key, s in states.items():
            log = s.partition.log
            fetch_offset = log.log_end_offset
            log_start_offset = log.log_start_offset
            partition_max_bytes = max(1, min(max_bytes, quota.rate)) if key in throttled else max_bytes
            fields = s.fields
            if fields is None or fields["fetch_offset"] != fetch_offset \
                    or fields["log_start_offset"] != log_start_offset \
                    or fields["current_leader_epoch"] != s.leader_epoch \
                    or fields["partition_max_bytes"] != partition_max_bytes:
                fields = s.fields = {
                    "partition": key[1],
                    "current_leader_epoch": s.leader_epoch,
                    "fetch_offset": fetch_offset,
                    "last_fetched_epoch": -1,
                    "log_start_offset": log_start_offset,
                    "partition_max_bytes": partition_max_bytes,
                }
            wanted[key] = fields
        session = self.session
        data = session.build(wanted)
        # encoded by hand, as the consumer's: about 4 µs a fetch where kio's schema walk took 25
        body = FetchRequestBody({
            "replica_id": manager.broker_id,
            "max_wait": config["replica.fetch.wait.max.ms"],
            "min_bytes": config["replica.fetch.min.bytes"],
            "max_bytes": config["replica.fetch.response.max.bytes"],
            "isolation_level": 0,
            "session_id": data.session_id,
            "session_epoch": data.session_epoch,
            "topics": data.topics(),
            "forgotten_topics_data": data.forgotten_topics_data(),
            "rack_id": "",
        })
        timeout_ms = manager.request_timeout_ms + config["replica.fetch.wait.max.ms"]
        try:
            response = await manager.client.send(self.leader_id, 1, body, timeout_ms=timeout_ms)
        except Exception:
            session.handle_error()
            raise
        if not self._running:
            return  # stopped meanwhile: append nothing more
        responses = response.responses
        usable = session.handle_response(response.error_code, getattr(response, "session_id", 0),
                                         [(t.topic, p.partition_index) for t in responses for p in t.partitions])
        if response.error_code:
            if response.error_code in _SESSION_ERRORS:
                _log.info("fetch session {session} with broker {leader}: {error}; the next fetch is full",
                          session=data.session_id, leader=self.leader_id,
                          error=ErrorCode(int(response.error_code)).name)
                return
            raise KafkaError(f"fetch error {response.error_code}")
        if not usable:
            raise KafkaError("the leader answered partitions outside the fetch session")
        for topic in responses:
            for p in topic.partitions:
                key = (topic.topic, p.partition_index)
                s = self.states.get(key)
                if s is None or s is not states.get(key):
                    continue
                if p.error_code:
                    self._partition_error(key, s, ErrorCode(int(p.error_code)))
                    continue
                log = s.partition.log
                records = p.records
                if records and key in throttled:
                    quota.record(len(records), manager.reactor.seconds())
                if records:
                    try:
                        manager.append(s.partition, records)
                    except KafkaError as e:
                        _log.warn("{partition}: appending the leader's batches failed: {error}",
                                  partition=s.partition.name, error=e)
                        self._delay([s])
                        continue
                log.update_high_watermark(min(p.high_watermark, log.log_end_offset))
                leader_start = getattr(p, "log_start_offset", -1)  # Fetch v5+
                if leader_start > log.log_start_offset:  # the leader's DeleteRecords or retention
                    log.maybe_increment_log_start_offset(min(leader_start, log.high_watermark))
                s.lag = p.high_watermark - log.log_end_offset

    def _partition_error(self, key: tuple[str, int], s: _FetchState, code: ErrorCode) -> None:
        if code == ErrorCode.offset_out_of_range:
            # Our log end offset is outside the leader's log: below its log start offset (the
            # log restarts there), or past its end (truncate by epoch again).
            _log.warn("{partition}: fetch offset out of range at the leader; asking where its log starts",
                      partition=s.partition.name)
            s.out_of_range = True
            self._delay([s])
        elif code in _STOP_ON:
            # The leader moved on: wait for the new partition state.
            _log.info("{partition}: leader {leader} answered {error}; waiting for the new state",
                      partition=s.partition.name, leader=self.leader_id, error=code.name)
            self._delay([s])
        else:
            _log.warn("{partition}: fetch error {error}", partition=s.partition.name, error=code.name)
            self._delay([s])


def _truncate_log(partition: Any, offset: int, fully: bool) -> None:
    if fully:
        partition.log.truncate_fully_and_start_at(offset)
    else:
        partition.log.truncate_to(offset)


class ReplicaFetcherManager:
    """
    Assigns follower partitions to fetchers.

    @param client: the broker's inter-broker L{kafkatw.client.client.KafkaClient}.
    @param broker_address: C{broker_address(broker_id) -> (host, port) | None}.
    @param append: C{append(partition, records)}: append fetched batches to a
        follower partition (the replica manager also updates what follows from it).
    @param truncate: C{truncate(partition, offset, fully)}: truncate a follower
        partition's log to C{offset}, or empty it to start at C{offset}
        (L{kafkatw.broker.replica_manager.ReplicaManager.truncate_as_follower},
        which reports a storage error; by default the log's own methods).
    """

    def __init__(self, broker_id: int, config: Any, client: Any, reactor: Any,
                 broker_address: Callable[[int], tuple[str, int] | None],
                 append: Callable[[Any, bytes], Any],
                 throttled: Callable[[str, int], bool] = lambda topic, partition: False,
                 truncate: Callable[[Any, int, bool], None] | None = None) -> None:
        self.broker_id = broker_id
        self.config = config
        self.client = client
        self.reactor = reactor
        self.broker_address = broker_address
        self.append = append
        self.truncate = truncate or _truncate_log
        #: C{throttled(topic, partition)}: whether the replication throttle applies
        #: (this broker is a replica being added by a reassignment).
        self.throttled = throttled
        #: the L{ReplicationQuota}, or C{None} when no throttle is set.
        self.quota: ReplicationQuota | None = None
        self.backoff_ms = config["replica.fetch.backoff.ms"]
        self.request_timeout_ms = config["replica.socket.timeout.ms"]
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[tuple[str, int], ReplicaFetcher] = {}
        self.stopped = False

    def _index(self, topic: str, partition: int) -> int:
        return zlib.crc32(f"{topic}-{partition}".encode()) % max(1, self.config["num.replica.fetchers"])

    def follow(self, partition: Any, leader_id: int) -> None:
        """Fetch C{partition} from C{leader_id}, truncating by epoch first."""
        key = (partition.topic, partition.partition)
        self.unfollow(partition)
        if self.stopped:
            return  # shutting down: no more fetching
        address = self.broker_address(leader_id)
        if address is not None:
            self.client.brokers[leader_id] = address
        fetcher_key = (leader_id, self._index(*key))
        fetcher = self.fetchers.get(fetcher_key)
        if fetcher is None:
            fetcher = self.fetchers[fetcher_key] = ReplicaFetcher(self, leader_id, fetcher_key[1])
            fetcher.start()
        fetcher.add(partition)
        self._assigned[key] = fetcher
        _log.info("{partition}: following broker {leader} at epoch {epoch} from offset {offset}",
                  partition=partition.name, leader=leader_id, epoch=partition.leader_epoch,
                  offset=partition.log_end_offset)

    def unfollow(self, partition: Any) -> None:
        key = (partition.topic, partition.partition)
        fetcher = self._assigned.pop(key, None)
        if fetcher is not None:
            fetcher.remove(key)
            if not fetcher.states:
                del self.fetchers[(fetcher.leader_id, fetcher.index)]
                fetcher.stop()

    def set_throttle(self, rate_bytes_per_s: int | None) -> None:
        """Set (or, with C{None}, lift) the follower replication throttle."""
        if rate_bytes_per_s is None:
            if self.quota is not None:
                _log.info("replication throttle lifted")
            self.quota = None
        elif self.quota is None or self.quota.rate != rate_bytes_per_s:
            _log.info("replication throttle: {rate} bytes/s for reassigned replicas", rate=rate_bytes_per_s)
            self.quota = ReplicationQuota(rate_bytes_per_s, self.reactor.seconds())

    def brokers_changed(self, addresses: dict[int, tuple[str, int]]) -> None:
        """New broker addresses (a restarted leader may listen elsewhere)."""
        self.client.brokers.update(addresses)

    @property
    def max_lag(self) -> int:
        """Kafka's C{ReplicaFetcherManager MaxLag}: the largest lag in records."""
        return max((f.max_lag for f in self.fetchers.values()), default=0)

    def stop(self) -> defer.Deferred:
        """Stop every fetcher; L{follow} does nothing afterwards."""
        self.stopped = True
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._assigned.clear()
        return defer.gatherResults([f.stop() for f in fetchers]).addCallback(lambda _: None)

