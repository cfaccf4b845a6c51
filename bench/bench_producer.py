"""
Producer benchmark: the paper's workload (200-byte records, one topic, one
partition, acks=1) against ONE kafkatw broker started here, for kafkatw's
Twisted L{Producer} and its L{BlockingProducer}, kafka-python's C{KafkaProducer}, aiokafka's
C{AIOKafkaProducer} and confluent-kafka (librdkafka, the native reference).

Settings, the same for every client (paper §4, "Producer Test"):

  - C{batch1}: one record per Produce request (kafkatw linger_ms=0,
    batch_size=1; kafka-python linger_ms=0, batch_size=1; aiokafka
    linger_ms=0, max_batch_size=1 (then one record per batch);
    librdkafka linger.ms=0, batch.num.messages=1);
  - C{batch50}: 50 records per batch (batch_size = 50 records' bytes, linger 5 ms;
    librdkafka batch.num.messages=50);
  - C{default}: each client's own defaults except acks=1, linger 5 ms and no
    idempotence.

Each client runs in its own process; a run sends every record without waiting
(the clients' futures/Deferreds are dropped, as a fire-and-forget producer
does), then flushes.  Figures, one JSON line each: records/s (wall clock, first
send to flush done) and the producer process's CPU seconds (all its threads)
over the same span, and records per CPU-second.  Client and broker share this
machine's cores.

Usage:
  python bench/bench_producer.py [--records 300000] [--batch1-records 20000]
      [--clients kafkatw,kafkatw-gc-freeze,kafkatw-blocking,kafka-python,aiokafka,confluent] [--settings batch1,batch50,default]
      [--kafkatw-options JSON] [--py-spy-dir DIR]

--kafkatw-options adds Producer keywords to kafkatw's runs, e.g.
'{"max_in_flight_requests_per_connection": 20}' (figures then carry "options").
--py-spy-dir records the kafkatw client's batched runs with py-spy (raw folded stacks).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _common import emitter

RECORD_SIZE = 200
BATCH50_BYTES = 50 * (RECORD_SIZE + 11) + 61  # kafkatw's estimate: 50 records seal the batch


emit = emitter("producer")


# --- the clients, each run in a child process -----------------------------------------


def _kafkatw_options(setting: str) -> dict:
    """kafkatw's Producer options for C{setting}, with --kafkatw-options over them."""
    options = {"batch1": {"linger_ms": 0, "batch_size": 1},
               "batch50": {"linger_ms": 5, "batch_size": BATCH50_BYTES},
               "default": {"linger_ms": 5}}[setting]
    return {**options, **json.loads(os.environ.get("KAFKATW_OPTIONS", "{}"))}


def run_kafkatw(bootstrap: str, topic: str, n: int, setting: str) -> dict:
    from twisted.internet import defer, task

    from kafkatw.client.producer import Producer

    options = _kafkatw_options(setting)
    out: dict = {}

    async def main(reactor) -> None:
        producer = Producer(reactor, bootstrap, acks=1, **options)
        value = b"x" * RECORD_SIZE
        await producer.send(topic, value)  # metadata and connection
        send = producer.send
        t0, c0 = time.perf_counter(), time.process_time()
        sent = 0
        while sent < n:
            k = min(1000, n - sent)
            for _ in range(k):
                send(topic, value)
            sent += k
            await producer.ready()
            await task.deferLater(reactor, 0, lambda: None)
        await producer.flush()
        out.update(seconds=time.perf_counter() - t0, cpu_s=time.process_time() - c0)
        await producer.close()

    try:
        task.react(lambda reactor: defer.ensureDeferred(main(reactor)))
    except SystemExit:
        pass
    return out


def run_kafkatw_gc_freeze(bootstrap: str, topic: str, n: int, setting: str) -> dict:
    """kafkatw's Producer after C{gc.freeze()} (docs/clients.md, Throughput)."""
    import gc

    import importlib

    for module in ("twisted.internet.task", "kafkatw.client.producer"):  # start-up, then the freeze
        importlib.import_module(module)
    gc.freeze()
    return run_kafkatw(bootstrap, topic, n, setting)


