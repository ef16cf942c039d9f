"""What the sidecar does with a request the ACLs refuse in part or whole (proxy/auth/acl/enforce.py).

Expected answers are written out by hand from Kafka's behaviour (KafkaApis): refused
partitions answered TOPIC_AUTHORIZATION_FAILED (29) beside the broker's own answer, a
refused group GROUP_AUTHORIZATION_FAILED (30) at the top, listings left without what the
principal may not describe.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import ProtocolError
from protocol.schema import decode, encode
from proxy.auth.acl.enforce import (
    ALLOWED,
    MIRRORS,
    WHOLE,
    Answer,
    Enforcer,
    Forward,
    Refuse,
)
from proxy.auth.acl.evaluate import AclIndex, Authorizer, RequestFacts
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.auth.acl.requests import TABLE, OnDeny

ALICE = "User:alice"
HOST = "10.0.0.1"


def allow(rtype: ResourceType, name: str, op: Operation, *, prefixed: bool = False,
          principal: str = ALICE) -> AclBinding:
    pattern = ResourcePattern(rtype, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL)
    return AclBinding(pattern, AclEntry(principal, "*", op, Permission.ALLOW))


AUTHORIZER = Authorizer(AclIndex([
    allow(ResourceType.TOPIC, "orders-", Operation.WRITE, prefixed=True),
    allow(ResourceType.TOPIC, "orders-", Operation.READ, prefixed=True),
    allow(ResourceType.GROUP, "billing", Operation.READ),
]))


def run(key: int, version: int, body: dict[str, Any], *, expects_response: bool = True,
        topic_names: dict[Any, str] | None = None) -> tuple[Any, Enforcer]:
    api = DEFAULT_REGISTRY.api(key)
    raw = encode(api.request, version, body)
    enforcer = Enforcer(api, version)
    facts = RequestFacts(principal=ALICE, host=HOST, api_key=key, api_version=version,
                         topic_names=topic_names or {})
    return enforcer.enforce(AUTHORIZER, facts, raw, expects_response=expects_response), enforcer


def produce(*topics: str) -> dict[str, Any]:
    return {"TransactionalId": None, "Acks": -1, "TimeoutMs": 1000, "TopicData": [
        {"Name": t, "PartitionData": [{"Index": 0, "Records": None}, {"Index": 1, "Records": None}]}
        for t in topics]}


def test_allowed_produce_passes_unchanged() -> None:
    outcome, _ = run(0, 9, produce("orders-eu", "orders-us"))
    assert outcome is ALLOWED


def test_refused_topic_is_removed_and_answered_per_partition() -> None:
    outcome, enforcer = run(0, 9, produce("orders-eu", "payroll"))
    action = outcome.action
    assert isinstance(action, Forward) and action.body is not None and action.patch is not None
    forwarded = decode(enforcer.api.request, 9, action.body)
    assert [t["Name"] for t in forwarded["TopicData"]] == ["orders-eu"]
    broker = {"Responses": [{"Name": "orders-eu", "PartitionResponses": [
        {"Index": 0, "ErrorCode": 0, "BaseOffset": 7}, {"Index": 1, "ErrorCode": 0, "BaseOffset": 3}]}],
        "ThrottleTimeMs": 0}
    patched = action.patch(broker)
    by_topic = {t["Name"]: [(p["Index"], p["ErrorCode"]) for p in t["PartitionResponses"]]
                for t in patched["Responses"]}
    assert by_topic == {"orders-eu": [(0, 0), (1, 0)], "payroll": [(0, 29), (1, 29)]}
    # The patched answer is a valid ProduceResponse v9.
    encode(enforcer.api.response, 9, patched)
    assert [(d.resource_type, d.name, d.operation) for d in outcome.denials] == [
        (ResourceType.TOPIC, "payroll", Operation.WRITE)]


def test_nothing_left_is_answered_locally() -> None:
    outcome, enforcer = run(0, 9, produce("payroll"))
    assert isinstance(outcome.action, Answer)
    body = outcome.action.body
    assert [(t["Name"], [(p["Index"], p["ErrorCode"], p["BaseOffset"]) for p in t["PartitionResponses"]])
            for t in body["Responses"]] == [("payroll", [(0, 29, -1), (1, 29, -1)])]
    encode(enforcer.api.response, 9, body)


def test_acks_zero_refusal_closes() -> None:
    body = produce("payroll")
    body["Acks"] = 0
    outcome, _ = run(0, 9, body, expects_response=False)
    assert isinstance(outcome.action, Refuse)


def test_transactional_id_refuses_every_partition() -> None:
    body = produce("orders-eu")
    body["TransactionalId"] = "tx-1"
    outcome, enforcer = run(0, 9, body)
    assert isinstance(outcome.action, Answer)
    errors = [p["ErrorCode"] for t in outcome.action.body["Responses"] for p in t["PartitionResponses"]]
    assert errors == [53, 53]  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    encode(enforcer.api.response, 9, outcome.action.body)


def test_fetch_by_topic_id() -> None:
    eu, secret = uuid.uuid4(), uuid.uuid4()
    body = {"ReplicaState": {"ReplicaId": -1}, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 1 << 20,
            "IsolationLevel": 0, "SessionId": 0, "SessionEpoch": -1, "Topics": [
                {"TopicId": t, "Partitions": [{"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1000}]}
                for t in (eu, secret)], "ForgottenTopicsData": [], "RackId": ""}
    outcome, enforcer = run(1, 15, body, topic_names={eu: "orders-eu", secret: "payroll"})
    action = outcome.action
    assert isinstance(action, Forward) and action.body is not None and action.patch is not None
    assert [t["TopicId"] for t in decode(enforcer.api.request, 15, action.body)["Topics"]] == [eu]
    patched = action.patch({"ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "Responses": []})
    [entry] = patched["Responses"]
    assert entry["TopicId"] == secret
    [part] = entry["Partitions"]
    assert (part["PartitionIndex"], part["ErrorCode"], part["HighWatermark"]) == (0, 29, -1)
    encode(enforcer.api.response, 15, patched)


def test_unknown_topic_id_is_refused() -> None:
    body = {"ReplicaState": {"ReplicaId": -1}, "MaxWaitMs": 500, "MinBytes": 1, "Topics": [
        {"TopicId": uuid.uuid4(), "Partitions": [{"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1}]}]}
    outcome, _ = run(1, 15, body)
    assert isinstance(outcome.action, Answer)


def test_metadata_all_topics_is_filtered_and_auto_create_cleared() -> None:
    outcome, enforcer = run(3, 12, {"Topics": [{"Name": "orders-eu"}, {"Name": "payroll"}],
                                    "AllowAutoTopicCreation": True})
    action = outcome.action
    assert isinstance(action, Forward) and action.body is not None and action.patch is not None
    forwarded = decode(enforcer.api.request, 12, action.body)
    assert [t["Name"] for t in forwarded["Topics"]] == ["orders-eu"]
    assert forwarded["AllowAutoTopicCreation"] is False  # alice may not Create
    patched = action.patch({"Brokers": [], "ClusterId": "c", "ControllerId": 1, "Topics": [
        {"ErrorCode": 0, "Name": "orders-eu", "Partitions": []}]})
    assert [(t["Name"], t["ErrorCode"]) for t in patched["Topics"]] == [("orders-eu", 0), ("payroll", 29)]

    listing, _ = run(3, 12, {"Topics": None, "AllowAutoTopicCreation": False})
    action = listing.action
    assert isinstance(action, Forward) and action.body is None and action.patch is not None
    patched = action.patch({"Brokers": [], "Topics": [
        {"ErrorCode": 0, "Name": n, "Partitions": []} for n in ("orders-eu", "payroll", "orders-us")]})
    assert [t["Name"] for t in patched["Topics"]] == ["orders-eu", "orders-us"]


def test_group_refused_at_the_top() -> None:
    outcome, enforcer = run(11, 5, {"GroupId": "other", "SessionTimeoutMs": 10000, "RebalanceTimeoutMs": 10000,
                                    "MemberId": "", "GroupInstanceId": None, "ProtocolType": "consumer",
                                    "Protocols": []})
    assert isinstance(outcome.action, Answer)
    assert outcome.action.body["ErrorCode"] == 30
    encode(enforcer.api.response, 5, outcome.action.body)


def test_offset_fetch_v8_nested_topics() -> None:
    body = {"Groups": [{"GroupId": "billing", "Topics": [
        {"Name": "orders-eu", "PartitionIndexes": [0]}, {"Name": "payroll", "PartitionIndexes": [0, 1]}]}],
        "RequireStable": False}
    outcome, enforcer = run(9, 8, body)
    action = outcome.action
    assert isinstance(action, Forward) and action.patch is not None and action.body is not None
    forwarded = decode(enforcer.api.request, 8, action.body)
    assert [t["Name"] for t in forwarded["Groups"][0]["Topics"]] == ["orders-eu"]
    patched = action.patch({"Groups": [{"GroupId": "billing", "ErrorCode": 0, "Topics": [
        {"Name": "orders-eu", "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 5, "ErrorCode": 0}]}]}]})
    [group] = patched["Groups"]
    assert [(t["Name"], [(p["PartitionIndex"], p["CommittedOffset"], p["ErrorCode"]) for p in t["Partitions"]])
            for t in group["Topics"]] == [("orders-eu", [(0, 5, 0)]), ("payroll", [(0, -1, 29), (1, -1, 29)])]
    encode(enforcer.api.response, 8, patched)


def test_every_mirror_fits_the_schemas() -> None:
    """Each mirror's request and response arrays exist wherever its check applies (a
    whole-refusal mirror: at every version)."""
    checked = 0
    for (key, path), level in MIRRORS.items():
        api = DEFAULT_REGISTRY.api(key)
        every = list(range(api.versions.lo, (api.versions.hi or 0) + 1))
        versions = every if path.startswith(WHOLE) else [v for v in every
                    if any(str(c.names) == path or (c.instead is not None and str(c.instead.names) == path)
                           for c in TABLE[key] if c.applies_at(v) and c.on_deny is not OnDeny.FILTER)]
        assert versions, f"no check of key {key} reads {path}"
        for version in versions:
            request_fields = {f.name: f for f in api.request.fields if f.present_in(version)}
            response_fields = {f.name: f for f in api.response.fields if f.present_in(version)}
            assert level.request in request_fields, (key, version, level.request)
            assert level.response in response_fields, (key, version, level.response)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("key", sorted({k for k, _ in MIRRORS}))
def test_whole_refusal_encodes_at_every_version(key: int) -> None:
    """An error answer built for an empty request encodes at every version we parse."""
    api = DEFAULT_REGISTRY.api(key)
    for version in range(api.versions.lo, (api.versions.hi or 0) + 1):
        body = Enforcer(api, version).error_response({}, 31)
        encode(api.response, version, body)


def test_whole_refusal_answers_every_element() -> None:
    """CreateAcls refused on the Cluster: one CLUSTER_AUTHORIZATION_FAILED result per
    creation, as Kafka answers (a client counts them)."""
    api = DEFAULT_REGISTRY.api(30)
    creation = {"ResourceType": 2, "ResourceName": "t", "ResourcePatternType": 3, "Principal": "User:x",
                "Host": "*", "Operation": 3, "PermissionType": 3}
    body = Enforcer(api, 3).error_response({"Creations": [creation, creation]}, 31)
    assert [(r["ErrorCode"], r["ErrorMessage"]) for r in body["Results"]] == [(31, "Cluster authorization failed.")] * 2
    scram = DEFAULT_REGISTRY.api(51)
    body = Enforcer(scram, 0).error_response({"Deletions": [{"Name": "bob", "Mechanism": 1}], "Upsertions": [
        {"Name": "carol", "Mechanism": 2, "Iterations": 4096, "Salt": b"s", "SaltedPassword": b"p"}]}, 31)
    assert [(r["User"], r["ErrorCode"]) for r in body["Results"]] == [("bob", 31), ("carol", 31)]


@pytest.mark.parametrize(("key", "version", "body"), [
    (0, 9, {"TransactionalId": "tx", "Acks": -1, "TimeoutMs": 5, "TopicData": [
        {"Name": "a", "PartitionData": [{"Index": 0, "Records": b"\x00" * 70}]}, {"Name": "b", "PartitionData": []}]}),
    (2, 7, {"ReplicaId": -1, "IsolationLevel": 0, "Topics": [
        {"Name": "a", "Partitions": [{"PartitionIndex": 3, "Timestamp": -1}]}]}),
    (8, 8, {"GroupId": "g", "GenerationIdOrMemberEpoch": 1, "MemberId": "m", "GroupInstanceId": None, "Topics": [
        {"Name": "a", "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 5, "CommittedMetadata": "x"}]}]}),
    (11, 7, {"GroupId": "g", "SessionTimeoutMs": 1, "RebalanceTimeoutMs": 1, "MemberId": "", "ProtocolType": "c",
             "Protocols": [{"Name": "range", "Metadata": b"m"}]}),
])
def test_picked_fields_equal_the_decoded_ones(key: int, version: int, body: dict[str, Any]) -> None:
    """The fast path reads the same names as a whole decode (the picker, not decode, for these)."""
    from proxy.auth.acl.enforce import picked_body, selection_for
    from proxy.auth.acl.requests import paths_for, values_at

    api = DEFAULT_REGISTRY.api(key)
    raw = encode(api.request, version, body)
    enforcer = Enforcer(api, version)
    assert enforcer._picker is not None
    selection = selection_for(paths_for(key, version))
    light = picked_body(api.request.fields, selection, enforcer._picker.pick(version, raw))
    full = decode(api.request, version, raw)
    for path in paths_for(key, version):
        assert values_at(light, path) == values_at(full, path), path


@settings(max_examples=300)
@given(key=st.sampled_from([0, 1, 3, 8, 9, 11, 19]), data=st.binary(max_size=200))
def test_garbage_bodies_raise_only_protocol_errors(key: int, data: bytes) -> None:
    """Whatever the bytes, deciding on them either works or raises a ProtocolError (the
    connection then closes with ``bad_request``), never anything else."""
    api = DEFAULT_REGISTRY.api(key)
    version = api.versions.hi or 0
    facts = RequestFacts(principal=ALICE, host=HOST, api_key=key, api_version=version)
    with contextlib.suppress(ProtocolError):
        Enforcer(api, version).enforce(AUTHORIZER, facts, data)


def test_auto_creation_of_an_existing_topic_is_no_refusal() -> None:
    """Kafka asks for Create only for topics that do not exist: a producer's Metadata with
    AllowAutoTopicCreation for a topic the sidecar knows exists is left alone."""
    body = {"Topics": [{"Name": "orders-eu"}], "AllowAutoTopicCreation": True}
    known, _ = run(3, 12, body, topic_names={uuid.uuid4(): "orders-eu"})
    action = known.action
    assert isinstance(action, Forward) and action.body is None  # sent as it is (patched: listing filter)
    assert known.denials == ()
    unknown, enforcer = run(3, 12, body)
    assert isinstance(unknown.action, Forward) and unknown.action.body is not None
    assert decode(enforcer.api.request, 12, unknown.action.body)["AllowAutoTopicCreation"] is False
    assert [(d.name, d.operation) for d in unknown.denials] == [("orders-eu", Operation.CREATE)]
