"""The sidecar's one rule for frames that deviate from their schema (protocol.leniency).

Expected values are written out by hand: a Heartbeat v0 request and response in bytes.
"""

from __future__ import annotations

import struct

import pytest

from protocol.apis import DEFAULT_REGISTRY as R
from protocol.errors import Truncated
from protocol.leniency import QUIET, REQUEST, RESPONSE, TRAILING_BYTES, Leniency

HEARTBEAT = R.api(12)
#: Heartbeat v0 request: GroupId "g", GenerationId 5, MemberId "m".
REQUEST_V0 = struct.pack(">h", 1) + b"g" + struct.pack(">i", 5) + struct.pack(">h", 1) + b"m"
RESPONSE_V0 = struct.pack(">h", 27)  # ErrorCode REBALANCE_IN_PROGRESS


def test_a_request_is_read_up_to_its_body_and_what_follows_is_reported_once() -> None:
    reported: list[tuple[str, str, str, int]] = []
    value = Leniency(lambda *a: reported.append(a)).request(HEARTBEAT, 0, REQUEST_V0 + b"\x01\x02")
    assert (value.GroupId, value.GenerationId, value.MemberId) == ("g", 5, "m")
    assert reported == [("Heartbeat", REQUEST, TRAILING_BYTES, 2)]


def test_a_response_keeps_the_bytes_after_its_body_for_whoever_writes_it_back() -> None:
    reported: list[tuple[str, str, str, int]] = []
    value, trailing = Leniency(lambda *a: reported.append(a)).response(
        HEARTBEAT, 0, memoryview(RESPONSE_V0 + b"\x00"))
    assert (value.ErrorCode, trailing) == (27, b"\x00")
    assert reported == [("Heartbeat", RESPONSE, TRAILING_BYTES, 1)]


def test_an_exact_frame_is_no_deviation() -> None:
    reported: list[object] = []
    lenient = Leniency(reported.append)
    assert lenient.request(HEARTBEAT, 0, REQUEST_V0).MemberId == "m"
    assert lenient.response(HEARTBEAT, 0, RESPONSE_V0)[1] == b""
    assert reported == []


def test_quiet_reads_as_leniently_and_tells_no_one() -> None:
    assert QUIET.report is None
    assert QUIET.response(HEARTBEAT, 0, RESPONSE_V0 + b"\x09")[1] == b"\x09"


def test_a_body_cut_short_is_still_refused() -> None:
    """Leniency is for what follows a whole body; a client could not read a short one."""
    with pytest.raises(Truncated):
        Leniency().request(HEARTBEAT, 0, REQUEST_V0[:-1])
