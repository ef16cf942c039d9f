"""Client-quota metrics (``sidecar.client.quotas``), after Kafka's quota metrics.

| Kafka (group ``Produce`` / ``Fetch``)   | Prometheus                                                           |
|-----------------------------------------|----------------------------------------------------------------------|
| byte-rate{user, client-id}              | ksidecar_client_quota_byte_rate{quota_type, user, client_id}         |
| (the quota the sensor is held to)       | ksidecar_client_quota_limit{quota_type, user, client_id}             |
| tokens{user, client-id} (ControllerMutation) | ksidecar_client_quota_tokens{quota_type, user, client_id}       |
| throttle-time{user, client-id} (mean)   | ksidecar_client_quota_throttle_ms_total / ksidecar_client_quota_throttled_total, by rate() |

``user`` and ``client_id`` are Kafka's sensor tags (:mod:`quotas.client_rates`): a quota on
a user alone is one series with an empty ``client_id``. ``quota_type`` is Kafka's quota type
(``Produce``, ``Fetch``, ``ControllerMutation``).

The gauges are read from a process's sensors at scrape time: a single process's own, or,
with workers, the supervisor's, which every worker's usage reaches (the sidecar's whole
rate). The counters are counted where throttles are decided (each worker) and summed on
the page. Both are bounded like the observers' series: at most
``observer.prometheus.max.principals`` sensors each; the gauges keep the fastest rates, the
counters fold sensors beyond the bound into ``user="(other)", client_id="(other)"``; the tokens
keep the emptiest buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from proxy.datapath.clock import now_ms
from quotas.client_rates import ClientRates, SensorKey
from quotas.clients import CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, PRODUCER_BYTE_RATE

#: Kafka's quota type of each quota key.
QUOTA_TYPES = {PRODUCER_BYTE_RATE: "Produce", CONSUMER_BYTE_RATE: "Fetch",
               CONTROLLER_MUTATION_RATE: "ControllerMutation"}
OTHER = "(other)"
LABELS = ["quota_type", "user", "client_id"]


class ThrottleCounters:
    """The throttles this process decided: counted by sensor, a bounded number of them."""

    def __init__(self, registry: CollectorRegistry, max_series: int) -> None:
        self.max_series = max_series
        self._seen: set[SensorKey] = set()
        self.throttled = Counter("ksidecar_client_quota_throttled", "Answers a client quota throttled, by "
                                 "Kafka's quota type and sensor tags.", LABELS, registry=registry)
        self.throttle_ms = Counter("ksidecar_client_quota_throttle_ms", "Milliseconds of those throttles "
                                   "(rate() of it over rate() of the count: the mean throttle).", LABELS,
                                   registry=registry)

    def __call__(self, sensor: SensorKey, ms: int) -> None:
        """One throttle of ``ms`` on ``sensor`` (the rates' ``on_throttle`` hook)."""
        key, user, client_id = sensor
        if sensor not in self._seen:
            if len(self._seen) >= self.max_series:
                user = client_id = OTHER
            else:
                self._seen.add(sensor)
        labels = (QUOTA_TYPES.get(key, key), user, client_id)
        self.throttled.labels(*labels).inc()
        self.throttle_ms.labels(*labels).inc(ms)


class RateCollector(Collector):
    """``ksidecar_client_quota_byte_rate``, ``_limit`` and ``_tokens``, read from the sensors and
    buckets at scrape time."""

    def __init__(self, rates: ClientRates, max_series: int, clock: Callable[[], int] = now_ms) -> None:
        self.rates = rates
        self.max_series = max_series
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges (see the module docstring)."""
        now = self._clock()
        rate = GaugeMetricFamily("ksidecar_client_quota_byte_rate", "Bytes per second measured on a client "
                                 "quota's sensor (Kafka's byte-rate), sidecar-wide.", labels=LABELS)
        limit = GaugeMetricFamily("ksidecar_client_quota_limit", "The quota the sensor is held to (bytes per "
                                  "second).", labels=LABELS)
        measured = sorted(((sensor.rate.rate.measure(now), key, sensor.rate.quota)
                           for key, sensor in self.rates.sensors(now)), key=lambda item: item[:2], reverse=True)
        for value, (key, user, client_id), quota in measured[: self.max_series]:
            labels = [QUOTA_TYPES.get(key, key), user, client_id]
            rate.add_metric(labels, value)
            if quota is not None:
                limit.add_metric(labels, quota)
        tokens = GaugeMetricFamily("ksidecar_client_quota_tokens", "Tokens left in a controller_mutation_rate "
                                   "bucket (Kafka's ControllerMutation tokens; below zero: throttled), "
                                   "sidecar-wide.", labels=LABELS)
        for left, (key, user, client_id) in sorted((t, k) for k, t in self.rates.tokens(now))[: self.max_series]:
            tokens.add_metric([QUOTA_TYPES.get(key, key), user, client_id], left)
        yield rate
        yield limit
        yield tokens
