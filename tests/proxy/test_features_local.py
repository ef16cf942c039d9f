"""UpdateFeatures' local entry (proxy/local/features.py) without processes: which requests it
takes, by the broker's ApiVersions, and the answer to a feature nobody here knows.

Expected answers are Kafka 4.3's controller's, written out by hand (FeatureControlManager,
QuorumController.updateFeatures): INVALID_UPDATE_VERSION (95), the top level only, no
per-feature results. The broker here either serves UpdateFeatures (a Kafka broker) or does
not (Tansu).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from coordinator.features import GROUP_VERSION, FeatureSnapshot, FeatureUpdate, SupportedRange
from protocol.apis import UPDATE_FEATURES, ApiRegistry
from protocol.headers import RequestHeader
from proxy.local import features
from proxy.local.api import Context, LocalRequest, Respond
from proxy.local.ports import BrokerEntry, FeatureOutcome, Ports, UpstreamInfo

REGISTRY = ApiRegistry()
UPGRADE, SAFE = 1, 2
KAFKA = {UPDATE_FEATURES: (0, 2)}
TANSU: dict[int, tuple[int, int]] = {}  # no UpdateFeatures at all


class _Upstream:
    def __init__(self, api_versions: dict[int, tuple[int, int]] | None) -> None:
        self.info = None if api_versions is None else UpstreamInfo(api_versions=api_versions, api_versions_body={})


class _Brokers:
    def broker_entries(self, listener: str) -> tuple[BrokerEntry, list[BrokerEntry]]:
        return BrokerEntry(111, "127.0.0.1", 9092), []


class _Features:
    """The sidecar's features: group.version supported and finalized at 1."""

    snapshot = FeatureSnapshot(supported={GROUP_VERSION: SupportedRange(0, 1)}, finalized={GROUP_VERSION: 1})

    def owns(self, feature: str) -> bool:
        return feature == GROUP_VERSION or feature.startswith("ksidecar.")

    async def update(self, updates: Sequence[FeatureUpdate], *, validate_only: bool) -> FeatureOutcome:
        raise AssertionError("nothing is written for a refused request")


def _context(broker: dict[int, tuple[int, int]] | None, principal: str = "User:admin") -> Context:
    ports = Ports(upstream=_Upstream(broker), brokers=_Brokers(), features=_Features(),
                  super_users=frozenset({"User:admin"}))
    return Context(listener="PLAINTEXT", peer=("127.0.0.1", 5), ports=ports, principal=principal)


def _request(version: int, *updates: tuple[str, int, int]) -> LocalRequest:
    entries = [{"Feature": f, "MaxVersionLevel": level, "UpgradeType": kind, "AllowDowngrade": kind != UPGRADE}
               for f, level, kind in updates]
    header = RequestHeader(api_key=UPDATE_FEATURES, api_version=version, correlation_id=1, client_id="t",
                           header_version=2, size=0)
    return LocalRequest(header=header, body={"timeoutMs": 1000, "FeatureUpdates": entries, "ValidateOnly": False},
                        raw=b"")


def _takes(request: LocalRequest, context: Context) -> bool:
    takes = features.entry(REGISTRY).takes
    assert takes is not None
    return takes(request.header, request.body, context)


def _answer(request: LocalRequest, context: Context) -> dict[str, Any]:
    answer = features.handle(request, context)
    assert isinstance(answer, Respond) and isinstance(answer.body, dict)
    return answer.body


FAILED = "The update failed for all features since the following feature had an error: "


@pytest.mark.parametrize("version", [0, 1, 2])
def test_an_unknown_feature_before_a_broker_without_the_api_gets_kafkas_answer(version: int) -> None:
    request, context = _request(version, ("share.version", 1, UPGRADE)), _context(TANSU)
    assert _takes(request, context)  # else only the KIP-35 empty answer, which kafka-python waits out
    body = _answer(request, context)
    assert (body["ErrorCode"], body["ErrorMessage"]) == (95, FAILED + "Invalid update version 1 for feature "
                                                         "share.version. Local controller 111 does not support "
                                                         "this feature.")
    assert body.get("Results", []) == []  # Kafka lists no results beside a top-level error


def test_a_broker_that_serves_the_api_decides_its_own_features_and_mixing_is_refused() -> None:
    context = _context(KAFKA)
    assert not _takes(_request(2, ("share.version", 1, UPGRADE)), context)
    assert not _takes(_request(2, ("share.version", 1, UPGRADE)), _context(None))  # not known yet: forwarded
    mixed = _request(2, (GROUP_VERSION, 0, SAFE), ("metadata.version", 20, UPGRADE))
    assert _takes(mixed, context)
    body = _answer(mixed, context)
    assert body["ErrorCode"] == 42 and "send them in separate requests" in body["ErrorMessage"]


def test_without_the_api_at_the_broker_every_name_not_ours_is_unknown() -> None:
    body = _answer(_request(1, (GROUP_VERSION, 0, SAFE), ("metadata.version", 20, UPGRADE)), _context(TANSU))
    assert (body["ErrorCode"], body["ErrorMessage"], body["Results"]) == (
        95, FAILED + "Invalid update version 20 for feature metadata.version. Local controller 111 does not "
        "support this feature.", [])


def test_an_unknown_name_in_the_sidecars_namespace_and_a_disable() -> None:
    context = _context(KAFKA)
    request = _request(1, ("ksidecar.nothing", 0, SAFE))
    assert _takes(request, context)
    assert _answer(request, context)["ErrorMessage"] == (
        FAILED + "Invalid update version 0 for feature ksidecar.nothing. Feature ksidecar.nothing not found.")


def test_authorization_comes_first() -> None:
    body = _answer(_request(1, ("share.version", 1, UPGRADE)), _context(TANSU, principal="User:bob"))
    assert body["ErrorCode"] == 31
