"""Tests of C{twistd kafkatw}'s options (kafkatw.tap) and the Kafka-named config."""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile

from twisted.internet.testing import MemoryReactorClock
from twisted.python import usage
from twisted.python.failure import Failure
from twisted.trial import unittest

from kafkatw import tap
from kafkatw.broker.server import BrokerStartupError, embedded_zookeeper_port
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.properties import parse_properties
from kafkatw.tap import Options


def parse(*args: str) -> Options:
    options = Options()
    options.parseOptions(list(args))
    return options


class OptionsTests(unittest.TestCase):
    def test_flags_map_to_kafka_keys(self) -> None:
        config = parse("--broker-id", "3", "--listeners", "tcp:9093:interface=127.0.0.1", "--log-dirs", "/a,/b",
                       "--zookeeper", "zk1:2181,zk2:2181/kafka").broker_config
        self.assertEqual(config["broker.id"], 3)
        self.assertEqual(config["listeners"], ["tcp:9093:interface=127.0.0.1"])
        self.assertEqual(config["log.dirs"], ["/a", "/b"])
        self.assertEqual(config["zookeeper.connect"], "zk1:2181,zk2:2181/kafka")

    def test_layering_defaults_file_flags_overrides(self) -> None:
        fd, path = tempfile.mkstemp(suffix=".properties")
        self.addCleanup(os.unlink, path)
        with os.fdopen(fd, "w") as f:
            f.write("# a stock server.properties\nbroker.id=7\nnum.partitions=4\nlog.retention.hours=1\n"
                    "num.network.threads=3\n")
        options = parse("--config", path, "--broker-id", "8", "--override", "num.partitions=6")
        config = options.broker_config
        self.assertEqual((config["broker.id"], config["num.partitions"]), (8, 6))
        self.assertEqual(config["log.retention.ms"], 3600000)
        self.assertEqual(config["log.segment.bytes"], 1073741824)  # Kafka's default
        self.assertEqual(options.ignored_keys, ["num.network.threads"])

    def test_embedded_zookeeper_takes_the_single_broker_internal_topic_replication(self) -> None:
        """
        Kafka's shipped single-broker server.properties sets the internal
        topics' replication to 1/1; a broker on an embedded ZooKeeper (the
        README's one broker) does the same unless told otherwise.
        """
        keys = ("transaction.state.log.replication.factor", "transaction.state.log.min.isr")
        config = parse("--zookeeper", "embedded").broker_config
        self.assertEqual([config[k] for k in keys], [1, 1])
        self.assertEqual(parse("--zookeeper", "embedded:2191").broker_config["transaction.state.log.min.isr"], 1)
        kept = parse("--zookeeper", "embedded", "--override", "transaction.state.log.replication.factor=3",
                     "--override", "transaction.state.log.min.isr=2").broker_config
        self.assertEqual([kept[k] for k in keys], [3, 2])
        real = parse("--zookeeper", "zk1:2181").broker_config  # a real ensemble: Kafka's defaults
        self.assertEqual([real[k] for k in keys], [3, 2])

    def test_the_shipped_server_properties_run_transactions_on_one_broker(self) -> None:
        path = os.path.join(os.path.dirname(__file__), "..", "..", "config", "server.properties")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        shipped = parse_properties(text)
        self.assertEqual({k: shipped.get(k) for k in ("transaction.state.log.replication.factor",
                                                      "transaction.state.log.min.isr")},
                         {"transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"})
        self.assertNotIn("not built yet", text)
        config = parse("--config", path, "--zookeeper", "zk1:2181").broker_config
        self.assertEqual(config["transaction.state.log.replication.factor"], 1)

    def test_bad_options_fail_fast(self) -> None:
        for args in (
            ["--broker-id", "x"],
            ["--broker-id", "-1"],
            ["--override", "no.such.key=1"],
            ["--override", "novalue"],
            ["--override", "num.partitions=many"],
            ["--listeners", "SSL://127.0.0.1:9093"],
            ["--config", "/nonexistent/server.properties"],
            ["--log-dirs", ""],
        ):
            self.assertRaises(usage.UsageError, parse, *args)

    def test_values_the_broker_cannot_honour_are_refused(self) -> None:
        for args, says in [
            (["--override", "log.cleanup.policy=shred"], "must be delete, compact or compact,delete"),
            (["--override", "log.cleanup.policy=compact,shred"], "must be delete, compact or compact,delete"),
            (["--override", "log.message.timestamp.type=WallClock"], "CreateTime or LogAppendTime"),
            (["--zookeeper", "embedded:0"], "1..65535"),
            (["--zookeeper", "embedded:two"], "1..65535"),
        ]:
            with self.assertRaises(usage.UsageError) as raised:
                parse(*args)
            self.assertIn(says, str(raised.exception))
        self.assertEqual(parse("--override", "log.cleanup.policy=delete").broker_config["log.cleanup.policy"], "delete")
        self.assertEqual(parse("--override", "log.cleanup.policy=delete,compact").broker_config["log.cleanup.policy"],
                         "compact,delete")
        self.assertEqual(parse("--zookeeper", "embedded:2182").broker_config["zookeeper.connect"], "embedded:2182")

    def test_embedded_zookeeper_port(self) -> None:
        self.assertEqual(embedded_zookeeper_port("embedded", {}), 2181)
        self.assertEqual(embedded_zookeeper_port("embedded", {"KAFKATW_EMBEDDED_ZOOKEEPER_PORT": "2190"}), 2190)
        self.assertEqual(embedded_zookeeper_port("embedded:2191", {"KAFKATW_EMBEDDED_ZOOKEEPER_PORT": "2190"}), 2191)
        self.assertIsNone(embedded_zookeeper_port("127.0.0.1:2181/kafka", {}))
        with self.assertRaises(ValueError) as raised:
            embedded_zookeeper_port("embedded", {"KAFKATW_EMBEDDED_ZOOKEEPER_PORT": "x"})
        self.assertIn("KAFKATW_EMBEDDED_ZOOKEEPER_PORT", str(raised.exception))

    def test_usage_error_under_twistd_prints_the_line_first_and_exits_2(self) -> None:
        stderr = io.StringIO()
        self.patch(sys, "stderr", stderr)
        options = Options()
        options.parent = usage.Options()  # as twistd's ServerOptions sets it for its subcommand
        with self.assertRaises(SystemExit) as raised:
            options.parseOptions(["--override", "log.cleanup.policy=shred"])
        self.assertEqual(raised.exception.code, 2)
        first, pointer = stderr.getvalue().splitlines()
        self.assertEqual(first, "twistd kafkatw: bad value for log.cleanup.policy: 'shred'"
                                " (must be delete, compact or compact,delete)")
        self.assertIn("--help", pointer)

    def test_kafka_listener_syntax(self) -> None:
        from kafkatw.broker.server import listener_endpoint

        self.assertEqual(listener_endpoint("PLAINTEXT://127.0.0.1:9092"), "tcp:9092:interface=127.0.0.1")
        self.assertEqual(listener_endpoint("PLAINTEXT://:9092"), "tcp:9092")
        self.assertEqual(listener_endpoint("SSL://127.0.0.1:9093"), "tcp:9093:interface=127.0.0.1")
        self.assertEqual(listener_endpoint("tcp:9094:interface=127.0.0.1"), "tcp:9094:interface=127.0.0.1")
        with self.assertRaises(ValueError):  # a TLS port would be registered as PLAINTEXT
            listener_endpoint("ssl:9093:privateKey=k.pem")


