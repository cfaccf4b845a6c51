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
from typing import Any, Callable

from twisted.logger import Logger

from ..config import (
    BROKER_CONFIG,
    DYNAMIC_BROKER_CONFIGS,
    PER_BROKER_DYNAMIC_CONFIGS,
    TOPIC_CONFIG,
    config_type,
    is_dynamic_broker_config,
    parse_broker_value,
    parse_topic_config,
    topic_log_config,
)
from ..errors import ErrorCode, InvalidConfigError, kafka_error
from ..zookeeper.registry import assign_replicas
from ..zookeeper.zk_data import DEFAULT_BROKER_ENTITY, TOPICS_PATH, PartitionState, TopicAssignment
from .config_helper import format_config_value
from .group_config import InvalidGroupConfig, validate_group_config
from .metadata_cache import TopicMetadata

__all__ = ["AdminManager", "DYNAMIC_BROKER_CONFIGS", "RESOURCE_TOPIC", "RESOURCE_BROKER"]

#: Kafka's ConfigResource.Type codes.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
_RESOURCE_TYPES = {0: "UNKNOWN", 1: "ANY", 2: "TOPIC", 3: "GROUP", 4: "BROKER", 8: "BROKER_LOGGER",
                   16: "CLIENT_METRICS", 32: "GROUP"}
