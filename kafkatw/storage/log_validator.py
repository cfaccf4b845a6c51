"""
Validation of the record batches a partition's leader appends (Kafka's
C{LogValidator}), before they get their offsets.

L{kafkatw.storage.log.PartitionLog.append} runs, per Produce request:

  1. L{LogValidator.validate_batches}: every batch whole, magic 2, its CRC-32C
     right, its counts consistent and within C{max.message.bytes}
     (L{kafkatw.protocol.batch.parse_batch_headers}); on a compacted topic
     every data record has a key; no control batch from a client;
  2. the idempotence and transaction checks of the producer state
     (L{kafkatw.storage.producer_state.ProducerStateManager.validate}; Kafka's
     C{UnifiedLog.analyzeAndValidateProducerState}), which may find the
     request a retried duplicate;
  3. L{LogValidator.assign_timestamps_and_compression}: CreateTime batches
     outside C{message.timestamp.before.max.ms} / C{after.max.ms} are refused
     (KIP-937); with C{message.timestamp.type=LogAppendTime} each batch is
     stamped with the append time, and with a C{compression.type} other than
     C{producer} batches of another codec are recompressed
     (L{kafkatw.protocol.records.rewrite_batches}); both are inside the CRC,
     so such batches are copied, the others keep the no-copy path.  C{append}
     makes this call only for a topic that sets C{LogAppendTime}, a
     C{compression.type} or a timestamp bound.

The offsets and the leader epoch, outside the CRC, are patched as the batches
are written (L{kafkatw.storage.log.PartitionLog.append}).
L{kafkatw.storage.log.PartitionLog.append_many} makes step 1's checks inline
for the plain batches it appends together (one batch without producer id per
request, on a topic needing none of step 3), and hands any other request to
C{append}.  A follower's appends are not validated beyond their CRCs (the
leader did it).
"""

from __future__ import annotations

from typing import Callable

from kafkatw.errors import ErrorCode, InvalidRecordError, kafka_error
from kafkatw.protocol.batch import BatchHeader, parse_batch_headers
from kafkatw.protocol.records import decode_batches, rewrite_batches
from kafkatw.storage.log_config import LogConfig

__all__ = ["LogValidator"]

_LONG_MAX = 2**63 - 1


class LogValidator:
    """
    The leader's checks and rewrites of appended batches for one partition
    (Kafka's C{LogValidator}); the log's configuration is passed to each call
    (it changes while the log is open).

    @param topic_partition: C{<topic>-<partition>}, for the error messages.
    @param now_ms: the broker's clock (ms since the epoch), for
        C{LogAppendTime} and the timestamp bounds.
    """

    __slots__ = ("topic_partition", "now_ms")

    def __init__(self, topic_partition: str, now_ms: Callable[[], int]) -> None:
        self.topic_partition = topic_partition
        self.now_ms = now_ms

    def validate_batches(self, records: bytes | bytearray | memoryview, config: LogConfig,
                         allow_control: bool) -> tuple[list[BatchHeader], bool]:
        """
        Check the batches of a Produce request (step 1 of the module docstring).

        @param allow_control: the batches may be control batches (the broker's
            transaction markers); a client's are refused.
        @return: the batches' headers, and whether any has a producer id (the
            producer state must check them).
        @raise CorruptRecordError: see L{parse_batch_headers}.
        @raise RecordTooLargeError: a batch above C{max.message.bytes}.
        @raise InvalidRecordError: inconsistent batch counts; on a compacted
            log, a record without a key ("Compacted topic cannot accept
            message without key", Kafka's); a control batch not allowed.
        """
        headers = parse_batch_headers(records, True, config.max_message_bytes)
        if config.cleanup_policy != "delete" and config.compact:
            self.validate_keys(records)
        producers = False
        for h in headers:
            if h.attributes & 0x20 and not allow_control:
                raise InvalidRecordError("a client may not write control batches")
            if h.producer_id >= 0:
                producers = True
        return headers, producers

    def validate_keys(self, records: bytes | bytearray | memoryview) -> None:
        """
        Refuse records without a key, for a compacted log (the records are decoded,
        decompressed if need be, as Kafka's C{LogValidator} does for such topics).

        @raise InvalidRecordError: a data record has a null key.
        """
        for batch in decode_batches(records, verify_crc=False):
            if batch.is_control:
                continue
            for record in batch.records:
                if record.key is None:
                    raise InvalidRecordError(
                        f"Compacted topic cannot accept message without key in topic partition {self.topic_partition}")

    def assign_timestamps_and_compression(self, records: bytes | bytearray | memoryview, headers: list[BatchHeader],
                                          config: LogConfig) -> tuple[bytes | bytearray | memoryview,
                                                                      list[BatchHeader], int]:
        """
        Check the CreateTime bounds, stamp LogAppendTime batches and
        recompress to the topic's C{compression.type} (step 3 of the module
        docstring).

        @param headers: L{validate_batches}' headers of C{records}.
        @return: C{(records, headers, append_time)}: C{records} and
            C{headers} as given when nothing was rewritten, else the
            rewritten batches (a copy) and their headers; the append time (ms)
            for LogAppendTime, -1 for CreateTime.
        @raise KafkaError: C{INVALID_TIMESTAMP} (L{validate_timestamps}).
        """
        append_time = -1
        if config.message_timestamp_type == "LogAppendTime":
            append_time = self.now_ms()
        elif (config.message_timestamp_before_max_ms != _LONG_MAX or config.message_timestamp_after_max_ms
              != _LONG_MAX or config.message_timestamp_difference_max_ms != _LONG_MAX):
            self.validate_timestamps(headers, config)
        codec = None if config.compression_type == "producer" else config.target_codec
        if append_time >= 0 or (codec is not None and any(h.compression != codec for h in headers)):
            # Off the no-copy path: Kafka's LogValidator recompresses the
            # batches of a topic with its own compression.type and stamps
            # LogAppendTime batches; both are inside the CRC.
            records = rewrite_batches(records, headers, codec, append_time if append_time >= 0 else None,
                                      config.compression_level)
            headers = parse_batch_headers(records, False)
        return records, headers, append_time

    def validate_timestamps(self, headers: list[BatchHeader], config: LogConfig) -> None:
        """
        Kafka's CreateTime bounds (C{message.timestamp.before.max.ms},
        C{after.max.ms}, KIP-937), checked on each batch's first and largest
        timestamps (the records are not parsed); -1 (no timestamp) passes.

        @raise KafkaError: C{INVALID_TIMESTAMP}; nothing is written.
        """
        before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
        if before == _LONG_MAX and after == _LONG_MAX:
            return
        now = self.now_ms()
        for h in headers:
            for timestamp in (h.base_timestamp, h.max_timestamp):
                if timestamp < 0:
                    continue
                if now - timestamp > before:
                    raise kafka_error(ErrorCode.invalid_timestamp,
                                      f"Timestamp {timestamp} of a record is out of range: it is more than "
                                      f"{before} ms before the broker's time {now} "
                                      f"(message.timestamp.before.max.ms)")
                if timestamp - now > after:
                    raise kafka_error(ErrorCode.invalid_timestamp,
                                      f"Timestamp {timestamp} of a record is out of range: it is more than "
                                      f"{after} ms after the broker's time {now} (message.timestamp.after.max.ms)")
