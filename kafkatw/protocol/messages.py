"""
Kafka request/response messages: kio glue, sans-IO.

A request frame (the bytes after the 4-byte size prefix) is::

    request_api_key      int16
    request_api_version  int16
    correlation_id       int32
    client_id            nullable string (int16 length; legacy even in flexible versions)
    [tagged fields]      header v2 only, i.e. when the request version is flexible
    body                 the versioned request schema

A response frame is ``correlation_id int32`` (header v0), plus an empty tagged-field
section for flexible versions (header v1), then the body.  ApiVersions responses
always use header v0 so that a client can parse them whatever version it sent
(Kafka protocol guide, "Versioning and Compatibility"; KIP-511).

Handlers build responses as plain Python values — dicts for structs, lists for
arrays, ints for error codes and milliseconds — and L{build} turns them into the
kio entity of the negotiated version, dropping fields that version lacks and
filling the ones it has with Kafka's defaults.  So one handler serves every
version.

Source: Apache Kafka protocol guide; kio's schemas generated from Kafka's JSON
message definitions.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid
from types import NoneType, UnionType
from typing import Any, NamedTuple, get_args, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from ..errors import CorruptRecordError
from . import records as _records
from .records import encode_uvarint

__all__ = [
    "API_NAMES",
    "MalformedRequest",
    "UnsupportedVersion",
    "UnknownApiKey",
    "RequestHeader",
    "parse_request_header",
    "decode_request",
    "decode_simple_produce",
    "simple_produce_decoder",
    "request_schema",
    "response_schema",
    "build",
    "encode_response",
    "encode_request",
    "decode_response",
    "encode_uvarint",
    "encode_string",
    "encode_nullable_string",
    "encode_array_length",
]

API_NAMES: dict[int, str] = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    21: "DeleteRecords", 22: "InitProducerId", 32: "DescribeConfigs", 33: "AlterConfigs",
    36: "SaslAuthenticate", 37: "CreatePartitions", 42: "DeleteGroups", 60: "DescribeCluster",
}

_HEADER = struct.Struct(">hhih")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_NULL_INT16 = _INT16.pack(-1)


class MalformedRequest(Exception):
    """The frame does not parse as a Kafka request; the connection is closed."""


class UnsupportedVersion(Exception):
    """The API key is known but the version is not one kafkatw serves."""


class UnknownApiKey(Exception):
    """The API key is not one kafkatw serves."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


_request_schemas: dict[tuple[int, int], type] = {}
#: (API key, version) -> whether its request header has tagged fields (header v2)
_flexible_headers: dict[tuple[int, int], bool] = {}
_tuple_new = tuple.__new__
_response_schemas: dict[tuple[int, int], type] = {}


def request_schema(api_key: int, api_version: int) -> type:
    """
    The kio request class of C{api_key} at C{api_version}.

    @raise UnsupportedVersion: when kio has no such version.
    """
    key = (api_key, api_version)
    try:
        return _request_schemas[key]
    except KeyError:
        pass
    try:
        schema = load_request_schema(api_key, api_version)
    except Exception as e:  # kio raises UnknownAPIKey/UnknownEntity
        raise UnsupportedVersion(f"{API_NAMES.get(api_key, api_key)} v{api_version}") from e
    _request_schemas[key] = schema
    return schema


def response_schema(api_key: int, api_version: int) -> type:
    """The kio response class of C{api_key} at C{api_version}."""
    key = (api_key, api_version)
    try:
        return _response_schemas[key]
    except KeyError:
        schema = _response_schemas[key] = load_response_schema(api_key, api_version)
        return schema


def _skip_tagged_fields(frame: bytes, pos: int) -> int:
    if pos < len(frame) and not frame[pos]:
        return pos + 1  # no tagged fields (what clients send)
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
    if pos > len(frame):
        raise MalformedRequest("tagged fields run past the end of the frame")
    return pos


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return _records.decode_uvarint(data, pos)
    except CorruptRecordError as e:
        raise MalformedRequest(str(e)) from None


