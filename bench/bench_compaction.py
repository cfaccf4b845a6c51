"""
Log compaction benchmark: how fast the log cleaner compacts, and what a
cleaning pass costs the produce and fetch traffic running beside it.  One
kafkatw broker started here (its own ZooKeeper, 127.0.0.1 only), driven by
confluent-kafka (librdkafka) with 200-byte record values.  Client and broker
share this machine's cores.

Phases, one JSON line per figure:

  1. A broker with C{log.cleaner.enable=false}: the compacted topic
     C{compacted} (C{segment.bytes} 32 MB) is filled with C{--records} updates
     of C{--keys} keys, the topic C{plain} (C{cleanup.policy=delete}) with
     C{--fetch-records} records.
  2. Baseline, nothing being cleaned: produce keyed records to C{compacted}
     for C{--phase-s} seconds (acks=1, linger.ms=5), then fetch C{plain} from
     offset 0 for C{--phase-s} seconds; records/s and MB/s of each.
  3. The broker is restarted with the cleaner on (C{log.cleaner.threads=1},
     C{log.cleaner.io.max.bytes.per.second} from C{--io-max-bytes-per-s}): its
     first pass over C{compacted} starts at once.  The same produce and fetch
     phases run during it; each phase's figure carries C{overlap}, the share
     of the phase during which the pass was under way.
  4. The pass's figures, from the broker's log line: MB/s of log cleaned
     (Kafka's "MB of log processed" over the whole pass), and its two halves:
     MB/s indexed (the offset-map build over the dirty section) and MB/s
     rewritten; records kept.  The dirty section is the fill plus what the
     baseline produce phase added.

MB is 10**6 bytes.  Every loop is bounded in count and in time.

Usage:
  python bench/bench_compaction.py [--records 1000000] [--keys 10000] [--fetch-records 1000000]
      [--record-size 200] [--phase-s 10] [--io-max-bytes-per-s 0]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.testing import BrokerProcess, ZooKeeperFixture

from _common import emitter, produce_bounded

_CLEANED = re.compile(
    r"^(\S+) \[kafkatw\.storage\.log_cleaner#info\] cleaned compacted-0 \(dirty section \[(\d+), (\d+)\)\): "
    r"([\d.]+) MB of log processed in ([\d.]+) s \(([\d.]+) MB/s\); indexed ([\d.]+) MB in ([\d.]+) s; "
    r"(\d+)/(\d+) records kept, (\d+) bytes written, (\d+) groups")


emit = emitter("compaction")


def create_topic(bootstrap: str, name: str, config: dict, cap_s: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)], operation_timeout=cap_s)[name].result(cap_s)
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline:
        t = admin.list_topics(name, timeout=5).topics.get(name)
        if t is not None and t.error is None and 0 in t.partitions and t.partitions[0].leader >= 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} has no leader after {cap_s} s")


def produce(bootstrap: str, topic: str, n: int, keys: int, value: bytes, cap_s: float,
            start: int = 0) -> tuple[int, float]:
    """Produce up to C{n} records (key C{i % keys}) or for C{cap_s}; @return: (delivered, seconds)."""
    failed = [0]

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed[0] += 1

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "acks": 1, "linger.ms": 5,
                  "queue.buffering.max.messages": 100_000, "queue.buffering.max.kbytes": 65_536,
                  "delivery.report.only.error": True, "on_delivery": on_delivery})
    encoded = [b"key-%08d" % k for k in range(keys)] if keys else None
    started = time.perf_counter()
    sent = produce_bounded(p, topic, value, n, started + cap_s,
                           (lambda i: encoded[(start + i) % keys]) if encoded else None)
    left = p.flush(60)
    elapsed = time.perf_counter() - started
    return sent - failed[0] - left, elapsed


def fetch(bootstrap: str, topic: str, cap_s: float) -> tuple[int, int, float]:
    """Consume from offset 0 for C{cap_s} (or to the end); @return: (records, value bytes, seconds)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic()}",
                  "enable.auto.commit": False, "fetch.queue.backoff.ms": 0, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    count = nbytes = 0
    started = time.perf_counter()
    deadline = started + cap_s
    try:
        while time.perf_counter() < deadline:
            done = False
            for m in c.consume(num_messages=10000, timeout=1.0):
                if m.error() is None:
                    count += 1
                    nbytes += len(m.value())
                elif m.error().code() == -191:  # _PARTITION_EOF
                    done = True
                elif m.error().fatal():
                    raise KafkaException(m.error())
            if done:
                break
    finally:
        c.close()
    return count, nbytes, time.perf_counter() - started


def cleaned_lines(log_path: str) -> list[re.Match]:
    with open(log_path, encoding="utf-8", errors="replace") as f:
        return [m for m in map(_CLEANED.match, f) if m]


