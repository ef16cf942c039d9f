"""The Kafka primitive types as ``construct`` constructs.

Fixed-width numbers reuse construct's own classes. The length-prefixed types (strings,
bytes, arrays), the varints and the tagged-field section are small ``Construct``
subclasses because their Kafka rules (``-1``/``0`` meaning null, ``N+1`` compact
lengths, bounded varints, tags in strictly increasing order) are not expressible with
construct's generic ``Prefixed``/``PrefixedArray`` without losing the error we want to
raise.

Conventions (PROTOCOL_NOTES.md, "Frames and headers"):

* classic lengths are signed int16 (strings) or int32 (bytes, arrays); ``-1`` is null;
* compact lengths (flexible versions, KIP-482) are an unsigned varint holding ``N + 1``;
  ``0`` is null;
* protocol varints are unsigned LEB128 (at most 5 bytes for 32 bits, 10 for 64);
  record fields use zig-zag varints.

Python values: ints, ``bool``, ``float``, :class:`uuid.UUID`, ``str``, ``bytes`` and
``list``; ``None`` for null.

Compilation. Every parser here also implements construct's ``_emitparse``, so
``KStruct.compile()`` turns a whole message schema into flat Python functions (runs of
fixed-width fields read with one ``struct`` call, no per-field method dispatch). The emitted
code raises exactly what the interpreted ``_parse`` raises, on any input:
``tests/protocol/test_compiled.py`` checks that on arbitrary bytes for every schema, because
construct's own compiled code skips checks and must not see client bytes unproven.
"""

from __future__ import annotations

import io
import struct as _struct
import uuid as _uuid
from collections.abc import Mapping, Sequence
from typing import Any

import construct as c

from protocol.errors import EncodeError, InvalidTaggedFields, InvalidValue, Truncated

__all__ = [
    "Boolean",
    "Bytes",
    "Float64",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "KArray",
    "KBytes",
    "KNullable",
    "KString",
    "Records",
    "TaggedField",
    "TaggedFields",
    "UInt16",
    "UInt32",
    "UnsignedVarInt",
    "UnsignedVarLong",
    "Uuid",
    "VarInt",
    "VarLong",
    "read_exact",
]

Int8 = c.Int8sb
Int16 = c.Int16sb
UInt16 = c.Int16ub
Int32 = c.Int32sb
UInt32 = c.Int32ub
Int64 = c.Int64sb
Float64 = c.Float64b
#: Kafka's boolean is one byte; any non-zero byte reads as true, true is written as 1.
Boolean = c.Flag

_I16 = _struct.Struct(">h")
_I32 = _struct.Struct(">i")

UNKNOWN_TAGS_KEY = "_unknown_tags"
"""Container key holding ``[(tag, raw_bytes), ...]`` for tags a schema does not know."""


def read_exact(stream: io.BytesIO, n: int) -> bytes:
    """Read exactly ``n`` bytes or raise :class:`Truncated` (never a short read)."""
    data = stream.read(n)
    if len(data) != n:
        raise Truncated(f"needed {n} byte(s), only {len(data)} left")
    return data


