"""What every audit job shares: the session, reading the audit, writing outputs, the main.

A job is a module with ``extract(spark, args) -> DataFrame``, one or more pure
``transform``-style functions, ``load(..., out)``, ``run(spark, args)`` and ``main(argv)``;
:func:`job_main` gives each the same command line (:mod:`spark_jobs.options`) and session
handling, so a job runs unchanged as ``python -m spark_jobs.<job>`` (a ``local[*]``
session) and under ``spark-submit`` (the session ``spark-submit`` configured). Paths are
strings, never :class:`pathlib.Path`, so any Hadoop-compatible URI (``hdfs://``,
``s3a://``, ``file:/``) works.

Only pyspark, :mod:`observers.audit_schema` (pyarrow) and this package are imported: on a
cluster those are all there is.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from observers.audit_schema import (
    AUDIT_SCHEMA,
    FETCH_KEY,
    PARTITION_COLUMNS,
    PRODUCE_KEY,
    SHARE_FETCH_KEY,
    VERSION_KEY,
    check_version,
)
from spark_jobs import options

LOCAL_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Tasks small enough for one machine's default 1 GB driver, which is also the executor:
    # input splits of at most 16 MiB (an hour of audit per task rather than 128 MiB splits,
    # which left one of two cores idle on a day of audit), and shuffles cut into 16 MiB
    # pieces, so the hash maps that de-duplicate requests fit in memory without spilling.
    # Adaptive execution coalesces the small shuffles of the aggregated outputs to a task
    # or two, whatever the number of shuffle partitions.
    "spark.sql.files.maxPartitionBytes": "16m",
    "spark.sql.shuffle.partitions": "32",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "16m",
}
"""Extra settings for a session this module starts itself (not under spark-submit)."""

JOB_CONF: dict[str, str] = {
    # Hours and days are UTC everywhere: the partition paths are, and so are the outputs.
    "spark.sql.session.timeZone": "UTC",
}
"""Settings every job needs, local or on a cluster."""

#: Identifies one request across the audit (request ids restart with each sidecar run).
REQUEST_KEY = ("sidecar_broker_id", "request_id", "time")

_ARROW_TO_SPARK: dict[pa.DataType, T.DataType] = {
    pa.bool_(): T.BooleanType(),
    pa.int16(): T.ShortType(),
    pa.int32(): T.IntegerType(),
    pa.int64(): T.LongType(),
    pa.string(): T.StringType(),
}


def _spark_type(dtype: pa.DataType) -> T.DataType:
    if pa.types.is_timestamp(dtype):
        return T.TimestampType()
    if pa.types.is_list(dtype):  # denials (version 3): a list of structs
        return T.ArrayType(_spark_type(dtype.value_type), containsNull=dtype.value_field.nullable)
    if pa.types.is_struct(dtype):
        return T.StructType([T.StructField(f.name, _spark_type(f.type), nullable=f.nullable)
                             for f in dtype])
    try:
        return _ARROW_TO_SPARK[dtype]
    except KeyError:
        raise TypeError(f"no Spark type for audit column type {dtype}") from None


def spark_schema(*, partitions: bool = True) -> T.StructType:
    """The audit schema as Spark sees it: :data:`~observers.audit_schema.AUDIT_SCHEMA`, plus
    the Hive partition columns (strings, as in the paths) unless ``partitions`` is false."""
    fields = [
        T.StructField(f.name, _spark_type(f.type), nullable=f.nullable) for f in AUDIT_SCHEMA
    ]
    if partitions:
        fields += [T.StructField(p, T.StringType(), nullable=False) for p in PARTITION_COLUMNS]
    return T.StructType(fields)


def session(app_name: str) -> SparkSession:
    """The job's SparkSession: under ``spark-submit`` the one it configured, else ``local[*]``.

    ``spark-submit`` starts the Python driver with ``PYSPARK_GATEWAY_PORT`` set; then master
    and resources are the submitter's business and only :data:`JOB_CONF` is added.
    """
    builder = SparkSession.builder.appName(app_name)
    conf = dict(JOB_CONF)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master("local[*]")
        conf.update(LOCAL_CONF)
        # Spark picks a non-loopback address (and warns) unless told.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark: SparkSession = builder.getOrCreate()
    return spark


@contextmanager
def sql_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """SQL ``settings`` on ``spark`` while the block runs; the previous values (or none)
    come back after it, so a job can tune the session it was given without keeping it."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


