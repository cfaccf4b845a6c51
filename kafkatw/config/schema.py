"""
The configuration schema: every broker and topic config under Apache Kafka's
own name, with Kafka's type, default, validator and documentation (Kafka's
C{KafkaConfig} and C{LogConfig} definitions on their C{ConfigDef}s), and the
dynamic broker configs (Kafka's C{DynamicBrokerConfig}).

Every key is the one Kafka documents (``broker.id``, ``log.dirs``,
``log.segment.bytes`` ...), with Kafka's default where kafkatw follows it.
Topic-level overrides (``retention.ms``, ``segment.bytes`` ...) map onto broker
keys through L{TOPIC_CONFIG_KEYS}.  L{kafkatw.config.broker_config} reads
values against these definitions; L{kafkatw.config.docs} generates
docs/configuration.md's tables from them.

Source: Kafka documentation, "Broker Configs" and "Topic Configs".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = [
    "ConfigKey",
    "BROKER_CONFIG",
    "COMPRESSION_TYPES",
    "OAUTHBEARER_CALLBACK_HANDLERS",
    "LISTENER_CONFIG_KEYS",
    "MECHANISM_CONFIG_KEYS",
    "TOPIC_CONFIG_KEYS",
    "TOPIC_CONFIG",
    "CONFIG_TYPE_CODES",
    "DYNAMIC_BROKER_CONFIGS",
    "PER_BROKER_DYNAMIC_CONFIGS",
    "config_type",
    "is_sensitive",
    "is_dynamic_broker_config",
    "topic_config_key",
    "parse_topic_config",
]


def _bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _list(value: str | list) -> list[str]:
    if isinstance(value, list):
        return value
    return [part.strip() for part in value.split(",") if part.strip()]


@dataclass(frozen=True)
class ConfigKey:
    """
    One configuration key: Kafka's name, its type, default, and documentation.

    @ivar doc: what the key does, one paragraph; it is the key's row in
        docs/configuration.md (L{kafkatw.config.docs.config_markdown}) and
        the C{documentation} of DescribeConfigs, so it uses Markdown's
        backticks and no links.
    @ivar unit: the unit of the value (``ms``, ``bytes``, ``messages``) or ``""``.
    """

    name: str
    parse: Callable[[Any], Any]
    default: Any
    doc: str
    unit: str = ""
    #: Kafka's type (KIP-569): BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST,
    #: CLASS or PASSWORD; ``""``: derived by L{config_type}.
    type: str = ""
    #: A secret (Kafka's PASSWORD type): DescribeConfigs shows no value.
    sensitive: bool = False


def _cleanup_policy(value: str | list) -> str:
    # Kafka's values: "delete", "compact", both ("compact,delete" in either order), or none:
    # an empty list (Kafka's ValidList accepts it) keeps every segment, neither deleted by
    # retention nor compacted, the same as retention.ms=-1 and retention.bytes=-1 (Kafka's
    # upgrade notes for 4.2, KAFKA-19112: "cleanup.policy supports empty values, which means
    # infinite retention"; a 3.x log with neither policy is not cleaned either).
    parts = value if isinstance(value, list) else str(value).split(",")
    policies = {str(part).strip() for part in parts if str(part).strip()}
    if not policies <= {"delete", "compact"}:
        raise ValueError("must be delete, compact or compact,delete")
    return ",".join(sorted(policies))


def _ratio(value: str | float) -> float:
    ratio = float(value)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError("must be between 0 and 1")
    return ratio


def _bind_address(value: str) -> str:
    """An IP address to bind, or C{""}/C{0.0.0.0}/C{::} for every interface."""
    import ipaddress

    value = str(value).strip()
    if value:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"not an IP address: {value!r} (empty: every interface)") from None
    return value


#: Kafka's compression.type values (BrokerCompressionType).
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _compression_type(value: str) -> str:
    value = str(value).strip().lower()
    if value not in COMPRESSION_TYPES:
        raise ValueError(f"String must be one of: {', '.join(COMPRESSION_TYPES)}")
    return value
def _sasl_mechanisms(value: str | list) -> list[str]:
    from ..security.sasl import MECHANISMS

    mechanisms = [m.upper() for m in _list(value)]
    unknown = [m for m in mechanisms if m not in MECHANISMS]
    if unknown:
        raise ValueError(f"kafkatw's SASL mechanisms are {', '.join(MECHANISMS)}, not {', '.join(unknown)}")
    return mechanisms


def _sasl_mechanism(value: str) -> str:
    return _sasl_mechanisms(value)[0] if str(value).strip() else ""


def _principal_to_local_rules(value: str | list) -> list[str]:
    from ..security.kerberos import parse_rules

    rules = _list(value)
    parse_rules("", rules)  # ValueError: Kafka's "Invalid rule"
    return rules


def _jaas(value: str) -> str:
    from ..security.jaas import parse_jaas_config

    if str(value).strip():
        parse_jaas_config(str(value))  # ValueError without the text, which holds passwords
    return str(value)


#: Kafka's OAUTHBEARER validators (C{listener.name.<l>.oauthbearer.sasl.server.callback.handler.class}):
#: class name -> kafkatw's validator, C{"jwks"} (KIP-768; the 3.1-3.3 C{secured} package too) or C{"unsecured"}.
OAUTHBEARER_CALLBACK_HANDLERS = {
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler": "jwks",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler": "jwks",
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler":
        "unsecured",
}


def _server_callback_handler(value: str) -> str:
    value = str(value).strip()
    if value and value not in OAUTHBEARER_CALLBACK_HANDLERS:
        raise ValueError("kafkatw's server callback handlers are Kafka's OAUTHBEARER validators: "
                         + ", ".join(OAUTHBEARER_CALLBACK_HANDLERS))
    return value


def _reauth_ms(value: str | int) -> int:
    if int(value) != 0:
        raise ValueError("kafkatw does not re-authenticate connections (KIP-368); only 0 is supported")
    return 0


def _share_auto_offset_reset(value: str) -> str:
    if value not in ("latest", "earliest"):
        raise ValueError(f"share.auto.offset.reset must be latest or earliest, not {value!r}")
    return value


def _timestamp_type(value: str) -> str:
    if value not in ("CreateTime", "LogAppendTime"):
        raise ValueError("must be CreateTime or LogAppendTime")
    return value


def _authorizer_class(value: str) -> str:
    from ..security.acl import AUTHORIZER_CLASS_NAMES

    name = str(value).strip()
    if name and name not in AUTHORIZER_CLASS_NAMES:
        raise ValueError("kafkatw has Kafka's ZooKeeper ACL authorizer only: "
                         + ", ".join(sorted(AUTHORIZER_CLASS_NAMES)))
    return name


_LONG_MAX = 2**63 - 1

BROKER_CONFIG: dict[str, ConfigKey] = {
    key.name: key
    for key in [
        ConfigKey("broker.id", int, 0, "Identifier of this broker, unique in the cluster."),
        ConfigKey("log.dirs", _list, ["/tmp/kafkatw-logs"],
                  "Comma-separated directories holding partition logs. A new partition goes to the directory "
                  "holding the fewest partitions."),
        ConfigKey("listeners", _list, ["tcp:9092:interface=127.0.0.1"],
                  "Comma-separated `NAME://host:port` listeners (`PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093`; "
                  "an empty host binds every interface), each with the security protocol "
                  "`listener.security.protocol.map` gives its name. A Twisted server endpoint string "
                  "(`tcp:9092:interface=127.0.0.1`) is the `PLAINTEXT` listener."),
        ConfigKey("advertised.listeners", _list, [],
                  "`NAME://host:port` addresses registered in `/brokers/ids/<id>` and given to clients in "
                  "Metadata, per listener; a listener not named here advertises the address it is bound to "
                  "(`0.0.0.0`/`::` become `127.0.0.1`). A bare `host:port` is the first listener's."),
        ConfigKey("zookeeper.connect", str, "embedded",
                  "`HOST:PORT[,HOST:PORT][/chroot]` (without a chroot, `/kafkatw` is used), or "
                  "`embedded[:PORT]` to start a child ZooKeeper on 127.0.0.1:PORT (default 2181, or "
                  "`$KAFKATW_EMBEDDED_ZOOKEEPER_PORT`)."),
        ConfigKey("zookeeper.session.timeout.ms", int, 18000,
                  "ZooKeeper session timeout (the server clamps it to 2–20 × its tickTime).", "ms"),
        ConfigKey("zookeeper.connection.timeout.ms", int, 18000,
                  "Time to wait for the first ZooKeeper connection, and for a connection lost while the broker "
                  "starts; past it the broker does not start.", "ms"),
        ConfigKey("zookeeper.session.guard.enable", _bool, False,
                  "Start a small guard process on the broker's host that ends the broker's ZooKeeper session as "
                  "soon as the broker process dies (SIGKILL, OOM kill, crash), so that the controller replaces it "
                  "at once instead of after `zookeeper.session.timeout.ms`. The guard knows the process is dead "
                  "because the kernel released the log directories' lock, and ends only the session recorded "
                  "under that lock. A host or network failure still takes the session timeout."),
        ConfigKey("num.partitions", int, 1,
                  "Partition count of auto-created topics, and of CreateTopics with `num_partitions = -1`.",
                  "partitions"),
        ConfigKey("default.replication.factor", int, 1,
                  "Replication factor of auto-created topics and of CreateTopics with `replication_factor = -1` "
                  "(more than the live brokers: `INVALID_REPLICATION_FACTOR`).", "replicas"),
        ConfigKey("auto.create.topics.enable", _bool, True,
                  "Create a topic when a Metadata request names it (and allows auto-creation). Produce does "
                  "**not** auto-create in this version."),
        ConfigKey("delete.topic.enable", _bool, True, "Allow DeleteTopics (`TOPIC_DELETION_DISABLED` otherwise)."),
        ConfigKey("message.max.bytes", int, 1048588,
                  "Largest record batch accepted, its 12-byte log overhead included (`MESSAGE_TOO_LARGE`).",
                  "bytes"),
        ConfigKey("socket.request.max.bytes", int, 104857600,
                  "Largest request frame accepted; a larger frame closes the connection.", "bytes"),
        ConfigKey("log.segment.bytes", int, 1073741824, "Size at which a segment is rolled.", "bytes"),
        ConfigKey("log.roll.ms", int, 604800000, "Age at which a segment is rolled (`log.roll.hours=168`).", "ms"),
        ConfigKey("log.index.interval.bytes", int, 4096, "Bytes of log between two offset-index entries.", "bytes"),
        ConfigKey("log.index.size.max.bytes", int, 10485760,
                  "Largest `.index` (and `.timeindex`) file per segment; a full index rolls the segment.", "bytes"),
        ConfigKey("log.flush.interval.messages", int, _LONG_MAX,
                  "Records appended before a partition is fsynced (default: never, rely on the page cache).",
                  "messages"),
        ConfigKey("log.flush.interval.ms", int, _LONG_MAX,
                  "Age of unflushed data before a partition is fsynced (default: never).", "ms"),
        ConfigKey("log.flush.scheduler.interval.ms", int, 1000, "How often `log.flush.interval.ms` is checked.", "ms"),
        ConfigKey("log.flush.offset.checkpoint.interval.ms", int, 60000,
                  "How often recovery points are checkpointed.", "ms"),
        ConfigKey("log.retention.ms", int, 604800000,
                  "Age after which whole segments are deleted (-1: never).", "ms"),
        ConfigKey("log.retention.bytes", int, -1,
                  "Partition size above which old segments are deleted (-1: never).", "bytes"),
        ConfigKey("log.retention.check.interval.ms", int, 300000, "How often retention runs.", "ms"),
        ConfigKey("log.cleanup.policy", _cleanup_policy, "delete",
                  "`delete` (old segments are deleted by retention), `compact` (the log cleaner keeps the last "
                  "record of each key, see docs/operations.md) or `compact,delete` (both). Any other value is "
                  "refused when the options are parsed, and is `INVALID_CONFIG` on a topic."),
        # log compaction (Kafka's CleanerConfig; docs/operations.md, "Log compaction")
        ConfigKey("log.cleaner.enable", _bool, True,
                  "Run the log cleaner, which compacts the logs of topics with `cleanup.policy` `compact`."),
        ConfigKey("log.cleaner.threads", int, 1, "Threads cleaning logs, one log each at a time.", "threads"),
        ConfigKey("log.cleaner.io.max.bytes.per.second", float, 1.7976931348623157e308,
                  "I/O of all cleaner threads together (bytes read plus written) is throttled to this rate.",
                  "bytes/s"),
        ConfigKey("log.cleaner.dedupe.buffer.size", int, 134217728,
                  "Memory for the key-to-offset maps of all cleaner threads; at about 160 bytes an entry (whole "
                  "keys in a Python dict; Kafka's `SkimpyOffsetMap` takes 24) it bounds how many keys one pass "
                  "deduplicates.", "bytes"),
        ConfigKey("log.cleaner.backoff.ms", int, 15000, "Pause of a cleaner thread that found no log to clean.",
                  "ms"),
        ConfigKey("log.cleaner.delete.retention.ms", int, 86400000,
                  "How long a tombstone (a record with a null value) is kept in the cleaned part of a "
                  "compacted log, counted from the last modification of the newest cleaned segment.", "ms"),
        ConfigKey("log.cleaner.min.cleanable.ratio", _ratio, 0.5,
                  "A compacted log is cleaned once its dirty (never cleaned) bytes make up this share of its "
                  "cleanable bytes."),
        ConfigKey("log.cleaner.min.compaction.lag.ms", int, 0,
                  "Segments whose newest record is younger than this are not cleaned.", "ms"),
        ConfigKey("log.cleaner.max.compaction.lag.ms", int, _LONG_MAX,
                  "A record older than this is cleaned whatever the dirty ratio; the active segment of a "
                  "compacted log also rolls at this age.", "ms"),
        ConfigKey("log.message.timestamp.type", _timestamp_type, "CreateTime",
                  "`CreateTime` or `LogAppendTime` (see docs/storage.md); any other value is "
                  "refused when the options are parsed."),
        ConfigKey("producer.id.block.size", int, 1000, "Producer ids reserved in ZooKeeper at a time.", "ids"),
        ConfigKey("metrics.port", int, -1,
                  "Prometheus metrics at `http://<metrics.bind.address>:<port>/metrics` (-1: off; 0: any free "
                  "port). Names follow the JMX exporter's rendering of Kafka's MBeans, e.g. "
                  "`kafka_server_brokertopicmetrics_messagesin_total`, "
                  "`kafka_log_log_logendoffset{topic,partition}`.", "port"),
        ConfigKey("metrics.bind.address", _bind_address, "127.0.0.1",
                  "The IP address `metrics.port` (metrics, health probes, the console) listens on; empty, "
                  "`0.0.0.0` or `::`: every interface. Registered in `/brokers/ids/<id>` (`metrics_host`; the "
                  "inter-broker listener's advertised host when every interface is bound) so that each "
                  "broker's console reads the others' counters: with the default only brokers on the same "
                  "machine are reached. Anyone who reaches the address reaches the console (see "
                  "docs/operations.md)."),
        ConfigKey("metrics.console.enable", _bool, True,
                  "Serve the web console (read-only unless `metrics.console.admin.enable`) at "
                  "`http://<metrics.bind.address>:<metrics.port>/console/` (with "
                  "`/healthz` and `/readyz`, always served). With `authorizer.class.name` set it asks for HTTP "
                  "basic authentication against the SASL PLAIN and SCRAM users and is not served without a SASL "
                  "listener (see docs/operations.md)."),
        ConfigKey("metrics.console.admin.enable", _bool, False,
                  "Let the web console change the cluster: create and delete topics, produce one record, delete a "
                  "consumer group without members (POST requests carrying the header `X-Kafkatw-Console: 1`; with "
                  "`authorizer.class.name` each action needs the ACL Kafka would check for the console's user). "
                  "Off: the console is read-only and these requests answer 403 (see docs/operations.md)."),
        ConfigKey("metrics.lag.interval.ms", int, 10000,
                  "How often the broker computes consumer lag (`kafka_consumergroup_lag`, exported by the "
                  "active controller; the console's group pages).", "ms"),
        ConfigKey("metrics.event.loop.lag.interval.ms", int, 10,
                  "The period of the timer whose lateness is `kafkatw_event_loop_lag_seconds` (long handler "
                  "turns, garbage collections, waiting for a core; see docs/operations.md): a pause shorter than "
                  "this is seen only when the timer falls due during it; each firing costs about 0.1 ms of CPU on "
                  "an idle broker. 0: off.", "ms"),
        # consumer groups (Kafka's group coordinator configs; docs/consumer-groups.md)
        ConfigKey("group.initial.rebalance.delay.ms", int, 3000,
                  "How long the coordinator waits for more members to join a new (empty) group before its "
                  "first rebalance completes; each new member extends the wait by this much, up to the "
                  "rebalance timeout (see docs/consumer-groups.md).", "ms"),
        ConfigKey("group.min.session.timeout.ms", int, 6000,
                  "Smallest session timeout a member may ask for (else `INVALID_SESSION_TIMEOUT`).", "ms"),
        ConfigKey("group.max.session.timeout.ms", int, 1800000,
                  "Largest session timeout a member may ask for (else `INVALID_SESSION_TIMEOUT`).", "ms"),
        ConfigKey("group.max.size", int, 2147483647,
                  "Most members a consumer group may have (else `GROUP_MAX_SIZE_REACHED`).", "members"),
        # KIP-848 consumer groups (Kafka's GroupCoordinatorConfig group.consumer.*; docs/consumer-groups.md)
        ConfigKey("group.consumer.heartbeat.interval.ms", int, 5000,
                  "How often a member of a KIP-848 consumer group (`group.protocol=consumer`) heartbeats "
                  "(the ConsumerGroupHeartbeat answer tells it).", "ms"),
        ConfigKey("group.consumer.session.timeout.ms", int, 45000,
                  "A KIP-848 consumer group member that sends no heartbeat for this long is removed from its "
                  "group and its partitions are reassigned.", "ms"),
        ConfigKey("group.consumer.max.size", int, 2147483647,
                  "Most members a KIP-848 consumer group may have (else `GROUP_MAX_SIZE_REACHED`).", "members"),
        ConfigKey("group.consumer.assignors", _list, ["uniform", "range"],
                  "The server-side assignors of KIP-848 consumer groups a member may name; the first is the "
                  "default (kafkatw: `uniform` and `range`)."),
        ConfigKey("group.consumer.min.session.timeout.ms", int, 45000,
                  "Smallest `consumer.session.timeout.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.consumer.max.session.timeout.ms", int, 60000,
                  "Largest `consumer.session.timeout.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.consumer.min.heartbeat.interval.ms", int, 5000,
                  "Smallest `consumer.heartbeat.interval.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.consumer.max.heartbeat.interval.ms", int, 15000,
                  "Largest `consumer.heartbeat.interval.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        # share groups (KIP-932; docs/consumer-groups.md, "Share groups")
        ConfigKey("group.share.session.timeout.ms", int, 45000,
                  "How long a share group member may go without a ShareGroupHeartbeat before it is removed "
                  "from its group.", "ms"),
        ConfigKey("group.share.heartbeat.interval.ms", int, 5000,
                  "How often share group members are told to send a ShareGroupHeartbeat.", "ms"),
        ConfigKey("group.share.record.lock.duration.ms", int, 30000,
                  "How long a share consumer holds the records it acquired (the acquisition lock) before "
                  "they become available again.", "ms"),
        ConfigKey("group.share.min.session.timeout.ms", int, 45000,
                  "Smallest `share.session.timeout.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.share.max.session.timeout.ms", int, 60000,
                  "Largest `share.session.timeout.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.share.min.heartbeat.interval.ms", int, 5000,
                  "Smallest `share.heartbeat.interval.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.share.max.heartbeat.interval.ms", int, 15000,
                  "Largest `share.heartbeat.interval.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.share.min.record.lock.duration.ms", int, 15000,
                  "Smallest `share.record.lock.duration.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.share.max.record.lock.duration.ms", int, 60000,
                  "Largest `share.record.lock.duration.ms` a group config may set (else `INVALID_CONFIG`).", "ms"),
        ConfigKey("group.share.delivery.count.limit", int, 5,
                  "How many times a record of a share group is delivered before it is archived instead of "
                  "being made available again.", "deliveries"),
        ConfigKey("group.share.partition.max.record.locks", int, 200,
                  "Most records of one share partition acquired at a time.", "records"),
        ConfigKey("group.share.max.size", int, 200,
                  "Most members a share group may have (else `GROUP_MAX_SIZE_REACHED`).", "members"),
        ConfigKey("group.share.auto.offset.reset", _share_auto_offset_reset, "latest",
                  "kafkatw's default of the group config `share.auto.offset.reset`: where a share group "
                  "starts reading a partition it never read, `latest` (the high watermark) or `earliest` "
                  "(the log start offset)."),
        ConfigKey("offset.metadata.max.bytes", int, 4096,
                  "Longest metadata string an offset commit may carry (else `OFFSET_METADATA_TOO_LARGE`).",
                  "bytes"),
        ConfigKey("offsets.commit.timeout.ms", int, 5000,
                  "How long an offset commit waits for its ZooKeeper write before it is answered "
                  "`REQUEST_TIMED_OUT`.", "ms"),
        ConfigKey("offsets.commit.batch.interval.ms", int, 10,
                  "kafkatw: offset commits are written to ZooKeeper in batches at most this often, the latest "
                  "value per group and partition; a commit is answered once the batch holding it is written.",
                  "ms"),
        # transactions (Kafka's TransactionLogConfig and TransactionStateManagerConfig; docs/transactions.md)
        # the share coordinator's state topic (KIP-932; docs/consumer-groups.md, "Share groups")
        ConfigKey("share.coordinator.state.topic.num.partitions", int, 50,
                  "Partitions of the internal topic `__share_group_state`, which holds the state of share "
                  "partitions (start offset, acknowledged and archived records, delivery counts); the leader of "
                  "a state partition is the share coordinator of the share partitions hashed to it. Do not change "
                  "it once the topic exists.", "partitions"),
        ConfigKey("share.coordinator.state.topic.replication.factor", int, 3,
                  "Replication factor of `__share_group_state`, created once this many brokers are alive (share "
                  "consumers get no records until then): 1 on a single broker, as for `__transaction_state`.",
                  "replicas"),
        ConfigKey("share.coordinator.state.topic.min.isr", int, 2,
                  "`min.insync.replicas` of `__share_group_state`: a share-partition state change (an "
                  "acknowledgement) is answered once this many replicas have it.", "replicas"),
        ConfigKey("transaction.state.log.num.partitions", int, 50,
                  "Partitions of the internal topic `__transaction_state`; a transactional id lives in partition "
                  "`abs(hashCode(id)) % transaction.state.log.num.partitions`, whose leader is its transaction "
                  "coordinator. Do not change it once the topic exists.", "partitions"),
        ConfigKey("transaction.state.log.replication.factor", int, 3,
                  "Replication factor of `__transaction_state`. As in Kafka, the topic is created only once this "
                  "many brokers are alive (clients get `COORDINATOR_NOT_AVAILABLE` until then): 1 on a single "
                  "broker, as `config/server.properties` sets it and as a broker on an embedded ZooKeeper takes "
                  "it when it is not set.",
                  "replicas"),
        ConfigKey("transaction.state.log.min.isr", int, 2,
                  "`min.insync.replicas` of `__transaction_state`: a transaction state change is acknowledged "
                  "once this many replicas have it (1 on a single broker, as for the replication factor).",
                  "replicas"),
        ConfigKey("transaction.state.log.segment.bytes", int, 104857600,
                  "Segment size of `__transaction_state` (small, so that compaction and loading stay quick).",
                  "bytes"),
        ConfigKey("transaction.max.timeout.ms", int, 900000,
                  "Largest `transaction.timeout.ms` a producer may ask for in InitProducerId (else "
                  "`INVALID_TRANSACTION_TIMEOUT`).", "ms"),
        ConfigKey("transaction.partition.verification.enable", _bool, True,
                  "A partition leader asks the transaction coordinator (AddPartitionsToTxn v4, verify only) "
                  "whether a transactional batch that starts a transaction on the partition belongs to the "
                  "producer's ongoing transaction before appending it (KIP-890): a late or stray write "
                  "cannot start a transaction its coordinator will never end."),
        ConfigKey("transactional.id.expiration.ms", int, 604800000,
                  "A transactional id with no open transaction and no update for this long is forgotten "
                  "(a tombstone in `__transaction_state`).", "ms"),
        ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10000,
                  "How often the coordinator aborts transactions open longer than their timeout.", "ms"),
        ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3600000,
                  "How often the coordinator forgets transactional ids past `transactional.id.expiration.ms`.",
                  "ms"),
        # replication (docs/replication.md; Kafka's ReplicationConfigs)
        ConfigKey("min.insync.replicas", int, 1,
                  "Fewest in-sync replicas with which an acks=all produce is accepted "
                  "(else NOT_ENOUGH_REPLICAS).", "replicas"),
        ConfigKey("unclean.leader.election.enable", _bool, False,
                  "Elect an out-of-sync replica when no in-sync replica is alive (may lose acknowledged "
                  "records)."),
        ConfigKey("replica.lag.time.max.ms", int, 30000,
                  "A follower that has not caught up with the leader's log end offset for this long leaves "
                  "the ISR.", "ms"),
        ConfigKey("replica.fetch.wait.max.ms", int, 500, "Longest time a follower's fetch waits at the leader.",
                  "ms"),
        ConfigKey("replica.fetch.min.bytes", int, 1, "Bytes a follower's fetch waits for.", "bytes"),
        ConfigKey("replica.fetch.max.bytes", int, 1048576, "Bytes a follower fetches per partition and request.",
                  "bytes"),
        ConfigKey("replica.fetch.response.max.bytes", int, 10485760,
                  "Bytes a follower fetches per request.", "bytes"),
        ConfigKey("replica.fetch.backoff.ms", int, 1000, "Pause of a replica fetcher after an error.", "ms"),
        ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", float, 1.7976931348623157e308,
                  "Moves of replicas between the log dirs of this broker (AlterReplicaLogDirs, KIP-113) copy at "
                  "most this many bytes/s together.", "bytes/s"),
        ConfigKey("num.replica.fetchers", int, 1, "Fetcher connections per source broker.", "fetchers"),
        ConfigKey("max.incremental.fetch.session.cache.slots", int, 1000,
                  "Incremental fetch sessions (KIP-227) the broker keeps for followers and consumers; when "
                  "full, a new session evicts one unused for 2 minutes, or a smaller one. 0 turns sessions off: every "
                  "fetch is full.", "sessions"),
        ConfigKey("replica.high.watermark.checkpoint.interval.ms", int, 5000,
                  "How often high watermarks are written to replication-offset-checkpoint.", "ms"),
        ConfigKey("replica.socket.timeout.ms", int, 30000, "Request timeout of a follower's fetches.", "ms"),
        ConfigKey("leader.replication.throttled.rate", int, _LONG_MAX,
                  "Replication throttle of a leader for reassigned replicas; dynamic (IncrementalAlterConfigs, "
                  "`reassign-partitions --throttle`). Accepted and stored; kafkatw applies the follower's.",
                  "bytes/s"),
        ConfigKey("follower.replication.throttled.rate", int, _LONG_MAX,
                  "Replication throttle of a follower for the replicas a reassignment adds to it; dynamic "
                  "(IncrementalAlterConfigs, `reassign-partitions --throttle`).", "bytes/s"),
        ConfigKey("quota.window.num", int, 11,
                  "Samples kept of each client's byte and request-time rates for client quotas "
                  "(`producer_byte_rate`, `consumer_byte_rate`, `request_percentage` of `/config/users` and "
                  "`/config/clients`); a rate is measured over all of them, and a throttle lasts at most "
                  "all of them.", "samples"),
        ConfigKey("quota.window.size.seconds", int, 1,
                  "Length of one sample of the client quota rates; a throttled client waits at most "
                  "`quota.window.num` times this.", "s"),
        ConfigKey("auto.leader.rebalance.enable", _bool, True,
                  "The controller moves leaderships back to preferred replicas (the first assigned) when a "
                  "broker's share of partitions it prefers but does not lead exceeds "
                  "leader.imbalance.per.broker.percentage."),
        ConfigKey("leader.imbalance.check.interval.seconds", int, 300,
                  "How often the controller checks the leader imbalance.", "s"),
        ConfigKey("leader.imbalance.per.broker.percentage", int, 10,
                  "Share of a broker's preferred partitions led elsewhere that triggers a preferred election.",
                  "%"),
        # -- authorization (ACLs): docs/security.md --
        ConfigKey("authorizer.class.name", _authorizer_class, "",
                  "The authorizer: `kafka.security.authorizer.AclAuthorizer` (or Kafka's older "
                  "`kafka.security.auth.SimpleAclAuthorizer`, or `kafkatw.security.AclAuthorizer`, the same "
                  "authorizer) checks every request against the ACLs kept in ZooKeeper under `/kafka-acl`; "
                  "empty: no authorization, every request is allowed."),
        ConfigKey("super.users", str, "",
                  "Principals allowed everything, separated by semicolons (`User:admin;User:ANONYMOUS`). With "
                  "an authorizer, list the brokers' own principal here (on a plaintext inter-broker listener: "
                  "`User:ANONYMOUS`), or grant it `ClusterAction` on the cluster, or replication stops."),
        ConfigKey("allow.everyone.if.no.acl.found", _bool, False,
                  "With an authorizer: allow an operation on a resource that no ACL names (false: deny it)."),
        # broker synonyms of topic configs (Kafka's ServerTopicConfigSynonyms; docs/operations.md)
        ConfigKey("compression.type", _compression_type, "producer",
                  "Codec of the batches written: `producer` keeps the producer's; `uncompressed`, `gzip`, "
                  "`snappy`, `lz4` or `zstd` makes the broker recompress every batch whose codec differs "
                  "(those topics leave the no-copy append path)."),
        ConfigKey("log.message.timestamp.difference.max.ms", int, _LONG_MAX,
                  "Deprecated by the two below: the largest difference between a CreateTime batch's "
                  "timestamps and the broker's clock (else `INVALID_TIMESTAMP`); used for either bound "
                  "left at its default.", "ms"),
        ConfigKey("log.message.timestamp.before.max.ms", int, _LONG_MAX,
                  "How far in the past a CreateTime batch's timestamps may be (KIP-937; else "
                  "`INVALID_TIMESTAMP`). Checked on each batch's first and largest timestamps.", "ms"),
        ConfigKey("log.message.timestamp.after.max.ms", int, _LONG_MAX,
                  "How far in the future a CreateTime batch's timestamps may be (KIP-937; else "
                  "`INVALID_TIMESTAMP`). Checked on each batch's first and largest timestamps.", "ms"),
        ConfigKey("log.segment.delete.delay.ms", int, 60000,
                  "How long the files of a segment deleted by retention stay open, so that fetch responses "
                  "being sent from them stay valid.", "ms"),
        ConfigKey("log.roll.jitter.ms", int, 0,
                  "Largest random jitter subtracted from `log.roll.ms` per segment, so that the partitions "
                  "of a topic do not all roll at once.", "ms"),
        ConfigKey("log.preallocate", _bool, False,
                  "Accepted; no effect: kafkatw does not preallocate segment files."),
        ConfigKey("log.message.downconversion.enable", _bool, True,
                  "Accepted; no effect: kafkatw serves message format v2 only (Fetch v4 and later), so "
                  "nothing is ever down-converted."),
        ConfigKey("log.message.format.version", str, "3.0-IV1",
                  "Accepted; no effect (deprecated by Kafka 3.0): batches are written in message format "
                  "v2."),
        ConfigKey("log.local.retention.ms", int, -2,
                  "Tiered storage's local retention (KIP-405); no effect: kafkatw has no remote storage.",
                  "ms"),
        ConfigKey("log.local.retention.bytes", int, -2,
                  "Tiered storage's local retention (KIP-405); no effect: kafkatw has no remote storage.",
                  "bytes"),
        ConfigKey("compression.gzip.level", int, -1,
                  "The gzip level of the batches the broker recompresses (KIP-390; `compression.type=gzip`)."),
        ConfigKey("compression.lz4.level", int, 9,
                  "The lz4 level of the batches the broker recompresses (KIP-390; `compression.type=lz4`)."),
        ConfigKey("compression.zstd.level", int, 3,
                  "The zstd level of the batches the broker recompresses (KIP-390; `compression.type=zstd`)."),
        # security: SASL (docs/security.md; Kafka's BrokerSecurityConfigs)
        ConfigKey("sasl.enabled.mechanisms", _sasl_mechanisms, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                  "SASL mechanisms a `SASL_PLAINTEXT` or `SASL_SSL` listener offers: `PLAIN`, `SCRAM-SHA-256`, "
                  "`SCRAM-SHA-512`, `OAUTHBEARER`, `GSSAPI`; a listener may set its own with "
                  "`listener.name.<listener>.sasl.enabled.mechanisms`. Kafka's default is `GSSAPI` (Kerberos), "
                  "which needs a keytab and python-gssapi (`pip install kafkatw[kerberos]`), so kafkatw enables "
                  "PLAIN and SCRAM by default; a mechanism without users (no `user_` entries for PLAIN, no "
                  "credentials for SCRAM) lets nobody in. `OAUTHBEARER` (KIP-255) is only enabled when listed: "
                  "it validates unsecured tokens (development) unless `sasl.oauthbearer.jwks.endpoint.url` is "
                  "set. `GSSAPI` reads the broker's keys from the `keyTab` and `principal` of "
                  "`listener.name.<listener>.gssapi.sasl.jaas.config` (a `Krb5LoginModule` entry)."),
        ConfigKey("sasl.mechanism.inter.broker.protocol", _sasl_mechanism, "PLAIN",
                  "SASL mechanism of the broker's own connections to other brokers over a SASL listener "
                  "(Kafka's default is `GSSAPI`). Its user name and password are the `username` and "
                  "`password` of `listener.name.<listener>.<mechanism>.sasl.jaas.config`, else of "
                  "`sasl.jaas.config`."),
        ConfigKey("sasl.jaas.config", _jaas, "",
                  "JAAS entry of the broker's own client side (`username` and `password` of a "
                  "`PlainLoginModule` or `ScramLoginModule`). A listener's users are given with the "
                  "listener and mechanism prefix instead: "
                  "`listener.name.<listener>.plain.sasl.jaas.config=...PlainLoginModule required "
                  "username=... password=... user_<name>=\"<password>\";`. Never shown by DescribeConfigs.",
                  sensitive=True),
        ConfigKey("connection.failed.authentication.delay.ms", int, 100,
                  "A failed SASL authentication is answered (`SASL_AUTHENTICATION_FAILED`) and the connection "
                  "closed only after this delay, which slows down password guessing.", "ms"),
        ConfigKey("connections.max.reauth.ms", _reauth_ms, 0,
                  "Kafka's re-authentication interval (KIP-368). kafkatw does not re-authenticate: 0, the "
                  "default, is the only value accepted, and a connection stays authenticated until closed."
                  , "ms"),
        # GSSAPI (Kerberos; docs/security.md; Kafka's SaslConfigs and BrokerSecurityConfigs)
        ConfigKey("sasl.kerberos.service.name", str, "",
                  "The Kerberos service name of the broker's principal (`kafka` for `kafka/<host>@<REALM>`), "
                  "which clients ask tickets for; needed when `GSSAPI` is enabled, unless the JAAS entry gives "
                  "`serviceName`. A listener may set its own with "
                  "`listener.name.<listener>.gssapi.sasl.kerberos.service.name`."),
        ConfigKey("sasl.kerberos.principal.to.local.rules", _principal_to_local_rules, ["DEFAULT"],
                  "Rules mapping a client's Kerberos principal to the short name of its `User:` principal, the "
                  "first that applies winning: `DEFAULT` (`name[/host]@REALM` to `name` for the default realm "
                  "of `krb5.conf`) or Kafka's `RULE:[n:format]`, then an optional `(regex)` the formatted name must "
                  "match, an optional `s/pattern/replacement/` (`g`: every match) and `/L` or `/U` (lower, upper "
                  "case). "
                  "A principal no rule maps is refused."),
        # OAUTHBEARER (KIP-255, KIP-768; docs/security.md)
        ConfigKey("sasl.oauthbearer.jwks.endpoint.url", str, "",
                  "`OAUTHBEARER` tokens must be JWTs signed by a key of the JSON Web Key Set at this URL "
                  "(`https://`, `http://` or `file://`; KIP-768). Empty: Kafka's default validator, which takes "
                  "unsecured tokens (`alg: none`), configured by the listener's "
                  "`listener.name.<listener>.oauthbearer.sasl.jaas.config` `unsecuredValidator*` options."),
        ConfigKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", int, 3600000,
                  "The key set is fetched again after this long, logins going on with the keys held meanwhile "
                  "(and kept when the fetch fails); a token with an unknown `kid` starts a fetch at once.", "ms"),
        ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", int, 100,
                  "Least time between the starts of two fetches of the key set (one at a time); doubled after "
                  "each failed fetch in a row.", "ms"),
        ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", int, 10000,
                  "Most time between the starts of two fetches of the key set after failed ones.", "ms"),
        ConfigKey("sasl.oauthbearer.expected.audience", _list, [],
                  "Audiences of which a JWKS-validated token's `aud` must name one; empty: not checked."),
        ConfigKey("sasl.oauthbearer.expected.issuer", str, "",
                  "The `iss` a JWKS-validated token must have; empty: not checked."),
        ConfigKey("sasl.oauthbearer.sub.claim.name", str, "sub",
                  "Claim of a JWKS-validated token naming the principal (`User:<value>`)."),
        ConfigKey("sasl.oauthbearer.scope.claim.name", str, "scope",
                  "Claim of a JWKS-validated token holding its scope."),
        ConfigKey("sasl.oauthbearer.clock.skew.seconds", int, 30,
                  "Allowed difference between the broker's clock and the token issuer's, for `exp` and `iat` "
                  "of JWKS-validated tokens.", "s"),
        ConfigKey("sasl.server.max.receive.size", int, 524288,
                  "Largest frame a client may send before it has authenticated; a larger one closes the "
                  "connection.", "bytes"),
        # --- listeners and TLS (issue 11; docs/security.md) ---
        ConfigKey("listener.security.protocol.map", str, "",
                  "`NAME:PROTOCOL` pairs giving each listener's security protocol (`PLAINTEXT`, `SSL`, "
                  "`SASL_PLAINTEXT`, `SASL_SSL`), e.g. `INTERNAL:SSL,EXTERNAL:SASL_SSL`. Empty: Kafka's default "
                  "map, `PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL`."),
        ConfigKey("inter.broker.listener.name", str, "",
                  "The listener other brokers (replica fetchers, the controller) connect through. Exclusive "
                  "with `security.inter.broker.protocol`. Neither set: the `PLAINTEXT` listener, or the only "
                  "listener when there is one."),
        ConfigKey("security.inter.broker.protocol", str, "",
                  "Security protocol between brokers: the listener named after it is the inter-broker listener "
                  "(Kafka's default is `PLAINTEXT`). Exclusive with `inter.broker.listener.name`."),
        ConfigKey("ssl.keystore.type", str, "PEM",
                  "Format of `ssl.keystore.location`; only `PEM` (KIP-651)."),
        ConfigKey("ssl.keystore.location", str, "",
                  "PEM file with this broker's certificate chain and private key, for `SSL` and `SASL_SSL` "
                  "listeners (and the client certificate of its own inter-broker connections). Per listener: "
                  "`listener.name.<name>.ssl.keystore.location`, as for every `ssl.*` key."),
        ConfigKey("ssl.key.password", str, "",
                  "Password of the private key in `ssl.keystore.location`, when it is encrypted."),
        ConfigKey("ssl.truststore.type", str, "PEM",
                  "Format of `ssl.truststore.location`; only `PEM` (KIP-651)."),
        ConfigKey("ssl.truststore.location", str, "",
                  "PEM file of the certificate authorities trusted to sign client certificates (mutual TLS) "
                  "and other brokers' certificates; empty: the system's trust store."),
        ConfigKey("ssl.client.auth", str, "none",
                  "Client certificates on TLS listeners: `required` (a handshake without a trusted one fails), "
                  "`requested` (asked for, checked when given), or `none`."),
        ConfigKey("ssl.enabled.protocols", _list, ["TLSv1.2", "TLSv1.3"],
                  "TLS versions accepted (`TLSv1.2`, `TLSv1.3`)."),
        ConfigKey("ssl.cipher.suites", _list, [],
                  "Cipher suites allowed for TLS 1.2 (OpenSSL or IANA names); empty: OpenSSL's defaults. "
                  "TLS 1.3 suites are OpenSSL's."),
        ConfigKey("ssl.endpoint.identification.algorithm", str, "https",
                  "`https`: the broker's own client connections check that the other broker's certificate "
                  "names the host connected to (RFC 6125, with service-identity); empty: no check."),
        ConfigKey("ssl.principal.mapping.rules", str, "DEFAULT",
                  "Rules turning a client certificate's distinguished name (RFC 2253) into the principal's "
                  "name: `RULE:pattern/replacement/[LU]` entries, comma-separated, first match wins, and "
                  "`DEFAULT` (the whole name)."),
        ConfigKey("ssl.handshake.timeout.ms", int, 10000,
                  "A TLS handshake not finished in this time closes the connection (kafkatw's; Kafka bounds "
                  "it by `connections.max.idle.ms`).", "ms"),
    ]
}

#: Keys a listener may set for itself as ``listener.name.<listener>.<key>``
#: (Kafka's listener prefix, the listener name in lower case).
LISTENER_CONFIG_KEYS: set[str] = {"sasl.enabled.mechanisms", "sasl.kerberos.principal.to.local.rules"}
#: Keys a listener sets per SASL mechanism as
#: ``listener.name.<listener>.<mechanism>.<key>`` (mechanism in lower case).
MECHANISM_CONFIG_KEYS: dict[str, Callable[[Any], Any]] = {
    "sasl.jaas.config": _jaas,
    "sasl.server.callback.handler.class": _server_callback_handler,
    "sasl.kerberos.service.name": str,
}

#: Topic-level key -> broker-level key whose default it overrides.
TOPIC_CONFIG_KEYS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "preallocate": "log.preallocate",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "message.format.version": "log.message.format.version",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
}


def _remote_storage_enable(value: str | bool) -> bool:
    if _bool(value):
        raise ValueError("kafkatw has no tiered storage (KIP-405): remote.storage.enable must be false")
    return False


#: Topic configs without a broker synonym (Kafka's TopicConfig).
_TOPIC_ONLY_CONFIG: list[ConfigKey] = [
    ConfigKey("leader.replication.throttled.replicas", _list, [],
              "Replicas (`partition:broker`, or `*`) whose replication the leader throttles. Accepted and "
              "stored; no effect: kafkatw applies the follower's throttle only.", type="LIST"),
    ConfigKey("follower.replication.throttled.replicas", _list, [],
              "Replicas (`partition:broker`, or `*` for all) whose fetches from the leader share the "
              "follower's `follower.replication.throttled.rate`, besides the replicas a reassignment adds "
              "(which are always throttled).", type="LIST"),
    ConfigKey("remote.storage.enable", _remote_storage_enable, False,
              "Tiered storage (KIP-405). Only `false`: kafkatw has no remote storage, and `true` is "
              "`INVALID_CONFIG`."),
    ConfigKey("remote.log.copy.disable", _bool, False, "Tiered storage (KIP-950); no effect here."),
    ConfigKey("remote.log.delete.on.disable", _bool, False, "Tiered storage (KIP-950); no effect here."),
]

#: Kafka's types where L{config_type} cannot derive them from the parser.
_TYPES: dict[str, str] = {
    **{name: "LONG" for name in (
        "log.roll.ms", "log.retention.ms", "log.retention.bytes", "log.flush.interval.messages",
        "log.flush.interval.ms", "log.flush.scheduler.interval.ms", "log.flush.offset.checkpoint.interval.ms",
        "log.retention.check.interval.ms", "leader.replication.throttled.rate",
        "follower.replication.throttled.rate", "replica.lag.time.max.ms", "leader.imbalance.check.interval.seconds",
        "log.message.timestamp.difference.max.ms", "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms", "log.segment.delete.delay.ms", "log.roll.jitter.ms",
        "log.local.retention.ms", "log.local.retention.bytes", "log.cleaner.delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size", "log.cleaner.io.max.bytes.per.second")},
    "log.cleanup.policy": "LIST",
    "log.cleaner.min.cleanable.ratio": "DOUBLE",
    "log.cleaner.io.buffer.load.factor": "DOUBLE",
}

#: KIP-569's ConfigType codes of DescribeConfigs v3+.
CONFIG_TYPE_CODES: dict[str, int] = {
    "UNKNOWN": 0, "BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7,
    "CLASS": 8, "PASSWORD": 9,
}


def config_type(key: ConfigKey) -> str:
    """
    Kafka's type of C{key} (KIP-569): its own C{type}, else the known Kafka
    type of its name (or of its broker synonym, for a topic key), else derived
    from its parser (C{int} INT, C{float} DOUBLE, booleans BOOLEAN, lists LIST,
    the rest STRING).
    """
    if key.type:
        return key.type
    if key.sensitive:
        return "PASSWORD"
    name = TOPIC_CONFIG_KEYS.get(key.name, key.name)
    if name in _TYPES:
        return _TYPES[name]
    if key.parse is int:
        return "INT"
    if key.parse is float:
        return "DOUBLE"
    if key.parse is _bool or isinstance(key.default, bool):
        return "BOOLEAN"
    if key.parse is _list or isinstance(key.default, list):
        return "LIST"
    return "STRING"


def is_sensitive(name: str, key: ConfigKey | None = None) -> bool:
    """
    Whether a config's value is secret (Kafka's PASSWORD type and
    C{*.sasl.jaas.config}): DescribeConfigs answers its value as null.
    """
    if key is None:
        key = BROKER_CONFIG.get(name) or TOPIC_CONFIG.get(name)
    return (key is not None and config_type(key) == "PASSWORD") or name.endswith("sasl.jaas.config") \
        or name.endswith(".password")


#: Topic key -> its L{ConfigKey}: every topic config Kafka defines, under the
#: topic name, with the broker synonym's parser and default where it has one.
TOPIC_CONFIG: dict[str, ConfigKey] = {
    **{topic_key: ConfigKey(topic_key, BROKER_CONFIG[broker_key].parse, BROKER_CONFIG[broker_key].default,
                            BROKER_CONFIG[broker_key].doc, BROKER_CONFIG[broker_key].unit,
                            config_type(BROKER_CONFIG[broker_key]))
       for topic_key, broker_key in TOPIC_CONFIG_KEYS.items() if broker_key in BROKER_CONFIG},
    **{key.name: key for key in _TOPIC_ONLY_CONFIG},
}

#: Kafka's validators of topic configs (LogConfig's ConfigDef): key -> smallest value.
_AT_LEAST: dict[str, int] = {
    "segment.bytes": 14, "segment.ms": 1, "segment.jitter.ms": 0, "segment.index.bytes": 4,
    "flush.messages": 1, "flush.ms": 0, "retention.ms": -1, "max.message.bytes": 0,
    "index.interval.bytes": 0, "file.delete.delay.ms": 0, "min.insync.replicas": 1,
    "message.timestamp.difference.max.ms": 0, "message.timestamp.before.max.ms": 0,
    "message.timestamp.after.max.ms": 0, "local.retention.ms": -2, "local.retention.bytes": -2,
}
#: KIP-390's ranges of the compression levels.
_BETWEEN: dict[str, tuple[int, int, set[int]]] = {
    "compression.gzip.level": (1, 9, {-1}), "compression.lz4.level": (1, 17, set()),
    "compression.zstd.level": (-131072, 22, set()),
}
_INT_MAX = 2**31 - 1


def topic_config_key(name: str) -> ConfigKey | None:
    """The L{ConfigKey} of topic config C{name}, C{None} for an unknown one."""
    return TOPIC_CONFIG.get(name)


def parse_topic_config(name: str, value: Any) -> Any:
    """
    Parse and validate one topic config value as Kafka's LogConfig does
    (type, range, allowed values).

    @raise KeyError: C{name} is not a topic config.
    @raise ValueError: the value is invalid; the message says why, in Kafka's
        words where it has them (C{Value must be at least 1}).
    """
    key = TOPIC_CONFIG[name]
    kind = config_type(key)
    if value is None:
        raise ValueError("a value is required")
    if kind == "BOOLEAN":
        try:
            _bool(value)
        except ValueError:
            raise ValueError("Expected value to be either true or false") from None
    try:
        parsed = key.parse(value)
    except (TypeError, ValueError) as e:
        if kind in ("INT", "LONG", "SHORT"):
            raise ValueError(f"Not a number of type {kind}") from None
        raise ValueError(str(e)) from None
    if kind == "INT" and isinstance(parsed, int) and not -2**31 <= parsed <= _INT_MAX:
        raise ValueError("Not a number of type INT")
    if kind == "LONG" and isinstance(parsed, int) and not -2**63 <= parsed <= _LONG_MAX:
        raise ValueError("Not a number of type LONG")
    if name in _AT_LEAST and parsed < _AT_LEAST[name]:
        raise ValueError(f"Value must be at least {_AT_LEAST[name]}")
    if name in _BETWEEN:
        low, high, extra = _BETWEEN[name]
        if parsed not in extra and not low <= parsed <= high:
            raise ValueError(f"Value must be between {low} and {high}")
    return parsed


def _dynamic_broker_configs() -> frozenset[str]:
    # Kafka's DynamicBrokerConfig: DynamicLogConfig's reconfigurable configs (the broker
    # synonyms of topic configs, but the deprecated log.message.format.version), the
    # replication quotas (DynamicReplicationConfigs); log.cleaner.* are matched by prefix.
    synonyms = set(TOPIC_CONFIG_KEYS.values()) - {"log.message.format.version"}
    return frozenset(synonyms | {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
                     | PER_BROKER_DYNAMIC_CONFIGS)


#: Dynamic broker configs set for one broker only (C{/config/brokers/<id>}), never as the
#: cluster default (Kafka's C{DynamicBrokerConfig.PerBrokerConfigs}; its
#: C{DynamicListenerConfig}): the broker registers its new endpoints in C{/brokers/ids/<id>}.
PER_BROKER_DYNAMIC_CONFIGS: frozenset[str] = frozenset({"advertised.listeners"})


#: Broker configs that AlterConfigs/IncrementalAlterConfigs may change while
#: brokers run (besides every C{log.cleaner.*} key): L{is_dynamic_broker_config}.
DYNAMIC_BROKER_CONFIGS: frozenset[str] = _dynamic_broker_configs()


def is_dynamic_broker_config(name: str) -> bool:
    """Whether broker config C{name} can be updated dynamically (Kafka's DynamicBrokerConfig)."""
    return name in DYNAMIC_BROKER_CONFIGS or (name.startswith("log.cleaner.") and name in BROKER_CONFIG)
