"""
docs/configuration.md against the code: its key tables are generated from
L{kafkatw.config.BROKER_CONFIG} and L{kafkatw.config.TOPIC_CONFIG}
(C{python -m kafkatw.config --update docs/configuration.md}), so that no key
goes undocumented, none is listed twice, and no default or unit drifts.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout

from twisted.trial import unittest

from kafkatw.config import BROKER_CONFIG, TOPIC_CONFIG, config_markdown, splice_config_markdown
from kafkatw.config.docs import MARKDOWN_BEGIN, MARKDOWN_END, main

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "configuration.md")


def _read_doc() -> str:
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def _row_keys(markdown: str) -> list[str]:
    """The first cell of every table row that names a key, in order."""
    return re.findall(r"^\| `([a-z0-9.]+)` \|", markdown, flags=re.MULTILINE)


class ConfigDocsTests(unittest.TestCase):
    def test_every_key_has_documentation(self) -> None:
        for key in BROKER_CONFIG.values():
            self.assertTrue(key.doc.strip(), key.name)
            self.assertNotIn("](", key.doc, f"{key.name}: no links (the doc is DescribeConfigs' documentation too)")
            if key.name.endswith(".ms"):
                self.assertEqual(key.unit, "ms", key.name)
            if key.name.endswith(".bytes"):
                self.assertEqual(key.unit, "bytes", key.name)

    def test_generated_tables_are_up_to_date(self) -> None:
        document = _read_doc()
        self.assertEqual(document.count(MARKDOWN_BEGIN), 1)
        self.assertEqual(document.count(MARKDOWN_END), 1)
        self.assertEqual(splice_config_markdown(document), document,
                         "run: python -m kafkatw.config --update docs/configuration.md")

    def test_every_key_is_documented_once(self) -> None:
        document = _read_doc()
        begin, end = document.index(MARKDOWN_BEGIN), document.index(MARKDOWN_END)
        generated = _row_keys(document[begin:end])
        self.assertEqual(generated, list(BROKER_CONFIG) + list(TOPIC_CONFIG))
        elsewhere = set(_row_keys(document[:begin] + document[end:]))
        self.assertEqual(elsewhere & set(generated), set(), "a key has a second row outside the generated tables")

    def test_markdown_rows(self) -> None:
        markdown = config_markdown()
        self.assertIn("| `log.retention.ms` | `604800000` | ms | Age after which whole segments are deleted "
                      "(-1: never). |", markdown)
        self.assertIn("| `advertised.listeners` | (empty) | — |", markdown)
        self.assertIn("| `auto.create.topics.enable` | `true` | — |", markdown)
        self.assertIn("| `retention.ms` | LONG | `log.retention.ms` | `604800000` | — |", markdown)
        self.assertIn("| `remote.storage.enable` | BOOLEAN | — | `false` | Tiered storage", markdown)
        self.assertEqual(_row_keys(markdown), list(BROKER_CONFIG) + list(TOPIC_CONFIG))

    def test_splice_replaces_only_between_the_markers(self) -> None:
        document = f"# title\n\n{MARKDOWN_BEGIN}\nstale\n{MARKDOWN_END}\n\ntail\n"
        spliced = splice_config_markdown(document)
        self.assertTrue(spliced.startswith(f"# title\n\n{MARKDOWN_BEGIN}\n### Broker keys"))
        self.assertTrue(spliced.endswith(f"\n\n{MARKDOWN_END}\n\ntail\n"))
        self.assertNotIn("stale", spliced)
        self.assertEqual(splice_config_markdown(spliced), spliced)
        with self.assertRaises(ValueError):
            splice_config_markdown("no markers")

    def test_command_line(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        path = os.path.join(directory, "configuration.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"{MARKDOWN_BEGIN}\n{MARKDOWN_END}\n")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            self.assertEqual(main(["--check", path]), 1)
            self.assertEqual(main(["--update", path]), 0)
            self.assertEqual(main(["--check", path]), 0)
            self.assertEqual(main(["--markdown"]), 0)
            self.assertEqual(main([]), 2)
        self.assertEqual(out.getvalue(), config_markdown())
        self.assertIn("out of date; run python -m kafkatw.config --update", err.getvalue())

    def test_python_m_kafkatw_config(self) -> None:
        """C{python -m kafkatw.config} is the command of L{main} (C{kafkatw/config/__main__.py})."""
        root = os.path.join(os.path.dirname(__file__), "..", "..")
        checked = subprocess.run([sys.executable, "-m", "kafkatw.config", "--check", DOC], cwd=root,
                                 capture_output=True, text=True, timeout=120)
        self.assertEqual((checked.returncode, checked.stderr), (0, ""))
        usage = subprocess.run([sys.executable, "-m", "kafkatw.config"], cwd=root, capture_output=True, text=True,
                               timeout=120)
        self.assertEqual(usage.returncode, 2)
        self.assertIn("usage: python -m kafkatw.config", usage.stderr)


class DocsDriftTests(unittest.TestCase):
    """
    The prose of the docs against the code: no page says an API the broker
    serves is not served, and docs/design.md has no "not built yet" section
    for a part that exists.
    """

    def read(self, name: str) -> str:
        with open(os.path.join(os.path.dirname(DOC), name), encoding="utf-8") as f:
            return f.read()

    def test_no_served_api_is_called_unserved(self) -> None:
        from kafkatw.broker.apis import SUPPORTED_VERSIONS

        # protocol.md's table of served APIs: | key | Name | versions | ...
        served = {name for key, name in re.findall(r"^\| (\d+) \| (\w+) \|", self.read("protocol.md"), re.M)
                  if int(key) in SUPPORTED_VERSIONS}
        self.assertIn("AlterConfigs", served)
        for page in sorted(os.listdir(os.path.dirname(DOC))):
            if not page.endswith(".md"):
                continue
            text = " ".join(self.read(page).split())
            for name in served:
                self.assertNotRegex(text, rf"\b{name} (is|are) not (yet )?served", f"docs/{page}: {name}")

    def test_every_served_api_has_its_row(self) -> None:
        """protocol.md's table names every API key the broker serves, with exactly its versions."""
        from kafkatw.broker.apis import SUPPORTED_VERSIONS

        rows: dict[int, str] = {}
        for key, versions in re.findall(r"^\| (\d+) \| \w+ \| ([^|]+) \|", self.read("protocol.md"), re.M):
            rows.setdefault(int(key), versions.strip())  # the first table: the APIs served
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items()):
            want = str(low) if low == high else f"{low}\u2013{high}"
            self.assertIn(key, rows, f"API key {key} is served but has no row in docs/protocol.md")
            self.assertEqual(rows[key].split(" ")[0], want, f"API key {key}'s versions in docs/protocol.md")

    def test_design_has_no_plans_for_what_exists(self) -> None:
        text = " ".join(self.read("design.md").split())
        for stale in ("Not built yet", "does not yet elect", "Planned: security", "brokers do not read it back"):
            self.assertNotIn(stale, text)
