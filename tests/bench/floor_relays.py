"""Three more bare relays, to show where an event loop's floor lies (issue 43).

    python -m tests.bench.floor_relays epoll LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT
    python -m tests.bench.floor_relays hub LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT
    python -m tests.bench.floor_relays trio LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT
    python -m tests.bench.floor_relays lane LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT

Like :mod:`tests.bench.relay` (two blocking threads per connection) they copy bytes both
ways and parse nothing; they differ only in how they wait for a socket to be readable:

* ``epoll``: one thread, one ``select.epoll`` that every socket is registered with once,
  each ready socket read and its bytes written to its peer in the same pass;
* ``hub``: the ``epoll`` relay's loop run as one trio task, woken by trio when the epoll's
  own descriptor is readable: trio's scheduler once per pass, but no task per socket;
* ``trio``: trio, a task per direction, reading and writing through the sidecar's own
  :class:`~proxy.datapath.wire.SocketWire` (a readiness wait is a trio task woken through
  trio's epoll, as for every connection of the sidecar).

``lane`` is not a bare relay: the ``epoll`` loop, but each connection's bytes go through
the sidecar's own :class:`~proxy.datapath.connection.Connection` methods, as the fast lane
forwards them (``_on_request`` for each request of a read, ``_on_response`` for each answer,
``deliver`` to the client): what the sidecar would cost if its forwarded lane waited in one
epoll loop instead of a trio task per socket. Forwarded requests only (the router has
learned no broker versions, so every version the sidecar parses is forwarded); a request
that would wait stops it. The loop runs inside one trio task that never yields, so the
connection's clock is trio's.

Side by side (``python -m tests.bench.workers_bench saturation --targets relay epoll hub
trio lane w1``) the difference between them is the cost of the wait itself, which no work the
sidecar saves per request can remove. For benchmarks only: no error handling beyond closing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import socket
import sys
from typing import Any

from tests.bench.relay import LOOPBACK, accept_pair, listen


def _polled(port: int) -> tuple[socket.socket, select.epoll]:
    """A loopback listener on ``port`` and an epoll that watches it."""
    listener = listen(port)
    poller = select.epoll()
    poller.register(listener.fileno(), select.EPOLLIN)
    return listener, poller


class _EpollRelay:
    """The state of the epoll relays: every socket registered once, each with its peer."""

    def __init__(self, port: int, upstream: tuple[str, int]) -> None:
        self.listener, self.poller = _polled(port)
        self.upstream = upstream
        self.peers: dict[int, int] = {}
        self.sockets: dict[int, socket.socket] = {}

    def ready(self, fd: int) -> None:
        """Serve one ready descriptor: accept, or read and write the bytes to the peer."""
        if fd == self.listener.fileno():
            pair = accept_pair(self.listener, self.upstream)
            if pair is None:
                return
            client, broker = pair
            for sock in pair:
                sock.setblocking(False)
                self.sockets[sock.fileno()] = sock
                self.poller.register(sock.fileno(), select.EPOLLIN)
            self.peers[client.fileno()], self.peers[broker.fileno()] = broker.fileno(), client.fileno()
            return
        try:
            data = os.read(fd, 262144)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            for end in (fd, self.peers.pop(fd, -1)):
                self.peers.pop(end, None)
                sock = self.sockets.pop(end, None)
                if sock is not None:
                    self.poller.unregister(end)
                    sock.close()
            return
        out = self.sockets.get(self.peers.get(fd, -1))
        if out is not None:
            out.setblocking(True)  # small frames: taken whole, but never lose a byte
            with contextlib.suppress(OSError):
                out.sendall(data)
            out.setblocking(False)


def serve_epoll(port: int, upstream: tuple[str, int]) -> None:
    """The one-thread epoll relay."""
    relay = _EpollRelay(port, upstream)
    while True:
        for fd, _ in relay.poller.poll():
            relay.ready(fd)


def serve_hub(port: int, upstream: tuple[str, int]) -> None:
    """The epoll relay's loop as one trio task that waits for the epoll's own descriptor:
    one trio wake-up per pass whatever the number of sockets, no task per socket."""
    import trio

    relay = _EpollRelay(port, upstream)

    async def loop() -> None:
        while True:
            await trio.lowlevel.wait_readable(relay.poller.fileno())
            for fd, _ in relay.poller.poll(0):
                relay.ready(fd)

    trio.run(loop)


def serve_trio(port: int, upstream: tuple[str, int]) -> None:
    """The trio relay on the sidecar's SocketWire."""
    import trio

    from proxy.datapath.wire import SocketWire

    async def pipe(source: SocketWire, sink: SocketWire) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await source.receive(262144):
                await sink.send(data)

    async def handle(client: trio.SocketStream) -> None:
        broker = await trio.open_tcp_stream(*upstream)
        for stream in (client, broker):
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        async with broker, trio.open_nursery() as nursery:
            nursery.start_soon(pipe, SocketWire(client), SocketWire(broker))
            nursery.start_soon(pipe, SocketWire(broker), SocketWire(client))

    trio.run(functools.partial(trio.serve_tcp, handle, port, host=LOOPBACK))


