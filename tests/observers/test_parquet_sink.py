"""The Parquet sink: partitions, rolling, atomic completion, and recovery of a killed writer."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import re
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from observers.audit_schema import AUDIT_SCHEMA, COLUMNS, schema_for
from observers.parquet_sink import STALE_NEW_AGE, ParquetSink

#: 2026-03-04 05:59:59 UTC, in microseconds: the next second is another hour.
T0 = int(dt.datetime(2026, 3, 4, 5, 59, 59, tzinfo=dt.UTC).timestamp()) * 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def row(i: int, micros: int = T0) -> tuple[Any, ...]:
    values: dict[str, Any] = {
        "time": micros, "sidecar_broker_id": 1, "listener": "PLAINTEXT", "client_host": "127.0.0.1",
        "client_port": 4000 + i, "principal": "User:ANONYMOUS", "client_id": None, "api_key": 0,
        "api_name": "Produce", "api_version": 9, "correlation_id": i, "request_id": i,
        "first_row": True, "error_code": 0, "request_bytes": 100, "response_bytes": 50,
        "latency_us": 10, "upstream_latency_us": 5, "local": False, "acks": 1, "topic": "t",
        "partition": 0, "bytes": 70, "records": 1, "topic_partitions": None, "max_wait_ms": None,
        "client_software_name": "app", "client_software_version": "1.0", "denials": None,
        "throttle_time_ms": 0,
    }
    return tuple(values[c] for c in COLUMNS)


def sink(tmp_path: Path, clock: Clock, **kw: Any) -> ParquetSink:
    return ParquetSink(tmp_path, AUDIT_SCHEMA, broker_id=lambda: 1, clock=clock, **kw)


def visible(tmp_path: Path) -> list[Path]:
    return sorted(p for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith("."))


def hidden(tmp_path: Path) -> list[Path]:
    return sorted(p for p in tmp_path.rglob(".*"))


def test_rows_roll_into_complete_files_by_row_count(tmp_path: Path) -> None:
    clock = Clock()
    s = sink(tmp_path, clock, roll_rows=10)
    s.add([row(i) for i in range(25)])
    assert visible(tmp_path) == []  # nothing flushed yet
    s.flush()
    files = visible(tmp_path)
    assert len(files) == 1 and files[0].name.startswith("part-1-") and files[0].suffix == ".parquet"
    assert hidden(tmp_path) == []  # the journal passed roll.rows at the flush: rolled
    s.add([row(i) for i in range(25, 30)])
    s.flush()
    assert len(hidden(tmp_path)) == 1  # the open journal, below roll.rows
    s.close()
    assert hidden(tmp_path) == []
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("correlation_id").to_pylist()) == list(range(30))
    assert set(table.column("dt").to_pylist()) == {"2026-03-04"}
    assert set(table.column("hour").to_pylist()) == {5}
    assert table.schema.field("time").type == pa.timestamp("us", tz="UTC")
    assert pq.read_schema(visible(tmp_path)[0]).metadata[b"ksidecar.audit.schema"] == b"3"  # AUDIT_SCHEMA is v3


def test_hours_go_to_their_own_partitions_and_age_rolls_files(tmp_path: Path) -> None:
    clock = Clock()
    s = sink(tmp_path, clock, flush_interval=1.0, roll_age=10.0)
    s.add([row(0, T0), row(1, T0 + 1_000_000)])
    s.tick()
    assert visible(tmp_path) == []  # interval not yet passed
    clock.now += 1.0
    s.tick()
    assert visible(tmp_path) == [] and len(hidden(tmp_path)) == 2  # two journals
    clock.now += 10.0
    s.tick()
    names = [str(p.relative_to(tmp_path).parent) for p in visible(tmp_path)]
    assert names == ["dt=2026-03-04/hour=05", "dt=2026-03-04/hour=06"]
    assert s.metrics.rows_written._value.get() == 2


def test_a_killed_writer_leaves_only_complete_files_and_its_journal_is_recovered(tmp_path: Path) -> None:
    clock = Clock()
    dead = sink(tmp_path, clock)
    dead.add([row(i) for i in range(5)])
    dead.flush()
    dead.add([row(i) for i in range(5, 8)])
    dead.flush()
    journal = hidden(tmp_path)[0]
    # The process dies mid-write: the lock goes with it, the last batch is torn.
    for j in dead._journals.values():
        j.file.close()
    size = journal.stat().st_size
    with open(journal, "r+b") as f:
        f.truncate(size - 20)
    assert visible(tmp_path) == []
    live = sink(tmp_path, clock)  # a new sidecar starts on the same directory
    live.add([row(100)])
    live.flush()  # its own journal is locked: recovery leaves it alone
    assert live.recover() == 5
    files = visible(tmp_path)
    assert len(files) == 1
    assert pq.read_table(files[0]).column("correlation_id").to_pylist() == list(range(5))
    live.close()
    assert hidden(tmp_path) == [] and len(visible(tmp_path)) == 2


def test_recovery_prefers_a_completed_file_and_clears_stray_temporaries(tmp_path: Path) -> None:
    clock = Clock()
    s = sink(tmp_path, clock)
    s.add([row(1)])
    s.close()
    final = visible(tmp_path)[0]
    # Killed between rename and journal deletion: the journal must not duplicate rows.
    journal = final.with_name(f".{final.stem}.journal")
    journal.write_bytes(b"torn")
    stray = final.with_name(".part-9-1-1-00001.parquet.tmp")
    stray.write_bytes(b"half")
    empty = final.with_name(".part-9-1-1-00002.journal")
    empty.write_bytes(b"")
    assert sink(tmp_path, clock).recover() == 0
    assert hidden(tmp_path) == [] and visible(tmp_path) == [final]
    assert os.path.getsize(final) > 0


def test_a_journal_of_an_older_schema_becomes_a_file_of_its_own_schema(tmp_path: Path) -> None:
    """A sidecar of the previous version was killed: its v1 journal is completed as v1 (the
    readers accept both), not forced into today's schema."""
    from observers.audit_schema import READABLE_VERSIONS, VERSION_KEY

    v1 = schema_for(1)
    old = ParquetSink(tmp_path, v1, broker_id=lambda: 1, clock=Clock())
    old.add([row(0)[:24]])
    old.flush()
    for j in old._journals.values():
        j.file.close()  # what a SIGKILL leaves: the lock goes with the process
    old._journals.clear()
    new = sink(tmp_path, Clock())
    assert new.recover() == 1
    (path,) = visible(tmp_path)
    written = pq.read_schema(path)
    assert written.metadata[VERSION_KEY.encode()] == b"1" and 1 in READABLE_VERSIONS
    assert written.names == list(AUDIT_SCHEMA.names)[:24]


