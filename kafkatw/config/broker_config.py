"""
A broker's configuration as it reads it: L{BrokerConfig}, built from the
defaults of L{kafkatw.config.schema.BROKER_CONFIG}, then a
C{server.properties} file, then C{--override key=value} pairs, in that order,
under the dynamic layers from ZooKeeper (Kafka's C{KafkaConfig} values and
C{DynamicBrokerConfig}); the value parser of dynamic updates
(L{parse_broker_value}) and a topic's effective configuration
(L{topic_log_config}).

Source: Kafka documentation, "Broker Configs", "Updating Broker Configs".
"""

from __future__ import annotations

from typing import Any, Mapping

from .schema import (
    BROKER_CONFIG,
    LISTENER_CONFIG_KEYS,
    MECHANISM_CONFIG_KEYS,
    PER_BROKER_DYNAMIC_CONFIGS,
    TOPIC_CONFIG,
    TOPIC_CONFIG_KEYS,
    is_dynamic_broker_config,
    parse_topic_config,
)

__all__ = [
    "BrokerConfig",
    "parse_broker_value",
    "SINGLE_BROKER_DEFAULTS",
    "topic_log_config",
    "DYNAMIC_TOPIC_CONFIG",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "STATIC_BROKER_CONFIG",
    "DEFAULT_CONFIG",
]

#: Kafka's listener prefix of per-listener keys (L{LISTENER_CONFIG_KEYS},
#: L{MECHANISM_CONFIG_KEYS}): C{listener.name.<listener>.<key>}.
_LISTENER_PREFIX = "listener.name."

#: Kafka's ConfigSource codes (DescribeConfigs v1+).
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


class BrokerConfig:
    """
    A broker's configuration: Kafka key -> parsed value.

    Three layers, looked up in Kafka's order of precedence: this broker's
    dynamic configs (C{/config/brokers/<id>}), the cluster-wide dynamic
    defaults (C{/config/brokers/<default>}), then the static configuration
    (defaults, C{server.properties}, C{--override}).  The dynamic layers are
    replaced whole by L{set_dynamic}, so every reader of C{config[key]} sees
    the new value at once.

    @raise ValueError: for an unknown key or a value that does not parse.
    """

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {name: key.default for name, key in BROKER_CONFIG.items()}
        self._static_keys: set[str] = set()
        self._dynamic: dict[int, dict[str, Any]] = {DYNAMIC_BROKER_CONFIG: {}, DYNAMIC_DEFAULT_BROKER_CONFIG: {}}
        self._listener_values: dict[str, Any] = {}
        for name, value in (values or {}).items():
            self.set(name, value)

    def set_dynamic(self, source: int, values: Mapping[str, str]) -> dict[str, str]:
        """
        Replace the dynamic layer C{source} (L{DYNAMIC_BROKER_CONFIG} or
        L{DYNAMIC_DEFAULT_BROKER_CONFIG}) with C{values} (raw strings, as
        stored in ZooKeeper).  Keys that are unknown, not dynamic or do not
        parse are left out.

        @return: the keys left out, with the reason.
        """
        layer: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        for name, value in values.items():
            key = BROKER_CONFIG.get(name)
            if key is None or not is_dynamic_broker_config(name):
                skipped[name] = "not a dynamic broker config"
                continue
            if source == DYNAMIC_DEFAULT_BROKER_CONFIG and name in PER_BROKER_DYNAMIC_CONFIGS:
                skipped[name] = "set per broker only, not as the cluster default"
                continue
            try:
                layer[name] = parse_broker_value(name, value)
            except ValueError as e:
                skipped[name] = str(e)
        self._dynamic[source] = layer
        return skipped

    def dynamic(self, source: int) -> dict[str, Any]:
        """The dynamic layer C{source}: key -> parsed value."""
        return dict(self._dynamic[source])

    def static(self, name: str) -> Any:
        """C{name}'s static value (default, properties file or override)."""
        return self._values[name]

    def is_static(self, name: str) -> bool:
        """Whether C{name} was set statically (properties file or override), not left at its default."""
        return name in self._static_keys

    def source(self, name: str) -> int:
        """Where C{name}'s value comes from: one of Kafka's ConfigSource codes."""
        for source in (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG):
            if name in self._dynamic[source]:
                return source
        return STATIC_BROKER_CONFIG if name in self._static_keys else DEFAULT_CONFIG

    _ALIASES = ("log.dir", "log.roll.hours", "log.retention.hours", "log.retention.minutes")

    @classmethod
    def knows(cls, name: str) -> bool:
        """Whether C{name} is a key (or an alias of one) kafkatw understands."""
        return name in BROKER_CONFIG or name in cls._ALIASES or cls._listener_key(name) is not None

    @staticmethod
    def _listener_key(name: str) -> tuple[str, str | None, str] | None:
        """
        C{(listener, mechanism or None, key)} of a listener-prefixed key
        (L{LISTENER_CONFIG_KEYS}, every C{ssl.*} key, L{MECHANISM_CONFIG_KEYS}), else C{None}.
        """
        if not name.startswith(_LISTENER_PREFIX):
            return None
        listener, _, rest = name[len(_LISTENER_PREFIX):].partition(".")
        if not listener:
            return None
        if rest in LISTENER_CONFIG_KEYS or (rest.startswith("ssl.") and rest in BROKER_CONFIG):
            return listener, None, rest
        mechanism, _, key = rest.partition(".")
        from ..security.sasl import MECHANISMS

        if mechanism.upper() in MECHANISMS and key in MECHANISM_CONFIG_KEYS:
            return listener, mechanism.upper(), key
        return None

    def listener_value(self, listener: str, key: str, mechanism: str | None = None, inherit: bool = True) -> Any:
        """
        C{key} as listener C{listener} sees it: C{listener.name.<listener>.<mechanism>.<key>},
        else C{listener.name.<listener>.<key>}, else (when C{inherit}) the
        broker-wide C{key}, else C{None} (listener and mechanism names in any case).
        """
        prefix = f"{_LISTENER_PREFIX}{listener.lower()}."
        if mechanism is not None and f"{prefix}{mechanism.lower()}.{key}" in self._listener_values:
            return self._listener_values[f"{prefix}{mechanism.lower()}.{key}"]
        if f"{prefix}{key}" in self._listener_values:
            return self._listener_values[f"{prefix}{key}"]
        return self._values.get(key) if inherit else None

    def for_listener(self, listener: str, name: str) -> Any:
        """
        The value of C{name} for one listener: C{listener.name.<listener>.<name>}
        (listener name in any case, as Kafka reads it) when set, else C{name}.
        """
        return self.listener_value(listener, name)

    def set(self, name: str, value: Any) -> None:
        prefixed = self._listener_key(name)
        if prefixed is not None:
            listener, mechanism, key = prefixed
            parse = MECHANISM_CONFIG_KEYS[key] if mechanism else BROKER_CONFIG[key].parse
            try:
                parsed = parse(value)
            except (TypeError, ValueError) as e:
                raise ValueError(f"bad value for {name}: {e}") from None
            canonical = f"{_LISTENER_PREFIX}{listener.lower()}." + (f"{mechanism.lower()}." if mechanism else "")
            self._listener_values[canonical + key] = parsed
            return
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
            if key.sensitive:  # the value is a secret: never in a message
                raise ValueError(f"bad value for {name}: {e}") from None
            raise ValueError(f"bad value for {name}: {value!r} ({e})") from None
        self._static_keys.add(name)

    def use_single_broker_defaults(self) -> list[str]:
        """
        Set L{SINGLE_BROKER_DEFAULTS} for each key not set in the properties
        file or an override: what C{--zookeeper embedded} does, so that
        transactions work on the one broker the README starts.  They are
        described as static configs (DescribeConfigs' C{STATIC_BROKER_CONFIG}).

        @return: the keys set.
        """
        changed = [name for name in SINGLE_BROKER_DEFAULTS if not self.is_static(name)]
        for name in changed:
            self.set(name, SINGLE_BROKER_DEFAULTS[name])
        return changed

    def __getitem__(self, name: str) -> Any:
        dynamic = self._dynamic
        if name in dynamic[DYNAMIC_BROKER_CONFIG]:
            return dynamic[DYNAMIC_BROKER_CONFIG][name]
        if name in dynamic[DYNAMIC_DEFAULT_BROKER_CONFIG]:
            return dynamic[DYNAMIC_DEFAULT_BROKER_CONFIG][name]
        return self._values[name]

    def as_dict(self) -> dict[str, Any]:
        return {name: self[name] for name in self._values}


