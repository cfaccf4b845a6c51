"""
One seeded run of a whole kafkatw cluster in this process: brokers, ZooKeeper,
a producer and a consumer on one simulated reactor, with faults from a seed,
and the invariants checked as it runs and at its end.

What is real: three L{KafkaServer}s (or L{Settings.brokers}; controller,
replica managers and fetchers, request handling, group and transaction coordinators as they come
with the broker) with their log dirs in a temporary directory (real files;
with L{Settings.disk_model} a crash loses what was not C{fsync}ed, and may
tear the last of it: L{kafkatw.simulation.disk}), and kafkatw's
own L{Producer} (idempotent, C{acks=all}; and a transactional one with
L{Settings.transactions}), L{Consumer} and L{AdminClient}, each talking the Kafka protocol over the simulated network.

What is simulated: time and the network (L{kafkatw.simulation.network}), and
ZooKeeper: L{FakeZooKeeper} from L{kafkatw.testing}, the model checked
against a real server by C{tests/_zookeeper_scenarios.py}, on the simulated
clock (sessions expire there), reached through a L{LaggingZooKeeperClient}
per broker (a latency per broker, drawn from the seed).  The
brokers' thread-pool work (checkpoint writes) runs at once on the reactor;
the log cleaner (its own thread pool) is off.

A run (L{run_seed}):

  1. the seed makes a L{Schedule} of faults before anything runs
     (L{make_schedule}): crash (the process is gone: nothing it scheduled
     runs, its sockets reset, its log dirs' lock released; its ZooKeeper
     session is ended as the session guard does, or left to expire) and a
     restart on the same log dirs; controlled shutdown (C{stopService}, as
     SIGTERM) and a restart; link cuts (one way or both, bytes held or
     connections dropped); a broker isolated from everyone, from ZooKeeper
     only (L{FakeZooKeeperClient.partition}) or from its peers only; a
     ZooKeeper session expiry (C{expire_session_for_testing}); a pause
     (SIGSTOP: L{NodeReactor.pause}; its session expires unnoticed when the
     pause outlasts it) and the resume; a disk error (C{ENOSPC} or C{EIO} on
     one file operation of the broker's log dir, KIP-112: the dir goes offline
     and the broker, whose only dir it is, stops) and the disk's replacement
     (the broker starts again); from streams of their own: a slow or lossy
     link (L{SimulatedNetwork.impair}) and its restore; a jump of one
     broker's wall clock (L{NodeReactor.jump_clock}: what it reads as wall
     time jumps, its timers do not), and of the clients' (their records'
     timestamps jump); a drop of a starting broker's ZooKeeper connection
     (C{drop-zk}: L{LaggingZooKeeperClient.drop_connection}); an admin's
     reassignment of a partition or preferred leader election, sent to the
     controller (L{AdminClient});
  2. the cluster starts, the producer sends records at a steady rate to every
     partition while the faults happen;
  3. after the last fault every cut heals and every stopped broker starts
     again; then every partition must get a leader and a produce must be
     acknowledged within L{Settings.liveness_s} (liveness);
  4. the producer flushes; every assigned replica must be in its ISR, and
     every reassignment finished, within L{Settings.liveness_s}; then a new
     consumer reads every partition from its start to its end and the reads
     are compared with the acknowledgements; with L{Settings.transactions}, a
     read-committed one reads C{sim-txn} and the transactions are checked.

Invariants (a L{Violation} each; checked every L{Settings.check_every_s}
and at the end):

  - no acknowledged record lost, duplicated or reordered: every
    acknowledged record is read at the offset it was acknowledged at, no
    value is read twice, and a partition's records are read in the order
    they were sent (but for a record lost after every broker that held it
    when it was acknowledged crashed losing unsynced bytes of its
    partition: Kafka's contract, L{Cluster.lost_by_crashes});
  - at most one leader per partition per leader epoch, over every write of
    the partition's state znode (L{RecordingZooKeeper});
  - a leader's high watermark never moves backwards (per broker process and
    leader epoch);
  - at the end, every ISR member holds the leader's log below the leader's
    high watermark byte for byte (the replicas are one prefix there);
  - a dead broker leaves every ISR within L{Settings.isr_bound_s} once no
    other fault is active (an ISR whose members are all dead may keep its
    last member, as Kafka's does);
  - liveness as in 3 and 4;
  - at a jump of a broker's wall clock, the broker's log manager (record
    append times, retention and segment rolls by time) reads the jumped
    wall clock and its replica manager (the followers' lag) the reactor's
    time, and a timer it sets then runs on time (L{Cluster.jump_clock});
    at a jump of the clients' wall clock, the producers read it, and a
    client timer runs on time (L{Cluster.jump_client_clock});
  - a broker's start fails on no lost ZooKeeper connection (C{start}): its
    ZooKeeper steps wait for the connection, up to
    C{zookeeper.connection.timeout.ms} (L{Cluster._start_failed});
  - with L{Settings.transactions}: committed transactions all visible to a
    read-committed consumer, aborted ones never, one whose commit failed
    all or nothing (L{Cluster.check_transactions}); the read-committed
    consumer reads to the high watermarks (but for a transaction left open
    after its coordinator's log lost the record of it by Kafka's contract, a
    "hanging" transaction (KIP-664): L{Cluster.hanging_by_log_loss});
  - with L{Settings.groups}: committed group offsets never move backwards,
    over every write of an offset znode.

The run's trace (faults applied, acknowledgements, state znode writes, the
records read back) is hashed: a seed replays identically when its hash does
(L{RunResult.trace_hash}).
"""

from __future__ import annotations

import collections
import errno
import gc
import hashlib
import json
import math
import os
import random
import shutil
import struct
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet import defer, task
from twisted.logger import formatEvent, globalLogPublisher
from twisted.python.failure import Failure

from kafkatw.broker.server import KafkaServer
from kafkatw.broker.transaction_log import transaction_state_create_configs
from kafkatw.broker.transaction_state import TRANSACTION_STATE_TOPIC, partition_for
from kafkatw.client.admin import ELECTION_PREFERRED, AdminClient
from kafkatw.client.client import KafkaClient
from kafkatw.client.consumer import Consumer
from kafkatw.client.producer import Producer
from kafkatw.config import BrokerConfig
from kafkatw.simulation.disk import SimulatedDisk
from kafkatw.simulation.network import Impairment, NodeReactor, SimulatedNetwork, SimulatedReactor
from kafkatw.storage.log_dir_failure import LogDirFiles
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.bridge import ZooKeeperUnavailableError
from kafkatw.zookeeper.registry import Registry, assign_replicas
from kafkatw.zookeeper.zk_data import decode_topic

__all__ = ["Settings", "Fault", "Schedule", "Violation", "RunResult", "RecordingZooKeeper", "Cluster",
           "make_schedule", "run_seed", "shrink"]

TOPIC = "sim"
#: the topic the transactional producer writes (L{Settings.transactions})
TXN_TOPIC = "sim-txn"
#: the transactional producer's C{transactional.id}
TRANSACTIONAL_ID = "sim-txn"
#: C{transaction.state.log.num.partitions}
TRANSACTION_STATE_PARTITIONS = 2
CLIENT_NODE = "10.0.9.1"
#: the simulated clock starts here (s since the epoch), so timestamps look like today's
EPOCH_S = 1_700_000_000.0


@dataclass(frozen=True)
class Settings:
    """
    The shape of a run (times in simulated seconds).

    @ivar brokers: how many brokers (ids 1..N, hosts 10.0.0.<id>).
    @ivar partitions: partitions of the one topic (replication factor 3, C{min.insync.replicas} 2).
    @ivar fault_window_s: faults happen in [5, 5 + fault_window_s].
    @ivar faults: how many faults the schedule draws.
    @ivar send_interval_s: the producer sends one record every this often.
    @ivar value_bytes: the size of each record's value.
    @ivar segment_bytes: C{log.segment.bytes} of the brokers.
    @ivar liveness_s: after the faults, the bound for a leader everywhere and an acknowledged produce.
    @ivar isr_bound_s: the bound for a dead broker to leave every ISR (its
        session expires within C{session_timeout_ms} and a tick, then the
        controller takes it out; or its leaders do after
        C{replica_lag_time_max_ms} and their next check).
    @ivar check_every_s: how often the running invariants are checked.
    @ivar fetch_max_bytes: the bytes one fetch returns per partition, the
        consumer's (C{max.partition.fetch.bytes}) and the followers'
        (C{replica.fetch.max.bytes}); small ones make reads cross segments.
    @ivar disk_model: a crash loses what the broker did not C{fsync}
        (L{kafkatw.simulation.disk}); without it a crash loses nothing a write reached.
    @ivar tear_chance: the chance that a crash keeps a torn part of a file's unsynced tail.
    @ivar disk_errors: how many C{disk-error} faults the schedule draws
        (from their own random stream: the other faults of a seed stay as they were).
    @ivar crash_spacing_s: after a broker is down (crashed, stopped, or its
        disk failed), no other broker goes down until it has been up this
        long (time to catch up and rejoin the ISRs): one broker at most
        loses its unsynced tail at a time, which replication covers.
    @ivar link_faults: how many C{slow} and C{lossy} link faults the schedule
        draws (from their own random stream, as C{disk_errors}).
    @ivar clock_jumps: how many C{clock-jump} faults (a broker's wall clock
        set forward or back; their own random stream).
    @ivar clock_jump_max_s: the largest clock jump.  The broker's timers run
        on the monotonic clock (L{kafkatw.tap.use_monotonic_clock}), so a
        jump moves only its wall clock; the default, three days, stays below
        the week of C{retention.ms}, C{segment.ms} and the offsets'
        retention, past which a jump forward deletes what Kafka's would.
    @ivar client_clock_jumps: how many C{clock-jump}s of the clients'
        machine (C{clock-jump client S}: the producers' wall clock, which
        their records' timestamps read; their timers do not follow it;
        their own random stream), drawn as the brokers' are.
    @ivar zookeeper_latency_ms: each broker's link to ZooKeeper takes a
        latency drawn from the seed up to this (ms, each way, for requests,
        replies and watch notifications: L{LaggingZooKeeperClient}); 0: none.
    @ivar transactions: a transactional producer writes to C{sim-txn}
        during the faults, committing or aborting (seeded) transactions of 1
        to 4 records; a read-committed consumer reads it back at the end
        (off by default: a seed takes about a quarter more CPU).
    @ivar groups: two consumers of the group C{sim-group} read C{sim}
        during the faults and commit what they read after each poll, one of
        them leaving and joining again now and then (rebalances); the
        group's committed offsets must never move backwards (off by default: a
        seed takes almost twice the CPU).
    @ivar admin_operations: how many reassignments (C{reassign}) and
        preferred leader elections (C{elect-preferred}) an admin sends to the
        controller during the faults (their own random stream).
    @ivar start_zookeeper_drops: the chance that a broker's start in the
        schedule (C{start}, C{disk-heal}) meets a C{drop-zk}: its
        ZooKeeper connection drops while it starts (C{ConnectionLoss} for
        the requests in flight) and comes back in the same session
        (L{LaggingZooKeeperClient.drop_connection}; their own random stream).
    """

    brokers: int = 3
    partitions: int = 3
    fault_window_s: float = 50.0
    faults: int = 10
    send_interval_s: float = 0.05
    value_bytes: int = 100
    segment_bytes: int = 16384
    liveness_s: float = 60.0
    isr_bound_s: float = 20.0
    check_every_s: float = 0.5
    session_timeout_ms: int = 6000
    replica_lag_time_max_ms: int = 10000
    fetch_max_bytes: int = 1048576
    disk_model: bool = False
    tear_chance: float = 0.5
    disk_errors: int = 1
    crash_spacing_s: float = 15.0
    link_faults: int = 2
    clock_jumps: int = 1
    clock_jump_max_s: float = 259200.0
    admin_operations: int = 2
    client_clock_jumps: int = 1
    start_zookeeper_drops: float = 0.5
    zookeeper_latency_ms: float = 5.0
    transactions: bool = False
    groups: bool = False


