"""
Fakes and helpers for testing code built on kafkatw.

ZooKeeper:

  - L{running_zookeeper} / L{ZooKeeperFixture}: a real ZooKeeper server in a
    temporary directory (blocking start and stop; for integration tests).
  - L{ZooKeeperEnsembleFixture}: a real ensemble of ZooKeeper servers on
    127.0.0.1, whose members a test kills and restarts.
  - L{FakeZooKeeper} and L{FakeZooKeeperClient}: an in-memory ZooKeeper with the
    interface of L{kafkatw.zookeeper.bridge.ZooKeeperClient}, for unit tests: no
    sockets, no threads, no sleeps.  Several clients (sessions) may share one
    L{FakeZooKeeper}; ephemeral nodes belong to their client's session and vanish
    with L{FakeZooKeeperClient.expire_session} or L{FakeZooKeeperClient.stop}.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import posixpath
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from collections import deque
from typing import Any, Callable, Iterator

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, ensureDeferred, fail, succeed
from twisted.internet.error import ConnectionDone, ConnectionLost, ConnectionRefusedError
from twisted.internet.interfaces import IConsumer, IPushProducer, IStreamClientEndpoint, ITransport
from twisted.python.failure import Failure
from zope.interface import implementer

from kafkatw.broker.admin import AdminManager
from kafkatw.broker.apis import KafkaApis
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.broker.network import KafkaServerFactory
from kafkatw.broker.replica_manager import ReplicaManager
from kafkatw.client.client import KafkaClient
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.storage.log_manager import LogManager
from kafkatw.zookeeper.registry import Registry

from kafkatw.zookeeper.bridge import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetOp,
    ZnodeStat,
    ZooKeeperError,
    ZooKeeperUnavailableError,
    parse_connect_string,
)
from kafkatw.zookeeper.embedded import (
    QuorumServer,
    find_free_port,
    server_mode,
    start_blocking,
    stop_blocking,
    wait_ready,
)

__all__ = [
    "find_free_port",
    "running_zookeeper",
    "ZooKeeperFixture",
    "ZooKeeperEnsembleFixture",
    "EnsembleMember",
    "FakeZooKeeper",
    "FakeZooKeeperClient",
    "FakeWatch",
    "BrokerProcess",
    "running_cluster",
    "Cluster",
    "create_acls_in_zookeeper",
    "snapshot_tree",
    "wait_until",
    "wait_for",
    "TLSFiles",
    "make_tls_files",
]


# -- polling real processes ----------------------------------------------------


def wait_until(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.1) -> Any:
    """
    Poll C{predicate} (for integration tests with real processes, where no
    clock can be advanced) until it returns a true value or C{timeout_s}
    passes; bounded in time.

    @return: its last value (true, or false on the timeout).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    return predicate()


def wait_for(predicate: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition",
             interval_s: float = 0.1) -> Any:
    """
    L{wait_until}, failing with C{AssertionError} naming C{what} on the timeout.

    @return: the predicate's true value.
    """
    value = wait_until(predicate, timeout_s, interval_s)
    if not value:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
    return value


# -- real ZooKeeper ------------------------------------------------------------


class _StartStop:
    """C{with fixture as connect_string:}: C{start()} on entry (stopped again if it fails), C{stop()} on exit."""

    def __enter__(self) -> str:
        try:
            return self.start()  # type: ignore[attr-defined]
        except BaseException:
            self.stop()  # type: ignore[attr-defined]
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()  # type: ignore[attr-defined]


class ZooKeeperFixture(_StartStop):
    """
    A real ZooKeeper server for a test: C{start()} returns the connect string
    C{"127.0.0.1:PORT"}; C{stop()} stops it (idempotent).

    @param data_dir: where to keep data; a fresh temporary directory (removed on
        stop) when C{None}.
    """

    def __init__(self, data_dir: str | None = None, tick_time_ms: int = 500, ready_timeout_s: float = 30.0):
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kafkatw-zk-")
        self.tick_time_ms = tick_time_ms
        self.ready_timeout_s = ready_timeout_s
        self.port: int | None = None
        self.popen: Any = None
        self.start_seconds: float | None = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> str:
        started = time.monotonic()
        for attempt in range(3):
            # a free port may be taken before ZooKeeper binds it: then try another
            self.port = find_free_port()
            try:
                self.popen = start_blocking(self.data_dir, self.port, self.tick_time_ms)
                wait_ready(self.port, self.ready_timeout_s, self.popen)
                break
            except Exception:
                if self.popen is not None:
                    stop_blocking(self.popen)
                self.popen = None
                if attempt == 2:
                    raise
        self.start_seconds = time.monotonic() - started
        return self.connect_string

    def stop(self) -> None:
        try:
            if self.popen is not None:
                stop_blocking(self.popen)
                self.popen = None
        finally:
            if self._own_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = find_free_port()
        if port not in ports:
            ports.append(port)
    return ports


@dataclass
class EnsembleMember:
    """
    One member of a L{ZooKeeperEnsembleFixture}.

    @ivar server: its C{server.N} line (C{server.server_id} is its C{myid}).
    @ivar port: its client port on 127.0.0.1.
    @ivar popen: its running process, or C{None} while it is down.
    """

    server: QuorumServer
    port: int
    data_dir: str
    popen: Any = None

    @property
    def myid(self) -> int:
        return self.server.server_id

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class ZooKeeperEnsembleFixture(_StartStop):
    """
    A real ZooKeeper ensemble for a test: C{size} members on 127.0.0.1, each
    with its own client, peer and election port and data directory (ZooKeeper
    Administrator's Guide, "Clustered (Multi-Server) Setup"; members are
    C{myid} 1 to C{size}).  C{start()} returns the connect string listing
    every member, C{"127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"}; L{kill},
    L{restart} and L{leader} drive faults; C{stop()} stops every member
    (idempotent).

    A member's JVM takes about 70 MB; C{heap_mb} caps its heap.

    @param data_dir: where the members keep their data (C{member-N}
        directories); a fresh temporary directory (removed on stop) when C{None}.
    """

    def __init__(self, size: int = 3, data_dir: str | None = None, tick_time_ms: int = 500,
                 ready_timeout_s: float = 30.0, heap_mb: int = 64) -> None:
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kafkatw-zk-ensemble-")
        self.size = size
        self.tick_time_ms = tick_time_ms
        self.ready_timeout_s = ready_timeout_s
        self.heap_mb = heap_mb
        self.members: dict[int, EnsembleMember] = {}
        self.start_seconds: float | None = None

    @property
    def connect_string(self) -> str:
        return ",".join(f"127.0.0.1:{m.port}" for m in self.members.values())

    @property
    def servers(self) -> list[QuorumServer]:
        return [m.server for m in self.members.values()]

    def _allocate(self) -> None:
        ports = _distinct_free_ports(3 * self.size)
        self.members = {}
        for myid in range(1, self.size + 1):
            client, peer, election = ports[3 * (myid - 1): 3 * myid]
            self.members[myid] = EnsembleMember(QuorumServer(myid, "127.0.0.1", peer, election), client,
                                                os.path.join(self.data_dir, f"member-{myid}"))

    def _spawn(self, member: EnsembleMember) -> None:
        member.popen = start_blocking(member.data_dir, member.port, self.tick_time_ms,
                                      port_setting=f"member {member.myid}'s client port", servers=self.servers,
                                      myid=member.myid, heap_mb=self.heap_mb)

    def start(self) -> str:
        """
        Start every member and wait until each serves (a leader was elected).

        @return: the connect string.
        @raise kafkatw.zookeeper.embedded.ZooKeeperStartError: not serving
            within C{ready_timeout_s} (after three attempts on fresh ports).
        """
        started = time.monotonic()
        for attempt in range(3):
            # a free port may be taken before ZooKeeper binds it: then try other ports
            for member in self.members.values():  # an attempt that failed: its members start afresh
                shutil.rmtree(member.data_dir, ignore_errors=True)
            self._allocate()
            try:
                for member in self.members.values():
                    self._spawn(member)
                for member in self.members.values():
                    wait_ready(member.port, self.ready_timeout_s, member.popen)
                break
            except Exception:
                self._stop_members()
                if attempt == 2:
                    raise
        self.start_seconds = time.monotonic() - started
        return self.connect_string

    def kill(self, myid: int) -> None:
        """SIGKILL member C{myid} (a crash or power loss of that machine's ZooKeeper)."""
        member = self.members[myid]
        if member.running:
            member.popen.kill()
            member.popen.wait(10)
        member.popen = None

    def stop_member(self, myid: int) -> None:
        """SIGTERM member C{myid} (SIGKILL after 10 s)."""
        member = self.members[myid]
        if member.popen is not None:
            stop_blocking(member.popen)
        member.popen = None

    def restart(self, myid: int, timeout_s: float | None = None) -> None:
        """
        Start member C{myid} again (same ports and data) and wait until it
        serves: it rejoined a quorum.
        """
        member = self.members[myid]
        if member.running:
            raise RuntimeError(f"ZooKeeper member {myid} is running")
        self._spawn(member)
        wait_ready(member.port, timeout_s or self.ready_timeout_s, member.popen)

    def mode(self, myid: int) -> str | None:
        """Member C{myid}'s C{srvr} mode (C{"leader"}, C{"follower"}), C{None} while it does not serve."""
        member = self.members[myid]
        return server_mode(member.port, timeout_s=0.5) if member.running else None

    def leader(self) -> int | None:
        """The C{myid} of the member that leads (its C{srvr} says C{Mode: leader}), or C{None}."""
        for myid in self.members:
            if self.mode(myid) == "leader":
                return myid
        return None

    def _stop_members(self) -> None:
        # SIGTERM to all first: each JVM takes about 2 s to stop
        for member in self.members.values():
            if member.running:
                member.popen.terminate()
        for member in self.members.values():
            if member.popen is not None:
                try:
                    stop_blocking(member.popen)
                finally:
                    member.popen = None

    def stop(self) -> None:
        try:
            self._stop_members()
        finally:
            if self._own_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)


