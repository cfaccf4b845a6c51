"""
Idle partitions with and without fetch sessions (KIP-227): the brokers' CPU
and the size of the followers' Fetch requests.

Starts a real ZooKeeper and three kafkatw brokers here (127.0.0.1 only) and
creates C{--partitions} partitions at RF=3: a topic of C{--busy} partitions
that gets traffic and topics of at most 1,000 partitions each, the rest, that
stay idle.  Then, per mode:

  - C{off}: the brokers run with C{max.incremental.fetch.session.cache.slots=0}
    (every follower fetch is full: each names every partition it follows
    from that leader, and each answer lists them all);
  - C{on}: the default (1000): followers fetch incrementally.

The brokers are restarted between the modes on the same logs (the cluster is
created once); once every partition is led with a full ISR again, the bench
waits C{--settle-s}, then measures two windows of C{--window-s}:

  - C{idle}: no client;
  - C{traffic}: librdkafka (confluent-kafka) sends C{--rate} records/s of
    C{--record-size} bytes, acks=all, round-robin over the busy partitions.

Per window, one JSON line: the three brokers' CPU (utime + stime from
C{/proc/<pid>/stat}, as % of one core, their sum and each), the followers'
Fetch requests per second and their average size in bytes (the brokers'
C{kafkatw_fetch_follower_request_bytes_total} over
C{kafkatw_fetch_follower_requests_total}), and the 1-minute load average
(other processes share the cores).  Every loop is bounded in count and time.

Usage::

  python bench/bench_fetch_sessions.py [--partitions 4000] [--busy 10] [--rate 2000] \\
      [--window-s 15] [--modes off,on]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kafkatw.testing import BrokerProcess, ZooKeeperFixture, find_free_port

from _common import cpu_seconds, emitter

emit = emitter("fetch_sessions")

_OVERRIDES = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "30000",
}

BUSY_TOPIC = "busy"
IDLE_TOPIC = "idle"


def scrape(port: int) -> dict[str, float]:
    """The broker's unlabelled samples and the sums of the labelled ones, by name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("kafka_log_log_"):
            continue
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
            if sample.name == "kafkatw_fetch_session_requests_total":
                name = f"{sample.name}:{sample.labels['context']}"
                values[name] = values.get(name, 0.0) + sample.value
    return values


def wait_settled(ports: list[int], partitions: int, timeout_s: float) -> float:
    """Wait until every partition is led and no leader is under-replicated; returns the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            samples = [scrape(port) for port in ports]
        except OSError:
            time.sleep(1.0)
            continue
        led = sum(s.get("kafka_server_replicamanager_leadercount", 0) for s in samples)
        under = sum(s.get("kafka_server_replicamanager_underreplicatedpartitions", 0) for s in samples)
        if led == partitions and under == 0:
            return time.monotonic() - start
        time.sleep(1.0)
    raise RuntimeError(f"partitions not led with full ISRs within {timeout_s} s")


def create_topics(bootstrap: str, partitions: int, busy: int, timeout_s: float) -> None:
    """The busy topic, then the idle partitions as topics of at most 1,000 partitions, one request each."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout_s * 1000)})
    topics = [NewTopic(BUSY_TOPIC, busy, 3)]
    left = partitions - busy
    while left > 0:
        topics.append(NewTopic(f"{IDLE_TOPIC}-{len(topics)}", min(left, 1000), 3))
        left -= 1000
    for topic in topics:
        admin.create_topics([topic], operation_timeout=timeout_s, request_timeout=timeout_s)[topic.topic] \
            .result(timeout_s)


def prefer_leaders(bootstrap: str, timeout_s: float) -> None:
    """
    Preferred leader election on every partition: a restart leaves the
    leaderships wherever the first broker back took them, and which broker
    leads the busy partitions decides who does the work.
    """
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout_s)
    except Exception as e:  # ELECTION_NOT_NEEDED for partitions already led by their preferred replica
        emit("elect_leaders", str(e)[:200], "")


def busy_leaders(bootstrap: str) -> dict[int, int]:
    """The busy topic's partition -> leader broker."""
    from confluent_kafka.admin import AdminClient

    topic = AdminClient({"bootstrap.servers": bootstrap}).list_topics(BUSY_TOPIC, timeout=30).topics[BUSY_TOPIC]
    return {p: meta.leader for p, meta in sorted(topic.partitions.items())}


