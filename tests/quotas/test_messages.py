"""DescribeClientQuotas / AlterClientQuotas typed messages against Kafka's specs, v0 and v1.

Requests go through our codec first (encoded from field values, decoded again), so
``from_wire`` reads what a handler is handed; responses are compared with bodies written out
by hand from ``protocol/specs/kafka/*ClientQuotas*.json`` and encoded at each version.
"""

from __future__ import annotations

from typing import Any

import pytest

from protocol.apis import ALTER_CLIENT_QUOTAS, DEFAULT_REGISTRY, DESCRIBE_CLIENT_QUOTAS
from protocol.errors import ErrorCode
from protocol.schema import decode, encode, struct_defaults
from quotas.messages import (
    AlterationResult,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ComponentFilter,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntityPart,
    QuotaAlteration,
    QuotaEntry,
    QuotaOp,
)


def wire_request(key: int, version: int, **fields: Any) -> Any:
    spec = DEFAULT_REGISTRY.api(key).request
    body = dict(struct_defaults(spec.fields, version))
    body.update(fields)
    return decode(spec, version, encode(spec, version, body))


def encodes(key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    encode(DEFAULT_REGISTRY.api(key).response, version, body)
    return body


@pytest.mark.parametrize("version", [0, 1])
def test_describe_request(version: int) -> None:
    body = wire_request(DESCRIBE_CLIENT_QUOTAS, version, Strict=True, Components=[
        {"EntityType": "ip", "MatchType": 0, "Match": "10.0.0.1"},
        {"EntityType": "ip", "MatchType": 1, "Match": None}])
    request = DescribeClientQuotasRequest.from_wire(version, body)
    assert request == DescribeClientQuotasRequest(strict=True, components=(
        ComponentFilter(entity_type="ip", match_type=0, match="10.0.0.1"),
        ComponentFilter(entity_type="ip", match_type=1, match=None)))
    assert request.entity_types == ["ip", "ip"]


@pytest.mark.parametrize("version", [0, 1])
def test_describe_response(version: int) -> None:
    response = DescribeClientQuotasResponse(entries=(
        QuotaEntry(entity=(EntityPart(entity_type="ip", name=None),), values=(("connection_creation_rate", 50.0),)),
        QuotaEntry(entity=(EntityPart(entity_type="ip", name="::1"),), values=(("connection_creation_rate", 3.0),)),
    ))
    assert encodes(DESCRIBE_CLIENT_QUOTAS, version, response.to_wire(version)) == {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Entries": [
            {"Entity": [{"EntityType": "ip", "EntityName": None}],
             "Values": [{"Key": "connection_creation_rate", "Value": 50.0}]},
            {"Entity": [{"EntityType": "ip", "EntityName": "::1"}],
             "Values": [{"Key": "connection_creation_rate", "Value": 3.0}]},
        ]}
    # A refusal carries a null entry list (Entries is nullable in every version).
    refusal = DescribeClientQuotasResponse.refusal(ErrorCode.INVALID_REQUEST, "mixed")
    assert encodes(DESCRIBE_CLIENT_QUOTAS, version, refusal.to_wire(version)) == {
        "ThrottleTimeMs": 0, "ErrorCode": 42, "ErrorMessage": "mixed", "Entries": None}


@pytest.mark.parametrize("version", [0, 1])
def test_alter_request(version: int) -> None:
    body = wire_request(ALTER_CLIENT_QUOTAS, version, ValidateOnly=True, Entries=[
        {"Entity": [{"EntityType": "ip", "EntityName": "10.0.0.3"}],
         "Ops": [{"Key": "connection_creation_rate", "Value": 100.0, "Remove": False},
                 {"Key": "connection_creation_rate", "Value": 0.0, "Remove": True}]},
        {"Entity": [{"EntityType": "user", "EntityName": None}, {"EntityType": "client-id", "EntityName": "c"}],
         "Ops": []}])
    request = AlterClientQuotasRequest.from_wire(version, body)
    assert request == AlterClientQuotasRequest(validate_only=True, entries=(
        QuotaAlteration(entity=(EntityPart(entity_type="ip", name="10.0.0.3"),), ops=(
            QuotaOp(key="connection_creation_rate", value=100.0, remove=False),
            QuotaOp(key="connection_creation_rate", value=0.0, remove=True))),
        QuotaAlteration(entity=(EntityPart(entity_type="user", name=None),
                                EntityPart(entity_type="client-id", name="c")), ops=()),
    ))
    assert [e.entity_types for e in request.entries] == [["ip"], ["user", "client-id"]]


@pytest.mark.parametrize("version", [0, 1])
def test_alter_response_and_a_failed_write(version: int) -> None:
    ok = AlterationResult(entity=(EntityPart(entity_type="ip", name="10.0.0.3"),))
    bad = AlterationResult(entity=(EntityPart(entity_type="ip", name="x"),), error=ErrorCode.INVALID_REQUEST,
                           error_message="'x' is not a valid IP address")
    response = AlterClientQuotasResponse(entries=(ok, bad))
    assert encodes(ALTER_CLIENT_QUOTAS, version, response.to_wire(version)) == {"ThrottleTimeMs": 0, "Entries": [
        {"ErrorCode": 0, "ErrorMessage": None, "Entity": [{"EntityType": "ip", "EntityName": "10.0.0.3"}]},
        {"ErrorCode": 42, "ErrorMessage": "'x' is not a valid IP address",
         "Entity": [{"EntityType": "ip", "EntityName": "x"}]},
    ]}
    # A failed ZooKeeper write fails what had succeeded and keeps the refusals as they were.
    failed = response.failed(ErrorCode.UNKNOWN_SERVER_ERROR, "ZooKeeper write failed: gone")
    assert [(e["ErrorCode"], e["ErrorMessage"]) for e in failed.to_wire(version)["Entries"]] == [
        (-1, "ZooKeeper write failed: gone"), (42, "'x' is not a valid IP address")]
    assert response.entries[0].error is ErrorCode.NONE  # the original is unchanged
