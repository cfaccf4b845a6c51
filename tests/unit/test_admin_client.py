"""
Unit tests of L{kafkatw.client.admin.AdminClient}, on a L{Clock}, no sockets,
no sleeps.  What it does against a broker (topics created, grown, described,
deleted; the cluster described) runs against L{kafkatw.testing.FakeCluster},
the broker's real request handling in memory.  How it routes requests to the
controller and leaders of a cluster of several brokers and follows their
errors (NOT_CONTROLLER, leadership moves, lost connections) runs against
L{FakeClient}, whose connections record requests for the test to answer.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.client.admin import (
    ELECTION_PREFERRED,
    LATEST_TIMESTAMP,
    AdminClient,
    ListOffsetsResultInfo,
    NewPartitions,
    NewTopic,
)
from kafkatw.client.client import PartitionMetadata
from kafkatw.client.connection import BrokerConnectionError
from kafkatw.errors import ErrorCode, KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from kafkatw.protocol.messages import build, response_schema
from kafkatw.testing import FakeCluster

VERSIONS = {2: 7, 3: 12, 10: 4, 19: 7, 20: 6, 32: 4, 37: 3, 43: 2, 45: 0, 46: 0}


class FakeConnection:
    def __init__(self, client: "FakeClient", node: int) -> None:
        self.client = client
        self.node = node
        self.versions = client.versions

    def request(self, api_key: int, body: Any, version: int | None = None, expect_response: bool = True,
                timeout_ms: int | None = None) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.client.requests.append((self.node, api_key, body, d))
        return d


class FakeClient:
    """The part of L{KafkaClient} the admin client uses."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.bootstrap = [("boot", 9092)]
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller_id = -1
        self.topics: dict[str, dict[int, PartitionMetadata]] = {}
        self.versions = dict(VERSIONS)
        self.requests: list[tuple[int, int, Any, defer.Deferred]] = []
        self.refused: set[int] = set()
        self.invalidations = 0
        self.next_topics: dict | None = None
        self.node = -1

    def connection(self, node: int) -> defer.Deferred:
        if node in self.refused:
            return defer.fail(BrokerConnectionError(f"cannot connect to {node}"))
        return defer.succeed(FakeConnection(self, node))

    def least_loaded_node(self) -> int:
        return self.node

    def note_cluster(self, response: Any) -> None:
        self.note_brokers({int(b.node_id): (b.host, int(b.port)) for b in response.brokers}, None,
                          int(response.controller_id))

    def note_brokers(self, brokers: dict, cluster_id: Any, controller_id: int) -> None:
        self.brokers = dict(brokers)
        self.controller_id = controller_id

    def want(self, topics: Any) -> None:
        pass

    async def ensure_metadata(self, topics: Any = ()) -> None:
        if self.next_topics is not None:
            self.topics, self.next_topics = self.next_topics, None

    def invalidate(self) -> None:
        self.invalidations += 1

    def close(self) -> defer.Deferred:
        return defer.succeed(None)

    def pending(self, api_key: int | None = None) -> list[tuple[int, int, Any, defer.Deferred]]:
        return [r for r in self.requests if not r[3].called and (api_key is None or r[1] == api_key)]


def metadata(controller: int = 1, topics: list | None = None, brokers: tuple = (1, 2, 3)) -> Any:
    return build(response_schema(3, 12), {
        "brokers": [{"node_id": b, "host": f"h{b}", "port": 9000 + b} for b in brokers],
        "cluster_id": "c", "controller_id": controller, "topics": topics or []})


def respond(api_key: int, version: int, body: dict) -> Any:
    return build(response_schema(api_key, version), body)


class AdminTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.client = FakeClient(self.clock)
        self.admin = AdminClient(self.clock, client=self.client, default_api_timeout_ms=5000,
                                 retry_backoff_ms=100)

    def answer(self, api_key: int, response: Any, node: int | None = None) -> tuple[int, Any]:
        """Answer the one pending request of C{api_key}; return its (node, body)."""
        [(sent_to, _, body, d)] = self.client.pending(api_key)
        if node is not None:
            self.assertEqual(sent_to, node)
        d.callback(response)
        return sent_to, body


