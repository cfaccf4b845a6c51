"""
Listener configuration (issue 11): names, security protocols, advertised
addresses, the inter-broker listener, and where they show (registration,
Metadata, FindCoordinator, DescribeCluster).
"""

from __future__ import annotations

import json
from twisted.trial import unittest

from kafkatw.broker.listeners import (
    DEFAULT_PROTOCOL_MAP,
    ListenerConfigError,
    listener_config,
    parse_listener,
    parse_protocol_map,
)
from kafkatw.broker.metadata_cache import BrokerEndpoint
from kafkatw.broker.request_context import ConnectionContext
from kafkatw.config import BrokerConfig
from kafkatw.protocol.messages import decode_response, encode_request, parse_request_header
from kafkatw.zookeeper.zk_data import decode_broker, encode_broker

from .test_broker import BrokerHarness


def config(**values: str) -> BrokerConfig:
    return BrokerConfig({k.replace("_", "."): v for k, v in values.items()})


class ParseTests(unittest.TestCase):
    def test_kafka_listeners_with_the_default_map(self) -> None:
        c = listener_config(config(listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,"
                                             "SASL_SSL://127.0.0.1:9094,SASL_PLAINTEXT://:9095"))
        self.assertEqual([(x.name, x.security_protocol, x.host, x.port, x.endpoint) for x in c.listeners], [
            ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092, "tcp:9092:interface=127.0.0.1"),
            ("SSL", "SSL", "127.0.0.1", 9093, "tcp:9093:interface=127.0.0.1"),
            ("SASL_SSL", "SASL_SSL", "127.0.0.1", 9094, "tcp:9094:interface=127.0.0.1"),
            ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "", 9095, "tcp:9095"),
        ])
        self.assertEqual(c.inter_broker_listener, "PLAINTEXT")
        self.assertEqual(c.protocol_map, DEFAULT_PROTOCOL_MAP)

    def test_named_listeners(self) -> None:
        c = listener_config(BrokerConfig({
            "listeners": "internal://127.0.0.1:9092,EXTERNAL://[::1]:9093",
            "listener.security.protocol.map": "INTERNAL:SASL_SSL, EXTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "advertised.listeners": "INTERNAL://broker0.internal:9092,EXTERNAL://kafka.example.com:19093",
        }))
        self.assertEqual([(x.name, x.security_protocol, x.host) for x in c.listeners],
                         [("INTERNAL", "SASL_SSL", "127.0.0.1"), ("EXTERNAL", "SSL", "::1")])
        self.assertEqual(c.listeners[1].endpoint, "tcp:9093:interface=\\:\\:1")
        self.assertEqual(c.advertised, {"INTERNAL": ("broker0.internal", 9092),
                                        "EXTERNAL": ("kafka.example.com", 19093)})
        self.assertEqual((c.inter_broker_listener, c.inter_broker_protocol), ("INTERNAL", "SASL_SSL"))

    def test_security_inter_broker_protocol_names_the_listener(self) -> None:
        c = listener_config(config(listeners="PLAINTEXT://:1,SSL://:2", security_inter_broker_protocol="SSL"))
        self.assertEqual(c.inter_broker_listener, "SSL")

    def test_one_listener_is_the_inter_broker_listener(self) -> None:
        self.assertEqual(listener_config(config(listeners="SSL://127.0.0.1:9093")).inter_broker_listener, "SSL")

    def test_twisted_endpoint_strings_are_plaintext(self) -> None:
        c = listener_config(config(listeners="tcp:9092:interface=127.0.0.1"))
        self.assertEqual([(x.name, x.security_protocol, x.host, x.port, x.endpoint) for x in c.listeners],
                         [("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092, "tcp:9092:interface=127.0.0.1")])

    def test_legacy_advertised_host_port_is_the_first_listener(self) -> None:
        c = listener_config(config(listeners="PLAINTEXT://:9092", advertised_listeners="kafka.example.com:9092"))
        self.assertEqual(c.advertised, {"PLAINTEXT": ("kafka.example.com", 9092)})

    def test_errors_are_one_line_naming_the_setting(self) -> None:
        for values, says in [
            ({"listeners": "INTERNAL://:9092"}, "no security protocol for listener INTERNAL"),
            ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "different name"),
            ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "different port"),
            ({"listeners": "PLAINTEXT://:99999"}, "0..65535"),
            ({"listeners": "PLAINTEXT//:9092"}, "is not NAME://host:port"),
            ({"listeners": "ssl:9093:privateKey=k.pem"}, "SSL://host:port"),
            ({"listeners": "PLAINTEXT://:1,SSL://:2", "inter.broker.listener.name": "SSL",
              "security.inter.broker.protocol": "SSL"}, "only one of"),
            ({"listeners": "SSL://:1,SASL_SSL://:2"}, "PLAINTEXT is not a listener"),
            ({"listeners": "PLAINTEXT://:1", "inter.broker.listener.name": "INTERNAL"}, "INTERNAL is not a listener"),
            ({"listeners": "PLAINTEXT://:1", "security.inter.broker.protocol": "TLS"}, "is not one of"),
            ({"listeners": "PLAINTEXT://:1", "listener.security.protocol.map": "PLAINTEXT:TLS"}, "is not one of"),
            ({"listeners": "PLAINTEXT://:1", "listener.security.protocol.map": "PLAINTEXT"}, "NAME:PROTOCOL"),
            ({"listeners": "PLAINTEXT://:1", "advertised.listeners": "SSL://h:2"}, "SSL is not a listener"),
            ({"listeners": "PLAINTEXT://:1,SSL://:2", "advertised.listeners": "SSL://h:2"},
             "must include the inter-broker listener PLAINTEXT"),
        ]:
            with self.assertRaises(ListenerConfigError) as raised:
                listener_config(BrokerConfig(values))
            self.assertIn(says, str(raised.exception), values)
            self.assertNotIn("\n", str(raised.exception))

    def test_protocol_map_and_single_entries(self) -> None:
        self.assertEqual(parse_protocol_map(""), DEFAULT_PROTOCOL_MAP)
        self.assertEqual(parse_protocol_map("a:ssl"), {"A": "SSL"})
        self.assertEqual(parse_listener("ssl://localhost:0", DEFAULT_PROTOCOL_MAP).port, 0)

    def test_per_listener_ssl_keys(self) -> None:
        c = BrokerConfig({"ssl.client.auth": "none", "listener.name.INTERNAL.ssl.client.auth": "required"})
        self.assertEqual(c.for_listener("INTERNAL", "ssl.client.auth"), "required")
        self.assertEqual(c.for_listener("EXTERNAL", "ssl.client.auth"), "none")
        self.assertTrue(BrokerConfig.knows("listener.name.internal.ssl.keystore.location"))
        self.assertFalse(BrokerConfig.knows("listener.name.internal.no.such.key"))
        with self.assertRaises(ValueError):
            BrokerConfig({"listener.name.internal.ssl.nonsense": "x"})


class RegistrationTests(unittest.TestCase):
    def test_every_listener_is_registered_with_its_protocol(self) -> None:
        data = encode_broker("127.0.0.1", 9092, endpoints=[("INTERNAL", "10.0.0.1", 9092),
                                                                    ("EXTERNAL", "kafka.example.com", 9093)],
                                      protocol_map={"INTERNAL": "SSL", "EXTERNAL": "SASL_SSL"}, timestamp_ms="1")
        body = json.loads(data)
        self.assertEqual(body["endpoints"], ["INTERNAL://10.0.0.1:9092", "EXTERNAL://kafka.example.com:9093"])
        self.assertEqual(body["listener_security_protocol_map"], {"INTERNAL": "SSL", "EXTERNAL": "SASL_SSL"})
        self.assertEqual((body["host"], body["port"]), (None, -1))  # Kafka's: no PLAINTEXT listener
        info = decode_broker(3, data)
        self.assertEqual((info.host, info.port), ("10.0.0.1", 9092))
        self.assertEqual(info.address("EXTERNAL"), ("kafka.example.com", 9093))
        self.assertIsNone(info.address("PLAINTEXT"))
        self.assertEqual(dict(info.protocol_map), {"INTERNAL": "SSL", "EXTERNAL": "SASL_SSL"})

    def test_plaintext_default_is_unchanged(self) -> None:
        body = json.loads(encode_broker("h", 9092, timestamp_ms="1"))
        self.assertEqual((body["host"], body["port"], body["endpoints"], body["listener_security_protocol_map"]),
                         ("h", 9092, ["PLAINTEXT://h:9092"], {"PLAINTEXT": "PLAINTEXT"}))
        data = encode_broker("h", 9092, endpoints=[("PLAINTEXT", "h", 9092), ("SSL", "::1", 9093)])
        self.assertEqual(json.loads(data)["endpoints"][1], "SSL://[::1]:9093")
        self.assertEqual(decode_broker(1, data).address("SSL"), ("::1", 9093))


class ClientListenerTests(unittest.TestCase):
    """Metadata, DescribeCluster and FindCoordinator answer with the listener the client came through."""

    def setUp(self) -> None:
        self.h = BrokerHarness(self)
        endpoints = lambda i: (("PLAINTEXT", "127.0.0.1", 9092 + 10 * i), ("SSL", f"b{i}.example", 9093 + 10 * i))  # noqa: E731
        self.h.metadata.set_brokers({
            0: BrokerEndpoint(0, "127.0.0.1", 9092, None, endpoints(0)),
            1: BrokerEndpoint(1, "127.0.0.1", 9102, None, endpoints(1)),
            2: BrokerEndpoint(2, "127.0.0.1", 9112, None, (("PLAINTEXT", "127.0.0.1", 9112),)),
        })

    def call(self, listener: str, api_key: int, version: int, body: dict) -> object:
        frame = encode_request(api_key, version, 1, "test", body)
        result = self.h.apis.handle(parse_request_header(frame), frame, ConnectionContext(listener, listener))
        if not isinstance(result, bytes):
            result = self.successResultOf(result)
        return decode_response(api_key, version, result)[1]

    def test_metadata(self) -> None:
        body = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        ssl = self.call("SSL", 3, 9, body)
        self.assertEqual([(b.node_id, b.host, b.port) for b in ssl.brokers],
                         [(0, "b0.example", 9093), (1, "b1.example", 9103)])  # broker 2 has no SSL listener
        plain = self.call("PLAINTEXT", 3, 9, body)
        self.assertEqual([(b.node_id, b.port) for b in plain.brokers], [(0, 9092), (1, 9102), (2, 9112)])

    def test_describe_cluster(self) -> None:
        response = self.call("SSL", 60, 0, {"include_cluster_authorized_operations": False})
        self.assertEqual([(b.broker_id, b.host, b.port) for b in response.brokers],
                         [(0, "b0.example", 9093), (1, "b1.example", 9103)])

    def test_find_coordinator(self) -> None:
        coordinator = self.h.apis.group_coordinator.coordinator("g")
        response = self.call("SSL", 10, 3, {"key": "g", "key_type": 0})
        if coordinator == 2:
            self.assertNotEqual(response.error_code, 0)
        else:
            self.assertEqual((response.node_id, response.host), (coordinator, f"b{coordinator}.example"))


class SensitiveConfigTests(unittest.TestCase):
    def test_describe_configs_hides_passwords(self) -> None:
        h = BrokerHarness(self, **{"ssl.key.password": "key-secret", "ssl.keystore.location": "/etc/k.pem"})
        response = h.call(32, 1, {"resources": [{"resource_type": 4, "resource_name": "0",
                                                 "configuration_keys": None}], "include_synonyms": False})
        configs = {c.name: c for c in response.results[0].configs}
        self.assertEqual((configs["ssl.key.password"].value, configs["ssl.key.password"].is_sensitive), (None, True))
        self.assertEqual(configs["ssl.keystore.location"].value, "/etc/k.pem")
        self.assertNotIn(b"key-secret", h.request(32, 1, {"resources": [{"resource_type": 4, "resource_name": "0",
                                                                          "configuration_keys": None}],
                                                          "include_synonyms": False}))


class ContextTests(unittest.TestCase):
    """Each connection's context carries its listener and security protocol."""

    def test_plaintext_and_sasl_listeners(self) -> None:
        from twisted.internet.address import IPv4Address
        from twisted.internet.testing import StringTransport

        from kafkatw.broker.network import KafkaServerFactory

        class Apis:
            def connection_opened(self, connection: object) -> None:
                pass

        for name, protocol in [("PLAINTEXT", "PLAINTEXT"), ("CLIENTS", "SASL_PLAINTEXT")]:
            connection = KafkaServerFactory(Apis(), 1024, name, protocol).buildProtocol(None)
            connection.makeConnection(StringTransport(peerAddress=IPv4Address("TCP", "10.1.2.3", 5555)))
            context = connection.context
            self.assertEqual((context.listener_name, context.security_protocol, context.client_host,
                              context.client_port, context.principal),
                             (name, protocol, "10.1.2.3", 5555, "User:ANONYMOUS"))
            self.assertIsNone(connection.tls)


class InterBrokerSecurityTests(unittest.TestCase):
    def test_the_inter_broker_listener_settings(self) -> None:
        from twisted.internet.testing import MemoryReactorClock

        from kafkatw.broker.server import KafkaServer

        server = KafkaServer(BrokerConfig({
            "listeners": "EXTERNAL://:9092,INTERNAL://:9093",
            "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,INTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "ssl.truststore.location": "/etc/ca.pem",
            "listener.name.internal.ssl.keystore.location": "/etc/broker.pem",
            "ssl.key.password": "key-secret",
            "ssl.endpoint.identification.algorithm": "",
        }), MemoryReactorClock())
        security = server.inter_broker_security()
        self.assertEqual((security.security_protocol, security.ssl_cafile, security.ssl_certfile,
                          security.ssl_password, security.ssl_check_hostname),
                         ("SSL", "/etc/ca.pem", "/etc/broker.pem", "key-secret", False))
        self.assertNotIn("key-secret", repr(security))
        plain = KafkaServer(BrokerConfig({"listeners": "PLAINTEXT://:9092,SSL://:9093"}), MemoryReactorClock())
        self.assertEqual(plain.inter_broker_security().security_protocol, "PLAINTEXT")
