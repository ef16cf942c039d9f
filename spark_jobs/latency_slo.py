"""Latency SLO: p50/p95/p99 latency and the share of requests over an SLO, per hour; long
polls measured apart, as what they are.

    python -m spark_jobs.latency_slo --audit PATH --out PATH [--slo-ms 100] [--accuracy 10000]
        [--since T] [--until T] [--sidecars 1,2]

Some requests are held by design before they are answered, and their latency says how
long the client chose to wait, not how slow anything was:

* **JoinGroup** and **SyncGroup** are held until the group's rebalance completes (or the
  leader's assignment arrives): seconds are normal. They are left out of the SLO entirely.
* A **Fetch** may be held up to its ``MaxWaitMs`` when there is nothing to return (the
  audit records it, ``max_wait_ms``; audits of schema version 1 lack it, and
  :data:`DEFAULT_FETCH_WAIT_MS`, Kafka's default ``fetch.max.wait.ms``, stands in). The
  time up to the max wait is *held*; what goes beyond it is *answering*, and only that is
  judged against the SLO. A broker slow to answer a Fetch still shows: its latency runs
  past the wait.
* Everything else is judged on its whole latency. (When the embedded coordinator answers
  groups itself, its held JoinGroup and SyncGroup requests are the same API keys: left out
  the same way.)

Writes two Parquet tables under ``--out``:

``latency`` — one row per (``hour``, ``api_key``, ``api_name``, ``topic``, ``principal``)
of every API but JoinGroup and SyncGroup; ``topic`` is null for APIs other than Produce and
Fetch. A Produce or Fetch request counts once for each topic it names, with its one
latency (the sidecar measures the request, not each partition).

| column | meaning |
|---|---|
| ``requests`` | requests in the group |
| ``no_response`` | of those, requests with no latency: no response was sent (Produce with acks=0) |
| ``p50_us``, ``p95_us``, ``p99_us`` | percentiles in µs of the judged latency (Fetch: beyond its max wait), over requests with a response |
| ``over_slo`` | requests whose judged latency exceeded ``slo_ms`` |
| ``share_over_slo`` | ``over_slo`` / requests with a response (null when none had one) |
| ``slo_ms`` | the SLO the row was computed against |

``long_polls`` — one row per (``hour``, ``api_key``, ``api_name``, ``principal``) of Fetch,
JoinGroup and SyncGroup requests (each request once): ``requests``, ``no_response``,
``held_p50_us``, ``held_p99_us``, ``held_max_us`` (time held by design: the whole latency of
JoinGroup and SyncGroup, a Fetch's latency up to its max wait), ``beyond_wait_p99_us``
(Fetch: latency past its max wait; null for the others) and ``max_wait_ms`` (the largest
max wait asked).

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

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from observers.audit_schema import FETCH_KEY
from spark_jobs import common, options

KEYS = ("hour", "api_key", "api_name", "topic", "principal")
LONG_POLL_KEYS = ("hour", "api_key", "api_name", "principal")
PERCENTILES = (("p50_us", 0.5), ("p95_us", 0.95), ("p99_us", 0.99))
DEFAULT_ACCURACY = options.DEFAULT_ACCURACY

JOIN_GROUP, SYNC_GROUP = 11, 14
#: APIs held until something else happens (a rebalance): their latency is all waiting.
HELD_APIS = (JOIN_GROUP, SYNC_GROUP)
#: The long polls reported apart: the held APIs and Fetch.
LONG_POLL_APIS = (FETCH_KEY, *HELD_APIS)
#: Kafka's default ``fetch.max.wait.ms``: the wait assumed for a Fetch row without
#: ``max_wait_ms`` (audit schema version 1).
DEFAULT_FETCH_WAIT_MS = 500


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The audit rows in the requested range."""
    return common.extract_audit(spark, args)


