"""
Metadata responses from per-topic bytes (issue 32: a full Metadata of 10,000
partitions in milliseconds).

A Metadata response is a small head (throttle time, brokers, cluster id,
controller id), the topics array, and at most an int32 and the tagged fields
after it (Kafka protocol guide, Metadata API, v0-v12)::

    [correlation_id][header tags v9+] throttle_time(v3+) brokers cluster_id(v2+)
    controller_id(v1+) | topics: length, topic, topic, ... |
    cluster_authorized_operations(v8-v10) [tags v9+]

Each topic entry is encoded on its own with kio's writer of the version's
C{MetadataResponseTopic} -- the writer kio's own array writer calls for each
element -- and kept in the L{kafkatw.broker.metadata_cache.MetadataCache}
(L{MetadataCache.encoded_topics}) until anything the entry is made of changes.
The head and tail are encoded by kio with an empty topics array, which
L{MetadataResponseEncoder.splice} replaces by the array of the entries.  So
a full Metadata costs a dictionary lookup and a C{bytes.join} per topic, and
its bytes are those kio writes for the whole response (checked for every
version by tests/unit/test_metadata_response.py).

Kafka's brokers do the same in spirit: C{KafkaApis.handleTopicMetadataRequest}
reads a C{MetadataCache} instead of the ZooKeeper data, and each partition's
C{UpdateMetadataPartitionState} is kept ready to be written.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Iterable

from kio.serial import entity_writer

from ..protocol.messages import build, encode_array_length, response_schema

__all__ = ["MetadataResponseEncoder", "metadata_response_encoder"]

_METADATA = 3


class MetadataResponseEncoder:
    """
    Encodes the Metadata response of one version from per-topic bytes.

    @ivar version: the response version (0-12).
    @ivar flexible: whether the version is flexible (v9+: compact arrays, tagged fields).
    """

    def __init__(self, version: int) -> None:
        self.version = version
        cls = response_schema(_METADATA, version)
        self.flexible = bool(cls.__flexible__)
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields]
        topics_field = fields[names.index("topics")]
        (topic_type, _ellipsis) = topics_field.type.__args__
        self._topic_cls = topic_type
        self._write_topic = entity_writer(topic_type)
        after = fields[names.index("topics") + 1:]
        if any(f.metadata.get("kafka_type") != "int32" for f in after):
            raise ValueError(f"Metadata v{version}: a field after topics is not an int32: {[f.name for f in after]}")
        #: bytes after the topics array: its int32 fields, and an empty tagged-field section (flexible)
        self._tail_bytes = 4 * len(after) + (1 if self.flexible else 0)
        self._empty_array = encode_array_length(0, self.flexible)

    def topic(self, entry: dict) -> bytes:
        """
        One topic's entry as kio writes it in the topics array.

        @param entry: the plain values of a C{MetadataResponseTopic}
            (L{kafkatw.protocol.messages.build}'s input).
        """
        buffer = io.BytesIO()
        self._write_topic(buffer, build(self._topic_cls, entry))
        return buffer.getvalue()

    def splice(self, frame: bytes, topics: Iterable[bytes], count: int) -> bytes:
        """
        The response frame C{frame} (encoded with an empty topics array) with
        C{count} encoded topics in that array instead.

        @param frame: a Metadata response frame of this version, without the
            size prefix, whose topics array is empty.
        @raise ValueError: C{frame} has no empty topics array where this version has it.
        """
        cut = len(frame) - self._tail_bytes - len(self._empty_array)
        if frame[cut:cut + len(self._empty_array)] != self._empty_array:
            raise ValueError(f"not a Metadata v{self.version} response with an empty topics array")
        return b"".join([frame[:cut], encode_array_length(count, self.flexible), *topics,
                         frame[cut + len(self._empty_array):]])


_encoders: dict[int, MetadataResponseEncoder] = {}


def metadata_response_encoder(version: int) -> MetadataResponseEncoder:
    """The (shared) L{MetadataResponseEncoder} of C{version}."""
    encoder = _encoders.get(version)
    if encoder is None:
        encoder = _encoders[version] = MetadataResponseEncoder(version)
    return encoder
