"""Structural scanning: where a message's parts lie, without decoding it (sans-IO).

Theory of operation. A sidecar must look inside a few responses only to learn whether
they name a broker. For Produce (v10+) and Fetch (v16+) the only such place is the
``NodeEndpoints`` tagged field of the top-level struct (KIP-951), which sits *after* the
records. Decoding the whole response to look for it copies every record batch. This
module walks the same structure the decoder reads — every length prefix, array count,
nullable marker and tagged-field section — but skips values by moving an offset in a
``memoryview``: records cost one length read, whatever their size.

:func:`plan` turns a :class:`~protocol.spec.MessageSpec` at one version into a flat tuple
of steps (nested structs inlined, runs of fixed-width fields merged), built once per
``(spec, version)``. It mirrors :mod:`protocol.schema` rule for rule: compact encodings
and tagged sections where the version (or a field's own ``flexible`` override) is
flexible, tagged fields out of the regular fields, strings and bytes inside arrays never
null, KIP-893 nullable structs behind an int8 marker.

:func:`walker` turns the steps into a Python function of their own (generated source,
compiled once per plan, as construct compiles a schema): straight-line code for a plan's
steps, a loop per array, a one-byte compact length read in place. It does what
:func:`walk` does, errors included, at a fraction of the cost (a one-partition Produce
response: 0.9 µs against 3.4); :func:`walk` stays the reference it is held to
(``tests/protocol/test_scan.py``), and the walker for whoever walks often.

Agreement with the decoder (``tests/protocol/test_scan.py``, on generated messages and
on arbitrary bytes): whatever :func:`protocol.schema.decode` accepts, the scanner accepts
and ends at the same offset, finding the same tags; whatever the scanner refuses, the
decoder refuses too. The scanner checks less: not UTF-8 inside strings, not the values of
booleans, not the inner structure of a tagged value. Those matter only to a reader of the
values, and a caller that wants one of them decodes it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from protocol.errors import InvalidTaggedFields, InvalidValue, TrailingBytes, Truncated
from protocol.spec import FieldSpec, MessageSpec

_FIXED_SIZES: Final = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
    "float64": 8, "uuid": 16,
}  # fmt: skip

# Step opcodes. A step is a tuple whose first item is one of these.
FIXED: Final = 0  # (FIXED, size)
BLOB: Final = 1  # (BLOB, compact, wide, nullable): string (int16 length) or bytes/records
ARRAY: Final = 2  # (ARRAY, compact, nullable, element size or -1, element steps)
NULLABLE: Final = 3  # (NULLABLE, struct steps): KIP-893 int8 marker, then the struct
TAGS: Final = 4  # (TAGS,): a tagged-field section, skipped

Step = tuple[Any, ...]
Steps = tuple[Step, ...]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class TagSection:
    """The top-level tagged-field section of a message.

    ``start`` is the offset of the section (its count) in the scanned buffer; ``tags``
    maps each tag present to the ``(start, end)`` offsets of its value.
    """

    start: int
    tags: dict[int, tuple[int, int]]


# -- plans -------------------------------------------------------------------------------


def _element_steps(field: FieldSpec, version: int, flexible: bool) -> Steps:
    if field.is_struct:
        return _struct_steps(field.fields, version, flexible)
    kind = field.element_type
    size = _FIXED_SIZES.get(kind)
    if size is not None:
        return ((FIXED, size),)
    nullable = not field.is_array and version in field.nullable
    if kind == "string":
        return ((BLOB, flexible, False, nullable),)
    return ((BLOB, flexible, True, nullable),)  # bytes and records: the primitives left


def plan_field(field: FieldSpec, version: int, flexible: bool) -> Steps:
    """The steps that skip one (non-tagged) field at ``version``."""
    if field.flexible is not None:
        flexible = version in field.flexible
    element = _element_steps(field, version, flexible)
    if field.is_array:
        size = _fixed_size(element)
        return ((ARRAY, flexible, version in field.nullable, size, element),)
    if field.is_struct and version in field.nullable:
        return ((NULLABLE, element),)
    return element


def _struct_steps(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> Steps:
    steps: list[Step] = []
    for f in fields:
        if f.present_in(version) and not f.tagged_in(version):
            steps.extend(plan_field(f, version, flexible))
    if flexible:
        steps.append((TAGS,))
    return merge_fixed(steps)


def merge_fixed(steps: list[Step]) -> Steps:
    """``steps`` with each run of fixed-width steps merged into one."""
    merged: list[Step] = []
    for step in steps:
        if step[0] == FIXED and merged and merged[-1][0] == FIXED:
            merged[-1] = (FIXED, int(merged[-1][1]) + int(step[1]))
        else:
            merged.append(step)
    return tuple(merged)


def _fixed_size(steps: Steps) -> int:
    """The size of an element made of fixed-width fields only, else -1."""
    if len(steps) == 1 and steps[0][0] == FIXED:
        return int(steps[0][1])
    return -1


_PLANS: dict[tuple[int, int], Steps] = {}
_KEEP: list[MessageSpec] = []
#: :func:`plan` without its top-level tag section, by the same key.
_HEADS: dict[tuple[int, int], Steps] = {}


def plan(spec: MessageSpec, version: int) -> Steps:
    """The scanning steps of ``spec`` at ``version`` (cached per spec and version)."""
    key = (id(spec), version)
    steps = _PLANS.get(key)
    if steps is None:
        steps = _PLANS[key] = _struct_steps(spec.fields, version, spec.is_flexible(version))
        _KEEP.append(spec)  # keeps id(spec) from being reused
    return steps


# -- walking -----------------------------------------------------------------------------


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    # Unsigned LEB128 of at most 5 bytes, as protocol.primitives reads it.
    result = shift = 0
    for _ in range(5):
        if pos >= end:
            raise Truncated("varint ended early")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise InvalidValue("varint longer than 5 bytes")


def length(buf: memoryview, pos: int, end: int, compact: bool, wide: bool) -> tuple[int, int]:
    """A length prefix at ``pos`` (compact: uvarint N+1; else int32 if ``wide``, int16):
    ``(length, position after it)``; -1 is null, other negatives are the caller's to refuse."""
    if compact:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    size = 4 if wide else 2
    if pos + size > end:
        raise Truncated(f"needed {size} byte(s), only {end - pos} left")
    n = (_I32 if wide else _I16).unpack_from(buf, pos)[0]
    return n, pos + size


