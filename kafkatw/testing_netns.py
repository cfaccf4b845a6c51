"""
Network faults as Jepsen tests them: ZooKeeper, three brokers and the
clients each in a Linux network namespace of their own on one bridge, and
nftables inside a broker's namespace to cut it off from everyone, from
ZooKeeper only (the zombie leader), from its peers only, from the clients
only, or to drop a share of its packets; then heal.

The network (made by L{BridgeNetwork}; root only)::

    root namespace:  bridge <prefix>br, with NO address (a switch only: nothing
                     in the root namespace can reach the test addresses)
      |-- veth -- namespace <prefix>-zk   10.213.0.2    ZooKeeper :2181
      |-- veth -- namespace <prefix>-b0   10.213.0.10   broker 0  :9092
      |-- veth -- namespace <prefix>-b1   10.213.0.11   broker 1  :9092
      |-- veth -- namespace <prefix>-b2   10.213.0.12   broker 2  :9092
      `-- veth -- namespace <prefix>-cl   10.213.0.100  clients, nemesis, checker

C{<prefix>} is C{ktnf<pid>}: a run removes what a crashed earlier run left
(L{cleanup_leftovers}: namespaces and bridges whose pid no longer runs).  The
addresses exist only inside these namespaces; each namespace routes only
10.213.0.0/24 (no default route), so no packet of a run leaves the bridge.

The faults (L{fault_rules}; a table C{inet kafkatw_nemesis} with an input
and an output chain in the victim's namespace; C{flush chain} heals)::

    isolate     iifname "eth0" drop / oifname "eth0" drop   (loopback stays up)
    zookeeper   ip saddr ZK drop / ip daddr ZK drop          (the zombie leader)
    peers       ip saddr {other brokers} drop / ip daddr ... (replication cut)
    clients     ip saddr CLIENT drop / ip daddr CLIENT drop
    loss        numgen random mod 100 < P drop               (each direction)

The run (L{run_network_faults}, or C{python -m kafkatw.testing_netns}): a
topic of C{partitions} partitions, replication factor 3,
C{min.insync.replicas=2}; an idempotent acks=all producer (librdkafka,
C{enable.idempotence=true}) sends sequence-numbered records
C{b"<partition>:<seq>"} to each partition at a bounded rate and notes which
were acknowledged, at which offset and when; a consumer group of two
members consumes and commits; a poller reads the group's committed offsets
(OffsetFetch) twice a second; a nemesis chooses faults from the seed (each
kind once per round, in a seeded order, so that a run of C{seconds} has at
least one of each), each for 3 to 7 s, then heals and waits (at most 30 s)
for every ISR to be full again.  After the last fault every ISR must be full within 60 s (else the
partitions are I{stuck}); then the checker reads every partition from
offset 0 to its high watermark from its leader and counts:

  - C{lost}: acknowledged records not in the log;
  - C{duplicated}: records in the log more than once (idempotence);
  - C{reordered}: acknowledged records whose sequence numbers are out of order
    in the log, and C{offset_mismatches}: acknowledged offsets holding
    another record;
  - C{replica_mismatches}: partitions whose replicas differ below the high
    watermark (the batches of each replica's segment files, byte for byte);
  - C{offsets_moved_back}: committed group offsets seen lower than an earlier
    committed offset of the same partition;
  - C{group_missing}: acknowledged records the group never received;

and reports the longest stall: the longest time a partition went without an
acknowledgement while the producer ran (ms).

The clients, the nemesis and the checker run in one child process inside the
client namespace (C{ip netns exec <prefix>-cl python -m kafkatw.testing_netns
--clients CONFIG}); this process makes the network, starts ZooKeeper and the
brokers in their namespaces (C{ip netns exec}, which keeps the pid), reads the
child's one-line JSON summary and tears everything down, failure or not.

Needs root, C{ip} (iproute2), C{nft} (nftables), Debian's C{zookeeper} and
the C{test} extra (confluent-kafka).  docs/fault-testing.md describes the
runs and their figures.

Source: Jepsen's Kafka analysis (the zombie leader, partitions); Kafka's
replication design (KIP-101 leader epochs, KIP-320).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kafkatw.testing import BrokerProcess

__all__ = [
    "SUBNET",
    "FAULT_KINDS",
    "NetnsUnavailableError",
    "netns_unavailable_reason",
    "cleanup_leftovers",
    "Host",
    "BridgeNetwork",
    "Firewall",
    "fault_rules",
    "NamespacedZooKeeper",
    "NamespacedBroker",
    "NetnsCluster",
    "Summary",
    "check_partition",
    "longest_stall",
    "replica_batches",
    "run_network_faults",
    "main",
]

#: The test addresses: C{SUBNET + ".N"}, /24; they exist only inside the run's namespaces.
SUBNET = "10.213.0"
ZOOKEEPER_HOST = 2
BROKER_HOST_BASE = 10
CLIENT_HOST = 100
ZOOKEEPER_PORT = 2181
BROKER_PORT = 9092
TABLE = "kafkatw_nemesis"
PREFIX = "ktnf"

#: The nemesis's faults (see the module docstring).
FAULT_KINDS = ("isolate", "zookeeper", "peers", "clients", "loss")

#: Broker settings of a run: faults of a few seconds must be seen (ISR
#: shrink, ZooKeeper session expiry) and healed quickly.
BROKER_OVERRIDES = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "replica.socket.timeout.ms": "5000",
    "zookeeper.session.timeout.ms": "3000",
    "group.initial.rebalance.delay.ms": "0",
}

TOPIC = "netns-faults"
GROUP = "netns-faults-group"


class NetnsUnavailableError(RuntimeError):
    """This machine cannot run the harness (not root, no namespaces, no nft, no ZooKeeper)."""


def _tool(name: str) -> str | None:
    """The path of C{ip} or C{nft}: on C{PATH}, or in C{/usr/sbin} or C{/sbin} (off a user's C{PATH})."""
    found = shutil.which(name)
    if found is None:
        found = next((path for path in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(path, os.X_OK)), None)
    return found


def _run(args: list[str], input_text: str | None = None, check: bool = True,
         timeout_s: float = 30.0) -> subprocess.CompletedProcess:
    args = [_tool(args[0]) or args[0], *args[1:]]
    result = subprocess.run(args, input=input_text, capture_output=True, text=True, timeout=timeout_s)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited with {result.returncode}: {result.stderr.strip()}")
    return result


def netns_unavailable_reason() -> str | None:
    """
    Why the harness cannot run here, or C{None} when it can: not root, no
    C{ip}, network namespaces refused (a container without C{CAP_SYS_ADMIN}),
    no C{nft}, or no ZooKeeper/java.  It makes and deletes one probe
    namespace.
    """
    if os.geteuid() != 0:
        return "network namespaces and nftables need root (CI runs as root)"
    if _tool("ip") is None:
        return "no 'ip' command (apt-get install iproute2)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"network namespaces are unavailable: ip netns add: {made.stderr.strip()}"
    _run(["ip", "netns", "del", probe], check=False)
    if _tool("nft") is None:
        return "no 'nft' command (apt-get install nftables; scripts/setup.sh installs it)"
    from kafkatw.zookeeper.embedded import SLF4J_JAR, ZOOKEEPER_JAR

    if shutil.which("java") is None or not os.path.exists(ZOOKEEPER_JAR) or not os.path.exists(SLF4J_JAR):
        return "ZooKeeper is not installed (apt-get install zookeeper)"
    return None


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace_processes(namespace: str) -> None:
    """SIGKILL every process left in one of our namespaces (processes a run started there)."""
    listed = _run(["ip", "netns", "pids", namespace], check=False)
    for word in listed.stdout.split():
        try:
            os.kill(int(word), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


def cleanup_leftovers(log: Callable[[str], None] = lambda text: None) -> list[str]:
    """
    Remove namespaces and bridges of earlier runs whose process no longer
    runs (names C{ktnf<pid>-*} and C{ktnf<pid>br}); those of a running run
    are left alone.

    @return: the names removed.
    """
    removed: list[str] = []
    pattern = re.compile(rf"^{PREFIX}(\d+)(?:-\w+|br)$")
    namespaces = [line.split()[0] for line in _run(["ip", "netns", "list"], check=False).stdout.splitlines()
                  if line.strip()]
    for name in namespaces:
        match = pattern.match(name)
        if match and not _pid_running(int(match.group(1))):
            _kill_namespace_processes(name)
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    links = _run(["ip", "-o", "link", "show", "type", "bridge"], check=False).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        match = pattern.match(name)
        if match and not _pid_running(int(match.group(1))):
            _run(["ip", "link", "del", name], check=False)
            removed.append(name)
    if removed:
        log(f"removed leftovers of earlier runs: {' '.join(removed)}")
    return removed


# -- the network ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    """
    One namespace on the bridge.

    @ivar namespace: its name (C{ip netns exec NAME ...}).
    @ivar address: its IPv4 address on C{eth0} (in L{SUBNET}).
    @ivar veth: the name of its veth pair's end in the root namespace.
    """

    namespace: str
    address: str
    veth: str

    def exec_args(self) -> list[str]:
        """The command prefix that runs a program inside this namespace."""
        return [_tool("ip") or "ip", "netns", "exec", self.namespace]


class BridgeNetwork:
    """
    A bridge in the root namespace (no address) and namespaces joined to it
    by veth pairs.  L{teardown} kills what still runs in them and deletes
    them and the bridge; it is idempotent.
    """

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or f"{PREFIX}{os.getpid()}"
        self.bridge = f"{self.prefix}br"
        if len(self.bridge) > 15:
            raise ValueError(f"prefix {self.prefix!r} too long for interface names (15 characters)")
        self.hosts: dict[str, Host] = {}
        self._bridge_made = False

    def create(self) -> None:
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._bridge_made = True
        # frames switched between the namespaces skip the root namespace's firewall (with br_netfilter
        # loaded they would pass its FORWARD chain, whose policy may be drop, as Docker sets it)
        _run(["ip", "link", "set", self.bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0",
              "nf_call_arptables", "0"], check=False)
        _run(["ip", "link", "set", self.bridge, "up"])

    def add_host(self, name: str, host_number: int) -> Host:
        """
        A namespace C{<prefix>-<name>} with C{eth0} at C{SUBNET.host_number}/24
        (bridged) and C{lo} up.
        """
        host = Host(f"{self.prefix}-{name}", f"{SUBNET}.{host_number}", f"{self.prefix}v{len(self.hosts)}")
        self.hosts[name] = host
        _run(["ip", "netns", "add", host.namespace])
        _run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace])
        _run(["ip", "link", "set", host.veth, "master", self.bridge, "up"])
        _run(["ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0"])
        _run(["ip", "-n", host.namespace, "link", "set", "eth0", "up"])
        _run(["ip", "-n", host.namespace, "link", "set", "lo", "up"])
        return host

    def teardown(self) -> None:
        for host in self.hosts.values():
            _kill_namespace_processes(host.namespace)
            _run(["ip", "netns", "del", host.namespace], check=False)
        self.hosts = {}
        if self._bridge_made:
            _run(["ip", "link", "del", self.bridge], check=False)
            self._bridge_made = False


# -- the nemesis's rules ------------------------------------------------------------------------------


def fault_rules(kind: str, addresses: list[str] | None = None, percent: int = 0) -> list[tuple[str, str]]:
    """
    The nftables rules of a fault, as C{(chain, rule)} pairs for the
    victim's namespace.

    @param kind: one of L{FAULT_KINDS}.
    @param addresses: the peers cut off (C{zookeeper}, C{peers}, C{clients}).
    @param percent: the share of packets dropped in each direction (C{loss}).
    @raise ValueError: an unknown kind, or a cut without addresses.
    """
    if kind == "isolate":
        return [("input", 'iifname "eth0" drop'), ("output", 'oifname "eth0" drop')]
    if kind == "loss":
        if not 0 < percent <= 100:
            raise ValueError(f"loss needs a percent in 1..100, not {percent}")
        return [("input", f"numgen random mod 100 < {percent} drop"),
                ("output", f"numgen random mod 100 < {percent} drop")]
    if kind in ("zookeeper", "peers", "clients"):
        if not addresses:
            raise ValueError(f"a {kind} cut needs the addresses cut off")
        group = "{ " + ", ".join(addresses) + " }"
        return [("input", f"ip saddr {group} drop"), ("output", f"ip daddr {group} drop")]
    raise ValueError(f"unknown fault {kind!r}; one of {', '.join(FAULT_KINDS)}")


class Firewall:
    """
    The nemesis's table in one namespace: C{table inet kafkatw_nemesis} with
    an input and an output filter chain (accept by default).
    """

    def __init__(self, host: Host) -> None:
        self.host = host

    def _nft(self, script: str) -> None:
        _run(self.host.exec_args() + [_tool("nft") or "nft", "-f", "-"], input_text=script)

    def install(self) -> None:
        self._nft(f"table inet {TABLE} {{\n"
                  "  chain input { type filter hook input priority 0; policy accept; }\n"
                  "  chain output { type filter hook output priority 0; policy accept; }\n"
                  "}\n")

    def apply(self, rules: list[tuple[str, str]]) -> None:
        """Replace the chains' rules by C{rules} (one nft transaction)."""
        script = f"flush chain inet {TABLE} input\nflush chain inet {TABLE} output\n"
        script += "".join(f"add rule inet {TABLE} {chain} {rule}\n" for chain, rule in rules)
        self._nft(script)

    def heal(self) -> None:
        self.apply([])

    def rules(self) -> str:
        return _run(self.host.exec_args() + [_tool("nft") or "nft", "list", "table", "inet", TABLE]).stdout


# -- the processes ----------------------------------------------------------------------------------


class NamespacedZooKeeper:
    """
    Debian's ZooKeeper (standalone, as L{kafkatw.testing.ZooKeeperFixture}
    runs it) inside C{host}'s namespace, listening on its address.
    """

    def __init__(self, host: Host, data_dir: str, tick_time_ms: int = 500) -> None:
        self.host = host
        self.data_dir = data_dir
        self.tick_time_ms = tick_time_ms
        self.popen: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host.address}:{ZOOKEEPER_PORT}"

    def start(self, timeout_s: float = 30.0) -> None:
        from kafkatw.zookeeper.embedded import java_command, write_config

        config = write_config(self.data_dir, ZOOKEEPER_PORT, self.tick_time_ms, bind_address=self.host.address)
        with open(os.path.join(self.data_dir, "zookeeper.log"), "ab") as log:
            self.popen = subprocess.Popen(self.host.exec_args() + java_command(config, heap_mb=128),
                                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=self.data_dir)
        # the probe runs inside the namespace: nothing here can reach its address
        probe = ("import sys; from kafkatw.zookeeper.embedded import wait_ready; "
                 f"wait_ready({ZOOKEEPER_PORT}, {timeout_s}, data_dir={self.data_dir!r}, host={self.host.address!r})")
        result = subprocess.run(self.host.exec_args() + [sys.executable, "-c", probe], capture_output=True, text=True,
                                timeout=timeout_s + 30)
        if result.returncode != 0 or self.popen.poll() is not None:
            raise RuntimeError(f"ZooKeeper in {self.host.namespace} did not serve: {result.stderr[-2000:]}")

    def stop(self) -> None:
        from kafkatw.zookeeper.embedded import stop_blocking

        if self.popen is not None:
            stop_blocking(self.popen)
            self.popen = None


class NamespacedBroker(BrokerProcess):
    """
    A L{kafkatw.testing.BrokerProcess} inside C{host}'s namespace: its
    listener (and so its advertised address) is C{PLAINTEXT://ADDRESS:9092}.
    """

    def __init__(self, broker_id: int, zookeeper_connect: str, log_dir: str, host: Host,
                 overrides: dict[str, str] | None = None) -> None:
        super().__init__(broker_id, zookeeper_connect, log_dir, overrides, port=BROKER_PORT)
        self.host = host
        self.bootstrap = f"{host.address}:{BROKER_PORT}"

    def command(self) -> list[str]:
        args = super().command()
        args[args.index("--listeners") + 1] = f"PLAINTEXT://{self.bootstrap}"
        return self.host.exec_args() + args


class NetnsCluster:
    """
    The network, ZooKeeper and C{brokers} brokers of a run, each in its
    namespace, plus the client namespace; a context manager that tears
    everything down however the block ends (and removes leftovers of crashed
    runs before it starts).

    @ivar work_dir: ZooKeeper's data, the brokers' logs (C{broker-N.log}) and
        data (C{data-N}).
    """

    def __init__(self, work_dir: str, brokers: int = 3, overrides: dict[str, str] | None = None,
                 log: Callable[[str], None] = lambda text: None) -> None:
        self.work_dir = work_dir
        self.broker_count = brokers
        self.overrides = {**BROKER_OVERRIDES, **(overrides or {})}
        self.log = log
        self.network = BridgeNetwork()
        self.zookeeper: NamespacedZooKeeper | None = None
        self.brokers: list[NamespacedBroker] = []
        self.client: Host | None = None
        self.firewalls: dict[int, Firewall] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self) -> None:
        started = time.monotonic()
        cleanup_leftovers(self.log)
        self.network.create()
        zookeeper_host = self.network.add_host("zk", ZOOKEEPER_HOST)
        broker_hosts = [self.network.add_host(f"b{i}", BROKER_HOST_BASE + i) for i in range(self.broker_count)]
        self.client = self.network.add_host("cl", CLIENT_HOST)
        for broker_id, host in enumerate(broker_hosts):
            self.firewalls[broker_id] = Firewall(host)
            self.firewalls[broker_id].install()
        os.makedirs(self.work_dir, exist_ok=True)
        self.zookeeper = NamespacedZooKeeper(zookeeper_host, os.path.join(self.work_dir, "zookeeper"))
        os.makedirs(self.zookeeper.data_dir, exist_ok=True)
        self.zookeeper.start()
        for broker_id, host in enumerate(broker_hosts):
            broker = NamespacedBroker(broker_id, self.zookeeper.connect_string + "/kafkatw", self.work_dir, host,
                                      self.overrides)
            self.brokers.append(broker)
            broker.start(timeout_s=60)
        self.log(f"network {self.network.prefix}: ZooKeeper {self.zookeeper.connect_string}, brokers "
                 f"{self.bootstrap}, clients {self.client.address}; up in {time.monotonic() - started:.1f} s")

    def stop(self) -> None:
        try:
            for firewall in self.firewalls.values():
                try:
                    firewall.heal()
                except Exception:
                    pass
            for broker in self.brokers:
                if broker.popen is not None and broker.popen.poll() is None:
                    broker.popen.terminate()
            for broker in self.brokers:
                broker.stop(timeout_s=15)
            if self.zookeeper is not None:
                self.zookeeper.stop()
        finally:
            self.network.teardown()

    def __enter__(self) -> "NetnsCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# -- the clients, the nemesis and the checker (inside the client namespace) -------------------------