def parse_request_header(frame: bytes | memoryview, flexible: bool | None = None) -> RequestHeader:
    """
    Parse the request header of C{frame}.

    @param flexible: whether the header has tagged fields (header v2); when
        L{None}, decided from the request schema of the version named in the frame
        (unknown versions are treated as non-flexible, which is enough to read the
        correlation id for an error response).
    @raise MalformedRequest: the frame is shorter than a header.
    """
    if len(frame) < 10:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_id_len = _HEADER.unpack_from(frame, 0)
    pos = 10
    if client_id_len < 0:
        client_id = None
    else:
        end = pos + client_id_len
        if end > len(frame):
            raise MalformedRequest("client id runs past the end of the frame")
        client_id = str(frame[pos:end], "utf-8", "replace")
        pos = end
    if flexible is None:
        flexible = _flexible_headers.get((api_key, api_version))
        if flexible is None:
            try:
                flexible = _flexible_headers[(api_key, api_version)] = request_schema(api_key,
                                                                                     api_version).__flexible__
            except UnsupportedVersion:
                flexible = False  # not remembered: the cache holds real schemas only
    if flexible:
        pos = _skip_tagged_fields(frame, pos)
    # tuple.__new__: RequestHeader(...) without the named tuple's Python-level __new__ (one per request)
    return _tuple_new(RequestHeader, (api_key, api_version, correlation_id, client_id, pos))


def decode_request(frame: bytes | memoryview, header: RequestHeader) -> Any:
    """
    Decode the body of C{frame} as the kio request entity named by C{header}.

    @raise UnsupportedVersion: kio has no schema for that version.
    @raise MalformedRequest: the body does not parse.
    """
    schema = request_schema(header.api_key, header.api_version)
    try:
        value, _size = entity_reader(schema)(frame, header.body_offset)
    except Exception as e:
        raise MalformedRequest(f"cannot decode {schema.__name__} v{header.api_version}: {e}") from e
    return value


_PRODUCE_HEAD = struct.Struct(">hhiih")  # transactional id length, acks, timeout, topic count, name length
_PRODUCE_PARTITION = struct.Struct(">iii")  # partition count, index, records length
_PRODUCE_HEAD_FLEX = struct.Struct(">hiBB")  # acks, timeout, topic count + 1, name length + 1 (one-byte varints)
_PRODUCE_PARTITION_FLEX = struct.Struct(">Bi")  # partition count + 1, index
_THREE_EMPTY_TAGS = b"\0\0\0"


def decode_simple_produce(frame: bytes | memoryview, pos: int,
                          flexible: bool) -> tuple[int, int, str, int, memoryview | None] | None:
    """
    Decode the body of a ProduceRequest v3–v9 of the common shape (no
    transactional id, one topic, one partition, no tagged fields) by hand,
    without kio: the broker's per-request path for one-record requests.

    @param pos: where the body starts (C{RequestHeader.body_offset}); a
        negative one is refused (C{None}), not counted from the end.
    @param flexible: a v9 request (compact strings and arrays, tagged fields).
    @return: C{(acks, timeout_ms, topic, partition, records)} as
        L{decode_request} would decode them (C{records} a view of C{frame},
        C{None} for null records), or C{None} for any other shape and for
        anything that does not parse (then L{decode_request} decides).
    """
    if pos < 0:
        return None
    try:
        if flexible:
            if frame[pos] != 0:
                return None  # a transactional id
            acks, timeout, topics, name_size = _PRODUCE_HEAD_FLEX.unpack_from(frame, pos + 1)
            if topics != 2 or not name_size or name_size & 0x80:
                return None
            pos += 9
            end = pos + name_size - 1
            topic = str(frame[pos:end], "utf-8")
            partitions, index = _PRODUCE_PARTITION_FLEX.unpack_from(frame, end)
            if partitions != 2:
                return None
            pos = end + 5
            size = frame[pos]
            if size < 0x80:  # records up to 126 bytes, then up to 16 KiB: the varint inline
                pos += 1
            elif frame[pos + 1] < 0x80:
                size = (size & 0x7F) | frame[pos + 1] << 7
                pos += 2
            else:
                size, pos = _read_uvarint(frame, pos)
            if size:
                end = pos + size - 1
                records = frame[pos:end] if isinstance(frame, memoryview) else memoryview(frame)[pos:end]
            else:
                end, records = pos, None
            if len(frame) != end + 3 or frame[end:] != _THREE_EMPTY_TAGS:
                return None
            return acks, timeout, topic, index, records
        transactional_id, acks, timeout, topics, name_size = _PRODUCE_HEAD.unpack_from(frame, pos)
        if transactional_id != -1 or topics != 1 or name_size < 0:
            return None
        pos += 14
        end = pos + name_size
        topic = str(frame[pos:end], "utf-8")
        partitions, index, size = _PRODUCE_PARTITION.unpack_from(frame, end)
        if partitions != 1 or size < -1:
            return None
        pos = end + 12
        if size < 0:
            end, records = pos, None
        else:
            end = pos + size
            records = frame[pos:end] if isinstance(frame, memoryview) else memoryview(frame)[pos:end]
        if len(frame) != end:
            return None
        return acks, timeout, topic, index, records
    except (struct.error, UnicodeDecodeError, MalformedRequest, IndexError):
        return None


