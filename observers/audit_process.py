"""The audit observer's work in a child process (``observer.audit.isolation=process``).

Why. The audit's own work (fields picked from the frames, rows, Parquet) takes ~20 µs an
exchange on its worker thread, and that thread shares the GIL with the sidecar's event
loop: on a workload where the event loop is the bottleneck (one-record Produce requests)
every microsecond the worker holds the GIL is one the data path waits. In process mode
the sidecar only *packs* each exchange (its facts and the bytes the audit reads) and a
child process, on another core with its own GIL, records them with the same
:class:`~observers.audit_rows.AuditRecorder` the thread audit uses.

Hand-off. The hub's worker thread still takes the exchanges off the audit's queue and
calls :meth:`ProcessAudit.record_exchange`, which packs each into
:class:`~observers.audit_rows.AuditFacts`: header facts, a Fetch's max wait, a Produce
request's body and the response body (copied: the frames belong to the data path). A
frame of at least
:data:`PICK_IN_PARENT_BYTES` (batched Produce, most Fetch responses) is not sent: its
partitions are picked here instead (:mod:`observers.traffic`, a cost that does not grow
with the records' size) and only they go over, so a megabyte Fetch costs a few hundred
bytes of hand-off. The parent learns topic ids from Metadata responses as the child does,
so both name topics alike. Packed exchanges go in batches of :data:`BATCH` (or whatever
is packed at the next tick) as one pickled message over a socket pair (a
``multiprocessing`` pipe); sending releases the GIL.

Format. The parent follows the finalized ``ksidecar.audit.format`` (on its first exchange
and every tick, as the thread audit does) and each batch goes as ``(schema version,
exchanges)``: the child switches its recorder before recording a batch of another
version, so the switch falls between the same exchanges as in thread mode.

Bounds. At most :data:`MAX_IN_FLIGHT` batches are unacknowledged; while that many are,
the worker thread waits for an acknowledgement, its queue fills, and the hub's
``observer.audit.overflow`` applies as in thread mode: ``drop`` drops (counted in
``ksidecar_observer_dropped_total``), ``block`` holds the connections up to
``observer.audit.block.max.ms``. Exchanges in flight to the child are at most
``MAX_IN_FLIGHT * BATCH`` on top of the queue.

Metrics. The child owns the Parquet sink, so it counts rows and files; every
acknowledgement, and every tick on which they changed, carries its totals, and the parent
publishes them under the same names (``ksidecar_audit_rows_written_total``,
``ksidecar_audit_files_written_total``, ``ksidecar_audit_buffered_rows``,
``ksidecar_audit_last_flush_timestamp_seconds``). Exceptions in the child are counted in
the hub's ``ksidecar_observer_errors_total`` for ``audit`` and logged by the parent (at
most once per :data:`~observers.api.ERROR_LOG_INTERVAL`). A child that dies makes every
later exchange an error (counted, logged), not a crash of the sidecar.

Life. The child is started with the ``spawn`` context (never a fork of the threaded,
trio-running sidecar) when the audit is configured, that is while the sidecar starts,
and configures its audit with the same ``observer.*`` keys; an error there (for example a
missing ``observer.audit.dir``) comes back and stops the sidecar from starting, with the
child's message naming the key. On close the parent sends what is packed and a stop
marker; the child flushes, rolls every journal into Parquet, reports and exits, all
within the close timeout (``observer.close.timeout.ms``), or it is killed. The child
ignores SIGINT and SIGTERM (a signal to the process group must not cut the audit short:
the sidecar drains first, then stops it) and ends by itself when its pipe reaches EOF or
its parent is gone (a SIGKILLed sidecar): it then closes its audit as on a stop, so it
loses nothing it had received, and leaves no process behind.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from observers.api import ERROR_LOG_INTERVAL, TICK_INTERVAL, Observer, ObserverConfig
from observers.audit_rows import (
    AuditFacts,
    AuditRecorder,
    FeatureLevel,
    audit_settings,
    facts_of,
    format_version,
)
from observers.errors import ObserverError
from observers.exchange import Exchange
from observers.parquet_sink import SinkMetrics
from observers.traffic import TopicNames
from protocol.apis import ApiRegistry

log = logging.getLogger(__name__)

#: Exchanges packed before they are sent (else at the next tick).
BATCH = 256
#: Batches sent and not yet acknowledged before the worker waits.
MAX_IN_FLIGHT = 4
#: A Produce request body or Fetch response body this large is picked in the parent.
PICK_IN_PARENT_BYTES = 16 * 1024
#: Seconds a child left behind at interpreter exit may take to finish before it is killed.
ABANDON_GRACE = 5.0
#: Seconds the child may take to start and configure.
START_TIMEOUT = 60.0

#: prometheus_client's multiprocess directory variable (and its deprecated spelling).
MULTIPROC_ENV = ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir")

#: What the child reports with each message (:meth:`_Stats.snapshot`).
Stats = tuple[float, float, float, float, float, str | None]
#: Child → parent: ``(kind, stats)``, or ``(FAILED, message)`` from a failed configure.
ACK, STATS, CLOSED, READY, FAILED = "ack", "stats", "closed", "ready", "failed"


def pack(x: Exchange, names: TopicNames) -> AuditFacts:
    """The facts of ``x`` as plain picklable values, owning their bytes (see the module
    docstring for what is picked here)."""
    return facts_of(x, names=names, pick_from=PICK_IN_PARENT_BYTES, copy=True)


class ProcessAudit(Observer):
    """The process audit (module docstring): the parent's side packs exchanges, feeds the
    child and publishes its metrics. Every method but ``configure`` runs on the audit's
    worker thread (one at a time)."""

    name = "audit"

    def __init__(self) -> None:
        self.names = TopicNames()
        self.batch: list[AuditFacts] = []
        #: The schema version of the exchanges in :attr:`batch` (sent with it).
        self.version = format_version(None)
        self.feature_level: FeatureLevel | None = None
        self._checked = False
        self.in_flight = 0
        #: True until the child runs, and once it was stopped.
        self.closed = True
        self._closing = False
        #: Why the child is gone (``None`` while it serves).
        self.failure: str | None = None
        self._seen = [0.0, 0.0, 0.0]  # rows written, files written, errors: totals published
        self._last_log = -ERROR_LOG_INTERVAL
        #: Set by the hub to this observer's ``ksidecar_observer_errors_total``
        #: (observers.api, "Work elsewhere"): the child's failures are counted there.
        self.hub_errors: Any = None

    def configure(self, config: ObserverConfig) -> None:
        """Start the child and configure its audit with the same keys (its errors are
        raised here, naming the key)."""
        self.metrics = SinkMetrics(config.registry)
        self.feature_level = config.feature_level
        self.names.resolve = config.topic_name
        self.version = format_version(self.feature_level)
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        # The child's metrics stay in its memory: the parent publishes its totals. Were
        # they in the multiprocess files of a multi-worker sidecar too, the page would
        # count every row twice.
        for name in MULTIPROC_ENV:
            env.pop(name, None)
        # A fresh interpreter (fork + exec at once, as multiprocessing's "spawn" does, but
        # without re-importing the sidecar's __main__): never a fork of this threaded process.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "observers.audit_process", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.closed = False
        atexit.register(self._abandon)
        reply: Any = None
        try:
            self.conn.send((dict(config.entries), config.broker_id, dict(config.context),
                            os.getpid(), config.worker))
            reply = self.conn.recv() if self.conn.poll(START_TIMEOUT) else None
        except (EOFError, OSError):
            pass
        if reply is None or reply[0] != READY:
            self.closed = True
            atexit.unregister(self._abandon)
            self._stop_child(5.0)
            if reply is not None and reply[0] == FAILED:
                raise ObserverError(str(reply[1]))
            raise ObserverError(
                f"observer.audit.isolation=process: the audit process did not start "
                f"(exit code {self.process.returncode})")
        self._apply(reply[1])

    # -- on the worker thread ----------------------------------------------------------

    def record_exchange(self, x: Exchange) -> None:
        """Pack ``x`` (:func:`pack`); send the batch when it is full."""
        if self.failure is not None:
            raise ObserverError(f"audit process: {self.failure}")
        if not self._checked:  # configured before the sidecar read /feature
            self._follow_format()
        batch = self.batch
        batch.append(pack(x, self.names))
        if len(batch) >= BATCH:
            self._send(None)

    def tick(self, now: float) -> None:
        """Send what is packed; publish what the child reported; notice a dead child."""
        if self.failure is not None:
            return
        self._follow_format()
        self._send(None)
        self._receive(0.0)
        if self.failure is None and self.process.poll() is not None:
            self._fail(f"exited with code {self.process.returncode}")

    def close(self, timeout: float) -> None:
        """Send the rest and a stop marker; wait for the child to flush and exit."""
        if self.closed:
            return
        deadline = time.monotonic() + timeout
        self._closing = True
        try:
            if self.failure is None:
                self._send(deadline)
                self.conn.send(None)
                while self.failure is None and self.process.poll() is None:
                    if self._receive(max(0.0, deadline - time.monotonic())) == CLOSED:
                        break
                    if time.monotonic() >= deadline:
                        log.warning("audit process: not closed within %.1f s; killing it", timeout)
                        break
        except (OSError, ObserverError) as exc:
            log.warning("audit process: close failed: %s", exc)
        finally:
            self.closed = True
            atexit.unregister(self._abandon)
            self._stop_child(max(0.0, deadline - time.monotonic()))

    def _follow_format(self) -> None:
        """Take the finalized format's version; what is packed goes first, in its own."""
        self._checked = True
        version = format_version(self.feature_level)
        if version != self.version:
            self._send(None)
            self.version = version
            # Told at once, even with nothing packed: the child completes the old version's
            # files now, as the thread audit does, not at its next exchange.
            self._send(None, announce=True)

    def _send(self, deadline: float | None, *, announce: bool = False) -> None:
        """Send the packed batch, first waiting while :data:`MAX_IN_FLIGHT` are unanswered
        (until ``deadline``, ``time.monotonic``, when given; then the batch is lost); with
        ``announce``, even an empty one (it carries the schema version)."""
        if not self.batch and not announce:
            return
        self._receive(0.0)
        while self.in_flight >= MAX_IN_FLIGHT and self.failure is None:
            if deadline is not None and time.monotonic() >= deadline:
                log.warning("audit process: %d exchange(s) not handed over by the deadline",
                            len(self.batch))
                if self.hub_errors is not None:
                    self.hub_errors.inc(len(self.batch))
                self.batch = []
                return
            self._receive(TICK_INTERVAL)
            if self.in_flight >= MAX_IN_FLIGHT and self.process.poll() is not None:
                self._fail(f"exited with code {self.process.returncode}")
        batch, self.batch = self.batch, []
        if self.failure is None:
            try:
                self.conn.send((self.version, batch))
                self.in_flight += 1
                return
            except OSError as exc:
                self._fail(f"broke its pipe ({exc})")
        if self.hub_errors is not None:  # each exchange lost is one error
            self.hub_errors.inc(len(batch))

    def _receive(self, timeout: float) -> str | None:
        """Take the child's messages (waiting up to ``timeout`` for the first); return the
        kind of the last one."""
        kind: str | None = None
        try:
            while self.conn.poll(timeout):
                timeout = 0.0
                kind, stats = self.conn.recv()
                if kind == ACK:
                    self.in_flight -= 1
                self._apply(stats)
                if kind == CLOSED:
                    break
        except (EOFError, OSError):
            if self._closing:
                self.failure = self.failure or "closed"
            else:
                self._fail("closed its pipe")
        return kind

    def _apply(self, stats: Stats) -> None:
        """Publish the child's totals under the audit's metric names."""
        rows, files, buffered, last_flush, errors, message = stats
        seen = self._seen
        if rows > seen[0]:
            self.metrics.rows_written.inc(rows - seen[0])
        if files > seen[1]:
            self.metrics.files_written.inc(files - seen[1])
        if errors > seen[2]:
            if self.hub_errors is not None:
                self.hub_errors.inc(errors - seen[2])
            now = time.monotonic()
            if now - self._last_log >= ERROR_LOG_INTERVAL:
                self._last_log = now
                log.warning("audit process: %d exception(s), the last: %s", errors - seen[2], message)
        self._seen = [max(rows, seen[0]), max(files, seen[1]), max(errors, seen[2])]
        self.metrics.buffered_rows.set(buffered)
        if last_flush:
            self.metrics.last_flush.set(last_flush)

    def _fail(self, why: str) -> None:
        if self.failure is None:
            self.failure = why
            log.error("audit process %s: audit rows are lost until the sidecar restarts", why)

    def _stop_child(self, grace: float) -> None:
        """Close the pipe (the child's EOF) and reap the child, killing it after ``grace``."""
        self.conn.close()
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5.0)

    def _abandon(self) -> None:
        """At interpreter exit, for an audit never closed (or whose close never came to
        pass: a worker stuck on a child that stopped answering): EOF tells the child to
        finish; it is killed if it has not within :data:`ABANDON_GRACE` seconds."""
        if not self.closed:
            self.closed = True
            self._stop_child(ABANDON_GRACE)


