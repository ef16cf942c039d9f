"""DescribeClientQuotas (48) / AlterClientQuotas (49), sans-IO.

The sidecar owns per-IP connection quotas (KIP-612); user and client-id quotas belong to
the broker unless the sidecar enforces them itself. :func:`route_describe` /
:func:`route_alter` say whether a request is ours (it names ``ip``, or, for describe,
filters nothing; or anything at all with ``clients_local``), the broker's (user/client-id
only), or invalid (``ip`` mixed with user/client-id in one entity: INVALID_REQUEST "IP
entity should not be used with user/client ID entity", as Kafka answers).

:func:`describe` and :func:`plan_alter` take the typed requests of :mod:`quotas.messages`
and compute the typed answers from a snapshot (``{ip or None: rate}``, ``None`` being the
``<default>`` entity); the shell performs the returned writes. Match types
(DescribeClientQuotas): 0 exact name, 1 the default entity, 2 any *specified*
(non-default) name — Kafka's MATCH_TYPE_SPECIFIED.

:func:`describe_clients` and :func:`plan_alter_clients` answer user and client-id
entities too (from a :class:`quotas.clients.ClientQuotas` snapshot), for a sidecar that
enforces those quotas; their rules and messages are Kafka's: the filter checks of
``ClientQuotasImage.describe`` and the entity and value checks of
``ClientQuotaControlManager.alterClientQuotas`` (KRaft, the rules Kafka maintains), with
the ZooKeeper layout of ``ZkAdminManager`` / ``AdminZkClient``. Where the two Kafka modes
differ, see those functions' docstrings.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from protocol.errors import ErrorCode
from quotas.clients import (
    DEFAULT,
    LONG_MAX,
    QUOTA_KEYS,
    ClientQuotas,
    Default,
    Entity,
)
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


def route_describe(
    request: DescribeClientQuotasRequest, broker_has_quotas: bool, *, clients_local: bool = False
) -> Route:
    """LOCAL when the filter names ``ip`` (or is empty and the broker has no quota API).

    ``clients_local``: the sidecar enforces user/client-id quotas, so every request is
    answered locally (:func:`describe_clients`).
    """
    if clients_local:
        return Route.LOCAL
    types = set(request.entity_types)
    if IP in types:
        return Route.LOCAL
    if not types and not broker_has_quotas:
        return Route.LOCAL
    return Route.FORWARD


def route_alter(request: AlterClientQuotasRequest, *, clients_local: bool = False) -> Route:
    """LOCAL when any entry names ``ip``; a broker-only request is forwarded untouched.

    ``clients_local``: the sidecar enforces user/client-id quotas, so every request is
    answered locally (:func:`plan_alter_clients`).
    """
    if clients_local:
        return Route.LOCAL
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


USER, CLIENT_ID = USER_OR_CLIENT
KNOWN_TYPES = (IP, USER, CLIENT_ID)
NO_ZOOKEEPER_MESSAGE = "this sidecar runs without ZooKeeper: user and client-id quotas cannot be altered"


def describe_clients(
    request: DescribeClientQuotasRequest,
    snapshot: ClientQuotas,
    ips: Mapping[str | None, float] | None = None,
) -> DescribeClientQuotasResponse:
    """The DescribeClientQuotas answer when the sidecar holds user and client-id quotas.

    The filter is checked as Kafka's ``ClientQuotasImage.describe`` checks it, component by
    component: an empty type, a type twice, a type Kafka does not know (UNSUPPORTED_VERSION),
    a match string that contradicts the match type, an unknown match type; then ``ip`` with
    user/client-id (:data:`MIXED_MESSAGE`). A filter that names ``ip`` is answered from
    ``ips`` as :func:`describe` answers it.

    An entity matches when it has every component's type with the exact name (exact), the
    default name (default) or any name, the default included (specified: Kafka's
    ``ClientQuotasImage`` and ``ZkAdminManager`` both match the default there); with
    ``strict`` it must have no other part. An empty, non-strict filter lists every entity,
    the IP entities of ``ips`` included, as Kafka lists every entity it holds.
    """
    refuse = DescribeClientQuotasResponse.refusal
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for component in request.components:
        kind = component.entity_type
        if not kind:
            return refuse(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in typed:
            return refuse(ErrorCode.INVALID_REQUEST,
                          f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in KNOWN_TYPES:
            return refuse(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        match = component.match_type
        if match == MATCH_EXACT:
            if component.match is None:
                return refuse(ErrorCode.INVALID_REQUEST,
                              "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = component.match
        elif match == MATCH_DEFAULT:
            if component.match is not None:
                return refuse(ErrorCode.INVALID_REQUEST,
                              "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[kind] = None
        elif match == MATCH_SPECIFIED:
            if component.match is not None:
                return refuse(ErrorCode.INVALID_REQUEST,
                              "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(kind)
        else:
            return refuse(ErrorCode.INVALID_REQUEST, f"Unknown match type {match}")
    named = exact.keys() | typed
    if IP in named:
        if named & set(USER_OR_CLIENT):
            return refuse(ErrorCode.INVALID_REQUEST, MIXED_MESSAGE)
        return describe(request, ips or {})
    found: list[QuotaEntry] = []
    for entity in sorted(snapshot, key=_entity_sort_key):
        parts = _parts_of(entity)
        if request.strict and len(parts) != len(named):
            continue
        if all(kind in parts and parts[kind] == name for kind, name in exact.items()) and all(
            kind in parts for kind in typed
        ):
            values = snapshot.entries[entity]
            found.append(QuotaEntry(
                entity=tuple(EntityPart(entity_type=k, name=n) for k, n in parts.items()),
                values=tuple(sorted(values.items()))))
    if not request.components and not request.strict and ips:
        found.extend(
            QuotaEntry(entity=(EntityPart(entity_type=IP, name=ip),), values=((RATE_KEY, ips[ip]),))
            for ip in sorted(ips, key=_sort_key))
    return DescribeClientQuotasResponse(entries=tuple(found))


def _parts_of(entity: Entity) -> dict[str, str | None]:
    """An entity as wire parts ``{type: name or None}``, user first."""
    parts: dict[str, str | None] = {}
    for kind, part in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        if part is not None:
            parts[kind] = None if isinstance(part, Default) else part
    return parts


def _entity_sort_key(entity: Entity) -> tuple[tuple[int, str], tuple[int, str]]:
    def key(part: str | Default | None) -> tuple[int, str]:
        if part is None:
            return (0, "")
        return (1, "") if isinstance(part, Default) else (2, part)

    return key(entity.user), key(entity.client_id)


@dataclass(frozen=True, slots=True)
class ClientWrite:
    """One entity's changes, written in one compare-and-set: ``(key, value or None to remove)``."""

    entity: Entity
    changes: tuple[tuple[str, float | None], ...]


