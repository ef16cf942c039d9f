"""unused_topics: last access per inventory topic and which went N days without one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chispa import assert_df_equality

from spark_jobs import unused_topics
from tests.spark_jobs.rows import ALICE, FETCH, HEARTBEAT, METADATA, PRODUCE, at, frame, request

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCHEMA = (
    "topic string, last_produce timestamp, last_fetch timestamp, last_access timestamp, "
    "idle_days double, unused boolean"
)


def test_idle_topics_since_last_produce_or_fetch(spark: SparkSession) -> None:
    df = frame(
        spark,
        request(PRODUCE, "2026-03-09 12:00", [("orders", 0, 10, 1)], principal=ALICE),
        request(FETCH, "2026-03-01 06:00", [("orders", 0, 10, 1)]),
        request(FETCH, "2026-03-02 00:00", [("clicks", 1, 0, 0)]),  # an empty fetch is an access
        request(PRODUCE, "2026-03-03 00:00", [("payments", 0, 10, 1)]),  # exactly N days ago
        request(PRODUCE, "2026-03-08 00:00", [("typo", 0, 10, 1)], error_code=3),  # refused: still an access
        request(METADATA, "2026-03-09 00:00"),
        request(HEARTBEAT, "2026-03-09 00:00"),
    )
    inventory = spark.createDataFrame([("legacy",), ("orders",)], "topic string")

    result = unused_topics.transform(df, inventory, at("2026-03-10 00:00"), days=7)

    expected = spark.createDataFrame(
        [
            ("orders", at("2026-03-09 12:00"), at("2026-03-01 06:00"), at("2026-03-09 12:00"), 0.5, False),
            ("clicks", None, at("2026-03-02 00:00"), at("2026-03-02 00:00"), 8.0, True),
            ("payments", at("2026-03-03 00:00"), None, at("2026-03-03 00:00"), 7.0, False),
            ("typo", at("2026-03-08 00:00"), None, at("2026-03-08 00:00"), 2.0, False),
            ("legacy", None, None, None, None, True),
        ],
        SCHEMA,
    )
    assert_df_equality(result, expected, ignore_row_order=True, ignore_nullable=True)


def test_without_inventory_only_accessed_topics_are_listed(spark: SparkSession) -> None:
    df = frame(spark, request(FETCH, "2026-03-01 00:00", [("old", 0, 5, 1)]))

    result = unused_topics.transform(df, None, at("2026-03-01 18:00"), days=1)

    expected = spark.createDataFrame(
        [("old", None, at("2026-03-01 00:00"), at("2026-03-01 00:00"), 0.75, False)], SCHEMA
    )
    assert_df_equality(result, expected, ignore_row_order=True, ignore_nullable=True)
