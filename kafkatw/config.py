"""
Broker and topic configuration under Apache Kafka's own names.

Every key is the one Kafka documents (``broker.id``, ``log.dirs``,
``log.segment.bytes`` ...), with Kafka's default where kafkatw follows it.  A
L{BrokerConfig} is built from defaults, then a ``server.properties`` file, then
``--override key=value`` pairs, in that order.  Topic-level overrides
(``retention.ms``, ``segment.bytes`` ...) map onto broker keys through
L{TOPIC_CONFIG_KEYS}.

Source: Kafka documentation, "Broker Configs" and "Topic Configs".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = [
    "ConfigKey",
    "BROKER_CONFIG",
    "TOPIC_CONFIG_KEYS",
    "BrokerConfig",
    "parse_properties",
    "topic_log_config",
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

    @ivar unit: the unit of the value (``ms``, ``bytes``, ``messages``) or ``""``.
    """

    name: str
    parse: Callable[[Any], Any]
    default: Any
    doc: str
    unit: str = ""


def _cleanup_policy(value: str) -> str:
    # Kafka's values are "delete", "compact" and "compact,delete"; kafkatw has no
    # log cleaner, and a broker that accepted "compact" would delete by retention
    # what the user meant to keep by key.
    policies = [part.strip() for part in str(value).split(",") if part.strip()]
    if policies != ["delete"]:
        raise ValueError("kafkatw has no log compaction; only 'delete' is supported")
    return "delete"


def _timestamp_type(value: str) -> str:
    if value not in ("CreateTime", "LogAppendTime"):
        raise ValueError("must be CreateTime or LogAppendTime")
    return value


_LONG_MAX = 2**63 - 1

BROKER_CONFIG: dict[str, ConfigKey] = {
    key.name: key
    for key in [
        ConfigKey("broker.id", int, 0, "Identifier of this broker, unique in the cluster."),
        ConfigKey("log.dirs", _list, ["/tmp/kafkatw-logs"], "Comma-separated directories holding partition logs."),
        ConfigKey("listeners", _list, ["tcp:9092:interface=127.0.0.1"],
                  "Twisted server endpoint strings to listen on (Kafka's PLAINTEXT://host:port is accepted too)."),
        ConfigKey("advertised.listeners", _list, [],
                  "host:port pairs given to clients in Metadata; default: taken from listeners."),
        ConfigKey("zookeeper.connect", str, "embedded",
                  "HOST:PORT[,HOST:PORT][/chroot], or 'embedded[:PORT]' to start a child ZooKeeper on "
                  "127.0.0.1:PORT (default 2181, or $KAFKATW_EMBEDDED_ZOOKEEPER_PORT)."),
        ConfigKey("zookeeper.session.timeout.ms", int, 18000, "ZooKeeper session timeout.", "ms"),
        ConfigKey("zookeeper.connection.timeout.ms", int, 18000, "Time to wait for the first ZooKeeper connection.", "ms"),
        ConfigKey("num.partitions", int, 1, "Default partition count of auto-created topics."),
        ConfigKey("default.replication.factor", int, 1, "Default replication factor of auto-created topics."),
        ConfigKey("auto.create.topics.enable", _bool, True, "Create a topic when a client asks for its metadata (Produce never creates one)."),
        ConfigKey("delete.topic.enable", _bool, True, "Allow DeleteTopics."),
        ConfigKey("message.max.bytes", int, 1048588, "Largest record batch accepted.", "bytes"),
        ConfigKey("socket.request.max.bytes", int, 104857600, "Largest request frame accepted.", "bytes"),
        ConfigKey("log.segment.bytes", int, 1073741824, "Size at which a segment is rolled.", "bytes"),
        ConfigKey("log.roll.ms", int, 604800000, "Age at which a segment is rolled (log.roll.hours=168).", "ms"),
        ConfigKey("log.index.interval.bytes", int, 4096, "Bytes of log between two offset-index entries.", "bytes"),
        ConfigKey("log.index.size.max.bytes", int, 10485760, "Largest offset index file per segment.", "bytes"),
        ConfigKey("log.flush.interval.messages", int, _LONG_MAX, "Records appended before a partition is fsynced.", "messages"),
        ConfigKey("log.flush.interval.ms", int, _LONG_MAX, "Age of unflushed data before a partition is fsynced.", "ms"),
        ConfigKey("log.flush.scheduler.interval.ms", int, 1000, "How often the flush policy is checked.", "ms"),
        ConfigKey("log.flush.offset.checkpoint.interval.ms", int, 60000, "How often recovery points are checkpointed.", "ms"),
        ConfigKey("log.retention.ms", int, 604800000, "Age after which whole segments are deleted (-1: never).", "ms"),
        ConfigKey("log.retention.bytes", int, -1, "Partition size above which old segments are deleted (-1: never).", "bytes"),
        ConfigKey("log.retention.check.interval.ms", int, 300000, "How often retention runs.", "ms"),
        ConfigKey("log.cleanup.policy", _cleanup_policy, "delete",
                  "Only 'delete' is supported ('compact' is refused: kafkatw has no log compaction)."),
        ConfigKey("log.message.timestamp.type", _timestamp_type, "CreateTime", "CreateTime or LogAppendTime."),
        ConfigKey("producer.id.block.size", int, 1000, "Producer ids reserved in ZooKeeper at a time."),
        ConfigKey("metrics.port", int, -1, "Prometheus metrics port on 127.0.0.1 (-1: off)."),
        # consumer groups (Kafka's group coordinator configs; docs/consumer-groups.md)
        ConfigKey("group.initial.rebalance.delay.ms", int, 3000,
                  "How long the coordinator waits for more members to join a new (empty) group before its "
                  "first rebalance completes; each new member extends the wait by this much, up to the "
                  "rebalance timeout.", "ms"),
        ConfigKey("group.min.session.timeout.ms", int, 6000,
                  "Smallest session timeout a member may ask for (else INVALID_SESSION_TIMEOUT).", "ms"),
        ConfigKey("group.max.session.timeout.ms", int, 1800000,
                  "Largest session timeout a member may ask for (else INVALID_SESSION_TIMEOUT).", "ms"),
        ConfigKey("group.max.size", int, 2147483647,
                  "Most members a consumer group may have (else GROUP_MAX_SIZE_REACHED).", "members"),
        ConfigKey("offset.metadata.max.bytes", int, 4096,
                  "Longest metadata string an offset commit may carry (else OFFSET_METADATA_TOO_LARGE).", "bytes"),
        ConfigKey("offsets.commit.timeout.ms", int, 5000,
                  "How long an offset commit waits for its ZooKeeper write before it is answered "
                  "REQUEST_TIMED_OUT.", "ms"),
        ConfigKey("offsets.commit.batch.interval.ms", int, 10,
                  "kafkatw: offset commits are written to ZooKeeper in batches at most this often, the latest "
                  "value per group and partition; a commit is answered once the batch holding it is written.",
                  "ms"),
    ]
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
}


