"""
The one bridge between kazoo's threads and the Twisted reactor (DESIGN.md D5).

kazoo runs its connection and callbacks on its own threads.  Every public method
of L{ZooKeeperClient} returns a L{Deferred} that fires I{in the reactor thread}:
calls use kazoo's C{*_async} methods, whose L{IAsyncResult} is linked with
C{rawlink} to a function that re-enters the reactor with
C{reactor.callFromThread}.  Watches and session-state listeners are trampolined
the same way, so code above this module never sees a kazoo thread, and nothing
else in kafkatw imports kazoo.

Connect strings are ZooKeeper's (and Kafka's C{zookeeper.connect}):
C{HOST:PORT[,HOST:PORT...][/chroot]}.  All paths given to the client are
relative to the chroot (default C{/kafkatw}), which L{ZooKeeperClient.start}
creates when it is missing.

Session states follow kazoo (after Netflix Curator): C{"CONNECTED"},
C{"SUSPENDED"} (connection lost, session may still be alive: ephemeral nodes
still exist) and C{"LOST"} (session expired or closed: ephemeral nodes are gone).
After C{LOST}, kazoo reconnects with a new session; callbacks registered with
L{ZooKeeperClient.on_new_session} then run so that owners of ephemeral nodes
(a broker's C{/brokers/ids/<id>}) can create them again.

With an ensemble in the connect string, a dropped connection (its member
died, or the ensemble's leader did and every member is electing) is
C{SUSPENDED}; kazoo tries the other members in turn (L{RECONNECT_RETRY}) and
the session moves to the first that serves: C{CONNECTED} with the same
session and its ephemeral nodes, as long as that happens within the session
timeout of the ensemble serving again.
"""

from __future__ import annotations

import posixpath
from typing import Any, Callable, NamedTuple

from kazoo import exceptions as _kz_exceptions
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState
from twisted.internet import threads
from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure
from twisted.logger import Logger

__all__ = [
    "ZooKeeperError",
    "NoNodeError",
    "NodeExistsError",
    "BadVersionError",
    "NotEmptyError",
    "ZooKeeperUnavailableError",
    "ZnodeStat",
    "CheckOp",
    "CreateOp",
    "SetOp",
    "DeleteOp",
    "Watch",
    "ZooKeeperClient",
    "parse_connect_string",
    "connected_again",
    "next_connected",
    "unless_disconnected",
    "DEFAULT_CHROOT",
]

_log = Logger()

DEFAULT_CHROOT = "/kafkatw"


class ZooKeeperError(Exception):
    """
    Any ZooKeeper failure; the subclasses name the ones callers handle.

    @ivar op_index: for a failed L{ZooKeeperClient.multi}, the index of the
        operation that failed (the others were rolled back); else C{None}.
    """

    op_index: int | None = None


class NoNodeError(ZooKeeperError):
    """The znode (or, on create, its parent) does not exist."""


class NodeExistsError(ZooKeeperError):
    """The znode already exists."""


class BadVersionError(ZooKeeperError):
    """A conditional set or delete saw a different znode version."""


class NotEmptyError(ZooKeeperError):
    """A non-recursive delete of a znode that has children."""


class ZooKeeperUnavailableError(ZooKeeperError):
    """ZooKeeper cannot be reached, the connection dropped, or the session expired."""


class ZnodeStat(NamedTuple):
    """
    A znode's metadata, field for field ZooKeeper's C{Stat} (times in ms since the
    epoch, C{ephemeralOwner} is the owning session id or 0).
    """

    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeralOwner: int
    dataLength: int
    numChildren: int
    pzxid: int


_ERROR_MAP: list[tuple[type[BaseException], type[ZooKeeperError]]] = [
    (_kz_exceptions.NoNodeError, NoNodeError),
    (_kz_exceptions.NodeExistsError, NodeExistsError),
    (_kz_exceptions.BadVersionError, BadVersionError),
    (_kz_exceptions.NotEmptyError, NotEmptyError),
    (_kz_exceptions.ConnectionLoss, ZooKeeperUnavailableError),
    (_kz_exceptions.SessionExpiredError, ZooKeeperUnavailableError),
    (_kz_exceptions.ConnectionClosedError, ZooKeeperUnavailableError),
    (_kz_exceptions.OperationTimeoutError, ZooKeeperUnavailableError),
    (KazooTimeoutError, ZooKeeperUnavailableError),
    (_kz_exceptions.KazooException, ZooKeeperError),
]


