"""Client throttling: who was throttled by client quotas, how often and for how long.

    python -m spark_jobs.client_throttling --audit PATH --out PATH [--since T] [--until T]
        [--sidecars 1,2]

A response over a client quota (``producer_byte_rate``, ``consumer_byte_rate``) carries a
``ThrottleTimeMs`` above 0, and the client's connection is muted for that long (KIP-219).
The audit records that value as ``throttle_time_ms`` (schema version 3, written once
``ksidecar.audit.format`` is finalized at 1): the larger of the broker's and the sidecar's.
Each request counts once (its ``first_row``); inventory rows are not requests.

``throttled``: one row per ``principal``, ``client_id`` (null when the client sent none),
``api_key`` and ``api_name`` with at least one throttled response:

| column | meaning |
|---|---|
| ``responses`` | the group's responses that carried a throttle time (0 or more) |
| ``throttled`` | those whose throttle time was above 0 |
| ``share_throttled`` | ``throttled`` / ``responses`` (0–1, 6 decimals) |
| ``throttle_ms_total`` | the sum of their throttle times, ms |
| ``throttle_ms_max`` | the largest, ms |
| ``first_throttled``, ``last_throttled`` | when the first and the last of them were received |

Most throttle time first. ``totals``: one row over everything read: ``requests``,
``recorded`` (requests whose response carried a throttle time: none in files before
schema version 3, nor for a response without the field, such as Produce v0, or without
a response), ``throttled`` and ``throttle_ms_total``; so "nothing throttled" and "nothing
recorded" can be told apart.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import common, options

KEYS = ("principal", "client_id", "api_key", "api_name")
COLUMNS = (
    *KEYS, "responses", "throttled", "share_throttled", "throttle_ms_total", "throttle_ms_max",
    "first_throttled", "last_throttled",
)
TOTALS = ("requests", "recorded", "throttled", "throttle_ms_total")


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The audit rows in the requested range."""
    return common.extract_audit(spark, args)


def aggregate(df: DataFrame) -> DataFrame:
    """Per principal, client id and API, over every request (first rows only, inventory rows
    excluded): ``requests``, and the columns of ``throttled`` before the share."""
    throttle = F.col("throttle_time_ms")
    throttled = throttle > 0
    return (
        df.where(F.col("first_row"))
        .select(*KEYS, "time", "throttle_time_ms")
        .groupBy(*KEYS)
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.count(throttle).alias("responses"),
            common.count_where(throttled).alias("throttled"),
            common.sum_where(throttled, "throttle_time_ms").alias("throttle_ms_total"),
            F.max(F.when(throttled, throttle)).alias("throttle_ms_max"),
            F.min(F.when(throttled, F.col("time"))).alias("first_throttled"),
            F.max(F.when(throttled, F.col("time"))).alias("last_throttled"),
        )
    )


def throttled_rows(aggregated: DataFrame) -> DataFrame:
    """The groups of :func:`aggregate` with a throttled response, as the ``throttled`` table."""
    return aggregated.where(F.col("throttled") > 0).select(
        *KEYS, "responses", "throttled",
        F.round(common.ratio(F.col("throttled"), F.col("responses")), 6).alias("share_throttled"),
        "throttle_ms_total", "throttle_ms_max", "first_throttled", "last_throttled",
    )


def totals_rows(aggregated: DataFrame) -> DataFrame:
    """The ``totals`` table: one row summing :func:`aggregate` (zeros when it is empty)."""
    return aggregated.agg(
        *(F.coalesce(F.sum(c), F.lit(0)).cast("long").alias(c)
          for c in ("requests", "responses", "throttled", "throttle_ms_total")),
    ).withColumnRenamed("responses", "recorded")


def transform(df: DataFrame) -> DataFrame:
    """The ``throttled`` table of the audit rows ``df``."""
    return throttled_rows(aggregate(df))


def load(throttled: DataFrame, totals: DataFrame, out: str) -> None:
    """Write ``throttled`` (most throttle time first) and ``totals`` under ``out``."""
    order = [F.desc("throttle_ms_total"), F.asc("principal"), F.asc_nulls_first("client_id"),
             F.asc("api_key")]
    common.write_table(throttled, common.join_uri(out, "throttled"), order)
    common.write_table(totals, common.join_uri(out, "totals"))


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options: one pass over the audit, whose small
    aggregate is kept for the two tables written from it."""
    aggregated = aggregate(extract(spark, args)).persist()
    try:
        load(throttled_rows(aggregated), totals_rows(aggregated), args.out)
    finally:
        aggregated.unpersist()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_nothing, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
