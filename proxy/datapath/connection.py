"""One client connection: the client pump, the upstream pump and the writer.

* the **client pump** reads request frames; each passes the listener's admission rule
  (SASL), then the :class:`~proxy.datapath.routing.Router` says whether a local API
  answers it, the broker does (the original bytes are forwarded), or nobody can (KIP-35
  "unsupported");
* the **upstream pump** reads response frames, pairs each with its request through the
  :class:`~protocol.correlation.CorrelationTracker`, and rewrites broker addresses where a
  response names brokers;
* answers leave strictly in request order (:mod:`proxy.datapath.responder`): the task that
  fills the oldest slot writes the ready prefix itself when the client's socket takes it
  at once (:meth:`Connection._deliver`); the **writer** task takes over a write that must
  wait, and every write on a wire that cannot write without waiting (TLS).

A local answer that must wait (:class:`~proxy.local.api.Later`) runs in the connection's
nursery and fills its slot when done; the pump does not wait for it (unless it asks to
hold, as a SASL login does), and requests gathered for the broker go at once.

A connection is built from its parts (:class:`Parts`: settings, registry, router, local
table, metrics, and an ``open_upstream`` factory) and a client stream, so everything here
runs on ``trio.testing.memory_stream_pair`` under a virtual clock (tests/proxy/datapath).

Backpressure: the client pump stops reading while the FIFO holds
``sidecar.max.in.flight.requests.per.connection`` slots (answers-later included) or the
ready answers waiting for the client exceed ``sidecar.max.buffered.bytes.per.connection``.

Every way a connection ends is one log line and one ``ksidecar_connections_closed``
reason; errors on one connection never reach another.

Cost per frame (``python -m tests.bench --profile``): plain TCP is driven on the socket
itself (:mod:`proxy.datapath.wire`: no scheduler pass after a read or write that did not
wait, several frames in one ``writev``, a drain interrupts the read instead of a cancel
scope around each); frames are memoryview slices of the bytes each read returned, and a
large frame is read straight into its own buffer (:mod:`proxy.datapath.frames`); only the
request header is decoded (from a bounded view, :data:`HEADER_VIEW`); metric children are
resolved once per API; the idle timeout is one sweeper for the sidecar
(:mod:`proxy.datapath.idle`), not a task or a cancel scope per connection; responses are
only scanned, never decoded, unless they name brokers; a large response with nothing
ahead of it goes on while it arrives (:mod:`proxy.datapath.streaming`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import NoReturn, overload

import trio

from observers.hub import Tap
from protocol.apis import ApiRegistry
from protocol.correlation import CorrelationTracker, FrameKind, InFlight
from protocol.errors import FrameError, ProtocolError
from protocol.framing import EOF, NEED_DATA
from protocol.headers import RequestHeader
from protocol.leniency import QUIET, Leniency
from proxy.config.settings import ConnectionSettings
from proxy.datapath.authorize import Authorization, Denials, Patch
from proxy.datapath.dispatch import (
    Answer,
    Close,
    Dispatch,
    Forward,
    Gate,
    PatchLater,
    Refresh,
    RequestFilter,
)
from proxy.datapath.errors import ConnectionClosed, UpstreamError, frame_cause, reason_of
from proxy.datapath.frames import FrameBuffer
from proxy.datapath.idle import IdleSweeper
from proxy.datapath.memory import MAIN, RequestMemory
from proxy.datapath.metrics import ApiMetrics, SidecarMetrics
from proxy.datapath.observed import hand_over, wait_for_room
from proxy.datapath.responder import Responses, Slot
from proxy.datapath.routing import Router, Streaming
from proxy.datapath.silent import SilentProduces
from proxy.datapath.streaming import stream_response
from proxy.datapath.wire import Wire, wire_for
from proxy.datapath.writer import ClientWriter
from proxy.local.api import Answer as LocalAnswer
from proxy.local.api import Close as LocalClose
from proxy.local.api import Context, Later, Respond

log = logging.getLogger(__name__)

#: The broker-side queue of a connection that has forwarded nothing yet (never appended to).
_NO_SLOTS: deque[Slot] = deque(maxlen=0)

RECEIVE_SIZE = 65536
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
#: An answer the ACLs patch at least this large is patched in slices by a task of its own
#: (:meth:`Dispatch.patch_in_slices`), the event loop serving other connections in between.
PATCH_LATER_MIN = 262144
#: How long a closing connection waits for the answers it still owes (a refused login).
CLOSE_FLUSH_TIMEOUT = 5.0

#: Opens a link to the broker; raises :class:`UpstreamError` when it cannot.
OpenUpstream = Callable[[], Awaitable[trio.abc.Stream]]


@dataclass(frozen=True, kw_only=True)
class Parts:
    """What every connection of one listener is built from (shared, read-only)."""

    settings: ConnectionSettings
    registry: ApiRegistry
    router: Router
    metrics: SidecarMetrics
    open_upstream: OpenUpstream
    #: The sidecar-wide budget of request bytes (``queued.max.request.bytes``).
    memory: RequestMemory = field(default_factory=lambda: RequestMemory(None))
    #: Told ``(why, unreachable)`` when dialling the broker failed (``unreachable``) or a
    #: broker link broke: readiness re-checks at once.
    upstream_failed: Callable[[str, bool], None] = lambda _why, _unreachable: None
    #: A new connection's admission gate (SASL listeners), or ``None``.
    gate: Callable[[Context], Gate | None] = lambda _context: None
    #: A new connection's observer tap (KIP-388), or ``None`` when there are no observers.
    tap: Callable[[Context], Tap | None] = lambda _context: None
    #: Kafka ACLs enforced on every request (``sidecar.authorizer=acls``), else ``None``.
    authorization: Authorization | None = None
    #: Closes connections idle for ``connections.max.idle.ms`` (``None``: none are closed).
    idle: IdleSweeper | None = None
    #: Reads request bodies the sidecar answers by its one rule (docs/protocol.md, "Leniency").
    leniency: Leniency = QUIET
    #: The operators' request filters (``filter.class.names``), after the built-in ones.
    filters: tuple[RequestFilter, ...] = ()
    #: The decisions (:mod:`proxy.datapath.dispatch`); built from the parts above when not given.
    dispatch: Dispatch | None = None

    def __post_init__(self) -> None:
        if self.dispatch is None:
            object.__setattr__(self, "dispatch", Dispatch(
                self.registry, self.router, self.metrics, self.filters, authorization=self.authorization,
                leniency=self.leniency, unsupported_policy=self.settings.unsupported_policy))

    @property
    def decisions(self) -> Dispatch:
        """:attr:`dispatch`, never ``None`` once built."""
        assert self.dispatch is not None
        return self.dispatch


@dataclass
class ConnectionStats:
    """Counters one connection keeps (for logs and tests)."""

    requests: int = 0
    responses: int = 0
    local: int = 0
    #: Requests sent to the broker (acks=0 Produce included).
    forwarded: int = 0
    forwarded_bytes: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class Connection:
    """A client connection and its upstream link; :meth:`run` serves it to the end.

    What an idle connection holds is kept small (``python -m tests.bench connections``):
    slots instead of an instance dict, the broker-side queues made at the first forwarded
    request, and the writer task started only for a write that must wait.
    """

    __slots__ = (
        "_expired", "_held", "_nursery", "_pool", "_receive_scope", "_stop", "_upstream", "_upstream_wire",
        "client", "client_wire", "context",
        "dispatch", "frame_began", "gate", "last_receive", "listener", "max_buffered", "max_in_flight",
        "metrics", "parts", "peer", "registry", "responses", "silent_produces", "stats", "tap", "tracker",
        "upstream_answered", "upstream_expected", "upstream_slots", "writer",
    )  # fmt: skip

    def __init__(self, parts: Parts, client: trio.abc.Stream, context: Context) -> None:
        self.parts = parts
        self.client = client
        self.client_wire = wire_for(client)
        self.context = context
        self.listener = context.listener
        self.peer = context.peer
        settings = parts.settings
        self.max_in_flight = settings.max_in_flight
        self.max_buffered = settings.max_buffered_bytes
        self.registry = parts.registry
        #: What becomes of each request and response (:mod:`proxy.datapath.dispatch`).
        self.dispatch = parts.decisions
        self.metrics = parts.metrics
        #: The hand-off to observers (KIP-388); ``None`` when there are none: no cost.
        self.tap = parts.tap(context)
        self.gate = parts.gate(context)
        self.tracker = CorrelationTracker(parts.registry)
        self.responses = Responses()
        #: Slots of the requests sent to the broker, oldest first (made at the first one).
        self.upstream_slots: deque[Slot] = _NO_SLOTS
        #: Produce requests with acks=0 sent upstream, in case the broker answers them
        #: (:mod:`proxy.datapath.silent`; made at the first one).
        self.silent_produces: SilentProduces | None = None
        self.upstream_expected = 0
        self.upstream_answered = 0
        self.stats = ConnectionStats()
        #: Set by :meth:`stop_reading`; the pump stops at its next frame boundary.
        self._stop = False
        #: The scope of the one read in progress (cancelled by :meth:`stop_reading`).
        self._receive_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        #: The broker link, dialled when the first request must be forwarded.
        self._upstream: trio.abc.Stream | None = None
        self._upstream_wire: Wire | None = None
        #: Writes to the client, in request order (:mod:`proxy.datapath.writer`).
        self.writer = ClientWriter(self.responses, self.client_wire, self._account, self.tap)
        #: Request bytes this connection holds in the sidecar-wide pool, and which pool.
        self._held = 0
        self._pool = MAIN
        #: When the first bytes of the request frame being read arrived (``None``: between
        #: frames): ``socket.request.read.timeout.ms`` runs from there (the idle sweeper).
        self.frame_began: float | None = None
        #: When the client last sent bytes (the idle sweeper's reference).
        self.last_receive = trio.current_time()
        #: Set by the idle sweeper when it closes the connection: ``(reason, detail)``.
        self._expired: tuple[str, str] | None = None

    @property
    def principal(self) -> str:
        """Who the client is: ``User:<name>`` once SASL authenticated it, else anonymous."""
        return self.context.principal

    @property
    def slots(self) -> deque[Slot]:
        """The response FIFO (for tests and the drain)."""
        return self.responses.slots

    # -- lifecycle ---------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it ends; never raises for a peer's fault."""
        metrics = self.metrics
        reason, detail = "client_closed", ""
        idle = self.parts.idle
        if idle is not None:
            idle.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.writer.attach(nursery)
                # The pump is the nursery's body, not a task of its own (one task fewer per
                # connection); the nursery holds the writer and the answers-later.
                await self._client_pump(nursery.cancel_scope)
        except BaseExceptionGroup as group:
            reason, detail = reason_of(group)
        finally:
            if idle is not None:
                idle.discard(self)
            if self._expired is not None:
                reason, detail = self._expired
            self.parts.memory.change(self._pool, -self._held)
            self._held = 0
            if self.tap is not None:
                self._observe_unanswered()
            if self._upstream is not None:
                await trio.aclose_forcefully(self._upstream)
            if reason == "drained":
                await self._close_gently()
            await trio.aclose_forcefully(self.client)
        if reason not in ("client_closed", "drained"):
            metrics.errors.labels(reason).inc()
            log.info(
                "closed %s:%d on %s: %s%s", self.peer[0], self.peer[1], self.listener, reason,
                f" ({detail})" if detail else "",
            )
        metrics.connections_closed.labels(self.listener, reason).inc()

    def stop_reading(self) -> None:
        """Stop taking new requests (shutdown drain); in-flight ones still complete.

        The pump stops at a frame boundary: a read in progress is cancelled, and a pump
        busy with what it read finishes it (everything read is forwarded or answered)
        before it looks at the flag. No frame is ever left half-sent to the broker.
        """
        self._stop = True
        if not self.client_wire.interrupt_receive() and self._receive_scope is not None:
            self._receive_scope.cancel()

    @property
    def unanswered(self) -> int:
        """Requests read whose answers have not left yet (what a forced stop abandons)."""
        return len(self.responses.slots)

    async def _close_gently(self) -> None:
        """After a drain: FIN, then read and discard the client's bytes for a moment.

        Closing a socket with unread bytes sends a reset, and a reset makes the client's
        kernel drop answers the client has not read yet: the answers just sent would be
        lost. Half-closing first and reading what the client still sends avoids that.
        """
        client = self.client
        try:
            if isinstance(client, trio.abc.HalfCloseableStream):
                await client.send_eof()
            with trio.move_on_after(self.parts.settings.drain_linger):
                while await client.receive_some(RECEIVE_SIZE):
                    pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    # -- client side -------------------------------------------------------------------

    async def _client_pump(self, scope: trio.CancelScope) -> None:
        decoder = FrameBuffer(self.parts.settings.request_max_bytes, lazy=True)
        interruptible = self.client_wire.interruptible
        memory = self.parts.memory
        while not self._stop:
            # Not reading while the client's answers back up: its frame's time stands still
            # (socket.request.read.timeout.ms counts the client's slowness, not ours).
            began, self.frame_began = self.frame_began, None
            waited = trio.current_time() if began is not None else 0.0
            await self._wait_for_capacity()
            if began is not None:
                self.frame_began = began + (trio.current_time() - waited)
            if self._held == 0 and memory.full:
                await memory.wait_for_room()  # queued.max.request.bytes: room for a small frame?
            if self._stop:
                break
            # Only the read itself is stopped by a drain: what was read is always
            # forwarded or answered whole (stop_reading).
            if interruptible:
                read = await self._read_client(decoder)
            else:
                read = False
                with trio.CancelScope() as self._receive_scope:
                    read = await self._read_client(decoder)
                self._receive_scope = None
            if not read:
                break  # the read was interrupted: draining
            now = self.last_receive = trio.current_time()
            completed = 0
            parts: list[bytes | memoryview] = []
            while True:
                try:
                    frame = decoder.next_frame()
                except FrameError as exc:
                    raise ConnectionClosed(frame_cause(exc), str(exc)) from None
                except ProtocolError as exc:  # EOF inside a frame
                    raise ConnectionClosed("truncated", str(exc)) from None
                if frame is EOF:
                    await self._send_upstream(parts)
                    scope.cancel()  # the client is gone: answers cannot be delivered
                    return
                if frame is NEED_DATA:
                    break
                completed += 1
                if self._at_capacity():
                    # One read can hold many requests: the bound holds per request.
                    # Send what is gathered first, or its answers could never come.
                    await self._send_upstream(parts)
                    await self._wait_for_capacity()
                await self._on_request(frame, parts)
            await self._send_upstream(parts)
            self.writer.deliver()
            if not decoder.buffered:
                self.frame_began = None
            elif completed or self.frame_began is None:
                self.frame_began = now  # a new frame's first bytes
            wanted = max(decoder.gathering, 0)  # the frame being read: its whole size once known
            if memory.limit is not None and wanted != self._held:
                if self._held:
                    memory.change(self._pool, -self._held)
                    self._held = 0
                if wanted:
                    # A new frame: its body is not read until there is room for it (Kafka
                    # grants a request its memory before reading it; a small frame may use
                    # the share kept for small frames). Every pump may already be in a read
                    # when the pool fills; this is where the ones that were not first wait.
                    began, self.frame_began = self.frame_began, None  # waiting for memory is not the client's time
                    self._pool = await memory.reserve(wanted)
                    self._held = wanted
                    if began is not None:
                        self.frame_began = max(began, trio.current_time())
        # Draining: no more requests; let the writer finish what is in flight.
        self.writer.reading = False
        self.writer.wake()

    async def _read_client(self, decoder: FrameBuffer) -> bool:
        """One read from the client into ``decoder``; False if a drain interrupted it."""
        view = decoder.direct()
        if view is None:
            data = await self.client_wire.receive(RECEIVE_SIZE)
            if data is None:
                return False
            decoder.receive_data(data)
            return True
        count = await self.client_wire.receive_into(view)
        if count is None:
            return False
        decoder.filled(count)
        return True

    def idle_expired(self, now: float, timeout: float) -> bool:
        """Close the connection if the client sent nothing for ``timeout`` seconds up to
        ``now`` (the idle sweeper asks); True if it was closed. A connection waiting for
        answers is not idle; nor is one that is draining."""
        if now < self.last_receive + timeout or self._nursery is None:
            return False
        if self.responses.slots or not self.writer.reading:
            # Busy or draining: the idle time counts again from now (at the sweep's
            # precision), as from the last request.
            self.last_receive = now
            return False
        self._expired = ("idle", f"no request for {timeout:g}s")
        self._nursery.cancel_scope.cancel()
        return True

    def read_expired(self, now: float, timeout: float) -> bool:
        """Close the connection if the request frame being read is not complete ``timeout``
        seconds after its first bytes (``socket.request.read.timeout.ms``; the idle sweeper
        asks); True if it was closed. Its reservation of ``queued.max.request.bytes`` goes
        back as the connection ends."""
        began = self.frame_began
        if began is None or now < began + timeout or self._nursery is None:
            return False
        frame = f"a {self._held}-byte request frame" if self._held else "a request frame"
        self._expired = ("request_read_timeout", f"{frame} was not complete {timeout:g} s after its "
                         "first bytes (socket.request.read.timeout.ms)")
        self._nursery.cancel_scope.cancel()
        return True

    def _at_capacity(self) -> bool:
        return (
            len(self.responses.slots) >= self.max_in_flight
            or self.responses.ready_bytes > self.max_buffered
        )

    async def _wait_for_capacity(self) -> None:
        if self.tap is not None and self.tap.blocked:
            await self._wait_for_observers()
        while True:
            self.writer.deliver()  # answers filled in this read may be what frees the room
            if not self._at_capacity():
                return
            await self.responses.wait_for_room()

    async def _on_request(self, frame: memoryview, parts: list[bytes | memoryview]) -> None:
        """Carry out what the dispatch decides for one request frame."""
        body = frame[4:]
        dispatch = self.dispatch
        gate = self.gate
        if gate is not None:
            admitted = dispatch.admit(gate, body, trio.current_time(), self.tracker.in_sasl_exchange, self.context)
            if isinstance(admitted, Close):
                raise ConnectionClosed(admitted.reason, admitted.detail)
            if admitted is not None:  # a raw SASL token, answered by the SASL local API
                await self._raw_token(admitted.answer, frame, parts)
                return
        try:
            record = self._classify(body)
        except ProtocolError as exc:
            raise ConnectionClosed("bad_header", str(exc)) from None
        now = trio.current_time()
        self.stats.requests += 1
        metrics = self.metrics
        if record.kind is FrameKind.SASL_TOKEN:
            self._forward(record, metrics.for_label("SaslToken"), frame, parts, now)
            return
        header = record.header
        assert header is not None
        api = metrics.for_api(header.api_key)
        api.request_bytes.inc(len(frame))
        decision = dispatch.decide(header, frame, self.context, record.expects_response)
        if isinstance(decision, Refresh):  # topic IDs nobody named yet: ask the broker, once
            await self._send_upstream(parts)
            self.writer.deliver()
            await decision.wait()
            decision = dispatch.decide(header, frame, self.context, record.expects_response, refreshed=True)
        if isinstance(decision, Forward):
            api.requests(header.api_version, decision.route.value).inc()
            self._forward(record, api, decision.frame, parts, now, decision.patch, decision.denials)
        elif isinstance(decision, Answer):
            api.requests(header.api_version, decision.outcome).inc()
            await self._local(decision.answer, record, api, frame, now, parts, decision.denials)
        elif isinstance(decision, Close):
            if decision.outcome is not None:
                api.requests(header.api_version, decision.outcome).inc()
            if decision.denials and self.tap is not None:  # a refusal that could not be answered (acks=0)
                self._observe(Slot(record, api, now, local=True, request=frame, denials=decision.denials), None, now)
            raise ConnectionClosed(decision.reason, decision.detail)
        else:
            assert not isinstance(decision, Refresh), "a refresh is asked for once"
            api.requests(header.api_version, "unsupported").inc()
            self.responses.fill(self._local_slot(record, api, frame, now), decision.answer, now)

    async def _local(
        self,
        answer: LocalAnswer,
        record: InFlight,
        api: ApiMetrics,
        frame: memoryview,
        now: float,
        parts: list[bytes | memoryview],
        denials: Denials = (),
    ) -> None:
        """Give a local answer its place; start or hold for an answer-later."""
        api.local.inc()
        self.stats.local += 1
        slot = self._local_slot(record, api, frame, now)
        slot.denials = denials
        if isinstance(answer, Respond):
            self.responses.fill(slot, self.dispatch.encoded(record.header, answer), now)
        elif isinstance(answer, Later):
            assert self._nursery is not None
            if answer.hold:
                # The next request depends on this answer (a login): what was gathered
                # goes first, then the pump waits.
                await self._send_upstream(parts)
                self.writer.deliver()
                await self._answer_later(answer, record, slot)
            else:
                self._nursery.start_soon(self._answer_later, answer, record, slot)
        else:
            await self._send_upstream(parts)
            await self._close(answer, record, slot)

    async def _answer_later(self, later: Later, record: InFlight, slot: Slot) -> None:
        """Await an answer-later and fill its slot (runs in the connection's nursery)."""
        answer = await later.answer()
        if isinstance(answer, Respond):
            self.responses.fill(slot, self.dispatch.encoded(record.header, answer), trio.current_time())
            self.writer.deliver()
        else:
            await self._close(answer, record, slot)

    async def _close(self, close: LocalClose, record: InFlight, slot: Slot) -> NoReturn:
        """End the connection: the last answer in its place, every owed answer out, linger."""
        if close.answer is not None:
            self.responses.fill(slot, self.dispatch.encoded(record.header, close.answer), trio.current_time())
        else:
            self._drop_slot(slot)
        self.writer.deliver()
        with trio.move_on_after(CLOSE_FLUSH_TIMEOUT):
            while self.responses.slots:
                await self.responses.wait_for_room()
        await trio.sleep(close.linger)
        raise ConnectionClosed(close.reason, close.detail)

    def _drop_slot(self, slot: Slot) -> None:
        """A request that gets no answer at all (a failed raw-token login)."""
        try:
            self.responses.slots.remove(slot)
        except ValueError:
            pass
        else:
            self.responses.written()

    async def _raw_token(self, answer: LocalAnswer, frame: memoryview, parts: list[bytes | memoryview]) -> None:
        """A raw SASL token after a v0 handshake, answered by the SASL local API."""
        now = trio.current_time()
        self.stats.requests += 1
        record = InFlight(FrameKind.SASL_TOKEN, None, True)
        api = self.metrics.for_label("SaslToken")
        api.request_bytes.inc(len(frame))
        await self._local(answer, record, api, frame, now, parts)

    def _local_slot(self, record: InFlight, api: ApiMetrics, frame: memoryview, now: float) -> Slot:
        slot = Slot(record, api, now, local=True)
        if self.tap is not None:
            slot.request = frame
        self.responses.take(slot)
        return slot

    def _classify(self, body: memoryview) -> InFlight:
        """The tracker's reading of a request, from a bounded view of a large frame.

        The header, a Produce's acks and a SaslHandshake's mechanism lie at the start of
        the frame; the whole frame is read only when the bounded view is not enough. Not
        during a SASL exchange, where the tracker tells tokens from requests by whether
        the frame parses.
        """
        if len(body) > HEADER_VIEW and not self.tracker.in_sasl_exchange:
            try:
                return self.tracker.classify(body[:HEADER_VIEW])
            except ProtocolError:
                pass  # decided on the whole frame below
        return self.tracker.classify(body)

    def _forward(
        self,
        record: InFlight,
        api: ApiMetrics,
        frame: memoryview,
        parts: list[bytes | memoryview],
        now: float,
        patch: Patch | None = None,
        denials: Denials = (),
    ) -> None:
        parts.append(frame)
        self.stats.forwarded += 1
        self.stats.forwarded_bytes += len(frame)
        self.tracker.expect(record)
        if record.expects_response:
            slot = Slot(record, api, now, forwarded_at=now, patch=patch, denials=denials)
            if self.tap is not None:
                slot.request = frame
            self.responses.take(slot)
            if self.upstream_slots is _NO_SLOTS:
                self.upstream_slots = deque()
            self.upstream_slots.append(slot)
            self.upstream_expected += 1
        elif record.header is not None:  # Produce with acks=0
            if self.silent_produces is None:
                self.silent_produces = SilentProduces()
            self.silent_produces.sent(record.header.correlation_id, self.upstream_expected)
            if self.tap is not None:  # no response will come: the exchange is complete
                self._observe(Slot(record, api, now, forwarded_at=now, request=frame, denials=denials), None, now)

    async def _send_upstream(self, parts: list[bytes | memoryview]) -> None:
        if not parts:
            return
        wire = self._upstream_wire
        if wire is None:
            self.writer.deliver()  # local answers gathered so far need not wait for the dial
            wire = await self._open_upstream()
        frames = parts.copy()
        parts.clear()
        try:
            await wire.send_parts(frames)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self.parts.upstream_failed(f"sending to the broker failed: {exc}", False)
            raise ConnectionClosed("upstream_reset", f"sending to the broker failed: {exc}") from None

    async def _open_upstream(self) -> Wire:
        """Dial the broker for the first request that must be forwarded.

        A connection that only asks the sidecar (ApiVersions, BrokerMetadata), or never
        completes a request, costs the broker nothing.
        """
        try:
            upstream = await self.parts.open_upstream()
        except UpstreamError as exc:
            self.parts.upstream_failed(str(exc), True)
            raise ConnectionClosed("upstream_unreachable", str(exc)) from None
        self._upstream = upstream
        wire = self._upstream_wire = wire_for(upstream)
        assert self._nursery is not None
        self._nursery.start_soon(self._upstream_pump, wire)
        return wire

    # -- upstream side -----------------------------------------------------------------

    async def _upstream_pump(self, wire: Wire) -> None:
        decoder = FrameBuffer(self.parts.settings.response_max_bytes)
        while True:
            view = decoder.direct()
            if view is None:
                data = await self._read_upstream(wire, None)
                count = len(data)
            else:
                count = await self._read_upstream(wire, view)
            if not count:
                self._link_ended(len(self.upstream_slots))
            if view is None:
                decoder.receive_data(data)
            else:
                decoder.filled(count)
            while True:
                try:
                    frame = decoder.next_frame()
                except ProtocolError as exc:
                    raise ConnectionClosed("bad_response", str(exc)) from None
                if frame is NEED_DATA or frame is EOF:
                    break
                self._on_response(frame)
            self.writer.deliver()
            if frame is NEED_DATA and decoder.gathering - decoder.buffered >= STREAM_MIN:
                streaming = self._streamable(decoder)
                if streaming is not None:
                    await self._stream_response(decoder, streaming)

    @overload
    async def _read_upstream(self, wire: Wire, into: None) -> bytes | bytearray: ...
    @overload
    async def _read_upstream(self, wire: Wire, into: memoryview) -> int: ...

    async def _read_upstream(self, wire: Wire, into: memoryview | None) -> bytes | bytearray | int:
        """One read from the broker: the bytes, or with ``into`` how many were read there
        (empty or 0: the broker closed the link). A broken link ends the connection."""
        try:
            if into is None:
                return await wire.receive(UPSTREAM_RECEIVE_SIZE) or b""
            return await wire.receive_into(into) or 0
        except (trio.BrokenResourceError, OSError) as exc:
            self.parts.upstream_failed(f"broker link broke: {exc}", False)
            raise ConnectionClosed("upstream_reset", str(exc)) from None

    def _link_ended(self, owed: int) -> NoReturn:
        """The broker closed the link with ``owed`` answers still to come."""
        if owed:
            self.parts.upstream_failed("broker closed a link with requests pending", False)
            raise ConnectionClosed("upstream_reset", f"broker closed the connection with {owed} request(s) pending")
        raise ConnectionClosed("upstream_closed", "broker closed the connection")

    def _streamable(self, decoder: FrameBuffer) -> Streaming | None:
        """Whether the large response being gathered may go to the client as it arrives.

        Only when nothing is ahead of it for the client (its slot heads the FIFO and no
        write is under way, the writer's included), when no login depends on it whole, and
        when no response filter needs it whole (:meth:`Dispatch.streaming`).
        """
        slots = self.upstream_slots
        writer = self.writer
        if not slots or self.responses.slots[0] is not slots[0] or writer.writing \
                or writer.unsent is not None or self.silent_produces \
                or (self.tap is not None and self.tap.blocked):
            return None
        slot = slots[0]
        header = slot.record.header
        if header is None or slot.record.sasl_mechanism is not None:
            return None
        return self.dispatch.streaming(header, slot.patch, self.gate)

    async def _stream_response(self, decoder: FrameBuffer, streaming: Streaming) -> None:
        """Forward the response being gathered while it arrives (:mod:`proxy.datapath.streaming`)."""
        slot = self.upstream_slots[0]
        try:
            await stream_response(self, slot, decoder, self.dispatch.router, streaming)
        except ProtocolError as exc:  # passing on a response we cannot read could leak a broker
            raise ConnectionClosed("bad_response", f"{slot.api.label} response: {exc}") from None

    # The streaming link (proxy.datapath.streaming.Link).

    @property
    def observed(self) -> bool:
        """Whether observers get each exchange (then a streamed answer is kept whole too)."""
        return self.tap is not None

    def begin_stream(self, body: memoryview) -> None:
        """A streamed answer starts: paired with its request; the client's wire is its own."""
        self.writer.writing = True  # nothing else may go to the client until this answer is out
        self._answered(body)

    async def read_upstream(self, into: memoryview) -> int:
        """A read from the broker for a streamed answer (the link ending ends the connection)."""
        assert self._upstream_wire is not None
        count = await self._read_upstream(self._upstream_wire, into)
        if not count:
            self._link_ended(len(self.upstream_slots) + 1)  # the one streaming is owed too
        return count

    async def send_client(self, parts: list[bytes | memoryview]) -> None:
        """Write to the client from the upstream pump (a streamed answer)."""
        await self.client_wire.send_parts(parts)

    def end_stream(self, slot: Slot, rest: bytes, sent: int, whole: memoryview | None) -> None:
        """A streamed answer is in: its held-back rest fills its slot."""
        slot.streamed = sent
        slot.whole = whole
        slot.api.streamed.inc()
        self.writer.writing = False
        self.responses.fill(slot, rest, trio.current_time())
        self.writer.deliver()

    def _answered(self, body: memoryview) -> InFlight:
        """Pair a response with its request (the oldest forwarded): the correlation id is
        checked, the gate sees it (a login the broker accepted), the slot leaves the
        broker's queue."""
        view = body
        if len(body) > HEADER_VIEW and not (
            self.upstream_slots and self.upstream_slots[0].record.sasl_mechanism is not None
        ):
            view = body[:HEADER_VIEW]
        try:
            record = self.tracker.on_response(view)
        except ProtocolError as exc:
            raise ConnectionClosed("correlation_mismatch", str(exc)) from None
        if self.gate is not None:
            self.gate.on_response(record, view)
        self.upstream_answered += 1
        slot = self.upstream_slots.popleft()
        assert slot.record is record
        return record

    def _on_response(self, frame: memoryview) -> None:
        body = frame[4:]
        if self.silent_produces and self._unasked(body):
            return
        # The tracker reads the correlation id, and the whole body only to learn whether
        # a SaslHandshake v0 succeeded: it gets a bounded view of anything else.
        slot = self.upstream_slots[0]
        record = self._answered(body)
        header = record.header
        if header is None:  # a raw SASL token's answer
            self.responses.fill(slot, frame, trio.current_time())
            return
        data = self.dispatch.response(header, record.response_header_version, frame, slot.patch,
                                      patch_later_min=PATCH_LATER_MIN if self._nursery is not None else None)
        if isinstance(data, Close):
            raise ConnectionClosed(data.reason, data.detail)
        if isinstance(data, PatchLater):
            # Its slot waits, and every answer after it; other connections do not.
            assert self._nursery is not None and slot.patch is not None
            self._nursery.start_soon(self._patch_later, slot, header, record.response_header_version, data.data)
            return
        self.responses.fill(slot, data, trio.current_time())

    async def _patch_later(self, slot: Slot, header: RequestHeader, header_version: int, data: bytes) -> None:
        """A large answer's ACL patch, in slices (runs in the connection's nursery): then its
        slot is filled and what follows it goes too."""
        assert slot.patch is not None
        patched = await self.dispatch.patch_in_slices(slot.patch, header, header_version, data)
        if isinstance(patched, Close):
            raise ConnectionClosed(patched.reason, patched.detail)
        self.responses.fill(slot, patched, trio.current_time())
        self.writer.deliver()

    def _unasked(self, body: memoryview) -> bool:
        """True (and counted) for a broker's answer to a Produce with acks=0: dropped."""
        assert self.silent_produces is not None
        expected = self.upstream_slots[0].record.correlation_id if self.upstream_slots else None
        if not self.silent_produces.unasked(body, self.upstream_answered, expected):
            return False
        self.metrics.unasked_responses.inc()
        self.stats.extra["unasked_responses"] = self.stats.extra.get("unasked_responses", 0) + 1
        return True

    # -- writer (proxy.datapath.writer) ----------------------------------------------------

    def _account(self, done: list[Slot]) -> None:
        """Metrics and observers for answers handed to the client."""
        now = trio.current_time()
        responses = self.responses
        tap = self.tap
        for slot in done:
            size = len(slot.data) if slot.data is not None else 0
            responses.ready_bytes -= size
            api = slot.api
            api.responses.inc()
            api.response_bytes.inc(size + slot.streamed)
            upstream_time = 0.0 if slot.local else slot.answered_at - slot.forwarded_at
            if not slot.local:
                api.upstream_latency.observe(upstream_time)
            api.sidecar_latency.observe(max(0.0, now - slot.received_at - upstream_time))
            if tap is not None:
                self._observe(slot, slot.data if slot.whole is None else slot.whole, now)
            slot.data = slot.whole = None
        self.stats.responses += len(done)

    # -- observers (KIP-388, proxy.datapath.observed) ---------------------------------------

    def _observe(self, slot: Slot, response: bytes | memoryview | None, now: float) -> None:
        if self.tap is not None:
            hand_over(self.tap, self.context, slot, response, now)

    def _observe_unanswered(self) -> None:
        """The connection ended: requests it never answered are complete, with no response."""
        now = trio.current_time()
        for slot in self.responses.slots:
            self._observe(slot, None, now)

    async def _wait_for_observers(self) -> None:
        assert self.tap is not None
        await wait_for_room(self.tap)
