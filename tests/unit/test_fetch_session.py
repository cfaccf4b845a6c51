"""
Unit tests of fetch sessions (KIP-227): the broker's
L{kafkatw.broker.fetch_session} (session cache, contexts, eviction) and the
fetcher's L{kafkatw.client.fetch_session_handler}, alone and talking to each
other (a hypothesis state machine against a model), and the broker's Fetch
handler with sessions over real logs (L{BrokerHarness}).
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorFetchContext,
    SessionlessFetchContext,
    next_epoch,
)
from kafkatw.client.fetch_session_handler import FetchSessionHandler
from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.fetch import PartitionFetchData

from .test_broker import BrokerHarness

NOT_FOUND = int(ErrorCode.fetch_session_id_not_found)
INVALID_EPOCH = int(ErrorCode.invalid_fetch_session_epoch)


def request_topics(partitions: dict[tuple[str, int], int]) -> list[Any]:
    """Request C{topics} (as kio's FetchTopic) fetching each C{(topic, partition)} at its offset."""
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in partitions.items():
        by_topic.setdefault(topic, []).append(SimpleNamespace(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=-1,
            last_fetched_epoch=-1, log_start_offset=-1))
    return [SimpleNamespace(topic=t, partitions=ps) for t, ps in by_topic.items()]


def forgotten(keys: list[tuple[str, int]]) -> list[Any]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in keys:
        by_topic.setdefault(topic, []).append(partition)
    return [SimpleNamespace(topic=t, partitions=ps) for t, ps in by_topic.items()]


class Leader:
    """What the broker would read for each partition: C{key -> (high watermark, log start, LSO, records, error)}."""

    def __init__(self) -> None:
        self.state: dict[tuple[str, int], list[int]] = {}

    def read(self, topics: Any) -> list[tuple[str, list[PartitionFetchData]]]:
        answer = []
        for topic in topics:
            partitions = []
            for p in topic.partitions:
                hw, start, lso, records, error = self.state.setdefault((topic.topic, p.partition), [0, 0, 0, 0, 0])
                if error:
                    partitions.append(PartitionFetchData(p.partition, error, -1, -1, -1, (), 0))
                else:
                    partitions.append(PartitionFetchData(p.partition, 0, hw, lso, start, (b"x" * records,) if records
                                                         else (), records))
            answer.append((topic.topic, partitions))
        return answer


def keys_of(answer: list) -> set[tuple[str, int]]:
    return {(name, p.partition_index) for name, ps in answer for p in ps}


class EpochTests(unittest.TestCase):
    def test_next_epoch(self) -> None:
        self.assertEqual(next_epoch(INITIAL_EPOCH), 1)
        self.assertEqual(next_epoch(7), 8)
        self.assertEqual(next_epoch(0x7FFFFFFF), 1)
        self.assertEqual(next_epoch(FINAL_EPOCH), FINAL_EPOCH)


class FetchSessionCacheTests(unittest.TestCase):
    def setUp(self) -> None:
        self.cache = FetchSessionCache(3, eviction_ms=1000, rng=random.Random(1))
        self.leader = Leader()

    def full(self, partitions: dict[tuple[str, int], int], now_ms: int = 0, privileged: bool = False,
             session_id: int = 0) -> int:
        context = self.cache.new_context(session_id, INITIAL_EPOCH, privileged, request_topics(partitions), [], now_ms)
        self.assertIsInstance(context, FullFetchContext)
        read = self.leader.read(context.topics)
        answer, error, new_id = context.finish(read)
        self.assertEqual((error, keys_of(answer)), (0, set(partitions)))
        return new_id

    def test_sessionless_fetch_makes_no_session(self) -> None:
        context = self.cache.new_context(0, FINAL_EPOCH, False, request_topics({("t", 0): 0}), [], 0)
        self.assertIsInstance(context, SessionlessFetchContext)
        self.assertEqual(context.finish([("t", [])]), ([("t", [])], 0, 0))
        self.assertEqual(len(self.cache), 0)

    def test_full_fetch_creates_a_session_at_epoch_1(self) -> None:
        session_id = self.full({("t", 0): 0, ("t", 1): 5})
        self.assertNotEqual(session_id, 0)
        session = self.cache.get(session_id)
        self.assertEqual(session.epoch, 1)
        self.assertEqual({k: p.fetch_offset for k, p in session.partitions.items()}, {("t", 0): 0, ("t", 1): 5})
        self.assertEqual(self.cache.total_partitions, 2)

    def test_incremental_answers_only_what_changed(self) -> None:
        session_id = self.full({("t", 0): 0, ("t", 1): 0, ("u", 0): 0})
        context = self.cache.new_context(session_id, 1, False, [], [], 1)
        self.assertIsInstance(context, IncrementalFetchContext)
        self.assertEqual(len([p for t in context.topics for p in t.partitions]), 3)  # every partition is read
        self.assertEqual(context.finish(self.leader.read(context.topics)), ([], 0, session_id))
        self.leader.state[("t", 1)][0] = 4  # high watermark
        self.leader.state[("u", 0)][3] = 10  # records
        context = self.cache.new_context(session_id, 2, False, [], [], 2)
        answer, error, answered_id = context.finish(self.leader.read(context.topics))
        self.assertEqual((keys_of(answer), error, answered_id), ({("t", 1), ("u", 0)}, 0, session_id))
        self.leader.state[("t", 0)][1] = 1  # log start offset
        self.leader.state[("t", 1)][2] = 3  # last stable offset
        self.leader.state[("u", 0)][3] = 0
        context = self.cache.new_context(session_id, 3, False, [], [], 3)
        self.assertEqual(keys_of(context.finish(self.leader.read(context.topics))[0]), {("t", 0), ("t", 1)})

    def test_an_error_is_always_answered_and_its_end_too(self) -> None:
        session_id = self.full({("t", 0): 0})
        self.leader.state[("t", 0)][4] = int(ErrorCode.not_leader_or_follower)
        for epoch in (1, 2):
            context = self.cache.new_context(session_id, epoch, False, [], [], 0)
            self.assertEqual(keys_of(context.finish(self.leader.read(context.topics))[0]), {("t", 0)})
        self.leader.state[("t", 0)][4] = 0
        context = self.cache.new_context(session_id, 3, False, [], [], 0)
        self.assertEqual(keys_of(context.finish(self.leader.read(context.topics))[0]), {("t", 0)})
        context = self.cache.new_context(session_id, 4, False, [], [], 0)
        self.assertEqual(context.finish(self.leader.read(context.topics))[0], [])

    def test_adds_updates_and_forgets(self) -> None:
        session_id = self.full({("t", 0): 0, ("t", 1): 0})
        context = self.cache.new_context(session_id, 1, False, request_topics({("t", 1): 7, ("u", 0): 3}),
                                         forgotten([("t", 0)]), 0)
        session = self.cache.get(session_id)
        self.assertEqual({k: p.fetch_offset for k, p in session.partitions.items()}, {("t", 1): 7, ("u", 0): 3})
        # the added partition is answered (nothing answered for it yet); the updated one had not changed
        self.assertEqual(keys_of(context.finish(self.leader.read(context.topics))[0]), {("u", 0)})

    def test_forgetting_every_partition_closes_the_session(self) -> None:
        session_id = self.full({("t", 0): 0})
        context = self.cache.new_context(session_id, 1, False, [], forgotten([("t", 0)]), 0)
        self.assertIsInstance(context, SessionlessFetchContext)
        self.assertIsNone(self.cache.get(session_id))

    def test_session_errors(self) -> None:
        session_id = self.full({("t", 0): 0})
        context = self.cache.new_context(session_id + 1, 1, False, [], [], 0)
        self.assertIsInstance(context, SessionErrorFetchContext)
        self.assertEqual(context.finish([]), ([], NOT_FOUND, 0))
        context = self.cache.new_context(session_id, 2, False, [], [], 0)
        self.assertEqual(context.finish([]), ([], INVALID_EPOCH, 0))
        self.assertEqual(context.topics, ())
        # the session is untouched by either: epoch 1 still works
        self.assertIsInstance(self.cache.new_context(session_id, 1, False, [], [], 0), IncrementalFetchContext)

    def test_a_duplicate_request_answered_first_makes_the_other_an_epoch_error(self) -> None:
        session_id = self.full({("t", 0): 0})
        first = self.cache.new_context(session_id, 1, False, [], [], 0)
        self.cache.get(session_id).epoch = 5  # what a later request in the same session moved it to
        self.assertEqual(first.finish(self.leader.read(first.topics)), ([], INVALID_EPOCH, session_id))
        self.assertEqual(first.throttled(), (INVALID_EPOCH, session_id))

    def test_final_epoch_closes_and_initial_replaces(self) -> None:
        session_id = self.full({("t", 0): 0})
        replacement = self.full({("t", 0): 0}, session_id=session_id)
        self.assertIsNone(self.cache.get(session_id))
        self.assertIsNotNone(self.cache.get(replacement))
        context = self.cache.new_context(replacement, FINAL_EPOCH, False, request_topics({("t", 0): 0}), [], 0)
        self.assertIsInstance(context, SessionlessFetchContext)
        self.assertEqual(len(self.cache), 0)

    def test_zero_slots_make_every_fetch_sessionless(self) -> None:
        cache = FetchSessionCache(0)
        context = cache.new_context(0, INITIAL_EPOCH, True, request_topics({("t", 0): 0}), [], 0)
        self.assertIsInstance(context, SessionlessFetchContext)
        self.assertEqual(context.finish([])[2], 0)
        self.assertEqual(len(cache), 0)

    def test_moving_partitions_with_records_to_the_end(self) -> None:
        session_id = self.full({("t", 0): 0, ("t", 1): 0, ("u", 0): 0})
        self.leader.state[("t", 0)][3] = 5
        context = self.cache.new_context(session_id, 1, False, [], [], 0)
        context.finish(self.leader.read(context.topics))
        order = [(t.topic, p.partition) for t in self.cache.get(session_id).fetch_topics() for p in t.partitions]
        self.assertEqual(order, [("t", 1), ("u", 0), ("t", 0)])

    # --- eviction (Kafka's FetchSessionCacheShard.tryEvict) --------------------------

    def test_full_cache_of_recent_sessions_refuses_a_consumer(self) -> None:
        ids = [self.full({("t", i): 0}, now_ms=0) for i in range(3)]
        self.assertEqual(self.full({("t", 0): 0, ("t", 1): 0}, now_ms=10), 0)
        self.assertEqual(sorted(self.cache.sessions), sorted(ids))
        self.assertEqual(self.cache.evictions, 0)

    def test_a_stale_session_is_evicted_by_anyone(self) -> None:
        first = self.full({("t", 0): 0, ("t", 1): 0}, now_ms=0)
        others = [self.full({("t", 0): 0}, now_ms=600) for _ in range(2)]
        new = self.full({("t", 9): 0}, now_ms=1001)  # first unused for over eviction_ms
        self.assertNotEqual(new, 0)
        self.assertEqual(sorted(self.cache.sessions), sorted(others + [new]))
        self.assertIsNone(self.cache.get(first))
        self.assertEqual(self.cache.evictions, 1)

    def test_a_follower_evicts_the_smallest_consumer_session(self) -> None:
        small = self.full({("t", 0): 0}, now_ms=0)
        big = [self.full({("t", 0): 0, ("t", 1): 0}, now_ms=0) for _ in range(2)]
        new = self.full({("t", 0): 0}, now_ms=10, privileged=True)
        self.assertNotEqual(new, 0)
        self.assertEqual(sorted(self.cache.sessions), sorted(big + [new]))
        self.assertIsNone(self.cache.get(small))
        # a follower's session is safe from another follower's until it is older than eviction_ms
        self.cache.remove(big[0])
        self.cache.remove(big[1])
        self.full({("t", 0): 0}, now_ms=10, privileged=True)
        self.full({("t", 0): 0}, now_ms=10, privileged=True)
        self.assertEqual(self.full({("t", i): 0 for i in range(9)}, now_ms=20, privileged=True), 0)

    def test_a_bigger_session_evicts_an_old_smaller_one(self) -> None:
        ids = [self.full({("t", i): 0 for i in range(n)}, now_ms=0) for n in (3, 1, 2)]
        for session_id in ids:  # used again after eviction_ms: no longer protected as new, not stale
            context = self.cache.new_context(session_id, 1, False, [], [], 1500)
            context.finish(self.leader.read(context.topics))
        self.assertEqual(self.full({("t", 0): 0}, now_ms=1600), 0)  # one partition: not more than the smallest
        new = self.full({("t", 0): 0, ("t", 1): 0}, now_ms=1600)
        self.assertNotEqual(new, 0)
        self.assertIsNone(self.cache.get(ids[1]))
        self.assertEqual(self.cache.total_partitions, 3 + 2 + 2)


class FetchSessionHandlerTests(unittest.TestCase):
    def wanted(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], dict]:
        return {k: {"partition": k[1], "fetch_offset": o} for k, o in offsets.items()}

    def test_full_then_incremental(self) -> None:
        h = FetchSessionHandler()
        data = h.build(self.wanted({("t", 0): 0, ("t", 1): 0}))
        self.assertEqual((data.session_id, data.session_epoch, data.full, sorted(data.to_send)),
                         (0, 0, True, [("t", 0), ("t", 1)]))
        self.assertTrue(h.handle_response(0, 42, [("t", 0), ("t", 1)]))
        data = h.build(self.wanted({("t", 0): 3, ("t", 1): 0, ("u", 0): 0}))
        self.assertEqual((data.session_id, data.session_epoch, data.full), (42, 1, False))
        self.assertEqual(sorted(data.to_send), [("t", 0), ("u", 0)])
        self.assertEqual(data.topics(), [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 3}]},
                                         {"topic": "u", "partitions": [{"partition": 0, "fetch_offset": 0}]}])
        self.assertTrue(h.handle_response(0, 42, []))
        data = h.build(self.wanted({("u", 0): 0}))
        self.assertEqual((data.session_epoch, data.to_send, data.forgotten_topics_data()),
                         (2, {}, [{"topic": "t", "partitions": [0, 1]}]))

    def test_no_session_stays_full(self) -> None:
        h = FetchSessionHandler()
        h.build(self.wanted({("t", 0): 0}))
        self.assertTrue(h.handle_response(0, 0, [("t", 0)]))
        data = h.build(self.wanted({("t", 0): 1}))
        self.assertEqual((data.session_id, data.session_epoch, data.full), (0, 0, True))

    def test_errors_make_the_next_fetch_full(self) -> None:
        h = FetchSessionHandler()
        h.build(self.wanted({("t", 0): 0}))
        h.handle_response(0, 42, [])
        h.build(self.wanted({("t", 0): 0}))
        self.assertFalse(h.handle_response(INVALID_EPOCH, 0))
        data = h.build(self.wanted({("t", 0): 0}))
        self.assertEqual((data.session_id, data.session_epoch, data.full), (42, 0, True))  # closes 42, asks anew
        self.assertFalse(h.handle_response(NOT_FOUND, 0))
        self.assertEqual((h.session_id, h.epoch), (0, 0))
        h.handle_response(0, 43, [])
        h.build(self.wanted({("t", 0): 0}))
        h.handle_error()
        self.assertEqual((h.session_id, h.epoch), (43, 0))

    def test_a_partition_outside_the_session_is_refused(self) -> None:
        h = FetchSessionHandler()
        h.build(self.wanted({("t", 0): 0}))
        self.assertFalse(h.handle_response(0, 42, [("t", 9)]))
        self.assertTrue(h.full)


