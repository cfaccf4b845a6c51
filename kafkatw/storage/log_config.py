"""
The log settings of one topic (Kafka's C{LogConfig}): the topic configs a
partition's log follows, under Kafka's names (L{kafkatw.config.TOPIC_CONFIG_KEYS}).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kafkatw.protocol.records import COMPRESSION_TYPE_CODECS

__all__ = ["LogConfig", "FILE_DELETE_DELAY_MS"]

_LONG_MAX = 2**63 - 1
#: Kafka's default C{file.delete.delay.ms}: descriptors of deleted segments stay
#: open this long so that regions being sent remain valid.
FILE_DELETE_DELAY_MS = 60000

@dataclass
class LogConfig:
    """
    The log settings of one topic, under Kafka's topic-config names
    (L{kafkatw.config.TOPIC_CONFIG_KEYS}).
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    flush_messages: int = _LONG_MAX
    flush_ms: int = _LONG_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    #: Kafka's topic C{compression.type}: C{producer} keeps each batch's codec.
    compression_type: str = "producer"
    message_timestamp_difference_max_ms: int = _LONG_MAX
    message_timestamp_before_max_ms: int = _LONG_MAX
    message_timestamp_after_max_ms: int = _LONG_MAX
    segment_jitter_ms: int = 0
    #: how long the files of a segment deleted by retention stay open (regions being sent stay valid)
    file_delete_delay_ms: int = FILE_DELETE_DELAY_MS
    #: KIP-390's levels, used when the broker recompresses (gzip -1: the library's default)
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX

    _KEYS = {
        "segment.bytes": "segment_bytes",
        "segment.ms": "segment_ms",
        "index.interval.bytes": "index_interval_bytes",
        "segment.index.bytes": "segment_index_bytes",
        "flush.messages": "flush_messages",
        "flush.ms": "flush_ms",
        "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes",
        "max.message.bytes": "max_message_bytes",
        "message.timestamp.type": "message_timestamp_type",
        "compression.type": "compression_type",
        "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
        "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
        "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
        "segment.jitter.ms": "segment_jitter_ms",
        "file.delete.delay.ms": "file_delete_delay_ms",
        "compression.gzip.level": "compression_gzip_level",
        "compression.lz4.level": "compression_lz4_level",
        "compression.zstd.level": "compression_zstd_level",
        "cleanup.policy": "cleanup_policy",
        "delete.retention.ms": "delete_retention_ms",
        "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
        "min.compaction.lag.ms": "min_compaction_lag_ms",
        "max.compaction.lag.ms": "max_compaction_lag_ms",
    }
    _TYPES = {
        "message_timestamp_type": str,
        "compression_type": str,
        "cleanup_policy": lambda v: ",".join(sorted(p.strip() for p in (v if isinstance(v, list) else str(v).split(","))
                                                    if p.strip())),
        "min_cleanable_dirty_ratio": float,
    }

    @classmethod
    def from_topic_config(cls, config: Mapping[str, Any]) -> "LogConfig":
        """
        Build from a topic config dict (as L{kafkatw.config.topic_log_config}
        returns); missing keys take Kafka's defaults, unknown keys
        are ignored, string values are parsed.
        """
        values: dict[str, Any] = {}
        for key, attr in cls._KEYS.items():
            if key in config:
                values[attr] = cls._TYPES.get(attr, int)(config[key])
        return cls(**values)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def target_codec(self) -> int | None:
        """The codec batches are written with (C{None}: the producer's)."""
        return COMPRESSION_TYPE_CODECS.get(self.compression_type)

    @property
    def compression_level(self) -> int | None:
        """The level the broker recompresses with (C{None}: the codec's default)."""
        level = {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                 "zstd": self.compression_zstd_level}.get(self.compression_type)
        return None if level is None or level == -1 and self.compression_type == "gzip" else level

    @property
    def timestamp_before_max_ms(self) -> int:
        """C{message.timestamp.before.max.ms}, or the deprecated difference when left at its default (Kafka 3.6)."""
        before = self.message_timestamp_before_max_ms
        return before if before != _LONG_MAX else self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """C{message.timestamp.after.max.ms}, or the deprecated difference when left at its default (Kafka 3.6)."""
        after = self.message_timestamp_after_max_ms
        return after if after != _LONG_MAX else self.message_timestamp_difference_max_ms

    @property
    def compact(self) -> bool:
        """C{cleanup.policy} holds C{compact}: the log cleaner compacts this log."""
        policy = self.cleanup_policy
        return policy == "compact" or (policy != "delete" and "compact" in policy.split(","))

    @property
    def delete(self) -> bool:
        """C{cleanup.policy} holds C{delete}: retention deletes old segments."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def max_segment_ms(self) -> int:
        """
        Age at which the active segment rolls: C{segment.ms}, or
        C{max.compaction.lag.ms} when smaller on a compacted log (Kafka's
        C{LogConfig.maxSegmentMs}, KIP-354), so that old records leave the
        active segment and become cleanable.
        """
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms
