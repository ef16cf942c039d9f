"""Picking fields without decoding (protocol/pick.py).

Expected values come from the message's field values themselves (drawn by Hypothesis),
never from the picker: the wire is built by kafka-python (an independent encoder) for the
messages the audit reads — Produce requests and responses, Fetch and Metadata responses,
every version both sides know — and by our construct encoder for a sample of every other
schema, with every field that can be picked selected. On arbitrary bytes the picker
agrees with the construct decoder: what the decoder accepts, the picker reads alike; what
the picker refuses, the decoder refuses.
"""

from __future__ import annotations

import re
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import DecodeError, InvalidValue, ProtocolError, Truncated, UnsupportedVersion
from protocol.messages import HEADERS
from protocol.pick import EXTENT, Picker, Selection, Unpickable
from protocol.schema import decode, encode, field_default
from protocol.spec import FieldSpec, MessageSpec
from tests.protocol.strategies import all_schemas, message_values
from tests.protocol.test_differential import KP_CLASSES, KP_MODE, to_kafka_python

PRODUCE, FETCH, METADATA = (DEFAULT_REGISTRY.api(k) for k in (0, 1, 3))

#: What the audit picks, per message (the selections of observers/traffic.py).
AUDITED: list[tuple[MessageSpec, Selection]] = [
    (PRODUCE.request, {"Acks": None, "TopicData": {
        "Name": None, "TopicId": None, "PartitionData": {"Index": None, "Records": None}}}),
    (PRODUCE.response, {"Responses": {"Name": None, "TopicId": None, "PartitionResponses": {
        "Index": None, "ErrorCode": None}}}),
    (FETCH.response, {"ThrottleTimeMs": None, "ErrorCode": None, "Responses": {
        "Topic": None, "TopicId": None, "Partitions": {
            "PartitionIndex": None, "ErrorCode": None, "Records": None}}}),
    (METADATA.response, {"Topics": {"Name": None, "TopicId": None}}),
]  # fmt: skip


def _kp_cases() -> list[Any]:
    cases = []
    for spec, selection in AUDITED:
        assert spec.api_key is not None
        cls = KP_CLASSES[(spec.api_key, spec.kind)]
        hi = min(DEFAULT_REGISTRY.api(spec.api_key).versions.hi or 0, cls.max_version)
        for version in range(spec.valid.lo, hi + 1):
            cases.append(pytest.param(spec, selection, cls, version, id=f"{spec.name}-v{version}"))
    return cases


