"""Run workloads against direct, sidecar and peer in one run, interleaved and repeated.

Each repeat runs every target once, in an order rotated per repeat, so a drift of the
machine (another process, the broker's growing memory) spreads over all targets instead
of landing on one. A workload marked ``fresh_broker`` starts every repeat on a new stack;
any workload does when the broker's RSS passed ``Settings.broker_rss_limit``.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench import procfs
from tests.bench.stack import DEFAULT_WORKERS, TARGETS, Stack
from tests.bench.workloads import CLUSTER_DIGITS, CLUSTER_PREFIX, Settings, Workload

log = logging.getLogger(__name__)


@dataclass
class TargetSummary:
    """One target's runs of one workload."""

    runs: list[dict[str, float]]
    median: float
    low: float
    high: float
    medians: dict[str, float]

    @property
    def spread(self) -> float:
        """(max − min) / median, as a fraction."""
        return (self.high - self.low) / self.median if self.median else 0.0


@dataclass
class WorkloadResult:
    """A workload's summary: per target, and the comparisons."""

    workload: Workload
    targets: dict[str, TargetSummary]
    comparisons: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        w = self.workload
        return {
            "title": w.title,
            "metric": w.metric,
            "unit": w.unit,
            "higher_is_better": w.higher_is_better,
            "additive": w.additive,
            "seconds": round(self.seconds, 2),
            "targets": {
                name: {
                    "median": s.median, "min": s.low, "max": s.high, "spread": s.spread,
                    "medians": s.medians, "runs": s.runs,
                }
                for name, s in self.targets.items()
            },
            "comparisons": self.comparisons,
        }  # fmt: skip


def summarize(workload: Workload, runs: dict[str, list[dict[str, float]]]) -> WorkloadResult:
    """Medians, spreads and the sidecar's comparisons with direct and the peer."""
    targets: dict[str, TargetSummary] = {}
    for name, samples in runs.items():
        values = [s[workload.metric] for s in samples]
        keys = sorted({k for s in samples for k in s})
        medians = {k: statistics.median(s[k] for s in samples if k in s) for k in keys}
        targets[name] = TargetSummary(samples, statistics.median(values), min(values),
                                      max(values), medians)
    result = WorkloadResult(workload, targets)
    result.comparisons = compare(workload, runs, targets)
    return result


def compare(
    workload: Workload, runs: dict[str, list[dict[str, float]]], targets: dict[str, TargetSummary]
) -> dict[str, float]:
    """Ratios (throughput) or added values (latency) of sidecar and peer against direct.

    Ratios are of medians; ``*_lo``/``*_hi`` are the lowest and highest ratio of runs
    paired within one repeat (the targets of a repeat ran back to back).
    """
    out: dict[str, float] = {}
    metric = workload.metric
    if workload.additive:
        if "direct" not in targets:
            return out
        for key in (metric, *workload.extra):
            base = targets["direct"].medians[key]
            for name in ("sidecar", "peer", "relay", "acls", "baseline"):
                if name in targets:
                    out[f"{name}_added_{key}"] = targets[name].medians[key] - base
        if "acls" in targets and targets["direct"].median:
            out["acls/direct"] = targets["acls"].median / targets["direct"].median
        return out

    def ratio(a: str, b: str) -> None:
        if a not in targets or b not in targets or not targets[b].median:
            return
        out[f"{a}/{b}"] = targets[a].median / targets[b].median
        paired = [x[metric] / y[metric] for x, y in zip(runs[a], runs[b], strict=False) if y[metric]]
        if paired:
            out[f"{a}/{b}_lo"], out[f"{a}/{b}_hi"] = min(paired), max(paired)

    ratio("sidecar", "direct")
    ratio("peer", "direct")
    ratio("sidecar", "peer")
    ratio("relay", "direct")
    ratio("audit", "sidecar")
    ratio("acls", "sidecar")
    ratio("acls", "direct")
    ratio("sidecar", "baseline")
    if workload.per_request and "direct" in targets:
        # Time added per request, from throughputs (closed loop, one in flight): 1/x − 1/direct.
        base = 1e6 / targets["direct"].median
        for name in ("relay", "sidecar", "peer", "audit", "acls", "baseline"):
            if name in targets and targets[name].median:
                out[f"{name}_added_us"] = 1e6 / targets[name].median - base
        relay = out.get("relay_added_us")
        if relay and relay > 0 and "sidecar_added_us" in out:
            out["sidecar_added/relay_added"] = out["sidecar_added_us"] / relay
    return out


def hidden_half(topics: int) -> tuple[str, ...]:
    """Prefixes of the cluster-size topics' names that cover the upper half of them
    (``bench-cluster-00500`` to ``-00999`` of 1,000: ``bench-cluster-005`` to ``-009``), in
    as few aligned decimal blocks as it takes: the ACLs of the "acls" target deny them."""
    width = len(CLUSTER_PREFIX) + 1
    prefixes: list[str] = []
    at = topics // 2
    while at < topics:
        block = 1
        while at % (block * 10) == 0 and at + block * 10 <= topics and block * 10 <= 10**CLUSTER_DIGITS:
            block *= 10
        digits = CLUSTER_DIGITS - len(str(block)) + 1
        prefixes.append(f"{CLUSTER_PREFIX}-{at:0{CLUSTER_DIGITS}d}"[: width + digits])
        at += block
    return tuple(prefixes)


