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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from observers.api import Observer, ObserverConfig
from observers.audit_schema import AUDIT_SCHEMA, FETCH_KEY, PRODUCE_KEY
from observers.hub import Exchange, ObserverError
from observers.parquet_sink import ParquetSink, SinkMetrics
from observers.traffic import PartitionTraffic, TopicNames, fetch_traffic, produce_traffic
from protocol.apis import Api, ApiRegistry
from protocol.errors import ProtocolError
from protocol.pick import Picker
from protocol.spec import MessageSpec

log = logging.getLogger(__name__)

METADATA_KEY = 3

#: Defaults of the ``observer.audit.*`` keys (proxy/config.py documents and validates them).
DEFAULTS = {
    "observer.audit.dir": "",
    "observer.audit.flush.interval.ms": "1000",
    "observer.audit.roll.rows": "1000000",
    "observer.audit.roll.bytes": str(128 << 20),
    "observer.audit.roll.ms": "300000",
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

    def configure(self, config: ObserverConfig) -> None:
        """Read ``observer.audit.*``, recover journals a killed sidecar left, open the sink."""
        values = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
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
        :mod:`observers.api`; nothing is decoded but the fields the rows need)."""
        assert self.sink is not None
        header = x.header
        api_key: int = header.api_key
        version: int = header.api_version
        tap = x.tap
        self._broker_id = tap.broker_id
        response = x.response
        error: int | None = None
        try:
            body = x.response_body()
        except ProtocolError:
            body = None
        acks, parts = self._traffic(x, api_key, version, body)
        if not parts and body is not None:
            error = self.errors.read(self.apis.get(api_key), version, body)
        client = tap.client
        name = self._api_names.get(api_key)
        if name is None:
            name = self._api_names[api_key] = self.apis.name(api_key)
        sent = response is not None
        head = (
            int(x.received * 1_000_000), tap.broker_id, tap.listener, client.host, client.port,
            x.principal, header.client_id, api_key, name, version, header.correlation_id,
            x.request_id,
        )
        tail = (
            x.request_size, len(response) if response is not None else None,
            _micros(x.elapsed) if sent else None,
            _micros(x.upstream_elapsed) if sent and not x.local else None,
            x.local, acks,
        )
        if not parts:
            self.sink.append((*head, True, error, *tail, None, None, None, None))
            return
        self.sink.add([
            (*head, i == 0, p.error_code, *tail, p.topic, p.partition, p.bytes, p.records)
            for i, p in enumerate(parts)
        ])

    def _traffic(
        self, x: Exchange, api_key: int, version: int, body: memoryview | None
    ) -> tuple[int | None, list[PartitionTraffic]]:
        """Produce ``acks`` and the Produce or Fetch partitions; learn ids from Metadata."""
        acks = (None if x.expects_response else 0) if api_key == PRODUCE_KEY else None
        try:
            if api_key == PRODUCE_KEY:
                request = x.request_body()
                if request is not None:
                    return produce_traffic(version, request, body, self.names)
            elif body is not None and api_key == FETCH_KEY:
                return acks, fetch_traffic(version, body, self.names)
            elif body is not None and api_key == METADATA_KEY:
                self.names.learn(version, body)
        except ProtocolError:  # the broker's to refuse: the row gets the header facts
            return acks, []
        return acks, []

    def tick(self, now: float) -> None:
        """Flush and roll on time."""
        if self.sink is not None:
            self.sink.tick(now)

    def close(self, timeout: float) -> None:
        """Flush everything into visible files."""
        if self.sink is not None:
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
