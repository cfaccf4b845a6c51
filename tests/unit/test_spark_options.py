"""
Tests of the kafkatw Spark source's option parsing and offset arithmetic
(kafkatw/spark/_options.py): pure functions, no Spark session, no sockets.
"""

from __future__ import annotations

from twisted.trial import unittest

from twisted.internet.task import Clock

try:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
except ImportError:  # pragma: no cover - pyspark (the spark extra) is not installed
    parse_options = None
else:
    from kafkatw.client import blocking
    from kafkatw.spark import _source
    from kafkatw.spark._options import (
        DEFAULT_MAX_TRIGGER_DELAY_MS, EARLIEST, LATEST, TriggerDelay, parse_options, rate_limit, split_ranges,
    )

B = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


class OptionsTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        if parse_options is None:
            raise unittest.SkipTest("pyspark is not installed")

    def test_defaults(self) -> None:
        batch = parse_options({**B, "subscribe": "a, b"}, streaming=False)
        self.assertEqual(batch.subscribe, ("a", "b"))
        self.assertEqual((batch.starting.kind, batch.ending.kind), ("earliest", "latest"))
        self.assertTrue(batch.fail_on_data_loss)
        self.assertFalse(batch.include_headers)
        stream = parse_options({**B, "SubscribePattern": "lo.*", "FAILONDATALOSS": "false"}, streaming=True)
        self.assertEqual((stream.subscribe_pattern, stream.starting.kind), ("lo.*", "latest"))
        self.assertFalse(stream.fail_on_data_loss)

    def test_isolation_level(self) -> None:
        self.assertEqual(parse_options({**B, "subscribe": "t"}, streaming=False).isolation_level, "read_uncommitted")
        o = parse_options({**B, "subscribe": "t", "kafka.isolation.level": "READ_COMMITTED"}, streaming=True)
        self.assertEqual(o.isolation_level, "read_committed")
        with self.assertRaises(ValueError) as raised:
            parse_options({**B, "subscribe": "t", "kafka.isolation.level": "serializable"}, streaming=False)
        self.assertIn("kafka.isolation.level", str(raised.exception))

    def test_json(self) -> None:
        o = parse_options({**B, "assign": '{"t":[0,1]}', "startingOffsets": '{"t":{"0":23,"1":-2}}',
                           "endingOffsets": '{"t":{"0":50,"1":-1}}'}, streaming=False)
        self.assertEqual(o.assign, (("t", 0), ("t", 1)))
        self.assertEqual(o.starting.offsets, {("t", 0): 23, ("t", 1): EARLIEST})
        self.assertEqual(o.ending.offsets, {("t", 0): 50, ("t", 1): -1})

    def test_timestamps(self) -> None:
        o = parse_options({**B, "subscribe": "t", "startingTimestamp": "1000",
                           "startingOffsetsByTimestamp": '{"t":{"0":5}}'}, streaming=True)
        self.assertEqual((o.starting.kind, o.starting.timestamp_ms), ("timestamp", 1000))
        o = parse_options({**B, "subscribe": "t", "startingOffsetsByTimestamp": '{"t":{"0":5}}'}, streaming=True)
        self.assertEqual(o.starting.timestamps, {("t", 0): 5})

    def test_errors(self) -> None:
        cases = [
            ({"subscribe": "t"}, "kafka.bootstrap.servers"),
            ({**B}, "exactly one of"),
            ({**B, "subscribe": "t", "subscribePattern": "x"}, "exactly one of"),
            ({**B, "assign": "[0]"}, "'assign' must be JSON"),
            ({**B, "subscribePattern": "("}, "not a valid regular expression"),
            ({**B, "subscribe": "t", "startingOffsets": "latest"}, "batch"),
            ({**B, "subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, "latest (-1)"),
            ({**B, "subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, "earliest (-2)"),
            ({**B, "subscribe": "t", "startingOffsets": "yesterday"}, "startingOffsets"),
            ({**B, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
            ({**B, "subscribe": "t", "includeHeaders": "yes"}, "includeHeaders"),
            ({**B, "subscribe": "t", "kafka.group.id": "g"}, "kafka.group.id"),
            ({**B, "subscribe": "t", "minOffsetsPerTrigger": "-3"}, "minOffsetsPerTrigger"),
            ({**B, "subscribe": "t", "maxTriggerDelay": "soon"}, "maxTriggerDelay"),
            ({**B, "subscribe": "t", "maxTriggerDelay": "-5s"}, "maxTriggerDelay"),
            ({**B, "subscribe": "t", "maxTriggerDelay": "5 fortnights"}, "maxTriggerDelay"),
        ]
        for options, message in cases:
            with self.assertRaises(ValueError) as caught:
                parse_options(options, streaming=False)
            self.assertIn(message, str(caught.exception), options)
        with self.assertRaises(ValueError) as caught:
            parse_options({**B, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)
        self.assertIn("batch queries only", str(caught.exception))


class OffsetArithmeticTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        if parse_options is None:
            raise unittest.SkipTest("pyspark is not installed")

    def test_rate_limit_proportional(self) -> None:
        """Spark's rateLimit: shares in proportion to the backlog, floor; tiny shares rounded up."""
        start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
        latest = {("t", 0): 900, ("t", 1): 190, ("t", 2): 6}
        self.assertEqual(rate_limit(100, start, latest), {("t", 0): 90, ("t", 1): 109, ("t", 2): 6})
        # under the limit: everything
        self.assertEqual(rate_limit(10_000, start, latest), latest)
        # nothing new
        self.assertEqual(rate_limit(10, latest, latest), latest)

    def test_split_ranges(self) -> None:
        self.assertEqual(split_ranges([("t", 0, 0, 10), ("t", 1, 5, 5)], 4),
                         [("t", 0, 0, 3), ("t", 0, 3, 6), ("t", 0, 6, 10)])
        pieces = split_ranges([("t", 0, 0, 100), ("t", 1, 0, 10)], 1000, min_partitions=4)
        self.assertGreaterEqual(len(pieces), 4)
        covered = sorted((p, o) for _, p, a, b in pieces for o in range(a, b))
        self.assertEqual(covered, [(0, o) for o in range(100)] + [(1, o) for o in range(10)])


class KafkaConfigTests(unittest.SynchronousTestCase):
    """
    C{kafka.*} options pass to the clients' settings as Spark's Kafka source
    passes them to its consumers; those Spark refuses are refused.
    """

    def setUp(self) -> None:
        if parse_options is None:
            raise unittest.SkipTest("pyspark is not installed")

    def test_consumer_and_admin_settings(self) -> None:
        o = parse_options({**B, "subscribe": "t", "kafka.client.id": "etl", "kafka.fetch.max.bytes": "65536",
                           "kafka.max.partition.fetch.bytes": " 4096 ", "kafka.fetch.min.bytes": "1",
                           "kafka.fetch.max.wait.ms": "100", "kafka.request.timeout.ms": "20000",
                           "kafka.retry.backoff.ms": "50", "kafka.default.api.timeout.ms": "30000",
                           "kafka.check.crcs": "FALSE"}, streaming=True)
        self.assertEqual(dict(o.consumer_config), {
            "client_id": "etl", "fetch_max_bytes": 65536, "max_partition_fetch_bytes": 4096, "fetch_min_bytes": 1,
            "fetch_max_wait_ms": 100, "request_timeout_ms": 20000, "retry_backoff_ms": 50,
            "default_api_timeout_ms": 30000, "check_crcs": False})
        self.assertEqual(dict(o.admin_config), {"client_id": "etl", "request_timeout_ms": 20000,
                                                "retry_backoff_ms": 50, "default_api_timeout_ms": 30000})
        self.assertEqual(o.ignored_kafka_options, ())
        # none given: the clients' own defaults (the source names its clients)
        o = parse_options({**B, "subscribe": "t"}, streaming=False)
        self.assertEqual((o.consumer_config, o.admin_config, o.ignored_kafka_options), ((), (), ()))

    def test_names_are_case_insensitive(self) -> None:
        o = parse_options({**B, "subscribe": "t", "KAFKA.Client.ID": "x"}, streaming=False)
        self.assertEqual(dict(o.consumer_config), {"client_id": "x"})

    def test_security_passes_through(self) -> None:
        o = parse_options({**B, "subscribe": "t", "kafka.security.protocol": "sasl_plaintext",
                           "kafka.sasl.mechanism": "PLAIN",
                           "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule'
                                                     ' required username="alice" password="secret";',
                           "kafka.ssl.truststore.password": "unused"}, streaming=True)
        self.assertEqual((o.security.security_protocol, o.security.sasl_mechanism, o.security.sasl_plain_username,
                          o.security.sasl_plain_password), ("SASL_PLAINTEXT", "PLAIN", "alice", "secret"))
        # a store password has no use with PEM stores: ignored, and said so
        self.assertEqual(o.ignored_kafka_options, ("kafka.ssl.truststore.password",))
        self.assertEqual(o.consumer_config, ())

    def test_unknown_settings_ignored(self) -> None:
        """Settings kafkatw's clients do not have are ignored, as Kafka's consumer ignores unknown configs."""
        o = parse_options({**B, "subscribe": "t", "kafka.session.timeout.ms": "10000",
                           "kafka.max.poll.records": "5", "kafka.receive.buffer.bytes": "65536"}, streaming=True)
        self.assertEqual(o.ignored_kafka_options,
                         ("kafka.max.poll.records", "kafka.receive.buffer.bytes", "kafka.session.timeout.ms"))
        self.assertEqual(o.consumer_config, ())

    def test_ignored_said_on_the_driver(self) -> None:
        """The data source names the ignored options in a warning when Spark asks it for a reader."""
        warned = []
        self.patch(_source, "_warn", warned.append)
        source = _source.KafkatwDataSource({**B, "subscribe": "t", "kafka.session.timeout.ms": "1",
                                            "kafka.client.id": "x"})
        self.assertIsInstance(source.streamReader(source.schema()), _source.KafkatwStreamReader)
        self.assertEqual(len(warned), 1)
        self.assertIn("kafka.session.timeout.ms ignored", warned[0])
        self.assertNotIn("client.id", warned[0])
        source = _source.KafkatwDataSource({**B, "subscribe": "t", "kafka.client.id": "x"})
        source.reader(source.schema())
        self.assertEqual(len(warned), 1)

    def test_refused(self) -> None:
        """What Spark's KafkaSourceProvider refuses, with what to do instead."""
        cases = {
            "kafka.group.id": "checkpoint",
            "kafka.auto.offset.reset": "startingOffsets",
            "kafka.enable.auto.commit": "checkpoint",
            "kafka.key.deserializer": "DataFrame operations",
            "kafka.value.deserializer": "DataFrame operations",
            "kafka.interceptor.classes": "interceptors",
        }
        for name, hint in cases.items():
            with self.assertRaises(ValueError) as caught:
                parse_options({**B, "subscribe": "t", name: "x"}, streaming=True)
            self.assertIn(repr(name), str(caught.exception))
            self.assertIn(hint, str(caught.exception))

    def test_bad_values(self) -> None:
        for name, value in (("kafka.fetch.max.bytes", "lots"), ("kafka.fetch.max.bytes", "-1"),
                            ("kafka.request.timeout.ms", "1.5"), ("kafka.check.crcs", "maybe")):
            with self.assertRaises(ValueError) as caught:
                parse_options({**B, "subscribe": "t", name: value}, streaming=False)
            self.assertIn(repr(name), str(caught.exception))

    def test_clients_get_the_settings(self) -> None:
        """The driver's admin client and the executors' consumers are made with the settings."""
        made = []

        class Recording:
            def __init__(self, bootstrap: str, **kwargs) -> None:
                made.append((type(self).__name__, bootstrap, kwargs))

            def close(self) -> None:
                pass

            def assign(self, tps) -> None:
                raise RuntimeError("stop here")

        self.patch(blocking, "BlockingAdminClient", type("BlockingAdminClient", (Recording,), {}))
        self.patch(blocking, "BlockingConsumer", type("BlockingConsumer", (Recording,), {}))
        o = parse_options({**B, "subscribe": "t", "kafka.client.id": "etl", "kafka.fetch.max.bytes": "65536"},
                          streaming=True)
        with _source._Admin(o):
            pass
        with self.assertRaises(RuntimeError):
            list(_source._read_range(o, _source.KafkaInputPartition("t", 0, 0, 10)))
        (admin, _, admin_kwargs), (consumer, _, consumer_kwargs) = made
        self.assertEqual((admin, admin_kwargs["client_id"]), ("BlockingAdminClient", "etl"))
        self.assertNotIn("fetch_max_bytes", admin_kwargs)
        self.assertEqual((consumer, consumer_kwargs["client_id"], consumer_kwargs["fetch_max_bytes"],
                          consumer_kwargs["auto_offset_reset"]), ("BlockingConsumer", "etl", 65536, "none"))
        # without kafka.client.id the source names its clients
        made.clear()
        o = parse_options({**B, "subscribe": "t"}, streaming=True)
        with _source._Admin(o):
            pass
        with self.assertRaises(RuntimeError):
            list(_source._read_range(o, _source.KafkaInputPartition("t", 0, 0, 10)))
        self.assertEqual([m[2]["client_id"] for m in made], ["kafkatw-spark-driver", "kafkatw-spark-executor"])


class TriggerDelayTests(unittest.SynchronousTestCase):
    """minOffsetsPerTrigger and maxTriggerDelay: Spark's KafkaMicroBatchStream.delayBatch, on a fake clock."""

    def setUp(self) -> None:
        if parse_options is None:
            raise unittest.SkipTest("pyspark is not installed")

    def test_options(self) -> None:
        o = parse_options({**B, "subscribe": "t"}, streaming=True)
        self.assertEqual((o.min_offsets_per_trigger, o.max_trigger_delay_ms), (None, DEFAULT_MAX_TRIGGER_DELAY_MS))
        self.assertEqual(DEFAULT_MAX_TRIGGER_DELAY_MS, 15 * 60 * 1000)
        for text, ms in (("30s", 30_000), ("5m", 300_000), ("5min", 300_000), ("500ms", 500), ("500", 500),
                         ("2h", 7_200_000), ("1d", 86_400_000), (" 10 S ", 10_000), ("1500us", 1)):
            o = parse_options({**B, "subscribe": "t", "MinOffsetsPerTrigger": "7", "maxTriggerDelay": text},
                              streaming=True)
            self.assertEqual((o.min_offsets_per_trigger, o.max_trigger_delay_ms), (7, ms), text)

    def test_delay(self) -> None:
        clock = Clock()
        clock.advance(1_800_000_000)
        delay = TriggerDelay(50, 10_000, clock.seconds)
        start = {("t", 0): 100, ("t", 1): 0}

        def new(n0: int, n1: int = 0) -> dict:
            return {("t", 0): 100 + n0, ("t", 1): n1}

        # the first call after the start is allowed, even with nothing new (as Spark's)
        self.assertFalse(delay.delay(start, new(0)))
        clock.advance(1)
        self.assertTrue(delay.delay(start, new(20)))
        clock.advance(1)
        self.assertTrue(delay.delay(start, new(30, 19)))  # 49 < 50, over both partitions
        self.assertFalse(delay.delay(start, new(30, 20)))  # 50: allowed, and the delay counts from now
        clock.advance(9.999)
        self.assertTrue(delay.delay(start, new(1)))
        clock.advance(0.001)  # maxTriggerDelay passed since the last allowed micro-batch
        self.assertFalse(delay.delay(start, new(1)))
        clock.advance(5)
        self.assertTrue(delay.delay(start, new(1)))
        # a partition behind its start (truncated) does not count against the others
        self.assertFalse(delay.delay(start, {("t", 0): 40, ("t", 1): 50}))

    def test_zero_delay_never_waits(self) -> None:
        delay = TriggerDelay(1_000, 0, Clock().seconds)
        self.assertFalse(delay.delay({("t", 0): 0}, {("t", 0): 0}))
        self.assertFalse(delay.delay({("t", 0): 0}, {("t", 0): 1}))


class _FakeAdmin:
    """Stands for L{_source._Admin}: the partitions' log start offsets and latest offsets."""

    earliest: dict = {}
    latest: dict = {}

    def __init__(self, options) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def topic_partitions(self) -> list:
        return sorted(self.latest)

    def offsets(self, tps, timestamp: int) -> dict:
        table = self.earliest if timestamp == EARLIEST else self.latest
        assert timestamp in (EARLIEST, LATEST), timestamp
        return {tp: table[tp] for tp in tps}


class StreamTriggerTests(unittest.SynchronousTestCase):
    """The stream reader's latestOffset with minOffsetsPerTrigger, on a fake clock and a fake admin client."""

    def setUp(self) -> None:
        if parse_options is None:
            raise unittest.SkipTest("pyspark is not installed")
        self.patch(_source, "_Admin", _FakeAdmin)
        self.patch(_FakeAdmin, "earliest", {("t", 0): 0, ("t", 1): 0})
        self.patch(_FakeAdmin, "latest", {("t", 0): 10, ("t", 1): 0})
        self.clock = Clock()
        self.clock.advance(1_800_000_000)

    def reader(self, **options: str):
        parsed = parse_options({**B, "subscribe": "t", "minOffsetsPerTrigger": "50", "maxTriggerDelay": "10s",
                                **options}, streaming=True)
        return _source.KafkatwStreamReader(parsed, clock=self.clock.seconds)

    def test_min_offsets(self) -> None:
        reader = self.reader()
        limit = reader.getDefaultReadLimit()
        self.assertIsInstance(limit, ReadAllAvailable)
        start = {"t": {"0": 0, "1": 0}}
        end = reader.latestOffset(start, limit)  # the first: at once
        self.assertEqual(end, {"t": {"0": 10, "1": 0}})
        _FakeAdmin.latest = {("t", 0): 30, ("t", 1): 10}  # 30 new
        self.clock.advance(2)
        self.assertEqual(reader.latestOffset(end, limit), end)  # delayed: no micro-batch
        _FakeAdmin.latest = {("t", 0): 40, ("t", 1): 20}  # 50 new
        end = reader.latestOffset(end, limit)
        self.assertEqual(end, {"t": {"0": 40, "1": 20}})
        _FakeAdmin.latest = {("t", 0): 41, ("t", 1): 20, ("t", 2): 3}  # a new partition counts from its start
        self.patch(_FakeAdmin, "earliest", {("t", 0): 0, ("t", 1): 0, ("t", 2): 0})
        self.clock.advance(9.9)
        self.assertEqual(reader.latestOffset(end, limit), end)
        self.clock.advance(0.1)  # maxTriggerDelay since the last micro-batch
        self.assertEqual(reader.latestOffset(end, limit), {"t": {"0": 41, "1": 20, "2": 3}})

    def test_with_max_offsets(self) -> None:
        """Both: a micro-batch waits for minOffsetsPerTrigger, then reads at most maxOffsetsPerTrigger."""
        reader = self.reader(maxOffsetsPerTrigger="60")
        limit = reader.getDefaultReadLimit()
        self.assertEqual(limit, ReadMaxRows(60))
        end = reader.latestOffset({"t": {"0": 0, "1": 0}}, limit)
        self.assertEqual(end, {"t": {"0": 10, "1": 0}})
        _FakeAdmin.latest = {("t", 0): 50, ("t", 1): 0}
        self.clock.advance(1)
        self.assertEqual(reader.latestOffset(end, limit), end)  # 40 new: delayed
        _FakeAdmin.latest = {("t", 0): 110, ("t", 1): 100}  # 200 new: 60 of them, by backlog
        self.assertEqual(reader.latestOffset(end, limit), {"t": {"0": 10 + 30, "1": 30}})

    def test_not_under_available_now(self) -> None:
        """trigger(availableNow=True) reads everything there when it started, below the minimum too."""
        reader = self.reader()
        reader.prepareForTriggerAvailableNow()
        limit = reader.getDefaultReadLimit()
        end = reader.latestOffset({"t": {"0": 0, "1": 0}}, limit)
        self.assertEqual(end, {"t": {"0": 10, "1": 0}})
        _FakeAdmin.latest = {("t", 0): 12, ("t", 1): 0}
        self.assertEqual(reader.latestOffset(end, limit), end)  # capped at what was there at the start

    def test_without_min_offsets(self) -> None:
        reader = _source.KafkatwStreamReader(parse_options({**B, "subscribe": "t"}, streaming=True),
                                             clock=self.clock.seconds)
        end = reader.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable())
        _FakeAdmin.latest = {("t", 0): 11, ("t", 1): 0}
        self.assertEqual(reader.latestOffset(end, ReadAllAvailable()), {"t": {"0": 11, "1": 0}})
