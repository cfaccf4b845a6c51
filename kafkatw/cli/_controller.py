"""
Requests of the controller tools (C{leader-election}, C{reassign-partitions})
on the Twisted L{kafkatw.client.client.KafkaClient}, driven through the
blocking facade's reactor thread (L{kafkatw.client.blocking.reactor_thread}).

ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments are
served by the controller only: a request goes to Metadata's C{controller_id};
an answer of C{NOT_CONTROLLER} or a lost connection refreshes the metadata and
retries until the command's timeout, as Kafka's admin client does.

Kept small on purpose: the admin client (issue 10) takes these requests over.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from twisted.internet.task import deferLater

from kafkatw.client.client import KafkaClient
from kafkatw.client.connection import BrokerConnectionError, RequestTimedOutError
from kafkatw.errors import ErrorCode, KafkaError, kafka_error

__all__ = ["run_admin", "metadata", "controller_request", "API_ELECT_LEADERS", "API_ALTER_REASSIGNMENTS",
           "API_LIST_REASSIGNMENTS"]

API_METADATA = 3
API_ELECT_LEADERS = 43
API_ALTER_REASSIGNMENTS = 45
API_LIST_REASSIGNMENTS = 46

#: the wait between attempts to reach the controller (s)
RETRY_BACKOFF_S = 0.1


def run_admin(bootstrap_server: str, timeout_ms: int,
              action: Callable[[KafkaClient, float], Awaitable[Any]], client_id: str) -> Any:
    """
    Run C{action(client, deadline)} with a fresh L{KafkaClient} on this
    process's reactor thread and wait for its result.

    @param timeout_ms: the whole command's time (ms); C{deadline} is in the
        reactor's C{seconds()}.
    @raise KafkaError: what C{action} raised, or a timeout.
    """
    from kafkatw.client.blocking import reactor_thread

    thread = reactor_thread()

    async def session() -> Any:
        client = KafkaClient(thread.reactor, bootstrap_server, client_id=client_id,
                             request_timeout_ms=min(timeout_ms, 30000), allow_auto_create_topics=False)
        deadline = thread.reactor.seconds() + timeout_ms / 1000.0
        try:
            await client.start()
            return await action(client, deadline)
        finally:
            await client.close()

    return thread.call(timeout_ms / 1000.0 + 5, session)


async def metadata(client: KafkaClient, topics: list[str] | None) -> Any:
    """
    A Metadata response for C{topics} (C{None}: every topic), from any broker.

    @return: the kio Metadata response (brokers, C{controller_id}, topics with
        their partitions' C{replica_nodes} and C{isr_nodes}).
    """
    body = {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    last: Exception | None = None
    for _ in range(max(2, len(client.brokers) + len(client.bootstrap))):
        try:
            return await client.send(client.least_loaded_node(), API_METADATA, body)
        except KafkaError as e:
            last = e
    raise last or BrokerConnectionError("no broker reachable for metadata")


async def controller_request(client: KafkaClient, api_key: int, body: dict, deadline: float) -> Any:
    """
    Send one request to the controller and return its response.

    A response whose top-level C{error_code} is C{NOT_CONTROLLER}, a
    connection that fails and a request that times out are retried on the
    controller named by fresh metadata until C{deadline} (reactor seconds).

    @raise KafkaError: C{REQUEST_TIMED_OUT} at the deadline (carrying the last
        failure's text), or the error of a broker that cannot be reached.
    """
    reactor = client.reactor
    last = "no controller known"
    while True:
        controller = client.controller_id
        if controller >= 0 and controller in client.brokers:
            remaining_ms = int((deadline - reactor.seconds()) * 1000)
            try:
                response = await client.send(controller, api_key, body,
                                             timeout_ms=max(1, min(remaining_ms, client.request_timeout_ms)))
            except (BrokerConnectionError, RequestTimedOutError) as e:
                last = str(e)
            else:
                code = int(getattr(response, "error_code", 0))
                if code != ErrorCode.not_controller:
                    return response
                last = f"broker {controller} is no longer the controller"
        if reactor.seconds() + RETRY_BACKOFF_S >= deadline:
            raise kafka_error(ErrorCode.request_timed_out, f"Timed out waiting for the controller ({last})")
        await deferLater(reactor, RETRY_BACKOFF_S, lambda: None)
        client.invalidate()
        try:
            await client.refresh_metadata()
        except KafkaError as e:
            last = str(e)
