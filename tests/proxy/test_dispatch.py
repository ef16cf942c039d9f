"""The request chain without streams (proxy/datapath/dispatch.py, filters.py, policy.py).

Requests are built with our encoder and, where a filter changes one, read back with
kafka-python (an independent decoder); expected answers are written out by hand from
Kafka's specs (error codes from ``Errors.java``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, cast

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from prometheus_client import CollectorRegistry

from protocol.apis import ApiRegistry
from protocol.headers import decode_request_header
from protocol.schema import decode
from proxy.auth.acl.evaluate import AclIndex, Authorizer
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.config.keys import ConfigError
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.authorize import Authorization
from proxy.datapath.dispatch import Answer, Close, Dispatch, Forward, Request
from proxy.datapath.filters import (
    Change,
    Disconnect,
    FilterContext,
    FilterMetrics,
    FilterRequest,
    LoadedFilter,
    Refuse,
    load_filters,
)
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.policy import PolicyFilter
from proxy.datapath.rewrite import Rewriter
from proxy.datapath.routing import Router
from proxy.local.api import Context, LocalApiTable, Respond
from proxy.local.ports import AclDirectory, Ports, UpstreamInfo
from tests.proxy.test_connection_seam import NoBrokers, NoUpstreamInfo, heartbeat_api
from tests.proxy.test_listing_splice import Acls
from tests.proxy.wire import request_frame

REGISTRY = ApiRegistry()
ALICE = "User:alice"


def context(principal: str = "User:ANONYMOUS") -> Context:
    return Context(listener="PLAINTEXT", peer=("10.0.0.7", 5000), principal=principal,
                   ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers()))


def dispatch(*filters: Any, authorization: Authorization | None = None) -> Dispatch:
    router = Router(REGISTRY, LocalApiTable([]), NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    return Dispatch(REGISTRY, router, SidecarMetrics(REGISTRY), filters, authorization=authorization)


def decide(chain: Dispatch, frame: bytes, who: Context | None = None, *, expects_response: bool = True) -> Any:
    view = memoryview(frame)
    header = decode_request_header(view[4:], REGISTRY)
    return chain.decide(header, view, who or context(), expects_response)


def produce(topic: str, acks: int, records: bytes | None = None) -> bytes:
    return request_frame(0, 9, 7, {"TransactionalId": None, "Acks": acks, "TimeoutMs": 1000, "TopicData": [
        {"Name": topic, "PartitionData": [{"Index": 0, "Records": records}]}]})


def create_topics(*topics: tuple[str, int, int]) -> bytes:
    return request_frame(19, 5, 3, {"Topics": [
        {"Name": n, "NumPartitions": p, "ReplicationFactor": r, "Assignments": [], "Configs": []}
        for n, p, r in topics], "TimeoutMs": 1000, "ValidateOnly": False})


def batch(count: int, compression: int = 0) -> bytes:
    """A record batch of ``count`` records, written by kafka-python (which compresses only
    what compression makes smaller: the values are long and alike)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000, key=None, value=b"v" * 300, headers=[])
    return bytes(builder.build())


class Recorder:
    """A filter that notes what it saw and passes."""

    def __init__(self, keys: frozenset[int] | None) -> None:
        self.api_keys = keys
        self.seen: list[int] = []

    def on_request(self, request: Request) -> None:
        self.seen.append(request.header.api_key)


# -- the chain ------------------------------------------------------------------------------


def test_a_filter_sees_only_the_keys_it_wants_and_a_plain_request_is_forwarded_as_it_came() -> None:
    everything, produces = Recorder(None), Recorder(frozenset({0}))
    chain = dispatch(everything, produces)
    metadata = request_frame(3, 9, 1, {"Topics": None, "AllowAutoTopicCreation": False,
                                       "IncludeClusterAuthorizedOperations": False,
                                       "IncludeTopicAuthorizedOperations": False})
    decided = decide(chain, metadata)
    assert isinstance(decided, Forward) and bytes(decided.frame) == metadata
    decide(chain, produce("t", -1))
    assert everything.seen == [3, 0] and produces.seen == [0]


