"""Fixed-size tagged-field sections (protocol/tagged.py).

Hand-computed sections, and generated ones read back by the scanner: the section is
exactly the size asked, holds the entries unchanged and in order, and the filler is one
unknown tag of zero bytes above every other. (Whole responses carrying a filler are
read by kafka-python in tests/proxy/test_rewrite_tags.py.)
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.scan import skip_tags
from protocol.tagged import FILLER_TAGS, MIN_FILLER, encoded_section, fitted_section

entries_strategy = st.lists(
    st.tuples(st.integers(0, 300), st.binary(max_size=200)), max_size=4, unique_by=lambda e: e[0]
).map(sorted)


def spans(section: bytes) -> dict[int, bytes]:
    """Tag -> value, read by our scanner (which also checks the order and the end)."""
    found: dict[int, tuple[int, int]] = {}
    assert skip_tags(memoryview(section), 0, len(section), found) == len(section)
    return {tag: section[a:b] for tag, (a, b) in found.items()}


@given(entries=entries_strategy, extra=st.integers(0, 20_000))
def test_a_fitted_section_has_the_size_asked_and_the_entries_unchanged(
    entries: list[tuple[int, bytes]], extra: int
) -> None:
    exact = encoded_section(entries)
    size = len(exact) + (0 if extra < MIN_FILLER else extra)
    section = fitted_section(entries, size)
    assert section is not None and len(section) == size
    read = spans(section)
    assert [read[tag] for tag, _ in entries] == [value for _, value in entries]
    fillers = set(read) - {tag for tag, _ in entries}
    if size == len(exact):
        assert section == exact and not fillers
    else:
        (filler,) = fillers
        assert filler in FILLER_TAGS.values() and read[filler] == bytes(len(read[filler]))


def test_hand_computed_sections() -> None:
    # count 2; tag 0, size 2, "ab"; filler tag 0x3FFF (ff 7f), size 2, two zeros
    assert fitted_section([(0, b"ab")], 10) == b"\x02\x00\x02ab\xff\x7f\x02\x00\x00"
    assert fitted_section([(0, b"ab")], 5) == b"\x01\x00\x02ab"
    # 131 bytes of filler room: a 2-byte tag would need 127 zeros (130) or 128 zeros with
    # a 2-byte size (132); a 3-byte tag (ff ff 7f) with 127 zeros makes 131
    section = fitted_section([], 1 + 131)
    assert section == b"\x01\xff\xff\x7f\x7f" + bytes(127)


@pytest.mark.parametrize("short", [1, 2])
def test_what_cannot_fit_is_refused(short: int) -> None:
    entries = [(0, b"abc")]
    exact = encoded_section(entries)
    assert fitted_section(entries, len(exact) - 1) is None  # longer than the room
    assert fitted_section(entries, len(exact) + short) is None  # no filler is that small
    assert fitted_section(entries, len(exact) + MIN_FILLER) is not None


def test_every_size_from_three_bytes_up_is_reached() -> None:
    # the sizes where one filler width jumps (its size varint grows) are reached by the next
    for extra in [*range(MIN_FILLER, 300), 16_384 + 1, 16_384 + 2, 16_384 + 3, 2_100_000]:
        section = fitted_section([], 1 + extra)
        assert section is not None and len(section) == 1 + extra
