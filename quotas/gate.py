"""The accept gate: KIP-612 connection-creation quotas and the connection-count limits.

Sans-IO restatement of Kafka's ``ConnectionQuotas`` (SocketServer.scala). The listener's
accept loop asks, for every new connection:

1. :meth:`AcceptGate.check_ip_rate` as soon as the peer address is known: the per-IP rate
   quota. On violation the connection is held for the returned delay, then closed
   ("delay, then drop") and counts on no sensor but its IP's, whose recording is taken
   back — the same outcome as Kafka's un-recording from every sensor.
2. :meth:`AcceptGate.connection_delay` until it is 0, sleeping each delay (the larger of
   the sidecar-wide and listener throttle times; a *protected* listener —
   ``inter.broker.listener.name`` — only honours its own limit), and while
   :meth:`AcceptGate.slot_available` is false (``max.connections``); then
   :meth:`AcceptGate.record_connection`. Never drops here.
3. :meth:`AcceptGate.admit_ip`: ``max.connections.per.ip`` (over it: close at once), checked
   last as in Kafka; otherwise the connection is counted as open.
4. :meth:`AcceptGate.release` when an admitted connection closes.

Smoothing (``sidecar.connection.rate.smoothing``, on by default): Kafka's ``Rate`` lets a
fresh sensor admit (samples - 1) × limit at once, and that burst comes back each time its
sample expires, so a trailing sensor-length span can hold far more than span × limit.
With smoothing the sidecar-wide and listener sensors also take at most limit × window per
sample window. Off, the gate is Kafka's formula exactly. Per-IP quotas are always exact.

One deliberate difference from Kafka's order: Kafka charges the sidecar-wide delay before
the per-IP check, so an offending IP's surplus connections cost the acceptor time and
delay every other client; here they are turned away first. Rates and the per-IP outcome
are the same; well-behaved IPs are no longer queued behind an offender's storm.

Per-IP sensors idle for an hour are dropped (:meth:`AcceptGate.expire`), as Kafka expires
its per-IP sensors. Every method takes ``now_ms``; nothing here sleeps or reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from quotas.rate import Average, QuotaSensor, RateConfig

#: Kafka's inactive-sensor expiry for per-IP connection-rate sensors.
IP_SENSOR_EXPIRY_MS = 3600 * 1000
UNLIMITED = 2**31 - 1  # Kafka's Int.MaxValue "no limit"


def limit(value: int | float | None) -> float | None:
    """``None`` for Kafka's "no limit" (Int.MaxValue or absent), else the value."""
    if value is None or value >= UNLIMITED:
        return None
    return float(value)


@dataclass(frozen=True)
class GateConfig:
    """The limits; ``None`` means unlimited."""

    rate: RateConfig = field(default_factory=RateConfig)
    sidecar_rate: float | None = None
    listener_rates: Mapping[str, float | None] = field(default_factory=dict)
    protected_listener: str | None = None
    max_connections: int | None = None
    listener_max_connections: Mapping[str, int | None] = field(default_factory=dict)
    max_connections_per_ip: int | None = None
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    #: Cap each sample window of the sidecar-wide and listener sensors at limit × window.
    smoothing: bool = True

    @property
    def max_throttle_ms(self) -> int:
        """KIP-612: a delay is bounded by one quota window."""
        return self.rate.window_ms


class Verdict(Enum):
    """What :meth:`AcceptGate.admit_ip` decided."""

    ACCEPT = "accept"
    THROTTLE = "ip_throttled"  # hold for the delay, then close
    TOO_MANY = "max_connections_per_ip"  # close now


@dataclass(frozen=True, slots=True)
class Admission:
    """A per-IP decision and, for THROTTLE, how long to hold the socket before closing."""

    verdict: Verdict
    delay_ms: int = 0


class _ListenerState:
    __slots__ = ("accept_throttle", "blocked_ms", "count", "ip_throttle", "rate")

    def __init__(self, config: GateConfig, name: str) -> None:
        self.rate = QuotaSensor(
            config.rate, config.listener_rates.get(name), config.max_throttle_ms, smooth=config.smoothing
        )
        self.accept_throttle = Average(config.rate)
        self.ip_throttle = Average(config.rate)
        self.count = 0
        self.blocked_ms = 0.0


