"""
Unit tests of the client's broker connection and metadata cache:
StringTransport and MemoryReactorClock, no sockets, no sleeps.
"""

from __future__ import annotations

import random
import struct

from twisted.internet import defer
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial import unittest

from kafkatw.client.client import KafkaClient
from kafkatw.client.connection import (
    BrokerConnection,
    BrokerConnectionError,
    RequestTimedOutError,
    UnsupportedApiError,
    parse_bootstrap_servers,
)
from kafkatw.protocol.messages import encode_request, encode_response, parse_request_header


def _frames(data: bytes) -> list[bytes]:
    out = []
    while data:
        (size,) = struct.unpack_from(">i", data)
        out.append(data[4 : 4 + size])
        data = data[4 + size :]
    return out


def _answer(connection: BrokerConnection, transport: StringTransport, body_for: dict) -> None:
    """Answer every request written so far (in reverse order, to exercise correlation ids)."""
    frames = _frames(transport.value())
    transport.clear()
    for frame in reversed(frames):
        header = parse_request_header(frame)
        body = body_for[header.api_key]
        response = encode_response(header.api_key, header.api_version, header.correlation_id, body)
        payload = struct.pack(">i", len(response)) + response
        connection.dataReceived(payload[:3])  # split frames arrive whole in the end
        connection.dataReceived(payload[3:])


METADATA = {"brokers": [{"node_id": 1, "host": "h1", "port": 9092}, {"node_id": 2, "host": "h2", "port": 9093}],
            "cluster_id": "c", "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]},
                {"error_code": 5, "partition_index": 1, "leader_id": -1, "replica_nodes": [2], "isr_nodes": []}]}]}
API_VERSIONS = {"error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12},
                                              {"api_key": 0, "min_version": 0, "max_version": 7},
                                              {"api_key": 18, "min_version": 0, "max_version": 3},
                                              {"api_key": 999, "min_version": 0, "max_version": 1}]}


