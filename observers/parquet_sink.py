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
``.part-….parquet.tmp``, fsynced, renamed to ``part-<broker>-<unix ms>-<seq>.parquet``
(an atomic rename within one directory) and the journal is deleted. Hidden names
(leading dot) are skipped by Spark's and pyarrow's dataset discovery, so readers list
only complete files.

Recovery. A journal is locked (``flock``) while its writer lives. :meth:`ParquetSink.recover`,
run when a sink starts, rolls every journal nobody holds the lock on (left by a killed
process) and removes stray temporary files, so the rows a killed sidecar had flushed
become visible when the next one starts.
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
TMP_SUFFIX = ".parquet.tmp"


class SinkMetrics:
    """The sink's metrics (names fixed: dashboards and alerts use them)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.rows_written = Counter(
            "ksidecar_audit_rows_written", "Audit rows in completed (visible) Parquet files.",
            registry=r)
        self.files_written = Counter(
            "ksidecar_audit_files_written", "Completed audit Parquet files.", registry=r)
        self.buffered_rows = Gauge(
            "ksidecar_audit_buffered_rows", "Audit rows not yet in a completed file (in memory "
            "or in a journal).", registry=r)
        self.last_flush = Gauge(
            "ksidecar_audit_last_flush_timestamp_seconds", "Unix time of the last successful "
            "flush of buffered audit rows to disk.", registry=r)


@dataclass
class _Journal:
    """The open journal of one partition."""

    base: str  # "part-<broker>-<ms>-<seq>"
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
        # Read when scraped: keeping a gauge current per row cost a lock per row.
        self.metrics.buffered_rows.set_function(self.buffered)

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

    def close(self) -> None:
        """Flush and roll everything: every row ends in a visible file."""
        self.flush()
        for hour in list(self._journals):
            self._roll(hour)

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
            base = f"part-{self.broker_id()}-{int(self.clock() * 1000)}-{os.getpid()}-{self._seq:05d}"
            path = directory / f".{base}{JOURNAL_SUFFIX}"
            if not path.exists() and not (directory / f"{base}.parquet").exists():
                break
        file = open(path, "wb")  # noqa: SIM115 - closed when rolled
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
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

    # -- recovery --------------------------------------------------------------------

    def recover(self) -> int:
        """Roll journals left by dead writers; return the rows recovered."""
        recovered = 0
        for path in sorted(self.directory.glob(f"dt=*/hour=*/.part-*{JOURNAL_SUFFIX}")):
            with open(path, "rb") as probe:
                try:
                    fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live writer's
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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
