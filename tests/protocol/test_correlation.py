"""CorrelationTracker: pairing, acks=0, FIFO violations, SASL v0 raw tokens, garbage."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY, PRODUCE, SASL_HANDSHAKE
from protocol.correlation import (
    SASL_ROUNDS,
    CorrelationMismatch,
    CorrelationTracker,
    FrameKind,
    InFlight,
    produce_acks,
)
from protocol.errors import ProtocolError, Truncated
from protocol.headers import decode_request_header, encode_request_header, encode_response_header
from protocol.schema import encode

METADATA = 3


def request(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """A request frame body: header (the version the API uses) and encoded body."""
    api = DEFAULT_REGISTRY.api(api_key)
    header = encode_request_header(
        api_key, version, correlation_id, "test", api.request_header_version(version)
    )
    return header + encode(api.request, version, body)


def response(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    api = DEFAULT_REGISTRY.api(api_key)
    header = encode_response_header(correlation_id, api.response_header_version(version))
    return header + encode(api.response, version, body)


def produce(version: int, correlation_id: int, acks: int) -> bytes:
    return request(PRODUCE, version, correlation_id, {"Acks": acks, "TransactionalId": "tx"})


def metadata(correlation_id: int, version: int = 12) -> bytes:
    return request(METADATA, version, correlation_id, {"Topics": []})


def handshake(correlation_id: int, mechanism: str, version: int = 0) -> bytes:
    return request(SASL_HANDSHAKE, version, correlation_id, {"Mechanism": mechanism})


def handshake_response(correlation_id: int, error: int = 0) -> bytes:
    return response(SASL_HANDSHAKE, 0, correlation_id, {"ErrorCode": error, "Mechanisms": []})


def send(tracker: CorrelationTracker, frame: bytes) -> InFlight:
    record = tracker.classify(frame)
    tracker.expect(record)
    return record


@pytest.mark.parametrize("version", [0, 2, 3, 8, 9, 12])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_decides_whether_a_response_follows(version: int, acks: int) -> None:
    frame = produce(version, 5, acks)
    assert produce_acks(decode_request_header(frame), frame) == acks
    tracker = CorrelationTracker()
    record = send(tracker, frame)
    assert record.expects_response is (acks != 0)
    assert len(tracker) == (0 if acks == 0 else 1)


def test_responses_pair_in_order() -> None:
    tracker = CorrelationTracker()
    first = send(tracker, metadata(1))
    send(tracker, produce(9, 2, 0))  # no response
    third = send(tracker, metadata(3, version=1))
    assert (first.response_header_version, third.response_header_version) == (1, 0)
    assert tracker.on_response(response(METADATA, 12, 1, {})) is first
    assert tracker.on_response(response(METADATA, 1, 3, {})) is third
    assert len(tracker) == 0


def test_classify_records_nothing() -> None:
    tracker = CorrelationTracker()
    record = tracker.classify(metadata(1))
    assert record.kind is FrameKind.REQUEST and record.correlation_id == 1
    assert len(tracker) == 0


def test_out_of_order_response_is_a_mismatch() -> None:
    tracker = CorrelationTracker()
    send(tracker, metadata(1))
    send(tracker, metadata(2))
    with pytest.raises(CorrelationMismatch, match="expected 1"):
        tracker.on_response(response(METADATA, 12, 2, {}))
    assert len(tracker) == 2  # nothing consumed


def test_response_with_nothing_pending_is_a_mismatch() -> None:
    with pytest.raises(CorrelationMismatch):
        CorrelationTracker().on_response(b"\x00\x00\x00\x01")


def test_unknown_api_is_forwarded_expecting_a_response() -> None:
    frame = encode_request_header(9999, 0, 4, "x", 1) + b"opaque"
    record = CorrelationTracker().classify(frame)
    assert record.header is not None and record.header.api_key == 9999
    assert (record.expects_response, record.response_header_version) == (True, 0)
    produce_v99 = encode_request_header(PRODUCE, 99, 4, "x", 1) + b"\x00\x00"
    assert CorrelationTracker().classify(produce_v99).expects_response


@pytest.mark.parametrize(
    ("mechanism", "rounds"),
    [("PLAIN", 1), ("SCRAM-SHA-256", 2), ("scram-sha-512", 2), ("OAUTHBEARER", 1)],
)
def test_sasl_v0_raw_tokens_for_known_mechanisms(mechanism: str, rounds: int) -> None:
    tracker = CorrelationTracker()
    record = send(tracker, handshake(1, mechanism))
    assert record.sasl_mechanism == mechanism
    tracker.on_response(handshake_response(1))
    assert tracker.in_sasl_exchange
    for _ in range(rounds):
        # A token is a token even when its bytes would read as a request header.
        token = send(tracker, metadata(99))
        assert (token.kind, token.header, token.correlation_id) == (
            FrameKind.SASL_TOKEN,
            None,
            None,
        )
        # OAUTHBEARER's server answers success with an empty token (RFC 7628).
        answer = b"" if mechanism == "OAUTHBEARER" else b"server token, no header"
        assert tracker.on_response(answer) is token
    assert not tracker.in_sasl_exchange
    assert send(tracker, metadata(2)).kind is FrameKind.REQUEST


def test_sasl_v0_oauthbearer_error_challenge_takes_one_more_client_token() -> None:
    """A refused OAUTHBEARER token is answered with the error JSON; the client's 0x01 that
    follows is still a token (and the server's failure after it ends the exchange)."""
    tracker = CorrelationTracker()
    send(tracker, handshake(1, "OAUTHBEARER"))
    tracker.on_response(handshake_response(1))
    send(tracker, b"n,,\x01auth=Bearer x\x01\x01")
    tracker.on_response(b'{"status":"invalid_token"}')
    assert tracker.in_sasl_exchange
    assert send(tracker, b"\x01").kind is FrameKind.SASL_TOKEN
    tracker.on_response(b"another challenge, not answered again")
    assert not tracker.in_sasl_exchange


def test_sasl_v0_gssapi_tokens_until_a_request_appears() -> None:
    tracker = CorrelationTracker()
    send(tracker, handshake(1, "GSSAPI"))
    tracker.on_response(handshake_response(1))
    for token in (b"\x60\x82\x02\x8a\x06\x09", b"", b"\x05\x04\x01\xff" + b"\x00" * 20):
        assert send(tracker, token).kind is FrameKind.SASL_TOKEN
        tracker.on_response(b"\x05\x04\x00\xff")
        assert tracker.in_sasl_exchange
    record = send(tracker, metadata(7))
    assert record.kind is FrameKind.REQUEST and record.correlation_id == 7
    assert not tracker.in_sasl_exchange


def test_sasl_v0_gssapi_token_that_reads_as_an_unknown_api_stays_a_token() -> None:
    tracker = CorrelationTracker()
    send(tracker, handshake(1, "GSSAPI"))
    tracker.on_response(handshake_response(1))
    looks_like_header = encode_request_header(9999, 0, 1, None, 1)
    assert tracker.classify(looks_like_header).kind is FrameKind.SASL_TOKEN


def test_failed_or_unreadable_handshake_keeps_kafka_framing() -> None:
    tracker = CorrelationTracker()
    send(tracker, handshake(1, "PLAIN"))
    tracker.on_response(handshake_response(1, error=33))
    assert not tracker.in_sasl_exchange
    send(tracker, handshake(2, "PLAIN"))
    tracker.on_response(b"\x00\x00\x00\x02\x00")  # body cut short: the client will see it
    assert not tracker.in_sasl_exchange


def test_sasl_handshake_v1_does_not_switch_to_raw_tokens() -> None:
    tracker = CorrelationTracker()
    record = send(tracker, handshake(1, "PLAIN", version=1))
    assert record.sasl_mechanism is None
    tracker.on_response(response(SASL_HANDSHAKE, 1, 1, {"ErrorCode": 0, "Mechanisms": []}))
    assert not tracker.in_sasl_exchange


def test_rounds_table() -> None:
    assert SASL_ROUNDS == {"PLAIN": 1, "OAUTHBEARER": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}


def test_truncated_produce_raises_truncated() -> None:
    frame = produce(9, 1, 1)
    with pytest.raises(Truncated):
        CorrelationTracker().classify(frame[:19])


@settings(max_examples=400)
@given(frame=st.binary(max_size=48), sasl=st.sampled_from([None, "PLAIN", "GSSAPI"]))
def test_garbage_raises_only_protocol_errors(frame: bytes, sasl: str | None) -> None:
    tracker = CorrelationTracker()
    if sasl is not None:
        send(tracker, handshake(1, sasl))
        tracker.on_response(handshake_response(1))
    with contextlib.suppress(ProtocolError):
        tracker.expect(tracker.classify(frame))
    send(tracker, metadata(5))
    while len(tracker):
        try:
            tracker.on_response(frame)
        except ProtocolError:
            break


@settings(max_examples=200)
@given(version=st.sampled_from([0, 3, 9, 13]), cut=st.integers(0, 60), extra=st.binary(max_size=4))
def test_produce_frames_cut_or_padded(version: int, cut: int, extra: bytes) -> None:
    frame = produce(version, 3, 0)[:cut] + extra
    with contextlib.suppress(ProtocolError):
        CorrelationTracker().classify(frame)


@given(st.integers(0, 13), st.one_of(st.none(), st.text(max_size=20), st.binary(max_size=20)),
       st.integers(-2**15, 2**15 - 1), st.binary(max_size=8), st.integers(0, 40))
@settings(max_examples=300)
def test_the_hand_reader_of_acks_agrees_with_the_schema(
    version: int, transactional_id: str | bytes | None, acks: int, rest: bytes, cut: int
) -> None:
    """produce_acks's hand path against the schema's reader, errors included: null, short,
    long (a two-byte uvarint) and invalid UTF-8 TransactionalIds, frames cut anywhere."""
    from protocol.correlation import _produce_acks

    header_bytes = encode_request_header(PRODUCE, version, 7, "c", 2 if version >= 9 else 1)
    if isinstance(transactional_id, str):
        raw: bytes | None = transactional_id.encode()
    else:
        raw = transactional_id  # bytes: perhaps not UTF-8
    if version >= 9:
        body = b"\x00" if raw is None else _uvarint(len(raw) + 1) + raw
    elif version >= 3:
        body = b"\xff\xff" if raw is None else len(raw).to_bytes(2, "big") + raw
    else:
        body = b""
    frame = header_bytes + body + acks.to_bytes(2, "big", signed=True) + rest
    frame = frame[: max(len(header_bytes), len(frame) - cut)]
    header = decode_request_header(frame)

    def outcome(read: Callable[..., int]) -> object:
        try:
            return read(header, frame)
        except ProtocolError as exc:
            return (type(exc), str(exc))

    assert outcome(produce_acks) == outcome(_produce_acks)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
