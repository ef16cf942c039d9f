"""``python -m tests.bench``: direct vs sidecar vs peer, in one run.

    python -m tests.bench                   # every workload, 3 repeats (a few minutes);
                                            # JSON to tests/bench/out/, table to RESULTS.md
    python -m tests.bench --quick           # short runs, 1 repeat (well under a minute)
    python -m tests.bench produce-b1-acks1 consume --repeats 5
    python -m tests.bench --profile produce-b1000-acks1 consume   # py-spy on the sidecar
    python -m tests.bench --audit produce-sync consume   # also a sidecar with the audit on
    python -m tests.bench --acls produce-sync produce-b1000-acks1   # also one enforcing 100 ACLs
    python -m tests.bench --baseline HEAD~1 consume   # also the sidecar of another commit (A/B)
    python -m tests.bench --workers 2 local-api-versions   # sidecars with sidecar.workers=2
    python -m tests.bench cluster-metadata cluster-refresh --topics 1000 --partitions 10
    python -m tests.bench --list

Needs the ``bench`` and ``test`` extras (``pip install -e '.[test,bench]'``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.profile import profile_workloads
from tests.bench.report import command_line, markdown, update_results_md, write_json
from tests.bench.runner import run_workloads
from tests.bench.stack import DEFAULT_WORKERS
from tests.bench.workloads import BY_NAME, QUICK, WORKLOADS, Settings

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
#: Trees of ``--baseline`` commits (outside the repository: no test or linter walks them).
BASELINES = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ksidecar-bench" / "baseline"
RESULTS = HERE / "RESULTS.md"


def checkout(commit: str, under: Path) -> Path:
    """The tree of ``commit`` extracted under ``under`` (once per commit), to run its sidecar."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--verify", f"{commit}^{{commit}}"], cwd=HERE, check=True,
                             capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"--baseline {commit}: not a commit here ({exc.stderr.strip()})") from None
    tree = under / sha
    if not (tree / "proxy" / "tools" / "cli.py").is_file():
        tree.mkdir(parents=True, exist_ok=True)
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=HERE, check=True,
                             capture_output=True, text=True).stdout.strip()
        archive = subprocess.run(["git", "archive", sha], cwd=top, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", help="workload names (default: all)")
    parser.add_argument("--quick", action="store_true", help="short runs, one repeat")
    parser.add_argument("--repeats", type=int, help="runs per target (default 3, quick 1)")
    parser.add_argument("--duration", type=float, help="seconds per closed-loop run")
    parser.add_argument("--out", type=Path, default=OUT, help="where JSON and logs go")
    parser.add_argument("--results", choices=("auto", "yes", "no"), default="auto",
                        help="update RESULTS.md (auto: for full runs of every workload)")
    parser.add_argument("--profile", action="store_true",
                        help="profile the sidecar with py-spy instead of comparing")
    parser.add_argument("--profile-seconds", type=float, default=8.0)
    parser.add_argument("--audit", action="store_true",
                        help="also measure a second sidecar with the audit observer on")
    parser.add_argument("--acls", action="store_true",
                        help="also measure a sidecar enforcing 100 Kafka ACLs (sidecar.authorizer=acls)")
    parser.add_argument("--baseline", metavar="COMMIT",
                        help="also measure the sidecar of COMMIT in front of the same broker "
                             "(an A/B of a change: sidecar/baseline)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help="sidecar.workers of every sidecar measured (default 1: one process, like a "
                             "--baseline commit from before the key; 0: one per usable CPU)")
    parser.add_argument("--topics", type=int, help="topics of the cluster-size workloads (1000)")
    parser.add_argument("--partitions", type=int, help="partitions per topic of the cluster-size workloads (10)")
    parser.add_argument("--list", action="store_true", help="list workloads and exit")
    args = parser.parse_args(argv)

    if args.workers < 0:
        parser.error("--workers: 0 (one per usable CPU) or more")
    if args.list:
        for w in WORKLOADS:
            print(f"{w.name:24} {w.title}")
        return 0
    unknown = [n for n in args.workloads if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; see --list")
    chosen = [BY_NAME[n] for n in args.workloads] if args.workloads else list(WORKLOADS)
    settings = QUICK if args.quick else Settings()
    for key, value in (("duration", args.duration), ("cluster_topics", args.topics),
                       ("cluster_partitions", args.partitions)):
        if value is not None:
            settings = Settings(**{**settings.__dict__, key: value})
    stamp = time.strftime("%Y%m%d-%H%M%S")

    if args.profile:
        for summary in profile_workloads(chosen, settings, args.profile_seconds,
                                         args.out / "profile"):
            print(f"== {summary}")
            print(summary.read_text())
        return 0

    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    baseline = checkout(args.baseline, BASELINES) if args.baseline else None
    results = run_workloads(chosen, settings, repeats, args.out / "logs" / stamp, audit=args.audit,
                            acls=args.acls, baseline=baseline, workers=args.workers)
    command = command_line()
    document = write_json(args.out / f"bench-{stamp}.json", results, settings, repeats, command,
                          baseline=baseline.name[:7] if baseline is not None else None,
                          workers=args.workers)
    (args.out / "latest.json").write_text((args.out / f"bench-{stamp}.json").read_text())
    section = markdown(document, results)
    print()
    print(section)
    update = args.results == "yes" or (
        args.results == "auto" and not args.quick and not args.workloads
    )
    if update:
        update_results_md(RESULTS, section)
        print(f"updated {RESULTS}")
    missed = [t for t in document["targets"] if t["met"] is False]
    if missed:
        print(f"{len(missed)} target(s) missed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
