"""
C{twistd kafkatw}: command-line options and the broker service.

    twistd -n kafkatw --broker-id 0 --listeners tcp:9092:interface=127.0.0.1 \\
        --log-dirs /var/lib/kafkatw --zookeeper embedded

Configuration is layered as Kafka's is: defaults, then C{--config
server.properties}, then the flags below, then each C{--override key=value}
(any key of L{kafkatw.config.BROKER_CONFIG}, by its Kafka name).
"""

from __future__ import annotations

import os
from typing import Any

from twisted.logger import Logger
from twisted.python import usage

from .config import BrokerConfig, parse_properties

_log = Logger()

__all__ = ["Options", "makeService"]


class Options(usage.Options):
    """Options of C{twistd kafkatw}; validation happens in L{postOptions}."""

    synopsis = "[options]"
    longdesc = "A Kafka-protocol broker (kafkatw): partitioned, replicated logs coordinated by ZooKeeper."

    optParameters = [
        ["broker-id", None, None, "broker.id: this broker's id (an integer, unique in the cluster)."],
        ["listeners", None, None, "listeners: comma-separated Twisted endpoint strings or PLAINTEXT://host:port."],
        ["log-dirs", None, None, "log.dirs: comma-separated directories for partition logs."],
        ["zookeeper", None, None, "zookeeper.connect: HOST:PORT[,HOST:PORT][/chroot], or 'embedded'."],
        ["config", None, None, "A Kafka-style server.properties file."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["overrides"] = []

    def opt_override(self, value: str) -> None:
        """Set any config by its Kafka name: --override key=value (repeatable)."""
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise usage.UsageError(f"--override takes key=value, not {value!r}")
        self["overrides"].append((key.strip(), val.strip()))

    def postOptions(self) -> None:
        values: list[tuple[str, str]] = []
        self.ignored_keys: list[str] = []
        if self["config"] is not None:
            try:
                with open(self["config"], encoding="utf-8") as f:
                    properties = parse_properties(f.read())
            except OSError as e:
                raise usage.UsageError(f"cannot read --config {self['config']}: {e.strerror}") from None
            # As Kafka does, a properties file may hold keys this broker does not
            # know (a stock server.properties): they are logged and ignored.
            # --override keys must be known: a typo there is an error.
            for key, value in properties.items():
                if BrokerConfig.knows(key):
                    values.append((key, value))
                else:
                    self.ignored_keys.append(key)
        for flag, key in [("broker-id", "broker.id"), ("listeners", "listeners"), ("log-dirs", "log.dirs"),
                          ("zookeeper", "zookeeper.connect")]:
            if self[flag] is not None:
                values.append((key, self[flag]))
        values.extend(self["overrides"])
        config = BrokerConfig()
        for key, value in values:
            try:
                config.set(key, value)
            except ValueError as e:
                raise usage.UsageError(str(e)) from None
        if config["broker.id"] < 0:
            raise usage.UsageError("broker.id must be 0 or more")
        if not config["log.dirs"]:
            raise usage.UsageError("log.dirs must name at least one directory")
        if not config["listeners"]:
            raise usage.UsageError("listeners must name at least one listener")
        from .broker.server import listener_endpoint

        for listener in config["listeners"]:
            try:
                listener_endpoint(listener)
            except ValueError as e:
                raise usage.UsageError(str(e)) from None
        self.broker_config = config


def makeService(options: Options, reactor: Any = None) -> Any:
    """The broker service for C{options} (a parsed L{Options})."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    from .broker.server import KafkaServer

    for d in options.broker_config["log.dirs"]:
        os.makedirs(d, exist_ok=True)
    for key in getattr(options, "ignored_keys", []):
        _log.warn("{key} in {file} is not a kafkatw config; ignored", key=key, file=options["config"])
    return KafkaServer(options.broker_config, reactor)
