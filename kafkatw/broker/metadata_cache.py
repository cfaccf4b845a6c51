"""
The broker's view of the cluster: live brokers, topics and their partitions.

Filled from ZooKeeper watches on ``/brokers/ids`` and ``/brokers/topics`` by
L{kafkatw.broker.server.KafkaServer} (Kafka's own brokers keep the same cache,
fed by the controller's UpdateMetadata requests).  Handlers read it to answer
Metadata and to tell whether this broker leads a partition.

In this version a partition has one replica, as in the paper (§3): its leader is
its first replica while that broker is alive.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["BrokerEndpoint", "TopicMetadata", "MetadataCache"]


@dataclass(frozen=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class TopicMetadata:
    """
    @ivar partitions: partition index -> replica broker ids (the first leads).
    @ivar config: the topic's config overrides (Kafka topic-config keys).
    """

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]
    config: dict[str, str] = field(default_factory=dict)
    leader_epochs: dict[int, int] = field(default_factory=dict)


class MetadataCache:
    """
    Brokers and topics as last seen in ZooKeeper.

    @ivar cluster_id: the cluster id (``/cluster/id``).
    @ivar controller_id: the broker id of the controller, or -1.
    """

    def __init__(self, broker_id: int, cluster_id: str = "kafkatw") -> None:
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.controller_id = -1
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call C{listener()} after every change."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    def set_brokers(self, brokers: dict[int, BrokerEndpoint]) -> None:
        self.brokers = dict(brokers)
        self._changed()

    def set_topic(self, topic: TopicMetadata) -> None:
        self.topics[topic.name] = topic
        self._changed()

    def remove_topic(self, name: str) -> None:
        if self.topics.pop(name, None) is not None:
            self._changed()

    def leader(self, topic: str, partition: int) -> int:
        """
        The broker id leading C{topic}/C{partition}, or -1 when its replica's
        broker is not alive (or the partition is unknown).
        """
        meta = self.topics.get(topic)
        if meta is None:
            return -1
        replicas = meta.partitions.get(partition)
        if not replicas:
            return -1
        leader = replicas[0]
        return leader if leader in self.brokers else -1

    def leader_epoch(self, topic: str, partition: int) -> int:
        meta = self.topics.get(topic)
        if meta is None:
            return -1
        return meta.leader_epochs.get(partition, 0)

    def led_partitions(self) -> list[tuple[str, int]]:
        """The (topic, partition) pairs this broker is assigned to lead."""
        return [
            (name, p)
            for name, meta in self.topics.items()
            for p, replicas in meta.partitions.items()
            if replicas and replicas[0] == self.broker_id
        ]
