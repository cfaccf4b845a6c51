"""
kafkatw's own clients in transactions, against a real ZooKeeper and a kafkatw
broker: the transactional L{kafkatw.client.producer.Producer} (through its
blocking facade), the read-committed L{kafkatw.client.consumer.Consumer}
(librdkafka's read-committed consumer agrees), consume-transform-produce
with a broker-coordinated group, and zombie fencing.
"""

from __future__ import annotations

import subprocess
import sys
import time

from kafkatw.client.blocking import BlockingConsumer, BlockingProducer
from kafkatw.errors import ErrorCode, KafkaError

from .test_transactions import SingleBrokerTestCase, create_topic, read_values


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkatw.cli.main", "transactions", *args],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def kafkatw_values(bootstrap: str, topic: str, isolation_level: str, partitions: int = 2,
                   expect: int = 0, timeout_s: float = 15.0) -> list[bytes]:
    """Every value of C{topic} up to its end offsets (the LSO with read_committed), kafkatw's consumer."""
    consumer = BlockingConsumer(bootstrap, isolation_level=isolation_level, auto_offset_reset="earliest",
                                fetch_max_wait_ms=100)
    try:
        tps = [(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            values.extend(r.value for r in consumer.poll(200))
            if len(values) >= expect and all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
        return sorted(values)
    finally:
        consumer.close()


class ClientTransactionTests(SingleBrokerTestCase):
    def producer(self, transactional_id: str | None = None, **options: object) -> BlockingProducer:
        if transactional_id is not None:
            options["transactional_id"] = transactional_id
        producer = BlockingProducer(self.bootstrap, timeout_s=60, linger_ms=5, **options)
        self.addCleanup(producer.close, 30)
        if transactional_id is not None:
            producer.init_transactions()
        return producer

    def test_commit_and_abort(self) -> None:
        """Commit, abort, commit: read_committed consumers (kafkatw's, librdkafka's) see the committed ones only."""
        create_topic(self.bootstrap, "tw-out")
        producer = self.producer("tw-1")
        expected = []
        for round_, commit in enumerate([True, False, True]):
            producer.begin_transaction()
            for i in range(10):
                producer.send("tw-out", f"{round_}-{i}".encode(), partition=i % 2)
            if commit:
                producer.commit_transaction()
                expected += [f"{round_}-{i}".encode() for i in range(10)]
            else:
                producer.flush()  # written, then aborted: read_uncommitted consumers see them
                producer.abort_transaction()
        expected.sort()
        self.assertEqual(kafkatw_values(self.bootstrap, "tw-out", "read_committed", expect=20), expected)
        self.assertEqual(read_values(self.bootstrap, "tw-out", "read_committed", expect=20), expected)
        self.assertEqual(len(kafkatw_values(self.bootstrap, "tw-out", "read_uncommitted", expect=30)), 30)

    def test_open_transaction_is_invisible_until_committed(self) -> None:
        create_topic(self.bootstrap, "tw-open", partitions=1)
        producer = self.producer("tw-open-1")
        producer.begin_transaction()
        producer.send("tw-open", b"pending", partition=0)
        producer.flush()
        self.assertEqual(kafkatw_values(self.bootstrap, "tw-open", "read_committed", partitions=1, timeout_s=3), [])
        self.assertEqual(kafkatw_values(self.bootstrap, "tw-open", "read_uncommitted", partitions=1, expect=1),
                         [b"pending"])
        producer.commit_transaction()
        self.assertEqual(kafkatw_values(self.bootstrap, "tw-open", "read_committed", partitions=1, expect=1),
                         [b"pending"])

    def test_consume_transform_produce(self) -> None:
        """
        A coordinator-group member reads an input topic read_committed; each
        poll's output and offsets commit as one transaction; one transaction
        with bogus offsets is aborted: the output holds every input once and
        the group's offsets are the committed transactions' only.
        """
        create_topic(self.bootstrap, "ctp-in")
        create_topic(self.bootstrap, "ctp-out")
        plain = self.producer()
        inputs = [f"r{i}".encode() for i in range(40)]
        for i, value in enumerate(inputs):
            plain.send("ctp-in", value, partition=i % 2)
        plain.flush()
        producer = self.producer("ctp-1")
        group = BlockingConsumer(self.bootstrap, group_id="ctp-group", auto_offset_reset="earliest",
                                 enable_auto_commit=False, isolation_level="read_committed", session_timeout_ms=30000)
        self.addCleanup(group.close)
        group.subscribe(["ctp-in"])
        group.wait_for_assignment()
        seen = 0
        deadline = time.monotonic() + 60
        while seen < len(inputs) and time.monotonic() < deadline:
            records = group.poll(500)
            if not records:
                continue
            producer.begin_transaction()
            offsets = {}
            for record in records:
                producer.send("ctp-out", record.value.upper(), partition=record.partition)
                offsets[(record.topic, record.partition)] = record.offset + 1
            producer.send_offsets_to_transaction(offsets, group.group_metadata())
            producer.commit_transaction()
            seen += len(records)
        self.assertEqual(seen, len(inputs))
        # an aborted transaction's output and offsets vanish
        producer.begin_transaction()
        producer.send("ctp-out", b"NEVER", partition=0)
        producer.send_offsets_to_transaction({("ctp-in", 0): 999, ("ctp-in", 1): 999}, group.group_metadata())
        producer.abort_transaction()
        self.assertEqual(group.committed([("ctp-in", 0), ("ctp-in", 1)]), {("ctp-in", 0): 20, ("ctp-in", 1): 20})
        self.assertEqual(kafkatw_values(self.bootstrap, "ctp-out", "read_committed", expect=40),
                         sorted(v.upper() for v in inputs))

    def test_zombie_fencing(self) -> None:
        """A second instance with the same transactional id fences the first: its commit fails, its records vanish."""
        create_topic(self.bootstrap, "tw-zombie", partitions=1)
        zombie = self.producer("tw-z")
        zombie.begin_transaction()
        zombie.send("tw-zombie", b"zombie", partition=0)
        zombie.flush()
        successor = self.producer("tw-z")  # fences the zombie, aborts its open transaction
        with self.assertRaises(KafkaError) as raised:
            zombie.commit_transaction()
        self.assertIn(raised.exception.error_code, (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch))
        with self.assertRaises(KafkaError):
            zombie.begin_transaction()  # fatal: only close remains
        successor.begin_transaction()
        successor.send("tw-zombie", b"successor", partition=0)
        successor.commit_transaction()
        self.assertEqual(kafkatw_values(self.bootstrap, "tw-zombie", "read_committed", partitions=1, expect=1),
                         [b"successor"])

    def test_transactions_tool(self) -> None:
        """kafkatw transactions list / describe / describe-producers on an open transaction, then abort it."""
        create_topic(self.bootstrap, "tw-tool", partitions=1)
        producer = self.producer("tw-tool-1")
        producer.begin_transaction()
        producer.send("tw-tool", b"open", partition=0)
        producer.flush()
        listed = tool("--bootstrap-server", self.bootstrap, "list")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        lines = listed.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"])
        row = next(line.split() for line in lines[1:] if line.split()[0] == "tw-tool-1")
        self.assertEqual(row[3], "Ongoing")
        described = tool("--bootstrap-server", self.bootstrap, "describe", "--transactional-id", "tw-tool-1")
        self.assertEqual(described.returncode, 0, described.stderr)
        header, values = (line.split("\t") for line in described.stdout.splitlines())
        fields = dict(zip((h.strip() for h in header), (v.strip() for v in values)))
        self.assertEqual((fields["TransactionState"], fields["TopicPartitions"], fields["TransactionTimeoutMs"]),
                         ("Ongoing", "tw-tool-0", "60000"))
        producers = tool("--bootstrap-server", self.bootstrap, "describe-producers", "--topic", "tw-tool",
                         "--partition", "0")
        self.assertEqual(producers.returncode, 0, producers.stderr)
        header, values = (line.split("\t") for line in producers.stdout.splitlines())
        fields = dict(zip((h.strip() for h in header), (v.strip() for v in values)))
        self.assertEqual((fields["ProducerId"], fields["CurrentTransactionStartOffset"]), (row[2], "0"))
        # abort it by its start offset, as for a hanging transaction: the LSO moves on
        aborted = tool("--bootstrap-server", self.bootstrap, "abort", "--topic", "tw-tool", "--partition", "0",
                       "--start-offset", "0")
        self.assertEqual(aborted.returncode, 0, aborted.stderr)
        self.assertEqual(kafkatw_values(self.bootstrap, "tw-tool", "read_committed", partitions=1, timeout_s=5), [])
        consumer = BlockingConsumer(self.bootstrap, isolation_level="read_committed")
        self.addCleanup(consumer.close)
        self.assertEqual(consumer.end_offsets([("tw-tool", 0)]), {("tw-tool", 0): 2})  # the record and the marker
        unknown = tool("--bootstrap-server", self.bootstrap, "describe", "--transactional-id", "nope")
        self.assertEqual(unknown.returncode, 1)
        self.assertIn("TRANSACTIONAL_ID_NOT_FOUND", unknown.stderr.upper())

    def test_read_committed_member_waits_for_pending_offsets(self) -> None:
        """Offsets pending in an open transaction: a read_committed group member waits (KIP-447 require_stable)."""
        create_topic(self.bootstrap, "st-in", partitions=1)
        producer = self.producer("st-1")
        producer.begin_transaction()
        producer.send_offsets_to_transaction({("st-in", 0): 5}, "st-group")
        stable = BlockingConsumer(self.bootstrap, group_id="st-group", isolation_level="read_committed",
                                  enable_auto_commit=False, default_api_timeout_ms=2000)
        self.addCleanup(stable.close)
        plain = BlockingConsumer(self.bootstrap, group_id="st-group", enable_auto_commit=False)
        self.addCleanup(plain.close)
        self.assertEqual(plain.committed([("st-in", 0)]), {("st-in", 0): -1})
        with self.assertRaises(KafkaError) as raised:
            stable.committed([("st-in", 0)])
        self.assertEqual(raised.exception.error_code, ErrorCode.unstable_offset_commit)
        producer.commit_transaction()
        self.assertEqual(stable.committed([("st-in", 0)]), {("st-in", 0): 5})

    def test_zookeeper_group_consume_transform_produce(self) -> None:
        """
        The paper's ZooKeeper group reads read_committed (its Consumer's
        option) and its offsets commit with the transaction: committed
        transactions move the group's ZooKeeper offsets, an aborted one does not.
        """
        from kafkatw.client.blocking_group import BlockingZookeeperConsumerGroup

        create_topic(self.bootstrap, "zk-in", partitions=1)
        create_topic(self.bootstrap, "zk-out", partitions=1)
        source = self.producer("zk-source")  # the input itself is transactional: one aborted batch
        for commit in (True, False, True):
            source.begin_transaction()
            for i in range(5):
                source.send("zk-in", b"%s-%d" % (b"c" if commit else b"a", i), partition=0)
            source.flush()
            source.commit_transaction() if commit else source.abort_transaction()
        producer = self.producer("zk-ctp")
        zookeeper = self.cluster[0].zookeeper_connect
        with BlockingZookeeperConsumerGroup("zk-ctp", ["zk-in"], zookeeper_connect=zookeeper,
                                            bootstrap_servers=self.bootstrap, auto_offset_reset="smallest",
                                            enable_auto_commit=False, zookeeper_session_timeout_ms=3000,
                                            isolation_level="read_committed") as group:
            seen: list = []
            deadline = time.monotonic() + 30
            while len(seen) < 10 and time.monotonic() < deadline:
                seen += group.poll(500)
            self.assertEqual(sorted(r.value for r in seen), sorted([b"c-%d" % i for i in range(5)] * 2))
            producer.begin_transaction()
            for record in seen:
                producer.send("zk-out", record.value.upper(), partition=0)
            metadata = group.group_metadata()
            self.assertEqual(metadata.group_id, "zk-ctp")
            producer.send_offsets_to_transaction({("zk-in", 0): seen[-1].offset + 1}, metadata)
            producer.commit_transaction()
            producer.begin_transaction()
            producer.send_offsets_to_transaction({("zk-in", 0): 999}, metadata)
            producer.abort_transaction()
        checker = BlockingConsumer(self.bootstrap, group_id="zk-ctp", enable_auto_commit=False,
                                   isolation_level="read_committed")
        self.addCleanup(checker.close)
        self.assertEqual(checker.committed([("zk-in", 0)]), {("zk-in", 0): seen[-1].offset + 1})
        self.assertEqual(kafkatw_values(self.bootstrap, "zk-out", "read_committed", partitions=1, expect=10),
                         sorted(r.value.upper() for r in seen))
