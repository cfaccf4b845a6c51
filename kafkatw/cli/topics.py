"""
C{kafkatw topics}: create, list, describe and delete topics, as C{kafka-topics.sh}.

Output follows kafka-topics.sh (Apache Kafka 3.x)::

    Topic: t	TopicId: Hk8PvWb1TGSsPpIRY5qR4Q	PartitionCount: 1	ReplicationFactor: 1	Configs: retention.ms=1000
    	Topic: t	Partition: 0	Leader: 0	Replicas: 0	Isr: 0
"""

from __future__ import annotations

import base64
import uuid


import click

from kafkatw.client.wire import WireClient
from kafkatw.errors import ErrorCode, KafkaError

from ._common import bootstrap_option, describe_error, fail, parse_properties

__all__ = ["topics", "format_topic_id"]

_RESOURCE_TOPIC = 2
_SOURCE_DYNAMIC_TOPIC = 1


def format_topic_id(topic_id: uuid.UUID | None) -> str:
    """Kafka's C{Uuid.toString}: URL-safe base64 of the 16 bytes, no padding."""
    raw = (topic_id or uuid.UUID(int=0)).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@click.command(short_help="Create, list, describe, delete topics (kafka-topics.sh).")
@bootstrap_option
@click.option("--create", "action", flag_value="create", help="Create a topic.")
@click.option("--list", "action", flag_value="list", help="List topics.")
@click.option("--describe", "action", flag_value="describe", help="Describe topics.")
@click.option("--delete", "action", flag_value="delete", help="Delete a topic.")
@click.option("--topic", help="The topic (for --describe and --list: all topics when absent).")
@click.option("--partitions", type=click.IntRange(min=1), help="Partition count for --create.")
@click.option("--replication-factor", type=click.IntRange(min=1), help="Replication factor for --create.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config override (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="With --create: do nothing if the topic exists.")
@click.option("--if-exists", is_flag=True, help="With --delete/--describe: do nothing if the topic is absent.")
@click.option("--command-timeout-ms", type=click.IntRange(min=1), default=30000, show_default=True)
def topics(bootstrap_server: str, action: str | None, topic: str | None, partitions: int | None,
           replication_factor: int | None, configs: tuple[str, ...], if_not_exists: bool,
           if_exists: bool, command_timeout_ms: int) -> None:
    """Create, list, describe or delete topics (kafka-topics.sh)."""
    if action is None:
        raise click.UsageError("Command must include exactly one action: --list, --describe, --create or --delete")
    if action in ("create", "delete") and not topic:
        raise click.UsageError(f"--topic is required with --{action}")
    if action != "create" and (partitions is not None or replication_factor is not None or configs):
        raise click.UsageError("--partitions, --replication-factor and --config only go with --create")
    if if_not_exists and action != "create":
        raise click.UsageError("--if-not-exists only goes with --create")
    config_map = parse_properties(configs, "--config")
    try:
        with WireClient(bootstrap_server, timeout_ms=command_timeout_ms) as client:
            if action == "create":
                _create(client, topic, partitions, replication_factor, config_map, if_not_exists, command_timeout_ms)
            elif action == "list":
                _list(client, topic)
            elif action == "describe":
                _describe(client, topic, if_exists)
            else:
                _delete(client, topic, if_exists, command_timeout_ms)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error while executing topic command : {describe_error(e)}")


def _create(client: WireClient, topic: str, partitions: int | None, replication_factor: int | None,
            configs: dict[str, str], if_not_exists: bool, timeout_ms: int) -> None:
    response = client.create_topics([{
        "name": topic,
        "num_partitions": partitions if partitions is not None else -1,
        "replication_factor": replication_factor if replication_factor is not None else -1,
        "configs": configs,
    }], timeout_ms=timeout_ms)
    for result in response.topics:
        code = ErrorCode(int(result.error_code))
        if code == ErrorCode.topic_already_exists and if_not_exists:
            return
        if code != ErrorCode.none:
            message = result.error_message or code.name
            if code == ErrorCode.topic_already_exists:
                message = f"Topic '{topic}' already exists."
            fail(f"Error while executing topic command : {message}")
    click.echo(f"Created topic {topic}.")


def _list(client: WireClient, topic: str | None) -> None:
    response = client.metadata(None)
    names = sorted(t.name for t in response.topics if ErrorCode(int(t.error_code)) == ErrorCode.none and t.name)
    for name in names:
        if topic is None or name == topic:
            click.echo(name)


def _describe(client: WireClient, topic: str | None, if_exists: bool) -> None:
    response = client.metadata(None if topic is None else [topic])
    found = False
    for t in sorted(response.topics, key=lambda t: t.name or ""):
        code = ErrorCode(int(t.error_code))
        if code == ErrorCode.unknown_topic_or_partition:
            continue
        if code != ErrorCode.none:
            fail(f"Error while executing topic command : {t.name}: {code.name}")
        found = True
        partitions = sorted(t.partitions, key=lambda p: int(p.partition_index))
        rf = len(partitions[0].replica_nodes) if partitions else 0
        configs = _dynamic_configs(client, t.name)
        topic_id = format_topic_id(getattr(t, "topic_id", None))
        click.echo(f"Topic: {t.name}\tTopicId: {topic_id}\tPartitionCount: {len(partitions)}\t"
                   f"ReplicationFactor: {rf}\tConfigs: {configs}")
        for p in partitions:
            replicas = ",".join(str(int(r)) for r in p.replica_nodes)
            isr = ",".join(str(int(r)) for r in p.isr_nodes)
            leader = int(p.leader_id)
            click.echo(f"\tTopic: {t.name}\tPartition: {int(p.partition_index)}\t"
                       f"Leader: {leader if leader >= 0 else 'none'}\tReplicas: {replicas}\tIsr: {isr}")
    if topic is not None and not found and not if_exists:
        fail(f"Error while executing topic command : Topic '{topic}' does not exist as expected")


def _dynamic_configs(client: WireClient, topic: str) -> str:
    try:
        response = client.describe_configs([(_RESOURCE_TOPIC, topic)])
    except KafkaError:
        return ""
    pairs = []
    for result in response.results:
        if ErrorCode(int(result.error_code)) != ErrorCode.none:
            continue
        for c in result.configs:
            if int(c.config_source) == _SOURCE_DYNAMIC_TOPIC:
                value = "" if c.value is None else ("<sensitive>" if c.is_sensitive else c.value)
                pairs.append(f"{c.name}={value}")
    return ",".join(pairs)


def _delete(client: WireClient, topic: str, if_exists: bool, timeout_ms: int) -> None:
    response = client.delete_topics([topic], timeout_ms=timeout_ms)
    for result in response.responses:
        code = ErrorCode(int(result.error_code))
        if code == ErrorCode.unknown_topic_or_partition:
            if if_exists:
                return
            fail(f"Error while executing topic command : Topic '{topic}' does not exist as expected")
        if code != ErrorCode.none:
            fail(f"Error while executing topic command : {result.error_message or code.name}")


