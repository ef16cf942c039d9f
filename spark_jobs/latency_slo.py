"""Latency SLO: p50/p95/p99 latency and the share of requests over an SLO, per hour.

    python -m spark_jobs.latency_slo --audit PATH --out PATH [--slo-ms 100] [--accuracy 10000]
        [--since T] [--until T] [--sidecars 1,2]

Writes the Parquet table ``latency`` under ``--out``, one row per (``hour``, ``api_key``,
``api_name``, ``topic``, ``principal``); ``topic`` is null for APIs other than Produce and
Fetch. A Produce or Fetch request counts once for each topic it names, with its one latency
(the sidecar measures the request, not each partition).

| column | meaning |
|---|---|
| ``requests`` | requests in the group |
| ``no_response`` | of those, requests with no latency: no response was sent (Produce with acks=0) |
| ``p50_us``, ``p95_us``, ``p99_us`` | latency percentiles in µs, over requests with a response |
| ``over_slo`` | requests whose latency exceeded ``slo_ms`` |
| ``share_over_slo`` | ``over_slo`` / requests with a response (null when none had one) |
| ``slo_ms`` | the SLO the row was computed against |

Requests without a response are left out of the percentiles and of the SLO share (there is
no latency to judge) and counted in ``no_response``. Error responses count like any other:
the client waited for them just the same.

Percentiles come from Spark's ``percentile_approx`` (Greenwald–Khanna): the result is a
latency that occurred, the smallest one with at least the given fraction of the group at or
below it (nearest rank, no interpolation). Its rank error is at most ``1/accuracy`` of the
group's size, and a group far smaller than ``accuracy`` (default 10,000) gets the exact
nearest-rank value: the tests check exact values on groups of a few requests.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import common, options

KEYS = ("hour", "api_key", "api_name", "topic", "principal")
PERCENTILES = (("p50_us", 0.5), ("p95_us", 0.95), ("p99_us", 0.99))
DEFAULT_ACCURACY = options.DEFAULT_ACCURACY


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The audit rows in the requested range."""
    return common.extract_audit(spark, args)


def transform(df: DataFrame, slo_ms: float, accuracy: int = DEFAULT_ACCURACY) -> DataFrame:
    """Latency percentiles and the share over ``slo_ms`` per hour, API, topic and principal."""
    latency = F.col("latency_us")
    slo_us = slo_ms * 1000.0
    quantiles = F.percentile_approx(latency, [q for _, q in PERCENTILES], accuracy)
    over = common.count_where(latency > slo_us)
    grouped = (
        df.dropDuplicates([*common.REQUEST_KEY, "topic"])
        .withColumn("hour", common.hour_of())
        .groupBy(*KEYS)
        .agg(
            F.count(F.lit(1)).alias("requests"),
            common.count_where(latency.isNull()).alias("no_response"),
            quantiles.alias("quantiles"),
            over.alias("over_slo"),
            common.ratio(over, F.count(latency)).alias("share_over_slo"),
        )
    )
    return grouped.select(
        *KEYS, "requests", "no_response",
        *(F.col("quantiles")[i].alias(name) for i, (name, _) in enumerate(PERCENTILES)),
        "over_slo", "share_over_slo", F.lit(float(slo_ms)).alias("slo_ms"),
    )


def load(df: DataFrame, out: str) -> None:
    """Write ``latency`` under ``out``."""
    common.write_table(df, common.join_uri(out, "latency"), KEYS)


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options."""
    load(transform(extract(spark, args), args.slo_ms, args.accuracy), args.out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_latency_slo, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
