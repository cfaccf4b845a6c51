"""
Unit tests of L{kafkatw.shipper}: the file follower and the shipper loop,
driven by L{Shipper.poll_once} against files in a temporary directory and a
fake sink (no broker, no sleeps).
"""

from __future__ import annotations

import gc
import json
import os
import pathlib
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial import unittest

from kafkatw.shipper import FileFollower, Shipper, expand_paths, line_records, load_state, save_state


class FakeSink:
    """A L{LineSink} that keeps records; C{fail_next} makes the next flush raise."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes, dict[str, bytes]]] = []
        self.queued: list[tuple[bytes, bytes, dict[str, bytes]]] = []
        self.fail_next = False

    def send(self, value: bytes, key: bytes, headers: list[tuple[str, bytes]]) -> None:
        self.queued.append((value, key, dict(headers)))

    def flush(self) -> None:
        queued, self.queued = self.queued, []
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("broker down")
        self.records.extend(queued)

    def values(self) -> list[bytes]:
        return [r[0] for r in self.records]

    def take(self) -> list[bytes]:
        out = self.values()
        self.records.clear()
        return out


def write(path, data: bytes, mode: str = "ab") -> None:
    with open(path, mode) as f:
        f.write(data)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def make(tmp_path, sink, *patterns, **kw) -> Shipper:
    kw.setdefault("state_file", str(tmp_path / "state.json"))
    return Shipper([str(p) for p in patterns], sink, host="h1", **kw)


class ShipperTests(unittest.TestCase):
    """
    The shipper with a fresh temporary directory (C{self.tmp_path}) and a
    fresh L{FakeSink} (C{self.sink}) per test; L{ShipperManyLinesTests} runs
    every test again through the many-lines path.
    """

    sink_class: type[FakeSink] = FakeSink

    def setUp(self) -> None:
        directory = tempfile.mkdtemp(prefix="kafkatw-test-")  # not mktemp(): under pytest it is in the tree
        self.addCleanup(shutil.rmtree, directory, True)
        self.tmp_path = pathlib.Path(directory)
        self.sink = self.sink_class()

    # --- the records of many lines ------------------------------------------------------------

    def test_line_records(self) -> None:
        """
        L{line_records} gives each line the fixed headers and its line number.
        """
        host, path = ("host", "h1".encode()), ("path", "/var/log/a.log".encode())
        key = "h1:/var/log/a.log".encode()
        assert line_records(key, [b"one", b"", "three".encode()], 7, [host, path]) == [
            (key, b"one", (host, path, ("line_no", b"7")), None),
            (key, b"", (host, path, ("line_no", b"8")), None),
            (key, b"three", (host, path, ("line_no", b"9")), None)]
        assert line_records(key, [], 1, [host, path]) == []

    def test_line_records_untracked_by_young_collections(self) -> None:
        """
        The records of a chunk of lines are untracked by the garbage collector's
        young collections (CPython's default thresholds), so full collections do
        not walk the records waiting to be sent.  Made nested, or with a list of
        headers, they stay tracked.
        """
        host, path = ("host", "h1".encode()), ("path", "/var/log/a.log".encode())
        values = [b"line %d" % i for i in range(2000)]
        enabled, thresholds = gc.isenabled(), gc.get_threshold()
        gc.enable()
        gc.set_threshold(700, 10, 10)
        try:
            gc.collect()
            records = line_records("h1:/var/log/a.log".encode(), values, 1, [host, path])
            gc.collect(0)
            gc.collect(1)
            assert sum(map(gc.is_tracked, records)) == 0
        finally:
            gc.set_threshold(*thresholds)
            if not enabled:
                gc.disable()

    # --- line splitting ---------------------------------------------------------------------

    def test_lines_keys_headers(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"one\ntwo\r\n\nfour\n")
        shipper = make(self.tmp_path, self.sink, log)
        shipper.poll_once()
        assert self.sink.values() == [b"one", b"two\r", b"", b"four"]
        value, key, headers = self.sink.records[1]
        assert key == f"h1:{log}".encode()
        assert headers == {"host": b"h1", "path": str(log).encode(), "line_no": b"2"}
        assert shipper.stats.lines == 4 and shipper.stats.files == 1
        assert shipper.stats.bytes == len(b"one" + b"two\r" + b"four")

    def test_partial_line_waits_for_newline(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"one\ntw")
        shipper = make(self.tmp_path, self.sink, log)
        shipper.poll_once()
        assert self.sink.take() == [b"one"]
        shipper.poll_once()
        assert self.sink.take() == []
        write(log, b"o\nthree")
        shipper.poll_once()
        assert self.sink.take() == [b"two"]
        assert self.sink.queued == []
        # the checkpoint is at the start of the unterminated line
        assert load_state(shipper.state_file)[str(log)]["offset"] == len(b"one\ntwo\n")
        assert load_state(shipper.state_file)[str(log)]["line_no"] == 2

    def test_run_once_ships_unterminated_last_line(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"one\ntwo")
        stats = make(self.tmp_path, self.sink, log).run_once()
        assert self.sink.values() == [b"one", b"two"]
        assert stats.lines == 2
        assert self.sink.records[1][2]["line_no"] == b"2"

    def test_line_spanning_read_chunks(self) -> None:
        log = self.tmp_path / "a.log"
        big = b"x" * (3 << 20)  # three read chunks
        write(log, b"a\n" + big + b"\nb\n")
        make(self.tmp_path, self.sink, log, max_line_bytes=4 << 20).run_once()
        assert self.sink.values() == [b"a", big, b"b"]

    def test_binary_shipped_as_is_or_skipped(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"ok\n\x00\x01\xff\xfe\nbad \xc3\x28 utf8\nok2\n")
        make(self.tmp_path, self.sink, log).run_once()
        assert self.sink.take() == [b"ok", b"\x00\x01\xff\xfe", b"bad \xc3\x28 utf8", b"ok2"]
        other = FakeSink()
        shipper = make(self.tmp_path, other, log, state_file=None, skip_binary=True)
        stats = shipper.run_once()
        assert other.values() == [b"ok", b"ok2"]
        assert [r[2]["line_no"] for r in other.records] == [b"1", b"4"]
        assert stats.skipped == 2
        assert stats.skipped_per_file == {str(log): {"binary": 2}}

    # (run again by ShipperManyLinesTests, through the many-lines path: the same property)
    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(files=st.lists(st.lists(st.sampled_from([b"ok", b"", b"caf\xc3\xa9", b"\x00", b"bad \xc3\x28", b"\xff"]),
                                   max_size=12), min_size=1, max_size=4),
           unreadable=st.sets(st.integers(0, 3)), fail_first_flush=st.booleans())
    def test_skips_per_file_add_up(self, files: list[list[bytes]], unreadable: set[int],
                                   fail_first_flush: bool) -> None:
        """
        With C{skip_binary}, per file: lines shipped plus lines skipped as
        binary are the file's lines, an unreadable file is skipped once as a
        whole, and the per-file counts add up to C{skipped}, also when a
        flush failed and the lines were read again.
        """
        directory = pathlib.Path(tempfile.mkdtemp(prefix="kafkatw-test-", dir=self.tmp_path))
        paths = []
        for i, lines in enumerate(files):
            path = directory / f"{i}.log"
            write(path, b"".join(line + b"\n" for line in lines))
            paths.append(path)
        refused = {str(paths[i]) for i in unreadable if i < len(paths)}
        import kafkatw.shipper

        real_open = open

        def refusing_open(path, *args, **kwargs):
            if str(path) in refused:
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        kafkatw.shipper.open = refusing_open  # found before the builtin (root reads any file)
        try:
            sink = self.sink_class()
            shipper = make(directory, sink, directory / "*.log", state_file=None, skip_binary=True)
            if fail_first_flush:
                sink.fail_next = True
                self.assertRaises(RuntimeError, shipper.poll_once)
            stats = shipper.run_once()
        finally:
            del kafkatw.shipper.open
        expected: dict[str, dict[str, int]] = {}
        shipped = 0
        for path, lines in zip(paths, files):
            if str(path) in refused:
                expected[str(path)] = {"unreadable": 1}
                continue
            binary = sum(1 for line in lines if b"\x00" in line or not _utf8(line))
            shipped += len(lines) - binary
            if binary:
                expected[str(path)] = {"binary": binary}
        assert stats.skipped_per_file == expected
        assert stats.skipped == sum(n for reasons in expected.values() for n in reasons.values())
        assert stats.lines == shipped == len(sink.records)

    # --- long lines -------------------------------------------------------------------------------

    def test_long_line_truncated_with_header(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"short\n" + b"y" * 25 + b"\nafter\n")
        warnings = []
        shipper = make(self.tmp_path, self.sink, log, max_line_bytes=10, on_warning=warnings.append)
        stats = shipper.run_once()
        assert self.sink.values() == [b"short", b"y" * 10, b"after"]
        assert self.sink.records[1][2]["truncated"] == b"25"
        assert "truncated" not in self.sink.records[0][2]
        assert stats.truncated == 1
        assert any("truncated 1 line" in w for w in warnings)
        assert load_state(shipper.state_file)[str(log)]["offset"] == os.path.getsize(log)

    def test_long_line_completed_across_polls(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"z" * 15)
        shipper = make(self.tmp_path, self.sink, log, max_line_bytes=10)
        shipper.poll_once()
        assert self.sink.take() == []
        write(log, b"z" * 10)
        shipper.poll_once()
        assert self.sink.take() == []
        write(log, b"zz\nnext\n")
        shipper.poll_once()
        assert self.sink.values() == [b"z" * 10, b"next"]
        assert self.sink.records[0][2]["truncated"] == b"27"
        assert [r[2]["line_no"] for r in self.sink.records] == [b"1", b"2"]
        assert load_state(shipper.state_file)[str(log)]["offset"] == 27 + 1 + 5

    def test_long_unterminated_line_at_end_of_once(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"a\n" + b"q" * 30)
        make(self.tmp_path, self.sink, log, max_line_bytes=8).run_once()
        assert self.sink.values() == [b"a", b"q" * 8]
        assert self.sink.records[1][2]["truncated"] == b"30"

    # --- rotation and truncation ------------------------------------------------------------------

    def test_rotation_by_rename(self) -> None:
        log = self.tmp_path / "app.log"
        write(log, b"1\n2\n")
        shipper = make(self.tmp_path, self.sink, log)
        shipper.poll_once()
        assert self.sink.take() == [b"1", b"2"]
        # the writer appends, then logrotate renames, then a new file appears
        write(log, b"3\nunterminated")
        os.rename(log, self.tmp_path / "app.log.1")
        shipper.poll_once()  # path missing: the old file is still read
        assert self.sink.take() == [b"3"]
        write(self.tmp_path / "app.log.1", b" end\n")
        write(log, b"new1\nnew2\n")
        shipper.poll_once()
        assert self.sink.values() == [b"unterminated end", b"new1", b"new2"]
        assert [r[2]["line_no"] for r in self.sink.records] == [b"4", b"1", b"2"]
        state = load_state(shipper.state_file)[str(log)]
        assert state["ino"] == os.stat(log).st_ino and state["offset"] == os.path.getsize(log)
        assert state["line_no"] == 2

    def test_rotated_file_under_a_directory_not_shipped_twice(self) -> None:
        d = self.tmp_path / "logs"
        d.mkdir()
        write(d / "app.log", b"a\nb\n")
        shipper = make(self.tmp_path, self.sink, d)
        shipper.poll_once()
        assert self.sink.take() == [b"a", b"b"]
        write(d / "app.log", b"c\n")
        os.rename(d / "app.log", d / "app.log.1")
        write(d / "app.log", b"d\n")
        shipper.poll_once()
        shipper.poll_once()
        assert self.sink.take() == [b"c", b"d"]
        write(d / "app.log.1", b"late\n")  # the old file is still followed under its new name
        shipper.poll_once()
        assert self.sink.values() == [b"late"]
        assert self.sink.records[0][1].endswith(b"app.log.1")

    def test_truncation_starts_again_at_zero(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"first\nsecond\n")
        shipper = make(self.tmp_path, self.sink, log)
        shipper.poll_once()
        self.sink.take()
        write(log, b"x\n", mode="wb")  # copytruncate, then one short line
        shipper.poll_once()
        assert self.sink.values() == [b"x"]
        assert self.sink.records[0][2]["line_no"] == b"1"
        assert load_state(shipper.state_file)[str(log)]["offset"] == 2

    def test_file_appearing_later(self) -> None:
        log = self.tmp_path / "later.log"
        shipper = make(self.tmp_path, self.sink, log)
        shipper.poll_once()
        assert self.sink.take() == []
        write(log, b"hello\n")
        shipper.poll_once()
        assert self.sink.values() == [b"hello"]

    # --- state file -------------------------------------------------------------------------------

    def test_state_round_trip_restart_ships_only_new_lines(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"1\n2\n3\n")
        make(self.tmp_path, self.sink, log).run_once()
        assert self.sink.take() == [b"1", b"2", b"3"]
        state = json.loads((self.tmp_path / "state.json").read_text())
        assert state["version"] == 1
        st = os.stat(log)
        assert state["files"][str(log)] == {"dev": st.st_dev, "ino": st.st_ino, "offset": 6, "line_no": 3}
        write(log, b"4\n5\n")
        make(self.tmp_path, self.sink, log).run_once()
        assert self.sink.values() == [b"4", b"5"]
        assert [r[2]["line_no"] for r in self.sink.records] == [b"4", b"5"]

    def test_state_of_a_replaced_file_is_not_used(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"old1\nold2\n")
        make(self.tmp_path, self.sink, log).run_once()
        self.sink.take()
        os.rename(log, self.tmp_path / "a.log.1")
        write(log, b"n\n")
        make(self.tmp_path, self.sink, log).run_once()
        assert self.sink.values() == [b"n"]
        assert self.sink.records[0][2]["line_no"] == b"1"

    def test_state_written_only_after_acknowledgement(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"1\n2\n")
        shipper = make(self.tmp_path, self.sink, log)
        shipper.poll_once()
        self.sink.take()
        write(log, b"3\n")
        self.sink.fail_next = True
        self.assertRaises(RuntimeError, shipper.poll_once)
        assert load_state(shipper.state_file)[str(log)]["offset"] == 4
        assert shipper.stats.lines == 2
        shipper.poll_once()  # rewound to the checkpoint: line 3 is sent again
        assert self.sink.values() == [b"3"]
        assert self.sink.records[0][2]["line_no"] == b"3"
        assert load_state(shipper.state_file)[str(log)]["offset"] == 6

    def test_save_state_atomic_and_corrupt_state_ignored(self) -> None:
        path = str(self.tmp_path / "sub" / "state.json")
        save_state(path, {"/x": {"dev": 1, "ino": 2, "offset": 3, "line_no": 4}})
        assert load_state(path) == {"/x": {"dev": 1, "ino": 2, "offset": 3, "line_no": 4}}
        assert os.listdir(self.tmp_path / "sub") == ["state.json"]  # no temporary file left
        write(path, b"{not json", mode="wb")
        assert load_state(path) == {}
        assert load_state(str(self.tmp_path / "missing.json")) == {}

    # --- bad input, expansion ----------------------------------------------------------------------

    def test_unreadable_file_reported_once_and_skipped(self) -> None:
        good, bad = self.tmp_path / "good.log", self.tmp_path / "bad.log"
        write(good, b"g\n")
        write(bad, b"secret\n")
        os.chmod(bad, 0)
        if os.geteuid() == 0:  # root reads any file: make open() refuse as it would for a user
            real_open = open

            def refusing_open(path, *args, **kwargs):
                if str(path) == str(bad):
                    raise PermissionError(13, "Permission denied", str(path))
                return real_open(path, *args, **kwargs)

            import kafkatw.shipper

            kafkatw.shipper.open = refusing_open  # found before the builtin
            self.addCleanup(delattr, kafkatw.shipper, "open")
        warnings = []
        shipper = make(self.tmp_path, self.sink, self.tmp_path / "*.log", on_warning=warnings.append)
        shipper.poll_once()
        write(good, b"g2\n")
        shipper.poll_once()
        assert self.sink.values() == [b"g", b"g2"]
        assert len([w for w in warnings if "bad.log" in w]) == 1
        assert shipper.stats.skipped == 1
        assert shipper.stats.skipped_per_file == {str(bad): {"unreadable": 1}}

    def test_expand_paths(self) -> None:
        (self.tmp_path / "d" / "sub").mkdir(parents=True)
        for name in ("d/a.log", "d/b.txt", "d/sub/c.log", "e.log"):
            write(self.tmp_path / name, b"x\n")
        os.mkfifo(self.tmp_path / "d" / "fifo")
        t = str(self.tmp_path)
        assert expand_paths([f"{t}/d"]) == [f"{t}/d/a.log", f"{t}/d/b.txt"]
        assert expand_paths([f"{t}/d"], recursive=True) == [f"{t}/d/a.log", f"{t}/d/b.txt", f"{t}/d/sub/c.log"]
        assert expand_paths([f"{t}/**/*.log"]) == [f"{t}/d/a.log"]
        assert expand_paths([f"{t}/**/*.log"], recursive=True) == [f"{t}/d/a.log", f"{t}/d/sub/c.log", f"{t}/e.log"]
        assert expand_paths([f"{t}/d/*.log", f"{t}/d/a.log", f"{t}/missing.log"]) == [
            f"{t}/d/a.log", f"{t}/missing.log"]

    def test_directory_picks_up_new_files(self) -> None:
        d = self.tmp_path / "logs"
        d.mkdir()
        write(d / "a.log", b"a\n")
        shipper = make(self.tmp_path, self.sink, d)
        shipper.poll_once()
        write(d / "b.log", b"b\n")
        shipper.poll_once()  # found after this poll's reads
        shipper.poll_once()
        assert sorted(self.sink.values()) == [b"a", b"b"]
        assert shipper.stats.files == 2

    def test_state_file_inside_followed_directory_is_not_shipped(self) -> None:
        write(self.tmp_path / "a.log", b"a\n")
        shipper = make(self.tmp_path, self.sink, self.tmp_path)
        shipper.run_once()
        shipper.poll_once()
        assert self.sink.values() == [b"a"]

    def test_follower_lag(self) -> None:
        log = self.tmp_path / "a.log"
        write(log, b"abc\nde")
        f = FileFollower(str(log))
        lines = []
        f.poll(lambda v, n, o: lines.append(v))
        assert lines == [b"abc"] and f.lag_bytes == 2

    # --- the command's arguments ------------------------------------------------------------------

    def test_cli_arguments(self) -> None:
        from click.testing import CliRunner

        from kafkatw.cli.main import main
        from kafkatw.cli.ship import default_state_file

        runner = CliRunner()
        result = runner.invoke(main, ["ship", "--bootstrap-server", "127.0.0.1:1", "--topic", "t"])
        assert result.exit_code == 2 and "PATHS" in result.output
        result = runner.invoke(main, ["ship", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--no-state",
                                      "--state-file", "s.json", "x.log"])
        assert result.exit_code == 2 and "--no-state" in result.output
        assert default_state_file("logs").endswith(os.path.join(".kafkatw", "ship-state-logs.json"))
        assert "--poll-interval-ms" in runner.invoke(main, ["ship", "--help"]).output

    def test_deleted_file_is_finished_and_released(self) -> None:
        d = self.tmp_path / "logs"
        d.mkdir()
        write(d / "old.log", b"1\n")
        shipper = make(self.tmp_path, self.sink, d)
        shipper.poll_once()
        write(d / "old.log", b"2\ntail")
        os.unlink(d / "old.log")
        shipper.poll_once()
        assert self.sink.values() == [b"1", b"2", b"tail"]
        shipper.poll_once()
        assert str(d / "old.log") not in shipper.followers
        assert str(d / "old.log") not in load_state(shipper.state_file)

    # --- what the user is told ---------------------------------------------------------------

    def test_missing_paths_are_warnings_naming_them(self) -> None:
        write(self.tmp_path / "here.log", b"x\n")
        (self.tmp_path / "emptydir").mkdir()
        warnings: list[str] = []
        shipper = make(self.tmp_path, self.sink, self.tmp_path / "here.log", self.tmp_path / "gone.log", str(self.tmp_path / "nope-*.log"),
                       self.tmp_path / "here.log" / "below", on_warning=warnings.append)
        shipper.run_once()
        shipper.poll_once()  # reported once, not at every poll
        assert self.sink.values() == [b"x"]
        assert warnings == [
            f"{self.tmp_path / 'gone.log'} does not exist",
            f"no file matches {self.tmp_path / 'nope-*.log'}",
            f"cannot read {self.tmp_path / 'here.log' / 'below'}: permission denied or not a regular file; skipping it",
        ]
        assert shipper.opened == {str(self.tmp_path / "here.log")}

    def test_nothing_opened(self) -> None:
        shipper = make(self.tmp_path, self.sink, self.tmp_path / "gone.log", on_warning=lambda m: None)
        shipper.run_once()
        assert shipper.opened == set()
        write(self.tmp_path / "gone.log", b"late\n")  # followed: shipped once it appears
        shipper.poll_once()
        assert self.sink.values() == [b"late"] and shipper.opened == {str(self.tmp_path / "gone.log")}

    def test_unreachable_names_the_address(self) -> None:
        import socket

        from kafkatw.client.connection import unreachable

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.listen(1)
        try:
            assert unreachable(f"127.0.0.1:{port}") is None
        finally:
            listener.close()
        # the port was just closed: nothing listens there now
        assert unreachable(f"127.0.0.1:{port}") == f"connection refused to 127.0.0.1:{port}"
        assert unreachable(f"127.0.0.1:{port},127.0.0.1:{port}") == \
            f"connection refused to 127.0.0.1:{port}; connection refused to 127.0.0.1:{port}"

    def test_cli_once_with_nothing_to_ship_fails(self) -> None:
        import socket

        from click.testing import CliRunner

        from kafkatw.cli.main import main

        listener = socket.socket()  # a "broker" that accepts connections (never used: nothing to send)
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        try:
            bootstrap = f"127.0.0.1:{listener.getsockname()[1]}"
            result = CliRunner().invoke(main, ["ship", "--bootstrap-server", bootstrap, "--topic", "t", "--once",
                                               "--no-state", str(self.tmp_path / "gone.log")])
        finally:
            listener.close()
        assert result.exit_code == 1, result.output
        assert result.output.splitlines() == [
            f"kafkatw ship: {self.tmp_path / 'gone.log'} does not exist",
            "shipped 0 lines (0 bytes) from 0 files",
            f"ERROR nothing to ship: no readable file in {self.tmp_path / 'gone.log'}",
        ]

    def test_cli_unreachable_broker_fails_at_once(self) -> None:
        import socket

        from click.testing import CliRunner

        from kafkatw.cli.main import main

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        write(self.tmp_path / "a.log", b"x\n")
        result = CliRunner().invoke(main, ["ship", "--bootstrap-server", f"127.0.0.1:{port}", "--topic", "t",
                                           "--once", "--no-state", str(self.tmp_path / "a.log")])
        assert result.exit_code == 1
        assert result.output == f"ERROR connection refused to 127.0.0.1:{port}\n"

    def test_summary_counts_in_singular_and_plural(self) -> None:
        from kafkatw.cli.ship import _summary
        from kafkatw.shipper import ShipStats

        assert _summary(ShipStats(lines=1, bytes=1, files=1)) == "shipped 1 line (1 byte) from 1 file"
        assert _summary(ShipStats(lines=2, bytes=0, files=2, skipped=1)) == \
            "shipped 2 lines (0 bytes) from 2 files (1 skipped)"

    def test_summary_says_per_file_what_was_skipped_and_why(self) -> None:
        from kafkatw.cli.ship import _summary
        from kafkatw.shipper import ShipStats

        stats = ShipStats(lines=5, bytes=10, files=1)
        stats.skip("/var/log/journal/x.journal", "binary", 127)
        stats.skip("/var/log/private/y.log", "unreadable")
        stats.skip("/var/log/z.log", "binary")
        assert _summary(stats).splitlines() == [
            "shipped 5 lines (10 bytes) from 1 file (129 skipped)",
            "  /var/log/journal/x.journal: skipped 127 binary lines (a NUL byte or not UTF-8)",
            "  /var/log/private/y.log: skipped the whole file (unreadable: permission denied or not a regular file)",
            "  /var/log/z.log: skipped 1 binary line (a NUL byte or not UTF-8)",
        ]


class FakeLinesSink(FakeSink):
    """
    A L{FakeSink} with L{ProducerSink}'s own C{send} and C{send_lines} (the
    records it would hand to the producer), so that the shipper takes its
    many-lines path: every check above must see the same records.
    """

    chunk_lines = 1 << 30

    def __init__(self) -> None:
        super().__init__()
        self._chunk: list = []
        self._lines = 0

    from kafkatw.shipper import ProducerSink as _ProducerSink

    send = _ProducerSink.send
    send_lines = _ProducerSink.send_lines
    del _ProducerSink

    def flush(self) -> None:
        for key, records in self._chunk:
            for record_key, value, headers, timestamp_ms in records:
                assert record_key == key and timestamp_ms is None
                self.queued.append((value, record_key, dict(headers)))
        self._chunk = []
        self._lines = 0
        super().flush()


class ShipperManyLinesTests(ShipperTests):
    """L{ShipperTests} through the shipper's many-lines path (L{ProducerSink.send_lines})."""

    sink_class = FakeLinesSink


