"""The audit observer: one Parquet row per request/response pair, per topic-partition for
Produce and Fetch (schema: :mod:`observers.audit_schema`).

Turn it on with ``observer.class.names=audit`` (or ``observers.audit.AuditObserver``) and
``observer.audit.dir=/var/lib/ksidecar/audit``. Rows go to a :class:`ParquetSink`.

The audit takes raw exchanges (:mod:`observers.api`) and picks from the frames only the
fields its rows need (:mod:`observers.traffic`, :class:`TopErrors`): on a busy sidecar it
shares the GIL with the data path, so it must not decode whole messages. What each row
says (:meth:`AuditObserver.record_exchange`):

* Produce: one row per topic-partition of the request (bytes and records produced), with
  that partition's error from the response; ``acks=0`` gets its rows too, with the
  response columns null.
* Fetch: one row per topic-partition of the response (bytes and records the client
  received), error per partition. Topic ids (v13+) are mapped to names learned from the
  Metadata responses this observer sees; an id not seen yet is written in its text form
  (a client that asked another sidecar for metadata: a known gap, see docs/observers.md).
* A Produce or Fetch naming no partition, and every other API: a single row with the
  partition columns null and the top-level error (for responses without one, the first
  non-zero error of a top-level array's entries, else 0).

Isolation (``observer.audit.isolation``). With ``thread`` (the default) all of the above
runs on the audit's worker thread in the sidecar process. With ``process`` the worker
thread only packs each exchange (header facts and the bytes the rows need; the partitions
of frames of 16 KiB or more are picked first, so a big Fetch is not copied) and a child
process runs this same observer in thread mode on what it receives, on its own GIL:
:mod:`observers.audit_process` describes the hand-off, its bounds, the metrics reported
back, and start and shutdown. The files are the same either way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from observers.api import Observer, ObserverConfig
from observers.audit_schema import AUDIT_SCHEMA, FETCH_KEY, PRODUCE_KEY
from observers.hub import Exchange, ObserverError
from observers.parquet_sink import ParquetSink, SinkMetrics
from observers.traffic import PartitionTraffic, TopicNames, fetch_traffic, produce_traffic
from protocol.apis import Api, ApiRegistry
from protocol.errors import ProtocolError
from protocol.pick import Picker
from protocol.spec import MessageSpec

if TYPE_CHECKING:
    from observers.audit_process import AuditProcess

log = logging.getLogger(__name__)

METADATA_KEY = 3

#: A Produce ``acks`` (``None`` for other APIs) and the partitions picked from the frames.
Picked = tuple[int | None, list[PartitionTraffic]]

#: The arguments of :meth:`AuditObserver.record`, in order: what the audit process gets
#: for each exchange (:mod:`observers.audit_process`).
PACKED_FIELDS = (
    "received", "broker_id", "listener", "host", "port", "principal", "client_id", "api_key",
    "version", "correlation_id", "request_id", "request_size", "response_size", "elapsed",
    "upstream_elapsed", "local", "expects_response", "request", "body", "picked",
)  # fmt: skip

ISOLATIONS = ("thread", "process")

#: Defaults of the ``observer.audit.*`` keys (proxy/config.py documents and validates them).
DEFAULTS = {
    "observer.audit.dir": "",
    "observer.audit.flush.interval.ms": "1000",
    "observer.audit.roll.rows": "1000000",
    "observer.audit.roll.bytes": str(128 << 20),
    "observer.audit.roll.ms": "300000",
    "observer.audit.isolation": "thread",
}


class AuditObserver(Observer):
    """Writes the audit trail (see the module docstring)."""

    name = "audit"

    def __init__(self) -> None:
        self.sink: ParquetSink | None = None
        self.names = TopicNames()
        self.apis = ApiRegistry()
        self.errors = TopErrors()
        self._api_names: dict[int, str] = {}
        self._broker_id = -1
        #: The audit process with ``observer.audit.isolation=process``, else ``None``.
        self.remote: AuditProcess | None = None
        #: Set by the hub to this observer's ``ksidecar_observer_errors_total`` (api.py):
        #: where failures in the audit process are counted.
        self.hub_errors: Any = None

    def configure(self, config: ObserverConfig) -> None:
        """Read ``observer.audit.*``, recover journals a killed sidecar left, open the sink;
        or, with ``observer.audit.isolation=process``, start the audit process, which does
        all that itself (its errors are raised here)."""
        values = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
        isolation = values["observer.audit.isolation"].strip().lower() or "thread"
        if isolation not in ISOLATIONS:
            raise ObserverError(f"observer.audit.isolation={values['observer.audit.isolation']!r}: "
                                f"must be one of {', '.join(ISOLATIONS)}")
        if isolation == "process":
            from observers.audit_process import AuditProcess

            self.remote = AuditProcess(config, self)
            return
        directory = values["observer.audit.dir"].strip()
        if not directory:
            raise ObserverError("observer.audit.dir is required when the audit observer is on")
        key = config.context.get("sidecar.broker.metadata.api.key")
        if key:
            self.apis = ApiRegistry(int(key))
        start_id = config.broker_id
        self.sink = ParquetSink(
            Path(directory),
            AUDIT_SCHEMA,
            broker_id=lambda: self._broker_id if self._broker_id >= 0 else start_id,
            flush_interval=_number(values, "observer.audit.flush.interval.ms") / 1000,
            roll_rows=_number(values, "observer.audit.roll.rows"),
            roll_bytes=_number(values, "observer.audit.roll.bytes"),
            roll_age=_number(values, "observer.audit.roll.ms") / 1000,
            metrics=SinkMetrics(config.registry),
        )
        self.sink.recover()

    def record_exchange(self, x: Exchange) -> None:
        """Build the exchange's rows from its frames and buffer them (raw exchanges:
        :mod:`observers.api`; nothing is decoded but the fields the rows need). With
        ``observer.audit.isolation=process`` the exchange is packed for the audit process
        instead (:mod:`observers.audit_process`)."""
        if self.remote is not None:
            self.remote.offer(x)
            return
        header = x.header
        api_key: int = header.api_key
        tap = x.tap
        client = tap.client
        response = x.response
        try:
            body = x.response_body()
        except ProtocolError:
            body = None
        self.record(
            x.received, tap.broker_id, tap.listener, client.host, client.port, x.principal,
            header.client_id, api_key, header.api_version, header.correlation_id, x.request_id,
            x.request_size, len(response) if response is not None else None, x.elapsed,
            x.upstream_elapsed, x.local, x.expects_response,
            x.request_body() if api_key == PRODUCE_KEY else None, body, None,
        )

    def record(
        self, received: float, broker_id: int, listener: str, host: str, port: int,
        principal: str, client_id: str | None, api_key: int, version: int,
        correlation_id: int, request_id: int, request_size: int, response_size: int | None,
        elapsed: float | None, upstream_elapsed: float | None, local: bool,
        expects_response: bool, request: bytes | memoryview | None,
        body: bytes | memoryview | None, picked: Picked | None,
    ) -> None:
        """Buffer the rows of one exchange given as its facts (:data:`PACKED_FIELDS`):
        ``request`` is a Produce request's body (else ``None``), ``body`` the response
        body (``None`` when none was sent or its header was unreadable), ``picked`` the
        Produce ``acks`` and partitions already picked from the frames (then the bodies
        may be left out), else ``None``."""
        assert self.sink is not None
        self._broker_id = broker_id
        error: int | None = None
        if picked is not None:
            acks, parts = picked
        else:
            acks, parts = self._traffic(api_key, version, expects_response, request, body)
        if not parts and body is not None:
            error = self.errors.read(self.apis.get(api_key), version, memoryview(body))
        name = self._api_names.get(api_key)
        if name is None:
            name = self._api_names[api_key] = self.apis.name(api_key)
        sent = response_size is not None
        head = (
            int(received * 1_000_000), broker_id, listener, host, port, principal, client_id,
            api_key, name, version, correlation_id, request_id,
        )
        tail = (
            request_size, response_size, _micros(elapsed) if sent else None,
            _micros(upstream_elapsed) if sent and not local else None, local, acks,
        )
        if not parts:
            self.sink.append((*head, True, error, *tail, None, None, None, None))
            return
        self.sink.add([
            (*head, i == 0, p.error_code, *tail, p.topic, p.partition, p.bytes, p.records)
            for i, p in enumerate(parts)
        ])

    def _traffic(
        self, api_key: int, version: int, expects_response: bool,
        request: bytes | memoryview | None, body: bytes | memoryview | None,
    ) -> Picked:
        """Produce ``acks`` and the Produce or Fetch partitions; learn ids from Metadata."""
        acks = (None if expects_response else 0) if api_key == PRODUCE_KEY else None
        try:
            if api_key == PRODUCE_KEY:
                if request is not None:
                    return produce_traffic(
                        version, memoryview(request),
                        None if body is None else memoryview(body), self.names,
                    )
            elif body is not None and api_key == FETCH_KEY:
                return acks, fetch_traffic(version, memoryview(body), self.names)
            elif body is not None and api_key == METADATA_KEY:
                self.names.learn(version, memoryview(body))
        except ProtocolError:  # the broker's to refuse: the row gets the header facts
            return acks, []
        return acks, []

    def tick(self, now: float) -> None:
        """Flush and roll on time (or hand the audit process what is packed)."""
        if self.remote is not None:
            self.remote.tick()
        elif self.sink is not None:
            self.sink.tick(now)

    def close(self, timeout: float) -> None:
        """Flush everything into visible files (the audit process too, within ``timeout``)."""
        if self.remote is not None:
            self.remote.close(timeout)
        elif self.sink is not None:
            self.sink.close()


def _number(values: Mapping[str, str], key: str) -> int:
    try:
        number = int(values[key].strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ObserverError(f"{key}={values[key]!r}: expected a whole number >= 1")
    return number


def _micros(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)


class TopErrors:
    """A response's error for its audit row: its top-level ``ErrorCode``; else the first
    non-zero ``ErrorCode`` among the entries of its top-level arrays, in field order; else
    0. ``None`` when the body cannot be read. Picked, not decoded (one picker per API
    version; every response of the registry can be picked, tests/observers check it)."""

    def __init__(self) -> None:
        self._pickers: dict[tuple[int, int], tuple[Picker, bool]] = {}

    def read(self, api: Api | None, version: int, body: memoryview) -> int | None:
        """The error of ``body``, a response of ``api`` (an :class:`~protocol.apis.Api`,
        ``None`` when unknown) at ``version``."""
        if api is None:
            return None
        key = (api.key, version)
        found = self._pickers.get(key)
        if found is None:
            found = self._pickers[key] = error_picker(api.response, version)
        picker, top_level = found
        try:
            values = picker.pick(version, body)
        except ProtocolError:
            return None
        if top_level:
            code: int = values[0]
            return code
        for entries in values:
            for (code,) in entries or ():
                if code:
                    return code
        return 0


def error_picker(spec: MessageSpec, version: int) -> tuple[Picker, bool]:
    """The picker of ``spec``'s error fields at ``version``, and whether it picks the
    top-level ``ErrorCode`` (else the ``ErrorCode`` of each top-level array's entries)."""
    for f in spec.fields:
        if f.name == "ErrorCode" and f.present_in(version):
            return Picker(spec, {"ErrorCode": None}), True
    arrays = {
        f.name: {"ErrorCode": None} for f in spec.fields
        if f.is_array and f.is_struct and f.present_in(version)
        and any(c.name == "ErrorCode" and c.present_in(version) for c in f.fields)
    }  # fmt: skip
    return Picker(spec, arrays), False
