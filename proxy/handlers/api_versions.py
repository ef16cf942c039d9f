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
from collections.abc import Iterable, Mapping
from typing import Any

from protocol.apis import API_VERSIONS, ApiRegistry
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import decode, encode

#: KIP-511: the pattern client software names and versions must match.
SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
#: ApiVersions fields a sidecar copies from the broker's answer (KIP-584 features).
FEATURE_FIELDS = ("SupportedFeatures", "FinalizedFeaturesEpoch", "FinalizedFeatures", "ZkMigrationReady")


def advertised_ranges(
    registry: ApiRegistry,
    upstream: Mapping[int, tuple[int, int]] | None,
    local_keys: Iterable[int],
) -> list[tuple[int, int, int]]:
    """``[(key, min, max)]``: upstream ∩ parseable, plus the locally answered keys.

    Without upstream knowledge (control connection not yet up) every parseable API is
    offered; a request the broker then refuses is answered as unsupported.
    """
    result: dict[int, tuple[int, int]] = {}
    local = set(local_keys)
    for api in registry:
        ours_lo, ours_hi = api.versions.lo, api.versions.hi
        assert ours_hi is not None
        if api.key in local:
            result[api.key] = (ours_lo, ours_hi)
            continue
        if upstream is None:
            result[api.key] = (ours_lo, ours_hi)
            continue
        if api.key not in upstream:
            continue
        lo, hi = max(ours_lo, upstream[api.key][0]), min(ours_hi, upstream[api.key][1])
        if lo <= hi:
            result[api.key] = (lo, hi)
    return [(key, lo, hi) for key, (lo, hi) in sorted(result.items())]


def handle_api_versions(
    registry: ApiRegistry,
    version: int,
    body: bytes | memoryview,
    ranges: list[tuple[int, int, int]],
    features: Mapping[str, Any] | None = None,
) -> tuple[int, bytes]:
    """Answer one ApiVersions request: ``(response version, response body)``."""
    api = registry.api(API_VERSIONS)
    if version not in api.versions:
        own = next(((lo, hi) for key, lo, hi in ranges if key == API_VERSIONS), (0, 0))
        return 0, encode(api.response, 0, {
            "ErrorCode": int(ErrorCode.UNSUPPORTED_VERSION),
            "ApiKeys": [{"ApiKey": API_VERSIONS, "MinVersion": own[0], "MaxVersion": own[1]}],
        })
    try:
        request = decode(api.request, version, body)
    except ProtocolError:
        return version, encode(api.response, version, {"ErrorCode": int(ErrorCode.INVALID_REQUEST), "ApiKeys": []})
    if version >= 3:
        for name in ("ClientSoftwareName", "ClientSoftwareVersion"):
            if not SOFTWARE_PATTERN.fullmatch(request[name] or ""):
                return version, encode(
                    api.response, version, {"ErrorCode": int(ErrorCode.INVALID_REQUEST), "ApiKeys": []}
                )
    response: dict[str, Any] = {
        "ErrorCode": 0,
        "ApiKeys": [{"ApiKey": k, "MinVersion": lo, "MaxVersion": hi} for k, lo, hi in ranges],
        "ThrottleTimeMs": 0,
    }
    for name in FEATURE_FIELDS:
        if features is not None and name in features:
            response[name] = features[name]
    return version, encode(api.response, version, response)
