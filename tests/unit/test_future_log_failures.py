"""
Failures while a replica moves between log dirs (AlterReplicaLogDirs,
KIP-113), on real logs in temporary log dirs with injected C{OSError}s and a
twisted Clock (no sleeps):

  - a C{-delete} directory is removed at start only when its swap is known
    complete: when the destination cannot be listed it becomes the current
    log again, and the move resumes once the destination is back;
  - a swap whose undo fails keeps its complete future log on disk, and the
    next start finishes it; a swap whose new log cannot be opened takes the
    destination offline (where that log is), not the source;
  - out of file descriptors (C{EMFILE}/C{ENFILE}, or less than the reserve
    left) while the future log is created or written: C{KAFKA_STORAGE_ERROR}
    / the move cancelled, every log dir online (as for a new log);
  - a storage error of the current log during the copy takes the current
    log's dir offline, not the destination.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from kafkatw.errors import ErrorCode, KafkaStorageError
from kafkatw.storage.log_dir_failure import OPEN_FILES_RESERVE

from .test_replica_alter_log_dirs import MoveHarness, MoveTestCase, values

_E = ErrorCode


def moving_dirs(*log_dirs: str) -> list[str]:
    return sorted(n for d in log_dirs for n in os.listdir(d) if n.endswith(("-future", "-delete")))


class InterruptedSwapTests(MoveTestCase):
    def assert_the_next_start_finishes_the_swap(self, h: MoveHarness, expected: list) -> None:
        """A harness started again on C{h}'s dirs serves the moved log from b, with no moving dir left."""
        again = MoveHarness(self, h.root)
        self.assertEqual(again.log_manager.log_dir_of("t", 0), again.b)
        self.assertEqual(values(again.log_manager.get("t", 0)), expected)
        self.assertEqual(moving_dirs(again.a, again.b), [])

    def unreadable(self, path: str) -> Any:
        real = os.listdir

        def listdir(d: Any = ".") -> list[str]:
            if os.path.abspath(d) == path:
                raise OSError(errno.EIO, os.strerror(errno.EIO), d)
            return real(d)

        return self.patch(os, "listdir", listdir)

    def test_the_old_log_serves_again_when_the_destination_cannot_be_listed(self) -> None:
        h, expected = self.crashed_between_the_renames()
        patcher = self.unreadable(h.b)
        again = MoveHarness(self, h.root)
        self.assertEqual(list(again.log_manager.offline_log_dirs), [again.b])
        self.assertEqual(again.log_manager.log_dir_of("t", 0), again.a)
        self.assertEqual(values(again.log_manager.get("t", 0)), expected)
        self.assertEqual(os.listdir(again.a).count("t-0"), 1)
        again.log_manager.close()
        # b is back: the future log is loaded and the move resumes
        patcher.restore()
        third = MoveHarness(self, h.root)
        self.assertEqual(third.log_manager.log_dir_of("t", 0), third.a)
        self.assertEqual(third.log_manager.future_log_dir_of("t", 0), third.b)
        third.host()
        third.mover.start()
        third.run()
        self.assertEqual(third.log_manager.log_dir_of("t", 0), third.b)
        self.assertEqual(values(third.log_manager.get("t", 0)), expected)

    def test_with_every_log_dir_listed_the_swap_is_still_finished(self) -> None:
        h, expected = self.crashed_between_the_renames()
        self.assert_the_next_start_finishes_the_swap(h, expected)

    def test_a_failed_undo_keeps_the_future_log_and_the_next_start_finishes_the_swap(self) -> None:
        h, p = self.hosted(3, 2, b"u")
        expected = values(p.log)
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)
        real, calls = os.rename, []

        def rename(src: str, dst: str) -> None:
            calls.append((src, dst))
            if len(calls) == 1:
                return real(src, dst)  # current -> -delete
            raise OSError(errno.EIO, os.strerror(errno.EIO), src)  # future -> current, then the undo

        patcher = self.patch(os, "rename", rename)
        h.mover.step()
        patcher.restore()
        self.assertEqual(len(calls), 3)
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.a])  # the dir whose rename failed
        self.assertEqual(h.log_manager.future_logs, {})
        self.assertEqual(len(moving_dirs(h.a, h.b)), 2)  # -delete in a, the complete -future in b
        h.mover.stop()
        h.log_manager.close()
        self.assert_the_next_start_finishes_the_swap(h, expected)

    def test_a_failure_opening_the_swapped_in_log_takes_the_destination_offline(self) -> None:
        h, p = self.hosted(3, 2, b"s")
        expected = values(p.log)
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)
        h.log_manager.files[h.b].fail("open", errno.EIO)  # opening the new current log after the renames
        h.mover.step()
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.b])
        self.assertEqual(h.log_manager.live_log_dirs, [h.a])
        self.assertIsNone(h.log_manager.get("t", 0))
        h.mover.stop()
        h.log_manager.close()
        self.assert_the_next_start_finishes_the_swap(h, expected)