class AcceptGate:
    """Connection quotas for one sidecar (all listeners)."""

    def __init__(
        self,
        config: GateConfig,
        ip_rate: Callable[[str], float | None] = lambda ip: None,
    ) -> None:
        self.config = config
        self.ip_rate = ip_rate
        self.sidecar = QuotaSensor(
            config.rate, config.sidecar_rate, config.max_throttle_ms, smooth=config.smoothing
        )
        self._listeners: dict[str, _ListenerState] = {}
        self._ip_sensors: dict[str, QuotaSensor] = {}
        self._ip_last_ms: dict[str, int] = {}
        self._ip_counts: dict[str, int] = {}
        self.total = 0

    def reconfigure(self, config: GateConfig) -> None:
        """New limits (a reload): what was measured is kept, the quotas change from now on.
        ``config.rate`` (the sample windows) must be the one in force."""
        self.config = config
        self.sidecar.quota = config.sidecar_rate
        self.sidecar.smooth = config.smoothing
        for name, state in self._listeners.items():
            state.rate.quota = config.listener_rates.get(name)
            state.rate.smooth = config.smoothing

    def _listener(self, name: str) -> _ListenerState:
        state = self._listeners.get(name)
        if state is None:
            state = self._listeners[name] = _ListenerState(self.config, name)
        return state

    # -- before accepting ---------------------------------------------------------------

    def connection_delay(self, listener: str, now_ms: int) -> int:
        """How long the acceptor must wait before this listener may take one more connection.

        Kafka records the connection first and then waits; the sidecar waits first and
        records when it really accepts (:meth:`record_connection`), so every recorded
        time is an accept time and no span can hold connections counted earlier than they
        were let in. The delay is Kafka's formula, bounded by one window.
        """
        state = self._listener(listener)
        own = state.rate.delay_for_one_more(now_ms)
        if listener == self.config.protected_listener:
            return own
        return max(own, self.sidecar.delay_for_one_more(now_ms))

    def record_connection(self, listener: str, now_ms: int, waited_ms: float = 0.0) -> None:
        """Record an accepted connection on the sidecar and listener sensors."""
        state = self._listener(listener)
        if listener != self.config.protected_listener:
            self.sidecar.record(now_ms)
        state.rate.record(now_ms)
        if waited_ms > 0:
            state.accept_throttle.record(waited_ms, now_ms)

    def slot_available(self, listener: str) -> bool:
        """``max.connections`` (sidecar-wide, except a protected listener) and per listener."""
        state = self._listener(listener)
        own = self.config.listener_max_connections.get(listener)
        if own is not None and state.count >= own:
            return False
        if listener == self.config.protected_listener:
            return True
        cap = self.config.max_connections
        return cap is None or self.total < cap

    def note_blocked(self, listener: str, blocked_ms: float) -> None:
        """Account time the acceptor spent waiting (AcceptorBlockedPercent)."""
        self._listener(listener).blocked_ms += blocked_ms

    # -- once the peer is known ---------------------------------------------------------

    def check_ip_rate(self, listener: str, ip: str, now_ms: int) -> Admission:
        """The per-IP connection-rate quota: ACCEPT, or THROTTLE with the hold time."""
        quota = self.ip_rate(ip)
        if quota is None:
            return Admission(Verdict.ACCEPT)
        sensor = self._ip_sensor(ip, quota)
        self._ip_last_ms[ip] = now_ms
        delay = sensor.delay_for_one_more(now_ms)
        if delay <= 0:
            sensor.record(now_ms)
            return Admission(Verdict.ACCEPT)
        # Not accepted, so not counted (Kafka records it, then takes it back).
        self._listener(listener).ip_throttle.record(delay, now_ms)
        return Admission(Verdict.THROTTLE, delay)

    def admit_ip(self, listener: str, ip: str) -> Admission:
        """``max.connections.per.ip`` (and overrides); counts the connection as open."""
        count = self._ip_counts.get(ip, 0)
        cap = self.config.max_connections_per_ip_overrides.get(ip, self.config.max_connections_per_ip)
        if cap is not None and count >= cap:
            return Admission(Verdict.TOO_MANY)
        self._ip_counts[ip] = count + 1
        self._listener(listener).count += 1
        self.total += 1
        return Admission(Verdict.ACCEPT)

    def _ip_sensor(self, ip: str, quota: float) -> QuotaSensor:
        sensor = self._ip_sensors.get(ip)
        if sensor is None:
            sensor = self._ip_sensors[ip] = QuotaSensor(self.config.rate, quota, self.config.max_throttle_ms)
        sensor.quota = quota  # a dynamic quota change applies to the next connection
        return sensor

    def release(self, listener: str, ip: str) -> None:
        """An admitted connection closed."""
        count = self._ip_counts.get(ip, 0)
        if count <= 1:
            self._ip_counts.pop(ip, None)
        else:
            self._ip_counts[ip] = count - 1
        self._listener(listener).count -= 1
        self.total -= 1

    def expire(self, now_ms: int) -> int:
        """Drop per-IP sensors idle for an hour; returns how many were dropped."""
        stale = [ip for ip, last in self._ip_last_ms.items() if now_ms - last >= IP_SENSOR_EXPIRY_MS]
        for ip in stale:
            self._ip_sensors.pop(ip, None)
            self._ip_last_ms.pop(ip, None)
        return len(stale)

    # -- measures for metrics -----------------------------------------------------------

    def sidecar_accept_rate(self, now_ms: int) -> float:
        """Connections accepted per second, sidecar-wide."""
        return self.sidecar.rate.measure(now_ms)

    def listener_accept_rate(self, listener: str, now_ms: int) -> float:
        """Connections accepted per second on ``listener``."""
        return self._listener(listener).rate.rate.measure(now_ms)

    def accept_throttle_ms(self, listener: str, now_ms: int) -> float:
        """Mean acceptor delay (sidecar-wide or listener quota) on ``listener``."""
        return self._listener(listener).accept_throttle.measure(now_ms)

    def ip_throttle_ms(self, listener: str, now_ms: int) -> float:
        """Mean hold time of per-IP throttled connections on ``listener``."""
        return self._listener(listener).ip_throttle.measure(now_ms)

    def blocked_ms(self, listener: str) -> float:
        """Total time the acceptor of ``listener`` has waited (for the blocked-ratio counter)."""
        return self._listener(listener).blocked_ms

    def ip_accept_rates(self, now_ms: int, limit_count: int) -> dict[str, float]:
        """Per-IP accept rates of the most recently active IPs (bounded for metrics)."""
        recent = sorted(self._ip_last_ms, key=lambda ip: -self._ip_last_ms[ip])[:limit_count]
        return {ip: self._ip_sensors[ip].rate.measure(now_ms) for ip in recent}

    def listeners(self) -> list[str]:
        """Listeners seen so far."""
        return sorted(self._listeners)

    def ip_count(self, ip: str) -> int:
        """Open admitted connections from ``ip``."""
        return self._ip_counts.get(ip, 0)
