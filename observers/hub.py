"""Loading observers and handing them exchanges without holding up the data path.

Theory of operation. The sidecar owns one :class:`ObserverHub` when
``observer.class.names`` names any observer, and each connection one :class:`Tap`. The
connection tells its tap when an exchange is complete (response sent, or none coming);
the tap packs the raw frames and header facts into an :class:`Exchange` — no decoding,
frames are slices of immutable bytes and safe to keep — and the hub offers it to every
observer's bounded queue (no lock, no wait). One worker thread per observer takes
exchanges off its queue, decodes the bodies into views if the observer
:meth:`~observers.api.Observer.wants` them, and calls ``record_request`` then
``record_response`` — or hands the exchange as it is to an observer's
``record_exchange``. See :mod:`observers.api` for the contract.

A worker with an empty queue sleeps until :data:`WAKE_BATCH` exchanges wait or its next
tick, whichever comes first, and then works through the queue in one run: the worker
shares the GIL with the event loop, and waking it for every exchange cost the data path
more than the observer's own work did (tests/bench/RESULTS.md).

A full queue drops the exchange for that observer (counted), unless the observer's
``overflow`` is ``block``: then the tap keeps it and :meth:`Tap.retry` places it when
there is room, and the connection waits on it (backpressure) up to ``block.max.ms``.

This module is synchronous and knows nothing of trio: the connection does the waiting.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import itertools
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from observers.api import (
    ERROR_LOG_INTERVAL,
    TICK_INTERVAL,
    ClientAddress,
    Correlation,
    Observer,
    ObserverConfig,
    RequestInfo,
    ResponseInfo,
)
from protocol.apis import ApiRegistry
from protocol.scan import response_header_size
from protocol.schema import decode
from protocol.views import StructView

log = logging.getLogger(__name__)

#: Observers built in, by the short name ``observer.class.names`` may use.
BUILTIN = {
    "audit": "observers.audit.AuditObserver",
    "prometheus": "observers.prometheus.PrometheusObserver",
}
#: Third-party observers may register under this entry-point group.
ENTRY_POINT_GROUP = "ksidecar.observers"

#: The GIL switch interval while observers run (seconds; CPython's default is 0.005).
SWITCH_INTERVAL = 0.0002
DEFAULT_QUEUE_CAPACITY = 10000
#: An idle worker is woken when this many exchanges wait (at most half its queue), else
#: by its next tick: waking a thread per exchange cost more than the work it was woken for
#: (tests/bench/RESULTS.md).
WAKE_BATCH = 256
DEFAULT_BLOCK_MAX_MS = 5000
OVERFLOW_POLICIES = ("drop", "block")


class ObserverError(ValueError):
    """An observer that cannot be loaded or configured; the message says which and why."""


# -- the hand-off ------------------------------------------------------------------------


class Exchange:
    """One request and what became of it, as the data path saw it: raw frames and facts.

    Built on the data path, so it is kept to plain references; the worker turns it into
    the :class:`~observers.api.RequestInfo` / :class:`~observers.api.ResponseInfo` an
    observer gets, or hands it as it is to an observer's ``record_exchange`` (raw
    exchanges, :mod:`observers.api`). Read-only for everyone.
    """

    __slots__ = (
        "elapsed", "expects_response", "frame", "header", "local", "principal", "received",
        "request_id", "request_size", "response", "response_header_version", "tap",
        "upstream_elapsed",
    )  # fmt: skip

    def __init__(
        self,
        tap: Tap,
        request_id: int,
        header: Any,
        response_header_version: int,
        principal: str,
        frame: bytes | memoryview | None,
        request_size: int,
        received: float,
        expects_response: bool,
        local: bool,
        response: bytes | memoryview | None,
        elapsed: float | None,
        upstream_elapsed: float | None,
    ) -> None:
        #: The connection's :class:`Tap` (``client``, ``listener``, ``broker_id``,
        #: ``connection_id``).
        self.tap = tap
        #: Unique per request within one sidecar run (counts from 1).
        self.request_id = request_id
        #: The request's :class:`~protocol.headers.RequestHeader`.
        self.header = header
        self.response_header_version = response_header_version
        #: ``User:<name>``, or ``User:ANONYMOUS``.
        self.principal = principal
        #: The request frame, size prefix included.
        self.frame = frame
        #: Bytes of the request frame, size prefix included.
        self.request_size = request_size
        #: When the request was read, Unix seconds.
        self.received = received
        #: False for a Produce with ``acks=0``.
        self.expects_response = expects_response
        #: True when the sidecar answered the request itself.
        self.local = local
        #: The response frame as sent, or ``None`` when none was.
        self.response = response
        #: Request read to response sent, seconds (meaningful when ``response`` is set).
        self.elapsed = elapsed
        #: Request forwarded to broker response read, seconds (likewise; not when ``local``).
        self.upstream_elapsed = upstream_elapsed

    def request_body(self) -> memoryview | None:
        """The request body (the frame after its size prefix and header); ``None`` when
        the frame was not kept."""
        if self.frame is None:
            return None
        return memoryview(self.frame)[4 + self.header.size :]

    def response_body(self) -> memoryview | None:
        """The response body (after size prefix and header); ``None`` when none was sent.
        Raises :class:`~protocol.errors.DecodeError` when the header is cut short."""
        if self.response is None:
            return None
        body = memoryview(self.response)[4:]
        if self.response_header_version >= 1 and len(body) > 4 and body[4] == 0:
            return body[5:]  # the usual header v1: correlation id, no tags
        return body[response_header_size(body, self.response_header_version) :]

    def infos(self) -> tuple[Correlation, RequestInfo, ResponseInfo]:
        """The facts as observers get them."""
        tap, header, response = self.tap, self.header, self.response
        sent = response is not None
        request = RequestInfo(
            self.request_id, tap.broker_id, tap.listener, header.client_id, self.received,
            self.request_size, self.expects_response, self.local,
        )
        answer = ResponseInfo(
            sent, len(response) if response is not None else None,
            self.elapsed if sent else None,
            self.upstream_elapsed if sent and not self.local else None,
        )
        return Correlation(tap.connection_id, header.correlation_id), request, answer


@dataclass(frozen=True)
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
        self.queue_depth = Gauge(
            "ksidecar_observer_queue_depth", "Exchanges waiting in an observer's queue.",
            ["observer"], registry=r)


# -- one worker per observer -------------------------------------------------------------

_STOP = object()


class Worker:
    """An observer, its bounded queue and the thread that feeds it."""

    def __init__(
        self, observer: Any, name: str, settings: Settings, apis: ApiRegistry, metrics: HubMetrics
    ) -> None:
        self.observer = observer
        self.name = name
        self.settings = settings
        self.apis = apis
        self.capacity = settings.capacity
        #: The bounded queue: a deque (appends and pops are atomic under the GIL, no lock
        #: on the data path) and an event set only when the worker sleeps.
        self.items: deque[object] = deque()
        self._wake = threading.Event()
        self._idle = False
        self.records = metrics.records.labels(name)
        self.dropped = metrics.dropped.labels(name)
        self.errors = metrics.errors.labels(name)
        metrics.queue_depth.labels(name).set_function(lambda: len(self.items))
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
        #: When ``close`` must be done by (``time.monotonic``), set before the stop marker.
        self.deadline = 0.0

    def offer(self, exchange: Exchange) -> bool:
        """Queue ``exchange`` if there is room (never blocks)."""
        items = self.items
        if len(items) >= self.capacity:
            return False
        items.append(exchange)
        if self._idle and len(items) >= self.wake_at:
            self._wake.set()
        return True

    def stop(self, deadline: float) -> None:
        """Ask the worker to finish what is queued, close the observer and end."""
        self.deadline = deadline
        self.items.append(_STOP)
        self._wake.set()

    # -- on the worker thread --------------------------------------------------------

    def _run(self) -> None:
        items, wake = self.items, self._wake
        next_tick = time.time() + TICK_INTERVAL
        try:
            while True:
                delivered = 0
                while items:
                    item = items.popleft()
                    if item is _STOP:
                        self.records.inc(delivered)
                        self._call(self.observer.close, max(0.0, self.deadline - time.monotonic()))
                        return
                    assert isinstance(item, Exchange)
                    self.deliver(item)
                    delivered += 1
                    if time.time() >= next_tick:
                        break
                if delivered:  # counted per run, not per exchange: the counter takes a lock
                    self.records.inc(delivered)
                now = time.time()
                if now >= next_tick:
                    self._call(self.observer.tick, now)
                    next_tick = now + TICK_INTERVAL
                    continue
                self._idle = True
                if not items:  # re-checked after announcing sleep: no wake-up is missed
                    wake.wait(max(0.0, next_tick - now))
                    wake.clear()
                self._idle = False
        except BaseException:  # pragma: no cover - _call catches every Exception
            log.exception("observer %s: worker thread died", self.name)
            raise

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
            self.observer.record_request, request_view, x.tap.client, x.principal, api_key,
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
            # allow_trailing: librdkafka sends Metadata v12 with 3 bytes after the body.
            data = decode(api.request, version, body, allow_trailing=True)
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
            data = decode(api.response, version, body, allow_trailing=True)
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
        now = time.monotonic()
        if now - self._last_log < ERROR_LOG_INTERVAL:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last report)" if self._unlogged else ""
        self._last_log, self._unlogged = now, 0
        log.warning("observer %s raised in %s%s", self.name, getattr(method, "__name__", "?"),
                    more, exc_info=exc)

    def close_observer(self, timeout: float) -> None:
        """Call the observer's ``close`` here (for a worker that never started)."""
        self._call(self.observer.close, timeout)


