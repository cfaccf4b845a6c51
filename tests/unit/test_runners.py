"""
pytest and trial run the same tests (README, Tests): C{scripts/count_tests.py}
over the whole suite, and that it catches a test only one runner finds.

The suite check collects every test twice (no test runs): about 15 s.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import tempfile
import textwrap
import types

from twisted.trial.unittest import SynchronousTestCase

ROOT = pathlib.Path(__file__).resolve().parents[2]


def count_tests() -> types.ModuleType:
    """C{scripts/count_tests.py} as a module."""
    spec = importlib.util.spec_from_file_location("count_tests", ROOT / "scripts" / "count_tests.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def restore_environment(name: str, value: str | None) -> None:
    """Set environment variable C{name} back to C{value} (None: unset)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


class RunnersTests(SynchronousTestCase):
    def test_the_suite(self) -> None:
        """Both runners find every test of C{tests}, and only those."""
        same, report = count_tests().compare(["tests"])
        self.assertTrue(same, report)

    def test_a_pytest_only_test_is_reported(self) -> None:
        """Module-level and parametrized test functions are pytest's only: the check says so, by name."""
        root = pathlib.Path(tempfile.mkdtemp(prefix="kafkatw-runners-"))
        self.addCleanup(shutil.rmtree, root, True)
        (root / "sample_suite").mkdir()
        (root / "sample_suite" / "__init__.py").write_text("")
        (root / "sample_suite" / "test_mixed.py").write_text(textwrap.dedent("""
            import pytest
            from twisted.trial.unittest import SynchronousTestCase

            class Shared(SynchronousTestCase):
                def test_a(self):
                    pass

            def test_function():
                pass

            @pytest.mark.parametrize("n", [1, 2])
            def test_param(n):
                pass
        """))
        # the real suite is found through the editable install; this one through PYTHONPATH
        self.addCleanup(restore_environment, "PYTHONPATH", os.environ.get("PYTHONPATH"))
        os.environ["PYTHONPATH"] = str(root)
        same, report = count_tests().compare(["sample_suite"], root)
        self.assertFalse(same)
        self.assertEqual(report.splitlines(), [
            "pytest collects 4 tests, trial 1 (sample_suite)",
            "3 only under pytest:",
            "  sample_suite.test_mixed.test_function",
            "  sample_suite.test_mixed.test_param[1]",
            "  sample_suite.test_mixed.test_param[2]",
        ])
