"""Upgrade readiness: which clients would break on a target Kafka, and what software they run.

    python -m spark_jobs.upgrade_readiness --audit PATH --out PATH [--target 4.0 | PROFILE.json]
        [--min-software NAME=VERSION ...] [--since T] [--until T] [--sidecars 1,2]

The target is a release from :mod:`spark_jobs.kafka_releases`' table (the request versions a
broker of that release serves, from Kafka's own message specs) or a captured ApiVersions
profile. A request *breaks* on the target when the target serves its API key at no version
or not at the version the client used (Kafka 4.0 removed the oldest versions of many APIs,
KIP-896); the broker would answer it UNSUPPORTED_VERSION, or close the connection.

A *client* is what the audit can tell apart: the software the connection named in its
ApiVersions v3+ request (``client_software_name``/``client_software_version``, audit schema
3; null, shown as unknown software, when the client sent ApiVersions v0-v2, or the file is
of an older schema), ``client_id``, ``principal`` and ``client_host`` (the source IP). Each
request counts once (its ``first_row``); the Metadata inventory rows are not requests.

Writes five Parquet tables under ``--out``:

``clients`` — the client software inventory, one row per client: ``software_name``,
``software_version``, ``client_id``, ``principal``, ``client_host``, ``first_seen``,
``last_seen``, ``requests``, ``unsupported_requests`` (those the target would refuse).
Clients that would break first.

``breaking`` — one row per client and API it used at a version the target does not serve:
the client's columns, ``api_key``, ``api_name``, ``versions`` (the unsupported versions
used, ascending), ``target_min``/``target_max`` (what the target serves; null: not the
key at all), ``first_seen``, ``last_seen``, ``requests`` (at those versions).

``old_software`` — clients whose software is older than a ``--min-software NAME=VERSION``
(the name compared without case, versions by their leading dotted numbers: ``2.0.2`` is
older than ``2.1``, ``2.6.0-rdkafka-2.6.0`` is ``2.6.0``): the client's columns,
``minimum``, ``first_seen``, ``last_seen``, ``requests``. Unknown software is never older.

``matrix`` — API keys and versions seen per client software: ``software_name``,
``software_version``, ``client_id`` (only for unknown software, which it splits: two
libraries that both sent no name stay apart; null otherwise), ``api_key``, ``api_name``,
``api_version``, ``requests``, ``clients`` (distinct clients), ``supported`` (by the
target).

``target`` — the target itself: ``target``, ``source``, ``api_key``, ``api_name``,
``min_version``, ``max_version``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import common, kafka_releases, options

#: What tells one client from another in the outputs.
CLIENT = ("software_name", "software_version", "client_id", "principal", "client_host")
TARGET_SCHEMA = ("target string, source string, api_key smallint, api_name string, "
                 "min_version smallint, max_version smallint")


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The audit rows in the requested range (files before schema version 3 read with null
    client software)."""
    return common.extract_audit(spark, args)


def target_frame(spark: SparkSession, target: kafka_releases.Target) -> DataFrame:
    """``target`` as the ``target`` table (one row per API key it serves)."""
    rows = [(target.name, target.source, key, target.names.get(key), low, high)
            for key, low, high in target.rows()]
    return spark.createDataFrame(rows, TARGET_SCHEMA)


def requests(df: DataFrame, target: DataFrame) -> DataFrame:
    """One row per request: the client's columns, API, version, time, and whether the
    target serves that version (``target_min``/``target_max`` null: not the key at all)."""
    served = target.select("api_key", F.col("min_version").alias("target_min"),
                           F.col("max_version").alias("target_max"))
    return (
        df.where(F.col("first_row"))
        .select(
            F.col("client_software_name").alias("software_name"),
            F.col("client_software_version").alias("software_version"),
            "client_id", "principal", "client_host", "time", "api_key", "api_name", "api_version",
        )
        .join(F.broadcast(served), "api_key", "left")
        .withColumn("supported", F.coalesce(
            F.col("api_version").between(F.col("target_min"), F.col("target_max")), F.lit(False)))
    )


def transform_clients(reqs: DataFrame) -> DataFrame:
    """The client software inventory: per client, when it was seen, its requests, and how
    many the target would refuse."""
    return reqs.groupBy(*CLIENT).agg(
        F.min("time").alias("first_seen"),
        F.max("time").alias("last_seen"),
        F.count(F.lit(1)).alias("requests"),
        common.count_where(~F.col("supported")).alias("unsupported_requests"),
    )


