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

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import click

from ._common import client_security, command_config_option, describe_error, fail, list_offsets

if TYPE_CHECKING:  # pragma: no cover
    from kafkatw.errors import ErrorCode

__all__ = ["consumer_groups", "GroupSource", "BrokerGroupSource", "GroupDescription", "MemberDescription",
           "format_describe", "format_members", "format_state", "format_list_states", "parse_states",
           "clamp_offsets", "shifted_offsets", "current_offsets", "parse_duration", "parse_reset_plan",
           "format_reset_csv", "GROUP_STATES"]

#: ListOffsets' timestamps asking for the log start and the log end offset (Kafka's OffsetSpec.earliest/latest)
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

#: Kafka's ConsumerGroupState names (without UNKNOWN), as C{--state} takes and prints them
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")

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
    from kafkatw.errors import ErrorCode, kafka_error

    code = ErrorCode(int(code))
    if code != ErrorCode.none:
        raise kafka_error(code, f"{what}: {code.name}")


class BrokerGroupSource:
    """Groups of Kafka clients, read from their coordinators over the Kafka protocol."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin

    def _send(self, group_id: str, api_key: int, version: int | None, body: dict, error_of: Any = None) -> Any:
        """
        A request to the group's coordinator, sent again when the coordinator
        moves (C{version} C{None}: the highest both sides speak).
        """
        return self.admin.coordinator_request(group_id, api_key, body, version=version, error_of=error_of)

    def list_groups(self) -> list[str]:
        return self.admin.list_consumer_groups(version=_LIST_GROUPS_V)

    def describe(self, group_id: str) -> GroupDescription:
        from kafkatw.errors import ErrorCode
        from kafkatw.protocol.consumer_protocol import decode_assignment

        consumer_group = self._consumer_group_members(group_id)
        if consumer_group is not None:
            state, assignor, consumer_members = consumer_group
            return GroupDescription(group_id, state, "consumer", assignor, consumer_members, self._offsets(group_id))
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
        return GroupDescription(group_id, described.group_state, described.protocol_type, described.protocol_data,
                                members, self._offsets(group_id))

    def _consumer_group_members(self, group_id: str) -> tuple[str, str, list[MemberDescription]] | None:
        """
        A KIP-848 consumer group's state, assignor and members
        (ConsumerGroupDescribe, as Kafka 4's admin client asks first), or
        C{None} when the group is not one (C{GROUP_ID_NOT_FOUND}) or the
        broker does not serve the API: then DescribeGroups describes it.
        """
        from kafkatw.errors import ErrorCode, KafkaError

        try:
            response = self._send(group_id, 69, None,
                                  {"group_ids": [group_id], "include_authorized_operations": False},
                                  lambda r: r.groups[0].error_code)
        except KafkaError as e:
            if e.error_code == ErrorCode.unsupported_version:
                return None
            raise
        described = response.groups[0]
        if ErrorCode(int(described.error_code)) == ErrorCode.group_id_not_found:
            return None
        _check(described.error_code, f"describing group {group_id!r}")
        members = [MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                     [(tp.topic_name, int(p)) for tp in m.assignment.topic_partitions
                                      for p in tp.partitions])
                   for m in described.members]
        return described.group_state, described.assignor_name, members

    def _offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        from kafkatw.errors import ErrorCode

        fetched = self._send(group_id, 9, _OFFSET_FETCH_V, {"group_id": group_id, "topics": None,
                                                             "require_stable": False}, lambda r: r.error_code)
        _check(fetched.error_code, f"fetching the offsets of group {group_id!r}")
        offsets = {}
        for t in fetched.topics:
            for p in t.partitions:
                if int(p.committed_offset) >= 0 and ErrorCode(int(p.error_code)) == ErrorCode.none:
                    offsets[(t.name, int(p.partition_index))] = int(p.committed_offset)
        return offsets

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
@click.option("--list", "action", flag_value="list", help="List all consumer groups.")
@click.option("--describe", "action", flag_value="describe",
              help="Describe a group: members, assignment, committed offsets and lag.")
@click.option("--delete", "action", flag_value="delete", help="Delete a group without active members.")
@click.option("--delete-offsets", "action", flag_value="delete-offsets",
              help="Delete a group's committed offsets of --topic T[:P1,P2] (KIP-496).")
@click.option("--reset-offsets", "action", flag_value="reset-offsets",
              help="Reset a group's committed offsets (the group must have no active members).")
@click.option("--group", "group_ids", multiple=True, help="The consumer group (repeatable with --describe, "
                                                          "--delete, --reset-offsets).")
@click.option("--all-groups", is_flag=True, help="With --describe, --delete, --reset-offsets: every group.")
@click.option("--members", is_flag=True, help="With --describe: the members, their hosts and partition counts.")
@click.option("--verbose", is_flag=True, help="With --describe --members: each member's partitions too.")
@click.option("--offsets", is_flag=True, help="With --describe: the partitions, offsets and lag (the default).")
@click.option("--state", is_flag=False, flag_value="", default=None, metavar="[STATE,...]",
              help="With --describe: the group's coordinator, assignment strategy, state and member count. "
                   "With --list: each group's state, only those in the given states when some are given.")
@click.option("--topic", "topics", multiple=True,
              help="With --reset-offsets or --delete-offsets: TOPIC or TOPIC:P1,P2 (repeatable with "
                   "--reset-offsets).")
@click.option("--all-topics", is_flag=True,
              help="With --reset-offsets: every partition the group has committed offsets for (the default "
                   "without --topic).")
@click.option("--to-earliest", "to", flag_value="earliest", help="Reset to the log start offset.")
@click.option("--to-latest", "to", flag_value="latest", help="Reset to the log end offset.")
@click.option("--to-current", "to", flag_value="current",
              help="Reset to the committed offset (the log end offset where there is none).")
@click.option("--to-offset", type=int, help="Reset to this offset (kept within the log start and end offsets).")
@click.option("--shift-by", type=int, help="Reset to the committed offset plus N (negative: back), kept within "
                                           "the log start and end offsets.")
@click.option("--to-datetime", help="Reset to the first offset at or after YYYY-MM-DDTHH:mm:SS.sss (local time, "
                                    "or with a zone: Z, +01:00); the log end offset where there is none.")
@click.option("--by-duration", metavar="PnDTnHnMnS",
              help="Reset to the first offset at or after now minus this ISO-8601 duration (P1DT2H: a day and two "
                   "hours ago); the log end offset where there is none.")
@click.option("--from-file", type=click.Path(dir_okay=False), metavar="CSV",
              help="Reset to the offsets of a CSV file: TOPIC,PARTITION,OFFSET lines (one --group), or "
                   "GROUP,TOPIC,PARTITION,OFFSET lines; as --export writes them.")
@click.option("--export", is_flag=True, help="With --reset-offsets: print the new offsets as CSV (for --from-file).")
@click.option("--execute", is_flag=True, help="With --reset-offsets: do it (default: a dry run).")
@click.option("--dry-run", is_flag=True, help="With --reset-offsets: only show the new offsets (the default).")
@click.option("--timeout", "--command-timeout-ms", "command_timeout_ms", type=click.IntRange(min=1), default=30000,
              show_default=True, help="The time (ms) each request may take.")
def consumer_groups(bootstrap_server: str | None, action: str | None, group_ids: tuple[str, ...],
                    topics: tuple[str, ...], to: str | None, to_offset: int | None, execute: bool, dry_run: bool,
                    command_timeout_ms: int, zookeeper_connect: str | None = None,
                    to_datetime: str | None = None, all_groups: bool = False, members: bool = False,
                    verbose: bool = False, offsets: bool = False, state: str | None = None,
                    all_topics: bool = False, shift_by: int | None = None, by_duration: str | None = None,
                    from_file: str | None = None, export: bool = False) -> None:
    """List, describe, delete consumer groups and reset their offsets (kafka-consumer-groups.sh)."""
    group_id = group_ids[0] if group_ids else None
    topic = topics[0] if topics else None
    if zookeeper_connect is not None:
        from .zookeeper_groups import run as run_zookeeper

        if action == "delete-offsets":
            raise click.UsageError("--delete-offsets is supported with --bootstrap-server only")
        for flag, given in (("--all-groups", all_groups), ("--members", members), ("--state", state is not None),
                            ("--by-duration", by_duration is not None), ("--from-file", from_file is not None),
                            ("--export", export),
                            ("--to-current", to == "current"), ("--shift-by", shift_by is not None),
                            ("--all-topics", all_topics), ("--verbose", verbose), ("--offsets", offsets)):
            if given:
                raise click.UsageError(f"{flag} is supported with --bootstrap-server only")
        if len(group_ids) > 1 or len(topics) > 1:
            raise click.UsageError("--zookeeper takes one --group and one --topic")
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
    if action is None:
        raise click.UsageError("Command must include exactly one action: --list, --describe, --delete, "
                               "--reset-offsets, --delete-offsets")
    _check_usage(action, group_ids, all_groups, members, verbose, offsets, state, topics, all_topics,
                 [name for name, given in (("--to-earliest", to == "earliest"), ("--to-latest", to == "latest"),
                                           ("--to-current", to == "current"), ("--to-offset", to_offset is not None),
                                           ("--shift-by", shift_by is not None),
                                           ("--to-datetime", to_datetime is not None),
                                           ("--by-duration", by_duration is not None),
                                           ("--from-file", from_file is not None)) if given],
                 execute, dry_run, export)
    states = parse_states(state) if action == "list" and state else []
    timestamp = None
    if to_datetime is not None:
        from .zookeeper_groups import parse_datetime

        timestamp = parse_datetime(to_datetime)
    elif by_duration is not None:
        import time

        timestamp = int(time.time() * 1000) - parse_duration(by_duration)
    plan = None
    if from_file is not None:
        from ._common import read_input_file

        plan = parse_reset_plan(read_input_file(from_file, "--from-file"), group_ids)
    from kafkatw.client.blocking import BlockingAdminClient
    from kafkatw.errors import KafkaError

    try:
        with BlockingAdminClient(bootstrap_server, **client_security(), client_id="kafkatw-consumer-groups",
                                 request_timeout_ms=command_timeout_ms,
                                 default_api_timeout_ms=command_timeout_ms) as client:
            source = BrokerGroupSource(client)
            if action == "list":
                if state is None:
                    for name in source.list_groups():
                        click.echo(name)
                else:
                    click.echo(format_list_states(list_group_states(client, states)))
                return
            if action == "delete-offsets":
                return _delete_offsets(client, group_id, topic)
            groups = source.list_groups() if all_groups else list(dict.fromkeys(group_ids))
            if action == "describe":
                for name in groups:
                    if members:
                        _describe_members(client, source, name, verbose)
                    elif state is not None:
                        _describe_state(client, source, name)
                    else:
                        _describe(client, source, name, command_timeout_ms)
            elif action == "delete":
                _delete(source, groups, single=not all_groups and len(groups) == 1)
            else:
                single = not all_groups and len(groups) == 1
                done = {}
                for name in groups:
                    new = _reset(client, source, name, topics, all_topics, to, to_offset, shift_by, timestamp,
                                 execute, single, None if plan is None else plan.get(name, {}))
                    if new is not None:
                        done[name] = new
                if export:
                    click.echo(format_reset_csv(done, with_group=len(group_ids) != 1))
                else:
                    for name, new in done.items():
                        rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
                            [name, t, str(p), str(o)] for (t, p), o in sorted(new.items())]
                        click.echo("\n" + _table(rows, {2: 10}))
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error: Executing consumer group command failed due to {describe_error(e)}")


def _check_usage(action: str, group_ids: tuple[str, ...], all_groups: bool, members: bool, verbose: bool,
                 offsets: bool, state: str | None, topics: tuple[str, ...], all_topics: bool,
                 scenarios: list[str], execute: bool, dry_run: bool, export: bool = False) -> None:
    """Kafka's C{ConsumerGroupCommandOptions.checkArgs}, as usage errors (exit 2)."""
    if group_ids and all_groups:
        raise click.UsageError("Option --group can't be used with option --all-groups")
    if all_groups and action not in ("describe", "delete", "reset-offsets"):
        raise click.UsageError(f"Option --all-groups can't be used with option --{action}")
    if action in ("describe", "delete", "reset-offsets") and not group_ids and not all_groups:
        raise click.UsageError(f"Option --{action} takes one of these options: --all-groups, --group")
    if action == "delete-offsets":
        if not group_ids or not topics:
            raise click.UsageError("Option --delete-offsets takes the following options: --group, --topic")
        if len(group_ids) > 1 or len(topics) > 1:
            raise click.UsageError("Option --delete-offsets takes one --group and one --topic")
    for flag, given in (("--members", members), ("--verbose", verbose), ("--offsets", offsets)):
        if given and action != "describe":
            raise click.UsageError(f"Option {flag} can only be used with --describe")
    if verbose and not members:
        raise click.UsageError("Option --verbose goes with --describe --members")
    if state is not None and action not in ("describe", "list"):
        raise click.UsageError("Option --state can only be used with --describe or --list")
    if action == "describe":
        if members + offsets + (state is not None) > 1:
            raise click.UsageError("Option --describe takes at most one of these options: --members, --offsets, "
                                   "--state")
        if state:
            raise click.UsageError("Option --describe does not take a value for --state")
    if action == "delete" and topics:
        raise click.UsageError("The consumer does not support topic-specific offset deletion from a consumer group.")
    if topics and action not in ("reset-offsets", "delete-offsets"):
        raise click.UsageError(f"Option --topic can't be used with option --{action}")
    if action == "reset-offsets":
        if len(scenarios) != 1:
            raise click.UsageError("--reset-offsets needs one of --to-earliest, --to-latest, --to-current, "
                                   "--to-offset, --shift-by, --to-datetime, --by-duration, --from-file")
        if execute and dry_run:
            raise click.UsageError("Option --reset-offsets only accepts one of --execute and --dry-run")
        if all_topics and topics:
            raise click.UsageError("Option --all-topics can't be used with option --topic")
    else:
        given = scenarios + [f for f, on in (("--all-topics", all_topics), ("--execute", execute),
                                             ("--dry-run", dry_run), ("--export", export)) if on]
        if given:
            raise click.UsageError(f"Option {given[0]} can only be used with --reset-offsets")


def parse_states(text: str) -> list[str]:
    """
    The states of C{--list --state S1,S2}, case-insensitive, in Kafka's
    spelling (L{GROUP_STATES}).

    @raise click.UsageError: a name that is not a state (Kafka's message).
    """
    by_name = {s.lower(): s for s in GROUP_STATES}
    parsed = [by_name.get(part.strip().lower()) for part in text.split(",")]
    if None in parsed:
        raise click.UsageError(f"Invalid state list '{text}'. Valid states are: {', '.join(GROUP_STATES)}")
    return list(dict.fromkeys(s for s in parsed if s is not None))


def list_group_states(client: Any, states: list[str]) -> list[tuple[str, str]]:
    """
    (group id, state) of every group, or of those in C{states}: ListGroups v4
    (KIP-518) to every live broker.
    """
    from kafkatw.errors import ErrorCode, kafka_error

    listed: dict[str, str] = {}
    for node in sorted(client.describe_cluster().nodes):
        r = client.send(node, 16, {"states_filter": states}, version=4)
        if r.error_code != ErrorCode.none:
            raise kafka_error(ErrorCode(int(r.error_code)), f"listing the groups of broker {node}")
        listed.update((g.group_id, g.group_state) for g in r.groups)
    return sorted(listed.items())


def format_list_states(groups: list[tuple[str, str]]) -> str:
    """C{--list --state}: Kafka's C{printGroupInfo} table (GROUP padded to the longest id, at least 15, plus 10)."""
    width = max([15] + [len(g) for g, _ in groups]) + 10
    return "\n".join(f"{g:<{width}} {s:<20}" for g, s in [("GROUP", "STATE"), *groups])


def format_members(group: GroupDescription, verbose: bool = False) -> str:
    """
    C{--describe --members} (Kafka's C{printMembers}): a blank line, then
    GROUP, CONSUMER-ID, [GROUP-INSTANCE-ID,] HOST, CLIENT-ID, #PARTITIONS
    and with C{verbose} ASSIGNMENT (C{topic(p1,p2), ...}, C{-} for none).
    Columns are padded to their longest cell (at least 15; 17 for
    GROUP-INSTANCE-ID, which only shows when a member has one), each cell
    followed by one space, as Kafka's format strings do.
    """
    with_instance = any(m.group_instance_id for m in group.members)
    widths = [max(15, len(group.group_id)) if group.members else 15,
              max([15] + [len(m.member_id) for m in group.members])]
    if with_instance:
        widths.append(max([17] + [len(m.group_instance_id or "") for m in group.members]))
    widths += [max([15] + [len(m.host) for m in group.members]), max([15] + [len(m.client_id) for m in group.members]),
               15]
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]

    def row(cells: list[str], assignment: str) -> str:
        return "".join(f"{c:<{w}} " for c, w in zip(cells, widths)) + (assignment if verbose else "")

    lines = ["", row(header, "ASSIGNMENT")]
    for m in group.members:
        cells = [group.group_id, m.member_id] + ([m.group_instance_id or ""] if with_instance else []) + \
            [m.host, m.client_id, str(len(m.assignment))]
        by_topic: dict[str, list[int]] = {}
        for t, p in m.assignment:
            by_topic.setdefault(t, []).append(p)
        assigned = ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in by_topic.items()))
        lines.append(row(cells, assigned or "-"))
    return "\n".join(lines)