class DescribeTests(AdminTestCase):
    def test_describe_topics(self) -> None:
        d = self.admin.describe_topics(["t"])
        _, body = self.answer(3, metadata(topics=[{"error_code": 0, "name": "t", "partitions": [
            {"error_code": 0, "partition_index": 1, "leader_id": 2, "leader_epoch": 4, "replica_nodes": [2, 3, 1],
             "isr_nodes": [2, 3], "offline_replicas": [1]},
            {"error_code": 5, "partition_index": 0, "leader_id": -1, "leader_epoch": 3, "replica_nodes": [1],
             "isr_nodes": [1], "offline_replicas": [1]}]}]))
        self.assertFalse(body["allow_auto_topic_creation"])  # describing never creates a topic
        topic = self.successResultOf(d)["t"]
        self.assertEqual([(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas)
                          for p in topic.partitions],
                         [(0, -1, 3, [1], [1], [1]), (1, 2, 4, [2, 3, 1], [2, 3], [1])])
        self.assertEqual(self.client.controller_id, 1)
        self.assertEqual(self.client.brokers[3], ("h3", 9003))

    def test_a_topic_without_leaders_yet_is_asked_again(self) -> None:
        """LEADER_NOT_AVAILABLE for a topic being created (Kafka's answer): asked again after the backoff."""
        d = self.admin.describe_topics(None)
        self.answer(3, metadata(topics=[{"error_code": ErrorCode.leader_not_available, "name": "new",
                                         "partitions": []}]))
        self.assertNoResult(d)
        self.clock.advance(0.1)
        self.answer(3, metadata(topics=[{"error_code": 0, "name": "new", "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
             "isr_nodes": [1], "offline_replicas": []}]}]))
        self.assertEqual([p.leader for p in self.successResultOf(d)["new"].partitions], [1])

    def test_describe_cluster_falls_back_to_metadata(self) -> None:
        """A broker without DescribeCluster (API 60): the controller comes from Metadata."""
        d = self.admin.describe_cluster()
        self.answer(3, metadata(controller=2))
        cluster = self.successResultOf(d)
        self.assertEqual((cluster.cluster_id, cluster.controller_id, sorted(cluster.nodes)), ("c", 2, [1, 2, 3]))

    def test_describe_cluster(self) -> None:
        self.client.versions[60] = 1
        d = self.admin.describe_cluster()
        self.answer(60, respond(60, 1, {"error_code": 0, "cluster_id": "c", "controller_id": 3, "endpoint_type": 1,
                                        "brokers": [{"broker_id": 3, "host": "h3", "port": 9003}]}))
        self.assertEqual(self.successResultOf(d).controller_id, 3)
        # the client learns the brokers too, so that requests to them can follow
        self.assertEqual((self.client.brokers, self.client.controller_id), ({3: ("h3", 9003)}, 3))

    def test_unreachable_bootstrap_fails_fast(self) -> None:
        """A cluster never reached fails after the bootstrap servers were tried twice, not after the timeout."""
        self.client.refused.add(-1)
        d = self.admin.list_topics()
        self.clock.advance(0.1)
        self.failureResultOf(d, BrokerConnectionError)
        self.assertLess(self.clock.seconds(), 1)

    def test_lost_connection_retries(self) -> None:
        self.client.brokers = {1: ("h1", 9001)}
        self.client.node = 1
        d = self.admin.list_topics()
        [(_, _, _, first)] = self.client.pending(3)
        first.errback(BrokerConnectionError("lost"))
        self.assertEqual(self.client.pending(3), [])
        self.clock.advance(0.1)
        self.answer(3, metadata(topics=[{"error_code": 0, "name": "t", "partitions": []}]))
        self.assertEqual(self.successResultOf(d), ["t"])

    def test_gives_up_after_the_timeout(self) -> None:
        self.client.brokers = {1: ("h1", 9001)}
        self.client.node = 1
        d = self.admin.list_topics()
        while not d.called:
            for (_, _, _, pending) in self.client.pending(3):
                pending.errback(BrokerConnectionError("lost"))
            self.clock.advance(0.05)
        failure = self.failureResultOf(d, KafkaError)
        self.assertIn("no success within 5000 ms", str(failure.value))
        self.assertLessEqual(self.clock.seconds(), 6)


