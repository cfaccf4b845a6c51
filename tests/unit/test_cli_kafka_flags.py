"""
The Kafka 3.x flags added to C{kafkatw topics}, C{console-consumer},
C{console-producer} and C{consumer-groups} (issue 30): their formatting
functions on made-up data, and each command run against fake blocking
clients (patched into L{kafkatw.client.blocking}, where the commands import
them from) to check what the flags make it ask and print.  No broker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import click
from click.testing import CliRunner
from twisted.trial import unittest

import kafkatw.client.blocking
from kafkatw.cli.console import consumer_options, format_record, print_options, select_topics
from kafkatw.cli.consumer_groups import (GroupDescription, MemberDescription, clamp_offsets, current_offsets,
                                         format_list_states, format_members, format_reset_csv, format_state,
                                         parse_duration, parse_reset_plan, parse_states, shifted_offsets)
from kafkatw.cli.main import main
from kafkatw.cli.topics import partition_matches
from kafkatw.client.admin import ConfigEntry, PartitionInfo, TopicDescription
from kafkatw.protocol.records import Record

B = ["--bootstrap-server", "127.0.0.1:1"]


def run(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, list(args), input=input, prog_name="kafkatw")


def partition(n: int, leader: int, replicas: list[int], isr: list[int]) -> PartitionInfo:
    return PartitionInfo(n, leader, 0, replicas, isr, [])


# --- topics -----------------------------------------------------------------------------------------


class FakeAdmin:
    """A BlockingAdminClient over fixed topics and configs."""

    topics: dict[str, TopicDescription] = {}
    configs: dict[str, dict[str, ConfigEntry]] = {}
    nodes: dict[int, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def __enter__(self) -> "FakeAdmin":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def list_topics(self) -> list[str]:
        return sorted(self.topics)

    def describe_topics(self, names: Any = None) -> dict[str, TopicDescription]:
        return dict(self.topics) if names is None else {n: self.topics[n] for n in names}

    def describe_configs(self, resources: Any, *args: Any) -> dict:
        return {r: self.configs.get(r[1], {}) for r in resources}

    def describe_cluster(self) -> Any:
        return type("Cluster", (), {"nodes": self.nodes, "cluster_id": "c"})()


def entry(name: str, value: str, default: bool) -> ConfigEntry:
    return ConfigEntry(name, value, 5 if default else 1, False, False)  # source 5: default, 1: topic override


def fake_cluster() -> None:
    FakeAdmin.topics = {
        "a": TopicDescription("a", uuid.UUID(int=1), False, [partition(0, 1, [1, 2, 3], [1, 2]),
                                                             partition(1, 2, [2, 3, 1], [2, 3, 1])]),
        "b": TopicDescription("b", uuid.UUID(int=2), False, [partition(0, 1, [1], [1])]),
        "__transaction_state": TopicDescription("__transaction_state", uuid.UUID(int=3), True,
                                                [partition(0, 1, [1, 2], [1, 2])]),
    }
    FakeAdmin.configs = {
        "a": {"min.insync.replicas": entry("min.insync.replicas", "2", False)},
        "b": {"min.insync.replicas": entry("min.insync.replicas", "1", True)},
        "__transaction_state": {"min.insync.replicas": entry("min.insync.replicas", "2", False)},
    }
    FakeAdmin.nodes = {1: None, 2: None, 3: None}


class TopicsFlagsTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        fake_cluster()
        self.patch(kafkatw.client.blocking, "BlockingAdminClient", FakeAdmin)

    def test_partition_matches(self) -> None:
        """--at-min-isr-partitions: ISR exactly min.insync.replicas; the other reports as before."""
        p = partition(0, 1, [1, 2, 3], [1, 2])
        self.assertTrue(partition_matches("at_min_isr_partitions", p, 2, set()))
        self.assertFalse(partition_matches("at_min_isr_partitions", p, 1, set()))
        self.assertFalse(partition_matches("at_min_isr_partitions", p, None, set()))
        self.assertFalse(partition_matches("under_min_isr_partitions", p, 2, set()))
        self.assertTrue(partition_matches("under_min_isr_partitions", p, 3, set()))
        self.assertTrue(partition_matches("under_replicated_partitions", p, None, set()))
        self.assertTrue(partition_matches("unavailable_partitions", p, None, {2, 3}))
        self.assertFalse(partition_matches("topics_with_overrides", p, 2, set()))
        self.assertTrue(partition_matches(None, p, 2, set()))

    def test_at_min_isr_partitions(self) -> None:
        """Only the partition lines whose ISR equals the topic's min.insync.replicas."""
        result = run("topics", *B, "--describe", "--at-min-isr-partitions")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(result.output.splitlines(), [
            "\tTopic: __transaction_state\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2",
            "\tTopic: a\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2",
            "\tTopic: b\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1"])

    def test_topics_with_overrides_and_exclude_internal(self) -> None:
        """--topics-with-overrides: the topic lines of topics with a non-default config, no partition lines."""
        result = run("topics", *B, "--describe", "--topics-with-overrides")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual([line.split("\t")[0] for line in result.output.splitlines()],
                         ["Topic: __transaction_state", "Topic: a"])
        self.assertIn("Configs: min.insync.replicas=2", result.output.splitlines()[1])
        result = run("topics", *B, "--describe", "--topics-with-overrides", "--exclude-internal")
        self.assertEqual([line.split("\t")[0] for line in result.output.splitlines()], ["Topic: a"])

    def test_exclude_internal(self) -> None:
        """--list and --describe leave __transaction_state out with --exclude-internal."""
        self.assertEqual(run("topics", *B, "--list").output, "__transaction_state\na\nb\n")
        self.assertEqual(run("topics", *B, "--list", "--exclude-internal").output, "a\nb\n")
        described = run("topics", *B, "--describe", "--exclude-internal").output
        self.assertNotIn("__transaction_state", described)
        self.assertEqual(len(described.splitlines()), 5)  # a: 1 + 2 lines, b: 1 + 1

    def test_topic_is_a_regular_expression(self) -> None:
        """--topic of --list/--describe: Kafka's IncludeList (whole-name regex, commas as alternatives)."""
        self.assertEqual(run("topics", *B, "--list", "--topic", "a|b").output, "a\nb\n")
        self.assertEqual(run("topics", *B, "--list", "--topic", "a,b").output, "a\nb\n")
        self.assertEqual(run("topics", *B, "--list", "--topic", "'_.*'").output, "__transaction_state\n")
        self.assertEqual(run("topics", *B, "--list", "--topic", "").output, "")
        described = run("topics", *B, "--describe", "--topic", "[ab]").output.splitlines()
        self.assertEqual([line.split("\t")[0] for line in described if line.startswith("Topic")],
                         ["Topic: a", "Topic: b"])
        result = run("topics", *B, "--describe", "--topic", "c.*")
        self.assertEqual((result.exit_code, result.output),
                         (1, "Error while executing topic command : Topic 'c.*' does not exist as expected\n"))
        self.assertEqual(run("topics", *B, "--describe", "--topic", "c.*", "--if-exists").output, "")
        self.assertEqual(run("topics", *B, "--describe", "--topic", "(").exit_code, 2)

    def test_usage_errors(self) -> None:
        for args in (["--list", "--at-min-isr-partitions"], ["--list", "--topics-with-overrides"],
                     ["--describe", "--topics-with-overrides", "--under-replicated-partitions"],
                     ["--describe", "--at-min-isr-partitions", "--unavailable-partitions"],
                     ["--create", "--topic", "t", "--exclude-internal"]):
            result = run("topics", *B, *args)
            self.assertEqual(result.exit_code, 2, (args, result.output))


