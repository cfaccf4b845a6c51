"""
Which flags of Apache Kafka 3.x's tools the C{kafkatw} commands serve, and
why the others are refused: the table C{tests/unit/test_kafka_tool_flags.py}
holds each command's C{--help} to (every served flag listed there, every
flag there listed here), and the table C{kafkatw} reads to answer a refused
flag with its reason instead of "No such option".

Kafka's flags are those its option parsers accept (C{TopicCommand},
C{ConsoleConsumerOptions}, C{ConsoleProducer}, C{ConsumerGroupCommandOptions},
C{DeleteRecordsCommand}, C{LogDirsCommand}, C{GetOffsetShell},
C{ConsumerPerformance}, C{ProducerPerformance}, C{LeaderElectionCommand},
C{reassign.ReassignPartitionsCommandOptions}, C{TransactionsCommand} of
Kafka's C{tools} module; C{DumpLogSegments}, C{kafka.admin.AclCommand},
C{kafka.admin.ConfigCommand}; C{kafka.Kafka} for C{kafka-server-start.sh}),
C{--help} and C{--version} (C{CommandDefaultOptions}) included, as of Kafka
3.9.  A subcommand of C{kafka-transactions.sh} is an entry of its own
(C{"transactions list"}).  docs/operations.md ("Kafka's tools") gives the same
table to read.

Each entry: C{kafka}, the Kafka script; C{served}, Kafka flags the command
takes with Kafka's meaning; C{refused}, Kafka flag -> the one-line reason;
C{kafkatw}, flags of the command that Kafka's tool does not have -> why;
C{commands} (C{transactions} only), Kafka subcommands refused -> why.
"""

from __future__ import annotations

__all__ = ["KAFKA_TOOL_FLAGS", "refusal", "refused_command"]

_VERSION = "kafkatw --version prints the version (one for every command)"
_KRAFT_CONTROLLER = "there are no KRaft controllers (KIP-919): the cluster's metadata is in ZooKeeper"
_ZK_TLS = "kafkatw talks to ZooKeeper over plain TCP only (no zookeeper.ssl.* client configs)"
_TIMEOUT = "how long each admin request may take (Kafka's tool has no flag for it)"

