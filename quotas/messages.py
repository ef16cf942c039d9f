"""DescribeClientQuotas (48) and AlterClientQuotas (49) as typed messages, v0-v1.

The quota core (:mod:`quotas.admin`) takes these requests and returns these responses, as
the group core takes :mod:`coordinator.messages`: they live beside the code that decides
the answers, below the local-API shell (:mod:`proxy.local.client_quotas`), which turns a
decoded body into a request with ``from_wire`` and a response into a body with
``to_wire``. Field names on the wire are Kafka's (``DescribeClientQuotasRequest.json`` and
its siblings); both versions have the same fields, v1 only encodes them compactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from protocol.errors import ErrorCode


@dataclass(frozen=True, kw_only=True, slots=True)
class ComponentFilter:
    """One ``ComponentData`` of a DescribeClientQuotas filter.

    ``match_type`` is Kafka's: 0 the exact ``match``, 1 the default entity, 2 any specified
    (non-default) name (:data:`quotas.admin.MATCH_EXACT` and its siblings).
    """

    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> ComponentFilter:
        """From one decoded ``Components`` entry."""
        return cls(entity_type=body["EntityType"], match_type=body["MatchType"], match=body["Match"])


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeClientQuotasRequest:
    """DescribeClientQuotas v0-v1: which entities' quotas to list."""

    components: tuple[ComponentFilter, ...] = ()
    #: Only entities that match every component exactly (no entity has fewer components).
    strict: bool = False

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> DescribeClientQuotasRequest:
        """From a decoded DescribeClientQuotas request body."""
        return cls(components=tuple(ComponentFilter.from_wire(c) for c in body["Components"]),
                   strict=bool(body.get("Strict", False)))

    @property
    def entity_types(self) -> list[str]:
        """The entity type of each component, in request order."""
        return [c.entity_type for c in self.components]


@dataclass(frozen=True, kw_only=True, slots=True)
class EntityPart:
    """One ``EntityData``: a type (``ip``, ``user``, ``client-id``) and its name.

    ``name`` ``None`` is the type's default entity (``<default>``).
    """

    entity_type: str
    name: str | None

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> EntityPart:
        """From one decoded ``Entity`` entry."""
        return cls(entity_type=body["EntityType"], name=body["EntityName"])

    def to_wire(self) -> dict[str, Any]:
        """To one ``Entity`` entry."""
        return {"EntityType": self.entity_type, "EntityName": self.name}


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaEntry:
    """One described entity and its quota values (``{key: value}``, in order)."""

    entity: tuple[EntityPart, ...]
    values: tuple[tuple[str, float], ...]

    def to_wire(self) -> dict[str, Any]:
        """To one DescribeClientQuotas ``Entries`` entry."""
        return {"Entity": [part.to_wire() for part in self.entity],
                "Values": [{"Key": key, "Value": value} for key, value in self.values]}


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeClientQuotasResponse:
    """DescribeClientQuotas answer: the entries, or a top-level error with none (``None``)."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    entries: tuple[QuotaEntry, ...] | None = ()
    throttle_time_ms: int = 0

    @classmethod
    def refusal(cls, error: ErrorCode, message: str) -> DescribeClientQuotasResponse:
        """A refused request: Kafka sends a null entry list with the error."""
        return cls(error=error, error_message=message, entries=None)

    def to_wire(self, version: int) -> dict[str, Any]:
        """To a DescribeClientQuotas response body (the same fields at v0 and v1)."""
        return {"ThrottleTimeMs": self.throttle_time_ms, "ErrorCode": int(self.error),
                "ErrorMessage": self.error_message,
                "Entries": None if self.entries is None else [e.to_wire() for e in self.entries]}


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaOp:
    """One ``OpData``: set ``key`` to ``value``, or remove it (``value`` then ignored)."""

    key: str
    value: float
    remove: bool = False

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> QuotaOp:
        """From one decoded ``Ops`` entry."""
        return cls(key=body["Key"], value=body["Value"], remove=bool(body["Remove"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaAlteration:
    """One AlterClientQuotas ``Entries`` entry: an entity and the changes to its quotas."""

    entity: tuple[EntityPart, ...]
    ops: tuple[QuotaOp, ...] = ()

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> QuotaAlteration:
        """From one decoded ``Entries`` entry."""
        return cls(entity=tuple(EntityPart.from_wire(e) for e in body["Entity"]),
                   ops=tuple(QuotaOp.from_wire(op) for op in body["Ops"]))

    @property
    def entity_types(self) -> list[str]:
        """The entity type of each part, in request order."""
        return [part.entity_type for part in self.entity]


@dataclass(frozen=True, kw_only=True, slots=True)
class AlterClientQuotasRequest:
    """AlterClientQuotas v0-v1."""

    entries: tuple[QuotaAlteration, ...] = ()
    #: Check every entry, write nothing.
    validate_only: bool = False

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> AlterClientQuotasRequest:
        """From a decoded AlterClientQuotas request body."""
        return cls(entries=tuple(QuotaAlteration.from_wire(e) for e in body["Entries"]),
                   validate_only=bool(body.get("ValidateOnly", False)))


@dataclass(frozen=True, kw_only=True, slots=True)
class AlterationResult:
    """The outcome for one entity of an AlterClientQuotas request."""

    entity: tuple[EntityPart, ...]
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """To one AlterClientQuotas response ``Entries`` entry."""
        return {"ErrorCode": int(self.error), "ErrorMessage": self.error_message,
                "Entity": [part.to_wire() for part in self.entity]}


@dataclass(frozen=True, kw_only=True, slots=True)
class AlterClientQuotasResponse:
    """AlterClientQuotas answer: one result per entry, in request order."""

    entries: tuple[AlterationResult, ...] = ()
    throttle_time_ms: int = 0

    def failed(self, error: ErrorCode, message: str) -> AlterClientQuotasResponse:
        """This answer with every entry that had succeeded failed instead (a write that failed)."""
        return replace(self, entries=tuple(
            replace(e, error=error, error_message=message) if e.error == ErrorCode.NONE else e
            for e in self.entries))

    def to_wire(self, version: int) -> dict[str, Any]:
        """To an AlterClientQuotas response body (the same fields at v0 and v1)."""
        return {"ThrottleTimeMs": self.throttle_time_ms, "Entries": [e.to_wire() for e in self.entries]}

