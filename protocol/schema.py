"""From the declarative table to ``construct``: one parser/builder per message version.

:func:`message_construct` reads a :class:`~protocol.spec.MessageSpec` at one version and
returns a :class:`~protocol.primitives.KStruct` holding exactly the fields present at
that version, with compact encodings and tagged sections where the version is flexible.
Results are cached per ``(spec, version)``: a schema is built once per process.

:func:`decode` and :func:`encode` are the only entry points the rest of the project uses:
they turn any failure on untrusted bytes into a :mod:`protocol.errors` exception.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from typing import Any

import construct as c

from protocol import primitives as p
from protocol.errors import (
    DecodeError,
    EncodeError,
    InvalidValue,
    ProtocolError,
    TrailingBytes,
    Truncated,
    UnsupportedVersion,
)
from protocol.spec import FieldSpec, MessageSpec

_FIXED: dict[str, c.Construct] = {
    "bool": p.Boolean,
    "int8": p.Int8,
    "int16": p.Int16,
    "uint16": p.UInt16,
    "int32": p.Int32,
    "uint32": p.UInt32,
    "int64": p.Int64,
    "float64": p.Float64,
    "uuid": p.Uuid,
}


def field_default(field: FieldSpec, version: int) -> Any:
    """The value ``field`` takes at ``version`` when it is absent (tagged or versioned out)."""
    if field.is_array:
        if field.default is None:
            return None
        return c.ListContainer()
    if field.is_struct:
        if field.default is None and version in field.nullable:
            return None
        return struct_defaults(field.fields, version)
    return field.default


def struct_defaults(fields: tuple[FieldSpec, ...], version: int) -> c.Container:
    """A container holding every field of a struct that exists at ``version``, at its default."""
    return c.Container((f.name, field_default(f, version)) for f in fields if f.present_in(version))


def _element(field: FieldSpec, version: int, flexible: bool) -> c.Construct:
    """The construct of one value of ``field`` (an element, for arrays)."""
    if field.is_struct:
        return _struct(field.fields, version, flexible)
    kind = field.element_type
    if kind in _FIXED:
        return _FIXED[kind]
    # Strings, bytes and records inside arrays are never null (Kafka has no such field).
    nullable = not field.is_array and version in field.nullable
    if kind == "string":
        return p.KString(compact=flexible, nullable=nullable)
    if kind in ("bytes", "records"):
        return p.KBytes(compact=flexible, nullable=nullable)
    raise EncodeError(f"field {field.name} has unknown type {field.type!r}")


def _field(field: FieldSpec, version: int, flexible: bool) -> c.Construct:
    if field.flexible is not None:
        flexible = version in field.flexible
    element = _element(field, version, flexible)
    if field.is_array:
        return p.KArray(element, compact=flexible, nullable=version in field.nullable)
    if field.is_struct and version in field.nullable:
        return p.KNullable(element)  # KIP-893: int8 marker before the struct
    return element


def _struct(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> p.KStruct:
    regular: list[tuple[str, c.Construct]] = []
    tagged: list[p.TaggedField] = []
    defaults: dict[str, Any] = {}
    for f in fields:
        if not f.present_in(version):
            continue
        if f.tagged_in(version):
            if not flexible:
                raise EncodeError(f"tagged field {f.name} in a non-flexible version {version}")
            assert f.tag is not None
            tagged.append(
                p.TaggedField(
                    f.tag, f.name, _field(f, version, flexible), field_default(f, version)
                )
            )
        else:
            regular.append((f.name, _field(f, version, flexible)))
            defaults[f.name] = field_default(f, version)
    return p.KStruct(regular, p.TaggedFields(tagged) if flexible else None, defaults)


_CACHE: dict[tuple[int, int], p.KStruct] = {}
_COMPILED: dict[tuple[int, int], c.Construct] = {}


def message_construct(spec: MessageSpec, version: int) -> p.KStruct:
    """The parser/builder of ``spec`` at ``version``, built once per process.

    Cached by the spec's identity: specs are module-level constants, and hashing a whole
    nested spec on every call would cost more than the parse it saves.
    """
    key = (id(spec), version)
    schema = _CACHE.get(key)
    if schema is None:
        if version not in spec.valid:
            raise UnsupportedVersion(spec.api_key if spec.api_key is not None else -1, version)
        schema = _CACHE[key] = _struct(spec.fields, version, spec.is_flexible(version))
        _KEEP.append(spec)
    return schema


def compiled_parser(spec: MessageSpec, version: int) -> c.Construct:
    """``message_construct(spec, version).compile()``, compiled once per process.

    :func:`decode` parses with this. It is safe on client bytes because every primitive's
    emitted code raises what its interpreted parser raises
    (``tests/protocol/test_compiled.py`` checks both forms agree on arbitrary bytes for
    every schema, failures included).
    """
    key = (id(spec), version)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = message_construct(spec, version).compile()
    return compiled


# Keeps every cached spec alive so its id() can never be reused by another object.
_KEEP: list[MessageSpec] = []


def decode(
    spec: MessageSpec,
    version: int,
    data: bytes | bytearray | memoryview,
    *,
    allow_trailing: bool = False,
) -> c.Container:
    """Parse one message body; raise only :mod:`protocol.errors` exceptions.

    Unless ``allow_trailing``, bytes left after the message are an error: a frame's size
    delimits exactly one body.
    """
    schema = compiled_parser(spec, version)
    stream = io.BytesIO(data)
    obj = _parse(schema, stream, spec, version)
    extra = len(data) - stream.tell()
    if extra and not allow_trailing:
        raise TrailingBytes(extra, f"{spec.name} v{version}")
    return obj


def decode_prefix(
    spec: MessageSpec, version: int, data: bytes | bytearray | memoryview
) -> tuple[c.Container, int]:
    """Parse a message at the start of ``data``; return it and the bytes it used."""
    stream = io.BytesIO(data)
    obj = _parse(compiled_parser(spec, version), stream, spec, version)
    return obj, stream.tell()


def decode_interpreted(
    spec: MessageSpec, version: int, data: bytes | bytearray | memoryview
) -> tuple[c.Container, int]:
    """Like :func:`decode_prefix` with the interpreted parser (the reference for tests)."""
    stream = io.BytesIO(data)
    obj = _parse(message_construct(spec, version), stream, spec, version)
    return obj, stream.tell()


def _parse(schema: c.Construct, stream: io.BytesIO, spec: MessageSpec, version: int) -> c.Container:
    try:
        result: c.Container = schema._parsereport(stream, {}, "")
        return result
    except ProtocolError:
        raise
    except c.StreamError as exc:
        raise Truncated(f"{spec.name} v{version}: input ended early ({exc})") from None
    except (c.ConstructError, struct.error, ValueError, OverflowError) as exc:  # pragma: no cover
        # Defensive: every primitive raises protocol errors itself (test_compiled.py and
        # the garbage tests check it); reaching this would be a bug in a primitive.
        raise InvalidValue(f"{spec.name} v{version}: {exc}") from None


def encode(spec: MessageSpec, version: int, value: Mapping[str, Any]) -> bytes:
    """Build one message body from field values (absent fields take their defaults)."""
    schema = message_construct(spec, version)
    stream = io.BytesIO()
    try:
        schema._build(value, stream, {}, "")
    except DecodeError as exc:  # pragma: no cover - builders never read
        raise EncodeError(str(exc)) from None
    except EncodeError:
        raise
    except (c.ConstructError, struct.error, ValueError, TypeError, OverflowError) as exc:
        raise EncodeError(f"{spec.name} v{version}: {exc}") from None
    return stream.getvalue()
