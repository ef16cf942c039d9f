"""KIP-612 metrics, measured from the accept gate's own sensors at scrape time.

Kafka's names map to Prometheus as:

| Kafka (socket-server-metrics)                         | Prometheus                                          |
|-------------------------------------------------------|-----------------------------------------------------|
| broker-connection-accept-rate                         | ksidecar_sidecar_connection_accept_rate             |
| connection-accept-rate{listener}                      | ksidecar_connection_accept_rate{listener}           |
| connection-accept-rate{ip}                            | ksidecar_ip_connection_accept_rate{ip} (50 most recent IPs with a quota) |
| connection-accept-throttle-time{listener}             | ksidecar_connection_accept_throttle_time_ms{listener} |
| ip-connection-accept-throttle-time{listener}          | ksidecar_ip_connection_accept_throttle_time_ms{listener} |
| Acceptor AcceptorBlockedPercent{listener}             | ksidecar_acceptor_blocked_seconds_total{listener} (rate() of it is the blocked fraction) |

Connections closed by the gate are counted in ``ksidecar_connections_closed_total`` with
reasons ``ip_throttled`` and ``max_connections_per_ip``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from proxy.datapath.clock import now_ms
from quotas.gate import AcceptGate

MAX_IP_SERIES = 50


class QuotaCollector(Collector):
    """Reads the gate's sensors when Prometheus scrapes."""

    def __init__(self, gate: AcceptGate, listeners: Sequence[str]) -> None:
        self.gate = gate
        self.listeners = list(listeners)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The KIP-612 families (see the module docstring)."""
        gate = self.gate
        try:
            now = now_ms()
        except RuntimeError:  # scraped outside trio (tests reading the registry directly)
            return
        listeners = self.listeners
        total = GaugeMetricFamily(
            "ksidecar_sidecar_connection_accept_rate",
            "Connections accepted per second, sidecar-wide (KIP-612 broker-connection-accept-rate).",
        )
        total.add_metric([], gate.sidecar_accept_rate(now))
        yield total
        per_listener = GaugeMetricFamily(
            "ksidecar_connection_accept_rate", "Connections accepted per second by listener.",
            labels=["listener"],
        )
        throttle = GaugeMetricFamily(
            "ksidecar_connection_accept_throttle_time_ms",
            "Mean accept delay from the sidecar-wide or listener quota, by listener.",
            labels=["listener"],
        )
        ip_throttle = GaugeMetricFamily(
            "ksidecar_ip_connection_accept_throttle_time_ms",
            "Mean hold time of connections throttled by a per-IP quota, by listener.",
            labels=["listener"],
        )
        blocked = CounterMetricFamily(
            "ksidecar_acceptor_blocked_seconds",
            "Time the acceptor waited on quotas or max.connections, by listener.",
            labels=["listener"],
        )
        for name in listeners:
            per_listener.add_metric([name], gate.listener_accept_rate(name, now))
            throttle.add_metric([name], gate.accept_throttle_ms(name, now))
            ip_throttle.add_metric([name], gate.ip_throttle_ms(name, now))
            blocked.add_metric([name], gate.blocked_ms(name) / 1000)
        yield per_listener
        yield throttle
        yield ip_throttle
        yield blocked
        per_ip = GaugeMetricFamily(
            "ksidecar_ip_connection_accept_rate",
            f"Connections accepted per second by client IP (IPs with a quota, {MAX_IP_SERIES} most recent).",
            labels=["ip"],
        )
        for ip, rate in gate.ip_accept_rates(now, MAX_IP_SERIES).items():
            per_ip.add_metric([ip], rate)
        yield per_ip


def register_quota_metrics(registry: CollectorRegistry, gate: AcceptGate, listeners: Sequence[str]) -> None:
    """Add the KIP-612 collector to the sidecar's registry."""
    registry.register(QuotaCollector(gate, listeners))
