"""The jobs read audit files of schema versions 1, 2 and 3 together, with version 3's schema
(columns a file lacks read as null), and refuse a version they do not know."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from observers.audit_schema import UnreadableVersion, schema_for
from spark_jobs import common

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROW: dict[str, Any] = {
    "time": datetime(2026, 2, 3, 4, 5, tzinfo=UTC), "sidecar_broker_id": 1, "listener": "PLAINTEXT",
    "client_host": "10.0.0.1", "client_port": 40000, "principal": "User:ANONYMOUS", "client_id": "app",
    "api_key": 1, "api_name": "Fetch", "api_version": 13, "correlation_id": 0, "request_id": 0,
    "first_row": True, "error_code": 0, "request_bytes": 100, "response_bytes": 500, "latency_us": 900,
    "upstream_latency_us": 800, "local": False, "acks": None, "topic": "orders", "partition": 0,
    "bytes": 400, "records": 4, "topic_partitions": None, "max_wait_ms": 500,
    "client_software_name": "confluent-kafka-python", "client_software_version": "2.16.1-rdkafka-2.16.0",
    "denials": [{"resource_type": "Topic", "resource_name": "orders", "operation": "Read", "mode": "shadow"}],
    "throttle_time_ms": 300,
}


def write(root: Path, version: int, request_id: int, metadata: bytes | None = None) -> Path:
    """One row of ``version`` (its columns only) in the 04:00 partition of 2026-02-03."""
    schema = schema_for(version)
    if metadata is not None:
        schema = schema.with_metadata({b"ksidecar.audit.schema": metadata})
    row = {name: ROW[name] for name in schema.names} | {"request_id": request_id}
    directory = root / "dt=2026-02-03" / "hour=04"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-1-{request_id}.parquet"
    pq.write_table(pa.Table.from_pylist([row], schema=schema), path)
    return path


def test_versions_1_to_3_read_together_with_nulls_for_what_a_file_lacks(spark: SparkSession, tmp_path: Path) -> None:
    for version in (1, 2, 3):
        write(tmp_path, version, request_id=version)
    rows = {r["request_id"]: r for r in common.read_audit(spark, str(tmp_path)).collect()}
    assert sorted(rows) == [1, 2, 3]
    wait = {i: rows[i]["max_wait_ms"] for i in rows}
    software = {i: (rows[i]["client_software_name"], rows[i]["client_software_version"]) for i in rows}
    assert wait == {1: None, 2: 500, 3: 500}
    assert software == {1: (None, None), 2: (None, None), 3: ("confluent-kafka-python", "2.16.1-rdkafka-2.16.0")}
    denials = {i: [d.asDict() for d in rows[i]["denials"] or []] for i in rows}
    assert denials == {1: [], 2: [], 3: [{"resource_type": "Topic", "resource_name": "orders",
                                          "operation": "Read", "mode": "shadow"}]}
    assert rows[1]["denials"] is None and rows[2]["denials"] is None
    assert {i: rows[i]["throttle_time_ms"] for i in rows} == {1: None, 2: None, 3: 300}
    assert {rows[i]["records"] for i in rows} == {4}  # the columns every version has


def test_an_unknown_version_is_refused_naming_the_file(spark: SparkSession, tmp_path: Path) -> None:
    write(tmp_path, 3, request_id=1)
    bad = write(tmp_path, 3, request_id=2, metadata=b"4")
    with pytest.raises(UnreadableVersion, match=r"part-1-2\.parquet: schema version '4' .* knows versions 1, 2, 3"):
        common.read_audit(spark, str(tmp_path))
    assert bad.exists()
