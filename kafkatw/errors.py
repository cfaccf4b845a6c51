"""
Kafka error codes and the exceptions that carry them.

The codes are Apache Kafka's own (the protocol guide's "Error Codes" table), taken
from kio's generated L{ErrorCode} enum so that names and numbers never drift from
Kafka's.  Code raises L{KafkaError} subclasses; handlers turn them into the
C{error_code} field of a response.
"""

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode",
    "KafkaError",
    "CorruptRecordError",
    "InvalidRecordError",
    "OffsetOutOfRangeError",
    "UnknownTopicOrPartitionError",
    "NotLeaderOrFollowerError",
    "RecordTooLargeError",
    "DuplicateSequenceError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "TopicAlreadyExistsError",
    "InvalidTopicError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidConfigError",
    "CoordinatorNotAvailableError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "NotEnoughReplicasError",
    "NotEnoughReplicasAfterAppendError",
    "FencedLeaderEpochError",
    "UnknownLeaderEpochError",
    "kafka_error",
    "raise_for_error",
]


class KafkaError(Exception):
    """
    An error that maps to one Kafka error code.

    @cvar error_code: the L{ErrorCode} a response carries for this error.
    @ivar error_message: the text a response carried with the code (e.g.
        ElectLeaders' per-partition C{error_message}), when a client made
        this error from one; None when there was none.
    """

    error_code: ErrorCode = ErrorCode.unknown_server_error
    error_message: str | None = None

    @property
    def retriable(self) -> bool:
        return bool(self.error_code.retriable)


def _error(name: str, code: ErrorCode) -> type[KafkaError]:
    return type(name, (KafkaError,), {"error_code": code, "__doc__": f"Kafka error {code.name} ({int(code)})."})


CorruptRecordError = _error("CorruptRecordError", ErrorCode.corrupt_message)
InvalidRecordError = _error("InvalidRecordError", ErrorCode.invalid_record)
OffsetOutOfRangeError = _error("OffsetOutOfRangeError", ErrorCode.offset_out_of_range)
UnknownTopicOrPartitionError = _error("UnknownTopicOrPartitionError", ErrorCode.unknown_topic_or_partition)
NotLeaderOrFollowerError = _error("NotLeaderOrFollowerError", ErrorCode.not_leader_or_follower)
RecordTooLargeError = _error("RecordTooLargeError", ErrorCode.message_too_large)
DuplicateSequenceError = _error("DuplicateSequenceError", ErrorCode.duplicate_sequence_number)
OutOfOrderSequenceError = _error("OutOfOrderSequenceError", ErrorCode.out_of_order_sequence_number)
InvalidProducerEpochError = _error("InvalidProducerEpochError", ErrorCode.invalid_producer_epoch)
TopicAlreadyExistsError = _error("TopicAlreadyExistsError", ErrorCode.topic_already_exists)
InvalidTopicError = _error("InvalidTopicError", ErrorCode.invalid_topic_exception)
InvalidPartitionsError = _error("InvalidPartitionsError", ErrorCode.invalid_partitions)
InvalidReplicationFactorError = _error("InvalidReplicationFactorError", ErrorCode.invalid_replication_factor)
InvalidConfigError = _error("InvalidConfigError", ErrorCode.invalid_config)
CoordinatorNotAvailableError = _error("CoordinatorNotAvailableError", ErrorCode.coordinator_not_available)
KafkaStorageError = _error("KafkaStorageError", ErrorCode.kafka_storage_error)
LeaderNotAvailableError = _error("LeaderNotAvailableError", ErrorCode.leader_not_available)
NotEnoughReplicasError = _error("NotEnoughReplicasError", ErrorCode.not_enough_replicas)
NotEnoughReplicasAfterAppendError = _error("NotEnoughReplicasAfterAppendError",
                                           ErrorCode.not_enough_replicas_after_append)
FencedLeaderEpochError = _error("FencedLeaderEpochError", ErrorCode.fenced_leader_epoch)
UnknownLeaderEpochError = _error("UnknownLeaderEpochError", ErrorCode.unknown_leader_epoch)


def kafka_error(code: ErrorCode, message: str = "") -> KafkaError:
    """A L{KafkaError} carrying C{code}, for codes without a class of their own."""
    error = KafkaError(message)
    error.error_code = code
    return error


def raise_for_error(code: int, what: str, message: str | None = None) -> None:
    """
    @raise KafkaError: carrying C{code} (with C{what} and C{message} in its
        text) unless C{code} is C{NONE}.
    """
    code = ErrorCode(int(code))
    if code != ErrorCode.none:
        text = f"{what}: {code.name} ({int(code)})"
        if message:
            text += f": {message}"
        raise kafka_error(code, text)
