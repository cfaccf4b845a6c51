"""
Security benchmark: the same workload over each listener of ONE kafkatw broker
started here (its own ZooKeeper, 127.0.0.1 only), in the same run, so that the
rows compare: PLAINTEXT, SSL and SASL_SSL with SCRAM-SHA-512 (a user created
with C{kafkatw configs --zookeeper} before the broker starts, 4096 iterations,
Kafka's default).

Per row, one JSON line per figure:

  - produce: 200-byte records, acks=1, linger.ms=5, confluent-kafka (librdkafka);
  - consume: what was produced, from offset 0 (assign + consume(10000) loop),
    with fetch.queue.backoff.ms=0 (as bench_broker.py's second consume phase);
  - the broker process's CPU seconds per phase and per million records
    (/proc/<pid>/stat): over SSL a fetch cannot use sendfile, the broker reads
    each file region in 256 KiB slices and encrypts them (docs/security.md);
  - connection set-up: TCP connect, TLS handshake (TLS rows), the SASL
    exchange (SASL_SSL: SaslHandshake v1 and the two SaslAuthenticate round
    trips of SCRAM, computed by scramp) and one ApiVersions round trip, from
    Python's socket and ssl modules, median and 99th percentile of
    --connections sequential connections;
  - large fetches: --large-mb of 1 MB records consumed with 50 MB fetches
    (fetch.max.bytes, max.partition.fetch.bytes): MB/s, and the broker's
    resident memory above its level before the phase (VmRSS sampled every
    10 ms), which stays flat when a fetch response is streamed rather than
    copied whole.

The certificates are made by trustme (ECDSA P-256, a one-level CA) in a
temporary directory.  MB is 10**6 bytes of record values.  Every loop is
bounded in count and in time.

Usage:
  python bench/bench_security.py [--records 500000] [--record-size 200]
      [--connections 200] [--duration-cap-s 60]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, NamedTuple

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatw.testing import BrokerProcess, ZooKeeperFixture, find_free_port, make_tls_files

from _common import consume_from_start, cpu_seconds, emitter, produce_bounded

emit = emitter("security")


class Row(NamedTuple):
    """
    One listener to measure: its name, the port, librdkafka's settings, the
    ssl context (TLS rows) and the SCRAM mechanism, user and password (SASL rows).
    """

    protocol: str
    port: int
    conf: dict
    tls: ssl.SSLContext | None
    scram: tuple[str, str, str] | None = None


def produce(bootstrap: str, topic: str, n: int, value: bytes, cap_s: float, conf: dict) -> tuple[int, int]:
    failed = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed[0] += 1

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "compression.type": "none",
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "delivery.report.only.error": True, "on_delivery": on_delivery, "acks": 1, "linger.ms": 5,
                  **conf})
    deadline = time.perf_counter() + cap_s
    sent = produce_bounded(p, topic, value, n, deadline)
    failed[0] += p.flush(max(1.0, deadline - time.perf_counter() + 10.0))
    return sent, failed[0]


def consume(bootstrap: str, topic: str, n: int, cap_s: float, conf: dict) -> tuple[int, int]:
    return consume_from_start(bootstrap, topic, n, cap_s, {"group.id": "bench-security", "fetch.queue.backoff.ms": 0,
                                                           **conf})


# ApiVersions v0, correlation id 1, client id "bench".
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
_API_VERSIONS = struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS


def _request(api_key: int, api_version: int, body: bytes) -> bytes:
    """A size-prefixed request with header v1 (correlation id 1, client id "bench")."""
    frame = struct.pack(">hhih", api_key, api_version, 1, 5) + b"bench" + body
    return struct.pack(">i", len(frame)) + frame


def _response(sock: Any) -> bytes:
    """One response's body (after the size and the correlation id)."""
    def read(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return data

    return read(struct.unpack(">i", read(4))[0])[4:]


def _scram_login(sock: Any, mechanism: str, user: str, password: str) -> None:
    """SaslHandshake v1 and SaslAuthenticate v0 round trips of a SCRAM exchange (KIP-152), client side by scramp."""
    from scramp import ScramClient

    name = mechanism.encode()
    sock.sendall(_request(17, 1, struct.pack(">h", len(name)) + name))
    if struct.unpack(">h", _response(sock)[:2])[0] != 0:
        raise RuntimeError(f"SaslHandshake refused {mechanism}")
    client = ScramClient([mechanism], user, password)

    def authenticate(token: str) -> str:
        data = token.encode()
        sock.sendall(_request(36, 0, struct.pack(">i", len(data)) + data))
        body = _response(sock)
        error, message_length = struct.unpack(">hh", body[:4])
        if error != 0:
            raise RuntimeError(f"SaslAuthenticate failed with error {error}")
        rest = body[4 + max(message_length, 0):]
        return rest[4:4 + struct.unpack(">i", rest[:4])[0]].decode()

    client.set_server_first(authenticate(client.get_client_first()))
    client.set_server_final(authenticate(client.get_client_final()))


def connect_once(row: Row) -> float:
    """
    Seconds from connect() to an ApiVersions response: the TLS handshake
    (TLS rows) and the SCRAM exchange (SASL rows) included.
    """
    started = time.perf_counter()
    raw = socket.create_connection(("127.0.0.1", row.port), timeout=10)
    sock: Any = row.tls.wrap_socket(raw, server_hostname="localhost") if row.tls is not None else raw
    try:
        if row.scram is not None:
            _scram_login(sock, *row.scram)
        sock.sendall(_API_VERSIONS)
        _response(sock)
        return time.perf_counter() - started
    finally:
        sock.close()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PeakRSS:
    """The peak VmRSS of a process while the block runs, sampled every 10 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = self.peak = rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> "PeakRSS":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--record-size", type=int, default=200)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--duration-cap-s", type=float, default=60.0)
    ap.add_argument("--large-mb", type=int, default=200, help="MB of 1 MB records for the large-fetch phase")
    args = ap.parse_args()

    base = tempfile.mkdtemp(prefix="kafkatw-bench-security-")
    zookeeper = ZooKeeperFixture(os.path.join(base, "zookeeper"))
    broker = None
    try:
        files = make_tls_files(os.path.join(base, "certs"))
        connect = zookeeper.start() + "/kafkatw"
        user, password = "bench", "bench-secret"
        created = subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "configs", "--zookeeper", connect,
                                  "--alter", "--add-config", f"SCRAM-SHA-512=[iterations=4096,password={password}]",
                                  "--entity-type", "users", "--entity-name", user], capture_output=True, text=True)
        if created.returncode != 0:
            raise SystemExit(f"creating the SCRAM user failed: {created.stderr.strip()}")
        plain, tls, sasl_ssl = find_free_port(), find_free_port(), find_free_port()
        broker = BrokerProcess(0, connect, base, port=plain, overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_SSL://127.0.0.1:{sasl_ssl}",
            "ssl.keystore.location": files.server, "ssl.truststore.location": files.ca,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        }).start()
        context = ssl.create_default_context(cafile=files.ca)
        rows = [
            Row("PLAINTEXT", plain, {}, None),
            Row("SSL", tls, {"security.protocol": "SSL", "ssl.ca.location": files.ca}, context),
            Row("SASL_SSL", sasl_ssl, {"security.protocol": "SASL_SSL", "ssl.ca.location": files.ca,
                                       "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                                       "sasl.password": password}, context, ("SCRAM-SHA-512", user, password)),
        ]
        pid = broker.popen.pid
        value = os.urandom(args.record_size)
        for row in rows:
            bootstrap = f"localhost:{row.port}"
            topic = f"bench-{row.protocol.lower()}"
            admin = AdminClient({"bootstrap.servers": bootstrap, **row.conf})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            admin = None  # its connections close before the broker stops
            common = {"protocol": row.protocol, "records": args.records, "record_size": args.record_size}

            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            sent, failed = produce(bootstrap, topic, args.records, value, args.duration_cap_s, row.conf)
            elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
            ok = sent - failed
            emit("produce_records_per_s", round(ok / elapsed), "records/s", sent=sent, failed=failed,
                 wall_s=round(elapsed, 3), acks=1, linger_ms=5, **common)
            emit("produce_mb_per_s", round(ok * args.record_size / elapsed / 1e6, 1), "MB/s", **common)
            emit("produce_broker_cpu_s_per_million", round(cpu / max(ok, 1) * 1e6, 2), "s", cpu_s=round(cpu, 2),
                 **common)

            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            got, nbytes = consume(bootstrap, topic, ok, args.duration_cap_s, row.conf)
            elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
            emit("consume_records_per_s", round(got / elapsed), "records/s", consumed=got, expected=ok,
                 wall_s=round(elapsed, 3), **common)
            emit("consume_mb_per_s", round(nbytes / elapsed / 1e6, 1), "MB/s", **common)
            emit("consume_broker_cpu_s_per_million", round(cpu / max(got, 1) * 1e6, 2), "s", cpu_s=round(cpu, 2),
                 **common)

            times = sorted(connect_once(row) for _ in range(args.connections))
            includes = {"PLAINTEXT": "connect+ApiVersions", "SSL": "connect+TLS+ApiVersions",
                        "SASL_SSL": "connect+TLS+SCRAM-SHA-512+ApiVersions"}[row.protocol]
            emit("connection_setup_ms_median", round(statistics.median(times) * 1000, 2), "ms",
                 p99_ms=round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 2),
                 connections=len(times), includes=includes, protocol=row.protocol)

            large = f"{topic}-large"
            admin = AdminClient({"bootstrap.servers": bootstrap, **row.conf})
            admin.create_topics([NewTopic(large, 1, 1, config={"max.message.bytes": str(2 << 20)})])[large].result(30)
            admin = None
            big = os.urandom(1 << 20)
            sent, failed = produce(bootstrap, large, args.large_mb, big, args.duration_cap_s,
                                   {**row.conf, "message.max.bytes": 2 << 20})
            fetch_conf = {**row.conf, "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 50 << 20,
                          "receive.message.max.bytes": 60 << 20}
            t0 = time.perf_counter()
            with PeakRSS(pid) as memory:
                got, nbytes = consume(bootstrap, large, sent - failed, args.duration_cap_s, fetch_conf)
            elapsed = time.perf_counter() - t0
            emit("large_fetch_mb_per_s", round(nbytes / elapsed / 1e6, 1), "MB/s", consumed=got,
                 record_bytes=len(big), fetch_max_bytes=50 << 20, protocol=row.protocol)
            emit("large_fetch_broker_rss_growth_mb", round(memory.peak - memory.before, 1), "MiB",
                 rss_before_mib=round(memory.before, 1), protocol=row.protocol)
    finally:
        if broker is not None:
            broker.stop()
        zookeeper.stop()
        shutil.rmtree(base, True)


if __name__ == "__main__":
    sys.exit(main())