#: IncrementalAlterConfigs operations (KIP-339's AlterConfigOp.OpType).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]

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
    @param config_written: called with no argument once an alter's write to
        ZooKeeper succeeded, before the alter is answered; its Deferred fires
        once this broker has applied every config change notified up to that
        write (L{kafkatw.zookeeper.config_changes.ConfigChangeListener.catch_up}),
        so that what the broker answers next (DescribeConfigs) sees the change.
    """

    def __init__(self, config: Any, registry: Any, metadata: Any, on_topic: Any = None,
                 config_written: Any = None) -> None:
        self.config = config
        self.registry = registry
        self.metadata = metadata
        self.on_topic = on_topic
        self.config_written = config_written
        #: told C{(group id, its new overrides)} once this broker wrote a group's configs
        #: (L{kafkatw.broker.group_config.GroupConfigManager.update}, set by the broker's KafkaApis)
        self.group_config_changed: Callable[[str, dict[str, str]], object] | None = None
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

    async def alter_configs(self, resource_type: int, resource_name: str,
                            operations: list[tuple[str, int, str | None]], incremental: bool = True,
                            validate_only: bool = False) -> dict[str, str]:
        """
        AlterConfigs (legacy, C{incremental=False}: C{operations} are the
        resource's whole new set, all SET) or IncrementalAlterConfigs (KIP-339:
        SET 0, DELETE 1, APPEND 2 and SUBTRACT 3, the last two for LIST
        configs only) of a topic (type 2) or of a broker (type 4: its id, or
        C{""} for the cluster-wide default).  The result is validated whole,
        then written to C{/config/topics/<topic>} or C{/config/brokers/<entity>}
        with a change notification that every broker follows
        (L{kafkatw.zookeeper.config_changes}); this broker applies it before
        answering (C{config_written}), so a describe it answers after an
        acknowledged alter sees the change (Kafka's ZooKeeper mode does so
        for a topic: its DescribeConfigs reads the topic's znode).
        C{validate_only} writes and applies nothing.

        Errors are Kafka's in ZooKeeper mode (C{ZkAdminManager}): an unknown
        topic config is C{INVALID_CONFIG}; a bad value, a broker config that
        cannot change dynamically, a bad broker id, a duplicate key or an
        APPEND to a non-list is C{INVALID_REQUEST} ("Invalid config value for
        resource ConfigResource(type=TOPIC, name='t'): ...").

        @return: the resource's new config (written unless C{validate_only}).
        @raise KafkaError: as above; C{UNKNOWN_TOPIC_OR_PARTITION} for a topic
            that does not exist.
        """
        type_name = _RESOURCE_TYPES.get(resource_type, str(resource_type))
        resource = f"ConfigResource(type={type_name}, name='{resource_name}')"
        if resource_type == RESOURCE_GROUP:
            return await self._alter_group_config(resource_name, operations, incremental, validate_only)
        if resource_type not in (RESOURCE_TOPIC, RESOURCE_BROKER):
            raise kafka_error(ErrorCode.invalid_request,
                              f"AlterConfigs is only supported for topics and brokers, but resource type is "
                              f"{type_name}")
        names = [name for name, _, _ in operations]
        if len(set(names)) != len(names):
            raise kafka_error(ErrorCode.invalid_request, f"Error due to duplicate config keys in {resource}")
        if resource_type == RESOURCE_TOPIC:
            if resource_name not in self.metadata.topics and \
                    await self.registry.client.exists(f"{TOPICS_PATH}/{resource_name}") is None:
                raise kafka_error(ErrorCode.unknown_topic_or_partition, f"Topic {resource_name} does not exist")
            for name in names:
                if name not in TOPIC_CONFIG:
                    raise InvalidConfigError(f"Unknown topic config name: {name}")
            keys = TOPIC_CONFIG
            current = await self.registry.get_topic_config(resource_name) if incremental else {}
        else:
            if resource_name and not resource_name.isdigit():
                raise kafka_error(ErrorCode.invalid_request,
                                  f"Broker id must be an integer, but it is: {resource_name}")
            entity = resource_name or DEFAULT_BROKER_ENTITY
            unknown = sorted(name for name in names if name not in BROKER_CONFIG)
            if unknown:
                raise kafka_error(ErrorCode.invalid_request,
                                  f"Invalid config value for resource {resource}: Unknown broker configs: "
                                  f"{', '.join(unknown)}")
            static = sorted(name for name in names if not is_dynamic_broker_config(name))
            if static:
                raise kafka_error(ErrorCode.invalid_request,
                                  f"Invalid config value for resource {resource}: Cannot update these configs "
                                  f"dynamically: {', '.join(static)}")
            per_broker = sorted(name for name in names if name in PER_BROKER_DYNAMIC_CONFIGS)
            if per_broker and not resource_name:
                raise kafka_error(ErrorCode.invalid_request,
                                  f"Invalid config value for resource {resource}: Cannot update these configs at "
                                  f"default cluster level, broker id must be specified: {', '.join(per_broker)}")
            keys = BROKER_CONFIG
            current = await self.registry.get_broker_config(entity) if incremental else {}
        new = dict(current)
        for name, operation, value in operations:
            key = keys[name]
            is_list = config_type(key) == "LIST"
            if operation == OP_SET:
                if value is None:
                    raise kafka_error(ErrorCode.invalid_request, f"Null value not supported for : SET:{name}")
                new[name] = value
            elif operation == OP_DELETE:
                new.pop(name, None)
            elif operation in (OP_APPEND, OP_SUBTRACT):
                verb = "append" if operation == OP_APPEND else "subtract"
                if not is_list:
                    raise kafka_error(ErrorCode.invalid_request,
                                      f"Config value {verb} is not allowed for config key: {name}")
                old = _split(new[name]) if name in new else _split(format_config_value(key.default) or "")
                given = _split(value or "")
                result = list(dict.fromkeys(old + given)) if operation == OP_APPEND else \
                    [v for v in old if v not in given]
                new[name] = ",".join(result)
            else:
                raise kafka_error(ErrorCode.invalid_request, f"Unknown operation {operation} for config {name}")
        for name, value in new.items():
            try:
                if resource_type == RESOURCE_TOPIC:
                    parse_topic_config(name, value)
                else:
                    parse_broker_value(name, value)
                    if name == "advertised.listeners" and resource_name == str(self.config["broker.id"]):
                        from .listeners import check_advertised_listeners
                        check_advertised_listeners(self.config, parse_broker_value(name, value))
            except (KeyError, ValueError) as e:
                raise kafka_error(ErrorCode.invalid_request,
                                  f"Invalid config value for resource {resource}: Invalid value {value} for "
                                  f"configuration {name}: {e}") from None
        if not validate_only:
            if resource_type == RESOURCE_TOPIC:
                await self.registry.set_topic_config(resource_name, new)
            else:
                await self.registry.set_broker_config(entity, new)
            _log.info("{resource} config is now {config}", resource=resource, config=new)
            if self.config_written is not None:
                await self.config_written()
        return new

    async def _alter_group_config(self, group_id: str, operations: list[tuple[str, int, str | None]],
                                  incremental: bool, validate_only: bool) -> dict[str, str]:
        """
        A group's configs (KIP-848, KIP-932; L{kafkatw.broker.group_config}):
        SET and DELETE, validated whole (C{INVALID_CONFIG}), written to
        C{/config/groups/<group>} with a change notification; this broker's
        L{group_config_changed} is told at once.
        """
        if not group_id:
            raise kafka_error(ErrorCode.invalid_request, "group id must not be empty")
        names = [name for name, _, _ in operations]
        if len(set(names)) != len(names):
            raise kafka_error(ErrorCode.invalid_request,
                              f"Error due to duplicate config keys in ConfigResource(type=GROUP, name='{group_id}')")
        new = dict(await self.registry.get_entity_config("groups", group_id)) if incremental else {}
        for name, operation, value in operations:
            if operation == OP_SET:
                if value is None:
                    raise kafka_error(ErrorCode.invalid_request, f"Null value not supported for : SET:{name}")
                new[name] = value
            elif operation == OP_DELETE:
                new.pop(name, None)
            else:
                raise kafka_error(ErrorCode.invalid_request,
                                  f"Config value append or subtract is not allowed for config key: {name}")
        try:
            validate_group_config(new, self.config)  # merged with the broker's defaults and bounds
        except InvalidGroupConfig as e:
            raise InvalidConfigError(str(e)) from None
        if not validate_only:
            await self.registry.change_entity_config("groups", group_id, new)
            _log.info("group {group} config is now {config}", group=group_id, config=new)
            if self.group_config_changed is not None:
                self.group_config_changed(group_id, new)
        return new

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

