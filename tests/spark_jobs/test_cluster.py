"""The report's jobs on a real standalone cluster (a master and a worker started from the
pyspark wheel) give what they give in local mode.

The jobs go to the cluster as a user would send them (docs/spark_jobs.md, "Running"): the
whole report as one application, ``spark-submit --master spark://… --py-files
ksidecar-jobs.zip spark_jobs/report.py``, and one job file on its own,
``spark-submit … spark_jobs/traffic.py`` with ``file://`` paths; each application has the
cluster's defaults (200 shuffle partitions, one executor with the worker's two cores). The same
jobs run over the same small audit in the tests' local session. Every table must come out the
same, row for row, and its totals must be those counted from the audit files with pyarrow (not
by the code under test).
"""

from __future__ import annotations

import argparse
import importlib
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from proxy.tools.rig.spark import SparkCluster, start_cluster
from spark_jobs import options, report, synthetic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 2, 1, tzinfo=UTC)
AS_OF = "2026-02-03T00:00:00+00:00"  # fixed: idle days must not depend on when each side ran
#: The output tables, per job: Parquet directories, and the CSV file.
TABLES = {
    "traffic": ("topics", "api_keys"),
    "unused_topics": ("topics",),
    "cost_attribution": ("shares",),
    "latency_slo": ("latency", "long_polls"),
    "completeness": ("windows",),
    "least_privilege": ("denied", "acls"),
    "client_throttling": ("throttled", "totals"),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A master and a worker (two cores, 1 GB) on loopback.

    One worker, not two: each executor is a JVM of its own (the test ran nine JVMs with two
    workers, six with one), and the executor's Python workers are still processes apart from
    the driver's, which is what a job that leaned on driver state would trip over.
    """
    with start_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=1, cores=2) as running:
        yield running


@pytest.fixture(scope="module")
def audits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small source audit (six hours) and a mirror's (another seed, so windows differ)."""
    root = tmp_path_factory.mktemp("audits")
    shape = synthetic.Shape(topics=12, idle_topics=2, clients=6, principals=3, sidecars=2)
    synthetic.write_audit(root / "source", 6_000, start=START, hours=6, seed=11, shape=shape)
    synthetic.write_audit(root / "mirror", 5_000, start=START, hours=6, seed=12, shape=shape)
    return root / "source", root / "mirror"


def package(directory: Path) -> Path:
    """The jobs as ``--py-files`` wants them: ``spark_jobs`` and the shared schema module."""
    path = directory / "ksidecar-jobs.zip"
    sources = [*sorted((ROOT / "spark_jobs").glob("*.py")),
               ROOT / "observers" / "__init__.py", ROOT / "observers" / "audit_schema.py"]
    with zipfile.ZipFile(path, "w") as zf:
        for source in sources:
            zf.write(source, source.relative_to(ROOT).as_posix())
    return path


def job_args(job: str, source: Path, mirror: Path, out: Path) -> list[str]:
    argv = ["--audit", source.as_uri(), "--out", (out / job).as_uri()]
    if job == "unused_topics":
        argv += ["--as-of", AS_OF]
    if job == "completeness":
        argv += ["--mirror", mirror.as_uri()]
    return argv


def rows(path: Path) -> list[tuple[Any, ...]]:
    """A table's rows, sorted (ties in a job's own order may fall either way)."""
    table = pq.read_table(path)
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def total(path: Path, column: str) -> int:
    return int(pc.sum(pq.read_table(path)[column]).as_py() or 0)


def audit_table(root: Path) -> pa.Table:
    return ds.dataset(sorted(root.glob("dt=*/hour=*/*.parquet")), format="parquet").to_table()


# Two applications queue for the cluster's two cores while the local runs go on: about a
# minute, up to three on a busy machine.
@pytest.mark.timeout(600)
def test_the_report_jobs_on_a_standalone_cluster_match_local_mode(
    cluster: SparkCluster, spark: SparkSession, audits: tuple[Path, Path], tmp_path: Path
) -> None:
    source, mirror = audits
    zipped = package(tmp_path)
    on_cluster, local, alone = tmp_path / "cluster", tmp_path / "local", tmp_path / "alone"
    report_argv = ["--audit", source.as_uri(), "--out", str(on_cluster), "--as-of", AS_OF,
                   "--mirror", mirror.as_uri()]

    # Both at once: the master runs one while the other's driver starts, and the local runs
    # go on meanwhile.
    with ThreadPoolExecutor(2) as pool:
        whole = pool.submit(cluster.submit, ROOT / "spark_jobs" / "report.py", report_argv,
                            py_files=[zipped])
        one = pool.submit(cluster.submit, ROOT / "spark_jobs" / "traffic.py",
                          job_args("traffic", source, mirror, alone), py_files=[zipped])
        for job in report.JOBS:
            parser = argparse.ArgumentParser()
            options.add_report(parser)
            args = parser.parse_args(job_args(job, source, mirror, local))
            importlib.import_module(f"spark_jobs.{job}").run(spark, args)
        whole.result().check()
        one.result().check()

    # They ran on the cluster: two finished applications, each given the worker's two cores.
    apps = {a["name"]: a for a in cluster.status()["completedapps"]}
    for name in ("ksidecar-audit-report", "ksidecar-traffic"):
        assert (apps[name]["state"], apps[name]["cores"]) == ("FINISHED", 2)
    assert (on_cluster / "index.html").is_file()  # the report rendered in the driver

    data = on_cluster / "data"
    for job, tables in TABLES.items():
        for table in tables:
            assert rows(data / job / table) == rows(local / job / table), f"{job}/{table}"
    for table in TABLES["traffic"]:
        assert rows(alone / "traffic" / table) == rows(local / "traffic" / table), f"alone/{table}"
    csv = "cost_attribution/cost_attribution.csv"
    assert (data / csv).read_text() == (local / csv).read_text()

    # Totals counted from the audit files themselves.
    audit = audit_table(source)
    produce = audit.filter(pc.and_(pc.equal(audit["api_key"], 0), pc.is_valid(audit["topic"])))
    fetch = audit.filter(pc.and_(pc.equal(audit["api_key"], 1), pc.is_valid(audit["topic"])))
    appended = produce.filter(pc.fill_null(pc.equal(produce["error_code"], 0), True))
    first = audit.filter(audit["first_row"])
    for out in (data, local):
        assert total(out / "traffic" / "topics", "records_in") == pc.sum(produce["records"]).as_py()
        assert total(out / "traffic" / "topics", "bytes_out") == pc.sum(fetch["bytes"]).as_py()
        assert total(out / "traffic" / "api_keys", "requests") == first.num_rows
        assert total(out / "cost_attribution" / "shares", "bytes_in") == pc.sum(produce["bytes"]).as_py()
        assert total(out / "completeness" / "windows", "source_records") == pc.sum(appended["records"]).as_py()
        inventory = pq.read_table(out / "unused_topics" / "topics")
        assert inventory.num_rows == 14  # 12 used topics and 2 idle ones, all reported
