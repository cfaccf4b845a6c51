r"""
The docs' examples, run: every fenced C{sh}, C{bash}, C{console} and
C{python} block of README.md and docs/*.md runs against real ZooKeeper and
brokers on free 127.0.0.1 ports; each must exit 0, and the output a page
shows is compared with what the example prints.

The conventions for a page's author (README.md, "Tests", points here):

  - C{```sh}/C{```bash}: a script, run with C{bash -e}; C{```python}: a
    program; C{```console}: C{$ } commands (continued by C{\} or C{> }
    lines), each followed by what it prints (stdout and stderr together).
    A command must exit 0 unless the next one is C{echo $?}, which shows
    its status.
  - Markers, each an HTML comment on a line of its own just before the block
    (several may stack):
      - C{<!-- not-run: REASON -->}: not run (root's network namespaces, the
        whole suite, a benchmark, a synopsis, a server of another test);
      - C{<!-- output-varies: REASON -->}: run, its output not compared
        (replicas placed from a random broker, as Kafka's AdminUtils does);
      - C{<!-- output -->}: this untagged block is what the C{sh} or
        C{python} block before it prints;
      - C{<!-- file: NAME -->}: this block is the file C{NAME} (a
        C{server.properties}, a JSON plan), written into the working
        directory when its section starts;
      - C{<!-- cd: NAME -->}: a section with a setup of its own starts here,
        in the new directory C{NAME}: what earlier blocks left running is
        stopped, the files they made are copied;
      - C{<!-- background: HOST:PORT -->}: a server the reader runs in a
        terminal of its own: started, and waited for until C{HOST:PORT}
        accepts connections.
  - Shown output is compared line by line, in order (a line found only
    earlier counts too: stdout and stderr interleave as they will): runs of
    blanks match any blanks, C{…} matches anything, a line C{...} or C{…}
    alone stands for lines left out, and what differs on every run (topic
    ids, timestamps, ZooKeeper session ids, floats, C{CreateTime}s, C{crc}s,
    log sizes, UUIDs) matches any value of its shape.
  - A page's ports (C{127.0.0.1:9092}, C{--port 2181}, C{tcp:9093},
    C{$((9092+i))}, C{embedded:12181}) move by one offset to free ones, as a
    user points the examples at their own broker; files under
    C{/etc/kafkatw/} are the working directory's and C{/var/lib/kafkatw} is
    C{data}.  A page in L{BROKER_PAGES} gets ZooKeeper and the README's broker
    (C{config/server.properties}) where it expects them (C{127.0.0.1:2181},
    C{127.0.0.1:9092}) before its first block.

A page's blocks run in order in one working directory (the repository's
C{config}, C{examples}, C{bench}, C{scripts} and C{.venv} linked into it),
each in a process group of its own with a time limit (L{BLOCK_TIMEOUT_S});
what they leave running in the background is stopped at the end.
C{KAFKATW_DOCS_FROM=LINE} runs only the sections from the first C{cd} marker
at or after LINE (to work on one section).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ZooKeeperFixture

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHELL = ("sh", "bash", "console")
BLOCK_TIMEOUT_S = 120.0
#: pages whose examples assume a running broker (on the doc's 127.0.0.1:9092, ZooKeeper on :2181)
BROKER_PAGES = {"README.md", "docs/log-shipping.md", "docs/clients.md", "docs/consumer-groups.md",
                "docs/transactions.md", "docs/spark.md"}
LINKED = ("config", "examples", "bench", "scripts", ".venv")
MARKER = re.compile(r"^<!-- (not-run|output-varies|file|cd|background): (.+?) -->$")
OUTPUT = "<!-- output -->"
#: a line of a fenced block that is a command a reader types
COMMAND = re.compile(r"^(\$ |kafkatw |twistd |\.venv/bin/|\./scripts/|python |kcat |curl |openssl |pip )")
PORT = re.compile(r"(?:(?<=127\.0\.0\.1:)|(?<=localhost:)|(?<=0\.0\.0\.0:)|(?<=--port )|(?<=tcp:)|(?<=embedded:)"
                  r"|(?<=\$\(\()|(?<=_PORT=)|(?<=-port ))(\d{4,5})(?!\d)")


@dataclass
class Example:
    page: str
    line: int
    lang: str
    text: str
    not_run: str | None = None
    output_varies: str | None = None
    file: str | None = None
    cd: str | None = None
    background: str | None = None
    output: bool = False

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def examples(page: str) -> list[Example]:
    """Every fenced block of C{page} (a path relative to the repository), with its marker."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        lines = f.read().splitlines()
    found, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        j = i + 1
        while not lines[j].startswith("```"):
            j += 1
        example = Example(page, i + 1, lines[i][3:].strip(), "\n".join(lines[i + 1:j]) + "\n")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        while k >= 0 and (MARKER.match(lines[k].strip()) or lines[k].strip() == OUTPUT):
            marker = MARKER.match(lines[k].strip())
            if marker:
                setattr(example, marker.group(1).replace("-", "_"), marker.group(2))
            else:
                example.output = True
            k -= 1
        found.append(example)
        i = j + 1
    return found


