"""
A simulated network and one simulated reactor for a whole cluster.

Simulated here: time (one L{SimulatedReactor} for every node), TCP between
nodes, and the nodes' threads.  Real: everything that runs on them -- the
brokers' and clients' protocols, their timers, their files.

  - L{SimulatedReactor} is the clock (Twisted's C{IReactorTime} over a heap
    of C{DelayedCall}s).  L{SimulatedReactor.run_until} runs the delayed
    calls in time order, each at its own time.
  - L{NodeReactor} is one node's view of it (a broker process, the clients):
    C{callLater} and C{seconds} of the shared clock (monotonic, as the
    reactor of C{twistd kafkatw}: L{kafkatw.tap.use_monotonic_clock}), and
    the node's wall clock (L{NodeReactor.wall_seconds}), the shared clock
    plus an offset that L{NodeReactor.jump_clock} moves; C{listenTCP} and
    C{connectTCP} through the L{SimulatedNetwork}, with this node as the
    source; a thread pool that runs the work at once, on the reactor
    (C{deferToThreadPool} then fires on the next turn: the brokers'
    checkpoint writes); a name resolver that resolves every host to itself.
    A crashed node's reactor is L{NodeReactor.kill}ed: nothing scheduled on
    it runs any more, its listeners and connections vanish (the peers see a
    reset).  A stopped one (SIGSTOP, L{NodeReactor.pause}) parks its timers
    and the bytes and connections that arrive for it (their C{DelayedCall}s
    stay pending) until L{NodeReactor.resume}.
  - L{SimulatedNetwork} carries bytes between L{SimulatedTransport}s: each
    direction of each link has a latency (seconds, chosen by the caller from
    its seed), delivery is in order per connection and direction (TCP), and a
    link can be cut one way or both ways: with C{"hold"} the bytes of the
    open connections wait in the network until L{SimulatedNetwork.heal}; with
    C{"drop"} the connections across it are reset at once (both ends see
    C{ConnectionLost}).  Either way a new connection across a cut loses its
    SYN, sent again after 1, 2, 4, ... s (TCP's retransmission) until it
    gets through or the connection attempt times out.  A link can be made
    slow or lossy (L{SimulatedNetwork.impair}): a delay, a jitter per
    message, and lost transmissions that stall the connection by TCP's
    retransmission timeouts or, lost too often, reset it; still in order
    per connection and direction.

A connection's life: C{connectTCP} sends a SYN (after the link's latency the
listener's factory builds the server protocol; with no listener the client
is refused after a round trip), the SYN-ACK comes back (the client's
factory builds its protocol), then bytes, then a FIN (C{loseConnection}, in
order after the bytes) or a reset (C{abortConnection}, at once locally).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet import defer, error
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import (
    IConnector,
    IHostnameResolver,
    IHostResolution,
    IListeningPort,
    IPushProducer,
    IReactorPluggableNameResolver,
    IReactorTCP,
    IReactorTime,
    ITransport,
)
from twisted.internet.base import DelayedCall
from twisted.python.failure import Failure
from zope.interface import implementer

__all__ = ["SimulatedReactor", "NodeReactor", "SimulatedNetwork", "SimulatedTransport", "Impairment", "StuckError"]


class StuckError(Exception):
    """The simulation ran too many calls at one instant (a zero-delay loop)."""


_NO_KEYWORDS: dict = {}


class _Event:
    """
    A call of the simulation's own (bytes arriving, a ZooKeeper reply) in
    the heap: what L{SimulatedReactor.run_until} reads of a C{DelayedCall},
    without its cost; it cannot be cancelled (L{SimulatedReactor.schedule}).
    """

    __slots__ = ("time", "func", "args", "kw", "called")
    cancelled = False
    delayed_time = 0

    def __init__(self, time: float, func: Callable[..., Any], args: tuple) -> None:
        self.time = time
        self.func = func
        self.args = args
        self.kw = _NO_KEYWORDS
        self.called = 0

    def active(self) -> bool:
        return not self.called


@implementer(IReactorTime)
class SimulatedReactor:
    """
    The one clock of a simulation: Twisted's C{IReactorTime} (as
    C{twisted.internet.task.Clock}, whose C{DelayedCall}s it makes), with the
    calls kept in a heap rather than a list sorted at every C{callLater}.
    Calls due at the same time run in the order they were made.  Nothing runs
    but through L{run_until} (or L{advance}).

    @ivar events: how many delayed calls have run (a measure of work).
    """

    #: calls run at one instant before L{StuckError}
    MAX_CALLS_AT_ONE_TIME = 1_000_000

    def __init__(self, start_seconds: float = 0.0) -> None:
        self._now = start_seconds
        #: (time, sequence, call, owner): the owner is the L{NodeReactor} whose process runs it, if any
        self._heap: list[tuple[float, int, DelayedCall, Any]] = []
        self._sequence = itertools.count()
        self.events = 0

    def seconds(self) -> float:
        return self._now

    def callLater(self, delay: float, f: Callable[..., Any], *args: Any, **kw: Any) -> DelayedCall:  # noqa: N802
        return self.call_later_for(None, delay, f, *args, **kw)

    def call_later_for(self, owner: Any, delay: float, f: Callable[..., Any], *args: Any, **kw: Any) -> DelayedCall:
        """
        C{callLater} on behalf of C{owner} (a L{NodeReactor}): while it is
        paused, its calls that come due are parked, still pending, and run
        on L{resume}.
        """
        call = DelayedCall(self._now + delay, f, args, kw, self._cancelled, lambda c: self._push(c, owner),
                           seconds=self.seconds)
        heapq.heappush(self._heap, (call.time, next(self._sequence), call, owner))
        return call

    def schedule(self, owner: Any, delay: float, f: Callable[..., Any], *args: Any) -> None:
        """
        As L{call_later_for}, for the simulation's own calls (the network's,
        the ZooKeeper model's): nothing to cancel, so no C{DelayedCall} is made.
        """
        heapq.heappush(self._heap, (self._now + delay, next(self._sequence), _Event(self._now + delay, f, args), owner))

    def _push(self, call: DelayedCall | _Event, owner: Any) -> None:
        heapq.heappush(self._heap, (call.time, next(self._sequence), call, owner))

    def _cancelled(self, call: DelayedCall) -> None:
        pass  # left in the heap, skipped when its time comes

    def getDelayedCalls(self) -> list[DelayedCall]:  # noqa: N802
        calls: dict[int, DelayedCall] = {}  # a call pushed again (reset to an earlier time) is in the heap twice
        for entry in sorted(self._heap, key=lambda e: e[:2]):
            if entry[2].active():
                calls.setdefault(id(entry[2]), entry[2])
        return list(calls.values())

    def resume(self, owner: Any, parked: list[DelayedCall]) -> None:
        """Run C{owner}'s parked calls now, in the order they came due (those not cancelled meanwhile)."""
        for call in parked:
            if not call.active():
                continue
            if isinstance(call, _Event):
                call.time = self._now
            else:
                call.reset(0)  # due now: a later time than the one it had
            self._push(call, owner)

    def _next(self) -> tuple[float, DelayedCall, Any] | None:
        """
        The next call to run, C{(time, call, owner)}, past the cancelled and
        moved ones; None when none is left.
        """
        heap = self._heap
        while heap:
            time, _, call, owner = heap[0]
            if call.cancelled or call.called or time != call.time:
                heapq.heappop(heap)  # cancelled, called, or reset to an earlier time (pushed again)
                continue
            if call.delayed_time:
                heapq.heappop(heap)
                call.activate_delay()  # delayed or reset to a later time: its place moves
                self._push(call, owner)
                continue
            return time, call, owner
        return None

    def run_until(self, deadline: float, stop: Callable[[], bool] | None = None) -> None:
        """
        Run every delayed call due at or before C{deadline} (seconds), each at
        its own time and in order, then leave the clock at C{deadline}; with
        C{stop}, return as soon as it is true after a call.

        @raise StuckError: more than L{MAX_CALLS_AT_ONE_TIME} calls at one instant.
        """
        at_once = 0
        while True:
            found = self._next()
            if found is None or found[0] > deadline:
                break
            time, call, owner = found
            heapq.heappop(self._heap)
            if owner is not None and owner.paused:
                owner.parked.append(call)  # still pending: it runs when its process resumes
                continue
            if time > self._now:
                self._now = time
                at_once = 0
            else:
                at_once += 1
                if at_once > self.MAX_CALLS_AT_ONE_TIME:
                    raise StuckError(f"more than {self.MAX_CALLS_AT_ONE_TIME} calls at t={self._now}")
            call.called = 1
            self.events += 1
            call.func(*call.args, **call.kw)
            if stop is not None and stop():
                return
        if deadline > self._now:
            self._now = deadline

    def advance(self, amount: float) -> None:
        """Move the clock C{amount} seconds, running what is due (as C{Clock.advance})."""
        self.run_until(self._now + amount)


