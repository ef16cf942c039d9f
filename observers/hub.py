"""Handing finished exchanges to observers without holding up the data path.

Theory of operation. The sidecar owns one :class:`ObserverHub` when
``observer.class.names`` names any observer, and each connection one :class:`Tap`. The
connection tells its tap when an exchange is complete (response sent, or none coming);
the tap packs the raw frames and header facts into an
:class:`~observers.exchange.Exchange` — no decoding — and the hub offers it to every
observer's bounded queue (no lock, no wait). Each observer's
:class:`~observers.worker.Worker` feeds it from that queue on a thread of its own. See
:mod:`observers.api` for the contract, :mod:`observers.loader` for how observers are
found and configured.

A full queue drops the exchange for that observer (counted), unless the observer's
``overflow`` is ``block``: then the tap keeps it and :meth:`Tap.retry` places it when
there is room, and the connection waits on it (backpressure) up to ``block.max.ms``.

Time comes from one injected clock (``time.time`` in the sidecar): the workers' ticks
and the blocking observers' waits read it. With the worker threads not started, a test
drives the workers itself through :meth:`ObserverHub.run_due` (for instance from a trio
task under ``MockClock``, with ``clock=trio.current_time``).

This module is synchronous and knows nothing of trio: the connection does the waiting.
"""

from __future__ import annotations

import itertools
import logging
import sys
import time
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry

from observers.api import ClientAddress, ObserverConfig
from observers.errors import ObserverError
from observers.exchange import Exchange, Frame, Link
from observers.loader import Loaded, load, settings_for
from observers.worker import Clock, HubMetrics, Settings, Worker
from protocol.apis import ApiRegistry
from protocol.headers import RequestHeader

log = logging.getLogger(__name__)

#: The GIL switch interval while observers run (seconds; CPython's default is 0.005).
SWITCH_INTERVAL = 0.0002
#: Worker ``w``'s request ids start at ``w << WORKER_ID_SHIFT`` + 1: each worker process of a
#: sidecar has its own hub, and disjoint ids keep the audit's request key
#: (``sidecar_broker_id``, ``request_id``, ``time``) unique across them.
WORKER_ID_SHIFT = 48


class ObserverHub:
    """Every configured observer, with its worker; shared by all connections."""

    def __init__(
        self,
        observers: Sequence[Loaded],
        apis: ApiRegistry,
        registry: CollectorRegistry | None = None,
        *,
        clock: Clock = time.time,
        worker: int = 0,
    ) -> None:
        self.clock = clock
        self.metrics = HubMetrics(registry)
        self.workers = [
            Worker(o, name, s, apis, self.metrics, clock=clock) for o, name, s in observers
        ]
        self.request_ids = itertools.count((worker << WORKER_ID_SHIFT) + 1)
        self.connection_ids = itertools.count(1)
        self.closed = False
        self._started = False

    @classmethod
    def load(
        cls, names: str, config: ObserverConfig, apis: ApiRegistry, *, clock: Clock = time.time
    ) -> ObserverHub:
        """Import, construct and configure the observers named in ``names`` (in the sidecar
        worker process ``config.worker``)."""
        return cls(load(names, config), apis, config.registry, clock=clock, worker=config.worker)

    def start(self) -> None:
        """Start the worker threads (and shorten the GIL switch interval, see below)."""
        if not self._started:
            self._started = True
            # A busy worker keeps the GIL until the event loop's thread has waited a switch
            # interval for it (5 ms by default): each wake-up of the data path would wait
            # that long. A short interval bounds the wait (measured: tests/bench/RESULTS.md).
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
            for worker in self.workers:
                worker.start()

    def run_due(self) -> float | None:
        """Run every worker's loop once here, for a hub whose threads were not started:
        deliver what is queued, tick what is due. Returns when the next tick is due (on
        the hub's clock), ``None`` when every observer is closed."""
        if self._started:
            raise RuntimeError("run_due: the worker threads run the loops of a started hub")
        due = [d for d in (w.run_due() for w in self.workers) if d is not None]
        return min(due) if due else None

    def queue_settings(self, config: Mapping[str, str]) -> list[Settings]:
        """Each observer's queue settings as ``config`` gives them (a reload's prepare);
        raises :class:`~observers.errors.ObserverError` naming a bad key."""
        return [settings_for(worker.name, config) for worker in self.workers]

    def use_queue_settings(self, settings: Sequence[Settings]) -> None:
        """Put :meth:`queue_settings`'s result in force (a reload's commit)."""
        for worker, own in zip(self.workers, settings, strict=True):
            worker.use(own)

    def tap(self, listener: str, host: str, port: int, broker_id: int) -> Tap:
        """The hand-off for one new connection."""
        link = Link(connection_id=next(self.connection_ids), listener=listener,
                    client=ClientAddress(host, port), broker_id=broker_id)
        return Tap(self, link)

    def offer(self, exchange: Exchange) -> list[Worker]:
        """Queue ``exchange`` for every observer; return the blocking ones that had no room."""
        waiting: list[Worker] = []
        if self.closed:
            return waiting
        for worker in self.workers:
            if not worker.offer(exchange):
                if worker.settings.overflow == "block":
                    waiting.append(worker)
                else:
                    worker.dropped.inc()
        return waiting

    def close(self, timeout: float) -> None:
        """Let every worker drain its queue and close its observer, within ``timeout``."""
        if self.closed:
            return
        self.closed = True
        deadline = self.clock() + timeout
        for worker in self.workers:
            worker.stop(deadline)
            if not self._started:
                worker.run_due()  # no thread: what is queued, then close, here
        if not self._started:
            return
        for worker in self.workers:
            worker.thread.join(max(0.0, deadline - self.clock()))
            if worker.thread.is_alive():
                log.warning("observer %s did not finish within %.1f s of shutdown", worker.name, timeout)


