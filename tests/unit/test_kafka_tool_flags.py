"""
Each C{kafkatw} command's C{--help} against the flags of the Apache Kafka 3.x
tool it mirrors, through the table of L{kafkatw.cli.kafka_flags}: every Kafka
flag is served or refused with a reason, every served flag is in C{--help},
every flag in C{--help} is a served one or a kafkatw flag the table explains,
and a refused flag is answered with its reason.
"""

from __future__ import annotations

import re

from click.testing import CliRunner
from twisted.trial import unittest

from kafkatw.cli.kafka_flags import KAFKA_TOOL_FLAGS
from kafkatw.cli.main import broker_argv, main

#: The flags Kafka 3.x's option parsers accept (tools/src/main/java/org/apache/kafka/tools/TopicCommand.java,
#: consumer/ConsoleConsumerOptions.java, ConsoleProducer.java, consumer/group/ConsumerGroupCommandOptions.java,
#: DeleteRecordsCommand.java, LogDirsCommand.java, GetOffsetShell.java, ConsumerPerformance.java,
#: ProducerPerformance.java, LeaderElectionCommand.java, reassign/ReassignPartitionsCommandOptions.java,
#: TransactionsCommand.java (argparse4j: -h, -v and each subcommand's parser);
#: core/src/main/scala/kafka/tools/DumpLogSegments.scala, kafka/admin/AclCommand.scala, kafka/admin/ConfigCommand.scala
#: as of 3.9; with CommandDefaultOptions' --help and --version; core/src/main/scala/kafka/Kafka.scala for the broker).
KAFKA_3X = {
    "topics": {
        "--alter", "--at-min-isr-partitions", "--bootstrap-server", "--command-config", "--config", "--create",
        "--delete", "--delete-config", "--describe", "--exclude-internal", "--if-exists", "--if-not-exists",
        "--list", "--partition-size-limit-per-response", "--partitions", "--replica-assignment",
        "--replication-factor", "--topic", "--topic-id", "--topics-with-overrides", "--unavailable-partitions",
        "--under-min-isr-partitions", "--under-replicated-partitions", "--help", "--version"},
    "console-consumer": {
        "--bootstrap-server", "--consumer-property", "--consumer.config", "--enable-systest-events", "--formatter",
        "--formatter-config", "--from-beginning", "--group", "--include", "--isolation-level", "--key-deserializer",
        "--max-messages", "--offset", "--partition", "--property", "--skip-message-on-error", "--timeout-ms",
        "--topic", "--value-deserializer", "--help", "--version"},
    "console-producer": {
        "--batch-size", "--bootstrap-server", "--compression-codec", "--line-reader", "--max-block-ms",
        "--max-memory-bytes", "--max-partition-memory-bytes", "--message-send-max-retries", "--metadata-expiry-ms",
        "--producer-property", "--producer.config", "--property", "--reader-config", "--request-required-acks",
        "--request-timeout-ms", "--retry-backoff-ms", "--socket-buffer-size", "--sync", "--timeout", "--topic",
        "--help", "--version"},
    "consumer-groups": {
        "--all-groups", "--all-topics", "--bootstrap-server", "--by-duration", "--command-config", "--delete",
        "--delete-offsets", "--describe", "--dry-run", "--execute", "--export", "--from-file", "--group", "--list",
        "--members", "--offsets", "--reset-offsets", "--shift-by", "--state", "--timeout", "--to-current",
        "--to-datetime", "--to-earliest", "--to-latest", "--to-offset", "--topic", "--type", "--verbose",
        "--help", "--version"},
    "delete-records": {"--bootstrap-server", "--command-config", "--offset-json-file", "--help", "--version"},
    "log-dirs": {"--bootstrap-server", "--broker-list", "--command-config", "--describe", "--topic-list", "--help",
                 "--version"},
    "get-offsets": {"--bootstrap-server", "--command-config", "--exclude-internal-topics", "--partitions", "--time",
                    "--topic", "--topic-partitions", "--help", "--version"},
    "consumer-perf-test": {
        "--bootstrap-server", "--consumer.config", "--date-format", "--fetch-size", "--from-latest", "--group",
        "--hide-header", "--messages", "--print-metrics", "--reporting-interval", "--show-detailed-stats",
        "--socket-buffer-size", "--timeout", "--topic", "--help", "--version"},
    # argparse4j's parser: --help, no --version
    "producer-perf-test": {
        "--topic", "--num-records", "--payload-delimiter", "--payload-file", "--payload-monotonic", "--print-metrics",
        "--producer-props", "--producer.config", "--record-size", "--throughput", "--transaction-duration-ms",
        "--transactional-id", "--help"},
    "dump-log": {
        "--cluster-metadata-decoder", "--deep-iteration", "--files", "--index-sanity-check", "--key-decoder-class",
        "--max-bytes", "--max-message-size", "--offsets-decoder", "--print-data-log", "--remote-log-metadata-decoder",
        "--share-group-state-decoder", "--skip-record-metadata", "--transaction-log-decoder", "--value-decoder-class",
        "--verify-index-only", "--help", "--version"},
    "leader-election": {"--admin.config", "--all-topic-partitions", "--bootstrap-server", "--election-type",
                        "--partition", "--path-to-json-file", "--topic", "--help", "--version"},
    "acls": {
        "--add", "--allow-host", "--allow-principal", "--authorizer", "--authorizer-properties", "--bootstrap-server",
        "--cluster", "--command-config", "--consumer", "--delegation-token", "--deny-host", "--deny-principal",
        "--force", "--group", "--idempotent", "--list", "--operation", "--principal", "--producer", "--remove",
        "--resource-pattern-type", "--topic", "--transactional-id", "--user-principal", "--zk-tls-config-file",
        "--help", "--version"},
    "configs": {
        "--add-config", "--add-config-file", "--all", "--alter", "--bootstrap-controller", "--bootstrap-server",
        "--broker", "--broker-defaults", "--broker-logger", "--client", "--client-defaults", "--command-config",
        "--delete-config", "--describe", "--entity-default", "--entity-name", "--entity-type", "--force", "--ip",
        "--ip-defaults", "--topic", "--user", "--user-defaults", "--zk-tls-config-file", "--zookeeper", "--help",
        "--version"},
    "reassign-partitions": {
        "--additional", "--bootstrap-server", "--broker-list", "--cancel", "--command-config", "--disable-rack-aware",
        "--execute", "--generate", "--list", "--preserve-throttles", "--reassignment-json-file",
        "--replica-alter-log-dirs-throttle", "--throttle", "--timeout", "--topics-to-move-json-file", "--verify",
        "--help", "--version"},
    "transactions": {"--bootstrap-server", "--command-config", "-h", "--help", "-v", "--version"},
    "transactions list": {"--duration-filter", "-h", "--help"},
    "transactions describe": {"--transactional-id", "-h", "--help"},
    "transactions describe-producers": {"--broker-id", "--partition", "--topic", "-h", "--help"},
    "transactions abort": {"--coordinator-epoch", "--partition", "--producer-epoch", "--producer-id",
                           "--start-offset", "--topic", "-h", "--help"},
    "broker": {"server.properties", "--override", "-daemon", "--help", "--version"},
}