@implementer(IHostResolution)
@dataclass
class _Resolution:
    name: str

    def cancel(self) -> None:  # resolved before it is returned
        pass


@implementer(IHostnameResolver)
class _SelfResolver:
    """Every host name is its own address (the simulation's hosts are IPv4 literals)."""

    def resolveHostName(self, resolutionReceiver: Any, hostName: str, portNumber: int = 0,  # noqa: N802,N803
                        addressTypes: Any = None, transportSemantics: str = "TCP") -> IHostResolution:  # noqa: N803
        resolution = _Resolution(hostName)
        resolutionReceiver.resolutionBegan(resolution)
        resolutionReceiver.addressResolved(IPv4Address("TCP", hostName, portNumber))
        resolutionReceiver.resolutionComplete()
        return resolution


class _SynchronousThreadPool:
    """C{callInThreadWithCallback} runs the work at once, on the reactor: no threads in a simulation."""

    def callInThreadWithCallback(self, onResult: Callable[[bool, Any], object],  # noqa: N802,N803
                                 func: Callable[..., Any], *args: Any, **kw: Any) -> None:
        try:
            result = func(*args, **kw)
        except BaseException:
            onResult(False, Failure())
        else:
            onResult(True, result)

    def callInThread(self, func: Callable[..., Any], *args: Any, **kw: Any) -> None:  # noqa: N802
        func(*args, **kw)


