"""The connection on memory streams under trio's virtual clock: no broker, no real sleeps.

A :class:`~proxy.datapath.connection.Connection` is built from its parts: a client stream
(one end of ``memory_stream_pair``), an upstream factory that hands out the other end of a
second pair (driven here by a tiny fake broker), a local-API table, and settings. Every
test runs under ``MockClock(autojump_threshold=0)`` (the ``autojump_clock`` fixture), so a
5-second answer-later takes no wall time.

Frames are written by hand: ListOffsets v1 (api key 2) is forwarded (the router has no
upstream info, so every key the registry knows goes to the broker), Heartbeat v0 (api key
12) is answered by a test-local API. Both use request header v1 and response header v0.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

from protocol.apis import ApiRegistry
from proxy.config.settings import ConnectionSettings
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.connection import Connection, Parts
from proxy.datapath.errors import UpstreamError
from proxy.datapath.idle import IdleSweeper
from proxy.datapath.memory import RequestMemory
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.rewrite import Rewriter
from proxy.datapath.routing import Router
from proxy.local.api import (
    Answer,
    Close,
    Context,
    Later,
    LocalApi,
    LocalApiTable,
    LocalRequest,
    Respond,
)
from proxy.local.ports import BrokerEntry, Ports, UpstreamInfo

LIST_OFFSETS = 2
HEARTBEAT = 12


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request frame with header v1 (client id ``t``)."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t" + body
    return struct.pack(">i", len(payload)) + payload


def response_ids(data: bytes) -> list[int]:
    """The correlation ids of the (header v0) response frames in ``data``."""
    ids = []
    while data:
        size = struct.unpack(">i", data[:4])[0]
        ids.append(struct.unpack(">i", data[4:8])[0])
        data = data[4 + size :]
    return ids


class NoUpstreamInfo:
    """The control connection has not learned anything (every known key is forwarded)."""

    info: UpstreamInfo | None = None


class NoBrokers:
    def broker_entries(self, listener: str) -> tuple[BrokerEntry, list[BrokerEntry]]:
        return BrokerEntry(1, "h", 1), []


async def request_ids(stream: trio.abc.Stream) -> AsyncIterator[int]:
    """The correlation id of each request frame read from ``stream``, until it closes."""
    buffer = b""
    while data := await stream.receive_some(65536):
        buffer += data
        while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
            size = struct.unpack(">i", buffer[:4])[0]
            frame, buffer = buffer[4 : 4 + size], buffer[4 + size :]
            yield struct.unpack(">i", frame[4:8])[0]


@dataclass
class FakeBroker:
    """Answers every request frame at once with its correlation id and two zero bytes."""

    received: list[tuple[float, int]] = field(default_factory=list)
    hold: bool = False
    stream: trio.abc.Stream | None = None

    async def serve(self, stream: trio.abc.Stream) -> None:
        async for correlation_id in request_ids(stream):
            self.received.append((trio.current_time(), correlation_id))
            self.stream = stream
            if not self.hold:
                await self.answer(correlation_id)

    async def answer(self, correlation_id: int) -> None:
        """Send the answer to one request (for requests received while holding)."""
        assert self.stream is not None
        await self.stream.send_all(struct.pack(">ii", 6, correlation_id) + b"\x00\x00")


@dataclass
class Harness:
    connection: Connection
    client: trio.abc.Stream
    broker: FakeBroker


def heartbeat_api(handler: Callable[[LocalRequest, Context], Answer]) -> LocalApi:
    return LocalApi(key=HEARTBEAT, name="Heartbeat", versions=(0, 4), handler=handler, decode=False)


async def build(
    nursery: trio.Nursery,
    handler: Callable[[LocalRequest, Context], Answer] | None = None,
    settings: ConnectionSettings | None = None,
    broker: FakeBroker | None = None,
    idle: IdleSweeper | None = None,
) -> Harness:
    registry = ApiRegistry()
    table = LocalApiTable([heartbeat_api(handler)] if handler is not None else [])
    router = Router(registry, table, NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    fake = broker or FakeBroker()

    async def open_upstream() -> trio.abc.Stream:
        ours, theirs = trio.testing.memory_stream_pair()
        nursery.start_soon(fake.serve, theirs)
        return ours

    parts = Parts(
        settings=settings or ConnectionSettings(),
        registry=registry,
        router=router,
        metrics=SidecarMetrics(registry),
        open_upstream=open_upstream,
        idle=idle,
    )
    client, server_side = trio.testing.memory_stream_pair()
    context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 5), ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers()))
    return Harness(Connection(parts, server_side, context), client, fake)


async def read_responses(client: trio.abc.Stream, count: int, into: list[tuple[float, int]]) -> None:
    buffer = b""
    while len(into) < count:
        data = await client.receive_some(65536)
        assert data, "the connection closed early"
        buffer += data
        while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
            size = struct.unpack(">i", buffer[:4])[0]
            frame, buffer = buffer[: 4 + size], buffer[4 + size :]
            into.append((trio.current_time(), response_ids(frame)[0]))


def later(seconds: float, body: bytes = b"\x00\x00", finished: list[str] | None = None) -> Callable[[LocalRequest, Context], Answer]:
    def handler(request: LocalRequest, context: Context) -> Answer:
        async def answer() -> Respond:
            try:
                await trio.sleep(seconds)
            finally:
                if finished is not None:
                    finished.append("cancelled" if trio.current_effective_deadline() < float("inf") else "done")
            return Respond(body=body)

        return Later(answer=answer)

    return handler


async def test_answer_later_does_not_hold_forwarded_requests(autojump_clock: trio.testing.MockClock) -> None:
    got: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, later(5.0))
        nursery.start_soon(h.connection.run)
        start = trio.current_time()
        await h.client.send_all(request(LIST_OFFSETS, 1, 1) + request(HEARTBEAT, 0, 2) + request(LIST_OFFSETS, 1, 3))
        await read_responses(h.client, 3, got)
        # Both forwarded requests reached the broker at once, before and after the held one.
        assert [cid for _, cid in h.broker.received] == [1, 3]
        assert all(t - start < 0.001 for t, _ in h.broker.received)
        # Answers leave in request order: 1 at once, then 2 (after 5 s) and 3 behind it.
        assert [cid for _, cid in got] == [1, 2, 3]
        assert got[0][0] - start < 0.001
        assert got[1][0] - start == pytest.approx(5.0)
        assert got[2][0] - start == pytest.approx(5.0)
        await h.client.aclose()


async def test_requests_after_a_held_answer_are_read_and_forwarded(autojump_clock: trio.testing.MockClock) -> None:
    """The pump reads on while an answer-later waits: a request sent a second later goes at once."""
    got: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, later(5.0))
        nursery.start_soon(h.connection.run)
        start = trio.current_time()
        await h.client.send_all(request(HEARTBEAT, 0, 1))
        await trio.sleep(1.0)
        await h.client.send_all(request(LIST_OFFSETS, 1, 2))
        await read_responses(h.client, 2, got)
        assert h.broker.received[0][0] - start == pytest.approx(1.0)
        assert [cid for _, cid in got] == [1, 2]
        assert got[1][0] - start == pytest.approx(5.0)
        await h.client.aclose()


async def test_in_flight_bound_counts_answers_later(autojump_clock: trio.testing.MockClock) -> None:
    """With room for two answers, a third request waits until the held one is answered."""
    got: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, later(5.0), ConnectionSettings(max_in_flight=2))
        nursery.start_soon(h.connection.run)
        start = trio.current_time()
        await h.client.send_all(request(HEARTBEAT, 0, 1) + request(HEARTBEAT, 0, 2) + request(LIST_OFFSETS, 1, 3))
        await read_responses(h.client, 3, got)
        # Request 3 was not forwarded until the first two answers went out at t=5.
        assert h.broker.received == [(pytest.approx(start + 5.0), 3)]
        assert [cid for _, cid in got] == [1, 2, 3]
        await h.client.aclose()


async def test_idle_timeout_closes_a_quiet_connection_but_not_a_waiting_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    got: list[tuple[float, int]] = []
    sweeper = IdleSweeper(10.0)  # looks every second
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweeper.run)
        h = await build(nursery, later(30.0), idle=sweeper)
        start = trio.current_time()
        nursery.start_soon(h.connection.run)
        await h.client.send_all(request(HEARTBEAT, 0, 1))
        # Waiting 30 s for its answer is not idle: the answer arrives.
        await read_responses(h.client, 1, got)
        assert got[0][0] - start == pytest.approx(30.0)
        # Then nothing for the idle timeout: the sidecar closes the connection, within a
        # sweep (a second) of 10 s after it stopped waiting.
        assert await h.client.receive_some(10) == b""
        assert 39.0 <= trio.current_time() - start <= 41.0
        assert len(sweeper) == 0
        nursery.cancel_scope.cancel()


async def test_drain_answers_what_is_in_flight_then_closes(autojump_clock: trio.testing.MockClock) -> None:
    got: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, later(2.0))
        nursery.start_soon(h.connection.run)
        await h.client.send_all(request(HEARTBEAT, 0, 1) + request(LIST_OFFSETS, 1, 2))
        await trio.testing.wait_all_tasks_blocked()
        h.connection.stop_reading()
        await h.client.send_all(request(LIST_OFFSETS, 1, 3))  # after the drain began: not read
        await read_responses(h.client, 2, got)
        assert [cid for _, cid in got] == [1, 2]
        assert await h.client.receive_some(10) == b""
        assert [cid for _, cid in h.broker.received] == [2]


async def test_a_closed_client_cancels_answers_later(autojump_clock: trio.testing.MockClock) -> None:
    finished: list[str] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, later(60.0, finished=finished))
        nursery.start_soon(h.connection.run)
        start = trio.current_time()
        await h.client.send_all(request(HEARTBEAT, 0, 1))
        await trio.testing.wait_all_tasks_blocked()
        await h.client.aclose()
    assert finished == ["cancelled"]
    assert trio.current_time() - start < 1.0


async def test_close_answer_is_sent_in_order_then_the_connection_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def refuse(request: LocalRequest, context: Context) -> Answer:
        return Close(reason="test_refused", detail="refused", answer=Respond(body=b"\x00\x0e"), linger=1.0)

    got: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, refuse)
        nursery.start_soon(h.connection.run)
        start = trio.current_time()
        await h.client.send_all(request(LIST_OFFSETS, 1, 1) + request(HEARTBEAT, 0, 2) + request(LIST_OFFSETS, 1, 3))
        await read_responses(h.client, 2, got)
        assert [cid for _, cid in got] == [1, 2]
        assert await h.client.receive_some(10) == b""
        assert trio.current_time() - start == pytest.approx(1.0)
        # The request after the refused one was never forwarded.
        assert [cid for _, cid in h.broker.received] == [1]


async def test_backpressure_stops_reading_a_client_that_does_not_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client that sends but never reads is read no further once its answers fill the FIFO.

    ``lockstep_stream_pair``: a write completes only when the other side reads, so the
    writer blocks on the first batch and the answers behind it stay in the FIFO.
    """
    broker = FakeBroker()
    sent = 0
    async with trio.open_nursery() as nursery:
        h = await build(nursery, settings=ConnectionSettings(max_in_flight=4), broker=broker)
        client, server_side = trio.testing.lockstep_stream_pair()
        connection = Connection(h.connection.parts, server_side, h.connection.context)
        nursery.start_soon(connection.run)

        async def send_all_requests() -> None:
            nonlocal sent
            for i in range(50):
                await client.send_all(request(LIST_OFFSETS, 1, i))
                sent += 1

        nursery.start_soon(send_all_requests)
        await trio.sleep(10.0)
        stalled = len(broker.received)
        assert 4 <= stalled <= 8, stalled  # the in-flight bound, plus the batch being written
        assert sent < 50
        got: list[tuple[float, int]] = []
        await read_responses(client, 50, got)
        assert [cid for _, cid in got] == list(range(50))
        assert len(broker.received) == 50
        await client.aclose()


