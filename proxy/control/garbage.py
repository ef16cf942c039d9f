"""When a sidecar process lets Python's cyclic garbage collector walk everything.

A full collection walks every object the process holds: with thousands of connections (each
a few dozen objects) that is 80-130 ms, during which no connection is served. Python starts
one whenever the objects that survived two young collections since the last full one grow
past a quarter of all long-lived objects; a process whose requests wait across a scheduler
pass (a worker's calls to its supervisor, answers-later) makes such survivors all the time.
Measured with 5,000 members heartbeating through a sidecar of two workers
(``python -m tests.bench.heartbeat_bench --workers 2``): three to five full collections of
80-133 ms in each process within 30 s, and a heartbeat p99 of 73-190 ms.

So, once a process serves:

* what starting built (modules, schemas, configuration, components: it lives as long as the
  process) is moved out of the collector's sight (:func:`keep_out_of_collections`);
* young collections run as Python chooses (they are short);
* full collections run on a clock, every :data:`FULL_COLLECTION_INTERVAL` seconds
  (:func:`collect_fully_on_a_clock`), instead of when survivors pile up. Garbage in cycles
  that reached the old generation waits for the next one; garbage without cycles is freed at
  once as always.
"""

from __future__ import annotations

import gc
import logging
import time

import trio

log = logging.getLogger(__name__)

#: Seconds between full collections once serving.
FULL_COLLECTION_INTERVAL = 120.0
#: The third threshold: how many collections of the middle generation may pass before a
#: full one is considered; this large, never (the clock decides).
NO_AUTOMATIC_FULL_COLLECTION = 1 << 30


def keep_out_of_collections() -> None:
    """Collect once, then hide every object that exists from the collector (they live as
    long as the process), so that a collection walks only what serving allocates. With
    200 regex groups on 5,000 topics (``python -m tests.bench.regex_bench``) full collections
    had paused every connection for 30-57 ms."""
    gc.collect()
    gc.freeze()
    log.debug("%d objects of the start kept out of garbage collections", gc.get_freeze_count())


async def collect_fully_on_a_clock(interval: float = FULL_COLLECTION_INTERVAL) -> None:
    """Run full collections every ``interval`` seconds, and never otherwise (until cancelled,
    when Python's own thresholds come back)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, NO_AUTOMATIC_FULL_COLLECTION)
    try:
        while True:
            await trio.sleep(interval)
            started = time.perf_counter()
            found = gc.collect()
            log.debug("full garbage collection: %d unreachable object(s) in %.1f ms", found,
                      (time.perf_counter() - started) * 1000)
    finally:
        gc.set_threshold(young, middle, old)