class OutOfDescriptorsTests(MoveTestCase):
    def moving(self) -> tuple[MoveHarness, Any]:
        return self.hosted(80, 4, b"m")  # several segments of 2048 bytes

    def test_emfile_creating_the_future_log_keeps_the_destination_online(self) -> None:
        for code in (errno.EMFILE, errno.ENFILE):
            h, p = self.moving()
            h.log_manager.files[h.b].fail("open", code)
            self.assertEqual(h.mover.alter("t", 0, h.b), _E.kafka_storage_error)
            self.assertEqual(h.log_manager.offline_log_dirs, {})
            self.assertEqual(h.log_manager.future_logs, {})
            self.assertEqual(moving_dirs(h.a, h.b), [])  # nothing half-made is left
            self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)  # the next try works
            h.run()
            self.assertEqual(h.log_manager.log_dir_of("t", 0), h.b)

    def test_a_future_log_leaving_less_than_the_reserve_is_refused(self) -> None:
        h, p = self.moving()
        # A limit no descriptor fits under: one computed from a probe
        # descriptor races other threads closing lower ones (a leaked
        # client's, the collector's); test_open_files_limit checks the boundary.
        h.log_manager.open_files_limit = lambda: OPEN_FILES_RESERVE
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.kafka_storage_error)
        self.assertEqual(h.log_manager.offline_log_dirs, {})
        self.assertEqual(moving_dirs(h.a, h.b), [])

    def test_emfile_during_the_copy_cancels_the_move_and_keeps_the_dirs_online(self) -> None:
        h, p = self.moving()
        expected = values(p.log)
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)
        h.mover.step()
        self.assertEqual(len(h.log_manager.future_logs[("t", 0)].segments), 1)
        h.log_manager.files[h.b].fail("open", errno.EMFILE, times=None)  # the future log's next segment
        for _ in range(50):
            if not h.mover._moving:
                break
            h.mover.step()
        h.log_manager.files[h.b].heal()
        self.assertEqual(h.mover._moving, [])
        self.assertEqual(h.log_manager.offline_log_dirs, {})
        self.assertEqual(h.log_manager.future_logs, {})
        self.assertEqual(moving_dirs(h.a, h.b), [])
        self.assertEqual(h.log_manager.log_dir_of("t", 0), h.a)
        self.assertEqual(values(p.log), expected)


class CurrentLogFailureTests(MoveTestCase):
    def test_a_failure_of_the_current_log_takes_its_dir_offline_not_the_destination(self) -> None:
        h, p = self.hosted(20, 4, b"f")
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)
        h.mover.step()
        self.assertGreater(h.log_manager.future_logs[("t", 0)].log_end_offset, 0)

        def broken(epoch: int) -> Any:
            raise KafkaStorageError("the current log's epoch cache cannot be read")

        p.log.end_offset_for_epoch = broken
        h.mover.step()
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.a])
        h.mover.step()  # the move, its current log gone, is cancelled; its destination serves on
        self.assertEqual(h.log_manager.future_logs, {})
        self.assertEqual(h.log_manager.live_log_dirs, [h.b])

    def test_a_failed_read_of_the_current_log_takes_its_dir_offline(self) -> None:
        h, p = self.hosted(20, 4, b"r")
        self.assertEqual(h.mover.alter("t", 0, h.b), _E.none)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        p.log.read = broken
        h.mover.step()
        self.assertEqual(list(h.log_manager.offline_log_dirs), [h.a])
