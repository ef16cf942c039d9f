"""A large response forwarded while it arrives (cut-through).

Theory of operation. Store-and-forward reads a whole Fetch response (megabytes) before its
first byte goes on, into a buffer of its size written once more from memory. Here each read
of :data:`STREAM_CHUNK` bytes is written to the client before the next, through one buffer
that stays in the CPU's cache (``python -m tests.bench consume --baseline``: the sidecar's
CPU a fifth to a third lower, tests/bench/RESULTS.md).

Everything else about the answer is as for a whole one: the correlation id is checked before
a byte goes on; a response that can name a broker (KIP-951 ``NodeEndpoints``) holds back its
top-level tag section, found as the bytes pass (:class:`~protocol.scan.TagSectionFinder`),
and rewritten in its own length since the size prefix has gone; observers get the whole
frame; the held-back rest fills the slot and leaves through the responder as any answer. A
Fetch a client quota throttles streams too: its size, which ``consumer_byte_rate``
measures, is in its prefix, and its ``ThrottleTimeMs`` is the body's first field, set before
a byte goes on (:func:`~proxy.datapath.throttle.throttle_head`). A
broker that stops mid-response, or a response that cannot be read, ends the connection as it
would have before a byte went on.

The connection decides *whether* a response may stream (nothing ahead of it for the client,
no response filter that needs it whole: :meth:`~proxy.datapath.dispatch.Dispatch.streaming`);
this module does the streaming through the narrow :class:`Link` the connection offers.
"""

from __future__ import annotations

from typing import Protocol

from protocol.errors import Truncated
from protocol.scan import response_header_size
from proxy.datapath.frames import FrameBuffer
from proxy.datapath.responder import Slot
from proxy.datapath.routing import Router, Streaming
from proxy.datapath.throttle import throttle_head

#: Reads of a response being forwarded as it arrives: each is written before the next,
#: through one buffer of this size that stays in the CPU's cache.
STREAM_CHUNK = 262144
#: Reads for the first bytes of a streamed answer, when its response header (or a
#: throttled Fetch's ThrottleTimeMs) is not in yet.
HEAD_READ = 64


class Link(Protocol):
    """What streaming needs of its connection."""

    @property
    def observed(self) -> bool:
        """Whether observers get the whole frame (then it is read in place, as a whole one)."""
        ...

    def begin_stream(self, body: memoryview) -> None:
        """Pair the response whose body starts with ``body`` with its request; nothing else
        goes to the client until :meth:`end_stream`."""
        ...

    async def read_upstream(self, into: memoryview) -> int:
        """Read from the broker into ``into``: how many bytes (the link ends the connection
        if it breaks or ends)."""
        ...

    async def send_client(self, parts: list[bytes | memoryview]) -> None:
        """Write to the client now."""
        ...

    def end_stream(self, slot: Slot, rest: bytes, sent: int, whole: memoryview | None) -> None:
        """The response is in: ``sent`` bytes went on, ``rest`` fills its slot; ``whole``
        (observed connections) is the whole frame as the client got it."""
        ...


async def stream_response(link: Link, slot: Slot, decoder: FrameBuffer, router: Router, streaming: Streaming) -> None:
    """Forward the response ``decoder`` is gathering for ``slot`` while it arrives (see the
    module docstring); raises :class:`~protocol.errors.ProtocolError` for what it cannot read."""
    size = decoder.gathering
    throttle = slot.throttle  # a client quota's (Dispatch.streaming allows a Fetch's only)
    # The response header, and a throttled answer's ThrottleTimeMs (the body's first field).
    opening, body_at = await _head(link, decoder.take_partial(), size, slot.record.response_header_version,
                                   4 if throttle is not None else 0)
    if throttle is not None:
        throttle_head(opening, body_at, size, throttle)
    head = memoryview(opening)
    header_size = body_at - 4
    finder = streaming.finder(size - 4 - header_size)
    link.begin_stream(head[4:])
    whole = bytearray(size) if link.observed else None
    if whole is not None:
        whole[: len(head)] = head
    sent = 0
    held = bytearray()  # bytes read and not forwarded yet: [sent, received)
    received = 0
    chunk: bytearray | None = None
    data = head
    while True:
        first = received  # data holds the frame's bytes [first, received)
        received += len(data)
        ready = received  # the frame's bytes that may go to the client now
        if finder is not None:
            finder.feed(data[max(0, body_at - first) :])
            ready = body_at + finder.safe
        if ready <= sent:
            held += data
        elif ready <= first:  # part of what was held back may go
            await link.send_client([bytes(held[: ready - sent])])
            held = held[ready - sent :] + data
            sent = ready
        else:
            cut = ready - first
            await link.send_client([memoryview(held), data[:cut]] if held else [data[:cut]])
            held = bytearray(data[cut:])
            sent = ready
        if received == size:
            break
        if whole is not None:
            data = memoryview(whole)[received : received + STREAM_CHUNK]
        else:
            if chunk is None:
                chunk = bytearray(STREAM_CHUNK)
            data = memoryview(chunk)[: min(STREAM_CHUNK, size - received)]
        data = data[: await link.read_upstream(data)]
    rest = bytes(held)
    if finder is not None:
        rewritten = router.rewrite_section(streaming, rest)
        if rewritten is not None:
            rest = rewritten
            if whole is not None:
                whole[size - len(rest) :] = rest
    link.end_stream(slot, rest, sent, memoryview(whole) if whole is not None else None)



async def _head(link: Link, first: bytes, size: int, header_version: int, extra: int) -> tuple[bytearray, int]:
    """The frame's first bytes, read on until they hold the response header and ``extra``
    bytes of the body (a broker may send its size prefix alone): those bytes, and where the
    body starts. Raises :class:`~protocol.errors.Truncated` for a frame too short for them."""
    head = bytearray(first)
    while True:
        try:
            body_at = 4 + response_header_size(memoryview(head)[4:], header_version)
        except Truncated:
            if len(head) >= size:
                raise
        else:
            if len(head) >= min(body_at + extra, size):
                return head, body_at
        more = bytearray(min(HEAD_READ, size - len(head)))
        head += more[: await link.read_upstream(memoryview(more))]
