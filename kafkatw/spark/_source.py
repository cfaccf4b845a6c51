"""
The C{kafkatw} PySpark data source (docs/design.md: Spark): batch and streaming reads
of kafkatw (or any Kafka) topics with the options and output schema of
Spark's built-in Kafka source.

Where the code runs
===================

  - On the driver (Spark's Python planner and streaming-source workers):
    option parsing, topic/partition discovery and offset look-ups through
    L{BlockingAdminClient} (the Twisted admin client on this process's
    reactor thread), which follows leaders as they move.
  - On executors (Spark's Python workers): L{_read_range} reads exactly one
    offset range C{[start, end)} of one partition through L{BlockingConsumer},
    which runs its own reactor thread per process (fork-safe).

Nothing holding a socket is kept on the reader objects: Spark pickles them to
the executors.

Data loss
=========

An offset needed by a micro-batch may be gone: retention deleted it (it is
below the partition's log start offset), or the log was truncated below it.
With C{failOnDataLoss=true} (the default, as Spark's) the query fails with a
L{DataLossError} naming the topic, partition and offsets; with C{false} the
reader skips to the first offset still there and logs what was skipped.
Checked on the driver when a batch is planned and again on the executor when
it is read (retention may run in between).
"""

from __future__ import annotations

import bisect
import gc
import itertools
import operator
import re
import sys
import time
from typing import Any, Iterator, NamedTuple, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)
from twisted.logger import Logger

from ._options import (
    EARLIEST, LATEST, OffsetSpec, SourceOptions, TriggerDelay, from_json, parse_options, rate_limit, split_ranges,
    to_json,
)

__all__ = ["KafkatwDataSource", "KafkaInputPartition", "DataLossError", "kafka_schema"]

_log = Logger()

TopicPartition = tuple[str, int]


class DataLossError(RuntimeError):
    """Offsets a query needed are gone (retention or truncation) and C{failOnDataLoss} is true."""


