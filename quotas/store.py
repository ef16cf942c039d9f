"""Per-IP connection-rate quotas in ZooKeeper, where Kafka keeps them (KIP-612).

``/config/ips/<ip>`` and ``/config/ips/<default>`` hold Kafka's dynamic-config JSON,
``{"version":1,"config":{"connection_creation_rate":"100"}}``. The store watches the
children and their data, and hands a fresh snapshot (``{ip or None: rate}``) to its
listener on every change; writes are compare-and-set on the znode version, retried on
a concurrent change. The kazoo client is injected (a kazoo recipe's habit); callbacks
run on kazoo's thread, so the listener must hand the snapshot over without blocking.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

log = logging.getLogger(__name__)

IPS_PATH = "/config/ips"
DEFAULT_ENTITY = "<default>"
RATE_KEY = "connection_creation_rate"

Snapshot = dict[str | None, float]


def znode_name(ip: str | None) -> str:
    """The child name for an IP entity (``None`` is the default entity)."""
    return DEFAULT_ENTITY if ip is None else ip


def encode_config(config: Mapping[str, str]) -> bytes:
    """Kafka's dynamic-config JSON."""
    return json.dumps({"version": 1, "config": dict(config)}, sort_keys=True).encode()


def decode_config(raw: bytes | None) -> dict[str, str]:
    """The ``config`` map of a znode body; empty for anything unreadable."""
    if not raw:
        return {}
    try:
        body = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        return {}
    config = body.get("config") if isinstance(body, dict) else None
    return {str(k): str(v) for k, v in config.items()} if isinstance(config, dict) else {}


def rate_of(config: Mapping[str, str]) -> float | None:
    """The connection_creation_rate of a config map, if set and numeric."""
    try:
        return float(config[RATE_KEY])
    except (KeyError, ValueError):
        return None


class EntityConfigStore:
    """Watches the entities under one ``/config/<type>`` path and writes their configs.

    ``on_change`` gets ``{entity name: config map}`` after every change (on kazoo's
    thread: hand it over without blocking). Shared by the per-IP quotas here and the
    sidecar's SCRAM users (``/config/users``).
    """

    def __init__(
        self, client: KazooClient, path: str, on_change: Callable[[dict[str, dict[str, str]]], None]
    ) -> None:
        self.client = client
        self.path = path
        self.on_change = on_change
        self._configs: dict[str, dict[str, str]] = {}
        self._watched: set[str] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Create the path if needed and start watching (blocking: call from a thread)."""
        self.client.ensure_path(self.path)
        self.client.ChildrenWatch(self.path, self._children)

    def configs(self) -> dict[str, dict[str, str]]:
        """Every entity's config map as currently known (a copy)."""
        with self._lock:
            return {name: dict(config) for name, config in self._configs.items()}

    def _changed(self) -> None:
        self.on_change(self.configs())

    def _children(self, children: list[str]) -> None:
        for child in children:
            with self._lock:
                if child in self._watched:
                    continue
                self._watched.add(child)
            self.client.DataWatch(f"{self.path}/{child}", self._data_callback(child))
        with self._lock:
            gone = set(self._configs) - set(children)
            for child in gone:
                self._configs.pop(child, None)
        if gone:
            self._changed()

    def _data_callback(self, child: str) -> Callable[[bytes | None, Any], bool]:
        def changed(data: bytes | None, _stat: Any) -> bool:
            with self._lock:
                if data is None:
                    self._configs.pop(child, None)
                    self._watched.discard(child)
                else:
                    self._configs[child] = decode_config(data)
            self._changed()
            return data is not None  # stop watching a deleted node

        return changed

    def edit(self, name: str, change: Callable[[dict[str, str]], None]) -> None:
        """Apply ``change`` to one entity's config map, compare-and-set (blocking: from a thread)."""
        path = f"{self.path}/{name}"
        for _ in range(10):
            try:
                raw, stat = self.client.get(path)
                version = stat.version
            except NoNodeError:
                raw, version = None, -1
            config = decode_config(raw)
            change(config)
            try:
                if version < 0:
                    if not config:
                        return
                    self.client.create(path, encode_config(config), makepath=True)
                else:
                    # Kafka leaves an entity with an empty config in place; so do we.
                    self.client.set(path, encode_config(config), version=version)
                return
            except (BadVersionError, NodeExistsError):
                continue  # somebody changed it meanwhile: read again
        raise RuntimeError(f"{path}: gave up after 10 concurrent modifications")


class IpQuotaStore(EntityConfigStore):
    """Watches ``/config/ips`` and writes changes; see the module docstring."""

    def __init__(self, client: KazooClient, on_change: Callable[[Snapshot], None]) -> None:
        super().__init__(client, IPS_PATH, lambda _configs: on_change(self.snapshot()))

    def snapshot(self) -> Snapshot:
        """``{ip or None: rate}`` as currently known."""
        result: Snapshot = {}
        for name, config in self.configs().items():
            rate = rate_of(config)
            if rate is not None:
                result[None if name == DEFAULT_ENTITY else name] = rate
        return result

    def alter(self, ip: str | None, set_rate: float | None, remove: bool) -> None:
        """Set or remove ``connection_creation_rate`` of one entity (blocking: from a thread)."""

        def change(config: dict[str, str]) -> None:
            if remove:
                config.pop(RATE_KEY, None)
            elif set_rate is not None:
                config[RATE_KEY] = _format_rate(set_rate)

        self.edit(znode_name(ip), change)


def _format_rate(rate: float) -> str:
    return str(int(rate)) if float(rate).is_integer() else repr(rate)
