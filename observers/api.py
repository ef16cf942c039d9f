"""The Observer contract (KIP-388, seed 003), written down in one place.

An observer sees every request a sidecar serves and the response that went back, as
read-only views, and may do anything with them that does not need to change them:
count, audit, sample. It never changes what clients or brokers receive.

Life cycle
    The sidecar imports each class named in ``observer.class.names`` (an import path such
    as ``observers.audit.AuditObserver``, or a name registered in the ``ksidecar.observers``
    entry-point group), calls it with no arguments, then calls :meth:`Observer.configure`
    once with an :class:`ObserverConfig`. Then come the ``record_*`` calls, then one
    :meth:`Observer.close` at shutdown (SIGTERM included), after which nothing else is
    called. An observer whose constructor or ``configure`` raises stops the sidecar from
    starting: a misconfigured audit should not be silently off.

Threading
    Each observer has one worker thread of its own, and every method after ``configure``
    (``wants``, ``record_*``, ``tick``, ``close``) is called on that thread only, one
    call at a time. An observer therefore needs no locks for its own state. Observers
    are plain synchronous Python: the sidecar's event loop never calls them, so a slow
    observer cannot hold up the data path. It hands each exchange over through a bounded
    queue per observer; when the queue is full the exchange is dropped for that observer
    and counted (``ksidecar_observer_dropped_total``), or, with
    ``observer.<name>.overflow=block``, the connection that produced it waits for room (up
    to ``observer.<name>.block.max.ms``, then drops): backpressure instead of loss.
    Exchanges are delivered in runs: an idle worker is woken when a few hundred wait or
    at its next tick, so an observer sees an exchange up to :data:`TICK_INTERVAL`
    seconds after it completed.

Ordering and pairing
    Calls come in pairs: :meth:`Observer.record_request`, then at once
    :meth:`Observer.record_response` for the same exchange, with the same ``correlation``.
    The pair is handed over when the response has been sent to the client (or when it is
    known that none will be: a Produce with ``acks=0``, or a connection that ended
    first, where ``info.sent`` is false and the response view is ``None``). So an
    exchange is observed whole or dropped whole, and an observer needs no table of
    pending requests. Pairs of one connection arrive in that connection's response order;
    pairs of different connections interleave. The seed's broker calls ``recordRequest``
    as the request is parsed; here it comes when the exchange is complete.

Views
    ``request`` and ``response`` are :class:`~protocol.views.StructView` objects (the
    seed's ObservableStruct): read-only, fields by Kafka name (``view["TopicData"]``) or
    snake case (``view.topic_data``), arrays as tuples, and ``records`` fields as
    :class:`~protocol.views.RecordsView` (sizes and counts only, never the record bytes).
    A view is decoded on the worker thread only when :meth:`Observer.wants` says yes
    for the API key and version; otherwise, or when the bytes cannot be decoded (a
    malformed request is the broker's to refuse, not ours), it is ``None`` and the
    header facts still arrive. A view is valid for as long as the observer keeps it, but
    keeping views keeps their frames in memory: keep what you extract instead.

Raw exchanges
    An observer with a ``record_exchange(exchange)`` method gets each exchange as one
    call with the :class:`observers.exchange.Exchange` itself — the request and response
    frames as they crossed the wire, and the header facts — instead of ``wants`` and the
    two ``record_*`` calls; nothing is decoded for it. This is how the built-in audit
    and Prometheus observers work: they pick the few fields they need from the frames
    (:mod:`protocol.pick`), at a fraction of a full decode's cost, because the observers'
    threads share the GIL with the data path. It is an interface for observers that
    parse Kafka's wire format themselves; keeping frames keeps them in memory: keep what
    you extract instead.

Work elsewhere
    An observer may hand its work on to another process, as the audit does with
    ``observer.audit.isolation=process`` (:mod:`observers.audit_process`): its
    ``record_exchange`` then only packs the exchange, and the other process's failures
    and metrics come back to it. Such an observer defines an attribute ``hub_errors``;
    the hub sets it to the observer's ``ksidecar_observer_errors_total`` child, where the
    observer counts what went wrong out of the hub's sight (an exception in the other
    process, an exchange lost with it). The other process must not outlive the sidecar
    and must finish within the ``close`` timeout.

Features
    ``ObserverConfig.feature_level(name)`` is the fleet's finalized level of a sidecar
    feature (KIP-584, docs/features.md), read when called (cheap: any thread may call it),
    0 for a feature not finalized and for every feature on a sidecar without ZooKeeper.
    An observer whose output format may change checks it on its own schedule (the audit:
    on its first exchange and every tick) and must not change format before the operator
    finalizes the level that allows it.

Topic names
    Produce v13 and Fetch v13+ name topics by id only. ``ObserverConfig.topic_name(id)``
    is the name the broker gives that id: known at once when a Metadata answer naming it
    passed through the sidecar, else asked of the broker (the observer's thread waits a
    moment for it; each id is asked at most once a second). In the deployed shape a
    sidecar serves Fetch requests from clients that asked another sidecar for Metadata,
    so an id it has not seen is normal. ``None``: the broker does not name it either.

Failures
    An exception out of any ``record_*`` or ``tick`` call is caught, counted
    (``ksidecar_observer_errors_total``) and logged at most once per
    :data:`ERROR_LOG_INTERVAL` seconds per observer; the exchange is proxied exactly as
    if no observer existed, and the next exchange is delivered as usual.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from protocol.views import StructView

#: Seconds between two log lines about one observer's exceptions (the rest are counted).
ERROR_LOG_INTERVAL = 10.0


class ClientAddress(NamedTuple):
    """The client's end of the TCP connection."""

    host: str
    port: int