def kafka_schema(include_headers: bool = False) -> StructType:
    """The output schema of Spark's Kafka source (C{KafkaRecordToRowConverter})."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def _warn(message: str) -> None:
    """
    Log C{message}; also to stderr, which Spark keeps in the driver's and
    executors' logs (Spark's Python workers start no Twisted log observer).
    """
    _log.warn("{message}", message=message)
    print(f"kafkatw.spark: {message}", file=sys.stderr, flush=True)


def _data_loss(options: SourceOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(message + ". Some data may have been lost because it is no longer available in"
                            " kafkatw (retention deleted it or the log was truncated). If you want the query to"
                            " skip ahead instead of failing, set the source option failOnDataLoss to false.")
    _warn(message + "; skipping ahead (failOnDataLoss=false)")


# --- driver side: metadata and offsets through the blocking admin client ----------------


class _Admin:
    """Topic discovery and offset look-ups for one call (opens and closes its connections)."""

    def __init__(self, options: SourceOptions) -> None:
        from ..client.blocking import BlockingAdminClient

        self.options = options
        settings = {"client_id": "kafkatw-spark-driver", **dict(options.admin_config)}
        self.client = BlockingAdminClient(options.bootstrap_servers, security=options.security, **settings)

    def __enter__(self) -> "_Admin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.client.close()

    def topic_partitions(self) -> list[TopicPartition]:
        """The partitions the options name now (subscribe: existing topics only)."""
        o = self.options
        if o.assign is not None:
            return sorted(set(o.assign))
        # subscribe: the topics that exist now (a missing one is not an error)
        topics = self.client.describe_topics(None)
        pattern = re.compile(o.subscribe_pattern) if o.subscribe_pattern else None
        wanted = set(o.subscribe) if o.subscribe is not None else None
        out = []
        for name, topic in topics.items():
            if wanted is not None and name not in wanted:
                continue
            if pattern is not None and (topic.is_internal or name.startswith("__") or not pattern.fullmatch(name)):
                continue
            out.extend((name, p.partition) for p in topic.partitions)
        return sorted(out)

    def offsets(self, tps: Sequence[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """C{timestamp}: -2 earliest (log start offset), -1 latest (high watermark), else ms (-1: none)."""
        return self.lookup({tp: timestamp for tp in tps})

    def lookup(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """One ListOffsets look-up per leader for C{timestamps} (partition -> timestamp)."""
        if not timestamps:
            return {}
        isolation = 1 if self.options.isolation_level == "read_committed" else 0  # latest: the LSO
        return {tp: info.offset for tp, info in self.client.list_offsets(timestamps, isolation_level=isolation).items()}

    def resolve(self, spec: OffsetSpec, tps: Sequence[TopicPartition], what: str) -> dict[TopicPartition, int]:
        """Concrete offsets for C{spec} on C{tps}."""
        if spec.kind == "earliest":
            return self.offsets(tps, EARLIEST)
        if spec.kind == "latest":
            return self.offsets(tps, LATEST)
        if spec.kind == "offsets":
            missing = set(tps) - set(spec.offsets)
            if missing and self.options.assign is None:
                raise ValueError(f"{what}Offsets names no offset for {sorted(missing)}: give every partition"
                                 f" of the subscribed topics")
            out = {tp: spec.offsets.get(tp, EARLIEST) for tp in tps}
            out.update(self.lookup({tp: offset for tp, offset in out.items() if offset < 0}))
            return out
        timestamps = ({tp: spec.timestamp_ms for tp in tps} if spec.kind == "timestamp" else spec.timestamps)
        for tp in tps:
            if tp not in timestamps:
                raise ValueError(f"{what}OffsetsByTimestamp names no timestamp for {tp[0]}-{tp[1]}")
        out = self.lookup({tp: int(timestamps[tp]) for tp in tps})
        for tp in sorted(tp for tp, offset in out.items() if offset < 0):
            if what == "starting" and self.options.timestamp_strategy == "error":
                raise ValueError(
                    f"no record of {tp[0]}-{tp[1]} has a timestamp at or after {timestamps[tp]} ms"
                    f" (set startingOffsetsByTimestampStrategy=latest to start at the end instead)")
        out.update(self.lookup({tp: LATEST for tp, offset in out.items() if offset < 0}))
        return out


class KafkaInputPartition(InputPartition):
    """
    One offset range C{[start, end)} of one topic-partition: picklable, read on
    an executor by L{_read_range}.
    """

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _plan(options: SourceOptions, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int],
          admin: _Admin) -> list[KafkaInputPartition]:
    """
    The input partitions reading C{[starts, ends)}; partitions missing from
    C{starts} (new since the start was chosen) start at their log start offset.
    Checks for data loss against the log start offsets.
    """
    todo = [tp for tp, end in ends.items() if starts.get(tp, 0) < end or tp not in starts]
    if not todo:
        return []
    earliest = admin.offsets(todo, EARLIEST)
    ranges = []
    for tp in sorted(todo):
        end = ends[tp]
        start = starts.get(tp, earliest[tp])
        if start < earliest[tp]:
            _data_loss(options, f"{tp[0]}-{tp[1]}: offsets [{start}, {earliest[tp]}) were needed but the log"
                                f" now starts at {earliest[tp]}")
            start = min(earliest[tp], end)
        if end > start:
            ranges.append((tp[0], tp[1], start, end))
    return [KafkaInputPartition(*r) for r in split_ranges(ranges, options.max_records_per_partition,
                                                          options.min_partitions)]


# --- executor side --------------------------------------------------------------------


_ARROW_SCHEMAS: dict[bool, Any] = {}


def _arrow_schema(include_headers: bool) -> Any:
    """The Arrow form of L{kafka_schema}, as PySpark converts it (timestamps: us, UTC)."""
    schema = _ARROW_SCHEMAS.get(include_headers)
    if schema is None:
        import pyarrow as pa

        fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
                  ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
                  ("timestampType", pa.int32())]
        if include_headers:
            fields.append(("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
        schema = _ARROW_SCHEMAS[include_headers] = pa.schema(fields)
    return schema


_OFFSET = operator.attrgetter("offset")
_KEY = operator.attrgetter("key")
_VALUE = operator.attrgetter("value")
_TIMESTAMP = operator.attrgetter("timestamp_ms")
_TIMESTAMP_TYPE = operator.attrgetter("timestamp_type")
_HEADERS = operator.attrgetter("headers")
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)


def _to_arrow(records: list, start: int, end: int, include_headers: bool) -> Any:
    """
    The records of C{records} (one partition's L{ConsumerRecord}s, in offset
    order) with offsets in C{[start, end)} as one Arrow record batch (None if
    there are none).

    The path of L{_fetched_to_arrow} for what the compiled
    C{fetched_columns} leaves to Python (no accelerator, read-committed data
    with aborted transactions, data it declines): L{_python_columns} builds
    the columns.
    """
    import pyarrow as pa

    if not records:
        return None
    lo, hi = 0, len(records)
    if records[0].offset < start:
        lo = bisect.bisect_left(records, start, key=_OFFSET)
    if records[-1].offset >= end:
        hi = bisect.bisect_left(records, end, lo, key=_OFFSET)
    if lo >= hi:
        return None
    schema = _arrow_schema(include_headers)
    return pa.RecordBatch.from_arrays(_python_columns(records[lo:hi], include_headers, schema), schema=schema)


def _wrap_columns(parts: tuple, n: int, topic: str, partition: int, include_headers: bool, schema: Any) -> list:
    """
    The Arrow columns of C{n} rows over the buffers of
    C{_speedups.fetched_columns} (C{parts}), without a copy.
    """
    import pyarrow as pa

    key, value, offsets, stamps, types, headers = parts
    columns = [
        _binary_array(pa.binary(), n, key),
        _binary_array(pa.binary(), n, value),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(schema.field("timestamp").type, n, [None, pa.py_buffer(stamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(types)]),
    ]
    if include_headers:
        bounds, header_keys, header_values = headers
        count = len(header_keys[2]) // 4 - 1
        list_type = schema.field("headers").type
        entries = pa.Array.from_buffers(list_type.value_type, count, [None], children=[
            _binary_array(pa.string(), count, header_keys), _binary_array(pa.binary(), count, header_values)])
        columns.append(pa.Array.from_buffers(list_type, n, [None, pa.py_buffer(bounds)], children=[entries]))
    return columns


class _Fetched(NamedTuple):
    """
    One piece of a partition's fetched data, not decoded: what the source's
    consumer returns (L{_undecoded}); L{_fetched_to_arrow} decodes it.

    @ivar offset: C{next_offset - 1} (item 2: where the consumer's position
        arithmetic looks for an offset).
    @ivar next_offset: the offset after its last complete batch.
    """

    topic: str
    partition: int
    offset: int
    data: bytes
    fetch_offset: int
    next_offset: int
    verify_crc: bool
    aborted: Any


def _undecoded(data: Any, topic: str, partition: int, fetch_offset: int, record_class: type, verify_crc: bool,
               aborted: Any) -> tuple[list, int]:
    """The consumer's C{record_decoder} for the source: the data as one L{_Fetched}, decoded later."""
    from ..protocol.records import scan_next_offset

    if not isinstance(data, bytes):
        data = bytes(data)
    next_offset = scan_next_offset(data, fetch_offset)
    return [_Fetched(topic, partition, next_offset - 1, data, fetch_offset, next_offset, verify_crc,
                     aborted)], next_offset