KEYS = [(t, p) for t in ("a", "b") for p in range(3)]


class SessionMachine(RuleBasedStateMachine):
    """
    A fetcher (L{FetchSessionHandler}) and a broker's cache
    (L{FetchSessionCache}) exchanging full and incremental fetches while the
    fetcher adds, removes and moves partitions, the leader's partitions
    change, requests or responses are lost, and other sessions evict this one.
    The model: after every answered round, the broker's session tracks
    exactly the fetcher's partitions at the fetcher's offsets, and an
    incremental answer holds exactly the partitions whose leader state
    changed since the fetcher last saw them (a full answer: all of them).
    """

    def __init__(self) -> None:
        super().__init__()
        self.cache = FetchSessionCache(2, eviction_ms=1000, rng=random.Random(0))
        self.handler = FetchSessionHandler()
        self.leader = Leader()
        self.wanted: dict[tuple[str, int], int] = {}
        #: key -> the leader state the fetcher last saw (hw, start, lso, error)
        self.seen: dict[tuple[str, int], tuple] = {}
        self.now_ms = 0
        self.rounds = 0
        #: key -> the request fields handed to the handler last
        self.last_fields: dict[tuple[str, int], dict] = {}

    def visible(self, key: tuple[str, int]) -> tuple:
        hw, start, lso, records, error = self.leader.state.setdefault(key, [0, 0, 0, 0, 0])
        return (-1, -1, -1, error) if error else (hw, start, lso, 0)

    @rule(key=st.sampled_from(KEYS), offset=st.integers(0, 3))
    def want(self, key: tuple[str, int], offset: int) -> None:
        self.wanted[key] = offset

    @rule(key=st.sampled_from(KEYS))
    def unwant(self, key: tuple[str, int]) -> None:
        self.wanted.pop(key, None)

    @rule(key=st.sampled_from(KEYS), field=st.integers(0, 4), value=st.integers(0, 2))
    def leader_changes(self, key: tuple[str, int], field: int, value: int) -> None:
        state = self.leader.state.setdefault(key, [0, 0, 0, 0, 0])
        state[field] = [0, int(ErrorCode.not_leader_or_follower), int(ErrorCode.offset_out_of_range)][value] \
            if field == 4 else value

    @rule(ms=st.sampled_from([1, 600, 1500]))
    def time_passes(self, ms: int) -> None:
        self.now_ms += ms

    @rule(size=st.integers(1, 8), privileged=st.booleans())
    def another_fetcher(self, size: int, privileged: bool) -> None:
        context = self.cache.new_context(0, INITIAL_EPOCH, privileged,
                                         request_topics({("z", i): 0 for i in range(size)}), [], self.now_ms)
        context.finish(Leader().read(context.topics))

    @precondition(lambda self: not self.handler.full)
    @rule(before=st.integers(0, 2))
    def epoch_nears_its_wrap(self, before: int) -> None:
        """Both ends jump to an epoch C{before} steps from 2**31-1 (a long session), so that rounds wrap it to 1."""
        session = self.cache.get(self.handler.session_id)
        if session is not None and session.epoch == self.handler.epoch:
            session.epoch = self.handler.epoch = 2**31 - 1 - before

    @precondition(lambda self: self.wanted)
    @rule(lose=st.sampled_from(["none"] * 6 + ["request", "response"]), reuse=st.booleans())
    def fetch(self, lose: str, reuse: bool) -> None:
        # the replica fetcher hands an unchanged partition's dict of the last round again;
        # a consumer builds new ones
        wanted = {}
        for k, o in self.wanted.items():
            fields = self.last_fields.get(k)
            if not reuse or fields is None or fields["fetch_offset"] != o:
                fields = self.last_fields[k] = {"partition": k[1], "fetch_offset": o}
            wanted[k] = fields
        data = self.handler.build(wanted)
        if lose == "request":
            self.handler.handle_error()
            return
        context = self.cache.new_context(data.session_id, data.session_epoch, False, request_topics(
            {k: f["fetch_offset"] for k, f in data.to_send.items()}), forgotten(data.to_forget), self.now_ms)
        answer, error, session_id = context.finish(self.leader.read(context.topics))
        if lose == "response":
            self.handler.handle_error()
            return
        self.rounds += 1
        answered = keys_of(answer)
        usable = self.handler.handle_response(error, session_id, answered)
        if error:
            assert not answer
            assert error in (NOT_FOUND, INVALID_EPOCH), error
            assert not data.full
            return
        assert usable
        if data.full:
            assert answered == set(self.wanted), (answered, self.wanted)
            self.seen = {}
        else:
            for key in data.to_forget:
                self.seen.pop(key, None)
            changed = {k for k in self.wanted if self.visible(k) != self.seen.get(k) or self.leader.state[k][3]
                       or self.leader.state[k][4]}
            assert answered == changed, (answered, changed)
        for key in answered:
            self.seen[key] = self.visible(key)
        session = self.cache.get(session_id)
        if session_id:
            assert {k: p.fetch_offset for k, p in session.partitions.items()} == self.wanted
            assert session.epoch == self.handler.epoch
        else:
            assert self.handler.full

    @invariant()
    def bounded(self) -> None:
        assert len(self.cache) <= 2
        assert self.cache.total_partitions == sum(len(s) for s in self.cache.sessions.values())


