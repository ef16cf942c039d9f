"""The sidecar's small HTTP endpoint: ``/metrics``, ``/healthz``, ``/readyz`` and
``POST /-/reload``.

Deliberately minimal (one request per connection, bounded request size and time): it
serves Prometheus, Kubernetes probes and ``ksidecar reload`` (Prometheus's own path for the
same act), nothing else. A reload only reads again the files the sidecar was started with.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from proxy.config import HostPort

log = logging.getLogger(__name__)

MAX_REQUEST = 8192
REQUEST_TIMEOUT = 5.0
#: How long a ``POST /-/reload`` may take (a supervisor waits up to 10 s for each worker).
RELOAD_TIMEOUT = 60.0

#: Runs a reload for ``trigger``; whether it was applied, and the answer's JSON body.
ReloadHook = Callable[[str], Awaitable[tuple[bool, bytes]]]


class Probed(Protocol):
    """What the endpoint needs of the sidecar."""

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The registry ``/metrics`` exports."""
        ...

    def readiness(self) -> str | None:
        """``None`` when ready, else why not (``/readyz``)."""
        ...

    async def before_scrape(self) -> None:
        """Bring gauges up to date before ``/metrics`` is rendered."""
        ...

    @property
    def reload_hook(self) -> ReloadHook | None:
        """What ``POST /-/reload`` runs (``None``: reloading is not offered here)."""
        ...


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def route(sidecar: Probed, method: str, path: str, *, local: bool = True) -> bytes:
    """The whole HTTP response for one request line (``local``: it came from a loopback
    address, the only place a reload is taken from)."""
    path = path.split("?", 1)[0]
    if path == "/-/reload":
        hook = sidecar.reload_hook
        if method != "POST":
            return _response("405 Method Not Allowed", "text/plain", b"POST only\n")
        if hook is None:
            return _response("404 Not Found", "text/plain", b"this process does not reload\n")
        if not local:
            return _response("403 Forbidden", "text/plain", b"a reload is taken from a loopback address only\n")
        applied, body = await hook("ksidecar reload")
        return _response("200 OK" if applied else "500 Internal Server Error", "application/json", body)
    if method not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", "text/plain", b"GET only\n")
    if path == "/metrics":
        await sidecar.before_scrape()
        return _response("200 OK", CONTENT_TYPE_LATEST, generate_latest(sidecar.metrics_registry))
    if path == "/healthz":
        return _response("200 OK", "text/plain", b"ok\n")
    if path == "/readyz":
        why = sidecar.readiness()
        if why is None:
            return _response("200 OK", "text/plain", b"ready\n")
        return _response("503 Service Unavailable", "text/plain", f"not ready: {why}\n".encode())
    return _response("404 Not Found", "text/plain", b"try /metrics, /healthz or /readyz\n")


def _from_loopback(stream: trio.abc.Stream) -> bool:
    try:
        assert isinstance(stream, trio.SocketStream)
        return ipaddress.ip_address(stream.socket.getpeername()[0]).is_loopback
    except (AssertionError, OSError, ValueError):
        return False


async def _serve_one(sidecar: Probed, stream: trio.abc.Stream) -> None:
    try:
        data = b""
        with trio.move_on_after(REQUEST_TIMEOUT):
            while b"\r\n\r\n" not in data and b"\n\n" not in data and len(data) < MAX_REQUEST:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data += chunk
        line = data.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(line) < 2:
            await stream.send_all(_response("400 Bad Request", "text/plain", b"bad request\n"))
        else:
            with trio.fail_after(RELOAD_TIMEOUT):
                response = await route(sidecar, line[0], line[1], local=_from_loopback(stream))
            if line[0] == "HEAD":  # the same head, no body (RFC 9110, 9.3.2)
                response = response.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
            await stream.send_all(response)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def serve_http(
    sidecar: Probed, address: HostPort, *, task_status: trio.TaskStatus[HostPort] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve the endpoint on ``address`` (port 0: any free port) until cancelled."""
    listeners = await trio.open_tcp_listeners(address.port, host=address.host)
    bound = HostPort(address.host, listeners[0].socket.getsockname()[1])
    log.info("metrics on http://%s/metrics", bound)
    task_status.started(bound)
    async def handler(stream: trio.SocketStream) -> None:
        await _serve_one(sidecar, stream)

    await trio.serve_listeners(handler, listeners)