# --- console consumer -------------------------------------------------------------------------------


@dataclass
class FakeRecord:
    offset: int
    value: bytes
    partition: int = 0
    key: bytes | None = None
    timestamp_ms: int = 1000
    timestamp_type: int = 0
    topic: str = "t"


class FakeConsumer:
    """A BlockingConsumer returning its records once; remembers how it was made and assigned."""

    made: list[dict] = []
    records: list[FakeRecord] = []
    partitions = {"t": {0}, "logs-a": {0, 1}, "logs-b": {0}, "other": {0}}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.assigned: list = []
        self.polled = False
        FakeConsumer.made.append(kwargs)
        FakeConsumer.last = self

    def __enter__(self) -> "FakeConsumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def partitions_for(self, topic: str) -> set[int]:
        return self.partitions[topic]

    def assign(self, tps: list) -> None:
        self.assigned = list(tps)

    def seek_to_beginning(self, *tps: Any) -> None:
        pass

    def seek_to_end(self, *tps: Any) -> None:
        pass

    def poll(self, timeout_ms: int) -> list:
        if self.polled:
            return []
        self.polled = True
        return list(self.records)


class TopicsAdmin(FakeAdmin):
    def list_topics(self) -> list[str]:
        return ["__consumer_offsets", "logs-a", "logs-b", "other", "t"]


class ConsoleConsumerFlagsTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        FakeConsumer.made = []
        FakeConsumer.records = [FakeRecord(0, b"one"), FakeRecord(1, b"two")]
        self.patch(kafkatw.client.blocking, "BlockingConsumer", FakeConsumer)
        self.patch(kafkatw.client.blocking, "BlockingAdminClient", TopicsAdmin)

    def consume(self, *args: str) -> Any:
        return run("console-consumer", *B, "--timeout-ms", "0", *args)

    def test_consumer_options(self) -> None:
        """Kafka's consumer configs become the consumer's keyword arguments; bad values are usage errors."""
        self.assertEqual(consumer_options({"isolation.level": "read_committed", "fetch.min.bytes": "10",
                                           "max.poll.records": "5", "check.crcs": "false", "group.id": "g",
                                           "client.id": "c", "linger.ms": "3"}),
                         {"isolation_level": "read_committed", "fetch_min_bytes": 10, "max_poll_records": 5,
                          "check_crcs": False, "client_id": "c"})
        for bad in ({"isolation.level": "read_some"}, {"fetch.min.bytes": "ten"}, {"auto.offset.reset": "none"}):
            self.assertRaises(click.BadParameter, consumer_options, bad)

    def test_select_topics(self) -> None:
        """--include: whole-name matches, internal topics left out."""
        names = ["__consumer_offsets", "__transaction_state", "logs-a", "logs-b", "xlogs-a", "other"]
        self.assertEqual(select_topics(names, "logs-.*"), ["logs-a", "logs-b"])
        self.assertEqual(select_topics(names, ".*"), ["logs-a", "logs-b", "other", "xlogs-a"])
        self.assertEqual(select_topics(names, "logs"), [])
        self.assertRaises(click.BadParameter, select_topics, names, "(")

    def test_isolation_level_and_consumer_property(self) -> None:
        """--isolation-level wins over --consumer-property isolation.level; other configs pass through."""
        result = self.consume("--topic", "t", "--consumer-property", "isolation.level=read_uncommitted",
                              "--consumer-property", "max.poll.records=7", "--isolation-level", "read_committed")
        self.assertEqual(result.exit_code, 0, result.output)
        made = FakeConsumer.made[-1]
        self.assertEqual((made["isolation_level"], made["max_poll_records"]), ("read_committed", 7))
        result = self.consume("--topic", "t", "--consumer-property", "isolation.level=read_committed")
        self.assertEqual(FakeConsumer.made[-1]["isolation_level"], "read_committed")
        self.assertNotIn("isolation_level", (self.consume("--topic", "t"), FakeConsumer.made[-1])[1])

    def test_auto_offset_reset_property(self) -> None:
        """auto.offset.reset=earliest is --from-beginning; with --from-beginning, latest is Kafka's error."""
        self.consume("--topic", "t", "--consumer-property", "auto.offset.reset=earliest")
        self.assertEqual(FakeConsumer.made[-1]["auto_offset_reset"], "earliest")
        result = self.consume("--topic", "t", "--from-beginning", "--consumer-property", "auto.offset.reset=latest")
        self.assertEqual(result.exit_code, 2)
        self.assertIn("Can't simultaneously specify --from-beginning and 'auto.offset.reset=latest'", result.output)

    def test_group_ids_must_agree(self) -> None:
        result = self.consume("--topic", "t", "--group", "a", "--consumer-property", "group.id=b")
        self.assertEqual(result.exit_code, 2)
        self.assertIn("The group ids provided in different places", result.output)

    def test_formatters(self) -> None:
        """The default formatter prints the values; NoOpMessageFormatter nothing; a Java class is refused."""
        for name in ("kafka.tools.DefaultMessageFormatter", "org.apache.kafka.tools.consumer.DefaultMessageFormatter"):
            result = self.consume("--topic", "t", "--formatter", name)
            self.assertEqual(result.stdout, "one\ntwo\n")
            self.assertIn("Processed a total of 2 messages", result.stderr)
        result = self.consume("--topic", "t", "--formatter", "org.apache.kafka.tools.consumer.NoOpMessageFormatter")
        self.assertEqual((result.exit_code, result.stdout), (0, ""))
        self.assertIn("Processed a total of 2 messages", result.stderr)
        result = self.consume("--topic", "t", "--formatter", "com.example.AvroFormatter")
        self.assertEqual(result.exit_code, 2)
        self.assertIn("com.example.AvroFormatter is not served", result.output)

    def test_formatter_config(self) -> None:
        """--formatter-config: the formatter's properties from a file; --property wins."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("print.offset=true\nprint.partition=true\n")
        result = self.consume("--topic", "t", "--formatter-config", path, "--property", "print.partition=false")
        self.assertEqual(result.stdout, "Offset:0\tone\nOffset:1\ttwo\n")

    def test_include(self) -> None:
        """--include assigns every partition of the matching topics; --topic and --include exclude each other."""
        result = self.consume("--include", "logs-.*")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(FakeConsumer.last.assigned, [("logs-a", 0), ("logs-a", 1), ("logs-b", 0)])
        for args in ([], ["--topic", "t", "--include", "t"], ["--include", "t", "--partition", "0"]):
            self.assertEqual(self.consume(*args).exit_code, 2, args)
        result = self.consume("--include", "nothing-.*")
        self.assertEqual(result.exit_code, 1)
        self.assertIn("no topic matches --include nothing-.*", result.output)

    def test_include_with_zookeeper_is_a_pattern_subscription(self) -> None:
        """With --zookeeper, --include is the paper's white-list subscription; consumer configs pass through."""
        import kafkatw.client.blocking_group

        made = []

        class FakeGroup(FakeConsumer):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                made.append((args, kwargs))
                super().__init__(**kwargs)

            def poll(self, timeout_ms: int, max_records: int | None = None) -> list:
                return FakeConsumer.poll(self, timeout_ms)

            def close(self) -> None:
                pass

        self.patch(kafkatw.client.blocking_group, "BlockingZookeeperConsumerGroup", FakeGroup)
        result = self.consume("--include", "logs-.*", "--group", "g", "--zookeeper", "127.0.0.1:1",
                              "--isolation-level", "read_committed")
        self.assertEqual(result.exit_code, 0, result.output)
        [(args, kwargs)] = made
        self.assertEqual(args, ("g", None, "logs-.*"))
        self.assertEqual((kwargs["isolation_level"], kwargs["auto_offset_reset"]), ("read_committed", "largest"))
        self.assertEqual(result.stdout, "one\ntwo\n")

    def test_format_record_unchanged(self) -> None:
        opts = print_options({"print.key": "true"})
        self.assertEqual(format_record(Record(0, 1, b"k", b"v", []), 0, 0, opts), b"k\tv")


