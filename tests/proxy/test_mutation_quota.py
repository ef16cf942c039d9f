"""controller_mutation_rate on the data path (issue 33, KIP-599), without a broker: what the
request chain decides for CreateTopics, DeleteTopics and CreatePartitions, and what the
client reads in the answer.

Requests are built with our encoder and read back with kafka-python (an independent reader),
as are the answers the sidecar patches or makes. Throughout: ``quota.window.num=2`` of 1 s
and ``controller_mutation_rate=2`` for client id ``c1``: a burst of 2 × 1 × 2 = 4 tokens,
refilled at 2 a second, a throttle of ``-tokens / 2 × 1000`` ms (hand-computed in
``tests/quotas/test_mutations.py``). The clock is a list the tests move.
"""

from __future__ import annotations

import io
import struct
import uuid
from typing import Any, cast

import trio
import trio.testing
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from prometheus_client import CollectorRegistry

from coordinator.topics import TopicInfo
from protocol.apis import ApiRegistry
from protocol.headers import decode_request_header, encode_response_header
from protocol.schema import encode
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
from proxy.config.settings import ConnectionSettings
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.authorize import Authorization
from proxy.datapath.connection import Connection, Parts
from proxy.datapath.dispatch import Answer, Dispatch, Forward, Refresh
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.mutation_quota import MutationQuotaFilter
from proxy.datapath.rewrite import Rewriter
from proxy.datapath.routing import Router
from proxy.local.api import Context, LocalApiTable, Respond
from proxy.local.ports import AclDirectory, Ports
from quotas.client_rates import ClientRates
from quotas.clients import CONTROLLER_MUTATION_RATE, ClientQuotas, Entity
from quotas.rate import RateConfig
from tests.proxy.test_connection_seam import NoBrokers, NoUpstreamInfo
from tests.proxy.test_listing_splice import Acls
from tests.proxy.wire import read_one_frame, request_frame

REGISTRY = ApiRegistry()
CREATE, DELETE, PARTITIONS = 19, 20, 37
MESSAGE = "The throttling quota has been exceeded."
NIL = uuid.UUID(int=0)
KEY = (CONTROLLER_MUTATION_RATE, "", "c1")  # a client-id quota: one bucket per client id


class Broker:
    """The broker's topics, as a Metadata lookup would say (asks counted)."""

    def __init__(self, topics: list[TopicInfo]) -> None:
        self.topics = topics
        self.asked: list[set[str] | None] = []

    async def ask(self, names: set[str] | None) -> list[TopicInfo]:
        self.asked.append(names)
        return [t for t in self.topics if names is None or t.name in names]


class Rig:
    """One listener's chain with the mutation quota, on a clock the test moves."""

    def __init__(self, broker: Broker | None = None, authorization: Authorization | None = None,
                 principal: str = "User:ANONYMOUS") -> None:
        self.now = [0]
        self.rates = ClientRates(RateConfig(samples=2, window_ms=1000))
        self.rates.install(ClientQuotas({Entity(None, "c1"): {CONTROLLER_MUTATION_RATE: 2.0}}))
        self.broker = broker or Broker([])
        self.filter = MutationQuotaFilter(self.rates, REGISTRY, self.broker.ask, clock=lambda: self.now[0])
        router = Router(REGISTRY, LocalApiTable([]), NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
        self.dispatch = Dispatch(REGISTRY, router, SidecarMetrics(REGISTRY), (self.filter,), throttles=True,
                                 authorization=authorization)
        self.context = Context(listener="PLAINTEXT", peer=("10.0.0.7", 5000), principal=principal,
                               ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers()))

    def decide(self, frame: bytes, *, refreshed: bool = False) -> Any:
        view = memoryview(frame)
        return self.dispatch.decide(decode_request_header(view[4:], REGISTRY), view, self.context, True,
                                    refreshed=refreshed)

    def answer(self, request: bytes, decision: Forward, body: dict[str, Any]) -> bytes:
        """The client's frame (no size prefix) for the broker's answer ``body``."""
        header = decode_request_header(memoryview(request)[4:], REGISTRY)
        api = REGISTRY.api(header.api_key)
        head_version = api.response_header_version(header.api_version)
        encoded = encode_response_header(header.correlation_id, head_version) + encode(
            api.response, header.api_version, body)
        out = self.dispatch.response(header, head_version, memoryview(struct.pack(">i", len(encoded)) + encoded),
                                     None, decision.throttle)
        assert isinstance(out, (bytes, memoryview))
        return bytes(out)[4:]

    def tokens(self) -> float:
        return dict(self.rates.tokens(self.now[0]))[KEY]