def _fetched_to_arrow(fetched: _Fetched, start: int, end: int, include_headers: bool) -> Any:
    """
    The records of C{fetched} that the consumer would return (as
    L{kafkatw.protocol.records.decode_fetched} decodes them) with offsets in
    C{[start, end)}, as one Arrow record batch (None if there are none).

    With the compiled accelerator the columns are decoded straight from the
    fetched bytes (C{_speedups.fetched_columns}), with no Python object per
    record; else, or when it declines (errors included, which the Python
    path raises: L{kafkatw.errors.CorruptRecordError}, ...), through
    L{ConsumerRecord}s and L{_to_arrow}.
    """
    from ..client.consumer import ConsumerRecord
    from ..protocol import records as _records

    sp = _records._speedups
    if sp is not None and not fetched.aborted:
        parts = sp.fetched_columns(fetched.data, fetched.fetch_offset, start, end, include_headers,
                                   fetched.verify_crc, _records.crc32c, _records.decompress)
        if parts is not NotImplemented:
            n = len(parts[2]) // 8
            if not n:
                return None
            import pyarrow as pa

            schema = _arrow_schema(include_headers)
            return pa.RecordBatch.from_arrays(
                _wrap_columns(parts, n, fetched.topic, fetched.partition, include_headers, schema), schema=schema)
    records, _ = _records.decode_fetched(fetched.data, fetched.topic, fetched.partition, fetched.fetch_offset,
                                         ConsumerRecord, fetched.verify_crc, fetched.aborted)
    return _to_arrow(records, start, end, include_headers)


