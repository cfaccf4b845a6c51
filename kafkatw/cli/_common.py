"""Helpers shared by the command modules: Kafka-style key=value flags, error exits."""

from __future__ import annotations

import sys
from typing import Iterable, NoReturn

import click

from kafkatw.errors import KafkaError

__all__ = ["bootstrap_option", "parse_properties", "fail"]

bootstrap_option = click.option(
    "--bootstrap-server", "bootstrap_server", required=True, metavar="HOST:PORT[,HOST:PORT]",
    help="The broker(s) to connect to.")


def parse_properties(values: Iterable[str], flag: str) -> dict[str, str]:
    """Parse repeated C{key=value} flags; a malformed one is a usage error."""
    props = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=flag)
        props[key.strip()] = value
    return props


def fail(message: str) -> NoReturn:
    """Print C{message} on stderr and exit 1, as Kafka's tools do."""
    click.echo(message, err=True)
    sys.exit(1)


def describe_error(e: BaseException) -> str:
    if isinstance(e, KafkaError):
        return str(e) or e.error_code.name
    return f"{type(e).__name__}: {e}"