class CheckOp(NamedTuple):
    """A L{ZooKeeperClient.multi} operation: fail unless C{path} exists with version C{version}."""

    path: str
    version: int


class CreateOp(NamedTuple):
    """A L{ZooKeeperClient.multi} operation: create C{path} (its parent must exist)."""

    path: str
    value: bytes = b""
    ephemeral: bool = False


class SetOp(NamedTuple):
    """A L{ZooKeeperClient.multi} operation: set C{path}'s data (only at C{version} when C{>= 0})."""

    path: str
    value: bytes
    version: int = -1


class DeleteOp(NamedTuple):
    """A L{ZooKeeperClient.multi} operation: delete C{path} (childless; only at C{version} when C{>= 0})."""

    path: str
    version: int = -1


def _translate(exc: BaseException) -> BaseException:
    for kz_type, our_type in _ERROR_MAP:
        if isinstance(exc, kz_type):
            translated = our_type(str(exc) or kz_type.__name__)
            translated.__cause__ = exc
            return translated
    return exc


def _stat(kz_stat: Any) -> ZnodeStat | None:
    return None if kz_stat is None else ZnodeStat(*kz_stat)


def parse_connect_string(connect: str, default_chroot: str = DEFAULT_CHROOT) -> tuple[str, str]:
    """
    Split a ZooKeeper connect string into hosts and chroot.

    @param connect: C{"HOST:PORT[,HOST:PORT...][/chroot]"}, as Kafka's
        C{zookeeper.connect}.
    @param default_chroot: the chroot when C{connect} names none.
    @return: C{(hosts, chroot)}; C{chroot} is normalised, absolute, without a
        trailing slash (C{""} or C{"/"} means no chroot: C{"/"}).
    @raise ValueError: empty hosts or a host without a port.
    """
    connect = connect.strip()
    slash = connect.find("/")
    if slash >= 0:
        hosts, chroot = connect[:slash], connect[slash:]
    else:
        hosts, chroot = connect, default_chroot
    if not hosts:
        raise ValueError(f"no ZooKeeper hosts in connect string {connect!r}")
    for host in hosts.split(","):
        name, sep, port = host.strip().rpartition(":")
        if not sep or not name or not port.isdigit():
            raise ValueError(f"ZooKeeper host must be HOST:PORT, got {host!r} in {connect!r}")
    chroot = posixpath.normpath("/" + (chroot or "").strip("/"))
    return hosts, chroot


