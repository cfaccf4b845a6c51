"""
The broker's view of the cluster: live brokers, topics and their partitions.

Filled from ZooKeeper watches on ``/brokers/ids``, ``/brokers/topics`` and
each partition's state znode by L{kafkatw.broker.server.KafkaServer} (Kafka's
own brokers keep the same cache, fed by the controller's UpdateMetadata
requests).  Handlers read it to answer Metadata.  Leadership is stored, never
derived: a partition's leader, leader epoch and ISR are those of its state
znode, written by the controller (and the ISR by the leader).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["BrokerEndpoint", "TopicMetadata", "MetadataCache"]


@dataclass(frozen=True)
class BrokerEndpoint:
    """
    A live broker.  C{host:port} is its inter-broker listener's address;
    C{endpoints} holds every listener's, C{(name, host, port)} (empty: only
    C{PLAINTEXT} at C{host:port}).
    """

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str) -> tuple[str, int] | None:
        """The C{(host, port)} clients of C{listener} reach it at, or C{None} (no such listener)."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


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
    #: partition -> replicas a reassignment is adding (KIP-455; throttled when a throttle is set).
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)


class MetadataCache:
    """
    Brokers and topics as last seen in ZooKeeper.

    @ivar cluster_id: the cluster id (``/cluster/id``).
    @ivar controller_id: the broker id of the controller, or -1.
    @ivar shutting_down_brokers: the ids of the brokers in controlled shutdown
        (the children of C{/admin/controlled_shutdown}).
    """

    def __init__(self, broker_id: int, cluster_id: str = "kafkatw") -> None:
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.controller_id = -1
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.shutting_down_brokers: frozenset[int] = frozenset()
        self.topics: dict[str, TopicMetadata] = {}
        #: C{(topic, partition)} -> the L{kafkatw.zookeeper.zk_data.PartitionState} last read.
        self.partition_states: dict[tuple[str, int], Any] = {}
        self._listeners: list[Callable[[], None]] = []
        #: topic -> {key: bytes}: the topic's encoded Metadata response entries
        #: (L{kafkatw.broker.metadata_response}), keyed by what else they depend on
        #: (the version, the authorized operations); a topic's are dropped
        #: whenever it, one of its partition states or the set of live brokers
        #: changes, and by L{invalidate_topic} (its replicas' roles here).
        self.encoded_topics: dict[str, dict[Any, bytes]] = {}

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call C{listener()} after every change."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    def invalidate_topic(self, name: str) -> None:
        """Drop C{name}'s encoded Metadata entries (something they are made of changed)."""
        self.encoded_topics.pop(name, None)

    def set_brokers(self, brokers: dict[int, BrokerEndpoint]) -> None:
        if brokers.keys() != self.brokers.keys():
            self.encoded_topics.clear()  # leaders and offline replicas are those of live brokers
        self.brokers = dict(brokers)
        self._changed()

    def set_shutting_down_brokers(self, broker_ids: set[int] | frozenset[int]) -> None:
        """Record the brokers in controlled shutdown (C{/admin/controlled_shutdown/<id>})."""
        self.shutting_down_brokers = frozenset(broker_ids)
        self._changed()

    def is_replica_isr_eligible(self, broker_id: int) -> bool:
        """
        Whether a leader may add C{broker_id}'s replica to an ISR: its broker
        is registered (alive) and not in controlled shutdown (Kafka's
        C{Partition.isReplicaIsrEligible}, KIP-841).  A broker that is gone
        or leaving would only be taken out again by the controller, and
        meanwhile hold back the high watermark.
        """
        return broker_id in self.brokers and broker_id not in self.shutting_down_brokers

    def set_topic(self, topic: TopicMetadata) -> None:
        self.topics[topic.name] = topic
        self.encoded_topics.pop(topic.name, None)
        self._changed()

    def remove_topic(self, name: str) -> None:
        meta = self.topics.pop(name, None)
        self.encoded_topics.pop(name, None)
        if meta is not None:
            for partition in meta.partitions:
                self.partition_states.pop((name, partition), None)
            self._changed()

    def set_partition_state(self, topic: str, partition: int, state: Any) -> None:
        """Record a partition's state znode (C{None}: not written yet)."""
        self.encoded_topics.pop(topic, None)
        if state is None:
            self.partition_states.pop((topic, partition), None)
        else:
            self.partition_states[(topic, partition)] = state
        self._changed()

    def leader(self, topic: str, partition: int) -> int:
        """
        The broker id leading C{topic}/C{partition} per its state znode, or -1
        when it has none (offline, unknown, or its broker is not registered).
        """
        state = self.partition_states.get((topic, partition))
        if state is None or state.leader not in self.brokers:
            return -1
        return state.leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch per its state znode (-1: unknown)."""
        state = self.partition_states.get((topic, partition))
        return -1 if state is None else state.leader_epoch

    def isr(self, topic: str, partition: int) -> list[int]:
        state = self.partition_states.get((topic, partition))
        return [] if state is None else list(state.isr)
