"""DescribeClientQuotas (48) / AlterClientQuotas (49) for the ``ip`` entity, sans-IO.

The sidecar owns per-IP connection quotas (KIP-612); user and client-id quotas belong to
the broker. :func:`route_describe` / :func:`route_alter` say whether a request is ours
(it names ``ip``, or, for describe, filters nothing), the broker's (user/client-id only),
or invalid (``ip`` mixed with user/client-id in one entity: INVALID_REQUEST "IP entity
should not be used with user/client ID entity", as Kafka answers).

:func:`describe` and :func:`plan_alter` compute response bodies from a snapshot
(``{ip or None: rate}``, ``None`` being the ``<default>`` entity); the shell performs the
returned writes. Match types (DescribeClientQuotas): 0 exact name, 1 the default entity,
2 any *specified* (non-default) name — Kafka's MATCH_TYPE_SPECIFIED.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from protocol.errors import ErrorCode

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


def route_describe(request: Mapping[str, Any], broker_has_quotas: bool) -> Route:
    """LOCAL when the filter names ``ip`` (or is empty and the broker has no quota API)."""
    types = {c["EntityType"] for c in request["Components"]}
    if IP in types:
        return Route.LOCAL
    if not types and not broker_has_quotas:
        return Route.LOCAL
    return Route.FORWARD


def route_alter(request: Mapping[str, Any]) -> Route:
    """LOCAL when any entry names ``ip``; a broker-only request is forwarded untouched."""
    for entry in request["Entries"]:
        if any(e["EntityType"] == IP for e in entry["Entity"]):
            return Route.LOCAL
    return Route.FORWARD


def _error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"ThrottleTimeMs": 0, "ErrorCode": int(code), "ErrorMessage": message, "Entries": None}


def describe(request: Mapping[str, Any], snapshot: Mapping[str | None, float]) -> dict[str, Any]:
    """The DescribeClientQuotas response body for an ``ip`` (or empty) filter."""
    components = list(request["Components"])
    types = [c["EntityType"] for c in components]
    if IP in types and any(t in USER_OR_CLIENT for t in types):
        return _error(ErrorCode.INVALID_REQUEST, MIXED_MESSAGE)
    unknown = [t for t in types if t != IP and t not in USER_OR_CLIENT]
    if unknown:
        return _error(ErrorCode.INVALID_REQUEST, f"unknown entity type {unknown[0]!r}")
    if len([t for t in types if t == IP]) > 1:
        return _error(ErrorCode.INVALID_REQUEST, "duplicate ip filter component")
    entities: list[str | None]
    if not components:
        entities = [] if request.get("Strict") else sorted(snapshot, key=_sort_key)
    else:
        component = components[0]
        match = component["MatchType"]
        if match == MATCH_EXACT:
            name = component["Match"]
            ip = normalise_ip(name) if name is not None else None
            if ip is None:
                return _error(ErrorCode.INVALID_REQUEST, f"{name!r} is not a valid IP address")
            entities = [ip] if ip in snapshot else []
        elif match == MATCH_DEFAULT:
            entities = [None] if None in snapshot else []
        elif match == MATCH_SPECIFIED:
            entities = sorted((k for k in snapshot if k is not None), key=_sort_key)
        else:
            return _error(ErrorCode.INVALID_REQUEST, f"unknown match type {match}")
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": 0,
        "ErrorMessage": None,
        "Entries": [
            {
                "Entity": [{"EntityType": IP, "EntityName": ip}],
                "Values": [{"Key": RATE_KEY, "Value": snapshot[ip]}],
            }
            for ip in entities
        ],
    }


def _sort_key(ip: str | None) -> tuple[int, str]:
    return (0, "") if ip is None else (1, ip)


@dataclass(frozen=True, slots=True)
class Write:
    """One change to perform: set (``rate``) or remove the quota of an IP entity."""

    ip: str | None
    rate: float | None
    remove: bool


def plan_alter(
    request: Mapping[str, Any], *, can_write: bool
) -> tuple[dict[str, Any], list[Write]]:
    """The AlterClientQuotas response body and the writes it implies.

    Every entry is validated on its own (as Kafka does); writes are returned only for
    valid entries and only when the request is not ``ValidateOnly``.
    """
    results: list[dict[str, Any]] = []
    writes: list[Write] = []
    for entry in request["Entries"]:
        entity = list(entry["Entity"])
        code, message, write = _check_entry(entity, list(entry["Ops"]), can_write)
        results.append({
            "ErrorCode": int(code),
            "ErrorMessage": message,
            "Entity": [{"EntityType": e["EntityType"], "EntityName": e["EntityName"]} for e in entity],
        })
        if code == ErrorCode.NONE and write and not request.get("ValidateOnly"):
            writes.extend(write)
    return {"ThrottleTimeMs": 0, "Entries": results}, writes


def _check_entry(
    entity: Sequence[Mapping[str, Any]], ops: Sequence[Mapping[str, Any]], can_write: bool
) -> tuple[ErrorCode, str | None, list[Write]]:
    types = [e["EntityType"] for e in entity]
    if IP not in types:
        return ErrorCode.INVALID_REQUEST, "the sidecar answers ip quotas only; send user/client-id quotas on their own", []
    if any(t in USER_OR_CLIENT for t in types):
        return ErrorCode.INVALID_REQUEST, MIXED_MESSAGE, []
    if len(types) != 1:
        return ErrorCode.INVALID_REQUEST, "an ip entity has exactly one component", []
    name = entity[0]["EntityName"]
    ip = None if name is None else normalise_ip(name)
    if name is not None and ip is None:
        return ErrorCode.INVALID_REQUEST, f"{name!r} is not a valid IP address", []
    writes: list[Write] = []
    for op in ops:
        if op["Key"] != RATE_KEY:
            return ErrorCode.INVALID_REQUEST, f"unknown ip quota key {op['Key']!r} (only {RATE_KEY})", []
        if op["Remove"]:
            writes.append(Write(ip, None, True))
            continue
        value = op["Value"]
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
