"""Group commit for ZooKeeper writes (sans-IO): one transaction in flight, the rest wait.

Write sets that arrive while a transaction is in flight queue up and go together in the
next one, so a burst of OffsetCommits costs one ZooKeeper round trip, not one each, and
durability does not cost throughput. The shell runs one writer task::

    while True:
        batch = batcher.take()          # None: nothing queued (or already in flight)
        if batch is None: wait for batcher.add(...)
        try:  store.apply(flatten(batch)); ok = True     (in a worker thread)
        except StoreError: ok = False
        batcher.done()
        for ws in batch: if ws.ticket is not None: core.writes_done(ws.ticket, now, ok=ok)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from coordinator.outcome import GroupWrite, OffsetWrite, Write, WriteSet


class CommitBatcher:
    """Queues write sets; hands out everything queued as one batch when nothing is in flight."""

    def __init__(self) -> None:
        self._queued: list[WriteSet] = []
        self._in_flight = False
        self.batches = 0
        self.write_sets = 0

    def add(self, write_set: WriteSet) -> None:
        """Queue a write set."""
        self._queued.append(write_set)

    def take(self) -> tuple[WriteSet, ...] | None:
        """Everything queued, now in flight; ``None`` when nothing is queued or a batch is
        already in flight."""
        if self._in_flight or not self._queued:
            return None
        batch = tuple(self._queued)
        self._queued.clear()
        self._in_flight = True
        self.batches += 1
        self.write_sets += len(batch)
        return batch

    def done(self) -> None:
        """The batch in flight has finished (written or failed)."""
        self._in_flight = False

    @property
    def pending(self) -> int:
        """Write sets waiting for the next batch."""
        return len(self._queued)

    @property
    def in_flight(self) -> bool:
        """Whether a batch is being written."""
        return self._in_flight


def flatten(batch: Iterable[WriteSet]) -> list[Write]:
    """The writes of a batch with superseded ones dropped, order otherwise kept: the last
    write to a partition or a registry wins, and deleting a group drops what came before
    for that group (writes after the deletion recreate it). Written-behind records are
    rendered here, one per group (call it where the groups live: the event loop)."""
    final: dict[Hashable, Write] = {}
    for write_set in batch:
        for w in write_set.writes:
            if isinstance(w, GroupWrite) and w.deletes:
                for stale in [k for k in final if isinstance(k, tuple) and k[1] == w.group_id]:
                    del final[stale]
                final[("delete", w.group_id)] = w
                continue
            key: Hashable = (("offset", w.group_id, w.topic, w.partition) if isinstance(w, OffsetWrite)
                             else ("registry", w.group_id))
            final.pop(key, None)
            final[key] = w
    return [w.rendered() if isinstance(w, GroupWrite) else w for w in final.values()]
