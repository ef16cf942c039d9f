"""latency_slo: nearest-rank percentiles and the share over the SLO per hour, API, topic, principal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chispa import assert_df_equality

from spark_jobs import latency_slo
from tests.spark_jobs.rows import (
    ALICE,
    BOB,
    FETCH,
    JOIN_GROUP,
    METADATA,
    PRODUCE,
    SYNC_GROUP,
    at,
    frame,
    request,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_percentiles_and_share_over_slo(spark: SparkSession) -> None:
    def produce(time: str, topics: list[str], latency_us: int | None) -> list[dict[str, object]]:
        acks = -1 if latency_us is not None else 0
        return request(PRODUCE, time, [(t, 0, 10, 1) for t in topics], principal=ALICE,
                       latency_us=latency_us, acks=acks)

    df = frame(
        spark,
        produce("2026-03-01 10:01", ["orders", "orders"], 10_000),  # two partitions, one request
        produce("2026-03-01 10:02", ["orders"], 20_000),
        produce("2026-03-01 10:03", ["orders", "clicks"], 30_000),  # counts for both topics
        produce("2026-03-01 10:04", ["orders"], 400_000),
        produce("2026-03-01 10:05", ["orders"], None),  # acks=0: no latency
        request(METADATA, "2026-03-01 10:06", principal=ALICE, latency_us=5_000),
        request(METADATA, "2026-03-01 10:07", principal=ALICE, latency_us=150_000, error_code=3),
        produce("2026-03-01 11:00", ["orders"], None),
    )

    result = latency_slo.transform(df, slo_ms=100)

    ten, eleven = at("2026-03-01 10:00"), at("2026-03-01 11:00")
    # orders at 10: latencies 10, 20, 30, 400 ms; nearest rank: p50 = 2nd, p95 = p99 = 4th.
    expected = spark.createDataFrame(
        [
            (ten, 0, "Produce", "orders", ALICE, 5, 1, 20_000, 400_000, 400_000, 1, 0.25, 100.0),
            (ten, 0, "Produce", "clicks", ALICE, 1, 0, 30_000, 30_000, 30_000, 0, 0.0, 100.0),
            (ten, 3, "Metadata", None, ALICE, 2, 0, 5_000, 150_000, 150_000, 1, 0.5, 100.0),
            (eleven, 0, "Produce", "orders", ALICE, 1, 1, None, None, None, 0, None, 100.0),
        ],
        "hour timestamp, api_key short, api_name string, topic string, principal string, "
        "requests long, no_response long, p50_us long, p95_us long, p99_us long, "
        "over_slo long, share_over_slo double, slo_ms double",
    )
    assert_df_equality(result, expected, ignore_row_order=True, ignore_nullable=True)


def test_long_polls_are_judged_beyond_their_designed_wait_and_reported_apart(spark: SparkSession) -> None:
    def fetch(time: str, latency_us: int, max_wait_ms: int | None = 500, topics: tuple[str, ...] = ("t",)) -> list[dict[str, object]]:
        return request(FETCH, time, [(t, 0, 0, 0) for t in topics], principal=BOB,
                       latency_us=latency_us, max_wait_ms=max_wait_ms)

    df = frame(
        spark,
        fetch("2026-03-01 10:01", 501_000),  # held 500 ms, answered in 1 ms: fine
        fetch("2026-03-01 10:02", 40_000),  # within its wait: all of it may be held, 0 judged
        fetch("2026-03-01 10:03", 750_000, topics=("t", "t")),  # 250 ms past its wait: a breach
        fetch("2026-03-01 10:04", 620_000, max_wait_ms=None),  # schema v1: 500 ms assumed
        request(JOIN_GROUP, "2026-03-01 10:05", principal=BOB, latency_us=3_005_000),
        request(SYNC_GROUP, "2026-03-01 10:06", principal=BOB, latency_us=900_000),
        request(METADATA, "2026-03-01 10:07", principal=BOB, latency_us=300_000),  # slow: a breach
    )

    latency = latency_slo.transform(df, slo_ms=100)
    long_polls = latency_slo.transform_long_polls(df)

    ten = at("2026-03-01 10:00")
    # Fetch judged latencies (beyond the wait): 1, 0, 250, 120 ms -> sorted 0, 1, 120, 250;
    # nearest rank p50 = 2nd = 1 ms, p95 = p99 = 4th = 250 ms; over 100 ms: 250 and 120.
    expected = spark.createDataFrame(
        [
            (ten, 1, "Fetch", "t", BOB, 4, 0, 1_000, 250_000, 250_000, 2, 0.5, 100.0),
            (ten, 3, "Metadata", None, BOB, 1, 0, 300_000, 300_000, 300_000, 1, 1.0, 100.0),
        ],
        "hour timestamp, api_key short, api_name string, topic string, principal string, "
        "requests long, no_response long, p50_us long, p95_us long, p99_us long, "
        "over_slo long, share_over_slo double, slo_ms double",
    )
    assert_df_equality(latency, expected, ignore_row_order=True, ignore_nullable=True)
    # Held: Fetch min(latency, wait) = 500, 40, 500, 500 ms -> p50 = 2nd of (40, 500, 500,
    # 500) = 500; beyond the wait: 1, 0, 250, 120 -> p99 = 250 ms.
    expected_polls = spark.createDataFrame(
        [
            (ten, 1, "Fetch", BOB, 4, 0, 500_000, 500_000, 500_000, 250_000, 500),
            (ten, 11, "JoinGroup", BOB, 1, 0, 3_005_000, 3_005_000, 3_005_000, None, None),
            (ten, 14, "SyncGroup", BOB, 1, 0, 900_000, 900_000, 900_000, None, None),
        ],
        "hour timestamp, api_key short, api_name string, principal string, requests long, "
        "no_response long, held_p50_us long, held_p99_us long, held_max_us long, "
        "beyond_wait_p99_us long, max_wait_ms int",
    )
    assert_df_equality(long_polls, expected_polls, ignore_row_order=True, ignore_nullable=True)
