"""
Failover time: how long after a broker's SIGKILL its partitions are led and
written again, as a function of C{zookeeper.session.timeout.ms} and of the
partition count.

Starts a real ZooKeeper (C{tickTime} C{--tick-time-ms}, 2000 as in
ZooKeeper's sample configuration: sessions may then last 4 to 40 s) and
three kafkatw brokers here (127.0.0.1 only; they share this machine's cores
with the client), creates one topic of C{--partitions} partitions,
replication factor 3, C{min.insync.replicas=2}, waits until every partition
has a leader and a full ISR, and then, C{--runs} times per scenario:

  - C{leader}: SIGKILL a broker that leads partitions and is not the
    controller;
  - C{controller}: SIGKILL the controller (which leads partitions too);
  - C{sigterm}: SIGTERM a leader that is not the controller (a controlled
    shutdown: the broker moves its leaderships away and closes its session).

Before each kill an acks=all producer (librdkafka: confluent-kafka,
idempotent) sends C{--load-rate} records/s over the victim's partitions in
the background, and two probe producers (librdkafka, and kafkatw's own) each
have one record acknowledged on each of two I{probe} partitions led by the
victim: the first and the last of them in the order the controller settles
partitions (partition number).  Right after the kill each probe producer
sends one record to each probe (retried until the partition has a new
leader); every acknowledgement after the kill is the successor's (the victim
is dead).
The figures of a run, in seconds from the kill (C{time.monotonic}, the same
clock throughout):

  - C{registration_gone}: C{/brokers/ids/<victim>} deleted (its session
    expired or was closed): what the session timeout governs;
  - C{controller_elected} (controller scenario): C{/controller} names another
    broker;
  - C{first_led} / C{all_led}: the first / the last of the victim's
    partitions whose state znode names a leader other than the victim (what
    the controller's work per partition governs, after C{registration_gone});
  - C{kafkatw_ack_first_probe} / C{kafkatw_ack_last_probe}, and
    C{librdkafka_ack_...}: the probes' acknowledgements by kafkatw's
    producer (L{BlockingProducer}) and by librdkafka -- the acks=all write
    on the successor: a new leader, the remaining follower fetching from it
    (the ISR of two complete), and the client having found the new leader
    (librdkafka re-queries a partition's leader about once a second while its
    leader is down).  The clients retry with their own defaults (100 ms)
    unless C{--client-backoff-ms} says otherwise; every retry asks a broker
    for Metadata, which for thousands of partitions costs it real CPU;
  - C{surviving_brokers_cpu_s}: CPU seconds the surviving brokers used from
    the kill to C{all_led}.

The state znodes are watched (one ZooKeeper watch per partition, re-armed on
each change), not polled.  After each run the victim is started again on its
log directories, every ISR is waited for to be full again, and a preferred
leader election (ElectLeaders) gives every broker back its leaderships, so
that every run starts from the same placement.  The setup costs (topic
creation to every partition led and in sync, restart to full ISRs) are
printed too, and the 1-minute load average at each kill.

One JSON line per run (C{"figure": "run"}), then per scenario and figure one
line with the median, min and max over the runs.  Several configurations
are measured on one cluster and topic, one after the other (C{--configs}:
each a session timeout, with C{+guard} for C{zookeeper.session.guard.enable});
the brokers are restarted one at a time with the next one.  A cluster that
does not come back to the starting point (full ISRs, then ElectLeaders
making progress) ends that scenario with a C{"note"} line.  Every loop is
bounded in time.  Usage::

  python bench/bench_failover.py --configs 6000,18000,18000+guard --partitions 100 --runs 3 \
      --scenarios leader,controller,sigterm
  python bench/bench_failover.py --configs 6000,18000,18000+guard --partitions 4000 --runs 3
  # any broker config: --override KEY=VALUE (repeatable)

With C{--py-spy PATH} the controller (the broker that stays the controller
in the C{leader} scenario) is sampled by py-spy (C{record --format raw}) from
the kill until C{all_led}; the collapsed stacks go to C{--profile-dir}.
C{--probe-debug DIR} writes the librdkafka probe's debug log there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from kafkatw.client import BlockingProducer
from kafkatw.testing import BrokerProcess, ZooKeeperFixture

from _common import cpu_seconds, emitter

emit = emitter("failover")

TOPIC = "failover"
CHROOT = "/kafkatw"


def state_path(partition: int) -> str:
    return f"/brokers/topics/{TOPIC}/partitions/{partition}/state"


def read_states(zk: KazooClient, partitions: int, timeout_s: float = 60.0) -> dict[int, dict]:
    """Every partition's state znode (pipelined reads): partition -> C{{"leader", "isr", ...}}."""
    pending = {p: zk.get_async(state_path(p)) for p in range(partitions)}
    states = {}
    for p, result in pending.items():
        try:
            data, _ = result.get(timeout=timeout_s)
        except Exception:
            continue
        states[p] = json.loads(data)
    return states