def pages() -> list[str]:
    return ["README.md"] + [f"docs/{name}" for name in sorted(os.listdir(os.path.join(ROOT, "docs")))
                            if name.endswith(".md")]


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


def console_steps(text: str) -> list[Step]:
    """The C{$ } commands of a console block and the output shown after each."""
    steps: list[Step] = []
    continued = False
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append(Step(line[2:]))
            continued = line.endswith("\\")
        elif steps and (continued or line.startswith("> ")):
            steps[-1].command += "\n" + (line[2:] if line.startswith("> ") else line)
            continued = line.endswith("\\")
        elif steps:
            steps[-1].expected.append(line)
    return steps


VOLATILE = [
    (r"TopicId: \S+", r"TopicId: \S+"),
    (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", r"\S+"),
    (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r"\S+"),
    (r"0x[0-9a-f]+", r"0x[0-9a-f]+"),
    (r"\d+\.\d+(?:e[+-]\d+)?", r"[0-9.e+-]+"),
    (r"(?<=CreateTime: )\d+", r"\d+"),
    (r"(?<=timestamp: )\d+", r"\d+"),
    (r"(?<=crc: )\d+", r"\d+"),
    (r"(?<=\"size\":)\d+", r"\d+"),
    (r"(?<=cluster )[\w-]{22}", r"[\w-]{22}"),
    (r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", r"[0-9a-f-]{36}"),
]


def line_pattern(shown: str) -> re.Pattern:
    """A shown output line as a pattern: blanks, C{…} and the volatile values matching loosely."""
    loose = VOLATILE + [("…", ".*"), (r"\s+", r"\s+")]
    tokens = re.compile("|".join(f"({v})" for v, _ in loose))
    out, at, text = [], 0, shown.strip()
    for match in tokens.finditer(text):
        out.append(re.escape(text[at:match.start()]))
        out.append(loose[match.lastindex - 1][1])
        at = match.end()
    out.append(re.escape(text[at:]))
    return re.compile("".join(out))


def missing_lines(shown: list[str], printed: str) -> list[str]:
    """
    The shown lines not found among the printed ones (empty: the output
    matches): in order, except that a line found only earlier counts too
    (stdout and stderr, buffered differently, interleave as they will).
    """
    actual = [line.strip() for line in printed.splitlines()]
    at, missing = 0, []
    for line in shown:
        if line.strip() in ("", "...", "…"):  # a line of its own that elides output
            continue
        pattern = line_pattern(line)
        for k in range(at, len(actual)):
            if pattern.fullmatch(actual[k]):
                at = k + 1
                break
        else:
            if not any(pattern.fullmatch(printed_line) for printed_line in actual[:at]):
                missing.append(line)
    return missing


def free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_offset(ports: set[int]) -> int:
    """An offset that moves every port (and the next three, for C{$((9092+i))}) to a free one."""
    for _ in range(200):
        offset = random.randrange(10000, 65535 - max(ports | {0}) - 4, 10) if ports else 0
        if all(free(p + offset + d) for p in ports for d in range(4)):
            return offset
    raise RuntimeError(f"no free ports for {sorted(ports)}")


class PageRun:
    """One page's working directory, ports and the processes its blocks started."""

    def __init__(self, case: unittest.TestCase, page: str, runnable: list[Example]):
        self.case = case
        self.page = page
        self.cwd = self.root = tempfile.mkdtemp(prefix="kafkatw-docs-")
        case.addCleanup(shutil.rmtree, self.cwd, True)
        self.link()
        self.env = {**os.environ, "PATH": os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
                    "PYTHONPATH": ROOT}
        #: each block's process, the leader of its process group
        self.groups: list[subprocess.Popen] = []
        case.addCleanup(self.stop_all)
        ports = {int(p) for e in runnable for p in PORT.findall(e.text)}
        offset = port_offset(ports)
        self.ports = {p: p + offset for p in ports}

    def link(self) -> None:
        for name in LINKED:
            os.symlink(os.path.join(ROOT, name), os.path.join(self.cwd, name))

    def chdir(self, name: str) -> None:
        """A new setup: what ran so far stopped, the next blocks in the new directory C{name}."""
        self.stop_all()
        made = [os.path.join(self.cwd, n) for n in os.listdir(self.cwd)
                if os.path.isfile(os.path.join(self.cwd, n)) and not os.path.islink(os.path.join(self.cwd, n))]
        self.cwd = os.path.join(self.cwd, name)
        os.mkdir(self.cwd)
        self.link()
        for path in made:
            shutil.copy(path, self.cwd)

    def use_fixture(self) -> None:
        """A ZooKeeper and broker 0 where the page's examples expect them."""
        zookeeper = ZooKeeperFixture()
        connect = zookeeper.start()
        self.case.addCleanup(zookeeper.stop)
        self.ports[2181] = zookeeper.port
        port = self.ports.setdefault(9092, 9092 + port_offset({9092}))
        base = os.path.join(self.cwd, ".fixture")
        os.makedirs(base)
        # the README's broker: config/server.properties (scripts/run.sh --broker-only)
        with open(os.path.join(ROOT, "config", "server.properties"), encoding="utf-8") as f:
            properties = dict(line.strip().split("=", 1) for line in f if "=" in line and not line.startswith("#"))
        for key in ("broker.id", "listeners", "log.dirs", "zookeeper.connect"):
            properties.pop(key, None)
        broker = BrokerProcess(0, connect + "/kafkatw", base, overrides=properties, port=port).start()
        self.case.addCleanup(broker.stop)

    def substitute(self, text: str) -> str:
        text = text.replace("/etc/kafkatw/", "").replace("/var/lib/kafkatw", "data")
        for doc_port, port in self.ports.items():
            text = re.sub(rf"(?<![\d.]){doc_port}(?!\d)", str(port), text)
        return text

    def run(self, argv: list[str], where: str, timeout_s: float = BLOCK_TIMEOUT_S) -> tuple[int, str]:
        """Run C{argv} in the page's directory, in a process group of its own; its status and output."""
        out_path = os.path.join(self.cwd, f".out-{len(self.groups)}")
        with open(out_path, "wb") as out:
            process = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.groups.append(process)
        try:
            status = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop_group(process)
            with open(out_path, "rb") as f:
                output = f.read().decode("utf-8", "replace")
            self.case.fail(f"{where}: still running after {timeout_s} s:\n{output[-3000:]}\n{self.logs()}")
        with open(out_path, "rb") as f:
            return status, f.read().decode("utf-8", "replace")

    def logs(self) -> str:
        """The last lines of the logs the page's examples wrote (C{*.log} under its directory), for a failure."""
        tails = []
        for directory, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
            for name in sorted(files):
                if name.endswith(".log") and not name.startswith("0"):
                    with open(os.path.join(directory, name), "rb") as f:
                        text = f.read()[-1500:].decode("utf-8", "replace")
                    tails.append(f"--- {os.path.relpath(os.path.join(directory, name), self.root)}:\n{text}")
        return "\n".join(tails)[-6000:]

    def stop_group(self, leader: subprocess.Popen) -> None:
        """
        Stop the process group C{leader} leads: SIGTERM, then SIGKILL, each
        until no process of the group is left (the leader, our child, reaped
        by C{poll}: unreaped, it would count as left for C{killpg}).
        """
        for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(leader.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                leader.poll()
                try:
                    os.killpg(leader.pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.1)

    def stop_all(self) -> None:
        for leader in reversed(self.groups):
            self.stop_group(leader)

    def background(self, example: Example) -> None:
        """Start the server of C{example} and wait until its address accepts connections."""
        host, port = self.substitute(example.background).rsplit(":", 1)
        out_path = os.path.join(self.cwd, f".out-{len(self.groups)}")
        with open(out_path, "wb") as out:
            process = subprocess.Popen(["bash", "-e", "-c", self.substitute(example.text)], cwd=self.cwd,
                                       env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.groups.append(process)
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, int(port)), 1).close()
                return
            except OSError:
                if process.poll() is not None:
                    break
                time.sleep(0.2)
        with open(out_path, "rb") as f:
            output = f.read().decode("utf-8", "replace")
        self.case.fail(f"{example.where}: nothing accepts connections at {host}:{port}:\n{output[-3000:]}\n"
                       f"{self.logs()}")

    def shell(self, example: Example, shown: Example | None) -> None:
        status, output = self.run(["bash", "-e", "-c", self.substitute(example.text)], example.where)
        self.case.assertEqual(status, 0, f"{example.where} exited with {status}:\n{output[-3000:]}\n{self.logs()}")
        self.compare(example, shown, output)

    def compare(self, example: Example, shown: Example | None, output: str) -> None:
        """The block C{shown} (what C{example} prints, when the page shows it) matches C{output}."""
        if shown is not None and example.output_varies is None:
            missing = missing_lines(self.substitute(shown.text).splitlines(), output)
            self.case.assertEqual(missing, [], f"{example.where} printed:\n{output[-3000:]}")

    def console(self, example: Example) -> None:
        steps = console_steps(self.substitute(example.text))
        self.case.assertTrue(steps, f"{example.where}: a console block without a '$ ' command")
        script = []
        for i, step in enumerate(steps):
            script.append(f"{{\n{step.command}\n}} 2>&1; __s=$?; printf '\\n\\036 {i} %d\\036\\n' $__s; (exit $__s)")
        status, output = self.run(["bash", "-c", "\n".join(script)], example.where)
        parts = re.split(r"\n\x1e (\d+) (\d+)\x1e\n", output)
        printed = {int(parts[k]): (int(parts[k + 1]), parts[k - 1]) for k in range(1, len(parts) - 1, 3)}
        for i, step in enumerate(steps):
            self.case.assertIn(i, printed, f"{example.where}: '{step.command}' did not finish:\n{output[-3000:]}")
            step_status, text = printed[i]
            shows_status = i + 1 < len(steps) and steps[i + 1].command.strip() == "echo $?"
            if not shows_status:
                self.case.assertEqual(step_status, 0, f"{example.where}: '{step.command}' exited with "
                                                      f"{step_status}:\n{text[-3000:]}")
            if example.output_varies is None:
                missing = missing_lines(step.expected, text)
                self.case.assertEqual(missing, [], f"{example.where}: '{step.command}' printed:\n{text[-3000:]}")

    def write(self, example: Example) -> None:
        with open(os.path.join(self.cwd, example.file), "w", encoding="utf-8") as f:
            f.write(self.substitute(example.text))

    def python(self, example: Example, shown: Example | None) -> None:
        text = self.substitute(example.text)
        path = os.path.join(self.cwd, f"example_{example.line}.py")
        if text.lstrip().startswith(">>> "):
            path = path[:-3] + ".txt"
            argv = [sys.executable, "-m", "doctest", path]
        else:
            argv = [sys.executable, path]
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        status, output = self.run(argv, example.where)
        self.case.assertEqual(status, 0, f"{example.where} exited with {status}:\n{output[-3000:]}\n{self.logs()}")
        self.compare(example, shown, output)


def runnable(page: str) -> list[Example]:
    """The blocks of C{page} the test runs or writes, in order."""
    return [e for e in examples(page)
            if e.not_run is None and (e.lang in SHELL + ("python",) or e.file is not None or e.output)]


class DocsExamplesTests(unittest.TestCase):
    timeout = 900

    def run_page(self, page: str) -> None:
        blocks = runnable(page)
        # KAFKATW_DOCS_FROM=LINE: from the first <!-- cd: --> section at or after LINE (to rerun a section)
        start = int(os.environ.get("KAFKATW_DOCS_FROM", "0"))
        if start:
            blocks = [e for e in blocks if e.line >= start]
            while blocks and blocks[0].cd is None:
                blocks.pop(0)
        if not blocks:
            return
        run = PageRun(self, page, blocks)
        if page in BROKER_PAGES:
            run.use_fixture()
        for i, example in enumerate(blocks):
            if example.cd is not None:
                run.chdir(example.cd)
            if i == 0 or example.cd is not None:
                for later in blocks[i:]:
                    if later is not example and later.cd is not None:
                        break
                    if later.file is not None:
                        run.write(later)
            if example.file is not None:
                continue
            elif example.background is not None:
                run.background(example)
            elif example.lang == "console":
                run.console(example)
            elif example.lang in ("python",) + SHELL:
                shown = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1].output else None
                (run.python if example.lang == "python" else run.shell)(example, shown)


def _page_test(page: str):
    def test(self: DocsExamplesTests) -> None:
        self.run_page(page)
    test.__doc__ = f"The examples of {page} run as shown."
    return test


for _page in pages():
    setattr(DocsExamplesTests, "test_" + re.sub(r"\W", "_", os.path.basename(_page)[:-3]).lower(),
            _page_test(_page))


class DocsExamplesMarkedTests(unittest.TestCase):
    """Every example is one the tests above run, or says why not."""

    def test_command_blocks_are_tagged(self) -> None:
        untagged = [e.where for page in pages() for e in examples(page)
                    if e.lang not in SHELL + ("python",) and any(COMMAND.match(line) for line in e.text.splitlines())
                    and e.not_run is None]
        self.assertEqual(untagged, [], "blocks with commands need ```sh, ```console or a not-run marker")

    def test_markers_have_reasons(self) -> None:
        for page in pages():
            with open(os.path.join(ROOT, page), encoding="utf-8") as f:
                text = f.read()
            for marker in re.findall(r"<!-- (?:not-run|output-varies).*?-->", text):
                self.assertRegex(marker, MARKER, page)

    def test_line_pattern(self) -> None:
        pattern = line_pattern("Topic: events\tTopicId: jqmS3zzmREqMzO2kLvwjmg\tPartitionCount: 3\tConfigs: ")
        self.assertTrue(pattern.fullmatch("Topic: events\tTopicId: AAAAAAAAAAAAAAAAAAAAAA\tPartitionCount: 3\tConfigs:"))
        self.assertFalse(pattern.fullmatch("Topic: events\tTopicId: A\tPartitionCount: 4\tConfigs:"))
        self.assertEqual(missing_lines(["a 1", "", "b …"], "x\na  1\nb anything\n"), [])
        self.assertEqual(missing_lines(['{"size":664,"x":1} CreateTime: 17 rate 1.5e+06'],
                                       '{"size":830,"x":1} CreateTime: 18 rate 2.25\n'), [])
        self.assertEqual(missing_lines(['{"size":664,"x":1}'], '{"size":664,"x":2}'), ['{"size":664,"x":1}'])
        self.assertEqual(missing_lines(["b 2", "a 1"], "a 1\nb 2\n"), [])
        self.assertEqual(missing_lines(["b 2", "c 3"], "a 1\nb 2\n"), ["c 3"])
