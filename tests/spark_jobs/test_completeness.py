"""completeness: records produced per topic and window, source against mirror."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chispa import assert_df_equality

from spark_jobs import completeness
from tests.spark_jobs.rows import FETCH, PRODUCE, at, frame, request

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_windows_compared_and_differences_flagged(spark: SparkSession) -> None:
    source = frame(
        spark,
        request(PRODUCE, "2026-03-01 10:05", [("orders", 0, 30, 3), ("orders", 1, 20, 2)], acks=-1),
        request(PRODUCE, "2026-03-01 10:30", [("orders", 0, 40, 4)], acks=-1),
        request(PRODUCE, "2026-03-01 10:45", [("orders", 0, 70, 7)], acks=-1, error_code=6),  # not appended
        request(PRODUCE, "2026-03-01 11:15", [("orders", 0, 20, 2)], acks=0, error_code=None,
                latency_us=None, response_bytes=None),  # no answer, no known failure: counted
        request(PRODUCE, "2026-03-01 10:20", [("clicks", 0, 30, 3)], acks=1),
        request(FETCH, "2026-03-01 10:50", [("orders", 0, 999, 100)]),
    )
    mirror = frame(
        spark,
        request(PRODUCE, "2026-03-01 10:06", [("src.orders", 0, 90, 9)], acks=-1),
        request(PRODUCE, "2026-03-01 11:16", [("src.orders", 0, 10, 1)], acks=-1),
        request(PRODUCE, "2026-03-01 10:21", [("src.clicks", 0, 30, 3)], acks=-1),
        request(PRODUCE, "2026-03-01 10:00", [("local", 0, 500, 50)], acks=-1),  # not a mirrored topic
        request(PRODUCE, "2026-03-01 12:00", [("src.extra", 0, 10, 1)], acks=-1),
    )

    result = completeness.transform(source, mirror, window_minutes=60, mirror_prefix="src.")

    expected = spark.createDataFrame(
        [
            ("orders", at("2026-03-01 10:00"), at("2026-03-01 11:00"), 9, 9, 0, False),
            ("orders", at("2026-03-01 11:00"), at("2026-03-01 12:00"), 2, 1, 1, True),
            ("clicks", at("2026-03-01 10:00"), at("2026-03-01 11:00"), 3, 3, 0, False),
            ("extra", at("2026-03-01 12:00"), at("2026-03-01 13:00"), 0, 1, -1, True),
        ],
        "topic string, window_start timestamp, window_end timestamp, source_records long, "
        "mirror_records long, difference long, differs boolean",
    )
    assert_df_equality(result, expected, ignore_row_order=True, ignore_nullable=True)


def test_window_length_is_an_option(spark: SparkSession) -> None:
    source = frame(spark, request(PRODUCE, "2026-03-01 10:20", [("t", 0, 10, 4)]))
    mirror = frame(spark, request(PRODUCE, "2026-03-01 10:40", [("t", 0, 10, 4)]))

    result = completeness.transform(source, mirror, window_minutes=30)

    expected = spark.createDataFrame(
        [
            ("t", at("2026-03-01 10:00"), at("2026-03-01 10:30"), 4, 0, 4, True),
            ("t", at("2026-03-01 10:30"), at("2026-03-01 11:00"), 0, 4, -4, True),
        ],
        "topic string, window_start timestamp, window_end timestamp, source_records long, "
        "mirror_records long, difference long, differs boolean",
    )
    assert_df_equality(result, expected, ignore_row_order=True, ignore_nullable=True)
