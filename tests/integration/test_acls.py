"""
ACL authorization on a real ZooKeeper and two kafkatw brokers running Kafka's
C{kafka.security.authorizer.AclAuthorizer}.

Every connection here is plaintext, so every principal is C{User:ANONYMOUS}
(SASL and TLS principals come with the security listeners): the first ACLs
are written straight into ZooKeeper with C{kafkatw acls --authorizer-properties
zookeeper.connect=...} -- C{ClusterAction} for the brokers' replication, which
on a plaintext inter-broker listener is C{User:ANONYMOUS} too, and Create and
Alter on the cluster -- then real clients (confluent-kafka, kcat) are refused
with C{TOPIC_AUTHORIZATION_FAILED} until C{kafkatw acls --bootstrap-server}
adds ACLs, which both brokers apply within seconds, without a restart;
prefixed ACLs, and a Deny that beats an Allow.
"""

from __future__ import annotations

import subprocess
import time

from click.testing import CliRunner
from confluent_kafka import Consumer, Producer
from twisted.trial import unittest

from kafkatw.cli.main import main as cli_main
from kafkatw.client import NewTopic
from kafkatw.client.blocking import BlockingAdminClient
from kafkatw.errors import ErrorCode
from kafkatw.testing import running_cluster, wait_for

from .test_broker import raw_request

OVERRIDES = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "auto.create.topics.enable": "false",
}
TAF = int(ErrorCode.topic_authorization_failed)


def acls(*args: str):
    return CliRunner().invoke(cli_main, ["acls", *args])


def bootstrap_acls(zookeeper_connect: str) -> None:
    result = acls("--authorizer-properties", f"zookeeper.connect={zookeeper_connect}", "--add",
                  "--allow-principal", "User:ANONYMOUS", "--operation", "ClusterAction", "--operation", "Create",
                  "--operation", "Alter", "--cluster")
    if result.exit_code != 0:
        raise AssertionError(f"bootstrapping the ACLs failed: {result.output}")


def metadata_error(bootstrap: str, topic: str) -> int:
    response = raw_request(bootstrap, 3, 4, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return int(response.topics[0].error_code)


def fetch_error(bootstrap: str, topic: str) -> int:
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                                        "current_leader_epoch": -1, "log_start_offset": -1}]}]}
    return int(raw_request(bootstrap, 1, 12, body).responses[0].partitions[0].error_code)


def produce(bootstrap: str, topic: str, count: int) -> list:
    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    return errors


