"""
The web console: a view of the cluster (read-only unless admin mode is on) served by the broker at
C{http://127.0.0.1:<metrics.port>/console/} (docs/operations.md, "Health,
lag and the console").

Static files (one HTML page, its script and stylesheet, shipped as package
data in C{kafkatw/web/static/}; no CDN, nothing fetched from the network)
draw pages from JSON answered under C{/console/api/}:

    overview                     brokers (each with its counters), controller, version, health, partition
                                 counts, and the cluster's counters: the sum of every broker's
    broker?id=N                  one broker: its counters, the partitions it leads and follows
    topics                       every topic: partitions, replication, size on this broker's disk
    topic?name=T                 its id (as Kafka's tools print it), partitions (leader, replicas, ISR,
                                 the leader's offsets, size here) and configs
    messages?topic=T&partition=P&offset=O | &timestamp=MS [&limit=N]
                                 records of any partition (key, value, headers, timestamp)
    groups                       consumer groups of both kinds with their lag
    group?id=G                   its members, assignments, lag per partition and lag over time

Every answer is computed from what the broker holds in memory, a log read of
at most L{MAX_READ_BYTES}, ZooKeeper reads for a group's registrations, or (a
group of Kafka clients coordinated by another broker) one DescribeGroups to
its coordinator.  The counters (records and bytes in, bytes out) are every
live broker's: this broker's from memory, the others' from their own
C{/metrics} (L{kafkatw.web.cluster_metrics}), so the rates are the
cluster's.  The message browser reads a partition this broker leads from its
log (up to the high watermark) and any other as a client would: ListOffsets
and a Fetch to its leader.

Read-only unless C{metrics.console.admin.enable} is set: then four JSON
endpoints under C{/console/api/admin/} change the cluster (L{ADMIN_ACTIONS}),
through an admin client and a producer of this broker to its own
inter-broker listener (L{kafkatw.web.cluster_admin}), and the pages show
their forms.  They answer only C{POST} requests carrying the header
C{X-Kafkatw-Console: 1} (L{CSRF_HEADER}): a cross-site form cannot set a
custom header and a cross-site C{fetch} with one needs a CORS preflight the
console never grants, so another site cannot make a logged-in browser change
the cluster.  When admin mode is off they answer 403.  When an authorizer is configured
(C{authorizer.class.name}), the console asks for HTTP basic authentication
against the users of the broker's SASL listener (L{kafkatw.web.auth}) and
shows each principal only what the ACLs let it see: topics it may Describe
(their configs with DescribeConfigs, their records with Read) and groups it
may Describe; without a SASL PLAIN or SCRAM listener it is not served at all
(L{console_refusal}).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import uuid
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from twisted.web.static import File

from .. import __version__
from ..errors import ErrorCode, KafkaError
from ..protocol.consumer_protocol import decode_assignment
from ..protocol.records import decode_batches
from ..security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..zookeeper.bridge import NoNodeError
from ..zookeeper.zk_data import group_path
from .health import readiness_problems

__all__ = ["ADMIN_ACTIONS", "CSRF_HEADER", "ConsoleResource", "console_refusal", "format_topic_id", "read_records",
           "record_rows", "render_value", "STATIC_DIR"]

_log = Logger()

#: The console's page, script and stylesheet (package data).
STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
#: Most bytes of log the message browser reads for one page.
MAX_READ_BYTES = 1024 * 1024
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: Most records on one page of the message browser.
MAX_RECORDS = 500
#: The header (and its value) every admin request must carry: the console's guard against cross-site requests.
CSRF_HEADER = (b"x-kafkatw-console", b"1")
#: The admin endpoints (C{POST /console/api/admin/<name>}, JSON bodies).
ADMIN_ACTIONS = ("create-topic", "delete-topic", "produce", "delete-group")
#: Largest JSON body of an admin request (bytes).
MAX_ADMIN_BODY = 1024 * 1024


def console_refusal(config: Any, sasl_listener: str | None = None) -> str | None:
    """
    Why the console must not be served with C{config}, or C{None}.

    With an authorizer configured, the cluster's data is protected per
    principal: the console then authenticates its users against the SASL
    listener C{sasl_listener}, and stays off when there is none rather than
    show everything to whoever reaches the HTTP port.
    """
    if not config["metrics.console.enable"]:
        return "metrics.console.enable=false"
    if config["authorizer.class.name"] and sasl_listener is None:
        return ("an authorizer is configured (authorizer.class.name) and no listener has SASL PLAIN or SCRAM"
                " users for the console's HTTP basic authentication; it would show every topic and record to"
                " anyone reaching the metrics port")
    return None


def format_topic_id(topic_id: uuid.UUID | None) -> str:
    """
    A topic id as Kafka's tools print it (C{kafka-topics --describe}'s
    C{TopicId:}): Kafka's C{Uuid.toString}, the URL-safe base64 of the 16
    bytes without padding (22 characters); the zero id for none.
    """
    return base64.urlsafe_b64encode((topic_id or uuid.UUID(int=0)).bytes).decode("ascii").rstrip("=")


def render_value(data: bytes | None) -> dict:
    """
    A key or value for the browser: C{{"text": ...}} for UTF-8,
    C{{"json": ...}} for UTF-8 that parses as a JSON object or array,
    C{{"hex": ...}} otherwise (not UTF-8, or control characters other than
    tab and line breaks), C{{"null": true}} for C{None}.
    """
    if data is None:
        return {"null": True}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or _CONTROL.search(text):
        return {"hex": binascii.hexlify(data).decode("ascii"), "size": len(data)}
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            return {"json": json.loads(text), "size": len(data)}
        except ValueError:
            pass
    return {"text": text, "size": len(data)}


def read_records(log: Any, offset: int, limit: int) -> list[dict]:
    """
    Up to C{limit} records of C{log} (a L{kafkatw.storage.log.PartitionLog})
    from C{offset}, below its high watermark, control batches skipped.

    @raise kafkatw.errors.OffsetOutOfRangeError: C{offset} outside the log.
    """
    offset = max(offset, log.log_start_offset)
    regions = log.read(offset, MAX_READ_BYTES, max_offset=log.high_watermark)
    records: list[dict] = []
    for region in regions:
        if record_rows(os.pread(region.fileno, region.length, region.position), offset, limit, records):
            break
    return records


def record_rows(data: bytes, offset: int, limit: int, into: list[dict], below: int | None = None) -> bool:
    """
    Append to C{into} the records of the complete record batches in C{data}
    (a log's bytes or a Fetch response's C{records}) from C{offset} and below
    C{below}, as the message browser shows them, control batches skipped.

    @return: whether C{into} holds C{limit} records.
    """
    for batch in decode_batches(data, verify_crc=False):
        if batch.is_control:
            continue
        for record in batch.records:
            if record.offset < offset or (below is not None and record.offset >= below):
                continue
            into.append({
                "offset": record.offset, "timestamp_ms": record.timestamp_ms,
                "timestamp_type": "LogAppendTime" if batch.timestamp_type else "CreateTime",
                "key": render_value(record.key), "value": render_value(record.value),
                "headers": [{"key": k, "value": render_value(v)} for k, v in record.headers],
            })
            if len(into) >= limit:
                return True
    return False


def _arg(request: Any, name: str, default: str | None = None) -> str | None:
    values = request.args.get(name.encode())
    return values[0].decode("utf-8") if values else default


class _BadRequest(Exception):
    pass


def _answer_json(request: Any, d: defer.Deferred, what: str) -> Any:
    """
    Write what C{d} fires with as the JSON answer of C{request}: a failure
    is C{{"error": ...}} with 403 (L{_Forbidden}), 400 (a bad request or
    Kafka's error, named) or 500 (logged); the request is finished unless the
    client has gone (learnt from C{notifyFinish}, Twisted's public API).

    @return: C{NOT_DONE_YET}, for C{render_*}.
    """
    gone: list[bool] = []
    request.notifyFinish().addErrback(lambda _: gone.append(True))

    def write(body: Any) -> None:
        if not gone:
            request.write(json.dumps(body, separators=(",", ":"), default=str).encode("utf-8"))

    def failed(failure: Any) -> None:
        if failure.check(_Forbidden):
            request.setResponseCode(403)
            write({"error": failure.getErrorMessage()})
        elif failure.check(_BadRequest, KafkaError, ValueError):
            request.setResponseCode(400)
            error = failure.value
            message = failure.getErrorMessage()
            code = getattr(error, "error_code", None)
            if code is not None and isinstance(error, KafkaError):
                message = f"{ErrorCode(int(code)).name.upper()}: {message}"
            write({"error": message})
        else:
            _log.failure("console {what} {path} failed", failure, what=what, path=getattr(request, "path", b""))
            request.setResponseCode(500)
            write({"error": "internal error (see the broker's log)"})

    def finish(_: Any) -> None:
        if not gone and not request.finished:
            request.finish()

    d.addCallbacks(write, failed).addBoth(finish)
    return NOT_DONE_YET


class _ApiResource(Resource):
    """C{/console/api/<name>}: JSON from the L{ConsoleResource}'s C{api_<name>} method."""

    isLeaf = True

    def __init__(self, handler: Callable[[Any], Any]) -> None:
        super().__init__()
        self.handler = handler

    def render_GET(self, request: Any) -> Any:
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        return _answer_json(request, defer.maybeDeferred(self.handler, request), "request")


class _Forbidden(Exception):
    pass


class _AdminResource(Resource):
    """
    C{POST /console/api/admin/<name>}: a JSON object in, C{{"ok": true, ...}}
    or C{{"error": ...}} out (403 admin mode off, cross-site guard or ACL;
    400 bad request or Kafka's error).
    """

    isLeaf = True

    def __init__(self, console: "ConsoleResource", handler: Callable[[Any, dict], Any]) -> None:
        super().__init__()
        self.console = console
        self.handler = handler

    def render_GET(self, request: Any) -> bytes:
        request.setResponseCode(405)
        request.setHeader(b"allow", b"POST")
        request.setHeader(b"content-type", b"application/json")
        return b'{"error":"POST only"}'

    def render_POST(self, request: Any) -> Any:
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")

        def refuse(code: int, message: str) -> bytes:
            request.setResponseCode(code)
            return json.dumps({"error": message}).encode("utf-8")

        if not self.console.admin:
            return refuse(403, "the console is read-only (metrics.console.admin.enable=false)")
        if request.getHeader(CSRF_HEADER[0].decode()) != CSRF_HEADER[1].decode():
            return refuse(403, "admin requests need the header X-Kafkatw-Console: 1 (cross-site request guard)")
        try:
            raw = request.content.read(MAX_ADMIN_BODY + 1) if request.content is not None else b""
            if len(raw) > MAX_ADMIN_BODY:
                raise ValueError("request body too large")
            body = json.loads(raw.decode("utf-8") or "{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as e:
            return refuse(400, f"bad request: {e}")
        return _answer_json(request, defer.maybeDeferred(self.handler, request, body), "admin request")


def _kafka_result(what: str, error: KafkaError | None) -> None:
    """Raise a L{_BadRequest} naming Kafka's error unless C{error} (an admin client's result) is C{None}."""
    if error is not None:
        _kafka_code(what, error.error_code, getattr(error, "error_message", None))


def _kafka_code(what: str, code: Any, message: str | None) -> None:
    """Raise a L{_BadRequest} naming Kafka's error C{code} unless it is none."""
    code = ErrorCode(int(code))
    if code != ErrorCode.none:
        raise _BadRequest(f"{what} failed: {code.name.upper()}" + (f" ({message})" if message else ""))


def _text(body: dict, name: str, required: bool = True) -> str | None:
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise _BadRequest(f"{name} is required")
        return None
    if not isinstance(value, (str, int)):
        raise _BadRequest(f"{name} must be a string")
    return str(value)


def _integer(body: dict, name: str, default: int) -> int:
    value = body.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _BadRequest(f"{name} must be an integer") from None


class ConsoleResource(Resource):
    """
    C{/console/}: the static page and its JSON API over C{server} (a
    L{kafkatw.broker.server.KafkaServer}; the API methods read its
    C{metadata}, C{log_manager}, C{replica_manager}, C{apis}, C{lag_monitor}).
    """

    def __init__(self, server: Any, principal: str | None = None, admin: Callable[[], Any] | None = None,
                 producer: Callable[[], Any] | None = None, counters: Callable[[], Any] | None = None) -> None:
        """
        @param admin: returns the L{kafkatw.client.admin.AdminClient} of the
            admin actions and of the message browser's reads from other
            brokers (default: L{kafkatw.web.cluster_admin}).
        @param producer: returns the L{kafkatw.client.producer.Producer}
            of the produce action (default: L{kafkatw.web.cluster_producer}).
        @param counters: returns the
            L{kafkatw.web.cluster_metrics.ClusterCounters} of the cluster's
            rates (default: L{kafkatw.web.cluster_counters}).
        """
        super().__init__()
        self.broker = server
        #: C{User:<name>} when the console authenticates (an authorizer is configured), else C{None}.
        self.principal = principal
        #: Whether the admin actions are on (C{metrics.console.admin.enable}).
        self.admin = bool(server.config["metrics.console.admin.enable"])
        if admin is None or producer is None or counters is None:
            from .cluster import cluster_admin, cluster_counters, cluster_producer

            admin = admin or (lambda: cluster_admin(server))
            producer = producer or (lambda: cluster_producer(server))
            counters = counters or (lambda: cluster_counters(server))
        self._admin_client = admin
        self._producer = producer
        self._cluster_counters = counters
        api = Resource()
        for name in ("overview", "broker", "topics", "topic", "messages", "groups", "group"):
            api.putChild(name.encode(), _ApiResource(getattr(self, f"api_{name}")))
        admin_api = Resource()
        for name in ADMIN_ACTIONS:
            admin_api.putChild(name.encode(), _AdminResource(self, getattr(self, "admin_" + name.replace("-", "_"))))
        api.putChild(b"admin", admin_api)
        self.putChild(b"api", api)
        self.putChild(b"static", File(STATIC_DIR))
        self.putChild(b"", File(os.path.join(STATIC_DIR, "index.html")))

    # --- what the principal may see ------------------------------------------------

    def _may(self, request: Any, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether the console's principal may do C{operation} on the resource (always, without authorizer)."""
        if self.principal is None:
            return True
        apis = self.broker.apis
        authorizer = None if apis is None else apis.authorizer
        if authorizer is None:
            return False  # not serving yet
        return authorizer.authorize(self.principal, request.getClientAddress().host, operation, resource_type, name)

    def _topics(self, request: Any) -> dict[str, Any]:
        """name -> TopicMetadata of the topics the principal may Describe."""
        return {name: meta for name, meta in list(self.broker.metadata.topics.items())
                if self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, name)}

    # --- the JSON API ------------------------------------------------------------

    @staticmethod
    def _visible(reading: dict, visible: dict[str, Any]) -> dict:
        """A broker's counters (L{kafkatw.web.cluster_metrics.parse_counters}) with the C{visible} topics only."""
        return {**reading, "topics": {t: v for t, v in reading["topics"].items() if t in visible}}

    async def _readings(self, visible: dict[str, Any]) -> dict[int, dict]:
        """broker id -> its counters (C{visible} topics only) or C{{"error": why}}."""
        readings = await self._cluster_counters().read()
        return {b: r if "error" in r else self._visible(r, visible) for b, r in readings.items()}

    def _partition_counts(self, visible: dict[str, Any]) -> tuple[int, int, int]:
        metadata = self.broker.metadata
        total = under = offline = 0
        for name, meta in visible.items():
            for p, replicas in meta.partitions.items():
                total += 1
                if metadata.leader(name, p) < 0:
                    offline += 1
                elif len(metadata.isr(name, p)) < len(replicas):
                    under += 1
        return total, under, offline

    def _broker_row(self, broker: Any, reading: dict | None) -> dict:
        metadata = self.broker.metadata
        leads = replicas = 0
        for name, meta in list(metadata.topics.items()):
            for p, assigned in meta.partitions.items():
                replicas += broker.broker_id in assigned
                leads += metadata.leader(name, p) == broker.broker_id
        reading = reading or {"error": "not read"}
        return {"id": broker.broker_id, "host": broker.host, "port": broker.port, "rack": broker.rack,
                "endpoints": [f"{n}://{h}:{p}" for n, h, p in broker.endpoints],
                "controller": broker.broker_id == metadata.controller_id, "leader_count": leads,
                "partition_count": replicas, "counters": None if "error" in reading else reading,
                "error": reading.get("error")}

    async def _overview(self, request: Any) -> dict:
        from .cluster_metrics import add_counters

        server = self.broker
        metadata = server.metadata
        visible = self._topics(request)
        total, under, offline = self._partition_counts(visible)
        problems = readiness_problems(server)
        readings = await self._readings(visible)
        brokers = [self._broker_row(b, readings.get(b.broker_id))
                   for b in sorted(metadata.brokers.values(), key=lambda b: b.broker_id)]
        return {
            "cluster_id": metadata.cluster_id, "version": __version__, "broker_id": server.broker_id,
            "controller_id": metadata.controller_id, "brokers": brokers,
            "ready": not problems, "problems": problems,
            "topics": len(visible), "partitions": total,
            "under_replicated_partitions": under, "offline_partitions": offline,
            "counters": add_counters([b["counters"] for b in brokers if b["counters"] is not None]),
            "time_ms": server.milliseconds(), "principal": self.principal, "admin": self.admin,
        }

    def api_overview(self, request: Any) -> defer.Deferred:
        """
        The cluster: its brokers (each with its counters, read from its own
        C{/metrics}, or the error that kept them from being read), the
        partition counts, and C{counters}: the sum of the brokers' counters
        (L{kafkatw.web.cluster_metrics}).
        """
        return defer.Deferred.fromCoroutine(self._overview(request))

    async def _broker_page(self, request: Any) -> dict:
        metadata = self.broker.metadata
        try:
            broker_id = int(_arg(request, "id", "") or "")
        except ValueError:
            raise _BadRequest("id must be a broker id") from None
        broker = metadata.brokers.get(broker_id)
        if broker is None:
            raise _BadRequest(f"broker {broker_id} is not registered (not in /brokers/ids)")
        visible = self._topics(request)
        readings = await self._readings(visible)
        partitions = []
        for name, meta in sorted(visible.items()):
            for p, replicas in sorted(meta.partitions.items()):
                if broker_id in replicas:
                    leader, isr = metadata.leader(name, p), metadata.isr(name, p)
                    partitions.append({"topic": name, "partition": p, "leader": leader, "replicas": list(replicas),
                                       "isr": isr, "role": "leader" if leader == broker_id else "follower",
                                       "in_sync": broker_id in isr})
        return {**self._broker_row(broker, readings.get(broker_id)), "partitions": partitions,
                "served_by": self.broker.broker_id, "time_ms": self.broker.milliseconds()}

    def api_broker(self, request: Any) -> defer.Deferred:
        """C{broker?id=N}: one broker, its counters and the partitions it has a replica of."""
        return defer.Deferred.fromCoroutine(self._broker_page(request))

    def _local_size(self, topic: str, partition: int) -> int | None:
        log_manager = self.broker.log_manager
        log = log_manager.get(topic, partition) if log_manager is not None else None
        return None if log is None else log.size_bytes

    def api_topics(self, request: Any) -> dict:
        metadata = self.broker.metadata
        visible = self._topics(request)
        topics = []
        for name, meta in sorted(visible.items()):
            sizes = [self._local_size(name, p) for p in meta.partitions]
            topics.append({
                "name": name, "partitions": len(meta.partitions),
                "replication_factor": max((len(r) for r in meta.partitions.values()), default=0),
                "under_replicated": sum(1 for p, r in meta.partitions.items()
                                        if metadata.leader(name, p) >= 0 and len(metadata.isr(name, p)) < len(r)),
                "offline": sum(1 for p in meta.partitions if metadata.leader(name, p) < 0),
                "size_bytes": sum(s for s in sizes if s is not None),
            })
        return {"topics": topics, "broker_id": self.broker.broker_id, "principal": self.principal,
                "time_ms": self.broker.milliseconds()}

    async def _topic(self, request: Any) -> dict:
        name = _arg(request, "name")
        metadata = self.broker.metadata
        meta = metadata.topics.get(name or "")
        if meta is None or not self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, name or ""):
            raise _BadRequest(f"unknown topic {name!r}")
        partitions = []
        log_manager = self.broker.log_manager
        elsewhere = []  # partitions led by another broker: their offsets as a client learns them
        for p, replicas in sorted(meta.partitions.items()):
            log = log_manager.get(name, p) if log_manager is not None else None
            leader = metadata.leader(name, p)
            led = log is not None and leader == self.broker.broker_id
            if not led and leader >= 0:
                elsewhere.append((name, p))
            partitions.append({
                "partition": p, "leader": leader, "replicas": list(replicas), "isr": metadata.isr(name, p),
                "log_start_offset": log.log_start_offset if led else None,
                "high_watermark": log.high_watermark if led else None,
                "log_end_offset": log.log_end_offset if led else None,
                "size_bytes": None if log is None else log.size_bytes,
                "segments": None if log is None else len(log.segments),
            })
        offsets_error = None
        if elsewhere:
            from ..client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

            try:
                admin = self._admin_client()
                starts = await admin.list_offsets({tp: EARLIEST_TIMESTAMP for tp in elsewhere})
                ends = await admin.list_offsets({tp: LATEST_TIMESTAMP for tp in elsewhere})
            except Exception as e:
                offsets_error = f"the leaders' offsets could not be read: {e}"
            else:
                for row in partitions:
                    tp = (name, row["partition"])
                    if tp in starts and tp in ends:
                        row["log_start_offset"], row["high_watermark"] = starts[tp].offset, ends[tp].offset
        configs = None
        if self._may(request, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
            effective = self.broker._topic_config(name)
            configs = [{"name": k, "value": str(v), "override": k in meta.config}
                       for k, v in sorted(effective.items())]
        return {"name": name, "topic_id": format_topic_id(meta.topic_id), "partitions": partitions,
                "offsets_error": offsets_error, "configs": configs, "broker_id": self.broker.broker_id,
                "time_ms": self.broker.milliseconds()}

    def api_topic(self, request: Any) -> defer.Deferred:
        """
        C{topic?name=T}: its id (as Kafka's tools print it), its partitions
        and configs.  A partition's log start offset and high watermark are
        its leader's: this broker's log when it leads it, else ListOffsets
        to the leader; the log end offset only when this broker leads it;
        size and segments are this broker's replica's.
        """
        return defer.Deferred.fromCoroutine(self._topic(request))

    async def _messages(self, request: Any) -> dict:
        topic = _arg(request, "topic") or ""
        partition = int(_arg(request, "partition", "0") or 0)
        limit = max(1, min(int(_arg(request, "limit", "50") or 50), MAX_RECORDS))
        meta = self.broker.metadata.topics.get(topic)
        if meta is None or partition not in meta.partitions or \
                not self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
            raise _BadRequest(f"unknown partition {topic}-{partition}")
        if not self._may(request, AclOperation.READ, ResourceType.TOPIC, topic):
            raise _BadRequest(f"{self.principal} may not Read topic {topic}")
        leader = self.broker.metadata.leader(topic, partition)
        log_manager = self.broker.log_manager
        log = log_manager.get(topic, partition) if log_manager is not None else None
        timestamp = _arg(request, "timestamp")
        timestamp_ms = None if timestamp in (None, "") else int(timestamp)
        offset = int(_arg(request, "offset", "-2") or -2)
        if log is None or leader != self.broker.broker_id:
            if leader < 0:
                raise _BadRequest(f"{topic}-{partition} has no leader (offline): its records cannot be read now")
            return await self._fetch_messages(topic, partition, leader, offset, timestamp_ms, limit)
        if timestamp_ms is not None:
            found = log.offset_for_timestamp(timestamp_ms)
            offset = found[0] if found is not None else log.high_watermark
        elif offset == -2:  # earliest
            offset = log.log_start_offset
        elif offset < 0:  # the last `limit` records
            offset = max(log.log_start_offset, log.high_watermark - limit)
        records = read_records(log, offset, limit) if offset < log.high_watermark else []
        return {"topic": topic, "partition": partition, "from_offset": offset, "leader": leader,
                "log_start_offset": log.log_start_offset, "high_watermark": log.high_watermark,
                "records": records}

    async def _fetch_messages(self, topic: str, partition: int, leader: int, offset: int, timestamp_ms: int | None,
                              limit: int) -> dict:
        """
        The records of a partition this broker does not lead, read as a
        client reads them: ListOffsets for its log start offset and high
        watermark (and the offset of C{timestamp_ms}), then one Fetch (read
        uncommitted, at most L{MAX_READ_BYTES}) to its leader C{leader},
        through the console's admin client (L{kafkatw.web.cluster_admin}).
        """
        from ..client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
        from ..protocol.fetch import FetchRequestBody

        admin = self._admin_client()
        tp = (topic, partition)
        start = (await admin.list_offsets({tp: EARLIEST_TIMESTAMP}))[tp].offset
        high_watermark = (await admin.list_offsets({tp: LATEST_TIMESTAMP}))[tp].offset
        if timestamp_ms is not None:
            found = (await admin.list_offsets({tp: timestamp_ms}))[tp].offset
            offset = found if found >= 0 else high_watermark
        elif offset == -2:  # earliest
            offset = start
        elif offset < 0:  # the last `limit` records
            offset = max(start, high_watermark - limit)
        offset = max(offset, start)
        records: list[dict] = []
        if offset < high_watermark:
            body = FetchRequestBody({
                "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": MAX_READ_BYTES, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{
                    "partition": partition, "fetch_offset": offset, "partition_max_bytes": MAX_READ_BYTES,
                    "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            response = await admin.send(leader, 1, body, timeout_ms=10000)
            answers = [p for t in response.responses if t.topic == topic for p in t.partitions
                       if p.partition_index == partition]
            code = answers[0].error_code if answers else getattr(response, "error_code", ErrorCode.unknown_server_error)
            _kafka_code(f"fetching {topic}-{partition} from broker {leader}", code, None)
            if answers and answers[0].records:
                record_rows(bytes(answers[0].records), offset, limit, records, below=high_watermark)
        return {"topic": topic, "partition": partition, "from_offset": offset, "leader": leader,
                "log_start_offset": start, "high_watermark": high_watermark, "records": records}

    def api_messages(self, request: Any) -> defer.Deferred:
        """
        C{messages?topic=T&partition=P&offset=O | &timestamp=MS [&limit=N]}:
        read from this broker's log when it leads the partition, else
        fetched from the leader (L{_fetch_messages}).
        """
        return defer.Deferred.fromCoroutine(self._messages(request))

    def _snapshot(self) -> Any:
        monitor = getattr(self.broker, "lag_monitor", None)
        return None if monitor is None else monitor.latest

    def api_groups(self, request: Any) -> dict:
        snapshot = self._snapshot()
        if snapshot is None:
            return {"groups": [], "computed_ms": None}
        visible = self._topics(request)
        totals: dict[str, int] = {}
        partitions: dict[str, int] = {}
        for row in snapshot.rows:
            if row.topic in visible:
                partitions[row.group] = partitions.get(row.group, 0) + 1
                totals[row.group] = totals.get(row.group, 0) + (row.lag or 0)
        coordinator = self._coordinator()
        groups = [{"group": g, "kind": kind, "lag": totals.get(g, 0), "partitions": partitions.get(g, 0),
                   "coordinator": coordinator.coordinator(g) if coordinator is not None and kind == "coordinator"
                   else None}
                  for g, kind in sorted(snapshot.kinds.items())
                  if self._may(request, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
        return {"groups": groups, "computed_ms": snapshot.time_ms}

    def _coordinator(self) -> Any:
        apis = self.broker.apis
        return None if apis is None else getattr(apis, "group_coordinator", None)

    async def _members(self, group: str, kind: str) -> tuple[str, list[dict]]:
        """The group's state and members (with their partitions) as far as this broker knows."""
        registry = self.broker.registry
        if kind == "zookeeper":
            base = group_path(group)
            members = []
            owners: dict[str, list[str]] = {}
            try:
                topics = await registry.client.get_children(f"{base}/owners")
            except NoNodeError:
                topics = []
            for topic in topics:
                try:
                    children = await registry.client.get_children(f"{base}/owners/{topic}")
                except NoNodeError:
                    continue
                for p in children:
                    try:
                        data, _ = await registry.client.get(f"{base}/owners/{topic}/{p}")
                    except NoNodeError:
                        continue
                    owners.setdefault(data.decode("utf-8", "replace"), []).append(f"{topic}-{p}")
            try:
                ids = await registry.client.get_children(f"{base}/ids")
            except NoNodeError:
                ids = []
            for member in sorted(ids):
                members.append({"member_id": member, "client_id": "", "host": "",
                                "assignment": sorted(owners.get(member, []))})
            return ("Stable" if members else "Empty"), members
        coordinator = self._coordinator()
        if coordinator is None:
            return "", []
        if coordinator.owns(group):
            described = await coordinator.describe_group(group)
            state, protocol_type = described.get("group_state", ""), described.get("protocol_type", "")
            found = [(m["member_id"], m["client_id"], m["client_host"], m["member_assignment"])
                     for m in described.get("members", [])]
        else:  # DescribeGroups v4 to its coordinator
            from .cluster import cluster_admin

            response = await cluster_admin(self.broker).coordinator_request(
                group, 15, {"groups": [group], "include_authorized_operations": False}, version=4,
                error_of=lambda r: r.groups[0].error_code)
            described = response.groups[0]
            if described.error_code:
                raise _BadRequest(f"describing group {group!r} failed: error {described.error_code}")
            state, protocol_type = described.group_state, described.protocol_type
            found = [(m.member_id, m.client_id, m.client_host, bytes(m.member_assignment or b""))
                     for m in described.members]
        members = []
        for member_id, client_id, host, assignment in found:
            partitions = (decode_assignment(assignment) or []) if protocol_type == "consumer" else []
            members.append({"member_id": member_id, "client_id": client_id, "host": host,
                            "assignment": sorted(f"{t}-{p}" for t, p in partitions)})
        return state, members

    async def _group(self, request: Any) -> dict:
        group = _arg(request, "id") or ""
        snapshot = self._snapshot()
        if snapshot is None or group not in snapshot.kinds or \
                not self._may(request, AclOperation.DESCRIBE, ResourceType.GROUP, group):
            raise _BadRequest(f"unknown group {group!r} (groups are read every metrics.lag.interval.ms)")
        kind = snapshot.kinds[group]
        state, members = await self._members(group, kind)
        visible = self._topics(request)
        rows = [{"topic": r.topic, "partition": r.partition, "current_offset": r.committed,
                 "log_end_offset": r.end_offset, "lag": r.lag} for r in snapshot.rows
                if r.group == group and r.topic in visible]
        monitor = self.broker.lag_monitor
        history = []
        partition_history: dict[str, list[list[int]]] = {}
        for t, totals, parts in monitor.history:
            if group not in totals:
                continue
            lags = {tp: lag for tp, lag in parts.get(group, {}).items() if tp[0] in visible}
            history.append({"time_ms": t, "lag": sum(lags.values())})
            for (topic, partition), lag in lags.items():
                partition_history.setdefault(f"{topic}-{partition}", []).append([t, lag])
        return {"group": group, "kind": kind, "state": state, "members": members, "partitions": rows,
                "lag": sum(r["lag"] or 0 for r in rows), "history": history,
                "partition_history": partition_history, "computed_ms": snapshot.time_ms}

    def api_group(self, request: Any) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._group(request))

    # --- admin actions (metrics.console.admin.enable) ------------------------------------

    def _require(self, request: Any, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
        """Raise L{_Forbidden} unless the principal may do C{operation} on the resource."""
        if not self._may(request, operation, resource_type, name):
            raise _Forbidden(f"{self.principal} may not {operation.name.title()} {resource_type.name.lower()} {name}"
                             f" ({resource_type.name}_AUTHORIZATION_FAILED)")

    async def _create_topic(self, request: Any, body: dict) -> dict:
        from ..client.admin import NewTopic

        name = _text(body, "name")
        partitions = _integer(body, "partitions", -1)
        replication_factor = _integer(body, "replication_factor", -1)
        if not (self._may(request, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
                or self._may(request, AclOperation.CREATE, ResourceType.TOPIC, name)):
            raise _Forbidden(f"{self.principal} may not Create topic {name} (TOPIC_AUTHORIZATION_FAILED)")
        results = await self._admin_client().create_topics([NewTopic(name, partitions, replication_factor)])
        _kafka_result(f"creating topic {name!r}", results[name])
        _log.info("console: {principal} created topic {topic}", principal=self.principal or "anonymous", topic=name)
        return {"ok": True, "topic": name}

    def admin_create_topic(self, request: Any, body: dict) -> defer.Deferred:
        """C{{"name", "partitions", "replication_factor"}} (counts: -1 or absent for the broker's defaults)."""
        return defer.Deferred.fromCoroutine(self._create_topic(request, body))

    async def _delete_topic(self, request: Any, body: dict) -> dict:
        name = _text(body, "name")
        self._require(request, AclOperation.DELETE, ResourceType.TOPIC, name)
        results = await self._admin_client().delete_topics([name])
        _kafka_result(f"deleting topic {name!r}", results[name])
        _log.info("console: {principal} deleted topic {topic}", principal=self.principal or "anonymous", topic=name)
        return {"ok": True, "topic": name}

    def admin_delete_topic(self, request: Any, body: dict) -> defer.Deferred:
        """C{{"name"}}."""
        return defer.Deferred.fromCoroutine(self._delete_topic(request, body))

    async def _produce(self, request: Any, body: dict) -> dict:
        topic = _text(body, "topic")
        key = _text(body, "key", required=False)
        value = body.get("value")
        if value is not None and not isinstance(value, str):
            raise _BadRequest("value must be a string")
        partition = body.get("partition")
        partition = None if partition in (None, "") else _integer(body, "partition", 0)
        self._require(request, AclOperation.WRITE, ResourceType.TOPIC, topic)
        if topic not in self.broker.metadata.topics:
            raise _BadRequest(f"producing to {topic!r} failed: UNKNOWN_TOPIC_OR_PARTITION")
        producer = self._producer()
        metadata = await producer.send(topic, None if value is None else value.encode("utf-8"),
                                       key=None if key is None else key.encode("utf-8"), partition=partition)
        return {"ok": True, "topic": metadata.topic, "partition": metadata.partition, "offset": metadata.offset}

    def admin_produce(self, request: Any, body: dict) -> defer.Deferred:
        """C{{"topic", "key", "value", "partition"}} (key, value: text sent as UTF-8; partition optional)."""
        return defer.Deferred.fromCoroutine(self._produce(request, body))

    async def _delete_group(self, request: Any, body: dict) -> dict:
        group = _text(body, "group")
        self._require(request, AclOperation.DELETE, ResourceType.GROUP, group)
        response = await self._admin_client().coordinator_request(
            group, 42, {"groups_names": [group]}, version=1, error_of=lambda r: r.results[0].error_code)
        _kafka_code(f"deleting group {group!r}", response.results[0].error_code, None)
        _log.info("console: {principal} deleted group {group}", principal=self.principal or "anonymous", group=group)
        return {"ok": True, "group": group}

    def admin_delete_group(self, request: Any, body: dict) -> defer.Deferred:
        """C{{"group"}}: DeleteGroups, which Kafka allows only for a group without members (else NON_EMPTY_GROUP)."""
        return defer.Deferred.fromCoroutine(self._delete_group(request, body))