def traffic(bootstrap: str, args, value: bytes, label: str, cleaning_until=None) -> dict:
    """The produce and fetch phases; @return: their records/s."""
    result = {}
    for phase in ("produce", "fetch"):
        t0 = time.monotonic()
        if phase == "produce":
            ok, elapsed = produce(bootstrap, "compacted", 10**9, args.keys, value, args.phase_s, start=args.records)
            nbytes = ok * len(value)
        else:
            ok, nbytes, elapsed = fetch(bootstrap, "plain", args.phase_s)
        extra = {}
        if cleaning_until is not None:
            end = cleaning_until()
            t1 = t0 + elapsed
            extra["overlap"] = round(max(0.0, min(t1, end if end is not None else t1) - t0) / elapsed, 3)
        emit(f"{phase}_{label}_records_per_s", round(ok / elapsed), "records/s", records=ok,
             wall_s=round(elapsed, 3), record_size=len(value), **extra)
        emit(f"{phase}_{label}_mb_per_s", round(nbytes / elapsed / 1e6, 1), "MB/s", **extra)
        result[phase] = ok / elapsed
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="updates written to the compacted topic")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--fetch-records", type=int, default=1_000_000, help="records of the fetched topic")
    ap.add_argument("--record-size", type=int, default=200)
    ap.add_argument("--phase-s", type=float, default=10.0)
    ap.add_argument("--io-max-bytes-per-s", type=float, default=0, help="cleaner I/O limit (0: none)")
    args = ap.parse_args()
    value = os.urandom(args.record_size)
    base = tempfile.mkdtemp(prefix="kafkatw-bench-compaction-")
    overrides = {"log.cleaner.enable": "false"}
    try:
        with ZooKeeperFixture(os.path.join(base, "zookeeper")) as connect:
            broker = BrokerProcess(0, connect + "/kafkatw", base, overrides).start()
            try:
                create_topic(broker.bootstrap, "compacted",
                             {"cleanup.policy": "compact", "segment.bytes": str(32 << 20)})
                create_topic(broker.bootstrap, "plain", {})
                t0 = time.perf_counter()
                filled, _ = produce(broker.bootstrap, "compacted", args.records, args.keys, value, 600)
                produce(broker.bootstrap, "plain", args.fetch_records, 0, value, 600)
                emit("fill_s", round(time.perf_counter() - t0, 1), "s", compacted_records=filled,
                     keys=args.keys, plain_records=args.fetch_records)
                traffic(broker.bootstrap, args, value, "baseline")
            finally:
                broker.stop()
            overrides = {"log.cleaner.enable": "true", "log.cleaner.backoff.ms": "1000"}
            if args.io_max_bytes_per_s > 0:
                overrides["log.cleaner.io.max.bytes.per.second"] = str(args.io_max_bytes_per_s)
            broker = BrokerProcess(0, connect + "/kafkatw", base, overrides).start()
            try:
                log_path = broker.log_path
                done_at = []

                def cleaning_until():
                    if not done_at and cleaned_lines(log_path):
                        done_at.append(time.monotonic())
                    return done_at[0] if done_at else None

                traffic(broker.bootstrap, args, value, "during_cleaning", cleaning_until)
                deadline = time.monotonic() + 600
                while not cleaned_lines(log_path) and time.monotonic() < deadline:
                    time.sleep(0.5)
                lines = cleaned_lines(log_path)
                if not lines:
                    print("# no cleaning pass finished within 600 s", file=sys.stderr)
                    sys.exit(1)
                m = lines[0]
                first, end = int(m.group(2)), int(m.group(3))
                processed_mb, seconds, rate = float(m.group(4)), float(m.group(5)), float(m.group(6))
                map_mb, map_s = float(m.group(7)), float(m.group(8))
                emit("compaction_mb_per_s", rate, "MB/s", log_mb=processed_mb, pass_s=seconds,
                     dirty_section=[first, end], io_max_bytes_per_s=args.io_max_bytes_per_s or None,
                     note="MB of log cleaned / whole pass (index + rewrite), Kafka's 'MB of log processed'")
                emit("cleaning_index_mb_per_s", round(map_mb / map_s, 1) if map_s else None, "MB/s",
                     indexed_mb=map_mb, index_s=map_s)
                rewrite_s = seconds - map_s
                emit("cleaning_rewrite_mb_per_s", round(processed_mb / rewrite_s, 1) if rewrite_s > 0 else None,
                     "MB/s", rewrite_s=round(rewrite_s, 3))
                emit("records_kept", int(m.group(9)), "records", records_read=int(m.group(10)),
                     bytes_written=int(m.group(11)), groups=int(m.group(12)))
            finally:
                broker.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