KP_CASES = _kp_cases()
EXAMPLES = max(5, settings().max_examples // 10)


def expected(
    fields: tuple[FieldSpec, ...], selection: Selection, version: int, value: Any
) -> tuple[Any, ...]:
    """What picking ``selection`` from the struct ``value`` must give (bytes, not spans)."""
    out: list[Any] = []
    for f in fields:
        if f.name not in selection:
            continue
        if not f.present_in(version):
            default = field_default(f, version)
            out.append(tuple(default) if isinstance(default, list) else default)
            continue
        inner, v = selection[f.name], value[f.name]
        if inner is not None and v is not None:
            out.append([expected(f.fields, inner, version, item) for item in v])
        else:
            out.append(v)
    return tuple(out)


def spans_to_bytes(
    fields: tuple[FieldSpec, ...], selection: Selection, picked: tuple[Any, ...], wire: bytes
) -> tuple[Any, ...]:
    """``picked`` with each bytes/records span replaced by the bytes it spans."""
    out: list[Any] = []
    chosen = [f for f in fields if f.name in selection]
    assert len(chosen) == len(picked)
    for f, v in zip(chosen, picked, strict=True):
        inner = selection[f.name]
        if inner is not None and isinstance(v, list):
            v = [spans_to_bytes(f.fields, inner, item, wire) for item in v]
        elif f.type in ("bytes", "records") and isinstance(v, tuple):
            v = wire[v[0] : v[1]]
        out.append(v)
    return tuple(out)


def everything(fields: tuple[FieldSpec, ...], version: int) -> Selection:
    """Every field a picker can read at ``version`` (absent ones included: defaults)."""
    selection: dict[str, Any] = {}
    for f in fields:
        if f.tagged_in(version) or (f.is_struct and not f.is_array) or (f.is_array and not f.is_struct):
            continue
        selection[f.name] = everything(f.fields, version) if f.is_struct else None
    return selection


def same_three_ways(picker: Picker, version: int, wire: bytes, picked: tuple[Any, ...]) -> None:
    """The compiled code reads a well-formed message itself (no fallback), and agrees
    with the interpreter."""
    assert picker.compiled(version)(memoryview(wire), 0, len(wire)) == picked
    assert picker.interpret(version, wire) == picked


# -- the audit's messages, encoded by kafka-python -------------------------------------


@pytest.mark.parametrize(("spec", "selection", "cls", "version"), KP_CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_picks_what_kafka_python_encoded(
    spec: MessageSpec, selection: Selection, cls: Any, version: int, data: st.DataObject
) -> None:
    value = data.draw(message_values(spec, version, KP_MODE))
    wire = bytes(to_kafka_python(cls._struct, spec.fields, value, version).encode(version=version))
    picker = Picker(spec, selection)
    picked = picker.pick(version, wire)
    assert spans_to_bytes(spec.fields, selection, picked, wire) == expected(
        spec.fields, selection, version, value
    )
    same_three_ways(picker, version, wire, picked)
    # At an offset, from a memoryview: spans are offsets in what was given.
    shifted = picker.pick(version, memoryview(b"abc" + wire), 3)
    assert spans_to_bytes(spec.fields, selection, shifted, b"abc" + wire) == expected(
        spec.fields, selection, version, value
    )


def test_the_audited_versions_are_all_covered() -> None:
    versions = {(p.values[0].name, p.values[3]) for p in KP_CASES}
    assert {("ProduceRequest", v) for v in range(14)} <= versions
    assert {("FetchResponse", v) for v in range(18)} <= versions


# -- every schema, everything pickable -------------------------------------------------

ALL = [
    pytest.param(spec, version, id=f"{spec.name}-v{version}")
    for _kind, spec, version in all_schemas()
]


@pytest.mark.parametrize(("spec", "version"), ALL[::5])
@settings(max_examples=max(3, EXAMPLES // 4))
@given(data=st.data())
def test_picks_every_pickable_field(spec: MessageSpec, version: int, data: st.DataObject) -> None:
    value = data.draw(message_values(spec, version))
    wire = encode(spec, version, value)
    selection = everything(spec.fields, version)
    picker = Picker(spec, selection)
    picked = picker.pick(version, wire)
    assert spans_to_bytes(spec.fields, selection, picked, wire) == expected(
        spec.fields, selection, version, value
    )
    same_three_ways(picker, version, wire, picked)


def _struct_arrays(spec: MessageSpec, version: int) -> list[FieldSpec]:
    """The top-level arrays of structs of ``spec`` at ``version`` (not tagged)."""
    return [f for f in spec.fields
            if f.present_in(version) and not f.tagged_in(version) and f.is_array and f.is_struct]  # fmt: skip


WITH_ARRAYS = [p for p in ALL if _struct_arrays(*p.values)]


@pytest.mark.parametrize(("spec", "version"), WITH_ARRAYS[::6])
@settings(max_examples=max(3, EXAMPLES // 4))
@given(data=st.data())
def test_extents_splice_out_elements_and_empty_selections_count(
    spec: MessageSpec, version: int, data: st.DataObject
) -> None:
    """Cutting element i's extent out of the wire and lowering the count gives what the
    encoder writes for the message without element i; an empty selection counts."""
    field = data.draw(st.sampled_from(_struct_arrays(spec, version)))
    value = data.draw(message_values(spec, version))
    items = value[field.name]
    wire = encode(spec, version, value)
    picker = Picker(spec, {field.name: {EXTENT: None}})
    (extents,) = picker.pick(version, wire)
    same_three_ways(picker, version, wire, (extents,))
    (counted,) = Picker(spec, {field.name: {}}).pick(version, wire)
    if items is None:
        assert extents is None and counted is None
        return
    assert counted == [()] * len(items)
    assert [e for (e,) in extents] == sorted(e for (e,) in extents)
    if not items:
        return
    compact = spec.is_flexible(version) if field.flexible is None else version in field.flexible

    def count(n: int) -> bytes:
        if not compact:
            return struct.pack(">i", n)
        n, out = n + 1, b""  # unsigned LEB128, by hand
        while n >= 0x80:
            out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
        return out + bytes([n])

    first = extents[0][0][0]
    start = first - len(count(len(items)))
    i = data.draw(st.integers(0, len(items) - 1))
    (cut,) = extents[i]
    spliced = wire[:start] + count(len(items) - 1) + wire[first : cut[0]] + wire[cut[1] :]
    shorter = dict(value)
    shorter[field.name] = [item for j, item in enumerate(items) if j != i]
    assert spliced == encode(spec, version, shorter)


def test_extent_by_hand() -> None:
    # ProduceRequest v3: two topics, the second with no partitions.
    one = struct.pack(">h", 2) + b"t1" + struct.pack(">i", 1) + struct.pack(">i", 7) + struct.pack(">i", 1) + b"R"
    two = struct.pack(">h", 2) + b"t2" + struct.pack(">i", 0)
    wire = produce_v3(struct.pack(">i", 2) + one + two)
    first = len(wire) - len(one) - len(two)
    picker = Picker(PRODUCE.request, {"TopicData": {"Name": None, EXTENT: None, "PartitionData": {}}})
    assert picker.pick(3, wire) == ([("t1", [()], (first, first + len(one))),
                                     ("t2", [], (first + len(one), len(wire)))],)  # fmt: skip
    assert picker.interpret(3, wire) == picker.compiled(3)(memoryview(wire), 0, len(wire))


# -- arbitrary bytes -------------------------------------------------------------------

GARBAGE = [
    pytest.param(spec, version, id=f"{spec.name}-v{version}")
    for spec, _ in AUDITED
    for version in range(spec.valid.lo, (spec.valid.hi or 0) + 1)
]


@pytest.mark.parametrize(("spec", "version"), GARBAGE)
@settings(max_examples=EXAMPLES * 4)
@given(data=st.binary(max_size=80))
def test_agrees_with_the_decoder_on_arbitrary_bytes(spec: MessageSpec, version: int, data: bytes) -> None:
    selection = everything(spec.fields, version)
    picker = Picker(spec, selection)
    try:
        decoded = decode(spec, version, data, allow_trailing=True)
    except DecodeError:
        decoded = None
    try:
        picked = picker.pick(version, data)
    except DecodeError:
        assert decoded is None  # whatever the picker refuses, the decoder refuses
        return
    if decoded is not None:
        assert spans_to_bytes(spec.fields, selection, picked, data) == expected(
            spec.fields, selection, version, decoded
        )


# -- by hand ---------------------------------------------------------------------------

PRODUCE_SELECTION = AUDITED[0][1]


def produce_v3(topics: bytes, transactional_id: bytes = b"\xff\xff") -> bytes:
    """ProduceRequest v3 (not flexible) written out from the spec: transactional id,
    acks 1, timeout 500, then ``topics`` (the array, count included)."""
    return transactional_id + struct.pack(">hi", 1, 500) + topics


def test_hand_written_produce_request() -> None:
    records = b"R" * 5
    topics = (struct.pack(">i", 1) + struct.pack(">h", 2) + b"t1" + struct.pack(">i", 1)
              + struct.pack(">i", 7) + struct.pack(">i", 5) + records)
    wire = produce_v3(topics)
    acks, picked_topics = Picker(PRODUCE.request, PRODUCE_SELECTION).pick(3, wire)
    assert acks == 1
    # Name, then TopicId (v13+ only: its default), then the partitions.
    assert picked_topics == [("t1", uuid.UUID(int=0), [(7, (len(wire) - 5, len(wire)))])]
    # A null records field, a null (nullable) array, an empty one.
    null_records = topics[:-9] + struct.pack(">i", -1)
    assert Picker(PRODUCE.request, PRODUCE_SELECTION).pick(3, produce_v3(null_records))[1] == [
        ("t1", uuid.UUID(int=0), [(7, None)])]


def test_null_arrays_and_strings() -> None:
    # MetadataRequest v1+: Topics is a nullable array; v4 adds a boolean after it.
    picker = Picker(METADATA.request, {"Topics": {"Name": None}, "AllowAutoTopicCreation": None})
    assert picker.pick(4, struct.pack(">i", -1) + b"\x01") == (None, True)
    assert picker.pick(1, struct.pack(">i", -1)) == (None, True)  # v1: the field's default
    assert picker.pick(4, struct.pack(">i", 0) + b"\x00") == ([], False)
    # ProduceRequest v3: TransactionalId is a nullable string.
    assert Picker(PRODUCE.request, {"TransactionalId": None}).pick(3, produce_v3(
        struct.pack(">i", 0))) == (None,)
    assert Picker(PRODUCE.request, {"TransactionalId": None}).pick(3, produce_v3(
        struct.pack(">i", 0), struct.pack(">h", 2) + b"tx")) == ("tx",)


def test_field_with_its_own_flexible_versions() -> None:
    # RequestHeader v2 is flexible, but ClientId declares flexibleVersions "none": its
    # length stays an int16 (protocol/headers.py relies on it).
    header = HEADERS["RequestHeader"]
    wire = struct.pack(">hhih", 3, 12, 7, 2) + b"id" + b"\x00"
    assert Picker(header, {"CorrelationId": None, "ClientId": None}).pick(2, wire) == (7, "id")


@pytest.mark.parametrize(
    ("selection", "version", "data", "error", "message"),
    [
        # null where the array is not nullable (Produce TopicData)
        (PRODUCE_SELECTION, 3, produce_v3(struct.pack(">i", -1)), InvalidValue, "null where not nullable"),
        (PRODUCE_SELECTION, 3, produce_v3(struct.pack(">i", -2)), InvalidValue, "invalid length -2"),
        # an array announcing more elements than bytes left
        (PRODUCE_SELECTION, 3, produce_v3(struct.pack(">i", 9)), Truncated, "announces 9 elements"),
        # a string cut short, and one that is not UTF-8
        (PRODUCE_SELECTION, 3, produce_v3(struct.pack(">ih", 1, 4) + b"ab"), Truncated, "needed 4"),
        (PRODUCE_SELECTION, 3, produce_v3(struct.pack(">ih", 1, 2) + b"\xff\xfe" + bytes(4)),
         InvalidValue, "not valid UTF-8"),
        # a number cut short (acks)
        (PRODUCE_SELECTION, 3, b"\xff\xff\x00", Truncated, "needed 2"),
        # a records field longer than what is left
        (PRODUCE_SELECTION, 3, produce_v3(struct.pack(">ihbbii", 1, 2, 116, 49, 1, 0) + struct.pack(">i", 9)),
         Truncated, "needed 9"),
        # a non-nullable records field... is nullable everywhere; a nullable string refused:
        ({"TransactionalId": None}, 3, struct.pack(">h", -3), InvalidValue, "invalid length -3"),
    ],
)
def test_refusals(selection: Selection, version: int, data: bytes, error: type[ProtocolError], message: str) -> None:
    with pytest.raises(error, match=message):
        Picker(PRODUCE.request, selection).pick(version, data)
    with pytest.raises(DecodeError):
        decode(PRODUCE.request, version, data, allow_trailing=True)


def test_uuid_cut_short() -> None:
    # ProduceRequest v13 (flexible): null transactional id, acks, timeout, one topic, id cut.
    wire = b"\x00" + struct.pack(">hi", 1, 500) + b"\x02" + bytes(10)
    with pytest.raises(Truncated, match="needed 16"):
        Picker(PRODUCE.request, PRODUCE_SELECTION).pick(13, wire)


def test_selections_that_cannot_be_picked() -> None:
    with pytest.raises(KeyError, match=re.escape("ProduceRequest.TopicData has no field 'Nom'")):
        Picker(PRODUCE.request, {"TopicData": {"Nom": None}})
    with pytest.raises(Unpickable, match="only arrays of structs"):
        Picker(PRODUCE.request, {"TopicData": None}).program(3)
    with pytest.raises(Unpickable, match="arrays of primitives"):
        Picker(PRODUCE.request, {"Acks": {}}).program(3)
    # DescribeTopicPartitionsRequest: Cursor is a (nullable) struct, not an array.
    describe = DEFAULT_REGISTRY.api(75).request
    with pytest.raises(Unpickable, match="only arrays of structs"):
        Picker(describe, {"Cursor": {"TopicName": None}}).program(0)
    # FetchRequest: ForgottenTopicsData.Partitions is an array of int32; ClusterId a
    # tagged field from v12.
    fetch = FETCH.request
    with pytest.raises(Unpickable, match="arrays of primitives"):
        Picker(fetch, {"ForgottenTopicsData": {"Partitions": None}}).program(7)
    with pytest.raises(Unpickable, match="ClusterId is a tagged field at version 12"):
        Picker(fetch, {"ClusterId": None}).program(12)
    assert Picker(fetch, {"ClusterId": None}).pick(11, bytes(43)) == (None,)  # absent: default
    with pytest.raises(UnsupportedVersion):
        Picker(PRODUCE.request, PRODUCE_SELECTION).program(99)


def test_an_element_of_an_array_of_structs_is_a_message_of_its_own() -> None:
    topic = METADATA.response.element("Topics")
    assert (topic.name, topic.valid, topic.flexible) == ("MetadataResponse.Topics[]", METADATA.response.valid,
                                                         METADATA.response.flexible)
    assert [f.name for f in topic.fields][:3] == ["ErrorCode", "Name", "TopicId"]
    for name in ("ClusterId", "Nothing"):  # a string, and no field at all
        with pytest.raises(ValueError, match=f"MetadataResponse has no array of structs '{name}'"):
            METADATA.response.element(name)
