"""UpdateFeatures (57) v0-v2 for the sidecar's own features (KIP-584).

Requests that name only the broker's features are not taken (:func:`takes`): the broker
decides them. A request naming one of ours is answered here, by every sidecar alike (no
controller: ``docs/features.md``): top-level CLUSTER_AUTHORIZATION_FAILED unless the
principal is in ``super.users``, then INVALID_REQUEST for a request that mixes ours with the
broker's or names a feature twice, then the per-feature rules of
:func:`coordinator.features.check_update`, all or nothing, and one compare-and-set write of
``/feature`` (:class:`~proxy.local.ports.FeaturePort`).

Answer shape: v0-v1 list each feature's result (top level NONE when every update applied,
else the first refusal's code and message); v2 has no results, so its top level carries
the first refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.features import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    FeatureError,
    FeatureUpdate,
)
from protocol.apis import ApiRegistry
from protocol.headers import RequestHeader
from proxy.local.api import Answer, Context, Later, LocalApi, LocalRequest, Respond, Takes

UPDATE_FEATURES = 57


def _names(body: Any) -> list[str]:
    return [str(entry["Feature"] or "") for entry in body["FeatureUpdates"]]


def takes(registry: ApiRegistry) -> Takes:
    """True when the request names a feature of the sidecar's (else the broker answers)."""

    def predicate(header: RequestHeader, request: Mapping[str, Any] | None, context: Context) -> bool:
        features = context.ports.features
        api = registry.api(UPDATE_FEATURES)
        if features is None or header.api_version not in api.versions or request is None:
            return False  # unreadable: the broker answers it as it would
        return any(features.owns(name) for name in _names(request))

    return predicate


def _answer(version: int, names: list[str], error: FeatureError | None,
            results: list[tuple[str, FeatureError | None]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"ThrottleTimeMs": 0, "ErrorCode": error.code if error else 0,
                            "ErrorMessage": error.message if error else None}
    if version < 2:
        if results is None:  # a top-level refusal: every feature carries it (Kafka's createWithErrors)
            results = [(name, error) for name in names]
        body["Results"] = [{"Feature": name, "ErrorCode": e.code if e else 0,
                            "ErrorMessage": e.message if e else None} for name, e in results]
    return body


def handle(request: LocalRequest, context: Context) -> Answer:
    """Answer UpdateFeatures for the sidecar's features."""
    features = context.ports.features
    assert request.body is not None and features is not None
    version, names = request.version, _names(request.body)
    if context.principal not in context.ports.super_users:
        return Respond(body=_answer(version, names, FeatureError(
            code=CLUSTER_AUTHORIZATION_FAILED,
            message=f"{context.principal} may not update features: only super.users may.")))
    brokers = [name for name in names if name and not features.owns(name)]
    if brokers:
        ours = [name for name in names if features.owns(name)]
        return Respond(body=_answer(version, names, FeatureError(code=INVALID_REQUEST, message=(
            f"The request mixes features the sidecar decides ({', '.join(ours)}) with features the "
            f"broker decides ({', '.join(brokers)}); send them in separate requests."))))
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        return Respond(body=_answer(version, names, FeatureError(code=INVALID_REQUEST, message=(
            f"The request contains multiple updates for the same feature: {', '.join(duplicates)}."))))
    updates = [FeatureUpdate.from_wire(version, entry) for entry in request.body["FeatureUpdates"]]
    validate_only = bool(version >= 1 and request.body.get("ValidateOnly"))

    async def answer() -> Respond:
        outcome = await features.update(updates, validate_only=validate_only)
        plan = outcome.plan
        if outcome.write_error is not None:
            error = outcome.write_error
            return Respond(body=_answer(version, names, error, [(name, error) for name, _ in plan.results]))
        return Respond(body=_answer(version, names, plan.error, list(plan.results)))

    return Later(answer=answer)


def entry(registry: ApiRegistry) -> LocalApi:
    """The table entry: UpdateFeatures v0-v2, taken when it names a sidecar feature."""
    api = registry.api(UPDATE_FEATURES)
    assert api.versions.hi is not None
    return LocalApi(key=UPDATE_FEATURES, name=api.name, versions=(api.versions.lo, api.versions.hi),
                    handler=handle, takes=takes(registry))
