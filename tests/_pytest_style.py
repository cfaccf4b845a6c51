"""
Run plain test functions (written with pytest's fixture names) as trial test
methods, so that `trial tests` and pytest run the same tests.

Supported fixture names: C{tmp_path} (a fresh directory, removed afterwards),
C{monkeypatch} (C{setattr("module.name", value, raising=False)} or
C{setattr(obj, "name", value)}, undone afterwards), and any name given in
C{factories} (called once per test).
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import shutil
import tempfile
from typing import Any, Callable


class _MonkeyPatch:
    def __init__(self, case: Any) -> None:
        self._case = case

    def setattr(self, target: Any, name: Any, value: Any = None, raising: bool = True) -> None:
        if isinstance(target, str):
            module_name, _, attribute = target.rpartition(".")
            target, name, value = importlib.import_module(module_name), attribute, name
        if not raising and not hasattr(target, name):
            setattr(target, name, value)
            self._case.addCleanup(delattr, target, name)
            return
        self._case.patch(target, name, value)


def add_checks(case: type, checks: dict[str, Callable[..., Any]],
               factories: dict[str, Callable[[], Any]] | None = None) -> None:
    """Add a C{test_<name>} method to C{case} for every C{check_<name>} function in C{checks}."""
    factories = factories or {}
    for name, check in checks.items():
        if not name.startswith("check_") or not callable(check):
            continue
        parameters = list(inspect.signature(check).parameters)

        def test(self: Any, check: Callable[..., Any] = check, parameters: list[str] = parameters) -> None:
            kwargs: dict[str, Any] = {}
            for parameter in parameters:
                if parameter == "tmp_path":
                    directory = tempfile.mkdtemp(prefix="kafkatw-test-")
                    self.addCleanup(shutil.rmtree, directory, True)
                    kwargs[parameter] = pathlib.Path(directory)
                elif parameter == "monkeypatch":
                    kwargs[parameter] = _MonkeyPatch(self)
                else:
                    kwargs[parameter] = factories[parameter]()
            check(**kwargs)

        test.__name__ = "test_" + name[len("check_"):]
        test.__doc__ = check.__doc__
        setattr(case, test.__name__, test)
