"""
Per-API authorization on the in-process broker (KafkaApis over real logs and
the fake ZooKeeper): for each API a principal the ACLs allow and one they do
not, with the error Kafka's KafkaApis answers.  Requests arrive on a
ConnectionContext carrying the principal, as the SASL and TLS authenticators
set it.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.broker.apis import SUPPORTED_VERSIONS
from kafkatw.broker.authorizer import ZkAclAuthorizer
from kafkatw.broker.request_context import ANONYMOUS, ConnectionContext
from kafkatw.broker.transaction_state import TRANSACTION_STATE_TOPIC
from kafkatw.client.admin import AdminClient
from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.messages import encode_request, parse_request_header
from kafkatw.security.acl import (
    CLUSTER_NAME,
    OPERATIONS_NOT_REQUESTED,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    operations_bit_field,
    supported_operations,
)

from .test_broker import BrokerHarness
from .test_transaction_wiring import TxnHarness, group_led_by

O = AclOperation
T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
TAF = ErrorCode.topic_authorization_failed
GAF = ErrorCode.group_authorization_failed
CAF = ErrorCode.cluster_authorization_failed
TIAF = ErrorCode.transactional_id_authorization_failed
ALICE, BOB, CAROL = "User:alice", "User:bob", "User:carol"
GROUP = "g1"  # coordinated by broker 0 of BrokerHarness's two


def grant(authorizer: Any, principal: str, op: AclOperation, resource_type: ResourceType, name: str,
          pattern_type: PatternType = PatternType.LITERAL, permission: AclPermissionType = AclPermissionType.ALLOW
          ) -> None:
    pattern = ResourcePattern(resource_type, name, pattern_type)
    entries = set(authorizer.acls.get(pattern, ()))
    entries.add(AccessControlEntry(principal, "*", op, permission))
    authorizer.set(pattern, entries)


class AuthorizedBroker(BrokerHarness):
    """L{BrokerHarness} with a ZooKeeper ACL authorizer and requests sent as a given principal."""

    def __init__(self, testcase: unittest.TestCase, super_users: tuple[str, ...] = ()) -> None:
        super().__init__(testcase)
        self.authorizer = ZkAclAuthorizer(self.registry, super_users)
        testcase.successResultOf(defer.Deferred.fromCoroutine(self.authorizer.start()))
        self.apis.authorizer = self.authorizer

    def grant(self, *args: Any, **kwargs: Any) -> None:
        grant(self.authorizer, *args, **kwargs)

    def as_(self, principal: str, api_key: int, version: int, body: dict) -> Any:
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, "test", body)
        connection = ConnectionContext(client_host="127.0.0.1", principal=principal)
        result = self.apis.handle(parse_request_header(frame), frame, connection)
        if isinstance(result, defer.Deferred):
            for _ in range(10):  # batched offset commits are written after offsets.commit.batch.interval.ms
                if result.called:
                    break
                self.clock.advance(0.01)
            result = self.testcase.successResultOf(result)
        return self.decode(api_key, version, result)


def produce_body(topic: str) -> dict:
    return {"acks": 1, "timeout": 1000, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": build_batch([(None, b"v")], timestamp_ms=0)}]}]}


class DataApisTests(unittest.TestCase):
    def setUp(self) -> None:
        self.h = AuthorizedBroker(self)
        self.h.create_topic("t")
        self.h.write_state("t", 0, 0, 0, [0])

    def test_produce_needs_write_on_the_topic(self) -> None:
        self.h.grant(ALICE, O.WRITE, T, "t")
        ok = self.h.as_(ALICE, 0, 9, produce_body("t")).responses[0].partition_responses[0]
        self.assertEqual(ok.error_code, ErrorCode.none)
        denied = self.h.as_(BOB, 0, 9, produce_body("t")).responses[0].partition_responses[0]
        self.assertEqual(denied.error_code, TAF)

    def test_fetch_needs_read_and_followers_cluster_action(self) -> None:
        self.h.grant(ALICE, O.READ, T, "t")
        body = self.h.fetch_request("t", 0, 0)
        self.assertEqual(self.h.as_(ALICE, 1, 12, body).responses[0].partitions[0].error_code, ErrorCode.none)
        self.assertEqual(self.h.as_(BOB, 1, 12, body).responses[0].partitions[0].error_code, TAF)
        follower = self.h.fetch_request("t", 0, 0, replica_id=1)
        self.assertEqual(self.h.as_(ALICE, 1, 12, follower).responses[0].partitions[0].error_code, TAF)
        self.h.grant("User:broker", O.CLUSTER_ACTION, C, CLUSTER_NAME)
        self.assertEqual(self.h.as_("User:broker", 1, 12, follower).responses[0].partitions[0].error_code,
                         ErrorCode.none)

    def test_list_offsets_needs_describe(self) -> None:
        self.h.grant(ALICE, O.READ, T, "t")  # implies Describe
        body = {"replica_id": -1, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
        self.assertEqual(self.h.as_(ALICE, 2, 6, body).topics[0].partitions[0].error_code, ErrorCode.none)
        self.assertEqual(self.h.as_(BOB, 2, 6, body).topics[0].partitions[0].error_code, TAF)

    def test_offset_for_leader_epoch(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, T, "t")
        body = {"replica_id": -1, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
        self.assertEqual(self.h.as_(ALICE, 23, 4, body).topics[0].partitions[0].error_code, ErrorCode.none)
        self.assertEqual(self.h.as_(BOB, 23, 4, body).topics[0].partitions[0].error_code, TAF)
        follower = dict(body, replica_id=1)
        self.assertEqual(self.h.as_(ALICE, 23, 4, follower).topics[0].partitions[0].error_code, CAF)
        self.h.grant("User:broker", O.CLUSTER_ACTION, C, CLUSTER_NAME)
        self.assertEqual(self.h.as_("User:broker", 23, 4, follower).topics[0].partitions[0].error_code,
                         ErrorCode.none)

    def test_super_user_may_do_anything(self) -> None:
        h = AuthorizedBroker(self, super_users=("User:admin",))
        h.create_topic("t")
        h.write_state("t", 0, 0, 0, [0])
        self.assertEqual(h.as_("User:admin", 0, 9, produce_body("t")).responses[0].partition_responses[0].error_code,
                         ErrorCode.none)

    def test_prefixed_and_deny(self) -> None:
        self.h.create_topic("logs-a")
        self.h.write_state("logs-a", 0, 0, 0, [0])
        self.h.grant(ALICE, O.WRITE, T, "logs-", PatternType.PREFIXED)
        self.assertEqual(self.h.as_(ALICE, 0, 9, produce_body("logs-a")).responses[0].partition_responses[0]
                         .error_code, ErrorCode.none)
        self.h.grant(ALICE, O.WRITE, T, "logs-a", permission=AclPermissionType.DENY)
        self.assertEqual(self.h.as_(ALICE, 0, 9, produce_body("logs-a")).responses[0].partition_responses[0]
                         .error_code, TAF)


class MetadataTests(unittest.TestCase):
    def setUp(self) -> None:
        self.h = AuthorizedBroker(self)
        for name in ("seen", "hidden"):
            self.h.create_topic(name)

    def metadata(self, principal: str, topics: Any, auto: bool = False, **flags: bool) -> Any:
        body = {"topics": topics if topics is None else [{"name": t, "topic_id": None} for t in topics],
                "allow_auto_topic_creation": auto, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False, **flags}
        return self.h.as_(principal, 3, 10, body)

    def test_all_topics_hides_the_undescribable(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, T, "seen")
        self.assertEqual([t.name for t in self.metadata(ALICE, None).topics], ["seen"])
        self.assertEqual(self.metadata(BOB, None).topics, ())

    def test_named_topics(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, T, "seen")
        response = self.metadata(ALICE, ["seen", "hidden", "absent"])
        self.assertEqual([(t.name, t.error_code) for t in response.topics],
                         [("seen", ErrorCode.none), ("hidden", TAF), ("absent", TAF)])

    def test_auto_creation_needs_create(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, T, "*")
        self.assertEqual(self.metadata(ALICE, ["new"], auto=True).topics[0].error_code, TAF)
        self.h.grant(ALICE, O.CREATE, T, "new")
        self.assertNotEqual(self.metadata(ALICE, ["new"], auto=True).topics[0].error_code, TAF)
        self.assertIn("new", self.h.metadata.topics)

    def test_authorized_operations(self) -> None:
        self.h.grant(ALICE, O.READ, T, "seen")
        self.h.grant(ALICE, O.DESCRIBE, C, CLUSTER_NAME)
        response = self.metadata(ALICE, ["seen"], include_topic_authorized_operations=True,
                                 include_cluster_authorized_operations=True)
        self.assertEqual(response.topics[0].topic_authorized_operations, operations_bit_field([O.READ, O.DESCRIBE]))
        self.assertEqual(response.cluster_authorized_operations, operations_bit_field([O.DESCRIBE]))
        plain = self.metadata(ALICE, ["seen"])
        self.assertEqual(plain.topics[0].topic_authorized_operations, OPERATIONS_NOT_REQUESTED)

    def test_without_an_authorizer_every_operation_is_authorized(self) -> None:
        self.h.apis.authorizer = None
        response = self.metadata(BOB, ["seen"], include_topic_authorized_operations=True)
        self.assertEqual(response.topics[0].topic_authorized_operations, operations_bit_field(supported_operations(T)))


class GroupApisTests(unittest.TestCase):
    """On group C{g1}, which the harness's broker 0 coordinates."""
    def setUp(self) -> None:
        self.h = AuthorizedBroker(self)
        self.h.create_topic("t")

    def test_membership_apis_need_read_on_the_group(self) -> None:
        self.h.grant(ALICE, O.READ, G, GROUP)
        heartbeat = {"group_id": GROUP, "generation_id": 1, "member_id": "m"}
        self.assertNotEqual(self.h.as_(ALICE, 12, 4, heartbeat).error_code, GAF)
        self.assertEqual(self.h.as_(BOB, 12, 4, heartbeat).error_code, GAF)
        join = {"group_id": GROUP, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
        self.assertEqual(self.h.as_(BOB, 11, 5, join).error_code, GAF)
        sync = {"group_id": GROUP, "generation_id": 1, "member_id": "m", "assignments": []}
        self.assertEqual(self.h.as_(BOB, 14, 5, sync).error_code, GAF)
        self.assertNotEqual(self.h.as_(ALICE, 14, 5, sync).error_code, GAF)
        leave = {"group_id": GROUP, "members": [{"member_id": "m"}]}
        self.assertEqual(self.h.as_(BOB, 13, 4, leave).error_code, GAF)
        self.assertNotEqual(self.h.as_(ALICE, 13, 4, leave).error_code, GAF)

    def test_find_coordinator_needs_describe_on_the_group(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, G, GROUP)
        self.assertEqual(self.h.as_(ALICE, 10, 3, {"key": GROUP, "key_type": 0}).error_code, ErrorCode.none)
        self.assertEqual(self.h.as_(BOB, 10, 3, {"key": GROUP, "key_type": 0}).error_code, GAF)

    def test_offset_commit_and_fetch(self) -> None:
        self.h.grant(ALICE, O.READ, G, GROUP)
        self.h.grant(ALICE, O.READ, T, "t")
        self.h.grant(BOB, O.READ, G, GROUP)
        commit = {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                  "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]}
        self.assertEqual(self.h.as_(ALICE, 8, 8, commit).topics[0].partitions[0].error_code, ErrorCode.none)
        self.assertEqual(self.h.as_(BOB, 8, 8, commit).topics[0].partitions[0].error_code, TAF)
        self.assertEqual(self.h.as_("User:carol", 8, 8, commit).topics[0].partitions[0].error_code, GAF)
        fetch = {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]}
        self.assertEqual(self.h.as_(ALICE, 9, 7, fetch).topics[0].partitions[0].committed_offset, 5)
        denied = self.h.as_(BOB, 9, 7, fetch).topics[0].partitions[0]
        self.assertEqual((denied.error_code, denied.committed_offset), (TAF, -1))
        self.assertEqual(self.h.as_("User:carol", 9, 7, fetch).error_code, GAF)
        all_topics = self.h.as_(BOB, 9, 7, {"group_id": GROUP, "topics": None})
        self.assertEqual(all_topics.topics, ())

    def test_offset_fetch_needs_describe_not_read(self) -> None:
        """Kafka's handleOffsetFetchRequest: Describe on the group and on each topic (Read only commits)."""
        self.h.create_topic("hidden")
        self.h.grant(ALICE, O.READ, G, GROUP)
        self.h.grant(ALICE, O.READ, T, "t")
        self.h.grant(ALICE, O.READ, T, "hidden")
        commit = {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 5}]} for name in ("t", "hidden")]}
        self.assertEqual([t.partitions[0].error_code for t in self.h.as_(ALICE, 8, 8, commit).topics],
                         [ErrorCode.none, ErrorCode.none])
        self.h.grant(CAROL, O.DESCRIBE, G, GROUP)
        self.h.grant(CAROL, O.DESCRIBE, T, "t")
        fetch = {"group_id": GROUP, "topics": [{"name": name, "partition_indexes": [0]} for name in ("t", "hidden")]}
        described = self.h.as_(CAROL, 9, 7, fetch)
        self.assertEqual(described.error_code, ErrorCode.none)
        self.assertEqual([(t.name, t.partitions[0].error_code, t.partitions[0].committed_offset)
                          for t in described.topics], [("t", ErrorCode.none, 5), ("hidden", TAF, -1)])
        all_topics = self.h.as_(CAROL, 9, 7, {"group_id": GROUP, "topics": None})
        self.assertEqual([(t.name, t.partitions[0].committed_offset) for t in all_topics.topics], [("t", 5)])
        # Describe on the topic alone is not enough: the group needs it too
        self.h.grant(BOB, O.DESCRIBE, T, "t")
        self.assertEqual(self.h.as_(BOB, 9, 7, fetch).error_code, GAF)
        # and committing still takes Read on the group
        self.assertEqual(self.h.as_(CAROL, 8, 8, commit).topics[0].partitions[0].error_code, GAF)

    def test_describe_list_delete_groups(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, G, GROUP)
        self.h.grant(ALICE, O.DELETE, G, GROUP)
        described = self.h.as_(ALICE, 15, 5, {"groups": [GROUP], "include_authorized_operations": True}).groups[0]
        self.assertNotEqual(described.error_code, GAF)
        self.assertEqual(described.authorized_operations, operations_bit_field([O.DESCRIBE, O.DELETE]))
        self.assertEqual(self.h.as_(BOB, 15, 5, {"groups": [GROUP]}).groups[0].error_code, GAF)
        self.assertNotEqual(self.h.as_(ALICE, 42, 2, {"groups_names": [GROUP]}).results[0].error_code, GAF)
        self.assertEqual(self.h.as_(BOB, 42, 2, {"groups_names": [GROUP]}).results[0].error_code, GAF)
        self.assertEqual(self.h.as_(BOB, 16, 4, {}).error_code, ErrorCode.none)

    def test_list_groups_filters_by_describe(self) -> None:
        commit = {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                  "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]}
        self.h.grant(ALICE, O.READ, G, GROUP)
        self.h.grant(ALICE, O.READ, T, "t")
        self.h.as_(ALICE, 8, 8, commit)
        self.h.grant(BOB, O.DESCRIBE, C, CLUSTER_NAME)
        for principal, seen in ((ALICE, [GROUP]), ("User:carol", []), (BOB, [GROUP])):
            groups = [g.group_id for g in self.h.as_(principal, 16, 4, {}).groups]
            self.assertEqual(groups, seen, principal)


class AdminApisTests(unittest.TestCase):
    def setUp(self) -> None:
        self.h = AuthorizedBroker(self)
        self.h.create_topic("t")

    def test_create_topics(self) -> None:
        self.h.grant(ALICE, O.CREATE, T, "a-", PatternType.PREFIXED)
        body = {"topics": [{"name": "a-1", "num_partitions": 1, "replication_factor": 1}], "timeout": 1000}
        created = self.h.as_(ALICE, 19, 7, body).topics[0]
        self.assertEqual(created.error_code, ErrorCode.none)
        # no DescribeConfigs: the configs are withheld, as Kafka does
        self.assertEqual((created.topic_config_error_code, created.configs), (TAF, None))
        body["topics"][0]["name"] = "b-1"
        self.assertEqual(self.h.as_(ALICE, 19, 7, body).topics[0].error_code, TAF)
        self.h.grant(BOB, O.CREATE, C, CLUSTER_NAME)
        self.assertEqual(self.h.as_(BOB, 19, 7, body).topics[0].error_code, ErrorCode.none)

    def test_delete_topics(self) -> None:
        self.assertEqual(self.h.as_(BOB, 20, 6, {"topics": [{"name": "t"}], "timeout": 1000}).responses[0].error_code,
                         TAF)
        self.h.grant(BOB, O.DESCRIBE, T, "*")  # Describe without Delete: unknown topics are named as such
        self.assertEqual(self.h.as_(BOB, 20, 6, {"topics": [{"name": "u"}], "timeout": 1000}).responses[0]
                         .error_code, ErrorCode.unknown_topic_or_partition)
        self.assertEqual(self.h.as_(BOB, 20, 6, {"topics": [{"name": "t"}], "timeout": 1000}).responses[0].error_code,
                         TAF)
        self.h.grant(ALICE, O.DELETE, T, "t")
        self.assertEqual(self.h.as_(ALICE, 20, 6, {"topics": [{"name": "t"}], "timeout": 1000}).responses[0]
                         .error_code, ErrorCode.none)

    def test_create_partitions(self) -> None:
        body = {"topics": [{"name": "t", "count": 2, "assignments": None}], "timeout": 1000, "validate_only": True}
        self.assertEqual(self.h.as_(BOB, 37, 3, body).results[0].error_code, TAF)
        self.h.grant(ALICE, O.ALTER, T, "t")
        self.assertEqual(self.h.as_(ALICE, 37, 3, body).results[0].error_code, ErrorCode.none)

    def test_configs(self) -> None:
        topic = {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}]}
        broker = {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}]}
        self.assertEqual(self.h.as_(BOB, 32, 4, topic).results[0].error_code, TAF)
        self.assertEqual(self.h.as_(BOB, 32, 4, broker).results[0].error_code, CAF)
        self.h.grant(ALICE, O.DESCRIBE_CONFIGS, T, "t")
        self.h.grant(ALICE, O.ALTER_CONFIGS, C, CLUSTER_NAME)  # implies DescribeConfigs
        self.assertEqual(self.h.as_(ALICE, 32, 4, topic).results[0].error_code, ErrorCode.none)
        self.assertEqual(self.h.as_(ALICE, 32, 4, broker).results[0].error_code, ErrorCode.none)
        alter = {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [
            {"name": "leader.replication.throttled.rate", "config_operation": 0, "value": "1000"}]}],
            "validate_only": True}
        self.assertEqual(self.h.as_(BOB, 44, 1, alter).responses[0].error_code, CAF)
        self.assertEqual(self.h.as_(ALICE, 44, 1, alter).responses[0].error_code, ErrorCode.none)

    def test_init_producer_id(self) -> None:
        body = {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
        self.assertEqual(self.h.as_(BOB, 22, 4, body).error_code, CAF)
        self.h.grant(ALICE, O.WRITE, T, "t")  # KIP-679: Write on some topic is enough
        self.assertEqual(self.h.as_(ALICE, 22, 4, body).error_code, ErrorCode.none)
        self.h.grant(BOB, O.IDEMPOTENT_WRITE, C, CLUSTER_NAME)
        self.assertEqual(self.h.as_(BOB, 22, 4, body).error_code, ErrorCode.none)
        transactional = dict(body, transactional_id="tx")
        self.assertEqual(self.h.as_(ALICE, 22, 4, transactional).error_code,
                         ErrorCode.transactional_id_authorization_failed)

    def test_controller_apis_need_alter_or_describe_on_the_cluster(self) -> None:
        elect = {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}], "timeout": 1000}
        self.assertEqual(self.h.as_(BOB, 43, 2, elect).error_code, CAF)
        reassign = {"timeout": 1000, "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                                 "replicas": [0]}]}]}
        self.assertEqual(self.h.as_(BOB, 45, 0, reassign).error_code, CAF)
        self.assertEqual(self.h.as_(BOB, 46, 0, {"timeout": 1000, "topics": None}).error_code, CAF)
        self.h.grant(ALICE, O.ALTER, C, CLUSTER_NAME)  # Alter implies Describe
        # allowed: this broker is no controller
        self.assertEqual(self.h.as_(ALICE, 43, 2, elect).error_code, ErrorCode.not_controller)
        self.assertEqual(self.h.as_(ALICE, 45, 0, reassign).error_code, ErrorCode.not_controller)
        self.assertEqual(self.h.as_(ALICE, 46, 0, {"timeout": 1000, "topics": None}).error_code,
                         ErrorCode.not_controller)

    def test_describe_cluster(self) -> None:
        """Anyone may describe the cluster (as from Metadata); its operations need Describe on it."""
        body = {"include_cluster_authorized_operations": True}
        response = self.h.as_(BOB, 60, 0, body)
        self.assertEqual((response.error_code, response.cluster_authorized_operations), (ErrorCode.none, 0))
        self.h.grant(ALICE, O.DESCRIBE, C, CLUSTER_NAME)
        response = self.h.as_(ALICE, 60, 0, body)
        self.assertEqual(response.error_code, ErrorCode.none)
        self.assertEqual(response.cluster_authorized_operations, operations_bit_field([O.DESCRIBE]))


class AuthorizedTxnBroker(AuthorizedBroker, TxnHarness):
    """
    L{AuthorizedBroker} with the transaction wiring: the harness's own
    (anonymous) requests and the WriteTxnMarkers it loops back are a super
    user's, so a test sets a transaction up and then asks as a principal.
    """

    def __init__(self, testcase: unittest.TestCase) -> None:
        super().__init__(testcase, super_users=(ANONYMOUS,))


def txn_produce_body(tid: str, topic: str, pid: int, epoch: int, seq: int) -> dict:
    records = build_batch([(b"k", b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                          attributes=0x10)
    return {"transactional_id": tid, "acks": 1, "timeout": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


class TransactionApisTests(unittest.TestCase):
    """Kafka's checks for each transactional API (docs/security.md), an allowed and a denied principal each."""

    def setUp(self) -> None:
        self.h = h = AuthorizedTxnBroker(self)
        h.create_topic("t")
        h.create_topic("u")
        h.create_topic(TRANSACTION_STATE_TOPIC, 1, [0])
        response = h.init()
        self.assertEqual(response.error_code, ErrorCode.none)
        self.pid, self.epoch = response.producer_id, response.producer_epoch
        self.group = group_led_by(0)

    def add_body(self, *topics: str, tid: str = "tx") -> dict:
        return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": self.pid,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": t, "partitions": [0]} for t in topics]}

    def codes(self, response: Any) -> dict:
        return {(t.name, p.partition_index): p.partition_error_code for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition}

    def test_init_producer_id_needs_write_on_the_transactional_id(self) -> None:
        body = {"transactional_id": "tx", "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
        self.h.grant(BOB, O.DESCRIBE, X, "tx")  # Describe is not enough
        self.assertEqual(self.h.as_(BOB, 22, 4, body).error_code, TIAF)
        self.h.grant(ALICE, O.WRITE, X, "tx")
        self.assertEqual(self.h.as_(ALICE, 22, 4, body).error_code, ErrorCode.none)

    def test_find_coordinator_needs_describe_on_the_transactional_id(self) -> None:
        self.h.grant(ALICE, O.WRITE, X, "tx")  # implies Describe
        body = {"key_type": 1, "coordinator_keys": ["tx", "other"]}
        found = self.h.as_(ALICE, 10, 4, body).coordinators
        self.assertEqual([(c.error_code, c.node_id) for c in found], [(ErrorCode.none, 0), (TIAF, -1)])
        self.assertEqual(self.h.as_(BOB, 10, 3, {"key": "tx", "key_type": 1}).error_code, TIAF)

    def test_a_refused_find_coordinator_does_not_create_the_state_topic(self) -> None:
        h = AuthorizedTxnBroker(self)
        self.assertEqual(h.as_(BOB, 10, 3, {"key": "tx", "key_type": 1}).error_code, TIAF)
        h.settle()
        self.assertNotIn(TRANSACTION_STATE_TOPIC, h.metadata.topics)
        h.grant(ALICE, O.DESCRIBE, X, "tx")
        self.assertEqual(h.as_(ALICE, 10, 3, {"key": "tx", "key_type": 1}).error_code,
                         ErrorCode.coordinator_not_available)
        h.settle()
        self.assertIn(TRANSACTION_STATE_TOPIC, h.metadata.topics)

    def test_add_partitions_to_txn(self) -> None:
        h = self.h
        h.grant(BOB, O.WRITE, T, "t")
        self.assertEqual(self.codes(h.as_(BOB, 24, 3, self.add_body("t"))), {("t", 0): TIAF})
        h.grant(ALICE, O.WRITE, X, "tx")
        h.grant(ALICE, O.WRITE, T, "t")
        h.grant(ALICE, O.WRITE, T, "nope")
        h.grant(ALICE, O.WRITE, T, "__", PatternType.PREFIXED)  # internal topics are refused all the same
        self.assertEqual(self.codes(h.as_(ALICE, 24, 3, self.add_body("t", "u", "nope"))),
                         {("t", 0): ErrorCode.operation_not_attempted, ("u", 0): TAF,
                          ("nope", 0): ErrorCode.unknown_topic_or_partition})
        self.assertEqual(self.codes(h.as_(ALICE, 24, 3, self.add_body("t", "__consumer_offsets"))),
                         {("t", 0): ErrorCode.operation_not_attempted, ("__consumer_offsets", 0): TAF})
        self.assertEqual(h.wiring.coordinator.transactions()["tx"].topic_partitions, set())
        self.assertEqual(self.codes(h.as_(ALICE, 24, 3, self.add_body("t"))), {("t", 0): ErrorCode.none})

    def test_add_offsets_to_txn(self) -> None:
        h = self.h
        body = {"transactional_id": "tx", "producer_id": self.pid, "producer_epoch": self.epoch,
                "group_id": self.group}
        h.grant(BOB, O.READ, G, self.group)
        self.assertEqual(h.as_(BOB, 25, 3, body).error_code, TIAF)
        h.grant(CAROL, O.WRITE, X, "tx")
        self.assertEqual(h.as_(CAROL, 25, 3, body).error_code, GAF)
        h.grant(ALICE, O.WRITE, X, "tx")
        h.grant(ALICE, O.READ, G, self.group)
        self.assertEqual(h.as_(ALICE, 25, 3, body).error_code, ErrorCode.none)

    def test_end_txn(self) -> None:
        h = self.h
        h.add(self.pid, self.epoch, ("t", 0))
        body = {"transactional_id": "tx", "producer_id": self.pid, "producer_epoch": self.epoch, "committed": True}
        h.grant(BOB, O.DESCRIBE, X, "tx")
        self.assertEqual(h.as_(BOB, 26, 3, body).error_code, TIAF)
        h.grant(ALICE, O.WRITE, X, "tx")
        self.assertEqual(h.as_(ALICE, 26, 3, body).error_code, ErrorCode.none)

    def test_write_txn_markers_needs_cluster_action(self) -> None:
        body = {"markers": [{"producer_id": self.pid, "producer_epoch": self.epoch, "transaction_result": True,
                             "coordinator_epoch": 0, "topics": [{"name": "t", "partition_indexes": [0]},
                                                                {"name": "u", "partition_indexes": [0]}]}]}
        self.h.grant(ALICE, O.WRITE, T, "*")
        refused = self.h.as_(ALICE, 27, 1, body).markers[0]
        self.assertEqual(refused.producer_id, self.pid)
        self.assertEqual({(t.name, p.partition_index): p.error_code for t in refused.topics for p in t.partitions},
                         {("t", 0): CAF, ("u", 0): CAF})
        self.assertEqual(self.h.log_manager.get("t", 0).log_end_offset, 0)
        self.h.grant("User:broker", O.CLUSTER_ACTION, C, CLUSTER_NAME)
        done = self.h.as_("User:broker", 27, 1, body).markers[0]
        self.assertEqual({p.error_code for t in done.topics for p in t.partitions}, {ErrorCode.none})

    def test_txn_offset_commit(self) -> None:
        h = self.h
        h.call(25, 3, {"transactional_id": "tx", "producer_id": self.pid, "producer_epoch": self.epoch,
                       "group_id": self.group})
        body = {"transactional_id": "tx", "group_id": self.group, "producer_id": self.pid,
                "producer_epoch": self.epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}
                           for t in ("t", "u")]}

        def codes(principal: str) -> dict:
            response = h.as_(principal, 28, 3, body)
            return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

        h.grant(BOB, O.READ, G, self.group)
        h.grant(BOB, O.READ, T, "*")
        self.assertEqual(codes(BOB), {("t", 0): TIAF, ("u", 0): TIAF})
        h.grant(CAROL, O.WRITE, X, "tx")
        h.grant(CAROL, O.READ, T, "*")
        self.assertEqual(codes(CAROL), {("t", 0): GAF, ("u", 0): GAF})
        h.grant(ALICE, O.WRITE, X, "tx")
        h.grant(ALICE, O.READ, G, self.group)
        h.grant(ALICE, O.READ, T, "t")
        self.assertEqual(codes(ALICE), {("t", 0): ErrorCode.none, ("u", 0): TAF})
        pending = self.successResultOf(h.wiring.pending_offsets.pending(self.group))
        self.assertEqual({tp for offsets in pending.values() for tp in offsets}, {("t", 0)})

    def test_describe_producers_needs_read(self) -> None:
        body = {"topics": [{"name": "t", "partition_indexes": [0]}]}
        self.h.grant(BOB, O.DESCRIBE, T, "t")
        self.assertEqual(self.h.as_(BOB, 61, 0, body).topics[0].partitions[0].error_code, TAF)
        self.h.grant(ALICE, O.READ, T, "t")
        self.assertEqual(self.h.as_(ALICE, 61, 0, body).topics[0].partitions[0].error_code, ErrorCode.none)

    def test_describe_transactions(self) -> None:
        h = self.h
        h.add(self.pid, self.epoch, ("t", 0), ("u", 0))
        body = {"transactional_ids": ["tx"]}
        h.grant(BOB, O.DESCRIBE, T, "*")
        self.assertEqual(h.as_(BOB, 65, 0, body).transaction_states[0].error_code, TIAF)
        h.grant(ALICE, O.DESCRIBE, X, "tx")
        h.grant(ALICE, O.DESCRIBE, T, "t")
        state = h.as_(ALICE, 65, 0, body).transaction_states[0]
        self.assertEqual((state.error_code, state.transaction_state, state.producer_id),
                         (ErrorCode.none, "Ongoing", self.pid))
        self.assertEqual([t.topic for t in state.topics], ["t"])  # only the topics Alice may Describe

    def test_list_transactions_lists_the_describable(self) -> None:
        h = self.h
        h.add(self.pid, self.epoch, ("t", 0))
        body = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
        listed = h.as_(BOB, 66, 1, body)
        self.assertEqual((listed.error_code, list(listed.transaction_states)), (ErrorCode.none, []))
        h.grant(ALICE, O.DESCRIBE, X, "tx")
        self.assertEqual([s.transactional_id for s in h.as_(ALICE, 66, 1, body).transaction_states], ["tx"])

    def test_transactional_produce_needs_write_on_the_transactional_id(self) -> None:
        h = self.h
        h.add(self.pid, self.epoch, ("t", 0))
        body = txn_produce_body("tx", "t", self.pid, self.epoch, 0)
        h.grant(BOB, O.WRITE, T, "t")
        refused = h.as_(BOB, 0, 9, body).responses[0].partition_responses[0]
        self.assertEqual(refused.error_code, TIAF)
        self.assertEqual(h.log_manager.get("t", 0).log_end_offset, 0)
        h.grant(ALICE, O.WRITE, T, "t")
        h.grant(ALICE, O.WRITE, X, "tx")
        self.assertEqual(h.as_(ALICE, 0, 9, body).responses[0].partition_responses[0].error_code, ErrorCode.none)