async def test_upstream_unreachable_closes_with_its_reason(autojump_clock: trio.testing.MockClock) -> None:
    registry = ApiRegistry()
    router = Router(registry, LocalApiTable([]), NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    failures: list[tuple[str, bool]] = []

    async def no_broker() -> trio.abc.Stream:
        raise UpstreamError("broker 127.0.0.1:1 unreachable")

    metrics = SidecarMetrics(registry)
    parts = Parts(settings=ConnectionSettings(), registry=registry, router=router, metrics=metrics,
                  open_upstream=no_broker, upstream_failed=lambda *why: failures.append(why))
    client, server_side = trio.testing.memory_stream_pair()
    context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 5), ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers()))
    await client.send_all(request(LIST_OFFSETS, 1, 1))
    await Connection(parts, server_side, context).run()
    assert await client.receive_some(10) == b""
    value = metrics.registry.get_sample_value(
        "ksidecar_connections_closed_total", {"listener": "PLAINTEXT", "reason": "upstream_unreachable"}
    )
    assert value == 1.0
    assert failures == [("broker 127.0.0.1:1 unreachable", True)]  # readiness is told at once


async def test_the_broker_is_dialled_only_for_a_request_it_must_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A connection that only asks the sidecar, or sends half a frame, costs the broker nothing."""
    dials: list[float] = []
    got: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, later(0.0))
        opener = h.connection.parts.open_upstream

        async def counting() -> trio.abc.Stream:
            dials.append(trio.current_time())
            return await opener()

        parts = Parts(**{**h.connection.parts.__dict__, "open_upstream": counting})
        connection = Connection(parts, h.connection.client, h.connection.context)
        nursery.start_soon(connection.run)
        await h.client.send_all(request(HEARTBEAT, 0, 1) + request(LIST_OFFSETS, 1, 2)[:7])
        await read_responses(h.client, 1, got)
        await trio.sleep(5)
        assert dials == []
        await h.client.send_all(request(LIST_OFFSETS, 1, 2)[7:])
        await read_responses(h.client, 2, got)
        assert len(dials) == 1
        assert [cid for _, cid in got] == [1, 2]
        await h.client.aclose()


async def test_drain_stops_at_a_frame_boundary_and_forwards_all_it_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Requests read in one chunk before the drain are all forwarded and answered; a partial
    frame is dropped; the connection half-closes, reads what the client still sends, closes."""
    broker = FakeBroker()
    got: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        h = await build(nursery, broker=broker)
        nursery.start_soon(h.connection.run)
        broker.hold = True  # nothing is answered yet: every request stays in flight
        await h.client.send_all(b"".join(request(LIST_OFFSETS, 1, i) for i in range(100))
                                + request(LIST_OFFSETS, 1, 100)[:9])
        await trio.testing.wait_all_tasks_blocked()
        h.connection.stop_reading()
        assert h.connection.unanswered == 100
        assert [cid for _, cid in broker.received] == list(range(100))
        broker.hold = False
        # The fake broker answers what it receives from now on; answer the held ones too.
        upstream = h.connection.link.stream
        assert upstream is not None
        for i in range(100):
            await broker.answer(i)
        await read_responses(h.client, 100, got)
        assert [cid for _, cid in got] == list(range(100))
        await h.client.send_all(b"late bytes")  # read and discarded, no reset
        assert await h.client.receive_some(10) == b""  # FIN after the last answer
        await h.client.aclose()


