"""
C{kafkatw share-groups}: list, describe, reset and delete share groups
(KIP-932), as Apache Kafka's C{kafka-share-groups.sh}.

    kafkatw share-groups --bootstrap-server localhost:9092 --list
    kafkatw share-groups --bootstrap-server localhost:9092 --describe --group g [--members | --state | --offsets]
    kafkatw share-groups --bootstrap-server localhost:9092 --reset-offsets --group g --topic t \\
        --to-earliest --execute
    kafkatw share-groups --bootstrap-server localhost:9092 --delete --group g

C{--describe} (C{--offsets}, the default) prints each share partition's start
offset (C{-} where the group never read the partition)::

    GROUP  TOPIC  PARTITION  START-OFFSET

C{--members}: C{GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT};
C{--state}: C{GROUP COORDINATOR (ID) STATE #MEMBERS}.  C{--reset-offsets}
(C{--to-earliest}, C{--to-latest}, C{--to-datetime}) needs a group without
members; without C{--execute} it only prints the plan (C{--dry-run}).

Requests: ListGroups to every broker (share groups are those of protocol
type C{share}), ShareGroupDescribe, DescribeShareGroupOffsets,
AlterShareGroupOffsets and DeleteGroups to the group's coordinator.
"""

from __future__ import annotations

import datetime
from typing import Any, Awaitable, Callable

import click

from kafkatw.errors import ErrorCode, KafkaError, kafka_error

from ._common import bootstrap_option, client_security, command_config_option, describe_error, fail

__all__ = ["share_groups", "format_table"]

_TIMEOUT_S = 30
_LIST_GROUPS_V = 4
_SHARE_GROUP_DESCRIBE_V = 1
_DESCRIBE_OFFSETS_V = 0
_ALTER_OFFSETS_V = 0
_DELETE_GROUPS_V = 1
_LIST_OFFSETS_V = 6
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


