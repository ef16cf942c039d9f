"""unused_topics: the inventory from the audit's Metadata rows, last access per topic, and
which went N days without one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chispa import assert_df_equality

from spark_jobs import unused_topics
from tests.spark_jobs.rows import ALICE, FETCH, HEARTBEAT, METADATA, PRODUCE, at, frame, request

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCHEMA = (
    "topic string, partitions int, last_reported timestamp, last_produce timestamp, "
    "last_fetch timestamp, last_access timestamp, idle_days double, unused boolean"
)


def test_topics_reported_by_metadata_and_never_used_are_unused_with_no_list(spark: SparkSession) -> None:
    df = frame(
        spark,
        request(METADATA, "2026-03-01 09:00", inventory={"orders": 3, "clicks": 1, "never": 2}),
        request(METADATA, "2026-03-05 09:00", inventory={"orders": 6, "never": 2}),  # orders grew
        request(PRODUCE, "2026-03-09 12:00", [("orders", 0, 10, 1)], principal=ALICE),
        request(FETCH, "2026-03-01 06:00", [("orders", 0, 10, 1)]),
        request(FETCH, "2026-03-02 00:00", [("clicks", 1, 0, 0)]),  # an empty fetch is an access
        request(PRODUCE, "2026-03-03 00:00", [("payments", 0, 10, 1)]),  # exactly N days ago
        request(PRODUCE, "2026-03-08 00:00", [("typo", 0, 10, 1)], error_code=3),  # refused: still an access
        request(METADATA, "2026-03-09 00:00"),  # no inventory rows (same hour elsewhere)
        request(HEARTBEAT, "2026-03-09 00:00"),
    )

    result = unused_topics.transform(df, None, at("2026-03-10 00:00"), days=7)

    # By hand: "never" was reported twice (last on the 5th, 2 partitions) and never accessed;
    # "clicks" last fetched on the 2nd: 8 days idle; "orders" produced 12 hours ago.
    expected = spark.createDataFrame(
        [
            ("orders", 6, at("2026-03-05 09:00"), at("2026-03-09 12:00"), at("2026-03-01 06:00"),
             at("2026-03-09 12:00"), 0.5, False),
            ("clicks", 1, at("2026-03-01 09:00"), None, at("2026-03-02 00:00"),
             at("2026-03-02 00:00"), 8.0, True),
            ("never", 2, at("2026-03-05 09:00"), None, None, None, None, True),
            ("payments", None, None, at("2026-03-03 00:00"), None, at("2026-03-03 00:00"), 7.0, False),
            ("typo", None, None, at("2026-03-08 00:00"), None, at("2026-03-08 00:00"), 2.0, False),
        ],
        SCHEMA,
    )
    assert_df_equality(result, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_supplied_list_adds_topics_an_old_audit_never_reported(spark: SparkSession) -> None:
    df = frame(spark, request(FETCH, "2026-03-01 00:00", [("old", 0, 5, 1)]))
    inventory = spark.createDataFrame([("legacy",), ("old",)], "topic string")

    result = unused_topics.transform(df, inventory, at("2026-03-01 18:00"), days=1)

    expected = spark.createDataFrame(
        [
            ("old", None, None, None, at("2026-03-01 00:00"), at("2026-03-01 00:00"), 0.75, False),
            ("legacy", None, None, None, None, None, None, True),
        ],
        SCHEMA,
    )
    assert_df_equality(result, expected, ignore_row_order=True, ignore_nullable=True)
