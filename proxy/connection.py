"""One client connection: three tasks around one upstream link.

* the **client pump** reads request frames, asks the :class:`~proxy.router.Router` what
  to do with each, and either forwards the original bytes upstream, answers locally, or
  answers "unsupported" (KIP-35);
* the **upstream pump** reads response frames, pairs each with its request through the
  :class:`~protocol.correlation.CorrelationTracker`, and rewrites broker addresses where
  a response names brokers;
* the **writer** sends responses to the client strictly in request order: every request
  that expects an answer takes a :class:`Slot` in one FIFO when it arrives, whoever
  fills it, and the writer sends the ready prefix of that FIFO in one write.

Backpressure: the client pump stops reading while the FIFO holds
``sidecar.max.in.flight.requests.per.connection`` slots or the ready responses waiting
for the client exceed ``sidecar.max.buffered.bytes.per.connection``.

Every way a connection ends is one log line and one ``ksidecar_connections_closed``
reason; errors on one connection never reach another.

Cost per frame (``python -m tests.bench --profile``): frames are memoryview slices of the
bytes each read returned and go upstream as they are; only the request header is decoded
(from a bounded view, :data:`HEADER_VIEW`, so a megabyte Produce is never copied to read
its header); metric children are resolved once per API (:meth:`SidecarMetrics.for_api`);
the idle timeout is one watchdog task per connection, not a cancel scope per read; and
responses are only scanned, never decoded, unless they name brokers
(:meth:`Router.rewrite_response`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

import trio

from protocol.apis import ALTER_USER_SCRAM_CREDENTIALS, SASL_AUTHENTICATE
from protocol.correlation import CorrelationTracker, FrameKind, InFlight
from protocol.errors import FrameError, ProtocolError
from protocol.framing import EOF, NEED_DATA, FrameDecoder, size_prefix
from protocol.headers import encode_response_header, peek_correlation_id
from proxy.router import Decision
from proxy.upstream import UpstreamError

if TYPE_CHECKING:
    from proxy.handlers.sasl import SaslGate
    from proxy.metrics import ApiMetrics
    from proxy.server import Sidecar

log = logging.getLogger(__name__)

RECEIVE_SIZE = 65536
#: Reads from the broker: Fetch responses run to megabytes, and each read is a trip
#: through the event loop and a chunk the frame decoder gathers.
UPSTREAM_RECEIVE_SIZE = 262144
#: Header decoding is given at most this much of a frame: the protocol readers copy what
#: they are given into a stream, and a request header or a response's correlation id
#: lies in the first bytes (a longer header is retried on the whole frame).
HEADER_VIEW = 65536
#: acks=0 Produce requests remembered per connection in case the broker answers them.
MAX_SILENT_PRODUCES = 1024
#: How often a connection held up by a blocking observer looks again for room (seconds).
BLOCKED_POLL = 0.001
#: Requests whose bodies carry secrets (SaslAuthenticate: a PLAIN password or SCRAM proof;
#: AlterUserScramCredentials: salted passwords): observers get their header facts only.
SECRET_REQUESTS = frozenset({SASL_AUTHENTICATE, ALTER_USER_SCRAM_CREDENTIALS})


class ConnectionClosed(Exception):
    """Ends a connection; ``reason`` becomes the metric label, ``detail`` the log line."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail


@dataclass(slots=True)
class Slot:
    """A response position in the client's FIFO."""

    record: InFlight
    api: ApiMetrics
    received_at: float
    data: bytes | memoryview | None = None
    forwarded_at: float = 0.0
    answered_at: float = 0.0
    local: bool = False
    #: The request frame, kept for observers until the exchange completes (else ``None``).
    request: bytes | memoryview | None = None


