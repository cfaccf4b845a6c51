"""
What the benchmark scripts share: their JSON output lines, a process's CPU
time, a broker run under cProfile, and librdkafka (confluent-kafka) produce and consume loops bounded in
count and in time.

The scripts run as C{python bench/bench_X.py}, so this folder is on
C{sys.path} and they C{import _common}.  confluent-kafka is imported where it is used: the
scripts' child processes that run kafkatw's own clients do not load it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable

CLK_TCK = os.sysconf("SC_CLK_TCK")


def emitter(bench: str) -> Callable[..., None]:
    """
    The C{emit(figure, value, unit, **extra)} of a script: one JSON line on
    stdout, C{{"bench": bench, "figure": ..., "value": ..., "unit": ..., **extra}}.
    """
    def emit(figure: str, value: Any, unit: str, **extra: Any) -> None:
        print(json.dumps({"bench": bench, "figure": figure, "value": value, "unit": unit, **extra}), flush=True)

    return emit


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process (all its threads), in seconds (proc(5): C{/proc/<pid>/stat}): the CPU
    spent in the process's own code, and in the kernel on its behalf (system calls: copies to and from
    sockets and files)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after the ")" field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds (proc(5): C{/proc/<pid>/stat})."""
    return sum(cpu_times(pid))


#: Runs twistd under cProfile (on CPU time when argv[2] is "cpu", else wall time); SIGUSR2 writes the
#: profile to argv[1] (twistd takes SIGUSR1 for its log).
_PROFILED = """
import cProfile, signal, sys, time
out, clock = sys.argv.pop(1), sys.argv.pop(1)
profile = cProfile.Profile(time.process_time) if clock == "cpu" else cProfile.Profile()
def dump(*_):
    profile.disable()
    profile.dump_stats(out)
signal.signal(signal.SIGUSR2, dump)
from twisted.scripts.twistd import run
sys.argv[0] = 'twistd'
profile.enable()
run()
"""


def profiled_command(command: list[str], out: str, cpu_time: bool = False) -> list[str]:
    """
    A L{kafkatw.testing.BrokerProcess} C{command()} (C{[python, -c, script, twistd arguments...]}) run under
    cProfile instead, on CPU time or wall time; C{os.kill(pid, signal.SIGUSR2)} writes the profile to C{out}
    (read it with C{python -m pstats}).
    """
    return [sys.executable, "-c", _PROFILED, out, "cpu" if cpu_time else "wall"] + command[3:]


def produce_bounded(producer: Any, topic: str, value: bytes, n: int, deadline: float,
                    key_of: Callable[[int], bytes] | None = None, partition: int = 0) -> int:
    """
    Hand up to C{n} records of C{value} to C{producer} for C{partition} of
    C{topic}, stopping at C{deadline} (C{time.perf_counter()}, checked every
    1024 records).  A full local queue (C{BufferError}) is polled and the record
    retried; delivery reports are served every 1024 records.  Flushing is the
    caller's.

    @param key_of: the key of the C{i}th record (C{None}: null keys).
    @param partition: the partition (-1: librdkafka's partitioner picks, its
        sticky partitioner for null keys).
    @return: the number of records handed over.
    """
    sent = 0
    produce = producer.produce
    poll = producer.poll
    while sent < n:
        try:
            if key_of is None:
                produce(topic, value, partition=partition)
            else:
                produce(topic, value, key=key_of(sent), partition=partition)
        except BufferError:
            poll(0.01)
            continue
        sent += 1
        if not sent & 0x3FF:
            poll(0)
            if time.perf_counter() > deadline:
                break
    return sent


def consume_from_start(bootstrap: str, topic: str, n: int, cap_s: float, conf: dict) -> tuple[int, int]:
    """
    Consume partition 0 of C{topic} from offset 0 (assign + C{consume(10000)}
    loop) until C{n} records or C{cap_s} seconds; C{conf} adds to (or
    overrides) C{bootstrap.servers}, C{group.id} C{bench-consume} and
    C{enable.auto.commit} false.

    @return: (records, value bytes).
    @raise KafkaException: a fatal consumer error.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-consume", "enable.auto.commit": False,
                  **conf})
    c.assign([TopicPartition(topic, 0, 0)])
    count = nbytes = 0
    deadline = time.perf_counter() + cap_s
    try:
        while count < n and time.perf_counter() < deadline:
            for m in c.consume(num_messages=10000, timeout=1.0):
                if m.error() is None:
                    count += 1
                    nbytes += len(m.value())
                elif m.error().fatal():
                    raise KafkaException(m.error())
    finally:
        c.close()
    return count, nbytes
