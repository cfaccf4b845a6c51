"""
Moving a replica between the log dirs of one broker (AlterReplicaLogDirs,
KIP-113): L{kafkatw.broker.replica_alter_log_dirs.ReplicaAlterLogDirsManager}
on real logs in two temporary log dirs, driven by a twisted Clock (no sleeps):
records appended during the move are all in the log after the swap, offsets,
leader epochs, producer state and high watermark intact; moves to the same
dir or to unknown dirs; a restart in the middle of a move resumes it; a crash
between the swap's two renames is finished at start-up; DescribeLogDirs shows
the future replica.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.replica_alter_log_dirs import ReplicaAlterLogDirsManager
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.errors import ErrorCode
from kafkatw.protocol.batch import build_batch, parse_batch_headers
from kafkatw.storage.future_log import delete_dir_name, future_dir_name, parse_moving_dir
from kafkatw.storage.log_manager import LogManager

_E = ErrorCode
_CONFIG = {"replica.fetch.max.bytes": 400, "replica.fetch.backoff.ms": 100, "log.segment.delete.delay.ms": 1000}


def batch(n: int, value: bytes = b"v", producer_id: int = -1, sequence: int = -1) -> bytes:
    return build_batch([(None, value)] * n, timestamp_ms=1_700_000_000_000, producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence)


def values(log: Any) -> list[tuple[int, int]]:
    """(offset, leader epoch of its batch) of every record in the log, from its bytes."""
    out = []
    for region in log.read(log.log_start_offset, 1 << 30):
        data = os.pread(region.fileno, region.length, region.position)
        for h in parse_batch_headers(data, True, None):
            out.extend((o, h.partition_leader_epoch) for o in range(h.base_offset, h.last_offset + 1))
    return out


class MoveHarness:
    """A LogManager over log dirs a and b, a stub replica manager, the mover and a Clock."""

    def __init__(self, test: unittest.TestCase, root: str | None = None) -> None:
        self.root = root or tempfile.mkdtemp(dir=test.mktemp_root)
        self.a, self.b = os.path.join(self.root, "a"), os.path.join(self.root, "b")
        self.clock = Clock()
        defaults = topic_log_config(BrokerConfig({"log.dirs": f"{self.a},{self.b}", "log.segment.bytes": 2048}), {})
        self.log_manager = LogManager([self.a, self.b], defaults, now_ms=lambda: 1_700_000_000_000)
        self.log_manager.load()
        self.replica_manager = SimpleNamespace(log_manager=self.log_manager, partitions={}, offline_partitions={})
        self.mover = ReplicaAlterLogDirsManager(self.replica_manager, self.clock, _CONFIG)

    def host(self, topic: str = "t", partition: int = 0, log_dir: str | None = None) -> Any:
        if log_dir is not None:
            self.log_manager.preferred_log_dirs[(topic, partition)] = log_dir
        log = self.log_manager.get_or_create(topic, partition)
        p = self.replica_manager.partitions[(topic, partition)] = SimpleNamespace(log=log)
        return p

    def run(self, limit: int = 1000) -> None:
        for _ in range(limit):
            if not self.mover._moving:
                return
            self.clock.advance(0.1)
        raise AssertionError("the move did not finish")


class MoveTestCase(unittest.TestCase):
    """Tests on MoveHarnesses: each test's harnesses in a temporary root, removed after it."""

    def setUp(self) -> None:
        self.mktemp_root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.mktemp_root, True)

    def hosted(self, batches: int, records: int, prefix: bytes) -> tuple[MoveHarness, Any]:
        """A harness whose t-0 is in log dir a, with C{batches} batches of C{records} records each.

        The values are C{prefix} and the batch's number: C{prefix}0, C{prefix}1, ...
        """
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        for i in range(batches):
            p.log.append(batch(records, prefix + b"%d" % i), 0)
        return h, p

    def crashed_between_the_renames(self) -> tuple[MoveHarness, list]:
        """The state the swap leaves after its first rename: a copy complete in b, the old log renamed.

        Returns the harness (its log manager closed) and the log's L{values}.
        """
        h, p = self.hosted(5, 4, b"c")
        expected = values(p.log)
        h.log_manager.close()
        move_id = "ab" * 16
        shutil.copytree(os.path.join(h.a, "t-0"), os.path.join(h.b, future_dir_name("t", 0, move_id)))
        os.rename(os.path.join(h.a, "t-0"), os.path.join(h.a, delete_dir_name("t", 0, move_id)))
        return h, expected