def test_a_change_is_seen_by_the_next_filter_and_reaches_the_broker() -> None:
    class Rename:
        api_keys = frozenset({19})

        def on_request(self, request: FilterRequest, context: FilterContext) -> Change:
            body = request.body
            body["Topics"][0]["Name"] = "renamed"
            return Change(body)

    after = Recorder(frozenset({19}))
    names: list[str] = []

    class Reader:
        api_keys = frozenset({19})

        def on_request(self, request: Request) -> None:
            names.append(decode(REGISTRY.api(19).request, 5, request.body)["Topics"][0]["Name"])

    changed = LoadedFilter(Rename(), "rename", REGISTRY, FilterMetrics(CollectorRegistry()))
    decided = decide(dispatch(changed, after, Reader()), create_topics(("orders", 3, 1)))
    assert isinstance(decided, Forward) and after.seen == [19] and names == ["renamed"]
    # The frame the broker gets, read by kafka-python: header kept, body changed.
    (size,) = struct.unpack(">i", decided.frame[:4])
    assert size == len(decided.frame) - 4
    header = decode_request_header(decided.frame[4:], REGISTRY)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (19, 5, 3, "wire-test")
    theirs = CreateTopicsRequest[5].decode(bytes(decided.frame[4 + header.size :]))
    assert [(t.name, t.num_partitions, t.replication_factor) for t in theirs.topics] == [("renamed", 3, 1)]


def test_acls_decide_without_a_connection() -> None:
    def write(topic: str) -> AclBinding:
        return AclBinding(ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                          AclEntry(ALICE, "*", Operation.WRITE, Permission.ALLOW))

    acls = Acls(Authorizer(AclIndex([write("mine")])))
    authorization = Authorization(cast(AclDirectory, acls), REGISTRY, CollectorRegistry(), shadow=False)
    chain = dispatch(authorization=authorization)
    assert isinstance(decide(chain, produce("mine", -1), context(ALICE)), Forward)
    refused = decide(chain, produce("theirs", -1), context(ALICE))
    assert isinstance(refused, Answer) and refused.outcome == "refused"
    assert isinstance(refused.answer, Respond) and isinstance(refused.answer.body, Mapping)
    (topic,) = refused.answer.body["Responses"]
    assert topic["Name"] == "theirs" and [p["ErrorCode"] for p in topic["PartitionResponses"]] == [29]
    assert refused.denials == (("Topic", "theirs", "Write", "enforce"),)
    closed = decide(chain, produce("theirs", 0), context(ALICE), expects_response=False)
    assert isinstance(closed, Close) and closed.reason == "authorization_failed"


# -- operators' filters ---------------------------------------------------------------------


class Says:
    """A filter that answers every CreateTopics with ``verdict``."""

    api_keys = frozenset({19})

    def __init__(self, verdict: Any) -> None:
        self.verdict = verdict

    def on_request(self, request: FilterRequest, context: FilterContext) -> Any:
        assert (context.principal, context.listener, context.client_address, context.client_id) == (
            "User:ANONYMOUS", "PLAINTEXT", ("10.0.0.7", 5000), "wire-test")
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return self.verdict


def loaded(verdict: Any, metrics: FilterMetrics | None = None) -> Dispatch:
    return dispatch(LoadedFilter(Says(verdict), "says", REGISTRY, metrics or FilterMetrics(CollectorRegistry())))


def test_a_refusal_is_kafkas_answer_to_the_whole_request_with_the_filters_message() -> None:
    decided = decide(loaded(Refuse(44, "no", (("Topic", "a"),), rule="r")), create_topics(("a", 1, 1), ("b", 2, 1)))
    assert isinstance(decided, Answer) and decided.outcome == "refused"
    assert decided.denials == (("Topic", "a", "says:r", "enforce"),)
    assert isinstance(decided.answer, Respond) and isinstance(decided.answer.body, Mapping)
    # CreateTopicsResponse v5, each topic as it was asked for, with the error (as the ACL
    # refusals shape it: counts and factor echoed, no configs).
    assert [dict(t) for t in decided.answer.body["Topics"]] == [
        {"Name": "a", "ErrorCode": 44, "ErrorMessage": "no", "TopicConfigErrorCode": 0, "NumPartitions": 1,
         "ReplicationFactor": 1, "Configs": []},
        {"Name": "b", "ErrorCode": 44, "ErrorMessage": "no", "TopicConfigErrorCode": 0, "NumPartitions": 2,
         "ReplicationFactor": 1, "Configs": []}]


