"""The ZooKeeper store of the coordinator: offsets and the group registry (kazoo).

The only module of ``coordinator/`` that touches kazoo, and only through the client it
is given (as kazoo's recipes do): it never starts, stops or configures the client. Its
calls block; the trio shell runs them with ``trio.to_thread.run_sync``. The layout, the
znode formats and the escaping of names are :mod:`coordinator.paths`'.

:meth:`GroupStore.apply` writes a batch (see :mod:`coordinator.batching`) as one ZooKeeper
multi-op transaction: all of it becomes visible at once or none of it does. Batches
larger than ZooKeeper's default request limit (``jute.maxbuffer``, 1 MiB) are split into
transactions of at most :data:`MAX_TRANSACTION_BYTES`, each atomic. An optional *guard*
(a znode path and its version, e.g. the owner's claim) is checked in every transaction,
so a sidecar that lost a group cannot write for it. In a fleet, *guards* maps each group
to its own claim (:mod:`coordinator.claims`): every transaction checks the claim of every
group it writes, and a group with no claim here is not written at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.core import LoadedGroup
from coordinator.outcome import GroupWrite, OffsetValue, OffsetWrite, Write
from coordinator.paths import (
    OFFSETS,
    REGISTRY,
    ROOT,
    decode_offset,
    decode_record,
    encode_offset,
    encode_record,
    group_path,
    offset_path,
    registry_path,
    topic_path,
    unescape,
)

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

#: Largest transaction the store sends (ZooKeeper refuses requests over 1 MiB by default).
MAX_TRANSACTION_BYTES = 512 * 1024


class StoreError(Exception):
    """A batch could not be written; nothing of the failed transaction is visible."""


class KnownZnodes:
    """What a store knows exists in ZooKeeper: a znode is asked about only until it is
    seen (``_known``; cleared when a transaction fails, to learn again)."""

    client: KazooClient
    _known: set[str]

    def _exists(self, path: str) -> bool:
        if path in self._known:
            return True
        if self.client.exists(path) is not None:
            self._known.add(path)
            return True
        return False

    def _tree(self, path: str) -> list[str]:
        """``path`` and everything under it, deepest first (empty if it does not exist)."""
        if not self._exists(path):
            return []
        out: list[str] = []
        for child in self.client.get_children(path):
            out += self._tree(f"{path}/{child}")
        out.append(path)
        return out


class GroupStore(KnownZnodes):
    """Offsets and group records of one coordinator in ZooKeeper."""

    def __init__(self, client: KazooClient, *, root: str = ROOT,
                 guard: tuple[str, int] | None = None,
                 guards: Callable[[str], tuple[str, int] | None] | None = None) -> None:
        self.client = client
        self.root = root.rstrip("/") or ROOT
        self.guard = guard
        #: Group id -> the ``(path, version)`` of its claim here, ``None`` if unclaimed.
        self.guards = guards
        #: Paths known to exist, so a write knows whether to create or to set.
        self._known: set[str] = set()
        self.transactions = 0

    # -- writing -------------------------------------------------------------------------

    def apply(self, writes: list[Write]) -> None:
        """Write a flattened batch (:func:`coordinator.batching.flatten`); raise
        :class:`StoreError` if ZooKeeper refused it."""
        checks = self._checks(writes)
        ops: list[tuple[str, str, bytes]] = []
        creating: set[str] = set()
        deleting: set[str] = set()
        for w in writes:
            if isinstance(w, OffsetWrite):
                path = offset_path(w.group_id, w.topic, w.partition, self.root)
                if w.value is None:
                    if self._exists(path) and path not in deleting:
                        ops.append(("delete", path, b""))
                        deleting.add(path)
                else:
                    self._parents(topic_path(w.group_id, w.topic, self.root), ops, creating, deleting)
                    self._put(path, encode_offset(w.value), ops, creating, deleting)
            elif isinstance(w, GroupWrite) and w.deletes:
                for path in self._tree(group_path(w.group_id, self.root)):
                    if path not in deleting and path not in creating:
                        ops.append(("delete", path, b""))
                        deleting.add(path)
            else:
                record = w.rendered().record  # rendered already when it came through flatten()
                assert record is not None
                self._parents(group_path(w.group_id, self.root), ops, creating, deleting)
                self._put(registry_path(w.group_id, self.root), encode_record(record), ops, creating, deleting)
        try:
            for chunk in _chunks(ops):
                self._commit(chunk, checks)
        except StoreError:
            self._known.clear()  # re-learn what exists before the next attempt
            raise

    def _put(self, path: str, data: bytes, ops: list[tuple[str, str, bytes]], creating: set[str],
             deleting: set[str]) -> None:
        if path in creating or (self._exists(path) and path not in deleting):
            ops.append(("set", path, data))
        else:
            ops.append(("create", path, data))
            creating.add(path)
            deleting.discard(path)

    def _parents(self, path: str, ops: list[tuple[str, str, bytes]], creating: set[str],
                 deleting: set[str]) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            node = "/" + "/".join(parts[:i])
            if node in creating or (node not in deleting and self._exists(node)):
                continue
            ops.append(("create", node, b""))
            creating.add(node)
            deleting.discard(node)

    def _checks(self, writes: list[Write]) -> list[tuple[str, int]]:
        checks = [self.guard] if self.guard is not None else []
        if self.guards is not None:
            for group_id in sorted({w.group_id for w in writes}):
                guard = self.guards(group_id)
                if guard is None:
                    raise StoreError(f"group {group_id!r} is not claimed by this sidecar")
                checks.append(guard)
        return checks

    def _commit(self, ops: list[tuple[str, str, bytes]], checks: list[tuple[str, int]]) -> None:
        txn = self.client.transaction()
        for path, version in checks:
            txn.check(path, version)
        for kind, path, data in ops:
            if kind == "create":
                txn.create(path, data)
            elif kind == "set":
                txn.set_data(path, data)
            else:
                txn.delete(path)
        try:
            results: list[Any] = txn.commit()
        except Exception as exc:  # connection loss, timeouts: the outcome is unknown
            raise StoreError(f"ZooKeeper transaction failed: {exc!r}") from exc
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            first = next((f for f in failures if type(f).__name__ != "RolledBackError"), failures[0])
            raise StoreError(f"ZooKeeper transaction rolled back: {first!r}")
        self.transactions += 1
        for kind, path, _ in ops:
            if kind == "delete":
                self._known.discard(path)
            else:
                self._known.add(path)

    def forget(self, group_id: str | None = None) -> None:
        """Forget which znodes of ``group_id`` (or of every group) exist: another sidecar
        may have written or deleted them since (a group that comes back after a hand-over,
        a session that expired)."""
        if group_id is None:
            self._known.clear()
            return
        base = group_path(group_id, self.root)
        self._known = {p for p in self._known if p != base and not p.startswith(base + "/")}

    # -- reading -------------------------------------------------------------------------

    def load(self) -> list[LoadedGroup]:
        """Every group under the root: registry record and committed offsets."""
        if self.client.exists(self.root) is None:
            return []
        self._known.add(self.root)
        out = []
        for child in sorted(self.client.get_children(self.root)):
            loaded = self.load_group(unescape(child))
            if loaded is not None:
                out.append(loaded)
        return out

    def load_group(self, group_id: str) -> LoadedGroup | None:
        """One group, or ``None`` if ZooKeeper has nothing of it (unreadable znodes are
        logged and skipped: a bad record must not keep the other groups from loading)."""
        base = group_path(group_id, self.root)
        if self.client.exists(base) is None:
            return None
        self._known.add(base)
        record = None
        reg = f"{base}/{REGISTRY}"
        if self.client.exists(reg) is not None:
            self._known.add(reg)
            data, _ = self.client.get(reg)
            try:
                record = decode_record(data)
            except ValueError as exc:
                log.warning("group %r: unreadable registry znode %s: %s", group_id, reg, exc)
        offsets: dict[tuple[str, int], OffsetValue] = {}
        offsets_dir = f"{base}/{OFFSETS}"
        if self.client.exists(offsets_dir) is not None:
            self._known.add(offsets_dir)
            for topic_node in self.client.get_children(offsets_dir):
                tdir = f"{offsets_dir}/{topic_node}"
                self._known.add(tdir)
                for partition_node in self.client.get_children(tdir):
                    path = f"{tdir}/{partition_node}"
                    data, stat = self.client.get(path)
                    try:
                        offsets[(unescape(topic_node), int(partition_node))] = decode_offset(data, stat.mtime)
                    except (ValueError, KeyError) as exc:
                        log.warning("group %r: unreadable offset znode %s: %s", group_id, path, exc)
                        continue
                    self._known.add(path)
        return LoadedGroup(group_id=group_id, record=record, offsets=offsets)

    def group_ids(self) -> list[str]:
        """The ids of every group stored under the root."""
        if self.client.exists(self.root) is None:
            return []
        return sorted(unescape(c) for c in self.client.get_children(self.root))


def _chunks(ops: list[tuple[str, str, bytes]]) -> list[list[tuple[str, str, bytes]]]:
    chunks: list[list[tuple[str, str, bytes]]] = [[]]
    size = 0
    for op in ops:
        cost = len(op[1]) + len(op[2]) + 64
        if chunks[-1] and size + cost > MAX_TRANSACTION_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(op)
        size += cost
    return [c for c in chunks if c]


