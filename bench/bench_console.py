"""
The web console's cost on a loaded broker: ONE kafkatw broker started here
(its own ZooKeeper, 127.0.0.1 only) with C{metrics.port}, produced to with
confluent-kafka (librdkafka; 200-byte records, acks=1, linger.ms=5) in
alternating phases:

  - quiet: nothing polls the HTTP port;
  - polled: --pollers threads each fetch, every --poll-interval-ms, what an
    open console page asks for (C{/console/api/overview}, C{topics},
    C{topic?name=T}, C{groups}, and 50 records of C{messages}) and
    C{/metrics} — with the defaults (4 pollers, 100 ms) 40 times the load of
    one open console (one page every 2 s).

One JSON line per figure: records/s produced and the broker process's CPU
seconds per million records (/proc/<pid>/stat) for each phase, and the median
and 99th percentile of each HTTP answer's time under load.  Every loop is
bounded in count and in time.

Usage:
  python bench/bench_console.py [--records 1500000] [--pollers 4] [--poll-interval-ms 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import urllib.request

from confluent_kafka import Consumer, Producer

from kafkatw.testing import find_free_port, running_cluster

from _common import cpu_seconds, emitter, produce_bounded

PATHS = ["console/api/overview", "console/api/topics", "console/api/topic?name=bench",
         "console/api/groups", "console/api/messages?topic=bench&partition=0&offset=-1&limit=50", "metrics"]


emit = emitter("console")


def produce(bootstrap: str, records: int, size: int, cap_s: float) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1,
                         "queue.buffering.max.messages": 1000000})
    started = time.perf_counter()
    sent = produce_bounded(producer, "bench", b"x" * size, records, started + cap_s)
    producer.flush(60)
    return sent / (time.perf_counter() - started)


def poller(port: int, interval_s: float, stop: threading.Event, times: dict[str, list[float]]) -> None:
    while not stop.is_set():
        for path in PATHS:
            started = time.monotonic()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=30) as response:
                response.read()
            times[path].append((time.monotonic() - started) * 1000)
        stop.wait(interval_s)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1500000)
    parser.add_argument("--record-size", type=int, default=200)
    parser.add_argument("--pollers", type=int, default=4)
    parser.add_argument("--poll-interval-ms", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration-cap-s", type=float, default=120)
    args = parser.parse_args()
    port = find_free_port()
    with running_cluster(1, overrides={"metrics.port": str(port), "num.partitions": "1"}) as cluster:
        broker = cluster[0]
        produce(broker.bootstrap, 1000, args.record_size, 30)  # creates the topic
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-group"})
        consumer.subscribe(["bench"])
        consumer.poll(5)
        consumer.commit(asynchronous=True)
        consumer.close()
        times: dict[str, list[float]] = {p: [] for p in PATHS}
        for round_ in range(args.rounds):
            for phase in ("quiet", "polled"):
                stop = threading.Event()
                threads = []
                if phase == "polled":
                    threads = [threading.Thread(target=poller, daemon=True,
                                                args=(port, args.poll_interval_ms / 1000, stop, times))
                               for _ in range(args.pollers)]
                    for t in threads:
                        t.start()
                cpu = cpu_seconds(broker.popen.pid)
                rate = produce(broker.bootstrap, args.records, args.record_size, args.duration_cap_s)
                cpu = cpu_seconds(broker.popen.pid) - cpu
                stop.set()
                for t in threads:
                    t.join(30)
                emit("produce", round(rate), "records/s", phase=phase, round=round_)
                emit("broker_cpu", round(cpu / (args.records / 1e6), 2), "s/million records", phase=phase,
                     round=round_)
        for path, samples in times.items():
            if samples:
                samples.sort()
                emit("http_answer", round(statistics.median(samples), 2), "ms", path=path,
                     p99=round(samples[int(len(samples) * 0.99) - 1], 2), count=len(samples))


if __name__ == "__main__":
    main()
