"""The audit's facts of one exchange, and the rows they become: shared by both audits.

:class:`AuditFacts` is what the audit keeps of an exchange (header facts, and the bytes its
rows are read from); :class:`AuditRecorder` turns facts into rows of
:data:`~observers.audit_schema.AUDIT_SCHEMA` and buffers them in a
:class:`~observers.parquet_sink.ParquetSink`. The thread audit (:mod:`observers.audit`)
builds facts from each exchange and records them on its worker thread; the process audit
(:mod:`observers.audit_process`) builds them in the sidecar and records them in a child
process. Either way the files are the same.

What each row says (:meth:`AuditRecorder.record`):

* Produce: one row per topic-partition of the request (bytes and records produced), with
  that partition's error from the response; ``acks=0`` gets its rows too, with the
  response columns null.
* Fetch: one row per topic-partition of the response (bytes and records the client
  received), error per partition, and the request's ``max_wait_ms`` (the designed wait of
  a long poll). Topic ids (v13+) are mapped to names learned from the Metadata responses
  this audit sees; an id not seen yet is written in its text form (a client that asked
  another sidecar for metadata: a known gap, see docs/observers.md).
* Metadata: the request's row, then one inventory row (``first_row`` false,
  ``topic_partitions`` set) per topic the response reports without error that this
  audit has not recorded with the same partition count in the same UTC hour
  (:class:`~observers.traffic.TopicInventory`).
* A Produce or Fetch naming no partition, and every other API: a single row with the
  partition columns null and the top-level error (for responses without one, the first
  non-zero error of a top-level array's entries, else 0).

* Denials (version 3): what the sidecar's ACLs refused of the request, or would have in
  shadow mode (:attr:`~observers.exchange.Exchange.denials`), as the ``denials`` list of the
  request's ``first_row``; null on its other rows, and when nothing was refused.
* Throttle time (version 3): the response's top-level ``ThrottleTimeMs`` as sent to the
  client (with client quotas, the larger of the broker's and the sidecar's), on every row
  of the request; null when the response has no such field at its version, when there
  was no response, and when it cannot be read. Read by the pick that reads the row's
  errors (Produce: the same walk as its partition errors; Fetch: its first four bytes;
  other APIs: the same pick as the top-level error, :class:`TopErrors`): never a second
  walk of a response.

Which schema version the rows have is the recorder's :attr:`AuditRecorder.version` (2 or
3: version 3 adds the client software columns, ``denials`` and ``throttle_time_ms``). The audits set it from the finalized
level of the sidecar feature ``ksidecar.audit.format`` (:func:`format_version`), checked
on their first exchange and on every tick; a change rolls every open file, so rows of
the new version start new files (:meth:`AuditRecorder.use_version`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from observers.audit_schema import (
    DENIAL_FIELDS,
    FETCH_KEY,
    FORMAT_FEATURE,
    METADATA_KEY,
    PRODUCE_KEY,
    SHARE_FETCH_KEY,
    VERSION_AT_LEVEL,
    VERSION_KEY,
    schema_for,
    version_at_level,
)
from observers.errors import ObserverError
from observers.exchange import Exchange, Frame, Link
from observers.parquet_sink import ParquetSink, SinkMetrics
from observers.traffic import (
    PartitionTraffic,
    TopicInventory,
    TopicNames,
    fetch_max_wait,
    fetch_throttle,
    fetch_traffic,
    produce_traffic,
    share_fetch_traffic,
    throttle_in,
)
from protocol.apis import Api, ApiRegistry
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader
from protocol.pick import Picker
from protocol.spec import MessageSpec

#: A Produce ``acks`` (``None`` for other APIs), the partitions picked from the frames and
#: the response's ``ThrottleTimeMs`` (``None``: none at its version, or no response).
Picked = tuple[int | None, list[PartitionTraffic], int | None]

ISOLATIONS = ("thread", "process")

#: Defaults of the ``observer.audit.*`` keys (proxy/config documents and validates them).
DEFAULTS = {
    "observer.audit.dir": "",
    "observer.audit.flush.interval.ms": "1000",
    "observer.audit.roll.rows": "1000000",
    "observer.audit.roll.bytes": str(128 << 20),
    "observer.audit.roll.ms": "300000",
    "observer.audit.isolation": "thread",
}

_HOUR_US = 3_600_000_000

log = logging.getLogger(__name__)

#: The finalized level of a sidecar feature, by name (``ObserverConfig.feature_level``).
FeatureLevel = Callable[[str], int]


def format_version(feature_level: FeatureLevel | None) -> int:
    """The schema version to write now: the one of ``ksidecar.audit.format``'s finalized
    level; level 0's (version 2) when the sidecar has no features (no ZooKeeper)."""
    return version_at_level(feature_level(FORMAT_FEATURE) if feature_level is not None else 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFacts:
    """What the audit keeps of one exchange: every row of it is made from these."""

    #: The connection it came over (listener, client address, the sidecar's broker id).
    link: Link
    #: The request header (API key and version, correlation id, client id).
    header: RequestHeader
    principal: str
    request_id: int
    #: When the request was read, Unix seconds.
    received: float
    request_size: int
    #: The response frame's size; ``None`` when none was sent.
    response_size: int | None
    elapsed: float | None
    upstream_elapsed: float | None
    local: bool
    expects_response: bool
    #: A Fetch request's ``MaxWaitMs`` (``None`` for other APIs, or when unreadable).
    max_wait_ms: int | None = None
    #: A Produce request's body (``None`` for other APIs, or when ``picked`` is given).
    request: Frame | None = None
    #: The response body (``None`` when none was sent, its header was unreadable, or
    #: ``picked`` holds all the rows need).
    body: Frame | None = None
    #: Produce ``acks`` and the partitions, when picked already (``request``/``body`` then
    #: may be left out).
    picked: Picked | None = None
    #: ``(ClientSoftwareName, ClientSoftwareVersion)`` of the connection (KIP-511), if sent.
    client_software: tuple[str, str] | None = None
    #: What the ACLs refused (or would have): ``(resource type, name, operation, mode)`` each.
    denials: tuple[tuple[str, str, str, str], ...] = ()


def facts_of(
    x: Exchange, *, names: TopicNames | None = None, pick_from: int | None = None,
    copy: bool = False,
) -> AuditFacts:
    """The facts of ``x``, its bodies referenced, or copied with ``copy`` (the frames
    belong to the data path: facts that leave the thread must own their bytes).

    With ``pick_from`` (the process audit), Produce and Fetch bodies of at least that many
    bytes are picked here (``names`` maps Fetch topic ids) and left out; Metadata responses
    teach ``names`` as they pass.
    """
    header = x.header
    api_key = header.api_key
    response = x.response
    try:
        response_body = x.response_body()
    except ProtocolError:
        response_body = None
    produced = x.request_body() if api_key == PRODUCE_KEY else None
    max_wait: int | None = None
    if api_key == FETCH_KEY:
        fetch = x.request_body()
        if fetch is not None:
            try:
                max_wait = fetch_max_wait(header.api_version, fetch)
            except ProtocolError:
                max_wait = None
    picked: Picked | None = None
    if pick_from is not None and names is not None:
        picked = _pick_big(api_key, header.api_version, produced, response_body, names, pick_from)
    request: Frame | None = produced
    body: Frame | None = response_body
    if picked is not None:
        request = body = None  # the rows need neither (a response's error is per partition)
    elif copy:
        request = None if produced is None else bytes(produced)
        body = None if response_body is None else bytes(response_body)
    return AuditFacts(
        link=x.link, header=header, principal=x.principal, request_id=x.request_id,
        received=x.received, request_size=x.request_size,
        response_size=len(response) if response is not None else None, elapsed=x.elapsed,
        upstream_elapsed=x.upstream_elapsed, local=x.local,
        expects_response=x.expects_response, max_wait_ms=max_wait, request=request,
        body=body, picked=picked, client_software=x.client_software, denials=x.denials,
    )


def _pick_big(
    api_key: int, version: int, request: memoryview | None, body: memoryview | None,
    names: TopicNames, pick_from: int,
) -> Picked | None:
    """The partitions of a Produce request or Fetch response of at least ``pick_from``
    bytes (``None`` for smaller ones, other APIs, unreadable bodies and no partitions).
    Versions that name topics by id (13+) are picked whatever their size when ``names`` can
    ask the broker (``TopicNames.resolve``): only this side can."""
    picked: Picked | None = None
    by_id = version >= 13 and names.resolve is not None
    try:
        if api_key == PRODUCE_KEY:
            if request is not None and (by_id or len(request) >= pick_from):
                picked = produce_traffic(version, request, body, names)
        elif body is not None:
            if api_key == FETCH_KEY and (by_id or len(body) >= pick_from):
                picked = None, fetch_traffic(version, body, names), fetch_throttle(version, body)
            elif api_key == METADATA_KEY:
                names.learn(version, body)
    except ProtocolError:
        return None  # the recorder reads it again and gets the same error (its row: facts only)
    return picked if picked is not None and picked[1] else None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditSettings:
    """The ``observer.audit.*`` keys, read and checked."""

    directory: Path
    flush_interval: float
    roll_rows: int
    roll_bytes: int
    roll_age: float
    isolation: str


def isolation_of(config: Mapping[str, str]) -> str:
    """``observer.audit.isolation`` (``thread`` or ``process``)."""
    text = config.get("observer.audit.isolation", DEFAULTS["observer.audit.isolation"])
    isolation = text.strip().lower() or "thread"
    if isolation not in ISOLATIONS:
        raise ObserverError(f"observer.audit.isolation={text!r}: must be one of {', '.join(ISOLATIONS)}")
    return isolation


def audit_settings(config: Mapping[str, str]) -> AuditSettings:
    """Read ``observer.audit.*`` from ``config`` (errors name the key and the value)."""
    values = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
    directory = values["observer.audit.dir"].strip()
    if not directory:
        raise ObserverError("observer.audit.dir is required when the audit observer is on")

    def number(key: str) -> int:
        try:
            found = int(values[key].strip())
        except ValueError:
            found = 0
        if found < 1:
            raise ObserverError(f"{key}={values[key]!r}: expected a whole number >= 1")
        return found

    return AuditSettings(
        directory=Path(directory),
        flush_interval=number("observer.audit.flush.interval.ms") / 1000,
        roll_rows=number("observer.audit.roll.rows"),
        roll_bytes=number("observer.audit.roll.bytes"),
        roll_age=number("observer.audit.roll.ms") / 1000,
        isolation=isolation_of(config),
    )


class AuditRecorder:
    """Rows from facts, buffered in a Parquet sink (module docstring). One owner thread."""

    def __init__(self, sink: ParquetSink, apis: ApiRegistry | None = None) -> None:
        self.sink = sink
        #: The schema version of the rows (the sink's schema says which).
        self.version = int((sink.schema.metadata or {}).get(VERSION_KEY.encode(), b"0"))
        self.apis = apis if apis is not None else ApiRegistry()
        self.names = TopicNames()
        self.errors = TopErrors()
        self.inventory = TopicInventory()
        self._api_names: dict[int, str] = {}
        #: The broker id of the last exchange recorded (files are named after it).
        self.broker_id = -1

    @classmethod
    def open(
        cls, settings: AuditSettings, *, broker_id: int, apis: ApiRegistry | None = None,
        metrics: SinkMetrics | None = None, version: int = VERSION_AT_LEVEL[0], worker: int = 0,
    ) -> AuditRecorder:
        """A recorder of schema ``version`` over a new sink in ``settings.directory``, after
        recovering the journals a killed sidecar left there (``worker``: the sidecar worker
        process's index, in the files' names)."""
        holder: list[AuditRecorder] = []

        def current_broker() -> int:
            known = holder[0].broker_id if holder else -1
            return known if known >= 0 else broker_id

        sink = ParquetSink(
            settings.directory, schema_for(version), broker_id=current_broker, worker=worker,
            flush_interval=settings.flush_interval, roll_rows=settings.roll_rows,
            roll_bytes=settings.roll_bytes, roll_age=settings.roll_age, metrics=metrics,
        )
        recorder = cls(sink, apis)
        holder.append(recorder)
        sink.recover()
        return recorder

    def use_version(self, version: int) -> None:
        """Write rows of schema ``version`` from now on: what is buffered is flushed and
        every open file completed in the old version first (a file holds one version)."""
        if version == self.version:
            return
        if version not in VERSION_AT_LEVEL.values():
            raise ValueError(f"audit schema version {version} is not one this sidecar writes")
        self.sink.change_schema(schema_for(version))
        log.info("audit: writing schema version %d from now on (was %d)", version, self.version)
        self.version = version

    def record(self, f: AuditFacts) -> None:
        """Buffer the rows of one exchange."""
        link, header = f.link, f.header
        api_key, version = header.api_key, header.api_version
        self.broker_id = link.broker_id
        body = f.body
        inventory: list[tuple[str, int]] = []
        if f.picked is not None:
            acks, parts, throttle = f.picked
        else:
            acks, parts, inventory, throttle = self._traffic(api_key, version, f)
        error: int | None = None
        if not parts and body is not None:
            error, throttle = self.errors.read_top(self.apis.get(api_key), version, memoryview(body))
        name = self._api_names.get(api_key)
        if name is None:
            name = self._api_names[api_key] = self.apis.name(api_key)
        sent = f.response_size is not None
        received_us = int(f.received * 1_000_000)
        client = link.client
        head = (
            received_us, link.broker_id, link.listener, client.host, client.port, f.principal,
            header.client_id, api_key, name, version, header.correlation_id, f.request_id,
        )
        tail = (
            f.request_size, f.response_size, _micros(f.elapsed) if sent else None,
            _micros(f.upstream_elapsed) if sent and not f.local else None, f.local, acks,
        )
        # Version 3's columns close every row (the columns of a version are a prefix of the
        # next's): the client software and the throttle time on each, the denials on the
        # first row only.
        end: tuple[Any, ...] = ()
        first_end: tuple[Any, ...] = ()
        if self.version >= 3:
            software = f.client_software if f.client_software is not None else (None, None)
            end = (*software, None, throttle)
            first_end = (*software, denial_list(f.denials), throttle) if f.denials else end
        sink = self.sink
        if not parts:
            sink.append((*head, True, error, *tail, None, None, None, None, None, f.max_wait_ms, *first_end))
            if inventory:
                fresh = self.inventory.fresh(received_us // _HOUR_US, inventory)
                sink.add([(*head, False, 0, *tail, topic, None, None, None, count, None, *end)
                          for topic, count in fresh])
            return
        wait = f.max_wait_ms
        sink.add([
            (*head, i == 0, p.error_code, *tail, p.topic, p.partition, p.bytes, p.records, None, wait,
             *(first_end if i == 0 else end))
            for i, p in enumerate(parts)
        ])

    def _traffic(
        self, api_key: int, version: int, f: AuditFacts
    ) -> tuple[int | None, list[PartitionTraffic], list[tuple[str, int]], int | None]:
        """Produce ``acks``, the Produce or Fetch partitions, a Metadata response's topics
        (learning their ids), and the Produce or Fetch response's ``ThrottleTimeMs`` (for
        other APIs :meth:`TopErrors.read_top` reads it with the error)."""
        acks = (None if f.expects_response else 0) if api_key == PRODUCE_KEY else None
        request, body = f.request, f.body
        try:
            if api_key == PRODUCE_KEY:
                if request is not None:
                    acks, parts, throttle = produce_traffic(
                        version, memoryview(request),
                        None if body is None else memoryview(body), self.names,
                    )
                    return acks, parts, [], throttle
            elif body is not None and api_key == FETCH_KEY:
                view = memoryview(body)
                return acks, fetch_traffic(version, view, self.names), [], fetch_throttle(version, view)
            elif body is not None and api_key == SHARE_FETCH_KEY:
                view = memoryview(body)
                return acks, share_fetch_traffic(version, view, self.names), [], fetch_throttle(version, view)
            elif body is not None and api_key == METADATA_KEY:
                return acks, [], self.inventory.read(version, memoryview(body), self.names), None
        except ProtocolError:  # the broker's to refuse: the row gets the header facts
            return acks, [], [], None
        return acks, [], [], None

    def tick(self, now: float) -> None:
        """Flush and roll on time."""
        self.sink.tick(now)

    def close(self) -> None:
        """Flush everything into visible files."""
        self.sink.close()


def denial_list(denials: tuple[tuple[str, str, str, str], ...]) -> list[dict[str, str]]:
    """The ``denials`` column's value (version 3) for an exchange's denials."""
    return [dict(zip(DENIAL_FIELDS, d, strict=True)) for d in denials]


def _micros(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)


class TopErrors:
    """A response's error for its audit row: its top-level ``ErrorCode``; else the first
    non-zero ``ErrorCode`` among the entries of its top-level arrays, in field order; else
    0. ``None`` when the body cannot be read. Picked, not decoded (one picker per API
    version; every response of the registry can be picked, tests/observers check it).
    The same pick reads the response's top-level ``ThrottleTimeMs`` (:meth:`read_top`)."""

    def __init__(self) -> None:
        self._pickers: dict[tuple[int, int], TopPicker] = {}

    def read(self, api: Api | None, version: int, body: memoryview) -> int | None:
        """The error of ``body``, a response of ``api`` (an :class:`~protocol.apis.Api`,
        ``None`` when unknown) at ``version``."""
        return self.read_top(api, version, body)[0]

    def read_top(self, api: Api | None, version: int, body: memoryview) -> tuple[int | None, int | None]:
        """The error of ``body`` (as :meth:`read`) and its ``ThrottleTimeMs``: ``None``
        when the response has none at ``version``, or either when the body cannot be read."""
        if api is None:
            return None, None
        key = (api.key, version)
        found = self._pickers.get(key)
        if found is None:
            found = self._pickers[key] = top_picker(api.response, version)
        picker, top_level, throttle_at = found
        try:
            values = picker.pick(version, body)
        except ProtocolError:
            return None, None
        throttle: int | None = None if throttle_at is None else values[throttle_at]
        if top_level:
            code: int = values[0 if throttle_at != 0 else 1]
            return code, throttle
        for i, entries in enumerate(values):
            if i == throttle_at:
                continue
            for (code,) in entries or ():
                if code:
                    return code, throttle
        return 0, throttle


#: A response's picker of its error fields and ``ThrottleTimeMs`` at one version; whether it
#: picks the top-level ``ErrorCode``; where the throttle time is among the values picked
#: (``None``: the response has none at that version).
TopPicker = tuple[Picker, bool, int | None]


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


def top_picker(spec: MessageSpec, version: int) -> TopPicker:
    """:func:`error_picker`'s selection, plus ``ThrottleTimeMs`` when ``spec`` has it at
    ``version`` (a picker returns values in the spec's field order: its index is the number
    of selected fields declared before it)."""
    errors, top_level = error_picker(spec, version)
    if not throttle_in(spec, version):
        return errors, top_level, None
    selection = {**errors.selection, "ThrottleTimeMs": None}
    order = [f.name for f in spec.fields if f.name in selection]
    return Picker(spec, selection), top_level, order.index("ThrottleTimeMs")
