"""
One suite of ZooKeeper scenarios, run against the in-memory model
(L{kafkatw.testing.FakeZooKeeperClient}, C{tests/unit/test_zookeeper_model.py})
and against the kazoo bridge and Debian's real ZooKeeper
(L{kafkatw.zookeeper.bridge.ZooKeeperClient},
C{tests/integration/test_zookeeper_model_real.py}): every difference is a
fidelity bug of the model (or of the bridge).

Each scenario is C{async def scenario_<name>(h, t)}: C{t} is the trial
C{TestCase} (its assertions), C{h} a harness with the same methods for both:

  - C{await h.client(chroot=None)}: a started client (its own session) in
    the test's chroot C{h.chroot} (or C{chroot}), stopped after the test;
  - C{await h.eventually(predicate, what)}: until C{predicate()} is true
    (the model advances its clock, the real suite polls; both bounded);
  - C{await h.sleep(seconds)}: let (simulated or real) time pass;
  - C{h.now_ms()}: the server's clock (ms since the epoch), for C{ctime};
  - C{await h.partition(client, replies_only=False)} / C{await h.heal(client)}:
    cut the network between C{client} and ZooKeeper both ways (nothing
    refused, nothing delivered; or only what ZooKeeper sends), and restore
    it;
  - C{await h.drop_connection(client)}: close C{client}'s connection; it
    reconnects at once within its session;
  - C{h.run(coroutine)}: a Deferred running it (for callbacks);
  - C{h.session_timeout_ms}, C{h.tick_time_ms}: the session timeout every
    client asks for, and the server's C{tickTime}.

Sources: ZooKeeper Programmer's Guide (znodes, sequence nodes, sessions,
watches, "Multi-update"), ZooKeeper 3.8's C{PrepRequestProcessor}, kazoo's
C{KazooClient}.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import DeferredList

from kafkatw.zookeeper.bridge import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetOp,
    ZooKeeperError,
    ZooKeeperUnavailableError,
)

__all__ = ["SCENARIOS", "PATHS", "random_operations", "make_call", "run_operations"]


async def _raises(t: Any, d: Any, error: type[BaseException]) -> BaseException:
    """Await C{d}, which must fail with exactly C{error} (not a subclass); return the exception."""
    try:
        await d
    except Exception as e:
        t.assertIs(type(e), error, f"{type(e).__name__}: {e}")
        return e
    t.fail(f"no {error.__name__}")
    raise AssertionError  # unreachable


class _Recorder:
    """A watch callback (or state listener) recording what it is called with."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> None:
        self.values.append(value)

    @property
    def last(self) -> Any:
        return self.values[-1] if self.values else "<no call>"


# -- znodes, versions, errors --------------------------------------------------


async def scenario_crud_with_versions(h: Any, t: Any) -> None:
    """create/get/set/delete; a set or delete at a stale version is BadVersion and changes nothing."""
    c = await h.client()
    t.assertEqual(await c.create("/n", b"v0"), "/n")
    data, stat = await c.get("/n")
    t.assertEqual((data, stat.version, stat.dataLength), (b"v0", 0, 2))
    t.assertEqual((await c.set("/n", b"v1", version=0)).version, 1)
    await _raises(t, c.set("/n", b"stale", version=0), BadVersionError)
    t.assertEqual(await c.get("/n"), (b"v1", (await c.exists("/n"))))
    t.assertEqual((await c.set("/n", b"v1")).version, 2)  # unconditional; same data still counts
    await _raises(t, c.delete("/n", version=1), BadVersionError)
    t.assertIsNotNone(await c.exists("/n"))
    await c.delete("/n", version=2)
    t.assertIsNone(await c.exists("/n"))
    await c.create("/empty")
    t.assertEqual((await c.get("/empty"))[0], b"")


async def scenario_error_types(h: Any, t: Any) -> None:
    """NoNode, NodeExists, NotEmpty; a delete checks the version before the children."""
    c = await h.client()
    for d in (c.get("/missing"), c.set("/missing", b""), c.delete("/missing"), c.get_children("/missing"),
              c.create("/missing/child")):
        await _raises(t, d, NoNodeError)
    t.assertIsNone(await c.exists("/missing"))
    await c.create("/p")
    await _raises(t, c.create("/p"), NodeExistsError)
    await c.create("/p/c")
    await _raises(t, c.delete("/p"), NotEmptyError)
    await _raises(t, c.delete("/p", version=7), BadVersionError)  # version first (PrepRequestProcessor)
    await _raises(t, c.delete("/p", version=0), NotEmptyError)
    t.assertEqual(await c.create("/a/b/c", b"x", makepath=True), "/a/b/c")
    t.assertEqual(await c.get_children("/a"), ["b"])
    t.assertEqual((await c.get("/a/b"))[0], b"")
    await c.ensure_path("/a/b/c/d")
    await c.ensure_path("/a/b/c/d")
    t.assertEqual(await c.get_children("/a/b/c"), ["d"])