@dataclass(frozen=True, order=True)
class Fault:
    """One fault at C{at} (s after the start): C{kind} and its arguments (see L{Cluster.apply})."""

    at: float
    kind: str
    args: tuple = ()

    def __str__(self) -> str:
        return f"t={self.at:7.3f}s {self.kind} {' '.join(map(str, self.args))}".rstrip()


@dataclass
class Schedule:
    """
    The faults of a run, in time order.  C{dropped}: the indexes of the
    seed's own schedule left out (L{shrink}; C{--drop} replays them).
    """

    seed: int
    faults: list[Fault]
    dropped: tuple[int, ...] = ()

    def __str__(self) -> str:
        head = f"schedule of seed {self.seed}" + (f" without faults {','.join(map(str, self.dropped))}"
                                                  if self.dropped else "") + ":"
        return "\n".join([head] + [f"  {f}" for f in self.faults])

    def without(self, dropped: tuple[int, ...], full: list[Fault]) -> "Schedule":
        """The seed's schedule C{full} without the faults at the indexes C{dropped}."""
        return Schedule(self.seed, [f for i, f in enumerate(full) if i not in dropped], tuple(sorted(dropped)))


@dataclass(frozen=True)
class Violation:
    at: float
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"t={self.at:.3f}s {self.invariant}: {self.detail}"


@dataclass
class RunResult:
    seed: int
    schedule: Schedule
    violations: list[Violation]
    trace_hash: str
    acknowledged: int
    failed: int
    read: int
    simulated_s: float
    wall_s: float
    events: int
    #: the run's trace, one line per event (the hash's input)
    trace: list[str] = field(default_factory=list)
    #: errors the brokers and clients logged with a traceback (not violations: what to look at)
    logged_failures: list[str] = field(default_factory=list)
    #: check -> how often it found something to check (L{Cluster.exercised})
    exercised: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self) -> str:
        lines = [f"seed {self.seed}: {'ok' if self.ok else 'FAILED'} ({self.acknowledged} acknowledged,"
                 f" {self.failed} failed, {self.read} read; {self.simulated_s:.0f} s simulated in"
                 f" {self.wall_s:.2f} s; trace {self.trace_hash[:16]})"]
        if self.logged_failures:
            lines[0] += f"; {len(self.logged_failures)} logged failures, first: {self.logged_failures[0]}"
        if not self.ok:
            lines += [str(self.schedule)] + [f"  violation {v}" for v in self.violations[:10]]
            if len(self.violations) > 10:
                lines.append(f"  ... and {len(self.violations) - 10} more violations")
        return "\n".join(lines)


def make_schedule(seed: int, settings: Settings) -> Schedule:
    """
    The faults of a seed, drawn before the run (so they print whatever
    happens).  Each fault with a duration brings its end (a restart, a
    heal).  At most one broker is down (crashed, stopped, or with a failed
    disk) at a time, and another goes down only
    L{Settings.crash_spacing_s} after it is back.  The C{disk-error} faults
    (L{Settings.disk_errors}) come from a random stream of their own.
    """
    rng = random.Random(f"schedule-{seed}")
    brokers = list(range(1, settings.brokers + 1))
    nodes = [_host(b) for b in brokers] + [CLIENT_NODE]
    faults: list[Fault] = []
    downs: list[tuple[float, float]] = []  # [down, back up + spacing] of each broker going down

    def free(at: float, down_s: float) -> bool:
        if any(at < end and start < at + down_s + settings.crash_spacing_s for start, end in downs):
            return False
        downs.append((at, at + down_s + settings.crash_spacing_s))
        return True

    start, end = 5.0, 5.0 + settings.fault_window_s
    for _ in range(settings.faults):
        at = round(rng.uniform(start, end), 3)
        duration = round(rng.uniform(1.0, 25.0), 3)
        down_s = round(rng.uniform(1.0, 40.0), 3)  # a broker stays down longer: past isr_bound_s at times
        kind = rng.choice(["crash", "crash", "shutdown", "cut", "cut", "isolate", "isolate-zk", "isolate-peers",
                           "expire", "pause"])
        broker = rng.choice(brokers)
        if kind in ("crash", "shutdown"):
            if not free(at, down_s):
                kind = "expire"
            else:
                end_session = rng.random() < 0.5
                faults.append(Fault(at, kind, (broker, "end-session" if end_session else "expire-session")
                                    if kind == "crash" else (broker,)))
                faults.append(Fault(round(at + down_s, 3), "start", (broker,)))
                continue
        if kind == "cut":
            source, destination = rng.sample(nodes, 2)
            mode = rng.choice(["hold", "drop"])
            both = rng.choice(["both-ways", "one-way"])
            faults.append(Fault(at, "cut", (source, destination, mode, both)))
            faults.append(Fault(round(at + duration, 3), "heal", (source, destination, both)))
        elif kind in ("isolate", "isolate-peers"):
            mode = rng.choice(["hold", "drop"])
            faults.append(Fault(at, kind, (broker, mode)))
            faults.append(Fault(round(at + duration, 3), "heal-node", (broker,)))
        elif kind == "isolate-zk":
            faults.append(Fault(at, kind, (broker,)))
            faults.append(Fault(round(at + duration, 3), "heal-zk", (broker,)))
        elif kind == "pause":
            # the ZooKeeper client notices what happened meanwhile this long after the process resumes
            notice_s = round(rng.uniform(0.0, 0.5), 3)
            faults.append(Fault(at, "pause", (broker,)))
            faults.append(Fault(round(at + duration, 3), "resume", (broker, notice_s)))
        else:
            faults.append(Fault(at, "expire", (broker,)))
    disk_rng = random.Random(f"disk-schedule-{seed}")
    for _ in range(settings.disk_errors):
        for _ in range(5):  # a time when no other broker is down
            at = round(disk_rng.uniform(start, end), 3)
            down_s = round(disk_rng.uniform(1.0, 30.0), 3)
            broker = disk_rng.choice(brokers)
            operation = disk_rng.choice(["writev", "writev", "write", "write", "open", "fsync", "ftruncate"])
            error = disk_rng.choice(["ENOSPC", "EIO"])
            times = disk_rng.choice(["1", "3", "every"])  # every: every call until the disk is replaced
            if free(at, down_s):
                faults.append(Fault(at, "disk-error", (broker, operation, error, times)))
                faults.append(Fault(round(at + down_s, 3), "disk-heal", (broker,)))
                break
    link_rng = random.Random(f"link-schedule-{seed}")
    for _ in range(settings.link_faults):
        at = round(link_rng.uniform(start, end), 3)
        duration = round(link_rng.uniform(1.0, 25.0), 3)
        source, destination = link_rng.sample(nodes, 2)
        both = link_rng.choice(["both-ways", "one-way"])
        if link_rng.random() < 0.5:
            delay_ms = round(link_rng.uniform(20.0, 400.0), 1)
            jitter_ms = round(link_rng.uniform(0.0, delay_ms), 1)
            faults.append(Fault(at, "slow", (source, destination, delay_ms, jitter_ms, both)))
        else:
            loss_pct = round(link_rng.uniform(5.0, 50.0), 1)
            jitter_ms = round(link_rng.uniform(0.0, 20.0), 1)
            faults.append(Fault(at, "lossy", (source, destination, loss_pct, jitter_ms, both)))
        faults.append(Fault(round(at + duration, 3), "restore", (source, destination, both)))
    clock_rng = random.Random(f"clock-schedule-{seed}")
    for _ in range(settings.clock_jumps):
        at = round(clock_rng.uniform(start, end), 3)
        broker = clock_rng.choice(brokers)
        # forward or back, 0.5 s to clock_jump_max_s, log-uniform (an NTP step, or a clock set by hand)
        jump_s = round(math.exp(clock_rng.uniform(math.log(0.5), math.log(max(0.5, settings.clock_jump_max_s))))
                       * clock_rng.choice([1, -1]), 3)
        faults.append(Fault(at, "clock-jump", (broker, jump_s)))
        if clock_rng.random() < 0.5:  # and set right again
            faults.append(Fault(round(at + clock_rng.uniform(1.0, 25.0), 3), "clock-jump", (broker, -jump_s)))
    client_clock_rng = random.Random(f"client-clock-schedule-{seed}")
    for _ in range(settings.client_clock_jumps):
        at = round(client_clock_rng.uniform(start, end), 3)
        jump_s = round(math.exp(client_clock_rng.uniform(math.log(0.5), math.log(max(0.5, settings.clock_jump_max_s))))
                       * client_clock_rng.choice([1, -1]), 3)
        faults.append(Fault(at, "clock-jump", ("client", jump_s)))
        if client_clock_rng.random() < 0.5:
            faults.append(Fault(round(at + client_clock_rng.uniform(1.0, 25.0), 3), "clock-jump", ("client", -jump_s)))
    admin_rng = random.Random(f"admin-schedule-{seed}")
    replication = min(3, settings.brokers)
    for _ in range(settings.admin_operations):
        at = round(admin_rng.uniform(start, end), 3)
        partition = admin_rng.randrange(settings.partitions)
        if admin_rng.random() < 0.5:
            replicas = admin_rng.sample(brokers, replication)
            faults.append(Fault(at, "reassign", (partition, ",".join(map(str, replicas)))))
        else:
            faults.append(Fault(at, "elect-preferred", (partition if admin_rng.random() < 0.7 else "all",)))
    drop_rng = random.Random(f"zookeeper-drop-schedule-{seed}")
    for fault in sorted(faults):
        if fault.kind in ("start", "disk-heal") and drop_rng.random() < settings.start_zookeeper_drops:
            # within the start's first ZooKeeper requests (a start takes about 0.1 s of them), gone 0.05-2 s
            at = round(fault.at + drop_rng.uniform(0.0, 0.15), 3)
            faults.append(Fault(at, "drop-zk", (fault.args[0], round(drop_rng.uniform(0.05, 2.0), 3))))
    return Schedule(seed, sorted(faults))


def _batches_below(log: Any, offset: int) -> list[tuple[int, bytes]]:
    """C{(base offset, bytes)} of each batch of a L{PartitionLog} that starts below C{offset}."""
    batches: list[tuple[int, bytes]] = []
    position = log.log_start_offset
    while position < offset:
        regions = log.read(position, 1 << 20, max_offset=offset)
        data = b"".join(os.pread(r.fileno, r.length, r.position) for r in regions)
        if not data:
            break
        at = 0
        while at + 61 <= len(data):  # a RecordBatch v2 header is 61 bytes
            base, length = struct.unpack_from(">qi", data, at)
            (last_delta,) = struct.unpack_from(">i", data, at + 23)
            batches.append((base, data[at:at + 12 + length]))
            position = base + last_delta + 1
            at += 12 + length
    return batches


def _first_difference(expected: list[tuple[int, bytes]], held: list[tuple[int, bytes]]) -> str:
    for (base, data), (held_base, held_data) in zip(expected, held):
        if (base, data) != (held_base, held_data):
            same = "same" if data == held_data else "other"
            return f"the batch at {base} (the replica has one at {held_base}, {same} bytes)"
    return f"{len(expected)} batches at the leader, {len(held)} at the replica"