def serve_lane(port: int, upstream: tuple[str, int]) -> None:
    """The ``epoll`` loop driving the sidecar's Connection methods (see the module docstring)."""
    import trio
    import trio.testing

    from protocol.apis import ApiRegistry
    from proxy.config.settings import ConnectionSettings
    from proxy.datapath.addressing import StaticAddressBook
    from proxy.datapath.connection import Connection, Parts
    from proxy.datapath.frames import FrameBuffer
    from proxy.datapath.metrics import SidecarMetrics
    from proxy.datapath.rewrite import Rewriter
    from proxy.datapath.routing import Router
    from proxy.local.api import Context, LocalApiTable
    from proxy.local.ports import Ports
    from tests.proxy.test_connection_seam import NoBrokers, NoUpstreamInfo

    registry = ApiRegistry()
    router = Router(registry, LocalApiTable([]), NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))

    async def never() -> trio.abc.Stream:
        raise AssertionError("the lane dials the broker itself")

    parts = Parts(settings=ConnectionSettings(), registry=registry, router=router,
                  metrics=SidecarMetrics(registry), open_upstream=never)

    class FdWire:
        """The client's socket as the writer's wire (small answers: taken whole)."""

        writes_at_once = True
        interruptible = True

        def __init__(self, fd: int) -> None:
            self.fd = fd

        def try_send(self, data: bytes | memoryview) -> int:
            try:
                return os.write(self.fd, data)
            except BlockingIOError:
                return 0

    def client_side(connection: Connection, decoder: FrameBuffer, client: int, broker: int) -> bool:
        data = os.read(client, 65536)
        if not data:
            return False
        decoder.receive_data(data)
        now = trio.current_time()
        gathered: list[bytes | memoryview] = []
        while isinstance(frame := decoder.next_frame(), memoryview):
            step = connection._on_request(frame, gathered, now)
            try:
                step.send(None)
            except StopIteration as done:
                now = done.value
            else:
                raise AssertionError("a request that waits: not the forwarded lane")
        if gathered:
            os.writev(broker, gathered)
        connection.writer.deliver()
        return True

    def broker_side(connection: Connection, decoder: FrameBuffer, broker: int) -> bool:
        data = os.read(broker, 262144)
        if not data:
            return False
        decoder.receive_data(data)
        now = trio.current_time()
        while isinstance(frame := decoder.next_frame(), memoryview):
            connection.link._on_response(frame, now)
        connection.writer.deliver()
        return True

    async def loop() -> None:
        listener, poller = _polled(port)
        sides: dict[int, Any] = {}
        peers: dict[int, int] = {}
        kept: dict[int, socket.socket] = {}
        while True:
            for fd, _ in poller.poll():  # blocks here, not in trio: the point of the lane
                if fd == listener.fileno():
                    pair = accept_pair(listener, upstream)
                    if pair is None:
                        continue
                    client, broker = pair
                    _, stream = trio.testing.memory_stream_pair()
                    connection = Connection(parts, stream, Context(
                        listener="PLAINTEXT", peer=("127.0.0.1", 0),
                        ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers())))
                    connection.writer.wire = FdWire(client.fileno())  # type: ignore[assignment]
                    c, b = client.fileno(), broker.fileno()
                    requests, answers = FrameBuffer(100 << 20), FrameBuffer(100 << 20)
                    sides[c] = functools.partial(client_side, connection, requests, c, b)
                    sides[b] = functools.partial(broker_side, connection, answers, b)
                    peers[c], peers[b] = b, c
                    for sock in pair:
                        sock.setblocking(False)
                        kept[sock.fileno()] = sock
                        poller.register(sock.fileno(), select.EPOLLIN)
                    continue
                side = sides.get(fd)
                if side is None:
                    continue
                try:
                    alive = side()
                except (BlockingIOError, InterruptedError):
                    alive = True
                except OSError:
                    alive = False
                if not alive:  # either end closed: the connection ends
                    for end in (fd, peers[fd]):
                        peers.pop(end)
                        sides.pop(end)
                        poller.unregister(end)
                        kept.pop(end).close()

    trio.run(loop)


if __name__ == "__main__":
    kind, listen_port, host, upstream_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    serve = {"epoll": serve_epoll, "hub": serve_hub, "trio": serve_trio, "lane": serve_lane}[kind]
    serve(listen_port, (host, upstream_port))
