"""The local channel from a worker to the owner of the sidecar-wide state.

One Unix stream per worker carries every remote call of that worker, multiplexed: a call
and its answer share an id, answers come back in any order (a JoinGroup may wait for its
rebalance while heartbeats pass it), and a call the worker gives up on (its client left)
is cancelled at the owner. Each message is ``size:u32 kind:u8 id:u32`` then, for a call
or an answer, ``meta size:u32``, a small JSON object and the body's bytes.

:class:`OwnerClient` is the worker's end (a :class:`~proxy.local.remote.Owner`);
:func:`serve_calls` is the owner's, one per worker.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import trio

from proxy.datapath.wire import Wire, wire_for
from proxy.local.api import Close, Respond
from proxy.local.remote import RemoteCall

log = logging.getLogger(__name__)

CALL, CANCEL, ANSWER = 1, 2, 3
_HEAD = struct.Struct(">IBI")
_META = struct.Struct(">I")
#: Larger than any request or answer the owned APIs carry; a bigger one is a broken peer.
MAX_MESSAGE = 256 * 1024 * 1024
READ_SIZE = 65536


class ChannelError(Exception):
    """The peer sent something that is not a message of this channel."""


@dataclass(frozen=True, slots=True)
class Message:
    """One decoded message: its kind, call id, metadata and body."""

    kind: int
    call_id: int
    meta: dict[str, Any]
    body: bytes


def encode(kind: int, call_id: int, meta: dict[str, Any] | None = None, body: bytes = b"") -> bytes:
    """One message's bytes."""
    tail = b"" if meta is None else _META.pack(len(raw := json.dumps(meta).encode())) + raw + body
    return _HEAD.pack(_HEAD.size - 4 + len(tail), kind, call_id) + tail


