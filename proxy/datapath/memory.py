"""A sidecar-wide budget of request bytes held in memory (``queued.max.request.bytes``).

Kafka's request memory pool, as its ``SimpleMemoryPool`` behaves for requests: a frame
being read reserves its whole declared size once its 4-byte size prefix is in, and the
reservation is granted whenever *any* room is left, even if the frame is larger than the
room (the pool may go over, so one large frame can always be read and nothing deadlocks
half-read). While the pool is full, no connection starts reading a new request; one that
is in the middle of a frame reads on, and every release wakes the waiting readers.

A connection's reservation is what its frame decoder holds undelivered
(:attr:`protocol.framing.FrameDecoder.pending`): complete frames are forwarded or answered
within the read that completed them, so only the frame being gathered stays.
"""

from __future__ import annotations

import trio


class RequestMemory:
    """The pool; ``limit`` ``None`` means no bound (nothing waits, nothing counted)."""

    __slots__ = ("_freed", "limit", "used")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        #: Bytes reserved by every connection together.
        self.used = 0
        self._freed = trio.Event()

    @property
    def full(self) -> bool:
        """True while no new request may be started."""
        return self.limit is not None and self.used >= self.limit

    async def wait_for_room(self) -> None:
        """Wait until the pool is not full."""
        while self.full:
            await self._freed.wait()

    def change(self, delta: int) -> None:
        """Reserve (``delta`` > 0) or release (< 0) bytes; a release wakes the readers."""
        self.used += delta
        if delta < 0:
            self._freed.set()
            self._freed = trio.Event()

    def statistics(self) -> dict[str, int | None]:
        """``{"used": bytes, "limit": bytes or None}``."""
        return {"used": self.used, "limit": self.limit}
