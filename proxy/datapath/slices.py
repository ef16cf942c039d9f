"""Long work on the event loop, done in slices with scheduler passes between them.

One sidecar serves every connection from one trio thread, so work that takes tens of
milliseconds (ACL narrowing of a 10,000-topic Metadata answer, the coordinator reading 5,000
topics and rechecking 200 regex subscriptions) must not be done in one piece. Its loop calls
:meth:`Slicer.turn` after each small piece: once :data:`SLICE` seconds of work have gone by,
other tasks get a turn. (A worker thread is no way out: it holds the interpreter in 5 ms
turns, each one a wait for the event loop.)
"""

from __future__ import annotations

import time

import trio

#: Seconds of work between two scheduler passes.
SLICE = 0.002


class Slicer:
    """Gives other tasks a turn once ``seconds`` (default :data:`SLICE`) of work went by."""

    __slots__ = ("_began", "seconds")

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = SLICE if seconds is None else seconds
        self._began = time.perf_counter()

    async def turn(self) -> None:
        """Call after each piece of the work (it is a checkpoint only when the slice is over)."""
        if time.perf_counter() - self._began >= self.seconds:
            await trio.sleep(0)
            self._began = time.perf_counter()