# -- the hub ---------------------------------------------------------------------------


class ObserverHub:
    """Every configured observer, with its worker; shared by all connections."""

    def __init__(
        self,
        observers: Sequence[tuple[Any, str, Settings]],
        apis: ApiRegistry,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.metrics = HubMetrics(registry)
        self.workers = [Worker(o, name, s, apis, self.metrics) for o, name, s in observers]
        self.request_ids = itertools.count(1)
        self.connection_ids = itertools.count(1)
        self.closed = False
        self._started = False

    @classmethod
    def load(cls, names: str, config: ObserverConfig, apis: ApiRegistry) -> ObserverHub:
        """Import, construct and configure the observers named in ``names``."""
        loaded: list[tuple[Any, str, Settings]] = []
        taken: set[str] = set()
        for spec in (n.strip() for n in names.split(",")):
            if not spec:
                continue
            observer = construct(spec)
            name = str(getattr(observer, "name", "") or type(observer).__name__.lower())
            base, n = name, 2
            while name in taken:
                name, n = f"{base}-{n}", n + 1
            taken.add(name)
            try:
                observer.configure(config)
            except ObserverError:
                raise
            except Exception as exc:
                raise ObserverError(f"observer {spec!r}: configure failed: {exc}") from exc
            loaded.append((observer, name, settings_for(name, config)))
        return cls(loaded, apis, config.registry)

    def start(self) -> None:
        """Start the worker threads (and shorten the GIL switch interval, see below)."""
        if not self._started:
            self._started = True
            # A busy worker keeps the GIL until the event loop's thread has waited a switch
            # interval for it (5 ms by default): each wake-up of the data path would wait
            # that long. A short interval bounds the wait (measured: tests/bench/RESULTS.md).
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
            for worker in self.workers:
                worker.thread.start()

    def tap(self, listener: str, host: str, port: int, broker_id: int) -> Tap:
        """The hand-off for one new connection."""
        return Tap(self, next(self.connection_ids), listener, ClientAddress(host, port), broker_id)

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
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            if self._started:
                worker.stop(deadline)
            else:
                worker.close_observer(timeout)
        if not self._started:
            return
        for worker in self.workers:
            worker.thread.join(max(0.0, deadline - time.monotonic()))
            if worker.thread.is_alive():
                log.warning("observer %s did not finish within %.1f s of shutdown", worker.name, timeout)


class Tap:
    """One connection's hand-off: builds exchanges from what the connection knows."""

    __slots__ = ("blocked", "broker_id", "client", "connection_id", "hub", "listener")

    def __init__(
        self, hub: ObserverHub, connection_id: int, listener: str, client: ClientAddress,
        broker_id: int,
    ) -> None:
        self.hub = hub
        self.connection_id = connection_id
        self.listener = listener
        self.client = client
        self.broker_id = broker_id
        #: Exchanges a blocking observer had no room for: ``(exchange, workers, since)``.
        self.blocked: list[tuple[Exchange, list[Worker], float]] = []

    def completed(
        self,
        header: Any,
        response_header_version: int,
        principal: str,
        frame: bytes | memoryview | None,
        request_size: int,
        received_at: float,
        expects_response: bool,
        local: bool,
        response: bytes | memoryview | None,
        elapsed: float | None,
        upstream_elapsed: float | None,
    ) -> None:
        """Hand over one exchange. ``header`` is the request's
        :class:`~protocol.headers.RequestHeader`; ``received_at`` is Unix time;
        ``response`` is ``None`` when none went to the client."""
        exchange = Exchange(
            self, next(self.hub.request_ids), header, response_header_version, principal, frame,
            request_size, received_at, expects_response, local, response, elapsed,
            upstream_elapsed,
        )
        waiting = self.hub.offer(exchange)
        if waiting:
            self.blocked.append((exchange, waiting, time.monotonic()))

    def retry(self) -> bool:
        """Place blocked exchanges where there is room now; True when none is left.

        One that waited longer than its observer's ``block.max.ms`` is dropped (counted).
        """
        now = time.monotonic()
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


# -- loading -----------------------------------------------------------------------------


def construct(spec: str) -> Any:
    """An instance of the observer ``spec`` names: a built-in name, ``module.Class``,
    ``module:Class``, or a name in the ``ksidecar.observers`` entry-point group."""
    target: Any
    path = BUILTIN.get(spec, spec)
    if "." in path or ":" in path:
        module_name, sep, attribute = path.partition(":")
        if not sep:
            module_name, _, attribute = path.rpartition(".")
        try:
            target = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise ObserverError(f"observer.class.names: cannot import {spec!r}: {exc}") from None
    else:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=spec)
        if not found:
            raise ObserverError(
                f"observer.class.names: {spec!r} is neither an import path nor a built-in "
                f"({', '.join(sorted(BUILTIN))}) nor in the {ENTRY_POINT_GROUP} entry points"
            )
        try:
            target = next(iter(found)).load()
        except Exception as exc:
            raise ObserverError(f"observer.class.names: loading {spec!r} failed: {exc}") from None
    try:
        observer = target()
    except Exception as exc:
        raise ObserverError(f"observer.class.names: {spec!r}() failed: {exc}") from None
    missing = [m for m in ("configure", "wants", "record_request", "record_response", "close")
               if not callable(getattr(observer, m, None))]
    if missing:
        raise ObserverError(f"observer.class.names: {spec!r} lacks {', '.join(missing)}")
    if not callable(getattr(observer, "tick", None)):
        observer.tick = lambda now: None
    return observer