async def scenario_recursive_delete(h: Any, t: Any) -> None:
    """A recursive delete removes the subtree, ignores the version (kazoo's), and a missing node is no error."""
    c = await h.client()
    for path in ("/r/a/x", "/r/a/y", "/r/b"):
        await c.create(path, makepath=True)
    await c.delete("/r", recursive=True, version=42)
    t.assertIsNone(await c.exists("/r"))
    await c.delete("/r", recursive=True)
    t.assertEqual(await c.get_children("/"), [])


async def scenario_sequential_counter(h: Any, t: Any) -> None:
    """
    A sequential znode's suffix counts the children ever created under its
    parent, ten digits: shared by every prefix, ephemeral or persistent,
    advanced by plain creates, not by deletes (though the parent's cversion
    is), never reused.
    """
    c = await h.client()
    await c.create("/q")
    t.assertEqual(await c.create("/q/n-", sequence=True), "/q/n-0000000000")
    t.assertEqual(await c.create("/q/n-", b"e", ephemeral=True, sequence=True), "/q/n-0000000001")
    t.assertEqual(await c.create("/q/other_", sequence=True), "/q/other_0000000002")
    await c.create("/q/plain")  # the 4th child created
    await c.delete("/q/n-0000000000")
    await c.delete("/q/plain")
    t.assertEqual((await c.exists("/q")).cversion, 6)
    t.assertEqual(await c.create("/q/n-", sequence=True), "/q/n-0000000004")
    t.assertEqual((await c.exists("/q")).cversion, 7)
    t.assertEqual(await c.get_children("/q"), ["n-0000000001", "n-0000000004", "other_0000000002"])
    t.assertEqual(await c.create("/s/deep/n-", sequence=True, makepath=True), "/s/deep/n-0000000000")
    # a failed create does not advance it
    await _raises(t, c.create("/q/n-0000000001"), NodeExistsError)
    t.assertEqual(await c.create("/q/n-", sequence=True), "/q/n-0000000005")
    # a multi's creates count too, even one deleted in the same multi
    await c.multi([CreateOp("/q/tmp"), DeleteOp("/q/tmp")])
    t.assertEqual(await c.create("/q/n-", sequence=True), "/q/n-0000000007")


async def scenario_stat_fields(h: Any, t: Any) -> None:
    """The Stat fields: zxids per transaction, versions, children counts, times, ephemeralOwner."""
    c = await h.client()
    before = h.now_ms()
    await c.create("/s", b"abc")
    s = await c.exists("/s")
    t.assertEqual((s.version, s.cversion, s.aversion, s.numChildren, s.dataLength, s.ephemeralOwner),
                  (0, 0, 0, 0, 3, 0))
    t.assertEqual((s.czxid, s.mzxid, s.pzxid), (s.czxid, s.czxid, s.czxid))
    t.assertEqual(s.ctime, s.mtime)
    t.assertTrue(before - 1000 <= s.ctime <= h.now_ms() + 1000, (before, s.ctime))
    await c.create("/s/child", ephemeral=True)
    child, parent = await c.exists("/s/child"), await c.exists("/s")
    t.assertEqual(child.ephemeralOwner, c.session_id)
    t.assertGreater(child.czxid, s.czxid)
    t.assertEqual((parent.cversion, parent.numChildren, parent.pzxid), (1, 1, child.czxid))
    t.assertEqual((parent.version, parent.mzxid), (0, s.mzxid))  # children are not data
    await h.sleep(0.01)
    changed = await c.set("/s", b"")
    t.assertEqual((changed.version, changed.dataLength, changed.czxid, changed.ctime), (1, 0, s.czxid, s.ctime))
    t.assertGreater(changed.mzxid, parent.pzxid)
    t.assertGreaterEqual(changed.mtime, s.mtime)
    t.assertEqual(changed.pzxid, parent.pzxid)
    t.assertEqual(changed, await c.exists("/s"))
    await c.delete("/s/child")
    after = await c.exists("/s")
    t.assertEqual((after.cversion, after.numChildren, after.version), (2, 0, 1))
    t.assertGreater(after.pzxid, changed.mzxid)


async def scenario_ephemeral_removed_on_close(h: Any, t: Any) -> None:
    """Closing a session deletes its ephemeral znodes at once; other sessions' watches fire."""
    owner, other = await h.client(), await h.client()
    await owner.create("/eph", b"o", ephemeral=True)
    await owner.create("/keep", b"k")
    stat = await other.exists("/eph")
    t.assertEqual(stat.ephemeralOwner, owner.session_id)
    t.assertNotEqual(owner.session_id, other.session_id)
    data, children = _Recorder(), _Recorder()
    await other.watch_data("/eph", data)
    await other.watch_children("/", children)
    t.assertEqual((data.values, children.values), ([b"o"], [["eph", "keep"]]))
    await owner.stop()
    t.assertIsNone(await other.exists("/eph"))
    t.assertIsNotNone(await other.exists("/keep"))
    await h.eventually(lambda: data.last is None and children.last == ["keep"], "the watches fired")
    t.assertEqual((data.values, children.values), ([b"o", None], [["eph", "keep"], ["keep"]]))


