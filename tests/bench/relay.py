"""A minimal TCP relay: the floor of what any extra userspace hop costs on this machine.

``python -m tests.bench.relay LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT`` copies bytes both
ways, one blocking thread per direction, no parsing. The latency workloads measure it
next to the sidecar and the peer, so the latency a proxy adds can be split into what the
extra hop itself costs (two more wake-ups per round trip, on cores shared with the broker
and the client) and what the proxy's own work adds.

With ``BENCH_RELAY_SPLICE=1`` in its environment it moves the bytes with ``splice(2)``
through a pipe instead (the kernel copies socket to socket, none pass through Python): the
floor of a hop with no userspace copy at all (tests/bench/RESULTS.md, consume).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import threading

LOOPBACK = "127.0.0.1"


SPLICE = os.environ.get("BENCH_RELAY_SPLICE") == "1"
#: The pipe a splicing direction moves bytes through (its capacity, raised from 64 KiB).
PIPE_SIZE = 1 << 20


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        if SPLICE:
            _splice(source.fileno(), sink.fileno())
        else:
            while data := source.recv(262144):
                sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _splice(source: int, sink: int) -> None:
    """Socket to pipe to socket, in the kernel, until ``source`` ends."""
    out, into = os.pipe()
    try:
        fcntl.fcntl(into, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        while moved := os.splice(source, into, PIPE_SIZE, flags=os.SPLICE_F_MOVE):
            while moved:
                moved -= os.splice(out, sink, moved, flags=os.SPLICE_F_MOVE)
    finally:
        os.close(out)
        os.close(into)


def listen(port: int) -> socket.socket:
    """A listening socket on the loopback ``port``."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((LOOPBACK, port))
    server.listen(1024)
    return server


def accept_pair(server: socket.socket, upstream: tuple[str, int]) -> tuple[socket.socket, socket.socket] | None:
    """The next client and a new connection to ``upstream`` for it, both without Nagle's
    delay; ``None`` (the client closed) when the upstream cannot be reached."""
    client, _ = server.accept()
    try:
        broker = socket.create_connection(upstream)
    except OSError:
        client.close()
        return None
    for sock in (client, broker):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, broker


def serve(listen_port: int, upstream: tuple[str, int]) -> None:
    """Accept forever; each client gets its own upstream connection and two threads."""
    server = listen(listen_port)
    while True:
        pair = accept_pair(server, upstream)
        if pair is None:
            continue
        client, broker = pair
        threading.Thread(target=_pipe, args=(client, broker), daemon=True).start()
        threading.Thread(target=_pipe, args=(broker, client), daemon=True).start()


if __name__ == "__main__":
    serve(int(sys.argv[1]), (sys.argv[2], int(sys.argv[3])))
