"""Rewriting NodeEndpoints (KIP-951) by splicing the top-level tag section.

A response forwarded as it arrives (cut-through) has its tag section rewritten in its own
length (``Rewriter.rewrite_section``): kafka-python must read the result, filler tag and
all, and find the rewritten endpoints, or none when they did not fit.

Produce v10+ and Fetch v16+ responses are scanned, not decoded; when NodeEndpoints is
present only its value is decoded and re-encoded. These tests check the spliced result
against kafka-python's decoder (an independent oracle) and against a whole-message
decode/modify/encode with our own schema, and that the bytes before the tag section —
records included — are the broker's own.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchResponse

from protocol.apis import DEFAULT_REGISTRY as R
from protocol.errors import ProtocolError, Truncated
from protocol.headers import RequestHeader, encode_response_header
from protocol.scan import skip_tags, top_level_tags
from protocol.schema import decode, encode
from proxy.config.keys import HostPort
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.rewrite import Rewriter
from proxy.datapath.routing import Router
from proxy.local.api import LocalApiTable
from tests.protocol.strategies import message_values
from tests.proxy.test_connection_seam import NoUpstreamInfo

FETCH = R.api(1)
PRODUCE = R.api(0)
RECORDS = bytes(range(256)) * 300  # opaque to the rewriter: never parsed


def fetch_value(endpoints: list[dict[str, object]], unknown: list[tuple[int, bytes]] | None = None) -> dict[str, object]:
    partition = {
        "PartitionIndex": 0, "ErrorCode": 6, "HighWatermark": 10, "LastStableOffset": 10,
        "LogStartOffset": 0, "AbortedTransactions": [], "PreferredReadReplica": -1,
        "Records": RECORDS, "CurrentLeader": {"LeaderId": 2, "LeaderEpoch": 3},
    }  # fmt: skip
    value: dict[str, object] = {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0,
        "Responses": [{"Topic": "t", "TopicId": uuid.UUID(int=9), "Partitions": [partition]}],
        "NodeEndpoints": endpoints,
    }  # fmt: skip
    if unknown:
        value["_unknown_tags"] = unknown
    return value


def endpoint(node: int, host: str, port: int, rack: str | None = None) -> dict[str, object]:
    return {"NodeId": node, "Host": host, "Port": port, "Rack": rack}


class Unmapped:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def __call__(self, api: str, node: int) -> None:
        self.calls.append((api, node))


BOOK = StaticAddressBook({1: HostPort("sc1", 19092), 2: HostPort("sc2", 19093)})


@pytest.mark.parametrize("version", [16, 17])
def test_fetch_node_endpoints_rewritten_records_untouched(version: int) -> None:
    original = encode(FETCH.response, version, fetch_value(
        [endpoint(1, "b1", 9092, "r1"), endpoint(3, "b3", 9094)], unknown=[(7, b"xyz")]))
    unmapped = Unmapped()
    result = Rewriter(BOOK, "PLAINTEXT", unmapped).rewrite(FETCH, version, original)
    assert result is not None
    assert (result.rewritten, result.unmapped) == (1, 1)
    assert unmapped.calls == [("Fetch", 3)]
    got = FetchResponse[version].decode(result.body)
    assert [(e.node_id, e.host, e.port, e.rack) for e in got.node_endpoints] == [(1, "sc1", 19092, "r1")]
    assert bytes(got.responses[0].partitions[0].records) == RECORDS
    # Same bytes as a whole decode/modify/encode, unknown tag kept in order.
    expected = encode(FETCH.response, version, fetch_value(
        [endpoint(1, "sc1", 19092, "r1")], unknown=[(7, b"xyz")]))
    assert result.body == expected
    # Everything up to the tag section is the broker's own bytes.
    start = top_level_tags(FETCH.response, version, original).start
    assert start > len(RECORDS)
    assert result.body[:start] == original[:start]


def test_fetch_with_every_endpoint_unmapped_keeps_an_empty_list() -> None:
    original = encode(FETCH.response, 16, fetch_value([endpoint(5, "b5", 1)]))
    result = Rewriter(BOOK, "PLAINTEXT").rewrite(FETCH, 16, original)
    assert result is not None and (result.rewritten, result.unmapped) == (0, 1)
    assert decode(FETCH.response, 16, result.body).NodeEndpoints == []


def test_no_tag_or_an_empty_tag_passes_unchanged() -> None:
    plain = encode(FETCH.response, 16, fetch_value([]))
    assert plain.endswith(b"\x00")  # no tag written for the default
    assert Rewriter(BOOK, "PLAINTEXT").rewrite(FETCH, 16, plain) is None
    # Tansu 0.6 writes the default-valued tag anyway: one entry, tag 0, one byte (no items).
    explicit = plain[:-1] + b"\x01\x00\x01\x01"
    assert decode(FETCH.response, 16, explicit).NodeEndpoints == []
    assert Rewriter(BOOK, "PLAINTEXT").rewrite(FETCH, 16, explicit) is None


def test_produce_splice_matches_a_whole_reencode() -> None:
    value = {
        "Responses": [{"Name": "t", "PartitionResponses": [{
            "Index": 0, "ErrorCode": 6, "BaseOffset": -1, "LogAppendTimeMs": -1,
            "LogStartOffset": -1, "RecordErrors": [], "ErrorMessage": None,
            "CurrentLeader": {"LeaderId": 2, "LeaderEpoch": 1},
        }]}],
        "ThrottleTimeMs": 0,
        "NodeEndpoints": [endpoint(2, "b2", 9093)],
    }  # fmt: skip
    for version in (10, 11):
        original = encode(PRODUCE.response, version, value)
        result = Rewriter(BOOK, "PLAINTEXT").rewrite(PRODUCE, version, original)
        assert result is not None
        assert result.body == encode(PRODUCE.response, version,
                                     {**value, "NodeEndpoints": [endpoint(2, "sc2", 19093)]})


def test_truncated_response_is_refused() -> None:
    from protocol.errors import ProtocolError

    original = encode(FETCH.response, 16, fetch_value([endpoint(1, "b1", 9092)]))
    with pytest.raises(ProtocolError):
        Rewriter(BOOK, "PLAINTEXT").rewrite(FETCH, 16, original[:-3])


def split_tail(wire: bytes, version: int) -> tuple[bytes, bytes]:
    start = top_level_tags(FETCH.response, version, wire).start
    return wire[:start], wire[start:]


@pytest.mark.parametrize(
    ("broker_host", "expected"),
    [
        ("b1", [(1, "sc1", 19092, "r1")]),  # one byte longer ("sc1"): cannot fit, dropped
        ("abc", [(1, "sc1", 19092, "r1")]),  # the same length: written as it is
        ("broker-1.example.internal", [(1, "sc1", 19092, "r1")]),  # shorter: a filler tag
    ],
)
def test_a_section_already_on_its_way_is_rewritten_in_its_own_length(
    broker_host: str, expected: list[tuple[int, str, int, str]]
) -> None:
    original = encode(FETCH.response, 16, fetch_value([endpoint(1, broker_host, 9092, "r1")], unknown=[(7, b"xyz")]))
    head, section = split_tail(original, 16)
    result = Rewriter(BOOK, "PLAINTEXT").rewrite_section(FETCH, 16, section)
    assert result is not None and len(result.body) == len(section)
    got = FetchResponse[16].decode(head + result.body)  # kafka-python: an independent reader
    endpoints = [(e.node_id, e.host, e.port, e.rack) for e in got.node_endpoints]
    fits = len(broker_host) >= len("sc1")
    assert endpoints == (expected if fits else [])
    assert bytes(got.responses[0].partitions[0].records) == RECORDS
    read: dict[int, tuple[int, int]] = {}
    skip_tags(memoryview(result.body), 0, len(result.body), read)
    assert bytes(result.body[slice(*read[7])]) == b"xyz"  # the unknown tag kept
    assert (len(broker_host) == len("sc1")) == (set(read) == {0, 7})  # a filler otherwise
    assert (0 in read) == fits


def test_a_section_naming_no_broker_or_unreadable() -> None:
    rewriter = Rewriter(BOOK, "PLAINTEXT")
    _, plain = split_tail(encode(FETCH.response, 16, fetch_value([])), 16)
    assert rewriter.rewrite_section(FETCH, 16, plain) is None
    assert rewriter.rewrite_section(FETCH, 11, b"") is None  # a version without the tag
    # Bytes after the section are read past (docs/protocol.md, "Leniency"): still nothing to do.
    assert rewriter.rewrite_section(FETCH, 16, plain + b"\x00") is None
    with pytest.raises(Truncated):  # one tag announced, none there: no client reads that
        rewriter.rewrite_section(FETCH, 16, b"\x01")


# -- the quick look (Router.rewrite_response) ---------------------------------------------


def _router() -> Router:
    return Router(R, LocalApiTable([]), NoUpstreamInfo(),
                  Rewriter(StaticAddressBook({2: HostPort("sidecar-2", 9092)}), "PLAINTEXT"))


def _outcome(router: Router, header: RequestHeader, frame: bytes) -> object:
    try:
        result = router.rewrite_response(header, 1, memoryview(frame))
    except ProtocolError as exc:
        return (type(exc), str(exc))
    return None if result is None else bytes(result)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_quick_look_answers_as_the_whole_reading(data: st.DataObject) -> None:
    """An answer whose top-level tags are empty goes as it came without a rewrite; every
    other one is read whole. The reference is the same router made to read every answer
    whole: the same bytes, or the same error, for generated answers (NodeEndpoints or not),
    the same mutated, cut, or with bytes after the body."""
    api, version = data.draw(st.sampled_from([(PRODUCE, v) for v in range(10, 14)] + [(FETCH, v) for v in (16, 17)]))
    value = data.draw(message_values(api.response, version))
    if data.draw(st.booleans()):
        value["NodeEndpoints"] = []  # the common answer: nothing to rewrite
    wire = bytearray(encode_response_header(7, 1) + encode(api.response, version, value))
    choice = data.draw(st.sampled_from(["as is", "mutated", "cut", "trailing"]))
    if choice == "mutated":
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    elif choice == "cut":
        wire = wire[: data.draw(st.integers(0, len(wire)))]
    elif choice == "trailing":
        wire += b"\x00\x01"
    header = RequestHeader(api.key, version, 7, "c", 2, 0)
    quick, whole = _router(), _router()
    whole._quick[(api.key, version)] = True  # no quick look: read whole
    assert _outcome(quick, header, bytes(wire)) == _outcome(whole, header, bytes(wire))