@dataclass
class Summary:
    """
    A run's figures (the one-line JSON of C{python -m kafkatw.testing_netns}).

    @ivar longest_stall_ms: the longest time a partition went without an
        acknowledgement while the producer ran (ms); C{longest_stall_partition}
        which, C{longest_stall_at_s} when it began (s since the load
        started); C{longest_stall_all_ms} the longest time without any
        acknowledgement at all.
    @ivar stuck: partitions whose ISR was not full within 60 s of the last heal.
    @ivar producer_fatal_errors: producers that died of a fatal error (each
        replaced by a new one).
    @ivar client_errors: client threads of the harness that failed.
    """

    seed: int
    seconds: float
    faults: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    offset_mismatches: int = 0
    replica_mismatches: int = 0
    offsets_moved_back: int = 0
    group_missing: int = 0
    stuck: list[int] = field(default_factory=list)
    longest_stall_ms: int = 0
    longest_stall_at_s: float = 0.0
    longest_stall_partition: int = -1
    longest_stall_all_ms: int = 0
    producer_fatal_errors: int = 0
    client_errors: int = 0
    commits_observed: int = 0
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """
        Nothing acknowledged lost, duplicated or reordered, replicas equal,
        offsets forward, group complete, nothing stuck; no fatal producer
        error (librdkafka's idempotence found the log inconsistent) and no
        client thread failed.
        """
        return not (self.lost or self.duplicated or self.reordered or self.offset_mismatches
                    or self.replica_mismatches or self.offsets_moved_back or self.group_missing or self.stuck
                    or self.producer_fatal_errors or self.client_errors)

    def to_json(self) -> str:
        figures = {k: v for k, v in self.__dict__.items() if k != "details"}
        figures["ok"] = self.ok
        return json.dumps(figures, sort_keys=False)


