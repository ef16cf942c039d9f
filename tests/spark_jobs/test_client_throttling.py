"""client_throttling: per principal, client id and API, the responses a client quota
throttled, with their total and longest throttle time; and the report's section."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from chispa import assert_df_equality

from observers.audit_schema import COLUMNS, VERSION_KEY, schema_for
from spark_jobs import client_throttling, options, report
from tests.spark_jobs.rows import (
    ALICE,
    BOB,
    CAROL,
    FETCH,
    JOIN_GROUP,
    METADATA,
    OFFSET_COMMIT,
    PRODUCE,
    at,
    frame,
    request,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCHEMA = (
    "principal string, client_id string, api_key short, api_name string, responses long, "
    "throttled long, share_throttled double, throttle_ms_total long, throttle_ms_max int, "
    "first_throttled timestamp, last_throttled timestamp"
)


def audit(spark: SparkSession) -> DataFrame:
    return frame(
        spark,
        # alice's producer: a request over two partitions counts once; 0 is not throttled;
        # acks=0 has no response and no throttle time.
        request(PRODUCE, "2026-03-01 10:00", [("orders", 0, 300, 3), ("orders", 1, 100, 1)],
                principal=ALICE, client_id="p1", acks=-1, throttle_ms=200),
        request(PRODUCE, "2026-03-01 10:05", [("orders", 0, 300, 3)], principal=ALICE, client_id="p1",
                acks=-1, throttle_ms=0),
        request(PRODUCE, "2026-03-01 10:10", [("orders", 2, 300, 3)], principal=ALICE, client_id="p1",
                acks=-1, throttle_ms=800),
        request(PRODUCE, "2026-03-01 10:11", [("orders", 2, 300, 3)], principal=ALICE, client_id="p1",
                acks=0, latency_us=None, response_bytes=None, error_code=None, throttle_ms=None),
        # bob's consumer c1 over two hours; a second consumer of his sent no client.id.
        request(FETCH, "2026-03-01 10:01", [("orders", 0, 500, 5), ("clicks", 0, 10, 1)], principal=BOB,
                client_id="c1", throttle_ms=1500),
        request(FETCH, "2026-03-01 11:02", [("orders", 0, 500, 5)], principal=BOB, client_id="c1",
                throttle_ms=500),
        request(FETCH, "2026-03-01 11:03", [("orders", 0, 500, 5)], principal=BOB, client_id="c1",
                throttle_ms=0),
        request(FETCH, "2026-03-01 10:30", [("orders", 1, 500, 5)], principal=BOB, client_id=None,
                throttle_ms=100),
        # carol: a throttled JoinGroup; Metadata with inventory rows (not requests), not throttled.
        request(JOIN_GROUP, "2026-03-01 10:20", principal=CAROL, throttle_ms=50),
        request(METADATA, "2026-03-01 10:21", principal=CAROL, inventory={"orders": 3, "clicks": 1},
                throttle_ms=0),
        # A response without the field (or a row from before schema version 3).
        request(OFFSET_COMMIT, "2026-03-01 10:22", principal=CAROL, throttle_ms=None),
    )


def test_throttled_responses_per_principal_client_and_api(spark: SparkSession) -> None:
    expected = spark.createDataFrame([
        (ALICE, "p1", PRODUCE, "Produce", 3, 2, 0.666667, 1000, 800, at("2026-03-01 10:00"), at("2026-03-01 10:10")),
        (BOB, "c1", FETCH, "Fetch", 3, 2, 0.666667, 2000, 1500, at("2026-03-01 10:01"), at("2026-03-01 11:02")),
        (BOB, None, FETCH, "Fetch", 1, 1, 1.0, 100, 100, at("2026-03-01 10:30"), at("2026-03-01 10:30")),
        (CAROL, "app", JOIN_GROUP, "JoinGroup", 1, 1, 1.0, 50, 50, at("2026-03-01 10:20"), at("2026-03-01 10:20")),
    ], SCHEMA)

    assert_df_equality(client_throttling.transform(audit(spark)), expected,
                       ignore_row_order=True, ignore_nullable=True)


def test_totals_tell_nothing_throttled_from_nothing_recorded(spark: SparkSession) -> None:
    aggregated = client_throttling.aggregate(audit(spark))
    (totals,) = client_throttling.totals_rows(aggregated).collect()
    # 11 requests; 9 answers carried a throttle time (not acks=0, not OffsetCommit); 6 throttled.
    assert totals.asDict() == {"requests": 11, "recorded": 9, "throttled": 6, "throttle_ms_total": 3150}

    unthrottled = frame(spark, request(PRODUCE, "2026-03-01 10:00", [("t", 0, 1, 1)], throttle_ms=0))
    (none,) = client_throttling.totals_rows(client_throttling.aggregate(unthrottled)).collect()
    assert none.asDict() == {"requests": 1, "recorded": 1, "throttled": 0, "throttle_ms_total": 0}
    assert client_throttling.transform(unthrottled).count() == 0


# -- files of every schema version, the job's command line, the report's section ------------


def write(root: Path, version: int, rows: list[dict[str, Any]], name: str, *, throttle_column: bool = True) -> None:
    """``rows`` as one audit file of ``version`` (a version 3 file without the newest column:
    one written before throttle_time_ms was added) in its hour's partition."""
    schema = schema_for(version)
    if not throttle_column:
        schema = pa.schema([f for f in schema if f.name != "throttle_time_ms"], metadata={VERSION_KEY: str(version)})
    moment: datetime = rows[0]["time"]
    directory = root / f"dt={moment:%Y-%m-%d}" / f"hour={moment:%H}"
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{c: r[c] for c in schema.names} for r in rows], schema=schema)
    pq.write_table(table, directory / f"part-{name}.parquet")