async def scenario_ephemeral_cannot_have_children(h: Any, t: Any) -> None:
    """A child of an ephemeral znode is refused (NoChildrenForEphemerals: a plain ZooKeeperError)."""
    c = await h.client()
    await c.create("/e", ephemeral=True)
    await _raises(t, c.create("/e/c"), ZooKeeperError)
    await _raises(t, c.create("/e/c", ephemeral=True), ZooKeeperError)
    e = await _raises(t, c.multi([CreateOp("/x"), CreateOp("/x/e", ephemeral=True), CreateOp("/x/e/c")]),
                      ZooKeeperError)
    t.assertEqual(e.op_index, 2)
    t.assertIsNone(await c.exists("/x"))
    t.assertEqual(await c.get_children("/e"), [])


# -- multi ---------------------------------------------------------------------


async def scenario_multi_all_or_nothing(h: Any, t: Any) -> None:
    """A multi is one transaction: every op or none; the failing op's error and index; one zxid."""
    c = await h.client()
    await c.create("/m", b"0")
    await c.create("/m/gone")
    results = await c.multi([CheckOp("/m", 0), CreateOp("/m/a", b"a"), CreateOp("/m/e", ephemeral=True),
                             SetOp("/m", b"1", 0), DeleteOp("/m/gone", 0)])
    t.assertEqual(results[:3], [True, "/m/a", "/m/e"])
    t.assertEqual(results[4], True)
    m = results[3]
    t.assertEqual((m.version, m.cversion, m.numChildren), (1, 3, 3))  # as of the set, op 3
    a, e = await c.exists("/m/a"), await c.exists("/m/e")
    t.assertEqual((a.czxid, e.czxid, m.pzxid), (m.mzxid, m.mzxid, m.mzxid))  # one transaction, one zxid
    t.assertEqual((a.ephemeralOwner, e.ephemeralOwner), (0, c.session_id))
    t.assertEqual(await c.multi([]), [])

    before = (await c.get("/m"), await c.get_children("/m"))
    failing = [
        ([CheckOp("/m", 0), CreateOp("/m/b")], BadVersionError, 0),
        ([CreateOp("/m/b"), CheckOp("/m/missing", -1)], NoNodeError, 1),
        ([CreateOp("/m/b"), SetOp("/m", b"2", 1), CreateOp("/m/a")], NodeExistsError, 2),
        ([SetOp("/m", b"2"), DeleteOp("/m")], NotEmptyError, 1),
        ([DeleteOp("/m/a", 3), CreateOp("/m/b")], BadVersionError, 0),
        ([CreateOp("/m/b"), CreateOp("/nope/b")], NoNodeError, 1),
    ]
    for ops, error, index in failing:
        failure = await _raises(t, c.multi(ops), error)
        t.assertEqual(failure.op_index, index, ops)
        t.assertEqual((await c.get("/m"), await c.get_children("/m")), before, ops)


async def scenario_multi_sees_its_own_changes(h: Any, t: Any) -> None:
    """Each op of a multi is checked against the ops before it."""
    c = await h.client()
    await c.create("/t", b"")
    results = await c.multi([CreateOp("/t/p"), CreateOp("/t/p/c", b"c"), SetOp("/t/p/c", b"d", 0),
                             SetOp("/t/p/c", b"e", 1), CheckOp("/t/p/c", 2)])
    t.assertEqual(results[:2], ["/t/p", "/t/p/c"])
    t.assertEqual([r.version for r in results[2:4]], [1, 2])
    t.assertEqual((await c.get("/t/p/c"))[0], b"e")
    await c.multi([DeleteOp("/t/p/c"), DeleteOp("/t/p"), CreateOp("/t/p", b"again")])
    t.assertEqual(await c.get_children("/t/p"), [])
    t.assertEqual((await c.get("/t/p"))[0], b"again")
    await c.multi([CreateOp("/t/tmp"), DeleteOp("/t/tmp")])
    t.assertIsNone(await c.exists("/t/tmp"))
    t.assertEqual((await c.exists("/t")).cversion, 5)  # p, delete p, p again, tmp, delete tmp
    failure = await _raises(t, c.multi([DeleteOp("/t/p"), SetOp("/t/p", b"x")]), NoNodeError)
    t.assertEqual(failure.op_index, 1)


