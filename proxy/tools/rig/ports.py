"""Free loopback ports for components started by the rig.

The kernel picks an unused port when a socket binds to port 0; we close the socket and hand the
number to the component. Another process could take the port in between: launchers that picked
the port themselves retry with a fresh one when their component exits early.
"""

import socket
import threading

LOOPBACK = "127.0.0.1"

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on `host` that is free now and not yet handed out by this process.

    Ports already returned by this function are skipped, so two components started by one test
    session never receive the same number even if the first has not bound it yet.
    """
    with _lock:
        for _ in range(64):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port: int = sock.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise OSError(f"no fresh free port found on {host}")


def can_connect(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return whether a TCP connection to `host:port` succeeds within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