class ReplicaAlterLogDirsTests(MoveTestCase):

    def test_records_appended_during_the_move_are_all_there_after_the_swap(self) -> None:
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        log = p.log
        log.maybe_assign_epoch_start_offset(0, 0)
        for i in range(10):
            log.append(batch(3, b"e0-%d" % i, producer_id=7, sequence=3 * i), 0)
        log.maybe_assign_epoch_start_offset(2, log.log_end_offset)
        log.update_high_watermark(25)
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)
        future = h.log_manager.future_logs[("t", 0)]
        self.assertEqual(os.path.dirname(future.directory), h.b)
        self.assertIsNotNone(parse_moving_dir(os.path.basename(future.directory)))
        h.mover.step()  # one step of at most 400 bytes: not caught up
        self.assertLess(future.log_end_offset, log.log_end_offset)
        appended = 0
        while ("t", 0) in h.log_manager.future_logs and appended < 40:
            log.append(batch(2, b"e2-%d" % appended, producer_id=7, sequence=30 + 2 * appended), 2)
            appended += 1
            h.mover.step()
        h.run()
        new = h.log_manager.get("t", 0)
        self.assertIsNot(new, log)
        self.assertIs(p.log, new)
        self.assertEqual(h.log_manager.log_dir_of("t", 0), h.b)
        self.assertEqual(new.directory, os.path.join(h.b, "t-0"))
        self.assertEqual(values(new), values(log))
        self.assertEqual(new.log_end_offset, 30 + 2 * appended)
        self.assertEqual(new.leader_epoch_cache.entries, log.leader_epoch_cache.entries)
        self.assertEqual(new.high_watermark, 25)
        self.assertEqual(new.producer_state.snapshot(0), log.producer_state.snapshot(0))
        # the producer's next batch is in sequence on the new log; a retry of its last one is a duplicate
        self.assertTrue(new.append(batch(2, b"retry", producer_id=7, sequence=30 + 2 * (appended - 1)), 2).duplicate)
        self.assertFalse(new.append(batch(1, b"next", producer_id=7, sequence=30 + 2 * appended), 2).duplicate)
        # the old log waits under its -delete name for the delete delay, then goes
        self.assertEqual([n for n in os.listdir(h.a) if n.startswith("t-0")],
                         [os.path.basename(log.directory)])
        self.assertTrue(log.directory.endswith("-delete"))
        h.clock.advance(1.0)
        self.assertFalse(os.path.exists(log.directory))
        self.assertEqual(h.mover.moves_completed, 1)

    def test_a_move_to_its_own_dir_does_nothing(self) -> None:
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        p.log.append(batch(5), 0)
        self.assertEqual(h.mover.alter("t", 0, h.a), _E.none)
        self.assertEqual(h.log_manager.future_logs, {})
        self.assertEqual(h.clock.getDelayedCalls(), [])
        self.assertEqual(sorted(os.listdir(h.b)), sorted(n for n in os.listdir(h.b) if not n.startswith("t-0")))

    def test_a_move_back_to_its_own_dir_cancels_the_move_under_way(self) -> None:
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        for _ in range(20):
            p.log.append(batch(5), 0)
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)
        future_path = h.log_manager.future_logs[("t", 0)].directory
        h.mover.step()
        self.assertEqual(h.mover.alter("t", 0, h.a), _E.none)
        self.assertEqual(h.log_manager.future_logs, {})
        self.assertFalse(os.path.exists(future_path))
        h.clock.advance(1)
        self.assertIs(h.log_manager.get("t", 0), p.log)

    def test_unknown_dirs_are_refused(self) -> None:
        h = MoveHarness(self)
        h.host(log_dir=h.a)
        for path in (os.path.join(h.root, "c"), "b", ""):
            self.assertEqual(h.mover.alter("t", 0, path), _E.log_dir_not_found, path)
        self.assertEqual(h.log_manager.future_logs, {})

    def test_offline_dirs_and_partitions_are_storage_errors(self) -> None:
        h = MoveHarness(self)
        h.host(log_dir=h.a)
        h.replica_manager.offline_partitions[("t", 1)] = h.a
        self.assertEqual(h.mover.alter("t", 1, h.b), _E.kafka_storage_error)
        h.log_manager.failure_channel.maybe_add_offline_log_dir(h.b, "test")
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.kafka_storage_error)

    def test_a_replica_not_here_yet_is_created_in_the_dir_asked_for(self) -> None:
        h = MoveHarness(self)
        self.assertEqual(h.mover.alter("new", 0, h.b), _E.replica_not_available)
        h.host("other", 0)  # b would get the next new log anyway; make a the emptier dir
        h.host("other", 1, log_dir=h.b)
        h.host("new", 0)
        self.assertEqual(h.log_manager.log_dir_of("new", 0), h.b)

    def test_truncation_of_the_current_log_during_the_move(self) -> None:
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        log = p.log
        log.maybe_assign_epoch_start_offset(0, 0)
        for i in range(30):
            log.append(batch(2, b"x%d" % i), 0)
        h.mover.alter("t", 0, h.b)
        for _ in range(3):
            h.mover.step()
        future = h.log_manager.future_logs[("t", 0)]
        self.assertGreater(future.log_end_offset, 4)
        # a new leader (epoch 1) had fewer records: this follower truncates and takes its batches
        log.truncate_to(4)
        log.maybe_assign_epoch_start_offset(1, 4)
        for i in range(3):
            log.append(batch(3, b"y%d" % i), 1)
        expected = values(log)
        h.run()
        new = h.log_manager.get("t", 0)
        self.assertEqual(h.log_manager.log_dir_of("t", 0), h.b)
        self.assertEqual(values(new), expected)
        self.assertEqual([e for _, e in values(new)], [0] * 4 + [1] * 9)

    def test_the_log_start_offset_follows(self) -> None:
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        for i in range(30):
            p.log.append(batch(2), 0)
        p.log.update_high_watermark(60)
        p.log.maybe_increment_log_start_offset(11)
        h.mover.alter("t", 0, h.b)
        h.mover.step()
        p.log.maybe_increment_log_start_offset(31)
        expected = values(p.log)
        h.run()
        new = h.log_manager.get("t", 0)
        self.assertEqual(new.log_start_offset, 31)
        self.assertEqual(values(new), expected)

    def test_a_restart_in_the_middle_of_a_move_resumes_it(self) -> None:
        h, p = self.hosted(20, 4, b"r")
        expected = values(p.log)
        h.mover.alter("t", 0, h.b)
        h.mover.step()
        copied = h.log_manager.future_logs[("t", 0)].log_end_offset
        self.assertTrue(0 < copied < 80)
        h.mover.stop()
        h.log_manager.close()
        again = MoveHarness(self, h.root)
        self.assertEqual(again.log_manager.log_dir_of("t", 0), again.a)
        self.assertEqual(again.log_manager.future_log_dir_of("t", 0), again.b)
        self.assertEqual(again.log_manager.future_logs[("t", 0)].log_end_offset, copied)
        again.host()
        again.mover.start()
        again.run()
        self.assertEqual(again.log_manager.log_dir_of("t", 0), again.b)
        self.assertEqual(values(again.log_manager.get("t", 0)), expected)

    def test_a_crash_between_the_two_renames_is_finished_at_start(self) -> None:
        h, expected = self.crashed_between_the_renames()
        again = MoveHarness(self, h.root)
        self.assertEqual(again.log_manager.log_dir_of("t", 0), again.b)
        self.assertEqual(values(again.log_manager.get("t", 0)), expected)
        self.assertEqual(again.log_manager.future_logs, {})
        self.assertEqual([n for n in os.listdir(again.a) if n.startswith("t-0")], [])

    def test_a_leftover_delete_dir_is_removed_and_a_future_log_without_current_log_too(self) -> None:
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        p.log.append(batch(2), 0)
        h.log_manager.close()
        os.makedirs(os.path.join(h.a, delete_dir_name("t", 0, "cd" * 16)))
        os.makedirs(os.path.join(h.b, future_dir_name("gone", 0, "ef" * 16)))
        again = MoveHarness(self, h.root)
        self.assertEqual(again.log_manager.log_dir_of("t", 0), again.a)
        self.assertEqual(sorted(n for n in os.listdir(again.a) + os.listdir(again.b) if "-future" in n or
                                "-delete" in n), [])

    def test_deleting_the_partition_removes_its_future_log(self) -> None:
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        for _ in range(20):
            p.log.append(batch(5), 0)
        h.mover.alter("t", 0, h.b)
        future_path = h.log_manager.future_logs[("t", 0)].directory
        h.mover.step()
        h.log_manager.delete("t", 0)
        h.clock.advance(1)
        self.assertFalse(os.path.exists(future_path))
        self.assertEqual(h.mover._moving, [])

    @settings(max_examples=15, deadline=None)
    @given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), min_size=1, max_size=25),
           st.integers(0, 25))
    def test_any_interleaving_of_appends_and_steps_ends_with_the_same_log(self, appends: list, start_at: int) -> None:
        """Appends (records, steps after it), the move started after C{start_at} of them."""
        h = MoveHarness(self)
        p = h.host(log_dir=h.a)
        for i, (n, steps) in enumerate(appends):
            if i == start_at:
                self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)
            p.log.append(batch(n, b"%d" % i), 0)
            for _ in range(steps):
                h.mover.step()
        if start_at >= len(appends):
            h.mover.alter("t", 0, h.b)
        h.run()
        self.assertEqual(h.log_manager.log_dir_of("t", 0), h.b)
        total = sum(n for n, _ in appends)
        self.assertEqual(values(h.log_manager.get("t", 0)), [(o, 0) for o in range(total)])
        h.mover.stop()
        h.log_manager.close()