class AclIntegrationTests(unittest.TestCase):
    timeout = 300

    def test_acls_on_two_brokers(self) -> None:
        with running_cluster(2, overrides=OVERRIDES, before_brokers=bootstrap_acls) as cluster:
            brokers = [b.bootstrap for b in cluster]
            bootstrap = ",".join(brokers)
            with BlockingAdminClient(bootstrap) as admin:  # Create on the cluster
                errors = admin.create_topics([NewTopic("t", replica_assignment={0: [0, 1]})])
                self.assertEqual(errors, {"t": None})

            # No ACL on the topic: refused, and hidden from Metadata's all-topics list.
            for broker in brokers:
                wait_for(lambda broker=broker: metadata_error(broker, "t") == TAF, timeout_s=10,
                         what="TOPIC_AUTHORIZATION_FAILED")
            self.assertEqual(raw_request(brokers[1], 3, 4, {"topics": None}).topics, ())
            delivered = produce(bootstrap, "t", 1)
            self.assertEqual([e.name() if e else None for e in delivered], ["TOPIC_AUTHORIZATION_FAILED"])
            kcat = subprocess.run(["kcat", "-b", bootstrap, "-L", "-t", "t"], capture_output=True, text=True,
                                  timeout=30)
            self.assertIn("Topic authorization failed", kcat.stdout + kcat.stderr)

            # An ACL added through one broker is applied by both, without a restart.
            result = acls("--bootstrap-server", brokers[0], "--add", "--allow-principal", "User:ANONYMOUS",
                          "--producer", "--topic", "t")
            self.assertEqual(result.exit_code, 0, result.output)
            self.assertIn("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, "
                          "patternType=LITERAL)`", result.output)
            self.assertIn("(principal=User:ANONYMOUS, host=*, operation=WRITE, permissionType=ALLOW)", result.output)
            started = time.monotonic()
            wait_for(lambda: all(metadata_error(b, "t") == 0 for b in brokers), timeout_s=5,
                     what="both brokers applying the new ACL")
            self.assertLess(time.monotonic() - started, 3)
            self.assertEqual(produce(bootstrap, "t", 5), [None] * 5)
            # replication works under the authorizer (ClusterAction): the follower is in the ISR
            wait_for(lambda: sorted(raw_request(brokers[0], 3, 4, {"topics": [{"name": "t"}]})
                                    .topics[0].partitions[0].isr_nodes) == [0, 1], timeout_s=30, what="full ISR")
            self.assertEqual([fetch_error(b, "t") for b in brokers], [TAF, TAF])  # no Read yet

            # A prefixed consumer ACL: topics t*, groups grp-*.
            result = acls("--bootstrap-server", bootstrap, "--add", "--allow-principal", "User:ANONYMOUS",
                          "--consumer", "--topic", "t", "--group", "grp-", "--resource-pattern-type", "prefixed")
            self.assertEqual(result.exit_code, 0, result.output)
            wait_for(lambda: all(fetch_error(b, "t") != TAF for b in brokers), timeout_s=5, what="Read applied")
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "grp-1", "auto.offset.reset": "earliest"})
            try:
                consumer.subscribe(["t"])
                values = []
                deadline = time.monotonic() + 60
                while len(values) < 5 and time.monotonic() < deadline:
                    message = consumer.poll(1.0)
                    if message is not None and message.error() is None:
                        values.append(message.value())
                self.assertEqual(values, [f"v{i}".encode() for i in range(5)])
            finally:
                consumer.close()

            # Deny beats allow, on both brokers.
            result = acls("--bootstrap-server", bootstrap, "--add", "--deny-principal", "User:ANONYMOUS",
                          "--operation", "Read", "--topic", "t")
            self.assertEqual(result.exit_code, 0, result.output)
            wait_for(lambda: [fetch_error(b, "t") for b in brokers] == [TAF, TAF], timeout_s=5, what="Deny applied")
            self.assertEqual([metadata_error(b, "t") for b in brokers], [0, 0])  # Describe still allowed

            listed = acls("--bootstrap-server", bootstrap, "--list", "--topic", "t")
            self.assertEqual(listed.exit_code, 0, listed.output)
            self.assertIn("(principal=User:ANONYMOUS, host=*, operation=READ, permissionType=DENY)", listed.output)
            listed = acls("--bootstrap-server", bootstrap, "--list", "--topic", "t", "--resource-pattern-type", "match")
            self.assertIn("patternType=PREFIXED", listed.output)

            result = acls("--bootstrap-server", bootstrap, "--remove", "--force", "--deny-principal",
                          "User:ANONYMOUS", "--operation", "Read", "--topic", "t")
            self.assertEqual(result.exit_code, 0, result.output)
            wait_for(lambda: all(fetch_error(b, "t") != TAF for b in brokers), timeout_s=5, what="Deny removed")

    def test_admin_clients_manage_acls(self) -> None:
        """confluent-kafka's and kafka-python's admin clients create, describe and delete ACLs."""
        from confluent_kafka import admin as ck
        from kafka import admin as kp

        with running_cluster(1, overrides=OVERRIDES, before_brokers=bootstrap_acls) as cluster:
            bootstrap = cluster[0].bootstrap
            client = ck.AdminClient({"bootstrap.servers": bootstrap})
            binding = ck.AclBinding(ck.ResourceType.TOPIC, "ck-", ck.ResourcePatternType.PREFIXED, "User:alice", "*",
                                    ck.AclOperation.READ, ck.AclPermissionType.ALLOW)
            for future in client.create_acls([binding]).values():
                self.assertIsNone(future.result(15))
            everything = ck.AclBindingFilter(ck.ResourceType.ANY, None, ck.ResourcePatternType.ANY, None, None,
                                             ck.AclOperation.ANY, ck.AclPermissionType.ANY)
            self.assertIn(binding, client.describe_acls(everything).result(15))
            prefixed = ck.AclBindingFilter(ck.ResourceType.TOPIC, "ck-", ck.ResourcePatternType.PREFIXED, None, None,
                                           ck.AclOperation.ANY, ck.AclPermissionType.ANY)
            for future in client.delete_acls([prefixed]).values():
                self.assertEqual(future.result(15), [binding])

            legacy = kp.KafkaAdminClient(bootstrap_servers=bootstrap)
            try:
                acl = kp.ACL("User:bob", "*", kp.ACLOperation.WRITE, kp.ACLPermissionType.ALLOW,
                             kp.ResourcePattern(kp.ResourceType.TOPIC, "kp"))
                self.assertEqual(legacy.create_acls([acl])["failed"], [])
                found, error = legacy.describe_acls(kp.ACLFilter(
                    "User:bob", None, kp.ACLOperation.ANY, kp.ACLPermissionType.ANY,
                    kp.ResourcePatternFilter(kp.ResourceType.ANY, None, kp.ACLResourcePatternType.ANY)))
                self.assertEqual([(a.principal, a.resource_pattern.resource_name, a.operation) for a in found],
                                 [("User:bob", "kp", kp.ACLOperation.WRITE)])
            finally:
                legacy.close()

    def test_without_an_authorizer_acl_requests_are_security_disabled(self) -> None:
        """
        A broker without C{authorizer.class.name} answers DescribeAcls,
        CreateAcls and DeleteAcls with SECURITY_DISABLED and Kafka's texts
        (not an empty list): kafka-python, confluent-kafka and C{kafkatw acls}
        (one line, exit 1) show it.

        librdkafka (2.16) is left out for DescribeAcls: its
        C{rd_kafka_DescribeAclsResponse_parse} reads the top-level error and
        drops it, so its C{describe_acls} answers an empty list whatever the
        broker (Kafka's too) answers; the wire answer is checked instead.
        """
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka import admin as ck
        from kafka import admin as kp
        from kafka.errors import SecurityDisabledError

        with running_cluster(1) as cluster:
            bootstrap = cluster[0].bootstrap
            for version in (1, 2, 3):
                described = raw_request(bootstrap, 29, version, {
                    "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                    "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
                self.assertEqual((described.error_code, described.error_message, described.resources),
                                 (54, "No Authorizer is configured on the broker", ()))  # SECURITY_DISABLED

            client = ck.AdminClient({"bootstrap.servers": bootstrap})
            everything = ck.AclBindingFilter(ck.ResourceType.ANY, None, ck.ResourcePatternType.ANY, None, None,
                                             ck.AclOperation.ANY, ck.AclPermissionType.ANY)
            binding = ck.AclBinding(ck.ResourceType.TOPIC, "t", ck.ResourcePatternType.LITERAL, "User:alice", "*",
                                    ck.AclOperation.READ, ck.AclPermissionType.ALLOW)
            for future in [*client.create_acls([binding]).values(), *client.delete_acls([everything]).values()]:
                with self.assertRaises(KafkaException) as raised:
                    future.result(15)
                error = raised.exception.args[0]
                self.assertEqual((error.code(), error.str()),
                                 (KafkaError.SECURITY_DISABLED, "No Authorizer is configured."))

            legacy = kp.KafkaAdminClient(bootstrap_servers=bootstrap)
            try:
                with self.assertRaises(SecurityDisabledError) as caught:
                    legacy.describe_acls(kp.ACLFilter(
                        None, None, kp.ACLOperation.ANY, kp.ACLPermissionType.ANY,
                        kp.ResourcePatternFilter(kp.ResourceType.ANY, None, kp.ACLResourcePatternType.ANY)))
                self.assertIn("No Authorizer is configured on the broker", str(caught.exception))
            finally:
                legacy.close()

            listed = acls("--bootstrap-server", bootstrap, "--list")
            self.assertEqual((listed.exit_code, listed.output),
                             (1, "Error while executing ACL command: No Authorizer is configured on the broker\n"))
            added = acls("--bootstrap-server", bootstrap, "--add", "--allow-principal", "User:alice", "--topic", "t")
            self.assertEqual(added.exit_code, 1, added.output)
            self.assertEqual(added.output.splitlines()[-1],
                             "Error while executing ACL command: No Authorizer is configured.")
            self.assertNotIn("Traceback", added.output)

    def test_transactions_under_acls(self) -> None:
        """
        A librdkafka transactional producer needs Write on its transactional
        id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without it); with
        C{kafkatw acls --producer --transactional-id} it commits, and the
        markers the coordinator sends (ClusterAction) make the records visible
        to a read-committed consumer.
        """
        from confluent_kafka import KafkaError, KafkaException

        from .test_transactions import read_values

        overrides = {**OVERRIDES, "transaction.state.log.replication.factor": "1",
                     "transaction.state.log.min.isr": "1", "transaction.state.log.num.partitions": "2"}
        with running_cluster(1, overrides=overrides, before_brokers=bootstrap_acls) as cluster:
            bootstrap = cluster[0].bootstrap
            with BlockingAdminClient(bootstrap) as admin:
                self.assertEqual(admin.create_topics([NewTopic("t", 1, 1)]), {"t": None})
            result = acls("--bootstrap-server", bootstrap, "--add", "--allow-principal", "User:ANONYMOUS",
                          "--producer", "--topic", "t")
            self.assertEqual(result.exit_code, 0, result.output)

            refused = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx"})
            with self.assertRaises(KafkaException) as caught:
                refused.init_transactions(20)
            self.assertEqual(caught.exception.args[0].code(), KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

            result = acls("--bootstrap-server", bootstrap, "--add", "--allow-principal", "User:ANONYMOUS",
                          "--producer", "--topic", "t", "--transactional-id", "tx")
            self.assertEqual(result.exit_code, 0, result.output)
            self.assertIn("ResourcePattern(resourceType=TRANSACTIONAL_ID, name=tx, patternType=LITERAL)",
                          result.output)
            producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx", "linger.ms": 5})
            producer.init_transactions(30)
            producer.begin_transaction()
            for i in range(3):
                producer.produce("t", f"v{i}".encode(), partition=0)
            producer.commit_transaction(30)

            result = acls("--bootstrap-server", bootstrap, "--add", "--allow-principal", "User:ANONYMOUS",
                          "--consumer", "--topic", "t", "--group", "check-", "--resource-pattern-type", "prefixed")
            self.assertEqual(result.exit_code, 0, result.output)
            self.assertEqual(read_values(bootstrap, "t", "read_committed", partitions=1, expect=3),
                             [b"v0", b"v1", b"v2"])
