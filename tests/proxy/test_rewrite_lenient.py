"""Frames with bytes after their body: responses are rewritten and those bytes follow
unchanged; requests the sidecar answers are read as Kafka's broker reads them.

Clients stop reading a response where its schema ends (librdkafka and kafka-python both read
librdkafka's mock-cluster Metadata, whose flexible versions carry the top-level tag section
twice), so the sidecar must not refuse what they read (docs/protocol.md, "Leniency"). The
oracle is the same response without the extra bytes: rewriting ``body + extra`` must give
exactly what rewriting ``body`` gives, followed by ``extra``, and report the leniency once.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, cast

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import ProduceResponse

from protocol.apis import DEFAULT_REGISTRY as R
from protocol.apis import Api
from protocol.leniency import REQUEST, RESPONSE, TRAILING_BYTES, Leniency
from protocol.scan import top_level_tags_prefix
from protocol.schema import encode, struct_defaults
from proxy.config.keys import HostPort
from proxy.datapath.rewrite import (
    SITES,
    Rewriter,
    RewriteResult,
    reads_to_end,
    rewrites_tags_only,
    rewrites_version,
)
from proxy.local.api import Answer, Context, LocalRequest, Respond
from tests.protocol.strategies import message_values

SIDECAR = HostPort("sidecar.example", 19092)
#: Each property runs once per API version (43 of them): a quarter of the profile's
#: examples per version is still thousands in all (``HYPOTHESIS_PROFILE=deep``: more).
PER_VERSION = settings(max_examples=max(25, settings.default.max_examples // 4))


class EveryBroker:
    """An address book that knows every broker id (as the sidecar's own address)."""

    def lookup(self, node_id: int, host: str, port: int, listener: str) -> HostPort | None:
        return SIDECAR


def rewritten_versions() -> list[tuple[Api, int]]:
    """Every API version whose responses can name a broker."""
    out = []
    for key in sorted(SITES):
        api = R.api(key)
        assert api.versions.hi is not None
        out += [(api, v) for v in range(api.versions.lo, api.versions.hi + 1) if rewrites_version(api, v)]
    return out


CASES = rewritten_versions()


@pytest.mark.parametrize(("api", "version"), CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
@PER_VERSION
@given(data=st.data(), extra=st.binary(min_size=1, max_size=16))
def test_bytes_after_the_body_follow_the_rewritten_body_unchanged(
    api: Api, version: int, data: st.DataObject, extra: bytes
) -> None:
    body = encode(api.response, version, data.draw(message_values(api.response, version)))
    assert_the_extra_bytes_follow(api, extra, lambda rewriter, tail: rewriter.rewrite(api, version, body + tail),
                                  read_to_end=reads_to_end(api, version))


STREAMED = [(api, v) for api, v in CASES if rewrites_tags_only(api, v)]


@pytest.mark.parametrize(("api", "version"), STREAMED, ids=[f"{a.name}-v{v}" for a, v in STREAMED])
@PER_VERSION
@given(data=st.data(), extra=st.binary(min_size=1, max_size=16))
def test_a_streamed_tag_section_with_bytes_after_it_is_rewritten_in_its_own_length(
    api: Api, version: int, data: st.DataObject, extra: bytes
) -> None:
    """Cut-through: what arrives after the body's first bytes went on is the tag section
    and whatever follows it; the section is rewritten in its own length, the rest follows."""
    body = encode(api.response, version, data.draw(message_values(api.response, version)))
    start = top_level_tags_prefix(api.response, version, body)[0].start
    result = assert_the_extra_bytes_follow(
        api, extra, lambda rewriter, tail: rewriter.rewrite_section(api, version, body[start:] + tail))
    assert result is None or len(result.body) == len(body) - start + len(extra)  # its own length


def assert_the_extra_bytes_follow(
    api: Api, extra: bytes, rewrite: Callable[[Rewriter, bytes], RewriteResult | None], *, read_to_end: bool = True,
) -> RewriteResult | None:
    """``rewrite`` of the response followed by ``extra`` is ``rewrite`` of the response
    alone followed by ``extra`` (or ``None`` for both: the broker's bytes go on, extra
    included), and reports ``extra`` once where the rewrite reads to the body's end
    (``read_to_end``; a splice does not read past its field)."""
    reported: list[tuple[str, str, str, int]] = []
    plain = rewrite(Rewriter(EveryBroker(), "PLAINTEXT"), b"")
    result = rewrite(Rewriter(EveryBroker(), "PLAINTEXT", leniency=Leniency(lambda *a: reported.append(a))), extra)
    assert reported == ([(api.name, RESPONSE, TRAILING_BYTES, len(extra))] if read_to_end else [])
    if plain is None:
        assert result is None
    else:
        assert result is not None
        assert (result.body, result.rewritten, result.unmapped) == (
            plain.body + extra, plain.rewritten, plain.unmapped)
    return result


def test_a_response_without_extra_bytes_reports_nothing() -> None:
    api = R.api(3)
    body = encode(api.response, 13, metadata_v13([(1, "broker-1", 9092)]))
    reported: list[Any] = []
    result = Rewriter(EveryBroker(), "PLAINTEXT", leniency=Leniency(lambda *a: reported.append(a))).rewrite(
        api, 13, body)
    assert result is not None and reported == []


def metadata_v13(brokers: list[tuple[int, str, int]]) -> dict[str, Any]:
    return {
        "ThrottleTimeMs": 0,
        "Brokers": [{"NodeId": n, "Host": h, "Port": p, "Rack": None} for n, h, p in brokers],
        "ClusterId": "c1", "ControllerId": 1, "Topics": [], "ErrorCode": 0,
    }  # fmt: skip


def test_the_mock_clusters_doubled_tag_section_is_read_by_kafka_python_after_the_rewrite() -> None:
    # librdkafka's mock cluster ends flexible Metadata with two empty tag sections (the
    # handler writes one, rd_kafka_mock_connection_send_response0 another): one byte more.
    api = R.api(3)
    body = encode(api.response, 12, metadata_v12([(1, "127.0.0.1", 40001), (2, "127.0.0.1", 40002)]))
    result = Rewriter(EveryBroker(), "PLAINTEXT").rewrite(api, 12, body + b"\x00")
    assert result is not None and result.body.endswith(b"\x00\x00")
    # kafka-python's MetadataResponse v12 (an independent decoder) reads the rewritten body.
    decoded = MetadataResponse[12].decode(result.body)
    assert [(b[0], b[1], b[2]) for b in decoded.brokers] == [
        (1, SIDECAR.host, SIDECAR.port), (2, SIDECAR.host, SIDECAR.port)]


def metadata_v12(brokers: list[tuple[int, str, int]]) -> dict[str, Any]:
    value = metadata_v13(brokers)
    del value["ErrorCode"]
    return value


BROKER = {"NodeId": 1, "Host": "kafka-1.brokers.internal.example", "Port": 9092, "Rack": None}
ENDPOINT = {"node_id": 1, "host": "sidecar-1.example", "port": 19092, "rack": None}
PRODUCED = {"Name": "t", "PartitionResponses": [{
    "Index": 0, "ErrorCode": 6, "BaseOffset": -1, "LogAppendTimeMs": -1, "LogStartOffset": -1,
    "RecordErrors": [], "ErrorMessage": None, "CurrentLeader": {"LeaderId": 1, "LeaderEpoch": 2}}]}
#: (API key, version, the broker's response, kafka-python's class, what it must read there).
ANSWERS: dict[str, tuple[int, int, dict[str, Any], Any, Callable[[dict[str, Any]], Any], Any]] = {
    "Metadata": (3, 12, metadata_v12([(1, "10.9.8.7", 9092)]), MetadataResponse,
                 lambda d: d["brokers"], [{"node_id": 1, "host": "sidecar-1.example", "port": 19092, "rack": None}]),
    "FindCoordinator": (10, 4, {"ThrottleTimeMs": 0, "Coordinators": [
        {"Key": "g", "NodeId": 1, "Host": "10.9.8.7", "Port": 9092, "ErrorCode": 0, "ErrorMessage": None}]},
        FindCoordinatorResponse, lambda d: [(c["host"], c["port"]) for c in d["coordinators"]],
        [("sidecar-1.example", 19092)]),
    "DescribeCluster": (60, 0, {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "ClusterId": "c",
                                "ControllerId": 1, "Brokers": [{**{k: v for k, v in BROKER.items() if k != "NodeId"},
                                                                "BrokerId": 1}],
                                "ClusterAuthorizedOperations": -2147483648},
                        DescribeClusterResponse, lambda d: [(b["host"], b["port"]) for b in d["brokers"]],
                        [("sidecar-1.example", 19092)]),
    "Produce": (0, 10, {"Responses": [PRODUCED], "ThrottleTimeMs": 0, "NodeEndpoints": [BROKER]},
                ProduceResponse, lambda d: d["node_endpoints"], [ENDPOINT]),
    "Fetch": (1, 16, {"ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "Responses": [],
                      "NodeEndpoints": [BROKER]}, FetchResponse, lambda d: d["node_endpoints"], [ENDPOINT]),
}  # fmt: skip
EXTRA = b"\x00\x07\xff"


def forwarded_request(api_key: int, version: int) -> bytes:
    """A request frame (header v2) whose body the sidecar can read (Produce: acks=-1)."""
    api = R.api(api_key)
    value = struct_defaults(api.request.fields, version)
    if api_key == 0:
        value["Acks"] = -1
    payload = struct.pack(">hhih", api_key, version, 1, 1) + b"t\x00" + encode(api.request, version, value)
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("name", [*ANSWERS, "Fetch-streamed"])
async def test_through_a_connection_the_client_reads_the_rewritten_body_and_the_bytes_after_it(
    autojump_clock: trio.testing.MockClock, name: str,
) -> None:
    """A scripted broker answers with three bytes after the body (librdkafka's mock cluster
    sends one): the client's frame is the rewritten body, then those bytes, and kafka-python
    reads the sidecar's address where the broker's was; counted once, the connection open.
    ``Fetch-streamed`` is a Fetch large enough to go to the client as it arrives."""
    from tests.proxy.test_streaming import RECORDS, ScriptedBroker, build

    key, version, value, reader, where, expected = ANSWERS[name.removesuffix("-streamed")]
    api = R.api(key)
    if name == "Fetch-streamed":
        value = {**value, "Responses": [{"Topic": "", "TopicId": uuid.UUID(int=3), "Partitions": [{
            "PartitionIndex": 0, "ErrorCode": 6, "HighWatermark": 10, "LastStableOffset": 10,
            "LogStartOffset": 0, "AbortedTransactions": [], "PreferredReadReplica": -1,
            "Records": RECORDS, "CurrentLeader": {"LeaderId": 1, "LeaderEpoch": 2}}]}]}  # fmt: skip
    answer = struct.pack(">i", 1) + b"\x00" + encode(api.response, version, value) + EXTRA
    lenient: list[tuple[str, str, str, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, ScriptedBroker({1: struct.pack(">i", len(answer)) + answer}),
                        leniency=Leniency(lambda *a: lenient.append(a)))
        nursery.start_soon(h.connection.run)
        await h.client.send_all(forwarded_request(key, version))
        size = struct.unpack(">i", await receive_exactly(h.client, 4))[0]
        frame = await receive_exactly(h.client, size)
        assert frame[:5] == struct.pack(">i", 1) + b"\x00" and frame.endswith(EXTRA)
        decoded = reader[version].decode(frame[5:]).to_dict()  # kafka-python reads past EXTRA
        assert where(decoded) == expected
        spliced = not reads_to_end(api, version)  # Metadata, FindCoordinator v4, DescribeCluster
        assert lenient == ([] if spliced else [(api.name, RESPONSE, TRAILING_BYTES, len(EXTRA))])
        streamed = h.metrics.registry.get_sample_value("ksidecar_streamed_responses_total", {"api": api.name})
        assert bool(streamed) is (name == "Fetch-streamed")
        assert h.metrics.registry.get_sample_value(
            "ksidecar_connections_closed_total", {"listener": "PLAINTEXT", "reason": "bad_response"}) is None
        await h.client.aclose()


async def test_a_request_the_sidecar_answers_is_read_up_to_its_body_as_kafka_reads_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """librdkafka ends AlterUserScramCredentials v0 with one byte more than its body; Kafka's
    broker reads the body and ignores the rest. So does the sidecar: the handler gets the
    body, the client its answer, and the deviation is counted as a request's."""
    from tests.proxy.test_streaming import ScriptedBroker, build

    seen: list[Any] = []

    def handler(request: LocalRequest, context: Context) -> Answer:
        seen.append(request.body)
        return Respond(body={"ErrorCode": 0})

    body = struct.pack(">h", 1) + b"g" + struct.pack(">i", 5) + struct.pack(">h", 1) + b"m"  # Heartbeat v0
    payload = struct.pack(">hhih", 12, 0, 9, 1) + b"t" + body + b"\x2a"
    lenient: list[tuple[str, str, str, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, ScriptedBroker({}), handler, leniency=Leniency(lambda *a: lenient.append(a)),
                        decode=True)
        nursery.start_soon(h.connection.run)
        await h.client.send_all(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", await receive_exactly(h.client, 4))[0]
        assert await receive_exactly(h.client, size) == struct.pack(">ih", 9, 0)
        assert [(b.GroupId, b.GenerationId, b.MemberId) for b in seen] == [("g", 5, "m")]
        assert lenient == [("Heartbeat", REQUEST, TRAILING_BYTES, 1)]
        await h.client.aclose()


async def receive_exactly(stream: trio.abc.Stream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = await stream.receive_some(n - len(got))
        assert data, f"closed after {len(got)} of {n} bytes"
        got += data
    return bytes(got)


def test_an_acl_patched_response_keeps_the_bytes_after_its_body() -> None:
    """A listing filtered by the ACLs is re-encoded; what followed the broker's body still
    follows. Reported by the patcher where the rewriter did not read to the body's end
    (ListGroups, Metadata), not a second time where it did (Produce)."""
    from prometheus_client import CollectorRegistry

    from proxy.datapath.authorize import Authorization
    from proxy.local.ports import AclDirectory

    reported: list[tuple[str, str, str, int]] = []
    authorization = Authorization(cast(AclDirectory, object()), R, CollectorRegistry(), shadow=False,
                                  leniency=Leniency(lambda *a: reported.append(a)))
    groups = [{"GroupId": g, "ProtocolType": "consumer"} for g in ("kept", "hidden")]
    body = encode(R.api(16).response, 2, {"ThrottleTimeMs": 0, "ErrorCode": 0, "Groups": groups})

    def hide(answer: dict[str, Any]) -> dict[str, Any]:
        return {**answer, "Groups": [g for g in answer["Groups"] if g["GroupId"] != "hidden"]}

    patched = authorization.patched(hide, 16, 2, body + b"\x05\x06")
    # ListGroups v2 by hand: throttle 0, error 0, one group "kept" of type "consumer".
    expected = struct.pack(">ihi", 0, 0, 1) + struct.pack(">h", 4) + b"kept" + struct.pack(">h", 8) + b"consumer"
    assert patched == expected + b"\x05\x06"
    assert reported == [("ListGroups", RESPONSE, TRAILING_BYTES, 2)]
    metadata = encode(R.api(3).response, 12, metadata_v12([(1, "10.9.8.7", 9092)]))
    assert authorization.patched(lambda a: a, 3, 12, metadata + b"\x00") == metadata + b"\x00"
    # The rewriter splices Metadata after its brokers and leaves the byte unread: counted here.
    assert reported[1:] == [("Metadata", RESPONSE, TRAILING_BYTES, 1)]
    produced = encode(R.api(0).response, 10, {"Responses": [PRODUCED], "ThrottleTimeMs": 0, "NodeEndpoints": []})
    assert authorization.patched(lambda a: a, 0, 10, produced + b"\x00") == produced + b"\x00"
    assert len(reported) == 2  # the rewriter reads Produce to its end and counted the byte first
