"""
Group-level configs (KIP-848, KIP-932): per-group overrides of the
coordinator's C{group.consumer.*} and C{group.share.*} defaults, set with
IncrementalAlterConfigs (and AlterConfigs) on resource type GROUP (32) and
read with DescribeConfigs, after Kafka's C{GroupConfig} and
C{GroupConfigManager}.

Where they live: C{/config/groups/<group>} in ZooKeeper (Kafka's v1 config
JSON, C{{"version":1,"config":{...}}}), written with a change notification
(C{/config/changes/config_change_N}, entity path C{groups/<group>}) that
every broker follows, as topic configs are (Kafka itself keeps them in its
KRaft metadata log; ZooKeeper-mode Kafka has none).  Each broker keeps
them in memory (L{GroupConfigManager}), loaded when it starts.

Keys (Kafka 4's names and checks; an unknown one is C{INVALID_CONFIG}
"Unknown group config name: x", a bad value C{INVALID_CONFIG} too)::

    consumer.session.timeout.ms     int >= 1  (group.consumer.session.timeout.ms)
    consumer.heartbeat.interval.ms  int >= 1, < the session timeout (group.consumer.heartbeat.interval.ms)
    share.session.timeout.ms        int >= 1  (group.share.session.timeout.ms)
    share.heartbeat.interval.ms     int >= 1, < the share session timeout (group.share.heartbeat.interval.ms)
    share.record.lock.duration.ms   int >= 1000 (group.share.record.lock.duration.ms)
    share.delivery.count.limit      int 2..10 (group.share.delivery.count.limit)
    share.partition.max.record.locks  int 100..10000 (group.share.partition.max.record.locks)
    share.auto.offset.reset         latest | earliest | by_duration:<ISO-8601 duration>
                                    (group.share.auto.offset.reset)
    share.isolation.level           read_uncommitted | read_committed (read_uncommitted)

A default comes from the broker config in brackets (Kafka's default when this
build has no such broker config).  As Kafka's C{GroupConfig.validateValues},
the overrides merged with those defaults must also lie within the broker's
bounds: C{consumer.session.timeout.ms} within
C{group.consumer.min/max.session.timeout.ms} (45000..60000 by default),
C{consumer.heartbeat.interval.ms} within
C{group.consumer.min/max.heartbeat.interval.ms} (5000..15000), the
C{share.*} ones within C{group.share.min/max.*} likewise, and
C{share.record.lock.duration.ms} within
C{group.share.min/max.record.lock.duration.ms} (15000..60000).

Source: KIP-848 ("Group configs"), KIP-932; Kafka's C{GroupConfig},
C{GroupConfigManager}, C{ConfigResource.Type.GROUP}.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from twisted.logger import Logger

from ..zookeeper.bridge import NoNodeError

__all__ = ["GROUP_CONFIG_DEFAULTS", "GroupConfigManager", "validate_group_config", "RESOURCE_GROUP",
           "InvalidGroupConfig"]

_log = Logger()

#: ConfigResource.Type.GROUP (Kafka's byte 32).
RESOURCE_GROUP = 32

_DURATION = re.compile(r"^by_duration:P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$")


def _int(low: int, high: int | None = None) -> Callable[[str], Any]:
    def check(value: str) -> int:
        number = int(value)
        if number < low or (high is not None and number > high):
            raise ValueError(f"Value must be at least {low}" + (f" and at most {high}" if high is not None else ""))
        return number
    return check


def _one_of(*choices: str) -> Callable[[str], Any]:
    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"String must be one of: {', '.join(choices)}")
        return value
    return check


def _auto_offset_reset(value: str) -> str:
    if value in ("latest", "earliest") or _DURATION.match(value):
        return value
    raise ValueError("must be latest, earliest or by_duration:<ISO-8601 duration>")


#: name -> (the check of a value, the broker config giving its default or None, Kafka's default)
_KEYS: dict[str, tuple[Callable[[str], Any], str | None, str]] = {
    "consumer.session.timeout.ms": (_int(1), "group.consumer.session.timeout.ms", "45000"),
    "consumer.heartbeat.interval.ms": (_int(1), "group.consumer.heartbeat.interval.ms", "5000"),
    "share.session.timeout.ms": (_int(1), "group.share.session.timeout.ms", "45000"),
    "share.heartbeat.interval.ms": (_int(1), "group.share.heartbeat.interval.ms", "5000"),
    "share.record.lock.duration.ms": (_int(1000), "group.share.record.lock.duration.ms", "30000"),
    "share.delivery.count.limit": (_int(2, 10), "group.share.delivery.count.limit", "5"),
    # Kafka 4.2's bounds: group.share.min/max.partition.max.record.locks (defaults 100 and 10000)
    "share.partition.max.record.locks": (_int(100, 10000), "group.share.partition.max.record.locks", "2000"),
    "share.auto.offset.reset": (_auto_offset_reset, "group.share.auto.offset.reset", "latest"),
    "share.isolation.level": (_one_of("read_uncommitted", "read_committed"), None, "read_uncommitted"),
}

#: The group config names, each with the broker config giving its default (C{None}: Kafka's default only).
GROUP_CONFIG_DEFAULTS: dict[str, str | None] = {name: broker_key for name, (_, broker_key, _) in _KEYS.items()}


class InvalidGroupConfig(ValueError):
    """A group config name or value Kafka would refuse (C{INVALID_CONFIG})."""


#: group config -> (the broker configs of its smallest and largest value, Kafka's defaults of both):
#: the bounds of Kafka's C{GroupConfig.validateValues}, checked in this order
_BOUNDS: dict[str, tuple[str, str, int, int]] = {
    "consumer.heartbeat.interval.ms": ("group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms", 5000, 15000),
    "consumer.session.timeout.ms": ("group.consumer.min.session.timeout.ms",
                                    "group.consumer.max.session.timeout.ms", 45000, 60000),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms",
                                    "group.share.max.heartbeat.interval.ms", 5000, 15000),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms",
                                 45000, 60000),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms", 15000, 60000),
}


def _broker_value(broker_config: Any, key: str | None, default: Any) -> Any:
    """The broker config C{key}, else C{default} (no broker config given, or a key this build lacks)."""
    if broker_config is not None and key is not None:
        try:
            return broker_config[key]
        except KeyError:
            pass
    return default


def validate_group_config(config: Mapping[str, str], broker_config: Any = None) -> None:
    """
    Check a group's whole override set (Kafka's C{GroupConfigManager.validate}
    and C{GroupConfig.validateValues}): each name and value; then, over the
    overrides merged with the broker's defaults (C{group.consumer.*},
    C{group.share.*}), each timeout, interval and lock duration within the
    broker's C{group.consumer.min/max.*} and C{group.share.min/max.*}
    bounds, and each session timeout above its heartbeat interval (an
    override is checked against the broker's default of the other).

    @param broker_config: the broker config (C{None}: Kafka's defaults).
    @raise InvalidGroupConfig: an unknown name, a bad value, a value out of
        its bounds, or a heartbeat interval not below its session timeout.
    """
    for name, value in config.items():
        if name not in _KEYS:
            raise InvalidGroupConfig(f"Unknown group config name: {name}")
        try:
            _KEYS[name][0](value)
        except ValueError as e:
            raise InvalidGroupConfig(f"Invalid value {value} for configuration {name}: {e}") from None
    merged = {name: int(config[name]) if name in config else int(_broker_value(broker_config, _KEYS[name][1],
                                                                                 _KEYS[name][2]))
              for name in _BOUNDS}
    for name, (low_key, high_key, low_default, high_default) in _BOUNDS.items():
        if merged[name] < int(_broker_value(broker_config, low_key, low_default)):
            raise InvalidGroupConfig(f"{name} must be greater than or equal to {low_key}")
        if merged[name] > int(_broker_value(broker_config, high_key, high_default)):
            raise InvalidGroupConfig(f"{name} must be less than or equal to {high_key}")
    for kind in ("consumer", "share"):
        if merged[f"{kind}.session.timeout.ms"] <= merged[f"{kind}.heartbeat.interval.ms"]:
            raise InvalidGroupConfig(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")


class GroupConfigManager:
    """
    Every group's config overrides on this broker (Kafka's
    C{GroupConfigManager}), kept current from ZooKeeper's change
    notifications (L{update}).

    @param config: the broker config (the defaults' C{group.consumer.*} keys).
    """

    def __init__(self, config: Any) -> None:
        self.broker_config = config
        self.overrides: dict[str, dict[str, str]] = {}

    def update(self, group_id: str, config: Mapping[str, str]) -> None:
        """A group's overrides changed (a change notification, or this broker's own write); C{{}}: none."""
        if config:
            self.overrides[group_id] = dict(config)
        else:
            self.overrides.pop(group_id, None)
        _log.info("group {group} config is now {config}", group=group_id, config=dict(config))

    async def load(self, registry: Any) -> None:
        """Read every C{/config/groups/<group>} (a broker starting)."""
        try:
            groups = await registry.client.get_children("/config/groups")
        except NoNodeError:  # no group configs yet
            return
        for group_id in groups:
            self.update(group_id, await registry.get_entity_config("groups", group_id))

    def group_config(self, group_id: str) -> dict[str, str]:
        """The group's overrides only (C{{name: value}}); L{value} resolves defaults."""
        return dict(self.overrides.get(group_id, {}))

    def value(self, group_id: str, name: str) -> str:
        """
        A group config's value for C{group_id}: its override, else the
        broker's config it defaults to, else Kafka's default.

        @raise KeyError: C{name} is not a group config.
        """
        override = self.overrides.get(group_id, {}).get(name)
        if override is not None:
            return override
        _, broker_key, default = _KEYS[name]
        if broker_key is not None:
            try:
                return str(self.broker_config[broker_key])
            except KeyError:  # a broker config this build does not have
                pass
        return default

    def describe(self, group_id: str, keys: list[str] | None) -> list[dict]:
        """DescribeConfigs entries of a group (source GROUP_CONFIG 8 for an override, DEFAULT_CONFIG 5 else)."""
        overrides = self.overrides.get(group_id, {})
        return [{"name": name, "value": self.value(group_id, name), "read_only": False,
                 "config_source": 8 if name in overrides else 5, "is_sensitive": False, "synonyms": [],
                 "config_type": 3 if name.endswith((".ms", ".limit", ".locks")) else 2, "documentation": None}
                for name in GROUP_CONFIG_DEFAULTS if keys is None or name in keys]
