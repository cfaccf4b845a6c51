"""
The Produce handler, mixed into L{kafkatw.broker.apis.KafkaApis}
(C{KafkaApis.handleProduceRequest}): appends of record batches to the
leaders' logs, acks 0, 1 and all (the produce purgatory of
L{kafkatw.broker.replica_manager}), and L{ProduceRun}, the Produce requests
read together from one connection's buffer answered with one write per
partition.  Only message format v2 (Produce v3+) is served.

Source: Apache Kafka protocol guide (Produce); KafkaApis.scala.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from twisted.internet import defer

from ..errors import CorruptRecordError, ErrorCode, KafkaError, kafka_error
from ..protocol.batch import HEADER_STRUCT, unpack_header
from ..protocol.messages import RequestHeader, simple_produce_decoder
from ..protocol.produce import encode_produce_response
from ..security.acl import AclOperation
from .partition import LEADER
from .request_context import ConnectionContext, RequestContext

__all__ = ["PRODUCE_VERSIONS", "ProduceApis", "ProduceRun"]

#: a record batch's transactional attribute bit
_TRANSACTIONAL = 0x10

#: Kafka's mapping of a partition verification's errors for the producer (KIP-890): what it can retry,
#: and a fenced producer.
_VERIFICATION_ERRORS = {
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
    ErrorCode.not_coordinator: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_enough_replicas,
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.invalid_producer_id_mapping: ErrorCode.invalid_producer_epoch,
}

#: API key -> (min version, max version) served (message format v2 only: v3+).
PRODUCE_VERSIONS: dict[int, tuple[int, int]] = {0: (3, 9)}

_tuple_new = tuple.__new__

_INT32 = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhih")  # API key, version, correlation id, client id length
#: (version, topic) -> L{_produce_template}
_produce_templates: dict[tuple[int, str], tuple[bytes, struct.Struct, bytes]] = {}


def _produce_template(version: int, topic: str) -> tuple[bytes, struct.Struct, bytes]:
    """
    The ProduceResponse of one partition of C{topic} without error or
    throttle, cut around its partition's fixed fields: C{(the bytes after the
    correlation id and before the partition, the struct of index, error code,
    base offset, log append time (and log start offset, v5+), the bytes
    after them)}, from L{encode_produce_response} (so the same bytes).
    """
    partition_struct = struct.Struct(">ihqqq" if version >= 5 else ">ihqq")
    fields = (0x5A5A5A5A, 0, 0x5A5A5A5A5A5A5A5A, 0x5A5A5A5A5A5A5A5A, 0x5A5A5A5A5A5A5A5A)
    full = encode_produce_response(version, 0, [(topic, [dict(zip(
        ("index", "error_code", "base_offset", "log_append_time", "log_start_offset"), fields))])])
    packed = partition_struct.pack(*(fields if version >= 5 else fields[:4]))
    at = full.rindex(packed)
    template = _produce_templates[(version, topic)] = (full[4:at], partition_struct, full[at + len(packed):])
    return template


class ProduceRun:
    """
    Produce requests read together from one connection (one C{dataReceived}),
    appended with one write per partition: each request's appends assign
    offsets and update the log's indexes, producer state and epoch cache at
    once, and L{finish} writes every partition's batches with one
    C{os.writev}, moves the high watermarks (waking the fetches and acks=all
    produces waiting for them) and only then answers the requests, in order.
    So an acks=1 response is written only once its batches are in the file,
    and a Fetch read after the run sees them.

    Made by L{KafkaApis.produce_run}; used by
    L{kafkatw.broker.network.KafkaConnection}.
    """

    def __init__(self, apis: Any) -> None:
        self._apis = apis
        self._finishers: list[Callable[[dict], Any]] = []
        #: (topic, partition) -> (topic, partition, [records, ...], [result, ...]): the appends
        #: L{queue}d since the last L{append_queued}, and their results once appended.
        self._queued: dict[tuple[str, int], tuple[str, int, list, list]] = {}

    def queue(self, topic: str, partition: int, records: Any) -> tuple[list, int]:
        """
        Queue an append of C{records} to a partition: L{append_queued} makes
        the queued appends of each partition with one call
        (L{kafkatw.broker.replica_manager.ReplicaManager.append_many}).

        @return: C{(results, i)}: C{results[i]} is the append's
            C{AppendResult} or C{KafkaError} once L{append_queued} ran.
        """
        key = (topic, partition)
        entry = self._queued.get(key)
        if entry is None:
            entry = self._queued[key] = (topic, partition, [], [])
        entry[2].append(records)
        return entry[3], len(entry[2]) - 1

    def append_queued(self) -> None:
        """Make the L{queue}d appends (before any other append of the run, and by L{finish})."""
        queued = self._queued
        if not queued:
            return
        self._queued = {}
        append_many = self._apis._append_many
        for topic, partition, records_list, results in queued.values():
            results.extend(append_many(topic, partition, records_list))

    def add(self, finish: Callable[[dict], Any]) -> int:
        """
        Add a request's answer: C{finish(write_errors)} returns it once the
        run is written.

        @return: its index in L{finish}'s list.
        """
        self._finishers.append(finish)
        return len(self._finishers) - 1

    def finish(self) -> list[Any]:
        """
        Write the run's appends, move the high watermarks, and answer.

        @return: each request's answer, in order: C{None} (acks=0), response
            C{bytes}, or a Deferred of them (acks=all).
        """
        apis = self._apis
        self.append_queued()
        errors = apis.replica_manager.write_pending()
        finishers, self._finishers = self._finishers, []
        answers = [finish(errors) for finish in finishers]
        for answer in answers:
            if isinstance(answer, defer.Deferred):
                apis._track(answer)
        return answers


def _appended_entry(index: int, result: Any) -> dict:
    """A ProduceResponse partition entry of an append that succeeded (C{result}: its C{AppendResult})."""
    return {"index": index, "error_code": 0, "base_offset": result.base_offset,
            "log_append_time": result.log_append_time_ms, "log_start_offset": result.log_start_offset}


class ProduceApis:
    """
    The Produce handlers of L{kafkatw.broker.apis.KafkaApis} (a mixin), whose
    counters (C{messages_in}, C{bytes_in}, the per-topic ones), replica
    manager, quotas and authorizer they use.
    """

    def produce_handlers(self) -> dict[int, Any]:
        """API key -> handler, merged into C{KafkaApis}' table."""
        return {0: self.handle_produce}

    def handle_produce(self, context: RequestContext, request: Any, run: "ProduceRun | None" = None) -> Any:
        """
        Append each partition's batches on its leader.  With acks=all the
        answer waits in the produce purgatory until every in-sync replica has
        the batches (or C{timeout} passes: C{REQUEST_TIMED_OUT}); an ISR
        smaller than C{min.insync.replicas} refuses the write before appending
        (C{NOT_ENOUGH_REPLICAS}).

        @param run: the L{ProduceRun} of the Produce requests read together
            with this one: the appends are written by L{ProduceRun.finish},
            which returns what this request is answered with; this call
            returns the request's index in the run (C{None} for acks=0:
            no answer).
        """
        acks = request.acks
        produce_bytes = sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data) \
            if self.quotas.enabled else 0
        required: dict[tuple[str, int], int] = {}
        if request.transactional_id is not None and self._refuse_transactional_produce(context, request):
            code = ErrorCode.transactional_id_authorization_failed
            results = [
                (t.name, [{"index": p.index, "error_code": int(code), "base_offset": -1} for p in t.partition_data])
                for t in request.topic_data
            ]
        else:
            unverified = self._unverified(request) if request.transactional_id is not None else None
            if unverified:
                d = self._produce_verified(context, request, unverified, produce_bytes)
                return d if run is None else run.add(lambda errors: d)
            # acks=0 in a run: nobody reads the partition responses (no quotas there, no answer)
            results = self._produce_append(context, request, required, run is None,
                                           run is None or acks != 0)
        if run is not None:
            if acks == 0 and not produce_bytes:
                return None  # no answer, whatever the write does
            return run.add(lambda errors: self._produce_finish(context, request, results, required, produce_bytes,
                                                               errors))
        return self._produce_finish(context, request, results, required, produce_bytes)

    def _unverified(self, request: Any) -> list[tuple[str, int, int, int, object]]:
        """
        The partitions of a transactional Produce whose batch would start a
        transaction there, to be verified with the transaction coordinator
        first (KIP-890, C{transaction.partition.verification.enable}): led
        here, a transactional batch of a producer with no transaction open
        on the partition at that epoch.  Each gets the producer's
        verification guard on the partition (made if none is under way).

        @return: C{[(topic, partition, producer id, producer epoch, guard), ...]}.
        """
        if self.transactions is None or not self.config["transaction.partition.verification.enable"]:
            return []
        found = []
        partitions = self.replica_manager.partitions
        for topic in request.topic_data:
            for p in topic.partition_data:
                records = p.records
                if not records or len(records) < HEADER_STRUCT.size:
                    continue  # the append answers it
                h = unpack_header(records)
                if h.producer_id < 0 or not h.attributes & _TRANSACTIONAL or h.is_control:
                    continue
                partition = partitions.get((topic.name, p.index))
                if partition is None or partition.role != LEADER or partition.log is None:
                    continue
                state = partition.log.producer_state
                entry = state.get(h.producer_id)
                if entry is not None and entry.epoch == h.producer_epoch and entry.current_txn_first_offset is not None:
                    continue
                guard = state.verification_guards.setdefault(h.producer_id, object())
                found.append((topic.name, p.index, h.producer_id, h.producer_epoch, guard))
        return found

    def _produce_verified(self, context: RequestContext, request: Any,
                          unverified: list[tuple[str, int, int, int, object]], produce_bytes: int) -> defer.Deferred:
        """
        Verify C{unverified} (L{_unverified}) with the transactional id's
        coordinator, then append the request as L{handle_produce} does; a
        partition the coordinator does not place in the producer's ongoing
        transaction, or whose guard a marker dropped meanwhile, is not
        appended: C{INVALID_TXN_STATE} (a late batch of a transaction that
        has ended), C{INVALID_PRODUCER_EPOCH} (another producer id or epoch
        holds the transactional id), or C{NOT_ENOUGH_REPLICAS} (retriable:
        the coordinator could not answer now), as Kafka's
        C{ReplicaManager.appendRecords} maps them for clients.

        @return: a Deferred firing with the answer (see L{_produce_finish}).
        """
        _, _, producer_id, producer_epoch, _ = unverified[0]
        d = self.transactions.verify(request.transactional_id, producer_id, producer_epoch,
                                     [(topic, partition) for topic, partition, _, _, _ in unverified])

        def verified(codes: dict[tuple[str, int], ErrorCode]) -> Any:
            refused: dict[tuple[str, int], ErrorCode] = {}
            partitions = self.replica_manager.partitions
            for topic, index, pid, _, guard in unverified:
                code = codes.get((topic, index), ErrorCode.coordinator_not_available)
                partition = partitions.get((topic, index))
                if code == ErrorCode.none and (partition is None or partition.log is None
                                               or partition.log.producer_state.verification_guards.get(pid)
                                               is not guard):
                    code = ErrorCode.invalid_txn_state  # a marker ended the transaction after the answer
                if code != ErrorCode.none:
                    refused[(topic, index)] = _VERIFICATION_ERRORS.get(code, code)
            required: dict[tuple[str, int], int] = {}
            results = self._produce_append(context, request, required, refused=refused)
            return self._produce_finish(context, request, results, required, produce_bytes)

        return d.addCallback(verified)

    def _produce_append(self, context: RequestContext, request: Any, required: dict[tuple[str, int], int],
                        write: bool = True, answered: bool = True,
                        refused: dict[tuple[str, int], ErrorCode] | None = None) -> list:
        """
        Append a Produce request's partitions (with C{write=False}, see
        L{kafkatw.broker.replica_manager.ReplicaManager.append}); fill
        C{required} (acks=all: the offset each partition's high watermark
        must reach).

        @param answered: C{False}: the partition responses of appended
            partitions are not built (an acks=0 request, answered by nobody).
        @param refused: partitions answered with an error, not appended
            (L{_produce_verified}).
        @return: C{[(topic, [partition response dict, ...]), ...]}.
        """
        results = []
        append = self.replica_manager.append
        min_isr = self.replica_manager.min_insync_replicas if request.acks == -1 else None
        denied = None if self.authorizer is None else \
            self._denied_topics(context, AclOperation.WRITE, (t.name for t in request.topic_data))
        for topic in request.topic_data:
            name = topic.name
            if denied and name in denied:
                results.append((name, [{"index": p.index, "error_code": int(ErrorCode.topic_authorization_failed),
                                        "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
                                       for p in topic.partition_data]))
                continue
            partitions = []
            for p in topic.partition_data:
                records = p.records
                try:
                    if refused and (name, p.index) in refused:
                        code = refused[(name, p.index)]
                        raise kafka_error(code, f"{name}-{p.index}: the transaction coordinator answered"
                                                f" the verification of the batch with {code.name}")
                    if records is None:
                        raise CorruptRecordError("a null record set")
                    result = append(name, p.index, records, min_isr(name) if min_isr is not None else None, write)
                except KafkaError as e:
                    self.failed_produce_requests += 1
                    code = e.error_code
                    partitions.append({"index": p.index, "error_code": int(code), "base_offset": -1,
                                       "log_append_time": -1, "log_start_offset": -1,
                                       "error_message": str(e) or None})
                    continue
                if not result.duplicate:
                    self._count_in(name, result.record_count, len(records))
                if min_isr is not None:
                    required[(name, p.index)] = result.last_offset + 1
                if answered:
                    partitions.append(_appended_entry(p.index, result))
            results.append((name, partitions))
        return results

    def _produce_finish(self, context: RequestContext, request: Any, results: list,
                        required: dict[tuple[str, int], int], produce_bytes: int,
                        write_errors: dict[tuple[str, int], Exception] | None = None) -> Any:
        """
        Answer a Produce request whose appends are in the logs: C{None}
        (acks=0), the response, or a Deferred of it (acks=all).

        @param write_errors: C{(topic, partition)} -> the error of a write
            that failed after the appends (L{ProduceRun}); the partitions
            whose batches it lost are answered with it.
        """
        if write_errors:
            self._fail_unwritten(results, required, write_errors)
        if required:
            timeout = request.timeout
            timeout_ms = int(timeout.total_seconds() * 1000) if hasattr(timeout, "total_seconds") else int(timeout)
            d = self.replica_manager.delay_produce(required, max(timeout_ms, 0))
            return d.addCallback(self._produce_acknowledged, context, results, produce_bytes)
        if request.acks == 0:
            if produce_bytes:
                self._throttle(context, max(self._produce_throttle_ms(context, produce_bytes),
                                            self._request_throttle_ms(context)))
            return None
        return self._produce_response(context, results, produce_bytes)

    def _fail_unwritten(self, results: list, required: dict[tuple[str, int], int],
                        write_errors: dict[tuple[str, int], Exception]) -> None:
        """
        Answer C{KAFKA_STORAGE_ERROR} for the partitions whose appended batches
        a failed write lost: those at or past the log end offset left by it
        (L{kafkatw.storage.log.PartitionLog.write_pending}).
        """
        for name, partitions in results:
            for entry in partitions:
                key = (name, entry["index"])
                error = write_errors.get(key)
                if error is None or entry["error_code"] != 0:
                    continue
                partition = self.replica_manager.partitions.get(key)
                if partition is not None and entry["base_offset"] < partition.log.log_end_offset:
                    continue  # written before the failure
                self.failed_produce_requests += 1
                required.pop(key, None)
                entry.update(error_code=int(ErrorCode.kafka_storage_error), base_offset=-1, log_append_time=-1,
                             log_start_offset=-1, error_message=str(error) or None)

    #: What L{produce_in_run} returns for a request it leaves to L{handle}.
    NOT_SIMPLE = object()

    def produce_in_run(self, frame: Any, connection: ConnectionContext, run: ProduceRun) -> Any:
        """
        L{handle} for a Produce request frame of a L{ProduceRun} of the
        common shape (v3-v9, no transactional id, one topic, one partition;
        no authorizer), its header and body decoded by hand
        (L{simple_produce_decoder}; kio's entities and the request header
        of an acks=0 request are not built, the records stay a view of the
        frame) and its append queued (L{ProduceRun.queue}): the same
        appends, counters and response as L{handle}.  An acks=all request
        is taken only while its partition is led here with an ISR of at
        least C{min.insync.replicas} (else L{handle} answers it); its
        answer then waits in the produce purgatory as L{handle}'s does.

        @return: C{None} (acks=0: no answer), C{(header, index)} (acks 1
            or all: the request's L{RequestHeader} and its index in the
            run's answers), or L{NOT_SIMPLE}: any other request or a frame
            that does not parse (call L{handle}).
        """
        try:
            api_key, version, correlation_id, client_size = _REQUEST_HEADER.unpack_from(frame, 0)
        except struct.error:
            return self.NOT_SIMPLE
        if api_key != 0 or not 3 <= version <= 9 or self.authorizer is not None or self.quotas.enabled:
            return self.NOT_SIMPLE
        body = 10 + client_size if client_size > 0 else 10
        if version >= 9:  # request header v2: tagged fields (none, as clients send it)
            if len(frame) <= body or frame[body] != 0:
                return self.NOT_SIMPLE
            body += 1
        decoded = simple_produce_decoder(frame, body, version >= 9)
        if decoded is None:
            return self.NOT_SIMPLE
        acks, timeout_ms, name, index, records = decoded
        if records is None:
            return self.NOT_SIMPLE
        if acks == -1:
            # the checks of append(..., min_insync_replicas): the run's appends come in this same call
            replica_manager = self.replica_manager
            partition = replica_manager.partitions.get((name, index))
            if (partition is None or partition.role != LEADER
                    or len(partition.isr) < replica_manager.min_insync_replicas(name)):
                return self.NOT_SIMPLE
        elif acks != 0 and acks != 1:
            return self.NOT_SIMPLE
        counts = self.request_counts
        counts[0] = counts.get(0, 0) + 1
        results, i = run.queue(name, index, records)
        if acks == 0:
            return None
        client_id = None if client_size < 0 else str(frame[10:10 + client_size], "utf-8", "replace")
        header = _tuple_new(RequestHeader, (0, version, correlation_id, client_id, body))
        context = _tuple_new(RequestContext, (header, connection))
        if acks == -1:
            return header, run.add(lambda errors: self._produce_acks_all_finish(context, name, index, results[i],
                                                                                timeout_ms, errors))
        return header, run.add(lambda errors: self._produce_acks1_finish(context, name, index, results[i], errors))

    def _produce_acks_all_finish(self, context: RequestContext, topic: str, partition: int, result: Any,
                                 timeout_ms: int, write_errors: dict[tuple[str, int], Exception]) -> Any:
        """
        L{_produce_finish} of an acks=all request of L{produce_in_run}
        (C{result}: its append's): its response, or a Deferred of it that
        waits until the high watermark passes the append.
        """
        if isinstance(result, KafkaError):
            entry = {"index": partition, "error_code": int(result.error_code), "base_offset": -1,
                     "log_append_time": -1, "log_start_offset": -1, "error_message": str(result) or None}
            return self._produce_response(context, [(topic, [entry])])
        required = {(topic, partition): result.last_offset + 1}
        if write_errors:
            results = [(topic, [_appended_entry(partition, result)])]
            self._fail_unwritten(results, required, write_errors)
            if not required:
                return self._produce_response(context, results)
            d = self.replica_manager.delay_produce(required, max(timeout_ms, 0))
            return d.addCallback(self._produce_acknowledged, context, results)
        d = self.replica_manager.delay_produce(required, max(timeout_ms, 0))
        return d.addCallback(self._produce_acks_all_acknowledged, context, topic, partition, result)

    def _produce_acks_all_acknowledged(self, errors: dict, context: RequestContext, topic: str, partition: int,
                                       result: Any) -> bytes:
        """
        L{_produce_acknowledged} of an acks=all request of L{produce_in_run} whose
        append was written: acknowledged without error, the response of
        L{_produce_acks1_finish}'s template (no results built to be encoded).
        """
        if errors.get((topic, partition)) is None:
            return self._produce_acks1_finish(context, topic, partition, result, {})
        return self._produce_acknowledged(errors, context, [(topic, [_appended_entry(partition, result)])])

    def _append_many(self, topic: str, partition: int, records_list: list) -> list:
        """
        Append several requests' records to one partition
        (L{kafkatw.broker.replica_manager.ReplicaManager.append_many}),
        counting them as L{_produce_append} does.

        @return: one C{AppendResult} or C{KafkaError} per item.
        """
        results = self.replica_manager.append_many(topic, partition, records_list)
        count = size = failed = 0
        for records, result in zip(records_list, results):
            if isinstance(result, KafkaError):
                failed += 1
            elif not result.duplicate:
                count += result.record_count
                size += len(records)
        self.failed_produce_requests += failed
        if count or size:
            self._count_in(topic, count, size)
        return results

    def _count_in(self, topic: str, record_count: int, size_bytes: int) -> None:
        """Kafka's BrokerTopicMetrics MessagesInPerSec and BytesInPerSec, broker-wide and for C{topic}."""
        self.messages_in += record_count
        self.bytes_in += size_bytes
        topic_messages_in = self.topic_messages_in
        topic_messages_in[topic] = topic_messages_in.get(topic, 0) + record_count
        topic_bytes_in = self.topic_bytes_in
        topic_bytes_in[topic] = topic_bytes_in.get(topic, 0) + size_bytes

    def _produce_acks1_finish(self, context: RequestContext, topic: str, partition: int, result: Any,
                              write_errors: dict[tuple[str, int], Exception]) -> bytes:
        """L{_produce_finish} of an acks=1 request of L{produce_in_run} (C{result}: its append's)."""
        if not write_errors and not isinstance(result, KafkaError) and not self.quotas.enabled:
            header = context.header
            version = header.api_version
            template = _produce_templates.get((version, topic))
            if template is None:
                template = _produce_template(version, topic)
            prefix, partition_struct, suffix = template
            if version >= 5:
                body = partition_struct.pack(partition, 0, result.base_offset, result.log_append_time_ms,
                                             result.log_start_offset)
            else:
                body = partition_struct.pack(partition, 0, result.base_offset, result.log_append_time_ms)
            return _INT32.pack(header.correlation_id) + prefix + body + suffix
        if isinstance(result, KafkaError):
            entry = {"index": partition, "error_code": int(result.error_code), "base_offset": -1,
                     "log_append_time": -1, "log_start_offset": -1, "error_message": str(result) or None}
        else:
            entry = _appended_entry(partition, result)
        results = [(topic, [entry])]
        if write_errors:
            self._fail_unwritten(results, {}, write_errors)
        return self._produce_response(context, results)

    def produce_run(self) -> "ProduceRun | None":
        """
        A L{ProduceRun} for Produce requests read together from one
        connection, or C{None} when they must be served one by one (client
        quotas are on: a request's throttle mutes the connection before the
        next one is read, KIP-219).
        """
        if self.quotas.enabled:
            return None
        return ProduceRun(self)

    def _produce_acknowledged(self, errors: dict, context: RequestContext, results: list,
                              produce_bytes: int = 0) -> bytes:
        for name, partitions in results:
            for entry in partitions:
                error = errors.get((name, entry["index"]))
                if error is not None and entry["error_code"] == 0:
                    self.failed_produce_requests += 1
                    entry.update(error_code=int(error.error_code), error_message=str(error) or None)
        return self._produce_response(context, results, produce_bytes)

    def _produce_throttle_ms(self, context: RequestContext, produce_bytes: int) -> int:
        """Record a produce request's bytes (C{producer_byte_rate}) and return its bandwidth throttle."""
        quotas = self.quotas
        user, client_id = self._quota_client(context)
        return quotas.produce.record_and_get_throttle_time_ms(user, client_id, produce_bytes, quotas.now_ms())

    def _produce_response(self, context: RequestContext, results: list, produce_bytes: int = 0) -> bytes:
        """The ProduceResponse, encoded by hand (L{encode_produce_response}); quotas as L{_respond}."""
        throttle_ms = self._produce_throttle_ms(context, produce_bytes) if produce_bytes else 0
        if self.quotas.enabled:
            throttle_ms = max(throttle_ms, self._request_throttle_ms(context))
            self._throttle(context, throttle_ms)
        return encode_produce_response(context.api_version, context.correlation_id, results, throttle_ms)

    # --- Fetch ---------------------------------------------------------------

