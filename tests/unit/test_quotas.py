"""
Unit tests of client quotas (kafkatw/broker/quota_manager.py,
kafkatw/broker/quota_apis.py): Kafka's sampled rate and throttle arithmetic
on a Clock, the precedence of quota entities, muting a throttled connection
over a StringTransport (KIP-219), and DescribeClientQuotas/AlterClientQuotas
on the fake ZooKeeper.
"""

from __future__ import annotations

import struct

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial import unittest

from kafkatw.broker.network import KafkaConnection
from kafkatw.broker.quota_manager import DEFAULT, ClientQuotas, QuotaEntity, SampledRate
from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.messages import decode_response, encode_request

from .test_broker import BrokerHarness


class SampledRateTests(unittest.TestCase):
    def test_young_rate_is_over_samples_minus_one_windows(self) -> None:
        rate = SampledRate(11, 1000)
        rate.record(1100, 0)
        self.assertEqual(rate.window_size_ms(0), 10_000)
        self.assertEqual(rate.measure(0), 110.0)

    def test_window_grows_past_the_minimum_then_old_samples_expire(self) -> None:
        rate = SampledRate(11, 1000)
        for second in range(15):
            rate.record(100, second * 1000)
        # 11 samples (4..14 s) of 100 bytes; the oldest began at 4 s.
        self.assertEqual(rate.window_size_ms(14_000), 10_000)
        self.assertEqual(rate.measure(14_000), 110.0)
        self.assertEqual(rate.measure(30_000), 0.0)

    def test_samples_restart_after_a_pause(self) -> None:
        rate = SampledRate(3, 1000)
        rate.record(300, 0)
        rate.record(300, 10_000)
        self.assertEqual(rate.measure(10_000), 150.0)  # one live sample over the 2-window minimum