async def scenario_fenced_set(h: Any, t: Any) -> None:
    """fenced_set: a check of the fence's version and a set, one multi."""
    c = await h.client()
    await c.create("/fence", b"1")
    await c.create("/data", b"a")
    t.assertEqual((await c.fenced_set("/fence", 0, "/data", b"b", 0)).version, 1)
    await c.set("/fence", b"2")
    await _raises(t, c.fenced_set("/fence", 0, "/data", b"c"), BadVersionError)
    await _raises(t, c.fenced_set("/fence", 1, "/data", b"c", 0), BadVersionError)
    await _raises(t, c.fenced_set("/no-fence", 0, "/data", b"c"), NoNodeError)
    await _raises(t, c.fenced_set("/fence", 1, "/no-data", b"c"), NoNodeError)
    t.assertEqual(await c.get("/data"), (b"b", await c.exists("/data")))


# -- watches -------------------------------------------------------------------


async def scenario_data_watch(h: Any, t: Any) -> None:
    """watch_data: now, then after each change; None while missing (it fires on creation); cancel stops it."""
    c, other = await h.client(), await h.client()
    seen = _Recorder()
    watch = await c.watch_data("/w", seen)
    t.assertEqual((seen.values, watch.path, watch.cancelled), ([None], "/w", False))
    steps = [(lambda: other.create("/w", b"1"), b"1"), (lambda: other.set("/w", b"2"), b"2"),
             (lambda: other.delete("/w"), None), (lambda: other.create("/w", b"3"), b"3")]
    for step, expected in steps:
        await step()
        await h.eventually(lambda: seen.last == expected, f"data {expected!r}")
    t.assertEqual(seen.values, [None, b"1", b"2", None, b"3"])
    watch.cancel()
    await other.set("/w", b"4")
    await other.set("/w", b"5")
    marker = _Recorder()
    await c.watch_data("/w", marker)
    await other.set("/w", b"6")
    await h.eventually(lambda: marker.last == b"6", "a later watch")
    t.assertEqual(seen.values, [None, b"1", b"2", None, b"3"])


async def scenario_children_watch(h: Any, t: Any) -> None:
    """watch_children: [] while missing; fires on the node's creation and deletion, and its children's only."""
    c, other = await h.client(), await h.client()
    seen = _Recorder()
    await c.watch_children("/p", seen)
    t.assertEqual(seen.values, [[]])
    await other.create("/p", b"")
    await h.eventually(lambda: len(seen.values) == 2, "creation")
    await other.create("/p/a")
    await h.eventually(lambda: seen.last == ["a"], "a child")
    await other.create("/p/a/grandchild")  # not a child of /p
    await other.set("/p", b"data")  # not a child either
    await other.set("/p/a", b"data")
    await other.create("/p/b", ephemeral=True)
    await h.eventually(lambda: seen.last == ["a", "b"], "b")
    await other.delete("/p/a", recursive=True)
    await h.eventually(lambda: seen.last == ["b"], "a deleted")
    await other.delete("/p/b")
    await h.eventually(lambda: seen.last == [] and len(seen.values) == 6, "b deleted")
    await other.delete("/p")
    await h.eventually(lambda: len(seen.values) == 7, "/p deleted")
    t.assertEqual(seen.values, [[], [], ["a"], ["a", "b"], ["b"], [], []])


async def scenario_watch_kinds_are_separate(h: Any, t: Any) -> None:
    """A data watch ignores the children, a children watch ignores the data (one-shot triggers of their kind)."""
    c, other = await h.client(), await h.client()
    await other.create("/k", b"0")
    data, children = _Recorder(), _Recorder()
    await c.watch_data("/k", data)
    await c.watch_children("/k", children)
    await other.create("/k/c")
    await other.set("/k", b"1")
    # ZooKeeper delivers a session's notifications in order: a data
    # notification for the create would come before this one
    await h.eventually(lambda: data.last == b"1" and children.last == ["c"], "both watches")
    await other.set("/k", b"2")
    await other.delete("/k/c")
    await h.eventually(lambda: data.last == b"2" and children.last == [], "both watches again")
    t.assertEqual(data.values, [b"0", b"1", b"2"])
    t.assertEqual(children.values, [[], ["c"], []])


async def scenario_watch_coalesces_changes(h: Any, t: Any) -> None:
    """
    A watch fires once per registration: changes made before the client
    re-reads give one callback with the newest value, never a value that
    was not current, in order, ending with the last.
    """
    c, other = await h.client(), await h.client()
    await other.create("/b", b"0")
    seen = _Recorder()
    await c.watch_versioned_data("/b", seen)
    t.assertEqual(seen.values, [(b"0", 0)])
    await DeferredList([other.set("/b", str(i).encode("ascii")) for i in range(1, 11)], fireOnOneErrback=True)
    await h.eventually(lambda: seen.last == (b"10", 10), "the last value")
    await h.sleep(0.2)
    versions = [version for _, version in seen.values]
    t.assertEqual(versions, sorted(set(versions)))  # in order, no value twice
    t.assertTrue(all(data == str(version).encode("ascii") for data, version in seen.values), seen.values)
    t.assertLessEqual(len(seen.values), 11)
    await other.delete("/b")
    await h.eventually(lambda: seen.last == (None, -1), "deletion")


