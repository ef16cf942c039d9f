"""One client connection: it reads requests and carries out what the dispatch decides.

* the **client pump** reads request frames; the SASL gate and the chain of request filters
  (:mod:`proxy.datapath.dispatch`) decide each one, and the connection carries the decision
  out: forward it (:mod:`proxy.datapath.broker_link` dials the broker at the first), answer
  it locally now or later, answer it "unsupported" (KIP-35), wait and decide again, or close;
* the **broker side** (:class:`~proxy.datapath.broker_link.BrokerLink`) reads the broker's
  answers, pairs each with its request and hands it to the response filters, streaming a
  large one as it arrives (:mod:`proxy.datapath.streaming`);
* answers leave strictly in request order (:mod:`proxy.datapath.responder`), written at once
  when the client's socket takes them, else by the writer task
  (:mod:`proxy.datapath.writer`).

A local answer that must wait (:class:`~proxy.local.api.Later`) runs in the connection's
nursery and fills its slot when done; the pump does not wait for it (unless it asks to
hold, as a SASL login does), and requests gathered for the broker go at once.

A connection is built from its parts (:class:`Parts`: settings, registry, the dispatch,
metrics, and an ``open_upstream`` factory) and a client stream, so everything here runs on
``trio.testing.memory_stream_pair`` under a virtual clock (tests/proxy).

Client quotas (KIP-219): a request a quota throttles is answered at once, its answer
carrying the throttle time, and the connection is then not read for that long
(:mod:`proxy.datapath.throttle`).

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
resolved once per API and counted in plain numbers, added to Prometheus at a scrape
(:class:`~proxy.datapath.metrics.Tally`); the idle timeout is one sweeper for the sidecar
(:mod:`proxy.datapath.idle`), not a task or a cancel scope per connection; responses are
only scanned, never decoded, unless a response filter needs them.

The fast lane (issue 43): a request whose key and version the router forwards and no
request filter but the unparsed-request policy wants (:meth:`Dispatch.plain
<proxy.datapath.dispatch.Dispatch.plain>`, known once per key and version) is forwarded
without :meth:`~proxy.datapath.dispatch.Dispatch.decide` and the objects it makes; its
header is read with one ``struct`` unpack (:func:`protocol.headers.decode_request_header`),
its answer's top-level tags looked at by a generated walker (:func:`protocol.scan.walker`)
and passed on untouched when they are empty. Requests of one read share its time.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

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
from proxy.datapath.broker_link import HEADER_VIEW, BrokerLink, OpenUpstream
from proxy.datapath.dispatch import (
    Answer,
    Close,
    Dispatch,
    Forward,
    Gate,
    Refresh,
    RequestFilter,
)
from proxy.datapath.errors import ConnectionClosed, frame_cause, reason_of
from proxy.datapath.frames import FrameBuffer
from proxy.datapath.idle import IdleSweeper
from proxy.datapath.memory import MAIN, RequestMemory
from proxy.datapath.metrics import ApiMetrics, SidecarMetrics
from proxy.datapath.observed import hand_over, wait_for_room
from proxy.datapath.responder import Responses, Slot
from proxy.datapath.routing import Router
from proxy.datapath.throttle import Throttle
from proxy.datapath.wire import wire_for
from proxy.datapath.writer import ClientWriter
from proxy.local.api import Answer as LocalAnswer
from proxy.local.api import Close as LocalClose
from proxy.local.api import Context, Later, Respond

log = logging.getLogger(__name__)

RECEIVE_SIZE = 65536
#: How long a closing connection waits for the answers it still owes (a refused login).
CLOSE_FLUSH_TIMEOUT = 5.0



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
        "_expired", "_held", "_mute_scope", "_muted_until", "_nursery", "_owed", "_pool", "_receive_scope", "_stop", "client",
        "client_wire",
        "context", "dispatch", "frame_began", "gate", "last_receive", "link", "listener", "max_buffered",
        "max_in_flight", "metrics", "parts", "peer", "registry", "responses", "stats", "tap", "tracker",
        "writer",
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
        self.stats = ConnectionStats()
        #: Set by :meth:`stop_reading`; the pump stops at its next frame boundary.
        self._stop = False
        #: The scope of the one read in progress (cancelled by :meth:`stop_reading`).
        self._receive_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        #: Answers other processes owe (:attr:`Later.when_ready`): how to give up on each.
        self._owed: dict[int, Callable[[], None]] = {}
        #: Writes to the client, in request order (:mod:`proxy.datapath.writer`).
        self.writer = ClientWriter(self.responses, self.client_wire, self._account, self.tap)
        #: The broker side: the link, the answers owed, the upstream pump (:mod:`proxy.datapath.broker_link`).
        self.link = BrokerLink(
            open_upstream=parts.open_upstream, failed=parts.upstream_failed,
            max_response=settings.response_max_bytes, responses=self.responses, writer=self.writer,
            client_wire=self.client_wire, dispatch=self.dispatch, tracker=self.tracker, gate=self.gate,
            tap=self.tap, metrics=self.metrics, extra=self.stats.extra)
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
        #: Not read before this time: a client-quota throttle (KIP-219).
        self._muted_until = 0.0
        #: The wait of a throttled pump (a drain ends it).
        self._mute_scope: trio.CancelScope | None = None

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
                self.link.attach(nursery)
                # The pump is the nursery's body, not a task of its own (one task fewer per
                # connection); the nursery holds the writer and the answers-later.
                await self._client_pump(nursery.cancel_scope)
        except BaseExceptionGroup as group:
            reason, detail = reason_of(group)
        finally:
            self._nursery = None
            owed, self._owed = self._owed, {}
            for give_up in owed.values():  # answers other processes still owe: not wanted now
                give_up()
            if idle is not None:
                idle.discard(self)
            if self._expired is not None:
                reason, detail = self._expired
            self.parts.memory.change(self._pool, -self._held)
            self._held = 0
            if self.tap is not None:
                self._observe_unanswered()
            self.context.end()  # a local API's state of this connection (a share session)
            await self.link.close()
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
        if self._mute_scope is not None:
            self._mute_scope.cancel()
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
            # What needs no wait is checked here, without a coroutine for it (every pass).
            self.writer.deliver()  # answers filled in this read may be what frees the room
            if self._at_capacity() or self._muted_until or (self.tap is not None and self.tap.blocked):
                began, self.frame_began = self.frame_began, None
                waited = trio.current_time() if began is not None else 0.0
                await self._wait_for_capacity()
                await self._wait_out_throttle()
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
            received = now  # when the requests of this read arrived (after any wait, later)
            while True:
                try:
                    frame = decoder.next_frame()
                except FrameError as exc:
                    raise ConnectionClosed(frame_cause(exc), str(exc)) from None
                except ProtocolError as exc:  # EOF inside a frame
                    raise ConnectionClosed("truncated", str(exc)) from None
                if frame is EOF:
                    await self.link.send(parts)
                    scope.cancel()  # the client is gone: answers cannot be delivered
                    return
                if frame is NEED_DATA:
                    break
                completed += 1
                if self._muted_until > now:
                    # Throttled (by the request before, or an answer that went while the read
                    # waited): the rest of what was read waits it out, as if unread, the way
                    # Kafka reads a connection's next request only after the throttle.
                    await self.link.send(parts)
                    self.writer.deliver()
                    await self._wait_out_throttle()
                    now = received = trio.current_time()
                if self._at_capacity():
                    # One read can hold many requests: the bound holds per request.
                    # Send what is gathered first, or its answers could never come.
                    await self.link.send(parts)
                    await self._wait_for_capacity()
                    received = trio.current_time()
                received = await self._on_request(frame, parts, received)
            if parts:
                await self.link.send(parts)
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

    async def _on_request(self, frame: memoryview, parts: list[bytes | memoryview], received: float) -> float:
        """Carry out what the dispatch decides for one request frame, which arrived at
        ``received``; return when the next one of the same read counts as arrived (later
        if this one waited)."""
        body = frame[4:]
        dispatch = self.dispatch
        gate = self.gate
        if gate is not None:
            admitted = dispatch.admit(gate, body, trio.current_time(), self.tracker.in_sasl_exchange, self.context)
            if isinstance(admitted, Close):
                raise ConnectionClosed(admitted.reason, admitted.detail)
            if admitted is not None:  # a raw SASL token, answered by the SASL local API
                await self._raw_token(admitted.answer, frame, parts)
                return trio.current_time()
        try:
            record = self._classify(body)
        except ProtocolError as exc:
            raise ConnectionClosed("bad_header", str(exc)) from None
        self.stats.requests += 1
        metrics = self.metrics
        if record.kind is FrameKind.SASL_TOKEN:
            self._forward(record, metrics.for_label("SaslToken"), frame, parts, received)
            return received
        header = record.header
        assert header is not None
        api = metrics.for_api(header.api_key)
        api.request_bytes.inc(len(frame))
        if dispatch.plain(header):  # the fast lane: forwarded as it came, nothing to decide
            api.requests(header.api_version, "forwarded").inc()
            self._forward_plain(record, api, frame, parts, received)
            return received
        await self._decided(record, header, api, frame, parts, received)
        return trio.current_time()

    async def _decided(self, record: InFlight, header: RequestHeader, api: ApiMetrics, frame: memoryview,
                       parts: list[bytes | memoryview], now: float) -> None:
        """Carry out the dispatch's decision for a request that is not simply forwarded."""
        dispatch = self.dispatch
        decision = dispatch.decide(header, frame, self.context, record.expects_response)
        if isinstance(decision, Refresh):  # topic IDs nobody named yet: ask the broker, once
            await self.link.send(parts)
            self.writer.deliver()
            await decision.wait()
            decision = dispatch.decide(header, frame, self.context, record.expects_response, refreshed=True)
        if isinstance(decision, Forward):
            api.requests(header.api_version, decision.route.value).inc()
            self._forward(record, api, decision.frame, parts, now, decision.patch, decision.denials,
                          decision.throttle)
        elif isinstance(decision, Answer):
            api.requests(header.api_version, decision.outcome).inc()
            if decision.throttle is not None and decision.throttle.ms > 0:  # refused by a quota: the next waits
                self._mute(now, decision.throttle.ms)
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
                await self.link.send(parts)
                self.writer.deliver()
                await self._answer_later(answer, record, slot)
            elif answer.when_ready is not None:  # another process answers: no task waits
                key = id(slot)
                self._owed[key] = answer.when_ready(lambda done: self._answered(done, record, slot, key))
            else:
                self._nursery.start_soon(self._answer_later, answer, record, slot)
        else:
            await self.link.send(parts)
            await self._close(answer, record, slot)

    def _answered(self, answer: Respond | LocalClose, record: InFlight, slot: Slot, key: int) -> None:
        """An answer another process gave, as it comes: in its slot, and out."""
        nursery = self._nursery
        if self._owed.pop(key, None) is None or nursery is None:
            return  # the connection ended first
        if not isinstance(answer, Respond):
            nursery.start_soon(self._close, answer, record, slot)
            return
        try:
            self.responses.fill(slot, self.dispatch.encoded(record.header, answer), trio.current_time())
            self.writer.deliver()
        except Exception as exc:  # called by the other process's reader: fail this connection only
            nursery.start_soon(_raise, exc)

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

    def _forward_plain(self, record: InFlight, api: ApiMetrics, frame: memoryview,
                       parts: list[bytes | memoryview], now: float) -> None:
        """:meth:`_forward` of a request the fast lane forwards (no patch, refusal or throttle)."""
        if not record.expects_response:  # acks=0: the rare path
            self._forward(record, api, frame, parts, now)
            return
        parts.append(frame)
        stats = self.stats
        stats.forwarded += 1
        stats.forwarded_bytes += len(frame)
        self.tracker.expect(record)
        slot = Slot(record, api, now, None, now)
        if self.tap is not None:
            slot.request = frame
        self.responses.slots.append(slot)
        self.link.expect(slot)

    def _forward(
        self,
        record: InFlight,
        api: ApiMetrics,
        frame: memoryview,
        parts: list[bytes | memoryview],
        now: float,
        patch: Patch | None = None,
        denials: Denials = (),
        throttle: Throttle | None = None,
    ) -> None:
        parts.append(frame)
        self.stats.forwarded += 1
        self.stats.forwarded_bytes += len(frame)
        self.tracker.expect(record)
        if throttle is not None and throttle.ms > 0:  # the next request waits
            self._mute(now, throttle.ms)
        if record.expects_response:
            slot = Slot(record, api, now, forwarded_at=now, patch=patch, denials=denials, throttle=throttle)
            if self.tap is not None:
                slot.request = frame
            self.responses.take(slot)
            self.link.expect(slot)
        elif record.header is not None:  # Produce with acks=0
            self.link.sent_silent(record.header.correlation_id)
            if self.tap is not None:  # no response will come: the exchange is complete
                self._observe(Slot(record, api, now, forwarded_at=now, request=frame, denials=denials), None, now)

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
            throttle = slot.throttle
            if throttle is not None and throttle.ms > 0 and throttle.measure_answer is not None:
                self._mute(now, throttle.ms)  # a throttle the answer decided runs from the answer
            slot.data = slot.whole = None
        self.stats.responses += len(done)

    async def _wait_out_throttle(self) -> None:
        """Wait while a client-quota throttle mutes the connection (a drain ends the wait)."""
        if self._muted_until > trio.current_time() and not self._stop:
            with trio.CancelScope() as self._mute_scope:
                await trio.sleep_until(self._muted_until)
            self._mute_scope = None

    def _mute(self, now: float, ms: int) -> None:
        """Read nothing more from the client for ``ms`` from ``now`` (a quota's throttle)."""
        self._muted_until = max(self._muted_until, now + ms / 1000)

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


async def _raise(exc: Exception) -> NoReturn:
    """End a connection with ``exc`` from a task of its nursery, as if raised there."""
    raise exc
