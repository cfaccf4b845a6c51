"""
C{kafkatw topics}: create, list, describe, alter and delete topics, as C{kafka-topics.sh}.

Output follows kafka-topics.sh (Apache Kafka 3.x, C{TopicCommand})::

    Topic: t	TopicId: Hk8PvWb1TGSsPpIRY5qR4Q	PartitionCount: 3	ReplicationFactor: 3	Configs: min.insync.replicas=2
    	Topic: t	Partition: 0	Leader: 1	Replicas: 1,2,3	Isr: 1,2,3

C{Configs} lists the configs that are not defaults; C{Leader} is C{none} when
the partition has no leader.  With C{--under-replicated-partitions} (ISR
smaller than the replicas), C{--under-min-isr-partitions} (ISR smaller than the
topic's C{min.insync.replicas}, or no leader) or C{--unavailable-partitions}
(no leader, or a leader that is not a live broker) only the matching partition
lines are printed, without the topic lines, as Kafka does.

The tool runs on L{kafkatw.client.blocking.BlockingAdminClient}: every request
follows leaders and the controller as they move (docs/clients.md).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import click

from kafkatw.client.admin import RESOURCE_TOPIC, NewPartitions, NewTopic, TopicDescription
from kafkatw.errors import ErrorCode, KafkaError

from ._common import bootstrap_option, client_security, command_config_option, describe_error, fail, parse_properties

__all__ = ["topics", "format_topic_id", "format_topic", "format_partition"]

_ERROR = "Error while executing topic command : "


def format_topic_id(topic_id: uuid.UUID | None) -> str:
    """Kafka's C{Uuid.toString}: URL-safe base64 of the 16 bytes, no padding."""
    raw = (topic_id or uuid.UUID(int=0)).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def format_topic(topic: TopicDescription, configs: str) -> str:
    """The topic line of C{--describe} (Kafka's C{TopicDescription.printDescription})."""
    rf = len(topic.partitions[0].replicas) if topic.partitions else 0
    topic_id = f"\tTopicId: {format_topic_id(topic.topic_id)}" if topic.topic_id is not None else ""
    return (f"Topic: {topic.name}{topic_id}\tPartitionCount: {len(topic.partitions)}\t"
            f"ReplicationFactor: {rf}\tConfigs: {configs}")


