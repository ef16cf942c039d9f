"""decode/encode over the whole table: cut, padded and wrong input; builder errors; defaults."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import (
    EncodeError,
    ErrorCode,
    InvalidValue,
    TrailingBytes,
    Truncated,
    UnsupportedVersion,
)
from protocol.messages import extensions
from protocol.schema import (
    decode,
    decode_interpreted,
    decode_prefix,
    encode,
    field_default,
    message_construct,
)
from protocol.spec import FieldSpec, MessageSpec, Versions
from tests.protocol.strategies import all_schemas, message_values, plain

CASES = [
    pytest.param(spec, version, id=f"{spec.name}-v{version}")
    for _kind, spec, version in all_schemas()
]


@pytest.mark.parametrize(("spec", "version"), CASES)
@settings(max_examples=1, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_whole_cut_and_padded(spec: MessageSpec, version: int, data: st.DataObject) -> None:
    value = data.draw(message_values(spec, version))
    wire = encode(spec, version, value)
    # Every strict prefix of a message is missing bytes its own fields announced.
    for cut in range(len(wire)):
        with pytest.raises(Truncated):
            decode(spec, version, wire[:cut])
    if wire:  # the interpreted parser (the compiled one's reference) says the same
        with pytest.raises(Truncated):
            decode_interpreted(spec, version, wire[: len(wire) // 2])
    with pytest.raises(TrailingBytes) as info:
        decode(spec, version, wire + b"\x00\x01")
    assert info.value.extra == 2
    assert info.value.error_code == ErrorCode.INVALID_REQUEST
    padded = wire + b"next"
    assert plain(decode(spec, version, padded, allow_trailing=True)) == plain(value)
    obj, used = decode_prefix(spec, version, memoryview(padded))
    assert (plain(obj), used) == (plain(value), len(wire))
    assert plain(decode(spec, version, bytearray(wire))) == plain(value)


def test_unsupported_version() -> None:
    spec = DEFAULT_REGISTRY.api(3).request
    with pytest.raises(UnsupportedVersion) as info:
        decode(spec, 99, b"")
    assert info.value.error_code == ErrorCode.UNSUPPORTED_VERSION
    header = DEFAULT_REGISTRY  # keep the registry import honest
    assert header.checked(3, 12).key == 3
    from protocol.messages import HEADERS

    with pytest.raises(UnsupportedVersion) as no_key:
        message_construct(HEADERS["RequestHeader"], 7)
    assert no_key.value.api_key == -1


METADATA_REQUEST = DEFAULT_REGISTRY.api(3).request
METADATA_RESPONSE = DEFAULT_REGISTRY.api(3).response
PRODUCE_REQUEST = DEFAULT_REGISTRY.api(0).request


@pytest.mark.parametrize(
    ("spec", "version", "value"),
    [
        (METADATA_REQUEST, 12, {"Topics": [{"Name": 5}]}),  # not a string
        (METADATA_REQUEST, 3, {"Topics": [{"Name": None}]}),  # not nullable before v10
        (METADATA_REQUEST, 12, {"Topics": "abc"}),  # not a sequence of structs
        (METADATA_REQUEST, 12, {"Topics": [7]}),  # element not a mapping
        (METADATA_REQUEST, 3, {"Topics": [{"Name": "x" * 40000}]}),  # int16 length overflows
        (METADATA_REQUEST, 12, {"AllowAutoTopicCreation": 5}),  # construct Flag takes only bools?
        (METADATA_RESPONSE, 12, {"ThrottleTimeMs": 1 << 31}),  # int32 overflow
        (METADATA_RESPONSE, 12, {"ThrottleTimeMs": "1"}),
        (METADATA_RESPONSE, 12, {"Topics": [{"TopicId": "not a uuid"}]}),
        (PRODUCE_REQUEST, 9, {"TopicData": [{"PartitionData": [{"Records": "str"}]}]}),
        (PRODUCE_REQUEST, 3, {"TopicData": [{"PartitionData": [{"Records": None}]}], "Acks": None}),
        (METADATA_REQUEST, 12, ["not", "a", "mapping"]),
    ],
)
def test_encode_errors(spec: MessageSpec, version: int, value: Any) -> None:
    try:
        encode(spec, version, value)
    except EncodeError as exc:
        assert exc.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    else:
        assert spec is METADATA_REQUEST and value == {"AllowAutoTopicCreation": 5}


def test_missing_field_without_default_is_an_encode_error() -> None:
    spec = MessageSpec(
        "T",
        "data",
        None,
        Versions(0, 0),
        Versions(1, 0),
        (FieldSpec("A", "int8", Versions(0)),),
    )
    from protocol import primitives as p

    schema = message_construct(spec, 0)
    assert isinstance(schema, p.KStruct)
    schema.defaults.pop("A")
    with pytest.raises(EncodeError, match="missing field 'A'"):
        encode(spec, 0, {})


def test_unknown_field_type_is_an_encode_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # A primitive added to the model without a construct must fail loudly, not pass as a struct.
    from protocol import spec as model

    monkeypatch.setattr(model, "PRIMITIVES", model.PRIMITIVES | {"int128"})
    spec = MessageSpec(
        "T", "data", None, Versions(0, 0), Versions(1, 0), (FieldSpec("A", "int128", Versions(0)),)
    )
    with pytest.raises(EncodeError, match="unknown type"):
        message_construct(spec, 0)


def test_tagged_field_in_a_non_flexible_version_is_an_encode_error() -> None:
    field = FieldSpec("A", "int8", Versions(0), tag=0, tagged=Versions(0))
    spec = MessageSpec("T", "data", None, Versions(0, 0), Versions(1, 0), (field,))
    with pytest.raises(EncodeError, match="non-flexible"):
        message_construct(spec, 0)


def test_bad_values_inside_a_frame() -> None:
    # Metadata v12 request: Topics compact array of 1, TopicId, Name compact string of 1 byte 0xff.
    wire = bytes.fromhex("02") + b"\x00" * 16 + bytes.fromhex("02 ff 00 00 00 00")
    with pytest.raises(InvalidValue, match="UTF-8"):
        decode(METADATA_REQUEST, 12, wire)


def test_field_defaults() -> None:
    fetch = DEFAULT_REGISTRY.api(1).request
    replica_state = next(f for f in fetch.fields if f.name == "ReplicaState")
    assert plain(field_default(replica_state, 15)) == {"ReplicaId": -1, "ReplicaEpoch": -1}
    topics = next(f for f in METADATA_REQUEST.fields if f.name == "Topics")
    assert field_default(topics, 12) == []
    nullable_array = FieldSpec("A", "[]int32", Versions(0), nullable=Versions(0), default=None)
    assert field_default(nullable_array, 0) is None
    heartbeat = DEFAULT_REGISTRY.api(68).response
    assignment = next(f for f in heartbeat.fields if f.name == "Assignment")
    assert field_default(assignment, 0) is None
    topic_id = next(f for f in fetch.fields[-1].fields if f.name == "TopicId") if False else None
    assert topic_id is None
    node_ids = extensions.BROKER_METADATA_REQUEST.fields[0]
    assert field_default(node_ids, 0) == []


def test_nullable_struct_marker() -> None:
    # KIP-893: -1 null, 1 present; Kafka reads any negative marker as null.
    spec = DEFAULT_REGISTRY.api(68).response
    null = encode(spec, 0, {"Assignment": None})
    present = encode(spec, 0, {"Assignment": {"TopicPartitions": []}})
    # marker, then the struct (empty compact array, empty tags), then the message's tags
    assert null[-2:] == b"\xff\x00" and present[-4:] == b"\x01\x01\x00\x00"
    assert decode(spec, 0, null[:-2] + b"\x80\x00")["Assignment"] is None
    zero = present[:-4] + b"\x00\x01\x00\x00"
    assert decode(spec, 0, zero)["Assignment"] == {"TopicPartitions": []}


def test_uuid_values() -> None:
    spec = DEFAULT_REGISTRY.api(3).response
    wire = encode(spec, 12, {"Topics": [{"TopicId": uuid.UUID(int=7), "Name": "a"}]})
    assert decode(spec, 12, wire)["Topics"][0]["TopicId"] == uuid.UUID(int=7)


STREAM_APIS = [0, 1, 3, 8, 11, 18, 10035]


@settings(max_examples=10, suppress_health_check=list(HealthCheck))
@given(data=st.data(), chunk=st.integers(1, 7))
def test_frames_fed_in_small_chunks_decode_the_same(data: st.DataObject, chunk: int) -> None:
    from protocol.framing import EOF, FrameDecoder, encode_frame
    from protocol.headers import decode_request_header, encode_request_header

    sent = []
    stream = b""
    for correlation_id, key in enumerate(STREAM_APIS):
        api = DEFAULT_REGISTRY.api(key)
        assert api.versions.hi is not None
        version = data.draw(st.integers(api.versions.lo, api.versions.hi))
        value = data.draw(message_values(api.request, version))
        header = encode_request_header(
            key, version, correlation_id, "c", api.request_header_version(version)
        )
        stream += encode_frame(header + encode(api.request, version, value))
        sent.append((key, version, plain(value)))
    decoder = FrameDecoder()
    got = []
    for start in range(0, len(stream) + 1, chunk):
        decoder.receive_data(stream[start : start + chunk])  # the last call may be b"": EOF
        while isinstance(frame := decoder.next_frame(), memoryview):
            header = decode_request_header(frame[4:])
            api = DEFAULT_REGISTRY.api(header.api_key)
            body = decode(api.request, header.api_version, frame[4 + header.size :])
            got.append((header.api_key, header.api_version, plain(body)))
    decoder.receive_data(b"")
    assert decoder.next_frame() is EOF
    assert got == sent