class SessionStateMachineTests(unittest.TestCase):
    def test_the_session_follows_the_fetcher(self) -> None:
        run_state_machine_as_test(SessionMachine, settings=settings(max_examples=150, stateful_step_count=60,
                                                                    deadline=None))


class BrokerSessionTests(unittest.TestCase):
    """The broker's Fetch handler with sessions, over real logs."""

    def setUp(self) -> None:
        self.h = BrokerHarness(self)
        self.h.create_topic("t", 3)

    def fetch(self, session_id: int, epoch: int, offsets: dict[int, int], forget: list[int] = (),
              replica_id: int = -1, max_wait_ms: int = 0) -> Any:
        body = {"replica_id": replica_id, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": "t", "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20} for p, o in offsets.items()]}]
                if offsets else [],
                "forgotten_topics_data": [{"topic": "t", "partitions": list(forget)}] if forget else [],
                "rack_id": ""}
        return self.h.call(1, 12, body)

    @staticmethod
    def answered(response: Any) -> dict[int, tuple[int, int]]:
        return {p.partition_index: (p.high_watermark, len(p.records or b""))
                for t in response.responses for p in t.partitions}

    def test_consumer_session(self) -> None:
        full = self.fetch(0, INITIAL_EPOCH, {0: 0, 1: 0, 2: 0})
        self.assertEqual((full.error_code, sorted(self.answered(full))), (0, [0, 1, 2]))
        session_id = full.session_id
        self.assertNotEqual(session_id, 0)
        idle = self.fetch(session_id, 1, {})
        self.assertEqual((idle.error_code, idle.session_id, idle.responses), (0, session_id, ()))
        self.h.produce("t", 1, build_batch([(None, b"v")]))
        changed = self.fetch(session_id, 2, {})
        [(index, (hw, size))] = self.answered(changed).items()
        self.assertEqual((index, hw), (1, 1))
        self.assertGreater(size, 0)
        # the consumer moves its offset: the partition is sent again; nothing changed at the leader
        self.assertEqual(self.answered(self.fetch(session_id, 3, {1: 1})), {})
        self.assertEqual(self.fetch(session_id, 3, {}).error_code, INVALID_EPOCH)
        self.assertEqual(self.fetch(session_id + 1, 4, {}).error_code, NOT_FOUND)

    def test_sessionless_fetch_is_answered_in_full_without_a_session(self) -> None:
        response = self.fetch(0, FINAL_EPOCH, {0: 0, 1: 0})
        self.assertEqual((response.session_id, sorted(self.answered(response))), (0, [0, 1]))
        self.assertEqual(len(self.h.apis.fetch_sessions), 0)

    def test_a_waiting_incremental_fetch_wakes_on_any_session_partition(self) -> None:
        session_id = self.fetch(0, INITIAL_EPOCH, {0: 0, 1: 0, 2: 0}).session_id
        waiting = self.h.request(1, 12, {
            "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": 1, "topics": [], "forgotten_topics_data": [], "rack_id": ""})
        self.assertIsInstance(waiting, defer.Deferred)
        self.assertNoResult(waiting)
        self.h.produce("t", 2, build_batch([(None, b"v")]))
        response = self.h.decode(1, 12, self.successResultOf(waiting))
        self.assertEqual(list(self.answered(response)), [2])

    def test_follower_session_keeps_idle_partitions_in_sync(self) -> None:
        """A follower's unlisted partitions count as fetched at their cached offset: the ISR stays full."""
        h = self.h
        for p in range(3):
            h.write_state("t", p, 0, 1, [0])
        h.apis.replica_manager.partitions[("t", 0)].apply_state([0, 1], 0, 1, [0, 1], 2)
        partition = h.apis.replica_manager.partitions[("t", 0)]
        h.produce("t", 0, build_batch([(None, b"v")]))
        session_id = self.fetch(0, INITIAL_EPOCH, {0: 1}, replica_id=1).session_id
        self.assertEqual(partition.high_watermark, 1)
        h.clock.advance(60)  # past replica.lag.time.max.ms (30 s)
        self.assertEqual(self.answered(self.fetch(session_id, 1, {}, replica_id=1)), {})
        self.assertEqual(partition.out_of_sync_replicas(30000), [])

    def test_zero_slots(self) -> None:
        self.h = BrokerHarness(self, **{"max.incremental.fetch.session.cache.slots": 0})
        self.h.create_topic("t", 3)
        response = self.fetch(0, INITIAL_EPOCH, {0: 0, 1: 0})
        self.assertEqual((response.session_id, sorted(self.answered(response))), (0, [0, 1]))