# -- in the child ------------------------------------------------------------------------


class _Stats:
    """What the child reports: totals from its sink's metrics, and its exceptions."""

    def __init__(self, registry: CollectorRegistry, recorder: AuditRecorder) -> None:
        self.registry, self.recorder = registry, recorder
        self.errors = 0
        self.message: str | None = None
        self.last: Stats | None = None

    def snapshot(self) -> Stats:
        """``(rows written, files written, buffered rows, last flush, errors, last error)``."""
        value = self.registry.get_sample_value
        self.last = (
            value("ksidecar_audit_rows_written_total") or 0.0,
            value("ksidecar_audit_files_written_total") or 0.0,
            float(self.recorder.sink.buffered()),
            value("ksidecar_audit_last_flush_timestamp_seconds") or 0.0,
            float(self.errors), self.message,
        )
        return self.last

    def changed(self) -> bool:
        """Whether a new snapshot differs from the last one sent (it is then the last)."""
        before = self.last
        return self.snapshot() != before

    def failed(self, exc: Exception) -> None:
        """Count an exception of the audit."""
        self.errors += 1
        self.message = f"{type(exc).__name__}: {exc}"


def _open_recorder(
    entries: dict[str, str], broker_id: int, context: dict[str, str], registry: CollectorRegistry,
    worker: int,
) -> AuditRecorder:
    settings = audit_settings(entries)
    key = context.get("sidecar.broker.metadata.api.key")
    return AuditRecorder.open(
        settings, broker_id=broker_id, apis=ApiRegistry(int(key)) if key else ApiRegistry(),
        metrics=SinkMetrics(registry), worker=worker,
    )


