"""
C{kafkatw consumer-groups --zookeeper Z}: the paper-style consumer groups
(L{kafkatw.client.zookeeper_group}) read from and written to ZooKeeper, as
Kafka 0.8's C{ConsumerOffsetChecker} and C{kafka-consumer-groups.sh --zookeeper}
did.

    kafkatw consumer-groups --zookeeper 127.0.0.1:2181 --list
    kafkatw consumer-groups --zookeeper 127.0.0.1:2181 --describe --group g
    kafkatw consumer-groups --zookeeper 127.0.0.1:2181 --reset-offsets --group g --topic t --to-earliest --execute
    kafkatw consumer-groups --zookeeper 127.0.0.1:2181 --delete --group g

C{--describe} prints, per partition of the group's topics::

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  OWNER

CURRENT-OFFSET is C{/consumers/<g>/offsets/<t>/<p>} (the next offset the group
will consume), LOG-END-OFFSET the partition's high watermark (asked of the
brokers: C{--bootstrap-server}, else a broker registered in ZooKeeper), LAG
their difference (records produced and not yet consumed by the group), OWNER
C{/consumers/<g>/owners/<t>/<p>} (the consumer fetching it now).  The offsets
are shared with the broker's group coordinator, so groups of Kafka clients show
their offsets here too (without owners).

The work is done by C{async} functions over a ZooKeeper client (a
L{kafkatw.zookeeper.bridge.ZooKeeperClient} or the fake of
L{kafkatw.testing}); the command runs them on a crochet-managed reactor.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import click

from kafkatw.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from kafkatw.errors import KafkaError

from ._common import client_security, list_offsets
from kafkatw.zookeeper.bridge import NoNodeError
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import TOPICS_PATH, CommittedOffset, decode_topic, group_path

__all__ = [
    "ZookeeperGroup",
    "list_groups",
    "describe_group",
    "reset_offsets",
    "delete_group",
    "format_describe",
    "parse_datetime",
    "run",
    "GroupNotInactiveError",
]

TopicPartition = tuple[str, int]


class GroupNotInactiveError(Exception):
    """The group has registered consumers: it must be stopped first."""


@dataclass
class ZookeeperGroup:
    """What ZooKeeper knows of one group."""

    group_id: str
    members: dict[str, dict[str, Any]] = field(default_factory=dict)  # consumer id -> registration JSON
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    partitions: set[TopicPartition] = field(default_factory=set)  # of the subscribed topics

    @property
    def exists(self) -> bool:
        return bool(self.members or self.owners or self.offsets)


# --- the work, on a reactor -----------------------------------------------------------------


async def list_groups(zk: Any) -> list[str]:
    """@return: the sorted group ids under C{/consumers}."""
    return await Registry(zk).list_consumer_groups()


async def _children(zk: Any, path: str) -> list[str]:
    try:
        return await zk.get_children(path)
    except NoNodeError:
        return []


async def describe_group(zk: Any, group_id: str) -> ZookeeperGroup:
    """Read a group's registrations, owners, committed offsets and its topics' partitions."""
    base = group_path(group_id)
    group = ZookeeperGroup(group_id)
    for cid in await _children(zk, f"{base}/ids"):
        try:
            data, _ = await zk.get(f"{base}/ids/{cid}")
            group.members[cid] = json.loads(data) if data else {}
        except NoNodeError:
            continue
        except ValueError:
            group.members[cid] = {}
    for topic in await _children(zk, f"{base}/owners"):
        for p in await _children(zk, f"{base}/owners/{topic}"):
            try:
                data, _ = await zk.get(f"{base}/owners/{topic}/{p}")
            except NoNodeError:
                continue
            group.owners[(topic, int(p))] = data.decode("utf-8", "replace")
    for tp, committed in (await Registry(zk).get_committed_offsets(group_id)).items():
        group.offsets[tp] = committed.offset
    topics = {t for t, _ in group.offsets} | {t for t, _ in group.owners}
    import re

    all_topics: list[str] | None = None
    for registration in group.members.values():
        subscription = registration.get("subscription") or {}
        if registration.get("pattern", "static") == "static":
            topics.update(subscription)
        else:
            if all_topics is None:
                all_topics = await _children(zk, TOPICS_PATH)
            for regex in subscription:
                topics.update(t for t in all_topics if re.fullmatch(regex, t))
    for topic in sorted(topics):
        try:
            data, _ = await zk.get(f"{TOPICS_PATH}/{topic}")
        except NoNodeError:
            continue
        group.partitions.update((topic, p) for p in decode_topic(topic, data).partitions)
    group.partitions.update(group.offsets)
    group.partitions.update(group.owners)
    return group


async def reset_offsets(zk: Any, group_id: str, offsets: dict[TopicPartition, int]) -> None:
    """
    Write committed offsets of an inactive group.

    @raise GroupNotInactiveError: consumers are registered.
    """
    members = await _children(zk, f"{group_path(group_id)}/ids")
    if members:
        raise GroupNotInactiveError(
            f"Assignments can only be reset if the group '{group_id}' is inactive, but it has"
            f" {len(members)} registered consumer(s): {', '.join(members)}")
    registry = Registry(zk)
    for (topic, partition), offset in sorted(offsets.items()):
        await registry.set_committed_offset(group_id, topic, partition, CommittedOffset(offset))


async def delete_group(zk: Any, group_id: str) -> bool:
    """
    Delete C{/consumers/<group>} (registrations, owners, offsets).

    @return: whether the group existed.
    @raise GroupNotInactiveError: consumers are registered.
    """
    base = group_path(group_id)
    members = await _children(zk, f"{base}/ids")
    if members:
        raise GroupNotInactiveError(f"Group '{group_id}' could not be deleted: it has registered consumers"
                                    f" ({', '.join(members)}) (NON_EMPTY_GROUP)")
    if await zk.exists(base) is None:
        return False
    await zk.delete(base, recursive=True)
    return True


async def broker_bootstrap(zk: Any) -> str | None:
    """A C{host:port} list of the brokers registered in C{/brokers/ids}, or C{None}."""
    brokers = await Registry(zk).list_brokers()
    return ",".join(f"{host}:{port}" for host, port, _ in brokers.values()) or None


# --- formatting and offsets from the brokers ------------------------------------------------------


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows)


def format_describe(group: ZookeeperGroup, log_end_offsets: dict[TopicPartition, int]) -> str:
    """The C{--describe} table (see the module docstring); C{-} where a value is unknown."""
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER"]]
    for tp in sorted(group.partitions):
        current = group.offsets.get(tp)
        end = log_end_offsets.get(tp, -1)
        lag = max(0, end - current) if current is not None and end >= 0 else None
        rows.append([group.group_id, tp[0], str(tp[1]), "-" if current is None else str(current),
                     "-" if end < 0 else str(end), "-" if lag is None else str(lag), group.owners.get(tp, "-")])
    return _table(rows)


def log_end_offsets(bootstrap: str | None, partitions: set[TopicPartition],
                    timeout_ms: int = 30000) -> dict[TopicPartition, int]:
    """High watermarks from the brokers (-1 where unknown); empty without C{bootstrap}."""
    return _list_offsets(bootstrap, {tp: LATEST_TIMESTAMP for tp in partitions}, timeout_ms)


def _list_offsets(bootstrap: str | None, wanted: dict[TopicPartition, int], timeout_ms: int) -> dict[TopicPartition, int]:
    if not bootstrap or not wanted:
        return {}
    from kafkatw.client.blocking import BlockingAdminClient

    with BlockingAdminClient(bootstrap, **client_security(), client_id="kafkatw-consumer-groups",
                             request_timeout_ms=timeout_ms, default_api_timeout_ms=timeout_ms) as admin:
        return list_offsets(admin, wanted)


def parse_datetime(text: str) -> int:
    """
    Kafka's C{--to-datetime} format C{YYYY-MM-DDTHH:mm:SS.sss}, optionally with
    a zone (C{Z}, C{+01:00}); without one, local time.

    @return: ms since the epoch.
    """
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"expected YYYY-MM-DDTHH:mm:SS.sss, got {text!r}", param_hint="--to-datetime")
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


# --- the command ----------------------------------------------------------------------------


def run(zookeeper_connect: str, bootstrap_server: str | None, action: str, group_id: str | None,
        topic: str | None = None, to: str | None = None, to_offset: int | None = None,
        to_datetime: str | None = None, execute: bool = False, timeout_ms: int = 30000,
        echo: Callable[[str], Any] = click.echo) -> None:
    """
    The ZooKeeper mode of C{consumer-groups}.

    @param action: C{"list"}, C{"describe"}, C{"reset-offsets"} or C{"delete"}.
    @param to: C{"earliest"} or C{"latest"} (C{--to-earliest}, C{--to-latest}).
    @raise click.ClickException: on every failure, with Kafka's wording.
    """
    from kafkatw.client.blocking import call_with_zookeeper

    timeout_s = timeout_ms / 1000.0
    try:
        if action == "list":
            for name in call_with_zookeeper(list_groups, zookeeper_connect, timeout_s):
                echo(name)
            return
        assert group_id is not None
        if action == "describe":
            group, brokers = call_with_zookeeper(_describe_with_brokers, zookeeper_connect, timeout_s, group_id)
            if not group.exists:
                raise click.ClickException(f"Consumer group '{group_id}' does not exist.")
            if not group.members:
                echo(f"\nConsumer group '{group_id}' has no active members.")
            ends = log_end_offsets(bootstrap_server or brokers, group.partitions, timeout_ms)
            echo("\n" + format_describe(group, ends))
        elif action == "delete":
            if not call_with_zookeeper(delete_group, zookeeper_connect, timeout_s, group_id):
                raise click.ClickException(f"Deletion of some consumer groups failed:\n* Group '{group_id}'"
                                           " could not be deleted due to: GROUP_ID_NOT_FOUND")
            echo(f"Deletion of requested consumer groups ('{group_id}') was successful.")
        elif action == "reset-offsets":
            group, brokers = call_with_zookeeper(_describe_with_brokers, zookeeper_connect, timeout_s, group_id)
            if group.members:
                raise GroupNotInactiveError(f"Assignments can only be reset if the group '{group_id}' is inactive,"
                                            f" but it has registered consumers: {', '.join(sorted(group.members))}")
            partitions = _reset_partitions(group, topic)
            if not partitions:
                raise click.ClickException(f"no partitions to reset for group '{group_id}' (give --topic)")
            new = _new_offsets(bootstrap_server or brokers, partitions, to, to_offset, to_datetime, timeout_ms)
            if execute:
                call_with_zookeeper(reset_offsets, zookeeper_connect, timeout_s, group_id, new)
            rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
                [group_id, t, str(p), str(o)] for (t, p), o in sorted(new.items())]
            echo("\n" + _table(rows))
            if not execute:
                echo("\n(dry run: add --execute to write these offsets)")
        else:
            raise click.UsageError(f"unknown action {action!r}")
    except GroupNotInactiveError as e:
        raise click.ClickException(f"Error: {e}") from None
    except (KafkaError, OSError, ValueError) as e:
        raise click.ClickException(f"Error: Executing consumer group command failed due to {type(e).__name__}: {e}")
    except Exception as e:  # ZooKeeper errors, crochet timeouts
        if isinstance(e, click.ClickException):
            raise
        raise click.ClickException(f"Error: Executing consumer group command failed due to {type(e).__name__}: {e}")


async def _describe_with_brokers(zk: Any, group_id: str) -> tuple[ZookeeperGroup, str | None]:
    return await describe_group(zk, group_id), await broker_bootstrap(zk)


def _reset_partitions(group: ZookeeperGroup, topic: str | None) -> list[TopicPartition]:
    if not topic:
        return sorted(group.offsets)
    name, _, listed = topic.partition(":")
    if listed:
        return [(name, int(p)) for p in listed.split(",")]
    known = sorted(tp for tp in group.partitions if tp[0] == name)
    if known:
        return known
    return []


def _new_offsets(bootstrap: str | None, partitions: list[TopicPartition], to: str | None, to_offset: int | None,
                 to_datetime: str | None, timeout_ms: int) -> dict[TopicPartition, int]:
    if to_offset is not None:
        return {tp: to_offset for tp in partitions}
    if not bootstrap:
        raise click.ClickException("no broker to ask for offsets: give --bootstrap-server")
    if to_datetime is not None:
        ts = parse_datetime(to_datetime)
        found = _list_offsets(bootstrap, {tp: ts for tp in partitions}, timeout_ms)
        missing = [tp for tp, o in found.items() if o < 0]  # no record that late: the log end
        found.update(_list_offsets(bootstrap, {tp: LATEST_TIMESTAMP for tp in missing}, timeout_ms))
        return found
    timestamp = EARLIEST_TIMESTAMP if to == "earliest" else LATEST_TIMESTAMP
    return _list_offsets(bootstrap, {tp: timestamp for tp in partitions}, timeout_ms)
