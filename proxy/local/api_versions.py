"""ApiVersions (18), answered by the sidecar.

The advertised ranges are the intersection of what the broker said on the control
connection with what the sidecar can parse, plus the APIs the sidecar answers itself
(PROTOCOL_NOTES.md, "ApiVersions"). A version above ours gets UNSUPPORTED_VERSION with a
v0 body that lists ApiVersions' own range, as a Kafka broker answers, so a client can
retry at a version we speak. Tagged fields are written only when not default: Debian's
librdkafka 2.0.2 fails on default-valued ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.features import merge_api_versions_features
from protocol.apis import API_VERSIONS, DEFAULT_REGISTRY, ApiRegistry
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import decode, encode
from proxy.local.api import Answer, Context, LocalApi, LocalRequest, Respond
from proxy.local.messages.api_versions import (
    ApiVersionRange,
    ApiVersionsFeatures,
    ApiVersionsRequest,
    ApiVersionsResponse,
)

#: KIP-511: the pattern client software names and versions must match.
SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
#: ApiVersions answers kept per listener (one per client software name/version and version).
MAX_CACHED_ANSWERS = 64


def advertised_ranges(
    registry: ApiRegistry,
    upstream: Mapping[int, tuple[int, int]] | None,
    local_keys: Iterable[int] | Mapping[int, tuple[int, int]],
    *,
    forward_unparsed: bool = False,
    names_brokers: frozenset[int] = frozenset(),
) -> list[tuple[int, int, int]]:
    """``[(key, min, max)]``: upstream ∩ parseable, plus the locally answered keys.

    With ``forward_unparsed`` (``sidecar.unparsed.request.policy=forward``) the broker's
    whole range of an API is offered, and keys the sidecar does not know at all, except for
    the APIs in ``names_brokers`` (their answers name brokers: they stay at the versions the
    sidecar can rewrite, or clients would learn the brokers' own addresses). Without upstream knowledge (control connection
    not yet up) every parseable API is offered; a request the broker then refuses is
    answered as unsupported.
    """
    result: dict[int, tuple[int, int]] = {}
    # A mapping gives each local API's served range; a plain set of keys serves all we parse.
    local = dict(local_keys) if isinstance(local_keys, Mapping) else {key: None for key in local_keys}
    for api in registry:
        ours_lo, ours_hi = api.versions.lo, api.versions.hi
        assert ours_hi is not None
        if api.key in local:
            served = local[api.key]
            result[api.key] = served if served is not None else (ours_lo, ours_hi)
            continue
        if upstream is None:
            result[api.key] = (ours_lo, ours_hi)
            continue
        if api.key not in upstream:
            continue
        if forward_unparsed and api.key not in names_brokers:
            result[api.key] = upstream[api.key]
            continue
        lo, hi = max(ours_lo, upstream[api.key][0]), min(ours_hi, upstream[api.key][1])
        if lo <= hi:
            result[api.key] = (lo, hi)
    if forward_unparsed and upstream is not None:
        for key, span in upstream.items():
            if registry.get(key) is None and key not in local:
                result[key] = span
    return [(key, lo, hi) for key, (lo, hi) in sorted(result.items())]


def handle_api_versions(
    registry: ApiRegistry,
    version: int,
    body: bytes | memoryview,
    ranges: list[tuple[int, int, int]],
    features: Mapping[str, Any] | None = None,
) -> tuple[int, bytes]:
    """Answer one ApiVersions request: ``(response version, response body)``.

    ``features`` holds the KIP-584 fields as an ApiVersions answer body carries them (the
    broker's answer, merged with the sidecar's own features).
    """
    api = registry.api(API_VERSIONS)
    if version not in api.versions:
        own = next(((lo, hi) for key, lo, hi in ranges if key == API_VERSIONS), (0, 0))
        refusal = ApiVersionsResponse(error=ErrorCode.UNSUPPORTED_VERSION, api_keys=(
            ApiVersionRange(api_key=API_VERSIONS, min_version=own[0], max_version=own[1]),))
        return 0, encode(api.response, 0, refusal.to_wire(0))
    invalid = ApiVersionsResponse(error=ErrorCode.INVALID_REQUEST)
    try:
        request = ApiVersionsRequest.from_wire(version, decode(api.request, version, body))
    except ProtocolError:
        return version, encode(api.response, version, invalid.to_wire(version))
    if version >= 3 and software(request) is None:
        return version, encode(api.response, version, invalid.to_wire(version))
    response = ApiVersionsResponse.advertising(
        ranges, ApiVersionsFeatures.from_wire(features) if features is not None else None)
    return version, encode(api.response, version, response.to_wire(version))


def software(request: ApiVersionsRequest) -> tuple[str, str] | None:
    """KIP-511's ``(name, version)`` of the client's software, if both match the pattern."""
    name, version = request.client_software_name, request.client_software_version
    if SOFTWARE_PATTERN.fullmatch(name or "") and SOFTWARE_PATTERN.fullmatch(version or ""):
        assert name is not None and version is not None
        return name, version
    return None


class ApiVersionsApi:
    """The ApiVersions local API of one listener.

    Answers depend only on (version, request body) and what the broker said (the
    upstream's ``info``, replaced whole on each refresh): built once, reused (bounded).
    """

    def __init__(self, registry: ApiRegistry, served: Callable[[], Mapping[int, tuple[int, int]]], *,
                 forward_unparsed: bool = False, names_brokers: frozenset[int] = frozenset()) -> None:
        self.registry = registry
        self._served = served
        self.forward_unparsed = forward_unparsed
        self.names_brokers = names_brokers
        self._info: object = None
        self._features: object = None
        self._answers: dict[tuple[int, bytes], tuple[int, bytes]] = {}

    def entry(self) -> LocalApi:
        """The table entry: every version is answered here (UNSUPPORTED_VERSION included)."""
        api = self.registry.api(API_VERSIONS)
        assert api.versions.hi is not None
        return LocalApi(key=API_VERSIONS, name=api.name, versions=(api.versions.lo, api.versions.hi),
                        handler=self.handle, any_version=True, decode=False)

    def handle(self, request: LocalRequest, context: Context) -> Answer:
        """Answer one ApiVersions request."""
        info = context.ports.upstream.info
        # KIP-584: the sidecar's own features (a new snapshot on every /feature change) are
        # merged with the broker's; either changing makes a new answer.
        snapshot = context.ports.features.snapshot if context.ports.features is not None else None
        if info is not self._info or snapshot is not self._features:
            self._info, self._features, self._answers = info, snapshot, {}
        key = (request.version, request.raw)
        answer = self._answers.get(key)
        if answer is None:
            ranges = advertised_ranges(self.registry, info.api_versions if info else None, self._served(),
                                       forward_unparsed=self.forward_unparsed, names_brokers=self.names_brokers)
            features: Mapping[str, Any] | None = info.api_versions_body if info is not None else None
            if snapshot is not None:
                hidden = snapshot.disabled_keys()  # gated off below their feature level
                ranges = [r for r in ranges if r[0] not in hidden]
                features = merge_api_versions_features(features, snapshot)
            answer = handle_api_versions(self.registry, request.version, request.raw, ranges, features)
            if len(self._answers) < MAX_CACHED_ANSWERS:
                self._answers[key] = answer
        named = client_software(request.version, request.raw)
        if named is not None:
            context.client_software = named
        version, body = answer
        return Respond(body=body, version=version)


def client_software(version: int, body: bytes) -> tuple[str, str] | None:
    """KIP-511's ``(ClientSoftwareName, ClientSoftwareVersion)`` of a v3+ request, if valid."""
    if version < 3:
        return None
    try:
        # A version above ours is read as our highest: the fields have not moved since v3.
        decoded = decode(DEFAULT_REGISTRY.api(API_VERSIONS).request, min(version, 4), body)
    except ProtocolError:
        return None
    return software(ApiVersionsRequest.from_wire(min(version, 4), decoded))
