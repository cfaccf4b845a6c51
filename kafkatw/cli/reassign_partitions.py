"""
C{kafkatw reassign-partitions}: move partitions between brokers, as Kafka's
C{kafka-reassign-partitions.sh} (C{ReassignPartitionsCommand}, KIP-455).

Actions (exactly one):

  - C{--generate --topics-to-move-json-file F --broker-list 1,2,3}: prints the
    current assignment of the topics and a proposal spreading them over the
    listed brokers (Kafka's rack-unaware C{AdminUtils} placement,
    L{kafkatw.zookeeper.registry.assign_replicas}); nothing changes;
  - C{--execute --reassignment-json-file F}: prints the current assignment
    (to keep for a rollback) and starts the reassignments with
    AlterPartitionReassignments;
  - C{--verify --reassignment-json-file F}: says, per partition, whether its
    reassignment is completed or still in progress (ListPartitionReassignments
    and Metadata); exits 0 either way, as Kafka's tool does;
  - C{--cancel --reassignment-json-file F}: cancels the active ones;
  - C{--list}: the reassignments in progress.

The two JSON formats are Kafka's::

    topics to move:  {"version": 1, "topics": [{"topic": "foo"}]}
    reassignment:    {"version": 1, "partitions": [{"topic": "foo", "partition": 0,
                      "replicas": [1, 2], "log_dirs": ["any", "any"]}]}

and reassignments are printed compact, partitions sorted by topic then id,
as Kafka's C{formatAsReassignmentJson} does.

The requests go through L{kafkatw.client.blocking.BlockingAdminClient}, which
finds the controller and follows it when it moves.

C{--throttle N} sets C{leader.replication.throttled.rate} and
C{follower.replication.throttled.rate} to N bytes/s on every broker of the
reassignment (IncrementalAlterConfigs); the followers apply it to the replicas
being added.  C{--verify} clears them once every listed reassignment has
completed (unless C{--preserve-throttles}), as Kafka's tool does.

Moves between the log directories of a broker: a C{log_dirs} entry other than
C{"any"} (an absolute path of that replica's broker's C{log.dirs}) is sent
with AlterReplicaLogDirs (KIP-113,
L{kafkatw.broker.replica_alter_log_dirs}) after the reassignment started,
again every 100 ms while the replica does not exist on its broker yet
(C{REPLICA_NOT_AVAILABLE}), until C{--timeout} ms (default 10000) pass, as
Kafka's C{executeMoves} does; C{--verify} reports each move (Kafka's
C{replicaMoveStatesToString}) from DescribeLogDirs.  C{--cancel} does not
cancel moves between log directories (send the replica's current directory
with another C{--execute} to stop one).
"""

from __future__ import annotations

import json
from typing import Any

import click

from kafkatw.errors import ErrorCode, KafkaError

from ._common import (bootstrap_option, client_security, command_config_option, describe_error, fail,
                      read_input_file)

__all__ = [
    "reassign_partitions",
    "ReassignmentDataError",
    "parse_topics_to_move",
    "parse_broker_list",
    "parse_reassignment",
    "validate_for_execute",
    "replica_log_dirs",
    "format_replica_moves",
    "format_reassignment_json",
    "propose_assignment",
    "format_verify",
    "format_list",
]

Partition = tuple[str, int]

ANY_LOG_DIR = "any"
CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used "
    "to change the throttle by resubmitting the current reassignment.")
THROTTLE_WARNING = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure "
                    "the throttle is removed.")
THROTTLE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")

_ACTIONS = ("generate", "execute", "verify", "cancel", "list")
_REQUIRED = {"generate": ("topics_to_move_json_file", "broker_list"), "execute": ("reassignment_json_file",),
             "verify": ("reassignment_json_file",), "cancel": ("reassignment_json_file",), "list": ()}
_PERMITTED = {"generate": {"disable_rack_aware"},
              "execute": {"additional", "throttle", "timeout"},
              "verify": {"preserve_throttles"},
              "cancel": {"preserve_throttles", "timeout"},
              "list": set()}