def _null(n: int, nullable: bool) -> bool:
    if n == -1 and nullable:
        return True
    raise InvalidValue(f"invalid length {n}" if n != -1 else "null where not nullable")


def skip_tags(
    buf: memoryview, pos: int, end: int, spans: dict[int, tuple[int, int]] | None = None
) -> int:
    """Walk a tagged section; return where it ends, noting each tag's value span in ``spans``."""
    if pos < end and buf[pos] == 0:  # no tags: most sections
        return pos + 1
    count, pos = _uvarint(buf, pos, end)
    last = -1
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        if tag <= last:
            raise InvalidTaggedFields(f"tag {tag} after tag {last}: tags must be strictly increasing")
        last = tag
        size, pos = _uvarint(buf, pos, end)
        if pos + size > end:
            raise Truncated(f"needed {size} byte(s), only {end - pos} left")
        if spans is not None:
            spans[tag] = (pos, pos + size)
        pos += size
    return pos


def walk(steps: Steps, buf: memoryview, pos: int, end: int) -> int:
    """Skip one value laid out as ``steps`` from ``pos``; return where it ends."""
    for step in steps:
        op = step[0]
        if op == FIXED:
            size: int = step[1]
            if pos + size > end:
                raise Truncated(f"needed {size} byte(s), only {end - pos} left")
            pos += size
        elif op == BLOB:
            if step[1] and pos < end and buf[pos] < 0x80:  # a one-byte compact length
                n = buf[pos] - 1
                pos += 1
            else:
                n, pos = length(buf, pos, end, step[1], step[2])
            if n < 0 and _null(n, step[3]):
                continue
            if pos + n > end:
                raise Truncated(f"needed {n} byte(s), only {end - pos} left")
            pos += n
        elif op == ARRAY:
            if step[1] and pos < end and buf[pos] < 0x80:  # a one-byte compact length
                n = buf[pos] - 1
                pos += 1
            else:
                n, pos = length(buf, pos, end, step[1], True)
            if n < 0 and _null(n, step[2]):
                continue
            if n > end - pos:
                raise Truncated(f"array announces {n} elements, {end - pos} byte(s) left")
            element_size: int = step[3]
            if element_size >= 0:
                if pos + n * element_size > end:
                    raise Truncated(f"needed {n * element_size} byte(s), only {end - pos} left")
                pos += n * element_size
            else:
                element: Steps = step[4]
                for _ in range(n):
                    pos = walk(element, buf, pos, end)
        elif op == NULLABLE:
            if pos >= end:
                raise Truncated("needed 1 byte(s), only 0 left")
            marker = buf[pos]
            pos += 1
            if marker < 0x80:
                pos = walk(step[1], buf, pos, end)
        else:
            pos = skip_tags(buf, pos, end)
    return pos


