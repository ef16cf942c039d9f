"""DescribeClientQuotas (48) and AlterClientQuotas (49) for per-IP quotas (KIP-612).

The decisions are :mod:`quotas.admin`'s; this module asks it and hands the ZooKeeper
writes to the quota port (:class:`~proxy.local.ports.QuotaPort`) as an answer-later.
Requests about users and client ids only are not taken (:func:`takes`): the broker
answers them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from protocol.apis import ApiRegistry
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from proxy.local.api import Answer, Context, Later, LocalApi, LocalRequest, Respond, Takes
from quotas import admin

log = logging.getLogger(__name__)

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49


def takes(registry: ApiRegistry) -> Takes:
    """The predicate: True when the sidecar answers this quota request (it names ``ip``)."""

    def predicate(header: RequestHeader, request: Mapping[str, Any] | None, context: Context) -> bool:
        api = registry.get(header.api_key)
        if api is None or header.api_version not in api.versions:
            return False
        if request is None:  # a body we cannot read is answered (and closed) locally
            return True
        if header.api_key == DESCRIBE_CLIENT_QUOTAS:
            info = context.ports.upstream.info
            broker_has = info is not None and header.api_key in info.api_versions
            return admin.route_describe(request, broker_has) is admin.Route.LOCAL
        return admin.route_alter(request) is admin.Route.LOCAL

    return predicate


def describe(request: LocalRequest, context: Context) -> Answer:
    """Answer DescribeClientQuotas for the ip entity."""
    quotas = context.ports.quotas
    assert request.body is not None and quotas is not None
    return Respond(body=admin.describe(request.body, quotas.snapshot()))


def alter(request: LocalRequest, context: Context) -> Answer:
    """Answer AlterClientQuotas for the ip entity: later, once ZooKeeper has the writes."""
    quotas = context.ports.quotas
    assert request.body is not None and quotas is not None
    response, writes = admin.plan_alter(request.body, can_write=quotas.can_write)
    if not writes:
        return Respond(body=response)

    async def answer() -> Respond:
        try:
            await quotas.alter(writes)
        except Exception as exc:  # ZooKeeper failed: tell the client, keep the connection
            log.warning("AlterClientQuotas: ZooKeeper write failed: %s", exc)
            for entry in response["Entries"]:
                if entry["ErrorCode"] == 0:
                    entry["ErrorCode"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                    entry["ErrorMessage"] = f"ZooKeeper write failed: {exc}"
        return Respond(body=response)

    return Later(answer=answer)


def entries(registry: ApiRegistry) -> list[LocalApi]:
    """The table entries for the two quota APIs."""
    out = []
    for key, handler in ((DESCRIBE_CLIENT_QUOTAS, describe), (ALTER_CLIENT_QUOTAS, alter)):
        api = registry.api(key)
        assert api.versions.hi is not None
        out.append(LocalApi(key=key, name=api.name, versions=(api.versions.lo, api.versions.hi),
                            handler=handler, takes=takes(registry)))
    return out