def settings_for(name: str, config: Mapping[str, str]) -> Settings:
    """``observer.<name>.queue.capacity`` / ``.overflow`` / ``.block.max.ms``, defaulting to
    ``observer.queue.capacity`` / ``observer.overflow`` / ``observer.block.max.ms``."""

    def value(key: str, default: str) -> tuple[str, str]:
        own = f"observer.{name}.{key}"
        if own in config:
            return own, config[own]
        return f"observer.{key}", config.get(f"observer.{key}", default)

    def number(key: str, default: int) -> int:
        where, text = value(key, str(default))
        try:
            result = int(text.strip())
        except ValueError:
            result = -1
        least = 1 if key == "queue.capacity" else 0
        if result < least:
            raise ObserverError(f"{where}={text!r}: expected a whole number >= {least}")
        return result

    where, overflow = value("overflow", "drop")
    if overflow.strip().lower() not in OVERFLOW_POLICIES:
        raise ObserverError(f"{where}={overflow!r}: must be one of {', '.join(OVERFLOW_POLICIES)}")
    return Settings(
        capacity=number("queue.capacity", DEFAULT_QUEUE_CAPACITY),
        overflow=overflow.strip().lower(),
        block_max=number("block.max.ms", DEFAULT_BLOCK_MAX_MS) / 1000,
    )


__all__ = ["Exchange", "Observer", "ObserverError", "ObserverHub", "Settings", "Tap"]