# -- compiled walkers --------------------------------------------------------------------

#: Skips one value from ``pos`` in ``buf`` (up to ``end``); returns where it ends.
Walker = Callable[[memoryview, int, int], int]

_WALKERS: dict[int, tuple[Steps, Walker]] = {}


def walker(steps: Steps) -> Walker:
    """:func:`walk` for ``steps``, as a function generated for them (cached per steps)."""
    found = _WALKERS.get(id(steps))
    if found is not None and found[0] is steps:
        return found[1]
    lines = ["def walk(buf, pos, end):"]
    _emit(steps, lines, 1, [0])
    lines.append("    return pos")
    namespace: dict[str, Any] = {"Truncated": Truncated, "length": length, "_null": _null,
                                 "skip_tags": skip_tags}
    exec(compile("\n".join(lines), f"<walker of {len(steps)} steps>", "exec"), namespace)
    compiled: Walker = namespace["walk"]
    _WALKERS[id(steps)] = (steps, compiled)  # the steps kept: their id is not reused
    return compiled


def _emit(steps: Steps, lines: list[str], depth: int, counter: list[int]) -> None:
    """Append the source of ``steps`` at indentation ``depth`` (``counter`` names loops)."""
    pad = "    " * depth
    for step in steps:
        op = step[0]
        if op == FIXED:
            size = int(step[1])
            lines += [f"{pad}if pos + {size} > end:",
                      f"{pad}    raise Truncated(f'needed {size} byte(s), only {{end - pos}} left')",
                      f"{pad}pos += {size}"]
        elif op == BLOB:
            _emit_length(lines, pad, step[1], step[2])
            lines += [f"{pad}if n < 0:",
                      f"{pad}    _null(n, {step[3]!r})",
                      f"{pad}else:",
                      f"{pad}    if pos + n > end:",
                      f"{pad}        raise Truncated(f'needed {{n}} byte(s), only {{end - pos}} left')",
                      f"{pad}    pos += n"]
        elif op == ARRAY:
            _emit_length(lines, pad, step[1], True)
            lines += [f"{pad}if n < 0:",
                      f"{pad}    _null(n, {step[2]!r})",
                      f"{pad}else:",
                      f"{pad}    if n > end - pos:",
                      f"{pad}        raise Truncated(f'array announces {{n}} elements, {{end - pos}} byte(s) left')"]
            size = int(step[3])
            if size >= 0:
                lines += [f"{pad}    if pos + n * {size} > end:",
                          f"{pad}        raise Truncated(f'needed {{n * {size}}} byte(s), only {{end - pos}} left')",
                          f"{pad}    pos += n * {size}"]
            else:
                counter[0] += 1
                loop = f"i{counter[0]}"
                lines.append(f"{pad}    for {loop} in range(n):")
                _emit(step[4], lines, depth + 2, counter)
        elif op == NULLABLE:
            lines += [f"{pad}if pos >= end:",
                      f"{pad}    raise Truncated('needed 1 byte(s), only 0 left')",
                      f"{pad}pos += 1",
                      f"{pad}if buf[pos - 1] < 0x80:"]
            _emit(step[1], lines, depth + 1, counter)
            lines.append(f"{pad}    pass")
        else:
            lines += [f"{pad}if pos < end and buf[pos] == 0:",
                      f"{pad}    pos += 1",
                      f"{pad}else:",
                      f"{pad}    pos = skip_tags(buf, pos, end)"]


