"""
The topic administration handlers, mixed into L{kafkatw.broker.apis.KafkaApis}:
topics (CreateTopics, DeleteTopics, CreatePartitions), configs
(DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, KIP-339) and the
requests the controller answers (ElectLeaders, KIP-460;
AlterPartitionReassignments and ListPartitionReassignments, KIP-455).

Topics and configs are written to ZooKeeper by the broker's C{AdminManager}
(L{kafkatw.broker.admin}, Kafka's C{ZkAdminManager}); configs are described by
L{kafkatw.broker.config_helper} (Kafka's C{ConfigHelper}); elections and
reassignments run on the controller (L{kafkatw.broker.controller}), any other
broker answering C{NOT_CONTROLLER}.

With an authorizer each checks what Kafka's C{KafkaApis} checks: Create on
the cluster or the topic (CreateTopics), Delete on the topic (DeleteTopics,
C{TOPIC_AUTHORIZATION_FAILED}), Alter on the topic (CreatePartitions),
DescribeConfigs / AlterConfigs on the topic, the cluster (a broker) or the
group (L{TopicAdminApis._config_denied}), Alter on the cluster (ElectLeaders,
AlterPartitionReassignments) and Describe on the cluster
(ListPartitionReassignments, C{CLUSTER_AUTHORIZATION_FAILED}).

Source: Apache Kafka C{KafkaApis} (C{handleCreateTopicsRequest},
C{handleDeleteTopicsRequest}, C{handleCreatePartitionsRequest},
C{handleDescribeConfigsRequest}, C{handleAlterConfigsRequest},
C{handleIncrementalAlterConfigsRequest}, C{handleElectLeaders},
C{handleAlterPartitionReassignmentsRequest},
C{handleListPartitionReassignmentsRequest}), C{ZkAdminManager},
C{ConfigHelper}; KIP-339, KIP-455, KIP-460.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from twisted.internet import defer

from ..errors import ErrorCode, KafkaError, kafka_error
from ..security.acl import AclOperation, ResourceType
from ..zookeeper.bridge import ZooKeeperError
from .config_helper import describe_broker_configs, describe_topic_configs
from .request_context import RequestContext

__all__ = ["TOPIC_ADMIN_VERSIONS", "TopicAdminApis", "validate_topic_name"]

#: API key -> (min, max) version served.
TOPIC_ADMIN_VERSIONS: dict[int, tuple[int, int]] = {
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    37: (0, 3),  # CreatePartitions
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs (legacy: replaces a resource's whole set)
    44: (0, 1),  # IncrementalAlterConfigs (KIP-339)
    43: (0, 2),  # ElectLeaders (KIP-460; answered by the controller)
    45: (0, 0),  # AlterPartitionReassignments (KIP-455; answered by the controller)
    46: (0, 0),  # ListPartitionReassignments (KIP-455; answered by the controller)
}

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str | None) -> ErrorCode:
    """
    Kafka's topic name rules (C{Topic.validate}): 1–249 characters of
    C{[a-zA-Z0-9._-]}, not C{.} or C{..}.

    @return: C{ErrorCode.none} or C{ErrorCode.invalid_topic_exception}.
    """
    if not name or name in (".", "..") or len(name) > 249 or not _LEGAL_TOPIC.match(name):
        return ErrorCode.invalid_topic_exception
    return ErrorCode.none


def _set_admin_error(entry: dict[str, Any], error: KafkaError | ZooKeeperError,
                     zookeeper: str = "ZooKeeper unavailable") -> None:
    """
    Sets the C{error_code} and C{error_message} of one result of an admin
    request (a topic of CreateTopics, DeleteTopics or CreatePartitions, a
    resource of AlterConfigs or IncrementalAlterConfigs).

    @param error: a L{KafkaError} (its code, its message or C{None} when
        empty) or a L{ZooKeeperError} (C{REQUEST_TIMED_OUT}, with the message
        C{"<zookeeper>: <error>"}).
    """
    if isinstance(error, KafkaError):
        entry["error_code"] = int(error.error_code)
        entry["error_message"] = str(error) or None
    else:
        entry["error_code"] = int(ErrorCode.request_timed_out)
        entry["error_message"] = f"{zookeeper}: {error}"


class TopicAdminApis:
    """
    CreateTopics, DeleteTopics, CreatePartitions, the configs' requests and
    the controller's; a mixin of L{kafkatw.broker.apis.KafkaApis}, whose
    attributes and helpers it uses.
    """

    # provided by KafkaApis
    config: Any
    broker_id: int
    metadata: Any
    admin: Any
    authorizer: Any
    controller: Any
    group_configs: Any
    _allowed: Callable[..., bool]
    _respond: Callable[..., bytes]

    def topic_admin_handlers(self) -> dict[int, Callable[..., Any]]:
        """The API key -> handler entries for L{TOPIC_ADMIN_VERSIONS}."""
        return {19: self.handle_create_topics, 20: self.handle_delete_topics,
                37: self.handle_create_partitions, 32: self.handle_describe_configs,
                33: self.handle_alter_configs, 44: self.handle_incremental_alter_configs,
                43: self.handle_elect_leaders, 45: self.handle_alter_partition_reassignments,
                46: self.handle_list_partition_reassignments}

    # --- CreateTopics / DeleteTopics ----------------------------------------

    def handle_create_topics(self, context: RequestContext, request: Any) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._create_topics(context, request))

    async def _create_topics(self, context: RequestContext, request: Any) -> bytes:
        results = []
        cluster_create = self._allowed(context, AclOperation.CREATE, ResourceType.CLUSTER)
        for topic in request.topics:
            entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None,
                                     "num_partitions": -1, "replication_factor": -1, "configs": None}
            if not cluster_create and not self._allowed(context, AclOperation.CREATE, ResourceType.TOPIC, topic.name):
                entry["error_code"] = int(ErrorCode.topic_authorization_failed)
                results.append(entry)
                continue
            try:
                invalid = validate_topic_name(topic.name)
                if invalid:
                    raise kafka_error(invalid, f"invalid topic name {topic.name!r}")
                configs = {c.name: c.value for c in topic.configs}
                assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None
                partitions = topic.num_partitions if topic.num_partitions != -1 else self.config["num.partitions"]
                rf = topic.replication_factor if topic.replication_factor != -1 else \
                    self.config["default.replication.factor"]
                meta = await self.admin.create_topic(
                    topic.name, partitions, rf, assignment, configs, validate_only=request.validate_only
                )
                entry["num_partitions"] = len(meta.partitions)
                entry["replication_factor"] = len(next(iter(meta.partitions.values())))
                entry["topic_id"] = meta.topic_id
                entry["configs"] = [
                    {k: c[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                    for c in describe_topic_configs(self.config, configs)
                ]
                if not self._allowed(context, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name):
                    entry.update(configs=None, topic_config_error_code=int(ErrorCode.topic_authorization_failed))
            except (KafkaError, ZooKeeperError) as e:
                _set_admin_error(entry, e)
            results.append(entry)
        return self._respond(context, {"throttle_time": 0, "topics": results})

    def handle_delete_topics(self, context: RequestContext, request: Any) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._delete_topics(context, request))

    async def _delete_topics(self, context: RequestContext, request: Any) -> bytes:
        if hasattr(request, "topic_names"):
            names = list(request.topic_names)
        else:
            by_id = {meta.topic_id: name for name, meta in self.metadata.topics.items()}
            names = [t.name if t.name is not None else by_id.get(t.topic_id, str(t.topic_id)) for t in request.topics]
        results = []
        for name in names:
            entry = {"name": name, "error_code": 0, "error_message": None}
            try:
                if not self._allowed(context, AclOperation.DELETE, ResourceType.TOPIC, name) and (
                        name in self.metadata.topics
                        or not self._allowed(context, AclOperation.DESCRIBE, ResourceType.TOPIC, name)):
                    raise kafka_error(ErrorCode.topic_authorization_failed, "")
                if not self.config["delete.topic.enable"]:
                    raise kafka_error(ErrorCode.topic_deletion_disabled, "delete.topic.enable=false")
                if name not in self.metadata.topics:
                    raise kafka_error(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
                entry["topic_id"] = self.metadata.topics[name].topic_id
                await self.admin.delete_topic(name)
            except (KafkaError, ZooKeeperError) as e:
                _set_admin_error(entry, e)
            results.append(entry)
        return self._respond(context, {"throttle_time": 0, "responses": results})

    # --- CreatePartitions ------------------------------------------------------

    def handle_create_partitions(self, context: RequestContext, request: Any) -> defer.Deferred:
        async def go() -> bytes:
            results = []
            for topic in request.topics:
                entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None}
                try:
                    if not self._allowed(context, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                        raise kafka_error(ErrorCode.topic_authorization_failed, "")
                    assignment = None if topic.assignments is None else [list(a.broker_ids)
                                                                           for a in topic.assignments]
                    await self.admin.create_partitions(topic.name, topic.count, assignment, request.validate_only)
                except (KafkaError, ZooKeeperError) as e:
                    _set_admin_error(entry, e, zookeeper="ZooKeeper")
                results.append(entry)
            return self._respond(context, {"throttle_time": 0, "results": results})

        return defer.Deferred.fromCoroutine(go())

    # --- DescribeConfigs -----------------------------------------------------

    def _config_denied(self, context: RequestContext, operation: AclOperation, resource_type: int,
                       name: str) -> ErrorCode:
        """
        DescribeConfigs / AlterConfigs of a topic need that operation on the
        topic, of a broker on the cluster (Kafka's C{ConfigHelper}).

        @return: C{TOPIC_AUTHORIZATION_FAILED}, C{CLUSTER_AUTHORIZATION_FAILED} or C{NONE}.
        """
        if self.authorizer is None:
            return ErrorCode.none
        if resource_type == 2 and not self._allowed(context, operation, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed
        if resource_type in (4, 8) and not self._allowed(context, operation, ResourceType.CLUSTER):
            return ErrorCode.cluster_authorization_failed
        if resource_type == 32 and not self._allowed(context, operation, ResourceType.GROUP, name):  # KIP-848
            return ErrorCode.group_authorization_failed
        return ErrorCode.none

    def handle_describe_configs(self, context: RequestContext, request: Any) -> bytes:
        """
        DescribeConfigs v1-v4 (L{kafkatw.broker.config_helper}): a topic's
        configs, this broker's (its id), or the cluster-wide dynamic defaults
        (resource name C{""}); another broker's id is C{INVALID_REQUEST}, as
        Kafka answers (clients ask each broker for its own).
        """
        include_synonyms = bool(getattr(request, "include_synonyms", False))
        include_documentation = bool(getattr(request, "include_documentation", False))
        results = []
        for resource in request.resources:
            entry: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": resource.resource_type,
                                     "resource_name": resource.resource_name, "configs": []}
            keys = list(resource.configuration_keys) if resource.configuration_keys is not None else None
            denied = self._config_denied(context, AclOperation.DESCRIBE_CONFIGS, resource.resource_type,
                                         resource.resource_name)
            if denied:
                entry["error_code"] = int(denied)
            elif resource.resource_type == 2:  # TOPIC
                meta = self.metadata.topics.get(resource.resource_name)
                if meta is None:
                    entry["error_code"] = int(ErrorCode.unknown_topic_or_partition)
                    entry["error_message"] = f"Topic {resource.resource_name} does not exist"
                else:
                    entry["configs"] = describe_topic_configs(self.config, meta.config, keys, include_synonyms,
                                                              include_documentation)
            elif resource.resource_type == 4:  # BROKER
                name = resource.resource_name
                if name and name != str(self.broker_id):
                    entry["error_code"] = int(ErrorCode.invalid_request)
                    entry["error_message"] = (f"Unexpected broker id, expected {self.broker_id} or empty string, "
                                              f"but received {name}")
                else:
                    entry["configs"] = describe_broker_configs(self.config, bool(name), keys, include_synonyms,
                                                               include_documentation)
            elif resource.resource_type == 32:  # GROUP (KIP-848, KIP-932: kafkatw/broker/group_config.py)
                entry["configs"] = self.group_configs.describe(resource.resource_name, keys)
            else:
                entry["error_code"] = int(ErrorCode.invalid_request)
                entry["error_message"] = f"resource type {resource.resource_type} is not supported"
            results.append(entry)
        return self._respond(context, {"throttle_time": 0, "results": results})

    # --- AlterConfigs / IncrementalAlterConfigs -----------------------------------

    def handle_alter_configs(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        AlterConfigs (legacy): each resource's configs are replaced by the
        given set (L{kafkatw.broker.admin.AdminManager.alter_configs}).
        """
        return self._alter_configs(context, request, incremental=False)

    def handle_incremental_alter_configs(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        IncrementalAlterConfigs (KIP-339): SET, DELETE, APPEND, SUBTRACT of
        topic and broker configs (L{kafkatw.broker.admin.AdminManager.alter_configs}).
        """
        return self._alter_configs(context, request, incremental=True)

    def _alter_configs(self, context: RequestContext, request: Any, incremental: bool) -> defer.Deferred:
        async def go() -> bytes:
            responses = []
            for resource in request.resources:
                entry: dict[str, Any] = {"error_code": 0, "error_message": None,
                                         "resource_type": resource.resource_type,
                                         "resource_name": resource.resource_name}
                if incremental:
                    operations = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
                else:
                    operations = [(c.name, 0, c.value) for c in resource.configs if c.value is not None]
                try:
                    denied = self._config_denied(context, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                                 resource.resource_name)
                    if denied:
                        raise kafka_error(denied, "")
                    await self.admin.alter_configs(int(resource.resource_type), resource.resource_name, operations,
                                                   incremental, request.validate_only)
                except (KafkaError, ZooKeeperError) as e:
                    _set_admin_error(entry, e, zookeeper="ZooKeeper")
                responses.append(entry)
            return self._respond(context, {"throttle_time": 0, "responses": responses})

        return defer.Deferred.fromCoroutine(go())

    # --- controller requests: ElectLeaders, partition reassignments ----------------

    def _not_controller(self) -> bool:
        return self.controller is None or not self.controller.active

    def handle_elect_leaders(self, context: RequestContext, request: Any) -> Any:
        """ElectLeaders (KIP-460): preferred (0) or unclean (1) elections, on the controller."""
        election_type = getattr(request, "election_type", 0)
        wanted = None if request.topic_partitions is None else [
            (t.topic, p) for t in request.topic_partitions for p in t.partitions]

        def answer(results: dict, top: ErrorCode = ErrorCode.none) -> bytes:
            topics: dict[str, list] = {}
            for (topic, partition), (code, message) in sorted(results.items()):
                topics.setdefault(topic, []).append({"partition_id": partition, "error_code": int(code),
                                                     "error_message": message})
            return self._respond(context, {"throttle_time": 0, "error_code": int(top), "replica_election_results": [
                {"topic": topic, "partition_result": partitions} for topic, partitions in topics.items()]})

        if not self._allowed(context, AclOperation.ALTER, ResourceType.CLUSTER):
            return answer({k: (ErrorCode.cluster_authorization_failed, None) for k in wanted or []},
                          ErrorCode.cluster_authorization_failed)
        if self._not_controller():
            return answer({k: (ErrorCode.not_controller, "not the controller") for k in wanted or []},
                          ErrorCode.not_controller)
        return self.controller.elect_leaders(election_type, wanted).addCallback(answer)

    def handle_alter_partition_reassignments(self, context: RequestContext, request: Any) -> Any:
        targets = {(t.name, p.partition_index): (None if p.replicas is None else list(p.replicas))
                   for t in request.topics for p in t.partitions}

        def answer(results: dict, top: ErrorCode = ErrorCode.none) -> bytes:
            topics: dict[str, list] = {}
            for (topic, partition), (code, message) in sorted(results.items()):
                topics.setdefault(topic, []).append({"partition_index": partition, "error_code": int(code),
                                                     "error_message": message})
            return self._respond(context, {"throttle_time": 0, "error_code": int(top),
                                           "error_message": None if top in (ErrorCode.none,
                                                                            ErrorCode.cluster_authorization_failed)
                                           else "not the controller",
                                           "responses": [{"name": t, "partitions": ps} for t, ps in topics.items()]})

        if not self._allowed(context, AclOperation.ALTER, ResourceType.CLUSTER):
            return answer({}, ErrorCode.cluster_authorization_failed)
        if self._not_controller():
            return answer({}, ErrorCode.not_controller)
        return self.controller.reassign(targets).addCallback(answer)

    def handle_list_partition_reassignments(self, context: RequestContext, request: Any) -> bytes:
        if not self._allowed(context, AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.cluster_authorization_failed),
                                           "error_message": None, "topics": []})
        if self._not_controller():
            return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.not_controller),
                                           "error_message": "not the controller", "topics": []})
        wanted = None if request.topics is None else {
            (t.name, p) for t in request.topics for p in t.partition_indexes}
        topics: dict[str, list] = {}
        for (topic, partition), (replicas, adding, removing) in sorted(self.controller.ongoing_reassignments().items()):
            if wanted is None or (topic, partition) in wanted:
                topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas,
                                                     "adding_replicas": adding, "removing_replicas": removing})
        return self._respond(context, {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": [
            {"name": t, "partitions": ps} for t, ps in topics.items()]})
