"""DescribeClientQuotas (48) and AlterClientQuotas (49) for per-IP quotas (KIP-612).

The decisions are :mod:`quotas.admin`'s; this module decodes, asks it, performs the
ZooKeeper writes off the event loop, and encodes. Requests about users and client ids
only never reach here: the router forwards them to the broker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from protocol.apis import ApiRegistry
from protocol.errors import ErrorCode
from protocol.schema import decode, encode
from quotas import admin

if TYPE_CHECKING:
    from proxy.server import Sidecar

log = logging.getLogger(__name__)

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49


def is_ours(registry: ApiRegistry, api_key: int, version: int, body: memoryview, broker_has_quotas: bool) -> bool:
    """True when the sidecar answers this quota request itself (it names ``ip``)."""
    api = registry.get(api_key)
    if api is None or version not in api.versions:
        return False
    try:
        request = decode(api.request, version, body)
    except Exception:  # a body we cannot read is answered (and closed) locally
        return True
    if api_key == DESCRIBE_CLIENT_QUOTAS:
        return admin.route_describe(request, broker_has_quotas) is admin.Route.LOCAL
    return admin.route_alter(request) is admin.Route.LOCAL


def describe_snapshot(sidecar: Sidecar) -> dict[str | None, float]:
    """What DescribeClientQuotas reports: ZooKeeper's quotas, or config's when standalone."""
    if sidecar.registration is not None:
        return dict(sidecar.ip_quotas)
    snapshot: dict[str | None, float] = {
        ip: float(rate) for ip, rate in sidecar.config["sidecar.ip.connection.creation.rate.overrides"].items()
    }
    default = sidecar.config["sidecar.ip.connection.creation.rate"]
    if default < 2**31 - 1:
        snapshot[None] = float(default)
    return snapshot


async def handle_describe(sidecar: Sidecar, version: int, body: memoryview) -> bytes:
    """Answer DescribeClientQuotas for the ip entity."""
    api = sidecar.registry.api(DESCRIBE_CLIENT_QUOTAS)
    request = decode(api.request, version, body)
    return encode(api.response, version, admin.describe(request, describe_snapshot(sidecar)))


async def handle_alter(sidecar: Sidecar, version: int, body: memoryview) -> bytes:
    """Answer AlterClientQuotas for the ip entity, writing ZooKeeper."""
    api = sidecar.registry.api(ALTER_CLIENT_QUOTAS)
    request = decode(api.request, version, body)
    store = sidecar.registration.quota_store if sidecar.registration is not None else None
    response, writes = admin.plan_alter(request, can_write=store is not None)
    if writes:
        assert store is not None
        try:
            applied = dict(sidecar.ip_quotas)
            for write in writes:
                await trio.to_thread.run_sync(store.alter, write.ip, write.rate, write.remove)
                log.info("per-IP quota %s: %s", write.ip or "<default>",
                         "removed" if write.remove else f"connection_creation_rate={write.rate:g}")
                if write.remove:
                    applied.pop(write.ip, None)
                elif write.rate is not None:
                    applied[write.ip] = write.rate
            # Our own writes take effect at once (read-your-writes for the next Describe);
            # the ZooKeeper watch delivers the same state, and other sidecars' changes.
            sidecar.set_ip_quotas(applied)
        except Exception as exc:  # ZooKeeper failed: tell the client, keep the connection
            log.warning("AlterClientQuotas: ZooKeeper write failed: %s", exc)
            for entry in response["Entries"]:
                if entry["ErrorCode"] == 0:
                    entry["ErrorCode"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                    entry["ErrorMessage"] = f"ZooKeeper write failed: {exc}"
    return encode(api.response, version, response)
