"""
Broker benchmark: the paper's workload (200-byte records, one topic, one
partition) driven by confluent-kafka (librdkafka) against ONE kafkatw broker
started here (its own ZooKeeper too, 127.0.0.1 only).  Client and broker share
this machine's cores.

Phases, one JSON line per figure:

  - produce: acks=1, linger.ms=5, idempotence off, librdkafka default batching;
  - consume: what was produced, from offset 0 (assign + consume(10000) loop);
  - produce_acks0: one record per request (linger.ms=0, batch.num.messages=1,
    acks=0);
  - the broker process's CPU seconds per phase (/proc/<pid>/stat) and per
    million records;
  - this machine's page-cache write bandwidth and loopback TCP bandwidth,
    measured in the same run, and produce/consume MB/s as fractions of them.

MB is 10**6 bytes of record values (the payload; keys are null).
Every loop is bounded in count and in time.

Usage:
  python bench/bench_broker.py [--records 2000000] [--acks0-records RECORDS/10]
      [--record-size 200] [--duration-cap-s 60] [--py-spy-dir DIR]
      [--phases machine,produce,consume,acks0]

--phases picks what runs (all by default): the machine figures, the acks=1
produce, the consumes (they read what the produce phase wrote, so they need
it), the acks=0 one-record-per-request produce.  For instance
`--phases acks0 --acks0-records 300000` measures only the broker's
per-request cost, quickly.

--py-spy-dir runs `py-spy record -p <broker> -d 10 -f raw` at the start of each
broker phase and leaves <phase>.txt (folded stacks) in DIR.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.testing import running_cluster

from _common import consume_from_start, cpu_seconds, emitter, produce_bounded

emit = emitter("broker")


# -- machine figures -------------------------------------------------------------


def page_cache_write_mb_s(directory: str, total_mb: int = 512, cap_s: float = 30.0) -> float:
    chunk = os.urandom(1 << 20)
    path = os.path.join(directory, "page-cache-write.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    written = 0
    try:
        start = time.perf_counter()
        deadline = start + cap_s
        for _ in range(total_mb):
            written += os.write(fd, chunk)
            if time.perf_counter() > deadline:
                break
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return written / elapsed / 1e6


def loopback_tcp_mb_s(total_mb: int = 2048, cap_s: float = 30.0) -> float:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    chunk = os.urandom(1 << 20)
    stop = threading.Event()

    def send() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            for _ in range(total_mb):
                if stop.is_set():
                    break
                s.sendall(chunk)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    conn, _ = listener.accept()
    listener.close()
    conn.settimeout(10.0)
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    received = 0
    target = total_mb << 20
    start = time.perf_counter()
    deadline = start + cap_s
    try:
        while received < target:
            n = conn.recv_into(view)
            if n == 0:
                break
            received += n
            if time.perf_counter() > deadline:
                break
        elapsed = time.perf_counter() - start
    finally:
        stop.set()
        conn.close()
        sender.join(10.0)
    return received / elapsed / 1e6


# -- broker phases ---------------------------------------------------------------


class Phase:
    """Wall time, broker CPU and client CPU of one phase; optional py-spy."""

    def __init__(self, name: str, broker_pid: int, spy_dir: str | None) -> None:
        self.name = name
        self.pid = broker_pid
        self.spy_dir = spy_dir
        self.spy: subprocess.Popen | None = None

    def __enter__(self) -> "Phase":
        if self.spy_dir:
            out = os.path.join(self.spy_dir, f"{self.name}.txt")
            spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
            self.spy = subprocess.Popen([spy, "record", "-p", str(self.pid), "-d", "10", "-f", "raw",
                                         "-o", out, "--nonblocking"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # let it attach
        self.broker_cpu0 = cpu_seconds(self.pid)
        self.client_cpu0 = cpu_seconds(os.getpid())
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.elapsed = time.perf_counter() - self.t0
        self.broker_cpu = cpu_seconds(self.pid) - self.broker_cpu0
        self.client_cpu = cpu_seconds(os.getpid()) - self.client_cpu0
        if self.spy is not None:
            if self.spy.poll() is None:
                self.spy.send_signal(signal.SIGINT)  # py-spy writes what it has so far
            try:
                self.spy.wait(30)
            except subprocess.TimeoutExpired:
                self.spy.kill()
                self.spy.wait(10)

    def emit_cpu(self, records: int) -> None:
        emit(f"{self.name}_broker_cpu_s", round(self.broker_cpu, 2), "s",
             wall_s=round(self.elapsed, 2), client_cpu_s=round(self.client_cpu, 2))
        per_m = self.broker_cpu / records * 1e6 if records else None
        emit(f"{self.name}_broker_cpu_s_per_million", None if per_m is None else round(per_m, 2), "s/1M records")


def create_topic(bootstrap: str, name: str, cap_s: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                                  operation_timeout=cap_s, request_timeout=cap_s)
    futures[name].result(timeout=cap_s)
    # wait for a leader
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5)
        t = md.topics.get(name)
        if t is not None and t.error is None and 0 in t.partitions and t.partitions[0].leader >= 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} has no leader after {cap_s} s")


def high_watermark(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermark", "enable.auto.commit": False})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def produce(bootstrap: str, topic: str, n: int, value: bytes, cap_s: float, conf: dict) -> tuple[int, int]:
    """Produce up to C{n} records (or until C{cap_s}); returns (attempted, failed deliveries)."""
    failed = [0]
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed[0] += 1
            if len(errors) < 3:
                errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "compression.type": "none",
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "delivery.report.only.error": True, "on_delivery": on_delivery, **conf})
    deadline = time.perf_counter() + cap_s
    sent = produce_bounded(p, topic, value, n, deadline)
    left = p.flush(max(1.0, deadline - time.perf_counter() + 10.0))
    if left:
        failed[0] += left
        errors.append(f"{left} not delivered at flush timeout")
    if errors:
        print(f"# produce errors ({failed[0]}): {errors}", file=sys.stderr)
    return sent, failed[0]


def consume(bootstrap: str, topic: str, n: int, cap_s: float, conf: dict | None = None) -> tuple[int, int]:
    """Consume from offset 0 until C{n} records (or C{cap_s}); returns (records, value bytes)."""
    return consume_from_start(bootstrap, topic, n, cap_s, conf or {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000, help="records to produce (acks=1) and consume")
    ap.add_argument("--acks0-records", type=int, default=None,
                    help="records for the acks=0, batch-of-1 phase (default: --records / 10, i.e. 200,000)")
    ap.add_argument("--record-size", type=int, default=200)
    ap.add_argument("--duration-cap-s", type=float, default=60.0, help="cap per phase")
    ap.add_argument("--py-spy-dir", default=None, help="py-spy record the broker for 10 s at each phase start")
    ap.add_argument("--phases", default="machine,produce,consume,acks0",
                    help="comma-separated subset of machine,produce,consume,acks0 (consume needs produce)")
    args = ap.parse_args()
    phases = set(args.phases.split(","))
    unknown = phases - {"machine", "produce", "consume", "acks0"}
    if unknown or ("consume" in phases and "produce" not in phases):
        ap.error(f"--phases: unknown {sorted(unknown)}" if unknown else "--phases: consume needs produce")
    if args.acks0_records is None:
        args.acks0_records = max(1, args.records // 10)
    if args.py_spy_dir:
        os.makedirs(args.py_spy_dir, exist_ok=True)

    base = tempfile.mkdtemp(prefix="kafkatw-bench-broker-")
    try:
        disk = net = produce_mb_s = consume_mb_s = None
        if "machine" in phases:
            # The first pass on a fresh VM also faults guest memory in (much slower); report the second.
            disk_cold = page_cache_write_mb_s(base)
            disk = page_cache_write_mb_s(base)
            emit("page_cache_write", round(disk, 1), "MB/s", total_mb=512, chunk_bytes=1 << 20,
                 first_pass_mb_s=round(disk_cold, 1))
            net = loopback_tcp_mb_s()
            emit("loopback_tcp", round(net, 1), "MB/s", total_mb=2048, chunk_bytes=1 << 20)

        value = os.urandom(args.record_size)
        with running_cluster(1, tmpdir=base) as [broker]:
            bootstrap, pid = broker.bootstrap, broker.popen.pid
            create_topic(bootstrap, "bench")
            create_topic(bootstrap, "bench-acks0")
            common = {"records": args.records, "record_size": args.record_size, "partitions": 1}

            if "produce" in phases:
                # produce, acks=1, default batching
                with Phase("produce", pid, args.py_spy_dir) as ph:
                    sent, failed = produce(bootstrap, "bench", args.records, value, args.duration_cap_s,
                                           {"acks": 1, "linger.ms": 5})
                ok = sent - failed
                hw = high_watermark(bootstrap, "bench")
                emit("produce_acks1_records_per_s", round(ok / ph.elapsed), "records/s", target=500_000,
                     sent=sent, failed=failed, high_watermark=hw, wall_s=round(ph.elapsed, 3),
                     linger_ms=5, acks=1, **common)
                produce_mb_s = ok * args.record_size / ph.elapsed / 1e6
                emit("produce_acks1_mb_per_s", round(produce_mb_s, 1), "MB/s")
                ph.emit_cpu(ok)

            if "consume" in phases:
                # consume what was produced
                with Phase("consume", pid, args.py_spy_dir) as ph:
                    got, nbytes = consume(bootstrap, "bench", hw, args.duration_cap_s)
                emit("consume_records_per_s", round(got / ph.elapsed), "records/s", target=500_000,
                     consumed=got, expected=hw, wall_s=round(ph.elapsed, 3), **common)
                consume_mb_s = nbytes / ph.elapsed / 1e6
                emit("consume_mb_per_s", round(consume_mb_s, 1), "MB/s")
                ph.emit_cpu(got)

                # Not default settings: librdkafka >= 2.4 waits fetch.queue.backoff.ms (default 1000) before
                # fetching again once its queue holds queued.min.messages (100000), which this Python loop
                # drains in ~40 ms.  With the back-off off, the figure shows what the broker can feed.
                with Phase("consume_no_queue_backoff", pid, args.py_spy_dir) as ph:
                    got2, nbytes2 = consume(bootstrap, "bench", hw, args.duration_cap_s, {"fetch.queue.backoff.ms": 0})
                emit("consume_no_queue_backoff_records_per_s", round(got2 / ph.elapsed), "records/s", target=500_000,
                     consumed=got2, expected=hw, wall_s=round(ph.elapsed, 3), fetch_queue_backoff_ms=0, **common)
                emit("consume_no_queue_backoff_mb_per_s", round(nbytes2 / ph.elapsed / 1e6, 1), "MB/s")
                ph.emit_cpu(got2)

            if "acks0" in phases:
                # produce one record per request, acks=0
                # acks=0: the client is done when it has written; the phase ends when the broker has
                # appended everything (high watermark), polled on another connection.
                watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermark",
                                    "enable.auto.commit": False})
                tp0 = TopicPartition("bench-acks0", 0)
                watcher.get_watermark_offsets(tp0, timeout=10)
                try:
                    with Phase("produce_acks0", pid, args.py_spy_dir) as ph:
                        sent0, failed0 = produce(bootstrap, "bench-acks0", args.acks0_records, value,
                                                 args.duration_cap_s,
                                                 {"acks": 0, "linger.ms": 0, "batch.num.messages": 1})
                        client_done = time.perf_counter() - ph.t0
                        deadline = time.perf_counter() + 30.0
                        hw0 = -1
                        for _ in range(10_000):
                            hw0 = watcher.get_watermark_offsets(tp0, timeout=10)[1]
                            if hw0 >= sent0 - failed0 or time.perf_counter() > deadline:
                                break
                            time.sleep(0.002)
                finally:
                    watcher.close()
                emit("produce_acks0_batch1_records_per_s", round(hw0 / ph.elapsed), "records/s",
                     target=100_000, sent=sent0, failed=failed0, high_watermark=hw0, wall_s=round(ph.elapsed, 3),
                     client_done_s=round(client_done, 3), records=args.acks0_records, record_size=args.record_size,
                     linger_ms=0, batch_num_messages=1, acks=0)
                ph.emit_cpu(hw0)

        if disk and produce_mb_s is not None:
            emit("produce_fraction_of_page_cache_write", round(produce_mb_s / disk, 4), "ratio")
        if net and produce_mb_s is not None:
            emit("produce_fraction_of_loopback_tcp", round(produce_mb_s / net, 4), "ratio")
        if net and consume_mb_s is not None:
            emit("consume_fraction_of_loopback_tcp", round(consume_mb_s / net, 4), "ratio")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