def controller_id(zk: KazooClient) -> int:
    try:
        data, _ = zk.get("/controller")
    except Exception:
        return -1
    return int(json.loads(data)["brokerid"])


def wait_states(zk: KazooClient, partitions: int, assignment: dict[int, list[int]], want: str,
                timeout_s: float) -> float:
    """
    Wait until every partition has a live leader and a full ISR (C{want="isr"}),
    and also leads on its preferred replica (C{want="preferred"}).

    @return: the seconds it took.
    @raise RuntimeError: not within C{timeout_s}.
    """
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        states = read_states(zk, partitions)
        bad = [p for p in range(partitions)
               if p not in states or len(states[p]["isr"]) < len(assignment[p]) or states[p]["leader"] < 0
               or (want == "preferred" and states[p]["leader"] != assignment[p][0])]
        if not bad:
            return time.monotonic() - started
        time.sleep(0.5)
    raise RuntimeError(f"{len(bad)} partitions not {want} within {timeout_s} s (e.g. {bad[:5]})")


class Observer:
    """
    Watches, from a kazoo thread, the victim's registration, C{/controller} and
    the state znodes of the victim's partitions; records the first time each
    shows the victim gone (C{time.monotonic}).
    """

    def __init__(self, zk: KazooClient, victim: int, partitions: list[int]) -> None:
        self.zk = zk
        self.victim = victim
        self.partitions = partitions
        self.led_at: dict[int, float] = {}
        self.registration_gone_at: float | None = None
        self.controller_at: float | None = None
        self.done = threading.Event()
        self.stopped = False

    def start(self) -> None:
        for p in self.partitions:
            self._get(p)
        self._registration()
        self._controller()

    def _get(self, p: int) -> None:
        if self.stopped:
            return
        self.zk.get_async(state_path(p), watch=lambda event: self._get(p)).rawlink(
            lambda result: self._state(p, result))

    def _state(self, p: int, result: Any) -> None:
        try:
            data, _ = result.get_nowait()
        except Exception:
            return
        leader = json.loads(data)["leader"]
        if leader not in (-1, self.victim) and p not in self.led_at:
            self.led_at[p] = time.monotonic()
            if len(self.led_at) == len(self.partitions):
                self.done.set()

    def _registration(self) -> None:
        if self.stopped:
            return

        def seen(result: Any) -> None:
            try:
                stat = result.get_nowait()
            except Exception:
                return
            if stat is None and self.registration_gone_at is None:
                self.registration_gone_at = time.monotonic()

        self.zk.exists_async(f"/brokers/ids/{self.victim}", watch=lambda event: self._registration()).rawlink(seen)

    def _controller(self) -> None:
        if self.stopped:
            return

        def seen(result: Any) -> None:
            try:
                data, _ = result.get_nowait()
            except Exception:
                return  # no /controller now: the watch fires on its creation
            if int(json.loads(data)["brokerid"]) != self.victim and self.controller_at is None:
                self.controller_at = time.monotonic()

        self.zk.exists_async("/controller", watch=lambda event: self._controller()).rawlink(
            lambda result: self.zk.get_async("/controller").rawlink(seen))


class Load(threading.Thread):
    """A background acks=all producer: C{rate} records/s over C{partitions}, until stopped (bounded)."""

    def __init__(self, bootstrap: str, partitions: list[int], rate: float, cap_s: float, backoff: dict) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "queue.buffering.max.messages": 1000000, "log_level": 2, **backoff})
        self.partitions = partitions
        self.rate = rate
        self.cap_s = cap_s
        self.stop_event = threading.Event()
        self.sent = 0

    def run(self) -> None:
        if not self.partitions or self.rate <= 0:
            return
        started = time.monotonic()
        interval = 1.0 / self.rate
        while not self.stop_event.is_set() and time.monotonic() - started < self.cap_s:
            p = self.partitions[self.sent % len(self.partitions)]
            try:
                self.producer.produce(TOPIC, b"l" * 100, partition=p)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0)
            self.stop_event.wait(interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)
        self.producer.flush(0)  # what is left is not waited for: the next run starts afresh
        self.producer.purge()


