"""Kafka's sampled ``Rate`` and the quota throttle formula, sans-IO (every call takes ``now``).

This is Kafka's ``org.apache.kafka.common.metrics.stats.Rate`` over a ``WindowedSum``
(``SampledStat``), and ``QuotaUtils.throttleTime``, restated:

* events are summed into ``samples`` buckets (``quota.window.num``, 11) of ``window_ms``
  (``quota.window.size.seconds`` × 1000); recording into a bucket older than one window
  moves to the next bucket, recycling the oldest;
* a bucket not touched for ``samples × window_ms`` is reset before measuring;
* the rate is ``sum / W`` where ``W = now − start of the oldest bucket``, padded up to
  ``samples − 1`` full windows while the sensor is young, and at least 1 ms;
* a recording that makes the rate exceed the quota is a violation; the throttle time is
  ``round((rate − quota) / quota × W)``, bounded by the caller (one window, for KIP-612).

The padding of ``W`` is why a fresh sensor admits a burst of about ``(samples − 1) × quota``
before throttling, and why the limit holds over any trailing ``samples × window`` span
rather than second by second (PROTOCOL_NOTES.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RateConfig:
    """``quota.window.num`` samples of ``quota.window.size.seconds`` each (in ms)."""

    samples: int = 11
    window_ms: int = 1000

    def __post_init__(self) -> None:
        if self.samples < 1 or self.window_ms < 1:
            raise ValueError("samples and window_ms must be >= 1")

    @property
    def span_ms(self) -> int:
        """The whole sensor length, ``samples × window_ms``."""
        return self.samples * self.window_ms


class _Sample:
    __slots__ = ("event_count", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.value = 0.0
        self.event_count = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.value = 0.0
        self.event_count = 0


class Rate:
    """Events per second over Kafka's sampled window (``Rate`` + ``WindowedSum``)."""

    __slots__ = ("_current", "_samples", "config")

    def __init__(self, config: RateConfig) -> None:
        self.config = config
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` (1 per connection; −1 to un-record one) at ``now_ms``."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.config.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.event_count += 1

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        total = self._windowed_sum(now_ms)
        return total / (self.window_size_ms(now_ms) / 1000.0)

    def window_size_ms(self, now_ms: int) -> int:
        """``W`` of the rate formula (after purging obsolete samples)."""
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        full_windows = elapsed // self.config.window_ms
        min_full_windows = self.config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self.config.window_ms
        return max(elapsed, 1)

    def current_window(self, now_ms: int) -> tuple[float, int]:
        """``(events in the sample a recording at now_ms would join, when that sample ends)``."""
        if self._samples:
            sample = self._samples[self._current]
            if now_ms - sample.start_ms < self.config.window_ms:
                return sample.value, sample.start_ms + self.config.window_ms
        return 0.0, now_ms + self.config.window_ms

    def last_activity_ms(self) -> int | None:
        """Start of the newest sample, or ``None`` before any recording."""
        if not self._samples:
            return None
        return self._samples[self._current].start_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.config.samples
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _purge(self, now_ms: int) -> None:
        expire_age = self.config.span_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire_age:
                sample.reset(now_ms)

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return min(self._samples, key=lambda s: s.start_ms)

    def _windowed_sum(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(s.value for s in self._samples)


def throttle_time_ms(rate: Rate, quota: float, now_ms: int) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: how long until the rate is back within ``quota``."""
    measured = rate.measure(now_ms)
    return round((measured - quota) / quota * rate.window_size_ms(now_ms))


class QuotaSensor:
    """A rate with a quota: records an event and says how long to wait if it violates.

    ``quota is None`` means no limit (Kafka's ``Int.MaxValue`` default): recordings still
    count, for the accept-rate metrics, but never throttle.
    """

    __slots__ = ("max_throttle_ms", "quota", "rate", "smooth")

    def __init__(
        self, config: RateConfig, quota: float | None, max_throttle_ms: int, *, smooth: bool = False
    ) -> None:
        self.rate = Rate(config)
        self.quota = quota
        self.max_throttle_ms = max_throttle_ms
        #: Also cap each sample window at ``quota × window`` events (see delay_for_one_more).
        self.smooth = smooth

    def record(self, now_ms: int, value: float = 1.0) -> int:
        """Record and return the bounded throttle time (0 when within quota)."""
        self.rate.record(value, now_ms)
        if self.quota is None:
            return 0
        if self.rate.measure(now_ms) <= self.quota:
            return 0
        if self.quota <= 0:  # a zero quota refuses everything: the longest delay
            return self.max_throttle_ms
        return max(0, min(throttle_time_ms(self.rate, self.quota, now_ms), self.max_throttle_ms))

    def delay_for_one_more(self, now_ms: int) -> int:
        """How long to wait before one more event fits the quota, without recording it.

        The same formula as :meth:`record`, applied to the rate the event would make.
        """
        if self.quota is None:
            return 0
        if self.quota <= 0:
            return self.max_throttle_ms
        window = self.rate.window_size_ms(now_ms)
        measured = (self.rate._windowed_sum(now_ms) + 1.0) / (window / 1000.0)
        if measured > self.quota:
            return max(1, min(round((measured - self.quota) / self.quota * window), self.max_throttle_ms))
        if self.smooth:
            # Kafka's formula alone lets a fresh sensor, and every later expiry of the
            # sample that held that burst, admit up to (samples - 1) × quota at once; the
            # bursts recur every sensor length and a trailing span can catch two of them.
            # Smoothing spreads them: no sample window takes more than quota × window.
            used, window_end = self.rate.current_window(now_ms)
            if used + 1.0 > self.quota * self.rate.config.window_ms / 1000.0:
                return max(1, window_end - now_ms)
        return 0

    def unrecord(self, now_ms: int) -> None:
        """Take one event back without a quota check (a throttled per-IP connection)."""
        self.rate.record(-1.0, now_ms)


class Average:
    """Kafka's ``SampledStat`` ``Avg`` (the throttle-time metrics): mean over the window."""

    __slots__ = ("_count", "_rate")

    def __init__(self, config: RateConfig) -> None:
        self._rate = Rate(config)  # reuses the sampling; value = sum of observations
        self._count = Rate(config)

    def record(self, value: float, now_ms: int) -> None:
        """Observe ``value`` at ``now_ms``."""
        self._rate.record(value, now_ms)
        self._count.record(1.0, now_ms)

    def measure(self, now_ms: int) -> float:
        """The mean of observations in the retained samples (0 when there are none)."""
        count = self._count._windowed_sum(now_ms)
        return self._rate._windowed_sum(now_ms) / count if count else 0.0