def rotated(items: Sequence[str], by: int) -> list[str]:
    """``items`` rotated left ``by`` places."""
    if not items:
        return []
    by %= len(items)
    return [*items[by:], *items[:by]]


def run_workloads(
    workloads: Sequence[Workload],
    settings: Settings,
    repeats: int,
    log_dir: Path,
    progress: Callable[[str], None] = print,
    audit: bool = False,
    acls: bool = False,
    baseline: Path | None = None,
    workers: int = DEFAULT_WORKERS,
) -> list[WorkloadResult]:
    """Run each workload ``repeats`` times per target; one stack, renewed when needed.

    With ``audit``, every workload the sidecar runs also runs through a second sidecar
    with the audit observer on (target ``audit``; compared as ``audit/sidecar``); with
    ``acls``, through a sidecar enforcing 100 ACLs (target ``acls``; ``acls/sidecar``);
    with ``baseline`` (a checkout of another commit), through that commit's sidecar in
    front of the same broker (target ``baseline``; ``sidecar/baseline``): an A/B of a
    change with everything else equal. Every sidecar runs ``sidecar.workers=workers``.
    """
    results: list[WorkloadResult] = []
    stack = Stack(log_dir, audit_enabled=audit, acls_enabled=acls, baseline_source=baseline,
                  acl_hidden_prefixes=hidden_half(settings.cluster_topics), workers=workers)
    try:
        stack.start()
        for index, workload in enumerate(workloads):
            began = time.perf_counter()
            state: dict[str, Any] = {}
            names = list(workload.targets)
            if audit and "sidecar" in names and workload.name != "connections":
                names.append("audit")
            if acls and "sidecar" in names and workload.name != "connections":
                names.append("acls")
            if baseline is not None and "sidecar" in names:
                names.append("baseline")
            runs: dict[str, list[dict[str, float]]] = {t: [] for t in names}
            for repeat in range(repeats):
                # Tansu's in-memory log slows down as it grows past a gigabyte or so (runs
                # late in a repeat were up to 2x slower, whatever the target): heavy
                # workloads get a fresh stack for every repeat.
                fresh = workload.fresh_broker or stack.rss("direct") > settings.broker_rss_limit
                if fresh and (index or repeat):
                    stack.restart()
                if (fresh or not repeat) and workload.setup is not None:
                    state = {}
                    workload.setup(stack, settings, state)
                for target in rotated(names, repeat):
                    probe = BackgroundProbe(stack)
                    measured = workload.measure(stack, target, settings, state)
                    measured["others_cpu"] = probe.others()
                    runs[target].append(measured)
            result = summarize(workload, runs)
            result.seconds = time.perf_counter() - began
            results.append(result)
            progress(one_line(result))
    finally:
        stack.stop()
    return results


def one_line(result: WorkloadResult) -> str:
    """A progress line: medians per target and the sidecar's comparisons."""
    w = result.workload
    medians = "  ".join(f"{n}={_fmt(s.median)}" for n, s in result.targets.items())
    comps = "  ".join(f"{k}={v:.3f}" for k, v in result.comparisons.items()
                      if not k.endswith(("_lo", "_hi")))
    return f"{w.name:24} {w.metric}: {medians}  {comps}  ({result.seconds:.1f}s)"


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3f}"


class BackgroundProbe:
    """CPU the rest of the machine used during a run, in cores.

    The benchmark shares two cores with whatever else runs (other test suites, say):
    machine-wide busy time minus the broker's, the sidecar's, the peer's and this
    process's own. Reported next to the results so a noisy run can be recognised.
    """

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.pids = [stack.pid(t) for t in TARGETS] + [os.getpid(), *stack.broker_pids()]
        for extra in ("relay", "audit", "acls", "baseline"):
            if getattr(stack, extra) is not None:
                self.pids.append(stack.pid(extra))
        self.t0 = time.perf_counter()
        self.busy0 = self._busy()
        self.ours0 = self._ours()

    @staticmethod
    def _busy() -> float:
        return procfs.machine_busy_seconds()

    def _ours(self) -> float:
        # Every process of each tree (a sidecar's workers are its grandchildren), once.
        members = {member for pid in self.pids for member in procfs.descendants(pid)}
        total = 0.0
        for pid in members:
            try:
                total += procfs.cpu_seconds(pid, children=True)
            except (OSError, ValueError):
                continue
        return total

    def others(self) -> float:
        """Cores used by other processes since the probe was made."""
        wall = time.perf_counter() - self.t0
        if wall <= 0:
            return 0.0
        return max(0.0, ((self._busy() - self.busy0) - (self._ours() - self.ours0)) / wall)
