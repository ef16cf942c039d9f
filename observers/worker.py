"""One observer, its bounded queue, and the loop that feeds it.

Theory of operation. The data path appends each :class:`~observers.exchange.Exchange` to
every observer's queue (:meth:`Worker.offer`: a deque, no lock, never a wait). The
worker's loop (:meth:`Worker.run_due`) takes exchanges off the queue, decodes the bodies
into views if the observer :meth:`~observers.api.Observer.wants` them and calls
``record_request`` then ``record_response`` — or hands the exchange as it is to an
observer's ``record_exchange`` — and calls the observer's ``tick`` every
:data:`~observers.api.TICK_INTERVAL` seconds of the worker's clock.

The loop itself knows no thread and no real time: it reads an injected clock and says when
it next has something to do. In the sidecar a thread runs it (:meth:`Worker.start`) and
sleeps in between; a test may run it from a trio task under ``MockClock`` instead, and so
drive ticks in virtual time (tests/observers/test_hub.py).

A worker with an empty queue sleeps until :data:`WAKE_BATCH` exchanges wait or its next
tick, whichever comes first, and then works through the queue in one run: the worker
shares the GIL with the event loop, and waking it for every exchange cost the data path
more than the observer's own work did (tests/bench/RESULTS.md).

Queue depth. ``ksidecar_observer_queue_depth`` is set, not computed at scrape time (the
scrape may happen in another process: prometheus_client's multiprocess mode). The loop
sets it after each run (so at least every tick), and :meth:`Worker.offer` at every
:data:`WAKE_BATCH` exchanges and whenever the queue is full: a stalled observer, whose
loop sets nothing, shows its queue filling and full. Not per exchange: each set takes a
lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from observers.api import ERROR_LOG_INTERVAL, TICK_INTERVAL
from observers.exchange import Exchange
from protocol.apis import ApiRegistry
from protocol.leniency import QUIET
from protocol.views import StructView

log = logging.getLogger(__name__)

#: Seconds, as the hub and its workers read them (``time.time`` in the sidecar).
Clock = Callable[[], float]

DEFAULT_QUEUE_CAPACITY = 10000
#: An idle worker is woken when this many exchanges wait (at most half its queue), else
#: by its next tick: waking a thread per exchange cost more than the work it was woken for
#: (tests/bench/RESULTS.md).
WAKE_BATCH = 256
DEFAULT_BLOCK_MAX_MS = 5000
OVERFLOW_POLICIES = ("drop", "block")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """How one observer's queue behaves."""

    capacity: int = DEFAULT_QUEUE_CAPACITY
    overflow: str = "drop"
    block_max: float = DEFAULT_BLOCK_MAX_MS / 1000


