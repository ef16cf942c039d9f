"""Tagged-field sections of a fixed size: rewriting the tail of a message already on its way.

A forwarder that passes a large response on as it arrives (cut-through) has sent the
size prefix before it reaches the top-level tagged fields at the end. If it must change
one of them (a KIP-951 ``NodeEndpoints`` naming a broker), the new section must take
exactly the bytes of the old. :func:`fitted_section` writes the entries and fills what is
left with one more tagged field that no reader knows: every Kafka reader skips a tag it
does not know by its size (KIP-482), the Java client keeps it as an unknown tag, and tags
stay in increasing order because the filler's number is above any Kafka assigns.

The filler's number is chosen by the width of its varint (2 to 5 bytes), which is what
lets every size from the entries' own length plus three bytes be reached exactly: a
filler of ``k`` zero bytes takes ``width + len(varint(k)) + k`` bytes, and the few sizes
one width skips (where ``k`` needs a longer varint) the next width reaches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from protocol.primitives import encode_uvarint

#: Filler tag numbers by the width of their varint (all above any tag Kafka assigns).
FILLER_TAGS: Final = {2: 0x3FFF, 3: 0x1FFFFF, 4: 0xFFFFFFF, 5: 0x7FFFFFFF}
#: The smallest filler: a 2-byte tag, a 1-byte size, no value.
MIN_FILLER = 3


def _fields(entries: Sequence[tuple[int, bytes | memoryview]]) -> bytes:
    out = bytearray()
    for tag, value in entries:
        out += encode_uvarint(tag)
        out += encode_uvarint(len(value))
        out += value
    return bytes(out)


def encoded_section(entries: Sequence[tuple[int, bytes | memoryview]]) -> bytes:
    """A tagged-field section holding ``entries`` (``(tag, value)``, in increasing tag order)."""
    return encode_uvarint(len(entries)) + _fields(entries)


def fitted_section(entries: Sequence[tuple[int, bytes | memoryview]], size: int) -> bytes | None:
    """A section of exactly ``size`` bytes holding ``entries``, then a filler if needed;
    ``None`` when they cannot fit (longer, or not :data:`MIN_FILLER` bytes shorter)."""
    fields = _fields(entries)
    exact = encode_uvarint(len(entries)) + fields
    if len(exact) == size:
        return exact
    head = encode_uvarint(len(entries) + 1) + fields
    for width, tag in FILLER_TAGS.items():
        filler = size - len(head) - width  # what the size varint and the zeros share
        for size_width in range(1, 6):
            zeros = filler - size_width
            if zeros >= 0 and len(encode_uvarint(zeros)) == size_width:
                return head + encode_uvarint(tag) + encode_uvarint(zeros) + bytes(zeros)
    return None
