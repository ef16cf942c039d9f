"""UpdateFeatures (57) as typed messages, v0-v2 (KIP-584).

Each requested change is the feature rules' own :class:`~coordinator.features.FeatureUpdate`,
which reads v0's ``AllowDowngrade`` flag and v1+'s ``UpgradeType`` alike. v1 adds
``ValidateOnly`` to the request; v2 drops the per-feature ``Results`` from the answer, so
its top-level error is all a client learns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.features import FeatureUpdate
from protocol.errors import ErrorCode

#: ``timeoutMs`` when a request leaves it out (the field's default).
DEFAULT_TIMEOUT_MS = 60_000


@dataclass(frozen=True, kw_only=True, slots=True)
class UpdateFeaturesRequest:
    """UpdateFeatures v0-v2: the changes, in request order."""

    updates: tuple[FeatureUpdate, ...]
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    #: v1+: check the changes, write nothing (always False at v0).
    validate_only: bool = False

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> UpdateFeaturesRequest:
        """From a decoded UpdateFeatures request body."""
        return cls(updates=tuple(FeatureUpdate.from_wire(version, entry) for entry in body["FeatureUpdates"]),
                   timeout_ms=body["timeoutMs"], validate_only=version >= 1 and bool(body["ValidateOnly"]))

    @property
    def features(self) -> list[str]:
        """The name of each feature the request changes, in request order (repeats kept)."""
        return [update.feature for update in self.updates]


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureResult:
    """The outcome for one feature of the request (``UpdatableFeatureResult``)."""

    feature: str
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class UpdateFeaturesResponse:
    """UpdateFeatures answer: a top-level error and (v0-v1 only) one result per feature."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    results: tuple[FeatureResult, ...] = ()
    throttle_time_ms: int = 0

    def to_wire(self, version: int) -> dict[str, Any]:
        """To an UpdateFeatures response body; ``Results`` only before v2."""
        body: dict[str, Any] = {"ThrottleTimeMs": self.throttle_time_ms, "ErrorCode": int(self.error),
                                "ErrorMessage": self.error_message}
        if version < 2:
            body["Results"] = [{"Feature": r.feature, "ErrorCode": int(r.error), "ErrorMessage": r.error_message}
                               for r in self.results]
        return body
