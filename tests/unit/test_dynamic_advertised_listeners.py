"""
C{advertised.listeners} as a per-broker dynamic config (Kafka's
C{DynamicListenerConfig}, C{DynamicBrokerConfig.PerBrokerConfigs}): dynamic,
not read-only in DescribeConfigs, refused as the cluster default, validated
against the broker's listeners.  The re-registration and the metadata are
tested with real brokers in tests/integration/test_dynamic_advertised_listeners.py.
"""

from __future__ import annotations

from twisted.trial import unittest

from kafkatw.broker.config_helper import describe_broker_configs
from kafkatw.broker.listeners import ListenerConfigError, check_advertised_listeners
from kafkatw.config import (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, BrokerConfig,
                            is_dynamic_broker_config)


class DynamicAdvertisedListenersTests(unittest.TestCase):
    def test_advertised_listeners_is_dynamic_and_listeners_is_not(self) -> None:
        self.assertTrue(is_dynamic_broker_config("advertised.listeners"))
        self.assertFalse(is_dynamic_broker_config("listeners"))

    def test_per_broker_only(self) -> None:
        config = BrokerConfig({"broker.id": 0})
        skipped = config.set_dynamic(DYNAMIC_DEFAULT_BROKER_CONFIG, {"advertised.listeners": "PLAINTEXT://h:1"})
        self.assertIn("advertised.listeners", skipped)
        self.assertEqual(config["advertised.listeners"], [])
        self.assertEqual(config.set_dynamic(DYNAMIC_BROKER_CONFIG, {"advertised.listeners": "PLAINTEXT://h:1"}), {})
        self.assertEqual(config["advertised.listeners"], ["PLAINTEXT://h:1"])

    def test_checked_against_the_listeners(self) -> None:
        config = BrokerConfig({"broker.id": 0, "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"})
        self.assertEqual(check_advertised_listeners(config, ["PLAINTEXT://kafka-0.example:9092"]).advertised,
                         {"PLAINTEXT": ("kafka-0.example", 9092)})
        with self.assertRaises(ListenerConfigError):
            check_advertised_listeners(config, ["OTHER://h:1"])
        with self.assertRaises(ListenerConfigError):
            check_advertised_listeners(config, ["SSL://h:1"])  # without the inter-broker listener

    def test_describe_configs_says_it_is_not_read_only(self) -> None:
        config = BrokerConfig({"broker.id": 0})
        entries = {e["name"]: e for e in describe_broker_configs(config, True, ["advertised.listeners", "listeners"])}
        self.assertFalse(entries["advertised.listeners"]["read_only"])
        self.assertTrue(entries["listeners"]["read_only"])
