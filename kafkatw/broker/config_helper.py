"""
DescribeConfigs answers, after Kafka's C{ConfigHelper}: each config's value,
where it comes from (its source), its synonyms, its type (KIP-569) and its
documentation, with secrets left out.

Sources, in the order Kafka looks them up (KIP-226)::

    1 DYNAMIC_TOPIC_CONFIG            /config/topics/<topic>
    2 DYNAMIC_BROKER_CONFIG           /config/brokers/<id>
    3 DYNAMIC_DEFAULT_BROKER_CONFIG   /config/brokers/<default>
    4 STATIC_BROKER_CONFIG            server.properties, --override
    5 DEFAULT_CONFIG                  the key's default

A topic config's synonyms are its own override (when set) and then its broker
synonym (C{retention.ms}: C{log.retention.ms}) at each broker layer that sets
it; the first synonym gives the value and the source.  Sensitive values
(passwords, C{*.sasl.jaas.config}) are answered as null.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..config import (
    BROKER_CONFIG,
    CONFIG_TYPE_CODES,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIG,
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    ConfigKey,
    config_type,
    is_dynamic_broker_config,
    is_sensitive,
    topic_log_config,
)

__all__ = ["format_config_value", "describe_topic_configs", "describe_broker_configs", "internal_topic_configs"]


def internal_topic_configs(config: BrokerConfig, configs: dict[str, str]) -> dict[str, str]:
    """
    The configs an internal topic (C{__transaction_state},
    C{__share_group_state}) is created with: C{configs} (compacted, as
    Kafka's) when this broker accepts them, else C{cleanup.policy=delete}
    with unlimited retention (C{retention.ms=-1}, C{retention.bytes=-1}):
    nothing is lost, the log only grows.
    """
    configs = dict(configs)
    try:
        topic_log_config(config, configs)
    except ValueError:
        configs.update({"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"})
    return configs


def format_config_value(value: Any) -> str | None:
    """A parsed value as Kafka writes it (C{ConfigDef.convertToString}): C{true}, C{a,b}, C{1000}."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _broker_synonyms(config: BrokerConfig, name: str, per_broker: bool) -> list[tuple[str, str | None, int]]:
    synonyms = []
    layers = (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG) if per_broker else \
        (DYNAMIC_DEFAULT_BROKER_CONFIG,)
    for source in layers:
        layer = config.dynamic(source)
        if name in layer:
            synonyms.append((name, format_config_value(layer[name]), source))
    if config.is_static(name):
        synonyms.append((name, format_config_value(config.static(name)), STATIC_BROKER_CONFIG))
    synonyms.append((name, format_config_value(BROKER_CONFIG[name].default), DEFAULT_CONFIG))
    return synonyms


def _entry(name: str, key: ConfigKey, synonyms: list[tuple[str, str | None, int]], read_only: bool,
           include_synonyms: bool, include_documentation: bool) -> dict[str, Any]:
    sensitive = is_sensitive(name, key)
    value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (format_config_value(key.default),
                                                                      DEFAULT_CONFIG)
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "config_source": source,
        "is_sensitive": sensitive,
        "synonyms": [{"name": n, "value": None if sensitive else v, "source": s} for n, v, s in synonyms]
        if include_synonyms else [],
        "config_type": CONFIG_TYPE_CODES[config_type(key)],
        "documentation": key.doc if include_documentation else None,
    }


def describe_topic_configs(config: BrokerConfig, overrides: Mapping[str, str], keys: Iterable[str] | None = None,
                           include_synonyms: bool = False,
                           include_documentation: bool = False) -> list[dict[str, Any]]:
    """
    The DescribeConfigs entries of a topic: every topic config (or the ones
    in C{keys} that exist), sorted by name.

    @param overrides: the topic's C{/config/topics/<topic>}.
    @return: dicts with DescribeConfigs v4's fields (C{name}, C{value},
        C{read_only}, C{config_source}, C{is_sensitive}, C{synonyms},
        C{config_type}, C{documentation}).
    """
    wanted = None if keys is None else set(keys)
    entries = []
    for name in sorted(TOPIC_CONFIG):
        if wanted is not None and name not in wanted:
            continue
        key = TOPIC_CONFIG[name]
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], DYNAMIC_TOPIC_CONFIG))
        broker_key = TOPIC_CONFIG_KEYS.get(name)
        if broker_key in BROKER_CONFIG:
            synonyms += _broker_synonyms(config, broker_key, per_broker=True)
        entries.append(_entry(name, key, synonyms, False, include_synonyms, include_documentation))
    return entries


def describe_broker_configs(config: BrokerConfig, per_broker: bool, keys: Iterable[str] | None = None,
                            include_synonyms: bool = False,
                            include_documentation: bool = False) -> list[dict[str, Any]]:
    """
    The DescribeConfigs entries of this broker (C{per_broker}: every broker
    config) or of the cluster-wide default entity (resource name C{""}:
    only the keys set in C{/config/brokers/<default>}, as Kafka answers).
    C{read_only} is true for the configs that cannot change dynamically.
    """
    wanted = None if keys is None else set(keys)
    names = sorted(BROKER_CONFIG) if per_broker else sorted(config.dynamic(DYNAMIC_DEFAULT_BROKER_CONFIG))
    entries = []
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        synonyms = _broker_synonyms(config, name, per_broker)
        entries.append(_entry(name, BROKER_CONFIG[name], synonyms, not is_dynamic_broker_config(name),
                              include_synonyms, include_documentation))
    return entries