def _if_alive(node: NodeReactor, f: Callable[..., Any], args: tuple) -> None:
    """C{f(*args)}, unless C{node}'s process is dead."""
    if node.alive:
        f(*args)


def _host(broker_id: int) -> str:
    return f"10.0.0.{broker_id}"


class RecordingZooKeeper(FakeZooKeeper):
    """
    The ZooKeeper model, recording every write of a partition state znode
    (C{/brokers/topics/<t>/partitions/<p>/state}, in multis too) in
    L{state_writes}, and calling L{on_state} with each.
    """

    def __init__(self, clock: Any, tick_time_ms: int) -> None:
        super().__init__(clock=clock, tick_time_ms=tick_time_ms)
        self.state_writes: list[tuple[float, str, bytes]] = []
        #: topic -> its assignment znode's latest data
        self.topics: dict[str, bytes] = {}
        self.on_state: Callable[[str, bytes], None] = lambda path, data: None
        self.on_offset: Callable[[str, bytes], None] = lambda path, data: None

    def _record(self, path: str, data: bytes) -> None:
        if path.endswith("/state") and "/brokers/topics/" in path:
            self.state_writes.append((self.clock.seconds(), path, data))
            self.on_state(path, data)
        elif path.rsplit("/", 2)[-2:-1] == ["topics"] and "/brokers/topics/" in path:
            self.topics[path.rsplit("/", 1)[-1]] = data
        elif "/consumers/" in path and "/offsets/" in path and data:
            self.on_offset(path, data)

    def _create(self, path: str, data: bytes, owner: int, sequence: bool, zxid: int, now: int) -> str:
        created = super()._create(path, data, owner, sequence, zxid, now)
        self._record(created, data)
        return created

    def _set(self, path: str, data: bytes, version: int, zxid: int, now: int) -> Any:
        stat = super()._set(path, data, version, zxid, now)
        self._record(path, data)
        return stat