async def scenario_watch_with_stat_orders_writes_by_zxid(h: Any, t: Any) -> None:
    """
    C{watch_data_with_stat} gives each value with its stat: its version, and
    the zxid of its last write (C{mzxid}), which is above the creation zxid
    (C{czxid}) of any znode made before that write -- what a broker's epoch
    is compared with (KIP-380).
    """
    c, other = await h.client(), await h.client()
    await other.create("/s", b"0")
    seen = _Recorder()
    await c.watch_data_with_stat("/s", seen)
    data, stat = seen.values[0]
    t.assertEqual((data, stat.version), (b"0", 0))
    t.assertEqual(stat.mzxid, stat.czxid)
    await other.create("/e", b"", ephemeral=True)
    _, registration = await other.get("/e")
    t.assertGreater(registration.czxid, stat.mzxid)
    await other.set("/s", b"1")
    await h.eventually(lambda: seen.last[0] == b"1", "the new value")
    _, changed = seen.last
    t.assertEqual(changed.version, 1)
    t.assertGreater(changed.mzxid, registration.czxid)
    t.assertEqual(changed.czxid, stat.czxid)
    await other.delete("/s")
    await h.eventually(lambda: seen.last == (None, None), "deletion")


# -- sessions ------------------------------------------------------------------


async def scenario_chroot(h: Any, t: Any) -> None:
    """Paths are relative to the chroot, which start creates; created paths come back relative."""
    c = await h.client()
    root = await h.client(chroot="/")
    t.assertEqual(await c.create("/x/n-", b"", sequence=True, makepath=True), "/x/n-0000000000")
    t.assertEqual(await root.get_children(h.chroot + "/x"), ["n-0000000000"])
    t.assertEqual(await c.get_children("/"), ["x"])
    nested = await h.client(chroot=h.chroot + "/x")
    t.assertEqual(await nested.get_children("/"), ["n-0000000000"])
    results = await nested.multi([CreateOp("/m"), SetOp("/m", b"v")])
    t.assertEqual(results[0], "/m")
    t.assertEqual((await root.get(h.chroot + "/x/m"))[0], b"v")


async def _session_ended(h: Any, t: Any, end: Callable[[Any, Any, Any], Any]) -> None:
    owner, other = await h.client(), await h.client()
    states, new_sessions = _Recorder(), _Recorder()
    owner.add_state_listener(states)

    async def recreate() -> None:
        new_sessions(owner.session_id)
        await owner.create("/owner", b"again", ephemeral=True)

    owner.on_new_session(lambda: h.run(recreate()))
    await owner.create("/owner", b"first", ephemeral=True)
    await owner.create("/persistent")
    gone = _Recorder()
    await other.watch_data("/owner", gone)
    old_session, old_password = owner.session_id, owner.session_password
    await end(owner, other, states)
    await h.eventually(lambda: new_sessions.values and owner.connected, "a new session")
    await h.eventually(lambda: gone.last == b"again", "the ephemeral node again")
    t.assertEqual(states.values.count("LOST"), 1)
    t.assertEqual(states.values[-3:], ["SUSPENDED", "LOST", "CONNECTED"])
    t.assertEqual(new_sessions.values, [owner.session_id])
    t.assertNotEqual(owner.session_id, old_session)
    t.assertEqual((await other.exists("/owner")).ephemeralOwner, owner.session_id)
    t.assertIsNotNone(await other.exists("/persistent"))
    # an ended session cannot be ended again
    t.assertFalse(await other.end_session(old_session, old_password))


async def scenario_end_session(h: Any, t: Any) -> None:
    """
    Another client ends a session by id and password: its ephemerals go, the
    owner gets a new session.  With a wrong password the session lives on,
    but the attempt takes its connection from the owner, who reconnects.
    """

    async def end(owner: Any, other: Any, states: Any) -> None:
        session = owner.session_id
        t.assertFalse(await other.end_session(session, b"\x01" * 16))  # wrong password
        await h.eventually(lambda: states.values == ["SUSPENDED", "CONNECTED"] and owner.connected, "reconnected")
        t.assertEqual(owner.session_id, session)
        t.assertIsNotNone(await other.exists("/owner"))
        t.assertTrue(await other.end_session(owner.session_id, owner.session_password))

    await _session_ended(h, t, end)


async def scenario_expire_session_for_testing(h: Any, t: Any) -> None:
    """The client expires its own session (as a second connection would): the same as end_session."""

    async def end(owner: Any, other: Any, states: Any) -> None:
        await owner.expire_session_for_testing()

    await _session_ended(h, t, end)


async def scenario_stop(h: Any, t: Any) -> None:
    """After stop: LOST, the ephemerals gone, operations and new watches fail as unavailable."""
    c, other = await h.client(), await h.client()
    states = _Recorder()
    c.add_state_listener(states)
    await c.create("/e", ephemeral=True)
    await c.stop()
    await h.eventually(lambda: states.values == ["LOST"], "LOST")
    t.assertFalse(c.connected)
    t.assertIsNone(await other.exists("/e"))
    await _raises(t, c.get("/"), ZooKeeperUnavailableError)
    await _raises(t, c.create("/x"), ZooKeeperUnavailableError)
    await _raises(t, c.watch_data("/x", _Recorder()), ZooKeeperUnavailableError)