def start_cluster(base: str, zk_connect: str, overrides: dict[str, str], env: dict[str, str]) -> list[BrokerProcess]:
    brokers = []
    for broker_id in range(3):
        brokers.append(BrokerProcess(broker_id, zk_connect + CHROOT, base, overrides, env=env).start(timeout_s=300))
    return brokers


def librdkafka_backoff(args: argparse.Namespace) -> dict:
    """librdkafka's retry and leader re-query intervals for C{--client-backoff-ms} (none: its defaults)."""
    if args.client_backoff_ms is None:
        return {}
    ms = args.client_backoff_ms
    return {"retry.backoff.ms": ms, "retry.backoff.max.ms": max(ms, 50), "topic.metadata.refresh.fast.interval.ms": ms,
            "reconnect.backoff.max.ms": max(ms, 100)}


def summarize(scenario: str, runs: list[dict], params: dict) -> None:
    figures = sorted({k for run in runs for k, v in run.items() if isinstance(v, (int, float))
                      and k not in ("run", "victim", "victim_partitions")})
    for figure in figures:
        values = [run[figure] for run in runs if run.get(figure) is not None]
        if not values:
            continue
        emit(f"{scenario}_{figure}", round(statistics.median(values), 3), "s" if figure != "load_1min" else "load",
             min=round(min(values), 3), max=round(max(values), 3), runs=len(values), **params)