class AlterReplicaLogDirsApiTests(unittest.TestCase):
    """AlterReplicaLogDirs v1/v2 and DescribeLogDirs through KafkaApis, a broker with log dirs a and b."""

    def harness(self) -> Any:
        from kafkatw.broker.replica_alter_log_dirs import ReplicaAlterLogDirsManager as Manager
        from tests.unit.test_broker import BrokerHarness

        h = BrokerHarness(self)
        h.second = h.directory + "-b"
        self.addCleanup(shutil.rmtree, h.second, True)
        lm = LogManager([h.directory, h.second], topic_log_config(h.config, {}),
                        now_ms=lambda: int(h.clock.seconds() * 1000))
        lm.load()
        self.addCleanup(lm.close)
        h.log_manager = h.replica_manager.log_manager = lm
        h.replica_manager.alter_log_dirs_manager = Manager(h.replica_manager, h.clock, _CONFIG)
        lm.preferred_log_dirs[("t", 0)] = h.directory
        h.create_topic("t", 1)
        for i in range(30):
            self.assertEqual(h.produce("t", 0, batch(3, b"%d" % i)).error_code, _E.none)
        return h

    def alter(self, h: Any, version: int, path: str, partitions: list[int], topic: str = "t") -> dict:
        response = h.call(34, version, {"dirs": [{"path": path, "topics": [{"name": topic,
                                                                             "partitions": partitions}]}]})
        return {(t.topic_name, p.partition_index): p.error_code for t in response.results for p in t.partitions}

    def describe(self, h: Any) -> dict:
        response = h.call(35, 4, {"topics": None})
        return {(r.log_dir, t.name, p.partition_index, p.is_future_key): p.offset_lag
                for r in response.results for t in r.topics for p in t.partitions}

    def test_a_move_shows_the_future_replica_then_the_replica_in_its_new_dir(self) -> None:
        h = self.harness()
        self.assertEqual(self.alter(h, 2, h.second, [0]), {("t", 0): _E.none})
        moving = self.describe(h)
        self.assertEqual(moving, {(h.directory, "t", 0, False): 0, (h.second, "t", 0, True): 90})
        h.replica_manager.alter_log_dirs_manager.step()
        lag = self.describe(h)[(h.second, "t", 0, True)]
        self.assertTrue(0 < lag < 90, lag)
        for _ in range(100):
            h.clock.advance(0.1)
        self.assertEqual(self.describe(h), {(h.second, "t", 0, False): 0})
        self.assertEqual(h.replica_manager.partitions[("t", 0)].log.log_end_offset, 90)

    def test_errors(self) -> None:
        h = self.harness()
        self.assertEqual(self.alter(h, 1, "/no/such/dir", [0]), {("t", 0): _E.log_dir_not_found})
        self.assertEqual(self.alter(h, 1, h.second, [7]), {("t", 7): _E.replica_not_available})
        self.assertEqual(self.alter(h, 2, h.directory, [0]), {("t", 0): _E.none})
        self.assertEqual(h.log_manager.future_logs, {})

    def test_needs_alter_on_the_cluster(self) -> None:
        from kafkatw.security.acl import AclOperation, ResourceType
        from tests.unit.test_admin_tool_apis import DenyAll

        h = self.harness()
        h.apis.authorizer = DenyAll({(AclOperation.DESCRIBE, ResourceType.CLUSTER)})
        self.assertEqual(self.alter(h, 2, h.second, [0]), {("t", 0): _E.cluster_authorization_failed})
        self.assertEqual(h.log_manager.future_logs, {})
        h.apis.authorizer = DenyAll({(AclOperation.ALTER, ResourceType.CLUSTER)})
        self.assertEqual(self.alter(h, 2, h.second, [0]), {("t", 0): _E.none})