def held_us() -> Column:
    """Microseconds a request was held by design (module docstring); 0 for other APIs."""
    latency = F.col("latency_us")
    api = F.col("api_key")
    wait_us = F.coalesce(F.col("max_wait_ms"), F.lit(DEFAULT_FETCH_WAIT_MS)).cast("long") * 1000
    return (
        F.when(api.isin(*HELD_APIS), latency)
        .when(api == FETCH_KEY, F.least(latency, wait_us))
        .otherwise(F.lit(0).cast("long"))
    )


def transform(df: DataFrame, slo_ms: float, accuracy: int = DEFAULT_ACCURACY) -> DataFrame:
    """Percentiles of the judged latency and the share over ``slo_ms`` per hour, API, topic
    and principal (JoinGroup and SyncGroup left out; a Fetch judged beyond its max wait)."""
    judged = F.col("latency_us") - held_us()
    slo_us = slo_ms * 1000.0
    quantiles = F.percentile_approx("judged_us", [q for _, q in PERCENTILES], accuracy)
    over = common.count_where(F.col("judged_us") > slo_us)
    grouped = (
        df.where(~F.col("api_key").isin(*HELD_APIS) & F.col("topic_partitions").isNull())
        .select(*common.REQUEST_KEY, "api_key", "api_name", "topic", "principal",
                judged.alias("judged_us"))
        .dropDuplicates([*common.REQUEST_KEY, "topic"])
        .withColumn("hour", common.hour_of())
        .groupBy(*KEYS)
        .agg(
            F.count(F.lit(1)).alias("requests"),
            common.count_where(F.col("judged_us").isNull()).alias("no_response"),
            quantiles.alias("quantiles"),
            over.alias("over_slo"),
            common.ratio(over, F.count("judged_us")).alias("share_over_slo"),
        )
    )
    return grouped.select(
        *KEYS, "requests", "no_response",
        *(F.col("quantiles")[i].alias(name) for i, (name, _) in enumerate(PERCENTILES)),
        "over_slo", "share_over_slo", F.lit(float(slo_ms)).alias("slo_ms"),
    )


def transform_long_polls(df: DataFrame, accuracy: int = DEFAULT_ACCURACY) -> DataFrame:
    """Time held and time beyond the wait of Fetch, JoinGroup and SyncGroup requests, per
    hour, API and principal (each request once)."""
    latency = F.col("latency_us")
    held = F.col("held_us")
    beyond = F.when(F.col("api_key") == FETCH_KEY, latency - held)
    grouped = (
        df.where(F.col("first_row") & F.col("api_key").isin(*LONG_POLL_APIS))
        .withColumn("held_us", held_us())
        .withColumn("hour", common.hour_of())
        .groupBy(*LONG_POLL_KEYS)
        .agg(
            F.count(F.lit(1)).alias("requests"),
            common.count_where(latency.isNull()).alias("no_response"),
            F.percentile_approx(held, [0.5, 0.99], accuracy).alias("held"),
            F.max(held).alias("held_max_us"),
            F.percentile_approx(beyond, 0.99, accuracy).alias("beyond_wait_p99_us"),
            F.max("max_wait_ms").alias("max_wait_ms"),
        )
    )
    return grouped.select(
        *LONG_POLL_KEYS, "requests", "no_response",
        F.col("held")[0].alias("held_p50_us"), F.col("held")[1].alias("held_p99_us"),
        "held_max_us", "beyond_wait_p99_us", "max_wait_ms",
    )


def load(latency: DataFrame, long_polls: DataFrame, out: str) -> None:
    """Write ``latency`` and ``long_polls`` under ``out``."""
    common.write_table(latency, common.join_uri(out, "latency"), KEYS)
    common.write_table(long_polls, common.join_uri(out, "long_polls"), LONG_POLL_KEYS)


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options."""
    df = extract(spark, args)
    load(transform(df, args.slo_ms, args.accuracy),
         transform_long_polls(df, args.accuracy), args.out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_latency_slo, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