# --- console producer -------------------------------------------------------------------------------


class FakeFuture:
    def __init__(self, log: list) -> None:
        self.log = log
        self.acknowledged = False

    def done(self) -> bool:
        return self.acknowledged

    def exception(self) -> None:
        return None


class FakeProducer:
    """A BlockingProducer logging sends and flushes."""

    made: list[dict] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        FakeProducer.made.append(kwargs)
        self.log: list = []
        self.pending: list[FakeFuture] = []
        FakeProducer.last = self

    def __enter__(self) -> "FakeProducer":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> FakeFuture:
        self.log.append(("send", value))
        future = FakeFuture(self.log)
        self.pending.append(future)
        return future

    def flush(self) -> None:
        self.log.append(("flush",))
        for future in self.pending:
            future.acknowledged = True


class ConsoleProducerFlagsTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        FakeProducer.made = []
        self.patch(kafkatw.client.blocking, "BlockingProducer", FakeProducer)

    def produce(self, *args: str) -> Any:
        return run("console-producer", *B, "--topic", "t", *args, input="a\nb\nc\n")

    def test_request_required_acks(self) -> None:
        """--request-required-acks sets acks and wins over --producer-property acks, as Kafka merges them."""
        for given, acks in (("all", -1), ("-1", -1), ("1", 1), ("0", 0)):
            result = self.produce("--producer-property", "acks=1", "--request-required-acks", given)
            self.assertEqual(result.exit_code, 0, result.output)
            self.assertEqual(FakeProducer.made[-1]["acks"], acks)
        self.produce("--producer-property", "acks=0")
        self.assertEqual(FakeProducer.made[-1]["acks"], 0)
        result = self.produce("--request-required-acks", "2")
        self.assertEqual(result.exit_code, 2)
        self.assertIn("--request-required-acks", result.output)

    def test_sync(self) -> None:
        """--sync: each record is flushed (acknowledged) before the next line is sent; without, one flush."""
        self.produce("--sync")
        self.assertEqual(FakeProducer.last.log, [("send", b"a"), ("flush",), ("send", b"b"), ("flush",),
                                                 ("send", b"c"), ("flush",), ("flush",)])
        self.produce()
        self.assertEqual(FakeProducer.last.log, [("send", b"a"), ("send", b"b"), ("send", b"c"), ("flush",)])

    def test_producer_flags(self) -> None:
        """Kafka's producer flags reach the producer's configs; those not given keep its defaults."""
        self.produce("--request-timeout-ms", "1500", "--message-send-max-retries", "3", "--retry-backoff-ms", "50",
                     "--max-block-ms", "100", "--max-memory-bytes", "1048576", "--batch-size", "100",
                     "--max-partition-memory-bytes", "200")
        made = FakeProducer.made[-1]
        self.assertEqual({k: made[k] for k in ("request_timeout_ms", "retries", "retry_backoff_ms", "max_block_ms",
                                                "buffer_memory", "batch_size")},
                         {"request_timeout_ms": 1500, "retries": 3, "retry_backoff_ms": 50, "max_block_ms": 100,
                          "buffer_memory": 1048576, "batch_size": 200})
        self.produce()
        self.assertFalse({"request_timeout_ms", "retries", "retry_backoff_ms", "max_block_ms",
                          "buffer_memory"} & set(FakeProducer.made[-1]))


