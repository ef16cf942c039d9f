"""Reading a few fields of a message without decoding the rest (sans-IO).

Theory of operation. An observer that only needs, say, the topic, partition and records
span of each partition of a Produce request pays for every field when it decodes the
request: construct containers, strings, nested lists. A :class:`Picker` is told once
which fields it wants (a *selection*), and per version compiles the message into a flat
program: the wanted fields are read, everything between them is skipped with the
steps of :mod:`protocol.scan` (runs of fixed-width fields in one move, records in one
length read).

A selection maps field names to ``None`` (a value: integer, float, string, UUID, or the
``(start, end)`` span of a bytes or records field) or to a nested selection (an array
of structs: a list with one tuple per element; an empty selection gives one empty tuple
per element, so the array's length). :meth:`Picker.pick` returns a tuple with one value
per selected field, in the order the spec declares them; a selected field the version
does not carry reads as its default, as in :class:`~protocol.views.StructView`. The key
:data:`EXTENT` in a selection adds, last, the ``(start, end)`` span of the struct itself
(a caller that splices elements of an array keeps or drops them by it).

The whole message is walked, so a picker accepts what :mod:`protocol.scan` accepts: all
that :func:`protocol.schema.decode` accepts (with ``allow_trailing``), and what it
refuses only for reasons the picked values do not depend on — invalid UTF-8 in a string
not picked, a boolean other than 0 or 1, a malformed tagged value. Whatever the picker
refuses, the decoder refuses too (``tests/protocol/test_pick.py``).

Selections the picker does not serve raise :class:`Unpickable` when the version's
program is built: a field that is tagged at that version, a struct that is not an array,
an array of primitives. A caller decodes those instead.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from protocol.errors import InvalidValue, ProtocolError, Truncated, UnsupportedVersion
from protocol.scan import (
    ARRAY,
    BLOB,
    FIXED,
    NULLABLE,
    TAGS,
    Step,
    Steps,
    length,
    merge_fixed,
    plan_field,
    skip_tags,
    walk,
)
from protocol.schema import field_default
from protocol.spec import FieldSpec, MessageSpec

#: Field name → ``None`` (a value) or a nested selection (an array of structs).
Selection = Mapping[str, "Selection | None"]

_NUMBERS: Final = {
    "bool": struct.Struct(">?"), "int8": struct.Struct(">b"), "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"), "int32": struct.Struct(">i"), "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"), "float64": struct.Struct(">d"),
}  # fmt: skip

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")

# Program opcodes (a step is a tuple whose first item is one of these; they follow the
# skipping opcodes of protocol.scan, which appear only inside SKIP).
SKIP: Final = 10  # (SKIP, scan steps)
NUMBER: Final = 11  # (NUMBER, struct.Struct)
STRING: Final = 12  # (STRING, compact, nullable)
UUID: Final = 13  # (UUID,)
SPAN: Final = 14  # (SPAN, compact, nullable): bytes or records, as (start, end)
STRUCTS: Final = 15  # (STRUCTS, compact, nullable, element program)
CONST: Final = 16  # (CONST, value): a selected field the version does not carry
MARK: Final = 17  # (MARK,): the struct starts here (a selection with EXTENT)
EXTENT_END: Final = 18  # (EXTENT_END,): the struct ends here: its (start, end)

#: The selection key that picks the ``(start, end)`` span of the struct it is in.
EXTENT: Final = "<extent>"


class Unpickable(ValueError):
    """A selection the picker cannot read at some version (see the module docstring)."""


def _program(
    fields: tuple[FieldSpec, ...], selection: Selection, version: int, flexible: bool
) -> Steps:
    program: list[Step] = []
    skipped: list[Step] = []

    def flush() -> None:
        if skipped:
            program.append((SKIP, merge_fixed(skipped)))
            skipped.clear()

    for f in fields:
        wanted = f.name in selection
        if not f.present_in(version):
            if wanted:
                flush()
                default = field_default(f, version)
                program.append((CONST, tuple(default) if isinstance(default, list) else default))
            continue
        if f.tagged_in(version):
            if wanted:
                raise Unpickable(f"{f.name} is a tagged field at version {version}")
            continue
        if not wanted:
            skipped.extend(plan_field(f, version, flexible))
            continue
        flush()
        program.append(_picked(f, selection[f.name], version, flexible))
    if flexible:
        skipped.append((TAGS,))
    flush()
    if EXTENT in selection:
        return ((MARK,), *program, (EXTENT_END,))
    return tuple(program)


def _picked(f: FieldSpec, inner: Selection | None, version: int, flexible: bool) -> Step:
    if f.flexible is not None:
        flexible = version in f.flexible
    nullable = version in f.nullable
    if f.is_struct:
        if not f.is_array or inner is None:
            raise Unpickable(f"{f.name}: only arrays of structs, with a selection, are picked")
        return (STRUCTS, flexible, nullable, _program(f.fields, inner, version, flexible))
    if f.is_array or inner is not None:
        raise Unpickable(f"{f.name}: arrays of primitives and sub-selections of primitives are not picked")
    kind = f.type
    if kind == "string":
        return (STRING, flexible, nullable)
    if kind == "uuid":
        return (UUID,)
    if kind in ("bytes", "records"):
        return (SPAN, flexible, nullable)
    return (NUMBER, _NUMBERS[kind])


def _check(selection: Selection, fields: tuple[FieldSpec, ...], where: str) -> None:
    by_name = {f.name: f for f in fields}
    for name, inner in selection.items():
        if name == EXTENT and inner is None:
            continue
        f = by_name.get(name)
        if f is None:
            raise KeyError(f"{where} has no field {name!r}")
        if inner is not None:
            _check(inner, f.fields, f"{where}.{name}")


class Picker:
    """Reads the fields ``selection`` names from ``spec`` messages (see the module docstring)."""

    def __init__(self, spec: MessageSpec, selection: Selection) -> None:
        _check(selection, spec.fields, spec.name)
        self.spec = spec
        self.selection = selection
        self._programs: dict[int, Steps] = {}
        self._compiled: dict[int, Compiled] = {}

    def program(self, version: int) -> Steps:
        """The program of ``version`` (built once); raises :class:`Unpickable`, or
        :class:`~protocol.errors.UnsupportedVersion` outside the spec's versions."""
        program = self._programs.get(version)
        if program is None:
            spec = self.spec
            if version not in spec.valid:
                raise UnsupportedVersion(spec.api_key if spec.api_key is not None else -1, version)
            program = _program(spec.fields, self.selection, version, spec.is_flexible(version))
            self._programs[version] = program
        return program

    def pick(self, version: int, data: bytes | memoryview, start: int = 0) -> tuple[Any, ...]:
        """The selected values of the message at ``start`` in ``data``.

        Raises what :meth:`program` raises, or a :class:`~protocol.errors.DecodeError` on
        bytes that are not such a message. Spans are offsets in ``data``.
        """
        view = data if isinstance(data, memoryview) else memoryview(data)
        compiled = self._compiled.get(version)
        if compiled is None:
            compiled = self.compiled(version)
        try:
            return compiled(view, start, len(view))
        except _FALLBACK:  # anything unusual: the interpreter reads it, or says what is wrong
            pass
        return self.interpret(version, view, start)

    def interpret(self, version: int, data: bytes | memoryview, start: int = 0) -> tuple[Any, ...]:
        """:meth:`pick` by interpreting the program step by step: the reference the
        compiled code is held to, and what :meth:`pick` falls back to."""
        view = data if isinstance(data, memoryview) else memoryview(data)
        values: list[Any] = []
        _run(self.program(version), view, start, len(view), values)
        return tuple(values)

    def compiled(self, version: int) -> Compiled:
        """The program of ``version`` as a Python function (built once): fast on
        well-formed messages, and raising one of the exceptions :meth:`pick` then hands
        to the interpreter on anything else (see :func:`compile_program`)."""
        compiled = self._compiled.get(version)
        if compiled is None:
            name = f"{self.spec.name} v{version}"
            compiled = self._compiled[version] = compile_program(self.program(version), name)
        return compiled


