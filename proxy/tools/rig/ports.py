"""Free loopback ports for components started by the rig.

By default the kernel picks an unused port when a socket binds to port 0; we close the socket
and hand the number to the component. Another process could take the port in between:
launchers that picked the port themselves retry with a fresh one when their component exits
early.

Several processes that start components side by side (the test suite's parallel workers) set
``KSIDECAR_PORT_RANGE=LOW-HIGH`` each to a range of its own, below the kernel's ephemeral range:
ports are then handed out from that range in turn (skipping any that something holds), so no
two of them, and no outgoing connection's ephemeral port, can ever receive the same number.
"""

import os
import socket
import threading

LOOPBACK = "127.0.0.1"

PORT_RANGE_ENV = "KSIDECAR_PORT_RANGE"
"""The environment variable that gives this process its own range of ports, ``LOW-HIGH``."""

_lock = threading.Lock()
_handed_out: set[int] = set()
_cursor: dict[str, int] = {}


def port_range() -> range | None:
    """This process's own range from ``KSIDECAR_PORT_RANGE`` (both ends included), or None.

    A value that is not ``LOW-HIGH`` with 1024 <= LOW <= HIGH <= 65535 raises ValueError naming
    the variable.
    """
    text = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not text:
        return None
    low, sep, high = text.partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        first = last = -1
    if not sep or not 1024 <= first <= last <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r}: expected LOW-HIGH, 1024 <= LOW <= HIGH <= 65535")
    return range(first, last + 1)


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on `host` that is free now and not yet handed out by this process.

    Ports already returned by this function are skipped, so two components started by one
    process never receive the same number even if the first has not bound it yet. With
    ``KSIDECAR_PORT_RANGE`` set, the port comes from that range, in turn (see the module).
    """
    own = port_range()
    with _lock:
        if own is not None:
            return _from_range(host, own)
        for _ in range(64):
            port = _bind_probe(host, 0)
            if port is not None and port not in _handed_out:
                _handed_out.add(port)
                return port
    raise OSError(f"no fresh free port found on {host}")


def _from_range(host: str, own: range) -> int:
    """The next port of `own` after the last one handed out that `host` can bind now.

    After the range's end it starts again at its beginning: a port handed out that long ago
    belongs to a component that has bound it (and is skipped while it holds it) or has gone.
    """
    start = _cursor.get(host, 0)
    for step in range(len(own)):
        index = (start + step) % len(own)
        if _bind_probe(host, own[index]) is not None:
            _cursor[host] = index + 1
            return own[index]
    raise OSError(f"no free port on {host} in {PORT_RANGE_ENV}={own.start}-{own.stop - 1}")


def _bind_probe(host: str, port: int) -> int | None:
    """Bind `host:port` (0: any) and release it; the port bound, or None if it is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return None
        bound: int = sock.getsockname()[1]
        return bound


def can_connect(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return whether a TCP connection to `host:port` succeeds within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
