"""
A deterministic simulation of a whole kafkatw cluster in one process (issue 28).

Real brokers (L{kafkatw.broker.server.KafkaServer}), kafkatw's producer and
consumer, and their log files; simulated time, network
(L{kafkatw.simulation.network}), ZooKeeper (L{kafkatw.testing.FakeZooKeeper})
and, optionally, the disk's page cache (L{kafkatw.simulation.disk}).
A seed gives a schedule of faults (L{kafkatw.simulation.cluster.make_schedule});
the same seed replays identically.  Run seeds with
C{python -m kafkatw.simulation --seeds N --start S}; docs/design.md,
"Deterministic simulation", says what is checked.
"""

from kafkatw.simulation.cluster import Fault, RunResult, Schedule, Settings, Violation, make_schedule, run_seed, shrink

__all__ = ["Fault", "RunResult", "Schedule", "Settings", "Violation", "make_schedule", "run_seed", "shrink"]