class Watch:
    """
    A re-arming watch; L{cancel} stops further callbacks.

    Callbacks run in the reactor thread with the current children (a sorted list
    of names) or the current data (C{bytes}, or C{None} while the node does not
    exist).  ZooKeeper coalesces changes that happen between a notification and
    the re-read, and a reconnection re-reads, so a callback may see the same value
    twice and never sees every intermediate value.
    """

    def __init__(self, client: "ZooKeeperClient", path: str, kind: str, callback: Callable[[Any], object]):
        self.path = path
        self.kind = kind
        self._client = client
        self._callback = callback
        self.cancelled = False
        self._first: Deferred | None = Deferred()

    def cancel(self) -> None:
        self.cancelled = True
        self._client._watches.discard(self)

    def _refresh(self) -> None:
        if self.cancelled or not self._client.connected:
            return
        kz = self._client._kazoo
        reactor = self._client._reactor

        def on_event(event: Any) -> None:
            # kazoo thread.  NONE events mean "connection lost, watches reset":
            # the CONNECTED listener re-reads instead.
            if event.type != EventType.NONE:
                reactor.callFromThread(self._refresh)

        if self.kind == "children":
            d = self._client._call(kz.get_children_async, self.path, watch=on_event)
            d.addCallback(lambda children: sorted(children))
        elif self.kind == "versioned":
            d = self._client._call(kz.get_async, self.path, watch=on_event)
            d.addCallback(lambda result: (result[0], result[1].version))
        elif self.kind == "stat":
            d = self._client._call(kz.get_async, self.path, watch=on_event)
            d.addCallback(lambda result: (result[0], _stat(result[1])))
        else:
            d = self._client._call(kz.get_async, self.path, watch=on_event)
            d.addCallback(lambda result: result[0])

        def missing(failure: Any) -> Any:
            failure.trap(NoNodeError)
            # Watch for creation instead; the node may also have appeared already.
            d2 = self._client._call(kz.exists_async, self.path, watch=on_event)

            def exists(stat: Any) -> Any:
                if stat is not None:
                    self._client._reactor.callLater(0, self._refresh)
                    return _SKIP
                return _MISSING[self.kind]

            return d2.addCallback(exists)

        d.addErrback(missing)
        d.addCallbacks(self._deliver, self._failed)

    def _deliver(self, value: Any) -> None:
        if value is _SKIP or self.cancelled:
            return
        try:
            self._callback(value)
        except Exception:
            _log.failure("ZooKeeper watch callback on {path} failed", path=self.path)
        first, self._first = self._first, None
        if first is not None:
            first.callback(self)

    def _failed(self, failure: Any) -> None:
        if failure.check(ZooKeeperUnavailableError):
            # Re-read when the connection comes back (see ZooKeeperClient._state).
            return
        _log.failure("ZooKeeper watch on {path} failed", failure, path=self.path)
        first, self._first = self._first, None
        if first is not None:
            first.errback(failure)


_SKIP = object()
#: What a watch delivers while its node does not exist, by kind.
_MISSING: dict[str, Any] = {"children": [], "data": None, "versioned": (None, -1), "stat": (None, None)}


#: How kazoo reconnects after the connection dropped: it tries every host of
#: the connect string in turn, then waits before the next round.  kazoo's
#: default doubles the wait up to an hour (3600 s), so after a quorum outage of
#: 15 s a client came back 9 s after the quorum did, its session expired
#: meanwhile.  ZooKeeper's Java client (Kafka's) waits a random 0 to 1 s
#: before each attempt and 1 s after trying every host, without growing
#: (C{ClientCnxn.SendThread.startConnect}, C{StaticHostProvider.next}).
#: Here: 0.1 s, doubling to at most 1 s (each wait +-40% jitter), without end.
RECONNECT_RETRY: dict[str, Any] = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0}


def next_connected(client: Any) -> Deferred:
    """
    A Deferred firing (with C{None}) at C{client}'s next C{CONNECTED} state
    (a L{ZooKeeperClient}, or any client with its state listeners: the
    simulation's and the tests' models): what is to be made again once a
    lost connection is back, as Kafka's C{retryRequestsUntilConnected}.
    """
    d: Deferred = Deferred()

    def listener(state: str) -> None:
        if state == "CONNECTED" and not d.called:
            client.remove_state_listener(listener)
            d.callback(None)

    client.add_state_listener(listener)
    return d


def connected_again(client: Any) -> Deferred:
    """
    L{next_connected}, or a Deferred fired already when C{client} is
    connected now: a failure for a lost connection may be handled after the
    client has connected again (its answer came after the reconnection, as
    the simulation's lagging links deliver it), and a C{CONNECTED} state
    that came before would never be followed by another while the
    connection holds (the simulation's seed 146128: a broker's
    re-registration waited so for good, out of C{/brokers/ids}).
    """
    if client.connected:
        return succeed(None)
    return next_connected(client)


def unless_disconnected(d: Deferred, client: Any) -> Deferred:
    """
    A Deferred firing with C{d}'s result, or with C{None} as soon as
    C{client} is not connected (at once if it is not now): what a shutdown
    waits for only while ZooKeeper can answer.  Requests made without a
    connection wait in the client for it (kazoo queues them) and fail when
    the session is closed; C{d} goes on meanwhile: a failure it ends with
    after that is dropped here (log it on C{d} first).
    """
    if not client.connected:
        return succeed(None)
    result: Deferred = Deferred()

    def listener(state: str) -> None:
        if state != "CONNECTED" and not result.called:
            result.callback(None)

    def done(value: Any) -> Any:
        if not result.called:
            result.callback(value)
        return None

    def finished(value: Any) -> Any:
        client.remove_state_listener(listener)
        return value

    client.add_state_listener(listener)
    result.addBoth(finished)
    d.addBoth(done)
    return result