def create_topics(version: int, *topics: tuple[str, int], validate_only: bool = False, client_id: str = "c1") -> bytes:
    return request_frame(CREATE, version, 9, {"Topics": [
        {"Name": name, "NumPartitions": count, "ReplicationFactor": 1, "Assignments": [], "Configs": []}
        for name, count in topics], "timeoutMs": 5000, "validateOnly": validate_only}, client_id=client_id)


def kp_body(request_class: Any, frame: bytes | memoryview) -> Any:
    """A forwarded request's body as kafka-python reads it."""
    view = memoryview(frame)
    header = decode_request_header(view[4:], REGISTRY)
    return request_class[header.api_version].decode(io.BytesIO(bytes(view[4 + header.size:])))


def kp_answer(response_class: Any, version: int, frame: bytes, flexible: bool) -> Any:
    return response_class[version].decode(io.BytesIO(frame[5:] if flexible else frame[4:]))


def created(names: list[str], version: int, errors: dict[str, int] | None = None, partitions: int = 1) -> dict[str, Any]:
    errors = errors or {}
    return {"ThrottleTimeMs": 0, "Topics": [
        {"Name": n, "TopicId": uuid.UUID(int=i + 1), "ErrorCode": errors.get(n, 0), "ErrorMessage": None,
         "NumPartitions": partitions, "ReplicationFactor": 1, "Configs": []} for i, n in enumerate(names)]}


def test_strict_create_topics_forwards_what_the_bucket_admits_and_answers_the_rest_with_89() -> None:
    """Six one-partition topics at v7: 4 → 0 takes five (the fifth to -1), refuses the sixth
    with 500 ms; the broker then refuses one of the five (exists already): its token comes
    back (-1 → 0)."""
    rig = Rig()
    request = create_topics(7, *[(f"t{i}", 1) for i in range(6)])
    decision = rig.decide(request)
    assert isinstance(decision, Forward) and decision.throttle is not None and decision.throttle.ms == 500
    assert [t.name for t in kp_body(CreateTopicsRequest, decision.frame).topics] == ["t0", "t1", "t2", "t3", "t4"]
    assert rig.tokens() == -1.0
    frame = rig.answer(request, decision, created(["t0", "t1", "t2", "t3", "t4"], 7, {"t2": 36}))
    body = kp_answer(CreateTopicsResponse, 7, frame, flexible=True)
    assert body.throttle_time_ms == 500
    assert [(t.name, t.error_code, t.error_message) for t in body.topics] == [
        ("t0", 0, None), ("t1", 0, None), ("t2", 36, None), ("t3", 0, None), ("t4", 0, None), ("t5", 89, MESSAGE)]
    assert body.topics[5].num_partitions == -1 and body.topics[5].topic_id is None  # (the zero id, as kafka-python reads it)
    assert rig.tokens() == 0.0  # t2's token given back


def test_strict_create_topics_refused_whole_is_answered_here_and_throttled() -> None:
    rig = Rig()
    rig.decide(create_topics(6, ("a", 5)))  # 4 → -1
    rig.now[0] = 250  # -0.5: 250 ms to go
    decision = rig.decide(create_topics(6, ("b", 1), ("c", 2)))
    assert isinstance(decision, Answer) and decision.outcome == "refused"
    assert decision.throttle is not None and decision.throttle.ms == 250
    assert isinstance(decision.answer, Respond)
    request = create_topics(6, ("b", 1), ("c", 2))
    header = decode_request_header(memoryview(request)[4:], REGISTRY)
    frame = rig.dispatch.encoded(header, decision.answer)
    body = kp_answer(CreateTopicsResponse, 6, frame[4:], flexible=True)
    assert body.throttle_time_ms == 250
    assert [(t.name, t.error_code, t.error_message) for t in body.topics] == [("b", 89, MESSAGE), ("c", 89, MESSAGE)]
    assert rig.tokens() == -0.5  # nothing taken


