"""
A small blocking Kafka wire-protocol client, for the command line.

One socket per broker, one request in flight per socket, ApiVersions negotiation
(the highest version both sides serve), metadata-driven leader lookup.  It is
deliberately small: the Twisted clients (L{kafkatw.client}) do the real work.

Frames are Kafka's: a 4-byte big-endian size, then the request or response
(L{kafkatw.protocol.messages}).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any, Iterable

from kafkatw.client.connection import CLIENT_VERSIONS as _TWISTED_CLIENT_VERSIONS
from kafkatw.client.connection import common_versions, parse_bootstrap_servers
from kafkatw.errors import ErrorCode, KafkaError, kafka_error, raise_for_error
from kafkatw.protocol.messages import decode_response, encode_request

__all__ = ["WireClient", "CLIENT_VERSIONS", "LATEST_TIMESTAMP", "EARLIEST_TIMESTAMP"]

#: API key -> (min, max) versions this client can speak: those of the Twisted
#: clients (L{kafkatw.client.connection.CLIENT_VERSIONS}) for the APIs it uses.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    key: versions for key, versions in _TWISTED_CLIENT_VERSIONS.items() if key in (0, 1, 2, 3, 18, 19, 20, 22, 32)
}

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

_SIZE = struct.Struct(">i")
_RETRY_CODES = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition,
})


class _Connection:
    """A blocking socket to one broker, with its negotiated API versions."""

    def __init__(self, host: str, port: int, client_id: str, timeout_ms: int) -> None:
        self.host, self.port = host, port
        self._client_id = client_id
        self._timeout_ms = timeout_ms
        self._sock = socket.create_connection((host, port), timeout=timeout_ms / 1000)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_id = 0
        self.versions: dict[int, int] = {}
        self._negotiate()

    def _negotiate(self) -> None:
        response = self.send(18, 3, {"client_software_name": "kafkatw", "client_software_version": "0"})
        if ErrorCode(int(response.error_code)) == ErrorCode.unsupported_version:
            response = self.send(18, 0, {})
        raise_for_error(response.error_code, "ApiVersions")
        self.versions = common_versions(response.api_keys, CLIENT_VERSIONS)

    def version(self, api_key: int) -> int:
        try:
            return self.versions[api_key]
        except KeyError:
            raise kafka_error(ErrorCode.unsupported_version,
                              f"broker {self.host}:{self.port} serves no common version of API {api_key}") from None

    def send(self, api_key: int, version: int, body: Any, expect_response: bool = True, timeout_ms: int | None = None) -> Any:
        self._correlation_id = correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation_id, self._client_id, body)
        self._sock.settimeout((timeout_ms if timeout_ms is not None else self._timeout_ms) / 1000)
        self._sock.sendall(_SIZE.pack(len(frame)) + frame)
        if not expect_response:
            return None
        (size,) = _SIZE.unpack(self._read(4))
        got, response = decode_response(api_key, version, self._read(size))
        if got != correlation_id:
            raise kafka_error(ErrorCode.unknown_server_error,
                              f"correlation id {got} does not match request {correlation_id}")
        return response

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError(f"broker {self.host}:{self.port} closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


class WireClient:
    """
    A blocking client for one cluster.

    @param bootstrap_servers: comma-separated C{host:port} list.
    @param timeout_ms: socket and request timeout (ms).
    @raise KafkaError: from every call, carrying the broker's error code.
    @raise OSError: when no broker can be reached.
    """

    def __init__(self, bootstrap_servers: str, client_id: str = "kafkatw-cli", timeout_ms: int = 30000,
                 retries: int = 5, retry_backoff_ms: int = 200) -> None:
        self._bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self._connections: dict[Any, _Connection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        # (topic, partition) -> leader id
        self._leaders: dict[tuple[str, int], int] = {}
        self._partitions: dict[str, int] = {}

    # --- connections ------------------------------------------------------------

    def _bootstrap_connection(self) -> _Connection:
        for conn in self._connections.values():
            return conn
        error: Exception | None = None
        for host, port in self._bootstrap:
            try:
                conn = _Connection(host, port, self.client_id, self.timeout_ms)
            except OSError as e:
                error = e
                continue
            self._connections[("bootstrap", host, port)] = conn
            return conn
        raise ConnectionError(f"cannot connect to any bootstrap server {self._bootstrap}: {error}")

    def _connection(self, broker_id: int | None) -> _Connection:
        if broker_id is None:
            return self._bootstrap_connection()
        conn = self._connections.get(broker_id)
        if conn is not None:
            return conn
        if broker_id not in self.brokers:
            self.metadata()
        try:
            host, port = self.brokers[broker_id]
        except KeyError:
            raise kafka_error(ErrorCode.broker_not_available, f"broker {broker_id} is not in the metadata") from None
        for key, existing in self._connections.items():
            if (existing.host, existing.port) == (host, port):
                self._connections[broker_id] = existing
                return existing
        conn = self._connections[broker_id] = _Connection(host, port, self.client_id, self.timeout_ms)
        return conn

    def close(self) -> None:
        for conn in set(self._connections.values()):
            conn.close()
        self._connections.clear()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def api_version(self, api_key: int, broker_id: int | None = None) -> int:
        """The version negotiated with C{broker_id} (None: the bootstrap broker) for C{api_key}."""
        return self._connection(broker_id).version(api_key)

    def request(self, api_key: int, body: Any, broker_id: int | None = None, expect_response: bool = True,
                timeout_ms: int | None = None) -> Any:
        """
        Send one request at the highest common version and return the kio response.

        @param body: plain values for L{kafkatw.protocol.messages.build}.
        @param broker_id: the broker to ask (None: any bootstrap broker).
        """
        conn = self._connection(broker_id)
        try:
            return conn.send(api_key, conn.version(api_key), body, expect_response, timeout_ms)
        except (OSError, ConnectionError):
            # drop the broken socket; the caller may retry
            for key in [k for k, c in self._connections.items() if c is conn]:
                del self._connections[key]
            conn.close()
            raise

    # --- metadata ---------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None = None, allow_auto_create: bool = False) -> Any:
        """
        A Metadata request; remembers brokers and partition leaders.

        @param topics: topic names, or None for all topics.
        @return: the kio MetadataResponse.
        """
        names = None if topics is None else list(topics)
        body = {
            "topics": None if names is None else [{"name": t} for t in names],
            "allow_auto_topic_creation": allow_auto_create,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        conn = self._bootstrap_connection()
        if names is None and conn.version(3) == 0:
            body["topics"] = []  # v0: an empty list means all topics
        response = self.request(3, body)
        self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        for topic in response.topics:
            if ErrorCode(int(topic.error_code)) != ErrorCode.none:
                continue
            self._partitions[topic.name] = len(topic.partitions)
            for p in topic.partitions:
                self._leaders[(topic.name, int(p.partition_index))] = int(p.leader_id)
        return response

    def partitions_for(self, topic: str) -> int:
        """
        The number of partitions of C{topic}, retrying while it is being created.

        @raise KafkaError: UNKNOWN_TOPIC_OR_PARTITION after the retries.
        """
        for attempt in range(self.retries + 1):
            response = self.metadata([topic])
            for t in response.topics:
                if t.name != topic:
                    continue
                code = ErrorCode(int(t.error_code))
                if code == ErrorCode.none and t.partitions:
                    return len(t.partitions)
                if code not in _RETRY_CODES and code != ErrorCode.none:
                    raise_for_error(code, f"metadata for topic {topic!r}")
            if attempt < self.retries:
                time.sleep(self.retry_backoff_ms * (attempt + 1) / 1000)
        raise kafka_error(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist")

    def leader_for(self, topic: str, partition: int, refresh: bool = False) -> int:
        """
        The leader broker id of C{topic}/C{partition}, retrying while there is none.

        @raise KafkaError: LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION after the retries.
        """
        key = (topic, partition)
        if not refresh and self._leaders.get(key, -1) >= 0:
            return self._leaders[key]
        code = ErrorCode.unknown_topic_or_partition
        for attempt in range(self.retries + 1):
            response = self.metadata([topic])
            for t in response.topics:
                if t.name != topic:
                    continue
                code = ErrorCode(int(t.error_code))
                if code not in _RETRY_CODES and code != ErrorCode.none:
                    raise_for_error(code, f"metadata for topic {topic!r}")
                for p in t.partitions:
                    if int(p.partition_index) == partition:
                        code = ErrorCode(int(p.error_code))
                        if int(p.leader_id) >= 0 and code == ErrorCode.none:
                            return int(p.leader_id)
                        if code == ErrorCode.none:
                            code = ErrorCode.leader_not_available
            if attempt < self.retries:
                time.sleep(self.retry_backoff_ms * (attempt + 1) / 1000)
        raise kafka_error(code, f"no leader for {topic}-{partition}: {code.name}")

    def _with_leader(self, topic: str, partition: int, call: Any) -> Any:
        """Run C{call(leader_id)}, refreshing the leader on retriable leadership errors."""
        for attempt in range(self.retries + 1):
            leader = self.leader_for(topic, partition, refresh=attempt > 0)
            try:
                return call(leader)
            except KafkaError as e:
                if e.error_code not in _RETRY_CODES or attempt == self.retries:
                    raise
            except (OSError, ConnectionError):
                if attempt == self.retries:
                    raise
            time.sleep(self.retry_backoff_ms * (attempt + 1) / 1000)
        raise AssertionError("unreachable")

    # --- data -------------------------------------------------------------------

    def produce(self, topic: str, partition: int, records: bytes, acks: int = 1, timeout_ms: int = 30000) -> int:
        """
        Produce one or more record batches to C{topic}/C{partition}.

        @param records: RecordBatch v2 bytes (L{kafkatw.protocol.records.encode_batch}).
        @param acks: 0, 1 or -1 (all).  With 0 the broker sends no response.
        @return: the base offset the broker assigned (-1 with acks=0).
        """
        body = {
            "transactional_id": None,
            "acks": acks,
            "timeout": timeout_ms,
            "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
        }

        def call(leader: int) -> int:
            response = self.request(0, body, leader, expect_response=acks != 0,
                                    timeout_ms=self.timeout_ms + timeout_ms)
            if response is None:
                return -1
            for t in response.responses:
                for p in t.partition_responses:
                    raise_for_error(p.error_code, f"produce to {topic}-{partition}", getattr(p, "error_message", None))
                    return int(p.base_offset)
            raise kafka_error(ErrorCode.unknown_server_error, "empty produce response")

        return self._with_leader(topic, partition, call)

    def fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int = 500,
              max_bytes: int = 1 << 20, min_bytes: int = 1) -> tuple[int, bytes]:
        """
        Fetch from C{topic}/C{partition} starting at C{offset}.

        @return: (high watermark, record batch bytes; may end with a partial batch).
        @raise KafkaError: e.g. OFFSET_OUT_OF_RANGE.
        """
        body = {
            "replica_id": -1,
            "max_wait": max_wait_ms,
            "max_wait_ms": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes,
                "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}]}],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

        def call(leader: int) -> tuple[int, bytes]:
            response = self.request(1, body, leader, timeout_ms=self.timeout_ms + max_wait_ms)
            raise_for_error(response.error_code, "fetch")
            for t in response.responses:
                for p in t.partitions:
                    raise_for_error(p.error_code, f"fetch {topic}-{partition} at {offset}")
                    return int(p.high_watermark), bytes(p.records or b"")
            return -1, b""

        return self._with_leader(topic, partition, call)

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> int:
        """
        The offset for C{timestamp} (ms; -1 latest, -2 earliest) of C{topic}/C{partition}.
        """
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{
                "partition_index": partition, "timestamp": timestamp, "current_leader_epoch": -1}]}],
        }

        def call(leader: int) -> int:
            response = self.request(2, body, leader)
            for t in response.topics:
                for p in t.partitions:
                    raise_for_error(p.error_code, f"list offsets of {topic}-{partition}")
                    return int(p.offset)
            raise kafka_error(ErrorCode.unknown_server_error, "empty list offsets response")

        return self._with_leader(topic, partition, call)

    # --- admin ------------------------------------------------------------------

    def _controller(self) -> int | None:
        response = self.metadata([])
        controller = int(getattr(response, "controller_id", -1))
        return controller if controller >= 0 else None

    def create_topics(self, topics: list[dict[str, Any]], timeout_ms: int = 30000,
                      validate_only: bool = False) -> Any:
        """
        CreateTopics, sent to the controller.

        @param topics: dicts with C{name}, C{num_partitions} (-1: broker default),
            C{replication_factor} (-1: broker default) and optional C{configs}
            (a dict of Kafka config names to values).
        @return: the kio CreateTopicsResponse; per-topic errors are the caller's to read.
        """
        body = {
            "topics": [{
                "name": t["name"],
                "num_partitions": t.get("num_partitions", -1),
                "replication_factor": t.get("replication_factor", -1),
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (t.get("configs") or {}).items()],
            } for t in topics],
            "timeout": timeout_ms,
            "timeout_ms": timeout_ms,
            "validate_only": validate_only,
        }
        return self.request(19, body, self._controller(), timeout_ms=self.timeout_ms + timeout_ms)

    def delete_topics(self, names: list[str], timeout_ms: int = 30000) -> Any:
        """DeleteTopics, sent to the controller; returns the kio DeleteTopicsResponse."""
        body = {
            "topics": [{"name": n} for n in names],
            "topic_names": list(names),
            "timeout": timeout_ms,
            "timeout_ms": timeout_ms,
        }
        return self.request(20, body, self._controller(), timeout_ms=self.timeout_ms + timeout_ms)

    def describe_configs(self, resources: list[tuple[int, str]], keys: list[str] | None = None) -> Any:
        """
        DescribeConfigs for C{(resource_type, name)} pairs (2 = topic, 4 = broker).

        @return: the kio DescribeConfigsResponse.
        """
        body = {
            "resources": [{"resource_type": rt, "resource_name": name, "configuration_keys": keys}
                          for rt, name in resources],
            "include_synonyms": False,
            "include_documentation": False,
        }
        return self.request(32, body)

    def fetch_many(self, topic: str, offsets: dict[int, int], max_wait_ms: int = 500,
                   max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20,
                   min_bytes: int = 1) -> dict[int, tuple[ErrorCode, int, bytes]]:
        """
        Fetch several partitions of C{topic}, one Fetch request per leader.

        @param offsets: partition -> fetch offset.
        @return: partition -> (error code, high watermark, record batch bytes).
            Errors are returned, not raised, so that one bad partition does not
            stop the others; leadership errors also refresh the leader cache.
        """
        by_leader: dict[int, list[int]] = {}
        for partition in offsets:
            by_leader.setdefault(self.leader_for(topic, partition), []).append(partition)
        results: dict[int, tuple[ErrorCode, int, bytes]] = {}
        wait = max_wait_ms if len(by_leader) == 1 else max(1, max_wait_ms // len(by_leader))
        for leader, partitions in by_leader.items():
            body = {
                "replica_id": -1, "max_wait": wait, "max_wait_ms": wait, "min_bytes": min_bytes,
                "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{
                    "partition": p, "fetch_offset": offsets[p], "partition_max_bytes": partition_max_bytes,
                    "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}
                    for p in partitions]}],
                "forgotten_topics_data": [], "rack_id": "",
            }
            try:
                response = self.request(1, body, leader, timeout_ms=self.timeout_ms + wait)
            except (OSError, ConnectionError):
                for p in partitions:
                    self._leaders.pop((topic, p), None)
                    results[p] = (ErrorCode.network_exception, -1, b"")
                continue
            raise_for_error(response.error_code, "fetch")
            for t in response.responses:
                for p in t.partitions:
                    code = ErrorCode(int(p.error_code))
                    if code in _RETRY_CODES:
                        self._leaders.pop((topic, int(p.partition_index)), None)
                    results[int(p.partition_index)] = (code, int(p.high_watermark), bytes(p.records or b""))
        return results
