"""
Java C{.properties} text, as Kafka reads C{server.properties}, C{meta.properties}
and the tools' C{--command-config} files.

Below L{kafkatw.config} and L{kafkatw.storage} (docs/design.md, "Components and
dependencies"): it imports nothing from kafkatw.
"""

from __future__ import annotations

__all__ = ["parse_properties"]


def parse_properties(text: str) -> dict[str, str]:
    """
    Parse a Java-style ``.properties`` text (``key=value`` or ``key: value``
    lines, ``#``/``!`` comments, trailing-backslash continuations).

    @return: key -> raw string value.
    """
    result: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        for sep_index, char in enumerate(line):
            if char in "=:":
                key, value = line[:sep_index].strip(), line[sep_index + 1:].strip()
                break
        else:
            key, value = line, ""
        result[key] = value
    return result
