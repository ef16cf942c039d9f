"""FrameDecoder.pending: what a memory budget reserves for the frame being gathered."""

from protocol.framing import NEED_DATA, FrameDecoder


def test_pending_is_the_whole_frame_once_its_size_is_known() -> None:
    decoder = FrameDecoder()
    assert decoder.pending == 0
    decoder.receive_data(b"\x00\x00")
    assert decoder.next_frame() is NEED_DATA
    assert decoder.pending == 2  # size prefix not complete: what is buffered
    decoder.receive_data(b"\x00\x0a" + b"x" * 3)
    assert decoder.next_frame() is NEED_DATA
    assert decoder.pending == 14  # 4-byte prefix + 10-byte body, 7 bytes of it here
    decoder.receive_data(b"y" * 7)
    frame = decoder.next_frame()
    assert bytes(frame) == b"\x00\x00\x00\x0a" + b"xxx" + b"y" * 7  # type: ignore[arg-type]
    assert decoder.pending == 0