# --- consumer groups --------------------------------------------------------------------------------


def group(members: list[MemberDescription], state: str = "Stable", offsets: dict | None = None) -> GroupDescription:
    return GroupDescription("g", state, "consumer", "range", members, offsets or {})


class ConsumerGroupsFormatTests(unittest.SynchronousTestCase):
    def test_members(self) -> None:
        """--describe --members: Kafka's columns, padded to at least 15, each cell followed by a space."""
        members = [MemberDescription("m-1", None, "c1", "/10.0.0.1", [("t", 1), ("t", 0), ("u", 2)]),
                   MemberDescription("m-2", None, "c2", "/10.0.0.2", [])]
        self.assertEqual(format_members(group(members)).splitlines(), [
            "",
            f"{'GROUP':<15} {'CONSUMER-ID':<15} {'HOST':<15} {'CLIENT-ID':<15} {'#PARTITIONS':<15} ",
            f"{'g':<15} {'m-1':<15} {'/10.0.0.1':<15} {'c1':<15} {'3':<15} ",
            f"{'g':<15} {'m-2':<15} {'/10.0.0.2':<15} {'c2':<15} {'0':<15} "])
        verbose = format_members(group(members), verbose=True).splitlines()
        self.assertTrue(verbose[1].endswith("#PARTITIONS     ASSIGNMENT"))
        self.assertTrue(verbose[2].endswith("3               t(0,1), u(2)"))
        self.assertTrue(verbose[3].endswith("0               -"))

    def test_members_with_instance_ids_and_long_cells(self) -> None:
        """GROUP-INSTANCE-ID shows when a member has one (width at least 17); a long id widens its column."""
        long_id = "consumer-1-" + "0" * 30
        members = [MemberDescription(long_id, "i-1", "c1", "/h", [("t", 0)])]
        lines = format_members(group(members)).splitlines()
        self.assertEqual(lines[1], f"{'GROUP':<15} {'CONSUMER-ID':<{len(long_id)}} {'GROUP-INSTANCE-ID':<17} "
                                   f"{'HOST':<15} {'CLIENT-ID':<15} {'#PARTITIONS':<15} ")
        self.assertEqual(lines[2], f"{'g':<15} {long_id} {'i-1':<17} {'/h':<15} {'c1':<15} {'1':<15} ")

    def test_state(self) -> None:
        """--describe --state: coordinator as host:port  (id), the assignor, the state, the member count."""
        text = format_state(group([MemberDescription("m", None, "c", "/h", [])]), ("127.0.0.1", 9092, 0))
        self.assertEqual(text.splitlines(), [
            "",
            f"{'GROUP':<25} {'COORDINATOR (ID)':<25} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<15} #MEMBERS",
            f"{'g':<25} {'127.0.0.1:9092  (0)':<25} {'range':<20} {'Stable':<15} 1"])

    def test_list_states(self) -> None:
        """--list --state: GROUP as wide as the longest id (at least 15) plus 10, then STATE (20)."""
        self.assertEqual(format_list_states([("g", "Stable"), ("other", "Empty")]).splitlines(), [
            f"{'GROUP':<25} {'STATE':<20}", f"{'g':<25} {'Stable':<20}", f"{'other':<25} {'Empty':<20}"])
        long = "a-group-with-a-long-name"
        self.assertEqual(format_list_states([(long, "Dead")]).splitlines()[1], f"{long:<{len(long) + 10}} {'Dead':<20}")

    def test_parse_states(self) -> None:
        self.assertEqual(parse_states("stable, EMPTY,Stable"), ["Stable", "Empty"])
        with self.assertRaises(click.UsageError) as e:
            parse_states("Stable,Sleeping")
        self.assertIn("Invalid state list 'Stable,Sleeping'. Valid states are: PreparingRebalance", str(e.exception))

    def test_clamp_and_shift(self) -> None:
        """--shift-by and --to-offset stay within [log start, log end], each change with Kafka's warning."""
        tps = [("t", 0), ("t", 1), ("t", 2)]
        committed = {("t", 0): 5, ("t", 1): 1, ("t", 2): 9}
        starts = {("t", 0): 0, ("t", 1): 2, ("t", 2): 0}
        ends = {("t", 0): 10, ("t", 1): 10, ("t", 2): 10}
        shifted = shifted_offsets(tps, committed, 3)
        self.assertEqual(shifted, {("t", 0): 8, ("t", 1): 4, ("t", 2): 12})
        new, warnings = clamp_offsets(shifted, starts, ends)
        self.assertEqual(new, {("t", 0): 8, ("t", 1): 4, ("t", 2): 10})
        self.assertEqual(warnings, ["WARN New offset (12) is higher than latest offset for topic partition t-2. "
                                    "Value will be set to 10"])
        new, warnings = clamp_offsets(shifted_offsets(tps, committed, -3), starts, ends)
        self.assertEqual(new, {("t", 0): 2, ("t", 1): 2, ("t", 2): 6})
        self.assertEqual(warnings, ["WARN New offset (-2) is lower than earliest offset for topic partition t-1. "
                                    "Value will be set to 2"])
        with self.assertRaises(click.UsageError) as e:
            shifted_offsets([("t", 0), ("u", 0)], committed, 1)
        self.assertEqual(e.exception.format_message(),
                         "Cannot shift offset for partition u-0 since there is no current committed offset")

    def test_current(self) -> None:
        """--to-current: the committed offset, the log end offset where there is none."""
        self.assertEqual(current_offsets([("t", 0), ("t", 1)], {("t", 0): 4}, {("t", 1): 9}),
                         {("t", 0): 4, ("t", 1): 9})

    def test_duration(self) -> None:
        """--by-duration: Java's Duration.parse forms, in ms."""
        for text, ms in (("PT1H", 3_600_000), ("P1DT2H", 93_600_000), ("PT0.5S", 500), ("PT1H30M", 5_400_000),
                         ("pt10s", 10_000), ("P2D", 172_800_000), ("-PT1M", -60_000)):
            self.assertEqual(parse_duration(text), ms, text)
        for text in ("P", "PT", "1H", "PT1X", "P1H"):
            self.assertRaises(click.BadParameter, parse_duration, text)

    def test_reset_plan_round_trip(self) -> None:
        """--export writes what --from-file reads: without the group for one --group, with it otherwise."""
        offsets = {"g": {("t", 1): 7, ("t", 0): 3}, "h": {("u", 0): 1}}
        with_group = format_reset_csv(offsets, with_group=True)
        self.assertEqual(with_group, "g,t,0,3\ng,t,1,7\nh,u,0,1")
        self.assertEqual(parse_reset_plan(with_group, ("g", "h")), offsets)
        single = format_reset_csv({"g": offsets["g"]}, with_group=False)
        self.assertEqual(single, "t,0,3\nt,1,7")
        self.assertEqual(parse_reset_plan(single + "\n", ("g",)), {"g": offsets["g"]})
        self.assertRaises(click.BadParameter, parse_reset_plan, "t,zero,3", ("g",))


