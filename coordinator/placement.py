"""Which sidecar owns which group: rendezvous (highest-random-weight) hashing.

Seed 000: "every broker will be the co-ordinator for a subset of consumer groups". Each
live sidecar id gets a weight for a group, ``sha256(group id, sidecar id)`` read as a
64-bit integer; the sidecar with the highest weight owns the group (Thaler and Ravishankar,
"Using name-based mappings to increase hit rates", 1998). Every sidecar computes the same
answer from the same live set, with no coordination, and:

* groups spread evenly: each of ``n`` sidecars owns about ``1/n`` of them;
* when a sidecar joins, only the groups it now wins move (about ``1/(n+1)`` of them, all
  to the newcomer); when one leaves, only its own groups move, each to the sidecar that
  was its runner-up. No other group changes owner.

The hash is SHA-256 (``hashlib``), never Python's ``hash()``, which is salted per process:
two sidecars must agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def weight(group_id: str, node_id: int) -> int:
    """The weight of sidecar ``node_id`` for ``group_id`` (an unsigned 64-bit integer).

    The two are joined with a NUL byte, which no decimal node id holds, so
    ``("a1", 2)`` and ``("a", 12)`` hash different inputs.
    """
    digest = hashlib.sha256(group_id.encode("utf-8") + b"\x00" + str(node_id).encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big")


def owner(group_id: str, live: Iterable[int]) -> int | None:
    """The owner of ``group_id`` among the ``live`` sidecar ids (``None`` if there are none).

    Ties (equal 64-bit weights, practically never) go to the lower id, so the answer does
    not depend on the order of ``live``.
    """
    best: tuple[int, int] | None = None
    for node_id in live:
        key = (weight(group_id, node_id), -node_id)
        if best is None or key > best:
            best = key
    return None if best is None else -best[1]


def spread(group_ids: Iterable[str], live: Iterable[int]) -> dict[int, list[str]]:
    """``{sidecar id: the groups it owns}`` for every live sidecar (empty lists included)."""
    nodes = sorted(set(live))
    out: dict[int, list[str]] = {n: [] for n in nodes}
    for group_id in group_ids:
        chosen = owner(group_id, nodes)
        if chosen is not None:
            out[chosen].append(group_id)
    return out
