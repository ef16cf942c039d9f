"""Group claims in ZooKeeper: one sidecar at a time serves a group (kazoo, client injected).

Seed 000 kept one ephemeral ``/consumers/coordinator`` for the single coordinator. With
groups spread over the fleet each group has its own claim, beside the group's data rather
than inside it (so deleting a group's data never touches its claim)::

    /coordinators/groups/<group>         persistent; its data version is the claim epoch
    /coordinators/groups/<group>/owner   ephemeral; {"broker_id": N} of the sidecar serving it

``<group>`` is escaped as everywhere (:func:`coordinator.paths.escape`).

**Claiming** is one transaction: create the ephemeral ``owner`` node and set the data of the
persistent epoch node, which bumps its version. It fails if ``owner`` exists: someone else
serves the group, or a session of ours that has not expired yet. The new version is the
**fencing token**: every offset and registry write for the group carries ``check(epoch
node, version)`` in its own transaction (:class:`coordinator.store.GroupStore`), so once a
later owner has claimed the group, writes of an earlier owner fail in ZooKeeper itself,
whatever that earlier owner believes. A check on the ephemeral node alone would not do:
every new ephemeral node starts at version 0, so a check of version 0 would pass on the
next owner's node too.

**Releasing** deletes ``owner`` (only if this session holds it); a sidecar whose session
expired has lost its ephemeral nodes already.

Calls block; the trio shell runs them in worker threads.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from coordinator.paths import escape

if TYPE_CHECKING:
    from kazoo.client import KazooClient

CLAIMS_ROOT = "/coordinators/groups"
OWNER = "owner"


def epoch_path(group_id: str, root: str = CLAIMS_ROOT) -> str:
    """``/coordinators/groups/<group>``: the persistent node whose version fences writes."""
    return f"{root}/{escape(group_id)}"


def owner_path(group_id: str, root: str = CLAIMS_ROOT) -> str:
    """``/coordinators/groups/<group>/owner``: the ephemeral claim."""
    return f"{epoch_path(group_id, root)}/{OWNER}"


class GroupClaims:
    """Claims of one sidecar (``node_id``) over groups."""

    def __init__(self, client: KazooClient, node_id: int, *, root: str = CLAIMS_ROOT) -> None:
        self.client = client
        self.node_id = node_id
        self.root = root.rstrip("/")

    def claim(self, group_id: str) -> int | None:
        """Claim ``group_id``: the claim's version (the fencing token), or ``None`` if the
        group is claimed by a live session (another sidecar's, or an old one of ours)."""
        body = json.dumps({"broker_id": self.node_id}).encode()
        epoch = epoch_path(group_id, self.root)
        with contextlib.suppress(NodeExistsError):
            self.client.create(epoch, b"", makepath=True)
        txn = self.client.transaction()
        txn.create(owner_path(group_id, self.root), body, ephemeral=True)
        txn.set_data(epoch, body)
        results: list[Any] = txn.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            return None
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if failure is not None:
            raise failure
        version: int = results[1].version
        return version

    def release(self, group_id: str) -> bool:
        """Give ``group_id``'s claim up if this session holds it; whether it did."""
        path = owner_path(group_id, self.root)
        try:
            _, stat = self.client.get(path)
        except NoNodeError:
            return False
        if stat.ephemeralOwner != self.client.client_id[0]:
            return False
        try:
            self.client.delete(path, version=stat.version)
        except NoNodeError:
            return False
        return True

    def holder(self, group_id: str) -> int | None:
        """The broker id that holds ``group_id``'s claim, or ``None``."""
        try:
            raw, _ = self.client.get(owner_path(group_id, self.root))
        except NoNodeError:
            return None
        try:
            return int(json.loads(raw.decode())["broker_id"])
        except (ValueError, KeyError, TypeError):
            return None

    def guard(self, group_id: str, version: int) -> tuple[str, int]:
        """The ``(path, version)`` check a write for ``group_id`` carries."""
        return epoch_path(group_id, self.root), version
