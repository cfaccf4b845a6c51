"""
The admin tools against real brokers: DeleteRecords on a two-broker cluster
(RF=2: the follower's log start moves too) through C{kafkatw delete-records}
and confluent-kafka's C{AdminClient.delete_records}, kcat reading from the new
log start, ListOffsets v7's max timestamp (C{kafkatw get-offsets --time -3}
and C{OffsetSpec.max_timestamp()}), C{kafkatw log-dirs --describe},
C{kafkatw consumer-groups --delete-offsets} after a confluent-kafka consumer
committed, and C{kafkatw dump-log} over a broker's segment.

The tools run as subprocesses (C{python -m kafkatw.cli.main}), as an
operator runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from twisted.trial import unittest

from kafkatw.testing import running_cluster
from tests.integration.test_admin_tools import kafkatw
from tests.integration.test_replication import create_topic, partition_info, wait_for

_OVERRIDES = {
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "zookeeper.session.timeout.ms": "3000",
    "auto.leader.rebalance.enable": "false",
}


def produce(bootstrap: str, topic: str, partition: int, count: int, start_ts: int = 1_700_000_000_000) -> None:
    """C{count} records, one batch each (flushed one by one), timestamps C{start_ts + i}."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=partition, timestamp=start_ts + i)
        producer.flush(10)


def kcat_offsets(bootstrap: str, topic: str, partition: int) -> list[int]:
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", "beginning",
                          "-e", "-q", "-f", "%o\\n"], capture_output=True, text=True, timeout=60, check=True)
    return [int(line) for line in out.stdout.split()]


class AdminApiToolsTests(unittest.TestCase):
    timeout = 300

    def test_admin_tools_on_a_replicated_topic(self) -> None:
        with running_cluster(2, overrides={**_OVERRIDES, "log.segment.bytes": "400"}) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, "dr", partitions=2, rf=2)
            wait_for(lambda: all(len((partition_info(bootstrap, "dr", p) or (-1, [], []))[2]) == 2
                                 for p in (0, 1)), what="a full ISR")
            produce(bootstrap, "dr", 0, 20)
            produce(bootstrap, "dr", 1, 5)

            # get-offsets: latest, earliest, max timestamp (the records' timestamps grow: the last one)
            self.assertEqual(kafkatw("get-offsets", "--bootstrap-server", bootstrap, "--topic", "dr").stdout,
                             "dr:0:20\ndr:1:5\n")
            result = kafkatw("get-offsets", "--bootstrap-server", bootstrap, "--topic", "d.", "--partitions", "0",
                             "--time", "-3")
            self.assertEqual((result.returncode, result.stdout), (0, "dr:0:19\n"), result.stderr)

            # kafka-delete-records.sh's JSON and output; the follower applies the new log start
            path = os.path.join(tempfile.mkdtemp(), "offsets.json")
            with open(path, "w") as f:
                json.dump({"partitions": [{"topic": "dr", "partition": 0, "offset": 12},
                                          {"topic": "dr", "partition": 1, "offset": 9}], "version": 1}, f)
            result = kafkatw("delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", path)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.stdout.splitlines(), [
                "Executing records delete operation", "Records delete operation completed:",
                "partition: dr-0\tlow_watermark: 12",
                "partition: dr-1\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: The requested "
                "offset is not within the range of offsets maintained by the server."])
            for broker in cluster:  # whole segments below 12 are gone on both replicas
                directory = os.path.join(broker.data_dir, "dr-0")
                bases = sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log"))
                self.assertGreater(bases[0], 0)
                self.assertLessEqual(bases[0], 12)
            self.assertEqual(kafkatw("get-offsets", "--bootstrap-server", bootstrap, "--topic", "dr", "--time",
                                     "earliest").stdout, "dr:0:12\ndr:1:0\n")
            self.assertEqual(kcat_offsets(bootstrap, "dr", 0), list(range(12, 20)))

            # confluent-kafka's AdminClient: delete_records and the max timestamp (KIP-734)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            futures = admin.delete_records([TopicPartition("dr", 1, 3)])
            deleted = futures[TopicPartition("dr", 1, 3)].result(30)
            self.assertEqual(deleted.low_watermark, 3)
            futures = admin.list_offsets({TopicPartition("dr", 0): OffsetSpec.max_timestamp()})
            info = list(futures.values())[0].result(30)
            self.assertEqual((info.offset, info.timestamp), (19, 1_700_000_000_019))
            self.assertEqual(kcat_offsets(bootstrap, "dr", 1), [3, 4])

            # log-dirs: Kafka's JSON, both brokers, both partitions
            result = kafkatw("log-dirs", "--bootstrap-server", bootstrap, "--describe", "--topic-list", "dr")
            self.assertEqual(result.returncode, 0, result.stderr)
            lines = result.stdout.splitlines()
            self.assertEqual(lines[:2], ["Querying brokers for log directories information",
                                         "Received log directory information from brokers 0,1"])
            described = json.loads(lines[2])
            self.assertEqual([b["broker"] for b in described["brokers"]], [0, 1])
            for broker, found in zip(cluster, described["brokers"]):
                [log_dir] = found["logDirs"]
                self.assertEqual((log_dir["logDir"], log_dir["error"]), (broker.data_dir, None))
                self.assertEqual(sorted(p["partition"] for p in log_dir["partitions"]), ["dr-0", "dr-1"])
                self.assertTrue(all(p["size"] > 0 and p["offsetLag"] == 0 and p["isFuture"] is False
                                    for p in log_dir["partitions"]))

            # consumer-groups --delete-offsets after a consumer committed and left
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "od", "enable.auto.commit": False})
            consumer.assign([TopicPartition("dr", 0, 12), TopicPartition("dr", 1, 3)])
            consumer.commit(offsets=[TopicPartition("dr", 0, 15), TopicPartition("dr", 1, 4)], asynchronous=False)
            consumer.close()
            result = kafkatw("consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets", "--group", "od",
                             "--topic", "dr:0")
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.stdout.splitlines(), [
                "Request succeed for deleting offsets with topic dr group od", "",
                "TOPIC                          PARTITION       STATUS         ",
                "dr                             0               Successful     "])
            check = Consumer({"bootstrap.servers": bootstrap, "group.id": "od"})
            committed = check.committed([TopicPartition("dr", 0), TopicPartition("dr", 1)], timeout=30)
            check.close()
            self.assertEqual([tp.offset for tp in committed], [-1001, 4])
            result = kafkatw("consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets", "--group",
                             "nobody", "--topic", "dr")
            self.assertIn("Error: 'nobody' does not exist.", result.stderr)

            # dump-log over the leader's active segment of dr-0
            leader = partition_info(bootstrap, "dr", 0)[0]
            directory = os.path.join(cluster[leader].data_dir, "dr-0")
            last = sorted(n for n in os.listdir(directory) if n.endswith(".log"))[-1]
            result = kafkatw("dump-log", "--files", os.path.join(directory, last), "--print-data-log")
            self.assertEqual(result.returncode, 0, result.stderr)
            lines = result.stdout.splitlines()
            self.assertEqual(lines[1], f"Log starting offset: {int(last[:-4])}")
            self.assertTrue(lines[-1].startswith("| offset: 19 CreateTime: 1700000000019 keySize: 3 valueSize: 8 "
                                                 "sequence: "), lines[-1])
            self.assertTrue(lines[-1].endswith(" headerKeys: [] key: k19 payload: value-19"), lines[-1])