def check_many_lines_path_equals_line_by_line(tmp_path):
    """FileFollower's emit_lines gives the lines and numbers emit alone gives, for any split of the data."""
    import random

    rng = random.Random(14)
    for trial in range(30):
        data = b"".join(rng.choice([b"a", b"bb\n", b"\n", b"x" * rng.randrange(1, 40) + b"\n", b"\xff"])
                        for _ in range(rng.randrange(0, 60)))
        path = tmp_path / f"f{trial}.log"
        write(path, data, "wb")
        outcomes = []
        limit = rng.choice([5, 30, 1000])
        for many in (False, True):
            follower = FileFollower(str(path), max_line_bytes=limit)
            follower.open()
            got: list = []

            def emit(value, line_no, original):
                got.append((value, line_no, original))

            def emit_lines(values, first):
                got.extend((v, first + i, None) for i, v in enumerate(values))

            follower.poll(emit, final=True, emit_lines=emit_lines if many else None)
            outcomes.append((got, follower.offset, follower.line_no))
            follower.close()
        assert outcomes[0] == outcomes[1], (data, outcomes)


class FollowerManyLinesTests(unittest.TestCase):
    def test_many_lines_path_equals_line_by_line(self) -> None:
        import pathlib
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            check_many_lines_path_equals_line_by_line(pathlib.Path(tmp))