class ReplicaFetcherSessionTests(unittest.TestCase):
    """The follower's fetcher in a session with its leader (the fake leader of test_replica_fetcher)."""

    def session_response(self, session_id: int, records: bytes | None = None, high_watermark: int | None = None,
                         error_code: int = 0) -> Any:
        partitions = [] if high_watermark is None else [SimpleNamespace(
            partition_index=0, error_code=0, high_watermark=high_watermark, records=records)]
        return SimpleNamespace(error_code=error_code, session_id=session_id,
                               responses=[SimpleNamespace(topic="t", partitions=partitions)] if partitions else [])

    def test_full_then_incremental_then_full_after_a_session_error(self) -> None:
        from .test_replica_fetcher import FetcherHarness, batch, epochs_response

        h = FetcherHarness(self, [])
        h.epoch_request()
        h.answer(epochs_response(-1, -1))
        body = h.request(1)
        self.assertEqual((body["session_id"], body["session_epoch"], len(body["topics"])), (0, 0, 1))
        h.answer(self.session_response(77, batch(2, 0, epoch=5), 2))
        self.assertEqual((h.log.log_end_offset, h.log.high_watermark), (2, 2))
        # the fetch offset moved: an incremental fetch sends the partition
        body = h.request(1)
        self.assertEqual((body["session_id"], body["session_epoch"]), (77, 1))
        self.assertEqual(body["topics"][0]["partitions"][0]["fetch_offset"], 2)
        h.answer(self.session_response(77))  # nothing changed: an empty answer
        self.assertEqual(h.log.high_watermark, 2)
        body = h.request(1)
        self.assertEqual((body["session_id"], body["session_epoch"], body["topics"], body["forgotten_topics_data"]),
                         (77, 2, [], []))
        h.answer(self.session_response(0, error_code=INVALID_EPOCH))
        body = h.request(1)  # at once, no back-off: a full fetch closing session 77
        self.assertEqual((body["session_id"], body["session_epoch"], len(body["topics"])), (77, 0, 1))
        h.answer(self.session_response(78, None, 2))
        self.assertEqual(h.request(1)["session_epoch"], 1)

    def test_a_failed_fetch_makes_the_next_one_full(self) -> None:
        from .test_replica_fetcher import BACKOFF_MS, FetcherHarness, epochs_response

        h = FetcherHarness(self, [])
        h.epoch_request()
        h.answer(epochs_response(-1, -1))
        h.request(1)
        h.answer(self.session_response(77, None, 0))
        self.assertEqual(h.request(1)["session_epoch"], 1)
        [d] = [d for _, _, _, d in h.client.sent if not d.called]
        d.errback(ConnectionError("leader went away"))
        h.clock.advance(BACKOFF_MS / 1000.0)
        body = h.request(1)
        self.assertEqual((body["session_id"], body["session_epoch"], len(body["topics"])), (77, 0, 1))