def format_state(group: GroupDescription, coordinator: tuple[str, int, int]) -> str:
    """
    C{--describe --state} (Kafka's C{printStates}): a blank line, then
    GROUP, COORDINATOR (ID) as C{host:port  (id)}, ASSIGNMENT-STRATEGY,
    STATE, #MEMBERS; the first column is as wide as the coordinator cell (at
    least 25), as in Kafka's format string.
    """
    host, port, node = coordinator
    cell = f"{host}:{port}  ({node})"
    width = max(25, len(cell))
    rows = [("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
            (group.group_id, cell, group.protocol, group.state, str(len(group.members)))]
    return "\n" + "\n".join(f"{a:<{width}} {b:<25} {c:<20} {d:<15} {e}" for a, b, c, d, e in rows)


def _described(source: GroupSource, group_id: str) -> Any:
    """The group, after Kafka's lines for a group that does not exist, is empty or is rebalancing."""
    group = source.describe(group_id)
    if group.state == "Dead":
        fail(f"Error: Consumer group '{group_id}' does not exist.")
    if group.state == "Empty":
        click.echo(f"\nConsumer group '{group_id}' has no active members.", err=True)
    elif group.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        click.echo(f"\nWarning: Consumer group '{group_id}' is rebalancing.", err=True)
    return group


def _describe_members(client: Any, source: GroupSource, group_id: str, verbose: bool) -> None:
    click.echo(format_members(_described(source, group_id), verbose))


def _describe_state(client: Any, source: GroupSource, group_id: str) -> None:
    group = _described(source, group_id)
    node = client.find_coordinator(group_id)
    found = client.describe_cluster().nodes.get(node)
    click.echo(format_state(group, (found.host if found else "?", found.port if found else -1, node)))


def _delete(source: GroupSource, groups: list[str], single: bool) -> None:
    """Kafka's C{deleteGroups}: one line on success; the failed groups (stderr, exit 1) otherwise."""
    from kafkatw.errors import KafkaError

    if single:  # one named group: its error is the command's error
        source.delete(groups[0])
        click.echo(f"Deletion of requested consumer groups ('{groups[0]}') was successful.")
        return
    done, failed = [], []
    for name in groups:
        try:
            source.delete(name)
            done.append(name)
        except KafkaError as e:
            failed.append((name, describe_error(e)))
    if not failed:
        click.echo(f"Deletion of requested consumer groups ('{', '.join(done)}') was successful.")
        return
    click.echo("\nError: Deletion of some consumer groups failed:", err=True)
    for name, error in failed:
        click.echo(f"* Group '{name}' could not be deleted due to: {error}", err=True)
    if done:
        click.echo(f"\nThese consumer groups were deleted successfully: '{', '.join(done)}'", err=True)
    sys.exit(1)


#: Kafka's C{deleteOffsets} messages for the request's top-level error (by L{ErrorCode} name)
_DELETE_OFFSETS_ERRORS = {
    "invalid_group_id": "'{group}' is not valid.",
    "group_id_not_found": "'{group}' does not exist.",
    "group_authorization_failed": "Access to '{group}' is not authorized.",
    "non_empty_group": "Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.",
    "group_subscribed_to_topic": "Encounter some partition level error, see the follow-up details:",
    "topic_authorization_failed": "Encounter some partition level error, see the follow-up details:",
    "unknown_topic_or_partition": "Encounter some partition level error, see the follow-up details:",
}


def format_delete_offsets(group_id: str, topics: list[str], top_error: ErrorCode,
                          results: dict[tuple[str, int], ErrorCode | None]) -> tuple[list[str], list[str]]:
    """
    Kafka's C{ConsumerGroupCommand.deleteOffsets} output: the top-level line
    and the C{TOPIC PARTITION STATUS} table (partition C{-1}: the topic's
    partitions could not be listed, C{Not Provided}).

    @return: (stdout lines, stderr lines).
    """
    from kafkatw.errors import ErrorCode

    from .delete_records import java_exception

    out: list[str] = []
    err: list[str] = []
    if top_error == ErrorCode.none:
        out.append(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group_id}")
    else:
        message = _DELETE_OFFSETS_ERRORS.get(top_error.name, "Encounter some unknown error: {error}")
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
    from kafkatw.errors import ErrorCode, KafkaError

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
    from kafkatw.client.admin import RESOURCE_BROKER
    from kafkatw.errors import KafkaError

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


def clamp_offsets(requested: dict[tuple[str, int], int], starts: dict[tuple[str, int], int],
                  ends: dict[tuple[str, int], int]) -> tuple[dict[tuple[str, int], int], list[str]]:
    """
    Kafka's C{checkOffsetsRange} (C{--to-offset}, C{--shift-by}): an offset
    past the log end offset becomes it, one before the log start offset
    becomes that; each change gets Kafka's warning.

    @return: (the offsets, the warnings).
    """
    out, warnings = {}, []
    for tp, offset in sorted(requested.items()):
        start, end = starts.get(tp, -1), ends.get(tp, -1)
        name = f"{tp[0]}-{tp[1]}"
        if end >= 0 and offset > end:
            warnings.append(f"WARN New offset ({offset}) is higher than latest offset for topic partition {name}. "
                            f"Value will be set to {end}")
            offset = end
        elif start >= 0 and offset < start:
            warnings.append(f"WARN New offset ({offset}) is lower than earliest offset for topic partition {name}. "
                            f"Value will be set to {start}")
            offset = start
        out[tp] = offset
    return out, warnings


def shifted_offsets(partitions: list[tuple[str, int]], committed: dict[tuple[str, int], int],
                    shift_by: int) -> dict[tuple[str, int], int]:
    """
    C{--shift-by N}: each partition's committed offset plus C{N} (before
    L{clamp_offsets}).

    @raise click.UsageError: a partition without a committed offset (Kafka's message).
    """
    missing = [tp for tp in partitions if tp not in committed]
    if missing:
        t, p = missing[0]
        raise click.UsageError(f"Cannot shift offset for partition {t}-{p} since there is no current committed offset")
    return {tp: committed[tp] + shift_by for tp in partitions}


def current_offsets(partitions: list[tuple[str, int]], committed: dict[tuple[str, int], int],
                    ends: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """C{--to-current}: the committed offset, or the log end offset of a partition without one."""
    return {tp: committed[tp] if tp in committed else ends.get(tp, -1) for tp in partitions}


def _reset_partitions(client: Any, group: GroupDescription, topics: tuple[str, ...],
                      all_topics: bool) -> list[tuple[str, int]]:
    """The partitions of --topic (T or T:P1,P2, repeatable), or with --all-topics or neither the committed ones."""
    if all_topics or not topics:
        return sorted(group.offsets)
    partitions: list[tuple[str, int]] = []
    whole = []
    for topic in topics:
        name, listed = parse_topic_partitions(topic)
        if listed is None:
            whole.append(name)
        else:
            partitions.extend((name, p) for p in listed)
    if whole:
        for name, described in client.describe_topics(whole).items():
            partitions.extend((name, p.partition) for p in described.partitions)
    return sorted(set(partitions))


def _reset(client: Any, source: GroupSource, group_id: str, topics: tuple[str, ...], all_topics: bool,
           to: str | None, to_offset: int | None, shift_by: int | None, timestamp: int | None, execute: bool,
           single: bool = True, plan: dict[tuple[str, int], int] | None = None) -> dict[tuple[str, int], int] | None:
    """
    Reset the offsets of one group (committed with C{execute}).

    @return: the new offsets; C{None} for a group with members (Kafka's error
        on stderr; the command's error when it is the only group).
    """
    group = source.describe(group_id)
    if group.state not in ("Empty", "Dead"):
        message = (f"Error: Assignments can only be reset if the group '{group_id}' is inactive, "
                   f"but the current state is {group.state}.")
        if single:
            fail(message)
        click.echo("\n" + message, err=True)  # Kafka goes on with the other groups
        return None
    partitions = sorted(plan) if plan is not None else _reset_partitions(client, group, topics, all_topics)
    if not partitions:
        if plan is not None:
            click.echo(f"\nError: No reset plan for group {group_id} found", err=True)
            return None
        fail(f"Error: no partitions to reset for group '{group_id}' (give --topic)")
    warnings: list[str] = []
    if to_offset is not None or shift_by is not None or plan is not None:
        requested = {tp: to_offset for tp in partitions} if to_offset is not None \
            else dict(plan) if plan is not None else shifted_offsets(partitions, group.offsets, shift_by)
        starts = list_offsets(client, {tp: EARLIEST_TIMESTAMP for tp in partitions})
        new, warnings = clamp_offsets(requested, starts, _log_end_offsets(client, set(partitions)))
    elif to == "current":
        new = current_offsets(partitions, group.offsets,
                              _log_end_offsets(client, {tp for tp in partitions if tp not in group.offsets}))
    elif timestamp is not None:
        found = list_offsets(client, {tp: timestamp for tp in partitions})
        empty = sorted(tp for tp, offset in found.items() if offset < 0)
        for t, p in empty:
            click.echo(f"\nWarn: Partition {p} from topic {t} is empty. Falling back to latest known offset.")
        new = {**found, **_log_end_offsets(client, set(empty))}
    else:
        stamp = EARLIEST_TIMESTAMP if to == "earliest" else LATEST_TIMESTAMP
        new = {tp: info.offset for tp, info in client.list_offsets({tp: stamp for tp in partitions}).items()}
    for line in warnings:
        click.echo(line, err=True)
    if execute:
        source.commit(group_id, new)
    return new


def parse_duration(text: str) -> int:
    """
    An ISO-8601 duration as Java's C{Duration.parse} reads it
    (C{[-]PnDTnHnMn.nS}, case-insensitive; C{--by-duration}), in ms.

    @raise click.BadParameter: another text.
    """
    import re

    m = re.fullmatch(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:[.,]\d{0,9})?)S)?)?",
                     text.strip(), re.IGNORECASE)
    if m is None or not any(m.group(i) for i in (2, 3, 4, 5)) or text.strip().upper().endswith("T"):
        raise click.BadParameter(f"expected an ISO-8601 duration PnDTnHnMnS, got {text!r}", param_hint="--by-duration")
    days, hours, minutes = (int(m.group(i) or 0) for i in (2, 3, 4))
    seconds = float((m.group(5) or "0").replace(",", "."))
    total = round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    return -total if m.group(1) == "-" else total