def test_shadow_refuses_nothing_and_an_unanswerable_refusal_closes() -> None:
    shadow = decide(loaded(Refuse(44, "no", (("Topic", "a"),), shadow=True)), create_topics(("a", 1, 1)))
    assert isinstance(shadow, Forward) and shadow.denials == (("Topic", "a", "says:says", "shadow"),)

    class NoAcksZero:
        api_keys = frozenset({0})

        def on_request(self, request: FilterRequest, context: FilterContext) -> Refuse:
            return Refuse(21, "acks", (("Topic", "t"),), rule="acks")

    chain = dispatch(LoadedFilter(NoAcksZero(), "p", REGISTRY, FilterMetrics(CollectorRegistry())))
    closed = decide(chain, produce("t", 0), expects_response=False)
    assert isinstance(closed, Close) and closed.reason == "policy_violation"
    assert closed.denials == (("Topic", "t", "p:acks", "enforce"),)
    gone = decide(loaded(Disconnect("enough")), create_topics(("a", 1, 1)))
    assert gone == Close("filter_closed", "filter says: enough")


@pytest.mark.parametrize("verdict", [RuntimeError("bug"), "not a verdict", Change({"Topics": "not a list"})])
def test_a_failing_filter_costs_only_its_request(verdict: Any) -> None:
    metrics = FilterMetrics(CollectorRegistry())
    decided = decide(loaded(verdict, metrics), create_topics(("a", 1, 1)))
    assert isinstance(decided, Answer) and isinstance(decided.answer, Respond)
    assert isinstance(decided.answer.body, Mapping)
    ((topic_error, message),) = [(t["ErrorCode"], t["ErrorMessage"]) for t in decided.answer.body["Topics"]]
    assert topic_error == -1 and message.startswith("request filter says failed: ")
    assert metrics.errors.labels("says")._value.get() == 1


def test_loading_names_the_key_and_the_filter() -> None:
    metrics = FilterMetrics(CollectorRegistry())
    with pytest.raises(ConfigError, match=r"filter\.class\.names: cannot load 'no\.such\.Module'"):
        load_filters("no.such.Module", {}, REGISTRY, metrics)
    with pytest.raises(ConfigError, match="neither a built-in"):
        load_filters("policyy", {}, REGISTRY, metrics)
    with pytest.raises(ConfigError, match="has no on_request"):
        load_filters("collections:OrderedDict", {}, REGISTRY, metrics)
    with pytest.raises(ConfigError, match=r"policy\.create\.topics\.partitions\.min=5 is above"):
        load_filters("policy", {"policy.create.topics.partitions.min": "5",
                                "policy.create.topics.partitions.max": "2"}, REGISTRY, metrics)
    with pytest.raises(ConfigError, match=r"policy.acks.all.topics.pattern='\(': not a regular expression"):
        load_filters("policy", {"policy.acks.all.topics.pattern": "("}, REGISTRY, metrics)
    two = load_filters("policy, policy", {}, REGISTRY, metrics)
    assert [f.name for f in two] == ["policy", "policy-2"]


# -- the policy filter ----------------------------------------------------------------------


def policy(**keys: str) -> Dispatch:
    instance = PolicyFilter()
    instance.configure({k.replace("_", "."): v for k, v in keys.items()})
    return dispatch(LoadedFilter(instance, "policy", REGISTRY, FilterMetrics(CollectorRegistry())))


