"""One worker process of a sidecar with several (``sidecar.workers``).

A worker is forked for its supervisor (:mod:`proxy.control.supervisor`) by a fork server
made before the sidecar began to serve (:mod:`proxy.control.forks`), with every module
imported and the configuration read, so a new worker serves within a fraction of a second.
It builds a :class:`~proxy.control.server.Sidecar` in the worker role from the same
configuration, serves every connection the supervisor hands it, whole (TLS, SASL, the
in-flight order, the link to the broker), and reaches the supervisor for the APIs of the
sidecar-wide state. It ignores SIGTERM and SIGINT: the supervisor decides when it drains.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import trio

from proxy.config import ConfigError, HostPort, SidecarConfig, build_config
from proxy.control import handoff
from proxy.control.calls import OwnerClient
from proxy.control.garbage import collect_fully_on_a_clock, keep_out_of_collections
from proxy.control.metrics_page import ENV, enable_multiprocess, flush, flush_on_a_clock
from proxy.control.server import PreparedReload, Role, Sidecar
from proxy.datapath.clock import now_ms
from quotas.client_rates import ClientRates

log = logging.getLogger(__name__)

#: How often a worker asks whether its supervisor still answers.
PING_INTERVAL = 1.0
#: The shortest silence of the supervisor a worker waits out before it stops.
MIN_SUPERVISOR_SILENCE = 3.0
#: How often a worker tells the others what its clients recorded against client quotas:
#: the others judge on the sidecar's whole rate this much late at most.
USAGE_INTERVAL = 0.02
#: The most a ``usage`` message holds (what is more goes in the next message; a datagram
#: holds :data:`proxy.control.handoff.MAX_DATAGRAM`).
USAGE_MESSAGE_BYTES = 32768


def worker_main(index: int, workers: int, config: SidecarConfig, bound: Mapping[str, tuple[str, int]],
                channel: socket.socket, calls: socket.socket) -> None:
    """The worker process's entry (in a process forked by :mod:`proxy.control.forks`):
    serve until the supervisor says drain or stop, or is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # reloads come from the supervisor
    directory = os.environ.get(ENV)
    if directory:  # before any metric object: this process's changes are buffered too
        enable_multiprocess(Path(directory))
    logging.basicConfig(level=config["sidecar.log.level"].upper(), force=True,
                        format=f"%(asctime)s %(levelname)s worker-{index} %(name)s: %(message)s")
    trio.run(_serve, index, workers, config, {name: HostPort(*address) for name, address in bound.items()},
             channel, calls)


async def _serve(index: int, workers: int, config: SidecarConfig, bound: dict[str, HostPort],
                 channel_socket: socket.socket, calls_socket: socket.socket) -> None:
    channel = handoff.Channel(channel_socket)
    owner = OwnerClient(trio.SocketStream(trio.socket.from_stdlib_socket(calls_socket)))
    sidecar = Sidecar(config, role=Role.WORKER, owner=owner, worker=index, workers=workers)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(owner.run)
        await nursery.start(partial(sidecar.serve, bound=bound))
        keep_out_of_collections()
        nursery.start_soon(collect_fully_on_a_clock)
        nursery.start_soon(flush_on_a_clock, sidecar.metrics.flush)
        if sidecar.client_quotas.store is not None:
            nursery.start_soon(_share_usage, channel, sidecar.client_quotas.rates)
        await channel.send({"op": "ready"})
        missed = [0.0]  # pings unanswered in a row (the supervisor answers each)
        silence = max(MIN_SUPERVISOR_SILENCE, config["zookeeper.session.timeout.ms"] / 1000)
        nursery.start_soon(_watch_supervisor, channel, missed, silence, nursery.cancel_scope)
        reload: PreparedReload | None = None
        async with trio.open_nursery() as connections:
            while (received := await channel.receive()) is not None:
                missed[0] = 0
                message, fd = received
                op = message["op"]
                if op == "connection" and fd is not None:
                    connections.start_soon(_serve_one, sidecar, channel, fd, message)
                elif op == "pong":
                    pass
                elif op == "usage":
                    sidecar.client_quotas.rates.add_usage_entries(message["usage"], now_ms())
                elif op == "flush":
                    sidecar.metrics.flush()  # the data path's tallies, then the files
                    flush()
                    await channel.send({"op": "flushed"})
                elif op == "reload-prepare":
                    try:
                        reload, error = sidecar.prepare_reload(build_config(message["raw"], warn_unknown=False)), None
                    except ConfigError as exc:
                        reload, error = None, str(exc)
                    await channel.send({"op": "reload-prepared", "error": error})
                elif op == "reload-commit":
                    if reload is not None:
                        sidecar.commit_reload(reload)
                    reload = None
                elif op == "reload-abort":
                    reload = None
                elif op == "drain":
                    missed[0] = -math.inf  # the supervisor waits for this drain: no watch meanwhile
                    abandoned = await sidecar.drain()
                    await channel.send({"op": "drained", "abandoned": abandoned,
                                                 "forwarded": sidecar.forwarded_total,
                                                 "broker_answers": sidecar.broker_answers_total})
                    break
                elif op == "stop":
                    await channel.send({"op": "drained", "abandoned": sidecar.unanswered()})
                    break
                else:
                    log.error("unexpected message from the supervisor: %s", message)
            connections.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


