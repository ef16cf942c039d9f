"""DescribeClientQuotas / AlterClientQuotas semantics for the ip entity (sans-IO)."""

from __future__ import annotations

from typing import Any

from protocol.errors import ErrorCode
from quotas import admin
from quotas.admin import MIXED_MESSAGE, Route, Write, effective_rate
from quotas.messages import AlterClientQuotasRequest, DescribeClientQuotasRequest

SNAPSHOT: dict[str | None, float] = {None: 50.0, "10.0.0.1": 5.0, "10.0.0.2": 7.0}


# The core takes and returns typed messages; these tests state its rules on Kafka's wire
# shapes, so each call goes through the messages' converters (v1: the current version).


def route_describe(body: dict[str, Any], broker_has_quotas: bool) -> Route:
    return admin.route_describe(DescribeClientQuotasRequest.from_wire(1, body), broker_has_quotas)


def route_alter(body: dict[str, Any]) -> Route:
    return admin.route_alter(AlterClientQuotasRequest.from_wire(1, body))


def describe(body: dict[str, Any], snapshot: dict[str | None, float]) -> dict[str, Any]:
    return admin.describe(DescribeClientQuotasRequest.from_wire(1, body), snapshot).to_wire(1)


def plan_alter(body: dict[str, Any], *, can_write: bool) -> tuple[dict[str, Any], list[Write]]:
    response, writes = admin.plan_alter(AlterClientQuotasRequest.from_wire(1, body), can_write=can_write)
    return response.to_wire(1), writes


def comp(entity_type: str, match_type: int, match: str | None = None) -> dict[str, Any]:
    return {"EntityType": entity_type, "MatchType": match_type, "Match": match}


def names(body: dict[str, Any]) -> list[tuple[str | None, float]]:
    return [(e["Entity"][0]["EntityName"], e["Values"][0]["Value"]) for e in body["Entries"]]


def test_routes() -> None:
    assert route_describe({"Components": [comp("ip", 2)]}, True) is Route.LOCAL
    assert route_describe({"Components": [comp("user", 2)]}, True) is Route.FORWARD
    assert route_describe({"Components": []}, False) is Route.LOCAL
    assert route_describe({"Components": []}, True) is Route.FORWARD
    ip_entry = {"Entity": [{"EntityType": "ip", "EntityName": "1.2.3.4"}], "Ops": []}
    user_entry = {"Entity": [{"EntityType": "user", "EntityName": "alice"}], "Ops": []}
    assert route_alter({"Entries": [user_entry]}) is Route.FORWARD
    assert route_alter({"Entries": [user_entry, ip_entry]}) is Route.LOCAL


def test_match_types() -> None:
    assert names(describe({"Components": [comp("ip", 0, "10.0.0.1")]}, SNAPSHOT)) == [("10.0.0.1", 5.0)]
    assert names(describe({"Components": [comp("ip", 0, "10.0.0.9")]}, SNAPSHOT)) == []
    assert names(describe({"Components": [comp("ip", 1)]}, SNAPSHOT)) == [(None, 50.0)]
    assert names(describe({"Components": [comp("ip", 2)]}, SNAPSHOT)) == [("10.0.0.1", 5.0), ("10.0.0.2", 7.0)]
    assert names(describe({"Components": [], "Strict": False}, SNAPSHOT)) == [
        (None, 50.0), ("10.0.0.1", 5.0), ("10.0.0.2", 7.0),
    ]
    assert names(describe({"Components": [], "Strict": True}, SNAPSHOT)) == []


def test_describe_errors() -> None:
    mixed = describe({"Components": [comp("ip", 2), comp("user", 2)]}, SNAPSHOT)
    assert (mixed["ErrorCode"], mixed["ErrorMessage"], mixed["Entries"]) == (42, MIXED_MESSAGE, None)
    assert describe({"Components": [comp("ip", 0, "not-an-ip")]}, SNAPSHOT)["ErrorCode"] == 42
    assert describe({"Components": [comp("ip", 7)]}, SNAPSHOT)["ErrorCode"] == 42
    assert describe({"Components": [comp("ip", 2), comp("ip", 1)]}, SNAPSHOT)["ErrorCode"] == 42
    assert describe({"Components": [comp("ip", 2), comp("planet", 2)]}, SNAPSHOT)["ErrorCode"] == 42


def entry(name: str | None, *ops: tuple[str, float, bool], extra: tuple[str, str] | None = None) -> dict[str, Any]:
    entity = [{"EntityType": "ip", "EntityName": name}]
    if extra:
        entity.append({"EntityType": extra[0], "EntityName": extra[1]})
    return {"Entity": entity, "Ops": [{"Key": k, "Value": v, "Remove": r} for k, v, r in ops]}


def test_alter_plans_writes_per_valid_entry() -> None:
    request = {
        "Entries": [
            entry("10.0.0.3", ("connection_creation_rate", 100.0, False)),
            entry(None, ("connection_creation_rate", 0.0, True)),
            entry("::1", ("connection_creation_rate", 3.0, False)),
            entry("bad-ip", ("connection_creation_rate", 1.0, False)),
            entry("10.0.0.4", ("producer_byte_rate", 1.0, False)),
            entry("10.0.0.5", ("connection_creation_rate", 1.5, False)),
            entry("10.0.0.6", ("connection_creation_rate", 1.0, False), extra=("user", "bob")),
        ],
        "ValidateOnly": False,
    }
    body, writes = plan_alter(request, can_write=True)
    codes = [e["ErrorCode"] for e in body["Entries"]]
    assert codes == [0, 0, 0, 42, 42, 42, 42]
    assert body["Entries"][6]["ErrorMessage"] == MIXED_MESSAGE
    assert writes == [Write("10.0.0.3", 100.0, False), Write(None, None, True), Write("::1", 3.0, False)]


def test_validate_only_and_standalone() -> None:
    request = {"Entries": [entry("10.0.0.3", ("connection_creation_rate", 9.0, False))], "ValidateOnly": True}
    body, writes = plan_alter(request, can_write=True)
    assert body["Entries"][0]["ErrorCode"] == 0 and writes == []
    body, writes = plan_alter({**request, "ValidateOnly": False}, can_write=False)
    assert body["Entries"][0]["ErrorCode"] == int(ErrorCode.INVALID_REQUEST) and writes == []
    assert "without ZooKeeper" in body["Entries"][0]["ErrorMessage"]


def test_effective_rate_precedence() -> None:
    dynamic: dict[str | None, float] = {"1.1.1.1": 1.0, None: 9.0}
    configured = {"1.1.1.1": 2.0, "2.2.2.2": 3.0}
    assert effective_rate("1.1.1.1", dynamic, 20.0, configured) == 1.0  # ZooKeeper exact
    assert effective_rate("2.2.2.2", dynamic, 20.0, configured) == 3.0  # config exact
    assert effective_rate("3.3.3.3", dynamic, 20.0, configured) == 9.0  # ZooKeeper default
    assert effective_rate("3.3.3.3", {}, 20.0, configured) == 20.0  # config default
    assert effective_rate("3.3.3.3", {}, None, {}) is None
