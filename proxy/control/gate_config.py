"""The accept gate's limits (KIP-612 / KIP-402) from the key table."""

from __future__ import annotations

from proxy.config import SidecarConfig
from quotas.gate import GateConfig, limit
from quotas.rate import RateConfig


def gate_config(config: SidecarConfig) -> GateConfig:
    """The accept gate's limits from the KIP-612 / KIP-402 keys."""
    names = [e.name for e in config.listeners]
    overrides = config.listener_overrides
    listener_rates = {n: limit(overrides.get(n, {}).get("max.connection.creation.rate")) for n in names}
    listener_max = {n: overrides.get(n, {}).get("max.connections") for n in names}
    max_per_ip = config["max.connections.per.ip"]
    return GateConfig(
        rate=RateConfig(config["quota.window.num"], config["quota.window.size.seconds"] * 1000),
        sidecar_rate=limit(config["max.connection.creation.rate"]),
        listener_rates={n: r for n, r in listener_rates.items() if r is not None},
        protected_listener=config["inter.broker.listener.name"] or None,
        max_connections=None if limit(config["max.connections"]) is None else config["max.connections"],
        listener_max_connections={n: m for n, m in listener_max.items() if m is not None and limit(m) is not None},
        max_connections_per_ip=None if limit(max_per_ip) is None else max_per_ip,
        max_connections_per_ip_overrides=config["max.connections.per.ip.overrides"],
        smoothing=config["sidecar.connection.rate.smoothing"],
    )
