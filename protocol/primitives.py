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


def encode_uvarint(value: int) -> bytes:
    """Unsigned LEB128 bytes of ``value`` (tags, sizes and compact lengths)."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# --------------------------------------------------------------------------- compilation
# Helpers for ``_emitparse``: each returns Python source that construct's ``compile()``
# splices into one module. The emitted code mirrors the interpreted ``_parse`` next to it,
# error classes included.

#: Names the emitted parsers use, appended (once) to every compiled module.
_PRELUDE = """
    from protocol.errors import InvalidValue, Truncated
    from protocol.primitives import _read_uvarint, read_exact
    from uuid import UUID
"""

_FLAG_TYPE = type(c.Flag)


def _fixed_format(subcon: c.Construct) -> str | None:
    """The big-endian ``struct`` format character of a fixed-width construct, else None."""
    if isinstance(subcon, c.FormatField) and subcon.fmtstr.startswith(">"):
        fmt: str = subcon.fmtstr[1:]
        return fmt
    if isinstance(subcon, _FLAG_TYPE):
        return "?"  # any non-zero byte reads as true, as Flag's parser
    return None


def _truncation_check(size: str) -> list[str]:
    return [
        f"if len(b) != {size}:",
        f"    raise Truncated('needed %d byte(s), only %d left' % ({size}, len(b)))",
    ]


def _emit_function(code: Any, kind: str, body: Sequence[str]) -> str:
    """Append ``def parse_<kind>_<id>(io, this)`` holding ``body``; return a call to it."""
    name = f"parse_{kind}_{code.allocateId()}"
    code.append(_PRELUDE)
    code.append("\n".join([f"def {name}(io, this):", *("    " + line for line in body)]))
    return f"{name}(io, this)"


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
        stream.write(encode_uvarint(obj))
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
        stream.write(encode_uvarint((obj << 1) ^ (obj >> (self.bits - 1))))
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

    def _emitparse(self, code: Any) -> str:
        return _emit_function(code, "uuid", ["return UUID(bytes=read_exact(io, 16))"])


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

    def emit(self) -> list[str]:
        """Source lines that read the length into ``n`` (returning None for null)."""
        if self.compact:
            lines = ["n = _read_uvarint(io, 5) - 1"]
        else:
            size = 4 if self.wide else 2
            lines = [f"b = io.read({size})", *_truncation_check(str(size))]
            lines.append("n = int.from_bytes(b, 'big', signed=True)")
        lines.append("if n < 0:")
        if self.nullable:
            lines += ["    if n == -1:", "        return None"]
        lines.append(
            "    raise InvalidValue('invalid length %d' % n if n != -1 else "
            "'null where not nullable')"
        )
        return lines

    def write(self, stream: io.BytesIO, n: int | None) -> None:
        if n is None:
            if not self.nullable:
                raise EncodeError("null value for a non-nullable field")
            n = -1
        if self.compact:
            stream.write(encode_uvarint(n + 1))
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

    def _emitparse(self, code: Any) -> str:
        body = [*self.length.emit(), "b = io.read(n)", *_truncation_check("n")]
        body += [
            "try:",
            "    return b.decode('utf-8')",
            "except UnicodeDecodeError as exc:",
            "    raise InvalidValue('string is not valid UTF-8: ' + exc.reason) from None",
        ]
        return _emit_function(code, "kstring", body)

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

    def _emitparse(self, code: Any) -> str:
        body = [*self.length.emit(), "b = io.read(n)", *_truncation_check("n"), "return b"]
        return _emit_function(code, "kbytes", body)

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
        # Kafka's rule (generated readers: "Tried to allocate a collection of size N, but
        # there are only M bytes remaining"): a count beyond the bytes left is refused even
        # for elements that could be empty, so no count makes us loop or allocate past the frame.
        remaining = len(stream.getbuffer()) - stream.tell()
        if n > remaining:
            raise Truncated(f"array announces {n} elements, {remaining} byte(s) left")
        parse = self.subcon._parsereport
        items: list[Any] = c.ListContainer(parse(stream, context, path) for _ in range(n))
        return items

    def _emitparse(self, code: Any) -> str:
        body = self.length.emit()
        body += [
            "if n > len(io.getbuffer()) - io.tell():",
            "    raise Truncated('array announces %d elements, %d byte(s) left'"
            " % (n, len(io.getbuffer()) - io.tell()))",
        ]
        fmt = _fixed_format(self.subcon)
        if fmt is not None:
            # One read and one unpack for a whole array of fixed-width values.
            size = _struct.calcsize(">" + fmt)
            body += [f"b = io.read(n * {size})", *_truncation_check(f"n * {size}")]
            body.append(f"return ListContainer(struct.unpack('>%d{fmt}' % n, b))")
        else:
            element = self.subcon._compileparse(code)
            body.append(f"return ListContainer([{element} for _ in range(n)])")
        return _emit_function(code, "karray", body)

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


class KNullable(c.Construct):  # type: ignore[misc]
    """A nullable struct field (KIP-893): an int8 marker, then the struct unless null.

    Kafka writes -1 for null and 1 for present; it reads any negative marker as null
    (``MessageDataGenerator``: ``if (_readable.readByte() < 0)``), and so do we.
    """

    def __init__(self, subcon: c.Construct) -> None:
        super().__init__()
        self.subcon = subcon

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        (marker,) = read_exact(stream, 1)
        if marker >= 0x80:
            return None
        return self.subcon._parsereport(stream, context, path)

    def _emitparse(self, code: Any) -> str:
        body = [
            "b = io.read(1)",
            *_truncation_check("1"),
            "if b[0] >= 0x80:",
            "    return None",
            f"return {self.subcon._compileparse(code)}",
        ]
        return _emit_function(code, "knullable", body)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            stream.write(b"\xff")
            return obj
        stream.write(b"\x01")
        self.subcon._build(obj, stream, context, path)
        return obj


class TaggedField:
    """A known tag of a tagged-field section: its name, construct and default value."""

    __slots__ = ("default", "name", "subcon", "tag")

    def __init__(self, tag: int, name: str, subcon: c.Construct, default: Any) -> None:
        self.tag = tag
        self.name = name
        self.subcon = subcon
        self.default = default


def is_default(value: Any, default: Any) -> bool:
    """True when a tagged value equals its default and must therefore not be written.

    Structs compare deeply *including* their unknown tags: ``construct.Container``'s own
    ``==`` skips ``_``-prefixed keys, which would drop a default-looking struct that
    carries unknown tags.
    """
    if isinstance(default, tuple | list) and isinstance(value, tuple | list):
        return len(value) == 0 and len(default) == 0
    if isinstance(value, Mapping) and isinstance(default, Mapping):
        if value.get(UNKNOWN_TAGS_KEY) or default.get(UNKNOWN_TAGS_KEY):
            return False
        keys = {k for k in (*value, *default) if k != UNKNOWN_TAGS_KEY}
        return all(k in value and k in default and _same(value[k], default[k]) for k in keys)
    return bool(value == default)


def _same(a: Any, b: Any) -> bool:
    """Deep equality that, unlike ``Container.__eq__``, sees unknown tags."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return is_default(a, b)
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


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

    def fill_defaults(self, obj: c.Container) -> None:
        """Set every known tag to its default (a section with no entries)."""
        for field in self.known.values():
            obj[field.name] = _fresh(field.default)

    def build_from(
        self, obj: Mapping[str, Any], stream: io.BytesIO, context: Any, path: str
    ) -> None:
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
        stream.write(encode_uvarint(len(entries)))
        last = -1
        for tag, raw in entries:
            if tag == last:
                raise EncodeError(f"tag {tag} written twice")
            last = tag
            stream.write(encode_uvarint(tag))
            stream.write(encode_uvarint(len(raw)))
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

    def _emitparse(self, code: Any) -> str:
        body = ["obj = Container()"]
        run: list[tuple[str, str]] = []

        def flush() -> None:
            # A run of fixed-width fields: one read, one unpack.
            if not run:
                return
            fmt = ">" + "".join(f for _, f in run)
            size = _struct.calcsize(fmt)
            name = f"fixed_run_{code.allocateId()}"
            code.append(f"{name} = struct.Struct({fmt!r})")
            targets = ", ".join(f"obj[{n!r}]" for n, _ in run)
            body.extend([f"b = io.read({size})", *_truncation_check(str(size))])
            body.append(f"{targets}, = {name}.unpack(b)")
            run.clear()

        for name, subcon in self.fields:
            fmt = _fixed_format(subcon)
            if fmt is not None:
                run.append((name, fmt))
                continue
            flush()
            body.append(f"obj[{name!r}] = {subcon._compileparse(code)}")
        flush()
        if self.tagged is not None:
            # The common empty section (one 0 byte) inline; anything else interpreted.
            tags = id(self.tagged)
            code.linkedinstances[tags] = self.tagged
            body += ["b = io.read(1)", "if b == b'\\x00':"]
            if self.tagged.known:
                body.append(f"    linkedinstances[{tags}].fill_defaults(obj)")
            else:
                body.append("    pass")
            body += [
                "else:",
                "    io.seek(-len(b), 1)",
                f"    linkedinstances[{tags}].parse_into(obj, io, this, '')",
            ]
        body.append("return obj")
        return _emit_function(code, "kstruct", body)

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
