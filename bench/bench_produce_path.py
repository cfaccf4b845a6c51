"""
The broker's CPU per Produce request, in process: no sockets, no client, no
ZooKeeper process.  A L{KafkaConnection} over a C{StringTransport} is fed
chunks of Produce v9 frames (one 200-byte record each, as librdkafka sends
with C{linger.ms=0}) and appends them to a real log in a temporary directory;
the figure is the process's CPU time per request, best of three passes, so it
is steadier on a loaded machine than bench_broker.py's (which needs the client
there too).

Usage:
  python bench/bench_produce_path.py [--acks 0] [--per-read 50] [--requests 200000]

--per-read is how many requests each C{dataReceived} gets (a read of a busy
connection holds hundreds; 1 is a producer at a low rate).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import struct
import tempfile
import time

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock, StringTransport

from kafkatw.broker.admin import AdminManager
from kafkatw.broker.apis import KafkaApis
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache
from kafkatw.broker.network import KafkaConnection
from kafkatw.broker.replica_manager import ReplicaManager
from kafkatw.config import BrokerConfig, topic_log_config
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.messages import encode_request
from kafkatw.storage.log_manager import LogManager
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.registry import Registry

from _common import emitter

emit = emitter("produce_path")


def _result(d: defer.Deferred):
    out = []
    d.addBoth(out.append)
    return out[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acks", type=int, default=0, choices=(0, 1))
    ap.add_argument("--per-read", type=int, default=50)
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--record-size", type=int, default=200)
    args = ap.parse_args()
    directory = tempfile.mkdtemp(prefix="kafkatw-bench-produce-")
    log_manager = None
    try:
        clock = MemoryReactorClock()
        config = BrokerConfig({"broker.id": 0, "log.dirs": directory})
        zookeeper = FakeZooKeeperClient()
        _result(zookeeper.start())
        registry = Registry(zookeeper)
        metadata = MetadataCache(0)
        metadata.set_brokers({0: BrokerEndpoint(0, "127.0.0.1", 9092)})
        now_ms = lambda: int(time.time() * 1000)  # noqa: E731
        log_manager = LogManager([directory], topic_log_config(config, {}), now_ms=now_ms)
        log_manager.load()
        replica_manager = ReplicaManager(0, log_manager, metadata, clock, lambda t: topic_log_config(config, {}),
                                         write_isr=registry.set_partition_state, reload_state=lambda t, p: None,
                                         now_ms=now_ms)

        def topic_added(meta) -> None:
            for partition, replicas in meta.partitions.items():
                replica_manager.apply_state(meta.name, partition, replicas,
                                            metadata.partition_states.get((meta.name, partition)))

        admin = AdminManager(config, registry, metadata, on_topic=topic_added)
        apis = KafkaApis(config, replica_manager, metadata, admin, clock, now_ms)
        _result(defer.ensureDeferred(admin.create_topic("bench", 1, 1, {0: [0]}, {})))
        connection = KafkaConnection(apis, 100 << 20)
        transport = StringTransport()
        connection.makeConnection(transport)
        value = b"x" * args.record_size
        chunk = b"".join(
            struct.pack(">i", len(frame)) + frame
            for frame in (encode_request(0, 9, i, "rdkafka", {"acks": args.acks, "timeout": 1000, "topic_data": [
                {"name": "bench", "partition_data": [{"index": 0, "records": build_batch([(None, value)])}]}]})
                for i in range(args.per_read)))
        reads = max(1, args.requests // args.per_read)
        gc.collect()
        gc.freeze()  # as the broker does after start-up
        best = None
        for _ in range(3):
            start = time.process_time()
            for _ in range(reads):
                connection.dataReceived(chunk)
                transport.clear()
            elapsed = time.process_time() - start
            best = elapsed if best is None else min(best, elapsed)
        log = log_manager.get("bench", 0)
        assert log.log_end_offset == 3 * reads * args.per_read, log.log_end_offset
        emit("produce_cpu_us_per_request", round(best / (reads * args.per_read) * 1e6, 2), "us",
             acks=args.acks, per_read=args.per_read, requests=reads * args.per_read, record_size=args.record_size)
    finally:
        if log_manager is not None:
            log_manager.close()
        shutil.rmtree(directory, True)


if __name__ == "__main__":
    main()