class ThrottleTests(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.quotas = ClientQuotas(self.clock, samples=11, window_seconds=1)
        self.quotas.update(QuotaEntity(None, "slow"), {"producer_byte_rate": "100"})

    def test_within_quota_is_not_throttled(self) -> None:
        self.assertEqual(self.quotas.produce.record_and_get_throttle_time_ms("A", "slow", 1000, 0), 0)

    def test_throttle_is_excess_over_quota_times_window(self) -> None:
        # 1210 bytes over 10 s: 121 B/s, 21% over 100 B/s: 0.21 * 10 s.
        self.assertEqual(self.quotas.produce.record_and_get_throttle_time_ms("A", "slow", 1210, 0), 2100)

    def test_throttle_is_bounded_by_the_whole_window(self) -> None:
        self.assertEqual(self.quotas.produce.record_and_get_throttle_time_ms("A", "slow", 100_000, 0), 11_000)

    def test_rate_recovers_as_the_clock_moves(self) -> None:
        produce = self.quotas.produce
        self.assertEqual(produce.record_and_get_throttle_time_ms("A", "slow", 1500, 0), 5000)
        # The first sample counts until the whole window (11 s) has passed it.
        self.clock.advance(6)
        self.assertEqual(produce.record_and_get_throttle_time_ms("A", "slow", 0, 6000), 5000)
        self.clock.advance(5)
        self.assertEqual(produce.record_and_get_throttle_time_ms("A", "slow", 1, int(self.clock.seconds() * 1000)), 0)

    def test_unlimited_clients_have_no_sensor(self) -> None:
        self.assertEqual(self.quotas.produce.record_and_get_throttle_time_ms("A", "fast", 10 ** 9, 0), 0)
        self.assertEqual(self.quotas.produce.sensors, {})

    def test_fetch_unrecord_takes_bytes_back(self) -> None:
        self.quotas.update(QuotaEntity(None, "slow"), {"consumer_byte_rate": "100"})
        fetch = self.quotas.fetch
        self.assertGreater(fetch.record_and_get_throttle_time_ms("A", "slow", 5000, 0), 0)
        fetch.unrecord("A", "slow", 5000, 0)
        self.assertEqual(fetch.record_and_get_throttle_time_ms("A", "slow", 10, 0), 0)

    def test_request_percentage_is_handler_time_over_the_window(self) -> None:
        self.quotas.update(QuotaEntity(None, "slow"), {"request_percentage": "1"})
        # 1% of 10 s is 100 ms of handling: 200 ms (20 percent-seconds) is 100% over.
        self.assertEqual(self.quotas.request.record_and_get_throttle_time_ms("A", "slow", 20.0, 0), 10_000)

    def test_changing_a_quota_keeps_the_rate(self) -> None:
        produce = self.quotas.produce
        produce.record_and_get_throttle_time_ms("A", "slow", 1000, 0)
        self.quotas.update(QuotaEntity(None, "slow"), {"producer_byte_rate": "50"})
        self.assertEqual(produce.record_and_get_throttle_time_ms("A", "slow", 0, 0), 10_000)
        self.quotas.entity_changed("clients", "slow", {})
        self.assertEqual(produce.record_and_get_throttle_time_ms("A", "slow", 10 ** 6, 0), 0)


class PrecedenceTests(unittest.TestCase):
    LEVELS = [
        (QuotaEntity("u", "c"), ("u", "c")),
        (QuotaEntity("u", DEFAULT), ("u", "c")),
        (QuotaEntity("u", None), ("u", "")),
        (QuotaEntity(DEFAULT, "c"), ("u", "c")),
        (QuotaEntity(DEFAULT, DEFAULT), ("u", "c")),
        (QuotaEntity(DEFAULT, None), ("u", "")),
        (QuotaEntity(None, "c"), ("", "c")),
        (QuotaEntity(None, DEFAULT), ("", "c")),
    ]

    def test_most_specific_entity_wins_in_kafkas_order(self) -> None:
        quotas = ClientQuotas(Clock())
        for rank, (entity, _) in enumerate(self.LEVELS):
            quotas.update(entity, {"producer_byte_rate": str(1000 + rank)})
        for rank, (entity, tags) in enumerate(self.LEVELS):
            self.assertEqual(quotas.produce.quota_for("u", "c"), (1000 + rank, tags), entity)
            quotas.update(entity, {})
        self.assertEqual(quotas.produce.quota_for("u", "c"), (None, ("", "")))

    def test_other_keys_of_a_user_are_ignored(self) -> None:
        quotas = ClientQuotas(Clock())
        quotas.entity_changed("users", "alice", {"SCRAM-SHA-256": "salt=..", "consumer_byte_rate": "2048"})
        self.assertEqual(quotas.fetch.quota_for("alice", "any"), (2048.0, ("alice", "")))
        self.assertEqual(quotas.produce.quota_for("alice", "any"), (None, ("", "")))

    def test_entity_paths_round_trip(self) -> None:
        for entity, path in [
            (QuotaEntity("alice", None), ("users", "alice")),
            (QuotaEntity("a b", "c*"), ("users", "a%20b/clients/c%2A")),
            (QuotaEntity(DEFAULT, DEFAULT), ("users", "<default>/clients/<default>")),
            (QuotaEntity(None, DEFAULT), ("clients", "<default>")),
        ]:
            self.assertEqual(entity.entity_path(), "/".join(path))
            self.assertEqual(QuotaEntity.from_entity_path(*path), entity)


class MuteTests(unittest.TestCase):
    """A throttled connection stops reading for the throttle time, then reads again (KIP-219)."""

    def connect(self) -> tuple[BrokerHarness, KafkaConnection, StringTransport]:
        h = BrokerHarness(self)
        connection = KafkaConnection(h.apis, h.config["socket.request.max.bytes"])
        transport = StringTransport()
        connection.makeConnection(transport)
        return h, connection, transport

    def test_mute_and_unmute_on_the_clock(self) -> None:
        h, connection, transport = self.connect()
        connection.throttle(500)
        self.assertEqual(transport.producerState, "paused")
        connection.throttle(100)  # shorter: no change
        h.clock.advance(0.4)
        self.assertEqual(transport.producerState, "paused")
        connection.throttle(300)  # longer: extended to 0.7 s
        h.clock.advance(0.2)
        self.assertEqual(transport.producerState, "paused")
        h.clock.advance(0.1)
        self.assertEqual(transport.producerState, "producing")
        self.assertFalse(connection.muted)

    def test_connection_lost_cancels_the_unmute(self) -> None:
        h, connection, transport = self.connect()
        connection.throttle(500)
        connection.connectionLost(None)
        self.assertEqual(h.clock.getDelayedCalls(), [c for c in h.clock.getDelayedCalls() if c.active()])
        self.assertFalse(connection.muted)

    def test_produce_over_quota_answers_with_throttle_and_mutes(self) -> None:
        h, connection, transport = self.connect()
        h.create_topic("t")
        h.apis.quotas.update(QuotaEntity(None, "slow"), {"producer_byte_rate": "100"})
        records = build_batch([(None, b"x" * 3000)])
        frame = encode_request(0, 9, 7, "slow", {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": records}]}]})
        connection.dataReceived(struct.pack(">i", len(frame)) + frame)
        data = transport.value()
        _, response = decode_response(0, 9, data[4:])
        self.assertEqual(response.responses[0].partition_responses[0].error_code, ErrorCode.none)
        throttle_ms = int(response.throttle_time.total_seconds() * 1000)
        self.assertEqual(throttle_ms, 11_000)  # bounded: the excess is far beyond one window
        self.assertEqual(transport.producerState, "paused")
        h.clock.advance(11)
        self.assertEqual(transport.producerState, "producing")

    def test_unthrottled_client_is_not_muted(self) -> None:
        h, connection, transport = self.connect()
        h.create_topic("t")
        h.apis.quotas.update(QuotaEntity(None, "slow"), {"producer_byte_rate": "100"})
        records = build_batch([(None, b"x" * 3000)])
        frame = encode_request(0, 9, 7, "fast", {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": records}]}]})
        connection.dataReceived(struct.pack(">i", len(frame)) + frame)
        _, response = decode_response(0, 9, transport.value()[4:])
        self.assertEqual(response.throttle_time.total_seconds(), 0)
        self.assertEqual(transport.producerState, "producing")

    def test_throttled_fetch_is_empty_and_carries_the_throttle(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        h.produce("t", 0, build_batch([(None, b"y" * 5000)]))
        h.apis.quotas.update(QuotaEntity(None, "test"), {"consumer_byte_rate": "100"})
        response = h.call(1, 12, h.fetch_request("t", 0, 0))
        self.assertEqual(response.responses, ())
        self.assertGreater(response.throttle_time.total_seconds(), 0)
        # A follower's fetch is replication: no client quota.
        response = h.call(1, 12, h.fetch_request("t", 0, 0, replica_id=1))
        self.assertEqual(response.throttle_time.total_seconds(), 0)
        self.assertEqual(len(response.responses), 1)

    def test_request_percentage_sets_throttle_time_of_other_responses(self) -> None:
        h = BrokerHarness(self)
        h.apis.quotas.update(QuotaEntity(None, "test"), {"request_percentage": "0.01"})
        ticks = iter(range(0, 1000))
        h.apis.handler_timer = lambda: next(ticks) * 0.05  # each handler takes 50 ms
        response = h.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
        self.assertEqual(response.throttle_time.total_seconds(), 11.0)


class ClientQuotaApiTests(unittest.TestCase):
    def alter(self, h: BrokerHarness, entity: list, ops: list, validate_only: bool = False) -> object:
        return h.call(49, 1, {"entries": [{"entity": entity, "ops": ops}], "validate_only": validate_only})

    def describe(self, h: BrokerHarness, components: list, strict: bool = False) -> object:
        return h.call(48, 1, {"components": components, "strict": strict})

    def test_alter_then_describe_with_filters(self) -> None:
        h = BrokerHarness(self)
        user_client = [{"entity_type": "user", "entity_name": "alice"}, {"entity_type": "client-id",
                                                                          "entity_name": "c1"}]
        response = self.alter(h, user_client, [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}])
        self.assertEqual(response.entries[0].error_code, ErrorCode.none)
        self.alter(h, [{"entity_type": "client-id", "entity_name": None}],
                   [{"key": "consumer_byte_rate", "value": 2048.0, "remove": False}])
        stored = self.successResultOf(h.registry.get_entity_config("users", "alice/clients/c1"))
        self.assertEqual(stored, {"producer_byte_rate": "1024"})
        everything = self.describe(h, [])
        self.assertEqual(len(everything.entries), 2)
        only_default = self.describe(h, [{"entity_type": "client-id", "match_type": 1, "match": None}], strict=True)
        self.assertEqual([(e.entity[0].entity_type, e.entity[0].entity_name, e.values[0].key, e.values[0].value)
                          for e in only_default.entries], [("client-id", None, "consumer_byte_rate", 2048.0)])
        alice = self.describe(h, [{"entity_type": "user", "match_type": 0, "match": "alice"}])
        self.assertEqual(len(alice.entries), 1)
        self.assertEqual(len(self.describe(h, [{"entity_type": "user", "match_type": 0, "match": "alice"}],
                                           strict=True).entries), 0)
        self.alter(h, user_client, [{"key": "producer_byte_rate", "value": 0.0, "remove": True}])
        self.assertEqual(len(self.describe(h, []).entries), 1)

    def test_the_answer_waits_until_this_broker_applied_the_quota(self) -> None:
        """
        AlterClientQuotas answers only once this broker has applied what it
        wrote (C{config_written}, as AlterConfigs): a client throttled by
        the new quota is throttled from its next request on, not from when
        ZooKeeper's change notification comes back.
        """
        h = BrokerHarness(self)
        applied: list[defer.Deferred] = []

        def config_written() -> defer.Deferred:
            applied.append(defer.Deferred())
            return applied[-1]

        h.admin.config_written = config_written
        result = h.request(49, 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "c1"}],
                                                "ops": [{"key": "producer_byte_rate", "value": 1024.0,
                                                         "remove": False}]}], "validate_only": False})
        self.assertEqual(len(applied), 1)
        self.assertNoResult(result)
        applied[0].callback(None)
        self.assertEqual(h.decode(49, 1, self.successResultOf(result)).entries[0].error_code, ErrorCode.none)
        # a validate-only request writes nothing, so there is nothing to wait for
        self.successResultOf(h.request(49, 1, {"entries": [{"entity": [{"entity_type": "client-id",
                                                                         "entity_name": "c2"}],
                                                             "ops": [{"key": "producer_byte_rate", "value": 1.0,
                                                                      "remove": False}]}],
                                                "validate_only": True}))
        self.assertEqual(len(applied), 1)

    def test_invalid_alterations(self) -> None:
        h = BrokerHarness(self)
        client = [{"entity_type": "client-id", "entity_name": "c"}]
        for entity, op in [
            (client, {"key": "bogus", "value": 1.0, "remove": False}),
            (client, {"key": "producer_byte_rate", "value": 1.5, "remove": False}),
            (client, {"key": "producer_byte_rate", "value": -1.0, "remove": False}),
            ([{"entity_type": "ip", "entity_name": "1.2.3.4"}], {"key": "producer_byte_rate", "value": 1.0,
                                                                 "remove": False}),
        ]:
            response = self.alter(h, entity, [op])
            self.assertEqual(response.entries[0].error_code, ErrorCode.invalid_request, op)
        self.assertEqual(self.describe(h, []).entries, ())

    def test_validate_only_writes_nothing(self) -> None:
        h = BrokerHarness(self)
        response = self.alter(h, [{"entity_type": "user", "entity_name": None}],
                              [{"key": "request_percentage", "value": 50.0, "remove": False}], validate_only=True)
        self.assertEqual(response.entries[0].error_code, ErrorCode.none)
        self.assertEqual(self.describe(h, []).entries, ())


