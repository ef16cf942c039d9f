"""Prometheus metrics of one sidecar.

Each :class:`SidecarMetrics` owns its own ``CollectorRegistry`` so that several sidecars
can live in one process (tests) without sharing counters. Label values are bounded:
API labels are names from the registry (about a hundred), versions are only recorded for
known APIs, and API keys nobody knows are folded into ``other`` after the first
:data:`MAX_UNKNOWN_KEYS` distinct ones, so a client spraying random keys cannot grow the
scrape without limit.

The per-request metrics are resolved once per API (:meth:`SidecarMetrics.for_api`):
``Counter.labels(...)`` takes a lock and builds a tuple and a dict lookup on every call,
which showed in profiles of small requests (``python -m tests.bench --profile``).

They are also counted in plain numbers first (:class:`Tally`, :class:`HistogramTally`: an
addition, where prometheus_client's ``inc`` takes a lock, 0.4 µs, and ``observe`` walks the
buckets under two, 1.0 µs; six per forwarded request), and added to the Prometheus children
by :meth:`SidecarMetrics.flush`: at every collection of the registry (a scrape, a test's
``get_sample_value``: a collector registered first flushes), before a worker writes its
metrics file, and once a second. Counting and flushing both happen on the trio thread; the
tallies are never touched from another.

With ``sidecar.workers``, every process records into prometheus_client's multiprocess files
and the supervisor's page sums them (:mod:`proxy.control.metrics_page`); each gauge's
``multiprocess_mode`` says how the processes' values combine. There one process holds one
``SidecarMetrics``: two in one process would share the same slots in its file.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from protocol.apis import ApiRegistry

MAX_UNKNOWN_KEYS = 32

# Sub-millisecond buckets: the sidecar's own time is expected to be tens of microseconds.
_LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


class Tally:
    """A counter child's increments, counted here and added to it at :meth:`flush`."""

    __slots__ = ("_dirty", "child", "pending", "queued")

    def __init__(self, child: Any, dirty: list[Tally | HistogramTally]) -> None:
        self.child = child
        self.pending = 0.0
        self.queued = False
        self._dirty = dirty

    def inc(self, amount: float = 1) -> None:
        """Count ``amount`` more."""
        self.pending += amount
        if not self.queued:
            self.queued = True
            self._dirty.append(self)

    def flush(self) -> None:
        """Add what was counted to the child."""
        pending, self.pending, self.queued = self.pending, 0.0, False
        if pending:
            self.child.inc(pending)


class HistogramTally:
    """A histogram child's observations, counted per bucket here and added at :meth:`flush`
    (Prometheus buckets: an observation counts in the first bucket whose bound it does not
    exceed; the child adds each bucket's count and the sum)."""

    __slots__ = ("_bounds", "_dirty", "child", "counts", "queued", "total")

    def __init__(self, child: Any, bounds: tuple[float, ...], dirty: list[Tally | HistogramTally]) -> None:
        self.child = child
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: +Inf
        self.total = 0.0
        self.queued = False
        self._dirty = dirty

    def observe(self, value: float) -> None:
        """Count one observation of ``value``."""
        self.counts[bisect_left(self._bounds, value)] += 1
        self.total += value
        if not self.queued:
            self.queued = True
            self._dirty.append(self)

    def flush(self) -> None:
        """Add what was observed to the child's buckets and sum."""
        counts, total = self.counts, self.total
        self.counts, self.total, self.queued = [0] * len(counts), 0.0, False
        buckets = self.child._buckets
        for index, count in enumerate(counts):
            if count:
                buckets[index].inc(count)
        self.child._sum.inc(total)


class _Flush:
    """Registered first in a sidecar's registry: a collection flushes the tallies before
    the metrics are read."""

    def __init__(self, flush: Any) -> None:
        self._flush = flush

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        self._flush()
        return ()


