"""
Topic administration and producer ids, through ZooKeeper.

Named after Kafka's C{ZkAdminManager}: CreateTopics, DeleteTopics and metadata
auto-creation write the topic's replica assignment (``/brokers/topics/<topic>``),
its config overrides (``/config/topics/<topic>``) and each partition's state; every
broker's watches then pick the change up (docs/design.md: ZooKeeper layout).  Producer ids are handed
out from blocks reserved in ``/latest_producer_id_block`` so that two brokers never
give out the same id (Kafka's C{ProducerIdManager}).
"""

from __future__ import annotations

import uuid
from typing import Any

from twisted.logger import Logger

from ..config import topic_log_config
from ..errors import ErrorCode, InvalidConfigError, kafka_error
from ..zookeeper.registry import DEFAULT_BROKER_ENTITY, PartitionState, TopicAssignment, assign_replicas
from .metadata_cache import TopicMetadata

__all__ = ["AdminManager", "DYNAMIC_BROKER_CONFIGS"]

#: Broker configs that IncrementalAlterConfigs may change while brokers run
#: (Kafka's replication quotas, set by the reassignment tool's --throttle).
DYNAMIC_BROKER_CONFIGS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})

_log = Logger()


def _replication_factor_too_large(replication_factor: int, brokers: int) -> str:
    """Kafka's C{INVALID_REPLICATION_FACTOR} text (C{AdminUtils.assignReplicasToBrokers})."""
    return f"Replication factor: {replication_factor} larger than available brokers: {brokers}."