class LaggingZooKeeperClient(FakeZooKeeperClient):
    """
    A broker's ZooKeeper client whose requests, replies and watch
    notifications take C{latency_s} each way (L{FakeZooKeeperClient}'s
    complete at once).  A request reaches the server C{latency_s} after it
    is made and is applied there (or waits, or fails, as the model decides
    for a client cut off or reconnecting); its reply, and each watch
    notification with the data its re-read found, come back C{latency_s}
    later, in the order the server sent them (one TCP connection: ZooKeeper
    answers a session's requests in order, and a watch's notification
    before the reply to a later read).  A request, or a reply, on its way
    when the connection it was sent on is gone (dropped: L{drop_connection},
    or noticed cut) is lost: the request fails with C{ConnectionLoss}.  What
    arrives for a paused process waits for it; for a dead one, nothing does.

    @param reactor: the broker's L{NodeReactor}.
    """

    def __init__(self, *args: Any, latency_s: float = 0.0, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.latency_s = latency_s
        self._last_arrival = 0.0  # requests in order to the server
        self._last_reply = 0.0  # replies and notifications in order to the client
        #: which TCP connection to the server this is: one more at each drop
        self.connection = 0

    def _connection_lost(self) -> None:
        if self._connected:
            self.connection += 1  # what is on its way on the old one is lost
        super()._connection_lost()

    def drop_connection(self, reconnect_s: float) -> bool:
        """
        The connection to the server drops (a reset; a server restarting):
        the requests in flight fail with C{ConnectionLoss}, C{SUSPENDED},
        later requests wait (kazoo queues them), and the client connects
        again C{reconnect_s} later: C{CONNECTED} in the same session while
        the server keeps it (it expires after its timeout without a
        connection), else C{LOST} and a new session.  Nothing happens to a
        client not connected, or cut off (L{partition}).

        @return: whether it dropped.
        """
        node = self._reactor
        if not self._connected or self._cut or self._session is None or node is None:
            return False
        self.server.lose_contact(self._session)
        self._connection_lost()
        connection = self.connection

        def reconnect() -> None:
            if self.connection == connection and self._suspended and not self._cut:
                self._reconnect()

        node.simulated.schedule(node, reconnect_s, _if_alive, node, reconnect, ())
        return True

    def _after(self, last: str, f: Callable[..., Any], *args: Any) -> None:
        node = self._reactor
        simulated = node.simulated
        now = simulated.seconds()
        at = max(now + self.latency_s, getattr(self, last))
        setattr(self, last, at)
        simulated.schedule(node, at - now, _if_alive, node, f, args)  # parked while the process is paused

    def _op(self, fn: Callable[[], Any]) -> defer.Deferred:
        if self.latency_s <= 0 or self._reactor is None or not self._connected or self._cut:
            return super()._op(fn)  # waits in a cut network, is queued, or fails, as the model's
        d: defer.Deferred = defer.Deferred()
        session, connection = self._session, self.connection

        def arrive() -> None:
            if self._session != session or self.connection != connection:
                d.errback(ZooKeeperUnavailableError("ConnectionLoss (simulated)"))
                return
            super(LaggingZooKeeperClient, self)._op(fn).addBoth(
                lambda result: self._after("_last_reply", reply, result))

        def reply(result: Any) -> None:
            if self._session != session or self.connection != connection or not self._connected:
                if isinstance(result, Failure):
                    result.trap(Exception)
                d.errback(ZooKeeperUnavailableError("ConnectionLoss (simulated)"))
            elif isinstance(result, Failure):
                d.errback(result)
            else:
                d.callback(result)

        self._after("_last_arrival", arrive)
        return d

    def _watch(self, path: str, kind: str, callback: Callable[[Any], object]) -> defer.Deferred:
        if self.latency_s <= 0:
            return super()._watch(path, kind, callback)
        first = [True]
        session = [self._session]

        def notified(value: Any) -> None:
            if first[0]:  # the answer to the read that sets the watch: with its reply
                first[0] = False
                callback(value)
                return
            session[0] = self._session

            def deliver() -> None:
                if self._connected and self._session == session[0]:
                    callback(value)

            self._after("_last_reply", deliver)

        return super()._watch(path, kind, notified)


@dataclass
class _Broker:
    broker_id: int
    log_dir: str
    server: KafkaServer | None = None
    reactor: NodeReactor | None = None
    zookeeper: FakeZooKeeperClient | None = None
    incarnation: int = 0
    #: simulated time since which it is down (crashed, or stopped), None while it runs
    down_since: float | None = None
    stopping: bool = False
    #: faults of a paused broker's process or ZooKeeper client, applied once it has resumed
    postponed: list[Callable[[], None]] = field(default_factory=list)
    #: the disk model of each of its log dirs (this incarnation's)
    disks: dict[str, SimulatedDisk] = field(default_factory=dict)
    #: seconds its machine's wall clock is ahead (L{Cluster.jump_clock}): a restart keeps it
    clock_offset: float = 0.0
    #: how many times it was paused (a timer set before a pause runs late: L{Cluster.jump_clock})
    pauses: int = 0


class Cluster:
    """
    The brokers, ZooKeeper, the network and the clients of one run, and the
    invariants' bookkeeping.  Drive it with L{run}.
    """

    def __init__(self, seed: int, settings: Settings, directory: str) -> None:
        self.seed = seed
        self.settings = settings
        self.directory = directory
        self.reactor = SimulatedReactor(EPOCH_S)
        latency_rng = random.Random(f"latency-{seed}")
        hosts = [_host(b) for b in range(1, settings.brokers + 1)] + [CLIENT_NODE]
        latencies = {(a, b): round(latency_rng.uniform(0.0002, 0.005), 6) for a in hosts for b in hosts if a != b}
        self.network = SimulatedNetwork(self.reactor, lambda a, b: latencies.get((a, b), 0.001), seed=seed)
        self.zookeeper = RecordingZooKeeper(self.reactor, tick_time_ms=500)
        self.zookeeper.on_state = self._state_written
        self.zookeeper.on_offset = self._offset_committed
        #: (group path, topic, partition) -> the highest committed offset written
        self.committed: dict[tuple[str, str, int], int] = {}
        self._consuming = True
        self.brokers = {b: _Broker(b, os.path.join(directory, f"broker-{b}")) for b in range(1, settings.brokers + 1)}
        self.trace: list[str] = []
        self.violations: list[Violation] = []
        #: (topic, partition) -> leader epoch -> leader
        self.leaders: dict[tuple[str, int], dict[int, int]] = {}
        #: (broker, incarnation, topic, partition, leader epoch) -> the highest high watermark seen
        self.high_watermarks: dict[tuple, int] = {}
        #: simulated time until which a fault other than a dead broker is active (or was, recently)
        self.disturbed_until = 0.0
        self.active_faults: set[tuple] = set()
        self.client_reactor = NodeReactor(self.reactor, self.network, CLIENT_NODE)
        self.bootstrap = ",".join(f"{_host(b)}:9092" for b in self.brokers)
        self.sent: list[tuple[int, int]] = []  # (sequence number, partition)
        self.acked: dict[int, tuple[int, int]] = {}  # sequence number -> (partition, offset)
        #: sequence number -> (simulated time of its ack, the brokers whose log held it then)
        self.ack_holders: dict[int, tuple[float, frozenset[int]]] = {}
        #: broker id -> [(simulated time of a crash, the (topic, partition)s whose log lost unsynced bytes in it)]
        self.crash_losses: dict[int, list[tuple[float, set[tuple[str, int]]]]] = collections.defaultdict(list)
        self.failed: dict[int, str] = {}
        self.producer: Producer | None = None
        #: the transactional producer's latest incarnation (L{Settings.transactions})
        self.txn_producer: Producer | None = None
        self.admin: AdminClient | None = None
        #: transaction number -> "committed", "aborted" (commit never asked), or "unknown" (its commit failed)
        self.txn_outcomes: dict[int, str] = {}
        #: transaction number -> its records' values
        self.txn_values: dict[int, list[bytes]] = {}
        #: transaction number -> the partition of each of its records (in the order of L{txn_values})
        self.txn_partitions: dict[int, list[int]] = {}
        #: transaction number -> simulated time of its begin
        self.txn_begun: dict[int, float] = {}
        #: transaction number -> its records' (partition, offset), as their sends were answered
        self.txn_placed: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
        #: committed transaction number -> (simulated time of the commit, partition -> the brokers holding
        #: its record there then)
        self.txn_holders: dict[int, tuple[float, dict[int, frozenset[int]]]] = {}
        #: partition -> the offset from which a read-committed read of C{sim-txn} could not go on: a
        #: transaction left hanging by its coordinator's lost log (L{hanging_by_log_loss})
        self.unreadable: dict[int, int] = {}
        self._transacting = True
        self._sequence = 0
        self._sending = False
        self.read_count = 0
        #: the faults have stopped (L{heal_everything})
        self.healed = False
        #: how often each running check found something to check (a check never exercised proves nothing)
        self.exercised: collections.Counter[str] = collections.Counter()

    # --- time -----------------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since the start of the run."""
        return self.reactor.seconds() - EPOCH_S

    def run_until(self, t: float, stop: Callable[[], bool] | None = None) -> None:
        self.reactor.run_until(EPOCH_S + t, stop)

    def wait_for(self, d: defer.Deferred, until: float) -> tuple[bool, Any]:
        """Run until C{d} fires or C{until} (s since start): C{(fired, result)}."""
        box: list = []
        d.addBoth(lambda r: box.append(r))
        self.run_until(until, lambda: bool(box))
        if not box:
            return False, None
        return True, box[0]

    def note(self, line: str) -> None:
        self.trace.append(f"{self.now():.6f} {line}")

    def violation(self, invariant: str, detail: str) -> None:
        self.violations.append(Violation(self.now(), invariant, detail))
        self.note(f"VIOLATION {invariant}: {detail}")

    # --- brokers --------------------------------------------------------------------------

    def broker_config(self, broker_id: int) -> BrokerConfig:
        s = self.settings
        return BrokerConfig({
            "broker.id": broker_id,
            "log.dirs": self.brokers[broker_id].log_dir,
            "listeners": f"PLAINTEXT://{_host(broker_id)}:9092",
            "zookeeper.connect": "simulated:2181",
            "zookeeper.session.timeout.ms": s.session_timeout_ms,
            "log.cleaner.enable": "false",  # its thread pool is not simulated
            "num.partitions": s.partitions,
            "default.replication.factor": min(3, s.brokers),
            "min.insync.replicas": self.min_insync_replicas,
            "log.segment.bytes": s.segment_bytes,
            "replica.lag.time.max.ms": s.replica_lag_time_max_ms,
            "replica.fetch.max.bytes": s.fetch_max_bytes,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "false",  # the topic's assignment comes from the seed (create_topic)
            "transaction.state.log.num.partitions": TRANSACTION_STATE_PARTITIONS,
            "transaction.state.log.replication.factor": min(3, s.brokers),
            "transaction.state.log.min.isr": 2 if s.brokers >= 3 else 1,
        })

    def _zookeeper_client(self, broker: _Broker) -> Callable[..., FakeZooKeeperClient]:
        def make(connect: str, reactor: Any, session_timeout_ms: int = 18000, **_: Any) -> FakeZooKeeperClient:
            latency_s = random.Random(f"zookeeper-latency-{self.seed}-{broker.broker_id}").uniform(
                0.0002, self.settings.zookeeper_latency_ms / 1000) if self.settings.zookeeper_latency_ms > 0 else 0.0
            client = LaggingZooKeeperClient(self.zookeeper, reactor=reactor, session_timeout_ms=session_timeout_ms,
                                            latency_s=latency_s)
            broker.zookeeper = client
            return client
        return make

    def start_broker(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.server is not None:
            return
        broker.incarnation += 1
        broker.reactor = NodeReactor(self.reactor, self.network, _host(broker_id))
        broker.reactor.clock_offset = broker.clock_offset
        broker.disks = {}

        def disk(path: str) -> LogDirFiles:
            broker.disks[path] = SimulatedDisk(path)
            return broker.disks[path]

        broker.server = KafkaServer(self.broker_config(broker_id), broker.reactor,
                                    wall_clock=broker.reactor.wall_seconds,
                                    zookeeper_client_factory=self._zookeeper_client(broker),
                                    random_source=random.Random(f"broker-{self.seed}-{broker_id}-{broker.incarnation}"),
                                    log_dir_files_factory=disk if self.settings.disk_model else LogDirFiles,
                                    freeze_after_start=False)  # collected at the end of the seed (run_seed)
        broker.down_since = None
        broker.stopping = False
        server = broker.server
        server.startService()
        server.ready.addCallbacks(lambda _, b=broker_id: self.note(f"broker {b} started"),
                                  lambda f, b=broker_id, s=server: self._start_failed(b, s, f))
        # every log dir failed (a disk error): the broker stops, as kafkatw.tap's process does (exit status 1)
        server.stopped_on_error.addCallback(lambda message, b=broker_id, s=server: self._stopped_on_error(b, s))
        self.note(f"start broker {broker_id} (incarnation {broker.incarnation})")

    def crash_broker(self, broker_id: int, end_session: bool) -> None:
        """
        The broker's process dies: nothing it scheduled runs any more, its
        connections reset, the kernel releases its log dirs' lock; its
        ZooKeeper session is ended at once (C{end_session}: what the
        session guard does) or expires at its timeout.
        """
        broker = self.brokers[broker_id]
        server = broker.server
        if server is None:
            return
        assert broker.reactor is not None
        broker.reactor.kill()
        broker.postponed.clear()  # what a paused process would have done once resumed: never
        if server.log_dir_lock is not None and server.log_dir_lock.held:
            server.log_dir_lock.release()
        client = broker.zookeeper
        if client is not None and client.session_id is not None:
            session, password = client.session_id, client.session_password
            client.disconnect()  # the server hears nothing more from it: the session expires at its timeout
            if end_session and password is not None:
                self.zookeeper.end_session(session, password)
        broker.server = None
        broker.zookeeper = None
        broker.down_since = self.now()
        self.note(f"crash broker {broker_id} ({'session ended' if end_session else 'session left to expire'})")
        rng = random.Random(f"disk-{self.seed}-{broker_id}-{broker.incarnation}")
        lost: set[tuple[str, int]] = set()
        for path, disk in sorted(broker.disks.items()):
            for name, size, kept in disk.crash(rng, self.settings.tear_chance):
                self.note(f"broker {broker_id} lost {name} bytes [{kept}, {size})")
                topic, _, partition = os.path.basename(os.path.dirname(name)).rpartition("-")
                if name.endswith(".log") and partition.isdigit():
                    lost.add((topic, int(partition)))
        self.crash_losses[broker_id].append((self.now(), lost))
        broker.disks = {}

    def _start_failed(self, broker_id: int, server: KafkaServer, failure: Failure) -> None:
        """
        The broker failed to start (one that outlasted
        C{zookeeper.connection.timeout.ms} cut off from ZooKeeper): as
        L{kafkatw.tap}'s process does, it stops (exit status 1), and starts again
        as a supervisor would, once healed (L{restart_stopped}).  A start
        abandoned by a shutdown has no C{start_error}: that shutdown goes on.
        """
        self.note(f"broker {broker_id} failed to start: {failure.getErrorMessage()}")
        if failure.check(ZooKeeperUnavailableError):
            # a passing loss is retried once connected (KafkaServer._zookeeper_step); only one that
            # outlasts zookeeper.connection.timeout.ms fails the start, as a BrokerStartupError
            self.violation("start", f"broker {broker_id}'s start failed on a lost ZooKeeper connection:"
                                    f" {failure.getErrorMessage()}")
        if self.brokers[broker_id].server is server and server.start_error is not None:
            self.shutdown_broker(broker_id)

    def _stopped_on_error(self, broker_id: int, server: KafkaServer) -> None:
        broker = self.brokers[broker_id]
        if broker.server is server:
            self.note(f"broker {broker_id} stops on an error")
            self.shutdown_broker(broker_id)

    def fail_disk(self, broker_id: int, operation: str, error: str, times: str) -> None:
        """I/O errors on the broker's log dirs: C{operation} raises C{error} for C{times} calls (or every one)."""
        server = self.brokers[broker_id].server
        if server is None or server.log_manager is None:
            self.note(f"broker {broker_id} is down: no disk error")
            return
        for path, files in sorted(server.log_manager.files.items()):
            files.fail(operation, getattr(errno, error), None if times == "every" else int(times))

    def replace_disk(self, broker_id: int) -> None:
        """
        The failed disk is replaced (the files on it kept): the errors stop,
        and a broker with an offline log dir is restarted (KIP-112: a log
        dir comes back with a restart); one that stopped on it starts again.
        """
        broker = self.brokers[broker_id]
        server = broker.server
        if server is not None and server.log_manager is not None:
            for files in server.log_manager.files.values():
                files.heal()
        if server is None:
            self.start_broker(broker_id)
        elif broker.stopping or (server.log_manager is not None and server.log_manager.offline_log_dirs):
            if not broker.stopping:
                self.shutdown_broker(broker_id)
            self.reactor.callLater(1.0, self._apply, "start", (broker_id,))

    def shutdown_broker(self, broker_id: int) -> None:
        """A controlled shutdown (SIGTERM): C{stopService}; the broker is down once it has stopped."""
        broker = self.brokers[broker_id]
        server = broker.server
        if server is None or broker.stopping:
            return
        broker.stopping = True
        self.note(f"shutdown broker {broker_id}")

        def stopped(result: Any) -> None:
            if broker.server is server:
                self.note(f"broker {broker_id} stopped")
                if broker.reactor is not None:
                    broker.reactor.kill()
                broker.server = None
                broker.zookeeper = None
                broker.down_since = self.now()
                broker.stopping = False
                if self.healed:
                    # stopped after the heal (a shutdown postponed by a pause the heal ended, or one for
                    # a failed log dir): a supervisor starts it again at once, not at the next check,
                    # which waiting for the liveness probes does not run (seed 146290)
                    self.reactor.callLater(0, self.restart_stopped)
            if isinstance(result, Failure):
                self.violation("clean shutdown", f"broker {broker_id}: {result.getErrorMessage()}")

        server.stopService().addBoth(stopped)

    # --- faults -----------------------------------------------------------------------------

    def apply(self, fault: Fault) -> None:
        """Apply one fault of the schedule now."""
        kind, args = fault.kind, fault.args
        self.note(f"fault {kind} {args}")
        if kind in ("shutdown", "expire", "isolate-zk", "heal-zk", "disk-heal"):
            broker = self.brokers[args[0]]
            if broker.reactor is not None and broker.reactor.paused:
                # the process, or its ZooKeeper client, acts once it runs again and has heard what it missed
                self.note(f"broker {args[0]} is paused: {kind} once it resumes")
                broker.postponed.append(lambda: self._apply(kind, args))
                return
        self._apply(kind, args)

    def _apply(self, kind: str, args: tuple) -> None:
        if kind == "crash":
            self.crash_broker(args[0], args[1] == "end-session")
        elif kind == "shutdown":
            self.shutdown_broker(args[0])
        elif kind == "start":
            broker = self.brokers[args[0]]
            if broker.server is None:
                self.start_broker(args[0])
            elif broker.stopping:  # still stopping: start once stopped
                self.reactor.callLater(1.0, self._apply, kind, args)
        elif kind == "pause":
            self.pause_broker(args[0])
        elif kind == "resume":
            self.resume_broker(args[0], args[1])
        elif kind == "cut":
            source, destination, mode, both = args
            self.network.cut(source, destination, mode, both == "both-ways")
            self.active_faults.add(("cut", source, destination))
        elif kind == "heal":
            source, destination, both = args
            self.network.heal(source, destination)
            if both == "both-ways":
                self.network.heal(destination, source)
            self._calmed(("cut", source, destination))
        elif kind in ("isolate", "isolate-peers"):
            host = _host(args[0])
            others = [_host(b) for b in self.brokers if b != args[0]]
            if kind == "isolate":
                others.append(CLIENT_NODE)
                self._on_broker(args[0], self._zookeeper_partition)
            for other in others:
                self.network.cut(host, other, args[1], True)
            self.active_faults.add(("node", args[0]))
        elif kind == "heal-node":
            host = _host(args[0])
            for source, destination in sorted(self.network.cuts):
                if host in (source, destination):
                    self.network.heal(source, destination)
            self._on_broker(args[0], self._zookeeper_heal)
            self._calmed(("node", args[0]))
        elif kind == "isolate-zk":
            if self.healed:  # postponed by a pause that the heal ended: the faults are over
                self.note(f"broker {args[0]} resumed after the heal: no isolate-zk")
                return
            self._zookeeper_partition(args[0])
            self.active_faults.add(("zk", args[0]))
        elif kind == "heal-zk":
            self._zookeeper_heal(args[0])
            self._calmed(("zk", args[0]))
        elif kind == "drop-zk":
            self._on_broker(args[0], lambda b: self._zookeeper_drop(b, args[1]))
        elif kind in ("slow", "lossy"):
            source, destination, amount, jitter_ms, both = args
            impairment = Impairment(delay_s=amount / 1000, jitter_s=jitter_ms / 1000) if kind == "slow" else \
                Impairment(jitter_s=jitter_ms / 1000, loss=amount / 100)
            self.network.impair(source, destination, impairment, both == "both-ways")
            self.active_faults.add(("link", source, destination))
        elif kind == "restore":
            source, destination, both = args
            self.network.restore(source, destination)
            if both == "both-ways":
                self.network.restore(destination, source)
            self._calmed(("link", source, destination))
        elif kind == "clock-jump":
            if args[0] == "client":
                self.jump_client_clock(args[1])
            else:
                self.jump_clock(*args)
        elif kind == "reassign":
            self.reassign(args[0], [int(r) for r in args[1].split(",")])
        elif kind == "elect-preferred":
            self.elect_preferred(None if args[0] == "all" else args[0])
        elif kind == "disk-error":
            self.fail_disk(*args)
            self.disturbed_until = max(self.disturbed_until, self.now())
        elif kind == "disk-heal":
            self.replace_disk(args[0])
            self.disturbed_until = max(self.disturbed_until, self.now())
        elif kind == "expire":
            client = self.brokers[args[0]].zookeeper
            if client is not None and client.connected:
                client.expire_session_for_testing()
            self.disturbed_until = max(self.disturbed_until, self.now())
        else:
            raise ValueError(f"unknown fault {kind}")

    def _on_broker(self, broker_id: int, action: Callable[[int], None]) -> None:
        """C{action(broker_id)} now, or once the broker's process resumes if it is paused."""
        broker = self.brokers[broker_id]
        if broker.reactor is not None and broker.reactor.paused:
            broker.postponed.append(lambda: action(broker_id))
        else:
            action(broker_id)

    def pause_broker(self, broker_id: int) -> None:
        """
        SIGSTOP: nothing of the broker runs, what arrives for it waits.  Its
        ZooKeeper client is stopped too: its watches wait, and once the
        session timeout passes the session expires on the server unnoticed
        (L{FakeZooKeeperClient.expire_session_unnoticed}: the zombie that
        learns of it only after it resumes).
        """
        broker = self.brokers[broker_id]
        if broker.server is None or broker.reactor is None or broker.reactor.paused:
            return
        broker.reactor.pause()
        broker.pauses += 1
        client = broker.zookeeper
        self.active_faults.add(("pause", broker_id))
        if client is None or not client.connected or client.session_id is None:
            return
        client.hold_watches()
        timeout_s = (self.zookeeper.session_timeout_ms(client.session_id) or self.settings.session_timeout_ms) / 1000
        reactor = broker.reactor

        def expire() -> None:
            if reactor.paused and broker.zookeeper is client and client.connected:
                self.note(f"broker {broker_id}'s session expires while it is paused")
                client.expire_session_unnoticed()

        self.reactor.callLater(timeout_s, expire)

    def resume_broker(self, broker_id: int, notice_s: float) -> None:
        """SIGCONT: what waited runs; C{notice_s} later its ZooKeeper client delivers what it missed."""
        broker = self.brokers[broker_id]
        reactor, client = broker.reactor, broker.zookeeper
        self._calmed(("pause", broker_id))
        if reactor is None or not reactor.paused:
            return
        reactor.resume()

        def notice() -> None:
            if client is not None:
                client.notice_session()  # LOST, CONNECTED and the new session's callbacks, if it expired
                client.release_watches()
            # then what was postponed (a real client learns of its expiry only through a connection:
            # never while cut off, which a postponed isolate-zk would do first)
            postponed, broker.postponed = broker.postponed, []
            for action in postponed:
                action()

        reactor.callLater(notice_s, notice)

    def jump_clock(self, broker_id: int | str, seconds: float) -> None:
        """
        The broker's machine's wall clock jumps C{seconds} (back when
        negative): what its process reads as wall time
        (L{KafkaServer.milliseconds}) jumps, its reactor's time and timers
        do not (L{NodeReactor.jump_clock}); a restart keeps the offset.  The
        ZooKeeper server's clock (session expiry) and the other nodes' are
        not touched.  Nothing waits for it: the dead-broker bound and the
        liveness bounds hold through it.

        Checked at once, on the running broker: its log manager reads the
        jumped wall clock and its replica manager the reactor's time (a
        L{Violation} C{clock jump} otherwise), and a timer it sets now runs
        one second later (unless the broker is paused then or meanwhile).
        """
        broker = self.brokers[broker_id]
        broker.clock_offset += seconds
        reactor, server = broker.reactor, broker.server
        if reactor is None or not reactor.alive:
            return
        reactor.jump_clock(seconds)
        if server is None or server.log_manager is None or server.replica_manager is None:
            return  # still starting: nothing reads a clock yet
        wall_ms, timer_ms = int(reactor.wall_seconds() * 1000), int(reactor.seconds() * 1000)
        read = {"log manager's clock (the wall clock)": (server.log_manager.now_ms(), wall_ms),
                "replica manager's clock (the reactor's time)": (server.replica_manager.now_ms(), timer_ms)}
        for what, (got, expected) in read.items():
            if abs(got - expected) > 1:
                self.violation("clock jump", f"broker {broker_id}'s {what} reads {got} ms, not {expected}"
                                             f" (its wall clock jumped {seconds} s)")
        self.exercised["clock jumps read"] += 1
        if reactor.paused:
            return  # stopped: its timers run when it resumes
        due, pauses = self.now() + 1.0, broker.pauses

        def probe() -> None:
            if broker.pauses != pauses:
                return
            self.exercised["timers on time after a clock jump"] += 1
            if self.now() > due + 1e-6:
                self.violation("clock jump", f"broker {broker_id}'s timer set when its wall clock jumped"
                                             f" {seconds} s ran at t={self.now():.3f}s, not t={due:.3f}s")

        reactor.callLater(1.0, probe)

    def jump_client_clock(self, seconds: float) -> None:
        """
        The clients' machine's wall clock jumps C{seconds}: the producers'
        C{wall_clock} (their records' C{CreateTime}s) jumps, their reactor's
        time and timers do not (L{NodeReactor.jump_clock}), as with
        L{kafkatw.client.clock.use_monotonic_clock}.  Checked at once: each
        producer reads the jumped wall clock (a L{Violation} C{clock jump}
        otherwise), and a timer set now on the clients' reactor runs one
        second later.
        """
        reactor = self.client_reactor
        reactor.jump_clock(seconds)
        wall_ms = int(reactor.wall_seconds() * 1000)
        for name, producer in (("producer", self.producer), ("transactional producer", self.txn_producer)):
            if producer is None:
                continue
            got = int(producer.wall_clock() * 1000)
            if abs(got - wall_ms) > 1:
                self.violation("clock jump", f"the {name}'s clock (its records' timestamps) reads {got} ms, not"
                                             f" {wall_ms} (the clients' wall clock jumped {seconds} s)")
            self.exercised["client clock jumps read"] += 1
        due = self.now() + 1.0

        def probe() -> None:
            self.exercised["client timers on time after a clock jump"] += 1
            if self.now() > due + 1e-6:
                self.violation("clock jump", f"a client timer set when the clients' wall clock jumped {seconds} s"
                                             f" ran at t={self.now():.3f}s, not t={due:.3f}s")

        reactor.callLater(1.0, probe)

    def _admin(self) -> AdminClient:
        if self.admin is None:
            client = KafkaClient(self.client_reactor, self.bootstrap, client_id="sim-admin", request_timeout_ms=10000,
                                 allow_auto_create_topics=False, random_source=random.Random(f"admin-{self.seed}"))
            self.admin = AdminClient(self.client_reactor, client=client, request_timeout_ms=10000,
                                     default_api_timeout_ms=30000)
        return self.admin

    def _admin_result(self, what: str, d: defer.Deferred) -> None:
        def done(result: Any) -> None:
            if isinstance(result, Failure):
                self.note(f"{what}: failed: {result.type.__name__}")
                return
            answers = ", ".join(
                f"{key[1]}: {'ok' if error is None else getattr(error.error_code, 'name', error.error_code)}"
                for key, error in sorted(result.items()))
            self.note(f"{what}: {answers}")

        d.addBoth(done)

    def reassign(self, partition: int, replicas: list[int]) -> None:
        """An admin's AlterPartitionReassignments (KIP-455) of one partition to C{replicas}, sent to the controller."""
        self._admin_result(f"reassign {TOPIC}-{partition} to {replicas}",
                           self._admin().alter_partition_reassignments({(TOPIC, partition): replicas}))

    def elect_preferred(self, partition: int | None) -> None:
        """An admin's preferred leader election (ElectLeaders, KIP-460) of one partition, or of all."""
        partitions = None if partition is None else [(TOPIC, partition)]
        self._admin_result(f"elect the preferred leader of {TOPIC}-{'all' if partition is None else partition}",
                           self._admin().elect_leaders(ELECTION_PREFERRED, partitions))

    def _calmed(self, key: tuple) -> None:
        self.active_faults.discard(key)
        self.disturbed_until = max(self.disturbed_until, self.now())

    def _zookeeper_partition(self, broker_id: int) -> None:
        # an isolation postponed while the broker was paused comes due once the heal resumed it
        # (L{heal_everything}): it must not cut the broker off ZooKeeper for good (seed 267)
        client = self.brokers[broker_id].zookeeper
        if client is not None and client.connected and not self.healed:
            client.partition()

    def _zookeeper_drop(self, broker_id: int, reconnect_s: float) -> None:
        client = self.brokers[broker_id].zookeeper
        if self.healed or not isinstance(client, LaggingZooKeeperClient):
            return
        server = self.brokers[broker_id].server
        starting = server is not None and not server.ready.called
        if client.drop_connection(reconnect_s):
            self.note(f"broker {broker_id}'s ZooKeeper connection dropped{' while it starts' if starting else ''}")
            self.disturbed_until = max(self.disturbed_until, self.now() + reconnect_s)

    def _zookeeper_heal(self, broker_id: int) -> None:
        client = self.brokers[broker_id].zookeeper
        if client is not None:
            client.heal()

    def heal_everything(self) -> None:
        """The faults stop: every cut heals, every paused broker resumes, every broker down starts again."""
        self.healed = True
        self.network.heal_all()
        for broker_id, broker in self.brokers.items():
            if broker.reactor is not None and broker.reactor.paused:
                self.resume_broker(broker_id, 0.0)
            if broker.zookeeper is not None:
                broker.zookeeper.heal()
            server = broker.server
            if server is not None and server.log_manager is not None:
                for files in server.log_manager.files.values():
                    files.heal()
            if server is not None and not broker.stopping and server.log_manager is not None \
                    and server.log_manager.offline_log_dirs:
                self.shutdown_broker(broker_id)  # restart_stopped starts it again once stopped
        self.restart_stopped()
        self.active_faults.clear()
        self.disturbed_until = self.now()
        self.note("healed everything")

    def restart_stopped(self) -> None:
        """Once healed: start every broker that is down (one stopped late, by a postponed shutdown, too)."""
        for broker_id, broker in sorted(self.brokers.items()):
            if broker.server is None and not broker.stopping:
                self.start_broker(broker_id)

    def create_topic(self) -> None:
        """
        Create the topic in ZooKeeper (as L{kafkatw.broker.admin} does for
        CreateTopics), with a replica assignment and a topic id drawn from the
        seed rather than the broker's own random ones.
        """
        rng = random.Random(f"topic-{self.seed}")
        admin = FakeZooKeeperClient(self.zookeeper, reactor=self.client_reactor)
        admin.start()
        registry = Registry(admin)
        topics: list[tuple[str, int, dict[str, str]]] = [(TOPIC, self.settings.partitions, {})]
        if self.settings.transactions:
            # and the transactions' topics, with the seed's assignment (the broker's own would draw
            # it from the random module); __transaction_state as the broker creates it
            topics.append((TXN_TOPIC, self.settings.partitions, {}))
            topics.append((TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_PARTITIONS,
                           transaction_state_create_configs(self.broker_config(1))))
        for topic, partitions, configs in topics:
            assignment = assign_replicas(partitions, min(3, len(self.brokers)), sorted(self.brokers), random=rng)
            registry.create_topic(topic, assignment, configs, uuid.UUID(int=rng.getrandbits(128)))
            for partition, replicas in sorted(assignment.items()):
                # as kafkatw's CreateTopics does (L{kafkatw.broker.admin}): the first replica leads at
                # epoch 0, all in sync; the controller elects no leader for a partition without a state
                registry.set_partition_state(topic, partition, replicas[0], 0, list(replicas))
            self.note(f"created {topic}: {assignment}")
        admin.stop()

    # --- the producer ----------------------------------------------------------------------

    def start_producer(self) -> None:
        client = KafkaClient(self.client_reactor, self.bootstrap, client_id="sim-producer", request_timeout_ms=10000,
                             random_source=random.Random(f"producer-{self.seed}"))
        self.producer = Producer(self.client_reactor, client=client, acks="all", enable_idempotence=True,
                                 linger_ms=5, request_timeout_ms=10000, delivery_timeout_ms=1_000_000,
                                 max_block_ms=1_000_000, retry_backoff_ms=100,
                                 wall_clock=self.client_reactor.wall_seconds)
        self._sending = True
        self.client_reactor.callLater(0, self._send_next)

    def _send_next(self) -> None:
        if not self._sending:
            return
        self.send_one()
        self.client_reactor.callLater(self.settings.send_interval_s, self._send_next)

    def send_one(self, partition: int | None = None) -> defer.Deferred:
        assert self.producer is not None
        sequence = self._sequence
        self._sequence += 1
        if partition is None:
            partition = sequence % self.settings.partitions
        value = f"{sequence:010d}".encode().ljust(self.settings.value_bytes, b".")
        self.sent.append((sequence, partition))
        sent_at = self.now()
        d = self.producer.send(TOPIC, value, partition=partition, timestamp_ms=int(self.reactor.seconds() * 1000))

        def acked(metadata: Any) -> Any:
            self.acked[sequence] = (metadata.partition, metadata.offset)
            self.ack_holders[sequence] = (sent_at, self.holders(TOPIC, metadata.partition, metadata.offset, sent_at))
            self.note(f"ack {sequence} {metadata.partition}@{metadata.offset}")
            return metadata

        def failed(failure: Failure) -> Failure:
            self.failed[sequence] = failure.getErrorMessage()
            self.note(f"send {sequence} failed: {failure.type.__name__}")
            return failure

        d.addCallbacks(acked, failed)
        d.addErrback(lambda _: None)
        return d

    # --- a consumer group -------------------------------------------------------------------------

    async def _group_member(self, index: int) -> None:
        """
        One member of C{sim-group} while L{_consuming}: poll, commit what was
        polled, again; after a seeded number of polls it closes (LeaveGroup)
        and a new member takes its place, so that the group rebalances.
        """
        rng = random.Random(f"group-member-{self.seed}-{index}")
        incarnation = 0
        while self._consuming:
            incarnation += 1
            client = KafkaClient(self.client_reactor, self.bootstrap, client_id=f"sim-group-{index}-{incarnation}",
                                 request_timeout_ms=10000,
                                 random_source=random.Random(f"group-client-{self.seed}-{index}-{incarnation}"))
            consumer = Consumer(self.client_reactor, client=client, group_id="sim-group", auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=1000,
                                fetch_max_wait_ms=200, max_partition_fetch_bytes=self.settings.fetch_max_bytes,
                                default_api_timeout_ms=20000)
            consumer.subscribe([TOPIC])
            polls = rng.randint(20, 200)
            while self._consuming and polls > 0:
                polls -= 1
                try:
                    await consumer.poll(timeout_ms=200)
                    await consumer.commit()
                except Exception as e:
                    self.note(f"group member {index}.{incarnation}: {type(e).__name__}")
                    await task.deferLater(self.client_reactor, 0.2, lambda: None)
            try:
                await consumer.close()
            except Exception as e:
                self.note(f"group member {index}.{incarnation} closing: {type(e).__name__}")
            self.note(f"group member {index}.{incarnation} left")

    def _offset_committed(self, path: str, data: bytes) -> None:
        """Committed group offsets never move backwards (over every write of an offset znode)."""
        parts = path.split("/")
        try:
            offset = json.loads(data)["offset"]
        except (ValueError, KeyError):
            return
        key = ("/".join(parts[:-3]), parts[-2], int(parts[-1]))
        self.exercised["group offset commits"] += 1
        last = self.committed.get(key)
        if last is not None and offset < last:
            self.violation("committed group offsets never move backwards",
                           f"{key[0]} {key[1]}-{key[2]}: {last} -> {offset}")
        self.committed[key] = max(offset, last if last is not None else offset)

    # --- the transactional producer ------------------------------------------------------------

    def _transactional_producer(self, incarnation: int) -> Producer:
        client = KafkaClient(self.client_reactor, self.bootstrap, client_id=f"sim-txn-{incarnation}",
                             request_timeout_ms=10000,
                             random_source=random.Random(f"txn-producer-{self.seed}-{incarnation}"))
        self.txn_producer = Producer(self.client_reactor, client=client, transactional_id=TRANSACTIONAL_ID, linger_ms=5,
                                     request_timeout_ms=10000, delivery_timeout_ms=30000, max_block_ms=30000,
                                     transaction_timeout_ms=30000, retry_backoff_ms=100,
                                     wall_clock=self.client_reactor.wall_seconds)
        return self.txn_producer

    async def _transactions(self) -> None:
        """
        Transactions of 1 to 4 records to C{sim-txn}'s partitions, each
        committed or (three in ten) aborted, one after another while
        L{_transacting}.  A transaction whose commit fails is aborted if it
        can be, else the producer is closed and a new one (the same
        C{transactional.id}) fences it; its outcome is unknown: all of its
        records or none may be visible.
        """
        rng = random.Random(f"transactions-{self.seed}")
        producer: Producer | None = None
        incarnation = 0
        while self._transacting:
            if producer is None:
                incarnation += 1
                producer = self._transactional_producer(incarnation)
                try:
                    await producer.init_transactions()
                except Exception as e:
                    self.note(f"transactional producer {incarnation}: init failed ({type(e).__name__})")
                    producer.close()
                    producer = None
                    await task.deferLater(self.client_reactor, 1.0, lambda: None)
                    continue
            number = len(self.txn_outcomes)
            count, abort = rng.randint(1, 4), rng.random() < 0.3
            values = [f"T{number:06d}-{i}".encode() for i in range(count)]
            partitions = [rng.randrange(self.settings.partitions) for _ in values]
            self.txn_values[number] = values
            self.txn_partitions[number] = partitions
            self.txn_outcomes[number] = "aborted"
            self.txn_begun[number] = self.now()
            try:
                producer.begin_transaction()
                for value, partition in zip(values, partitions):
                    producer.send(TXN_TOPIC, value, partition=partition).addCallbacks(
                        lambda metadata, number=number: self.txn_placed[number].append(
                            (metadata.partition, metadata.offset)), lambda _: None)
                if abort:
                    await producer.abort_transaction()
                else:
                    self.txn_outcomes[number] = "unknown"
                    committing_at = self.now()
                    await producer.commit_transaction()
                    self.txn_outcomes[number] = "committed"
                    self.txn_holders[number] = (committing_at, {
                        p: self.holders(TXN_TOPIC, p, offset, committing_at) for p, offset in self.txn_placed[number]})
                self.note(f"transaction {number} {self.txn_outcomes[number]}")
            except Exception as e:
                self.note(f"transaction {number} failed ({type(e).__name__}): {self.txn_outcomes[number]}")
                try:
                    await producer.abort_transaction()
                except Exception as e:
                    self.note(f"transactional producer {incarnation}: closed ({type(e).__name__})")
                    producer.close()
                    producer = None
            await task.deferLater(self.client_reactor, rng.uniform(0.5, 1.5), lambda: None)
        if producer is not None:
            await producer.close()

    def start_reading(self, consumer: Consumer, topic: str, what: str = "",
                      ends_of: Consumer | None = None) -> tuple[float, dict[tuple[str, int], int]] | None:
        """
        Assign every partition of C{topic} to C{consumer}, read their end
        offsets (with C{ends_of}, else C{consumer}) and seek to their
        beginnings: C{(deadline, ends)}, the deadline C{liveness_s} from now;
        C{None} after a liveness violation (C{what} follows "the end offsets"
        in its message) when the end offsets could not be read.
        """
        tps = [(topic, p) for p in range(self.settings.partitions)]
        consumer.assign(tps)
        deadline = self.now() + self.settings.liveness_s
        fired, ends = self.wait_for((consumer if ends_of is None else ends_of).end_offsets(tps), deadline)
        if not fired or isinstance(ends, Failure):
            self.violation("liveness", f"the end offsets{what} could not be read: {ends}")
            return None
        self.wait_for(consumer.seek_to_beginning(*tps), deadline)
        return deadline, ends

    def read_back_committed(self) -> dict[int, list[tuple[int, bytes]]] | None:
        """C{sim-txn} with a read-committed consumer, to its high watermark (once every transaction ended)."""
        s = self.settings
        client = KafkaClient(self.client_reactor, self.bootstrap, client_id="sim-txn-consumer",
                             request_timeout_ms=10000, random_source=random.Random(f"txn-consumer-{self.seed}"))
        consumer = Consumer(self.client_reactor, client=client, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                            isolation_level="read_committed", max_partition_fetch_bytes=s.fetch_max_bytes)
        ends_of = Consumer(self.client_reactor, client=client)  # read uncommitted: the high watermarks
        started = self.start_reading(consumer, TXN_TOPIC, f" of {TXN_TOPIC}", ends_of)
        if started is None:
            return None
        deadline, ends = started
        records: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(s.partitions)}

        def position(tp: tuple[str, int]) -> int:
            box: list = []
            consumer.position(tp).addBoth(box.append)
            return box[0] if box and isinstance(box[0], int) else -1

        def behind() -> bool:
            return any(position((TXN_TOPIC, p)) < ends[(TXN_TOPIC, p)] for p in records)

        while behind() and self.now() < deadline:
            fired, polled = self.wait_for(consumer.poll(timeout_ms=500), deadline)
            if not fired:
                break  # the deadline came during the poll: the liveness check below says where it stopped
            if isinstance(polled, Failure):
                self.violation("read back", f"poll of {TXN_TOPIC} failed: {polled}")
                return None
            for record in polled:
                records[record.partition].append((record.offset, record.value))
        if behind():
            at = {p: position((TXN_TOPIC, p)) for p in records}
            stopped = {p: offset for p, offset in at.items() if offset < ends[(TXN_TOPIC, p)]}
            hanging = self.hanging_by_log_loss(stopped)
            if hanging is None:
                self.violation("liveness", f"{TXN_TOPIC} could not be read to its high watermarks {ends} within"
                               f" {s.liveness_s:.0f} s: at {at} (read committed: a transaction never ended?)")
            else:
                self.note(f"read committed stopped at {stopped}: transactions {hanging} left hanging by a loss of"
                          f" their coordinator's unsynced log")
                self.exercised["transactions left hanging by their coordinator's lost log"] += len(hanging)
                self.unreadable = stopped
        for p, read in sorted(records.items()):
            self.note(f"read {TXN_TOPIC} {p}: " + ",".join(f"{o}:{v.decode()}" for o, v in read))
        return records

    def hanging_by_log_loss(self, stopped: dict[int, int]) -> list[int] | None:
        """
        The transactions at which a read-committed consumer of C{sim-txn}
        stopped (C{stopped}: partition -> the offset it stopped at) if each
        is one that its coordinator's log lost by Kafka's contract
        (L{coordinator_log_lost}) since it began: a "hanging" transaction
        (KIP-664) that no end marker will close (their numbers, once
        each); else C{None}.  Each
        stopping offset must be a record of a transaction whose place the
        simulation knows (L{txn_placed}).
        """
        starts = {place: number for number, placed in self.txn_placed.items() for place in placed}
        hanging = set()
        for partition, offset in sorted(stopped.items()):
            number = starts.get((partition, offset))
            if number is None or not self.coordinator_log_lost(self.txn_begun[number]):
                return None
            hanging.add(number)
        return sorted(hanging)

    def coordinator_log_lost(self, since: float) -> bool:
        """
        Whether C{sim-txn}'s coordinator's log (its C{__transaction_state}
        partition) may have lost records written after C{since} by Kafka's
        contract (L{lost_by_crashes}, its replicas as the holders): the
        record of a transaction the coordinator wrote then, and with it the
        coordinator's knowledge of the transaction.
        """
        key = (TRANSACTION_STATE_TOPIC, partition_for(TRANSACTIONAL_ID, TRANSACTION_STATE_PARTITIONS))
        replicas = self.assignment().get(key)
        return replicas is not None and self.lost_by_crashes(since, frozenset(replicas), *key)

    def check_transactions(self, records: dict[int, list[tuple[int, bytes]]]) -> None:
        """
        Committed transactions are visible to a read-committed consumer, all
        of their records once; aborted ones never; one whose commit failed
        all or nothing.
        """
        seen: collections.Counter[bytes] = collections.Counter(v for read in records.values() for _, v in read)
        self.exercised["transactions checked"] += len(self.txn_outcomes)
        for value, times in sorted(seen.items()):
            if times > 1:
                self.violation("no duplicate", f"{TXN_TOPIC} record {value.decode()} read {times} times")
        for number, outcome in sorted(self.txn_outcomes.items()):
            values = self.txn_values[number]
            visible = [v for v in values if seen[v]]
            beyond = [(p, o) for p, o in self.txn_placed.get(number, ()) if o >= self.unreadable.get(p, o + 1)]
            if beyond and outcome != "aborted":
                # past where a hanging transaction stopped the read: neither visible nor lost
                self.exercised["transactions unread beyond a hanging one"] += 1
                continue
            if outcome == "committed" and len(visible) != len(values):
                if self._txn_lost_by_crashes(number, {p for v, p in zip(values, self.txn_partitions.get(number, ()))
                                                      if not seen[v]}):
                    self.exercised["committed transactions lost with every holder's unsynced bytes"] += 1
                    continue
                if number in self.txn_holders and self.coordinator_log_lost(self.txn_holders[number][0]):
                    # its prepare-commit lost with its coordinator's log: the coordinator aborts it
                    self.exercised["committed transactions lost with their coordinator's unsynced log"] += 1
                    continue
                self.violation("committed transactions visible", f"transaction {number}: {len(visible)} of its"
                               f" {len(values)} records read committed")
            elif outcome == "aborted" and visible:
                self.violation("aborted transactions never visible", f"transaction {number}: {len(visible)} of"
                               f" its {len(values)} records read committed")
            elif outcome == "unknown" and visible and len(visible) != len(values):
                self.violation("transactions atomic", f"transaction {number} (its commit failed): {len(visible)}"
                               f" of its {len(values)} records read committed")
        known = set(v for values in self.txn_values.values() for v in values)
        for value in sorted(set(seen) - known):
            self.violation("no record from nowhere", f"{TXN_TOPIC} record {value.decode()} was never sent")

    def _txn_lost_by_crashes(self, number: int, partitions: set[int]) -> bool:
        """
        A committed transaction's records in C{partitions} (or its commit
        markers after them) lost as an acknowledged record is
        (L{lost_by_crashes}): in each, every broker that held its record
        there when the commit was answered crashed afterwards losing
        unsynced bytes of that partition.
        """
        committed = self.txn_holders.get(number)
        if committed is None or not partitions:
            return False
        at, by_partition = committed
        return all(p in by_partition and self.lost_by_crashes(at, by_partition[p], TXN_TOPIC, p) for p in partitions)

    # --- invariants -------------------------------------------------------------------------

    def _state_written(self, path: str, data: bytes) -> None:
        """At most one leader per partition and leader epoch, over every state write."""
        parts = path.split("/")
        key = (parts[-4], int(parts[-2]))
        body = json.loads(data)
        leader, epoch = body["leader"], body["leader_epoch"]
        self.note(f"state {key[0]}-{key[1]} leader={leader} epoch={epoch} isr={body['isr']}")
        if leader < 0:
            return
        self.exercised["leader elections and ISR writes"] += 1
        seen = self.leaders.setdefault(key, {})
        if seen.setdefault(epoch, leader) != leader:
            self.violation("one leader per epoch",
                           f"{key[0]}-{key[1]} epoch {epoch}: leaders {seen[epoch]} and {leader}")

    def assignment(self) -> dict[tuple[str, int], list[int]]:
        """
        The replicas of each partition whose reassignment is not under way
        (none adding or removing), from the topic znodes.
        """
        assigned = {}
        for topic, data in sorted(self.zookeeper.topics.items()):
            written = decode_topic(topic, data)
            for partition, replicas in written.partitions.items():
                if not written.adding_replicas.get(partition) and not written.removing_replicas.get(partition):
                    assigned[(topic, partition)] = replicas
        return assigned

    def partition_states(self) -> dict[tuple[str, int], dict]:
        """The partition state znodes now (through a reader's session)."""
        states = {}
        for path, data in self._state_nodes():
            parts = path.split("/")
            states[(parts[-4], int(parts[-2]))] = json.loads(data)
        return states

    def _state_nodes(self) -> list[tuple[str, bytes]]:
        latest: dict[str, bytes] = {}
        for _, path, data in self.zookeeper.state_writes:
            latest[path] = data
        return sorted(latest.items())

    def check(self) -> None:
        """The invariants that hold at every step."""
        now = self.now()
        for broker_id, broker in sorted(self.brokers.items()):
            server = broker.server
            if server is None or server.replica_manager is None:
                continue
            for p in server.replica_manager.led_partitions():
                key = (broker_id, broker.incarnation, p.topic, p.partition, p.leader_epoch)
                try:
                    hw = p.high_watermark
                except Exception:  # an offline log dir
                    continue
                last = self.high_watermarks.get(key)
                self.exercised["high watermark samples"] += 1
                if last is not None and hw < last:
                    self.violation("high watermark never moves backwards",
                                   f"broker {broker_id} {p.topic}-{p.partition} epoch {p.leader_epoch}: {last} -> {hw}")
                self.high_watermarks[key] = max(hw, last or hw)
        if self.healed:
            self.restart_stopped()
        if self.active_faults:
            return
        dead = {b for b, broker in self.brokers.items() if broker.server is None}
        for broker_id in sorted(dead):
            since = max(self.brokers[broker_id].down_since or 0.0, self.disturbed_until)
            if now - since <= self.settings.isr_bound_s:
                continue
            self.exercised["dead broker out of the ISRs"] += 1
            for key, state in sorted(self.partition_states().items()):
                isr = state["isr"]
                if broker_id in isr and not set(isr) <= dead:
                    self.violation("a dead broker leaves every ISR",
                                   f"broker {broker_id} down since t={self.brokers[broker_id].down_since:.3f}s"
                                   f" is still in the ISR {isr} of {key[0]}-{key[1]}")
                    self.brokers[broker_id].down_since = now  # once per bound, not every check

    def check_replicas(self) -> None:
        """
        Every ISR member holds the leader's log up to the leader's high
        watermark, byte for byte (followers write the leader's batches as
        they are): the replicas are one prefix below it.
        """
        for (topic, partition), state in sorted(self.partition_states().items()):
            leader = self.brokers.get(state["leader"])
            if leader is None or leader.server is None or leader.server.replica_manager is None:
                continue
            led = leader.server.replica_manager.partitions.get((topic, partition))
            if led is None or not led.is_leader:
                continue
            hw = led.high_watermark
            expected = _batches_below(led.log, hw)
            for member in sorted(set(led.isr) - {leader.broker_id}):
                server = self.brokers[member].server
                replica = None if server is None or server.replica_manager is None else \
                    server.replica_manager.partitions.get((topic, partition))
                if replica is None:
                    continue
                held = _batches_below(replica.log, hw)
                self.exercised["ISR members compared"] += 1
                if held != expected:
                    self.violation("ISR members hold the log to the high watermark",
                                   f"{topic}-{partition}: broker {member} (ISR {led.isr}) differs from leader"
                                   f" {leader.broker_id} below its high watermark {hw}:"
                                   f" {_first_difference(expected, held)}")

    def holders(self, topic: str, partition: int, offset: int, since: float) -> frozenset[int]:
        """
        The brokers that may have held C{offset} of C{topic}-C{partition}
        when its acknowledgement, asked for at simulated time C{since}, was
        sent: those whose replica holds it now (its log end offset beyond
        it), and those that crashed since C{since} (the answer of a leader
        that crashed after it reaches the client late).
        """
        held = {b for b, crashes in self.crash_losses.items() if any(at >= since for at, _ in crashes)}
        for broker_id, broker in self.brokers.items():
            server = broker.server
            replica = None if server is None or server.replica_manager is None else \
                server.replica_manager.partitions.get((topic, partition))
            if replica is not None and replica.log is not None and replica.log.log_end_offset > offset:
                held.add(broker_id)
        return frozenset(held)

    @property
    def min_insync_replicas(self) -> int:
        """The topics' C{min.insync.replicas}: 2, or 1 with fewer than three brokers."""
        return 2 if self.settings.brokers >= 3 else 1

    def lost_by_crashes(self, acked_at: float, holders: frozenset[int], topic: str, partition: int) -> bool:
        """
        Whether a record that C{holders} held when it was acknowledged at
        C{acked_at} may be lost by Kafka's contract, which leaves flushing to
        the operating system (the disk model): every holder crashed after
        C{acked_at} losing unsynced bytes of C{topic}-C{partition}'s log.
        With C{min.insync.replicas} 1 (two brokers) also: at such a crash,
        every member of the partition's ISR then (as written in ZooKeeper;
        each holds what was acknowledged, which the end's check of the ISR
        members' logs checks) had crashed so since C{acked_at} -- a leader
        alone in the ISR loses what it acknowledged with its crash (KIP-966
        tolerates M-1 unclean shutdowns, none here), and a holder that had
        left the ISR (down, or behind) is not waited for.  With 2 only the
        first: that the replicas which left an ISR smaller than 2 stay
        electable is what the simulation checks, so it does not take the
        ISR's word for it.  Not proved by this: that a crash lost that
        record's bytes and not only later ones; a loss it excuses is counted
        (C{exercised["acknowledged records lost with every holder's unsynced bytes"]}).
        """
        if not holders:
            return False
        crashes = sorted((at, b) for b, broker_crashes in self.crash_losses.items() for at, lost in broker_crashes
                         if at >= acked_at and (topic, partition) in lost)
        crashed: set[int] = set()
        for at, broker in crashes:
            crashed.add(broker)
            if holders <= crashed:
                return True
            if self.min_insync_replicas == 1:
                in_sync = set(self.electable_at(topic, partition, at))
                if in_sync and in_sync <= crashed:
                    return True
        return False

    def electable_at(self, topic: str, partition: int, at: float) -> list[int]:
        """
        C{topic}-C{partition}'s ISR and eligible leader replicas as last
        written in ZooKeeper at simulated time C{at} (C{[]} before any).
        """
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        electable: list[int] = []
        for written, state_path, data in self.zookeeper.state_writes:
            if written - EPOCH_S > at:
                break
            if state_path.endswith(path):
                body = json.loads(data)
                electable = [*body.get("isr", []), *(body.get("eligible_leader_replicas") or ())]
        return electable

    def check_read_back(self, records: dict[int, list[tuple[int, bytes]]]) -> None:
        """No acknowledged record lost, duplicated or reordered (C{records}: partition -> [(offset, value)])."""
        where: dict[int, tuple[int, int]] = {}
        for partition, read in sorted(records.items()):
            last_sequence = -1
            for offset, value in read:
                sequence = int(value[:10])
                if sequence in where:
                    self.violation("no duplicate", f"record {sequence} at {where[sequence]} and {partition}@{offset}")
                where[sequence] = (partition, offset)
                if sequence < last_sequence:
                    self.violation("no reordering", f"record {sequence} at {partition}@{offset} after {last_sequence}")
                last_sequence = max(last_sequence, sequence)
        for sequence, (partition, offset) in sorted(self.acked.items()):
            found = where.get(sequence)
            if found is None and sequence in self.ack_holders and \
                    self.lost_by_crashes(*self.ack_holders[sequence], TOPIC, partition):
                self.exercised["acknowledged records lost with every holder's unsynced bytes"] += 1
            elif found is None:
                self.violation("no acknowledged record lost", f"record {sequence} acknowledged at {partition}@{offset}"
                               " is not in the log")
            elif found != (partition, offset):
                self.violation("no acknowledged record lost", f"record {sequence} acknowledged at {partition}@{offset}"
                               f" is read at {found[0]}@{found[1]}")

    # --- the run ---------------------------------------------------------------------------

    def run(self, schedule: Schedule) -> None:
        s = self.settings
        for broker_id in sorted(self.brokers):
            self.start_broker(broker_id)
        self.run_until(2.0)
        self.create_topic()
        self.run_until(2.5)
        self.start_producer()
        transactions = defer.ensureDeferred(self._transactions()) if s.transactions else None
        members = defer.DeferredList([defer.ensureDeferred(self._group_member(i)) for i in range(2)],
                                     consumeErrors=True) if s.groups else None
        for fault in schedule.faults:
            self.reactor.callLater(EPOCH_S + fault.at - self.reactor.seconds(), self.apply, fault)
        end_of_faults = max([f.at for f in schedule.faults] + [5.0 + s.fault_window_s])
        t = self.now()
        while t < end_of_faults:
            t = min(end_of_faults, t + s.check_every_s)
            self.run_until(t)
            self.check()
        self.heal_everything()
        self.liveness(end_of_faults)
        self._sending = False
        assert self.producer is not None
        fired, _ = self.wait_for(self.producer.flush(), self.now() + s.liveness_s)
        if not fired:
            self.violation("liveness", f"the producer's flush did not finish within {s.liveness_s:.0f} s")
        if members is not None:
            self._consuming = False
            fired, _ = self.wait_for(members, self.now() + s.liveness_s)
            if not fired:
                self.violation("liveness", f"the group's members did not stop within {s.liveness_s:.0f} s")
        if transactions is not None:
            self._transacting = False
            fired, _ = self.wait_for(transactions, self.now() + s.liveness_s)
            if not fired:
                self.violation("liveness", f"the transaction under way did not end within {s.liveness_s:.0f} s")
        self.check()
        # the read back comes once every broker is back in every ISR: a resumed zombie (paused past
        # its session) answers metadata and reads as the leader it was until its ZooKeeper client
        # has told it of the expiry, and a consumer that asked it would read a stale end (seed 15)
        self.rejoined()
        records = self.read_back()
        if records is not None:
            self.check_read_back(records)
        if transactions is not None and transactions.called:
            committed = self.read_back_committed()
            if committed is not None:
                self.check_transactions(committed)
        self.check_replicas()

    def liveness(self, since: float) -> None:
        """After the faults: a live leader for every partition, and a produce acknowledged to each, in bounded time."""
        s = self.settings
        deadline = since + s.liveness_s

        def led() -> bool:
            states = self.partition_states()
            live = {b for b, broker in self.brokers.items() if broker.server is not None and broker.server.ready.called}
            return len([k for k in states if k[0] == TOPIC]) == s.partitions and all(
                state["leader"] in live for key, state in states.items() if key[0] == TOPIC)

        t = self.now()
        while not led() and t < deadline:
            t = min(deadline, t + s.check_every_s)
            self.run_until(t)
            self.check()
        if not led():
            self.violation("liveness", f"not every partition has a live leader {s.liveness_s:.0f} s after the faults:"
                           f" {self.partition_states()}")
            return
        probes = defer.DeferredList([self.send_one(p) for p in range(s.partitions)], consumeErrors=True)
        fired, results = self.wait_for(probes, deadline)
        if not fired or not all(ok for ok, _ in results):
            self.violation("liveness", f"a produce to every partition was not acknowledged within {s.liveness_s:.0f} s"
                           " after the faults")

    def rejoined(self) -> None:
        """Liveness: after the flush, every broker is back in every ISR within L{Settings.liveness_s}."""
        s = self.settings
        deadline = self.now() + s.liveness_s

        def full() -> bool:
            assigned = self.assignment()
            return all(key in assigned and sorted(state["isr"]) == sorted(assigned[key])
                       for key, state in self.partition_states().items())

        t = self.now()
        while not full() and t < deadline:
            t = min(deadline, t + s.check_every_s)
            self.run_until(t)
            self.check()
        if not full():
            self.violation("liveness", f"not every replica is back in its ISR {s.liveness_s:.0f} s after the"
                           f" flush (or a reassignment did not finish): {self.partition_states()},"
                           f" assigned {self.assignment()}")
        self.run_until(self.now() + 1.0)  # the followers fetch the high watermark

    def read_back(self) -> dict[int, list[tuple[int, bytes]]] | None:
        """Every partition from its log start to its high watermark, with a new consumer."""
        s = self.settings
        client = KafkaClient(self.client_reactor, self.bootstrap, client_id="sim-consumer", request_timeout_ms=10000,
                             random_source=random.Random(f"consumer-{self.seed}"))
        consumer = Consumer(self.client_reactor, client=client, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                            max_partition_fetch_bytes=s.fetch_max_bytes)
        started = self.start_reading(consumer, TOPIC)
        if started is None:
            return None
        deadline, ends = started
        records: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(s.partitions)}
        positions = {p: -1 for p in range(s.partitions)}
        while any(positions[p] < ends[(TOPIC, p)] for p in positions) and self.now() < deadline:
            fired, polled = self.wait_for(consumer.poll(timeout_ms=500), deadline)
            if not fired:
                break  # the deadline came during the poll: the liveness check below says where it stopped
            if isinstance(polled, Failure):
                self.violation("read back", f"poll failed: {polled}")
                return None
            for record in polled:
                records[record.partition].append((record.offset, record.value))
                positions[record.partition] = record.offset + 1
        if any(positions[p] < ends[(TOPIC, p)] for p in positions):
            self.violation("liveness", f"the log could not be read to its end within {s.liveness_s:.0f} s:"
                           f" at {positions}, ends {ends}")
        self.read_count = sum(len(read) for read in records.values())
        for p, read in sorted(records.items()):
            self.note(f"read {p}: " + ",".join(f"{o}:{v[:10].decode()}" for o, v in read))
        return records

    def trace_hash(self) -> str:
        """
        The SHA-256 of the trace, each instant's lines sorted: what happens at
        one simulated instant may come in an order that Python's memory
        layout decides (the producer keeps its ready partitions in a set of
        objects), and it is the same run whatever that order.
        """
        return hashlib.sha256("\n".join(sorted(self.trace, key=lambda line: (float(line.split(" ", 1)[0]), line)))
                              .encode()).hexdigest()

    def dispose(self) -> None:
        """Drop every node (as crashes), closing what this process holds open: locks, files."""
        for broker in self.brokers.values():
            server = broker.server
            if broker.reactor is not None:
                broker.reactor.kill()
            if server is not None:
                if server.log_dir_lock is not None and server.log_dir_lock.held:
                    server.log_dir_lock.release()
                if server.log_manager is not None:
                    try:
                        server.log_manager.close()
                    except Exception:
                        pass
            broker.server = None
        self.client_reactor.kill()


