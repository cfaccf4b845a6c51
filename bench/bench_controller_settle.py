"""
The controller's own work when a broker dies, measured alone: one
L{KafkaController} against a real ZooKeeper, no broker processes.

One topic of C{--partitions} partitions, replication factor 3 over brokers
0, 1 and 2 (leaders spread evenly, every ISR full).  Broker 0 is the
controller; then broker 1 is declared gone (C{brokers_changed({0, 2})}, what
the C{/brokers/ids} watch delivers once ZooKeeper deleted its registration).
A third of the partitions need a new leader and the other two thirds lose
broker 1 from their ISR: one fenced, conditional write each (a ZooKeeper
multi: check C{/controller_epoch}, set the state znode at its zkVersion;
since issue 32 one such multi sets up to C{SETTLE_BATCH_SIZE} state znodes).

Variants (each from the same starting state, a fresh controller epoch):

  - C{plain}: the event alone (L{KafkaController._settle_all});
  - C{feedback}: and every state written notifies the controller back, as
    the controller broker's own watch on that state znode does
    (kafkatw/broker/server.py, C{_partition_state_changed}):
    C{partition_changed((topic, partition))}, or C{topics_changed()} on a
    controller without it (before issue 27's fix, each such event settled
    every partition again).

Before the fix the event queue was a C{DeferredLock}, and the feedback
events, which end without I/O, ran nested in one another when the lock
handed over: past about 120 of them the stack overflowed
(C{RecursionError}, logged as "controller event failed") and the queue
stood still for good (C{wedged}).  Run with C{PYTHONPATH} pointing at a
checkout of another commit to compare it.

Prints, per variant, one JSON line: the seconds from the event to its end
(C{pass_s}: every partition led again / out of the ISR), to an empty event
queue (C{drained_s}; the drain timeout when wedged), the CPU seconds of this
process meanwhile, and the ZooKeeper writes per second.  Usage::

  python bench/bench_controller_settle.py --partitions 4000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

from twisted.internet import defer, task
from twisted.logger import globalLogPublisher

from kafkatw.broker.controller import KafkaController
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.config import BrokerConfig
from kafkatw.testing import ZooKeeperFixture
from kafkatw.zookeeper.bridge import ZooKeeperClient
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import PartitionState

from _common import emitter

emit = emitter("controller_settle")
TOPIC = "settle"
#: every "controller event failed" (its Failure), from the log
FAILURES: list[Any] = []
globalLogPublisher.addObserver(lambda event: FAILURES.append(event["log_failure"])
                               if event.get("log_failure") is not None else None)


async def reset_states(registry: Registry, metadata: MetadataCache, assignment: dict[int, list[int]]) -> None:
    """Every partition led by its first replica with the full ISR, written (200 at a time) and cached."""
    partitions = sorted(assignment)
    for start in range(0, len(partitions), 200):
        chunk = partitions[start:start + 200]
        versions = await defer.gatherResults([
            registry.set_partition_state(TOPIC, p, assignment[p][0], 0, assignment[p]) for p in chunk])
        for p, version in zip(chunk, versions):
            metadata.set_partition_state(TOPIC, p, PartitionState(assignment[p][0], 0, list(assignment[p]), 1,
                                                                  version))


async def drained(reactor: Any, controller: KafkaController, writes: list[int], timeout_s: float) -> bool:
    """
    Wait until the event queue is empty: an event queued now runs, and no
    write happened meanwhile (a notification scheduled by the last writes
    may still be on its way, so look twice).

    @return: C{False} when the queue stood still for C{timeout_s} (wedged).
    """
    quiet = 0
    while quiet < 2:
        before = writes[0]
        await task.deferLater(reactor, 0.05, lambda: None)
        ran: list[bool] = []
        controller.run(lambda: defer.succeed(ran.append(True)))
        deadline = time.monotonic() + timeout_s
        while not ran:
            if time.monotonic() > deadline:
                return False
            await task.deferLater(reactor, 0.01, lambda: None)
        quiet = quiet + 1 if writes[0] == before else 0
    return True


async def one_variant(reactor: Any, client: ZooKeeperClient, registry: Registry, assignment: dict[int, list[int]],
                      variant: str, args: argparse.Namespace) -> dict:
    metadata = MetadataCache(0)
    metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in (0, 1, 2)})
    metadata.set_topic(TopicMetadata(TOPIC, uuid.uuid4(), dict(assignment)))
    await reset_states(registry, metadata, assignment)
    try:
        await client.delete("/controller")
    except Exception:
        pass
    controller = KafkaController(0, BrokerConfig({"broker.id": 0}), registry, metadata, lambda topic: {})
    assert await controller.elect()
    writes = [0]
    original_write = registry.set_partition_state

    def counted(*call: Any, **kwargs: Any) -> defer.Deferred:
        d = original_write(*call, **kwargs)

        def written(version: Any) -> Any:
            writes[0] += 1
            if variant == "feedback":  # the controller broker's own watch on the state znode
                key = (call[0], call[1])
                notify = getattr(controller, "partition_changed", None)
                reactor.callLater(0, lambda: notify(key) if notify is not None else controller.topics_changed())
            return version

        return d.addCallback(written)

    original_batch = getattr(registry, "set_partition_states", None)  # since issue 32: multis of many partitions

    def counted_batch(writes_: list, *call: Any) -> defer.Deferred:
        d = original_batch(writes_, *call)

        def written(versions: Any) -> Any:
            writes[0] += len(writes_)
            if variant == "feedback":
                for w in writes_:
                    reactor.callLater(0, controller.partition_changed, (w.topic, w.partition))
            return versions

        return d.addCallback(written)

    registry.set_partition_state = counted  # type: ignore[method-assign]
    if original_batch is not None:
        registry.set_partition_states = counted_batch  # type: ignore[method-assign]
    cpu = time.process_time()
    started = time.monotonic()
    await controller.brokers_changed({0, 2})
    pass_s = time.monotonic() - started
    failures_before = len(FAILURES)
    wedged = not await drained(reactor, controller, writes, args.drain_timeout_s)
    drained_s = time.monotonic() - started
    cpu_s = time.process_time() - cpu
    registry.set_partition_state = original_write  # type: ignore[method-assign]
    if original_batch is not None:
        registry.set_partition_states = original_batch  # type: ignore[method-assign]
    led = sum(1 for p in assignment if metadata.partition_states[(TOPIC, p)].leader != 1)
    out_of_isr = sum(1 for p in assignment if 1 not in metadata.partition_states[(TOPIC, p)].isr)
    assert led == len(assignment) and out_of_isr == len(assignment), (led, out_of_isr)
    controller.resign()
    return {"pass_s": pass_s, "drained_s": drained_s, "cpu_s": cpu_s, "writes": writes[0],
            "writes_per_s": writes[0] / pass_s, "wedged": wedged,
            "event_failures": len(FAILURES) - failures_before,
            "failure": sorted({type(f.value).__name__ for f in FAILURES[failures_before:]})}


async def run(reactor: Any, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kafkatw-settle-") as base:
        zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"), tick_time_ms=2000)
        connect = zookeeper.start()
        try:
            client = ZooKeeperClient(connect + "/kafkatw", reactor, session_timeout_ms=30000)
            await client.start()
            registry = Registry(client)
            assignment = {p: [(p + i) % 3 for i in range(3)] for p in range(args.partitions)}
            await registry.create_topic(TOPIC, assignment)
            for variant in args.variants.split(","):
                results = []
                for _ in range(args.runs):
                    results.append(await one_variant(reactor, client, registry, assignment, variant, args))
                    if results[-1]["wedged"]:
                        break  # this controller's queue is stuck: the next run would be too
                numbers = [k for k, v in results[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
                summary = {key: round(statistics.median(r[key] for r in results), 3) for key in numbers}
                emit(variant, summary["pass_s"], "s", partitions=args.partitions, runs=len(results),
                     pass_s_min=round(min(r["pass_s"] for r in results), 3),
                     pass_s_max=round(max(r["pass_s"] for r in results), 3),
                     wedged=any(r["wedged"] for r in results),
                     failures=sorted({f for r in results for f in r["failure"]}),
                     load_1min=round(os.getloadavg()[0], 2), **summary)
            await client.stop()
        finally:
            zookeeper.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", default="plain,feedback")
    parser.add_argument("--drain-timeout-s", type=float, default=120,
                        help="how long the event queue may stand still before it counts as wedged")
    args = parser.parse_args()
    task.react(lambda reactor: defer.Deferred.fromCoroutine(run(reactor, args)))


if __name__ == "__main__":
    main()