def window(mode: str, phase: str, brokers: list[tuple[BrokerProcess, int]], seconds: float,
           producer: Any = None, rate: float = 0.0, busy: int = 0, value: bytes = b"") -> None:
    """Measure one window (producing at C{rate} records/s when C{producer} is given) and emit its line."""
    ports = [port for _, port in brokers]
    before = [scrape(port) for port in ports]
    cpu_before = [cpu_seconds(process.popen.pid) for process, _ in brokers]
    load = os.getloadavg()[0]
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        if producer is not None:
            due = int((time.monotonic() - start) * rate)
            while sent < due:
                try:
                    producer.produce(BUSY_TOPIC, value, partition=sent % busy)
                    sent += 1
                except BufferError:
                    producer.poll(0.01)
                    break
            producer.poll(0.005)
        else:
            time.sleep(0.05)
    elapsed = time.monotonic() - start
    cpu = [(cpu_seconds(process.popen.pid) - c) / elapsed * 100.0 for (process, _), c in zip(brokers, cpu_before)]
    after = [scrape(port) for port in ports]

    def delta(name: str) -> float:
        return sum(a.get(name, 0.0) - b.get(name, 0.0) for a, b in zip(after, before))

    requests = delta("kafkatw_fetch_follower_requests_total")
    size = delta("kafkatw_fetch_follower_request_bytes_total")
    emit(f"{mode}/{phase}", round(sum(cpu), 1), "% of one core (3 brokers)",
         per_broker=[round(c, 1) for c in cpu],
         follower_fetches_per_s=round(requests / elapsed, 1),
         follower_fetch_request_bytes=round(size / requests) if requests else None,
         incremental_fetches=delta("kafkatw_fetch_session_requests_total:incremental"),
         records_per_s=round(sent / elapsed), load_1min=round(load, 2), window_s=round(elapsed, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=4000)
    parser.add_argument("--busy", type=int, default=10)
    parser.add_argument("--rate", type=float, default=2000.0, help="records/s over the busy partitions")
    parser.add_argument("--record-size", type=int, default=200)
    parser.add_argument("--window-s", type=float, default=15.0)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--modes", default="off,on")
    parser.add_argument("--timeout-s", type=float, default=240.0, help="bound of each wait")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= {"on", "off"}:
        parser.error("--modes takes on and off")

    base = tempfile.mkdtemp(prefix="kafkatw-bench-sessions-")
    brokers: list[tuple[BrokerProcess, int]] = []
    try:
        with ZooKeeperFixture(os.path.join(base, "zookeeper")) as connect:
            try:
                ports = [find_free_port() for _ in range(3)]
                listener_ports = [find_free_port() for _ in range(3)]
                created = False
                for mode in modes:
                    for process, _ in brokers:
                        process.stop()
                    slots = "0" if mode == "off" else "1000"
                    brokers = []
                    started = time.monotonic()
                    for broker_id in range(3):
                        process = BrokerProcess(broker_id, connect + "/kafkatw", base, {
                            **_OVERRIDES, "metrics.port": str(ports[broker_id]),
                            "max.incremental.fetch.session.cache.slots": slots}, port=listener_ports[broker_id])
                        brokers.append((process, ports[broker_id]))
                        process.start(timeout_s=args.timeout_s)
                    if not created:
                        create_topics(brokers[0][0].bootstrap, args.partitions, args.busy, args.timeout_s)
                        created = True
                    settle_s = wait_settled(ports, args.partitions, args.timeout_s)
                    prefer_leaders(brokers[0][0].bootstrap, args.timeout_s)
                    wait_settled(ports, args.partitions, args.timeout_s)
                    emit(f"{mode}/ready", round(time.monotonic() - started, 1), "s",
                         note="brokers started (and topics created) until every partition is led, ISRs full, "
                              "preferred leaders elected", settle_wait_s=round(settle_s, 1),
                         leaders=[scrape(port).get("kafka_server_replicamanager_leadercount") for port in ports],
                         busy_leaders=busy_leaders(brokers[0][0].bootstrap))
                    time.sleep(args.settle_s)
                    window(mode, "idle", brokers, args.window_s)
                    from confluent_kafka import Producer

                    producer = Producer({"bootstrap.servers": brokers[0][0].bootstrap, "acks": "all",
                                         "linger.ms": 5, "log_level": 3})
                    value = b"x" * args.record_size
                    window(mode, "warmup", brokers, 2.0, producer, args.rate, args.busy, value)
                    window(mode, "traffic", brokers, args.window_s, producer, args.rate, args.busy, value)
                    unsent = producer.flush(30)
                    if unsent:
                        emit(f"{mode}/unsent", unsent, "records")
                    del producer  # closed before the brokers restart
            finally:
                for process, _ in brokers:
                    process.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
