"""Results as JSON (``tests/bench/out/``) and as this runner's section of RESULTS.md.

RESULTS.md is shared with other benchmarks (the protocol codec's section): this module
rewrites only the text between its own markers and leaves the rest of the file alone.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.bench.runner import WorkloadResult
from tests.bench.workloads import Settings

BEGIN = "<!-- bench:sidecar:begin (written by python -m tests.bench; edit the runner, not this) -->"
END = "<!-- bench:sidecar:end -->"
HEADING = "## Sidecar vs direct vs peer"


@dataclass(frozen=True)
class Target:
    """An issue-9 target on one workload's comparison."""

    workload: str
    key: str
    bound: float
    at_least: bool
    text: str

    def met(self, comparisons: dict[str, float]) -> bool | None:
        """True/False, or None when the workload did not run."""
        value = comparisons.get(self.key)
        if value is None:
            return None
        return value >= self.bound if self.at_least else value <= self.bound


def targets_for(results: Sequence[WorkloadResult]) -> list[Target]:
    """Issue 9's and issue 18's targets on the workloads that ran."""
    out: list[Target] = []
    for result in results:
        w = result.workload
        if w.per_request:
            out.append(Target(w.name, "sidecar_added/relay_added", 1.5, False,
                              "sidecar adds ≤ 1.5 × what the relay adds per request"))
            if "audit" in result.targets:
                out.append(Target(w.name, "audit/sidecar", 0.90, True,
                                  "audit on ≥ 0.90 of audit off"))
            if "acls" in result.targets:
                out.append(Target(w.name, "acls/sidecar", 0.95, True, "100 ACLs ≥ 0.95 of ACLs off"))
            continue
        if w.name.startswith("produce-"):
            bound = 0.75 if "-b1-" in w.name else 0.95
            out.append(Target(w.name, "sidecar/direct", bound, True, f"sidecar/direct ≥ {bound:.2f}"))
        if w.name == "consume":
            out.append(Target(w.name, "sidecar/direct", 0.90, True, "sidecar/direct ≥ 0.90"))
        if "audit" in result.targets and not w.additive:
            out.append(Target(w.name, "audit/sidecar", 0.90, True, "audit on ≥ 0.90 of audit off"))
        if "acls" in result.targets and w.higher_is_better:
            out.append(Target(w.name, "acls/sidecar", 0.95, True, "100 ACLs ≥ 0.95 of ACLs off"))
        if "acls" in result.targets and w.name == "cluster-metadata":
            out.append(Target(w.name, "acls/direct", 2.0, False,
                              "100 ACLs narrowing to half the topics: ≤ 2 × direct's latency"))
        if "acls" in result.targets and w.name == "cluster-refresh":
            out.append(Target(w.name, "acls/direct", 1.5, False,
                              "100 ACLs narrowing to half: producer p99 ≤ 1.5 × direct's"))
        if w.additive:
            if w.name == "latency-produce":
                out.append(Target(w.name, f"sidecar_added_{w.metric}", 1.0, False, "added p99 ≤ 1 ms"))
            if w.name == "cluster-metadata":
                out.append(Target(w.name, f"sidecar_added_{w.metric}", 2.0, False,
                                  "adds ≤ 2 ms to a full Metadata (1,000 × 10)"))
            continue
        if w.name == "cluster-refresh":
            out.append(Target(w.name, "sidecar/direct", 1.2, False,
                              "producer p99 under Metadata refresh ≤ 1.2 × direct's"))
            continue
        if w.name == "connections":
            out.append(Target(w.name, "sidecar_rss_mb", 100.0, False, "RSS ≤ 100 MB with 1,000 idle"))
            out.append(Target(w.name, "sidecar_kb_per_connection", 15.0, False,
                              "≤ 15 kB per idle connection"))
        if "peer" in w.targets and "sidecar" in w.targets:
            out.append(Target(w.name, "sidecar/peer", 1.0, True, "sidecar ≥ peer"))
    return out