def run_seed(seed: int, settings: Settings | None = None, directory: str | None = None,
             schedule: Schedule | None = None) -> RunResult:
    """
    Run one seed: its schedule (or C{schedule}), the invariants, the trace's hash.

    @param directory: where the brokers' log dirs go (a temporary directory,
        on C{/dev/shm} when there is one, removed after, when C{None}).
    """
    settings = settings or Settings()
    schedule = schedule or make_schedule(seed, settings)
    started = time.perf_counter()
    own = directory is None
    # on tmpfs when there is one: the brokers' fsyncs (checkpoints, closing) cost nothing there
    directory = directory or tempfile.mkdtemp(prefix=f"kafkatw-sim-{seed}-",
                                              dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    cluster = Cluster(seed, settings, directory)
    logged: list[str] = []

    def observe(event: dict) -> None:
        if event.get("log_failure") is not None:
            failure = event["log_failure"]
            logged.append(f"{formatEvent(event)}: {failure.type.__name__}: {failure.getErrorMessage()}")

    globalLogPublisher.addObserver(observe)
    try:
        try:
            cluster.run(schedule)
        except Exception as e:
            cluster.violation("no exception", f"{type(e).__name__}: {e}")
        return RunResult(seed, schedule, cluster.violations, cluster.trace_hash(), len(cluster.acked),
                         len(cluster.failed), cluster.read_count,
                         cluster.now(), time.perf_counter() - started, cluster.reactor.events, cluster.trace, logged,
                         dict(cluster.exercised))
    finally:
        globalLogPublisher.removeObserver(observe)
        cluster.dispose()
        gc.collect()  # the seed's cycles; the brokers do not gc.freeze() here (freeze_after_start)
        if own:
            shutil.rmtree(directory, ignore_errors=True)


def shrink(seed: int, settings: Settings, result: RunResult,
           progress: Callable[[RunResult], object] = lambda result: None) -> RunResult:
    """
    A shorter schedule that still fails the same way: leave out one fault of
    the seed's schedule at a time (greedily, first to last, again after each
    success), keeping it out while the run still breaks the first
    violation's invariant.  Deterministic, like the runs.

    @return: the failing run of the shortest schedule found (its
        C{schedule.dropped} says which faults of the seed's schedule it leaves out).
    """
    full = make_schedule(seed, settings).faults
    wanted = result.violations[0].invariant if result.violations else None
    best, dropped = result, set(result.schedule.dropped)
    shrunk = True
    while shrunk:
        shrunk = False
        for index in range(len(full)):
            if index in dropped:
                continue
            candidate = best.schedule.without(tuple(dropped | {index}), full)
            attempt = run_seed(seed, settings, schedule=candidate)
            progress(attempt)
            if any(v.invariant == wanted for v in attempt.violations):
                best, dropped, shrunk = attempt, dropped | {index}, True
    return best