#: kafka-transactions.sh's subcommands (TransactionsCommand's parsers); find-hanging is refused
KAFKA_3X_TRANSACTIONS = {"list", "describe", "describe-producers", "abort", "find-hanging"}

#: What a command needs before it looks at a flag it does not know (producer-perf-test takes Kafka's
#: `--producer-props a=1 b=2`, so it reads unknown arguments after its required options)
REQUIRED = {"producer-perf-test": ["--topic", "t", "--num-records", "1", "--throughput", "-1"]}

#: An option line of click's --help: two spaces, then the flags ("-h, --help", "--timeout, --command-timeout-ms N")
_OPTION_LINE = re.compile(r"^  (-\S.*?)(?:\s{2,}|$)")


def argv(command: str, *args: str) -> list[str]:
    """C{kafkatw COMMAND ARGS}; a subcommand (C{"transactions list"}) after its group's required flag."""
    words = command.split()
    return words[:1] + (["--bootstrap-server", "127.0.0.1:1"] if len(words) > 1 else []) + words[1:] + list(args)


def help_flags(command: str) -> set[str]:
    """The flags C{kafkatw COMMAND --help} lists."""
    result = CliRunner().invoke(main, argv(command, "--help"), prog_name="kafkatw")
    assert result.exit_code == 0, result.output
    flags = set()
    for line in result.output.split("Options:", 1)[1].splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            flags.update(part.split()[0] for part in m.group(1).split(", "))
    return flags