def test_topics_the_acls_refused_keep_their_error_when_the_quota_refuses_the_rest() -> None:
    """alice may create ``mine`` only: the ACLs take ``theirs`` out (29), then the exhausted
    bucket refuses ``mine`` (89): the sidecar answers both, and the audit keeps the denial."""
    alice = "User:alice"
    create = AclBinding(ResourcePattern(ResourceType.TOPIC, "mine", PatternType.LITERAL),
                        AclEntry(alice, "*", Operation.CREATE, Permission.ALLOW))
    acls = Acls(Authorizer(AclIndex([create])))
    rig = Rig(authorization=Authorization(cast(AclDirectory, acls), REGISTRY, CollectorRegistry(), shadow=False),
              principal=alice)
    rig.rates.mutate("alice", "c1", [5], strict=True, now_ms=0)  # -1
    request = create_topics(7, ("mine", 1), ("theirs", 1))
    decision = rig.decide(request)
    assert isinstance(decision, Answer) and isinstance(decision.answer, Respond)
    assert decision.denials == (("Topic", "theirs", "Create", "enforce"),)
    header = decode_request_header(memoryview(request)[4:], REGISTRY)
    body = kp_answer(CreateTopicsResponse, 7, rig.dispatch.encoded(header, decision.answer)[4:], flexible=True)
    assert body.throttle_time_ms == 500
    assert sorted((t.name, t.error_code) for t in body.topics) == [("mine", 89), ("theirs", 29)]


def test_permissive_create_topics_forwards_everything_throttled() -> None:
    """v5: every topic goes (4 - 7 = -3), the answer says 1.5 s, whatever the broker said."""
    rig = Rig()
    request = create_topics(5, ("a", 3), ("b", 4))
    decision = rig.decide(request)
    assert isinstance(decision, Forward) and decision.throttle is not None and decision.throttle.ms == 1500
    assert bytes(decision.frame) == request
    body = kp_answer(CreateTopicsResponse, 5, rig.answer(request, decision, {**created(["a", "b"], 5, partitions=3),
                                                                               "ThrottleTimeMs": 100}), flexible=True)
    assert body.throttle_time_ms == 1500 and [t.error_code for t in body.topics] == [0, 0]


def test_a_default_partition_count_counts_one_until_the_broker_says() -> None:
    rig = Rig()
    request = create_topics(7, ("a", -1))
    decision = rig.decide(request)
    assert rig.tokens() == 3.0  # one partition assumed
    rig.answer(request, decision, created(["a"], 7, partitions=3))
    assert rig.tokens() == 1.0  # three made


def test_validate_only_other_clients_and_no_quota_cost_nothing() -> None:
    rig = Rig()
    for frame in (create_topics(7, ("a", 50), validate_only=True), create_topics(7, ("a", 50), client_id="c2")):
        decision = rig.decide(frame)
        assert isinstance(decision, Forward) and decision.throttle is None and bytes(decision.frame) == frame
    assert list(rig.rates.tokens(0)) == []


async def test_delete_topics_costs_the_partitions_the_broker_says_by_name_or_id() -> None:
    """DeleteTopics v6 by id and by name: the counts are asked of the broker first (a
    refresh); 3 + 2 → -1, and the topic the broker does not know is left to it (not refused);
the next request is refused."""
    a, b = uuid.uuid4(), uuid.uuid4()
    rig = Rig(Broker([TopicInfo(name="a", topic_id=a, partitions=3), TopicInfo(name="b", topic_id=b, partitions=2)]))
    request = request_frame(DELETE, 6, 4, {"Topics": [{"Name": None, "TopicId": a}, {"Name": "b", "TopicId": NIL},
                                                      {"Name": "gone", "TopicId": NIL}], "TimeoutMs": 5000},
                            client_id="c1")
    refresh = rig.decide(request)
    assert isinstance(refresh, Refresh)
    await refresh.wait()
    assert rig.broker.asked == [None]  # an id among them: every topic
    decision = rig.decide(request, refreshed=True)
    assert isinstance(decision, Forward) and decision.throttle is not None and decision.throttle.ms == 0
    assert bytes(decision.frame) == request  # all three go on; strict throttles nothing yet
    assert len(kp_body(DeleteTopicsRequest, decision.frame).topics) == 3
    assert rig.tokens() == -1.0
    again = request_frame(DELETE, 5, 5, {"TopicNames": ["a"], "TimeoutMs": 5000}, client_id="c1")
    refresh = rig.decide(again)
    assert isinstance(refresh, Refresh)
    await refresh.wait()
    assert rig.broker.asked[1] == {"a"}
    refused = rig.decide(again, refreshed=True)
    assert isinstance(refused, Answer) and isinstance(refused.answer, Respond)
    header = decode_request_header(memoryview(again)[4:], REGISTRY)
    body = kp_answer(DeleteTopicsResponse, 5, rig.dispatch.encoded(header, refused.answer)[4:], flexible=True)
    assert body.throttle_time_ms == 500 and [(r.name, r.error_code, r.error_message) for r in body.responses] == [
        ("a", 89, MESSAGE)]


