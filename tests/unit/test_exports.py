"""
Tests for the public names of kafkatw (after klein's C{test_exports.py}): the
C{__all__} of C{kafkatw}, C{kafkatw.client}, C{kafkatw.errors},
C{kafkatw.testing} and C{kafkatw.spark} is pinned, each name is the object its
implementation module defines, no implementation module is exported, and every
exception a public docstring of the clients or the Spark source promises can
be imported from C{kafkatw.client} or C{kafkatw.errors} (C{kafkatw.spark} for
Spark's).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pathlib
import re
import subprocess
import sys
import textwrap
import types
from typing import Iterator
from unittest import SkipTest

from twisted.trial.unittest import SynchronousTestCase

import kafkatw
import kafkatw.client
import kafkatw.errors
import kafkatw.testing

PUBLIC = [
    "KafkaClient",
    "Producer",
    "RecordMetadata",
    "GroupMetadata",
    "Consumer",
    "ConsumerRecord",
    "ZookeeperConsumerGroup",
    "ConsumerRebalanceListener",
    "ShareConsumer",
    "ShareRecord",
    "AcknowledgeType",
    "AdminClient",
    "NewTopic",
    "NewPartitions",
    "BlockingProducer",
    "BlockingConsumer",
    "BlockingAdminClient",
    "BlockingZookeeperConsumerGroup",
    "SecurityConfig",
    "BrokerConnectionError",
    "RequestTimedOutError",
    "UnsupportedApiError",
    "AuthenticationFailedError",
    "TLSConfigError",
    "KafkaTimeoutError",
    "ProducerClosedError",
    "IllegalTransactionStateError",
    "NoOffsetForPartitionError",
    "LogTruncationError",
    "ConsumerClosedError",
    "ConsumerRebalanceFailedError",
    "CommitFailedError",
    "GroupClosedError",
    "WrongProcessError",
]

#: module -> its pinned C{__all__}, in order
PINNED = {
    "kafkatw": ["__version__"],
    "kafkatw.client": PUBLIC,
    "kafkatw.errors": [
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
    ],
    "kafkatw.testing": [
        "find_free_port",
        "running_zookeeper",
        "ZooKeeperFixture",
        "ZooKeeperEnsembleFixture",
        "EnsembleMember",
        "FakeZooKeeper",
        "FakeZooKeeperClient",
        "FakeWatch",
        "BrokerProcess",
        "running_cluster",
        "Cluster",
        "create_acls_in_zookeeper",
        "snapshot_tree",
        "wait_until",
        "wait_for",
        "TLSFiles",
        "make_tls_files",
        "ClassFixture",
        "FakeTransactionLog",
        "FakeMarkerWriter",
        "MarkerCall",
        "FakeProducerIdAllocator",
        "FakeCluster",
    ],
    "kafkatw.spark": ["register", "KafkatwDataSource", "KafkaInputPartition", "DataLossError", "kafka_schema"],
}

PACKAGE = pathlib.Path(kafkatw.__file__).parent


def import_pinned(name: str) -> types.ModuleType:
    """
    Import module C{name}.

    @raise SkipTest: C{kafkatw.spark} without the C{spark} extra.
    """
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if name == "kafkatw.spark":
            raise SkipTest(f"the spark extra is not installed ({e})")
        raise


def promised_exceptions(package: str) -> Iterator[tuple[str, str]]:
    """
    C{(where, name)} for every exception named by C{@raise} or C{L{...}} (a
    name ending in C{Error} or C{Exception}) in the docstring of a public
    class, function or method of C{package}'s modules (private modules too:
    their public classes may be exported).
    """
    pattern = re.compile(r"@raise\s+([\w.]+)|L\{([\w.]*(?:Error|Exception))\}")
    for path in sorted((PACKAGE / package.split(".", 1)[1]).glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, str]]:
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if child.name.startswith("_") and not child.name.endswith("__"):
                    continue  # private: its promises are its callers' to keep
                where = f"{path.name}:{child.lineno} {prefix}{child.name}"
                for match in pattern.finditer(ast.get_docstring(child) or ""):
                    yield where, match.group(1) or match.group(2)
                yield from walk(child, f"{prefix}{child.name}.")

        yield from walk(tree, "")


def resolve(name: str, homes: list[types.ModuleType]) -> object:
    """The object C{name} (dotted from a module, or plain in a builtin or one of C{homes}), or None."""
    if "." in name:
        module, _, attribute = name.rpartition(".")
        try:
            return getattr(importlib.import_module(module), attribute, None)
        except ImportError:
            return None
    for home in [builtins, *homes]:
        if name in getattr(home, "__all__", dir(home)):
            return getattr(home, name)
    return None


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
        from kafkatw.client.consumer_coordinator import ConsumerRebalanceListener

        self.assertIs(kafkatw.client.ConsumerRebalanceListener, ConsumerRebalanceListener)
        self.assertIs(kafkatw.client.AdminClient, AdminClient)
        self.assertIs(kafkatw.client.NewTopic, NewTopic)
        self.assertIs(kafkatw.client.NewPartitions, NewPartitions)

    def test_security_and_exceptions(self) -> None:
        """
        C{SecurityConfig} and the exceptions are the classes of their modules.
        """
        from kafkatw.client import connection, consumer, producer, sasl, security, transaction_manager
        from kafkatw.client import zookeeper_group as group
        from kafkatw.security import tls

        for module, names in [
            (security, ["SecurityConfig"]),
            (connection, ["BrokerConnectionError", "RequestTimedOutError", "UnsupportedApiError"]),
            (sasl, ["AuthenticationFailedError"]),
            (tls, ["TLSConfigError"]),
            (producer, ["KafkaTimeoutError", "ProducerClosedError"]),
            (transaction_manager, ["IllegalTransactionStateError"]),
            (consumer, ["NoOffsetForPartitionError", "LogTruncationError", "ConsumerClosedError"]),
            (group, ["ConsumerRebalanceFailedError", "CommitFailedError", "GroupClosedError"]),
        ]:
            for name in names:
                self.assertIs(getattr(kafkatw.client, name), getattr(module, name), name)

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
        from kafkatw.client.blocking import WrongProcessError

        self.assertIs(kafkatw.client.WrongProcessError, WrongProcessError)

    def test_unknown_name(self) -> None:
        """
        A name that is not exported raises L{AttributeError}.
        """
        self.assertRaises(AttributeError, getattr, kafkatw.client, "NoSuchClient")


class PinnedExportsTests(SynchronousTestCase):
    """
    The public modules export exactly their pinned names, and each resolves.
    """

    def check(self, name: str) -> None:
        module = import_pinned(name)
        self.assertEqual(module.__all__, PINNED[name])
        namespace: dict = {}
        exec(f"from {name} import *", namespace)
        for export in PINNED[name]:
            value = getattr(module, export)
            self.assertIs(namespace[export], value, export)
            # implementation modules are not exported (they may change)
            self.assertFalse(isinstance(value, types.ModuleType), export)

    def test_kafkatw(self) -> None:
        self.check("kafkatw")

    def test_client(self) -> None:
        self.check("kafkatw.client")

    def test_errors(self) -> None:
        self.check("kafkatw.errors")

    def test_testing(self) -> None:
        self.check("kafkatw.testing")

    def test_spark(self) -> None:
        self.check("kafkatw.spark")

    def test_exceptions_are_exceptions(self) -> None:
        """The names of C{kafkatw.client} ending in C{Error} are exception classes."""
        for name in PUBLIC:
            if name.endswith("Error"):
                self.assertTrue(issubclass(getattr(kafkatw.client, name), Exception), name)


class PromisedExceptionsTests(SynchronousTestCase):
    """
    An exception that a public docstring promises can be caught by a user
    without importing an implementation module.
    """

    def check(self, package: str, homes: list[types.ModuleType]) -> None:
        promises = list(promised_exceptions(package))
        self.assertTrue(promises)  # the scan finds them
        unresolved = [(where, name) for where, name in promises if resolve(name, homes) is None]
        self.assertEqual(unresolved, [])
        for where, name in promises:
            value = resolve(name, homes)
            self.assertTrue(isinstance(value, type) and issubclass(value, BaseException), (where, name))

    def test_client(self) -> None:
        self.check("kafkatw.client", [kafkatw.client, kafkatw.errors])

    def test_spark(self) -> None:
        self.check("kafkatw.spark", [kafkatw.client, kafkatw.errors, import_pinned("kafkatw.spark")])

    def test_the_scan_sees_an_unexported_exception(self) -> None:
        """A C{@raise} of a name exported by neither is reported (the check is not vacuous)."""
        self.assertIsNone(resolve("GroupCoordinatorElection", [kafkatw.client, kafkatw.errors]))
        self.assertIsNone(resolve("_Superseded", [kafkatw.client, kafkatw.errors]))
        self.assertIs(resolve("KafkaTimeoutError", [kafkatw.client, kafkatw.errors]),
                      kafkatw.client.KafkaTimeoutError)
        self.assertIs(resolve("kafkatw.errors.CorruptRecordError", []), kafkatw.errors.CorruptRecordError)


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
