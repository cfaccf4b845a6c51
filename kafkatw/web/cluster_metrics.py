"""
Every broker's counters, for the console's cluster-wide rates
(docs/operations.md, "Health, lag and the console").

A broker's console reads its own counters from memory and each other live
broker's from that broker's own C{/metrics} (the Prometheus text of
L{kafkatw.broker.metrics}, the numbers a Prometheus server scrapes), at the
host and HTTP port the broker registered in C{/brokers/ids/<id>}
(C{"metrics_host"}, from its C{metrics.bind.address}, and C{"metrics_port"},
as Kafka registers C{jmx_port} for the same use).  ZooKeeper gives the address only, never the numbers: the
page's totals are the sums of what each broker exports, so they agree with
any dashboard built on the same metrics.

The counters (records and bytes in, bytes out; cumulative since the broker
started, so the page derives rates from two readings) are
C{kafka_server_brokertopicmetrics_messagesin_total},
C{..._bytesin_total} and C{..._bytesout_total}, all topics and per C{topic}.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

__all__ = ["COUNTER_METRICS", "ClusterCounters", "add_counters", "local_counters", "parse_counters"]

_log = Logger()

#: metric family -> the console's counter name.
COUNTER_METRICS = {
    "kafka_server_brokertopicmetrics_messagesin": "messages_in",
    "kafka_server_brokertopicmetrics_bytesin": "bytes_in",
    "kafka_server_brokertopicmetrics_bytesout": "bytes_out",
}
_KEYS = tuple(COUNTER_METRICS.values())
#: Seconds a scrape of another broker's C{/metrics} may take.
SCRAPE_TIMEOUT_S = 2.0
#: Seconds a reading is reused (several open pages poll every 2 s).
REUSE_S = 0.9


def _zero() -> dict[str, int]:
    return {key: 0 for key in _KEYS}


def parse_counters(text: str) -> dict:
    """
    The counters in a broker's C{/metrics} answer (Prometheus text format).

    @return: C{{"messages_in", "bytes_in", "bytes_out": int, "topics": {topic: {the three}}}}.
    @raise ValueError: C{text} is not Prometheus text.
    """
    from prometheus_client.parser import text_string_to_metric_families

    found: dict = {**_zero(), "topics": {}}
    for family in text_string_to_metric_families(text):
        key = COUNTER_METRICS.get(family.name)
        if key is None:
            continue
        for sample in family.samples:
            if sample.name != family.name + "_total":
                continue
            topic = sample.labels.get("topic")
            if topic is None:
                found[key] = int(sample.value)
            else:
                found["topics"].setdefault(topic, _zero())[key] = int(sample.value)
    return found


def local_counters(apis: Any) -> dict:
    """The same counters read from a L{kafkatw.broker.apis.KafkaApis} (this broker's, no HTTP)."""
    if apis is None:
        return {**_zero(), "topics": {}}
    topics: dict[str, dict[str, int]] = {}
    for key, per_topic in (("messages_in", apis.topic_messages_in), ("bytes_in", apis.topic_bytes_in),
                           ("bytes_out", apis.topic_bytes_out)):
        for topic, value in list(per_topic.items()):
            topics.setdefault(topic, _zero())[key] = value
    return {"messages_in": apis.messages_in, "bytes_in": apis.bytes_in, "bytes_out": apis.bytes_out,
            "topics": topics}


def add_counters(readings: list[dict]) -> dict:
    """The sum of C{readings} (as L{parse_counters}), overall and per topic."""
    total: dict = {**_zero(), "topics": {}}
    for reading in readings:
        for key in _KEYS:
            total[key] += reading[key]
        for topic, values in reading["topics"].items():
            into = total["topics"].setdefault(topic, _zero())
            for key in _KEYS:
                into[key] += values[key]
    return total


def _http_get(reactor: Any, url: str) -> defer.Deferred:
    """The body of C{GET url} as text (Twisted's C{Agent}), failing after L{SCRAPE_TIMEOUT_S}."""
    from twisted.web.client import Agent, readBody

    agent = Agent(reactor, connectTimeout=SCRAPE_TIMEOUT_S)
    d = agent.request(b"GET", url.encode("ascii"))

    def body(response: Any) -> Any:
        if response.code != 200:
            raise ValueError(f"HTTP {response.code}")
        return readBody(response)

    d.addCallback(body).addCallback(lambda data: data.decode("utf-8"))
    d.addTimeout(SCRAPE_TIMEOUT_S, reactor)
    return d


class ClusterCounters:
    """
    The counters of every live broker of C{server}'s cluster (a
    L{kafkatw.broker.server.KafkaServer}: its C{metadata.brokers}, its
    C{registered_brokers} with their C{metrics_port}, its C{apis}).

    @param get: C{url -> Deferred} firing with the text at C{url} (default:
        Twisted Web's C{Agent}).
    """

    def __init__(self, server: Any, get: Callable[[str], defer.Deferred] | None = None) -> None:
        self.server = server
        self.get = get or (lambda url: _http_get(server.reactor, url))
        self._last: tuple[float, dict] | None = None
        self._waiting: list[defer.Deferred] = []

    def url(self, broker_id: int) -> str | None:
        """Where broker C{broker_id}'s C{/metrics} is, or C{None} when it registered no HTTP port."""
        info = getattr(self.server, "registered_brokers", {}).get(broker_id)
        endpoint = self.server.metadata.brokers.get(broker_id)
        port = None if info is None else info.metrics_port
        if port is None or endpoint is None:
            return None
        # the host it registered (metrics.bind.address); registrations without one are a
        # kafkatw's before the setting, reached at its listener's host as before
        host = info.metrics_host or endpoint.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/metrics"

    async def _read(self, broker_id: int) -> dict:
        if broker_id == self.server.broker_id:
            return local_counters(self.server.apis)
        url = self.url(broker_id)
        if url is None:
            return {"error": f"broker {broker_id} serves no metrics (its metrics.port is -1)"}
        try:
            return parse_counters(await self.get(url))
        except Exception as e:
            _log.debug("console: reading {url} failed: {error}", url=url, error=e)
            return {"error": f"{url} did not answer ({e.__class__.__name__}: {e})".replace(" ()", ""),
                    "url": url}

    async def _read_all(self) -> dict:
        ids = sorted(self.server.metadata.brokers) or [self.server.broker_id]
        if self.server.broker_id not in ids:
            ids.append(self.server.broker_id)
        readings = await defer.gatherResults([defer.Deferred.fromCoroutine(self._read(i)) for i in ids])
        return dict(zip(ids, readings))

    def read(self) -> defer.Deferred:
        """
        broker id -> its counters (L{parse_counters}) or C{{"error": why}}
        when it could not be read; one reading shared by the callers of the
        same L{REUSE_S}.
        """
        now = self.server.reactor.seconds()
        if self._last is not None and now - self._last[0] < REUSE_S:
            return defer.succeed(self._last[1])
        waiting: defer.Deferred = defer.Deferred()
        self._waiting.append(waiting)
        if len(self._waiting) == 1:
            def done(result: Any) -> None:
                callers, self._waiting = self._waiting, []
                if not isinstance(result, Failure):
                    self._last = (now, result)
                for d in callers:
                    d.callback(result)

            defer.Deferred.fromCoroutine(self._read_all()).addBoth(done)
        return waiting
