"""Hand-written audit rows for the job tests: one call per request, rows as the observer writes them.

``request(...)`` returns the rows of one request: one row, or for Produce and Fetch one per
``(topic, partition, bytes, records)`` part, ``first_row`` on the first. ``frame(spark,
requests)`` turns them into a DataFrame with the jobs' schema (``dt``/``hour`` derived from
``time`` as the partition paths would give them).
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import TYPE_CHECKING, Any

from observers.audit_schema import ANONYMOUS, COLUMNS
from spark_jobs.common import spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PRODUCE, FETCH, METADATA, OFFSET_COMMIT, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, SYNC_GROUP = 0, 1, 3, 8, 10, 11, 12, 14
NAMES = {PRODUCE: "Produce", FETCH: "Fetch", METADATA: "Metadata", OFFSET_COMMIT: "OffsetCommit",
         FIND_COORDINATOR: "FindCoordinator", JOIN_GROUP: "JoinGroup",
         HEARTBEAT: "Heartbeat", SYNC_GROUP: "SyncGroup"}

_ids = count(1)

Part = tuple[str, int, int, int]
"""``(topic, partition, bytes, records)``"""

ALICE, BOB, CAROL = "User:alice", "User:bob", "User:carol"


def at(text: str) -> datetime:
    """A UTC time from ``"2026-03-01 10:15"``-style text."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def request(
    api_key: int,
    time: str,
    parts: list[Part] | None = None,
    *,
    principal: str = ANONYMOUS,
    client_id: str | None = "app",
    latency_us: int | None = 1000,
    error_code: int | None = 0,
    sidecar: int = 1,
    request_bytes: int = 100,
    response_bytes: int | None = 50,
    acks: int | None = None,
    max_wait_ms: int | None = None,
    inventory: dict[str, int] | None = None,
    software: tuple[str, str] | None = None,
    denials: list[tuple[str, str, str, str]] | None = None,
    throttle_ms: int | None = None,
) -> list[dict[str, Any]]:
    """The audit rows of one request (see the module docstring); ``inventory`` (topic →
    partitions) adds a Metadata request's inventory rows; ``software`` is the client's
    (name, version) from its ApiVersions (audit schema v3); ``denials`` the
    ``(resource type, name, operation, mode)`` its ACLs refused (v3, on the first row);
    ``throttle_ms`` its response's ThrottleTimeMs (v3, on every row)."""
    request_id = next(_ids)
    base: dict[str, Any] = {
        "time": at(time), "sidecar_broker_id": sidecar, "listener": "PLAINTEXT",
        "client_host": "127.0.0.1", "client_port": 50000, "principal": principal,
        "client_id": client_id, "api_key": api_key, "api_name": NAMES[api_key], "api_version": 9,
        "correlation_id": request_id, "request_id": request_id, "first_row": True,
        "error_code": error_code, "request_bytes": request_bytes,
        "response_bytes": response_bytes, "latency_us": latency_us,
        "upstream_latency_us": latency_us, "local": False,
        "acks": acks if api_key == PRODUCE else None,
        "topic": None, "partition": None, "bytes": None, "records": None,
        "topic_partitions": None, "max_wait_ms": max_wait_ms,
        "client_software_name": software[0] if software else None,
        "client_software_version": software[1] if software else None,
        "denials": [dict(zip(("resource_type", "resource_name", "operation", "mode"), d, strict=True))
                    for d in denials] if denials else None,
        "throttle_time_ms": throttle_ms,
    }
    if inventory:
        return [base] + [
            {**base, "first_row": False, "topic": t, "topic_partitions": n, "max_wait_ms": None,
         "denials": None}
            for t, n in inventory.items()
        ]
    if not parts:
        return [base]
    return [
        {**base, "first_row": i == 0, "topic": t, "partition": p, "bytes": b, "records": r,
         "denials": base["denials"] if i == 0 else None}
        for i, (t, p, b, r) in enumerate(parts)
    ]


def frame(spark: SparkSession, *requests: list[dict[str, Any]]) -> DataFrame:
    """The requests' rows as an audit DataFrame (with ``dt`` and ``hour``)."""
    rows = [
        (*(row[c] for c in COLUMNS), f"{row['time']:%Y-%m-%d}", f"{row['time']:%H}")
        for rows in requests
        for row in rows
    ]
    return spark.createDataFrame(rows, spark_schema())