def time_range(df: DataFrame, since: datetime | None, until: datetime | None) -> DataFrame:
    """Rows with ``since <= time < until`` (either bound optional).

    The bounds are also stated on the partition columns, so Spark lists and reads only the
    ``dt=…/hour=…`` directories that can hold matching rows.
    """
    day, hour = F.col(PARTITION_COLUMNS[0]), F.col(PARTITION_COLUMNS[1])
    if since is not None:
        d, h = since.strftime("%Y-%m-%d"), since.strftime("%H")
        df = df.where((day > d) | ((day == d) & (hour >= h))).where(F.col("time") >= F.lit(since))
    if until is not None:
        d, h = until.strftime("%Y-%m-%d"), until.strftime("%H")
        df = df.where((day < d) | ((day == d) & (hour <= h))).where(F.col("time") < F.lit(until))
    return df


def read_audit(
    spark: SparkSession,
    path: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    sidecars: Sequence[int] | None = None,
    check: bool = True,
) -> DataFrame:
    """The audit rows under ``path`` in ``[since, until)``, seen by ``sidecars`` (all if None).

    The schema is given, not inferred (partition columns stay strings, e.g. ``hour=05``), and
    ``basePath`` makes ``dt``/``hour`` columns even when ``path`` names one partition. Files
    of every readable schema version are read with today's schema (columns an older version
    lacks read as null); with ``check``, the version in each file's metadata is checked
    first (:func:`schema_versions`).
    """
    df = spark.read.schema(spark_schema()).option("basePath", path).parquet(path)
    df = time_range(df, since, until)
    if sidecars:
        df = df.where(F.col("sidecar_broker_id").isin(list(sidecars)))
    if check:
        schema_versions(spark, audit_files(spark, path, since, until))
    return df


def hadoop(spark: SparkSession) -> tuple[Any, Any]:
    """The session's JVM (through Py4J) and its Hadoop configuration, for what the DataFrame
    API cannot do: list the audit's files, read their Parquet footers, rename a CSV part.

    A Spark Connect session has neither (its driver is a server elsewhere): the jobs need a
    classic session, and say so here rather than fail on a missing attribute.
    """
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        raise NotImplementedError(
            "spark_jobs need a classic Spark session (local, or a cluster through spark-submit): "
            "they read Parquet footers and list and rename files through the driver's JVM, "
            "which a Spark Connect client does not have (docs/spark_jobs.md, 'Spark Connect')"
        )
    context = spark.sparkContext
    jvm: Any = context._jvm
    return jvm, context._jsc.hadoopConfiguration()


#: Footers read at once when checking schema versions (each is a small read).
FOOTER_THREADS = 8

_PARTITION = re.compile(r"/dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/[^/]+$")


def audit_files(
    spark: SparkSession, path: str, since: datetime | None = None, until: datetime | None = None
) -> list[str]:
    """The data files under ``path`` (hidden ones skipped, as Spark skips them) whose
    ``dt=…/hour=…`` partition can hold rows of ``[since, until)``."""
    jvm, conf = hadoop(spark)
    root = jvm.org.apache.hadoop.fs.Path(path)
    listing = root.getFileSystem(conf).listFiles(root, True)
    first = (since.strftime("%Y-%m-%d"), since.strftime("%H")) if since is not None else None
    last = (until.strftime("%Y-%m-%d"), until.strftime("%H")) if until is not None else None
    files: list[str] = []
    while listing.hasNext():
        uri = str(listing.next().getPath().toString())
        name = uri.rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            continue
        found = _PARTITION.search(uri)
        if found is not None:
            partition = (found.group(1), found.group(2))
            if (first is not None and partition < first) or (last is not None and partition > last):
                continue
        files.append(uri)
    return files


def schema_versions(spark: SparkSession, files: Sequence[str]) -> dict[int, int]:
    """How many of ``files`` (audit Parquet) have each schema version; raises
    :class:`~observers.audit_schema.UnreadableVersion` naming a file whose metadata names a
    version these jobs do not know (or none).

    Read from each Parquet footer's key-value metadata through Hadoop (any file system
    Spark reads), a few files at a time: a footer is a small read, but a month of audit
    is thousands of files.
    """
    jvm, conf = hadoop(spark)
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    input_file = jvm.org.apache.parquet.hadoop.util.HadoopInputFile
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader

    def version(uri: str) -> int:
        try:
            opened = reader.open(input_file.fromPath(hadoop_path(uri), conf))
        except Exception as exc:  # not Parquet: let the read itself say so, as it would
            if "Py4J" in type(exc).__name__:
                return -1
            raise
        try:
            value = opened.getFooter().getFileMetaData().getKeyValueMetaData().get(VERSION_KEY)
        finally:
            opened.close()
        return check_version(None if value is None else str(value), uri)

    counts: dict[int, int] = {}
    with ThreadPoolExecutor(FOOTER_THREADS) as pool:
        for found in pool.map(version, files):
            if found >= 0:
                counts[found] = counts.get(found, 0) + 1
    return counts