def _binary_array(type: Any, n: int, parts: tuple) -> Any:
    """A binary or string array of C{n} items from C{(validity or None, null count, offsets, data)}."""
    import pyarrow as pa

    validity, nulls, offsets, data = parts
    return pa.Array.from_buffers(type, n, [None if validity is None else pa.py_buffer(validity),
                                           pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _python_columns(chosen: list, include_headers: bool, schema: Any) -> list:
    """
    The columns of L{_to_arrow} for C{chosen}, column by column, with no
    Python object per record made here: the topic and partition columns
    repeat one value, the timestamps are scaled by Arrow, and the headers are
    one flat list of keys and one of values cut by offsets.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(chosen)
    first = chosen[0]
    timestamps = pc.multiply(pa.array(map(_TIMESTAMP, chosen), pa.int64(), size=n), 1000)
    columns = [
        pa.array(map(_KEY, chosen), pa.binary(), size=n),
        pa.array(map(_VALUE, chosen), pa.binary(), size=n),
        pa.repeat(pa.scalar(first.topic, pa.string()), n),
        pa.repeat(pa.scalar(first.partition, pa.int32()), n),
        pa.array(map(_OFFSET, chosen), pa.int64(), size=n),
        timestamps.cast(pa.timestamp("us", tz="UTC")),
        pa.array(map(_TIMESTAMP_TYPE, chosen), pa.int32(), size=n),
    ]
    if include_headers:
        headers = list(map(_HEADERS, chosen))
        bounds = pa.array(itertools.accumulate(map(len, headers), initial=0), pa.int32(), size=n + 1)
        flat = list(itertools.chain.from_iterable(headers))
        entries = pa.StructArray.from_arrays(
            [pa.array(map(_FIRST, flat), pa.string(), size=len(flat)),
             pa.array(map(_SECOND, flat), pa.binary(), size=len(flat))], fields=list(schema.field("headers").type.value_type))
        columns.append(pa.ListArray.from_arrays(bounds, entries, type=schema.field("headers").type))
    return columns


def _freeze_worker_objects() -> None:
    """
    Once per process, before its first read: C{gc.freeze()}, so that the
    cyclic garbage collector no longer walks the objects the process holds
    by then (the modules of PySpark, pyarrow, Twisted and kafkatw, about
    100,000 objects) in each of its full collections.

    Spark's Python workers are long-lived (C{spark.python.worker.reuse}),
    and their read path allocates enough for Python to run full collections
    often: in the log pipeline's bench those took about a third of the
    workers' CPU (0.6 of 1.8 µs of Python per line).  Objects made later
    are collected as usual; the frozen ones are never freed, as modules are
    not anyway.
    """
    if not gc.get_freeze_count():
        gc.freeze()


def _read_range(options: SourceOptions, part: KafkaInputPartition) -> Iterator[Any]:
    """
    Yield the rows of C{part} as Arrow record batches (one per piece of
    fetched data, up to the consumer's C{max_partition_fetch_bytes}): exactly
    the records with offsets in C{[start, end)}, stopping at C{end} even when
    more exist.  The consumer hands the fetched bytes over undecoded
    (L{_undecoded}); L{_fetched_to_arrow} decodes them into the columns.
    The process's objects are frozen first (L{_freeze_worker_objects}).

    @raise DataLossError: records in the range are gone and C{failOnDataLoss}.
    """
    from ..client.blocking import BlockingConsumer
    from ..errors import OffsetOutOfRangeError

    tp = (part.topic, part.partition)
    start, end = part.start, part.end
    if start >= end:
        return
    _freeze_worker_objects()
    headers = options.include_headers
    settings = {"client_id": "kafkatw-spark-executor", **dict(options.consumer_config)}
    consumer = BlockingConsumer(options.bootstrap_servers, auto_offset_reset="none", max_poll_records=1,
                                security=options.security, isolation_level=options.isolation_level,
                                record_decoder=_undecoded, **settings)
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        idle_ms = 0
        while True:
            try:
                pieces = consumer.poll(timeout_ms=1000)
            except OffsetOutOfRangeError:
                earliest = consumer.beginning_offsets([tp])[tp]
                _data_loss(options, f"{tp[0]}-{tp[1]}: offsets [{start}, {min(earliest, end)}) of the range"
                                    f" [{part.start}, {end}) were needed but the log now starts at {earliest}")
                if earliest >= end:
                    return
                start = earliest
                consumer.seek(tp, earliest)
                continue
            if not pieces:
                if consumer.position(tp) >= end:
                    return
                idle_ms += 1000
                high = consumer.end_offsets([tp])[tp]
                if high < end and consumer.position(tp) >= high:
                    _data_loss(options, f"{tp[0]}-{tp[1]}: offsets [{max(high, start)}, {end}) were planned but"
                                        f" the log now ends at {high}")
                    return
                if idle_ms >= options.poll_timeout_ms:
                    raise TimeoutError(f"{tp[0]}-{tp[1]}: no records at offset {consumer.position(tp)} within"
                                       f" {options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)")
                continue
            idle_ms = 0
            for fetched in pieces:
                batch = _fetched_to_arrow(fetched, start, end, headers)
                if batch is not None:
                    yield batch
                if fetched.next_offset >= end:
                    return
                start = max(start, fetched.next_offset)
    finally:
        consumer.close()


# --- the Spark classes ----------------------------------------------------------------


class KafkatwBatchReader(DataSourceReader):
    """C{spark.read.format("kafkatw")}: offsets resolved once, when the query is planned."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        with _Admin(o) as admin:
            tps = admin.topic_partitions()
            starts = admin.resolve(o.starting, tps, "starting")
            ends = admin.resolve(o.ending, tps, "ending")
            for tp in tps:
                if starts[tp] > ends[tp]:
                    raise ValueError(f"{tp[0]}-{tp[1]}: the starting offset {starts[tp]} is after the ending"
                                     f" offset {ends[tp]}")
            planned = _plan(o, starts, ends, admin)
        # Spark refuses a reader with no partitions; an empty range reads nothing.
        return planned or [KafkaInputPartition("", 0, 0, 0)]

    def read(self, partition: KafkaInputPartition) -> Iterator[Any]:
        return _read_range(self.options, partition)


class KafkatwStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """
    C{spark.readStream.format("kafkatw")}: micro-batches of offset ranges,
    offsets C{{topic: {partition: offset}}} in Spark's checkpoint.

    @param clock: the time in seconds, for C{minOffsetsPerTrigger} and
        C{maxTriggerDelay} (L{TriggerDelay}).
    """

    def __init__(self, options: SourceOptions, clock: Any = time.monotonic) -> None:
        self.options = options
        self._available_now: dict[TopicPartition, int] | None = None
        self._trigger_delay = (None if options.min_offsets_per_trigger is None else
                               TriggerDelay(options.min_offsets_per_trigger, options.max_trigger_delay_ms, clock))

    def initialOffset(self) -> dict:
        with _Admin(self.options) as admin:
            tps = admin.topic_partitions()
            return to_json(admin.resolve(self.options.starting, tps, "starting"))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with _Admin(self.options) as admin:
            self._available_now = admin.offsets(admin.topic_partitions(), LATEST)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """
        The end of the next micro-batch: the latest offsets, capped by
        C{trigger(availableNow=True)}'s and by C{limit} (C{maxOffsetsPerTrigger});
        C{start} itself (no micro-batch) while C{minOffsetsPerTrigger} delays it
        (L{TriggerDelay}; never under C{availableNow}, whose query would end
        with the records below the minimum unread, as PySpark's C{ReadMinRows}
        warns).
        """
        starts = from_json(start)
        with _Admin(self.options) as admin:
            tps = admin.topic_partitions()
            latest = admin.offsets(tps, LATEST)
            new = [tp for tp in tps if tp not in starts]
            full_start = dict(starts)
            if new:
                full_start.update(admin.offsets(new, EARLIEST))
        gone = set(starts) - set(latest)
        if gone:
            _data_loss(self.options, f"partitions {sorted(gone)} were being read but no longer exist")
        if self._available_now is not None:
            latest = {tp: min(end, self._available_now.get(tp, full_start[tp])) for tp, end in latest.items()}
        elif self._trigger_delay is not None and self._trigger_delay.delay(full_start, latest):
            return to_json(starts)
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, full_start, latest)
        # never go back: a truncated log is data loss, found when the batch is planned
        # (partitions that are gone are dropped from here on: with failOnDataLoss=true we raised above)
        end = {tp: max(offset, starts.get(tp, offset)) for tp, offset in latest.items()}
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        with _Admin(self.options) as admin:
            return to_json(admin.offsets(admin.topic_partitions(), LATEST))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        with _Admin(self.options) as admin:
            return _plan(self.options, from_json(start), from_json(end), admin)

    def read(self, partition: KafkaInputPartition) -> Iterator[Any]:
        return _read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in kafkatw."""


class KafkatwDataSource(DataSource):
    """
    The data source C{kafkatw}; see the module docstring and docs/spark.md.
    """

    @classmethod
    def name(cls) -> str:
        return "kafkatw"

    def _headers(self) -> bool:
        value = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return str(value).strip().lower() == "true"

    def schema(self) -> StructType:
        return kafka_schema(self._headers())

    def _parse(self, streaming: bool) -> SourceOptions:
        options = parse_options(self.options, streaming=streaming)
        if options.ignored_kafka_options:
            _warn(f"options {', '.join(options.ignored_kafka_options)} ignored: kafkatw's clients have no such"
                  f" setting (docs/spark.md lists the kafka.* options that pass through)")
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkatwBatchReader(self._parse(streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkatwStreamReader(self._parse(streaming=True))
