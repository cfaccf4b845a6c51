"""
C{kafkatw consumer-groups}: list, describe, delete consumer groups and reset
their offsets, as Apache Kafka's C{kafka-consumer-groups.sh}.

    kafkatw consumer-groups --bootstrap-server localhost:9092 --list
    kafkatw consumer-groups --bootstrap-server localhost:9092 --describe --group g
    kafkatw consumer-groups --bootstrap-server localhost:9092 --delete --group g
    kafkatw consumer-groups --bootstrap-server localhost:9092 --delete-offsets --group g --topic t:0,1
    kafkatw consumer-groups --bootstrap-server localhost:9092 --reset-offsets --group g \\
        --topic t --to-earliest --execute

C{--describe} prints Kafka's columns (Kafka 3.x)::

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

Groups are read through a L{GroupSource}: L{BrokerGroupSource} asks the group
coordinators over the Kafka protocol (the groups of Kafka clients).  The
paper-style groups of the ZooKeeper consumers are read by a ZooKeeper source
(C{--zookeeper}), which plugs in beside it.  Requests go through
L{kafkatw.client.blocking.BlockingAdminClient}, which follows coordinators and
leaders as they move.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import click

from kafkatw.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, RESOURCE_BROKER
from kafkatw.errors import ErrorCode, KafkaError, kafka_error
from kafkatw.protocol.consumer_protocol import decode_assignment

from ._common import client_security, command_config_option, describe_error, fail, list_offsets

__all__ = ["consumer_groups", "GroupSource", "BrokerGroupSource", "GroupDescription", "MemberDescription",
           "format_describe"]

# Versions this tool speaks; every kafkatw broker and Apache Kafka 2.4+ serve them.
_LIST_GROUPS_V = 2
_DESCRIBE_GROUPS_V = 4
_OFFSET_FETCH_V = 5
_OFFSET_COMMIT_V = 7
_DELETE_GROUPS_V = 1


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    offsets: dict[tuple[str, int], int]


class GroupSource(Protocol):
    """Where consumer groups are read from (the coordinators, or ZooKeeper)."""

    def list_groups(self) -> list[str]: ...

    def describe(self, group_id: str) -> GroupDescription: ...

    def delete(self, group_id: str) -> None: ...

    def commit(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None: ...


def _check(code: Any, what: str) -> None:
    code = ErrorCode(int(code))
    if code != ErrorCode.none:
        raise kafka_error(code, f"{what}: {code.name}")


class BrokerGroupSource:
    """Groups of Kafka clients, read from their coordinators over the Kafka protocol."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin

    def _send(self, group_id: str, api_key: int, version: int, body: dict, error_of: Any = None) -> Any:
        """A request to the group's coordinator, sent again when the coordinator moves."""
        return self.admin.coordinator_request(group_id, api_key, body, version=version, error_of=error_of)

    def list_groups(self) -> list[str]:
        return self.admin.list_consumer_groups(version=_LIST_GROUPS_V)

    def describe(self, group_id: str) -> GroupDescription:
        response = self._send(group_id, 15, _DESCRIBE_GROUPS_V,
                              {"groups": [group_id], "include_authorized_operations": False},
                              lambda r: r.groups[0].error_code)
        described = response.groups[0]
        _check(described.error_code, f"describing group {group_id!r}")
        members = []
        for m in described.members:
            assignment = (decode_assignment(bytes(m.member_assignment or b"")) or []) \
                if described.protocol_type == "consumer" else []
            members.append(MemberDescription(m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                                             m.client_host, assignment))
        fetched = self._send(group_id, 9, _OFFSET_FETCH_V, {"group_id": group_id, "topics": None,
                                                             "require_stable": False}, lambda r: r.error_code)
        _check(fetched.error_code, f"fetching the offsets of group {group_id!r}")
        offsets = {}
        for t in fetched.topics:
            for p in t.partitions:
                if int(p.committed_offset) >= 0 and ErrorCode(int(p.error_code)) == ErrorCode.none:
                    offsets[(t.name, int(p.partition_index))] = int(p.committed_offset)
        return GroupDescription(group_id, described.group_state, described.protocol_type, described.protocol_data,
                                members, offsets)

    def delete(self, group_id: str) -> None:
        response = self._send(group_id, 42, _DELETE_GROUPS_V, {"groups_names": [group_id]},
                              lambda r: r.results[0].error_code)
        _check(response.results[0].error_code, f"deleting group {group_id!r}")

    def commit(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        topics: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""})
        body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
        response = self._send(group_id, 8, _OFFSET_COMMIT_V, body, _first_partition_error)
        for t in response.topics:
            for p in t.partitions:
                _check(p.error_code, f"committing {t.name}-{p.partition_index} for group {group_id!r}")


