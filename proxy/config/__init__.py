"""Configuration: the key table (Kafka's names), the ``.properties`` reader, typed settings.

``from proxy.config import SidecarConfig, load_config, ...`` re-exports the key table's
public names (:mod:`proxy.config.keys`).
"""

from proxy.config.keys import (
    KEYS,
    ConfigError,
    Endpoint,
    HostPort,
    Key,
    SidecarConfig,
    build_config,
    env_overrides,
    load_config,
    observer_entries,
    parse_endpoints,
    parse_hostport,
)

__all__ = [
    "KEYS",
    "ConfigError",
    "Endpoint",
    "HostPort",
    "Key",
    "SidecarConfig",
    "build_config",
    "env_overrides",
    "load_config",
    "observer_entries",
    "parse_endpoints",
    "parse_hostport",
]