async def _share_usage(channel: handoff.Channel, rates: ClientRates) -> None:
    """Every :data:`USAGE_INTERVAL`, send what this worker's clients recorded against their
    client quotas (the supervisor passes it on to the other workers)."""
    while True:
        await trio.sleep(USAGE_INTERVAL)
        batch: list[list[object]] = []
        size = 0
        for (key, user, client_id), amount in rates.take_usage().items():
            entry_size = len(key) + 12 * (len(user) + len(client_id)) + 40  # a JSON escape: 12 bytes at most
            if batch and size + entry_size > USAGE_MESSAGE_BYTES:
                await _send_usage(channel, batch)
                batch, size = [], 0
            batch.append([key, user, client_id, amount])
            size += entry_size
        if batch:
            await _send_usage(channel, batch)


async def _send_usage(channel: handoff.Channel, batch: list[list[object]]) -> None:
    try:
        await channel.send({"op": "usage", "usage": batch})
    except OSError as exc:  # the supervisor is gone (so are we, shortly), or an entry too long
        log.debug("usage not shared: %s", exc)


async def _watch_supervisor(channel: handoff.Channel, missed: list[float], silence: float,
                            everything: trio.CancelScope) -> None:
    """Ask the supervisor every :data:`PING_INTERVAL`; if ``silence`` seconds of pings in a
    row go unanswered (it is stopped, or starved), end this worker: the supervisor owns
    admission and the shared state, so this worker's clients are better off reconnecting
    (to other sidecars, while this one does not answer). Counted in pings, not by the
    clock: a sidecar frozen whole (every process) is not silent when it resumes. A
    supervisor that comes back starts a new worker."""
    while True:
        await trio.sleep(PING_INTERVAL)
        if missed[0] * PING_INTERVAL >= silence:
            log.error("the supervisor has answered none of %d pings (zookeeper.session.timeout.ms, at least "
                      "%g s): this worker stops; its clients reconnect", missed[0], MIN_SUPERVISOR_SILENCE)
            everything.cancel()
            return
        with contextlib.suppress(OSError):
            await channel.send({"op": "ping"})
        missed[0] += 1


async def _serve_one(sidecar: Sidecar, channel: handoff.Channel, fd: int, message: dict[str, object]) -> None:
    """Serve one handed connection, then tell the supervisor it ended."""
    try:
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))
        await sidecar.serve_handed(stream, str(message["listener"]))
    finally:
        # (OSError: the supervisor is gone, and so are we, shortly)
        with trio.CancelScope(shield=True), contextlib.suppress(OSError):
            await channel.send({"op": "closed", "id": message["id"]})