def child_main(conn: Connection) -> None:
    """The audit process: configure, then record batches until stopped, EOF or orphaned."""
    try:
        entries, broker_id, context, parent_pid, worker = conn.recv()
    except (EOFError, OSError):
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s audit-process %(name)s: %(message)s")
    registry = CollectorRegistry()
    try:
        recorder = _open_recorder(entries, broker_id, context, registry, worker)
    except Exception as exc:
        message = str(exc) if isinstance(exc, ObserverError) else (
            f"observer 'audit': configure failed in the audit process: {exc}")
        conn.send((FAILED, message))
        return
    stats = _Stats(registry, recorder)
    conn.send((READY, stats.snapshot()))
    record = recorder.record
    next_tick = time.time() + TICK_INTERVAL
    try:
        while True:
            if conn.poll(max(0.0, next_tick - time.time())):
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    break  # the sidecar is gone
                if message is None:
                    break
                version, batch = message
                try:
                    recorder.use_version(version)
                except Exception as exc:
                    stats.failed(exc)
                for facts in batch:
                    try:
                        record(facts)
                    except Exception as exc:
                        stats.failed(exc)
                conn.send((ACK, stats.snapshot()))
            now = time.time()
            if now >= next_tick:
                next_tick = now + TICK_INTERVAL
                try:
                    recorder.tick(now)
                except Exception as exc:
                    stats.failed(exc)
                if os.getppid() != parent_pid:
                    break  # orphaned (the pipe's EOF should have said so already)
                if stats.changed():
                    conn.send((STATS, stats.snapshot()))
    except OSError:
        pass  # the pipe broke while answering: the parent is gone; still flush below
    recorder.close()
    with contextlib.suppress(OSError):
        conn.send((CLOSED, stats.snapshot()))


def main(argv: list[str]) -> int:
    """``python -m observers.audit_process FD``: the audit process on the socket ``FD``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child_main(Connection(int(argv[0])))
    return 0


if __name__ == "__main__":  # pragma: no cover - run as the audit process
    raise SystemExit(main(sys.argv[1:]))