def _run(program: Steps, buf: memoryview, pos: int, end: int, out: list[Any]) -> int:
    mark = pos
    for step in program:
        op = step[0]
        if op == MARK:
            mark = pos
        elif op == EXTENT_END:
            out.append((mark, pos))
        elif op == SKIP:
            pos = walk(step[1], buf, pos, end)
        elif op == NUMBER:
            number: struct.Struct = step[1]
            if pos + number.size > end:
                raise Truncated(f"needed {number.size} byte(s), only {end - pos} left")
            out.append(number.unpack_from(buf, pos)[0])
            pos += number.size
        elif op == STRUCTS:
            n, pos = length(buf, pos, end, step[1], True)
            if n < 0:
                _null(n, step[2])
                out.append(None)
                continue
            if n > end - pos:
                raise Truncated(f"array announces {n} elements, {end - pos} byte(s) left")
            element: Steps = step[3]
            items: list[tuple[Any, ...]] = []
            for _ in range(n):
                values: list[Any] = []
                pos = _run(element, buf, pos, end, values)
                items.append(tuple(values))
            out.append(items)
        elif op in (SPAN, STRING):
            n, pos = length(buf, pos, end, step[1], op == SPAN)
            if n < 0:
                _null(n, step[2])
                out.append(None)
                continue
            if pos + n > end:
                raise Truncated(f"needed {n} byte(s), only {end - pos} left")
            if op == SPAN:
                out.append((pos, pos + n))
            else:
                try:
                    out.append(str(buf[pos : pos + n], "utf-8"))
                except UnicodeDecodeError as exc:
                    raise InvalidValue(f"string is not valid UTF-8: {exc.reason}") from None
            pos += n
        elif op == UUID:
            if pos + 16 > end:
                raise Truncated(f"needed 16 byte(s), only {end - pos} left")
            out.append(uuid.UUID(bytes=bytes(buf[pos : pos + 16])))
            pos += 16
        else:
            out.append(step[1])
    return pos


