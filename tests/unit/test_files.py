"""L{kafkatw.storage.files.write_atomically}."""

import os
import shutil
import tempfile

from twisted.trial.unittest import SynchronousTestCase

from kafkatw.storage.files import write_atomically


class WriteAtomicallyTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="kafkatw-files-test-")
        self.addCleanup(shutil.rmtree, self.directory, True)

    def test_replaces_the_file_and_leaves_no_temporary(self) -> None:
        path = os.path.join(self.directory, "checkpoint")
        write_atomically(path, b"old\n")
        write_atomically(path, b"new\n" * 10000, sync_directory=False)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"new\n" * 10000)
        self.assertEqual(os.listdir(self.directory), ["checkpoint"])

    def test_a_failed_write_leaves_the_old_file(self) -> None:
        path = os.path.join(self.directory, "checkpoint")
        write_atomically(path, b"old\n")
        os.mkdir(path + ".tmp")  # the temporary cannot be opened
        self.assertRaises(OSError, write_atomically, path, b"new\n")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"old\n")