def transform_breaking(reqs: DataFrame) -> DataFrame:
    """Per client and API: the versions it used that the target does not serve."""
    return (
        reqs.where(~F.col("supported"))
        .groupBy(*CLIENT, "api_key", "api_name")
        .agg(
            F.sort_array(F.collect_set("api_version")).alias("versions"),
            F.first("target_min").alias("target_min"),
            F.first("target_max").alias("target_max"),
            F.min("time").alias("first_seen"),
            F.max("time").alias("last_seen"),
            F.count(F.lit(1)).alias("requests"),
        )
    )


def transform_matrix(reqs: DataFrame) -> DataFrame:
    """API keys and versions seen per client software (unknown software per client.id),
    with the requests and clients."""
    client = F.concat_ws("\u0000", F.coalesce("client_id", F.lit("\u0001")), "principal",
                         "client_host")
    unknown_id = F.when(F.col("software_name").isNull(), F.col("client_id"))
    return reqs.withColumn("matrix_client_id", unknown_id).groupBy(
        "software_name", "software_version", F.col("matrix_client_id").alias("client_id"),
        "api_key", "api_name", "api_version",
    ).agg(
        F.count(F.lit(1)).alias("requests"),
        F.countDistinct(client).alias("clients"),
        F.first("supported").alias("supported"),
    )


_LEADING_NUMBERS = re.compile(r"\d+(?:\.\d+)*")


def version_key(text: str | None) -> tuple[int, ...] | None:
    """A software version's leading dotted numbers (``2.6.0-rdkafka-2.6.0`` → (2, 6, 0)),
    trailing zeros dropped so ``2.1`` equals ``2.1.0``; None when it has none."""
    found = _LEADING_NUMBERS.match((text or "").strip().lstrip("vV"))
    if found is None:
        return None
    numbers = [int(part) for part in found.group().split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def older_than(name: str | None, version: str | None,
               minimums: Sequence[tuple[str, str]]) -> str | None:
    """The minimum (``NAME=VERSION``) that software ``name`` ``version`` falls short of, if any."""
    have = version_key(version)
    if name is None or have is None:
        return None
    for wanted_name, wanted_version in minimums:
        wanted = version_key(wanted_version)
        if wanted is not None and name.casefold() == wanted_name.casefold() and have < wanted:
            return f"{wanted_name}={wanted_version}"
    return None


def transform_old(clients: DataFrame, minimums: Sequence[tuple[str, str]]) -> DataFrame:
    """Clients (from :func:`transform_clients`) whose software is older than a minimum.

    The distinct software names and versions are few: they are compared on the driver
    (:func:`older_than`), and the verdicts joined back.
    """
    spark = clients.sparkSession
    verdicts: list[tuple[str, str, str]] = []
    if minimums:
        seen = clients.select("software_name", "software_version").distinct().collect()
        for row in seen:
            minimum = older_than(row["software_name"], row["software_version"], minimums)
            if minimum is not None:
                verdicts.append((row["software_name"], row["software_version"], minimum))
    old = spark.createDataFrame(
        verdicts, "software_name string, software_version string, minimum string")
    return clients.join(F.broadcast(old), ["software_name", "software_version"]).select(
        *CLIENT, "minimum", "first_seen", "last_seen", "requests")


def load(tables: dict[str, DataFrame], out: str) -> None:
    """Write the tables under ``out``, each sorted for people."""
    known: list[str | Column] = [F.col("software_name").isNull(), "software_name",
                                 "software_version"]
    order: dict[str, list[str | Column]] = {
        "clients": [F.desc("unsupported_requests"), *known, "client_id", "principal",
                    "client_host"],
        "breaking": [*known, "client_id", "principal", "client_host", "api_key"],
        "old_software": [*known, "client_id", "principal", "client_host"],
        "matrix": [*known, "client_id", "api_key", "api_version"],
        "target": ["api_key"],
    }
    for name, df in tables.items():
        common.write_table(df, common.join_uri(out, name), order[name])


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options."""
    target = target_frame(spark, kafka_releases.resolve(args.target))
    reqs = requests(extract(spark, args), target).cache()
    try:
        clients = transform_clients(reqs).cache()
        load({
            "clients": clients,
            "breaking": transform_breaking(reqs),
            "old_software": transform_old(clients, args.min_software),
            "matrix": transform_matrix(reqs),
            "target": target,
        }, args.out)
        clients.unpersist()
    finally:
        reqs.unpersist()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_upgrade_readiness, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
