"""
The layers of docs/design.md ("Components and dependencies"), kept by a test.

Every import in every module of L{kafkatw} is read from its syntax tree: at
module level and inside functions and classes, absolute and relative (C{from
. import x} resolved against the importing module's package), C{if
TYPE_CHECKING:} ones too.  Each must go from a component to one that
L{ALLOWED} lists for it, the table of design.md from top to bottom; and no
two modules may import each other, directly or through others, counting the
function-local imports (a circle held open only by a deferred import is
still a circle).  Two rules of the table's prose are checked as well:
C{storage/} uses no reactor (of Twisted it imports C{twisted.logger} only)
and C{zookeeper/bridge.py} is the only library module that imports kazoo.

A failure lists each offending import as C{importer -> imported (line N)},
or each circle as its modules.
"""

from __future__ import annotations

import ast
import pathlib

from twisted.trial.unittest import SynchronousTestCase

import kafkatw

ROOT = pathlib.Path(kafkatw.__file__).parent

#: component -> the components it may import besides itself: docs/design.md's
#: table, in its order (each row imports only rows above it).  C{kafkatw} is
#: the package itself (C{__version__}), which any module may import.
ALLOWED: dict[str, set[str]] = {
    "kafkatw": set(),
    "errors": set(),
    "properties": set(),
    "security": {"errors"},
    "config": {"errors", "security"},
    "protocol": {"errors"},
    "storage": {"errors", "properties", "protocol"},
    "zookeeper": {"errors", "security"},
    "client": {"errors", "protocol", "security", "zookeeper"},
    "broker": {"client", "config", "errors", "properties", "protocol", "security", "storage", "zookeeper"},
    "web": {"broker", "client", "errors", "protocol", "security", "zookeeper"},
    "tap": {"broker", "client", "config", "properties", "security", "web"},
    "spark": {"client", "errors", "protocol"},
    "shipper": {"client", "errors", "protocol"},
    "cli": {"client", "errors", "properties", "protocol", "security", "zookeeper"},
    "testing": {"broker", "client", "config", "errors", "storage", "zookeeper"},
    "testing_netns": {"protocol", "testing", "zookeeper"},
    "simulation": {"broker", "client", "config", "storage", "testing", "zookeeper"},
}
#: module -> the components it may import besides those of its own component.
ALSO_ALLOWED: dict[str, set[str]] = {"kafkatw.cli.ship": {"shipper"}}
#: component -> library -> the only modules of it the component may import:
#: storage/ uses no reactor.
LIBRARY_LIMITS: dict[str, dict[str, tuple[str, ...]]] = {"storage": {"twisted": ("twisted.logger",)}}
#: library -> the only modules that may import it: kazoo is bridged in one
#: module (testing_netns.py, a test harness, reads ZooKeeper with kazoo's
#: blocking client from outside any reactor).
LIBRARY_OWNERS: dict[str, set[str]] = {"kazoo": {"kafkatw.zookeeper.bridge", "kafkatw.testing_netns"}}


def _modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Every module of the package at C{root}: dotted name -> source file."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = ["kafkatw", *path.relative_to(root).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(modules: dict[str, pathlib.Path]) -> list[tuple[str, str, int]]:
    """Every import of every module: (importer, imported module or package, line)."""
    out = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.Import):
                out += [(name, alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                for alias in node.names:  # `from p import m` imports the module p.m when there is one
                    sub = f"{base}.{alias.name}"
                    out.append((name, sub if sub in modules else base, node.lineno))
    return sorted(out)


def component(module: str) -> str:
    parts = module.split(".")
    return "kafkatw" if len(parts) == 1 or parts[1] == "_version" else parts[1]


def violations(modules: dict[str, pathlib.Path]) -> list[str]:
    """Each import against the table, as C{importer -> imported (line N)}."""
    out = []
    for importer, imported, line in imports(modules):
        source, top = component(importer), imported.split(".")[0]
        if top == "kafkatw":
            target = component(imported)
            bad = target not in {source, "kafkatw"} | ALLOWED[source] | ALSO_ALLOWED.get(importer, set())
        elif top in LIBRARY_OWNERS:
            bad = importer not in LIBRARY_OWNERS[top]
        else:
            limit = LIBRARY_LIMITS.get(source, {}).get(top)
            bad = limit is not None and not imported.startswith(limit)
        line_text = f"{importer} -> {imported} (line {line})"
        if bad and line_text not in out:  # `from twisted.internet import defer, threads`: once
            out.append(line_text)
    return out


def cycles(modules: dict[str, pathlib.Path]) -> list[list[str]]:
    """The import circles among the modules (strongly connected components of more than one), each sorted."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for importer, imported, _line in imports(modules):
        if imported in modules and imported != importer:
            graph[importer].add(imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while not members or members[-1] != v:
                members.append(stack.pop())
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


class LayerTests(SynchronousTestCase):
    def test_every_component_is_in_the_table(self) -> None:
        """Each module belongs to a component of the table (a new package needs its row)."""
        self.assertEqual(sorted({component(m) for m in _modules()} - set(ALLOWED)), [])

    def test_the_table_points_down(self) -> None:
        """Each row allows only rows above it, so the components cannot import each other in a circle."""
        order = list(ALLOWED)
        for name, allowed in ALLOWED.items():
            self.assertEqual([a for a in allowed if order.index(a) >= order.index(name)], [], name)
        for module, allowed in ALSO_ALLOWED.items():
            self.assertEqual([a for a in allowed if order.index(a) > order.index(component(module))], [], module)

    def test_imports_follow_the_table(self) -> None:
        """No import goes against docs/design.md's direction, function-local ones included."""
        found = violations(_modules())
        self.assertEqual(found, [], "imports against docs/design.md:\n" + "\n".join(found))

    def test_no_import_cycles(self) -> None:
        """No module imports itself through others, function-local imports included."""
        found = cycles(_modules())
        self.assertEqual(found, [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found))


class CheckerTests(SynchronousTestCase):
    """The checker itself, on a package made for it."""

    def setUp(self) -> None:
        base = pathlib.Path(self.mktemp())
        files = {
            "kafkatw/__init__.py": "",
            "kafkatw/storage/__init__.py": "",
            "kafkatw/storage/log.py": "from ..broker import markers\nfrom twisted.internet import task\n",
            "kafkatw/broker/__init__.py": "",
            "kafkatw/broker/markers.py": "from . import server\n",
            "kafkatw/broker/server.py": "def start():\n    from kafkatw.broker.markers import x\n"
                                        "    from kafkatw import web\n",
            "kafkatw/web.py": "import kazoo.client\n",
        }
        for name, text in files.items():
            (base / name).parent.mkdir(parents=True, exist_ok=True)
            (base / name).write_text(text)
        self.modules = _modules(base / "kafkatw")

    def test_violations(self) -> None:
        """Relative and function-local imports are resolved and checked; so are the guarded libraries."""
        self.assertEqual(violations(self.modules), [
            "kafkatw.broker.server -> kafkatw.web (line 3)",
            "kafkatw.storage.log -> kafkatw.broker.markers (line 1)",
            "kafkatw.storage.log -> twisted.internet (line 2)",
            "kafkatw.web -> kazoo.client (line 1)",
        ])

    def test_cycles(self) -> None:
        """A circle closed by a function-local import is found."""
        self.assertEqual(cycles(self.modules), [["kafkatw.broker.markers", "kafkatw.broker.server"]])