# -- compiled programs -------------------------------------------------------------------

#: ``compiled(buf, pos, end)``: the picked values of the message at ``pos``.
Compiled = Callable[[memoryview, int, int], tuple[Any, ...]]


class _Slow(Exception):
    """Raised by compiled code on what it leaves to the interpreter (nulls, bad lengths)."""


#: What a compiled program may raise on input it does not read: the interpreter takes over.
_FALLBACK: Final = (_Slow, IndexError, struct.error, UnicodeDecodeError, ProtocolError)


class _Source:
    """Python source of one compiled program, and the constants it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self._names = 0

    def name(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def constant(self, value: Any) -> str:
        name = self.name("k")
        self.constants[name] = value
        return name

    def emit(self, depth: int, *lines: str) -> None:
        self.lines.extend("    " * depth + line for line in lines)


def compile_program(program: Steps, name: str) -> Compiled:
    """``program`` as straight-line Python: fixed fields read with ``struct``, one-byte
    varints, empty tag sections, skipped arrays and nullable structs inline; longer
    varints and tag sections with tags through :func:`length` and :func:`skip_tags`. It
    checks bounds only where a value would otherwise be wrong (the end is checked last:
    positions only grow, and reads past the buffer raise), and raises on nulls and bad
    lengths rather than judging them: the interpreter (:func:`_run`) stays the one
    reference for errors."""
    src = _Source()
    values = _emit_struct(src, program, 1)
    src.emit(1, "if pos > end:", "    raise Slow", f"return ({''.join(v + ', ' for v in values)})")
    source = "def picked(buf, pos, end):\n" + "\n".join(src.lines) + "\n"
    namespace: dict[str, Any] = {
        "Slow": _Slow, "UUID": uuid.UUID, "walk": walk, "length": length, "skip_tags": skip_tags,
        **src.constants,
    }  # fmt: skip
    exec(compile(source, f"<picker {name}>", "exec"), namespace)
    compiled: Compiled = namespace["picked"]
    return compiled


def _emit_length(src: _Source, depth: int, compact: bool, wide: bool, *, fast: bool = True) -> None:
    """Lines that read a length prefix into ``n`` (``fast``: a one-byte varint inline)."""
    if compact and not fast:
        src.emit(depth, "n, pos = length(buf, pos, end, True, False)")
    elif compact:
        src.emit(depth, "n = buf[pos]", "if n < 128:", "    n -= 1", "    pos += 1", "else:",
                 "    n, pos = length(buf, pos, end, True, False)")  # fmt: skip
    else:
        prefix = _I32 if wide else _I16
        src.emit(depth, f"n = {src.constant(prefix)}.unpack_from(buf, pos)[0]",
                 f"pos += {prefix.size}")  # fmt: skip


def _emit_null(src: _Source, depth: int, target: str, nullable: bool) -> None:
    """Lines for a negative length in ``n``: null where allowed, else the interpreter."""
    src.emit(depth, "if n < 0:")
    if nullable:
        src.emit(depth + 1, "if n != -1:", "    raise Slow", f"{target} = None")
    else:
        src.emit(depth + 1, "raise Slow")


def _emit_skip(src: _Source, steps: Steps, depth: int) -> None:
    """Lines that skip ``steps``, arrays and nullable structs included (only a tag section
    with tags in it, and a varint longer than a byte, are left to :mod:`protocol.scan`)."""
    for step in steps:
        op = step[0]
        if op == FIXED:
            src.emit(depth, f"pos += {step[1]}")
        elif op == TAGS:
            src.emit(depth, "if buf[pos]:", "    pos = skip_tags(buf, pos, end)", "else:",
                     "    pos += 1")  # fmt: skip
        elif op == BLOB:
            inner = depth
            if step[1]:  # compact, and 0-126 bytes long: the count is one byte, the move one add
                src.emit(depth, "n = buf[pos]", "if 0 < n < 128:", "    pos += n", "else:")
                inner += 1
            _emit_length(src, inner, step[1], step[2], fast=False)
            bad = "n < -1" if step[3] else "n < 0"
            src.emit(inner, "if n > 0:", "    pos += n", f"elif {bad}:", "    raise Slow")
        elif op == ARRAY:
            inner = depth
            size: int = step[3]
            if step[1] and size >= 0:  # compact, fixed-size elements, fewer than 127 of them
                src.emit(depth, "n = buf[pos]", "if 0 < n < 128:", f"    pos += n * {size} + {1 - size}",
                         "else:")  # fmt: skip
                inner += 1
            _emit_length(src, inner, step[1], True, fast=inner == depth)
            src.emit(inner, "if n < 0:")  # null, where the array may be null: nothing to skip
            src.emit(inner + 1, *(("if n < -1:", "    raise Slow") if step[2] else ("raise Slow",)))
            if size >= 0:  # fixed-size elements: one move
                src.emit(inner, "else:", f"    pos += n * {size}")
            else:
                count = src.name("c")
                src.emit(depth, "elif n > end - pos:", "    raise Slow", "else:",
                         f"    for {count} in range(n):")  # fmt: skip
                _emit_skip(src, step[4], depth + 2)
        else:
            assert op == NULLABLE, op
            src.emit(depth, "pos += 1", "if buf[pos - 1] < 128:")
            _emit_skip(src, step[1], depth + 1)


def _emit_struct(src: _Source, program: Steps, depth: int) -> list[str]:
    """Lines reading one struct; returns the names of the variables holding its values."""
    values: list[str] = []
    mark = ""
    for step in program:
        op = step[0]
        if op == SKIP:
            _emit_skip(src, step[1], depth)
            continue
        if op == MARK:
            mark = src.name("m")
            src.emit(depth, f"{mark} = pos")
            continue
        target = src.name("v")
        values.append(target)
        if op == NUMBER:
            number: struct.Struct = step[1]
            src.emit(depth, f"{target} = {src.constant(number)}.unpack_from(buf, pos)[0]",
                     f"pos += {number.size}")  # fmt: skip
        elif op == UUID:
            src.emit(depth, "if pos + 16 > end:", "    raise Slow",
                     f"{target} = UUID(bytes=bytes(buf[pos:pos + 16]))", "pos += 16")  # fmt: skip
        elif op in (SPAN, STRING):
            _emit_length(src, depth, step[1], op == SPAN)
            _emit_null(src, depth, target, step[2])
            value = "(pos, pos + n)" if op == SPAN else "str(buf[pos:pos + n], 'utf-8')"
            src.emit(depth, "else:", f"    {target} = {value}", "    pos += n")
        elif op == STRUCTS:
            _emit_length(src, depth, step[1], True)
            _emit_null(src, depth, target, step[2])
            src.emit(depth, "else:", "    if n > end - pos:", "        raise Slow",
                     f"    {target} = []", "    for _ in range(n):")  # fmt: skip
            inner = _emit_struct(src, step[3], depth + 2)
            src.emit(depth + 2, f"{target}.append(({''.join(v + ', ' for v in inner)}))")
        elif op == EXTENT_END:
            src.emit(depth, f"{target} = ({mark}, pos)")
        else:
            src.emit(depth, f"{target} = {src.constant(step[1])}")
    return values


def _null(n: int, nullable: bool) -> None:
    if n != -1 or not nullable:
        raise InvalidValue(f"invalid length {n}" if n != -1 else "null where not nullable")


