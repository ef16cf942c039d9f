"""ApiVersions (18) as typed messages, v0-v4.

v1 adds ``ThrottleTimeMs`` to the answer; v3 (KIP-511, flexible) adds the client's software
name and version to the request and the KIP-584 feature fields, all tagged, to the answer.
An answer to a version the sidecar does not speak is always encoded at v0 (KIP-35), whatever
the request's version: :meth:`ApiVersionsResponse.to_wire` is asked at 0 then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ErrorCode

#: ``FinalizedFeaturesEpoch`` when nothing is finalized (the field's default).
NO_EPOCH = -1


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiVersionsRequest:
    """ApiVersions v0-v4: only v3+ names the client's software (``None`` before)."""

    client_software_name: str | None = None
    client_software_version: str | None = None

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> ApiVersionsRequest:
        """From a decoded ApiVersions request body."""
        if version < 3:
            return cls()
        return cls(client_software_name=body["ClientSoftwareName"],
                   client_software_version=body["ClientSoftwareVersion"])


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiVersionRange:
    """One API the answer advertises, with its version range (inclusive)."""

    api_key: int
    min_version: int
    max_version: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SupportedFeature:
    """One feature's supported level range (KIP-584 ``SupportedFeatureKey``)."""

    name: str
    min_version: int
    max_version: int


@dataclass(frozen=True, kw_only=True, slots=True)
class FinalizedFeature:
    """One feature's finalized level (KIP-584 ``FinalizedFeatureKey``)."""

    name: str
    max_version_level: int
    min_version_level: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiVersionsFeatures:
    """The KIP-584 part of an ApiVersions v3+ answer, every field tagged.

    The defaults are the fields' defaults, which the encoder leaves out of the tag section
    (Debian's librdkafka 2.0.2 fails on tagged fields written at their defaults).
    """

    supported: tuple[SupportedFeature, ...] = ()
    finalized_epoch: int = NO_EPOCH
    finalized: tuple[FinalizedFeature, ...] = ()
    zk_migration_ready: bool = False

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> ApiVersionsFeatures:
        """From the feature fields of an ApiVersions answer body (the broker's, or merged
        with the sidecar's by :func:`coordinator.features.merge_api_versions_features`);
        a field absent takes its default."""
        return cls(
            supported=tuple(SupportedFeature(name=f["Name"], min_version=f["MinVersion"],
                                             max_version=f["MaxVersion"])
                            for f in body.get("SupportedFeatures") or ()),
            finalized_epoch=body.get("FinalizedFeaturesEpoch", NO_EPOCH),
            finalized=tuple(FinalizedFeature(name=f["Name"], max_version_level=f["MaxVersionLevel"],
                                             min_version_level=f["MinVersionLevel"])
                            for f in body.get("FinalizedFeatures") or ()),
            zk_migration_ready=bool(body.get("ZkMigrationReady", False)),
        )

    def to_wire(self) -> dict[str, Any]:
        """To the four feature fields of an ApiVersions v3+ answer body."""
        return {
            "SupportedFeatures": [{"Name": f.name, "MinVersion": f.min_version, "MaxVersion": f.max_version}
                                  for f in self.supported],
            "FinalizedFeaturesEpoch": self.finalized_epoch,
            "FinalizedFeatures": [{"Name": f.name, "MaxVersionLevel": f.max_version_level,
                                   "MinVersionLevel": f.min_version_level} for f in self.finalized],
            "ZkMigrationReady": self.zk_migration_ready,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiVersionsResponse:
    """ApiVersions answer: an error, the advertised APIs, and (v3+) the features."""

    error: ErrorCode = ErrorCode.NONE
    api_keys: tuple[ApiVersionRange, ...] = ()
    throttle_time_ms: int = 0
    features: ApiVersionsFeatures = field(default_factory=ApiVersionsFeatures)

    @classmethod
    def advertising(cls, ranges: Iterable[tuple[int, int, int]],
                    features: ApiVersionsFeatures | None = None) -> ApiVersionsResponse:
        """A successful answer advertising ``[(key, min, max)]``."""
        return cls(api_keys=tuple(ApiVersionRange(api_key=k, min_version=lo, max_version=hi)
                                  for k, lo, hi in ranges),
                   features=features if features is not None else ApiVersionsFeatures())

    def to_wire(self, version: int) -> dict[str, Any]:
        """To an ApiVersions response body: ``ThrottleTimeMs`` from v1, the features from v3."""
        body: dict[str, Any] = {
            "ErrorCode": int(self.error),
            "ApiKeys": [{"ApiKey": r.api_key, "MinVersion": r.min_version, "MaxVersion": r.max_version}
                        for r in self.api_keys],
        }
        if version >= 1:
            body["ThrottleTimeMs"] = self.throttle_time_ms
        if version >= 3:
            body.update(self.features.to_wire())
        return body
