"""Where share groups (KIP-932) lie in ZooKeeper, and the store that reads and writes them.

Layout, under the connect string's chroot, names escaped as :mod:`coordinator.paths` escapes
them (the topic id in Kafka's base64 form, as ``kafka-share-groups.sh`` prints it)::

    /share-groups/<group>/registry                        the group (coordinator.share_group_record)
    /share-groups/<group>/partitions/<topic-id>:<index>    one share-partition (coordinator.share_state)

A share-partition written with start offset -1 is initialized but not yet placed: its first
fetch places it by ``share.auto.offset.reset`` (Kafka's persister writes -1 the same way).

:meth:`ShareStore.write` writes a batch of znodes as one multi-op transaction (all or
nothing), creating what does not exist; like :class:`coordinator.store.GroupStore` it blocks
and the trio shell runs it on a thread.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

from coordinator.paths import escape, unescape
from coordinator.share_group_record import ShareGroupRecord, decode_group
from coordinator.share_state import ShareState, decode_state
from coordinator.store import KnownZnodes

if TYPE_CHECKING:
    from kazoo.client import KazooClient

SHARE_ROOT = "/share-groups"
REGISTRY = "registry"
PARTITIONS = "partitions"


class ShareStoreError(Exception):
    """A batch could not be written; nothing of it is visible."""


class ShareStoreConflict(ShareStoreError):
    """A share-partition's znode changed since this store last read or wrote it (another
    sidecar serves the share-partition now): nothing of the batch was written."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path} was written by someone else ({detail})")
        self.path = path


def kafka_uuid(topic_id: UUID) -> str:
    """Kafka's string form of a UUID (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> UUID:
    """The UUID of Kafka's string form; ``ValueError`` if it is not one."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a Kafka UUID")
    return UUID(bytes=raw)


def share_group_path(group_id: str, root: str = SHARE_ROOT) -> str:
    """``/share-groups/<group>``."""
    return f"{root}/{escape(group_id)}"


def share_registry_path(group_id: str, root: str = SHARE_ROOT) -> str:
    """``/share-groups/<group>/registry``."""
    return f"{share_group_path(group_id, root)}/{REGISTRY}"


def share_partition_path(group_id: str, topic_id: UUID, partition: int, root: str = SHARE_ROOT) -> str:
    """``/share-groups/<group>/partitions/<topic-id>:<index>``."""
    return f"{share_group_path(group_id, root)}/{PARTITIONS}/{kafka_uuid(topic_id)}:{int(partition)}"


class ShareStore(KnownZnodes):
    """Share groups and share-partitions in ZooKeeper (blocking kazoo calls)."""

    def __init__(self, client: KazooClient, *, root: str = SHARE_ROOT) -> None:
        self.client = client
        self.root = root.rstrip("/") or SHARE_ROOT
        self._known: set[str] = set()
        #: The znode version of each share-partition this store read or wrote: its next write
        #: is compare-and-set against it (the fence between two sidecars serving one).
        self._versions: dict[str, int] = {}
        #: Transactions committed (for tests and the sizing guide).
        self.transactions = 0

    def version_of(self, path: str) -> int | None:
        """The znode version this store last read or wrote at ``path`` (``None``: none)."""
        return self._versions.get(path)

    def group_ids(self) -> list[str]:
        """Every share group with a znode."""
        if self.client.exists(self.root) is None:
            return []
        return sorted(unescape(c) for c in self.client.get_children(self.root))

    def load_group(self, group_id: str) -> ShareGroupRecord | None:
        """The group's record, or ``None``."""
        path = share_registry_path(group_id, self.root)
        found = self.client.exists(path)
        if found is None:
            return None
        data, _ = self.client.get(path)
        self._known.add(path)
        return decode_group(data) if data else None

    def load_partitions(self, group_id: str) -> dict[tuple[UUID, int], ShareState]:
        """Every share-partition state of the group."""
        base = f"{share_group_path(group_id, self.root)}/{PARTITIONS}"
        if self.client.exists(base) is None:
            return {}
        out: dict[tuple[UUID, int], ShareState] = {}
        for child in self.client.get_children(base):
            topic, _, index = child.rpartition(":")
            try:
                key = (parse_kafka_uuid(topic), int(index))
            except ValueError:
                continue  # not ours
            data, _ = self.client.get(f"{base}/{child}")
            self._known.add(f"{base}/{child}")
            out[key] = decode_state(data)
        return out

    def load_partition(self, group_id: str, topic_id: UUID, partition: int) -> ShareState | None:
        """One share-partition's state, or ``None`` when it has none."""
        path = share_partition_path(group_id, topic_id, partition, self.root)
        if self.client.exists(path) is None:
            self._versions.pop(path, None)
            return None
        data, stat = self.client.get(path)
        self._known.add(path)
        self._versions[path] = stat.version
        return decode_state(data)

    def write(self, nodes: Mapping[str, bytes | None]) -> None:
        """Write ``{path: data}`` in one transaction (``None`` deletes the znode and what is
        under it); raise :class:`ShareStoreError` if ZooKeeper refused it."""
        ops: list[tuple[str, str, bytes]] = []
        creating: set[str] = set()
        for path, data in sorted(nodes.items()):
            if data is None:
                ops.extend(("delete", p, b"") for p in self._tree(path))
                continue
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):
                parent = "/" + "/".join(parts[:i])
                if parent not in creating and not self._exists(parent):
                    ops.append(("create", parent, b""))
                    creating.add(parent)
            if path in creating or self._exists(path):
                ops.append(("set", path, data))
            else:
                ops.append(("create", path, data))
            creating.add(path)
        if not ops:
            return
        txn = self.client.transaction()
        for kind, path, data in ops:
            if kind == "create":
                txn.create(path, data)
            elif kind == "set":
                txn.set_data(path, data, version=self._versions.get(path, -1))
            else:
                txn.delete(path)
        try:
            results: list[Any] = txn.commit()
        except Exception as exc:  # connection loss, timeouts: the outcome is unknown
            self._known.clear()
            raise ShareStoreError(f"ZooKeeper transaction failed: {exc!r}") from exc
        failed = [(op, r) for op, r in zip(ops, results, strict=False) if isinstance(r, Exception)]
        if failed:
            self._known.clear()
            (kind, path, _), first = next(((op, r) for op, r in failed if type(r).__name__ != "RolledBackError"),
                                          failed[0])
            if f"/{PARTITIONS}/" in path and type(first).__name__ in ("BadVersionError", "NodeExistsError"):
                self._versions.pop(path, None)
                raise ShareStoreConflict(path, type(first).__name__)
            raise ShareStoreError(f"ZooKeeper transaction rolled back: {first!r}")
        self.transactions += 1
        for (kind, path, _), result in zip(ops, results, strict=False):
            if kind == "delete":
                self._known.discard(path)
                self._versions.pop(path, None)
                continue
            self._known.add(path)
            if f"/{PARTITIONS}/" in path:
                self._versions[path] = 0 if kind == "create" else result.version
