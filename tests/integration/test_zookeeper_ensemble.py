"""
Brokers on a three-member ZooKeeper ensemble (Debian's zookeeper 3.8 on
127.0.0.1, distinct ports), with members SIGKILLed and restarted one at a
time, then the ensemble's leader, then two at once (no quorum for 10 s),
under an idempotent acks=all load (librdkafka, confluent-kafka).

What it checks: every acknowledged record is read back once, in order; each
broker still serves on its own (Metadata names all three brokers and a
leader for every partition, a produce through it succeeds) and the
controller still acts on ZooKeeper (a topic created after the faults gets
leaders); no broker's ZooKeeper session was lost.  It reports the longest gap between two acknowledgements.

C{kafkatw zookeeper --myid N --server ...} runs a member: it waits for its
quorum, says when it serves and as what, and says how its server ended.

And a ZooKeeper session (L{kafkatw.zookeeper.bridge.ZooKeeperClient}, a
broker's) outlives an outage of the ensemble's quorum: it reconnects within
a few seconds of the quorum's return, before its session times out.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from twisted.internet import reactor, task, threads
from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ZooKeeperEnsembleFixture, find_free_port, wait_for
from kafkatw.zookeeper.bridge import ZooKeeperClient

from .test_replication import consume_all, create_topic, isr_of

_OVERRIDES = {
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "zookeeper.session.timeout.ms": "4000",
}
_TOPIC = "ensemble"
_PARTITIONS = 3
#: The longest gap between two acknowledgements the test accepts (s); a
#: ZooKeeper fault is not on the produce path, the figure is far lower.
_MAX_STALL_S = 8.0


class _Load:
    """
    An idempotent acks=all producer sending about 300 records/s round-robin
    over the partitions from its own thread, until L{stop} or C{max_s}.

    @ivar acked: partition -> offset -> value of every acknowledged record.
    @ivar ack_times: C{time.monotonic()} of every acknowledgement, in order.
    """

    def __init__(self, bootstrap: str, max_s: float) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 2, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
                                  "socket.timeout.ms": 10000})
        self.acked: dict[int, dict[int, bytes]] = {p: {} for p in range(_PARTITIONS)}
        self.ack_times: list[float] = []
        self.failed: list[str] = []
        self.sent = [0] * _PARTITIONS
        self._max_s = max_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acks-all-load", daemon=True)

    def _delivered(self, err, message) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked[message.partition()][message.offset()] = message.value()
            self.ack_times.append(time.monotonic())

    def _run(self) -> None:
        end = time.monotonic() + self._max_s
        while not self._stop.is_set() and time.monotonic() < end:
            for p in range(_PARTITIONS):
                self.producer.produce(_TOPIC, f"p{p}-{self.sent[p]:07d}".encode(), partition=p,
                                      on_delivery=self._delivered)
                self.sent[p] += 1
            self.producer.poll(0.01)

    def start(self) -> None:
        self._thread.start()

    def stop(self, flush_s: float = 60.0) -> int:
        """Stop sending; return how many records are still unacknowledged after C{flush_s}."""
        self._stop.set()
        self._thread.join(30)
        return self.producer.flush(flush_s)

    def longest_stall(self) -> float:
        times = self.ack_times
        return max((b - a for a, b in zip(times, times[1:])), default=float("inf"))


class ZooKeeperEnsembleTests(unittest.TestCase):
    timeout = 240

    def test_members_and_leader_killed_under_acks_all_load(self) -> None:
        """
        SIGKILL and restart each member of the ensemble in turn, then its
        leader, then two members (10 s without a quorum), while an
        idempotent acks=all producer runs: nothing acknowledged is lost or
        duplicated, no broker is stuck, no broker's session is lost.
        """
        started = time.monotonic()
        history: list[str] = []

        def note(text: str) -> None:
            line = f"[{time.monotonic() - started:6.2f} s] {text}"
            history.append(line)
            print(line, file=sys.stderr, flush=True)

        base = tempfile.mkdtemp(prefix="kafkatw-ensemble-")
        self.addCleanup(shutil.rmtree, base, True)
        ensemble = ZooKeeperEnsembleFixture(3, os.path.join(base, "zookeeper"))
        self.addCleanup(ensemble.stop)
        brokers: list[BrokerProcess] = []

        def stop_brokers() -> None:
            for broker in brokers:
                broker.stop()

        self.addCleanup(stop_brokers)
        connect = ensemble.start()
        note(f"ensemble {connect} serving after {ensemble.start_seconds:.2f} s; leader {ensemble.leader()}")
        for broker_id in range(3):
            brokers.append(BrokerProcess(broker_id, connect + "/kafkatw", base, _OVERRIDES).start())
        bootstrap = ",".join(b.bootstrap for b in brokers)
        create_topic(bootstrap, _TOPIC, partitions=_PARTITIONS, config={"min.insync.replicas": "2"})
        for p in range(_PARTITIONS):
            wait_for(lambda p=p: isr_of(bootstrap, _TOPIC, p) == [0, 1, 2], what=f"a full ISR of partition {p}")
        note("3 brokers, topic with 3 partitions in sync")

        load = _Load(bootstrap, max_s=90)
        load.start()
        wait_for(lambda: len(load.ack_times) > 100, timeout_s=20, what="acknowledgements before the faults")

        def fault(myid: int, role: str) -> None:
            ensemble.kill(myid)
            killed = time.monotonic()
            leader = wait_for(ensemble.leader, timeout_s=20, what=f"a leader after member {myid} was killed")
            note(f"killed member {myid} ({role}); leader {leader} after {time.monotonic() - killed:.2f} s")
            time.sleep(1.5)
            ensemble.restart(myid, timeout_s=30)
            note(f"member {myid} back ({ensemble.mode(myid)}); leader {ensemble.leader()}")
            time.sleep(0.5)

        for myid in (1, 2, 3):
            fault(myid, "leader" if ensemble.leader() == myid else "follower")
        fault(wait_for(ensemble.leader, timeout_s=20, what="the ensemble's leader"), "leader")
        # the quorum lost: the leader and a follower down for 10 s (longer than the sessions' 4 s)
        leader = wait_for(ensemble.leader, timeout_s=20, what="the ensemble's leader")
        follower = next(myid for myid in (1, 2, 3) if myid != leader)
        ensemble.kill(follower)
        ensemble.kill(leader)
        note(f"killed members {follower} and {leader} (leader): no quorum")
        time.sleep(10)
        ensemble.restart(leader, timeout_s=30)
        note(f"member {leader} back: quorum again; leader {ensemble.leader()}")
        time.sleep(2)
        ensemble.restart(follower, timeout_s=30)
        note(f"member {follower} back")
        time.sleep(0.5)
        unflushed = load.stop()
        stall = load.longest_stall()
        note(f"sent {sum(load.sent)}, acknowledged {sum(len(a) for a in load.acked.values())},"
             f" failed {len(load.failed)}, unflushed {unflushed}; longest stall {stall:.3f} s")

        self.assertEqual(unflushed, 0, history)
        self.assertEqual(load.failed, [], history)
        for p in range(_PARTITIONS):
            self.assertEqual(len(load.acked[p]), load.sent[p], history)
            records = consume_all(bootstrap, _TOPIC, p, max(load.acked[p]) + 1, timeout_s=30)
            self.assertEqual([offset for offset, _ in records], list(range(len(records))), history)
            # nothing acknowledged lost, no duplicate (idempotence), in the order sent
            self.assertEqual([value for _, value in records],
                             [f"p{p}-{i:07d}".encode() for i in range(load.sent[p])], f"partition {p}: {history}")
            for offset, value in load.acked[p].items():
                self.assertEqual(records[offset][1], value, history)
        self.assertLess(stall, _MAX_STALL_S, history)

        # no broker stuck: each one alone answers Metadata with every broker and a leader per partition ...
        for broker in brokers:
            def serves(broker: BrokerProcess = broker) -> bool:
                meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5)
                partitions = meta.topics[_TOPIC].partitions
                return (sorted(meta.brokers) == [0, 1, 2] and meta.controller_id in (0, 1, 2)
                        and all(partitions[p].leader in (0, 1, 2) for p in range(_PARTITIONS)))

            wait_for(serves, timeout_s=20, what=f"broker {broker.broker_id}'s metadata; {history}")
            # ... and takes an acks=all produce to every partition (librdkafka sends it to the leaders)
            results: list = []
            producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                 "message.timeout.ms": 20000})
            for p in range(_PARTITIONS):
                producer.produce(_TOPIC, b"after", partition=p, on_delivery=lambda err, msg: results.append(err))
            self.assertEqual(producer.flush(30), 0, history)
            self.assertEqual(results, [None] * _PARTITIONS, f"broker {broker.broker_id}: {history}")
        # the controller still acts through ZooKeeper: a new topic gets leaders and a full ISR
        create_topic(bootstrap, "after-faults", partitions=2)
        for p in range(2):
            wait_for(lambda p=p: isr_of(bootstrap, "after-faults", p) == [0, 1, 2], timeout_s=20,
                     what=f"after-faults-{p} in sync; {history}")
        # every broker's session moved between members (the leader's death suspends them all) and
        # none was lost, not even to the quorum outage: the registrations never blinked
        moved = {b.broker_id: b.log_text().count("ZooKeeper session SUSPENDED") for b in brokers}
        lost = {b.broker_id: b.log_text().count("ZooKeeper session lost") for b in brokers}
        note(f"ZooKeeper sessions suspended {moved}, lost {lost} per broker;"
             f" test took {time.monotonic() - started:.1f} s")
        self.assertTrue(all(moved.values()), moved)
        self.assertEqual(lost, {0: 0, 1: 0, 2: 0}, history)


class QuorumOutageTests(unittest.TestCase):
    timeout = 120

    async def test_session_outlives_a_quorum_outage(self) -> None:
        """
        Two of three members down for 12 s (no quorum: every member refuses
        clients), then one back: the client reconnects within 3 s of the
        quorum's return with the same session, its ephemeral node intact.
        """
        ensemble = ZooKeeperEnsembleFixture(3)
        self.addCleanup(ensemble.stop)
        connect = await threads.deferToThread(ensemble.start)
        client = ZooKeeperClient(connect, reactor, session_timeout_ms=4000)
        await client.start()
        self.addCleanup(client.stop)
        states: list[tuple[float, str]] = []
        client.add_state_listener(lambda state: states.append((time.monotonic(), state)))
        await client.create("/owner", b"", ephemeral=True)
        session = client.session_id
        leader = ensemble.leader()
        follower = next(myid for myid in (1, 2, 3) if myid != leader)
        await threads.deferToThread(ensemble.kill, follower)
        await threads.deferToThread(ensemble.kill, leader)
        await task.deferLater(reactor, 12, lambda: None)
        await threads.deferToThread(ensemble.restart, leader)  # returns once it serves: the quorum is back
        back = time.monotonic()
        while not client.connected and time.monotonic() - back < 30:
            await task.deferLater(reactor, 0.05, lambda: None)
        reconnect_s = time.monotonic() - back
        print(f"reconnected {reconnect_s:.2f} s after the quorum came back;"
              f" states {[(round(t - back, 2), s) for t, s in states]}", file=sys.stderr)
        self.assertTrue(client.connected)
        self.assertLess(reconnect_s, 3.0, states)
        self.assertEqual(client.session_id, session)
        self.assertNotIn("LOST", [state for _, state in states])
        stat = await client.exists("/owner")
        self.assertIsNotNone(stat)
        self.assertEqual(stat.ephemeralOwner, session)


def _read_line(popen: subprocess.Popen, timeout_s: float = 30.0) -> str:
    """The next line of C{popen}'s stderr, waiting at most C{timeout_s}."""
    import select

    line = b""
    deadline = time.monotonic() + timeout_s
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([popen.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        byte = os.read(popen.stderr.fileno(), 1)
        if not byte:
            break
        line += byte
    return line.decode("utf-8", "replace").strip()


class ZooKeeperCommandTests(unittest.TestCase):
    timeout = 120

    def test_three_members_with_kafkatw_zookeeper(self) -> None:
        """
        Three C{kafkatw zookeeper} members: each says it waits for its quorum,
        then that it serves (one leader, two followers); a member whose
        server is SIGKILLed says so and exits 137; SIGTERM stops one cleanly.
        """
        base = tempfile.mkdtemp(prefix="kafkatw-zk-cli-")
        self.addCleanup(shutil.rmtree, base, True)
        ports = set()
        while len(ports) < 9:
            ports.add(find_free_port())
        ports_list = sorted(ports)
        client_ports = ports_list[:3]
        servers = [f"--server={n}=127.0.0.1:{ports_list[1 + 2 * n]}:{ports_list[2 + 2 * n]}" for n in (1, 2, 3)]
        members: dict[int, subprocess.Popen] = {}
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))

        def stop_all() -> None:
            for popen in members.values():
                if popen.poll() is None:
                    popen.terminate()
            for popen in members.values():
                try:
                    popen.wait(20)
                except subprocess.TimeoutExpired:
                    popen.kill()
                    popen.wait()

        self.addCleanup(stop_all)
        for n in (1, 2, 3):
            members[n] = subprocess.Popen(
                [sys.executable, "-m", "kafkatw.cli.main", "zookeeper", "--myid", str(n), *servers,
                 "--port", str(client_ports[n - 1]), "--data-dir", os.path.join(base, f"zk-{n}"),
                 "--tick-time-ms", "500"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        lines = {n: [_read_line(members[n]), _read_line(members[n])] for n in (1, 2, 3)}
        modes = []
        for n in (1, 2, 3):
            port = client_ports[n - 1]
            self.assertEqual(lines[n][0], f"ZooKeeper member {n} of 3 listening on 127.0.0.1:{port};"
                                          " waiting for a quorum (2 of the 3 members running)")
            self.assertTrue(lines[n][1].startswith(f"ZooKeeper ready on 127.0.0.1:{port} (member {n} of 3, "),
                            lines[n][1])
            modes.append(lines[n][1].split(", ")[1].split(";")[0])
        self.assertEqual(sorted(modes), ["follower", "follower", "leader"])
        with open(os.path.join(base, "zk-2", "myid")) as f:
            self.assertEqual(f.read(), "2\n")

        # member 1's server dies (SIGKILL): its command says so and exits 128 + 9
        with open(f"/proc/{members[1].pid}/task/{members[1].pid}/children") as f:
            java = int(f.read().split()[0])
        os.kill(java, signal.SIGKILL)
        self.assertEqual(members[1].wait(20), 137)
        last = members[1].stderr.read().decode().strip().splitlines()[-1]
        self.assertTrue(last.startswith(f"ZooKeeper on 127.0.0.1:{client_ports[0]} was killed by signal 9; log: "),
                        last)
        # SIGTERM: a clean stop, status 0
        members[2].send_signal(signal.SIGTERM)
        self.assertEqual(members[2].wait(20), 0)