_TIMEOUT_MS = 30000
#: Kafka's C{--timeout} default: how long --execute retries starting the log dir moves.
_MOVES_TIMEOUT_MS = 10000


class ReassignmentDataError(ValueError):
    """A JSON file or broker list is not in Kafka's format, or breaks its rules."""


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ReassignmentDataError(f"The input string is not a valid JSON: {e}") from None


def _version(data: Any) -> int:
    if not isinstance(data, dict):
        raise ReassignmentDataError("The input JSON must be an object")
    version = data.get("version", 1)
    if version != 1:
        raise ReassignmentDataError(f"Not supported version field value {version}")
    return version


def _duplicates(items: list[Any]) -> list[Any]:
    seen, dup = set(), []
    for item in items:
        if item in seen and item not in dup:
            dup.append(item)
        seen.add(item)
    return dup


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_topics_to_move(text: str) -> list[str]:
    """
    The topics of C{{"version": 1, "topics": [{"topic": T}, ...]}}.

    @raise ReassignmentDataError: bad JSON, an unknown version, or a topic twice.
    """
    data = _load(text)
    _version(data)
    topics = []
    for entry in data.get("topics", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ReassignmentDataError(f'malformed topic entry {json.dumps(entry)}: expected {{"topic": string}}')
        topics.append(entry["topic"])
    dup = _duplicates(topics)
    if dup:
        raise ReassignmentDataError(f"List of topics to reassign contains duplicate entries: {', '.join(dup)}")
    return topics


def parse_broker_list(text: str) -> list[int]:
    """
    C{"1,2,3"} as broker ids.

    @raise ReassignmentDataError: not integers, or an id twice.
    """
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise ReassignmentDataError(f"--broker-list must be comma-separated broker ids, got {text!r}") from None
    dup = _duplicates(brokers)
    if dup:
        raise ReassignmentDataError(f"Broker list contains duplicate entries: {', '.join(map(str, dup))}")
    return brokers


def parse_reassignment(text: str) -> list[tuple[Partition, list[int], list[str]]]:
    """
    The entries of Kafka's reassignment JSON, in file order, not deduplicated
    (L{validate_for_execute} checks them).

    @return: C{((topic, partition), replicas, log_dirs)}; C{log_dirs} is all
        C{"any"} when absent.
    @raise ReassignmentDataError: bad JSON, an unknown version, a malformed
        entry, or C{log_dirs} of another length than C{replicas}.
    """
    data = _load(text)
    _version(data)
    entries = []
    for entry in data.get("partitions", []):
        ok = (isinstance(entry, dict) and isinstance(entry.get("topic"), str) and _int(entry.get("partition"))
              and isinstance(entry.get("replicas"), list) and all(_int(r) for r in entry["replicas"]))
        if not ok:
            raise ReassignmentDataError(f"malformed partition entry {json.dumps(entry)}: expected "
                                        '{"topic": string, "partition": int, "replicas": [int, ...]}')
        replicas = list(entry["replicas"])
        log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
            raise ReassignmentDataError(f"log_dirs of {entry['topic']}-{entry['partition']} must be strings")
        if len(log_dirs) != len(replicas):
            raise ReassignmentDataError(
                f"Size of replicas list {_java_list(replicas)} is different from size of log dirs list "
                f"{_java_list(log_dirs)} for partition {entry['topic']}-{entry['partition']}")
        entries.append(((entry["topic"], entry["partition"]), replicas, list(log_dirs)))
    return entries


def _java_list(items: list[Any]) -> str:
    return "[" + ", ".join(str(i) for i in items) + "]"


def validate_for_execute(entries: list[tuple[Partition, list[int], list[str]]]) -> dict[Partition, list[int]]:
    """
    Kafka's checks before C{--execute}: not empty, no empty replica list,
    no partition twice, no replica twice.

    @return: C{(topic, partition) -> target replicas}.
    @raise ReassignmentDataError: with Kafka's message.
    """
    if not entries:
        raise ReassignmentDataError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas, _ in entries):
        raise ReassignmentDataError("Partition replica list cannot be empty")
    dup = _duplicates([key for key, _, _ in entries])
    if dup:
        raise ReassignmentDataError("Partition reassignment contains duplicate topic partitions: "
                                    + ",".join(_name(k) for k in dup))
    repeated = [(key, _duplicates(replicas)) for key, replicas, _ in entries if _duplicates(replicas)]
    if repeated:
        raise ReassignmentDataError("Partition replica lists may not contain duplicate entries: " + ". ".join(
            f"{_name(key)} contains multiple entries for {','.join(map(str, d))}" for key, d in repeated))
    return {key: replicas for key, replicas, _ in entries}


