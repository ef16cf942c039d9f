"""The embedded group coordinator's shell: the core, its timers, its ZooKeeper writer.

:class:`GroupService` owns the sans-IO :class:`~coordinator.core.GroupCoordinator` and
does what the core asks (docs/coordinator.md, "Calling the core"):

* every call returns a ``Step``; answers the core held back (``Pending``) are delivered
  when a later step carries them, whichever request's step that is;
* writes go to one writer task that commits everything queued as one ZooKeeper
  transaction (``CommitBatcher``: commits that arrive while a write is in flight go
  together in the next), then tells the core, which releases the held answers;
* one timer task sleeps until ``next_deadline()`` (woken when a call arms an earlier one) and calls
  ``on_timer``: session expiry, rebalance timeouts, the initial rebalance delay, and the
  tick of batched KIP-848 assignment (due at once: it runs after the requests already
  runnable, so a burst of joins shares one target assignment);
* one metadata task asks the broker for the topics the groups subscribe to, every
  ``sidecar.coordinator.metadata.refresh.ms`` and at once when a subscription changes.

In a fleet (``fleet=True``, the default) each group is served by one sidecar
(docs/coordinator.md, "Groups over the fleet"): a watch over ``/brokers/ids`` keeps the
core's :class:`~coordinator.fleet.Fleet` view of the live sidecars; a placement task
claims the groups the placement gives this sidecar (:class:`~coordinator.claims.GroupClaims`)
and loads each from ZooKeeper before serving it, and hands over those it moved away (stop
serving, let the writes in flight finish, release the claim). Every write carries the
claim's version in its transaction. The session task fences: SUSPENDED refuses writes,
LOST drops every group.

The core reads no clock; ``clock`` (milliseconds since the epoch, wall time by default)
is injectable, so the shell runs under trio's virtual clock in tests.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import trio
from kazoo.client import KazooState
from kazoo.exceptions import KazooException, NoNodeError
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.batching import CommitBatcher, flatten
from coordinator.claims import GroupClaims
from coordinator.core import GroupCoordinator
from coordinator.fleet import Endpoints, Fleet
from coordinator.messages.common import TopicAccess
from coordinator.outcome import Response, Step, WriteSet
from coordinator.settings import CoordinatorSettings
from coordinator.store import GroupStore, StoreError
from coordinator.topics import TopicInfo, TopicsSnapshot
from proxy.control.group_configs import GroupConfigs
from proxy.control.registration import IDS_PATH, endpoints_of, parse_registration
from proxy.control.zk import ZooKeeper
from proxy.datapath.slices import SLICE, Slicer
from proxy.local.ports import GroupCall, Pending

log = logging.getLogger(__name__)

#: The least time between two target assignments of a KIP-848 group (batched mode): joins
#: arriving within it share one assignor run (tests/bench/RESULTS.md, issue 16).
ASSIGNMENT_INTERVAL_MS = 200


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
        self.topic_refresh_seconds = Histogram(
            "ksidecar_coordinator_topic_refresh_seconds", "One topic metadata refresh of the "
            "embedded coordinator: the broker's Metadata answer read, every KIP-848 group's "
            "subscription checked against it (in slices, other connections served between them).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=registry)
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
        fleet = self.service.fleet
        if fleet is not None:
            owned = GaugeMetricFamily("ksidecar_groups_owned", "Groups this sidecar has claimed "
                                      "and serves (the fleet spreads groups over the sidecars).")
            owned.add_metric([], len(fleet.held))
            yield owned
            live = GaugeMetricFamily("ksidecar_coordinator_fleet_sidecars",
                                     "Live sidecars registered in ZooKeeper, as this one sees them.")
            live.add_metric([], len(fleet.live))
            yield live


@dataclass(kw_only=True, slots=True)
class _Waiting:
    """A request held until this sidecar claims its groups."""

    call: GroupCall
    api: str
    pending: Pending[Response]
    groups: tuple[str, ...]
    until: float


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
        recheck_slice: float = SLICE,
        clock: Callable[[], int] = wall_ms,
        store: GroupStore | None = None,
        fleet: bool = True,
        claim_retry: float = 0.2,
        claim_wait: float = 5.0,
        topic_access: TopicAccess | None = None,
        group_configs: GroupConfigs | None = None,
    ) -> None:
        self.clock = clock
        #: Group configs in ZooKeeper: a KIP-848 group's own session timeout and heartbeat
        #: interval (``None``: the key table's for every group).
        self.group_configs = group_configs
        # Batched KIP-848 assignment (docs/coordinator.md): the timer task runs its ticks (a
        # due tick runs as soon as the requests already runnable are handled).
        #: The fleet view (``None``: this sidecar serves every group, alone).
        self.fleet = Fleet() if fleet else None
        # topic_access: KIP-848 regexes resolve only to topics the member may Describe.
        self.core = GroupCoordinator(replace(settings, consumer_assignment_batching=True,
                                             consumer_assignment_interval_ms=ASSIGNMENT_INTERVAL_MS), now=clock(),
                                     topic_access=topic_access, fleet=self.fleet,
                                     group_timeouts=self._timeouts if group_configs is not None else None)
        self.zk = zk
        if store is not None:
            self.store = store
        elif self.fleet is not None:
            self.store = GroupStore(zk.client, guards=self._guard)
        else:
            self.store = GroupStore(zk.client)
        self.claims: GroupClaims | None = None
        self.claim_retry = claim_retry
        #: How long a request may wait for its group's claim before it is answered anyway.
        self.claim_wait = claim_wait
        self._waiting: list[_Waiting] = []
        self.metadata = metadata
        self._address = address
        self.refresh_interval = refresh_interval
        #: CPU seconds of group rechecks after a refresh before other tasks get a turn.
        self.recheck_slice = recheck_slice
        self.metrics = GroupMetrics(registry, self)
        self._pending: dict[int, Pending[Response]] = {}
        self._batcher = CommitBatcher()
        self._writes_queued = trio.Event()
        self._deadline_changed = trio.Event()
        #: The deadline (ms) the timer task sleeps until; a step that arms an earlier one wakes it.
        self._sleeping_until: float = -math.inf
        self._refresh_now = trio.Event()
        self._place_now = trio.Event()
        self._placed = trio.Event()
        #: Counts lost sessions: a claim made on an earlier session is not adopted.
        self._sessions_lost = 0
        self._rescan = True
        self._writer_idle = trio.Event()
        self._writer_idle.set()
        #: Hand-overs done and their durations (seconds), for tests and logs.
        self.handovers: list[tuple[str, float]] = []

    # -- the port ------------------------------------------------------------------------

    def run(self, call: GroupCall, api: str = "", group_ids: tuple[str, ...] = ()) -> Response | Pending[Response]:
        """Run ``call`` (about the groups ``group_ids``) on the core: its answer now, or a
        pending one.

        In a fleet, a call about a group the placement gives this sidecar but that is not
        claimed yet waits (up to :attr:`claim_wait` seconds) for the claim, instead of being
        answered COORDINATOR_LOAD_IN_PROGRESS: a client's first request for a new group
        usually follows its FindCoordinator by a millisecond, and a claim takes a few.
        """
        if self.fleet is not None:
            waiting_for = self._unclaimed(group_ids)
            if waiting_for:
                for group_id in waiting_for:
                    self.fleet.want(group_id)
                pending: Pending[Response] = Pending()
                self._waiting.append(_Waiting(call=call, api=api, pending=pending, groups=group_ids,
                                              until=trio.current_time() + self.claim_wait))
                self._place_now.set()
                return pending
        return self._run(call, api)

    def _unclaimed(self, groups: tuple[str, ...]) -> tuple[str, ...]:
        """Those of ``groups`` the placement gives this sidecar that it has not claimed yet."""
        assert self.fleet is not None
        fleet = self.fleet
        if fleet.me is None:
            return ()
        return tuple(g for g in groups if g not in fleet.held and fleet.owner(g) == fleet.me)

    def _run(self, call: GroupCall, api: str, into: Pending[Response] | None = None) -> Response | Pending[Response]:
        started = time.perf_counter()
        step = call(self.core, self.clock())
        self.metrics.handling.labels(api or "other").observe(time.perf_counter() - started)
        pending: Pending[Response] | None = None
        if step.response is None:
            # Registered before the step's answers are delivered: a step may answer the very
            # request it parked (a leader's SyncGroup completes its own, and the others').
            assert step.ticket is not None
            pending = self._pending[step.ticket] = into if into is not None else Pending()
        response = self._apply(step)
        if self.fleet is not None and self.fleet.has_wanted():
            self._place_now.set()
        if response is not None:
            return response
        assert pending is not None
        return pending

    def coordinates(self, group_id: str) -> bool:
        """Whether the fleet's placement names this sidecar ``group_id``'s coordinator (always
        alone, and before this sidecar sees its own registration)."""
        fleet = self.fleet
        if fleet is None or fleet.me is None:
            return True
        chosen = fleet.owner(group_id)
        return chosen is None or chosen == fleet.me

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
        self._wake_timers()
        response: Response | None = step.response
        return response

    # -- the tasks -----------------------------------------------------------------------

    def _timeouts(self, group_id: str) -> tuple[int, int]:
        assert self.group_configs is not None
        effective = self.group_configs.effective(group_id)
        return effective.consumer_session_timeout_ms, effective.consumer_heartbeat_interval_ms

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the groups from ZooKeeper (alone: all of them; in a fleet: those the
        placement gives this sidecar, once claimed), then run the writer, timer and
        metadata tasks, and in a fleet the watch, placement and session tasks."""
        if self.group_configs is not None:
            await self.group_configs.start()
        if self.fleet is None:
            loaded = await self.zk.call(self.store.load)
            self.core.load(loaded, self.clock())
            if loaded:
                log.info("coordinator resumed %d group(s) from ZooKeeper; their members have one "
                         "session timeout to come back", len(loaded))
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                nursery.start_soon(self._timers)
                nursery.start_soon(self._refresh_topics)
                if self.fleet is not None:
                    states = self.zk.states()
                    await self.zk.call(self.zk.client.ensure_path, IDS_PATH)
                    self.zk.client.ChildrenWatch(IDS_PATH, self._children_changed)
                    nursery.start_soon(self._session, states)
                    nursery.start_soon(self._place)
                    # Start serving once this sidecar has seen itself registered and made
                    # its first claims (or after a while: requests then get LOAD_IN_PROGRESS).
                    with trio.move_on_after(self.zk.session_timeout):
                        await self._placed.wait()
                task_status.started()
        finally:
            if self.fleet is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await self._release_all()

    # -- the fleet -----------------------------------------------------------------------

    def _guard(self, group_id: str) -> tuple[str, int] | None:
        """The claim check a write for ``group_id`` carries (``None``: not ours)."""
        assert self.fleet is not None
        version = self.fleet.held.get(group_id)
        if version is None or self.claims is None:
            return None
        return self.claims.guard(group_id, version)

    def _children_changed(self, children: list[str]) -> bool:
        # kazoo thread: read every registration; ours is the one our session owns.
        client = self.zk.client
        session = client.client_id[0] if client.client_id else None
        live: dict[int, Endpoints] = {}
        me: int | None = None
        for child in children:
            if not child.lstrip("-").isdigit():
                continue
            try:
                raw, stat = client.get(f"{IDS_PATH}/{child}")
            except (NoNodeError, KazooException):
                continue
            body = parse_registration(raw)
            if body is None:
                continue
            node_id = int(child)
            live[node_id] = {name: (a.host, a.port) for name, a in endpoints_of(body).items()}
            if session is not None and stat.ephemeralOwner == session:
                me = node_id
        return bool(self.zk.deliver(self._live_changed)(live, me))

    def _live_changed(self, live: dict[int, Endpoints], me: int | None) -> None:
        assert self.fleet is not None
        before = (sorted(self.fleet.live), self.fleet.me)
        self.fleet.set_live(live, me)
        if me is not None and (self.claims is None or self.claims.node_id != me):
            self.claims = GroupClaims(self.zk.client, me)
        if (sorted(live), me) != before:
            log.info("coordinator: live sidecars %s (this one: %s)", sorted(live), me)
            self._rescan = True
            self._place_now.set()

    async def _session(self, states: trio.MemoryReceiveChannel[str]) -> None:
        assert self.fleet is not None
        async for state in states:
            if state == KazooState.SUSPENDED:
                self.fleet.suspended = True
                log.warning("coordinator: ZooKeeper session suspended; commits are refused until "
                            "it is back")
            elif state == KazooState.LOST:
                self.fleet.suspended = False
                self._sessions_lost += 1
                dropped = sorted(self.fleet.held)
                for group_id in dropped:
                    self._drop(group_id)
                self.store.forget()
                log.warning("coordinator: ZooKeeper session lost; dropped %d group(s), their "
                            "claims are gone", len(dropped))
                self._rescan = True
                self._place_now.set()
            else:
                self.fleet.suspended = False
                self._rescan = True
                self._place_now.set()

    def _drop(self, group_id: str) -> None:
        assert self.fleet is not None
        self.fleet.released(group_id)
        self._apply(self.core.release(group_id))

    async def _place(self) -> None:
        """Claim the groups the placement gives this sidecar; hand over the others."""
        assert self.fleet is not None
        while True:
            self._place_now = trio.Event()
            retry = False
            try:
                for group_id in self.fleet.misplaced():
                    await self._hand_over(group_id)
                candidates = self.fleet.take_wanted()
                if self._rescan and self.fleet.me is not None:
                    self._rescan = False
                    candidates |= set(await self.zk.call(self.store.group_ids))
                for group_id in self.fleet.mine(candidates):
                    if not await self._claim(group_id):
                        retry = True
                        self.fleet.code(group_id)  # keep it wanted
            except (KazooException, StoreError) as exc:
                log.warning("coordinator: placement step failed (%s); retrying", exc)
                retry = True
                self._rescan = True
            if self.fleet.me is not None:
                self._placed.set()
            self._release_waiting()
            if self._waiting:
                retry = True
            with trio.move_on_after(self.claim_retry if retry or self.fleet.me is None else math.inf):
                await self._place_now.wait()

    async def _claim(self, group_id: str) -> bool:
        """Claim and load ``group_id``; False if another live session holds it."""
        assert self.fleet is not None and self.claims is not None
        claims = self.claims
        began = trio.current_time()
        session = self._sessions_lost
        version = await self.zk.call(claims.claim, group_id)
        if version is None:
            return False
        try:
            self.store.forget(group_id)
            loaded = await self.zk.call(self.store.load_group, group_id)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.zk.call(claims.release, group_id)
            raise
        if session != self._sessions_lost:  # the session (and the claim with it) went meanwhile
            return False
        if self.fleet.owner(group_id) != self.fleet.me:  # the fleet changed meanwhile
            await self.zk.call(claims.release, group_id)
            return True
        self.core.adopt(loaded, group_id, self.clock())
        self.fleet.claimed(group_id, version)
        self._wake_timers()
        self._release_waiting()
        took = trio.current_time() - began
        log.info("coordinator: serving group %r (claim version %d, %s, %.0f ms)", group_id, version,
                 "loaded from ZooKeeper" if loaded is not None else "new", took * 1000)
        return True

    def _release_waiting(self) -> None:
        """Run the held requests whose groups are claimed now, no longer this sidecar's,
        or that waited long enough (these get the core's answer: LOAD_IN_PROGRESS)."""
        if not self._waiting:
            return
        now = trio.current_time()
        still: list[_Waiting] = []
        ready: list[_Waiting] = []
        for waiting in self._waiting:
            (ready if now >= waiting.until or not self._unclaimed(waiting.groups) else still).append(waiting)
        self._waiting = still
        for waiting in ready:
            outcome = self._run(waiting.call, waiting.api, into=waiting.pending)
            if not isinstance(outcome, Pending):
                waiting.pending.set(outcome)

    async def _hand_over(self, group_id: str) -> None:
        """Stop serving ``group_id``, let the writes in flight finish, release the claim."""
        assert self.claims is not None
        began = trio.current_time()
        self._drop(group_id)
        await self._writer_idle.wait()
        await self.zk.call(self.claims.release, group_id)
        self.handovers.append((group_id, trio.current_time() - began))
        log.info("coordinator: handed group %r over (it now belongs to sidecar %s)", group_id,
                 self.fleet.owner(group_id) if self.fleet is not None else None)

    async def _release_all(self) -> None:
        """At shutdown: write what is queued, then give every claim up (the next owners
        need not wait for this session to expire)."""
        assert self.fleet is not None
        batch = self._batcher.take() if not self._batcher.in_flight else None
        if batch:
            writes = [w for w in flatten(batch) if self._guard(w.group_id) is not None]
            try:
                await self.zk.call(self.store.apply, writes)
            except (StoreError, KazooException) as exc:
                log.warning("coordinator: last writes before shutdown failed: %s", exc)
        held = sorted(self.fleet.held)
        for group_id in held:
            self._drop(group_id)
        for waiting in self._waiting:  # answered now (NOT_COORDINATOR or LOAD_IN_PROGRESS)
            waiting.until = -math.inf
        self._release_waiting()
        claims = self.claims
        if claims is not None and self.zk.client.connected:
            for group_id in held:
                try:
                    await self.zk.call(claims.release, group_id)
                except KazooException:
                    break
        if held:
            log.info("coordinator: released %d group(s) at shutdown", len(held))

    async def _writer(self) -> None:
        while True:
            batch = self._batcher.take()
            if not batch:
                await self._writes_queued.wait()
                self._writes_queued = trio.Event()
                continue
            self._writer_idle = trio.Event()
            started = trio.current_time()
            batch, refused = self._claimed_only(batch)
            try:
                if batch:
                    await self.zk.call(self.store.apply, flatten(batch))
                ok = True
            except (StoreError, KazooException) as exc:
                log.warning("coordinator: ZooKeeper write of %d write set(s) failed: %s; the "
                            "clients are answered COORDINATOR_NOT_AVAILABLE and retry", len(batch), exc)
                ok = False
            self.metrics.write_seconds.observe(trio.current_time() - started)
            self.metrics.commits.labels("ok" if ok else "failed").inc()
            self._batcher.done()
            self._writer_idle.set()
            for write_set in batch:
                if write_set.ticket is not None:
                    self._apply(self.core.writes_done(write_set.ticket, self.clock(), ok=ok))
            for write_set in refused:
                if write_set.ticket is not None:
                    self._apply(self.core.writes_done(write_set.ticket, self.clock(), ok=False))

    def _claimed_only(self, batch: tuple[WriteSet, ...]) -> tuple[tuple[WriteSet, ...], tuple[WriteSet, ...]]:
        """Split a batch: write sets whose groups are all claimed here, and the rest (groups
        handed over or dropped since they were queued: refused without a write)."""
        if self.fleet is None:
            return batch, ()
        held = self.fleet.held
        ok: list[WriteSet] = []
        refused: list[WriteSet] = []
        for write_set in batch:
            groups = {w.group_id for w in write_set.writes}
            (ok if groups <= held.keys() else refused).append(write_set)
        return tuple(ok), tuple(refused)

    def _wake_timers(self) -> None:
        """Wake the timer task if the core's next deadline is now earlier than the one it
        sleeps until. Most steps only move deadlines later (a heartbeat pushes its member's
        session on), and waking for each cost a task switch and a cancel scope per
        heartbeat (with 5,000 members, 1,667 a second, each scope kept by trio until its
        deadline: most of what the garbage collector's full passes walked)."""
        deadline = self.core.next_deadline()
        if deadline is not None and deadline < self._sleeping_until:
            self._deadline_changed.set()

    async def _timers(self) -> None:
        while True:
            self._deadline_changed = trio.Event()
            deadline = self.core.next_deadline()
            if deadline is not None and deadline <= self.clock():
                self._apply(self.core.on_timer(self.clock()))
                continue
            self._sleeping_until = math.inf if deadline is None else deadline
            wait = math.inf if deadline is None else (deadline - self.clock()) / 1000
            with trio.move_on_after(wait):
                await self._deadline_changed.wait()
            self._sleeping_until = -math.inf  # awake: every change is looked at anyway

    async def _recheck(self, topics: TopicsSnapshot) -> None:
        """Install new topic metadata and recheck every KIP-848 group's subscription against
        it, :attr:`recheck_slice` seconds of work at a time with a scheduler pass between
        slices: 200 groups subscribed by regex to 5,000 topics take a few hundred
        milliseconds, which no connection of the sidecar may wait for in one piece."""
        slicer = Slicer(self.recheck_slice)
        for group_id in self.core.install_topics(topics):
            self._apply(self.core.recheck_topics((group_id,), self.clock()))
            await slicer.turn()

    async def _refresh_topics(self) -> None:
        while True:
            names, everything = self.core.wanted_topics()
            if names or everything:
                began = time.perf_counter()
                try:
                    found = await self.metadata.topics(None if everything else names)
                except Exception as exc:  # the broker may be away: keep the last snapshot
                    log.warning("coordinator: topic metadata refresh failed: %s", exc)
                else:
                    await self._recheck(TopicsSnapshot.of(found, previous=self.core.topics))
                    self.metrics.topic_refresh_seconds.observe(time.perf_counter() - began)
            with trio.move_on_after(self.refresh_interval):
                await self._refresh_now.wait()
            self._refresh_now = trio.Event()
