"""
End-to-end latency: from C{send} to the consumer's C{poll} returning the
record, 200-byte records at a fixed rate (default 10,000/s), acks=1,
linger 0, one partition, against ONE kafkatw broker started here.

Pairs, each a producer process and a consumer process started fresh:

  - C{kafkatw}: kafkatw's L{Producer} (linger_ms=0) and L{Consumer}
    (fetch_min_bytes=1, default fetch_max_wait_ms), polling what is there;
  - C{librdkafka}: confluent-kafka's Producer (linger.ms=0) and Consumer
    (fetch.wait.max.ms default, polling one record at a time).

Both producers send each record when it is due, waiting in between without
spinning (a loop around confluent-kafka's C{poll(timeout)} would spin: it
rounds timeouts below a millisecond down to 0, and the spinning producer took
one of this 2-core machine's cores from the broker and the consumer).

C{max_at_s} is how far into the run the slowest record was sent (s) and
C{over_5ms} how many records took longer than 5 ms.

Every value starts with its send time (C{time.monotonic_ns}, one clock for
every process of this machine); the consumer takes the time when poll returns.
Prints one JSON line per pair: p50, p99, p99.9 and max in ms, the brokers'
and the two clients' CPU seconds (user and system) while the pair ran
(C{broker_cpu_s}, C{client_cpu_s}), and the brokers' pauses
in the run, read from their metrics endpoints (C{metrics.port=0}; their
consumer-lag monitor, C{metrics.lag.interval.ms}, is kept out of the runs)
before and after it (kafkatw/broker/pauses.py):

  - C{broker_gc_max_ms}: the longest garbage collection of any broker;
  - C{broker_lag_max_ms}: the largest event loop lag of any broker (a timer
    due every 10 ms, C{metrics.event.loop.lag.interval.ms}: long handler
    turns, collections, waiting for a core);
  - C{broker_gc_collections}: collections by generation, all brokers.

A maximum is exact when it is the longest since the broker started; else
it is known to its histogram bucket and shown as C{"<=B"} (B the bucket's
upper bound).  C{broker_runq_wait_s} is the brokers' time runnable but
waiting for a core (C{/proc/<pid>/schedstat}).  C{--client-pauses} measures
the same in kafkatw's producer and consumer processes (C{client_pauses}).

A pair named C{P/C} mixes clients: P's producer and C's consumer (e.g.
C{librdkafka/kafkatw}), which tells the clients' shares from the broker's.
C{kafkatw-gc-freeze} is kafkatw's clients after C{gc.freeze()} once they are
set up (docs/clients.md, "Throughput").

C{--timeline} adds, for kafkatw's pair, the median of each stage of a
record's trip, measured in the two client processes (broker stages are
inside "request written -> acknowledged" and "fetch sent -> fetch answered"):

  send -> Produce request written (the producer's batching and drain)
  request written -> acknowledged (broker append and response)
  fetch response received -> poll returned (consumer decode and hand-off)
  send -> fetch response received (everything before the consumer's decode)

Usage:
  python bench/bench_latency.py [--rate 10000] [--seconds 10] [--pairs kafkatw,librdkafka]
      [--acks 1] [--runs 3] [--timeline] [--brokers 1] [--client-pauses]
  pairs: kafkatw, kafkatw-gc-freeze, librdkafka, or PRODUCER/CONSUMER of those
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
from functools import partial

from _common import cpu_seconds

RECORD_SIZE = 200
_STAMP = struct.Struct(">q")
# Both producers pace the same way: wait (without spinning) when the next record is
# due more than EARLY_S from now, else send it at once.
EARLY_S = 0.0002


def _percentiles(values: list[float]) -> dict:
    values = sorted(values)
    if not values:
        return {}

    def pct(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 3)

    return {"p50_ms": pct(0.5), "p99_ms": pct(0.99), "p999_ms": pct(0.999), "max_ms": round(values[-1], 3)}


# --- children --------------------------------------------------------------------------


def _client_pauses(reactor, pauses_file: str):
    """The GC and event loop monitors of a kafkatw client process (kafkatw/broker/pauses.py), or None."""
    if not pauses_file:
        return None
    from kafkatw.broker.pauses import EventLoopLag, GcPauses

    gc_pauses, lag = GcPauses(), EventLoopLag(reactor)
    gc_pauses.install()
    lag.start()
    return gc_pauses, lag


def _write_client_pauses(monitors, pauses_file: str) -> None:
    if monitors is None:
        return
    from kafkatw.broker.pauses import PAUSE_BUCKETS_S

    gc_pauses, lag = monitors
    gc_pauses.uninstall()
    lag.stop()
    with open(pauses_file, "w") as f:
        json.dump({"gc_max_ms": round(max(h.max_s for h in gc_pauses.generations) * 1000, 3),
                   "gc_collections": [sum(h.counts) for h in gc_pauses.generations],
                   "lag_max_ms": round(lag.lag.max_s * 1000, 3),
                   "lag_over_5ms": sum(lag.lag.counts[PAUSE_BUCKETS_S.index(0.005) + 1:])}, f)


def producer_kafkatw(bootstrap: str, topic: str, rate: float, seconds: float, acks: str, timeline: str,
                     pauses_file: str = "", freeze: bool = False) -> None:
    from twisted.internet import defer, task

    from kafkatw.client.producer import Producer

    written: list[tuple[int, int]] = []  # (records in the request's batch, write ns)
    acked: list[int] = []

    async def main(reactor) -> None:
        producer = Producer(reactor, bootstrap, acks="all" if acks == "all" else int(acks), linger_ms=0)
        await producer.send(topic, b"warm-up")
        if freeze:
            gc.freeze()
        if timeline:
            # bench instrumentation: when each Produce request is handed to the transport
            # (the producer hands its Produce requests to KafkaClient.request)
            send_request = producer.client.request

            def timed_request(node, api_key, body, *a, **kw):
                if api_key == 0:
                    for _name, partitions in body.topics:
                        for _p, data in partitions:
                            count = struct.unpack_from(">i", data, 57)[0]  # the batch's recordCount
                            written.append((count, time.monotonic_ns()))
                return send_request(node, api_key, body, *a, **kw)

            producer.client.request = timed_request
        monitors = _client_pauses(reactor, pauses_file)
        n = int(rate * seconds)
        pad = b"x" * (RECORD_SIZE - _STAMP.size)
        start = time.monotonic()
        sends = []
        for i in range(n):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > EARLY_S:
                await task.deferLater(reactor, delay, lambda: None)
            now = time.monotonic_ns()
            if timeline:
                sends.append(now)
                producer.send(topic, _STAMP.pack(now) + pad,
                              on_delivery=lambda m, e: acked.append(time.monotonic_ns()))
            else:
                producer.send(topic, _STAMP.pack(now) + pad)
        await producer.flush()
        _write_client_pauses(monitors, pauses_file)
        await producer.close()
        if timeline:
            if not written:
                raise RuntimeError("--timeline: no Produce request went through KafkaClient.request")
            json.dump({"sends": sends, "written": written, "acked": acked}, open(timeline, "w"))

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))


def consumer_kafkatw(bootstrap: str, topic: str, n: int, out: str, timeline: str, pauses_file: str = "",
                     freeze: bool = False) -> None:
    from twisted.internet import defer, task

    from kafkatw.client.consumer import Consumer

    latencies: list[float] = []
    received: list[int] = []

    async def main(reactor) -> None:
        consumer = Consumer(reactor, bootstrap, auto_offset_reset="latest", fetch_min_bytes=1)
        consumer.assign([(topic, 0)])
        await consumer.position((topic, 0))
        if timeline:
            fetch_done = consumer._fetch_done  # bench instrumentation: when a fetch response arrives

            def timed(response, *a):
                received.append(time.monotonic_ns())
                return fetch_done(response, *a)

            consumer._fetch_done = timed
        if freeze:
            gc.freeze()
        monitors = _client_pauses(reactor, pauses_file)
        print("ready", flush=True)
        unpack = _STAMP.unpack_from
        stamps: list[tuple[int, int]] = []
        while len(latencies) < n:
            records = await consumer.poll(timeout_ms=10000)
            now = time.monotonic_ns()
            if not records:
                break
            for r in records:
                if len(r.value) != RECORD_SIZE:
                    continue  # the producer's warm-up record
                sent = unpack(r.value)[0]
                latencies.append((now - sent) / 1e6)
                if timeline:
                    stamps.append((sent, now, received[-1] if received else now))
        _write_client_pauses(monitors, pauses_file)
        await consumer.close()
        json.dump({"latencies": latencies, "stamps": stamps}, open(out, "w"))

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))


def producer_librdkafka(bootstrap: str, topic: str, rate: float, seconds: float, acks: str, _timeline: str,
                        _pauses_file: str = "") -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": -1 if acks == "all" else int(acks),
                         "linger.ms": 0, "enable.idempotence": False})
    producer.produce(topic, b"warm-up")
    producer.flush(10)
    n = int(rate * seconds)
    pad = b"x" * (RECORD_SIZE - _STAMP.size)
    start = time.monotonic()
    for i in range(n):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > EARLY_S:
            time.sleep(delay)
        producer.produce(topic, _STAMP.pack(time.monotonic_ns()) + pad)
        producer.poll(0)
    producer.flush(30)


def consumer_librdkafka(bootstrap: str, topic: str, n: int, out: str, _timeline: str,
                        _pauses_file: str = "") -> None:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    # the assignment takes effect on the first poll: wait until it is fetching
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        consumer.poll(0.05)
        if consumer.position([TopicPartition(topic, 0)])[0].offset >= 0:
            break
    print("ready", flush=True)
    latencies: list[float] = []
    unpack = _STAMP.unpack_from
    idle_since = time.monotonic()
    while len(latencies) < n and time.monotonic() - idle_since < 10:
        m = consumer.poll(0.1)
        if m is None or m.error() or len(m.value()) != RECORD_SIZE:
            continue
        now = time.monotonic_ns()
        latencies.append((now - unpack(m.value())[0]) / 1e6)
        idle_since = time.monotonic()
    consumer.close()
    json.dump({"latencies": latencies, "stamps": []}, open(out, "w"))


PRODUCERS = {"kafkatw": producer_kafkatw, "kafkatw-gc-freeze": partial(producer_kafkatw, freeze=True),
             "librdkafka": producer_librdkafka}
CONSUMERS = {"kafkatw": consumer_kafkatw, "kafkatw-gc-freeze": partial(consumer_kafkatw, freeze=True),
             "librdkafka": consumer_librdkafka}


def _roles(pair: str) -> tuple[str, str]:
    """(producer, consumer) of a pair name: C{kafkatw} or C{librdkafka/kafkatw}."""
    producer, _, consumer = pair.partition("/")
    return producer, consumer or producer


def _timeline(producer_file: str, consumer: dict) -> dict:
    with open(producer_file) as f:
        p = json.load(f)
    sends, written, acked = p["sends"], p["written"], p["acked"]
    # Records and requests are in order on one partition: each record's request write time.
    per_record_write = [at for count, at in written for _ in range(count)]
    n = min(len(sends), len(per_record_write), len(acked))
    to_write = [(per_record_write[i] - sends[i]) / 1e6 for i in range(n)]
    to_ack = [(acked[i] - per_record_write[i]) / 1e6 for i in range(n)]
    stamps = consumer["stamps"]
    decode = [(now - got) / 1e6 for sent, now, got in stamps]
    to_fetched = [(got - sent) / 1e6 for sent, now, got in stamps]

    def med(values: list[float]) -> float | None:
        return round(statistics.median(values), 3) if values else None

    return {"send_to_request_written_ms": med(to_write), "request_written_to_acked_ms": med(to_ack),
            "send_to_fetch_response_ms": med(to_fetched), "fetch_response_to_poll_return_ms": med(decode),
            "records_per_request": round(len(sends) / len(written), 2) if written else None}


def child(args: argparse.Namespace) -> None:
    producer, consumer = _roles(args.pair)
    if args.role == "producer":
        PRODUCERS[producer](args.bootstrap, args.topic, args.rate, args.seconds, args.acks, args.timeline_file,
                            args.pauses_file)
    else:
        CONSUMERS[consumer](args.bootstrap, args.topic, args.n, args.out, args.timeline_file, args.pauses_file)


def run_pair(pair: str, bootstrap: str, topic: str, args: argparse.Namespace, run: int) -> dict:
    name = pair.replace("/", "-")
    out = f"/tmp/kafkatw-latency-{os.getpid()}-{name}-{run}.json"
    kafkatw_both = all(role.startswith("kafkatw") for role in _roles(pair))
    tl = f"/tmp/kafkatw-latency-{os.getpid()}-{name}-{run}-producer.json" if args.timeline and kafkatw_both else ""
    n = int(args.rate * args.seconds)
    base = [sys.executable, os.path.abspath(__file__), "--child", "--pair", pair, "--bootstrap", bootstrap,
            "--topic", topic, "--rate", str(args.rate), "--seconds", str(args.seconds), "--acks", args.acks,
            "--timeline-file", tl]
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pauses = {role: f"{out}-{role}-pauses" if args.client_pauses and name.startswith("kafkatw") else ""
              for role, name in zip(("producer", "consumer"), _roles(pair))}
    consumer = subprocess.Popen([*base, "--role", "consumer", "--n", str(n), "--out", out,
                                 "--pauses-file", pauses["consumer"]], stdout=subprocess.PIPE, text=True)
    try:
        line = consumer.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"{pair} consumer did not start")
        subprocess.run([*base, "--role", "producer", "--pauses-file", pauses["producer"]], check=True,
                       timeout=args.seconds * 3 + 60)
        consumer.wait(timeout=60)
    finally:
        if consumer.poll() is None:
            consumer.kill()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    figure = {"bench": "latency", "pair": pair, "run": run, "rate": args.rate, "acks": args.acks,
              "records": len(result["latencies"]), **_percentiles(result["latencies"])}
    figure["client_cpu_s"] = round(children.ru_utime + children.ru_stime - children_before.ru_utime
                                   - children_before.ru_stime, 2)
    if result["latencies"]:  # where in the run the slowest record was sent (s), and how many took over 5 ms
        latencies = result["latencies"]
        figure["max_at_s"] = round(latencies.index(max(latencies)) / args.rate, 2)
        figure["over_5ms"] = sum(1 for v in latencies if v > 5)
    if tl:
        figure["timeline"] = _timeline(tl, result)
        os.unlink(tl)
    for role, path in pauses.items():
        if path:
            with open(path) as f:
                figure.setdefault("client_pauses", {})[role] = json.load(f)
            os.unlink(path)
    return figure


# --- the brokers' pauses (kafkatw/broker/pauses.py), from their metrics endpoints --------

_HISTOGRAMS = {"kafkatw_gc_pause_seconds": "gc", "kafkatw_event_loop_lag_seconds": "lag"}
_MAXIMA = {"kafkatw_gc_pause_max_seconds": "gc", "kafkatw_event_loop_lag_max_seconds": "lag"}


def metrics_port(log_path: str) -> int:
    """The metrics port a broker logged at start (C{metrics at http://host:port/metrics})."""
    with open(log_path, errors="replace") as f:
        found = re.findall(r"metrics at http://\S+?:(\d+)/metrics", f.read())
    if not found:
        raise RuntimeError(f"no metrics port in {log_path}")
    return int(found[-1])


def pause_snapshot(port: int) -> dict:
    """
    One broker's pause histograms: C{{(kind, generation): {le: cumulative count}}}
    and C{{(kind, generation): longest (s)}} under C{"max"}; kind is C{gc} or C{lag}.
    """
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    buckets: dict = {}
    maxima: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name in _HISTOGRAMS and sample.name.endswith("_bucket"):
                key = (_HISTOGRAMS[family.name], sample.labels.get("generation", ""))
                buckets.setdefault(key, {})[float(sample.labels["le"])] = sample.value
            elif family.name in _MAXIMA:
                maxima[(_MAXIMA[family.name], sample.labels.get("generation", ""))] = sample.value
    return {"buckets": buckets, "max": maxima}


def pauses_in_run(before: list[dict], after: list[dict]) -> dict:
    """
    The longest GC pause and event loop lag of any broker between two sets
    of snapshots (ms): exact when it raised a broker's maximum since start,
    else C{"<=B"}, B the upper bound of the highest bucket that counted one;
    and the collections by generation.
    """
    longest: dict[str, tuple[float, bool]] = {"gc": (0.0, True), "lag": (0.0, True)}
    collections = [0, 0, 0]
    for b, a in zip(before, after):
        for key, counts in a["buckets"].items():
            kind, generation = key
            old = b["buckets"].get(key, {})
            bounds = sorted(counts)
            if kind == "gc":
                collections[int(generation)] += int(counts[float("inf")] - old.get(float("inf"), 0))
            if a["max"].get(key, 0) > b["max"].get(key, 0):
                candidate = (a["max"][key] * 1000, True)
            else:
                deltas = [counts[le] - old.get(le, 0) for le in bounds]
                highest = [le for i, le in enumerate(bounds) if deltas[i] - (deltas[i - 1] if i else 0) > 0]
                candidate = (highest[-1] * 1000, False) if highest else (0.0, True)
            if candidate[0] > longest[kind][0]:
                longest[kind] = candidate

    def shown(value: tuple[float, bool]) -> float | str:
        return round(value[0], 3) if value[1] else f"<={value[0]:g}"

    return {"broker_gc_max_ms": shown(longest["gc"]), "broker_lag_max_ms": shown(longest["lag"]),
            "broker_gc_collections": collections}


def runq_wait_s(pid: int) -> float:
    """Time a process's threads were runnable and waiting for a core (s; C{/proc/<pid>/schedstat}'s second field)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[1])
    return total / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--pairs", default="kafkatw,librdkafka")
    parser.add_argument("--acks", default="1")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeline", action="store_true")
    parser.add_argument("--brokers", type=int, default=1, help="brokers (and the topic's replication factor)")
    parser.add_argument("--client-pauses", action="store_true",
                        help="measure GC pauses and event loop lag in kafkatw's client processes too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--pair", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--timeline-file", default="", help=argparse.SUPPRESS)
    parser.add_argument("--pauses-file", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkatw.testing import running_cluster

    # metrics.port for the pauses; the consumer-lag monitor (metrics.lag.interval.ms) kept out of the runs
    overrides = {"metrics.port": "0", "metrics.lag.interval.ms": "3600000"}
    with running_cluster(brokers=args.brokers, overrides=overrides) as cluster:
        bootstrap = ",".join(b.bootstrap for b in cluster)
        ports = [metrics_port(b.log_path) for b in cluster]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        results: dict[str, list[dict]] = {}
        for run in range(args.runs):
            for pair in args.pairs.split(","):
                topic = f"latency-{pair.replace('/', '-')}-{run}"
                admin.create_topics([NewTopic(topic, 1, args.brokers)])[topic].result(15)
                time.sleep(0.5)
                pauses_before = [pause_snapshot(port) for port in ports]
                runq_before_s = sum(runq_wait_s(b.popen.pid) for b in cluster)
                cpu_before_s = sum(cpu_seconds(b.popen.pid) for b in cluster)
                figure = run_pair(pair, bootstrap, topic, args, run)
                figure["broker_cpu_s"] = round(sum(cpu_seconds(b.popen.pid) for b in cluster) - cpu_before_s, 2)
                figure["broker_runq_wait_s"] = round(sum(runq_wait_s(b.popen.pid) for b in cluster) - runq_before_s, 3)
                figure.update(pauses_in_run(pauses_before, [pause_snapshot(port) for port in ports]))
                figure["load_avg_1m"] = os.getloadavg()[0]
                print(json.dumps(figure), flush=True)
                results.setdefault(pair, []).append(figure)
        for pair, figures in results.items():
            summary = {key: round(statistics.median(f[key] for f in figures), 3)
                       for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms") if all(key in f for f in figures)}
            print(json.dumps({"bench": "latency", "pair": pair, "summary": "median of runs", "runs": len(figures),
                              "rate": args.rate, "acks": args.acks, **summary}), flush=True)


if __name__ == "__main__":
    main()