def replica_batches(data_dir: str, topic: str, partition: int,
                    high_watermark: int) -> tuple[list[tuple[int, bytes]], int]:
    """
    A replica's batches below C{high_watermark}, read from its segment files
    (L{kafkatw.protocol.batch.scan_valid_prefix}: whole batches with good
    CRCs, in file order).

    @return: C{([(base offset, batch bytes), ...], next offset)}: the batches
        whose base offset is below the high watermark, and the offset after
        the last of them (C{high_watermark} once the replica holds all of them).
    """
    from kafkatw.protocol.batch import scan_valid_prefix

    batches: list[tuple[int, bytes]] = []
    next_offset = -1
    for path in sorted(glob.glob(os.path.join(data_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        headers, _ = scan_valid_prefix(data)
        for header in headers:
            if header.base_offset >= high_watermark:
                return batches, next_offset
            batches.append((header.base_offset, data[header.position:header.position + header.size]))
            next_offset = header.base_offset + header.last_offset_delta + 1
    return batches, next_offset


def check_partition(partition: int, records: list[tuple[int, bytes]], acked: dict[int, int],
                    group_seen: set[bytes], commits: list[tuple[float, int]]) -> dict:
    """
    The checker's rules for one partition (values are C{b"<partition>:<seq>"}).

    @param records: C{(offset, value)} read from offset 0 to the high watermark, in log order.
    @param acked: sequence number -> the offset its acknowledgement gave.
    @param group_seen: the values the consumer group received.
    @param commits: C{(time, committed offset)} as read during the run, in time order.
    @return: counts C{lost}, C{duplicated}, C{reordered}, C{offset_mismatches},
        C{offsets_moved_back}, C{group_missing}, and C{details}: lines naming examples.
    """
    p = partition
    details: list[str] = []
    by_value: dict[bytes, list[int]] = collections.defaultdict(list)
    for offset, value in records:
        by_value[value].append(offset)
    duplicated = {v: o for v, o in by_value.items() if len(o) > 1}
    for value, offsets in list(duplicated.items())[:5]:
        details.append(f"partition {p}: {value!r} at offsets {offsets}")
    lost = sorted(seq for seq in acked if f"{p}:{seq}".encode() not in by_value)
    if lost:
        details.append(f"partition {p}: {len(lost)} acknowledged records lost, e.g. seq {lost[:10]}"
                       f" (acknowledged at offsets {[acked[q] for q in lost[:10]]})")
    at_offset = dict(records)
    mismatched = sorted((seq, offset) for seq, offset in acked.items()
                        if at_offset.get(offset) != f"{p}:{seq}".encode())
    if mismatched:
        seq, offset = mismatched[0]
        details.append(f"partition {p}: {len(mismatched)} acknowledged offsets hold another record, e.g. seq {seq}"
                       f" acknowledged at {offset} where the log has {at_offset.get(offset)!r}")
    order = [seq for seq in (int(v.split(b":")[1]) for _, v in records) if seq in acked]
    inversions = sum(1 for a, b in zip(order, order[1:]) if b < a)
    if inversions:
        first = next(i for i, (a, b) in enumerate(zip(order, order[1:])) if b < a)
        details.append(f"partition {p}: {inversions} acknowledged records out of sequence order, first seq"
                       f" {order[first + 1]} after {order[first]}")
    missing = sorted(seq for seq in acked if f"{p}:{seq}".encode() not in group_seen)
    if missing:
        details.append(f"partition {p}: the group never received {len(missing)} acknowledged records, e.g. seq"
                       f" {missing[:10]}")
    moved_back = 0
    highest = -1
    for when, offset in commits:
        if offset < highest:
            moved_back += 1
            if moved_back <= 3:
                details.append(f"partition {p}: committed offset {offset} read at {when:.2f} s, after {highest}")
        highest = max(highest, offset)
    return {"lost": len(lost), "duplicated": sum(len(o) - 1 for o in duplicated.values()), "reordered": inversions,
            "offset_mismatches": len(mismatched), "offsets_moved_back": moved_back, "group_missing": len(missing),
            "details": details}


def longest_stall(ack_times: dict[int, list[float]], start: float, end: float) -> dict:
    """
    The longest stalls of a load that ran from C{start} to C{end} (s):
    C{partition_gap_s}, the longest time one partition went without an
    acknowledgement (C{partition} which, C{partition_gap_at} when it began),
    and C{all_gap_s}, the longest time without any acknowledgement.

    @param ack_times: partition -> the times of its acknowledgements.
    """
    worst = (0.0, start, -1)
    for p, times in ack_times.items():
        points = sorted([start, *(t for t in times if start <= t <= end), end])
        for a, b in zip(points, points[1:]):
            worst = max(worst, (b - a, a, p))
    points = sorted([start, *(t for times in ack_times.values() for t in times if start <= t <= end), end])
    everything = max((b - a for a, b in zip(points, points[1:])), default=0.0)
    return {"partition_gap_s": worst[0], "partition_gap_at": worst[1], "partition": worst[2], "all_gap_s": everything}


class ClientRun:
    """
    The load, the nemesis and the checker of one run (inside the client
    namespace).  C{config} is the JSON the orchestrator writes: bootstrap,
    brokers (id -> address, namespace, data dir), ZooKeeper's and the
    client's addresses, seed, seconds, partitions.
    """

    def __init__(self, config: dict, log: Callable[[str], None]) -> None:
        self.config = config
        self.bootstrap: str = config["bootstrap"]
        self.partitions: int = config["partitions"]
        self.seconds: float = config["seconds"]
        self.seed: int = config["seed"]
        self.brokers: dict[int, dict] = {int(k): v for k, v in config["brokers"].items()}
        self.rng = random.Random(self.seed)
        self.started = time.monotonic()
        self._log = log
        self.summary = Summary(self.seed, self.seconds)
        self.stop_load = threading.Event()
        self.stop_group = threading.Event()
        self.stop_poller = threading.Event()
        self.lock = threading.Lock()
        # producer: partition -> seq -> (offset, ack time); acknowledgement times
        self.acked: dict[int, dict[int, tuple[int, float]]] = {p: {} for p in range(self.partitions)}
        self.ack_times: dict[int, list[float]] = {p: [] for p in range(self.partitions)}
        self.sent = [0] * self.partitions
        self.failed: list[str] = []
        self.fatal: list[str] = []
        self.client_errors: list[str] = []
        self.load_window = [0.0, 0.0]
        # group: partition -> values received; highest offset received
        self.group_seen: dict[int, set[bytes]] = {p: set() for p in range(self.partitions)}
        self.group_max_offset: dict[int, int] = {p: -1 for p in range(self.partitions)}
        # committed offsets as read: partition -> [(time, offset)]
        self.commits: dict[int, list[tuple[float, int]]] = {p: [] for p in range(self.partitions)}
        self.history: list[str] = []
        self._zookeeper: Any = None

    def log(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:7.2f} s] {text}"
        with self.lock:
            self.history.append(line)
        self._log(line)

    # cluster state

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})

    def partition_state(self) -> dict[int, tuple[int, list[int]]] | None:
        """
        partition -> (leader, ISR) as ZooKeeper holds it (the source of truth:
        a broker cut off answers Metadata from a stale cache), or C{None} while
        ZooKeeper does not answer or a broker is not registered (the ISR of a
        partition counts as not full then).
        """
        try:
            if self._zookeeper is None:
                from kazoo.client import KazooClient

                client = KazooClient(hosts=f"{self.config['zookeeper_address']}:{ZOOKEEPER_PORT}/kafkatw", timeout=10)
                try:
                    client.start(timeout=10)
                except Exception:
                    client.close()
                    raise
                self._zookeeper = client
            registered = {int(b) for b in self._zookeeper.get_children("/brokers/ids")}
            state = {}
            for p in range(self.partitions):
                data, _ = self._zookeeper.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")
                body = json.loads(data)
                state[p] = (body["leader"], sorted(body["isr"]) if registered == set(self.brokers) else [])
            return state
        except Exception:
            return None

    def wait_full_isr(self, timeout_s: float) -> list[int]:
        """Wait until every partition has a leader and all replicas in its ISR; return those that do not."""
        everyone = sorted(self.brokers)
        deadline = time.monotonic() + timeout_s
        behind = list(range(self.partitions))
        while time.monotonic() < deadline:
            state = self.partition_state()
            if state is not None:
                behind = [p for p in range(self.partitions)
                          if p not in state or state[p][0] < 0 or state[p][1] != everyone]
                if not behind:
                    return []
            time.sleep(0.25)
        return behind

    # the load

    def _new_producer(self) -> tuple[Any, list[str]]:
        """A librdkafka idempotent acks=all producer, and the list its fatal errors go to."""
        from confluent_kafka import Producer

        fatal: list[str] = []

        def error(err: Any) -> None:
            if err.fatal():
                fatal.append(str(err))

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
                             "socket.timeout.ms": 10000, "queue.buffering.max.messages": 4000,
                             "error_cb": error})
        return producer, fatal

    def produce(self) -> None:
        """
        About 50 records/s to each partition until L{stop_load}; then flush
        (at most 60 s).  A fatal error of the idempotent producer (librdkafka
        raises one when the log contradicts what it was acknowledged, e.g.
        OUT_OF_ORDER_SEQUENCE_NUMBER after acknowledged records vanished) is
        counted, and a new producer goes on.
        """
        from confluent_kafka import KafkaError, KafkaException

        producer, fatal = self._new_producer()

        def delivered(err: Any, message: Any) -> None:
            p, seq = message.value().split(b":")
            if err is not None:
                self.failed.append(f"{message.value().decode()}: {err}")
                return
            now = time.monotonic()
            self.acked[int(p)][int(seq)] = (message.offset(), now)
            self.ack_times[int(p)].append(now)

        def fatal_error(e: KafkaException) -> bool:
            """Whether C{e} says the producer is dead (once fatal, produce() raises _FATAL, poll() the error)."""
            error = e.args[0]
            if not (error.fatal() or error.code() == KafkaError._FATAL):
                return False
            fatal.append(str(error))
            return True

        self.load_window[0] = time.monotonic()
        next_round = time.monotonic()
        try:
            while not self.stop_load.is_set():
                try:
                    for p in range(self.partitions):
                        try:
                            producer.produce(TOPIC, f"{p}:{self.sent[p]}".encode(), partition=p,
                                             on_delivery=delivered)
                            self.sent[p] += 1
                        except BufferError:
                            break
                    # a bounded rate: poll (delivery reports) at once, then sleep to the next round; after
                    # a stall, no burst to catch up
                    producer.poll(0)
                except KafkaException as e:
                    if not fatal_error(e):
                        raise
                if fatal:
                    try:
                        # its undelivered records fail (never acknowledged); error_cb gets the fatal error
                        producer.flush(5)
                    except Exception:
                        pass  # confluent-kafka may raise a SystemError from a dead producer's flush
                    with self.lock:
                        self.fatal.append("; ".join(dict.fromkeys(fatal)))
                    self.log(f"producer fatal error: {self.fatal[-1]}; a new producer takes over")
                    producer, fatal = self._new_producer()
                next_round = max(next_round + 0.02, time.monotonic() - 0.02)
                time.sleep(max(0.0, next_round - time.monotonic()))
            try:
                remaining = producer.flush(60)
            except KafkaException as e:
                if not fatal_error(e):
                    raise
                remaining = len(producer)
            if remaining:
                self.log(f"{remaining} records still unacknowledged after a 60 s flush")
        finally:
            self.load_window[1] = time.monotonic()
            if fatal:
                with self.lock:
                    self.fatal.append("; ".join(dict.fromkeys(fatal)))

    # the group

    def consume(self, member: int) -> None:
        """One member of the group: consume, commit every 0.5 s (asynchronously), until L{stop_group}."""
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                             "client.id": f"member-{member}", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "session.timeout.ms": 10000,
                             "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 100,
                             "socket.timeout.ms": 10000})
        consumer.subscribe([TOPIC])
        last_commit = time.monotonic()
        try:
            while not self.stop_group.is_set():
                message = consumer.poll(0.2)
                if message is not None and not message.error():
                    p = message.partition()
                    with self.lock:
                        self.group_seen[p].add(message.value())
                        self.group_max_offset[p] = max(self.group_max_offset[p], message.offset())
                if time.monotonic() - last_commit >= 0.5:
                    last_commit = time.monotonic()
                    try:
                        consumer.commit(asynchronous=True)
                    except Exception:
                        pass  # nothing consumed yet (_NO_OFFSET), or no coordinator now
            try:
                consumer.commit(asynchronous=False)
            except Exception:
                pass
        finally:
            consumer.close()

    def poll_commits(self) -> None:
        """
        Read the group's committed offsets (OffsetFetch) twice a second,
        through a consumer of the group that never joins it (it does not
        subscribe).  Not through the admin API: librdkafka's admin client
        crashes (SIGSEGV in C{rd_kafka_cgrp_op}) when an OffsetFetch is
        answered NOT_COORDINATOR, as after a coordinator moves (librdkafka
        issue 5315).
        """
        from confluent_kafka import Consumer, TopicPartition

        reader = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "client.id": "commit-reader",
                           "enable.auto.commit": False, "socket.timeout.ms": 5000})
        wanted = [TopicPartition(TOPIC, p) for p in range(self.partitions)]
        try:
            while not self.stop_poller.wait(0.5):
                try:
                    answer = reader.committed(wanted, timeout=5)
                except Exception:
                    continue
                now = time.monotonic()
                for tp in answer:
                    if tp.error is None and tp.offset >= 0:
                        self.commits[tp.partition].append((now, tp.offset))
        finally:
            reader.close()

    # the nemesis

    def nemesis(self) -> None:
        """
        Seeded faults until C{seconds} have passed and at least one of each
        kind was injected: the kinds in a seeded order, each kind once per
        round; each fault healed and followed by a wait for full ISRs.  A
        cut from ZooKeeper always aims at a partition's leader (the zombie
        leader); the others at a leader two times in three.
        """
        brokers = sorted(self.brokers)
        zookeeper = self.config["zookeeper_address"]
        client = self.config["client_address"]
        deadline = self.started + self.seconds
        count = 0
        kinds: list[str] = []
        time.sleep(2)
        while time.monotonic() < deadline or count < len(FAULT_KINDS):
            if not kinds:
                kinds = list(FAULT_KINDS)
                self.rng.shuffle(kinds)
            kind = kinds.pop()
            aim = self.rng.choice(["leader", "leader", "any"])
            if kind == "zookeeper":
                aim = "leader"
            partition = self.rng.randrange(self.partitions)
            fallback = self.rng.choice(brokers)
            percent = self.rng.choice([10, 20, 30, 50])
            duration = self.rng.uniform(3, 7)
            pause = self.rng.uniform(1, 2)
            state = self.partition_state()
            victim = state[partition][0] if aim == "leader" and state and partition in state else -1
            if victim not in self.brokers:
                victim = fallback
            leads = sorted(p for p, (leader, _) in (state or {}).items() if leader == victim)
            addresses = {"zookeeper": [zookeeper], "clients": [client],
                         "peers": [self.brokers[b]["address"] for b in brokers if b != victim]}.get(kind)
            rules = fault_rules(kind, addresses, percent)
            firewall = Firewall(Host(self.brokers[victim]["namespace"], self.brokers[victim]["address"], ""))
            count += 1
            what = f"{percent}% loss" if kind == "loss" else kind
            self.log(f"fault {count}: {what} on broker {victim} ({aim}"
                     f"{f' of partition {partition}' if aim == 'leader' else ''}; it leads partitions {leads})"
                     f" for {duration:.1f} s")
            firewall.apply(rules)
            self.summary.faults[kind] = self.summary.faults.get(kind, 0) + 1
            try:
                time.sleep(duration)
            finally:
                firewall.heal()
            healed = time.monotonic()
            behind = self.wait_full_isr(30)
            self.log(f"healed broker {victim}; " + (f"ISR full again after {time.monotonic() - healed:.1f} s"
                                                    if not behind else f"partitions {behind} not in sync after 30 s"))
            time.sleep(pause)

    def heal_all(self) -> None:
        for info in self.brokers.values():
            try:
                Firewall(Host(info["namespace"], info["address"], "")).heal()
            except Exception as e:
                self.log(f"healing {info['namespace']} failed: {e}")

    # the checker

    def read_partition(self, partition: int, end: int, timeout_s: float = 60.0) -> list[tuple[int, bytes]]:
        """Every (offset, value) of a partition below C{end}, from offset 0, fetched from its leader."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"netns-check-{partition}",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                             "isolation.level": "read_uncommitted"})
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        records: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        try:
            while (not records or records[-1][0] < end - 1) and end > 0 and time.monotonic() < deadline:
                for message in consumer.consume(500, 0.5):
                    if not message.error() and message.offset() < end:
                        records.append((message.offset(), message.value()))
        finally:
            consumer.close()
        return records

    def high_watermarks(self, attempts: int = 6) -> dict[int, int]:
        """partition -> high watermark, from its leader (ListOffsets); up to C{attempts} tries of 10 s."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "netns-check-hw"})
        try:
            for attempt in range(attempts):
                try:
                    return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                            for p in range(self.partitions)}
                except KafkaException:
                    if attempt == attempts - 1:
                        raise
            raise AssertionError("unreachable")
        finally:
            consumer.close()

    def compare_replicas(self, high_watermarks: dict[int, int], leaders: dict[int, int],
                         timeout_s: float = 30.0) -> list[str]:
        """
        Each replica's batches below the high watermark, byte for byte against
        the leader's; waits (at most C{timeout_s}) for replicas still writing.

        @return: one line per partition whose replicas differ.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            problems = []
            for p, hw in high_watermarks.items():
                leader = leaders.get(p, min(self.brokers))
                reference, reference_end = replica_batches(self.brokers[leader]["data_dir"], TOPIC, p, hw)
                if reference_end not in (hw, -1 if hw == 0 else hw):
                    problems.append(f"partition {p}: the leader {leader} holds batches up to {reference_end},"
                                    f" its high watermark is {hw}")
                    continue
                for b in sorted(self.brokers):
                    if b == leader:
                        continue
                    batches, end = replica_batches(self.brokers[b]["data_dir"], TOPIC, p, hw)
                    if batches != reference:
                        first = next((i for i, (x, y) in enumerate(zip(batches, reference)) if x != y),
                                     min(len(batches), len(reference)))
                        at = reference[first][0] if first < len(reference) else (
                            batches[first][0] if first < len(batches) else "?")
                        problems.append(f"partition {p}: broker {b} differs from the leader {leader} below the"
                                        f" high watermark {hw}: from batch {first} (offset {at}); it holds"
                                        f" {len(batches)} batches to {end}, the leader {len(reference)}")
            if not problems or time.monotonic() > deadline:
                return problems
            time.sleep(1)

    def check(self) -> None:
        s = self.summary
        hws = self.high_watermarks()
        state = self.partition_state() or {}
        leaders = {p: leader for p, (leader, _) in state.items()}
        self.log(f"high watermarks {hws}, leaders {leaders}")
        for p in range(self.partitions):
            records = self.read_partition(p, hws[p])
            if not records or records[-1][0] < hws[p] - 1:
                s.details.append(f"partition {p}: read only {len(records)} records below the high watermark"
                                 f" {hws[p]}")
            commits = [(when - self.started, offset) for when, offset in self.commits[p]]
            found = check_partition(p, records, {seq: offset for seq, (offset, _) in self.acked[p].items()},
                                    self.group_seen[p], commits)
            for name in ("lost", "duplicated", "reordered", "offset_mismatches", "offsets_moved_back",
                         "group_missing"):
                setattr(s, name, getattr(s, name) + found[name])
            s.details.extend(found["details"])
            s.commits_observed += len(commits)
        mismatches = self.compare_replicas(hws, leaders)
        s.replica_mismatches = len(mismatches)
        s.details.extend(mismatches)
        s.sent = sum(self.sent)
        s.acknowledged = sum(len(a) for a in self.acked.values())
        s.failed = len(self.failed)
        s.producer_fatal_errors = len(self.fatal)
        s.details.extend(f"producer fatal error: {error}" for error in self.fatal[:5])
        s.client_errors = len(self.client_errors)
        s.details.extend(self.client_errors)
        s.details.extend(self.failed[:5])
        stall = longest_stall(self.ack_times, self.load_window[0], self.load_window[1])
        s.longest_stall_ms = round(stall["partition_gap_s"] * 1000)
        s.longest_stall_at_s = round(stall["partition_gap_at"] - self.started, 2)
        s.longest_stall_partition = stall["partition"]
        s.longest_stall_all_ms = round(stall["all_gap_s"] * 1000)

    def _guard(self, target: Callable[..., None], *args: Any) -> None:
        """Run a client thread; an exception in it is a harness failure, reported in the summary."""
        try:
            target(*args)
        except Exception as e:
            import traceback

            self.log(f"{threading.current_thread().name} failed: {traceback.format_exc()}")
            with self.lock:
                self.client_errors.append(f"{threading.current_thread().name}: {e!r}")

    def run(self) -> Summary:
        admin = self.admin()
        from confluent_kafka.admin import NewTopic

        futures = admin.create_topics([NewTopic(TOPIC, self.partitions, len(self.brokers),
                                                config={"min.insync.replicas": "2"})])
        futures[TOPIC].result(30)
        behind = self.wait_full_isr(60)
        if behind:
            raise RuntimeError(f"partitions {behind} of {TOPIC} never had a full ISR")
        self.log(f"seed {self.seed}: {self.seconds:.0f} s of faults on {TOPIC} ({self.partitions} partitions,"
                 f" replication factor {len(self.brokers)}, min.insync.replicas=2)")
        threads = [threading.Thread(target=self._guard, args=(self.produce,), name="producer", daemon=True),
                   threading.Thread(target=self._guard, args=(self.poll_commits,), name="commits", daemon=True)]
        threads += [threading.Thread(target=self._guard, args=(self.consume, m), name=f"member-{m}", daemon=True)
                    for m in range(2)]
        for thread in threads:
            thread.start()
        try:
            try:
                self.nemesis()
            finally:
                self.heal_all()
            settle = time.monotonic()
            self.summary.stuck = self.wait_full_isr(60)
            self.log("every ISR full again after the last fault" if not self.summary.stuck
                     else f"partitions {self.summary.stuck} stuck: ISR not full 60 s after the last heal")
            self.log(f"settled in {time.monotonic() - settle:.1f} s")
        finally:
            self.stop_load.set()
            threads[0].join(90)
            hws = self.high_watermarks()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with self.lock:
                    if all(self.group_max_offset[p] >= hws[p] - 1 for p in range(self.partitions)):
                        break
                time.sleep(0.5)
            time.sleep(1.5)  # the last commits and a last read of them
            self.stop_group.set()
            for thread in threads[2:]:
                thread.join(30)
            self.stop_poller.set()
            threads[1].join(30)
        try:
            self.check()
        finally:
            if self._zookeeper is not None:
                self._zookeeper.stop()
                self._zookeeper.close()
        return self.summary


def _client_main(config_path: str) -> int:
    import faulthandler

    # a crash shows the Python threads' stacks (not one in librdkafka's own threads, which block
    # signals: the kernel log names the function then)
    faulthandler.enable()
    with open(config_path) as f:
        config = json.load(f)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    run = ClientRun(config, log)
    summary = run.run()
    for line in summary.details:
        log(f"  {line}")
    with open(config["summary_path"], "w") as f:
        json.dump({"summary": json.loads(summary.to_json()), "details": summary.details,
                   "history": run.history}, f)
    return 0


# -- the orchestrator ---------------------------------------------------------------------------------


def run_network_faults(seconds: float = 45.0, seed: int | None = None, partitions: int = 3,
                       work_dir: str | None = None, keep: bool = False,
                       log: Callable[[str], None] | None = None) -> dict:
    """
    One run: make the network, start ZooKeeper and three brokers in their
    namespaces, run the clients, the nemesis and the checker in the client
    namespace for C{seconds} of faults, tear everything down.

    @param seed: the nemesis's seed (random when C{None}; it is logged).
    @param work_dir: where the logs and data go (a temporary directory when
        C{None}, removed afterwards unless C{keep} or the run found a problem).
    @return: C{{"summary": {...}, "details": [...], "history": [...],
        "work_dir": ...}}: the figures of L{Summary} (plus C{"ok"}), the lines
        explaining a problem, the nemesis's log.
    @raise NetnsUnavailableError: see L{netns_unavailable_reason}.
    @raise RuntimeError: the cluster or the clients failed to run.
    """
    reason = netns_unavailable_reason()
    if reason is not None:
        raise NetnsUnavailableError(reason)
    if log is None:
        def log(line: str) -> None:
            print(line, file=sys.stderr, flush=True)
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    own_dir = work_dir is None
    work_dir = work_dir or tempfile.mkdtemp(prefix="kafkatw-netns-")
    result: dict = {}
    log(f"network-fault run: seed {seed}, {seconds:.0f} s of faults, work dir {work_dir}")
    try:
        with NetnsCluster(work_dir, log=log) as cluster:
            assert cluster.client is not None and cluster.zookeeper is not None
            summary_path = os.path.join(work_dir, "summary.json")
            config = {
                "bootstrap": cluster.bootstrap, "seed": seed, "seconds": seconds, "partitions": partitions,
                "zookeeper_address": cluster.zookeeper.host.address, "client_address": cluster.client.address,
                "brokers": {b.broker_id: {"address": b.host.address, "namespace": b.host.namespace,
                                          "data_dir": b.data_dir} for b in cluster.brokers},
                "summary_path": summary_path,
            }
            config_path = os.path.join(work_dir, "clients.json")
            with open(config_path, "w") as f:
                json.dump(config, f)
            completed = subprocess.run(cluster.client.exec_args() + [sys.executable, "-m", "kafkatw.testing_netns",
                                                                     "--clients", config_path],
                                       stdin=subprocess.DEVNULL, timeout=seconds * 3 + 600)
            if completed.returncode != 0 or not os.path.exists(summary_path):
                raise RuntimeError(f"the clients exited with {completed.returncode}; logs in {work_dir}")
            with open(summary_path) as f:
                result = json.load(f)
            for broker in cluster.brokers:
                if broker.popen.poll() is not None:
                    result["details"].append(f"broker {broker.broker_id} exited with {broker.popen.returncode}")
        result["work_dir"] = work_dir
        log(json.dumps(result["summary"]))
        return result
    finally:
        problem = not result or not result.get("summary", {}).get("ok", False)
        if own_dir and not keep and not problem:
            shutil.rmtree(work_dir, ignore_errors=True)
            result["work_dir"] = None
        else:
            log(f"logs and data kept in {work_dir}")


def main(argv: list[str] | None = None) -> int:
    """
    C{python -m kafkatw.testing_netns [--seconds S] [--seed N] [--partitions P] [--work-dir D] [--keep]}:
    one run; prints its one-line JSON summary on stdout; exits 1 when the
    checker found a problem, 2 when the machine cannot run it.
    """
    parser = argparse.ArgumentParser(prog="python -m kafkatw.testing_netns",
                                     description="Network faults under acks=all load, checked (Jepsen-style).")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("KAFKATW_NETNS_SECONDS", "45")))
    parser.add_argument("--seed", type=int,
                        default=int(os.environ["KAFKATW_NETNS_SEED"]) if os.environ.get("KAFKATW_NETNS_SEED") else None)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the logs and data even when the run passes")
    parser.add_argument("--clients", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.clients:
        return _client_main(args.clients)
    try:
        result = run_network_faults(args.seconds, args.seed, args.partitions, args.work_dir, args.keep)
    except NetnsUnavailableError as e:
        print(f"cannot run: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result["summary"]))
    return 0 if result["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
