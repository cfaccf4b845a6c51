"""
Consumer throughput and end-to-end latency: kafkatw's Consumer against
kafka-python, aiokafka, and confluent-kafka (librdkafka, the native-code
reference), on the paper's workload (200-byte messages).

One broker (and ZooKeeper) is started unless C{--bootstrap-server} is given;
C{--messages} records are produced once with confluent-kafka; then each
consumer reads them all from the beginning in a fresh process.  Prints one JSON
line per figure: records/s (wall clock, from the first poll to the last
record) and the consumer process's CPU seconds (all its threads).

The latency figure: a confluent-kafka producer (acks=1, linger.ms=0) sends
C{--latency-rate} records/s for C{--latency-seconds}, each carrying its send
time; kafkatw's Consumer (fetch.min.bytes=1, long polling) records receive
time minus send time: p50 and p99 in ms.

    python bench/bench_consumer.py --messages 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time

TOPIC = "bench-consumer"
LATENCY_TOPIC = "bench-latency"


# --- children: one consumer each, in its own process ------------------------------------


def _report(impl: str, label: str, n: int, wall_s: float, cpu_s: float, extra: dict | None = None) -> None:
    print(json.dumps({"impl": impl, "config": label, "records": n, "seconds": round(wall_s, 3),
                      "records_per_s": round(n / wall_s), "cpu_s": round(cpu_s, 3),
                      "records_per_cpu_s": round(n / cpu_s), **(extra or {})}), flush=True)


def child_kafkatw(bootstrap: str, n: int, fetch_bytes: int | None, label: str, partitions: int,
                  impl: str = "kafkatw") -> None:
    from twisted.internet import defer, reactor

    from kafkatw.client.consumer import Consumer

    options = {"max_poll_records": 5000}
    if fetch_bytes:
        options["max_partition_fetch_bytes"] = fetch_bytes

    async def run() -> None:
        consumer = Consumer(reactor, bootstrap, auto_offset_reset="earliest", **options)
        consumer.assign([(TOPIC, p) for p in range(partitions)])
        for p in range(partitions):
            await consumer.position((TOPIC, p))
        count = 0
        t0, c0 = time.perf_counter(), time.process_time()
        while count < n:
            count += len(await consumer.poll(timeout_ms=2000))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        await consumer.close()
        _report(impl, label, count, wall, cpu)

    d = defer.Deferred.fromCoroutine(run())
    d.addErrback(lambda f: (f.printTraceback(), os._exit(1)))
    d.addBoth(lambda _: reactor.stop())
    reactor.run()


def child_kafkatw_gc_freeze(bootstrap: str, n: int, fetch_bytes: int | None, label: str, partitions: int) -> None:
    """kafkatw's Consumer after C{gc.freeze()} (docs/clients.md, Throughput)."""
    import gc

    import importlib

    for module in ("twisted.internet.reactor", "kafkatw.client.consumer"):  # start-up, then the freeze
        importlib.import_module(module)
    gc.freeze()
    child_kafkatw(bootstrap, n, fetch_bytes, label, partitions, impl="kafkatw-gc-freeze")


def child_kafkatw_blocking(bootstrap: str, n: int, fetch_bytes: int | None, label: str, partitions: int) -> None:
    from kafkatw.client.blocking import BlockingConsumer

    options = {"max_poll_records": 5000}
    if fetch_bytes:
        options["max_partition_fetch_bytes"] = fetch_bytes
    with BlockingConsumer(bootstrap, auto_offset_reset="earliest", **options) as consumer:
        consumer.assign([(TOPIC, p) for p in range(partitions)])
        for p in range(partitions):
            consumer.position((TOPIC, p))
        count = 0
        t0, c0 = time.perf_counter(), time.process_time()
        for _record in consumer:
            count += 1
            if count >= n:
                break
        _report("kafkatw-blocking", label, count, time.perf_counter() - t0, time.process_time() - c0)


def child_kafka_python(bootstrap: str, n: int, fetch_bytes: int | None, label: str, partitions: int) -> None:
    from kafka import KafkaConsumer, TopicPartition

    options = {"max_partition_fetch_bytes": fetch_bytes} if fetch_bytes else {}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", **options)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    for tp in tps:
        consumer.position(tp)
    count = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while count < n:
        for records in consumer.poll(timeout_ms=2000, max_records=5000).values():
            count += len(records)
    _report("kafka-python", label, count, time.perf_counter() - t0, time.process_time() - c0)
    consumer.close()


def child_aiokafka(bootstrap: str, n: int, fetch_bytes: int | None, label: str, partitions: int) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> None:
        options = {"max_partition_fetch_bytes": fetch_bytes} if fetch_bytes else {}
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", **options)
        await consumer.start()
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        for tp in tps:
            await consumer.position(tp)
        count = 0
        t0, c0 = time.perf_counter(), time.process_time()
        while count < n:
            for records in (await consumer.getmany(timeout_ms=2000, max_records=5000)).values():
                count += len(records)
        _report("aiokafka", label, count, time.perf_counter() - t0, time.process_time() - c0)
        await consumer.stop()

    asyncio.run(run())


