"""A sidecar-wide budget of request bytes held in memory (``queued.max.request.bytes``).

Kafka's request memory pool, as its ``SimpleMemoryPool`` behaves for requests: a frame
being read reserves its whole declared size once its 4-byte size prefix is in, and the
reservation is granted whenever *any* room is left, even if the frame is larger than the
room (the pool may go over, so one large frame can always be read and nothing deadlocks
half-read). While the pool is full, no connection starts reading a new large request; one
that is in the middle of a frame reads on, and every release wakes the waiting readers.

Kafka's pool alone lets two or three clients that announce frames near
``socket.request.max.bytes`` and never finish them stop every other client: their
reservations fill it, and nobody starts a request. So a share is kept for small frames
(at most :data:`SMALL_FRAME_BYTES`): when the main pool is full, a small frame is charged
to the share instead (``small_share``, an eighth of the bound unless set), and waits only
when both are full. A frame that stays incomplete is closed by
``socket.request.read.timeout.ms`` (the connection), which gives its reservation back.

What a reservation costs in the process's memory is what has arrived: the client side
reads large frames into lazily backed buffers (:class:`~proxy.datapath.frames.FrameBuffer`
``lazy``). The bound on memory is the bound plus one largest frame (Kafka's overshoot) plus
the small share plus one small frame.

A connection's reservation is what its frame decoder holds undelivered
(:attr:`protocol.framing.FrameDecoder.pending`): complete frames are forwarded or answered
within the read that completed them, so only the frame being gathered stays.
"""

from __future__ import annotations

import trio

#: Frames of at most this many bytes (size prefix included) may use the small share.
SMALL_FRAME_BYTES = 1 << 20

#: Which pool a reservation was charged to.
MAIN = 0
SMALL = 1


class RequestMemory:
    """The pool; ``limit`` ``None`` means no bound (nothing waits, nothing counted)."""

    __slots__ = ("_freed", "limit", "small_frame", "small_share", "small_used", "used")

    def __init__(self, limit: int | None, small_share: int | None = None,
                 small_frame: int = SMALL_FRAME_BYTES) -> None:
        self.limit = limit
        #: The largest frame the small share takes.
        self.small_frame = small_frame
        #: Bytes kept for small frames while the main pool is full.
        self.small_share = (max(SMALL_FRAME_BYTES, limit // 8) if small_share is None else small_share) \
            if limit is not None else 0
        #: Bytes reserved in the main pool by every connection together.
        self.used = 0
        #: Bytes reserved in the small share.
        self.small_used = 0
        self._freed = trio.Event()

    @property
    def full(self) -> bool:
        """True while no new large request may be started."""
        return self.limit is not None and self.used >= self.limit

    def pool_for(self, size: int) -> int | None:
        """The pool a new frame of ``size`` bytes would be charged to now, or ``None``
        when it must wait."""
        if not self.full:
            return MAIN
        if size <= self.small_frame and self.small_used < self.small_share:
            return SMALL
        return None

    async def reserve(self, size: int) -> int:
        """Wait for room for a new frame of ``size`` bytes, reserve them; the pool charged."""
        while True:
            pool = self.pool_for(size)
            if pool is not None:
                self.change(pool, size)
                return pool
            await self._freed.wait()

    async def wait_for_room(self) -> None:
        """Wait until a small frame could start (a reader that does not know the size yet)."""
        while self.pool_for(self.small_frame) is None:
            await self._freed.wait()

    def change(self, pool: int, delta: int) -> None:
        """Reserve (``delta`` > 0) or release (< 0) bytes of ``pool``; a release wakes the
        readers."""
        if pool == SMALL:
            self.small_used += delta
        else:
            self.used += delta
        if delta < 0:
            self._freed.set()
            self._freed = trio.Event()

    def statistics(self) -> dict[str, int | None]:
        """``{"used": bytes, "small_used": bytes, "limit": bytes or None}``."""
        return {"used": self.used, "small_used": self.small_used, "limit": self.limit}