def _emit_length(lines: list[str], pad: str, compact: bool, wide: bool) -> None:
    """The source that reads a length prefix into ``n`` (a one-byte compact one in place)."""
    if compact:
        lines += [f"{pad}if pos < end and buf[pos] < 0x80:",
                  f"{pad}    n = buf[pos] - 1",
                  f"{pad}    pos += 1",
                  f"{pad}else:",
                  f"{pad}    n, pos = length(buf, pos, end, True, False)"]
    else:
        lines.append(f"{pad}n, pos = length(buf, pos, end, False, {wide!r})")


def _view(data: bytes | bytearray | memoryview) -> memoryview:
    view = data if isinstance(data, memoryview) else memoryview(data)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def message_end(
    spec: MessageSpec, version: int, data: bytes | bytearray | memoryview, start: int = 0
) -> int:
    """The offset where the ``spec`` message starting at ``start`` in ``data`` ends."""
    view = _view(data)
    return walker(plan(spec, version))(view, start, len(view))


def top_level_tags(
    spec: MessageSpec, version: int, data: bytes | bytearray | memoryview
) -> TagSection:
    """The top-level tagged fields of a whole message body (``data`` holds exactly one).

    Raises :class:`~protocol.errors.TrailingBytes` when the message ends before ``data``
    does, like :func:`protocol.schema.decode`. A version that is not flexible has no tag
    section: the result is empty, with ``start`` at the end of the message.
    """
    section, pos = top_level_tags_prefix(spec, version, data)
    end = len(_view(data))
    if pos != end:
        raise TrailingBytes(end - pos, f"{spec.name} v{version}")
    return section


def top_level_tags_prefix(
    spec: MessageSpec, version: int, data: bytes | bytearray | memoryview
) -> tuple[TagSection, int]:
    """Like :func:`top_level_tags` for a message at the start of ``data``, which may go on
    after it: the section, and the offset where the message ends."""
    view = _view(data)
    end = len(view)
    steps = plan(spec, version)
    if not steps or steps[-1][0] != TAGS:
        pos = walker(steps)(view, 0, end)
        return TagSection(pos, {}), pos
    start = walker(_head_steps(spec, version, steps))(view, 0, end)
    tags: dict[int, tuple[int, int]] = {}
    pos = skip_tags(view, start, end, tags)
    return TagSection(start, tags), pos


def before_tags(spec: MessageSpec, version: int) -> Walker | None:
    """The walker of a ``spec`` message at ``version`` up to its top-level tag section
    (where that section starts), or ``None`` when the version has none."""
    steps = plan(spec, version)
    if not steps or steps[-1][0] != TAGS:
        return None
    return walker(_head_steps(spec, version, steps))


def _head_steps(spec: MessageSpec, version: int, steps: Steps) -> Steps:
    """``steps`` without the top-level tag section at their end (cached like :func:`plan`)."""
    key = (id(spec), version)
    head = _HEADS.get(key)
    if head is None:
        head = _HEADS[key] = steps[:-1]
    return head


