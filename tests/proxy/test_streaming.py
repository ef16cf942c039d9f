"""Large responses forwarded while they arrive (cut-through), on memory streams under a
virtual clock (``Connection._stream_response``).

A scripted broker sends a response in pieces with pauses between them, so each test can
see what the client has received at every point: the bytes before the top-level tag
section reach the client before the broker has sent the rest; nothing overtakes an
answer that is due first; a tag section naming a broker is rewritten in its own length
(kafka-python reads the result); the client's bytes are the broker's everywhere else; a
broker that stops mid-response, or answers the wrong request, ends the connection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing
from kafka.protocol.consumer import FetchResponse

from protocol.apis import DEFAULT_REGISTRY, ApiRegistry
from protocol.leniency import QUIET, Leniency
from protocol.schema import encode
from proxy.config.keys import HostPort
from proxy.config.settings import ConnectionSettings
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.broker_link import STREAM_MIN
from proxy.datapath.connection import Connection, Parts
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.rewrite import Rewriter
from proxy.datapath.routing import Router
from proxy.local.api import Answer, Context, LocalApiTable, LocalRequest
from proxy.local.ports import Ports
from tests.proxy.test_connection_seam import (
    HEARTBEAT,
    LIST_OFFSETS,
    NoBrokers,
    NoUpstreamInfo,
    heartbeat_api,
    later,
    request_ids,
)

FETCH = DEFAULT_REGISTRY.api(1)
BOOK = StaticAddressBook({1: HostPort("sidecar-1.example", 19092)})
RECORDS = random.Random(7).randbytes(3 * STREAM_MIN)


def request(api_key: int, version: int, correlation_id: int) -> bytes:
    """A request frame with header v1 (v2 for Fetch v16: one empty tag section more)."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t"
    if api_key == FETCH.key and version >= 12:
        payload += b"\x00"
    return struct.pack(">i", len(payload)) + payload


def opaque_response(correlation_id: int, size: int) -> bytes:
    """A response the sidecar does not read (ListOffsets v1: nothing in it names a broker)."""
    body = struct.pack(">i", correlation_id) + random.Random(correlation_id).randbytes(size)
    return struct.pack(">i", len(body)) + body


def fetch_response(correlation_id: int, endpoints: list[tuple[int, str, int]]) -> bytes:
    """A Fetch v16 response (header v1) with one partition of :data:`RECORDS`."""
    body = encode(FETCH.response, 16, {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0,
        "Responses": [{"Topic": "", "TopicId": uuid.UUID(int=3), "Partitions": [{
            "PartitionIndex": 0, "ErrorCode": 6, "HighWatermark": 10, "LastStableOffset": 10,
            "LogStartOffset": 0, "AbortedTransactions": [], "PreferredReadReplica": -1,
            "Records": RECORDS, "CurrentLeader": {"LeaderId": 1, "LeaderEpoch": 2}}]}],
        "NodeEndpoints": [{"NodeId": n, "Host": h, "Port": p, "Rack": None} for n, h, p in endpoints],
    })  # fmt: skip
    payload = struct.pack(">i", correlation_id) + b"\x00" + body
    return struct.pack(">i", len(payload)) + payload


@dataclass
class ScriptedBroker:
    """Answers each request with ``answers[correlation id]``, in pieces of ``piece`` bytes
    with ``pause`` seconds between them (``stop_after``: close after that many bytes)."""

    answers: dict[int, bytes]
    piece: int = STREAM_MIN
    pause: float = 1.0
    stop_after: int | None = None
    received: list[int] = field(default_factory=list)

    async def serve(self, stream: trio.abc.Stream) -> None:
        with contextlib.suppress(trio.BrokenResourceError):  # the sidecar closed the link
            await self._serve(stream)

    async def _serve(self, stream: trio.abc.Stream) -> None:
        async for correlation_id in request_ids(stream):
            self.received.append(correlation_id)
            answer = self.answers[correlation_id]
            for at in range(0, len(answer), self.piece):
                if self.stop_after is not None and at >= self.stop_after:
                    await stream.aclose()
                    return
                await stream.send_all(answer[at : at + self.piece])
                if at + self.piece < len(answer):
                    await trio.sleep(self.pause)


