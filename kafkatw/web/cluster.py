"""
The broker's own clients to its cluster, for the consumer lag and the
console: an admin client and a producer to its inter-broker listener, with
its credentials (made on first use, closed by
L{kafkatw.web.stop_lag_monitor}), and the reader of every broker's counters
(L{cluster_counters}).
"""

from __future__ import annotations

from typing import Any

__all__ = ["cluster_admin", "cluster_counters", "cluster_producer"]


def cluster_admin(server: Any) -> Any:
    """
    The admin client of the lag computation and the console, to this
    broker's inter-broker listener with its own credentials (made on first
    use, closed by L{kafkatw.web.stop_lag_monitor}).
    """
    if getattr(server, "_lag_admin", None) is None:
        from ..client.admin import AdminClient

        host, port = next((h, p) for name, h, p in server._advertised_endpoints()
                          if name == server.listeners.inter_broker_listener)
        server._lag_admin = AdminClient(server.reactor, f"{host}:{port}", client_id=f"broker-{server.broker_id}-lag",
                                        request_timeout_ms=5000, default_api_timeout_ms=10000,
                                        security=server.inter_broker_security())
    return server._lag_admin


def cluster_producer(server: Any) -> Any:
    """
    The producer of the console's produce action, sharing the connections
    of L{cluster_admin} (made on first use, closed by L{kafkatw.web.stop_lag_monitor}).
    """
    if getattr(server, "_console_producer", None) is None:
        from ..client.producer import Producer

        server._console_producer = Producer(server.reactor, client=cluster_admin(server).client, acks="all",
                                            linger_ms=0, delivery_timeout_ms=10000, request_timeout_ms=5000,
                                            retries=2)
    return server._console_producer


def cluster_counters(server: Any) -> Any:
    """
    The L{kafkatw.web.cluster_metrics.ClusterCounters} of the console's
    cluster-wide rates: every live broker's counters, each read from that
    broker's own C{/metrics} (made on first use).
    """
    if getattr(server, "_console_counters", None) is None:
        from .cluster_metrics import ClusterCounters

        server._console_counters = ClusterCounters(server)
    return server._console_counters
