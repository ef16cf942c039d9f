"""Hypothesis strategies generated from the declarative message table.

:func:`message_values` reads a :class:`~protocol.spec.MessageSpec` at one version and
returns a strategy for the field-value container :func:`protocol.schema.decode` would
produce for it: exactly the fields present at that version, values within each type's
range, ``None`` only where the version makes the field nullable, tagged fields either at
their default or at a random value, and (in flexible structs) unknown tags, which decoders
must keep.

:func:`plain` turns a decoded container into plain dicts and lists *including* the
``_unknown_tags`` key: ``construct.Container.__eq__`` skips keys that start with ``_``,
so comparing containers directly would not notice lost unknown tags.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import construct as c
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY
from protocol.messages import DATA, HEADERS
from protocol.primitives import UNKNOWN_TAGS_KEY
from protocol.schema import field_default
from protocol.spec import FieldSpec, MessageSpec

#: Small collections keep ~600 schemas x a few examples fast.
MAX_ITEMS = 3

_INT_RANGES = {
    "int8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
}


def _ints(bits: int, *, signed: bool = True) -> st.SearchStrategy[int]:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    # Edges are where sign and width mistakes show; hypothesis finds them, but a few
    # examples per schema need the nudge.
    return st.one_of(st.sampled_from([lo, hi, 0, -1 if signed else 1]), st.integers(lo, hi))


_UUIDS = st.one_of(
    st.just(uuid.UUID(int=0)), st.integers(0, (1 << 128) - 1).map(lambda i: uuid.UUID(int=i))
)


def primitive(kind: str) -> st.SearchStrategy[Any]:
    """Values of one primitive type (never null)."""
    if kind in _INT_RANGES:
        return _ints(_INT_RANGES[kind])
    if kind == "uint16":
        return _ints(16, signed=False)
    if kind == "uint32":
        return _ints(32, signed=False)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "uuid":
        return _UUIDS
    if kind == "string":
        return st.text(max_size=8)
    if kind in ("bytes", "records"):
        return st.binary(max_size=12)
    raise AssertionError(f"unknown primitive {kind!r}")


def _nullable(strategy: st.SearchStrategy[Any], nullable: bool) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy) if nullable else strategy


@dataclass(frozen=True)
class Mode:
    """What a strategy may generate beyond plain field values.

    ``unknown``: unknown tags in flexible structs. ``inner_tags``: non-default tags (known or
    unknown) inside the value of a tagged field; kafka-python reads a tagged struct's own
    tagged section as empty, so its differential test turns this off.
    """

    unknown: bool = True
    inner_tags: bool = True


FULL = Mode()


def field_values(
    field: FieldSpec, version: int, flexible: bool, mode: Mode = FULL, *, in_tag: bool = False
) -> st.SearchStrategy[Any]:
    """Values of ``field`` at ``version`` (``flexible``: the enclosing message's flag)."""
    nullable = version in field.nullable
    if field.is_struct:
        element = struct_values(field.fields, version, flexible, mode, in_tag=in_tag)
    else:
        element = primitive(field.element_type)
    if field.is_array:
        # Elements of arrays are never null (Kafka has no such field).
        return _nullable(st.lists(element, max_size=MAX_ITEMS), nullable)
    return _nullable(element, nullable)


def unknown_tags(known: set[int]) -> st.SearchStrategy[list[tuple[int, bytes]]]:
    """Sorted ``(tag, raw)`` pairs for tags the schema does not know."""
    tags = st.integers(0, 40).filter(lambda t: t not in known)
    return st.lists(
        st.tuples(tags, st.binary(max_size=4)), max_size=2, unique_by=lambda e: e[0]
    ).map(sorted)


def struct_values(
    fields: tuple[FieldSpec, ...],
    version: int,
    flexible: bool,
    mode: Mode = FULL,
    *,
    in_tag: bool = False,
) -> st.SearchStrategy[c.Container]:
    """Containers for a struct at ``version``, as decode returns them."""
    members: dict[str, st.SearchStrategy[Any]] = {}
    known: set[int] = set()
    plain_tags = in_tag and not mode.inner_tags
    for f in fields:
        if not f.present_in(version):
            continue
        if f.tagged_in(version):
            assert f.tag is not None
            known.add(f.tag)
            default = st.just(field_default(f, version))
            members[f.name] = (
                default
                if plain_tags
                else st.one_of(default, field_values(f, version, flexible, mode, in_tag=True))
            )
        else:
            members[f.name] = field_values(f, version, flexible, mode, in_tag=in_tag)
    base = st.fixed_dictionaries(members)
    if not (flexible and mode.unknown) or plain_tags:
        return base.map(c.Container)
    return st.tuples(base, unknown_tags(known)).map(_with_unknown)


def _with_unknown(pair: tuple[dict[str, Any], list[tuple[int, bytes]]]) -> c.Container:
    values, extra = pair
    obj = c.Container(values)
    if extra:
        obj[UNKNOWN_TAGS_KEY] = extra
    return obj


@cache
def message_values(
    spec: MessageSpec, version: int, mode: Mode = FULL
) -> st.SearchStrategy[c.Container]:
    """Field-value containers for ``spec`` at ``version`` (cached per schema and mode)."""
    return struct_values(spec.fields, version, spec.is_flexible(version), mode)


def plain(value: Any) -> Any:
    """Containers as dicts (all keys, ``_unknown_tags`` too), sequences as lists."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def all_schemas() -> Iterator[tuple[str, MessageSpec, int]]:
    """Every (kind, spec, version) the registry parses, headers and data payloads too."""
    for api in DEFAULT_REGISTRY:
        assert api.versions.hi is not None
        for version in range(api.versions.lo, api.versions.hi + 1):
            yield "request", api.request, version
            yield "response", api.response, version
    for spec in (*HEADERS.values(), *DATA.values()):
        assert spec.valid.hi is not None
        for version in range(spec.valid.lo, spec.valid.hi + 1):
            yield spec.kind, spec, version
