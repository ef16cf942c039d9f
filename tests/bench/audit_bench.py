"""``python -m tests.bench.audit_bench``: what the audit observer costs.

1. Sidecar throughput with the audit observer on vs off (``observer.class.names=audit``,
   ``observer.audit.overflow=block`` so that no row is dropped to keep up: the cost is
   paid in full). Each run uses a fresh stack (broker, ``ksidecar run``); modes are
   interleaved and their order rotated per repeat. Reports the median of each mode and
   the ratio on/off, and the audit's own counters scraped from the sidecar.
2. Audit rows per second the observer and its Parquet sink sustain on one thread: Produce
   exchanges (one partition, one record each) through the hub worker's ``deliver``
   (fields picked from the frames, rows, buffer, flushes, rolls), timed until every row is
   in a closed file.

   With ``--isolation process`` the audit observer runs in a child process
   (``observer.audit.isolation=process``); ``--isolation thread process`` interleaves
   off, thread and process runs and reports each "on" mode against "off". Also reports
   the sidecar's own cost of the hand-off in process mode (packing and sending,
   µs per exchange, one thread).

    python -m tests.bench.audit_bench                      # 3 repeats, thread mode
    python -m tests.bench.audit_bench --repeats 5 produce-b1-acks1 consume
    python -m tests.bench.audit_bench --isolation thread process
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from observers.api import ObserverConfig
from observers.audit import AuditObserver
from observers.hub import ObserverHub, Settings
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_request_header, encode_response_header
from protocol.schema import encode
from tests.bench.kafka import produce_request, record_batch
from tests.bench.runner import rotated
from tests.bench.stack import Stack
from tests.bench.workloads import BY_NAME
from tests.bench.workloads import Settings as BenchSettings

DEFAULT_WORKLOADS = ("produce-b1-acks1", "produce-b100-acks1", "consume")


def audit_keys(directory: Path, isolation: str = "thread") -> dict[str, str]:
    """The sidecar keys of an "on" mode."""
    return {"observer.class.names": "audit", "observer.audit.dir": str(directory),
            "observer.audit.overflow": "block", "observer.audit.isolation": isolation}


def scrape_audit(stack: Stack) -> dict[str, float]:
    """The audit's counters from the sidecar's /metrics."""
    assert stack.sidecar is not None
    wanted = {"ksidecar_observer_records_total", "ksidecar_observer_dropped_total",
              "ksidecar_observer_errors_total"}
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(stack.sidecar.scrape()):
        for sample in family.samples:
            if sample.name in wanted:
                found[sample.name] = sample.value
    return found


def throughput(
    names: list[str], repeats: int, work: Path, isolations: list[str] | None = None
) -> list[dict[str, Any]]:
    """Median sidecar throughput per workload, audit off and on (once per isolation)."""
    settings = BenchSettings()
    on_modes = isolations or ["thread"]
    out: list[dict[str, Any]] = []
    for name in names:
        workload = BY_NAME[name]
        runs: dict[str, list[float]] = {mode: [] for mode in ["off", *on_modes]}
        counters: dict[str, dict[str, float]] = {mode: {} for mode in on_modes}
        for repeat in range(repeats):
            for mode in rotated(["off", *on_modes], repeat):
                keys = audit_keys(work / f"audit-{name}-{mode}-{repeat}", mode) if mode != "off" else {}
                with Stack(work / "logs" / f"{name}-{mode}-{repeat}", extra_keys=keys) as stack:
                    state: dict[str, Any] = {}
                    if workload.setup is not None:
                        workload.setup(stack, settings, state)
                    measured = workload.measure(stack, "sidecar", settings, state)
                    runs[mode].append(measured[workload.metric])
                    if mode != "off":
                        for k, v in scrape_audit(stack).items():
                            counters[mode][k] = counters[mode].get(k, 0.0) + v
                print(f"  {name} {mode} repeat {repeat}: {measured[workload.metric]:,.0f} {workload.unit}",
                      flush=True)
        off = statistics.median(runs["off"])
        for mode in on_modes:
            on = statistics.median(runs[mode])
            out.append({"workload": name, "title": workload.title, "unit": workload.unit,
                        "isolation": mode, "off": off, "on": on, "ratio": on / off if off else 0.0,
                        "runs": {"off": runs["off"], "on": runs[mode]}, "counters": counters[mode]})
    return out


#: The response header version of Produce v10 (the exchanges fed to the audit below).
PRODUCE_V10_RESPONSE_HEADER = DEFAULT_REGISTRY.api(0).response_header_version(10)


def _one_audit(directory: Path, isolation: str) -> tuple[Any, ...]:
    """An audit observer behind a one-worker hub, and a one-record Produce exchange to
    feed it: ``(registry, audit, worker, tap, header, request frame, response frame)``."""
    registry = CollectorRegistry()
    audit = AuditObserver()
    audit.configure(ObserverConfig({"observer.audit.dir": str(directory),
                                    "observer.audit.isolation": isolation}, registry=registry))
    hub = ObserverHub([(audit, "audit", Settings())], DEFAULT_REGISTRY, registry)
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 40000, 1)
    frame = produce_request(1, "bench", record_batch(1, 1024), 1)
    header = decode_request_header(frame[4:])
    api = DEFAULT_REGISTRY.api(0)
    body = encode_response_header(1, api.response_header_version(10)) + encode(
        api.response, 10, {"Responses": [
            {"Name": "bench", "PartitionResponses": [{"Index": 0, "ErrorCode": 0}]}]})
    response = len(body).to_bytes(4, "big") + body
    return registry, audit, hub.workers[0], tap, header, frame, response


def sink_rate(exchanges: int, work: Path) -> dict[str, float]:
    """Rows per second through deliver → rows → Parquet, one thread."""
    registry, audit, worker, tap, header, frame, response = _one_audit(work / "sink", "thread")
    began = time.perf_counter()
    for i in range(exchanges):
        tap.completed(header, PRODUCE_V10_RESPONSE_HEADER, "User:ANONYMOUS", frame,
                      len(frame), time.time(), True, False, response, 0.001, 0.0008)
        worker.deliver(worker.items.popleft())  # type: ignore[arg-type]
        if i % 5000 == 0:
            audit.tick(time.time())
    audit.close(30)
    elapsed = time.perf_counter() - began
    rows = registry.get_sample_value("ksidecar_audit_rows_written_total") or 0.0
    return {"rows": rows, "seconds": elapsed, "rows_per_second": rows / elapsed,
            "us_per_row": elapsed / rows * 1e6 if rows else 0.0}


def handoff_cost(exchanges: int, work: Path) -> dict[str, float]:
    """The sidecar's side of process isolation: µs per exchange to pack and send (the
    worker thread's ``deliver``), and the wall time until the child closed."""
    registry, audit, worker, tap, header, frame, response = _one_audit(work / "handoff", "process")
    began, spent = time.perf_counter(), 0.0
    for i in range(exchanges):
        tap.completed(header, PRODUCE_V10_RESPONSE_HEADER, "User:ANONYMOUS", frame,
                      len(frame), time.time(), True, False, response, 0.001, 0.0008)
        t = time.thread_time()
        worker.deliver(worker.items.popleft())  # type: ignore[arg-type]
        if i % 5000 == 0:
            audit.tick(time.time())
        spent += time.thread_time() - t
    audit.close(60)
    elapsed = time.perf_counter() - began
    rows = registry.get_sample_value("ksidecar_audit_rows_written_total") or 0.0
    return {"rows": rows, "seconds": elapsed, "us_per_exchange": spent / exchanges * 1e6}


