"""The multiprocess /metrics page: real worker processes write, the supervisor's page sums.

Each worker is a separate process (multiprocessing's ``forkserver`` context: a process
with no metric object of its parent's, as the sidecar's forked workers are) that enables
multiprocess mode, creates its metric objects, records and exits. The expected values are computed by hand from what each worker recorded.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import prometheus_client.values
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from proxy.control.metrics_page import ENV, enable_multiprocess, flush, mark_dead, page_registry

#: What each worker records: (requests on PLAINTEXT, requests on SSL, open connections).
WORKERS = ((1, 0, 2), (4, 2, 3), (0, 5, 7))


def worker(directory: str, plaintext: int, ssl: int, open_connections: int) -> None:
    """One worker process: its own metric objects, written to the shared directory."""
    enable_multiprocess(Path(directory))
    registry = CollectorRegistry()
    requests = Counter("t_requests", "Requests.", ["listener"], registry=registry)
    active = Gauge("t_connections_active", "Open connections.", multiprocess_mode="livesum",
                   registry=registry)
    up = Gauge("t_upstream_up", "1 while up.", multiprocess_mode="livemax", registry=registry)
    requests.labels("PLAINTEXT").inc(plaintext)
    requests.labels("SSL").inc(ssl)
    active.set(open_connections)
    del up  # a worker never sets it: its 0 must not hide the supervisor's 1
    flush()  # as a worker does every second, before a scrape and at its end


class QuotaLike(Collector):
    """A custom collector on a callback (as the supervisor's gate quota gauges are)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("t_quota", "A callback gauge.", value=2.5)


@pytest.fixture
def directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A multiprocess directory; this process's mode is restored afterwards."""
    monkeypatch.setenv(ENV, str(tmp_path))
    monkeypatch.setattr(prometheus_client.values, "ValueClass", prometheus_client.values.ValueClass)
    return tmp_path


def run_workers(directory: Path) -> list[int]:
    """Run every worker of :data:`WORKERS` to its end; return their pids."""
    context = multiprocessing.get_context("forkserver")
    processes = [context.Process(target=worker, args=(str(directory), *w)) for w in WORKERS]
    for p in processes:
        p.start()
    for p in processes:
        p.join(30)
        assert p.exitcode == 0
    return [p.pid for p in processes if p.pid is not None]


def page(registry: CollectorRegistry) -> tuple[list[str], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """The exposition's family names (in order, repeats kept) and its samples."""
    text = generate_latest(registry).decode()
    families = list(text_string_to_metric_families(text))
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    return [f.name for f in families], values


def test_the_page_sums_every_process_and_forgets_a_dead_ones_live_gauges(directory: Path) -> None:
    enable_multiprocess(directory)  # the supervisor, before its own metric objects
    own = CollectorRegistry()
    supervisor_requests = Counter("t_requests", "Requests.", ["listener"], registry=own)
    supervisor_requests.labels("PLAINTEXT").inc(10)
    Gauge("t_upstream_up", "1 while up.", multiprocess_mode="livemax", registry=own).set(1)
    own.register(QuotaLike())
    pids = run_workers(directory)
    flush()

    registry = page_registry(own, directory)
    names, values = page(registry)
    assert sorted(names) == ["t_connections_active", "t_quota", "t_requests", "t_upstream_up"]
    assert len(names) == len(set(names))  # no family twice (the supervisor's own ones neither)
    assert values[("t_requests_total", (("listener", "PLAINTEXT"),))] == 1 + 4 + 0 + 10
    assert values[("t_requests_total", (("listener", "SSL"),))] == 0 + 2 + 5
    assert values[("t_connections_active", ())] == 2 + 3 + 7
    assert values[("t_upstream_up", ())] == 1  # the workers' 0s do not hide it
    assert values[("t_quota", ())] == 2.5  # read live, once

    mark_dead(pids[1], directory)  # the worker that had 3 connections exited
    names, values = page(registry)
    assert len(names) == len(set(names)) == 4
    assert values[("t_connections_active", ())] == 2 + 7
    assert values[("t_requests_total", (("listener", "PLAINTEXT"),))] == 15  # it did serve them
    assert values[("t_requests_total", (("listener", "SSL"),))] == 7


def test_enabling_switches_the_value_class_of_metrics_created_afterwards(directory: Path) -> None:
    before = Counter("t_before", "Created before.", registry=CollectorRegistry())
    enable_multiprocess(directory / "sub")
    after = Counter("t_after", "Created after.", registry=CollectorRegistry())
    before.inc()
    after.inc()
    assert not getattr(before._value, "_multiprocess", False)
    assert getattr(after._value, "_multiprocess", False)
    assert [p.name for p in (directory / "sub").iterdir()] == [f"counter_{os.getpid()}.db"]


def test_changes_reach_the_files_when_flushed_not_before(directory: Path) -> None:
    enable_multiprocess(directory)
    own = CollectorRegistry()
    requests = Counter("t_buffered", "Requests.", registry=own)
    requests.inc(3)
    assert requests._value.get() == 3  # this process reads its own number at once
    _, before = page(page_registry(own, directory))
    assert before.get(("t_buffered_total", ())) in (None, 0.0)  # not written yet
    flush()
    requests.inc(2)
    flush()
    _, after = page(page_registry(own, directory))
    assert after[("t_buffered_total", ())] == 5.0