class Decoder:
    """Messages out of a byte stream, whatever the reads' boundaries (sans-IO)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray) -> Iterator[Message]:
        """Every message completed by ``data``."""
        buffer = self._buffer
        buffer += data
        while len(buffer) >= _HEAD.size:
            size, kind, call_id = _HEAD.unpack_from(buffer)
            if size < _HEAD.size - 4 or size > MAX_MESSAGE or kind not in (CALL, CANCEL, ANSWER):
                raise ChannelError(f"bad message head: size {size}, kind {kind}")
            end = 4 + size
            if len(buffer) < end:
                return
            meta: dict[str, Any] = {}
            body = b""
            if end > _HEAD.size:
                (meta_size,) = _META.unpack_from(buffer, _HEAD.size)
                start = _HEAD.size + _META.size
                try:
                    meta = json.loads(bytes(buffer[start:start + meta_size]))
                except ValueError as exc:
                    raise ChannelError(f"unreadable metadata: {exc}") from None
                body = bytes(buffer[start + meta_size:end])
            del buffer[:end]
            yield Message(kind, call_id, meta, body)


def call_message(call_id: int, call: RemoteCall) -> bytes:
    """A :class:`RemoteCall` as a message."""
    meta = {"l": call.listener, "h": call.peer[0], "p": call.peer[1], "u": call.principal,
            "s": list(call.client_software) if call.client_software else None, "k": call.api_key,
            "v": call.api_version, "c": call.correlation_id, "i": call.client_id}
    return encode(CALL, call_id, meta, call.body)


def read_call(message: Message) -> RemoteCall:
    """The :class:`RemoteCall` a CALL message carries."""
    m = message.meta
    try:
        software = m["s"]
        return RemoteCall(listener=str(m["l"]), peer=(str(m["h"]), int(m["p"])), principal=str(m["u"]),
                          client_software=(str(software[0]), str(software[1])) if software else None,
                          api_key=int(m["k"]), api_version=int(m["v"]), correlation_id=int(m["c"]),
                          client_id=None if m["i"] is None else str(m["i"]), body=message.body)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ChannelError(f"unreadable call: {exc!r}") from None


def answer_message(call_id: int, answer: Respond | Close) -> bytes:
    """An answer (its body already encoded) as a message."""
    if isinstance(answer, Respond):
        assert isinstance(answer.body, bytes)
        return encode(ANSWER, call_id, {"v": answer.version}, answer.body)
    last = answer.answer
    meta = {"close": answer.reason, "detail": answer.detail, "linger": answer.linger,
            "last": last is not None, "v": None if last is None else last.version}
    body = b"" if last is None else last.body
    assert isinstance(body, bytes)
    return encode(ANSWER, call_id, meta, body)


def read_answer(message: Message) -> Respond | Close:
    """The answer an ANSWER message carries."""
    m = message.meta
    try:
        version = None if m.get("v") is None else int(m["v"])
        if "close" not in m:
            return Respond(body=message.body, version=version)
        last = Respond(body=message.body, version=version) if m["last"] else None
        return Close(reason=str(m["close"]), detail=str(m["detail"]), answer=last, linger=float(m["linger"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ChannelError(f"unreadable answer: {exc!r}") from None


class Outbox:
    """Messages to one peer, in order: written at once when the socket takes them (one
    scheduler pass less for every call and answer), the rest by :meth:`run`."""

    def __init__(self, wire: Wire) -> None:
        self._wire = wire
        self._backlog: list[bytes] = []
        self._more = trio.Event()

    def put(self, message: bytes) -> None:
        """Send ``message`` after everything put before it."""
        if not self._backlog:
            sent = self._wire.try_send(message)
            if sent == len(message):
                return
            message = message[sent:]
        self._backlog.append(message)
        self._more.set()

    async def run(self) -> None:
        """Write the backlog whenever there is one, until cancelled."""
        while True:
            await self._more.wait()
            self._more = trio.Event()
            while self._backlog:
                batch, self._backlog = b"".join(self._backlog), []
                await self._wire.send(batch)


def unreachable(detail: str) -> Close:
    """What a client gets when the owner cannot answer: its connection closes (it reconnects,
    as after any broker restart), never an answer made up here."""
    return Close(reason="owner_unreachable", detail=detail)


class OwnerClient:
    """The worker's end: :meth:`call` from any task, :meth:`run` reads the answers."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._wire = wire_for(stream)
        self._outbox = Outbox(self._wire)
        self._next_id = 0
        self._waiting: dict[int, Pending] = {}
        self._broken: str | None = None

    def send(self, request: RemoteCall) -> Pending:
        """Send ``request`` now (calls leave in the order they are made); its answer is
        :meth:`Pending.answer`."""
        self._next_id = call_id = (self._next_id + 1) & 0xFFFFFFFF
        pending = Pending(self, call_id)
        if self._broken is not None:
            pending.result = unreachable(self._broken)
            return pending
        self._waiting[call_id] = pending
        self._outbox.put(call_message(call_id, request))
        return pending

    async def call(self, request: RemoteCall) -> Respond | Close:
        """:meth:`send`, then the answer."""
        return await self.send(request).answer()

    def _cancel(self, call_id: int) -> None:
        if self._waiting.pop(call_id, None) is not None and self._broken is None:
            self._outbox.put(encode(CANCEL, call_id))

    async def run(self) -> None:
        """Write what could not be written at once, and read the answers, until the
        channel ends."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._outbox.run)
                await self._read()
                nursery.cancel_scope.cancel()
        finally:
            self._fail("the sidecar's owner process closed the channel")

    async def _read(self) -> None:
        decoder = Decoder()
        try:
            while data := await self._wire.receive(READ_SIZE):
                for message in decoder.feed(data):
                    pending = self._waiting.pop(message.call_id, None)
                    if message.kind == ANSWER and pending is not None:
                        pending.done(read_answer(message))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ChannelError) as exc:
            log.error("the channel to the sidecar's owner process failed: %s", exc)

    def _fail(self, detail: str) -> None:
        self._broken = detail
        waiting, self._waiting = self._waiting, {}
        for pending in waiting.values():
            pending.done(unreachable(detail))


class Pending:
    """One call sent and not yet answered."""

    __slots__ = ("_answered", "_client", "call_id", "result")

    def __init__(self, client: OwnerClient, call_id: int) -> None:
        self._client = client
        self.call_id = call_id
        self.result: Respond | Close | None = None
        self._answered: trio.Event | None = None

    def done(self, result: Respond | Close) -> None:
        """The answer came (or the channel ended)."""
        self.result = result
        if self._answered is not None:
            self._answered.set()

    async def answer(self) -> Respond | Close:
        """Wait for the answer; cancelling the wait cancels the call at the owner."""
        if self.result is None:
            self._answered = trio.Event()
            try:
                await self._answered.wait()
            finally:
                if self.result is None:
                    self._client._cancel(self.call_id)
        assert self.result is not None
        return self.result


#: The owner's answer to a call: now, or an awaitable to finish in the call's own task.
Begun = Respond | Close | Callable[[], Awaitable[Respond | Close]]


async def serve_calls(stream: trio.abc.Stream, begin: Callable[[RemoteCall], Begun], name: str) -> None:
    """The owner's end for one worker (``name`` in logs). Each call begins as it is read, in
    order; an answer that comes later is awaited in its own task."""
    wire = wire_for(stream)
    outbox = Outbox(wire)
    running: dict[int, trio.CancelScope] = {}

    def failed(call: RemoteCall, exc: Exception) -> Close:  # a handler's bug costs its request only
        log.error("answering %s api key %d for %s failed", name, call.api_key, call.peer[0], exc_info=exc)
        return Close(reason="owner_error", detail=f"the owner process failed: {exc!r}")

    async def finish(call_id: int, call: RemoteCall, later: Callable[[], Awaitable[Respond | Close]]) -> None:
        with trio.CancelScope() as scope:
            running[call_id] = scope
            try:
                result = await later()
            except Exception as exc:
                result = failed(call, exc)
            finally:
                running.pop(call_id, None)
            outbox.put(answer_message(call_id, result))

    decoder = Decoder()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outbox.run)
            while data := await wire.receive(READ_SIZE):
                for message in decoder.feed(data):
                    if message.kind == CALL:
                        call = read_call(message)
                        try:
                            begun = begin(call)
                        except Exception as exc:
                            begun = failed(call, exc)
                        if isinstance(begun, Respond | Close):
                            outbox.put(answer_message(message.call_id, begun))
                        else:
                            nursery.start_soon(finish, message.call_id, call, begun)
                    elif message.kind == CANCEL and (scope := running.get(message.call_id)) is not None:
                        scope.cancel()
            nursery.cancel_scope.cancel()
    except (trio.BrokenResourceError, trio.ClosedResourceError, ChannelError) as exc:
        log.warning("the call channel of %s ended: %s", name, exc)
