"""
The README's one broker: C{twistd -n kafkatw --zookeeper embedded} with no
replication settings runs transactions, as Kafka's single-broker
C{config/server.properties} does (C{transaction.state.log.replication.factor}
and C{transaction.state.log.min.isr} 1).  With Kafka's defaults (3 and 2)
FindCoordinator would answer C{COORDINATOR_NOT_AVAILABLE} until three brokers
were alive, and the producer would wait until it gave up.
"""

from __future__ import annotations

import shutil
import tempfile
import time

from twisted.trial import unittest

from kafkatw.client.blocking import BlockingProducer
from kafkatw.testing import BrokerProcess, find_free_port

from .test_client_transactions import kafkatw_values
from .test_transactions import create_topic


class EmbeddedSingleBrokerTests(unittest.TestCase):
    timeout = 120

    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="kafkatw-single-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.broker = BrokerProcess(0, f"embedded:{find_free_port()}", self.tmp).start()
        self.addCleanup(self.broker.stop)

    def test_a_transaction_completes_on_the_embedded_default(self) -> None:
        bootstrap = self.broker.bootstrap
        create_topic(bootstrap, "single-out", partitions=1)
        started = time.monotonic()
        producer = BlockingProducer(bootstrap, timeout_s=30, transactional_id="single-1", linger_ms=5)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            for i in range(5):
                producer.send("single-out", b"v%d" % i, partition=0)
            producer.commit_transaction()
        finally:
            producer.close(10)
        self.assertLess(time.monotonic() - started, 30)
        self.assertEqual(kafkatw_values(bootstrap, "single-out", "read_committed", partitions=1, expect=5),
                         [b"v%d" % i for i in range(5)])
        log = self.broker.log_text()
        self.assertIn("transactional id 'single-1': CompleteCommit", log)
        self.assertNotIn("__transaction_state not created", log)
