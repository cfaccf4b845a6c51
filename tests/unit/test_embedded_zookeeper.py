"""The embedded ZooKeeper's readiness probe (C{ruok}), with a fake clock and transport."""

from __future__ import annotations

from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial import unittest

from kafkatw.zookeeper.embedded import _RuokProtocol


class RuokProbeTests(unittest.SynchronousTestCase):
    def connect(self) -> tuple[Clock, StringTransport, _RuokProtocol]:
        clock, transport = Clock(), StringTransport()
        probe = _RuokProtocol(clock, timeout_s=1.0)
        probe.makeConnection(transport)
        return clock, transport, probe

    def test_answer_collected_until_the_server_closes(self) -> None:
        clock, transport, probe = self.connect()
        self.assertEqual(transport.value(), b"ruok")
        probe.dataReceived(b"im")
        probe.dataReceived(b"ok")
        probe.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.successResultOf(probe.done), b"imok")
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_a_silent_peer_is_aborted_after_the_timeout(self) -> None:
        # e.g. a TCP self-connection while nothing listens yet: "ruok" comes back, nothing closes
        clock, transport, probe = self.connect()
        probe.dataReceived(b"ruok")
        clock.advance(0.99)
        self.assertFalse(transport.disconnecting)
        self.assertNoResult(probe.done)
        clock.advance(0.01)
        self.assertTrue(transport.disconnected)
        probe.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.successResultOf(probe.done), b"ruok")
