"""The accept loop of one listener, with the KIP-612 gate in front of every connection.

Two tasks per listener. The *accept loop* takes every socket as it arrives and judges its
IP's connection rate on arrival: over quota, it is held for the delay, then closed
("delay, then drop"); otherwise it joins the listener's bounded admission queue. The
*admit loop* takes queued sockets in order, waits out the sidecar-wide and listener
quota delay and for a free slot under ``max.connections`` (as Kafka's acceptor thread
waits), records the connection, and closes it at once if its IP is at
``max.connections.per.ip``. See :mod:`quotas.gate` for why the per-IP rate comes first. Accepted sockets are served in the
``connections`` nursery, which outlives the accept loop so draining can stop accepting
without cutting in-flight requests.
"""

from __future__ import annotations

import errno
import logging
from typing import Protocol

import trio

from proxy.datapath.clock import now_ms
from proxy.datapath.metrics import SidecarMetrics
from quotas.gate import AcceptGate, Verdict

log = logging.getLogger(__name__)

# accept() errors that mean "out of resources right now": wait and retry, as trio's
# serve_listeners does, instead of crashing the listener.
_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
RESOURCE_BACKOFF = 0.1


#: Sockets judged by their IP and waiting for the sidecar-wide/listener quota, per listener.
#: Past this the accept loop stops accepting and the kernel's backlog holds the rest.
ADMISSION_QUEUE = 1024


class Admitting(Protocol):
    """What the acceptor needs of the sidecar: the gate, metrics, and where admitted go."""

    gate: AcceptGate
    metrics: SidecarMetrics

    async def wait_slot_freed(self) -> None:
        """Wait until some admitted connection closes (``max.connections``)."""
        ...

    async def serve_connection(self, stream: trio.SocketStream, listener: str, ip: str) -> None:
        """Serve one admitted connection (over the listener's TLS context as it is then)."""
        ...


async def serve_listener(
    sidecar: Admitting,
    listener: str,
    sockets: list[trio.SocketListener],
    connections: trio.Nursery,
) -> None:
    """Accept on every socket of ``listener`` and admit through its gate until cancelled."""
    send, receive = trio.open_memory_channel[tuple[trio.SocketStream, str]](ADMISSION_QUEUE)
    try:
        async with trio.open_nursery() as nursery:
            for socket_listener in sockets:
                nursery.start_soon(_accept_loop, sidecar, listener, socket_listener, send.clone(), connections)
            nursery.start_soon(_admit_loop, sidecar, listener, receive, connections)
    finally:
        # Cancelled (drain or stop): sockets still waiting for admission are closed.
        while True:
            try:
                stream, _ = receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            await trio.aclose_forcefully(stream)


async def _accept_loop(
    sidecar: Admitting,
    listener: str,
    socket_listener: trio.SocketListener,
    queue: trio.MemorySendChannel[tuple[trio.SocketStream, str]],
    connections: trio.Nursery,
) -> None:
    """Accept at once and judge the peer's IP on arrival; queue the rest for admission.

    Judging the per-IP rate here, not after the shared delay, is what makes it work in a
    storm: a socket left in the kernel backlog behind the sidecar-wide delay would be
    seen at the acceptor's pace, and an offender would look well behaved.
    """
    gate = sidecar.gate
    metrics = sidecar.metrics
    async with queue:
        while True:
            try:
                stream = await socket_listener.accept()
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRORS:
                    log.error("accept on %s failed (%s); retrying in %gs", listener, exc, RESOURCE_BACKOFF)
                    metrics.errors.labels("accept_resources").inc()
                    await trio.sleep(RESOURCE_BACKOFF)
                    continue
                raise
            try:
                ip = stream.socket.getpeername()[0]
            except OSError:  # the peer is already gone
                await trio.aclose_forcefully(stream)
                continue
            throttled = gate.check_ip_rate(listener, ip, now_ms())
            if throttled.verdict is Verdict.THROTTLE:
                metrics.connections_closed.labels(listener, throttled.verdict.value).inc()
                connections.start_soon(_hold_then_close, stream, throttled.delay_ms)
                continue
            await queue.send((stream, ip))


async def _admit_loop(
    sidecar: Admitting,
    listener: str,
    queue: trio.MemoryReceiveChannel[tuple[trio.SocketStream, str]],
    connections: trio.Nursery,
) -> None:
    """Admit queued sockets in order under the sidecar-wide and listener quotas."""
    gate = sidecar.gate
    metrics = sidecar.metrics
    async for stream, ip in queue:
        started = trio.current_time()
        while True:
            delay = gate.connection_delay(listener, now_ms())
            if delay > 0:
                await trio.sleep(delay / 1000)
            elif gate.slot_available(listener):
                break
            else:
                await sidecar.wait_slot_freed()
        blocked_ms = (trio.current_time() - started) * 1000
        gate.record_connection(listener, now_ms(), blocked_ms)
        if blocked_ms > 0:
            gate.note_blocked(listener, blocked_ms)
        if gate.admit_ip(listener, ip).verdict is Verdict.ACCEPT:
            connections.start_soon(sidecar.serve_connection, stream, listener, ip)
            continue
        metrics.connections_closed.labels(listener, Verdict.TOO_MANY.value).inc()
        await trio.aclose_forcefully(stream)


async def _hold_then_close(stream: trio.SocketStream, delay_ms: int) -> None:
    """KIP-612 per-IP throttling: keep the socket for the delay, then close it."""
    try:
        await trio.sleep(delay_ms / 1000)
    finally:
        await trio.aclose_forcefully(stream)
