"""
Integration test of the paper's ZooKeeper-coordinated consumer group
(L{kafkatw.client.zookeeper_group}) with a real ZooKeeper and a real broker.

Each consumer is a subprocess running L{BlockingZookeeperConsumerGroup} (so one
can be killed with SIGKILL); it prints every record it processes.  Records are
produced all along.  Checked: 6 partitions and 3 consumers give 2 each; a
fourth joins (2, 2, 1, 1); one is killed and one stopped cleanly; every record
is consumed, and the only duplicates are those the docs describe (the killed
consumer's records after its last commit, a suffix per partition).  The time
from the kill to its partitions being consumed again is printed.

Every wait is bounded.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import threading
import time
import unittest

from click.testing import CliRunner

from kafkatw.testing import running_cluster, wait_until

TOPIC = "zk-group-topic"
GROUP = "zk-group"
PARTITIONS = 6
SESSION_TIMEOUT_MS = 2000
AUTO_COMMIT_MS = 500
MAX_POLL_RECORDS = 50

_SCRIPT = r"""
import sys, threading
from kafkatw.client.blocking_group import BlockingZookeeperConsumerGroup
zk, bootstrap, group, topic, cid = sys.argv[1:6]
g = BlockingZookeeperConsumerGroup(
    group, [topic], zookeeper_connect=zk, bootstrap_servers=bootstrap, consumer_id=cid,
    auto_offset_reset="smallest", auto_commit_interval_ms=%(auto_commit)d, rebalance_backoff_ms=200,
    rebalance_max_retries=30, zookeeper_session_timeout_ms=%(session)d, fetch_max_wait_ms=100,
    max_poll_records=%(max_poll)d)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
last = None
while not stop.is_set():
    records = g.poll(100)
    out = []
    for r in records:
        out.append("R %%d %%d %%s" %% (r.partition, r.offset, r.value.decode()))
    current = sorted(p for _, p in g.assignment())
    if current != last:
        out.append("A " + ",".join(map(str, current)))
        last = current
    if out:
        sys.stdout.write("\n".join(out) + "\n")
        sys.stdout.flush()