async def test_request_memory_bound_stops_new_large_reads_and_keeps_a_share_for_small_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """queued.max.request.bytes: a half-read large frame holds its whole size; another
    connection's large frame waits for it, its small one goes on in the share kept for
    small frames; when that share is taken too, small frames wait as well."""
    memory = RequestMemory(1000, small_share=300, small_frame=200)
    broker = FakeBroker()
    async with trio.open_nursery() as nursery:
        a = await build(nursery, broker=broker)
        parts = Parts(**{**a.connection.parts.__dict__, "memory": memory})

        async def connect() -> trio.abc.Stream:
            client, server = trio.testing.memory_stream_pair()
            nursery.start_soon(Connection(parts, server, a.connection.context).run)
            return client

        first = await connect()
        big = request(LIST_OFFSETS, 1, 1, b"x" * 5000)
        await first.send_all(big[:3000])
        await trio.testing.wait_all_tasks_blocked()
        assert (memory.used, memory.small_used) == (len(big), 0)  # the whole frame, over the bound

        second = await connect()
        await second.send_all(request(LIST_OFFSETS, 1, 2, b"y" * 500)[:300])  # large: waits
        third = await connect()
        small = request(LIST_OFFSETS, 1, 3, b"z" * 150)
        await third.send_all(small)
        await read_responses(third, 1, [])
        assert [cid for _, cid in broker.received] == [3]  # the small one went on at once
        assert memory.small_used == 0  # and gave its share back

        holders = [await connect() for _ in range(2)]  # two half-sent small frames: the share is taken
        for n, holder in enumerate(holders):
            await holder.send_all(request(LIST_OFFSETS, 1, 10 + n, b"h" * 150)[:100])
        await trio.testing.wait_all_tasks_blocked()
        assert memory.small_used == 2 * len(small)
        fourth = await connect()  # (a pump already in its read takes what arrives whole)
        await fourth.send_all(request(LIST_OFFSETS, 1, 4))
        await trio.sleep(10)
        assert [cid for _, cid in broker.received] == [3]  # now small frames wait too

        # The large frame completes: room in the main pool, for the waiting large frame and
        # the small one both (whichever the scheduler wakes first).
        await first.send_all(big[3000:])
        await read_responses(first, 1, [])
        await read_responses(fourth, 1, [])
        assert [cid for _, cid in broker.received][:3] == [3, 1, 4]
        for stream in (first, second, third, fourth, *holders):
            await stream.aclose()
    assert (memory.used, memory.small_used) == (0, 0)


