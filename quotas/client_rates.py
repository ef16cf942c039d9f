"""The measured rates of user and client-id quotas, and the throttle time they ask (sans-IO).

Theory of operation. Kafka measures a client-quota'd amount (Produce request bytes, Fetch
response bytes) on a **sensor** named by the metric tags the quota resolves to
(:func:`quotas.clients.resolve`): connections whose quota was found at the same entity and
whose tags agree share one rate, as in Kafka's ``ClientQuotaManager``. A recording is added
first and judged after (Kafka's ``Sensor.record`` with a quota check): a request that takes
the rate over its quota still goes through, and the answer says how long to wait,
:func:`quotas.rate.throttle_time_ms` (Kafka's ``QuotaUtils.throttleTime``, not bounded for
byte rates). Clients with no quota are not measured at all (their cost stays nil).

Several worker processes share a sidecar's quotas. Each process measures its own
connections and hands what it recorded to the others (:meth:`ClientRates.take_usage`,
:meth:`ClientRates.add_usage`, over the supervisor), which add it to their sensors without
a check: every process then judges on the sidecar's whole rate, a moment late.

A sensor that recorded nothing for a whole sensor span (``quota.window.num`` ×
``quota.window.size.seconds``) measures zero and is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from quotas.clients import EMPTY, ClientQuotas
from quotas.rate import QuotaSensor, RateConfig

#: The throttle of a byte rate is not bounded in Kafka; a sensor's span bounds it here
#: anyway, a long way from any realistic value (2^31 - 1 ms is the protocol's field).
MAX_THROTTLE_MS = 2**31 - 1

SensorKey = tuple[str, str, str]
"""``(quota key, user tag, client-id tag)``: one measured rate."""
UsageKey = tuple[str, str, str]
"""``(quota key, user, client id)``: who recorded (the other processes resolve it again)."""


@dataclass(slots=True)
class Sensor:
    """One measured rate with its quota (the throttles it gives go to
    :attr:`ClientRates.on_throttle`, which the metrics count)."""

    rate: QuotaSensor
    #: When it last recorded (ms): a sensor idle for a whole span is dropped.
    last_ms: int


class ClientRates:
    """Every sensor of one process, for one snapshot of quotas at a time (see the module
    docstring). Not thread-safe: the event loop calls it."""

    def __init__(self, config: RateConfig) -> None:
        self.config = config
        self.quotas: ClientQuotas = EMPTY
        self._sensors: dict[SensorKey, Sensor] = {}
        #: What this process recorded since :meth:`take_usage` (for the other processes).
        self._usage: dict[UsageKey, float] = {}
        self._swept_ms = 0
        #: Told ``(sensor, ms)`` of every throttle this process decides (the metrics).
        self.on_throttle: Callable[[SensorKey, int], None] | None = None

    def install(self, quotas: ClientQuotas) -> None:
        """Use these quotas from now on (a change in ZooKeeper); the rates measured so far
        stay (Kafka changes a sensor's quota in place)."""
        self.quotas = quotas

    def limited(self, key: str, user: str, client_id: str) -> bool:
        """Whether ``key`` has a quota for this user and client id."""
        return self.quotas.resolve(user, client_id, key) is not None

    def record(self, key: str, user: str, client_id: str, amount: float, now_ms: int) -> int:
        """Record ``amount`` for this user and client id; the throttle time it asks (ms, 0
        within quota or with no quota)."""
        limit = self.quotas.resolve(user, client_id, key)
        if limit is None:
            return 0
        sensor_key = (key, *limit.sensor)
        sensor = self._sensor(sensor_key, limit.value, now_ms)
        usage_key = (key, user, client_id)
        self._usage[usage_key] = self._usage.get(usage_key, 0.0) + amount
        throttle = sensor.rate.record(now_ms, amount)
        if throttle > 0 and self.on_throttle is not None:
            self.on_throttle(sensor_key, throttle)
        return throttle

    def take_usage(self) -> dict[UsageKey, float]:
        """What this process recorded since the last call (and forget it)."""
        usage, self._usage = self._usage, {}
        return usage

    def add_usage(self, usage: Iterable[tuple[UsageKey, float]], now_ms: int) -> None:
        """Add what other processes recorded (no check: their clients were judged there)."""
        for (key, user, client_id), amount in usage:
            limit = self.quotas.resolve(user, client_id, key)
            if limit is not None:  # (else no quota here, or not yet: nothing to measure)
                self._sensor((key, *limit.sensor), limit.value, now_ms).rate.rate.record(amount, now_ms)

    def add_usage_entries(self, entries: Iterable[Sequence[Any]], now_ms: int) -> None:
        """:meth:`add_usage` of ``[key, user, client id, amount]`` lists (as a message carries them)."""
        self.add_usage((((str(key), str(user), str(client_id)), float(amount))
                        for key, user, client_id, amount in entries), now_ms)

    def sensors(self, now_ms: int) -> Iterator[tuple[SensorKey, Sensor]]:
        """The live sensors (for metrics), idle ones dropped first."""
        self._sweep(now_ms)
        yield from self._sensors.items()

    def _sensor(self, sensor_key: SensorKey, quota: float, now_ms: int) -> Sensor:
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            if now_ms - self._swept_ms >= self.config.span_ms:
                self._sweep(now_ms)
            sensor = self._sensors[sensor_key] = Sensor(QuotaSensor(self.config, quota, MAX_THROTTLE_MS), now_ms)
        else:
            sensor.rate.quota = quota  # the quota may have changed since
        sensor.last_ms = now_ms
        return sensor

    def _sweep(self, now_ms: int) -> None:
        self._swept_ms = now_ms
        span = self.config.span_ms
        idle = [k for k, s in self._sensors.items() if now_ms - s.last_ms >= span]
        for sensor_key in idle:
            del self._sensors[sensor_key]
