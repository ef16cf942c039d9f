"""Completeness: records produced per topic and window on one cluster against another's.

    python -m spark_jobs.completeness --audit PATH --mirror PATH --out PATH
        [--window-minutes 60] [--mirror-prefix source.] [--since T] [--until T] [--sidecars 1,2]

KIP-388's "correctness" example: did every record produced to the source cluster reach its
mirror? ``--audit`` is the source's audit, ``--mirror`` the mirror cluster's (written by the
sidecars in front of it). A record counts as produced when its Produce row has error code 0,
or null (acks=0: no answer, so no known failure); rows with an error code were not
appended and do not count. ``--mirror-prefix`` is stripped from the mirror's topic names
(MirrorMaker 2 names a mirrored topic ``<source alias>.<topic>``); when given, mirror topics
without it are someone else's and are left out. ``--sidecars`` selects the source's
sidecars only; the time range applies to both.

Writes the Parquet table ``windows`` under ``--out``, one row per (``topic``, window)
either side produced to: ``window_start``, ``window_end``, ``source_records``,
``mirror_records`` (0 where that side has none), ``difference`` (source − mirror) and
``differs``; differing windows first. Windows are tumbling and aligned to the epoch, in
event time of each side: a record produced just before a window's end can be mirrored just
after it, so a small difference in two neighbouring windows that cancels out is lag, not
loss — wider windows hide it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import common, options

KEYS = ("topic", "window_start", "window_end")


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The source cluster's audit rows in the requested range."""
    return common.extract_audit(spark, args)


def extract_mirror(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The mirror cluster's audit rows in the requested range (all its sidecars)."""
    return common.read_audit(spark, args.mirror, since=args.since, until=args.until)


def records_per_window(df: DataFrame, window_minutes: int) -> DataFrame:
    """Records successfully produced per topic and tumbling window (``KEYS`` + ``records``)."""
    ok = F.col("error_code").isNull() | (F.col("error_code") == 0)
    window = F.window("time", f"{window_minutes} minutes")
    return (
        df.where(common.is_produce() & ok)
        .groupBy("topic", window.alias("window"))
        .agg(F.sum("records").cast("long").alias("records"))
        .select("topic", F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"), "records")
    )


def transform(
    source: DataFrame, mirror: DataFrame, window_minutes: int, mirror_prefix: str = ""
) -> DataFrame:
    """Source and mirror record counts side by side per topic and window, and whether they
    differ."""
    if mirror_prefix:
        mirror = mirror.where(F.col("topic").startswith(mirror_prefix)).withColumn(
            "topic", F.expr(f"substring(topic, {len(mirror_prefix) + 1})")
        )
    left = records_per_window(source, window_minutes).withColumnRenamed("records", "source_records")
    right = records_per_window(mirror, window_minutes).withColumnRenamed("records", "mirror_records")
    both = left.join(right, list(KEYS), "full_outer").fillna(
        0, subset=["source_records", "mirror_records"]
    )
    difference = F.col("source_records") - F.col("mirror_records")
    return both.select(
        *KEYS, "source_records", "mirror_records",
        difference.alias("difference"), (difference != 0).alias("differs"),
    )


def load(df: DataFrame, out: str) -> None:
    """Write ``windows`` under ``out``, differing windows first."""
    common.write_table(df, common.join_uri(out, "windows"), [F.desc("differs"), *KEYS])


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options."""
    df = transform(
        extract(spark, args), extract_mirror(spark, args), args.window_minutes, args.mirror_prefix
    )
    load(df, args.out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_completeness, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