def format_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """Left-aligned columns, as Kafka's tools print them."""
    table = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return [" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]


def _run(bootstrap: str, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run C{work(client)} on the blocking clients' reactor thread with a L{KafkaClient} of C{bootstrap}."""
    from kafkatw.client.blocking import reactor_thread
    from kafkatw.client.client import KafkaClient
    from twisted.internet import defer

    thread = reactor_thread()
    security = client_security()

    async def run() -> Any:
        client = KafkaClient(thread.reactor, bootstrap, client_id="share-groups-tool", **security)
        try:
            await client.refresh_metadata()
            return await work(client)
        finally:
            await client.close()

    return thread.call(_TIMEOUT_S, lambda: defer.Deferred.fromCoroutine(run()))


async def _request(client: Any, node: int, api_key: int, version: int, body: dict) -> Any:
    connection = await client.connection(node)
    return await connection.request(api_key, body, version=version)


async def _coordinator(client: Any, group: str) -> int:
    from kafkatw.client.transaction_manager import find_coordinator

    return await find_coordinator(client, group, 0)


async def _list(client: Any) -> list[tuple[str, str]]:
    groups: dict[str, str] = {}
    for node in sorted(client.brokers):
        response = await _request(client, node, 16, _LIST_GROUPS_V, {"states_filter": []})
        for g in response.groups:
            if g.protocol_type == "share":
                groups[g.group_id] = g.group_state
    return sorted(groups.items())


async def _describe(client: Any, group: str) -> tuple[int, Any]:
    node = await _coordinator(client, group)
    response = await _request(client, node, 77, _SHARE_GROUP_DESCRIBE_V,
                              {"group_ids": [group], "include_authorized_operations": False})
    described = response.groups[0]
    if described.error_code:
        raise kafka_error(ErrorCode(int(described.error_code)), described.error_message or "")
    return node, described


async def _offsets(client: Any, group: str, topics: list[str] | None) -> list[tuple[str, int, int]]:
    node = await _coordinator(client, group)
    if topics:
        await client.ensure_metadata(topics)
    body = {"groups": [{"group_id": group, "topics": None if topics is None else [
        {"topic_name": t, "partitions": client.partitions_for(t)} for t in topics]}]}
    response = await _request(client, node, 90, _DESCRIBE_OFFSETS_V, body)
    g = response.groups[0]
    if g.error_code:
        raise kafka_error(ErrorCode(int(g.error_code)), g.error_message or "")
    return sorted((t.topic_name, int(p.partition_index), int(p.start_offset)) for t in g.topics for p in t.partitions)


async def _list_offsets(client: Any, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    result = {}
    for (topic, partition), timestamp in wanted.items():
        leader = client.leader_for(topic, partition)
        response = await _request(client, leader, 2, _LIST_OFFSETS_V, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
        p = response.topics[0].partitions[0]
        if p.error_code:
            raise kafka_error(ErrorCode(int(p.error_code)), f"{topic}-{partition}")
        result[(topic, partition)] = int(p.offset)
    return result


@click.command("share-groups", short_help="Share groups and their offsets (kafka-share-groups.sh).")
@bootstrap_option
@command_config_option
@click.option("--list", "list_", is_flag=True, help="List the share groups.")
@click.option("--describe", is_flag=True, help="Describe a share group (--offsets, --members or --state).")
@click.option("--members", is_flag=True, help="With --describe: the members and their assignments.")
@click.option("--state", is_flag=True, help="With --describe: the group's state and coordinator.")
@click.option("--offsets", is_flag=True, help="With --describe: each share partition's start offset (default).")
@click.option("--reset-offsets", is_flag=True, help="Reset the start offsets of a group without members.")
@click.option("--delete", is_flag=True, help="Delete a share group without members.")
@click.option("--group", help="The share group.")
@click.option("--topic", "topics", multiple=True, help="With --reset-offsets: a topic (all its partitions).")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offsets.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offsets.")
@click.option("--to-datetime", help="Reset to the first offset at or after YYYY-MM-DDTHH:mm:SS.sss (UTC).")
@click.option("--execute", is_flag=True, help="Do the reset (else a dry run: only the plan is printed).")
@click.option("--dry-run", is_flag=True, help="Print the reset plan only (the default).")
def share_groups(bootstrap_server: str, list_: bool, describe: bool, members: bool, state: bool, offsets: bool,
                 reset_offsets: bool, delete: bool, group: str | None, topics: tuple[str, ...], to_earliest: bool,
                 to_latest: bool, to_datetime: str | None, execute: bool, dry_run: bool) -> None:
    """List, describe, reset and delete share groups (kafka-share-groups.sh, KIP-932)."""
    actions = [a for a, on in (("--list", list_), ("--describe", describe), ("--reset-offsets", reset_offsets),
                               ("--delete", delete)) if on]
    if len(actions) != 1:
        fail("Command must include exactly one action: --list, --describe, --delete, --reset-offsets")
    if not list_ and not group:
        fail(f"Option [{actions[0]}] takes the option: [group]")
    try:
        if list_:
            for name, _ in _run(bootstrap_server, _list):
                click.echo(name)
        elif describe:
            _print_describe(bootstrap_server, group, members, state)  # type: ignore[arg-type]
        elif delete:
            _delete(bootstrap_server, group)  # type: ignore[arg-type]
        else:
            _reset(bootstrap_server, group, list(topics), to_earliest, to_latest, to_datetime,  # type: ignore
                   execute and not dry_run)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error: {describe_error(e)}")


def _print_describe(bootstrap: str, group: str, members: bool, state: bool) -> None:
    if members or state:
        node, described = _run(bootstrap, lambda client: _describe(client, group))
        if state:
            for line in format_table(["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"],
                                     [[group, f"({node})", described.group_state, len(described.members)]]):
                click.echo(line)
        else:
            rows = []
            for m in described.members:
                parts = [(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions]
                assignment = ",".join(f"{t}:{p}" for t, p in sorted(parts)) or "-"
                rows.append([group, m.member_id, m.client_host, m.client_id, len(parts), assignment])
            for line in format_table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
                                     rows):
                click.echo(line)
        return

    async def work(client: Any) -> list:
        await _describe(client, group)  # GROUP_ID_NOT_FOUND for a group that does not exist
        return await _offsets(client, group, None)

    rows = [[group, t, p, o if o >= 0 else "-"] for t, p, o in _run(bootstrap, work)]
    for line in format_table(["GROUP", "TOPIC", "PARTITION", "START-OFFSET"], rows):
        click.echo(line)


def _delete(bootstrap: str, group: str) -> None:
    async def work(client: Any) -> ErrorCode:
        node = await _coordinator(client, group)
        response = await _request(client, node, 42, _DELETE_GROUPS_V, {"groups_names": [group]})
        return ErrorCode(int(response.results[0].error_code))

    code = _run(bootstrap, work)
    if code != ErrorCode.none:
        fail(f"Error: Deletion of share group '{group}' failed due to {code.name.upper()}")
    click.echo(f"Deletion of requested share groups ('{group}') was successful.")


def _reset(bootstrap: str, group: str, topics: list[str], to_earliest: bool, to_latest: bool,
           to_datetime: str | None, execute: bool) -> None:
    if sum((to_earliest, to_latest, to_datetime is not None)) != 1:
        fail("Option [reset-offsets] takes exactly one of: --to-earliest, --to-latest, --to-datetime")
    if to_datetime is not None:
        moment = datetime.datetime.fromisoformat(to_datetime)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        timestamp = int(moment.timestamp() * 1000)
    else:
        timestamp = EARLIEST_TIMESTAMP if to_earliest else LATEST_TIMESTAMP

    async def work(client: Any) -> list[tuple[str, int, int]]:
        names = topics
        if not names:
            names = sorted({t for t, _, _ in await _offsets(client, group, None)})
        await client.ensure_metadata(names)
        wanted = {(t, p): timestamp for t in names for p in client.partitions_for(t)}
        found = await _list_offsets(client, wanted)
        if to_datetime is not None:  # no record at or after the time: the log end, as Kafka's tool
            missing = {tp: LATEST_TIMESTAMP for tp, o in found.items() if o < 0}
            found.update(await _list_offsets(client, missing) if missing else {})
        plan = sorted((t, p, o) for (t, p), o in found.items())
        if execute:
            node = await _coordinator(client, group)
            by_topic: dict[str, list[dict]] = {}
            for t, p, o in plan:
                by_topic.setdefault(t, []).append({"partition_index": p, "start_offset": o})
            response = await _request(client, node, 91, _ALTER_OFFSETS_V, {
                "group_id": group, "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]})
            if response.error_code:
                raise kafka_error(ErrorCode(int(response.error_code)), response.error_message or "")
            for t in response.responses:
                for p in t.partitions:
                    if p.error_code:
                        raise kafka_error(ErrorCode(int(p.error_code)), f"{t.topic_name}-{p.partition_index}")
        return plan

    plan = _run(bootstrap, work)
    for line in format_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [[group, t, p, o] for t, p, o in plan]):
        click.echo(line)
