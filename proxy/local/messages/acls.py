"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) as typed messages, v0-v3.

Requests become the ACL model's own values (:mod:`proxy.auth.acl.model`): a filter is a
:class:`~proxy.auth.acl.model.BindingFilter`, a creation an
:class:`~proxy.auth.acl.model.AclBinding`, so the model's codes (Kafka's wire codes) are
read once, here. Version 0 has no pattern type: its filters and creations read as LITERAL,
and its answers carry none (``to_wire`` writes the field at every version, as the handlers
and their tests read it; the encoder leaves it out at v0). v2 is flexible; v3 has v2's
fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    BindingFilter,
    EntryFilter,
    Operation,
    PatternFilter,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)


def binding_filter_from_wire(version: int, body: Mapping[str, Any]) -> BindingFilter:
    """A DescribeAcls body or one DeleteAcls ``Filters`` entry (the same fields) as a filter.

    Version 0 has no ``PatternTypeFilter`` and knows only LITERAL patterns: its filter reads
    as LITERAL.
    """
    pattern_type = PatternType.of(int(body["PatternTypeFilter"])) if version >= 1 else PatternType.LITERAL
    pattern = PatternFilter(ResourceType.of(int(body["ResourceTypeFilter"])), body["ResourceNameFilter"],
                            pattern_type)
    entry = EntryFilter(body["PrincipalFilter"], body["HostFilter"], Operation.of(int(body["Operation"])),
                        Permission.of(int(body["PermissionType"])))
    return BindingFilter(pattern, entry)


def _entry_to_wire(entry: AclEntry) -> dict[str, Any]:
    return {"Principal": entry.principal, "Host": entry.host, "Operation": int(entry.operation),
            "PermissionType": int(entry.permission)}


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeAclsRequest:
    """DescribeAcls v0-v3: one filter."""

    filter: BindingFilter

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> DescribeAclsRequest:
        """From a decoded DescribeAcls request body."""
        return cls(filter=binding_filter_from_wire(version, body))


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedResource:
    """One resource pattern and the ACL entries on it (``DescribeAclsResource``)."""

    pattern: ResourcePattern
    acls: tuple[AclEntry, ...]

    def to_wire(self) -> dict[str, Any]:
        """To one ``Resources`` entry (the encoder leaves ``PatternType`` out at v0)."""
        return {"ResourceType": int(self.pattern.resource_type), "ResourceName": self.pattern.name,
                "PatternType": int(self.pattern.pattern_type),
                "Acls": [_entry_to_wire(entry) for entry in self.acls]}


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeAclsResponse:
    """DescribeAcls answer: a top-level error, or the matching ACLs grouped by pattern."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    resources: tuple[DescribedResource, ...] = ()
    throttle_time_ms: int = 0

    def to_wire(self, version: int) -> dict[str, Any]:
        """To a DescribeAcls response body."""
        return {"ThrottleTimeMs": self.throttle_time_ms, "ErrorCode": int(self.error),
                "ErrorMessage": self.error_message, "Resources": [r.to_wire() for r in self.resources]}


@dataclass(frozen=True, kw_only=True, slots=True)
class CreateAclsRequest:
    """CreateAcls v0-v3: the ACLs to create, in request order."""

    creations: tuple[AclBinding, ...]

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> CreateAclsRequest:
        """From a decoded CreateAcls request body (v0 creations are LITERAL)."""
        return cls(creations=tuple(_creation(version, item) for item in body["Creations"]))


def _creation(version: int, item: Mapping[str, Any]) -> AclBinding:
    pattern_type = PatternType.of(int(item["ResourcePatternType"])) if version >= 1 else PatternType.LITERAL
    pattern = ResourcePattern(ResourceType.of(int(item["ResourceType"])), item["ResourceName"], pattern_type)
    entry = AclEntry(item["Principal"], item["Host"], Operation.of(int(item["Operation"])),
                     Permission.of(int(item["PermissionType"])))
    return AclBinding(pattern, entry)


@dataclass(frozen=True, kw_only=True, slots=True)
class AclOutcome:
    """An error code and message: one CreateAcls result (``AclCreationResult``)."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """To one ``Results`` entry."""
        return {"ErrorCode": int(self.error), "ErrorMessage": self.error_message}


@dataclass(frozen=True, kw_only=True, slots=True)
class CreateAclsResponse:
    """CreateAcls answer: one outcome per creation, in request order."""

    results: tuple[AclOutcome, ...]
    throttle_time_ms: int = 0

    def to_wire(self, version: int) -> dict[str, Any]:
        """To a CreateAcls response body."""
        return {"ThrottleTimeMs": self.throttle_time_ms, "Results": [r.to_wire() for r in self.results]}


@dataclass(frozen=True, kw_only=True, slots=True)
class DeleteAclsRequest:
    """DeleteAcls v0-v3: the filters whose matching ACLs to delete."""

    filters: tuple[BindingFilter, ...]

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> DeleteAclsRequest:
        """From a decoded DeleteAcls request body."""
        return cls(filters=tuple(binding_filter_from_wire(version, item) for item in body["Filters"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class DeletedAcl:
    """One ACL a filter matched, and whether its deletion failed (``DeleteAclsMatchingAcl``)."""

    binding: AclBinding
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """To one ``MatchingAcls`` entry (the encoder leaves ``PatternType`` out at v0)."""
        pattern = self.binding.pattern
        return {"ErrorCode": int(self.error), "ErrorMessage": self.error_message,
                "ResourceType": int(pattern.resource_type), "ResourceName": pattern.name,
                "PatternType": int(pattern.pattern_type), **_entry_to_wire(self.binding.entry)}


@dataclass(frozen=True, kw_only=True, slots=True)
class FilterResult:
    """The outcome of one DeleteAcls filter: an error, or the ACLs it matched."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    matching: tuple[DeletedAcl, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """To one ``FilterResults`` entry."""
        return {"ErrorCode": int(self.error), "ErrorMessage": self.error_message,
                "MatchingAcls": [m.to_wire() for m in self.matching]}


@dataclass(frozen=True, kw_only=True, slots=True)
class DeleteAclsResponse:
    """DeleteAcls answer: one result per filter, in request order."""

    filter_results: tuple[FilterResult, ...]
    throttle_time_ms: int = 0

    def to_wire(self, version: int) -> dict[str, Any]:
        """To a DeleteAcls response body."""
        return {"ThrottleTimeMs": self.throttle_time_ms,
                "FilterResults": [r.to_wire() for r in self.filter_results]}