def plan_alter_clients(
    request: AlterClientQuotasRequest, *, can_write: bool, refused: Mapping[str, str] | None = None
) -> tuple[AlterClientQuotasResponse, list[Write | ClientWrite]]:
    """The AlterClientQuotas answer and its writes when the sidecar holds user and client-id
    quotas (IP entries are planned as :func:`plan_alter` plans them).

    Each entry succeeds or fails whole, with Kafka's ``ClientQuotaControlManager`` checks
    and messages, in its order: a quota key twice in one entry; an entity already named by
    an earlier entry ("Ignoring duplicate entity"); an empty entity, a type twice, an
    unknown type, an empty name; ``ip`` with user/client-id (:data:`MIXED_MESSAGE`); then
    each value: an unknown key, a value not above 0, a LONG key above Java's
    ``Long.MAX_VALUE`` or fractional (more than 1e-6 from a whole number). Two choices of
    ours: a value that is not finite is refused (Kafka lets NaN through), and removing a
    key that is not a quota key is a no-op (Kafka keeps only quota keys in its quota map;
    here ``/config/users/<user>`` also holds SCRAM credentials, which must survive).
    ``refused`` maps quota keys this sidecar does not enforce to why: setting one is refused
    (INVALID_REQUEST with that message) rather than stored and silently ignored.

    Kafka's ZooKeeper mode (``ZkAdminManager.alterClientQuotas``) accepted duplicate keys
    (the last won), values of 0 or below, and would merge a duplicated entity type in the
    request's parsing; the KRaft rules above are what Kafka answers today.
    """
    results: list[AlterationResult] = []
    writes: list[Write | ClientWrite] = []
    seen: set[Entity | tuple[str | None, ...]] = set()
    for entry in request.entries:
        code, message, planned = _check_client_entry(entry.entity, entry.ops, can_write, seen, refused or {})
        results.append(AlterationResult(entity=entry.entity, error=code, error_message=message))
        if code == ErrorCode.NONE and not request.validate_only:
            writes.extend(planned)
    return AlterClientQuotasResponse(entries=tuple(results)), writes