class SidecarMetrics:
    """The counters, gauges and histograms one sidecar exports."""

    def __init__(self, apis: ApiRegistry, registry: CollectorRegistry | None = None) -> None:
        self.apis = apis
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        #: Tallies counted since the last :meth:`flush`.
        self.dirty: list[Tally | HistogramTally] = []
        r.register(_Flush(self.flush))
        self.requests = Counter(
            "ksidecar_requests", "Requests from clients by API, version and outcome "
            "(forwarded, local, unsupported, rejected; refused: answered with an ACL or quota error).",
            ["api", "version", "outcome"], registry=r)
        self.unparsed = Counter(
            "ksidecar_unparsed_requests", "Requests the broker serves but the sidecar cannot parse "
            "(sidecar.unparsed.request.policy), by API key, version and outcome (forwarded, answered, closed).",
            ["api_key", "api_version", "outcome"], registry=r)
        self.responses = Counter(
            "ksidecar_responses", "Responses sent to clients by API.", ["api"], registry=r)
        self.request_bytes = Counter(
            "ksidecar_request_bytes", "Request bytes received from clients by API.", ["api"],
            registry=r)
        self.response_bytes = Counter(
            "ksidecar_response_bytes", "Response bytes sent to clients by API.", ["api"],
            registry=r)
        self.upstream_latency = Histogram(
            "ksidecar_upstream_latency_seconds", "Time from forwarding a request until the "
            "broker's response arrived, by API.", ["api"], buckets=_LATENCY_BUCKETS, registry=r)
        self.sidecar_latency = Histogram(
            "ksidecar_sidecar_latency_seconds", "Time a request spent in the sidecar itself "
            "(total minus upstream time), by API.", ["api"], buckets=_LATENCY_BUCKETS,
            registry=r)
        self.local = Counter(
            "ksidecar_local_responses", "Requests the sidecar answered itself, by API.",
            ["api"], registry=r)
        self.unsupported = Counter(
            "ksidecar_unsupported_requests", "Requests neither the sidecar nor the broker "
            "supports, by API key.", ["api_key"], registry=r)
        self.streamed = Counter(
            "ksidecar_streamed_responses", "Responses forwarded to clients while they arrived from "
            "the broker (cut-through: large responses with nothing ahead of them), by API.",
            ["api"], registry=r)
        self.rewrites = Counter(
            "ksidecar_rewrites", "Responses whose broker addresses were rewritten, by API.",
            ["api"], registry=r)
        self.unmapped = Counter(
            "ksidecar_rewrite_unmapped", "Broker ids with no known sidecar address, by API; "
            "the entry is withheld from the client.", ["api"], registry=r)
        self.lenient = Counter(
            "ksidecar_lenient_frames", "Frames passed on although they deviate from their schema in "
            "a way clients read past, by API, direction (request, response) and kind "
            "(trailing_bytes: bytes after the body, forwarded unchanged).",
            ["api", "direction", "kind"], registry=r)
        self.errors = Counter(
            "ksidecar_errors", "Connection-ending errors by cause.", ["cause"], registry=r)
        self.connections_active = Gauge(
            "ksidecar_connections_active", "Open client connections by listener.",
            ["listener"], multiprocess_mode="livesum", registry=r)
        self.connections = Counter(
            "ksidecar_connections", "Client connections accepted by listener.", ["listener"],
            registry=r)
        self.connections_closed = Counter(
            "ksidecar_connections_closed", "Client connections closed by listener and reason.",
            ["listener", "reason"], registry=r)
        self.unasked_responses = Counter(
            "ksidecar_unasked_responses", "Responses the broker sent to Produce requests with "
            "acks=0 (Kafka sends none; Tansu does), dropped by the sidecar.", registry=r)
        self.sasl_authentications = Counter(
            "ksidecar_sasl_authentications", "SASL authentications (and re-authentications) "
            "the sidecar completed or refused, by listener, mechanism and result (success, "
            "failure); in passthrough mode, those the broker accepted.",
            ["listener", "mechanism", "result"], registry=r)
        # livemax: every process holds this gauge (0 until set) and only the process that
        # runs the control connection sets it; a sum would count processes, not brokers.
        self.upstream_up = Gauge(
            "ksidecar_upstream_up", "1 while the control connection to the broker works.",
            multiprocess_mode="livemax", registry=r)
        self._unknown_keys: set[int] = set()
        self._by_key: dict[int, ApiMetrics] = {}
        self._by_label: dict[str, ApiMetrics] = {}

    def flush(self) -> None:
        """Add every tally's counts to its Prometheus child (see the module docstring)."""
        dirty = self.dirty
        for tally in dirty:
            tally.flush()
        dirty.clear()

    def for_api(self, api_key: int) -> ApiMetrics:
        """The labelled per-request metrics of ``api_key`` (cached; unknown keys share one)."""
        found = self._by_key.get(api_key)
        if found is not None:
            return found
        found = self.for_label(self.api_label(api_key), api_key)
        if self.apis.get(api_key) is not None:  # keeps the cache bounded by the registry
            self._by_key[api_key] = found
        return found

    def for_label(self, label: str, api_key: int = -1) -> ApiMetrics:
        """The per-request metrics under ``label`` (``SaslToken`` for raw SASL frames)."""
        found = self._by_label.get(label)
        if found is None:
            found = self._by_label[label] = ApiMetrics(self, api_key, label)
        return found

    def api_label(self, api_key: int) -> str:
        """The bounded label for an API key."""
        return self.apis.name(api_key)

    def version_label(self, api_key: int, version: int) -> str:
        """The version as a label, or ``other`` for APIs or versions we do not know."""
        api = self.apis.get(api_key)
        return str(version) if api is not None and version in api.versions else "other"

    def unknown_key_label(self, api_key: int) -> str:
        """A label for an API key in ``ksidecar_unsupported_requests`` (bounded)."""
        if api_key in self._unknown_keys or len(self._unknown_keys) < MAX_UNKNOWN_KEYS:
            self._unknown_keys.add(api_key)
            return str(api_key)
        return "other"


