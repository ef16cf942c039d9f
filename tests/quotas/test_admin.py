"""DescribeClientQuotas / AlterClientQuotas semantics (sans-IO): the ip entity, and user and
client-id entities when the sidecar enforces them (expected answers written from Kafka's
``ClientQuotasImage`` and ``ClientQuotaControlManager``)."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.errors import ErrorCode
from quotas import admin
from quotas.admin import (
    MIXED_MESSAGE,
    NO_ZOOKEEPER_MESSAGE,
    ClientWrite,
    Route,
    Write,
    effective_rate,
)
from quotas.clients import DEFAULT, ClientQuotas, Entity
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


# -- user and client-id quotas, when the sidecar enforces them ----------------------------

CLIENT_SNAPSHOT = ClientQuotas({
    Entity(user="alice"): {"producer_byte_rate": 100.0, "request_percentage": 50.0},
    Entity(user=DEFAULT): {"producer_byte_rate": 10.0},
    Entity(user="alice", client_id="p1"): {"consumer_byte_rate": 7.0},
    Entity(user=DEFAULT, client_id=DEFAULT): {"consumer_byte_rate": 1.0},
    Entity(client_id="p1"): {"producer_byte_rate": 3.0},
    Entity(client_id=DEFAULT): {"producer_byte_rate": 2.0},
})


def describe_clients(body: dict[str, Any], ips: dict[str | None, float] | None = None) -> dict[str, Any]:
    request = DescribeClientQuotasRequest.from_wire(1, body)
    return admin.describe_clients(request, CLIENT_SNAPSHOT, ips).to_wire(1)


def entities(body: dict[str, Any]) -> list[tuple[tuple[str, str | None], ...]]:
    return [tuple((p["EntityType"], p["EntityName"]) for p in e["Entity"]) for e in body["Entries"]]


def test_routes_when_the_sidecar_enforces_client_quotas() -> None:
    user_only = DescribeClientQuotasRequest.from_wire(1, {"Components": [comp("user", 2)]})
    assert admin.route_describe(user_only, True, clients_local=True) is Route.LOCAL
    assert admin.route_describe(user_only, True) is Route.FORWARD
    user_entry = {"Entity": [{"EntityType": "user", "EntityName": "alice"}], "Ops": []}
    alter = AlterClientQuotasRequest.from_wire(1, {"Entries": [user_entry]})
    assert admin.route_alter(alter, clients_local=True) is Route.LOCAL
    assert admin.route_alter(alter) is Route.FORWARD


U, C = "user", "client-id"


def test_describe_clients_match_types() -> None:
    # entries come sorted: no user first, then the default user, then names (same for client ids)
    # specified matches any entity with that part, the default one included (Kafka)
    assert entities(describe_clients({"Components": [comp("user", 2)]})) == [
        ((U, None),), ((U, None), (C, None)), ((U, "alice"),), ((U, "alice"), (C, "p1"))]
    assert entities(describe_clients({"Components": [comp("user", 2)], "Strict": True})) == [
        ((U, None),), ((U, "alice"),)]
    assert entities(describe_clients({"Components": [comp("user", 0, "alice")]})) == [
        ((U, "alice"),), ((U, "alice"), (C, "p1"))]
    assert entities(describe_clients({"Components": [comp("user", 0, "alice")], "Strict": True})) == [
        ((U, "alice"),)]
    assert entities(describe_clients({"Components": [comp("user", 1)], "Strict": True})) == [((U, None),)]
    assert entities(describe_clients({"Components": [comp("client-id", 1)]})) == [
        ((C, None),), ((U, None), (C, None))]
    assert entities(describe_clients({"Components": [comp("user", 0, "alice"), comp("client-id", 2)]})) == [
        ((U, "alice"), (C, "p1"))]
    assert entities(describe_clients({"Components": [comp("user", 0, "nobody")]})) == []
    assert entities(describe_clients({"Components": [], "Strict": True})) == []


def test_describe_clients_values_and_everything() -> None:
    body = describe_clients({"Components": [comp("user", 0, "alice")], "Strict": True})
    assert body["ErrorCode"] == 0
    assert body["Entries"][0]["Values"] == [
        {"Key": "producer_byte_rate", "Value": 100.0}, {"Key": "request_percentage", "Value": 50.0}]
    everything = describe_clients({"Components": []}, {None: 50.0, "10.0.0.1": 5.0})
    assert len(everything["Entries"]) == 8
    assert entities(everything)[-2:] == [(("ip", None),), (("ip", "10.0.0.1"),)]
    ip_only = describe_clients({"Components": [comp("ip", 0, "10.0.0.1")]}, {"10.0.0.1": 5.0})
    assert names(ip_only) == [("10.0.0.1", 5.0)]


@pytest.mark.parametrize(("components", "code", "message"), [
    ([comp("", 2)], 42, "Invalid empty entity type."),
    ([comp("user", 2), comp("user", 1)], 42, "Entity type user cannot appear more than once in the filter."),
    ([comp("client-id", 2), comp("planet", 2)], 35, "Unsupported entity type planet"),
    ([comp("user", 0)], 42, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([comp("user", 1, "x")], 42, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([comp("user", 2, "x")], 42, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([comp("user", 7)], 42, "Unknown match type 7"),
    ([comp("user", 2), comp("ip", 2)], 42, MIXED_MESSAGE),
    ([comp("ip", 2), comp("client-id", 1)], 42, MIXED_MESSAGE),
])
def test_describe_clients_refusals(components: list[dict[str, Any]], code: int, message: str) -> None:
    body = describe_clients({"Components": components})
    assert (body["ErrorCode"], body["ErrorMessage"], body["Entries"]) == (code, message, None)


def alteration(parts: list[tuple[str, str | None]], *ops: tuple[str, float, bool]) -> dict[str, Any]:
    return {"Entity": [{"EntityType": t, "EntityName": n} for t, n in parts],
            "Ops": [{"Key": k, "Value": v, "Remove": r} for k, v, r in ops]}


def plan_clients(entries: list[dict[str, Any]], *, validate_only: bool = False, can_write: bool = True
                 ) -> tuple[list[tuple[int, str | None]], list[Write | ClientWrite]]:
    request = AlterClientQuotasRequest.from_wire(1, {"Entries": entries, "ValidateOnly": validate_only})
    response, writes = admin.plan_alter_clients(request, can_write=can_write)
    return [(e["ErrorCode"], e["ErrorMessage"]) for e in response.to_wire(1)["Entries"]], writes


def test_alter_clients_plans_one_write_per_entity() -> None:
    results, writes = plan_clients([
        alteration([(U, "alice")], ("producer_byte_rate", 1048576.0, False), ("request_percentage", 0.0, True)),
        alteration([(C, "p1"), (U, None)], ("request_percentage", 12.5, False)),
        alteration([(C, None)], ("controller_mutation_rate", 0.5, False), ("SCRAM-SHA-256", 0.0, True)),
        alteration([("ip", "10.0.0.3")], ("connection_creation_rate", 9.0, False)),
        alteration([(U, "bob")]),
    ])
    assert results == [(0, None)] * 5
    assert writes == [
        ClientWrite(entity=Entity(user="alice"),
                    changes=(("producer_byte_rate", 1048576.0), ("request_percentage", None))),
        ClientWrite(entity=Entity(user=DEFAULT, client_id="p1"), changes=(("request_percentage", 12.5),)),
        # removing a key that is no quota key (a SCRAM credential) changes nothing
        ClientWrite(entity=Entity(client_id=DEFAULT), changes=(("controller_mutation_rate", 0.5),)),
        Write("10.0.0.3", 9.0, False),
    ]


ALICE = [(U, "alice")]
ALICE_TEXT = "ClientQuotaEntity(entries={user=alice})"


@pytest.mark.parametrize(("entry", "message"), [
    (alteration(ALICE, ("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)),
     f"Duplicate quota key producer_byte_rate not updating quota for this entity {ALICE_TEXT}"),
    (alteration([]), "Invalid empty client quota entity"),
    (alteration([(U, "a"), (U, "b")]), "Invalid client quota entity, duplicate entity entry user"),
    (alteration([(U, "a"), ("group", "g")]), "Unhandled client quota entity type: group"),
    (alteration([(U, "")]), "Empty user not supported"),
    (alteration([(C, "")]), "Empty client-id not supported"),
    (alteration([(U, "a"), ("ip", "1.2.3.4")]), MIXED_MESSAGE),
    (alteration(ALICE, ("connection_creation_rate", 5.0, False)),
     "Invalid configuration key connection_creation_rate"),
    (alteration(ALICE, ("producer_bytes_rate", 5.0, False)), "Invalid configuration key producer_bytes_rate"),
    (alteration(ALICE, ("producer_byte_rate", 0.0, False)), "Quota producer_byte_rate must be greater than 0"),
    (alteration(ALICE, ("request_percentage", -1.0, False)), "Quota request_percentage must be greater than 0"),
    (alteration(ALICE, ("consumer_byte_rate", 1.5, False)), "consumer_byte_rate cannot be a fractional value."),
    (alteration(ALICE, ("consumer_byte_rate", 1e19, False)),
     "Proposed value for consumer_byte_rate is too large for a LONG."),
    (alteration(ALICE, ("request_percentage", float("inf"), False)),
     "Quota request_percentage must be a finite number"),
])
def test_alter_clients_refusals(entry: dict[str, Any], message: str) -> None:
    results, writes = plan_clients([entry])
    assert results == [(42, message)] and writes == []


def test_alter_clients_values_kafka_accepts() -> None:
    results, writes = plan_clients([
        alteration(ALICE, ("producer_byte_rate", 1000000.0000001, False)),  # within 1e-6 of whole
        alteration([(C, "x")], ("request_percentage", 0.001, False)),  # DOUBLE: any positive
        alteration([(U, "b")], ("producer_byte_rate", 2.0**63, False)),  # Java compares as doubles
    ])
    assert results == [(0, None)] * 3 and len(writes) == 3


def test_alter_clients_duplicate_entity_and_modes() -> None:
    results, writes = plan_clients([
        alteration([(U, "a"), (C, "p")], ("producer_byte_rate", 1.0, False)),
        alteration([(C, "p"), (U, "a")], ("producer_byte_rate", 2.0, False)),
    ])
    assert results[0] == (0, None)
    assert results[1] == (42, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=p, user=a})")
    assert writes == [ClientWrite(entity=Entity(user="a", client_id="p"), changes=(("producer_byte_rate", 1.0),))]
    entry = alteration(ALICE, ("producer_byte_rate", 1.0, False))
    assert plan_clients([entry], validate_only=True) == ([(0, None)], [])
    assert plan_clients([entry], can_write=False) == ([(42, NO_ZOOKEEPER_MESSAGE)], [])
    # an invalid value after a valid one fails the whole entry (Kafka: all or nothing)
    bad = alteration(ALICE, ("producer_byte_rate", 1.0, False), ("consumer_byte_rate", 0.5, False))
    assert plan_clients([bad])[1] == []
