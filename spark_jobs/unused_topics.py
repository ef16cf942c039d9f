"""Unused topics: which topics exist and nobody produced to or fetched from for N days.

    python -m spark_jobs.unused_topics --audit PATH --out PATH [--days 7] [--as-of T]
        [--topics a,b] [--inventory FILE] [--since T] [--sidecars 1,2]

The inventory of topics comes from the audit itself: every topic a Metadata response
reported (the inventory rows of audit schema version 2: ``topic_partitions`` set, written
at most once per topic per hour per sidecar), and every topic some Produce or Fetch row
names. ``--topics`` and ``--inventory`` (a text file, one topic a line, any
Hadoop-compatible path) may add topics the audit never saw reported, for example from an
audit of schema version 1, which has no inventory rows.

Any Produce or Fetch row is an access, whatever its error code or byte count: an empty
fetch still means a consumer reads the topic. The audit is read up to ``--as-of``
(default ``--until``, else now) and from ``--since`` (default: the whole audit).

Writes the Parquet table ``topics`` under ``--out``, one row per inventory topic:
``topic``, ``partitions`` (the partition count last reported, null when never reported),
``last_reported`` (the last inventory row: when a sidecar last saw it exist),
``last_produce``, ``last_fetch``, ``last_access`` (null: no access in the audit read),
``idle_days`` (days from ``last_access`` to ``as_of``, 2 decimals, null when never
accessed) and ``unused`` (no access in the ``--days`` days before ``as_of``); unused topics
first, longest idle first. One aggregation over the audit, in one pass.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import common, options

MICROS_PER_DAY = 86_400_000_000
COLUMNS = (
    "topic", "partitions", "last_reported", "last_produce", "last_fetch", "last_access",
    "idle_days", "unused",
)


def as_of(args: argparse.Namespace) -> datetime:
    """The time idleness is measured at."""
    moment: datetime | None = args.as_of or args.until
    return moment if moment is not None else datetime.now(UTC)


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The audit rows from ``--since`` up to the ``as_of`` time."""
    return common.read_audit(
        spark, args.audit, since=args.since, until=as_of(args), sidecars=args.sidecars
    )


def extract_inventory(spark: SparkSession, args: argparse.Namespace) -> DataFrame | None:
    """The supplied topics (``--topics`` and ``--inventory``) as one column ``topic``, if any."""
    parts: list[DataFrame] = []
    if args.topics:
        parts.append(spark.createDataFrame([(t,) for t in args.topics], "topic string"))
    if args.inventory:
        lines = spark.read.text(args.inventory)
        parts.append(
            lines.select(F.trim("value").alias("topic")).where(F.col("topic") != "")
        )
    return reduce(DataFrame.unionByName, parts) if parts else None


#: A report's time and partition count packed into one number (below).
REPORT_SHIFT = 2**31


def packed_report() -> Column:
    """An inventory row's time (µs) and partition count as one decimal, ``time × 2³¹ +
    partitions``: its max is the last report, and of two at the same instant the one with
    more partitions, as the max of a (time, partitions) struct would be. A struct max
    makes Spark aggregate by sorting every row; a decimal's is a hash aggregation."""
    micros = F.unix_micros(F.col("time")).cast("decimal(38,0)")
    return micros * REPORT_SHIFT + F.col("topic_partitions")


def transform(
    df: DataFrame, inventory: DataFrame | None, as_of: datetime, days: int
) -> DataFrame:
    """Per topic that exists: its partition count and when it was last reported, its last
    produce, fetch and access, idle days at ``as_of``, and whether it went ``days`` days
    without access."""
    produced, fetched = common.is_produce(), common.is_fetch()
    reported = common.is_inventory()
    report = F.col("report")
    report_micros = F.floor(report / REPORT_SHIFT)
    per_topic = (
        df.where(produced | fetched | reported)
        .groupBy("topic")
        .agg(
            F.max(F.when(reported, packed_report())).alias("report"),
            F.max(F.when(produced, F.col("time"))).alias("last_produce"),
            F.max(F.when(fetched, F.col("time"))).alias("last_fetch"),
        )
        .select(
            "topic", (report - report_micros * REPORT_SHIFT).cast("int").alias("partitions"),
            F.timestamp_micros(report_micros.cast("long")).alias("last_reported"),
            "last_produce", "last_fetch",
        )
    )
    if inventory is not None:
        per_topic = per_topic.join(inventory.select("topic").distinct(), "topic", "full_outer")
    last_access = F.greatest("last_produce", "last_fetch")
    idle_us = F.unix_micros(F.lit(as_of)) - F.unix_micros(F.col("last_access"))
    cutoff = as_of - timedelta(days=days)
    return (
        per_topic.withColumn("last_access", last_access)
        .withColumn("idle_days", F.round(idle_us / MICROS_PER_DAY, 2))
        .withColumn("unused", F.col("last_access").isNull() | (F.col("last_access") < cutoff))
        .select(*COLUMNS)
    )


def load(df: DataFrame, out: str) -> None:
    """Write ``topics`` under ``out``: unused first, then longest idle, then by name."""
    order = [F.desc("unused"), F.desc_nulls_first("idle_days"), F.asc("topic")]
    common.write_table(df, common.join_uri(out, "topics"), order)


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options."""
    df = transform(extract(spark, args), extract_inventory(spark, args), as_of(args), args.days)
    load(df, args.out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_unused_topics, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
