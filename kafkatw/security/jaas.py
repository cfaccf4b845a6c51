"""
Kafka's JAAS configuration strings, as Kafka users write them in properties files.

A JAAS entry names a login module, a control flag and options, and ends with
C{;}::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

Kafka reads it from C{sasl.jaas.config} (a client's or the broker's own client
side) and from C{listener.name.<listener>.<mechanism>.sasl.jaas.config} (a
broker listener's users, for PLAIN as C{user_<name>="<password>"}).

Source: Kafka documentation, "Authentication using SASL" (JAAS configuration);
KIP-85 (dynamic JAAS configuration for clients).
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["JaasConfig", "parse_jaas_config"]

_TOKEN = re.compile(r'\s*(?:(?P<key>[A-Za-z0-9_.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))|(?P<word>[A-Za-z0-9_.$\-]+)|(?P<end>;))')


class JaasConfig(NamedTuple):
    """
    One parsed JAAS entry.

    @ivar login_module: the module's class name
        (C{org.apache.kafka.common.security.plain.PlainLoginModule}).
    @ivar control_flag: C{required}, C{requisite}, C{sufficient} or C{optional}.
    @ivar options: option name to value, in the order written.
    """

    login_module: str
    control_flag: str
    options: dict[str, str]

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def users(self) -> dict[str, str]:
        """The C{user_<name>="<password>"} options of a PLAIN listener, by name."""
        return {k[len("user_"):]: v for k, v in self.options.items() if k.startswith("user_")}


def parse_jaas_config(text: str) -> JaasConfig:
    """
    Parse one JAAS entry.

    @raise ValueError: the text is not C{Module flag key="value" ... ;}.  The
        message never quotes the text (it holds passwords).
    """
    position = 0
    words: list[str] = []
    options: dict[str, str] = {}
    ended = False
    text = text.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or ended:
            raise ValueError(f"sasl.jaas.config: cannot parse at character {position}")
        position = match.end()
        if match.group("end"):
            ended = True
        elif match.group("key") is not None:
            if len(words) != 2:
                raise ValueError("sasl.jaas.config: expected a login module and a control flag before options")
            value = match.group("quoted")
            if value is None:
                value = match.group("bare")
            else:
                value = re.sub(r"\\(.)", r"\1", value)
            options[match.group("key")] = value
        else:
            if options or len(words) == 2:
                raise ValueError(f"sasl.jaas.config: unexpected word at character {match.start('word')}")
            words.append(match.group("word"))
        while position < len(text) and text[position].isspace():
            position += 1
    if len(words) != 2:
        raise ValueError("sasl.jaas.config: expected '<LoginModule> <flag> key=\"value\" ...;'")
    if words[1] not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError(f"sasl.jaas.config: unknown control flag {words[1]!r}")
    return JaasConfig(words[0], words[1], options)
