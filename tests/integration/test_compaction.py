"""
Log compaction with real processes: a real ZooKeeper, two kafkatw brokers, a
compacted topic with replication factor 2, librdkafka (confluent-kafka) and
kcat as clients.

Many updates of a few keys are produced; once both brokers' cleaners have
passed, a consumer reading from the beginning sees one record per key below
the active segment, each key's latest value, and offsets with gaps; kcat reads
the same; the follower's log is compacted by its own cleaner.

A librdkafka transactional producer's aborted records leave the compacted
log, and a read-committed consumer still reads each key's last committed
value.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.protocol.records import decode_batches
from kafkatw.storage.log_cleaner import CLEANER_CHECKPOINT_FILE
from kafkatw.storage.log_manager import read_checkpoint
from kafkatw.testing import running_cluster, wait_for

_OVERRIDES = {
    "log.cleaner.backoff.ms": "200",
    "replica.fetch.wait.max.ms": "200",
    "zookeeper.session.timeout.ms": "6000",
}
_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "min.cleanable.dirty.ratio": "0.01",
}
KEYS = 10
UPDATES = 3000


def consume_all(bootstrap: str, topic: str, end: int, timeout_s: float = 60.0) -> list:
    """Every (offset, key, value) of partition 0 up to the one at C{end - 1}."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records = []
    deadline = time.monotonic() + timeout_s
    try:
        while (not records or records[-1][0] < end - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            records.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return records


def cleaned_offset(process, topic: str) -> int:
    """The broker's cleaner-offset-checkpoint entry of C{topic}-0, 0 when none."""
    return read_checkpoint(os.path.join(process.data_dir, CLEANER_CHECKPOINT_FILE)).get((topic, 0), 0)


def disk_records(process, topic: str, below: int) -> list:
    """
    (offset, key, value) of the data records (control batches left out) the
    broker's segment files hold below C{below}.  The cleaner may swap a
    segment between the listing and the read: the listing is then read again
    (bounded).
    """
    for _attempt in range(20):
        out = []
        try:
            for path in sorted(glob.glob(os.path.join(process.data_dir, f"{topic}-0", "*.log"))):
                with open(path, "rb") as f:
                    for batch in decode_batches(f.read()):
                        if not batch.is_control:
                            out.extend((r.offset, r.key, r.value) for r in batch.records if r.offset < below)
        except FileNotFoundError:
            time.sleep(0.25)
            continue
        return out
    raise AssertionError(f"{topic}-0's segments kept changing under the reader")


class CompactionTests(unittest.TestCase):
    timeout = 300

    def test_compacted_topic_replicated_read_from_the_beginning(self) -> None:
        topic = "state"
        with running_cluster(2, _OVERRIDES) as cluster:
            bootstrap = cluster[0].bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, 1, 2, config=_TOPIC_CONFIG)])[topic].result(30)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                 "linger.ms": 5, "batch.num.messages": 20})
            latest = {}
            for i in range(UPDATES):
                key = b"key-%d" % (i % KEYS)
                value = b"%06d:" % i + b"x" * 190
                producer.produce(topic, key=key, value=value)
                latest[key] = value
                if i % 500 == 0:
                    producer.poll(0)
            self.assertEqual(producer.flush(30), 0)

            # a record without a key is refused (Kafka's INVALID_RECORD)
            errors = []
            producer.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
            producer.flush(30)
            self.assertEqual([e.code() for e in errors], [KafkaError.INVALID_RECORD])

            # both brokers' cleaners pass (the follower's on its own log)
            for process in cluster:
                wait_for(lambda p=process: cleaned_offset(p, topic) > UPDATES // 2, 120,
                         f"broker {process.broker_id} to clean {topic}")
            end = UPDATES
            records = consume_all(bootstrap, topic, end)
            offsets = [o for o, _, _ in records]
            self.assertEqual(offsets, sorted(set(offsets)))
            self.assertEqual(offsets[-1], end - 1)
            self.assertLess(len(records), UPDATES // 2)
            self.assertGreater(offsets[0], 0)  # the gaps stay: the log starts at 0, its first record is later
            last = {}
            for _, key, value in records:
                last[key] = value
            self.assertEqual(last, latest)
            for offset, _, value in records:
                self.assertEqual(int(value[:6]), offset)  # offsets never change
            cleaned = min(cleaned_offset(p, topic) for p in cluster)
            below = [k for o, k, _ in records if o < cleaned]
            self.assertEqual(sorted(below), sorted(set(below)))

            # the follower compacted its own files
            for process in cluster:
                on_disk = disk_records(process, topic, cleaned_offset(process, topic))
                keys = [k for _, k, _ in on_disk]
                self.assertEqual(len(keys), len(set(keys)), f"broker {process.broker_id}")

            # kafkatw's own consumer too
            from kafkatw.client.blocking import BlockingConsumer

            with BlockingConsumer(bootstrap) as consumer:
                tp = (topic, 0)
                consumer.assign([tp])
                consumer.seek_to_beginning(tp)
                own = []
                deadline = time.monotonic() + 60
                while consumer.position(tp) < end and time.monotonic() < deadline:
                    own.extend((r.offset, r.key, r.value) for r in consumer.poll(timeout_ms=1000))
            own_offsets = [o for o, _, _ in own]
            self.assertEqual(own_offsets, sorted(set(own_offsets)))
            self.assertEqual({k: v for _, k, v in own}, latest)

            # kcat reads the compacted log too (the cleaner may have gone further meanwhile)
            kcat = shutil.which("kcat") or shutil.which("kafkacat")
            if kcat is not None:
                out = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
                                      "-e", "-q", "-f", "%o %k %s\\n"], capture_output=True, timeout=60,
                                     check=True).stdout
                kcat_records = [line.split(b" ", 2) for line in out.splitlines() if line]
                kcat_offsets = [int(o) for o, _, _ in kcat_records]
                self.assertEqual(kcat_offsets, sorted(set(kcat_offsets)))
                self.assertLessEqual(len(kcat_records), len(records))
                self.assertEqual({k: v for _, k, v in kcat_records}, latest)
                for offset, _, value in kcat_records:
                    self.assertEqual(int(value[:6]), int(offset))


