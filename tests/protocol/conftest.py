"""Keep the coverage gate independent of test order.

`protocol/` builds each message's parser, compiled parser, scan plan and view table once per
process and keeps it in a module-level dict. A module marked `no_cover` (a differential
check, run untraced: docs/testing.md, "Coverage") would otherwise fill those dicts untraced,
and a traced test that ran after it in the same worker would never execute the building
code, so the gate's result would depend on how xdist ordered the tests.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


def _protocol_dicts() -> list[dict[object, object]]:
    """Every private module-level dict of the loaded `protocol` modules (its caches)."""
    found: list[dict[object, object]] = []
    for name, module in list(sys.modules.items()):
        if name != "protocol" and not name.startswith("protocol."):
            continue
        for attr, value in vars(module).items():
            if attr.startswith("_") and not attr.startswith("__") and type(value) is dict:
                found.append(value)
    return found


@pytest.fixture(autouse=True, scope="module")
def _forget_untraced_builds(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a `no_cover` module, `protocol/`'s caches hold what they held before it."""
    if request.node.get_closest_marker("no_cover") is None:
        yield
        return
    saved = [(cache, dict(cache)) for cache in _protocol_dicts()]
    yield
    for cache, before in saved:
        cache.clear()
        cache.update(before)
