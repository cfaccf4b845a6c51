"""
Check that pytest and trial find the same tests (README, Tests: every test is a
trial test case, so C{.venv/bin/trial tests} runs the suite pytest runs).

    .venv/bin/python scripts/count_tests.py [tests | tests/unit ...]

Collects without running: C{pytest --collect-only -q} and C{trial --dry-run
--reporter=bwverbose}, from the repository's root as a user runs them, and
compares the test ids (C{tests/unit/test_x.py::Class::test_y} is trial's
C{tests.unit.test_x.Class.test_y}).  Prints both counts; exits 1, listing the
tests only one runner finds, when they differ (a module-level C{def test_*}, a
parametrized test or a pytest fixture is pytest's only; a module that does not
import is an error under either).  tests/unit/test_runners.py runs it over the
whole suite, so CI (C{scripts/test.sh}) fails when the runners differ.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Suites pytest runs and trial cannot: confluent-kafka-python's own tests, kept unmodified (pytest
#: functions and fixtures; tests/interop/confluent_kafka_suite/README.md).  Their ids are left out of
#: the comparison (trial does not enter the directory: it is not a package).
PYTEST_ONLY = ("tests.interop.confluent_kafka_suite.",)

#: a bwverbose line: "<test id> ... [OK]"
_TRIAL_LINE = re.compile(r"^(\S+) \.\.\. \[(\w+)\]$")


def pytest_ids(paths: list[str], root: pathlib.Path = ROOT) -> set[str]:
    """
    The tests pytest collects under C{paths} (relative to C{root}, where it runs), as dotted ids.

    @raise RuntimeError: pytest could not collect (an import error, say).
    """
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             *paths], cwd=root, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"pytest --collect-only failed ({result.returncode}):\n{result.stdout[-3000:]}")
    ids = set()
    for line in result.stdout.splitlines():
        if "::" in line:
            path, *names = line.strip().split("::")
            ids.add(".".join([path.removesuffix(".py").replace("/", "."), *names]))
    return ids


def trial_ids(paths: list[str], root: pathlib.Path = ROOT) -> set[str]:
    """
    The tests C{trial} (run in C{root}) loads from C{paths} (as names:
    C{tests/unit} is C{tests.unit}); a module it cannot import counts as one
    test, its name.

    @raise RuntimeError: trial found nothing.
    """
    trial = pathlib.Path(sys.executable).parent / "trial"
    command = [str(trial)] if trial.exists() else [sys.executable, "-m", "twisted.trial"]
    names = [p.rstrip("/").removesuffix(".py").replace("/", ".") for p in paths]
    with tempfile.TemporaryDirectory(prefix="kafkatw-count-") as temp:
        result = subprocess.run([*command, "--dry-run", "--reporter=bwverbose", f"--temp-directory={temp}/_trial_temp",
                                 *names], cwd=root, capture_output=True, text=True, timeout=600)
    ids = set()
    for line in result.stdout.splitlines():
        match = _TRIAL_LINE.match(line.strip())
        if match:
            ids.add(match.group(1))
    if not ids:
        raise RuntimeError(f"trial found no tests ({result.returncode}):\n{result.stdout[-3000:]}"
                           f"{result.stderr[-3000:]}")
    return ids


def compare(paths: list[str], root: pathlib.Path = ROOT) -> tuple[bool, str]:
    """Whether both runners find the same tests under C{paths}, and the report."""
    by_pytest, by_trial = pytest_ids(paths, root), trial_ids(paths, root)
    pytest_only = {test for test in by_pytest if test.startswith(PYTEST_ONLY)}
    by_pytest -= pytest_only
    lines = [f"pytest collects {len(by_pytest)} tests, trial {len(by_trial)} ({' '.join(paths)})"]
    if pytest_only:
        lines.append(f"{len(pytest_only)} more under pytest only, by design: {', '.join(PYTEST_ONLY)}")
    for runner, only in (("pytest", by_pytest - by_trial), ("trial", by_trial - by_pytest)):
        if only:
            lines.append(f"{len(only)} only under {runner}:")
            lines += [f"  {test}" for test in sorted(only)[:50]]
            if len(only) > 50:
                lines.append(f"  ... and {len(only) - 50} more")
    return by_pytest == by_trial, "\n".join(lines)


def main(argv: list[str]) -> int:
    os.environ.setdefault("KAFKATW_REQUIRE_SPEEDUPS", "0")  # collecting runs no codec test
    same, report = compare(argv or ["tests"])
    print(report)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
