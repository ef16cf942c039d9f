"""Request/response headers: the version rules, hand-written bytes, and garbage.

Expected bytes are written out by hand from PROTOCOL_NOTES.md ("Frames and headers").
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import API_VERSIONS, CONTROLLED_SHUTDOWN, DEFAULT_REGISTRY, PRODUCE, ApiRegistry
from protocol.errors import InvalidTaggedFields, InvalidValue, ProtocolError, Truncated
from protocol.framing import FrameDecoder, encode_frame
from protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    peek_correlation_id,
    peek_request,
    request_header_version,
)

# Metadata v12 (flexible): header v2, ClientId with an int16 length, then an empty tag section.
METADATA_V12 = bytes.fromhex("0003 000c 0000002a 0007") + b"rdkafka" + b"\x00"
# Metadata v1 (not flexible): header v1, no tag section.
METADATA_V1 = bytes.fromhex("0003 0001 0000002a ffff")


def test_flexible_request_header_is_v2_with_classic_client_id() -> None:
    header = decode_request_header(METADATA_V12 + b"BODY")
    assert header == RequestHeader(3, 12, 42, "rdkafka", 2, len(METADATA_V12))
    assert encode_request_header(3, 12, 42, "rdkafka", 2) == METADATA_V12


def test_client_id_is_never_compact() -> None:
    # A compact length would be 0x08 ("rdkafka" + 1); the header keeps int16 0x0007.
    assert encode_request_header(18, 3, 1, "rdkafka", 2)[8:10] == b"\x00\x07"


def test_non_flexible_request_header_is_v1_with_null_client_id() -> None:
    header = decode_request_header(METADATA_V1)
    assert (header.client_id, header.header_version, header.size) == (None, 1, 10)
    assert encode_request_header(3, 1, 42, None, 1) == METADATA_V1


def test_controlled_shutdown_v0_uses_request_header_v0() -> None:
    # Not a client API (no schema here), but its v0 header still delimits correctly.
    assert CONTROLLED_SHUTDOWN not in DEFAULT_REGISTRY
    assert request_header_version(CONTROLLED_SHUTDOWN, 0) == 0
    assert request_header_version(CONTROLLED_SHUTDOWN, 1) == 1
    frame = bytes.fromhex("0007 0000 00000005") + b"\x00\x00\x00\x01"
    header = decode_request_header(frame)
    assert header == RequestHeader(7, 0, 5, None, 0, 8)
    assert encode_request_header(7, 0, 5, "ignored", 0) == frame[:8]


def test_api_versions_response_header_is_always_v0() -> None:
    api = DEFAULT_REGISTRY.api(API_VERSIONS)
    assert api.is_flexible(3)
    assert api.request_header_version(3) == 2
    assert [api.response_header_version(v) for v in range(5)] == [0, 0, 0, 0, 0]
    produce = DEFAULT_REGISTRY.api(PRODUCE)
    assert (produce.response_header_version(8), produce.response_header_version(9)) == (0, 1)


def test_header_version_of_unknown_requests_is_1() -> None:
    assert request_header_version(9999, 0) == 1
    assert request_header_version(3, 999) == 1
    header = decode_request_header(bytes.fromhex("270f 0000 00000001 0001") + b"x")
    assert (header.api_key, header.client_id, header.header_version) == (9999, "x", 1)


def test_custom_registry_moves_broker_metadata() -> None:
    registry = ApiRegistry(broker_metadata_key=20000)
    frame = bytes.fromhex("4e20 0001 00000001 0000 00")
    assert decode_request_header(frame, registry).header_version == 2
    assert decode_request_header(frame).header_version == 1  # unknown to the default


def test_unknown_request_header_tags_are_kept() -> None:
    wire = bytes.fromhex("0003 000c 00000001 ffff 02 00 01 aa 05 00")
    header = decode_request_header(wire)
    assert header.unknown_tags == ((0, b"\xaa"), (5, b""))
    assert header.size == len(wire)
    assert encode_request_header(3, 12, 1, None, 2, header.unknown_tags) == wire


def test_response_headers() -> None:
    assert encode_response_header(7, 0) == b"\x00\x00\x00\x07"
    assert encode_response_header(7, 1) == b"\x00\x00\x00\x07\x00"
    assert decode_response_header(b"\x00\x00\x00\x07rest", 0) == (7, 4)
    assert decode_response_header(b"\x00\x00\x00\x07\x00rest", 1) == (7, 5)
    assert peek_correlation_id(b"\xff\xff\xff\xfe") == -2
    assert peek_request(METADATA_V12) == (3, 12, 42)


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        (b"", Truncated),
        (METADATA_V12[:7], Truncated),
        (METADATA_V12[:9], Truncated),
        (METADATA_V12[:12], Truncated),
        (METADATA_V12[:-1], Truncated),
        (bytes.fromhex("0003 000c 00000001 fffe"), InvalidValue),
        (bytes.fromhex("0003 000c 00000001 0001 ff 00"), InvalidValue),  # not UTF-8
        (bytes.fromhex("0003 000c 00000001 ffff 02 05 00 01 00"), InvalidTaggedFields),
        (bytes.fromhex("0003 000c 00000001 ffff ffffffffff"), InvalidValue),  # varint > 5 bytes
    ],
)
def test_bad_request_headers(wire: bytes, error: type[ProtocolError]) -> None:
    with pytest.raises(error):
        decode_request_header(wire)


@pytest.mark.parametrize(("wire", "version"), [(b"\x00\x00\x01", 0), (b"\x00\x00\x00\x01", 1)])
def test_truncated_response_headers(wire: bytes, version: int) -> None:
    with pytest.raises(Truncated):
        decode_response_header(wire, version)
    with pytest.raises(Truncated):
        peek_correlation_id(wire[:3])


def test_headers_of_frames_fed_byte_by_byte() -> None:
    stream = encode_frame(METADATA_V12 + b"body") + encode_frame(METADATA_V1)
    decoder = FrameDecoder()
    headers = []
    for i in range(len(stream)):
        decoder.receive_data(stream[i : i + 1])
        frame = decoder.next_frame()
        if isinstance(frame, memoryview):
            headers.append(decode_request_header(frame[4:]))
    assert [(h.api_version, h.size) for h in headers] == [(12, 18), (1, 10)]


@settings(max_examples=500)
@given(st.binary(max_size=40))
def test_random_bytes_raise_only_protocol_errors(wire: bytes) -> None:
    for decoder in (
        decode_request_header,
        peek_request,
        peek_correlation_id,
        lambda w: decode_response_header(w, 0),
        lambda w: decode_response_header(w, 1),
    ):
        with contextlib.suppress(ProtocolError):
            decoder(wire)


@given(
    api_key=st.sampled_from([0, 3, 7, 18, 10035, 30000]),
    api_version=st.integers(0, 20),
    correlation_id=st.integers(-(1 << 31), (1 << 31) - 1),
    client_id=st.none() | st.text(max_size=30),
    tags=st.lists(st.tuples(st.integers(0, 99), st.binary(max_size=3)), unique_by=lambda t: t[0]),
    trailing=st.binary(max_size=8),
)
def test_request_header_round_trip(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    tags: list[tuple[int, bytes]],
    trailing: bytes,
) -> None:
    version = request_header_version(api_key, api_version)
    tags = sorted(tags) if version == 2 else []
    wire = encode_request_header(api_key, api_version, correlation_id, client_id, version, tags)
    header = decode_request_header(wire + trailing)
    assert header == RequestHeader(
        api_key,
        api_version,
        correlation_id,
        client_id if version else None,
        version,
        len(wire),
        tuple(tags),
    )


def _outcome(read: object, *args: object) -> object:
    """What a reader returns, or the type and text of the error it raises."""
    try:
        return read(*args)  # type: ignore[operator]
    except ProtocolError as exc:
        return (type(exc), str(exc))


# A header start the fast reader takes (a known key and version, a ClientId length) and
# what may follow: the strategy leans on the shapes that are close to valid.
_KNOWN = sorted(DEFAULT_REGISTRY.header_versions)


@given(
    st.sampled_from([*_KNOWN, (7, 0), (18, 99), (999, 0)]),
    st.integers(-2**31, 2**31 - 1),
    st.one_of(st.integers(-3, 40), st.integers(-2**15, 2**15 - 1)),
    st.binary(max_size=48),
)
@settings(max_examples=400)
def test_the_struct_reader_agrees_with_the_schema(
    key_version: tuple[int, int], correlation_id: int, length: int, rest: bytes
) -> None:
    """decode_request_header's struct path against the schema's reader (the reference),
    errors included: valid UTF-8 and not, tags and none, truncated anywhere."""
    from protocol.headers import _decode_request_header

    key, version = key_version
    wire = key.to_bytes(2, "big") + version.to_bytes(2, "big", signed=True) \
        + correlation_id.to_bytes(4, "big", signed=True) + length.to_bytes(2, "big", signed=True) + rest
    for cut in (len(wire), len(wire) - 1, 11, 10, 9):
        frame = wire[: max(cut, 0)]
        assert _outcome(decode_request_header, frame) == _outcome(_decode_request_header, frame, DEFAULT_REGISTRY)
        assert _outcome(decode_request_header, memoryview(frame)) == \
            _outcome(_decode_request_header, frame, DEFAULT_REGISTRY)


def test_the_struct_reader_hands_tags_and_bad_utf8_to_the_schema() -> None:
    # Metadata v12 with one unknown tag (tag 5, 2 bytes): the schema reads and keeps it.
    tagged = bytes.fromhex("0003 000c 0000002a 0001") + b"c" + bytes.fromhex("01 05 02 abcd")
    assert decode_request_header(tagged) == RequestHeader(3, 12, 42, "c", 2, len(tagged), ((5, b"\xab\xcd"),))
    with pytest.raises(ProtocolError):
        decode_request_header(bytes.fromhex("0003 0001 0000002a 0002 ff fe"))
