"""
setup.cfg lists its packages by hand: a package missing from the list is
left out of a built wheel (an editable install, as the tests use, would
not notice).  Every directory of C{kafkatw} with an C{__init__.py} must be
listed.
"""

from __future__ import annotations

import configparser
import os

from twisted.trial import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class PackagesTests(unittest.TestCase):
    def test_every_package_is_in_setup_cfg(self) -> None:
        parser = configparser.ConfigParser()
        parser.read(os.path.join(ROOT, "setup.cfg"))
        listed = set(parser["options"]["packages"].split())
        found = set()
        for directory, _, files in os.walk(os.path.join(ROOT, "kafkatw")):
            if "__init__.py" in files and "__pycache__" not in directory:
                found.add(os.path.relpath(directory, ROOT).replace(os.sep, "."))
        self.assertEqual(sorted(found - listed), [], "packages missing from setup.cfg's options.packages")
