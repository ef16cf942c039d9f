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
JoinGroup, SyncGroup and ShareFetch requests (each request once): ``requests``, ``no_response``,
``held_p50_us``, ``held_p99_us``, ``held_max_us`` (time held by design: the whole latency of
JoinGroup, SyncGroup and ShareFetch, a Fetch's latency up to its max wait), ``beyond_wait_p99_us``
(Fetch: latency past its max wait; null for the others) and ``max_wait_ms`` (the largest
max wait asked).

Requests without a response are left out of the percentiles and of the SLO share (there is
no latency to judge) and counted in ``no_response``. Error responses count like any other:
the client waited for them just the same.

Percentiles come from Spark's ``percentile_approx`` (Greenwald–Khanna), one digest per group:
the result is a latency that occurred, the smallest one with at least the given fraction of
the group at or below it (nearest rank, no interpolation). A group of fewer than
``accuracy/2`` requests (default accuracy 10,000) gets the exact nearest-rank value (the
tests check exact values on groups of a few requests); a larger one may be up to
``n/accuracy`` ranks off, and one rank below ``n = accuracy``.
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

JOIN_GROUP, SYNC_GROUP, SHARE_FETCH = 11, 14, 78
#: APIs held until something else happens (a rebalance; for ShareFetch, records to acquire,
#: up to its MaxWaitMs): their latency is all waiting.
HELD_APIS = (JOIN_GROUP, SYNC_GROUP, SHARE_FETCH)
#: The long polls reported apart: the held APIs and Fetch.
LONG_POLL_APIS = (FETCH_KEY, *HELD_APIS)
#: Kafka's default ``fetch.max.wait.ms``: the wait assumed for a Fetch row without
#: ``max_wait_ms`` (audit schema version 1).
DEFAULT_FETCH_WAIT_MS = 500
#: One row per request and topic: what tells two of them apart, and what they carry.
REQUEST_COLUMNS = (
    *common.REQUEST_KEY, "topic", "hour", "api_key", "api_name", "principal", "latency_us",
    "max_wait_ms",
)
#: The rows of a request share these, and so do the rows of each output group: the rows are
#: shuffled once, by them, and everything after happens within a task.
CLUSTER_KEYS = ("hour", "api_key", "principal")
#: ``percentile_approx`` keeps one digest per group in a hash map, and Spark falls back to
#: sorting every input row by group once a task holds more than 128 groups (the default
#: ``spark.sql.objectHashAggregate.sortBased.fallbackThreshold``); a day of audit has tens
#: of thousands of groups. A small group's digest is a few hundred bytes plus 8 bytes a
#: latency, so a task's map stays within its input's size well past this many groups.
OBJECT_HASH_GROUPS = 65_536
RUN_CONF = {
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": str(OBJECT_HASH_GROUPS),
    # The aggregate is cached for its two tables; without this, adaptive execution leaves a
    # cached plan's partitioning alone, and every one of spark.sql.shuffle.partitions (200
    # on a cluster) would be a task, and a cached block, for a few rows each.
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
}
"""Session settings while the job runs (restored after: :func:`~spark_jobs.common.sql_conf`)."""


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


def per_request(df: DataFrame) -> DataFrame:
    """One row per request and topic it names (one per request without topics), with its
    ``hour`` and ``first_row`` (true for the topic whose rows hold the request's first row:
    long polls count each request once), clustered by :data:`CLUSTER_KEYS`.

    A Produce or Fetch request has a row per partition, and counts once per topic. The
    rows are shuffled once, by keys every row of a request shares, and de-duplicated
    within each task by a hash aggregation on columns only (no ``first`` of a string,
    which would make it sort-based); the aggregation that follows needs no other shuffle.
    """
    return (
        df.where(F.col("topic_partitions").isNull())  # inventory rows are not requests
        .select(*(c for c in REQUEST_COLUMNS if c != "hour"), "first_row",
                common.hour_of().alias("hour"))
        .repartition(*CLUSTER_KEYS)
        .groupBy(*REQUEST_COLUMNS)
        .agg(F.max("first_row").alias("first_row"))
    )


def aggregate(
    df: DataFrame, slo_ms: float = 100.0, accuracy: int = DEFAULT_ACCURACY
) -> DataFrame:
    """Both tables in one pass over ``df``, as one DataFrame whose ``in_latency`` column
    says which a row belongs to (``latency`` or ``long_polls``); :func:`latency_rows` and
    :func:`long_poll_rows` take them apart.

    Each request (and topic) is tagged with the tables it counts in (a Fetch in both) and
    the tagged rows aggregated once, by the table's keys (``topic`` null for long polls).
    ``us`` is the latency judged against the SLO in a ``latency`` row, the time held in a
    ``long_polls`` row: one digest per group gives either table's percentiles. The
    measures' inputs are computed by a projection first: ``percentile_approx`` makes the
    aggregation an object hash aggregation, which evaluates its inputs row by row without
    generated code.
    """
    api = F.col("api_key")
    tables = F.array_compact(F.array(
        F.when(~api.isin(*HELD_APIS), F.lit(True)),
        F.when(F.col("first_row") & api.isin(*LONG_POLL_APIS), F.lit(False)),
    ))
    in_latency = F.col("in_latency")
    latency = F.col("latency_us")
    held = held_us()
    measures = per_request(df).withColumn("in_latency", F.explode(tables)).select(
        "in_latency", "hour", "api_key", "api_name",
        F.when(in_latency, F.col("topic")).alias("topic"), "principal",
        F.when(latency.isNull(), F.lit(1)).alias("unanswered"),
        F.when(in_latency, latency - held).otherwise(held).alias("us"),
        F.when(in_latency & (latency - held > slo_ms * 1000.0), F.lit(1)).alias("over"),
        F.when(~in_latency & (api == FETCH_KEY), latency - held).alias("beyond"),
        F.when(~in_latency, F.col("max_wait_ms")).alias("max_wait_ms"),
    )
    over = F.count("over")
    return measures.groupBy("in_latency", "hour", "api_key", "api_name", "topic", "principal").agg(
        F.count(F.lit(1)).alias("requests"),
        F.count("unanswered").alias("no_response"),
        F.percentile_approx("us", [q for _, q in PERCENTILES], accuracy).alias("percentiles"),
        over.alias("over_slo"),
        common.ratio(over, F.count("us")).alias("share_over_slo"),
        F.lit(float(slo_ms)).alias("slo_ms"),
        F.max("us").alias("max_us"),
        F.percentile_approx("beyond", 0.99, accuracy).alias("beyond_wait_p99_us"),
        F.max("max_wait_ms").alias("max_wait_ms"),
    )


def latency_rows(aggregated: DataFrame) -> DataFrame:
    """The ``latency`` table from :func:`aggregate`'s result."""
    return aggregated.where(F.col("in_latency")).select(
        *KEYS, "requests", "no_response",
        *(F.col("percentiles")[i].alias(name) for i, (name, _) in enumerate(PERCENTILES)),
        "over_slo", "share_over_slo", "slo_ms",
    )


def long_poll_rows(aggregated: DataFrame) -> DataFrame:
    """The ``long_polls`` table from :func:`aggregate`'s result."""
    at = {name: i for i, (name, _) in enumerate(PERCENTILES)}
    return aggregated.where(~F.col("in_latency")).select(
        *LONG_POLL_KEYS, "requests", "no_response",
        F.col("percentiles")[at["p50_us"]].alias("held_p50_us"),
        F.col("percentiles")[at["p99_us"]].alias("held_p99_us"),
        F.col("max_us").alias("held_max_us"), "beyond_wait_p99_us", "max_wait_ms",
    )


def transform(df: DataFrame, slo_ms: float, accuracy: int = DEFAULT_ACCURACY) -> DataFrame:
    """Percentiles of the judged latency and the share over ``slo_ms`` per hour, API, topic
    and principal (JoinGroup and SyncGroup left out; a Fetch judged beyond its max wait)."""
    return latency_rows(aggregate(df, slo_ms, accuracy))


def transform_long_polls(df: DataFrame, accuracy: int = DEFAULT_ACCURACY) -> DataFrame:
    """Time held and time beyond the wait of Fetch, JoinGroup and SyncGroup requests, per
    hour, API and principal (each request once)."""
    return long_poll_rows(aggregate(df, accuracy=accuracy))


def load(latency: DataFrame, long_polls: DataFrame, out: str) -> None:
    """Write ``latency`` and ``long_polls`` under ``out``."""
    common.write_table(latency, common.join_uri(out, "latency"), KEYS)
    common.write_table(long_polls, common.join_uri(out, "long_polls"), LONG_POLL_KEYS)


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options: one pass over the audit, whose
    small aggregate is kept for the two tables written from it."""
    with common.sql_conf(spark, RUN_CONF):
        aggregated = aggregate(extract(spark, args), args.slo_ms, args.accuracy).persist()
        try:
            load(latency_rows(aggregated), long_poll_rows(aggregated), args.out)
        finally:
            aggregated.unpersist()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_latency_slo, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