@implementer(IReactorTime, IReactorTCP, IReactorPluggableNameResolver)
class NodeReactor:
    """
    One node's reactor: the shared clock, this node's listeners and connections.

    @param node: the node's name in the L{SimulatedNetwork} (its host address for brokers).
    """

    def __init__(self, simulated: SimulatedReactor, network: "SimulatedNetwork", node: str) -> None:
        self.simulated = simulated
        self.network = network
        self.node = node
        self.alive = True
        #: stopped (SIGSTOP): its calls that come due wait in L{parked} until L{resume}
        self.paused = False
        self.parked: list[Any] = []  # DelayedCalls and the simulation's own events
        #: seconds this node's wall clock is ahead of the simulated clock (L{jump_clock})
        self.clock_offset = 0.0
        self.nameResolver = _SelfResolver()
        self._pool = _SynchronousThreadPool()
        self.running = True

    # time

    def seconds(self) -> float:
        """The reactor's time: the simulated clock, monotonic (L{kafkatw.tap.use_monotonic_clock})."""
        return self.simulated._now

    def wall_seconds(self) -> float:
        """This node's wall clock (C{time.time}'s shape): the simulated clock plus L{clock_offset}."""
        return self.simulated._now + self.clock_offset

    def callLater(self, delay: float, f: Callable[..., Any], *args: Any, **kw: Any) -> Any:  # noqa: N802
        return self.simulated.call_later_for(self, delay, self._run, f, args, kw)

    def jump_clock(self, seconds: float) -> None:
        """
        The node's wall clock is set C{seconds} ahead (back, when negative),
        as by an NTP step or an operator: L{wall_seconds} jumps.  Its
        reactor's time and timers do not (they run on the monotonic clock,
        as C{twistd kafkatw}'s do), nor do bytes on the wire or the other nodes.
        """
        self.clock_offset += seconds

    def _run(self, f: Callable[..., Any], args: tuple, kw: dict) -> None:
        if self.alive:
            f(*args, **kw)

    def pause(self) -> None:
        """
        SIGSTOP: nothing of this process runs until L{resume}: its timers and
        the bytes arriving for it come due and wait (their C{DelayedCall}s
        still pending: C{active()}, cancellable).
        """
        self.paused = True

    def resume(self) -> None:
        """SIGCONT: what came due meanwhile runs now, in the order it came due."""
        self.paused = False
        parked, self.parked = self.parked, []
        self.simulated.resume(self, parked)

    def getDelayedCalls(self) -> list:  # noqa: N802
        return [c for c in self.simulated.getDelayedCalls() + self.parked if c.active() and c.func == self._run]

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kw: Any) -> None:  # noqa: N802
        self.callLater(0, f, *args, **kw)

    def callWhenRunning(self, f: Callable[..., Any], *args: Any, **kw: Any) -> None:  # noqa: N802
        self.callLater(0, f, *args, **kw)

    def getThreadPool(self) -> _SynchronousThreadPool:  # noqa: N802
        return self._pool

    def callInThread(self, f: Callable[..., Any], *args: Any, **kw: Any) -> None:  # noqa: N802
        self.callLater(0, f, *args, **kw)

    def addSystemEventTrigger(self, *args: Any, **kw: Any) -> Any:  # noqa: N802
        return None  # a simulated process has no reactor shutdown

    def removeSystemEventTrigger(self, trigger: Any) -> None:  # noqa: N802
        pass

    # TCP

    def listenTCP(self, port: int, factory: Any, backlog: int = 50,  # noqa: N802
                  interface: str = "") -> "_ListeningPort":
        return self.network.listen(self, interface or self.node, port, factory)

    def connectTCP(self, host: str, port: int, factory: Any, timeout: float = 30,  # noqa: N802
                   bindAddress: Any = None) -> "_Connector":  # noqa: N803
        return self.network.connect(self, host, port, factory, timeout)

    def kill(self) -> None:
        """The process dies: nothing scheduled runs, its sockets are closed by the kernel (peers see a reset)."""
        self.alive = False
        self.network.node_died(self)


