"""Synthetic audit rows, vectorised with numpy, written like the audit observer writes them.

    python -m spark_jobs.synthetic --out PATH --rows 10000000 [--hours 24] [--seed 1]

For benchmarks and tests: :func:`hour_table` builds one hour of requests as an Arrow table
in :data:`~observers.audit_schema.AUDIT_SCHEMA` (Produce and Fetch requests spread over one
to three topic-partitions, one row each, ``first_row`` on the first), :func:`write_audit`
writes hours under ``dt=YYYY-MM-DD/hour=HH``. The mix is plausible, not a model of any real
cluster: a few principals and many client ids, skewed topic popularity, a lognormal
latency, 5% of produces with acks=0 (no response: null error, latency and response size),
1% of responses with an error, 2% of Produce and Fetch requests throttled by a client quota
(``throttle_time_ms`` 100 ms to 2 s; 0 on every other answer). Consumers long-poll: Fetch requests carry a max wait of
500 ms and a third of them are held that long; JoinGroup and SyncGroup are held for
seconds. Each sidecar records the topic inventory once an hour (one Metadata request with
a row per topic), including :attr:`Shape.idle_topics` topics no one ever uses. Rows are a
function of the seed.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from observers.audit_schema import AUDIT_SCHEMA, FETCH_KEY, METADATA_KEY, PRODUCE_KEY

JOIN_GROUP_KEY, SYNC_GROUP_KEY = 11, 14

# api key, name, version, share of requests
_APIS = (
    (PRODUCE_KEY, "Produce", 9, 0.40),
    (FETCH_KEY, "Fetch", 13, 0.40),
    (METADATA_KEY, "Metadata", 12, 0.06),
    (8, "OffsetCommit", 8, 0.06),
    (12, "Heartbeat", 4, 0.05),
    (JOIN_GROUP_KEY, "JoinGroup", 9, 0.005),
    (SYNC_GROUP_KEY, "SyncGroup", 5, 0.005),
    (18, "ApiVersions", 3, 0.02),
)
_LOCAL_KEY = 18  # the sidecar answers ApiVersions itself
_ERROR_CODE = 6  # NOT_LEADER_OR_FOLLOWER, the usual transient one
_MAX_WAIT_MS = 500  # what consumers ask a Fetch to wait (fetch.max.wait.ms)


@dataclass(frozen=True)
class Shape:
    """What the synthetic cluster looks like."""

    topics: int = 200
    partitions: int = 12
    principals: int = 8
    clients: int = 40
    sidecars: int = 3
    #: Topics in the inventory that no request ever touches.
    idle_topics: int = 10

    def inventory(self) -> list[str]:
        """Every topic that exists: the used ones, then the idle ones."""
        return [f"topic-{i:03d}" for i in range(self.topics)] + [
            f"idle-{i:03d}" for i in range(self.idle_topics)]


def _strings(names: Sequence[str], index: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    """Strings chosen by ``index`` from ``names`` (null where ``mask``), built as a dictionary."""
    indices = pa.array(index.astype(np.int32), mask=mask)
    return pa.DictionaryArray.from_arrays(indices, pa.array(names)).cast(pa.string())


def _nullable(values: np.ndarray, mask: np.ndarray, dtype: pa.DataType) -> pa.Array:
    return pa.array(values, type=dtype, mask=mask)


def hour_table(
    start: datetime, rows: int, rng: np.random.Generator, shape: Shape = Shape(),
    first_request_id: int = 0,
) -> pa.Table:
    """About ``rows`` audit rows (whole requests; at most two short) in the hour from ``start``."""
    keys = np.array([a[0] for a in _APIS], dtype=np.int16)
    shares = np.array([a[3] for a in _APIS])
    mean_rows = 1 + (shares[:2].sum() * 1.0)  # topic requests have 1-3 rows, 2 on average
    n = int(rows / mean_rows * 1.05) + 3
    api_index = rng.choice(len(_APIS), size=n, p=shares)
    api = keys[api_index]
    topical = (api == PRODUCE_KEY) | (api == FETCH_KEY)
    per_request = np.where(topical, rng.integers(1, 4, size=n), 1)
    n = int(np.searchsorted(np.cumsum(per_request), rows, side="right"))
    api_index, api, topical, per_request = api_index[:n], api[:n], topical[:n], per_request[:n]

    # Request-level columns, one value per request, then repeated onto its rows.
    offsets = np.sort(rng.integers(0, 3_600_000_000, size=n))
    time_us = int(start.timestamp() * 1_000_000) + offsets
    client = rng.integers(0, shape.clients, size=n)
    principal = client % shape.principals  # each client id runs as one principal
    produce = api == PRODUCE_KEY
    acks_choice = np.array([-1, 1, 0], dtype=np.int16)[rng.choice(3, size=n, p=[0.6, 0.35, 0.05])]
    no_response = produce & (acks_choice == 0)
    latency = np.round(rng.lognormal(mean=8.0, sigma=1.0, size=n)).astype(np.int64) + 50
    fetch = api == FETCH_KEY
    held = fetch & (rng.random(size=n) < 1 / 3)  # nothing to return: held the whole max wait
    latency = np.where(held, _MAX_WAIT_MS * 1000 + latency // 10, latency)
    group_wait = (api == JOIN_GROUP_KEY) | (api == SYNC_GROUP_KEY)
    latency = np.where(group_wait, rng.integers(200_000, 3_000_000, size=n), latency)
    request_error = rng.random(size=n) < 0.01
    # Client quotas throttle one Produce or Fetch in 50, for 100 ms to 2 s; every other
    # answer carries 0 (each API here answers with a throttle time at its version). Taken
    # from what is drawn already, so the other columns stay what the seed made them.
    throttled = topical & (np.arange(n) % 50 == 7)
    throttle_ms = np.where(throttled, 100 + latency % 1900, 0)

    row_request = np.repeat(np.arange(n), per_request)
    total = len(row_request)
    starts = np.cumsum(per_request) - per_request
    first_row = np.zeros(total, dtype=bool)
    first_row[starts] = True
    topical_row = topical[row_request]
    records = np.where(topical_row, rng.integers(1, 200, size=total), 0)
    record_bytes = records * rng.integers(60, 400, size=total)
    # Zipf-like popularity, so some topics see little traffic and some none.
    topic = (rng.zipf(1.3, size=total) - 1) % shape.topics
    body = np.zeros(n, dtype=np.int64)
    np.add.at(body, row_request, record_bytes)

    def per_row(values: np.ndarray) -> np.ndarray:
        return values[row_request]

    names = [a[1] for a in _APIS]
    versions = np.array([a[2] for a in _APIS], dtype=np.int16)
    row_no_response = per_row(no_response)
    error = np.where(per_row(request_error), _ERROR_CODE, 0).astype(np.int16)
    columns = {
        "time": pa.array(per_row(time_us), type=pa.timestamp("us", tz="UTC")),
        "sidecar_broker_id": pa.array(per_row(rng.integers(1, shape.sidecars + 1, size=n)), pa.int32()),
        "listener": _strings(["PLAINTEXT"], np.zeros(total, dtype=np.int32)),
        "client_host": _strings([f"10.0.0.{i + 1}" for i in range(shape.clients)], per_row(client)),
        "client_port": pa.array(per_row(rng.integers(30_000, 61_000, size=n)), pa.int32()),
        "principal": _strings([f"User:app-{i:02d}" for i in range(shape.principals)], per_row(principal)),
        "client_id": _strings([f"client-{i:02d}" for i in range(shape.clients)], per_row(client),
                              mask=per_row(client % 10 == 9)),
        "api_key": pa.array(per_row(api), pa.int16()),
        "api_name": _strings(names, per_row(api_index)),
        "api_version": pa.array(per_row(versions[api_index]), pa.int16()),
        "correlation_id": pa.array(per_row(rng.integers(0, 2**31 - 1, size=n)), pa.int32()),
        "request_id": pa.array(per_row(np.arange(first_request_id, first_request_id + n)), pa.int64()),
        "first_row": pa.array(first_row),
        "error_code": _nullable(error, row_no_response, pa.int16()),
        "request_bytes": pa.array(per_row(np.where(produce, body, 0) + 120 + 40 * per_request), pa.int64()),
        "response_bytes": _nullable(per_row(np.where(api == FETCH_KEY, body, 0) + 60), row_no_response, pa.int64()),
        "latency_us": _nullable(per_row(latency), row_no_response, pa.int64()),
        "upstream_latency_us": _nullable(per_row(latency - 40), row_no_response | per_row(api == _LOCAL_KEY), pa.int64()),
        "local": pa.array(per_row(api == _LOCAL_KEY)),
        "acks": _nullable(per_row(acks_choice), ~per_row(produce), pa.int16()),
        "topic": _strings([f"topic-{i:03d}" for i in range(shape.topics)], topic, mask=~topical_row),
        "partition": _nullable(rng.integers(0, shape.partitions, size=total), ~topical_row, pa.int32()),
        "bytes": _nullable(record_bytes, ~topical_row, pa.int64()),
        "records": _nullable(records, ~topical_row, pa.int64()),
        "topic_partitions": pa.nulls(total, pa.int32()),
        "max_wait_ms": _nullable(np.full(total, _MAX_WAIT_MS), ~per_row(fetch), pa.int32()),
        "client_software_name": pa.nulls(total, pa.string()),
        "client_software_version": pa.nulls(total, pa.string()),
        "denials": pa.nulls(total, AUDIT_SCHEMA.field("denials").type),
        "throttle_time_ms": _nullable(per_row(throttle_ms), row_no_response, pa.int32()),
    }
    traffic = pa.Table.from_arrays(list(columns.values()), schema=AUDIT_SCHEMA)
    return pa.concat_tables([traffic, inventory_table(start, shape, first_request_id + n)])


def inventory_table(start: datetime, shape: Shape, first_request_id: int) -> pa.Table:
    """One Metadata request per sidecar a second into the hour, with an inventory row for
    every topic of ``shape`` (what the audit writes once an hour)."""
    topics = shape.inventory()
    rows: list[dict[str, object]] = []
    for s in range(shape.sidecars):
        base = {
            "time": start + timedelta(seconds=1), "sidecar_broker_id": s + 1,
            "listener": "PLAINTEXT", "client_host": "10.0.0.1", "client_port": 30_000,
            "principal": "User:app-00", "client_id": "client-00", "api_key": METADATA_KEY,
            "api_name": "Metadata", "api_version": 12, "correlation_id": s,
            "request_id": first_request_id + s, "first_row": True, "error_code": 0,
            "request_bytes": 60, "response_bytes": 40 * len(topics), "latency_us": 900,
            "upstream_latency_us": 850, "local": False, "acks": None, "topic": None,
            "partition": None, "bytes": None, "records": None, "topic_partitions": None,
            "max_wait_ms": None, "client_software_name": None, "client_software_version": None,
            "throttle_time_ms": 0,
        }
        rows.append(base)
        rows += [{**base, "first_row": False, "topic": t, "topic_partitions": shape.partitions}
                 for t in topics]
    return pa.Table.from_pylist(rows, schema=AUDIT_SCHEMA)


def partition_dir(root: Path, hour: datetime) -> Path:
    """``root/dt=YYYY-MM-DD/hour=HH`` for the UTC hour ``hour``."""
    hour = hour.astimezone(UTC)
    return root / f"dt={hour:%Y-%m-%d}" / f"hour={hour:%H}"


def write_audit(
    root: Path, rows: int, *, start: datetime, hours: int = 24, seed: int = 1,
    shape: Shape = Shape(),
) -> int:
    """Write about ``rows`` rows spread evenly over ``hours`` hours from ``start`` (one file an
    hour) under ``root``; return how many were written."""
    rng = np.random.default_rng(seed)
    written = 0
    for h in range(hours):
        hour = start + timedelta(hours=h)
        table = hour_table(hour, rows // hours, rng, shape, first_request_id=written)
        directory = partition_dir(root, hour)
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, directory / "synthetic-0.parquet")
        written += table.num_rows
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True, help="audit directory to write into")
    p.add_argument("--rows", type=int, default=1_000_000, help="about how many rows (1,000,000)")
    p.add_argument("--hours", type=int, default=24, help="hours to spread them over (24)")
    p.add_argument("--start", default="2026-01-01T00:00:00+00:00", help="first hour (ISO 8601)")
    p.add_argument("--seed", type=int, default=1, help="random seed (1)")
    args = p.parse_args(argv)
    start = datetime.fromisoformat(args.start).astimezone(UTC)
    written = write_audit(args.out, args.rows, start=start, hours=args.hours, seed=args.seed)
    print(f"wrote {written:,} audit rows under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