def run_kafkatw_blocking(bootstrap: str, topic: str, n: int, setting: str) -> dict:
    """kafkatw's L{BlockingProducer}: C{send} from this thread, the Producer on its reactor thread."""
    from kafkatw.client import BlockingProducer

    with BlockingProducer(bootstrap, acks=1, **_kafkatw_options(setting)) as producer:
        value = b"x" * RECORD_SIZE
        producer.send_and_wait(topic, value, timeout_s=30)  # metadata and connection
        send = producer.send
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            send(topic, value)
        producer.flush(120)
        return {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def run_kafka_python(bootstrap: str, topic: str, n: int, setting: str) -> dict:
    from kafka import KafkaProducer

    options = {"batch1": {"linger_ms": 0, "batch_size": 1},
               "batch50": {"linger_ms": 5, "batch_size": BATCH50_BYTES},
               "default": {"linger_ms": 5}}[setting]
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, **options)
    value = b"x" * RECORD_SIZE
    producer.send(topic, value).get(30)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        producer.send(topic, value)
    producer.flush()
    result = {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    producer.close()
    return result


def run_aiokafka(bootstrap: str, topic: str, n: int, setting: str) -> dict:
    import asyncio

    from aiokafka import AIOKafkaProducer

    options = {"batch1": {"linger_ms": 0, "max_batch_size": 1},
               "batch50": {"linger_ms": 5, "max_batch_size": BATCH50_BYTES},
               "default": {"linger_ms": 5}}[setting]

    async def main() -> dict:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, **options)
        await producer.start()
        value = b"x" * RECORD_SIZE
        await producer.send_and_wait(topic, value)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            await producer.send(topic, value)
        await producer.flush()
        result = {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
        await producer.stop()
        return result

    return asyncio.run(main())


def run_confluent(bootstrap: str, topic: str, n: int, setting: str) -> dict:
    from confluent_kafka import Producer

    options = {"batch1": {"linger.ms": 0, "batch.num.messages": 1},
               "batch50": {"linger.ms": 5, "batch.num.messages": 50},
               "default": {"linger.ms": 5}}[setting]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False, **options})
    value = b"x" * RECORD_SIZE
    producer.produce(topic, value)
    producer.flush(30)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush()
    return {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


CLIENTS = {"kafkatw": run_kafkatw, "kafkatw-gc-freeze": run_kafkatw_gc_freeze, "kafkatw-blocking": run_kafkatw_blocking,
           "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka,
           "confluent": run_confluent}


def child(args: argparse.Namespace) -> None:
    result = CLIENTS[args.client](args.bootstrap, args.topic, args.n, args.setting)
    print("RESULT " + json.dumps(result), flush=True)


# --- the driver -------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--batch1-records", type=int, default=20_000)
    parser.add_argument("--clients", default="kafkatw,kafkatw-gc-freeze,kafkatw-blocking,kafka-python,aiokafka,confluent")
    parser.add_argument("--settings", default="batch1,batch50,default")
    parser.add_argument("--kafkatw-options", default="{}")
    parser.add_argument("--py-spy-dir")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--setting", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkatw.testing import running_cluster

    with running_cluster(brokers=1) as cluster:
        bootstrap = cluster[0].bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        emit("machine_cores", os.cpu_count(), "cores")
        for setting in args.settings.split(","):
            n = args.batch1_records if setting == "batch1" else args.records
            for client in args.clients.split(","):
                topic = f"bench-{client}-{setting}"
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
                command = [sys.executable, os.path.abspath(__file__), "--child", "--client", client,
                           "--bootstrap", bootstrap, "--topic", topic, "--n", str(n), "--setting", setting]
                if args.py_spy_dir and client.startswith("kafkatw") and setting != "batch1":
                    os.makedirs(args.py_spy_dir, exist_ok=True)
                    command = ["py-spy", "record", "-r", "250", "-f", "raw", "-o",
                               os.path.join(args.py_spy_dir, f"{client}-{setting}.txt"), "--", *command]
                env = dict(os.environ, KAFKATW_OPTIONS=args.kafkatw_options)
                proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
                if proc.returncode != 0 or not lines:
                    emit("error", proc.returncode, "exit code", client=client, setting=setting,
                         stderr=proc.stderr[-2000:])
                    continue
                result = json.loads(lines[-1][len("RESULT "):])
                rate = n / result["seconds"]
                extra = {"options": json.loads(args.kafkatw_options)} if client.startswith("kafkatw") and \
                    args.kafkatw_options != "{}" else {}
                emit("produce_records_per_s", round(rate), "records/s", client=client, setting=setting, **extra,
                     records=n, record_size=RECORD_SIZE, seconds=round(result["seconds"], 3),
                     cpu_s=round(result["cpu_s"], 3),
                     records_per_cpu_s=round(n / result["cpu_s"]) if result["cpu_s"] else None)


if __name__ == "__main__":
    main()