class AdminManager:
    """
    @param registry: a L{kafkatw.zookeeper.registry.Registry}.
    @param metadata: the L{MetadataCache}, updated at once after a successful
        create so that the creating broker answers with the new topic without
        waiting for its own watch.
    """

    def __init__(self, config: Any, registry: Any, metadata: Any, on_topic: Any = None) -> None:
        self.config = config
        self.registry = registry
        self.metadata = metadata
        self.on_topic = on_topic
        self._producer_ids: list[int] = []  # [next, end] of the current block
        self._pending_block: Any = None

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           assignment: dict[int, list[int]] | None, configs: dict[str, str],
                           validate_only: bool = False) -> TopicMetadata:
        """
        Create a topic.

        @return: its L{TopicMetadata}.
        @raise KafkaError: C{TOPIC_ALREADY_EXISTS}, C{INVALID_PARTITIONS},
            C{INVALID_REPLICATION_FACTOR}, C{INVALID_CONFIG}, C{INVALID_REPLICA_ASSIGNMENT}.
        """
        try:
            topic_log_config(self.config, configs)
        except ValueError as e:
            raise InvalidConfigError(str(e)) from None
        if name in self.metadata.topics:
            raise kafka_error(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        live = sorted(self.metadata.brokers)
        if assignment is None:
            if num_partitions < 1:
                raise kafka_error(ErrorCode.invalid_partitions, "number of partitions must be at least 1")
            if replication_factor < 1:
                raise kafka_error(ErrorCode.invalid_replication_factor, "replication factor must be at least 1")
            if replication_factor > len(live):
                raise kafka_error(ErrorCode.invalid_replication_factor,
                                  _replication_factor_too_large(replication_factor, len(live)))
            assignment = assign_replicas(num_partitions, replication_factor, live)
        else:
            sizes = {len(replicas) for replicas in assignment.values()}
            if sorted(assignment) != list(range(len(assignment))) or len(sizes) != 1 or any(
                not replicas or len(set(replicas)) != len(replicas) or any(r not in live for r in replicas)
                for replicas in assignment.values()
            ):
                raise kafka_error(ErrorCode.invalid_replica_assignment,
                                  "invalid replica assignment (every partition needs the same number of "
                                  "distinct, live brokers)")
        if validate_only:
            return TopicMetadata(name, uuid.UUID(int=0), assignment, dict(configs))
        await self.registry.create_topic(name, assignment, dict(configs))
        created = await self.registry.get_topic(name)
        meta = TopicMetadata(name, created.topic_id, dict(created.partitions), dict(configs))
        for partition, replicas in created.partitions.items():
            # Kafka's NewPartition -> OnlinePartition: the first live replica
            # leads at epoch 0 and every live replica is in sync (all are empty).
            isr = [r for r in replicas if r in self.metadata.brokers] or replicas[:1]
            version = await self.registry.set_partition_state(name, partition, isr[0], 0, isr)
            self.metadata.set_partition_state(name, partition, PartitionState(isr[0], 0, isr, 1, version))
        if name not in self.metadata.topics:
            self.metadata.set_topic(meta)
            if self.on_topic is not None:
                self.on_topic(meta)
        _log.info("created topic {topic} with {count} partitions", topic=name, count=len(assignment))
        return meta

    async def create_partitions(self, name: str, count: int, assignment: list[list[int]] | None,
                                validate_only: bool = False) -> None:
        """
        Grow a topic to C{count} partitions (CreatePartitions; Kafka's
        C{AdminZkClient.addPartitions}): new replicas spread over the live
        brokers as at creation, or as C{assignment} (one replica list per new
        partition); each new partition starts with its first live replica as
        leader and every live replica in sync.

        @raise KafkaError: C{UNKNOWN_TOPIC_OR_PARTITION}, C{INVALID_PARTITIONS}
            (not more than today), C{INVALID_REPLICA_ASSIGNMENT}.
        """
        meta = self.metadata.topics.get(name)
        if meta is None:
            raise kafka_error(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        existing = len(meta.partitions)
        # Kafka's messages (ZkAdminManager.createPartitions)
        if count < existing:
            raise kafka_error(ErrorCode.invalid_partitions,
                              f"Topic currently has {existing} partitions, which is higher than the requested {count}.")
        if count == existing:
            raise kafka_error(ErrorCode.invalid_partitions, f"Topic already has {existing} partitions.")
        rf = len(next(iter(meta.partitions.values())))
        live = sorted(self.metadata.brokers)
        if assignment is None:
            if rf > len(live):
                raise kafka_error(ErrorCode.invalid_replication_factor, _replication_factor_too_large(rf, len(live)))
            new = assign_replicas(count - existing, rf, live, start_partition_id=existing)
        else:
            if len(assignment) != count - existing or any(
                    len(r) != rf or len(set(r)) != rf or any(b not in live for b in r) for r in assignment):
                raise kafka_error(ErrorCode.invalid_replica_assignment,
                                  f"give {count - existing} lists of {rf} distinct live brokers")
            new = {existing + i: list(r) for i, r in enumerate(assignment)}
        if validate_only:
            return
        await self.registry.update_topic_assignment(name, lambda current: TopicAssignment(
            name, current.topic_id, {**current.partitions, **new}, current.adding_replicas,
            current.removing_replicas))
        for partition, replicas in new.items():
            isr = [r for r in replicas if r in self.metadata.brokers] or replicas[:1]
            version = await self.registry.set_partition_state(name, partition, isr[0], 0, isr)
            self.metadata.set_partition_state(name, partition, PartitionState(isr[0], 0, isr, 1, version))
        _log.info("topic {topic} grew from {old} to {new} partitions", topic=name, old=existing, new=count)

    async def alter_broker_config(self, entity: str, operations: list[tuple[str, int, str | None]],
                                  validate_only: bool = False) -> None:
        """
        IncrementalAlterConfigs for a broker (C{entity}: its id) or the cluster
        default (C{""}): the keys of L{DYNAMIC_BROKER_CONFIGS}, stored in
        C{/config/brokers/<entity>} where every broker's watch reads them.

        @param operations: C{(name, operation, value)}; operation 0 SET, 1 DELETE.
        @raise KafkaError: C{INVALID_CONFIG} for another key, operation or value;
            C{INVALID_REQUEST} for a bad entity.
        """
        if entity and not entity.isdigit():
            raise kafka_error(ErrorCode.invalid_request, f"broker {entity!r} is not a broker id")
        entity = entity or DEFAULT_BROKER_ENTITY
        current = await self.registry.get_broker_config(entity)
        for name, operation, value in operations:
            if name not in DYNAMIC_BROKER_CONFIGS:
                raise InvalidConfigError(
                    f"{name} cannot be changed while the broker runs in this version (dynamic broker configs: "
                    f"{', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})")
            if operation == 1:
                current.pop(name, None)
            elif operation == 0:
                try:
                    if value is None or int(value) < 0:
                        raise ValueError
                except ValueError:
                    raise InvalidConfigError(f"{name} must be a number of bytes per second, not {value!r}") from None
                current[name] = str(int(value))
            else:
                raise InvalidConfigError(f"{name}: operation {operation} (APPEND/SUBTRACT) applies to lists only")
        if not validate_only:
            await self.registry.set_broker_config(entity, current)
            _log.info("broker config {entity} is now {config}", entity=entity, config=current)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic's registry nodes; brokers drop its logs on their watch."""
        await self.registry.delete_topic(name)
        _log.info("deleted topic {topic}", topic=name)

    async def allocate_producer_id(self) -> int:
        """
        A producer id no broker of the cluster has handed out before.

        @raise Exception: ZooKeeper is unreachable (answered as a retriable error).
        """
        if not self._producer_ids or self._producer_ids[0] > self._producer_ids[1]:
            start, end = await self.registry.allocate_producer_id_block(
                self.config["broker.id"], self.config["producer.id.block.size"]
            )
            self._producer_ids = [start, end]
        producer_id = self._producer_ids[0]
        self._producer_ids[0] += 1
        return producer_id