class ConfigsCommandQuotaTests(unittest.TestCase):
    """C{kafkatw configs} quota forms: entity pairing and usage errors (no broker needed)."""

    def invoke(self, *args: str) -> object:
        from click.testing import CliRunner

        from kafkatw.cli.main import main

        return CliRunner().invoke(main, ["configs", *args], prog_name="kafkatw")

    def test_entity_pairing(self) -> None:
        import click

        from kafkatw.cli.configs import quota_entity

        self.assertEqual(quota_entity(["users", "clients"], ["alice", ""]), (("user", "alice"), ("client-id", None)))
        self.assertEqual(quota_entity(["clients", "users"], ["c", "u"]), (("user", "u"), ("client-id", "c")))
        self.assertEqual(quota_entity(["clients"], [""]), (("client-id", None),))
        self.assertRaises(click.UsageError, quota_entity, ["users", "topics"], ["a", "t"])
        self.assertRaises(click.UsageError, quota_entity, ["users", "clients"], ["a"])

    def test_usage_errors(self) -> None:
        b = ["--bootstrap-server", "127.0.0.1:1"]
        for args in [
            [*b, "--entity-type", "clients", "--entity-name", "c", "--alter", "--add-config", "bogus=1"],
            [*b, "--entity-type", "clients", "--entity-name", "c", "--alter", "--add-config", "producer_byte_rate=x"],
            [*b, "--entity-type", "clients", "--entity-name", "c", "--alter"],
            [*b, "--entity-type", "users", "--entity-name", "u", "--entity-type", "clients", "--alter",
             "--add-config", "producer_byte_rate=1"],
            ["--zookeeper", "127.0.0.1:1", "--entity-type", "clients", "--entity-default", "--describe"],
        ]:
            result = self.invoke(*args)
            self.assertEqual(result.exit_code, 2, (args, result.output))