def _describe_entity(entity: Sequence[EntityPart]) -> str:
    """Kafka's ``ClientQuotaEntity.toString``, for messages."""
    inner = ", ".join(f"{part.entity_type}={part.name}" if part.name is not None
                      else f"{part.entity_type}=null" for part in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _check_client_entry(
    entity: Sequence[EntityPart],
    ops: Sequence[QuotaOp],
    can_write: bool,
    seen: set[Entity | tuple[str | None, ...]],
    refused: Mapping[str, str],
) -> tuple[ErrorCode, str | None, list[Write | ClientWrite]]:
    invalid = ErrorCode.INVALID_REQUEST
    keys: set[str] = set()
    for op in ops:
        if op.key in keys:
            return invalid, (f"Duplicate quota key {op.key} not updating quota for this entity "
                             f"{_describe_entity(entity)}"), []
        keys.add(op.key)
    if not entity:
        return invalid, "Invalid empty client quota entity", []
    parts: dict[str, str | None] = {}
    for part in entity:
        if part.entity_type in parts:
            return invalid, f"Invalid client quota entity, duplicate entity entry {part.entity_type}", []
        if part.entity_type not in KNOWN_TYPES:
            return invalid, f"Unhandled client quota entity type: {part.entity_type}", []
        if part.name is not None and not part.name:
            return invalid, f"Empty {part.entity_type} not supported", []
        parts[part.entity_type] = part.name
    identity = _identity(parts)
    if identity in seen:
        return invalid, f"Ignoring duplicate entity {_describe_entity(entity)}", []
    seen.add(identity)
    if IP in parts:
        if len(parts) > 1:
            return invalid, MIXED_MESSAGE, []
        code, message, ip_writes = _check_entry(entity, ops, can_write)
        return code, message, list(ip_writes)
    changes: list[tuple[str, float | None]] = []
    for op in ops:
        if op.remove:
            if op.key in QUOTA_KEYS:
                changes.append((op.key, None))
            continue
        problem = check_value(op.key, op.value) or refused.get(op.key)
        if problem is not None:
            return invalid, problem, []
        changes.append((op.key, float(op.value)))
    if not can_write:
        return invalid, NO_ZOOKEEPER_MESSAGE, []
    target = Entity(user=_part(parts, USER), client_id=_part(parts, CLIENT_ID))
    return ErrorCode.NONE, None, [ClientWrite(entity=target, changes=tuple(changes))] if changes else []


def _part(parts: Mapping[str, str | None], kind: str) -> str | Default | None:
    if kind not in parts:
        return None
    name = parts[kind]
    return DEFAULT if name is None else name


def _identity(parts: Mapping[str, str | None]) -> Entity | tuple[str | None, ...]:
    if IP in parts:
        name = parts[IP]
        return (IP, None if name is None else normalise_ip(name) or name)
    return Entity(user=_part(parts, USER), client_id=_part(parts, CLIENT_ID))


def check_value(key: str, value: float) -> str | None:
    """Why ``value`` cannot be set for the user/client-id quota ``key`` (Kafka's message),
    or ``None`` when it can (``ClientQuotaControlManager.validateQuotaKeyValue``)."""
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not math.isfinite(value):
        return f"Quota {key} must be a finite number"
    if value <= 0.0:
        return f"Quota {key} must be greater than 0"
    if kind == "long":
        if value > float(LONG_MAX):  # Java compares as doubles: 2**63 itself passes
            return f"Proposed value for {key} is too large for a LONG."
        if abs(math.fmod(value, 1.0)) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None