@implementer(IListeningPort)
class _ListeningPort:
    """
    A listening socket.  L{stopReading} leaves it listening but accepting
    nothing: the connections that arrive meanwhile wait in its backlog (the
    kernel's accept queue) and are made, in order, at L{startReading}, as a
    broker's listeners are until it has started (C{port.stopReading()} in
    kafkatw/broker/server.py); closed before that, they are refused.
    """

    def __init__(self, network: "SimulatedNetwork", reactor: NodeReactor, host: str, port: int, factory: Any) -> None:
        self.network, self.reactor, self.host, self.port, self.factory = network, reactor, host, port, factory
        self.reading = True
        #: the SYNs that arrived while not reading: L{SimulatedNetwork._syn}'s arguments
        self.backlog: list[tuple] = []

    def getHost(self) -> IPv4Address:  # noqa: N802
        return IPv4Address("TCP", self.host, self.port)

    def startListening(self) -> None:  # noqa: N802
        pass

    def stopReading(self) -> None:  # noqa: N802
        self.reading = False

    def startReading(self) -> None:  # noqa: N802
        self.reading = True
        self.replay_backlog()

    def replay_backlog(self) -> None:
        """
        The SYNs of the backlog arrive again: made now that the port reads,
        or refused as any SYN is once the socket is closed (no longer among
        the network's listeners).
        """
        backlog, self.backlog = self.backlog, []
        for syn in backlog:
            self.network._syn(*syn)

    def stopListening(self) -> defer.Deferred:  # noqa: N802
        if self.network.listeners.get((self.host, self.port)) is self:
            del self.network.listeners[(self.host, self.port)]
        self.replay_backlog()
        return defer.succeed(None)


@implementer(IConnector)
class _Connector:
    def __init__(self, factory: Any, host: str, port: int) -> None:
        self.factory = factory
        self.address = IPv4Address("TCP", host, port)
        self.state = "connecting"
        self.timeout_call: Any = None
        self.transport: SimulatedTransport | None = None

    def stopConnecting(self) -> None:  # noqa: N802
        if self.state == "connecting":
            self._fail(error.UserError(string="stopConnecting"))

    def _fail(self, reason: Exception) -> None:
        if self.state != "connecting":
            return
        self.state = "failed"
        if self.timeout_call is not None and self.timeout_call.active():
            self.timeout_call.cancel()
        self.factory.clientConnectionFailed(self, Failure(reason))
        self.factory.doStop()

    def disconnect(self) -> None:
        if self.state == "connecting":
            self.stopConnecting()
        elif self.transport is not None:
            self.transport.loseConnection()

    def connect(self) -> None:
        raise NotImplementedError("a simulated connector is not reused")

    def getDestination(self) -> IPv4Address:  # noqa: N802
        return self.address


_CONNECT, _DATA, _FIN, _RESET = "connect", "data", "fin", "reset"