class AclApisTests(unittest.TestCase):
    def setUp(self) -> None:
        self.h = AuthorizedBroker(self)
        self.h.grant("User:admin", O.ALTER, C, CLUSTER_NAME)

    def creation(self, name: str = "t", pattern_type: int = 3) -> dict:
        return {"resource_type": 2, "resource_name": name, "resource_pattern_type": pattern_type,
                "principal": ALICE, "host": "*", "operation": int(O.READ), "permission_type": 3}

    def test_security_disabled_without_an_authorizer(self) -> None:
        """Every version served of the three ACL requests: SECURITY_DISABLED with Kafka's texts (its C{AclApis})."""
        self.h.apis.authorizer = None
        describe = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                    "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
        creation = self.creation()
        for version in (1, 2, 3):
            described = self.h.as_(ALICE, 29, version, describe)
            self.assertEqual((described.error_code, described.error_message, list(described.resources)),
                             (ErrorCode.security_disabled, "No Authorizer is configured on the broker", []))
            created = self.h.as_(ALICE, 30, version, {"creations": [creation, creation]}).results
            self.assertEqual([(r.error_code, r.error_message) for r in created],
                             [(ErrorCode.security_disabled, "No Authorizer is configured.")] * 2)
            deleted = self.h.as_(ALICE, 31, version, {"filters": [describe]}).filter_results
            self.assertEqual([(r.error_code, r.error_message, list(r.matching_acls)) for r in deleted],
                             [(ErrorCode.security_disabled, "No Authorizer is configured.", [])])

    def test_admin_client_without_an_authorizer(self) -> None:
        """
        kafkatw's admin client raises the broker's SECURITY_DISABLED with its
        text (which C{kafkatw acls} prints; tests/integration/test_acls.py).
        """
        self.h.apis.authorizer = None
        admin = AdminClient(self.h.clock, client=_Client(_BrokerConnection(self.h, ALICE)))
        failure = self.failureResultOf(admin.describe_acls(AclBindingFilter()))
        self.assertEqual((failure.value.error_code, str(failure.value)),
                         (ErrorCode.security_disabled, "No Authorizer is configured on the broker"))
        binding = AclBinding(ResourcePattern(T, "t"), AccessControlEntry(BOB, "*", O.READ, AclPermissionType.ALLOW))
        error = self.successResultOf(admin.create_acls([binding]))[binding]
        self.assertEqual((error.error_code, str(error)), (ErrorCode.security_disabled, "No Authorizer is configured."))

    def test_create_describe_delete(self) -> None:
        for version in (1, 2, 3):
            self.assertEqual(self.h.as_(BOB, 30, version, {"creations": [self.creation()]}).results[0].error_code,
                             CAF)
            results = self.h.as_("User:admin", 30, version, {"creations": [self.creation(), self.creation(
                "p-", 4), self.creation("x", 2)]}).results
            self.assertEqual([r.error_code for r in results],
                             [ErrorCode.none, ErrorCode.none, ErrorCode.invalid_request])
            describe = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
            self.assertEqual(self.h.as_(BOB, 29, version, describe).error_code, CAF)
            described = self.h.as_("User:admin", 29, version, describe)  # Alter implies Describe
            self.assertEqual(described.error_code, ErrorCode.none)
            self.assertEqual(sorted((r.resource_name, r.pattern_type, [a.principal for a in r.acls])
                                    for r in described.resources),
                             [("kafka-cluster", 3, ["User:admin"]), ("p-", 4, [ALICE]), ("t", 3, [ALICE])])
            bad = dict(describe, operation=0)
            self.assertEqual(self.h.as_("User:admin", 29, version, bad).error_code, ErrorCode.invalid_request)
            self.assertTrue(self.h.authorizer.authorize(ALICE, "h", O.READ, T, "p-x"))
            delete = {"filters": [dict(describe, resource_type_filter=2, pattern_type_filter=4)]}
            self.assertEqual(self.h.as_(BOB, 31, version, delete).filter_results[0].error_code, CAF)
            result = self.h.as_("User:admin", 31, version, delete).filter_results[0]
            self.assertEqual([(m.resource_name, m.principal) for m in result.matching_acls], [("p-", ALICE)])
            self.assertFalse(self.h.authorizer.authorize(ALICE, "h", O.READ, T, "p-x"))
            self.h.as_("User:admin", 31, version, {"filters": [dict(describe, resource_type_filter=2)]})
            self.assertEqual(list(self.h.authorizer.acls), [ResourcePattern(C, CLUSTER_NAME)])