class QuietPartitionsTests(unittest.TestCase):
    """
    A follower's incremental fetch skips reading its quiet partitions
    (L{IncrementalFetchContext.follower_read_topics}); a broker that reads
    every session partition, as Kafka does, must answer and keep its
    partitions (high watermarks, ISR, followers' states) exactly the same.
    Two brokers in lockstep, one with the skip and one without, under
    generated produces, follower fetches (in a session, their requests or
    responses sometimes lost), another follower's sessionless fetches, log
    start moves, leader epoch bumps, ISR shrinks, and time.
    """

    PARTITIONS = 3
    FOLLOWER = 1

    OTHER = 2

    def brokers(self) -> list[BrokerHarness]:
        from kafkatw.broker.metadata_cache import BrokerEndpoint

        brokers = []
        for skip in (True, False):
            h = BrokerHarness(self)
            h.apis.skip_quiet_follower_partitions = skip
            h.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in range(3)})
            h.create_topic("t", self.PARTITIONS, [0, self.FOLLOWER, self.OTHER])
            for p in range(self.PARTITIONS):
                h.write_state("t", p, 0, 1, [0, self.FOLLOWER, self.OTHER])
            brokers.append(h)
        return brokers

    @staticmethod
    def summary(response: Any) -> tuple:
        return (response.error_code, sorted(
            (t.topic, p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
             bytes(p.records or b"")) for t in response.responses for p in t.partitions))

    @staticmethod
    def state(h: BrokerHarness) -> list:
        out = []
        for p in range(QuietPartitionsTests.PARTITIONS):
            partition = h.apis.replica_manager.partitions[("t", p)]
            follower = partition.followers.get(QuietPartitionsTests.FOLLOWER)
            out.append((partition.leader_epoch, partition.high_watermark, partition.log.log_start_offset,
                        sorted(partition.isr), None if follower is None else (
                            follower.log_end_offset, follower.last_caught_up_ms, follower.last_fetch_ms,
                        follower.log_start_offset), partition.low_watermark))
        return out

    def lockstep(self, script: list) -> None:
        """Run C{script} on both brokers, comparing every answer and, after each step, their partitions."""
        skipping, reading = self.brokers()
        handler = FetchSessionHandler()
        #: the follower: its log end offset, log start offset and the leader epoch it follows, per partition
        offsets = {p: 0 for p in range(self.PARTITIONS)}
        starts = {p: 0 for p in range(self.PARTITIONS)}
        epochs = {p: 1 for p in range(self.PARTITIONS)}
        sessions: dict[int, int] = {}  # the skipping broker's session id -> the reading one's
        for step in script:
            kind = step[0]
            if kind == "produce":
                records = build_batch([(None, b"v")] * step[2])
                for h in (skipping, reading):
                    h.produce("t", step[1], records)
            elif kind == "log_start":
                for h in (skipping, reading):
                    log = h.apis.replica_manager.partitions[("t", step[1])].log
                    log.maybe_increment_log_start_offset(min(log.log_start_offset + step[2], log.high_watermark))
            elif kind == "epoch":
                for h in (skipping, reading):
                    partition = h.apis.replica_manager.partitions[("t", step[1])]
                    h.write_state("t", step[1], 0, partition.leader_epoch + 1, sorted(partition.isr))
                if step[2]:
                    epochs[step[1]] = skipping.apis.replica_manager.partitions[("t", step[1])].leader_epoch
            elif kind == "other":  # the other follower fetches one partition, to its end or not
                for h in (skipping, reading):
                    log = h.apis.replica_manager.partitions[("t", step[1])].log
                    offset = log.log_end_offset if step[2] else log.high_watermark
                    body = h.fetch_request("t", step[1], offset, replica_id=self.OTHER)
                    self.assertEqual(h.call(1, 12, body).responses[0].partitions[0].error_code, 0)
            elif kind == "time":
                for h in (skipping, reading):
                    h.clock.advance(step[1])
                    if step[2]:
                        for p in range(self.PARTITIONS):
                            h.apis.replica_manager.partitions[("t", p)].maybe_shrink_isr(30000)
            else:
                _, lose, dropped = step
                wanted = {("t", p): {"partition": p, "current_leader_epoch": epochs[p],
                                     "fetch_offset": offsets[p], "last_fetched_epoch": -1,
                                     "log_start_offset": starts[p], "partition_max_bytes": 1 << 20}
                          for p in range(self.PARTITIONS) if p not in dropped}
                if not wanted:
                    continue
                data = handler.build(wanted)
                answers = []
                for h in (skipping, reading):
                    session_id = data.session_id if h is skipping else sessions.get(data.session_id, 0)
                    answers.append(h.call(1, 12, {
                        "replica_id": self.FOLLOWER, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                        "isolation_level": 0, "session_id": session_id, "session_epoch": data.session_epoch,
                        "topics": data.topics(), "forgotten_topics_data": data.forgotten_topics_data(),
                        "rack_id": ""}))
                self.assertEqual(self.summary(answers[0]), self.summary(answers[1]))
                sessions[answers[0].session_id] = answers[1].session_id
                if lose:
                    handler.handle_error()
                    continue
                handler.handle_response(answers[0].error_code, answers[0].session_id,
                                        [(t.topic, p.partition_index) for t in answers[0].responses
                                         for p in t.partitions])
                for t in answers[0].responses:
                    for p in t.partitions:
                        if p.records:
                            offsets[p.partition_index] = \
                                skipping.apis.replica_manager.partitions[("t", p.partition_index)] \
                                .log.log_end_offset
                        if not p.error_code:  # as the replica fetcher moves its log start offset
                            starts[p.partition_index] = max(starts[p.partition_index], min(
                                p.log_start_offset, p.high_watermark, offsets[p.partition_index]))
            self.assertEqual(self.state(skipping), self.state(reading))


    def test_skipping_quiet_partitions_changes_nothing(self) -> None:
        from hypothesis import given

        fetch = st.tuples(st.just("fetch"), st.sampled_from([False] * 4 + [True]),
                          st.one_of(st.just(set()), st.just(set()), st.sets(st.integers(0, PARTITIONS_MAX),
                                                                             max_size=2)))
        steps = st.lists(st.one_of(
            st.tuples(st.just("produce"), st.integers(0, PARTITIONS_MAX), st.integers(1, 3)),
            fetch, fetch, fetch,
            st.tuples(st.just("log_start"), st.integers(0, PARTITIONS_MAX), st.integers(0, 2)),
            st.tuples(st.just("epoch"), st.integers(0, PARTITIONS_MAX), st.booleans()),
            st.tuples(st.just("time"), st.sampled_from([0.5, 20.0]), st.booleans()),
            st.tuples(st.just("other"), st.integers(0, PARTITIONS_MAX), st.booleans()),
        ), min_size=8, max_size=40)

        @settings(max_examples=60, deadline=None)
        @given(steps)
        def run(script: list) -> None:
            self.lockstep(script)

        run()

    def test_another_follower_moves_the_high_watermark(self) -> None:
        self.lockstep([("produce", 0, 1), ("fetch", False, set()), ("fetch", False, set()),
                       ("fetch", False, set()), ("other", 0, True), ("fetch", False, set())])

    def test_a_caught_up_follower_rejoins_the_isr(self) -> None:
        self.lockstep([("fetch", False, set()), ("fetch", False, set()), ("time", 20.0, True), ("time", 20.0, True),
                       ("other", 0, True), ("fetch", False, set()), ("fetch", False, set())])

    def test_the_followers_log_start_offset_moves_the_low_watermark(self) -> None:
        self.lockstep([("produce", 0, 3), ("fetch", False, set()), ("fetch", False, set()), ("other", 0, True),
                       ("fetch", False, set()), ("log_start", 0, 2), ("fetch", False, set()),
                       ("fetch", False, set())])


PARTITIONS_MAX = QuietPartitionsTests.PARTITIONS - 1