class QuotaMetricsTests(unittest.TestCase):
    def test_rates_and_throttle_times_under_kafkas_names(self) -> None:
        from types import SimpleNamespace

        from prometheus_client import generate_latest

        from kafkatw.broker.metrics import metrics_registry

        quotas = ClientQuotas(Clock())
        quotas.update(QuotaEntity("alice", None), {"producer_byte_rate": "100"})
        quotas.produce.record_and_get_throttle_time_ms("alice", "c1", 1210, 0)
        apis = SimpleNamespace(messages_in=0, bytes_in=0, bytes_out=0, failed_produce_requests=0,
                               failed_fetch_requests=0, request_counts={}, connections=set(), quotas=quotas)
        text = generate_latest(metrics_registry(SimpleNamespace(apis=apis, log_manager=None))).decode()
        self.assertIn('kafka_server_produce_byte_rate{client_id="",user="alice"} 121.0', text)
        self.assertIn('kafka_server_produce_throttle_time_ms_total{client_id="",user="alice"} 2100.0', text)


class PipelinedMuteTests(unittest.TestCase):
    def test_requests_behind_a_throttled_one_wait_until_unmuted(self) -> None:
        h = BrokerHarness(self)
        connection = KafkaConnection(h.apis, h.config["socket.request.max.bytes"])
        transport = StringTransport()
        connection.makeConnection(transport)
        h.create_topic("t")
        h.apis.quotas.update(QuotaEntity(None, "slow"), {"producer_byte_rate": "1000"})
        frames = b""
        for correlation_id in (1, 2):
            frame = encode_request(0, 9, correlation_id, "slow", {"acks": 1, "timeout": 1000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": build_batch([(None, b"x" * 10500)])}]}]})
            frames += struct.pack(">i", len(frame)) + frame
        connection.dataReceived(frames)
        first = transport.value()
        self.assertEqual(struct.unpack_from(">i", first, 4)[0], 1)
        self.assertEqual(len(first), 4 + struct.unpack_from(">i", first)[0])  # only the first answer
        _, response = decode_response(0, 9, first[4:])
        throttle_s = response.throttle_time.total_seconds()
        self.assertGreater(throttle_s, 0)
        transport.clear()
        h.clock.advance(throttle_s)
        self.assertEqual(struct.unpack_from(">i", transport.value(), 4)[0], 2)


class FetchBoundTests(unittest.TestCase):
    def test_fetch_size_is_bounded_by_the_quota_window(self) -> None:
        h = BrokerHarness(self)
        h.create_topic("t")
        for _ in range(3):
            h.produce("t", 0, build_batch([(None, b"z" * 6000)]))
        unbounded = h.fetch("t", 0, 0)
        # 1000 B/s over quota.window.num - 1 = 10 windows: 10,000 bytes, so one 6 kB batch.
        h.apis.quotas.update(QuotaEntity(None, "test"), {"consumer_byte_rate": "1000"})
        bounded = h.fetch("t", 0, 0)
        self.assertGreater(len(unbounded.records), 3 * 6000)
        self.assertLess(len(bounded.records), 7000)
        self.assertGreater(len(bounded.records), 6000)
