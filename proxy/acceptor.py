"""The accept loop of one listener, with the KIP-612 gate in front of every connection.

For each socket: accept it; turn it away if its IP is over its connection-rate quota
(held for the delay, then closed: "delay, then drop"); record it on the sidecar-wide and
listener rate sensors and wait out the returned delay (the acceptor does not accept
anything else meanwhile, as Kafka's acceptor thread); wait for a free slot under
``max.connections``; close it at once if its IP is at ``max.connections.per.ip``.
See :mod:`quotas.gate` for why the per-IP rate is checked first. Accepted sockets are served in the
``connections`` nursery, which outlives the accept loop so draining can stop accepting
without cutting in-flight requests.
"""

from __future__ import annotations

import errno
import logging
from typing import TYPE_CHECKING

import trio

from quotas.gate import Verdict

if TYPE_CHECKING:
    import ssl

    from proxy.server import Sidecar

log = logging.getLogger(__name__)

# accept() errors that mean "out of resources right now": wait and retry, as trio's
# serve_listeners does, instead of crashing the listener.
_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
RESOURCE_BACKOFF = 0.1


def now_ms() -> int:
    """trio's clock in milliseconds (virtual under a MockClock in tests)."""
    return int(trio.current_time() * 1000)


async def accept_loop(
    sidecar: Sidecar,
    listener: str,
    socket_listener: trio.SocketListener,
    context: ssl.SSLContext | None,
    connections: trio.Nursery,
) -> None:
    """Accept on one socket until cancelled."""
    gate = sidecar.gate
    metrics = sidecar.metrics
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
        started = trio.current_time()
        delay = gate.record_connection(listener, now_ms())
        if delay > 0:
            await trio.sleep(delay / 1000)
        while not gate.slot_available(listener):
            await sidecar.wait_slot_freed()
        blocked = trio.current_time() - started
        if blocked > 0:
            gate.note_blocked(listener, blocked * 1000)
        if gate.admit_ip(listener, ip).verdict is Verdict.ACCEPT:
            connections.start_soon(sidecar.serve_connection, stream, listener, context, ip)
            continue
        metrics.connections_closed.labels(listener, Verdict.TOO_MANY.value).inc()
        await trio.aclose_forcefully(stream)


async def _hold_then_close(stream: trio.SocketStream, delay_ms: int) -> None:
    """KIP-612 per-IP throttling: keep the socket for the delay, then close it."""
    try:
        await trio.sleep(delay_ms / 1000)
    finally:
        await trio.aclose_forcefully(stream)
