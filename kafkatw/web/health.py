"""
C{/healthz} and C{/readyz} on the metrics HTTP port (C{metrics.port}).

C{/healthz} answers 200 C{ok} whenever the process serves HTTP (a liveness
probe).  C{/readyz} answers 200 C{ready} only when the broker can serve
clients: its ZooKeeper session is up, it is registered in C{/brokers/ids},
its logs are loaded, and it is not shutting down; otherwise 503 with one
reason a line (a readiness probe; Kubernetes' convention for the paths).
"""

from __future__ import annotations

from typing import Any

from twisted.web.resource import Resource

__all__ = ["readiness_problems", "HealthResource", "ReadyResource"]


def readiness_problems(server: Any) -> list[str]:
    """
    Why C{server} (a L{kafkatw.broker.server.KafkaServer}) is not ready.

    @return: one sentence per unmet condition; empty when ready.
    """
    problems = []
    if server.shutting_down:
        problems.append("the broker is shutting down")
    zookeeper = server.zookeeper
    if zookeeper is None or not zookeeper.connected:
        problems.append("no ZooKeeper session (zookeeper.connect)")
    if server.log_manager is None:
        problems.append("the logs are not loaded yet")
    if server.start_error is not None:
        problems.append(server.start_error)
    elif not server.ready.called:
        problems.append(f"broker {server.broker_id} is not registered in /brokers/ids yet")
    return problems


class HealthResource(Resource):
    """C{/healthz}: 200 while the process serves."""

    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        request.setHeader(b"cache-control", b"no-store")
        return b"ok\n"


class ReadyResource(Resource):
    """C{/readyz}: 200 when L{readiness_problems} finds none, else 503 listing them."""

    isLeaf = True

    def __init__(self, server: Any) -> None:
        super().__init__()
        self.broker = server

    def render_GET(self, request: Any) -> bytes:
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        request.setHeader(b"cache-control", b"no-store")
        problems = readiness_problems(self.broker)
        if not problems:
            return b"ready\n"
        request.setResponseCode(503)
        return ("not ready:\n" + "".join(f"- {p}\n" for p in problems)).encode("utf-8")