#: What the broker decodes one-partition Produce requests with: L{decode_simple_produce}
#: compiled (C{decode_simple_produce} of kafkatw/protocol/_speedups.c, the same results,
#: hypothesis-checked against this module's) when the accelerator is built, else L{decode_simple_produce}.
simple_produce_decoder = getattr(_records._speedups, "decode_simple_produce", None) or decode_simple_produce


# --- building entities from plain values ------------------------------------------


class _FieldPlan(NamedTuple):
    name: str
    kind: str  # "entity", "entities", "value"
    entity: type | None
    kafka_type: str | None
    default: Any


_plans: dict[type, tuple[_FieldPlan, ...]] = {}


def _strip_optional(tp: Any) -> Any:
    if get_origin(tp) is UnionType:
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0]
    return tp


def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    try:
        return _plans[cls]
    except KeyError:
        pass
    plan = []
    for f in dataclasses.fields(cls):
        tp = _strip_optional(f.type)
        kafka_type = f.metadata.get("kafka_type")
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = dataclasses.MISSING
        if get_origin(tp) is tuple:
            inner = _strip_optional(get_args(tp)[0])
            if dataclasses.is_dataclass(inner):
                plan.append(_FieldPlan(f.name, "entities", inner, None, default))
            else:
                plan.append(_FieldPlan(f.name, "values", None, kafka_type, default))
        elif dataclasses.is_dataclass(tp):
            plan.append(_FieldPlan(f.name, "entity", tp, None, default))
        else:
            plan.append(_FieldPlan(f.name, "value", None, kafka_type, default))
    result = _plans[cls] = tuple(plan)
    return result


_ZERO_UUID = uuid.UUID(int=0)