class _BrokerConnection:
    """A client connection served by an in-process broker, as one principal (bytes both ways)."""

    def __init__(self, broker: AuthorizedBroker, principal: str) -> None:
        self.broker = broker
        self.principal = principal
        self.versions = {key: high for key, (_low, high) in SUPPORTED_VERSIONS.items()}

    def request(self, api_key: int, body: Any, version: int | None = None, timeout_ms: int | None = None) -> Any:
        return defer.succeed(self.broker.as_(self.principal, api_key, version or self.versions[api_key], body))


class _Client:
    """The part of L{kafkatw.client.client.KafkaClient} the admin client uses for ACLs."""

    def __init__(self, connection: _BrokerConnection) -> None:
        self._connection = connection
        self.bootstrap = [("in-process", 0)]
        self.brokers = {0: ("in-process", 0)}

    def least_loaded_node(self) -> int:
        return 0

    def connection(self, node: int) -> defer.Deferred:
        return defer.succeed(self._connection)

    def invalidate(self) -> None:
        pass

    def close(self) -> defer.Deferred:
        return defer.succeed(None)


class AdminClientAclTests(unittest.TestCase):
    """L{kafkatw.client.admin.AdminClient}'s ACL methods against the in-process broker."""

    def admin(self, principal: str) -> AdminClient:
        return AdminClient(self.h.clock, client=_Client(_BrokerConnection(self.h, principal)))

    def setUp(self) -> None:
        self.h = AuthorizedBroker(self, super_users=("User:admin",))

    def test_create_describe_delete(self) -> None:
        admin = self.admin("User:admin")
        binding = AclBinding(ResourcePattern(T, "orders-", PatternType.PREFIXED),
                             AccessControlEntry(ALICE, "*", O.WRITE, AclPermissionType.ALLOW))
        bad = AclBinding(ResourcePattern(C, "other"), AccessControlEntry(ALICE, "*", O.ALTER, AclPermissionType.ALLOW))
        results = self.successResultOf(admin.create_acls([binding, bad]))
        self.assertIsNone(results[binding])
        self.assertEqual(results[bad].error_code, ErrorCode.invalid_request)
        self.assertEqual(self.successResultOf(admin.describe_acls(AclBindingFilter())), [binding])
        deleted = self.successResultOf(admin.delete_acls([AclBindingFilter(T, "orders-", PatternType.PREFIXED)]))
        self.assertEqual(list(deleted.values()), [[binding]])

    def test_refused(self) -> None:
        admin = self.admin(BOB)
        failure = self.failureResultOf(admin.describe_acls(AclBindingFilter()))
        self.assertEqual(failure.value.error_code, CAF)
        binding = AclBinding(ResourcePattern(T, "t"), AccessControlEntry(BOB, "*", O.READ, AclPermissionType.ALLOW))
        self.assertEqual(self.successResultOf(admin.create_acls([binding]))[binding].error_code, CAF)
