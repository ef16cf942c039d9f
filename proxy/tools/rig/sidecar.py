"""Launcher for a real ``ksidecar run`` process (the demo and process-level tests).

The sidecar gets a ``.properties`` file written next to its log; it is ready when its
``/readyz`` answers 200 (listeners bound and the broker reachable).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from proxy.tools.rig.ports import LOOPBACK, free_port
from proxy.tools.rig.process import ManagedProcess, Service


class SidecarServer(Service):
    """A running ``ksidecar run``: ``.bootstrap`` for clients, ``.metrics_url``."""

    def __init__(
        self, process: ManagedProcess, host: str, port: int, metrics_port: int,
        extra_ports: Mapping[str, int] | None = None, config_path: Path | None = None,
    ) -> None:
        super().__init__(process, host, port)
        self.metrics_port = metrics_port
        #: Ports of the listeners other than ``PLAINTEXT``, by listener name.
        self.extra_ports = dict(extra_ports or {})
        #: The properties file it runs with (edit it, then ``ksidecar reload --config``).
        self.config_path = config_path

    @property
    def bootstrap(self) -> str:
        """The address clients bootstrap to."""
        return self.address

    @property
    def metrics_url(self) -> str:
        """``http://host:port/metrics``."""
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def scrape(self) -> str:
        """The current /metrics text."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            text: str = response.read().decode()
            return text

    def sample(self, name: str, **labels: str) -> float:
        """The value of the first sample ``name`` whose labels include ``labels`` (scraped
        now); raises ``LookupError`` when the page has none."""
        for family in text_string_to_metric_families(self.scrape()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        raise LookupError(f"{name}{labels} is not on the page")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_sidecar(
    log_dir: Path,
    upstream: str,
    *,
    name: str = "ksidecar",
    keys: Mapping[str, str] | None = None,
    host: str = LOOPBACK,
    start_timeout: float = 30.0,
    extra_listeners: Sequence[str] = (),
    source: Path | None = None,
) -> SidecarServer:
    """Start ``ksidecar run`` in front of ``upstream`` on free loopback ports.

    The ``PLAINTEXT`` listener is :attr:`SidecarServer.port`; each name in
    ``extra_listeners`` (e.g. ``SASL_PLAINTEXT``) gets a free port too, in
    :attr:`SidecarServer.extra_ports`. ``source`` runs the sidecar from another checkout
    of the repository (a benchmark's baseline commit) instead of this one.
    """
    port, metrics_port = free_port(host), free_port(host)
    extra = {name: free_port(host) for name in extra_listeners}
    listeners = [f"PLAINTEXT://{host}:{port}", *(f"{n}://{host}:{p}" for n, p in extra.items())]
    properties = {
        "listeners": ",".join(listeners),
        "sidecar.upstream": upstream,
        "sidecar.metrics.listener": f"{host}:{metrics_port}",
        **(keys or {}),
    }
    config = log_dir / f"{name}.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    process = ManagedProcess(
        name,
        [sys.executable, "-m", "proxy.tools.cli", "run", "--config", str(config)],
        log_path=log_dir / f"{name}.log",
        probe=lambda: _ready(f"http://{host}:{metrics_port}/readyz"),
        start_timeout=start_timeout,
        cwd=source,
        env=None if source is None else {**os.environ, "PYTHONPATH": str(source)},
    )
    return SidecarServer(process.start(), host, port, metrics_port, extra, config)