class ControllerTests(AdminTestCase):
    def test_create_topics_goes_to_the_controller_and_reports_per_topic(self) -> None:
        d = self.admin.create_topics([NewTopic("a", 3, 3, configs={"min.insync.replicas": "2"}), NewTopic("b")])
        self.answer(3, metadata(controller=2))
        node, body = self.answer(19, respond(19, 7, {"topics": [
            {"name": "a", "error_code": 0, "num_partitions": 3, "replication_factor": 3},
            {"name": "b", "error_code": ErrorCode.topic_already_exists, "error_message": "exists"}]}))
        self.assertEqual(node, 2)
        self.assertEqual([(t["name"], t["num_partitions"], t["replication_factor"]) for t in body["topics"]],
                         [("a", 3, 3), ("b", -1, -1)])
        self.assertEqual(body["topics"][0]["configs"], [{"name": "min.insync.replicas", "value": "2"}])
        result = self.successResultOf(d)
        self.assertIsNone(result["a"])
        self.assertIsInstance(result["b"], TopicAlreadyExistsError)

    def test_not_controller_asks_again_and_resends_only_those(self) -> None:
        """
        A topic answered with NOT_CONTROLLER is sent again, after a backoff,
        to the controller that fresh metadata names; the others are done.
        """
        d = self.admin.create_partitions({"a": 4, "b": NewPartitions(2)})
        self.answer(3, metadata(controller=1))
        self.answer(37, respond(37, 3, {"results": [
            {"name": "a", "error_code": 0}, {"name": "b", "error_code": ErrorCode.not_controller}]}), node=1)
        self.assertEqual(self.client.pending(), [])
        self.clock.advance(0.1)
        self.answer(3, metadata(controller=3))
        _, body = self.answer(37, respond(37, 3, {"results": [{"name": "b", "error_code": 0}]}), node=3)
        self.assertEqual([(t["name"], t["count"]) for t in body["topics"]], [("b", 2)])
        self.assertEqual(self.successResultOf(d), {"a": None, "b": None})

    def test_elect_leaders_top_level_not_controller(self) -> None:
        d = self.admin.elect_leaders(ELECTION_PREFERRED, [("t", 0), ("t", 1)])
        self.answer(3, metadata(controller=1))
        self.answer(43, respond(43, 2, {"error_code": ErrorCode.not_controller, "replica_election_results": []}),
                    node=1)
        self.clock.advance(0.1)
        self.answer(3, metadata(controller=2))
        _, body = self.answer(43, respond(43, 2, {"error_code": 0, "replica_election_results": [
            {"topic": "t", "partition_result": [
                {"partition_id": 0, "error_code": 0},
                {"partition_id": 1, "error_code": ErrorCode.election_not_needed, "error_message": "leads"}]}]}),
            node=2)
        self.assertEqual(body["topic_partitions"], [{"topic": "t", "partitions": [0, 1]}])
        result = self.successResultOf(d)
        self.assertIsNone(result[("t", 0)])
        self.assertEqual(result[("t", 1)].error_code, ErrorCode.election_not_needed)

    def test_controller_connection_lost(self) -> None:
        d = self.admin.alter_partition_reassignments({("t", 0): [1, 2, 3]})
        self.answer(3, metadata(controller=1))
        [(_, _, _, sent)] = self.client.pending(45)
        sent.errback(BrokerConnectionError("controller died"))
        self.clock.advance(0.1)
        self.answer(3, metadata(controller=2))
        self.answer(45, respond(45, 0, {"error_code": 0, "responses": [
            {"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]}), node=2)
        self.assertEqual(self.successResultOf(d), {("t", 0): None})

    def test_not_controller_then_lost_connection_then_the_new_controller(self) -> None:
        """
        NOT_CONTROLLER refreshes the metadata and retries on the controller
        it names; a connection to that one that is lost is retried there too.
        """
        d = self.admin.list_partition_reassignments()
        self.answer(3, metadata(controller=1))
        self.answer(46, respond(46, 0, {"error_code": ErrorCode.not_controller, "topics": []}), node=1)
        self.assertEqual(self.client.pending(), [])
        self.clock.advance(0.1)
        self.answer(3, metadata(controller=2))
        [(node, _, _, sent)] = self.client.pending(46)
        self.assertEqual(node, 2)
        sent.errback(BrokerConnectionError("lost"))
        self.assertNoResult(d)
        self.clock.advance(0.2)
        self.answer(3, metadata(controller=2))
        self.answer(46, respond(46, 0, {"error_code": 0, "topics": []}), node=2)
        self.assertEqual(self.successResultOf(d), {})

    def test_not_controller_until_the_timeout(self) -> None:
        """A controller that never settles: the operation fails within its timeout, saying why."""
        d = self.admin.alter_partition_reassignments({("t", 0): [1, 2]}, timeout_ms=2000)
        while not d.called:
            for node, api_key, _, pending in self.client.pending():
                pending.callback(metadata(controller=1) if api_key == 3 else respond(45, 0, {
                    "error_code": ErrorCode.not_controller, "error_message": "not the controller", "responses": []}))
            self.clock.advance(0.05)
        failure = self.failureResultOf(d, KafkaError)
        self.assertEqual(failure.value.error_code, ErrorCode.not_controller)
        self.assertIn("no success within 2000 ms", str(failure.value))
        self.assertLessEqual(self.clock.seconds(), 2.1)

    def test_elect_every_partition_keeps_the_controller_messages(self) -> None:
        """
        ElectLeaders of every partition: a NOT_CONTROLLER partition sends the
        whole request again; each error carries the controller's text (or None).
        """
        d = self.admin.elect_leaders(ELECTION_PREFERRED, None)
        self.answer(3, metadata(controller=1))
        self.answer(43, respond(43, 2, {"error_code": 0, "replica_election_results": [
            {"topic": "t", "partition_result": [
                {"partition_id": 0, "error_code": ErrorCode.not_controller, "error_message": "moved"}]}]}), node=1)
        self.clock.advance(0.1)
        self.answer(3, metadata(controller=2))
        _, body = self.answer(43, respond(43, 2, {"error_code": 0, "replica_election_results": [
            {"topic": "t", "partition_result": [
                {"partition_id": 0, "error_code": 0},
                {"partition_id": 1, "error_code": ErrorCode.preferred_leader_not_available,
                 "error_message": "preferred replica 3 is not alive and in sync"},
                {"partition_id": 2, "error_code": ErrorCode.election_not_needed}]}]}), node=2)
        self.assertIsNone(body["topic_partitions"])
        result = self.successResultOf(d)
        self.assertEqual(sorted(result), [("t", 0), ("t", 1), ("t", 2)])
        self.assertIsNone(result[("t", 0)])
        self.assertEqual((result[("t", 1)].error_code, result[("t", 1)].error_message),
                         (ErrorCode.preferred_leader_not_available, "preferred replica 3 is not alive and in sync"))
        self.assertEqual((result[("t", 2)].error_code, result[("t", 2)].error_message),
                         (ErrorCode.election_not_needed, None))

    def test_a_partition_the_answer_left_out_fails(self) -> None:
        d = self.admin.alter_partition_reassignments({("t", 0): [1, 2], ("t", 1): None})
        self.answer(3, metadata(controller=1))
        self.answer(45, respond(45, 0, {"error_code": 0, "responses": [
            {"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]}))
        result = self.successResultOf(d)
        self.assertIsNone(result[("t", 0)])
        self.assertEqual(result[("t", 1)].error_code, ErrorCode.unknown_server_error)
        self.assertEqual(result[("t", 1)].error_message, "no answer from the controller for this partition")

    def test_list_partition_reassignments(self) -> None:
        d = self.admin.list_partition_reassignments()
        self.answer(3, metadata(controller=1))
        self.answer(46, respond(46, 0, {"error_code": 0, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "replicas": [1, 2, 4], "adding_replicas": [4], "removing_replicas": [3]}]}]}))
        [(tp, r)] = self.successResultOf(d).items()
        self.assertEqual((tp, r.replicas, r.adding_replicas, r.removing_replicas), (("t", 0), [1, 2, 4], [4], [3]))


class ListOffsetsTests(AdminTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.client.topics = {"t": {0: PartitionMetadata(1, 7), 1: PartitionMetadata(2, 3)}}

    def offsets(self, partitions: dict, error_code: int = 0) -> Any:
        return respond(2, 7, {"topics": [{"name": "t", "partitions": [
            {"partition_index": p, "error_code": error_code, "timestamp": -1, "offset": o, "leader_epoch": 7}
            for p, o in partitions.items()]}]})

    def test_one_request_per_leader_with_the_leader_epoch(self) -> None:
        d = self.admin.list_offsets({("t", 0): LATEST_TIMESTAMP, ("t", 1): LATEST_TIMESTAMP})
        requests = {node: body for node, _, body, _ in self.client.pending(2)}
        self.assertEqual(sorted(requests), [1, 2])
        self.assertEqual(requests[1]["topics"][0]["partitions"][0]["current_leader_epoch"], 7)
        for node, _, _, pending in self.client.pending(2):
            pending.callback(self.offsets({0: 10} if node == 1 else {1: 20}))
        self.assertEqual(self.successResultOf(d), {("t", 0): ListOffsetsResultInfo(10, -1, 7),
                                                   ("t", 1): ListOffsetsResultInfo(20, -1, 7)})

    def test_follows_a_leader_change(self) -> None:
        """NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH: refresh the metadata, ask the new leader."""
        d = self.admin.list_offsets({("t", 0): LATEST_TIMESTAMP})
        self.answer(2, self.offsets({0: -1}, ErrorCode.not_leader_or_follower), node=1)
        self.assertNoResult(d)
        self.assertEqual(self.client.invalidations, 1)
        self.client.next_topics = {"t": {0: PartitionMetadata(3, 8)}}
        self.clock.advance(0.1)
        self.answer(2, self.offsets({0: -1}, ErrorCode.fenced_leader_epoch), node=3)
        self.client.next_topics = {"t": {0: PartitionMetadata(2, 9)}}
        self.clock.advance(0.2)
        _, body = self.answer(2, self.offsets({0: 42}), node=2)
        self.assertEqual(body["topics"][0]["partitions"][0]["current_leader_epoch"], 9)
        self.assertEqual(self.successResultOf(d)[("t", 0)].offset, 42)

    def test_no_leader_waits_for_one(self) -> None:
        self.client.topics = {"t": {0: PartitionMetadata(-1, 7)}}
        d = self.admin.list_offsets({("t", 0): LATEST_TIMESTAMP})
        self.assertEqual(self.client.pending(2), [])
        self.client.next_topics = {"t": {0: PartitionMetadata(2, 8)}}
        self.clock.advance(0.1)
        self.answer(2, self.offsets({0: 5}), node=2)
        self.assertEqual(self.successResultOf(d)[("t", 0)].offset, 5)

    def test_a_new_leader_below_the_start_of_its_epoch_is_asked_again(self) -> None:
        """OFFSET_NOT_AVAILABLE (KIP-207): the same leader, again after the backoff."""
        d = self.admin.list_offsets({("t", 0): LATEST_TIMESTAMP})
        self.answer(2, self.offsets({0: -1}, ErrorCode.offset_not_available), node=1)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        self.answer(2, self.offsets({0: 12}), node=1)
        self.assertEqual(self.successResultOf(d)[("t", 0)].offset, 12)

    def test_unknown_topic(self) -> None:
        d = self.admin.list_offsets({("gone", 0): LATEST_TIMESTAMP})
        self.clock.pump([0.1] * 50)
        self.failureResultOf(d, UnknownTopicOrPartitionError)

    def test_other_errors_fail_at_once(self) -> None:
        d = self.admin.list_offsets({("t", 0): LATEST_TIMESTAMP})
        self.answer(2, self.offsets({0: -1}, ErrorCode.offset_out_of_range))
        self.assertEqual(self.failureResultOf(d, KafkaError).value.error_code, ErrorCode.offset_out_of_range)


class CoordinatorTests(AdminTestCase):
    def find(self, node: int) -> None:
        self.answer(10, respond(10, 4, {"coordinators": [
            {"key": "g", "node_id": node, "host": f"h{node}", "port": 9000 + node, "error_code": 0}]}))

    def test_coordinator_moved(self) -> None:
        d = self.admin.coordinator_request("g", 9, {"group_id": "g", "topics": None}, version=5,
                                           error_of=lambda r: r.error_code)
        self.find(1)
        self.answer(9, respond(9, 5, {"error_code": ErrorCode.not_coordinator, "topics": []}), node=1)
        self.clock.advance(0.1)
        self.find(2)
        self.answer(9, respond(9, 5, {"error_code": 0, "topics": []}), node=2)
        self.assertEqual(self.successResultOf(d).error_code, ErrorCode.none)
        self.assertEqual(self.client.brokers[2], ("h2", 9002))

    def test_without_retry_a_lost_connection_fails_and_forgets(self) -> None:
        d = self.admin.coordinator_request("g", 12, {}, version=3, retry=False)
        self.find(1)
        [(_, _, _, sent)] = self.client.pending(12)
        sent.errback(BrokerConnectionError("lost"))
        self.failureResultOf(d, BrokerConnectionError)
        self.admin.coordinator_request("g", 12, {}, version=3, retry=False)
        self.assertEqual(len(self.client.pending(10)), 1)  # looked up again


class AgainstABrokerTests(unittest.TestCase):
    """The admin client against one real broker in memory (L{FakeCluster})."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.cluster = FakeCluster(self.clock, topics={"t": 2})
        self.addCleanup(self.cluster.close)
        self.admin = AdminClient(self.clock, client=self.cluster.client(), default_api_timeout_ms=5000)

    def test_topics_created_grown_described_deleted(self) -> None:
        result = self.cluster.result(self.admin.create_topics([NewTopic("a", 3, 1), NewTopic("t", 1, 1)]))
        self.assertIsNone(result["a"])
        self.assertIsInstance(result["t"], TopicAlreadyExistsError)
        self.assertEqual(self.cluster.result(self.admin.create_partitions({"a": NewPartitions(5)})), {"a": None})
        topic = self.cluster.result(self.admin.describe_topics(["a"]))["a"]
        self.assertEqual([(p.partition, p.leader, p.replicas, p.isr) for p in topic.partitions],
                         [(p, 0, [0], [0]) for p in range(5)])
        self.assertEqual(self.cluster.result(self.admin.delete_topics(["a"])), {"a": None})
        self.assertEqual(sorted(self.cluster.result(self.admin.list_topics())), ["t"])

    def test_unknown_named_topic(self) -> None:
        d = self.admin.describe_topics(["gone"])
        self.assertRaises(UnknownTopicOrPartitionError, self.cluster.result, d)

    def test_describe_cluster(self) -> None:
        cluster = self.cluster.result(self.admin.describe_cluster())
        self.assertEqual((cluster.cluster_id, cluster.controller_id, sorted(cluster.nodes)), ("fake-cluster", 0, [0]))