def main(argv: list[str] | None = None) -> int:
    """Run both measurements and print a Markdown summary."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.audit_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=list(DEFAULT_WORKLOADS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sink-exchanges", type=int, default=100_000)
    parser.add_argument("--isolation", nargs="+", choices=["thread", "process"], default=["thread"],
                        help="observer.audit.isolation of the 'on' runs (several: interleaved)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ksidecar-audit-bench-") as tmp:
        work = Path(tmp)
        sink = sink_rate(args.sink_exchanges, work)
        print(f"sink: {sink['rows']:,.0f} rows in {sink['seconds']:.2f} s = "
              f"{sink['rows_per_second']:,.0f} rows/s ({sink['us_per_row']:.1f} µs/row)", flush=True)
        if "process" in args.isolation:
            cost = handoff_cost(args.sink_exchanges, work)
            print(f"process hand-off: {cost['us_per_exchange']:.1f} µs/exchange on the sidecar's "
                  f"thread; {cost['rows']:,.0f} rows written in {cost['seconds']:.2f} s", flush=True)
        results = throughput(args.workloads, args.repeats, work, args.isolation)
    print("\n| workload | isolation | unit | audit off | audit on | on/off | off runs | on runs "
          "| audit rows handed | dropped | errors |")
    print("|---|---|---|---:|---:|---:|---|---|---:|---:|---:|")
    for r in results:
        c = r["counters"]
        spread = {k: ", ".join(f"{v:,.0f}" for v in r["runs"][k]) for k in ("off", "on")}
        print(f"| {r['title']} | {r['isolation']} | {r['unit']} | {r['off']:,.0f} | {r['on']:,.0f} | "
              f"{r['ratio']:.2f} | {spread['off']} | {spread['on']} | "
              f"{c.get('ksidecar_observer_records_total', 0):,.0f} | "
              f"{c.get('ksidecar_observer_dropped_total', 0):,.0f} | "
              f"{c.get('ksidecar_observer_errors_total', 0):,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
