"""Responses with bytes after their body are rewritten, and those bytes follow unchanged.

Clients stop reading a response where its schema ends (librdkafka and kafka-python both read
librdkafka's mock-cluster Metadata, whose flexible versions carry the top-level tag section
twice), so the sidecar must not refuse what they read (docs/protocol.md, "Leniency"). The
oracle is the same response without the extra bytes: rewriting ``body + extra`` must give
exactly what rewriting ``body`` gives, followed by ``extra``, and report the leniency once.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataResponse

from protocol.apis import DEFAULT_REGISTRY as R
from protocol.apis import Api
from protocol.schema import encode
from proxy.config.keys import HostPort
from proxy.datapath.rewrite import SITES, TRAILING_BYTES, Rewriter, rewrites_version
from tests.protocol.strategies import message_values

SIDECAR = HostPort("sidecar.example", 19092)


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
@given(data=st.data(), extra=st.binary(min_size=1, max_size=16))
def test_bytes_after_the_body_follow_the_rewritten_body_unchanged(
    api: Api, version: int, data: st.DataObject, extra: bytes
) -> None:
    body = encode(api.response, version, data.draw(message_values(api.response, version)))
    reported: list[tuple[str, str, int]] = []
    plain = Rewriter(EveryBroker(), "PLAINTEXT").rewrite(api, version, body)
    lenient = Rewriter(EveryBroker(), "PLAINTEXT", on_lenient=lambda *a: reported.append(a))
    result = lenient.rewrite(api, version, body + extra)
    assert reported == [(api.name, TRAILING_BYTES, len(extra))]
    if plain is None:
        assert result is None  # nothing named a broker: the broker's bytes go on, extra included
    else:
        assert result is not None
        assert (result.body, result.rewritten, result.unmapped) == (
            plain.body + extra, plain.rewritten, plain.unmapped)


def test_a_response_without_extra_bytes_reports_nothing() -> None:
    api = R.api(3)
    body = encode(api.response, 13, metadata_v13([(1, "broker-1", 9092)]))
    reported: list[Any] = []
    result = Rewriter(EveryBroker(), "PLAINTEXT", on_lenient=lambda *a: reported.append(a)).rewrite(
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


async def test_through_a_connection_the_client_gets_the_rewritten_body_and_the_extra_byte(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A scripted broker answers Metadata v12 as librdkafka's mock cluster does (one byte
    after the body): the client's frame is the rewritten body, then that byte, and
    kafka-python reads it; the deviation is counted, the connection stays open."""
    from tests.proxy.test_streaming import ScriptedBroker, build

    metadata = R.api(3)
    body = encode(metadata.response, 12, metadata_v12([(1, "10.9.8.7", 9092)]))
    answer = struct.pack(">i", 1) + b"\x00" + body + b"\x00"  # header v1, body, the extra byte
    request_body = encode(metadata.request, 12, {"Topics": None, "AllowAutoTopicCreation": False,
                                                 "IncludeTopicAuthorizedOperations": False})
    head = struct.pack(">hhih", 3, 12, 1, 1) + b"t\x00"  # request header v2
    lenient: list[tuple[str, str, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, ScriptedBroker({1: struct.pack(">i", len(answer)) + answer}),
                        on_lenient=lambda *a: lenient.append(a))
        nursery.start_soon(h.connection.run)
        await h.client.send_all(struct.pack(">i", len(head) + len(request_body)) + head + request_body)
        size = struct.unpack(">i", await receive_exactly(h.client, 4))[0]
        frame = await receive_exactly(h.client, size)
        assert frame[:5] == struct.pack(">i", 1) + b"\x00" and frame.endswith(b"\x00\x00")
        decoded = MetadataResponse[12].decode(frame[5:])  # kafka-python reads what follows
        assert [(b[0], b[1], b[2]) for b in decoded.brokers] == [(1, "sidecar-1.example", 19092)]
        assert lenient == [("Metadata", TRAILING_BYTES, 1)]
        assert h.metrics.registry.get_sample_value(
            "ksidecar_connections_closed_total", {"listener": "PLAINTEXT", "reason": "bad_response"}) is None
        await h.client.aclose()


async def receive_exactly(stream: trio.abc.Stream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = await stream.receive_some(n - len(got))
        assert data, f"closed after {len(got)} of {n} bytes"
        got += data
    return bytes(got)
