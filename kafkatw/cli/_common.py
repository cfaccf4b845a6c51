"""Helpers shared by the command modules: Kafka-style key=value flags, error exits."""

from __future__ import annotations

import sys
from typing import Any, Iterable, NoReturn

import click

__all__ = ["bootstrap_option", "command_config_option", "admin_config_option", "client_security", "parse_properties",
           "read_properties_file", "fail", "list_offsets"]

#: Kafka's internal topics (C{org.apache.kafka.common.internals.Topic.isInternal}): what C{--exclude-internal}
#: of kafka-topics.sh and a pattern subscription leave out
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

bootstrap_option = click.option(
    "--bootstrap-server", "bootstrap_server", required=True, metavar="HOST:PORT[,HOST:PORT]",
    help="The broker(s) to connect to.")


_SECURITY_META = "kafkatw.security"


def read_security_config(path: str | None) -> Any:
    """
    The L{kafkatw.client.security.SecurityConfig} of a C{--command-config}
    file (C{None}: plaintext).

    @raise click.BadParameter: the file cannot be read or its settings are invalid.
    """
    if path is None:
        return None
    from kafkatw.client.security import SecurityConfig
    from kafkatw.properties import parse_properties as parse_text

    try:
        with open(path, encoding="utf-8") as f:
            properties = parse_text(f.read())
    except OSError as e:
        raise click.BadParameter(f"cannot read {path}: {e.strerror}", param_hint="--command-config") from None
    try:
        return SecurityConfig.from_properties(properties)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--command-config") from None


def _read_command_config(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    if path is not None:
        try:
            ctx.meta[_SECURITY_META] = read_security_config(path)
        except click.BadParameter as e:
            e.param_hint = param.opts[0]  # --admin.config names the same file
            raise


#: Kafka's C{--command-config client.properties}: the client's security settings
#: (C{security.protocol}, C{ssl.truststore.location}, C{ssl.keystore.location},
#: C{ssl.key.password}, C{ssl.endpoint.identification.algorithm}, C{sasl.mechanism},
#: C{sasl.jaas.config}); a command passes L{client_security} to its clients.
command_config_option = click.option(
    "--command-config", metavar="FILE", expose_value=False, callback=_read_command_config,
    help="A client.properties file: security.protocol, ssl.truststore.location, ssl.keystore.location, "
         "ssl.key.password, sasl.mechanism, sasl.jaas.config (PEM files only).")


#: Kafka's C{--admin.config} (kafka-leader-election.sh's name of C{--command-config})
admin_config_option = click.option(
    "--admin.config", metavar="FILE", expose_value=False, callback=_read_command_config,
    help="The same file as --command-config (Kafka's name in this tool).")


def client_security() -> dict[str, Any]:
    """
    The keyword arguments that secure a command's clients as its
    C{--command-config} says (C{{"security": SecurityConfig}}), or C{{}}.
    """
    ctx = click.get_current_context(silent=True)
    security = ctx.meta.get(_SECURITY_META) if ctx is not None else None
    return {} if security is None else {"security": security}


def parse_properties(values: Iterable[str], flag: str) -> dict[str, str]:
    """Parse repeated C{key=value} flags; a malformed one is a usage error."""
    props = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=flag)
        props[key.strip()] = value
    return props


#: Client configs of config/client.properties that a tool does not use: ignored without a warning
#: (the producer's in a consumer, and the reverse), as one file serves every tool.
CLIENT_CONFIGS = frozenset({
    "bootstrap.servers", "client.id", "acks", "compression.type", "batch.size", "linger.ms", "retries",
    "delivery.timeout.ms", "request.timeout.ms", "enable.idempotence", "max.in.flight.requests.per.connection",
    "buffer.memory", "max.request.size", "max.block.ms", "retry.backoff.ms", "group.id", "auto.offset.reset",
    "fetch.max.wait.ms", "fetch.min.bytes", "max.poll.records", "session.timeout.ms", "heartbeat.interval.ms",
    "enable.auto.commit", "auto.commit.interval.ms", "max.partition.fetch.bytes",
})


def read_properties_file(path: str, flag: str, known: Iterable[str]) -> dict[str, str]:
    """
    The C{known} keys of a Java-style properties file (Kafka's
    C{--producer.config}, C{--consumer.config}).  Other client configs are
    ignored; a name no kafkatw tool knows gets Kafka's warning on stderr.

    @raise click.BadParameter: the file cannot be read.
    """
    from kafkatw.properties import parse_properties as parse_text

    try:
        with open(path, encoding="utf-8") as f:
            props = parse_text(f.read())
    except OSError as e:
        raise click.BadParameter(f"cannot read {path}: {e.strerror}", param_hint=flag) from None
    wanted = set(known)
    for name in props:
        if name not in wanted and name not in CLIENT_CONFIGS:
            click.echo(f"WARN The configuration '{name}' was supplied but isn't a known config.", err=True)
    return {k: v for k, v in props.items() if k in wanted}


def fail(message: str) -> NoReturn:
    """Print C{message} on stderr and exit 1, as Kafka's tools do."""
    click.echo(message, err=True)
    sys.exit(1)


def read_input_file(path: str, flag: str | None = None) -> str:
    """
    The text of a tool's input file (C{--offset-json-file},
    C{--path-to-json-file}, ...); a file that cannot be read exits 1 with one
    C{Error: cannot read ...} line (naming C{flag} when given).
    """
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        fail(f"Error: cannot read {path}{f' ({flag})' if flag else ''}: {e.strerror}")


def describe_error(e: BaseException) -> str:
    from kafkatw.errors import KafkaError

    if isinstance(e, KafkaError):
        return str(e) or e.error_code.name
    return f"{type(e).__name__}: {e}"


def list_offsets(admin: Any, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """
    The offsets for C{wanted} (partition -> ListOffsets timestamp), -1 where
    a partition has none or fails (asked alone after a failure of the lot).
    """
    from kafkatw.errors import KafkaError

    if not wanted:
        return {}
    try:
        return {tp: info.offset for tp, info in admin.list_offsets(wanted).items()}
    except KafkaError:
        if len(wanted) == 1:
            return {tp: -1 for tp in wanted}
    result = {}
    for tp, timestamp in sorted(wanted.items()):
        result.update(list_offsets(admin, {tp: timestamp}))
    return result
