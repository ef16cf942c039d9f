"""User and client-id quotas as one sidecar process holds them (KIP-55, ``sidecar.client.quotas``).

:class:`ClientQuotaState` watches ``/config/users`` and ``/config/clients``
(:class:`~quotas.client_store.ClientQuotaStore`) and installs what it reads in the data
path's rates (:class:`~quotas.client_rates.ClientRates`) while this sidecar enforces client
quotas: always with ``sidecar``, never with ``broker``, and with ``auto`` as long as the
broker does not serve DescribeClientQuotas (looked at again every
:data:`RECHECK_INTERVAL`, since the broker may change under a running sidecar). Every
process of a sidecar watches for itself, so a change made through any sidecar binds at
every one as soon as its watch fires.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import trio

from protocol.apis import DESCRIBE_CLIENT_QUOTAS
from proxy.control.upstream import Upstream
from proxy.control.zk import ZooKeeper
from quotas.admin import ClientWrite
from quotas.client_rates import ClientRates
from quotas.client_store import ClientQuotaStore
from quotas.clients import EMPTY, REQUEST_PERCENTAGE, ClientQuotas
from quotas.rate import RateConfig

log = logging.getLogger(__name__)

#: How often ``auto`` asks again whether the broker serves client quotas itself.
RECHECK_INTERVAL = 5.0
SIDECAR, BROKER, AUTO = "sidecar", "broker", "auto"
#: Quota keys the sidecar does not enforce: AlterClientQuotas refuses them, saying why.
REFUSED: Mapping[str, str] = {
    REQUEST_PERCENTAGE: "request_percentage is not enforced by the sidecar: it is a share of the "
                        "broker's request-handler and network threads, which a sidecar does not have; "
                        "set it where the broker enforces quotas (sidecar.client.quotas=broker)",
}


class ClientQuotaState:
    """See the module docstring."""

    def __init__(self, mode: str, config: RateConfig, zk: ZooKeeper | None, upstream: Upstream) -> None:
        self.mode = mode
        self.zk = zk
        self.upstream = upstream
        #: The data path's sensors (shared by every listener of this process).
        self.rates = ClientRates(config)
        #: ZooKeeper's quotas as last read (installed in :attr:`rates` while enforcing).
        self.current: ClientQuotas = EMPTY
        self.store = (ClientQuotaStore(zk.client, zk.deliver(self.install))
                      if zk is not None and mode != BROKER else None)
        self._enforcing = False

    @property
    def enforcing(self) -> bool:
        """Whether this sidecar enforces user and client-id quotas now."""
        if self.store is None:
            return False
        if self.mode == SIDECAR:
            return True
        info = self.upstream.info
        return info is not None and DESCRIBE_CLIENT_QUOTAS not in info.api_versions

    def install(self, quotas: ClientQuotas) -> None:
        """A new snapshot of ZooKeeper's quotas."""
        self.current = quotas
        self._apply()
        if self._enforcing:
            log.info("client quotas now %s", _described(quotas))

    def _apply(self) -> None:
        enforcing = self.enforcing
        if enforcing != self._enforcing:
            log.info("client quotas (users, client ids) %s", "enforced by this sidecar" if enforcing
                     else "left to the broker")
        self._enforcing = enforcing
        self.rates.install(self.current if enforcing else EMPTY)

    async def start(self) -> None:
        """Start watching ZooKeeper (when this sidecar may enforce)."""
        if self.store is not None and self.zk is not None:
            await self.zk.call(self.store.start)

    async def recheck_forever(self) -> None:
        """``auto``: follow the broker (it may start or stop serving client quotas)."""
        while self.store is not None and self.mode == AUTO:
            self._apply()
            await trio.sleep(RECHECK_INTERVAL)

    @property
    def refused(self) -> Mapping[str, str]:
        """Quota keys this sidecar does not enforce, and why."""
        return REFUSED

    async def alter_clients(self, writes: Sequence[ClientWrite]) -> None:
        """Write ZooKeeper; our own writes take effect here at once (read-your-writes)."""
        assert self.store is not None and self.zk is not None
        for write in writes:
            await self.zk.call(self.store.alter, write.entity, write.changes)
            log.info("client quota %s: %s", write.entity, ", ".join(
                f"{key} removed" if value is None else f"{key}={value:g}" for key, value in write.changes))
        self.install(await self.zk.call(self.store.read))


def _described(quotas: ClientQuotas) -> str:
    return "{" + ", ".join(f"{entity}: {dict(values)}" for entity, values in quotas.entries.items()) + "}"
