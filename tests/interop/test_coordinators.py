"""
Real clients against a real broker at its coordinators: the group coordinator
when a member leaves and rejoins, and the answer a transactional producer gets
until transactions exist.

  - A LeaveGroup of a group's last member and a JoinGroup written back to back
    on one connection (as raw frames, so that the broker reads both at once)
    answer 0 and MEMBER_ID_REQUIRED, never INCONSISTENT_GROUP_PROTOCOL; an
    aiokafka consumer unsubscribes and subscribes again, three times, and gets
    its partitions each time.
  - A transactional producer of confluent-kafka (librdkafka), kafka-python and
    aiokafka fails within L{FAIL_FAST_S} with an error the client treats as
    fatal; librdkafka's carries the broker's explanation ("kafkatw does not
    support transactions"), and the broker logs the refusal with the
    transactional id for the others, which do not show a broker's message.

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

#: A transactional producer must have failed within this long (s).
FAIL_FAST_S = 5.0

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


def _assert_refusal_logged(broker: Any, transactional_id: str) -> None:
    lines = [line for line in broker.log_text().splitlines()
             if f"refused FindCoordinator for transactional id {transactional_id!r}" in line]
    assert lines and "does not support transactions" in lines[0], lines


def check_confluent_init_transactions_fails_fast(broker: Any) -> None:
    """confluent-kafka: C{init_transactions} raises a fatal KafkaError whose text says why."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-confluent",
                         "log_level": 0})
    started = time.monotonic()
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0]
    else:
        raise AssertionError("init_transactions succeeded")
    took = time.monotonic() - started
    assert took < FAIL_FAST_S, took
    assert error.fatal() and not error.retriable(), error
    assert error.code() == ErrorCode.transactional_id_authorization_failed, error
    assert "kafkatw does not support transactions" in error.str(), error.str()
    _assert_refusal_logged(broker, "txn-confluent")


def check_kafka_python_init_transactions_fails_fast(broker: Any) -> None:
    """kafka-python: C{init_transactions} raises TransactionalIdAuthorizationFailedError at once."""
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-kafka-python",
                             max_block_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        started = time.monotonic()
        try:
            producer.init_transactions()
        except TransactionalIdAuthorizationFailedError:
            pass
        else:
            raise AssertionError("init_transactions succeeded")
        took = time.monotonic() - started
    finally:
        producer.close(5)
    assert took < FAIL_FAST_S, took
    _assert_refusal_logged(broker, "txn-kafka-python")


def check_aiokafka_transactional_start_fails_fast(broker: Any) -> None:
    """aiokafka: a transactional producer's C{start()} raises TransactionalIdAuthorizationFailed at once."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TransactionalIdAuthorizationFailed

    async def go() -> float:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-aiokafka",
                                    request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
        started = time.monotonic()
        try:
            await producer.start()
        except TransactionalIdAuthorizationFailed:
            return time.monotonic() - started
        finally:
            await producer.stop()
        raise AssertionError("start() succeeded")

    took = asyncio.run(go())
    assert took < FAIL_FAST_S, took
    _assert_refusal_logged(broker, "txn-aiokafka")


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

    def test_confluent_init_transactions_fails_fast(self) -> None:
        check_confluent_init_transactions_fails_fast(self.broker)

    def test_kafka_python_init_transactions_fails_fast(self) -> None:
        check_kafka_python_init_transactions_fails_fast(self.broker)

    def test_aiokafka_transactional_start_fails_fast(self) -> None:
        check_aiokafka_transactional_start_fails_fast(self.broker)
