"""
Broker and topic configuration under Apache Kafka's own names.

Every key is the one Kafka documents (``broker.id``, ``log.dirs``,
``log.segment.bytes`` ...), with Kafka's default where kafkatw follows it.  A
L{BrokerConfig} is built from defaults, then a ``server.properties`` file, then
``--override key=value`` pairs, in that order.  Topic-level overrides
(``retention.ms``, ``segment.bytes`` ...) map onto broker keys through
L{TOPIC_CONFIG_KEYS}.

The key tables of docs/configuration.md are generated from these definitions
(L{config_markdown}); C{python -m kafkatw.config --update docs/configuration.md}
rewrites them and C{--check} tells whether they are up to date.

Source: Kafka documentation, "Broker Configs" and "Topic Configs".
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

__all__ = [
    "ConfigKey",
    "BROKER_CONFIG",
    "TOPIC_CONFIG_KEYS",
    "BrokerConfig",
    "parse_properties",
    "topic_log_config",
    "config_markdown",
    "splice_config_markdown",
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
        docs/configuration.md (L{config_markdown}) and the C{documentation} of
        DescribeConfigs, so it uses Markdown's backticks and no links.
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
                  "Time to wait for the first ZooKeeper connection; past it the broker does not start.", "ms"),
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
                  "Only `delete` is supported: kafkatw has no log compaction. `compact` (or `compact,delete`) "
                  "is refused when the options are parsed (the broker does not start, exit status 2), and is "
                  "`INVALID_CONFIG` on a topic."),
        ConfigKey("log.message.timestamp.type", _timestamp_type, "CreateTime",
                  "`CreateTime` or `LogAppendTime` (see docs/storage.md); any other value is "
                  "refused when the options are parsed."),
        ConfigKey("producer.id.block.size", int, 1000, "Producer ids reserved in ZooKeeper at a time.", "ids"),
        ConfigKey("metrics.port", int, -1,
                  "Prometheus metrics at `http://127.0.0.1:<port>/metrics` (-1: off; 0: any free port). Names "
                  "follow the JMX exporter's rendering of Kafka's MBeans, e.g. "
                  "`kafka_server_brokertopicmetrics_messagesin_total`, "
                  "`kafka_log_log_logendoffset{topic,partition}`.", "port"),
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
        ConfigKey("num.replica.fetchers", int, 1, "Fetcher connections per source broker.", "fetchers"),
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
        ConfigKey("auto.leader.rebalance.enable", _bool, True,
                  "The controller moves leaderships back to preferred replicas (the first assigned) when a "
                  "broker's share of partitions it prefers but does not lead exceeds "
                  "leader.imbalance.per.broker.percentage."),
        ConfigKey("leader.imbalance.check.interval.seconds", int, 300,
                  "How often the controller checks the leader imbalance.", "s"),
        ConfigKey("leader.imbalance.per.broker.percentage", int, 10,
                  "Share of a broker's preferred partitions led elsewhere that triggers a preferred election.",
                  "%"),
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


def _listener_key(name: str) -> tuple[str, str] | None:
    """C{(listener, key)} of a per-listener C{listener.name.<listener>.ssl.*} key, else C{None}."""
    if not name.startswith("listener.name."):
        return None
    listener, _, key = name[len("listener.name."):].partition(".")
    if listener and key.startswith("ssl.") and key in BROKER_CONFIG:
        return listener.lower(), key
    return None


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
        return name in BROKER_CONFIG or name in cls._ALIASES or _listener_key(name) is not None

    def for_listener(self, listener: str, name: str) -> Any:
        """
        The value of C{name} for one listener: C{listener.name.<listener>.<name>}
        (listener name in lower case, as Kafka writes it) when set, else C{name}.
        """
        return self._values.get(f"listener.name.{listener.lower()}.{name}", self._values[name])

    def set(self, name: str, value: Any) -> None:
        if name == "log.dir":
            name = "log.dirs"
        if name == "log.roll.hours":
            name, value = "log.roll.ms", int(value) * 3600000
        elif name == "log.retention.hours":
            name, value = "log.retention.ms", int(value) * 3600000
        elif name == "log.retention.minutes":
            name, value = "log.retention.ms", int(value) * 60000
        per_listener = _listener_key(name)
        if per_listener is not None:
            name = f"listener.name.{per_listener[0]}.{per_listener[1]}"
        try:
            key = BROKER_CONFIG[per_listener[1] if per_listener else name]
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


# -- docs/configuration.md ---------------------------------------------------------------

#: The generated tables of docs/configuration.md lie between these two lines.
MARKDOWN_BEGIN = "<!-- BEGIN generated by `python -m kafkatw.config --update docs/configuration.md` -->"
MARKDOWN_END = "<!-- END generated -->"


def _markdown_value(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return f"`{','.join(value)}`" if value else "(empty)"
    return f"`{value}`"


def config_markdown() -> str:
    """
    The Markdown tables of every broker key (L{BROKER_CONFIG}: name, default,
    unit, documentation) and every topic key (L{TOPIC_CONFIG_KEYS}), in
    definition order, for docs/configuration.md.
    """
    lines = [
        "### Broker keys (`BROKER_CONFIG`)",
        "",
        "| key | default | unit | meaning |",
        "|---|---|---|---|",
    ]
    for key in BROKER_CONFIG.values():
        lines.append(f"| `{key.name}` | {_markdown_value(key.default)} | {key.unit or '—'} | "
                     f"{key.doc.replace('|', '&#124;')} |")
    lines += [
        "",
        "### Topic keys (`TOPIC_CONFIG_KEYS`)",
        "",
        "| topic key | overrides broker key | broker default |",
        "|---|---|---|",
    ]
    for topic_key, broker_key in TOPIC_CONFIG_KEYS.items():
        lines.append(f"| `{topic_key}` | `{broker_key}` | {_markdown_value(BROKER_CONFIG[broker_key].default)} |")
    return "\n".join(lines) + "\n"


def splice_config_markdown(document: str) -> str:
    """
    C{document} with the text between L{MARKDOWN_BEGIN} and L{MARKDOWN_END}
    replaced by L{config_markdown}.

    @raise ValueError: the markers are missing or out of order.
    """
    begin, end = document.find(MARKDOWN_BEGIN), document.find(MARKDOWN_END)
    if begin < 0 or end < begin:
        raise ValueError(f"expected the lines {MARKDOWN_BEGIN!r} and {MARKDOWN_END!r}, in that order")
    head = document[:begin + len(MARKDOWN_BEGIN)]
    return f"{head}\n{config_markdown()}\n{document[end:]}"


def main(argv: Sequence[str]) -> int:
    """
    C{python -m kafkatw.config --markdown}: print the tables;
    C{--update PATH}: rewrite them in PATH; C{--check PATH}: exit 1 when PATH's
    tables differ from the code.
    """
    usage = "usage: python -m kafkatw.config (--markdown | --update PATH | --check PATH)"
    if list(argv) == ["--markdown"]:
        sys.stdout.write(config_markdown())
        return 0
    if len(argv) != 2 or argv[0] not in ("--update", "--check"):
        print(usage, file=sys.stderr)
        return 2
    path = argv[1]
    with open(path, encoding="utf-8") as f:
        document = f.read()
    try:
        updated = splice_config_markdown(document)
    except ValueError as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    if argv[0] == "--check":
        if updated != document:
            print(f"{path}: the configuration tables are out of date; run "
                  f"python -m kafkatw.config --update {path}", file=sys.stderr)
            return 1
        return 0
    if updated != document:
        with open(path, "w", encoding="utf-8") as f:
            f.write(updated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
