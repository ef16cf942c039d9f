"""Kafka's request-to-ACL table: every path exists in our schemas, and whole requests decide as Kafka does."""

from __future__ import annotations

import uuid

import pytest

from protocol.apis import DEFAULT_REGISTRY
from protocol.schema import decode, encode
from protocol.spec import FieldSpec
from proxy.auth.acl.evaluate import AclIndex, Authorizer, RequestFacts, Verdict
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.auth.acl.requests import (
    OPEN,
    TABLE,
    OnDeny,
    Path,
    Phase,
    checks_for,
    paths_for,
    values_at,
)

HOST = "10.0.0.1"


def _field(fields: tuple[FieldSpec, ...], name: str, version: int) -> FieldSpec | None:
    for f in fields:
        if f.name == name and f.present_in(version):
            return f
    return None


def _resolve(fields: tuple[FieldSpec, ...], path: Path, version: int) -> FieldSpec | None:
    spec: FieldSpec | None = None
    for step in path.steps:
        spec = _field(fields, step.removesuffix("[]"), version)
        if spec is None:
            return None
        assert step.endswith("[]") == spec.is_array, (path, step)
        fields = spec.fields
    return spec


def test_every_request_path_exists_in_the_schemas_at_every_version_it_is_used() -> None:
    checked = 0
    for key in TABLE:
        api = DEFAULT_REGISTRY.get(key)
        if api is None:
            continue  # controller-only APIs our table has no schema for
        hi = api.versions.hi if api.versions.hi is not None else api.versions.lo
        for version in range(api.versions.lo, hi + 1):
            for check in checks_for(key, version):
                # Names are read where they are; a condition's field may be absent at a
                # version (it then reads as its default: no TransactionalId before v3).
                for c in (check, check.instead):
                    if c is not None and c.names is not None:
                        message = api.request if c.phase is Phase.REQUEST else api.response
                        assert _resolve(message.fields, c.names, version) is not None, \
                            f"{api.name} v{version}: no {c.phase.value} field {c.names}"
                        checked += 1
                if check.when is not None and check.when.path is not None:
                    present = _resolve(api.request.fields, check.when.path, version) is not None
                    assert present or version < 4 or check.when.default is not None or \
                        check.when.test in ("not_null", "is_null"), (api.name, version, check.when)
            for check in TABLE[key]:
                if check.applies_at(version) and check.by_id and check.names is not None:
                    spec = _resolve(api.request.fields, check.names, version)
                    assert spec is not None and spec.element_type == "uuid", (api.name, version)
    assert checked > 200


def test_every_client_api_is_in_the_table_or_open() -> None:
    missing = [api.name for api in DEFAULT_REGISTRY if api.key not in TABLE and api.key not in OPEN
               and "broker" in api.request.listeners and api.name != "BrokerMetadata"]
    assert missing == []


def binding(rtype: ResourceType, name: str, principal: str, op: Operation, perm: Permission = Permission.ALLOW,
            pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AclEntry(principal, host, op, perm))


ALICE = Authorizer(AclIndex([
    binding(ResourceType.TOPIC, "orders-", "User:alice", Operation.WRITE, pattern=PatternType.PREFIXED),
    binding(ResourceType.GROUP, "billing", "User:alice", Operation.READ),
    binding(ResourceType.TOPIC, "orders-eu", "User:alice", Operation.READ),
]), super_users=frozenset({"User:admin"}))


def decide(principal: str, key: int, version: int, body: object, **kw: object) -> Verdict:
    return ALICE.decide(RequestFacts(principal=principal, host=HOST, api_key=key, api_version=version, body=body,
                                     **kw))  # type: ignore[arg-type]


def wire_body(key: int, version: int, body: dict[str, object]) -> object:
    """The body as the data path would have it: encoded and decoded with our schemas."""
    api = DEFAULT_REGISTRY.api(key)
    return decode(api.request, version, encode(api.request, version, body))


def produce(*topics: str, txn: str | None = None) -> object:
    return wire_body(0, 9, {"TransactionalId": txn, "Acks": -1, "TimeoutMs": 1000, "TopicData": [
        {"Name": t, "PartitionData": [{"Index": 0, "Records": None}]} for t in topics]})


def test_produce_refuses_per_topic_and_whole_for_a_foreign_transactional_id() -> None:
    assert decide("User:alice", 0, 9, produce("orders-eu")).allowed
    verdict = decide("User:alice", 0, 9, produce("orders-eu", "payroll"))
    assert verdict.refuse is None
    [part] = verdict.parts
    assert (part.on_deny, part.error, part.values, part.path) == (OnDeny.PER_RESOURCE, 29, frozenset({"payroll"}),
                                                                   Path("TopicData[].Name"))
    assert [(d.resource_type, d.name, d.operation) for d in verdict.denials] == [
        (ResourceType.TOPIC, "payroll", Operation.WRITE)]
    assert decide("User:alice", 0, 9, produce("orders-eu", txn="tx")).refuse == 53
    assert decide("User:admin", 0, 9, produce("payroll", txn="tx")).allowed


def test_produce_v13_names_topics_by_id_and_unknown_ids_fail_closed() -> None:
    known, unknown = uuid.uuid4(), uuid.uuid4()
    body = {"TransactionalId": None, "TopicData": [{"TopicId": known}, {"TopicId": unknown}]}
    verdict = decide("User:alice", 0, 13, body, topic_names={known: "orders-eu"})
    assert [p.values for p in verdict.parts] == [{unknown}]