class FakeSource:
    """A GroupSource whose deletes of the groups in C{failing} fail with GROUP_NOT_EMPTY."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.deleted: list[str] = []

    def delete(self, group_id: str) -> None:
        from kafkatw.errors import ErrorCode, kafka_error

        if group_id in self.failing:
            raise kafka_error(ErrorCode.non_empty_group, "NON_EMPTY_GROUP")
        self.deleted.append(group_id)


class ConsumerGroupsDeleteTests(unittest.SynchronousTestCase):
    def delete(self, source: FakeSource, groups: list[str], single: bool) -> Any:
        from kafkatw.cli.consumer_groups import _delete

        command = click.Command("delete", callback=lambda: _delete(source, groups, single))
        return CliRunner().invoke(command, [])

    def test_all_groups_deleted(self) -> None:
        """--all-groups: one line naming the groups as Kafka quotes them."""
        result = self.delete(FakeSource(set()), ["a", "b"], single=False)
        self.assertEqual((result.exit_code, result.stdout),
                         (0, "Deletion of requested consumer groups ('a, b') was successful.\n"))

    def test_some_groups_fail(self) -> None:
        """The failed groups with their errors on stderr, then the deleted ones; exit 1."""
        source = FakeSource({"b"})
        result = self.delete(source, ["a", "b", "c"], single=False)
        self.assertEqual(result.exit_code, 1)
        self.assertEqual(source.deleted, ["a", "c"])
        self.assertEqual(result.stderr.splitlines(), [
            "", "Error: Deletion of some consumer groups failed:",
            "* Group 'b' could not be deleted due to: NON_EMPTY_GROUP",
            "", "These consumer groups were deleted successfully: 'a, c'"])


class ConsumerGroupsUsageTests(unittest.SynchronousTestCase):
    """Kafka's checkArgs, as usage errors before any request (the broker address is unreachable)."""

    def test_usage_errors(self) -> None:
        for args in (["--list", "--members"], ["--describe", "--group", "g", "--members", "--state"],
                     ["--describe", "--group", "g", "--state", "Stable"], ["--describe", "--group", "g", "--verbose"],
                     ["--describe", "--all-groups", "--group", "g"], ["--list", "--all-groups"],
                     ["--delete"], ["--reset-offsets", "--group", "g"],
                     ["--reset-offsets", "--group", "g", "--to-current", "--shift-by", "1"],
                     ["--reset-offsets", "--group", "g", "--to-current", "--all-topics", "--topic", "t"],
                     ["--describe", "--group", "g", "--shift-by", "1"], ["--list", "--export"],
                     ["--list", "--state", "Sleeping"],
                     ["--reset-offsets", "--group", "g", "--by-duration", "1H"],
                     ["--zookeeper", "127.0.0.1:1", "--describe", "--group", "g", "--members"],
                     ["--zookeeper", "127.0.0.1:1", "--reset-offsets", "--group", "g", "--shift-by", "1"]):
            result = run("consumer-groups", *B, *args)
            self.assertEqual(result.exit_code, 2, (args, result.output))
            self.assertTrue(result.output.startswith("Error: "), (args, result.output))