async def test_a_request_frame_that_does_not_arrive_in_time_closes_its_own_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """socket.request.read.timeout.ms: a client that announces a large frame and stops is
    closed once the time from its first bytes has passed; its memory goes back, and the
    frame that waited for it is read."""
    memory = RequestMemory(1000, small_share=0)
    broker = FakeBroker()
    sweeper = IdleSweeper(600.0, read_timeout=30.0)  # looks every second
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweeper.run)
        a = await build(nursery, broker=broker)
        parts = Parts(**{**a.connection.parts.__dict__, "memory": memory, "idle": sweeper})
        stalled_client, stalled_server = trio.testing.memory_stream_pair()
        nursery.start_soon(Connection(parts, stalled_server, a.connection.context).run)
        began = trio.current_time()
        await stalled_client.send_all(request(LIST_OFFSETS, 1, 1, b"x" * 5000)[:2000])
        await trio.sleep(20)
        await stalled_client.send_all(b"x" * 100)  # trickling bytes do not reset the clock
        waiting_client, waiting_server = trio.testing.memory_stream_pair()
        nursery.start_soon(Connection(parts, waiting_server, a.connection.context).run)
        await waiting_client.send_all(request(LIST_OFFSETS, 1, 2))
        assert await stalled_client.receive_some(10) == b""  # closed, unanswered
        assert 30.0 <= trio.current_time() - began <= 31.0  # at the sweep's precision
        await trio.testing.wait_all_tasks_blocked()  # the connection counts after closing
        closed = a.connection.metrics.registry.get_sample_value(
            "ksidecar_connections_closed_total", {"listener": "PLAINTEXT", "reason": "request_read_timeout"})
        assert closed == 1
        await read_responses(waiting_client, 1, [])  # its memory went back: the other is read
        assert [cid for _, cid in broker.received] == [2] and memory.used == 0
        await waiting_client.aclose()
        nursery.cancel_scope.cancel()  # the sweeper runs forever


async def test_a_frame_waiting_on_the_sidecars_backpressure_does_not_time_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The read timeout counts the client's time only: while the sidecar does not read
    (its in-flight bound reached, the broker slow), the frame's clock stands still."""
    broker = FakeBroker(hold=True)
    sweeper = IdleSweeper(600.0, read_timeout=30.0)
    got: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweeper.run)
        h = await build(nursery, broker=broker, settings=ConnectionSettings(max_in_flight=1), idle=sweeper)
        nursery.start_soon(h.connection.run)
        second = request(LIST_OFFSETS, 1, 2, b"x" * 100)
        await h.client.send_all(request(LIST_OFFSETS, 1, 1) + second[:50])  # one read: 1, half of 2
        await trio.sleep(40)  # the broker holds 1: the sidecar may not read on
        await broker.answer(1)
        await h.client.send_all(second[50:])
        await trio.sleep(0.1)
        await broker.answer(2)
        await read_responses(h.client, 2, got)
        assert [cid for _, cid in got] == [1, 2]  # served, not closed
        await h.client.aclose()
        nursery.cancel_scope.cancel()
