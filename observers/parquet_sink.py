"""Audit rows to Parquet files that readers never see half-written.

Theory of operation. Rows arrive in memory. Every ``flush_interval`` seconds (and when
the buffer holds :data:`MAX_BUFFERED_ROWS`) they are appended, as one Arrow record batch
per Hive partition ``dt=YYYY-MM-DD/hour=HH`` (UTC, of the row's ``time``), to that
partition's *journal*: a hidden Arrow IPC stream file ``.part-….journal``. An IPC stream
can be read up to its last complete batch even when the writer died in the middle of
the next one, so a killed sidecar loses only the rows still in memory, at most one flush
interval's worth.

A journal is *rolled* into Parquet when it reaches ``roll_rows`` rows or ``roll_bytes``
bytes (its Arrow size, before Parquet's encoding and compression), when it is
``roll_age`` seconds old, and on close: its batches are written to a hidden
``.part-….parquet.tmp``, fsynced, renamed to
``part-<broker>-w<worker>-<unix ms>-<pid>-<seq>.parquet`` (an atomic rename within one
directory) and the journal is deleted. ``<worker>`` is the sidecar worker process's index
(``sidecar.workers``; 0 for a single-process sidecar): the workers of one sidecar write into
the same directory, each its own files. Hidden names (leading dot) are skipped by Spark's
and pyarrow's dataset discovery, so readers list only complete files.

Recovery. A journal is locked (``flock``, exclusive) by its writer from before it has its
name until it is rolled: it is created as ``.part-….journal.new``, locked, then renamed,
so no other process ever finds a journal of a live writer unlocked. The lock belongs to
the open file, so it ends with the writer however it ends. :meth:`ParquetSink.recover`,
run when a sink starts (a sidecar, or each worker of one, all sharing the directory),
rolls only the journals whose lock it takes without waiting (left by a process that
died; a live worker's are skipped) and removes stray temporary files, so the rows a
killed sidecar had flushed become visible when the next one starts. Two recoveries at once
never complete one journal twice: the second takes the lock only once the first has
renamed the Parquet file, and then finds it there.

Metrics. The gauges are set where their value changes (flush, roll, tick), not read by a
callback at scrape time: in a multi-worker sidecar the scrape is served by another
process (prometheus_client's multiprocess mode, :mod:`proxy.control.metrics_page`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq
from prometheus_client import CollectorRegistry, Counter, Gauge

log = logging.getLogger(__name__)

#: Rows held in memory before a flush is forced, whatever the interval.
MAX_BUFFERED_ROWS = 100_000
_HOUR_US = 3_600_000_000
JOURNAL_SUFFIX = ".journal"
#: A journal being created (not yet locked): recovery never opens one.
NEW_SUFFIX = ".journal.new"
TMP_SUFFIX = ".parquet.tmp"
#: Seconds after which an unlocked ``.journal.new`` is a dead creator's (it holds no rows).
STALE_NEW_AGE = 60.0


class SinkMetrics:
    """The sink's metrics (names fixed: dashboards and alerts use them)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.rows_written = Counter(
            "ksidecar_audit_rows_written", "Audit rows in completed (visible) Parquet files.",
            registry=r)
        self.files_written = Counter(
            "ksidecar_audit_files_written", "Completed audit Parquet files.", registry=r)
        # livesum: each worker's sink holds its own rows.
        self.buffered_rows = Gauge(
            "ksidecar_audit_buffered_rows", "Audit rows not yet in a completed file (in memory "
            "or in a journal).", multiprocess_mode="livesum", registry=r)
        # livemin: the stalest of the workers' sinks, so that KsidecarAuditSinkBehind
        # (deploy/prometheus/alerts.yml) sees one worker's sink stuck while others flush.
        self.last_flush = Gauge(
            "ksidecar_audit_last_flush_timestamp_seconds", "Unix time of the last successful "
            "flush of buffered audit rows to disk.", multiprocess_mode="livemin", registry=r)


@dataclass
class _Journal:
    """The open journal of one partition."""

    base: str  # "part-<broker>-w<worker>-<ms>-<pid>-<seq>"
    directory: Path
    file: IO[bytes]
    writer: Any
    opened: float
    rows: int = 0

    @property
    def path(self) -> Path:
        return self.directory / f".{self.base}{JOURNAL_SUFFIX}"