async def scenario_connection_drop_keeps_session(h: Any, t: Any) -> None:
    """A dropped connection that comes back at once: SUSPENDED, CONNECTED, the same session; watches re-read."""
    c, other = await h.client(), await h.client()
    states, new_sessions, seen = _Recorder(), _Recorder(), _Recorder()
    c.add_state_listener(states)
    c.on_new_session(lambda: new_sessions(True))
    await c.create("/e", b"mine", ephemeral=True)
    await other.create("/d", b"1")
    await c.watch_data("/d", seen)
    session = c.session_id
    await h.drop_connection(c)
    await h.eventually(lambda: states.values == ["SUSPENDED", "CONNECTED"] and c.connected, "reconnected")
    t.assertEqual(c.session_id, session)
    t.assertEqual((await other.exists("/e")).ephemeralOwner, session)
    await other.set("/d", b"2")
    await h.eventually(lambda: seen.last == b"2", "the watch after the reconnection")
    t.assertEqual(new_sessions.values, [])
    t.assertEqual(seen.values[0], b"1")
    t.assertTrue(set(seen.values) <= {b"1", b"2"}, seen.values)


async def scenario_short_partition(h: Any, t: Any) -> None:
    """
    A partition shorter than the client's read timeout is a delay: no state
    change, the same session, requests and notifications arrive late.
    """
    c, other = await h.client(), await h.client()
    states, seen = _Recorder(), _Recorder()
    c.add_state_listener(states)
    await c.create("/e", ephemeral=True)
    await other.create("/d", b"1")
    await c.watch_data("/d", seen)
    session = c.session_id
    await h.partition(c)
    late = c.create("/late", b"x")
    await other.set("/d", b"2")
    set_late, watched_late = _Recorder(), _Recorder()
    c.watch_data("/late", watched_late).addCallback(set_late)
    await h.sleep(0.3)
    t.assertEqual(seen.values, [b"1"])  # the notification waits in the network
    t.assertEqual((set_late.values, watched_late.values), ([], []))  # and so does the new watch's read
    t.assertIsNone(await other.exists("/late"))
    await h.heal(c)
    t.assertEqual(await late, "/late")
    await h.eventually(lambda: seen.last == b"2", "the notification")
    await h.eventually(lambda: set_late.values, "the new watch")
    t.assertEqual(watched_late.values, [b"x"])
    t.assertEqual((states.values, c.session_id), ([], session))
    t.assertEqual((await other.exists("/e")).ephemeralOwner, session)


async def scenario_long_partition_expires_session(h: Any, t: Any) -> None:
    """
    A client cut off for longer than its session timeout: it notices first
    (SUSPENDED, after its read timeout, two thirds of the session timeout),
    the server expires the session after the timeout (its ephemerals go, other
    sessions' watches fire), and when the network heals the client learns it:
    what it asked meanwhile fails, LOST, then a new session.
    """
    c, other = await h.client(), await h.client()
    states, new_sessions, seen = _Recorder(), _Recorder(), _Recorder()
    c.add_state_listener(states)
    c.on_new_session(lambda: new_sessions(c.session_id))
    await c.create("/e", ephemeral=True)
    await other.create("/d", b"1")
    await c.watch_data("/d", seen)
    watched = _Recorder()
    await other.watch_data("/e", watched)
    session = c.session_id
    timeout_s = h.session_timeout_ms / 1000.0
    await h.partition(c)
    started = h.now_ms()
    in_flight = c.get("/d")
    # a watch set before the client noticed: its read is lost with the
    # connection, made again in the new session
    set_late, watched_late = _Recorder(), _Recorder()
    c.watch_data("/d", watched_late).addCallback(set_late)
    await h.eventually(lambda: states.values == ["SUSPENDED"], "SUSPENDED", timeout_s * 2)
    suspended_s = (h.now_ms() - started) / 1000.0
    await _raises(t, in_flight, ZooKeeperUnavailableError)
    t.assertIsNotNone(await other.exists("/e"))  # noticed before the session expired
    queued = c.get("/d")
    await _raises(t, c.watch_data("/d", _Recorder()), ZooKeeperUnavailableError)  # not while SUSPENDED
    await other.set("/d", b"2")
    await h.eventually(lambda: watched.last is None, "the expiry", timeout_s * 3)
    expired_s = (h.now_ms() - started) / 1000.0
    t.assertLess(suspended_s, timeout_s)
    t.assertGreater(expired_s, timeout_s * 2 / 3 - 0.5)
    t.assertLess(expired_s, timeout_s + h.tick_time_ms / 1000.0 + 2.0)
    t.assertEqual(states.values, ["SUSPENDED"])  # the client cannot know yet
    t.assertEqual(seen.values, [b"1"])
    await h.heal(c)
    await _raises(t, queued, ZooKeeperUnavailableError)
    await h.eventually(lambda: new_sessions.values and c.connected, "a new session", timeout_s * 2)
    t.assertEqual(states.values, ["SUSPENDED", "LOST", "CONNECTED"])
    t.assertNotEqual(c.session_id, session)
    t.assertEqual(new_sessions.values, [c.session_id])
    await h.eventually(lambda: seen.last == b"2", "the watch re-read")
    await h.eventually(lambda: set_late.values, "the watch set while cut off")
    t.assertEqual(watched_late.values, [b"2"])
    t.assertIsNone(await c.exists("/e"))