class BrokerConnectionTests(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.connection = BrokerConnection(self.clock, "test", request_timeout_ms=1000, node_id=1)
        self.transport = StringTransport()
        self.connection.makeConnection(self.transport)

    def test_negotiates_highest_common_versions(self) -> None:
        d = defer.ensureDeferred(self.connection.negotiate())
        _answer(self.connection, self.transport, {18: API_VERSIONS})
        versions = self.successResultOf(d)
        self.assertEqual(versions, {3: 12, 0: 7, 18: 3})

    def test_falls_back_to_api_versions_v0(self) -> None:
        d = defer.ensureDeferred(self.connection.negotiate())
        _answer(self.connection, self.transport, {18: {"error_code": 35, "api_keys": []}})
        self.assertNoResult(d)
        [frame] = _frames(self.transport.value())
        self.assertEqual(parse_request_header(frame).api_version, 0)
        _answer(self.connection, self.transport, {18: API_VERSIONS})
        self.assertEqual(self.successResultOf(d)[3], 12)

    def test_pipelined_responses_matched_by_correlation_id(self) -> None:
        self.connection.versions = {3: 12, 18: 3}
        first = self.connection.request(3, {"topics": None})
        second = self.connection.request(18, {"client_software_name": "x", "client_software_version": "1"})
        self.assertEqual(len(_frames(self.transport.value())), 2)  # both written before any answer
        _answer(self.connection, self.transport, {3: METADATA, 18: API_VERSIONS})
        self.assertEqual(self.successResultOf(first).cluster_id, "c")
        self.assertEqual(len(self.successResultOf(second).api_keys), 4)

    def test_timeout(self) -> None:
        self.connection.versions = {3: 12}
        d = self.connection.request(3, {"topics": None})
        self.clock.advance(0.999)
        self.assertNoResult(d)
        self.clock.advance(0.002)
        self.failureResultOf(d, RequestTimedOutError)
        self.assertTrue(RequestTimedOutError().retriable)

    def test_one_timeout_timer_for_many_requests(self) -> None:
        """
        Requests answered in time leave one timer, not one each; a request
        made later times out at its own deadline, and one with a shorter
        timeout_ms before an earlier, longer one.
        """
        self.connection.versions = {3: 12}
        for _ in range(20):
            d = self.connection.request(3, {"topics": None})
            _answer(self.connection, self.transport, {3: METADATA})
            self.successResultOf(d)
            self.clock.advance(0.01)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        slow = self.connection.request(3, {"topics": None})  # at 0.2 s: due at 1.2 s
        self.clock.advance(0.5)
        fast = self.connection.request(3, {"topics": None}, timeout_ms=100)  # due at 0.8 s
        self.clock.advance(0.099)
        self.assertNoResult(fast)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.clock.advance(0.002)
        self.failureResultOf(fast, RequestTimedOutError)
        self.assertNoResult(slow)  # until the connection closed by the timeout is lost
        self.connection.connectionLost(None)
        self.failureResultOf(slow, BrokerConnectionError)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_timed_out_request_closes_the_connection(self) -> None:
        """
        As Kafka's clients do: the broker may be gone with no reset reaching
        us (a half-open connection, simulation seed 146376), so a request
        timeout closes the connection; the requests waiting on it fail as
        it is lost (retriable), and no new one is sent on it.
        """
        self.connection.versions = {3: 12}
        slow = self.connection.request(3, {"topics": None})  # due at 1 s
        timed_out: list = []
        retried: list = []
        slow.addErrback(lambda f: (timed_out.append(f.type),
                                   self.connection.request(3, {"topics": None}).addErrback(retried.append)))
        self.clock.advance(0.5)
        other = self.connection.request(3, {"topics": None})  # due at 1.5 s
        written = self.transport.value()
        self.clock.advance(0.501)
        self.assertEqual(self.transport.value(), written)  # the errback's request is not sent on it
        self.assertEqual(timed_out, [RequestTimedOutError])
        self.assertEqual([f.type for f in retried], [BrokerConnectionError])
        self.assertTrue(self.transport.disconnecting)
        self.assertFalse(self.connection.connected)
        self.failureResultOf(self.connection.request(3, {"topics": None}), BrokerConnectionError)
        self.assertNoResult(other)
        self.connection.connectionLost(None)  # the transport's report of the abort
        self.assertTrue(self.failureResultOf(other, BrokerConnectionError).value.retriable)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_self_encoding_bodies_framed_as_encode_request(self) -> None:
        """A Produce (v3 and flexible v9) and a Fetch body that encode themselves: the frames encode_request makes."""
        from kafkatw.client.sender import ProduceBody
        from kafkatw.protocol.fetch import FetchRequestBody

        fetch = FetchRequestBody({
            "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 7, "partition_max_bytes": 1024,
                                                      "current_leader_epoch": 2, "last_fetched_epoch": -1,
                                                      "log_start_offset": -1}]}]})
        for api_key, version, body in [(0, 3, ProduceBody(-1, 30000, [("t", [(0, b"batch")])])),
                                       (0, 9, ProduceBody(1, 30000, [("t", [(0, b"batch"), (1, b"b")])], "tx")),
                                       (0, 9, ProduceBody(1, 30000, [("t", [(0, b"again")])])),
                                       (1, 12, fetch)]:
            self.connection.versions = {api_key: version}
            self.transport.clear()
            self.connection.request(api_key, body)
            [frame] = _frames(self.transport.value())
            cid = parse_request_header(frame).correlation_id
            self.assertEqual(frame, encode_request(api_key, version, cid, "test", body))

    def test_connection_lost_fails_pending(self) -> None:
        self.connection.versions = {3: 12}
        d = self.connection.request(3, {"topics": None})
        self.connection.connectionLost(None)
        self.failureResultOf(d, BrokerConnectionError)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.failureResultOf(self.connection.request(3, {"topics": None}), BrokerConnectionError)

    def test_no_common_version(self) -> None:
        self.failureResultOf(self.connection.request(19, {}), UnsupportedApiError)

    def test_no_response_expected(self) -> None:
        self.connection.versions = {0: 9}
        d = self.connection.request(0, {"acks": 0, "timeout": 1000, "topic_data": []}, expect_response=False)
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(self.clock.getDelayedCalls(), [])