def partition_dir(hour_index: int) -> str:
    """``dt=YYYY-MM-DD/hour=HH`` for an hour counted from the Unix epoch."""
    return time.strftime("dt=%Y-%m-%d/hour=%H", time.gmtime(hour_index * 3600))


class ParquetSink:
    """Buffers rows (tuples in ``schema`` order, ``time`` first, in microseconds) and
    writes them as described in the module docstring. Not thread-safe: one owner."""

    def __init__(
        self,
        directory: Path,
        schema: pa.Schema,
        *,
        broker_id: Callable[[], int],
        worker: int = 0,
        flush_interval: float = 1.0,
        roll_rows: int = 1_000_000,
        roll_bytes: int = 128 << 20,
        roll_age: float = 300.0,
        metrics: SinkMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.schema = schema
        self.broker_id = broker_id
        #: The sidecar worker process's index, in every file name (module docstring).
        self.worker = worker
        self.flush_interval = flush_interval
        self.roll_rows = roll_rows
        self.roll_bytes = roll_bytes
        self.roll_age = roll_age
        self.metrics = metrics if metrics is not None else SinkMetrics(None)
        self.clock = clock
        self._buffer: list[tuple[Any, ...]] = []
        self._journals: dict[int, _Journal] = {}
        self._journal_rows = 0
        self._seq = 0
        self._last_flush = clock()
        self.files_written: list[Path] = []
        self.directory.mkdir(parents=True, exist_ok=True)
        self._publish()

    # -- writing ---------------------------------------------------------------------

    def add(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Buffer rows (flushed by :meth:`tick`, or now if the buffer is full)."""
        self._buffer.extend(rows)
        if len(self._buffer) >= MAX_BUFFERED_ROWS:
            self.flush()

    def append(self, row: tuple[Any, ...]) -> None:
        """Buffer one row (as :meth:`add` does)."""
        buffer = self._buffer
        buffer.append(row)
        if len(buffer) >= MAX_BUFFERED_ROWS:
            self.flush()

    def tick(self, now: float | None = None) -> None:
        """Flush when the interval has passed; roll journals that are old enough."""
        now = self.clock() if now is None else now
        if now - self._last_flush >= self.flush_interval:
            self.flush()
        for hour, journal in list(self._journals.items()):
            if now - journal.opened >= self.roll_age:
                self._roll(hour)
        self._publish()

    def flush(self) -> None:
        """Append buffered rows to their partitions' journals (survives a killed process)."""
        rows, self._buffer = self._buffer, []
        by_hour: dict[int, list[tuple[Any, ...]]] = {}
        for row in rows:
            by_hour.setdefault(row[0] // _HOUR_US, []).append(row)
        for hour, part in by_hour.items():
            journal = self._journals.get(hour) or self._open(hour)
            journal.writer.write_batch(self._batch(part))
            journal.file.flush()
            journal.rows += len(part)
            self._journal_rows += len(part)
            if journal.rows >= self.roll_rows or journal.file.tell() >= self.roll_bytes:
                self._roll(hour)
        now = self.clock()
        self._last_flush = now
        self.metrics.last_flush.set(now)
        self._publish()

    def close(self) -> None:
        """Flush and roll everything: every row ends in a visible file."""
        self.flush()
        for hour in list(self._journals):
            self._roll(hour)
        self._publish()

    def change_schema(self, schema: pa.Schema) -> None:
        """Write rows of ``schema`` from now on. The rows buffered so far (of the old schema)
        are flushed and every journal rolled first, so each file holds one schema."""
        self.close()
        self.schema = schema

    def _batch(self, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        columns = list(zip(*rows, strict=True))
        arrays = [pa.array(col, type=f.type) for col, f in zip(columns, self.schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _open(self, hour: int) -> _Journal:
        directory = self.directory / partition_dir(hour)
        directory.mkdir(parents=True, exist_ok=True)
        while True:  # never reuse a name, whatever the clock did
            self._seq += 1
            base = (f"part-{self.broker_id()}-w{self.worker}-{int(self.clock() * 1000)}-"
                    f"{os.getpid()}-{self._seq:05d}")
            path = directory / f".{base}{JOURNAL_SUFFIX}"
            creating = directory / f".{base}{NEW_SUFFIX}"
            if not any(p.exists() for p in (path, creating, directory / f"{base}.parquet")):
                break
        # Locked before it bears a journal's name (module docstring, "Recovery").
        file = open(creating, "xb")  # noqa: SIM115 - closed when rolled
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(creating, path)
        except BaseException:
            file.close()
            creating.unlink(missing_ok=True)
            raise
        writer = pa.ipc.new_stream(file, self.schema)
        journal = self._journals[hour] = _Journal(base, directory, file, writer, self.clock())
        return journal

    def _roll(self, hour: int) -> None:
        journal = self._journals.pop(hour)
        journal.writer.close()
        journal.file.flush()
        try:
            written = _complete(journal.path, journal.directory, journal.base)
        finally:
            journal.file.close()  # releases the lock only now: recovery never races a roll
        self._journal_rows -= journal.rows
        if written is not None:
            self.files_written.append(written[0])
            self.metrics.files_written.inc()
            self.metrics.rows_written.inc(written[1])

    def buffered(self) -> int:
        """Rows not yet in a completed file (in memory or in a journal)."""
        return len(self._buffer) + self._journal_rows

    def _publish(self) -> None:
        """Set ``ksidecar_audit_buffered_rows`` (per flush, roll and tick, not per row: a
        set takes a lock)."""
        self.metrics.buffered_rows.set(self.buffered())

    # -- recovery --------------------------------------------------------------------

    def recover(self) -> int:
        """Roll journals left by dead writers (those whose lock is free; a live writer's,
        in this process or another, is left alone); return the rows recovered."""
        recovered = 0
        for path in sorted(self.directory.glob(f"dt=*/hour=*/.part-*{JOURNAL_SUFFIX}")):
            try:
                probe = open(path, "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:
                continue  # rolled by its writer, or recovered by another process, meanwhile
            with probe:
                try:
                    fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live writer's (or another recovery's)
                base = path.name[1 : -len(JOURNAL_SUFFIX)]
                written = _complete(path, path.parent, base)
            if written is not None:
                recovered += written[1]
                self.metrics.files_written.inc()
                self.metrics.rows_written.inc(written[1])
                log.info("recovered %d audit row(s) from %s", written[1], path)
        for tmp in self.directory.glob(f"dt=*/hour=*/.part-*{TMP_SUFFIX}"):
            journal = tmp.with_name(tmp.name[: -len(TMP_SUFFIX)] + JOURNAL_SUFFIX)
            if not journal.exists():
                tmp.unlink(missing_ok=True)
        for new in self.directory.glob(f"dt=*/hour=*/.part-*{NEW_SUFFIX}"):
            _remove_stale_new(new, time.time())  # file times are real times
        return recovered


def read_journal(path: Path) -> list[pa.RecordBatch]:
    """The complete batches of a journal (a torn last batch, or no schema, reads as less)."""
    batches: list[pa.RecordBatch] = []
    try:
        with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
    except (pa.ArrowInvalid, OSError, EOFError):
        pass
    return batches


def _complete(path: Path, directory: Path, base: str) -> tuple[Path, int] | None:
    """Journal → temporary Parquet → fsync → rename → delete the journal.

    Returns the final path and its rows, or ``None`` when the journal held none. A final
    file that already exists (a writer killed after its rename) wins over its journal.
    """
    final = directory / f"{base}.parquet"
    if final.exists():
        path.unlink(missing_ok=True)
        return None
    batches = read_journal(path)
    rows = sum(b.num_rows for b in batches)
    if rows == 0:
        path.unlink(missing_ok=True)
        return None
    tmp = directory / f".{base}{TMP_SUFFIX}"
    # A journal keeps the schema it was written with: one an older sidecar left (a former
    # audit schema version) is completed as that version, which readers still accept.
    table = pa.Table.from_batches(batches, schema=batches[0].schema)
    with open(tmp, "wb") as out:
        pq.write_table(table, out)
        out.flush()
        os.fsync(out.fileno())
    os.rename(tmp, final)
    _fsync_dir(directory)
    path.unlink(missing_ok=True)
    return final, rows


def _remove_stale_new(path: Path, now: float) -> None:
    """Remove a ``.journal.new`` whose creator died between creating and renaming it (it
    holds no rows). A young one may be a live writer's that has not locked it yet: left."""
    try:
        if now - path.stat().st_mtime < STALE_NEW_AGE:
            return
        with open(path, "rb") as probe:
            fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink(missing_ok=True)
    except (BlockingIOError, FileNotFoundError):
        pass


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
