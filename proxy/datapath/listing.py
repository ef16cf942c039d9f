"""ACL patches of a listing answer, applied to its elements as byte slices (sans-IO).

Theory of operation. With ACLs enforced, a Metadata answer is *narrowed*: topics the
principal may not Describe leave the listing, topics it named but may not see come back as
error entries, and every answer teaches the sidecar topic IDs (:mod:`proxy.datapath.authorize`).
Decoding and re-encoding the whole answer for that costs in the partitions (1,000 topics of
10 partitions: about 120 ms, every other connection of the sidecar waiting), though the
patch looks only at each topic's name and ID.

A :class:`ListingSplice` reads one top-level array of structs shallowly: a compiled
:class:`~protocol.pick.Picker` takes each element's scalar fields and its extent (the
``(start, end)`` of its bytes), skipping its nested arrays (the partitions) by their
structure. The patch runs on those shallow elements, which are read-only mappings
(:class:`Kept`): it may drop them, reorder them and add new elements (plain dicts, the
shape a decoded element has). The answer is then the broker's bytes before the array, a new
count, each kept element's own bytes and each new element encoded, and the broker's bytes
after the array, unchanged. When the patch keeps every element in order and adds none, the
broker's body is returned as it came.

Exactness (tests/proxy/test_listing_splice.py): for generated answers of every version and
generated ACLs, the splice gives the bytes that decoding, patching and encoding the whole
answer gives. What follows the array is not read here (as in the rewriter's splice), so a
flaw there reaches the client as the broker wrote it (docs/protocol.md, "Leniency").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from protocol.apis import Api
from protocol.leniency import QUIET, RESPONSE, Leniency
from protocol.pick import EXTENT, Picker
from protocol.primitives import encode_uvarint
from protocol.scan import TopArray, length
from proxy.datapath.rewrite import field_alone, write_alone

#: ``patch(answer)``: the answer (a dict holding the listing only) with the patch applied.
Patch = Callable[[dict[str, Any]], dict[str, Any]]


class Kept(dict[str, Any]):
    """A listing element read shallowly: its scalar fields, and where its bytes lie.

    It is forwarded as the broker's bytes, so it cannot be changed: a patch that tried
    would have its change lost, and is refused instead.
    """

    __slots__ = ("extent",)

    def __init__(self, fields: Mapping[str, Any], extent: tuple[int, int]) -> None:
        super().__init__(fields)
        #: ``(start, end)`` of the element's bytes in the answer body.
        self.extent = extent

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a kept listing element is forwarded as the broker's bytes: it cannot be changed")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse


class ListingSplice:
    """Applies listing patches to ``array`` of ``api``'s answers at ``version``."""

    def __init__(self, api: Api, version: int, array: str) -> None:
        response = api.response
        self.version = version
        self.array = array
        #: Where the listing lies, and how to skip what comes before and after it.
        self._layout = TopArray(response, version, array)
        field = self._layout.field
        self._name = api.name
        self._compact = self._layout.compact
        #: The element's scalar fields, picked by name.
        self._names = tuple(f.name for f in field.fields
                            if f.present_in(version) and not f.tagged_in(version) and not f.is_array
                            and not f.is_struct)  # fmt: skip
        #: One element: its scalar fields and its extent.
        self._element = Picker(response.element(array), {**dict.fromkeys(self._names), EXTENT: None})
        self._element.compiled(version)
        #: A one-field message holding just the array, to encode new elements.
        self._alone = field_alone(response, field, version, response.is_flexible(version))

    def apply(self, patch: Patch, body: bytes | memoryview, leniency: Leniency = QUIET) -> bytes:
        """``body`` (an answer after its header) with ``patch`` applied to the listing;
        bytes after the answer follow unchanged, reported by ``leniency``.

        Raises a :class:`~protocol.errors.DecodeError` on bytes that are not such an
        answer (what follows the listing is walked, not decoded).
        """
        read = self.begin(body)
        read.step(read.left)
        return read.finish(patch, leniency)

    def begin(self, body: bytes | memoryview) -> ListingRead:
        """A read of ``body``'s listing that a caller advances a few elements at a time
        (:meth:`ListingRead.step`), with other work in between, then patches."""
        return ListingRead(self, memoryview(body))

    def _count(self, n: int) -> bytes:
        return encode_uvarint(n + 1) if self._compact else n.to_bytes(4, "big", signed=True)

    def _encoded(self, element: Mapping[str, Any]) -> bytes:
        """One new element's bytes (the array of it alone, its count cut off)."""
        whole = write_alone(self._alone, self.version, [element])
        _, first = length(memoryview(whole), 0, len(whole), self._compact, True)
        return whole[first:]


class ListingRead:
    """One answer's listing, read a few elements at a time, then patched (sans-IO).

    A 10,000-topic Metadata answer takes a hundred milliseconds to read; a shell that must
    serve other connections meanwhile reads it in steps (:meth:`step`) and patches it once
    every element is in (:meth:`finish`).
    """

    def __init__(self, splice: ListingSplice, view: memoryview) -> None:
        self._splice = splice
        self._view = view
        #: Where the listing's count, and its first element, lie.
        self._start, count, self._pos = splice._layout.open(view)
        #: Elements still to read.
        self.left = count
        self._kept: list[Kept] = []

    def step(self, elements: int) -> bool:
        """Read up to ``elements`` more elements; True once all are read."""
        splice, view, pos, kept = self._splice, self._view, self._pos, self._kept
        pick, version, names = splice._element.pick, splice.version, splice._names
        count = min(elements, self.left)
        for _ in range(count):
            values = pick(version, view, pos)
            extent = values[-1]
            kept.append(Kept(dict(zip(names, values[:-1], strict=True)), extent))
            pos = extent[1]
        self.left -= count
        self._pos = pos
        return not self.left

    def finish(self, patch: Patch, leniency: Leniency = QUIET) -> bytes:
        """The answer with ``patch`` applied (every element read)."""
        assert not self.left, "finish before every element was read"
        splice, view, kept, start = self._splice, self._view, self._kept, self._start
        stop = self._pos
        leniency.trailing(splice._name, RESPONSE, view, splice._layout.close(view, stop))
        answer = patch({splice.array: list(kept)})
        listing = answer.get(splice.array) or []
        if len(listing) == len(kept) and all(a is b for a, b in zip(listing, kept, strict=True)):
            return bytes(view)
        parts: list[bytes | memoryview] = [view[:start], splice._count(len(listing))]
        for element in listing:
            if isinstance(element, Kept):
                parts.append(view[element.extent[0] : element.extent[1]])
            else:
                parts.append(splice._encoded(element))
        parts.append(view[stop:])
        return b"".join(parts)
