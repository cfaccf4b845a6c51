"""
Client quotas: byte-rate quotas on Produce and Fetch and a request-time quota,
per user and client id, after Kafka's C{ClientQuotaManager} and
C{ClientRequestQuotaManager} (KIP-13, KIP-55, KIP-124, KIP-219).

Quotas live in ZooKeeper as Kafka's ZooKeeper mode keeps them, in the
C{config} map of an entity znode (the SCRAM credentials of a user share it)::

    /config/users/<user>/clients/<client-id>   {"version":1,"config":{"producer_byte_rate":"1024"}}
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>

A request's quota is the first of those eight that sets the key, in that
order (Kafka's C{DefaultQuotaCallback}).  The entity found decides who shares
the rate: a quota of C{/config/users/alice} is shared by every client id of
alice; one of C{/config/users/<default>} gives each user its own rate of that
size; C{/config/clients/<default>} gives each client id its own.

Rates are Kafka's C{Rate} over a C{WindowedSum}: C{quota.window.num} samples
(11) of C{quota.window.size.seconds} (1 s) each; the rate is the sum of the
samples divided by the time they cover, which is at least
C{(quota.window.num - 1)} windows so that a young sensor does not see a burst
as a huge rate.  After recording a request, a client whose rate C{observed}
exceeds its quota C{quota} is throttled for::

    (observed - quota) / quota * window_ms

(Kafka's C{QuotaUtils.throttleTime}): the time after which the rate over the
window is back at the quota if nothing more comes.  The time is bounded by
the whole window, C{quota.window.num * quota.window.size.seconds}.

Request time (C{request_percentage}) is recorded as percent of one handler
thread: 10 ms of handling is 1 percent-second, so the rate is the percentage of
the window the client's requests kept the broker busy.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

__all__ = [
    "DEFAULT", "PRODUCER_BYTE_RATE", "CONSUMER_BYTE_RATE", "REQUEST_PERCENTAGE", "QUOTA_KEYS",
    "SampledRate", "QuotaEntity", "ClientQuotaManager", "ClientQuotas", "user_of_principal",
]

#: The entity name of a default (C{<default>} in ZooKeeper; C{None} on the wire).
DEFAULT = "<default>"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
#: The quota keys kafkatw enforces (Kafka's C{QuotaConfigs}; C{controller_mutation_rate} is not).
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)


class SampledRate:
    """
    Kafka's C{Rate} of a C{WindowedSum}: C{samples} windows of C{window_ms}.

    Each sample is C{[start_ms, sum]}; recording into a sample older than
    C{window_ms} starts the next one (reusing the oldest slot), and samples
    older than C{samples * window_ms} count as empty.
    """

    __slots__ = ("samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.samples = max(2, samples)
        self.window_ms = max(1, window_ms)
        self._samples: list[list[float]] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add C{value} (bytes, or percent-seconds) at C{now_ms}."""
        if not self._samples:
            self._samples.append([now_ms, 0.0])
            self._current = 0
        sample = self._samples[self._current]
        if now_ms - sample[0] >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                self._samples.append([now_ms, 0.0])
            else:
                self._samples[self._current][:] = [now_ms, 0.0]
            sample = self._samples[self._current]
        sample[1] += value

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample[0] >= expire:
                sample[:] = [now_ms, 0.0]

    def window_size_ms(self, now_ms: int) -> int:
        """
        The time the samples cover (Kafka's C{Rate.windowSize}): from the
        oldest sample's start to now, at least C{samples - 1} windows, at least 1 ms.
        """
        self._purge(now_ms)
        oldest = min((s[0] for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full_windows = int(elapsed // self.window_ms)
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(int(elapsed), 1)

    def measure(self, now_ms: int) -> float:
        """The rate at C{now_ms}, per second."""
        self._purge(now_ms)
        total = sum(s[1] for s in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)


class QuotaEntity(NamedTuple):
    """
    A quota entity: C{user} and C{client_id} each a name, L{DEFAULT}, or
    C{None} (not part of the entity).  C{QuotaEntity("alice", None)} is
    C{/config/users/alice}; C{QuotaEntity(None, DEFAULT)} is
    C{/config/clients/<default>}.
    """

    user: str | None
    client_id: str | None

    def entity_path(self) -> str:
        """The path under C{/config} (names sanitized as Kafka's C{Sanitizer}: URL encoding)."""
        from ..zookeeper.zk_data import user_entity_name

        def name(value: str) -> str:
            return value if value == DEFAULT else user_entity_name(value)

        if self.user is not None and self.client_id is not None:
            return f"users/{name(self.user)}/clients/{name(self.client_id)}"
        if self.user is not None:
            return f"users/{name(self.user)}"
        if self.client_id is not None:
            return f"clients/{name(self.client_id)}"
        raise ValueError("a quota entity names a user, a client id or both")

    @classmethod
    def from_entity_path(cls, entity_type: str, name: str) -> "QuotaEntity":
        """
        The entity of a config change notification: C{("users", "alice")},
        C{("users", "alice/clients/c1")}, C{("clients", "<default>")}.
        """
        from urllib.parse import unquote

        def plain(value: str) -> str:
            return value if value == DEFAULT else unquote(value)

        if entity_type == "clients":
            return cls(None, plain(name))
        user, sep, client = name.partition("/clients/")
        return cls(plain(user), plain(client) if sep else None)


def user_of_principal(principal: str) -> str:
    """C{"User:alice"} -> C{"alice"} (Kafka's C{KafkaPrincipal.getName})."""
    return principal.partition(":")[2] if ":" in principal else principal


class _Sensor:
    __slots__ = ("rate", "throttle_time_ms_total", "throttled")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.rate = SampledRate(samples, window_ms)
        self.throttle_time_ms_total = 0
        self.throttled = 0


class ClientQuotaManager:
    """
    One quota type's rates and throttles (Kafka's C{ClientQuotaManager}):
    C{producer_byte_rate}, C{consumer_byte_rate} or C{request_percentage}.

    @param quota_key: the config key this manager enforces.
    @param quotas: the shared L{ClientQuotas} (entity -> its quota configs).
    @param samples: C{quota.window.num}.
    @param window_ms: C{quota.window.size.seconds} in ms.
    """

    def __init__(self, quota_key: str, quotas: "ClientQuotas", samples: int = 11, window_ms: int = 1000) -> None:
        self.quota_key = quota_key
        self.quotas = quotas
        self.samples = samples
        self.window_ms = window_ms
        #: The longest throttle: the whole quota window (ms).
        self.max_throttle_time_ms = samples * window_ms
        #: (user tag, client-id tag) -> sensor; tags as Kafka's metric tags ("" when not part of the quota).
        self.sensors: dict[tuple[str, str], _Sensor] = {}

    def quota_for(self, user: str, client_id: str) -> tuple[float | None, tuple[str, str]]:
        """
        The quota of a request of C{user} and C{client_id} and the metric tags
        of the rate it shares (Kafka's C{DefaultQuotaCallback.quotaMetricTags}).

        @return: (quota, or C{None} when unlimited; (user tag, client-id tag)).
        """
        key = self.quota_key
        find = self.quotas.get
        for entity, tags in (
            (QuotaEntity(user, client_id), (user, client_id)),
            (QuotaEntity(user, DEFAULT), (user, client_id)),
            (QuotaEntity(user, None), (user, "")),
            (QuotaEntity(DEFAULT, client_id), (user, client_id)),
            (QuotaEntity(DEFAULT, DEFAULT), (user, client_id)),
            (QuotaEntity(DEFAULT, None), (user, "")),
            (QuotaEntity(None, client_id), ("", client_id)),
            (QuotaEntity(None, DEFAULT), ("", client_id)),
        ):
            value = find(entity, key)
            if value is not None:
                return value, tags
        return None, ("", "")

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """
        Record C{value} (bytes, or percent-seconds) of a request and return how
        long its client is throttled (0 within its quota or without one).
        """
        quota, tags = self.quota_for(user, client_id)
        if quota is None:
            return 0
        sensor = self.sensors.get(tags)
        if sensor is None:
            sensor = self.sensors[tags] = _Sensor(self.samples, self.window_ms)
        rate = sensor.rate
        rate.record(value, now_ms)
        observed = rate.measure(now_ms)
        if observed <= quota:
            return 0
        throttle = self.throttle_time_ms(observed, quota, rate.window_size_ms(now_ms))
        sensor.throttle_time_ms_total += throttle
        sensor.throttled += 1
        return throttle

    def record(self, value: float, user: str, client_id: str, now_ms: int) -> None:
        """Record C{value} without asking for a throttle (a request answered later)."""
        quota, tags = self.quota_for(user, client_id)
        if quota is not None:
            sensor = self.sensors.get(tags)
            if sensor is None:
                sensor = self.sensors[tags] = _Sensor(self.samples, self.window_ms)
            sensor.rate.record(value, now_ms)

    def throttle_time_ms(self, observed: float, quota: float, window_ms: int) -> int:
        """C{(observed - quota) / quota * window_ms}, rounded, at most L{max_throttle_time_ms}."""
        if quota <= 0:
            return self.max_throttle_time_ms
        return min(int(round((observed - quota) / quota * window_ms)), self.max_throttle_time_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back C{value} (a throttled fetch answered without its data), as Kafka's C{unrecordQuotaSensor}."""
        quota, tags = self.quota_for(user, client_id)
        sensor = self.sensors.get(tags)
        if quota is not None and sensor is not None:
            sensor.rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """
        The most a client may take in one quota window (Kafka's
        C{getMaxValueInQuotaWindow}: quota times C{quota.window.num - 1}
        windows), which bounds a fetch's size; C{None} without a quota.
        """
        quota, _ = self.quota_for(user, client_id)
        if quota is None:
            return None
        return quota * (self.samples - 1) * self.window_ms / 1000.0

    def rates(self, now_ms: int) -> Iterable[tuple[tuple[str, str], float, int]]:
        """(tags, current rate per second, throttle time total ms) of every sensor, for metrics."""
        for tags, sensor in list(self.sensors.items()):
            yield tags, sensor.rate.measure(now_ms), sensor.throttle_time_ms_total


class ClientQuotas:
    """
    Every quota entity's quota configs, as read from ZooKeeper (or set by
    tests), and the three managers that enforce them.

    @param clock: has C{seconds()} (the reactor, or a L{twisted.internet.task.Clock}).
    @param samples: C{quota.window.num}.
    @param window_seconds: C{quota.window.size.seconds}.
    """

    def __init__(self, clock: Any, samples: int = 11, window_seconds: int = 1) -> None:
        self.clock = clock
        self.entities: dict[QuotaEntity, dict[str, float]] = {}
        window_ms = window_seconds * 1000
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, self, samples, window_ms)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, self, samples, window_ms)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, self, samples, window_ms)

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def get(self, entity: QuotaEntity, key: str) -> float | None:
        configs = self.entities.get(entity)
        return None if configs is None else configs.get(key)

    def any_for(self, key: str) -> bool:
        return any(key in configs for configs in self.entities.values())

    @property
    def enabled(self) -> bool:
        """Whether any quota is set (else requests skip the quota paths)."""
        return bool(self.entities)

    def update(self, entity: QuotaEntity, config: dict[str, str]) -> None:
        """
        Replace C{entity}'s quotas with the quota keys of its znode's config
        (other keys, such as SCRAM credentials, are ignored; an unparsable
        value is left out).
        """
        quotas = {}
        for key in QUOTA_KEYS:
            if key in config:
                try:
                    quotas[key] = float(config[key])
                except (TypeError, ValueError):
                    continue
        if quotas:
            self.entities[entity] = quotas
        else:
            self.entities.pop(entity, None)

    def metric_families(self) -> Iterable[Any]:
        """
        Prometheus families of every rate with a quota, under the names the
        JMX exporter gives Kafka's C{kafka.server:type=Produce|Fetch|Request,user=,client-id=}
        sensors: C{kafka_server_produce_byte_rate}, C{kafka_server_fetch_byte_rate}
        (bytes/s), C{kafka_server_request_request_time} (percent of a
        handler), and C{kafka_server_<type>_throttle_time_ms_total} (ms of throttle given).
        """
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        now_ms = self.now_ms()
        for kind, manager, rate_name, rate_doc in (
            ("produce", self.produce, "byte_rate", "Produce bytes/s of a quota entity."),
            ("fetch", self.fetch, "byte_rate", "Fetch response bytes/s of a quota entity."),
            ("request", self.request, "request_time", "Request handler time of a quota entity, percent."),
        ):
            rate = GaugeMetricFamily(f"kafka_server_{kind}_{rate_name}", rate_doc, labels=["user", "client_id"])
            throttle = CounterMetricFamily(f"kafka_server_{kind}_throttle_time_ms",
                                           f"Throttle time given to {kind} requests of a quota entity (ms).",
                                           labels=["user", "client_id"])
            for (user, client_id), value, throttle_ms in manager.rates(now_ms):
                rate.add_metric([user, client_id], value)
                throttle.add_metric([user, client_id], throttle_ms)
            yield rate
            yield throttle

    def entity_changed(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        """A L{kafkatw.zookeeper.config_changes.ConfigChangeListener} callback for C{users} and C{clients}."""
        self.update(QuotaEntity.from_entity_path(entity_type, name), config)