def child_confluent(bootstrap: str, n: int, fetch_bytes: int | None, label: str, partitions: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    config = {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    if fetch_bytes:
        config["max.partition.fetch.bytes"] = fetch_bytes
    consumer = Consumer(config)
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    count = 0
    t0 = c0 = None
    while count < n:
        messages = consumer.consume(num_messages=10000, timeout=2)
        if t0 is None:
            t0, c0 = time.perf_counter(), time.process_time()
        count += sum(1 for m in messages if not m.error())
    _report("confluent-kafka", label, count, time.perf_counter() - t0, time.process_time() - c0)
    consumer.close()


def child_latency(bootstrap: str, n: int, _fetch: int | None, label: str, _partitions: int) -> None:
    """Consume n timestamped records from the end of LATENCY_TOPIC; report latency percentiles."""
    from twisted.internet import defer, reactor

    from kafkatw.client.consumer import Consumer

    async def run() -> None:
        consumer = Consumer(reactor, bootstrap, auto_offset_reset="latest", fetch_min_bytes=1,
                            fetch_max_wait_ms=500)
        consumer.assign([(LATENCY_TOPIC, 0)])
        await consumer.position((LATENCY_TOPIC, 0))
        print("ready", flush=True)
        latencies = []
        unpack = struct.Struct(">d").unpack_from
        while len(latencies) < n:
            records = await consumer.poll(timeout_ms=5000)
            now = time.time()
            if not records:
                break
            latencies.extend(now - unpack(r.value)[0] for r in records)
        await consumer.close()
        latencies.sort()

        def pct(q: float) -> float:
            return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 3)

        print(json.dumps({"impl": "kafkatw", "config": label, "figure": "end_to_end_latency_ms",
                          "records": len(latencies), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
                          "max_ms": round(latencies[-1] * 1000, 3) if latencies else None}), flush=True)

    d = defer.Deferred.fromCoroutine(run())
    d.addErrback(lambda f: (f.printTraceback(), os._exit(1)))
    d.addBoth(lambda _: reactor.stop())
    reactor.run()


CHILDREN = {
    "kafkatw": child_kafkatw,
    "kafkatw-blocking": child_kafkatw_blocking,
    "kafkatw-gc-freeze": child_kafkatw_gc_freeze,
    "kafka-python": child_kafka_python,
    "aiokafka": child_aiokafka,
    "confluent-kafka": child_confluent,
    "latency": child_latency,
}


# --- the parent ---------------------------------------------------------------------------


def _produce(bootstrap: str, n: int, size: int, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(size // 2).hex().encode()[:size]
    for i in range(n):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


def _create(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def _run_child(kind: str, bootstrap: str, n: int, fetch: int | None, label: str, partitions: int) -> None:
    args = [sys.executable, __file__, "--child", kind, "--bootstrap-server", bootstrap, "--messages", str(n),
            "--label", label, "--partitions", str(partitions)]
    if fetch:
        args += ["--fetch-bytes", str(fetch)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        print(json.dumps({"impl": kind, "config": label, "error": out.stderr[-2000:]}), flush=True)
    for line in lines:
        print(line, flush=True)


def _latency(bootstrap: str, rate: int, seconds: float) -> None:
    from confluent_kafka import Producer

    _create(bootstrap, LATENCY_TOPIC, 1)
    n = int(rate * seconds)
    consumer = subprocess.Popen([sys.executable, __file__, "--child", "latency", "--bootstrap-server", bootstrap,
                                 "--messages", str(n), "--label", f"{rate}/s acks=1 confluent producer"],
                                stdout=subprocess.PIPE, text=True)
    assert consumer.stdout.readline().strip() == "ready"
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "socket.nagle.disable": True})
    pack = struct.Struct(">d").pack
    pad = b"x" * 192
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(LATENCY_TOPIC, value=pack(time.time()) + pad, partition=0)
        producer.poll(0)
    producer.flush(30)
    out, _ = consumer.communicate(timeout=120)
    for line in out.splitlines():
        if line.startswith("{"):
            print(line, flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap-server")
    p.add_argument("--messages", type=int, default=500_000)
    p.add_argument("--record-size", type=int, default=200)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--clients", default="kafkatw,kafkatw-gc-freeze,kafkatw-blocking,kafka-python,aiokafka,"
                                        "confluent-kafka")
    p.add_argument("--latency-rate", type=int, default=10_000)
    p.add_argument("--latency-seconds", type=float, default=5.0)
    p.add_argument("--no-latency", action="store_true")
    p.add_argument("--child")
    p.add_argument("--fetch-bytes", type=int)
    p.add_argument("--label", default="")
    args = p.parse_args()
    if args.child:
        CHILDREN[args.child](args.bootstrap_server, args.messages, args.fetch_bytes, args.label, args.partitions)
        return

    def run(bootstrap: str) -> None:
        _create(bootstrap, TOPIC, args.partitions)
        t0 = time.perf_counter()
        _produce(bootstrap, args.messages, args.record_size, args.partitions)
        print(json.dumps({"impl": "confluent-kafka", "figure": "produce (setup)", "records": args.messages,
                          "seconds": round(time.perf_counter() - t0, 3)}), flush=True)
        for kind in args.clients.split(","):
            _run_child(kind, bootstrap, args.messages, 200 * 1024, "prefetch 200 KB", args.partitions)
            if kind.startswith("kafkatw"):
                _run_child(kind, bootstrap, args.messages, None, "default fetch sizes", args.partitions)
        if not args.no_latency:
            _latency(bootstrap, args.latency_rate, args.latency_seconds)

    if args.bootstrap_server:
        run(args.bootstrap_server)
    else:
        from kafkatw.testing import running_cluster

        with running_cluster() as cluster:
            run(cluster[0].bootstrap)


if __name__ == "__main__":
    main()
