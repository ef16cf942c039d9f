"""common: the audit's Spark schema, reading with time range and sidecar filters, options."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from observers.audit_schema import AUDIT_SCHEMA, PARTITION_COLUMNS
from spark_jobs import common, options, synthetic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

START = datetime(2026, 1, 1, 22, tzinfo=UTC)


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four hours of synthetic audit across midnight (Jan 1 22:00 to Jan 2 02:00), and a trap:
    a partition for 21:00 whose file is not Parquet, which only a read that prunes survives."""
    root = tmp_path_factory.mktemp("audit")
    synthetic.write_audit(root, 4000, start=START, hours=4, seed=7, shape=synthetic.Shape(sidecars=3))
    trap = root / "dt=2026-01-01" / "hour=21"
    trap.mkdir(parents=True)
    (trap / "broken.parquet").write_bytes(b"not parquet at all")
    return root


def test_spark_schema_follows_the_audit_schema() -> None:
    schema = common.spark_schema()

    assert schema.fieldNames() == [*AUDIT_SCHEMA.names, *PARTITION_COLUMNS]
    assert [f.nullable for f in schema.fields][: len(AUDIT_SCHEMA)] == [f.nullable for f in AUDIT_SCHEMA]
    assert schema["time"].dataType.typeName() == "timestamp"
    assert schema["api_key"].dataType.typeName() == "short"
    assert schema["hour"].dataType.typeName() == "string"


def test_time_range_and_sidecars_read_only_the_partitions_needed(
    spark: SparkSession, audit_dir: Path
) -> None:
    since, until = datetime(2026, 1, 1, 23, 30, tzinfo=UTC), datetime(2026, 1, 2, 1, tzinfo=UTC)

    df = common.read_audit(spark, str(audit_dir), since=since, until=until, sidecars=[1, 3])

    # Counted independently, with pyarrow over the files written.
    table = ds.dataset(sorted(audit_dir.glob("*/*/synthetic-0.parquet")), format="parquet").to_table()
    wanted = pc.and_(
        pc.and_(pc.greater_equal(table["time"], since), pc.less(table["time"], until)),
        pc.is_in(table["sidecar_broker_id"], value_set=pa.array([1, 3], "int32")),
    )
    assert df.count() == pc.sum(wanted).as_py() > 0
    row = df.select("dt", "hour").orderBy("time").first()
    assert row is not None and (row["dt"], row["hour"]) == ("2026-01-01", "23")


def test_options_parse_times_as_utc_and_ids() -> None:
    p = options.job_parser("test", options.add_nothing)

    args = p.parse_args(["--audit", "a", "--out", "o", "--since", "2026-01-02T03:00",
                         "--until", "2026-01-02T05:00+02:00", "--sidecars", "1,2"])

    assert args.since == datetime(2026, 1, 2, 3, tzinfo=UTC)
    assert args.until == datetime(2026, 1, 2, 3, tzinfo=UTC)
    assert args.sidecars == [1, 2]
    with pytest.raises(argparse.ArgumentTypeError):
        options.parse_time("yesterday")


def test_without_a_range_every_partition_is_read(spark: SparkSession, audit_dir: Path) -> None:
    # The trap is read, and fails: the test above passed because its range pruned it.
    with pytest.raises(Exception, match=r"(?i)parquet"):
        common.read_audit(spark, str(audit_dir)).count()


def test_a_spark_connect_session_is_refused_with_the_reason() -> None:
    # What pyspark.sql.connect.session.SparkSession looks like to the check: its module.
    remote = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()

    with pytest.raises(NotImplementedError, match=r"Spark Connect"):
        common.hadoop(remote)