@dataclass
class ConnectionStats:
    """Counters one connection keeps (for logs and tests)."""

    requests: int = 0
    responses: int = 0
    local: int = 0
    forwarded_bytes: int = 0
    rewritten: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class Connection:
    """A client connection and its upstream link; :meth:`run` serves it to the end."""

    def __init__(
        self,
        sidecar: Sidecar,
        client: trio.abc.Stream,
        listener: str,
        peer: tuple[str, int],
    ) -> None:
        self.sidecar = sidecar
        self.client = client
        self.listener = listener
        self.peer = peer
        #: Who the client is: ``User:<name>`` once SASL authenticated it, else anonymous.
        self.principal = "User:ANONYMOUS"
        hub = sidecar.observers
        #: The hand-off to observers (KIP-388); ``None`` when there are none: no cost.
        self.tap = hub.tap(listener, peer[0], peer[1], sidecar.broker_id) if hub is not None else None
        config = sidecar.config
        self.max_in_flight: int = config["sidecar.max.in.flight.requests.per.connection"]
        self.max_buffered: int = config["sidecar.max.buffered.bytes.per.connection"]
        self.idle_timeout: float = config["connections.max.idle.ms"] / 1000
        self.tracker = CorrelationTracker(sidecar.registry)
        self.router = sidecar.router_for(listener)
        #: The SASL gate on SASL listeners (:mod:`proxy.handlers.sasl`), else ``None``.
        self.sasl: SaslGate | None = self.router.sasl_gate(self)
        self.slots: deque[Slot] = deque()
        self.upstream_slots: deque[Slot] = deque()
        # Produce requests with acks=0 sent upstream, as (correlation id, responses the
        # upstream owed before it): Kafka never answers them, but some brokers do (Tansu
        # 0.6); such an answer is recognised by position and id and dropped (_unasked).
        self.silent_produces: deque[tuple[int, int]] = deque(maxlen=MAX_SILENT_PRODUCES)
        self.upstream_expected = 0
        self.upstream_answered = 0
        self.ready_bytes = 0
        self.stats = ConnectionStats()
        self._wake_writer = trio.Event()
        self._wake_reader = trio.Event()
        self._reading = True
        self.read_scope = trio.CancelScope()
        #: When the client last sent bytes (the idle watchdog's reference).
        self.last_receive = trio.current_time()

    # -- lifecycle ---------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it ends; never raises for a peer's fault."""
        metrics = self.sidecar.metrics
        reason, detail = "client_closed", ""
        upstream: trio.abc.Stream | None = None
        try:
            upstream = await self.sidecar.upstream.connect()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._client_pump, upstream, nursery.cancel_scope)
                nursery.start_soon(self._upstream_pump, upstream, nursery.cancel_scope)
                nursery.start_soon(self._writer, nursery.cancel_scope)
                nursery.start_soon(self._idle_watchdog)
        except UpstreamError as exc:
            reason, detail = "upstream_unreachable", str(exc)
        except BaseExceptionGroup as group:
            reason, detail = _reason_of(group)
        finally:
            if self.tap is not None:
                self._observe_unanswered()
            if upstream is not None:
                await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(self.client)
        if reason not in ("client_closed", "drained"):
            metrics.errors.labels(reason).inc()
            log.info(
                "closed %s:%d on %s: %s%s", self.peer[0], self.peer[1], self.listener, reason,
                f" ({detail})" if detail else "",
            )
        metrics.connections_closed.labels(self.listener, reason).inc()

    def stop_reading(self) -> None:
        """Stop taking new requests (shutdown drain); in-flight ones still complete."""
        self.read_scope.cancel()

    # -- client side -------------------------------------------------------------------

    async def _client_pump(self, upstream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        decoder = FrameDecoder(self.sidecar.config["socket.request.max.bytes"])
        receive = self.client.receive_some
        with self.read_scope:
            while True:
                await self._wait_for_capacity()
                data = await receive(RECEIVE_SIZE)
                self.last_receive = trio.current_time()
                decoder.receive_data(data)
                parts: list[bytes | memoryview] = []
                while True:
                    try:
                        frame = decoder.next_frame()
                    except FrameError as exc:
                        raise ConnectionClosed(_frame_cause(exc), str(exc)) from None
                    except ProtocolError as exc:  # EOF inside a frame
                        raise ConnectionClosed("truncated", str(exc)) from None
                    if frame is EOF:
                        await self._send_upstream(upstream, parts)
                        await self._finish_after_eof(scope)
                        return
                    if frame is NEED_DATA:
                        break
                    if self._at_capacity():
                        # One read can hold many requests: the bound holds per request.
                        # Send what is gathered first, or its answers could never come.
                        await self._send_upstream(upstream, parts)
                        await self._wait_for_capacity()
                    await self._on_request(frame, parts, upstream)
                await self._send_upstream(upstream, parts)
        # Draining: no more requests; let the writer finish what is in flight.
        self._reading = False
        self._wake_writer.set()

    async def _idle_watchdog(self) -> None:
        """Close the connection after ``connections.max.idle.ms`` without a request.

        A connection waiting for answers is not idle; nor is one that is draining. One
        task per connection instead of a timeout around every read: a cancel scope per
        read showed in profiles of small requests.
        """
        mark = self.last_receive
        while True:
            await trio.sleep_until(max(self.last_receive, mark) + self.idle_timeout)
            now = trio.current_time()
            if now < self.last_receive + self.idle_timeout:
                continue  # the client sent something meanwhile
            if self.slots or not self._reading:
                mark = now  # busy or draining: look again one period from now
                continue
            raise ConnectionClosed("idle", f"no request for {self.idle_timeout:g}s")

    async def close_when_answered(
        self,
        parts: list[bytes | memoryview],
        upstream: trio.abc.Stream,
        reason: str,
        detail: str,
        timeout: float,
        linger: float = 0.0,
    ) -> NoReturn:
        """Deliver every answer owed (up to ``timeout``), wait ``linger``, then end the connection.

        A refused SASL client gets its error answer before the connection closes, as
        Kafka does; requests gathered for the broker are sent first, so their answers
        (which come earlier in order) can arrive.
        """
        await self._send_upstream(upstream, parts)
        with trio.move_on_after(timeout):
            while self.slots:
                self._wake_reader = trio.Event()
                await self._wake_reader.wait()
        await trio.sleep(linger)
        raise ConnectionClosed(reason, detail)

    async def _finish_after_eof(self, scope: trio.CancelScope) -> None:
        # The client closed its side: answers cannot be delivered, so stop everything.
        scope.cancel()

    def _at_capacity(self) -> bool:
        return len(self.slots) >= self.max_in_flight or self.ready_bytes > self.max_buffered

    async def _wait_for_capacity(self) -> None:
        if self.tap is not None and self.tap.blocked:
            await self._wait_for_observers()
        while self._at_capacity():
            self._wake_reader = trio.Event()
            await self._wake_reader.wait()

    async def _on_request(
        self, frame: memoryview, parts: list[bytes | memoryview], upstream: trio.abc.Stream
    ) -> None:
        if self.sasl is not None and await self.sasl.intercept(frame, parts, upstream):
            return  # a SASL exchange the sidecar answers itself (or refused: it raised)
        sidecar = self.sidecar
        metrics = sidecar.metrics
        body = frame[4:]
        try:
            record = self._classify(body)
        except ProtocolError as exc:
            raise ConnectionClosed("bad_header", str(exc)) from None
        now = trio.current_time()
        self.stats.requests += 1
        if record.kind is FrameKind.SASL_TOKEN:
            self._forward(record, metrics.for_label("SaslToken"), frame, parts, now)
            return
        header = record.header
        assert header is not None
        api = metrics.for_api(header.api_key)
        api_label = api.label
        api.request_bytes.inc(len(frame))
        decision = self.router.decide(header, body)
        api.requests(header.api_version, decision.value).inc()
        if decision is Decision.FORWARD:
            self._forward(record, api, frame, parts, now)
            return
        if decision is Decision.UNSUPPORTED:
            metrics.unsupported.labels(metrics.unknown_key_label(header.api_key)).inc()
            if not record.expects_response:  # Produce acks=0: an answer would desynchronise
                raise ConnectionClosed(
                    "unsupported_request",
                    f"api key {header.api_key} v{header.api_version} (acks=0) is not supported",
                )
            if sidecar.config["sidecar.unsupported.request.policy"] == "close":
                raise ConnectionClosed(
                    "unsupported_request",
                    f"api key {header.api_key} v{header.api_version} is not supported",
                )
            # KIP-35 draft: a response holding only the correlation id, connection kept.
            response = size_prefix(4) + header.correlation_id.to_bytes(4, "big", signed=True)
            self._answer_locally(record, api, response, now, frame)
            return
        try:
            version, response_body = await self.router.answer(header, body[header.size :], self)
        except ProtocolError as exc:  # a body we cannot read: Kafka closes the connection too
            raise ConnectionClosed("bad_request", f"{api_label} v{header.api_version}: {exc}") from None
        spec = sidecar.registry.api(header.api_key)
        head = encode_response_header(header.correlation_id, spec.response_header_version(version))
        response = size_prefix(len(head) + len(response_body)) + head + response_body
        self.answer_local(record, api, response, now, frame)

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
    ) -> None:
        parts.append(frame)
        self.stats.forwarded_bytes += len(frame)
        self.tracker.expect(record)
        if record.expects_response:
            slot = Slot(record, api, now, forwarded_at=now)
            if self.tap is not None:
                slot.request = frame
            self.slots.append(slot)
            self.upstream_slots.append(slot)
            self.upstream_expected += 1
        elif record.header is not None:  # Produce with acks=0
            self.silent_produces.append((record.header.correlation_id, self.upstream_expected))
            if self.tap is not None:  # no response will come: the exchange is complete
                self._observe(Slot(record, api, now, forwarded_at=now, request=frame), None, now)

    def answer_local(
        self, record: InFlight, api: ApiMetrics, response: bytes, now: float,
        frame: memoryview | None = None,
    ) -> None:
        """Queue the sidecar's own answer to a request, counted as answered locally."""
        api.local.inc()
        self.stats.local += 1
        self._answer_locally(record, api, response, now, frame)

    def _answer_locally(
        self, record: InFlight, api: ApiMetrics, response: bytes, now: float,
        frame: memoryview | None = None,
    ) -> None:
        slot = Slot(record, api, now, data=response, answered_at=now, local=True)
        if self.tap is not None:
            slot.request = frame
        self.slots.append(slot)
        self.ready_bytes += len(response)
        self._wake_writer.set()

    async def _send_upstream(self, upstream: trio.abc.Stream, parts: list[bytes | memoryview]) -> None:
        if not parts:
            return
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        try:
            await upstream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionClosed("upstream_reset", f"sending to the broker failed: {exc}") from None

    # -- upstream side -----------------------------------------------------------------

    async def _upstream_pump(self, upstream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        decoder = FrameDecoder(self.sidecar.config["sidecar.response.max.bytes"])
        receive = upstream.receive_some
        while True:
            try:
                data = await receive(UPSTREAM_RECEIVE_SIZE)
            except (trio.BrokenResourceError, OSError) as exc:
                raise ConnectionClosed("upstream_reset", str(exc)) from None
            if not data:
                if self.upstream_slots:
                    raise ConnectionClosed(
                        "upstream_reset",
                        f"broker closed the connection with {len(self.upstream_slots)} request(s) pending",
                    )
                raise ConnectionClosed("upstream_closed", "broker closed the connection")
            decoder.receive_data(data)
            while True:
                try:
                    frame = decoder.next_frame()
                except ProtocolError as exc:
                    raise ConnectionClosed("bad_response", str(exc)) from None
                if frame is NEED_DATA or frame is EOF:
                    break
                self._on_response(frame)

    def _on_response(self, frame: memoryview) -> None:
        body = frame[4:]
        if self.silent_produces and self._unasked(body):
            return
        # The tracker reads the correlation id, and the whole body only to learn whether
        # a SaslHandshake v0 succeeded: give it a bounded view of anything else.
        view = body
        if len(body) > HEADER_VIEW and not (
            self.upstream_slots and self.upstream_slots[0].record.sasl_mechanism is not None
        ):
            view = body[:HEADER_VIEW]
        try:
            record = self.tracker.on_response(view)
        except ProtocolError as exc:
            raise ConnectionClosed("correlation_mismatch", str(exc)) from None
        if self.sasl is not None:
            self.sasl.on_response(record, view)  # passthrough: did the broker accept a login?
        self.upstream_answered += 1
        slot = self.upstream_slots.popleft()
        assert slot.record is record
        slot.answered_at = trio.current_time()
        data: bytes | memoryview = frame
        header = record.header
        if header is not None:
            try:
                rewritten = self.router.rewrite_response(header, record.response_header_version, body)
            except ProtocolError as exc:
                # Passing on a response we cannot read could leak a broker address.
                raise ConnectionClosed("bad_response", f"{slot.api.label} response: {exc}") from None
            if rewritten is not None:
                data = rewritten
                self.stats.rewritten += 1
        slot.data = data
        self.ready_bytes += len(data)
        self._wake_writer.set()

    def _unasked(self, body: memoryview) -> bool:
        """True (and counted) for a broker's answer to a Produce with acks=0: dropped.

        Responses come in request order, so such an answer can only arrive right after the
        responses owed before that Produce, and it carries the Produce's correlation id.
        When the next expected response has the same id, it wins (a Kafka broker never
        answers acks=0).
        """
        silent = self.silent_produces
        while silent and silent[0][1] < self.upstream_answered:
            silent.popleft()  # a later request was answered: no answer can come for it now
        if not silent or silent[0][1] != self.upstream_answered:
            return False
        try:
            correlation_id = peek_correlation_id(body[:4])
        except ProtocolError:
            return False
        expected = self.upstream_slots[0].record.correlation_id if self.upstream_slots else None
        if correlation_id != silent[0][0] or correlation_id == expected:
            return False
        silent.popleft()
        self.sidecar.metrics.unasked_responses.inc()
        self.stats.extra["unasked_responses"] = self.stats.extra.get("unasked_responses", 0) + 1
        return True

    # -- writer ------------------------------------------------------------------------

    async def _writer(self, scope: trio.CancelScope) -> None:
        while True:
            self._wake_writer = trio.Event()
            batch: list[bytes | memoryview] = []
            done: list[Slot] = []
            while self.slots and self.slots[0].data is not None:
                slot = self.slots.popleft()
                assert slot.data is not None
                batch.append(slot.data)
                done.append(slot)
            if batch:
                data = batch[0] if len(batch) == 1 else b"".join(batch)
                await self.client.send_all(data)
                now = trio.current_time()
                for slot in done:
                    size = len(slot.data) if slot.data is not None else 0
                    self.ready_bytes -= size
                    api = slot.api
                    api.responses.inc()
                    api.response_bytes.inc(size)
                    upstream_time = 0.0 if slot.local else slot.answered_at - slot.forwarded_at
                    if not slot.local:
                        api.upstream_latency.observe(upstream_time)
                    api.sidecar_latency.observe(max(0.0, now - slot.received_at - upstream_time))
                    if self.tap is not None:
                        self._observe(slot, slot.data, now)
                    slot.data = None
                self.stats.responses += len(done)
                if self.tap is not None and self.tap.blocked:
                    await self._wait_for_observers()
                self._wake_reader.set()
                continue
            if not self._reading and not self.slots:
                raise ConnectionClosed("drained")
            await self._wake_writer.wait()

    # -- observers (KIP-388) -------------------------------------------------------------

    def _observe(self, slot: Slot, response: bytes | memoryview | None, now: float) -> None:
        """Hand a complete exchange to the observers (``response``: as sent, or ``None``)."""
        record = slot.record
        if record.header is None or self.tap is None:
            return  # a raw SASL token is not a Kafka request
        elapsed = now - slot.received_at
        frame = slot.request
        size = len(frame) if frame is not None else 0
        if record.header.api_key in SECRET_REQUESTS:
            frame = None  # no secret ever reaches an observer (passthrough forwards them)
        self.tap.completed(
            record.header, record.response_header_version, self.principal, frame,
            size, time.time() - elapsed,
            record.expects_response, slot.local, response, elapsed,
            slot.answered_at - slot.forwarded_at,
        )
        slot.request = None

    def _observe_unanswered(self) -> None:
        """The connection ended: requests it never answered are complete, with no response."""
        now = trio.current_time()
        for slot in self.slots:
            self._observe(slot, None, now)

    async def _wait_for_observers(self) -> None:
        """Backpressure from an observer with ``overflow=block``: wait until it has room."""
        assert self.tap is not None
        while not self.tap.retry():
            await trio.sleep(BLOCKED_POLL)


def _reason_of(group: BaseExceptionGroup[BaseException]) -> tuple[str, str]:
    """The first way a connection's tasks ended.

    A bug (any other ``Exception``) costs only this connection: it is logged with its
    traceback and counted as ``internal_error``. Cancellation and other
    ``BaseException`` subclasses are re-raised.
    """
    expected, unexpected = group.split(
        (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError, OSError)
    )
    if unexpected is not None:
        fatal, bugs = unexpected.split(lambda e: not isinstance(e, Exception))
        if fatal is not None:
            raise unexpected
        assert bugs is not None
        log.error("internal error on a connection (closed)", exc_info=bugs)
        first = _leaves(bugs)[0]
        return "internal_error", f"{type(first).__name__}: {first}"
    assert expected is not None
    leaves = list(_leaves(expected))
    for leaf in leaves:
        if isinstance(leaf, ConnectionClosed):
            return leaf.reason, leaf.detail
    return "reset", str(leaves[0]) or type(leaves[0]).__name__


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _frame_cause(exc: FrameError) -> str:
    name = type(exc).__name__
    return {"FrameTooLarge": "frame_too_large", "NegativeFrameSize": "negative_frame_size"}.get(
        name, "bad_frame"
    )