def refused_with(decided: Any) -> list[tuple[int, str | None]]:
    """Every (error, message) pair in a refusal's answer."""
    assert isinstance(decided, Answer) and isinstance(decided.answer, Respond)
    found: list[tuple[int, str | None]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("ErrorCode"):
                found.append((value["ErrorCode"], value.get("ErrorMessage")))
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(decided.answer.body)
    return found


def test_client_ids_are_checked_but_not_before_the_client_could_know() -> None:
    chain = policy(policy_client_id_pattern="app-[a-z]+")
    api_versions = request_frame(18, 3, 1, {"ClientSoftwareName": "x", "ClientSoftwareVersion": "1"}, client_id="")
    assert isinstance(decide(chain, api_versions), Forward)  # no local table here: the broker's to answer
    assert isinstance(decide(chain, request_frame(3, 9, 1, {
        "Topics": None, "AllowAutoTopicCreation": False, "IncludeClusterAuthorizedOperations": False,
        "IncludeTopicAuthorizedOperations": False}, client_id="app-billing")), Forward)
    refused = decide(chain, produce("t", -1, batch(1)))  # client id "wire-test"
    assert refused_with(refused) == [(44, "policy: client id 'wire-test' does not match policy.client.id.pattern "
                                          "'app-[a-z]+'")]


def test_produce_rules_count_what_the_batches_hold() -> None:
    chain = policy(policy_produce_max_records="3", policy_compression_types_refused="gzip",
                   policy_acks_all_topics_pattern="secure-.*")
    assert isinstance(decide(chain, produce("t", 1, batch(3))), Forward)
    assert refused_with(decide(chain, produce("t", 1, batch(4)))) == [
        (44, "policy: 4 records in one Produce, more than policy.produce.max.records=3")]
    assert refused_with(decide(chain, produce("t", 1, batch(1, compression=1)))) == [  # 1: gzip
        (76, "policy: compression gzip is refused (policy.compression.types.refused)")]
    assert refused_with(decide(chain, produce("secure-x", 1, batch(1)))) == [
        (21, "policy: topic 'secure-x' requires acks=all (-1), the producer sent acks=1")]
    assert isinstance(decide(chain, produce("secure-x", -1, batch(1))), Forward)
    size = len(batch(2))
    by_bytes = policy(policy_produce_max_bytes=str(size - 1))
    assert refused_with(decide(by_bytes, produce("t", 1, batch(2)))) == [
        (44, f"policy: {size} record bytes in one Produce, more than policy.produce.max.bytes={size - 1}")]


def test_create_topics_rules_as_kafkas_create_topic_policy() -> None:
    chain = policy(policy_create_topics_partitions_min="3", policy_create_topics_partitions_max="12",
                   policy_create_topics_replication_factor_min="1", policy_create_topics_name_pattern="[a-z.]+")
    assert isinstance(decide(chain, create_topics(("orders", 3, 1), ("audit.log", 12, 1))), Forward)
    assert refused_with(decide(chain, create_topics(("orders", 3, 1), ("small", 1, 1)))) == [
        (44, "policy: topic 'small' has 1 partition(s), fewer than policy.create.topics.partitions.min=3")] * 2
    assert refused_with(decide(chain, create_topics(("big", 13, 1))))[0][1] == (
        "policy: topic 'big' has 13 partitions, more than policy.create.topics.partitions.max=12")
    assert refused_with(decide(chain, create_topics(("Orders", 3, 1))))[0][1] == (
        "policy: topic 'Orders' does not match policy.create.topics.name.pattern '[a-z.]+'")
    assert "broker's default partition count" in (refused_with(decide(chain, create_topics(("d", -1, 1))))[0][1] or "")
    assert "broker's default replication factor" in (
        refused_with(decide(chain, create_topics(("d", 3, -1))))[0][1] or "")


def test_the_worked_example_in_the_docs_runs_as_written(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/filters.md's TenantTopics, loaded by name as an operator would load it."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "filters.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "tenancy.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tenant,) = load_filters("tenancy:TenantTopics", {"filter.tenant.separator": "."}, REGISTRY,
                             FilterMetrics(CollectorRegistry()))
    chain = dispatch(tenant)
    alice = context("User:alice")
    refused = decide(chain, create_topics(("bob.orders", 6, 1)), alice)
    assert refused_with(refused) == [(44, "alice may create only alice.* topics")]
    changed = decide(chain, create_topics(("alice.orders", 1, 1), ("alice.audit", 6, 1)), alice)
    assert isinstance(changed, Forward)
    header = decode_request_header(changed.frame[4:], REGISTRY)
    theirs = CreateTopicsRequest[5].decode(bytes(changed.frame[4 + header.size :]))
    assert [(t.name, t.num_partitions) for t in theirs.topics] == [("alice.orders", 3), ("alice.audit", 6)]


def test_a_local_apis_body_is_decoded_once_for_its_predicate_and_its_handler() -> None:
    from proxy.local.api import LocalApi, LocalRequest

    seen: list[object] = []

    def takes(header: Any, body: Mapping[str, Any] | None, context: Context) -> bool:
        seen.append(body)
        return body is not None and body["Topics"][0]["Name"] == "ours"

    def handler(request: LocalRequest, context: Context) -> Respond:
        seen.append(request.body)
        return Respond(body=b"")

    table = LocalApiTable([LocalApi(key=19, name="CreateTopics", versions=(5, 5), handler=handler, takes=takes)])
    router = Router(REGISTRY, table, NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    chain = Dispatch(REGISTRY, router, SidecarMetrics(REGISTRY))
    assert isinstance(decide(chain, create_topics(("ours", 1, 1))), Answer)
    assert len(seen) == 2 and seen[0] is seen[1]  # one decoding, shared
    assert isinstance(decide(chain, create_topics(("theirs", 1, 1))), Forward)


# -- the fast lane (Dispatch.plain) ------------------------------------------------------


class ChangingUpstream:
    """An upstream view whose broker versions the test changes (as a reconnect would)."""

    def __init__(self) -> None:
        self.info: UpstreamInfo | None = None


def test_the_fast_lane_takes_what_only_the_router_forwards_and_learns_again_when_the_broker_changes() -> None:
    upstream = ChangingUpstream()
    table = LocalApiTable([heartbeat_api(lambda request, who: Respond(body=b"\x00\x00"))])
    router = Router(REGISTRY, table, upstream, Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    produces = Recorder(frozenset({0}))
    chain = Dispatch(REGISTRY, router, SidecarMetrics(REGISTRY), (produces,))
    header = decode_request_header(memoryview(produce("t", 1))[4:], REGISTRY)
    metadata = decode_request_header(memoryview(request_frame(3, 9, 1, {
        "Topics": None, "AllowAutoTopicCreation": False, "IncludeClusterAuthorizedOperations": False,
        "IncludeTopicAuthorizedOperations": False}))[4:], REGISTRY)
    assert not chain.plain(header)  # a filter wants Produce: decided, never the fast lane
    assert chain.plain(metadata)  # nobody but the unparsed policy, and the router forwards it
    heartbeat = decode_request_header(memoryview(request_frame(12, 4, 1, {
        "GroupId": "g", "GenerationId": 1, "MemberId": "m", "GroupInstanceId": None}))[4:], REGISTRY)
    assert not chain.plain(heartbeat)  # a local API takes it
    # The broker's versions change: Metadata v9 is no longer served, so it is not forwarded.
    upstream.info = UpstreamInfo(api_versions={3: (10, 12)}, api_versions_body={})
    assert not chain.plain(metadata)
    upstream.info = UpstreamInfo(api_versions={3: (0, 12)}, api_versions_body={})
    assert chain.plain(metadata)


def test_a_plain_request_is_forwarded_by_the_fast_lane_exactly_as_decide_would() -> None:
    chain = dispatch()
    frame = produce("t", 1)
    header = decode_request_header(memoryview(frame)[4:], REGISTRY)
    assert chain.plain(header)
    decided = decide(chain, frame)  # the slow path's verdict for the same request
    assert isinstance(decided, Forward) and bytes(decided.frame) == frame
    assert decided.patch is None and decided.denials == () and decided.throttle is None
