"""
Tests for the public names of L{kafkatw.client} (after klein's
C{test_exports.py}): C{__all__} is pinned, and each name is the object its
implementation module defines.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from twisted.trial.unittest import SynchronousTestCase

import kafkatw.client

PUBLIC = [
    "KafkaClient",
    "Producer",
    "RecordMetadata",
    "GroupMetadata",
    "Consumer",
    "ConsumerRecord",
    "ZookeeperConsumerGroup",
    "AdminClient",
    "NewTopic",
    "NewPartitions",
    "BlockingProducer",
    "BlockingConsumer",
    "BlockingAdminClient",
    "BlockingZookeeperConsumerGroup",
]


def _run(code: str) -> str:
    """Run C{code} in a fresh interpreter (imports are process-wide state); return its stdout."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=60, check=True)
    return result.stdout.strip()


class PublicSymbolsTests(SynchronousTestCase):
    """
    Every public name resolves to its implementation.
    """

    def test_all(self) -> None:
        """
        C{__all__} lists exactly the public API, in this order.
        """
        self.assertEqual(kafkatw.client.__all__, PUBLIC)

    def test_names_resolve(self) -> None:
        """
        Each name in C{__all__} is an attribute of the package, also through
        C{from kafkatw.client import *}.
        """
        namespace: dict = {}
        exec("from kafkatw.client import *", namespace)
        for name in PUBLIC:
            self.assertIs(getattr(kafkatw.client, name), namespace[name])
        self.assertTrue(set(PUBLIC) <= set(dir(kafkatw.client)))

    def test_twisted_clients(self) -> None:
        """
        The Twisted clients are the classes of their modules.
        """
        from kafkatw.client.admin import AdminClient, NewPartitions, NewTopic
        from kafkatw.client.client import KafkaClient
        from kafkatw.client.consumer import Consumer, ConsumerRecord
        from kafkatw.client.producer import Producer, RecordMetadata
        from kafkatw.client.zookeeper_group import ZookeeperConsumerGroup

        self.assertIs(kafkatw.client.KafkaClient, KafkaClient)
        self.assertIs(kafkatw.client.Producer, Producer)
        self.assertIs(kafkatw.client.RecordMetadata, RecordMetadata)
        from kafkatw.client.transaction_manager import GroupMetadata

        self.assertIs(kafkatw.client.GroupMetadata, GroupMetadata)
        self.assertIs(kafkatw.client.Consumer, Consumer)
        self.assertIs(kafkatw.client.ConsumerRecord, ConsumerRecord)
        self.assertIs(kafkatw.client.ZookeeperConsumerGroup, ZookeeperConsumerGroup)
        self.assertIs(kafkatw.client.AdminClient, AdminClient)
        self.assertIs(kafkatw.client.NewTopic, NewTopic)
        self.assertIs(kafkatw.client.NewPartitions, NewPartitions)

    def test_blocking_clients(self) -> None:
        """
        The blocking clients are the classes of their modules.
        """
        from kafkatw.client.blocking import BlockingAdminClient, BlockingConsumer, BlockingProducer
        from kafkatw.client.blocking_group import BlockingZookeeperConsumerGroup

        self.assertIs(kafkatw.client.BlockingProducer, BlockingProducer)
        self.assertIs(kafkatw.client.BlockingConsumer, BlockingConsumer)
        self.assertIs(kafkatw.client.BlockingAdminClient, BlockingAdminClient)
        self.assertIs(kafkatw.client.BlockingZookeeperConsumerGroup, BlockingZookeeperConsumerGroup)

    def test_unknown_name(self) -> None:
        """
        A name that is not exported raises L{AttributeError}.
        """
        self.assertRaises(AttributeError, getattr, kafkatw.client, "NoSuchClient")


class ImportSideEffectsTests(SynchronousTestCase):
    """
    Importing the clients installs no reactor and starts no thread.
    """

    def test_package_import(self) -> None:
        """
        C{import kafkatw.client} does not import the blocking facade (crochet).
        """
        out = _run("""
            import sys
            import kafkatw.client
            print(sorted(m for m in ("crochet", "kafkatw.client.blocking", "twisted.internet.reactor")
                         if m in sys.modules))
        """)
        self.assertEqual(out, "[]")

    def test_blocking_import(self) -> None:
        """
        Resolving the blocking names imports them without installing
        C{twisted.internet.reactor} or starting a reactor thread.
        """
        out = _run("""
            import sys, threading
            from kafkatw.client import (BlockingAdminClient, BlockingConsumer, BlockingProducer,
                                        BlockingZookeeperConsumerGroup)
            print("twisted.internet.reactor" in sys.modules, threading.active_count())
        """)
        self.assertEqual(out, "False 1")
