"""Read-only views of decoded messages: what observers and handlers get to see.

A view wraps one decoded struct and the spec it was decoded with. Fields read by their
Kafka name (``view["TopicData"]``) or its snake-case twin (``view.topic_data``); a field
the message's version does not carry reads as its default, as in Kafka's generated
classes. Nested structs are views, arrays are tuples, and ``records`` fields are
:class:`RecordsView` objects that expose sizes and counts only: an observer never holds
the produced bytes themselves (KIP-388's ObservableStruct, seed 003).

:class:`LazyBody` decodes on first use, so a frame nobody looks into is never parsed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

from protocol.records import RecordsSummary, summarize
from protocol.schema import decode, field_default
from protocol.spec import FieldSpec, MessageSpec

_WORD = re.compile(r"(?<!^)(?=[A-Z])")


def snake_case(name: str) -> str:
    """``TopicData`` -> ``topic_data`` (also ``timeoutMs`` -> ``timeout_ms``, as some specs spell it)."""
    return _WORD.sub("_", name).lower()


# How a field's value is wrapped (decided once per field, not per read).
_PLAIN, _RECORDS, _STRUCT, _STRUCTS, _ARRAY = range(5)

_Table = tuple[dict[str, tuple[FieldSpec, int]], dict[str, str]]
# Field list identity -> (the list, {Kafka name: (spec, wrap kind)}, {snake name: Kafka
# name}); field tuples are module-level constants, so this is built once per message
# struct, not per view (observers read thousands of views a second).
_TABLES: dict[int, tuple[tuple[FieldSpec, ...], _Table]] = {}


def _kind(spec: FieldSpec) -> int:
    if spec.element_type == "records" and not spec.is_array:
        return _RECORDS
    if spec.is_struct:
        return _STRUCTS if spec.is_array else _STRUCT
    return _ARRAY if spec.is_array else _PLAIN


def _tables(fields: tuple[FieldSpec, ...]) -> _Table:
    entry = _TABLES.get(id(fields))
    if entry is None or entry[0] is not fields:
        by_name = {f.name: (f, _kind(f)) for f in fields}
        entry = _TABLES[id(fields)] = (fields, (by_name, {snake_case(f.name): f.name for f in fields}))
    return entry[1]


class RecordsView:
    """A ``records`` field: its size and what its batch headers say, never its bytes."""

    __slots__ = ("_raw", "_summary")

    def __init__(self, raw: bytes | None) -> None:
        self._raw = raw
        self._summary: RecordsSummary | None = None

    @property
    def is_null(self) -> bool:
        """True when the field was null on the wire."""
        return self._raw is None

    @property
    def size_bytes(self) -> int:
        """Bytes of record data (0 for null)."""
        return len(self._raw) if self._raw is not None else 0

    @property
    def summary(self) -> RecordsSummary:
        """Batch and record counts read from the batch headers (computed once)."""
        if self._summary is None:
            self._summary = summarize(self._raw or b"")
        return self._summary

    @property
    def record_count(self) -> int:
        """Records in the field, from the batch headers."""
        return self.summary.record_count

    def __repr__(self) -> str:
        return f"RecordsView(size_bytes={self.size_bytes})"


class StructView(Mapping[str, Any]):
    """A read-only struct: Kafka field names as keys, snake-case names as attributes."""

    __slots__ = ("_data", "_fields", "_snake", "_version")

    def __init__(self, data: Mapping[str, Any], fields: tuple[FieldSpec, ...], version: int):
        self._data = data
        self._fields, self._snake = _tables(fields)
        self._version = version

    @property
    def version(self) -> int:
        """The message version the struct was decoded at."""
        return self._version

    def present(self, name: str) -> bool:
        """Whether field ``name`` exists at this version (others read as their defaults)."""
        entry = self._fields.get(name)
        return entry is not None and entry[0].present_in(self._version)

    def __getitem__(self, name: str) -> Any:
        entry = self._fields.get(name)
        if entry is None:
            raise KeyError(name)
        spec, kind = entry
        if spec.present_in(self._version) and name in self._data:
            return _wrap(self._data[name], spec, kind, self._version)
        return _wrap(field_default(spec, self._version), spec, kind, self._version)

    def __getattr__(self, snake: str) -> Any:
        if snake.startswith("_"):  # slots not yet set (copy, pickle): no recursion
            raise AttributeError(snake)
        name = self._snake.get(snake)
        if name is None:
            raise AttributeError(f"no field {snake!r}")
        return self[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={self[k]!r}" for k in list(self._fields)[:6])
        return f"StructView({shown}{', …' if len(self._fields) > 6 else ''})"

    def to_dict(self) -> dict[str, Any]:
        """A plain, deep copy (records as their size) for logging or JSON."""
        return {name: _plain(self[name]) for name in self._fields}


def _wrap(value: Any, spec: FieldSpec, kind: int, version: int) -> Any:
    if kind == _PLAIN:
        return value
    if kind == _RECORDS:
        return RecordsView(value)
    if value is None:
        return None
    if kind == _STRUCTS:
        return tuple(StructView(v, spec.fields, version) for v in value)
    if kind == _STRUCT:
        return StructView(value, spec.fields, version)
    return tuple(value)


def _plain(value: Any) -> Any:
    if isinstance(value, StructView):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, RecordsView):
        return {"size_bytes": value.size_bytes}
    return value


class LazyBody:
    """A message body that is decoded only when someone reads it."""

    __slots__ = ("__dict__", "raw", "spec", "version")

    def __init__(self, spec: MessageSpec, version: int, raw: bytes | bytearray | memoryview):
        self.spec = spec
        self.version = version
        self.raw = raw

    @cached_property
    def view(self) -> StructView:
        """The decoded body (raises :mod:`protocol.errors` exceptions on bad bytes)."""
        return StructView(decode(self.spec, self.version, self.raw), self.spec.fields, self.version)


def view_of(spec: MessageSpec, version: int, raw: bytes | bytearray | memoryview) -> StructView:
    """Decode ``raw`` as ``spec`` at ``version`` and wrap it in a view."""
    return StructView(decode(spec, version, raw), spec.fields, version)