KAFKA_TOOL_FLAGS: dict[str, dict] = {
    "topics": {
        "kafka": "kafka-topics.sh",
        "served": ["--alter", "--at-min-isr-partitions", "--bootstrap-server", "--command-config", "--config",
                   "--create", "--delete", "--describe", "--exclude-internal", "--help", "--if-exists",
                   "--if-not-exists", "--list", "--partitions", "--replication-factor", "--topic",
                   "--topics-with-overrides", "--unavailable-partitions", "--under-min-isr-partitions",
                   "--under-replicated-partitions"],
        "refused": {
            "--delete-config": "Kafka 3.x refuses it with --bootstrap-server too: kafkatw configs --alter "
                               "--delete-config removes a topic config",
            "--replica-assignment": "the controller places replicas; kafkatw reassign-partitions moves them once "
                                    "the topic exists",
            "--topic-id": "topics are named by --topic (the topic id is printed by --describe)",
            "--partition-size-limit-per-response": "DescribeTopicPartitions (KIP-966, KRaft) is not served: "
                                                   "Metadata answers with every partition",
            "--version": _VERSION,
        },
        "kafkatw": {
            "--command-timeout-ms": "how long each admin request may take (Kafka's tool has no flag for it)",
            "-h": "short for --help",
        },
    },
    "console-consumer": {
        "kafka": "kafka-console-consumer.sh",
        "served": ["--bootstrap-server", "--consumer-property", "--consumer.config", "--formatter",
                   "--formatter-config", "--from-beginning", "--group", "--help", "--include", "--isolation-level",
                   "--max-messages", "--offset", "--partition", "--property", "--timeout-ms", "--topic"],
        "refused": {
            "--key-deserializer": "a Java Deserializer cannot be loaded: keys are printed as their bytes",
            "--value-deserializer": "a Java Deserializer cannot be loaded: values are printed as their bytes",
            "--enable-systest-events": "lifecycle events for Kafka's own system tests",
            "--skip-message-on-error": "the formatters served print any record's bytes, so no record fails",
            "--version": _VERSION,
        },
        "kafkatw": {
            "--command-config": "the security settings (client.properties), as the other commands take them",
            "--max-wait-ms": "fetch.max.wait.ms of each Fetch (--consumer-property fetch.max.wait.ms wins)",
            "--zookeeper": "a --group coordinated through ZooKeeper, the paper's consumer group",
            "-h": "short for --help",
        },
    },
    "console-producer": {
        "kafka": "kafka-console-producer.sh",
        "served": ["--batch-size", "--bootstrap-server", "--compression-codec", "--help", "--max-block-ms",
                   "--max-memory-bytes", "--max-partition-memory-bytes", "--message-send-max-retries",
                   "--producer-property", "--producer.config", "--property", "--request-required-acks",
                   "--request-timeout-ms", "--retry-backoff-ms", "--sync", "--timeout", "--topic"],
        "refused": {
            "--line-reader": "a Java RecordReader cannot be loaded: lines are read as --property parse.key, "
                             "key.separator and ignore.error say",
            "--reader-config": "it configures a --line-reader class, which is refused",
            "--metadata-expiry-ms": "the client refreshes metadata when a request meets a moved or unknown "
                                    "partition, not on a metadata.max.age.ms timer",
            "--socket-buffer-size": "the kernel's socket buffer sizes are used (send.buffer.bytes is not a "
                                    "kafkatw producer config)",
            "--version": _VERSION,
        },
        "kafkatw": {
            "--command-config": "the security settings (client.properties), as the other commands take them",
            "-h": "short for --help",
        },
    },
    "consumer-groups": {
        "kafka": "kafka-consumer-groups.sh",
        "served": ["--all-groups", "--all-topics", "--bootstrap-server", "--by-duration", "--command-config",
                   "--delete", "--delete-offsets", "--describe", "--dry-run", "--execute", "--export",
                   "--from-file", "--group", "--help", "--list", "--members", "--offsets", "--reset-offsets",
                   "--shift-by", "--state", "--timeout", "--to-current", "--to-datetime", "--to-earliest",
                   "--to-latest", "--to-offset", "--topic", "--verbose"],
        "refused": {
            "--type": "groups of KIP-848's consumer protocol are not served: every group is a classic group",
            "--version": _VERSION,
        },
        "kafkatw": {
            "--command-timeout-ms": "the other name of --timeout, as kafkatw's other commands spell it",
            "--zookeeper": "the groups of the paper's ZooKeeper-coordinated consumers",
            "-h": "short for --help",
        },
    },
    "delete-records": {
        "kafka": "kafka-delete-records.sh",
        "served": ["--bootstrap-server", "--command-config", "--help", "--offset-json-file"],
        "refused": {"--version": _VERSION},
        "kafkatw": {"-h": "short for --help"},
    },
    "log-dirs": {
        "kafka": "kafka-log-dirs.sh",
        "served": ["--bootstrap-server", "--broker-list", "--command-config", "--describe", "--help",
                   "--topic-list"],
        "refused": {"--version": _VERSION},
        "kafkatw": {"-h": "short for --help"},
    },
    "get-offsets": {
        "kafka": "kafka-get-offsets.sh",
        "served": ["--bootstrap-server", "--command-config", "--exclude-internal-topics", "--help", "--partitions",
                   "--time", "--topic"],
        "refused": {
            "--topic-partitions": "the topic:partitions pattern list is not parsed: give --topic (a regular "
                                  "expression) and --partitions",
            "--version": _VERSION,
        },
        "kafkatw": {"-h": "short for --help"},
    },
    "consumer-perf-test": {
        "kafka": "kafka-consumer-perf-test.sh",
        "served": ["--bootstrap-server", "--date-format", "--fetch-size", "--from-latest", "--help", "--hide-header",
                   "--messages", "--timeout", "--topic"],
        "refused": {
            "--group": "it reads the partitions without a consumer group (rebalance.time.ms is the time to assign "
                       "them)",
            "--consumer.config": "no consumer configs are read: --command-config gives the security settings",
            "--print-metrics": "the client keeps no Kafka client metrics to print",
            "--reporting-interval": "only the final line is printed (--show-detailed-stats is refused)",
            "--show-detailed-stats": "only the final line is printed",
            "--socket-buffer-size": "the kernel's socket buffer sizes are used (receive.buffer.bytes is not a "
                                    "kafkatw consumer config)",
            "--version": _VERSION,
        },
        "kafkatw": {
            "--command-config": "the security settings (client.properties), as the other commands take them",
            "--max-poll-records": "max.poll.records of the consumer",
            "-h": "short for --help",
        },
    },
    "producer-perf-test": {
        "kafka": "kafka-producer-perf-test.sh",
        "served": ["--help", "--num-records", "--payload-file", "--producer-props", "--producer.config",
                   "--record-size", "--throughput", "--topic"],
        "refused": {
            "--payload-delimiter": "a --payload-file holds one payload per line",
            "--payload-monotonic": "payloads are random bytes (--record-size) or the lines of --payload-file",
            "--print-metrics": "the client keeps no Kafka client metrics to print",
            "--transactional-id": "the test sends without transactions",
            "--transaction-duration-ms": "the test sends without transactions (--transactional-id is refused)",
        },
        "kafkatw": {
            "--bootstrap-server": "the broker(s), instead of bootstrap.servers in --producer-props",
            "--command-config": "the security settings (client.properties), as the other commands take them",
            "-h": "short for --help",
        },
    },
    "dump-log": {
        "kafka": "kafka-dump-log.sh",
        "served": ["--deep-iteration", "--files", "--help", "--index-sanity-check", "--max-bytes",
                   "--offsets-decoder", "--print-data-log", "--skip-record-metadata", "--verify-index-only"],
        "refused": {
            "--key-decoder-class": "a Java Decoder cannot be loaded: keys are printed as text",
            "--value-decoder-class": "a Java Decoder cannot be loaded: values are printed as text",
            "--transaction-log-decoder": "__transaction_state's records are kafkatw's own format, not Kafka's",
            "--cluster-metadata-decoder": "there is no KRaft metadata log: the cluster's metadata is in ZooKeeper",
            "--remote-log-metadata-decoder": "tiered storage (KIP-405) is not served",
            "--share-group-state-decoder": "share groups (KIP-932) are not served",
            "--max-message-size": "a batch is read whole, whatever its size",
            "--version": _VERSION,
        },
        "kafkatw": {"-h": "short for --help"},
    },
    "leader-election": {
        "kafka": "kafka-leader-election.sh",
        "served": ["--admin.config", "--all-topic-partitions", "--bootstrap-server", "--election-type", "--help",
                   "--partition", "--path-to-json-file", "--topic"],
        "refused": {"--version": _VERSION},
        "kafkatw": {
            "--command-config": "the other name of --admin.config, as kafkatw's other commands spell it",
            "-h": "short for --help",
        },
    },
    "acls": {
        "kafka": "kafka-acls.sh",
        "served": ["--add", "--allow-host", "--allow-principal", "--authorizer-properties", "--bootstrap-server",
                   "--cluster", "--command-config", "--consumer", "--deny-host", "--deny-principal", "--force",
                   "--group", "--help", "--idempotent", "--list", "--operation", "--principal", "--producer",
                   "--remove", "--resource-pattern-type", "--topic", "--transactional-id"],
        "refused": {
            "--authorizer": "the brokers' authorizer.class.name is the one authorizer; --authorizer-properties "
                            "zookeeper.connect=... writes its znodes",
            "--delegation-token": "delegation tokens (KIP-48) are not served",
            "--user-principal": "USER resources (KIP-373, who may create delegation tokens for whom) are not served",
            "--zk-tls-config-file": _ZK_TLS,
            "--version": _VERSION,
        },
        "kafkatw": {"--command-timeout-ms": _TIMEOUT, "-h": "short for --help"},
    },
    "configs": {
        "kafka": "kafka-configs.sh",
        "served": ["--add-config", "--all", "--alter", "--bootstrap-server", "--broker", "--client",
                   "--command-config", "--delete-config", "--describe", "--entity-default", "--entity-name",
                   "--entity-type", "--help", "--topic", "--user", "--zookeeper"],
        "refused": {
            "--add-config-file": "give the configs with --add-config",
            "--bootstrap-controller": _KRAFT_CONTROLLER,
            "--broker-defaults": "give --entity-type brokers --entity-default",
            "--broker-logger": "loggers are not configured through DescribeConfigs and IncrementalAlterConfigs "
                               "(BROKER_LOGGER resources, KIP-412)",
            "--client-defaults": "give --entity-type clients --entity-default",
            "--user-defaults": "give --entity-type users --entity-default",
            "--force": "there is no prompt for it to suppress",
            "--ip": "connection-rate quotas per IP address (KIP-612) are not served",
            "--ip-defaults": "connection-rate quotas per IP address (KIP-612) are not served",
            "--zk-tls-config-file": _ZK_TLS,
            "--version": _VERSION,
        },
        "kafkatw": {"-h": "short for --help"},
    },
    "reassign-partitions": {
        "kafka": "kafka-reassign-partitions.sh",
        "served": ["--additional", "--bootstrap-server", "--broker-list", "--cancel", "--command-config",
                   "--disable-rack-aware", "--execute", "--generate", "--help", "--list", "--preserve-throttles",
                   "--reassignment-json-file", "--throttle", "--timeout", "--topics-to-move-json-file", "--verify"],
        "refused": {
            "--replica-alter-log-dirs-throttle": "moves between the log dirs of a broker are throttled by the "
                                                 "broker config replica.alter.log.dirs.io.max.bytes.per.second "
                                                 "(server.properties; not dynamic)",
            "--version": _VERSION,
        },
        "kafkatw": {"-h": "short for --help"},
    },
    "transactions": {
        "kafka": "kafka-transactions.sh",
        "served": ["--bootstrap-server", "--command-config", "--help", "-h"],
        "refused": {"--version": _VERSION, "-v": _VERSION},
        "kafkatw": {},
        "commands": {
            "find-hanging": "not built: describe-producers and list show the open transactions and their "
                            "coordinators, abort ends one",
        },
    },
    "transactions list": {
        "kafka": "kafka-transactions.sh list",
        "served": ["--duration-filter", "--help", "-h"],
        "refused": {},
        "kafkatw": {},
    },
    "transactions describe": {
        "kafka": "kafka-transactions.sh describe",
        "served": ["--help", "--transactional-id", "-h"],
        "refused": {},
        "kafkatw": {},
    },
    "transactions describe-producers": {
        "kafka": "kafka-transactions.sh describe-producers",
        "served": ["--broker-id", "--help", "--partition", "--topic", "-h"],
        "refused": {},
        "kafkatw": {},
    },
    "transactions abort": {
        "kafka": "kafka-transactions.sh abort",
        "served": ["--coordinator-epoch", "--help", "--partition", "--producer-epoch", "--producer-id",
                   "--start-offset", "--topic", "-h"],
        "refused": {},
        "kafkatw": {},
    },
    "broker": {
        "kafka": "kafka-server-start.sh",
        "served": ["server.properties", "--override", "--help"],
        "refused": {
            "-daemon": "kafkatw broker runs in the foreground: run it under a service manager, or twistd "
                       "without -n",
            "--version": _VERSION,
        },
        "kafkatw": {},
    },
}


def refusal(command: str, flag: str) -> str | None:
    """
    The reason C{command} refuses Kafka's C{flag}, or C{None} when the table does not refuse it.

    @param command: the command's path under C{kafkatw} (C{"topics"}, C{"transactions list"}).
    """
    entry = KAFKA_TOOL_FLAGS.get(command)
    return None if entry is None else entry["refused"].get(flag)


def refused_command(command: str, subcommand: str) -> str | None:
    """The reason C{command} refuses Kafka's C{subcommand} (C{transactions find-hanging}), or C{None}."""
    entry = KAFKA_TOOL_FLAGS.get(command)
    return None if entry is None else entry.get("commands", {}).get(subcommand)
