"""Each audit job over synthetic audit rows (10 million by default) on this machine.

    python -m tests.bench.spark_bench [--rows 10000000] [--hours 24] [--repeats 1] [--work DIR]

Writes the rows with :mod:`spark_jobs.synthetic` (one Parquet file per hour under
``dt=/hour=``), starts the local session the jobs use on their own (``local[*]``), counts the
rows once to warm the JVM, then times each job's extract-transform-load end to end (reading
Parquet, writing its outputs), and the report's rendering from those outputs. Prints a
Markdown section for ``tests/bench/RESULTS.md``. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from spark_jobs import options, report, synthetic

JOBS = report.JOBS


def _timed(action: Callable[[], object], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000, help="synthetic rows (10,000,000)")
    p.add_argument("--hours", type=int, default=24, help="hours they span (24)")
    p.add_argument("--repeats", type=int, default=1, help="runs per job; the median is shown (1)")
    p.add_argument("--work", type=Path, help="working directory (default: a temp dir, removed)")
    args = p.parse_args(argv)

    from spark_jobs import common  # pyspark: after the arguments, so --help is quick

    load_before = os.getloadavg()[0]
    work = args.work or Path(tempfile.mkdtemp(prefix="ksidecar-spark-bench-"))
    audit, out = work / "audit", work / "report"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        shutil.rmtree(audit, ignore_errors=True)
        started = time.perf_counter()
        rows = synthetic.write_audit(audit, args.rows, start=start, hours=args.hours, seed=1)
        generated = time.perf_counter() - started
        print(f"generated {rows:,} rows ({_size(audit) / 2**20:,.0f} MiB) in {generated:.1f} s", flush=True)

        spark = common.session("ksidecar-spark-bench")
        try:
            warm = _timed(lambda: common.read_audit(spark, str(audit)).count(), 1)[0]
            parser = argparse.ArgumentParser()
            options.add_report(parser)
            base = parser.parse_args(["--audit", str(audit), "--out", str(out / "data"),
                                      "--mirror", str(audit), "--as-of", "2026-01-08"])
            results: list[tuple[str, list[float]]] = []
            for name in JOBS:
                job = importlib.import_module(f"spark_jobs.{name}")
                job_args = argparse.Namespace(**{**vars(base), "out": str(out / "data" / name)})
                times = _timed(lambda job=job, job_args=job_args: job.run(spark, job_args), args.repeats)
                results.append((name, times))
                print(f"{name}: {statistics.median(times):.1f} s", flush=True)
            cores = spark.sparkContext.defaultParallelism
            versions = f"Spark {spark.version}"
        finally:
            spark.stop()
        render = _timed(lambda: report.render(out, title="benchmark"), args.repeats)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(_markdown(args, rows, generated, warm, results, render, cores, versions, load_before))
    return 0


def _markdown(
    args: argparse.Namespace, rows: int, generated: float, warm: float,
    results: list[tuple[str, list[float]]], render: list[float], cores: int, versions: str,
    load_before: float,
) -> str:
    load = os.getloadavg()[0]
    lines = [
        "## Spark jobs over the audit",
        "",
        f"Command: `python -m tests.bench.spark_bench --rows {args.rows} --hours {args.hours}"
        f" --repeats {args.repeats}` at commit {_commit()}",
        "",
        f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"Python {platform.python_version()}, {versions}, `local[*]` ({cores} cores), "
        f"driver memory default; 1-minute load {load_before:.2f} before the run, {load:.2f} "
        "at its end (the run itself keeps about 2 busy).",
        "",
        f"Input: {rows:,} synthetic audit rows over {args.hours} hourly partitions "
        f"(`spark_jobs.synthetic`, generated in {generated:.1f} s). "
        f"A first full count (JVM warm-up) took {warm:.1f} s.",
        "",
        f"| job | wall time (median of {args.repeats}) |",
        "|---|---:|",
    ]
    for name, times in results:
        lines.append(f"| {name} | {statistics.median(times):.1f} s |")
    lines.append(f"| report rendering (pyarrow + Altair + vl-convert, no Spark) | {statistics.median(render):.2f} s |")
    return "\n".join(lines)


def _commit() -> str:
    """The checked-out commit, ``+`` when spark_jobs/ has changes not committed."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "spark_jobs"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(not a git checkout)"
    return head + ("+" if dirty else "")


if __name__ == "__main__":
    raise SystemExit(main())