def parse_properties(text: str) -> dict[str, str]:
    """
    Parse a Java-style ``.properties`` text (``key=value`` or ``key: value``
    lines, ``#``/``!`` comments, trailing-backslash continuations).

    @return: key -> raw string value.
    """
    result: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        for sep_index, char in enumerate(line):
            if char in "=:":
                key, value = line[:sep_index].strip(), line[sep_index + 1:].strip()
                break
        else:
            key, value = line, ""
        result[key] = value
    return result


class BrokerConfig:
    """
    A broker's configuration: Kafka key -> parsed value.

    @raise ValueError: for an unknown key or a value that does not parse.
    """

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {name: key.default for name, key in BROKER_CONFIG.items()}
        for name, value in (values or {}).items():
            self.set(name, value)

    _ALIASES = ("log.dir", "log.roll.hours", "log.retention.hours", "log.retention.minutes")

    @classmethod
    def knows(cls, name: str) -> bool:
        """Whether C{name} is a key (or an alias of one) kafkatw understands."""
        return name in BROKER_CONFIG or name in cls._ALIASES

    def set(self, name: str, value: Any) -> None:
        if name == "log.dir":
            name = "log.dirs"
        if name == "log.roll.hours":
            name, value = "log.roll.ms", int(value) * 3600000
        elif name == "log.retention.hours":
            name, value = "log.retention.ms", int(value) * 3600000
        elif name == "log.retention.minutes":
            name, value = "log.retention.ms", int(value) * 60000
        try:
            key = BROKER_CONFIG[name]
        except KeyError:
            raise ValueError(f"unknown config {name!r}") from None
        try:
            self._values[name] = key.parse(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad value for {name}: {value!r} ({e})") from None

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)


def topic_log_config(broker: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, Any]:
    """
    The effective topic-level configuration: every key of L{TOPIC_CONFIG_KEYS}
    from the broker defaults, replaced by the topic's overrides.

    @raise ValueError: for an unknown topic key or an unparsable value.
    """
    result = {topic_key: broker[broker_key] for topic_key, broker_key in TOPIC_CONFIG_KEYS.items()}
    for name, value in overrides.items():
        if name not in TOPIC_CONFIG_KEYS:
            raise ValueError(f"unknown topic config {name!r}")
        try:
            result[name] = BROKER_CONFIG[TOPIC_CONFIG_KEYS[name]].parse(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad value for {name}: {value!r} ({e})") from None
    return result