# -- worker processes of one sidecar, one directory ---------------------------------------


def live_worker(directory: str, ready: Event, finish: Event) -> None:
    """Worker 1: five rows flushed to its journal (locked), held open until ``finish``."""
    s = ParquetSink(Path(directory), AUDIT_SCHEMA, broker_id=lambda: 1, worker=1)
    s.add([row(i) for i in range(5)])
    s.flush()
    ready.set()
    if finish.wait(30):
        s.close()


def dying_worker(directory: str) -> None:
    """Worker 2: three rows flushed to its journal, then the process dies (no close)."""
    s = ParquetSink(Path(directory), AUDIT_SCHEMA, broker_id=lambda: 1, worker=2)
    s.add([row(i) for i in range(10, 13)])
    s.flush()
    os._exit(0)


def test_a_starting_worker_recovers_a_dead_workers_journal_and_never_a_live_ones(tmp_path: Path) -> None:
    context = multiprocessing.get_context("forkserver")
    ready, finish = context.Event(), context.Event()
    live = context.Process(target=live_worker, args=(str(tmp_path), ready, finish))
    dying = context.Process(target=dying_worker, args=(str(tmp_path),))
    live.start()
    dying.start()
    try:
        assert ready.wait(30)
        dying.join(30)
        assert dying.exitcode == 0
        journals = {p.name for p in tmp_path.rglob(".part-*.journal")}
        assert len(journals) == 2 and visible(tmp_path) == []
        (live_journal,) = (name for name in journals if "-w1-" in name)

        starting = ParquetSink(tmp_path, AUDIT_SCHEMA, broker_id=lambda: 1, worker=0)
        assert starting.recover() == 3  # the dead worker's rows, not the live one's
        assert {p.name for p in tmp_path.rglob(".part-*.journal")} == {live_journal}
        (recovered,) = visible(tmp_path)
        assert re.fullmatch(r"part-1-w2-\d+-\d+-00001\.parquet", recovered.name)
        assert pq.read_table(recovered).column("correlation_id").to_pylist() == [10, 11, 12]
        assert starting.recover() == 0  # nothing twice
    finally:
        finish.set()
        live.join(30)
    assert live.exitcode == 0
    assert hidden(tmp_path) == []
    names = sorted(p.name for p in visible(tmp_path))
    assert [n.split("-")[2] for n in names] == ["w1", "w2"]
    # Every row exactly once, as a reader that lists the directory sees it.
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("correlation_id").to_pylist()) == [0, 1, 2, 3, 4, 10, 11, 12]


def test_a_journal_being_created_is_left_alone_and_a_dead_creators_is_removed(tmp_path: Path) -> None:
    """A journal is locked before it gets its name (``.journal.new`` until then): recovery
    removes only an unlocked ``.new`` old enough to be a dead creator's (it holds no rows)."""
    part = tmp_path / "dt=2026-03-04" / "hour=05"
    part.mkdir(parents=True)
    young = part / ".part-1-w0-1-1-00001.journal.new"
    old = part / ".part-1-w0-1-1-00002.journal.new"
    young.write_bytes(b"")
    old.write_bytes(b"")
    past = time.time() - STALE_NEW_AGE - 1
    os.utime(old, (past, past))
    assert sink(tmp_path, Clock()).recover() == 0
    assert hidden(tmp_path) == [young]


def test_file_names_carry_the_worker(tmp_path: Path) -> None:
    s = sink(tmp_path, Clock(), worker=3)
    s.add([row(0)])
    s.close()
    (path,) = visible(tmp_path)
    assert re.fullmatch(rf"part-1-w3-1000000-{os.getpid()}-00001\.parquet", path.name)
