"""
C{kafkatw acls}: the flag checks of Kafka's C{AclCommand}, made before any
connection (no broker, no ZooKeeper here; tests/integration/test_acls.py runs
the command against real brokers).
"""

from __future__ import annotations

from click.testing import CliRunner
from twisted.trial import unittest

from kafkatw.cli.main import main as cli_main

ZK = ("--authorizer-properties", "zookeeper.connect=127.0.0.1:1/kafkatw")


def acls(*args: str):
    return CliRunner().invoke(cli_main, ["acls", *args])


class UsageTests(unittest.TestCase):
    def assertUsage(self, result, text: str) -> None:  # noqa: N802
        self.assertEqual(result.exit_code, 2, result.output)
        self.assertIn(text, result.output)

    def test_one_action(self) -> None:
        self.assertUsage(acls(*ZK, "--topic", "t"), "exactly one action")

    def test_one_way_to_the_acls(self) -> None:
        self.assertUsage(acls("--list"), "--bootstrap-server or --authorizer-properties")
        self.assertUsage(acls("--list", "--bootstrap-server", "b:1", *ZK), "--bootstrap-server or --authorizer")

    def test_add_needs_a_principal_and_a_resource(self) -> None:
        self.assertUsage(acls(*ZK, "--add", "--topic", "t"), "--allow-principal, --deny-principal")
        self.assertUsage(acls(*ZK, "--add", "--allow-principal", "User:a"), "You must specify a resource")

    def test_add_needs_a_specific_pattern_type(self) -> None:
        self.assertUsage(acls(*ZK, "--add", "--allow-principal", "User:a", "--topic", "t",
                              "--resource-pattern-type", "match"), "not valid when adding acls")

    def test_operations(self) -> None:
        self.assertUsage(acls(*ZK, "--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"),
                         "--operation")
        self.assertUsage(acls(*ZK, "--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"),
                         "ResourceType GROUP only supports operations DELETE,DESCRIBE,READ")

    def test_convenience_flags(self) -> None:
        self.assertUsage(acls(*ZK, "--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"),
                         "--group")
        self.assertUsage(acls(*ZK, "--list", "--producer", "--topic", "t"), "--producer and --consumer")
        self.assertUsage(acls(*ZK, "--add", "--allow-principal", "User:a", "--idempotent", "--topic", "t"),
                         "--idempotent goes with --producer")


class CommandConfigTests(unittest.TestCase):
    def test_client_properties_become_the_security_config(self) -> None:
        from kafkatw.cli._common import read_security_config

        path = self.mktemp()
        with open(path, "w", encoding="utf-8") as f:
            f.write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    'username="admin" password="admin-secret";\n')
        security = read_security_config(path)
        self.assertEqual((security.security_protocol, security.sasl_mechanism, security.sasl_plain_username),
                         ("SASL_PLAINTEXT", "SCRAM-SHA-256", "admin"))
        self.assertIsNone(read_security_config(None))

    def test_unreadable_file(self) -> None:
        result = acls("--bootstrap-server", "127.0.0.1:1", "--command-config", self.mktemp(), "--list")
        self.assertEqual(result.exit_code, 2, result.output)
        self.assertIn("cannot read", result.output)
