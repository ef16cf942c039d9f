"""The Prometheus observer: bytes and records produced and fetched, per topic and principal.

``ksidecar_observed_bytes_total`` and ``ksidecar_observed_records_total``, labelled
``direction`` (``in``: Produce requests; ``out``: Fetch responses), ``topic`` and
``principal``, on the sidecar's /metrics. Turn it on with
``observer.class.names=prometheus``.

Cardinality is bounded: the first ``observer.prometheus.max.topics`` topics and
``observer.prometheus.max.principals`` principals seen get their own label values; later
ones are counted under ``other``, so a client inventing topic names cannot grow the
scrape without limit. Produce requests that failed still count (bytes offered); records
are counted from batch headers, as in the audit.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter

from observers.api import Observer, ObserverConfig
from observers.audit_schema import FETCH_KEY, PRODUCE_KEY
from observers.errors import ObserverError
from observers.exchange import Exchange
from observers.traffic import PartitionTraffic, TopicNames, fetch_traffic, produce_traffic
from protocol.apis import METADATA
from protocol.errors import ProtocolError

OTHER = "other"
DEFAULTS = {"observer.prometheus.max.topics": "1000", "observer.prometheus.max.principals": "100"}


class _Bounded:
    """Label values admitted in order of first sight, up to a limit; the rest are ``other``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        value = value or ""
        if value in self.seen:
            return value
        if len(self.seen) < self.limit:
            self.seen.add(value)
            return value
        return OTHER


class PrometheusObserver(Observer):
    """Counts produced and fetched bytes and records (see the module docstring)."""

    name = "prometheus"

    def __init__(self) -> None:
        self.names = TopicNames()
        self.topics = _Bounded(1000)
        self.principals = _Bounded(100)
        self._children: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def configure(self, config: ObserverConfig) -> None:
        """Read the bounds and register the counters on the sidecar's registry."""
        self.names.resolve = config.topic_name
        values = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
        bounds = []
        for key in ("observer.prometheus.max.topics", "observer.prometheus.max.principals"):
            try:
                bound = int(values[key].strip())
            except ValueError:
                bound = -1
            if bound < 0:
                raise ObserverError(f"{key}={values[key]!r}: expected a whole number >= 0")
            bounds.append(bound)
        self.topics, self.principals = _Bounded(bounds[0]), _Bounded(bounds[1])
        registry = config.registry if config.registry is not None else CollectorRegistry()
        labels = ["direction", "topic", "principal"]
        self.bytes = Counter("ksidecar_observed_bytes", "Record bytes produced (in) and "
                             "fetched (out), by topic and principal.", labels, registry=registry)
        self.records = Counter("ksidecar_observed_records", "Records produced (in) and "
                               "fetched (out), by topic and principal.", labels, registry=registry)

    def record_exchange(self, x: Exchange) -> None:
        """Count what a Produce request carries and what a Fetch response carries; learn
        topic ids from Metadata (raw exchanges, :mod:`observers.api`: fields are picked
        from the frames, not decoded)."""
        header = x.header
        api_key: int = header.api_key
        version: int = header.api_version
        try:
            if api_key == PRODUCE_KEY:
                request = x.request_body()
                if request is not None:
                    self._count("in", x.principal, produce_traffic(version, request, None, self.names)[1])
                return
            body = x.response_body()
            if body is None:
                return
            if api_key == FETCH_KEY:
                self._count("out", x.principal, fetch_traffic(version, body, self.names))
            elif api_key == METADATA:
                self.names.learn(version, body)
        except ProtocolError:  # the broker's to refuse: nothing moved that we can count
            return

    def _count(self, direction: str, principal: str, parts: list[PartitionTraffic]) -> None:
        who = self.principals(principal)
        for part in parts:
            key = (direction, self.topics(part.topic), who)
            children = self._children.get(key)
            if children is None:
                children = self._children[key] = (
                    self.bytes.labels(*key), self.records.labels(*key)
                )
            children[0].inc(part.bytes)
            if part.records:
                children[1].inc(part.records)