def replica_log_dirs(entries: list[tuple[Partition, list[int], list[str]]]) -> dict[tuple[str, int, int], str]:
    """
    The log dir moves of a reassignment (Kafka's C{replicaAssignment}):
    C{(topic, partition, broker) -> log dir} of each C{log_dirs} entry other
    than C{"any"}.
    """
    return {(key[0], key[1], broker): log_dir for key, replicas, dirs in entries
            for broker, log_dir in zip(replicas, dirs) if log_dir != ANY_LOG_DIR}


def _replica_name(replica: tuple[str, int, int]) -> str:
    """Kafka's C{TopicPartitionReplica.toString}: C{topic-partition-broker}."""
    return f"{replica[0]}-{replica[1]}-{replica[2]}"


def format_replica_moves(targets: dict[tuple[str, int, int], str],
                         found: dict[tuple[str, int, int], tuple[str | None, str | None]]) -> tuple[list[str], bool]:
    """
    Kafka's C{findLogDirMoveStates} and C{replicaMoveStatesToString}.

    @param targets: C{(topic, partition, broker) -> target log dir}.
    @param found: C{(topic, partition, broker) -> (current log dir, future
        log dir)} of the replicas found on their brokers.
    @return: the lines, and whether every move is done.
    """
    lines, done = [], True
    for replica in sorted(targets):
        topic, partition, broker = replica
        target = targets[replica]
        if replica not in found:
            done = False
            lines.append(f"Partition {topic}-{partition} cannot be found in any live log directory on broker {broker}.")
            continue
        current, future = found[replica]
        if current is None:
            done = False
            lines.append(f"Partition {topic}-{partition} is not found in any live log dir on broker {broker}. "
                         "There is likely an offline log directory on the broker.")
        elif future is None:
            if current == target:
                lines.append(f"Reassignment of replica {_replica_name(replica)} completed successfully.")
            else:
                lines.append(f"Partition {topic}-{partition} on broker {broker} is not being moved from log dir "
                             f"{current} to {target}.")
        else:
            done = False
            if future == target:
                lines.append(f"Reassignment of replica {_replica_name(replica)} is still in progress.")
            else:
                lines.append(f"Partition {topic}-{partition} on broker {broker} is being moved to log dir {future} "
                             f"instead of {target}.")
    return lines, done


def _name(key: Partition) -> str:
    return f"{key[0]}-{key[1]}"


def _sorted(keys: Any) -> list[Partition]:
    return sorted(keys, key=lambda k: (k[0], k[1]))