@implementer(ITransport, IPushProducer)
class SimulatedTransport:
    """
    One end of a simulated TCP connection.  Writes go through the
    L{SimulatedNetwork} (latency, cuts) to the L{peer}.  A pull producer
    (C{registerProducer(p, False)}) is asked for more on the next turn until
    it unregisters; C{pauseProducing} holds incoming bytes until
    C{resumeProducing}.
    """

    disconnecting = False

    def __init__(self, network: "SimulatedNetwork", reactor: NodeReactor, host: IPv4Address,
                 peer_address: IPv4Address) -> None:
        self.network = network
        self.reactor = reactor
        self.node = reactor.node
        self.host = host
        self.peer_address = peer_address
        self.peer: SimulatedTransport | None = None
        self.protocol: Any = None
        self.connected = False
        self.closed = False
        #: time (s) at which the last message sent this way is delivered: order per direction
        self.last_delivery = 0.0
        self.producer: Any = None
        self.streaming = False
        self._paused = False
        self._inbox: deque[bytes] = deque()
        self.connector: _Connector | None = None
        #: this direction's draws of jitter and loss on an impaired link (made at its first impaired message)
        self.rng: random.Random | None = None
        #: TCP gave up retransmitting a message this way: nothing more is sent, the connection resets
        self.gave_up = False
        #: the bytes of the last message sent this way, while it is still on the wire, and the time it
        #: was sent: what is written again at that instant joins it (L{SimulatedNetwork._schedule})
        self.in_flight: list[bytes] | None = None
        self.in_flight_sent = -1.0

    # ITransport

    def write(self, data: bytes) -> None:
        if self.closed or not data or self.disconnecting and self.producer is None:
            return
        self.network.send(self, _DATA, bytes(data))

    def writeSequence(self, data: list[bytes]) -> None:  # noqa: N802
        self.write(b"".join(data))

    def loseConnection(self) -> None:  # noqa: N802
        """
        Close this end as Twisted's TCP transport does once its buffer is
        written (this one has none: writes go at once): the FIN goes to the
        peer and this end is lost now, without waiting for the peer's FIN (a
        socket closed locally is gone for its process, whatever becomes of
        the FIN on the network); with a pull producer registered, once it
        unregisters.
        """
        if self.closed or self.disconnecting:
            return
        self.disconnecting = True
        if self.producer is None or self.streaming:
            self._close()

    def _close(self) -> None:
        self.network.send(self, _FIN, b"")
        self._lost(error.ConnectionDone())

    def abortConnection(self) -> None:  # noqa: N802
        if self.closed:
            return
        self.network.send(self, _RESET, b"")
        self._lost(error.ConnectionAborted())

    def getPeer(self) -> IPv4Address:  # noqa: N802
        return self.peer_address

    def getHost(self) -> IPv4Address:  # noqa: N802
        return self.host

    def setTcpNoDelay(self, enabled: bool) -> None:  # noqa: N802
        pass

    def setTcpKeepAlive(self, enabled: bool) -> None:  # noqa: N802
        pass

    def getTcpNoDelay(self) -> bool:  # noqa: N802
        return True

    def getTcpKeepAlive(self) -> bool:  # noqa: N802
        return False

    # IConsumer

    def registerProducer(self, producer: Any, streaming: bool) -> None:  # noqa: N802
        self.producer = producer
        self.streaming = streaming
        if not streaming:
            self.reactor.callLater(0, self._pull, producer)

    def unregisterProducer(self) -> None:  # noqa: N802
        self.producer = None
        if self.disconnecting and not self.closed:
            self._close()

    def _pull(self, producer: Any) -> None:
        for _ in range(100_000):
            if self.producer is not producer or self.closed:
                return
            producer.resumeProducing()
        raise StuckError("a pull producer never unregistered")

    # IPushProducer (reading)

    def pauseProducing(self) -> None:  # noqa: N802
        self._paused = True

    def resumeProducing(self) -> None:  # noqa: N802
        self._paused = False
        while self._inbox and not self._paused and not self.closed:
            self.protocol.dataReceived(self._inbox.popleft())

    def stopProducing(self) -> None:  # noqa: N802
        self.abortConnection()

    # delivery

    def _receive_data(self, chunks: list[bytes]) -> None:
        """The bytes of one message (the writes of one instant, L{SimulatedNetwork._schedule}) arrive."""
        if self.closed or not self.reactor.alive:
            return
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if self._paused:
            self._inbox.append(data)
        else:
            self.protocol.dataReceived(data)

    def _receive(self, kind: str, data: bytes) -> None:
        if self.closed or not self.reactor.alive:
            return
        if kind == _DATA:
            if self._paused:
                self._inbox.append(data)
            else:
                self.protocol.dataReceived(data)
        elif kind == _FIN:
            if not self.disconnecting:
                self.network.send(self, _FIN, b"")  # closed by the peer: close this end too
            self._lost(error.ConnectionDone())
        elif kind == _RESET:
            self._lost(error.ConnectionLost())

    def _lost(self, reason: Exception) -> None:
        if self.closed:
            return
        self.closed = True
        self.connected = False
        self.network.forget(self)
        if self.producer is not None:
            producer, self.producer = self.producer, None
            producer.stopProducing()
        if self.protocol is not None and self.reactor.alive:
            self.protocol.connectionLost(Failure(reason))
        if self.connector is not None and self.reactor.alive:
            self.connector.factory.clientConnectionLost(self.connector, Failure(reason))
            self.connector.factory.doStop()


@dataclass
class _Cut:
    mode: str  # "hold" or "drop"
    held: list[tuple[SimulatedTransport, str, bytes]] = field(default_factory=list)


@dataclass(frozen=True)
class Impairment:
    """
    A slow or lossy direction of a link (L{SimulatedNetwork.impair}).

    @ivar delay_s: seconds added to the link's latency for every message.
    @ivar jitter_s: a further delay drawn for each message from [0, C{jitter_s}).
    @ivar loss: the chance (0 to 1) that a transmission of a message is lost.
    """

    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0


