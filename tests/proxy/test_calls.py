"""The worker-to-owner call channel (proxy/control/calls.py): its codec and both ends, on
trio's virtual clock over memory streams."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from proxy.control import calls
from proxy.control.calls import ChannelError, Decoder, OwnerClient, serve_calls
from proxy.local.api import Close, Respond
from proxy.local.remote import RemoteCall

CALL = RemoteCall(listener="PLAINTEXT", peer=("127.0.0.9", 40000), principal="User:alice",
                  client_software=("librdkafka", "2.3.0"), api_key=12, api_version=4, correlation_id=7,
                  client_id="c1", body=b"\x00\x01body")


def test_a_call_message_is_its_fields_and_its_body_by_hand() -> None:
    message = calls.call_message(5, CALL)
    size, kind, call_id, meta_size = struct.unpack_from(">IBII", message)
    assert (kind, call_id) == (1, 5)
    assert size == len(message) - 4
    meta = message[13:13 + meta_size]
    # api key 12, v4, correlation id 7, port 40000; then six strings, each u16 size + UTF-8
    assert meta == (b"\x00\x0c" b"\x00\x04" b"\x00\x00\x00\x07" b"\x9c\x40"
                    b"\x00\x09PLAINTEXT" b"\x00\x09127.0.0.9" b"\x00\x0aUser:alice" b"\x00\x02c1"
                    b"\x00\x0alibrdkafka" b"\x00\x052.3.0")
    assert message[13 + meta_size:] == b"\x00\x01body"
    [decoded] = list(Decoder().feed(message))
    assert calls.read_call(decoded) == CALL
    anonymous = calls.call_message(6, _call(1))  # no client id, no software: 0xFFFF sizes
    assert anonymous.count(b"\xff\xff") == 3
    [decoded] = list(Decoder().feed(anonymous))
    assert calls.read_call(decoded) == _call(1)


def test_answers_round_trip_respond_and_close_with_a_last_answer() -> None:
    respond = Respond(body=b"\x00\x00", version=3)
    close = Close(reason="bad_request", detail="no", answer=Respond(body=b"\x01", version=None), linger=0.5)
    bare = Close(reason="owner_error", detail="boom")
    for answer in (respond, close, bare):
        [message] = list(Decoder().feed(calls.answer_message(9, answer)))
        assert message.call_id == 9
        assert calls.read_answer(message) == answer


@given(st.lists(st.integers(min_value=1, max_value=40), max_size=30))
def test_messages_split_anywhere_decode_the_same(cuts: list[int]) -> None:
    stream = (calls.call_message(1, CALL) + calls.encode(calls.CANCEL, 2) + calls.answer_message(3, Respond(body=b"x"))
              + calls.ended_message("PLAINTEXT", ("127.0.0.1", 9)))
    decoder, at = Decoder(), 0
    got: list[calls.Message] = []
    for cut in cuts:
        got.extend(decoder.feed(stream[at:at + cut]))
        at += cut
    got.extend(decoder.feed(stream[at:]))
    assert [(m.kind, m.call_id) for m in got] == [(1, 1), (2, 2), (3, 3), (4, 0)]


@given(st.binary(max_size=200))
def test_garbage_is_a_channel_error_or_waits_for_more_never_another_error(data: bytes) -> None:
    try:
        for message in Decoder().feed(data):
            if message.kind == calls.CALL:
                calls.read_call(message)
            elif message.kind == calls.ANSWER:
                calls.read_answer(message)
            elif message.kind == calls.ENDED:
                calls.read_ended(message)
    except ChannelError:
        pass


def test_a_bad_head_is_refused() -> None:
    with pytest.raises(ChannelError, match="kind 9"):
        list(Decoder().feed(struct.pack(">IBI", 5, 9, 1)))
    with pytest.raises(ChannelError, match="size"):
        list(Decoder().feed(struct.pack(">IBI", calls.MAX_MESSAGE + 1, 1, 1)))


async def test_calls_are_answered_out_of_order_and_a_cancelled_call_is_cancelled_at_the_owner(
        autojump_clock: trio.testing.MockClock) -> None:
    worker_end, owner_end = trio.testing.memory_stream_pair()
    cancelled: list[int] = []

    async def answer(call: RemoteCall) -> Respond | Close:
        try:
            await trio.sleep(call.correlation_id)  # a later correlation id answers later
        except trio.Cancelled:
            cancelled.append(call.correlation_id)
            raise
        return Respond(body=call.body, version=call.correlation_id)

    client = OwnerClient(worker_end)
    order: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_calls, owner_end, lambda call: lambda: answer(call), "worker 0")
        nursery.start_soon(client.run)

        async def one(correlation_id: int) -> None:
            got = await client.send(_call(correlation_id)).answer()
            assert got == Respond(body=b"%d" % correlation_id, version=correlation_id)
            order.append(correlation_id)

        async with trio.open_nursery() as calls_made:
            calls_made.start_soon(one, 30)
            calls_made.start_soon(one, 10)
            with trio.move_on_after(5):  # given up on: the owner hears of it
                await client.send(_call(20)).answer()
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert order == [10, 30]
    assert cancelled == [20]


async def test_when_the_owner_is_gone_a_waiting_call_and_later_ones_close_their_connection(
        autojump_clock: trio.testing.MockClock) -> None:
    worker_end, owner_end = trio.testing.memory_stream_pair()
    client = OwnerClient(worker_end)
    results: list[Respond | Close] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)

        async def waiting() -> None:
            results.append(await client.send(_call(1)).answer())

        nursery.start_soon(waiting)
        await trio.sleep(1)
        await owner_end.aclose()
    assert len(results) == 1 and isinstance(results[0], Close) and results[0].reason == "owner_unreachable"
    later = await client.send(_call(2)).answer()
    assert isinstance(later, Close) and later.reason == "owner_unreachable"


async def test_a_handler_that_raises_costs_its_request_only(autojump_clock: trio.testing.MockClock) -> None:
    worker_end, owner_end = trio.testing.memory_stream_pair()

    def begin(call: RemoteCall) -> calls.Begun:
        if call.correlation_id == 1:
            raise RuntimeError("a bug")
        if call.correlation_id == 3:
            async def later() -> Respond | Close:
                raise RuntimeError("a later bug")
            return later
        return Respond(body=b"ok")

    client = OwnerClient(worker_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_calls, owner_end, begin, "worker 0")
        nursery.start_soon(client.run)
        failed = await client.send(_call(1)).answer()
        fine = await client.send(_call(2)).answer()
        failed_later = await client.send(_call(3)).answer()
        nursery.cancel_scope.cancel()
    assert isinstance(failed, Close) and failed.reason == "owner_error" and "a bug" in failed.detail
    assert fine == Respond(body=b"ok")
    assert isinstance(failed_later, Close) and "a later bug" in failed_later.detail


async def test_calls_begin_in_the_order_the_worker_sent_them(autojump_clock: trio.testing.MockClock) -> None:
    """The handlers change shared state (a group's members): a single process runs them as
    requests are read, so the owner must too, whatever order trio schedules tasks in."""
    worker_end, owner_end = trio.testing.memory_stream_pair()
    begun: list[int] = []

    def begin(call: RemoteCall) -> calls.Begun:
        begun.append(call.correlation_id)
        return Respond(body=b"")

    client = OwnerClient(worker_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_calls, owner_end, begin, "worker 0")
        nursery.start_soon(client.run)
        async with trio.open_nursery() as sent:
            for n in range(50):
                sent.start_soon(_ask, client, _call(n))
                await trio.sleep(0)  # each call queued before the next task starts
        nursery.cancel_scope.cancel()
    assert begun == list(range(50))


def _call(correlation_id: int) -> RemoteCall:
    return RemoteCall(listener="PLAINTEXT", peer=("127.0.0.1", 1), principal="User:ANONYMOUS",
                      client_software=None, api_key=12, api_version=4, correlation_id=correlation_id,
                      client_id=None, body=b"%d" % correlation_id)


async def test_an_answer_taken_by_callback_comes_without_a_task_and_giving_up_cancels_the_call(
        autojump_clock: trio.testing.MockClock) -> None:
    worker_end, owner_end = trio.testing.memory_stream_pair()
    cancelled: list[int] = []

    def begin(call: RemoteCall) -> calls.Begun:
        async def later() -> Respond | Close:
            try:
                await trio.sleep(call.correlation_id)
            except trio.Cancelled:
                cancelled.append(call.correlation_id)
                raise
            return Respond(body=b"%d" % call.correlation_id)
        return later

    client = OwnerClient(worker_end)
    taken: list[tuple[int, Respond | Close]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_calls, owner_end, begin, "worker 0")
        nursery.start_soon(client.run)
        client.send(_call(2)).when_ready(lambda done: taken.append((2, done)))
        give_up = client.send(_call(5)).when_ready(lambda done: taken.append((5, done)))
        await trio.sleep(3)
        give_up()  # its connection closed: the owner hears of it
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert taken == [(2, Respond(body=b"2"))]
    assert cancelled == [5]


async def test_a_taker_that_raises_does_not_end_the_channel(autojump_clock: trio.testing.MockClock) -> None:
    worker_end, owner_end = trio.testing.memory_stream_pair()
    client = OwnerClient(worker_end)

    def broken(done: Respond | Close) -> None:
        raise RuntimeError("the client's socket broke")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_calls, owner_end, lambda call: Respond(body=b"ok"), "worker 0")
        nursery.start_soon(client.run)
        client.send(_call(1)).when_ready(broken)
        assert await client.send(_call(2)).answer() == Respond(body=b"ok")
        nursery.cancel_scope.cancel()


async def test_answers_to_a_worker_that_is_gone_are_dropped_and_the_owner_goes_on(
        autojump_clock: trio.testing.MockClock) -> None:
    """The worker's end closed while its calls were answered: the owner's end stops quietly
    (the supervisor starts a new worker; nothing of it must fail)."""
    worker_end, owner_end = trio.testing.memory_stream_pair()
    ended = trio.Event()

    def begin(call: RemoteCall) -> calls.Begun:
        async def later() -> Respond | Close:
            await trio.sleep(1)
            return Respond(body=b"late")
        return later

    async def serve() -> None:
        await serve_calls(owner_end, begin, "worker 0")
        ended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        await worker_end.send_all(calls.call_message(1, _call(1)))
        await trio.sleep(0.1)
        await worker_end.aclose()
        with trio.fail_after(5):
            await ended.wait()


def test_an_end_message_names_the_connection_by_hand_and_a_short_one_is_refused() -> None:
    message = calls.ended_message("PLAINTEXT", ("127.0.0.9", 40000))
    # size 2+... : kind 4, call id 0, metadata: port 40000, then listener and host
    meta = b"\x9c\x40" b"\x00\x09PLAINTEXT" b"\x00\x09127.0.0.9"
    assert message == struct.pack(">IBII", 9 + len(meta), 4, 0, len(meta)) + meta
    [decoded] = list(Decoder().feed(message))
    assert calls.read_ended(decoded) == ("PLAINTEXT", ("127.0.0.9", 40000))
    for bad in (b"\x9c", b"\x9c\x40\x00\x09PLAINTEXT\xff\xff", b"\x9c\x40\x00\x09PLAINTEXT"):
        with pytest.raises(ChannelError):
            calls.read_ended(calls.Message(calls.ENDED, 0, bad, b""))


async def test_the_owner_hears_of_an_ended_connection_after_its_calls(autojump_clock: trio.testing.MockClock) -> None:
    worker_end, owner_end = trio.testing.memory_stream_pair()
    client = OwnerClient(worker_end)
    heard: list[str] = []

    def begin(call: RemoteCall) -> calls.Begun:
        heard.append(f"call {call.correlation_id}")
        return Respond(body=b"ok")

    def ended(listener: str, peer: tuple[str, int]) -> None:
        heard.append(f"ended {listener} {peer[0]}:{peer[1]}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_calls, owner_end, begin, "worker 0", ended)
        nursery.start_soon(client.run)
        client.send(_call(1))
        client.connection_ended("PLAINTEXT", ("127.0.0.1", 1))
        assert await client.send(_call(2)).answer() == Respond(body=b"ok")
        nursery.cancel_scope.cancel()
    assert heard == ["call 1", "ended PLAINTEXT 127.0.0.1:1", "call 2"]


async def _ask(client: OwnerClient, call: RemoteCall) -> Respond | Close:
    return await client.send(call).answer()
