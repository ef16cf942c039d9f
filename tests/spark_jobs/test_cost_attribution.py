"""cost_attribution: each principal's share of a topic's bytes in, bytes out and requests."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING

from chispa import assert_df_equality

from spark_jobs import cost_attribution
from tests.spark_jobs.rows import ALICE, BOB, CAROL, FETCH, METADATA, PRODUCE, frame, request

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def audit(spark: SparkSession) -> DataFrame:
    return frame(
        spark,
        # One request over two partitions of a topic is one request.
        request(PRODUCE, "2026-03-01 10:00", [("orders", 0, 300, 3), ("orders", 1, 100, 1)], principal=ALICE),
        request(PRODUCE, "2026-03-01 10:01", [("orders", 0, 200, 2)], principal=ALICE),
        request(PRODUCE, "2026-03-01 10:02", [("orders", 2, 200, 2)], principal=BOB),
        # One request over two topics counts once on each.
        request(FETCH, "2026-03-01 10:03", [("orders", 0, 500, 5), ("clicks", 0, 100, 1)], principal=BOB),
        request(FETCH, "2026-03-01 10:04", [("orders", 1, 500, 5)], principal=CAROL, sidecar=2),
        request(METADATA, "2026-03-01 10:05", principal=ALICE),
    )


def test_shares_per_topic_and_principal(spark: SparkSession) -> None:
    expected = spark.createDataFrame(
        [
            ("orders", ALICE, 600, 0.75, 0, 0.0, 2, 0.4),
            ("orders", BOB, 200, 0.25, 500, 0.5, 2, 0.4),
            ("orders", CAROL, 0, 0.0, 500, 0.5, 1, 0.2),
            # Nothing was produced to clicks: no share of bytes in to speak of.
            ("clicks", BOB, 0, None, 100, 1.0, 1, 1.0),
        ],
        "topic string, principal string, bytes_in long, share_bytes_in double, "
        "bytes_out long, share_bytes_out double, requests long, share_requests double",
    )

    assert_df_equality(cost_attribution.transform(audit(spark)), expected,
                       ignore_row_order=True, ignore_nullable=True)


def test_load_writes_one_csv_a_spreadsheet_opens(spark: SparkSession, tmp_path: Path) -> None:
    cost_attribution.load(cost_attribution.transform(audit(spark)), str(tmp_path))

    with open(tmp_path / "cost_attribution.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [
        ["topic", "principal", "bytes_in", "share_bytes_in", "bytes_out", "share_bytes_out",
         "requests", "share_requests"],
        ["clicks", BOB, "0", "", "100", "1.0", "1", "1.0"],
        ["orders", ALICE, "600", "0.75", "0", "0.0", "2", "0.4"],
        ["orders", BOB, "200", "0.25", "500", "0.5", "2", "0.4"],
        ["orders", CAROL, "0", "0.0", "500", "0.5", "1", "0.2"],
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cost_attribution.csv", "shares"]