def run(spark: SparkSession, audit_dir: Path, out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    args = options.job_parser("", options.add_nothing).parse_args(["--audit", str(audit_dir), "--out", str(out)])
    client_throttling.run(spark, args)
    throttled = pq.read_table(out / "throttled").to_pylist()
    (totals,) = pq.read_table(out / "totals").to_pylist()
    return throttled, totals


def test_old_files_without_the_column_read_as_not_recorded(spark: SparkSession, tmp_path: Path) -> None:
    audit_dir = tmp_path / "audit"
    old = request(PRODUCE, "2026-03-01 09:00", [("orders", 0, 10, 1)], principal=ALICE, client_id="p1")
    write(audit_dir, 2, old, "v2")
    early3 = request(FETCH, "2026-03-01 09:10", [("orders", 0, 10, 1)], principal=BOB, client_id="c1")
    write(audit_dir, 3, early3, "v3-early", throttle_column=False)
    out = tmp_path / "report"
    throttled, totals = run(spark, audit_dir, out / "data" / "client_throttling")
    assert throttled == []
    assert totals == {"requests": 2, "recorded": 0, "throttled": 0, "throttle_ms_total": 0}
    # The report says nothing was recorded, not that nothing was throttled.
    text = report.render(out, export=False).read_text()
    assert "no throttle time recorded" in _verdict(text)

    # With a current file beside the old ones: the old rows count as requests only.
    now = request(FETCH, "2026-03-01 09:20", [("orders", 0, 10, 1)], principal=BOB, client_id="c1", throttle_ms=700)
    write(audit_dir, 3, now, "v3")
    throttled, totals = run(spark, audit_dir, tmp_path / "out2")
    assert [(r["principal"], r["client_id"], r["api_name"], r["responses"], r["throttled"], r["throttle_ms_total"],
             r["throttle_ms_max"]) for r in throttled] == [(BOB, "c1", "Fetch", 1, 1, 700, 700)]
    assert totals == {"requests": 3, "recorded": 1, "throttled": 1, "throttle_ms_total": 700}


def test_the_report_section_lists_who_was_throttled(spark: SparkSession, tmp_path: Path) -> None:
    audit_dir, out = tmp_path / "audit", tmp_path / "report"
    rows = [row for req in (
        request(PRODUCE, "2026-03-01 10:00", [("orders", 0, 10, 1)], principal=ALICE, client_id="p1", acks=1,
                throttle_ms=1200),
        request(PRODUCE, "2026-03-01 10:01", [("orders", 0, 10, 1)], principal=ALICE, client_id="p1", acks=1,
                throttle_ms=0),
        request(FETCH, "2026-03-01 10:02", [("orders", 0, 10, 1)], principal=BOB, client_id="c1", throttle_ms=0),
    ) for row in req]
    write(audit_dir, 3, rows, "v3")
    run(spark, audit_dir, out / "data" / "client_throttling")
    text = report.render(out, export=False).read_text()
    assert "1 of 3 responses were throttled, 1,200.0 ms in all, over 1 client(s)" in _verdict(text)
    table = text[text.index('id="throttled"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr data-principal=") == 1 and "User:alice" in table and "Produce (0)" in table
    assert 'id="chart-throttling"' in text and 'data-empty="true">No throttled request' not in text

    # Only unthrottled answers: "no throttled request", and no chart.
    write(audit_dir, 3, rows[1:], "v3")
    run(spark, audit_dir, out / "data" / "client_throttling")
    text = report.render(out, export=False).read_text()
    assert "No throttled request: none of the 2 responses" in _verdict(text)
    assert '<p class="empty" id="throttled" data-empty="true">No throttled request.</p>' in text


def _verdict(text: str) -> str:
    start = text.index('id="throttling-verdict">') + len('id="throttling-verdict">')
    return text[start:text.index("</p>", start)]


def test_the_job_is_in_the_report_and_columns_are_the_documented_ones() -> None:
    assert "client_throttling" in report.JOBS and "throttled" in report.TABLES and "throttling" in report.CHARTS
    assert "throttle_time_ms" in COLUMNS
    assert [part.split()[0] for part in SCHEMA.split(",")] == list(client_throttling.COLUMNS)