@dataclass
class Harness:
    connection: Connection
    client: trio.abc.Stream
    metrics: SidecarMetrics
    observed: list[dict[str, Any]]


@dataclass
class RecordingTap:
    """Observers' hand-off, recorded (a shell test: what the connection gives them)."""

    seen: list[dict[str, Any]]
    blocked: bool = False

    def completed(self, **exchange: Any) -> None:
        self.seen.append(exchange)

    def retry(self) -> bool:
        return True


async def build(
    nursery: trio.Nursery,
    broker: ScriptedBroker,
    handler: Callable[[LocalRequest, Context], Answer] | None = None,
    observe: bool = False,
    leniency: Leniency = QUIET,
    decode: bool = False,
) -> Harness:
    registry: ApiRegistry = DEFAULT_REGISTRY
    local = [dataclasses.replace(heartbeat_api(handler), decode=decode)] if handler is not None else []
    table = LocalApiTable(local)
    rewriter = Rewriter(BOOK, "PLAINTEXT", leniency=leniency)
    router = Router(registry, table, NoUpstreamInfo(), rewriter)
    metrics = SidecarMetrics(registry)
    seen: list[dict[str, Any]] = []

    async def open_upstream() -> trio.abc.Stream:
        ours, theirs = trio.testing.memory_stream_pair()
        nursery.start_soon(broker.serve, theirs)
        return ours

    parts = Parts(
        settings=ConnectionSettings(), registry=registry, router=router, metrics=metrics,
        open_upstream=open_upstream, leniency=leniency,
        tap=(lambda _context: RecordingTap(seen)) if observe else (lambda _context: None),  # type: ignore[arg-type,return-value]
    )  # fmt: skip
    client, server_side = trio.testing.memory_stream_pair()
    context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 5),
                      ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers()))
    return Harness(Connection(parts, server_side, context), client, metrics, seen)


async def receive_until(client: trio.abc.Stream, have: bytearray, count: int) -> None:
    while len(have) < count:
        data = await client.receive_some(1 << 20)
        assert data, "the connection closed early"
        have += data


async def drain_available(client: trio.abc.Stream, have: bytearray) -> None:
    """Take what the client has been sent so far (within a millisecond)."""
    while True:
        with trio.move_on_after(0.001):
            data = await client.receive_some(1 << 20)
            if not data:
                return
            have += data
            continue
        return


async def received_until_closed(h: Harness) -> bytes:
    """Everything the client receives until the sidecar closes the connection (and has
    counted why)."""
    got = bytearray()
    while data := await h.client.receive_some(1 << 20):
        got += data
    await trio.testing.wait_all_tasks_blocked()
    return bytes(got)


def closed(h: Harness, reason: str) -> float | None:
    return h.metrics.registry.get_sample_value(
        "ksidecar_connections_closed_total", {"listener": "PLAINTEXT", "reason": reason})


def streamed(metrics: SidecarMetrics, api: str) -> float:
    value = metrics.registry.get_sample_value("ksidecar_streamed_responses_total", {"api": api})
    return value or 0.0


async def test_a_large_response_reaches_the_client_while_it_arrives(autojump_clock: trio.testing.MockClock) -> None:
    answer = opaque_response(1, 4 * STREAM_MIN)
    broker = ScriptedBroker({1: answer})
    got = bytearray()
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker)
        nursery.start_soon(h.connection.run)
        start = trio.current_time()
        await h.client.send_all(request(LIST_OFFSETS, 1, 1))
        await drain_available(h.client, got)
        # One piece sent, the broker pausing: the client has it already (store-and-forward
        # would have held every byte until the last piece, four seconds later).
        assert trio.current_time() - start < 0.01
        assert bytes(got) == answer[:STREAM_MIN]
        await receive_until(h.client, got, len(answer))
        assert bytes(got) == answer
        assert trio.current_time() - start == pytest.approx(4.0)
        await trio.testing.wait_all_tasks_blocked()  # the writer accounts for the rest
        assert streamed(h.metrics, "ListOffsets") == 1
        assert h.metrics.registry.get_sample_value(
            "ksidecar_response_bytes_total", {"api": "ListOffsets"}) == len(answer)
        await h.client.aclose()