def format_partition(topic: str, p: Any) -> str:
    """A partition line of C{--describe} (Kafka's C{PartitionDescription.printDescription})."""
    return (f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")


_REPORTS = ("under_replicated_partitions", "under_min_isr_partitions", "unavailable_partitions")


@click.command(short_help="Create, list, describe, alter, delete topics (kafka-topics.sh).")
@bootstrap_option
@command_config_option
@click.option("--create", "action", flag_value="create", help="Create a topic.")
@click.option("--list", "action", flag_value="list", help="List topics.")
@click.option("--describe", "action", flag_value="describe", help="Describe topics.")
@click.option("--alter", "action", flag_value="alter", help="Add partitions to a topic (with --partitions).")
@click.option("--delete", "action", flag_value="delete", help="Delete a topic.")
@click.option("--topic", help="The topic (for --describe and --list: all topics when absent).")
@click.option("--partitions", type=click.IntRange(min=1),
              help="Partition count for --create; the new count for --alter.")
@click.option("--replication-factor", type=click.IntRange(min=1), help="Replication factor for --create.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config override (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="With --create: do nothing if the topic exists.")
@click.option("--if-exists", is_flag=True,
              help="With --alter/--delete/--describe: do nothing if the topic is absent.")
@click.option("--under-replicated-partitions", is_flag=True,
              help="With --describe: only partitions whose ISR is smaller than their replicas.")
@click.option("--under-min-isr-partitions", is_flag=True,
              help="With --describe: only partitions whose ISR is smaller than min.insync.replicas.")
@click.option("--unavailable-partitions", is_flag=True,
              help="With --describe: only partitions without a live leader.")
@click.option("--command-timeout-ms", type=click.IntRange(min=1), default=30000, show_default=True)
def topics(bootstrap_server: str, action: str | None, topic: str | None, partitions: int | None,
           replication_factor: int | None, configs: tuple[str, ...], if_not_exists: bool,
           if_exists: bool, command_timeout_ms: int, under_replicated_partitions: bool = False,
           under_min_isr_partitions: bool = False, unavailable_partitions: bool = False) -> None:
    """Create, list, describe, alter or delete topics (kafka-topics.sh)."""
    if action is None:
        raise click.UsageError("Command must include exactly one action: --list, --describe, --create, --alter or "
                               "--delete")
    if action in ("create", "alter", "delete") and not topic:
        raise click.UsageError(f"--topic is required with --{action}")
    if action == "alter":
        if partitions is None:
            raise click.UsageError("Missing required argument \"[partitions]\" with --alter")
        if replication_factor is not None:
            raise click.UsageError("Option \"[replication-factor]\" can't be used with option \"[alter]\"")
        if configs:
            raise click.UsageError("Option \"[config]\" can't be used with option \"[alter]\" "
                                   "(kafka-configs.sh alters topic configs)")
    elif action != "create" and (partitions is not None or replication_factor is not None or configs):
        raise click.UsageError("--partitions, --replication-factor and --config only go with --create "
                               "(--partitions also with --alter)")
    if if_not_exists and action != "create":
        raise click.UsageError("--if-not-exists only goes with --create")
    reports = {name for name, on in zip(_REPORTS, (under_replicated_partitions, under_min_isr_partitions,
                                                   unavailable_partitions)) if on}
    if reports and action != "describe":
        raise click.UsageError("--under-replicated-partitions, --under-min-isr-partitions and "
                               "--unavailable-partitions only go with --describe")
    if len(reports) > 1:
        raise click.UsageError("give only one of --under-replicated-partitions, --under-min-isr-partitions, "
                               "--unavailable-partitions")
    config_map = parse_properties(configs, "--config")
    from kafkatw.client.blocking import BlockingAdminClient

    admin = None
    try:
        admin = BlockingAdminClient(bootstrap_server, **client_security(), client_id="kafkatw-topics",
                                    request_timeout_ms=command_timeout_ms, default_api_timeout_ms=command_timeout_ms)
        if action == "create":
            _create(admin, topic, partitions, replication_factor, config_map, if_not_exists, command_timeout_ms)
        elif action == "list":
            _list(admin, topic)
        elif action == "describe":
            _describe(admin, topic, if_exists, next(iter(reports), None))
        elif action == "alter":
            _alter(admin, topic, partitions, if_exists, command_timeout_ms)
        else:
            _delete(admin, topic, if_exists, command_timeout_ms)
    except (KafkaError, OSError, ValueError) as e:
        fail(_ERROR + describe_error(e))
    finally:
        if admin is not None:
            admin.close()


def _create(admin: Any, topic: str, partitions: int | None, replication_factor: int | None,
            configs: dict[str, str], if_not_exists: bool, timeout_ms: int) -> None:
    new = NewTopic(topic, partitions if partitions is not None else -1,
                   replication_factor if replication_factor is not None else -1, configs=configs)
    error = admin.create_topics([new], timeout_ms=timeout_ms)[topic]
    if error is not None:
        if error.error_code == ErrorCode.topic_already_exists:
            if if_not_exists:
                return
            fail(f"{_ERROR}Topic '{topic}' already exists.")
        fail(_ERROR + describe_error(error))
    click.echo(f"Created topic {topic}.")


def _list(admin: Any, topic: str | None) -> None:
    for name in admin.list_topics():
        if topic is None or name == topic:
            click.echo(name)


def _existing(admin: Any, topic: str | None, if_exists: bool) -> dict[str, TopicDescription]:
    """The topics to work on; a named one that is absent fails as Kafka's C{ensureTopicExists} does."""
    try:
        return admin.describe_topics(None if topic is None else [topic])
    except KafkaError as e:
        if e.error_code != ErrorCode.unknown_topic_or_partition:
            raise
        if if_exists:
            return {}
        fail(f"{_ERROR}Topic '{topic}' does not exist as expected")


def _describe(admin: Any, topic: str | None, if_exists: bool, report: str | None) -> None:
    described = _existing(admin, topic, if_exists)
    if not described:
        return
    live = set(admin.describe_cluster().nodes) if report == "unavailable_partitions" else set()
    configs: dict[str, dict] = {}
    if report in (None, "under_min_isr_partitions"):
        for name in described:
            try:
                configs[name] = admin.describe_configs([(RESOURCE_TOPIC, name)])[(RESOURCE_TOPIC, name)]
            except KafkaError:
                configs[name] = {}
    for name in sorted(described):
        t = described[name]
        if report is None:
            shown = ",".join(f"{c.name}={'' if c.value is None else c.value}" if not c.is_sensitive
                             else f"{c.name}=<sensitive>"
                             for c in configs[name].values() if not c.is_default)
            click.echo(format_topic(t, shown))
        min_isr_entry = configs.get(name, {}).get("min.insync.replicas")
        min_isr = int(min_isr_entry.value) if min_isr_entry is not None and min_isr_entry.value else None
        for p in t.partitions:
            if report is None \
                    or (report == "under_replicated_partitions" and len(p.isr) < len(p.replicas)) \
                    or (report == "under_min_isr_partitions"
                        and (p.leader < 0 or (min_isr is not None and len(p.isr) < min_isr))) \
                    or (report == "unavailable_partitions" and (p.leader < 0 or p.leader not in live)):
                click.echo(format_partition(name, p))


def _alter(admin: Any, topic: str, partitions: int, if_exists: bool, timeout_ms: int) -> None:
    described = _existing(admin, topic, if_exists)
    if not described:
        return
    # a count that would not grow the topic: the broker's INVALID_PARTITIONS text is Kafka's
    error = admin.create_partitions({topic: NewPartitions(partitions)}, timeout_ms=timeout_ms)[topic]
    if error is not None:
        fail(_ERROR + describe_error(error))


def _delete(admin: Any, topic: str, if_exists: bool, timeout_ms: int) -> None:
    error = admin.delete_topics([topic], timeout_ms=timeout_ms)[topic]
    if error is None:
        return
    if error.error_code == ErrorCode.unknown_topic_or_partition:
        if if_exists:
            return
        fail(f"{_ERROR}Topic '{topic}' does not exist as expected")
    fail(_ERROR + describe_error(error))