g.close()
print("CLOSED", flush=True)
""" % {"auto_commit": AUTO_COMMIT_MS, "session": SESSION_TIMEOUT_MS, "max_poll": MAX_POLL_RECORDS}




class Member:
    """A consumer subprocess and what it printed (with arrival times)."""

    def __init__(self, name, zk, bootstrap):
        self.name = name
        self.popen = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, zk, bootstrap, GROUP, TOPIC, name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records = []  # (time, partition, offset, value)
        self.assignments = []  # (time, [partitions])
        self.closed = False
        self.lock = threading.Lock()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.popen.stderr), daemon=True).start()

    def _read(self):
        for line in self.popen.stdout:
            now = time.monotonic()
            parts = line.split()
            with self.lock:
                if parts and parts[0] == "R":
                    self.records.append((now, int(parts[1]), int(parts[2]), parts[3]))
                elif parts and parts[0] == "A":
                    self.assignments.append((now, [int(p) for p in parts[1].split(",")] if len(parts) > 1 else []))
                elif parts and parts[0] == "CLOSED":
                    self.closed = True

    @property
    def assignment(self):
        with self.lock:
            return self.assignments[-1][1] if self.assignments else None

    def stop(self):
        self.popen.stdin.write("stop\n")
        self.popen.stdin.flush()

    def kill(self):
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def cleanup(self):
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)


class ZookeeperGroupTests(unittest.TestCase):
    def test_join_kill_leave(self):
        started = time.monotonic()
        with running_cluster(brokers=1) as cluster:
            zk = cluster.zookeeper.connect_string + "/kafkatw"
            bootstrap = cluster[0].bootstrap
            from confluent_kafka import Producer
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], operation_timeout=10)[TOPIC].result(15)
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            produced = collections.defaultdict(int)  # partition -> count
            delivered = set()  # (partition, offset) acknowledged by the broker
            stop_producing = threading.Event()
            producer_done = threading.Event()

            def on_delivery(error, message):
                if error is None:
                    delivered.add((message.partition(), message.offset()))

            def produce():
                i = 0
                while not stop_producing.is_set():
                    for p in range(PARTITIONS):
                        producer.produce(TOPIC, f"{p}-{i}".encode(), partition=p, on_delivery=on_delivery)
                        produced[p] += 1
                    i += 1
                    producer.poll(0)
                    time.sleep(0.02)
                producer.flush(15)
                producer_done.set()

            members = {}
            try:
                threading.Thread(target=produce, daemon=True).start()
                for name in ("c1", "c2", "c3"):
                    members[name] = Member(name, zk, bootstrap)

                def sizes(names):
                    got = [members[n].assignment for n in names]
                    if any(a is None for a in got):
                        return None
                    if sorted(p for a in got for p in a) != list(range(PARTITIONS)):
                        return None
                    return sorted(len(a) for a in got)

                self.assertTrue(wait_until(lambda: sizes(["c1", "c2", "c3"]) == [2, 2, 2], 45),
                                self._debug(members))
                print(f"\n3 consumers stable after {time.monotonic() - started:.1f} s:",
                      {n: m.assignment for n, m in members.items()})

                members["c4"] = Member("c4", zk, bootstrap)
                self.assertTrue(wait_until(lambda: sizes(["c1", "c2", "c3", "c4"]) == [1, 1, 2, 2], 30),
                                self._debug(members))
                time.sleep(0.5)

                victim = members["c2"]
                victim_partitions = set(victim.assignment)
                killed_at = time.monotonic()
                victim.kill()
                survivors = ["c1", "c3", "c4"]

                def reconsumed():
                    firsts = {}
                    for n in survivors:
                        with members[n].lock:
                            for t, p, _, _ in members[n].records:
                                if p in victim_partitions and t > killed_at:
                                    firsts[p] = min(firsts.get(p, t), t)
                    return firsts if set(firsts) == victim_partitions else None

                self.assertTrue(wait_until(lambda: reconsumed() is not None, 30), self._debug(members))
                kill_to_reconsume_s = max(reconsumed().values()) - killed_at
                print(f"SIGKILL -> partitions {sorted(victim_partitions)} consumed again after"
                      f" {kill_to_reconsume_s:.2f} s (ZooKeeper session timeout {SESSION_TIMEOUT_MS} ms)")
                self.assertTrue(wait_until(lambda: sizes(survivors) == [2, 2, 2], 30), self._debug(members))

                members["c3"].stop()
                self.assertTrue(wait_until(lambda: members["c3"].closed, 20), self._debug(members))
                remaining = ["c1", "c4"]
                self.assertTrue(wait_until(lambda: sizes(remaining) == [3, 3], 30), self._debug(members))

                stop_producing.set()
                self.assertTrue(producer_done.wait(20))
                self.assertEqual(len(delivered), sum(produced.values()), "not every record was acknowledged")

                def consumed_all():
                    seen = set()
                    for m in members.values():
                        with m.lock:
                            seen.update((p, o) for _, p, o, _ in m.records)
                    consumed_all.missing = sorted(delivered - seen)
                    return not consumed_all.missing

                self.assertTrue(wait_until(consumed_all, 30),
                                f"records lost: {consumed_all.missing[:20]} ({len(consumed_all.missing)})\n"
                                + self._debug(members))
                for n in remaining:
                    members[n].stop()
                self.assertTrue(wait_until(lambda: all(members[n].closed for n in remaining), 20))
                self._check_duplicates(members, "c2", victim_partitions)
                self._check_describe(zk, bootstrap, produced)
                self._check_command_line(zk, bootstrap, produced)
            finally:
                stop_producing.set()
                for m in members.values():
                    m.cleanup()
        elapsed = time.monotonic() - started
        print(f"integration run took {elapsed:.1f} s; produced {sum(produced.values())} records")

    def _check_duplicates(self, members, victim, victim_partitions):
        by_record = collections.defaultdict(list)
        for name, m in members.items():
            for t, p, o, _ in m.records:
                by_record[(p, o)].append((name, t))
        duplicates = {k: v for k, v in by_record.items() if len(v) > 1}
        crash = {k: v for k, v in duplicates.items() if any(n == victim for n, _ in v)}
        other = {k: v for k, v in duplicates.items() if k not in crash}
        print(f"duplicates: {len(crash)} after the SIGKILL, {len(other)} at clean rebalances")
        # Crash window: per partition, a suffix of what the victim printed (after its last commit).
        for p in victim_partitions:
            printed = sorted(o for _, q, o, _ in members[victim].records if q == p)
            dup = sorted(o for (q, o) in crash if q == p)
            if dup:
                self.assertEqual(dup, printed[len(printed) - len(dup):], f"partition {p}: not a suffix")
                times = [t for t, q, o, _ in members[victim].records if q == p and o in set(dup)]
                # what was processed after the last auto commit (plus one poll in flight)
                self.assertLess(max(times) - min(times), AUTO_COMMIT_MS / 1000 + 1.0)
        self.assertFalse({p for p, _ in crash} - victim_partitions)
        # Clean rebalances: at most the last batch returned before each one.
        per_partition = collections.Counter(p for p, _ in other)
        for p, n in per_partition.items():
            self.assertLessEqual(n, 4 * MAX_POLL_RECORDS, f"partition {p}: {n} duplicates at clean rebalances")

    def _check_describe(self, zk, bootstrap, produced):
        from kafkatw.cli.zookeeper_groups import run

        lines = []
        run(zk, bootstrap, "describe", GROUP, echo=lines.append)
        text = "\n".join(lines)
        print(text)
        rows = [line.split() for line in text.splitlines() if line.startswith(GROUP)]
        self.assertEqual(len(rows), PARTITIONS)
        for row in rows:
            _, _, p, current, end, lag, owner = row
            self.assertEqual((int(current), int(end), int(lag), owner), (produced[int(p)], produced[int(p)], 0, "-"))

    def _check_command_line(self, zk, bootstrap, produced):
        from kafkatw.cli.main import main

        runner = CliRunner()
        result = runner.invoke(main, ["consumer-groups", "--zookeeper", zk, "--list"])
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn(GROUP, result.output.split())
        result = runner.invoke(main, ["consumer-groups", "--zookeeper", zk, "--bootstrap-server", bootstrap,
                                      "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-offset", "7",
                                      "--execute"])
        self.assertEqual(result.exit_code, 0, result.output)
        result = runner.invoke(main, ["consumer-groups", "--zookeeper", zk, "--bootstrap-server", bootstrap,
                                      "--describe", "--group", GROUP])
        rows = [line.split() for line in result.output.splitlines() if line.startswith(GROUP)]
        self.assertEqual({(r[3], r[5]) for r in rows}, {("7", str(produced[0] - 7))})
        # console-consumer as a member of the group: resumes at the committed offsets
        result = runner.invoke(main, ["console-consumer", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                                      "--group", GROUP, "--zookeeper", zk, "--max-messages", "12",
                                      "--property", "print.offset=true", "--timeout-ms", "20000"])
        self.assertEqual(result.exit_code, 0, result.output)
        offsets = [line.split("\t")[0] for line in result.stdout.splitlines() if line.startswith("Offset:")]
        self.assertEqual(len(offsets), 12, result.output)
        self.assertTrue(all(o in ("Offset:7", "Offset:8") for o in offsets[:1]), offsets)
        result = runner.invoke(main, ["consumer-groups", "--zookeeper", zk, "--delete", "--group", GROUP])
        self.assertEqual(result.exit_code, 0, result.output)
        result = runner.invoke(main, ["consumer-groups", "--zookeeper", zk, "--list"])
        self.assertNotIn(GROUP, result.output.split())

    def _debug(self, members):
        out = []
        for n, m in members.items():
            out.append(f"{n}: assignments={m.assignments[-5:]} records={len(m.records)} rc={m.popen.poll()}"
                       f" stderr={''.join(m.stderr)[-1500:]}")
        return "\n".join(out)


if __name__ == "__main__":
    unittest.main()
