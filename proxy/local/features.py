"""UpdateFeatures (57) v0-v2 for the sidecar's own features (KIP-584).

Requests that name only the broker's features are not taken (:func:`takes`) when the
broker serves UpdateFeatures at that version: the broker decides them. A request naming
one of ours, or any request the broker could not answer (Tansu serves no UpdateFeatures),
is answered here, by every sidecar alike (no controller: ``docs/features.md``): top-level
CLUSTER_AUTHORIZATION_FAILED unless the principal is in ``super.users``, then
INVALID_REQUEST for a request that mixes ours with the broker's (only where the broker
serves the API) or names a feature twice, then INVALID_UPDATE_VERSION for a feature this
sidecar neither supports nor has finalized, as Kafka's controller answers it
(:func:`coordinator.features.refuse_unknown`), then the per-feature rules of
:func:`coordinator.features.check_update`, all or nothing, and one compare-and-set write of
``/feature`` (:class:`~proxy.local.ports.FeaturePort`).

Answer shape: v0-v1 list each feature's result (top level NONE when every update applied,
else the first refusal's code and message); v2 has no results, so its top level carries
the first refusal. An unknown feature's refusal has Kafka 4.x's shape at every version:
the top level only, no results.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.features import FeatureError, refuse_unknown
from protocol.apis import UPDATE_FEATURES, ApiRegistry
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from proxy.local.api import Answer, Context, Later, LocalApi, LocalRequest, Respond, Takes
from proxy.local.messages.features import (
    FeatureResult,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)


def takes(registry: ApiRegistry) -> Takes:
    """True when the request names a feature of the sidecar's (else the broker answers)."""

    def predicate(header: RequestHeader, request: Mapping[str, Any] | None, context: Context) -> bool:
        features = context.ports.features
        api = registry.api(UPDATE_FEATURES)
        if features is None or header.api_version not in api.versions or request is None:
            return False  # unreadable: the broker answers it as it would
        if not broker_serves(context, header.api_version):
            return True  # else nobody would: the client gets only the KIP-35 empty answer
        asked = UpdateFeaturesRequest.from_wire(header.api_version, request)
        return any(features.owns(name) for name in asked.features)

    return predicate


def broker_serves(context: Context, version: int) -> bool:
    """True when the broker serves UpdateFeatures at ``version`` (as the control connection
    last learned; not known yet: true, the router forwards then too)."""
    info = context.ports.upstream.info
    if info is None:
        return True
    span = info.api_versions.get(UPDATE_FEATURES)
    return span is not None and span[0] <= version <= span[1]


def _node_id(context: Context) -> int:
    """This sidecar's ``broker.id`` (the "local controller" of Kafka's messages)."""
    me, _ = context.ports.brokers.broker_entries(context.listener)
    return me.node_id


def _code(error: FeatureError | None) -> ErrorCode:
    return ErrorCode.NONE if error is None else ErrorCode(error.code)


def _response(names: list[str], error: FeatureError | None,
              results: Iterable[tuple[str, FeatureError | None]] | None = None) -> UpdateFeaturesResponse:
    """The answer: ``error`` at the top level, and per feature ``results`` (``()``: none) or,
    for a top-level refusal (``None``), ``error`` on every feature (Kafka's ``createWithErrors``)."""
    if results is None:
        results = [(name, error) for name in names]
    return UpdateFeaturesResponse(
        error=_code(error), error_message=error.message if error else None,
        results=tuple(FeatureResult(feature=name, error=_code(e), error_message=e.message if e else None)
                      for name, e in results))


def handle(request: LocalRequest, context: Context) -> Answer:
    """Answer UpdateFeatures for the sidecar's features."""
    features = context.ports.features
    assert request.body is not None and features is not None
    version = request.version
    asked = UpdateFeaturesRequest.from_wire(version, request.body)
    names = asked.features
    if context.principal not in context.ports.super_users:
        return Respond(body=_response(names, FeatureError(
            code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            message=f"{context.principal} may not update features: only super.users may.")).to_wire(version))
    brokers = [name for name in names if name and not features.owns(name)]
    if brokers and broker_serves(context, version):
        ours = [name for name in names if features.owns(name)]
        return Respond(body=_response(names, FeatureError(code=ErrorCode.INVALID_REQUEST, message=(
            f"The request mixes features the sidecar decides ({', '.join(ours)}) with features the "
            f"broker decides ({', '.join(brokers)}); send them in separate requests."))).to_wire(version))
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        return Respond(body=_response(names, FeatureError(code=ErrorCode.INVALID_REQUEST, message=(
            f"The request contains multiple updates for the same feature: {', '.join(duplicates)}."
        ))).to_wire(version))
    known = set(features.snapshot.supported) | set(features.snapshot.finalized)
    if any(name and name not in known for name in names):
        unknown = refuse_unknown(asked.updates, known=known, node_id=_node_id(context))
        return Respond(body=_response(names, unknown, results=()).to_wire(version))

    async def answer() -> Respond:
        outcome = await features.update(asked.updates, validate_only=asked.validate_only)
        plan = outcome.plan
        if outcome.write_error is not None:
            error = outcome.write_error
            return Respond(body=_response(names, error, [(name, error) for name, _ in plan.results]).to_wire(version))
        return Respond(body=_response(names, plan.error, plan.results).to_wire(version))

    return Later(answer=answer)


def entry(registry: ApiRegistry) -> LocalApi:
    """The table entry: UpdateFeatures v0-v2, taken when it names a sidecar feature."""
    api = registry.api(UPDATE_FEATURES)
    assert api.versions.hi is not None
    return LocalApi(key=UPDATE_FEATURES, name=api.name, versions=(api.versions.lo, api.versions.hi),
                    handler=handle, takes=takes(registry))
