"""Per-IP connection-rate quotas as the sidecar holds them (KIP-612).

:class:`IpQuotas` is the quota port of the local APIs (DescribeClientQuotas and
AlterClientQuotas, :class:`~proxy.local.ports.QuotaPort`) and the per-IP quota source of
the accept gate. With ZooKeeper the quotas are ``/config/ips`` (:class:`~quotas.store.IpQuotaStore`,
watched: every sidecar sees a change); standalone they come from configuration and are
read-only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from proxy.control.zk import ZooKeeper
from quotas.admin import Write, effective_rate
from quotas.gate import limit
from quotas.store import IpQuotaStore, Snapshot

log = logging.getLogger(__name__)


class IpQuotas:
    """The per-IP quotas: ZooKeeper's when there is a store, else configuration's."""

    def __init__(self, default_rate: float, overrides: Mapping[str, float], zk: ZooKeeper | None) -> None:
        self.default_rate = default_rate
        self.overrides = dict(overrides)
        self.zk = zk
        #: ZooKeeper's snapshot (``{ip or None: rate}``), installed by the watch.
        self.current: Snapshot = {}
        self.store = IpQuotaStore(zk.client, zk.deliver(self.install)) if zk is not None else None

    def configure(self, default_rate: float, overrides: Mapping[str, float]) -> None:
        """The key table's default and overrides (a reload); ZooKeeper's quotas still come
        first."""
        self.default_rate = default_rate
        self.overrides = dict(overrides)

    @property
    def can_write(self) -> bool:
        """True when quotas live in ZooKeeper."""
        return self.store is not None

    def snapshot(self) -> dict[str | None, float]:
        """What DescribeClientQuotas reports: ZooKeeper's quotas, or config's when standalone."""
        if self.store is not None:
            return dict(self.current)
        snapshot: dict[str | None, float] = {ip: float(rate) for ip, rate in self.overrides.items()}
        if self.default_rate < 2**31 - 1:
            snapshot[None] = float(self.default_rate)
        return snapshot

    def rate_for(self, ip: str) -> float | None:
        """The connection rate quota for ``ip`` (``None``: unlimited)."""
        return limit(effective_rate(ip, self.current, limit(self.default_rate), self.overrides))

    def install(self, snapshot: Snapshot) -> None:
        """A new snapshot of ZooKeeper's quotas (applies to new connections)."""
        self.current = snapshot
        log.info("per-IP connection quotas now %s", {k or "<default>": v for k, v in snapshot.items()})

    async def start(self) -> None:
        """Start watching ``/config/ips``."""
        if self.store is not None and self.zk is not None:
            await self.zk.call(self.store.start)

    async def alter(self, writes: Sequence[Write]) -> None:
        """Write ZooKeeper; our own writes take effect at once (read-your-writes)."""
        assert self.store is not None and self.zk is not None
        applied = dict(self.current)
        for write in writes:
            await self.zk.call(self.store.alter, write.ip, write.rate, write.remove)
            log.info("per-IP quota %s: %s", write.ip or "<default>",
                     "removed" if write.remove else f"connection_creation_rate={write.rate:g}")
            if write.remove:
                applied.pop(write.ip, None)
            elif write.rate is not None:
                applied[write.ip] = write.rate
        # The watch delivers the same state, and other sidecars' changes.
        self.install(applied)