class SimulatedNetwork:
    """
    The links between the nodes.

    @param latency: C{latency(source, destination) -> seconds} for one
        direction of a link (called once per link, then kept).
    @param seed: the seed of the draws on impaired links (jitter, loss):
        each direction of each connection draws from its own stream, so the
        draws do not depend on the order in which connections send at one instant.
    """

    #: TCP's first retransmission timeout (Linux's minimum RTO), doubled at each loss of one message
    RTO_S = 0.2
    #: a message lost this many times in a row: the sender gives up and the connection resets
    #: (far fewer than Linux's tcp_retries2 of 15, as with a TCP_USER_TIMEOUT of about 6 s)
    MAX_RETRANSMISSIONS = 5

    def __init__(self, simulated: SimulatedReactor, latency: Callable[[str, str], float], seed: int = 0) -> None:
        self.simulated = simulated
        self._latency_of = latency
        self._latencies: dict[tuple[str, str], float] = {}
        self.seed = seed
        #: (source, destination) -> its impairment (L{impair})
        self.impairments: dict[tuple[str, str], Impairment] = {}
        self.listeners: dict[tuple[str, int], _ListeningPort] = {}
        #: (source, destination) -> its cut
        self.cuts: dict[tuple[str, str], _Cut] = {}
        self.transports: set[SimulatedTransport] = set()
        #: messages (bytes, SYN-ACKs, FINs, resets) carried so far
        self.messages = 0
        self._client_ports = itertools.count(40001)

    def latency(self, source: str, destination: str) -> float:
        key = (source, destination)
        if key not in self._latencies:
            self._latencies[key] = self._latency_of(source, destination)
        return self._latencies[key]

    # listening and connecting

    def listen(self, reactor: NodeReactor, host: str, port: int, factory: Any) -> _ListeningPort:
        if (host, port) in self.listeners:
            raise error.CannotListenError(host, port, OSError(98, "Address already in use"))
        listening = self.listeners[(host, port)] = _ListeningPort(self, reactor, host, port, factory)
        return listening

    def connect(self, reactor: NodeReactor, host: str, port: int, factory: Any, timeout: float) -> _Connector:
        connector = _Connector(factory, host, port)
        factory.doStart()
        factory.startedConnecting(connector)
        connector.timeout_call = reactor.callLater(timeout, connector._fail, error.TimeoutError())
        self._attempt(reactor, connector, host, port, 1.0)
        return connector

    def _attempt(self, reactor: NodeReactor, connector: _Connector, host: str, port: int, retry_s: float) -> None:
        """
        Send a SYN to C{(host, port)}.  Across a cut (either way: the SYN or
        the SYN-ACK is lost) it is sent again after C{retry_s}, doubling, as
        TCP does, until the attempt times out (C{connectTCP}'s C{timeout}).
        """
        if connector.state != "connecting" or not reactor.alive:
            return
        listening = self.listeners.get((host, port))
        destination = listening.reactor.node if listening is not None else host
        if self._cut(reactor.node, destination) or self._cut(destination, reactor.node) \
                or self._syn_lost(reactor.node, destination, port, retry_s):
            self._kernel_timer(reactor, retry_s, self._attempt, reactor, connector, host, port, retry_s * 2)
            return
        # the SYN is accepted by the listening process (once it runs, if it is paused)
        self.simulated.schedule(listening.reactor if listening is not None else None,
                                      self.latency(reactor.node, destination), self._syn, reactor, connector, host,
                                      port, retry_s)

    def _kernel_timer(self, reactor: NodeReactor, delay: float, f: Callable[..., Any], *args: Any) -> None:
        """
        C{f(*args)} after C{delay} on the simulated clock, for C{reactor}'s
        process (held while it is paused, never once it is dead): the
        kernel's TCP timers (SYN retransmission, a reset's round trip).
        """

        def run() -> None:
            if reactor.alive:
                f(*args)

        self.simulated.schedule(reactor, delay, run)

    def _syn(self, client: NodeReactor, connector: _Connector, host: str, port: int, retry_s: float) -> None:
        """The SYN arrives: refused (a reset back) when nothing listens, else the server's end is made."""
        if connector.state != "connecting" or not client.alive:
            return
        listening = self.listeners.get((host, port))
        if listening is None:
            self._kernel_timer(client, self.latency(host, client.node), connector._fail,
                               error.ConnectionRefusedError())
            return
        if not listening.reading:  # into the accept queue until the process accepts (startReading)
            listening.backlog.append((client, connector, host, port, retry_s))
            return
        server = listening.reactor
        if self._cut(client.node, server.node):  # cut while the SYN was on its way
            self._kernel_timer(client, retry_s, self._attempt, client, connector, host, port, retry_s * 2)
            return
        client_address = IPv4Address("TCP", client.node, next(self._client_ports))
        server_address = listening.getHost()
        server_end = SimulatedTransport(self, server, server_address, client_address)
        client_end = SimulatedTransport(self, client, client_address, server_address)
        server_end.peer, client_end.peer = client_end, server_end
        client_end.connector = connector
        connector.transport = client_end
        protocol = listening.factory.buildProtocol(client_address)
        if protocol is None:
            self._kernel_timer(client, self.latency(server.node, client.node), connector._fail,
                               error.ConnectionRefusedError())
            return
        self.transports.add(server_end)
        self.transports.add(client_end)
        server_end.protocol = protocol
        server_end.connected = True
        protocol.makeConnection(server_end)
        self.send(server_end, _CONNECT, b"")  # the SYN-ACK, first in this direction

    def _established(self, client_end: SimulatedTransport) -> None:
        connector = client_end.connector
        assert connector is not None
        if connector.state != "connecting":
            client_end.abortConnection()
            return
        connector.state = "connected"
        if connector.timeout_call is not None and connector.timeout_call.active():
            connector.timeout_call.cancel()
        protocol = connector.factory.buildProtocol(client_end.peer_address)
        if protocol is None:
            client_end.connector = None
            client_end.abortConnection()
            return
        client_end.protocol = protocol
        client_end.connected = True
        protocol.makeConnection(client_end)

    # carrying bytes

    def _cut(self, source: str, destination: str) -> _Cut | None:
        return self.cuts.get((source, destination))

    def _syn_lost(self, source: str, destination: str, port: int, retry_s: float) -> bool:
        """
        The SYN or its SYN-ACK is lost on an impaired link (drawn from the
        attempt itself: its link, port, time and retry, not from a stream
        that the order of other attempts would move).
        """
        if not self.impairments:
            return False
        rng = None
        for pair in ((source, destination), (destination, source)):
            impairment = self.impairments.get(pair)
            if impairment is not None and impairment.loss:
                rng = rng or random.Random(f"syn-{self.seed}-{source}-{destination}:{port}"
                                           f"-{self.simulated.seconds():.6f}-{retry_s}")
                if rng.random() < impairment.loss:
                    return True
        return False

    def send(self, sender: SimulatedTransport, kind: str, data: bytes) -> None:
        """Carry one message from C{sender} to its peer: in order, after the link's latency, unless cut."""
        peer = sender.peer
        if peer is None:
            return
        cut = self._cut(sender.node, peer.node)
        if cut is not None and kind != _RESET:
            if cut.mode == "hold":
                cut.held.append((sender, kind, data))
            return
        self._schedule(sender, kind, data)

    def _schedule(self, sender: SimulatedTransport, kind: str, data: bytes) -> None:
        """
        Put one message on the wire to C{sender}'s peer.  Bytes written at the
        instant the last message this way was sent, while it is still on the
        wire, join it (one TCP segment, as writes before the socket is next
        flushed are): the reader gets them in one C{dataReceived}, and the
        simulation runs one delivery, not one per write (a fetch response's
        header and each slice of its records are writes of their own).
        """
        peer = sender.peer
        assert peer is not None
        now = self.simulated._now
        if kind == _DATA:
            in_flight = sender.in_flight
            if in_flight is not None and sender.in_flight_sent == now and sender.last_delivery > now:
                in_flight.append(data)
                return
        delay = self.latency(sender.node, peer.node)
        if self.impairments and kind != _RESET:
            impairment = self.impairments.get((sender.node, peer.node))
            if impairment is not None:
                if sender.gave_up:
                    sender.in_flight = None
                    return
                extra = self._impaired_delay(sender, impairment)
                if extra is None:
                    sender.in_flight = None
                    return
                delay += extra
        at = max(now + delay, sender.last_delivery)
        sender.last_delivery = at
        self.messages += 1
        # delivered to the receiving process: in its socket's buffer while it is paused
        if kind == _DATA:
            chunks = [data]
            sender.in_flight, sender.in_flight_sent = chunks, now
            self.simulated.schedule(peer.reactor, at - now, peer._receive_data, chunks)
            return
        sender.in_flight = None  # a FIN or reset after it: later bytes do not overtake it
        if kind == _CONNECT:
            self.simulated.schedule(peer.reactor, at - now, self._deliver_connect, peer)
        else:
            self.simulated.schedule(peer.reactor, at - now, peer._receive, kind, data)

    def _impaired_delay(self, sender: SimulatedTransport, impairment: Impairment) -> float | None:
        """
        The delay an impaired link adds to one message from C{sender}: its
        fixed delay, a jitter, and a retransmission timeout for each time it
        is lost (0.2, 0.4, 0.8 ... s: TCP's backoff).  The message still
        arrives in order (the caller keeps it behind the one before: later
        ones wait for a lost one, head-of-line, as TCP's receiver does).  C{None}
        when it is lost L{MAX_RETRANSMISSIONS} times in a row: the sender gives
        up after those timeouts and both ends see the connection reset.
        """
        rng = sender.rng
        if rng is None:
            peer = sender.peer
            assert peer is not None
            rng = sender.rng = random.Random(f"link-{self.seed}-{sender.host.host}:{sender.host.port}"
                                             f"-{peer.host.host}:{peer.host.port}")
        extra = impairment.delay_s
        if impairment.jitter_s:
            extra += rng.random() * impairment.jitter_s
        if impairment.loss:
            rto = self.RTO_S
            lost = 0
            while rng.random() < impairment.loss:
                lost += 1
                extra += rto
                rto *= 2
                if lost >= self.MAX_RETRANSMISSIONS:
                    sender.gave_up = True
                    # the kernel's timer: it runs whatever the process does meanwhile (closes the
                    # socket, dies), as the retransmissions of a closed socket go on (seed 146376)
                    self.simulated.schedule(None, extra, self._give_up, sender)
                    return None
        return extra

    def _give_up(self, sender: SimulatedTransport) -> None:
        """
        The sender's TCP gave up retransmitting: its end is reset (if its
        process still has it open), and a reset goes to the peer -- also when
        the process closed the socket or died meanwhile: the FIN or reset it
        sent then was dropped behind the lost message, and the kernel's
        retransmissions went on without it.
        """
        peer = sender.peer
        if not sender.closed and sender.reactor.alive:
            sender._lost(error.ConnectionLost())
        if peer is not None and not peer.closed:
            self._schedule(sender, _RESET, b"")

    def _deliver_connect(self, client_end: SimulatedTransport) -> None:
        if not client_end.closed and client_end.reactor.alive:
            self._established(client_end)

    def forget(self, transport: SimulatedTransport) -> None:
        self.transports.discard(transport)

    # faults

    def cut(self, source: str, destination: str, mode: str = "drop", both_ways: bool = True) -> None:
        """
        Cut the link from C{source} to C{destination} (and back, with
        C{both_ways}).  C{mode="hold"}: what is sent waits until L{heal};
        C{"drop"}: the connections across it are reset (both ends), new ones time out.
        """
        pairs = [(source, destination)] + ([(destination, source)] if both_ways else [])
        for pair in pairs:
            if pair not in self.cuts:
                self.cuts[pair] = _Cut(mode)
        if mode == "drop":
            for transport in sorted(self.transports, key=_transport_order):
                peer = transport.peer
                if peer is not None and (transport.node, peer.node) in pairs and not transport.closed:
                    transport._lost(error.ConnectionLost())
                    peer._lost(error.ConnectionLost())

    def heal(self, source: str, destination: str) -> None:
        """Heal the link from C{source} to C{destination}: held messages go, in order."""
        cut = self.cuts.pop((source, destination), None)
        if cut is None:
            return
        for sender, kind, data in cut.held:
            if not sender.closed or kind == _FIN:
                self._schedule(sender, kind, data)

    def heal_all(self) -> None:
        for source, destination in sorted(self.cuts):
            self.heal(source, destination)
        self.impairments.clear()

    def impair(self, source: str, destination: str, impairment: Impairment, both_ways: bool = True) -> None:
        """
        Make the link from C{source} to C{destination} (and back, with
        C{both_ways}) slow or lossy (L{Impairment}) until L{restore}: its
        messages are delayed, by a jitter too, and lost transmissions stall
        the connection (TCP's retransmission) or, lost too often, reset it.
        Bytes of one connection and direction still arrive in order; those
        of different connections may overtake each other.
        """
        self.impairments[(source, destination)] = impairment
        if both_ways:
            self.impairments[(destination, source)] = impairment

    def restore(self, source: str, destination: str) -> None:
        """The link from C{source} to C{destination} is as it was before L{impair}."""
        self.impairments.pop((source, destination), None)

    def node_died(self, reactor: NodeReactor) -> None:
        """A node's process is gone: its listeners close, its connections are reset (its peers see it)."""
        for key, listening in sorted(self.listeners.items()):
            if listening.reactor is reactor:
                del self.listeners[key]
                listening.replay_backlog()
        for transport in sorted(self.transports, key=_transport_order):
            if transport.reactor is reactor and not transport.closed:
                transport.closed = True
                self.transports.discard(transport)
                if transport.peer is not None and not transport.peer.closed:
                    self._schedule(transport, _RESET, b"")


def _transport_order(transport: SimulatedTransport) -> tuple:
    """A deterministic order of transports (sets of objects iterate in memory order)."""
    return (transport.host.host, transport.host.port, transport.peer_address.host, transport.peer_address.port)