# --- the producer sink's reactor-thread half -------------------------------------------


class FakeClient:
    """
    The partition count L{FakeProducer} reports.  Not
    L{kafkatw.testing.FakeCluster}: the shipper's tests fire each send's
    Deferred by hand (failures, order, back-pressure), below any broker.
    """

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self.partitions))


class FakeProducer:
    """
    Enough of L{kafkatw.client.producer.Producer} for L{_ChunkSender}: sends
    (one per record, or one C{send_many} per piece) are kept, Deferreds fired by hand.
    """

    def __init__(self, partitions: int = 3) -> None:
        from twisted.internet.defer import Deferred

        self.client = FakeClient(partitions)
        self.sent: list[tuple] = []  # (topic, value, key, partition, headers, deferred) per record
        self.pieces: list[tuple] = []  # (topic, records, partition, deferred) per send_many
        self.not_ready: Deferred | None = None
        self.flushes: list[Deferred] = []
        self._deferred = Deferred

    def send(self, topic, value, key=None, partition=None, headers=None, timestamp_ms=None):
        d = self._deferred()
        self.sent.append((topic, value, key, partition, headers, d))
        return d

    def send_many(self, topic, records, partition):
        d = self._deferred()
        self.pieces.append((topic, list(records), partition, d))
        for key, value, headers, _ts in records:
            self.sent.append((topic, value, key, partition, headers, d))
        return d

    def ready(self):
        from twisted.internet.defer import succeed

        return self.not_ready if self.not_ready is not None else succeed(None)

    def flush(self):
        d = self._deferred()
        self.flushes.append(d)
        return d