class KafkaClientTests(unittest.TestCase):
    def test_parse_bootstrap_servers(self) -> None:
        self.assertEqual(parse_bootstrap_servers("a:1, PLAINTEXT://b:2,[::1]:3"), [("a", 1), ("b", 2), ("::1", 3)])
        self.assertRaises(ValueError, parse_bootstrap_servers, "nohost")
        self.assertRaises(ValueError, parse_bootstrap_servers, "")

    def test_metadata_refresh_is_shared_and_applied(self) -> None:
        clock = MemoryReactorClock()
        client = KafkaClient(clock, "boot:9092", metadata_max_age_ms=1000)
        connection = BrokerConnection(clock, "test", 1000, node_id=-1)
        transport = StringTransport()
        connection.makeConnection(transport)
        connection.versions = {3: 12}
        client._connections[-1] = connection
        first = client.refresh_metadata()
        second = client.refresh_metadata()
        self.assertEqual(len(_frames(transport.value())), 1)  # one request for both callers
        _answer(connection, transport, {3: METADATA})
        self.successResultOf(first)
        self.successResultOf(second)
        self.assertEqual(client.brokers, {1: ("h1", 9092), 2: ("h2", 9093)})
        self.assertEqual((client.leader_for("t", 0), client.leader_for("t", 1), client.leader_for("x", 0)),
                         (1, -1, -1))
        self.assertEqual(client.partitions_for("t"), [0, 1])
        self.assertFalse(client.metadata_stale())
        clock.advance(1.0)
        self.assertTrue(client.metadata_stale())
        client.invalidate()
        self.assertTrue(client.metadata_stale())

    def test_metadata_goes_back_to_the_bootstrap_servers_when_every_known_broker_is_unreachable(self) -> None:
        """
        Kafka's C{metadata.recovery.strategy=rebootstrap} (KIP-899, the
        default since 4.0): the last metadata named broker 1 alone, which has
        gone; the refresh's next try is the bootstrap server, at once, not
        broker 1 again after its backoff (simulation seed 140210: two brokers,
        the producer asked the stopped one for 60 s while the other led).
        """
        clock = MemoryReactorClock()
        client = KafkaClient(clock, "b2:9092", reconnect_backoff_ms=50, random_source=random.Random(1),
                             endpoint_factory=lambda host, port, timeout_s: TCP4ClientEndpoint(clock, host, port))
        client.brokers = {1: ("b1", 9092)}
        refreshed = client.refresh_metadata()
        self.assertEqual([c[0] for c in clock.tcpClients], ["b1"])
        clock.tcpClients[0][2].clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        self.assertEqual([c[0] for c in clock.tcpClients], ["b1", "b2"])  # the bootstrap server, at once
        self.assertNoResult(refreshed)
        self.assertEqual(client.least_loaded_node(), -1)

    def test_request_goes_straight_to_an_open_connection(self) -> None:
        """KafkaClient.request: the open connection's own Deferred, as send's answer; else through send."""
        clock = MemoryReactorClock()
        client = KafkaClient(clock, "boot:9092")
        connection = BrokerConnection(clock, "test", 1000, node_id=-1)
        transport = StringTransport()
        connection.makeConnection(transport)
        connection.versions = {3: 12}
        client._connections[-1] = connection
        d = client.request(-1, 3, {"topics": None})
        self.assertEqual(len(_frames(transport.value())), 1)  # written at once
        _answer(connection, transport, {3: METADATA})
        self.assertEqual(self.successResultOf(d).cluster_id, "c")
        connection.connectionLost(None)
        # no open connection: through send, which connects first (here: a connection attempt)
        d = client.request(-1, 3, {"topics": None})
        self.assertNoResult(d)
        self.assertEqual(len(clock.tcpClients), 1)

    def test_close_aborts_a_connection_whose_bytes_are_not_sent(self) -> None:
        """
        KafkaClient.close: a connection that closes (its bytes sent) is done at
        once; one whose broker stopped taking bytes is aborted after
        C{timeout_ms} instead of waiting for TCP to give up.
        """
        clock = MemoryReactorClock()
        client = KafkaClient(clock, "boot:9092", request_timeout_ms=5000)
        closing, stuck = StringTransport(), StringTransport()
        connections = []
        for node_id, transport in ((1, closing), (2, stuck)):
            connection = BrokerConnection(clock, "test", 5000, node_id=node_id)
            connection.makeConnection(transport)
            client._connections[node_id] = connection
            connections.append(connection)
        pending = connections[1].request(3, {"topics": None}, version=12)
        d = client.close(timeout_ms=2000)
        self.assertTrue(closing.disconnecting and stuck.disconnecting)
        connections[0].connectionLost(None)  # its bytes were sent: TCP closed it
        clock.advance(1.9)
        self.assertNoResult(d)
        self.assertFalse(stuck.disconnected)
        clock.advance(0.1)
        self.assertTrue(stuck.disconnected)  # aborted
        connections[1].connectionLost(None)
        self.successResultOf(d)
        self.failureResultOf(pending, BrokerConnectionError)
        self.assertEqual(clock.getDelayedCalls(), [])  # the connection's timeout timer went with it

    def test_close_without_a_stuck_connection_leaves_no_timer(self) -> None:
        clock = MemoryReactorClock()
        client = KafkaClient(clock, "boot:9092")
        connection = BrokerConnection(clock, "test", 1000, node_id=1)
        transport = StringTransport()
        connection.makeConnection(transport)
        client._connections[1] = connection
        d = client.close()
        connection.connectionLost(None)
        self.successResultOf(d)
        self.assertEqual(clock.getDelayedCalls(), [])