class _FakeTwistdOptions(dict):
    """twistd's ServerOptions as a subcommand's L{Options.parent} sees it: a dict of its options."""

    def __init__(self, **values: object) -> None:
        super().__init__({"syslog": False, "logfile": None, "nodaemon": True, **values})


class StartFailureTests(unittest.TestCase):
    def setUp(self) -> None:
        self.log_dir = tempfile.mkdtemp(prefix="kafkatw-tap-")
        self.addCleanup(shutil.rmtree, self.log_dir, True)
        self.registered: list = []
        self.exits: list = []
        self.exit_status = tap._ExitStatus(register=self.registered.append, exit=self.exits.append)
        self.patch(tap, "_exit_status", self.exit_status)
        self.stderr = io.StringIO()
        self.patch(sys, "__stderr__", self.stderr)

    def make(self, **twistd: object) -> tuple:
        options = parse("--log-dirs", self.log_dir)
        options.parent = _FakeTwistdOptions(**twistd)
        reactor = MemoryReactorClock()
        reactor.running = True
        reactor.stops = []
        reactor.stop = lambda: reactor.stops.append(True)
        server = tap.makeService(options, reactor)
        return reactor, server

    def test_the_http_port_serves_the_web_package(self) -> None:
        """The broker's HTTP port is wired here (the broker does not import L{kafkatw.web})."""
        from kafkatw.web import BrokerHttp

        _reactor, server = self.make()
        self.assertIsInstance(server.http, BrokerHttp)

    def fail_start(self, server: object, error: str) -> None:
        server.start_error = error
        server.ready.errback(Failure(BrokerStartupError(error)))

    def test_failure_stops_the_reactor_and_exits_1_with_the_line_on_stderr(self) -> None:
        reactor, server = self.make(logfile="broker.log")
        self.fail_start(server, "broker 0 failed to start: cannot listen")
        self.assertEqual(reactor.stops, [True])
        self.assertEqual(self.stderr.getvalue(), "broker 0 failed to start: cannot listen\n")
        self.assertEqual(self.exit_status.status, 1)
        self.assertEqual(self.registered, [self.exit_status.exit])
        self.exit_status.exit()
        self.assertEqual(self.exits, [1])

    def test_the_line_is_not_repeated_when_the_log_is_on_the_terminal(self) -> None:
        reactor, server = self.make()  # -n without --logfile: the log goes to stdout
        self.fail_start(server, "broker 0 failed to start: cannot listen")
        self.assertEqual(self.stderr.getvalue(), "")
        self.assertEqual(self.exit_status.status, 1)

    def test_a_start_abandoned_by_a_shutdown_is_no_failure(self) -> None:
        reactor, server = self.make(logfile="broker.log")
        server.ready.errback(Failure(BrokerStartupError("cancelled")))  # start_error stays None
        self.assertEqual(reactor.stops, [])
        self.assertEqual((self.exit_status.status, self.registered), (0, []))

    def test_no_failure_no_exit(self) -> None:
        self.exit_status.exit()
        self.assertEqual(self.exits, [])


