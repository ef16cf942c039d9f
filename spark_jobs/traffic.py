"""Traffic: bytes and records produced and consumed, and requests per API key, per hour.

    python -m spark_jobs.traffic --audit PATH --out PATH [--since T] [--until T] [--sidecars 1,2]

Writes two Parquet tables under ``--out``:

``topics`` — one row per (``hour``, ``topic``, ``principal``, ``client_id``):
``bytes_in``/``records_in`` summed over Produce rows, ``bytes_out``/``records_out`` over
Fetch rows. Every row counts, error or not: this is the traffic clients sent and received
(a produce the broker refused still crossed the wire). ``client_id`` stays null when the
client sent none.

``api_keys`` — one row per (``hour``, ``api_key``, ``api_name``): ``requests`` (rows with
``first_row``), ``request_bytes`` and ``response_bytes`` (whole frames; a request without a
response adds nothing to the latter) and ``no_response`` (requests that got none, e.g.
Produce with acks=0).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import common, options

TOPIC_KEYS = ("hour", "topic", "principal", "client_id")
API_KEYS = ("hour", "api_key", "api_name")


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The audit rows in the requested range."""
    return common.extract_audit(spark, args)


def transform(df: DataFrame) -> DataFrame:
    """Bytes and records in (Produce) and out (Fetch) per hour, topic, principal and client id."""
    return (
        df.where(common.is_produce() | common.is_fetch())
        .withColumn("hour", common.hour_of())
        .groupBy(*TOPIC_KEYS)
        .agg(
            common.sum_where(common.is_produce(), "bytes").alias("bytes_in"),
            common.sum_where(common.is_produce(), "records").alias("records_in"),
            common.sum_where(common.is_fetch(), "bytes").alias("bytes_out"),
            common.sum_where(common.is_fetch(), "records").alias("records_out"),
        )
    )


def transform_requests(df: DataFrame) -> DataFrame:
    """Requests, request and response bytes, and requests without a response, per hour and
    API key (each request counted once, on its ``first_row``)."""
    return (
        df.where(F.col("first_row"))
        .withColumn("hour", common.hour_of())
        .groupBy(*API_KEYS)
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum("request_bytes").cast("long").alias("request_bytes"),
            F.coalesce(F.sum("response_bytes"), F.lit(0)).cast("long").alias("response_bytes"),
            common.count_where(F.col("response_bytes").isNull()).alias("no_response"),
        )
    )


def load(topics: DataFrame, api_keys: DataFrame, out: str) -> None:
    """Write ``topics`` and ``api_keys`` under ``out``."""
    common.write_table(topics, common.join_uri(out, "topics"), TOPIC_KEYS)
    common.write_table(api_keys, common.join_uri(out, "api_keys"), API_KEYS)


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options."""
    df = extract(spark, args)
    load(transform(df), transform_requests(df), args.out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_nothing, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
