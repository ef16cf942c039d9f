"""Differential tests against kio (Aiven-Open), a second implementation generated from Kafka's specs.

kio 0.6.5 (pyproject.toml), the newest kio release on PyPI when the pin was last reviewed
(November 2026), is generated from Apache Kafka 4.2.0's JSON message specs by its own
generator, and reads and writes with its own (Rust) codecs: nothing is shared with ours but
the JSON. For every request and response of every API in our table, at every version kio
has, both ways:

* **ours -> kio**: a random message encoded by us is read by kio, which must consume every
  byte and write it back **byte-identically**;
* **kio -> ours**: the bytes kio wrote are decoded by us to the same field values and
  re-encoded by us **byte-identically**.

Unknown tagged fields are not generated: kio drops them when it reads (our own round trips
and the kafka-python differential cover them). Values kio's richer types cannot hold are
redrawn (:data:`_KIO_VALUES`: error codes it knows, non-negative timestamps).

Covered: 269 request and 269 response schemas (every API x version of Kafka 4.1.0's
client-facing table), each both ways. Not compared, and only these: the 27 legacy versions
below Kafka 4.x's minimum that we widen back (``codegen.LEGACY_MIN_VERSION``), which kio,
generated from 4.2, does not have; they are checked against the 3.9.0 specs (see
docs/protocol.md) and by the kafka-python differential. :func:`test_coverage_count` pins
both numbers, so a lost case cannot go unnoticed.
"""

from __future__ import annotations

import dataclasses
import io
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY
from protocol.release import read_manifest
from protocol.schema import decode, encode
from protocol.spec import MessageSpec, Versions
from tests.protocol.strategies import Mode, message_values, plain

kio_index = pytest.importorskip("kio.index")
kio_serial = pytest.importorskip("kio.serial")
ErrorCode = pytest.importorskip("kio.schema.errors").ErrorCode

#: No unknown tags (kio drops them); known tags inside tagged values are fine.
KIO_MODE = Mode(unknown=False, inner_tags=True)
EXAMPLES = max(5, settings().max_examples // 20)

#: API keys that are ours only.
OWN_KEYS = frozenset({10035})


def _kio_class(api_key: int, kind: str, version: int) -> Any | None:
    try:
        if kind == "request":
            return kio_index.load_request_schema(api_key, version)
        return kio_index.load_response_schema(api_key, version)
    except kio_index.KioIndexError:
        return None


def _cases() -> tuple[list[Any], list[tuple[str, int, str, str]]]:
    cases: list[Any] = []
    skipped: list[tuple[str, int, str, str]] = []
    for api in DEFAULT_REGISTRY:
        if api.key in OWN_KEYS:
            continue
        assert api.versions.hi is not None
        for version in range(api.versions.lo, api.versions.hi + 1):
            for kind, spec in (("request", api.request), ("response", api.response)):
                cls = _kio_class(api.key, kind, version)
                if cls is None:
                    skipped.append((api.name, version, kind, "kio (Kafka 4.2) has no such version"))
                else:
                    cases.append(pytest.param(spec, cls, version, id=f"{spec.name}-v{version}"))
    return cases, skipped


CASES, SKIPPED = _cases()


_ERROR_CODES = st.sampled_from(sorted(int(code.value) for code in ErrorCode))
#: kio reads some fields as richer types: values it cannot hold are left out.
_KIO_VALUES: dict[str, st.SearchStrategy[int]] = {
    "error_code": _ERROR_CODES,  # an enum of the codes Kafka 4.2 knows
    "datetime_i64": st.integers(0, 2**42),  # a UTC instant kio can hold (no negatives)
    "timedelta_i64": st.integers(-(2**40), 2**40),  # within datetime.timedelta's range
}


def _element_class(annotation: Any) -> Any:
    """The dataclass inside ``tuple[X, ...]`` or ``X | None`` (or None)."""
    if dataclasses.is_dataclass(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        inner = _element_class(arg)
        if inner is not None:
            return inner
    return None


def _tame(data: st.DataObject, fields: Any, version: int, value: Any, cls: Any) -> None:
    """Redraw, in place, the values kio's richer types cannot hold (matched by position)."""
    present = [f for f in fields if f.present_in(version)]
    theirs = dataclasses.fields(cls)
    assert len(present) == len(theirs), (cls, [f.name for f in present])
    for ours, kio_field in zip(present, theirs, strict=True):
        current = value[ours.name]
        if current is None:
            continue
        if ours.is_struct:
            inner = _element_class(kio_field.type)
            for item in current if ours.is_array else [current]:
                _tame(data, ours.fields, version, item, inner)
            continue
        strategy = _KIO_VALUES.get(kio_field.metadata.get("kafka_type", ""))
        if strategy is None:
            continue
        if ours.is_array:
            value[ours.name] = [data.draw(strategy) for _ in current]
        else:
            value[ours.name] = data.draw(strategy)


def _kio_round_trip(cls: Any, wire: bytes) -> bytes:
    entity, consumed = kio_serial.entity_reader(cls)(memoryview(wire), 0)
    assert consumed == len(wire), f"kio read {consumed} of {len(wire)} bytes"
    buffer = io.BytesIO()
    kio_serial.entity_writer(cls)(buffer, entity)
    return buffer.getvalue()


@pytest.mark.parametrize(("spec", "cls", "version"), CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_both_ways_byte_identical(
    spec: MessageSpec, cls: Any, version: int, data: st.DataObject
) -> None:
    value = data.draw(message_values(spec, version, KIO_MODE))
    _tame(data, spec.fields, version, value, cls)
    ours = encode(spec, version, value)
    theirs = _kio_round_trip(cls, ours)
    assert theirs.hex() == ours.hex()  # ours -> kio -> same bytes
    again = decode(spec, version, theirs)
    assert plain(again) == plain(value)
    assert encode(spec, version, again) == theirs  # kio -> ours -> same bytes


def test_coverage_count() -> None:
    requests = sum(1 for p in CASES if p.values[0].kind == "request")
    assert (requests, len(CASES) - requests) == (269, 269)
    # Every version kio lacks is a legacy one: below the minimum of the 4.1.0 spec itself.
    own_minimum = {
        entry["name"].removesuffix("Request"): Versions.parse(entry["validVersions"]).lo
        for entry in read_manifest()["files"].values()
        if entry["type"] == "request"
    }
    legacy = {(name, version) for name, version, _kind, _why in SKIPPED}
    assert all(version < own_minimum[name] for name, version in legacy), legacy
    assert len(legacy) == 27 and len(SKIPPED) == 54