class TopArray:
    """Where one top-level array of structs lies in a message of one version.

    A reader that walks the elements itself, a few at a time and picking what it wants
    from each, learns here where the count is and how many elements follow (:meth:`open`),
    and where the message ends after the last element (:meth:`close`). Everything but the
    array is skipped by its structure, as :func:`walk` skips it.
    """

    __slots__ = ("_after", "_before", "array", "compact", "field", "name")

    def __init__(self, spec: MessageSpec, version: int, array: str) -> None:
        flexible = spec.is_flexible(version)
        before: list[Step] = []
        after: list[Step] = []
        found: FieldSpec | None = None
        for f in spec.fields:
            if not f.present_in(version) or f.tagged_in(version):
                continue
            if f.name == array:
                found = f
            else:
                (before if found is None else after).extend(plan_field(f, version, flexible))
        if flexible:
            after.append((TAGS,))
        if found is None or not (found.is_array and found.is_struct) or version in found.nullable:
            raise ValueError(f"{spec.name} v{version}: {array} is not a non-null array of structs")
        self._before: Steps = merge_fixed(before)
        self._after: Steps = merge_fixed(after)
        #: The message's name and the array's, for errors.
        self.name = spec.name
        self.array = array
        #: The array's field.
        self.field: FieldSpec = found
        #: Whether the count is a compact (uvarint N+1) one.
        self.compact = flexible if found.flexible is None else version in found.flexible

    def open(self, view: memoryview) -> tuple[int, int, int]:
        """``(at, count, first)``: where the count lies in the message at the start of
        ``view``, how many elements it announces, and where the first one starts.

        Raises :class:`~protocol.errors.DecodeError` on bytes that are not such a message
        as far as the array, or an array that is null or announces more elements than
        there are bytes left."""
        end = len(view)
        at = walker(self._before)(view, 0, end)
        count, first = length(view, at, end, self.compact, True)
        if count < 0:
            raise InvalidValue(f"{self.name}.{self.array}: null where not nullable")
        if count > end - first:
            raise Truncated(f"{self.name}.{self.array}: {count} elements announced, {end - first} byte(s) left")
        return at, count, first

    def close(self, view: memoryview, pos: int) -> int:
        """Where the message ends, the array's last element ending at ``pos``."""
        return walker(self._after)(view, pos, len(view))


#: Bytes a :class:`TagSectionFinder` reader is given: the longest read is a tag and its
#: size (two varints of at most 5 bytes).
_WINDOW = 16