def _chunk(count: int, key: bytes = b"h:/var/log/a.log") -> list[tuple]:
    return [(key, [(key, b"line %d" % i, [("line_no", str(i + 1).encode())], None) for i in range(count)])]


class ChunkSenderTests(unittest.SynchronousTestCase):
    def sender(self, partitions: int = 3):
        from kafkatw.shipper import _ChunkSender

        producer = FakeProducer(partitions)
        done: list[int] = []
        return producer, _ChunkSender(producer, "logs", on_chunk_sent=lambda: done.append(1)), done

    def test_partition_of_the_key_as_kafka(self) -> None:
        """Each run goes where Kafka's default partitioner puts its key (murmur2), in one send_many."""
        from kafkatw.client.partitioner import murmur2

        producer, sender, done = self.sender(partitions=7)
        sender.add(_chunk(3, b"web1:/var/log/syslog") + _chunk(2, b"web1:/var/log/auth.log"))
        self.assertEqual(done, [1])
        self.assertEqual([s[3] for s in producer.sent],
                         [(murmur2(b"web1:/var/log/syslog") & 0x7FFFFFFF) % 7] * 3
                         + [(murmur2(b"web1:/var/log/auth.log") & 0x7FFFFFFF) % 7] * 2)
        self.assertEqual(len(producer.pieces), 2)
        self.assertEqual(producer.sent[0][:3], ("logs", b"line 0", b"web1:/var/log/syslog"))
        self.assertEqual(producer.sent[0][4], [("line_no", b"1")])

    def test_no_metadata_yet(self) -> None:
        """Before the producer knows the topic's partitions, it picks them itself (by the key), record by record."""
        producer, sender, _ = self.sender(partitions=0)
        sender.add(_chunk(2))
        self.assertEqual([s[3] for s in producer.sent], [None, None])
        self.assertEqual(producer.pieces, [])

    def test_waits_while_the_producer_is_not_ready(self) -> None:
        """Sends pause (every 256 records) while the producer is not ready, and go on when it is."""
        from twisted.internet.defer import Deferred

        producer, sender, done = self.sender()
        producer.not_ready = Deferred()
        sender.add(_chunk(600))
        sender.add(_chunk(10))
        self.assertEqual((len(producer.sent), done), (256, []))
        ready, producer.not_ready = producer.not_ready, None
        ready.callback(None)
        self.assertEqual((len(producer.sent), done), (610, [1, 1]))
        self.assertEqual([s[1] for s in producer.sent][:2] + [producer.sent[600][1]], [b"line 0", b"line 1", b"line 0"])
        self.assertEqual([s[1] for s in producer.sent][:600], [b"line %d" % i for i in range(600)])

    def test_pause_at_the_end_of_a_run(self) -> None:
        """A pause right after a run's last piece goes on with the next run, not the same one again."""
        from twisted.internet.defer import Deferred

        producer, sender, done = self.sender()
        producer.not_ready = Deferred()
        sender.add(_chunk(256, b"a") + _chunk(3, b"b"))
        self.assertEqual(len(producer.sent), 256)
        ready, producer.not_ready = producer.not_ready, None
        ready.callback(None)
        self.assertEqual([s[2] for s in producer.sent], [b"a"] * 256 + [b"b"] * 3)
        self.assertEqual(done, [1])

    def test_flush_waits_for_queued_chunks(self) -> None:
        from twisted.internet.defer import Deferred

        producer, sender, _ = self.sender()
        producer.not_ready = Deferred()
        sender.add(_chunk(300))
        flushed = Deferred.fromCoroutine(sender.flush())
        self.assertEqual(producer.flushes, [])
        ready, producer.not_ready = producer.not_ready, None
        ready.callback(None)
        self.assertEqual(len(producer.flushes), 1)
        for piece in producer.pieces:
            piece[3].callback(None)
        self.assertNoResult(flushed)
        producer.flushes[0].callback(None)
        self.assertIsNone(self.successResultOf(flushed))

    def test_flush_raises_the_first_failure(self) -> None:
        """A piece that failed fails the flush with its error (handled: nothing is logged as unhandled)."""
        from twisted.internet.defer import Deferred

        from kafkatw.errors import KafkaError

        producer, sender, _ = self.sender()
        for key in (b"a", b"b", b"c", b"d"):
            sender.add(_chunk(1, key))
        producer.pieces[0][3].callback(None)
        producer.pieces[1][3].errback(KafkaError("first"))
        producer.pieces[2][3].errback(KafkaError("second"))
        producer.pieces[3][3].callback(None)
        flushed = Deferred.fromCoroutine(sender.flush())
        producer.flushes[0].callback(None)
        self.assertEqual(str(self.failureResultOf(flushed, KafkaError).value), "first")
        # the next flush starts clean
        sender.add(_chunk(1))
        producer.pieces[4][3].callback(None)
        flushed = Deferred.fromCoroutine(sender.flush())
        producer.flushes[1].callback(None)
        self.assertIsNone(self.successResultOf(flushed))