def parse_reset_plan(text: str, group_ids: tuple[str, ...]) -> dict[str, dict[tuple[str, int], int]]:
    """
    The offsets of a C{--from-file} CSV (Kafka's C{parseResetPlan}):
    C{TOPIC,PARTITION,OFFSET} lines for the one C{--group}, else
    C{GROUP,TOPIC,PARTITION,OFFSET} lines.

    @raise click.BadParameter: a line of neither form.
    """
    plan: dict[str, dict[tuple[str, int], int]] = {}
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    no_group = len(group_ids) == 1 and bool(lines) and len(lines[0].split(",")) == 3
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        try:
            if no_group and len(cells) == 3:
                group, (topic, partition, offset) = group_ids[0], cells
            elif len(cells) == 4:
                group, topic, partition, offset = cells
            else:
                raise ValueError
            plan.setdefault(group, {})[(topic, int(partition))] = int(offset)
        except ValueError:
            raise click.BadParameter(f"expected TOPIC,PARTITION,OFFSET or GROUP,TOPIC,PARTITION,OFFSET, got "
                                     f"{line!r}", param_hint="--from-file") from None
    return plan


def format_reset_csv(offsets: dict[str, dict[tuple[str, int], int]], with_group: bool) -> str:
    """C{--reset-offsets --export}: Kafka's CSV, C{topic,partition,offset} lines (with the group first when
    more than one C{--group} or C{--all-groups} was given), for C{--from-file}."""
    return "\n".join(f"{group + ',' if with_group else ''}{t},{p},{o}"
                     for group, new in offsets.items() for (t, p), o in sorted(new.items()))