#: The internal topics' replication that Kafka's shipped single-broker C{config/server.properties}
#: sets (its defaults, 3 and 2, need three brokers): C{config/server.properties} ships them, and
#: a broker on an embedded ZooKeeper takes them unless set (L{BrokerConfig.use_single_broker_defaults}).
#: kafkatw's one internal topic is C{__transaction_state}; consumer offsets live in ZooKeeper.
SINGLE_BROKER_DEFAULTS: dict[str, str] = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


def parse_broker_value(name: str, value: Any) -> Any:
    """
    Parse and validate a broker config value; a broker synonym of a topic
    config gets the topic config's validation (L{parse_topic_config}).

    @raise ValueError: unknown key or invalid value.
    """
    key = BROKER_CONFIG.get(name)
    if key is None:
        raise ValueError(f"unknown broker config {name!r}")
    for topic_key, broker_key in TOPIC_CONFIG_KEYS.items():
        if broker_key == name and topic_key in TOPIC_CONFIG:
            return parse_topic_config(topic_key, value)
    try:
        parsed = key.parse(value)
    except (TypeError, ValueError) as e:
        raise ValueError(str(e)) from None
    if name.endswith("throttled.rate") and parsed < 0:
        raise ValueError("Value must be at least 0")
    return parsed


def topic_log_config(broker: BrokerConfig, overrides: Mapping[str, str], strict: bool = True) -> dict[str, Any]:
    """
    The effective topic-level configuration: every key of L{TOPIC_CONFIG}
    from the broker's current values of their synonyms (dynamic, static or
    default), replaced by the topic's overrides.

    @param strict: raise for a bad override; C{False} leaves it out (a znode
        written by another tool must not stop a broker).
    @raise ValueError: for an unknown topic key or an invalid value, in
        Kafka's words (C{Unknown topic config name: k},
        C{Invalid value v for configuration k: ...}).
    """
    if not strict:
        result = topic_log_config(broker, {})
        for name, value in overrides.items():
            try:
                result[name] = parse_topic_config(name, value)
            except (KeyError, ValueError):
                pass
        return result
    result = {topic_key: key.default for topic_key, key in TOPIC_CONFIG.items()}
    result.update({topic_key: broker[broker_key] for topic_key, broker_key in TOPIC_CONFIG_KEYS.items()})
    for name, value in overrides.items():
        if name not in TOPIC_CONFIG:
            raise ValueError(f"Unknown topic config name: {name}")
        try:
            result[name] = parse_topic_config(name, value)
        except ValueError as e:
            raise ValueError(f"Invalid value {value} for configuration {name}: {e}") from None
    return result
