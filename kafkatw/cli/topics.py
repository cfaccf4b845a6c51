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
lines are printed, without the topic lines, as Kafka does; so with
C{--at-min-isr-partitions} (ISR exactly C{min.insync.replicas}).
C{--topics-with-overrides} prints only the topic lines of topics with a
non-default config.  C{--exclude-internal} leaves Kafka's internal topics
(C{__consumer_offsets}, C{__transaction_state}) out of C{--list} and
C{--describe}.

The tool runs on L{kafkatw.client.blocking.BlockingAdminClient}: every request
follows leaders and the controller as they move (docs/clients.md).
"""

from __future__ import annotations

import base64
import re
import uuid
from typing import TYPE_CHECKING, Any

import click

from ._common import (INTERNAL_TOPICS, bootstrap_option, client_security, command_config_option, describe_error, fail,
                      parse_properties)

if TYPE_CHECKING:  # pragma: no cover
    from kafkatw.client.admin import TopicDescription

__all__ = ["topics", "format_topic_id", "format_topic", "format_partition", "partition_matches", "include_list"]

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


_REPORTS = ("under_replicated_partitions", "under_min_isr_partitions", "at_min_isr_partitions",
            "unavailable_partitions")


@click.command(short_help="Create, list, describe, alter, delete topics (kafka-topics.sh).")
@bootstrap_option
@command_config_option
@click.option("--create", "action", flag_value="create", help="Create a topic.")
@click.option("--list", "action", flag_value="list", help="List topics.")
@click.option("--describe", "action", flag_value="describe", help="Describe topics.")
@click.option("--alter", "action", flag_value="alter", help="Add partitions to a topic (with --partitions).")
@click.option("--delete", "action", flag_value="delete", help="Delete a topic.")
@click.option("--topic", help="The topic; for --list and --describe a regular expression of topic names, as in "
                             "Kafka (all topics when absent).")
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
@click.option("--at-min-isr-partitions", is_flag=True,
              help="With --describe: only partitions whose ISR is exactly min.insync.replicas.")
@click.option("--unavailable-partitions", is_flag=True,
              help="With --describe: only partitions without a live leader.")
@click.option("--topics-with-overrides", is_flag=True,
              help="With --describe: only the topic lines of topics with a non-default config.")
@click.option("--exclude-internal", is_flag=True,
              help="With --list/--describe: leave out the internal topics (__consumer_offsets, __transaction_state).")
@click.option("--command-timeout-ms", type=click.IntRange(min=1), default=30000, show_default=True)
def topics(bootstrap_server: str, action: str | None, topic: str | None, partitions: int | None,
           replication_factor: int | None, configs: tuple[str, ...], if_not_exists: bool,
           if_exists: bool, command_timeout_ms: int, under_replicated_partitions: bool = False,
           under_min_isr_partitions: bool = False, unavailable_partitions: bool = False,
           at_min_isr_partitions: bool = False, topics_with_overrides: bool = False,
           exclude_internal: bool = False) -> None:
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
                                                   at_min_isr_partitions, unavailable_partitions)) if on}
    if topics_with_overrides:
        reports.add("topics_with_overrides")
    if reports and action != "describe":
        raise click.UsageError("--under-replicated-partitions, --under-min-isr-partitions, --at-min-isr-partitions, "
                               "--unavailable-partitions and --topics-with-overrides only go with --describe")
    if len(reports) > 1:
        raise click.UsageError("give only one of --under-replicated-partitions, --under-min-isr-partitions, "
                               "--at-min-isr-partitions, --unavailable-partitions, --topics-with-overrides")
    if exclude_internal and action not in ("list", "describe"):
        raise click.UsageError("--exclude-internal only goes with --list and --describe")
    config_map = parse_properties(configs, "--config")
    if topic is not None and action in ("list", "describe"):
        include_list(topic)  # a bad regular expression is a usage error before any connection
    from kafkatw.client.blocking import BlockingAdminClient
    from kafkatw.errors import KafkaError

    admin = None
    try:
        admin = BlockingAdminClient(bootstrap_server, **client_security(), client_id="kafkatw-topics",
                                    request_timeout_ms=command_timeout_ms, default_api_timeout_ms=command_timeout_ms)
        if action == "create":
            _create(admin, topic, partitions, replication_factor, config_map, if_not_exists, command_timeout_ms)
        elif action == "list":
            _list(admin, topic, exclude_internal)
        elif action == "describe":
            _describe(admin, topic, if_exists, next(iter(reports), None), exclude_internal)
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
    from kafkatw.client.admin import NewTopic
    from kafkatw.errors import ErrorCode

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


def include_list(topic: str) -> re.Pattern[str]:
    """
    C{--topic} of C{--list} and C{--describe}: a regular expression a whole
    topic name must match, as Kafka's C{IncludeList} reads it (commas are
    alternatives, spaces and surrounding quotes dropped), so C{--topic t}
    is the topic C{t} and C{--topic 'logs-.*'} every C{logs-} topic.

    @raise click.BadParameter: not a regular expression.
    """
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", topic.strip().replace(",", "|").replace(" ", "")))
    try:
        return re.compile(regex)
    except re.error:
        raise click.BadParameter(f"{regex} is an invalid regex.", param_hint="--topic") from None


def _list(admin: Any, topic: str | None, exclude_internal: bool = False) -> None:
    pattern = None if topic is None else include_list(topic)
    for name in admin.list_topics():
        if (pattern is None or pattern.fullmatch(name)) and not (exclude_internal and name in INTERNAL_TOPICS):
            click.echo(name)


def _existing(admin: Any, topic: str | None, if_exists: bool) -> dict[str, TopicDescription]:
    """The topics to work on; a named one that is absent fails as Kafka's C{ensureTopicExists} does."""
    from kafkatw.errors import ErrorCode, KafkaError

    try:
        return admin.describe_topics(None if topic is None else [topic])
    except KafkaError as e:
        if e.error_code != ErrorCode.unknown_topic_or_partition:
            raise
        if if_exists:
            return {}
        fail(f"{_ERROR}Topic '{topic}' does not exist as expected")