class ApiMetrics:
    """The children of the per-request metrics for one API label, resolved once."""

    __slots__ = (
        "_metrics", "_requests", "api_key", "label", "local", "request_bytes",
        "response_bytes", "responses", "sidecar_latency", "streamed", "upstream_latency", "versions",
    )  # fmt: skip

    def __init__(self, metrics: SidecarMetrics, api_key: int, label: str) -> None:
        self._metrics = metrics
        self.api_key = api_key
        self.label = label
        api = metrics.apis.get(api_key)
        #: Versions whose label is the number itself (others are ``other``).
        self.versions = api.versions if api is not None else None
        dirty = metrics.dirty
        self.request_bytes = Tally(metrics.request_bytes.labels(label), dirty)
        self.responses = Tally(metrics.responses.labels(label), dirty)
        self.response_bytes = Tally(metrics.response_bytes.labels(label), dirty)
        self.upstream_latency = HistogramTally(metrics.upstream_latency.labels(label), _LATENCY_BUCKETS, dirty)
        self.sidecar_latency = HistogramTally(metrics.sidecar_latency.labels(label), _LATENCY_BUCKETS, dirty)
        self.local = metrics.local.labels(label)
        self.streamed = metrics.streamed.labels(label)
        self._requests: dict[tuple[int, str], Tally] = {}

    def requests(self, version: int, outcome: str) -> Tally:
        """The ``ksidecar_requests`` child for one version and outcome (its tally)."""
        tally = self._requests.get((version, outcome))
        if tally is not None:
            return tally
        known = self.versions is not None and version in self.versions
        metrics = self._metrics
        tally = Tally(metrics.requests.labels(self.label, str(version) if known else "other", outcome),
                      metrics.dirty)
        if known:  # unknown versions all map to "other": not cached, so the dict stays bounded
            self._requests[(version, outcome)] = tally
        return tally