def _table(rows: list[list[str]], fixed: dict[int, int]) -> str:
    """Columns padded as kafka-consumer-groups.sh pads them (fixed widths where Kafka fixes them)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, w in fixed.items():
        widths[i] = max(widths[i], w)
    lines = []
    for r in rows:
        cells = [c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + [r[-1]]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def format_describe(group: GroupDescription, log_end_offsets: dict[tuple[str, int], int]) -> str:
    """The C{--describe} table: one row per assigned or committed partition."""
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"]]
    owner: dict[tuple[str, int], MemberDescription] = {}
    for m in group.members:
        for tp in m.assignment:
            owner[tp] = m
    for tp in sorted(set(owner) | set(group.offsets)):
        current = group.offsets.get(tp)
        end = log_end_offsets.get(tp)
        lag = end - current if current is not None and end is not None and end >= 0 else None
        m = owner.get(tp)
        rows.append([group.group_id, tp[0], str(tp[1]), "-" if current is None else str(current),
                     "-" if end is None or end < 0 else str(end), "-" if lag is None else str(lag),
                     m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-"])
    for m in group.members:
        if not m.assignment:
            rows.append([group.group_id, "-", "-", "-", "-", "-", m.member_id, m.host, m.client_id])
    return _table(rows, {2: 10, 3: 15, 4: 15, 5: 15})


def _first_partition_error(response: Any) -> int:
    for t in response.topics:
        for p in t.partitions:
            return int(p.error_code)
    return 0


def _log_end_offsets(admin: Any, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    return list_offsets(admin, {tp: LATEST_TIMESTAMP for tp in partitions})


@click.command("consumer-groups", short_help="Consumer groups and offsets (kafka-consumer-groups.sh).")
@click.option("--bootstrap-server", "bootstrap_server", metavar="HOST:PORT[,HOST:PORT]",
              help="The broker(s) to connect to (with --zookeeper: only for log end offsets).")
@command_config_option
@click.option("--zookeeper", "zookeeper_connect", metavar="HOST:PORT[,...][/chroot]",
              help="The groups of ZooKeeper-coordinated consumers (the paper's; docs/consumer-groups.md).")
@click.option("--to-datetime", help="With --zookeeper --reset-offsets: to the first offset at or after "
              "YYYY-MM-DDTHH:mm:SS.sss.")
@click.option("--list", "action", flag_value="list", help="List all consumer groups.")
@click.option("--describe", "action", flag_value="describe",
              help="Describe a group: members, assignment, committed offsets and lag.")
@click.option("--delete", "action", flag_value="delete", help="Delete a group without active members.")
@click.option("--delete-offsets", "action", flag_value="delete-offsets",
              help="Delete a group's committed offsets of --topic T[:P1,P2] (KIP-496).")
@click.option("--reset-offsets", "action", flag_value="reset-offsets",
              help="Reset a group's committed offsets (the group must have no active members).")
@click.option("--group", "group_id", help="The consumer group.")
@click.option("--topic", help="With --reset-offsets (default: the group's committed topics) or --delete-offsets: "
                             "TOPIC or TOPIC:P1,P2.")
@click.option("--to-earliest", "to", flag_value="earliest", help="Reset to the log start offset.")
@click.option("--to-latest", "to", flag_value="latest", help="Reset to the log end offset.")
@click.option("--to-offset", type=int, help="Reset to this offset.")
@click.option("--execute", is_flag=True, help="With --reset-offsets: do it (default: a dry run).")
@click.option("--dry-run", is_flag=True, help="With --reset-offsets: only show the new offsets (the default).")
@click.option("--command-timeout-ms", type=click.IntRange(min=1), default=30000, show_default=True)
def consumer_groups(bootstrap_server: str | None, action: str | None, group_id: str | None, topic: str | None,
                    to: str | None, to_offset: int | None, execute: bool, dry_run: bool,
                    command_timeout_ms: int, zookeeper_connect: str | None = None,
                    to_datetime: str | None = None) -> None:
    """List, describe, delete consumer groups and reset their offsets (kafka-consumer-groups.sh)."""
    if zookeeper_connect is not None and action == "delete-offsets":
        raise click.UsageError("--delete-offsets is supported with --bootstrap-server only")
    if zookeeper_connect is not None:
        from .zookeeper_groups import run as run_zookeeper

        if action is None:
            raise click.UsageError("Command must include exactly one action: --list, --describe, --delete, "
                                   "--reset-offsets")
        if action != "list" and not group_id:
            raise click.UsageError(f"--group is required with --{action}")
        if action == "reset-offsets" and sum(x is not None for x in (to, to_offset, to_datetime)) != 1:
            raise click.UsageError("--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, "
                                   "--to-datetime")
        return run_zookeeper(zookeeper_connect, bootstrap_server, action, group_id, topic, to, to_offset,
                             to_datetime, execute and not dry_run, command_timeout_ms)
    if bootstrap_server is None:
        raise click.UsageError("Missing option '--bootstrap-server' (or --zookeeper).")
    if to_datetime is not None:
        raise click.UsageError("--to-datetime is supported with --zookeeper only")
    if action is None:
        raise click.UsageError("Command must include exactly one action: --list, --describe, --delete, "
                               "--reset-offsets, --delete-offsets")
    if action != "list" and not group_id:
        raise click.UsageError(f"--group is required with --{action}")
    if action == "delete-offsets" and not topic:
        raise click.UsageError("--topic is required with --delete-offsets")
    if action == "reset-offsets":
        if (to is None) == (to_offset is None):
            raise click.UsageError("--reset-offsets needs one of --to-earliest, --to-latest, --to-offset")
        if execute and dry_run:
            raise click.UsageError("--execute and --dry-run exclude each other")
    from kafkatw.client.blocking import BlockingAdminClient

    try:
        with BlockingAdminClient(bootstrap_server, **client_security(), client_id="kafkatw-consumer-groups",
                                 request_timeout_ms=command_timeout_ms,
                                 default_api_timeout_ms=command_timeout_ms) as client:
            source = BrokerGroupSource(client)
            if action == "list":
                for name in source.list_groups():
                    click.echo(name)
            elif action == "describe":
                _describe(client, source, group_id, command_timeout_ms)
            elif action == "delete-offsets":
                _delete_offsets(client, group_id, topic)
            elif action == "delete":
                source.delete(group_id)
                click.echo(f"Deletion of requested consumer groups ('{group_id}') was successful.")
            else:
                _reset(client, source, group_id, topic, to, to_offset, execute)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error: Executing consumer group command failed due to {describe_error(e)}")


#: Kafka's C{deleteOffsets} messages for the request's top-level error
_DELETE_OFFSETS_ERRORS = {
    ErrorCode.invalid_group_id: "'{group}' is not valid.",
    ErrorCode.group_id_not_found: "'{group}' does not exist.",
    ErrorCode.group_authorization_failed: "Access to '{group}' is not authorized.",
    ErrorCode.non_empty_group: "Deleting offsets of a consumer group '{group}' is forbidden if the group is not "
                               "empty.",
    ErrorCode.group_subscribed_to_topic: "Encounter some partition level error, see the follow-up details:",
    ErrorCode.topic_authorization_failed: "Encounter some partition level error, see the follow-up details:",
    ErrorCode.unknown_topic_or_partition: "Encounter some partition level error, see the follow-up details:",
}


def format_delete_offsets(group_id: str, topics: list[str], top_error: ErrorCode,
                          results: dict[tuple[str, int], ErrorCode | None]) -> tuple[list[str], list[str]]:
    """
    Kafka's C{ConsumerGroupCommand.deleteOffsets} output: the top-level line
    and the C{TOPIC PARTITION STATUS} table (partition C{-1}: the topic's
    partitions could not be listed, C{Not Provided}).

    @return: (stdout lines, stderr lines).
    """
    from .delete_records import java_exception

    out: list[str] = []
    err: list[str] = []
    if top_error == ErrorCode.none:
        out.append(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group_id}")
    else:
        message = _DELETE_OFFSETS_ERRORS.get(top_error, "Encounter some unknown error: {error}")
        err.extend(["", "Error: " + message.format(group=group_id, error=top_error.name.upper())])
    row = "{:<30} {:<15} {:<15}"
    out.append("")
    out.append(row.format("TOPIC", "PARTITION", "STATUS"))
    for (topic, partition), code in sorted(results.items(), key=lambda kv: kv[0][0] + str(kv[0][1])):
        status = "Successful" if code is None or code == ErrorCode.none else f"Error: {java_exception(code)}"
        out.append(row.format(topic, partition if partition >= 0 else "Not Provided", status))
    return out, err


def parse_topic_partitions(topic: str) -> tuple[str, list[int] | None]:
    """C{T} or C{T:P1,P2} of C{--topic}. @raise click.BadParameter: malformed partitions."""
    name, sep, rest = topic.partition(":")
    if not sep:
        return name, None
    try:
        return name, [int(p) for p in rest.split(",") if p.strip()]
    except ValueError:
        raise click.BadParameter(f"expected TOPIC or TOPIC:P1,P2, got {topic!r}", param_hint="--topic") from None


def _delete_offsets(client: Any, group_id: str, topic: str) -> None:
    name, partitions = parse_topic_partitions(topic)
    results: dict[tuple[str, int], ErrorCode | None] = {}
    wanted: list[tuple[str, int]] = []
    if partitions is not None:
        wanted = [(name, p) for p in partitions]
    else:
        try:
            described = client.describe_topics([name])
            wanted = [(name, p.partition) for p in described[name].partitions]
        except KafkaError as e:
            results[(name, -1)] = e.error_code
    top = ErrorCode.none
    if wanted:
        try:
            codes = client.delete_consumer_group_offsets(group_id, wanted)
            for key in wanted:
                results[key] = codes.get(key, ErrorCode.none)
            failed = [c for c in codes.values() if c != ErrorCode.none]
            if failed:
                top = failed[0]
        except KafkaError as e:
            top = e.error_code
            for key in wanted:
                results[key] = e.error_code
    out, err = format_delete_offsets(group_id, [name], top, results)
    for line in err:
        click.echo(line, err=True)
    for line in out:
        click.echo(line)


def _describe(client: Any, source: GroupSource, group_id: str, timeout_ms: int = 30000) -> None:
    group = source.describe(group_id)
    looked_in_zookeeper = False
    if not group.members:
        # The paper's groups register in ZooKeeper, not with a coordinator: look there too.
        looked_in_zookeeper, found = _zookeeper_group(client, group_id)
        if found is not None:
            from .zookeeper_groups import format_describe as format_zookeeper_describe

            connect, zk_group = found
            click.echo(f"\nConsumer group '{group_id}' is coordinated by ZooKeeper (the paper's consumer group, "
                       f"{len(zk_group.members)} registered consumer(s)); the broker's group coordinator has "
                       f"no members of it. As 'kafkatw consumer-groups --zookeeper {connect} --describe "
                       f"--group {group_id}' shows it:")
            ends = _log_end_offsets(client, zk_group.partitions)
            click.echo("\n" + format_zookeeper_describe(zk_group, ends))
            return
    hint = "" if looked_in_zookeeper else (" (ZooKeeper-coordinated groups are not shown: the cluster's ZooKeeper"
                                           " was not found; give --zookeeper HOST:PORT to see them)")
    if group.state == "Dead":
        fail(f"Error: Consumer group '{group_id}' does not exist{hint}.")
    if not group.members:
        click.echo(f"\nConsumer group '{group_id}' has no active members{hint}.")
    partitions = set(group.offsets) | {tp for m in group.members for tp in m.assignment}
    click.echo("\n" + format_describe(group, _log_end_offsets(client, partitions)))


def _cluster_zookeeper(client: Any) -> tuple[str, str] | None:
    """
    The ZooKeeper connect string of the cluster and its cluster id, from a
    broker's C{zookeeper.connect} (DescribeConfigs); for C{embedded}, the
    embedded ZooKeeper on the broker's host at C{KAFKATW_EMBEDDED_ZOOKEEPER_PORT}
    (default 2181).  C{None} when the broker does not say.
    """
    cluster = client.describe_cluster()
    cluster_id = cluster.cluster_id
    if not cluster.nodes or not cluster_id:
        return None
    broker_id = sorted(cluster.nodes)[0]
    try:
        configs = client.describe_configs([(RESOURCE_BROKER, str(broker_id))], ["zookeeper.connect"])
    except KafkaError:
        return None
    entry = configs.get((RESOURCE_BROKER, str(broker_id)), {}).get("zookeeper.connect")
    connect = entry.value if entry is not None else None
    if not connect:
        return None
    if connect == "embedded":
        import os

        host = cluster.nodes[broker_id].host
        port = os.environ.get("KAFKATW_EMBEDDED_ZOOKEEPER_PORT") or os.environ.get("KAFKATW_ZOOKEEPER_PORT") or "2181"
        connect = f"{host}:{port}"
    return connect, cluster_id


def _reachable(connect: str, timeout_s: float = 1.0) -> bool:
    """Whether one server of a ZooKeeper connect string accepts a TCP connection."""
    from kafkatw.client.connection import unreachable

    return unreachable(connect.split("/", 1)[0], timeout_s) is None


def _zookeeper_group(client: Any, group_id: str) -> tuple[bool, tuple[str, Any] | None]:
    """
    Look for the ZooKeeper-coordinated group C{group_id} of this cluster.

    @return: (whether the cluster's ZooKeeper was read, and C{(connect
        string, ZookeeperGroup)} when the group has registered consumers or
        partition owners there).  The
        ZooKeeper is not read when it cannot be found or reached in a few
        seconds, or when it holds another cluster (its C{/cluster/id} differs
        from the brokers' cluster id).
    """
    found = _cluster_zookeeper(client)
    if found is None:
        return False, None
    connect, cluster_id = found
    if not _reachable(connect):
        return False, None
    from kafkatw.client.blocking import call_with_zookeeper

    from .zookeeper_groups import describe_group

    async def read(zk: Any) -> Any:
        import json

        try:
            data, _ = await zk.get("/cluster/id")
            if json.loads(data)["id"] != cluster_id:
                return None
        except Exception:
            return None
        return await describe_group(zk, group_id)

    try:
        zk_group = call_with_zookeeper(read, connect, 5.0)
    except Exception:
        return False, None
    if zk_group is None:
        return False, None
    # offsets alone say nothing: the coordinator's groups keep theirs in the same place
    return True, ((connect, zk_group) if zk_group.members or zk_group.owners else None)


def _reset(client: Any, source: GroupSource, group_id: str, topic: str | None, to: str | None,
           to_offset: int | None, execute: bool) -> None:
    group = source.describe(group_id)
    if group.members:
        fail(f"Error: Assignments can only be reset if the group '{group_id}' is inactive, "
             f"but the current state is {group.state}.")
    if topic:
        name, _, listed = topic.partition(":")
        if listed:
            partitions = [(name, int(p)) for p in listed.split(",")]
        else:
            partitions = [(name, p.partition) for p in client.describe_topics([name])[name].partitions]
    else:
        partitions = sorted(group.offsets)
    if not partitions:
        fail(f"Error: no partitions to reset for group '{group_id}' (give --topic)")
    if to_offset is not None:
        new = {tp: to_offset for tp in partitions}
    else:
        timestamp = EARLIEST_TIMESTAMP if to == "earliest" else LATEST_TIMESTAMP
        new = {tp: info.offset for tp, info in client.list_offsets({tp: timestamp for tp in partitions}).items()}
    if execute:
        source.commit(group_id, new)
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
        [group_id, t, str(p), str(o)] for (t, p), o in sorted(new.items())]
    click.echo("\n" + _table(rows, {2: 10}))
