"""
Real clients against a real broker at its group coordinator, when a member
leaves and rejoins (transactional producers: tests/integration/test_transactions.py).

  - A LeaveGroup of a group's last member and a JoinGroup written back to back
    on one connection (as raw frames, so that the broker reads both at once)
    answer 0 and MEMBER_ID_REQUIRED, never INCONSISTENT_GROUP_PROTOCOL; an
    aiokafka consumer unsubscribes and subscribes again, three times, and gets
    its partitions each time.

One ZooKeeper and one broker serve the whole module.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

from twisted.trial import unittest

from kafkatw.errors import ErrorCode
from kafkatw.protocol.messages import decode_response, encode_request
from kafkatw.testing import ClassFixture, running_cluster

#: Clients' own timeouts: long, so that a retrying client would be seen failing slowly (s).
CLIENT_TIMEOUT_S = 30.0

TOPIC = "coordinators"


def _exchange(bootstrap: str, requests: list[tuple[int, int, dict]]) -> list[Any]:
    """Write every request in one C{sendall} on one connection, then read the responses in order."""
    host, port = bootstrap.rsplit(":", 1)
    frames = [encode_request(key, version, i, "interop-raw", body) for i, (key, version, body) in enumerate(requests)]
    with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT_S) as sock:
        sock.sendall(b"".join(struct.pack(">i", len(f)) + f for f in frames))
        stream = sock.makefile("rb")
        responses = []
        for i, (key, version, _) in enumerate(requests):
            (size,) = struct.unpack(">i", stream.read(4))
            correlation_id, response = decode_response(key, version, stream.read(size))
            assert correlation_id == i
            responses.append(response)
        return responses


def check_leave_then_join_pipelined(broker: Any) -> None:
    """LeaveGroup of the last member and a JoinGroup in one write: 0 and MEMBER_ID_REQUIRED."""
    join = {"group_id": "pipelined", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}], "reason": None}
    (first,) = _exchange(broker.bootstrap, [(11, 5, join)])
    assert first.error_code == ErrorCode.member_id_required, first
    member = first.member_id
    (joined,) = _exchange(broker.bootstrap, [(11, 5, {**join, "member_id": member})])
    assert joined.error_code == ErrorCode.none, joined
    for _ in range(3):
        leave = {"group_id": "pipelined", "members": [{"member_id": member, "group_instance_id": None}]}
        left, rejoined = _exchange(broker.bootstrap, [(13, 3, leave), (11, 5, join)])
        assert (left.error_code, left.members[0].error_code) == (ErrorCode.none, ErrorCode.none), left
        assert rejoined.error_code == ErrorCode.member_id_required, rejoined
        (joined,) = _exchange(broker.bootstrap, [(11, 5, {**join, "member_id": rejoined.member_id})])
        assert joined.error_code == ErrorCode.none, joined
        member = rejoined.member_id
    assert "INCONSISTENT_GROUP_PROTOCOL" not in broker.log_text()


def check_aiokafka_leaves_and_rejoins(broker: Any) -> None:
    """An aiokafka consumer unsubscribes (LeaveGroup) and subscribes again (JoinGroup), three times."""
    from aiokafka import AIOKafkaConsumer

    async def go() -> list[float]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="aiokafka-rejoin",
                                    enable_auto_commit=False, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
        await consumer.start()
        took = []
        try:
            for _ in range(3):
                consumer.subscribe([TOPIC])
                started = time.monotonic()
                while not consumer.assignment():
                    await consumer.getmany(timeout_ms=100)
                    assert time.monotonic() - started < CLIENT_TIMEOUT_S, "no assignment"
                took.append(time.monotonic() - started)
                assert {tp.partition for tp in consumer.assignment()} == {0, 1}
                consumer.unsubscribe()
        finally:
            await consumer.stop()
        return took

    took = asyncio.run(go())
    assert len(took) == 3 and max(took) < CLIENT_TIMEOUT_S / 2, took
    assert "INCONSISTENT_GROUP_PROTOCOL" not in broker.log_text()


class CoordinatorInteropTests(ClassFixture, unittest.TestCase):
    """The checks above against one real broker (and its ZooKeeper)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls._cluster = running_cluster(brokers=1, overrides={"group.initial.rebalance.delay.ms": "0"})
        cls.broker = cls._cluster.__enter__()[0]
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=cls.broker.bootstrap)
        try:
            admin.create_topics([NewTopic(TOPIC, 2, 1)])
        finally:
            admin.close()

    @classmethod
    def tearDownClass(cls) -> None:
        cls._cluster.__exit__(None, None, None)

    def test_leave_then_join_pipelined(self) -> None:
        check_leave_then_join_pipelined(self.broker)

    def test_aiokafka_leaves_and_rejoins(self) -> None:
        check_aiokafka_leaves_and_rejoins(self.broker)