class ZooKeeperClient:
    """
    A ZooKeeper session whose operations return Deferreds fired in the reactor.

    @ivar hosts: C{HOST:PORT[,...]} without chroot.
    @ivar chroot: the absolute chroot all paths are relative to.
    """

    def __init__(
        self,
        hosts: str,
        reactor: Any,
        chroot: str = DEFAULT_CHROOT,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
    ):
        """
        @param hosts: a connect string C{HOST:PORT[,HOST:PORT][/chroot]}; a chroot
            given here overrides C{chroot}.
        @param reactor: the reactor (L{IReactorThreads}, L{IReactorTime}).
        @param session_timeout_ms: requested session timeout (ms); ZooKeeper
            clamps it to [2, 20] x tickTime.  Kafka's C{zookeeper.session.timeout.ms}.
        @param connection_timeout_ms: how long L{start} waits for the first
            connection (ms); defaults to C{session_timeout_ms}, as Kafka's
            C{zookeeper.connection.timeout.ms} does.
        """
        self.hosts, self.chroot = parse_connect_string(hosts, chroot)
        self._reactor = reactor
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms if connection_timeout_ms is not None else session_timeout_ms
        self._kazoo = KazooClient(hosts=self.hosts, timeout=session_timeout_ms / 1000.0,
                                  connection_retry=dict(RECONNECT_RETRY))
        self._kazoo.add_listener(self._kazoo_state)
        self._state_listeners: list[Callable[[str], object]] = []
        self._new_session_callbacks: list[Callable[[], object]] = []
        self._watches: set[Watch] = set()
        self._started = False
        self._stopping = False
        self._session_lost = False

    def _in_thread(self, function: Callable[[], Any]) -> Deferred:
        # The thread pool of *this* client's reactor, not the global one: a
        # private reactor (kafkatw.client.blocking) must get the result back.
        return threads.deferToThreadPool(self._reactor, self._reactor.getThreadPool(), function)

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> Deferred:
        """
        Connect, then create the chroot when it is missing.

        @return: a Deferred firing with C{None} once connected.
        @raise ZooKeeperUnavailableError: (as the Deferred's failure) when no
            server answered within C{connection_timeout_ms}.
        """
        timeout_s = self.connection_timeout_ms / 1000.0

        def blocking_start() -> None:
            kz = self._kazoo
            try:
                kz.start(timeout=timeout_s)
            except KazooTimeoutError:
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper at {self.hosts} did not answer within {self.connection_timeout_ms} ms"
                )
            if self.chroot != "/":
                kz.ensure_path(self.chroot)
                kz.chroot = self.chroot

        def started(_: Any) -> None:
            self._started = True
            _log.info("connected to ZooKeeper {hosts}{chroot}", hosts=self.hosts, chroot=self.chroot)

        d = self._in_thread(blocking_start)
        d.addErrback(lambda f: f if f.check(ZooKeeperError) else Failure(_translate(f.value)))
        return d.addCallback(started)

    def stop(self) -> Deferred:
        """Close the session (its ephemeral nodes vanish at once) and the connection."""
        self._stopping = True
        for watch in list(self._watches):
            watch.cancel()

        def blocking_stop() -> None:
            self._kazoo.stop()
            self._kazoo.close()

        return self._in_thread(blocking_stop)

    @property
    def connected(self) -> bool:
        """C{True} while the session is connected."""
        return bool(self._kazoo.connected)

    @property
    def session_id(self) -> int | None:
        """The current session id (a znode's C{ephemeralOwner}), or C{None}."""
        client_id = self._kazoo.client_id
        return None if client_id is None else client_id[0]

    @property
    def session_password(self) -> bytes | None:
        """The current session's password (with L{session_id}, what L{end_session} takes), or C{None}."""
        client_id = self._kazoo.client_id
        return None if client_id is None else client_id[1]

    def end_session(self, session_id: int, password: bytes) -> Deferred:
        """
        End another session of this ensemble now, as its expiry would: a
        second connection attaches to it with its id and password (as a client
        moving to another server does), then closes it, and ZooKeeper deletes
        its ephemeral nodes at once (ZooKeeper Programmer's Guide, "ZooKeeper
        Sessions").  Nodes of any other session are untouched.  A session that
        has ended already (expired, closed, or a wrong password) cannot be
        attached to; that connection gets a session of its own, closed at once.

        @param session_id: the session id (an C{ephemeralOwner}).
        @param password: its password (L{session_password} of its owner).
        @return: a Deferred firing with C{True} if the session was open and is
            now closed, C{False} if it had ended already.
        @raise ZooKeeperUnavailableError: no server answered within
            C{connection_timeout_ms}.
        """
        timeout_s = self.connection_timeout_ms / 1000.0

        def blocking_end() -> bool:
            other = KazooClient(hosts=self.hosts, client_id=(session_id, password),
                                timeout=self.session_timeout_ms / 1000.0)
            try:
                try:
                    other.start(timeout=timeout_s)
                except KazooTimeoutError:
                    raise ZooKeeperUnavailableError(
                        f"ZooKeeper at {self.hosts} did not answer within {self.connection_timeout_ms} ms") from None
                attached = other.client_id is not None and other.client_id[0] == session_id
                return attached
            finally:
                other.stop()  # closes the session it is attached to
                other.close()

        d = self._in_thread(blocking_end)
        return d.addErrback(lambda f: f if f.check(ZooKeeperError) else Failure(_translate(f.value)))

    def add_state_listener(self, callback: Callable[[str], object]) -> None:
        """Call C{callback("CONNECTED"|"SUSPENDED"|"LOST")} in the reactor on each change."""
        self._state_listeners.append(callback)

    def remove_state_listener(self, callback: Callable[[str], object]) -> None:
        self._state_listeners.remove(callback)

    def on_new_session(self, callback: Callable[[], object]) -> None:
        """
        Call C{callback()} in the reactor each time a new session is established
        after the previous one was lost (expired): re-create ephemeral nodes here.
        Not called for the first session, nor after L{stop}.
        """
        self._new_session_callbacks.append(callback)

    def _kazoo_state(self, state: str) -> None:
        # kazoo thread: never block here.
        self._reactor.callFromThread(self._state, str(state))

    def _state(self, state: str) -> None:
        _log.debug("ZooKeeper session state {state}", state=state)
        new_session = False
        if state == KazooState.LOST and not self._stopping and self._started:
            self._session_lost = True
            _log.warn("ZooKeeper session lost; ephemeral nodes are gone")
        elif state == KazooState.CONNECTED:
            if self._session_lost:
                self._session_lost = False
                new_session = True
            for watch in list(self._watches):
                watch._refresh()
        for listener in list(self._state_listeners):
            try:
                listener(state)
            except Exception:
                _log.failure("ZooKeeper state listener failed")
        if new_session:
            _log.info("new ZooKeeper session {session:x}", session=self.session_id or 0)
            for callback in list(self._new_session_callbacks):
                try:
                    result = callback()
                    if isinstance(result, Deferred):
                        result.addErrback(lambda f: _log.failure("new-session callback failed", f))
                except Exception:
                    _log.failure("new-session callback failed")

    # -- operations -----------------------------------------------------------

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred:
        """Run a kazoo C{*_async} method; fire the result in the reactor thread."""
        d: Deferred = Deferred()
        reactor = self._reactor

        def fire(result: Any) -> None:
            try:
                value = result.get_nowait()
            except BaseException as e:
                reactor.callFromThread(d.errback, _translate(e))
            else:
                reactor.callFromThread(d.callback, value)

        try:
            async_result = method(*args, **kwargs)
        except BaseException as e:
            d.errback(_translate(e))
            return d
        async_result.rawlink(fire)
        return d

    def create(
        self,
        path: str,
        value: bytes = b"",
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> Deferred:
        """
        Create a znode.

        @return: a Deferred firing with the created path (with the sequence
            suffix when C{sequence}).
        @raise NodeExistsError: the path exists.
        @raise NoNodeError: the parent is missing and C{makepath} is false.
        """
        return self._call(
            self._kazoo.create_async, path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath
        )

    def ensure_path(self, path: str) -> Deferred:
        """Create C{path} and its missing ancestors (empty, persistent)."""
        return self._call(self._kazoo.ensure_path_async, path).addCallback(lambda _: None)

    def get(self, path: str) -> Deferred:
        """@return: a Deferred firing with C{(data: bytes, stat: ZnodeStat)}; L{NoNodeError}."""
        return self._call(self._kazoo.get_async, path).addCallback(lambda r: (r[0] or b"", _stat(r[1])))

    def get_children(self, path: str) -> Deferred:
        """@return: a Deferred firing with the sorted child names; L{NoNodeError}."""
        return self._call(self._kazoo.get_children_async, path).addCallback(sorted)

    def exists(self, path: str) -> Deferred:
        """@return: a Deferred firing with a L{ZnodeStat}, or C{None} when missing."""
        return self._call(self._kazoo.exists_async, path).addCallback(_stat)

    def set(self, path: str, value: bytes, version: int = -1) -> Deferred:
        """
        Set a znode's data; with C{version >= 0} only if its version matches.

        @return: a Deferred firing with the new L{ZnodeStat}.
        @raise BadVersionError: the version differs.  @raise NoNodeError.
        """
        return self._call(self._kazoo.set_async, path, value, version=version).addCallback(_stat)

    def fenced_set(self, fence_path: str, fence_version: int, path: str, value: bytes, version: int = -1) -> Deferred:
        """
        Set C{path}'s data only while C{fence_path} still has version
        C{fence_version}: one ZooKeeper multi (a check and a set), as Kafka's
        controller fences every write with C{/controller_epoch}'s version (KIP-0
        era C{KafkaZkClient.checkedEphemeral}/C{MultiRequest}).

        @return: a Deferred firing with C{path}'s new L{ZnodeStat}.
        @raise BadVersionError: C{fence_path} or C{path} changed (the message
            says which; C{op_index} is 0 for C{fence_path}, 1 for C{path}).
        @raise NoNodeError: either node is missing (C{op_index} as above).
        """

        def commit() -> Any:
            transaction = self._kazoo.transaction()
            transaction.check(fence_path, fence_version)
            transaction.set_data(path, value, version)
            return transaction.commit_async()

        def results(values: list) -> Any:
            check, stat = values
            if isinstance(check, BaseException) and not isinstance(check, _kz_exceptions.RolledBackError):
                error = _translate(check)
                failed = type(error)(f"{fence_path} changed (expected version {fence_version})")
                failed.op_index = 0
                raise failed
            if isinstance(stat, BaseException):
                error = _translate(stat)
                failed = type(error)(f"{path}: {error} (expected version {version})")
                failed.op_index = 1
                raise failed
            return _stat(stat)

        return self._call(commit).addCallback(results)

    def multi(self, ops: list[CheckOp | CreateOp | SetOp | DeleteOp]) -> Deferred:
        """
        Run C{ops} as one ZooKeeper multi: all of them in order, or none
        (ZooKeeper Programmer's Guide, "Multi-update"; kazoo's
        C{transaction}).  A check is how a write is fenced: the multi fails
        unless the fence znode still has the version the writer read.

        @return: a Deferred firing with one result per op: C{True} for a
            check or a delete, the created path for a create, the new
            L{ZnodeStat} for a set.
        @raise BadVersionError, NoNodeError, NodeExistsError, NotEmptyError:
            the first op that failed, its index in C{op_index}; nothing was
            changed.
        """
        ops = list(ops)

        def commit() -> Any:
            transaction = self._kazoo.transaction()
            for op in ops:
                if isinstance(op, CheckOp):
                    transaction.check(op.path, op.version)
                elif isinstance(op, CreateOp):
                    transaction.create(op.path, op.value, ephemeral=op.ephemeral)
                elif isinstance(op, SetOp):
                    transaction.set_data(op.path, op.value, op.version)
                elif isinstance(op, DeleteOp):
                    transaction.delete(op.path, op.version)
                else:
                    raise TypeError(f"not a multi operation: {op!r}")
            return transaction.commit_async()

        def results(values: list) -> list:
            for index, value in enumerate(values):
                # In a failed multi the other ops report RolledBack (before the
                # failure) and RuntimeInconsistency (after it).
                if isinstance(value, BaseException) and not isinstance(
                        value, (_kz_exceptions.RolledBackError, _kz_exceptions.RuntimeInconsistency)):
                    error = _translate(value)
                    failed = type(error)(f"multi op {index} {ops[index]!r}: {error}")
                    failed.op_index = index
                    raise failed
            if any(isinstance(value, BaseException) for value in values):
                raise ZooKeeperError(f"multi failed without an error: {values!r}")
            return [_stat(v) if isinstance(op, SetOp) else v for op, v in zip(ops, values)]

        return self._call(commit).addCallback(results)

    def delete(self, path: str, recursive: bool = False, version: int = -1) -> Deferred:
        """
        Delete a znode; C{recursive} deletes its descendants first (not atomic).

        @raise NoNodeError: missing (not raised for C{recursive}).
        @raise NotEmptyError: has children and not C{recursive}.
        """
        if recursive:

            def blocking_delete() -> None:
                try:
                    self._kazoo.delete(path, version=version, recursive=True)
                except BaseException as e:
                    raise _translate(e)

            return self._in_thread(blocking_delete)
        return self._call(self._kazoo.delete_async, path, version=version).addCallback(lambda _: None)

    # -- watches --------------------------------------------------------------

    def watch_children(self, path: str, callback: Callable[[list[str]], object]) -> Deferred:
        """
        Call C{callback(children)} now and after every change of C{path}'s
        children (a missing node has no children: C{[]}, and the watch waits for
        it to be created).

        @return: a Deferred firing with the L{Watch} after the first callback.
        """
        return self._watch(path, "children", callback)

    def watch_data(self, path: str, callback: Callable[[bytes | None], object]) -> Deferred:
        """
        Call C{callback(data)} now and after every change of C{path}'s data,
        C{callback(None)} while the node does not exist.

        @return: a Deferred firing with the L{Watch} after the first callback.
        """
        return self._watch(path, "data", callback)

    def watch_versioned_data(self, path: str, callback: Callable[[tuple[bytes | None, int]], object]) -> Deferred:
        """
        As L{watch_data}, but C{callback((data, version))} with the znode's
        version (for conditional sets); C{(None, -1)} while it does not exist.
        """
        return self._watch(path, "versioned", callback)

    def watch_data_with_stat(self, path: str,
                             callback: Callable[[tuple[bytes | None, ZnodeStat | None]], object]) -> Deferred:
        """
        As L{watch_data}, but C{callback((data, stat))} with the znode's
        L{ZnodeStat} (its version, and the zxid of its last write, C{mzxid});
        C{(None, None)} while it does not exist.
        """
        return self._watch(path, "stat", callback)

    def _watch(self, path: str, kind: str, callback: Callable[[Any], object]) -> Deferred:
        watch = Watch(self, path, kind, callback)
        self._watches.add(watch)
        first = watch._first
        assert first is not None
        if not self.connected:
            watch.cancel()
            return _fail(ZooKeeperUnavailableError(f"not connected to ZooKeeper {self.hosts}"))
        watch._refresh()
        return first

    # -- testing --------------------------------------------------------------

    def expire_session_for_testing(self) -> Deferred:
        """
        Expire this client's session on the server, the standard way: open a
        second connection with the same session id and password, then close it.
        The client then sees C{LOST} and reconnects with a new session.
        """
        session_id, password = self._kazoo.client_id

        def blocking_expire() -> None:
            other = KazooClient(hosts=self.hosts, client_id=(session_id, password))
            other.start(timeout=self.connection_timeout_ms / 1000.0)
            other.stop()
            other.close()

        return self._in_thread(blocking_expire)


def _fail(exc: BaseException) -> Deferred:
    d: Deferred = Deferred()
    d.errback(exc)
    return d

