"""End to end: real client traffic through real sidecars, their audit Parquet, every job, the page.

Sidecar A (audit dir A) fronts the source traffic: a topic is created, ``N`` records are
produced and consumed by a real client (confluent-kafka). A "mirror" then copies what was
consumed into ``mirror.<topic>`` through sidecar B (audit dir B), as MirrorMaker would into
another cluster. Both sidecars are stopped (SIGTERM flushes their audit), and the report
runs over audit A with audit B as the mirror. The outputs must agree with the workload: ``N``
records in and out of the topic, the same bytes fetched as produced, every record mirrored.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from observers.audit_schema import ANONYMOUS
from proxy.tools.demo import consume, create_topic, produce
from proxy.tools.rig.sidecar import start_sidecar
from spark_jobs import report
from tests.spark_jobs.report_check import parse, summary

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from proxy.tools.rig.tansu import TansuServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 300
PARTITIONS = 3


def audit_keys(directory: Path) -> dict[str, str]:
    return {
        "observer.class.names": "audit",
        "observer.audit.dir": str(directory),
        "observer.audit.flush.interval.ms": "200",
    }


def only(table: pa.Table, topic: str) -> pa.Table:
    return table.filter(pc.equal(table["topic"], topic))


def total(table: pa.Table, column: str) -> int:
    return int(pc.sum(table[column]).as_py() or 0)


def test_workload_through_the_sidecar_to_the_report(
    tansu: TansuServer, spark: SparkSession, tmp_path: Path
) -> None:
    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    values = [f"{i:05d}".encode() * 20 for i in range(N)]  # 100 bytes each
    audit, mirror_audit = tmp_path / "audit-a", tmp_path / "audit-b"
    with start_sidecar(tmp_path, tansu.bootstrap, name="sidecar-a", keys=audit_keys(audit)) as a:
        create_topic(a.bootstrap, topic, PARTITIONS)
        assert produce(a.bootstrap, topic, values) == N
        consumed, _ = consume(a.bootstrap, topic, f"g-{topic}", PARTITIONS, N)
        assert sorted(consumed) == sorted(values)
        with start_sidecar(tmp_path, tansu.bootstrap, name="sidecar-b",
                           keys=audit_keys(mirror_audit)) as b:
            create_topic(b.bootstrap, f"mirror.{topic}", PARTITIONS)
            assert produce(b.bootstrap, f"mirror.{topic}", consumed) == N
    out = tmp_path / "report"

    index = report.run_all(audit, out, spark=spark, mirror=str(mirror_audit),
                           mirror_prefix="mirror.")

    data = out / "data"
    flows = only(pq.read_table(data / "traffic" / "topics"), topic)
    assert total(flows, "records_in") == N
    assert total(flows, "records_out") == N
    # Stored batches come back as they were produced: as many bytes out as in, at least the values.
    assert total(flows, "bytes_in") == total(flows, "bytes_out") >= N * 100
    assert set(flows["principal"].to_pylist()) == {ANONYMOUS}

    apis = pq.read_table(data / "traffic" / "api_keys")
    requests = {n: total(apis.filter(pc.equal(apis["api_name"], n)), "requests") for n in ("Produce", "Fetch")}
    assert requests["Produce"] >= 1 and requests["Fetch"] >= 1

    shares = only(pq.read_table(data / "cost_attribution" / "shares"), topic).to_pylist()
    assert [(r["principal"], r["share_bytes_in"], r["share_bytes_out"]) for r in shares] == [
        (ANONYMOUS, 1.0, 1.0)
    ]

    latency = only(pq.read_table(data / "latency_slo" / "latency"), topic)
    assert latency.num_rows >= 1 and None not in latency["p99_us"].to_pylist()

    unused = only(pq.read_table(data / "unused_topics" / "topics"), topic).to_pylist()
    assert [r["unused"] for r in unused] == [False]
    # The inventory comes from the Metadata responses the sidecar saw: 3 partitions.
    assert [r["partitions"] for r in unused] == [PARTITIONS]

    windows = only(pq.read_table(data / "completeness" / "windows"), topic)
    # Windows may split source and mirror differently around a boundary; the totals may not.
    assert total(windows, "source_records") == total(windows, "mirror_records") == N
    assert total(windows, "difference") == 0

    page = parse(index)
    assert sorted(page.charts) == sorted(report.CHARTS)
    assert set(report.TABLES) <= set(page.tables) | page.empty
    assert summary(page, "records in") == f"{N:,}"