async def test_create_partitions_costs_the_new_count_less_the_current_one() -> None:
    rig = Rig(Broker([TopicInfo(name="a", topic_id=uuid.uuid4(), partitions=2),
                     TopicInfo(name="b", topic_id=uuid.uuid4(), partitions=1)]))
    request = request_frame(PARTITIONS, 3, 4, {"Topics": [{"Name": "a", "Count": 5, "Assignments": None},
                                                          {"Name": "b", "Count": 3, "Assignments": None}],
                                               "TimeoutMs": 5000, "ValidateOnly": False}, client_id="c1")
    refresh = rig.decide(request)
    assert isinstance(refresh, Refresh)
    await refresh.wait()
    assert rig.broker.asked == [{"a", "b"}]
    decision = rig.decide(request, refreshed=True)  # a: 3 (4 → 1), b: 2 (1 → -1)
    assert isinstance(decision, Forward) and rig.tokens() == -1.0
    assert [t.name for t in kp_body(CreatePartitionsRequest, decision.frame).topics] == ["a", "b"]
    frame = rig.answer(request, decision, {"ThrottleTimeMs": 0, "Results": [
        {"Name": "a", "ErrorCode": 0, "ErrorMessage": None}, {"Name": "b", "ErrorCode": 37, "ErrorMessage": "no"}]})
    body = kp_answer(CreatePartitionsResponse, 3, frame, flexible=True)
    assert body.throttle_time_ms == 0 and [r.error_code for r in body.results] == [0, 37]
    assert rig.tokens() == 1.0  # b refused by the broker: its 2 given back


async def test_a_request_refused_whole_mutes_the_connection_for_its_throttle(
        autojump_clock: trio.testing.MockClock) -> None:
    """The sidecar answers a refused CreateTopics at once (no broker involved) and reads the
    client's next request only when the throttle has run (KIP-219)."""
    registry = ApiRegistry()
    rates = ClientRates(RateConfig(samples=2, window_ms=1000))
    rates.install(ClientQuotas({Entity(None, "c1"): {CONTROLLER_MUTATION_RATE: 2.0}}))
    rates.mutate("ANONYMOUS", "c1", [8], strict=True, now_ms=int(trio.current_time() * 1000))  # -4: 2 s
    router = Router(registry, LocalApiTable([]), NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    metrics = SidecarMetrics(registry)

    received: list[float] = []

    async def broker(stream: trio.abc.Stream) -> None:
        while await stream.receive_some(65536):
            received.append(trio.current_time())

    async with trio.open_nursery() as nursery:

        async def open_upstream() -> trio.abc.Stream:
            ours, theirs = trio.testing.memory_stream_pair()
            nursery.start_soon(broker, theirs)
            return ours

        await _run(nursery, registry, router, metrics, rates, open_upstream, received)
        nursery.cancel_scope.cancel()


async def _run(nursery: trio.Nursery, registry: ApiRegistry, router: Router, metrics: SidecarMetrics,
               rates: ClientRates, open_upstream: Any, received: list[float]) -> None:
    parts = Parts(settings=ConnectionSettings(), registry=registry, router=router, metrics=metrics,
                  open_upstream=open_upstream,
                  dispatch=Dispatch(registry, router, metrics, (MutationQuotaFilter(rates, registry),), throttles=True))
    context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 5), ports=Ports(upstream=NoUpstreamInfo(),
                                                                                brokers=NoBrokers()))
    client, server_side = trio.testing.memory_stream_pair()
    nursery.start_soon(Connection(parts, server_side, context).run)
    start = trio.current_time()
    await client.send_all(create_topics(7, ("a", 1)))
    first = await read_one_frame(client)
    assert trio.current_time() - start < 0.001  # answered at once
    body = kp_answer(CreateTopicsResponse, 7, first[4:], flexible=True)
    assert body.throttle_time_ms == 2000 and body.topics[0].error_code == 89
    await client.send_all(create_topics(7, ("a", 1)))  # back at 0 tokens by then: forwarded
    while not received:
        await trio.sleep(0.01)
    assert received[0] - start >= 2.0  # not read before the throttle ran out
    await client.aclose()
