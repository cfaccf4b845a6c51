"""
An exactly-once consume-transform-produce service: per-client request counts
of a web server's access log (examples/exactly_once/README.md).

It reads access-log lines (as ``kafkatw ship`` sends them: one line per record
value) from an input topic with a broker-coordinated consumer group in
``read_committed`` mode, counts the requests of each client address in every
polled batch, and writes one record per client and batch to the output topic
(key: the client address, value: ``{"client": ..., "requests": n}``).  The
output records and the consumed offsets commit as one transaction
(``send_offsets_to_transaction``), so when the service dies at any moment and
starts again, every input line is counted exactly once in the committed
output: an open transaction of a dead instance is aborted by the coordinator
when the next instance calls ``init_transactions`` with the same
``transactional_id`` (which also fences a zombie), and the group resumes from
the offsets of the last committed transaction.

    python examples/exactly_once/service.py --bootstrap-server 127.0.0.1:9092 \\
        --input access-log --output client-counts

Lines that are not access-log lines are skipped (they count for no client).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time

from kafkatw.client.blocking import BlockingConsumer, BlockingProducer
from kafkatw.errors import ErrorCode, KafkaError

#: the coordinator refused a transaction's offsets: the group moved on since the poll (KIP-447)
REBALANCED = frozenset({ErrorCode.illegal_generation, ErrorCode.unknown_member_id, ErrorCode.rebalance_in_progress,
                        ErrorCode.fenced_instance_id})

#: nginx/Apache common and combined formats: the client address, then two fields, then [time]
ACCESS_LINE = re.compile(rb"^(\S+) \S+ \S+ \[[^\]]+\] \"")


def client_of(line: bytes | None) -> str | None:
    """The client address of an access-log line; None for any other line."""
    match = ACCESS_LINE.match(line or b"")
    return match.group(1).decode("utf-8", "replace") if match else None


def count_clients(values: list[bytes | None]) -> dict[str, int]:
    """Requests per client address among C{values}."""
    counts: collections.Counter[str] = collections.Counter()
    for value in values:
        client = client_of(value)
        if client is not None:
            counts[client] += 1
    return dict(counts)


def rewind(group: BlockingConsumer) -> None:
    """Move every assigned partition back to the group's committed offset (its start without one)."""
    assigned = sorted(group.assignment())
    committed = group.committed(assigned) if assigned else {}
    for tp in assigned:
        if committed.get(tp, -1) >= 0:
            group.seek(tp, committed[tp])
        else:
            group.seek_to_beginning(tp)


def run(args: argparse.Namespace) -> int:
    producer = BlockingProducer(args.bootstrap_server, transactional_id=args.transactional_id, linger_ms=5,
                                timeout_s=120)
    producer.init_transactions()  # fences an older instance and ends its open transaction
    group = BlockingConsumer(args.bootstrap_server, group_id=args.group, auto_offset_reset="earliest",
                             enable_auto_commit=False, isolation_level="read_committed",
                             session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=1000,
                             max_poll_interval_ms=args.rebalance_timeout_ms)
    group.subscribe([args.input])
    print(f"joined {args.group}: {sorted(group.wait_for_assignment())}", flush=True)
    partitions = group.partitions_for(args.input)
    idle_since = time.monotonic()
    transactions = 0
    try:
        while True:
            records = group.poll(500, max_records=args.max_records)
            if not records:
                if len(group.assignment()) < len(partitions):
                    # a killed instance still holds partitions until its session times out
                    idle_since = time.monotonic()
                elif args.exit_when_idle_s and time.monotonic() - idle_since > args.exit_when_idle_s:
                    break
                continue
            idle_since = time.monotonic()
            producer.begin_transaction()
            for client, requests in sorted(count_clients([r.value for r in records]).items()):
                producer.send(args.output, json.dumps({"client": client, "requests": requests}).encode(),
                              key=client.encode())
            offsets = {}
            for record in records:
                offsets[(record.topic, record.partition)] = record.offset + 1
            try:
                producer.send_offsets_to_transaction(offsets, group.group_metadata())
                producer.commit_transaction()
            except KafkaError as e:
                if e.error_code not in REBALANCED:
                    raise
                # the group rebalanced since the poll: this batch is the partitions' new owner's
                # now; drop it and go on from the group's committed offsets
                producer.abort_transaction()
                rewind(group)
                continue
            transactions += 1
    finally:
        print(f"committed {transactions} transactions", flush=True)
        group.close()
        producer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--input", default="access-log")
    parser.add_argument("--output", default="client-counts")
    parser.add_argument("--group", default="client-counts")
    parser.add_argument("--transactional-id", default="client-counts-0")
    parser.add_argument("--max-records", type=int, default=200, help="records per transaction at most")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--rebalance-timeout-ms", type=int, default=10000)
    parser.add_argument("--exit-when-idle-s", type=float, default=0.0,
                        help="exit after this many seconds without input while it owns every partition of the"
                             " input (0: run forever)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
