"""The local channel from a worker to the owner of the sidecar-wide state.

One Unix stream per worker carries every remote call of that worker, multiplexed: a call
and its answer share an id, answers come back in any order (a JoinGroup may wait for its
rebalance while heartbeats pass it), and a call the worker gives up on (its client left)
is cancelled at the owner; a client connection that made calls is said to have ended
(``ENDED``, after its last call), so that the owner ends what it keeps for it. Each message
is ``size:u32 kind:u8 id:u32`` then, for a call, an answer or an end, ``meta size:u32``,
the metadata (packed fields, see :func:`call_message`, :func:`answer_message` and
:func:`ended_message`) and the body's bytes.

:class:`OwnerClient` is the worker's end (a :class:`~proxy.local.remote.Owner`);
:func:`serve_calls` is the owner's, one per worker.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import trio

from proxy.datapath.wire import Wire, wire_for
from proxy.local.api import Close, Respond
from proxy.local.remote import RemoteCall

log = logging.getLogger(__name__)

CALL, CANCEL, ANSWER, ENDED = 1, 2, 3, 4
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
    meta: bytes
    body: bytes


def encode(kind: int, call_id: int, meta: bytes | None = None, body: bytes = b"") -> bytes:
    """One message's bytes."""
    tail = b"" if meta is None else _META.pack(len(meta)) + meta + body
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
            if size < _HEAD.size - 4 or size > MAX_MESSAGE or kind not in (CALL, CANCEL, ANSWER, ENDED):
                raise ChannelError(f"bad message head: size {size}, kind {kind}")
            end = 4 + size
            if len(buffer) < end:
                return
            meta = body = b""
            if end > _HEAD.size:
                if end < _HEAD.size + _META.size:
                    raise ChannelError(f"a message of {size} bytes cannot hold its metadata's size")
                (meta_size,) = _META.unpack_from(buffer, _HEAD.size)
                start = _HEAD.size + _META.size
                if start + meta_size > end:
                    raise ChannelError(f"metadata of {meta_size} bytes in a message of {size}")
                meta = bytes(buffer[start:start + meta_size])
                body = bytes(buffer[start + meta_size:end])
            del buffer[:end]
            yield Message(kind, call_id, meta, body)


# A call's metadata: api key, version, correlation id, port, then six strings (listener,
# host, principal, client id, client software name and version; u16 size, 0xFFFF for none).
_CALL = struct.Struct(">hhiH")
# An answer's: flags (CLOSED, LAST), the response version (-1: the request's), the linger,
# then for a close two strings (reason, detail).
_ANSWER = struct.Struct(">Bhd")
_SIZE = struct.Struct(">H")
_NONE = 0xFFFF
CLOSED, LAST = 1, 2


def _strings(*values: str | None) -> bytes:
    out = bytearray()
    for value in values:
        if value is None:
            out += _SIZE.pack(_NONE)
        else:
            raw = value.encode()
            if len(raw) >= _NONE:
                raise ValueError(f"a string of {len(raw)} bytes does not fit a call")
            out += _SIZE.pack(len(raw)) + raw
    return bytes(out)


def _read_strings(meta: bytes, at: int, count: int) -> list[str | None]:
    values: list[str | None] = []
    for _ in range(count):
        if at + 2 > len(meta):
            raise ChannelError("metadata ends inside a string's size")
        (size,) = _SIZE.unpack_from(meta, at)
        at += 2
        if size == _NONE:
            values.append(None)
            continue
        if at + size > len(meta):
            raise ChannelError("metadata ends inside a string")
        try:
            values.append(meta[at:at + size].decode())
        except UnicodeDecodeError as exc:
            raise ChannelError(f"a string that is not UTF-8: {exc}") from None
        at += size
    if at != len(meta):
        raise ChannelError(f"{len(meta) - at} byte(s) after the metadata")
    return values


def call_message(call_id: int, call: RemoteCall) -> bytes:
    """A :class:`RemoteCall` as a message."""
    name, version = call.client_software if call.client_software is not None else (None, None)
    meta = _CALL.pack(call.api_key, call.api_version, call.correlation_id, call.peer[1]) + _strings(
        call.listener, call.peer[0], call.principal, call.client_id, name, version)
    return encode(CALL, call_id, meta, call.body)


def read_call(message: Message) -> RemoteCall:
    """The :class:`RemoteCall` a CALL message carries."""
    meta = message.meta
    if len(meta) < _CALL.size:
        raise ChannelError(f"a call's metadata of {len(meta)} bytes")
    api_key, api_version, correlation_id, port = _CALL.unpack_from(meta)
    listener, host, principal, client_id, name, version = _read_strings(meta, _CALL.size, 6)
    if listener is None or host is None or principal is None:
        raise ChannelError("a call without its listener, host or principal")
    return RemoteCall(listener=listener, peer=(host, port), principal=principal,
                      client_software=(name, version) if name is not None and version is not None else None,
                      api_key=api_key, api_version=api_version, correlation_id=correlation_id,
                      client_id=client_id, body=message.body)


# An end's metadata: the client's port, then two strings (listener, host).
_ENDED = struct.Struct(">H")


def ended_message(listener: str, peer: tuple[str, int]) -> bytes:
    """The message that says a worker's client connection ended (call id 0)."""
    return encode(ENDED, 0, _ENDED.pack(peer[1]) + _strings(listener, peer[0]))


def read_ended(message: Message) -> tuple[str, tuple[str, int]]:
    """The listener and client address an ENDED message names."""
    meta = message.meta
    if len(meta) < _ENDED.size:
        raise ChannelError(f"an end's metadata of {len(meta)} bytes")
    (port,) = _ENDED.unpack_from(meta)
    listener, host = _read_strings(meta, _ENDED.size, 2)
    if listener is None or host is None:
        raise ChannelError("an end without its listener or host")
    return listener, (host, port)


