"""
The first hour with the docs and examples: every page whose shell examples call
bare C{kafkatw} or C{python} says that C{.venv/bin} must be on C{PATH}, and
the exactly-once example's commands make every file they read (no
C{access.log} that only the author had).
"""

from __future__ import annotations

import io
import os
import re
import sys
from contextlib import redirect_stdout

from twisted.trial import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BARE = re.compile(r"^(\$ )?(kafkatw|python) ", re.M)


def fenced(text: str) -> str:
    """The contents of the Markdown page's fenced code blocks."""
    return "\n".join(re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S))


def first_bare_command(text: str) -> int:
    """The offset in C{text} of its first fenced bare command (-1: none)."""
    inside, offset = False, 0
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            inside = not inside
        elif inside and BARE.match(line):
            return offset
        offset += len(line)
    return -1


def pages() -> list[str]:
    found = [os.path.join("docs", name) for name in sorted(os.listdir(os.path.join(ROOT, "docs")))
             if name.endswith(".md")]
    for name in sorted(os.listdir(os.path.join(ROOT, "examples"))):
        if os.path.exists(os.path.join(ROOT, "examples", name, "README.md")):
            found.append(os.path.join("examples", name, "README.md"))
    return found


class ExamplesDocsTests(unittest.TestCase):
    def read(self, path: str) -> str:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            return f.read()

    def test_pages_with_bare_commands_say_where_they_come_from(self) -> None:
        bare = [page for page in pages() if first_bare_command(self.read(page)) >= 0]
        self.assertIn(os.path.join("examples", "exactly_once", "README.md"), bare)
        for page in bare:
            text = self.read(page)
            self.assertIn("export PATH=$PWD/.venv/bin:$PATH", text, page)
            # said before the first such command
            self.assertLess(text.index(".venv/bin"), first_bare_command(text), page)

    def test_exactly_once_commands_make_the_files_they_read(self) -> None:
        page = os.path.join("examples", "exactly_once", "README.md")
        commands = [re.sub(r"^\$ ", "", line) for line in fenced(self.read(page)).splitlines()
                    if BARE.match(line)]
        made: set[str] = set()
        for command in commands:
            words = command.split()
            if words[0] == "python":
                self.assertTrue(os.path.exists(os.path.join(ROOT, words[1])), command)
            if ">" in words:
                made.add(words[words.index(">") + 1])
            if words[:2] == ["kafkatw", "ship"]:
                read = [w for w in words[2:] if not w.startswith("-") and words[words.index(w) - 1] not in (
                    "--bootstrap-server", "--topic")]
                self.assertTrue(read, command)
                for path in read:
                    self.assertIn(path, made, f"{command}: nothing in the README writes {path}")

    def test_the_access_log_is_what_the_readme_shows(self) -> None:
        """3000 requests of 5 clients, each line one the service counts, the same every time."""
        example = os.path.join(ROOT, "examples", "exactly_once")
        sys.path.insert(0, example)
        self.addCleanup(sys.path.remove, example)
        import access_log
        from service import count_clients

        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(access_log.main(["--lines", "3000"]), 0)
        lines = out.getvalue().splitlines()
        counts = count_clients([line.encode() for line in lines])
        self.assertEqual((len(lines), len(counts), sum(counts.values())), (3000, 5, 3000))
        self.assertEqual(access_log.access_lines(3000, 5, 1), lines)
