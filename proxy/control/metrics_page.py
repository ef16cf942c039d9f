"""One ``/metrics`` page for a supervisor and its workers (prometheus_client's multiprocess mode).

Theory of operation. Every process of a multi-worker sidecar records its metrics with the
ordinary prometheus_client objects (``Counter``, ``Gauge``, ``Histogram``). Once
:func:`enable_multiprocess` ran in a process, each value those objects hold lives in a
memory-mapped file of the shared directory, one file per process and kind
(``counter_<pid>.db``, ``gauge_livesum_<pid>.db``, …). The supervisor serves the page:
:func:`page_registry` reads every process's files (``MultiProcessCollector``: counters and
histograms summed, gauges merged as each gauge's ``multiprocess_mode`` says) and adds the
supervisor's own *custom* collectors — those built on callbacks, such as the KIP-612
gate's quota gauges, which have no value to put in a file — read live at each scrape.

What the mode cannot carry. ``Info``, ``Enum`` and ``Gauge.set_function`` keep no value
in the files; a worker's metrics must be plain values set where they change. A gauge's
``multiprocess_mode`` says how the processes' values combine: ``livesum`` for counts of
live things (connections, queued items), ``livemax``/``livemin`` where a sum means
nothing. The ``live*`` modes forget a process once :func:`mark_dead` was called for it;
the supervisor calls it for each worker that exited, so a dead worker's connections stop
counting. Counters and histograms of a dead worker stay in the sum (its requests happened).

Order matters: the value class is chosen when a metric object is created, so
:func:`enable_multiprocess` must run before the first one is (the supervisor sets it before it
forks the workers' fork server, :mod:`proxy.control.forks`, and no metric object exists
before a worker builds its sidecar).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import prometheus_client.values
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

#: The variable prometheus_client reads (a lower-case spelling is deprecated).
ENV = "PROMETHEUS_MULTIPROC_DIR"


def enable_multiprocess(directory: Path) -> None:
    """Make this process's metric objects created from now on write to ``directory``.

    Sets :data:`ENV` (inherited by processes started afterwards, and read by the
    ``MultiProcessCollector``) and switches prometheus_client's value class, which it
    otherwise picked once, when it was first imported. Must run before any metric object
    is created in this process: one created earlier keeps an in-memory value that no
    other process sees, and the page would not show it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(directory)
    # Metric objects read ``values.ValueClass`` when they are created (metrics.py:
    # ``values.ValueClass(...)``), so replacing the module attribute is enough.
    prometheus_client.values.ValueClass = _buffered_value_class()


#: Values changed since the last :func:`flush` (their files hold older numbers).
_changed: set[Any] = set()
_changing = threading.Lock()


def _buffered_value_class() -> type:
    """prometheus_client's value class for multiprocess mode, writing to its file only at
    :func:`flush`.

    Its own writes the memory-mapped file on every change, under a lock and after a check
    for a fork: 1.2 us per counter increment and 3.1 us per histogram observation here,
    against 0.4 and 1.0 in one process; at seven changes per request that was 7 us of the
    34 us a worker spent on an ApiVersions answer. Here a change only updates the number
    (under a lock: observers and ZooKeeper callbacks change metrics from their threads),
    and :func:`flush` writes what changed: every second in each process
    (:func:`flush_on_a_clock`), and before every scrape (the supervisor asks its workers
    first, so a page is never older than the scrape). A process forked after metric
    objects exist would write into its parent's file: the workers' fork server is forked
    before any exists.
    """
    base: type = prometheus_client.values.MultiProcessValue()  # type: ignore[no-untyped-call]

    class BufferedValue(base):  # type: ignore[misc]
        def inc(self, amount: float) -> None:
            with _changing:
                self._value += amount
                self._timestamp = 0.0
                _changed.add(self)

        def set(self, value: float, timestamp: float | None = None) -> None:
            with _changing:
                self._value = value
                self._timestamp = timestamp or 0.0
                _changed.add(self)

        def get(self) -> float:
            with _changing:
                return float(self._value)

    return BufferedValue


def flush() -> None:
    """Write every changed value of this process to its file."""
    with _changing:
        changed = list(_changed)
        _changed.clear()
        for value in changed:
            value._file.write_value(value._key, value._value, value._timestamp)


async def flush_on_a_clock(first: Callable[[], None] = lambda: None, interval: float = 1.0) -> None:
    """:func:`flush` every ``interval`` seconds, and once more when cancelled; ``first``
    each time before (a sidecar's tallies, :meth:`SidecarMetrics.flush`)."""
    try:
        while True:
            await trio.sleep(interval)
            first()
            flush()
    finally:
        first()
        flush()


def page_registry(own: CollectorRegistry, directory: Path) -> CollectorRegistry:
    """The registry ``/metrics`` exports in multiprocess mode.

    Every process's metric objects (the supervisor's in ``own`` among them) are read
    from ``directory``; of ``own``, only the families the files do not hold are added,
    read live: the custom collectors, which only the supervisor has. A family is never
    exported twice.
    """
    registry = CollectorRegistry()
    registry.register(_Page(own, directory))
    return registry


def mark_dead(pid: int, directory: Path) -> None:
    """Forget the ``live*`` gauges of the process ``pid`` (a worker that exited);
    its counters and histograms stay in the sums."""
    mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]


class _Page(Collector):
    """The files' families, then ``own``'s families that are not among them."""

    def __init__(self, own: CollectorRegistry, directory: Path) -> None:
        self.own = own
        # Not registered anywhere: collected here, once per scrape.
        self.files = MultiProcessCollector(None, path=str(directory))  # type: ignore[no-untyped-call]

    def collect(self) -> Iterator[Metric]:
        seen: set[str] = set()
        for family in self.files.collect():  # type: ignore[no-untyped-call]
            seen.add(family.name)
            yield family
        # ``own``'s metric objects are in the files already (their values are the ones
        # this process wrote there); what remains is what has no file: custom collectors,
        # and metric objects with no sample yet (an empty family, as in one process).
        for family in self.own.collect():
            if family.name not in seen:
                seen.add(family.name)
                yield family


__all__ = ["ENV", "enable_multiprocess", "flush", "flush_on_a_clock", "mark_dead", "page_registry"]