class TransactionalCompactionTests(unittest.TestCase):
    timeout = 300

    def test_aborted_transactions_removed_committed_ones_compacted(self) -> None:
        """
        A librdkafka transactional producer commits every other transaction
        and aborts the others, over the same keys and one key of its own per
        transaction (which only the abort can remove); once the cleaner has
        passed, the segment files below its checkpoint hold no aborted record
        and a read-committed consumer still reads each key's last committed
        value (an aborted write never removed a committed record).
        """
        topic = "txn-state"
        overrides = {**_OVERRIDES, "transaction.state.log.replication.factor": "1",
                     "transaction.state.log.min.isr": "1", "transaction.state.log.num.partitions": "2"}
        with running_cluster(1, overrides) as cluster:
            bootstrap = cluster[0].bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, 1, 1, config=_TOPIC_CONFIG)])[topic].result(30)
            producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "compacting", "linger.ms": 5})
            producer.init_transactions(30)
            committed = {}
            sequence = 0
            for txn in range(40):
                producer.begin_transaction()
                outcome = b"commit" if txn % 2 == 0 else b"abort"
                written = {}
                # a key of its own, never written again: only the abort can remove it
                own_key = b"txn-%d" % txn
                written[own_key] = b"%06d:%s:" % (sequence, outcome)
                sequence += 1
                producer.produce(topic, key=own_key, value=written[own_key])
                for i in range(25):
                    key = b"key-%d" % (i % KEYS)
                    value = b"%06d:%s:" % (sequence, outcome) + b"x" * 150
                    sequence += 1
                    producer.produce(topic, key=key, value=value)
                    written[key] = value
                if txn % 2 == 0:
                    producer.commit_transaction(30)
                    committed.update(written)
                else:
                    self.assertEqual(producer.flush(30), 0)  # on the broker, not purged by the abort
                    producer.abort_transaction(30)

            process = cluster[0]
            wait_for(lambda: cleaned_offset(process, topic) > 700, 120, f"the cleaner to clean {topic}")
            cleaned = cleaned_offset(process, topic)
            below = [v for _, _, v in disk_records(process, topic, cleaned)]
            self.assertFalse([v for v in below if b":abort:" in v])
            # the first committed transactions' own keys stay below the checkpoint
            self.assertIn(committed[b"txn-0"], below)

            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-txn", "enable.auto.commit": False,
                                 "isolation.level": "read_committed", "fetch.wait.max.ms": 100,
                                 "enable.partition.eof": True})
            consumer.assign([TopicPartition(topic, 0, 0)])
            last = {}
            deadline = time.monotonic() + 60
            try:
                while time.monotonic() < deadline:
                    message = consumer.poll(0.2)
                    if message is None:
                        continue
                    if message.error():
                        if message.error().code() == KafkaError._PARTITION_EOF:
                            break
                        continue
                    self.assertNotIn(b":abort:", message.value())
                    last[message.key()] = message.value()
            finally:
                consumer.close()
            self.assertEqual(last, committed)