class ConfigTests(unittest.TestCase):
    def test_properties_syntax(self) -> None:
        text = "a=1\n  b : 2\n# c=3\n! d=4\ne = x\\\n  y\nf\n"
        self.assertEqual(parse_properties(text), {"a": "1", "b": "2", "e": "xy", "f": ""})

    def test_topic_overrides(self) -> None:
        broker = BrokerConfig({"log.retention.ms": "1000"})
        effective = topic_log_config(broker, {"segment.bytes": "4096"})
        self.assertEqual((effective["retention.ms"], effective["segment.bytes"]), (1000, 4096))
        with self.assertRaises(ValueError) as raised:
            topic_log_config(broker, {"cleanup.policy": "shred"})
        self.assertIn("Invalid value shred for configuration cleanup.policy: must be delete, compact or compact,delete",
                      str(raised.exception))
        self.assertRaises(ValueError, topic_log_config, broker, {"unknown.key": "1"})


class OpenFilesLimitTests(unittest.TestCase):
    """Issue 32: the broker raises its soft open-files limit as far as the hard one allows."""

    def limits(self, soft: int, hard: int, refuse: BaseException | None = None) -> tuple[tuple[int, int], list]:
        calls: list = []

        def setrlimit(which: int, limits: tuple[int, int]) -> None:
            calls.append((which, limits))
            if refuse is not None:
                raise refuse

        result = tap.raise_open_files_limit(lambda which: (soft, hard), setrlimit)
        return result, calls

    def test_raised_to_the_hard_limit(self) -> None:
        import resource

        self.assertEqual(self.limits(1024, 524288), ((1024, 524288), [(resource.RLIMIT_NOFILE, (524288, 524288))]))

    def test_an_unlimited_hard_limit_takes_linuxs_default_ceiling(self) -> None:
        import resource

        result, calls = self.limits(1024, resource.RLIM_INFINITY)
        self.assertEqual(result, (1024, tap.OPEN_FILES_WITHOUT_HARD_LIMIT))
        self.assertEqual(calls, [(resource.RLIMIT_NOFILE, (tap.OPEN_FILES_WITHOUT_HARD_LIMIT, resource.RLIM_INFINITY))])

    def test_nothing_to_raise(self) -> None:
        self.assertEqual(self.limits(4096, 4096), ((4096, 4096), []))

    def test_a_refusal_is_logged_and_the_limit_kept(self) -> None:
        from twisted.internet.testing import EventLoggingObserver
        from twisted.logger import formatEvent, globalLogPublisher

        events = EventLoggingObserver.createWithCleanup(self, globalLogPublisher)
        result, calls = self.limits(1024, 8192, refuse=ValueError("not allowed"))
        self.assertEqual(result, (1024, 1024))
        self.assertEqual(len(calls), 1)
        self.assertIn("cannot raise the open files limit (ulimit -n) from 1024 to 8192: not allowed",
                      [formatEvent(e) for e in events])

    def test_the_real_limit_ends_at_the_hard_one(self) -> None:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        _, after = tap.raise_open_files_limit()
        self.assertEqual(resource.getrlimit(resource.RLIMIT_NOFILE)[0], after)
        self.assertEqual(after, hard if hard != resource.RLIM_INFINITY else max(soft, tap.OPEN_FILES_WITHOUT_HARD_LIMIT))


