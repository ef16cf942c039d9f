"""The broker side of one client connection: the link, the answers it owes, the upstream pump.

Theory of operation. A connection dials the broker at its first request that must be
forwarded (:meth:`BrokerLink.send`): one that only asks the sidecar (ApiVersions,
BrokerMetadata), or never completes a request, costs the broker nothing. Each forwarded
request that expects an answer takes its slot in the client's FIFO and a place in the
broker's queue (:meth:`BrokerLink.expect`); a Produce with acks=0 is remembered in case the
broker answers it anyway (:mod:`proxy.datapath.silent`).

The **upstream pump** (:meth:`BrokerLink.pump`) reads response frames, pairs each with the
oldest request owed (the correlation id checked, the SASL gate shown it), and hands it to
the response filters (:meth:`~proxy.datapath.dispatch.Dispatch.response`: broker addresses
rewritten, an ACL patch applied, a large one in slices by a task of its own). A large
response with nothing ahead of it for the client goes on while it arrives
(:mod:`proxy.datapath.streaming`, through the :class:`~proxy.datapath.streaming.Link` this
class offers). A broker that breaks the link, closes it with answers owed, or answers what
cannot be read ends the connection (and only it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import NoReturn, overload

import trio

from observers.hub import Tap
from protocol.correlation import CorrelationTracker, InFlight
from protocol.errors import ProtocolError
from protocol.framing import EOF, NEED_DATA
from protocol.headers import RequestHeader
from proxy.datapath.dispatch import Close, Dispatch, Gate, PatchLater
from proxy.datapath.errors import ConnectionClosed, UpstreamError
from proxy.datapath.frames import FrameBuffer
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.responder import Responses, Slot
from proxy.datapath.routing import Streaming
from proxy.datapath.silent import SilentProduces
from proxy.datapath.streaming import stream_response
from proxy.datapath.wire import Wire, wire_for
from proxy.datapath.writer import ClientWriter

#: The broker-side queue of a connection that has forwarded nothing yet (never appended to).
_NO_SLOTS: deque[Slot] = deque(maxlen=0)

#: Reads from the broker: Fetch responses run to megabytes, and each read is a trip
#: through the event loop and a chunk the frame decoder gathers.
UPSTREAM_RECEIVE_SIZE = 262144
#: A response with at least this much still to come when its head arrives is forwarded
#: as it arrives (cut-through, :mod:`proxy.datapath.streaming`) when nothing is ahead of it
#: for the client.
STREAM_MIN = 131072
#: Header decoding is given at most this much of a frame: a request header or a
#: response's correlation id lies in the first bytes (a longer header is retried on the
#: whole frame), so a megabyte Produce is never copied to read its header.
HEADER_VIEW = 65536

#: Opens a link to the broker; raises :class:`UpstreamError` when it cannot.
OpenUpstream = Callable[[], Awaitable[trio.abc.Stream]]
#: Told ``(why, unreachable)`` when dialling failed (``unreachable``) or a link broke.
UpstreamFailed = Callable[[str, bool], None]


class BrokerLink:
    """One connection's link to the broker (see the module docstring)."""

    __slots__ = (
        "_dispatch", "_failed", "_gate", "_max_response", "_metrics", "_nursery", "_open", "_responses",
        "_tap", "_tracker", "_writer", "answered", "client_wire", "expected", "extra", "silent", "slots",
        "stream", "wire",
    )  # fmt: skip

    def __init__(self, *, open_upstream: OpenUpstream, failed: UpstreamFailed, max_response: int,
                 responses: Responses, writer: ClientWriter, client_wire: Wire, dispatch: Dispatch,
                 tracker: CorrelationTracker, gate: Gate | None, tap: Tap | None, metrics: SidecarMetrics,
                 extra: dict[str, int]) -> None:
        self._open = open_upstream
        self._failed = failed
        self._max_response = max_response
        self._responses = responses
        self._writer = writer
        self.client_wire = client_wire
        self._dispatch = dispatch
        self._tracker = tracker
        self._gate = gate
        self._tap = tap
        self._metrics = metrics
        #: The connection's counters of unusual events (``unasked_responses``).
        self.extra = extra
        self._nursery: trio.Nursery | None = None
        #: The link, once dialled.
        self.stream: trio.abc.Stream | None = None
        self.wire: Wire | None = None
        #: Slots of the requests sent to the broker, oldest first (made at the first one).
        self.slots: deque[Slot] = _NO_SLOTS
        #: acks=0 Produce requests sent (made at the first one).
        self.silent: SilentProduces | None = None
        #: Answers owed so far, and answers received.
        self.expected = 0
        self.answered = 0

    def attach(self, nursery: trio.Nursery) -> None:
        """The connection's nursery: the pump and large patches run there."""
        self._nursery = nursery

    # -- requests ---------------------------------------------------------------------------

    def expect(self, slot: Slot) -> None:
        """A forwarded request that expects an answer (its slot already in the FIFO)."""
        if self.slots is _NO_SLOTS:
            self.slots = deque()
        self.slots.append(slot)
        self.expected += 1

    def sent_silent(self, correlation_id: int) -> None:
        """A Produce with acks=0 was forwarded."""
        if self.silent is None:
            self.silent = SilentProduces()
        self.silent.sent(correlation_id, self.expected)

    async def send(self, parts: list[bytes | memoryview]) -> None:
        """Send the frames gathered (then ``parts`` is empty), dialling the broker first."""
        if not parts:
            return
        wire = self.wire
        if wire is None:
            self._writer.deliver()  # local answers gathered so far need not wait for the dial
            wire = await self._dial()
        frames = parts.copy()
        parts.clear()
        try:
            await wire.send_parts(frames)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._failed(f"sending to the broker failed: {exc}", False)
            raise ConnectionClosed("upstream_reset", f"sending to the broker failed: {exc}") from None

    async def _dial(self) -> Wire:
        try:
            stream = await self._open()
        except UpstreamError as exc:
            self._failed(str(exc), True)
            raise ConnectionClosed("upstream_unreachable", str(exc)) from None
        self.stream = stream
        wire = self.wire = wire_for(stream)
        assert self._nursery is not None
        self._nursery.start_soon(self.pump, wire)
        return wire

    async def close(self) -> None:
        """Close the link, if it was dialled."""
        if self.stream is not None:
            await trio.aclose_forcefully(self.stream)

    # -- answers ----------------------------------------------------------------------------

    async def pump(self, wire: Wire) -> None:
        """The upstream pump: read answers until the link ends (which ends the connection)."""
        decoder = FrameBuffer(self._max_response)
        while True:
            view = decoder.direct()
            try:  # as _read does, without a coroutine of its own (every pass)
                if view is None:
                    data = await wire.receive(UPSTREAM_RECEIVE_SIZE) or b""
                    count = len(data)
                else:
                    count = await wire.receive_into(view) or 0
            except (trio.BrokenResourceError, OSError) as exc:
                self._broke(exc)
            if not count:
                self._ended(len(self.slots))
            if view is None:
                decoder.receive_data(data)
            else:
                decoder.filled(count)
            now = trio.current_time()  # when the answers of this read arrived
            while True:
                try:
                    frame = decoder.next_frame()
                except ProtocolError as exc:
                    raise ConnectionClosed("bad_response", str(exc)) from None
                if frame is NEED_DATA or frame is EOF:
                    break
                self._on_response(frame, now)
            self._writer.deliver()
            if frame is NEED_DATA and decoder.gathering - decoder.buffered >= STREAM_MIN:
                streaming = self._streamable()
                if streaming is not None:
                    await self._stream(decoder, streaming)

    @overload
    async def _read(self, wire: Wire, into: None) -> bytes | bytearray: ...
    @overload
    async def _read(self, wire: Wire, into: memoryview) -> int: ...

    async def _read(self, wire: Wire, into: memoryview | None) -> bytes | bytearray | int:
        """One read from the broker: the bytes, or with ``into`` how many were read there
        (empty or 0: the broker closed the link). A broken link ends the connection."""
        try:
            if into is None:
                return await wire.receive(UPSTREAM_RECEIVE_SIZE) or b""
            return await wire.receive_into(into) or 0
        except (trio.BrokenResourceError, OSError) as exc:
            self._broke(exc)

    def _broke(self, exc: BaseException) -> NoReturn:
        """The link broke (a reset, a failed read): the connection ends."""
        self._failed(f"broker link broke: {exc}", False)
        raise ConnectionClosed("upstream_reset", str(exc)) from None

    def _ended(self, owed: int) -> NoReturn:
        """The broker closed the link with ``owed`` answers still to come."""
        if owed:
            self._failed("broker closed a link with requests pending", False)
            raise ConnectionClosed("upstream_reset", f"broker closed the connection with {owed} request(s) pending")
        raise ConnectionClosed("upstream_closed", "broker closed the connection")

    def _answered(self, body: memoryview) -> InFlight:
        """Pair a response with its request (the oldest forwarded): the correlation id is
        checked, the gate sees it (a login the broker accepted), the slot leaves the
        broker's queue. The tracker reads the whole body only to learn whether a
        SaslHandshake v0 succeeded: it gets a bounded view of anything else."""
        view = body
        if len(body) > HEADER_VIEW and not (self.slots and self.slots[0].record.sasl_mechanism is not None):
            view = body[:HEADER_VIEW]
        try:
            record = self._tracker.on_response(view)
        except ProtocolError as exc:
            raise ConnectionClosed("correlation_mismatch", str(exc)) from None
        if self._gate is not None:
            self._gate.on_response(record, view)
        self.answered += 1
        slot = self.slots.popleft()
        assert slot.record is record
        return record

    def _on_response(self, frame: memoryview, now: float) -> None:
        body = frame[4:]
        if self.silent and self._unasked(body):
            return
        slot = self.slots[0]
        record = self._answered(body)
        header = record.header
        if header is None:  # a raw SASL token's answer
            self._responses.fill(slot, frame, now)
            return
        data = self._dispatch.response(header, record.response_header_version, frame, slot.patch, slot.throttle)
        if isinstance(data, Close):
            raise ConnectionClosed(data.reason, data.detail)
        if isinstance(data, PatchLater):
            # Its slot waits, and every answer after it; other connections do not.
            assert self._nursery is not None and slot.patch is not None
            self._nursery.start_soon(self._patch_later, slot, header, record.response_header_version, data.data)
            return
        self._responses.fill(slot, data, now)

    async def _patch_later(self, slot: Slot, header: RequestHeader, header_version: int, data: bytes) -> None:
        """A large answer's ACL patch, in slices (runs in the connection's nursery): then its
        slot is filled and what follows it goes too."""
        assert slot.patch is not None
        patched = await self._dispatch.patch_in_slices(slot.patch, header, header_version, data)
        if isinstance(patched, Close):
            raise ConnectionClosed(patched.reason, patched.detail)
        if slot.throttle is not None:  # the filters after the ACL patch
            patched = self._dispatch.throttled(header, header_version, patched, slot.throttle)
        self._responses.fill(slot, patched, trio.current_time())
        self._writer.deliver()

    def _unasked(self, body: memoryview) -> bool:
        """True (and counted) for a broker's answer to a Produce with acks=0: dropped."""
        assert self.silent is not None
        expected = self.slots[0].record.correlation_id if self.slots else None
        if not self.silent.unasked(body, self.answered, expected):
            return False
        self._metrics.unasked_responses.inc()
        self.extra["unasked_responses"] = self.extra.get("unasked_responses", 0) + 1
        return True

    # -- cut-through (proxy.datapath.streaming) ---------------------------------------------

    def _streamable(self) -> Streaming | None:
        """Whether the large response being gathered may go to the client as it arrives.

        Only when nothing is ahead of it for the client (its slot heads the FIFO and no
        write is under way, the writer's included), when no login depends on it whole, and
        when no response filter needs it whole (:meth:`Dispatch.streaming`).
        """
        slots, writer = self.slots, self._writer
        if not slots or self._responses.slots[0] is not slots[0] or writer.writing \
                or writer.unsent is not None or self.silent or (self._tap is not None and self._tap.blocked):
            return None
        slot = slots[0]
        header = slot.record.header
        if header is None or slot.record.sasl_mechanism is not None:
            return None
        return self._dispatch.streaming(header, slot.patch, self._gate, slot.throttle)

    async def _stream(self, decoder: FrameBuffer, streaming: Streaming) -> None:
        slot = self.slots[0]
        try:
            await stream_response(self, slot, decoder, self._dispatch.router, streaming)
        except ProtocolError as exc:  # passing on a response we cannot read could leak a broker
            raise ConnectionClosed("bad_response", f"{slot.api.label} response: {exc}") from None

    @property
    def observed(self) -> bool:
        """Whether observers get each exchange (then a streamed answer is kept whole too)."""
        return self._tap is not None

    def begin_stream(self, body: memoryview) -> None:
        """A streamed answer starts: paired with its request; the client's wire is its own."""
        self._writer.writing = True  # nothing else may go to the client until this answer is out
        self._answered(body)

    async def read_upstream(self, into: memoryview) -> int:
        """A read from the broker for a streamed answer (the link ending ends the connection)."""
        assert self.wire is not None
        count = await self._read(self.wire, into)
        if not count:
            self._ended(len(self.slots) + 1)  # the one streaming is owed too
        return count

    async def send_client(self, parts: list[bytes | memoryview]) -> None:
        """Write to the client from the upstream pump (a streamed answer)."""
        await self.client_wire.send_parts(parts)

    def end_stream(self, slot: Slot, rest: bytes, sent: int, whole: memoryview | None) -> None:
        """A streamed answer is in: its held-back rest fills its slot."""
        slot.streamed = sent
        slot.whole = whole
        slot.api.streamed.inc()
        self._writer.writing = False
        self._responses.fill(slot, rest, trio.current_time())
        self._writer.deliver()
