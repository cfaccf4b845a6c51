"""
What a C{kafkatw} tool call imports before it does anything (issue 30,
start-up time; bench/bench_cli_startup.py gives the seconds): the command
line and a tool's module import no client, protocol, kio or Twisted until
the tool runs; a tool process does not load hypothesis through kio; and the
summaries C{kafkatw --help} prints without importing the tools are the
tools' own.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
from twisted.trial import unittest

from kafkatw.cli.main import COMMANDS, main

#: What no command module may import at import time (the tools import them when they run).
HEAVY = ("kio", "twisted", "crochet", "hypothesis", "pytest", "trio", "kazoo", "pyspark", "rich")


def imported_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has imported after running C{code}."""
    script = (f"import sys, json\n{code}\n"
              f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} "
              f"or m.startswith(('kafkatw.client', 'kafkatw.protocol', 'kafkatw.errors')))))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


class StartupTests(unittest.TestCase):
    def test_command_line_imports_nothing_heavy(self) -> None:
        """kafkatw, kafkatw --help and the modules of topics, console-*, consumer-groups: no client, no kio."""
        self.assertEqual(imported_after(
            "from kafkatw.cli.main import main\n"
            "for name in ('topics', 'console-consumer', 'console-producer', 'consumer-groups'):\n"
            "    main.get_command(None, name)\n"
            "from click.testing import CliRunner\n"
            "assert CliRunner().invoke(main, ['--help']).exit_code == 0\n"
            "assert CliRunner().invoke(main, ['topics', '--help']).exit_code == 0\n"), [])

    def test_tool_process_skips_hypothesis(self) -> None:
        """
        A tool process (main called as the console script calls it) imports
        kio without hypothesis, which kio would otherwise import (with pytest
        and trio) whenever it is installed.
        """
        found = imported_after(
            "from kafkatw.cli.main import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "import kio.schema.errors, kio.static.primitive\n"
            "assert sys.modules['hypothesis'] is None\n")
        self.assertIn("kio.schema.errors", found)
        self.assertEqual([m for m in found if m.startswith(("hypothesis", "pytest", "trio"))], ["hypothesis"])

    def test_summaries_are_the_commands_own(self) -> None:
        """COMMANDS' summaries (kafkatw --help) equal the short_help of the commands they name."""
        ctx = click.Context(main)
        self.assertEqual(set(main.list_commands(ctx)), {*COMMANDS, "broker"})
        for name, (_, _, summary) in COMMANDS.items():
            command = main.get_command(ctx, name)
            self.assertEqual(command.name, name)
            self.assertEqual(command.short_help, summary, name)
