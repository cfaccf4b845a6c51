"""
C{zookeeper.session.guard.enable} (issue 27 item 4): a broker killed with
SIGKILL while its host stays up leaves ZooKeeper at once -- its guard ends its
session -- so the controller replaces it, or a new controller is elected,
well before C{zookeeper.session.timeout.ms}; and a guard never ends the
session of a broker that is alive; a guard killed while its broker runs is
reported by the broker, and a guard exits after its broker's clean stop.

Real ZooKeeper and three broker processes; the session timeout is 10 s (the
test ZooKeeper's tickTime of 500 ms allows at most 20 ticks), and every
failover here must be done in under half of it.  Bounded: about 50 s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from confluent_kafka import Producer
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from twisted.trial import unittest

from kafkatw.testing import running_cluster, wait_for, wait_until

from .test_replication import create_topic, isr_of

_SESSION_TIMEOUT_MS = 10000
_OVERRIDES = {
    "zookeeper.session.timeout.ms": str(_SESSION_TIMEOUT_MS),
    "zookeeper.session.guard.enable": "true",
    "replica.fetch.backoff.ms": "100",
    "auto.leader.rebalance.enable": "false",
}
_TOPIC = "guarded"
_PARTITIONS = 3


def guard_pids(broker) -> list[int]:
    return [int(pid) for pid in re.findall(r"session guard started \(pid (\d+)\)", broker.log_text())]


def unexpected_exits(broker) -> list[str]:
    return re.findall(r"session guard \(pid \d+\) exited while the broker runs: [^;]*", broker.log_text())


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class SessionGuardTests(unittest.TestCase):
    timeout = 180

    def test_a_killed_broker_leaves_at_once_and_a_live_one_stays(self) -> None:
        with running_cluster(3, overrides=_OVERRIDES) as cluster:
            zk = KazooClient(hosts=cluster.zookeeper.connect_string + "/kafkatw", timeout=10)
            zk.start(30)
            self.addCleanup(zk.close)
            self.addCleanup(zk.stop)
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, _TOPIC, partitions=_PARTITIONS, config={"min.insync.replicas": "2"})
            for p in range(_PARTITIONS):
                wait_for(lambda p=p: isr_of(bootstrap, _TOPIC, p) == [0, 1, 2], what="a full ISR")

            def state(p: int) -> dict:
                return json.loads(zk.get(f"/brokers/topics/{_TOPIC}/partitions/{p}/state")[0])

            def controller_now() -> int | None:
                # /controller comes and goes (a guard ends its owner's session): never read it after exists()
                try:
                    return json.loads(zk.get("/controller")[0])["brokerid"]
                except NoNodeError:
                    return None

            def controller() -> int:
                wait_for(lambda: controller_now() is not None, 30, "a controller", interval_s=0.02)
                found = controller_now()
                return controller() if found is None else found

            # A guard given a live broker's log dirs waits; it ends nothing.
            live = cluster[controller()]
            stray = subprocess.Popen([sys.executable, "-m", "kafkatw.broker.session_guard", "--zookeeper",
                                      cluster.zookeeper.connect_string, "--", live.data_dir])
            self.addCleanup(lambda: stray.poll() is None and (stray.kill(), stray.wait(10)))
            self.assertFalse(wait_until(lambda: stray.poll() is not None, 2.0), "the stray guard exited")
            self.assertIsNotNone(zk.exists(f"/brokers/ids/{live.broker_id}"))

            # SIGKILL of a leader that is not the controller: gone and replaced well before the timeout.
            victim_id = next(state(p)["leader"] for p in range(_PARTITIONS) if state(p)["leader"] != controller())
            victim = cluster[victim_id]
            led = [p for p in range(_PARTITIONS) if state(p)["leader"] == victim_id]
            self.assertTrue(guard_pids(victim))
            killed = time.monotonic()
            victim.kill()
            wait_for(lambda: zk.exists(f"/brokers/ids/{victim_id}") is None, _SESSION_TIMEOUT_MS / 2000,
                     "the killed broker's registration to go", interval_s=0.02)
            wait_for(lambda: all(state(p)["leader"] not in (victim_id, -1) for p in led),
                     _SESSION_TIMEOUT_MS / 2000 - (time.monotonic() - killed), "new leaders", interval_s=0.02)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
            for p in led:
                producer.produce(_TOPIC, b"after the kill", partition=p)
            self.assertEqual(producer.flush(30), 0)

            # Started again: the session its predecessor recorded had been ended (by the guard) already.
            victim.start()
            self.assertRegex(victim.log_text(),
                             rf"ZooKeeper session 0x[0-9a-f]+ of broker {victim_id}'s previous process had ended already")
            self.assertEqual(len(guard_pids(victim)), 2)
            for p in range(_PARTITIONS):
                wait_for(lambda p=p: isr_of(bootstrap, _TOPIC, p) == [0, 1, 2], what="a full ISR again")
            old_controller = controller()
            killed = time.monotonic()
            cluster[old_controller].kill()
            wait_for(lambda: controller_now() not in (None, old_controller),
                     _SESSION_TIMEOUT_MS / 2000, "a new controller", interval_s=0.02)
            self.assertLess(time.monotonic() - killed, _SESSION_TIMEOUT_MS / 2000)

            # A guard killed while its broker runs: the broker (which reaps it) logs one warning.
            survivors = [b for b in cluster if b.broker_id != old_controller]
            unguarded = next(b for b in survivors if b.broker_id != controller())
            os.kill(guard_pids(unguarded)[-1], 9)
            wait_for(lambda: unexpected_exits(unguarded), 30, "the broker to log its guard's exit")
            self.assertEqual(unexpected_exits(unguarded), ["session guard (pid %d) exited while the broker runs: "
                                                           "A process has ended with a probable error condition: "
                                                           "process ended by signal 9." % guard_pids(unguarded)[-1]])
            self.assertFalse(running(guard_pids(unguarded)[-1]))

            # A clean stop: the broker closes its own session; its guard exits with nothing to do.
            stopping = cluster[controller()]
            pids = guard_pids(stopping)
            self.assertTrue(running(pids[-1]))
            stopping.stop()
            wait_for(lambda: not running(pids[-1]), 30, "the guard to exit after a clean stop")
            self.assertTrue(os.path.exists(os.path.join(stopping.data_dir, ".lock")))
            self.assertEqual(unexpected_exits(stopping), [])