#: Allocates and frees eight 1 MiB buffers 50 times (after 3 rounds of warm-up), with
#: keep_freed_buffers() first when argv[1] is "1"; prints the minor page faults of the 50 rounds.
_FAULTS = """
import resource, sys
from kafkatw.tap import keep_freed_buffers
if sys.argv[1] == "1" and not keep_freed_buffers():
    sys.exit(3)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    bufs = [b"\\x01" * (1 << 20) for _ in range(8)]
    del bufs
before = faults()
for _ in range(50):
    bufs = [b"\\x01" * (1 << 20) for _ in range(8)]
    del bufs
print(faults() - before)
"""


class KeepFreedBuffersTests(unittest.TestCase):
    """L{tap.keep_freed_buffers}: glibc's malloc keeps large freed buffers for the next ones."""

    def test_sets_both_thresholds(self) -> None:
        calls: list = []
        done = tap.keep_freed_buffers(lambda param, value: calls.append((param, value)) or 1, environ={})
        self.assertTrue(done)
        self.assertEqual(calls, [(tap.M_MMAP_THRESHOLD, 32 * 1024 * 1024), (tap.M_TRIM_THRESHOLD, 64 * 1024 * 1024)])

    def test_a_refused_parameter(self) -> None:
        self.assertFalse(tap.keep_freed_buffers(lambda param, value: 0 if param == tap.M_TRIM_THRESHOLD else 1,
                                                environ={}))

    def test_a_persons_own_malloc_settings_are_left_alone(self) -> None:
        for name, value in (("MALLOC_MMAP_THRESHOLD_", "1"), ("MALLOC_TRIM_THRESHOLD_", "1"), ("MALLOC_TOP_PAD_", "1"),
                            ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")):
            calls: list = []
            self.assertFalse(tap.keep_freed_buffers(lambda *a: calls.append(a) or 1, environ={name: value}))
            self.assertEqual(calls, [], name)
        # other tunables are not malloc's
        self.assertTrue(tap.keep_freed_buffers(lambda *a: 1, environ={"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}))

    def test_no_page_faults_for_reused_buffers(self) -> None:
        """In a fresh process (glibc): without it each round faults its 8 MiB in again; with it, none."""
        import platform
        import subprocess

        if platform.libc_ver()[0] != "glibc":
            raise unittest.SkipTest("glibc's malloc only")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}

        def faults(keep: str) -> int:
            return int(subprocess.run([sys.executable, "-c", _FAULTS, keep], capture_output=True, text=True,
                                      check=True, timeout=60, env=env).stdout)

        self.assertGreater(faults("0"), 50 * 1000)  # 256 pages a MiB, 8 MiB a round: about 100,000
        self.assertLess(faults("1"), 500)