def _read_uvarint(stream: io.BytesIO, max_bytes: int) -> int:
    # Unsigned LEB128, as Kafka's ByteUtils.readUnsignedVarint: bounded so a run of
    # continuation bytes cannot make us read or allocate without limit.
    result = 0
    shift = 0
    for _ in range(max_bytes):
        b = stream.read(1)
        if not b:
            raise Truncated("varint ended early")
        byte = b[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
    raise InvalidValue(f"varint longer than {max_bytes} bytes")


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _UVarInt(c.Construct):  # type: ignore[misc]
    """Unsigned varint bounded to ``bits`` bits."""

    def __init__(self, bits: int) -> None:
        super().__init__()
        self.bits = bits
        self.max_bytes = (bits + 6) // 7

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> int:
        value = _read_uvarint(stream, self.max_bytes)
        if value >> self.bits:
            raise InvalidValue(f"unsigned varint {value} exceeds {self.bits} bits")
        return value

    def _build(self, obj: int, stream: io.BytesIO, context: Any, path: str) -> int:
        if not isinstance(obj, int) or obj < 0 or obj >> self.bits:
            raise EncodeError(f"{obj!r} is not an unsigned {self.bits}-bit integer")
        stream.write(_uvarint_bytes(obj))
        return obj


class _ZigZag(c.Construct):  # type: ignore[misc]
    """Signed zig-zag varint (record fields) bounded to ``bits`` bits."""

    def __init__(self, bits: int) -> None:
        super().__init__()
        self.bits = bits
        self.max_bytes = (bits + 6) // 7

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> int:
        raw = _read_uvarint(stream, self.max_bytes)
        if raw >> self.bits:
            raise InvalidValue(f"zig-zag varint exceeds {self.bits} bits")
        return (raw >> 1) ^ -(raw & 1)

    def _build(self, obj: int, stream: io.BytesIO, context: Any, path: str) -> int:
        lo, hi = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        if not isinstance(obj, int) or not lo <= obj <= hi:
            raise EncodeError(f"{obj!r} is not a signed {self.bits}-bit integer")
        stream.write(_uvarint_bytes((obj << 1) ^ (obj >> (self.bits - 1))))
        return obj


UnsignedVarInt = _UVarInt(32)
UnsignedVarLong = _UVarInt(64)
VarInt = _ZigZag(32)
VarLong = _ZigZag(64)


class _UuidAdapter(c.Adapter):  # type: ignore[misc]
    def _decode(self, obj: bytes, context: Any, path: str) -> _uuid.UUID:
        return _uuid.UUID(bytes=bytes(obj))

    def _encode(self, obj: _uuid.UUID, context: Any, path: str) -> bytes:
        if not isinstance(obj, _uuid.UUID):
            raise EncodeError(f"{obj!r} is not a UUID")
        return obj.bytes


#: 16 raw bytes, as :class:`uuid.UUID`.
Uuid = _UuidAdapter(c.Bytes(16))


class _Length(c.Construct):  # type: ignore[misc]
    """A length prefix: classic (int16/int32, -1 = null) or compact (uvarint N+1, 0 = null).

    Parses to ``None`` for null, else the length; refuses null where not ``nullable``.
    """

    def __init__(self, compact: bool, nullable: bool, wide: bool) -> None:
        super().__init__()
        self.compact = compact
        self.nullable = nullable
        self.wide = wide

    def read(self, stream: io.BytesIO) -> int | None:
        if self.compact:
            n = _read_uvarint(stream, 5) - 1
        else:
            fmt = _I32 if self.wide else _I16
            (n,) = fmt.unpack(read_exact(stream, fmt.size))
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise InvalidValue(f"invalid length {n}" if n != -1 else "null where not nullable")
        return n

    def write(self, stream: io.BytesIO, n: int | None) -> None:
        if n is None:
            if not self.nullable:
                raise EncodeError("null value for a non-nullable field")
            n = -1
        if self.compact:
            stream.write(_uvarint_bytes(n + 1))
        else:
            fmt = _I32 if self.wide else _I16
            if not -1 <= n <= (0x7FFFFFFF if self.wide else 0x7FFF):
                raise EncodeError(f"length {n} does not fit its prefix")
            stream.write(fmt.pack(n))


class KString(c.Construct):  # type: ignore[misc]
    """A Kafka string: UTF-8 with a classic int16 or compact length, optionally nullable."""

    def __init__(self, *, compact: bool = False, nullable: bool = False) -> None:
        super().__init__()
        self.length = _Length(compact, nullable, wide=False)

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> str | None:
        n = self.length.read(stream)
        if n is None:
            return None
        raw = read_exact(stream, n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidValue(f"string is not valid UTF-8: {exc.reason}") from None

    def _build(self, obj: str | None, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            self.length.write(stream, None)
            return obj
        if not isinstance(obj, str):
            raise EncodeError(f"{obj!r} is not a string")
        raw = obj.encode("utf-8")
        self.length.write(stream, len(raw))
        stream.write(raw)
        return obj


class KBytes(c.Construct):  # type: ignore[misc]
    """Kafka bytes (also ``records``): int32 or compact length, optionally nullable."""

    def __init__(self, *, compact: bool = False, nullable: bool = False) -> None:
        super().__init__()
        self.length = _Length(compact, nullable, wide=True)

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> bytes | None:
        n = self.length.read(stream)
        if n is None:
            return None
        return read_exact(stream, n)

    def _build(self, obj: bytes | None, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            self.length.write(stream, None)
            return obj
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise EncodeError(f"{type(obj).__name__} is not bytes")
        self.length.write(stream, len(obj))
        stream.write(obj)
        return obj


#: ``records`` fields are bytes on the wire; :mod:`protocol.records` reads inside them.
Records = KBytes
#: Classic non-nullable ``bytes``.
Bytes = KBytes


class KArray(c.Construct):  # type: ignore[misc]
    """A Kafka array: int32 or compact length, elements of ``subcon``, optionally nullable."""

    def __init__(self, subcon: c.Construct, *, compact: bool = False, nullable: bool = False):
        super().__init__()
        self.subcon = subcon
        self.length = _Length(compact, nullable, wide=True)

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> list[Any] | None:
        n = self.length.read(stream)
        if n is None:
            return None
        # Each element takes at least one byte, so a count beyond the bytes left is a lie
        # that would otherwise make us loop (or allocate) far past the frame.
        remaining = len(stream.getbuffer()) - stream.tell()
        if n > remaining and not _zero_width(self.subcon):
            raise Truncated(f"array announces {n} elements, {remaining} byte(s) left")
        parse = self.subcon._parsereport
        items: list[Any] = c.ListContainer(parse(stream, context, path) for _ in range(n))
        return items

    def _build(self, obj: Sequence[Any] | None, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            self.length.write(stream, None)
            return obj
        if isinstance(obj, str | bytes) or not isinstance(obj, Sequence):
            raise EncodeError(f"{type(obj).__name__} is not a sequence")
        self.length.write(stream, len(obj))
        build = self.subcon._build
        for item in obj:
            build(item, stream, context, path)
        return obj


def _zero_width(subcon: c.Construct) -> bool:
    return isinstance(subcon, KStruct) and not subcon.fields and subcon.tagged is None


class TaggedField:
    """A known tag of a tagged-field section: its name, construct and default value."""

    __slots__ = ("default", "name", "subcon", "tag")

    def __init__(self, tag: int, name: str, subcon: c.Construct, default: Any) -> None:
        self.tag = tag
        self.name = name
        self.subcon = subcon
        self.default = default


def is_default(value: Any, default: Any) -> bool:
    """True when a tagged value equals its default and must therefore not be written."""
    if isinstance(default, tuple | list) and isinstance(value, tuple | list):
        return len(value) == 0 and len(default) == 0
    return bool(value == default)


class TaggedFields:
    """The tagged-field section of one flexible struct (KIP-482).

    Not a ``Construct`` itself: :class:`KStruct` calls it so known tags land directly in
    the struct's container under their field names. Unknown tags are kept, in order, as
    ``(tag, bytes)`` pairs under :data:`UNKNOWN_TAGS_KEY` and written back on build.
    """

    def __init__(self, known: Sequence[TaggedField]) -> None:
        self.known = {f.tag: f for f in known}

    def parse_into(self, obj: c.Container, stream: io.BytesIO, context: Any, path: str) -> None:
        """Read the section from ``stream`` into ``obj`` (defaults for absent tags)."""
        count = _read_uvarint(stream, 5)
        last = -1
        seen: set[int] = set()
        unknown: list[tuple[int, bytes]] = []
        for _ in range(count):
            tag = _read_uvarint(stream, 5)
            if tag <= last:
                raise InvalidTaggedFields(
                    f"tag {tag} after tag {last}: tags must be strictly increasing"
                )
            last = tag
            size = _read_uvarint(stream, 5)
            raw = read_exact(stream, size)
            field = self.known.get(tag)
            if field is None:
                unknown.append((tag, raw))
                continue
            sub = io.BytesIO(raw)
            value = field.subcon._parsereport(sub, context, path)
            if sub.tell() != size:
                raise InvalidTaggedFields(
                    f"tag {tag} ({field.name}) holds {size} byte(s), its value used {sub.tell()}"
                )
            obj[field.name] = value
            seen.add(tag)
        for tag, field in self.known.items():
            if tag not in seen:
                obj[field.name] = _fresh(field.default)
        if unknown:
            obj[UNKNOWN_TAGS_KEY] = unknown

    def build_from(self, obj: Mapping[str, Any], stream: io.BytesIO, context: Any, path: str) -> None:
        """Write the section for ``obj``: non-default known tags and kept unknown tags."""
        entries: list[tuple[int, bytes]] = []
        for tag, field in self.known.items():
            value = obj.get(field.name, field.default)
            if is_default(value, field.default):
                continue
            sub = io.BytesIO()
            field.subcon._build(value, sub, context, path)
            entries.append((tag, sub.getvalue()))
        for tag, raw in obj.get(UNKNOWN_TAGS_KEY, ()):
            if tag in self.known:
                raise EncodeError(f"unknown-tag list repeats known tag {tag}")
            entries.append((tag, bytes(raw)))
        entries.sort(key=lambda e: e[0])
        stream.write(_uvarint_bytes(len(entries)))
        last = -1
        for tag, raw in entries:
            if tag == last:
                raise EncodeError(f"tag {tag} written twice")
            last = tag
            stream.write(_uvarint_bytes(tag))
            stream.write(_uvarint_bytes(len(raw)))
            stream.write(raw)


def _fresh(default: Any) -> Any:
    # Mutable defaults (empty arrays, default structs) must not be shared between parses.
    if isinstance(default, tuple | list):
        return c.ListContainer(default)
    if isinstance(default, dict):
        return c.Container(default)
    return default


class KStruct(c.Construct):  # type: ignore[misc]
    """A Kafka struct: fields in order, then (flexible versions) a tagged-field section.

    Parses to a ``construct.Container`` keyed by field name. Field values do not depend
    on one another (every length is self-prefixed), so no context is built per struct.
    """

    def __init__(
        self,
        fields: Sequence[tuple[str, c.Construct]],
        tagged: TaggedFields | None = None,
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.fields = tuple(fields)
        self.tagged = tagged
        self.defaults = dict(defaults or {})

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> c.Container:
        obj = c.Container()
        for name, subcon in self.fields:
            obj[name] = subcon._parsereport(stream, context, path)
        if self.tagged is not None:
            self.tagged.parse_into(obj, stream, context, path)
        return obj

    def _build(self, obj: Mapping[str, Any], stream: io.BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, Mapping):
            raise EncodeError(f"{type(obj).__name__} is not a mapping of field values")
        for name, subcon in self.fields:
            try:
                value = obj[name]
            except KeyError:
                if name not in self.defaults:
                    raise EncodeError(f"missing field {name!r}") from None
                value = self.defaults[name]
            subcon._build(value, stream, context, path)
        if self.tagged is not None:
            self.tagged.build_from(obj, stream, context, path)
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        raise c.SizeofError("Kafka structs have no fixed size", path=path)
