"""
C{kafkatw configs} against a real plaintext broker: broker configs (one
broker and the cluster default) through IncrementalAlterConfigs and
DescribeConfigs, topic configs described, users' SCRAM credentials through
the broker and straight in ZooKeeper.  (SASL listeners: tests/interop/test_sasl.py.)
"""

from __future__ import annotations

import subprocess
import sys

from twisted.trial import unittest

from kafkatw.testing import running_cluster


def configs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "configs", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


class ConfigsToolTests(unittest.TestCase):
    timeout = 180

    def test_brokers_topics_and_users(self) -> None:
        with running_cluster(1) as cluster:
            b = ["--bootstrap-server", cluster[0].bootstrap]
            done = configs(*b, "--entity-type", "brokers", "--entity-name", "0", "--alter", "--add-config",
                           "follower.replication.throttled.rate=1000000")
            self.assertEqual((done.returncode, done.stdout), (0, "Completed updating config for broker 0.\n"))
            done = configs(*b, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config",
                           "leader.replication.throttled.rate=2000000")
            self.assertEqual(done.stdout, "Completed updating default config for brokers in the cluster.\n")
            shown = configs(*b, "--broker", "0", "--describe", "--all")
            self.assertEqual(shown.returncode, 0, shown.stderr)
            lines = shown.stdout.splitlines()
            self.assertEqual(lines[0], "All configs for broker 0 are:")
            self.assertTrue(any(line.startswith("  follower.replication.throttled.rate=") for line in lines))
            self.assertIn("  sasl.jaas.config=null sensitive=true synonyms={DEFAULT_CONFIG:sasl.jaas.config=null}",
                          lines)
            done = configs(*b, "--broker", "0", "--alter", "--delete-config", "follower.replication.throttled.rate")
            self.assertEqual(done.returncode, 0, done.stderr)
            shown = configs(*b, "--entity-type", "topics", "--entity-name", "missing", "--describe")
            self.assertEqual(shown.returncode, 1)
            # Users: through the broker, then read back from ZooKeeper.
            zookeeper = cluster.zookeeper.connect_string
            done = configs(*b, "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
                           "SCRAM-SHA-512=[iterations=8192,password=alice-secret]")
            self.assertEqual(done.stdout, "Completed updating config for user alice.\n")
            shown = configs("--zookeeper", zookeeper, "--entity-type", "users", "--describe")
            self.assertEqual(shown.stdout, "SCRAM credential configs for user-principal 'alice' are "
                                           "SCRAM-SHA-512=iterations=8192\n")
            done = configs("--zookeeper", zookeeper, "--user", "alice", "--alter", "--delete-config", "SCRAM-SHA-512")
            self.assertEqual(done.returncode, 0, done.stderr)
            shown = configs(*b, "--entity-type", "users", "--describe")
            self.assertEqual((shown.returncode, shown.stdout), (0, ""))
