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
:func:`enable_multiprocess` must run before the first one is (workers started with the
``forkserver`` context inherit the variable from the supervisor, and a fresh interpreter
picks the mode when it imports prometheus_client).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import prometheus_client.values
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
    values = prometheus_client.values
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]


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


__all__ = ["ENV", "enable_multiprocess", "mark_dead", "page_registry"]
