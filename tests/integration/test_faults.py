"""
Fault injection (Jepsen-style): a seeded random schedule of kills, freezes and
clean restarts of leaders, followers and the controller under continuous
acks=all load, then a checker for lost, duplicated and reordered acknowledged
records and for diverging replicas.

The short run (about a minute) is part of the test suite.  The long run is
behind environment variables::

    KAFKATW_FAULT_SECONDS=900 KAFKATW_FAULT_SEED=42 ./scripts/test.sh tests/integration/test_faults.py

Every run prints its seed and the faults it injected; a failure names them, so
a schedule can be replayed with C{KAFKATW_FAULT_SEED}.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from twisted.trial import unittest

from kafkatw.testing import running_cluster, wait_for

from .test_replication import consume_all, create_topic, isr_of, partition_info, segment_bytes

_OVERRIDES = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "zookeeper.session.timeout.ms": "3000",
}
_TOPIC = "faults"
_PARTITIONS = 2


def controller_id(bootstrap: str) -> int:
    try:
        return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).controller_id
    except Exception:
        return -1


class FaultInjectionTests(unittest.TestCase):
    timeout = int(os.environ.get("KAFKATW_FAULT_SECONDS", "60")) * 3 + 300

    def test_random_faults_lose_nothing_acknowledged(self) -> None:
        """Every acknowledged record survives the schedule once, in order; the replicas end identical."""
        seconds = float(os.environ.get("KAFKATW_FAULT_SECONDS", "60"))
        seed = int(os.environ.get("KAFKATW_FAULT_SEED", str(random.SystemRandom().randrange(1 << 31))))
        rng = random.Random(seed)
        history: list[str] = []

        def note(text: str) -> None:
            line = f"[{time.monotonic() - started:7.2f} s] {text}"
            history.append(line)
            print(line, file=sys.stderr, flush=True)

        started = time.monotonic()
        note(f"seed {seed}, {seconds:.0f} s of faults")
        with running_cluster(3, overrides=_OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, _TOPIC, partitions=_PARTITIONS, config={"min.insync.replicas": "2"})
            for p in range(_PARTITIONS):
                wait_for(lambda p=p: isr_of(bootstrap, _TOPIC, p) == [0, 1, 2], what="a full ISR")
            acked: dict[int, dict[int, bytes]] = {p: {} for p in range(_PARTITIONS)}
            failed: list[str] = []

            def delivered(err, message):
                if err is not None:
                    failed.append(str(err))
                else:
                    acked[message.partition()][message.offset()] = message.value()

            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                 "linger.ms": 2, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                                 "socket.timeout.ms": 10000})
            sent = [0] * _PARTITIONS

            def send_for(duration_s: float) -> None:
                """Produce at a bounded rate (about 400 records/s) for C{duration_s}."""
                end = time.monotonic() + duration_s
                while time.monotonic() < end:
                    for p in range(_PARTITIONS):
                        producer.produce(_TOPIC, f"p{p}-{sent[p]:07d}".encode(), partition=p, on_delivery=delivered)
                        sent[p] += 1
                    producer.poll(0.005)

            faults = 0
            send_for(2)
            while time.monotonic() - started < seconds:
                leader = (partition_info(bootstrap, _TOPIC, rng.randrange(_PARTITIONS)) or (-1,))[0]
                controller = controller_id(bootstrap)
                kind = rng.choice(["kill", "freeze", "restart"])
                role = rng.choice(["leader", "controller", "any"])
                victim = {"leader": leader, "controller": controller}.get(role, -1)
                if victim not in range(3):
                    victim = rng.randrange(3)
                broker = cluster[victim]
                faults += 1
                note(f"fault {faults}: {kind} broker {victim} ({role}; leader {leader}, controller {controller})")
                if kind == "kill":
                    broker.kill()
                    send_for(rng.uniform(1, 4))
                    broker.start()
                elif kind == "freeze":
                    broker.popen.send_signal(signal.SIGSTOP)
                    send_for(rng.uniform(1, 6))  # past the 3 s session timeout, sometimes
                    broker.popen.send_signal(signal.SIGCONT)
                else:
                    broker.stop()
                    send_for(rng.uniform(0.5, 2))
                    broker.start()
                note(f"broker {victim} back")
                send_for(rng.uniform(1, 3))
                # before the next fault, let the cluster heal: every partition fully in sync
                for p in range(_PARTITIONS):
                    wait_for(lambda p=p: isr_of(bootstrap, _TOPIC, p) == [0, 1, 2],
                             timeout_s=60, what=f"partition {p} back in sync after fault {faults}; {history}")
            remaining = producer.flush(120)
            note(f"{faults} faults; sent {sum(sent)}, acknowledged {sum(len(a) for a in acked.values())}, "
                 f"failed {len(failed)}, unflushed {remaining}")
            self.assertGreater(faults, 0, "no fault was injected")
            self.assertEqual(remaining, 0, history)
            self.assertEqual(failed, [], history)
            for p in range(_PARTITIONS):
                self.assertEqual(len(acked[p]), sent[p], history)
                records = consume_all(bootstrap, _TOPIC, p, max(acked[p]) + 1, timeout_s=60)
                offsets = [offset for offset, _ in records]
                self.assertEqual(offsets, list(range(len(records))), history)
                values = [value for _, value in records]
                expected = [f"p{p}-{i:07d}".encode() for i in range(sent[p])]
                # idempotence: no duplicates; order: as sent; nothing acknowledged lost
                self.assertEqual(values, expected, f"partition {p}: {history}")
                for offset, value in acked[p].items():
                    self.assertEqual(records[offset][1], value, history)
                wait_for(lambda p=p: len({segment_bytes(cluster, b, _TOPIC, p) for b in range(3)}) == 1,
                         timeout_s=30, what=f"identical replicas of partition {p}; {history}")
