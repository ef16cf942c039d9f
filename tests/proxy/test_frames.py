"""The data path's own framing and socket wire (proxy/datapath/frames.py, wire.py).

:class:`FrameBuffer` must split any stream exactly as the reference
:class:`protocol.framing.FrameDecoder` does, however the bytes arrive: in chunks of every
size, or read straight into a large frame's buffer. :class:`SocketWire` must deliver
every byte in order on a real socket pair, write several parts in one go, and stop a
blocked read (a drain) without disturbing a write that waits for room.
"""

from __future__ import annotations

import os
import random
import socket
import struct

import pytest
import trio
import trio.testing

from protocol.errors import FrameTooLarge, Truncated
from protocol.framing import EOF, NEED_DATA, FrameDecoder
from proxy.datapath.frames import DIRECT_MIN, LAZY_MIN, FrameBuffer
from proxy.datapath.wire import SocketWire, Wire, wire_for


def frame(size: int, seed: int) -> bytes:
    body = random.Random(seed).randbytes(size)
    return struct.pack(">i", size) + body


def reference(stream: bytes) -> list[bytes]:
    decoder = FrameDecoder()
    decoder.receive_data(stream)
    out = []
    while (f := decoder.next_frame()) is not NEED_DATA:
        assert f is not EOF
        out.append(bytes(f))
    return out


def split_with_direct(stream: bytes, chunk: int, lazy: bool = False) -> list[bytes]:
    """Feed ``stream`` as a reader would: chunks, or straight into a large frame's buffer."""
    buffer = FrameBuffer(lazy=lazy)
    out: list[bytes] = []
    at = 0
    while at < len(stream):
        view = buffer.direct()
        if view is None:
            buffer.receive_data(stream[at : at + chunk])
            at += min(chunk, len(stream) - at)
        else:
            n = min(len(view), chunk * 3)  # a read may fill part of the buffer
            view[:n] = stream[at : at + n]
            buffer.filled(n)
            at += n
        while (f := buffer.next_frame()) is not NEED_DATA:
            assert f is not EOF
            out.append(bytes(f))
    buffer.receive_data(b"")
    assert buffer.next_frame() is EOF
    assert buffer.buffered == 0 and buffer.pending == 0
    return out


STREAM = b"".join([frame(10, 1), frame(0, 2), frame(DIRECT_MIN * 3 + 7, 3), frame(200, 4),
                   frame(DIRECT_MIN + 1, 5), frame(DIRECT_MIN - 1, 6), frame(5, 7)])


@pytest.mark.parametrize("chunk", [1, 3, 4, 5, 1000, 65536, 70000, 262144, len(STREAM)])
def test_every_chunking_gives_the_reference_frames(chunk: int) -> None:
    assert split_with_direct(STREAM, chunk) == reference(STREAM)


#: Frames on both sides of LAZY_MIN, for the client side's lazily backed buffers.
LAZY_STREAM = b"".join([frame(LAZY_MIN + 5, 11), frame(300, 12), frame(LAZY_MIN - 1, 13), frame(DIRECT_MIN, 14)])


@pytest.mark.parametrize("chunk", [1000, 65536, 262144, len(LAZY_STREAM)])
def test_lazy_buffers_give_the_reference_frames(chunk: int) -> None:
    assert split_with_direct(LAZY_STREAM, chunk, lazy=True) == reference(LAZY_STREAM)


def test_a_lazy_buffer_takes_memory_as_it_is_filled() -> None:
    """A frame announced at 64 MiB and a tenth sent costs the process about a tenth."""
    size = 64 << 20
    buffer = FrameBuffer(max_frame_size=size + 4, lazy=True)
    buffer.receive_data(struct.pack(">i", size))
    assert buffer.next_frame() is NEED_DATA
    before = resident_bytes()
    view = buffer.direct()
    assert view is not None and len(view) == size
    view[: size // 10] = b"\x01" * (size // 10)
    buffer.filled(size // 10)
    grown = resident_bytes() - before
    assert size // 10 <= grown < size // 4, grown  # the sent tenth (and the bytes written), not 64 MiB


def resident_bytes() -> int:
    """This process's resident set (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_large_frame_is_read_in_place_and_only_what_came_first_is_copied() -> None:
    big = frame(DIRECT_MIN * 2, 9)
    buffer = FrameBuffer()
    buffer.receive_data(big[:1000])
    assert buffer.next_frame() is NEED_DATA
    assert buffer.pending == len(big)  # what the request memory pool reserves
    view = buffer.direct()
    assert view is not None and len(view) == len(big) - 1000
    view[:] = big[1000:]
    buffer.filled(len(view))
    assert bytes(buffer.next_frame()) == big  # type: ignore[arg-type]
    assert buffer.direct() is None


def test_errors_are_the_reference_errors() -> None:
    buffer = FrameBuffer(max_frame_size=100)
    buffer.receive_data(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge):
        buffer.next_frame()
    cut = FrameBuffer()
    cut.receive_data(frame(DIRECT_MIN * 2, 1)[:100])
    assert cut.next_frame() is NEED_DATA
    assert cut.direct() is not None
    cut.filled(0)  # end of stream inside the frame
    with pytest.raises(Truncated):
        cut.next_frame()


def socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = socket.socketpair()
    return (trio.SocketStream(trio.socket.from_stdlib_socket(a)),
            trio.SocketStream(trio.socket.from_stdlib_socket(b)))


async def test_only_plain_sockets_get_the_socket_wire() -> None:
    a, b = socket_pair()
    assert isinstance(wire_for(a), SocketWire)
    memory, _ = trio.testing.memory_stream_pair()
    assert type(wire_for(memory)) is Wire
    await a.aclose()
    await b.aclose()


async def test_parts_arrive_whole_and_in_order_through_a_full_socket() -> None:
    a, b = socket_pair()
    sender, receiver = SocketWire(a), SocketWire(b)
    parts = [random.Random(i).randbytes(100_000 + i) for i in range(8)]  # more than the buffers
    got = bytearray()

    async def read_all() -> None:
        while len(got) < sum(map(len, parts)) + 4:
            data = await receiver.receive(65536)
            assert data
            got.extend(data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        await sender.send_parts(parts)
        await sender.send(b"tail")
    assert bytes(got) == b"".join(parts) + b"tail"
    await a.aclose()
    assert await receiver.receive(10) == b""
    await b.aclose()


async def test_interrupting_a_read_leaves_a_waiting_write_alone() -> None:
    a, b = socket_pair()
    wire = SocketWire(a)
    big = b"x" * (8 << 20)  # far more than the socket buffers: the write waits
    results: dict[str, object] = {}

    async def read() -> None:
        results["read"] = await wire.receive(100)

    async def write() -> None:
        await wire.send(big)
        results["wrote"] = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        nursery.start_soon(write)
        await trio.testing.wait_all_tasks_blocked()
        assert wire.interrupt_receive()
        await trio.testing.wait_all_tasks_blocked()
        assert results == {"read": None}
        received = 0
        while received < len(big):  # the peer reads: the write completes
            received += len(await b.receive_some(1 << 20))
    assert results == {"read": None, "wrote": True}
    assert await wire.receive(100) is None  # reading stays stopped
    await a.aclose()
    await b.aclose()
