"""
The ZooKeeper model (L{kafkatw.testing.FakeZooKeeper}) runs the scenario
suite of C{tests/_zookeeper_scenarios.py}, the one
C{tests/integration/test_zookeeper_model_real.py} runs against a real
ZooKeeper: deterministic, on a L{Clock} (session expiry included).
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial import unittest

from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.bridge import ZooKeeperError, ZooKeeperUnavailableError
from tests._zookeeper_scenarios import PATHS, SCENARIOS, make_call, random_operations

#: as the real suite: ZooKeeperFixture's tickTime, a timeout within [2, 20] ticks
TICK_TIME_MS = 500
SESSION_TIMEOUT_MS = 4000


class FakeHarness:
    """The scenarios' harness (C{tests/_zookeeper_scenarios.py}) over one L{FakeZooKeeper} on a L{Clock}."""

    session_timeout_ms = SESSION_TIMEOUT_MS
    tick_time_ms = TICK_TIME_MS

    def __init__(self, chroot: str = "/scenario") -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000.25)  # a wall-clock time, off the tick boundaries
        self.server = FakeZooKeeper(self.clock, tick_time_ms=TICK_TIME_MS)
        self.chroot = chroot

    async def client(self, chroot: str | None = None) -> FakeZooKeeperClient:
        client = FakeZooKeeperClient(self.server, chroot=chroot or self.chroot, reactor=self.clock,
                                     session_timeout_ms=SESSION_TIMEOUT_MS)
        await client.start()
        return client

    async def eventually(self, predicate: Callable[[], Any], what: str = "condition", timeout_s: float = 10.0) -> None:
        deadline = self.clock.seconds() + timeout_s
        self.clock.advance(0)
        while not predicate():
            if self.clock.seconds() >= deadline:
                raise AssertionError(f"{what}: not within {timeout_s} s (simulated)")
            self.clock.advance(0.01)

    async def sleep(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    async def partition(self, client: FakeZooKeeperClient, replies_only: bool = False) -> None:
        client.partition(replies_only)

    async def heal(self, client: FakeZooKeeperClient) -> None:
        client.heal()

    async def drop_connection(self, client: FakeZooKeeperClient) -> None:
        client.disconnect()
        client.reconnect()

    def run(self, coroutine: Any) -> Deferred:
        return Deferred.fromCoroutine(coroutine)


def _run(case: unittest.SynchronousTestCase, scenario: Callable[[Any, Any], Any]) -> FakeHarness:
    harness = FakeHarness()
    results: list[Any] = []
    Deferred.fromCoroutine(scenario(harness, case)).addBoth(results.append)
    if not results:
        case.fail("the scenario waits for something that never comes")
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return harness


class ScenarioTests(unittest.SynchronousTestCase):
    """Every scenario of the shared suite, on the model."""


def _scenario_test(scenario: Callable[[Any, Any], Any]) -> Callable[[ScenarioTests], None]:
    def test(self: ScenarioTests) -> None:
        _run(self, scenario)

    test.__doc__ = scenario.__doc__
    return test


for _name, _scenario in SCENARIOS.items():
    setattr(ScenarioTests, f"test_{_name}", _scenario_test(_scenario))


class ModelOnlyTests(unittest.SynchronousTestCase):
    """What only the model can show exactly: the timing of session expiry on its clock."""

    def test_negotiated_timeout_is_clamped_to_ticks(self) -> None:
        server = FakeZooKeeper(Clock(), tick_time_ms=2000)
        self.assertEqual([server.negotiate_timeout(ms) for ms in (100, 4000, 18000, 90000)], [4000, 4000, 18000, 40000])
        client = FakeZooKeeperClient(server, session_timeout_ms=1000)
        self.successResultOf(client.start())
        self.assertEqual(server.session_timeout_ms(client.session_id), 4000)

    def test_expiry_at_the_first_tick_after_the_timeout(self) -> None:
        clock = Clock()
        clock.advance(10.2)
        server = FakeZooKeeper(clock, tick_time_ms=500)
        owner = FakeZooKeeperClient(server, session_timeout_ms=4000)
        self.successResultOf(owner.start())
        self.successResultOf(owner.create("/e", ephemeral=True))
        owner.partition()  # at 10.2 s: the session is due at 14.2 s, expires at 14.5 s
        clock.advance(4.28)
        self.assertIsNotNone(server._lookup("/kafkatw/e"))
        clock.advance(0.03)
        self.assertIsNone(server._lookup("/kafkatw/e"))

    def test_client_notices_after_two_thirds_of_the_timeout(self) -> None:
        clock = Clock()
        server = FakeZooKeeper(clock, tick_time_ms=500)
        client = FakeZooKeeperClient(server, session_timeout_ms=3000)
        states: list[str] = []
        self.successResultOf(client.start())
        client.add_state_listener(states.append)
        client.partition()
        pending = client.get("/")
        clock.advance(1.99)
        self.assertEqual(states, [])
        self.assertNoResult(pending)
        clock.advance(0.01)
        self.assertEqual(states, ["SUSPENDED"])
        self.failureResultOf(pending, ZooKeeperUnavailableError)

    def test_reconnection_within_the_timeout_keeps_the_session(self) -> None:
        clock = Clock()
        server = FakeZooKeeper(clock, tick_time_ms=500)
        client = FakeZooKeeperClient(server, session_timeout_ms=4000)
        self.successResultOf(client.start())
        self.successResultOf(client.create("/e", ephemeral=True))
        session = client.session_id
        client.partition()
        clock.advance(3)  # SUSPENDED, the session alive on the server
        queued = client.create("/later")
        self.assertNoResult(queued)
        client.heal()
        self.assertEqual(self.successResultOf(queued), "/later")
        self.assertEqual(client.session_id, session)
        clock.advance(60)
        self.assertIsNotNone(server._lookup("/kafkatw/e"))

    def test_disconnect_longer_than_the_timeout_expires(self) -> None:
        clock = Clock()
        server = FakeZooKeeper(clock, tick_time_ms=500)
        client = FakeZooKeeperClient(server, session_timeout_ms=4000)
        states: list[str] = []
        self.successResultOf(client.start())
        client.add_state_listener(states.append)
        self.successResultOf(client.create("/e", ephemeral=True))
        session = client.session_id
        client.disconnect()
        clock.advance(5)
        self.assertIsNone(server._lookup("/kafkatw/e"))
        client.reconnect()
        self.assertEqual(states, ["SUSPENDED", "LOST", "CONNECTED"])
        self.assertNotEqual(client.session_id, session)

    def test_without_a_clock_sessions_never_expire(self) -> None:
        server = FakeZooKeeper()
        client = FakeZooKeeperClient(server)
        self.successResultOf(client.start())
        session = client.session_id
        client.disconnect()
        client.reconnect()
        self.assertEqual(client.session_id, session)
        self.assertRaises(RuntimeError, client.partition)


def _tree(node: Any) -> Any:
    """A znode and its descendants as plain values (data, stat, children)."""
    return node.data, node.stat, {name: _tree(child) for name, child in node.children.items()}


class PropertyTests(unittest.SynchronousTestCase):
    """Random operations (those of the differential run) on the model, against ZooKeeper's invariants."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(st.randoms(use_true_random=False), st.integers(1, 40))
    def test_invariants(self, rng: Any, count: int) -> None:
        """
        A failed write changes nothing (a multi included); every znode's
        numChildren is its children, its cversion counts their creates and
        deletes, its sequential suffixes count the creates; once the clock
        runs, every watch's last callback is the current value, and it had at
        most one callback per write after the first.
        """
        h = FakeHarness()
        client = self.successResultOf(Deferred.fromCoroutine(h.client()))
        watcher = self.successResultOf(Deferred.fromCoroutine(h.client()))
        calls: dict[tuple[str, str], list[Any]] = {}
        for path in PATHS:
            for kind, watch in (("data", watcher.watch_data), ("children", watcher.watch_children)):
                calls[path, kind] = []
                self.successResultOf(watch(path, calls[path, kind].append))
        writes = 0
        for name, args in random_operations(rng, count):
            before = _tree(h.server.root)
            results: list[Any] = []
            make_call(client, name, args).addBoth(results.append)
            if isinstance(results[0], Failure):
                results[0].trap(ZooKeeperError)
                self.assertEqual(_tree(h.server.root), before, (name, args))
            elif name in ("create", "set", "delete", "multi"):
                writes += 1
            h.clock.advance(0)
        for (path, kind), values in calls.items():
            self.assertEqual(values[-1], _view(_tree(h.server.root), h.chroot + path, kind, plain=True), (path, kind))
            # a write fires a watch at most once, however often it changes the znode
            self.assertLessEqual(len(values), 1 + writes, (path, kind, values))
        self._check_counts(h.server.root)

    def _check_counts(self, node: Any) -> None:
        self.assertEqual(node.stat.numChildren, len(node.children))
        self.assertGreaterEqual(node.stat.cversion, node.created)
        self.assertEqual((node.stat.cversion - node.created) + len(node.children), node.created)
        for child in node.children.values():
            self._check_counts(child)


def _view(tree: Any, path: str, kind: str, plain: bool = False) -> Any:
    """
    What a watch of C{kind} on C{path} sees in C{tree} (L{_tree}): the
    children or the data (C{plain}); else also what fires it (the version).
    """
    for part in [p for p in path.split("/") if p]:
        if part not in tree[2]:
            return ([] if kind == "children" else None) if plain else None
        tree = tree[2][part]
    data, stat, children = tree
    if kind == "children":
        return sorted(children) if plain else (stat.cversion, sorted(children))
    return data if plain else (stat.version, data)