def _convert(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type == "timedelta_i32" or kafka_type == "timedelta_i64":
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    if kafka_type == "uuid":
        return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(bytes=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        if value < 0:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)
    return value


def _implicit_default(p: _FieldPlan) -> Any:
    if p.kind in ("entities", "values"):
        return ()
    if p.kind == "entity":
        return None
    if p.kafka_type == "error_code":
        return ErrorCode.none
    if p.kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if p.kafka_type == "uuid":
        return _ZERO_UUID
    if p.kafka_type == "bool":
        return False
    if p.kafka_type in ("string", "bytes", "records"):
        return None
    return 0


def build(cls: type, data: Any) -> Any:
    """
    Build a kio entity of class C{cls} from plain values.

    @param data: a mapping of field name to value (or an entity, returned as is).
        Nested structs are mappings, arrays are sequences; error codes are ints,
        durations are milliseconds, UUIDs are L{uuid.UUID}.  Keys that C{cls}
        lacks are ignored (fields differ between versions); fields missing from
        C{data} take the schema's default, else Kafka's implicit default
        (0, empty, null, false).
    """
    if data is None or isinstance(data, cls):
        return data
    kwargs = {}
    get = data.get
    for p in _plan(cls):
        value = get(p.name, dataclasses.MISSING)
        if value is dataclasses.MISSING:
            if p.default is not dataclasses.MISSING:
                continue
            value = _implicit_default(p)
        elif p.kind == "entities":
            value = None if value is None else tuple([build(p.entity, item) for item in value])
        elif p.kind == "entity":
            value = build(p.entity, value)
        elif p.kind == "values":
            value = tuple(value) if value is not None else None
        else:
            value = _convert(p.kafka_type, value)
        kwargs[p.name] = value
    return cls(**kwargs)


def _to_bytes(writer: Any, entity: Any) -> bytes:
    buffer = io.BytesIO()
    writer(buffer, entity)
    return buffer.getvalue()


def encode_string(value: str, flexible: bool) -> bytes:
    """A string field: int16 length (C{flexible}: compact, uvarint length + 1), then UTF-8."""
    data = value.encode("utf-8")
    if flexible:
        return encode_uvarint(len(data) + 1) + data
    return _INT16.pack(len(data)) + data


def encode_nullable_string(value: str | None, flexible: bool) -> bytes:
    """A nullable string field: null is int16 -1 (C{flexible}: uvarint 0)."""
    if value is None:
        return b"\x00" if flexible else _NULL_INT16
    return encode_string(value, flexible)


def encode_array_length(count: int, flexible: bool) -> bytes:
    """An array's length: int32 (C{flexible}: compact, uvarint count + 1)."""
    return encode_uvarint(count + 1) if flexible else _INT32.pack(count)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """
    Encode a response frame (without the 4-byte size prefix).

    @param body: plain values for L{build}, or a kio response entity.
    @return: header (v0 for ApiVersions and non-flexible versions, else v1) + body.
    """
    cls = response_schema(api_key, api_version)
    entity = build(cls, body)
    payload = _to_bytes(entity_writer(cls), entity)
    if cls.__flexible__ and api_key != 18:
        return _INT32.pack(correlation_id) + b"\x00" + payload
    return _INT32.pack(correlation_id) + payload


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """
    Encode a request frame (without the size prefix), for clients and tests.

    @param body: plain values for L{build}, a kio request entity, or an object
        with C{encode_body(api_version, flexible) -> bytes} that encodes the body
        itself (the producer's hand-written Produce encoder: kio's writer is
        pure Python and too slow for the data path).
    """
    cls = request_schema(api_key, api_version)
    client = client_id.encode() if client_id is not None else None
    header = struct.pack(">hhi", api_key, api_version, correlation_id)
    header += struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
    if cls.__flexible__:
        header += b"\x00"
    encode_body = getattr(body, "encode_body", None)
    if encode_body is not None:
        return header + encode_body(api_version, cls.__flexible__)
    return header + _to_bytes(entity_writer(cls), build(cls, body))


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """
    Decode a response frame (without the size prefix).

    @return: (correlation id, kio response entity).
    """
    cls = response_schema(api_key, api_version)
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    pos = 4
    if cls.__flexible__ and api_key != 18:
        pos = _skip_tagged_fields(frame, pos)
    if api_key == 65 and api_version == 0:
        return correlation_id, _decode_describe_transactions_v0(cls, frame, pos)
    value, _size = entity_reader(cls)(frame, pos)
    return correlation_id, value


_DESCRIBED_TXN = struct.Struct(">iqqh")  # transaction_timeout_ms, transaction_start_time_ms, producer_id, epoch


def _decode_describe_transactions_v0(cls: type, frame: bytes, pos: int) -> Any:
    """
    DescribeTransactions v0 (KIP-664), decoded by hand: a transactional id
    with no open transaction has C{transaction_start_time} -1, which kio's
    C{datetime_i64} reader refuses; it comes out as None here.
    """
    def string(pos: int) -> tuple[str | None, int]:
        n, pos = _read_uvarint(frame, pos)
        if n == 0:
            return None, pos
        return bytes(frame[pos:pos + n - 1]).decode("utf-8"), pos + n - 1

    throttle_ms = _INT32.unpack_from(frame, pos)[0]
    count, pos = _read_uvarint(frame, pos + 4)
    states = []
    for _ in range(max(0, count - 1)):
        error_code = struct.unpack_from(">h", frame, pos)[0]
        transactional_id, pos = string(pos + 2)
        state, pos = string(pos)
        timeout_ms, start_ms, producer_id, producer_epoch = _DESCRIBED_TXN.unpack_from(frame, pos)
        pos += _DESCRIBED_TXN.size
        topics = []
        n_topics, pos = _read_uvarint(frame, pos)
        for _ in range(max(0, n_topics - 1)):
            topic, pos = string(pos)
            n_partitions, pos = _read_uvarint(frame, pos)
            partitions = struct.unpack_from(f">{max(0, n_partitions - 1)}i", frame, pos)
            pos = _skip_tagged_fields(frame, pos + 4 * len(partitions))
            topics.append({"topic": topic, "partitions": partitions})
        pos = _skip_tagged_fields(frame, pos)
        states.append({"error_code": error_code, "transactional_id": transactional_id, "transaction_state": state,
                       "transaction_timeout": timeout_ms, "transaction_start_time": start_ms,
                       "producer_id": producer_id, "producer_epoch": producer_epoch, "topics": topics})
    return build(cls, {"throttle_time": throttle_ms, "transaction_states": states})
