"""DescribeClientQuotas (48) and AlterClientQuotas (49) for per-IP quotas (KIP-612).

The decisions are :mod:`quotas.admin`'s, on the typed messages of :mod:`quotas.messages`;
this module turns the decoded body into one, asks it, and hands the ZooKeeper writes to the quota port (:class:`~proxy.local.ports.QuotaPort`) as an answer-later.
Requests about users and client ids only are not taken (:func:`takes`): the broker
answers them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from protocol.apis import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS, ApiRegistry
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from proxy.local.api import Answer, Context, Later, LocalApi, LocalRequest, Respond, Takes
from quotas import admin
from quotas.messages import AlterClientQuotasRequest, DescribeClientQuotasRequest

log = logging.getLogger(__name__)


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
            describe = DescribeClientQuotasRequest.from_wire(header.api_version, request)
            return admin.route_describe(describe, broker_has) is admin.Route.LOCAL
        alter = AlterClientQuotasRequest.from_wire(header.api_version, request)
        return admin.route_alter(alter) is admin.Route.LOCAL

    return predicate


def describe(request: LocalRequest, context: Context) -> Answer:
    """Answer DescribeClientQuotas for the ip entity."""
    quotas = context.ports.quotas
    assert request.body is not None and quotas is not None
    asked = DescribeClientQuotasRequest.from_wire(request.version, request.body)
    return Respond(body=admin.describe(asked, quotas.snapshot()).to_wire(request.version))


def alter(request: LocalRequest, context: Context) -> Answer:
    """Answer AlterClientQuotas for the ip entity: later, once ZooKeeper has the writes."""
    quotas = context.ports.quotas
    assert request.body is not None and quotas is not None
    version = request.version
    asked = AlterClientQuotasRequest.from_wire(version, request.body)
    response, writes = admin.plan_alter(asked, can_write=quotas.can_write)
    if not writes:
        return Respond(body=response.to_wire(version))

    async def answer() -> Respond:
        try:
            await quotas.alter(writes)
        except Exception as exc:  # ZooKeeper failed: tell the client, keep the connection
            log.warning("AlterClientQuotas: ZooKeeper write failed: %s", exc)
            failed = response.failed(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper write failed: {exc}")
            return Respond(body=failed.to_wire(version))
        return Respond(body=response.to_wire(version))

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
