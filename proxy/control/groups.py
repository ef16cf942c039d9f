"""The embedded group coordinator's shell: the core, its timers, its ZooKeeper writer.

:class:`GroupService` owns the sans-IO :class:`~coordinator.core.GroupCoordinator` and
does what the core asks (docs/coordinator.md, "Calling the core"):

* every call returns a ``Step``; answers the core held back (``Pending``) are delivered
  when a later step carries them, whichever request's step that is;
* writes go to one writer task that commits everything queued as one ZooKeeper
  transaction (``CommitBatcher``: commits that arrive while a write is in flight go
  together in the next), then tells the core, which releases the held answers;
* one timer task sleeps until ``next_deadline()`` (re-read after every call) and calls
  ``on_timer``: session expiry, rebalance timeouts, the initial rebalance delay;
* one metadata task asks the broker for the topics the groups subscribe to, every
  ``sidecar.coordinator.metadata.refresh.ms`` and at once when a subscription changes.

The core reads no clock; ``clock`` (milliseconds since the epoch, wall time by default)
is injectable, so the shell runs under trio's virtual clock in tests.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

import trio
from kazoo.exceptions import KazooException
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.batching import CommitBatcher, flatten
from coordinator.core import GroupCoordinator
from coordinator.outcome import Response, Step
from coordinator.settings import CoordinatorSettings
from coordinator.store import GroupStore, StoreError
from coordinator.topics import TopicInfo, TopicsSnapshot
from proxy.control.zk import ZooKeeper
from proxy.local.ports import GroupCall, Pending

log = logging.getLogger(__name__)

def wall_ms() -> int:
    """Milliseconds since the Unix epoch."""
    return int(time.time() * 1000)


class MetadataSource(Protocol):
    """Where topic partition counts come from (the broker, over a control connection)."""

    async def topics(self, names: set[str] | None) -> list[TopicInfo]:
        """The broker's topics: ``names`` only, or all of them (``None``)."""
        ...


class GroupMetrics:
    """The coordinator's Prometheus metrics."""

    def __init__(self, registry: CollectorRegistry, service: GroupService) -> None:
        self.rebalances = Counter(
            "ksidecar_group_rebalances", "Group rebalances completed, by protocol (classic, "
            "consumer).", ["protocol"], registry=registry)
        self.rebalance_seconds = Histogram(
            "ksidecar_group_rebalance_duration_seconds", "From a group leaving Stable (or "
            "Empty) until Stable again, by protocol.", ["protocol"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300), registry=registry)
        self.commits = Counter(
            "ksidecar_offset_commit_writes", "ZooKeeper transactions that committed offsets or "
            "group records, by result (ok, failed).", ["result"], registry=registry)
        self.write_seconds = Histogram(
            "ksidecar_offset_commit_write_seconds", "Time to write one batch of offsets and "
            "group records to ZooKeeper.", buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1, 0.25, 0.5, 1, 2.5),
            registry=registry)
        self.handling = Histogram(
            "ksidecar_group_request_handling_seconds", "Time the coordinator core took to "
            "decide one group request (a Heartbeat, a JoinGroup, ...), waits excluded, by API.",
            ["api"], buckets=(0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                              0.005, 0.01, 0.025, 0.1), registry=registry)
        registry.register(_GroupCollector(service))


class _GroupCollector(Collector):
    def __init__(self, service: GroupService) -> None:
        self.service = service

    def collect(self) -> Any:
        stats = self.service.core.statistics()
        groups = GaugeMetricFamily("ksidecar_groups", "Consumer groups by protocol and state.",
                                   labels=["protocol", "state"])
        members = GaugeMetricFamily("ksidecar_group_members", "Members of all groups.")
        for name, count in sorted(stats.items()):
            if "." in name:
                protocol, _, state = name.partition(".")
                groups.add_metric([protocol, state], count)
            elif name == "members":
                members.add_metric([], count)
        yield groups
        yield members


