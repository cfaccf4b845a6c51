"""
Tests for L{kafkatw.testing.ClassFixture}: a class's shared fixture is set up
before its first test and torn down after its last one under trial, as
unittest and pytest do with C{setUpClass}/C{tearDownClass}.
"""

from __future__ import annotations

import atexit
import unittest as pyunit
from typing import Any

from twisted.trial import reporter, runner, unittest

from kafkatw.testing import ClassFixture


def fixture_classes(events: list[str], fail_tear_down: bool = False, skip_set_up: bool = False) -> tuple[type, type]:
    """Two L{ClassFixture} test classes that record their fixture's and tests' runs in C{events}."""

    class First(ClassFixture, unittest.SynchronousTestCase):
        @classmethod
        def setUpClass(cls) -> None:
            if skip_set_up:
                raise pyunit.SkipTest("no cluster here")
            events.append(f"{cls.__name__}.setUpClass")

        @classmethod
        def tearDownClass(cls) -> None:
            events.append(f"{cls.__name__}.tearDownClass")
            if fail_tear_down:
                raise RuntimeError("the cluster did not stop")

        def test_a(self) -> None:
            events.append(f"{type(self).__name__}.test_a")

        def test_b(self) -> None:
            events.append(f"{type(self).__name__}.test_b")

    class Second(ClassFixture, unittest.TestCase):
        @classmethod
        def setUpClass(cls) -> None:
            events.append("Second.setUpClass")

        @classmethod
        def tearDownClass(cls) -> None:
            events.append("Second.tearDownClass")

        def test_c(self) -> None:
            events.append("Second.test_c")

    return First, Second


class ClassFixtureTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        self.registered: list[Any] = []
        self.patch(atexit, "register", self.registered.append)
        self.patch(atexit, "unregister", self.registered.remove)

    def run_under_trial(self, *tests: Any) -> reporter.TestResult:
        """Run C{tests} (classes or test ids of them) as C{trial} does: loaded by its loader, into its result."""
        loader = runner.TestLoader()
        suite = runner.TestSuite([loader.loadClass(t) if isinstance(t, type) else t for t in tests])
        result = reporter.TestResult()
        suite.run(result)
        return result

    def test_torn_down_when_its_last_test_ends(self) -> None:
        """Under trial each class's fixture stops before the next class's starts, not at interpreter exit."""
        events: list[str] = []
        first, second = fixture_classes(events)
        result = self.run_under_trial(first, second)
        self.assertEqual(events, ["First.setUpClass", "First.test_a", "First.test_b", "First.tearDownClass",
                                  "Second.setUpClass", "Second.test_c", "Second.tearDownClass"])
        self.assertTrue(result.wasSuccessful())
        self.assertEqual(result.testsRun, 3)
        self.assertEqual(self.registered, [])

    def test_set_up_again_when_run_again(self) -> None:
        """A second run of the class (trial C{--until-failure}) sets the fixture up again."""
        events: list[str] = []
        first, _ = fixture_classes(events)
        self.run_under_trial(first)
        self.run_under_trial(first)
        self.assertEqual(events, ["First.setUpClass", "First.test_a", "First.test_b", "First.tearDownClass"] * 2)

    def test_some_tests_only_tear_down_at_exit(self) -> None:
        """A run of one of its tests leaves the fixture to C{atexit}."""
        events: list[str] = []
        first, _ = fixture_classes(events)
        self.run_under_trial(first("test_b"))
        self.assertEqual(events, ["First.setUpClass", "First.test_b"])
        self.assertEqual(self.registered, [first.tearDownClass])
        self.registered.pop()()
        self.assertEqual(events[-1], "First.tearDownClass")
        first.tearDownClass()
        self.assertEqual(events.count("First.tearDownClass"), 1)

    def test_tear_down_error_is_its_own_entry(self) -> None:
        events: list[str] = []
        first, _ = fixture_classes(events, fail_tear_down=True)
        result = self.run_under_trial(first)
        self.assertEqual(events[-1], "First.tearDownClass")
        self.assertEqual(result.successes, 2)
        [(holder, error)] = result.errors
        self.assertEqual(holder.id(), f"{first.__module__}.{first.__qualname__}.tearDownClass")
        self.assertTrue(error.check(RuntimeError))

    def test_skip_in_set_up_skips_every_test(self) -> None:
        events: list[str] = []
        first, _ = fixture_classes(events, skip_set_up=True)
        result = self.run_under_trial(first)
        self.assertEqual(events, [])
        self.assertEqual([reason for _, reason in result.skips], ["no cluster here"] * 2)
        self.assertEqual(self.registered, [])

    def test_a_subclass_has_its_own_fixture(self) -> None:
        """A subclass inherits C{setUpClass} and C{tearDownClass} and runs them for itself, around its tests."""
        events: list[str] = []
        first, _ = fixture_classes(events)

        class Third(first):  # type: ignore[misc, valid-type]
            def test_d(self) -> None:
                events.append("Third.test_d")

        self.run_under_trial(first, Third)
        self.assertEqual(events, ["First.setUpClass", "First.test_a", "First.test_b", "First.tearDownClass",
                                  "Third.setUpClass", "Third.test_a", "Third.test_b", "Third.test_d",
                                  "Third.tearDownClass"])
        self.assertEqual(self.registered, [])

    def test_under_unittest_nothing_changes(self) -> None:
        """unittest's suites call C{setUpClass} and C{tearDownClass} themselves, once each."""
        events: list[str] = []
        first, second = fixture_classes(events)
        suite = pyunit.TestSuite([pyunit.defaultTestLoader.loadTestsFromTestCase(c) for c in (first, second)])
        result = pyunit.TestResult()
        suite.run(result)
        self.assertEqual(events, ["First.setUpClass", "First.test_a", "First.test_b", "First.tearDownClass",
                                  "Second.setUpClass", "Second.test_c", "Second.tearDownClass"])
        self.assertTrue(result.wasSuccessful(), result.errors)
        self.assertEqual(self.registered, [])

    def test_a_set_up_that_fails_half_way_can_tear_down_what_it_started(self) -> None:
        """The common pattern: setUpClass calls tearDownClass before re-raising; the cluster must stop."""
        stopped: list[str] = []

        class HalfWay(ClassFixture, pyunit.TestCase):
            @classmethod
            def setUpClass(cls) -> None:
                try:
                    raise RuntimeError("the broker did not start")
                except BaseException:
                    cls.tearDownClass()
                    raise

            @classmethod
            def tearDownClass(cls) -> None:
                stopped.append("zookeeper stopped")

        self.assertRaises(RuntimeError, HalfWay.setUpClass)
        self.assertEqual(stopped, ["zookeeper stopped"])
        HalfWay.tearDownClass()  # the runner's own call afterwards does nothing twice
        self.assertEqual(stopped, ["zookeeper stopped"])
