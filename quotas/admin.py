"""DescribeClientQuotas (48) / AlterClientQuotas (49) for the ``ip`` entity, sans-IO.

The sidecar owns per-IP connection quotas (KIP-612); user and client-id quotas belong to
the broker. :func:`route_describe` / :func:`route_alter` say whether a request is ours
(it names ``ip``, or, for describe, filters nothing), the broker's (user/client-id only),
or invalid (``ip`` mixed with user/client-id in one entity: INVALID_REQUEST "IP entity
should not be used with user/client ID entity", as Kafka answers).

:func:`describe` and :func:`plan_alter` take the typed requests of :mod:`quotas.messages`
and compute the typed answers from a snapshot (``{ip or None: rate}``, ``None`` being the
``<default>`` entity); the shell performs the returned writes. Match types
(DescribeClientQuotas): 0 exact name, 1 the default entity, 2 any *specified*
(non-default) name — Kafka's MATCH_TYPE_SPECIFIED.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from protocol.errors import ErrorCode
from quotas.messages import (
    AlterationResult,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityPart,
    QuotaEntry,
    QuotaOp,
)

IP = "ip"
USER_OR_CLIENT = ("user", "client-id")
RATE_KEY = "connection_creation_rate"
MIXED_MESSAGE = "IP entity should not be used with user/client ID entity"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class Route(Enum):
    """Who answers a quota request."""

    LOCAL = "local"
    FORWARD = "forward"


def normalise_ip(name: str) -> str | None:
    """The canonical text of an IP address, or ``None`` if ``name`` is not one."""
    try:
        return str(ipaddress.ip_address(name.strip()))
    except ValueError:
        return None


def route_describe(request: DescribeClientQuotasRequest, broker_has_quotas: bool) -> Route:
    """LOCAL when the filter names ``ip`` (or is empty and the broker has no quota API)."""
    types = set(request.entity_types)
    if IP in types:
        return Route.LOCAL
    if not types and not broker_has_quotas:
        return Route.LOCAL
    return Route.FORWARD


def route_alter(request: AlterClientQuotasRequest) -> Route:
    """LOCAL when any entry names ``ip``; a broker-only request is forwarded untouched."""
    if any(IP in entry.entity_types for entry in request.entries):
        return Route.LOCAL
    return Route.FORWARD


def describe(request: DescribeClientQuotasRequest, snapshot: Mapping[str | None, float]) -> DescribeClientQuotasResponse:
    """The DescribeClientQuotas answer for an ``ip`` (or empty) filter."""
    refuse = DescribeClientQuotasResponse.refusal
    types = request.entity_types
    if IP in types and any(t in USER_OR_CLIENT for t in types):
        return refuse(ErrorCode.INVALID_REQUEST, MIXED_MESSAGE)
    unknown = [t for t in types if t != IP and t not in USER_OR_CLIENT]
    if unknown:
        return refuse(ErrorCode.INVALID_REQUEST, f"unknown entity type {unknown[0]!r}")
    if len([t for t in types if t == IP]) > 1:
        return refuse(ErrorCode.INVALID_REQUEST, "duplicate ip filter component")
    entities: list[str | None]
    if not request.components:
        entities = [] if request.strict else sorted(snapshot, key=_sort_key)
    else:
        component = request.components[0]
        match = component.match_type
        if match == MATCH_EXACT:
            name = component.match
            ip = normalise_ip(name) if name is not None else None
            if ip is None:
                return refuse(ErrorCode.INVALID_REQUEST, f"{name!r} is not a valid IP address")
            entities = [ip] if ip in snapshot else []
        elif match == MATCH_DEFAULT:
            entities = [None] if None in snapshot else []
        elif match == MATCH_SPECIFIED:
            entities = sorted((k for k in snapshot if k is not None), key=_sort_key)
        else:
            return refuse(ErrorCode.INVALID_REQUEST, f"unknown match type {match}")
    return DescribeClientQuotasResponse(entries=tuple(
        QuotaEntry(entity=(EntityPart(entity_type=IP, name=ip),), values=((RATE_KEY, snapshot[ip]),))
        for ip in entities
    ))


def _sort_key(ip: str | None) -> tuple[int, str]:
    return (0, "") if ip is None else (1, ip)


@dataclass(frozen=True, slots=True)
class Write:
    """One change to perform: set (``rate``) or remove the quota of an IP entity."""

    ip: str | None
    rate: float | None
    remove: bool


def plan_alter(
    request: AlterClientQuotasRequest, *, can_write: bool
) -> tuple[AlterClientQuotasResponse, list[Write]]:
    """The AlterClientQuotas answer and the writes it implies.

    Every entry is validated on its own (as Kafka does); writes are returned only for
    valid entries and only when the request is not ``ValidateOnly``.
    """
    results: list[AlterationResult] = []
    writes: list[Write] = []
    for entry in request.entries:
        code, message, write = _check_entry(entry.entity, entry.ops, can_write)
        results.append(AlterationResult(entity=entry.entity, error=code, error_message=message))
        if code == ErrorCode.NONE and write and not request.validate_only:
            writes.extend(write)
    return AlterClientQuotasResponse(entries=tuple(results)), writes


def _check_entry(
    entity: Sequence[EntityPart], ops: Sequence[QuotaOp], can_write: bool
) -> tuple[ErrorCode, str | None, list[Write]]:
    types = [e.entity_type for e in entity]
    if IP not in types:
        return ErrorCode.INVALID_REQUEST, "the sidecar answers ip quotas only; send user/client-id quotas on their own", []
    if any(t in USER_OR_CLIENT for t in types):
        return ErrorCode.INVALID_REQUEST, MIXED_MESSAGE, []
    if len(types) != 1:
        return ErrorCode.INVALID_REQUEST, "an ip entity has exactly one component", []
    name = entity[0].name
    ip = None if name is None else normalise_ip(name)
    if name is not None and ip is None:
        return ErrorCode.INVALID_REQUEST, f"{name!r} is not a valid IP address", []
    writes: list[Write] = []
    for op in ops:
        if op.key != RATE_KEY:
            return ErrorCode.INVALID_REQUEST, f"unknown ip quota key {op.key!r} (only {RATE_KEY})", []
        if op.remove:
            writes.append(Write(ip, None, True))
            continue
        value = op.value
        if not float(value).is_integer() or not 0 <= value <= 2**31 - 1:
            return ErrorCode.INVALID_REQUEST, f"{RATE_KEY} must be a whole number from 0 to 2147483647, not {value}", []
        writes.append(Write(ip, float(value), False))
    if not can_write:
        return (
            ErrorCode.INVALID_REQUEST,
            "this sidecar runs without ZooKeeper: per-IP quotas come from its config "
            "(sidecar.ip.connection.creation.rate[.overrides])",
            [],
        )
    return ErrorCode.NONE, None, writes


def effective_rate(
    ip: str,
    dynamic: Mapping[str | None, float],
    configured_default: float | None,
    configured: Mapping[str, float],
) -> float | None:
    """The quota for ``ip``: ZooKeeper exact, config exact, ZooKeeper default, config default."""
    if ip in dynamic:
        return dynamic[ip]
    if ip in configured:
        return configured[ip]
    if None in dynamic:
        return dynamic[None]
    return configured_default
