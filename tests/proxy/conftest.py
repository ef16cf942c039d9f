"""Fixtures for proxy tests: sidecars served in the test's own trio run.

``start_sidecar(**keys)`` starts a sidecar in front of the session's real Tansu broker
(or any ``sidecar.upstream`` given) with listeners and metrics on free loopback ports,
and returns the running :class:`~proxy.control.server.Sidecar` (``.bound["PLAINTEXT"].port``,
``.metrics_address``). It is stopped with the test's nursery.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from proxy.config.keys import build_config
from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer

StartSidecar = Callable[..., Awaitable[Sidecar]]


def sidecar_keys(upstream: str, **keys: str) -> dict[str, str]:
    """A minimal loopback configuration; ``keys`` use underscores for dots."""
    base = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "sidecar.upstream": upstream,
        "sidecar.metrics.listener": "127.0.0.1:0",
    }
    base.update({k.replace("__", "-").replace("_", "."): v for k, v in keys.items()})
    return base


@pytest.fixture
def start_sidecar(nursery: trio.Nursery, tansu: TansuServer) -> StartSidecar:
    """Start sidecars in the test's nursery (stopped when the test ends)."""

    async def start(raw: dict[str, str] | None = None, **keys: str) -> Sidecar:
        config = build_config(raw if raw is not None else sidecar_keys(tansu.bootstrap, **keys))
        sidecar: Sidecar = await nursery.start(Sidecar(config).serve)
        return sidecar

    return start
