"""
Partition logs on disk: segments of RecordBatch v2 exactly as on the wire,
sparse offset and time indexes, flush, retention and recovery (docs/design.md: On disk as on the wire).
No Twisted reactor here; time is injected as C{now_ms} callables.
"""

from kafkatw.storage.index import OffsetIndex, TimeIndex
from kafkatw.storage.leader_epoch import EpochEntry, LeaderEpochCache
from kafkatw.storage.log import AppendResult, FileRegion, PartitionLog, UnexpectedAppendOffsetError
from kafkatw.storage.log_config import LogConfig
from kafkatw.storage.log_manager import LogManager
from kafkatw.storage.producer_state import ProducerStateManager
from kafkatw.storage.segment import LogSegment

__all__ = [
    "AppendResult",
    "EpochEntry",
    "FileRegion",
    "LeaderEpochCache",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "OffsetIndex",
    "PartitionLog",
    "ProducerStateManager",
    "TimeIndex",
    "UnexpectedAppendOffsetError",
]
