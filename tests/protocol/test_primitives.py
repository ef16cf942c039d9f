"""Primitive types: hand-computed bytes, round trips both ways, and garbage."""

from __future__ import annotations

import contextlib
import io
import uuid
from typing import Any

import construct as c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import primitives as p
from protocol.errors import EncodeError, InvalidTaggedFields, InvalidValue, ProtocolError, Truncated


def parse(con: c.Construct, data: bytes) -> Any:
    stream = io.BytesIO(data)
    value = con._parsereport(stream, {}, "")
    assert stream.tell() == len(data), "parser did not use every byte"
    return value


def build(con: c.Construct, value: Any) -> bytes:
    out = io.BytesIO()
    con._build(value, out, {}, "")
    return out.getvalue()


# Hand-computed encodings (Kafka's ByteUtils / protocol guide).
@pytest.mark.parametrize(
    ("con", "value", "wire"),
    [
        (p.UnsignedVarInt, 0, b"\x00"),
        (p.UnsignedVarInt, 127, b"\x7f"),
        (p.UnsignedVarInt, 128, b"\x80\x01"),
        (p.UnsignedVarInt, 300, b"\xac\x02"),
        (p.UnsignedVarInt, 0xFFFFFFFF, b"\xff\xff\xff\xff\x0f"),
        (p.VarInt, 0, b"\x00"),
        (p.VarInt, -1, b"\x01"),
        (p.VarInt, 1, b"\x02"),
        (p.VarInt, -64, b"\x7f"),
        (p.VarInt, 64, b"\x80\x01"),
        (p.VarInt, -(2**31), b"\xff\xff\xff\xff\x0f"),
        (p.VarLong, 2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
        (p.KString(), "ab", b"\x00\x02ab"),
        (p.KString(nullable=True), None, b"\xff\xff"),
        (p.KString(compact=True), "ab", b"\x03ab"),
        (p.KString(compact=True, nullable=True), None, b"\x00"),
        (p.KString(compact=True), "", b"\x01"),
        (p.KBytes(), b"\x01", b"\x00\x00\x00\x01\x01"),
        (p.KBytes(nullable=True), None, b"\xff\xff\xff\xff"),
        (p.KBytes(compact=True, nullable=True), None, b"\x00"),
        (p.KArray(p.Int16), [1, 2], b"\x00\x00\x00\x02\x00\x01\x00\x02"),
        (p.KArray(p.Int16, compact=True), [7], b"\x02\x00\x07"),
        (p.KArray(p.Int16, nullable=True), None, b"\xff\xff\xff\xff"),
        (p.KArray(p.Int16, compact=True, nullable=True), None, b"\x00"),
        (p.Boolean, True, b"\x01"),
        (p.Uuid, uuid.UUID(int=1), b"\x00" * 15 + b"\x01"),
        (p.UInt16, 65535, b"\xff\xff"),
        (p.Float64, 1.5, b"\x3f\xf8" + b"\x00" * 6),
    ],
)
def test_known_encodings(con: c.Construct, value: Any, wire: bytes) -> None:
    assert build(con, value) == wire
    assert parse(con, wire) == value


def test_any_nonzero_byte_reads_as_true() -> None:
    assert parse(p.Boolean, b"\x02") is True


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_uvarint_round_trip(n: int) -> None:
    assert parse(p.UnsignedVarInt, build(p.UnsignedVarInt, n)) == n


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(n: int) -> None:
    assert parse(p.VarLong, build(p.VarLong, n)) == n


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_round_trip(n: int) -> None:
    assert parse(p.VarInt, build(p.VarInt, n)) == n


@pytest.mark.parametrize(
    ("con", "value"),
    [
        (p.UnsignedVarInt, -1),
        (p.UnsignedVarInt, 2**32),
        (p.VarInt, 2**31),
        (p.KString(), None),
        (p.KString(), b"bytes"),
        (p.KBytes(), "text"),
        (p.KArray(p.Int16), "not a list"),
        (p.Uuid, "not a uuid"),
        (p.KStruct([("A", p.Int16)]), [1]),
        (p.KStruct([("A", p.Int16)]), {}),
    ],
)
def test_unbuildable_values_raise_encode_error(con: c.Construct, value: Any) -> None:
    with pytest.raises(EncodeError):
        build(con, value)


def test_classic_string_length_must_fit_int16() -> None:
    with pytest.raises(EncodeError):
        build(p.KString(), "x" * 40000)


def test_struct_fills_missing_fields_with_defaults() -> None:
    s = p.KStruct([("A", p.Int16), ("B", p.KString())], None, {"B": "dflt"})
    assert build(s, {"A": 1}) == b"\x00\x01\x00\x04dflt"


@pytest.mark.parametrize(
    ("con", "wire", "error"),
    [
        (p.UnsignedVarInt, b"\x80\x80\x80\x80\x80\x01", InvalidValue),  # 6 bytes
        (p.UnsignedVarInt, b"\xff\xff\xff\xff\x1f", InvalidValue),  # 33 bits
        (p.UnsignedVarInt, b"\x80", Truncated),
        (p.VarInt, b"\xff\xff\xff\xff\x1f", InvalidValue),
        (p.KString(), b"\xff\xff", InvalidValue),  # null, not nullable
        (p.KString(), b"\xff\xfe", InvalidValue),  # -2
        (p.KString(), b"\x00\x05ab", Truncated),
        (p.KString(), b"\x00\x02\xff\xfe", InvalidValue),  # not UTF-8
        (p.KString(compact=True), b"\x00", InvalidValue),
        (p.KBytes(), b"\x00\x00", Truncated),
        (p.KArray(p.Int32), b"\x7f\xff\xff\xff\x00", Truncated),  # count beyond input
        (p.KArray(p.Int32), b"\xff\xff\xff\xff", InvalidValue),
    ],
)
def test_bad_bytes_raise_specific_errors(con: c.Construct, wire: bytes, error: type) -> None:
    with pytest.raises(error):
        parse(con, wire)


def _tagged_struct() -> p.KStruct:
    return p.KStruct(
        [("A", p.Int8)],
        p.TaggedFields(
            [
                p.TaggedField(0, "T0", p.Int32, -1),
                p.TaggedField(2, "T2", p.KArray(p.Int8, compact=True), ()),
            ]
        ),
    )


def test_tagged_fields_written_only_when_not_default() -> None:
    s = _tagged_struct()
    assert build(s, {"A": 1, "T0": -1, "T2": []}) == b"\x01\x00"
    assert build(s, {"A": 1, "T0": 5}) == b"\x01\x01\x00\x04\x00\x00\x00\x05"
    wire = b"\x01\x02\x00\x04\x00\x00\x00\x05\x02\x02\x02\x09"
    assert build(s, {"A": 1, "T0": 5, "T2": [9]}) == wire
    assert parse(s, wire) == {"A": 1, "T0": 5, "T2": [9]}
    assert parse(s, b"\x01\x00") == {"A": 1, "T0": -1, "T2": []}


def test_unknown_tags_preserved_in_order_and_rewritten() -> None:
    s = _tagged_struct()
    wire = b"\x01\x03\x00\x04\x00\x00\x00\x05\x01\x01\xaa\x07\x00"
    value = parse(s, wire)
    assert value[p.UNKNOWN_TAGS_KEY] == [(1, b"\xaa"), (7, b"")]
    assert build(s, value) == wire


@pytest.mark.parametrize(
    "wire",
    [
        b"\x01\x02\x05\x00\x03\x00",  # tag 5 then tag 3
        b"\x01\x02\x05\x00\x05\x00",  # tag 5 twice
        b"\x01\x01\x00\x05\x00\x00\x00\x05\x00",  # known tag with a 5-byte size holding 4 bytes
    ],
)
def test_bad_tag_sections_rejected(wire: bytes) -> None:
    with pytest.raises(InvalidTaggedFields):
        parse(_tagged_struct(), wire)


def test_unknown_tags_cannot_shadow_known_ones_on_build() -> None:
    with pytest.raises(EncodeError):
        build(_tagged_struct(), {"A": 1, p.UNKNOWN_TAGS_KEY: [(0, b"")]})
    with pytest.raises(EncodeError):
        build(_tagged_struct(), {"A": 1, p.UNKNOWN_TAGS_KEY: [(5, b""), (5, b"")]})


@given(st.binary(max_size=40))
def test_garbage_into_a_tagged_struct_only_raises_protocol_errors(data: bytes) -> None:
    s = p.KStruct(
        [("S", p.KString(compact=True, nullable=True)), ("L", p.KArray(p.VarLong, compact=True))],
        p.TaggedFields([p.TaggedField(1, "U", p.Uuid, uuid.UUID(int=0))]),
    )
    with contextlib.suppress(ProtocolError):
        s._parsereport(io.BytesIO(data), {}, "")


def test_sizeof_is_refused() -> None:
    with pytest.raises(c.SizeofError):
        p.KStruct([("A", p.Int8)]).sizeof()
