"""Cost attribution: each principal's share of a topic's bytes in, bytes out and requests.

    python -m spark_jobs.cost_attribution --audit PATH --out PATH [--since T] [--until T]
        [--sidecars 1,2]

One row per (``topic``, ``principal``) over the whole range read:

| column | meaning |
|---|---|
| ``bytes_in`` | record bytes the principal produced to the topic |
| ``share_bytes_in`` | ``bytes_in`` / the topic's (0–1; empty when the topic got none) |
| ``bytes_out`` | record bytes the principal fetched from the topic |
| ``share_bytes_out`` | likewise for ``bytes_out`` |
| ``requests`` | the principal's Produce and Fetch requests naming the topic (once each) |
| ``share_requests`` | ``requests`` / all such requests on the topic |

Shares are rounded to 6 decimals. As in :mod:`spark_jobs.traffic`, rows with an error code
count: the bytes crossed the wire either way. Written under ``--out`` as the Parquet table
``shares`` and the file ``cost_attribution.csv`` (header row; opens in a spreadsheet),
sorted by topic, then largest share of bytes in.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from observers.audit_schema import FETCH_KEY, PRODUCE_KEY
from spark_jobs import common, options

COLUMNS = (
    "topic", "principal", "bytes_in", "share_bytes_in", "bytes_out", "share_bytes_out",
    "requests", "share_requests",
)


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The audit rows in the requested range."""
    return common.extract_audit(spark, args)


def transform(df: DataFrame) -> DataFrame:
    """Bytes in and out and requests per topic and principal, with each one's share of the
    topic's total.

    A request counts once per topic however many of its partitions it names, so requests
    are told apart by :data:`~spark_jobs.common.REQUEST_KEY`. The Produce and Fetch rows are
    shuffled once, by topic and principal (which every row of a request on a topic shares):
    the per-request and per-principal aggregations then run within each task, as hash
    aggregations over rows that fit in memory, and only the small totals move again (for
    the topic's sum that makes the shares).
    """
    produced = F.col("api_key") == PRODUCE_KEY
    fetched = F.col("api_key") == FETCH_KEY
    totals = (
        df.where(common.is_produce() | common.is_fetch())
        .select("topic", "principal", *common.REQUEST_KEY,
                F.when(produced, F.col("bytes")).alias("bytes_in"),
                F.when(fetched, F.col("bytes")).alias("bytes_out"))
        .repartition("topic", "principal")
        .groupBy("topic", "principal", *common.REQUEST_KEY)
        .agg(F.sum("bytes_in").alias("bytes_in"), F.sum("bytes_out").alias("bytes_out"))
        .groupBy("topic", "principal")
        .agg(
            F.coalesce(F.sum("bytes_in"), F.lit(0)).cast("long").alias("bytes_in"),
            F.coalesce(F.sum("bytes_out"), F.lit(0)).cast("long").alias("bytes_out"),
            F.count(F.lit(1)).alias("requests"),
        )
    )
    topic = Window.partitionBy("topic")

    def share(column: str) -> Column:
        return F.round(common.ratio(F.col(column), F.sum(column).over(topic)), 6)

    return totals.select(
        "topic", "principal",
        "bytes_in", share("bytes_in").alias("share_bytes_in"),
        "bytes_out", share("bytes_out").alias("share_bytes_out"),
        "requests", share("requests").alias("share_requests"),
    )


def load(df: DataFrame, out: str) -> None:
    """Write ``shares`` (Parquet) and ``cost_attribution.csv`` under ``out``.

    The CSV is the same table: it is made from the one Parquet file just written, so the
    audit is aggregated once without keeping the result cached.
    """
    order = [F.asc("topic"), F.desc("bytes_in"), F.desc("bytes_out"), F.asc("principal")]
    shares = common.join_uri(out, "shares")
    common.write_table(df, shares, order)
    common.write_csv(df.sparkSession.read.parquet(shares), common.join_uri(out, "cost_attribution.csv"), order)


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options."""
    load(transform(extract(spark, args)), args.out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_nothing, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
