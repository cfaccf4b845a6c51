"""
Per-key state in a compacted topic: the event-sourcing use of log compaction.

Each record of the topic is the whole current state of one entity (key = the
entity's id, value = its state as JSON; a null value, a tombstone, deletes
it).  The topic has C{cleanup.policy=compact}: the broker's log cleaner keeps
at least the last record of every key, so the topic stays about as large as
the state itself however many updates were made, and a new consumer that reads
it from the beginning rebuilds the latest state of every entity.

    python examples/compacted_state/state.py --bootstrap-server 127.0.0.1:9092 demo
    python examples/compacted_state/state.py --bootstrap-server 127.0.0.1:9092 update acct-7 '{"balance": 70}'
    python examples/compacted_state/state.py --bootstrap-server 127.0.0.1:9092 delete acct-7
    python examples/compacted_state/state.py --bootstrap-server 127.0.0.1:9092 rebuild

C{demo} creates the topic (compacted, small segments so that the cleaner has
something to clean soon), writes many balance updates of a few accounts and
closes some of them, waits for the log cleaner, then rebuilds the state with a
new consumer and checks it against what it wrote.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from kafkatw.client.admin import NewTopic
from kafkatw.client.blocking import BlockingAdminClient, BlockingConsumer, BlockingProducer
from kafkatw.errors import TopicAlreadyExistsError

TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "65536",             # small segments: cleanable soon (default 1 GiB)
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "60000",       # tombstones stay readable for a minute after cleaning
}


def create_topic(bootstrap: str, topic: str) -> None:
    """Create the compacted topic (one partition); an existing one is kept."""
    with BlockingAdminClient(bootstrap) as admin:
        error = admin.create_topics([NewTopic(topic, 1, 1, configs=TOPIC_CONFIG)])[topic]
        if error is not None and not isinstance(error, TopicAlreadyExistsError):
            raise SystemExit(f"cannot create {topic}: {error}")


def rebuild(bootstrap: str, topic: str) -> tuple[dict[str, dict], int]:
    """
    Read the topic from the beginning to its current end, keeping the last
    value of each key and forgetting keys whose last record is a tombstone.

    @return: C{(state, records read)}.
    """
    state: dict[str, dict] = {}
    read = 0
    with BlockingConsumer(bootstrap) as consumer:
        tp = (topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        while consumer.position(tp) < end:
            for record in consumer.poll(timeout_ms=1000):
                read += 1
                key = record.key.decode()
                if record.value is None:
                    state.pop(key, None)
                else:
                    state[key] = json.loads(record.value)
    return state, read


def demo(bootstrap: str, topic: str, accounts: int, updates: int, wait_s: float) -> int:
    create_topic(bootstrap, topic)
    rng = random.Random(7)
    expected: dict[str, dict] = {}
    with BlockingProducer(bootstrap) as producer:
        for n in range(updates):
            key = f"acct-{rng.randrange(accounts)}"
            balance = expected.get(key, {"balance": 0})["balance"] + rng.randrange(-50, 100)
            expected[key] = {"balance": balance, "update": n}
            producer.send(topic, json.dumps(expected[key]).encode(), key=key.encode())
        for key in sorted(expected)[:3]:  # close three accounts: tombstones
            producer.send(topic, None, key=key.encode())
            del expected[key]
        producer.flush()
    print(f"wrote {updates} updates of {accounts} accounts and 3 tombstones")
    deadline = time.monotonic() + wait_s
    while True:
        state, read = rebuild(bootstrap, topic)
        if read < updates // 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    print(f"a new consumer read {read} records from the beginning and rebuilt {len(state)} accounts")
    if state != expected:
        print("the rebuilt state differs from the state written", file=sys.stderr)
        return 1
    print("the rebuilt state is the latest state written")
    for key in sorted(state)[:5]:
        print(f"  {key}: {json.dumps(state[key])}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="account-state")
    commands = parser.add_subparsers(dest="command", required=True)
    d = commands.add_parser("demo", help="write updates, wait for compaction, rebuild and check")
    d.add_argument("--accounts", type=int, default=20)
    d.add_argument("--updates", type=int, default=5000)
    d.add_argument("--wait-s", type=float, default=60.0, help="how long to wait for the log cleaner")
    u = commands.add_parser("update", help="set one entity's state")
    u.add_argument("key")
    u.add_argument("json")
    x = commands.add_parser("delete", help="delete one entity (a tombstone)")
    x.add_argument("key")
    commands.add_parser("rebuild", help="print the state rebuilt from the beginning")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.bootstrap_server, args.topic, args.accounts, args.updates, args.wait_s)
    if args.command in ("update", "delete"):
        create_topic(args.bootstrap_server, args.topic)
        value = json.dumps(json.loads(args.json)).encode() if args.command == "update" else None
        with BlockingProducer(args.bootstrap_server) as producer:
            producer.send_and_wait(args.topic, value, key=args.key.encode())
        return 0
    state, read = rebuild(args.bootstrap_server, args.topic)
    print(json.dumps({"records_read": read, "state": state}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