def partition_matches(report: str | None, p: Any, min_isr: int | None, live: set[int]) -> bool:
    """
    Whether C{--describe} prints partition C{p} under C{report} (Kafka's
    C{TopicCommand.PartitionDescription}): C{None} every partition,
    C{under_replicated_partitions} ISR smaller than the replicas,
    C{under_min_isr_partitions} no leader or ISR smaller than C{min_isr},
    C{at_min_isr_partitions} ISR exactly C{min_isr}, C{unavailable_partitions}
    no leader or a leader not in C{live}, C{topics_with_overrides} none.
    """
    if report is None:
        return True
    if report == "under_replicated_partitions":
        return len(p.isr) < len(p.replicas)
    if report == "under_min_isr_partitions":
        return p.leader < 0 or (min_isr is not None and len(p.isr) < min_isr)
    if report == "at_min_isr_partitions":
        return min_isr is not None and len(p.isr) == min_isr
    if report == "unavailable_partitions":
        return p.leader < 0 or p.leader not in live
    return False


def _describe(admin: Any, topic: str | None, if_exists: bool, report: str | None,
              exclude_internal: bool = False) -> None:
    from kafkatw.client.admin import RESOURCE_TOPIC
    from kafkatw.errors import KafkaError

    described = _existing(admin, None, if_exists)
    if topic is not None:
        pattern = include_list(topic)
        described = {name: t for name, t in described.items() if pattern.fullmatch(name)}
    if exclude_internal:
        described = {name: t for name, t in described.items() if name not in INTERNAL_TOPICS}
    if topic is not None and not described and not if_exists:  # Kafka's ensureTopicExists
        fail(f"{_ERROR}Topic '{topic}' does not exist as expected")
    if not described:
        return
    live = set(admin.describe_cluster().nodes) if report == "unavailable_partitions" else set()
    configs: dict[str, dict] = {}
    if report in (None, "under_min_isr_partitions", "at_min_isr_partitions", "topics_with_overrides"):
        for name in described:
            try:
                configs[name] = admin.describe_configs([(RESOURCE_TOPIC, name)])[(RESOURCE_TOPIC, name)]
            except KafkaError:
                configs[name] = {}
    for name in sorted(described):
        t = described[name]
        if report in (None, "topics_with_overrides"):
            overrides = [c for c in configs[name].values() if not c.is_default]
            if report is None or overrides:
                shown = ",".join(f"{c.name}={'' if c.value is None else c.value}" if not c.is_sensitive
                                 else f"{c.name}=<sensitive>" for c in overrides)
                click.echo(format_topic(t, shown))
        min_isr_entry = configs.get(name, {}).get("min.insync.replicas")
        min_isr = int(min_isr_entry.value) if min_isr_entry is not None and min_isr_entry.value else None
        for p in t.partitions:
            if partition_matches(report, p, min_isr, live):
                click.echo(format_partition(name, p))


def _alter(admin: Any, topic: str, partitions: int, if_exists: bool, timeout_ms: int) -> None:
    from kafkatw.client.admin import NewPartitions

    described = _existing(admin, topic, if_exists)
    if not described:
        return
    # a count that would not grow the topic: the broker's INVALID_PARTITIONS text is Kafka's
    error = admin.create_partitions({topic: NewPartitions(partitions)}, timeout_ms=timeout_ms)[topic]
    if error is not None:
        fail(_ERROR + describe_error(error))


def _delete(admin: Any, topic: str, if_exists: bool, timeout_ms: int) -> None:
    from kafkatw.errors import ErrorCode

    error = admin.delete_topics([topic], timeout_ms=timeout_ms)[topic]
    if error is None:
        return
    if error.error_code == ErrorCode.unknown_topic_or_partition:
        if if_exists:
            return
        fail(f"{_ERROR}Topic '{topic}' does not exist as expected")
    fail(_ERROR + describe_error(error))