class Tap:
    """One connection's hand-off: builds exchanges from what the connection knows."""

    __slots__ = ("blocked", "hub", "link")

    def __init__(self, hub: ObserverHub, link: Link) -> None:
        self.hub = hub
        #: The connection's facts, shared by its exchanges.
        self.link = link
        #: Exchanges a blocking observer had no room for: ``(exchange, workers, since)``.
        self.blocked: list[tuple[Exchange, list[Worker], float]] = []

    def completed(
        self,
        *,
        header: RequestHeader,
        response_header_version: int,
        principal: str,
        client_software: tuple[str, str] | None = None,
        denials: tuple[tuple[str, str, str, str], ...] = (),
        frame: Frame | None,
        request_size: int,
        received_at: float,
        expects_response: bool,
        local: bool,
        response: Frame | None,
        elapsed: float | None,
        upstream_elapsed: float | None,
    ) -> None:
        """Hand over one exchange. ``received_at`` is Unix time; ``response`` is ``None``
        when none went to the client; ``frame`` is ``None`` when the request must not
        reach observers (secrets)."""
        exchange = Exchange(
            link=self.link, request_id=next(self.hub.request_ids), header=header,
            response_header_version=response_header_version, principal=principal,
            client_software=client_software, denials=denials, frame=frame, request_size=request_size, received=received_at,
            expects_response=expects_response, local=local, response=response,
            elapsed=elapsed, upstream_elapsed=upstream_elapsed,
        )
        waiting = self.hub.offer(exchange)
        if waiting:
            self.blocked.append((exchange, waiting, self.hub.clock()))

    def retry(self) -> bool:
        """Place blocked exchanges where there is room now; True when none is left.

        One that waited longer than its observer's ``block.max.ms`` is dropped (counted).
        """
        now = self.hub.clock()
        left: list[tuple[Exchange, list[Worker], float]] = []
        for exchange, workers, since in self.blocked:
            still = []
            for worker in workers:
                if self.hub.closed:
                    continue
                if not worker.offer(exchange):
                    if now - since >= worker.settings.block_max:
                        worker.dropped.inc()
                    else:
                        still.append(worker)
            if still:
                left.append((exchange, still, since))
        self.blocked = left
        return not left


__all__ = ["Exchange", "Link", "ObserverError", "ObserverHub", "Settings", "Tap"]