@contextlib.contextmanager
def running_zookeeper(tmpdir: str | os.PathLike | None = None, tick_time_ms: int = 500) -> Iterator[str]:
    """
    Run a real ZooKeeper for the C{with} block::

        with running_zookeeper(tmp_path) as connect:   # "127.0.0.1:PORT"
            ...

    The server is stopped (SIGTERM, then SIGKILL) however the block exits.
    """
    data_dir = None if tmpdir is None else os.path.join(os.fspath(tmpdir), "zookeeper")
    fixture = ZooKeeperFixture(data_dir, tick_time_ms)
    try:
        yield fixture.start()
    finally:
        fixture.stop()


# -- the fake ------------------------------------------------------------------


@dataclass
class _Node:
    data: bytes
    stat: ZnodeStat
    ephemeral_owner: int = 0
    children: dict[str, "_Node"] = field(default_factory=dict)
    #: how many children were ever created here: the next sequential suffix
    created: int = 0


@dataclass
class _Session:
    password: bytes
    timeout_ms: int  # negotiated
    expiry: Any = None  # the IDelayedCall expiring it while no client is heard from


#: ZooKeeper's error for a child of an ephemeral znode (C{NoChildrenForEphemerals});
#: the bridge raises it as a plain L{ZooKeeperError}.
_NO_CHILDREN_FOR_EPHEMERALS = "NoChildrenForEphemerals"


