"""meta.properties (kafkatw.storage.meta_properties): format, checks, and that a refused check writes nothing."""

from __future__ import annotations

import os
import shutil
import tempfile

from twisted.trial import unittest

from kafkatw.storage.meta_properties import (
    InconsistentBrokerIdError,
    InconsistentBrokerMetadataError,
    InconsistentClusterIdError,
    MetaProperties,
    MetaPropertiesError,
    check_log_dirs,
    ensure_meta_properties,
    read_meta_properties,
    write_meta_properties,
)
from kafkatw.testing import snapshot_tree

CLUSTER = "sIyk8bdDT-GPGIV_ntLbmA"
OTHER_CLUSTER = "-iiClE5uQh-OWW1e1HFh9w"


class FormatTests(unittest.SynchronousTestCase):
    def test_text_is_kafkas(self) -> None:
        text = MetaProperties(broker_id=3, cluster_id=CLUSTER).to_text(now_s=1709640000)
        self.assertEqual(text, f"#\n#Tue Mar 05 12:00:00 UTC 2024\nversion=0\nbroker.id=3\ncluster.id={CLUSTER}\n")

    def test_round_trip(self) -> None:
        meta = MetaProperties(broker_id=7, cluster_id=CLUSTER)
        self.assertEqual(MetaProperties.from_text(meta.to_text()), meta)

    def test_kafka_written_file_in_any_key_order(self) -> None:
        # as Java's Properties.store writes it: hash order, a comment header
        text = f"#\n#Tue Mar 05 12:00:00 UTC 2024\ncluster.id={CLUSTER}\nversion=0\nbroker.id=0\n"
        self.assertEqual(MetaProperties.from_text(text), MetaProperties(broker_id=0, cluster_id=CLUSTER))

    def test_missing_version_is_zero_and_missing_cluster_id_is_none(self) -> None:
        self.assertEqual(MetaProperties.from_text("broker.id=2\n"), MetaProperties(broker_id=2, cluster_id=None))

    def test_malformed_files_are_refused(self) -> None:
        for text, says in [
            ("version=0\n", "no broker.id"),
            ("broker.id=x\n", "malformed"),
            ("version=1\nnode.id=1\nbroker.id=1\n", "only support version 0"),
        ]:
            with self.assertRaises(MetaPropertiesError) as raised:
                MetaProperties.from_text(text)
            self.assertIn(says, str(raised.exception))


class LogDirTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        self.base = tempfile.mkdtemp(prefix="kafkatw-meta-")
        self.addCleanup(shutil.rmtree, self.base, True)

    def log_dir(self, name: str, meta: MetaProperties | None = None) -> str:
        path = os.path.join(self.base, name)
        os.makedirs(path)
        if meta is not None:
            write_meta_properties(path, meta)
        return path

    def test_read_missing_is_none(self) -> None:
        self.assertIsNone(read_meta_properties(self.log_dir("a")))
        self.assertIsNone(read_meta_properties(os.path.join(self.base, "does-not-exist")))

    def test_write_is_atomic_and_readable(self) -> None:
        path = self.log_dir("a")
        write_meta_properties(path, MetaProperties(broker_id=1, cluster_id=CLUSTER))
        self.assertEqual(os.listdir(path), ["meta.properties"])
        self.assertEqual(read_meta_properties(path), MetaProperties(broker_id=1, cluster_id=CLUSTER))

    def test_first_start_writes_every_dir(self) -> None:
        dirs = [self.log_dir("a"), self.log_dir("b")]
        self.assertEqual(ensure_meta_properties(dirs, 4, CLUSTER), dirs)
        for d in dirs:
            self.assertEqual(read_meta_properties(d), MetaProperties(broker_id=4, cluster_id=CLUSTER))
        # the next start writes nothing
        before = snapshot_tree(self.base)
        self.assertEqual(ensure_meta_properties(dirs, 4, CLUSTER), [])
        self.assertEqual(snapshot_tree(self.base), before)

    def test_a_new_dir_beside_a_known_one_is_written(self) -> None:
        known = self.log_dir("a", MetaProperties(broker_id=0, cluster_id=CLUSTER))
        new = self.log_dir("b")
        self.assertEqual(ensure_meta_properties([known, new], 0, CLUSTER), [new])

    def test_file_without_cluster_id_is_completed(self) -> None:
        old = self.log_dir("a", MetaProperties(broker_id=0, cluster_id=None))
        self.assertEqual(ensure_meta_properties([old], 0, CLUSTER), [old])
        self.assertEqual(read_meta_properties(old), MetaProperties(broker_id=0, cluster_id=CLUSTER))

    def assertRefusedUntouched(self, error: type, dirs: list[str], broker_id: int, cluster_id: str) -> str:
        before = snapshot_tree(self.base)
        with self.assertRaises(error) as raised:
            ensure_meta_properties(dirs, broker_id, cluster_id)
        self.assertEqual(snapshot_tree(self.base), before)
        message = str(raised.exception)
        self.assertNotIn("\n", message)
        return message

    def test_another_cluster_is_refused(self) -> None:
        d = self.log_dir("a", MetaProperties(broker_id=0, cluster_id=OTHER_CLUSTER))
        message = self.assertRefusedUntouched(InconsistentClusterIdError, [d, self.log_dir("b")], 0, CLUSTER)
        self.assertIn(f"The Cluster ID {CLUSTER} doesn't match stored clusterId {OTHER_CLUSTER} in meta.properties",
                      message)
        self.assertIn("The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong.",
                      message)
        self.assertIn(os.path.join(d, "meta.properties"), message)

    def test_another_broker_id_is_refused(self) -> None:
        d = self.log_dir("a", MetaProperties(broker_id=0, cluster_id=CLUSTER))
        message = self.assertRefusedUntouched(InconsistentBrokerIdError, [d], 1, CLUSTER)
        self.assertIn("Configured broker.id 1 doesn't match stored broker.id 0 in meta.properties", message)
        self.assertIn("remove all data in your data directories (log.dirs)", message)

    def test_cluster_is_checked_before_broker_id(self) -> None:
        d = self.log_dir("a", MetaProperties(broker_id=0, cluster_id=OTHER_CLUSTER))
        self.assertRefusedUntouched(InconsistentClusterIdError, [d], 1, CLUSTER)

    def test_dirs_that_disagree_are_refused(self) -> None:
        a = self.log_dir("a", MetaProperties(broker_id=0, cluster_id=CLUSTER))
        b = self.log_dir("b", MetaProperties(broker_id=1, cluster_id=CLUSTER))
        message = self.assertRefusedUntouched(InconsistentBrokerMetadataError, [a, b, self.log_dir("c")], 0, CLUSTER)
        self.assertIn("BrokerMetadata is not consistent across log.dirs", message)

    def test_check_reads_only(self) -> None:
        dirs = [self.log_dir("a")]
        before = snapshot_tree(self.base)
        self.assertEqual(check_log_dirs(dirs, 0, CLUSTER), dirs)
        self.assertEqual(snapshot_tree(self.base), before)