def _byte(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    return buf[pos], pos + 1  # the finder reads only with a byte in hand


def _tag_head(buf: memoryview, pos: int, end: int) -> tuple[tuple[int, int], int]:
    tag, pos = _uvarint(buf, pos, end)
    size, pos = _uvarint(buf, pos, end)
    return (tag, size), pos


class TagSectionFinder:
    """Where a message's top-level tagged fields begin, found while the message arrives.

    A forwarder that passes a large response on as it arrives (cut-through) may send
    every byte before the top-level tag section at once, but must hold the section back
    until it has it whole: it may name a broker (KIP-951 ``NodeEndpoints``). Fed the
    message body in order, in pieces of any size (:meth:`feed`), the finder walks the same
    plan as :func:`walk` and refuses what it refuses, at the first piece that shows it.
    Records are skipped by their length, before their bytes arrive; only the bytes of the
    field being read, and once found the tag section, are kept.

    :attr:`safe` is how many of the bytes fed are known to lie before the section (forward
    them); :attr:`start` is the section's offset once the walk reached it. The section
    itself is then :meth:`section` once the whole message has been fed; it is not checked
    here (:func:`skip_tags` on it does, as :func:`top_level_tags` would).
    """

    __slots__ = ("_base", "_buf", "_end", "_steps", "_walker", "pos", "received", "start")

    def __init__(self, spec: MessageSpec, version: int, size: int) -> None:
        steps = plan(spec, version)
        if not steps or steps[-1][0] != TAGS:
            raise ValueError(f"{spec.name} v{version} has no top-level tagged fields")
        self._steps = steps[:-1]
        #: The body's size (known from the frame's size prefix).
        self._end = size
        #: Bytes fed so far; the walk stands at :attr:`pos` (it may be past what was fed).
        self.received = 0
        self.pos = 0
        #: Kept bytes: ``_buf`` holds the body from offset ``_base`` up to ``received``.
        self._buf = bytearray()
        self._base = 0
        self.start: int | None = None
        self._walker: Any = self._run()
        self._resume()

    @property
    def safe(self) -> int:
        """Leading bytes of the body fed and known to precede the tag section."""
        return min(self.pos if self.start is None else self.start, self.received)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """The next bytes of the body (raises the scanner's errors for what they show)."""
        first = self.received
        self.received = first + len(data)
        if self.received > self._end:
            raise TrailingBytes(self.received - self._end, "more bytes fed than the message holds")
        keep = self.pos if self.start is None else self.start  # the first byte still needed
        if keep > self._base:  # kept bytes cover [_base, first): what the walk passed goes
            drop = min(keep, first) - self._base
            del self._buf[:drop]
            self._base += drop
        if keep >= self.received:  # the walk is past all of it (skipping records)
            self._base = self.received
        else:
            start = max(keep, first)
            if not self._buf:
                self._base = start
            self._buf += data[start - first :]
        if self._walker is not None:
            self._resume()

    def section(self) -> bytes:
        """The tag section, once :attr:`start` is known and the whole body was fed."""
        if self.start is None or self.received < self._end:
            raise Truncated("the tag section has not arrived whole")
        return bytes(self._buf[self.start - self._base :])

    def _resume(self) -> None:
        try:
            next(self._walker)
        except StopIteration:
            self._walker = None

    def _run(self) -> Any:
        yield from self._walk(self._steps)
        self.start = self.pos

    def _read(self, reader: Any) -> Any:
        """``reader(view, offset, end)`` on the bytes at :attr:`pos`, once they are in:
        it returns ``(value, offset after it)``; the walk moves past what it read.

        Given a copy of the kept bytes (a view of the buffer itself would stop
        :meth:`feed` from resizing it), a reader that runs out of bytes is tried again
        when more arrive; only at the message's end is that an error.
        """
        while True:
            while self.received <= self.pos < self._end:
                yield
            at = self.pos - self._base
            window = memoryview(bytes(self._buf[at : at + _WINDOW]))
            try:
                value, after = reader(window, 0, len(window))
            except Truncated:
                if self.received >= self._end:
                    raise
                yield
                continue
            self.pos += after
            return value

    def _length(self, compact: bool, wide: bool) -> Any:
        return (yield from self._read(lambda view, at, end: length(view, at, end, compact, wide)))

    def _walk(self, steps: Steps) -> Any:
        end = self._end
        for step in steps:
            op = step[0]
            if op == FIXED:
                size: int = step[1]
                if self.pos + size > end:
                    raise Truncated(f"needed {size} byte(s), only {end - self.pos} left")
                self.pos += size
            elif op == BLOB:
                n = yield from self._length(step[1], step[2])
                if n < 0 and _null(n, step[3]):
                    continue
                if self.pos + n > end:
                    raise Truncated(f"needed {n} byte(s), only {end - self.pos} left")
                self.pos += n
            elif op == ARRAY:
                n = yield from self._length(step[1], True)
                if n < 0 and _null(n, step[2]):
                    continue
                if n > end - self.pos:
                    raise Truncated(f"array announces {n} elements, {end - self.pos} byte(s) left")
                element_size: int = step[3]
                if element_size >= 0:
                    if self.pos + n * element_size > end:
                        raise Truncated(f"needed {n * element_size} byte(s), only {end - self.pos} left")
                    self.pos += n * element_size
                else:
                    for _ in range(n):
                        yield from self._walk(step[4])
            elif op == NULLABLE:
                if self.pos >= end:
                    raise Truncated("needed 1 byte(s), only 0 left")
                marker = yield from self._read(_byte)
                if marker < 0x80:
                    yield from self._walk(step[1])
            else:
                count = yield from self._read(_uvarint)
                last = -1
                for _ in range(count):
                    tag, size = yield from self._read(_tag_head)
                    if tag <= last:
                        raise InvalidTaggedFields(f"tag {tag} after tag {last}: tags must be strictly increasing")
                    last = tag
                    if self.pos + size > end:
                        raise Truncated(f"needed {size} byte(s), only {end - self.pos} left")
                    self.pos += size


def response_header_size(data: bytes | bytearray | memoryview, header_version: int) -> int:
    """How many bytes the response header at the start of ``data`` takes (v0 or v1)."""
    view = _view(data)
    end = len(view)
    if end < 4:
        raise Truncated(f"needed 4 byte(s), only {end} left")
    return 4 if header_version < 1 else skip_tags(view, 4, end)