def one_run(scenario: str, run: int, zk: KazooClient, brokers: list[BrokerProcess], bootstrap: str,
            args: argparse.Namespace, profile_dir: str | None) -> dict:
    args.last_result = None
    partitions = args.partitions
    states = read_states(zk, partitions)
    controller = controller_id(zk)
    led: dict[int, list[int]] = {b.broker_id: [] for b in brokers}
    for p, s in sorted(states.items()):
        if s["leader"] in led:
            led[s["leader"]].append(p)
    if scenario == "controller":
        victim = controller
    else:
        candidates = [b for b in led if b != controller and led[b]]
        victim = max(candidates, key=lambda b: len(led[b]))
    victim_partitions = led[victim]
    probes = [victim_partitions[0], victim_partitions[-1]]

    # the probes: acknowledged once before the kill (connections and metadata warm)
    probe_conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                  "log_level": 2, **librdkafka_backoff(args)}
    if args.probe_debug:
        import logging
        logger = logging.getLogger(f"probe-{scenario}-{run}")
        handler = logging.FileHandler(os.path.join(args.probe_debug, f"probe-{scenario}-{run}.log"))
        handler.setFormatter(logging.Formatter("%(created).3f %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        probe_conf.update({"debug": "broker,metadata,msg,topic,eos", "log_level": 7, "logger": logger})
    probe = Producer(probe_conf)
    for p in probes:
        probe.produce(TOPIC, b"warm", partition=p)
    if probe.flush(30):
        raise RuntimeError("the probe records were not acknowledged before the kill")
    own = BlockingProducer(bootstrap, acks=-1, enable_idempotence=True, linger_ms=0,
                           **({} if args.client_backoff_ms is None else {"retry_backoff_ms": args.client_backoff_ms}))
    for p in probes:
        own.send_and_wait(TOPIC, b"warm", partition=p, timeout_s=30)
    load = Load(bootstrap, [p for p in victim_partitions if p not in probes], args.load_rate,
                args.session_timeout_ms / 1000 + args.run_cap_s, librdkafka_backoff(args))
    load.start()
    time.sleep(1.0)

    observer = Observer(zk, victim, victim_partitions)
    observer.start()
    time.sleep(0.5)  # the watches are set
    survivors = [b for b in brokers if b.broker_id != victim]
    cpu_before = {b.broker_id: cpu_seconds(b.popen.pid) for b in survivors}
    spy = None
    if profile_dir and scenario == "leader":
        spy = subprocess.Popen([args.py_spy, "record", "--pid", str(brokers[controller].popen.pid), "--format", "raw",
                                "--rate", "200", "--nonblocking", "-o",
                                os.path.join(profile_dir, f"leader-p{partitions}-s{args.session_timeout_ms}-run{run}.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load_1min = os.getloadavg()[0]

    acked: dict[int, float] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.setdefault(msg.partition(), time.monotonic())

    killed = time.monotonic()
    if args.probe_debug:
        with open(os.path.join(args.probe_debug, f"probe-{scenario}-{run}.log"), "a") as f:
            f.write(f"{time.time():.3f} KILL {victim} probes {probes}\n")
    if scenario == "sigterm":
        brokers[victim].popen.terminate()
    else:
        brokers[victim].popen.kill()
    for p in probes:
        probe.produce(TOPIC, b"after", partition=p, on_delivery=delivered)
    own_acked: dict[int, float] = {}

    def wait_own(future: Any, p: int) -> None:
        try:
            future.get(args.session_timeout_ms / 1000 + args.run_cap_s)
        except Exception:
            return
        own_acked[p] = time.monotonic()

    own_waiters = [threading.Thread(target=wait_own, args=(own.send(TOPIC, b"after", partition=p), p), daemon=True)
                   for p in probes]
    for waiter in own_waiters:
        waiter.start()
    deadline = killed + args.session_timeout_ms / 1000 + args.run_cap_s
    cpu_after: dict[int, float] = {}
    exited_at = None
    while time.monotonic() < deadline:
        probe.poll(0.005)
        if exited_at is None and brokers[victim].popen.poll() is not None:
            exited_at = time.monotonic()
        if observer.done.is_set() and not cpu_after:
            cpu_after = {b.broker_id: cpu_seconds(b.popen.pid) for b in survivors}
            if spy is not None:
                spy.send_signal(2)  # SIGINT: py-spy writes what it sampled
        acks_in = len(acked) == len(own_acked) == len(probes)
        if observer.done.is_set() and observer.registration_gone_at is not None and (
                exited_at is not None if scenario == "sigterm" else acks_in) and (
                scenario != "controller" or observer.controller_at is not None):
            break
    observer.stopped = True
    load.stop()
    probe.purge()
    own.close(5)
    if spy is not None:
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
    try:
        brokers[victim].popen.wait(30)
    except subprocess.TimeoutExpired:
        brokers[victim].popen.kill()

    def since(t: float | None) -> float | None:
        return None if t is None else round(t - killed, 3)

    led_times = sorted(observer.led_at.values())
    result = {
        "run": run, "victim": victim, "victim_partitions": len(victim_partitions), "load_1min": load_1min,
        "registration_gone": since(observer.registration_gone_at),
        "first_led": since(led_times[0]) if led_times else None,
        "all_led": since(led_times[-1]) if len(led_times) == len(victim_partitions) else None,
        "librdkafka_ack_first_probe": since(acked.get(probes[0])),
        "librdkafka_ack_last_probe": since(acked.get(probes[1])),
        "kafkatw_ack_first_probe": since(own_acked.get(probes[0])),
        "kafkatw_ack_last_probe": since(own_acked.get(probes[1])),
        "surviving_brokers_cpu_s": round(sum(cpu_after[b] - cpu_before[b] for b in cpu_after), 2) if cpu_after else None,
    }
    if scenario == "controller":
        result["controller_elected"] = since(observer.controller_at)
    if scenario == "sigterm":
        # the victim serves (and acknowledges) while it moves its leaderships: no successor's figure
        for key in [k for k in result if "_ack_" in k]:
            del result[key]
        result["exited"] = since(exited_at)
    if observer.registration_gone_at is not None and led_times and scenario != "sigterm":
        result["registration_gone_to_all_led"] = round(led_times[-1] - observer.registration_gone_at, 3)
    emit("run", None, "", scenario=scenario, partitions=partitions, session_timeout_ms=args.session_timeout_ms,
         guard=args.guard_on, **result)

    args.last_result = result
    # back to the starting point: the victim again, full ISRs, preferred leaders
    started = time.monotonic()
    brokers[victim].start(timeout_s=300)
    restart_s = time.monotonic() - started
    isr_s, preferred_s = restore(zk, bootstrap, args)
    emit("recovery", round(time.monotonic() - started, 3), "s", scenario=scenario, run=run,
         restart_s=round(restart_s, 3), isr_full_s=round(isr_s, 3), preferred_s=round(preferred_s, 3),
         partitions=partitions)
    return result


def restore(zk: KazooClient, bootstrap: str, args: argparse.Namespace) -> tuple[float, float]:
    """
    Wait for every ISR to be full, then elect the preferred leader where
    another broker leads (ElectLeaders), and wait for that.

    @return: seconds to full ISRs, and then to preferred leaders.
    """
    isr_s = wait_states(zk, args.partitions, args.assignment, "isr", args.settle_timeout_s)
    started = time.monotonic()
    # (a controller that does not answer within a minute counts as no progress, below)
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 60000, "log_level": 2})
    progress: list[int] = []
    while True:
        states = read_states(zk, args.partitions)
        moved = [TopicPartition(TOPIC, p) for p in range(args.partitions)
                 if states[p]["leader"] != args.assignment[p][0]]
        if not moved:
            return isr_s, time.monotonic() - started
        progress.append(len(moved))
        if time.monotonic() - started > args.settle_timeout_s or progress[-4:] == [len(moved)] * 4:
            raise RuntimeError(f"{len(moved)} partitions not on their preferred leader after "
                               f"{time.monotonic() - started:.0f} s of ElectLeaders (is the controller stuck?)")
        try:
            errors = admin.elect_leaders(ElectionType.PREFERRED, moved).result(90)
        except Exception as e:  # the controller moved, say: ask again
            emit("note", f"ElectLeaders: {e}"[:300], "")
        else:
            failed = {str(e) for e in errors.values() if e is not None}
            if failed:
                emit("note", f"ElectLeaders: {len(failed)} kinds of error, e.g. {sorted(failed)[:2]}"[:300], "")
        try:
            wait_states(zk, args.partitions, args.assignment, "preferred", 15)
        except RuntimeError:
            continue  # elect the rest again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--session-timeouts-ms", default="18000",
                        help="comma-separated zookeeper.session.timeout.ms values, each measured in turn (the "
                             "brokers are restarted with the next one; the topic stays)")
    parser.add_argument("--guard", default="off", help="zookeeper.session.guard.enable: off, on, or off,on")
    parser.add_argument("--configs", default=None, metavar="T[+guard][+patched][+runs=N],...",
                        help="instead of the product of the two above: the combinations to measure, in order, "
                             "e.g. 6000,18000,18000+guard; +patched runs the brokers on --patched's copy of kafkatw")
    parser.add_argument("--patched", default=None, metavar="DIR",
                        help="a directory holding another kafkatw/ (PYTHONPATH of the brokers of +patched configs)")
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scenarios", default="leader,controller",
                        help="comma-separated: leader, controller, sigterm")
    parser.add_argument("--tick-time-ms", type=int, default=2000, help="ZooKeeper's tickTime")
    parser.add_argument("--load-rate", type=float, default=200, help="background acks=all records/s")
    parser.add_argument("--client-backoff-ms", type=int, default=None,
                        help="the producers' retry backoff and (librdkafka) leader re-query interval; default: each "
                             "client's own (100 ms). Each retry asks for Metadata, which for thousands of partitions "
                             "costs the brokers real CPU during a failover")
    parser.add_argument("--run-cap-s", type=float, default=180, help="a run's bound past the session timeout")
    parser.add_argument("--settle-timeout-s", type=float, default=1800,
                        help="bound on creation, ISR recovery and preferred election")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config for every broker")
    parser.add_argument("--py-spy", default=None, help="py-spy executable: profile the controller (leader runs)")
    parser.add_argument("--profile-dir", default=None)
    parser.add_argument("--probe-debug", default=None, metavar="DIR",
                        help="write the probe producer's librdkafka debug log here")
    parser.add_argument("--keep", action="store_true",
                        help="keep the brokers' logs and data (printed path); kept anyway when a run fails")
    args = parser.parse_args()
    args.last_result = None
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))  # stop the cluster on the way out
    if args.configs:
        combinations = []
        for item in args.configs.split(","):
            timeout, *flags = item.split("+")
            runs = next((int(f[5:]) for f in flags if f.startswith("runs=")), args.runs)
            combinations.append((int(timeout), "guard" in flags, "patched" in flags, runs))
    else:
        combinations = [(int(t), g == "on", False, args.runs) for t in args.session_timeouts_ms.split(",")
                        for g in args.guard.split(",")]
    if any(c[2] for c in combinations) and not args.patched:
        parser.error("+patched needs --patched DIR")
    base_overrides = {"zookeeper.connection.timeout.ms": "30000",
                      # no rebalance of its own during a run: the bench elects preferred leaders between runs
                      "auto.leader.rebalance.enable": "false"}
    for item in args.override:
        key, _, value = item.partition("=")
        base_overrides[key] = value
    emit("setup", None, "", cores=os.cpu_count(), load_1min=os.getloadavg()[0], tick_time_ms=args.tick_time_ms,
         partitions=args.partitions, combinations=combinations, overrides=base_overrides)
    profile_dir = None
    if args.py_spy:
        profile_dir = args.profile_dir or tempfile.mkdtemp(prefix="kafkatw-failover-profile-")
        os.makedirs(profile_dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="kafkatw-failover-")
    zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"), tick_time_ms=args.tick_time_ms)
    brokers: list[BrokerProcess] = []
    zk = None
    try:
        connect = zookeeper.start()
        zk = KazooClient(hosts=connect + CHROOT, timeout=30)
        env: dict[str, str] = {}
        for index, (timeout_ms, guard, patched, runs) in enumerate(combinations):
            args.session_timeout_ms, args.guard_on = timeout_ms, guard
            overrides = {**base_overrides, "zookeeper.session.timeout.ms": str(timeout_ms),
                         "zookeeper.session.guard.enable": str(guard).lower()}
            params = {"partitions": args.partitions, "session_timeout_ms": timeout_ms, "guard": guard,
                      "patched": patched}
            new_env = {"PYTHONPATH": args.patched} if patched else {}
            started = time.monotonic()
            if index == 0:
                env = new_env
                brokers = start_cluster(base, connect, overrides, env)
                emit("brokers_started", round(time.monotonic() - started, 3), "s", **params)
                zk.start(30)
                bootstrap = ",".join(b.bootstrap for b in brokers)
                admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2, "socket.timeout.ms": 300000})
                # operation_timeout 0: the answer comes once the assignment is written; leaders are waited for below
                admin.create_topics([NewTopic(TOPIC, args.partitions, 3, config={"min.insync.replicas": "2"})],
                                    request_timeout=300, operation_timeout=0)[TOPIC].result(300)
                created_s = time.monotonic() - started
                topic = json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])
                args.assignment = {int(p): r for p, r in topic["partitions"].items()}
                isr_s = wait_states(zk, args.partitions, args.assignment, "isr", args.settle_timeout_s)
                emit("topic_created", round(created_s, 3), "s", to_full_isr_s=round(created_s + isr_s, 3),
                     load_1min=os.getloadavg()[0], **params)
            elif new_env != env:  # other code: all stopped, then all started (a stuck controller stops too)
                env = new_env
                for broker in brokers:
                    broker.stop(timeout_s=120)
                for broker in brokers:
                    broker.overrides, broker.env = overrides, env
                    broker.start(timeout_s=300)
                restore(zk, bootstrap, args)
                emit("brokers_restarted", round(time.monotonic() - started, 3), "s", load_1min=os.getloadavg()[0],
                     **params)
            else:
                for broker in brokers:  # one at a time, each in sync again before the next
                    broker.stop(timeout_s=120)
                    broker.overrides = overrides
                    broker.start(timeout_s=300)
                    wait_states(zk, args.partitions, args.assignment, "isr", args.settle_timeout_s)
                restore(zk, bootstrap, args)
                emit("brokers_restarted", round(time.monotonic() - started, 3), "s", load_1min=os.getloadavg()[0],
                     **params)
            stuck = False
            for scenario in [s for s in args.scenarios.split(",") if s]:
                results = []
                for run in range(runs):
                    try:
                        results.append(one_run(scenario, run, zk, brokers, bootstrap, args, profile_dir))
                    except RuntimeError as e:  # not back to the starting point: no later run could compare
                        emit("note", f"{scenario} run {run}: {e}; the measurement stops here"[:300], "", **params)
                        results.append(args.last_result)
                        stuck = args.keep = True  # its logs are what tells why
                        break
                summarize(scenario, [r for r in results if r], params)
                if stuck:
                    break
            if stuck:
                break
        if profile_dir:
            emit("profiles", profile_dir, "path")
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        for broker in brokers:
            broker.stop(timeout_s=120)
        zookeeper.stop()
        if args.keep:
            emit("kept", base, "path")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