def format_reassignment_json(assignment: dict[Partition, list[int]]) -> str:
    """Kafka's C{formatAsReassignmentJson}: compact, partitions sorted, every log dir C{"any"}."""
    partitions = [{"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
                   "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])} for t, p in _sorted(assignment)]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def propose_assignment(current: dict[Partition, list[int]], brokers: list[int],
                       random: Any = None) -> dict[Partition, list[int]]:
    """
    Kafka's C{calculateAssignment}: per topic, its partitions spread over
    C{brokers} with the replication factor of its first partition listed.

    @raise kafkatw.errors.InvalidReplicationFactorError: more replicas than brokers.
    """
    from kafkatw.zookeeper.registry import assign_replicas

    by_topic: dict[str, list[Partition]] = {}
    for key in current:
        by_topic.setdefault(key[0], []).append(key)
    proposed: dict[Partition, list[int]] = {}
    for topic, keys in by_topic.items():
        rf = len(current[keys[0]])
        for partition, replicas in assign_replicas(len(keys), rf, brokers, random=random).items():
            proposed[(topic, partition)] = replicas
    return proposed


def format_verify(states: dict[Partition, tuple[list[int], list[int], bool]]) -> list[str]:
    """
    Kafka's C{partitionReassignmentStatesToString}.

    @param states: C{(topic, partition) -> (current replicas, target
        replicas, done)}.
    """
    lines = ["Status of partition reassignment:"]
    for key in _sorted(states):
        current, target, done = states[key]
        if not done:
            lines.append(f"Reassignment of partition {_name(key)} is still in progress.")
        elif list(current) == list(target):
            lines.append(f"Reassignment of partition {_name(key)} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {_name(key)}, but replica set is "
                         f"{','.join(map(str, current))} rather than {','.join(map(str, target))}.")
    return lines


def format_list(ongoing: dict[Partition, tuple[list[int], list[int], list[int]]]) -> str:
    """Kafka's C{curReassignmentsToString}: C{(topic, partition) -> (replicas, adding, removing)}."""
    if not ongoing:
        return "No partition reassignments found."
    lines = ["Current partition reassignments:"]
    for key in _sorted(ongoing):
        replicas, adding, removing = ongoing[key]
        line = f"{_name(key)}: replicas: {','.join(map(str, replicas))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        lines.append(line)
    return "\n".join(lines)


# --- requests ----------------------------------------------------------------------------


def _assignments(response: Any, topics: set[str]) -> dict[Partition, list[int]]:
    """C{(topic, partition) -> replicas} of C{topics} in a Metadata response."""
    found: dict[Partition, list[int]] = {}
    for t in response.topics:
        if t.name in topics and int(t.error_code) == ErrorCode.none:
            for p in t.partitions:
                found[(t.name, int(p.partition_index))] = [int(r) for r in p.replica_nodes]
    return found


def _list(admin: Any, partitions: list[Partition] | None = None
          ) -> dict[Partition, tuple[list[int], list[int], list[int]]]:
    """ListPartitionReassignments: C{(topic, partition) -> (replicas, adding, removing)}."""
    ongoing = admin.list_partition_reassignments(partitions, timeout_ms=_TIMEOUT_MS)
    return {key: (list(r.replicas), list(r.adding_replicas), list(r.removing_replicas)) for key, r in ongoing.items()}


def _alter(admin: Any, targets: dict[Partition, list[int] | None]) -> dict[Partition, str]:
    """AlterPartitionReassignments; C{None} cancels.  @return: C{partition -> error text} of the failures."""
    results = admin.alter_partition_reassignments(dict(_sorted_items(targets)), timeout_ms=_TIMEOUT_MS)
    return {key: error.error_message or ErrorCode(int(error.error_code)).name.upper()
            for key, error in results.items() if error is not None}


def _sorted_items(targets: dict[Partition, Any]) -> list[tuple[Partition, Any]]:
    return [(k, targets[k]) for k in _sorted(targets)]


class _Terse(Exception):
    """Kafka's C{TerseException}: its message alone is printed and the tool exits 1."""


def _generate(admin: Any, topics: list[str], brokers: list[int]) -> tuple[dict, dict]:
    response = admin.metadata(topics, timeout_ms=_TIMEOUT_MS)
    current = _assignments(response, set(topics))
    for topic in topics:
        if not any(k[0] == topic for k in current):
            raise _Terse(f"Error: Topic {topic} not found.")
    live = {int(b.node_id) for b in response.brokers}
    usable = [b for b in brokers if b in live]  # Kafka leaves out the brokers it does not find
    try:
        proposed = propose_assignment(current, usable)
    except KafkaError as e:
        raise _Terse(f"Error: {e}") from None
    return current, proposed


def _execute(admin: Any, targets: dict[Partition, list[int]], additional: bool, throttle: int, echo: Any,
             moves: dict[tuple[str, int, int], str] | None = None, timeout_ms: int = _MOVES_TIMEOUT_MS) -> None:
    if not additional and _list(admin):
        raise _Terse(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    response = admin.metadata(sorted({t for t, _ in targets}), timeout_ms=_TIMEOUT_MS)
    known = {int(b.node_id) for b in response.brokers}
    for broker in sorted({r for replicas in targets.values() for r in replicas}):
        if broker not in known:
            raise _Terse(f"Error: Unknown broker id {broker}")
    current = _assignments(response, {t for t, _ in targets})
    missing = [k for k in _sorted(targets) if k not in current]
    if missing:
        raise _Terse("Error: Unable to find partition: " + ", ".join(_name(k) for k in missing))
    echo("Current partition replica assignment\n\n"
         f"{format_reassignment_json({k: current[k] for k in targets})}\n\n"
         "Save this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        brokers = sorted({r for k in targets for r in targets[k] + current[k]})
        _set_throttles(admin, brokers, str(throttle))
        echo(THROTTLE_WARNING)
        echo(f"The inter-broker throttle limit was set to {throttle} B/s")
    errors = _alter(admin, dict(targets))
    if errors:
        raise _Terse("Error reassigning partition(s):\n" + "\n".join(
            f"{_name(k)}: {errors[k]}" for k in _sorted(errors)))
    echo(f"Successfully started partition reassignment{'' if len(targets) == 1 else 's'} for "
         + ",".join(_name(k) for k in _sorted(targets)))
    if moves:
        _execute_moves(admin, moves, timeout_ms, echo)


def _execute_moves(admin: Any, moves: dict[tuple[str, int, int], str], timeout_ms: int, echo: Any,
                   sleep: Any = None, clock: Any = None) -> None:
    """
    Kafka's C{executeMoves}: AlterReplicaLogDirs for the pending moves, again
    every 100 ms for those whose replica is not on its broker yet, until
    C{timeout_ms}.
    """
    import time

    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    deadline = clock() + timeout_ms / 1000.0
    pending = dict(moves)
    while True:
        results = admin.alter_replica_log_dirs(pending, timeout_ms=_TIMEOUT_MS)
        completed = []
        for replica in sorted(pending):
            code = results.get(replica, ErrorCode.replica_not_available)
            if code == ErrorCode.none:
                completed.append(replica)
            elif code != ErrorCode.replica_not_available:
                raise _Terse(f"Error: Failed to alter dir for {_replica_name(replica)}: {code.name.upper()}")
        for replica in completed:
            echo(f"Successfully started moving log directory to {pending[replica]} for replica "
                 f"{replica[0]}-{replica[1]} with broker {replica[2]} ")
            del pending[replica]
        if not pending:
            return
        if clock() >= deadline:
            raise _Terse(f"Timed out before log directory move{'' if len(pending) == 1 else 's'} could be started "
                         "for: " + ",".join(_replica_name(r) for r in sorted(pending)))
        sleep(0.1)


def _replica_dirs(admin: Any, replicas: list[tuple[str, int, int]]
                  ) -> dict[tuple[str, int, int], tuple[str | None, str | None]]:
    """DescribeLogDirs of the replicas' brokers: C{replica -> (current log dir, future log dir)}."""
    brokers = sorted({r[2] for r in replicas})
    wanted = sorted({(r[0], r[1]) for r in replicas})
    found: dict[tuple[str, int, int], list] = {}
    for broker, results in admin.describe_log_dirs(brokers, wanted, timeout_ms=_TIMEOUT_MS).items():
        for result in results:
            if int(result.error_code):
                continue
            for t in result.topics:
                for p in t.partitions:
                    entry = found.setdefault((t.name, int(p.partition_index), broker), [None, None])
                    entry[1 if p.is_future_key else 0] = result.log_dir
    return {replica: (entry[0], entry[1]) for replica, entry in found.items()}


def _set_throttles(admin: Any, brokers: list[int], rate: str | None) -> None:
    """Set (C{rate}) or clear (C{None}) the replication throttles of C{brokers}."""
    operation = 0 if rate is not None else 1
    errors = admin.incremental_alter_configs(
        {(4, str(b)): [(key, operation, rate) for key in THROTTLE_KEYS] for b in brokers}, timeout_ms=_TIMEOUT_MS)
    failed = {name: error for (_, name), error in errors.items() if error is not None}
    if failed:
        raise _Terse("Error setting the replication throttle: " + "; ".join(
            f"broker {name}: {error}" for name, error in sorted(failed.items())))


def _verify(admin: Any, targets: list[tuple[Partition, list[int]]], preserve_throttles: bool = False,
            moves: dict[tuple[str, int, int], str] | None = None) -> list[str]:
    ongoing = _list(admin)
    states: dict[Partition, tuple[list[int], list[int], bool]] = {}
    rest = [(k, r) for k, r in targets if k not in ongoing]
    current: dict[Partition, list[int]] = {}
    if rest:
        response = admin.metadata(sorted({k[0] for k, _ in rest}), timeout_ms=_TIMEOUT_MS)
        current = _assignments(response, {k[0] for k, _ in rest})
    for key, target in targets:
        if key in ongoing:
            states[key] = (ongoing[key][0], target, False)
        else:
            states[key] = (current.get(key, []), target, True)
    lines = format_verify(states)
    moves_done = True
    if moves:
        move_lines, moves_done = format_replica_moves(moves, _replica_dirs(admin, list(moves)))
        lines.extend(move_lines)
    if not preserve_throttles and moves_done and all(state[2] and state[0] == state[1] for state in states.values()):
        brokers = sorted({int(b.node_id) for b in admin.metadata([], timeout_ms=_TIMEOUT_MS).brokers})
        _set_throttles(admin, brokers, None)
        lines.append("Clearing broker-level throttles on brokers " + ",".join(str(b) for b in brokers))
    return lines


def _cancel(admin: Any, keys: list[Partition]) -> list[str]:
    ongoing = _list(admin, keys)
    active = [k for k in _sorted(ongoing) if k in set(keys) and (not ongoing[k][1] or ongoing[k][2])]
    if not active:
        return ["None of the specified partition reassignments are active.",
                "None of the specified partition moves are active."]
    errors = _alter(admin, {k: None for k in active})
    if errors:
        raise _Terse(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:\n"
                     + "\n".join(f"{_name(k)}: {errors[k]}" for k in _sorted(errors)))
    return [f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} for: "
            + ",".join(_name(k) for k in active),
            "None of the specified partition moves are active."]


# --- the command -------------------------------------------------------------------------


@click.command("reassign-partitions", short_help="Move partitions between brokers (kafka-reassign-partitions.sh).")
@bootstrap_option
@command_config_option
@click.option("--generate", "actions", flag_value="generate", multiple=True,
              help="Propose an assignment of the topics of --topics-to-move-json-file over --broker-list.")
@click.option("--execute", "actions", flag_value="execute", multiple=True,
              help="Start the reassignment of --reassignment-json-file.")
@click.option("--verify", "actions", flag_value="verify", multiple=True,
              help="Report whether the reassignment of --reassignment-json-file completed.")
@click.option("--cancel", "actions", flag_value="cancel", multiple=True,
              help="Cancel the active reassignments of --reassignment-json-file.")
@click.option("--list", "actions", flag_value="list", multiple=True, help="List the reassignments in progress.")
@click.option("--reassignment-json-file", type=click.Path(dir_okay=False),
              help='Reassignment JSON: {"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],'
                   '"log_dirs":["any","any"]}]}.')
@click.option("--topics-to-move-json-file", type=click.Path(dir_okay=False),
              help='For --generate: {"version":1,"topics":[{"topic":"foo"}]}.')
@click.option("--broker-list", metavar="1,2,3", help="For --generate: the brokers to spread the topics over.")
@click.option("--throttle", type=click.IntRange(min=0), default=None, metavar="BYTES_PER_S",
              help="For --execute: limit the copy to new replicas to this many bytes/s (cleared by --verify "
                   "once the reassignment completes).")
@click.option("--additional", is_flag=True, default=None,
              help="For --execute: start it even though other reassignments are in progress.")
@click.option("--timeout", type=click.IntRange(min=0), default=None, metavar="MS",
              help="For --execute: how long to retry starting the log directory moves (default 10000 ms).")
@click.option("--preserve-throttles", is_flag=True, default=None,
              help="For --verify: keep the replication throttles after the reassignment completed.")
@click.option("--disable-rack-aware", is_flag=True, default=None,
              help="Accepted for compatibility (the proposal is always rack-unaware).")
def reassign_partitions(bootstrap_server: str, actions: tuple[str, ...], **options: Any) -> None:
    """Move partitions between brokers (kafka-reassign-partitions.sh).

    --generate proposes, --execute starts, --verify reports, --cancel stops,
    --list lists.  New replicas copy the data by replication; the old ones
    are deleted once the new ones are in sync.
    """
    if len(actions) != 1:
        raise click.UsageError("Command must include exactly one action: "
                               + ", ".join(f"--{a}" for a in _ACTIONS))
    action = actions[0]
    for name in _REQUIRED[action]:
        if options[name] is None:
            raise click.UsageError(f"Missing required argument \"[{name.replace('_', '-')}]\"")
    for name, value in options.items():
        if value is not None and name not in _REQUIRED[action] and name not in _PERMITTED[action]:
            raise click.UsageError(f"Option \"[{name.replace('_', '-')}]\" can't be used with action \"[{action}]\"")
    try:
        _run(bootstrap_server, action, options)
    except _Terse as e:
        fail(str(e))
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error: {describe_error(e)}")


def _run(bootstrap_server: str, action: str, options: dict[str, Any]) -> None:
    from kafkatw.client.blocking import BlockingAdminClient

    echo = click.echo
    admin = None

    def connected() -> Any:
        nonlocal admin
        admin = BlockingAdminClient(bootstrap_server, **client_security(), client_id="reassign-partitions-tool",
                                    request_timeout_ms=_TIMEOUT_MS, default_api_timeout_ms=_TIMEOUT_MS)
        return admin

    try:
        if action == "generate":
            topics = parse_topics_to_move(
                read_input_file(options["topics_to_move_json_file"], "--topics-to-move-json-file"))
            brokers = parse_broker_list(options["broker_list"])
            current, proposed = _generate(connected(), topics, brokers)
            echo(f"Current partition replica assignment\n{format_reassignment_json(current)}\n")
            echo(f"Proposed partition reassignment configuration\n{format_reassignment_json(proposed)}")
            return
        if action == "list":
            echo(format_list(_list(connected())))
            return
        entries = parse_reassignment(read_input_file(options["reassignment_json_file"], "--reassignment-json-file"))
        if action == "execute":
            targets = validate_for_execute(entries)
            _execute(connected(), targets, bool(options["additional"]),
                     -1 if options["throttle"] is None else options["throttle"], echo, replica_log_dirs(entries),
                     _MOVES_TIMEOUT_MS if options["timeout"] is None else options["timeout"])
        elif action == "verify":
            for line in _verify(connected(), [(key, replicas) for key, replicas, _ in entries],
                                bool(options["preserve_throttles"]), replica_log_dirs(entries)):
                echo(line)
        else:
            for line in _cancel(connected(), [key for key, _, _ in entries]):
                echo(line)
    except ReassignmentDataError as e:
        raise _Terse(f"Error: {e}") from None
    finally:
        if admin is not None:
            admin.close()