class HubMetrics:
    """The hub's metrics (names fixed: dashboards and alerts use them)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.records = Counter(
            "ksidecar_observer_records", "Exchanges (request and response) handed to each "
            "observer.", ["observer"], registry=r)
        self.dropped = Counter(
            "ksidecar_observer_dropped", "Exchanges an observer never saw because its queue "
            "was full.", ["observer"], registry=r)
        self.errors = Counter(
            "ksidecar_observer_errors", "Exceptions raised by an observer (each is caught; "
            "the data path is unaffected).", ["observer"], registry=r)
        # livesum: each worker process has its own queue per observer; the sidecar's
        # backlog is their sum (as its records and drops are).
        self.queue_depth = Gauge(
            "ksidecar_observer_queue_depth", "Exchanges waiting in an observer's queue.",
            ["observer"], multiprocess_mode="livesum", registry=r)


_STOP = object()


class Worker:
    """An observer, its bounded queue and the loop that feeds it (module docstring)."""

    def __init__(
        self, observer: Any, name: str, settings: Settings, apis: ApiRegistry,
        metrics: HubMetrics, *, clock: Clock = time.time,
    ) -> None:
        self.observer = observer
        self.name = name
        self.settings = settings  # replaced whole by use() (a reload)
        self.apis = apis
        self.clock = clock
        self.capacity = settings.capacity
        #: The bounded queue: a deque (appends and pops are atomic under the GIL, no lock
        #: on the data path) and an event set only when the worker sleeps.
        self.items: deque[object] = deque()
        self._wake = threading.Event()
        self._idle = False
        self.records = metrics.records.labels(name)
        self.dropped = metrics.dropped.labels(name)
        self.errors = metrics.errors.labels(name)
        #: ``ksidecar_observer_queue_depth``, set where the depth is looked at (module
        #: docstring, "Queue depth"), not read by a callback: prometheus_client's
        #: multiprocess mode (several sidecar workers) keeps no callback's value.
        self.depth = metrics.queue_depth.labels(name)
        self.depth.set(0)
        #: Queued exchanges that wake an idle worker (else it wakes on its next tick).
        self.wake_at = max(1, min(WAKE_BATCH, self.capacity // 2))
        self._wants: dict[tuple[int, int], bool] = {}
        #: ``record_exchange`` of an observer that takes raw exchanges (observers.api).
        self._raw: Callable[[Exchange], object] | None = getattr(observer, "record_exchange", None)
        if hasattr(observer, "hub_errors"):  # failures it counts itself (observers.api)
            observer.hub_errors = self.errors
        self._last_log = -ERROR_LOG_INTERVAL
        self._unlogged = 0
        self.thread = threading.Thread(target=self._run, name=f"observer-{name}", daemon=True)
        #: When ``close`` must be done by (on :attr:`clock`), set before the stop marker.
        self.deadline = 0.0
        #: When the observer's next ``tick`` is due (on :attr:`clock`).
        self.next_tick = clock() + TICK_INTERVAL
        #: True once the observer is closed: nothing else is delivered.
        self.stopped = False

    # -- on the data path --------------------------------------------------------------


    def use(self, settings: Settings) -> None:
        """New queue settings (a reload): the bound, the overflow policy and how long a
        block may last, from the next exchange offered; what is queued stays queued."""
        self.settings = settings
        self.capacity = settings.capacity
        self.wake_at = max(1, min(WAKE_BATCH, settings.capacity // 2))
    def offer(self, exchange: Exchange) -> bool:
        """Queue ``exchange`` if there is room (never blocks)."""
        items = self.items
        if len(items) >= self.capacity:
            self.depth.set(len(items))  # dropping (or waiting) already costs a lock
            return False
        items.append(exchange)
        depth = len(items)
        if depth >= self.capacity or not depth % WAKE_BATCH:
            self.depth.set(depth)  # a stalled observer's full queue shows (module docstring)
        if self._idle and depth >= self.wake_at:
            self._wake.set()
        return True

    def stop(self, deadline: float) -> None:
        """Ask the worker to finish what is queued, close the observer and end (``deadline``
        on :attr:`clock`)."""
        self.deadline = deadline
        self.items.append(_STOP)
        self._wake.set()

    # -- the loop ----------------------------------------------------------------------

    def start(self) -> None:
        """Run the loop on the worker's own thread."""
        self.next_tick = self.clock() + TICK_INTERVAL
        self.thread.start()

    def run_due(self) -> float | None:
        """Deliver what is queued and tick if a tick is due; return when the next tick is
        due (on :attr:`clock`), or ``None`` once the observer is closed.

        A long queue is worked through in runs that end at each due tick, so ticks keep
        their cadence under load.
        """
        if self.stopped:
            return None
        items, clock = self.items, self.clock
        delivered = 0
        while items:
            item = items.popleft()
            if item is _STOP:
                self.records.inc(delivered)
                self._call(self.observer.close, max(0.0, self.deadline - clock()))
                self.stopped = True
                self.depth.set(len(items))
                return None
            assert isinstance(item, Exchange)
            self.deliver(item)
            delivered += 1
            if clock() >= self.next_tick:
                break
        if delivered:  # counted per run, not per exchange: the counter takes a lock
            self.records.inc(delivered)
        now = clock()
        if now >= self.next_tick:
            self._call(self.observer.tick, now)
            self.next_tick = now + TICK_INTERVAL
        self.depth.set(len(items))
        return self.next_tick

    def _run(self) -> None:
        wake, clock = self._wake, self.clock
        try:
            while True:
                due = self.run_due()
                if due is None:
                    return
                self._idle = True
                if not self.items:  # re-checked after announcing sleep: no wake-up is missed
                    wake.wait(max(0.0, due - clock()))
                    wake.clear()
                self._idle = False
        except BaseException:  # pragma: no cover - _call catches every Exception
            log.exception("observer %s: worker thread died", self.name)
            raise

    # -- one exchange ------------------------------------------------------------------

    def deliver(self, x: Exchange) -> None:
        """Decode what the observer wants and make the two calls (exceptions counted), or
        hand the exchange whole to an observer that reads frames itself. The caller counts
        it in ``ksidecar_observer_records_total``."""
        if self._raw is not None:
            self._call(self._raw, x)
            return
        header = x.header
        api_key, api_version = header.api_key, header.api_version
        key = (api_key, api_version)
        wants = self._wants.get(key)
        if wants is None:
            wants = self._call(self.observer.wants, api_key, api_version) is True
            if len(self._wants) < 4096:
                self._wants[key] = wants
        request_view = response_view = None
        if wants:
            request_view = self._request_view(x)
            response_view = self._response_view(x)
        correlation, request, response = x.infos()
        self._call(
            self.observer.record_request, request_view, x.link.client, x.principal, api_key,
            api_version, correlation, request,
        )
        self._call(self.observer.record_response, response_view, api_version, correlation, response)

    def _request_view(self, x: Exchange) -> StructView | None:
        header = x.header
        api = self.apis.get(header.api_key)
        version = header.api_version
        body = x.request_body()
        if body is None or api is None or version not in api.versions:
            return None
        try:
            # Read by the sidecar's one rule; the data path reported what deviates.
            data = QUIET.request(api, version, body)
        except Exception:  # a body the broker will refuse: the observer gets the facts only
            return None
        return StructView(data, api.request.fields, version)

    def _response_view(self, x: Exchange) -> StructView | None:
        header = x.header
        api = self.apis.get(header.api_key)
        version = header.api_version
        if x.response is None or api is None or version not in api.versions:
            return None
        try:
            body = x.response_body()
            assert body is not None
            data, _ = QUIET.response(api, version, body)
        except Exception:  # e.g. an ApiVersions error answered at v0
            return None
        return StructView(data, api.response.fields, version)

    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except Exception as exc:
            self.errors.inc()
            self._log_failure(method, exc)
            return None

    def _log_failure(self, method: Callable[..., Any], exc: Exception) -> None:
        now = self.clock()
        if now - self._last_log < ERROR_LOG_INTERVAL:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last report)" if self._unlogged else ""
        self._last_log, self._unlogged = now, 0
        log.warning("observer %s raised in %s%s", self.name, getattr(method, "__name__", "?"),
                    more, exc_info=exc)

    def close_observer(self, timeout: float) -> None:
        """Call the observer's ``close`` here (for a worker whose loop never ran)."""
        self.stopped = True
        self._call(self.observer.close, timeout)


__all__ = ["Clock", "HubMetrics", "Settings", "Worker"]
