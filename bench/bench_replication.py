"""
Replication benchmark: the cost of acks=all on three replicas, and how long failover takes.

Starts a real ZooKeeper and three kafkatw brokers here (127.0.0.1 only); client
and brokers share this machine's cores.  One JSON line per figure:

  - throughput: 200-byte records with librdkafka (confluent-kafka, its
    default batching: linger.ms=5; idempotence only with --idempotence) and
    with kafkatw's own producer (BlockingProducer, its defaults; idempotent
    for acks=all only with --idempotence), RF=1 acks=1 and RF=3 acks=all with
    min.insync.replicas=2, on topics of --partitions partitions of the same
    running cluster, the two alternating --runs times; each figure is the
    median, and the ratio is the ratio of the medians (Kreps 2014 measured
    51% for Apache Kafka on three machines; here the three brokers share two
    cores with the client).  Idempotence caps a connection at 5 requests in
    flight, and one partition at one leader: both make acks=all's extra round
    trip (the followers' fetch, then the high watermark) show in the
    throughput.  With C{--partitions} above 1 librdkafka's records go to
    every partition (its partitioner), as kafkatw's producer's do.  Each
    figure also gives the brokers' CPU time (utime + stime of the three
    processes around each run) per million records, the part of it spent in
    the kernel (stime: copies to and from sockets and files), each broker's
    (by broker id; the RF=3 partition's leader is named), and the client's
    (this process: librdkafka's threads or kafkatw's producer);
  - failover: SIGKILL of the leader of an RF=3 partition to the first
    acknowledged acks=all write on its successor (librdkafka retrying every
    record), median and worst of --failovers runs;
  - controlled shutdown: SIGTERM of the leader while a producer sends one
    acks=all record every 2 ms: the longest gap between two acknowledgements.

Every loop is bounded in count and in time.

Usage:
  python bench/bench_replication.py [--records 300000] [--record-size 200] [--failovers 10]
      [--runs 5] [--partitions 1] [--idempotence] [--clients librdkafka,kafkatw] [--skip-failover]
      [--profile DIR]

With C{--profile DIR} every broker runs under cProfile (CPU time: C{time.process_time}), written to
C{DIR/broker-<id>.prof} at the end (read them with C{python -m pstats}); the figures are then the
profiled brokers'.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.client import BlockingProducer
from kafkatw.testing import BrokerProcess, running_cluster

from _common import cpu_seconds, cpu_times, emitter, produce_bounded, profiled_command

_OVERRIDES = {
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "500",
    "zookeeper.session.timeout.ms": "3000",
}


emit = emitter("replication")

def profile_brokers(directory: str) -> None:
    """Make every L{BrokerProcess} started from now on run under cProfile on CPU time, into C{directory}."""
    plain = BrokerProcess.command
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)

    def command(self: BrokerProcess) -> list[str]:
        return profiled_command(plain(self), os.path.join(directory, f"broker-{self.broker_id}.prof"), cpu_time=True)

    BrokerProcess.command = command  # type: ignore[method-assign]


def dump_profiles(cluster: list, directory: str) -> None:
    """Have each profiled broker write its profile (SIGUSR2); wait up to 10 s for the files."""
    for b in cluster:
        os.kill(b.popen.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 10
    for b in cluster:
        path = os.path.join(os.path.abspath(directory), f"broker-{b.broker_id}.prof")
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)


def create(bootstrap: str, topic: str, rf: int, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf,
                                  config={"min.insync.replicas": str(min(rf, 2))})])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ps = admin.list_topics(topic, timeout=5).topics[topic].partitions
        if len(ps) == partitions and all(p.leader >= 0 and len(p.isrs) == rf for p in ps.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{topic}: ISR not full")


def leader_of(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return admin.list_topics(topic, timeout=5).topics[topic].partitions[0].leader
    except Exception:
        return -1


def librdkafka_throughput(bootstrap: str, topic: str, acks: str, records: int, size: int, cap_s: float,
                          idempotence: bool, partitions: int = 1) -> tuple[float, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "enable.idempotence": idempotence and acks == "all",
                         "queue.buffering.max.messages": 1000000})
    started = time.perf_counter()
    sent = produce_bounded(producer, topic, b"x" * size, records, started + cap_s,
                           partition=0 if partitions == 1 else -1)
    producer.flush(cap_s)
    return sent / (time.perf_counter() - started), sent


def kafkatw_throughput(bootstrap: str, topic: str, acks: int, records: int, size: int, cap_s: float,
                       idempotence: bool, partitions: int = 1) -> tuple[float, int]:
    value = b"x" * size
    with BlockingProducer(bootstrap, acks=acks, enable_idempotence=idempotence and acks == -1) as producer:
        started = time.monotonic()
        sent = 0
        while sent < records and time.monotonic() - started < cap_s:
            producer.send(topic, value)
            sent += 1
        producer.flush(cap_s)
        return sent / (time.monotonic() - started), sent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300000)
    parser.add_argument("--record-size", type=int, default=200)
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--duration-cap-s", type=float, default=60)
    parser.add_argument("--runs", type=int, default=5, help="alternating RF=1 and RF=3 runs; medians")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--idempotence", action="store_true", help="idempotent producers for acks=all")
    parser.add_argument("--clients", default="librdkafka,kafkatw")
    parser.add_argument("--skip-failover", action="store_true", help="throughput only")
    parser.add_argument("--profile", metavar="DIR", default=None, help="cProfile every broker into DIR")
    args = parser.parse_args()
    if args.profile is not None:
        profile_brokers(args.profile)
    measures = {"librdkafka": librdkafka_throughput, "kafkatw": kafkatw_throughput}
    with running_cluster(3, overrides=_OVERRIDES) as cluster:
        bootstrap = ",".join(b.bootstrap for b in cluster)
        for client in args.clients.split(","):
            measure = measures[client]
            samples: dict[int, list[float]] = {1: [], 3: []}
            broker_cpu: dict[int, list[float]] = {1: [], 3: []}  # CPU-s per million records
            client_cpu: dict[int, list[float]] = {1: [], 3: []}
            each_cpu: dict[int, list[list[float]]] = {1: [], 3: []}  # per broker id
            system_cpu: dict[int, list[float]] = {1: [], 3: []}  # the brokers' stime (the kernel's share)
            for rf in (1, 3):
                create(bootstrap, f"tp-{client}-rf{rf}", rf, args.partitions)
            leaders = {rf: leader_of(bootstrap, f"tp-{client}-rf{rf}") for rf in (1, 3)}
            for _ in range(args.runs):
                for rf, acks in [(1, "1"), (3, "all")]:
                    each_before = [cpu_seconds(b.popen.pid) for b in cluster]
                    brokers_before = sum(each_before)
                    system_before = sum(cpu_times(b.popen.pid)[1] for b in cluster)
                    client_before = sum(os.times()[:2])
                    rate, sent = measure(
                        bootstrap, f"tp-{client}-rf{rf}", acks if client == "librdkafka" else (1 if acks == "1" else -1),
                        args.records, args.record_size, args.duration_cap_s, args.idempotence, args.partitions)
                    samples[rf].append(rate)
                    millions = max(sent, 1) / 1e6
                    each_after = [cpu_seconds(b.popen.pid) for b in cluster]
                    broker_cpu[rf].append((sum(each_after) - brokers_before) / millions)
                    system_cpu[rf].append((sum(cpu_times(b.popen.pid)[1] for b in cluster) - system_before) / millions)
                    each_cpu[rf].append([(a - b) / millions for a, b in zip(each_after, each_before)])
                    client_cpu[rf].append((sum(os.times()[:2]) - client_before) / millions)
            medians = {rf: statistics.median(v) for rf, v in samples.items()}
            for rf, acks in [(1, "1"), (3, "all")]:
                emit(f"produce_rf{rf}_acks_{acks}", round(medians[rf]), "records/s", client=client,
                     record_size=args.record_size, records=args.records, partitions=args.partitions,
                     idempotence=args.idempotence and rf == 3, runs=[round(v) for v in samples[rf]],
                     broker_cpu_s_per_million=round(statistics.median(broker_cpu[rf]), 3),
                     broker_system_cpu_s_per_million=round(statistics.median(system_cpu[rf]), 3),
                     each_broker_cpu_s_per_million=[round(statistics.median(runs), 3) for runs in zip(*each_cpu[rf])],
                     leader=leaders[rf],
                     client_cpu_s_per_million=round(statistics.median(client_cpu[rf]), 3))
            emit("rf3_acks_all_vs_rf1_acks_1", round(medians[3] / medians[1], 3), "ratio", client=client,
                 partitions=args.partitions, idempotence=args.idempotence)
        if args.profile is not None:
            dump_profiles(cluster, args.profile)
        if args.skip_failover:
            return

        # failover: SIGKILL of the leader -> first acknowledged acks=all write on the successor
        times = []
        for run in range(args.failovers):
            topic = f"failover-{run}"
            create(bootstrap, topic, 3)
            leader = leader_of(bootstrap, topic)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                 "linger.ms": 0, "retry.backoff.ms": 20, "retry.backoff.max.ms": 50,
                                 "topic.metadata.refresh.fast.interval.ms": 20})
            producer.produce(topic, b"warm", partition=0)
            producer.flush(10)
            acked: list[float] = []
            cluster[leader].kill()
            killed = time.monotonic()
            producer.produce(topic, b"after", partition=0,
                             on_delivery=lambda err, msg: acked.append(time.monotonic()) if err is None else None)
            producer.flush(60)
            if acked:
                times.append(acked[0] - killed)
            cluster[leader].start()
            create_deadline = time.monotonic() + 60
            while time.monotonic() < create_deadline:  # back in sync before the next run
                p = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5).topics[topic]
                if len(p.partitions[0].isrs) == 3:
                    break
                time.sleep(0.1)
        emit("failover_sigkill_to_first_ack_median", round(statistics.median(times), 3), "s", runs=len(times))
        emit("failover_sigkill_to_first_ack_worst", round(max(times), 3), "s", runs=len(times))

        # controlled shutdown: the longest pause between acknowledgements
        topic = "controlled"
        create(bootstrap, topic, 3)
        leader = leader_of(bootstrap, topic)
        acks_at: list[float] = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 0, "retry.backoff.ms": 20, "retry.backoff.max.ms": 50})
        started = time.monotonic()
        stopped = False
        while time.monotonic() - started < 12:
            producer.produce(topic, b"r", partition=0,
                             on_delivery=lambda err, msg: acks_at.append(time.monotonic()) if err is None else None)
            producer.poll(0.002)
            if not stopped and time.monotonic() - started > 3:
                cluster[leader].popen.terminate()
                stopped = True
        producer.flush(30)
        gaps = [b - a for a, b in zip(acks_at, acks_at[1:])]
        emit("controlled_shutdown_longest_pause", round(max(gaps), 3), "s", acknowledged=len(acks_at))


if __name__ == "__main__":
    main()