class GroupService:
    """The embedded coordinator of one sidecar (the :class:`~proxy.local.ports.GroupPort`)."""

    def __init__(
        self,
        settings: CoordinatorSettings,
        zk: ZooKeeper,
        metadata: MetadataSource,
        address: Callable[[str], tuple[int, str, int]],
        registry: CollectorRegistry,
        *,
        refresh_interval: float = 10.0,
        clock: Callable[[], int] = wall_ms,
        store: GroupStore | None = None,
    ) -> None:
        self.clock = clock
        self.core = GroupCoordinator(settings, now=clock())
        self.zk = zk
        self.store = store if store is not None else GroupStore(zk.client)
        self.metadata = metadata
        self._address = address
        self.refresh_interval = refresh_interval
        self.metrics = GroupMetrics(registry, self)
        self._pending: dict[int, Pending[Response]] = {}
        self._batcher = CommitBatcher()
        self._writes_queued = trio.Event()
        self._deadline_changed = trio.Event()
        self._refresh_now = trio.Event()

    # -- the port ------------------------------------------------------------------------

    def run(self, call: GroupCall, api: str = "") -> Response | Pending[Response]:
        """Run ``call`` on the core: its answer now, or a pending one."""
        started = time.perf_counter()
        step = call(self.core, self.clock())
        self.metrics.handling.labels(api or "other").observe(time.perf_counter() - started)
        pending: Pending[Response] | None = None
        if step.response is None:
            # Registered before the step's answers are delivered: a step may answer the very
            # request it parked (a leader's SyncGroup completes its own, and the others').
            assert step.ticket is not None
            pending = self._pending[step.ticket] = Pending()
        response = self._apply(step)
        if response is not None:
            return response
        assert pending is not None
        return pending

    def coordinator_address(self, listener: str) -> tuple[int, str, int]:
        """``(node id, host, port)`` this sidecar advertises on ``listener``."""
        return self._address(listener)

    def subscriptions_changed(self) -> None:
        """A KIP-848 member changed its subscription: refresh metadata now."""
        self._refresh_now.set()

    def _apply(self, step: Step[Any]) -> Response | None:
        for answer in step.answers:
            pending = self._pending.pop(answer.ticket, None)
            if pending is not None:  # else its connection has gone: dropped
                pending.set(answer.response)
        if step.writes:
            for write_set in step.writes:
                self._batcher.add(write_set)
            self._writes_queued.set()
        for rebalance in step.rebalances:
            self.metrics.rebalances.labels(rebalance.protocol).inc()
            self.metrics.rebalance_seconds.labels(rebalance.protocol).observe(rebalance.duration_ms / 1000)
        self._deadline_changed.set()
        response: Response | None = step.response
        return response

    # -- the tasks -----------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the groups from ZooKeeper, then run the writer, timer and metadata tasks."""
        loaded = await self.zk.call(self.store.load)
        self.core.load(loaded, self.clock())
        if loaded:
            log.info("coordinator resumed %d group(s) from ZooKeeper; their members have one "
                     "session timeout to come back", len(loaded))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer)
            nursery.start_soon(self._timers)
            nursery.start_soon(self._refresh_topics)
            task_status.started()

    async def _writer(self) -> None:
        while True:
            batch = self._batcher.take()
            if not batch:
                await self._writes_queued.wait()
                self._writes_queued = trio.Event()
                continue
            started = trio.current_time()
            try:
                await self.zk.call(self.store.apply, flatten(batch))
                ok = True
            except (StoreError, KazooException) as exc:
                log.warning("coordinator: ZooKeeper write of %d write set(s) failed: %s; the "
                            "clients are answered COORDINATOR_NOT_AVAILABLE and retry", len(batch), exc)
                ok = False
            self.metrics.write_seconds.observe(trio.current_time() - started)
            self.metrics.commits.labels("ok" if ok else "failed").inc()
            self._batcher.done()
            for write_set in batch:
                if write_set.ticket is not None:
                    self._apply(self.core.writes_done(write_set.ticket, self.clock(), ok=ok))

    async def _timers(self) -> None:
        while True:
            self._deadline_changed = trio.Event()
            deadline = self.core.next_deadline()
            if deadline is not None and deadline <= self.clock():
                self._apply(self.core.on_timer(self.clock()))
                continue
            wait = math.inf if deadline is None else (deadline - self.clock()) / 1000
            with trio.move_on_after(wait):
                await self._deadline_changed.wait()

    async def _refresh_topics(self) -> None:
        while True:
            names, everything = self.core.wanted_topics()
            if names or everything:
                try:
                    found = await self.metadata.topics(None if everything else names)
                except Exception as exc:  # the broker may be away: keep the last snapshot
                    log.warning("coordinator: topic metadata refresh failed: %s", exc)
                else:
                    self._apply(self.core.update_topics(TopicsSnapshot.of(found), self.clock()))
            with trio.move_on_after(self.refresh_interval):
                await self._refresh_now.wait()
            self._refresh_now = trio.Event()
