"""
C{kafkatw delete-records}: delete the records of partitions below given
offsets, as Kafka's C{kafka-delete-records.sh} (C{DeleteRecordsCommand},
KIP-107).  The JSON file of C{--offset-json-file} is Kafka's::

    {"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}

(offset C{-1}: the high watermark, deleting everything).  The output is Kafka's::

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 5
    partition: t-1	error: org.apache.kafka.common.errors.OffsetOutOfRangeException: ...
"""

from __future__ import annotations

import json
from typing import Any

import click

from kafkatw.errors import ErrorCode, KafkaError

from ._common import (bootstrap_option, client_security, command_config_option, describe_error, fail,
                      read_input_file)

__all__ = ["delete_records", "parse_offset_json", "format_delete_results", "java_exception"]

#: Kafka's tool gives the admin client 30 s
_TIMEOUT_MS = 30000

#: ErrorCode -> the Java exception class a Kafka tool names, and its default message (Kafka's C{Errors})
_JAVA_EXCEPTIONS = {
    ErrorCode.offset_out_of_range: ("OffsetOutOfRangeException",
                                    "The requested offset is not within the range of offsets maintained by the "
                                    "server."),
    ErrorCode.unknown_topic_or_partition: ("UnknownTopicOrPartitionException",
                                           "This server does not host this topic-partition."),
    ErrorCode.not_leader_or_follower: ("NotLeaderOrFollowerException",
                                       "For requests intended only for the leader, this error indicates that the "
                                       "broker is not the current leader. For requests intended for any replica, "
                                       "this error indicates that the broker is not a replica of the topic "
                                       "partition."),
    ErrorCode.topic_authorization_failed: ("TopicAuthorizationException", "Topic authorization failed."),
    ErrorCode.group_authorization_failed: ("GroupAuthorizationException", "Group authorization failed."),
    ErrorCode.policy_violation: ("PolicyViolationException", "Request parameters do not satisfy the configured "
                                 "policy."),
    ErrorCode.request_timed_out: ("TimeoutException", "The request timed out."),
    ErrorCode.invalid_topic_exception: ("InvalidTopicException", "The request attempted to perform an operation "
                                        "on an invalid topic."),
    ErrorCode.group_subscribed_to_topic: ("GroupSubscribedToTopicException",
                                          "The consumer group is actively subscribed to the topic"),
    ErrorCode.group_id_not_found: ("GroupIdNotFoundException", "The group id does not exist."),
    ErrorCode.non_empty_group: ("GroupNotEmptyException", "The group is not empty."),
    ErrorCode.invalid_group_id: ("InvalidGroupIdException", "The configured groupId is invalid."),
}


def java_exception(code: ErrorCode, with_package: bool = True) -> str:
    """C{org.apache.kafka.common.errors.Name: message}, as Java's C{Throwable.toString} prints Kafka's error."""
    name, message = _JAVA_EXCEPTIONS.get(ErrorCode(code), ("", ""))
    if not name:
        name = "".join(part.capitalize() for part in ErrorCode(code).name.split("_")) + "Exception"
        message = ErrorCode(code).name.upper()
    return f"{'org.apache.kafka.common.errors.' if with_package else ''}{name}: {message}"


class OffsetJsonError(ValueError):
    """The offset JSON is not Kafka's format."""


def parse_offset_json(text: str) -> list[tuple[str, int, int]]:
    """
    The partitions of Kafka's offset JSON (C{DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup}).

    @return: C{(topic, partition, offset)} in the file's order.
    @raise OffsetJsonError: not JSON, a version other than 1, no
        C{partitions}, a malformed entry, or a partition named twice (Kafka's messages).
    """
    try:
        data = json.loads(text)
    except ValueError as e:
        raise OffsetJsonError(f"The input string is not a valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise OffsetJsonError("The input string is not a valid JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise OffsetJsonError(f"Not supported version field value {version}")
    entries = data.get("partitions")
    if not isinstance(entries, list):
        raise OffsetJsonError('Missing partitions field')
    result = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or \
                any(not isinstance(entry.get(k), int) or isinstance(entry.get(k), bool)
                    for k in ("partition", "offset")):
            raise OffsetJsonError(f"malformed partition entry {json.dumps(entry)}: "
                                  'expected {"topic": string, "partition": int, "offset": int}')
        result.append((entry["topic"], entry["partition"], entry["offset"]))
    seen: set[tuple[str, int]] = set()
    duplicates = []
    for topic, partition, _ in result:
        if (topic, partition) in seen and f"{topic}-{partition}" not in duplicates:
            duplicates.append(f"{topic}-{partition}")
        seen.add((topic, partition))
    if duplicates:
        raise OffsetJsonError("Offset json file contains duplicate topic partitions: " + ",".join(duplicates))
    return result


def format_delete_results(results: dict[tuple[str, int], tuple[int, Any]]) -> list[str]:
    """Kafka's result lines, one per partition (C{partition: t-0<TAB>low_watermark: 5})."""
    lines = []
    for (topic, partition), (low, error) in results.items():
        if error is None:
            lines.append(f"partition: {topic}-{partition}\tlow_watermark: {low}")
        else:
            lines.append(f"partition: {topic}-{partition}\terror: {java_exception(error.error_code)}")
    return lines


@click.command("delete-records", short_help="Delete records below offsets (kafka-delete-records.sh).")
@bootstrap_option
@command_config_option
@click.option("--offset-json-file", required=True, type=click.Path(dir_okay=False),
              help='JSON: {"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}; '
                   "offset -1 deletes up to the high watermark.")
def delete_records(bootstrap_server: str, offset_json_file: str) -> None:
    """Delete the records of partitions below the given offsets (kafka-delete-records.sh).

    Each partition's log start offset moves up; consumers start there.
    """
    try:
        partitions = parse_offset_json(read_input_file(offset_json_file))
    except OffsetJsonError as e:
        fail(f"Error: {e}")
    from kafkatw.client.blocking import BlockingAdminClient

    click.echo("Executing records delete operation")
    admin = None
    try:
        admin = BlockingAdminClient(bootstrap_server, **client_security(), client_id="delete-records-tool",
                                    request_timeout_ms=_TIMEOUT_MS, default_api_timeout_ms=_TIMEOUT_MS)
        found = admin.delete_records({(t, p): o for t, p, o in partitions}, timeout_ms=_TIMEOUT_MS)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error while executing records delete operation: {describe_error(e)}")
    finally:
        if admin is not None:
            admin.close()
    click.echo("Records delete operation completed:")
    ordered = {(t, p): found[(t, p)] for t, p, _ in partitions if (t, p) in found}
    for line in format_delete_results(ordered):
        click.echo(line)