class Correlation(NamedTuple):
    """Pairs a response with its request: correlation ids are unique per connection only."""

    #: Unique per connection within one sidecar run.
    connection_id: int
    #: The request header's correlation id.
    correlation_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestInfo:
    """What the sidecar knows of a request besides its body."""

    #: Unique per request within one sidecar run (counts from 1).
    request_id: int
    #: The sidecar's broker id (-1 while it is not known).
    broker_id: int
    #: The listener the client connected to.
    listener: str
    #: ``client.id`` from the request header (``None`` when absent).
    client_id: str | None
    #: When the sidecar read the request, Unix seconds.
    time: float
    #: The whole request frame, size prefix included.
    size: int
    #: False for a Produce with ``acks=0``, which gets no response.
    expects_response: bool
    #: True when the sidecar answered the request itself.
    local: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseInfo:
    """What the sidecar knows of a response besides its body."""

    #: False when no response went to the client (``acks=0``, or the connection ended).
    sent: bool
    #: The whole response frame as sent, size prefix included; ``None`` when not sent.
    size: int | None
    #: Request read to response sent, seconds; ``None`` when not sent.
    latency: float | None
    #: Request forwarded to broker response read, seconds; ``None`` when answered locally
    #: or not sent.
    upstream_latency: float | None


@dataclass(frozen=True)
class ObserverConfig(Mapping[str, str]):
    """The ``observer.``-prefixed keys (as strings), plus context from the sidecar."""

    #: ``observer.*`` key → value (strings, as in the properties file).
    entries: Mapping[str, str]
    #: The sidecar's broker id at start (-1 when not yet known; rows carry their own).
    broker_id: int = -1
    #: The index of the sidecar worker process the observer runs in (``sidecar.workers``;
    #: 0 in a single-process sidecar). Each worker has its own observers: an observer that
    #: writes files names them after it (the audit does), so workers never share one.
    worker: int = 0
    #: Where an observer may register Prometheus metrics (the sidecar's /metrics).
    registry: CollectorRegistry | None = None
    #: Anything else the sidecar hands over (for example ``sidecar.upstream``).
    context: Mapping[str, str] = field(default_factory=dict)
    #: The finalized level of a sidecar feature by name ("Features" above); ``None`` when
    #: the sidecar has none to report (then every level is 0).
    feature_level: Callable[[str], int] | None = None
    #: The broker's name of a topic id ("Topic names" above), or ``None`` when there is
    #: none to ask (then ids without a name stay ids).
    topic_name: Callable[[uuid.UUID], str | None] | None = None

    def __getitem__(self, key: str) -> str:
        return self.entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


class Observer:
    """Base class of observers; see the module docstring for the contract.

    Subclassing is optional: any object with these five methods will do. ``name`` is the
    observer's label in metrics and its key prefix (``observer.<name>.queue.capacity``).
    """

    name: str = ""

    def configure(self, config: ObserverConfig) -> None:
        """Read settings (called once, before anything else, on the loading thread)."""

    def wants(self, api_key: int, api_version: int) -> bool:
        """Whether request and response bodies of this API version should be decoded."""
        return False

    def record_request(
        self,
        request: StructView | None,
        client_address: ClientAddress,
        principal: str,
        api_key: int,
        api_version: int,
        correlation: Correlation,
        info: RequestInfo,
    ) -> None:
        """One request (``principal`` is ``User:<name>`` once authenticated, else
        ``User:ANONYMOUS``)."""

    def record_response(
        self,
        response: StructView | None,
        api_version: int,
        correlation: Correlation,
        info: ResponseInfo,
    ) -> None:
        """The response to the request last recorded with the same ``correlation``."""

    def tick(self, now: float) -> None:
        """Called about every :data:`TICK_INTERVAL` seconds (Unix time ``now``), busy or
        not: for time-based work such as flushing."""

    def close(self, timeout: float) -> None:
        """Finish up (flush, close files) within ``timeout`` seconds; nothing follows."""


#: Seconds between :meth:`Observer.tick` calls.
TICK_INTERVAL = 0.1
