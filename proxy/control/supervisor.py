"""A sidecar on every core: one supervisor, ``sidecar.workers`` worker processes.

Theory of operation. A Python process uses one core, so a sidecar with several workers
splits the work where it divides cleanly and keeps one owner for what must not be split
(docs/operations.md, "Workers"):

* **Admission stays in one place.** The supervisor binds every listener and runs the
  KIP-612 accept gate exactly as a single process does (:mod:`proxy.control.acceptor`):
  the sidecar-wide, listener and per-IP connection-creation rates, ``max.connections``
  and ``max.connections.per.ip`` are decided by one gate, so they hold for the sidecar as a
  whole. An admitted socket is handed, before any byte is read, to the worker serving the
  fewest connections (:mod:`proxy.control.handoff`, ``SCM_RIGHTS``); the gate's slot is
  given back when the worker reports the connection closed.
* **A connection never crosses a process.** The worker serves it whole: TLS, SASL, the
  in-flight order, its link to the broker, the observers.
* **The sidecar-wide state has one owner, the supervisor**: the embedded coordinator,
  KIP-584 features, ACL, SCRAM and quota administration, registration. A worker sends those
  requests over its call channel (:mod:`proxy.control.calls`) and the supervisor answers
  them with the single-process handlers (:mod:`proxy.control.owner`): no group is served by
  two processes. Every worker watches ZooKeeper itself for ACLs, SCRAM credentials,
  features and the fleet's registrations, as a single process does.
* **Workers come back.** A worker that exits (SIGKILL, an uncaught error) is logged,
  counted (``ksidecar_worker_restarts_total``) and replaced at once from a fork server made
  before the sidecar began to serve (:mod:`proxy.control.forks`); only its own connections
  are lost.
* **One configuration**: a reload (:mod:`proxy.control.reload`) is prepared by the
  supervisor and every worker, and committed by all of them only when all could prepare it;
  a worker started after a reload takes the configuration in force before it is ready.
* **One page of metrics**: every process records into prometheus_client's multiprocess
  directory, and the supervisor's ``/metrics`` sums them (:mod:`proxy.control.metrics_page`).

How many workers ``sidecar.workers=0`` means is decided in :mod:`proxy.control.cpus`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trio
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.config import ConfigError, HostPort, SidecarConfig
from proxy.control import handoff
from proxy.control.calls import serve_calls
from proxy.control.forks import ForkServer, WorkerProcess
from proxy.control.http import ReloadHook, serve_http
from proxy.control.metrics_page import flush, mark_dead, page_registry
from proxy.control.owner import OwnerService
from proxy.control.server import Role, Sidecar, log_drained
from proxy.datapath.clock import now_ms

log = logging.getLogger(__name__)

#: A worker that dies before it was ever ready (it cannot start: ZooKeeper unreachable, a
#: bug) is started again after this long, not in a loop.
RESTART_BACKOFF = 1.0
#: How long a stop (a second signal) waits for each worker's count of abandoned requests.
STOP_WAIT = 2.0
#: How long a scrape waits for each worker to write its metrics.
FLUSH_WAIT = 0.5
#: How long the messages a worker sent before it exited may take to be read.
LAST_WORDS = 1.0
#: Beyond the drain deadline, how long a draining worker may take to flush its observers
#: and exit before it is killed.
EXIT_MARGIN = 5.0
#: How long a reload waits for each worker to prepare it (load its TLS files, import its
#: filters) before the reload fails.
RELOAD_WAIT = 10.0


@dataclass(eq=False)
class WorkerSlot:
    """What the supervisor knows of one worker (the slot outlives the processes in it)."""

    index: int
    process: WorkerProcess | None = None
    channel: handoff.Channel | None = None
    ready: bool = False
    #: Connections handed to this worker and not yet reported closed, by id.
    connections: dict[int, trio.Event] = field(default_factory=dict)
    restarts: int = 0
    #: The requests the worker's drain abandoned, once it reported (``None`` before).
    abandoned: int | None = None
    #: Requests the worker's connections forwarded, and answers the broker gave, at its drain.
    forwarded: int = 0
    broker_answers: int = 0
    #: Set when the worker reports its metrics written (a scrape asked).
    flushed: trio.Event = field(default_factory=trio.Event)
    #: Set once the slot's current process has exited and its connections were released.
    exited: trio.Event = field(default_factory=trio.Event)
    #: Set when the worker answers a reload's prepare; its error (``None``: prepared).
    prepared: trio.Event = field(default_factory=trio.Event)
    prepare_error: str | None = None


class Supervisor:
    """The supervisor of one sidecar with several workers."""

    def __init__(self, config: SidecarConfig, count: int, metrics_dir: Path | None, forks: ForkServer) -> None:
        self.config = config
        self.forks = forks
        self.sidecar = Sidecar(config, role=Role.SUPERVISOR, hand_off=self._hand_off)
        sidecar = self.sidecar
        self.owner = OwnerService(sidecar.registry, sidecar.table_spec, sidecar.ports, sidecar.leniency)
        self.workers = [WorkerSlot(index) for index in range(count)]
        self.metrics_dir = metrics_dir
        self.metrics_address: HostPort | None = None
        #: What ``POST /-/reload`` runs (set by ``ksidecar run``).
        self.reload_hook: ReloadHook | None = None
        self.stopping = False
        #: True once a reload changed what the workers were started with: a new worker
        #: takes the configuration in force before it is ready.
        self._reloaded = False
        self._reload_lock = trio.Lock()
        self._ids = itertools.count()
        self._ready_changed = trio.Event()
        sidecar.metrics.registry.register(_WorkerMetrics(self))
        self._page = (page_registry(sidecar.metrics.registry, metrics_dir) if metrics_dir is not None
                      else sidecar.metrics.registry)

    # -- the HTTP endpoint's view (proxy.control.http.Probed) ------------------------------

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """Every process's metrics on one page."""
        return self._page

    @property
    def own_registry(self) -> CollectorRegistry:
        """The registry the supervisor's own collectors go in (read live into the page)."""
        return self.sidecar.metrics.registry

    def readiness(self) -> str | None:
        """``None`` when the supervisor and every worker are ready, else why not."""
        why = self.sidecar.readiness()
        if why is not None:
            return why
        ready = sum(worker.ready for worker in self.workers)
        return None if ready == len(self.workers) else f"{ready} of {len(self.workers)} workers ready"

    async def before_scrape(self) -> None:
        """Bring every process's numbers up to date: the supervisor's gauges, and each
        worker's changes since its last flush (the workers are asked, and waited for up to
        :data:`FLUSH_WAIT`)."""
        await self.sidecar.before_scrape()
        if self.metrics_dir is None:
            return
        flush()
        asked = []
        for worker in self.workers:
            if worker.channel is not None and worker.ready:
                worker.flushed = trio.Event()
                with contextlib.suppress(OSError):
                    await worker.channel.send({"op": "flush"})
                    asked.append(worker)
        with trio.move_on_after(FLUSH_WAIT):
            for worker in asked:
                await worker.flushed.wait()

    # -- serving -----------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[Supervisor] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind, admit, start the workers and keep them running, until cancelled (or the fork
        server is gone: :class:`~proxy.control.forks.ForkServerGone`)."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.forks.run)
                await self._serve(nursery, task_status)
        finally:
            with trio.CancelScope(shield=True):
                await self.forks.close()

    async def _serve(self, nursery: trio.Nursery, task_status: trio.TaskStatus[Supervisor]) -> None:
        await nursery.start(self.sidecar.serve)
        bound = {name: (address.host, address.port) for name, address in self.sidecar.bound.items()}
        for worker in self.workers:
            nursery.start_soon(self._keep, worker, bound)
        metrics_at: HostPort | None = self.config["sidecar.metrics.listener"]
        if metrics_at is not None:
            self.metrics_address = await nursery.start(serve_http, self, metrics_at)
        log.info("supervising %d worker process(es)", len(self.workers))
        task_status.started(self)

    async def _keep(self, worker: WorkerSlot, bound: dict[str, tuple[str, int]]) -> None:
        """Run ``worker``'s process, and a new one each time it exits (until stopping)."""
        while True:
            was_ready = await self._run(worker, bound)
            if self.stopping:
                return
            worker.restarts += 1
            if not was_ready:
                await trio.sleep(RESTART_BACKOFF)

    async def _run(self, worker: WorkerSlot, bound: dict[str, tuple[str, int]]) -> bool:
        """One process in ``worker``'s slot, until it exits; whether it was ever ready."""
        ours, theirs = handoff.pair()
        calls_ours, calls_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = await self.forks.start(worker.index, len(self.workers), bound, theirs, calls_theirs)
        finally:
            theirs.close()
            calls_theirs.close()
        worker.process, worker.abandoned, worker.exited = process, None, trio.Event()
        worker.channel = channel = handoff.Channel(ours)
        log.info("worker %d started (pid %s)", worker.index, process.pid)
        was_ready, exitcode = False, None
        calls = trio.SocketStream(trio.socket.from_stdlib_socket(calls_ours))
        connections = self.owner.worker(f"worker {worker.index}")
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_calls, calls, connections.begin, connections.name, connections.ended)
                heard_all = trio.Event()
                nursery.start_soon(self._listen, worker, channel, heard_all, nursery)
                exitcode = await process.wait()
                with trio.move_on_after(LAST_WORDS):  # what it said before exiting (its drain's count)
                    await heard_all.wait()
                nursery.cancel_scope.cancel()
        finally:
            connections.close()  # the worker's client connections ended with it
            was_ready = worker.ready
            worker.ready, worker.channel = False, None
            self._ready_changed.set()
            with trio.CancelScope(shield=True):
                if process.exitcode is None:  # cancelled (the supervisor stops): it is exiting too
                    with trio.move_on_after(LAST_WORDS):
                        await process.wait()
                process.close()
                lost = len(worker.connections)
                for done in worker.connections.values():
                    done.set()  # their KIP-612 slots come back
                worker.connections.clear()
                channel.close()
                await calls.aclose()
                if self.metrics_dir is not None:
                    mark_dead(process.pid, self.metrics_dir)
                worker.exited.set()
            if not self.stopping:
                log.error("worker %d (pid %s) exited with code %s; its %d connection(s) are lost "
                          "(their clients reconnect); starting a new worker", worker.index, process.pid,
                          "unknown" if exitcode is None else exitcode, lost)
        return was_ready

    async def _listen(self, worker: WorkerSlot, channel: handoff.Channel, heard_all: trio.Event,
                      nursery: trio.Nursery) -> None:
        """What the worker tells, until its end closes: ready, a connection closed, its drain's
        count, its clients' usage of client quotas (passed on to every other worker)."""
        while True:
            try:
                received = await channel.receive()
            except handoff.HandOffError as exc:  # never from our workers; logged, skipped
                log.error("worker %d sent what is not a message: %s", worker.index, exc)
                continue
            except OSError as exc:
                log.error("the channel to worker %d failed: %s", worker.index, exc)
                break
            if received is None:
                break
            message, fd = received
            if fd is not None:  # workers never send sockets
                os.close(fd)
            op = message["op"]
            if op == "ready" and self._reloaded:
                nursery.start_soon(self._ready_after_reload, worker, channel)
            elif op == "ready":
                self._mark_ready(worker)
            elif op == "reload-prepared":
                worker.prepare_error = message.get("error")
                worker.prepared.set()
            elif op == "closed":
                done = worker.connections.pop(int(message["id"]), None)
                if done is not None:
                    done.set()
            elif op == "ping":
                with contextlib.suppress(OSError):
                    await channel.send({"op": "pong"})
            elif op == "flushed":
                worker.flushed.set()
            elif op == "usage":
                # The sidecar-wide rates, for /metrics.
                self.sidecar.client_quotas.rates.add_usage_entries(message["usage"], now_ms())
                for other in self.workers:
                    if other is not worker and other.ready and other.channel is not None:
                        nursery.start_soon(_pass_on, other.channel, message)  # a slow worker holds up no one
            elif op == "drained":
                worker.abandoned = int(message["abandoned"])
                worker.forwarded = int(message.get("forwarded", 0))
                worker.broker_answers = int(message.get("broker_answers", 0))
        heard_all.set()

    def _mark_ready(self, worker: WorkerSlot) -> None:
        worker.ready = True
        self._ready_changed.set()
        log.info("worker %d ready", worker.index)

    async def _ready_after_reload(self, worker: WorkerSlot, channel: handoff.Channel) -> None:
        """A worker started after a reload: the configuration in force first, then ready."""
        async with self._reload_lock:
            error = await self._prepare(worker, channel, self.config)
            if error is None:
                with contextlib.suppress(OSError):
                    await channel.send({"op": "reload-commit"})
            else:
                log.error("worker %d cannot take the configuration in force (%s); it serves the one the "
                          "sidecar started with", worker.index, error)
        self._mark_ready(worker)

    async def _prepare(self, worker: WorkerSlot, channel: handoff.Channel, config: SidecarConfig) -> str | None:
        """Ask ``worker`` to prepare ``config``; its error, ``None`` when prepared."""
        worker.prepared, worker.prepare_error = trio.Event(), None
        try:
            await channel.send({"op": "reload-prepare", "raw": dict(config.raw)})
        except OSError as exc:
            return f"worker {worker.index} is gone ({exc})"
        with trio.move_on_after(RELOAD_WAIT):
            await worker.prepared.wait()
            return None if worker.prepare_error is None else f"worker {worker.index}: {worker.prepare_error}"
        return f"worker {worker.index} did not answer within {RELOAD_WAIT:g} s"

    async def apply_reload(self, config: SidecarConfig) -> None:
        """Reload every process (:class:`proxy.control.reload.Reloading`): the supervisor
        and each running worker prepare ``config``; all commit only when all prepared,
        else all drop it and :class:`~proxy.config.ConfigError` says why."""
        async with self._reload_lock:
            # From now on a worker that becomes ready takes the configuration in force
            # first (after this reload, which holds the lock, whatever it decides).
            self._reloaded = True
            prepared = self.sidecar.prepare_reload(config)
            asked = [(w, w.channel) for w in self.workers if w.ready and w.channel is not None]
            errors = [error for worker, channel in asked
                      if (error := await self._prepare(worker, channel, config)) is not None]
            verdict = "reload-abort" if errors else "reload-commit"
            for _, channel in asked:
                with contextlib.suppress(OSError):  # that worker is exiting: its replacement catches up
                    await channel.send({"op": verdict})
            if errors:
                raise ConfigError("; ".join(errors))
            self.sidecar.commit_reload(prepared)
            self.owner.ports = self.sidecar.ports
            self.config = config

    async def _least_loaded(self) -> WorkerSlot:
        """The ready worker serving the fewest connections (waits while none is ready)."""
        while True:
            ready = [w for w in self.workers if w.ready and w.channel is not None]
            if ready:
                return min(ready, key=lambda w: len(w.connections))
            self._ready_changed = changed = trio.Event()
            await changed.wait()

    async def _hand_off(self, stream: trio.SocketStream, listener: str, ip: str) -> None:
        """Give an admitted connection to a worker; return when the worker reports it closed."""
        done = trio.Event()
        try:
            worker = await self._least_loaded()
            channel = worker.channel
            assert channel is not None
            connection_id = next(self._ids)
            worker.connections[connection_id] = done
            try:
                await channel.send({"op": "connection", "id": connection_id, "listener": listener, "ip": ip},
                                   stream.socket.fileno())
            except OSError as exc:  # the worker died meanwhile: the client reconnects
                worker.connections.pop(connection_id, None)
                log.info("handing a connection from %s to worker %d failed: %s", ip, worker.index, exc)
                return
        finally:
            stream.socket.close()  # our copy: the worker's is the connection now
        await done.wait()

    # -- stopping ------------------------------------------------------------------------------

    async def drain(self) -> int:
        """Stop accepting, have every worker drain, wait for them to exit; the count abandoned."""
        self.stopping = True
        started = trio.current_time()
        self.sidecar.stop_accepting()
        log.info("draining %d worker(s) serving %d connection(s)", len(self.workers),
                 sum(len(worker.connections) for worker in self.workers))
        deadline = self.config["sidecar.shutdown.drain.ms"] / 1000 + self.config["observer.close.timeout.ms"] / 1000
        abandoned = await self._ask_all("drain", deadline + EXIT_MARGIN)
        if not abandoned and all(worker.abandoned == 0 for worker in self.workers):
            log_drained(trio.current_time() - started, sum(worker.forwarded for worker in self.workers),
                        sum(worker.broker_answers for worker in self.workers))
        return abandoned

    async def stop(self) -> int:
        """Stop every worker at once (a second signal); the count of requests abandoned."""
        self.stopping = True
        return await self._ask_all("stop", STOP_WAIT)

    def unanswered(self) -> int:
        """Requests abandoned by the workers that reported (a stop's count)."""
        return sum(worker.abandoned or 0 for worker in self.workers)

    async def _ask_all(self, op: str, wait: float) -> int:
        for worker in self.workers:
            if worker.channel is not None:
                with contextlib.suppress(OSError):  # it is exiting anyway
                    await worker.channel.send({"op": op})
        with trio.move_on_after(wait) as waited:
            for worker in self.workers:
                await worker.exited.wait()
        if waited.cancelled_caught:
            for worker in self.workers:
                if worker.process is not None and not worker.exited.is_set():
                    log.warning("worker %d did not exit within %g s; killing it", worker.index, wait)
                    worker.process.kill()
        return self.unanswered()


async def _pass_on(channel: handoff.Channel, message: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # that worker is exiting
        await channel.send(message)


class _WorkerMetrics(Collector):
    """``ksidecar_worker_*``: read live from the supervisor's view of its workers."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("ksidecar_worker_up", "1 when the worker process is running and ready.",
                               labels=["worker"])
        restarts = CounterMetricFamily("ksidecar_worker_restarts", "Worker processes started again after "
                                       "one exited (SIGKILL, an uncaught error).", labels=["worker"])
        connections = GaugeMetricFamily("ksidecar_worker_connections", "Client connections the worker serves.",
                                        labels=["worker"])
        for worker in self.supervisor.workers:
            label = [str(worker.index)]
            up.add_metric(label, 1 if worker.ready else 0)
            restarts.add_metric(label, worker.restarts)
            connections.add_metric(label, len(worker.connections))
        yield up
        yield restarts
        yield connections
