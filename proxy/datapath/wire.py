"""The byte pipe under one side of a connection: plain TCP straight on the socket.

A connection reads and writes its client and its broker link through a :class:`Wire`.
The base class wraps any ``trio.abc.Stream`` (TLS, the memory streams of the tests) and
costs what the stream costs. :class:`SocketWire`, for a plain ``trio.SocketStream``, calls
the non-blocking socket itself and waits for readiness only when the kernel says it must:

* trio's ``receive_some``/``send_all`` try the call, raise and catch ``BlockingIOError``,
  wait, call again and then pass through the scheduler once more (a checkpoint after
  every successful call): about 7.5 µs more than the bare call per read or write
  (``send`` + ``recv`` of 100 bytes on a socket pair: 18.2 µs through trio, 2.9 µs bare).
  A one-in-flight request makes two reads and two writes in the sidecar.
* a write that the kernel takes whole never yields (:meth:`SocketWire.try_send`), so the
  task that filled an answer can write it itself instead of waking a writer task;
* several frames go out in one ``writev`` (scatter-gather) instead of being joined;
* a read can go straight into the buffer of the frame it belongs to
  (:meth:`Wire.receive_into`), so a megabyte Fetch response is not gathered from chunks;
* a blocked read is interrupted (a drain) by :meth:`SocketWire.interrupt_receive`
  instead of a cancel scope around every read (6 µs each);
* a read that returned less than it asked for emptied the kernel's buffer, almost always:
  the next read waits for readiness first instead of trying (a failed ``read``, its
  ``BlockingIOError``, then the wait: one system call and one exception fewer per pass;
  ``strace -c`` of a saturated sidecar counted as many failed reads as waits).

Fairness: a read that did not have to wait passes through the scheduler once (as trio's
own does), so a client that keeps its socket full cannot starve the other connections.

Errors are trio's: a reset or broken pipe is ``trio.BrokenResourceError``, a closed
socket ``trio.ClosedResourceError``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import trio

#: ``writev`` takes at most this many buffers (IOV_MAX on Linux).
MAX_IOV = 1024

Bytes = bytes | bytearray | memoryview


class Wire:
    """Any ``trio.abc.Stream``: reads and writes as the stream does them."""

    __slots__ = ("stream",)

    #: True when a blocked :meth:`receive` can be interrupted by :meth:`interrupt_receive`.
    interruptible = False
    #: True when :meth:`try_send` writes without waiting (else it writes nothing).
    writes_at_once = False

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream

    async def receive(self, max_bytes: int) -> bytes | bytearray | None:
        """Up to ``max_bytes`` (at least one); ``b""`` at end of stream; ``None`` once
        :meth:`interrupt_receive` stopped reading."""
        return await self.stream.receive_some(max_bytes)

    async def receive_into(self, view: memoryview) -> int | None:
        """Read into ``view`` (at most its length): the count, 0 at end of stream, ``None``
        once interrupted."""
        data = await self.stream.receive_some(len(view))
        view[: len(data)] = data
        return len(data)

    def try_send(self, data: Bytes) -> int:
        """Write what the kernel takes now, never waiting (see :attr:`writes_at_once`)."""
        return 0

    async def send(self, data: Bytes) -> None:
        """Write all of ``data``."""
        await self.stream.send_all(data)

    async def send_parts(self, parts: Sequence[Bytes]) -> None:
        """Write every part, in order."""
        await self.stream.send_all(parts[0] if len(parts) == 1 else b"".join(parts))

    def interrupt_receive(self) -> bool:
        """Make a blocked :meth:`receive` return ``None``; False if this wire cannot."""
        return False


class SocketWire(Wire):
    """A plain TCP socket, driven directly (see the module docstring)."""

    __slots__ = ("_drained", "_interrupted", "_sock")

    interruptible = True
    writes_at_once = True

    def __init__(self, stream: trio.SocketStream) -> None:
        super().__init__(stream)
        self._sock = stream.socket
        self._interrupted = False
        #: The last read returned less than asked: the next one waits for readiness first.
        self._drained = False

    def _fd(self) -> int:
        fd = self._sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the socket was closed")
        return fd

    async def _wait_readable(self) -> bool:
        """Wait until readable; False when :meth:`interrupt_receive` woke us instead."""
        try:
            await trio.lowlevel.wait_readable(self._fd())  # the number: no fileno() calls in trio
        except trio.ClosedResourceError:
            if self._interrupted and self._sock.fileno() >= 0:
                return False
            raise
        return True

    async def receive(self, max_bytes: int) -> bytes | bytearray | None:
        """See :meth:`Wire.receive`."""
        waited = False
        if self._drained:
            self._drained = False
            waited = await self._wait_readable()
        while not self._interrupted:
            try:
                data = os.read(self._fd(), max_bytes)
            except BlockingIOError:
                pass  # wait below, outside the handler: not holding the error and its traceback
            except OSError as exc:
                raise trio.BrokenResourceError(f"reading failed: {exc}") from exc
            else:
                self._drained = 0 < len(data) < max_bytes
                if not waited:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return data
            waited = await self._wait_readable()
        return None

    async def receive_into(self, view: memoryview) -> int | None:
        """See :meth:`Wire.receive_into`."""
        waited = False
        if self._drained:
            self._drained = False
            waited = await self._wait_readable()
        while not self._interrupted:
            try:
                count = os.readv(self._fd(), [view])
            except BlockingIOError:
                pass  # wait below, outside the handler: not holding the error and its traceback
            except OSError as exc:
                raise trio.BrokenResourceError(f"reading failed: {exc}") from exc
            else:
                self._drained = 0 < count < len(view)
                if not waited:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return count
            waited = await self._wait_readable()
        return None

    def try_send(self, data: Bytes) -> int:
        """Write what the kernel takes now (0 when its buffer is full), never waiting."""
        try:
            return os.write(self._fd(), data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise trio.BrokenResourceError(f"writing failed: {exc}") from exc

    async def _wait_writable(self) -> None:
        while True:
            try:
                await trio.lowlevel.wait_writable(self._fd())
                return
            except trio.ClosedResourceError:
                # interrupt_receive wakes every waiter on the socket; a writer waits on.
                if not self._interrupted or self._sock.fileno() < 0:
                    raise

    async def send(self, data: Bytes) -> None:
        """Write all of ``data``, waiting only while the kernel's buffer is full."""
        view = memoryview(data)
        while view:
            sent = self.try_send(view)
            if sent < len(view):
                await self._wait_writable()
            view = view[sent:]

    async def send_parts(self, parts: Sequence[Bytes]) -> None:
        """Write every part with ``writev`` (no joined copy), waiting only when full."""
        if len(parts) == 1:
            await self.send(parts[0])
            return
        pending = [memoryview(p) for p in parts]
        while pending:
            try:
                sent = os.writev(self._fd(), pending[:MAX_IOV])
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise trio.BrokenResourceError(f"writing failed: {exc}") from exc
            while sent and pending:
                if sent >= len(pending[0]):
                    sent -= len(pending.pop(0))
                else:
                    pending[0] = pending[0][sent:]
                    sent = 0
            if pending:
                await self._wait_writable()

    def interrupt_receive(self) -> bool:
        """Stop reading for good: a blocked :meth:`receive` returns ``None``.

        Trio's ``notify_closing`` wakes the tasks waiting on the socket (without closing
        it): the reader sees the flag and returns; a writer waiting for room waits again.
        """
        self._interrupted = True
        if self._sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self._sock)
        return True


def wire_for(stream: trio.abc.Stream) -> Wire:
    """The fastest wire for ``stream``."""
    if type(stream) is trio.SocketStream:
        return SocketWire(stream)
    return Wire(stream)