def test_group_apis_refuse_the_whole_request() -> None:
    join = {"GroupId": "billing"}
    assert decide("User:alice", 11, 5, join).allowed
    assert decide("User:bob", 11, 5, join).refuse == 30
    commit = {"GroupId": "billing", "Topics": [{"Name": "orders-eu"}, {"Name": "orders-us"}]}
    verdict = decide("User:alice", 8, 8, commit)
    assert [(p.error, p.values) for p in verdict.parts] == [(29, frozenset({"orders-us"}))]  # Write does not imply Read
    assert decide("User:bob", 8, 8, commit).refuse == 30


def test_fetch_follower_needs_cluster_action_consumer_needs_read() -> None:
    consumer = {"ReplicaId": -1, "Topics": [{"Topic": "orders-eu"}, {"Topic": "orders-us"}]}
    assert [p.values for p in decide("User:alice", 1, 12, consumer).parts] == [{"orders-us"}]
    assert decide("User:alice", 1, 12, {**consumer, "ReplicaId": 3}).refuse == 31
    assert decide("User:alice", 1, 15, {"Topics": []}).allowed  # ReplicaState absent: a consumer


def test_metadata_names_filters_and_auto_creation() -> None:
    named = {"Topics": [{"Name": "orders-eu"}, {"Name": "payroll"}], "AllowAutoTopicCreation": True}
    verdict = decide("User:alice", 3, 12, named)
    by = {p.on_deny: p for p in verdict.parts}
    assert by[OnDeny.PER_RESOURCE].values == {"payroll"}
    # Neither Cluster Create nor Topic Create: auto-creation must be turned off.
    assert by[OnDeny.NO_AUTO_CREATE].values == {"orders-eu", "payroll"}
    assert [c.phase for c in verdict.response_filters] == [Phase.RESPONSE]
    assert ALICE.permitted("User:alice", HOST, verdict.response_filters[0], ["orders-eu", "payroll"]) == ["orders-eu"]
    everything = decide("User:alice", 3, 12, {"Topics": None, "AllowAutoTopicCreation": False})
    assert everything.refuse is None and not everything.parts and everything.response_filters


def test_create_topics_cluster_create_or_per_topic_create() -> None:
    auth = Authorizer(AclIndex([binding(ResourceType.TOPIC, "new-", "User:a", Operation.CREATE,
                                        pattern=PatternType.PREFIXED)]))
    body = {"Topics": [{"Name": "new-1"}, {"Name": "old"}]}
    verdict = auth.decide(RequestFacts(principal="User:a", host=HOST, api_key=19, api_version=5, body=body))
    assert [(p.values, p.error) for p in verdict.parts] == [(frozenset({"old"}), 29)]
    cluster = Authorizer(AclIndex([binding(ResourceType.CLUSTER, "kafka-cluster", "User:a", Operation.CREATE)]))
    assert cluster.decide(RequestFacts(principal="User:a", host=HOST, api_key=19, api_version=5, body=body)).allowed


def test_describe_configs_by_resource_type() -> None:
    body = {"Resources": [{"ResourceType": 2, "ResourceName": "orders-eu"},
                          {"ResourceType": 4, "ResourceName": "1"},
                          {"ResourceType": 32, "ResourceName": "billing"}]}
    verdict = decide("User:alice", 32, 4, body)
    assert sorted((p.resource_type.name, sorted(p.values)) for p in verdict.parts) == [
        ("CLUSTER", ["1"]), ("GROUP", ["billing"]), ("TOPIC", ["orders-eu"])]


def test_init_producer_id_idempotent_needs_write_somewhere() -> None:
    assert decide("User:alice", 22, 4, {"TransactionalId": None}).allowed
    assert decide("User:bob", 22, 4, {"TransactionalId": None}).refuse == 31
    assert decide("User:alice", 22, 4, {"TransactionalId": "tx"}).refuse == 53


@pytest.mark.parametrize(("key", "code"), [(29, 31), (30, 31), (31, 31), (49, 31), (57, 31), (38, 65)])
def test_admin_apis_need_the_cluster(key: int, code: int) -> None:
    assert decide("User:alice", key, 1, {}).refuse == code
    assert decide("User:admin", key, 1, {}).allowed


def test_unknown_keys_fail_closed_open_keys_pass() -> None:
    assert decide("User:bob", 9999, 0, {}).refuse == 31
    assert decide("User:bob", 18, 3, {}).allowed
    assert Authorizer(AclIndex(), open_keys=frozenset({9999})).decide(
        RequestFacts(principal="User:bob", host=HOST, api_key=9999, api_version=0)).allowed


def test_picked_values_decide_like_decoded_bodies() -> None:
    picked = {Path("TransactionalId"): [], Path("TopicData[].Name"): ["orders-eu", "payroll"]}
    verdict = ALICE.decide(RequestFacts(principal="User:alice", host=HOST, api_key=0, api_version=9, picked=picked))
    assert [p.values for p in verdict.parts] == [{"payroll"}]
    assert paths_for(0, 9) == {Path("TransactionalId"), Path("TopicData[].Name")}


def test_values_at_walks_nested_arrays() -> None:
    body = {"Groups": [{"GroupId": "g", "Topics": [{"Name": "a"}, {"Name": "b"}]}, {"GroupId": "h", "Topics": None}]}
    assert values_at(body, Path("Groups[].Topics[].Name")) == ["a", "b"]
    assert values_at(body, Path("Groups[].GroupId")) == ["g", "h"]
    assert values_at({"Groups": ["x", None]}, Path("Groups[]")) == ["x"]
