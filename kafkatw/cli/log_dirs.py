"""
C{kafkatw log-dirs}: describe the brokers' log directories, as Kafka's
C{kafka-log-dirs.sh} (C{LogDirsCommand}, KIP-113): one DescribeLogDirs
request per broker, printed as Kafka's JSON::

    Querying brokers for log directories information
    Received log directory information from brokers 0,1
    {"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/var/lib/kafkatw","error":null,
     "partitions":[{"partition":"t-0","size":1234,"offsetLag":0,"isFuture":false}]}]}]}

(one line).  C{--topic-list} keeps the partitions of those topics;
C{--broker-list} asks only those brokers.  A log directory that failed
(KIP-112) shows its error, as Kafka's tool prints it::

    {"logDir":"/var/lib/kafkatw/b","error":"org.apache.kafka.common.errors.KafkaStorageException","partitions":[]}
"""

from __future__ import annotations

import json
from typing import Any

import click

from kafkatw.errors import ErrorCode, KafkaError

from ._common import bootstrap_option, client_security, command_config_option, describe_error, fail

__all__ = ["log_dirs", "format_log_dirs"]

_TIMEOUT_MS = 30000
#: error code -> the Java exception class Kafka's tool names, where C{java_exception}'s rule would not
_EXCEPTION_NAMES = {ErrorCode.kafka_storage_error: "KafkaStorageException"}


def format_log_dirs(by_broker: dict[int, list[Any]], topics: set[str]) -> str:
    """
    Kafka's JSON (C{LogDirsCommand.formatAsJson}) of DescribeLogDirs results.

    @param by_broker: broker id -> its C{DescribeLogDirsResult}s.
    @param topics: the topics to show (empty: every one).
    """
    brokers = []
    for broker, results in by_broker.items():
        dirs = []
        for result in results:
            error = None
            if int(result.error_code):
                from .delete_records import java_exception

                code = ErrorCode(int(result.error_code))
                error = "org.apache.kafka.common.errors." + (
                    _EXCEPTION_NAMES.get(code) or java_exception(code, False).split(":")[0])
            partitions = [{"partition": f"{t.name}-{p.partition_index}", "size": int(p.partition_size),
                           "offsetLag": int(p.offset_lag), "isFuture": bool(p.is_future_key)}
                          for t in result.topics if not topics or t.name in topics for p in t.partitions]
            dirs.append({"logDir": result.log_dir, "error": error, "partitions": partitions})
        brokers.append({"broker": broker, "logDirs": dirs})
    return json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":"))


def _int_list(text: str | None, flag: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated broker ids, got {text!r}", param_hint=flag) from None


@click.command("log-dirs", short_help="Describe the brokers' log directories (kafka-log-dirs.sh).")
@bootstrap_option
@command_config_option
@click.option("--describe", is_flag=True, help="Describe the specified log directories on the specified brokers.")
@click.option("--topic-list", default="", metavar="T1,T2",
              help="Comma-separated topics to show (default: every topic).")
@click.option("--broker-list", default="", metavar="0,1",
              help="Comma-separated brokers to query (default: every broker of the cluster).")
def log_dirs(bootstrap_server: str, describe: bool, topic_list: str, broker_list: str) -> None:
    """Describe the log directories of brokers (kafka-log-dirs.sh): partition sizes and lags, as JSON."""
    if not describe:
        raise click.UsageError("Command must include exactly one action: --describe")
    brokers = _int_list(broker_list, "--broker-list")
    topics = {t for t in topic_list.split(",") if t}
    from kafkatw.client.blocking import BlockingAdminClient

    admin = None
    try:
        admin = BlockingAdminClient(bootstrap_server, **client_security(), client_id="log-dirs-tool",
                                    request_timeout_ms=_TIMEOUT_MS, default_api_timeout_ms=_TIMEOUT_MS)
        live = sorted(admin.describe_cluster().nodes)
        if brokers is not None:
            missing = [b for b in brokers if b not in live]
            if missing:
                fail(f"ERROR: The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                     f"Current existent brokers: {','.join(map(str, live))}")
        wanted = live if brokers is None else brokers
        click.echo("Querying brokers for log directories information")
        found = admin.describe_log_dirs(wanted)
    except (KafkaError, OSError, ValueError) as e:
        fail(f"Error while describing log directories: {describe_error(e)}")
    finally:
        if admin is not None:
            admin.close()
    click.echo(f"Received log directory information from brokers {','.join(map(str, wanted))}")
    click.echo(format_log_dirs({b: found[b] for b in wanted}, topics))
