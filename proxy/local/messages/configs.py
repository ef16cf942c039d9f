"""DescribeConfigs (32) v1-v4 and IncrementalAlterConfigs (44) v0-v1 as typed messages,
for the resources the sidecar answers itself: GROUP configs (ConfigResource type 32, KIP-848
and KIP-932) of the groups its embedded coordinator serves.

v1 of DescribeConfigs adds ``IncludeSynonyms`` and each config's source and synonyms; v3
adds ``IncludeDocumentation``, each config's type and documentation; v4 is flexible.
IncrementalAlterConfigs v1 is flexible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.group_configs import ConfigEntry
from protocol.errors import ErrorCode

#: ``ConfigResource.Type.GROUP``: a group's configs (not the ACL resource type 3).
GROUP_RESOURCE = 32


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedResource:
    """One resource a DescribeConfigs asks about (``ConfigurationKeys`` ``None``: every key)."""

    resource_type: int
    name: str
    keys: tuple[str, ...] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeConfigsRequest:
    """DescribeConfigs v1-v4."""

    resources: tuple[DescribedResource, ...]
    include_synonyms: bool = False
    include_documentation: bool = False

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> DescribeConfigsRequest:
        """From a decoded request body."""
        return cls(
            resources=tuple(DescribedResource(
                resource_type=r["ResourceType"], name=r["ResourceName"],
                keys=None if r["ConfigurationKeys"] is None else tuple(r["ConfigurationKeys"]))
                for r in body["Resources"]),
            include_synonyms=version >= 1 and bool(body["IncludeSynonyms"]),
            include_documentation=version >= 3 and bool(body["IncludeDocumentation"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeResult:
    """The answer for one resource."""

    resource_type: int
    name: str
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    #: The configs, as :mod:`coordinator.group_configs` describes them.
    configs: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeConfigsResponse:
    """DescribeConfigs v1-v4: a result per resource, in request order."""

    results: tuple[DescribeResult, ...]
    throttle_time_ms: int = 0

    def to_wire(self, version: int) -> dict[str, Any]:
        """The response body's field values."""
        return {"ThrottleTimeMs": self.throttle_time_ms, "Results": [{
            "ErrorCode": int(r.error), "ErrorMessage": r.error_message, "ResourceType": r.resource_type,
            "ResourceName": r.name, "Configs": [{
                "Name": c.name, "Value": c.value, "ReadOnly": c.read_only, "ConfigSource": int(c.config_source),
                "IsSensitive": c.is_sensitive,
                "Synonyms": [{"Name": s.name, "Value": s.value, "Source": int(s.source)} for s in c.synonyms],
                "ConfigType": int(c.config_type), "Documentation": c.documentation,
            } for c in r.configs]} for r in self.results]}


@dataclass(frozen=True, kw_only=True, slots=True)
class AlteredConfig:
    """One change an IncrementalAlterConfigs asks for: ``operation`` 0 SET, 1 DELETE, 2
    APPEND, 3 SUBTRACT."""

    name: str
    operation: int
    value: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class AlteredResource:
    """One resource an IncrementalAlterConfigs changes."""

    resource_type: int
    name: str
    configs: tuple[AlteredConfig, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class IncrementalAlterConfigsRequest:
    """IncrementalAlterConfigs v0-v1."""

    resources: tuple[AlteredResource, ...]
    validate_only: bool = False

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> IncrementalAlterConfigsRequest:
        """From a decoded request body."""
        del version  # v1 only changes the encoding
        return cls(resources=tuple(AlteredResource(
            resource_type=r["ResourceType"], name=r["ResourceName"],
            configs=tuple(AlteredConfig(name=c["Name"], operation=c["ConfigOperation"], value=c["Value"])
                          for c in r["Configs"])) for r in body["Resources"]),
            validate_only=bool(body["ValidateOnly"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class AlterResult:
    """The outcome for one resource."""

    resource_type: int
    name: str
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class IncrementalAlterConfigsResponse:
    """IncrementalAlterConfigs v0-v1: a result per resource, in request order."""

    results: tuple[AlterResult, ...]
    throttle_time_ms: int = 0

    def to_wire(self, version: int) -> dict[str, Any]:
        """The response body's field values."""
        del version
        return {"ThrottleTimeMs": self.throttle_time_ms, "Responses": [{
            "ErrorCode": int(r.error), "ErrorMessage": r.error_message, "ResourceType": r.resource_type,
            "ResourceName": r.name} for r in self.results]}