# --- transactions --------------------------------------------------------------------------------------


class TransactionsFlagsTests(unittest.SynchronousTestCase):
    """kafka-transactions.sh's subcommand flags (issue 30): list --duration-filter, refusals by path."""

    def test_duration_filter(self) -> None:
        """--duration-filter MS is ListTransactions' DurationFilter (KIP-994); without it, -1 (all)."""
        calls: list[dict] = []

        class Admin(FakeAdmin):
            def list_transactions(self, **kwargs: Any) -> list:
                calls.append(kwargs)
                return []

        self.patch(kafkatw.client.blocking, "BlockingAdminClient", Admin)
        result = run("transactions", *B, "list", "--duration-filter", "60000")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(result.output.splitlines()[0].split("\t")[:4],
                         ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"])
        self.assertEqual(run("transactions", *B, "list").exit_code, 0)
        self.assertEqual(calls, [{"duration_filter_ms": 60000}, {"duration_filter_ms": -1}])

    def test_refusal_of_a_subcommand_flag(self) -> None:
        """A refused flag of a subcommand is looked up by the command's path ("transactions list")."""
        from kafkatw.cli.kafka_flags import KAFKA_TOOL_FLAGS

        refused = KAFKA_TOOL_FLAGS["transactions list"]["refused"]
        refused["--transactional-id-pattern"] = "a reason"
        self.addCleanup(refused.pop, "--transactional-id-pattern")
        result = run("transactions", *B, "list", "--transactional-id-pattern", "x")
        self.assertEqual(result.exit_code, 2, result.output)
        self.assertEqual(result.output.splitlines()[0],
                         "Error: kafkatw transactions list does not serve --transactional-id-pattern: a reason.")
        result = run("transactions", *B, "list", "--no-such-flag")
        self.assertEqual(result.output.splitlines()[0], "Error: No such option '--no-such-flag'.")
