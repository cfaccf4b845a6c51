"""
The clocks of a kafkatw process (issue 28): timers on the monotonic clock,
the wall clock read apart.

Kafka's clients and brokers time their timeouts, lingers, heartbeats and
backoffs with C{System.nanoTime} and read C{System.currentTimeMillis} only
for what is written down (a record's C{CreateTime}, a commit's timestamp).
A Twisted reactor's C{seconds()} is C{time.time}: a step of the machine's
clock (NTP, an operator) back stalls every C{callLater}, forward fires them
early.  L{use_monotonic_clock} moves a reactor's timers to C{time.monotonic};
what needs the wall clock takes it as a C{wall_clock} callable (C{time.time}'s
shape, default C{time.time}: L{kafkatw.client.producer.Producer},
L{kafkatw.client.zookeeper_group.ZooKeeperConsumerGroup}, the broker's
L{kafkatw.broker.server.KafkaServer}).

Who calls it: C{twistd kafkatw} (L{kafkatw.tap}), the blocking clients'
private reactor (L{kafkatw.client.blocking}) and C{kafkatw producer-perf-test};
a program that runs kafkatw's Twisted clients on its own reactor calls it
before anything is scheduled on it.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["use_monotonic_clock"]


def use_monotonic_clock(reactor: Any) -> None:
    """
    Run C{reactor}'s timers on C{time.monotonic} rather than on the wall
    clock: its C{seconds()} becomes C{time.monotonic}, so that a step of the
    machine's clock (NTP, an operator) neither stalls its C{callLater}s
    (a step back) nor fires them early (a step forward), as Kafka's
    scheduler runs on C{System.nanoTime}.  What needs the wall clock reads
    it itself (L{kafkatw.broker.server.KafkaServer.milliseconds}, the
    producer's C{wall_clock}).

    Twisted has no switch for it: C{ReactorBase.seconds} is C{time.time}
    (C{twisted.python.runtime.seconds}); this sets C{seconds} on the
    instance, which C{callLater} reads for each call's time and hands to its
    C{DelayedCall}, and C{timeout()} and C{runUntilCurrent()} compare with
    (docs/design.md, "Private APIs"; C{tests/unit/test_private_apis.py}).

    @raise RuntimeError: a call is already scheduled on the wall clock.
    """
    if reactor.seconds is time.monotonic:
        return
    if reactor.getDelayedCalls():
        raise RuntimeError("the reactor's clock can change only before anything is scheduled on it")
    reactor.seconds = time.monotonic