class ReassignPartitionsLogDirsTests(unittest.TestCase):
    """C{kafkatw reassign-partitions}'s C{log_dirs} entries, as Kafka's C{ReassignPartitionsCommand}."""

    def test_log_dirs_entries_become_moves(self) -> None:
        from kafkatw.cli.reassign_partitions import parse_reassignment, replica_log_dirs, validate_for_execute

        entries = parse_reassignment('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],'
                                     '"log_dirs":["any","/data/b"]},{"topic":"t","partition":1,"replicas":[2]}]}')
        self.assertEqual(validate_for_execute(entries), {("t", 0): [1, 2], ("t", 1): [2]})
        self.assertEqual(replica_log_dirs(entries), {("t", 0, 2): "/data/b"})

    def test_execute_retries_replicas_not_there_yet_until_the_timeout(self) -> None:
        from kafkatw.cli import reassign_partitions as tool

        answers = [{("t", 0, 1): _E.none, ("t", 1, 1): _E.replica_not_available},
                   {("t", 1, 1): _E.replica_not_available}, {("t", 1, 1): _E.none}]
        sent: list = []
        admin = SimpleNamespace(alter_replica_log_dirs=lambda moves, timeout_ms: (sent.append(dict(moves)),
                                                                                  answers.pop(0))[1])
        now = [0.0]
        lines: list[str] = []
        tool._execute_moves(admin, {("t", 0, 1): "/b", ("t", 1, 1): "/b"}, 10000, lines.append,
                            sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
        self.assertEqual(sent, [{("t", 0, 1): "/b", ("t", 1, 1): "/b"}, {("t", 1, 1): "/b"}, {("t", 1, 1): "/b"}])
        self.assertEqual(lines, ["Successfully started moving log directory to /b for replica t-0 with broker 1 ",
                                 "Successfully started moving log directory to /b for replica t-1 with broker 1 "])
        not_yet = {("t", 1, 1): _E.replica_not_available}
        admin = SimpleNamespace(alter_replica_log_dirs=lambda moves, timeout_ms: not_yet)
        with self.assertRaises(tool._Terse) as caught:
            tool._execute_moves(admin, {("t", 1, 1): "/b"}, 300, lines.append,
                                sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
        self.assertEqual(str(caught.exception), "Timed out before log directory move could be started for: t-1-1")
        admin = SimpleNamespace(alter_replica_log_dirs=lambda moves, timeout_ms: {("t", 1, 1): _E.log_dir_not_found})
        with self.assertRaises(tool._Terse) as caught:
            tool._execute_moves(admin, {("t", 1, 1): "/c"}, 300, lines.append)
        self.assertEqual(str(caught.exception), "Error: Failed to alter dir for t-1-1: LOG_DIR_NOT_FOUND")

    def test_verify_lines(self) -> None:
        from kafkatw.cli.reassign_partitions import format_replica_moves

        targets = {("t", 0, 1): "/b", ("t", 1, 1): "/b", ("t", 2, 1): "/b", ("t", 3, 1): "/b", ("t", 4, 1): "/b"}
        found = {("t", 0, 1): ("/b", None), ("t", 1, 1): ("/a", "/b"), ("t", 2, 1): ("/a", None),
                 ("t", 3, 1): ("/a", "/c")}
        lines, done = format_replica_moves(targets, found)
        self.assertFalse(done)
        self.assertEqual(lines, [
            "Reassignment of replica t-0-1 completed successfully.",
            "Reassignment of replica t-1-1 is still in progress.",
            "Partition t-2 on broker 1 is not being moved from log dir /a to /b.",
            "Partition t-3 on broker 1 is being moved to log dir /c instead of /b.",
            "Partition t-4 cannot be found in any live log directory on broker 1."])
        self.assertEqual(format_replica_moves({("t", 0, 1): "/b"}, {("t", 0, 1): ("/b", None)})[1], True)


class MoveEdgeCaseTests(MoveTestCase):
    """A swap that fails half way; a config change during a move."""

    def test_a_failed_second_rename_is_undone_and_the_current_log_serves_on(self) -> None:
        h, p = self.hosted(3, 2, b"f")
        expected = values(p.log)
        h.mover.alter("t", 0, h.b)
        future = h.log_manager.future_logs[("t", 0)]
        os.makedirs(os.path.join(h.b, "t-0"))  # the destination name is taken: the second rename fails
        with open(os.path.join(h.b, "t-0", "x"), "w"):
            pass
        h.mover.step()
        self.assertIs(h.log_manager.get("t", 0), p.log)
        self.assertEqual(p.log.directory, os.path.join(h.a, "t-0"))
        self.assertTrue(os.path.isdir(p.log.directory))
        self.assertEqual(h.log_manager.future_logs, {})
        self.assertFalse(os.path.exists(future.directory))
        self.assertEqual(h.mover._moving, [])
        p.log.append(batch(1, b"after"), 0)
        self.assertEqual(values(p.log), expected + [(6, 0)])

    def test_a_topic_config_change_reaches_the_future_log(self) -> None:
        h, p = self.hosted(20, 2, b"c")
        h.mover.alter("t", 0, h.b)
        h.log_manager.update_config("t", {"cleanup.policy": "compact"})
        self.assertTrue(h.log_manager.future_logs[("t", 0)].config.compact)
        h.log_manager.set_default_config(dict(h.log_manager.default_config, **{"segment.bytes": 4096}))
        self.assertEqual(h.log_manager.future_logs[("t", 0)].config.segment_bytes, 4096)