def comparisons_of(result: WorkloadResult) -> dict[str, float]:
    """The comparisons plus a few absolute values targets are stated on."""
    values = dict(result.comparisons)
    sidecar = result.targets.get("sidecar")
    if sidecar is not None and "rss_mb" in sidecar.medians:
        values["sidecar_rss_mb"] = sidecar.medians["rss_mb"]
    if sidecar is not None and "kb_per_connection" in sidecar.medians:
        values["sidecar_kb_per_connection"] = sidecar.medians["kb_per_connection"]
    return values


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 0

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "-"

    tansu = "-"
    try:
        from proxy.tools.rig.tansu import find_tansu

        tansu = subprocess.run([str(find_tansu()), "--version"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except Exception:  # informational only: a missing binary shows as "-"
        pass
    librdkafka = "-"
    try:
        import confluent_kafka

        librdkafka = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    commit = "-"
    try:
        root = Path(__file__).resolve().parents[2]
        commit = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip() or "-"
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(memory / (1 << 30), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "trio": version("trio"),
        "prometheus_client": version("prometheus-client"),
        "construct": version("construct"),
        "confluent_kafka": f"{version('confluent-kafka')} (librdkafka {librdkafka})",
        "tansu": tansu,
        "commit": commit,
    }


def write_json(path: Path, results: Sequence[WorkloadResult], settings: Settings, repeats: int,
               command: str, baseline: str | None = None, workers: int | None = None) -> dict[str, Any]:
    """Write the whole run to ``path``; return what was written (``baseline``: the commit
    of the baseline target, if any; ``workers``: the sidecars' ``sidecar.workers``)."""
    document = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "baseline": baseline,
        "workers": workers,
        "repeats": repeats,
        "settings": settings.__dict__,
        "machine": machine(),
        "workloads": {r.workload.name: r.to_json() for r in results},
        "targets": [
            {"workload": t.workload, "target": t.text, "value": comparisons_of(r).get(t.key),
             "met": t.met(comparisons_of(r))}
            for r in results for t in targets_for([r])
        ],
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return document


def _num(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _versus(results: Sequence[WorkloadResult], other: str, heading: str, first: str, second: str,
            ratio_name: str, note: str, reverse: bool = False) -> list[str]:
    """A table of the sidecar against another sidecar target (``other``) run alongside it.

    The ratio is ``other/sidecar``, or ``sidecar/other`` with ``reverse`` (then ``other``
    is the first column). CPU: per request where the workload counts requests, else the
    share of one core.
    """
    rows = [r for r in results if other in r.targets]
    if not rows:
        return []
    a, b = (other, "sidecar") if reverse else ("sidecar", other)
    key = f"{b}/{a}"
    lines = [heading, "", f"| workload | unit | {first} | {second} | {ratio_name} | CPU {first} | CPU {second} |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        def cpu(target: str, r: WorkloadResult = r) -> str:
            s = r.targets.get(target)
            if s is None:
                return "—"
            if "proxy_us_per_request" in s.medians:
                return f"{s.medians['proxy_us_per_request']:.0f} µs/req"
            if "proxy_cpu" in s.medians:
                return f"{s.medians['proxy_cpu'] * 100:.0f}%"
            return "—"

        ratio = "—" if r.workload.additive else _ratio(r.comparisons, key)
        lines.append(f"| {r.workload.title} | {r.workload.unit} | {_cell(r, a)} | {_cell(r, b)} | {ratio} | "
                     f"{cpu(a)} | {cpu(b)} |")
    return [*lines, "", note, ""]


def _cell(result: WorkloadResult, target: str) -> str:
    s = result.targets.get(target)
    if s is None:
        return "—"
    return f"{_num(s.median)} ±{s.spread * 50:.0f}%"


def _ratio(comparisons: dict[str, float], key: str) -> str:
    value = comparisons.get(key)
    if value is None:
        return "—"
    lo, hi = comparisons.get(f"{key}_lo"), comparisons.get(f"{key}_hi")
    if lo is None or hi is None or lo == hi:
        return f"{value:.2f}"
    return f"{value:.2f} ({lo:.2f}–{hi:.2f})"


def markdown(document: dict[str, Any], results: Sequence[WorkloadResult]) -> str:
    """The section of RESULTS.md for this run (heading included, markers excluded)."""
    m = document["machine"]
    lines = [
        HEADING,
        "",
        f"Measured {document['when']} on {m['nproc']} × {m['cpu']}, {m['memory_gb']} GB, "
        f"Linux {m['kernel']}; Python {m['python']}, trio {m['trio']}, prometheus_client "
        f"{m['prometheus_client']}, construct {m['construct']}, confluent-kafka "
        f"{m['confluent_kafka']}, {m['tansu']} (broker and peer proxy); commit {m['commit']}.",
        "",
        "```",
        document["command"],
        "```",
        "",
        f"Each cell is the median of {document['repeats']} runs (targets interleaved, order "
        "rotated per repeat) ± half the range as a percentage of the median. Ratios are of "
        "medians; in brackets the lowest and highest ratio of runs paired within one repeat. "
        "The broker, the sidecar (`ksidecar run`, its own process), the peer (`tansu proxy`) "
        "and the load generator share the machine's cores. JSON with every run: "
        "`tests/bench/out/`.",
        "",
    ]
    background = [run.get("others_cpu", 0.0) for r in results for t in r.targets.values()
                  for run in t.runs]
    if background:
        lines += [f"Other processes on the machine used {statistics.median(background):.2f} cores "
                  f"(median over runs; max {max(background):.2f}) of {m['nproc']} while this ran "
                  "(`others_cpu` per run in the JSON). The ratios depend on it: when other work "
                  "takes a core, the sidecar's CPU competes with the broker's for the other one "
                  "and the throughput ratios drop (the CPU columns say how much each proxy "
                  "needed).", ""]
    one_in_flight = [r for r in results if r.workload.per_request]
    if one_in_flight:
        lines += [
            "### One request in flight (time per request)",
            "",
            "| workload | direct | relay | sidecar | peer | relay added | sidecar added "
            "| peer added | sidecar added / relay added | sidecar/direct | sidecar CPU/req |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in one_in_flight:
            c = r.comparisons

            def micros(target: str, r: WorkloadResult = r) -> str:
                s = r.targets.get(target)
                return "—" if s is None else f"{1e6 / s.median:.0f} µs ±{s.spread * 50:.0f}%"

            def plus(target: str, c: dict[str, float] = c) -> str:
                value = c.get(f"{target}_added_us")
                return "—" if value is None else f"{value:+.0f} µs"

            s_side = r.targets.get("sidecar")
            per_req = ("—" if s_side is None or "proxy_us_per_request" not in s_side.medians
                       else f"{s_side.medians['proxy_us_per_request']:.0f} µs")
            lines.append(
                f"| {r.workload.title} | {micros('direct')} | {micros('relay')} | "
                f"{micros('sidecar')} | {micros('peer')} | {plus('relay')} | {plus('sidecar')} | "
                f"{plus('peer')} | {_ratio(c, 'sidecar_added/relay_added')} | "
                f"{_ratio(c, 'sidecar/direct')} | {per_req} |"
            )
        lines += ["", "Time per request: 1 / throughput of a client that sends one record and "
                  "waits for its acknowledgement before the next (median of runs); added: "
                  "minus direct's. The relay (`tests/bench/relay.py`) fronts a broker that "
                  "advertises the relay's port, so every request crosses it.", ""]
    throughput = [r for r in results if not r.workload.additive and not r.workload.per_request
                  and r.workload.name != "connections"]
    if throughput:
        lines += [
            "### Throughput",
            "",
            "| workload | unit | direct | sidecar | peer | sidecar/direct | peer/direct "
            "| sidecar/peer | sidecar CPU | peer CPU | sidecar CPU/req | peer CPU/req |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in throughput:
            c = r.comparisons

            def cpu(target: str, r: WorkloadResult = r) -> str:
                s = r.targets.get(target)
                if s is None or "proxy_cpu" not in s.medians:
                    return "—"
                return f"{s.medians['proxy_cpu'] * 100:.0f}%"

            def per_request(target: str, r: WorkloadResult = r) -> str:
                s = r.targets.get(target)
                if s is None or "proxy_us_per_request" not in s.medians:
                    return "—"
                return f"{s.medians['proxy_us_per_request']:.0f} µs"

            lines.append(
                f"| {r.workload.title} | {r.workload.unit} | {_cell(r, 'direct')} | "
                f"{_cell(r, 'sidecar')} | {_cell(r, 'peer')} | {_ratio(c, 'sidecar/direct')} | "
                f"{_ratio(c, 'peer/direct')} | {_ratio(c, 'sidecar/peer')} | {cpu('sidecar')} | "
                f"{cpu('peer')} | {per_request('sidecar')} | {per_request('peer')} |"
            )
        lines += ["", "CPU columns: the proxy process's CPU time over the run, as a share "
                  "of one core, and per request (all requests of the run, warm-up included).",
                  ""]
        for r in throughput:
            if "relay/direct" in r.comparisons:
                lines += [f"{r.workload.title} through the minimal relay (`tests/bench/relay.py`, "
                          f"in front of a broker of its own, filled alike): {_cell(r, 'relay')} "
                          f"{r.workload.unit}, {_ratio(r.comparisons, 'relay/direct')} of direct: "
                          "what one extra userspace hop costs on this machine.", ""]
    latency = [r for r in results if r.workload.additive]
    if latency:
        lines += [
            "### Latency (open loop, one connection)",
            "",
            "| workload | direct p50 / p99 | sidecar p50 / p99 | peer p50 / p99 "
            "| sidecar added p50 / p99 | peer added p50 / p99 | minimal relay added p50 / p99 "
            "| sidecar's own time p50 / p99 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in latency:
            def pair(target: str, r: WorkloadResult = r) -> str:
                s = r.targets.get(target)
                if s is None:
                    return "—"
                return f"{s.medians['p50_ms']:.3f} / {s.medians['p99_ms']:.3f} ms"

            def added(target: str, r: WorkloadResult = r) -> str:
                c = r.comparisons
                p50, p99 = c.get(f"{target}_added_p50_ms"), c.get(f"{target}_added_p99_ms")
                if p50 is None or p99 is None:
                    return "—"
                return f"{p50:+.3f} / {p99:+.3f} ms"

            def own(r: WorkloadResult = r) -> str:
                s = r.targets.get("sidecar")
                if s is None or "own_p99_ms_le" not in s.medians:
                    return "—"
                return f"≤ {s.medians['own_p50_ms_le']:g} / ≤ {s.medians['own_p99_ms_le']:g} ms"

            lines.append(f"| {r.workload.title} | {pair('direct')} | {pair('sidecar')} | "
                         f"{pair('peer')} | {added('sidecar')} | {added('peer')} | "
                         f"{added('relay')} | {own()} |")
        lines += ["", "Own time: the sidecar's `ksidecar_sidecar_latency_seconds` histogram over "
                  "the same requests (time in the sidecar minus the broker's), as the upper "
                  "bound of the bucket holding the quantile. Minimal relay: "
                  "`tests/bench/relay.py`, two threads copying bytes, no parsing: what one "
                  "extra userspace hop costs on this machine (two more wake-ups per round "
                  "trip on cores shared with the broker and the client).", ""]
    connections = [r for r in results if r.workload.name == "connections"]
    if connections:
        r = connections[0]
        lines += [
            "### Connections",
            "",
            "| | direct (broker) | sidecar | peer |",
            "|---|---:|---:|---:|",
        ]
        for key, label in (
            ("accepts_per_s", "connections set up per second (connect + ApiVersions)"),
            ("rss_mb", "RSS of the serving process with 1,000 idle connections (MB)"),
            ("rss_delta_mb", "RSS growth for 1,000 connections (MB)"),
            ("kb_per_connection", "per connection (kB)"),
            ("cpu_us_per_connection", "CPU per connection set up (µs)"),
            ("cpu_during_setup", "CPU while setting up (share of one core)"),
        ):
            cells = []
            for target in ("direct", "sidecar", "peer"):
                s = r.targets.get(target)
                cells.append(_num(s.medians[key]) if s is not None and key in s.medians else "—")
            lines.append(f"| {label} | {' | '.join(cells)} |")
        lines += ["", f"Connection setup ratios: {_ratio(r.comparisons, 'sidecar/direct')} "
                  f"sidecar/direct, {_ratio(r.comparisons, 'sidecar/peer')} sidecar/peer. "
                  "The sidecar answers ApiVersions itself and dials the broker only for a "
                  "connection's first forwarded request (none here).", ""]
    lines += _versus(results, "audit", "### Audit observer on vs off", "sidecar (audit off)", "audit on",
                     "on/off", "Audit on: a second `ksidecar run` with `observer.class.names=audit`, "
                     "`observer.audit.overflow=block` (every row written), measured in the same "
                     "repeats as the sidecar.")
    baseline = document.get("baseline")
    lines += _versus(results, "baseline", "### Against a baseline commit", f"baseline ({baseline})",
                     "sidecar (this commit)", "this/baseline",
                     "Baseline: the sidecar of the commit named, run from its own tree in front of the "
                     "same broker, in the same repeats (`--baseline`).", reverse=True)
    lines += ["### Targets (issues 9 and 18)", "", "| workload | target | value | met |", "|---|---|---:|---|"]
    for t in document["targets"]:
        value = t["value"]
        shown = "—" if value is None else f"{value:.3f}"
        met = {True: "yes", False: "**no**", None: "not run"}[t["met"]]
        lines.append(f"| {t['workload']} | {t['target']} | {shown} | {met} |")
    lines.append("")
    return "\n".join(lines)


def update_results_md(path: Path, section: str, *, begin: str = BEGIN, end: str = END) -> None:
    """Replace this runner's section of ``path`` (between the markers), or append it.

    Only text between a begin marker and the end marker after it is replaced; a marker
    left without its partner (a hand edit) is dropped and the section appended, so the
    other sections are never touched. ``begin`` and ``end``: another generator's markers
    (``tests.bench.sizing`` writes docs/sizing.md's block so).
    """
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    block = f"{begin}\n{section.rstrip()}\n{end}"
    start = text.find(begin)
    stop = text.find(end, start + len(begin)) if start >= 0 else -1
    if start >= 0 and stop >= 0:
        text = text[:start] + block + text[stop + len(end) :]
    else:
        text = text.replace(begin + "\n", "").replace(begin, "")
        text = text.replace(end + "\n", "").replace(end, "")
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def command_line() -> str:
    """How this run was started."""
    args = " ".join(sys.argv[1:])
    return f"python -m tests.bench {args}".rstrip()
