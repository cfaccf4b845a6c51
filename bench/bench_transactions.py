"""
Transactions benchmark: confluent-kafka (librdkafka) against ONE kafkatw broker
started here (its own ZooKeeper too, 127.0.0.1 only); client and broker share
this machine's cores.

Phases, one JSON line per figure (200-byte records, one topic, one partition):

  - idempotent: the idempotent producer without transactions (the baseline),
    acks=all, linger.ms=5; measured again after the transactional phases
    (idempotent_again), so that warm-up shows;
  - txn_100, txn_1000, txn_10000: the same records in transactions of 100,
    1,000 and 10,000 records (begin, produce, commit_transaction), records/s
    and transactions/s;
  - fetch_read_uncommitted, fetch_read_committed: reading everything the
    transactional phases wrote, and as many records again in transactions of
    1,000 of which every other one is aborted, from offset 0 with
    isolation.level read_uncommitted and read_committed (records delivered
    per second: read_committed delivers fewer).

MB is 10**6 bytes of record values.  Every loop is bounded in count and in time.

Usage:
  python bench/bench_transactions.py [--records 200000] [--record-size 200] [--duration-cap-s 60]
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.testing import running_cluster

from _common import emitter, produce_bounded

_SINGLE_BROKER = {"transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
                  "transaction.state.log.num.partitions": "4"}


emit = emitter("transactions")


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def idempotent(bootstrap: str, topic: str, n: int, value: bytes, cap_s: float) -> tuple[int, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "queue.buffering.max.messages": 1000000})
    producer.produce(topic, value, partition=0)  # the producer id and connections, outside the timing
    producer.flush(30)
    start = time.perf_counter()
    sent = produce_bounded(producer, topic, value, n, start + cap_s)
    producer.flush(cap_s)
    return sent, time.perf_counter() - start


def transactional(bootstrap: str, topic: str, n: int, size: int, value: bytes, cap_s: float,
                  transactional_id: str, abort_every: int = 0) -> tuple[int, int, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         "queue.buffering.max.messages": 1000000})
    producer.init_transactions(30)
    start = time.perf_counter()
    deadline = start + cap_s
    sent = transactions = 0
    while sent + size <= n and time.perf_counter() < deadline:
        producer.begin_transaction()
        produce_bounded(producer, topic, value, size, math.inf)
        transactions += 1
        if abort_every and transactions % abort_every == 0:
            producer.flush(60)  # on the broker before the abort (librdkafka purges what it has not sent)
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
            sent += size
    return sent, transactions, time.perf_counter() - start


def fetch_all(bootstrap: str, topic: str, isolation: str, cap_s: float) -> tuple[int, float]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}-{time.monotonic()}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, 0, 0)])
    count = 0
    start = time.perf_counter()
    deadline = start + cap_s
    try:
        while time.perf_counter() < deadline:
            messages = consumer.consume(10000, 1.0)
            done = False
            for m in messages:
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        done = True
                    continue
                count += 1
            if done:
                break
        return count, time.perf_counter() - start
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200000)
    parser.add_argument("--record-size", type=int, default=200)
    parser.add_argument("--duration-cap-s", type=float, default=60.0)
    args = parser.parse_args()
    value = b"x" * args.record_size
    n, cap = args.records, args.duration_cap_s
    with running_cluster(1, overrides=_SINGLE_BROKER) as cluster:
        bootstrap = cluster[0].bootstrap
        create_topic(bootstrap, "bench-idempotent")
        sent, elapsed = idempotent(bootstrap, "bench-idempotent", n, value, cap)
        base = sent / elapsed
        emit("idempotent", round(base), "records/s", records=sent, seconds=round(elapsed, 3),
             mb_s=round(sent * len(value) / elapsed / 1e6, 2))
        create_topic(bootstrap, "bench-txn")
        for size in (100, 1000, 10000):
            sent, transactions, elapsed = transactional(bootstrap, "bench-txn", n, size, value, cap, f"bench-{size}")
            emit(f"txn_{size}", round(sent / elapsed), "records/s", records=sent, transactions=transactions,
                 transactions_per_s=round(transactions / elapsed, 1), seconds=round(elapsed, 3),
                 of_idempotent=round(sent / elapsed / base, 3))
        # every other transaction of 1,000 aborted, so that read_committed has batches to skip
        transactional(bootstrap, "bench-txn", n, 1000, value, cap, "bench-aborts", abort_every=2)
        sent, elapsed = idempotent(bootstrap, "bench-idempotent", n, value, cap)
        emit("idempotent_again", round(sent / elapsed), "records/s", records=sent, seconds=round(elapsed, 3),
             mb_s=round(sent * len(value) / elapsed / 1e6, 2))
        for isolation in ("read_uncommitted", "read_committed"):
            count, elapsed = fetch_all(bootstrap, "bench-txn", isolation, cap)
            emit(f"fetch_{isolation}", round(count / elapsed), "records/s", records=count,
                 seconds=round(elapsed, 3), mb_s=round(count * len(value) / elapsed / 1e6, 2))


if __name__ == "__main__":
    sys.exit(main())
