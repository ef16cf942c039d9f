"""FrameDecoder: fed whole, byte by byte, in random splits, with bad prefixes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import FrameTooLarge, NegativeFrameSize, ProtocolError, Truncated
from protocol.framing import EOF, NEED_DATA, FrameDecoder, encode_frame, size_prefix


def frames_of(decoder: FrameDecoder) -> list[bytes]:
    out = []
    while True:
        frame = decoder.next_frame()
        if frame is NEED_DATA or frame is EOF:
            return out
        assert isinstance(frame, memoryview)
        out.append(bytes(frame))


def test_size_prefix_is_big_endian_int32() -> None:
    assert size_prefix(1) == b"\x00\x00\x00\x01"
    assert size_prefix(0x01020304) == b"\x01\x02\x03\x04"
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"


def test_whole_frame_returned_with_prefix_and_view_is_zero_copy() -> None:
    chunk = b"\x00\x00\x00\x02hi\x00\x00\x00\x01!"
    d = FrameDecoder()
    d.receive_data(chunk)
    first = d.next_frame()
    assert isinstance(first, memoryview)
    assert bytes(first) == b"\x00\x00\x00\x02hi"
    assert first.obj is chunk  # a slice of what was fed, not a copy
    assert bytes(d.next_frame()) == b"\x00\x00\x00\x01!"  # type: ignore[arg-type]
    assert d.next_frame() is NEED_DATA
    assert d.buffered == 0


def test_byte_by_byte() -> None:
    stream = encode_frame(b"hello") + encode_frame(b"") + encode_frame(b"x" * 300)
    d = FrameDecoder()
    got: list[bytes] = []
    for i in range(len(stream)):
        d.receive_data(stream[i : i + 1])
        got += frames_of(d)
    assert got == [encode_frame(b"hello"), encode_frame(b""), encode_frame(b"x" * 300)]


@given(
    bodies=st.lists(st.binary(max_size=200), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=10),
)
def test_any_split_gives_the_same_frames(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(b) for b in bodies)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    d = FrameDecoder()
    got: list[bytes] = []
    for a, b in itertools.pairwise(points):
        d.receive_data(stream[a:b])
        got += frames_of(d)
    d.receive_data(b"")
    assert d.next_frame() is EOF
    assert got == [encode_frame(b) for b in bodies]


def test_trailing_partial_frame_needs_data_then_truncated_at_eof() -> None:
    d = FrameDecoder()
    d.receive_data(encode_frame(b"ok") + b"\x00\x00\x00\x05ab")
    assert bytes(d.next_frame()) == encode_frame(b"ok")  # type: ignore[arg-type]
    assert d.next_frame() is NEED_DATA
    assert d.buffered == 6
    d.receive_data(b"")
    with pytest.raises(Truncated):
        d.next_frame()


def test_eof_inside_size_prefix_is_truncated() -> None:
    d = FrameDecoder()
    d.receive_data(b"\x00\x00")
    d.receive_data(b"")
    with pytest.raises(Truncated):
        d.next_frame()


def test_frames_complete_before_eof_are_still_returned() -> None:
    d = FrameDecoder()
    d.receive_data(encode_frame(b"last"))
    d.receive_data(b"")
    assert bytes(d.next_frame()) == encode_frame(b"last")  # type: ignore[arg-type]
    assert d.next_frame() is EOF


def test_receive_after_eof_is_a_caller_bug() -> None:
    d = FrameDecoder()
    d.receive_data(b"")
    with pytest.raises(RuntimeError):
        d.receive_data(b"x")


def test_too_large_fails_on_the_prefix_alone() -> None:
    d = FrameDecoder(max_frame_size=10)
    d.receive_data(size_prefix(11))
    with pytest.raises(FrameTooLarge) as info:
        d.next_frame()
    assert (info.value.size, info.value.limit) == (11, 10)


def test_exactly_max_size_is_accepted() -> None:
    d = FrameDecoder(max_frame_size=10)
    d.receive_data(encode_frame(b"0123456789"))
    assert len(d.next_frame()) == 14  # type: ignore[arg-type]


def test_negative_size() -> None:
    d = FrameDecoder()
    d.receive_data(b"\xff\xff\xff\xfe")
    with pytest.raises(NegativeFrameSize) as info:
        d.next_frame()
    assert info.value.size == -2


def test_prefix_split_across_chunks() -> None:
    d = FrameDecoder()
    d.receive_data(b"\x00")
    d.receive_data(b"\x00\x00")
    assert d.next_frame() is NEED_DATA
    d.receive_data(b"\x03a")
    d.receive_data(b"bc")
    assert bytes(d.next_frame()) == encode_frame(b"abc")  # type: ignore[arg-type]


def test_mutating_the_fed_buffer_does_not_change_frames() -> None:
    buf = bytearray(encode_frame(b"abc"))
    d = FrameDecoder()
    d.receive_data(buf)
    buf[5] = ord("X")
    assert bytes(d.next_frame()) == encode_frame(b"abc")  # type: ignore[arg-type]


def test_negative_limit_rejected() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=-1)


@given(st.binary(max_size=64), st.integers(min_value=0, max_value=64))
def test_garbage_only_raises_protocol_errors(data: bytes, limit: int) -> None:
    d = FrameDecoder(max_frame_size=limit)
    d.receive_data(data)
    d.receive_data(b"")
    try:
        while d.next_frame() is not EOF:
            pass
    except ProtocolError:
        pass
