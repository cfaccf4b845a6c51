"""
C{kafkatw leader-election}: preferred and unclean leader elections on demand,
as Kafka's C{kafka-leader-election.sh} (C{LeaderElectionCommand}, KIP-460).

The tool sends one ElectLeaders request to the controller, through
L{kafkatw.client.blocking.BlockingAdminClient} (which follows the controller
when it moves), and prints Kafka's lines::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: PREFERRED_LEADER_NOT_AVAILABLE: ...

and exits 1, with C{N replica(s) could not be elected} on stderr, when an
election failed.  The JSON file of C{--path-to-json-file} is Kafka's::

    {"partitions": [{"topic": "foo", "partition": 1}, {"topic": "foobar", "partition": 2}]}
"""

from __future__ import annotations

import json
from typing import Any

import click

from kafkatw.errors import ErrorCode, KafkaError

from ._common import (admin_config_option, bootstrap_option, client_security, command_config_option, describe_error,
                      fail, read_input_file)

__all__ = ["leader_election", "parse_election_json", "format_election_results", "ELECTION_TYPES"]

#: ElectLeaders' election_type values (KIP-460)
ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}

#: Kafka's tool gives the admin client 30 s
_TIMEOUT_MS = 30000


class ElectionDataError(ValueError):
    """The election JSON is not Kafka's format."""


def parse_election_json(text: str) -> list[tuple[str, int]]:
    """
    The partitions of Kafka's replica election JSON
    C{{"partitions": [{"topic": T, "partition": P}, ...]}}.

    @return: C{(topic, partition)} pairs, sorted.
    @raise ElectionDataError: not JSON, no C{partitions}, a malformed entry,
        or a partition named twice (Kafka's messages).
    """
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ElectionDataError(f"Replica election data is not valid JSON: {e}") from None
    if not data:
        raise ElectionDataError("Replica election data is empty")
    if not isinstance(data, dict) or "partitions" not in data:
        raise ElectionDataError('Replica election data is missing "partitions" field')
    entries = data["partitions"]
    if not isinstance(entries, list):
        raise ElectionDataError('"partitions" must be a list')
    partitions = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) \
                or not isinstance(entry.get("partition"), int) or isinstance(entry.get("partition"), bool):
            raise ElectionDataError(f"malformed partition entry {json.dumps(entry)}: "
                                    'expected {"topic": string, "partition": int}')
        partitions.append((entry["topic"], entry["partition"]))
    duplicates = sorted({p for p in partitions if partitions.count(p) > 1})
    if duplicates:
        raise ElectionDataError("Replica election data contains duplicate partitions: "
                                + ",".join(f"{t}-{p}" for t, p in duplicates))
    return sorted(set(partitions))


def format_election_results(election_type: str, results: dict[tuple[str, int], tuple[int, str | None]]
                            ) -> tuple[list[str], int]:
    """
    Kafka's output of an election.

    @param results: C{(topic, partition) -> (error code, message or None)}
        as ElectLeaders answered.
    @return: the lines to print and the number of failed elections.
    """
    succeeded = sorted(k for k, (code, _) in results.items() if code == ErrorCode.none)
    noop = sorted(k for k, (code, _) in results.items() if code == ErrorCode.election_not_needed)
    failed = sorted((k, v) for k, v in results.items() if v[0] not in (ErrorCode.none, ErrorCode.election_not_needed))
    lines = []
    if succeeded:
        lines.append(f"Successfully completed leader election ({election_type}) for partitions "
                     + ", ".join(f"{t}-{p}" for t, p in succeeded))
    if noop:
        lines.append("Valid replica already elected for partitions " + ", ".join(f"{t}-{p}" for t, p in noop))
    for (topic, partition), (code, message) in failed:
        name = ErrorCode(code).name.upper()
        lines.append(f"Error completing leader election ({election_type}) for partition: {topic}-{partition}: "
                     f"{name}" + (f": {message}" if message else ""))
    return lines, len(failed)


def elect(admin: Any, election_type: str, partitions: list[tuple[str, int]] | None,
          timeout_ms: int = _TIMEOUT_MS) -> dict[tuple[str, int], tuple[int, str | None]]:
    """
    ElectLeaders, through the admin client (which finds the controller and
    follows it when it moves).

    @param admin: a L{kafkatw.client.blocking.BlockingAdminClient}.
    @param partitions: C{None} for every partition of the cluster.
    @param timeout_ms: the election's time, retries included (ms).
    @return: C{(topic, partition) -> (error code, the controller's message or None)}.
    @raise KafkaError: the controller cannot be reached in C{timeout_ms}, or
        refused the whole request.
    """
    results = admin.elect_leaders(ELECTION_TYPES[election_type], partitions, timeout_ms=timeout_ms)
    return {key: (ErrorCode.none, None) if error is None else (int(error.error_code), error.error_message)
            for key, error in results.items()}


@click.command("leader-election", short_help="Elect preferred or unclean leaders (kafka-leader-election.sh).")
@bootstrap_option
@command_config_option
@admin_config_option
@click.option("--election-type", required=True, metavar="PREFERRED|UNCLEAN",
              type=click.Choice(sorted(ELECTION_TYPES), case_sensitive=False),
              help="PREFERRED elects the preferred replica (the first assigned) where it does not lead and is in "
                   "sync; UNCLEAN elects a live replica, in sync or not, where a partition has no leader.")
@click.option("--all-topic-partitions", is_flag=True,
              help="Elect on every partition. Not allowed with --topic or --path-to-json-file.")
@click.option("--topic", help="The topic of one partition to elect on (with --partition).")
@click.option("--partition", type=click.IntRange(min=0), help="The partition id (required with --topic).")
@click.option("--path-to-json-file", type=click.Path(dir_okay=False),
              help='A JSON file of partitions: {"partitions": [{"topic": "foo", "partition": 1}]}.')
def leader_election(bootstrap_server: str, election_type: str, all_topic_partitions: bool, topic: str | None,
                    partition: int | None, path_to_json_file: str | None) -> None:
    """Elect new leaders for a set of partitions (kafka-leader-election.sh).

    The request goes to the controller. Exits 1 when an election failed.
    """
    election_type = election_type.upper()
    chosen = [name for name, given in (("topic", topic is not None), ("all-topic-partitions", all_topic_partitions),
                                       ("path-to-json-file", path_to_json_file is not None)) if given]
    if len(chosen) != 1:
        raise click.UsageError("One and only one of the following options is required: "
                               "topic, all-topic-partitions, path-to-json-file")
    if topic is not None and partition is None:
        raise click.UsageError("Missing required option(s): partition")
    if topic is None and partition is not None:
        raise click.UsageError("Option partition is only allowed if topic is used")
    partitions: list[tuple[str, int]] | None = None
    if path_to_json_file is not None:
        try:
            partitions = parse_election_json(read_input_file(path_to_json_file))
        except ElectionDataError as e:
            fail(f"Error: {e}")
    elif topic is not None:
        assert partition is not None
        partitions = [(topic, partition)]
    from kafkatw.client.blocking import BlockingAdminClient

    admin = None
    try:
        admin = BlockingAdminClient(bootstrap_server, **client_security(), client_id="leader-election-tool",
                                    request_timeout_ms=_TIMEOUT_MS,
                                    default_api_timeout_ms=_TIMEOUT_MS)
        results = elect(admin, election_type, partitions)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error while making request: {describe_error(e)}")
    finally:
        if admin is not None:
            admin.close()
    lines, failures = format_election_results(election_type, results)
    for line in lines:
        click.echo(line)
    if failures:
        fail(f"{failures} replica(s) could not be elected")
