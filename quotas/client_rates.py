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

``controller_mutation_rate`` is measured on a token bucket per sensor instead
(:mod:`quotas.mutations`, :meth:`ClientRates.mutate`), shared the same way: the other
processes take the tokens a process recorded (:meth:`ClientRates.add_usage`). Takings add
up in any order (only the cap at the burst depends on it), so every process holds the
sidecar's bucket, a moment late (the usage interval): within that moment each process
judges alone, and a burst spread over N processes may take up to N bursts before the others
hear of it; the tokens then owed throttle what follows. A bucket full again is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from quotas.clients import CONTROLLER_MUTATION_RATE, EMPTY, ClientQuotas
from quotas.mutations import TokenBucket, Verdict, admit
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
        #: ``controller_mutation_rate``'s token buckets, by sensor.
        self._buckets: dict[SensorKey, TokenBucket] = {}
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
        self._note_usage((key, user, client_id), amount)
        throttle = sensor.rate.record(now_ms, amount)
        if throttle > 0 and self.on_throttle is not None:
            self.on_throttle(sensor_key, throttle)
        return throttle

    def mutate(self, user: str, client_id: str, costs: Sequence[float | None], *, strict: bool,
               now_ms: int) -> Verdict | None:
        """Decide one topic mutation request (``costs``: partitions per topic, in request
        order) on the ``controller_mutation_rate`` bucket of this user and client id
        (:func:`quotas.mutations.admit`); ``None`` when no such quota applies."""
        bucket = self._bucket(user, client_id, now_ms)
        if bucket is None:
            return None
        verdict = admit(bucket[1], costs, strict=strict, now_ms=now_ms)
        taken = sum(verdict.taken.values())
        if taken:
            self._note_usage((CONTROLLER_MUTATION_RATE, user, client_id), taken)
        if verdict.throttle_ms > 0 and self.on_throttle is not None:
            self.on_throttle(bucket[0], verdict.throttle_ms)
        return verdict

    def settle(self, user: str, client_id: str, amount: float, now_ms: int) -> None:
        """Correct what :meth:`mutate` took by ``amount`` tokens (negative: give them back,
        for topics the broker did not mutate), with no check."""
        bucket = self._bucket(user, client_id, now_ms)
        if bucket is None or not amount:
            return
        bucket[1].record(amount, now_ms)
        self._note_usage((CONTROLLER_MUTATION_RATE, user, client_id), amount)

    def tokens(self, now_ms: int) -> Iterator[tuple[SensorKey, float]]:
        """The live token buckets' tokens (for metrics and tests)."""
        self._sweep(now_ms)
        for key, bucket in self._buckets.items():
            yield key, bucket.measure(now_ms)

    def _note_usage(self, usage_key: UsageKey, amount: float) -> None:
        """Add ``amount`` to what this process tells the others at the next :meth:`take_usage`."""
        self._usage[usage_key] = self._usage.get(usage_key, 0.0) + amount

    def take_usage(self) -> dict[UsageKey, float]:
        """What this process recorded since the last call (and forget it)."""
        usage, self._usage = self._usage, {}
        return usage

    def add_usage(self, usage: Iterable[tuple[UsageKey, float]], now_ms: int) -> None:
        """Add what other processes recorded (no check: their clients were judged there)."""
        for (key, user, client_id), amount in usage:
            limit = self.quotas.resolve(user, client_id, key)
            if limit is None:  # no quota here, or not yet: nothing to measure
                continue
            if key == CONTROLLER_MUTATION_RATE:
                self._bucket_for((key, *limit.sensor), limit.value, now_ms).record(amount, now_ms)
            else:
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

    def _bucket(self, user: str, client_id: str, now_ms: int) -> tuple[SensorKey, TokenBucket] | None:
        limit = self.quotas.resolve(user, client_id, CONTROLLER_MUTATION_RATE)
        if limit is None:
            return None
        sensor_key = (CONTROLLER_MUTATION_RATE, *limit.sensor)
        return sensor_key, self._bucket_for(sensor_key, limit.value, now_ms)

    def _bucket_for(self, sensor_key: SensorKey, quota: float, now_ms: int) -> TokenBucket:
        bucket = self._buckets.get(sensor_key)
        if bucket is None:
            if now_ms - self._swept_ms >= self.config.span_ms:
                self._sweep(now_ms)
            bucket = self._buckets[sensor_key] = TokenBucket(self.config, quota, now_ms)
        else:
            bucket.quota = quota  # the quota may have changed since
        return bucket

    def _sweep(self, now_ms: int) -> None:
        self._swept_ms = now_ms
        span = self.config.span_ms
        idle = [k for k, s in self._sensors.items() if now_ms - s.last_ms >= span]
        for sensor_key in idle:
            del self._sensors[sensor_key]
        for sensor_key in [k for k, b in self._buckets.items() if b.full(now_ms)]:
            del self._buckets[sensor_key]
