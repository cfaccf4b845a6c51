"""
Broker and topic configuration under Apache Kafka's own names, in three parts:

  - L{kafkatw.config.schema}: the definitions, every key with Kafka's type,
    default, validator and documentation (Kafka's C{KafkaConfig} and
    C{LogConfig}), and which broker keys are dynamic (C{DynamicBrokerConfig});
  - L{kafkatw.config.broker_config}: L{BrokerConfig}, a broker's values read
    from the defaults, a C{server.properties} file, then C{--override
    key=value} pairs, under the dynamic layers from ZooKeeper, with the source
    of each value (Kafka's ConfigSource codes);
  - L{kafkatw.config.docs}: the generator of docs/configuration.md's key
    tables, C{python -m kafkatw.config --update docs/configuration.md} (and
    C{--check}).

The names below are imported from here; the modules are the places to read.

Source: Kafka documentation, "Broker Configs" and "Topic Configs".
"""

from __future__ import annotations

from .broker_config import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    SINGLE_BROKER_DEFAULTS,
    STATIC_BROKER_CONFIG,
    BrokerConfig,
    parse_broker_value,
    topic_log_config,
)
from .docs import config_markdown, splice_config_markdown
from .schema import (
    BROKER_CONFIG,
    COMPRESSION_TYPES,
    CONFIG_TYPE_CODES,
    DYNAMIC_BROKER_CONFIGS,
    LISTENER_CONFIG_KEYS,
    MECHANISM_CONFIG_KEYS,
    OAUTHBEARER_CALLBACK_HANDLERS,
    PER_BROKER_DYNAMIC_CONFIGS,
    TOPIC_CONFIG,
    TOPIC_CONFIG_KEYS,
    ConfigKey,
    config_type,
    is_dynamic_broker_config,
    is_sensitive,
    parse_topic_config,
    topic_config_key,
)

__all__ = [
    "ConfigKey",
    "BROKER_CONFIG",
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
    "BrokerConfig",
    "parse_broker_value",
    "SINGLE_BROKER_DEFAULTS",
    "topic_log_config",
    "DYNAMIC_TOPIC_CONFIG",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "STATIC_BROKER_CONFIG",
    "DEFAULT_CONFIG",
    "config_markdown",
    "splice_config_markdown",
]