def answer_message(call_id: int, answer: Respond | Close) -> bytes:
    """An answer (its body already encoded) as a message."""
    if isinstance(answer, Respond):
        assert isinstance(answer.body, bytes)
        version = -1 if answer.version is None else answer.version
        return encode(ANSWER, call_id, _ANSWER.pack(0, version, 0.0), answer.body)
    last = answer.answer
    version = -1 if last is None or last.version is None else last.version
    meta = _ANSWER.pack(CLOSED | (LAST if last is not None else 0), version, answer.linger)
    body = b"" if last is None else last.body
    assert isinstance(body, bytes)
    return encode(ANSWER, call_id, meta + _strings(answer.reason, answer.detail), body)


def read_answer(message: Message) -> Respond | Close:
    """The answer an ANSWER message carries."""
    meta = message.meta
    if len(meta) < _ANSWER.size:
        raise ChannelError(f"an answer's metadata of {len(meta)} bytes")
    flags, raw_version, linger = _ANSWER.unpack_from(meta)
    version = None if raw_version == -1 else raw_version
    if not flags & CLOSED:
        _read_strings(meta, _ANSWER.size, 0)
        return Respond(body=message.body, version=version)
    reason, detail = _read_strings(meta, _ANSWER.size, 2)
    last = Respond(body=message.body, version=version) if flags & LAST else None
    return Close(reason=reason or "", detail=detail or "", answer=last, linger=linger)


class Outbox:
    """Messages to one peer, in order: written at once when the socket takes them (one
    scheduler pass less for every call and answer), the rest by :meth:`run`. Once the peer
    is gone, messages are dropped: the reader of the same channel sees the end and says so."""

    def __init__(self, wire: Wire) -> None:
        self._wire = wire
        self._backlog: list[bytes] = []
        self._more = trio.Event()
        self.broken = False

    def put(self, message: bytes) -> None:
        """Send ``message`` after everything put before it."""
        if self.broken:
            return
        if not self._backlog:
            try:
                sent = self._wire.try_send(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.broken = True
                return
            if sent == len(message):
                return
            message = message[sent:]
        self._backlog.append(message)
        self._more.set()

    async def run(self) -> None:
        """Write the backlog whenever there is one, until cancelled or the peer is gone."""
        while not self.broken:
            await self._more.wait()
            self._more = trio.Event()
            while self._backlog:
                batch, self._backlog = b"".join(self._backlog), []
                try:
                    await self._wire.send(batch)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.broken = True
                    return


def unreachable(detail: str) -> Close:
    """What a client gets when the owner cannot answer: its connection closes (it reconnects,
    as after any broker restart), never an answer made up here."""
    return Close(reason="owner_unreachable", detail=detail)


class OwnerClient:
    """The worker's end: :meth:`send` from any task, :meth:`run` reads the answers."""

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

    def connection_ended(self, listener: str, peer: tuple[str, int]) -> None:
        """Tell the owner that a client connection which made calls ended (after every
        call and cancel of it, the channel keeps their order)."""
        if self._broken is None:
            self._outbox.put(ended_message(listener, peer))

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
                        try:
                            pending.done(read_answer(message))
                        except ChannelError:
                            raise
                        except Exception:  # a taker's bug costs its own call, not the channel
                            log.exception("taking the answer to call %d failed", message.call_id)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ChannelError) as exc:
            log.error("the channel to the sidecar's owner process failed: %s", exc)

    def _fail(self, detail: str) -> None:
        self._broken = detail
        waiting, self._waiting = self._waiting, {}
        for pending in waiting.values():
            pending.done(unreachable(detail))


class Pending:
    """One call sent and not yet answered."""

    __slots__ = ("_answered", "_callback", "_client", "call_id", "result")

    def __init__(self, client: OwnerClient, call_id: int) -> None:
        self._client = client
        self.call_id = call_id
        self.result: Respond | Close | None = None
        self._answered: trio.Event | None = None
        self._callback: Callable[[Respond | Close], None] | None = None

    def done(self, result: Respond | Close) -> None:
        """The answer came (or the channel ended)."""
        self.result = result
        if self._answered is not None:
            self._answered.set()
        callback, self._callback = self._callback, None
        if callback is not None:
            callback(result)

    def when_ready(self, callback: Callable[[Respond | Close], None]) -> Callable[[], None]:
        """Call ``callback`` with the answer when it comes (at once if it has); the function
        returned gives up on it, and cancels the call at the owner."""
        if self.result is not None:
            callback(self.result)
        else:
            self._callback = callback
        return self._give_up

    def _give_up(self) -> None:
        self._callback = None
        if self.result is None:
            self._client._cancel(self.call_id)

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


def _nothing_ended(_listener: str, _peer: tuple[str, int]) -> None:
    """What a channel that keeps nothing per connection does when one ends."""


async def serve_calls(stream: trio.abc.Stream, begin: Callable[[RemoteCall], Begun], name: str,
                      ended: Callable[[str, tuple[str, int]], None] = _nothing_ended) -> None:
    """The owner's end for one worker (``name`` in logs). Each call begins as it is read, in
    order; an answer that comes later is awaited in its own task; ``ended`` hears of each
    client connection that ended (``ENDED``), in its place among the calls."""
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

    async def read(nursery: trio.Nursery) -> None:
        decoder = Decoder()
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
                elif message.kind == ENDED:
                    ended(*read_ended(message))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run)
        try:  # inside the nursery: what it raises would reach us wrapped in a group
            await read(nursery)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ChannelError) as exc:
            log.warning("the call channel of %s ended: %s", name, exc)
        nursery.cancel_scope.cancel()
