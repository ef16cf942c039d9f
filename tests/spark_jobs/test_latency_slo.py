"""latency_slo: nearest-rank percentiles and the share over the SLO per hour, API, topic, principal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chispa import assert_df_equality

from spark_jobs import latency_slo
from tests.spark_jobs.rows import ALICE, METADATA, PRODUCE, at, frame, request

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