class KafkaToolFlagsTests(unittest.SynchronousTestCase):
    def test_table_covers_kafka_flags(self) -> None:
        """Every Kafka 3.x flag of a tool is served or refused, never both; each refusal has a reason."""
        self.assertEqual(set(KAFKA_TOOL_FLAGS), set(KAFKA_3X))
        for command, entry in KAFKA_TOOL_FLAGS.items():
            served, refused = set(entry["served"]), set(entry["refused"])
            self.assertEqual(served & refused, set(), command)
            self.assertEqual(served | refused, KAFKA_3X[command], command)
            self.assertEqual(set(entry["kafkatw"]) & KAFKA_3X[command], set(), command)
            for flag, reason in {**entry["refused"], **entry["kafkatw"]}.items():
                self.assertTrue(reason and "\n" not in reason and not reason.endswith("."), (command, flag))

    def test_help_matches_table(self) -> None:
        """Each command's --help: the served flags and the kafkatw flags of the table, nothing else."""
        for command, entry in KAFKA_TOOL_FLAGS.items():
            if command == "broker":
                continue
            shown = help_flags(command)
            self.assertEqual(set(entry["served"]) - shown, set(), f"served but not in {command} --help")
            self.assertEqual(shown - set(entry["served"]) - set(entry["kafkatw"]), set(),
                             f"in {command} --help but not in the table")
            self.assertEqual(shown & set(entry["refused"]), set(), command)

    def test_refused_flag_says_why(self) -> None:
        """A refused flag exits 2 with the table's reason on the first line."""
        for command, entry in KAFKA_TOOL_FLAGS.items():
            if command == "broker":
                continue
            for flag, reason in entry["refused"].items():
                result = CliRunner().invoke(main, argv(command, *REQUIRED.get(command, []), flag), prog_name="kafkatw")
                self.assertEqual(result.exit_code, 2, (command, flag, result.output))
                self.assertEqual(result.output.splitlines()[0],
                                 f"Error: kafkatw {command} does not serve {flag}: {reason}.")

    def test_transactions_subcommands(self) -> None:
        """
        kafka-transactions.sh's subcommands are kafkatw transactions' own,
        each with its table entry; find-hanging is refused with its reason.
        """
        group = main.commands["transactions"]
        self.assertEqual(set(group.commands) | set(KAFKA_TOOL_FLAGS["transactions"]["commands"]),
                         KAFKA_3X_TRANSACTIONS)
        self.assertEqual({c for c in KAFKA_TOOL_FLAGS if c.startswith("transactions ")},
                         {f"transactions {name}" for name in group.commands})
        for name, reason in KAFKA_TOOL_FLAGS["transactions"]["commands"].items():
            result = CliRunner().invoke(main, ["transactions", "--bootstrap-server", "127.0.0.1:1", name],
                                        prog_name="kafkatw")
            self.assertEqual(result.exit_code, 2, result.output)
            self.assertEqual(result.output.splitlines()[0],
                             f"Error: kafkatw transactions does not serve {name}: {reason}.")

    def test_broker_takes_kafka_server_start_arguments(self) -> None:
        """
        kafka-server-start.sh's form: a leading properties file is the
        broker's --config, --override passes through; -daemon and --version
        are refused with the table's reason.
        """
        self.assertEqual(broker_argv(("config/server.properties", "--override", "broker.id=1")),
                         ["-n", "--pidfile=", "kafkatw", "--config", "config/server.properties",
                          "--override", "broker.id=1"])
        self.assertEqual(broker_argv(("--broker-id", "0")), ["-n", "--pidfile=", "kafkatw", "--broker-id", "0"])
        self.assertEqual(broker_argv(()), ["-n", "--pidfile=", "kafkatw"])
        from kafkatw.tap import Options

        options = str(Options())
        self.assertIn("--config=", options)
        self.assertIn("--override=", options)
        for flag in ("-daemon", "--version"):
            result = CliRunner().invoke(main, ["broker", flag, "config/server.properties"], prog_name="kafkatw")
            self.assertEqual(result.exit_code, 2, result.output)
            self.assertIn(f"kafkatw broker does not serve {flag}: {KAFKA_TOOL_FLAGS['broker']['refused'][flag]}.",
                          result.output)

    def test_broker_execs_twistd_with_the_properties_file(self) -> None:
        """kafkatw broker config/server.properties execs twistd with --config (os.execv replaced)."""
        import os

        calls = []
        self.patch(os, "execv", lambda path, argv: calls.append(argv))
        result = CliRunner().invoke(main, ["broker", "config/server.properties", "--override", "broker.id=2"],
                                    prog_name="kafkatw")
        self.assertEqual(result.exit_code, 0, result.output)
        [argv] = calls
        self.assertTrue(argv[0].endswith("twistd"))
        self.assertEqual(argv[1:], ["-n", "--pidfile=", "kafkatw", "--config", "config/server.properties",
                                    "--override", "broker.id=2"])

    def test_docs_name_every_refused_flag(self) -> None:
        """docs/operations.md ("Kafka's tools, flag by flag") names each refused flag."""
        import os

        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(root, "docs", "operations.md"), encoding="utf-8") as f:
            text = f.read()
        section = text.split("## Kafka's tools, flag by flag", 1)[1].split("\n## ", 1)[0]
        for command, entry in KAFKA_TOOL_FLAGS.items():
            for flag in [*entry["refused"], *entry.get("commands", {})]:
                self.assertIn(f"`{flag}`", section, (command, flag))