async def scenario_watch_order(h: Any, t: Any) -> None:
    """A session's notifications come in transaction order, across watches; a multi's in the order of its ops."""
    c, other = await h.client(), await h.client()
    for path in ("/a", "/b", "/c"):
        await other.create(path, b"0")
    seen = _Recorder()
    for path in ("/c", "/a", "/b"):
        await c.watch_data(path, lambda value, path=path: seen((path, value)))
    seen.values.clear()
    await other.multi([SetOp("/b", b"1"), SetOp("/c", b"1"), DeleteOp("/a")])
    await h.eventually(lambda: len(seen.values) == 3, "three notifications")
    await other.set("/c", b"2")
    await other.set("/b", b"2")
    await h.eventually(lambda: len(seen.values) == 5, "two more")
    t.assertEqual(seen.values, [("/b", b"1"), ("/c", b"1"), ("/a", None), ("/c", b"2"), ("/b", b"2")])


async def scenario_request_too_large(h: Any, t: Any) -> None:
    """
    The server reads no request longer than jute.maxbuffer (1 MiB - 1): it
    drops the connection (ConnectionLoss, SUSPENDED, CONNECTED in the same
    session) and nothing is written.  The limit is on the whole packet.
    """
    c = await h.client()
    states = _Recorder()
    c.add_state_listener(states)
    session = c.session_id
    limit = 0xFFFFF
    path = "/big"
    # a create's packet: header 8, path 4 + len, data 4 + len, one ACL 27, flags 4
    fits = limit - 8 - (4 + len((h.chroot + path).encode())) - 4 - 27 - 4
    t.assertEqual(await c.create(path, b"x" * fits), path)
    await c.delete(path)
    await _raises(t, c.create(path, b"x" * (fits + 1)), ZooKeeperUnavailableError)
    await h.eventually(lambda: states.values == ["SUSPENDED", "CONNECTED"] and c.connected, "reconnected")
    t.assertEqual(c.session_id, session)
    t.assertIsNone(await c.exists(path))
    await c.create(path, b"small")
    await _raises(t, c.set(path, b"y" * limit), ZooKeeperUnavailableError)
    await h.eventually(lambda: len(states.values) == 4 and c.connected, "reconnected again")
    await _raises(t, c.multi([CheckOp(path, 0), SetOp(path, b"z" * (limit // 2)), CreateOp("/big2", b"z" * (limit // 2))]),
                  ZooKeeperUnavailableError)
    await h.eventually(lambda: len(states.values) == 6 and c.connected, "reconnected a third time")
    t.assertEqual(await c.get(path), (b"small", await c.exists(path)))
    t.assertIsNone(await c.exists("/big2"))
    t.assertEqual(c.session_id, session)


async def scenario_ephemeral_held_until_expiry(h: Any, t: Any) -> None:
    """
    A new session cannot take an ephemeral znode of a session cut off (a
    broker restarted while its old session lives): NodeExists, with the old
    owner in ephemeralOwner, until that session expires.
    """
    old, new = await h.client(), await h.client()
    await old.create("/broker", b"old", ephemeral=True)
    await h.partition(old)
    await _raises(t, new.create("/broker", b"new", ephemeral=True), NodeExistsError)
    t.assertEqual((await new.exists("/broker")).ephemeralOwner, old.session_id)
    gone = _Recorder()
    await new.watch_data("/broker", gone)
    await h.eventually(lambda: gone.last is None, "the old session's expiry", h.session_timeout_ms / 1000.0 * 3)
    t.assertEqual(await new.create("/broker", b"new", ephemeral=True), "/broker")
    t.assertEqual((await new.exists("/broker")).ephemeralOwner, new.session_id)
    await h.heal(old)
    await h.eventually(lambda: old.connected, "the old client's new session", h.session_timeout_ms / 1000.0 * 2)
    await _raises(t, old.create("/broker", b"old", ephemeral=True), NodeExistsError)


async def scenario_one_way_partition(h: Any, t: Any) -> None:
    """
    Only ZooKeeper's replies are cut: a write reaches the server and is
    made, yet its client is told ConnectionLoss (the ambiguity every caller of
    a write must handle), SUSPENDED; the session lives on (the server still
    hears the client), and on heal the client reconnects to it.
    """
    c, other = await h.client(), await h.client()
    states = _Recorder()
    c.add_state_listener(states)
    await c.create("/e", ephemeral=True)
    session = c.session_id
    await h.partition(c, replies_only=True)
    write = c.create("/ambiguous", b"made")
    await h.eventually(lambda: states.values == ["SUSPENDED"], "SUSPENDED", h.session_timeout_ms / 1000.0 * 2)
    await _raises(t, write, ZooKeeperUnavailableError)
    t.assertEqual((await other.get("/ambiguous"))[0], b"made")
    t.assertEqual((await other.exists("/e")).ephemeralOwner, session)
    queued = c.get("/ambiguous")
    await h.heal(c)
    await h.eventually(lambda: states.values == ["SUSPENDED", "CONNECTED"] and c.connected, "reconnected")
    t.assertEqual(c.session_id, session)
    t.assertEqual((await queued)[0], b"made")
    await _raises(t, c.create("/ambiguous", b"again"), NodeExistsError)


SCENARIOS: dict[str, Callable[[Any, Any], Any]] = {
    name[len("scenario_"):]: value for name, value in sorted(globals().items()) if name.startswith("scenario_")
}


# -- random operations, for a differential run ----------------------------------

#: the znodes random operations touch: three names, three levels
_NAMES = ("a", "b", "c")
PATHS = tuple(f"/{x}" for x in _NAMES) + tuple(f"/{x}/{y}" for x in _NAMES for y in _NAMES[:2]) + (
    "/a/a/a", "/a/b/c", "/b/a/a")


def random_operations(rng: Any, count: int) -> list[tuple[str, tuple]]:
    """
    C{count} random client calls (C{(method name, arguments)}) on a few
    znodes: creates (ephemeral, sequential, with missing parents), sets and
    deletes at right and wrong versions, recursive deletes, multis of up to
    four ops, and reads.  Seeded by C{rng} (a L{random.Random}).
    """
    calls: list[tuple[str, tuple]] = []

    def version() -> int:
        return rng.choice((-1, -1, 0, 0, 1, 2))

    def data() -> bytes:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(4)))

    def multi_op() -> Any:
        path = rng.choice(PATHS)
        kind = rng.randrange(4)
        if kind == 0:
            return CheckOp(path, version())
        if kind == 1:
            return CreateOp(path, data(), rng.random() < 0.3)
        if kind == 2:
            return SetOp(path, data(), version())
        return DeleteOp(path, version())

    for _ in range(count):
        path = rng.choice(PATHS)
        kind = rng.randrange(100)
        if kind < 30:
            calls.append(("create", (path + ("-" if rng.random() < 0.2 else ""), data(), rng.random() < 0.3,
                                     path.endswith("-") or rng.random() < 0.2, rng.random() < 0.2)))
        elif kind < 45:
            calls.append(("set", (path, data(), version())))
        elif kind < 60:
            calls.append(("delete", (path, rng.random() < 0.1, version())))
        elif kind < 75:
            calls.append(("multi", ([multi_op() for _ in range(rng.randint(1, 4))],)))
        else:
            calls.append((rng.choice(("get", "get_children", "exists")), (path,)))
    return calls


def _normal(value: Any) -> Any:
    """A call's outcome, comparable across servers: stats without zxids and times (their order kept)."""
    if isinstance(value, BaseException):
        return ("error", type(value).__name__, getattr(value, "op_index", None))
    if hasattr(value, "cversion"):
        return ("stat", value.version, value.cversion, value.aversion, value.numChildren, value.dataLength,
                value.ephemeralOwner != 0, value.czxid == value.mzxid, value.pzxid == value.czxid)
    if isinstance(value, tuple):
        return tuple(_normal(v) for v in value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def make_call(client: Any, name: str, args: tuple) -> Any:
    """Make one call of L{random_operations} on C{client}; its Deferred."""
    if name == "create":
        path, value, ephemeral, sequence, makepath = args
        return client.create(path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath)
    if name == "delete":
        path, recursive, version = args
        return client.delete(path, recursive=recursive, version=version)
    return getattr(client, name)(*args)


async def run_operations(client: Any, calls: list[tuple[str, tuple]]) -> list[Any]:
    """Make C{calls} one after the other; their normalised outcomes, then every znode with its data and stat."""
    outcomes: list[Any] = []
    for name, args in calls:
        try:
            outcomes.append(_normal(await make_call(client, name, args)))
        except ZooKeeperError as e:
            outcomes.append(_normal(e))
    pending = ["/"]
    while pending:
        path = pending.pop()
        data, stat = await client.get(path)
        children = await client.get_children(path)
        outcomes.append((path, data, _normal(stat), children))
        pending.extend(f"{path.rstrip('/')}/{child}" for child in reversed(children))
    return outcomes
