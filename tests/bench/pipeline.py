"""Closed-loop pipelined load: a window of prebuilt requests kept in flight on one connection.

See :mod:`tests.bench.kafka` for why frames are prebuilt and reused. The loop runs a
warm-up, then measures for ``duration`` seconds (or until ``max_requests`` responses),
then stops sending and drains what is still in flight. Only the measured interval counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tests.bench.kafka import RawConnection


@dataclass
class PipelineResult:
    """What one closed-loop run measured."""

    requests: int
    seconds: float
    request_bytes: int
    sample: bytes | None
    #: Every response received, warm-up and drain included.
    total: int = 0

    @property
    def per_second(self) -> float:
        """Responses per second over the measured interval."""
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def run_pipeline(
    address: str,
    frames: Sequence[bytes],
    *,
    duration: float,
    warmup: float,
    max_requests: int | None = None,
    check: Callable[[bytes], None] | None = None,
) -> PipelineResult:
    """Keep ``len(frames)`` requests in flight; frame ``i`` is resent when its answer arrives.

    Each frame must carry correlation id ``i`` (its position), so responses arrive in ring
    order. ``check`` is called on the first measured response (e.g. to assert no error).
    """
    window = len(frames)
    ring = b"".join(frames)
    starts = [0]
    for frame in frames:
        starts.append(starts[-1] + len(frame))
    view = memoryview(ring)
    sizes = [len(f) for f in frames]

    def release(first: int, count: int) -> None:
        # Resend frames first .. first+count-1 (mod window) as at most two slices.
        while count:
            run = min(count, window - first)
            conn.send(view[starts[first] : starts[first + run]])
            count -= run
            first = 0

    with RawConnection(address) as conn:
        conn.send(view)
        oldest = 0
        outstanding = window
        sending = True
        began = time.perf_counter()
        measure_from = began + warmup
        measure_until = measure_from + duration
        measuring = False
        counted = 0
        counted_bytes = 0
        t0 = t1 = began
        sample: bytes | None = None
        total = 0
        while outstanding:
            conn.receive()
            keep = measuring and sample is None
            n, kept = conn.take_frames(keep=keep)
            if not n:
                continue
            total += n
            now = time.perf_counter()
            if kept:
                sample = kept[0]
            if measuring:
                counted += n
                for i in range(n):
                    counted_bytes += sizes[(oldest + i) % window]
                t1 = now
            first, oldest, outstanding = oldest, (oldest + n) % window, outstanding - n
            if sending:
                if not measuring and now >= measure_from:
                    measuring, t0 = True, now
                if measuring and (
                    now >= measure_until or (max_requests is not None and counted >= max_requests)
                ):
                    sending = False
                else:
                    release(first, n)
                    outstanding += n
    if sample is not None and check is not None:
        check(sample)
    return PipelineResult(counted, t1 - t0, counted_bytes, sample, total)
