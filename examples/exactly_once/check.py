"""
The checker of the exactly-once service (examples/exactly_once/README.md):
counts the requests per client in the input topic itself and sums the
committed output of the service (read with ``isolation_level="read_committed"``);
exit status 0 when they are equal — every input line counted exactly once —
else 1, with the differences.

    python examples/exactly_once/check.py --bootstrap-server 127.0.0.1:9092 \\
        --input access-log --output client-counts
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

from kafkatw.client.blocking import BlockingConsumer

try:
    from service import client_of
except ImportError:  # imported as examples.exactly_once.check
    from .service import client_of


def read_all(bootstrap: str, topic: str, isolation_level: str, timeout_s: float = 60.0) -> list:
    """Every record of C{topic} up to its end offsets (the last stable offsets with read_committed)."""
    consumer = BlockingConsumer(bootstrap, isolation_level=isolation_level, fetch_max_wait_ms=100)
    try:
        tps = [(topic, p) for p in sorted(consumer.partitions_for(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: list = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not read to its end offsets {ends} in {timeout_s} s")
            records.extend(consumer.poll(500))
        return records
    finally:
        consumer.close()


def check(bootstrap: str, input_topic: str, output_topic: str) -> tuple[dict, dict]:
    """C{(expected, counted)}: requests per client in the input, and in the committed output."""
    expected: collections.Counter[str] = collections.Counter()
    for record in read_all(bootstrap, input_topic, "read_committed"):
        client = client_of(record.value)
        if client is not None:
            expected[client] += 1
    counted: collections.Counter[str] = collections.Counter()
    for record in read_all(bootstrap, output_topic, "read_committed"):
        entry = json.loads(record.value)
        counted[entry["client"]] += entry["requests"]
    return dict(expected), dict(counted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--input", default="access-log")
    parser.add_argument("--output", default="client-counts")
    args = parser.parse_args(argv)
    expected, counted = check(args.bootstrap_server, args.input, args.output)
    total = sum(expected.values())
    if expected == counted:
        print(f"exactly once: {total} requests of {len(expected)} clients, each counted once")
        return 0
    for client in sorted(set(expected) | set(counted)):
        if expected.get(client, 0) != counted.get(client, 0):
            print(f"{client}: {expected.get(client, 0)} requests in the input, {counted.get(client, 0)} counted")
    return 1


if __name__ == "__main__":
    sys.exit(main())