async def test_nothing_overtakes_an_answer_due_first(autojump_clock: trio.testing.MockClock) -> None:
    """A local answer-later ahead of it: the large response waits, whole, behind it; a
    small forwarded answer after it leaves only once it is out."""
    large = opaque_response(2, 3 * STREAM_MIN)
    small = opaque_response(3, 10)
    broker = ScriptedBroker({2: large, 3: small}, pause=0.5)
    got = bytearray()
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker, later(5.0))
        nursery.start_soon(h.connection.run)
        start = trio.current_time()
        await h.client.send_all(request(HEARTBEAT, 0, 1) + request(LIST_OFFSETS, 1, 2) + request(LIST_OFFSETS, 1, 3))
        await trio.sleep(4.0)  # the broker has sent everything by 1 s
        await drain_available(h.client, got)
        assert got == b""
        heartbeat = struct.pack(">ii", 6, 1) + b"\x00\x00"
        await receive_until(h.client, got, len(heartbeat) + len(large) + len(small))
        assert bytes(got) == heartbeat + large + small
        assert trio.current_time() - start == pytest.approx(5.0)
        assert streamed(h.metrics, "ListOffsets") == 0  # it had arrived whole behind the heartbeat
        await h.client.aclose()


async def test_a_response_goes_on_from_the_moment_nothing_is_ahead_of_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Half of it arrived while an answer-later was due first: that half is held (read in
    place), then goes on with the rest as the rest arrives."""
    large = opaque_response(2, 4 * STREAM_MIN)
    broker = ScriptedBroker({2: large}, pause=1.0)
    got = bytearray()
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker, later(1.5))
        nursery.start_soon(h.connection.run)
        start = trio.current_time()
        await h.client.send_all(request(HEARTBEAT, 0, 1) + request(LIST_OFFSETS, 1, 2))
        heartbeat = struct.pack(">ii", 6, 1) + b"\x00\x00"
        await receive_until(h.client, got, len(heartbeat))
        await trio.sleep(1.0)  # t = 2.5: three pieces sent, two more to come
        await drain_available(h.client, got)
        assert bytes(got) == heartbeat + large[: 3 * STREAM_MIN]
        await receive_until(h.client, got, len(heartbeat) + len(large))
        assert bytes(got) == heartbeat + large
        assert trio.current_time() - start == pytest.approx(4.0)
        await trio.testing.wait_all_tasks_blocked()
        assert streamed(h.metrics, "ListOffsets") == 1
        await h.client.aclose()


async def test_a_small_answer_behind_a_streamed_one_waits_for_it(autojump_clock: trio.testing.MockClock) -> None:
    large = opaque_response(1, 3 * STREAM_MIN)
    small = opaque_response(2, 10)
    broker = ScriptedBroker({1: large, 2: small})
    got = bytearray()
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker)
        nursery.start_soon(h.connection.run)
        await h.client.send_all(request(LIST_OFFSETS, 1, 1) + request(LIST_OFFSETS, 1, 2))
        await receive_until(h.client, got, len(large) + len(small))
        assert bytes(got) == large + small
        assert streamed(h.metrics, "ListOffsets") == 1
        await h.client.aclose()


@pytest.mark.parametrize("broker_host", ["b1", "broker-1.internal.example.com"])
async def test_a_tag_section_naming_a_broker_is_rewritten_in_its_own_length(
    autojump_clock: trio.testing.MockClock, broker_host: str
) -> None:
    answer = fetch_response(1, [(1, broker_host, 9092)])
    broker = ScriptedBroker({1: answer}, piece=STREAM_MIN // 3)
    got = bytearray()
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker, observe=True)
        nursery.start_soon(h.connection.run)
        await h.client.send_all(request(FETCH.key, 16, 1))
        await trio.sleep(2.5)  # a few pieces in: the records are on their way already
        await drain_available(h.client, got)
        assert len(got) > STREAM_MIN // 2 and bytes(got) == answer[: len(got)]
        await receive_until(h.client, got, len(answer))
        assert len(got) == len(answer)
        response = FetchResponse[16].decode(bytes(got[9:]))  # kafka-python: an independent reader
        assert bytes(response.responses[0].partitions[0].records) == RECORDS
        endpoints = [(e.node_id, e.host, e.port) for e in response.node_endpoints]
        fits = len(broker_host) >= len("sidecar-1.example")
        # Shorter than the broker's: a filler tag takes the rest. Longer: dropped, as an
        # unmapped broker is (the client asks Metadata, which names sidecars).
        assert endpoints == ([(1, "sidecar-1.example", 19092)] if fits else [])
        await trio.testing.wait_all_tasks_blocked()
        assert streamed(h.metrics, "Fetch") == 1
        # Observers get the frame as the client got it.
        (exchange,) = h.observed
        assert bytes(exchange["response"]) == bytes(got)
        await h.client.aclose()


async def test_a_broker_that_stops_mid_response_ends_the_connection(autojump_clock: trio.testing.MockClock) -> None:
    answer = opaque_response(1, 4 * STREAM_MIN)
    broker = ScriptedBroker({1: answer}, stop_after=2 * STREAM_MIN)
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker)
        nursery.start_soon(h.connection.run)
        await h.client.send_all(request(LIST_OFFSETS, 1, 1))
        got = await received_until_closed(h)
        # What had come went on (the client sees the connection end inside the frame).
        assert got == answer[: 2 * STREAM_MIN]
        assert closed(h, "upstream_reset") == 1


async def test_the_wrong_answer_is_refused_before_a_byte_of_it_goes_on(autojump_clock: trio.testing.MockClock) -> None:
    broker = ScriptedBroker({1: opaque_response(9, 4 * STREAM_MIN)})
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker)
        nursery.start_soon(h.connection.run)
        await h.client.send_all(request(LIST_OFFSETS, 1, 1))
        assert await received_until_closed(h) == b""
        assert closed(h, "correlation_mismatch") == 1


async def test_a_response_that_cannot_be_read_ends_the_connection(autojump_clock: trio.testing.MockClock) -> None:
    """A Fetch response whose records announce more bytes than the frame holds: what went
    before them went on, the rest does not, and the connection ends as bad_response."""
    answer = bytearray(fetch_response(1, []))
    at = answer.index(RECORDS[:64])
    answer[at - 3 : at] = b"\xff\xff\x7f"  # the records' compact length: 2 MiB, past the end
    broker = ScriptedBroker({1: bytes(answer)}, pause=0.5)
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker)
        nursery.start_soon(h.connection.run)
        await h.client.send_all(request(FETCH.key, 16, 1))
        got = await received_until_closed(h)
        assert len(got) < at and answer.startswith(got)
        assert closed(h, "bad_response") == 1


@dataclass
class SplitBroker:
    """Answers request 1 with ``answer`` cut at ``cuts``, a second's pause after each piece
    (a broker, or the network, may deliver a size prefix alone)."""

    answer: bytes
    cuts: tuple[int, ...]

    async def serve(self, stream: trio.abc.Stream) -> None:
        async for _ in request_ids(stream):
            at = 0
            for cut in self.cuts:
                await stream.send_all(self.answer[at:cut])
                await trio.sleep(1.0)
                at = cut
            await stream.send_all(self.answer[at:])


@pytest.mark.parametrize("cuts", [(4,), (4, 6), (4, 8, 9), (7, 12)], ids=str)
async def test_a_response_whose_header_arrives_in_pieces_streams_whole(
        autojump_clock: trio.testing.MockClock, cuts: tuple[int, ...]) -> None:
    """The size prefix alone, then the correlation id in pieces, then the header's tag
    section (Fetch v16, header v1): the sidecar reads on for the header and streams the
    answer, byte for byte, instead of taking a short read for a bad response."""
    answer = fetch_response(1, [])
    got = bytearray()
    async with trio.open_nursery() as nursery:
        h = await build(nursery, SplitBroker(answer, cuts))  # type: ignore[arg-type]
        nursery.start_soon(h.connection.run)
        await h.client.send_all(request(FETCH.key, 16, 1))
        await receive_until(h.client, got, len(answer))
        assert bytes(got) == answer
        await trio.testing.wait_all_tasks_blocked()
        assert streamed(h.metrics, "Fetch") == 1
        assert closed(h, "bad_response") is None
        await h.client.aclose()