def extract_audit(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """:func:`read_audit` with the common options (:func:`spark_jobs.options.add_common`)."""
    return read_audit(spark, args.audit, since=args.since, until=args.until, sidecars=args.sidecars)


MICROS_PER_HOUR = 3_600_000_000


def hour_of(column: str = "time") -> Column:
    """The start of the UTC hour of a timestamp column.

    Arithmetic on the microseconds since the epoch: UTC whatever the session's time zone
    (a caller's session may have another), and a little cheaper than ``date_trunc``, which
    goes through a zoned date-time for every row.
    """
    micros = F.unix_micros(F.col(column))
    return F.timestamp_micros(micros - F.pmod(micros, F.lit(MICROS_PER_HOUR)))


def is_produce() -> Column:
    """Produce rows that name a topic-partition (bytes in)."""
    return (F.col("api_key") == PRODUCE_KEY) & F.col("topic").isNotNull()


def is_fetch() -> Column:
    """Fetch and ShareFetch rows that name a topic-partition (bytes out)."""
    return F.col("api_key").isin(FETCH_KEY, SHARE_FETCH_KEY) & F.col("topic").isNotNull()


def is_inventory() -> Column:
    """Inventory rows: a topic a Metadata response reported (audit schema version 2)."""
    return F.col("topic_partitions").isNotNull() & F.col("topic").isNotNull()


def sum_where(condition: Column, value: str) -> Column:
    """Sum of ``value`` over the rows meeting ``condition``; 0 (not null) when there are none."""
    return F.coalesce(F.sum(F.when(condition, F.col(value))), F.lit(0)).cast("long")


def count_where(condition: Column) -> Column:
    """How many rows meet ``condition``."""
    return F.count(F.when(condition, F.lit(1))).cast("long")


def ratio(numerator: Column, denominator: Column) -> Column:
    """``numerator / denominator`` as a double; null when the denominator is 0."""
    return F.when(denominator != 0, numerator.cast("double") / denominator)


def _one_partition(df: DataFrame, order: Sequence[str | Column]) -> DataFrame:
    one = df.repartition(1)
    return one.sortWithinPartitions(*order) if order else one


def write_table(df: DataFrame, uri: str, order: Sequence[str | Column] = ()) -> None:
    """Write ``df`` as one Parquet file under directory ``uri`` (replaced), sorted by ``order``.

    For aggregated outputs: one file is what a person (or the report) wants to open. One
    more (small) shuffle gathers the rows, where ``coalesce(1)`` would run the aggregation
    itself in a single task.
    """
    _one_partition(df, order).write.mode("overwrite").parquet(uri)


def write_csv(df: DataFrame, uri: str, order: Sequence[str | Column] = ()) -> None:
    """Write ``df`` as the single CSV file ``uri`` (with a header row), through Hadoop's
    FileSystem, so ``uri`` may be any Hadoop-compatible path.

    Spark writes a directory of part files; it is written next to ``uri`` and its one part
    file renamed to ``uri``, replacing any file there.
    """
    staging = uri.rstrip("/") + ".parts"
    _one_partition(df, order).write.mode("overwrite").option("header", "true").csv(staging)
    jvm, hadoop_conf = hadoop(df.sparkSession)
    staging_path = jvm.org.apache.hadoop.fs.Path(staging)
    target = jvm.org.apache.hadoop.fs.Path(uri)
    fs = staging_path.getFileSystem(hadoop_conf)
    parts = [
        s.getPath() for s in fs.listStatus(staging_path) if s.getPath().getName().startswith("part-")
    ]
    if len(parts) != 1:
        raise RuntimeError(f"expected one CSV part file under {staging}, found {len(parts)}")
    fs.delete(target, False)
    if not fs.rename(parts[0], target):
        raise RuntimeError(f"could not rename {parts[0]} to {uri}")
    fs.delete(staging_path, True)
    # The local file system keeps a hidden checksum beside each file; nobody opens this one.
    fs.delete(jvm.org.apache.hadoop.fs.Path(target.getParent(), f".{target.getName()}.crc"), False)


def join_uri(base: str, *names: str) -> str:
    """``base/name/…`` for a path or URI (no :mod:`os.path`: ``s3a://b`` must stay a URI)."""
    return "/".join([base.rstrip("/"), *names])


def job_main(
    description: str,
    add_arguments: options.AddArguments,
    run: Callable[[SparkSession, argparse.Namespace], object],
    argv: Sequence[str] | None,
) -> int:
    """Parse a job's command line, run it in :func:`session` (named after the job's module,
    ``ksidecar-latency-slo``), stop the session; exit code 0."""
    args = options.job_parser(description, add_arguments).parse_args(argv)
    # The file, not run.__module__: submitted as spark_jobs/<job>.py, a job is __main__.
    job = os.path.splitext(os.path.basename(inspect.getfile(run)))[0]
    spark = session("ksidecar-" + job.replace("_", "-"))
    try:
        run(spark, args)
    finally:
        spark.stop()
    return 0