class FakeZooKeeper:
    """
    An in-memory ZooKeeper ensemble shared by L{FakeZooKeeperClient}s.

    It follows ZooKeeper 3.8 where the brokers can tell, as the scenarios of
    C{tests/_zookeeper_scenarios.py} check against a real server:

      - every write request is one transaction with a zxid of its own (a
        failed one too); a multi is one transaction (one zxid for all its
        ops), its watches fire after all of it, and closing a session deletes
        its ephemeral znodes in one transaction;
      - a sequential znode's suffix is the number of children ever created
        under its parent, ten digits, whatever their names and modes: never
        reused after a delete.  (ZooKeeper 3.8 numbers by the parent's
        C{cversion} as its C{PrepRequestProcessor} keeps it, which counts
        creates only; the C{cversion} of the parent's Stat counts deletes too,
        so the two differ once a child was deleted);
      - a delete checks the version before the children (L{BadVersionError}
        before L{NotEmptyError}); a recursive delete (kazoo's) ignores the
        version;
      - watches are ZooKeeper's one-shot triggers: a watch re-arms when its
        client re-reads (L{FakeWatch}), so changes made before that re-read
        are coalesced into one callback;
      - sessions: the timeout is negotiated into [2, 20] x C{tick_time_ms};
        a session whose client is not heard from (L{FakeZooKeeperClient.partition},
        L{FakeZooKeeperClient.disconnect}) expires at the first tick boundary
        after the timeout (C{ExpiryQueue.roundToNextInterval}); this needs
        C{clock}.

    Watches fire synchronously inside the operation that triggers them (after
    the change is applied), unless a C{clock} is given: then each notification
    is delivered with C{clock.callLater(0, ...)} so tests can C{clock.advance(0)}.

    @param tick_time_ms: ZooKeeper's C{tickTime} (ms); 2000 is its default.
    """

    def __init__(self, clock: Any = None, tick_time_ms: int = 2000) -> None:
        self.clock = clock
        self.tick_time_ms = tick_time_ms
        self._zxid = itertools.count(1)
        self._session_ids = itertools.count(0x1000)
        self._sessions: dict[int, _Session] = {}
        self.root = _Node(b"", ZnodeStat(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        self.clients: list[FakeZooKeeperClient] = []
        self._batch: list[tuple[str, str]] | None = None
        #: the longest request packet (bytes) the server reads (L{JUTE_MAX_BUFFER})
        self.max_request_bytes = JUTE_MAX_BUFFER

    def _now_ms(self) -> int:
        return int((self.clock.seconds() if self.clock is not None else time.time()) * 1000)

    # sessions

    def negotiate_timeout(self, requested_ms: int) -> int:
        """The session timeout (ms) the server grants: C{requested_ms} clamped to [2, 20] x C{tick_time_ms}."""
        return max(2 * self.tick_time_ms, min(20 * self.tick_time_ms, requested_ms))

    def new_session_id(self, timeout_ms: int = 18000) -> int:
        session = next(self._session_ids)
        self._sessions[session] = _Session(random.Random(session).randbytes(16), self.negotiate_timeout(timeout_ms))
        return session

    def session_password(self, session: int) -> bytes | None:
        """An open session's password, or C{None} once it has ended."""
        found = self._sessions.get(session)
        return None if found is None else found.password

    def session_timeout_ms(self, session: int) -> int | None:
        """An open session's negotiated timeout (ms), or C{None} once it has ended."""
        found = self._sessions.get(session)
        return None if found is None else found.timeout_ms

    def lose_contact(self, session: int) -> None:
        """
        The server stops hearing from C{session}'s client: unless it is heard
        from again (L{regain_contact}), the session expires at the first tick
        boundary after its timeout.  Without a clock, nothing expires.
        """
        found = self._sessions.get(session)
        if found is None or found.expiry is not None or self.clock is None:
            return
        now_ms = self._now_ms()
        deadline_ms = ((now_ms + found.timeout_ms) // self.tick_time_ms + 1) * self.tick_time_ms
        found.expiry = self.clock.callLater((deadline_ms - now_ms) / 1000.0, self._expired, session)

    def regain_contact(self, session: int) -> bool:
        """
        C{session}'s client is heard from again (it reconnected).

        @return: whether the session is still open (else the client learns that it expired).
        """
        found = self._sessions.get(session)
        if found is None:
            return False
        if found.expiry is not None:
            found.expiry.cancel()
            found.expiry = None
        return True

    def _expired(self, session: int) -> None:
        found = self._sessions.get(session)
        if found is not None:
            found.expiry = None
        self.expire(session)

    def end_session(self, session: int, password: bytes) -> bool:
        """
        What L{kafkatw.zookeeper.bridge.ZooKeeperClient.end_session} asks the
        server: close an open session given its password (its ephemeral
        nodes go at once; a connected owner sees C{SUSPENDED}, C{LOST}, then
        a new session).  The attempt alone, even with a wrong password,
        takes the session's connection from its owner (ZooKeeper's
        C{processConnectRequest} closes it first): the owner sees
        C{SUSPENDED}, then C{CONNECTED} again in the same session.

        @return: whether the session was open (and the password right).
        """
        found = self._sessions.get(session)
        if found is None:
            return False
        if found.password != password:
            for client in list(self.clients):
                if client.session_id == session:
                    client._connection_taken()
            return False
        self.expire(session)
        for client in list(self.clients):
            if client.session_id == session:
                client._session_closed_by_server()
        return True

    def expire(self, owner: int) -> None:
        """End session C{owner} (one transaction): delete every ephemeral node of it."""
        found = self._sessions.pop(owner, None)
        if found is not None and found.expiry is not None:
            found.expiry.cancel()
        zxid, now = next(self._zxid), self._now_ms()
        with self._batched():
            for path in sorted(self._ephemerals(self.root, "/", owner), key=len, reverse=True):
                if self._lookup(path) is not None:
                    self._delete(path, -1, zxid, now)

    # tree operations on absolute paths (already chrooted)

    def _lookup(self, path: str) -> _Node | None:
        node = self.root
        for part in path.split("/"):
            if part:
                node = node.children.get(part)
                if node is None:
                    return None
        return node

    def create(self, path: str, data: bytes, owner: int, sequence: bool, makepath: bool) -> str:
        """Create a znode (one transaction; C{makepath} creates each missing ancestor first, as kazoo does)."""
        parent_path = posixpath.dirname(path)
        if makepath and self._lookup(parent_path) is None:
            self.create(parent_path, b"", 0, False, True)
        return self._create(path, data, owner, sequence, next(self._zxid), self._now_ms())

    def _create(self, path: str, data: bytes, owner: int, sequence: bool, zxid: int, now: int) -> str:
        parent_path, name = posixpath.split(path)
        if not name and not sequence:
            raise ZooKeeperError(f"BadArguments: invalid path {path!r}")
        parent = self._lookup(parent_path)
        if parent is None:
            raise NoNodeError(parent_path)
        if sequence:
            name = f"{name}{parent.created:010d}"
            path = posixpath.join(parent_path, name)
        if name in parent.children:
            raise NodeExistsError(path)
        if parent.ephemeral_owner:
            raise ZooKeeperError(f"{_NO_CHILDREN_FOR_EPHEMERALS}: {path}")
        parent.children[name] = _Node(data, ZnodeStat(zxid, zxid, now, now, 0, 0, 0, owner, len(data), 0, zxid), owner)
        parent.created += 1
        s = parent.stat
        parent.stat = s._replace(cversion=s.cversion + 1, numChildren=len(parent.children), pzxid=zxid)
        self._fire(path, "created")
        self._fire(parent_path, "child")
        return path

    def set(self, path: str, data: bytes, version: int) -> ZnodeStat:
        """Set a znode's data (one transaction)."""
        return self._set(path, data, version, next(self._zxid), self._now_ms())

    def _set(self, path: str, data: bytes, version: int, zxid: int, now: int) -> ZnodeStat:
        node = self._lookup(path)
        if node is None:
            raise NoNodeError(path)
        if version != -1 and version != node.stat.version:
            raise BadVersionError(f"{path}: version {node.stat.version}, expected {version}")
        s = node.stat
        node.data = data
        node.stat = s._replace(mzxid=zxid, mtime=now, version=s.version + 1, dataLength=len(data))
        self._fire(path, "changed")
        return node.stat

    def delete(self, path: str, version: int, recursive: bool) -> None:
        """
        Delete a znode (one transaction); C{recursive} is kazoo's: its
        descendants first, each delete a transaction of its own, the version
        ignored and a missing node no error.
        """
        if recursive:
            node = self._lookup(path)
            if node is None:
                return
            for child in sorted(node.children):
                self.delete(posixpath.join(path, child), -1, True)
            if self._lookup(path) is not None:
                self._delete(path, -1, next(self._zxid), self._now_ms())
            return
        self._delete(path, version, next(self._zxid), self._now_ms())

    def _delete(self, path: str, version: int, zxid: int, now: int) -> None:
        node = self._lookup(path)
        if node is None or path == "/":
            raise NoNodeError(path)
        if version != -1 and version != node.stat.version:
            raise BadVersionError(f"{path}: version {node.stat.version}, expected {version}")
        if node.children:
            raise NotEmptyError(path)
        parent_path, name = posixpath.split(path)
        parent = self._lookup(parent_path)
        assert parent is not None
        del parent.children[name]
        s = parent.stat
        parent.stat = s._replace(cversion=s.cversion + 1, numChildren=len(parent.children), pzxid=zxid)
        self._fire(path, "deleted")
        self._fire(parent_path, "child")

    def multi(self, ops: list, owner: int) -> list:
        """
        ZooKeeper's multi on absolute paths, one transaction: every op is
        validated in order against the changes of the ops before it (as
        ZooKeeper's C{PrepRequestProcessor} does), then all are applied with
        one zxid and the watches fire after the last -- or, at the first op
        that fails, none is and its error is raised with its C{op_index}.
        Sequential creates are not supported (nor by the bridge's L{CreateOp}).

        @param owner: the session that owns the ephemeral nodes created.
        @return: per op: C{True} (check, delete), the created path, the new L{ZnodeStat}.
        """
        zxid, now = next(self._zxid), self._now_ms()
        # path -> (version, number of children, ephemeral owner), None once deleted
        overlay: dict[str, tuple[int, int, int] | None] = {}

        def state(path: str) -> tuple[int, int, int] | None:
            if path in overlay:
                return overlay[path]
            node = self._lookup(path)
            return None if node is None else (node.stat.version, len(node.children), node.ephemeral_owner)

        def fail(index: int, error: ZooKeeperError) -> None:
            error.op_index = index
            raise error

        for index, op in enumerate(ops):
            path = op.path
            current = state(path)
            parent_path = posixpath.dirname(path)
            if isinstance(op, CreateOp):
                parent = state(parent_path)
                if parent is None:
                    fail(index, NoNodeError(parent_path))
                assert parent is not None
                if current is not None:
                    fail(index, NodeExistsError(path))
                if parent[2]:
                    fail(index, ZooKeeperError(f"{_NO_CHILDREN_FOR_EPHEMERALS}: {path}"))
                overlay[path] = (0, 0, owner if op.ephemeral else 0)
                overlay[parent_path] = (parent[0], parent[1] + 1, parent[2])
                continue
            if not isinstance(op, (CheckOp, SetOp, DeleteOp)):
                raise TypeError(f"not a multi operation: {op!r}")
            if current is None:
                fail(index, NoNodeError(path))
            assert current is not None
            if op.version != -1 and op.version != current[0]:
                fail(index, BadVersionError(f"{path}: version {current[0]}, expected {op.version}"))
            if isinstance(op, SetOp):
                overlay[path] = (current[0] + 1, current[1], current[2])
            elif isinstance(op, DeleteOp):
                if current[1]:
                    fail(index, NotEmptyError(path))
                parent = state(parent_path)
                assert parent is not None
                overlay[path] = None
                overlay[parent_path] = (parent[0], parent[1] - 1, parent[2])
        results: list = []
        with self._batched():
            for op in ops:
                if isinstance(op, CheckOp):
                    results.append(True)
                elif isinstance(op, CreateOp):
                    results.append(self._create(op.path, op.value, owner if op.ephemeral else 0, False, zxid, now))
                elif isinstance(op, SetOp):
                    results.append(self._set(op.path, op.value, op.version, zxid, now))
                else:
                    self._delete(op.path, op.version, zxid, now)
                    results.append(True)
        return results

    def _ephemerals(self, node: _Node, path: str, owner: int) -> Iterator[str]:
        for name, child in node.children.items():
            child_path = posixpath.join(path, name)
            if child.ephemeral_owner == owner:
                yield child_path
            yield from self._ephemerals(child, child_path, owner)

    # watches

    @contextlib.contextmanager
    def _batched(self) -> Iterator[None]:
        """Fire the watches of the changes made inside only after all of them (one transaction)."""
        if self._batch is not None:
            yield
            return
        self._batch = []
        try:
            yield
        finally:
            batch, self._batch = self._batch, None
            for path, what in batch:
                self._fire(path, what)

    def _fire(self, path: str, what: str) -> None:
        if self._batch is not None:
            self._batch.append((path, what))
            return
        for client in list(self.clients):
            for watch in list(client._watches):
                if watch.abs_path == path and (
                    (watch.kind == "children" and what in ("child", "created", "deleted"))
                    or (watch.kind in ("data", "versioned", "stat") and what in ("created", "changed", "deleted"))
                ):
                    watch._trigger()


def _raise(error: BaseException) -> Any:
    raise error


class _RequestTooLarge(ZooKeeperUnavailableError):
    """The fake server refused a request longer than C{jute.maxbuffer}: its client's connection drops."""


#: ZooKeeper's C{jute.maxbuffer} default (bytes): a server drops the connection
#: of a client that sends a longer request packet (C{NIOServerCnxn.readLength})
JUTE_MAX_BUFFER = 0xFFFFF
#: the serialized size (bytes) of the one ACL kazoo sends: C{OPEN_ACL_UNSAFE}
#: (perms, scheme "world", id "anyone")
_OPEN_ACL_BYTES = 4 + 4 + (4 + 5) + (4 + 6)


def _request_bytes(*ops: tuple[str, str, bytes]) -> int:
    """
    The length of the request packet kazoo sends for C{ops} (C{(kind, absolute
    path, data)}; several: a multi), by ZooKeeper's jute records: a request
    header (xid, type), then per op its path (length-prefixed UTF-8), data
    (length-prefixed), ACL vector and flags (create) or version (set, check,
    delete); a multi puts a header (type, done, err) before each op and after
    the last.
    """
    def body(kind: str, path: str, data: bytes) -> int:
        size = 4 + len(path.encode("utf-8"))
        if kind == "create":
            return size + 4 + len(data) + _OPEN_ACL_BYTES + 4
        if kind == "set":
            return size + 4 + len(data) + 4
        return size + 4

    if len(ops) == 1 and ops[0][0] in ("create", "set"):
        return 8 + body(*ops[0])
    return 8 + sum(9 + body(*op) for op in ops) + 9


class FakeWatch:
    """
    The fake's L{kafkatw.zookeeper.bridge.Watch}: L{cancel} stops callbacks.

    As the bridge's, it is a chain of ZooKeeper's one-shot watches: a read
    (of the data, the children, or whether the node exists) arms it, the
    first change after that read fires it (then it is spent), and the
    callback gets what the next read finds.  So changes between a firing and
    that re-read give one callback with the last value.
    """

    def __init__(self, client: "FakeZooKeeperClient", path: str, kind: str, callback: Callable[[Any], object]):
        self.path = path
        self.abs_path = client._abs(path)
        self.kind = kind
        self._client = client
        self._callback = callback
        self.cancelled = False
        self._armed = False  # a one-shot ZooKeeper watch is set on the server
        self._first: Deferred | None = None  # fired with the watch after its first callback

    def cancel(self) -> None:
        self.cancelled = True
        self._client._watches.pop(self, None)

    def _trigger(self) -> None:
        """The server fires the one-shot watch (if one is set): the client re-reads."""
        if not self._armed or self.cancelled:
            return
        self._armed = False
        client = self._client
        if not client.connected:
            return  # a client without a connection has no watches; it re-reads on reconnecting
        if client._cut:
            # the notification is on its way through a cut network: delivered on
            # heal(), lost if the client drops the connection first
            client._undelivered.append(self)
        elif client.server.clock is not None:
            client.server.clock.callLater(0, self._refresh)
        else:
            self._refresh()

    def _refresh(self) -> None:
        client = self._client
        if self.cancelled or not client.connected:
            return
        if client._cut:
            # cut off since the notification left (or the re-read began): it waits in the network
            # as in _trigger, delivered on heal(), lost if the client drops the connection first
            if self not in client._undelivered:
                client._undelivered.append(self)
            return
        held = client._held_watches
        if held is not None:
            if self not in held:
                held.append(self)
            return
        node = client.server._lookup(self.abs_path)
        if self.kind == "children":
            value: Any = sorted(node.children) if node is not None else []
        elif self.kind == "versioned":
            value = (node.data, node.stat.version) if node is not None else (None, -1)
        elif self.kind == "stat":
            value = (node.data, node.stat) if node is not None else (None, None)
        else:
            value = node.data if node is not None else None
        self._armed = True
        self._callback(value)
        first, self._first = self._first, None
        if first is not None:
            first.callback(self)


class FakeZooKeeperClient:
    """
    An in-memory L{kafkatw.zookeeper.bridge.ZooKeeperClient}: same methods,
    same errors, same Deferreds, chroot honoured.  Operations complete at
    once while connected (their Deferreds have fired); through a cut
    network (L{partition}) they wait, as a real client's do.

    @param server: the shared L{FakeZooKeeper}; a new one when C{None}.
    @param hosts: a connect string; only its chroot matters.
    @param session_timeout_ms: the requested session timeout (ms), negotiated
        by the server (L{FakeZooKeeper.negotiate_timeout}).
    """

    def __init__(
        self,
        server: FakeZooKeeper | None = None,
        chroot: str = "/kafkatw",
        hosts: str = "fake:2181",
        reactor: Any = None,
        session_timeout_ms: int = 18000,
    ) -> None:
        self.server = server if server is not None else FakeZooKeeper()
        self.hosts, self.chroot = parse_connect_string(hosts, chroot)
        self._reactor = reactor
        self.session_timeout_ms = session_timeout_ms
        self._session: int | None = None
        self._connected = False
        self._state_listeners: list[Callable[[str], object]] = []
        self._new_session_callbacks: list[Callable[[], object]] = []
        #: its watches in the order they were set (a dict: a set of objects iterates in memory order,
        #: which differs between runs, and the watches fire and re-read in this order)
        self._watches: dict[FakeWatch, None] = {}
        self._held_watches: list[FakeWatch] | None = None
        self._unnoticed = False  # expire_session_unnoticed
        self.available = True  # set False to make start() fail
        # partition(): the network to the server is cut; while the client has
        # not noticed, requests and notifications wait in it
        self._cut = False
        self._notice: Any = None  # the IDelayedCall of noticing the cut (the read timeout)
        self._in_flight: list[tuple[Callable[[], Any], Deferred]] = []
        self._undelivered: list[FakeWatch] = []
        self._replies_only = False  # partition(replies_only=True)
        # SUSPENDED after a noticed partition: requests wait for the reconnection
        self._suspended = False
        self._queued: list[tuple[Callable[[], Any], Deferred]] = []

    def _abs(self, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"ZooKeeper paths are absolute: {path!r}")
        return posixpath.normpath(self.chroot + "/" + path.lstrip("/")) if self.chroot != "/" else posixpath.normpath(path)

    def _rel(self, path: str) -> str:
        if self.chroot == "/":
            return path
        return "/" + path[len(self.chroot) :].lstrip("/")

    # lifecycle

    def start(self) -> Deferred:
        if not self.available:
            return fail(ZooKeeperUnavailableError(f"ZooKeeper at {self.hosts} did not answer (fake)"))
        if self._connected:
            return succeed(None)
        self._session = self.server.new_session_id(self.session_timeout_ms)
        self._connected = True
        self.server.clients.append(self)
        if self.chroot != "/" and self.server._lookup(self.chroot) is None:
            self.server.create(self.chroot, b"", 0, False, True)
        self._notify("CONNECTED")
        return succeed(None)

    def stop(self) -> Deferred:
        for watch in list(self._watches):
            watch.cancel()
        self._cancel_notice()
        self._cut = self._suspended = self._replies_only = False
        self._undelivered.clear()
        self._fail_waiting("connection closed (fake)")
        if self._connected:
            session = self._session
            self._connected = False
            self._session = None
            if self in self.server.clients:
                self.server.clients.remove(self)
            if session is not None:
                self.server.expire(session)
            self._notify("LOST")
        return succeed(None)

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def session_id(self) -> int | None:
        return self._session

    @property
    def session_password(self) -> bytes | None:
        return None if self._session is None else self.server.session_password(self._session)

    def end_session(self, session_id: int, password: bytes) -> Deferred:
        """End another open session (L{FakeZooKeeper.end_session}); fires with whether it was open."""
        return self._op(lambda: self.server.end_session(session_id, password))

    def add_state_listener(self, callback: Callable[[str], object]) -> None:
        self._state_listeners.append(callback)

    def remove_state_listener(self, callback: Callable[[str], object]) -> None:
        self._state_listeners.remove(callback)

    def on_new_session(self, callback: Callable[[], object]) -> None:
        self._new_session_callbacks.append(callback)

    def _notify(self, state: str) -> None:
        for listener in list(self._state_listeners):
            listener(state)

    def _clock(self) -> Any:
        clock = self.server.clock
        if clock is None:
            raise RuntimeError("a partition needs a FakeZooKeeper with a clock")
        return clock

    # session faults for tests

    def partition(self, replies_only: bool = False) -> None:
        """
        Cut the network between this client and the server (both ways), as a
        partition does: nothing is refused, nothing arrives.  Requests and
        watch notifications wait in the network.  The server expires the
        session after its timeout (L{FakeZooKeeper.lose_contact}); the client
        notices after its read timeout, two thirds of the negotiated timeout
        (kazoo's and ZooKeeper's Java client's): the requests in flight fail
        with L{ZooKeeperUnavailableError}, C{SUSPENDED}, and later requests
        wait for the reconnection.  Needs the server's clock.

        @param replies_only: cut only what the server sends (a one-way
            partition): the requests reach the server and are applied, only
            their replies wait (and are lost when the client notices: it is
            told C{ConnectionLoss} for a write that was made), and the server
            keeps hearing from the client, so the session lives on.  (With
            kazoo the server hears its reconnection attempts, one per session
            timeout: a real session may still expire when a cut lasts several
            timeouts; this model keeps it.)
        """
        clock = self._clock()
        if self._cut or not self._connected or self._session is None:
            return
        self._cut = True
        self._replies_only = replies_only
        if not replies_only:
            self.server.lose_contact(self._session)
        timeout_ms = self.server.session_timeout_ms(self._session) or self.session_timeout_ms
        self._notice = clock.callLater(timeout_ms * 2 / 3 / 1000.0, self._connection_lost)

    def heal(self) -> None:
        """
        End the L{partition}.  Before the client noticed it, what waited in the
        network arrives (the requests complete, late); after, the client
        reconnects: C{CONNECTED} in the same session, or, if it expired
        meanwhile, C{LOST} then a new session (as L{reconnect}).
        """
        if not self._cut:
            return
        self._cut = self._replies_only = False
        if self._notice is not None:
            self._cancel_notice()
            if self._session is not None and self.server.regain_contact(self._session):
                in_flight, self._in_flight = self._in_flight, []
                for fn, d in in_flight:
                    self._run(fn, d)
                undelivered, self._undelivered = self._undelivered, []
                for watch in undelivered:
                    watch._refresh()
                return
            self._connection_lost()  # the server closed the session meanwhile
        if self._suspended:
            self._reconnect()

    def _cancel_notice(self) -> None:
        if self._notice is not None:
            if self._notice.active():
                self._notice.cancel()
            self._notice = None

    def _connection_lost(self) -> None:
        """The client notices its connection is gone: in-flight requests fail, C{SUSPENDED}."""
        self._notice = None
        if not self._connected:
            return
        self._connected = False
        self._suspended = True
        self._undelivered.clear()
        in_flight, self._in_flight = self._in_flight, []
        for _, d in in_flight:
            d.errback(ZooKeeperUnavailableError("ConnectionLoss (fake)"))
        self._notify("SUSPENDED")

    def _fail_waiting(self, why: str) -> None:
        waiting = self._in_flight + self._queued
        self._in_flight, self._queued = [], []
        for _, d in waiting:
            d.errback(ZooKeeperUnavailableError(why))

    def _reconnect(self) -> None:
        """Connect again: the same session while the server has it, else C{LOST} and a new one."""
        self._suspended = False
        self._undelivered.clear()
        if self._session is not None and self.server.regain_contact(self._session):
            self._connected = True
            self._notify("CONNECTED")
            for watch in list(self._watches):
                watch._refresh()
            queued, self._queued = self._queued, []
            for fn, d in queued:
                self._run(fn, d)
            return
        self._fail_waiting("SessionExpired (fake)")
        self._new_session()

    def _new_session(self) -> None:
        """C{LOST}, then C{CONNECTED} with a new session: watches re-read, the L{on_new_session} callbacks run."""
        self._connected = False
        self._notify("LOST")
        self._session = self.server.new_session_id(self.session_timeout_ms)
        self._connected = True
        self._notify("CONNECTED")
        for watch in list(self._watches):
            watch._refresh()
        for callback in list(self._new_session_callbacks):
            callback()

    def _connection_taken(self) -> None:
        """Another connection claimed this client's session: its connection drops, it reconnects in the session."""
        if self._cut or not self._connected:
            return
        self._connection_lost()
        self._reconnect()

    def _session_closed_by_server(self) -> None:
        """
        The server closed this client's session (L{FakeZooKeeper.end_session}):
        it drops the connection (C{SUSPENDED}, unless the client is cut off and
        hears nothing), and the reconnection finds the session gone.
        """
        if self._cut or not self._connected:
            return
        self._connection_lost()
        self._reconnect()

    def disconnect(self) -> None:
        """
        Drop the connection, keeping the session: C{SUSPENDED}; operations fail
        with L{ZooKeeperUnavailableError} until L{reconnect} (a real client's
        fail so only if in flight at the drop; later ones wait, as through
        L{partition}).  With a clock, the server expires the session if
        L{reconnect} does not come within its timeout.
        """
        self._connected = False
        if self._session is not None:
            self.server.lose_contact(self._session)
        self._notify("SUSPENDED")

    def reconnect(self) -> None:
        """
        Reconnect: C{CONNECTED} within the same session, watches re-read; or,
        if the session expired meanwhile, C{LOST} and a new session (as
        L{expire_session}).
        """
        self._reconnect()

    def expire_session(self) -> None:
        """
        Expire the session as the server would: its ephemeral nodes vanish
        (watchers of other sessions fire), this client sees C{LOST}, then
        reconnects with a new session: C{CONNECTED}, watches re-read, and the
        L{on_new_session} callbacks run.  (A real client first sees
        C{SUSPENDED}: it learns of the expiry only when it reconnects after
        its connection dropped; L{expire_session_for_testing} and
        L{partition} give that sequence.  This shortcut keeps the older one.)
        """
        old = self._session
        self._connected = False
        if old is not None:
            self.server.expire(old)
        self._new_session()

    def expire_session_unnoticed(self) -> None:
        """
        A zombie: the session expires on the server (its ephemeral nodes go,
        other sessions' watches fire) and the client is reconnected with a new
        session before it has heard of it -- a process paused or cut off for
        longer than the session timeout, whose ZooKeeper thread reconnects
        before its reactor runs the C{LOST} listener.  Its watch
        notifications are held (L{hold_watches}); its operations use the new
        session.  L{notice_session} delivers what it missed.
        """
        self.hold_watches()
        old, self._session = self._session, self.server.new_session_id(self.session_timeout_ms)
        self._unnoticed = True
        if old is not None:
            self.server.expire(old)

    def notice_session(self) -> None:
        """The zombie hears of its expiry: C{LOST}, C{CONNECTED}, watches re-read, new-session callbacks."""
        if not self._unnoticed:
            return
        self._unnoticed = False
        self._notify("LOST")
        self._notify("CONNECTED")
        self.release_watches()
        for watch in list(self._watches):
            watch._refresh()
        for callback in list(self._new_session_callbacks):
            callback()

    def hold_watches(self) -> None:
        """
        Stop delivering this client's watch notifications (a client whose
        view lags: a watch that has not fired yet, or a client cut off from
        ZooKeeper): they are queued, one per watch, until L{release_watches}.
        Its operations still work unless it is also L{disconnect}ed.
        """
        if self._held_watches is None:
            self._held_watches = []

    def release_watches(self) -> None:
        """Deliver the held notifications (each re-reads the current value, as ZooKeeper's watches do)."""
        held, self._held_watches = self._held_watches, None
        for watch in held or ():
            watch._refresh()

    def expire_session_for_testing(self) -> Deferred:
        """
        The real client's way to expire its own session: another connection
        closes it on the server (L{FakeZooKeeper.end_session}), this client's
        connection drops (C{SUSPENDED}), and its reconnection finds the
        session gone: C{LOST}, then a new session.
        """
        session, password = self._session, self.session_password
        if session is not None and password is not None:
            self.server.end_session(session, password)
        return succeed(None)

    # operations

    def _op(self, fn: Callable[[], Any]) -> Deferred:
        if self._connected and not self._cut:
            try:
                return succeed(fn())
            except _RequestTooLarge as e:
                # the server reads no packet beyond jute.maxbuffer: it drops the connection
                self._connection_lost()
                self._reconnect()
                return fail(ZooKeeperUnavailableError(str(e)))
            except ZooKeeperError as e:
                return fail(e)
        d: Deferred = Deferred()
        if self._connected and self._replies_only:
            # the request arrives and is applied; its reply waits in the network
            try:
                value = fn()
            except ZooKeeperError as e:
                self._in_flight.append((lambda error=e: _raise(error), d))
            else:
                self._in_flight.append((lambda result=value: result, d))
        elif self._connected:
            self._in_flight.append((fn, d))  # into the cut network
        elif self._suspended:
            self._queued.append((fn, d))  # kazoo queues requests while reconnecting
        else:
            d.errback(ZooKeeperUnavailableError("not connected (fake)"))
        return d

    def _sized(self, fn: Callable[[], Any], *ops: tuple[str, str, bytes]) -> Callable[[], Any]:
        """C{fn}, refused by the server when its request (L{_request_bytes} of C{ops}) is longer than it reads."""

        def send() -> Any:
            size = _request_bytes(*ops)
            if size > self.server.max_request_bytes:
                raise _RequestTooLarge(f"ConnectionLoss: a request of {size} bytes, more than jute.maxbuffer (fake)")
            return fn()

        return send

    def _run(self, fn: Callable[[], Any], d: Deferred) -> None:
        try:
            value = fn()
        except ZooKeeperError as e:
            d.errback(e)
        else:
            d.callback(value)

    def create(
        self, path: str, value: bytes = b"", ephemeral: bool = False, sequence: bool = False, makepath: bool = False
    ) -> Deferred:
        if not isinstance(value, bytes):
            raise TypeError(f"value must be bytes, not {type(value).__name__}")
        absolute = self._abs(path)
        return self._op(self._sized(
            lambda: self._rel(self.server.create(absolute, value, (self._session or 0) if ephemeral else 0,
                                                 sequence, makepath)),
            ("create", absolute, value)))

    def ensure_path(self, path: str) -> Deferred:
        def go() -> None:
            if self.server._lookup(self._abs(path)) is None:
                self.server.create(self._abs(path), b"", 0, False, True)

        return self._op(go)

    def get(self, path: str) -> Deferred:
        def go() -> tuple[bytes, ZnodeStat]:
            node = self.server._lookup(self._abs(path))
            if node is None:
                raise NoNodeError(path)
            return node.data, node.stat

        return self._op(go)

    def get_children(self, path: str) -> Deferred:
        def go() -> list[str]:
            node = self.server._lookup(self._abs(path))
            if node is None:
                raise NoNodeError(path)
            return sorted(node.children)

        return self._op(go)

    def exists(self, path: str) -> Deferred:
        def go() -> ZnodeStat | None:
            node = self.server._lookup(self._abs(path))
            return None if node is None else node.stat

        return self._op(go)

    def set(self, path: str, value: bytes, version: int = -1) -> Deferred:
        if not isinstance(value, bytes):
            raise TypeError(f"value must be bytes, not {type(value).__name__}")
        absolute = self._abs(path)
        return self._op(self._sized(lambda: self.server.set(absolute, value, version), ("set", absolute, value)))

    def fenced_set(self, fence_path: str, fence_version: int, path: str, value: bytes, version: int = -1) -> Deferred:
        def go() -> ZnodeStat:
            ops = [CheckOp(self._abs(fence_path), fence_version), SetOp(self._abs(path), value, version)]
            try:
                return self.server.multi(ops, self._session or 0)[1]
            except ZooKeeperError as e:
                failed = type(e)(f"{fence_path} changed (expected version {fence_version})" if e.op_index == 0
                                 else f"{path}: {e} (expected version {version})")
                failed.op_index = e.op_index
                raise failed from None

        return self._op(self._sized(go, ("check", self._abs(fence_path), b""), ("set", self._abs(path), value)))

    def multi(self, ops: list) -> Deferred:
        """L{kafkatw.zookeeper.bridge.ZooKeeperClient.multi}: all of C{ops} or none (L{FakeZooKeeper.multi})."""
        for op in ops:
            if isinstance(op, (CreateOp, SetOp)) and not isinstance(op.value, bytes):
                raise TypeError(f"value must be bytes, not {type(op.value).__name__}")
        absolute = [op._replace(path=self._abs(op.path)) for op in ops]

        def go() -> list:
            results = self.server.multi(absolute, self._session or 0)
            return [self._rel(r) if isinstance(r, str) else r for r in results]

        kinds = {CheckOp: "check", CreateOp: "create", SetOp: "set", DeleteOp: "delete"}
        return self._op(self._sized(go, *((kinds.get(type(op), "check"), op.path, getattr(op, "value", b""))
                                          for op in absolute)))

    def delete(self, path: str, recursive: bool = False, version: int = -1) -> Deferred:
        return self._op(lambda: self.server.delete(self._abs(path), version, recursive))

    def watch_children(self, path: str, callback: Callable[[list[str]], object]) -> Deferred:
        return self._watch(path, "children", callback)

    def watch_data(self, path: str, callback: Callable[[bytes | None], object]) -> Deferred:
        return self._watch(path, "data", callback)

    def watch_versioned_data(self, path: str, callback: Callable[[tuple[bytes | None, int]], object]) -> Deferred:
        return self._watch(path, "versioned", callback)

    def watch_data_with_stat(self, path: str, callback: Callable[[tuple[bytes | None, Any]], object]) -> Deferred:
        return self._watch(path, "stat", callback)

    def _watch(self, path: str, kind: str, callback: Callable[[Any], object]) -> Deferred:
        if not self._connected:
            return fail(ZooKeeperUnavailableError("not connected (fake)"))
        watch = FakeWatch(self, path, kind, callback)
        self._watches[watch] = None
        first: Deferred = Deferred()
        watch._first = first

        def failed(failure: Any) -> None:
            # as the bridge's Watch: a read lost with the connection is made
            # again on reconnecting, and the Deferred fires then
            if not failure.check(ZooKeeperUnavailableError):
                watch._first = None
                first.errback(failure)

        self._op(watch._refresh).addErrback(failed)
        return first


# -- TLS certificates ----------------------------------------------------------


@dataclass(frozen=True)
class TLSFiles:
    """
    PEM files made by L{make_tls_files}.

    @ivar ca: the CA certificate (a trust store: C{ssl.truststore.location}, C{ssl_cafile}).
    @ivar server: the broker's certificate chain and key (C{ssl.keystore.location}),
        for C{localhost} and C{127.0.0.1}.
    @ivar clients: client name -> its certificate chain and key (C{ssl_certfile}),
        subject C{CN=<name>,OU=<ou>,O=kafkatw-test}.
    @ivar expired_client: a client certificate of the same CA that expired.
    @ivar untrusted_client: a client certificate of another CA.
    @ivar other_host: a server certificate of the same CA for C{other.example} only.
    """

    ca: str
    server: str
    clients: dict[str, str]
    expired_client: str
    untrusted_client: str
    other_host: str


def make_tls_files(directory: str, clients: tuple[str, ...] = ("alice", "bob"), ou: str = "eng") -> TLSFiles:
    """
    Make a test CA and certificates with C{trustme} (a test dependency) in C{directory}.
    """
    import datetime

    import trustme

    os.makedirs(directory, exist_ok=True)

    def path(name: str) -> str:
        return os.path.join(directory, name)

    ca = trustme.CA(organization_name="kafkatw-test")
    ca.cert_pem.write_to_path(path("ca.pem"))
    # Kafka's PEM key store order: the certificate chain, then the key (KIP-651).
    def write(leaf: Any, name: str) -> str:
        with open(path(name), "wb") as f:
            for blob in leaf.cert_chain_pems:
                f.write(blob.bytes())
            f.write(leaf.private_key_pem.bytes())
        return path(name)

    server = write(ca.issue_cert("localhost", "127.0.0.1", common_name="localhost"), "server.pem")
    client_files = {
        name: write(ca.issue_cert(f"{name}.example", common_name=name, organization_name="kafkatw-test",
                                  organization_unit_name=ou), f"client-{name}.pem")
        for name in clients
    }
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    expired = write(ca.issue_cert("expired.example", common_name="expired", not_before=past,
                                  not_after=past + datetime.timedelta(days=1)), "client-expired.pem")
    untrusted = write(trustme.CA().issue_cert("mallory.example", common_name="mallory"), "client-untrusted.pem")
    other_host = write(ca.issue_cert("other.example", common_name="other.example"), "server-other.pem")
    return TLSFiles(path("ca.pem"), server, client_files, expired, untrusted, other_host)


# -- real brokers --------------------------------------------------------------


class BrokerProcess:
    """
    A real broker: C{twistd -n kafkatw} as a child process on a free loopback
    port, joined to the ZooKeeper at C{zookeeper_connect}.

    @ivar bootstrap: C{"127.0.0.1:PORT"}, once started.
    @ivar log_path: the broker's twistd log file.
    @ivar data_dir: the broker's C{log.dirs} (C{<log_dir>/data-<id>}).
    @param port: the listener's port (default: a free one).
    @param env: environment variables added to the child's.
    """

    def __init__(self, broker_id: int, zookeeper_connect: str, log_dir: str,
                 overrides: dict[str, str] | None = None, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.broker_id = broker_id
        self.zookeeper_connect = zookeeper_connect
        self.log_dir = log_dir
        self.overrides = dict(overrides or {})
        self.port = port if port is not None else find_free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir, f"broker-{broker_id}.log")
        self.data_dir = os.path.join(log_dir, f"data-{broker_id}")
        self.env = dict(env or {})
        self.popen: Any = None

    def command(self) -> list[str]:
        import sys

        args = [
            sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()",
            "-n", "--pidfile=", "--logfile", self.log_path, "kafkatw",
        ]
        args += ["--broker-id", str(self.broker_id), "--listeners", f"tcp:{self.port}:interface=127.0.0.1",
                 "--log-dirs", self.data_dir, "--zookeeper", self.zookeeper_connect]
        overrides = {"zookeeper.session.timeout.ms": "3000", **self.overrides}
        for key, value in overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, timeout_s: float = 30.0) -> "BrokerProcess":
        """Start the broker and wait until it answers on its port and logs that it started."""
        import subprocess

        with open(self.log_path, "a"):
            pass
        # twistd renames its log to <log>.1 at 1,000,000 bytes and starts a new one (a start with
        # thousands of partitions does): the text since the start is followed into the new file.
        log = open(self.log_path, "rb")
        try:
            log.seek(0, os.SEEK_END)
            self.popen = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.STDOUT, env={**os.environ, **self.env})
            since_start = bytearray()
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                since_start += log.read()
                try:
                    rotated = os.stat(self.log_path).st_ino != os.fstat(log.fileno()).st_ino
                    if rotated:
                        new_log = open(self.log_path, "rb")
                except FileNotFoundError:  # between the rename and the new file
                    rotated = False
                if rotated:
                    since_start += log.read()  # the rest of the renamed file, then the new one
                    log.close()
                    log = new_log
                    continue
                text = since_start.decode("utf-8", "replace")
                if f"broker {self.broker_id} started" in text:
                    return self
                if self.popen.poll() is not None:
                    raise RuntimeError(f"broker {self.broker_id} exited with {self.popen.returncode}:\n{text[-3000:]}")
                time.sleep(0.05)
        finally:
            log.close()
        self.kill()
        raise RuntimeError(f"broker {self.broker_id} did not start within {timeout_s} s; see {self.log_path}")

    def run_to_exit(self, timeout_s: float = 60.0) -> Any:
        """
        Run the broker expecting it to exit by itself (a failure to start).

        @return: a C{subprocess.CompletedProcess} with C{returncode} and the
            text of C{stdout} and C{stderr}.
        @raise subprocess.TimeoutExpired: it still ran after C{timeout_s} (it is killed).
        """
        import subprocess

        return subprocess.run(self.command(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s, env={**os.environ, **self.env})

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL after C{timeout_s}."""
        import subprocess

        if self.popen is None or self.popen.poll() is not None:
            return None if self.popen is None else self.popen.returncode
        self.popen.terminate()
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait(10)

    def kill(self) -> None:
        """SIGKILL: an unclean stop, as a crash or power loss of the process."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)

    def log_text(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


class Cluster(list):
    """
    The L{BrokerProcess}es of L{running_cluster}, in broker id order.

    @ivar zookeeper: the cluster's L{ZooKeeperFixture} (C{.popen} is the
        ZooKeeper server process: SIGSTOP/SIGCONT it to simulate an outage).
    """

    zookeeper: ZooKeeperFixture


@contextlib.contextmanager
def running_cluster(brokers: int = 1, overrides: dict[str, str] | None = None,
                    tmpdir: str | None = None,
                    before_brokers: Callable[[str], object] | None = None) -> Iterator[Cluster]:
    """
    A real ZooKeeper and C{brokers} real broker processes on free loopback
    ports; everything is stopped and removed on exit.

    @param before_brokers: called with the brokers' C{zookeeper.connect}
        (chroot included) once ZooKeeper runs and before any broker starts:
        to write what the brokers need from their first request, e.g. ACLs
        (L{create_acls_in_zookeeper}) when C{authorizer.class.name} is set.

    @return: a L{Cluster}: the started L{BrokerProcess}es (their C{bootstrap}
        addresses) and the ZooKeeper fixture.
    """
    base = tmpdir or tempfile.mkdtemp(prefix="kafkatw-cluster-")
    cluster = Cluster()
    try:
        cluster.zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"))
        with cluster.zookeeper as connect:
            try:
                if before_brokers is not None:
                    before_brokers(connect + "/kafkatw")
                for broker_id in range(brokers):
                    cluster.append(BrokerProcess(broker_id, connect + "/kafkatw", base, overrides).start())
                yield cluster
            finally:
                for process in cluster:
                    process.stop()
    finally:
        if tmpdir is None:
            shutil.rmtree(base, ignore_errors=True)


def create_acls_in_zookeeper(zookeeper_connect: str, bindings: Any, timeout_s: float = 30.0) -> None:
    """
    Write ACLs straight into ZooKeeper, with their change notifications, as
    C{kafkatw acls --authorizer-properties zookeeper.connect=...} does: the
    first ACLs of a cluster whose brokers run C{authorizer.class.name}
    (the brokers' own principal with C{ClusterAction}, an admin with
    C{Alter} on the cluster), before or while the brokers run.

    @param bindings: L{kafkatw.security.acl.AclBinding}s.
    @raise kafkatw.security.acl.InvalidAclError: a binding Kafka refuses.
    """
    from kafkatw.client.blocking import call_with_zookeeper
    from kafkatw.zookeeper.acl_store import ZkAclStore
    from kafkatw.zookeeper.registry import Registry

    wanted = list(bindings)

    async def write(zk: Any) -> None:
        for error in await ZkAclStore(Registry(zk)).create_acls(wanted):
            if error is not None:
                raise error

    call_with_zookeeper(write, zookeeper_connect, timeout_s)


def snapshot_tree(path: str | os.PathLike) -> dict[str, tuple]:
    """
    Everything under C{path}, to compare before and after an operation that
    must not touch it: relative path -> C{("dir", mtime_ns)} or C{("file",
    size, mtime_ns, SHA-256 of the content)}.  An empty dict when C{path}
    does not exist.
    """
    import hashlib

    root = os.fspath(path)
    result: dict[str, tuple] = {}
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        relative = os.path.relpath(directory, root)
        result[relative] = ("dir", os.stat(directory).st_mtime_ns)
        for name in sorted(files):
            full = os.path.join(directory, name)
            st = os.stat(full)
            with open(full, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            result[os.path.join(relative, name)] = ("file", st.st_size, st.st_mtime_ns, digest)
    return result


# -- class fixtures under trial ------------------------------------------------------------

__all__ += ["ClassFixture"]


class ClassFixture:
    """
    Mix in before a C{TestCase} so that its C{setUpClass} (a shared cluster,
    say) runs under trial as it does under unittest and pytest.

    trial does not call C{setUpClass}/C{tearDownClass}; this calls
    C{setUpClass} before the class's first test and C{tearDownClass} when the
    last of the class's test methods has run (then a cluster stops before the
    next class starts).  A run of some of its tests only (C{trial
    module.Class.test_x}, C{trial -j}) tears it down at interpreter exit
    (C{atexit}) instead.  An error of C{setUpClass} is each test's error; an
    error of C{tearDownClass} is reported as its own entry,
    C{<module>.<Class>.tearDownClass}, as trial reports a module that does
    not import.  Under runners that call them (unittest, pytest), nothing
    changes.
    """

    _class_fixture_ready = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        set_up = cls.__dict__.get("setUpClass")
        tear_down = cls.__dict__.get("tearDownClass")
        if set_up is not None:
            original_set_up = set_up.__func__

            def setUpClass(klass: type) -> None:  # noqa: N802 (unittest's name)
                # ready from its start: a setUpClass that fails half-way calls tearDownClass itself,
                # which must then stop what it started
                klass._class_fixture_ready = True
                try:
                    original_set_up(klass)
                except BaseException:
                    klass._class_fixture_ready = False
                    raise

            cls.setUpClass = classmethod(setUpClass)  # type: ignore[assignment]
        if tear_down is not None:
            original_tear_down = tear_down.__func__

            def tearDownClass(klass: type) -> None:  # noqa: N802
                if klass.__dict__.get("_class_fixture_ready"):
                    klass._class_fixture_ready = False
                    original_tear_down(klass)

            cls.tearDownClass = classmethod(tearDownClass)  # type: ignore[assignment]

    def run(self, result: Any = None) -> Any:
        import atexit
        import sys

        from twisted.python.reflect import prefixedMethodNames

        cls = type(self)
        if not cls.__dict__.get("_class_fixture_ready"):
            import unittest

            try:
                cls.setUpClass()
            except unittest.SkipTest as e:
                result.startTest(self)
                result.addSkip(self, str(e))
                result.stopTest(self)
                return result
            except BaseException:
                result.startTest(self)
                result.addError(self, sys.exc_info())
                result.stopTest(self)
                return result
            # set up here, so torn down here: once every test method trial loads from the class has run
            cls._class_fixture_ready = True
            cls._class_fixture_pending = {"test" + name for name in prefixedMethodNames(cls, "test")}
            atexit.register(cls.tearDownClass)
        try:
            return super().run(result)  # type: ignore[misc]
        finally:
            pending = cls.__dict__.get("_class_fixture_pending")
            if pending is not None:
                pending.discard(self._testMethodName)  # type: ignore[attr-defined]
                if not pending:
                    cls._class_fixture_pending = None
                    atexit.unregister(cls.tearDownClass)
                    try:
                        cls.tearDownClass()
                    except BaseException:
                        from twisted.trial.runner import ErrorHolder

                        ErrorHolder(f"{cls.__module__}.{cls.__qualname__}.tearDownClass",
                                    sys.exc_info()).run(result)
                    finally:
                        cls._class_fixture_ready = False


# -- transactions: fakes of the transaction coordinator's dependencies ----------

__all__ += ["FakeTransactionLog", "FakeMarkerWriter", "MarkerCall", "FakeProducerIdAllocator"]


class FakeTransactionLog:
    """
    An in-memory ``__transaction_state``
    (L{kafkatw.broker.transaction_coordinator.TransactionLog}).

    Appends are replicated at once unless C{hold} is set; then they wait in
    L{pending} until L{replicate} or L{fail_pending}.  L{fail_next} makes the
    next append fail with a Kafka error code.  A partition in L{uncommitted}
    holds L{committed} until L{commit} (or L{fail_committed}).

    @ivar partitions: partition -> list of (key, value) records written.
    @ivar appends: every append as (partition, coordinator epoch, records).
    @ivar uncommitted: partitions whose log is not committed to its end.
    """

    def __init__(self, hold: bool = False) -> None:
        self.hold = hold
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.appends: list[tuple[int, int, list[tuple[bytes, bytes | None]]]] = []
        self.pending: list[tuple[int, list[tuple[bytes, bytes | None]], Deferred]] = []
        self._fail_next: list[Any] = []
        self.uncommitted: set[int] = set()
        self._commit_waiters: dict[int, list[Deferred]] = {}

    def fail_next(self, code: Any) -> None:
        """The next append fails with L{kafkatw.errors.kafka_error}C{(code)}."""
        self._fail_next.append(code)

    def append(self, partition: int, coordinator_epoch: int, records: Any) -> Deferred:
        from kafkatw.errors import kafka_error

        records = list(records)
        self.appends.append((partition, coordinator_epoch, records))
        if self._fail_next:
            return fail(kafka_error(self._fail_next.pop(0), "FakeTransactionLog.fail_next"))
        if self.hold:
            d: Deferred = Deferred()
            self.pending.append((partition, records, d))
            return d
        self.partitions.setdefault(partition, []).extend(records)
        return succeed(None)

    def replicate(self, count: int | None = None) -> None:
        """Replicate the first C{count} held appends (all when None), in order."""
        n = len(self.pending) if count is None else count
        done, self.pending = self.pending[:n], self.pending[n:]
        for partition, records, d in done:
            self.partitions.setdefault(partition, []).extend(records)
            d.callback(None)

    def fail_pending(self, code: Any) -> None:
        """Fail every held append with C{code}, writing nothing."""
        from kafkatw.errors import kafka_error

        done, self.pending = self.pending, []
        for _partition, _records, d in done:
            d.errback(kafka_error(code, "FakeTransactionLog.fail_pending"))

    def read(self, partition: int) -> Deferred:
        return succeed(list(self.partitions.get(partition, [])))

    def committed(self, partition: int, coordinator_epoch: int) -> Deferred:
        if partition not in self.uncommitted:
            return succeed(None)
        d: Deferred = Deferred()
        self._commit_waiters.setdefault(partition, []).append(d)
        return d

    def commit(self, partition: int) -> None:
        """The high watermark of C{partition} reached its log end: L{committed} fires."""
        self.uncommitted.discard(partition)
        for d in self._commit_waiters.pop(partition, []):
            d.callback(None)

    def fail_committed(self, partition: int, code: Any) -> None:
        """The waits of L{committed} on C{partition} fail with C{code}."""
        from kafkatw.errors import kafka_error

        for d in self._commit_waiters.pop(partition, []):
            d.errback(kafka_error(code, "FakeTransactionLog.fail_committed"))


@dataclass
class MarkerCall:
    """One L{FakeMarkerWriter.write_markers} call, with a Deferred per partition."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: list[tuple[str, int]]
    deferreds: dict[tuple[str, int], Deferred]

    def complete(self) -> None:
        """Every marker of this call is written."""
        for d in self.deferreds.values():
            if not d.called:
                d.callback(None)


class FakeMarkerWriter:
    """
    Records marker writes (L{kafkatw.broker.transaction_coordinator.MarkerWriter});
    they complete when the test says so (L{MarkerCall.complete}), or at once
    with C{auto_complete}.
    """

    def __init__(self, auto_complete: bool = False) -> None:
        self.auto_complete = auto_complete
        self.calls: list[MarkerCall] = []

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                      partitions: Any) -> dict[tuple[str, int], Deferred]:
        partitions = list(partitions)
        call = MarkerCall(producer_id, producer_epoch, coordinator_epoch, committed, partitions,
                          {tp: Deferred() for tp in partitions})
        self.calls.append(call)
        if self.auto_complete:
            call.complete()
        return dict(call.deferreds)


class FakeProducerIdAllocator:
    """
    Producer ids from C{first} upwards
    (L{kafkatw.broker.transaction_coordinator.ProducerIdAllocator}); C{broken}
    makes allocation fail.
    """

    def __init__(self, first: int = 1000) -> None:
        self.next_id = first
        self.broken = False

    async def allocate_producer_id(self) -> int:
        if self.broken:
            raise ZooKeeperUnavailableError("FakeProducerIdAllocator is broken")
        producer_id = self.next_id
        self.next_id += 1
        return producer_id


# -- a fake cluster in memory ----------------------------------------------------------------

__all__ += ["FakeCluster"]


class _Wire:
    """
    The bytes between the fake cluster's connections: every event (a
    connection made, bytes, a pull of a response producer, a close) runs in
    order on the next turn of the reactor (C{callLater(0)}), never inside the
    call that caused it, as on a real network.
    """

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self._events: deque[Callable[[], Any]] = deque()
        self._call: Any = None

    def schedule(self, event: Callable[[], Any]) -> None:
        self._events.append(event)
        if self._call is None:
            self._call = self.reactor.callLater(0, self._run)

    def _run(self) -> None:
        self._call = None
        events = self._events
        while events:
            events.popleft()()


@implementer(ITransport, IConsumer, IPushProducer)
class _MemoryTransport:
    """One end of a connection of the fake cluster (the other end is L{peer})."""

    def __init__(self, wire: _Wire, host: IPv4Address, peer_address: IPv4Address) -> None:
        self.wire = wire
        self.host = host
        self.peer_address = peer_address
        self.peer: _MemoryTransport | None = None
        self.protocol: Any = None
        self.disconnecting = False
        self.disconnected = False
        self.producer: Any = None
        self._paused = False
        self._held: list[bytes] = []

    # ITransport
    def write(self, data: bytes) -> None:
        if data and not self.disconnecting:
            peer, data = self.peer, bytes(data)
            self.wire.schedule(lambda: peer._receive(data))

    def writeSequence(self, data: Any) -> None:  # noqa: N802 (Twisted's name)
        self.write(b"".join(data))

    def loseConnection(self) -> None:  # noqa: N802
        if not self.disconnecting:
            self.disconnecting = True
            self.wire.schedule(lambda: self._close(ConnectionDone("connection closed")))

    def abortConnection(self) -> None:  # noqa: N802
        self.disconnecting = True
        self.wire.schedule(lambda: self._close(ConnectionLost("connection aborted")))

    def getPeer(self) -> IPv4Address:  # noqa: N802
        return self.peer_address

    def getHost(self) -> IPv4Address:  # noqa: N802
        return self.host

    # IConsumer: a pull producer (the broker's response writer) is pulled on the wire's turns
    def registerProducer(self, producer: Any, streaming: bool) -> None:  # noqa: N802
        self.producer = producer
        if not streaming:
            self.wire.schedule(lambda: self._pull(producer))

    def unregisterProducer(self) -> None:  # noqa: N802
        self.producer = None

    def _pull(self, producer: Any) -> None:
        if self.producer is producer and not self.disconnecting:
            producer.resumeProducing()
            if self.producer is producer:
                self.wire.schedule(lambda: self._pull(producer))

    # IPushProducer: the broker mutes a throttled connection (KIP-219) by pausing its reading
    def pauseProducing(self) -> None:  # noqa: N802
        self._paused = True

    def resumeProducing(self) -> None:  # noqa: N802
        self._paused = False
        held, self._held = self._held, []
        for data in held:
            self.wire.schedule(lambda data=data: self._receive(data))

    def stopProducing(self) -> None:  # noqa: N802
        self.loseConnection()

    def _receive(self, data: bytes) -> None:
        if self.disconnected:
            return
        if self._paused:
            self._held.append(data)
            return
        self.protocol.dataReceived(data)

    def _close(self, reason: Exception) -> None:
        for end in (self, self.peer):
            if end is not None and not end.disconnected:
                end.disconnected = end.disconnecting = True
                end.producer = None
                end.protocol.connectionLost(Failure(reason))


@implementer(IStreamClientEndpoint)
class _FakeEndpoint:
    """Connects a client protocol to the fake broker at C{host:port} through a L{_Wire}."""

    def __init__(self, cluster: "FakeCluster", host: str, port: int) -> None:
        self.cluster = cluster
        self.host = host
        self.port = port

    def connect(self, factory: Any) -> Deferred:
        cluster = self.cluster
        if cluster.closed or (self.host, self.port) != (cluster.host, cluster.port):
            return fail(ConnectionRefusedError(f"no fake broker at {self.host}:{self.port}"))
        cluster._ports += 1
        client_address = IPv4Address("TCP", "127.0.0.1", 40000 + cluster._ports)
        server_address = IPv4Address("TCP", "127.0.0.1", self.port)
        client_end = _MemoryTransport(cluster._wire, client_address, server_address)
        server_end = _MemoryTransport(cluster._wire, server_address, client_address)
        client_end.peer, server_end.peer = server_end, client_end
        d: Deferred = Deferred()

        def made() -> None:
            server_end.protocol = cluster._server_factory.buildProtocol(client_address)
            client_end.protocol = factory.buildProtocol(server_address)
            server_end.protocol.makeConnection(server_end)
            client_end.protocol.makeConnection(client_end)
            cluster._transports.append(client_end)
            d.callback(client_end.protocol)

        cluster._wire.schedule(made)
        return d


class _FakeClusterAdmin(AdminManager):
    """The broker's L{AdminManager}, telling the fake cluster what the real broker learns from its ZooKeeper watches."""

    cluster: "FakeCluster"

    async def create_partitions(self, name: str, count: int, assignment: list[list[int]] | None,
                                validate_only: bool = False) -> None:
        await super().create_partitions(name, count, assignment, validate_only)
        if not validate_only:
            self.cluster._topic_changed(name)

    async def delete_topic(self, name: str) -> None:
        await super().delete_topic(name)
        self.cluster._topic_deleted(name)


class FakeCluster:
    """
    A Kafka cluster of one broker in memory, for testing code built on
    kafkatw's clients without sockets, threads or sleeps (as txtorcon and
    treq ship fakes of what they talk to).

    The broker is kafkatw's own request handling (L{kafkatw.broker.apis.KafkaApis}
    with its group coordinator, logs in a temporary directory, offsets in a
    L{FakeZooKeeper}) behind its own connection protocol; the real
    L{kafkatw.client.Producer}, L{kafkatw.client.Consumer} (alone, assigned,
    or in a consumer group with C{group_id}) and L{kafkatw.client.AdminClient}
    talk to it over the wire protocol, through in-memory connections, on the
    reactor given.  Time is that reactor's: nothing happens until it is
    turned (L{advance}, L{result}, or C{reactor.advance}), and a run repeats
    with the same calls (the clients' random choices are seeded; the member
    ids a group coordinator hands out are UUIDs, so which member is which
    may differ).

    Usage (in a trial test; C{clock} a C{twisted.internet.task.Clock} or
    C{twisted.internet.testing.MemoryReactorClock})::

        cluster = FakeCluster(clock, topics={"orders": 3})
        self.addCleanup(cluster.close)
        producer = Producer(clock, client=cluster.client())
        cluster.result(producer.send("orders", b"one", partition=0))

    Not modelled: more than one broker (replication, leader changes),
    transactions, ACLs, TLS and SASL.  A test of how code copes with a broker
    that misbehaves on the wire wants a hand-made fake.

    @param reactor: the clock everything runs on: C{callLater} and
        C{seconds}; L{advance} and L{result} also need C{advance(seconds)}.
    @param topics: topic name -> number of partitions, created at once.
    @param config: broker configs (Kafka's names: C{"group.initial.rebalance.delay.ms"},
        C{"num.partitions"}, …) over the defaults; C{group.initial.rebalance.delay.ms}
        is 0 here unless given (Kafka's own test harnesses do the same).
    @ivar bootstrap_servers: C{"host:port"} of the broker (a name no resolver
        knows: only L{endpoint} connects to it).
    @ivar apis: the broker's L{kafkatw.broker.apis.KafkaApis} (its group
        coordinator is C{apis.group_coordinator}).
    @ivar metadata: the broker's L{kafkatw.broker.metadata_cache.MetadataCache}.
    @ivar config: the broker's L{kafkatw.config.BrokerConfig}.
    @ivar zookeeper: the broker's L{FakeZooKeeperClient}; more clients of
        C{zookeeper.server} see the same znodes (C{/kafkatw/brokers/topics}, …).
    @ivar registry: the broker's L{kafkatw.zookeeper.registry.Registry} on it.
    """

    host = "fake-broker-0"
    port = 9092

    def __init__(self, reactor: Any, topics: dict[str, int] | None = None,
                 config: dict[str, Any] | None = None) -> None:
        self.reactor = reactor
        self.bootstrap_servers = f"{self.host}:{self.port}"
        self.closed = False
        self._directory = tempfile.mkdtemp(prefix="kafkatw-fake-cluster-")
        self._clients: list[Any] = []
        self._transports: list[_MemoryTransport] = []
        self._ports = 0
        self._wire = _Wire(reactor)
        overrides = {"group.initial.rebalance.delay.ms": 0, **(config or {})}
        self.config = BrokerConfig({**overrides, "broker.id": 0, "log.dirs": self._directory})
        now_ms = lambda: int(reactor.seconds() * 1000)  # noqa: E731
        self.zookeeper = FakeZooKeeperClient(reactor=reactor)
        self._wait(self.zookeeper.start())
        self.registry = Registry(self.zookeeper)
        self.metadata = MetadataCache(0, cluster_id="fake-cluster")
        self.metadata.set_brokers({0: BrokerEndpoint(0, self.host, self.port)})
        self.metadata.controller_id = 0
        self._log_manager = LogManager([self._directory], topic_log_config(self.config, {}), now_ms=now_ms)
        self._log_manager.load()
        self._replica_manager = ReplicaManager(
            0, self._log_manager, self.metadata, reactor, self._topic_config,
            write_isr=self.registry.set_partition_state, reload_state=self._reload_state, now_ms=now_ms)
        admin = _FakeClusterAdmin(self.config, self.registry, self.metadata, on_topic=self._topic_added)
        admin.cluster = self
        self.apis = KafkaApis(self.config, self._replica_manager, self.metadata, admin, reactor, now_ms)
        self._server_factory = KafkaServerFactory(self.apis, self.config["socket.request.max.bytes"])
        for name, count in (topics or {}).items():
            self.create_topic(name, count)

    # -- what users call -------------------------------------------------------------------

    def endpoint(self, host: str, port: int, timeout_s: float = 30.0) -> Any:
        """
        The C{IStreamClientEndpoint} to C{host:port}: connects to the broker
        when it is L{bootstrap_servers}' address, else is refused
        (C{ConnectionRefusedError}); C{timeout_s} (s) is unused.  This is a
        L{kafkatw.client.KafkaClient}'s C{endpoint_factory}.
        """
        return _FakeEndpoint(self, host, port)

    def client(self, **options: Any) -> Any:
        """
        A new L{kafkatw.client.KafkaClient} connected through L{endpoint}, to
        pass as C{client=} to a C{Producer}, C{Consumer} or C{AdminClient};
        L{close} closes it.

        @param options: further C{KafkaClient} options (C{client_id},
            C{metadata_max_age_ms}, C{request_timeout_ms}, …); C{random_source}
            is seeded by default (the n-th client's with n).
        """
        options.setdefault("random_source", random.Random(len(self._clients)))
        client = KafkaClient(self.reactor, self.bootstrap_servers, endpoint_factory=self.endpoint, **options)
        self._clients.append(client)
        return client

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        """
        Create topic C{name} with C{partitions} partitions (and topic
        C{config} overrides) at once, as CreateTopics does.

        @raise KafkaError: C{TOPIC_ALREADY_EXISTS}, C{INVALID_CONFIG}, ….
        """
        self._wait(ensureDeferred(self.apis.admin.create_topic(name, partitions, 1, None, dict(config or {}))))

    def advance(self, seconds: float, step_s: float = 0.01) -> None:
        """
        Turn the reactor's clock by C{seconds} (s) in steps of C{step_s} (s),
        running what falls due at each step (requests, answers, timers).
        """
        self.reactor.advance(0)
        steps = max(0, round(seconds / step_s))
        for _ in range(steps):
            self.reactor.advance(step_s)

    def result(self, d: Deferred, timeout_s: float = 60.0, step_s: float = 0.01) -> Any:
        """
        Turn the clock (in steps of C{step_s} s) until C{d} fires, at most
        C{timeout_s} (s) of the reactor's time.

        @return: C{d}'s result.
        @raise Exception: C{d}'s failure.
        @raise TimeoutError: C{d} did not fire within C{timeout_s}.
        """
        outcome: list[Any] = []
        d.addBoth(outcome.append)
        self.reactor.advance(0)
        steps = max(1, round(timeout_s / step_s))
        for _ in range(steps):
            if outcome:
                break
            self.reactor.advance(step_s)
        if not outcome:
            raise TimeoutError(f"not fired after {timeout_s:g} s of the fake cluster's clock")
        if isinstance(outcome[0], Failure):
            outcome[0].raiseException()
        return outcome[0]

    def close(self) -> None:
        """Close the clients made by L{client} and every connection, and delete the broker's logs."""
        if self.closed:
            return
        self.closed = True
        for client in self._clients:
            client.close()
        for transport in self._transports:
            transport.abortConnection()
        self.reactor.advance(0)
        self._log_manager.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    # -- what the real broker learns from ZooKeeper ----------------------------------------

    def _wait(self, d: Deferred) -> Any:
        """The result of C{d}, which fires at once (the fake ZooKeeper answers at once)."""
        outcome: list[Any] = []
        d.addBoth(outcome.append)
        if not outcome:
            self.reactor.advance(0)
        if not outcome:
            raise RuntimeError("a fake cluster operation did not complete at once")
        if isinstance(outcome[0], Failure):
            outcome[0].raiseException()
        return outcome[0]

    def _topic_config(self, topic: str) -> Any:
        meta = self.metadata.topics.get(topic)
        return topic_log_config(self.config, meta.config if meta is not None else {}, strict=False)

    def _reload_state(self, topic: str, partition: int) -> None:
        d = self.registry.get_partition_state(topic, partition)
        d.addCallback(lambda state: self._apply_state(topic, partition, state))

    def _apply_state(self, topic: str, partition: int, state: Any) -> None:
        self.metadata.set_partition_state(topic, partition, state)
        meta = self.metadata.topics.get(topic)
        if meta is not None:
            self._replica_manager.apply_state(topic, partition, meta.partitions.get(partition, []), state)

    def _topic_added(self, meta: Any) -> None:
        for partition, replicas in meta.partitions.items():
            self._replica_manager.host_partition(meta.name, partition)
            state = self.metadata.partition_states.get((meta.name, partition))
            if state is not None:
                self._replica_manager.apply_state(meta.name, partition, replicas, state)

    def _topic_changed(self, name: str) -> None:
        """New partitions of topic C{name} (CreatePartitions): the broker hosts and leads them."""
        assignment = self._wait(self.registry.get_topic(name))
        meta = self.metadata.topics[name]
        meta = TopicMetadata(name, assignment.topic_id, dict(assignment.partitions), dict(meta.config))
        self.metadata.set_topic(meta)
        self._topic_added(meta)

    def _topic_deleted(self, name: str) -> None:
        meta = self.metadata.topics.get(name)
        if meta is None:
            return
        self.metadata.remove_topic(name)
        for partition in meta.partitions:
            self._replica_manager.remove_partition(name, partition)
