"""Tests of C{twistd kafkatw}'s options (kafkatw.tap) and the Kafka-named config."""

from __future__ import annotations

import os
import tempfile

from twisted.python import usage
from twisted.trial import unittest

from kafkatw.config import BrokerConfig, parse_properties, topic_log_config
from kafkatw.tap import Options


def parse(*args: str) -> Options:
    options = Options()
    options.parseOptions(list(args))
    return options


class OptionsTests(unittest.TestCase):
    def test_flags_map_to_kafka_keys(self) -> None:
        config = parse("--broker-id", "3", "--listeners", "tcp:9093:interface=127.0.0.1", "--log-dirs", "/a,/b",
                       "--zookeeper", "zk1:2181,zk2:2181/kafka").broker_config
        self.assertEqual(config["broker.id"], 3)
        self.assertEqual(config["listeners"], ["tcp:9093:interface=127.0.0.1"])
        self.assertEqual(config["log.dirs"], ["/a", "/b"])
        self.assertEqual(config["zookeeper.connect"], "zk1:2181,zk2:2181/kafka")

    def test_layering_defaults_file_flags_overrides(self) -> None:
        fd, path = tempfile.mkstemp(suffix=".properties")
        self.addCleanup(os.unlink, path)
        with os.fdopen(fd, "w") as f:
            f.write("# a stock server.properties\nbroker.id=7\nnum.partitions=4\nlog.retention.hours=1\n"
                    "num.network.threads=3\n")
        options = parse("--config", path, "--broker-id", "8", "--override", "num.partitions=6")
        config = options.broker_config
        self.assertEqual((config["broker.id"], config["num.partitions"]), (8, 6))
        self.assertEqual(config["log.retention.ms"], 3600000)
        self.assertEqual(config["log.segment.bytes"], 1073741824)  # Kafka's default
        self.assertEqual(options.ignored_keys, ["num.network.threads"])

    def test_bad_options_fail_fast(self) -> None:
        for args in (
            ["--broker-id", "x"],
            ["--broker-id", "-1"],
            ["--override", "no.such.key=1"],
            ["--override", "novalue"],
            ["--override", "num.partitions=many"],
            ["--listeners", "SSL://127.0.0.1:9093"],
            ["--config", "/nonexistent/server.properties"],
            ["--log-dirs", ""],
        ):
            self.assertRaises(usage.UsageError, parse, *args)

    def test_kafka_listener_syntax(self) -> None:
        from kafkatw.broker.server import listener_endpoint

        self.assertEqual(listener_endpoint("PLAINTEXT://127.0.0.1:9092"), "tcp:9092:interface=127.0.0.1")
        self.assertEqual(listener_endpoint("PLAINTEXT://:9092"), "tcp:9092")
        self.assertEqual(listener_endpoint("ssl:9093:privateKey=k.pem"), "ssl:9093:privateKey=k.pem")


class ConfigTests(unittest.TestCase):
    def test_properties_syntax(self) -> None:
        text = "a=1\n  b : 2\n# c=3\n! d=4\ne = x\\\n  y\nf\n"
        self.assertEqual(parse_properties(text), {"a": "1", "b": "2", "e": "xy", "f": ""})

    def test_topic_overrides(self) -> None:
        broker = BrokerConfig({"log.retention.ms": "1000"})
        effective = topic_log_config(broker, {"segment.bytes": "4096"})
        self.assertEqual((effective["retention.ms"], effective["segment.bytes"]), (1000, 4096))
        self.assertRaises(ValueError, topic_log_config, broker, {"cleanup.policy": "compact"})
        self.assertRaises(ValueError, topic_log_config, broker, {"unknown.key": "1"})
