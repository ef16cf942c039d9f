"""Closed-loop pipelined load: a window of prebuilt requests kept in flight on one connection.

See :mod:`tests.bench.kafka` for why frames are prebuilt and reused. The loop runs a
warm-up, then measures for ``duration`` seconds (or until ``max_requests`` responses),
then stops sending and drains what is still in flight. Only the measured interval counts.

:func:`run_spread` does the same over many connections from one or more generator
processes (the saturation benchmarks of :mod:`tests.bench.workers_bench`): each process
waits on its connections with epoll, reads whatever arrived in one call, walks the size
prefixes only, and resends the answered frames as slices of one pre-encoded ring, so it
spends a few microseconds of CPU per request where the sidecar spends tens.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tests.bench.kafka import RawConnection

_SIZE_PREFIX = struct.Struct(">i")


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


# -- many connections, one or more generator processes ---------------------------------------


@dataclass
class SpreadResult:
    """What a many-connection closed-loop run measured (summed over generator processes)."""

    requests: int
    seconds: float
    #: CPU seconds the generator processes used over the measured interval.
    generator_cpu: float
    sample: bytes | None

    @property
    def per_second(self) -> float:
        """Responses per second over the measured interval."""
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def _drive(address: str, frames: Callable[[int], Sequence[bytes]], indexes: Sequence[int], start: float,
           end: float, deadline: float) -> tuple[int, float, bytes | None]:
    """One generator process's part of :func:`run_spread`: connection ``i`` for each of
    ``indexes``, with every frame of ``frames(i)`` in flight; the responses that arrived in
    ``[start, end)`` (``time.monotonic``), the CPU this process used over that interval, and
    a sample."""
    import selectors

    window = len(frames(indexes[0]))
    connections = len(indexes)
    conns = [RawConnection(address) for _ in indexes]
    selector = selectors.DefaultSelector()
    # Per connection: [oldest frame id, bytes of a partial frame, its ring, the frames'
    # offsets in it]. While sending, every connection has its whole window outstanding;
    # after, each answer takes one off.
    state: dict[int, list[Any]] = {}
    try:
        for index, conn in zip(indexes, conns, strict=True):
            own = frames(index)
            if len(own) != window:
                raise ValueError("every connection keeps the same number of frames in flight")
            starts = [0]
            for frame in own:
                starts.append(starts[-1] + len(frame))
            ring = memoryview(b"".join(own))
            conn.sock.settimeout(30.0)  # sends block (briefly); reads only when ready
            selector.register(conn.sock, selectors.EVENT_READ, conn)
            state[conn.sock.fileno()] = [0, b"", ring, starts]
            conn.sock.sendall(ring)
        counted = 0
        cpu0 = cpu1 = 0.0
        sample: bytes | None = None
        measuring, sending = False, True
        outstanding = window * connections
        size = _SIZE_PREFIX
        while outstanding:
            events = selector.select(timeout=1.0)
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{outstanding} request(s) unanswered at the deadline")
            if sending and not measuring and now >= start:
                measuring, cpu0 = True, time.process_time()
            if sending and now >= end:
                sending, cpu1 = False, time.process_time()
            for key, _ in events:
                conn = key.data
                entry = state[conn.sock.fileno()]
                data = conn.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("the server closed a connection")
                buffer = entry[1] + data if entry[1] else data
                at, n, length = 0, 0, len(buffer)
                while length - at >= 4:
                    frame_end = at + 4 + size.unpack_from(buffer, at)[0]
                    if frame_end > length:
                        break
                    if sample is None and measuring:
                        sample = bytes(buffer[at + 4 : frame_end])
                    at, n = frame_end, n + 1
                entry[1] = buffer[at:] if at < length else b""
                if not n:
                    continue
                if measuring and sending:
                    counted += n
                first, ring, starts = entry[0], entry[2], entry[3]
                entry[0] = (first + n) % window
                if sending:
                    count = n
                    while count:  # resend the answered frames: at most two slices of the ring
                        run = min(count, window - first)
                        conn.sock.sendall(ring[starts[first] : starts[first + run]])
                        count -= run
                        first = 0
                else:
                    outstanding -= n
        return counted, cpu1 - cpu0, sample
    finally:
        selector.close()
        for conn in conns:
            conn.close()


def _drive_into(pipe: Any, *args: Any) -> None:
    try:
        pipe.send(("ok", _drive(*args)))
    except BaseException as exc:  # reported to the parent, which raises it
        pipe.send(("error", repr(exc)))
    finally:
        pipe.close()


def run_spread(address: str, frames: Sequence[bytes] | Callable[[int], Sequence[bytes]], *, connections: int,
               processes: int = 1,
               duration: float, warmup: float, on_start: Callable[[], None] | None = None,
               on_end: Callable[[], None] | None = None) -> SpreadResult:
    """``connections`` connections, each keeping every frame of ``frames`` (or of
    ``frames(connection index)``) in flight (correlation id ``i`` at position ``i``), spread over ``processes`` generator processes
    (forked); the measured interval is ``duration`` seconds after ``warmup``, the same for
    every process. ``on_start`` and ``on_end`` run in this process at the interval's bounds
    (to read CPU counters). Every loop is bounded: a run that has not drained 30 s after
    its end fails."""
    import multiprocessing

    if not 1 <= processes <= connections:
        raise ValueError("1 <= processes <= connections")
    context = multiprocessing.get_context("fork")
    base = time.monotonic() + 0.5 + 0.01 * connections  # every connection open by then
    start, end = base + warmup, base + warmup + duration
    deadline = end + 30.0
    children = []
    frames_of = frames if callable(frames) else (lambda index: frames)
    for index in range(processes):
        ours, theirs = context.Pipe(duplex=False)
        share = list(range(index, connections, processes))
        child = context.Process(target=_drive_into, args=(theirs, address, frames_of, share, start, end, deadline),
                                daemon=True)
        child.start()
        theirs.close()
        children.append((child, ours))
    try:
        time.sleep(max(0.0, start - time.monotonic()))
        if on_start is not None:
            on_start()
        time.sleep(max(0.0, end - time.monotonic()))
        if on_end is not None:
            on_end()
        requests, cpu, sample = 0, 0.0, None
        for _child, pipe in children:
            if not pipe.poll(max(0.1, deadline + 5 - time.monotonic())):
                raise TimeoutError("a generator process did not report")
            status, value = pipe.recv()
            if status != "ok":
                raise RuntimeError(f"generator process failed: {value}")
            requests, cpu = requests + value[0], cpu + value[1]
            sample = sample or value[2]
    finally:
        reap(children)
    return SpreadResult(requests, duration, cpu, sample)


def reap(children: Sequence[tuple[Any, Any]]) -> None:
    """Join forked load processes (killed if still alive 5 s on) and close their pipes."""
    for child, pipe in children:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join(5)
        pipe.close()
