"""
The broker's HTTP port (C{metrics.port}): Prometheus metrics, health probes,
consumer lag and the web console (docs/operations.md, "Health, lag and the
console").

    /metrics        Prometheus text format (L{kafkatw.broker.metrics})
    /healthz        200 while the process serves (L{kafkatw.web.health})
    /readyz         200 when ready, else 503 with the reasons
    /console/       the console (L{kafkatw.web.console}; read-only unless metrics.console.admin.enable), unless refused
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import Site

from .cluster import cluster_admin, cluster_producer
from .health import HealthResource, ReadyResource
from .lag import LagMonitor, local_high_watermarks

__all__ = ["BrokerHttp", "HttpSite", "cluster_admin", "cluster_producer", "http_root", "start_lag_monitor",
           "stop_lag_monitor"]

_log = Logger()


class HttpSite(Site):
    """
    The HTTP port's site: requests are logged as Twisted Web logs them,
    except the console's JSON polls and the probes (an open console asks
    every 2 s; a Kubernetes probe every few seconds).
    """

    _QUIET = (b"/console/api/", b"/healthz", b"/readyz")

    def log(self, request: Any) -> None:
        if not request.uri.startswith(self._QUIET):
            super().log(request)


def http_root(server: Any, metrics: Resource) -> Resource:
    """
    The resource tree of the HTTP port of C{server} (a
    L{kafkatw.broker.server.KafkaServer}), C{metrics} at C{/metrics}.
    """
    from .auth import BrokerUserChecker, console_guard, sasl_listener
    from .console import ConsoleResource, console_refusal

    root = Resource()
    root.putChild(b"metrics", metrics)
    root.putChild(b"healthz", HealthResource())
    root.putChild(b"readyz", ReadyResource(server))
    config = server.config
    listener = sasl_listener(server) if config["authorizer.class.name"] else None
    refusal = console_refusal(config, listener)
    if refusal is not None:
        if config["metrics.console.enable"]:
            _log.warn("web console disabled: {reason}", reason=refusal)
    elif listener is None:
        root.putChild(b"console", ConsoleResource(server))
    else:
        from ..broker.authenticator import listener_sasl_settings

        settings: list[Any] = []

        def listener_settings() -> Any:
            if not settings and server.registry is not None:
                settings.append(listener_sasl_settings(config, listener, server.registry))
            return settings[0] if settings else None

        checker = BrokerUserChecker(listener_settings, server.reactor)
        root.putChild(b"console", console_guard(lambda principal: ConsoleResource(server, principal), checker))
        _log.info("web console: HTTP basic authentication against the SASL users of listener {listener};"
                  " each user sees what the ACLs let it Describe", listener=listener)
    return root


async def _end_offsets(server: Any, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """
    High watermarks: this broker's own for the partitions it leads, a
    ListOffsets (latest) through an admin client to the cluster for the rest.
    """
    led = {tp for tp in partitions if server.metadata.leader(*tp) == server.broker_id}
    found = local_high_watermarks(server.log_manager, led)
    rest = {tp for tp in partitions if tp not in found and tp[0] in server.metadata.topics}
    if rest:
        from ..client.admin import LATEST_TIMESTAMP

        try:
            answers = await cluster_admin(server).list_offsets({tp: LATEST_TIMESTAMP for tp in rest})
            found.update({tp: info.offset for tp, info in answers.items()})
        except Exception as e:
            _log.warn("consumer lag: reading end offsets failed: {error}", error=e)
    return found


async def start_lag_monitor(server: Any) -> None:
    """Start C{server.lag_monitor} (when the HTTP port is on)."""
    server.lag_monitor = LagMonitor(server.registry, lambda tps: _end_offsets(server, tps), server.reactor,
                                    server.config["metrics.lag.interval.ms"], now_ms=server.milliseconds)
    server.lag_monitor.start()


async def stop_lag_monitor(server: Any) -> None:
    monitor = getattr(server, "lag_monitor", None)
    if monitor is not None:
        monitor.stop()
    producer = getattr(server, "_console_producer", None)
    if producer is not None:
        server._console_producer = None
        await producer.close()
    admin = getattr(server, "_lag_admin", None)
    if admin is not None:
        server._lag_admin = None
        await admin.close()


class BrokerHttp:
    """
    What the broker's HTTP port (C{metrics.port}) serves next to C{/metrics}
    (health, lag, the console) and the consumer-lag monitor behind it.
    L{kafkatw.tap} gives one to L{kafkatw.broker.server.KafkaServer}
    (C{http=}), so the broker does not import this package (docs/design.md,
    "Components and dependencies").
    """

    def site(self, server: Any, metrics: Resource) -> Site:
        """The site of C{server}'s HTTP port, C{metrics} at C{/metrics} (L{http_root})."""
        return HttpSite(http_root(server, metrics), reactor=server.reactor)

    async def start(self, server: Any) -> None:
        """Start C{server.lag_monitor} (L{start_lag_monitor}); a part of the broker's start."""
        await start_lag_monitor(server)

    async def stop(self, server: Any) -> None:
        """Stop the lag monitor and close the console's clients (L{stop_lag_monitor})."""
        await stop_lag_monitor(server)
