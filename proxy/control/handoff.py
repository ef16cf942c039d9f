"""The supervisor's channel to one worker: accepted sockets one way, their fate the other.

One ``AF_UNIX``/``SOCK_SEQPACKET`` pair per worker: every message is one datagram holding a
small JSON object, and an accepted connection travels with it as a file descriptor
(``SCM_RIGHTS``), so a message and its socket can never part. What flows:

* supervisor → worker: ``connection`` (id, listener, the peer's IP; with the socket),
  ``drain`` (stop reading, answer what was read, report, exit), ``stop`` (exit now);
* worker → supervisor: ``ready`` (serving), ``closed`` (a connection ended: the supervisor
  gives its KIP-612 slot back), ``drained`` (the count of requests the drain abandoned);
* both ways: ``usage`` (what a worker's clients recorded against their client quotas, which
  the supervisor passes on to every other worker: :mod:`quotas.client_rates`).

The worker ends when its end of the pair reports end-of-file: a supervisor that died
takes its workers with it.
"""

from __future__ import annotations

import array
import json
import socket
from typing import Any

import trio

#: Larger than any message here (most are a few dozen bytes; ``usage`` is cut to fit).
MAX_DATAGRAM = 65536
_FD_SPACE = socket.CMSG_SPACE(array.array("i", [0]).itemsize)


class HandOffError(Exception):
    """A datagram that is not a message of this channel."""


class Channel:
    """One end of a pair, for any number of tasks: sends go one at a time (a socket takes
    one writer at a time, and a full queue, ``net.unix.max_dgram_qlen`` datagrams, makes a
    sender wait), and one task receives."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = trio.socket.from_stdlib_socket(sock)
        self._sending = trio.Lock()

    async def send(self, message: dict[str, Any], fd: int | None = None) -> None:
        """:func:`send`, after any send in progress."""
        async with self._sending:
            await send(self.socket, message, fd)

    async def receive(self) -> tuple[dict[str, Any], int | None] | None:
        """:func:`receive`. A peer that exits with a message of ours still unread (a worker
        that drained and quit while the supervisor's "pong" was on its way) makes Linux
        report ECONNRESET once, *before* the messages the peer sent last, which are still
        queued; they are read on, then the end. A second reset is an error."""
        try:
            return await receive(self.socket)
        except ConnectionResetError:
            return await receive(self.socket)

    def close(self) -> None:
        """Close this end (the peer's next receive reports the end)."""
        self.socket.close()


def pair() -> tuple[socket.socket, socket.socket]:
    """A new channel: ``(supervisor's end, worker's end)``."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


async def send(sock: trio.socket.SocketType, message: dict[str, Any], fd: int | None = None) -> None:
    """Send ``message``, and the file descriptor ``fd`` with it (a copy: close yours after)."""
    data = json.dumps(message).encode()
    if fd is None:
        await sock.send(data)
    else:
        await sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])


def descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The file descriptors a ``recvmsg`` received (``SCM_RIGHTS``), in order."""
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return list(fds)


async def receive(sock: trio.socket.SocketType) -> tuple[dict[str, Any], int | None] | None:
    """The next message and the descriptor it carried, or ``None`` once the peer is gone."""
    data, ancillary, _, _ = await sock.recvmsg(MAX_DATAGRAM, _FD_SPACE)
    fds = descriptors(ancillary)
    if not data and not fds:
        return None
    try:
        message = json.loads(data)
        if not isinstance(message, dict) or not isinstance(message.get("op"), str) or len(fds) > 1:
            raise ValueError(f"not a message: {data[:80]!r} with {len(fds)} descriptor(s)")
    except ValueError as exc:
        for fd in fds:
            socket.close(fd)
        raise HandOffError(str(exc)) from None
    return message, fds[0] if fds else None
