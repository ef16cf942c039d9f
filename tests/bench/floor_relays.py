"""Two more bare relays, to show where an event loop's floor lies (issue 43).

    python -m tests.bench.floor_relays epoll LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT
    python -m tests.bench.floor_relays trio LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT

Like :mod:`tests.bench.relay` (two blocking threads per connection) they copy bytes both
ways and parse nothing; they differ only in how they wait for a socket to be readable:

* ``epoll``: one thread, one ``select.epoll`` that every socket is registered with once,
  each ready socket read and its bytes written to its peer in the same pass;
* ``trio``: trio, a task per direction, reading and writing through the sidecar's own
  :class:`~proxy.datapath.wire.SocketWire` (a readiness wait is a trio task woken through
  trio's epoll, as for every connection of the sidecar).

Side by side (``python -m tests.bench.workers_bench saturation --targets relay epoll trio
w1``) the difference between them is the cost of the wait itself, which no work the sidecar
saves per request can remove. For benchmarks only: no error handling beyond closing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import socket
import sys

from tests.bench.relay import LOOPBACK, accept_pair


def serve_epoll(port: int, upstream: tuple[str, int]) -> None:
    """The one-thread epoll relay."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((LOOPBACK, port))
    listener.listen(1024)
    poller = select.epoll()
    poller.register(listener.fileno(), select.EPOLLIN)
    peers: dict[int, int] = {}
    sockets: dict[int, socket.socket] = {}
    while True:
        for fd, _ in poller.poll():
            if fd == listener.fileno():
                pair = accept_pair(listener, upstream)
                if pair is None:
                    continue
                client, broker = pair
                for sock in pair:
                    sock.setblocking(False)
                    sockets[sock.fileno()] = sock
                    poller.register(sock.fileno(), select.EPOLLIN)
                peers[client.fileno()], peers[broker.fileno()] = broker.fileno(), client.fileno()
                continue
            try:
                data = os.read(fd, 262144)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                for end in (fd, peers.pop(fd, -1)):
                    peers.pop(end, None)
                    sock = sockets.pop(end, None)
                    if sock is not None:
                        poller.unregister(end)
                        sock.close()
                continue
            out = sockets.get(peers.get(fd, -1))
            if out is not None:
                out.setblocking(True)  # small frames: taken whole, but never lose a byte
                with contextlib.suppress(OSError):
                    out.sendall(data)
                out.setblocking(False)


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


if __name__ == "__main__":
    kind, listen, host, upstream_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    (serve_epoll if kind == "epoll" else serve_trio)(listen, (host, upstream_port))
