"""The embedded ZooKeeper's readiness probe (a four-letter word), with a fake clock and transport."""

from __future__ import annotations

from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial import unittest

from kafkatw.zookeeper.embedded import _FourLetterWord


class FourLetterWordProbeTests(unittest.SynchronousTestCase):
    def connect(self) -> tuple[Clock, StringTransport, _FourLetterWord]:
        clock, transport = Clock(), StringTransport()
        probe = _FourLetterWord(clock, b"srvr", timeout_s=1.0)
        probe.makeConnection(transport)
        return clock, transport, probe

    def test_answer_collected_until_the_server_closes(self) -> None:
        clock, transport, probe = self.connect()
        self.assertEqual(transport.value(), b"srvr")
        probe.dataReceived(b"Zookeeper version: 3.8.0\n")
        probe.dataReceived(b"Mode: standalone\n")
        probe.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.successResultOf(probe.done), b"Zookeeper version: 3.8.0\nMode: standalone\n")
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_a_silent_peer_is_aborted_after_the_timeout(self) -> None:
        # e.g. a TCP self-connection while nothing listens yet: the word comes back, nothing closes
        clock, transport, probe = self.connect()
        probe.dataReceived(b"srvr")
        clock.advance(0.99)
        self.assertFalse(transport.disconnecting)
        self.assertNoResult(probe.done)
        clock.advance(0.01)
        self.assertTrue(transport.disconnected)
        probe.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.successResultOf(probe.done), b"srvr")
