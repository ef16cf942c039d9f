"""DescribeClientQuotas (48) and AlterClientQuotas (49): per-IP quotas (KIP-612), and user
and client-id quotas where this sidecar enforces them (``sidecar.client.quotas``, KIP-55).

The decisions are :mod:`quotas.admin`'s, on the typed messages of :mod:`quotas.messages`;
this module turns the decoded body into one, asks it, and hands the ZooKeeper writes to the quota port (:class:`~proxy.local.ports.QuotaPort`) as an answer-later.
Requests about users and client ids only are not taken (:func:`takes`) while the broker
holds those quotas: the broker answers them.
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


def enforcing(context: Context) -> bool:
    """Whether this sidecar holds user and client-id quotas now (``sidecar.client.quotas``)."""
    port = context.ports.client_quotas
    return port is not None and port.enforcing


def takes(registry: ApiRegistry) -> Takes:
    """The predicate: True when the sidecar answers this quota request (it names ``ip``, or
    this sidecar enforces user and client-id quotas)."""

    def predicate(header: RequestHeader, request: Mapping[str, Any] | None, context: Context) -> bool:
        api = registry.get(header.api_key)
        if api is None or header.api_version not in api.versions:
            return False
        if request is None:  # a body we cannot read is answered (and closed) locally
            return True
        local = enforcing(context)
        if header.api_key == DESCRIBE_CLIENT_QUOTAS:
            info = context.ports.upstream.info
            broker_has = info is not None and header.api_key in info.api_versions
            describe = DescribeClientQuotasRequest.from_wire(header.api_version, request)
            return admin.route_describe(describe, broker_has, clients_local=local) is admin.Route.LOCAL
        alter = AlterClientQuotasRequest.from_wire(header.api_version, request)
        return admin.route_alter(alter, clients_local=local) is admin.Route.LOCAL

    return predicate


def describe(request: LocalRequest, context: Context) -> Answer:
    """Answer DescribeClientQuotas: the ip entity, and users and client ids while this
    sidecar enforces them."""
    quotas = context.ports.quotas
    assert request.body is not None and quotas is not None
    asked = DescribeClientQuotasRequest.from_wire(request.version, request.body)
    clients = context.ports.client_quotas
    if clients is not None and clients.enforcing:
        return Respond(body=admin.describe_clients(asked, clients.current, quotas.snapshot()).to_wire(request.version))
    return Respond(body=admin.describe(asked, quotas.snapshot()).to_wire(request.version))


def alter(request: LocalRequest, context: Context) -> Answer:
    """Answer AlterClientQuotas (the ip entity; users and client ids while this sidecar
    enforces them): later, once ZooKeeper has the writes."""
    quotas = context.ports.quotas
    assert request.body is not None and quotas is not None
    version = request.version
    asked = AlterClientQuotasRequest.from_wire(version, request.body)
    clients = context.ports.client_quotas
    ip_writes: list[admin.Write] = []
    client_writes: list[admin.ClientWrite] = []
    if clients is not None and clients.enforcing:
        response, planned = admin.plan_alter_clients(asked, can_write=quotas.can_write, refused=clients.refused)
        for write in planned:
            if isinstance(write, admin.ClientWrite):
                client_writes.append(write)
            else:
                ip_writes.append(write)
    else:
        response, ip_writes = admin.plan_alter(asked, can_write=quotas.can_write)
    if not ip_writes and not client_writes:
        return Respond(body=response.to_wire(version))

    async def answer() -> Respond:
        try:
            if ip_writes:
                await quotas.alter(ip_writes)
            if client_writes:
                assert clients is not None
                await clients.alter_clients(client_writes)
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
