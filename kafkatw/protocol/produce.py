"""
Produce response encoding by hand.

kio encodes a response by walking its schema's dataclasses, which costs about
as much as the whole append of a one-record batch (the paper's batch-size-1
producer, librdkafka with C{linger.ms=0}): the Produce response, answered for
every acks=1 or acks=all request, is written here with C{struct}, as Fetch
responses are (L{kafkatw.protocol.fetch}).  The bytes are the same as kio's for
every supported version (tests/unit/test_produce_response.py checks them
against kio).

ProduceResponse v3–v9 (Kafka protocol guide)::

    correlation_id int32, [tagged fields: v9, response header v1]
    responses [
      name string                                           (compact in v9)
      partition_responses [
        index int32, error_code int16, base_offset int64,
        log_append_time_ms int64,
        log_start_offset int64                              (v5+)
        record_errors [batch_index int32,
                       batch_index_error_message nullable string]   (v8+)
        error_message nullable string                       (v8+)
        [tagged fields: v9]
      ] [tagged fields: v9]
    ]
    throttle_time_ms int32
    [tagged fields: v9]
"""

from __future__ import annotations

import struct
from typing import Sequence

from .messages import encode_array_length, encode_nullable_string, encode_string

__all__ = ["PRODUCE_RESPONSE_MAX_VERSION", "encode_produce_response"]

#: The newest ProduceResponse version encoded here (the broker answers Produce v3–v9).
PRODUCE_RESPONSE_MAX_VERSION = 9

_I32 = struct.Struct(">i")
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log start offset


def encode_produce_response(version: int, correlation_id: int, responses: Sequence[tuple[str, Sequence[dict]]],
                            throttle_time_ms: int = 0) -> bytes:
    """
    Encode a ProduceResponse of C{version} (3–9), without the frame's 4-byte size.

    @param responses: C{(topic name, partitions)} pairs in request order; a
        partition is a mapping with C{index}, C{error_code}, C{base_offset},
        and optionally C{log_append_time} (ms since the epoch, -1: CreateTime),
        C{log_start_offset} (-1: unknown) and C{error_message} (C{None}).
    @param throttle_time_ms: KIP-219's throttle, in ms.
    @return: the response header (v1 for v9, else v0) and body.
    @raise ValueError: a version outside 3–9.
    """
    if not 3 <= version <= PRODUCE_RESPONSE_MAX_VERSION:
        raise ValueError(f"ProduceResponse v{version} is not encoded here (3-{PRODUCE_RESPONSE_MAX_VERSION})")
    flexible = version >= 9
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out += b"\x00"
    out += encode_array_length(len(responses), flexible)
    no_errors = encode_array_length(0, flexible)
    null_message = encode_nullable_string(None, flexible)
    for name, partitions in responses:
        out += encode_string(name, flexible)
        out += encode_array_length(len(partitions), flexible)
        for p in partitions:
            get = p.get
            append_time = get("log_append_time")
            if append_time is None:
                append_time = -1
            if version >= 5:
                start = get("log_start_offset")
                out += _PARTITION_V5.pack(p["index"], int(p["error_code"]), p["base_offset"], append_time,
                                          -1 if start is None else start)
            else:
                out += _PARTITION_V3.pack(p["index"], int(p["error_code"]), p["base_offset"], append_time)
            if version >= 8:
                out += no_errors
                message = get("error_message")
                out += null_message if message is None else encode_nullable_string(message, flexible)
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out += b"\x00"
    return bytes(out)
